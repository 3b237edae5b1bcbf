//! Model planning: config.json and GGUF readers, facts, GPUs and `plan`.
//!
//! One test binary for these suites (each was its own binary, linked separately); a test
//! keeps its name under its module: `cargo test --test model <module>::`.

#[path = "../common/mod.rs"]
mod common;

mod model_config;
mod model_facts;
mod model_gguf;
mod model_gpus;
mod model_plan;
