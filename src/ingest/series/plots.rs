//! What the HTML report and the terminal draw of a series: one [`SeriesPlot`] per device,
//! its used memory over time (the maximum of each plotting bucket, so a spike stays
//! visible), the capacity, and marks for the OOM and for memory released when a process
//! exited.
//!
//! Times are seconds since the device's first sample (sample numbers for series without
//! timestamps); `start` gives the wall-clock time of `t = 0` when there is one.

use super::analysis::{DeviceAnalysis, SeriesAnalysis};
use super::model::Clock;
use crate::facts::evidence::InputName;
use crate::render::plot::{MarkKind, SeriesMark, SeriesPlot};

/// Said in the label of a plot whose series has no timestamps: its `t` is the scrape (or
/// sample) number, not seconds.
pub const SCRAPE_NOTE: &str = "no timestamps: t is the scrape number";

/// An OOM to mark: the device, the input its series came from, the time in the series'
/// clock, and a label.
#[derive(Clone, Debug)]
pub struct OomMark {
    pub device: u32,
    pub input: InputName,
    pub at: i64,
    pub label: String,
}

/// Seconds since `t0` in a clock (sample numbers for sequence clocks).
fn seconds(clock: Clock, t: i64, t0: i64) -> f64 {
    match clock {
        Clock::Sequence => (t - t0) as f64,
        _ => (t - t0) as f64 / 1000.0,
    }
}

fn label(d: &DeviceAnalysis) -> String {
    let mut s = String::new();
    if let Some(h) = &d.host {
        s.push_str(h);
        s.push(' ');
    }
    s.push_str(&format!("GPU {}", d.index));
    if let Some(n) = &d.name {
        s.push_str(&format!(" ({n})"));
    }
    s.push_str(" memory used");
    if d.clock == Clock::Sequence {
        s.push_str(&format!(" ({SCRAPE_NOTE})"));
    }
    s
}

impl SeriesAnalysis {
    /// One plot per device series, with `ooms` marked where they fall on it and every other
    /// crash drop marked as a restart (memory released).
    pub fn plots(&self, ooms: &[OomMark]) -> Vec<SeriesPlot> {
        self.devices
            .iter()
            .filter(|d| !d.points.t.is_empty())
            .map(|d| self.plot(d, ooms))
            .collect()
    }

    fn plot(&self, d: &DeviceAnalysis, ooms: &[OomMark]) -> SeriesPlot {
        let t = d.series.used.times();
        let t0 = t.first().copied().unwrap_or(0);
        let points = d
            .points
            .t
            .iter()
            .zip(&d.points.max)
            .map(|(&ti, &v)| (seconds(d.clock, ti, t0), v))
            .collect();
        let mut marks: Vec<SeriesMark> = ooms
            .iter()
            .filter(|m| m.device == d.index && m.input == d.input)
            .map(|m| SeriesMark {
                t: seconds(d.clock, m.at, t0),
                label: m.label.clone(),
                kind: MarkKind::Oom,
            })
            .collect();
        let slack = match d.clock {
            Clock::Sequence => 2,
            _ => 60_000,
        };
        for r in &d.runs {
            let Some(drop) = r.drop else { continue };
            let (hi, lo) = (t[drop.last_high_idx], t[drop.first_low_idx]);
            let covered = ooms.iter().any(|m| {
                m.device == d.index
                    && m.input == d.input
                    && m.at >= hi - slack
                    && m.at <= lo + slack
            });
            if !covered {
                marks.push(SeriesMark {
                    t: seconds(d.clock, hi, t0),
                    label: "memory released (process exited)".into(),
                    kind: MarkKind::Restart,
                });
            }
        }
        // What the analysis saw, where it starts: steady growth, full by design, churn.
        for r in &d.runs {
            let Some(w) = &r.window else { continue };
            if let Some(g) = w.growth.filter(|g| g.steady) {
                let rate = match d.clock {
                    Clock::Sequence => String::new(),
                    _ => format!(
                        " {}/h",
                        crate::facts::units::format_bytes_f(g.slope * 3600.0)
                    ),
                };
                // Projected only for a run still going (one that crashed is full already).
                let full = g
                    .time_to_full_seconds
                    .filter(|&s| s >= 60.0 && r.drop.is_none())
                    .map_or(String::new(), |s| format!(", full in {:.1} h", s / 3600.0));
                marks.push(SeriesMark {
                    t: seconds(d.clock, t[g.start_idx], t0),
                    label: format!("steady growth{rate}{full}"),
                    kind: MarkKind::Event,
                });
            }
            if let Some((level, ratio)) = w.flat_high {
                marks.push(SeriesMark {
                    t: seconds(d.clock, t[w.ramp_end_idx.unwrap_or(w.start_idx)], t0),
                    label: format!(
                        "flat at {} ({:.0}%): full by design",
                        crate::facts::units::format_bytes_f(level),
                        ratio * 100.0
                    ),
                    kind: MarkKind::Event,
                });
            }
            if let Some((lo, hi, cycles)) = w.churn {
                marks.push(SeriesMark {
                    t: seconds(d.clock, t[w.ramp_end_idx.unwrap_or(w.start_idx)], t0),
                    label: format!(
                        "churn {} ↔ {} ({cycles} cycles)",
                        crate::facts::units::format_bytes_f(lo),
                        crate::facts::units::format_bytes_f(hi)
                    ),
                    kind: MarkKind::Event,
                });
            }
        }
        for p in &d.patterns {
            if let super::Pattern::OtherProcess {
                pid,
                appeared: Some(_),
                ..
            } = p
            {
                if let Some(proc_) = d.processes.iter().find(|x| x.pid == *pid) {
                    if let Some(&first) = proc_.series.used.times().first() {
                        marks.push(SeriesMark {
                            t: seconds(d.clock, first, t0),
                            label: format!("pid {pid} appears"),
                            kind: MarkKind::Event,
                        });
                    }
                }
            }
        }
        marks.sort_by(|a, b| a.t.total_cmp(&b.t));
        SeriesPlot {
            input: d.input.to_string(),
            device: Some(d.index),
            label: label(d),
            start: (d.clock == Clock::Wall).then(|| d.series.time_text(t0)),
            points,
            total_bytes: d.total_bytes,
            marks,
        }
    }
}
