//! oomdoctor: tells you why your GPU ran out of memory and what to change, with numbers.
//!
//! Data flows one way:
//!
//! ```text
//! inputs ──► input::open (file, stdin, gzip; kind sniffed from content)
//!   logs      ──► logscan (streaming, prefiltered) ──► engines::* recognisers ──► incident drafts
//!   snapshots ──► pickle (restricted, never executes) ──► snapshot analysis ──► facts
//!   series    ──► timeseries parsers ──► series analysis ──► facts
//!                                  │
//!                                  ▼
//!   diagnose: incidents + facts ──► rules (TOML data, expr conditions) ──► report::Diagnosis
//!                                  │
//!                                  ▼
//!   render: human (miette) | json (versioned API) | ...
//! ```
//!
//! Every number a rule reads is a catalogued fact ([`catalog`]) with provenance
//! ([`evidence::Provenance`]), so every verdict and every computed fix value can be traced
//! back to the line it came from.

pub mod catalog;
pub mod engines;
pub mod evidence;
pub mod expr;
pub mod model;
pub mod pickle;
pub mod snapshot;
pub mod timeseries;
pub mod units;
