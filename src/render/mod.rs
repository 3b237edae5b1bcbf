//! Renderers: turn a [`crate::diagnosis::report::Diagnosis`] into text for people or programs. They
//! never decide anything; every number they print is already in the diagnosis. Each is a
//! function of the diagnosis plus options that only say *how* to print (colour, which causes
//! the CI policy treats as failures, the rule descriptions SARIF lists).

pub mod plot;

pub mod bundle;
pub mod github;
pub mod html;
pub mod human;
pub mod json;
pub mod junit;
pub mod markdown;
pub mod sarif;
pub mod terminal;
pub(crate) mod text;

use crate::diagnosis::cause::Cause;
use crate::diagnosis::report::IncidentReport;

/// Output formats of a diagnosis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Colourful report for a terminal, quoting the evidence lines.
    Human,
    /// The versioned JSON contract (`schema/diagnosis-v1.json`).
    Json,
    /// Markdown to paste into an issue: verdict, evidence table, fixes, log lines folded.
    Markdown,
    /// GitHub Actions workflow commands (`::error file=...,line=...::`); also appends the
    /// markdown report to `$GITHUB_STEP_SUMMARY` when that is set.
    Github,
    /// SARIF 2.1.0 for code-scanning tools; rule ids are oomdoctor's rule ids.
    Sarif,
    /// JUnit XML: each incident a failing test case.
    Junit,
    /// One self-contained HTML file with plots (needs `--output FILE`).
    Html,
}

/// Output formats of listings (`oomdoctor rules`, `oomdoctor facts`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ListFormat {
    Human,
    Json,
}

/// Which incidents the CI policy fails on (`--fail-on`); everything else is still reported,
/// at a lower severity where the format has one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// Empty: every incident fails.
    pub fail_on: Vec<Cause>,
}

impl Policy {
    /// Whether this incident fails the run.
    pub fn fails(&self, incident: &IncidentReport) -> bool {
        self.fail_on.is_empty() || self.fail_on.contains(&incident.cause)
    }
}

/// A rule as SARIF and others describe it (kept apart from `rules::Rule` so renderers need
/// no rule engine).
#[derive(Clone, Debug, PartialEq)]
pub struct RuleInfo {
    pub id: String,
    pub cause: Cause,
    pub title: String,
    pub explanation: String,
}
