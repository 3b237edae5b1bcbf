//! oomdoctor: tells you why your GPU ran out of memory and what to change, with numbers.
//!
//! Data flows one way, one folder per stage:
//!
//! ```text
//! input/    inputs ──► walk (directories: every file, read in parallel) ──► open (file,
//!           stdin, gzip; kind sniffed from content)
//! ingest/   log       ──► scanner (streaming, anchor-prefiltered) ──► engines::* recognisers
//!           snapshot  ──► pickle (restricted, never executes) ──► schema ──► analysis
//!           series    ──► nvidia-smi / Prometheus / CSV / JSON Lines ──► analysis
//!           model     ──► config.json / GGUF geometry
//! facts/    every number as a catalogued fact with provenance
//! incident/ fusion of all inputs into incidents; phase and timing decided once (timeline)
//! diagnosis/ rules (TOML data, expression conditions) ──► verdict ──► report::Diagnosis
//! render/   human | json (versioned API) | markdown | github | sarif | junit | html
//! bundle/   diagnosis + excerpts + environment ──► redact ──► a report to attach
//! ```
//!
//! Every number a rule reads is a catalogued fact ([`facts::catalog`]) with provenance
//! ([`facts::evidence::Provenance`]), so every verdict and every computed fix value can be
//! traced back to the line it came from.

// Inputs come from strangers, so `unsafe` is denied everywhere but in two places: the log
// gate's AVX2 search (`ingest::log::gate`), whose only unsafe operations are unaligned
// 32-byte loads inside the haystack, checked against the plain search by its tests and run
// by the fuzz targets; and the memory map of a large log with its SIGBUS guard
// (`input::mapped`), checked against the read path and against a file cut short under the
// map by its tests. (The binary's allocator wrapper is the other unsafe code.)
#![deny(unsafe_code)]
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
