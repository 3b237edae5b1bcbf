//! `--format github`: GitHub Actions workflow commands. Each incident becomes an `::error`
//! annotation on the log line where it was first seen (a `::warning` when `--fail-on` does
//! not fail on its cause), with the verdict and the first fixes in the message; the evidence
//! and every fix follow in a collapsed `::group::` of the job log. The markdown report for
//! `$GITHUB_STEP_SUMMARY` is [`super::markdown`]; the app appends it.
//!
//! Escaping follows the runner's rules: in messages `%`, CR and LF are percent-encoded; in
//! properties (`file=`, `title=`) also `:` and `,`.
//! <https://docs.github.com/en/actions/reference/workflows-and-actions/workflow-commands>

use std::fmt::Write as _;

use super::Policy;
use super::text::{count, headline, location, place, weight};
use crate::diagnosis::report::Diagnosis;

/// Escapes a workflow command's message.
pub fn escape_data(s: &str) -> String {
    s.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// Escapes a workflow command's property value.
pub fn escape_property(s: &str) -> String {
    escape_data(s).replace(':', "%3A").replace(',', "%2C")
}

/// Workflow commands can be turned off by a line in the log; a log line that starts with
/// `::` could also look like one. Log text is only ever printed inside a message, never at
/// the start of a line, so it is never read as a command.
fn command(kind: &str, props: &[(&str, String)], message: &str) -> String {
    let props: Vec<String> = props
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={}", escape_property(v)))
        .collect();
    let sep = if props.is_empty() { "" } else { " " };
    format!(
        "::{kind}{sep}{}::{}\n",
        props.join(","),
        escape_data(message)
    )
}

/// Renders the workflow commands.
pub fn render(d: &Diagnosis, policy: &Policy) -> String {
    // The job log is a terminal emulator in the browser: no control characters from inputs.
    let d = &super::terminal::sanitized(d);
    let mut out = String::new();
    for r in &d.incidents {
        let kind = if policy.fails(r) { "error" } else { "warning" };
        let mut msg = format!("{}\n{}", r.summary, headline(r));
        for f in r.fixes.iter().take(3) {
            let _ = write!(msg, "\nFix {}: {} → {}", f.rank, f.title, f.action);
        }
        let _ = write!(msg, "\nfingerprint {}", r.fingerprint);
        out.push_str(&command(
            kind,
            &[
                ("file", r.location.input.clone()),
                (
                    "line",
                    r.location.line.map(|l| l.to_string()).unwrap_or_default(),
                ),
                (
                    "title",
                    format!(
                        "oomdoctor: {} (confidence {:.2})",
                        r.cause.id(),
                        r.confidence
                    ),
                ),
            ],
            &msg,
        ));
    }
    for e in &d.errors {
        out.push_str(&command(
            "warning",
            &[
                ("file", e.input.clone()),
                ("title", "oomdoctor could not read an input".into()),
            ],
            &e.message,
        ));
    }
    // With an input that could not be read, its warning above is the news, not "nothing
    // found".
    if d.incidents.is_empty() && d.errors.is_empty() {
        out.push_str(&command(
            "notice",
            &[("title", "oomdoctor".into())],
            &format!(
                "no out-of-memory incident found in {}",
                count(d.inputs.len(), "input")
            ),
        ));
    }
    // The details, folded in the job log.
    for r in &d.incidents {
        let _ = writeln!(
            out,
            "::group::oomdoctor incident {}: {} ({:.2}) at {}",
            r.id,
            r.cause,
            r.confidence,
            escape_data(&location(&r.location))
        );
        let _ = writeln!(out, "{}", escape_line(&r.summary));
        let _ = writeln!(out, "{}", escape_line(&headline(r)));
        let _ = writeln!(out, "fingerprint {}", r.fingerprint);
        let _ = writeln!(out, "Why {}:", r.cause);
        for e in &r.evidence {
            let _ = writeln!(
                out,
                "  {} {}  ({})",
                weight(e.weight),
                escape_line(&e.text),
                escape_line(&place(e))
            );
        }
        if !r.fixes.is_empty() {
            let _ = writeln!(out, "What to change, most likely to help first:");
            for f in &r.fixes {
                let _ = writeln!(out, "  {}. {}", f.rank, escape_line(&f.title));
                let _ = writeln!(out, "     {}", escape_line(&f.action));
            }
        }
        for a in &r.alternatives {
            let _ = writeln!(
                out,
                "Also considered: {} {:.2} {}",
                a.cause,
                a.confidence,
                escape_line(&a.summary)
            );
        }
        let _ = writeln!(out, "::endgroup::");
    }
    for s in &d.skipped {
        let _ = writeln!(
            out,
            "oomdoctor: skipped {} ({}): {}",
            escape_line(&s.input),
            s.kind,
            escape_line(&s.reason)
        );
    }
    out
}

/// A plain line of the job log must not be read as a command. The runner trims leading
/// whitespace before it looks for `::name::` and also obeys the legacy `##[name]` form, so a
/// line whose text starts with either after any whitespace gets a visible marker in front.
fn escape_line(s: &str) -> String {
    let s = s.replace(['\r', '\n'], " ");
    let t = s.trim_start();
    if t.starts_with("::") || t.starts_with("##") {
        format!("› {t}")
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_and_data_are_escaped() {
        assert_eq!(
            command(
                "error",
                &[("file", "a,b:c.log".into()), ("line", "3".into())],
                "50% done\nnext"
            ),
            "::error file=a%2Cb%3Ac.log,line=3::50%25 done%0Anext\n"
        );
        assert_eq!(command("notice", &[], "x"), "::notice::x\n");
        assert_eq!(escape_line("::stop-commands::x"), "› ::stop-commands::x");
        assert_eq!(escape_line(" \t ::error::x"), "› ::error::x");
        assert_eq!(escape_line("##[error]x"), "› ##[error]x");
        assert_eq!(escape_line("\u{a0}##[warning]x"), "› ##[warning]x");
        assert_eq!(escape_line("a ::error::x"), "a ::error::x");
    }
}
