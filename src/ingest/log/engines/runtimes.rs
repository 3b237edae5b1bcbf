//! Inference runtimes and GPU array libraries that allocate device memory with their own
//! allocators, outside PyTorch's: CTranslate2 (faster-whisper, WhisperX, OpenNMT), ONNX
//! Runtime, TensorRT, LMDeploy's TurboMind, MLC-LLM's TVM runtime, PaddlePaddle, CuPy, RAPIDS
//! (RMM), Numba and MXNet.
//!
//! Each prints its own out-of-memory wording, which no other recogniser reads:
//!
//! - CTranslate2: `RuntimeError: CUDA failed with error out of memory` (its caching
//!   allocator's `cudaMalloc` failed); configuration `compute_type="float16"` /
//!   `--compute_type int8`;
//! - ONNX Runtime: `onnxruntime::BFCArena::AllocateRawInternal(...) Failed to allocate memory
//!   for requested buffer of size N`, `Available memory of A is smaller than requested bytes
//!   of N` (the arena's `gpu_mem_limit` reached), `CUDA failure 2: out of memory ; GPU=0 ;
//!   ...` (before 1.16) and `CUDA error cudaErrorMemoryAllocation:out of memory` (after);
//!   configuration `gpu_mem_limit` and `arena_extend_strategy`;
//! - TensorRT: `[TRT] [E] 1: [defaultAllocator.cpp::allocate::20] Error Code 1: Cuda Runtime
//!   (out of memory)`, `Error Code 2: OutOfMemory (Requested size was N bytes.)` and the
//!   warning before them, `Requested amount of GPU memory (N bytes) could not be allocated`;
//! - LMDeploy (TurboMind): `RuntimeError: [TM][ERROR] CUDA runtime error: out of memory
//!   /lmdeploy/src/turbomind/utils/allocator.h:231`; configuration `cache_max_entry_count`
//!   (the share of memory its KV cache takes at start-up) and `session_len`;
//! - ExLlamaV2: `RuntimeError: Insufficient VRAM for model and cache`, raised by
//!   `load_autosplit` when the layers and the cache it allocates with them (sized by
//!   `max_seq_len`, the model's own context length unless set) overflow the last device;
//! - MLC-LLM (TVM's runtime): `Check failed: (__e == VK_SUCCESS) is false: Vulkan Error,
//!   code=-2: VK_ERROR_OUT_OF_DEVICE_MEMORY` (Vulkan) or `Check failed: (e == cudaSuccess ||
//!   e == cudaErrorCudartUnloading) is false: CUDA: out of memory`; right after its `Loading
//!   model...` it is the weights' load;
//! - PaddlePaddle: `Out of memory error on GPU 0. Cannot allocate 1.17GB memory on GPU 0,
//!   14.75GB memory has been allocated and available memory is only 27.75MB.` (its advice
//!   below, "check whether there is any other process ... decrease the batch size", is
//!   printed on every such error and is no evidence);
//! - CuPy: `OutOfMemoryError: Out of memory allocating 1,073,741,824 bytes (allocated so far:
//!   10,737,418,240 bytes).`, and `CUDARuntimeError: cudaErrorMemoryAllocation: out of memory`;
//! - RAPIDS: `MemoryError: std::bad_alloc: out_of_memory: CUDA error at: .../rmm/...`;
//! - Numba: `CudaAPIError: [2] Call to cuMemAlloc results in CUDA_ERROR_OUT_OF_MEMORY`;
//! - MXNet: `cudaMalloc retry failed: out of memory`, `Check failed: e == cudaSuccess ...
//!   CUDA: out of memory`;
//! - MLX (Apple silicon, unified memory): its Metal allocator's `[malloc_or_wait] Unable to
//!   allocate N bytes.` (2023-24), `[metal::malloc] Unable to allocate N bytes.` and `[malloc]
//!   Unable to allocate N bytes.` (later); one array larger than the largest buffer Metal
//!   allows, `[metal::malloc] Attempting to allocate N bytes which is greater than the maximum
//!   allowed buffer size of M bytes.` (bare, as a `std::runtime_error`, in 2024's
//!   releases); and a command buffer the GPU could not back, `[METAL]
//!   Command buffer execution failed: Insufficient Memory (...OutOfMemory)` (llama.cpp's
//!   Metal failure has the same code after its own `ggml_metal` words).
//!
//! Not failures: TensorRT's builder skipping a tactic "due to insufficient memory" (it tries
//! the next one), and its `Requested amount of GPU memory` warning alone when the build goes on
//! (the warning is read as the failure only together with an error within a few lines).

use std::sync::LazyLock;

use regex::Regex;

use super::local::{size_bin, span, walk_forward};
use super::{Domain, Emit, Failure, Line, PhaseMark, Recognizer, id, join_whole};
use crate::facts::units::parse_number;
use crate::ingest::log::pattern::static_regex;

/// CTranslate2's `THROW_RUNTIME_ERROR("CUDA failed with error " + cudaGetErrorString(...))`.
static CT2_OOM: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"CUDA failed with error out of memory"));
/// `compute_type="int8_float16"`, `compute_type='float16'`, `--compute_type int8`,
/// `compute_type: float32`.
static CT2_COMPUTE_TYPE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r#"compute[_-]type['"]?\s*(?:=|:|\s)\s*['"]?(?P<t>int8_float16|int8_bfloat16|int8_float32|int8|int16|float16|bfloat16|float32|default|auto)\b"#,
    )
});
/// The beam width: `beam_size=10` in code, `--beam_size 10` on faster-whisper's command
/// lines, and whisper-standalone's short `-bs=10` (read only on a line that runs it).
static CT2_BEAM: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?:\bbeam_size\s*=\s*|--beam[_-]size[=\s]\s*|(?:^|\s)-bs[=\s]\s*)(?P<n>\d{1,3})\b",
    )
});
static ORT_BUFFER: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"Failed to allocate memory for requested buffer of size (?P<req>\d+)")
});
static ORT_ARENA_LIMIT: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"Available memory of (?P<avail>\d+) is smaller than requested bytes of (?P<req>\d+)",
    )
});
/// ONNX Runtime's CUDA_CALL errors: `CUDA failure 2: out of memory ; GPU=0 ; hostname=...`
/// (before 1.16), `CUDA error cudaErrorMemoryAllocation:out of memory` (1.16 on).
static ORT_CUDA: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"CUDA failure 2: out of memory(?:\s*;\s*GPU=(?P<dev>\d+))?|CUDA error cudaErrorMemoryAllocation:\s*out of memory",
    )
});
static ORT_MEM_LIMIT: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r#"gpu_mem_limit['"]?\s*[:=]\s*(?P<v>\d+(?:\s*\*\s*\d+)*)"#));
static ORT_EXTEND: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r#"arena_extend_strategy['"]?\s*[:=]\s*['"]?(?P<v>kNextPowerOfTwo|kSameAsRequested|[01])\b"#,
    )
});
static TURBOMIND_OOM: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"\[TM\]\[ERROR\]\s*CUDA runtime error: out of memory"));
/// `TurbomindEngineConfig(cache_max_entry_count=0.2)`, `--cache-max-entry-count 0.5`.
static LMDEPLOY_KV_SHARE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"cache[_-]max[_-]entry[_-]count['\x22]?\s*(?:=|:|\s)\s*(?P<v>0?\.\d+|1(?:\.0+)?)\b",
    )
});
static TRT_ERROR: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"Error Code \d+: (?:Cuda Runtime \(out of memory\)|OutOfMemory)(?: \((?:Requested size was (?P<req>\d+) bytes\.?|[^)]*)\))?",
    )
});
static TRT_REQUESTED: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"Requested amount of GPU memory \((?P<req>\d+) bytes\) could not be allocated")
});
/// ExLlamaV2's settings as TabbyAPI's `config.yml` (`max_seq_len: 19200`, `cache_mode: Q4`),
/// a script (`config.max_seq_len = 8192`) or ExUI's model info (a dict's repr or JSON:
/// `'seq_len': 32768, ... 'cache_mode': 'FP16'`) gives them.
static EXL2_MAX_SEQ_LEN: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r#"\bmax_seq_len['"]?\s*[:=]\s*(?P<v>\d+)\b|['"]seq_len['"]\s*:\s*(?P<exui>\d+)\b"#,
    )
});
static EXL2_CACHE_MODE: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r#"\bcache_mode['"]?\s*[:=]\s*["']?(?P<v>FP16|FP8|Q4|Q6|Q8)\b"#));
/// Also inside a JSON reply that keeps the exception's newline escaped (ExUI's
/// `{"result": "fail", "error": "RuntimeError:\nInsufficient VRAM for model and cache"}`).
static EXL2_NO_ROOM: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"(?:^|Error:\s*(?:\\n)?\s*)Insufficient VRAM for model and cache")
});
/// Paddle 2.x (`..., 14.75GB memory has been allocated and available memory is only 27.75MB.`)
/// and 1.x (`..., available memory is only 171.5MB.`, no allocated figure).
static PADDLE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"Out of memory error on GPU (?P<dev>\d+)\. Cannot allocate (?P<req>\d+(?:\.\d+)?)\s*(?P<ru>[KMGT]?B) memory on GPU \d+,(?:\s*(?P<alloc>\d+(?:\.\d+)?)\s*(?P<au>[KMGT]?B) memory has been allocated and)? available memory is only (?P<free>\d+(?:\.\d+)?)\s*(?P<fu>[KMGT]?B)",
    )
});
static CUPY: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"Out of memory allocating (?P<req>[\d,]+) bytes \(allocated so far: (?P<alloc>[\d,]+) bytes\)",
    )
});
static CUDA_RT_ALLOC: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"cudaErrorMemoryAllocation:? ?out of memory"));
static RMM: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?:std::bad_alloc: )?(?:out_of_memory|rmm::out_of_memory)\b.*\brmm\b|\brmm\b.*cudaErrorMemoryAllocation",
    )
});
static NUMBA: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"Call to cuMem\w*Alloc\w* results in CUDA_ERROR_OUT_OF_MEMORY"));
/// TVM's runtime, under MLC-LLM (`mlc_chat_cli`, `mlc_llm chat`/`serve`, WebLLM's native
/// builds): a failed device allocation is a `Check failed` naming the backend's error.
static TVM_OOM: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"Check failed: \(?(?:__)?e == (?:VK_SUCCESS|cudaSuccess)[^:]*\)? is false: (?:Vulkan Error, code=-2: VK_ERROR_OUT_OF_DEVICE_MEMORY|CUDA: out of memory)",
    )
});
/// A CUDA allocation that a C++ framework reports in its own words: MXNet's storage
/// manager (`pooled_storage_manager.h:84: cudaMalloc failed: out of memory`), Caffe's
/// `syncedmem.cpp:56] Check failed: error == cudaSuccess (2 vs. 0)  out of memory`, dlib's
/// `Error while calling cudaMalloc(&data, ...) ... code: 2, reason: out of memory` and
/// darknet's `CUDA Error: out of memory`. llama.cpp's `cudaMalloc failed` lines name ggml or
/// the buffer they allocate and are its recogniser's.
static CUDA_ALLOC_OOM: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"cudaMalloc\w*(?:\([^)]*\))? failed: out of memory|Check failed: error == cudaSuccess \(2 vs\. 0\)\s+out of memory|calling cudaMalloc.*reason: out of memory|^CUDA Error: out of memory",
    )
});
/// MLX's allocator refused a buffer (see the module doc for its three wordings).
static MLX_OOM: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"\[(?:malloc_or_wait|metal::malloc|malloc)\] Unable to allocate (?P<req>\d+) bytes",
    )
});
/// MLX-LM's warning before generating with a model whose weights pass 0.9 x Metal's
/// recommended working set (`mx.metal.device_info()['max_recommended_working_set_size']`),
/// both in MiB (newer releases print one decimal).
static MLX_MODEL_NEAR_LIMIT: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"Generating with a model that requires (?P<req>\d+(?:\.\d+)?) MB which is close to the maximum recommended size of (?P<max>\d+(?:\.\d+)?) MB",
    )
});
/// One array larger than Metal's largest buffer, read whole across a hard wrap.
static MLX_BUFFER_CAP: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?:\[metal::malloc\] )?Attempting to\s+allocate\s+(?P<req>\d+)\s+bytes\s+which\s+is\s+greater\s+than\s+the\s+maximum\s+allowed\s+buffer\s+size\s+of\s+(?P<cap>\d+)\s+bytes",
    )
});
/// The MLX tool a command line runs: MLX-LM's `mlx_lm.lora` / `python -m mlx_lm lora` (and
/// mlx-examples' `lora.py --train`), `mlx_lm.server`, `mlx_lm.generate` / `mlx_lm.chat` /
/// `mlx_vlm.generate`.
static MLX_TOOL: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"\bmlx_(?:lm|vlm)(?:\.|\s+)(?P<tool>lora|fuse|server|generate|chat)\b|\blora\.py\b.*--train\b",
    )
});
static MXNET: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"cudaMalloc retry failed: out of memory|Check failed: e == cudaSuccess.*CUDA: out of memory|MXNetError:.*out of memory",
    )
});

/// The runtimes recogniser.
pub struct Runtimes;

impl Recognizer for Runtimes {
    /// One recogniser serves several runtimes: each failure names its own engine, and this id
    /// is only the recogniser's label.
    fn engine(&self) -> &'static str {
        id::CTRANSLATE2
    }

    fn anchors(&self) -> &'static [&'static str] {
        &[
            // CTranslate2 and its front-ends.
            "CUDA failed with error",
            "compute_type",
            "compute-type",
            "faster_whisper",
            "faster-whisper",
            "whisper-faster",
            "beam_size",
            "beam-size",
            "ctranslate2",
            // ONNX Runtime.
            "requested buffer of size",
            "is smaller than requested bytes",
            "CUDA failure 2",
            "cudaErrorMemoryAllocation",
            "gpu_mem_limit",
            "arena_extend_strategy",
            // LMDeploy.
            "[TM][ERROR]",
            // ExLlamaV2.
            "Insufficient VRAM for model and cache",
            "exllamav2",
            "max_seq_len",
            "'seq_len'",
            "\"seq_len\"",
            "cache_mode",
            "cache_max_entry_count",
            "cache-max-entry-count",
            // TensorRT.
            "Cuda Runtime (out of memory)",
            "Error Code 2: OutOfMemory",
            "Requested amount of GPU memory",
            // PaddlePaddle.
            "Out of memory error on GPU",
            // CuPy, RAPIDS, Numba, MXNet.
            "Out of memory allocating",
            "out_of_memory",
            "results in CUDA_ERROR_OUT_OF_MEMORY",
            "cudaMalloc retry failed",
            "CUDA: out of memory",
            // TVM (MLC-LLM): the error's end, and its start for a message a wrap cut.
            "VK_ERROR_OUT_OF_DEVICE_MEMORY",
            "e == VK_SUCCESS",
            "e == cudaSuccess",
            // C++ frameworks' own words for a failed cudaMalloc (MXNet, Caffe, dlib, darknet).
            "cudaMalloc failed: out of memory",
            "cudaSuccess (2 vs. 0)",
            "reason: out of memory",
            "CUDA Error: out of memory",
            // MLX.
            "mlx_lm",
            "mlx_vlm",
            "lora.py",
            "] Unable to allocate",
            "[metal::malloc]",
            "maximum allowed buffer size",
            "[METAL] Command buffer execution failed",
            "close to the maximum recommended size",
        ]
    }

    fn recognize(&self, line: &Line<'_>, out: &mut Emit) {
        let text = line.text;
        // A traceback frame in ExLlamaV2's package (or TabbyAPI's backend for it) names the
        // engine of a PyTorch failure below it.
        if text.contains("exllamav2")
            && super::serving::quoted_code_or_frame(
                text,
                &["/exllamav2/", "\\exllamav2\\"],
                id::EXLLAMAV2,
                out,
            )
        {
            return;
        }
        if let Some(c) = text
            .contains("seq_len")
            .then(|| EXL2_MAX_SEQ_LEN.captures(text))
            .flatten()
        {
            let m = c.name("v").or(c.name("exui")).expect("one group");
            if let Ok(v) = m.as_str().parse::<u64>() {
                out.fact("exllamav2.max_seq_len", v, span(&m));
            }
        }
        if let Some(c) = text
            .contains("cache_mode")
            .then(|| EXL2_CACHE_MODE.captures(text))
            .flatten()
        {
            let m = c.name("v").expect("group v");
            out.fact("exllamav2.cache_mode", m.as_str().to_string(), span(&m));
        }
        if CT2_OOM.is_match(text) {
            out.engine(id::CTRANSLATE2);
            out.failure(device_oom(id::CTRANSLATE2, "ct2-cuda"));
            return;
        }
        if let Some(c) = CT2_COMPUTE_TYPE.captures(text) {
            let m = c.name("t").expect("group t");
            out.fact("ct2.compute_type", m.as_str().to_string(), span(&m));
        }
        let runs_whisper = text.contains("whisper-faster") || text.contains("faster-whisper");
        if let Some(c) = CT2_BEAM.captures(text) {
            let m = c.name("n").expect("group n");
            let short_flag = !text[..m.start()].contains("beam");
            if !short_flag || runs_whisper {
                if let Ok(n) = m.as_str().parse::<u32>() {
                    out.fact("ct2.beam_size", n, span(&m));
                }
            }
        }
        if is_ct2_frame(text) {
            out.engine(id::CTRANSLATE2);
        }
        if let Some(c) = ORT_ARENA_LIMIT.captures(text) {
            let mut f = device_oom(id::ONNXRUNTIME, "ort-arena-limit");
            bytes_fact(&mut f, "oom.requested_bytes", &c, "req");
            bytes_fact(&mut f, "ort.arena_available_bytes", &c, "avail");
            out.engine(id::ONNXRUNTIME);
            out.failure(f);
            return;
        }
        if let Some(c) = ORT_BUFFER.captures(text) {
            let mut f = device_oom(id::ONNXRUNTIME, "ort-arena");
            bytes_fact(&mut f, "oom.requested_bytes", &c, "req");
            out.engine(id::ONNXRUNTIME);
            out.failure(f);
            return;
        }
        if let Some(c) = ORT_CUDA.captures(text) {
            let mut f = device_oom(id::ONNXRUNTIME, "ort-cuda");
            if let Some(d) = c.name("dev").and_then(|m| m.as_str().parse().ok()) {
                f.device = Some(d);
                f.fact("oom.device", d, None);
            }
            out.engine(id::ONNXRUNTIME);
            out.failure(f);
            return;
        }
        if let Some(c) = ORT_MEM_LIMIT.captures(text) {
            let m = c.name("v").expect("group v");
            let product = m
                .as_str()
                .split('*')
                .map(|p| p.trim().parse::<u64>().ok())
                .try_fold(1u64, |acc, p| p.and_then(|p| acc.checked_mul(p)));
            if let Some(b) = product.filter(|&b| b > 0) {
                out.fact("ort.gpu_mem_limit_bytes", b, span(&m));
            }
        }
        if let Some(c) = ORT_EXTEND.captures(text) {
            let m = c.name("v").expect("group v");
            let v = match m.as_str() {
                "0" => "kNextPowerOfTwo",
                "1" => "kSameAsRequested",
                v => v,
            };
            out.fact("ort.arena_extend_strategy", v.to_string(), span(&m));
        }
        if TURBOMIND_OOM.is_match(text) {
            out.engine(id::LMDEPLOY);
            out.failure(device_oom(id::LMDEPLOY, "turbomind"));
            return;
        }
        if EXL2_NO_ROOM.is_match(text) {
            out.engine(id::EXLLAMAV2);
            let mut f = device_oom(id::EXLLAMAV2, "exllamav2-autosplit");
            f.fact("oom.cache_with_weights", true, None);
            out.failure(f);
            return;
        }
        if let Some(c) = LMDEPLOY_KV_SHARE.captures(text) {
            let m = c.name("v").expect("group v");
            if let Ok(v) = m.as_str().parse::<f64>() {
                out.fact("lmdeploy.cache_max_entry_count", v, span(&m));
            }
        }
        if let Some(c) = TRT_ERROR.captures(text) {
            let mut f = device_oom(id::TENSORRT, "tensorrt");
            bytes_fact(&mut f, "oom.requested_bytes", &c, "req");
            out.failure(f);
            // The error names the code that failed: deserialising an engine is loading its
            // weights (`[safeDeserialize.cpp::load::269]`, `deserializeCudaEngine`).
            if text.contains("eserialize") {
                out.phase(PhaseMark::ModelLoad);
            }
            return;
        }
        if let Some(c) = TRT_REQUESTED.captures(text) {
            // A warning: the builder may go on with a tactic that needs less. It is the
            // failure's size only when an error follows it.
            let mut error_follows = false;
            walk_forward(line, 4, |t| {
                error_follows = TRT_ERROR.is_match(t) || t.contains("[E]");
                !error_follows
            });
            if error_follows {
                let mut f = device_oom(id::TENSORRT, "tensorrt");
                bytes_fact(&mut f, "oom.requested_bytes", &c, "req");
                out.failure(f);
            }
            return;
        }
        if let Some((whole, used)) = whole_message(line, "Out of memory error on GPU", &PADDLE) {
            let c = PADDLE.captures(&whole).expect("whole_message matched");
            let mut f = device_oom(id::PADDLE, "paddle");
            if let Some(d) = c.name("dev").and_then(|m| m.as_str().parse().ok()) {
                f.device = Some(d);
                f.fact("oom.device", d, None);
            }
            for (fact, n, u) in [
                ("oom.requested_bytes", "req", "ru"),
                ("oom.allocated_bytes", "alloc", "au"),
                ("oom.free_bytes", "free", "fu"),
            ] {
                if let (Some(num), Some(unit)) = (c.name(n), c.name(u)) {
                    if let Some(b) = size_bin(num.as_str(), unit.as_str()) {
                        f.fact(fact, b, span(&num));
                    }
                }
            }
            drop(c);
            joined_text(&mut f, whole, used, out);
            out.engine(id::PADDLE);
            out.failure(f);
            return;
        }
        if let Some((whole, used)) = whole_message(line, "Out of memory allocating", &CUPY) {
            let c = CUPY.captures(&whole).expect("whole_message matched");
            let mut f = device_oom(id::CUPY, "cupy-pool");
            for (fact, n) in [
                ("oom.requested_bytes", "req"),
                ("oom.allocated_bytes", "alloc"),
            ] {
                if let Some(m) = c.name(n) {
                    if let Some(b) = parse_number(&m.as_str().replace(',', "")) {
                        f.fact(fact, b, span(&m));
                    }
                }
            }
            drop(c);
            joined_text(&mut f, whole, used, out);
            out.engine(id::CUPY);
            out.failure(f);
            return;
        }
        if RMM.is_match(text) {
            out.engine(id::RAPIDS);
            out.failure(device_oom(id::RAPIDS, "rmm"));
            return;
        }
        if CUDA_RT_ALLOC.is_match(text) {
            // `cudaErrorMemoryAllocation` is the CUDA runtime's own name: whose call it was
            // shows only in the line's other words.
            let engine = if text.contains("cupy") {
                id::CUPY
            } else if text.contains("onnxruntime") {
                id::ONNXRUNTIME
            } else {
                return;
            };
            out.engine(engine);
            out.failure(device_oom(engine, "cuda-runtime"));
            return;
        }
        if NUMBA.is_match(text) {
            out.engine(id::NUMBA);
            out.failure(device_oom(id::NUMBA, "cuda-driver"));
            return;
        }
        if let Some((backend, whole, used)) = tvm_failure(line) {
            out.engine(id::MLC_LLM);
            // MLC-LLM's chat prints `Loading model...` and allocates the weights' buffers
            // next: a failure right after it is the load.
            if line
                .preceding(3)
                .iter()
                .any(|l| l.text.trim_start().starts_with("Loading model"))
            {
                out.phase(PhaseMark::ModelLoad);
            }
            let mut f = device_oom(id::MLC_LLM, "tvm");
            f.fact("oom.backend", backend, None);
            joined_text(&mut f, whole, used, out);
            out.failure(f);
            return;
        }
        if let Some(c) = (text.contains("mlx_") || text.contains("lora.py"))
            .then(|| MLX_TOOL.captures(text))
            .flatten()
        {
            // What the run was doing decides which knobs there are: a LoRA run's batch and
            // sequence length, a server's prompt cache, a generation's KV cache.
            let tool = match c.name("tool").map_or("lora", |m| m.as_str()) {
                "lora" | "fuse" => "lora",
                "server" => "server",
                _ => "generate",
            };
            out.fact("mlx.tool", tool, c.get(0).map(|m| (m.start(), m.end())));
        }
        if let Some(c) = MLX_MODEL_NEAR_LIMIT.captures(text) {
            out.engine(id::MLX);
            for (group, name) in [
                ("req", "model.weights_bytes"),
                ("max", "mlx.max_recommended_bytes"),
            ] {
                let m = c.name(group).expect("both groups");
                if let Ok(mib) = m.as_str().parse::<f64>() {
                    out.fact(name, (mib * 1048576.0).round() as u64, span(&m));
                }
            }
            return;
        }
        if let Some(f) = mlx_failure(line, out) {
            out.engine(id::MLX);
            out.failure(f);
            return;
        }
        if MXNET.is_match(text) {
            out.engine(id::MXNET);
            out.failure(device_oom(id::MXNET, "mxnet"));
            return;
        }
        if CUDA_ALLOC_OOM.is_match(text) && !text.contains("ggml") && !text.contains("llama") {
            let mxnet = ["pooled_storage_manager", "dmlc", "mxnet"]
                .iter()
                .any(|w| text.contains(w));
            let engine = if mxnet { id::MXNET } else { id::UNKNOWN };
            if mxnet {
                out.engine(engine);
            }
            // Not `cuda-runtime`: that wording is PyTorch's runtime failing beside its caching
            // allocator; these frameworks allocate through cudaMalloc as a matter of course.
            out.failure(device_oom(engine, "framework-cuda"));
        }
    }
}

/// Lines above a TVM failure searched for MLC-LLM's own output (its command, `Use model
/// weights:`, `Loading model...`).
const TVM_CONTEXT_LINES: usize = 40;

/// The backend of TVM's failed allocation (`vulkan`, `cuda`), when the line starts one (read
/// whole, with the pieces a hard wrap cut off it: the text and how many lines it took) and
/// it comes from TVM: its source path is in it, or MLC-LLM's output is above it.
fn tvm_failure(line: &Line<'_>) -> Option<(&'static str, String, u32)> {
    let (text, used) = whole_message(line, "Check failed", &TVM_OOM)?;
    let from_tvm = text.contains("tvm")
        || line.preceding(TVM_CONTEXT_LINES).iter().any(|l| {
            l.text.contains("mlc_chat") || l.text.contains("mlc_llm") || l.text.contains("mlc-chat")
        });
    let backend = if text.contains("VK_") {
        "vulkan"
    } else {
        "cuda"
    };
    from_tvm.then_some((backend, text, used))
}

/// A message with numbers, whole: the line itself, or the line joined with the pieces a hard
/// wrap (a terminal, a paste at 100 columns) cut off it. `head` is the words that start it.
fn whole_message(line: &Line<'_>, head: &str, re: &Regex) -> Option<(String, u32)> {
    if !line.text.contains(head) {
        return None;
    }
    if re.is_match(line.text) {
        return Some((line.text.to_string(), 0));
    }
    join_whole(line, |t| re.is_match(t), |_| false)
}

/// A failure read from a joined message keeps that text (its facts' spans point into it) and
/// consumes the pieces.
fn joined_text(f: &mut Failure, whole: String, used: u32, out: &mut Emit) {
    if used > 0 {
        f.text = Some(whole);
        out.consume(used);
    }
}

fn device_oom(engine: &'static str, wording: &'static str) -> Failure {
    let mut f = Failure::new("device-oom", engine, Domain::Device);
    f.fact("oom.backend", "cuda", None)
        .fact("oom.wording", wording, None);
    f
}

/// MLX's failed allocation on the line (joined with the pieces a hard wrap cut off it):
/// Metal, and its request; for an array over Metal's largest buffer, that cap too.
fn mlx_failure(line: &Line<'_>, out: &mut Emit) -> Option<Failure> {
    let text = line.text;
    let metal_oom = || {
        let mut f = Failure::new("device-oom", id::MLX, Domain::Device);
        f.fact("oom.backend", "metal", None)
            .fact("oom.wording", "mlx", None);
        f
    };
    if let Some(c) = MLX_OOM.captures(text) {
        let mut f = metal_oom();
        bytes_fact(&mut f, "oom.requested_bytes", &c, "req");
        return Some(f);
    }
    // Before MLX named the allocator (`[metal::malloc] `), the same words came bare, as a
    // `std::runtime_error` that ended the process (`libc++abi: terminating due to uncaught
    // exception of type std::runtime_error: Attempting to allocate ...`).
    if let Some((whole, used)) = whole_message(line, "[metal::malloc]", &MLX_BUFFER_CAP)
        .or_else(|| whole_message(line, "Attempting to allocate", &MLX_BUFFER_CAP))
    {
        let mut f = metal_oom();
        let c = MLX_BUFFER_CAP
            .captures(&whole)
            .expect("whole_message matched");
        bytes_fact(&mut f, "oom.requested_bytes", &c, "req");
        bytes_fact(&mut f, "mlx.max_buffer_bytes", &c, "cap");
        drop(c);
        joined_text(&mut f, whole, used, out);
        return Some(f);
    }
    (text.contains("[METAL] Command buffer execution failed") && text.contains("OutOfMemory"))
        .then(metal_oom)
}

/// A plain byte count from a capture group.
fn bytes_fact(f: &mut Failure, fact: &'static str, c: &regex::Captures<'_>, group: &str) {
    if let Some(m) = c.name(group) {
        if let Ok(b) = m.as_str().parse::<u64>() {
            f.fact(fact, b, span(&m));
        }
    }
}

/// A traceback frame inside CTranslate2 or faster-whisper (`File ".../faster_whisper/
/// transcribe.py", line 145, in __init__`): the code that ran was theirs, whatever the
/// wording of the error below it.
fn is_ct2_frame(text: &str) -> bool {
    let t = text.trim_start();
    (t.starts_with("File \"") || t.starts_with('│') || t.starts_with('|'))
        && (t.contains("faster_whisper") || t.contains("ctranslate2"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::evidence::{InputName, Value};
    use crate::ingest::log::clean::LineMeta;
    use crate::ingest::log::engines::Observation;

    fn run(text: &str) -> Emit {
        crate::ingest::log::engines::run_standalone(&Runtimes, text)
    }

    fn failure(out: &Emit) -> &Failure {
        out.records
            .iter()
            .find_map(|r| match &r.obs {
                Observation::Failure(f) => Some(f),
                _ => None,
            })
            .expect("a failure")
    }

    fn num(f: &Failure, name: &str) -> Option<f64> {
        f.get(name).and_then(Value::as_f64)
    }

    #[test]
    fn mlx_allocator_failures_are_metal_with_their_sizes() {
        for (text, req, cap) in [
            (
                "libc++abi: terminating due to uncaught exception of type std::runtime_error: [malloc_or_wait] Unable to allocate 12 bytes.",
                Some(12.0),
                None,
            ),
            (
                "RuntimeError: [metal::malloc] Unable to allocate 4294967296 bytes.",
                Some(4294967296.0),
                None,
            ),
            (
                "[malloc] Unable to allocate 805306368 bytes.",
                Some(805306368.0),
                None,
            ),
            (
                "ValueError: [metal::malloc] Attempting to allocate 134767706112 bytes which is greater than the maximum allowed buffer size of 86586540032 bytes.",
                Some(134767706112.0),
                Some(86586540032.0),
            ),
            // Before the allocator's name was printed with it.
            (
                "libc++abi: terminating due to uncaught exception of type std::runtime_error: Attempting to allocate 18270388224 bytes which is greater than the maximum allowed buffer size of 17179869184 bytes.",
                Some(18270388224.0),
                Some(17179869184.0),
            ),
            (
                "libc++abi: terminating due to uncaught exception of type std::runtime_error: [METAL] Command buffer execution failed: Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)",
                None,
                None,
            ),
        ] {
            let out = run(text);
            let f = failure(&out);
            assert_eq!((f.engine, f.kind), (id::MLX, "device-oom"), "{text}");
            assert_eq!(f.get("oom.backend"), Some(&Value::from("metal")), "{text}");
            assert_eq!(num(f, "oom.requested_bytes"), req, "{text}");
            assert_eq!(num(f, "mlx.max_buffer_bytes"), cap, "{text}");
        }
        // Other programs' "Unable to allocate" (no allocator tag) are not MLX's.
        let out = run("ERROR: Unable to allocate 4096 bytes for capture frame.");
        assert!(
            !out.records
                .iter()
                .any(|r| matches!(r.obs, Observation::Failure(_)))
        );
    }

    #[test]
    fn ctranslate2_oom_is_its_engine() {
        let out = run("RuntimeError: CUDA failed with error out of memory");
        let f = failure(&out);
        assert_eq!((f.engine, f.kind), (id::CTRANSLATE2, "device-oom"));
    }

    /// C++ frameworks report a failed cudaMalloc in their own words; MXNet's storage
    /// manager names itself, the others name no engine. llama.cpp's lines are not these.
    #[test]
    fn cpp_frameworks_failed_cuda_allocations() {
        for (text, engine) in [
            (
                "[12:44:34] src/storage/./pooled_storage_manager.h:84: cudaMalloc failed: out of memory",
                id::MXNET,
            ),
            (
                "F0126 16:08:02.152665 10326 syncedmem.cpp:56] Check failed: error == cudaSuccess (2 vs. 0)  out of memory",
                id::UNKNOWN,
            ),
            (
                "Error while calling cudaMalloc(&data, new_size*sizeof(float)) in file /opt/dlib/dlib/cuda/gpu_data.cpp:191. code: 2, reason: out of memory",
                id::UNKNOWN,
            ),
            ("CUDA Error: out of memory", id::UNKNOWN),
        ] {
            let out = run(text);
            let f = failure(&out);
            assert_eq!((f.engine, f.kind), (engine, "device-oom"), "{text}");
        }
        let llama = run(
            "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 4096.00 MiB on device 0: cudaMalloc failed: out of memory",
        );
        assert!(
            !llama
                .records
                .iter()
                .any(|r| matches!(r.obs, Observation::Failure(_)))
        );
    }

    #[test]
    fn ctranslate2_compute_type_spellings() {
        for (text, want) in [
            (
                r#"model = WhisperModel("large-v3", device="cuda", compute_type="float16")"#,
                "float16",
            ),
            (
                "whisper-faster.exe a.mp4 --model=large-v2 --compute_type int8",
                "int8",
            ),
            ("compute_type: int8_float16", "int8_float16"),
        ] {
            let out = run(text);
            let got = out.records.iter().find_map(|r| match &r.obs {
                Observation::Fact {
                    name: "ct2.compute_type",
                    value,
                } => value.as_str().map(str::to_string),
                _ => None,
            });
            assert_eq!(got.as_deref(), Some(want), "{text}");
        }
    }

    #[test]
    fn ctranslate2_beam_size() {
        let beam = |text: &str| {
            run(text).records.iter().find_map(|r| match &r.obs {
                Observation::Fact {
                    name: "ct2.beam_size",
                    value,
                } => value.as_f64(),
                _ => None,
            })
        };
        assert_eq!(
            beam("segments, info = model.transcribe(audio, beam_size=10)"),
            Some(10.0)
        );
        assert_eq!(
            beam(r#"C:\tools>whisper-faster.exe "E:\video\a.mkv" -bs=10"#),
            Some(10.0)
        );
        assert_eq!(beam("faster-whisper input.wav --beam_size 8"), Some(8.0));
        // `-bs` is a batch size to other tools.
        assert_eq!(beam("python train.py -bs 32"), None);
    }

    #[test]
    fn lmdeploy_turbomind_oom_and_kv_share() {
        let out = run(
            "RuntimeError: [TM][ERROR] CUDA runtime error: out of memory /lmdeploy/src/turbomind/utils/allocator.h:231",
        );
        assert_eq!(failure(&out).engine, id::LMDEPLOY);
        let out = run("RuntimeError: Insufficient VRAM for model and cache");
        assert_eq!(failure(&out).engine, id::EXLLAMAV2);
        assert_eq!(failure(&out).kind, "device-oom");
        for text in [
            "backend_config = TurbomindEngineConfig(cache_max_entry_count=0.2)",
            "lmdeploy serve api_server internlm/internlm2-chat-7b --cache-max-entry-count 0.2",
        ] {
            let got = run(text).records.iter().find_map(|r| match &r.obs {
                Observation::Fact {
                    name: "lmdeploy.cache_max_entry_count",
                    value,
                } => value.as_f64(),
                _ => None,
            });
            assert_eq!(got, Some(0.2), "{text}");
        }
    }

    /// ExLlamaV2's settings and its autosplit failure as TabbyAPI's config and ExUI's JSON
    /// replies show them.
    #[test]
    fn exllamav2_settings_and_exuis_reply() {
        let fact = |text: &str, name: &str| {
            run(text).records.iter().find_map(|r| match &r.obs {
                Observation::Fact { name: n, value } if *n == name => Some(value.clone()),
                _ => None,
            })
        };
        let exui = "-> {'result': 'ok', 'model_info': {'stats': {'num_key_value_heads': 32, 'default_seq_len': 32768}, 'seq_len': 16384, 'rope_scale': 8.0, 'cache_mode': 'FP8', 'gpu_split_auto': True}}";
        assert_eq!(
            fact(exui, "exllamav2.max_seq_len"),
            Some(Value::Num(16384.0))
        );
        assert_eq!(fact(exui, "exllamav2.cache_mode"), Some(Value::str("FP8")));
        assert_eq!(
            fact("max_seq_len: 19200", "exllamav2.max_seq_len"),
            Some(Value::Num(19200.0))
        );
        // A training config's sequence length is not ExUI's reply.
        assert_eq!(fact("seq_len: 2048", "exllamav2.max_seq_len"), None);
        let out = run(
            r#"{"result": "fail", "error": "RuntimeError:\nInsufficient VRAM for model and cache"}"#,
        );
        assert_eq!(failure(&out).engine, id::EXLLAMAV2);
    }

    #[test]
    fn onnxruntime_arena_request() {
        let out = run(
            "Status Message: /onnxruntime_src/onnxruntime/core/framework/bfc_arena.cc:376 void* onnxruntime::BFCArena::AllocateRawInternal(size_t, bool, onnxruntime::Stream*, bool, onnxruntime::WaitNotificationFn) Failed to allocate memory for requested buffer of size 2147483648",
        );
        let f = failure(&out);
        assert_eq!(f.engine, id::ONNXRUNTIME);
        assert_eq!(num(f, "oom.requested_bytes"), Some(2147483648.0));
    }

    #[test]
    fn onnxruntime_cuda_call_names_the_device() {
        let out = run(
            "onnxruntime::CudaCall CUDA failure 2: out of memory ; GPU=1 ; hostname=node7 ; file=/onnxruntime_src/onnxruntime/core/providers/cuda/cuda_allocator.cc ; line=47 ; expr=cudaMalloc((void**)&p, size);",
        );
        let f = failure(&out);
        assert_eq!((f.engine, f.device), (id::ONNXRUNTIME, Some(1)));
    }

    #[test]
    fn onnxruntime_mem_limit_product() {
        let out = run(
            "providers=[('CUDAExecutionProvider', {'device_id': 0, 'gpu_mem_limit': 2 * 1024 * 1024 * 1024, 'arena_extend_strategy': 'kSameAsRequested'})]",
        );
        let facts: Vec<_> = out
            .records
            .iter()
            .filter_map(|r| match &r.obs {
                Observation::Fact { name, value } => Some((*name, value.clone())),
                _ => None,
            })
            .collect();
        assert!(
            facts.contains(&("ort.gpu_mem_limit_bytes", Value::from(2147483648u64))),
            "{facts:?}"
        );
        assert!(
            facts.contains(&(
                "ort.arena_extend_strategy",
                Value::from("kSameAsRequested".to_string())
            )),
            "{facts:?}"
        );
    }

    #[test]
    fn paddle_numbers_both_generations() {
        let out = run(
            "Out of memory error on GPU 0. Cannot allocate 1.171875GB memory on GPU 0, 14.756470GB memory has been allocated and available memory is only 27.750000MB.",
        );
        let f = failure(&out);
        assert_eq!((f.engine, f.device), (id::PADDLE, Some(0)));
        assert_eq!(num(f, "oom.requested_bytes"), Some(1.171875 * 1073741824.0));
        assert_eq!(num(f, "oom.free_bytes"), Some(27.75 * 1048576.0));
        assert!(num(f, "oom.allocated_bytes").unwrap() > 14.0 * 1073741824.0);
        let out = run(
            "Out of memory error on GPU 2. Cannot allocate 256.000244MB memory on GPU 2, available memory is only 171.500000MB.",
        );
        let f = failure(&out);
        assert_eq!(f.device, Some(2));
        assert!(f.get("oom.allocated_bytes").is_none());
    }

    /// Hard-wrapped at 100 columns: the numbers are on the next piece.
    #[test]
    fn paddle_message_cut_by_a_wrap() {
        let text = "Out of memory error on GPU 0. Cannot allocate 2.343750GB memory on GPU 0, 21.402954GB memory has b";
        let input = InputName::from("t.log");
        let meta = LineMeta::default();
        let mut line = Line::standalone(&input, 1, text, &meta);
        line.after = b"een allocated and available memory is only 1.082031GB.\n";
        let mut out = Emit::default();
        out.begin_line(&line);
        Runtimes.recognize(&line, &mut out);
        let f = failure(&out);
        let free = num(f, "oom.free_bytes").expect("free bytes");
        assert!((free - 1.082031 * 1073741824.0).abs() < 1.0, "{free}");
        assert_eq!(out.consumed, 1);
    }

    #[test]
    fn cupy_pool_numbers() {
        let out = run(
            "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 1,073,741,824 bytes (allocated so far: 10,737,418,240 bytes).",
        );
        let f = failure(&out);
        assert_eq!(f.engine, id::CUPY);
        assert_eq!(num(f, "oom.requested_bytes"), Some(1073741824.0));
        assert_eq!(num(f, "oom.allocated_bytes"), Some(10737418240.0));
    }

    #[test]
    fn tensorrt_error_and_numba_and_rmm() {
        let f = run(
            "[11/02/2024-10:11:12] [TRT] [E] 2: [executionContext.cpp::ExecutionContext::564] Error Code 2: OutOfMemory (Requested size was 4294967296 bytes.)",
        );
        assert_eq!(num(failure(&f), "oom.requested_bytes"), Some(4294967296.0));
        let f = run(
            "numba.cuda.cudadrv.driver.CudaAPIError: [2] Call to cuMemAlloc results in CUDA_ERROR_OUT_OF_MEMORY",
        );
        assert_eq!(failure(&f).engine, id::NUMBA);
        let f = run(
            "MemoryError: std::bad_alloc: out_of_memory: CUDA error at: /opt/conda/include/rmm/mr/device/cuda_memory_resource.hpp:70: cudaErrorMemoryAllocation out of memory",
        );
        assert_eq!(failure(&f).engine, id::RAPIDS);
    }

    #[test]
    fn tensorrt_warning_alone_and_tactic_skips_are_no_failure() {
        let out = run(
            "[TRT] [W] Requested amount of GPU memory (8589934592 bytes) could not be allocated. There may not be enough free memory for allocation to succeed.",
        );
        assert!(
            !out.records
                .iter()
                .any(|r| matches!(r.obs, Observation::Failure(_)))
        );
        let out = run(
            "[TRT] [W] Skipping tactic 3 due to insufficient memory on requested size of 8589934592 detected for tactic 0x0000000000000004.",
        );
        assert!(out.records.is_empty());
    }
}
