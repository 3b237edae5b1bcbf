//! Derived facts: numbers computed from other facts once, in Rust, so every rule sees the
//! same arithmetic and every derived value carries the sources of its inputs.
//!
//! Each producer module may add a derivation here; they run in order, so later ones can use
//! earlier results.

use std::sync::LazyLock;

use regex::Regex;

use crate::facts::evidence::Facts;

/// A derivation reads facts and adds new ones.
pub type Derivation = fn(&mut Facts);

/// Every derivation, in the order they run.
pub const DERIVATIONS: &[Derivation] = &[
    engine_family,
    training_job,
    torch_oom,
    expandable_segments_unused,
    stale_reading_before_start,
    params_from_name,
    model_weights,
    // Local engines and the host side.
    ollama_alloc_kind,
    ollama_beside,
    llamacpp_fit,
    ollama_ram_part,
    ollama_fit,
    xla_fit,
    host_fit,
    ray_fit,
    // LLM serving engines.
    vllm,
    trtllm,
];

/// Runs every derivation.
pub fn derive(facts: &mut Facts) {
    for d in DERIVATIONS {
        d(facts);
    }
}

/// Engines whose PyTorch OOMs the generic training rules must leave to the engine's own
/// rules: an image-generation web UI's OOM is about its model-loading mode and the image's
/// working memory, not a training batch or a leak across steps.
fn engine_family(f: &mut Facts) {
    use crate::facts::engine::id;
    if matches!(f.str("engine"), Some(id::COMFYUI | id::WEBUI)) {
        f.derive("engine.diffusion_ui", true, &["engine"]);
    }
}

/// Whether the job trains. A batch size alone does not say (inference loops have batches
/// too); settings only training has, a training loop's loss values or epochs, gradients or
/// optimizer state in a snapshot, or a failure in a phase only training has, do.
fn training_job(f: &mut Facts) {
    use crate::facts::phase::id;
    const TRAINING_ONLY: &[&str] = &[
        "train.gradient_accumulation_steps",
        "train.global_batch_size",
        "train.optimizer",
        "train.zero_stage",
        "train.lora",
    ];
    const TRAINER_BATCH_FLAGS: &[&str] = &[
        "per_device_train_batch_size",
        "train_micro_batch_size_per_gpu",
        "micro_batch_size_per_gpu",
        "micro_batch_size",
    ];
    let from: Option<&str> = TRAINING_ONLY
        .iter()
        .copied()
        .find(|n| f.contains(n))
        .or_else(|| {
            (f.bool("train.gradient_checkpointing") == Some(true))
                .then_some("train.gradient_checkpointing")
        })
        .or_else(|| {
            f.str("train.batch_flag")
                .is_some_and(|b| TRAINER_BATCH_FLAGS.contains(&b))
                .then_some("train.batch_flag")
        })
        .or_else(|| {
            matches!(f.str("phase"), Some(id::BACKWARD | id::OPTIMIZER_STEP)).then_some("phase")
        })
        // Epochs are a training loop's unit (`Epoch 3:  41%|...`), loss values its output.
        .or_else(|| {
            ["phase.training_loop", "phase.epoch"]
                .into_iter()
                .find(|n| f.contains(n))
        })
        // A snapshot that holds gradients or optimizer state at the OOM is of a training job.
        .or_else(|| {
            [
                "snapshot.category.gradients_bytes",
                "snapshot.category.optimizer_bytes",
            ]
            .into_iter()
            .find(|n| f.num(n).is_some_and(|b| b > 0.0))
        });
    if let Some(from) = from {
        f.derive("job.training", true, &[from]);
    }
}

/// The numbers PyTorch's OOM message implies but does not print.
fn torch_oom(f: &mut Facts) {
    if let Some(requested) = f.num("oom.requested_bytes") {
        if !f.contains("oom.shortfall_bytes") {
            // Without a free figure the whole request counts as missing.
            let free = f.num("oom.free_bytes");
            let from: &[&str] = if free.is_some() {
                &["oom.requested_bytes", "oom.free_bytes"]
            } else {
                &["oom.requested_bytes"]
            };
            f.derive(
                "oom.shortfall_bytes",
                (requested - free.unwrap_or(0.0)).max(0.0),
                from,
            );
        }
    }
    if let (Some(total), Some(free)) = (f.num("oom.total_bytes"), f.num("oom.free_bytes")) {
        if !f.contains("oom.device_used_bytes") {
            f.derive(
                "oom.device_used_bytes",
                (total - free).max(0.0),
                &["oom.total_bytes", "oom.free_bytes"],
            );
        }
    }
    if !f.contains("oom.reserved_bytes") {
        if let (Some(a), Some(u)) = (
            f.num("oom.allocated_bytes"),
            f.num("oom.reserved_unallocated_bytes"),
        ) {
            f.derive(
                "oom.reserved_bytes",
                a + u,
                &["oom.allocated_bytes", "oom.reserved_unallocated_bytes"],
            );
        }
    }
    if let (Some(total), Some(free), Some(reserved)) = (
        f.num("oom.total_bytes"),
        f.num("oom.free_bytes"),
        f.num("oom.reserved_bytes"),
    ) {
        if !f.contains("oom.unaccounted_bytes") {
            f.derive(
                "oom.unaccounted_bytes",
                (total - free - reserved).max(0.0),
                &["oom.total_bytes", "oom.free_bytes", "oom.reserved_bytes"],
            );
        }
    }
    if let (Some(self_used), Some(reserved)) =
        (f.num("oom.self_used_bytes"), f.num("oom.reserved_bytes"))
    {
        if !f.contains("oom.non_torch_self_bytes") {
            f.derive(
                "oom.non_torch_self_bytes",
                (self_used - reserved).max(0.0),
                &["oom.self_used_bytes", "oom.reserved_bytes"],
            );
        }
    }
}

/// Segments the allocator may hold with expandable segments on and still be using them:
/// CUDA graphs' private pools are not expandable and keep their own segments.
const EXPANDABLE_MAX_SEGMENTS: f64 = 64.0;

/// `expandable_segments:True` printed in the log, while the allocator's own statistics say
/// it was not in effect. With it on, PyTorch maps memory into one growing segment per
/// stream and pool (`map_block` adds to `reserved_bytes`, not to `segment`), so a count of
/// segments in the hundreds means ordinary `cudaMalloc` segments: the variable was set too
/// late (after CUDA initialised), in another process, or under a name this PyTorch does not
/// read.
fn expandable_segments_unused(f: &mut Facts) {
    if f.bool("torch.expandable_segments") == Some(true)
        && f.num("torch.stats.segments")
            .is_some_and(|n| n >= EXPANDABLE_MAX_SEGMENTS)
    {
        f.derive(
            "torch.expandable_segments_unused",
            true,
            &["torch.expandable_segments", "torch.stats.segments"],
        );
    }
}

/// A reading of the device taken before the run started (`smi.used_before_start_bytes`) is
/// another process's memory only while that process still holds it. Where the failure's own
/// figures leave no room for it beside this process's memory (the reading plus what PyTorch
/// reserved, or at least allocated, is more than the device), what held it had gone by
/// then (the previous run of the same server, replaced since), and the reading is dropped.
fn stale_reading_before_start(f: &mut Facts) {
    let (Some(before), Some(total)) = (
        f.num("smi.used_before_start_bytes"),
        f.num("oom.total_bytes"),
    ) else {
        return;
    };
    let own = f
        .num("oom.reserved_bytes")
        .or_else(|| f.num("oom.allocated_bytes"));
    if own.is_some_and(|own| before + own > 1.02 * total) {
        f.remove("smi.used_before_start_bytes");
    }
}

/// Bytes per parameter of a dtype name as logs print it.
pub fn dtype_bytes(dtype: &str) -> Option<f64> {
    let d = dtype
        .trim()
        .trim_start_matches("torch.")
        .to_ascii_lowercase();
    Some(match d.as_str() {
        "float32" | "fp32" | "float" | "f32" => 4.0,
        "float16" | "fp16" | "half" | "f16" | "bfloat16" | "bf16" => 2.0,
        "int8" | "fp8" | "float8" | "8bit" | "q8_0" => 1.0,
        "4bit" | "nf4" | "int4" | "fp4" | "q4_0" => 0.5,
        _ => return None,
    })
}

/// A model's size tag (`opt-1.3b`, `Llama-2-70b-chat-hf`, `Qwen3-235B-A22B`, `./models/7B`)
/// read as its parameter count when nothing in the log counted them: each logged name is
/// the name of the model that was run, and the tag is how model hubs spell the count.
/// A tag glued to a letter (`A22B`, a mixture of experts' active parameters) or written as
/// experts x size (`8x7B`, whose experts share layers) is not the total and is left alone;
/// of several tags the largest is the total.
fn params_from_name(f: &mut Facts) {
    if f.contains("model.params") {
        return;
    }
    if let Some(params) = f.str("model.name").and_then(params_in_name) {
        f.derive("model.params", params, &["model.name"]);
    }
}

/// The parameter count a model name's size tag gives, if it has one (see
/// [`params_from_name`]).
pub fn params_in_name(name: &str) -> Option<f64> {
    static TAG: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?:^|[^A-Za-z0-9.])(\d{1,4}(?:\.\d{1,2})?)([bBmM])(?:$|[^A-Za-z0-9])")
            .expect("static regex")
    });
    // The last path component is the model (`/models/7B`, `org/Model-7B`); a directory
    // above it may name something else.
    let tail = name.trim_end_matches(['/', '\\']);
    let base = tail.rsplit(['/', '\\']).next().unwrap_or(tail);
    let base = if base.is_empty() { tail } else { base };
    let mut best: Option<f64> = None;
    // Tags may share a separator (`-7b-`), so search from each match's tag end.
    let mut at = 0;
    while let Some(c) = TAG.captures_at(base, at) {
        let n = c.get(1).expect("group 1");
        at = n.end();
        // `8x7B`: the count of experts before it.
        if base[..n.start()].ends_with(['x', 'X'])
            && base[..n.start() - 1].ends_with(|ch: char| ch.is_ascii_digit())
        {
            continue;
        }
        let Ok(v) = n.as_str().parse::<f64>() else {
            continue;
        };
        let params = match &c[2] {
            "b" | "B" => v * 1e9,
            _ => v * 1e6,
        };
        // Under ten million parameters is no language or diffusion model's tag.
        if params >= 1e7 && best.is_none_or(|b| params > b) {
            best = Some(params);
        }
    }
    best
}

/// Whether a model's name says its weights are quantized (`Llama-2-70B-GPTQ`, `...-AWQ`,
/// `...-Q4_K_M.gguf`, `...-bnb-4bit`, `...-FP8`, `...-exl2`).
fn names_a_quantized_checkpoint(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    [
        "gptq", "awq", "gguf", "ggml", "4bit", "8bit", "int4", "int8", "fp8", "exl2", "nf4", "bnb",
        "w4a16", "w8a8",
    ]
    .iter()
    .any(|q| n.contains(q))
}

fn model_weights(f: &mut Facts) {
    if f.contains("model.weights_bytes") {
        return;
    }
    // A quantized checkpoint's weights are not params x the compute dtype (vLLM logs
    // `dtype=float16` for a GPTQ model).
    let quantized = [
        "model.quantization",
        "vllm.quantization",
        "sglang.quantization",
        "tgi.quantize",
    ]
    .iter()
    .any(|k| f.get(k).is_some_and(|v| v.value.as_str() != Some("None")));
    // vLLM, SGLang and TGI load a checkpoint in 16 bits unless told otherwise (`--dtype
    // auto` casts a 32-bit checkpoint down to float16): without a logged dtype, their
    // weights are still two bytes a parameter.
    let dtype = match f.str("model.dtype").and_then(dtype_bytes) {
        Some(bytes) => Some((bytes, "model.dtype")),
        None => f
            .str("engine")
            .filter(|e| ["vllm", "sglang", "tgi"].contains(e))
            .map(|_| (2.0, "engine")),
    };
    if let (Some(params), Some((bytes, dtype_source))) = (f.num("model.params"), dtype) {
        // A name that says quantized, next to a 16- or 32-bit dtype: that dtype is the
        // compute's, not the weights'.
        let named_quantized = bytes >= 2.0
            && f.str("model.name")
                .is_some_and(names_a_quantized_checkpoint);
        if quantized || named_quantized {
            return;
        }
        // The weights on one device: a serving engine's tensor and pipeline parallelism
        // splits them over its GPUs.
        let mut sources = vec!["model.params", dtype_source];
        let mut shards = 1.0;
        for k in [
            "vllm.tensor_parallel_size",
            "vllm.pipeline_parallel_size",
            "sglang.tp_size",
            "tgi.num_shard",
            "trtllm.tp_size",
        ] {
            if let Some(n) = f.num(k).filter(|n| *n > 1.0) {
                shards *= n;
                sources.push(k);
            }
        }
        f.derive("model.weights_bytes", params * bytes / shards, &sources);
    }
}

const GIB: f64 = 1073741824.0;

fn round_down(x: f64, step: f64) -> f64 {
    (x / step).floor() * step
}

/// Ollama prints its per-device layout (`msg="model weights" device=CUDA0 size=…`, `"kv
/// cache"`, `"compute graph"`) before the runner allocates it. When the runner's failed
/// allocation does not say what it was for, a request the size of exactly one of those parts
/// (within the layout's one-decimal rounding) is that part.
/// What an Ollama server held on the GPU (`ollama ps`) when the failure is another
/// program's: someone else's memory to that program. Ollama's own failure is its models.
fn ollama_beside(f: &mut Facts) {
    let own = [f.str("engine"), f.str("failure.engine")]
        .iter()
        .any(|e| matches!(*e, Some("ollama") | Some("llama.cpp")));
    if own {
        return;
    }
    if let Some(b) = f.num("ollama.resident_gpu_bytes").filter(|&b| b > 0.0) {
        f.derive("ollama.beside_bytes", b, &["ollama.resident_gpu_bytes"]);
    }
}

fn ollama_alloc_kind(f: &mut Facts) {
    if f.str("llamacpp.alloc_kind").is_some_and(|k| k != "unknown") {
        return;
    }
    let Some(req) = f.num("oom.requested_bytes").filter(|r| *r > 0.0) else {
        return;
    };
    let matching: Vec<(&str, &str)> = [
        ("ollama.weights_gpu_bytes", "weights"),
        ("ollama.kv_gpu_bytes", "kv"),
        ("ollama.graph_gpu_bytes", "compute"),
    ]
    .into_iter()
    .filter(|(n, _)| {
        f.num(n)
            .is_some_and(|v| v > 0.0 && (req - v).abs() <= 0.03 * v)
    })
    .collect();
    if let [(src, kind)] = matching[..] {
        f.derive("llamacpp.alloc_kind", kind, &[src, "oom.requested_bytes"]);
    }
}

/// llama.cpp (and Ollama's llama.cpp runner): what the logged capacity can hold. Free device
/// memory at load (less 5%) is the budget; weights per layer come from the failed weights
/// allocation (or the model buffers / file size), KV bytes per token from the KV buffers (or
/// the failed KV allocation) over the context. Nothing is derived without the capacity.
fn llamacpp_fit(f: &mut Facts) {
    let single_gpu = f.num("llamacpp.gpu_count").is_none_or(|n| n <= 1.0);
    let kind = f.str("llamacpp.alloc_kind").unwrap_or("").to_string();
    // The budget: free device memory when the model was loaded.
    // On Metal the device is Metal's working-set budget, which nothing else this process
    // holds counts against before the load: all of it is the budget.
    let metal = f.str("oom.backend") == Some("metal");
    let free_src = ["llamacpp.free_vram_bytes", "ollama.gpu_free_bytes"]
        .into_iter()
        .chain(metal.then_some("llamacpp.device_total_bytes"))
        .find(|n| f.num(n).is_some_and(|v| v > 0.0));
    if let Some(src) = free_src {
        if !f.contains("llamacpp.vram_budget_bytes") {
            let free = f.num(src).unwrap_or(0.0);
            f.derive("llamacpp.vram_budget_bytes", (free * 0.95).floor(), &[src]);
        }
    }
    // KV bytes per token of context on the device.
    if !f.contains("llamacpp.kv_bytes_per_token") {
        let cells = ["llamacpp.kv_cells", "llamacpp.n_ctx"]
            .into_iter()
            .find(|n| f.num(n).is_some_and(|v| v > 0.0));
        let kv = ["llamacpp.kv_gpu_bytes", "llamacpp.kv_bytes"]
            .into_iter()
            .find(|n| f.num(n).is_some_and(|v| v > 0.0));
        match (kv, cells) {
            (Some(kv), Some(cells)) => {
                let v = f.num(kv).unwrap_or(0.0) / f.num(cells).unwrap_or(1.0);
                f.derive("llamacpp.kv_bytes_per_token", v, &[kv, cells]);
            }
            _ => {
                if let (true, true, Some(req), Some(n_ctx)) = (
                    kind == "kv",
                    single_gpu,
                    f.num("oom.requested_bytes"),
                    f.num("llamacpp.n_ctx").filter(|n| *n > 0.0),
                ) {
                    f.derive(
                        "llamacpp.kv_bytes_per_token",
                        req / n_ctx,
                        &["oom.requested_bytes", "llamacpp.n_ctx"],
                    );
                }
            }
        }
    }
    // Weights of one layer on the device.
    let n_layer = f.num("llamacpp.n_layer");
    let all_layers = f.num("llamacpp.layers_total").or(n_layer.map(|n| n + 1.0));
    let attempted = match (f.num("llamacpp.n_gpu_layers"), all_layers) {
        (Some(ngl), Some(all)) => Some(ngl.min(all)),
        (None, Some(all)) => Some(all),
        (Some(ngl), None) => Some(ngl),
        _ => None,
    };
    if !f.contains("llamacpp.layer_bytes") {
        let req = f.num("oom.requested_bytes");
        if let (true, true, Some(req), Some(att)) = (
            kind == "weights",
            single_gpu,
            req,
            attempted.filter(|a| *a > 0.0),
        ) {
            let mut from = vec!["oom.requested_bytes"];
            from.extend(
                [
                    "llamacpp.n_gpu_layers",
                    "llamacpp.layers_total",
                    "llamacpp.n_layer",
                ]
                .into_iter()
                .filter(|n| f.contains(n)),
            );
            f.derive("llamacpp.layer_bytes", req / att, &from);
        } else if let (Some(m), Some(off)) = (
            f.num("llamacpp.model_gpu_bytes").filter(|m| *m > 0.0),
            f.num("llamacpp.layers_offloaded").filter(|n| *n > 0.0),
        ) {
            f.derive(
                "llamacpp.layer_bytes",
                m / off,
                &["llamacpp.model_gpu_bytes", "llamacpp.layers_offloaded"],
            );
        } else if let (Some(w), Some(all)) = (f.num("model.weights_bytes"), all_layers) {
            let mut from = vec!["model.weights_bytes"];
            from.extend(
                ["llamacpp.layers_total", "llamacpp.n_layer"]
                    .into_iter()
                    .filter(|n| f.contains(n)),
            );
            f.derive("llamacpp.layer_bytes", w / all, &from);
        }
    }
    let Some(budget) = f.num("llamacpp.vram_budget_bytes") else {
        return;
    };
    // Layers that fit, leaving room for the KV cache and compute buffers (what the log shows
    // of them, else 15% of the budget and at least 1.5 GiB).
    if let (Some(layer), false) = (
        f.num("llamacpp.layer_bytes").filter(|l| *l > 0.0),
        f.contains("llamacpp.ngl_fit"),
    ) {
        let shown = f.num("llamacpp.kv_gpu_bytes").unwrap_or(0.0)
            + f.num("llamacpp.compute_gpu_bytes").unwrap_or(0.0);
        let reserve = if shown > 0.0 && kind != "weights" {
            shown
        } else {
            (0.15 * budget).max(1.5 * GIB)
        };
        let mut fit = ((budget - reserve) / layer).floor().max(0.0);
        if let Some(att) = attempted {
            fit = fit.min((att - 1.0).max(0.0));
        }
        let mut from = vec!["llamacpp.vram_budget_bytes", "llamacpp.layer_bytes"];
        from.extend(
            ["llamacpp.kv_gpu_bytes", "llamacpp.compute_gpu_bytes"]
                .into_iter()
                .filter(|n| f.contains(n) && kind != "weights"),
        );
        f.derive("llamacpp.ngl_fit", fit, &from);
        // The quantization at which every layer would fit.
        if let (Some(bpw), Some(all)) = (f.num("llamacpp.bpw"), all_layers) {
            let bpw_fit = bpw * (budget - reserve) / (layer * all);
            if bpw_fit > 0.0 && bpw_fit < bpw {
                let v = (bpw_fit * 100.0).floor() / 100.0;
                f.derive(
                    "llamacpp.bpw_fit",
                    v,
                    &[
                        "llamacpp.bpw",
                        "llamacpp.vram_budget_bytes",
                        "llamacpp.layer_bytes",
                    ],
                );
                if let Some(q) = crate::ingest::log::engines::llamacpp::quant_for_bpw(bpw_fit) {
                    f.derive("llamacpp.quant_fit", q, &["llamacpp.bpw_fit"]);
                }
            }
        }
    }
    // Context that fits next to the weights and compute buffers.
    if f.bool("llamacpp.kv_offload") == Some(false) || f.contains("llamacpp.ctx_fit_tokens") {
        return;
    }
    let (Some(per_token), Some(weights)) = (
        f.num("llamacpp.kv_bytes_per_token").filter(|v| *v > 0.0),
        f.num("llamacpp.model_gpu_bytes"),
    ) else {
        return;
    };
    let compute_src = f.contains("llamacpp.compute_gpu_bytes") && kind != "compute";
    let compute = if compute_src {
        f.num("llamacpp.compute_gpu_bytes").unwrap_or(0.0)
    } else {
        GIB
    };
    let room = budget - weights - compute;
    let mut from = vec![
        "llamacpp.vram_budget_bytes",
        "llamacpp.model_gpu_bytes",
        "llamacpp.kv_bytes_per_token",
    ];
    if compute_src {
        from.push("llamacpp.compute_gpu_bytes");
    }
    let step = |t: f64| if t >= 4096.0 { 1024.0 } else { 256.0 };
    let fit = room / per_token;
    if fit >= 256.0 {
        f.derive("llamacpp.ctx_fit_tokens", round_down(fit, step(fit)), &from);
    } else {
        f.derive("llamacpp.ctx_fit_tokens", 0.0, &from);
    }
    let current = f
        .str("llamacpp.type_k")
        .unwrap_or("f16")
        .to_ascii_lowercase();
    if current == "f16" || current == "bf16" || current == "f32" {
        let bytes_now = if current == "f32" { 32.0 } else { 16.0 };
        let fit8 = room / (per_token * 8.5 / bytes_now);
        if fit8 >= 256.0 {
            f.derive(
                "llamacpp.ctx_fit_q8_tokens",
                round_down(fit8, step(fit8)),
                &from,
            );
        }
    }
}

/// What Ollama kept in system RAM: the layout lines' CPU parts when it printed them (0.11.5+),
/// else, when the estimate offloaded only some layers, its full need less the GPU part.
fn ollama_ram_part(f: &mut Facts) {
    let cpu: Vec<&str> = ["ollama.weights_cpu_bytes", "ollama.kv_cpu_bytes"]
        .into_iter()
        .filter(|n| f.num(n).is_some())
        .collect();
    if !cpu.is_empty() {
        let sum: f64 = cpu.iter().filter_map(|n| f.num(n)).sum();
        if sum > 0.0 {
            f.derive("ollama.ram_part_bytes", sum, &cpu);
        }
        return;
    }
    let partial_offload = matches!(
        (f.num("ollama.layers_offload"), f.num("ollama.layers_model")),
        (Some(o), Some(m)) if o < m
    );
    if let (true, Some(full), Some(gpu)) = (
        partial_offload,
        f.num("ollama.memory_required_full_bytes"),
        f.num("ollama.memory_required_partial_bytes"),
    ) {
        if full > gpu {
            f.derive(
                "ollama.ram_part_bytes",
                full - gpu,
                &[
                    "ollama.memory_required_full_bytes",
                    "ollama.memory_required_partial_bytes",
                    "ollama.layers_offload",
                ],
            );
        }
    }
}

/// Ollama: num_ctx that fits, from the runner's llama.cpp numbers when it printed them, else
/// from Ollama's own estimate (KV = num_ctx × parallel tokens). For a refused load, the
/// system-memory shortfall.
fn ollama_fit(f: &mut Facts) {
    if let (Some(req), Some(avail)) = (
        f.num("ollama.system_required_bytes"),
        f.num("ollama.system_available_bytes"),
    ) {
        if req > avail && !f.contains("ollama.system_shortfall_bytes") {
            f.derive(
                "ollama.system_shortfall_bytes",
                req - avail,
                &[
                    "ollama.system_required_bytes",
                    "ollama.system_available_bytes",
                ],
            );
        }
    }
    if f.contains("ollama.num_ctx_fit") {
        return;
    }
    let parallel_src = ["ollama.num_parallel", "llamacpp.n_seq_max"]
        .into_iter()
        .find(|n| f.num(n).is_some_and(|v| v >= 1.0));
    let parallel = parallel_src.and_then(|n| f.num(n)).unwrap_or(1.0);
    let step = |t: f64| if t >= 4096.0 { 1024.0 } else { 256.0 };
    let with_parallel = |mut v: Vec<&'static str>| {
        if let Some(p) = parallel_src {
            v.push(p);
        }
        v
    };
    // A refused load: cut the KV cache by the shortfall.
    if let (Some(short), Some(num_ctx)) = (
        f.num("ollama.system_shortfall_bytes"),
        f.num("ollama.num_ctx"),
    ) {
        let kv_src = ["ollama.kv_cpu_bytes", "ollama.memory_required_kv_bytes"]
            .into_iter()
            .find(|n| f.num(n).is_some_and(|v| v > 0.0));
        if let Some(kv_src) = kv_src {
            let kv = f.num(kv_src).unwrap_or(0.0);
            if kv > short * 1.1 {
                let fit = num_ctx * (kv - short * 1.1) / kv;
                if fit >= 256.0 {
                    f.derive(
                        "ollama.num_ctx_fit",
                        round_down(fit, step(fit)),
                        &["ollama.system_shortfall_bytes", "ollama.num_ctx", kv_src],
                    );
                }
            }
        }
        return;
    }
    // The runner's numbers (llama.cpp lines) already gave a context that fits.
    if let Some(total) = f.num("llamacpp.ctx_fit_tokens").filter(|t| *t > 0.0) {
        let fit = total / parallel;
        if fit >= 256.0 {
            f.derive(
                "ollama.num_ctx_fit",
                round_down(fit, step(fit)),
                &with_parallel(vec!["llamacpp.ctx_fit_tokens"]),
            );
        }
        if let Some(q8) = f.num("llamacpp.ctx_fit_q8_tokens") {
            let fit = q8 / parallel;
            if fit >= 256.0 {
                f.derive(
                    "ollama.num_ctx_fit_q8",
                    round_down(fit, step(fit)),
                    &with_parallel(vec!["llamacpp.ctx_fit_q8_tokens"]),
                );
            }
        }
        return;
    }
    // Ollama's estimate.
    let Some(num_ctx) = f.num("ollama.num_ctx") else {
        return;
    };
    let ctx_total = num_ctx * parallel;
    let kv_src = ["ollama.memory_required_kv_bytes", "ollama.kv_gpu_bytes"]
        .into_iter()
        .find(|n| f.num(n).is_some_and(|v| v > 0.0));
    let free_src = ["ollama.gpu_free_bytes", "ollama.memory_available_bytes"]
        .into_iter()
        .find(|n| f.num(n).is_some_and(|v| v > 0.0));
    let weights_src = [
        "ollama.weights_gpu_bytes",
        "llamacpp.model_gpu_bytes",
        "ollama.memory_weights_bytes",
    ]
    .into_iter()
    .find(|n| f.num(n).is_some_and(|v| v > 0.0));
    let (Some(kv_src), Some(free_src), Some(weights_src)) = (kv_src, free_src, weights_src) else {
        return;
    };
    let graph_src = ["ollama.graph_gpu_bytes", "ollama.memory_graph_bytes"]
        .into_iter()
        .find(|n| f.num(n).is_some());
    let per_token = f.num(kv_src).unwrap_or(0.0) / ctx_total;
    let graph = graph_src.and_then(|g| f.num(g)).unwrap_or(GIB);
    let overhead = f.num("ollama.gpu_overhead_bytes").unwrap_or(0.0);
    let room = f.num(free_src).unwrap_or(0.0) * 0.95
        - overhead
        - f.num(weights_src).unwrap_or(0.0)
        - graph;
    let mut from = with_parallel(vec!["ollama.num_ctx", kv_src, free_src, weights_src]);
    if let Some(g) = graph_src {
        from.push(g);
    }
    if per_token > 0.0 {
        let fit = room / per_token / parallel;
        if fit >= 256.0 && fit < num_ctx {
            f.derive("ollama.num_ctx_fit", round_down(fit, step(fit)), &from);
        }
        let kv_type = f.str("ollama.kv_cache_type").unwrap_or("f16").to_string();
        if kv_type == "f16" || kv_type.is_empty() {
            let fit8 = room / (per_token * 8.5 / 16.0) / parallel;
            if fit8 >= 256.0 {
                f.derive("ollama.num_ctx_fit_q8", round_down(fit8, step(fit8)), &from);
            }
        }
    }
}

/// XLA: the device size implied by the pool limit and the memory fraction (JAX preallocates
/// 75% by default), and the fraction that would hold what the program asked for.
fn xla_fit(f: &mut Facts) {
    if !f.contains("xla.free_in_pool_bytes") {
        if let (Some(l), Some(u)) = (f.num("xla.pool_limit_bytes"), f.num("xla.in_use_bytes")) {
            f.derive(
                "xla.free_in_pool_bytes",
                (l - u).max(0.0),
                &["xla.pool_limit_bytes", "xla.in_use_bytes"],
            );
        }
    }
    let jax = f.str("failure.engine") == Some("jax");
    if !jax || f.contains("xla.mem_fraction_fit") {
        return;
    }
    let Some(limit) = f.num("xla.pool_limit_bytes") else {
        return;
    };
    let preallocating = f.bool("xla.preallocate") != Some(false);
    // Without a fraction set, the default (75 % in current JAX, 90 % in older releases) shows
    // in the pool against the device's size, where a reading of the device gives that (the
    // exact ratio: the pool is that fraction of the device in bytes, not whole blocks).
    let measured = f
        .num("smi.query_total_bytes")
        .map(|total| limit / total)
        .filter(|fr| (0.5..=0.99).contains(fr));
    let (fraction, mut from) = match (f.num("xla.mem_fraction"), measured) {
        (Some(fr), _) => (fr, vec!["xla.pool_limit_bytes", "xla.mem_fraction"]),
        (None, Some(fr)) if preallocating => {
            (fr, vec!["xla.pool_limit_bytes", "smi.query_total_bytes"])
        }
        (None, None) if preallocating => (0.75, vec!["xla.pool_limit_bytes"]),
        _ => return,
    };
    let total = limit / fraction;
    if !f.contains("xla.device_total_bytes") {
        f.derive("xla.device_total_bytes", total.round(), &from);
    }
    let used_src = ["xla.in_use_bytes", "xla.peak_in_use_bytes"]
        .into_iter()
        .find(|n| f.contains(n));
    let (Some(used_src), Some(req)) = (used_src, f.num("oom.requested_bytes")) else {
        return;
    };
    let need = f.num(used_src).unwrap_or(0.0) + req;
    let fit = ((need / total + 0.02) * 20.0).ceil() / 20.0;
    if fit > fraction && fit <= 0.95 {
        from.push(used_src);
        from.push("oom.requested_bytes");
        f.derive("xla.mem_fraction_fit", fit, &from);
    }
}

/// Host kills: what the workload needed at least, and a limit that holds it with headroom.
fn host_fit(f: &mut Facts) {
    if f.str("failure.kind") != Some("host-oom") || f.contains("host.required_bytes") {
        return;
    }
    let limited = matches!(
        f.str("host.killer"),
        Some("memcg" | "kubernetes" | "docker" | "containerd" | "slurm" | "eviction")
    );
    let mut best: Option<(f64, &'static str)> = None;
    let candidates: &[&'static str] = if limited {
        &[
            "host.cgroup_usage_bytes",
            "host.victim_anon_rss_bytes",
            "host.cgroup_limit_bytes",
            "slurm.mem_bytes",
        ]
    } else {
        &["host.victim_anon_rss_bytes", "host.cgroup_usage_bytes"]
    };
    for n in candidates {
        if let Some(v) = f.num(n).filter(|v| *v > 0.0) {
            if best.is_none_or(|(b, _)| v > b) {
                best = Some((v, n));
            }
        }
    }
    let Some((req, src)) = best else {
        return;
    };
    f.derive("host.required_bytes", req, &[src]);
    // A limit to set needs the cgroup's own numbers: the killed process is one of the
    // cgroup's (a DataLoader worker next to its trainer), so its size alone can sit below
    // the limit already in force, and a value from it could point the limit down.
    let cgroup_known = f.contains("host.cgroup_usage_bytes")
        || f.contains("host.cgroup_limit_bytes")
        || f.contains("slurm.mem_bytes");
    if limited && cgroup_known {
        let fit = ((req * 1.25) / GIB).ceil() * GIB;
        f.derive("host.limit_fit_bytes", fit, &["host.required_bytes"]);
    }
}

/// Ray: a `memory=` request matching the killed task, and how many such tasks fit.
fn ray_fit(f: &mut Facts) {
    if f.str("host.killer") != Some("ray") {
        return;
    }
    let Some(task) = f.num("host.victim_anon_rss_bytes").filter(|v| *v > 0.0) else {
        return;
    };
    if !f.contains("ray.task_memory_fit_bytes") {
        let fit = ((task * 1.2) / (GIB / 2.0)).ceil() * (GIB / 2.0);
        f.derive(
            "ray.task_memory_fit_bytes",
            fit,
            &["host.victim_anon_rss_bytes"],
        );
    }
    if let (Some(total), Some(thr), false) = (
        f.num("host.total_ram_bytes"),
        f.num("ray.memory_usage_threshold"),
        f.contains("ray.concurrency_fit"),
    ) {
        let n = (total * thr / (task * 1.2)).floor().max(1.0);
        f.derive(
            "ray.concurrency_fit",
            n,
            &[
                "host.total_ram_bytes",
                "ray.memory_usage_threshold",
                "host.victim_anon_rss_bytes",
            ],
        );
    }
}

/// vLLM's KV arithmetic: tokens from V0 blocks, the device total from the budget, bytes per
/// token, and the longest sequence the cache holds.
fn vllm(f: &mut Facts) {
    // vLLM's default budget is 0.9 in every version; when the log shows vLLM ran but not
    // the setting, the default was in force. Its source is the line that names the version.
    // Filled here once, so rules read `vllm.gpu_memory_utilization` instead of each
    // repeating the default.
    if !f.contains("vllm.gpu_memory_utilization") {
        if f.contains("vllm.version") {
            f.derive("vllm.gpu_memory_utilization", 0.9, &["vllm.version"]);
        } else if f.contains("vllm.v1") {
            f.derive("vllm.gpu_memory_utilization", 0.9, &["vllm.v1"]);
        } else if f.str("engine") == Some(crate::facts::engine::id::VLLM) {
            f.derive("vllm.gpu_memory_utilization", 0.9, &["engine"]);
        }
    }
    if !f.contains("vllm.kv_cache_tokens") {
        if let Some(blocks) = f.num("vllm.gpu_blocks") {
            // 16 tokens per block is vLLM's CUDA default when the log does not say.
            let bs = f.num("vllm.block_size").unwrap_or(16.0);
            f.derive(
                "vllm.kv_cache_tokens",
                blocks * bs,
                &["vllm.gpu_blocks", "vllm.block_size"],
            );
        } else if let (Some(c), Some(len)) =
            (f.num("vllm.max_concurrency"), f.num("vllm.max_model_len"))
        {
            f.derive(
                "vllm.kv_cache_tokens",
                (c * len).floor(),
                &["vllm.max_concurrency", "vllm.max_model_len"],
            );
        }
    }
    // V1 logs the non-KV total and what is left for the KV cache: together, the budget.
    if !f.contains("vllm.budget_bytes") {
        if let (Some(n), Some(kv)) = (f.num("vllm.non_kv_bytes"), f.num("vllm.kv_cache_bytes")) {
            f.derive(
                "vllm.budget_bytes",
                n + kv,
                &["vllm.non_kv_bytes", "vllm.kv_cache_bytes"],
            );
        }
    }
    if !f.contains("vllm.gpu_total_bytes") {
        if let (Some(b), Some(u)) = (
            f.num("vllm.budget_bytes"),
            f.num("vllm.gpu_memory_utilization"),
        ) {
            if u > 0.0 {
                f.derive(
                    "vllm.gpu_total_bytes",
                    b / u,
                    &["vllm.budget_bytes", "vllm.gpu_memory_utilization"],
                );
            }
        }
    }
    if !f.contains("vllm.budget_bytes") {
        if let (Some(t), Some(u)) = (
            f.num("vllm.gpu_total_bytes"),
            f.num("vllm.gpu_memory_utilization"),
        ) {
            f.derive(
                "vllm.budget_bytes",
                t * u,
                &["vllm.gpu_total_bytes", "vllm.gpu_memory_utilization"],
            );
        }
    }
    if !f.contains("vllm.kv_bytes_per_token") {
        match (
            f.num("vllm.kv_cache_bytes"),
            f.num("vllm.kv_cache_tokens"),
            f.num("vllm.kv_needed_bytes"),
            f.num("vllm.max_model_len"),
        ) {
            (Some(b), Some(t), _, _) if b > 0.0 && t > 0.0 => f.derive(
                "vllm.kv_bytes_per_token",
                b / t,
                &["vllm.kv_cache_bytes", "vllm.kv_cache_tokens"],
            ),
            (_, _, Some(need), Some(len)) if need > 0.0 && len > 0.0 => f.derive(
                "vllm.kv_bytes_per_token",
                need / len,
                &["vllm.kv_needed_bytes", "vllm.max_model_len"],
            ),
            _ => {}
        }
    }
    if !f.contains("vllm.kv_capacity_tokens") {
        if f.contains("vllm.estimated_max_model_len") {
            let v = f.num("vllm.estimated_max_model_len").unwrap_or(0.0);
            f.derive(
                "vllm.kv_capacity_tokens",
                v,
                &["vllm.estimated_max_model_len"],
            );
        } else if let Some(t) = f.num("vllm.kv_cache_tokens") {
            f.derive(
                "vllm.kv_capacity_tokens",
                t.max(0.0),
                &["vllm.kv_cache_tokens"],
            );
        } else if let (Some(b), Some(per)) = (
            f.num("vllm.kv_cache_bytes"),
            f.num("vllm.kv_bytes_per_token"),
        ) {
            if per > 0.0 {
                f.derive(
                    "vllm.kv_capacity_tokens",
                    (b / per).floor().max(0.0),
                    &["vllm.kv_cache_bytes", "vllm.kv_bytes_per_token"],
                );
            }
        }
    }
}

/// The share a setting gave a pool, read off the pool and what it was a share of. A pool is
/// whole blocks or pages, a little under its share: a ratio within about a block of a round
/// setting (0.894 for 0.9) is that setting; otherwise the ratio to two places.
fn measured_share(part: f64, whole: f64) -> Option<f64> {
    if whole <= 0.0 {
        return None;
    }
    let r = part / whole;
    let round = (r * 20.0).round() / 20.0;
    Some(if (r - round).abs() <= 0.012 {
        round
    } else {
        (r * 100.0).round() / 100.0
    })
}

/// TensorRT-LLM: the KV pool's share of the free memory when the log shows the runtime but not
/// the setting: the pool it allocated over the memory it found free (`available: 57.12 GiB`,
/// `Allocated 45.69 GiB for max tokens`: 0.8, as an example server sets it); and KV tokens
/// from blocks.
fn trtllm(f: &mut Facts) {
    if !f.contains("trtllm.free_gpu_memory_fraction") {
        let measured = match (
            f.num("trtllm.kv_cache_bytes"),
            f.num("trtllm.free_after_weights_bytes"),
        ) {
            (Some(kv), Some(free)) => measured_share(kv, free).filter(|r| *r > 0.05 && *r <= 1.0),
            _ => None,
        };
        if let Some(r) = measured {
            f.derive(
                "trtllm.free_gpu_memory_fraction",
                r,
                &["trtllm.kv_cache_bytes", "trtllm.free_after_weights_bytes"],
            );
        }
        // Not the default from the version alone: a version line is no evidence that a KV pool
        // was sized (TensorRT-LLM's Python runtime before 0.8 has none); rules take 0.9 where
        // the share is not known.
    }
    if !f.contains("trtllm.kv_tokens") {
        if let (Some(b), Some(t)) = (f.num("trtllm.kv_blocks"), f.num("trtllm.tokens_per_block")) {
            f.derive(
                "trtllm.kv_tokens",
                b * t,
                &["trtllm.kv_blocks", "trtllm.tokens_per_block"],
            );
        }
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    /// A reading taken before the start that would not fit beside the failing process's own
    /// memory was of something gone by the failure; one that fits is kept.
    #[test]
    fn a_reading_before_the_start_must_fit_beside_the_failure() {
        const GIB: f64 = 1073741824.0;
        let with = |before: f64, allocated: f64| {
            let mut f = Facts::new();
            f.set("smi.used_before_start_bytes", before * GIB, None);
            f.set("oom.total_bytes", 22.2 * GIB, None);
            f.set("oom.allocated_bytes", allocated * GIB, None);
            f.set("oom.free_bytes", 0.02 * GIB, None);
            derive(&mut f);
            f.num("smi.used_before_start_bytes").map(|b| b / GIB)
        };
        assert_eq!(with(9.3, 15.87), None);
        assert_eq!(with(9.3, 12.0), Some(9.3));
    }

    #[test]
    fn a_model_names_size_tag_is_its_parameter_count() {
        for (name, params) in [
            ("facebook/opt-1.3b", Some(1.3e9)),
            ("meta-llama/Llama-2-70b-chat-hf", Some(70e9)),
            ("Qwen/Qwen2.5-7B-Instruct", Some(7e9)),
            (
                "Qwen_Qwen3-235B-A22B-Instruct-2507-IQ3_XS-00001-of-00003.gguf",
                Some(235e9),
            ),
            ("./models/7B", Some(7e9)),
            ("/models/7B/", Some(7e9)),
            ("facebook/opt-350m", Some(350e6)),
            ("deepseek-coder-6.7b-instruct", Some(6.7e9)),
            // No total in the name: experts x size, active parameters only, no tag.
            ("mistralai/Mixtral-8x7B-Instruct-v0.1", None),
            ("Qwen/Qwen1.5-MoE-A2.7B", None),
            ("gpt2", None),
            ("openai/whisper-large-v3", None),
            ("BAAI/bge-m3", None),
            ("microsoft/Phi-3-mini-4k-instruct", None),
        ] {
            assert_eq!(params_in_name(name), params, "{name}");
        }
        let mut f = Facts::new();
        f.set("model.name", "facebook/opt-1.3b", None);
        derive(&mut f);
        assert_eq!(f.num("model.params"), Some(1.3e9));
        // The weights follow from the dtype, per device, unless the checkpoint is quantized.
        let weights = |name: &str, extra: &[(&str, &str)]| {
            let mut f = Facts::new();
            f.set("model.name", name, None);
            f.set("model.dtype", "float16", None);
            for (k, v) in extra {
                f.set(k, *v, None);
            }
            derive(&mut f);
            f.num("model.weights_bytes")
        };
        assert_eq!(weights("meta-llama/Llama-2-70b-hf", &[]), Some(140e9));
        let mut f = Facts::new();
        f.set("model.name", "meta-llama/Llama-2-70b-hf", None);
        f.set("model.dtype", "float16", None);
        f.set("vllm.tensor_parallel_size", 4.0, None);
        derive(&mut f);
        assert_eq!(f.num("model.weights_bytes"), Some(35e9));
        assert_eq!(weights("TheBloke/Llama-2-70B-GPTQ", &[]), None);
        assert_eq!(
            weights("meta-llama/Llama-2-70b-hf", &[("vllm.quantization", "awq")]),
            None
        );
        assert_eq!(
            weights(
                "meta-llama/Llama-2-70b-hf",
                &[("vllm.quantization", "None")]
            ),
            Some(140e9)
        );
        // A count the log printed wins over the name.
        let mut f = Facts::new();
        f.set("model.name", "facebook/opt-1.3b", None);
        f.set("model.params", 1.32e9, None);
        derive(&mut f);
        assert_eq!(f.num("model.params"), Some(1.32e9));
    }

    #[test]
    fn expandable_segments_in_the_environment_but_not_in_the_allocator() {
        let run = |segments: f64| {
            let mut f = Facts::new();
            f.set("torch.expandable_segments", true, None);
            f.set("torch.stats.segments", segments, None);
            derive(&mut f);
            f.bool("torch.expandable_segments_unused")
        };
        assert_eq!(run(412.0), Some(true));
        // A few segments: a CUDA graph's private pool beside the expandable ones.
        assert_eq!(run(6.0), None);
        // Not set at all: nothing to say about the setting.
        let mut f = Facts::new();
        f.set("torch.stats.segments", 412.0, None);
        derive(&mut f);
        assert_eq!(f.bool("torch.expandable_segments_unused"), None);
    }

    /// TensorRT-LLM's KV pool share, read off the pool it allocated and the memory it found
    /// free; a share within a block of a round setting is that setting.
    #[test]
    fn trtllm_pool_share_from_what_it_allocated() {
        let share = |kv: f64, free: f64| {
            let mut f = Facts::new();
            f.set("trtllm.version", "0.14.0", None);
            f.set("trtllm.kv_cache_bytes", kv * GIB, None);
            f.set("trtllm.free_after_weights_bytes", free * GIB, None);
            derive(&mut f);
            f.num("trtllm.free_gpu_memory_fraction")
        };
        assert_eq!(share(45.69, 57.12), Some(0.8));
        assert_eq!(share(4.66, 5.21), Some(0.9));
        assert_eq!(share(30.0, 40.0), Some(0.75));
        assert_eq!(share(33.2, 40.0), Some(0.83));
        let mut f = Facts::new();
        f.set("trtllm.version", "0.14.0", None);
        derive(&mut f);
        assert_eq!(f.num("trtllm.free_gpu_memory_fraction"), None);
    }

    #[test]
    fn torch_numbers() {
        let mut f = Facts::new();
        f.set("oom.total_bytes", 24.0, None);
        f.set("oom.free_bytes", 1.0, None);
        f.set("oom.allocated_bytes", 10.0, None);
        f.set("oom.reserved_unallocated_bytes", 2.0, None);
        f.set("oom.self_used_bytes", 15.0, None);
        derive(&mut f);
        assert_eq!(f.num("oom.reserved_bytes"), Some(12.0));
        assert_eq!(f.num("oom.unaccounted_bytes"), Some(11.0));
        assert_eq!(f.num("oom.non_torch_self_bytes"), Some(3.0));
        assert_eq!(f.num("oom.device_used_bytes"), Some(23.0));
    }

    #[test]
    fn shortfall_is_request_minus_free() {
        let mut f = Facts::new();
        f.set("oom.requested_bytes", 5.0, None);
        f.set("oom.free_bytes", 2.0, None);
        derive(&mut f);
        assert_eq!(f.num("oom.shortfall_bytes"), Some(3.0));
        let mut f = Facts::new();
        f.set("oom.requested_bytes", 1.0, None);
        f.set("oom.free_bytes", 2.0, None);
        derive(&mut f);
        assert_eq!(f.num("oom.shortfall_bytes"), Some(0.0));
        let mut f = Facts::new();
        f.set("oom.requested_bytes", 4.0, None);
        derive(&mut f);
        assert_eq!(f.num("oom.shortfall_bytes"), Some(4.0));
    }

    #[test]
    fn training_needs_more_than_a_batch_size() {
        let trains = |setup: &dyn Fn(&mut Facts)| {
            let mut f = Facts::new();
            f.set("train.batch_size", 32.0, None);
            setup(&mut f);
            derive(&mut f);
            f.bool("job.training") == Some(true)
        };
        // An inference or embedding loop has a batch size too.
        assert!(!trains(&|_| {}));
        assert!(!trains(&|f| f.set("train.batch_flag", "batch_size", None)));
        assert!(!trains(&|f| f.set("phase", "first-step", None)));
        assert!(!trains(&|f| f.set(
            "train.gradient_checkpointing",
            false,
            None
        )));
        assert!(!trains(&|f| f.set(
            "snapshot.category.gradients_bytes",
            0.0,
            None
        )));
        // Settings, loops and phases only training has.
        assert!(trains(&|f| f.set(
            "train.gradient_accumulation_steps",
            4.0,
            None
        )));
        assert!(trains(&|f| f.set(
            "train.batch_flag",
            "per_device_train_batch_size",
            None
        )));
        assert!(trains(&|f| f.set(
            "train.gradient_checkpointing",
            true,
            None
        )));
        assert!(trains(&|f| f.set("phase", "backward", None)));
        assert!(trains(&|f| f.set("phase.training_loop", true, None)));
        assert!(trains(&|f| f.set("phase.epoch", 0.0, None)));
        assert!(trains(&|f| f.set(
            "snapshot.category.optimizer_bytes",
            1e9,
            None
        )));
    }

    const MIB: f64 = 1048576.0;

    #[test]
    fn llamacpp_weights_fit() {
        // 70B Q4_K_M (80 layers + output) on a 24 GiB card with 23000 MiB free: the 40 GiB
        // weights buffer failed.
        let mut f = Facts::new();
        f.set("llamacpp.free_vram_bytes", 23000.0 * MIB, None);
        f.set("llamacpp.alloc_kind", "weights", None);
        f.set("oom.requested_bytes", 40000.0 * MIB, None);
        f.set("llamacpp.n_layer", 80.0, None);
        f.set("llamacpp.bpw", 4.89, None);
        derive(&mut f);
        let layer = f.num("llamacpp.layer_bytes").unwrap();
        assert!((layer - 40000.0 * MIB / 81.0).abs() < 1.0);
        let ngl = f.num("llamacpp.ngl_fit").unwrap();
        // budget 21850 MiB, reserve 3277.5 MiB -> 18572 MiB / 493.8 MiB = 37 layers
        assert_eq!(ngl, 37.0);
        assert!(ngl * layer <= 23000.0 * MIB * 0.95);
        // 4.89 BPW x 18572 / 40000 MiB: below every usable quantization.
        assert_eq!(f.num("llamacpp.bpw_fit"), Some(2.27));
        assert_eq!(f.str("llamacpp.quant_fit"), None);
    }

    #[test]
    fn llamacpp_context_fit() {
        // 8B fits (4403 MiB weights); the 16 GiB KV for 131072 tokens did not.
        let mut f = Facts::new();
        f.set("llamacpp.free_vram_bytes", 23000.0 * MIB, None);
        f.set("llamacpp.alloc_kind", "kv", None);
        f.set("oom.requested_bytes", 16384.0 * MIB, None);
        f.set("llamacpp.n_ctx", 131072.0, None);
        f.set("llamacpp.model_gpu_bytes", 4403.0 * MIB, None);
        derive(&mut f);
        assert_eq!(f.num("llamacpp.kv_bytes_per_token"), Some(131072.0));
        let ctx = f.num("llamacpp.ctx_fit_tokens").unwrap();
        // (21850 - 4403 - 1024) MiB / 128 KiB per token = 131384 -> 131072
        assert!(ctx <= (21850.0 - 4403.0 - 1024.0) * 8.0);
        assert_eq!(ctx % 1024.0, 0.0);
        let q8 = f.num("llamacpp.ctx_fit_q8_tokens").unwrap();
        assert!(q8 > ctx);
        // Without the capacity nothing is claimed.
        let mut g = Facts::new();
        g.set("llamacpp.alloc_kind", "kv", None);
        g.set("oom.requested_bytes", 16384.0 * MIB, None);
        g.set("llamacpp.n_ctx", 131072.0, None);
        derive(&mut g);
        assert!(!g.contains("llamacpp.ctx_fit_tokens"));
    }

    #[test]
    fn ollama_failed_allocation_named_by_the_layout() {
        // The kind derived for a request of `mib` when the recogniser said `kind`.
        let derived = |kind: &str, mib: f64| {
            let mut f = Facts::new();
            f.set("ollama.weights_gpu_bytes", 4.6 * GIB, None);
            f.set("ollama.kv_gpu_bytes", 16.0 * GIB, None);
            f.set("ollama.graph_gpu_bytes", 1.1 * GIB, None);
            f.set("llamacpp.alloc_kind", kind, None);
            f.set("oom.requested_bytes", mib * MIB, None);
            derive(&mut f);
            f.str("llamacpp.alloc_kind").map(str::to_string)
        };
        // The runner's 16384 MiB cudaMalloc is the 16.0 GiB KV cache.
        assert_eq!(derived("unknown", 16384.0).as_deref(), Some("kv"));
        // A request that is none of the parts stays unknown; a known kind is kept.
        assert_eq!(derived("unknown", 512.0).as_deref(), Some("unknown"));
        assert_eq!(derived("weights", 16384.0).as_deref(), Some("weights"));
    }

    #[test]
    fn ollama_context_from_the_estimate() {
        let mut f = Facts::new();
        f.set("ollama.num_ctx", 32768.0, None);
        f.set("ollama.num_parallel", 4.0, None);
        f.set("ollama.memory_required_kv_bytes", 16.0 * GIB, None);
        f.set("ollama.memory_available_bytes", 23.0 * GIB, None);
        f.set("ollama.memory_weights_bytes", 4.5 * GIB, None);
        f.set("ollama.memory_graph_bytes", 2.0 * GIB, None);
        derive(&mut f);
        // room 21.85 - 4.5 - 2 = 15.35 GiB; 128 KiB/token -> 125747 tokens / 4 -> 31436 -> 30720
        assert_eq!(f.num("ollama.num_ctx_fit"), Some(30720.0));
        let mut g = Facts::new();
        g.set("ollama.system_required_bytes", 40.0 * GIB, None);
        g.set("ollama.system_available_bytes", 32.0 * GIB, None);
        g.set("ollama.num_ctx", 65536.0, None);
        g.set("ollama.memory_required_kv_bytes", 16.0 * GIB, None);
        derive(&mut g);
        assert_eq!(g.num("ollama.system_shortfall_bytes"), Some(8.0 * GIB));
        // (16 - 8.8) / 16 x 65536 = 29491 -> 29696? no: round down to 1024 -> 29696 is above; 28672
        let fit = g.num("ollama.num_ctx_fit").unwrap();
        assert!(fit <= 65536.0 * (16.0 - 8.8) / 16.0 && fit % 1024.0 == 0.0);
    }

    #[test]
    fn xla_fraction_and_host_limits() {
        let mut f = Facts::new();
        f.set("failure.engine", "jax", None);
        f.set("xla.pool_limit_bytes", 30.0 * GIB, None);
        f.set("xla.in_use_bytes", 29.0 * GIB, None);
        f.set("oom.requested_bytes", 4.0 * GIB, None);
        derive(&mut f);
        assert_eq!(f.num("xla.device_total_bytes"), Some(40.0 * GIB));
        // (33/40 + 0.02) -> 0.845 -> 0.85
        assert_eq!(f.num("xla.mem_fraction_fit"), Some(0.85));
        // An older JAX's 90 %, read off a device of known size: a program that needs more
        // than 95 % of the device has no fraction that fits.
        let mut g = Facts::new();
        g.set("failure.engine", "jax", None);
        g.set("xla.pool_limit_bytes", 28.8 * GIB, None);
        g.set("smi.query_total_bytes", 32.0 * GIB, None);
        g.set("xla.in_use_bytes", 1.7 * GIB, None);
        g.set("oom.requested_bytes", 29.1 * GIB, None);
        derive(&mut g);
        assert_eq!(g.num("xla.device_total_bytes"), Some(32.0 * GIB));
        assert_eq!(g.num("xla.mem_fraction_fit"), None);
        let mut h = Facts::new();
        h.set("failure.kind", "host-oom", None);
        h.set("host.killer", "kubernetes", None);
        h.set("host.cgroup_limit_bytes", 24.0 * GIB, None);
        derive(&mut h);
        assert_eq!(h.num("host.limit_fit_bytes"), Some(30.0 * GIB));
        // Only the victim's size known: a lower bound of the need, no limit to name.
        let mut v = Facts::new();
        v.set("failure.kind", "host-oom", None);
        v.set("host.killer", "memcg", None);
        v.set("host.victim_anon_rss_bytes", 2.58 * GIB, None);
        derive(&mut v);
        assert_eq!(v.num("host.required_bytes"), Some(2.58 * GIB));
        assert_eq!(v.num("host.limit_fit_bytes"), None);
        let mut r = Facts::new();
        r.set("failure.kind", "host-oom", None);
        r.set("host.killer", "ray", None);
        r.set("host.victim_anon_rss_bytes", 9.5 * GIB, None);
        r.set("host.total_ram_bytes", 62.8 * GIB, None);
        r.set("ray.memory_usage_threshold", 0.95, None);
        derive(&mut r);
        assert_eq!(r.num("ray.task_memory_fit_bytes"), Some(11.5 * GIB));
        assert_eq!(r.num("ray.concurrency_fit"), Some(5.0));
    }

    #[test]
    fn vllm_capacity_from_the_v1_error() {
        let gib = 1073741824.0;
        let mut f = Facts::new();
        f.set("vllm.max_model_len", 131072.0, None);
        f.set("vllm.kv_needed_bytes", 16.0 * gib, None);
        f.set("vllm.kv_cache_bytes", 5.5 * gib, None);
        derive(&mut f);
        assert_eq!(f.num("vllm.kv_bytes_per_token"), Some(131072.0));
        assert_eq!(f.num("vllm.kv_capacity_tokens"), Some(45056.0));
        let mut f = Facts::new();
        f.set("vllm.gpu_blocks", 1478.0, None);
        f.set("vllm.budget_bytes", 21.2 * gib, None);
        f.set("vllm.gpu_memory_utilization", 0.9, None);
        derive(&mut f);
        assert_eq!(f.num("vllm.kv_cache_tokens"), Some(23648.0));
        assert_eq!(f.num("vllm.kv_capacity_tokens"), Some(23648.0));
        assert!((f.num("vllm.gpu_total_bytes").unwrap() - 21.2 * gib / 0.9).abs() < 1.0);
    }
}
