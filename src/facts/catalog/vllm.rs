//! Facts the `ingest::log::engines::vllm` stage may set.

use super::{FactDef, fact};
use crate::facts::evidence::Unit;

/// Facts read from vLLM's logs.
pub const FACTS: &[FactDef] = &[
    fact(
        "vllm.version",
        Unit::Text,
        "vLLM version, from `Initializing a V1 LLM engine (v0.8.5)`, `vLLM API server version` or the banner.",
    ),
    fact(
        "vllm.v1",
        Unit::Flag,
        "Whether the V1 engine runs (its config line says `V1 LLM engine`).",
    ),
    fact(
        "vllm.max_model_len",
        Unit::Tokens,
        "max_model_len in force (`--max-model-len`, `max_seq_len=` in the config line, or the value an error quotes).",
    ),
    fact(
        "vllm.gpu_memory_utilization",
        Unit::Ratio,
        "gpu_memory_utilization: the fraction of the device's total memory this instance may use.",
    ),
    fact(
        "vllm.max_num_seqs",
        Unit::Count,
        "max_num_seqs: sequences in flight at most.",
    ),
    fact(
        "vllm.max_num_batched_tokens",
        Unit::Tokens,
        "max_num_batched_tokens: tokens per scheduler step (the prefill chunk).",
    ),
    fact(
        "vllm.tensor_parallel_size",
        Unit::Count,
        "tensor_parallel_size (`-tp`).",
    ),
    fact(
        "vllm.pipeline_parallel_size",
        Unit::Count,
        "pipeline_parallel_size (`-pp`).",
    ),
    fact(
        "vllm.dtype",
        Unit::Text,
        "dtype as configured (auto, bfloat16, float16, ...).",
    ),
    fact(
        "vllm.kv_cache_dtype",
        Unit::Text,
        "kv_cache_dtype as configured (auto, fp8, fp8_e4m3, fp8_e5m2).",
    ),
    fact(
        "vllm.enforce_eager",
        Unit::Flag,
        "enforce_eager: CUDA graphs off.",
    ),
    fact(
        "vllm.quantization",
        Unit::Text,
        "quantization method (awq, gptq, fp8, ...) when set.",
    ),
    fact(
        "vllm.block_size",
        Unit::Count,
        "KV block size in tokens (16 on CUDA unless set).",
    ),
    fact(
        "vllm.cpu_offload_gb",
        Unit::Count,
        "cpu_offload_gb: GiB of weights offloaded to CPU RAM.",
    ),
    fact(
        "vllm.kv_cache_memory_bytes",
        Unit::Bytes,
        "kv_cache_memory_bytes: an explicit KV-cache size that bypasses profiling (0.11+).",
    ),
    fact(
        "vllm.enable_chunked_prefill",
        Unit::Flag,
        "enable_chunked_prefill.",
    ),
    fact(
        "vllm.max_cudagraph_capture_size",
        Unit::Count,
        "The largest batch size captured in a CUDA graph (max_capture_size / max_cudagraph_capture_size).",
    ),
    fact(
        "vllm.gpu_total_bytes",
        Unit::Bytes,
        "Total device memory as vLLM measured it (profiling results, budget check).",
    ),
    fact(
        "vllm.budget_bytes",
        Unit::Bytes,
        "The instance's memory budget: total x gpu_memory_utilization.",
    ),
    fact(
        "vllm.startup_free_bytes",
        Unit::Bytes,
        "Free device memory when the engine started (before loading weights).",
    ),
    fact(
        "vllm.initial_usage_bytes",
        Unit::Bytes,
        "The whole device's memory in use before the profile run (`initial_memory_usage=`, V0 0.6.2-0.6.4): this instance's weights and CUDA context plus every other process's memory.",
    ),
    fact(
        "vllm.non_torch_bytes",
        Unit::Bytes,
        "Memory outside PyTorch's allocator during profiling (NCCL, cuBLAS, custom all-reduce).",
    ),
    fact(
        "vllm.activation_peak_bytes",
        Unit::Bytes,
        "Peak activation memory of the profiling forward pass.",
    ),
    fact(
        "vllm.torch_peak_bytes",
        Unit::Bytes,
        "V0 0.6 `peak_torch_memory`: PyTorch's peak during profiling, weights included.",
    ),
    fact(
        "vllm.non_kv_bytes",
        Unit::Bytes,
        "Total non-KV-cache memory (weights + activation + non-torch) from V1 profiling.",
    ),
    fact(
        "vllm.cuda_graph_bytes",
        Unit::Bytes,
        "Memory the CUDA graphs took (`Graph capturing finished ..., took X GiB`).",
    ),
    fact(
        "vllm.kv_cache_bytes",
        Unit::Bytes,
        "Memory available to the KV cache (`Available KV cache memory`, `kv_cache_size=`, the rest reserved for KV).",
    ),
    fact(
        "vllm.kv_cache_tokens",
        Unit::Tokens,
        "Tokens the KV cache holds (`GPU KV cache size: N tokens`, the KV error, or blocks x block size).",
    ),
    fact(
        "vllm.gpu_blocks",
        Unit::Count,
        "`# GPU blocks` / `# cuda blocks`: KV blocks on the device (V0).",
    ),
    fact(
        "vllm.max_concurrency",
        Unit::Count,
        "`Maximum concurrency for N tokens per request: X`: how many max-length requests fit at once.",
    ),
    fact(
        "vllm.kv_needed_bytes",
        Unit::Bytes,
        "KV memory one max-length request needs, from the V1 KV-capacity error.",
    ),
    fact(
        "vllm.estimated_max_model_len",
        Unit::Tokens,
        "The max model length vLLM estimates the available KV memory holds (V1 error, 0.9+).",
    ),
    fact(
        "vllm.kv_cache_memory_fit_bytes",
        Unit::Bytes,
        "The `--kv-cache-memory` value vLLM suggests to fit into the requested memory (0.11+).",
    ),
    fact(
        "vllm.preemptions",
        Unit::Count,
        "Preemptions for lack of KV space (cumulative count of the V0 warning, or the stats line's count).",
    ),
    fact(
        "vllm.kv_usage",
        Unit::Ratio,
        "KV-cache usage from the periodic stats line (0..1).",
    ),
    fact(
        "vllm.running_requests",
        Unit::Count,
        "Running requests from the periodic stats line.",
    ),
    fact(
        "vllm.waiting_requests",
        Unit::Count,
        "Waiting (pending) requests from the periodic stats line.",
    ),
    fact(
        "vllm.sampler_warmup_requests",
        Unit::Count,
        "Dummy requests in the sampler (or pooler) warm-up that ran out of memory (= max_num_seqs).",
    ),
    fact(
        "vllm.kv_pool_allocation",
        Unit::Flag,
        "The failure's traceback ends in vLLM allocating the KV cache it had sized from gpu_memory_utilization (`_allocate_kv_cache`, `initialize_kv_cache_tensors`): the profiling was over, the budget did not fit.",
    ),
    fact(
        "vllm.load_oom",
        Unit::Flag,
        "vLLM said `Failed to load model - not enough GPU memory` (0.20+).",
    ),
    fact(
        "vllm.kv_bytes_per_token",
        Unit::Bytes,
        "Derived: KV-cache bytes per token (KV memory / KV tokens, or needed bytes / max_model_len).",
    ),
    fact(
        "vllm.kv_capacity_tokens",
        Unit::Tokens,
        "Derived: the longest sequence the KV cache can hold (vLLM's estimate, its token count, or available / needed x max_model_len).",
    ),
];
