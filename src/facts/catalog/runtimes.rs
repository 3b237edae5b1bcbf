//! Facts the `ingest::log::engines::runtimes` stage may set: the configuration of inference
//! runtimes that allocate device memory on their own (CTranslate2, ONNX Runtime, LMDeploy).

use super::{FactDef, fact};
use crate::facts::evidence::Unit;

/// Facts read from CTranslate2's and ONNX Runtime's logs and the code pasted with them.
pub const FACTS: &[FactDef] = &[
    fact(
        "oom.cache_with_weights",
        Unit::Flag,
        "The engine allocates its KV cache together with the weights as it loads them (ExLlamaV2's autosplit): a failure while loading is the weights and the cache together, not the weights alone.",
    ),
    fact(
        "exllamav2.max_seq_len",
        Unit::Tokens,
        "ExLlamaV2's max_seq_len (TabbyAPI's `max_seq_len:` in config.yml, `config.max_seq_len =`): the tokens its cache is allocated for when the model loads.",
    ),
    fact(
        "exllamav2.cache_mode",
        Unit::Text,
        "ExLlamaV2's cache precision (TabbyAPI's `cache_mode:`): FP16, Q8, Q6 or Q4.",
    ),
    fact(
        "ct2.compute_type",
        Unit::Text,
        "CTranslate2's compute_type (faster-whisper's `compute_type=`, `--compute_type`): the precision its weights are loaded and run in (float32, float16, int8_float16, int8, ...).",
    ),
    fact(
        "ct2.beam_size",
        Unit::Count,
        "The beam width of a CTranslate2 / faster-whisper search (`beam_size=`, `--beam_size`, whisper-standalone's `-bs`); faster-whisper's default is 5.",
    ),
    fact(
        "lmdeploy.cache_max_entry_count",
        Unit::Ratio,
        "LMDeploy's cache_max_entry_count: the share of GPU memory its KV cache takes at start-up (of the total before v0.2.1, of what is free after the weights since).",
    ),
    fact(
        "ort.gpu_mem_limit_bytes",
        Unit::Bytes,
        "ONNX Runtime CUDA execution provider's `gpu_mem_limit`: the cap on its memory arena.",
    ),
    fact(
        "ort.arena_extend_strategy",
        Unit::Text,
        "ONNX Runtime's `arena_extend_strategy` (kNextPowerOfTwo, the default, or kSameAsRequested).",
    ),
    fact(
        "mlx.tool",
        Unit::Text,
        "The MLX-LM tool the command line runs: `lora` (mlx_lm.lora, mlx-examples' lora.py --train), `server` (mlx_lm.server) or `generate` (mlx_lm.generate, mlx_lm.chat, mlx_vlm.generate).",
    ),
    fact(
        "mlx.max_recommended_bytes",
        Unit::Bytes,
        "Metal's recommended working set for the GPU on this Mac (`max_recommended_working_set_size`), as MLX-LM's `Generating with a model that requires N MB which is close to the maximum recommended size of M MB` states it: about three quarters of the unified memory unless `iogpu.wired_limit_mb` raises it.",
    ),
    fact(
        "mlx.max_buffer_bytes",
        Unit::Bytes,
        "The largest buffer Metal allows, as MLX's `[metal::malloc] Attempting to allocate N bytes which is greater than the maximum allowed buffer size of M bytes` states it: one array past it fails whatever memory is free.",
    ),
    fact(
        "ort.arena_available_bytes",
        Unit::Bytes,
        "What ONNX Runtime's arena had left under its `gpu_mem_limit` when a request failed (`Available memory of N is smaller than requested bytes of M`).",
    ),
];
