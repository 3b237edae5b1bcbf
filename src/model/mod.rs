//! The memory model of a workload: model geometry (from a Hugging Face `config.json`, a
//! GGUF header, or an engine's log), exact memory arithmetic, a table of GPUs, and the
//! pre-flight `oomdoctor plan`.
//!
//! - [`config`] and [`gguf`] read a model into a [`geometry::Geometry`];
//! - [`memory`] does the arithmetic (KV bytes per token, weights, capacities, the fix
//!   values the diagnosis prints, overhead estimates) and records it for `--explain`;
//! - [`gpus`] knows GPUs by name; [`fit`] knows how each engine sizes its memory;
//! - [`plan`] is `oomdoctor plan`.

pub mod config;
pub mod fit;
pub mod geometry;
pub mod gguf;
pub mod gpus;
pub mod memory;
pub mod plan;

pub use fit::Engine;
pub use geometry::Geometry;
pub use plan::{PlanArgs, PlanError, PlanFormat, PlanReport, plan, render_human, render_json};
