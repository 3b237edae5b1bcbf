//! The human report: what ran out, why, what to change, with the log lines that prove it.
//!
//! The evidence lines are rendered by miette's graphical handler, so the numbers the verdict
//! rests on are underlined and labelled in the line the user pasted. Long lines (a PyTorch
//! OOM message is ~500 characters) are cropped around the labels.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use miette::{
    Diagnostic, GraphicalReportHandler, GraphicalTheme, LabeledSpan, MietteError,
    MietteSpanContents, SourceCode, SourceSpan, SpanContents,
};

use crate::diagnosis::report::{Diagnosis, EvidenceItem, IncidentReport};
use crate::facts::evidence::{Facts, Provenance};

/// Terminal styling, off when output is not a terminal.
#[derive(Clone, Copy, Debug)]
pub struct Style {
    pub color: bool,
    pub width: usize,
}

impl Style {
    fn paint(&self, style: anstyle::Style, s: &str) -> String {
        if self.color {
            format!("{}{s}{}", style.render(), style.render_reset())
        } else {
            s.to_string()
        }
    }
    fn fg(color: anstyle::AnsiColor) -> anstyle::Style {
        anstyle::Style::new().fg_color(Some(color.into()))
    }
    fn bold(&self, s: &str) -> String {
        self.paint(anstyle::Style::new().bold(), s)
    }
    fn dim(&self, s: &str) -> String {
        self.paint(anstyle::Style::new().dimmed(), s)
    }
    fn red(&self, s: &str) -> String {
        self.paint(Self::fg(anstyle::AnsiColor::Red).bold(), s)
    }
    fn green(&self, s: &str) -> String {
        self.paint(Self::fg(anstyle::AnsiColor::Green), s)
    }
    fn yellow(&self, s: &str) -> String {
        self.paint(Self::fg(anstyle::AnsiColor::Yellow), s)
    }
    fn cyan(&self, s: &str) -> String {
        self.paint(Self::fg(anstyle::AnsiColor::Cyan), s)
    }
}

/// A cropped excerpt of one log line that reports its real line number to miette.
#[derive(Debug)]
struct Excerpt {
    name: String,
    /// 0-based line number of the excerpt's line.
    line: usize,
    /// Columns of the real line that the crop removed (minus the `…` marker).
    column_shift: isize,
    text: String,
}

impl SourceCode for Excerpt {
    fn read_span<'a>(
        &'a self,
        span: &SourceSpan,
        before: usize,
        after: usize,
    ) -> Result<Box<dyn SpanContents<'a> + 'a>, MietteError> {
        let inner = self.text.read_span(span, before, after)?;
        Ok(Box::new(MietteSpanContents::new_named(
            self.name.clone(),
            inner.data(),
            *inner.span(),
            inner.line() + self.line,
            (inner.column() as isize + self.column_shift).max(0) as usize,
            inner.line_count(),
        )))
    }
}

#[derive(Debug)]
struct Snippet {
    src: Excerpt,
    labels: Vec<LabeledSpan>,
}

impl std::fmt::Display for Snippet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("")
    }
}
impl std::error::Error for Snippet {}
impl Diagnostic for Snippet {
    fn source_code(&self) -> Option<&dyn SourceCode> {
        Some(&self.src)
    }
    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        Some(Box::new(self.labels.clone().into_iter()))
    }
    fn severity(&self) -> Option<miette::Severity> {
        Some(miette::Severity::Advice)
    }
}

/// A label on an excerpt: byte range and text.
type Label = (usize, usize, String);

/// Splits the labels of one line into windows of at most `max` bytes and crops the line to
/// each window. Returns (excerpt, labels shifted into it) per window.
fn crop(text: &str, labels: &[Label], max: usize) -> Vec<(String, Vec<Label>, isize)> {
    // How far right a label reaches: miette writes its text after a `╰── ` from the middle
    // of the underline, so the window must hold that too.
    let reach = |l: &Label| l.1.max((l.0 + l.1) / 2 + 5 + l.2.chars().count());
    if text.len() <= max && labels.iter().all(|l| reach(l) <= max) {
        return vec![(text.to_string(), labels.to_vec(), 0)];
    }
    let mut sorted = labels.to_vec();
    sorted.sort_by_key(|l| l.0);
    // Greedy clusters of labels that fit one window together.
    let mut clusters: Vec<Vec<Label>> = Vec::new();
    for l in sorted {
        match clusters.last_mut() {
            Some(c) if reach(&l).saturating_sub(c[0].0) <= max.saturating_sub(8) => c.push(l),
            _ => clusters.push(vec![l]),
        }
    }
    if clusters.is_empty() {
        clusters.push(Vec::new());
    }
    clusters
        .into_iter()
        .map(|c| {
            let lo = c.first().map(|l| l.0).unwrap_or(0);
            let hi = c.iter().map(reach).max().unwrap_or(0).max(lo);
            let spare = max.saturating_sub(hi - lo);
            let mut start = lo.saturating_sub(spare / 4).min(text.len());
            while start > 0 && !text.is_char_boundary(start) {
                start -= 1;
            }
            // Prefer to start at a word boundary: a little to the left when the window still
            // holds the labels, else a little to the right, before the first label.
            let left = text[..start]
                .rfind(' ')
                .filter(|sp| start - sp < 12 && hi <= sp + 1 + max);
            let right = || {
                text.get(start..lo.min(text.len()))
                    .and_then(|s| s.find(' '))
                    .map(|k| start + k)
                    .filter(|sp| sp - start < 12)
            };
            if let Some(sp) = left.or_else(right) {
                start = sp + 1;
            }
            while start > 0 && !text.is_char_boundary(start) {
                start -= 1;
            }
            let real_hi = c.iter().map(|l| l.1).max().unwrap_or(0).max(lo);
            let mut end = (start + max).min(text.len()).max(real_hi.min(text.len()));
            while end < text.len() && !text.is_char_boundary(end) {
                end += 1;
            }
            let (prefix, suffix) = (
                if start > 0 { "…" } else { "" },
                if end < text.len() { "…" } else { "" },
            );
            let out = format!("{prefix}{}{suffix}", &text[start..end]);
            let shift = prefix.len();
            let kept = c
                .into_iter()
                .filter(|l| l.0 >= start && l.1 <= end)
                .map(|l| (l.0 - start + shift, l.1 - start + shift, l.2))
                .collect();
            (out, kept, start as isize - 1)
        })
        .collect()
}

/// Renders the evidence lines of an incident: one snippet per source line, labelled.
fn snippets(report: &IncidentReport, style: &Style, series_inputs: &[&str]) -> String {
    // Group the facts behind the evidence by (input, line), keeping spans.
    let mut lines: BTreeMap<(String, u64), (String, Vec<Label>)> = BTreeMap::new();
    let mut order: Vec<(String, u64)> = Vec::new();
    let max = style.width.saturating_sub(16).max(50);
    let mut add = |p: &Provenance, label: Option<String>| {
        let (Some(line), Some(text)) = (p.line, p.text.as_ref()) else {
            return;
        };
        let key = (p.input.to_string(), line);
        let entry = lines.entry(key.clone()).or_insert_with(|| {
            order.push(key.clone());
            (text.to_string(), Vec::new())
        });
        // A series row's cell carries a number; a yes/no fact read from the row (the device
        // filled) would take the place of the number's label.
        let flag = |label: &str| {
            series_inputs.contains(&&*p.input)
                && (label.ends_with(": true") || label.ends_with(": false"))
        };
        match (p.span, label) {
            (Some(span), Some(label))
                if span.1 <= entry.0.len()
                    && !entry.1.iter().any(|l| l.0 == span.0)
                    && !flag(&label) =>
            {
                entry.1.push((span.0, span.1, label));
            }
            // A series sample is one row of numbers: label the row (or, for a long
            // Prometheus line, its value and timestamp at the end) with the first fact read
            // from it.
            (None, Some(label))
                if entry.1.is_empty() && series_inputs.contains(&&*p.input) && !flag(&label) =>
            {
                let len = entry.0.len();
                let mut from = if len <= max {
                    0
                } else {
                    len.saturating_sub(32)
                };
                while from < len && !entry.0.is_char_boundary(from) {
                    from += 1;
                }
                // Start at a cell, not inside one (`…A10G, 23006 MiB`, not `…006 MiB`).
                if from > 0 {
                    if let Some(k) = entry.0[from..].find(' ') {
                        from += k + 1;
                    }
                }
                if from < len {
                    entry.1.push((from, len, label));
                }
            }
            _ => {}
        }
    };
    add(
        &Provenance {
            span: None,
            ..first_source(report)
        },
        None,
    );
    for ev in &report.evidence {
        for fact in &ev.facts {
            // The first source is enough: other ranks' copies repeat the same line.
            if let Some(s) = report.facts.get(fact).and_then(|f| f.sources.first()) {
                add(s, Some(label_for(&report.facts, fact)));
            }
        }
    }
    let theme = if style.color {
        GraphicalTheme::unicode()
    } else {
        GraphicalTheme::unicode_nocolor()
    };
    let handler = GraphicalReportHandler::new_themed(theme)
        .with_width(style.width.max(60))
        .with_context_lines(1);
    let mut out = String::new();
    for key in order.iter().take(4) {
        let Some((text, labels)) = lines.get(key) else {
            continue;
        };
        for (excerpt, labels, column_shift) in crop(text, labels, max) {
            let mut spans: Vec<LabeledSpan> = labels
                .iter()
                .map(|(s, e, l)| LabeledSpan::new(Some(l.clone()), *s, e - s))
                .collect();
            if spans.is_empty() {
                spans.push(LabeledSpan::new(None, 0, excerpt.len()));
            }
            let snippet = Snippet {
                src: Excerpt {
                    name: key.0.clone(),
                    line: key.1.saturating_sub(1) as usize,
                    column_shift,
                    text: excerpt,
                },
                labels: spans,
            };
            let mut s = String::new();
            if handler.render_report(&mut s, &snippet).is_ok() {
                // Drop miette's empty message line; keep the snippet.
                for l in s
                    .lines()
                    .filter(|l| !l.trim().is_empty() && l.trim() != "☞")
                {
                    let _ = writeln!(out, "  {l}");
                }
            }
        }
    }
    out
}

/// A fix's action laid out in `room` columns. Code and commands stay whole so they can be
/// copied; a trailing `# comment` that does not fit moves to lines of its own, and an
/// action written as a sentence is word-wrapped.
fn action_lines(action: &str, room: usize) -> Vec<String> {
    use super::text::{cols, wrap};
    let mut out = Vec::new();
    for line in action.lines() {
        if cols(line) <= room {
            out.push(line.to_string());
            continue;
        }
        if let Some(at) = line.find("  # ") {
            let (code, comment) = (line[..at].trim_end(), line[at..].trim_start());
            out.push(code.to_string());
            let comment = comment.trim_start_matches('#').trim_start();
            out.extend(
                wrap(comment, room, 2, 2)
                    .into_iter()
                    .map(|l| format!("# {l}")),
            );
            continue;
        }
        let mut words = line.split(' ');
        let wordy = |w: Option<&str>| {
            w.is_some_and(|w| {
                !w.is_empty()
                    && w.chars()
                        .all(|c| c.is_alphabetic() || c == '\'' || c == '-')
            })
        };
        if wordy(words.next()) && wordy(words.next()) {
            out.extend(wrap(line, room, 0, 0));
        } else {
            out.push(line.to_string());
        }
    }
    out
}

fn first_source(report: &IncidentReport) -> Provenance {
    for name in ["failure.kind", "oom.requested_bytes"] {
        if let Some(f) = report.facts.get(name) {
            if let Some(s) = f.sources.first() {
                return s.clone();
            }
        }
    }
    Provenance {
        input: report.location.input.as_str().into(),
        line: report.location.line,
        text: None,
        span: None,
        locator: None,
    }
}

fn label_for(facts: &Facts, name: &str) -> String {
    let short = name
        .rsplit('.')
        .next()
        .unwrap_or(name)
        .trim_end_matches("_bytes")
        .replace('_', " ");
    match facts.display(name) {
        Some(v) => format!("{short}: {v}"),
        None => short,
    }
}

/// Writes `lead` (already styled, `lead_cols` columns wide) followed by `text` word-wrapped
/// to the style's width; continuation lines start `indent` columns in. `paint` styles the
/// text.
fn para(
    out: &mut String,
    style: &Style,
    (lead, lead_cols): (&str, usize),
    indent: usize,
    text: &str,
    paint: &dyn Fn(&str) -> String,
) {
    for (k, l) in super::text::wrap(text, style.width, lead_cols, indent)
        .iter()
        .enumerate()
    {
        if k == 0 {
            let _ = writeln!(out, "{lead}{}", paint(l));
        } else {
            let _ = writeln!(out, "{:indent$}{}", "", paint(l));
        }
    }
}

/// A plain indentation as a `para` lead.
fn indent(n: usize) -> (&'static str, usize) {
    const SPACES: &str = "                ";
    (&SPACES[..n.min(SPACES.len())], n.min(SPACES.len()))
}

fn evidence_block(items: &[EvidenceItem], style: &Style, out: &mut String) {
    for e in items {
        let w = if e.weight >= 0.0 {
            style.green(&format!("+{:<4}", fmt_weight(e.weight)))
        } else {
            style.yellow(&format!("{:<5}", fmt_weight(e.weight)))
        };
        let place = match e.line {
            Some(l) => format!("{}:{l}", e.input),
            None => e
                .sources
                .first()
                .map(|s| s.short())
                .unwrap_or_else(|| e.input.clone()),
        };
        // The place is the last word (after two spaces: a no-break space holds the second
        // while wrapping), dimmed where it ends the last line.
        let tagged = format!("\u{a0}{place}");
        let lines = super::text::wrap(&format!("{} {tagged}", e.text), style.width, 10, 10);
        let last = lines.len().saturating_sub(1);
        for (k, l) in lines.iter().enumerate() {
            let l = match l.strip_suffix(tagged.as_str()) {
                Some(head) if k == last && head.is_empty() => style.dim(&place),
                Some(head) if k == last => format!("{}  {}", head.trim_end(), style.dim(&place)),
                _ => l.clone(),
            };
            if k == 0 {
                let _ = writeln!(out, "    {w} {l}");
            } else {
                let _ = writeln!(out, "{:10}{l}", "");
            }
        }
    }
}

fn fmt_weight(w: f64) -> String {
    if w.fract() == 0.0 {
        format!("{}", w as i64)
    } else {
        format!("{w:.1}")
    }
}

/// Renders a whole diagnosis.
pub fn render(d: &Diagnosis, style: &Style, explain: bool) -> String {
    // Input text reaches a terminal here: print from a copy without control characters, so
    // the colour codes below are the only escape sequences in the output.
    let d = &super::terminal::sanitized(d);
    let mut out = String::new();
    let inputs: Vec<String> = d
        .inputs
        .iter()
        .map(|i| match i.lines {
            Some(l) => format!("{} ({})", i.name, super::text::count(l as usize, "line")),
            None => format!("{} ({})", i.name, i.kind),
        })
        .collect();
    let inputs = if inputs.len() > 4 {
        format!("{} inputs", inputs.len())
    } else {
        inputs.join(", ")
    };
    if d.incidents.is_empty() && !d.errors.is_empty() {
        // An input that could not be read never yields a success line: what it held is
        // unknown.
        let _ = writeln!(
            out,
            "{} {} could not be read (see above); no out-of-memory incident in {}",
            style.yellow("!"),
            super::text::count(d.errors.len(), "input"),
            if inputs.is_empty() {
                "the rest".into()
            } else {
                inputs
            }
        );
        snapshot_summaries(d, style, &mut out);
        series_summaries(d, &[], style, &mut out);
        skipped(d, style, &mut out);
        warnings(d, style, &mut out);
        return out;
    }
    if d.incidents.is_empty() {
        let text = format!(
            "no out-of-memory incident found in {}",
            if inputs.is_empty() {
                "the input".into()
            } else {
                inputs
            }
        );
        let lead = format!("{} ", style.green("✓"));
        para(&mut out, style, (&lead, 2), 2, &text, &|l| l.to_string());
        snapshot_summaries(d, style, &mut out);
        series_summaries(d, &[], style, &mut out);
        skipped(d, style, &mut out);
        warnings(d, style, &mut out);
        return out;
    }
    let series_inputs: Vec<&str> = d
        .inputs
        .iter()
        .filter(|i| i.kind == "series")
        .map(|i| i.name.as_str())
        .collect();
    let mut charted: Vec<&crate::render::plot::SeriesPlot> = Vec::new();
    let distinct = d.distinct_incidents().count();
    let head = format!(
        "{}{} in {inputs}",
        super::text::count(d.incidents.len(), "incident"),
        if distinct < d.incidents.len() {
            format!(" ({distinct} distinct)")
        } else {
            String::new()
        }
    );
    let lead = format!("{} ", style.bold("oomdoctor:"));
    para(&mut out, style, (&lead, 11), 2, &head, &|l| l.to_string());
    for r in d.distinct_incidents() {
        let _ = writeln!(out);
        // An undetermined incident names both contenders in its headline.
        let contender = r.alternatives.first().filter(|_| !r.determined);
        let cause = match contender {
            Some(a) => format!("✖ {} or {}", r.cause, a.cause),
            None => format!("✖ {}", r.cause),
        };
        let confidence = match contender {
            Some(a) => format!("(undetermined: {:.2} vs {:.2})", r.confidence, a.confidence),
            None => format!("(confidence {:.2})", r.confidence),
        };
        let lead = format!("{} {} ", style.red(&cause), style.bold(&confidence));
        let lead_cols = super::text::cols(&cause) + super::text::cols(&confidence) + 2;
        if lead_cols + 30 > style.width {
            // Two contenders make a long lead: the summary goes under it.
            let _ = writeln!(out, "{}", lead.trim_end());
            para(&mut out, style, indent(2), 2, &r.summary, &|l| {
                l.to_string()
            });
        } else {
            para(&mut out, style, (&lead, lead_cols), 2, &r.summary, &|l| {
                l.to_string()
            });
        }
        let dim = |l: &str| style.dim(l);
        let headline = format!("incident {} · {}", r.id, super::text::headline(r));
        para(&mut out, style, indent(2), 4, &headline, &dim);
        let first_seen = format!(
            "first seen at {}{} · fingerprint {}",
            r.location.input,
            r.location.line.map(|l| format!(":{l}")).unwrap_or_default(),
            r.fingerprint
        );
        para(&mut out, style, indent(2), 4, &first_seen, &dim);
        let repeats = d.repeats_of(r);
        if !repeats.is_empty() {
            let also = super::text::also_seen(r, &repeats);
            para(&mut out, style, indent(2), 4, &also, &dim);
        }
        out.push_str(&snippets(r, style, &series_inputs));
        let why = format!("Why {}: {}", r.cause, r.title.to_lowercase());
        para(&mut out, style, indent(2), 4, &why, &|l| style.bold(l));
        evidence_block(&r.evidence, style, &mut out);
        if let Some(a) = contender {
            // Both contenders with their evidence, and what would separate them.
            let why = format!("Why {} instead: {}", a.cause, a.summary);
            para(&mut out, style, indent(2), 4, &why, &|l| style.bold(l));
            evidence_block(&a.evidence, style, &mut out);
        }
        if let Some(settle) = &r.settle {
            let lead = format!("  {} ", style.bold("To tell them apart, add:"));
            let cols = 2 + super::text::cols("To tell them apart, add:") + 1;
            para(&mut out, style, (&lead, cols), 4, settle, &|l| {
                l.to_string()
            });
        }
        if let Some(p) = incident_series(r, style, d, &mut out) {
            charted.push(p);
        }
        if !r.fixes.is_empty() {
            let _ = writeln!(
                out,
                "  {}",
                style.bold("What to change, most likely to help first")
            );
            for f in &r.fixes {
                let lead = format!("    {}. ", f.rank);
                let cols = lead.len();
                para(&mut out, style, (&lead, cols), 7, &f.title, &|l| {
                    l.to_string()
                });
                for line in action_lines(&f.action, style.width.saturating_sub(7)) {
                    let _ = writeln!(out, "       {}", style.cyan(&line));
                }
                if let Some(why) = &f.why {
                    para(&mut out, style, indent(7), 7, why, &|l| style.dim(l));
                }
                if explain {
                    for v in &f.values {
                        let from: Vec<String> = v
                            .from
                            .iter()
                            .map(|ff| {
                                let at = ff.sources.first().map(|s| s.short()).unwrap_or_default();
                                format!("{} = {} ({at})", ff.fact, ff.value)
                            })
                            .collect();
                        let _ = writeln!(
                            out,
                            "       {}",
                            style.dim(&format!(
                                "{} = {} from {}",
                                v.expr,
                                v.display,
                                from.join(", ")
                            ))
                        );
                    }
                }
            }
        }
        if !r.alternatives.is_empty() {
            let _ = writeln!(out, "  {}", style.bold("Also considered"));
            for a in &r.alternatives {
                let lead = format!("    {} {:.2}  ", a.cause, a.confidence);
                let cols = super::text::cols(&lead);
                para(&mut out, style, (&lead, cols), 6, &a.summary, &|l| {
                    style.dim(l)
                });
                if explain {
                    evidence_block(&a.evidence, style, &mut out);
                }
            }
        }
        if explain {
            let _ = writeln!(out, "  {}", style.bold("Facts"));
            for (name, fact) in r.facts.iter() {
                let where_ = fact.sources.first().map(|s| s.short()).unwrap_or_default();
                let _ = writeln!(
                    out,
                    "    {name} = {}  {}",
                    r.facts.display(name).unwrap_or_default(),
                    style.dim(&where_)
                );
            }
        }
    }
    if d.inputs.len() > 1 {
        summary(d, style, &mut out);
    }
    skipped(d, style, &mut out);
    warnings(d, style, &mut out);
    snapshot_summaries(d, style, &mut out);
    series_summaries(d, &charted, style, &mut out);
    if !d.errors.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{} {} input(s) could not be read (see above)",
            style.yellow("!"),
            d.errors.len()
        );
    }
    out
}

/// `--quiet`: one line per distinct incident (cause, confidence, where it was first seen,
/// how often, the sentence with the numbers); nothing when no incident was found.
pub fn render_quiet(d: &Diagnosis, style: &Style) -> String {
    let mut out = String::new();
    for r in d.distinct_incidents() {
        let n = 1 + d.repeats_of(r).len();
        let _ = writeln!(
            out,
            "{} {} {}{}: {}",
            style.red(&format!("✖ {}", r.cause)),
            style.bold(&format!("{:.2}", r.confidence)),
            super::text::location(&r.location),
            if n > 1 {
                format!(" (seen in {n} places)")
            } else {
                String::new()
            },
            r.summary
        );
    }
    out
}

/// Counts across inputs: per cause, per file, and repeats of one problem.
fn summary(d: &Diagnosis, style: &Style, out: &mut String) {
    let s = d.summary();
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{} {} ({} distinct) in {} of {}: {}",
        style.bold("Summary:"),
        super::text::count(s.incidents, "incident"),
        s.distinct,
        s.by_input.iter().filter(|i| i.incidents > 0).count(),
        super::text::count(s.by_input.len(), "input"),
        super::text::by_cause(&s)
    );
    let width = s.by_input.iter().map(|i| i.input.len()).max().unwrap_or(0);
    for i in &s.by_input {
        let causes = i
            .causes
            .iter()
            .map(|c| c.id())
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            out,
            "  {:<width$}  {:>3}  {}",
            i.input,
            i.incidents,
            if causes.is_empty() {
                style.dim("—")
            } else {
                causes
            }
        );
    }
    for g in &s.repeated {
        let text = format!(
            "incidents {} are one problem ({}, fingerprint {}), shown once",
            g.incidents
                .iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            g.cause,
            g.fingerprint
        );
        para(out, style, indent(2), 4, &text, &|l| style.dim(l));
    }
}

/// What the readers had to work around (a gzip log cut before its end).
fn warnings(d: &Diagnosis, style: &Style, out: &mut String) {
    for i in &d.inputs {
        for w in &i.warnings {
            let _ = writeln!(out, "{} {}: {w}", style.yellow("!"), i.name);
        }
    }
}

fn skipped(d: &Diagnosis, style: &Style, out: &mut String) {
    if d.skipped.is_empty() {
        return;
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{} skipped {}:",
        style.dim("·"),
        super::text::count(d.skipped.len(), "file")
    );
    for s in &d.skipped {
        let text = format!("{} ({}): {}", s.input, s.kind, s.reason);
        para(out, style, indent(2), 4, &text, &|l| style.dim(l));
    }
}

/// The plot of the device an incident's series facts describe.
fn plot_for<'d>(
    r: &IncidentReport,
    d: &'d Diagnosis,
) -> Option<&'d crate::render::plot::SeriesPlot> {
    let fact = r.facts.get("series.device")?;
    let device = r.facts.num("series.device")? as u32;
    let input = fact.sources.first().map(|s| s.input.to_string());
    d.series
        .iter()
        .find(|p| p.device == Some(device) && Some(&p.input) == input.as_ref())
        .or_else(|| d.series.iter().find(|p| p.device == Some(device)))
}

/// Seconds since a plot's start of a time (RFC 3339, or the same without a zone).
fn plot_offset(p: &crate::render::plot::SeriesPlot, time: &str) -> Option<f64> {
    let (start, _) = crate::ingest::series::read_wall(p.start.as_deref()?)?;
    let (t, _) = crate::ingest::series::read_wall(time)?;
    Some((t - start).num_milliseconds() as f64 / 1000.0)
}

/// A time as the charts print it (`2025-09-08 03:28:47.217`). A time the input wrote
/// without a zone (most logs, nvidia-smi captures) is shown without one; a zoned one keeps
/// its zone, as UTC (`2025-09-08 03:28:47 UTC`).
fn show_time(t: &str) -> String {
    match crate::ingest::series::read_wall(t) {
        Some((dt, naive)) => {
            let mut s = if dt.timestamp_subsec_millis() == 0 {
                dt.format("%Y-%m-%d %H:%M:%S").to_string()
            } else {
                dt.format("%Y-%m-%d %H:%M:%S%.3f").to_string()
            };
            if !naive {
                s.push_str(" UTC");
            }
            s
        }
        None => t.to_string(),
    }
}

/// How the series was lined up with the incident, in one sentence naming the inputs.
fn alignment(r: &IncidentReport, p: &crate::render::plot::SeriesPlot) -> String {
    let f = &r.facts;
    let gpu = p.device.map_or(String::new(), |d| format!("GPU {d} of "));
    let series = format!("{gpu}{}", p.input);
    let from_log = r.location.line.is_some() && r.location.input != p.input;
    let at = |name: &str| {
        f.get(name)
            .and_then(|x| x.sources.first())
            .map(|s| s.short())
            .unwrap_or_default()
    };
    if !from_log {
        return match f.str("series.failure_time") {
            Some(t) => format!(
                "seen only in {series}: the device filled, then its memory was released (last high sample {})",
                show_time(t)
            ),
            None => format!("seen only in {series}"),
        };
    }
    // A failure time given by the log carries the log's line as its source.
    let given = f
        .get("series.failure_time")
        .and_then(|x| x.sources.first())
        .is_some_and(|s| *s.input == *r.location.input);
    match (f.bool("series.time_aligned"), f.str("series.failure_time")) {
        _ if !given => format!(
            "lined up by device only ({} has no timestamp near the failure): {series} is read up to its own failure or its end",
            r.location.input
        ),
        (Some(true), Some(t)) => {
            let gap = f
                .display("series.failure_gap_seconds")
                .map_or(String::new(), |g| format!(", {g} after its last sample"));
            format!(
                "lined up by time: the failure at {} ({}) falls in {series}{gap}",
                show_time(t),
                at("series.failure_time")
            )
        }
        (Some(false), Some(_)) if f.contains("series.failure_gap_seconds") => format!(
            "the failure ({}) is outside {series}: it ends {} before it, so the series says nothing of the moment",
            at("series.failure_time"),
            f.display("series.failure_gap_seconds").unwrap_or_default()
        ),
        _ => format!(
            "the failure ({}) is outside {series}, so the series says nothing of the moment",
            at("series.failure_time")
        ),
    }
}

/// Under an incident with series evidence: which input showed what, and the device's memory
/// over time with the failure marked.
fn incident_series<'d>(
    r: &IncidentReport,
    style: &Style,
    d: &'d Diagnosis,
    out: &mut String,
) -> Option<&'d crate::render::plot::SeriesPlot> {
    let p = plot_for(r, d)?;
    let mark = r
        .facts
        .str("series.failure_time")
        .and_then(|t| plot_offset(p, t))
        .or_else(|| {
            p.marks
                .iter()
                .find(|m| m.kind == crate::render::plot::MarkKind::Oom)
                .map(|m| m.t)
        });
    let _ = writeln!(
        out,
        "  {} {}",
        style.bold("Memory over time"),
        style.dim(&format!("({}, {})", p.label, p.input))
    );
    para(out, style, indent(4), 6, &alignment(r, p), &|l| {
        style.dim(l)
    });
    let width = style.width.saturating_sub(24).clamp(40, 72);
    for line in crate::ingest::series::plot_chart(p, width, 5, mark, "failure").lines() {
        let _ = writeln!(out, "    {}", style.cyan(line));
    }
    for m in p
        .marks
        .iter()
        .filter(|m| m.kind == crate::render::plot::MarkKind::Event)
    {
        let _ = writeln!(
            out,
            "    {}",
            style.dim(&format!(
                "· {} (from {})",
                m.label,
                crate::ingest::series::plot_time(p, m.t)
            ))
        );
    }
    Some(p)
}

/// Devices whose series no incident drew: one line of numbers and a sparkline each.
fn series_summaries(
    d: &Diagnosis,
    charted: &[&crate::render::plot::SeriesPlot],
    style: &Style,
    out: &mut String,
) {
    use crate::facts::units::format_bytes;
    let rest: Vec<&crate::render::plot::SeriesPlot> = d
        .series
        .iter()
        .filter(|p| !charted.iter().any(|c| std::ptr::eq(*c, *p)))
        .collect();
    // Series inputs with nothing to draw (per-process or engine metrics alone), said only
    // when no device was drawn at all: beside a device series they described its devices.
    let engine_only: Vec<&str> = d
        .inputs
        .iter()
        .filter(|i| i.kind == "series" && d.series.is_empty())
        .map(|i| i.name.as_str())
        .collect();
    if rest.is_empty() && engine_only.is_empty() {
        return;
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "{}", style.bold("Memory series"));
    for p in rest {
        let lo = p.points.iter().map(|x| x.1).min().unwrap_or(0);
        let hi = p.points.iter().map(|x| x.1).max().unwrap_or(0);
        let (t0, t1) = (
            p.points.first().map_or(0.0, |x| x.0),
            p.points.last().map_or(0.0, |x| x.0),
        );
        let total = p
            .total_bytes
            .map_or(String::new(), |t| format!(" of {}", format_bytes(t)));
        let range = format!(
            "{} ({}): {} – {}{total}, {} .. {}",
            p.label,
            p.input,
            format_bytes(lo),
            format_bytes(hi),
            crate::ingest::series::plot_time(p, t0),
            crate::ingest::series::plot_time(p, t1)
        );
        para(out, style, indent(2), 4, &range, &|l| style.dim(l));
        let oom = p
            .marks
            .iter()
            .find(|m| m.kind == crate::render::plot::MarkKind::Oom)
            .map(|m| m.t);
        let width = style.width.saturating_sub(12).clamp(40, 72);
        let scale = crate::ingest::series::plot_sparkline_scale(p);
        for line in crate::ingest::series::plot_sparkline(p, width, oom, Some(scale)).lines() {
            let _ = writeln!(out, "    {}", style.cyan(line));
        }
        let _ = writeln!(
            out,
            "    {}",
            style.dim(&format!(
                "▁ {} · █ {}",
                format_bytes(scale.0),
                format_bytes(scale.1)
            ))
        );
        for m in &p.marks {
            let _ = writeln!(
                out,
                "    {}",
                style.dim(&format!(
                    "· {} ({})",
                    m.label,
                    crate::ingest::series::plot_time(p, m.t)
                ))
            );
        }
    }
    for input in engine_only {
        let _ = writeln!(
            out,
            "  {}",
            style.dim(&format!(
                "{input}: per-process or engine metrics only, no device memory series to draw"
            ))
        );
    }
}

/// What each snapshot showed: the state at the OOM (or peak), what the memory was for, where
/// it was allocated, and any growth across steps. One block per input, a line per device.
fn snapshot_summaries(d: &Diagnosis, style: &Style, out: &mut String) {
    use crate::facts::units::format_bytes;
    let mut inputs: Vec<&str> = Vec::new();
    for p in &d.snapshots {
        if !inputs.contains(&p.input.as_str()) {
            inputs.push(&p.input);
        }
    }
    for input in inputs {
        let plots: Vec<&crate::render::plot::SnapshotPlot> =
            d.snapshots.iter().filter(|p| p.input == input).collect();
        let generation = plots.first().map(|p| p.generation.as_str()).unwrap_or("");
        let oom = plots
            .iter()
            .find(|p| p.moment == "oom")
            .and_then(|p| p.device)
            .map(|dev| format!("OOM on GPU {dev}"))
            .unwrap_or_else(|| "no OOM recorded".to_string());
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{} {input} · PyTorch {generation} · {oom}",
            style.bold("Snapshot")
        );
        for dev in plots {
            let moment = match dev.moment.as_str() {
                "oom" if dev.replayed => "at the OOM (trace replayed back to it)".to_string(),
                "oom" => "at the OOM".to_string(),
                "peak" => "at the peak".to_string(),
                m => format!("at the {m} state"),
            };
            let _ = writeln!(
                out,
                "  GPU {}: {} live of {} reserved {moment}; peak {} live",
                dev.device
                    .map(|d| d.to_string())
                    .unwrap_or_else(|| "?".into()),
                format_bytes(dev.live_bytes),
                format_bytes(dev.reserved_bytes()),
                format_bytes(dev.peak_live_bytes)
            );
            let mut free = format!(
                "    largest free block {}, free in partly used segments {}; at dump time {} sat in fully free segments (cache empty_cache() releases)",
                format_bytes(dev.largest_free_block.unwrap_or(0)),
                format_bytes(dev.fragmented_free_bytes),
                format_bytes(dev.releasable_cache_bytes)
            );
            if let Some(r) = dev.request {
                free.push_str(&format!("; the failed request was {}", format_bytes(r)));
            }
            para(out, style, indent(4), 6, free.trim_start(), &|l| {
                style.dim(l)
            });
            let total: u64 = dev.categories.iter().map(|c| c.bytes).sum();
            for c in &dev.categories {
                let share = if total > 0 {
                    c.bytes as f64 / total as f64
                } else {
                    0.0
                };
                let bar = "█".repeat(((share * 30.0).round() as usize).max(1));
                let _ = writeln!(
                    out,
                    "    {:<16} {:>12}  {}",
                    c.name,
                    format_bytes(c.bytes),
                    style.cyan(&bar)
                );
            }
            if !dev.top_sites.is_empty() {
                let _ = writeln!(out, "    top allocation sites:");
                for site in dev.top_sites.iter().take(5) {
                    let _ = writeln!(out, "      {:>12}  {}", format_bytes(site.bytes), site.site);
                }
            }
            if let Some(l) = &dev.leak {
                let _ = writeln!(
                    out,
                    "    {} live memory grows by {} per step over {} steps{}",
                    style.yellow("growth:"),
                    crate::facts::units::format_bytes_f(l.slope_bytes_per_step),
                    l.steps,
                    l.site
                        .as_ref()
                        .map(|s| format!(" at {s}"))
                        .unwrap_or_default()
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crop_keeps_labels_visible() {
        let text = format!("{}TARGET{}", "a".repeat(300), "b".repeat(300));
        let windows = crop(&text, &[(300, 306, "x".into())], 80);
        let (ex, labels, _) = &windows[0];
        assert!(ex.len() <= 80 + 6);
        assert_eq!(&ex[labels[0].0..labels[0].1], "TARGET");
        let windows = crop(&text, &[(10, 16, "a".into()), (500, 506, "b".into())], 80);
        // Found by fuzzing: a window edge inside a multi-byte character.
        let wide = format!("{}{}TARGET", "x".repeat(10), "\u{fffd}".repeat(300));
        let at = wide.find("TARGET").unwrap();
        for max in 40..60 {
            for (ex, labels, _) in crop(&wide, &[(at, at + 6, "t".into())], max) {
                assert!(
                    labels
                        .iter()
                        .all(|l| ex.is_char_boundary(l.0) && ex.is_char_boundary(l.1))
                );
            }
        }
        assert_eq!(windows.len(), 2, "far-apart labels get a window each");
    }
}
