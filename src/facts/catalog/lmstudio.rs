//! Facts the `ingest::log::engines::lmstudio` stage may set.

use super::{FactDef, fact};
use crate::facts::evidence::Unit;

/// Facts read from LM Studio's load logs (`Live GPU memory info`, `Model load size estimate`),
/// its crash reports and model settings.
pub const FACTS: &[FactDef] = &[
    fact(
        "lmstudio.ram_total_bytes",
        Unit::Bytes,
        "The machine's RAM in LM Studio's crash report (`\"ram_capacity\"`).",
    ),
    fact(
        "lmstudio.ram_free_bytes",
        Unit::Bytes,
        "RAM left unused when the model crashed (the crash report's `\"ram_unused\"`).",
    ),
    fact(
        "lmstudio.vram_total_bytes",
        Unit::Bytes,
        "The GPU memory LM Studio counts on, in its crash report (`\"vram_recommended_capacity\"`).",
    ),
    fact(
        "lmstudio.vram_free_bytes",
        Unit::Bytes,
        "GPU memory left unused when the model crashed (`\"vram_unused\"`).",
    ),
    fact(
        "lmstudio.use_mlock",
        Unit::Flag,
        "The model's `use_mlock` (\"Keep model in memory\"): a copy of the weights is locked in RAM even when every layer is on the GPU.",
    ),
    fact(
        "lmstudio.gpu_total_bytes",
        Unit::Bytes,
        "The GPUs' memory as LM Studio measured it before a load (`Live GPU memory info`, Total; summed over GPUs).",
    ),
    fact(
        "lmstudio.gpu_used_bytes",
        Unit::Bytes,
        "GPU memory already in use before the load (Used): other models LM Studio keeps loaded, other programs.",
    ),
    fact(
        "lmstudio.gpu_free_bytes",
        Unit::Bytes,
        "GPU memory free before the load (Free).",
    ),
    fact(
        "lmstudio.estimate_bytes",
        Unit::Bytes,
        "LM Studio's estimate of the load (`Model load size estimate`, Total): weights on the GPU plus context.",
    ),
    fact(
        "lmstudio.estimate_model_bytes",
        Unit::Bytes,
        "The estimate's weights part (Model).",
    ),
    fact(
        "lmstudio.estimate_context_bytes",
        Unit::Bytes,
        "The estimate's context part (Context): the KV cache for the context length.",
    ),
    fact(
        "lmstudio.model_file_bytes",
        Unit::Bytes,
        "The model file's size as LM Studio announced the load (`Loading model X (size on disk: 18.44 GB, ...)`, decimal units).",
    ),
    fact(
        "lmstudio.context_length",
        Unit::Count,
        "The context length the estimate was made for.",
    ),
];
