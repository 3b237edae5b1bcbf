//! Diagnoses end to end: fusion of inputs, the JSON schemas, engines' logs, the rule fixtures
//! and their insta snapshots.
//!
//! One test binary for these suites (each was its own binary, linked separately); a test
//! keeps its name under its module: `cargo test --test diagnosis <module>::`.

#[path = "../common/mod.rs"]
mod common;

mod fusion;
mod json_schema;
mod local_engines;
mod rule_fixtures;
mod serving_engines;
mod snapshots;
