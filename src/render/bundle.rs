//! The `oomdoctor bundle` report, before redaction: what a maintainer needs from a bug
//! report and nothing more. The diagnosis (markdown), the environment the logs state, the
//! evidence lines with two lines either side, and a summary of each snapshot instead of the
//! pickle. [`crate::bundle`] gathers the extras and masks the result.

use std::fmt::Write as _;

use serde::Serialize;

use super::markdown::{self, code, escape, fenced};
use crate::diagnosis::report::Diagnosis;
use crate::render::plot::{BlockState, SnapshotPlot};

/// Lines of one input around the evidence.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ContextBlock {
    pub input: String,
    /// `(line number, text)`, in order; a gap in numbers is a gap in the excerpt.
    pub lines: Vec<(u64, String)>,
    /// The lines evidence points at (marked in the excerpt).
    pub focus: Vec<u64>,
    /// Why the excerpt is partial, when it is (standard input cannot be read twice).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A fact about the environment, as some input stated it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EnvFact {
    pub name: String,
    pub value: String,
    /// `crash.log:12`, when it came from a line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// What a snapshot showed, in words. `text` is `None` when this build could not read the
/// snapshot; the bundle then says so instead of attaching the pickle.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SnapshotSummary {
    pub input: String,
    pub text: Option<String>,
}

/// Everything besides the diagnosis that goes into a bundle.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Extras {
    pub environment: Vec<EnvFact>,
    pub context: Vec<ContextBlock>,
    pub snapshots: Vec<SnapshotSummary>,
}

/// A summary of a snapshot's plot data in a few lines (the integrator can pass richer text
/// through [`SnapshotSummary::text`]).
pub fn snapshot_summary(p: &SnapshotPlot) -> String {
    let g = super::text::gib;
    let mut s = format!(
        "{} segments, {} reserved, {} allocated, {} free in {} blocks",
        p.segments.len(),
        g(p.reserved_bytes()),
        g(p.bytes_in(BlockState::Allocated)),
        g(p.bytes_in(BlockState::Free)),
        p.free_blocks()
    );
    if let Some(l) = p.largest_free_block {
        let _ = write!(s, "; largest free block {}", g(l));
    }
    if let Some(r) = p.request {
        let _ = write!(s, "; failed request {}", g(r));
    }
    if !p.categories.is_empty() {
        let mut c = p.categories.clone();
        c.sort_by_key(|c| std::cmp::Reverse(c.bytes));
        let parts: Vec<String> = c
            .iter()
            .take(6)
            .map(|c| format!("{} {}", c.name, g(c.bytes)))
            .collect();
        let _ = write!(s, "\nlive memory by category: {}", parts.join(", "));
    }
    if !p.top_sites.is_empty() {
        let _ = write!(s, "\ntop allocation sites:");
        for t in p.top_sites.iter().take(5) {
            let _ = write!(s, "\n  {}  {}", g(t.bytes), t.site);
        }
    }
    s
}

/// Renders the bundle as markdown (not yet redacted).
pub fn render(d: &Diagnosis, extras: &Extras) -> String {
    let d = &super::terminal::sanitized(d);
    let mut out = String::new();
    if !extras.environment.is_empty() {
        let _ = writeln!(out, "## Environment\n\n| | | |\n|---|---|---|");
        for e in &extras.environment {
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                escape(&e.name),
                code(&e.value),
                e.source.as_deref().map(code).unwrap_or_default()
            );
        }
        out.push('\n');
    }
    let mut opts = markdown::Options::new();
    opts.heading = 2;
    opts.max_lines = 0;
    opts.key_lines = false;
    out.push_str(&markdown::render(d, &opts));
    if !extras.context.is_empty() {
        let _ = writeln!(
            out,
            "\n## Log excerpts\n\nThe lines the evidence points at (`>`), with two lines either side.\n"
        );
        for c in &extras.context {
            let _ = writeln!(out, "### {}\n", code(&c.input));
            if let Some(n) = &c.note {
                let _ = writeln!(out, "{}\n", escape(n));
            }
            let width = c
                .lines
                .iter()
                .map(|(n, _)| n.to_string().len())
                .max()
                .unwrap_or(1);
            let mut body = String::new();
            let mut prev: Option<u64> = None;
            for (n, t) in &c.lines {
                if prev.is_some_and(|p| *n > p + 1) {
                    let _ = writeln!(body, "{:>width$}", "…");
                }
                let mark = if c.focus.contains(n) { '>' } else { ' ' };
                let _ = writeln!(body, "{mark} {n:>width$}  {t}");
                prev = Some(*n);
            }
            out.push_str(&fenced("text", &body));
            out.push('\n');
        }
    }
    if !extras.snapshots.is_empty() {
        let _ = writeln!(out, "\n## Snapshots\n");
        for s in &extras.snapshots {
            match &s.text {
                Some(t) => {
                    let _ = writeln!(out, "### {}\n\n{}", code(&s.input), fenced("text", t));
                }
                None => {
                    let _ = writeln!(
                        out,
                        "### {}\n\nNo summary: this build of oomdoctor does not analyse snapshots yet. The pickle itself is not included; attach it separately only if a maintainer asks.\n",
                        code(&s.input)
                    );
                }
            }
        }
    }
    out
}
