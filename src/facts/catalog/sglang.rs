//! Facts the `ingest::log::engines::sglang` stage may set.

use super::{FactDef, fact};
use crate::facts::evidence::Unit;

/// Facts read from SGLang's logs.
pub const FACTS: &[FactDef] = &[
    fact(
        "sglang.tp_memory_unbalanced",
        Unit::Flag,
        "SGLang's tensor-parallel start-up check found one GPU of the group with less than 0.9 x the memory free on this one (`The memory capacity is unbalanced. Some GPUs may be occupied by other processes.`): another process holds part of that GPU.",
    ),
    fact(
        "sglang.tp_min_free_bytes",
        Unit::Bytes,
        "The least memory free on any GPU of the tensor-parallel group at start-up (`min_per_gpu_memory=`, `pre_model_load_memory=`).",
    ),
    fact(
        "sglang.tp_local_free_bytes",
        Unit::Bytes,
        "The memory free at start-up on the GPU of the rank that checked (`local_gpu_memory=`).",
    ),
    fact(
        "sglang.mem_fraction_static",
        Unit::Ratio,
        "--mem-fraction-static: the fraction of device memory for weights plus the KV pool.",
    ),
    fact(
        "sglang.max_running_requests",
        Unit::Count,
        "--max-running-requests (or the value SGLang derived and logged).",
    ),
    fact(
        "sglang.max_total_tokens",
        Unit::Tokens,
        "--max-total-tokens: a cap on the KV pool the user set.",
    ),
    fact(
        "sglang.chunked_prefill_size",
        Unit::Tokens,
        "--chunked-prefill-size (-1 disables chunking).",
    ),
    fact(
        "sglang.max_prefill_tokens",
        Unit::Tokens,
        "--max-prefill-tokens: tokens in one prefill batch.",
    ),
    fact(
        "sglang.context_length",
        Unit::Tokens,
        "--context-length (or the model's, as logged).",
    ),
    fact("sglang.tp_size", Unit::Count, "--tp-size."),
    fact("sglang.dp_size", Unit::Count, "--dp-size."),
    fact(
        "sglang.kv_cache_dtype",
        Unit::Text,
        "--kv-cache-dtype (auto, fp8_e5m2, fp8_e4m3).",
    ),
    fact(
        "sglang.cuda_graph_max_bs",
        Unit::Count,
        "--cuda-graph-max-bs: the largest batch captured in a CUDA graph.",
    ),
    fact(
        "sglang.disable_cuda_graph",
        Unit::Flag,
        "--disable-cuda-graph.",
    ),
    fact(
        "sglang.quantization",
        Unit::Text,
        "--quantization when set.",
    ),
    fact("sglang.dtype", Unit::Text, "--dtype as configured."),
    fact(
        "sglang.enable_torch_compile",
        Unit::Flag,
        "--enable-torch-compile (its graphs take memory too).",
    ),
    fact(
        "sglang.avail_before_weights_bytes",
        Unit::Bytes,
        "Free device memory before loading weights (`Load weight begin. avail mem=`).",
    ),
    fact(
        "sglang.avail_after_weights_bytes",
        Unit::Bytes,
        "Free device memory after loading weights (`Load weight end. ... avail mem=`).",
    ),
    fact(
        "sglang.kv_tokens",
        Unit::Tokens,
        "Tokens the KV pool holds (`KV Cache is allocated. #tokens:`, `max_total_num_tokens=`).",
    ),
    fact(
        "sglang.kv_cache_bytes",
        Unit::Bytes,
        "Memory of the KV pool (K size + V size, or the MLA KV size).",
    ),
    fact(
        "sglang.profiled_kv_tokens",
        Unit::Tokens,
        "The KV tokens SGLang profiled as fitting (negative when the weights left nothing).",
    ),
    fact(
        "sglang.avail_after_kv_bytes",
        Unit::Bytes,
        "Free device memory after the KV pool (`Memory pool end. avail mem=`).",
    ),
    fact(
        "sglang.avail_before_graph_bytes",
        Unit::Bytes,
        "Free device memory when CUDA-graph capture began.",
    ),
    fact(
        "sglang.cuda_graph_bytes",
        Unit::Bytes,
        "Memory the CUDA graphs took (`Capture cuda graph end. ... mem usage=`).",
    ),
    fact(
        "sglang.suggested_mem_fraction",
        Unit::Ratio,
        "The --mem-fraction-static SGLang itself suggests raising to (0.5.2x).",
    ),
    fact(
        "sglang.min_viable_mem_fraction",
        Unit::Ratio,
        "Smallest --mem-fraction-static that leaves any KV room: 1 - available/pre (logged by 0.5.2x or derived).",
    ),
    fact(
        "sglang.token_usage",
        Unit::Ratio,
        "KV-pool token usage from the periodic batch line (0..1).",
    ),
    fact(
        "sglang.running_requests",
        Unit::Count,
        "Running requests from the periodic batch line.",
    ),
    fact(
        "sglang.queue_requests",
        Unit::Count,
        "Queued requests from the periodic batch line.",
    ),
    fact(
        "sglang.retracted_requests",
        Unit::Count,
        "Requests retracted (preempted) when the KV pool filled up.",
    ),
    fact(
        "sglang.req_slots_exhausted",
        Unit::Flag,
        "`alloc_req_slots runs out of memory`: more running requests than request slots.",
    ),
    fact(
        "sglang.requested_tokens",
        Unit::Tokens,
        "Tokens a prefill or decode batch asked the pool for when it ran out (`Try to allocate N tokens`).",
    ),
    fact(
        "sglang.available_tokens",
        Unit::Tokens,
        "Tokens the pool had available then (`Available tokens:`).",
    ),
];
