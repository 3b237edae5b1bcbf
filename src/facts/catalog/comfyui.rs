//! Facts the `ingest::log::engines::comfyui` stage may set.

use super::{FactDef, fact};
use crate::facts::evidence::Unit;

/// Facts read from ComfyUI's console and error reports.
pub const FACTS: &[FactDef] = &[
    fact(
        "comfyui.vram_total_bytes",
        Unit::Bytes,
        "Device memory ComfyUI detected at start-up (`Total VRAM N MB`, or the error report's `VRAM Total`).",
    ),
    fact(
        "comfyui.ram_total_bytes",
        Unit::Bytes,
        "Host RAM ComfyUI detected at start-up (`total RAM N MB`).",
    ),
    fact(
        "comfyui.vram_state",
        Unit::Text,
        "ComfyUI's memory mode: NORMAL_VRAM, LOW_VRAM, NO_VRAM, HIGH_VRAM, SHARED, DISABLED.",
    ),
    fact(
        "comfyui.lowvram",
        Unit::Flag,
        "Whether ComfyUI already runs in a low-VRAM mode (--lowvram, --novram, or a LOW_VRAM/NO_VRAM state).",
    ),
    fact(
        "comfyui.reserve_vram_bytes",
        Unit::Bytes,
        "--reserve-vram: device memory ComfyUI keeps free for the OS and other programs.",
    ),
    fact(
        "comfyui.args",
        Unit::Text,
        "The command-line arguments ComfyUI was started with, as the log or error report shows them.",
    ),
    fact(
        "comfyui.requested_model",
        Unit::Text,
        "The model class ComfyUI last asked its manager to load (`Requested to load Flux`).",
    ),
    fact(
        "comfyui.load",
        Unit::Text,
        "How the last model was loaded: complete, partial (weights offloaded to RAM) or lowvram.",
    ),
    fact(
        "comfyui.load_model",
        Unit::Text,
        "The model class the last `loaded ...` line belongs to.",
    ),
    fact(
        "comfyui.load_usable_bytes",
        Unit::Bytes,
        "Device memory the manager allowed the last model to use (`N MB usable`; 0 = no limit).",
    ),
    fact(
        "comfyui.load_loaded_bytes",
        Unit::Bytes,
        "Weights of the last model that were placed on the device.",
    ),
    fact(
        "comfyui.load_offloaded_bytes",
        Unit::Bytes,
        "Weights of the last model left in RAM because they did not fit (partial loads).",
    ),
    fact(
        "comfyui.node_type",
        Unit::Text,
        "The node that was executing when the error was raised (KSampler, VAEDecode, ...).",
    ),
    fact(
        "comfyui.vae_tiled_retry",
        Unit::Flag,
        "ComfyUI already ran out of memory in a VAE and retried with tiled encoding/decoding.",
    ),
    fact(
        "comfyui.exited_silently",
        Unit::Text,
        "ComfyUI's process ended without any error while it was `loading` a model or `sampling`: the portable build's batch file reached `pause` right after that output.",
    ),
];
