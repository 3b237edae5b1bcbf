//! The gate: a handful of literals that every line able to start an incident holds, found at
//! memory speed, so that past the head of a large log the anchor DFA runs only near them.
//!
//! The recognisers' few hundred anchors cannot be searched faster than one dependent table
//! lookup per byte (see [`super::anchors`]); a vectorised search can only take a few
//! literals. So the scan has two tiers (README "Speed and memory"):
//!
//! - the gate's literals (`mem`, `oom`, `kill`, `alloc`, ...): every OOM message, kill,
//!   exit status and memory reading holds one of them, whatever the engine (but for a
//!   shell's `Killed` in another language, `已杀死`, `Getötet`: a shell prints it last, so it
//!   is read in the tail, see `engines::host`);
//! - the recognisers' anchors, some of which (banners, configuration, launch arguments,
//!   phase markers) hold none: the scanner walks them over the whole of the log's head and
//!   tail and over a window around each line the gate found ([`super::scanner`]).
//!
//! The search is Teddy (from Hyperscan, as in `aho-corasick`'s packed searcher and
//! ripgrep): each literal's first three bytes go into one of eight buckets, and 32 bytes at
//! a time are looked up by their low and high nibbles (`vpshufb`) in three small tables; a
//! position where all three agree on a bucket is checked against that bucket's literals.
//! ASCII case is ignored by folding bytes with `| 0x20`, which maps `A`-`Z` to `a`-`z` (and
//! a few punctuation bytes onto others: harmless, every candidate is checked against the
//! literal, folded the same way); the high-nibble tables fold for the search (a table row
//! for both nibbles a fold joins), so the loop reads the bytes as they are. Literals that
//! share their first bytes share a bucket, so a bucket's nibble tables accept few other
//! trigrams.
//!
//! Without AVX2 the same tables are read one byte at a time: slower, the same lines.
//!
//! The search also counts the newlines it passes, from the bytes it has loaded anyway (a
//! compare and a subtract a block), and leaves marks of the count every few KiB: the
//! scanner numbers lines from them instead of reading the region a second time, which was
//! an eighth of a large log's scan.
//!
//! Why not `aho-corasick`'s packed searcher, which the crate already has: it matches bytes
//! exactly, and spelling out every case of the literals (`mem`, `MEM`, `Mem`, ... and 2^13
//! for `press any key`) is far past the 64 patterns its Teddy takes.

// The crate denies `unsafe`; this module's AVX2 loop is the exception (see `lib.rs`).
#![allow(unsafe_code)]

/// What a gate literal says of its line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A failure (an OOM message, a kill, an exit status, an allocator failure): the
    /// scanner walks every anchor over a window around the line, for the context the
    /// diagnosis reads near a failure (phase markers, configuration printed just before).
    Failure,
    /// A memory reading (a progress line's `mem`, vLLM's `KV cache usage`): the line itself
    /// is enough; a reading every few hundred lines must not turn the scan into a full walk.
    Reading,
}

use super::scanner::count_newlines;
use Role::{Failure, Reading};

/// The gate's literals, a bucket a group (at most eight), compared folded (`| 0x20`: `_`
/// folds to DEL, so a literal's `_` also matches a DEL byte, which only costs a candidate). Literals in one bucket share bytes at the same places, so the
/// bucket's nibble tables accept few other trigrams (`alloc` with `sig` would accept `all`).
pub const GROUPS: &[&[(&str, Role)]] = &[
    // Memory figures and every "out of memory" wording (`OutOfMemoryError` is a failure by
    // its `error`, `CUDA out of memory` by its `cuda`); `signal 9`, `closing signal`,
    // `SIGKILL`, `received SIGQUIT`; sizes (`requested="36.4 GiB"`, `12034MiB / 16384MiB`).
    &[
        ("mem", Reading),
        ("sig", Failure),
        ("gib", Reading),
        ("mib", Reading),
    ],
    // `OOM when allocating`, `oom-kill`, `OOMKilled`; `failed to allocate`, `() failed for`.
    &[("oom", Failure), ("fail", Failure)],
    // `Killed`, `kill process`, `killing subprocess`; vLLM's `KV cache usage`, `in the KV
    // cache`, preemption for want of KV cache space; TensorRT-LLM's `too large ... to fit in
    // kvCache`.
    &[
        ("kill", Failure),
        ("kv cache", Reading),
        ("kvcache", Failure),
    ],
    // `cudaMalloc`, `malloc failed`, allocator reports, `is allocated by PyTorch`.
    &[("alloc", Failure)],
    // `RESOURCE_EXHAUSTED`; `MemoryError`, `{TM}{ERROR}`, `hipError`, `CUDA error`;
    // `docker ps -a`'s `Exited (137) 2 minutes ago`.
    &[
        ("exhaust", Failure),
        ("error", Failure),
        ("exited (137", Failure),
    ],
    // VRAM figures, `not enough VRAM`; `llama runner process has terminated`.
    &[("vram", Reading), ("rminat", Failure)],
    // `CUDA error`, `cuda failure 2`, `CUDA out of memory`; `exit code: 137`,
    // `return code = -9`, `exitcode: -9`.
    &[("cuda", Failure), ("code", Failure)],
    // TensorRT-LLM's `no free blocks left`; the `Press any key to continue` of a Windows
    // launcher whose process died. (SGLang's `#retracted_reqs` lines hold `memory` or `KV
    // cache`: a `#re` here let every ` re` through, 2.5 million candidates a GiB.)
    &[("free blocks", Failure), ("press any key", Failure)],
];

/// Bytes between two of [`Gate::hit_lines`]'s newline marks, at most: what the scanner may
/// have to count from one to a line it numbers. It is one run of the AVX2 search, 255 blocks
/// of 32 bytes: as many newlines as a byte of its counter holds.
pub const MARK_EVERY: usize = 255 * 32;

/// How far a search has counted newlines, and the marks it left.
struct Counted<'m> {
    /// Newlines are counted in `hay[..to]`...
    to: usize,
    /// ...and there are this many.
    newlines: u64,
    marks: &'m mut Vec<(usize, u64)>,
}

impl Counted<'_> {
    /// Where the next mark is due.
    fn next_mark(&self) -> usize {
        self.marks.last().map_or(0, |m| m.0 + MARK_EVERY)
    }

    /// Counts on to `to`, marking the way.
    fn count_to(&mut self, hay: &[u8], to: usize) {
        while self.to < to {
            let next_mark = self.next_mark();
            if self.to >= next_mark {
                self.marks.push((self.to, self.newlines));
                continue;
            }
            let step = to.min(next_mark);
            self.newlines += count_newlines(&hay[self.to..step]);
            self.to = step;
        }
        if self.marks.last().map(|m| m.0) != Some(to) {
            self.marks.push((to, self.newlines));
        }
    }
}

/// The compiled gate.
pub struct Gate {
    /// Folded literals with their roles, by bucket.
    buckets: [Vec<(Box<[u8]>, Role)>; 8],
    /// `lo[j][n]`: the buckets whose literals' byte `j` has low nibble `n` (folded).
    lo: [[u8; 16]; 3],
    /// `hi[j][n]`: the same for the high nibble, indexed by the byte as it is, not folded:
    /// folding sets bit 5, so a byte's folded high nibble is its own with bit 1 set, and
    /// `hi[j][n]` is the folded table's `n | 2`. The search then folds nothing (three
    /// vector operations a block of 32 bytes, a tenth of the loop).
    hi: [[u8; 16]; 3],
    avx2: bool,
}

/// Folds one byte as the gate compares it.
#[inline(always)]
fn fold(b: u8) -> u8 {
    b | 0x20
}

impl Gate {
    /// Compiles `groups` (at most eight, literals of three bytes or more).
    pub fn new(groups: &[&[(&str, Role)]]) -> Gate {
        assert!(groups.len() <= 8, "the gate has eight buckets");
        let mut buckets: [Vec<(Box<[u8]>, Role)>; 8] = Default::default();
        let mut lo = [[0u8; 16]; 3];
        let mut hi = [[0u8; 16]; 3];
        for (b, group) in groups.iter().enumerate() {
            for &(lit, role) in group.iter() {
                let folded: Box<[u8]> = lit.bytes().map(fold).collect();
                assert!(
                    folded.len() >= 3,
                    "gate literal {lit:?} is shorter than 3 bytes"
                );
                for j in 0..3 {
                    lo[j][usize::from(folded[j] & 15)] |= 1 << b;
                    hi[j][usize::from(folded[j] >> 4)] |= 1 << b;
                }
                buckets[b].push((folded, role));
            }
        }
        for table in &mut hi {
            for n in 0..16 {
                table[n] = table[n | 2];
            }
        }
        Gate {
            buckets,
            lo,
            hi,
            avx2: avx2_available(),
        }
    }

    /// The buckets whose three-byte prefixes agree with `hay[i..i + 3]`, by the tables.
    #[inline(always)]
    fn bucket_mask(&self, hay: &[u8], i: usize) -> u8 {
        let mut m = 0xff;
        for j in 0..3 {
            let c = hay[i + j];
            m &= self.lo[j][usize::from(c & 15)] & self.hi[j][usize::from(c >> 4)];
        }
        m
    }

    /// Whether a literal of a bucket in `mask` (of `role`, if given) starts at `hay[i]`.
    #[inline]
    fn verify(&self, hay: &[u8], i: usize, mask: u8, role: Option<Role>) -> bool {
        let mut m = mask;
        while m != 0 {
            let b = m.trailing_zeros() as usize;
            m &= m - 1;
            for (lit, lit_role) in &self.buckets[b] {
                if role.is_some_and(|r| r != *lit_role) {
                    continue;
                }
                if let Some(window) = hay.get(i..i + lit.len())
                    && window.iter().zip(lit.iter()).all(|(&h, &l)| fold(h) == l)
                {
                    return true;
                }
            }
        }
        false
    }

    /// Appends to `out`, in order, the offset of one gate literal in each line of `hay` that
    /// holds any (the first in the line). Lines end at `\n`; no literal holds one.
    ///
    /// Sets `marks` to places where the newlines before them are counted: `(offset, count)`
    /// pairs in order, from `(0, 0)` to `(hay.len(), all of them)`, at most [`MARK_EVERY`]
    /// bytes apart. The search counts the newlines of the blocks it passes anyway (one
    /// compare on bytes already loaded), so the scanner numbers its lines from the nearest
    /// mark instead of a second pass over every byte.
    pub fn hit_lines(&self, hay: &[u8], out: &mut Vec<usize>, marks: &mut Vec<(usize, u64)>) {
        marks.clear();
        let mut counted = Counted {
            to: 0,
            newlines: 0,
            marks,
        };
        counted.marks.push((0, 0));
        while let Some(at) = self.find_counting(hay, &mut counted) {
            out.push(at);
            match memchr::memchr(b'\n', &hay[at..]) {
                Some(nl) => counted.count_to(hay, at + nl + 1),
                None => break,
            }
        }
        counted.count_to(hay, hay.len());
    }

    /// The first gate literal starting at or after `from`.
    pub fn find(&self, hay: &[u8], from: usize) -> Option<usize> {
        let mut marks = Vec::new();
        let mut counted = Counted {
            to: from.min(hay.len()),
            newlines: 0,
            marks: &mut marks,
        };
        self.find_counting(hay, &mut counted)
    }

    /// The first gate literal starting at or after `counted.to`; the newlines are counted
    /// on the way, up to no further than the literal (to `hay.len()` when there is none).
    fn find_counting(&self, hay: &[u8], counted: &mut Counted<'_>) -> Option<usize> {
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: AVX2 was detected at construction.
            return unsafe { self.find_avx2(hay, counted) };
        }
        self.find_scalar_counting(hay, counted)
    }

    fn find_scalar_counting(&self, hay: &[u8], counted: &mut Counted<'_>) -> Option<usize> {
        let found = self.find_scalar(hay, counted.to);
        counted.count_to(hay, found.unwrap_or(hay.len()));
        found
    }

    fn find_scalar(&self, hay: &[u8], from: usize) -> Option<usize> {
        let last = hay.len().checked_sub(3)?;
        (from..=last).find(|&i| {
            let m = self.bucket_mask(hay, i);
            m != 0 && self.verify(hay, i, m, None)
        })
    }

    /// Whether `line` holds a literal of role [`Role::Failure`]. For the few lines the gate
    /// found, so one byte at a time.
    pub fn marks_failure(&self, line: &[u8]) -> bool {
        let Some(last) = line.len().checked_sub(3) else {
            return false;
        };
        (0..=last).any(|i| {
            let m = self.bucket_mask(line, i);
            m != 0 && self.verify(line, i, m, Some(Failure))
        })
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn find_avx2(&self, hay: &[u8], counted: &mut Counted<'_>) -> Option<usize> {
        use std::arch::x86_64::*;
        let table = |t: &[u8; 16]| {
            // SAFETY: `t` is 16 readable bytes.
            _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(t.as_ptr().cast()) })
        };
        let (lo0, lo1, lo2) = (table(&self.lo[0]), table(&self.lo[1]), table(&self.lo[2]));
        let (hi0, hi1, hi2) = (table(&self.hi[0]), table(&self.hi[1]), table(&self.hi[2]));
        let nibble = _mm256_set1_epi8(0x0f);
        let zero = _mm256_setzero_si256();
        let newline = _mm256_set1_epi8(b'\n' as i8);
        // The tables take bytes as they are (see `Gate::hi`).
        let lookup = |lo: __m256i, hi: __m256i, c: __m256i| {
            _mm256_and_si256(
                _mm256_shuffle_epi8(lo, _mm256_and_si256(c, nibble)),
                _mm256_shuffle_epi8(hi, _mm256_and_si256(_mm256_srli_epi16(c, 4), nibble)),
            )
        };
        // SAFETY (for each use): the caller keeps `at..at + 32` inside `hay`.
        let load = |at: *const u8| unsafe { _mm256_loadu_si256(at.cast()) };
        // The newlines of a lane's bytes, summed from the per-byte counts in `acc`.
        let sum = |acc: __m256i| {
            let s = _mm256_sad_epu8(acc, zero);
            (_mm256_extract_epi64::<0>(s)
                + _mm256_extract_epi64::<1>(s)
                + _mm256_extract_epi64::<2>(s)
                + _mm256_extract_epi64::<3>(s)) as u64
        };
        let p = hay.as_ptr();
        let mut i = counted.to;
        let mut masks = [0u8; 32];
        // The block at `at`: its bytes, and the buckets whose three-byte prefixes agree at
        // each of its places.
        let block = |at: usize| {
            // SAFETY: the loop keeps `at + 2 + 32 <= hay.len()`.
            unsafe {
                let raw = load(p.add(at));
                let m = _mm256_and_si256(
                    lookup(lo0, hi0, raw),
                    _mm256_and_si256(
                        lookup(lo1, hi1, load(p.add(at + 1))),
                        lookup(lo2, hi2, load(p.add(at + 2))),
                    ),
                );
                (raw, m)
            }
        };
        // Each block reads `i..i + 34`: the three lookups are one byte apart. Blocks go in
        // runs of up to 255, each byte of `acc` counting the newlines at its place in the
        // run's blocks (a compare and a subtract a block), summed when the run ends.
        while i + 34 <= hay.len() {
            if i >= counted.next_mark() {
                counted.marks.push((i, counted.newlines));
            }
            let run_end = (i + MARK_EVERY).min(hay.len() - 33);
            let mut acc = zero;
            while i < run_end {
                let (raw, m) = block(i);
                // Two blocks at a time while neither has a candidate: one test for both.
                if i + 32 < run_end {
                    let (raw2, m2) = block(i + 32);
                    let either = _mm256_or_si256(m, m2);
                    if _mm256_testz_si256(either, either) == 1 {
                        acc = _mm256_sub_epi8(acc, _mm256_cmpeq_epi8(raw, newline));
                        acc = _mm256_sub_epi8(acc, _mm256_cmpeq_epi8(raw2, newline));
                        i += 64;
                        continue;
                    }
                }
                let mut candidates = !(_mm256_movemask_epi8(_mm256_cmpeq_epi8(m, zero)) as u32);
                if candidates != 0 {
                    // SAFETY: `masks` is 32 writable bytes.
                    unsafe { _mm256_storeu_si256(masks.as_mut_ptr().cast(), m) };
                    while candidates != 0 {
                        let k = candidates.trailing_zeros() as usize;
                        candidates &= candidates - 1;
                        if self.verify(hay, i + k, masks[k], None) {
                            // Counted up to this block; the rest to the literal.
                            counted.to = i;
                            counted.newlines += sum(acc);
                            counted.count_to(hay, i + k);
                            return Some(i + k);
                        }
                    }
                }
                // A newline compares as -1.
                acc = _mm256_sub_epi8(acc, _mm256_cmpeq_epi8(raw, newline));
                i += 32;
            }
            counted.to = i;
            counted.newlines += sum(acc);
        }
        self.find_scalar_counting(hay, counted)
    }
}

#[cfg(target_arch = "x86_64")]
fn avx2_available() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

#[cfg(not(target_arch = "x86_64"))]
fn avx2_available() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every literal occurrence, by the obvious search.
    fn naive(gate_groups: &[&[(&str, Role)]], hay: &[u8], from: usize) -> Option<usize> {
        let lits: Vec<Vec<u8>> = gate_groups
            .iter()
            .flat_map(|g| g.iter())
            .map(|(l, _)| l.bytes().map(fold).collect())
            .collect();
        (from..hay.len()).find(|&i| {
            lits.iter().any(|l| {
                hay.get(i..i + l.len())
                    .is_some_and(|w| w.iter().zip(l).all(|(&h, &c)| fold(h) == c))
            })
        })
    }

    /// A small deterministic generator (xorshift).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    #[test]
    fn finds_what_the_obvious_search_finds_in_either_case_at_any_offset() {
        let gate = Gate::new(GROUPS);
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        // With the bytes a fold moves onto letters or `_` (`@`, `[`, `` ` ``, DEL) and UTF-8.
        let alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ _-:|=0123456789\n@[`\x7f\xc3\xa9\xe5\xb7";
        let lits: Vec<&str> = GROUPS.iter().flat_map(|g| g.iter().map(|l| l.0)).collect();
        for round in 0..1200 {
            let len = (rng.next() % if round % 8 == 0 { 2000 } else { 300 }) as usize;
            let mut hay: Vec<u8> = (0..len)
                .map(|_| alphabet[(rng.next() % alphabet.len() as u64) as usize])
                .collect();
            // Plant a literal (random case) somewhere, in most rounds.
            if round % 4 != 0 && len > 12 {
                let lit = lits[(rng.next() % lits.len() as u64) as usize];
                let at = (rng.next() as usize) % (len - lit.len());
                for (k, b) in lit.bytes().enumerate() {
                    hay[at + k] = if rng.next() % 2 == 0 {
                        b.to_ascii_uppercase()
                    } else {
                        b
                    };
                }
            }
            for from in [0, 1, 7, 33] {
                assert_eq!(
                    gate.find(&hay, from),
                    naive(GROUPS, &hay, from),
                    "{:?} from {from}",
                    String::from_utf8_lossy(&hay)
                );
                assert_eq!(gate.find_scalar(&hay, from), naive(GROUPS, &hay, from));
            }
        }
    }

    #[test]
    fn the_newline_marks_count_what_they_say() {
        let gate = Gate::new(GROUPS);
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let words: [&[u8]; 9] = [
            b"step",
            b" loss 1.25",
            b"\n",
            b"GPU mem",
            b" 3 GiB",
            b"*",
            b"\n\n",
            b"Killed",
            b"x ",
        ];
        for round in 0..300 {
            // Most short; some long enough for several marks between gate lines.
            let words_in = if round % 10 == 0 { 12_000 } else { 200 };
            let mut hay = Vec::new();
            for _ in 0..rng.next() % words_in {
                // In the long rounds, gate words are rare: long stretches without a hit.
                let quiet = words_in > 200 && rng.next() % 1000 != 0;
                let pick = if quiet {
                    [0, 1, 2, 5, 8][(rng.next() % 5) as usize]
                } else {
                    (rng.next() % words.len() as u64) as usize
                };
                hay.extend_from_slice(words[pick]);
            }
            let (mut out, mut marks) = (Vec::new(), Vec::new());
            gate.hit_lines(&hay, &mut out, &mut marks);
            assert_eq!(marks.first(), Some(&(0, 0)));
            assert_eq!(marks.last().map(|m| m.0), Some(hay.len()));
            for w in marks.windows(2) {
                assert!(w[0].0 <= w[1].0, "marks in order: {marks:?}");
                assert!(w[1].0 - w[0].0 <= MARK_EVERY, "marks close: {marks:?}");
            }
            for &(at, n) in &marks {
                assert_eq!(n, count_newlines(&hay[..at]), "at {at}");
            }
            // The same lines as the search without counting.
            let mut expected = Vec::new();
            let mut from = 0;
            while let Some(at) = naive(GROUPS, &hay, from) {
                expected.push(at);
                match memchr::memchr(b'\n', &hay[at..]) {
                    Some(nl) => from = at + nl + 1,
                    None => break,
                }
            }
            assert_eq!(out, expected);
        }
    }

    #[test]
    fn one_offset_per_line_that_holds_a_literal() {
        let gate = Gate::new(GROUPS);
        let log = "step 1 loss 2.0\nGPU mem 61.2 GiB, MEMORY 3\nnothing here\nKilled\n";
        let mut out = Vec::new();
        gate.hit_lines(log.as_bytes(), &mut out, &mut Vec::new());
        let lines: Vec<&str> = out
            .iter()
            .map(|&o| {
                let start = log[..o].rfind('\n').map_or(0, |n| n + 1);
                log[start..].split('\n').next().unwrap()
            })
            .collect();
        assert_eq!(lines, ["GPU mem 61.2 GiB, MEMORY 3", "Killed"]);
        // A reading is not a failure; a kill is, and so is an OOM message by its `error`.
        assert!(!gate.marks_failure(lines[0].as_bytes()));
        assert!(gate.marks_failure(lines[1].as_bytes()));
        assert!(gate.marks_failure(b"torch.OutOfMemoryError: CUDA out of memory."));
        assert!(
            !gate.marks_failure(
                b"INFO 10:00:01 GPU KV cache usage: 41.0%, CPU KV cache usage: 0.0%."
            )
        );
    }

    #[test]
    fn a_near_miss_is_not_a_hit() {
        let gate = Gate::new(GROUPS);
        // Each is one byte off a literal (`me m`, `o0m`, `kil l`, `allo c`).
        for hay in [
            "me m", "o0m", "kil l", "allo c", "ex haust", "erorr", "cud a", "all",
        ] {
            assert_eq!(gate.find(hay.as_bytes(), 0), None, "{hay}");
        }
    }
}
