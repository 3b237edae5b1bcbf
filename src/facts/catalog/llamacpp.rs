//! Facts the `ingest::log::engines::llamacpp` stage may set.

use super::{FactDef, fact};
use crate::facts::evidence::Unit;

/// Facts read from llama.cpp logs (and derived for its fixes).
pub const FACTS: &[FactDef] = &[
    fact(
        "llamacpp.request_tokens",
        Unit::Tokens,
        "The prompt of the request the server was processing when the device allocation failed (`new prompt, ... task.n_tokens = N`).",
    ),
    fact(
        "llamacpp.served_max_tokens",
        Unit::Tokens,
        "The largest context a request the server finished before the failure held (`stop processing: n_tokens = N`).",
    ),
    fact(
        "llamacpp.requests_served",
        Unit::Count,
        "Requests the server finished (`stop processing`) in the lines before the failure.",
    ),
    fact(
        "llamacpp.n_ctx",
        Unit::Tokens,
        "Context size of the llama.cpp context (all sequences together): `n_ctx = N` or `-c N`.",
    ),
    fact(
        "llamacpp.n_ctx_train",
        Unit::Tokens,
        "The model's training context (`n_ctx_train`, `<arch>.context_length`); `-c 0` means this.",
    ),
    fact(
        "llamacpp.n_ctx_seq",
        Unit::Tokens,
        "Context per sequence / server slot (`n_ctx_per_seq`, `n_ctx_seq`, `n_ctx_slot`).",
    ),
    fact(
        "llamacpp.n_seq_max",
        Unit::Count,
        "Sequences the context holds (`n_seq_max`; server slots).",
    ),
    fact(
        "llamacpp.n_parallel",
        Unit::Count,
        "Server slots from the command line (`-np/--parallel`).",
    ),
    fact(
        "llamacpp.n_batch",
        Unit::Count,
        "Logical batch size (`n_batch`, `-b`).",
    ),
    fact(
        "llamacpp.n_ubatch",
        Unit::Count,
        "Physical micro-batch size (`n_ubatch`, `-ub`); the compute buffer scales with it.",
    ),
    fact(
        "llamacpp.flash_attn",
        Unit::Text,
        "Flash attention: on, off or auto (`flash_attn = ...`, `-fa`).",
    ),
    fact(
        "llamacpp.type_k",
        Unit::Text,
        "KV cache K type (f16, q8_0, q4_0, ...).",
    ),
    fact(
        "llamacpp.type_v",
        Unit::Text,
        "KV cache V type (f16, q8_0, q4_0, ...).",
    ),
    fact(
        "llamacpp.n_layer",
        Unit::Count,
        "Number of transformer blocks (`n_layer`, `<arch>.block_count`).",
    ),
    fact(
        "llamacpp.n_expert",
        Unit::Count,
        "Number of experts of a MoE model (0 for dense models).",
    ),
    fact(
        "llamacpp.n_gpu_layers",
        Unit::Count,
        "Layers the user asked to offload (`-ngl/--n-gpu-layers N`).",
    ),
    fact(
        "llamacpp.layers_offloaded",
        Unit::Count,
        "Layers actually offloaded to the GPU (`offloaded N/M layers to GPU`).",
    ),
    fact(
        "llamacpp.layers_total",
        Unit::Count,
        "Offloadable layers (`offloaded N/M`: M = n_layer + 1 for the output layer).",
    ),
    fact(
        "llamacpp.file_type",
        Unit::Text,
        "Quantization of the GGUF file (`file type = Q4_K - Medium`).",
    ),
    fact(
        "llamacpp.bpw",
        Unit::Count,
        "Bits per weight of the GGUF file (`file size = ... (4.89 BPW)`).",
    ),
    fact(
        "llamacpp.free_vram_bytes",
        Unit::Bytes,
        "Free device memory when the model was loaded, summed over the devices used (`using device CUDA0 (...) - N MiB free`, or the --fit projection).",
    ),
    fact(
        "llamacpp.gpu_count",
        Unit::Count,
        "Devices llama.cpp found (`ggml_cuda_init: found N CUDA devices`) or used.",
    ),
    fact(
        "llamacpp.device_name",
        Unit::Text,
        "Name of the first device (`Device 0: NVIDIA GeForce RTX 4090, compute capability 8.9`).",
    ),
    fact(
        "llamacpp.model_gpu_bytes",
        Unit::Bytes,
        "Model weights in device buffers, summed over devices (`CUDA0 model buffer size = N MiB`).",
    ),
    fact(
        "llamacpp.model_host_bytes",
        Unit::Bytes,
        "Model weights in host buffers (`CPU`, `CPU_Mapped`, `CUDA_Host` model buffers).",
    ),
    fact(
        "llamacpp.kv_bytes",
        Unit::Bytes,
        "Total KV cache size (`llama_kv_cache: size = N MiB`, `KV self size`, or the KV buffers).",
    ),
    fact(
        "llamacpp.kv_gpu_bytes",
        Unit::Bytes,
        "KV cache in device buffers (`CUDA0 KV buffer size = N MiB`).",
    ),
    fact(
        "llamacpp.kv_cells",
        Unit::Tokens,
        "KV cache cells (tokens it holds), from the KV summary line.",
    ),
    fact(
        "llamacpp.compute_gpu_bytes",
        Unit::Bytes,
        "Compute (activation) buffers on devices (`CUDA0 compute buffer size = N MiB`).",
    ),
    fact(
        "llamacpp.compute_host_bytes",
        Unit::Bytes,
        "Compute buffers in host memory (`CUDA_Host compute buffer size`, `CPU compute buffer size`).",
    ),
    fact(
        "llamacpp.device_total_bytes",
        Unit::Bytes,
        "Device capacity from the memory breakdown table, summed over devices.",
    ),
    fact(
        "llamacpp.metal_past_working_set_bytes",
        Unit::Bytes,
        "How far llama.cpp's Metal buffers had passed the device's recommended working set (`allocated buffer, size = N MiB, (used / working set)` with used above it).",
    ),
    fact(
        "llamacpp.unaccounted_bytes",
        Unit::Bytes,
        "Device memory used by neither llama.cpp's model, context nor compute buffers nor free: other processes and the driver (memory breakdown `unaccounted`).",
    ),
    fact(
        "llamacpp.projected_bytes",
        Unit::Bytes,
        "Device memory the --fit logic projected the run to use.",
    ),
    fact(
        "llamacpp.fit_deficit_bytes",
        Unit::Bytes,
        "How much device memory the --fit logic said must be cut (`need to reduce device memory by N MiB`).",
    ),
    fact(
        "llamacpp.fit_ctx_from",
        Unit::Tokens,
        "The context the --fit logic reduced from (`context size reduced from A to B`).",
    ),
    fact(
        "llamacpp.mmap",
        Unit::Flag,
        "Whether the model file is memory-mapped (`mmap = true`; `--no-mmap` turns it off).",
    ),
    fact(
        "llamacpp.kv_offload",
        Unit::Flag,
        "Whether the KV cache is offloaded to the GPU (false with `-nkvo/--no-kv-offload`).",
    ),
    fact(
        "llamacpp.alloc_kind",
        Unit::Text,
        "What the failed allocation was for: weights, kv, compute, output, runtime (during decode), image (the vision encoder's compute buffer while an image is encoded) or host.",
    ),
    fact(
        "llamacpp.buffer_unnamed",
        Unit::Flag,
        "The weights' allocation failed without naming its buffer (2024's `unable to allocate backend buffer`): the part on the GPU or the part kept in RAM could have been the one that did not fit.",
    ),
    fact(
        "llamacpp.failed_function",
        Unit::Text,
        "The ggml function named by a `CUDA error` (`in function ggml_cuda_pool_vmm::alloc`).",
    ),
    fact(
        "llamacpp.kv_bytes_per_token",
        Unit::Bytes,
        "Derived: KV cache bytes per token of context (KV size / cells, or the failed KV allocation / n_ctx).",
    ),
    fact(
        "llamacpp.layer_bytes",
        Unit::Bytes,
        "Derived: weights of one offloaded layer (device weights / layers on the device).",
    ),
    fact(
        "llamacpp.vram_budget_bytes",
        Unit::Bytes,
        "Derived: device memory usable at load (free at load minus 5%).",
    ),
    fact(
        "llamacpp.ngl_fit",
        Unit::Count,
        "Derived: layers that fit the free device memory with room left for KV cache and compute buffers.",
    ),
    fact(
        "llamacpp.ctx_fit_tokens",
        Unit::Tokens,
        "Derived: context (tokens) whose f16/current-type KV cache fits next to the weights and compute buffers.",
    ),
    fact(
        "llamacpp.ctx_fit_q8_tokens",
        Unit::Tokens,
        "Derived: the same with a q8_0 K and V cache (about half the size of f16).",
    ),
    fact(
        "llamacpp.bpw_fit",
        Unit::Count,
        "Derived: bits per weight at which all layers would fit the free device memory.",
    ),
    fact(
        "llamacpp.quant_fit",
        Unit::Text,
        "Derived: the largest common GGUF quantization at or below `llamacpp.bpw_fit`.",
    ),
];
