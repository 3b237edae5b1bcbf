//! Errors about series inputs: unreadable, mostly unparseable, empty, or too large.
//!
//! A few bad rows are not an error (they are skipped and counted in
//! [`super::InputSummary`]); an input whose rows are mostly unreadable is, because whatever
//! the few readable rows say would be a guess.

use miette::Diagnostic;
use thiserror::Error;

use super::SeriesFormat;
use crate::facts::evidence::InputName;

#[derive(Debug, Error, Diagnostic)]
pub enum SeriesError {
    #[error("could not read {input}: {source}")]
    #[diagnostic(code(oomdoctor::series::io))]
    Io {
        input: InputName,
        #[source]
        source: std::io::Error,
    },

    #[error("{input}:{line}: {bad} of {rows} rows could not be read as {format}: {reason}")]
    #[diagnostic(code(oomdoctor::series::unparseable))]
    Unparseable {
        input: InputName,
        format: SeriesFormat,
        /// The first unreadable line.
        line: u64,
        /// Its text (bounded).
        text: String,
        reason: String,
        bad: u64,
        rows: u64,
        #[help]
        help: Option<String>,
    },

    #[error("{input}: no memory samples in this {format} input")]
    #[diagnostic(code(oomdoctor::series::empty))]
    Empty {
        input: InputName,
        format: SeriesFormat,
        #[help]
        help: Option<String>,
    },

    #[error("{input}:{line}: no memory-used column in the header `{header}`")]
    #[diagnostic(
        code(oomdoctor::series::columns),
        help(
            "name a column `used` (bytes), `used_mib`, `memory.used [MiB]` or `memory_used_bytes`, and one `timestamp`"
        )
    )]
    NoUsedColumn {
        input: InputName,
        line: u64,
        header: String,
    },

    #[error(
        "{input}:{line}: more than {limit} samples; series are read whole and this one is too large"
    )]
    #[diagnostic(
        code(oomdoctor::series::limit),
        help(
            "cut the series to the hours around the failure (e.g. with `tail -n` or a Prometheus range query)"
        )
    )]
    TooManySamples {
        input: InputName,
        line: u64,
        limit: usize,
    },
}

/// Cuts a line to a length fit for an error message.
pub(crate) fn excerpt(text: &[u8]) -> String {
    let s = String::from_utf8_lossy(text);
    let s = s.trim();
    if s.chars().count() > 160 {
        let cut: String = s.chars().take(160).collect();
        format!("{cut}…")
    } else {
        s.to_string()
    }
}
