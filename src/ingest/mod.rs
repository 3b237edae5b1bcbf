//! Ingest: one folder per input kind, each turning bytes into typed evidence
//! ([`crate::facts`]) with provenance.
//!
//! - [`log`]: crash logs, streamed: the scanner and its prefilter, line clean-up, one
//!   recogniser per engine ([`log::engines`]), and the grouping of failures into incidents;
//! - [`snapshot`]: PyTorch memory snapshots: the restricted pickle reader and the analysis;
//! - [`series`]: memory time series (nvidia-smi CSV, Prometheus/DCGM, CSV, JSON Lines);
//! - [`model`]: a model's geometry (`config.json`, GGUF);
//! - [`sidecar`]: the facts the Python hook writes beside a crash.

pub mod log;
pub mod model;
pub mod series;
pub mod sidecar;
pub mod snapshot;
