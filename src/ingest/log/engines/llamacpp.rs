//! llama.cpp / ggml: allocation failures and the load-time accounting that precedes them.
//!
//! Sources: `ENGINE-MESSAGES.md` §3. llama.cpp prefixes every line with the C function that
//! printed it, and the function names changed often (`llm_load_tensors:` → `load_tensors:`,
//! `llama_new_context_with_model:` → `llama_init_from_model:` → `llama_context:`,
//! `llama_kv_cache_init:` → `llama_kv_cache_unified:` → `llama_kv_cache:`), so everything here
//! matches on the text after the prefix.
//!
//! An allocation failure is several lines: the backend's own (`allocating 4096.00 MiB on
//! device 0: cudaMalloc failed: out of memory`), the allocator's (`alloc_tensor_range: failed
//! to allocate CUDA0 buffer of size ...`) and the consequence that says *what* was being
//! allocated (`error loading model: unable to allocate CUDA0 buffer` = weights, `failed to
//! allocate buffer for kv cache` = KV, `failed to allocate compute buffers` = activations).
//! The first line is the failure; it looks a few lines ahead (and, failing that, behind) to
//! learn what kind of buffer it was. The consequence lines are wrappers: they name the kind
//! but are not counted as more copies.
//!
//! Look-alikes that are not failures: the pinned-memory fallback (`ggml_cuda_host_malloc:
//! failed to allocate ... of pinned memory`), `compute buffer allocation failed, retrying
//! without pipeline parallelism` (recovered), and the `try reducing --n-gpu-layers` hint that
//! every failed load prints whatever the cause.
//!
//! The same lines appear inside Ollama's log (its runner is llama.cpp); failures there are
//! attributed to Ollama.

use std::sync::LazyLock;

use regex::Regex;

use super::local::{in_ollama, mib, size_bin, span};
use super::{Domain, Emit, Failure, Line, PhaseMark, Recognizer, id};
use crate::facts::units::{SiBase, parse_number, size_from_parts};
use crate::ingest::log::pattern::static_regex;

/// What every wording of ggml's context-pool failure holds, its numbers cut or not.
const POOL_FULL: &str = "not enough space in the context's memory pool";

static CUDA_MALLOC: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"allocating (?P<mib>\d+(?:\.\d+)?) MiB on device (?P<dev>\d+): (?P<api>[a-z]+)Malloc failed: (?P<err>.*)",
    )
});
static BUFFER_FAIL: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?P<func>\w+): failed to allocate (?P<buft>[A-Za-z][\w-]*) buffer of size (?P<bytes>\d+)(?:[^.\d]|$)",
    )
});
static CPU_BUFFER_FAIL: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"(?:cpu\w*|CPU\w*): failed to allocate buffer of size (?P<bytes>\d+)")
});
static METAL_FAIL: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"error: failed to allocate (?:'\w+' )?buffer, size =\s*(?P<mib>\d+(?:\.\d+)?) MiB",
    )
});
static VULKAN_FAIL: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"ggml_vulkan: Device memory allocation of size (?P<bytes>\d+) failed")
});
static VULKAN_WRAP: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"(?i)ErrorOutOfDeviceMemory|vk_error_out_of_device_memory"));
/// The CUDA error macro (Dec 2023 →): `CUDA error: out of memory` then `current device: N, in
/// function F at file:line` (a paste cut short may end at `current device: N`). ROCm/MUSA
/// builds print their own backend name.
static CUDA_ERROR: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?P<b>CUDA|ROCm|HIP|MUSA|SYCL|CANN) error: (?P<err>.*(?:out of memory|OutOfMemory|ErrorMemoryAllocation).*)",
    )
});
static CURRENT_DEVICE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"current device: (?P<dev>\d+)(?:, in function (?P<func>\S+)|\s*$)")
});
/// 2023: `CUDA error 2 at ggml-cuda.cu:6951: out of memory`.
static CUDA_ERROR_2023: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"CUDA error (?P<code>\d+) at (?P<file>\S+):\d+: (?P<err>.*out of memory.*)")
});
static LOAD_ERR: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"error loading model: (?:unable to allocate (?:backend )?(?P<buft>[\w-]*) ?buffer|failed to allocate buffer)",
    )
});
/// The buffer type a model-load error names: `Some(Some("CUDA0"))` for `error loading model:
/// unable to allocate CUDA0 buffer` (and `backend CPU buffer`), `Some(None)` for one that
/// names none (2024's `unable to allocate backend buffer`, `failed to allocate buffer`),
/// `None` for no load error. Read by Ollama's runner errors too.
pub(crate) fn load_error_buffer(text: &str) -> Option<Option<&str>> {
    let c = LOAD_ERR.captures(text)?;
    Some(c.name("buft").map(|m| m.as_str()).filter(|b| !b.is_empty()))
}
static KV_FAIL: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"failed to allocate buffer for kv cache|llama_kv_cache_init\(\) failed|failed to initialize (?:the )?kv cache",
    )
});
static COMPUTE_FAIL: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"failed to allocate compute (?:pp |tg )?buffers?|failed to allocate output buffer of size (?P<mib>\d+(?:\.\d+)?) MiB",
    )
});
/// ggml before its allocators (2023): every tensor came from one context pool sized up
/// front from the batch and the context, and a graph larger than the estimate failed with
/// `ggml_new_tensor_impl: not enough space in the context's memory pool (needed 35007776,
/// available 12582912)`, typically at a large `--n_batch`.
static CONTEXT_POOL: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"not enough space in the context's memory pool \(needed (?P<need>\d+), available (?P<avail>\d+)\)",
    )
});
/// Metal at run time: `error: Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)`.
static METAL_RUNTIME: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"kIOGPUCommandBufferCallbackErrorOutOfMemory"));
static KV_FULL: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"failed to decode the batch: KV cache is full|KV cache is full - try increasing it",
    )
});

static USING_DEVICE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"using device (?P<dev>\S+) \((?P<desc>[^)]*)\)(?: \([^)]*\))? - (?P<free>\d+) MiB free",
    )
});
static FOUND_DEVICES: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"found (?P<n>\d+) (?:CUDA|ROCm|HIP|MUSA|SYCL|Vulkan) devices?"));
static DEVICE_ROW: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"^Device (?P<i>\d+): (?P<name>[^,]+), (?:compute capability|gfx)")
});
static FILE_SIZE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?:file|model) size\s*=\s*(?P<n>\d+(?:\.\d+)?) (?P<u>GiB|MiB|GB|MB)(?: \((?P<bpw>\d+(?:\.\d+)?) BPW\))?",
    )
});
static FILE_TYPE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"(?:file type|model ftype)\s*=\s*(?P<t>[A-Za-z0-9_]+(?: - [A-Za-z]+)?)")
});
static MODEL_PARAMS: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"model params\s*=\s*(?P<n>\d+(?:\.\d+)?) (?P<u>[KMBT])"));
static GENERAL_NAME: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"general\.name(?:\s+str)?\s*=\s*(?P<n>.+?)\s*$"));
static N_LAYER: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"(?:\bn_layer\s*=\s*|\.block_count u32\s*=\s*)(?P<n>\d+)"));
static N_EXPERT: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"(?:\bn_expert\s*=\s*|\.expert_count u32\s*=\s*)(?P<n>\d+)"));
static N_CTX_TRAIN: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"(?:\bn_ctx_train\s*=\s*|\.context_length u32\s*=\s*)(?P<n>\d+)")
});
static CTX_PARAM: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"\b(?P<k>n_ctx|n_ctx_per_seq|n_ctx_seq|n_ctx_slot|n_batch|n_ubatch|n_seq_max|flash_attn|type_k|type_v|kv_unified)\s*=\s*'?(?P<v>[\w.]+)",
    )
});
static CTX_SEQ_WARN: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"n_ctx_(?:per_)?seq \((?P<seq>\d+)\) [<>] n_ctx_train \((?P<train>\d+)\)")
});
static OFFLOADED: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"offloaded (?P<done>\d+)/(?P<total>\d+) layers to GPU"));
static BUFFER_SIZE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?P<func>\w+):\s+(?P<buft>[A-Za-z][\w-]*)\s+(?:(?P<what>model|KV|compute|output|RS)\s+)?buffer size\s*=\s*(?P<n>\d+(?:\.\d+)?)\s*(?P<u>MiB|MB|GiB)",
    )
});
static KV_SUMMARY: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"size =\s*(?P<mib>\d+(?:\.\d+)?) MiB \(\s*(?P<cells>\d+) cells,\s*(?P<layers>\d+) layers,\s*(?P<seqs>\d+)(?:/\d+)? seqs\), K \((?P<tk>\w+)\):\s*(?P<k>\d+(?:\.\d+)?) MiB, V \((?P<tv>\w+)\):\s*(?P<v>\d+(?:\.\d+)?) MiB",
    )
});
static KV_SELF: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?i)KV self size\s*=\s*(?P<n>\d+(?:\.\d+)?) (?P<u>MiB|MB)(?:, K \((?P<tk>\w+)\):\s*[\d.]+ MiB, V \((?P<tv>\w+)\):\s*[\d.]+ MiB)?",
    )
});
static VRAM_2023: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?P<what>VRAM used|total VRAM used|VRAM kv self)\s*[:=]\s*(?P<n>\d+(?:\.\d+)?) (?P<u>MB|MiB)",
    )
});
static BREAKDOWN_DEV: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"\|\s*-\s*(?P<dev>[^|]+?)\s*\|\s*(?P<total>\d+)\s*=\s*(?P<free>\d+)\s*\+\s*\(\s*(?P<self>\d+)\s*=\s*(?P<model>\d+)\s*\+\s*(?P<ctx>\d+)\s*\+\s*(?P<comp>\d+)\s*\)\s*\+\s*(?P<unacc>-?\d+)\s*\|",
    )
});
static FIT_PROJECTED: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"projected to use (?P<used>\d+) MiB of device memory vs\. (?P<free>\d+) MiB of free device memory",
    )
});
/// `--fit` per device: `- CUDA0 (RTX 4090): 24080 total, 26841 used, 4855 deficit` (Dec 2025)
/// or `...: 24080 total, 22000 used, 1104 free vs. target of 1024` (2026).
static FIT_DEVICE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"-\s+(?P<dev>\S+) \([^)]*\):\s+(?P<total>\d+) total, (?P<used>\d+) used, ")
});
/// Metal's budget for the device, which llama.cpp's Metal backend prints as it initialises
/// (`ggml_metal_init: recommendedMaxWorkingSetSize  = 51539.61 MB`, decimal megabytes): what
/// the GPU may keep resident of the unified memory, the device's size to its allocations.
static METAL_WORKING_SET: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"recommendedMaxWorkingSetSize\s*=\s*(?P<n>\d+(?:\.\d+)?) MB"));
/// Each Metal buffer llama.cpp allocates, with what its buffers now hold against the working
/// set, in MiB (`ggml_backend_metal_buffer_type_alloc_buffer: allocated buffer, size =
/// 40960.00 MiB, (54126.98 / 49152.00)`): Metal lets the total pass the working set (with a
/// warning), and the command buffers that then find no memory fail.
static METAL_ALLOC_TOTAL: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"allocated buffer, size =\s*\d+(?:\.\d+)? MiB, \(\s*(?P<used>\d+(?:\.\d+)?) / (?P<max>\d+(?:\.\d+)?)\)",
    )
});
/// A Metal command buffer that failed without the reason (builds before the error text was
/// printed): status 5 is `MTLCommandBufferStatusError`, which out of memory and a GPU
/// timeout share.
static METAL_STATUS_ERROR: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"command buffer \d+ failed with status 5\b"));
static FIT_DEFICIT: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"need to reduce device memory by (?P<n>\d+) MiB"));
static FIT_CTX: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"context size reduced from (?P<from>\d+) to (?P<to>\d+)"));
static MMAP: LazyLock<Regex> = LazyLock::new(|| static_regex(r"\(mmap = (?P<v>true|false)\)"));
static BUILD: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"^(?:main: build = \d+|build: \d+ \([0-9a-f]+\))"));

/// The llama.cpp recogniser.
pub struct LlamaCpp;

impl Recognizer for LlamaCpp {
    fn engine(&self) -> &'static str {
        id::LLAMACPP
    }

    fn anchors(&self) -> &'static [&'static str] {
        &[
            "Malloc failed",
            "() failed for",
            "failed to allocate",
            "unable to allocate",
            "Device memory allocation of size",
            "ErrorOutOfDeviceMemory",
            "kIOGPUCommandBufferCallbackErrorOutOfMemory",
            "failed with status 5",
            "allocated buffer, size",
            "context's memory pool",
            "error: out of memory",
            "current device:",
            "CUDA error",
            "KV cache is full",
            "buffer size =",
            "KV self size",
            "cells,",
            "VRAM used",
            "VRAM kv self",
            "using device",
            "devices:",
            "compute capability",
            "file size",
            "model size",
            "file type",
            "model ftype",
            "model params",
            "general.name",
            "n_layer",
            "block_count",
            "n_expert",
            "expert_count",
            "n_ctx",
            "context_length",
            "n_batch",
            "n_ubatch",
            "n_seq_max",
            "flash_attn",
            "type_k",
            "offloaded",
            "memory breakdown",
            "breakdown_print",
            " total, ",
            "projected to use",
            "reduce device memory",
            "context size reduced",
            "mmap = ",
            "build = ",
            "build: ",
            "loaded meta data",
            "loading model tensors",
            "llama_context: constructing",
            "warming up the model",
            "server is listening",
            "recommendedMaxWorkingSetSize",
            "all slots are idle",
            "launch_slot",
            "llama-server",
            "llama-cli",
            "--n-gpu-layers",
            "-ngl ",
        ]
    }

    fn recognize(&self, line: &Line<'_>, out: &mut Emit) {
        let text = line.text;
        if recognize_failure(line, out) {
            return;
        }
        accounting(line, out);
        // A command line names its model, or is plainly a llama.cpp binary run with flags
        // (a paste may carry `--model` on a continuation line of its own).
        let has_model = text.contains(" -m ")
            || text.contains("--model")
            || text.contains("-hf ")
            || text.contains("llama-server -")
            || text.contains("llama-cli -");
        let llama = text.contains("llama-")
            || text.contains("llama.cpp")
            || text.contains("/main ")
            || text.contains("./server ")
            || text.contains("-ngl")
            || text.contains("--n-gpu-layers");
        if has_model && llama {
            command_line(text, out, false);
        }
    }
}

/// What a nearby line says the failed buffer was for.
fn kind_of(text: &str) -> Option<&'static str> {
    if LOAD_ERR.is_match(text) {
        Some("weights")
    } else if KV_FAIL.is_match(text) {
        Some("kv")
    } else if text.contains("failed to allocate output buffer") {
        Some("output")
    } else if COMPUTE_FAIL.is_match(text) || text.contains("gallocr") {
        Some("compute")
    } else if text.contains("lora adapter") {
        Some("weights")
    } else {
        None
    }
}

/// Decides what a bare allocation failure was for: a consequence line just after it, else
/// what the lines just before it were doing. A compute buffer reserved while the server was
/// encoding an image is the vision encoder's (`image`): its size follows the image's
/// resolution, not the context.
fn classify(line: &Line<'_>) -> &'static str {
    image_if_encoding(classify_buffer(line), line)
}

/// A compute buffer (or a runtime allocation) is the vision encoder's when an image was
/// being encoded just above it; any other kind stays what it is.
fn image_if_encoding(kind: &'static str, line: &Line<'_>) -> &'static str {
    match kind {
        "compute" | "runtime" if encoding_image(line) => "image",
        kind => kind,
    }
}

/// Whether a line just above says the server was encoding an image for a multimodal model
/// (llama-server's `processing image...`, mtmd's `encoding image slice...`, clip's batch
/// encode).
fn encoding_image(line: &Line<'_>) -> bool {
    line.preceding(IMAGE_LOOKBACK).iter().any(|l| {
        let t = l.text.as_str();
        t.contains("processing image")
            || t.contains("encoding image")
            || t.contains("image slice")
            || t.contains("clip_image_batch_encode")
            || t.contains("mtmd_helper_eval")
    })
}

/// Lines above a failed allocation searched for an image being encoded: the server prints
/// it just before the encoder's graph is allocated.
const IMAGE_LOOKBACK: usize = 6;

/// [`classify`] without the image case.
fn classify_buffer(line: &Line<'_>) -> &'static str {
    for l in line.following(8) {
        if let Some(k) = kind_of(&l.text) {
            return k;
        }
        if l.text.contains("retrying without pipeline parallelism") {
            return "compute";
        }
    }
    let above = line.preceding(30);
    for l in &above {
        let t = &l.text;
        if t.contains("KV buffer size")
            || t.contains("KV self size")
            || (t.contains("llama_kv_cache") && t.contains("cells,"))
            || t.contains("output buffer size")
        {
            return "compute";
        }
        // 2023's context, created after the loading (`llama_new_context_with_model: kv self
        // size  = 1600.00 MB`, `llama_init_from_file:`): the loader's lines above it are
        // done, and what failed after it is not known from here.
        if t.contains("kv self size") || t.contains("llama_init_from_file") {
            return "unknown";
        }
        // The 2023 loader printed its hyperparameters (`n_ctx`, `n_embd`, `mem required`)
        // as `llama_model_load_internal:` lines: those are the model loading, not a context.
        // Its builds offloaded no layer unless asked (`-ngl`, then `offloaded 20/43 layers
        // to GPU`): without that the device held no weights, only the CUDA build's pinned
        // and scratch buffers, so what failed is not known.
        if t.contains("llama_model_load_internal") {
            let offloaded = above.iter().any(|l| {
                l.text.contains("llama_model_load_internal")
                    && (l.text.contains("offloading") || l.text.contains("offloaded"))
                    && !l.text.contains("offloaded 0/")
            });
            return if offloaded { "weights" } else { "unknown" };
        }
        if t.contains("n_ctx")
            || t.contains("llama_context:")
            || t.contains("constructing llama_context")
            || t.contains("llama_kv_cache")
        {
            return "kv";
        }
        if t.contains("load_tensors")
            || t.contains("print_info")
            || t.contains("llm_load_print_meta")
            || t.contains("llama_model_loader")
            || t.contains("model buffer size")
        {
            return "weights";
        }
        if t.contains("slot ")
            || t.contains("update_slots")
            || t.contains("prompt processing")
            || t.contains("decode")
        {
            return "runtime";
        }
    }
    "unknown"
}

/// Whether the 2023 loader's `llama_model_load_internal:` lines sit just above, with no
/// context created after them: the model was loading.
fn loading_2023(line: &Line<'_>) -> bool {
    for l in line.preceding(30) {
        let t = &l.text;
        if t.contains("llama_new_context_with_model") || t.contains("llama_init_from_file") {
            return false;
        }
        if t.contains("llama_model_load_internal") {
            return true;
        }
    }
    false
}

/// Whether this allocation failure is the pipeline-parallel compute buffer that llama.cpp
/// retries without pipeline parallelism (recoverable): the retry notice follows it.
fn retried(line: &Line<'_>) -> bool {
    for l in line.following(4) {
        if l.text.contains("retrying without pipeline parallelism") {
            return true;
        }
        if !(CUDA_MALLOC.is_match(&l.text) || BUFFER_FAIL.is_match(&l.text)) {
            return false;
        }
    }
    false
}

/// `CUDA0` → 0; `ROCm1` → 1; `CPU` → none.
fn device_of_buft(buft: &str) -> Option<u32> {
    let digits: String = buft
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    if is_host_buft(buft) {
        return None;
    }
    digits.parse().ok()
}

/// A failed allocation in host RAM. `what` is what the buffer was for: `compute` for a
/// compute graph reserved in RAM and `kv` for a KV cache kept there (their sizes follow -ub
/// and the context, not the model), `host` for the rest (the weights' CPU part).
fn host_failure(line: &Line<'_>, what: &'static str) -> Failure {
    host_alloc_failure(engine_for(line), what)
}

/// [`host_failure`] for an engine already known (Ollama's runner errors).
pub(crate) fn host_alloc_failure(engine: &'static str, what: &'static str) -> Failure {
    let mut f = Failure::new("host-oom", engine, Domain::Host);
    f.fact("host.killer", "allocator", None)
        .fact("oom.backend", "cpu", None)
        .fact("llamacpp.alloc_kind", what, None);
    f
}

/// Whether a line is the CPU backend's own failed allocation
/// (`ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size N`, or
/// without the size before 2024) or ggml's `failed to allocate CPU buffer of size N`.
fn is_cpu_alloc_failure(text: &str) -> bool {
    CPU_BUFFER_FAIL.is_match(text)
        || (text.contains("cpu_buffer_type_alloc_buffer") && text.contains("failed to allocate"))
        || BUFFER_FAIL
            .captures(text)
            .and_then(|c| c.name("buft"))
            .is_some_and(|b| is_host_buft(b.as_str()))
}

/// Host-memory buffer types: `CPU`, `CPU_Mapped`, `CPU_REPACK`, `CUDA_Host`, `ROCm_Host`.
pub(crate) fn is_host_buft(buft: &str) -> bool {
    let b = buft.to_ascii_uppercase();
    b.starts_with("CPU") || b.ends_with("_HOST") || b == "HOST"
}

fn backend_of(buft: &str) -> &'static str {
    let b = buft.to_ascii_lowercase();
    if b.starts_with("cuda") {
        "cuda"
    } else if b.starts_with("rocm") || b.starts_with("hip") {
        "hip"
    } else if b.starts_with("metal") || b.starts_with("mtl") {
        "metal"
    } else if b.starts_with("vulkan") {
        "vulkan"
    } else if b.starts_with("sycl") {
        "sycl"
    } else if b.starts_with("cpu") {
        "cpu"
    } else {
        "gpu"
    }
}

fn engine_for(line: &Line<'_>) -> &'static str {
    if in_ollama(line) {
        id::OLLAMA
    } else {
        id::LLAMACPP
    }
}

fn device_failure(line: &Line<'_>, kind: &str, backend: &str, device: Option<u32>) -> Failure {
    let mut f = Failure::new("device-oom", engine_for(line), Domain::Device);
    f.device = device;
    if let Some(d) = device {
        f.fact("oom.device", d, None);
    }
    f.fact("oom.backend", backend.to_string(), None)
        .fact("oom.wording", "ggml", None)
        .fact("llamacpp.alloc_kind", kind.to_string(), None);
    f
}

/// How far back the server's request lines are read at a failure.
const SERVED_LOOKBACK: usize = 2000;

/// What the server had already served when a device allocation failed mid-request: the
/// request in progress (`slot update_slots: ... | task 1887 | new prompt, n_ctx_slot =
/// 110080, n_keep = 0, task.n_tokens = 32819`; older builds `n_prompt_tokens = N`) and the
/// requests finished before it (`slot release: ... | stop processing: n_tokens = 32078`).
/// A request no larger than one that already completed needed nothing new: the memory
/// around it had grown, which the decision weighs.
fn served_before(line: &Line<'_>, f: &mut Failure) {
    let above = line.preceding(SERVED_LOOKBACK);
    let tokens_after = |t: &str, key: &str| -> Option<f64> {
        let at = t.find(key)? + key.len();
        let digits: String = t[at..].chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    // Nearest first: the request in progress is the last prompt announced.
    let mut request = None;
    let (mut served, mut largest) = (0u32, 0f64);
    for l in &above {
        let t = l.text.as_str();
        if t.contains("new prompt") || t.contains("prompt tokenized") {
            if request.is_none() {
                request = tokens_after(t, "task.n_tokens = ")
                    .or_else(|| tokens_after(t, "n_prompt_tokens = "));
            }
        } else if request.is_some() && t.contains("stop processing:") {
            if let Some(n) = tokens_after(t, "n_tokens = ").or_else(|| tokens_after(t, "n_past = "))
            {
                served += 1;
                largest = largest.max(n);
            }
        }
    }
    if let (Some(r), true) = (request, served > 0) {
        f.fact("llamacpp.request_tokens", r, None)
            .fact("llamacpp.served_max_tokens", largest, None)
            .fact("llamacpp.requests_served", served, None);
    }
}

/// Whether a backend allocation line is whole and says out of memory.
fn is_cuda_malloc_oom(text: &str) -> bool {
    CUDA_MALLOC
        .captures(text)
        .is_some_and(|c| is_oom_error(&c["err"]))
}

fn is_oom_error(err: &str) -> bool {
    let err = err.to_ascii_lowercase();
    err.contains("out of memory") || err.contains("outofmemory")
}

/// The backend's allocation line as a fixed-width terminal or a paste wrapped it, read
/// whole: cut inside its error (`...: cudaMalloc failed: out of m` / `emory`: joined with
/// the lines after, which are then used up), or before the API's name (`...allocating
/// 27371.91 MiB on device 0` / `: cudaMalloc failed: out of memory`: the piece with the
/// anchor is the second, so it is joined with the line before). `None` when the line is
/// whole or not such a piece.
fn wrapped_cuda_malloc(line: &Line<'_>) -> Option<(String, u32)> {
    let text = line.text;
    if !text.contains("Malloc failed") {
        return None;
    }
    if let Some(c) = CUDA_MALLOC.captures(text) {
        let err = c["err"].trim().to_ascii_lowercase();
        // Whole already; or another error (`CUDA-capable device(s) is/are busy`), whole and
        // not an OOM.
        if is_oom_error(&err) || !"out of memory".starts_with(&err) {
            return None;
        }
        return super::join_whole(line, is_cuda_malloc_oom, |p| p.contains("Malloc failed"));
    }
    let before = line.preceding(1).into_iter().next()?;
    let head = before.text.trim_end();
    [format!("{head}{text}"), format!("{head} {text}")]
        .into_iter()
        .find(|t| is_cuda_malloc_oom(t))
        .map(|t| (t, 0))
}

/// Reads an allocation failure or its consequence. Returns whether the line was one (or a
/// look-alike that must not be read further).
fn recognize_failure(line: &Line<'_>, out: &mut Emit) -> bool {
    let joined = wrapped_cuda_malloc(line);
    let text = joined.as_ref().map_or(line.text, |(t, _)| t.as_str());
    // Look-alikes first.
    if text.contains("of pinned memory")
        || text.contains("retrying without pipeline parallelism")
        || text.contains("try reducing --n-gpu-layers")
    {
        return true;
    }
    if (CUDA_MALLOC.is_match(text) || BUFFER_FAIL.is_match(text)) && retried(line) {
        return true;
    }
    if text.contains(POOL_FULL) {
        // The pool is the compute graph's scratch, sized from the batch: no device ran out,
        // the graph outgrew the estimate. A terminal's wrap may cut its numbers: read them
        // joined with the pieces after it, or the failure without them.
        let pool_joined = (!CONTEXT_POOL.is_match(text))
            .then(|| {
                super::join_whole(
                    line,
                    |t| CONTEXT_POOL.is_match(t),
                    |p| p.contains(POOL_FULL),
                )
            })
            .flatten();
        let pool_text = pool_joined.as_ref().map_or(text, |(t, _)| t.as_str());
        let mut f = device_failure(line, "compute", "cpu", None);
        if let Some(m) = CONTEXT_POOL
            .captures(pool_text)
            .and_then(|c| c.name("need"))
        {
            if let Ok(b) = m.as_str().parse::<u64>() {
                // A span only where the numbers are on the line itself.
                let at = pool_joined.is_none().then(|| span(&m)).flatten();
                f.fact("oom.requested_bytes", b, at);
            }
        }
        if let Some((joined, used)) = pool_joined {
            out.consume(used);
            f.text = Some(joined);
        }
        out.failure(f);
        return true;
    }
    if let Some(c) = CUDA_MALLOC.captures(text) {
        let err = c.name("err").map(|m| m.as_str()).unwrap_or("");
        let lower = err.to_ascii_lowercase();
        if !(lower.contains("out of memory") || lower.contains("outofmemory")) {
            return true;
        }
        let api = c.name("api").map(|m| m.as_str()).unwrap_or("cuda");
        let backend = if api == "hip" { "hip" } else { "cuda" };
        let dev = c.name("dev").and_then(|d| d.as_str().parse().ok());
        let mut f = device_failure(line, classify(line), backend, dev);
        if let Some(m) = c.name("mib") {
            if let Some(b) = mib(m.as_str()) {
                f.fact("oom.requested_bytes", b, span(&m));
            }
        }
        if let Some((joined, used)) = &joined {
            out.consume(*used);
            f.text = Some(joined.clone());
        }
        out.failure(f);
        return true;
    }
    if let Some(c) = BUFFER_FAIL.captures(text) {
        let buft = c.name("buft").map(|m| m.as_str()).unwrap_or("");
        let func = c.name("func").map(|m| m.as_str()).unwrap_or("");
        let bytes = c.name("bytes");
        let kind = if func.contains("gallocr") {
            image_if_encoding("compute", line)
        } else {
            classify(line)
        };
        let mut f = if is_host_buft(buft) {
            // A compute graph reserved in RAM (a CPU-only run, or the CPU's share of a split
            // one) is still a compute buffer: what it was for is kept.
            host_failure(line, if kind == "compute" { "compute" } else { "host" })
        } else {
            device_failure(line, kind, backend_of(buft), device_of_buft(buft))
        };
        if let Some(m) = bytes {
            if let Ok(b) = m.as_str().parse::<u64>() {
                f.fact("oom.requested_bytes", b, span(&m));
            }
        }
        // The backend line before it (`allocating ... cudaMalloc failed`) is the same
        // allocation: restate, don't count.
        f.wrapper = line.preceding(2).iter().any(|l| {
            CUDA_MALLOC.is_match(&l.text)
                || l.text.contains("Malloc failed")
                || CPU_BUFFER_FAIL.is_match(&l.text)
        });
        out.failure(f);
        return true;
    }
    if let Some(c) = CPU_BUFFER_FAIL.captures(text) {
        // The backend's line comes first; the caller's says next what the buffer was:
        // `ggml_gallocr_reserve_n: failed to allocate CPU buffer` is the compute graph,
        // `llama_kv_cache_init: failed to allocate buffer for kv cache` the KV cache.
        let what = line
            .following(2)
            .iter()
            .find_map(|l| {
                if l.text.contains("gallocr") && l.text.contains("failed to allocate") {
                    Some("compute")
                } else {
                    kind_of(&l.text).filter(|k| *k == "kv" || *k == "compute")
                }
            })
            .unwrap_or("host");
        let mut f = host_failure(line, what);
        if let Some(m) = c.name("bytes") {
            if let Ok(b) = m.as_str().parse::<u64>() {
                f.fact("oom.requested_bytes", b, span(&m));
            }
        }
        out.failure(f);
        return true;
    }
    if let Some(c) = METAL_FAIL.captures(text) {
        let mut f = device_failure(line, classify(line), "metal", Some(0));
        if let Some(m) = c.name("mib") {
            if let Some(b) = mib(m.as_str()) {
                f.fact("oom.requested_bytes", b, span(&m));
            }
        }
        out.failure(f);
        return true;
    }
    if let Some(c) = VULKAN_FAIL.captures(text) {
        let mut f = device_failure(line, classify(line), "vulkan", None);
        if let Some(m) = c.name("bytes") {
            if let Ok(b) = m.as_str().parse::<u64>() {
                f.fact("oom.requested_bytes", b, span(&m));
            }
        }
        out.failure(f);
        return true;
    }
    // MLX's `[METAL] Command buffer execution failed` carries the same code: its recogniser's.
    if METAL_RUNTIME.is_match(text) && !text.contains("[METAL] Command buffer") {
        let mut f = device_failure(line, "runtime", "metal", Some(0));
        // `command buffer 0 failed with status 5` lines repeat it for every buffer.
        f.wrapper = line
            .preceding(3)
            .iter()
            .any(|l| METAL_RUNTIME.is_match(&l.text));
        out.failure(f);
        return true;
    }
    // Without its reason, a failed command buffer is out of memory only where the buffers
    // had passed Metal's working set before it.
    if METAL_STATUS_ERROR.is_match(text) && !text.contains("[METAL] Command buffer") {
        let mut f = device_failure(line, "runtime", "metal", Some(0));
        f.requires = Some(("llamacpp.metal_past_working_set_bytes", 1.0));
        out.failure(f);
        return true;
    }
    if VULKAN_WRAP.is_match(text) && text.contains("vulkan") {
        let mut f = device_failure(line, classify(line), "vulkan", None);
        f.wrapper = true;
        out.failure(f);
        return true;
    }
    if let Some(c) = CUDA_ERROR.captures(text) {
        // Only llama.cpp's macro: the next line names the ggml function. A bare `CUDA error:
        // out of memory` is PyTorch's.
        let next = line.following(2);
        let cur = next.iter().find_map(|l| {
            CURRENT_DEVICE
                .captures(&l.text)
                .map(|c| (c, l.text.clone()))
        });
        let Some((_, next_text)) = cur else {
            return false;
        };
        let Some(cd) = CURRENT_DEVICE.captures(&next_text) else {
            return false;
        };
        let backend = match c.name("b").map(|m| m.as_str()) {
            Some("ROCm") | Some("HIP") => "hip",
            Some("MUSA") => "musa",
            Some("SYCL") => "sycl",
            Some("CANN") => "cann",
            _ => "cuda",
        };
        let dev = cd.name("dev").and_then(|d| d.as_str().parse().ok());
        let func = cd.name("func").map(|m| m.as_str().to_string());
        let kind = match classify(line) {
            "unknown" => "runtime",
            k => k,
        };
        let mut f = device_failure(line, kind, backend, dev);
        if let Some(func) = func {
            f.fact("llamacpp.failed_function", func, None);
        }
        served_before(line, &mut f);
        f.text = Some(format!("{} {}", text.trim(), next_text.trim()));
        out.consume(1);
        out.failure(f);
        return true;
    }
    if let Some(c) = CUDA_ERROR_2023.captures(text) {
        let _ = c;
        // Those builds allocated as they evaluated, so a failure nothing else explains was
        // the evaluation's; but not while the model was still loading (see `classify_buffer`).
        let kind = match classify(line) {
            "unknown" if !loading_2023(line) => "runtime",
            k => k,
        };
        out.failure(device_failure(line, kind, "cuda", None));
        return true;
    }
    if KV_FULL.is_match(text) {
        let mut f = Failure::new("kv-exhausted", engine_for(line), Domain::Device);
        f.fact("llamacpp.alloc_kind", "kv", None);
        out.failure(f);
        return true;
    }
    // Consequence lines: they say what was being allocated. Wrappers, unless alone.
    if let Some(kind) = kind_of(text) {
        if text.contains("failed") || text.contains("unable to allocate") {
            let mut buft = load_error_buffer(text)
                .flatten()
                .unwrap_or_default()
                .to_string();
            // Set when neither this line nor one just above names the buffer.
            let mut unnamed = false;
            if buft.is_empty() {
                // `failed to allocate compute buffers` names no buffer type: the allocation
                // just above it that failed does (a CPU-only run's is in RAM).
                let above = line.preceding(3);
                let in_ram = above.iter().any(|l| is_cpu_alloc_failure(&l.text));
                unnamed = !in_ram
                    && !above.iter().any(|l| {
                        let t = &l.text;
                        CUDA_MALLOC.is_match(t)
                            || BUFFER_FAIL.is_match(t)
                            || METAL_FAIL.is_match(t)
                            || VULKAN_FAIL.is_match(t)
                            || t.contains("Malloc failed")
                            || t.contains("ErrorOutOfDeviceMemory")
                    });
                buft = if in_ram { "CPU" } else { "gpu" }.into();
            }
            let mut f = if is_host_buft(&buft) {
                // A KV cache or a compute graph in RAM keeps what it was for.
                host_failure(
                    line,
                    if kind == "compute" || kind == "kv" {
                        kind
                    } else {
                        "host"
                    },
                )
            } else {
                let kind = image_if_encoding(kind, line);
                let mut f = device_failure(line, kind, backend_of(&buft), device_of_buft(&buft));
                // 2024's `unable to allocate backend buffer` alone: the weights' part in RAM
                // fails the same way as the part on the GPU.
                if unnamed && kind == "weights" {
                    f.fact("llamacpp.buffer_unnamed", true, None);
                }
                f
            };
            if let Some(m) = COMPUTE_FAIL.captures(text).and_then(|c| c.name("mib")) {
                if let Some(b) = mib(m.as_str()) {
                    f.fact("oom.requested_bytes", b, span(&m));
                }
            }
            f.wrapper = true;
            out.failure(f);
            return true;
        }
    }
    false
}

/// Sums the values of a block of consecutive lines of the same kind ending at this one
/// (per-device lines: `CUDA0 model buffer size`, `CUDA1 model buffer size`, ...).
fn block_sum(
    line: &Line<'_>,
    here: f64,
    same_block: impl Fn(&str) -> Option<f64>,
    max_lines: usize,
) -> f64 {
    block_sum2(
        line,
        (here, 0.0),
        |t| same_block(t).map(|v| (v, 0.0)),
        max_lines,
    )
    .0
}

/// [`block_sum`] of two figures at once (a buffer's device and host parts), in one walk.
fn block_sum2(
    line: &Line<'_>,
    here: (f64, f64),
    same_block: impl Fn(&str) -> Option<(f64, f64)>,
    max_lines: usize,
) -> (f64, f64) {
    let mut total = here;
    for l in line.preceding(max_lines) {
        match same_block(&l.text) {
            Some((a, b)) => {
                total.0 += a;
                total.1 += b;
            }
            None => break,
        }
    }
    total
}

/// [`block_sum`] of a MiB figure, group `group` of `re`, over the block of lines `re`
/// matches, starting with this line's `here`.
fn mib_block_sum(line: &Line<'_>, re: &Regex, group: &str, here: &str) -> f64 {
    let mib_of = |t: &str| {
        re.captures(t)
            .and_then(|c| c.name(group).and_then(|m| mib(m.as_str())))
            .map(|v| v as f64)
    };
    block_sum(line, mib(here).unwrap_or(0) as f64, mib_of, 16)
}

fn buffer_class(func: &str, what: Option<&str>) -> &'static str {
    match what {
        Some("model") => "model",
        Some("KV") | Some("RS") => "kv",
        Some("compute") => "compute",
        Some("output") => "output",
        _ => {
            if func.contains("kv_cache") {
                "kv"
            } else if func.contains("load_tensors") {
                "model"
            } else if func.contains("context") {
                "compute"
            } else {
                "other"
            }
        }
    }
}

/// `(class, is_host, bytes)` of a buffer-size line.
fn buffer_line(text: &str) -> Option<(&'static str, bool, f64)> {
    let c = BUFFER_SIZE.captures(text)?;
    let func = c.name("func")?.as_str();
    let buft = c.name("buft")?.as_str();
    let class = buffer_class(func, c.name("what").map(|m| m.as_str()));
    let n = c.name("n")?.as_str();
    let u = c.name("u")?.as_str();
    let bytes = size_bin(n, u)? as f64;
    Some((class, is_host_buft(buft), bytes))
}

fn accounting(line: &Line<'_>, out: &mut Emit) {
    let text = line.text;
    if BUILD.is_match(text) {
        out.run_start();
        if !line
            .meta
            .process
            .as_deref()
            .is_some_and(|p| p.contains("ollama"))
        {
            out.engine(id::LLAMACPP);
        }
        return;
    }
    if text.contains("loaded meta data with") {
        let started = line.preceding(80).iter().any(|l| {
            let t = &l.text;
            t.contains("build")
                || t.contains("using device")
                || t.starts_with("msg=")
                || t.contains(" msg=")
                || t.contains("system_info")
                || t.contains("loading model")
                || t.contains("ggml_cuda_init")
                || t.contains("llama-server")
                || t.contains("llama-cli")
        });
        if !started {
            out.run_start();
        }
        out.phase(PhaseMark::ModelLoad);
        return;
    }
    if text.contains("loading model tensors") {
        out.phase(PhaseMark::ModelLoad);
        if let Some(c) = MMAP.captures(text) {
            let m = c.name("v").expect("group v");
            out.fact("llamacpp.mmap", m.as_str() == "true", span(&m));
        }
        return;
    }
    if text.contains("llama_context: constructing") {
        out.phase(PhaseMark::EngineStartup);
        return;
    }
    if text.contains("warming up the model") {
        out.phase(PhaseMark::Warmup);
        return;
    }
    if text.contains("server is listening on")
        || text.contains("all slots are idle")
        || text.contains("launch_slot")
    {
        out.phase(PhaseMark::Serving);
        return;
    }
    if let Some(c) = USING_DEVICE.captures(text) {
        let m = c.name("free").expect("group free");
        let total = mib_block_sum(line, &USING_DEVICE, "free", m.as_str());
        out.fact("llamacpp.free_vram_bytes", total, span(&m));
        let n = 1 + line
            .preceding(16)
            .iter()
            .take_while(|l| USING_DEVICE.is_match(&l.text))
            .count();
        if !USING_DEVICE.captures(text).is_some_and(|c| {
            c.name("dev")
                .is_some_and(|d| d.as_str().to_ascii_uppercase().starts_with("CPU"))
        }) {
            out.fact("llamacpp.gpu_count", n, None);
        }
        if let Some(d) = c.name("desc") {
            if n == 1 {
                out.fact("llamacpp.device_name", d.as_str().to_string(), span(&d));
            }
        }
        return;
    }
    if let Some(c) = FOUND_DEVICES.captures(text) {
        let m = c.name("n").expect("group n");
        if let Ok(n) = m.as_str().parse::<u32>() {
            out.fact("llamacpp.gpu_count", n, span(&m));
        }
        return;
    }
    if let Some(c) = DEVICE_ROW.captures(text.trim_start()) {
        if c.name("i").is_some_and(|i| i.as_str() == "0") {
            let m = c.name("name").expect("group name");
            out.fact("llamacpp.device_name", m.as_str().trim().to_string(), None);
        }
        return;
    }
    if let Some((class, host, bytes)) = buffer_line(text) {
        // (device, host) parts of one buffer line.
        let split = |host: bool, b: f64| if host { (0.0, b) } else { (b, 0.0) };
        let (total_gpu, total_host) = block_sum2(
            line,
            split(host, bytes),
            |t| {
                buffer_line(t)
                    .filter(|(c, ..)| *c == class)
                    .map(|(_, h, b)| split(h, b))
            },
            16,
        );
        let sp = BUFFER_SIZE
            .captures(text)
            .and_then(|c| c.name("n"))
            .map(|m| (m.start(), m.end()));
        match class {
            "model" => {
                out.fact("llamacpp.model_gpu_bytes", total_gpu, sp);
                out.fact("llamacpp.model_host_bytes", total_host, sp);
            }
            "kv" => {
                out.fact("llamacpp.kv_gpu_bytes", total_gpu, sp);
                out.fact("llamacpp.kv_bytes", total_gpu + total_host, sp);
            }
            "compute" => {
                out.fact("llamacpp.compute_gpu_bytes", total_gpu, sp);
                out.fact("llamacpp.compute_host_bytes", total_host, sp);
            }
            _ => {}
        }
        return;
    }
    if let Some(c) = KV_SUMMARY.captures(text) {
        let m = c.name("mib").expect("group mib");
        if let Some(b) = mib(m.as_str()) {
            out.fact("llamacpp.kv_bytes", b, span(&m));
        }
        let cells = c.name("cells").expect("group cells");
        if let Ok(n) = cells.as_str().parse::<u64>() {
            out.fact("llamacpp.kv_cells", n, span(&cells));
        }
        for (g, name) in [("tk", "llamacpp.type_k"), ("tv", "llamacpp.type_v")] {
            if let Some(m) = c.name(g) {
                out.fact(name, m.as_str().to_string(), span(&m));
            }
        }
        return;
    }
    if let Some(c) = KV_SELF.captures(text) {
        let m = c.name("n").expect("group n");
        let u = c.name("u").map(|u| u.as_str()).unwrap_or("MiB");
        if let Some(b) = size_bin(m.as_str(), u) {
            out.fact("llamacpp.kv_bytes", b, span(&m));
        }
        for (g, name) in [("tk", "llamacpp.type_k"), ("tv", "llamacpp.type_v")] {
            if let Some(m) = c.name(g) {
                out.fact(name, m.as_str().to_string(), span(&m));
            }
        }
        return;
    }
    if let Some(c) = VRAM_2023.captures(text) {
        let m = c.name("n").expect("group n");
        if let Some(b) = size_bin(m.as_str(), "MB") {
            let name = if c.name("what").is_some_and(|w| w.as_str() == "VRAM kv self") {
                "llamacpp.kv_gpu_bytes"
            } else {
                "llamacpp.model_gpu_bytes"
            };
            out.fact(name, b, span(&m));
        }
        return;
    }
    if let Some(c) = OFFLOADED.captures(text) {
        let d = c.name("done").expect("group done");
        let t = c.name("total").expect("group total");
        if let (Ok(dn), Ok(tn)) = (d.as_str().parse::<u32>(), t.as_str().parse::<u32>()) {
            out.fact("llamacpp.layers_offloaded", dn, span(&d));
            out.fact("llamacpp.layers_total", tn, span(&t));
        }
        return;
    }
    if let Some(c) = BREAKDOWN_DEV.captures(text) {
        let dev = c.name("dev").map(|m| m.as_str()).unwrap_or("");
        if dev.trim() != "Host" {
            let sum = |g: &str| -> f64 {
                let here = c
                    .name(g)
                    .and_then(|m| parse_number(m.as_str()))
                    .unwrap_or(0.0);
                block_sum(
                    line,
                    here,
                    |t| {
                        BREAKDOWN_DEV
                            .captures(t)
                            .and_then(|c| c.name(g).and_then(|m| parse_number(m.as_str())))
                    },
                    16,
                ) * 1048576.0
            };
            let total = sum("total");
            let unacc = sum("unacc").max(0.0);
            let sp = c.name("unacc").map(|m| (m.start(), m.end()));
            out.fact("llamacpp.device_total_bytes", total, None);
            out.fact("llamacpp.unaccounted_bytes", unacc, sp);
        }
        return;
    }
    if let Some(c) = FIT_PROJECTED.captures(text) {
        let u = c.name("used").expect("group used");
        let f = c.name("free").expect("group free");
        if let Some(b) = mib(u.as_str()) {
            out.fact("llamacpp.projected_bytes", b, span(&u));
        }
        if let Some(b) = mib(f.as_str()) {
            out.fact("llamacpp.free_vram_bytes", b, span(&f));
        }
        return;
    }
    if let Some(m) = METAL_WORKING_SET.captures(text).and_then(|c| c.name("n")) {
        if let Some(b) = size_from_parts(m.as_str(), "MB", SiBase::Decimal) {
            out.fact("llamacpp.device_total_bytes", b, span(&m));
        }
        return;
    }
    if let Some(c) = METAL_ALLOC_TOTAL.captures(text) {
        let used = c.name("used").expect("group used");
        let max = c.name("max").expect("group max");
        if let (Some(u), Some(m)) = (mib(used.as_str()), mib(max.as_str())) {
            out.fact("llamacpp.device_total_bytes", m, span(&max));
            if u > m {
                out.fact("llamacpp.metal_past_working_set_bytes", u - m, span(&used));
            }
        }
        return;
    }
    if let Some(c) = FIT_DEVICE.captures(text) {
        let m = c.name("total").expect("group total");
        let total = mib_block_sum(line, &FIT_DEVICE, "total", m.as_str());
        out.fact("llamacpp.device_total_bytes", total, span(&m));
        return;
    }
    if let Some(c) = FIT_DEFICIT.captures(text) {
        let m = c.name("n").expect("group n");
        if let Some(b) = mib(m.as_str()) {
            out.fact("llamacpp.fit_deficit_bytes", b, span(&m));
        }
        return;
    }
    if let Some(c) = FIT_CTX.captures(text) {
        let from = c.name("from").expect("group from");
        let to = c.name("to").expect("group to");
        if let (Ok(a), Ok(b)) = (from.as_str().parse::<u64>(), to.as_str().parse::<u64>()) {
            out.fact("llamacpp.fit_ctx_from", a, span(&from));
            out.fact("llamacpp.n_ctx", b, span(&to));
        }
        return;
    }
    if let Some(c) = FILE_SIZE.captures(text) {
        let n = c.name("n").expect("group n");
        let u = c.name("u").map(|m| m.as_str()).unwrap_or("GiB");
        if let Some(b) = size_bin(n.as_str(), u) {
            out.fact("model.weights_bytes", b, span(&n));
        }
        if let Some(m) = c.name("bpw") {
            if let Some(v) = parse_number(m.as_str()) {
                out.fact("llamacpp.bpw", v, span(&m));
            }
        }
        return;
    }
    if let Some(c) = FILE_TYPE.captures(text) {
        let m = c.name("t").expect("group t");
        out.fact("llamacpp.file_type", m.as_str().to_string(), span(&m));
        return;
    }
    if let Some(c) = MODEL_PARAMS.captures(text) {
        let n = c.name("n").expect("group n");
        let mult = match c.name("u").map(|m| m.as_str()) {
            Some("K") => 1e3,
            Some("M") => 1e6,
            Some("T") => 1e12,
            _ => 1e9,
        };
        if let Some(v) = parse_number(n.as_str()) {
            out.fact("model.params", (v * mult).round(), span(&n));
        }
        return;
    }
    if let Some(c) = GENERAL_NAME.captures(text) {
        let m = c.name("n").expect("group n");
        out.fact("model.name", m.as_str().to_string(), span(&m));
        return;
    }
    if let Some(c) = CTX_SEQ_WARN.captures(text) {
        let s = c.name("seq").expect("group seq");
        let t = c.name("train").expect("group train");
        if let (Ok(a), Ok(b)) = (s.as_str().parse::<u64>(), t.as_str().parse::<u64>()) {
            out.fact("llamacpp.n_ctx_seq", a, span(&s));
            out.fact("llamacpp.n_ctx_train", b, span(&t));
        }
        return;
    }
    for (re, name) in [
        (&*N_LAYER, "llamacpp.n_layer"),
        (&*N_EXPERT, "llamacpp.n_expert"),
        (&*N_CTX_TRAIN, "llamacpp.n_ctx_train"),
    ] {
        if let Some(c) = re.captures(text) {
            let m = c.name("n").expect("group n");
            if let Ok(n) = m.as_str().parse::<u64>() {
                out.fact(name, n, span(&m));
            }
            return;
        }
    }
    for c in CTX_PARAM.captures_iter(text) {
        let k = c.name("k").expect("group k").as_str();
        let m = c.name("v").expect("group v");
        let v = m.as_str();
        let num = v.parse::<u64>().ok();
        match (k, num) {
            ("n_ctx", Some(n)) => out.fact("llamacpp.n_ctx", n, span(&m)),
            ("n_ctx_per_seq" | "n_ctx_seq" | "n_ctx_slot", Some(n)) => {
                out.fact("llamacpp.n_ctx_seq", n, span(&m))
            }
            ("n_batch", Some(n)) => out.fact("llamacpp.n_batch", n, span(&m)),
            ("n_ubatch", Some(n)) => out.fact("llamacpp.n_ubatch", n, span(&m)),
            ("n_seq_max", Some(n)) => out.fact("llamacpp.n_seq_max", n, span(&m)),
            ("flash_attn", _) => out.fact("llamacpp.flash_attn", on_off(v), span(&m)),
            ("type_k", _) => out.fact("llamacpp.type_k", v.to_string(), span(&m)),
            ("type_v", _) => out.fact("llamacpp.type_v", v.to_string(), span(&m)),
            _ => {}
        }
        if k == "n_ctx" {
            out.phase(PhaseMark::EngineStartup);
        }
    }
}

/// `1`/`enabled`/`true`/`on` → on; `0`/`disabled`/`false`/`off` → off; else auto.
fn on_off(v: &str) -> &'static str {
    match v.to_ascii_lowercase().as_str() {
        "1" | "enabled" | "true" | "on" | "yes" => "on",
        "0" | "disabled" | "false" | "off" | "no" => "off",
        _ => "auto",
    }
}

/// Reads llama.cpp's flags from a command line in the log (llama-server, llama-cli, Ollama's
/// runner). `ollama` says whether Ollama started it (its `--ctx-size` is num_ctx × parallel
/// and its `--kv-cache-type` sets both K and V). Returns what it found, for Ollama's facts.
pub(crate) fn command_line(text: &str, out: &mut Emit, ollama: bool) -> CommandLine {
    let mut cl = CommandLine::default();
    // Tokens with their byte offsets.
    let mut toks: Vec<(usize, &str)> = Vec::new();
    let mut start = None;
    for (i, ch) in text.char_indices() {
        if ch.is_whitespace() || ch == '"' {
            if let Some(s) = start.take() {
                toks.push((s, &text[s..i]));
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        toks.push((s, &text[s..]));
    }
    let mut i = 0;
    while i < toks.len() {
        let (_, tok) = toks[i];
        let (flag, inline) = match tok.split_once('=') {
            Some((f, v)) if f.starts_with('-') => (f, Some(v)),
            _ => (tok, None),
        };
        let value = |i: usize| -> Option<(usize, &str)> {
            if let Some(v) = inline {
                let off = toks[i].0 + flag.len() + 1;
                return Some((off, v));
            }
            toks.get(i + 1)
                .filter(|(_, v)| !v.starts_with('-') || v.parse::<i64>().is_ok())
                .copied()
        };
        let sp = |off: usize, v: &str| Some((off, off + v.len()));
        let mut used_next = false;
        match flag {
            "-c" | "--ctx-size" => {
                if let Some((o, v)) = value(i) {
                    used_next = inline.is_none();
                    if let Ok(n) = v.parse::<u64>() {
                        cl.ctx = Some(n);
                        if n > 0 && !ollama {
                            out.fact("llamacpp.n_ctx", n, sp(o, v));
                        }
                    }
                }
            }
            "-ngl" | "--n-gpu-layers" | "--gpu-layers" => {
                if let Some((o, v)) = value(i) {
                    used_next = inline.is_none();
                    if let Ok(n) = v.parse::<i64>() {
                        if n >= 0 {
                            cl.ngl = Some(n as u64);
                            out.fact("llamacpp.n_gpu_layers", n as u64, sp(o, v));
                        }
                    }
                }
            }
            "-np" | "--parallel" => {
                if let Some((o, v)) = value(i) {
                    used_next = inline.is_none();
                    if let Ok(n) = v.parse::<u64>() {
                        cl.parallel = Some(n);
                        if !ollama {
                            out.fact("llamacpp.n_parallel", n, sp(o, v));
                        }
                    }
                }
            }
            "-b" | "--batch-size" => {
                if let Some((o, v)) = value(i) {
                    used_next = inline.is_none();
                    if let Ok(n) = v.parse::<u64>() {
                        cl.batch = Some(n);
                        out.fact("llamacpp.n_batch", n, sp(o, v));
                    }
                }
            }
            "-ub" | "--ubatch-size" => {
                if let Some((o, v)) = value(i) {
                    used_next = inline.is_none();
                    if let Ok(n) = v.parse::<u64>() {
                        out.fact("llamacpp.n_ubatch", n, sp(o, v));
                    }
                }
            }
            "-ctk" | "--cache-type-k" | "--kv-cache-type" | "-ctv" | "--cache-type-v" => {
                if let Some((o, v)) = value(i) {
                    used_next = inline.is_none();
                    let v = v.to_ascii_lowercase();
                    if flag.ends_with('k') || flag == "--kv-cache-type" {
                        out.fact("llamacpp.type_k", v.clone(), sp(o, &v));
                    }
                    if flag.ends_with('v') || flag == "--kv-cache-type" {
                        out.fact("llamacpp.type_v", v.clone(), sp(o, &v));
                    }
                    cl.kv_type = Some(v);
                }
            }
            "-fa" | "--flash-attn" => {
                let next = value(i).filter(|(_, v)| {
                    matches!(
                        v.to_ascii_lowercase().as_str(),
                        "on" | "off" | "auto" | "1" | "0" | "true" | "false"
                    )
                });
                let (s, v) = match next {
                    Some((o, v)) => {
                        used_next = inline.is_none();
                        (sp(o, v), on_off(v))
                    }
                    None => (sp(toks[i].0, flag), "on"),
                };
                cl.flash = Some(v == "on");
                out.fact("llamacpp.flash_attn", v, s);
            }
            "--no-mmap" => out.fact("llamacpp.mmap", false, sp(toks[i].0, flag)),
            "-nkvo" | "--no-kv-offload" => {
                out.fact("llamacpp.kv_offload", false, sp(toks[i].0, flag))
            }
            _ => {}
        }
        i += if used_next { 2 } else { 1 };
    }
    cl
}

/// What a command line said, for callers that map it to their own facts.
#[derive(Debug, Default)]
pub(crate) struct CommandLine {
    pub ctx: Option<u64>,
    pub ngl: Option<u64>,
    pub parallel: Option<u64>,
    pub batch: Option<u64>,
    pub kv_type: Option<String>,
    pub flash: Option<bool>,
}

/// Largest common GGUF quantization at or below `bpw` bits per weight.
pub fn quant_for_bpw(bpw: f64) -> Option<&'static str> {
    const TABLE: &[(f64, &str)] = &[
        (8.5, "Q8_0"),
        (6.56, "Q6_K"),
        (5.69, "Q5_K_M"),
        (4.89, "Q4_K_M"),
        (4.58, "Q4_K_S"),
        (4.25, "IQ4_XS"),
        (3.91, "Q3_K_M"),
        (3.5, "Q3_K_S"),
        (3.06, "IQ3_XXS"),
        (2.7, "IQ2_M"),
        (2.31, "IQ2_XS"),
    ];
    TABLE.iter().find(|(b, _)| *b <= bpw).map(|(_, n)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::evidence::{InputName, Value};
    use crate::ingest::log::engines::Observation;
    use std::sync::Arc;

    const MIB: f64 = 1048576.0;

    fn run(text: &str) -> Emit {
        crate::ingest::log::engines::run_standalone(&LlamaCpp, text)
    }

    fn failure(text: &str) -> Option<Failure> {
        crate::ingest::log::engines::emitted_failure(&run(text))
    }

    fn facts(text: &str) -> Vec<(&'static str, Value)> {
        crate::ingest::log::engines::fact_records(run(text))
    }

    fn fact(text: &str, name: &str) -> Option<Value> {
        facts(text)
            .into_iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
    }

    /// The backend's allocation line cut by a fixed-width terminal, before `cudaMalloc` or
    /// inside `out of memory`, reads as the whole line does.
    /// Metal's working-set budget is the device's size to llama.cpp's allocations (decimal
    /// megabytes, as Metal reports them).
    #[test]
    fn metal_working_set_is_the_device() {
        assert_eq!(
            fact(
                "ggml_metal_init: recommendedMaxWorkingSetSize  = 51539.61 MB",
                "llamacpp.device_total_bytes"
            ),
            Some(Value::Num(51539610000.0))
        );
    }

    #[test]
    fn a_wrapped_backend_allocation_line_is_read_whole() {
        use crate::ingest::log::grouping::analyze_log;
        let whole = "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 18432.50 MiB on device 1: cudaMalloc failed: out of memory";
        let tail = "llama_model_load: error loading model: unable to allocate CUDA1 buffer\n\
llama_load_model_from_file: failed to load model\n";
        for width in [0, 64, 80, 100, 108, 112] {
            let mut log = String::from("load_tensors: offloading 62 repeating layers to GPU\n");
            if width == 0 {
                log.push_str(whole);
                log.push('\n');
            } else {
                for piece in whole.as_bytes().chunks(width) {
                    log.push_str(std::str::from_utf8(piece).unwrap());
                    log.push('\n');
                }
            }
            log.push_str(tail);
            let input: InputName = Arc::from("t.log");
            let ev = analyze_log(&mut log.as_bytes(), &input).unwrap().0;
            assert_eq!(ev.incidents.len(), 1, "width {width}:\n{log}");
            let f = &ev.incidents[0].facts;
            assert_eq!(f.str("failure.kind"), Some("device-oom"), "{width}");
            assert_eq!(f.num("oom.requested_bytes"), Some(18432.5 * MIB), "{width}");
            assert_eq!(f.num("oom.device"), Some(1.0), "width {width}");
        }
        // A whole line with another error is still not an OOM.
        assert!(
            failure("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 100.00 MiB on device 0: cudaMalloc failed: CUDA-capable device(s) is/are busy or unavailable").is_none()
        );
    }

    /// 2023's loader printed the model's hyperparameters, `n_ctx` among them, as
    /// `llama_model_load_internal:` lines: a CUDA error right after them is the loading,
    /// not the KV cache (the context was created later, by `llama_init_from_file`), and the
    /// weights only where layers were offloaded.
    #[test]
    fn a_failure_after_the_2023_loaders_hyperparameters_is_the_loading() {
        use crate::ingest::log::grouping::analyze_log;
        let log = "llama.cpp: loading model from models/13B/ggml-model-q4_0.bin\n\
llama_model_load_internal: format     = ggjt v1 (latest)\n\
llama_model_load_internal: n_ctx      = 2048\n\
llama_model_load_internal: n_embd     = 5120\n\
llama_model_load_internal: n_layer    = 40\n\
llama_model_load_internal: ggml ctx size = 7759.84 KB\n\
llama_model_load_internal: mem required  = 9807.47 MB (+ 1608.00 MB per state)\n\
CUDA error 2 at ggml-cuda.cu:412: out of memory\n";
        let input: InputName = Arc::from("t.log");
        let ev = analyze_log(&mut log.as_bytes(), &input).unwrap().0;
        assert_eq!(ev.incidents.len(), 1);
        // No layer was offloaded: the device held no weights, and nothing was evaluated yet.
        let f = &ev.incidents[0].facts;
        assert_eq!(f.str("llamacpp.alloc_kind"), Some("unknown"));
        let offloading = log.replace(
            "llama_model_load_internal: mem required",
            "llama_model_load_internal: offloaded 40/43 layers to GPU\nllama_model_load_internal: mem required",
        );
        let ev = analyze_log(&mut offloading.as_bytes(), &input).unwrap().0;
        let f = &ev.incidents[0].facts;
        assert_eq!(f.str("llamacpp.alloc_kind"), Some("weights"));
    }

    /// 2023's ggml context pool: a compute graph larger than the pool sized from the batch.
    #[test]
    fn an_outgrown_context_pool_is_a_compute_failure() {
        let f = failure("ggml_new_tensor_impl: not enough space in the context's memory pool (needed 35007776, available 12582912)")
            .expect("pool failure");
        assert_eq!(f.kind, "device-oom");
        assert_eq!(
            f.get("llamacpp.alloc_kind").and_then(|v| v.as_str()),
            Some("compute")
        );
        assert_eq!(
            f.get("oom.requested_bytes").and_then(|v| v.as_f64()),
            Some(35007776.0)
        );
        assert!(failure("ggml_new_tensor_impl: context's memory pool statistics").is_none());
        // Cut inside a number, nothing after it: the failure without its numbers (the
        // pieces of a wrapped one are joined: `tests/pastes.rs`).
        let f = failure(
            "ggml_new_tensor_impl: not enough space in the context's memory pool (needed 3500",
        )
        .expect("cut pool failure");
        assert_eq!(f.get("oom.requested_bytes"), None);
    }

    /// L-A1..L-A9 and the consequence lines: (text, kind, backend, device, requested bytes, wrapper)
    #[test]
    fn every_allocation_failure_format() {
        type Row = (
            &'static str,
            &'static str,
            Option<&'static str>,
            Option<u32>,
            Option<f64>,
            bool,
        );
        let rows: &[Row] = &[
            (
                "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9216.00 MiB on device 0: cudaMalloc failed: out of memory",
                "device-oom",
                Some("cuda"),
                Some(0),
                Some(9216.0 * MIB),
                false,
            ),
            (
                "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 512.50 MiB on device 1: hipMalloc failed: out of memory",
                "device-oom",
                Some("hip"),
                Some(1),
                Some(512.5 * MIB),
                false,
            ),
            (
                "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 1073741824",
                "device-oom",
                Some("cuda"),
                Some(0),
                Some(1073741824.0),
                false,
            ),
            (
                "ggml_gallocr_reserve_n_impl: failed to allocate ROCm1 buffer of size 2048",
                "device-oom",
                Some("hip"),
                Some(1),
                Some(2048.0),
                false,
            ),
            (
                "alloc_tensor_range: failed to allocate CUDA0 buffer of size 4294967296",
                "device-oom",
                Some("cuda"),
                Some(0),
                Some(4294967296.0),
                false,
            ),
            (
                "alloc_tensor_range: failed to allocate CPU buffer of size 4294967296",
                "host-oom",
                Some("cpu"),
                None,
                Some(4294967296.0),
                false,
            ),
            (
                "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 38654705664",
                "host-oom",
                Some("cpu"),
                None,
                Some(38654705664.0),
                false,
            ),
            (
                "ggml_backend_metal_buffer_type_alloc_buffer: error: failed to allocate buffer, size =  6144.00 MiB",
                "device-oom",
                Some("metal"),
                Some(0),
                Some(6144.0 * MIB),
                false,
            ),
            (
                "ggml_metal_add_buffer: error: failed to allocate 'data' buffer, size =  3000.00 MiB",
                "device-oom",
                Some("metal"),
                Some(0),
                Some(3000.0 * MIB),
                false,
            ),
            (
                "ggml_vulkan: Device memory allocation of size 2147483648 failed.",
                "device-oom",
                Some("vulkan"),
                None,
                Some(2147483648.0),
                false,
            ),
            (
                "ggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory",
                "device-oom",
                Some("vulkan"),
                None,
                None,
                true,
            ),
            (
                "ggml_metal_graph_compute: command buffer 0 failed with status 5 error: Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)",
                "device-oom",
                Some("metal"),
                Some(0),
                None,
                false,
            ),
            (
                "CUDA error 2 at ggml-cuda.cu:6951: out of memory",
                "device-oom",
                Some("cuda"),
                None,
                None,
                false,
            ),
            (
                "llama_model_load: error loading model: unable to allocate CUDA0 buffer",
                "device-oom",
                Some("cuda"),
                Some(0),
                None,
                true,
            ),
            (
                "llama_model_load: error loading model: unable to allocate backend buffer",
                "device-oom",
                Some("gpu"),
                None,
                None,
                true,
            ),
            (
                "llama_model_load: error loading model: unable to allocate backend CPU buffer",
                "host-oom",
                Some("cpu"),
                None,
                None,
                true,
            ),
            (
                "llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache",
                "device-oom",
                Some("gpu"),
                None,
                None,
                true,
            ),
            (
                "llama_new_context_with_model: failed to allocate compute buffers",
                "device-oom",
                Some("gpu"),
                None,
                None,
                true,
            ),
            (
                "llama_context: failed to allocate output buffer of size 0.98 MiB",
                "device-oom",
                Some("gpu"),
                None,
                Some(0.98 * MIB),
                true,
            ),
            (
                "srv  update_slots: failed to decode the batch: KV cache is full - try increasing it via the context size",
                "kv-exhausted",
                None,
                None,
                None,
                false,
            ),
        ];
        for (text, kind, backend, dev, req, wrapper) in rows {
            let f = failure(text).unwrap_or_else(|| panic!("no failure: {text}"));
            assert_eq!(f.kind, *kind, "{text}");
            assert_eq!(
                f.get("oom.backend").and_then(Value::as_str),
                *backend,
                "{text}"
            );
            assert_eq!(f.device, *dev, "{text}");
            match req {
                Some(r) => assert!(
                    (f.get("oom.requested_bytes")
                        .and_then(Value::as_f64)
                        .unwrap()
                        - r)
                        .abs()
                        < 1.0,
                    "{text}"
                ),
                None => assert!(f.get("oom.requested_bytes").is_none(), "{text}"),
            }
            assert_eq!(f.wrapper, *wrapper, "{text}");
            assert_eq!(f.engine, id::LLAMACPP, "{text}");
        }
        // What each consequence line says the buffer was.
        for (text, kind) in [
            (
                "llama_model_load: error loading model: unable to allocate CUDA0 buffer",
                "weights",
            ),
            (
                "llama_kv_cache_init: failed to allocate buffer for kv cache",
                "kv",
            ),
            (
                "llama_new_context_with_model: llama_kv_cache_init() failed for self-attention cache",
                "kv",
            ),
            (
                "llama_init_from_model: failed to initialize the context: failed to allocate compute pp buffers",
                "compute",
            ),
            (
                "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 1024",
                "compute",
            ),
        ] {
            assert_eq!(
                failure(text)
                    .unwrap()
                    .get("llamacpp.alloc_kind")
                    .and_then(Value::as_str),
                Some(kind),
                "{text}"
            );
        }
    }

    #[test]
    fn look_alikes_are_not_failures() {
        for text in [
            "ggml_cuda_host_malloc: failed to allocate 512.00 MiB of pinned memory: out of memory",
            "llama_init_from_model: compute buffer allocation failed, retrying without pipeline parallelism",
            "common_init_from_params: failed to load model '/m/x.gguf', try reducing --n-gpu-layers if you're running out of VRAM",
            "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 100.00 MiB on device 0: cudaMalloc failed: CUDA-capable device(s) is/are busy or unavailable",
            "llama_model_load: error loading model: error loading model architecture: unknown model architecture: 'foo'",
            // A bare CUDA error with no ggml function after it is PyTorch's to read.
            "RuntimeError: CUDA error: out of memory",
            "warning: failed to mlock 4096-byte buffer (after previously locking 0 bytes): Cannot allocate memory",
        ] {
            assert!(failure(text).is_none(), "{text}");
        }
    }

    /// L-M0..L-M13 accounting lines, with the facts and byte values they must yield.
    #[test]
    fn every_accounting_format() {
        let rows: &[(&str, &str, Value)] = &[
            (
                "llama_model_load_from_file_impl: using device CUDA0 (NVIDIA GeForce RTX 4090) (0000:01:00.0) - 22994 MiB free",
                "llamacpp.free_vram_bytes",
                Value::Num(22994.0 * MIB),
            ),
            (
                "llama_model_load_from_file_impl: using device CUDA0 (NVIDIA GeForce RTX 3060) - 11200 MiB free",
                "llamacpp.free_vram_bytes",
                Value::Num(11200.0 * MIB),
            ),
            (
                "ggml_cuda_init: found 2 CUDA devices:",
                "llamacpp.gpu_count",
                Value::Num(2.0),
            ),
            (
                "  Device 0: NVIDIA GeForce RTX 3090, compute capability 8.6, VMM: yes",
                "llamacpp.device_name",
                Value::str("NVIDIA GeForce RTX 3090"),
            ),
            (
                "print_info: file size   = 4.58 GiB (4.89 BPW) ",
                "model.weights_bytes",
                Value::Num((4.58 * 1073741824.0f64).round()),
            ),
            (
                "print_info: file size   = 4.58 GiB (4.89 BPW) ",
                "llamacpp.bpw",
                Value::Num(4.89),
            ),
            (
                "llm_load_print_meta: model size       = 3.80 GiB (4.84 BPW) ",
                "model.weights_bytes",
                Value::Num((3.80 * 1073741824.0f64).round()),
            ),
            (
                "print_info: file type   = Q4_K - Medium",
                "llamacpp.file_type",
                Value::str("Q4_K - Medium"),
            ),
            (
                "print_info: model params     = 8.03 B",
                "model.params",
                Value::Num(8.03e9),
            ),
            (
                "print_info: n_layer          = 32",
                "llamacpp.n_layer",
                Value::Num(32.0),
            ),
            (
                "llama_model_loader: - kv   4:                          llama.block_count u32              = 40",
                "llamacpp.n_layer",
                Value::Num(40.0),
            ),
            (
                "print_info: n_ctx_train      = 131072",
                "llamacpp.n_ctx_train",
                Value::Num(131072.0),
            ),
            (
                "print_info: n_expert         = 128",
                "llamacpp.n_expert",
                Value::Num(128.0),
            ),
            (
                "load_tensors: offloaded 33/33 layers to GPU",
                "llamacpp.layers_offloaded",
                Value::Num(33.0),
            ),
            (
                "llama_model_load_internal: offloaded 20/43 layers to GPU",
                "llamacpp.layers_total",
                Value::Num(43.0),
            ),
            (
                "load_tensors:        CUDA0 model buffer size =  4403.49 MiB",
                "llamacpp.model_gpu_bytes",
                Value::Num((4403.49 * MIB).round()),
            ),
            (
                "load_tensors:   CPU_Mapped model buffer size =   281.81 MiB",
                "llamacpp.model_host_bytes",
                Value::Num((281.81 * MIB).round()),
            ),
            (
                "llm_load_tensors:      CUDA0 buffer size = 10678.72 MiB",
                "llamacpp.model_gpu_bytes",
                Value::Num((10678.72 * MIB).round()),
            ),
            (
                "llm_load_tensors: VRAM used: 4095.05 MiB",
                "llamacpp.model_gpu_bytes",
                Value::Num((4095.05 * MIB).round()),
            ),
            (
                "llm_load_tensors: VRAM used: 3719.02 MB",
                "llamacpp.model_gpu_bytes",
                Value::Num((3719.02 * MIB).round()),
            ),
            (
                "llama_context: n_ctx         = 131072",
                "llamacpp.n_ctx",
                Value::Num(131072.0),
            ),
            (
                "llama_new_context_with_model: n_ctx      = 8192",
                "llamacpp.n_ctx",
                Value::Num(8192.0),
            ),
            (
                "llama_context: n_ctx_per_seq = 32768",
                "llamacpp.n_ctx_seq",
                Value::Num(32768.0),
            ),
            (
                "llama_context: n_ctx_seq     = 16384",
                "llamacpp.n_ctx_seq",
                Value::Num(16384.0),
            ),
            (
                "llama_context: n_ubatch      = 512",
                "llamacpp.n_ubatch",
                Value::Num(512.0),
            ),
            (
                "llama_context: n_batch       = 2048",
                "llamacpp.n_batch",
                Value::Num(2048.0),
            ),
            (
                "llama_context: n_seq_max     = 4",
                "llamacpp.n_seq_max",
                Value::Num(4.0),
            ),
            (
                "llama_context: flash_attn    = auto",
                "llamacpp.flash_attn",
                Value::str("auto"),
            ),
            (
                "llama_new_context_with_model: flash_attn = 0",
                "llamacpp.flash_attn",
                Value::str("off"),
            ),
            (
                "llama_context: n_ctx_per_seq (4096) < n_ctx_train (131072) -- the full capacity of the model will not be utilized",
                "llamacpp.n_ctx_train",
                Value::Num(131072.0),
            ),
            (
                "llama_kv_cache_init:      CUDA0 KV buffer size =  1024.00 MiB",
                "llamacpp.kv_gpu_bytes",
                Value::Num(1024.0 * MIB),
            ),
            (
                "llama_kv_cache:      CUDA0 KV buffer size = 16384.00 MiB",
                "llamacpp.kv_bytes",
                Value::Num(16384.0 * MIB),
            ),
            (
                "llama_kv_cache: size = 16384.00 MiB (131072 cells,  32 layers,  1/1 seqs), K (f16): 8192.00 MiB, V (f16): 8192.00 MiB",
                "llamacpp.kv_cells",
                Value::Num(131072.0),
            ),
            (
                "llama_kv_cache_unified: size = 2048.00 MiB ( 16384 cells,  32 layers,  4 seqs), K (q8_0):  1024.00 MiB, V (q8_0):  1024.00 MiB",
                "llamacpp.type_v",
                Value::str("q8_0"),
            ),
            (
                "llama_new_context_with_model: KV self size  =  512.00 MiB, K (f16):  256.00 MiB, V (f16):  256.00 MiB",
                "llamacpp.kv_bytes",
                Value::Num(512.0 * MIB),
            ),
            (
                "llama_new_context_with_model: kv self size  =  256.00 MB",
                "llamacpp.kv_bytes",
                Value::Num(256.0 * MIB),
            ),
            (
                "llama_kv_cache_init: VRAM kv self = 256.00 MB",
                "llamacpp.kv_gpu_bytes",
                Value::Num(256.0 * MIB),
            ),
            (
                "llama_context:      CUDA0 compute buffer size =   560.00 MiB",
                "llamacpp.compute_gpu_bytes",
                Value::Num(560.0 * MIB),
            ),
            (
                "llama_new_context_with_model:  CUDA_Host compute buffer size =    24.01 MiB",
                "llamacpp.compute_host_bytes",
                Value::Num((24.01 * MIB).round()),
            ),
            (
                "llama_memory_breakdown_print: |   - CUDA0 (RTX 4090)   | 24080 = 1104 + (21908 = 4403 + 16384 + 1121) +  1068 |",
                "llamacpp.unaccounted_bytes",
                Value::Num(1068.0 * MIB),
            ),
            (
                "llama_params_fit_impl: projected to use 26841 MiB of device memory vs. 23010 MiB of free device memory",
                "llamacpp.projected_bytes",
                Value::Num(26841.0 * MIB),
            ),
            (
                "llama_params_fit_impl:   - CUDA0 (RTX 4090): 24080 total, 26841 used, 4855 deficit",
                "llamacpp.device_total_bytes",
                Value::Num(24080.0 * MIB),
            ),
            (
                "llama_params_fit_impl: cannot fulfill margin of 1024 MiB, need to reduce device memory by 4855 MiB",
                "llamacpp.fit_deficit_bytes",
                Value::Num(4855.0 * MIB),
            ),
            (
                "llama_params_fit_impl: context size reduced from 131072 to 65536 -> need 4864 MiB less memory in total",
                "llamacpp.n_ctx",
                Value::Num(65536.0),
            ),
            (
                "load_tensors: loading model tensors, this can take a while... (mmap = true)",
                "llamacpp.mmap",
                Value::Bool(true),
            ),
            (
                "print_info: general.name     = Meta Llama 3.1 8B Instruct",
                "model.name",
                Value::str("Meta Llama 3.1 8B Instruct"),
            ),
        ];
        for (text, name, want) in rows {
            assert_eq!(fact(text, name).as_ref(), Some(want), "{name} in {text}");
        }
        // n_ctx_train must not be read as n_ctx.
        assert_eq!(
            fact("print_info: n_ctx_train      = 131072", "llamacpp.n_ctx"),
            None
        );
    }

    #[test]
    fn command_lines() {
        let f = facts(
            "$ ./build/bin/llama-server -m /models/qwen2.5-32b-q4_k_m.gguf -c 65536 -ngl 99 -np 4 -fa on --cache-type-k q8_0 -ctv q8_0 -ub 1024 --port 8080",
        );
        let get = |n: &str| f.iter().find(|(k, _)| *k == n).map(|(_, v)| v.clone());
        assert_eq!(get("llamacpp.n_ctx"), Some(Value::Num(65536.0)));
        assert_eq!(get("llamacpp.n_gpu_layers"), Some(Value::Num(99.0)));
        assert_eq!(get("llamacpp.n_parallel"), Some(Value::Num(4.0)));
        assert_eq!(get("llamacpp.flash_attn"), Some(Value::str("on")));
        assert_eq!(get("llamacpp.type_k"), Some(Value::str("q8_0")));
        assert_eq!(get("llamacpp.type_v"), Some(Value::str("q8_0")));
        assert_eq!(get("llamacpp.n_ubatch"), Some(Value::Num(1024.0)));
        let f = facts("./llama-cli -m x.gguf --ctx-size=8192 --n-gpu-layers=20 -fa");
        let get = |n: &str| f.iter().find(|(k, _)| *k == n).map(|(_, v)| v.clone());
        assert_eq!(get("llamacpp.n_ctx"), Some(Value::Num(8192.0)));
        assert_eq!(get("llamacpp.n_gpu_layers"), Some(Value::Num(20.0)));
        assert_eq!(get("llamacpp.flash_attn"), Some(Value::str("on")));
        // Not a llama.cpp command.
        assert!(facts("bash -c 'echo hi' -m").is_empty());
    }

    #[test]
    fn run_start_on_build_line() {
        let out = run("main: build = 4523 (e07ff8f7)");
        assert!(
            out.records
                .iter()
                .any(|r| matches!(r.obs, Observation::RunStart))
        );
        let out = run("build: 5930 (9c35706b) with cc (Ubuntu 13.3.0) 13.3.0 for x86_64-linux-gnu");
        assert!(
            out.records
                .iter()
                .any(|r| matches!(r.obs, Observation::RunStart))
        );
    }

    #[test]
    fn quants() {
        assert_eq!(quant_for_bpw(5.0), Some("Q4_K_M"));
        assert_eq!(quant_for_bpw(9.0), Some("Q8_0"));
        assert_eq!(quant_for_bpw(2.0), None);
    }
}
