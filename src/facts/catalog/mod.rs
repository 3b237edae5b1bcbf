//! The fact catalogue: every fact name a parser may emit and a rule may read.
//!
//! One file per producer (an engine's recogniser, the snapshot reader, the series, the model,
//! the sidecar) holds the `FACTS` it may set; this module strings them together in
//! [`SECTIONS`] and answers lookups. The tables live here, not in the parsers, so the
//! catalogue depends on nothing above it and every stage can read it. The catalogue is the contract
//! between parsers and rule files: `oomdoctor facts` lists it, the rule loader rejects
//! unknown names (pointing at the line), and a test keeps names unique and well formed.

pub mod comfyui;
pub mod deepspeed;
pub mod host;
pub mod llamacpp;
pub mod lmstudio;
pub mod model;
pub mod ollama;
pub mod pytorch;
pub mod ray;
pub mod runtimes;
pub mod series;
pub mod sglang;
pub mod sidecar;
pub mod slurm;
pub mod smi_table;
pub mod snapshot;
pub mod tgi;
pub mod training;
pub mod trtllm;
pub mod vgpu;
pub mod vllm;
pub mod webui;
pub mod xla;

use std::collections::HashMap;
use std::sync::LazyLock;

use crate::facts::evidence::Unit;

/// One catalogued fact.
#[derive(Debug)]
pub struct FactDef {
    /// Dotted, lower-case name: `oom.requested_bytes`.
    pub name: &'static str,
    pub unit: Unit,
    /// One sentence: what it measures and where it usually comes from.
    pub doc: &'static str,
}

/// Shorthand used by the `FACTS` tables.
pub const fn fact(name: &'static str, unit: Unit, doc: &'static str) -> FactDef {
    FactDef { name, unit, doc }
}

/// Facts about the incident itself, not tied to one producer.
pub const CORE: &[FactDef] = &[
    fact(
        "failure.kind",
        Unit::Text,
        "What failed: device-oom, host-oom, kv-capacity, kv-exhausted, engine-budget, no-kv-memory, device-limit; memory-growth when nothing failed yet but memory a log or a snapshot shows climbed to its end.",
    ),
    fact(
        "failure.engine",
        Unit::Text,
        "The producer of the failure line (pytorch, vllm, llama.cpp, linux, ...).",
    ),
    fact(
        "failure.copies",
        Unit::Count,
        "How many copies of this failure were folded into the incident (ranks, re-raised tracebacks, restarts).",
    ),
    fact(
        "failure.ranks",
        Unit::Count,
        "How many distinct ranks or worker processes reported it.",
    ),
    fact(
        "failure.devices",
        Unit::Count,
        "How many distinct devices reported it.",
    ),
    fact(
        "engine",
        Unit::Text,
        "The engine that ran the workload (vllm when a PyTorch OOM happens inside vLLM).",
    ),
    fact(
        "engine.earlier_instance_serving",
        Unit::Flag,
        "An earlier start in the same log came up serving (Uvicorn's `Application startup complete`, a server's ready line), failed nothing and was not seen to stop before this run started: that instance still holds its memory.",
    ),
    fact(
        "engine.server_stopped",
        Unit::Flag,
        "The server said it stopped (Uvicorn's `Shutting down` / `Finished server process`), or it was interrupted from the terminal (`^C`, `KeyboardInterrupt`).",
    ),
    fact(
        "engine.diffusion_ui",
        Unit::Flag,
        "Set when the engine is an image-generation web UI (ComfyUI, AUTOMATIC1111/Forge): its own rules replace the training-oriented PyTorch ones.",
    ),
    fact(
        "phase",
        Unit::Text,
        "When the failure hit: model-load, engine-startup, cuda-graph-capture, warmup, first-step, steady-state, backward, optimizer-step, generation, evaluation, serving, unknown.",
    ),
    fact(
        "phase.steps_completed",
        Unit::Count,
        "Training steps or iterations the log shows completed before the failure.",
    ),
    fact(
        "phase.training_loop",
        Unit::Flag,
        "Set when the log shows a training loop before the failure: loss values logged, or a training-step function (training_step, train_one_epoch, ...) in the traceback.",
    ),
    fact(
        "phase.epoch",
        Unit::Count,
        "The epoch the log shows at the failure.",
    ),
    fact(
        "phase.evaluation_rounds",
        Unit::Count,
        "Evaluation rounds the training script announced before the failure (`Start validating.`, `***** Running Evaluation *****`).",
    ),
    fact(
        "phase.frames",
        Unit::Text,
        "The traceback above the failure, innermost frame first, as `file:function` joined by ` < ` (bounded).",
    ),
    fact(
        "phase.distributed_setup",
        Unit::Flag,
        "The traceback is in DDP's construction (its parameter broadcast or shape check) or the process group's set-up: the failure came while the ranks set up, before any step.",
    ),
    fact(
        "phase.evidence",
        Unit::Text,
        "The traceback frame or log line that decided the phase.",
    ),
    fact(
        "run.restarts",
        Unit::Count,
        "How many times the log shows the program starting.",
    ),
    fact(
        "log.memory_first_bytes",
        Unit::Bytes,
        "The first device-memory figure the run itself logged (progress lines such as `mem 10.2 GiB`).",
    ),
    fact(
        "log.memory_last_bytes",
        Unit::Bytes,
        "The last device-memory figure the run logged before the failure.",
    ),
    fact(
        "log.memory_max_bytes",
        Unit::Bytes,
        "The largest device-memory figure the run logged.",
    ),
    fact(
        "log.memory_samples",
        Unit::Count,
        "How many device-memory figures the run logged.",
    ),
    fact(
        "log.memory_increases",
        Unit::Count,
        "How many of those figures were higher than the one before.",
    ),
    fact(
        "log.memory_climb_readings",
        Unit::Count,
        "How many device-memory readings in a row rose, up to the latest one (0 when the latest did not rise).",
    ),
    fact(
        "log.memory_climb_from_bytes",
        Unit::Bytes,
        "The device-memory reading that rise began from.",
    ),
    fact(
        "log.memory_growth_bytes",
        Unit::Bytes,
        "Last minus first logged device-memory figure.",
    ),
    fact(
        "log.reserved_first_bytes",
        Unit::Bytes,
        "The first figure of device memory the allocator reserved that the run logged (`reserved 75.0G` beside the memory in use).",
    ),
    fact(
        "log.reserved_last_bytes",
        Unit::Bytes,
        "The last logged figure of reserved device memory before the failure.",
    ),
    fact(
        "log.reserved_max_bytes",
        Unit::Bytes,
        "The largest logged figure of reserved device memory.",
    ),
    fact(
        "log.reserved_samples",
        Unit::Count,
        "How many figures of reserved device memory the run logged.",
    ),
    fact(
        "log.reserved_increases",
        Unit::Count,
        "How many of those figures were higher than the one before.",
    ),
    fact(
        "log.reserved_growth_bytes",
        Unit::Bytes,
        "Last minus first logged figure of reserved device memory.",
    ),
];

/// Every section of the catalogue.
pub const SECTIONS: &[&[FactDef]] = &[
    CORE,
    pytorch::FACTS,
    training::FACTS,
    host::FACTS,
    comfyui::FACTS,
    webui::FACTS,
    model::FACTS,
    snapshot::FACTS,
    sidecar::FACTS,
    series::FACTS,
    // Local engines and the host side.
    llamacpp::FACTS,
    ollama::FACTS,
    ray::FACTS,
    smi_table::FACTS,
    slurm::FACTS,
    xla::FACTS,
    deepspeed::FACTS,
    // LLM serving engines.
    vllm::FACTS,
    sglang::FACTS,
    tgi::FACTS,
    trtllm::FACTS,
    vgpu::FACTS,
    lmstudio::FACTS,
    runtimes::FACTS,
];

static INDEX: LazyLock<HashMap<&'static str, &'static FactDef>> = LazyLock::new(|| {
    SECTIONS
        .iter()
        .flat_map(|s| s.iter())
        .map(|d| (d.name, d))
        .collect()
});

/// Finds a fact definition by name.
pub fn lookup(name: &str) -> Option<&'static FactDef> {
    INDEX.get(name).copied()
}

/// All facts, in section order.
pub fn all() -> impl Iterator<Item = &'static FactDef> {
    SECTIONS.iter().flat_map(|s| s.iter())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_well_formed() {
        let mut seen = std::collections::HashSet::new();
        for d in all() {
            assert!(seen.insert(d.name), "duplicate fact {}", d.name);
            assert!(
                d.name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '_'),
                "bad fact name {}",
                d.name
            );
            assert!(!d.doc.is_empty(), "fact {} has no doc", d.name);
            if d.name.ends_with("_bytes") {
                assert_eq!(d.unit, Unit::Bytes, "{} should be in bytes", d.name);
            }
        }
    }
}
