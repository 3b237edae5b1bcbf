//! Facts the `ingest::log::engines::ray` stage may set.

use super::{FactDef, fact};
use crate::facts::evidence::Unit;

/// Facts read from Ray's memory monitor (plus the shared `host.*` facts).
pub const FACTS: &[FactDef] = &[
    fact(
        "ray.memory_usage_threshold",
        Unit::Ratio,
        "RAY_memory_usage_threshold: the node memory fraction above which the raylet kills workers.",
    ),
    fact(
        "ray.memory_usage_fraction",
        Unit::Ratio,
        "The node's memory use (0..1) when the worker was killed.",
    ),
    fact(
        "ray.workers_killed",
        Unit::Count,
        "Workers the raylet reports killed for memory pressure.",
    ),
    fact(
        "ray.top_process_name",
        Unit::Text,
        "The largest memory user in the raylet's `Top 10 memory users` table.",
    ),
    fact("ray.top_process_bytes", Unit::Bytes, "Its memory."),
    fact(
        "ray.task_memory_fit_bytes",
        Unit::Bytes,
        "Derived: a `memory=` resource request per task or actor that matches what the killed one used, with 20% headroom.",
    ),
    fact(
        "ray.concurrency_fit",
        Unit::Count,
        "Derived: how many tasks of the killed one's size fit under the threshold (node memory × threshold / task memory).",
    ),
];
