//! The timeline: each incident's phase, decided once, after every input is fused.
//!
//! The phase is the strongest evidence there is (an OOM while loading weights is about the
//! model's size; the same OOM after 5,000 steps is not), and several inputs may speak to it.
//! Each ingest stage only records its *reading*; this stage weighs them, strongest first:
//!
//! 1. the log's reading (traceback frames, the latest phase marker, progress counters:
//!    [`crate::ingest::log::phase::decide`], taken when the log's failures were grouped), when it knows;
//! 2. the snapshot's failing allocation: what it was for (an optimizer state is the
//!    optimizer step, a weight is the load); likewise an engine's failed allocation that
//!    names itself (llama.cpp's KV cache or compute buffer comes after the weights, so a
//!    loading marker before it is overruled);
//! 3. the series' timing: still ramping up from idle (loading), shortly after the load ramp
//!    (the first steps or requests), or later.

use crate::facts::evidence::Facts;
use crate::facts::phase::{self, id};
use crate::facts::units::format_bytes_f;
use crate::incident::Incident;

/// Settles an incident's phase from the readings its fused facts hold. The `phase` fact is
/// always left set, `unknown` when nothing read one: rules compare it (`phase !=
/// 'model-load'`), and a missing fact makes such a comparison unknown, so a snapshot given
/// alone (no log to set it) had every rule gated on the phase out of play.
pub fn settle_phase(inc: &mut Incident) {
    decide_phase(inc);
    // Steps counted above a failure while a model was loading were another job's (a prompt
    // bar finished before the load, a training run before an evaluation model's load): they
    // say nothing of whether the load fits, so no rule reads them as the same work repeated.
    if inc.phase == id::MODEL_LOAD {
        inc.facts.remove("phase.steps_completed");
        inc.facts.remove("phase.epoch");
    }
    if inc.facts.get("phase").is_none() {
        inc.facts.set("phase", inc.phase, None);
    }
}

fn decide_phase(inc: &mut Incident) {
    let snapshot_steps = steps_from_snapshot(inc);
    context_after_weights(inc);
    kv_pool_allocation(inc);
    autosplit_with_cache(inc);
    distributed_setup(inc);
    if let Some(p) = inc.facts.str("phase").and_then(phase::canonical) {
        if p != id::UNKNOWN {
            inc.phase = p;
            return;
        }
    }
    if inc.phase != id::UNKNOWN {
        return;
    }
    // TGI's launcher gives up on a shard that never became ready: the shard loads the model,
    // and the warm-up runs only once every shard is ready (its failures say `Warmup`).
    if inc.facts.get("tgi.shard_start_failed").is_some() {
        record(inc, "phase", id::MODEL_LOAD, "tgi.shard_start_failed");
        record(
            inc,
            "phase.evidence",
            "TGI's launcher said the shard failed to start: it was loading the model",
            "tgi.shard_start_failed",
        );
        inc.phase = id::MODEL_LOAD;
        return;
    }
    // TensorFlow names the graph node whose op failed: an `Initializer` node is a variable
    // (a weight or an optimizer slot) being created, which is the model being set up; a
    // node under `gradients/` is the backward pass.
    if let Some((p, why)) = inc.facts.str("tf.node").and_then(tf_node_phase) {
        record(inc, "phase", p, "tf.node");
        record(inc, "phase.evidence", &why, "tf.node");
        inc.phase = p;
        return;
    }
    if let Some(p) = inc
        .facts
        .str("snapshot.oom_category")
        .and_then(phase::of_allocation_category)
    {
        record(inc, "phase", p, "snapshot.oom_category");
        inc.phase = p;
        return;
    }
    if let Some(n) = snapshot_steps.filter(|n| *n >= 2.0) {
        record(inc, "phase", id::STEADY_STATE, "snapshot.leak_steps");
        let why =
            format!("snapshot: {n} optimizer or profiler steps had completed before the failure");
        record(inc, "phase.evidence", &why, "snapshot.leak_steps");
        inc.phase = id::STEADY_STATE;
        return;
    }
    if let Some((p, why)) = series_reading(&inc.facts, inc.engine) {
        let source = ["series.failed_during_load", "series.seconds_since_load"]
            .iter()
            .find(|n| inc.facts.get(n).is_some())
            .copied()
            .unwrap_or("series.failure_time");
        record(inc, "phase", p, source);
        record(inc, "phase.evidence", &why, source);
        inc.phase = p;
    }
}

/// The phase a TensorFlow graph node's name shows, with the sentence saying why.
fn tf_node_phase(node: &str) -> Option<(&'static str, String)> {
    let parts: Vec<&str> = node.split('/').collect();
    if parts
        .iter()
        .any(|p| *p == "Initializer" || p.starts_with("Initializer_"))
    {
        return Some((
            id::MODEL_LOAD,
            format!(
                "TensorFlow was initialising a variable (node {node}): the model and its optimizer slots were being created"
            ),
        ));
    }
    if parts.first().is_some_and(|p| p.starts_with("gradients")) || node.contains("_grad/") {
        return Some((
            id::BACKWARD,
            format!("TensorFlow was computing gradients (node {node})"),
        ));
    }
    None
}

/// llama.cpp (and Ollama's runner) allocate the KV cache and the compute buffers when they
/// create the context, after every weight is in place. A loading marker (`load_tensors:`)
/// is the latest the log printed when a paste leaves out the context's own lines, but a
/// failed allocation that names itself KV cache or compute buffer says the weights were
/// loaded: the phase is the engine's start-up. Frames from a traceback are left alone.
fn context_after_weights(inc: &mut Incident) {
    let by_frames = inc
        .facts
        .str("phase.evidence")
        .is_some_and(|e| e.starts_with("traceback frame"));
    let kind = inc.facts.str("llamacpp.alloc_kind").unwrap_or("");
    let what = match kind {
        "kv" => "the KV cache",
        "compute" => "a compute buffer",
        "output" => "the output buffer",
        _ => return,
    };
    if by_frames || inc.facts.str("phase") != Some(id::MODEL_LOAD) {
        return;
    }
    let why = format!(
        "the failed allocation was {what}, which is allocated when the context is created, after the weights are loaded"
    );
    record(inc, "phase", id::ENGINE_STARTUP, "llamacpp.alloc_kind");
    record(inc, "phase.evidence", &why, "llamacpp.alloc_kind");
    inc.phase = id::ENGINE_STARTUP;
}

/// vLLM allocating the KV cache it had sized from `gpu_memory_utilization` (V0's cache
/// engine, V1's model runner): the traceback's frames say the profiling was over and the
/// budget itself was what the device could not give. Recorded as `vllm.kv_pool_allocation`.
fn kv_pool_allocation(inc: &mut Incident) {
    let frames = inc.facts.str("phase.frames").unwrap_or("");
    let allocating =
        frames.contains(":_allocate_kv_cache") || frames.contains(":initialize_kv_cache_tensors");
    if allocating && inc.engine == crate::facts::engine::id::VLLM {
        inc.facts
            .derive("vllm.kv_pool_allocation", true, &["phase.frames"]);
    }
}

/// ExLlamaV2's autosplit (`load_autosplit`, `load_autosplit_gen`) allocates each layer's
/// share of the cache as it places the layer: a PyTorch failure inside it is the weights and
/// the cache together, as its own `Insufficient VRAM for model and cache` says. Recorded as
/// `oom.cache_with_weights`.
fn autosplit_with_cache(inc: &mut Incident) {
    let frames = inc.facts.str("phase.frames").unwrap_or("");
    if frames.contains(":load_autosplit")
        && inc.engine == crate::facts::engine::id::EXLLAMAV2
        && !inc.facts.contains("oom.cache_with_weights")
    {
        inc.facts
            .derive("oom.cache_with_weights", true, &["phase.frames"]);
    }
}

/// DDP's construction (it broadcasts rank 0's parameters and buffers, and checks their shapes
/// across ranks) or the process group's set-up in the frames: the failure came while the
/// ranks set up, before any step. Recorded as `phase.distributed_setup`.
fn distributed_setup(inc: &mut Incident) {
    const SETUP: &[&str] = &[
        ":_sync_params_and_buffers",
        ":_broadcast_coalesced",
        ":_distributed_broadcast_coalesced",
        ":_verify_param_shape_across_processes",
        ":init_process_group",
    ];
    let frames = inc.facts.str("phase.frames").unwrap_or("");
    if SETUP.iter().any(|f| frames.contains(f)) {
        inc.facts
            .derive("phase.distributed_setup", true, &["phase.frames"]);
    }
}

/// Steps the snapshot counted by the step annotations PyTorch records (`Optimizer.step#`,
/// `ProfilerStep#`): real completed steps, so a lower bound of how far the run got. Recorded
/// as `phase.steps_completed` when no other input counted them. Steps guessed from repeating
/// call sites are not counted: any loop repeats.
fn steps_from_snapshot(inc: &mut Incident) -> Option<f64> {
    if inc.facts.contains("phase.steps_completed") {
        return None;
    }
    let counted = matches!(
        inc.facts.str("snapshot.leak_method"),
        Some("optimizer-steps" | "profiler-steps")
    );
    let n = inc.facts.num("snapshot.leak_steps").filter(|_| counted)?;
    inc.facts
        .derive("phase.steps_completed", n, &["snapshot.leak_steps"]);
    Some(n)
}

/// Records a phase fact read from `source`. A reading from the input the failure itself came
/// from (a snapshot's own OOM, a series' own crash) points at the failure; one from another
/// input (a snapshot beside a log) is derived from that input's fact.
fn record(inc: &mut Incident, name: &str, value: &str, source: &str) {
    let same_input = inc
        .facts
        .get(source)
        .and_then(|f| f.sources.first())
        .is_some_and(|p| p.input == inc.first.input);
    if same_input {
        inc.facts.set(name, value, Some(inc.first.clone()));
    } else {
        inc.facts.derive(name, value, &[source]);
    }
}

/// The phase a series' timing shows, and the sentence saying why; `None` when the series
/// has no reading (the device filled, then its memory was released, and nothing says when
/// relative to the load).
fn series_reading(facts: &Facts, engine: &str) -> Option<(&'static str, String)> {
    let serving = crate::facts::engine::is_serving(engine);
    if facts.bool("series.failed_during_load") == Some(true) {
        let peak = facts
            .num("series.peak_bytes")
            .map_or(String::new(), |p| format!(" to {}", format_bytes_f(p)));
        return Some((
            id::MODEL_LOAD,
            format!(
                "series: memory was still ramping up from idle{peak} when the device filled, before the run ever settled: during loading"
            ),
        ));
    }
    let seconds = |s: f64| crate::facts::evidence::Unit::Seconds.display(&s.into());
    let s = facts.num("series.seconds_since_load")?;
    Some(if s <= 120.0 {
        (
            if serving { id::WARMUP } else { id::FIRST_STEP },
            format!(
                "series: the device filled {} after the load ramp ended: on the first {}",
                seconds(s),
                if serving { "requests" } else { "steps" }
            ),
        )
    } else {
        (
            if serving {
                id::SERVING
            } else {
                id::STEADY_STATE
            },
            format!(
                "series: the device filled {} after the load ramp ended",
                seconds(s)
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::engine::{Domain, id as engine};
    use crate::facts::evidence::Provenance;

    fn incident(facts: Facts) -> Incident {
        let input: crate::facts::evidence::InputName = std::sync::Arc::from("crash.log");
        Incident::from_evidence(
            input.clone(),
            "device-oom",
            engine::PYTORCH,
            Domain::Device,
            Some(0),
            Provenance::at(input, "oom"),
            facts,
        )
    }

    #[test]
    fn the_phase_is_decided_after_fusion() {
        let mut f = Facts::new();
        f.set("phase", "unknown", None);
        f.set("snapshot.oom_category", "optimizer", None);
        let mut inc = incident(f);
        settle_phase(&mut inc);
        assert_eq!(inc.facts.str("phase"), Some("optimizer-step"));
        assert_eq!(inc.phase, "optimizer-step");
        // The log's own reading stands.
        let mut f = Facts::new();
        f.set("phase", "backward", None);
        f.set("snapshot.oom_category", "weights", None);
        let mut inc = incident(f);
        settle_phase(&mut inc);
        assert_eq!(inc.facts.str("phase"), Some("backward"));
        assert_eq!(inc.phase, "backward");
    }

    /// DDP's construction or the process group's set-up in the frames is the ranks setting up.
    #[test]
    fn frames_of_the_ranks_setting_up() {
        let setup = |frames: &str| {
            let mut f = Facts::new();
            f.set("phase.frames", frames, None);
            let mut inc = incident(f);
            settle_phase(&mut inc);
            inc.facts.bool("phase.distributed_setup")
        };
        assert_eq!(
            setup(
                "distributed.py:_distributed_broadcast_coalesced < distributed.py:_sync_params_and_buffers < distributed.py:__init__ < train.py:<module>"
            ),
            Some(true)
        );
        assert_eq!(setup("distributed.py:forward < train.py:<module>"), None);
    }

    #[test]
    fn a_series_reading_comes_last() {
        let mut f = Facts::new();
        f.set("series.seconds_since_load", 30.0, None);
        let mut inc = incident(f.clone());
        settle_phase(&mut inc);
        assert_eq!(inc.phase, "first-step");
        f.set("snapshot.oom_category", "weights", None);
        let mut inc = incident(f);
        settle_phase(&mut inc);
        assert_eq!(inc.phase, "model-load");
    }

    /// Steps counted above a load were another job's; above any other phase they stay.
    #[test]
    fn steps_above_a_load_are_not_the_loads() {
        for (phase, kept) in [("model-load", false), ("backward", true)] {
            let mut f = Facts::new();
            f.set("phase", phase, None);
            f.set("phase.steps_completed", 1043.0, None);
            f.set("phase.epoch", 3.0, None);
            let mut inc = incident(f);
            settle_phase(&mut inc);
            assert_eq!(inc.facts.contains("phase.steps_completed"), kept, "{phase}");
            assert_eq!(inc.facts.contains("phase.epoch"), kept, "{phase}");
        }
    }
}
