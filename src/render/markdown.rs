//! `--format markdown`: a report to paste into an issue or a CI step summary. The verdict and
//! its confidence first, then an evidence table, the ranked fixes with their exact change in
//! a code block, the causes that lost, and the key log lines folded in a `<details>` block so
//! the issue stays short.
//!
//! Text from logs is escaped so that GitHub renders it literally: `<module>` in a traceback
//! must not vanish as an unknown HTML tag, and a `|` must not split a table cell.

use std::fmt::Write as _;

use super::Policy;
use super::text::{self, count, headline, location, place, weight};
use crate::diagnosis::report::{Diagnosis, FixReport, IncidentReport};

/// How to render.
#[derive(Clone, Debug)]
pub struct Options {
    pub policy: Policy,
    /// Top heading level (1 = `#`). Step summaries and bundles nest the report under their
    /// own heading.
    pub heading: usize,
    /// At most this many log lines in the folded block (0: all).
    pub max_lines: usize,
    /// Whether to fold the key log lines in (bundles quote them with context instead).
    pub key_lines: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self::new()
    }
}

impl Options {
    pub fn new() -> Self {
        Options {
            policy: Policy::default(),
            heading: 2,
            max_lines: 40,
            key_lines: true,
        }
    }
}

/// Escapes text for a markdown paragraph or table cell.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' | '`' | '*' | '[' | ']' | '|' => {
                out.push('\\');
                out.push(c);
            }
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '\n' | '\r' => out.push(' '),
            _ => out.push(c),
        }
    }
    out
}

/// Inline code that survives backticks in the text.
pub fn code(s: &str) -> String {
    let s = s.replace(['\n', '\r'], " ");
    let longest = longest_run(&s, '`');
    let ticks = "`".repeat(longest + 1);
    let pad = if s.starts_with('`') || s.ends_with('`') {
        " "
    } else {
        ""
    };
    // A `|` inside code still ends a table cell in GFM; escaping it is the documented way.
    format!("{ticks}{pad}{}{pad}{ticks}", s.replace('|', "\\|"))
}

/// A fenced block whose fence is longer than any backtick run inside.
pub fn fenced(lang: &str, body: &str) -> String {
    let fence = "`".repeat(longest_run(body, '`').max(2) + 1);
    let mut out = format!("{fence}{lang}\n{body}");
    if !body.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&fence);
    out.push('\n');
    out
}

fn longest_run(s: &str, c: char) -> usize {
    let (mut best, mut run) = (0, 0);
    for x in s.chars() {
        if x == c {
            run += 1;
            best = best.max(run);
        } else {
            run = 0;
        }
    }
    best
}

fn h(level: usize) -> String {
    "#".repeat(level.clamp(1, 6))
}

fn fix_lang(f: &FixReport) -> &'static str {
    match f.kind {
        crate::diagnosis::rules::FixKind::Env | crate::diagnosis::rules::FixKind::Command => "sh",
        _ => "text",
    }
}

/// Renders a whole diagnosis.
pub fn render(d: &Diagnosis, opts: &Options) -> String {
    // Markdown is read in terminals too (`oomdoctor --format markdown | less`).
    let d = &super::terminal::sanitized(d);
    let mut out = String::new();
    let top = opts.heading.max(1);
    let inputs: Vec<String> = d.inputs.iter().map(|i| code(&i.name)).collect();
    let inputs = if inputs.is_empty() {
        "the input".to_string()
    } else if inputs.len() > 4 {
        format!("{} inputs", inputs.len())
    } else {
        inputs.join(", ")
    };
    if d.incidents.is_empty() && !d.errors.is_empty() {
        // Not a success: what the unreadable inputs held is unknown.
        let _ = writeln!(
            out,
            "{} oomdoctor: {} could not be read\n\nNo out-of-memory incident in what could be read ({inputs}).",
            h(top),
            count(d.errors.len(), "input")
        );
    } else if d.incidents.is_empty() {
        let _ = writeln!(
            out,
            "{} oomdoctor: no out-of-memory incident found\n\nRead {inputs}.",
            h(top)
        );
    } else {
        let _ = writeln!(
            out,
            "{} oomdoctor: {} in {inputs}",
            h(top),
            count(d.incidents.len(), "incident")
        );
    }
    if d.inputs.len() > 1 {
        summary(d, top + 1, &mut out);
    }
    for r in d.distinct_incidents() {
        incident(d, r, opts, top + 1, &mut out);
    }
    if !d.skipped.is_empty() {
        let _ = writeln!(out, "\n{} Skipped\n", h(top + 1));
        for s in &d.skipped {
            let _ = writeln!(
                out,
                "- {} ({}): {}",
                code(&s.input),
                escape(&s.kind),
                escape(&s.reason)
            );
        }
    }
    if d.inputs.iter().any(|i| !i.warnings.is_empty()) {
        let _ = writeln!(out, "\n{} Warnings\n", h(top + 1));
        for i in &d.inputs {
            for w in &i.warnings {
                let _ = writeln!(out, "- {}: {}", code(&i.name), escape(w));
            }
        }
    }
    if !d.errors.is_empty() {
        let _ = writeln!(out, "\n{} Inputs that could not be read\n", h(top + 1));
        for e in &d.errors {
            let _ = writeln!(out, "- {}: {}", code(&e.input), escape(&e.message));
        }
    }
    let _ = writeln!(
        out,
        "\n<sub>oomdoctor {} · schema {}</sub>",
        d.tool.version, d.schema_version
    );
    out
}

fn summary(d: &Diagnosis, level: usize, out: &mut String) {
    let s = d.summary();
    let _ = writeln!(out, "\n{} Summary\n", h(level));
    if s.incidents > 0 {
        let files = s.by_input.iter().filter(|i| i.incidents > 0).count();
        let _ = writeln!(
            out,
            "{} ({} distinct) in {} of {}: {}.\n",
            count(s.incidents, "incident"),
            s.distinct,
            files,
            count(s.by_input.len(), "input"),
            escape(&text::by_cause(&s))
        );
    }
    let _ = writeln!(
        out,
        "| Input | Kind | Incidents | Causes |\n|---|---|---:|---|"
    );
    for i in &s.by_input {
        let causes = i
            .causes
            .iter()
            .map(|c| code(c.id()))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            code(&i.input),
            i.kind,
            i.incidents,
            if causes.is_empty() {
                "—".into()
            } else {
                causes
            }
        );
    }
    for g in &s.repeated {
        let _ = writeln!(
            out,
            "\nIncidents {} share fingerprint {} ({}).",
            g.incidents
                .iter()
                .map(|i| format!("#{i}"))
                .collect::<Vec<_>>()
                .join(", "),
            code(&g.fingerprint),
            code(g.cause.id())
        );
    }
}

fn incident(d: &Diagnosis, r: &IncidentReport, opts: &Options, level: usize, out: &mut String) {
    let mark = if opts.policy.fails(r) { "✖" } else { "⚠" };
    match r.alternatives.first().filter(|_| !r.determined) {
        Some(a) => {
            let _ = writeln!(
                out,
                "\n{} {mark} {} or {} — undetermined ({:.2} vs {:.2})\n",
                h(level),
                code(r.cause.id()),
                code(a.cause.id()),
                r.confidence,
                a.confidence
            );
        }
        None => {
            let _ = writeln!(
                out,
                "\n{} {mark} {} — confidence {:.2}\n",
                h(level),
                code(r.cause.id()),
                r.confidence
            );
        }
    }
    let _ = writeln!(out, "**{}**\n", escape(&r.summary));
    if let Some(settle) = &r.settle {
        let _ = writeln!(
            out,
            "The evidence does not separate the two causes. **To tell them apart, add:** {}\n",
            escape(settle)
        );
    }
    let _ = writeln!(out, "{}.\n", escape(&r.title));
    let _ = writeln!(out, "| | |\n|---|---|");
    let _ = writeln!(out, "| Incident | {} |", r.id);
    let _ = writeln!(out, "| Failure | {} |", escape(&headline(r)));
    let _ = writeln!(out, "| First seen | {} |", code(&location(&r.location)));
    let repeats = d.repeats_of(r);
    if !repeats.is_empty() {
        let _ = writeln!(
            out,
            "| Also seen | {} |",
            escape(&text::also_seen(r, &repeats))
        );
    }
    if let Some(ts) = &r.timestamp {
        let _ = writeln!(out, "| Time | {} |", escape(ts));
    }
    let _ = writeln!(out, "| Rule | {} |", code(&r.rule));
    let _ = writeln!(out, "| Fingerprint | {} |", code(&r.fingerprint));

    if !r.evidence.is_empty() {
        let _ = writeln!(out, "\n{} Evidence\n", h(level + 1));
        let _ = writeln!(out, "| Weight | Evidence | Line |\n|---:|---|---|");
        for e in &r.evidence {
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                weight(e.weight),
                escape(&e.text),
                code(&place(e))
            );
        }
    }
    if !r.fixes.is_empty() {
        let _ = writeln!(
            out,
            "\n{} What to change, most likely to help first\n",
            h(level + 1)
        );
        for f in &r.fixes {
            let _ = writeln!(out, "{}. **{}**", f.rank, escape(&f.title));
            for line in fenced(fix_lang(f), &f.action).lines() {
                let _ = writeln!(out, "   {line}");
            }
            if let Some(why) = &f.why {
                let _ = writeln!(out, "   {}", escape(why));
            }
            if f.cause != r.cause {
                let _ = writeln!(out, "   <sub>for {}</sub>", code(f.cause.id()));
            }
        }
    }
    if !r.alternatives.is_empty() {
        let _ = writeln!(out, "\n{} Also considered\n", h(level + 1));
        for a in &r.alternatives {
            let _ = writeln!(
                out,
                "- {} {:.2} — {}",
                code(a.cause.id()),
                a.confidence,
                escape(&a.summary)
            );
        }
    }
    let lines = if opts.key_lines {
        key_lines(d, r, opts.max_lines)
    } else {
        Vec::new()
    };
    if !lines.is_empty() {
        let body: String = lines
            .iter()
            .map(|(at, t)| format!("{at}  {}\n", text::clip(t, 600)))
            .collect();
        let _ = writeln!(
            out,
            "\n<details><summary>Key log lines ({})</summary>\n\n{}\n</details>",
            lines.len(),
            fenced("text", &body)
        );
    }
}

/// The excerpt lines an incident refers to, in input and line order.
pub(crate) fn key_lines(d: &Diagnosis, r: &IncidentReport, max: usize) -> Vec<(String, String)> {
    let mut wanted: Vec<(String, u64)> = Vec::new();
    let mut add = |input: &str, line: Option<u64>| {
        if let Some(l) = line {
            let k = (input.to_string(), l);
            if !wanted.contains(&k) {
                wanted.push(k);
            }
        }
    };
    add(&r.location.input, r.location.line);
    for e in &r.evidence {
        for s in &e.sources {
            add(&s.input, s.line);
        }
    }
    for (_, f) in r.facts.iter() {
        for s in &f.sources {
            add(&s.input, s.line);
        }
    }
    wanted.sort();
    let mut out: Vec<(String, String)> = wanted
        .iter()
        .filter_map(|(input, line)| {
            d.excerpts
                .iter()
                .find(|x| &x.input == input && x.line == *line)
                .map(|x| (format!("{input}:{line}"), x.text.clone()))
        })
        .collect();
    if max > 0 && out.len() > max {
        out.truncate(max);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_keeps_log_text_literal() {
        assert_eq!(escape("in <module>"), "in &lt;module&gt;");
        assert_eq!(escape("a | b"), "a \\| b");
        assert_eq!(code("a`b"), "``a`b``");
        assert_eq!(code("x|y"), "`x\\|y`");
        assert!(fenced("text", "```\n").starts_with("````text\n"));
    }
}
