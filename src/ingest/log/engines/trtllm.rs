//! TensorRT-LLM: the C++ runtime's `[TensorRT-LLM][INFO]` accounting (engine size, memory
//! for the paged KV cache, blocks and tokens per block), the limits it logs and the ones it
//! **silently lowers** (`maxSequenceLen ... reduced to N`), the PyTorch backend's profiling
//! line and executor-creation error, and `cudaMalloc` failures (`ENGINE-MESSAGES.md` §7).
//!
//! The KV pool is sized as a fraction of the memory free *after* the weights and runtime
//! buffers (`free_gpu_memory_fraction`, default 0.9). When that pool cannot hold one
//! sequence of the configured length, TRT-LLM does not fail: it shrinks `max_seq_len` and
//! `max_input_len` with a WARNING, and requests fail later with `Prompt length exceeds
//! maximum input length`. That warning is reported as a `kv-capacity` incident because it
//! is the moment the configuration stopped fitting. A fraction so high that cuBLAS or the
//! runtime's own buffers cannot allocate afterwards shows as a `cudaMalloc` OOM.
use std::sync::LazyLock;

use regex::Regex;

use super::serving::{
    Key, Kind, gib, key, parse_count, re, read_flags, read_key_values, size, start_already_seen,
};
use super::{Domain, Emit, Failure, Line, PhaseMark, Recognizer, id};
use crate::facts::units::SiBase;

const KEYS: &[Key] = &[
    key(
        &["max_seq_len", "max_sequence_len"],
        "trtllm.max_seq_len",
        Kind::Num,
    ),
    key(&["max_input_len"], "trtllm.max_input_len", Kind::Num),
    key(&["max_batch_size"], "trtllm.max_batch_size", Kind::Num),
    key(&["max_num_tokens"], "trtllm.max_num_tokens", Kind::Num),
    key(&["max_beam_width"], "trtllm.max_beam_width", Kind::Num),
    key(
        &[
            "free_gpu_memory_fraction",
            "kv_cache_free_gpu_memory_fraction",
            "kv_cache_free_gpu_mem_fraction",
            "free_gpu_mem_fraction",
        ],
        "trtllm.free_gpu_memory_fraction",
        Kind::Ratio,
    ),
    key(
        &["max_tokens", "max_tokens_in_paged_kv_cache"],
        "trtllm.max_tokens",
        Kind::Num,
    ),
    key(
        &["tp_size", "tensor_parallel_size", "tp"],
        "trtllm.tp_size",
        Kind::Num,
    ),
    key(&["kv_cache_dtype"], "trtllm.kv_cache_dtype", Kind::Text),
];

static VERSION: LazyLock<Regex> =
    LazyLock::new(|| re(r"TensorRT-LLM version: (?P<v>\d+\.\d+[\w.+-]*)"));
static COMMAND: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?:^|[\s/'\x22$])(?:trtllm-serve|trtllm-bench)\s"));
/// `TRTGptModel maxSequenceLen: 131072`.
static MODEL_LIMIT: LazyLock<Regex> = LazyLock::new(|| re(r"TRTGptModel (?P<k>\w+): (?P<v>\d+)"));
/// TensorRT's (8.0+) memory report as a library initialises: `[MemUsageChange] Init
/// cuBLAS/cuBLASLt: CPU +0, GPU +8, now: CPU 4064, GPU 77667 (MiB)`. Unlike the
/// `TensorRT-managed allocation ... now: CPU 0, GPU 3934` lines (TensorRT's own tally), the
/// `now` of an `Init` line is the device's use as the driver reports it: this process's
/// context and engine plus every other process on the GPU.
static INIT_USAGE: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"\[MemUsageChange\] Init (?P<what>[\w/ ]+?): CPU [+-]?\d+, GPU (?P<d>[+-]?\d+), now: CPU \d+, GPU (?P<now>\d+) \(MiB\)",
    )
});
/// Two `Init` reports this close belong to one initialisation (cuBLAS then cuDNN, each
/// engine's pair); the first is read.
const INIT_BURST_LINES: usize = 8;
/// Device use above the engine at TensorRT's first `Init` report that is still taken as this
/// process's own (see [`read_init_usage`]).
const CONTEXT_ALLOWANCE_MIB: f64 = 1024.0;
/// The same rank on the same GPU announced again: another instance of the runtime starting
/// (a second model instance, two processes both told they are rank 0, a restart).
static RANK_GPU: LazyLock<Regex> = LazyLock::new(|| re(r"Rank (?P<r>\d+) is using GPU (?P<g>\d+)"));
/// How far back a start announcing the same rank and GPU is looked for.
const RANK_REPEAT_LINES: usize = 400;
/// R-1.
static ENGINE_SIZE: LazyLock<Regex> = LazyLock::new(|| re(r"Loaded engine size: (?P<m>\d+) MiB"));
/// TensorRT's builder summary (every engine build prints it): the activation memory the
/// engine will ask for at run time, sized by the build's limits (max batch size, input and
/// sequence lengths), in bytes.
static ACTIVATION_MEMORY: LazyLock<Regex> =
    LazyLock::new(|| re(r"Total Activation Memory: (?P<b>\d+)\b"));
/// The same summary's weights, in bytes (`Total Weights Memory: 12488319488`): what the
/// runtime's `Loaded engine size` will say.
static WEIGHTS_MEMORY: LazyLock<Regex> =
    LazyLock::new(|| re(r"Total Weights Memory: (?P<b>\d+)\b"));
/// cuda-python's error enum as TensorRT-LLM's Python runtime (0.5-0.7, `CUASSERT`) raises it:
/// `RuntimeError: CUDA ERROR: cudaError_t.cudaErrorMemoryAllocation`.
const CUDA_PYTHON_OOM: &str = "cudaError_t.cudaErrorMemoryAllocation";
/// R-3.
static KV_SIZING: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Memory usage when calculating max tokens in paged kv cache: total: (?P<t>{U}) GiB, available: (?P<a>{U}) GiB",
    )
});
/// R-4 and its newer one-line form.
static PRIMARY_BLOCKS: LazyLock<Regex> =
    LazyLock::new(|| re(r"Number of blocks in KV cache primary pool: (?P<n>\d+)"));
static TOKENS_PER_BLOCK: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?i)(?:Number of )?tokens per block(?::|=)\s*(?P<t>\d+)"));
static BLOCKS_LINE: LazyLock<Regex> = LazyLock::new(|| re(r"primary blocks=(?P<n>\d+)"));
/// R-5.
static KV_ALLOCATED: LazyLock<Regex> = LazyLock::new(|| {
    re(r"Allocated (?P<g>{U}) GiB for max tokens(?: in paged KV cache)? \((?P<t>\d+)\)")
});
/// R-5's two lines in the C++ runtime of 0.6-0.8: `Allocate 11995709440 bytes for k/v
/// cache.` and `Using 183040 tokens in paged KV cache.` (`Using 219776 total tokens in paged
/// KV cache, and 8 blocks per sequence`).
static KV_OLD_FORM: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Allocate (?P<b>\d+) bytes for k/v cache|Using (?P<t>\d+) (?:total )?tokens in paged KV cache",
    )
});
/// The Triton backend (0.6-0.8) naming the pool's default share when the model config does
/// not: `kv_cache_free_gpu_mem_fraction is not specified, will use default value of 0.85 or
/// max_tokens_in_paged_kv_cache`.
static DEFAULT_FRACTION: LazyLock<Regex> = LazyLock::new(|| {
    re(r"kv_cache_free_gpu_mem_fraction is not specified, will use default value of (?P<f>{U})")
});
/// R-6 (C++ and PyTorch backend), the newer per-window form, and the fail-fast error.
static REDUCED: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"maxAttentionWindow and maxSequenceLen are too large for at least one sequence to fit in kvCache\. [Tt]hey are reduced to (?P<n>\d+)",
    )
});
static REDUCED_VEC: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?:maxAttentionWindowVec too large to fit at least one sequence in kvCache|Attention window too large to fit even a single sequence in the KV cache).*?Old: \[(?P<old>[\d, ]+)\], New: \[(?P<new>[\d, ]+)\]",
    )
});
static REDUCED_SEQ: LazyLock<Regex> =
    LazyLock::new(|| re(r"maxSequenceLen is reduced to maxAttentionWindow: (?P<n>\d+)"));
static REDUCED_INPUT: LazyLock<Regex> =
    LazyLock::new(|| re(r"maxInputLen is reduced to (?P<n>\d+)"));
/// The pre-2024 hard error for the same situation; the Triton backend's form names the
/// tokens the cache holds: `maxTokensInPagedKvCache (29184) must be large enough ...`.
static MAX_TOKENS_TOO_SMALL: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"maxTokensInPagedKvCache(?: \((?P<n>\d+)\))? must be large enough to process at least 1 sequence",
    )
});
/// R-7.
static BOTH_SET: LazyLock<Regex> =
    LazyLock::new(|| re(r"are set \(to (?P<f>{U}) and (?P<n>\d+), respectively\)"));
/// R-9.
static PROFILE: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Peak memory during memory usage profiling \(torch \+ non-torch\): (?P<p>{U}) GiB, available KV cache memory when calculating max tokens: (?P<kv>{U}) GiB(?:, fraction is set (?P<f>{U}))?",
    )
});
static PROFILE_TOTAL: LazyLock<Regex> = LazyLock::new(|| re(r"device total memory (?P<t>{U}) GiB"));
/// R-10.
static CUDA_MALLOC: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"CUDA runtime error in (?:::)?cuda(?:Malloc|MallocAsync|MallocManaged|MallocHost)\w*\(.*?\): out of memory",
    )
});
/// An engine built to keep every context token's logits: `trtllm-build`'s flags, or the
/// engine's `config.json` / the runtime's echo of it.
static GATHER_LOGITS: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r#"--gather_(?:all_token|context)_logits\b|["']?gather_context_logits["']?\s*[:=]\s*(?:true|True)\b"#,
    )
});
static CUBLAS_FREE: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?i)cublas.*?Free Memory: (?P<f>{U})\s?(?P<u>[KMG]i?B)"));
/// PyTorch backend: `Executor creation failed due to insufficient GPU memory.` and the
/// lines after it.
const EXECUTOR_OOM: &str = "Executor creation failed due to insufficient GPU memory";
static COMPONENT: LazyLock<Regex> =
    LazyLock::new(|| re(r"The following component could not be created: (?P<c>.+?)\s*$"));
static COMPONENT_TOTAL: LazyLock<Regex> =
    LazyLock::new(|| re(r"Total GPU memory \(GiB\): (?P<t>{U})"));
static COMPONENT_FREE: LazyLock<Regex> =
    LazyLock::new(|| re(r"Free GPU memory before component creation attempt \(GiB\): (?P<f>{U})"));
/// PyTorch backend iteration log.
static ITERATION: LazyLock<Regex> =
    LazyLock::new(|| re(r"\biter = \d+, (?:global_rank = \d+, rank = \d+, )?host_step_time"));

fn is_start(t: &str) -> bool {
    VERSION.is_match(t) || is_command(t)
}

fn is_command(t: &str) -> bool {
    COMMAND.is_match(t) && !t.contains("File \"")
}

fn num_of(c: &regex::Captures<'_>, g: &str) -> Option<(f64, (usize, usize))> {
    let m = c.name(g)?;
    parse_count(m.as_str()).map(|v| (v, (m.start(), m.end())))
}

/// A plain decimal (a fraction: `0.85`) from a capture group, with its span.
fn ratio_of(c: &regex::Captures<'_>, g: &str) -> Option<(f64, (usize, usize))> {
    let m = c.name(g)?;
    m.as_str()
        .parse::<f64>()
        .ok()
        .map(|v| (v, (m.start(), m.end())))
}

fn gib_of(c: &regex::Captures<'_>, g: &str) -> Option<(f64, (usize, usize))> {
    let m = c.name(g)?;
    gib(m.as_str()).map(|v| (v, (m.start(), m.end())))
}

/// The largest entry of a printed vector `[4096, 131072]`.
fn max_of_list(s: &str) -> Option<f64> {
    s.split(',')
        .filter_map(|p| p.trim().parse::<f64>().ok())
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
}

/// The first `Init` report of an initialisation ([`INIT_USAGE`]): the device's use then, less
/// what this process is known to hold by then (nothing before `Init CUDA` returns but the
/// library's own GPU delta; the engine it just loaded before `Init cuBLAS`/`cuDNN`), is
/// memory another process holds. Without the engine's size nearby this process's share is
/// unknown (a tensor-parallel rank's weights, a model built in the same process), and nothing
/// is read.
fn read_init_usage(line: &Line<'_>, c: &regex::Captures<'_>, out: &mut Emit) {
    let before = line.preceding(INIT_BURST_LINES);
    if before.iter().any(|l| INIT_USAGE.is_match(&l.text)) {
        return;
    }
    let (Some(what), Some(delta), Some(now)) = (c.name("what"), c.name("d"), c.name("now")) else {
        return;
    };
    let (Ok(delta), Ok(now_mib)) = (delta.as_str().parse::<f64>(), now.as_str().parse::<f64>())
    else {
        return;
    };
    let engine_mib = if what.as_str() == "CUDA" {
        Some(0.0)
    } else {
        before.iter().find_map(|l| {
            ENGINE_SIZE
                .captures(&l.text)
                .and_then(|e| e.name("m")?.as_str().parse::<f64>().ok())
        })
    };
    let Some(engine_mib) = engine_mib else {
        return;
    };
    // Up to a gibibyte is this process's own CUDA context and library workspaces (300-600
    // MiB on current drivers), which the reading includes and nothing names.
    let held_mib = now_mib - engine_mib - delta.max(0.0);
    if held_mib >= CONTEXT_ALLOWANCE_MIB {
        out.fact(
            "trtllm.held_elsewhere_at_init_bytes",
            held_mib * 1048576.0,
            Some((now.start(), now.end())),
        );
    }
}

/// Lines above a repeated rank announcement that still belong to the instance it starts: the
/// Triton backend prints its settings before the rank.
const PREAMBLE_LINES: usize = 12;

/// The KV pool's share the starting instance's preamble named (`kv_cache_free_gpu_mem_fraction
/// is not specified, will use default value of 0.9`), read again after the run's start
/// dropped it with the instance before.
fn preamble_share(line: &Line<'_>, out: &mut Emit) {
    for prev in line.preceding(PREAMBLE_LINES) {
        // The instance before ends where its pool was sized or its engine initialised.
        if KV_OLD_FORM.is_match(&prev.text)
            || KV_ALLOCATED.is_match(&prev.text)
            || INIT_USAGE.is_match(&prev.text)
        {
            return;
        }
        if let Some(v) = DEFAULT_FRACTION
            .captures(&prev.text)
            .and_then(|c| c.name("f")?.as_str().parse::<f64>().ok())
        {
            out.fact("trtllm.free_gpu_memory_fraction", v, None);
            return;
        }
    }
}

fn is_trt_line(line: &Line<'_>) -> bool {
    line.meta
        .tag
        .as_deref()
        .is_some_and(|t| t == "TensorRT-LLM" || t == "TRT-LLM")
}

/// The TensorRT-LLM recogniser.
pub struct TrtLlm;

impl Recognizer for TrtLlm {
    fn engine(&self) -> &'static str {
        id::TRTLLM
    }

    fn anchors(&self) -> &'static [&'static str] {
        &[
            "TensorRT-LLM",
            "TRT-LLM",
            "trtllm-serve",
            "trtllm-bench",
            "TRTGptModel",
            "kvCache",
            // Its KV-cache messages by name, not a bare "KV cache": every vLLM stats line
            // says "KV cache usage" and would reach this recogniser for nothing.
            "paged KV cache",
            "KV cache primary pool",
            "Max KV cache blocks",
            "available KV cache memory",
            "in the KV cache",
            "kv_cache_free_gpu_mem",
            "free_gpu_memory_fraction",
            "cudaMalloc",
            EXECUTOR_OOM,
            "host_step_time",
            "/tensorrt_llm/",
            "No free blocks left",
            "Total Activation Memory",
            "Total Weights Memory",
            "bytes for k/v cache",
            CUDA_PYTHON_OOM,
            "gather_all_token_logits",
            "gather_context_logits",
            // The engine's size before it is read from the lines above this one, not as a
            // marker of its own: a plain TensorRT runtime prints it too.
            "MemUsageChange] Init",
            "is using GPU",
        ]
    }

    fn recognize(&self, line: &Line<'_>, out: &mut Emit) {
        let text = line.text;
        // A traceback frame in TensorRT-LLM's Python names the engine.
        if super::serving::quoted_code_or_frame(text, &["/tensorrt_llm/"], id::TRTLLM, out) {
            return;
        }

        if text.contains("gather_") && GATHER_LOGITS.is_match(text) {
            out.fact("trtllm.gather_logits", true, None);
        }
        if is_start(text) {
            if !start_already_seen(line, is_start, is_command) {
                out.run_start();
            }
            out.engine(id::TRTLLM);
            if let Some(m) = VERSION.captures(text).and_then(|c| c.name("v")) {
                out.fact("trtllm.version", m.as_str(), Some((m.start(), m.end())));
            }
            if is_command(text) {
                read_flags(line, KEYS, out);
            }
            return;
        }

        if let Some(c) = REDUCED.captures(text) {
            out.engine(id::TRTLLM);
            let mut f = Failure::new("kv-capacity", id::TRTLLM, Domain::Device);
            if let Some((v, sp)) = num_of(&c, "n") {
                f.fact("trtllm.reduced_max_seq_len", v, Some(sp));
            }
            out.failure(f);
            return;
        }
        if let Some(c) = REDUCED_VEC.captures(text) {
            out.engine(id::TRTLLM);
            let mut f = Failure::new("kv-capacity", id::TRTLLM, Domain::Device);
            if let Some(m) = c.name("old") {
                if let Some(v) = max_of_list(m.as_str()) {
                    f.fact("trtllm.max_seq_len", v, Some((m.start(), m.end())));
                }
            }
            if let Some(m) = c.name("new") {
                if let Some(v) = max_of_list(m.as_str()) {
                    f.fact("trtllm.reduced_max_seq_len", v, Some((m.start(), m.end())));
                }
            }
            out.failure(f);
            return;
        }
        if let Some(c) = text
            .contains("must be large enough to process")
            .then(|| MAX_TOKENS_TOO_SMALL.captures(text))
            .flatten()
        {
            out.engine(id::TRTLLM);
            let mut f = Failure::new("kv-capacity", id::TRTLLM, Domain::Device);
            if let Some((v, sp)) = num_of(&c, "n") {
                f.fact("trtllm.kv_tokens", v, Some(sp));
            }
            out.failure(f);
            return;
        }

        // The batch manager asks the KV-cache manager for a block for the next token and
        // none is left: the sequences in flight outgrew the cache.
        if text.contains("No free blocks left") || text.contains("Can't allocate new blocks") {
            out.engine(id::TRTLLM);
            out.phase(PhaseMark::Serving);
            out.failure(Failure::new("kv-exhausted", id::TRTLLM, Domain::Device));
            return;
        }

        if CUDA_MALLOC.is_match(text)
            || (text.contains(CUDA_PYTHON_OOM)
                && line
                    .preceding(40)
                    .iter()
                    .any(|l| l.text.contains("tensorrt_llm")))
        {
            out.engine(id::TRTLLM);
            let mut f = Failure::new("device-oom", id::TRTLLM, Domain::Device);
            f.fact("oom.backend", "cuda", None)
                .fact("oom.wording", "cuda-runtime", None);
            // The native stack printed under the error says what the allocation was for:
            // the batch's runtime buffers, resized for the requests in flight each step.
            if line.following(8).iter().any(|l| {
                l.text.contains("RuntimeBuffers::reshape")
                    || l.text.contains("RuntimeBuffers::prepareStep")
            }) {
                f.fact("trtllm.oom_in_runtime_buffers", true, None);
            }
            out.failure(f);
            return;
        }

        if text.contains(EXECUTOR_OOM) {
            out.engine(id::TRTLLM);
            // Raised `from` the OOM of the component being created: a wrapper.
            let mut f = Failure::new("device-oom", id::TRTLLM, Domain::Device);
            f.wrapper = true;
            for next in line.following(6) {
                let t = next.text.as_str();
                if let Some(m) = COMPONENT.captures(t).and_then(|c| c.name("c")) {
                    f.fact("trtllm.failed_component", m.as_str(), None);
                } else if let Some((v, _)) =
                    COMPONENT_TOTAL.captures(t).and_then(|c| gib_of(&c, "t"))
                {
                    f.fact("trtllm.gpu_total_bytes", v, None);
                } else if let Some((v, _)) =
                    COMPONENT_FREE.captures(t).and_then(|c| gib_of(&c, "f"))
                {
                    f.fact("trtllm.free_before_component_bytes", v, None);
                }
            }
            out.failure(f);
            return;
        }

        if let Some(c) = INIT_USAGE.captures(text) {
            read_init_usage(line, &c, out);
            return;
        }
        if let Some(c) = RANK_GPU.captures(text) {
            let repeated = line
                .preceding(RANK_REPEAT_LINES)
                .iter()
                .filter_map(|l| RANK_GPU.captures(&l.text))
                .any(|p| {
                    p.name("r").map(|m| m.as_str()) == c.name("r").map(|m| m.as_str())
                        && p.name("g").map(|m| m.as_str()) == c.name("g").map(|m| m.as_str())
                });
            if repeated {
                out.run_start();
                preamble_share(line, out);
            }
            out.engine(id::TRTLLM);
            return;
        }

        let mut seen = true;
        if MODEL_LIMIT.is_match(text) {
            read_key_values(text, KEYS, out);
        } else if let Some(m) = ACTIVATION_MEMORY.captures(text).and_then(|c| c.name("b")) {
            if let Ok(v) = m.as_str().parse::<u64>() {
                out.fact("trtllm.activation_bytes", v, Some((m.start(), m.end())));
            }
        } else if let Some(m) = WEIGHTS_MEMORY.captures(text).and_then(|c| c.name("b")) {
            if let Ok(v) = m.as_str().parse::<u64>() {
                out.fact("model.weights_bytes", v, Some((m.start(), m.end())));
            }
        } else if let Some(c) = ENGINE_SIZE.captures(text) {
            if let Some(m) = c.name("m") {
                if let Some(v) = size(m.as_str(), "MiB", SiBase::Binary) {
                    out.fact("model.weights_bytes", v, Some((m.start(), m.end())));
                }
            }
            out.phase(PhaseMark::EngineStartup);
        } else if let Some(c) = KV_SIZING.captures(text) {
            if let Some((v, sp)) = gib_of(&c, "t") {
                out.fact("trtllm.gpu_total_bytes", v, Some(sp));
            }
            if let Some((v, sp)) = gib_of(&c, "a") {
                out.fact("trtllm.free_after_weights_bytes", v, Some(sp));
            }
            out.phase(PhaseMark::EngineStartup);
        } else if let Some(c) = PRIMARY_BLOCKS.captures(text) {
            if let Some((v, sp)) = num_of(&c, "n") {
                out.fact("trtllm.kv_blocks", v, Some(sp));
            }
        } else if let Some(c) = KV_ALLOCATED.captures(text) {
            if let Some((v, sp)) = gib_of(&c, "g") {
                out.fact("trtllm.kv_cache_bytes", v, Some(sp));
            }
            if let Some((v, sp)) = num_of(&c, "t") {
                out.fact("trtllm.kv_tokens", v, Some(sp));
            }
            out.phase(PhaseMark::EngineStartup);
        } else if let Some(c) = KV_OLD_FORM.captures(text) {
            if let Some((v, sp)) = num_of(&c, "b") {
                out.fact("trtllm.kv_cache_bytes", v, Some(sp));
            }
            if let Some((v, sp)) = num_of(&c, "t") {
                out.fact("trtllm.kv_tokens", v, Some(sp));
            }
            out.phase(PhaseMark::EngineStartup);
        } else if let Some(c) = DEFAULT_FRACTION.captures(text) {
            if let Some((v, sp)) = ratio_of(&c, "f") {
                out.fact("trtllm.free_gpu_memory_fraction", v, Some(sp));
            }
        } else if let Some(c) = REDUCED_SEQ.captures(text) {
            if let Some((v, sp)) = num_of(&c, "n") {
                out.fact("trtllm.reduced_max_seq_len", v, Some(sp));
            }
        } else if let Some(c) = REDUCED_INPUT.captures(text) {
            if let Some((v, sp)) = num_of(&c, "n") {
                out.fact("trtllm.reduced_max_input_len", v, Some(sp));
            }
        } else if let Some(c) = BOTH_SET.captures(text) {
            if let Some((v, sp)) = ratio_of(&c, "f") {
                out.fact("trtllm.free_gpu_memory_fraction", v, Some(sp));
            }
            if let Some((v, sp)) = num_of(&c, "n") {
                out.fact("trtllm.max_tokens", v, Some(sp));
            }
        } else if let Some(c) = PROFILE.captures(text) {
            if let Some((v, sp)) = gib_of(&c, "p") {
                out.fact("trtllm.peak_bytes", v, Some(sp));
            }
            if let Some((v, sp)) = gib_of(&c, "kv") {
                out.fact("trtllm.kv_cache_bytes", v, Some(sp));
            }
            if let Some((v, sp)) = ratio_of(&c, "f") {
                out.fact("trtllm.free_gpu_memory_fraction", v, Some(sp));
            }
            if let Some((v, sp)) = PROFILE_TOTAL.captures(text).and_then(|c| gib_of(&c, "t")) {
                out.fact("trtllm.gpu_total_bytes", v, Some(sp));
            }
            out.phase(PhaseMark::EngineStartup);
        } else if let Some(c) = CUBLAS_FREE.captures(text) {
            if let (Some(n), Some(u)) = (c.name("f"), c.name("u")) {
                if let Some(v) = size(n.as_str(), u.as_str(), SiBase::Binary) {
                    out.fact("trtllm.free_memory_bytes", v, Some((n.start(), u.end())));
                }
            }
        } else if ITERATION.is_match(text) {
            out.phase(PhaseMark::Serving);
        } else if text.contains("KvCacheConfig(")
            || text.contains("LlmArgs(")
            || text.contains("kv_cache_free_gpu_mem_fraction")
            || text.contains("free_gpu_memory_fraction")
        {
            if text.contains("--") {
                if super::serving::is_argument_item(text) {
                    read_flags(line, KEYS, out);
                }
            } else {
                read_key_values(text, KEYS, out);
            }
        } else if is_trt_line(line) {
            // Any other line of the runtime: it names the engine. Blocks and tokens per
            // block may share one line in newer versions.
            if let Some((v, sp)) = BLOCKS_LINE.captures(text).and_then(|c| num_of(&c, "n")) {
                out.fact("trtllm.kv_blocks", v, Some(sp));
            }
            if let Some((v, sp)) = TOKENS_PER_BLOCK
                .captures(text)
                .and_then(|c| num_of(&c, "t"))
            {
                out.fact("trtllm.tokens_per_block", v, Some(sp));
            }
            let lower = text.to_ascii_lowercase();
            if lower.contains("cuda graph")
                && (lower.contains("warmup") || lower.contains("captur"))
            {
                out.phase(PhaseMark::CudaGraphCapture);
            }
        } else {
            seen = false;
        }
        if seen {
            out.engine(id::TRTLLM);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::evidence::{InputName, Value};
    use crate::ingest::log::engines::Observation;

    const GIB: f64 = 1073741824.0;

    fn run(raw: &str) -> Emit {
        crate::ingest::log::engines::run_line(&TrtLlm, raw)
    }

    fn fact(out: &Emit, name: &str) -> Option<Value> {
        crate::ingest::log::engines::emitted_fact(out, name)
    }

    fn failure(out: &Emit) -> Option<Failure> {
        crate::ingest::log::engines::emitted_failure(out)
    }

    /// The batch's runtime buffers named under a failed cudaMalloc, and an engine that gathers
    /// every token's logits.
    #[test]
    fn runtime_buffers_and_gathered_logits() {
        let input: InputName = std::sync::Arc::from("t.log");
        let log = "trtllm-build --checkpoint_dir ckpt --output_dir engine --gemm_plugin float16 --gather_all_token_logits\n[TensorRT-LLM][INFO] TRTGptModel maxBatchSize: 256\n[TensorRT-LLM][ERROR] Encountered an error in forwardAsync function: [TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMallocAsync(ptr, n, mMemPool->getPool(), mCudaStream->get()): out of memory (/src/cpp/tensorrt_llm/runtime/tllmBuffers.h:125)\n1       0x7f3a1c4e2b79 void tensorrt_llm::common::check<cudaError>(cudaError, char const*, char const*, int) + 121\n2       0x7f3a1c6d52d5 tensorrt_llm::runtime::BufferManager::gpu(nvinfer1::Dims64, nvinfer1::DataType) const + 501\n3       0x7f3a1cb7e0a1 tensorrt_llm::batch_manager::RuntimeBuffers::reshape(tensorrt_llm::runtime::TllmRuntime const&) + 1905\n";
        let ev = crate::ingest::log::grouping::analyze_log(&mut log.as_bytes(), &input)
            .unwrap()
            .0;
        let f = &ev.incidents[0].facts;
        assert_eq!(f.bool("trtllm.oom_in_runtime_buffers"), Some(true));
        assert_eq!(f.bool("trtllm.gather_logits"), Some(true));
        let log = log.replace("RuntimeBuffers::reshape", "KVCacheManager::allocatePools");
        let ev = crate::ingest::log::grouping::analyze_log(&mut log.as_bytes(), &input)
            .unwrap()
            .0;
        assert_eq!(
            ev.incidents[0].facts.bool("trtllm.oom_in_runtime_buffers"),
            None
        );
    }

    /// The device's use at TensorRT's first `Init` report, less the engine just loaded, is
    /// another process's; later reports of the same initialisation, a report with no engine
    /// size before it, and one within the engine's own share say nothing.
    #[test]
    fn device_use_when_tensorrt_initialised() {
        let held = |log: &str| {
            crate::ingest::log::grouping::analyze_text(log)
                .context
                .num("trtllm.held_elsewhere_at_init_bytes")
        };
        let mib = 1048576.0;
        let engine = "[TensorRT-LLM][INFO] Loaded engine size: 3937 MiB\n[TensorRT-LLM][INFO] [MemUsageChange] Init cuBLAS/cuBLASLt: CPU +0, GPU +8, now: CPU 4064, GPU 77667 (MiB)\n[TensorRT-LLM][INFO] [MemUsageChange] Init cuDNN: CPU +0, GPU +10, now: CPU 4064, GPU 77677 (MiB)\n";
        assert_eq!(held(engine), Some((77667.0 - 3937.0 - 8.0) * mib));
        // No engine size before it: this process's own share is unknown.
        let bare = "[TensorRT-LLM][INFO] [MemUsageChange] Init cuBLAS/cuBLASLt: CPU +0, GPU +64, now: CPU 171933, GPU 35528 (MiB)\n";
        assert_eq!(held(bare), None);
        // `Init CUDA` comes before anything of this process's but its context.
        let cuda = "[11/20/2026-21:04:55] [TRT] [I] [MemUsageChange] Init CUDA: CPU +13, GPU +0, now: CPU 141, GPU 17263 (MiB)\n";
        assert_eq!(held(cuda), Some(17263.0 * mib));
        // TensorRT's own tally is not the device's use.
        let own = "[TensorRT-LLM][INFO] [MemUsageChange] TensorRT-managed allocation in engine deserialization: CPU +0, GPU +3934, now: CPU 0, GPU 3934 (MiB)\n";
        assert_eq!(held(own), None);
    }

    /// The same rank announced on the same GPU again is another instance starting: the first
    /// one's KV pool is not the second one's.
    #[test]
    fn same_rank_on_same_gpu_again_starts_a_run() {
        let first = "[TensorRT-LLM][INFO] Rank 0 is using GPU 0\n[TensorRT-LLM][INFO] Allocate 67343745024 bytes for k/v cache.\n";
        let failure = "[TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMallocAsync(ptr, n, mCudaStream->get()): out of memory (/app/tensorrt_llm/cpp/tensorrt_llm/runtime/tllmBuffers.h:118)\n";
        let analyze = |log: String| crate::ingest::log::grouping::analyze_text(&log);
        let again = "[TensorRT-LLM][INFO] Rank 0 is using GPU 0\n";
        let ev = analyze(format!("{first}{again}{failure}"));
        assert_eq!(ev.incidents[0].facts.num("trtllm.kv_cache_bytes"), None);
        // The new instance's settings printed just above its rank line are its own.
        let preamble = "[TensorRT-LLM][WARNING] kv_cache_free_gpu_mem_fraction is not specified, will use default value of 0.9 or max_tokens_in_paged_kv_cache\n";
        let ev = analyze(format!("{first}{preamble}{again}{failure}"));
        assert_eq!(
            ev.incidents[0].facts.num("trtllm.free_gpu_memory_fraction"),
            Some(0.9)
        );
        let other_rank = "[TensorRT-LLM][INFO] Rank 1 is using GPU 1\n";
        let ev = analyze(format!("{first}{other_rank}{failure}"));
        assert!(ev.incidents[0].facts.num("trtllm.kv_cache_bytes").is_some());
    }

    #[test]
    fn kv_blocks_exhausted_while_serving() {
        for raw in [
            "[TensorRT-LLM][ERROR] Assertion failed: Can't allocate new blocks. No free blocks left. (/src/cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp:362)",
            "[TensorRT-LLM][ERROR] [TensorRT-LLM][ERROR] Assertion failed: No free blocks left.",
        ] {
            let f = failure(&run(raw)).expect(raw);
            assert_eq!(f.kind, "kv-exhausted", "{raw}");
        }
        assert!(
            failure(&run(
                "[TensorRT-LLM][INFO] Number of blocks in KV cache primary pool: 82"
            ))
            .is_none()
        );
    }

    #[test]
    fn every_accounting_wording() {
        let rows: &[(&str, &str, &str, f64)] = &[
            (
                "R-1",
                "[TensorRT-LLM][INFO] Loaded engine size: 15388 MiB",
                "model.weights_bytes",
                15388.0 * 1048576.0,
            ),
            (
                "R-3",
                "[TensorRT-LLM][INFO] Memory usage when calculating max tokens in paged kv cache: total: 22.18 GiB, available: 1.42 GiB",
                "trtllm.free_after_weights_bytes",
                1.42 * GIB,
            ),
            (
                "R-3 total",
                "[TensorRT-LLM][INFO] Memory usage when calculating max tokens in paged kv cache: total: 79.10 GiB, available: 61.49 GiB",
                "trtllm.gpu_total_bytes",
                79.10 * GIB,
            ),
            (
                "R-4 blocks",
                "[TensorRT-LLM][INFO] Number of blocks in KV cache primary pool: 82",
                "trtllm.kv_blocks",
                82.0,
            ),
            (
                "R-4 tokens",
                "[TensorRT-LLM][INFO] Number of tokens per block: 64.",
                "trtllm.tokens_per_block",
                64.0,
            ),
            (
                "R-4 one line",
                "[TensorRT-LLM][INFO] Max KV cache blocks per sequence: 65 [window size=2051], tokens per block=32, primary blocks=116617, secondary blocks=0",
                "trtllm.kv_blocks",
                116617.0,
            ),
            (
                "R-5",
                "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 1.28 GiB for max tokens in paged KV cache (5248).",
                "trtllm.kv_tokens",
                5248.0,
            ),
            (
                "R-5 pytorch",
                "[01/16/2026-06:20:15] [TRT-LLM] [I] [MemUsageChange] Allocated 60.12 GiB for max tokens (1970176)",
                "trtllm.kv_cache_bytes",
                60.12 * GIB,
            ),
            (
                "R-5 0.6-0.8 bytes",
                "[TensorRT-LLM][INFO] Allocate 8657043456 bytes for k/v cache.",
                "trtllm.kv_cache_bytes",
                8657043456.0,
            ),
            (
                "R-5 0.6-0.8 tokens",
                "[TensorRT-LLM][INFO] Using 219776 total tokens in paged KV cache, and 8 blocks per sequence",
                "trtllm.kv_tokens",
                219776.0,
            ),
            (
                "R-5 0.6 tokens",
                "[TensorRT-LLM][INFO] Using 60672 tokens in paged KV cache.",
                "trtllm.kv_tokens",
                60672.0,
            ),
            (
                "Triton default fraction",
                "[TensorRT-LLM][WARNING] kv_cache_free_gpu_mem_fraction is not specified, will use default value of 0.85 or max_tokens_in_paged_kv_cache",
                "trtllm.free_gpu_memory_fraction",
                0.85,
            ),
            (
                "R-7",
                "[TensorRT-LLM][WARNING] Both freeGpuMemoryFraction (aka kv_cache_free_gpu_mem_fraction) and maxTokens (aka max_tokens_in_paged_kv_cache) are set (to 0.95 and 40000, respectively). The smaller value will be used.",
                "trtllm.free_gpu_memory_fraction",
                0.95,
            ),
            (
                "R-9",
                "[01/16/2026-06:20:15] [TRT-LLM] [I] Peak memory during memory usage profiling (torch + non-torch): 20.50 GiB, available KV cache memory when calculating max tokens: 50.20 GiB, fraction is set 0.9, kv size is 131072. device total memory 79.11 GiB, , tmp kv_mem 1.20 GiB",
                "trtllm.gpu_total_bytes",
                79.11 * GIB,
            ),
            (
                "model limits",
                "[TensorRT-LLM][INFO] TRTGptModel maxSequenceLen: 131072",
                "trtllm.max_seq_len",
                131072.0,
            ),
            (
                "model limits input",
                "[TensorRT-LLM][INFO] TRTGptModel maxInputLen: 128000 = min(maxSequenceLen - 1, maxNumTokens) since context FMHA and usePackedInput are enabled",
                "trtllm.max_input_len",
                128000.0,
            ),
            (
                "R-10 cublas",
                "[TensorRT-LLM][ERROR] Assertion failed: Failed to create cublas handle. Free Memory: 412.00 MiB (0.5%)",
                "trtllm.free_memory_bytes",
                412.0 * 1048576.0,
            ),
            (
                "R-6 input",
                "[TensorRT-LLM][WARNING] maxInputLen is reduced to 5184",
                "trtllm.reduced_max_input_len",
                5184.0,
            ),
        ];
        for (id, line, name, want) in rows {
            let out = run(line);
            let got = fact(&out, name).and_then(|v| v.as_f64());
            assert!(
                got.is_some_and(|g| (g - want).abs() <= want * 1e-4 + 1.0),
                "{id}: {name} = {got:?}, want {want}"
            );
        }
    }

    #[test]
    fn every_failure_wording() {
        let rows: &[(&str, &str, &str, &str, f64)] = &[
            (
                "R-6 C++",
                "[TensorRT-LLM][WARNING] maxAttentionWindow and maxSequenceLen are too large for at least one sequence to fit in kvCache. they are reduced to 5185",
                "kv-capacity",
                "trtllm.reduced_max_seq_len",
                5185.0,
            ),
            (
                "R-6 python",
                "[01/16/2026-06:20:15] [TRT-LLM] [W] maxAttentionWindow and maxSequenceLen are too large for at least one sequence to fit in kvCache. They are reduced to 25216",
                "kv-capacity",
                "trtllm.reduced_max_seq_len",
                25216.0,
            ),
            (
                "R-6 vec",
                "[TensorRT-LLM][WARNING] maxAttentionWindowVec too large to fit at least one sequence in kvCache. Old: [131072], New: [30720]",
                "kv-capacity",
                "trtllm.max_seq_len",
                131072.0,
            ),
            (
                "R-6 fail fast",
                "RuntimeError: Attention window too large to fit even a single sequence in the KV cache. Failing fast rather than attempting an adjustment of the window sizes. Old: [4096, 131072], New: [4096, 30720]",
                "kv-capacity",
                "trtllm.reduced_max_seq_len",
                30720.0,
            ),
            (
                "old error",
                "[TensorRT-LLM][ERROR] maxTokensInPagedKvCache must be large enough to process at least 1 sequence to completion (i.e. must be larger than beam_width * tokensPerBlock * maxBlocksPerSeq)",
                "kv-capacity",
                "",
                0.0,
            ),
            (
                "old error, the Triton backend's form",
                "E0306 16:40:07.708802 117 backend_model.cc:691] ERROR: Failed to create instance: unexpected error when creating modelInstanceState: maxTokensInPagedKvCache (29184) must be large enough to process at least 1 sequence to completion (i.e. must be larger than beam_width * tokensPerBlock * maxBlocksPerSeq)",
                "kv-capacity",
                "trtllm.kv_tokens",
                29184.0,
            ),
            (
                "R-10",
                "[TensorRT-LLM][ERROR] [TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMallocAsync(ptr, n, mCudaStream->get()): out of memory (/code/tensorrt_llm/cpp/tensorrt_llm/runtime/tllmBuffers.h:112)",
                "device-oom",
                "",
                0.0,
            ),
            (
                "R-10 malloc",
                "RuntimeError: [TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMalloc(ptr, n): out of memory (/src/tensorrt_llm/runtime/tllmBuffers.h:115)",
                "device-oom",
                "",
                0.0,
            ),
            (
                "executor",
                "[07/08/2025-19:47:15] [TRT-LLM] [RANK 1] [E] Failed to initialize executor on rank 1: Executor creation failed due to insufficient GPU memory.",
                "device-oom",
                "",
                0.0,
            ),
        ];
        for (id, line, kind, name, want) in rows {
            let out = run(line);
            let f = failure(&out).unwrap_or_else(|| panic!("{id}: no failure"));
            assert_eq!(f.kind, *kind, "{id}");
            assert_eq!(f.engine, id::TRTLLM, "{id}");
            if !name.is_empty() {
                assert_eq!(f.get(name).and_then(Value::as_f64), Some(*want), "{id}");
            }
        }
        assert!(
            failure(&run(
                "Executor creation failed due to insufficient GPU memory."
            ))
            .unwrap()
            .wrapper
        );
    }

    #[test]
    fn command_lines_and_config() {
        let out = run(
            "trtllm-serve meta-llama/Llama-3.1-8B-Instruct --max_seq_len 131072 --max_batch_size 64 --max_num_tokens 8192 --kv_cache_free_gpu_memory_fraction 0.95 --tp_size 2",
        );
        assert!(
            out.records
                .iter()
                .any(|r| matches!(r.obs, Observation::RunStart))
        );
        assert_eq!(fact(&out, "trtllm.max_seq_len"), Some(Value::Num(131072.0)));
        assert_eq!(
            fact(&out, "trtllm.free_gpu_memory_fraction"),
            Some(Value::Num(0.95))
        );
        assert_eq!(fact(&out, "trtllm.tp_size"), Some(Value::Num(2.0)));
        let out = run("[TensorRT-LLM] TensorRT-LLM version: 0.17.0");
        assert_eq!(fact(&out, "trtllm.version"), Some(Value::str("0.17.0")));
        let out = run(
            "[TRT-LLM] [I] kv_cache_config=KvCacheConfig(enable_block_reuse=True, max_tokens=None, free_gpu_memory_fraction=0.85, dtype='fp8')",
        );
        assert_eq!(
            fact(&out, "trtllm.free_gpu_memory_fraction"),
            Some(Value::Num(0.85))
        );
    }

    #[test]
    fn serving_phase_from_the_iteration_log() {
        let out = run(
            "[01/16/2026-06:25:02] [TRT-LLM] [I] iter = 120, host_step_time = 41.22ms, num_scheduled_requests: 12, states = {'num_ctx_requests': 1, 'num_ctx_tokens': 2048, 'num_generation_tokens': 11}",
        );
        assert!(
            out.records
                .iter()
                .any(|r| matches!(r.obs, Observation::Phase(PhaseMark::Serving)))
        );
    }

    #[test]
    fn the_builders_summary_sizes_the_engine() {
        let out = run("[10/27/2023-08:03:41] [TRT] [I] Total Activation Memory: 13988544512");
        assert_eq!(
            fact(&out, "trtllm.activation_bytes"),
            Some(Value::Num(13988544512.0))
        );
        let out = run("[10/27/2023-08:03:41] [TRT] [I] Total Weights Memory: 12488319488");
        assert_eq!(
            fact(&out, "model.weights_bytes"),
            Some(Value::Num(12488319488.0))
        );
        // cuda-python's error enum is TensorRT-LLM's only below its frames (the rule
        // fixture `fires-python-runtime-device-memory-size` has them); alone it is no one's.
        assert!(
            failure(&run(
                "RuntimeError: CUDA ERROR: cudaError_t.cudaErrorMemoryAllocation"
            ))
            .is_none()
        );
    }

    #[test]
    fn look_alikes_are_not_failures() {
        for line in [
            "[TensorRT-LLM][WARNING] The value of maxAttentionWindow cannot exceed mMaxSequenceLen. Therefore, it has been adjusted to match the value of mMaxSequenceLen.",
            "[TensorRT-LLM][WARNING] [kv cache manager] storeContextBlocks: Can not find sequence for request 2049",
            "[TensorRT-LLM][WARNING] Attention workspace size is not enough, increase the size from 0 bytes to 67462144 bytes",
        ] {
            assert!(failure(&run(line)).is_none(), "{line}");
        }
    }
}
