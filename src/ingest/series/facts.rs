//! `series.*` facts for one device around a failure: the window is chosen (which device,
//! which run, cut at the failure time), analysed, and every number is given provenance to
//! the sample line it came from or the time range it summarises.
//!
//! Lining up with other inputs: a failure time from a log selects the run that contains it
//! (or whose crash drop follows it within a tolerance) and cuts the window there, so a
//! steady climb, a spike or a neighbour is judged on what happened *before* the failure.
//! Naive times (nvidia-smi, most logs) are compared as written; both sides are naive in the
//! same zone when they come from the same machine.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::analysis::{
    DeviceAnalysis, ProcessSummary, Scale, SeriesAnalysis, Window, analyze_window, interval,
};
use super::model::{Clock, DeviceSeries, EngineSeries, LineTexts, Track};
use super::stats::pearson;
use crate::facts::evidence::{Facts, InputName, Provenance};

/// How far (at least) a failure time may lie after the last sample of a run and still be
/// that run's failure.
const ALIGN_SLACK_MS: i64 = 30_000;

/// Which cell of a sample's row a fact quotes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cell {
    /// The memory value the sample was read from.
    Value,
    /// The device's total on that row.
    Total,
    /// The row's timestamp.
    Time,
    /// What names the track on the row: the GPU index, the process id.
    Id,
}

/// Provenance of sample `i` of a track: its line and text when kept, with the span of the
/// chosen cell (without one, a row whose cell was not located, the whole row), else its line
/// and a locator.
fn sample_cell_prov<T: Copy>(
    input: &InputName,
    track: &Track<T>,
    texts: &LineTexts,
    i: usize,
    cell: Cell,
    what: impl FnOnce() -> String,
) -> Provenance {
    match track.line(i) {
        Some(l) if l > 0 => match texts.get_with_cells(l) {
            Some((text, cells)) => {
                let span = match cell {
                    Cell::Value => cells.value,
                    Cell::Total => cells.total,
                    Cell::Time => cells.time,
                    Cell::Id => cells.id,
                };
                let p = Provenance::line(input.clone(), l, text);
                match span {
                    Some((a, b)) => p.with_span((a as usize, b as usize)),
                    None => p,
                }
            }
            None => Provenance {
                input: input.clone(),
                line: Some(l),
                text: None,
                span: None,
                locator: Some(what()),
            },
        },
        _ => Provenance::at(input.clone(), what()),
    }
}

fn dev_prov(dev: &DeviceSeries, i: usize) -> Provenance {
    dev_cell_prov(dev, i, Cell::Value)
}

fn dev_cell_prov(dev: &DeviceSeries, i: usize, cell: Cell) -> Provenance {
    sample_cell_prov(&dev.input, &dev.used, &dev.texts, i, cell, || {
        format!(
            "gpu {} at {}",
            dev.index,
            dev.time_text(dev.used.times().get(i).copied().unwrap_or(0))
        )
    })
}

fn range_prov(dev: &DeviceSeries, a: usize, b: usize, what: &str) -> Provenance {
    let t = dev.used.times();
    let (s, e) = (
        t.get(a).copied().unwrap_or(0),
        t.get(b).copied().unwrap_or(0),
    );
    Provenance::at(
        dev.input.clone(),
        format!(
            "gpu {}, {} .. {} ({what})",
            dev.index,
            dev.time_text(s),
            dev.time_text(e)
        ),
    )
}

/// Engine metrics over a time range.
#[derive(Clone, Debug, Default)]
pub(crate) struct EngineWindow {
    pub end: i64,
    pub kv_at: Option<(f64, usize)>,
    pub kv_max: Option<f64>,
    pub running_at: Option<(f64, usize)>,
    pub waiting_at: Option<(f64, usize)>,
    pub waiting_peak: Option<f64>,
    pub preemptions: Option<f64>,
    pub kv_pinned: bool,
    pub kv_pressure: bool,
    /// Start of the final stretch with KV ≥ 95%.
    pub pinned_from: Option<i64>,
}

/// KV usage counted as full.
const KV_FULL: f64 = 0.95;

/// The index range of a track within `[from, to]`.
fn span<T: Copy>(tr: &Track<T>, range: Option<(i64, i64)>) -> (usize, usize) {
    match range {
        None => (0, tr.len()),
        Some((from, to)) => {
            let t = tr.times();
            (
                t.partition_point(|&x| x < from),
                t.partition_point(|&x| x <= to),
            )
        }
    }
}

pub(crate) fn engine_window(e: &EngineSeries, range: Option<(i64, i64)>) -> EngineWindow {
    let mut w = EngineWindow::default();
    let last_t = [
        e.kv_usage.times(),
        e.requests_running.times(),
        e.requests_waiting.times(),
        e.preemptions.times(),
    ]
    .iter()
    .filter_map(|t| t.last().copied())
    .max()
    .unwrap_or(0);
    w.end = range.map_or(last_t, |r| r.1.min(last_t));
    let (a, b) = span(&e.kv_usage, range);
    if a < b {
        let kv = &e.kv_usage.values()[a..b];
        let t = &e.kv_usage.times()[a..b];
        w.kv_at = Some((f64::from(kv[kv.len() - 1]), b - 1));
        w.kv_max = kv.iter().map(|&v| f64::from(v)).reduce(f64::max);
        // The last quarter of the range (at least the last 10 samples).
        let from_t = t[0] + (t[t.len() - 1] - t[0]) * 3 / 4;
        let tail_start = t
            .partition_point(|&x| x < from_t)
            .min(kv.len().saturating_sub(10));
        let tail = &kv[tail_start..];
        let full = tail.iter().filter(|&&v| f64::from(v) >= KV_FULL).count();
        w.kv_pinned = tail.len() >= 3 && full * 5 >= tail.len() * 4;
        if w.kv_pinned {
            let k = kv
                .iter()
                .rposition(|&v| f64::from(v) < KV_FULL)
                .map_or(0, |k| k + 1);
            w.pinned_from = t.get(k.min(t.len() - 1)).copied();
        }
    }
    let (a, b) = span(&e.requests_running, range);
    if a < b {
        w.running_at = Some((f64::from(e.requests_running.values()[b - 1]), b - 1));
    }
    let (a, b) = span(&e.requests_waiting, range);
    if a < b {
        let v = &e.requests_waiting.values()[a..b];
        w.waiting_at = Some((f64::from(v[v.len() - 1]), b - 1));
        w.waiting_peak = v.iter().map(|&x| f64::from(x)).reduce(f64::max);
    }
    let (a, b) = span(&e.preemptions, range);
    if a < b {
        // A counter: sum the increases; a fall is a restart from zero.
        let v = &e.preemptions.values()[a..b];
        let mut total = 0.0;
        for p in v.windows(2) {
            total += if p[1] >= p[0] { p[1] - p[0] } else { p[1] };
        }
        w.preemptions = Some(total);
    }
    let waiting = w.waiting_at.is_some_and(|x| x.0 >= 1.0);
    w.kv_pressure = w.kv_pinned && (waiting || w.preemptions.is_some_and(|p| p >= 1.0));
    w
}

/// A value of a track at time `t`: the last sample at or before it, if within `tol`.
fn value_at<T: Copy>(tr: &Track<T>, t: i64, tol: i64) -> Option<(T, usize)> {
    let i = tr.at_or_before(t)?;
    (t - tr.times()[i] <= tol).then(|| (tr.values()[i], i))
}

/// A time to read engine metrics at, in a clock.
struct At {
    t: i64,
    clock: Clock,
    /// The input whose scrape numbers `t` is in (sequence clocks).
    input: Option<InputName>,
}

/// Where facts are taken from: a device window, and how it lines up with the failure.
struct Choice<'a> {
    dev: &'a DeviceAnalysis,
    run: usize,
    /// One past the last sample of the window.
    end: usize,
    /// The failure time in the series' clock (given, or the drop's last high sample).
    fail_t: Option<i64>,
    aligned: bool,
    /// The failure falls on the run's crash drop.
    at_drop: bool,
    /// The failure time came from the caller (another input), not from the series.
    given: bool,
}

impl SeriesAnalysis {
    /// Facts for one device around a failure time.
    ///
    /// `device: None` picks the device with a series failure (matching `failure_time` when
    /// given), else the fullest. A device index the series does not have falls back the
    /// same way when the series has only one device or a failure at that time (a job with
    /// `CUDA_VISIBLE_DEVICES=3` calls physical GPU 3 `cuda:0`); `series.device` says which
    /// device was used. `failure_time: None` takes the series' own failure, or the whole
    /// last run.
    pub fn facts_for(&self, device: Option<u32>, failure_time: Option<DateTime<Utc>>) -> Facts {
        self.facts_for_process(device, failure_time, None)
    }

    /// [`facts_for`](Self::facts_for), naming the failing job's pid (from the log) so the
    /// per-process series can tell it from its neighbours.
    pub fn facts_for_process(
        &self,
        device: Option<u32>,
        failure_time: Option<DateTime<Utc>>,
        own_pid: Option<u32>,
    ) -> Facts {
        let t = failure_time.map(|x| x.timestamp_millis());
        let mut facts = Facts::new();
        let at = match self.choose(device, t) {
            Some(c) => self.window_facts(&mut facts, &c, own_pid),
            None => {
                // No device series (or none at that time): processes and engines alone.
                self.orphan_facts(&mut facts, device, t, own_pid);
                if let Some(ms) = t {
                    let naive = self.inputs.iter().any(|i| i.naive_time);
                    facts.set(
                        "series.failure_time",
                        super::time::format_wall(ms, naive),
                        None,
                    );
                }
                t.map(|ms| At {
                    t: ms,
                    clock: Clock::Wall,
                    input: None,
                })
            }
        };
        self.engine_facts(&mut facts, at.as_ref(), false);
        self.set_skipped(&mut facts);
        facts
    }

    /// Facts of one run as the series' own failure.
    pub(crate) fn run_facts(&self, dev_pos: usize, run: usize, own_pid: Option<u32>) -> Facts {
        let mut facts = Facts::new();
        let Some(dev) = self.devices.get(dev_pos) else {
            return facts;
        };
        let Some(r) = dev.runs.get(run) else {
            return facts;
        };
        let fail_t = r.drop.map(|d| dev.series.used.times()[d.last_high_idx]);
        let c = Choice {
            dev,
            run,
            end: r.end_idx,
            fail_t,
            aligned: false,
            at_drop: r.drop.is_some(),
            given: false,
        };
        let at = self.window_facts(&mut facts, &c, own_pid);
        self.engine_facts(&mut facts, at.as_ref(), false);
        self.set_skipped(&mut facts);
        facts
    }

    fn set_skipped(&self, facts: &mut Facts) {
        let skipped: u64 = self.inputs.iter().map(|i| i.skipped).sum();
        let prov = self.inputs.iter().find(|i| i.skipped > 0).map(|i| {
            let at = i
                .first_skipped_line
                .map_or(String::new(), |l| format!(", first at line {l}"));
            Provenance::at(i.input.clone(), format!("{} rows skipped{at}", i.skipped))
        });
        if !self.inputs.is_empty() {
            facts.set("series.skipped_rows", skipped, prov);
        }
    }

    fn choose(&self, device: Option<u32>, t: Option<i64>) -> Option<Choice<'_>> {
        let wall = |d: &DeviceAnalysis| d.clock == Clock::Wall;
        let by_index: Vec<&DeviceAnalysis> = match device {
            Some(i) => self.devices.iter().filter(|d| d.index == i).collect(),
            None => Vec::new(),
        };
        let failure_dev = |d: &&DeviceAnalysis| {
            self.failures.iter().any(|f| {
                f.device == d.index
                    && f.input == d.input
                    && t.is_none_or(|ms| {
                        ms >= f.at - ALIGN_SLACK_MS && ms <= f.until + ALIGN_SLACK_MS
                    })
            })
        };
        let candidates: Vec<&DeviceAnalysis> = if !by_index.is_empty() {
            by_index
        } else if device.is_some() && self.devices.len() > 1 {
            self.devices.iter().filter(failure_dev).collect()
        } else {
            self.devices.iter().collect()
        };
        let dev = candidates.iter().copied().find(failure_dev).or_else(|| {
            // The fullest device (at the failure time, when aligned).
            candidates
                .iter()
                .copied()
                .max_by(|a, b| fullness(a, t).total_cmp(&fullness(b, t)))
        })?;
        let times = dev.series.used.times();
        let runs = &dev.runs;
        let tol = (2 * interval(times)).max(ALIGN_SLACK_MS);
        if let (Some(ms), true) = (t, wall(dev)) {
            for (ri, r) in runs.iter().enumerate() {
                let start = times[r.start_idx];
                let last = times[r.end_idx - 1];
                let until = r.drop.map_or(last + tol, |d| times[d.first_low_idx] + tol);
                if ms < start - tol || ms > until {
                    continue;
                }
                let end = times
                    .partition_point(|&x| x <= ms)
                    .clamp(r.start_idx + 1, r.end_idx);
                let at_drop = r.drop.is_some() && end == r.end_idx;
                return Some(Choice {
                    dev,
                    run: ri,
                    end,
                    fail_t: Some(ms),
                    aligned: true,
                    at_drop,
                    given: true,
                });
            }
            // Outside every run: describe the last loaded run before the failure, unaligned.
            let ri = runs
                .iter()
                .rposition(|r| !r.idle && times[r.start_idx] <= ms)
                .or_else(|| runs.iter().position(|r| !r.idle))?;
            let r = &runs[ri];
            return Some(Choice {
                dev,
                run: ri,
                end: r.end_idx,
                fail_t: Some(ms),
                aligned: false,
                at_drop: false,
                given: true,
            });
        }
        // No usable time: the series' own failure (a drop right after the device filled),
        // else the last loaded run as a whole, with no failure in it.
        if let Some(ri) = runs.iter().rposition(|r| r.drop.is_some_and(|d| d.filled)) {
            let r = &runs[ri];
            return Some(Choice {
                dev,
                run: ri,
                end: r.end_idx,
                fail_t: r.drop.map(|d| times[d.last_high_idx]),
                aligned: false,
                at_drop: true,
                given: false,
            });
        }
        let ri = runs.iter().rposition(|r| !r.idle)?;
        Some(Choice {
            dev,
            run: ri,
            end: runs[ri].end_idx,
            fail_t: None,
            aligned: false,
            at_drop: false,
            given: false,
        })
    }

    /// Device facts of a window; returns the failure time engine facts should be read at.
    fn window_facts(&self, facts: &mut Facts, c: &Choice<'_>, own_pid: Option<u32>) -> Option<At> {
        let dev = &c.dev.series;
        let run = c.dev.runs.get(c.run)?;
        let owned;
        let w: &Window = match &run.window {
            Some(w) if c.end == run.end_idx => w,
            _ => {
                owned = analyze_window(dev, run.start_idx, c.end)?;
                &owned
            }
        };
        let t = dev.used.times();
        let v = dev.used.values();
        let (a, last) = (w.start_idx, w.end_idx - 1);
        let timed = dev.clock.is_timed();
        // The device: its index cell where the row has one, else the whole row.
        let first = dev_cell_prov(dev, a, Cell::Id);
        facts.set("series.device", dev.index, Some(first.clone()));
        if let Some(u) = &dev.uuid {
            let row = Provenance {
                span: None,
                ..first.clone()
            };
            facts.set("series.device_uuid", u.as_str(), Some(row));
        }
        facts.set(
            "series.samples",
            w.end_idx - w.start_idx,
            Some(range_prov(dev, a, last, "window")),
        );
        if timed {
            facts.set(
                "series.duration_seconds",
                w.duration_ms as f64 / 1000.0,
                Some(range_prov(dev, a, last, "window")),
            );
            facts.set(
                "series.sample_interval_seconds",
                w.interval_ms as f64 / 1000.0,
                Some(range_prov(dev, a, last, "median interval")),
            );
        }
        facts.set("series.time_aligned", c.aligned, None);
        // How far the failure is from the last sample before it (hours when the series
        // stopped long before the failure).
        if let (Some(ft), true) = (c.fail_t, c.given) {
            facts.set(
                "series.failure_gap_seconds",
                (ft - t[last]).max(0) as f64 / 1000.0,
                Some(dev_cell_prov(dev, last, Cell::Time)),
            );
        }
        let total = dev.total_bytes;
        if let Some(total) = total {
            facts.set(
                "series.total_bytes",
                total,
                Some(dev_cell_prov(dev, a, Cell::Total)),
            );
        }
        let base_prov = dev_prov(dev, w.baseline_idx);
        facts.set(
            "series.baseline_bytes",
            w.baseline_bytes.round(),
            Some(base_prov.clone()),
        );
        if let Some(total) = total.filter(|&x| x > 0) {
            facts.set(
                "series.baseline_ratio",
                w.baseline_bytes / total as f64,
                Some(base_prov),
            );
        }
        facts.set(
            "series.peak_bytes",
            w.peak_bytes,
            Some(dev_prov(dev, w.peak_idx)),
        );
        let last_prov = dev_prov(dev, last);
        // "At the failure" only when there is one; otherwise the window is the whole run.
        // A failure this window ends at: the series' own drop, or a given time inside it.
        let failure = c.fail_t.is_some() && (c.aligned || c.at_drop);
        // Filled while still climbing from idle: the load itself did not fit. Then the last
        // stretch of the climb is not an excursion and the "load ramp" never ended.
        let loading = failure && w.filled && during_load(dev, w, last, timed);
        if failure {
            facts.set(
                "series.failed_during_load",
                loading,
                loading.then(|| range_prov(dev, a, last, "climb from idle with no pause")),
            );
        }
        if failure {
            facts.set(
                "series.used_at_failure_bytes",
                v[last],
                Some(last_prov.clone()),
            );
            if let Some(total) = total {
                let free = total.saturating_sub(v[last]);
                facts.set(
                    "series.free_at_failure_bytes",
                    free,
                    Some(last_prov.clone()),
                );
            }
            if timed {
                let load = if loading {
                    last
                } else {
                    w.ramp_end_idx.unwrap_or(a)
                };
                let until = c.fail_t.filter(|_| c.aligned).unwrap_or(t[last]);
                let secs = (until - t[load]).max(0) as f64 / 1000.0;
                facts.set(
                    "series.seconds_since_load",
                    secs,
                    Some(dev_cell_prov(dev, load, Cell::Time)),
                );
            }
        }
        if let Some(g) = &w.growth {
            let prov = range_prov(
                dev,
                g.start_idx,
                g.end_idx,
                "floor after load, Theil-Sen fit",
            );
            if timed {
                facts.set(
                    "series.growth_bytes_per_second",
                    g.slope,
                    Some(prov.clone()),
                );
            }
            facts.set("series.growth_r2", g.r2, Some(prov.clone()));
            facts.set(
                "series.growth_bytes",
                g.rise_bytes.round(),
                Some(prov.clone()),
            );
            facts.set("series.steady_growth", g.steady, Some(prov.clone()));
            if let Some(ttf) = g.time_to_full_seconds {
                facts.set("series.time_to_full_seconds", ttf, Some(prov));
            }
        } else {
            facts.set("series.steady_growth", false, None);
        }
        facts.set("series.spikes", w.spikes.len(), None);
        let at_end = w
            .spikes
            .iter()
            .rfind(|s| s.at_end)
            .filter(|_| failure && !loading);
        let largest = w
            .spikes
            .iter()
            .max_by(|x, y| x.height_bytes.total_cmp(&y.height_bytes));
        if let Some(s) = largest {
            facts.set(
                "series.largest_spike_bytes",
                s.height_bytes.max(0.0).round(),
                Some(dev_prov(dev, s.peak_idx)),
            );
        }
        facts.set(
            "series.spike",
            at_end.is_some(),
            at_end.map(|s| dev_prov(dev, s.start_idx)),
        );
        if let Some(s) = at_end {
            facts.set(
                "series.spike_bytes",
                s.height_bytes.max(0.0).round(),
                Some(dev_prov(dev, s.peak_idx)),
            );
            if timed {
                let until = c
                    .fail_t
                    .filter(|_| c.aligned)
                    .unwrap_or(t[s.end_idx])
                    .max(t[s.peak_idx]);
                facts.set(
                    "series.spike_seconds",
                    (until - t[s.start_idx]) as f64 / 1000.0,
                    Some(range_prov(dev, s.start_idx, s.end_idx, "excursion")),
                );
            }
        }
        if let Some(s) = at_end.or(largest) {
            let at = At {
                t: t[s.peak_idx],
                clock: dev.clock,
                input: Some(dev.input.clone()),
            };
            self.engine_facts(facts, Some(&at), true);
        }
        self.kv_correlation(facts, dev, w);
        facts.set(
            "series.flat_high",
            w.flat_high.is_some(),
            w.flat_high.map(|_| {
                range_prov(
                    dev,
                    w.ramp_end_idx.unwrap_or(a),
                    last,
                    "near full and flat from load on",
                )
            }),
        );
        facts.set(
            "series.churn",
            w.churn.is_some(),
            w.churn.map(|_| range_prov(dev, a, last, "oscillation")),
        );
        if let Some((lo, hi, _)) = w.churn {
            facts.set(
                "series.churn_low_bytes",
                lo.round(),
                Some(range_prov(dev, a, last, "10th percentile")),
            );
            facts.set(
                "series.churn_high_bytes",
                hi.round(),
                Some(range_prov(dev, a, last, "90th percentile")),
            );
        }
        let filled_prov = w.filled.then(|| {
            let from = super::analysis::last_stretch(t, a, last, timed);
            let i = (from..=last).max_by_key(|&i| v[i]).unwrap_or(last);
            dev_prov(dev, i)
        });
        facts.set("series.device_filled", w.filled, filled_prov);
        let drop = run.drop.filter(|_| c.at_drop);
        facts.set(
            "series.crash_drop",
            drop.is_some(),
            drop.map(|d| dev_prov(dev, d.first_low_idx)),
        );
        if let Some(d) = drop {
            facts.set(
                "series.drop_bytes",
                d.from_bytes.saturating_sub(d.to_bytes),
                Some(dev_prov(dev, d.first_low_idx)),
            );
        }
        if let Some(ft) = c.fail_t {
            let text = dev.time_text(ft);
            let prov = if c.given { None } else { Some(last_prov) };
            facts.set("series.failure_time", text, prov);
        }
        let t1 = c.fail_t.filter(|_| c.aligned).unwrap_or(t[last]);
        let loaded = t[w.ramp_end_idx.unwrap_or(a)];
        let sig = Scale::new(total, w.peak_bytes as f64).significant();
        process_facts(
            facts,
            &c.dev.processes,
            Span {
                start: t[a],
                loaded,
                end: t1,
            },
            sig,
            own_pid,
            Some((dev, last)),
            dev.clock,
        );
        Some(At {
            t: t1,
            clock: dev.clock,
            input: Some(dev.input.clone()),
        })
    }

    /// Correlation of device memory with KV usage over the window (same clock only).
    fn kv_correlation(&self, facts: &mut Facts, dev: &DeviceSeries, w: &Window) {
        let Some(e) = self
            .engines
            .iter()
            .find(|e| e.series.clock == dev.clock && !e.series.kv_usage.is_empty())
        else {
            return;
        };
        let kv = &e.series.kv_usage;
        let t = dev.used.times();
        let v = dev.used.values();
        let tol = (2 * interval(kv.times())).max(1);
        let step = ((w.end_idx - w.start_idx) / 500).max(1);
        let (mut xs, mut ys) = (Vec::new(), Vec::new());
        for i in (w.start_idx..w.end_idx).step_by(step) {
            if let Some((k, _)) = value_at(kv, t[i], tol) {
                xs.push(v[i] as f64);
                ys.push(f64::from(k));
            }
        }
        if xs.len() >= 8 {
            if let Some(r) = pearson(&xs, &ys) {
                let prov = Provenance::at(
                    e.input.clone(),
                    format!(
                        "{} paired with gpu {} ({} samples)",
                        e.label,
                        dev.index,
                        xs.len()
                    ),
                );
                facts.set("series.kv_correlation", r, Some(prov));
            }
        }
    }

    /// Engine facts at a time (the failure; the end of each engine's series when `None`),
    /// or with `spike` the KV usage and requests at a spike's peak. Engines are read at a
    /// time only on the same clock (wall, or the same input's scrape numbers).
    fn engine_facts(&self, facts: &mut Facts, at: Option<&At>, spike: bool) {
        let t = at.map(|a| a.t);
        let engines: Vec<&Arc<EngineSeries>> = self
            .engines
            .iter()
            .map(|e| &e.series)
            .filter(|e| {
                at.is_none_or(|a| {
                    a.clock == e.clock
                        && (a.clock == Clock::Wall || a.input.as_ref() == Some(&e.input))
                })
            })
            .collect();
        let windows: Vec<(&Arc<EngineSeries>, EngineWindow)> = engines
            .iter()
            .map(|e| (*e, engine_window(e, t.map(|ms| (i64::MIN, ms)))))
            .collect();
        // The engine under most pressure speaks for the set.
        let Some((e, w)) = windows.into_iter().max_by(|a, b| {
            let key = |w: &EngineWindow| (w.kv_pressure as u8, w.kv_at.map_or(-1.0, |x| x.0));
            let (ka, kb) = (key(&a.1), key(&b.1));
            ka.0.cmp(&kb.0).then(ka.1.total_cmp(&kb.1))
        }) else {
            return;
        };
        let prov = |tr_line: Option<u64>, what: &str| -> Provenance {
            match tr_line {
                Some(l) => match e.texts.get(l) {
                    Some(text) => Provenance::line(e.input.clone(), l, text),
                    None => Provenance {
                        input: e.input.clone(),
                        line: Some(l),
                        text: None,
                        span: None,
                        locator: Some(format!("{} {what}", e.label)),
                    },
                },
                None => Provenance::at(e.input.clone(), format!("{} {what}", e.label)),
            }
        };
        let tol = |tr_t: &[i64]| (3 * interval(tr_t)).max(ALIGN_SLACK_MS);
        let near = |at: Option<(f64, usize)>, tr_t: &[i64]| {
            at.filter(|(_, i)| t.is_none_or(|ms| ms - tr_t[*i] <= tol(tr_t)))
        };
        if spike {
            if let Some((kv, i)) = near(w.kv_at, e.kv_usage.times()) {
                facts.set(
                    "series.spike_kv_usage",
                    kv,
                    Some(prov(e.kv_usage.line(i), "kv usage")),
                );
            }
            if let Some((r, i)) = near(w.running_at, e.requests_running.times()) {
                facts.set(
                    "series.spike_requests_running",
                    r,
                    Some(prov(e.requests_running.line(i), "requests running")),
                );
            }
            return;
        }
        if let Some((kv, i)) = near(w.kv_at, e.kv_usage.times()) {
            facts.set(
                "series.kv_usage_at_failure",
                kv,
                Some(prov(e.kv_usage.line(i), "kv usage")),
            );
        }
        if let Some((r, i)) = near(w.running_at, e.requests_running.times()) {
            facts.set(
                "series.requests_running_at_failure",
                r,
                Some(prov(e.requests_running.line(i), "requests running")),
            );
        }
        if let Some((q, i)) = near(w.waiting_at, e.requests_waiting.times()) {
            facts.set(
                "series.requests_waiting_at_failure",
                q,
                Some(prov(e.requests_waiting.line(i), "requests waiting")),
            );
        }
        if let Some(p) = w.waiting_peak {
            facts.set(
                "series.requests_waiting_peak",
                p,
                Some(prov(None, "requests waiting, peak")),
            );
        }
        if let Some(p) = w.preemptions {
            let last = e
                .preemptions
                .len()
                .checked_sub(1)
                .and_then(|i| e.preemptions.line(i));
            facts.set(
                "series.preemptions",
                p,
                Some(prov(last, "preemptions counter")),
            );
        }
        if !e.kv_usage.is_empty() {
            let from = w
                .pinned_from
                .map_or(String::new(), |p| format!(" from {}", e.time_text(p)));
            facts.set(
                "series.kv_pinned",
                w.kv_pinned,
                Some(prov(None, &format!("kv usage >= 95%{from}"))),
            );
            facts.set(
                "series.kv_pressure",
                w.kv_pressure,
                Some(prov(None, "kv pinned with waiting or preempted requests")),
            );
        }
    }

    /// Facts from per-process series when there is no device series.
    fn orphan_facts(
        &self,
        facts: &mut Facts,
        device: Option<u32>,
        t: Option<i64>,
        own_pid: Option<u32>,
    ) {
        let procs: Vec<&ProcessSummary> = self
            .orphan_processes
            .iter()
            .filter(|p| device.is_none_or(|d| p.series.device == d) || self.orphan_devices() == 1)
            .collect();
        let Some(first) = procs.first().map(|p| (*p).clone()) else {
            return;
        };
        let clock = first.series.clock;
        let procs: Vec<ProcessSummary> = procs
            .into_iter()
            .filter(|p| p.series.clock == clock)
            .cloned()
            .collect();
        let t0 = procs
            .iter()
            .filter_map(|p| p.series.used.times().first().copied())
            .min()
            .unwrap_or(0);
        let end = procs
            .iter()
            .filter_map(|p| p.series.used.times().last().copied())
            .max()
            .unwrap_or(0);
        let t1 = t.filter(|_| clock == Clock::Wall).unwrap_or(end);
        facts.set(
            "series.device",
            first.series.device,
            Some(Provenance::at(first.input.clone(), "per-process series")),
        );
        process_facts(
            facts,
            &procs,
            Span {
                start: t0,
                loaded: t0,
                end: t1,
            },
            256.0 * 1024.0 * 1024.0,
            own_pid,
            None,
            clock,
        );
    }

    fn orphan_devices(&self) -> usize {
        let mut d: Vec<u32> = self
            .orphan_processes
            .iter()
            .map(|p| p.series.device)
            .collect();
        d.sort_unstable();
        d.dedup();
        d.len()
    }
}

/// Whether the device filled during the load itself: the window starts near idle and
/// memory climbs from there to the failure without ever holding a level (within 1.5% of
/// the device) for 5 samples or 5 seconds, whichever is longer. Loading is a climb in
/// shards with short pauses; a run that loaded and then failed on its first batch held its
/// loaded level first (data loading, tokenising, the first forward pass starting).
fn during_load(dev: &DeviceSeries, w: &Window, last: usize, timed: bool) -> bool {
    let v = dev.used.values();
    let t = dev.used.times();
    let a = w.start_idx;
    if last <= a || last >= v.len() {
        return false;
    }
    let sc = Scale::new(dev.total_bytes, w.peak_bytes as f64);
    let band = (0.015 * sc.scale).max(128.0 * 1024.0 * 1024.0);
    // Starts near idle (a CUDA context, nothing loaded).
    let start = v[a..=last.min(a + 2)].iter().copied().min().unwrap_or(0) as f64;
    if start > 0.1 * sc.scale {
        return false;
    }
    let Some(climb) = (a..=last).find(|&i| v[i] as f64 > start + 2.0 * band) else {
        return false;
    };
    let iv = interval(&t[a..=last]).max(1);
    let hold_ms = if timed { (5 * iv).max(5_000) } else { 5 };
    let (mut s, mut lo, mut hi) = (climb, v[climb] as f64, v[climb] as f64);
    let mut top = v[climb] as f64;
    for i in climb + 1..=last {
        let x = v[i] as f64;
        // Loading only adds: a fall means steps ran (and freed what they used).
        if x < top - 2.0 * band {
            return false;
        }
        top = top.max(x);
        if hi.max(x) - lo.min(x) > band {
            s = i;
            lo = x;
            hi = x;
            continue;
        }
        lo = lo.min(x);
        hi = hi.max(x);
        let held = if timed { t[i] - t[s] } else { (i - s) as i64 };
        if held >= hold_ms {
            return false;
        }
    }
    true
}

/// How full a device was at `t` (or at its peak).
fn fullness(d: &DeviceAnalysis, t: Option<i64>) -> f64 {
    let tr = &d.series.used;
    let used = match t
        .filter(|_| d.clock == Clock::Wall)
        .and_then(|ms| tr.at_or_before(ms))
    {
        Some(i) => tr.values()[i],
        None => tr.values().iter().copied().max().unwrap_or(0),
    };
    used as f64 / d.total_bytes.unwrap_or(u64::MAX).max(1) as f64
}

/// Times of a window: its start, the end of its load ramp, and the failure (or its end).
#[derive(Clone, Copy, Debug)]
struct Span {
    start: i64,
    loaded: i64,
    end: i64,
}

/// Own process, neighbours, contention and unattributed memory over a window. Growth is
/// measured from the end of the load ramp, so the failing job's own load is not growth.
#[allow(clippy::too_many_arguments)]
fn process_facts(
    facts: &mut Facts,
    procs: &[ProcessSummary],
    span: Span,
    sig: f64,
    own_pid: Option<u32>,
    device: Option<(&DeviceSeries, usize)>,
    clock: Clock,
) {
    let (t0, t1) = (span.start, span.end);
    let procs: Vec<&ProcessSummary> = procs.iter().filter(|p| p.series.clock == clock).collect();
    if procs.is_empty() {
        return;
    }
    let iv = procs
        .iter()
        .map(|p| interval(p.series.used.times()))
        .max()
        .unwrap_or(0);
    let slack = if clock.is_timed() {
        (2 * iv).max(ALIGN_SLACK_MS)
    } else {
        1
    };
    struct P<'a> {
        p: &'a ProcessSummary,
        first_i: usize,
        at: Option<(u64, usize)>,
        start: u64,
    }
    let mut ps: Vec<P<'_>> = Vec::new();
    for p in &procs {
        let tr = &p.series.used;
        let t = tr.times();
        let first_i = t.partition_point(|&x| x < t0 - slack);
        if first_i >= tr.len() || t[first_i] > t1 + slack {
            continue; // not on the device during the window
        }
        let at = value_at(tr, t1 + slack.min(ALIGN_SLACK_MS), slack * 2).or_else(|| {
            // Gone at the failure itself: its last value, if it vanished within the slack.
            let i = tr.at_or_before(t1 + slack)?;
            (t1 - t[i] <= slack).then(|| (tr.values()[i], i))
        });
        // Its value once loaded: after the device's load ramp and after its own (the first
        // sample at 90% of its median in the window), so loading is not growth.
        let in_window = &tr.values()[first_i..t.partition_point(|&x| x <= t1 + slack).max(first_i)];
        let med = super::stats::median_of(&in_window.iter().map(|&v| v as f64).collect::<Vec<_>>());
        let own_load = med
            .and_then(|m| in_window.iter().position(|&v| v as f64 >= 0.9 * m))
            .map_or(first_i, |k| first_i + k);
        let base_i = t.partition_point(|&x| x < span.loaded).max(own_load);
        let start = match tr.values().get(base_i) {
            Some(&v) if t[base_i] <= t1 + slack => v,
            _ => tr.values()[first_i],
        };
        ps.push(P {
            p,
            first_i,
            at,
            start,
        });
    }
    if ps.is_empty() {
        return;
    }
    let own = match own_pid.and_then(|pid| ps.iter().position(|x| x.p.pid == pid)) {
        Some(i) => Some(i),
        None => {
            let at_start = |x: &P<'_>| x.p.series.used.times()[x.first_i] <= t0 + slack;
            ps.iter()
                .enumerate()
                .filter(|(_, x)| at_start(x))
                .max_by_key(|(_, x)| x.start)
                .map(|(i, _)| i)
                .or_else(|| {
                    ps.iter()
                        .enumerate()
                        .max_by_key(|(_, x)| x.at.map_or(0, |a| a.0))
                        .map(|(i, _)| i)
                })
        }
    };
    let cell_prov = |x: &P<'_>, i: usize, cell: Cell| {
        let s = &x.p.series;
        sample_cell_prov(&s.input, &s.used, &s.texts, i, cell, || {
            format!("pid {} ({})", s.pid, s.name)
        })
    };
    let prov = |x: &P<'_>, i: usize| cell_prov(x, i, Cell::Value);
    let mut own_growth = 0.0;
    if let Some(o) = own.and_then(|i| ps.get(i)) {
        let p0 = cell_prov(o, o.first_i, Cell::Id);
        facts.set("series.own_process_pid", o.p.pid, Some(p0.clone()));
        facts.set(
            "series.own_process_name",
            o.p.name.as_str(),
            Some(Provenance { span: None, ..p0 }),
        );
        if let Some((b, i)) = o.at {
            facts.set("series.own_process_bytes", b, Some(prov(o, i)));
            own_growth = b as f64 - o.start as f64;
            facts.set(
                "series.own_process_growth_bytes",
                own_growth.max(0.0),
                Some(prov(o, i)),
            );
        }
        let tr = &o.p.series.used;
        let last_t = tr.times().last().copied().unwrap_or(0);
        let exited = o.p.exited && last_t <= t1 + slack && last_t >= t1 - 2 * slack;
        facts.set(
            "series.own_process_exited",
            exited,
            exited.then(|| prov(o, tr.len() - 1)),
        );
    }
    let others: Vec<&P<'_>> = ps
        .iter()
        .enumerate()
        .filter(|(i, x)| Some(*i) != own && x.at.is_some())
        .map(|(_, x)| x)
        .collect();
    let present = ps.iter().filter(|x| x.at.is_some()).count();
    facts.set("series.process_count", present, None);
    let others_sum: u64 = others.iter().filter_map(|x| x.at.map(|a| a.0)).sum();
    facts.set("series.other_processes_bytes", others_sum, None);
    let mut contention = false;
    if let Some(o) = others.iter().max_by_key(|x| x.at.map_or(0, |a| a.0)) {
        let (bytes, i) = o.at.unwrap_or((0, o.first_i));
        let appeared = o.p.series.used.times()[o.first_i] > t0 + slack;
        let growth = if appeared {
            bytes as f64
        } else {
            bytes as f64 - o.start as f64
        };
        let p0 = cell_prov(o, o.first_i, Cell::Id);
        facts.set("series.other_process_pid", o.p.pid, Some(p0.clone()));
        facts.set(
            "series.other_process_name",
            o.p.name.as_str(),
            Some(Provenance {
                span: None,
                ..p0.clone()
            }),
        );
        facts.set("series.other_process_bytes", bytes, Some(prov(o, i)));
        facts.set(
            "series.other_process_growth_bytes",
            growth.max(0.0),
            Some(prov(o, i)),
        );
        facts.set("series.other_process_appeared", appeared, Some(p0));
        contention =
            bytes as f64 >= sig && growth >= sig && own_growth <= (growth / 2.0).max(sig / 2.0);
    }
    if let Some((dev, last)) = device {
        // Device memory no listed process holds: other containers' processes.
        let v = dev.used.values();
        let t = dev.used.times();
        let sum_at = |ms: i64| -> u64 {
            ps.iter()
                .filter_map(|x| value_at(&x.p.series.used, ms, slack))
                .map(|(b, _)| b)
                .sum()
        };
        let first = dev
            .used
            .at_or_before(t0)
            .unwrap_or(0)
            .max(t.partition_point(|&x| x < t0));
        let un_end = v[last] as f64 - sum_at(t[last]) as f64;
        let un_start = v
            .get(first)
            .map_or(0.0, |&u| u as f64 - sum_at(t[first]) as f64);
        if un_end >= 0.0 {
            facts.set(
                "series.unattributed_bytes",
                un_end.round(),
                Some(dev_prov(dev, last)),
            );
            let growth = un_end - un_start.max(0.0);
            facts.set(
                "series.unattributed_growth_bytes",
                growth.max(0.0).round(),
                Some(range_prov(dev, first, last, "used minus listed processes")),
            );
            if growth >= sig && own_growth <= growth / 2.0 {
                contention = true;
            }
        }
    }
    facts.set("series.contention", contention, None);
}
