//! Memory snapshots and memory series: fixtures, pickles, real dumps and hostile input.
//!
//! One test binary for these suites (each was its own binary, linked separately); a test
//! keeps its name under its module: `cargo test --test inputs <module>::`.

#[path = "../common/mod.rs"]
mod common;

mod log_gate;
mod log_mapped;
mod snapshot_fixtures;
mod snapshot_hostile;
mod snapshot_pickle;
mod snapshot_real;
mod snapshot_stream;
mod timeseries_fixtures;
mod timeseries_robustness;
