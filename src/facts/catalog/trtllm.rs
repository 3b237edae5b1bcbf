//! Facts the `ingest::log::engines::trtllm` stage may set.

use super::{FactDef, fact};
use crate::facts::evidence::Unit;

/// Facts read from TensorRT-LLM's logs.
pub const FACTS: &[FactDef] = &[
    fact(
        "trtllm.version",
        Unit::Text,
        "TensorRT-LLM version (`[TensorRT-LLM] TensorRT-LLM version: X`).",
    ),
    fact(
        "trtllm.max_seq_len",
        Unit::Tokens,
        "max_seq_len the engine or runtime was configured with (`TRTGptModel maxSequenceLen`, --max_seq_len).",
    ),
    fact(
        "trtllm.max_input_len",
        Unit::Tokens,
        "max_input_len as configured.",
    ),
    fact(
        "trtllm.max_batch_size",
        Unit::Count,
        "max_batch_size as configured.",
    ),
    fact(
        "trtllm.max_num_tokens",
        Unit::Tokens,
        "max_num_tokens: tokens per scheduled batch.",
    ),
    fact(
        "trtllm.max_beam_width",
        Unit::Count,
        "max_beam_width (multiplies the KV a request needs).",
    ),
    fact(
        "trtllm.free_gpu_memory_fraction",
        Unit::Ratio,
        "KvCacheConfig.free_gpu_memory_fraction (kv_cache_free_gpu_mem_fraction): the share of free memory the KV pool takes.",
    ),
    fact(
        "trtllm.max_tokens",
        Unit::Tokens,
        "KvCacheConfig.max_tokens (max_tokens_in_paged_kv_cache): a cap on the KV pool.",
    ),
    fact("trtllm.tp_size", Unit::Count, "Tensor-parallel size."),
    fact(
        "trtllm.kv_cache_dtype",
        Unit::Text,
        "KV-cache dtype when configured (fp8, int8, auto).",
    ),
    fact(
        "trtllm.activation_bytes",
        Unit::Bytes,
        "The activation memory the engine asks for at run time, as TensorRT's builder printed it (`Total Activation Memory: 13988544512`): sized by the build's max batch size and input length.",
    ),
    fact(
        "trtllm.gpu_total_bytes",
        Unit::Bytes,
        "Device total as TensorRT-LLM reports it when sizing the KV cache.",
    ),
    fact(
        "trtllm.free_after_weights_bytes",
        Unit::Bytes,
        "Memory available when the KV cache was sized (after weights and runtime buffers).",
    ),
    fact(
        "trtllm.kv_blocks",
        Unit::Count,
        "Blocks in the KV cache's primary (device) pool.",
    ),
    fact(
        "trtllm.tokens_per_block",
        Unit::Count,
        "Tokens per KV block.",
    ),
    fact(
        "trtllm.kv_cache_bytes",
        Unit::Bytes,
        "Memory allocated for the paged KV cache.",
    ),
    fact(
        "trtllm.kv_tokens",
        Unit::Tokens,
        "Tokens the paged KV cache holds (`Allocated X GiB for max tokens in paged KV cache (N)`, or blocks x tokens per block).",
    ),
    fact(
        "trtllm.reduced_max_seq_len",
        Unit::Tokens,
        "The max sequence length TensorRT-LLM silently reduced to because the KV cache could not hold one sequence.",
    ),
    fact(
        "trtllm.reduced_max_input_len",
        Unit::Tokens,
        "The max input length it reduced to along with it.",
    ),
    fact(
        "trtllm.peak_bytes",
        Unit::Bytes,
        "PyTorch backend: peak memory during profiling (torch + non-torch).",
    ),
    fact(
        "trtllm.oom_in_runtime_buffers",
        Unit::Flag,
        "The C++ runtime's failed allocation was for the batch's runtime buffers (`RuntimeBuffers::reshape` / `prepareStep` in the native stack under the error): buffers sized by the requests in flight and their tokens, not the KV pool or the weights.",
    ),
    fact(
        "trtllm.gather_logits",
        Unit::Flag,
        "The engine keeps the logits of every context token (`--gather_all_token_logits` / `--gather_context_logits` at build, `gather_context_logits: true` in its config): vocabulary x tokens x 4 bytes a request in flight.",
    ),
    fact(
        "trtllm.failed_component",
        Unit::Text,
        "PyTorch backend: the executor component that could not be created for lack of memory.",
    ),
    fact(
        "trtllm.free_before_component_bytes",
        Unit::Bytes,
        "PyTorch backend: free memory before that component's creation was attempted.",
    ),
    fact(
        "trtllm.held_elsewhere_at_init_bytes",
        Unit::Bytes,
        "The device's use when TensorRT first initialised a library (`[MemUsageChange] Init CUDA` / `Init cuBLAS/cuBLASLt ... now: GPU N (MiB)`, the driver's count), less this process's engine and the library's own share: memory another process held.",
    ),
    fact(
        "trtllm.free_memory_bytes",
        Unit::Bytes,
        "Free device memory a cuBLAS handle failure reported.",
    ),
];
