//! The streaming scanner: finds the few interesting lines of a log of any size in constant
//! memory, at close to the speed the disk can deliver it.
//!
//! Most of a crash log is noise (loss values, progress bars, HTTP access lines). Instead of
//! splitting every line and running regexes on it, the scanner keeps one fixed buffer, runs a
//! single multi-literal search ([`aho_corasick`], a DFA over lower-case anchors) over whole
//! chunks, and only for a hit finds the enclosing line and hands it to the sink together with
//! bounded windows of the bytes before and after it (for tracebacks and messages wrapped over
//! several lines). Line numbers come from counting newlines between hits (SIMD `memchr`);
//! where the gate searched, it counted them on its way (see [`NewlineCounter`]).
//!
//! Anchors match ASCII-case-insensitively; [`Anchors`](super::anchors::Anchors) says how the
//! search keeps up with the disk with a few hundred of them. Past the first 32 MiB of a log,
//! and before its last MiB, even that walk is too slow for a CI step over a 1 GiB log: there
//! the [`Gate`] finds the lines worth reading at memory speed, and the anchors are walked
//! only over those and around each failure among them ([`ScanPlan`]).
//!
//! Memory is bounded by the buffer (`BUF_CAP`) whatever the input size. A line longer than
//! the buffer (a 1 GiB line without a newline) is scanned in pieces; hits inside it are
//! delivered with a bounded slice of the line around them.

use std::io::{self, Read};

use super::anchors::Anchors;
use super::gate::Gate;
use super::seams::wrapped_runs;

/// Total buffer size. Reads happen in `READ_SIZE` pieces into its free tail.
const BUF_CAP: usize = 8 << 20;
/// Keep at least this much of what precedes the scan position for look-back windows.
pub const LOOKBACK: usize = 256 << 10;
/// Process a line only when this much of what follows it is already buffered (or EOF).
pub const LOOKAHEAD: usize = 64 << 10;
const READ_SIZE: usize = 2 << 20;
/// A line longer than this is treated as "long" and delivered as a bounded window.
const LONG_LINE: usize = 2 << 20;
/// Bytes around a hit delivered for a long line.
const LONG_LINE_WINDOW: usize = 16 << 10;

/// Where the scan walks every anchor, and where only near the gate's lines
/// ([`super::gate`]).
///
/// A log's head (configuration, banners, model loading) and tail (the failure and its
/// traceback) are walked in full. In between, only lines holding a gate literal are looked at,
/// and around each that marks a failure, a window before and after is walked in full too.
/// A log no longer than `head + tail` is walked in full: every crash log pasted into an issue,
/// every fixture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanPlan {
    /// Bytes from the start walked in full.
    pub head: u64,
    /// Bytes before the end walked in full: held back until the input says whether it ends.
    pub tail: usize,
    /// Bytes walked in full on each side of a failure line the gate found.
    pub window: usize,
}

impl Default for ScanPlan {
    fn default() -> ScanPlan {
        ScanPlan {
            head: 32 << 20,
            tail: 1 << 20,
            window: LOOKBACK,
        }
    }
}

impl ScanPlan {
    /// Every anchor over every byte: what the scan did before the gate, for comparing.
    pub fn full() -> ScanPlan {
        ScanPlan {
            head: u64::MAX,
            ..ScanPlan::default()
        }
    }
}

/// One hit, as the sink sees it.
pub struct Hit<'a> {
    /// 1-based line number.
    pub line_no: u64,
    /// The raw line, without its newline (bounded for over-long lines).
    pub raw: &'a [u8],
    /// Bytes before the line (up to [`LOOKBACK`]); may start mid-line.
    pub before: &'a [u8],
    /// Bytes after the line's newline (up to what is buffered, at least [`LOOKAHEAD`] unless EOF).
    pub after: &'a [u8],
    /// Whether `raw` is a window into a longer line.
    pub truncated: bool,
}

/// Receives hits in order. Returns how many following lines the hit consumed (a message
/// wrapped over several lines), so the scanner does not deliver them again as hits.
pub trait LineSink {
    fn hit(&mut self, hit: &Hit<'_>) -> u32;
}

/// What the scan saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScanStats {
    pub bytes: u64,
    pub lines: u64,
    pub hits: u64,
}

/// Counts newlines.
pub(super) fn count_newlines(s: &[u8]) -> u64 {
    memchr::memchr_iter(b'\n', s).count() as u64
}

/// The newlines before a place in a region, for places asked in order: counted from the
/// nearest place known, the gate's marks ([`Gate::hit_lines`]) or the last one asked. Past a
/// large log's head the gate has counted nearly every byte's newlines already; a second
/// pass over them was an eighth of the scan.
struct NewlineCounter<'a> {
    hay: &'a [u8],
    marks: &'a [(usize, u64)],
    /// The next mark not yet taken.
    next: usize,
    /// The last place known: `(offset, newlines before it)`.
    known: (usize, u64),
}

impl<'a> NewlineCounter<'a> {
    fn new(hay: &'a [u8], marks: &'a [(usize, u64)]) -> Self {
        NewlineCounter {
            hay,
            marks,
            next: 0,
            known: (0, 0),
        }
    }

    /// The newlines in `hay[..at]`; `at` no earlier than the place asked before.
    fn before(&mut self, at: usize) -> u64 {
        while let Some(&mark) = self.marks.get(self.next) {
            if mark.0 > at {
                break;
            }
            if mark.0 >= self.known.0 {
                self.known = mark;
            }
            self.next += 1;
        }
        let n = self.known.1 + count_newlines(&self.hay[self.known.0..at]);
        self.known = (at, n);
        n
    }
}

/// Scans `reader` to the end, delivering lines that contain an anchor to `sink`, every
/// anchor walked over every byte.
pub fn scan(
    reader: &mut dyn Read,
    anchors: &Anchors,
    sink: &mut dyn LineSink,
) -> io::Result<ScanStats> {
    scan_planned(reader, anchors, None, ScanPlan::full(), sink)
}

/// [`scan`], with the anchors walked in full only where `plan` says, `gate` finding the
/// lines in between.
pub fn scan_planned(
    reader: &mut dyn Read,
    anchors: &Anchors,
    gate: Option<&Gate>,
    plan: ScanPlan,
    sink: &mut dyn LineSink,
) -> io::Result<ScanStats> {
    scan_source(Source::Read(reader), anchors, gate, plan, sink)
}

/// Where the scanned bytes come from.
pub enum Source<'a> {
    /// A reader, read into the scan buffer.
    Read(&'a mut dyn Read),
    /// A large regular file, read in place through a moving mapped window (no copy out of
    /// the page cache; see [`crate::input::MappedFile`]).
    Mapped(&'a mut crate::input::MappedFile),
}

/// The bytes the scan works on: the scan buffer a reader fills, or a mapped window. Both
/// keep what the scan still needs (from `keep_from` on) when they make room.
enum Feed<'a> {
    Read(&'a mut dyn Read, ScanBuf),
    Mapped(&'a mut crate::input::MappedFile),
}

impl Feed<'_> {
    /// The bytes held, of which `..end` are filled.
    fn bytes(&self) -> &[u8] {
        match self {
            Feed::Read(_, buf) => buf,
            Feed::Mapped(m) => m.bytes(),
        }
    }

    /// How far [`Feed::bytes`] still holds the input: a mapped file cut short under the map
    /// reads as zeros from the cut on ([`crate::input::MappedFile::shrunk_at`]).
    fn intact_until(&self) -> usize {
        match self {
            Feed::Read(..) => usize::MAX,
            Feed::Mapped(m) => m.shrunk_at().map_or(usize::MAX, |at| {
                usize::try_from(at.saturating_sub(m.window_offset())).unwrap_or(usize::MAX)
            }),
        }
    }

    /// Adds bytes after `end`, dropping those before `keep_from` first where room is
    /// needed. Returns how many were dropped (indices shift down by that much), how many
    /// were added, and whether the input ended.
    fn more(&mut self, keep_from: usize, end: usize) -> io::Result<(usize, usize, bool)> {
        match self {
            Feed::Read(reader, buf) => {
                let mut dropped = 0;
                if BUF_CAP - end < READ_SIZE {
                    buf.copy_within(keep_from..end, 0);
                    dropped = keep_from;
                }
                let end = end - dropped;
                let slot = &mut buf[end..(end + READ_SIZE).min(BUF_CAP)];
                let (n, at_end) = read_at_least(*reader, slot, crate::input::WIDE_PIPE)?;
                Ok((dropped, n, at_end))
            }
            Feed::Mapped(m) => {
                let (dropped, added) = m.advance(keep_from)?;
                Ok((dropped, added, m.at_end()))
            }
        }
    }
}

/// [`scan_planned`] over a [`Source`].
pub fn scan_source(
    source: Source<'_>,
    anchors: &Anchors,
    gate: Option<&Gate>,
    plan: ScanPlan,
    sink: &mut dyn LineSink,
) -> io::Result<ScanStats> {
    // The tail is held back in the buffer, with room for a read and the look-back.
    let plan = ScanPlan {
        tail: plan.tail.min(BUF_CAP - READ_SIZE - LOOKBACK - LONG_LINE),
        ..plan
    };
    let mut feed = match source {
        Source::Read(reader) => Feed::Read(reader, ScanBuf::take()),
        Source::Mapped(m) => Feed::Mapped(m),
    };
    let mut base: u64 = 0; // input offset of `buf[0]`
    let mut pos = 0usize; // next byte to scan; a line start unless `in_long_line`
    let mut end = 0usize; // bytes filled
    let mut eof = false;
    let mut line_no: u64 = 1; // line number of the line that starts at `pos`
    let mut skip_lines: u64 = 0; // lines consumed by the previous hit's look-ahead
    let mut in_long_line = false;
    let mut stats = ScanStats::default();
    let max_anchor = anchors.max_len();
    // Whether to look for anchors cut by a hard wrap: in the first stretch of every input,
    // and past it where that stretch had one.
    let mut seam_search = true;
    let mut first_region = true;
    let mut region = RegionHits::default();
    // Input offset up to which a failure's window asks for every anchor to be walked.
    let mut walk_until: u64 = 0;

    loop {
        // Make room and read.
        if !eof {
            let (dropped, n, at_end) = feed.more(pos.saturating_sub(LOOKBACK), end)?;
            base += dropped as u64;
            pos -= dropped;
            end -= dropped;
            // The reader is not asked again once it said "end" (a terminal would wait for a
            // second Ctrl-D); what it gave before that is scanned first.
            eof = at_end;
            end += n;
            stats.bytes += n as u64;
        }
        let buf = feed.bytes();

        // Past the head, whole lines up to the held-back tail are searched through the gate.
        let gate = gate.filter(|_| !eof && !in_long_line && base + pos as u64 >= plan.head);
        let gated_limit = gate.and_then(|_| {
            let soft = end.saturating_sub(plan.tail.max(LOOKAHEAD));
            (soft > pos)
                .then(|| memchr::memrchr(b'\n', &buf[pos..soft]))
                .flatten()
                .map(|i| pos + i + 1)
        });
        if gate.is_some() && gated_limit.is_none() && end - pos < plan.tail + LONG_LINE {
            continue; // the tail is not buffered yet
        }
        // Decide how far to scan: whole lines whose look-ahead is buffered.
        let limit = if let Some(l) = gated_limit {
            l
        } else if eof {
            end
        } else {
            let soft = end.saturating_sub(LOOKAHEAD);
            match (soft > pos)
                .then(|| memchr::memrchr(b'\n', &buf[pos..soft]))
                .flatten()
            {
                Some(i) => pos + i + 1,
                None if end - pos >= LONG_LINE => {
                    // No newline in a long stretch: scan a piece of the long line.
                    in_long_line = true;
                    let piece_end = pos + LONG_LINE / 2;
                    // Matches starting in the overlap are left to the next piece, which holds them whole.
                    let report_before = piece_end.saturating_sub(max_anchor);
                    scan_long_piece(
                        &buf[..end],
                        pos,
                        piece_end,
                        report_before,
                        line_no,
                        anchors,
                        sink,
                        &mut stats,
                    );
                    // Overlap by the longest anchor so one split across pieces is still seen.
                    pos = piece_end.saturating_sub(max_anchor).max(pos + 1);
                    continue;
                }
                None => continue, // need more data
            }
        };

        if in_long_line {
            // Finish the long line: its remaining bytes up to the first newline.
            let nl = memchr::memchr(b'\n', &buf[pos..limit]).map(|i| pos + i);
            let stop = nl.unwrap_or(limit);
            scan_long_piece(
                &buf[..end],
                pos,
                stop,
                stop,
                line_no,
                anchors,
                sink,
                &mut stats,
            );
            match nl {
                Some(n) => {
                    pos = n + 1;
                    line_no += 1;
                    in_long_line = false;
                }
                None => {
                    pos = stop;
                    if eof {
                        break;
                    }
                    continue;
                }
            }
        }

        // Scan [pos, limit) for anchors, and for anchors a hard wrap cut in two.
        let runs = if seam_search {
            wrapped_runs(&buf[pos..limit], anchors)
        } else {
            Vec::new()
        };
        if first_region {
            // A paste wrapped at a fixed width shows it early; a log that did not is not
            // walked line by line past its first stretch.
            seam_search = !runs.is_empty();
            first_region = false;
        }
        region.offsets.clear();
        region.newline_marks.clear();
        let at = base + pos as u64;
        match (gate, gated_limit) {
            (Some(gate), Some(_)) => {
                let window_end = gated_hit_lines(
                    anchors,
                    gate,
                    plan.window,
                    &buf[pos..end.min(limit + plan.window)],
                    limit - pos,
                    usize::try_from(walk_until.saturating_sub(at)).unwrap_or(usize::MAX),
                    &mut region,
                );
                walk_until = walk_until.max(at.saturating_add(window_end as u64));
            }
            _ => anchors.hit_lines(&buf[pos..limit], &mut region.offsets),
        }
        let region_start = pos;
        let region_line = line_no; // the line that starts at `region_start`
        let mut newlines = NewlineCounter::new(&buf[region_start..limit], &region.newline_marks);
        let mut counted = pos; // the lines started before `counted` are in `line_no`
        let mut covered_until = 0usize; // a delivered wrapped run ends here
        let mut runs = runs.into_iter().peekable();
        let mut offsets = region.offsets.iter().copied().peekable();
        loop {
            let next_run = runs.peek().map(|r| pos + r.start);
            let next_hit = offsets.peek().map(|&o| pos + o);
            // In order of place: a hit before the next wrapped run, else the run.
            let (at, run) = match (next_run, next_hit) {
                (None, None) => break,
                (Some(r), Some(h)) if h < r => {
                    offsets.next();
                    (h, None)
                }
                (None, Some(h)) => {
                    offsets.next();
                    (h, None)
                }
                (Some(r), _) => (r, runs.next()),
            };
            if run.is_none() && at <= covered_until {
                continue; // inside the wrapped message just delivered whole
            }
            if at >= feed.intact_until() {
                // A mapped file cut short since its hits were found: the rest reads as
                // zeros, and each hit left would be a line of them up to `limit`.
                break;
            }
            let line_start = memchr::memrchr(b'\n', &buf[region_start.max(counted)..at])
                .map(|i| region_start.max(counted) + i + 1)
                .unwrap_or(region_start.max(counted));
            line_no = region_line + newlines.before(line_start - region_start);
            counted = line_start;
            let line_end = match &run {
                Some(r) => pos + r.end,
                None => memchr::memchr(b'\n', &buf[at..limit])
                    .map(|i| at + i)
                    .unwrap_or(limit),
            };
            let next = (line_end + 1).min(limit);
            if skip_lines > 0 && line_no <= skip_lines {
                continue;
            }
            stats.hits += 1;
            let mut raw = match &run {
                Some(r) => &r.text[..],
                None => &buf[line_start..line_end],
            };
            if raw.last() == Some(&b'\r') {
                raw = &raw[..raw.len() - 1];
            }
            let before_start = line_start.saturating_sub(LOOKBACK);
            let after_end = end.min(next + LOOKAHEAD.max(4096) * 2);
            let hit = Hit {
                line_no,
                raw,
                before: &buf[before_start..line_start],
                after: &buf[next.min(end)..after_end],
                truncated: false,
            };
            let consumed = sink.hit(&hit);
            let joined = match &run {
                Some(r) => {
                    covered_until = line_end;
                    u64::from(r.continuation_lines)
                }
                None => 0,
            };
            if consumed > 0 || joined > 0 {
                skip_lines = line_no + joined + consumed as u64;
            }
        }
        line_no = region_line + newlines.before(limit - region_start);
        pos = limit;
        if eof && pos >= end {
            break;
        }
    }
    // A final line without a newline still counts as a line.
    stats.lines = if stats.bytes == 0 {
        0
    } else {
        line_no - u64::from(ends_with_newline(&feed.bytes()[..end]))
    };
    Ok(stats)
}

/// What the search of a region leaves for the scan.
#[derive(Default)]
struct RegionHits {
    /// One offset inside each line that holds an anchor, in order.
    offsets: Vec<usize>,
    /// Where the gate counted the region's newlines (see [`NewlineCounter`]); empty where
    /// the region was walked in full.
    newline_marks: Vec<(usize, u64)>,
}

/// Appends to `found.offsets`, in order, one offset inside each line of `hay[..limit]`
/// that holds an anchor, looking only at the lines the gate finds and, around each that
/// marks a failure, at every line within `window` bytes before and after it.
///
/// `hay` runs up to `window` bytes past `limit`, so that a failure just past the region
/// has its window before it walked here; `walk_to` is where a window from the region
/// before ends (from `hay`'s start). Returns where the last window ends, which may be past
/// `limit`: the next region walks on to there. Sets `found.newline_marks` to the gate's
/// newline counts in `hay[..limit]` (see [`Gate::hit_lines`]), the last one at `limit`.
fn gated_hit_lines(
    anchors: &Anchors,
    gate: &Gate,
    window: usize,
    hay: &[u8],
    limit: usize,
    walk_to: usize,
    found: &mut RegionHits,
) -> usize {
    let RegionHits {
        offsets: out,
        newline_marks,
    } = found;
    // The end of the line holding byte `at` (its newline), or `limit`.
    let line_end = |at: usize| -> usize {
        if at >= limit {
            return limit;
        }
        memchr::memchr(b'\n', &hay[at..limit]).map_or(limit, |i| at + i)
    };
    // The stretches to walk, each from a line start to a line's end: the rest of the window
    // from the region before, each reading line, and each failure line with its window.
    let mut stretches: Vec<(usize, usize)> = Vec::new();
    if walk_to > 0 {
        stretches.push((0, line_end(walk_to.min(limit))));
    }
    let mut window_end = walk_to;
    // A region holds a few gate lines at most, where the gate is worth its while.
    let mut gate_lines = Vec::new();
    // In two parts, split at `limit` (a line start, and no literal holds a newline, so the
    // same lines): the first leaves its newline count at `limit`, where the region ends.
    gate.hit_lines(&hay[..limit], &mut gate_lines, newline_marks);
    let in_region = gate_lines.len();
    gate.hit_lines(&hay[limit..], &mut gate_lines, &mut Vec::new());
    for g in &mut gate_lines[in_region..] {
        *g += limit;
    }
    for g in gate_lines {
        let start = memchr::memrchr(b'\n', &hay[..g]).map_or(0, |i| i + 1);
        let end = memchr::memchr(b'\n', &hay[g..]).map_or(hay.len(), |i| g + i);
        // `g` is the line's first literal, so no other starts before it: the failure check
        // reads on from there, not from the line's start again.
        if !gate.marks_failure(&hay[g..end]) {
            // A reading (or a gate word in a line no recogniser wants): the line alone.
            if start < limit {
                stretches.push((start, end.min(limit)));
            }
            continue;
        }
        // Whole lines from `window` before the failure line to `window` after it.
        let from = start.saturating_sub(window);
        let from = if from == 0 {
            0
        } else {
            memchr::memchr(b'\n', &hay[from..start]).map_or(start, |i| from + i + 1)
        };
        if from >= limit {
            break; // the failure and its window are the next region's
        }
        window_end = window_end.max(end + window);
        stretches.push((from, line_end((end + window).min(limit))));
    }
    // In order, overlapping ones merged: each line is walked, and reported, once.
    stretches.sort_unstable();
    let mut walked = 0usize;
    for (from, to) in stretches {
        let from = from.max(walked);
        if from < to {
            let n = out.len();
            anchors.hit_lines(&hay[from..to], out);
            for o in &mut out[n..] {
                *o += from;
            }
            walked = to;
        }
    }
    window_end
}

thread_local! {
    /// The scan buffer of the last scan on this thread, kept for the next one.
    static SPARE: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// The scan buffer, reused across the scans on one thread: a directory of 10,000 small logs
/// otherwise allocated (and the allocator zeroed) 8 MiB per file, half of the run's time.
/// One buffer per reading thread keeps memory flat.
struct ScanBuf(Vec<u8>);

impl ScanBuf {
    fn take() -> ScanBuf {
        let mut v = SPARE.with(std::cell::Cell::take);
        if v.len() != BUF_CAP {
            v = vec![0u8; BUF_CAP];
        }
        ScanBuf(v)
    }
}

impl Drop for ScanBuf {
    fn drop(&mut self) {
        let v = std::mem::take(&mut self.0);
        // `try_with`: during thread teardown the slot may be gone; the buffer is then freed.
        let _ = SPARE.try_with(|s| s.set(v));
    }
}

impl std::ops::Deref for ScanBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl std::ops::DerefMut for ScanBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

fn ends_with_newline(buf: &[u8]) -> bool {
    buf.last() == Some(&b'\n')
}

/// Reads into `out` until at least `at_least` bytes (or all of `out`, if smaller) are in,
/// or the reader ends: a pipe hands over what it holds, 64 KiB or 1 MiB a read, and
/// scanning each such sliver on its own (each walk's fixed costs paid per sliver) made
/// standard input twice as slow as the same file named on the command line. Waiting for
/// more than the pipe holds is no better: the scan then waits for the writer, and the
/// writer, with the pipe full, for the scan.
/// Returns the bytes read and whether the reader reached its end.
fn read_at_least(
    reader: &mut dyn Read,
    out: &mut [u8],
    at_least: usize,
) -> io::Result<(usize, bool)> {
    let mut filled = 0;
    while filled < at_least.min(out.len()) {
        match read_retrying(reader, &mut out[filled..])? {
            0 => return Ok((filled, true)),
            n => filled += n,
        }
    }
    Ok((filled, false))
}

fn read_retrying(reader: &mut dyn Read, out: &mut [u8]) -> io::Result<usize> {
    loop {
        match reader.read(out) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Scans one piece of an over-long line and delivers each hit that starts before
/// `report_before` with a bounded window.
#[allow(clippy::too_many_arguments)]
fn scan_long_piece(
    buf: &[u8],
    from: usize,
    to: usize,
    report_before: usize,
    line_no: u64,
    anchors: &Anchors,
    sink: &mut dyn LineSink,
    stats: &mut ScanStats,
) {
    let mut search_from = from;
    while search_from < to {
        let Some(m) = anchors.find(&buf[search_from..to]) else {
            break;
        };
        let at = search_from + m.start;
        if at >= report_before {
            break;
        }
        let w_start = at.saturating_sub(LONG_LINE_WINDOW / 4).max(from);
        let w_end = (at + LONG_LINE_WINDOW).min(to);
        stats.hits += 1;
        let hit = Hit {
            line_no,
            raw: &buf[w_start..w_end],
            before: &[],
            after: &[],
            truncated: true,
        };
        sink.hit(&hit);
        // One delivery per window: the window already covers nearby hits.
        search_from = w_end.max(at + 1);
    }
}

/// Iterates the complete lines of a look-back window, nearest first.
pub fn lines_back(before: &[u8]) -> impl Iterator<Item = &[u8]> {
    // The first line of the window may be partial (the window starts mid-line): drop it
    // unless the window starts at the beginning of the input, which we cannot tell here, so
    // keep it only when it is the whole window.
    let body = before.strip_suffix(b"\n").unwrap_or(before);
    let first_nl = memchr::memchr(b'\n', body);
    let complete = match first_nl {
        Some(i) if before.len() >= LOOKBACK => &body[i + 1..],
        _ => body,
    };
    let mut rest = if before.is_empty() {
        None
    } else {
        Some(complete)
    };
    std::iter::from_fn(move || {
        let r = rest?;
        match memchr::memrchr(b'\n', r) {
            Some(i) => {
                rest = Some(&r[..i]);
                Some(strip_cr(&r[i + 1..]))
            }
            None => {
                rest = None;
                Some(strip_cr(r))
            }
        }
    })
}

/// Iterates the lines of a look-ahead window, in order.
pub fn lines_forward(after: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = if after.is_empty() { None } else { Some(after) };
    std::iter::from_fn(move || {
        let r = rest?;
        match memchr::memchr(b'\n', r) {
            Some(i) => {
                rest = if i + 1 < r.len() {
                    Some(&r[i + 1..])
                } else {
                    None
                };
                Some(strip_cr(&r[..i]))
            }
            None => {
                rest = None;
                Some(strip_cr(r))
            }
        }
    })
}

fn strip_cr(s: &[u8]) -> &[u8] {
    s.strip_suffix(b"\r").unwrap_or(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Collect(Vec<(u64, String, usize, usize)>);
    impl LineSink for Collect {
        fn hit(&mut self, h: &Hit<'_>) -> u32 {
            self.0.push((
                h.line_no,
                String::from_utf8_lossy(h.raw).into_owned(),
                h.before.len(),
                h.after.len(),
            ));
            0
        }
    }

    fn ac(pats: &[&str]) -> Anchors {
        Anchors::new(pats)
    }

    #[test]
    fn finds_lines_with_numbers() {
        let text = "a\nb OOM here\nc\nd\nout of memory\n";
        let mut sink = Collect(vec![]);
        let stats = scan(
            &mut text.as_bytes(),
            &ac(&["oom", "out of memory"]),
            &mut sink,
        )
        .unwrap();
        let got: Vec<(u64, &str)> = sink.0.iter().map(|(l, s, ..)| (*l, s.as_str())).collect();
        assert_eq!(got, vec![(2, "b OOM here"), (5, "out of memory")]);
        assert_eq!(stats.lines, 5);
        assert_eq!(stats.hits, 2);
    }

    #[test]
    fn an_anchor_cut_by_a_hard_wrap_is_delivered_joined_once() {
        // A message cut at 80 columns inside an anchor (`d` / `esired`), whose last piece
        // holds another anchor that must not be delivered a second time.
        let text = "start\nValueError: Free memory on device cuda:1 (19.77/22.05 GiB) is less than d\nesired GPU memory utilization (oom) and more\nnext line oom\n";
        let mut sink = Collect(vec![]);
        let stats = scan(
            &mut text.as_bytes(),
            &ac(&["free memory on device", "oom", "desired gpu memory"]),
            &mut sink,
        )
        .unwrap();
        let got: Vec<(u64, &str)> = sink.0.iter().map(|(l, s, ..)| (*l, s.as_str())).collect();
        assert_eq!(
            got,
            vec![
                (
                    2,
                    "ValueError: Free memory on device cuda:1 (19.77/22.05 GiB) is less than desired GPU memory utilization (oom) and more"
                ),
                (4, "next line oom"),
            ]
        );
        assert_eq!(stats.lines, 4);
    }

    #[test]
    fn one_delivery_per_line_and_no_trailing_newline() {
        let text = "x oom oom oom\r\nlast oom";
        let mut sink = Collect(vec![]);
        let stats = scan(&mut text.as_bytes(), &ac(&["oom"]), &mut sink).unwrap();
        assert_eq!(sink.0.len(), 2);
        assert_eq!(sink.0[0].1, "x oom oom oom");
        assert_eq!(sink.0[1].0, 2);
        assert_eq!(stats.lines, 2);
    }

    #[test]
    fn line_numbers_survive_buffer_shifts() {
        // ~30 MB over many reads; hits spread throughout.
        let mut text = String::new();
        let mut want = vec![];
        for i in 1..=400_000u64 {
            if i % 50_000 == 0 {
                text.push_str("Killed process 1 (python)\n");
                want.push(i);
            } else {
                text.push_str(
                    "step 123 loss 0.123456 lr 1e-4 grad_norm 1.0 tokens/s 12345.6 ........\n",
                );
            }
        }
        let mut sink = Collect(vec![]);
        let stats = scan(&mut text.as_bytes(), &ac(&["killed process"]), &mut sink).unwrap();
        let got: Vec<u64> = sink.0.iter().map(|h| h.0).collect();
        assert_eq!(got, want);
        assert_eq!(stats.lines, 400_000);
        // Windows are bounded.
        assert!(
            sink.0
                .iter()
                .all(|h| h.2 <= LOOKBACK && h.3 <= 4 * LOOKAHEAD)
        );
    }

    #[test]
    fn over_long_lines_are_windowed() {
        let mut text = vec![b'x'; 5 << 20];
        text.extend_from_slice(b" out of memory ");
        text.extend(std::iter::repeat_n(b'y', 3 << 20));
        text.extend_from_slice(b"\nsecond out of memory\n");
        let mut sink = Collect(vec![]);
        let stats = scan(&mut &text[..], &ac(&["out of memory"]), &mut sink).unwrap();
        assert_eq!(sink.0.len(), 2);
        assert!(sink.0[0].1.contains("out of memory") && sink.0[0].1.len() <= LONG_LINE_WINDOW * 2);
        assert_eq!(
            sink.0[1],
            (
                2,
                "second out of memory".to_string(),
                sink.0[1].2,
                sink.0[1].3
            )
        );
        assert_eq!(stats.lines, 2);
    }

    #[test]
    fn consumed_lines_are_not_delivered_again() {
        struct Consume(Vec<u64>);
        impl LineSink for Consume {
            fn hit(&mut self, h: &Hit<'_>) -> u32 {
                self.0.push(h.line_no);
                2
            }
        }
        let text = "oom 1\noom 2\noom 3\noom 4\n";
        let mut sink = Consume(vec![]);
        scan(&mut text.as_bytes(), &ac(&["oom"]), &mut sink).unwrap();
        assert_eq!(sink.0, vec![1, 4]);
    }

    /// Hands out its bytes `step` at a time, as a pipe does.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
    }
    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = self.step.min(out.len()).min(self.data.len());
            out[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    /// The hit lines (number, raw text) a scan with the recognisers' anchors delivers.
    fn hits_of(reader: &mut dyn Read) -> Vec<(u64, String)> {
        let mut sink = Collect(vec![]);
        scan(reader, crate::ingest::log::engines::anchors(), &mut sink).unwrap();
        sink.0.into_iter().map(|(l, s, ..)| (l, s)).collect()
    }

    /// The slow path: every line, lower-cased, searched for every anchor.
    fn slow_hits(text: &[u8]) -> Vec<(u64, String)> {
        let pats = crate::ingest::log::engines::anchors().patterns();
        let mut out = vec![];
        let body = text.strip_suffix(b"\n").unwrap_or(text);
        if text.is_empty() {
            return out;
        }
        // A message a hard wrap cut an anchor of comes whole, once, at its first line.
        let runs =
            crate::ingest::log::seams::wrapped_runs(text, crate::ingest::log::engines::anchors());
        let line_of = |offset: usize| memchr::memchr_iter(b'\n', &text[..offset]).count() + 1;
        let mut runs = runs
            .iter()
            .map(|r| (line_of(r.start), line_of(r.end), &r.text))
            .peekable();
        for (i, line) in body.split(|&b| b == b'\n').enumerate() {
            let n = i + 1;
            if let Some(&(first, last, joined)) = runs.peek() {
                if n == first {
                    out.push((n as u64, String::from_utf8_lossy(joined).into_owned()));
                }
                if n >= first && n <= last {
                    if n == last {
                        runs.next();
                    }
                    continue;
                }
            }
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let lower = line.to_ascii_lowercase();
            if pats
                .iter()
                .any(|p| memchr::memmem::find(&lower, p.as_bytes()).is_some())
            {
                out.push((i as u64 + 1, String::from_utf8_lossy(line).into_owned()));
            }
        }
        out
    }

    /// Lower, upper and alternating case of an anchor.
    fn case_variants(p: &str) -> [String; 3] {
        let mixed = p
            .chars()
            .enumerate()
            .map(|(i, c)| {
                if i % 2 == 0 {
                    c.to_ascii_uppercase()
                } else {
                    c.to_ascii_lowercase()
                }
            })
            .collect();
        [p.to_ascii_lowercase(), p.to_ascii_uppercase(), mixed]
    }

    const NOISE: &str = "0123 4567 89 0.25 [12/34]\n";

    /// Every anchor a recogniser relies on brings its line to the sink, in any ASCII case,
    /// with CRLF line ends and on a last line without a newline, and noise lines around it
    /// stay out.
    #[test]
    fn every_anchor_is_found_in_every_case() {
        assert!(slow_hits(NOISE.as_bytes()).is_empty());
        for p in crate::ingest::log::engines::anchors().patterns() {
            for v in case_variants(p) {
                for (text, want_line) in [
                    (format!("{NOISE}a {v} b\n{NOISE}"), 2),
                    (format!("{NOISE}{NOISE}x{v}y\r\n{NOISE}"), 3),
                    (format!("{NOISE}{v}"), 2),
                ] {
                    let got = hits_of(&mut text.as_bytes());
                    assert_eq!(
                        got.iter().map(|h| h.0).collect::<Vec<_>>(),
                        [want_line],
                        "anchor {v:?} in {text:?}"
                    );
                    assert!(!got[0].1.ends_with('\r'));
                    assert_eq!(got, slow_hits(text.as_bytes()));
                }
            }
        }
    }

    /// An anchor split across two reads (at every offset inside it, at the buffer's read
    /// boundary and in a pipe's small reads) is still found, on the right line.
    #[test]
    fn anchors_split_across_reads_are_found() {
        let pats = crate::ingest::log::engines::anchors().patterns();
        let longest = pats.iter().max_by_key(|p| p.len()).unwrap();
        for p in [&pats[0], &pats[pats.len() / 2], longest] {
            let v = &case_variants(p)[2];
            for cut in 0..=v.len() {
                // Filler lines up to just before the read boundary, then the anchor's line
                // so that the boundary falls `cut` bytes into the anchor.
                let mut text = String::new();
                let mut lines = 0u64;
                while text.len() + NOISE.len() + 3 < READ_SIZE - cut {
                    text.push_str(NOISE);
                    lines += 1;
                }
                text.push_str(&"x".repeat(READ_SIZE - cut - 3 - text.len()));
                text.push_str("\n> ");
                assert_eq!(text.len() + cut, READ_SIZE);
                text.push_str(v);
                text.push_str(" <\n");
                for _ in 0..1000 {
                    text.push_str(NOISE);
                }
                let want = vec![(lines + 2, format!("> {v} <"))];
                assert_eq!(hits_of(&mut text.as_bytes()), want, "{v:?} cut at {cut}");
                if cut == 1 {
                    for step in [7, 4096, 65536] {
                        let got = hits_of(&mut Trickle {
                            data: text.as_bytes(),
                            step,
                        });
                        assert_eq!(got, want, "{v:?} read {step} bytes at a time");
                    }
                }
            }
        }
    }

    /// A line longer than the whole buffer still yields its anchors, and the lines after it
    /// keep their numbers.
    #[test]
    fn lines_longer_than_the_buffer() {
        let mut text = b"first line\n".to_vec();
        text.extend(std::iter::repeat_n(b'z', BUF_CAP + (1 << 20)));
        text.extend_from_slice(b" CUDA Out Of Memory ");
        text.extend(std::iter::repeat_n(b'z', 1000));
        text.extend_from_slice(b"\nKilled process 12 (python)");
        let mut sink = Collect(vec![]);
        let stats = scan(
            &mut &text[..],
            crate::ingest::log::engines::anchors(),
            &mut sink,
        )
        .unwrap();
        assert_eq!(sink.0.len(), 2);
        assert_eq!(sink.0[0].0, 2);
        assert!(sink.0[0].1.contains("CUDA Out Of Memory"));
        assert_eq!(sink.0[1].0, 3);
        assert_eq!(sink.0[1].1, "Killed process 12 (python)");
        assert_eq!(stats.lines, 3);
    }

    /// Differential test over every fixture: the scan delivers exactly the lines the slow
    /// path (each line searched for each anchor) finds, whole or trickled in as from a pipe.
    #[test]
    fn agrees_with_the_slow_path_on_every_fixture() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        let mut stack = vec![root];
        let mut files = 0;
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                    continue;
                }
                let text = std::fs::read(&p).unwrap();
                // The slow path splits on every newline; over-long lines are windowed.
                if text.split(|&b| b == b'\n').any(|l| l.len() >= LONG_LINE) {
                    continue;
                }
                files += 1;
                let want = slow_hits(&text);
                assert_eq!(hits_of(&mut &text[..]), want, "{}", p.display());
                let got = hits_of(&mut Trickle {
                    data: &text,
                    step: 4093,
                });
                assert_eq!(got, want, "{} (trickled)", p.display());
            }
        }
        assert!(files > 20, "only {files} fixtures");
    }

    #[test]
    fn windows_iterate_lines() {
        let before = b"one\ntwo\nthree\n";
        assert_eq!(
            lines_back(before).collect::<Vec<_>>(),
            vec![&b"three"[..], b"two", b"one"]
        );
        let after = b"four\r\nfive\nsix";
        assert_eq!(
            lines_forward(after).collect::<Vec<_>>(),
            vec![&b"four"[..], b"five", b"six"]
        );
        assert_eq!(lines_back(b"").count(), 0);
    }
}
