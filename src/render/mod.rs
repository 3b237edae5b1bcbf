//! Renderers: turn a [`crate::report::Diagnosis`] into text for people or programs. They
//! never decide anything; every number they print is already in the diagnosis.

pub mod human;
pub mod json;
pub(crate) mod text;

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Colourful report for a terminal, quoting the evidence lines.
    Human,
    /// The versioned JSON contract (`schema/diagnosis-v1.json`).
    Json,
}
