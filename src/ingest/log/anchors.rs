//! The anchor matcher: which lines of a buffer hold any of the recognisers' few hundred
//! literals (ASCII case ignored).
//!
//! With hundreds of anchors no literal prefilter helps (some are short, common words such as
//! `mem` or `bf16`), so the search is a plain Aho-Corasick DFA walk: one table lookup per
//! byte, each depending on the one before. That chain of dependent loads, not the table's
//! size, bounds a single walk at about 600 MB/s, which is how fast `AhoCorasick::find_iter`
//! goes here. The scanner only needs to know which lines hold an anchor, so this walks the
//! same DFA over four stretches of the buffer in lock step: four independent chains the CPU
//! overlaps, about 2.5x the single walk on one core.
//!
//! The DFA uses "standard" match semantics: it enters a match state at the last byte of the
//! first anchor it completes, which is all a "this line holds an anchor" answer needs.
//! Anchors never contain a newline, so stretches split at newlines lose nothing.

use aho_corasick::automaton::{Automaton, StateID};
use aho_corasick::dfa::DFA;
use aho_corasick::packed;
use aho_corasick::{Anchored, MatchKind, Span};

/// Lock-step walks per buffer.
const STREAMS: usize = 4;
/// Below this many bytes, splitting a buffer costs more than it saves.
const SPLIT_MIN: usize = 8 << 10;
/// Below this many bytes a buffer is walked on one thread: a thread start (tens of
/// microseconds) would cost more than half the walk saves.
const PARALLEL_MIN: usize = 1 << 20;
/// The part of a split buffer this thread walks: less than half, because it also reads the
/// hits (cleaning, recognisers), about a third of the walk's time on a typical log.
const FIRST_SHARE_PERCENT: usize = 42;

/// Bytes folded (see [`fold`]) and searched at a time: small enough to stay in the L1/L2
/// cache between the fold and the search.
const FOLD_CHUNK: usize = 32 << 10;
/// Teddy, the vectorised search, gets slow beyond this many literals (its buckets fill up and
/// it verifies too many fingerprint hits); with more the prefilter is left out.
const PREFILTER_MAX_LITERALS: usize = 64;
/// Each Teddy searcher is a pass over the folded bytes; with more than this many the DFA walk
/// is as fast.
const PREFILTER_MAX_SEARCHERS: usize = 2;

/// Literals chosen so that every anchor contains at least one of them (after [`fold`]),
/// and each is rare in logs: a few lines in a million of a typical training or serving log.
/// Any anchor containing none of them (one added later) joins the cover itself, so this list
/// only decides speed, never which lines are found. `_` folds to DEL (0x7f), written here as
/// `_` and folded at start-up like the anchors.
const COVER: &[&str] = &[
    "memo", "ing ", "allo", "kill", "load", "vram", "erve", "batc", "kv c", "ation", "_len",
    "bloc", "code", "odel", "tota", "sion", "uda ", "llam", "esse", " size", "devi", "args",
    "vllm", "esou", "zero", "stat", "led ", "type", "oom e", "xper", "ev/s", "slot", "ild ",
    "epsp", "-gpu", "cted", "urre", "ient", "task", "/sgla", "rt-l", "num_", "er oo", "kvsi",
    "em_l", "shm_", "ch==", "lm-b", "rld_", "-gre", "ui e", "sys:", "ee_g", "ep_t", "ss(e", "-ngl",
    "ells", "ble p", "la b", "hod w", "own_", "fp16", "al.n", "om-p", "-shm", "mpte", "x_ma",
    "cker r", "eq_m", "argu", "d up", "kvca", "ild:", "h_attn", "apab", "ax s", "mit:", "map =",
    "bf16", "inus", "--me", "_llm/", "n_lay", "main.p", "x_inp", "n_ct", "lm e", "msg=", "en u",
    "rch_", "mem",
];

/// ASCII case folding that a vectorising compiler turns into one OR per 32 bytes: every
/// byte with its 0x20 bit set. Upper-case letters become lower-case; a few other bytes move
/// too (`_` to DEL, `[` to `{`, newline to `*`), but two strings equal ignoring ASCII case are
/// still equal after folding, which is all a prefilter needs: it may pass extra lines, never
/// miss one.
fn fold(src: &[u8], dst: &mut [u8]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = s | 0x20;
    }
}

/// The vectorised search for cover literals over folded bytes.
struct Prefilter {
    /// Teddy searchers, each over a share of the cover literals.
    searchers: Vec<packed::Searcher>,
    /// The longest cover literal, in bytes.
    max_len: usize,
}

impl Prefilter {
    /// A prefilter for `anchors` (lower-case), or `None` where the cover would be too large or
    /// the CPU has no Teddy (then the DFA walks every byte).
    fn new(anchors: &[String]) -> Option<Prefilter> {
        let folded = |s: &str| -> Vec<u8> { s.bytes().map(|b| b | 0x20).collect() };
        let anchors: Vec<Vec<u8>> = anchors.iter().map(|a| folded(a)).collect();
        let contains = |hay: &[u8], lit: &[u8]| memchr::memmem::find(hay, lit).is_some();
        // The listed literals some anchor uses, then every anchor that none of them covers.
        let mut cover: Vec<Vec<u8>> = COVER
            .iter()
            .map(|c| folded(c))
            .filter(|c| anchors.iter().any(|a| contains(a, c)))
            .collect();
        for a in &anchors {
            if !cover.iter().any(|c| contains(a, c)) {
                cover.push(a.clone());
            }
        }
        let groups = cover.len().div_ceil(PREFILTER_MAX_LITERALS);
        if groups == 0 || groups > PREFILTER_MAX_SEARCHERS {
            return None;
        }
        let max_len = cover.iter().map(Vec::len).max().unwrap_or(0);
        // Equal shares: a fuller searcher's buckets pass more fingerprint hits.
        let share = cover.len().div_ceil(groups);
        let searchers = cover
            .chunks(share)
            .map(|lits| {
                packed::Config::new()
                    .only_teddy(true)
                    .builder()
                    .extend(lits)
                    .build()
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Prefilter { searchers, max_len })
    }
}

/// Whether the process may use a second core (cgroup and affinity limits included).
fn second_core() -> bool {
    static TWO: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TWO.get_or_init(|| std::thread::available_parallelism().is_ok_and(|n| n.get() > 1))
}

/// The compiled anchors.
pub struct Anchors {
    dfa: DFA,
    /// The vectorised literal search that finds the few lines worth walking, where one
    /// could be built.
    prefilter: Option<Prefilter>,
    start: StateID,
    max_len: usize,
    /// The anchors, lower-cased, sorted and deduplicated: pattern `i` of the DFA.
    patterns: Vec<String>,
}

impl Anchors {
    /// Compiles the anchors (empty ones are dropped; duplicates are harmless).
    pub fn new<I, S>(anchors: I) -> Anchors
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut pats: Vec<String> = anchors
            .into_iter()
            .map(|a| a.as_ref().to_ascii_lowercase())
            .filter(|a| !a.is_empty())
            .collect();
        pats.sort_unstable();
        pats.dedup();
        // No prefilter: with one, the start state becomes "special" and every byte read in
        // it would leave the fast path.
        let dfa = DFA::builder()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::Standard)
            .prefilter(false)
            .build(&pats)
            .expect("anchors are plain literals");
        let start = dfa
            .start_state(Anchored::No)
            .expect("an unanchored search has a start state");
        let max_len = pats.iter().map(String::len).max().unwrap_or(0);
        let prefilter = Prefilter::new(&pats);
        Anchors {
            dfa,
            prefilter,
            start,
            max_len,
            patterns: pats,
        }
    }

    /// The compiled anchors, lower-cased: [`Anchors::each_anchor`] reports indices into it.
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    /// Calls `found` with the index (into [`Anchors::patterns`]) of every anchor occurrence in
    /// `hay`, overlapping ones included: a match state of a standard-semantics DFA lists
    /// every anchor that ends at that byte.
    pub fn each_anchor(&self, hay: &[u8], mut found: impl FnMut(usize)) {
        let dfa = &self.dfa;
        let mut sid = self.start;
        for &b in hay {
            sid = dfa.next_state(Anchored::No, sid, b);
            if dfa.is_special(sid) && dfa.is_match(sid) {
                for n in 0..dfa.match_len(sid) {
                    found(dfa.match_pattern(sid, n).as_usize());
                }
            }
        }
    }

    /// The length of the longest anchor, in bytes.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Appends to `out`, in order, one offset inside each line of `hay` that holds an anchor
    /// (the last byte of the first anchor completed in it). Lines end at `\n`.
    pub fn hit_lines(&self, hay: &[u8], out: &mut Vec<usize>) {
        self.for_each_hit_line(hay, |o| out.push(o));
    }

    /// Calls `on_hit`, in order, with one offset inside each line of `hay` that holds an
    /// anchor (as [`Anchors::hit_lines`] finds them).
    ///
    /// A large buffer is split at a line start between this thread and one helper thread
    /// when the machine has a second core: the walk is most of a scan's cost. This thread
    /// walks the smaller first part and hands its hits to `on_hit` while the helper is still
    /// walking the rest, so both cores stay busy while the hits are read.
    pub fn for_each_hit_line(&self, hay: &[u8], mut on_hit: impl FnMut(usize)) {
        let mut hits = Vec::new();
        if hay.len() < PARALLEL_MIN || !second_core() {
            self.hit_lines_here(hay, &mut hits);
            hits.into_iter().for_each(on_hit);
            return;
        }
        let guess = hay.len() * FIRST_SHARE_PERCENT / 100;
        let mid = memchr::memchr(b'\n', &hay[guess..]).map_or(hay.len(), |i| guess + i + 1);
        let (first, second) = hay.split_at(mid);
        std::thread::scope(|scope| {
            let helper = std::thread::Builder::new().spawn_scoped(scope, || {
                let mut hits = Vec::new();
                self.hit_lines_here(second, &mut hits);
                hits
            });
            self.hit_lines_here(first, &mut hits);
            hits.drain(..).for_each(&mut on_hit);
            let rest = match helper {
                Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                // No thread to be had (a process limit): walk the rest here.
                Err(_) => {
                    self.hit_lines_here(second, &mut hits);
                    std::mem::take(&mut hits)
                }
            };
            rest.into_iter().for_each(|o| on_hit(o + mid));
        });
    }

    /// [`Anchors::hit_lines`] on this thread alone.
    fn hit_lines_here(&self, hay: &[u8], out: &mut Vec<usize>) {
        match &self.prefilter {
            Some(pre) => self.hit_lines_filtered(pre, hay, out),
            None => self.hit_lines_walked(hay, out),
        }
    }

    /// [`Anchors::hit_lines_here`] with the prefilter: the folded buffer is searched for the
    /// cover literals a chunk at a time, and only a line holding one is walked.
    fn hit_lines_filtered(&self, pre: &Prefilter, hay: &[u8], out: &mut Vec<usize>) {
        let mut folded = vec![0u8; FOLD_CHUNK.min(hay.len())];
        // A cover literal split between two chunks is found whole in the next one.
        let overlap = pre.max_len.saturating_sub(1);
        let mut at = 0; // start of the chunk
        let mut resume = 0usize; // lines before this are done
        while at < hay.len() {
            let end = (at + FOLD_CHUNK).min(hay.len());
            let chunk = &mut folded[..end - at];
            fold(&hay[at..end], chunk);
            let mut from = resume.saturating_sub(at);
            // Each searcher's next candidate in this chunk, at or after `from`.
            let find = |k: usize, from: usize, chunk: &[u8]| {
                pre.searchers[k]
                    .find_in(chunk, Span::from(from..chunk.len()))
                    .map_or(usize::MAX, |m| m.start())
            };
            let mut next: [usize; PREFILTER_MAX_SEARCHERS] = [usize::MAX; PREFILTER_MAX_SEARCHERS];
            for (k, n) in next.iter_mut().enumerate().take(pre.searchers.len()) {
                *n = if from < chunk.len() {
                    find(k, from, chunk)
                } else {
                    usize::MAX
                };
            }
            loop {
                let first = next[..pre.searchers.len()]
                    .iter()
                    .copied()
                    .min()
                    .unwrap_or(usize::MAX);
                if first == usize::MAX {
                    break;
                }
                let p = at + first;
                let line_start = memchr::memrchr(b'\n', &hay[..p]).map_or(0, |i| i + 1);
                let line_end = memchr::memchr(b'\n', &hay[p..]).map_or(hay.len(), |i| p + i);
                self.walk(hay, line_start, line_end, out);
                resume = line_end + 1;
                from = resume.saturating_sub(at);
                for k in 0..pre.searchers.len() {
                    if next[k] < from {
                        next[k] = if from < chunk.len() {
                            find(k, from, chunk)
                        } else {
                            usize::MAX
                        };
                    }
                }
            }
            if end == hay.len() {
                break;
            }
            at = (end - overlap).max(resume).max(at + 1);
        }
    }

    /// [`Anchors::hit_lines_here`] without a prefilter: four DFA walks in lock step.
    fn hit_lines_walked(&self, hay: &[u8], out: &mut Vec<usize>) {
        if hay.len() < SPLIT_MIN {
            self.walk(hay, 0, hay.len(), out);
            return;
        }
        // Stretch boundaries at line starts, so no line is split between two walks.
        let mut bounds = [hay.len(); STREAMS + 1];
        bounds[0] = 0;
        for (k, b) in bounds.iter_mut().enumerate().take(STREAMS).skip(1) {
            let guess = hay.len() * k / STREAMS;
            *b = memchr::memchr(b'\n', &hay[guess..]).map_or(hay.len(), |i| guess + i + 1);
        }
        for k in 1..=STREAMS {
            bounds[k] = bounds[k].max(bounds[k - 1]);
        }
        let mut pos: [usize; STREAMS] = std::array::from_fn(|k| bounds[k]);
        let end: [usize; STREAMS] = std::array::from_fn(|k| bounds[k + 1]);
        let mut sid = [self.start; STREAMS];
        // Hits of stretches after the first, kept apart so `out` stays in order.
        let mut later: [Vec<usize>; STREAMS] = Default::default();
        let dfa = &self.dfa;
        while (0..STREAMS).all(|k| pos[k] < end[k]) {
            for k in 0..STREAMS {
                sid[k] = dfa.next_state(Anchored::No, sid[k], hay[pos[k]]);
            }
            if sid.iter().any(|&s| dfa.is_special(s)) {
                for k in 0..STREAMS {
                    if dfa.is_match(sid[k]) {
                        let sink = if k == 0 { &mut *out } else { &mut later[k] };
                        sink.push(pos[k]);
                        // On to the next line: one report per line is all the scanner uses.
                        pos[k] = memchr::memchr(b'\n', &hay[pos[k]..end[k]])
                            .map_or(end[k], |i| pos[k] + i);
                        sid[k] = self.start;
                    }
                }
            }
            for p in pos.iter_mut() {
                *p += 1;
            }
        }
        // Finish each stretch alone; a stretch that stopped mid-line resumes in its state.
        for k in 0..STREAMS {
            let sink = if k == 0 { &mut *out } else { &mut later[k] };
            self.walk_from(hay, pos[k].min(end[k]), end[k], sid[k], sink);
        }
        for v in &later[1..] {
            out.extend_from_slice(v);
        }
    }

    /// The single walk over `hay[from..to]` from the start state.
    fn walk(&self, hay: &[u8], from: usize, to: usize, out: &mut Vec<usize>) {
        self.walk_from(hay, from, to, self.start, out);
    }

    fn walk_from(
        &self,
        hay: &[u8],
        from: usize,
        to: usize,
        mut sid: StateID,
        out: &mut Vec<usize>,
    ) {
        let dfa = &self.dfa;
        let mut i = from;
        while i < to {
            sid = dfa.next_state(Anchored::No, sid, hay[i]);
            if dfa.is_special(sid) && dfa.is_match(sid) {
                out.push(i);
                i = memchr::memchr(b'\n', &hay[i..to]).map_or(to, |j| i + j);
                sid = self.start;
            }
            i += 1;
        }
    }

    /// The first anchor in `hay`, as the byte range it covers (the longest anchor ending at
    /// the first position where any ends). For pieces of over-long lines, where every
    /// occurrence's place matters, not just its line.
    pub fn find(&self, hay: &[u8]) -> Option<std::ops::Range<usize>> {
        let dfa = &self.dfa;
        let mut sid = self.start;
        for (i, &b) in hay.iter().enumerate() {
            sid = dfa.next_state(Anchored::No, sid, b);
            if dfa.is_special(sid) && dfa.is_match(sid) {
                let len = (0..dfa.match_len(sid))
                    .map(|n| dfa.pattern_len(dfa.match_pattern(sid, n)))
                    .max()
                    .unwrap_or(1);
                return Some(i + 1 - len..i + 1);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every occurrence is reported, also anchors inside or overlapping other anchors, so a
    /// line reaches every recogniser whose anchor it holds.
    #[test]
    fn each_anchor_reports_overlapping_occurrences() {
        let anchors = Anchors::new(["out of memory", "memory", "mem", "KV cache"]);
        let mut found = vec![];
        anchors.each_anchor(b"CUDA Out Of Memory; kv cache", |p| {
            found.push(anchors.patterns()[p].clone())
        });
        found.sort();
        assert_eq!(found, ["kv cache", "mem", "memory", "out of memory"]);
    }

    fn lines_with_hits(anchors: &Anchors, hay: &[u8]) -> Vec<usize> {
        let mut out = vec![];
        anchors.hit_lines(hay, &mut out);
        // Map each offset to its line number.
        out.iter()
            .map(|&o| memchr::memchr_iter(b'\n', &hay[..o]).count() + 1)
            .collect()
    }

    /// The lock-step walks report exactly the lines a plain search finds, in order, over a
    /// buffer large enough to split, with hits at stretch boundaries and mixed case.
    #[test]
    fn agrees_with_a_plain_search() {
        let anchors = Anchors::new(["out of memory", "Killed process", "mem", "KV cache usage:"]);
        let mut text = String::new();
        let mut want = vec![];
        for i in 1..=40_000usize {
            let line = match i % 997 {
                0 => "RuntimeError: CUDA OUT OF MEMORY. Tried to allocate 2 GiB",
                13 => "[ 12.0] Killed process 4242 (python) total-vm:1kB",
                500 => "GPU kv CACHE usage: 99.0% and out of memory and mem",
                _ if i % 4_001 == 0 => "max_mem 1",
                _ => "step 12 | loss 2.345 | lr 3e-5 | grad_norm 0.9 | tokens/s 12000",
            };
            if line.to_ascii_lowercase().contains("out of memory")
                || line.to_ascii_lowercase().contains("killed process")
                || line.contains("mem")
                || line.to_ascii_lowercase().contains("kv cache usage:")
            {
                want.push(i);
            }
            text.push_str(line);
            text.push('\n');
        }
        assert!(text.len() > 4 * SPLIT_MIN);
        assert_eq!(lines_with_hits(&anchors, text.as_bytes()), want);
        // No trailing newline, and a hit on the last line.
        let short = "a\nb\nlast out of memory";
        assert_eq!(lines_with_hits(&anchors, short.as_bytes()), vec![3]);
    }

    #[test]
    fn every_split_point_is_covered() {
        // One hit line at every position relative to the stretch boundaries.
        let anchors = Anchors::new(["needle"]);
        let filler = "x".repeat(99);
        let mut base = String::new();
        while base.len() < 8 * SPLIT_MIN {
            base.push_str(&filler);
            base.push('\n');
        }
        let lines = base.lines().count();
        for hit_line in [
            1,
            2,
            lines / 4,
            lines / 4 + 1,
            lines / 2,
            3 * lines / 4 + 1,
            lines,
        ] {
            let text: String = base
                .lines()
                .enumerate()
                .map(|(i, l)| {
                    if i + 1 == hit_line {
                        "a needle here\n".to_string()
                    } else {
                        format!("{l}\n")
                    }
                })
                .collect();
            assert_eq!(lines_with_hits(&anchors, text.as_bytes()), vec![hit_line]);
        }
    }

    #[test]
    fn find_gives_the_whole_anchor() {
        let anchors = Anchors::new(["out of memory", "memory"]);
        let hay = b"xx Out Of Memory yy";
        let r = anchors.find(hay).unwrap();
        assert_eq!(&hay[r], b"Out Of Memory");
        assert!(anchors.find(b"nothing here").is_none());
    }
}
