//! Facts the `ingest::log::engines::webui` stage may set.

use super::{FactDef, fact};
use crate::facts::evidence::Unit;

/// Facts read from the web UI's console.
pub const FACTS: &[FactDef] = &[
    fact(
        "webui.args",
        Unit::Text,
        "The web UI's command-line arguments (`Launching Web UI with arguments: ...`, COMMANDLINE_ARGS).",
    ),
    fact(
        "webui.medvram",
        Unit::Flag,
        "Whether --medvram (or --medvram-sdxl) is on: the model is kept on the GPU in parts.",
    ),
    fact(
        "webui.lowvram",
        Unit::Flag,
        "Whether --lowvram is on: the model is moved to the GPU one module at a time.",
    ),
    fact(
        "webui.attention_opt",
        Unit::Flag,
        "Whether a memory-efficient attention is on (--xformers, --opt-sdp-attention, --opt-split-attention, ...).",
    ),
    fact(
        "webui.vram_total_bytes",
        Unit::Bytes,
        "The GPU's memory, from the status line under a generation (`Sys VRAM: used/total`).",
    ),
    fact(
        "webui.forge_model_require_bytes",
        Unit::Bytes,
        "Forge: memory the model it was loading needs (`Model Require`).",
    ),
    fact(
        "webui.forge_free_gpu_bytes",
        Unit::Bytes,
        "Forge: free device memory when it loaded the model (`Free GPU`).",
    ),
    fact(
        "webui.forge_swapped_bytes",
        Unit::Bytes,
        "Forge: weights it had to keep in RAM because they did not fit (`CPU Swap Loaded`).",
    ),
];
