//! The in-memory model of memory series: devices, processes, engine metrics.
//!
//! Samples are stored struct-of-arrays ([`Track`]: time, value, source line), 20 bytes per
//! device sample, so ten million samples fit in about 200 MB and analysis walks plain
//! slices. Series are read whole (as the architecture says), with a sample limit.
//!
//! Provenance needs the text of the line a fact came from, but keeping every line's text
//! would multiply memory by five. Each track therefore keeps the text of a bounded set of
//! *landmark* lines chosen while reading ([`LineTexts`]): the first and last sample, the
//! peak, and the samples on both sides of every large change (ramps, spikes, drops), which
//! are the samples analysis points at. Other samples keep their line number only.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use crate::facts::evidence::InputName;

/// How a series measures time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Clock {
    /// Milliseconds since the Unix epoch (UTC, or naive times read as UTC).
    Wall,
    /// Milliseconds since an unknown start (an `elapsed` column).
    Relative,
    /// No timestamps: the value is the scrape or sample number.
    Sequence,
}

impl Clock {
    /// Whether values are milliseconds (rates per second make sense).
    pub fn is_timed(self) -> bool {
        !matches!(self, Clock::Sequence)
    }

    /// Formats a time value of this clock for people; wall times as RFC 3339 UTC (see
    /// [`Clock::format_as_read`] for times read without a zone).
    pub fn format(self, t: i64) -> String {
        self.format_as_read(t, false)
    }

    /// Formats a time value of this clock as its input wrote it: a wall time read without a
    /// zone (`naive`, nvidia-smi's local time) without one (`2025-09-07T22:33:21.481`), a
    /// zoned one in UTC with a `Z`.
    pub fn format_as_read(self, t: i64, naive: bool) -> String {
        match self {
            Clock::Wall => super::time::format_wall(t, naive),
            Clock::Relative => format!("+{:.1} s", t as f64 / 1000.0),
            Clock::Sequence => format!("sample {t}"),
        }
    }
}

/// A run of samples: times, values and the 1-based line each came from.
#[derive(Clone, Debug, Default)]
pub struct Track<T> {
    t: Vec<i64>,
    v: Vec<T>,
    line: Vec<u32>,
}

impl<T: Copy> Track<T> {
    pub(crate) fn push(&mut self, t: i64, v: T, line: u64) {
        self.t.push(t);
        self.v.push(v);
        // Lines past 4 billion saturate: such a file is beyond the sample limit anyway.
        self.line.push(u32::try_from(line).unwrap_or(u32::MAX));
    }
    pub fn len(&self) -> usize {
        self.t.len()
    }
    pub fn is_empty(&self) -> bool {
        self.t.is_empty()
    }
    /// Sample times in the track's [`Clock`].
    pub fn times(&self) -> &[i64] {
        &self.t
    }
    pub fn values(&self) -> &[T] {
        &self.v
    }
    /// The 1-based input line of sample `i`.
    pub fn line(&self, i: usize) -> Option<u64> {
        self.line.get(i).map(|&l| u64::from(l))
    }
    /// Index of the last sample at or before `t` (times are sorted).
    pub fn at_or_before(&self, t: i64) -> Option<usize> {
        self.t.partition_point(|&x| x <= t).checked_sub(1)
    }

    /// Sorts by time (stable, so same-time samples keep file order), if not sorted already.
    pub(crate) fn sort(&mut self) {
        if self.t.windows(2).all(|w| w[0] <= w[1]) {
            return;
        }
        let mut idx: Vec<usize> = (0..self.t.len()).collect();
        idx.sort_by_key(|&i| self.t[i]);
        self.t = idx.iter().map(|&i| self.t[i]).collect();
        self.v = idx.iter().map(|&i| self.v[i]).collect();
        self.line = idx.iter().map(|&i| self.line[i]).collect();
    }

    pub(crate) fn shrink(&mut self) {
        self.t.shrink_to_fit();
        self.v.shrink_to_fit();
        self.line.shrink_to_fit();
    }

    /// Bytes of sample storage (for the benchmark's memory accounting).
    pub fn heap_bytes(&self) -> usize {
        self.t.capacity() * 8
            + self.v.capacity() * std::mem::size_of::<T>()
            + self.line.capacity() * 4
    }
}

/// Where, in a kept line's text, the cells a sample was read from are: byte ranges of the
/// value (memory used), the device's total, the timestamp and what names the track (the
/// GPU index, the process id), so evidence can underline the number it quotes rather than
/// the whole row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cells {
    pub value: Option<(u32, u32)>,
    pub total: Option<(u32, u32)>,
    pub time: Option<(u32, u32)>,
    pub id: Option<(u32, u32)>,
}

impl Cells {
    /// The same cells in the text [`make_text`] keeps of `raw`: shifted past the leading
    /// whitespace it trims, and dropped where the kept text differs from the raw bytes
    /// (invalid UTF-8 replaced, or cut) so no span ever points at the wrong characters.
    fn in_kept(self, raw: &[u8], kept: &str) -> Cells {
        let lead = raw.iter().take_while(|c| c.is_ascii_whitespace()).count() as u32;
        let raw_trimmed = crate::ingest::series::time::trim(raw);
        let fix = |c: Option<(u32, u32)>| {
            let (a, b) = c?;
            let (a, b) = (a.checked_sub(lead)?, b.checked_sub(lead)?);
            let (au, bu) = (a as usize, b as usize);
            (au < bu
                && kept.is_char_boundary(au)
                && kept.is_char_boundary(bu)
                && raw_trimmed.get(au..bu) == kept.as_bytes().get(au..bu))
            .then_some((a, b))
        };
        Cells {
            value: fix(self.value),
            total: fix(self.total),
            time: fix(self.time),
            id: fix(self.id),
        }
    }
}

/// Texts of landmark lines of one track (see the module doc).
#[derive(Clone, Debug, Default)]
pub struct LineTexts {
    /// Line → (text, its cells, significance of the change it marks).
    events: BTreeMap<u32, (Arc<str>, Cells, f64)>,
    /// Events below this significance are no longer kept (raised when the store is full).
    floor: f64,
    peak: Option<(u32, Arc<str>, Cells)>,
}

/// Landmark texts kept per track before the least significant are dropped.
const MAX_TEXTS: usize = 2048;
/// Provenance texts are bounded, as the evidence model asks.
const MAX_TEXT_CHARS: usize = 400;

impl LineTexts {
    /// Text of `line`, if it was kept.
    pub fn get(&self, line: u64) -> Option<Arc<str>> {
        self.get_with_cells(line).map(|(t, _)| t)
    }

    /// Text of `line`, if it was kept, and where its cells are in it.
    pub fn get_with_cells(&self, line: u64) -> Option<(Arc<str>, Cells)> {
        let l = u32::try_from(line).ok()?;
        if let Some((pl, t, c)) = &self.peak {
            if *pl == l {
                return Some((t.clone(), *c));
            }
        }
        self.events.get(&l).map(|(t, c, _)| (t.clone(), *c))
    }

    /// Keeps a line's text with a significance (`f64::INFINITY` for must-keep lines).
    #[cfg(test)]
    pub(crate) fn keep(&mut self, line: u64, text: &[u8], significance: f64) {
        self.keep_cells(line, text, Cells::default(), significance);
    }

    /// Keeps a line's text and its cells (byte ranges in `text`) with a significance.
    pub(crate) fn keep_cells(&mut self, line: u64, text: &[u8], cells: Cells, significance: f64) {
        if significance < self.floor {
            return;
        }
        let l = u32::try_from(line).unwrap_or(u32::MAX);
        if self.events.contains_key(&l) {
            return;
        }
        let kept = make_text(text);
        let cells = cells.in_kept(text, &kept);
        self.events.insert(l, (kept, cells, significance));
        if self.events.len() > MAX_TEXTS {
            // Keep the most significant half: raise the bar to the median significance.
            let mut sig: Vec<f64> = self.events.values().map(|(_, _, s)| *s).collect();
            let k = sig.len() - MAX_TEXTS / 2;
            sig.select_nth_unstable_by(k, f64::total_cmp);
            let floor = sig.get(k).copied().unwrap_or(f64::INFINITY).max(self.floor);
            self.events.retain(|_, (_, _, s)| *s >= floor);
            if self.events.len() > MAX_TEXTS {
                // All ties: drop the tied level too, so the store always shrinks.
                self.events.retain(|_, (_, _, s)| *s > floor);
            }
            self.floor = floor;
        }
    }

    pub(crate) fn keep_peak(&mut self, line: u64, text: &[u8], cells: Cells) {
        let l = u32::try_from(line).unwrap_or(u32::MAX);
        let kept = make_text(text);
        let cells = cells.in_kept(text, &kept);
        self.peak = Some((l, kept, cells));
    }

    /// Lines whose text is kept.
    pub fn len(&self) -> usize {
        self.events.len() + usize::from(self.peak.is_some())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn make_text(text: &[u8]) -> Arc<str> {
    let s = String::from_utf8_lossy(crate::ingest::series::time::trim(text));
    if s.chars().count() > MAX_TEXT_CHARS {
        let cut: String = s.chars().take(MAX_TEXT_CHARS).collect();
        Arc::from(format!("{cut}…"))
    } else {
        Arc::from(s.as_ref())
    }
}

/// Memory of one GPU over time.
#[derive(Clone, Debug)]
pub struct DeviceSeries {
    /// The device index (nvidia-smi `index`, DCGM `gpu`); inferred from order when the input
    /// only names devices by UUID or bus id (see `index_inferred`).
    pub index: u32,
    pub index_inferred: bool,
    pub uuid: Option<String>,
    /// Model name (`NVIDIA A10G`), when the input gives it.
    pub name: Option<String>,
    /// Host label (DCGM `Hostname`), when present.
    pub host: Option<String>,
    pub input: InputName,
    pub clock: Clock,
    /// Wall times were read without a zone (see [`Clock::format_as_read`]).
    pub naive_time: bool,
    /// Device capacity: the largest total the input reported (`memory.total`, FB_TOTAL,
    /// or used + free).
    pub total_bytes: Option<u64>,
    /// Used bytes per sample.
    pub used: Track<u64>,
    pub texts: LineTexts,
}

/// Memory of one process on one GPU over time (nvidia-smi `--query-compute-apps`).
#[derive(Clone, Debug)]
pub struct ProcessSeries {
    pub device: u32,
    pub device_uuid: Option<String>,
    pub pid: u32,
    pub name: String,
    pub input: InputName,
    pub clock: Clock,
    /// Wall times were read without a zone (see [`Clock::format_as_read`]).
    pub naive_time: bool,
    pub used: Track<u64>,
    pub texts: LineTexts,
}

/// Serving-engine metrics over time (vLLM, SGLang), one engine instance.
#[derive(Clone, Debug)]
pub struct EngineSeries {
    /// `vllm`, `sglang` or `plain`, and the engine's labels (`engine="0"`, model name).
    pub label: String,
    pub input: InputName,
    pub clock: Clock,
    /// Wall times were read without a zone (see [`Clock::format_as_read`]).
    pub naive_time: bool,
    /// KV cache usage, 0..1.
    pub kv_usage: Track<f32>,
    pub requests_running: Track<f32>,
    pub requests_waiting: Track<f32>,
    /// Cumulative preemptions (a counter: it resets when the engine restarts).
    pub preemptions: Track<f64>,
    pub texts: LineTexts,
}

impl DeviceSeries {
    /// A time of this series as its input wrote it (see [`Clock::format_as_read`]).
    pub fn time_text(&self, t: i64) -> String {
        self.clock.format_as_read(t, self.naive_time)
    }
}

impl ProcessSeries {
    /// A time of this series as its input wrote it (see [`Clock::format_as_read`]).
    pub fn time_text(&self, t: i64) -> String {
        self.clock.format_as_read(t, self.naive_time)
    }
}

impl EngineSeries {
    /// A time of this series as its input wrote it (see [`Clock::format_as_read`]).
    pub fn time_text(&self, t: i64) -> String {
        self.clock.format_as_read(t, self.naive_time)
    }

    pub fn samples(&self) -> usize {
        self.kv_usage.len()
            + self.requests_running.len()
            + self.requests_waiting.len()
            + self.preemptions.len()
    }
}

/// What one input contributed, and what it could not read.
#[derive(Clone, Debug, Serialize)]
pub struct InputSummary {
    pub input: InputName,
    pub format: super::SeriesFormat,
    pub clock: Clock,
    /// Whether wall times had no zone and were read as UTC.
    pub naive_time: bool,
    /// Data rows (lines) read, including skipped ones.
    pub rows: u64,
    pub samples: u64,
    /// Rows that could not be read and were skipped.
    pub skipped: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_skipped_line: Option<u64>,
    /// Rows whose memory value was `[N/A]` / `[Not Supported]`.
    pub missing: u64,
    /// Assumptions made while reading (column layout of a headerless file, units).
    pub notes: Vec<String>,
}

/// Everything read from one or more series inputs.
#[derive(Clone, Debug, Default)]
pub struct SeriesSet {
    pub inputs: Vec<InputSummary>,
    pub devices: Vec<Arc<DeviceSeries>>,
    pub processes: Vec<Arc<ProcessSeries>>,
    pub engines: Vec<Arc<EngineSeries>>,
}

impl SeriesSet {
    /// Adds another input's series (`gpu.csv` and `apps.csv` of the same run). Devices are
    /// matched by UUID where both sides have one, so a compute-apps file that names GPUs only
    /// by UUID takes the indices of a query-gpu file that has both.
    pub fn merge(&mut self, other: SeriesSet) {
        let mut remap: Vec<(u32, u32)> = Vec::new();
        for dev in other.devices {
            let same = self
                .devices
                .iter()
                .position(|d| match (&d.uuid, &dev.uuid) {
                    (Some(a), Some(b)) => a == b,
                    _ => {
                        d.index == dev.index
                            && !d.index_inferred
                            && !dev.index_inferred
                            && d.host == dev.host
                    }
                });
            match same {
                Some(i) => {
                    let keep = &self.devices[i];
                    remap.push((dev.index, keep.index));
                    // Two inputs with the same device (nvidia-smi and DCGM): keep the denser.
                    if dev.used.len() > keep.used.len() {
                        let mut d = (*dev).clone();
                        d.index = keep.index;
                        d.index_inferred = keep.index_inferred && dev.index_inferred;
                        self.devices[i] = Arc::new(d);
                    }
                }
                None => {
                    let mut d = (*dev).clone();
                    if d.index_inferred && self.devices.iter().any(|x| x.index == d.index) {
                        let next = self.devices.iter().map(|x| x.index + 1).max().unwrap_or(0);
                        remap.push((d.index, next));
                        d.index = next;
                    }
                    self.devices.push(Arc::new(d));
                }
            }
        }
        for p in other.processes {
            let mut p = (*p).clone();
            if let Some(uuid) = &p.device_uuid {
                if let Some(d) = self
                    .devices
                    .iter()
                    .find(|d| d.uuid.as_deref() == Some(uuid.as_str()))
                {
                    p.device = d.index;
                }
            } else if let Some((_, to)) = remap.iter().find(|(from, _)| *from == p.device) {
                p.device = *to;
            }
            self.processes.push(Arc::new(p));
        }
        // Processes read before their GPU file: map UUIDs now known.
        for p in &mut self.processes {
            if let Some(uuid) = &p.device_uuid {
                if let Some(d) = self
                    .devices
                    .iter()
                    .find(|d| d.uuid.as_deref() == Some(uuid.as_str()))
                {
                    if d.index != p.device {
                        Arc::make_mut(p).device = d.index;
                    }
                }
            }
        }
        self.engines.extend(other.engines);
        self.inputs.extend(other.inputs);
    }

    /// Samples of every track.
    pub fn samples(&self) -> usize {
        self.devices.iter().map(|d| d.used.len()).sum::<usize>()
            + self.processes.iter().map(|p| p.used.len()).sum::<usize>()
            + self.engines.iter().map(|e| e.samples()).sum::<usize>()
    }

    /// Rows skipped over all inputs.
    pub fn skipped(&self) -> u64 {
        self.inputs.iter().map(|i| i.skipped).sum()
    }

    /// Whether any wall time was read without a zone.
    pub fn naive_time(&self) -> bool {
        self.inputs.iter().any(|i| i.naive_time)
    }

    /// Bytes of sample storage.
    pub fn heap_bytes(&self) -> usize {
        self.devices
            .iter()
            .map(|d| d.used.heap_bytes())
            .sum::<usize>()
            + self
                .processes
                .iter()
                .map(|p| p.used.heap_bytes())
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracks_sort_stably_and_find_samples_by_time() {
        let mut t = Track::<u64>::default();
        t.push(30, 3, 3);
        t.push(10, 1, 1);
        t.push(20, 2, 2);
        t.sort();
        assert_eq!(t.times(), &[10, 20, 30]);
        assert_eq!(t.values(), &[1, 2, 3]);
        assert_eq!(t.line(0), Some(1));
        assert_eq!(t.at_or_before(25), Some(1));
        assert_eq!(t.at_or_before(5), None);
    }

    #[test]
    fn line_texts_keep_the_most_significant_when_full() {
        let mut lt = LineTexts::default();
        for i in 0..(MAX_TEXTS as u64 + 10) {
            lt.keep(i + 1, format!("line {i}").as_bytes(), (i % 7) as f64 + 1.0);
        }
        lt.keep(99_999, b"must keep", f64::INFINITY);
        assert!(lt.len() <= MAX_TEXTS + 1);
        assert_eq!(lt.get(99_999).as_deref(), Some("must keep"));
        // Significance 7 entries (i % 7 == 6) survive every raise of the bar.
        assert_eq!(lt.get(7).as_deref(), Some("line 6"));
    }
}
