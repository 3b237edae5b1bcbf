//! oomdoctor: tells you why your GPU ran out of memory and what to change, with numbers.
//!
//! Data flows one way:
//!
//! ```text
//! inputs ──► walk (directories: every file, read in parallel) ──► input::open (file, stdin,
//!            gzip; kind sniffed from content)
//!   logs      ──► logscan (streaming, prefiltered) ──► engines::* recognisers ──► incident drafts
//!   snapshots ──► pickle (restricted, never executes) ──► snapshot analysis ──► facts
//!   series    ──► timeseries parsers ──► series analysis ──► facts
//!                                  │
//!                                  ▼
//!   diagnose: incidents + facts ──► rules (TOML data, expr conditions) ──► report::Diagnosis
//!                                  │
//!                                  ▼
//!   render: human (miette) | json (versioned API) | markdown | github | sarif | junit | html
//!   bundle: diagnosis + excerpts ±2 lines + environment ──► redact ──► a report to attach
//! ```
//!
//! Every number a rule reads is a catalogued fact ([`catalog`]) with provenance
//! ([`evidence::Provenance`]), so every verdict and every computed fix value can be traced
//! back to the line it came from.

// Errors about inputs and rules carry their source text for miette's labels, which makes
// them large; they are on cold paths, so boxing them would only add noise.
#![allow(clippy::result_large_err)]

pub mod bundle;
pub mod cli;
pub mod diagnosis;
pub mod facts;
pub mod incident;
pub mod ingest;
pub mod input;
pub mod knowledge;
pub mod render;
