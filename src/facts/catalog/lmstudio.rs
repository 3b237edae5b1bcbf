//! Facts the `ingest::log::engines::lmstudio` stage may set.

use super::{FactDef, fact};
use crate::facts::evidence::Unit;

/// Facts read from LM Studio's load logs (`Live GPU memory info`, `Model load size estimate`).
pub const FACTS: &[FactDef] = &[
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
        "lmstudio.context_length",
        Unit::Count,
        "The context length the estimate was made for.",
    ),
];
