//! What oomdoctor knows about memory, independent of any input: the arithmetic of a model
//! on a device, how each engine sizes its memory, and GPUs by name. The diagnosis (fix
//! values) and `oomdoctor plan` both draw on it.
//!
//! - [`memory`] does the arithmetic (KV bytes per token, weights, capacities, the fix
//!   values the diagnosis prints, overhead estimates) and records it for `--explain`;
//! - [`fit`] knows how each engine sizes its memory; [`gpus`] knows GPUs by name;
//! - [`mod@plan`] is `oomdoctor plan`: the same arithmetic before a run instead of after.

pub mod fit;
pub mod gpus;
pub mod memory;
pub mod plan;

pub use fit::Engine;
pub use plan::{PlanArgs, PlanError, PlanFormat, PlanReport, plan, render_human, render_json};
