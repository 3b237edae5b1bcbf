//! The anchor matcher: which lines of a buffer hold any of the recognisers' few hundred
//! literals (ASCII case ignored).
//!
//! With hundreds of anchors no literal prefilter helps (some are short, common words such as
//! `mem` or `bf16`; a vectorised multi-literal search over a cover of them was measured no
//! faster, see README "Speed and memory"), so the search is an Aho-Corasick DFA walk: one
//! table lookup per byte, each depending on the one before. That chain of dependent loads
//! bounds a single walk, so the line search walks the same DFA over four stretches of the
//! buffer in lock step: four independent chains the CPU overlaps. (Past a large log's head,
//! the scanner walks it only near the lines [`super::gate`]'s few literals find.)
//!
//! The line search walks its own dense copy of the DFA ([`LineDfa`]): bytes mapped to
//! classes by one small table, transitions premultiplied, match states numbered last so
//! "matched" is one comparison, and the four walks in a loop with one counter. The same walk
//! through `aho_corasick`'s DFA spent most of its instructions on bookkeeping (a special-state
//! test and a bounds check per byte and walk, positions kept in memory). With this one the
//! 1 GiB bench log's user time went from 1.15-1.51 s to 0.71-0.82 s.
//!
//! The DFA uses "standard" match semantics: it enters a match state at the last byte of the
//! first anchor it completes, which is all a "this line holds an anchor" answer needs.
//! Anchors never contain a newline, so stretches split at newlines lose nothing.

use aho_corasick::automaton::{Automaton, StateID};
use aho_corasick::dfa::DFA;
use aho_corasick::{Anchored, MatchKind};

/// Lock-step walks per buffer.
const STREAMS: usize = 4;
/// Below this many bytes, splitting a buffer into four stretches costs more than it saves.
const SPLIT_MIN: usize = 8 << 10;
/// The compiled anchors.
pub struct Anchors {
    dfa: DFA,
    start: StateID,
    /// The dense copy the line search walks.
    lines: LineDfa,
    max_len: usize,
    /// Every pair of adjacent bytes in an anchor (lower case), as a bit set indexed by
    /// `first << 8 | second`: what [`Anchors::may_join`] looks up.
    pairs: Box<[u64; 1024]>,
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
        let mut pairs = Box::new([0u64; 1024]);
        for w in pats.iter().flat_map(|p| p.as_bytes().windows(2)) {
            let i = usize::from(w[0]) << 8 | usize::from(w[1]);
            pairs[i / 64] |= 1 << (i % 64);
        }
        let lines = LineDfa::new(&dfa, start, &pats);
        Anchors {
            dfa,
            start,
            lines,
            max_len,
            pairs,
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
    ///
    /// The walk stays on the calling thread. Splitting a large buffer with a helper thread
    /// paid while the walk was slow; with the dense walk it cost a third more CPU (a thread
    /// per buffer, caches shared) for under 5 % of wall time on a file, and on a pipe it
    /// took the core the writing process needed.
    pub fn hit_lines(&self, hay: &[u8], out: &mut Vec<usize>) {
        self.hit_lines_here(hay, out);
    }

    /// [`Anchors::hit_lines`]: the lock-step walk, or a single one for a small buffer.
    fn hit_lines_here(&self, hay: &[u8], out: &mut Vec<usize>) {
        if hay.len() < SPLIT_MIN {
            self.lines
                .walk_from(hay, 0, hay.len(), self.lines.start, out);
            return;
        }
        self.lines.walk_lock_step(hay, out);
    }

    /// Whether some anchor holds `left` followed by `right` (ASCII case ignored): what an
    /// anchor cut between them needs, checked before walking the DFA over the seam.
    pub fn may_join(&self, left: u8, right: u8) -> bool {
        let i =
            usize::from(left.to_ascii_lowercase()) << 8 | usize::from(right.to_ascii_lowercase());
        self.pairs[i / 64] & (1 << (i % 64)) != 0
    }

    /// Whether an anchor occurrence in `hay` starts before `cut.start` and ends after
    /// `cut.end`: one that a line break at `cut` would have split in two.
    pub fn crosses(&self, hay: &[u8], cut: std::ops::Range<usize>) -> bool {
        let dfa = &self.dfa;
        let mut sid = self.start;
        for (i, &b) in hay.iter().enumerate() {
            sid = dfa.next_state(Anchored::No, sid, b);
            if i < cut.end || !(dfa.is_special(sid) && dfa.is_match(sid)) {
                continue;
            }
            let crossing = (0..dfa.match_len(sid))
                .any(|n| i + 1 - dfa.pattern_len(dfa.match_pattern(sid, n)) < cut.start);
            if crossing {
                return true;
            }
        }
        false
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

/// The anchors' DFA as the line search walks it.
///
/// Built from `aho_corasick`'s DFA by visiting every state reachable from the start, so it
/// reports exactly the positions that DFA enters a match state at.
struct LineDfa {
    /// Byte to class: 0 for the bytes no anchor holds (in either case), which send every
    /// state back to the start; one class per other byte, both cases of a letter sharing one.
    class: [u8; 256],
    /// `trans[state + class]`: the next state. States are premultiplied by the stride (the
    /// class count rounded up to a power of two), so a step is one add and one load.
    trans: Box<[u32]>,
    start: u32,
    /// States at or above this match: they are numbered after every other state.
    match_min: u32,
}

impl LineDfa {
    fn new(dfa: &DFA, start: StateID, patterns: &[String]) -> LineDfa {
        // One representative byte per class; class 0's is never fed to the DFA (it goes to
        // the start state from every state, as a byte no pattern holds must).
        let mut class = [0u8; 256];
        let mut reps: Vec<u8> = vec![0];
        for &b in patterns.iter().flat_map(|p| p.as_bytes()) {
            let lower = b.to_ascii_lowercase();
            if class[usize::from(lower)] == 0 {
                let c = u8::try_from(reps.len()).expect("at most 255 byte classes");
                class[usize::from(lower)] = c;
                class[usize::from(lower.to_ascii_uppercase())] = c;
                reps.push(lower);
            }
        }
        let stride = reps.len().next_power_of_two();
        // Every state reachable from the start; the walk never leaves a match state (it
        // moves on to the next line), so their transitions are not followed.
        let mut index = crate::ingest::snapshot::fxhash::new_map::<StateID, usize>();
        let mut order = vec![start];
        index.insert(start, 0);
        let mut next = 0;
        while next < order.len() {
            let s = order[next];
            next += 1;
            if dfa.is_match(s) {
                continue;
            }
            for &r in &reps[1..] {
                let t = dfa.next_state(Anchored::No, s, r);
                index.entry(t).or_insert_with(|| {
                    order.push(t);
                    order.len() - 1
                });
            }
        }
        // Renumber: states that do not match first, then the match states.
        let (mut numbered, matching): (Vec<StateID>, Vec<StateID>) =
            order.iter().partition(|&&s| !dfa.is_match(s));
        let match_min = numbered.len() * stride;
        numbered.extend(matching);
        let new_id: Vec<usize> = {
            let mut v = vec![0; order.len()];
            for (n, s) in numbered.iter().enumerate() {
                v[index[s]] = n * stride;
            }
            v
        };
        let id = |s: StateID| u32::try_from(new_id[index[&s]]).expect("the DFA fits 32 bits");
        let start_id = id(start);
        let mut trans = vec![start_id; numbered.len() * stride];
        for (n, &s) in numbered.iter().enumerate() {
            if dfa.is_match(s) {
                continue;
            }
            for (c, &r) in reps.iter().enumerate().skip(1) {
                trans[n * stride + c] = id(dfa.next_state(Anchored::No, s, r));
            }
        }
        LineDfa {
            class,
            trans: trans.into_boxed_slice(),
            start: start_id,
            match_min: u32::try_from(match_min).expect("the DFA fits 32 bits"),
        }
    }

    #[inline(always)]
    fn step(&self, state: u32, byte: u8) -> u32 {
        self.trans[state as usize + usize::from(self.class[usize::from(byte)])]
    }

    /// Walks `hay[from..to]` from `state`, appending the offset of each line's first match.
    fn walk_from(&self, hay: &[u8], from: usize, to: usize, mut state: u32, out: &mut Vec<usize>) {
        let mut i = from;
        while i < to {
            state = self.step(state, hay[i]);
            if state >= self.match_min {
                out.push(i);
                i = memchr::memchr(b'\n', &hay[i..to]).map_or(to, |j| i + j);
                state = self.start;
            }
            i += 1;
        }
    }

    /// The four-stretch walk: stretches end at line starts, so no line is split between
    /// two walks; hits come out in order.
    fn walk_lock_step(&self, hay: &[u8], out: &mut Vec<usize>) {
        let mut bounds = [hay.len(); STREAMS + 1];
        bounds[0] = 0;
        for k in 1..STREAMS {
            let guess = hay.len() * k / STREAMS;
            bounds[k] = memchr::memchr(b'\n', &hay[guess..])
                .map_or(hay.len(), |i| guess + i + 1)
                .max(bounds[k - 1]);
        }
        let mut pos: [usize; STREAMS] = std::array::from_fn(|k| bounds[k]);
        let mut state = [self.start; STREAMS];
        // Hits of stretches after the first, kept apart so `out` stays in order.
        let mut later: [Vec<usize>; STREAMS] = Default::default();
        loop {
            // Steps every walk can take before the shortest runs out.
            let n = (0..STREAMS)
                .map(|k| bounds[k + 1] - pos[k])
                .min()
                .unwrap_or(0);
            if n == 0 {
                break;
            }
            let bytes: [&[u8]; STREAMS] = std::array::from_fn(|k| &hay[pos[k]..pos[k] + n]);
            let mut s = state;
            let mut taken = 0;
            while taken < n {
                let mut matched = false;
                for k in 0..STREAMS {
                    s[k] = self.step(s[k], bytes[k][taken]);
                    matched |= s[k] >= self.match_min;
                }
                taken += 1;
                if matched {
                    break;
                }
            }
            state = s;
            for k in 0..STREAMS {
                pos[k] += taken;
                if state[k] >= self.match_min {
                    let at = pos[k] - 1;
                    if k == 0 {
                        out.push(at);
                    } else {
                        later[k].push(at);
                    }
                    // On to the next line: one report per line is all the scanner uses.
                    pos[k] = memchr::memchr(b'\n', &hay[at..bounds[k + 1]])
                        .map_or(bounds[k + 1], |j| at + j);
                    state[k] = self.start;
                }
            }
        }
        // Finish each stretch alone; a stretch that stopped mid-line resumes in its state.
        for k in 0..STREAMS {
            let sink = if k == 0 { &mut *out } else { &mut later[k] };
            self.walk_from(hay, pos[k], bounds[k + 1], state[k], sink);
        }
        for v in &later[1..] {
            out.extend_from_slice(v);
        }
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

    /// The dense copy reports exactly the lines, and the bytes in them, that a walk through
    /// `aho_corasick`'s own DFA reports: every fixture log (and the same bytes upper-cased)
    /// with the recognisers' anchors, walked whole and split into lock-step stretches.
    #[test]
    fn the_dense_copy_agrees_with_the_dfa() {
        fn logs(dir: &std::path::Path, out: &mut Vec<Vec<u8>>) {
            for e in std::fs::read_dir(dir).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    logs(&p, out);
                } else if p.extension().is_some_and(|x| x == "log" || x == "txt") {
                    out.push(std::fs::read(&p).unwrap());
                }
            }
        }
        let mut texts = Vec::new();
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        for dir in ["fixtures", "rules"] {
            logs(&root.join(dir), &mut texts);
        }
        assert!(texts.len() > 50, "the fixtures are there");
        // The real incidents too, read in place where this checkout has them.
        let real = root.join("../shared/eval/realworld");
        if real.is_dir() {
            logs(&real, &mut texts);
        }
        let mut all: Vec<u8> = texts.concat();
        all.extend(all.to_ascii_uppercase());
        let anchors = crate::ingest::log::engines::anchors();
        // The reference: the same line walk, through the library's DFA.
        let reference = |hay: &[u8]| {
            let (dfa, mut sid, mut out) = (&anchors.dfa, anchors.start, vec![]);
            let mut i = 0;
            while i < hay.len() {
                sid = dfa.next_state(Anchored::No, sid, hay[i]);
                if dfa.is_match(sid) {
                    out.push(i);
                    i = memchr::memchr(b'\n', &hay[i..]).map_or(hay.len(), |j| i + j);
                    sid = anchors.start;
                }
                i += 1;
            }
            out
        };
        let want = reference(&all);
        assert!(want.len() > 1_000, "{} hit lines", want.len());
        let mut got = vec![];
        anchors.hit_lines_here(&all, &mut got);
        assert_eq!(got, want);
        for text in &texts {
            let mut got = vec![];
            anchors
                .lines
                .walk_from(text, 0, text.len(), anchors.lines.start, &mut got);
            assert_eq!(got, reference(text));
        }
    }
}
