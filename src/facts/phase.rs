//! Phases: when a failure hit (model load, engine start-up, CUDA-graph capture, warm-up, the
//! first step, steady state, backward, the optimizer step, generation, evaluation, serving),
//! as the stable ids every stage reads.
//!
//! The phase decides which advice points the right way: an OOM while loading weights is
//! about the model's size, the same OOM after 5,000 steps is not; a vLLM engine that fails at
//! start-up needs a *larger* memory budget, one that fails while serving needs a smaller one.
//! Each input gives its reading ([`crate::ingest::log::phase`] for a log; a snapshot's
//! failing allocation, [`of_allocation_category`]; a series' timing), and
//! [`crate::incident::timeline`] decides once, after fusion.

/// Stable phase identifiers (the JSON `phase` field).
pub mod id {
    pub const MODEL_LOAD: &str = "model-load";
    pub const ENGINE_STARTUP: &str = "engine-startup";
    pub const CUDA_GRAPH_CAPTURE: &str = "cuda-graph-capture";
    pub const WARMUP: &str = "warmup";
    pub const FIRST_STEP: &str = "first-step";
    pub const STEADY_STATE: &str = "steady-state";
    pub const BACKWARD: &str = "backward";
    pub const OPTIMIZER_STEP: &str = "optimizer-step";
    pub const GENERATION: &str = "generation";
    pub const EVALUATION: &str = "evaluation";
    pub const SERVING: &str = "serving";
    pub const UNKNOWN: &str = "unknown";
}

/// Every phase id with a one-line meaning, for docs and `oomdoctor explain`.
pub const PHASES: &[(&str, &str)] = &[
    (
        id::MODEL_LOAD,
        "loading weights onto the device (from_pretrained, load_state_dict, .to()/.cuda())",
    ),
    (
        id::ENGINE_STARTUP,
        "an inference engine sizing its memory: profiling, allocating the KV cache",
    ),
    (id::CUDA_GRAPH_CAPTURE, "capturing CUDA graphs"),
    (id::WARMUP, "warm-up / dummy batches before serving"),
    (id::FIRST_STEP, "the first training or inference step"),
    (id::STEADY_STATE, "after many steps or epochs had completed"),
    (id::BACKWARD, "the backward pass"),
    (
        id::OPTIMIZER_STEP,
        "the optimizer step (state allocated on the first one)",
    ),
    (id::GENERATION, "generation with a growing cache"),
    (id::EVALUATION, "evaluation / validation"),
    (id::SERVING, "an inference server handling requests"),
    (id::UNKNOWN, "the log does not say"),
];

/// The phase a memory snapshot's failing allocation implies, from what it was for.
pub fn of_allocation_category(category: &str) -> Option<&'static str> {
    match category {
        "weights" => Some(id::MODEL_LOAD),
        "gradients" => Some(id::BACKWARD),
        "optimizer" => Some(id::OPTIMIZER_STEP),
        "kv_cache" => Some(id::GENERATION),
        _ => None,
    }
}

/// The stable id of a phase named in text (a `phase` fact), or `None` if it names none.
pub fn canonical(name: &str) -> Option<&'static str> {
    PHASES.iter().map(|(p, _)| *p).find(|p| *p == name)
}
