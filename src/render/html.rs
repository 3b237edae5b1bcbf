//! `--format html`: one self-contained page for people who would rather look than read.
//!
//! The verdict comes first (cause, confidence, the one sentence with the numbers, the fix to
//! try first), then the pictures: device memory at the failure (from the OOM message's
//! figures), memory over time with the OOM marked ([`crate::render::plot::SeriesPlot`]), a
//! snapshot's segment map with its free blocks and the failed request drawn to the same
//! scale, live memory by category and the top allocation sites
//! ([`crate::render::plot::SnapshotPlot`]); then the evidence, every fix, the causes that lost and
//! the log lines with the numbers the verdict read highlighted.
//!
//! Everything is inline: CSS, SVG charts and a few lines of script for hover read-outs. The
//! page loads nothing (a Content-Security-Policy of `default-src 'none'` makes the browser
//! enforce that), uses the system font stack, the Okabe–Ito colour-blind-safe palette, GiB
//! for sizes, and prints cleanly (folded blocks open, no shadows). Output is deterministic:
//! no timestamps, so two runs on the same input give the same file.

use std::fmt::Write as _;

use super::Policy;
use super::text::{self, count, gib, location, place, weight};
use crate::diagnosis::report::{Diagnosis, IncidentReport};
use crate::facts::evidence::Facts;
use crate::render::plot::{BlockState, MarkKind, SeriesPlot, SnapshotPlot};

/// Okabe & Ito's palette, safe for the common colour-vision deficiencies.
pub const PALETTE: [&str; 8] = [
    "#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000",
];
const BLUE: &str = "#0072B2";
const VERMILLION: &str = "#D55E00";
const GREY: &str = "#9aa4ae";

/// How to render.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub policy: Policy,
}

/// Escapes text for HTML content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// Renders the page.
pub fn render(d: &Diagnosis, opts: &Options) -> String {
    let mut body = String::new();
    header(d, &mut body);
    verdicts(d, opts, &mut body);
    if d.inputs.len() > 1 {
        summary(d, &mut body);
    }
    series_section(&d.series, &mut body);
    for (i, s) in d.snapshots.iter().enumerate() {
        snapshot_section(s, i, &mut body);
    }
    for r in d.distinct_incidents() {
        details(d, r, &mut body);
    }
    inputs_section(d, &mut body);
    let _ = write!(
        body,
        "<footer>oomdoctor {} · diagnosis schema {} · a self-contained page: it loads nothing from the network</footer>",
        esc(d.tool.version),
        d.schema_version
    );
    let title = match d.incidents.first() {
        Some(r) => format!("oomdoctor: {} in {}", r.cause, r.location.input),
        None => "oomdoctor: no out-of-memory incident".to_string(),
    };
    format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n<meta name=\"generator\" content=\"oomdoctor {}\">\n<title>{}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n{body}\n</main>\n<script>{JS}</script>\n</body>\n</html>\n",
        esc(d.tool.version),
        esc(&title)
    )
}

fn header(d: &Diagnosis, out: &mut String) {
    let inputs = match d.inputs.len() {
        0 => "no input".to_string(),
        1 => esc(&d.inputs[0].name),
        n => format!("{n} inputs"),
    };
    let _ = writeln!(
        out,
        "<header class=\"top\"><div class=\"brand\">oomdoctor</div><div class=\"meta\">{} in {inputs}</div></header>",
        {
            let distinct = d.distinct_incidents().count();
            let all = count(d.incidents.len(), "incident");
            if distinct < d.incidents.len() {
                format!("{all} ({distinct} distinct)")
            } else {
                all
            }
        }
    );
}

fn verdicts(d: &Diagnosis, opts: &Options, out: &mut String) {
    out.push_str("<section class=\"verdicts\">\n");
    if d.incidents.is_empty() {
        let _ = writeln!(
            out,
            "<article class=\"card verdict ok\"><div class=\"cause-line\"><span class=\"badge ok\">no incident</span></div><h1 class=\"summary\">No out-of-memory incident found</h1><p class=\"lede\">Read {}.</p></article>",
            if d.inputs.is_empty() {
                "nothing".to_string()
            } else {
                d.inputs
                    .iter()
                    .map(|i| format!("<code>{}</code>", esc(&i.name)))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        );
    }
    for r in d.distinct_incidents() {
        let fails = opts.policy.fails(r);
        let class = if fails { "fail" } else { "warn" };
        let _ = writeln!(
            out,
            "<article class=\"card verdict {class}\" id=\"verdict-{}\">\n<div class=\"cause-line\"><span class=\"badge {class}\">{}</span><span class=\"conf\" title=\"the probability of this cause given the evidence\">confidence <b>{:.2}</b><span class=\"meter\"><span style=\"width:{:.0}%\"></span></span></span>{}</div>",
            r.id,
            esc(r.cause.id()),
            r.confidence,
            (r.confidence * 100.0).clamp(0.0, 100.0),
            if d.incidents.len() > 1 {
                format!("<span class=\"num\">incident {}</span>", r.id)
            } else {
                String::new()
            }
        );
        let _ = writeln!(
            out,
            "<h1 class=\"summary\">{}</h1>\n<p class=\"lede\">{}.</p>",
            esc(&r.summary),
            esc(&r.title)
        );
        chips(r, out);
        device_bar(&r.facts, r.requested_bytes, out);
        if let Some(f) = r.fixes.first() {
            let _ = writeln!(
                out,
                "<div class=\"first-fix\"><div class=\"label\">Try first</div><div class=\"fix-title\">{}</div><pre class=\"code\"><code>{}</code></pre>{}</div>",
                esc(&f.title),
                esc(&f.action),
                f.why
                    .as_ref()
                    .map(|w| format!("<p class=\"why\">{}</p>", esc(w)))
                    .unwrap_or_default()
            );
        }
        let repeats = d.repeats_of(r);
        let _ = writeln!(
            out,
            "<p class=\"where\">first seen at <code>{}</code> · fingerprint <code>{}</code> · <a href=\"#incident-{}\">evidence and all fixes</a></p>{}\n</article>",
            esc(&location(&r.location)),
            esc(&r.fingerprint),
            r.id,
            if repeats.is_empty() {
                String::new()
            } else {
                format!(
                    "<p class=\"where\">{}</p>",
                    esc(&text::also_seen(r, &repeats))
                )
            }
        );
    }
    out.push_str("</section>\n");
}

fn chips(r: &IncidentReport, out: &mut String) {
    let mut items: Vec<(&str, String)> = Vec::new();
    if let Some(b) = r.requested_bytes {
        items.push(("Requested", gib(b)));
    }
    let mut device = match r.device {
        Some(d) => format!("GPU {d}"),
        None => String::new(),
    };
    if let Some(t) = r.facts.num("oom.total_bytes") {
        if !device.is_empty() {
            device.push_str(" · ");
        }
        device.push_str(&gib(t as u64));
    }
    if !device.is_empty() {
        items.push(("Device", device));
    }
    items.push(("Failure", r.kind.clone()));
    items.push(("Phase", text::phase(r)));
    if r.engine != "unknown" {
        items.push(("Engine", r.engine.clone()));
    }
    if r.copies > 1 {
        items.push((
            "Seen",
            format!(
                "{}×{}",
                r.copies,
                text::ranks(r).replace(" across ", " on ")
            ),
        ));
    }
    out.push_str("<dl class=\"chips\">");
    for (k, v) in items {
        let _ = write!(out, "<div><dt>{k}</dt><dd>{}</dd></div>", esc(&v));
    }
    out.push_str("</dl>\n");
}

/// The device's memory at the failure, as the OOM message itemised it, with the failed
/// request drawn to the same scale underneath. Plain HTML boxes, so it reflows on a phone.
fn device_bar(f: &Facts, requested: Option<u64>, out: &mut String) {
    let Some(total) = f.num("oom.total_bytes").filter(|t| *t > 0.0) else {
        return;
    };
    let parts = [
        (
            "allocated by PyTorch",
            "alloc",
            f.num("oom.allocated_bytes"),
        ),
        (
            "reserved but unallocated",
            "cached",
            f.num("oom.reserved_unallocated_bytes"),
        ),
        (
            "outside PyTorch (other processes, CUDA context, NCCL)",
            "outside",
            f.num("oom.unaccounted_bytes"),
        ),
        ("free", "free", f.num("oom.free_bytes")),
    ];
    let known: Vec<(&str, &str, f64)> = parts
        .iter()
        .filter_map(|(n, c, v)| v.filter(|x| *x > 0.0).map(|v| (*n, *c, v)))
        .collect();
    if known.len() < 2 {
        return;
    }
    let pct = |b: f64| (b / total * 100.0).clamp(0.0, 100.0);
    let _ = write!(
        out,
        "<figure class=\"devbar\"><figcaption>Device memory at the failure · {} in total</figcaption><div class=\"bar\">",
        esc(&gib(total as u64))
    );
    for (name, class, v) in &known {
        let _ = write!(
            out,
            "<span class=\"{class}\" style=\"width:{:.2}%\" title=\"{}: {}\"></span>",
            pct(*v),
            esc(name),
            esc(&gib(*v as u64))
        );
    }
    out.push_str("</div>");
    if let Some(req) = requested.filter(|r| *r > 0) {
        let _ = write!(
            out,
            "<div class=\"req\"><span style=\"width:{:.2}%\"></span><em>{}the failed request, {}</em></div>",
            pct(req as f64).max(0.4),
            if req as f64 > total { "→ " } else { "" },
            esc(&gib(req))
        );
    }
    out.push_str("<ul class=\"legend\">");
    for (name, class, v) in &known {
        let _ = write!(
            out,
            "<li><i class=\"{class}\"></i>{} <b>{}</b></li>",
            esc(name),
            esc(&gib(*v as u64))
        );
    }
    out.push_str("</ul></figure>\n");
}

const HATCH: &str = "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#E69F00\"/><rect width=\"2.2\" height=\"6\" fill=\"#fff3d6\"/></pattern></defs>";

fn summary(d: &Diagnosis, out: &mut String) {
    let s = d.summary();
    out.push_str("<section class=\"card\"><h2>Across the inputs</h2>");
    if s.incidents > 0 {
        let _ = write!(
            out,
            "<p class=\"lede\">{} ({} distinct) in {} of {}.</p><div class=\"pills\">",
            count(s.incidents, "incident"),
            s.distinct,
            s.by_input.iter().filter(|i| i.incidents > 0).count(),
            count(s.by_input.len(), "input")
        );
        for (c, n) in &s.by_cause {
            let _ = write!(
                out,
                "<span class=\"pill\"><b>{n}</b> {}</span>",
                esc(c.id())
            );
        }
        out.push_str("</div>");
    }
    out.push_str("<table class=\"grid\"><thead><tr><th>Input</th><th>Kind</th><th class=\"r\">Incidents</th><th>Causes</th></tr></thead><tbody>");
    for i in &s.by_input {
        let causes = i
            .causes
            .iter()
            .map(|c| format!("<code>{}</code>", esc(c.id())))
            .collect::<Vec<_>>()
            .join(" ");
        let _ = write!(
            out,
            "<tr><td><code>{}</code></td><td>{}</td><td class=\"r\">{}</td><td>{}</td></tr>",
            esc(&i.input),
            i.kind,
            i.incidents,
            if causes.is_empty() {
                "—".into()
            } else {
                causes
            }
        );
    }
    out.push_str("</tbody></table>");
    for g in &s.repeated {
        let _ = write!(
            out,
            "<p class=\"note\">Incidents {} are the same problem (fingerprint <code>{}</code>).</p>",
            g.incidents
                .iter()
                .map(|i| format!("<a href=\"#incident-{i}\">#{i}</a>"))
                .collect::<Vec<_>>()
                .join(", "),
            esc(&g.fingerprint)
        );
    }
    out.push_str("</section>\n");
}

// ---------------------------------------------------------------------------------------
// Memory over time.

fn nice_step(range: f64, target: f64, steps: &[f64]) -> f64 {
    steps
        .iter()
        .copied()
        .find(|s| range / s <= target)
        .unwrap_or_else(|| steps.last().copied().unwrap_or(1.0))
}

fn fmt_t(t: f64, step: f64) -> String {
    if step < 60.0 {
        format!("{t:.0} s")
    } else if step < 3600.0 {
        format!("{:.0} min", t / 60.0)
    } else if step < 86400.0 {
        let h = t / 3600.0;
        if (h - h.round()).abs() < 1e-9 {
            format!("{h:.0} h")
        } else {
            format!("{h:.1} h")
        }
    } else {
        format!("{:.1} d", t / 86400.0)
    }
}

const GIB: f64 = (1u64 << 30) as f64;

fn fmt_gib_tick(b: f64) -> String {
    let g = b / GIB;
    if (g - g.round()).abs() < 1e-9 {
        format!("{g:.0} GiB")
    } else {
        let s = format!("{g:.2}");
        format!("{} GiB", s.trim_end_matches('0'))
    }
}

/// `+12:05` or `+1:02:03` since the first sample, for hover read-outs.
fn fmt_clock(t: f64) -> String {
    let s = t.max(0.0).round() as u64;
    if s >= 3600 {
        format!("+{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("+{}:{:02}", s / 60, s % 60)
    }
}

/// Keeps the first, lowest, highest and last sample of every pixel column, so peaks survive
/// however many samples there are.
fn decimate(points: &[(f64, f64)], columns: usize) -> Vec<(f64, f64)> {
    if points.len() <= columns * 4 {
        return points.to_vec();
    }
    let (t0, t1) = (points[0].0, points[points.len() - 1].0);
    let span = (t1 - t0).max(f64::MIN_POSITIVE);
    let mut out = Vec::with_capacity(columns * 4);
    let mut i = 0;
    while i < points.len() {
        let col = (((points[i].0 - t0) / span) * columns as f64) as usize;
        let mut j = i;
        let (mut lo, mut hi) = (i, i);
        while j < points.len() && (((points[j].0 - t0) / span) * columns as f64) as usize == col {
            if points[j].1 < points[lo].1 {
                lo = j;
            }
            if points[j].1 > points[hi].1 {
                hi = j;
            }
            j += 1;
        }
        let mut keep = vec![i, lo, hi, j - 1];
        keep.sort_unstable();
        keep.dedup();
        out.extend(keep.into_iter().map(|k| points[k]));
        i = j;
    }
    out
}

fn series_section(series: &[SeriesPlot], out: &mut String) {
    if series.is_empty() {
        return;
    }
    // One chart per input: its devices overlaid, so a neighbour's memory shows beside ours.
    let mut groups: Vec<(&str, Vec<&SeriesPlot>)> = Vec::new();
    for s in series {
        match groups.iter_mut().find(|(i, _)| *i == s.input) {
            Some((_, v)) => v.push(s),
            None => groups.push((s.input.as_str(), vec![s])),
        }
    }
    out.push_str("<section class=\"card\"><h2>Memory over time</h2>");
    for (input, lines) in groups {
        let _ = write!(out, "<h3><code>{}</code></h3>", esc(input));
        out.push_str(&series_chart(&lines));
    }
    out.push_str("</section>\n");
}

fn series_chart(lines: &[&SeriesPlot]) -> String {
    let (w, h) = (880.0, 316.0);
    let (ml, mr, mt, mb) = (64.0, 20.0, 46.0, 34.0);
    let (pw, ph) = (w - ml - mr, h - mt - mb);
    let pts: Vec<&(f64, u64)> = lines.iter().flat_map(|l| l.points.iter()).collect();
    let marks: Vec<_> = lines.iter().flat_map(|l| l.marks.iter()).collect();
    let t_min = pts
        .iter()
        .map(|p| p.0)
        .chain(marks.iter().map(|m| m.t))
        .fold(f64::INFINITY, f64::min);
    let t_max = pts
        .iter()
        .map(|p| p.0)
        .chain(marks.iter().map(|m| m.t))
        .fold(f64::NEG_INFINITY, f64::max);
    if !t_min.is_finite() || !t_max.is_finite() {
        return "<p class=\"note\">No samples.</p>".into();
    }
    let t_span = (t_max - t_min).max(1.0);
    let total = lines
        .iter()
        .filter_map(|l| l.total_bytes)
        .max()
        .unwrap_or(0) as f64;
    let used_max = pts.iter().map(|p| p.1).max().unwrap_or(0) as f64;
    let y_top = total.max(used_max).max(1.0) * 1.06;
    let y_step = nice_step(
        y_top,
        6.0,
        &[
            64.0 * 1048576.0,
            128.0 * 1048576.0,
            256.0 * 1048576.0,
            512.0 * 1048576.0,
            GIB,
            2.0 * GIB,
            4.0 * GIB,
            5.0 * GIB,
            8.0 * GIB,
            10.0 * GIB,
            16.0 * GIB,
            20.0 * GIB,
            40.0 * GIB,
            80.0 * GIB,
            160.0 * GIB,
            320.0 * GIB,
            640.0 * GIB,
            1280.0 * GIB,
        ],
    );
    let x = |t: f64| ml + (t - t_min) / t_span * pw;
    let y = |b: f64| mt + ph - (b / y_top).clamp(0.0, 1.0) * ph;
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg class=\"chart series\" viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"memory over time\">"
    );
    // Grid and y axis.
    let mut v = 0.0;
    while v <= y_top + 1.0 {
        let yy = y(v);
        let _ = write!(
            s,
            "<line x1=\"{ml}\" x2=\"{:.1}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" class=\"grid\"/><text x=\"{:.1}\" y=\"{:.1}\" class=\"axis\" text-anchor=\"end\">{}</text>",
            ml + pw,
            ml - 6.0,
            yy + 4.0,
            esc(&fmt_gib_tick(v))
        );
        v += y_step;
    }
    // X axis.
    let t_step = nice_step(
        t_span,
        8.0,
        &[
            1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0,
            7200.0, 10800.0, 21600.0, 43200.0, 86400.0, 172800.0, 604800.0,
        ],
    );
    let mut t = (t_min / t_step).ceil() * t_step;
    while t <= t_max + 1e-9 {
        let xx = x(t);
        let _ = write!(
            s,
            "<line x1=\"{xx:.1}\" x2=\"{xx:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" class=\"tick\"/><text x=\"{xx:.1}\" y=\"{:.1}\" class=\"axis\" text-anchor=\"middle\">{}</text>",
            mt + ph,
            mt + ph + 4.0,
            mt + ph + 18.0,
            esc(&fmt_t(t - t_min, t_step))
        );
        t += t_step;
    }
    // Capacity.
    if total > 0.0 {
        let yy = y(total);
        let _ = write!(
            s,
            "<line x1=\"{ml}\" x2=\"{:.1}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" class=\"cap\"/><text x=\"{:.1}\" y=\"{:.1}\" class=\"axis cap-label\">capacity {}</text>",
            ml + pw,
            ml + 6.0,
            yy + 14.0,
            esc(&gib(total as u64))
        );
    }
    // Lines.
    let mut hover = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let raw: Vec<(f64, f64)> = l.points.iter().map(|(t, b)| (*t, *b as f64)).collect();
        let kept = decimate(&raw, pw as usize);
        if kept.is_empty() {
            continue;
        }
        let path: Vec<String> = kept
            .iter()
            .map(|(t, b)| format!("{:.1},{:.1}", x(*t), y(*b)))
            .collect();
        if lines.len() == 1 {
            let _ = write!(
                s,
                "<polygon points=\"{:.1},{:.1} {} {:.1},{:.1}\" fill=\"{color}\" fill-opacity=\"0.12\"/>",
                x(kept[0].0),
                y(0.0),
                path.join(" "),
                x(kept[kept.len() - 1].0),
                y(0.0)
            );
        }
        let _ = write!(
            s,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" stroke-linejoin=\"round\"><title>{}</title></polyline>",
            path.join(" "),
            esc(&l.label)
        );
        let hp: Vec<String> = kept
            .iter()
            .map(|(t, b)| {
                format!(
                    "[{:.1},{:.1},\"{}\"]",
                    x(*t),
                    y(*b),
                    json_str(&format!("{} · {}", fmt_clock(t - t_min), gib(*b as u64)))
                )
            })
            .collect();
        hover.push(format!(
            "{{\"name\":\"{}\",\"color\":\"{color}\",\"pts\":[{}]}}",
            json_str(&l.label),
            hp.join(",")
        ));
    }
    // Marks.
    for m in &marks {
        let xx = x(m.t);
        let (class, color) = match m.kind {
            MarkKind::Oom => ("mark oom", VERMILLION),
            MarkKind::Restart => ("mark restart", "#57606a"),
            MarkKind::Event => ("mark event", "#57606a"),
        };
        let anchor = if xx > ml + pw * 0.8 { "end" } else { "start" };
        let dx = if anchor == "end" { -4.0 } else { 4.0 };
        let _ = write!(
            s,
            "<line x1=\"{xx:.1}\" x2=\"{xx:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" class=\"{class}\" stroke=\"{color}\"/><text x=\"{:.1}\" y=\"{:.1}\" class=\"mark-label\" fill=\"{color}\" text-anchor=\"{anchor}\">{}</text>",
            mt - 12.0,
            mt + ph,
            xx + dx,
            mt - 3.0,
            esc(&m.label)
        );
    }
    // Legend, above the plot.
    let mut lx = ml;
    for (i, l) in lines.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let _ = write!(
            s,
            "<rect x=\"{lx:.1}\" y=\"8\" width=\"14\" height=\"4\" fill=\"{color}\"/><text x=\"{:.1}\" y=\"14\" class=\"legend\">{}</text>",
            lx + 18.0,
            esc(&l.label)
        );
        lx += 40.0 + l.label.len() as f64 * 7.0;
    }
    let _ = write!(
        s,
        "<g class=\"hover\" visibility=\"hidden\"><line class=\"hair\" y1=\"{mt}\" y2=\"{:.1}\"/><g class=\"tip\"></g></g></svg>",
        mt + ph
    );
    // The hover data rides on the element; the script reads it.
    s.replacen(
        "<svg class=\"chart series\"",
        &format!(
            "<svg class=\"chart series\" data-plot=\"{}\"",
            esc(&format!("[{}]", hover.join(",")))
        ),
        1,
    )
}

fn json_str(s: &str) -> String {
    let q = serde_json::to_string(s).unwrap_or_default();
    q.trim_matches('"').to_string()
}

// ---------------------------------------------------------------------------------------
// Snapshots.

fn snapshot_section(s: &SnapshotPlot, index: usize, out: &mut String) {
    let title = match s.device {
        Some(d) => format!("Memory snapshot · GPU {d}"),
        None => "Memory snapshot".to_string(),
    };
    let _ = write!(
        out,
        "<section class=\"card\" id=\"snapshot-{}\"><h2>{}</h2><p class=\"lede\"><code>{}</code></p>",
        index + 1,
        esc(&title),
        esc(&s.input)
    );
    let reserved = s.reserved_bytes();
    let free = s.bytes_in(BlockState::Free);
    let mut stats: Vec<(&str, String)> = vec![
        ("Reserved", gib(reserved)),
        ("Allocated", gib(s.bytes_in(BlockState::Allocated))),
        (
            "Free in segments",
            format!("{} in {} blocks", gib(free), s.free_blocks()),
        ),
    ];
    if let Some(l) = s.largest_free_block {
        stats.push(("Largest free block", gib(l)));
    }
    if let Some(r) = s.request {
        stats.push(("Failed request", gib(r)));
    }
    stats.push(("Segments", s.segments.len().to_string()));
    out.push_str("<dl class=\"chips\">");
    for (k, v) in stats {
        let _ = write!(out, "<div><dt>{k}</dt><dd>{}</dd></div>", esc(&v));
    }
    out.push_str("</dl>");
    if !s.segments.is_empty() {
        out.push_str("<h3>Segment map</h3><p class=\"note\">Every segment the allocator reserved, in address order, laid end to end and wrapped into rows; gaps between segments are white lines. The failed request is drawn to the same scale above the map.</p>");
        out.push_str(&segment_map(s));
    }
    if !s.categories.is_empty() {
        out.push_str("<h3>Live memory by category</h3>");
        out.push_str(&category_bars(s));
    }
    if !s.top_sites.is_empty() {
        out.push_str("<h3>Top allocation sites</h3>");
        out.push_str(&top_sites(s));
    }
    out.push_str("</section>\n");
}

/// Rounds bytes-per-row up to a power-of-two number of MiB, so row labels are round.
fn nice_row(bytes: u64) -> u64 {
    let mut r = 1u64 << 20;
    while r < bytes && r < (1u64 << 50) {
        r <<= 1;
    }
    r
}

fn state_fill(s: Option<BlockState>) -> &'static str {
    match s {
        Some(BlockState::Allocated) => BLUE,
        Some(BlockState::PendingFree) => GREY,
        Some(BlockState::Free) => "url(#hatch)",
        None => "#e8ecf0",
    }
}

fn state_name(s: Option<BlockState>) -> &'static str {
    match s {
        Some(BlockState::Allocated) => "allocated",
        Some(BlockState::PendingFree) => "pending free",
        Some(BlockState::Free) => "free",
        None => "not described",
    }
}

/// Most rectangles drawn for one map; beyond it, runs are merged at pixel resolution.
const MAX_RECTS: usize = 40_000;

fn segment_map(s: &SnapshotPlot) -> String {
    let total = s.reserved_bytes().max(1);
    let request = s.request.unwrap_or(0);
    let per_row = nice_row((total / 32).max(request.min(total) + request.min(total) / 20));
    let rows = total.div_ceil(per_row).max(1);
    let (ml, width, row_h, gap) = (72.0, 792.0, 16.0, 6.0);
    let top = if request > 0 { 36.0 } else { 8.0 };
    let height = top + rows as f64 * (row_h + gap) + 30.0;
    let px = |b: u64| b as f64 / per_row as f64 * width;

    // Runs of one state, in strip coordinates.
    struct Run {
        start: u64,
        len: u64,
        state: Option<BlockState>,
        segment: usize,
        largest: bool,
    }
    let largest = s.largest_free_block.or_else(|| {
        s.segments
            .iter()
            .flat_map(|g| g.blocks.iter())
            .filter(|b| b.state == BlockState::Free)
            .map(|b| b.size)
            .max()
    });
    let mut largest_marked = false;
    let mut runs: Vec<Run> = Vec::new();
    let mut seg_starts: Vec<u64> = Vec::new();
    let mut pos = 0u64;
    for (si, seg) in s.segments.iter().enumerate() {
        seg_starts.push(pos);
        let mut cursor = 0u64;
        let mut push = |start: u64, len: u64, state: Option<BlockState>, big: bool| {
            if len == 0 {
                return;
            }
            if let Some(last) = runs.last_mut() {
                if last.segment == si
                    && last.state == state
                    && !big
                    && !last.largest
                    && last.start + last.len == start
                {
                    last.len += len;
                    return;
                }
            }
            runs.push(Run {
                start,
                len,
                state,
                segment: si,
                largest: big,
            });
        };
        for b in &seg.blocks {
            let off = b.offset.min(seg.size);
            if off > cursor {
                push(pos + cursor, off - cursor, None, false);
            }
            let len = b.size.min(seg.size.saturating_sub(off));
            let big = !largest_marked
                && b.state == BlockState::Free
                && Some(b.size) == largest
                && b.size > 0;
            largest_marked |= big;
            push(pos + off, len, Some(b.state), big);
            cursor = cursor.max(off + len);
        }
        if cursor < seg.size {
            push(pos + cursor, seg.size - cursor, None, false);
        }
        pos += seg.size;
    }

    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg class=\"chart segmap\" viewBox=\"0 0 880 {height:.0}\" role=\"img\" aria-label=\"segment map\">{HATCH}"
    );
    if request > 0 {
        let rw = px(request).min(width);
        let _ = write!(
            svg,
            "<rect x=\"{ml}\" y=\"8\" width=\"{rw:.1}\" height=\"12\" fill=\"{VERMILLION}\"><title>the failed request: {}</title></rect><text x=\"{:.1}\" y=\"18\" class=\"axis\">{}the failed request, {}</text>",
            esc(&gib(request)),
            (ml + rw + 6.0).min(700.0),
            if request > per_row { "→ " } else { "" },
            esc(&gib(request))
        );
    }
    for r in 0..rows {
        let yy = top + r as f64 * (row_h + gap);
        let _ = write!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" class=\"axis\" text-anchor=\"end\">{}</text>",
            ml - 6.0,
            yy + 12.0,
            esc(&fmt_gib_tick((r * per_row) as f64))
        );
    }
    // Pixel-merge when there are too many runs to draw one by one.
    let detailed = runs.len() <= MAX_RECTS;
    let mut outline = String::new();
    for run in &runs {
        let mut start = run.start;
        let mut left = run.len;
        while left > 0 {
            let row = start / per_row;
            let in_row = start % per_row;
            let take = left.min(per_row - in_row);
            let x0 = ml + px(in_row);
            let w = px(take);
            let yy = top + row as f64 * (row_h + gap);
            if detailed || w >= 1.0 || run.largest {
                let title = if w >= 2.0 {
                    format!(
                        "<title>segment {} at 0x{:x}: {} {}</title>",
                        run.segment + 1,
                        s.segments.get(run.segment).map(|g| g.address).unwrap_or(0),
                        state_name(run.state),
                        gib(run.len)
                    )
                } else {
                    String::new()
                };
                let _ = write!(
                    svg,
                    "<rect x=\"{x0:.2}\" y=\"{yy:.1}\" width=\"{:.2}\" height=\"{row_h}\" fill=\"{}\">{title}</rect>",
                    w.max(0.3),
                    state_fill(run.state)
                );
            }
            if run.largest {
                let _ = write!(
                    outline,
                    "<rect x=\"{x0:.2}\" y=\"{:.1}\" width=\"{:.2}\" height=\"{:.1}\" fill=\"none\" stroke=\"#000\" stroke-width=\"1.5\"/>",
                    yy - 1.0,
                    w.max(1.5),
                    row_h + 2.0
                );
            }
            start += take;
            left -= take;
        }
    }
    // Segment boundaries, where there is room to see them.
    for (i, st) in seg_starts.iter().enumerate().skip(1) {
        let size = s.segments.get(i).map(|g| g.size).unwrap_or(0);
        if px(size) < 4.0 || px(s.segments[i - 1].size) < 4.0 {
            continue;
        }
        let row = st / per_row;
        let xx = ml + px(st % per_row);
        let yy = top + row as f64 * (row_h + gap);
        let _ = write!(
            svg,
            "<line x1=\"{xx:.2}\" x2=\"{xx:.2}\" y1=\"{yy:.1}\" y2=\"{:.1}\" stroke=\"#fff\" stroke-width=\"1.5\"/>",
            yy + row_h
        );
    }
    svg.push_str(&outline);
    // Legend.
    let ly = top + rows as f64 * (row_h + gap) + 12.0;
    let mut lx = ml;
    let mut legend = vec![
        (Some(BlockState::Allocated), "allocated"),
        (Some(BlockState::Free), "free (cached)"),
    ];
    if s.bytes_in(BlockState::PendingFree) > 0 {
        legend.push((Some(BlockState::PendingFree), "pending free"));
    }
    for (st, name) in legend {
        let _ = write!(
            svg,
            "<rect x=\"{lx:.1}\" y=\"{:.1}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{:.1}\" class=\"legend\">{name}</text>",
            ly - 2.0,
            state_fill(st),
            lx + 16.0,
            ly + 8.0
        );
        lx += 30.0 + name.len() as f64 * 6.4;
    }
    if let Some(l) = largest {
        let _ = write!(
            svg,
            "<rect x=\"{lx:.1}\" y=\"{:.1}\" width=\"12\" height=\"12\" fill=\"none\" stroke=\"#000\" stroke-width=\"1.5\"/><text x=\"{:.1}\" y=\"{:.1}\" class=\"legend\">largest free block, {}</text>",
            ly - 2.0,
            lx + 16.0,
            ly + 8.0,
            esc(&gib(l))
        );
    }
    if !detailed {
        let _ = write!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" class=\"legend\" text-anchor=\"end\">{} runs; runs under a pixel not drawn</text>",
            ml + width,
            ly + 8.0,
            runs.len()
        );
    }
    svg.push_str("</svg>");
    svg
}

fn category_bars(s: &SnapshotPlot) -> String {
    let mut cats = s.categories.clone();
    cats.sort_by_key(|c| std::cmp::Reverse(c.bytes));
    let max = cats.iter().map(|c| c.bytes).max().unwrap_or(1).max(1) as f64;
    let sum: u64 = cats.iter().map(|c| c.bytes).sum();
    let row = 26.0;
    let height = cats.len() as f64 * row + 8.0;
    let (ml, width) = (190.0, 560.0);
    let mut svg = format!(
        "<svg class=\"chart bars\" viewBox=\"0 0 880 {height:.0}\" role=\"img\" aria-label=\"live memory by category\">"
    );
    for (i, c) in cats.iter().enumerate() {
        let yy = 4.0 + i as f64 * row;
        let w = (c.bytes as f64 / max * width).max(1.0);
        let share = if sum > 0 {
            c.bytes as f64 / sum as f64 * 100.0
        } else {
            0.0
        };
        let _ = write!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" class=\"label\" text-anchor=\"end\">{}</text><rect x=\"{ml}\" y=\"{yy:.1}\" width=\"{w:.1}\" height=\"18\" rx=\"2\" fill=\"{}\"><title>{}: {}</title></rect><text x=\"{:.1}\" y=\"{:.1}\" class=\"value\">{} · {share:.0}%</text>",
            ml - 8.0,
            yy + 13.0,
            esc(&text::clip(&c.name, 28)),
            PALETTE[i % PALETTE.len()],
            esc(&c.name),
            esc(&gib(c.bytes)),
            ml + w + 8.0,
            yy + 13.0,
            esc(&gib(c.bytes))
        );
    }
    svg.push_str("</svg>");
    svg
}

fn top_sites(s: &SnapshotPlot) -> String {
    let max = s
        .top_sites
        .iter()
        .map(|t| t.bytes)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let mut out = String::from(
        "<table class=\"grid sites\"><thead><tr><th>Site</th><th class=\"r\">Live</th><th class=\"r\">Blocks</th></tr></thead><tbody>",
    );
    for t in &s.top_sites {
        let _ = write!(
            out,
            "<tr><td class=\"site\" title=\"{}\"><span class=\"bar\" style=\"width:{:.1}%\"></span><code>{}</code></td><td class=\"r\">{}</td><td class=\"r\">{}</td></tr>",
            esc(&t.site),
            t.bytes as f64 / max * 100.0,
            esc(&t.site),
            esc(&gib(t.bytes)),
            t.count.map(|c| c.to_string()).unwrap_or_else(|| "—".into())
        );
    }
    out.push_str("</tbody></table>");
    out
}

// ---------------------------------------------------------------------------------------
// Evidence, fixes, log lines.

fn details(d: &Diagnosis, r: &IncidentReport, out: &mut String) {
    let _ = write!(
        out,
        "<section class=\"card\" id=\"incident-{}\"><h2>Incident {}: why <code>{}</code></h2><p class=\"lede\">{}</p>",
        r.id,
        r.id,
        esc(r.cause.id()),
        esc(&text::headline(r))
    );
    if !r.evidence.is_empty() {
        out.push_str("<table class=\"grid evidence\"><thead><tr><th class=\"r\">Points</th><th>Evidence</th><th>Line</th></tr></thead><tbody>");
        for e in &r.evidence {
            let neg = if e.weight < 0.0 { " neg" } else { "" };
            let _ = write!(
                out,
                "<tr><td class=\"r pts{neg}\">{}</td><td>{}</td><td><a href=\"#{}\"><code>{}</code></a></td></tr>",
                weight(e.weight),
                esc(&e.text),
                line_id(r.id, &e.input, e.line),
                esc(&place(e))
            );
        }
        out.push_str("</tbody></table>");
    }
    if !r.fixes.is_empty() {
        out.push_str("<h3>What to change, most likely to help first</h3><ol class=\"fixes\">");
        for f in &r.fixes {
            let _ = write!(
                out,
                "<li><div class=\"fix-title\">{}{}</div><pre class=\"code\"><code>{}</code></pre>{}</li>",
                esc(&f.title),
                if f.cause != r.cause {
                    format!(" <span class=\"for\">for {}</span>", esc(f.cause.id()))
                } else {
                    String::new()
                },
                esc(&f.action),
                f.why
                    .as_ref()
                    .map(|w| format!("<p class=\"why\">{}</p>", esc(w)))
                    .unwrap_or_default()
            );
        }
        out.push_str("</ol>");
    }
    if !r.alternatives.is_empty() {
        out.push_str("<h3>Also considered</h3><ul class=\"alts\">");
        for a in &r.alternatives {
            let _ = write!(
                out,
                "<li><code>{}</code> <span class=\"meter small\"><span style=\"width:{:.0}%\"></span></span> {:.2} — {}</li>",
                esc(a.cause.id()),
                (a.confidence * 100.0).clamp(0.0, 100.0),
                a.confidence,
                esc(&a.summary)
            );
        }
        out.push_str("</ul>");
    }
    log_lines(d, r, out);
    out.push_str("</section>\n");
}

fn line_id(incident: usize, input: &str, line: Option<u64>) -> String {
    let slug: String = input
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("i{incident}-{slug}-{}", line.unwrap_or(0))
}

/// The incident's log lines, with the spans of the numbers its facts came from marked.
fn log_lines(d: &Diagnosis, r: &IncidentReport, out: &mut String) {
    let lines = super::markdown::key_lines(d, r, 0);
    if lines.is_empty() {
        return;
    }
    let _ = write!(
        out,
        "<details class=\"log\" open><summary>Log lines ({})</summary><div class=\"lines\">",
        lines.len()
    );
    for (at, text) in &lines {
        let (input, line) = match at.rsplit_once(':') {
            Some((i, l)) => (i.to_string(), l.parse::<u64>().ok()),
            None => (at.clone(), None),
        };
        // Spans on this line, with what they measured.
        let mut spans: Vec<(usize, usize, String)> = Vec::new();
        for (name, f) in r.facts.iter() {
            for s in &f.sources {
                if *s.input == *input && s.line == line {
                    if let Some((a, b)) = s.span {
                        if a < b
                            && b <= text.len()
                            && text.is_char_boundary(a)
                            && text.is_char_boundary(b)
                        {
                            let label =
                                format!("{name} = {}", r.facts.display(name).unwrap_or_default());
                            spans.push((a, b, label));
                        }
                    }
                }
            }
        }
        spans.sort_by_key(|s| (s.0, std::cmp::Reverse(s.1)));
        let mut html = String::new();
        let mut cursor = 0;
        for (a, b, label) in spans {
            if a < cursor {
                continue;
            }
            html.push_str(&esc(&text[cursor..a]));
            let _ = write!(
                html,
                "<mark title=\"{}\">{}</mark>",
                esc(&label),
                esc(&text[a..b])
            );
            cursor = b;
        }
        html.push_str(&esc(&text[cursor..]));
        let _ = write!(
            out,
            "<div class=\"line\" id=\"{}\"><span class=\"at\">{}</span><span class=\"txt\">{}</span></div>",
            line_id(r.id, &input, line),
            esc(at),
            html
        );
    }
    out.push_str("</div></details>");
}

fn inputs_section(d: &Diagnosis, out: &mut String) {
    out.push_str("<section class=\"card\"><h2>Inputs</h2><table class=\"grid\"><thead><tr><th>Input</th><th>Kind</th><th class=\"r\">Size</th><th class=\"r\">Lines</th><th class=\"r\">Incidents</th></tr></thead><tbody>");
    for i in &d.inputs {
        let _ = write!(
            out,
            "<tr><td><code>{}</code>{}</td><td>{}</td><td class=\"r\">{}</td><td class=\"r\">{}</td><td class=\"r\">{}</td></tr>",
            esc(&i.name),
            if i.compressed {
                " <span class=\"for\">gzip</span>"
            } else {
                ""
            },
            i.kind,
            esc(&crate::facts::units::format_bytes(i.bytes)),
            i.lines.map(|l| l.to_string()).unwrap_or_else(|| "—".into()),
            i.incidents
        );
    }
    for s in &d.skipped {
        let _ = write!(
            out,
            "<tr class=\"muted\"><td><code>{}</code></td><td>{}</td><td colspan=\"3\">skipped: {}</td></tr>",
            esc(&s.input),
            esc(&s.kind),
            esc(&s.reason)
        );
    }
    for e in &d.errors {
        let _ = write!(
            out,
            "<tr class=\"err\"><td><code>{}</code></td><td>—</td><td colspan=\"3\">{}</td></tr>",
            esc(&e.input),
            esc(&e.message)
        );
    }
    out.push_str("</tbody></table></section>\n");
}

const CSS: &str = r#"
:root{--ink:#1b1f24;--muted:#57606a;--line:#d8dee4;--bg:#f4f6f8;--card:#fff;--fail:#D55E00;--warn:#B07A00;--ok:#009E73;--blue:#0072B2;
--sans:system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,"Noto Sans","Liberation Sans",sans-serif;
--mono:ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono","DejaVu Sans Mono",monospace}
*{box-sizing:border-box;-webkit-print-color-adjust:exact;print-color-adjust:exact}
html{-webkit-text-size-adjust:100%}
body{margin:0;background:var(--bg);color:var(--ink);font:15px/1.5 var(--sans)}
main{max-width:960px;margin:0 auto;padding:24px 20px 48px}
code,pre{font-family:var(--mono);font-size:.9em}
a{color:var(--blue);text-decoration:none}a:hover{text-decoration:underline}
.top{display:flex;align-items:baseline;gap:14px;margin:0 0 16px;color:var(--muted)}
.brand{font-weight:700;letter-spacing:.02em;color:var(--ink);font-size:17px}
.meta{font-size:14px;overflow-wrap:anywhere}
.card{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:20px 24px;margin:0 0 18px;box-shadow:0 1px 2px rgba(27,31,36,.04)}
.verdict{border-left:6px solid var(--fail)}.verdict.warn{border-left-color:var(--warn)}.verdict.ok{border-left-color:var(--ok)}
.cause-line{display:flex;align-items:center;gap:14px;flex-wrap:wrap}
.badge{font:600 13px/1 var(--mono);padding:6px 10px;border-radius:999px;background:#fbe3d3;color:#8a3300}
.badge.warn{background:#fdf0cc;color:#6b4a00}.badge.ok{background:#d3f1e7;color:#005a41}
.conf{color:var(--muted);font-size:13px;display:inline-flex;align-items:center;gap:8px}.conf b{color:var(--ink)}
.meter{display:inline-block;width:110px;height:8px;border-radius:4px;background:#e6eaee;overflow:hidden;vertical-align:middle}
.meter>span{display:block;height:100%;background:var(--ink)}.meter.small{width:60px;height:6px}.meter.small>span{background:var(--muted)}
.num{margin-left:auto;color:var(--muted);font-size:13px}
h1.summary{font-size:24px;line-height:1.3;margin:12px 0 4px;font-weight:650;letter-spacing:-.01em}
h2{font-size:18px;margin:0 0 10px}h3{font-size:15px;margin:18px 0 8px;color:var(--ink)}
.lede{color:var(--muted);margin:0 0 12px;overflow-wrap:anywhere}
.chips{display:flex;flex-wrap:wrap;gap:8px;margin:12px 0 8px;padding:0}
.chips>div{background:var(--bg);border:1px solid var(--line);border-radius:8px;padding:6px 10px;min-width:92px}
.chips dt{font-size:11px;text-transform:uppercase;letter-spacing:.06em;color:var(--muted)}
.chips dd{margin:0;font-weight:600;font-variant-numeric:tabular-nums}
.devbar{margin:14px 0 4px}.devbar figcaption{font-size:12px;color:var(--muted);margin-bottom:4px}
.devbar .bar{display:flex;height:26px;border:1px solid #8c959f;border-radius:4px;overflow:hidden;background:#fff}
.devbar .bar span{display:block;height:100%;border-right:1px solid rgba(255,255,255,.7)}
.alloc{background:#0072B2}.cached{background:repeating-linear-gradient(45deg,#E69F00 0 4px,#fff3d6 4px 6px)}.outside{background:#CC79A7}.free{background:#fff}
.devbar .req{display:flex;align-items:center;gap:8px;margin-top:4px;font-size:12px;color:var(--muted)}
.devbar .req span{display:block;height:8px;background:#D55E00;border-radius:2px;min-width:3px}.devbar .req em{font-style:normal;white-space:nowrap}
.devbar .legend{list-style:none;display:flex;flex-wrap:wrap;gap:4px 16px;padding:0;margin:8px 0 0;font-size:12.5px;color:var(--ink)}
.devbar .legend i{display:inline-block;width:11px;height:11px;border:1px solid #8c959f;border-radius:2px;margin-right:6px;vertical-align:-1px}
.first-fix{margin:14px 0 6px;padding:12px 14px;border-radius:8px;background:#eef6fb;border:1px solid #cfe3f1}
.first-fix .label{font-size:11px;text-transform:uppercase;letter-spacing:.06em;color:var(--blue);font-weight:700}
.fix-title{font-weight:600;margin:2px 0 6px}
pre.code{margin:6px 0;padding:10px 12px;background:#1b1f24;color:#f0f3f6;border-radius:6px;overflow-x:auto;white-space:pre-wrap;overflow-wrap:anywhere}
.why{margin:4px 0 0;color:var(--muted);font-size:14px}
.where{margin:10px 0 0;color:var(--muted);font-size:13px;overflow-wrap:anywhere}
.chart{display:block;width:100%;height:auto;margin:6px 0 4px;font-family:var(--sans)}
.chart text{font-size:12px;fill:var(--muted)}.chart .legend{fill:var(--ink)}.chart .label{fill:var(--ink);font-size:12.5px}.chart .value{fill:var(--ink);font-variant-numeric:tabular-nums}
.chart .grid{stroke:#e6eaee;stroke-width:1}.chart .tick{stroke:#8c959f}
.chart .cap{stroke:#1b1f24;stroke-dasharray:6 4;stroke-width:1.2}.chart .cap-label{fill:var(--ink)}
.chart .mark{stroke-width:1.5}.chart .mark.oom{stroke-width:2}.chart .mark.restart{stroke-dasharray:4 3}.chart .mark.event{stroke-dasharray:1 3}
.chart .mark-label{font-weight:700;font-size:12px}
.chart .hair{stroke:#1b1f24;stroke-width:1;stroke-dasharray:2 2}
.chart .tip rect{fill:#1b1f24;opacity:.92}.chart .tip text{fill:#fff;font-size:12px}
table.grid{width:100%;border-collapse:collapse;font-size:14px;margin:6px 0}
.grid th{text-align:left;font-weight:600;color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.04em;border-bottom:1px solid var(--line);padding:6px 8px}
.grid td{border-bottom:1px solid #eef1f4;padding:7px 8px;vertical-align:top;overflow-wrap:anywhere}
.grid .r{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.pts{font-weight:700;color:var(--ok)}.pts.neg{color:var(--fail)}
.fixes{padding-left:22px}.fixes li{margin:0 0 12px}
.for{font-size:12px;font-weight:500;color:var(--muted);background:var(--bg);border:1px solid var(--line);border-radius:4px;padding:0 5px;margin-left:4px}
.alts{padding-left:18px;color:var(--ink)}.alts li{margin:4px 0}
.pills{display:flex;flex-wrap:wrap;gap:6px;margin:0 0 10px}.pill{background:var(--bg);border:1px solid var(--line);border-radius:999px;padding:2px 10px;font:13px var(--mono)}
.note{color:var(--muted);font-size:13px}
details.log{margin-top:16px}details.log summary{cursor:pointer;font-weight:600}
.lines{margin-top:8px;border:1px solid var(--line);border-radius:6px;background:#fafbfc;font:12.5px/1.55 var(--mono);overflow:hidden}
.line{display:flex;gap:12px;padding:3px 10px;border-bottom:1px solid #eef1f4}.line:last-child{border-bottom:0}
.line:target{background:#fff6d6}
.line .at{color:var(--muted);white-space:nowrap;flex:0 0 auto;max-width:38%;overflow:hidden;text-overflow:ellipsis;direction:rtl;text-align:left}
.line .txt{white-space:pre-wrap;overflow-wrap:anywhere}
mark{background:#ffe3a3;color:inherit;border-radius:2px;padding:0 1px;box-shadow:inset 0 -2px 0 #E69F00}
.sites td.site{position:relative;max-width:560px}.sites .bar{position:absolute;left:0;top:4px;bottom:4px;background:#dbeaf5;border-radius:3px;z-index:0}
.sites code{position:relative;z-index:1;white-space:nowrap;overflow:hidden;text-overflow:ellipsis;display:block}
tr.muted td{color:var(--muted)}tr.err td{color:var(--fail)}
footer{color:var(--muted);font-size:12px;text-align:center;margin-top:24px}
@media (max-width:640px){main{padding:14px 10px}.card{padding:14px}h1.summary{font-size:20px}}
@media print{body{background:#fff;font-size:12px}main{max-width:none;padding:0}
.card{box-shadow:none;break-inside:avoid;border-color:#bbb}.chart{break-inside:avoid}
pre.code{background:#f3f3f3;color:#000;border:1px solid #ccc}a{color:inherit}
.chart .hover{display:none}.line:target{background:none}}
"#;

const JS: &str = r#"
(function(){
addEventListener('beforeprint',function(){document.querySelectorAll('details').forEach(function(d){d.open=true})});
var NS=null;
document.querySelectorAll('svg.series[data-plot]').forEach(function(svg){
  NS=svg.namespaceURI;var data;try{data=JSON.parse(svg.getAttribute('data-plot'))}catch(e){return}
  var g=svg.querySelector('.hover'),hair=g.querySelector('.hair'),tip=g.querySelector('.tip');
  function el(n,a){var e=document.createElementNS(NS,n);for(var k in a)e.setAttribute(k,a[k]);return e}
  svg.addEventListener('mousemove',function(ev){
    var p=svg.createSVGPoint();p.x=ev.clientX;p.y=ev.clientY;var m=svg.getScreenCTM();if(!m)return;p=p.matrixTransform(m.inverse());
    while(tip.firstChild)tip.removeChild(tip.firstChild);
    var rows=[],x=p.x;
    data.forEach(function(s){var best=null;s.pts.forEach(function(q){if(!best||Math.abs(q[0]-x)<Math.abs(best[0]-x))best=q});
      if(best){rows.push([s,best]);tip.appendChild(el('circle',{cx:best[0],cy:best[1],r:4,fill:s.color,stroke:'#fff','stroke-width':1.5}))}});
    if(!rows.length)return;
    var hx=rows[0][1][0];hair.setAttribute('x1',hx);hair.setAttribute('x2',hx);
    var w=0;rows.forEach(function(r){w=Math.max(w,(r[0].name+': '+r[1][2]).length*6.6)});
    var tx=hx+12;if(tx+w+16>870)tx=hx-w-28;
    tip.insertBefore(el('rect',{x:tx,y:24,width:w+16,height:rows.length*17+10,rx:4}),tip.firstChild);
    rows.forEach(function(r,i){var t=el('text',{x:tx+8,y:40+i*17});t.textContent=r[0].name+': '+r[1][2];tip.appendChild(t)});
    g.setAttribute('visibility','visible');
  });
  svg.addEventListener('mouseleave',function(){g.setAttribute('visibility','hidden')});
});
document.documentElement.setAttribute('data-ready','1');
})();
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimation_keeps_peaks() {
        let pts: Vec<(f64, f64)> = (0..100_000)
            .map(|i| (i as f64, if i == 54_321 { 1e12 } else { (i % 7) as f64 }))
            .collect();
        let kept = decimate(&pts, 800);
        assert!(kept.len() <= 800 * 4 + 4);
        assert!(kept.iter().any(|p| p.1 == 1e12));
        assert_eq!(kept.first(), pts.first());
        assert_eq!(kept.last(), pts.last());
    }

    #[test]
    fn ticks_read_well() {
        assert_eq!(fmt_gib_tick(20.0 * GIB), "20 GiB");
        assert_eq!(fmt_gib_tick(0.5 * GIB), "0.5 GiB");
        assert_eq!(fmt_gib_tick(1.25 * GIB), "1.25 GiB");
        assert_eq!(fmt_t(600.0, 300.0), "10 min");
        assert_eq!(fmt_clock(3725.0), "+1:02:05");
        assert_eq!(nice_row(3 << 20), 4 << 20);
    }
}
