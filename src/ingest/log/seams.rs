//! Hard wraps that cut an anchor in two.
//!
//! A log copied out of a fixed-width terminal, a tmux pane or a CI viewer, or pasted into an
//! issue at ~100 columns, arrives with its long messages cut into pieces of the same width.
//! Most recognisers join such pieces back themselves (`engines::join_wrapped`), but only once
//! the line search has led them to the message; when the cut falls inside the anchor
//! (`Free memory on devi` / `ce cuda:1 ...`), no line holds it and the message is never
//! read. This module finds those seams: a line as wide as the widest of the stretch (or
//! within a word of it, for a wrap at a space) whose end and the next line's start, put back
//! together, hold an anchor that neither holds alone. The wrapped message (its run of
//! full-width pieces and the piece that ends it) is then delivered as the one line it was.
//!
//! Joining needs that crossing anchor, not just a full-width line: a line that is simply the
//! longest of a log, followed by an unrelated one, is left alone.

use super::anchors::Anchors;

/// Lines shorter than this are not wrap pieces: no tool wraps that narrow.
const MIN_WIDTH: usize = 40;
/// A wrap at a space leaves a piece up to one word shorter than the width.
const WORD_SLACK: usize = 20;

/// One wrapped message, put back together.
#[derive(Debug, PartialEq, Eq)]
pub struct WrappedRun {
    /// Offset of its first piece's first byte in the stretch.
    pub start: usize,
    /// Offset just past its last piece (before that piece's newline).
    pub end: usize,
    /// How many lines after the first it covers.
    pub continuation_lines: u32,
    /// The pieces joined.
    pub text: Vec<u8>,
}

struct Piece {
    start: usize,
    /// End without the newline and a carriage return.
    end: usize,
    /// Width in characters, as a terminal counts them (UTF-8 continuation bytes not counted).
    width: usize,
}

/// The wrapped messages in `stretch` (whole lines) that an anchor crosses a seam of, in order.
pub fn wrapped_runs(stretch: &[u8], anchors: &Anchors) -> Vec<WrappedRun> {
    // Most stretches have no seam at all. One pass over the line ends finds the widest line
    // and the seams the bytes either side leave possible (a line's width is counted only
    // where its length could make it the widest, or its seam is possible); the piece list,
    // and the walk below, only where some near-full piece's seam with the next is crossed,
    // which is exactly when the walk finds a run.
    let mut width = 0;
    let mut maybe = Vec::new();
    let mut all = spans(stretch).peekable();
    while let Some((start, end)) = all.next() {
        let len = end - start;
        if len > width {
            width = width.max(piece(stretch, start, end).width);
        }
        if let Some(&(next_start, next_end)) = all.peek() {
            if len >= MIN_WIDTH && may_seam(stretch, (start, end), (next_start, next_end), anchors)
            {
                maybe.push((
                    piece(stretch, start, end),
                    piece(stretch, next_start, next_end),
                ));
            }
        }
    }
    if width < MIN_WIDTH {
        return Vec::new();
    }
    if !maybe
        .iter()
        .any(|(p, q)| near_full(p, width) && seam(stretch, p, q, width, anchors).is_some())
    {
        return Vec::new();
    }
    walk_runs(stretch, width, |a, b| seam(stretch, a, b, width, anchors))
}

/// The runs of `stretch`, whose widest line is `width` wide: every piece walked, `seam`
/// putting two pieces together.
fn walk_runs(
    stretch: &[u8],
    width: usize,
    seam: impl Fn(&Piece, &Piece) -> Option<&'static [u8]>,
) -> Vec<WrappedRun> {
    let pieces: Vec<Piece> = spans(stretch)
        .map(|(start, end)| piece(stretch, start, end))
        .collect();
    let mut runs = Vec::new();
    let mut i = 0;
    while i + 1 < pieces.len() {
        let Some(first_sep) = (near_full(&pieces[i], width))
            .then(|| seam(&pieces[i], &pieces[i + 1]))
            .flatten()
        else {
            i += 1;
            continue;
        };
        // The message began where the full-width pieces before this one began (an exact
        // wrap only: a wrap at a space gives no such sign).
        let mut first = i;
        while first > 0
            && pieces[first - 1].width == width
            && runs
                .last()
                .is_none_or(|r: &WrappedRun| r.end < pieces[first - 1].start)
        {
            first -= 1;
        }
        let mut text = Vec::new();
        for (k, p) in pieces[first..=i].iter().enumerate() {
            if k > 0 {
                text.extend_from_slice(separator(&pieces[first + k - 1], width));
            }
            text.extend_from_slice(&stretch[p.start..p.end]);
        }
        // It goes on over the next piece, and past it while pieces stay full width (a
        // terminal's wrap) or another seam is crossed.
        let exact = pieces[i].width == width;
        let mut last = i + 1;
        // The indent every line of an indented paste (a Markdown code block, a quote) starts
        // with is the paste's, not the message's: the first piece's, taken off each
        // continuation.
        let indent = leading_blanks(&stretch[pieces[first].start..pieces[first].end]);
        text.extend_from_slice(first_sep);
        text.extend_from_slice(continuation(stretch, &pieces[last], first_sep, indent));
        while last + 1 < pieces.len() {
            let sep = if exact && pieces[last].width == width {
                Some(&b""[..])
            } else {
                near_full(&pieces[last], width)
                    .then(|| seam(&pieces[last], &pieces[last + 1]))
                    .flatten()
            };
            let Some(sep) = sep else { break };
            if pieces[last + 1].start == pieces[last + 1].end {
                break;
            }
            last += 1;
            text.extend_from_slice(sep);
            text.extend_from_slice(continuation(stretch, &pieces[last], sep, indent));
        }
        runs.push(WrappedRun {
            start: pieces[first].start,
            end: pieces[last].end,
            continuation_lines: (last - first) as u32,
            text,
        });
        i = last + 1;
    }
    runs
}

/// Whether `p` fills its line, as a wrapped piece does, given the widest line `width` (a
/// wrap at a space leaves up to a word's room).
fn near_full(p: &Piece, width: usize) -> bool {
    p.width + WORD_SLACK >= width && p.width >= MIN_WIDTH
}

/// Whether an anchor could cross the seam between `a` and `b` at all, from what needs no
/// walk and no width: `b` is not the log's next record, and some separator (none, or a
/// space) has the bytes either side of it adjacent in an anchor. Most line ends of a log
/// stop here.
fn may_seam(stretch: &[u8], a: (usize, usize), b: (usize, usize), anchors: &Anchors) -> bool {
    let a_text = &stretch[a.0..a.1];
    let b_text = trim_start(&stretch[b.0..b.1]);
    // A line that starts as this one did (the same timestamp, level or rank prefix) is the
    // log's next record, not a piece of this one.
    const RECORD_PREFIX: usize = 5;
    let (Some(&last), Some(&first)) = (a_text.last(), b_text.first()) else {
        return false;
    };
    if anchors.max_len() == 0
        || (a_text.len() >= RECORD_PREFIX
            && stretch[b.0..b.1].starts_with(&a_text[..RECORD_PREFIX]))
    {
        return false;
    }
    // An anchor across the seam holds the bytes on either side of it, adjacent (`...200
    // OK` / `INFO ...` ends here).
    anchors.may_join(last, first) || (anchors.may_join(last, b' ') && anchors.may_join(b' ', first))
}

/// The separator that puts `a` and `b` back together so that an anchor crosses the seam:
/// none where the terminal cut inside a word, a space where the cut fell on one (or a tool
/// wrapped at a space and dropped it); `None` when no anchor crosses.
fn seam(
    stretch: &[u8],
    a: &Piece,
    b: &Piece,
    width: usize,
    anchors: &Anchors,
) -> Option<&'static [u8]> {
    if !may_seam(stretch, (a.start, a.end), (b.start, b.end), anchors) {
        return None;
    }
    let max = anchors.max_len();
    let a_text = &stretch[a.start..a.end];
    let b_text = trim_start(&stretch[b.start..b.end]);
    let tail = &a_text[a_text.len().saturating_sub(max)..];
    let head = &b_text[..b_text.len().min(max)];
    let seps: &[&'static [u8]] = if a.width == width {
        &[b"", b" "]
    } else {
        &[b" ", b""]
    };
    let (last, first) = (tail[tail.len() - 1], head[0]);
    let may_cross = |sep: &[u8]| match sep {
        [] => anchors.may_join(last, first),
        [s] => anchors.may_join(last, *s) && anchors.may_join(*s, first),
        _ => true,
    };
    // Allocated only for a seam that passes the check above.
    let mut joined = Vec::new();
    seps.iter()
        .copied()
        .filter(|sep| may_cross(sep))
        .find(|sep| {
            joined.clear();
            joined.extend_from_slice(tail);
            joined.extend_from_slice(sep);
            joined.extend_from_slice(head);
            anchors.crosses(&joined, tail.len()..tail.len() + sep.len())
        })
}

/// What goes between a full-width piece and the next: nothing (the terminal cut there).
fn separator(prev: &Piece, width: usize) -> &'static [u8] {
    if prev.width == width { b"" } else { b" " }
}

/// The text of a continuation piece: as cut after an exact wrap, less the paste's `indent`
/// where it starts with it (a leading space past that is the message's own), without the
/// indent a wrapping tool adds otherwise.
fn continuation<'s>(stretch: &'s [u8], p: &Piece, sep: &[u8], indent: &[u8]) -> &'s [u8] {
    let text = &stretch[p.start..p.end];
    if sep.is_empty() {
        text.strip_prefix(indent).unwrap_or(text)
    } else {
        trim_start(text)
    }
}

/// The spaces and tabs `s` starts with.
fn leading_blanks(s: &[u8]) -> &[u8] {
    &s[..s.iter().take_while(|b| matches!(b, b' ' | b'\t')).count()]
}

fn trim_start(s: &[u8]) -> &[u8] {
    &s[leading_blanks(s).len()..]
}

/// How many UTF-8 continuation bytes (`0b10xx_xxxx`) `line` holds: what a terminal does not
/// count as a column. Summed in 255-byte pieces with a byte-sized count, so the loop
/// compiles to vector compares (a branch per byte cost more than the rest of the seam
/// search on a log with a few non-ASCII characters).
fn continuation_bytes(line: &[u8]) -> usize {
    line.chunks(255)
        .map(|piece| {
            let n = piece
                .iter()
                .fold(0u8, |n, &b| n + u8::from((b as i8) < -64));
            usize::from(n)
        })
        .sum()
}

/// Where the lines of `stretch` start and end (without the newline and a carriage return;
/// a last line without a newline included).
fn spans(stretch: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut ends = memchr::memchr_iter(b'\n', stretch);
    let mut start = 0;
    std::iter::from_fn(move || {
        if start >= stretch.len() {
            return None;
        }
        let nl = ends.next().unwrap_or(stretch.len());
        let end = if nl > start && stretch[nl - 1] == b'\r' {
            nl - 1
        } else {
            nl
        };
        let span = (start, end);
        start = nl + 1;
        Some(span)
    })
}

/// The line `stretch[start..end]` as a piece, with its width.
fn piece(stretch: &[u8], start: usize, end: usize) -> Piece {
    let line = &stretch[start..end];
    // Counted without a test for ASCII first: `is_ascii` per line cost more.
    let width = line.len() - continuation_bytes(line);
    Piece { start, end, width }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anchors() -> Anchors {
        Anchors::new([
            "free memory on device",
            "out of memory",
            "resource exhausted",
        ])
    }

    fn wrap(text: &str, width: usize) -> String {
        let mut out = String::new();
        for line in text.lines() {
            let chars: Vec<char> = line.chars().collect();
            for piece in chars.chunks(width.max(1)) {
                out.extend(piece);
                out.push('\n');
            }
            if chars.is_empty() {
                out.push('\n');
            }
        }
        out
    }

    const VLLM: &str = "[2026-02-24T20:21:58Z] (EngineCore_DP0 pid=6940) ValueError: Free memory on device cuda:1 (19.77/22.05 GiB) on startup is less than desired GPU memory utilization (0.9, 19.84 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.";

    #[test]
    fn an_anchor_cut_by_an_exact_wrap_is_put_back() {
        let log = format!("INFO starting\n{}INFO done\n", wrap(VLLM, 80));
        let runs = wrapped_runs(log.as_bytes(), &anchors());
        assert_eq!(runs.len(), 1);
        let run = &runs[0];
        assert_eq!(String::from_utf8_lossy(&run.text), VLLM);
        assert_eq!(run.continuation_lines, 3);
        assert_eq!(&log[run.start..run.start + 6], "[2026-");
        assert!(log[run.end..].starts_with("\nINFO done"));
    }

    #[test]
    fn an_indented_paste_is_put_back_without_its_indent() {
        // A Markdown code block in an issue: every line, each piece of the wrap included,
        // indented by four spaces; a piece that starts with the message's own space keeps it.
        let indented: String = wrap(VLLM, 75)
            .lines()
            .map(|l| format!("    {l}\n"))
            .collect();
        assert!(
            indented.contains("\n     "),
            "a piece starts with a space of its own"
        );
        let log = format!("    INFO starting\n{indented}    INFO done\n");
        let runs = wrapped_runs(log.as_bytes(), &anchors());
        assert_eq!(runs.len(), 1);
        assert_eq!(
            String::from_utf8_lossy(&runs[0].text),
            format!("    {VLLM}")
        );
        assert_eq!(runs[0].continuation_lines, 3);
    }

    #[test]
    fn a_wrap_at_a_space_is_put_back_with_the_space() {
        let log = "2026-01-01 10:00:00 ERROR tensorflow: Resource\nexhausted: OOM when allocating tensor with shape[64,1024]\nnext line\n";
        let runs = wrapped_runs(log.as_bytes(), &anchors());
        assert_eq!(runs.len(), 1);
        assert_eq!(
            String::from_utf8_lossy(&runs[0].text),
            "2026-01-01 10:00:00 ERROR tensorflow: Resource exhausted: OOM when allocating tensor with shape[64,1024]"
        );
        assert_eq!(runs[0].continuation_lines, 1);
    }

    #[test]
    fn full_width_lines_without_a_cut_anchor_stay_apart() {
        // An nvidia-smi table's rows are all the widest lines; no anchor crosses a seam.
        let row = "| 0  NVIDIA A100-SXM4-80GB  On  | 00000000:07:00.0 Off |                    0 |";
        let log = format!("{row}\n{row}\n{row}\nRuntimeError: CUDA out of memory.\n");
        assert!(wrapped_runs(log.as_bytes(), &anchors()).is_empty());
        // The widest line of a log followed by an unrelated one.
        let log = "x".repeat(90) + "\nout of memory\n";
        assert!(wrapped_runs(log.as_bytes(), &anchors()).is_empty());
    }

    #[test]
    fn an_anchor_cut_at_any_byte_is_put_back() {
        // Every place a terminal can cut each anchor, in either case: the check on the bytes
        // either side of the seam lets each through to the walk.
        let anchors = anchors();
        for anchor in [
            "free memory on device",
            "Out Of Memory",
            "RESOURCE EXHAUSTED",
        ] {
            for cut in 1..anchor.len() {
                let first = format!(
                    "2026-01-01 10:00:00 ERROR worker-3 raised: {}",
                    &anchor[..cut]
                );
                let log = format!(
                    "{first}
{} at step 12
next
",
                    &anchor[cut..]
                );
                let runs = wrapped_runs(log.as_bytes(), &anchors);
                assert_eq!(runs.len(), 1, "{anchor:?} cut after {cut}");
                let text = String::from_utf8_lossy(&runs[0].text).into_owned();
                assert!(text.contains(anchor), "{text}");
            }
        }
    }

    /// The one-pass check before the walk gives up only where the walk over every piece
    /// finds nothing: random logs of prefixed records, wide lines, blank and non-ASCII lines
    /// and anchors cut at random places, with exact wraps and wraps at a space.
    #[test]
    fn the_check_before_the_walk_never_loses_a_run() {
        let anchors = anchors();
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let words = [
            "INFO",
            "step",
            "out of",
            "memory",
            "Free memory",
            "on device",
            "resource",
            "exhausted",
            "█▉",
            "tokens/s",
            "",
        ];
        let mut found = 0;
        for _ in 0..3000 {
            // A paste wrapped at one width: exact cuts (a terminal), cuts at a space that
            // drop it (a wrapping tool), and short lines left whole.
            let width = 40 + next(60) as usize;
            let mut log = String::new();
            for _ in 0..1 + next(10) {
                let mut line = String::new();
                if next(3) == 0 {
                    line.push_str("2026-01-01 10:00:00 ");
                }
                for _ in 0..next(30) {
                    line.push_str(words[next(words.len() as u64) as usize]);
                    line.push(' ');
                }
                let line = line.trim_end();
                match next(3) {
                    0 => log.push_str(&wrap(line, width)),
                    1 => {
                        let mut piece = String::new();
                        for word in line.split(' ') {
                            if !piece.is_empty()
                                && piece.chars().count() + 1 + word.chars().count() > width
                            {
                                log.push_str(&piece);
                                log.push('\n');
                                piece.clear();
                            } else if !piece.is_empty() {
                                piece.push(' ');
                            }
                            piece.push_str(word);
                        }
                        log.push_str(&piece);
                    }
                    _ => log.extend(line.chars().take(width)),
                }
                if !log.ends_with('\n') {
                    log.push('\n');
                }
            }
            let bytes = log.as_bytes();
            let width = spans(bytes)
                .map(|(s, e)| piece(bytes, s, e).width)
                .max()
                .unwrap_or(0);
            let fast = wrapped_runs(bytes, &anchors);
            // The reference walks every piece and joins every seam with no byte check:
            // only the record-prefix rule and the anchor walk.
            let slow_seam = |a: &Piece, b: &Piece| -> Option<&'static [u8]> {
                let a_text = &bytes[a.start..a.end];
                let b_text = trim_start(&bytes[b.start..b.end]);
                if b_text.is_empty()
                    || a_text.is_empty()
                    || (a_text.len() >= 5 && bytes[b.start..b.end].starts_with(&a_text[..5]))
                {
                    return None;
                }
                let max = anchors.max_len();
                let tail = &a_text[a_text.len().saturating_sub(max)..];
                let head = &b_text[..b_text.len().min(max)];
                let seps: [&'static [u8]; 2] = if a.width == width {
                    [b"", b" "]
                } else {
                    [b" ", b""]
                };
                seps.into_iter().find(|sep| {
                    let joined = [tail, sep, head].concat();
                    anchors.crosses(&joined, tail.len()..tail.len() + sep.len())
                })
            };
            let full = if width < MIN_WIDTH {
                Vec::new()
            } else {
                walk_runs(bytes, width, slow_seam)
            };
            assert_eq!(fast, full, "{log:?}");
            found += usize::from(!full.is_empty());
        }
        // The logs do hold runs: the comparison is not between two empty lists.
        assert!(found > 100, "{found} logs with a run");
    }

    #[test]
    fn an_anchor_whole_in_one_piece_needs_no_run() {
        let text = "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.93 GiB total capacity; 6.91 GiB already allocated)";
        assert!(wrapped_runs(wrap(text, 80).as_bytes(), &anchors()).is_empty());
    }
}
