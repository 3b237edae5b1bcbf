//! The sink every parser writes samples into: device, process and engine tracks, keyed the
//! way the inputs name them, with landmark line texts and the input's counters.
//!
//! Parsers only decode rows; this module owns what is common to all of them: mapping device
//! indices and UUIDs to tracks, the sample limit, the clock of the input (wall, relative,
//! sequence) and which lines' texts to keep for provenance.

use std::collections::HashMap;
use std::sync::Arc;

use super::error::{SeriesError, excerpt};
use super::model::{
    Cells, Clock, DeviceSeries, EngineSeries, InputSummary, LineTexts, ProcessSeries, SeriesSet,
    Track,
};
use super::time::Stamp;
use super::{SeriesFormat, limits};
use crate::facts::evidence::InputName;

const MIB: u64 = 1 << 20;

/// Something that can write the text of the current row (a raw line, or CSV fields).
pub(crate) trait TextSource {
    fn write_text(&self, out: &mut Vec<u8>);
    /// Where the sample's cells are in the text [`write_text`](Self::write_text) writes.
    fn cells(&self) -> Cells {
        Cells::default()
    }
}

impl TextSource for [u8] {
    fn write_text(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
}

/// CSV fields joined back with a separator: untrimmed fields joined with the delimiter
/// give back the line as written.
pub(crate) struct Fields<'a>(pub &'a csv::ByteRecord, pub &'static str);

impl TextSource for Fields<'_> {
    fn write_text(&self, out: &mut Vec<u8>) {
        for (i, f) in self.0.iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(self.1.as_bytes());
            }
            out.extend_from_slice(f);
        }
    }
}

impl<'a> Fields<'a> {
    /// Byte range of field `i` (its whitespace trimmed) in the text the fields write.
    pub(crate) fn span_of(&self, i: usize) -> Option<(u32, u32)> {
        let f = self.0.get(i)?;
        let start: usize = self.0.iter().take(i).map(<[u8]>::len).sum::<usize>() + i * self.1.len();
        let lead = f.iter().take_while(|c| c.is_ascii_whitespace()).count();
        let len = super::time::trim(f).len();
        let a = u32::try_from(start + lead).ok()?;
        (len > 0).then_some((a, a + u32::try_from(len).ok()?))
    }

    /// These fields with the columns of the sample's value, total, time and id marked.
    pub(crate) fn marked(
        self,
        value: Option<usize>,
        total: Option<usize>,
        time: Option<usize>,
        id: Option<usize>,
    ) -> MarkedFields<'a> {
        let cells = Cells {
            value: value.and_then(|i| self.span_of(i)),
            total: total.and_then(|i| self.span_of(i)),
            time: time.and_then(|i| self.span_of(i)),
            id: id.and_then(|i| self.span_of(i)),
        };
        MarkedFields(self, cells)
    }
}

/// CSV fields with the cells of the sample they hold (see [`Fields::marked`]).
pub(crate) struct MarkedFields<'a>(Fields<'a>, Cells);

impl TextSource for MarkedFields<'_> {
    fn write_text(&self, out: &mut Vec<u8>) {
        self.0.write_text(out);
    }
    fn cells(&self) -> Cells {
        self.1
    }
}

/// Lines of a text input, read into one reused buffer, each bounded to
/// [`limits::MAX_LINE`] bytes (the rest of a longer line is discarded and flagged).
pub(crate) struct Lines<R> {
    r: R,
    buf: Vec<u8>,
    line: u64,
}

impl<R: std::io::BufRead> Lines<R> {
    pub(crate) fn new(r: R) -> Self {
        Lines {
            r,
            buf: Vec::with_capacity(256),
            line: 0,
        }
    }

    /// The next line (without `\r\n`), its 1-based number, and whether it was cut.
    pub(crate) fn next_line(&mut self) -> std::io::Result<Option<(u64, &[u8], bool)>> {
        self.buf.clear();
        let mut cut = false;
        let mut any = false;
        loop {
            let avail = self.r.fill_buf()?;
            if avail.is_empty() {
                if !any {
                    return Ok(None);
                }
                break;
            }
            any = true;
            let (chunk, done) = match memchr::memchr(b'\n', avail) {
                Some(i) => (&avail[..i], Some(i + 1)),
                None => (avail, None),
            };
            let room = limits::MAX_LINE.saturating_sub(self.buf.len());
            if chunk.len() > room {
                cut = true;
            }
            self.buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
            let used = done.unwrap_or(avail.len());
            self.r.consume(used);
            if done.is_some() {
                break;
            }
        }
        self.line += 1;
        if self.line == 1 && self.buf.starts_with(b"\xEF\xBB\xBF") {
            self.buf.drain(..3);
        }
        if self.buf.last() == Some(&b'\r') {
            self.buf.pop();
        }
        Ok(Some((self.line, &self.buf, cut)))
    }
}

/// How a row names its device.
#[derive(Clone, Copy, Debug)]
pub(crate) enum DevRef<'a> {
    Index(u32),
    /// A UUID (`GPU-…`) or PCI bus id; the index is assigned in order of appearance.
    Name(&'a str),
    /// Both: the index is known and the UUID is recorded.
    Both(u32, &'a str),
    /// The input does not say (single-GPU files).
    Unnamed,
}

/// Which engine metric a sample is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EngineMetric {
    KvUsage,
    Running,
    Waiting,
    Preemptions,
}

/// Running state of one track while reading.
#[derive(Debug, Default)]
struct Landmarks {
    cur: Vec<u8>,
    prev: Vec<u8>,
    cur_cells: Cells,
    prev_cells: Cells,
    prev_line: u64,
    prev_value: Option<f64>,
    peak: f64,
    started: bool,
}

impl Landmarks {
    /// Records the text of a sample and keeps it (and its predecessor) when it is a
    /// landmark. `step` is the change that counts as large for this track.
    fn observe(
        &mut self,
        texts: &mut LineTexts,
        line: u64,
        value: f64,
        step: f64,
        text: &(impl TextSource + ?Sized),
        peak: bool,
    ) {
        self.cur.clear();
        text.write_text(&mut self.cur);
        self.cur_cells = text.cells();
        if !self.started {
            texts.keep_cells(line, &self.cur, self.cur_cells, f64::INFINITY);
        } else if let Some(p) = self.prev_value {
            let delta = (value - p).abs();
            if delta >= step {
                texts.keep_cells(line, &self.cur, self.cur_cells, delta);
                texts.keep_cells(self.prev_line, &self.prev, self.prev_cells, delta);
            }
        }
        if peak && (!self.started || value > self.peak) {
            self.peak = value;
            texts.keep_peak(line, &self.cur, self.cur_cells);
        }
        self.started = true;
        std::mem::swap(&mut self.cur, &mut self.prev);
        std::mem::swap(&mut self.cur_cells, &mut self.prev_cells);
        self.prev_line = line;
        self.prev_value = Some(value);
    }

    fn finish(&self, texts: &mut LineTexts) {
        if self.started {
            texts.keep_cells(self.prev_line, &self.prev, self.prev_cells, f64::INFINITY);
        }
    }
}

struct DevBuild {
    series: DeviceSeries,
    marks: Landmarks,
    /// Samples pushed so far (the time of a sequence-clock sample).
    seq: i64,
}

struct ProcBuild {
    series: ProcessSeries,
    marks: Landmarks,
}

struct EngineBuild {
    series: EngineSeries,
    marks: [Landmarks; 4],
}

/// Collects one input's samples.
pub(crate) struct Builder {
    pub(crate) input: InputName,
    format: SeriesFormat,
    clock: Option<Clock>,
    naive: bool,
    devs: Vec<DevBuild>,
    dev_by_index: HashMap<(u32, Option<Arc<str>>), usize>,
    /// Slots of small device indices without a host: the per-row lookup of every
    /// nvidia-smi line, kept off the hash map.
    dev_fast: Vec<Option<usize>>,
    dev_by_name: HashMap<(String, Option<Arc<str>>), usize>,
    procs: Vec<ProcBuild>,
    proc_by_key: HashMap<(u32, u32, String), usize>,
    engines: Vec<EngineBuild>,
    engine_by_label: HashMap<String, usize>,
    samples: usize,
    limit: usize,
    pub(crate) rows: u64,
    skipped: u64,
    first_skipped: Option<(u64, String, String)>,
    missing: u64,
    notes: Vec<String>,
}

impl Builder {
    pub(crate) fn new(input: &InputName, format: SeriesFormat) -> Self {
        Builder {
            input: input.clone(),
            format,
            clock: None,
            naive: false,
            devs: Vec::new(),
            dev_by_index: HashMap::new(),
            dev_fast: Vec::new(),
            dev_by_name: HashMap::new(),
            procs: Vec::new(),
            proc_by_key: HashMap::new(),
            engines: Vec::new(),
            engine_by_label: HashMap::new(),
            samples: 0,
            limit: limits::MAX_SAMPLES,
            rows: 0,
            skipped: 0,
            first_skipped: None,
            missing: 0,
            notes: Vec::new(),
        }
    }

    #[cfg(test)]
    pub(crate) fn with_limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    pub(crate) fn note(&mut self, note: impl Into<String>) {
        let note = note.into();
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }

    /// Counts a row that could not be read.
    pub(crate) fn skip(&mut self, line: u64, text: &[u8], reason: &str) {
        self.skipped += 1;
        if self.first_skipped.is_none() {
            self.first_skipped = Some((line, excerpt(text), reason.to_string()));
        }
    }

    /// Counts a row whose memory value is missing (`[N/A]`).
    pub(crate) fn missing(&mut self) {
        self.missing += 1;
    }

    pub(crate) fn clock(&self) -> Option<Clock> {
        self.clock
    }

    /// The input's time for a parsed stamp; `None` when it contradicts the clock of the
    /// earlier rows (a date among elapsed seconds), which the caller skips.
    pub(crate) fn time(&mut self, stamp: Stamp) -> Option<i64> {
        let (clock, ms) = match stamp {
            Stamp::Wall { ms, naive } => {
                self.naive |= naive;
                (Clock::Wall, ms)
            }
            Stamp::Relative { ms } => (Clock::Relative, ms),
        };
        match self.clock {
            None => {
                self.clock = Some(clock);
                Some(ms)
            }
            Some(c) if c == clock => Some(ms),
            Some(_) => None,
        }
    }

    /// Declares that the input has no timestamps (times are sample numbers).
    pub(crate) fn sequence(&mut self) {
        if self.clock.is_none() {
            self.clock = Some(Clock::Sequence);
        }
    }

    /// The track of a device, created on first sight.
    pub(crate) fn device(&mut self, r: DevRef<'_>, host: Option<&str>) -> usize {
        if let (DevRef::Index(i), None) = (r, host) {
            if let Some(&Some(slot)) = self.dev_fast.get(i as usize) {
                return slot;
            }
        }
        let slot = self.device_slow(r, host);
        if let (DevRef::Index(i), None) = (r, host) {
            if i < 256 {
                if self.dev_fast.len() <= i as usize {
                    self.dev_fast.resize(i as usize + 1, None);
                }
                self.dev_fast[i as usize] = Some(slot);
            }
        }
        slot
    }

    fn device_slow(&mut self, r: DevRef<'_>, host: Option<&str>) -> usize {
        let host_key: Option<Arc<str>> = host.map(Arc::from);
        let (index, name) = match r {
            DevRef::Index(i) => (Some(i), None),
            DevRef::Name(n) => (None, Some(n)),
            DevRef::Both(i, n) => (Some(i), Some(n)),
            DevRef::Unnamed => (Some(0), None),
        };
        if let Some(n) = name {
            if let Some(&slot) = self.dev_by_name.get(&(n.to_string(), host_key.clone())) {
                return slot;
            }
        }
        if let Some(i) = index {
            if let Some(&slot) = self.dev_by_index.get(&(i, host_key.clone())) {
                if let Some(n) = name {
                    self.dev_by_name.insert((n.to_string(), host_key), slot);
                    let d = &mut self.devs[slot].series;
                    if d.uuid.is_none() && n.starts_with("GPU-") {
                        d.uuid = Some(n.to_string());
                    }
                }
                return slot;
            }
        }
        let inferred = index.is_none();
        let index = index.unwrap_or_else(|| {
            // Devices named only by UUID or bus id: number them in order of appearance,
            // after any explicit index.
            self.devs
                .iter()
                .filter(|d| d.series.host.as_deref() == host)
                .map(|d| d.series.index + 1)
                .max()
                .unwrap_or(0)
        });
        let slot = self.devs.len();
        self.devs.push(DevBuild {
            series: DeviceSeries {
                index,
                index_inferred: inferred,
                uuid: name
                    .filter(|n| n.starts_with("GPU-") || n.starts_with("MIG-"))
                    .map(str::to_string),
                name: None,
                host: host.map(str::to_string),
                input: self.input.clone(),
                clock: Clock::Sequence,
                naive_time: false,
                total_bytes: None,
                used: Track::default(),
                texts: LineTexts::default(),
            },
            marks: Landmarks::default(),
            seq: 0,
        });
        self.dev_by_index.insert((index, host_key.clone()), slot);
        if let Some(n) = name {
            self.dev_by_name.insert((n.to_string(), host_key), slot);
        }
        slot
    }

    /// Sets the model name of a device (first one wins).
    pub(crate) fn device_name(&mut self, slot: usize, name: &str) {
        if let Some(d) = self.devs.get_mut(slot) {
            if d.series.name.is_none() && !name.is_empty() {
                d.series.name = Some(name.to_string());
            }
        }
    }

    /// The total a device has reported so far.
    pub(crate) fn device_total(&self, slot: usize) -> Option<u64> {
        self.devs.get(slot).and_then(|d| d.series.total_bytes)
    }

    /// The next sequence number of a device (for inputs without timestamps).
    pub(crate) fn device_seq(&self, slot: usize) -> i64 {
        self.devs.get(slot).map_or(0, |d| d.seq)
    }

    fn count(&mut self, line: u64) -> Result<(), SeriesError> {
        self.samples += 1;
        if self.samples > self.limit {
            return Err(SeriesError::TooManySamples {
                input: self.input.clone(),
                line,
                limit: self.limit,
            });
        }
        Ok(())
    }

    /// Adds a device sample.
    pub(crate) fn push_device(
        &mut self,
        slot: usize,
        t: i64,
        used: u64,
        total: Option<u64>,
        line: u64,
        text: &(impl TextSource + ?Sized),
    ) -> Result<(), SeriesError> {
        self.count(line)?;
        let Some(d) = self.devs.get_mut(slot) else {
            return Ok(());
        };
        if let Some(tot) = total.filter(|&t| t > 0) {
            d.series.total_bytes = Some(d.series.total_bytes.map_or(tot, |x| x.max(tot)));
        }
        let scale = d.series.total_bytes.map_or(d.marks.peak, |t| t as f64);
        let step = (scale / 32.0).max((64 * MIB) as f64);
        d.marks
            .observe(&mut d.series.texts, line, used as f64, step, text, true);
        d.series.used.push(t, used, line);
        d.seq += 1;
        Ok(())
    }

    /// The track of a process on a device.
    pub(crate) fn process(
        &mut self,
        device: u32,
        device_uuid: Option<&str>,
        pid: u32,
        name: &str,
    ) -> usize {
        let key = (device, pid, name.to_string());
        if let Some(&slot) = self.proc_by_key.get(&key) {
            return slot;
        }
        let slot = self.procs.len();
        self.procs.push(ProcBuild {
            series: ProcessSeries {
                device,
                device_uuid: device_uuid.map(str::to_string),
                pid,
                name: name.to_string(),
                input: self.input.clone(),
                clock: Clock::Sequence,
                naive_time: false,
                used: Track::default(),
                texts: LineTexts::default(),
            },
            marks: Landmarks::default(),
        });
        self.proc_by_key.insert(key, slot);
        slot
    }

    /// The index a device UUID or bus id maps to in this input (assigned in order).
    pub(crate) fn device_index_for(&mut self, name: &str) -> u32 {
        let slot = self.device_slot_for_name(name);
        self.devs.get(slot).map_or(0, |d| d.series.index)
    }

    fn device_slot_for_name(&mut self, name: &str) -> usize {
        self.device(DevRef::Name(name), None)
    }

    /// Adds a process sample.
    pub(crate) fn push_process(
        &mut self,
        slot: usize,
        t: i64,
        used: u64,
        line: u64,
        text: &(impl TextSource + ?Sized),
    ) -> Result<(), SeriesError> {
        self.count(line)?;
        let Some(p) = self.procs.get_mut(slot) else {
            return Ok(());
        };
        let step = (p.marks.peak / 16.0).max((256 * MIB) as f64);
        p.marks
            .observe(&mut p.series.texts, line, used as f64, step, text, true);
        p.series.used.push(t, used, line);
        Ok(())
    }

    /// The engine track for a label (`vllm engine=0 model=…`).
    pub(crate) fn engine(&mut self, label: &str) -> usize {
        if let Some(&slot) = self.engine_by_label.get(label) {
            return slot;
        }
        let slot = self.engines.len();
        self.engines.push(EngineBuild {
            series: EngineSeries {
                label: label.to_string(),
                input: self.input.clone(),
                clock: Clock::Sequence,
                naive_time: false,
                kv_usage: Track::default(),
                requests_running: Track::default(),
                requests_waiting: Track::default(),
                preemptions: Track::default(),
                texts: LineTexts::default(),
            },
            marks: Default::default(),
        });
        self.engine_by_label.insert(label.to_string(), slot);
        slot
    }

    /// Adds an engine metric sample.
    pub(crate) fn push_engine(
        &mut self,
        slot: usize,
        metric: EngineMetric,
        t: i64,
        value: f64,
        line: u64,
        text: &(impl TextSource + ?Sized),
    ) -> Result<(), SeriesError> {
        self.count(line)?;
        let Some(e) = self.engines.get_mut(slot) else {
            return Ok(());
        };
        let (mark, step) = match metric {
            EngineMetric::KvUsage => (0, 0.05),
            EngineMetric::Running => (1, 1.0),
            EngineMetric::Waiting => (2, 1.0),
            EngineMetric::Preemptions => (3, 1.0),
        };
        // Scale significance so a 5-point KV change and one request weigh alike.
        let (v, step) = if metric == EngineMetric::KvUsage {
            (value * 20.0, step * 20.0)
        } else {
            (value, step)
        };
        e.marks[mark].observe(&mut e.series.texts, line, v, step, text, false);
        match metric {
            EngineMetric::KvUsage => e.series.kv_usage.push(t, value as f32, line),
            EngineMetric::Running => e.series.requests_running.push(t, value as f32, line),
            EngineMetric::Waiting => e.series.requests_waiting.push(t, value as f32, line),
            EngineMetric::Preemptions => e.series.preemptions.push(t, value, line),
        }
        Ok(())
    }

    /// Ends reading: checks the input was mostly readable and returns its series.
    pub(crate) fn finish(
        self,
        hint: impl FnOnce() -> Option<String>,
    ) -> Result<SeriesSet, SeriesError> {
        let readable = self.rows.saturating_sub(self.skipped);
        if let Some((line, text, reason)) = &self.first_skipped {
            // Mostly unparseable: more bad rows than good ones (and not just a torn last line).
            if self.skipped > readable && self.skipped >= 3 || self.samples == 0 && readable == 0 {
                return Err(SeriesError::Unparseable {
                    input: self.input.clone(),
                    format: self.format,
                    line: *line,
                    text: text.clone(),
                    reason: format!("{reason} (`{text}`)"),
                    bad: self.skipped,
                    rows: self.rows,
                    help: hint(),
                });
            }
        }
        if self.samples == 0 {
            return Err(SeriesError::Empty {
                input: self.input.clone(),
                format: self.format,
                help: hint(),
            });
        }
        let clock = self.clock.unwrap_or(Clock::Sequence);
        let mut set = SeriesSet::default();
        for mut d in self.devs {
            if d.series.used.is_empty() {
                continue;
            }
            d.marks.finish(&mut d.series.texts);
            d.series.clock = clock;
            d.series.naive_time = self.naive && clock == Clock::Wall;
            d.series.used.sort();
            d.series.used.shrink();
            set.devices.push(Arc::new(d.series));
        }
        for mut p in self.procs {
            if p.series.used.is_empty() {
                continue;
            }
            p.marks.finish(&mut p.series.texts);
            p.series.clock = clock;
            p.series.naive_time = self.naive && clock == Clock::Wall;
            p.series.used.sort();
            p.series.used.shrink();
            set.processes.push(Arc::new(p.series));
        }
        for mut e in self.engines {
            if e.series.samples() == 0 {
                continue;
            }
            for m in &e.marks {
                m.finish(&mut e.series.texts);
            }
            e.series.clock = clock;
            e.series.naive_time = self.naive && clock == Clock::Wall;
            e.series.kv_usage.sort();
            e.series.requests_running.sort();
            e.series.requests_waiting.sort();
            e.series.preemptions.sort();
            set.engines.push(Arc::new(e.series));
        }
        set.devices.sort_by_key(|d| (d.host.clone(), d.index));
        set.inputs.push(InputSummary {
            input: self.input,
            format: self.format,
            clock,
            naive_time: self.naive && clock == Clock::Wall,
            rows: self.rows,
            samples: self.samples as u64,
            skipped: self.skipped,
            first_skipped_line: self.first_skipped.map(|(l, _, _)| l),
            missing: self.missing,
            notes: self.notes,
        });
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input() -> InputName {
        Arc::from("t.csv")
    }

    #[test]
    fn lines_are_numbered_bounded_and_stripped() {
        let long = "x".repeat(limits::MAX_LINE + 10);
        let text = format!("\u{feff}a\r\n\n{long}\nlast");
        let mut l = Lines::new(text.as_bytes());
        assert_eq!(l.next_line().unwrap(), Some((1, b"a".as_slice(), false)));
        assert_eq!(l.next_line().unwrap(), Some((2, b"".as_slice(), false)));
        let (n, t, cut) = l.next_line().unwrap().unwrap();
        assert_eq!((n, t.len(), cut), (3, limits::MAX_LINE, true));
        assert_eq!(l.next_line().unwrap(), Some((4, b"last".as_slice(), false)));
        assert_eq!(l.next_line().unwrap(), None);
    }

    #[test]
    fn devices_named_by_uuid_get_indices_in_order() {
        let mut b = Builder::new(&input(), SeriesFormat::SmiApps);
        let a = b.device(DevRef::Name("GPU-aaa"), None);
        let c = b.device(DevRef::Name("GPU-ccc"), None);
        assert_eq!(b.device(DevRef::Name("GPU-aaa"), None), a);
        b.push_device(a, 0, 1, None, 1, b"x".as_slice()).unwrap();
        b.push_device(c, 0, 1, None, 2, b"y".as_slice()).unwrap();
        let set = b.finish(|| None).unwrap();
        let idx: Vec<(u32, bool)> = set
            .devices
            .iter()
            .map(|d| (d.index, d.index_inferred))
            .collect();
        assert_eq!(idx, vec![(0, true), (1, true)]);
        assert_eq!(set.devices[0].uuid.as_deref(), Some("GPU-aaa"));
    }

    #[test]
    fn landmark_texts_keep_both_sides_of_a_drop() {
        let mut b = Builder::new(&input(), SeriesFormat::PlainCsv);
        let d = b.device(DevRef::Index(0), None);
        let gib = 1u64 << 30;
        for (i, used) in [10 * gib, 10 * gib, 10 * gib + 1, 23 * gib, 23 * gib, 0, 0]
            .iter()
            .enumerate()
        {
            let text = format!("row {i}");
            b.push_device(
                d,
                i as i64,
                *used,
                Some(24 * gib),
                i as u64 + 1,
                text.as_bytes(),
            )
            .unwrap();
        }
        let set = b.finish(|| None).unwrap();
        let texts = &set.devices[0].texts;
        assert_eq!(texts.get(1).as_deref(), Some("row 0"), "first");
        assert_eq!(texts.get(2), None, "a flat sample is not a landmark");
        assert_eq!(texts.get(3).as_deref(), Some("row 2"), "before the ramp");
        assert_eq!(texts.get(4).as_deref(), Some("row 3"), "the ramp and peak");
        assert_eq!(
            texts.get(5).as_deref(),
            Some("row 4"),
            "last high before the drop"
        );
        assert_eq!(texts.get(6).as_deref(), Some("row 5"), "the drop");
        assert_eq!(texts.get(7).as_deref(), Some("row 6"), "last");
    }

    #[test]
    fn the_sample_limit_is_an_error_naming_the_line() {
        let mut b = Builder::new(&input(), SeriesFormat::PlainCsv).with_limit(2);
        let d = b.device(DevRef::Unnamed, None);
        b.push_device(d, 0, 1, None, 2, b"a".as_slice()).unwrap();
        b.push_device(d, 1, 1, None, 3, b"a".as_slice()).unwrap();
        let err = b
            .push_device(d, 2, 1, None, 4, b"a".as_slice())
            .unwrap_err();
        assert!(
            matches!(
                err,
                SeriesError::TooManySamples {
                    line: 4,
                    limit: 2,
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn mostly_unreadable_input_is_an_error_with_the_first_bad_line() {
        let mut b = Builder::new(&input(), SeriesFormat::PlainCsv);
        let d = b.device(DevRef::Unnamed, None);
        b.rows = 5;
        b.push_device(d, 0, 1, None, 2, b"ok".as_slice()).unwrap();
        for l in 3..7 {
            b.skip(l, b"garbage", "no number");
        }
        let err = b.finish(|| Some("hint".into())).unwrap_err();
        match err {
            SeriesError::Unparseable {
                line, bad, rows, ..
            } => assert_eq!((line, bad, rows), (3, 4, 5)),
            other => panic!("{other:?}"),
        }
    }
}
