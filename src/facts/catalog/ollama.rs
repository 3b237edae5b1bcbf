//! Facts the `ingest::log::engines::ollama` stage may set.

use super::{FactDef, fact};
use crate::facts::evidence::Unit;

/// Facts read from Ollama's server log.
pub const FACTS: &[FactDef] = &[
    fact(
        "ollama.resident_gpu_bytes",
        Unit::Bytes,
        "GPU memory of the models `ollama ps` lists as loaded (each model's size times its GPU share: `100% GPU`, `48%/52% CPU/GPU`).",
    ),
    fact(
        "ollama.beside_bytes",
        Unit::Bytes,
        "Derived: what `ollama ps` shows the Ollama server holding on the GPU when the failure is another program's (a ComfyUI or PyTorch job beside it): memory held outside that program.",
    ),
    fact(
        "ollama.version",
        Unit::Text,
        "Ollama version (`Listening on ... (version 0.5.7)`).",
    ),
    fact(
        "ollama.num_ctx",
        Unit::Tokens,
        "Context per request (num_ctx): the runner's --ctx-size divided by the parallel slots, OLLAMA_CONTEXT_LENGTH, or the truncation limit.",
    ),
    fact(
        "ollama.num_parallel",
        Unit::Count,
        "Parallel requests per model (OLLAMA_NUM_PARALLEL, the runner's --parallel); the KV cache is num_ctx × this.",
    ),
    fact(
        "ollama.kv_cache_type",
        Unit::Text,
        "OLLAMA_KV_CACHE_TYPE (f16, q8_0, q4_0); empty means f16.",
    ),
    fact(
        "ollama.flash_attention",
        Unit::Flag,
        "Whether flash attention is on (OLLAMA_FLASH_ATTENTION, the runner's --flash-attn).",
    ),
    fact(
        "ollama.num_gpu",
        Unit::Count,
        "Layers the user forced onto the GPU (num_gpu / layers.requested when not -1).",
    ),
    fact(
        "ollama.layers_model",
        Unit::Count,
        "Layers of the model, as Ollama's estimate counts them (layers.model).",
    ),
    fact(
        "ollama.layers_offload",
        Unit::Count,
        "Layers Ollama's estimate put on the GPU (layers.offload).",
    ),
    fact(
        "ollama.memory_available_bytes",
        Unit::Bytes,
        "GPU memory Ollama's estimate saw as available, summed over GPUs (memory.available).",
    ),
    fact(
        "ollama.earlier_load_available_bytes",
        Unit::Bytes,
        "The most free GPU memory an earlier load of the same model in the log saw (its offload estimate's available memory, the same memory required): against this load's, what something else took between them.",
    ),
    fact(
        "ollama.memory_required_full_bytes",
        Unit::Bytes,
        "Memory the whole model would need on the GPU (memory.required.full).",
    ),
    fact(
        "ollama.memory_required_partial_bytes",
        Unit::Bytes,
        "Memory the offloaded part needs on the GPU (memory.required.partial).",
    ),
    fact(
        "ollama.memory_required_kv_bytes",
        Unit::Bytes,
        "KV cache size in the estimate (memory.required.kv).",
    ),
    fact(
        "ollama.memory_weights_bytes",
        Unit::Bytes,
        "Weights in the estimate (memory.weights.total).",
    ),
    fact(
        "ollama.memory_weights_repeating_bytes",
        Unit::Bytes,
        "Repeating-layer weights in the estimate (memory.weights.repeating).",
    ),
    fact(
        "ollama.memory_graph_bytes",
        Unit::Bytes,
        "Compute graph in the estimate (memory.graph.full, or .partial when partially offloaded).",
    ),
    fact(
        "ollama.weights_gpu_bytes",
        Unit::Bytes,
        "Weights on GPUs from the per-device layout lines (`msg=\"model weights\" device=CUDA0`).",
    ),
    fact(
        "ollama.weights_cpu_bytes",
        Unit::Bytes,
        "Weights in host memory from the layout lines.",
    ),
    fact(
        "ollama.kv_gpu_bytes",
        Unit::Bytes,
        "KV cache on GPUs from the layout lines (`msg=\"kv cache\"`).",
    ),
    fact(
        "ollama.kv_cpu_bytes",
        Unit::Bytes,
        "KV cache in host memory from the layout lines.",
    ),
    fact(
        "ollama.graph_gpu_bytes",
        Unit::Bytes,
        "Compute graph on GPUs from the layout lines (`msg=\"compute graph\"`).",
    ),
    fact(
        "ollama.total_memory_bytes",
        Unit::Bytes,
        "Total memory of the layout (`msg=\"total memory\"`).",
    ),
    fact(
        "ollama.gpu_total_bytes",
        Unit::Bytes,
        "GPU capacity from the startup inventory (`msg=\"inference compute\" total=`), summed.",
    ),
    fact(
        "ollama.gpu_free_bytes",
        Unit::Bytes,
        "GPU memory available at the last inventory or load (`available=`, `msg=\"gpu memory\"`), summed.",
    ),
    fact(
        "ollama.gpu_overhead_bytes",
        Unit::Bytes,
        "OLLAMA_GPU_OVERHEAD: memory reserved per GPU.",
    ),
    fact(
        "ollama.max_loaded_models",
        Unit::Count,
        "OLLAMA_MAX_LOADED_MODELS (0 = automatic).",
    ),
    fact(
        "ollama.system_required_bytes",
        Unit::Bytes,
        "System memory the load needed (`model requires more system memory (X) ...`).",
    ),
    fact(
        "ollama.system_available_bytes",
        Unit::Bytes,
        "System memory available to it (`... than is available (Y)`).",
    ),
    fact(
        "ollama.ram_part_bytes",
        Unit::Bytes,
        "Derived: what Ollama kept in system RAM: the CPU part of the layout lines (weights and KV cache), or, when only some layers were offloaded, the estimate's full need less its GPU part.",
    ),
    fact(
        "ollama.connection_lost",
        Unit::Flag,
        "The client lost the runner mid-request (`Error: Post \".../api/generate\": EOF`) with no reason given.",
    ),
    fact(
        "ollama.kv_quant_ignored",
        Unit::Flag,
        "Ollama warned that the quantized KV cache was ignored (flash attention off or unsupported).",
    ),
    fact(
        "ollama.vram_not_recovered",
        Unit::Flag,
        "GPU memory did not come back after a model was unloaded (`gpu VRAM usage didn't recover`).",
    ),
    fact(
        "ollama.other_models_loaded",
        Unit::Flag,
        "Other models were resident on the GPU (`updated VRAM based on existing loaded models`, evictions).",
    ),
    fact(
        "ollama.runner_error",
        Unit::Text,
        "The runner's last error as Ollama reported it (`llama runner process has terminated: ...`).",
    ),
    fact(
        "ollama.num_ctx_fit",
        Unit::Tokens,
        "Derived: num_ctx whose KV cache (× parallel) fits the memory the log shows.",
    ),
    fact(
        "ollama.num_ctx_fit_q8",
        Unit::Tokens,
        "Derived: the same with OLLAMA_KV_CACHE_TYPE=q8_0.",
    ),
    fact(
        "ollama.system_shortfall_bytes",
        Unit::Bytes,
        "Derived: system memory required minus available.",
    ),
];
