//! Diagnoses end to end: fusion of inputs, the JSON schemas, engines' logs. (Each rule's
//! fixtures and snapshots are checked by `tests/rules.rs`, one test per rule.)
//!
//! One test binary for these suites (each was its own binary, linked separately); a test
//! keeps its name under its module: `cargo test --test diagnosis <module>::`.

#[path = "../common/mod.rs"]
mod common;

mod coverage;
mod fusion;
mod json_schema;
mod local_engines;
mod real_gpu;
mod serving_engines;
