//! Facts the `ingest::log::engines::tgi` stage may set.

use super::{FactDef, fact};
use crate::facts::evidence::Unit;

/// Facts read from TGI's logs.
pub const FACTS: &[FactDef] = &[
    fact(
        "tgi.max_batch_prefill_tokens",
        Unit::Tokens,
        "--max-batch-prefill-tokens: tokens in one prefill batch (warm-up runs exactly this).",
    ),
    fact(
        "tgi.max_total_tokens",
        Unit::Tokens,
        "--max-total-tokens: prompt + generated tokens of one request.",
    ),
    fact(
        "tgi.max_input_tokens",
        Unit::Tokens,
        "--max-input-tokens (older --max-input-length).",
    ),
    fact(
        "tgi.max_batch_total_tokens",
        Unit::Tokens,
        "--max-batch-total-tokens as configured (flash models infer their own).",
    ),
    fact("tgi.max_batch_size", Unit::Count, "--max-batch-size."),
    fact(
        "tgi.max_concurrent_requests",
        Unit::Count,
        "--max-concurrent-requests.",
    ),
    fact(
        "tgi.cuda_memory_fraction",
        Unit::Ratio,
        "--cuda-memory-fraction (env CUDA_MEMORY_FRACTION).",
    ),
    fact("tgi.num_shard", Unit::Count, "--num-shard."),
    fact(
        "tgi.quantize",
        Unit::Text,
        "--quantize (awq, gptq, bitsandbytes, eetq, fp8, ...).",
    ),
    fact("tgi.dtype", Unit::Text, "--dtype."),
    fact(
        "tgi.kv_cache_dtype",
        Unit::Text,
        "--kv-cache-dtype (fp8_e4m3fn, fp8_e5m2).",
    ),
    fact(
        "tgi.cuda_graphs",
        Unit::Text,
        "--cuda-graphs: the batch sizes captured (`0` disables them).",
    ),
    fact(
        "tgi.kv_tokens",
        Unit::Tokens,
        "Tokens the KV cache holds: `Setting max batch total tokens to N`, `Inferred max batch total tokens`, or KV-cache blocks x block size.",
    ),
    fact(
        "tgi.prefill_tokens",
        Unit::Tokens,
        "The prefill size that did not fit (`Not enough memory to handle N prefill tokens`).",
    ),
    fact(
        "tgi.vram_available_bytes",
        Unit::Bytes,
        "VRAM the launcher found available (`Available vram`, `Not enough VRAM to run the model`).",
    ),
    fact(
        "tgi.bytes_per_token",
        Unit::Bytes,
        "KV bytes per token the launcher computed (`every tokens requires`).",
    ),
    fact(
        "tgi.vram_max_tokens",
        Unit::Tokens,
        "Tokens the launcher computed fit in VRAM (`maximum allocatable tokens`).",
    ),
    fact(
        "tgi.version",
        Unit::Text,
        "TGI version when the log shows it.",
    ),
    fact(
        "tgi.shard_start_failed",
        Unit::Flag,
        "The launcher said a shard failed to start (`Shard 0 failed to start`, `Error: ShardCannotStart`): the shard was loading the model; the warm-up comes after every shard is ready.",
    ),
];
