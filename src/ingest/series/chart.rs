//! Terminal drawings of a device's used memory over time, with the failure marked.
//!
//! Columns are spans of time (so gaps in logging show as gaps), each drawn at the
//! *highest* sample it contains: a one-second spike must stay visible when an hour is one
//! column. The scale is the device total when known, so "full" reaches the top. Plain
//! Unicode block characters, no colour: renderers add colour if they want it.

use chrono::{DateTime, Utc};

use super::analysis::{DeviceAnalysis, SeriesAnalysis};
use super::model::Clock;
use crate::facts::units::format_bytes;

const LEVELS: [char; 9] = [' ', '▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// Per column: the highest used value in its time span, or `None` for no samples.
fn columns(d: &DeviceAnalysis, width: usize) -> (Vec<Option<u64>>, i64, i64) {
    let t = d.series.used.times();
    let v = d.series.used.values();
    let (Some(&t0), Some(&t1)) = (t.first(), t.last()) else {
        return (vec![None; width], 0, 0);
    };
    let span = (t1 - t0).max(1) as i128;
    let mut cols: Vec<Option<u64>> = vec![None; width];
    for (&ti, &vi) in t.iter().zip(v) {
        let c = (((ti - t0) as i128 * width as i128) / (span + 1)) as usize;
        if let Some(slot) = cols.get_mut(c.min(width - 1)) {
            *slot = Some(slot.map_or(vi, |x| x.max(vi)));
        }
    }
    (cols, t0, t1)
}

fn mark_column(mark: Option<i64>, t0: i64, t1: i64, width: usize) -> Option<usize> {
    let m = mark?;
    if m < t0 || m > t1 + (t1 - t0) / width.max(1) as i64 {
        return None;
    }
    let span = (t1 - t0).max(1) as i128;
    Some(((((m - t0) as i128) * width as i128 / (span + 1)) as usize).min(width - 1))
}

fn short_time(clock: Clock, t: i64) -> String {
    match clock {
        Clock::Wall => DateTime::from_timestamp_millis(t).map_or_else(
            || t.to_string(),
            |d| d.format("%Y-%m-%d %H:%M:%S").to_string(),
        ),
        other => other.format(t),
    }
}

impl SeriesAnalysis {
    fn device_for_chart(&self, device: u32) -> Option<&DeviceAnalysis> {
        self.devices.iter().find(|d| d.index == device)
    }

    /// The mark in the device's clock: the given time, else the device's own failure.
    fn mark_for(&self, d: &DeviceAnalysis, mark: Option<DateTime<Utc>>) -> Option<i64> {
        match mark {
            Some(m) if d.clock == Clock::Wall => Some(m.timestamp_millis()),
            Some(_) => None,
            None => self
                .failures
                .iter()
                .rfind(|f| f.device == d.index && f.input == d.input)
                .map(|f| f.at),
        }
    }

    /// A one-line sparkline of a device's used memory, `width` columns, scaled to the
    /// device total, with a second line marking the failure (`▲`) when `mark` (or the
    /// series' own failure) falls inside. Empty when the device has no series.
    pub fn sparkline(&self, device: u32, width: usize, mark: Option<DateTime<Utc>>) -> String {
        let Some(d) = self.device_for_chart(device) else {
            return String::new();
        };
        let width = width.max(4);
        let (cols, t0, t1) = columns(d, width);
        let top = d
            .total_bytes
            .or_else(|| cols.iter().flatten().copied().max())
            .unwrap_or(1)
            .max(1) as f64;
        let mut out: String = cols
            .iter()
            .map(|c| match c {
                None => ' ',
                Some(v) => LEVELS[(1 + ((*v as f64 / top).min(1.0) * 7.0).round() as usize).min(8)],
            })
            .collect();
        if let Some(mc) = mark_column(self.mark_for(d, mark), t0, t1, width) {
            out.push('\n');
            out.push_str(&" ".repeat(mc));
            out.push('▲');
        }
        out
    }

    /// A small chart: `height` rows of `width` columns with the total and zero on the y
    /// axis, start and end times under it, and the failure marked `▲` on the time axis.
    pub fn chart(
        &self,
        device: u32,
        width: usize,
        height: usize,
        mark: Option<DateTime<Utc>>,
    ) -> String {
        let Some(d) = self.device_for_chart(device) else {
            return String::new();
        };
        let (width, height) = (width.max(8), height.clamp(1, 40));
        let (cols, t0, t1) = columns(d, width);
        let mark = self.mark_for(d, mark);
        let mc = mark_column(mark, t0, t1, width);
        let mark_text = match (mark, mc) {
            (Some(m), Some(_)) => Some(format!("failure at {}", short_time(d.clock, m))),
            _ => None,
        };
        draw_chart(
            &cols,
            d.total_bytes,
            height,
            mc,
            (&short_time(d.clock, t0), &short_time(d.clock, t1)),
            mark_text.as_deref(),
        )
    }
}

/// Per column: the highest value of the plot's points in its time span.
fn plot_columns(points: &[(f64, u64)], width: usize) -> (Vec<Option<u64>>, f64, f64) {
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return (vec![None; width], 0.0, 0.0);
    };
    let (t0, t1) = (first.0, last.0.max(first.0));
    let span = (t1 - t0).max(f64::EPSILON);
    let mut cols: Vec<Option<u64>> = vec![None; width];
    for &(t, v) in points {
        let c = (((t - t0) / span) * width as f64).floor().max(0.0) as usize;
        if let Some(slot) = cols.get_mut(c.min(width - 1)) {
            *slot = Some(slot.map_or(v, |x| x.max(v)));
        }
    }
    (cols, t0, t1)
}

fn plot_mark_column(mark: Option<f64>, t0: f64, t1: f64, width: usize) -> Option<usize> {
    let m = mark?;
    let span = (t1 - t0).max(f64::EPSILON);
    if !m.is_finite() || m < t0 || m > t1 + span / width.max(1) as f64 {
        return None;
    }
    Some((((m - t0) / span * width as f64).floor() as usize).min(width - 1))
}

/// Text for a time of a plot: wall time when the plot has a start, else an offset (or a
/// scrape number for series without timestamps).
pub fn plot_time(plot: &crate::render::plot::SeriesPlot, t: f64) -> String {
    let start = plot
        .start
        .as_deref()
        .and_then(|s| super::time::read_wall(s).map(|(t, _)| t));
    match start {
        Some(s) => (s + chrono::Duration::milliseconds((t * 1000.0).round() as i64))
            .format("%Y-%m-%d %H:%M:%S")
            .to_string(),
        None if plot.label.contains(super::plots::SCRAPE_NOTE) => format!("scrape {t:.0}"),
        None => format!("+{t:.1} s"),
    }
}

/// The range a sparkline of a plot is drawn over, so its shape shows: from just below the
/// level the series spends most time above (its 5th percentile, so an idle start does not
/// flatten the rest) to its highest point, at least a tenth of the device tall.
pub fn plot_sparkline_scale(plot: &crate::render::plot::SeriesPlot) -> (u64, u64) {
    let mut v: Vec<u64> = plot.points.iter().map(|p| p.1).collect();
    if v.is_empty() {
        return (0, 1);
    }
    v.sort_unstable();
    let hi = v[v.len() - 1];
    let lo = v[v.len() / 20];
    let min_span = (plot.total_bytes.unwrap_or(hi) / 10).max(1);
    if hi - lo >= min_span {
        return (lo, hi);
    }
    // Nearly flat: centre it, so a level line is drawn half way up, not as "full".
    let mid = lo + (hi - lo) / 2;
    let lo = mid.saturating_sub(min_span / 2);
    (lo, lo + min_span)
}

/// A one-line sparkline of a plot over `scale` (bytes at the lowest and the highest level;
/// the device total from zero when `None`), with a second line marking `mark` (seconds
/// since the plot's start) with `▲` when it falls inside.
pub fn plot_sparkline(
    plot: &crate::render::plot::SeriesPlot,
    width: usize,
    mark: Option<f64>,
    scale: Option<(u64, u64)>,
) -> String {
    let width = width.max(4);
    let (cols, t0, t1) = plot_columns(&plot.points, width);
    let (lo, top) = scale.unwrap_or_else(|| {
        (
            0,
            plot.total_bytes
                .or_else(|| cols.iter().flatten().copied().max())
                .unwrap_or(1),
        )
    });
    let (lo, span) = (lo as f64, (top.saturating_sub(lo)).max(1) as f64);
    let mut out: String = cols
        .iter()
        .map(|c| match c {
            None => ' ',
            Some(v) => {
                let x = ((*v as f64 - lo) / span).clamp(0.0, 1.0);
                LEVELS[(1 + (x * 7.0).round() as usize).min(8)]
            }
        })
        .collect();
    if let Some(mc) = plot_mark_column(mark, t0, t1, width) {
        out.push('\n');
        out.push_str(&" ".repeat(mc));
        out.push('▲');
    }
    out
}

/// A small chart of a plot: `height` rows of `width` columns scaled to the device total,
/// start and end times under it, and `mark` (seconds since the plot's start) shown as `▲`
/// on the time axis with `mark_label` beneath.
pub fn plot_chart(
    plot: &crate::render::plot::SeriesPlot,
    width: usize,
    height: usize,
    mark: Option<f64>,
    mark_label: &str,
) -> String {
    let (width, height) = (width.max(8), height.clamp(1, 40));
    let (cols, t0, t1) = plot_columns(&plot.points, width);
    let mc = plot_mark_column(mark, t0, t1, width);
    let mark_text = match (mark, mc) {
        (Some(m), Some(_)) => Some(format!("{mark_label} at {}", plot_time(plot, m))),
        _ => None,
    };
    draw_chart(
        &cols,
        plot.total_bytes,
        height,
        mc,
        (&plot_time(plot, t0), &plot_time(plot, t1)),
        mark_text.as_deref(),
    )
}

/// Draws the chart both kinds of series share: one column per entry of `cols` (its highest
/// value, or nothing), scaled to `total` (else the highest value), the total and zero on the
/// y axis, the time axis with `▲` at `mark_col`, the start and end times under it and, when
/// given, a line saying what the mark is.
fn draw_chart(
    cols: &[Option<u64>],
    total: Option<u64>,
    height: usize,
    mark_col: Option<usize>,
    (start, end): (&str, &str),
    mark_text: Option<&str>,
) -> String {
    let width = cols.len();
    let top_bytes = total
        .or_else(|| cols.iter().flatten().copied().max())
        .unwrap_or(1)
        .max(1);
    let top = top_bytes as f64;
    let top_label = format_bytes(top_bytes);
    let pad = top_label.len().max(1);
    let mut out = String::new();
    for row in 0..height {
        let label = if row == 0 {
            format!("{top_label:>pad$} ┤")
        } else if row == height - 1 {
            format!("{:>pad$} ┤", "0")
        } else {
            format!("{:>pad$} │", "")
        };
        out.push_str(&label);
        let floor = ((height - 1 - row) * 8) as f64;
        for c in cols {
            let ch = match c {
                None => ' ',
                Some(v) => {
                    let eighths = (*v as f64 / top).min(1.0) * (height * 8) as f64;
                    let fill = (eighths - floor).clamp(0.0, 8.0).round() as usize;
                    // Keep any non-zero sample visible on the bottom row.
                    if fill == 0 && row == height - 1 {
                        LEVELS[1]
                    } else {
                        LEVELS[fill]
                    }
                }
            };
            out.push(ch);
        }
        out.push('\n');
    }
    let axis: String = (0..width)
        .map(|i| if Some(i) == mark_col { '▲' } else { '─' })
        .collect();
    out.push_str(&format!("{:>pad$} └{axis}\n", ""));
    let gap = (width + 1).saturating_sub(start.len() + end.len()).max(1);
    out.push_str(&format!("{:>pad$}  {start}{}{end}", "", " ".repeat(gap)));
    if let Some(text) = mark_text {
        out.push_str(&format!("\n{:>pad$}  ▲ {text}", ""));
    }
    out
}
