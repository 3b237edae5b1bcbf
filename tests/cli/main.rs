//! Runs the binary as users do: arguments, formats, the newcomer's path, hostile and broken
//! input, the sidecar, and replays of fuzz crashes.
//!
//! One test binary for these suites (each was its own binary, linked separately); a test
//! keeps its name under its module: `cargo test --test cli <module>::`.

#[path = "../common/mod.rs"]
mod common;

mod bad_inputs;
mod broken_inputs;
mod cli;
mod formats;
mod hostile_output;
mod newcomer;
mod regressions;
mod sidecar;
