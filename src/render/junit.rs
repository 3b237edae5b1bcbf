//! `--format junit`: JUnit XML, the test report most CI systems show (Jenkins, GitLab,
//! Azure, Buildkite, CircleCI). One `<testsuite>` per input; each incident is a failing
//! `<testcase>` named after its cause, with the verdict in the failure message and the
//! evidence, fixes and key log lines in the body. An input with no incident gets one passing
//! case, so the report says what was checked; an input that could not be read is an
//! `<error>`. Under `--fail-on`, incidents with other causes are `<skipped>` with the reason,
//! so the test report agrees with the exit code.
//!
//! Log text can hold anything; characters XML 1.0 cannot carry are replaced, the rest escaped.

use std::fmt::Write as _;

use super::Policy;
use super::text::{self, headline, location, place, weight};
use crate::diagnosis::report::{Diagnosis, IncidentReport};

/// Escapes text for XML 1.0 attribute values; drops characters XML cannot hold.
pub fn escape(s: &str) -> String {
    escape_with(s, true)
}

/// Escapes element content (quotes stay readable).
fn escape_text(s: &str) -> String {
    escape_with(s, false)
}

fn escape_with(s: &str, attr: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' if attr => out.push_str("&quot;"),
            '\'' if attr => out.push_str("&apos;"),
            '\n' | '\r' | '\t' if attr => out.push_str(&format!("&#{};", c as u32)),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 => out.push('\u{FFFD}'),
            '\u{FFFE}' | '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

fn class_name(input: &str) -> String {
    let base = input
        .rsplit(['/', '\\'])
        .next()
        .unwrap_or(input)
        .to_string();
    format!(
        "oomdoctor.{}",
        base.chars()
            .map(|c| if c.is_alphanumeric() { c } else { '_' })
            .collect::<String>()
    )
}

fn body(d: &Diagnosis, r: &IncidentReport) -> String {
    let mut b = String::new();
    let _ = writeln!(b, "{}", r.summary);
    let _ = writeln!(b, "{}", headline(r));
    let _ = writeln!(b, "first seen at {}", location(&r.location));
    let _ = writeln!(b, "fingerprint {}", r.fingerprint);
    let _ = writeln!(b, "\nWhy {}: {}", r.cause, r.title.to_lowercase());
    for e in &r.evidence {
        let _ = writeln!(b, "  {} {}  ({})", weight(e.weight), e.text, place(e));
    }
    if !r.fixes.is_empty() {
        let _ = writeln!(b, "\nWhat to change, most likely to help first");
        for f in &r.fixes {
            let _ = writeln!(b, "  {}. {}\n     {}", f.rank, f.title, f.action);
        }
    }
    for a in &r.alternatives {
        let _ = writeln!(
            b,
            "\nAlso considered: {} {:.2} {}",
            a.cause, a.confidence, a.summary
        );
    }
    let lines = super::markdown::key_lines(d, r, 20);
    if !lines.is_empty() {
        let _ = writeln!(b, "\nKey log lines");
        for (at, t) in lines {
            let _ = writeln!(b, "  {at}  {}", text::clip(&t, 600));
        }
    }
    b
}

struct Case {
    name: String,
    class: String,
    file: String,
    line: Option<u64>,
    outcome: Outcome,
}

enum Outcome {
    Pass,
    Failure {
        kind: String,
        message: String,
        body: String,
    },
    Skipped(String),
    Error(String),
}

/// Renders the JUnit XML document.
pub fn render(d: &Diagnosis, policy: &Policy) -> String {
    // Suites in input order; errors and incidents of unlisted inputs get their own suite.
    let mut suites: Vec<(String, Vec<Case>)> =
        d.inputs.iter().map(|i| (i.name.clone(), vec![])).collect();
    let mut suite = |name: &str| -> usize {
        match suites.iter().position(|(n, _)| n == name) {
            Some(i) => i,
            None => {
                suites.push((name.to_string(), vec![]));
                suites.len() - 1
            }
        }
    };
    let mut placed: Vec<(usize, Case)> = Vec::new();
    for r in &d.incidents {
        let outcome = if policy.fails(r) {
            Outcome::Failure {
                kind: r.cause.id().to_string(),
                message: format!(
                    "{} (confidence {:.2}): {}",
                    r.cause, r.confidence, r.summary
                ),
                body: body(d, r),
            }
        } else {
            Outcome::Skipped(format!(
                "{} (confidence {:.2}): {}; not failing: {} is not in --fail-on",
                r.cause, r.confidence, r.summary, r.cause
            ))
        };
        placed.push((
            suite(&r.location.input),
            Case {
                name: format!(
                    "incident {}: {} at {}",
                    r.id,
                    r.cause,
                    location(&r.location)
                ),
                class: class_name(&r.location.input),
                file: r.location.input.clone(),
                line: r.location.line,
                outcome,
            },
        ));
    }
    for e in &d.errors {
        placed.push((
            suite(&e.input),
            Case {
                name: "read input".into(),
                class: class_name(&e.input),
                file: e.input.clone(),
                line: None,
                outcome: Outcome::Error(e.message.clone()),
            },
        ));
    }
    for (i, c) in placed {
        if let Some(s) = suites.get_mut(i) {
            s.1.push(c);
        }
    }
    for (name, cases) in suites.iter_mut() {
        if cases.is_empty() {
            cases.push(Case {
                name: "no out-of-memory incident".into(),
                class: class_name(name),
                file: name.clone(),
                line: None,
                outcome: Outcome::Pass,
            });
        }
    }

    let count = |pred: fn(&Outcome) -> bool, cases: &[Case]| -> usize {
        cases.iter().filter(|c| pred(&c.outcome)).count()
    };
    let is_failure = |o: &Outcome| matches!(o, Outcome::Failure { .. });
    let is_error = |o: &Outcome| matches!(o, Outcome::Error(_));
    let is_skipped = |o: &Outcome| matches!(o, Outcome::Skipped(_));
    let all: Vec<&Case> = suites.iter().flat_map(|(_, c)| c.iter()).collect();
    let total = |pred: fn(&Outcome) -> bool| all.iter().filter(|c| pred(&c.outcome)).count();

    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"oomdoctor\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"0\">",
        all.len(),
        total(is_failure),
        total(is_error),
        total(is_skipped)
    );
    for (name, cases) in &suites {
        let _ = writeln!(
            out,
            "  <testsuite name=\"oomdoctor: {}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"0\">",
            escape(name),
            cases.len(),
            count(is_failure, cases),
            count(is_error, cases),
            count(is_skipped, cases)
        );
        for c in cases {
            let line = c.line.map(|l| format!(" line=\"{l}\"")).unwrap_or_default();
            let _ = write!(
                out,
                "    <testcase name=\"{}\" classname=\"{}\" file=\"{}\"{line} time=\"0\"",
                escape(&c.name),
                escape(&c.class),
                escape(&c.file)
            );
            match &c.outcome {
                Outcome::Pass => out.push_str("/>\n"),
                Outcome::Failure {
                    kind,
                    message,
                    body,
                } => {
                    let _ = writeln!(
                        out,
                        ">\n      <failure type=\"{}\" message=\"{}\">{}</failure>\n    </testcase>",
                        escape(kind),
                        escape(message),
                        escape_text(body)
                    );
                }
                Outcome::Skipped(m) => {
                    let _ = writeln!(
                        out,
                        ">\n      <skipped message=\"{}\"/>\n    </testcase>",
                        escape(m)
                    );
                }
                Outcome::Error(m) => {
                    let _ = writeln!(
                        out,
                        ">\n      <error type=\"input\" message=\"{}\"/>\n    </testcase>",
                        escape(m)
                    );
                }
            }
        }
        let _ = writeln!(out, "  </testsuite>");
    }
    out.push_str("</testsuites>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xml_escaping_drops_what_xml_cannot_carry() {
        assert_eq!(
            escape("a<b & \"c\"\x1b[0m"),
            "a&lt;b &amp; &quot;c&quot;\u{FFFD}[0m"
        );
        assert_eq!(class_name("logs/job-1.log"), "oomdoctor.job_1_log");
    }
}
