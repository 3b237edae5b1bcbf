//! vLLM: the start-up memory accounting, the KV-cache sizing, the two classic start-up
//! errors, the budget check, CUDA-graph capture, runtime preemption and the engine's
//! configuration as it logs it, V0 and V1, 0.5 to 0.33 (`ENGINE-MESSAGES.md` §2).
//!
//! vLLM's log says far more than its final error: what the weights took, what was left for
//! the KV cache, how many tokens that holds, what the engine was configured with. Those lines
//! become facts so rules can name the knob and compute its value (`--max-model-len` the
//! cache can hold, the `--gpu-memory-utilization` that the free memory allows).
//!
//! Wordings changed often; each regex below names the message ids of the catalogue it
//! reads. Sizes are GiB (`%.2fGiB` up to 0.11, unpadded `format_gib` later, `Gib` typo in
//! 0.6); token counts may carry thousands separators (V1).
//!
//! A PyTorch OOM inside vLLM is reported by the PyTorch recogniser (it parses the message
//! even when vLLM embeds it in its own); this module adds what vLLM's wrapper says (the
//! sampler warm-up, the failed weight load) as wrapper failures, marks the phases, and names
//! the engine so the incident is vLLM's.
use std::sync::LazyLock;

use regex::Regex;

use super::serving::{
    Key, Kind, count_preceding, gib, gib_signed, key, parse_count, re, read_flags, read_key_values,
    start_already_seen,
};
use super::{Domain, Emit, Failure, Line, PhaseMark, Recognizer, id};

/// Every spelling of the settings that matter for memory.
const KEYS: &[Key] = &[
    key(
        &["max_model_len", "max_seq_len"],
        "vllm.max_model_len",
        Kind::Num,
    ),
    key(
        &["gpu_memory_utilization"],
        "vllm.gpu_memory_utilization",
        Kind::Ratio,
    ),
    key(&["max_num_seqs"], "vllm.max_num_seqs", Kind::Num),
    key(
        &["max_num_batched_tokens"],
        "vllm.max_num_batched_tokens",
        Kind::Num,
    ),
    key(
        &["tensor_parallel_size", "tp"],
        "vllm.tensor_parallel_size",
        Kind::Num,
    ),
    key(
        &["pipeline_parallel_size", "pp"],
        "vllm.pipeline_parallel_size",
        Kind::Num,
    ),
    key(&["dtype"], "vllm.dtype", Kind::Dtype),
    key(&["kv_cache_dtype"], "vllm.kv_cache_dtype", Kind::Text),
    key(&["enforce_eager"], "vllm.enforce_eager", Kind::Flag),
    key(&["quantization", "q"], "vllm.quantization", Kind::Text),
    key(&["block_size"], "vllm.block_size", Kind::Num),
    key(&["cpu_offload_gb"], "vllm.cpu_offload_gb", Kind::Num),
    key(
        &["kv_cache_memory_bytes", "kv_cache_memory"],
        "vllm.kv_cache_memory_bytes",
        Kind::Bytes,
    ),
    key(
        &["enable_chunked_prefill"],
        "vllm.enable_chunked_prefill",
        Kind::Flag,
    ),
    key(
        &["max_capture_size", "max_cudagraph_capture_size"],
        "vllm.max_cudagraph_capture_size",
        Kind::Num,
    ),
    key(&["model", "model_tag"], "model.name", Kind::Text),
];

/// `Initializing an LLM engine with config:` (before 0.4),
/// `Initializing an LLM engine (v0.5.4) with config:` (V0), `Initializing a V0 LLM engine
/// (v0.8.2)` (V0 after V1 became the default), `Initializing a V1 LLM engine (v0.8.5)`.
static ENGINE_INIT: LazyLock<Regex> = LazyLock::new(|| {
    re(r"Initializing an? (?:(?P<gen>V[01]) )?LLM engine (?:\(v(?P<ver>[\w.+-]+)\) )?with config")
});
/// `vLLM API server version 0.8.5`, the 0.11+ banner `█ ... version 0.19.1`.
static API_VERSION: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?:vLLM API server version|█\s+version) (?P<ver>\d+\.\d+[\w.+-]*)"));
/// Command lines that start vLLM.
static COMMAND: LazyLock<Regex> = LazyLock::new(|| {
    re(r"(?:^|[\s/'\x22\[$])(?:vllm serve|vllm\.entrypoints\.[\w.]+|-m vllm\b|vllm/vllm-openai\S*)")
});
static SERVE_MODEL: LazyLock<Regex> =
    LazyLock::new(|| re(r"vllm serve\s+(?P<m>[A-Za-z0-9_./:-]+)"));
/// V-W1 / V-W2 / V-W3.
static WEIGHTS: LazyLock<Regex> = LazyLock::new(|| {
    re(r"(?:Loading model weights took|Model loading took) (?P<w>{N})\s?(?:GiB|GB)")
});
/// V-B1 (0.10+): the budget check before profiling.
static BUDGET_CHECK: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Free memory on device(?: (?P<dev>[\w:]+))? \((?P<free>{N})/(?P<total>{N}) GiB\) on startup is less than (?:desired GPU memory utilization|the engine's budget[^(]*) \((?P<util>{N}), (?P<req>{N}) GiB\)",
    )
});
/// V-P6 / V-P6b head: the successful start-up summary.
static STARTUP_SUMMARY: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Free memory on device(?: [\w:]+)? \((?P<free>{N})/(?P<total>{N}) GiB\) on startup\. Desired GPU memory utilization is \((?P<util>{N}), (?P<req>{N}) GiB\)",
    )
});
static SUMMARY_USAGE: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Actual usage is (?P<w>{N}) GiB for weight, (?P<act>{N}) GiB for peak activation, (?P<nt>{N}) GiB for non-torch memory, and (?P<g>{N}) GiB for CUDAGraph memory",
    )
});
static SUMMARY_USAGE_B: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Actual usage is (?P<c>{N}) GiB for consumed memory \(weights \+ non-torch\), (?P<act>{N}) GiB for peak activation, and (?P<g>{N}) GiB for CUDAGraph memory",
    )
});
static SUMMARY_FIT: LazyLock<Regex> = LazyLock::new(|| re(r"`--kv-cache-memory=(?P<b>\d+)`"));
static SUMMARY_KV: LazyLock<Regex> =
    LazyLock::new(|| re(r"Current kv cache memory in use is (?P<kv>{N})\s?GiB"));
/// V-P1 (0.6.2 - 0.6.4): `Memory profiling results: total_gpu_memory=23.58GiB ...`.
static PROFILE_PAIR: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?P<k>total_gpu_memory|initial_memory_usage|peak_torch_memory|memory_usage_post_profile|non_torch_memory|kv_cache_size|gpu_memory_utilization)=(?P<v>{N})",
    )
});
/// V-P2 line 2: `the current vLLM instance can use total_gpu_memory (79.15GiB) x gpu_memory_utilization (0.90) = 71.24GiB`.
static PROFILE_BUDGET: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"total_gpu_memory \((?P<total>{N})\s?GiB\) x gpu_memory_utilization \((?P<util>{N})\) = (?P<budget>{N})\s?GiB",
    )
});
/// V-P2 line 3.
static PROFILE_SPLIT: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"model weights take (?P<w>{N})\s?GiB; non_torch_memory takes (?P<nt>{N})\s?GiB; PyTorch activation peak memory takes (?P<act>{N})\s?GiB; the rest of the memory reserved for KV Cache is (?P<kv>{N})\s?GiB",
    )
});
/// V-P3 / V-P3b.
static PROFILE_V1: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Total non KV cache memory: (?P<nkv>{N})\s?GiB; torch peak memory increase: (?P<act>{N})\s?GiB; (?:non-torch forward increase memory: (?P<nt>{N})\s?GiB|total consumed \(from mem_get_info\): (?P<c>{N})\s?GiB); weights memory: (?P<w>{N})\s?GiB",
    )
});
/// V-P4.
static AVAILABLE_KV: LazyLock<Regex> =
    LazyLock::new(|| re(r"Available KV cache memory: (?P<kv>{N})\s?GiB"));
/// V-P5.
static EXPLICIT_KV: LazyLock<Regex> = LazyLock::new(|| {
    re(r"Initial free memory (?P<free>{N})\s?GiB, reserved (?P<kv>{N})\s?GiB memory for KV Cache")
});
/// V-P7 (DEBUG).
static REQUESTED: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Initial free memory: (?P<free>{N})\s?GiB; Requested memory: (?P<util>{N}) \(util\), (?P<req>{N})\s?GiB",
    )
});
/// V-K0 / V-K0b: `# GPU blocks: 1952, # CPU blocks: 2048`, `# cuda blocks: ...` (the `#` is
/// often lost in pastes).
static BLOCKS: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i:gpu|cuda|rocm|xpu|hpu|tpu|npu|neuron) blocks:\s*(?P<n>\d[\d,]*),\s*#?\s*CPU blocks:\s*(?P<c>\d[\d,]*)",
    )
});
/// V-K1.
const NO_BLOCKS: &str = "No available memory for the cache blocks";
/// V-K2 (V0).
static KV_CAPACITY_V0: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"max seq len \((?P<len>\d[\d,]*)\) is larger than the maximum number of tokens that can be stored in KV cache \((?P<tok>-?\d[\d,]*)\)",
    )
});
/// V-K3 (V1, `models's` typo until about 0.20).
static KV_CAPACITY_V1: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"To serve at least one request with the models?'s max seq len \((?P<len>\d[\d,]*)\),?\s*\((?P<need>{N})\s?GiB KV cache is needed, which is larger than the available KV cache memory \((?P<avail>{N})\s?GiB\)\.(?:\s*Based on the available memory, the estimated maximum model length is (?P<est>\d[\d,]*))?",
    )
});
/// V-K4 / V-K6.
static KV_TOKENS: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?:GPU|[A-Z]{2,}|GPU \+ host) KV cache size: (?P<tok>\d[\d,]*) tokens"));
/// V-K5.
static CONCURRENCY: LazyLock<Regex> = LazyLock::new(|| {
    re(r"Maximum concurrency for (?P<len>\d[\d,]*) tokens per request: (?P<c>{N})x")
});
/// V-G1 / V-G3: capture starts.
static GRAPH_START: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Capturing cudagraphs for decoding|Capturing the model for CUDA graphs|Capturing CUDA graphs?\b|Capturing CUDA graph shapes",
    )
});
/// V-G2.
static GRAPH_DONE: LazyLock<Regex> = LazyLock::new(|| {
    re(r"Graph capturing finished in (?P<s>{N}) secs?(?:, took (?P<g>{N})\s?GiB)?")
});
/// V-G4.
static GRAPH_POOL: LazyLock<Regex> =
    LazyLock::new(|| re(r"CUDA graph pool memory: (?P<g>{N})\s?GiB \(actual\)"));
/// V-G5: the current utilisation as the INFO line restates it.
static GRAPH_UTIL: LazyLock<Regex> =
    LazyLock::new(|| re(r"The current --gpu-memory-utilization=(?P<u>{N}) is equivalent to"));
/// V-R1.
static PREEMPTED: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"is preempted by (?:PreemptionMode\.)?\w+ mode because there is not enough KV cache space.*?total_(?:num_cumulative_preemption|cumulative_preemption_cnt)=(?P<n>\d+)",
    )
});
/// V-R3 / V-R4 / V-R5 stats pieces.
/// V-R6.
/// A worker the executor lost with no error of its own (`Worker proc VllmWorker-2 died
/// unexpectedly, shutting down executor.`): killed from outside, which is the kernel's OOM
/// killer where the machine's memory was full, and anything else where it was not.
static WORKER_DIED: LazyLock<Regex> = LazyLock::new(|| re(r"Worker proc \S+ died unexpectedly"));
static SAMPLER_OOM: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"CUDA out of memory occurred when warming up (?:sampler|pooler)(?: \([^)]*\))? with (?P<n>\d[\d,]*) dummy requests",
    )
});
/// V-W4.
const LOAD_OOM: &str = "Failed to load model - not enough GPU memory";

/// Directories of vLLM's engine machinery (not its model layers, which SGLang reuses).
const ENGINE_FRAMES: &[&str] = &[
    "/vllm/engine/",
    "/vllm/v1/",
    "/vllm/worker/",
    "/vllm/entrypoints/",
    "/vllm/executor/",
    "/vllm/model_executor/model_loader/",
];

/// The vLLM recogniser.
pub struct Vllm;

fn is_start(t: &str) -> bool {
    ENGINE_INIT.is_match(t)
        || API_VERSION.is_match(t)
        || t.contains("non-default args:")
        || (t.contains("args: Namespace(") && t.contains("gpu_memory_utilization"))
        || is_command(t)
}

fn is_command(t: &str) -> bool {
    COMMAND.is_match(t) && !t.contains("File \"")
}

/// The percentage in `GPU KV cache usage: 41.3%` (the device's, named by an upper-case word
/// such as `GPU` or `XPU`; V0 lines also carry a `CPU` one after it) and its span.
fn kv_usage(text: &str) -> Option<(f64, (usize, usize))> {
    const LABEL: &str = " KV cache usage: ";
    let at = text.find(LABEL)?;
    let word = text[..at]
        .rsplit(|c: char| !c.is_ascii_uppercase())
        .next()?;
    if word.len() < 2 {
        return None;
    }
    let (v, (a, b)) = decimal_at(text, at + LABEL.len())?;
    text[b..].starts_with('%').then_some((v, (a, b)))
}

/// The whole number between `label` and `suffix` (`Running: 37 reqs`) and its span.
fn count_between(text: &str, label: &str, suffix: &str) -> Option<(f64, (usize, usize))> {
    let start = text.find(label)? + label.len();
    let len = text[start..].bytes().take_while(u8::is_ascii_digit).count();
    let end = start + len;
    (len > 0 && text[end..].starts_with(suffix))
        .then(|| text[start..end].parse().ok().map(|v| (v, (start, end))))
        .flatten()
}

/// A decimal number (`41.3`, `7`) starting at byte `start`, and its span.
fn decimal_at(text: &str, start: usize) -> Option<(f64, (usize, usize))> {
    let rest = &text.as_bytes()[start..];
    let int = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let mut len = int;
    if int > 0 && rest.get(int) == Some(&b'.') {
        let frac = rest[int + 1..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        if frac > 0 {
            len = int + 1 + frac;
        }
    }
    (int > 0)
        .then(|| {
            text[start..start + len]
                .parse()
                .ok()
                .map(|v| (v, (start, start + len)))
        })
        .flatten()
}

fn num(c: &regex::Captures<'_>, g: &str) -> Option<(f64, (usize, usize))> {
    let m = c.name(g)?;
    parse_count(m.as_str()).map(|v| (v, (m.start(), m.end())))
}

fn bytes(c: &regex::Captures<'_>, g: &str) -> Option<(f64, (usize, usize))> {
    let m = c.name(g)?;
    gib_signed(m.as_str()).map(|v| (v, (m.start(), m.end())))
}

/// Emits a GiB capture as a byte fact.
fn gib_fact(out: &mut Emit, c: &regex::Captures<'_>, g: &str, name: &'static str) {
    if let Some((v, sp)) = bytes(c, g) {
        out.fact(name, v, Some(sp));
    }
}

fn num_fact(out: &mut Emit, c: &regex::Captures<'_>, g: &str, name: &'static str) {
    if let Some((v, sp)) = num(c, g) {
        out.fact(name, v, Some(sp));
    }
}

impl Recognizer for Vllm {
    fn engine(&self) -> &'static str {
        id::VLLM
    }

    fn anchors(&self) -> &'static [&'static str] {
        &[
            "LLM engine (v",
            // Before 0.4: `Initializing an LLM engine with config:`, no version.
            "LLM engine with config",
            "API server version",
            " version 0.",
            "non-default args",
            "args: Namespace(",
            "vllm serve",
            "vllm.entrypoints",
            "-m vllm",
            "vllm/vllm-openai",
            // Flags on the lines of a command continued with backslashes.
            "--model",
            "--quantization",
            "--dtype",
            "--tensor-parallel-size",
            "--max-num-seqs",
            "--kv-cache-dtype",
            "max-model-len",
            "max_model_len",
            "gpu-memory-utilization",
            "Loading model weights took",
            "Model loading took",
            "Starting to load model",
            "Free memory on device",
            "Memory profiling",
            "total_gpu_memory (",
            "model weights take",
            "Total non KV cache memory",
            "Available KV cache memory",
            "memory for KV Cache",
            "Initial free memory:",
            "CPU blocks",
            "No available memory for the cache blocks",
            "max seq len (",
            "KV cache size:",
            "Maximum concurrency for",
            "Capturing cudagraphs",
            "Capturing the model for CUDA graphs",
            "Capturing CUDA graph",
            "Graph capturing finished",
            "CUDA graph pool memory",
            "is equivalent to --gpu-memory-utilization",
            "is preempted by",
            "KV cache usage:",
            "when warming up sampler",
            "when warming up pooler",
            "Failed to load model - not enough GPU memory",
            "init engine (profile, create kv cache",
            "Starting vLLM API server",
            "Application startup complete",
            "Uvicorn running on",
            "Finished server process",
            "Shutting down",
            "Processed prompts",
            "died unexpectedly",
            "/vllm/",
        ]
    }

    fn recognize(&self, line: &Line<'_>, out: &mut Emit) {
        let text = line.text;
        // A traceback frame in vLLM's own engine code names the engine even when the log
        // is only the traceback. Its model layers are shared with other engines (SGLang
        // imports them), so only the engine's machinery counts.
        if super::serving::quoted_code_or_frame(text, ENGINE_FRAMES, id::VLLM, out) {
            return;
        }
        if super::serving::continues_command(line, is_command) {
            read_flags(line, KEYS, out);
            return;
        }

        if self.stats_line(text, out) {
            return;
        }

        // Start lines: the first of a launch resets the context (a restart).
        if is_start(text) {
            if !start_already_seen(line, is_start, is_command) {
                out.run_start();
            }
            out.engine(id::VLLM);
            read_config(line, out);
            return;
        }

        if let Some(c) = GRAPH_UTIL.captures(text) {
            num_fact(out, &c, "u", "vllm.gpu_memory_utilization");
            out.engine(id::VLLM);
            return;
        }

        if text.contains("Free memory on device") {
            if let Some((joined, used)) = super::join_whole(
                line,
                |t| BUDGET_CHECK.is_match(t) || STARTUP_SUMMARY.is_match(t),
                |_| false,
            ) {
                out.consume(used);
                out.engine(id::VLLM);
                if let Some(c) = BUDGET_CHECK.captures(&joined) {
                    budget_check(&c, &joined, used, out);
                } else {
                    startup_summary(&joined, out);
                }
            }
            return;
        }

        if text.contains("To serve at least one request with the model") {
            if let Some((joined, used)) =
                super::join_whole(line, |t| KV_CAPACITY_V1.is_match(t), |_| false)
            {
                out.consume(used);
                out.engine(id::VLLM);
                if let Some(c) = KV_CAPACITY_V1.captures(&joined) {
                    kv_capacity_v1(&c, &joined, used, out);
                }
            }
            return;
        }

        if text.contains("max seq len (") {
            if let Some((joined, used)) =
                super::join_whole(line, |t| KV_CAPACITY_V0.is_match(t), |_| false)
            {
                out.consume(used);
                out.engine(id::VLLM);
                if let Some(c) = KV_CAPACITY_V0.captures(&joined) {
                    let mut f = Failure::new("kv-capacity", id::VLLM, Domain::Device);
                    let tight = used == 0;
                    let sp = |m: Option<regex::Match<'_>>| {
                        m.filter(|_| tight).map(|m| (m.start(), m.end()))
                    };
                    if let Some(v) = c.name("len").and_then(|m| parse_count(m.as_str())) {
                        f.fact("vllm.max_model_len", v, sp(c.name("len")));
                    }
                    if let Some(v) = c.name("tok").and_then(|m| parse_count(m.as_str())) {
                        f.fact("vllm.kv_cache_tokens", v, sp(c.name("tok")));
                    }
                    if used > 0 {
                        f.text = Some(joined.clone());
                    }
                    out.failure(f);
                }
            }
            return;
        }

        if text.contains(NO_BLOCKS) {
            out.engine(id::VLLM);
            out.failure(Failure::new("no-kv-memory", id::VLLM, Domain::Device));
            return;
        }

        if WORKER_DIED.is_match(text) {
            out.engine(id::VLLM);
            let mut f = Failure::new("host-oom", id::VLLM, Domain::Host);
            f.fact("host.killer", "unknown", None);
            // Only a reading of the machine's memory nearly full, logged in the same run
            // (often pasted under the traceback), makes the death a host OOM.
            f.requires = Some(("host.memory_max_share", 0.95));
            out.failure(f);
            return;
        }

        if let Some(c) = SAMPLER_OOM.captures(text) {
            out.engine(id::VLLM);
            out.phase(PhaseMark::Warmup);
            let mut f = Failure::new("device-oom", id::VLLM, Domain::Device);
            f.wrapper = true;
            if let Some((n, sp)) = num(&c, "n") {
                f.fact("vllm.sampler_warmup_requests", n, Some(sp));
            }
            out.failure(f);
            return;
        }

        if text.contains(LOAD_OOM) {
            out.engine(id::VLLM);
            out.phase(PhaseMark::ModelLoad);
            let mut f = Failure::new("device-oom", id::VLLM, Domain::Device);
            f.wrapper = true;
            f.fact("vllm.load_oom", true, None);
            super::serving::embed_torch_oom(&mut f, text, 0);
            out.failure(f);
            return;
        }

        if let Some(c) = PREEMPTED.captures(text) {
            out.engine(id::VLLM);
            out.phase(PhaseMark::Serving);
            let (n, sp) = num(&c, "n").unwrap_or((0.0, (0, 0)));
            out.fact("vllm.preemptions", n, Some(sp));
            // vLLM logs every 50th preemption. A second warning within a few hundred lines
            // means 50 more preemptions in a short span: a storm, not an incident of one.
            if count_preceding(line, 400, |t| t.contains("is preempted by")) >= 1 {
                let mut f = Failure::new("kv-exhausted", id::VLLM, Domain::Device);
                f.fact("vllm.preemptions", n, Some(sp));
                out.failure(f);
            }
            return;
        }

        self.accounting(line, out);
    }
}

impl Vllm {
    /// The periodic stats line (`... Running: N reqs, ... GPU KV cache usage: P%`). It is the
    /// most frequent line of a serving log, so it is tested first and by a literal.
    fn stats_line(&self, text: &str, out: &mut Emit) -> bool {
        // Read with plain searches, not regexes: a serving log is mostly these lines.
        let Some(usage) = kv_usage(text) else {
            return false;
        };
        out.engine(id::VLLM);
        out.phase(PhaseMark::Serving);
        let (u, usage_span) = (usage.0 / 100.0, usage.1);
        out.fact("vllm.kv_usage", u, Some(usage_span));
        if let Some((n, sp)) = count_between(text, "Running: ", " reqs") {
            out.fact("vllm.running_requests", n, Some(sp));
        }
        if let Some((n, sp)) = count_between(text, "Waiting: ", " reqs")
            .or_else(|| count_between(text, "Pending: ", " reqs"))
        {
            out.fact("vllm.waiting_requests", n, Some(sp));
        }
        if let Some((n, sp)) = count_between(text, "Preemptions: ", "") {
            out.fact("vllm.preemptions", n, Some(sp));
            // V1 (0.14+) prints the preemptions of the last interval. Ten or more while the
            // cache is full is a preemption storm.
            if n >= 10.0 && u >= 0.9 {
                let mut f = Failure::new("kv-exhausted", id::VLLM, Domain::Device);
                f.fact("vllm.preemptions", n, Some(sp));
                f.fact("vllm.kv_usage", u, Some(usage_span));
                out.failure(f);
            }
        }
        true
    }

    /// Lines that carry numbers but are not failures, and phase markers.
    fn accounting(&self, line: &Line<'_>, out: &mut Emit) {
        let text = line.text;
        let mut seen = true;
        if let Some(c) = WEIGHTS.captures(text) {
            gib_fact(out, &c, "w", "model.weights_bytes");
            out.phase(PhaseMark::EngineStartup);
        } else if text.contains("Memory profiling results") {
            for c in PROFILE_PAIR.captures_iter(text) {
                let name = match &c["k"] {
                    "total_gpu_memory" => "vllm.gpu_total_bytes",
                    "initial_memory_usage" => "vllm.initial_usage_bytes",
                    "peak_torch_memory" => "vllm.torch_peak_bytes",
                    "non_torch_memory" => "vllm.non_torch_bytes",
                    "kv_cache_size" => "vllm.kv_cache_bytes",
                    "gpu_memory_utilization" => {
                        num_fact(out, &c, "v", "vllm.gpu_memory_utilization");
                        continue;
                    }
                    _ => continue,
                };
                gib_fact(out, &c, "v", name);
            }
            out.phase(PhaseMark::EngineStartup);
        } else if let Some(c) = PROFILE_BUDGET.captures(text) {
            gib_fact(out, &c, "total", "vllm.gpu_total_bytes");
            num_fact(out, &c, "util", "vllm.gpu_memory_utilization");
            gib_fact(out, &c, "budget", "vllm.budget_bytes");
            out.phase(PhaseMark::EngineStartup);
        } else if let Some(c) = PROFILE_SPLIT.captures(text) {
            gib_fact(out, &c, "w", "model.weights_bytes");
            gib_fact(out, &c, "nt", "vllm.non_torch_bytes");
            gib_fact(out, &c, "act", "vllm.activation_peak_bytes");
            gib_fact(out, &c, "kv", "vllm.kv_cache_bytes");
            out.phase(PhaseMark::EngineStartup);
        } else if let Some(c) = PROFILE_V1.captures(text) {
            gib_fact(out, &c, "nkv", "vllm.non_kv_bytes");
            gib_fact(out, &c, "act", "vllm.activation_peak_bytes");
            gib_fact(out, &c, "nt", "vllm.non_torch_bytes");
            gib_fact(out, &c, "w", "model.weights_bytes");
            out.phase(PhaseMark::EngineStartup);
        } else if let Some(c) = AVAILABLE_KV.captures(text) {
            gib_fact(out, &c, "kv", "vllm.kv_cache_bytes");
            out.phase(PhaseMark::EngineStartup);
        } else if let Some(c) = EXPLICIT_KV.captures(text) {
            gib_fact(out, &c, "free", "vllm.startup_free_bytes");
            gib_fact(out, &c, "kv", "vllm.kv_cache_bytes");
            gib_fact(out, &c, "kv", "vllm.kv_cache_memory_bytes");
            out.phase(PhaseMark::EngineStartup);
        } else if let Some(c) = REQUESTED.captures(text) {
            gib_fact(out, &c, "free", "vllm.startup_free_bytes");
            num_fact(out, &c, "util", "vllm.gpu_memory_utilization");
            gib_fact(out, &c, "req", "vllm.budget_bytes");
        } else if let Some(c) = BLOCKS.captures(text) {
            num_fact(out, &c, "n", "vllm.gpu_blocks");
            out.phase(PhaseMark::EngineStartup);
        } else if KV_TOKENS.is_match(text) || CONCURRENCY.is_match(text) {
            if let Some(c) = KV_TOKENS.captures(text) {
                num_fact(out, &c, "tok", "vllm.kv_cache_tokens");
            }
            if let Some(c) = CONCURRENCY.captures(text) {
                num_fact(out, &c, "len", "vllm.max_model_len");
                num_fact(out, &c, "c", "vllm.max_concurrency");
            }
            out.phase(PhaseMark::EngineStartup);
        } else if let Some(c) = GRAPH_DONE.captures(text) {
            if c.name("g").is_some() {
                gib_fact(out, &c, "g", "vllm.cuda_graph_bytes");
            }
            // V1 warms the sampler up after capturing graphs.
            out.phase(PhaseMark::Warmup);
        } else if let Some(c) = GRAPH_POOL.captures(text) {
            gib_fact(out, &c, "g", "vllm.cuda_graph_bytes");
        } else if GRAPH_START.is_match(text) {
            out.phase(PhaseMark::CudaGraphCapture);
        } else if text.contains("Starting to load model")
            || text.contains("Loading safetensors checkpoint shards")
        {
            out.phase(PhaseMark::ModelLoad);
        } else if text.contains("init engine (profile, create kv cache")
            || text.contains("Starting vLLM API server")
            || text.contains("Processed prompts")
        {
            out.phase(PhaseMark::Serving);
        } else if text.contains("Finished server process") || text.contains("Shutting down") {
            // Uvicorn's own lines as a server stops (Ctrl-C, a restart).
            out.fact("engine.server_stopped", true, None);
            return;
        } else if text.contains("Application startup complete")
            || text.contains("Uvicorn running on")
        {
            // Uvicorn prints these for every Python server (once, at start: a per-request
            // line would put every request of a busy server through the recognisers); they
            // mark serving but say nothing about which engine runs.
            out.phase(PhaseMark::Serving);
            return;
        } else if (text.contains("--max-model-len")
            || text.contains("--max_model_len")
            || text.contains("--gpu-memory-utilization"))
            && super::serving::is_argument_item(text)
        {
            // A YAML / list item of a command line (`- --max-model-len=8192`).
            seen = read_flags(line, KEYS, out) > 0;
        } else {
            seen = false;
        }
        if seen {
            out.engine(id::VLLM);
        }
    }
}

/// Reads a start line's configuration: the config dump, `non-default args`, the argparse
/// namespace, or a command line.
fn read_config(line: &Line<'_>, out: &mut Emit) {
    let text = line.text;
    if let Some(c) = ENGINE_INIT.captures(text) {
        // Before 0.4 the line carried no version.
        if let Some(m) = c.name("ver") {
            out.fact("vllm.version", m.as_str(), Some((m.start(), m.end())));
        }
        out.fact(
            "vllm.v1",
            c.name("gen").is_some_and(|g| g.as_str() == "V1"),
            None,
        );
    } else if let Some(c) = API_VERSION.captures(text) {
        let m = c.name("ver").expect("group ver");
        out.fact("vllm.version", m.as_str(), Some((m.start(), m.end())));
    }
    if is_command(text) {
        read_flags(line, KEYS, out);
        if let Some(m) = SERVE_MODEL.captures(text).and_then(|c| c.name("m")) {
            if !m.as_str().starts_with('-') {
                out.fact("model.name", m.as_str(), Some((m.start(), m.end())));
            }
        }
    } else {
        read_key_values(text, KEYS, out);
    }
}

fn budget_check(c: &regex::Captures<'_>, joined: &str, used: u32, out: &mut Emit) {
    let mut f = Failure::new("engine-budget", id::VLLM, Domain::Device);
    let tight = used == 0;
    let sp = |g: &str| c.name(g).filter(|_| tight).map(|m| (m.start(), m.end()));
    for (g, name) in [
        ("free", "vllm.startup_free_bytes"),
        ("total", "vllm.gpu_total_bytes"),
        ("req", "vllm.budget_bytes"),
    ] {
        if let Some(v) = c.name(g).and_then(|m| gib(m.as_str())) {
            f.fact(name, v, sp(g));
        }
    }
    if let Some(v) = c.name("util").and_then(|m| m.as_str().parse::<f64>().ok()) {
        f.fact("vllm.gpu_memory_utilization", v, sp("util"));
    }
    if let Some(d) = c
        .name("dev")
        .and_then(|d| d.as_str().rsplit(':').next())
        .and_then(|d| d.parse::<u32>().ok())
    {
        f.device = Some(d);
        f.fact("oom.device", d, None);
    }
    if used > 0 {
        f.text = Some(joined.to_string());
    }
    out.failure(f);
}

fn startup_summary(joined: &str, out: &mut Emit) {
    // Spans are only meaningful on the line itself; the summary is one line in practice.
    let sp = |m: Option<regex::Match<'_>>| m.map(|m| (m.start(), m.end()));
    if let Some(c) = STARTUP_SUMMARY.captures(joined) {
        for (g, name) in [
            ("free", "vllm.startup_free_bytes"),
            ("total", "vllm.gpu_total_bytes"),
            ("req", "vllm.budget_bytes"),
        ] {
            if let Some(v) = c.name(g).and_then(|m| gib(m.as_str())) {
                out.fact(name, v, sp(c.name(g)));
            }
        }
        if let Some(v) = c.name("util").and_then(|m| m.as_str().parse::<f64>().ok()) {
            out.fact("vllm.gpu_memory_utilization", v, sp(c.name("util")));
        }
    }
    if let Some(c) = SUMMARY_USAGE.captures(joined) {
        gib_fact(out, &c, "w", "model.weights_bytes");
        gib_fact(out, &c, "act", "vllm.activation_peak_bytes");
        gib_fact(out, &c, "nt", "vllm.non_torch_bytes");
        gib_fact(out, &c, "g", "vllm.cuda_graph_bytes");
    } else if let Some(c) = SUMMARY_USAGE_B.captures(joined) {
        gib_fact(out, &c, "act", "vllm.activation_peak_bytes");
        gib_fact(out, &c, "g", "vllm.cuda_graph_bytes");
    }
    if let Some(m) = SUMMARY_FIT.captures(joined).and_then(|c| c.name("b")) {
        if let Ok(b) = m.as_str().parse::<f64>() {
            out.fact("vllm.kv_cache_memory_fit_bytes", b, sp(Some(m)));
        }
    }
    if let Some(c) = SUMMARY_KV.captures(joined) {
        gib_fact(out, &c, "kv", "vllm.kv_cache_bytes");
    }
    out.phase(PhaseMark::EngineStartup);
}

fn kv_capacity_v1(c: &regex::Captures<'_>, joined: &str, used: u32, out: &mut Emit) {
    let mut f = Failure::new("kv-capacity", id::VLLM, Domain::Device);
    let tight = used == 0;
    let sp = |g: &str| c.name(g).filter(|_| tight).map(|m| (m.start(), m.end()));
    if let Some(v) = c.name("len").and_then(|m| parse_count(m.as_str())) {
        f.fact("vllm.max_model_len", v, sp("len"));
    }
    if let Some(v) = c.name("need").and_then(|m| gib(m.as_str())) {
        f.fact("vllm.kv_needed_bytes", v, sp("need"));
        // What the engine needed and could not get: distinguishes this failure from the
        // same error under another configuration after a restart.
        f.fact("oom.requested_bytes", v, sp("need"));
    }
    if let Some(v) = c.name("avail").and_then(|m| gib_signed(m.as_str())) {
        f.fact("vllm.kv_cache_bytes", v, sp("avail"));
    }
    if let Some(v) = c.name("est").and_then(|m| parse_count(m.as_str())) {
        f.fact("vllm.estimated_max_model_len", v, sp("est"));
    }
    if used > 0 {
        f.text = Some(joined.to_string());
    }
    out.failure(f);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::evidence::Value;
    use crate::ingest::log::engines::Observation;

    const GIB: f64 = 1073741824.0;

    fn run(raw: &str) -> Emit {
        crate::ingest::log::engines::run_line(&Vllm, raw)
    }

    fn facts(out: &Emit) -> Vec<(&'static str, Value)> {
        out.records
            .iter()
            .filter_map(|r| match &r.obs {
                Observation::Fact { name, value } => Some((*name, value.clone())),
                _ => None,
            })
            .collect()
    }

    fn failure(out: &Emit) -> Option<Failure> {
        crate::ingest::log::engines::emitted_failure(out)
    }

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() <= b.abs() * 0.0001 + 1.0)
    }

    fn num_of(pairs: &[(&'static str, Value)], name: &str) -> Option<f64> {
        pairs
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| v.as_f64())
    }

    /// Every accounting wording (id, line, fact, value).
    #[test]
    fn accounting_lines_to_exact_values() {
        let rows: &[(&str, &str, &str, f64)] = &[
            (
                "V-W1",
                "INFO 04-28 04:07:49 model_runner.py:146] Loading model weights took 14.9888 GB",
                "model.weights_bytes",
                14.9888 * GIB,
            ),
            (
                "V-W2",
                "INFO 02-11 10:00:01 [gpu_model_runner.py:1329] Model loading took 15.2683 GiB and 4.612345 seconds",
                "model.weights_bytes",
                15.2683 * GIB,
            ),
            (
                "V-W3",
                "(EngineCore_DP0 pid=88) INFO 11-02 09:10:11 [gpu_model_runner.py:2653] Model loading took 51.1 GiB memory and 33.123456 seconds",
                "model.weights_bytes",
                51.1 * GIB,
            ),
            (
                "V-P1",
                "INFO 10-01 11:22:33 worker.py:255] Memory profiling results: total_gpu_memory=23.58GiB initial_memory_usage=15.34GiB peak_torch_memory=17.06GiB memory_usage_post_profile=15.35Gib non_torch_memory=0.35GiB kv_cache_size=3.81GiB gpu_memory_utilization=0.90",
                "vllm.kv_cache_bytes",
                3.81 * GIB,
            ),
            (
                "V-P1 total",
                "Memory profiling results: total_gpu_memory=23.58GiB initial_memory_usage=15.34GiB peak_torch_memory=17.06GiB memory_usage_post_profile=15.35Gib non_torch_memory=0.35GiB kv_cache_size=3.81GiB gpu_memory_utilization=0.90",
                "vllm.gpu_total_bytes",
                23.58 * GIB,
            ),
            (
                "V-P1 util",
                "Memory profiling results: total_gpu_memory=23.58GiB initial_memory_usage=15.34GiB peak_torch_memory=17.06GiB memory_usage_post_profile=15.35Gib non_torch_memory=0.35GiB kv_cache_size=3.81GiB gpu_memory_utilization=0.90",
                "vllm.gpu_memory_utilization",
                0.90,
            ),
            (
                "V-P2 budget",
                "INFO 01-12 08:00:00 worker.py:262] the current vLLM instance can use total_gpu_memory (79.15GiB) x gpu_memory_utilization (0.90) = 71.24GiB",
                "vllm.budget_bytes",
                71.24 * GIB,
            ),
            (
                "V-P2 split",
                "INFO 01-12 08:00:00 worker.py:262] model weights take 14.99GiB; non_torch_memory takes 0.28GiB; PyTorch activation peak memory takes 4.35GiB; the rest of the memory reserved for KV Cache is 51.62GiB.",
                "vllm.kv_cache_bytes",
                51.62 * GIB,
            ),
            (
                "V-P2 act",
                "model weights take 14.99GiB; non_torch_memory takes 0.28GiB; PyTorch activation peak memory takes 4.35GiB; the rest of the memory reserved for KV Cache is 51.62GiB.",
                "vllm.activation_peak_bytes",
                4.35 * GIB,
            ),
            (
                "V-P3",
                "Memory profiling takes 5.21 seconds. Total non KV cache memory: 16.19GiB; torch peak memory increase: 1.30GiB; non-torch forward increase memory: 0.09GiB; weights memory: 14.80GiB.",
                "vllm.non_kv_bytes",
                16.19 * GIB,
            ),
            (
                "V-P3b",
                "Memory profiling takes 5.21 seconds. Total non KV cache memory: 16.2GiB; torch peak memory increase: 1.3GiB; total consumed (from mem_get_info): 14.9GiB; weights memory: 14.8GiB.",
                "model.weights_bytes",
                14.8 * GIB,
            ),
            (
                "V-P4 0.10",
                "(EngineCore_0 pid=5) INFO 08-22 20:52:36 [gpu_worker.py:276] Available KV cache memory: 52.34 GiB",
                "vllm.kv_cache_bytes",
                52.34 * GIB,
            ),
            (
                "V-P4 0.14",
                "Available KV cache memory: 0.0 GiB",
                "vllm.kv_cache_bytes",
                0.0,
            ),
            (
                "V-P4 negative",
                "Available KV cache memory: -1.25 GiB",
                "vllm.kv_cache_bytes",
                -1.25 * GIB,
            ),
            (
                "V-P5",
                "Initial free memory 70.5 GiB, reserved 10.00GiB memory for KV Cache as specified by kv_cache_memory_bytes config and skipped memory profiling. This does does not respect the gpu_memory_utilization config.",
                "vllm.kv_cache_bytes",
                10.0 * GIB,
            ),
            (
                "V-P6",
                "Free memory on device (78.6/79.19 GiB) on startup. Desired GPU memory utilization is (0.9, 71.27 GiB). Actual usage is 15.0 GiB for weight, 1.4 GiB for peak activation, 0.1 GiB for non-torch memory, and 0.5 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with `--kv-cache-memory=58987413094` (54.94 GiB) to fit into requested memory, or `--kv-cache-memory=66000000000` (61.47 GiB) to fully utilize gpu memory. Current kv cache memory in use is 54.2 GiB.",
                "vllm.kv_cache_memory_fit_bytes",
                58987413094.0,
            ),
            (
                "V-P6 free",
                "Free memory on device (78.6/79.19 GiB) on startup. Desired GPU memory utilization is (0.9, 71.27 GiB). Actual usage is 15.0 GiB for weight, 1.4 GiB for peak activation, 0.1 GiB for non-torch memory, and 0.5 GiB for CUDAGraph memory.",
                "vllm.startup_free_bytes",
                78.6 * GIB,
            ),
            (
                "V-P6b",
                "Free memory on device cuda:0 (78.6/79.19 GiB) on startup. Desired GPU memory utilization is (0.9, 71.27 GiB). Actual usage is 15.1 GiB for consumed memory (weights + non-torch), 1.4 GiB for peak activation, and 0.5 GiB for CUDAGraph memory.",
                "vllm.cuda_graph_bytes",
                0.5 * GIB,
            ),
            (
                "V-P7",
                "Initial free memory: 78.60 GiB; Requested memory: 0.90 (util), 71.27 GiB",
                "vllm.startup_free_bytes",
                78.6 * GIB,
            ),
            (
                "V-K0",
                "INFO 05-01 10:00:00 gpu_executor.py:121] # GPU blocks: 1952, # CPU blocks: 2048",
                "vllm.gpu_blocks",
                1952.0,
            ),
            (
                "V-K0b",
                "INFO 05-01 10:00:00 executor_base.py:110] # cuda blocks: 27,851, # CPU blocks: 2,048",
                "vllm.gpu_blocks",
                27851.0,
            ),
            (
                "V-K0 pasted",
                "GPU blocks: 1478, # CPU blocks: 2048",
                "vllm.gpu_blocks",
                1478.0,
            ),
            (
                "V-K4",
                "(EngineCore_DP0 pid=9) INFO 08-22 20:52:37 [kv_cache_utils.py:849] GPU KV cache size: 44,560 tokens",
                "vllm.kv_cache_tokens",
                44560.0,
            ),
            (
                "V-K5 V0",
                "INFO 05-01 10:00:00 executor_base.py:115] Maximum concurrency for 32768 tokens per request: 5.21x",
                "vllm.max_concurrency",
                5.21,
            ),
            (
                "V-K5 V1",
                "Maximum concurrency for 131,072 tokens per request: 0.34x",
                "vllm.max_model_len",
                131072.0,
            ),
            (
                "V-K6",
                "GPU KV cache size: 1,793,232 tokens, Maximum concurrency for 32,768 tokens per request: 54.73x",
                "vllm.kv_cache_tokens",
                1793232.0,
            ),
            (
                "V-G2",
                "INFO 05-01 10:00:00 model_runner.py:1530] Graph capturing finished in 12 secs, took 0.54 GiB",
                "vllm.cuda_graph_bytes",
                0.54 * GIB,
            ),
            (
                "V-G4",
                "CUDA graph pool memory: 1.21 GiB (actual), 1.1 GiB (estimated), difference: 0.11 GiB (9.1%).",
                "vllm.cuda_graph_bytes",
                1.21 * GIB,
            ),
            (
                "V-G5",
                "CUDA graph memory profiling is enabled (default since v0.21.0). The current --gpu-memory-utilization=0.9000 is equivalent to --gpu-memory-utilization=0.8812 without CUDA graph memory profiling.",
                "vllm.gpu_memory_utilization",
                0.9,
            ),
            (
                "V-R1",
                "WARNING 05-01 10:00:00 scheduler.py:1089] Sequence group cmpl-9 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption=51",
                "vllm.preemptions",
                51.0,
            ),
            (
                "V-R3",
                "INFO 05-01 10:00:00 metrics.py:351] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 512.3 tokens/s, Running: 256 reqs, Swapped: 0 reqs, Pending: 31 reqs, GPU KV cache usage: 99.8%, CPU KV cache usage: 0.0%.",
                "vllm.kv_usage",
                0.998,
            ),
            (
                "V-R4",
                "Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: 300.0 tokens/s, Running: 64 reqs, Waiting: 12 reqs, GPU KV cache usage: 97.1%, Prefix cache hit rate: 3.2%",
                "vllm.waiting_requests",
                12.0,
            ),
            (
                "V-R5",
                "(APIServer pid=1) INFO 03-01 10:00:00 [loggers.py:127] Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: 300.0 tokens/s, Running: 64 reqs, Waiting: 12 reqs, Preemptions: 3, GPU KV cache usage: 80.0%, Prefix cache hit rate: 3.2%",
                "vllm.preemptions",
                3.0,
            ),
        ];
        for (id, line, name, want) in rows {
            let out = run(line);
            let f = facts(&out);
            assert!(
                close(num_of(&f, name), *want),
                "{id}: {name} = {:?}, want {want}",
                num_of(&f, name)
            );
            assert!(
                out.records
                    .iter()
                    .any(|r| matches!(r.obs, Observation::Engine(id::VLLM))),
                "{id}: engine not named"
            );
        }
    }

    /// Every failure wording (id, line, kind, fact, value).
    #[test]
    fn failures_to_exact_values() {
        let rows: &[(&str, &str, &str, &str, f64)] = &[
            (
                "V-K1",
                "[rank0]: ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
                "no-kv-memory",
                "",
                0.0,
            ),
            (
                "V-K1 0.33",
                "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine (this flag also controls CPU memory reservation on the CPU backend, despite its name). See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
                "no-kv-memory",
                "",
                0.0,
            ),
            (
                "V-K2",
                "ValueError: The model's max seq len (29000) is larger than the maximum number of tokens that can be stored in KV cache (23648). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
                "kv-capacity",
                "vllm.kv_cache_tokens",
                23648.0,
            ),
            (
                "V-K3 0.8",
                "ERROR 04-05 01:12:55 [core.py:390] ValueError: To serve at least one request with the models's max seq len (1048576), (24.00 GiB KV cache is needed, which is larger than the available KV cache memory (9.97 GiB). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
                "kv-capacity",
                "vllm.kv_needed_bytes",
                24.0 * GIB,
            ),
            (
                "V-K3 0.10",
                "ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache is needed, which is larger than the available KV cache memory (5.44 GiB). Based on the available memory, the estimated maximum model length is 44560. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
                "kv-capacity",
                "vllm.estimated_max_model_len",
                44560.0,
            ),
            (
                "V-K3 0.26",
                "ValueError: To serve at least one request with the model's max seq len (262144), (32.0 GiB KV cache is needed, which is larger than the available KV cache memory (20.5 GiB). Based on the available memory, the estimated maximum model length is 167,936. Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
                "kv-capacity",
                "vllm.kv_cache_bytes",
                20.5 * GIB,
            ),
            (
                "V-B1 0.10",
                "ValueError: Free memory on device (31.44/47.38 GiB) on startup is less than desired GPU memory utilization (0.95, 45.01 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
                "engine-budget",
                "vllm.startup_free_bytes",
                31.44 * GIB,
            ),
            (
                "V-B1 0.14",
                "(Worker pid=148) ERROR 07-01 02:36:18 [multiproc_executor.py:870] ValueError: Free memory on device cuda:0 (22.35/23.56 GiB) on startup is less than desired GPU memory utilization (0.95, 22.38 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
                "engine-budget",
                "vllm.gpu_total_bytes",
                23.56 * GIB,
            ),
            (
                "V-R6",
                "RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.",
                "device-oom",
                "vllm.sampler_warmup_requests",
                1024.0,
            ),
            (
                "V-R6 pooler",
                "RuntimeError: CUDA out of memory occurred when warming up pooler (task='embed') with 256 dummy requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.",
                "device-oom",
                "vllm.sampler_warmup_requests",
                256.0,
            ),
            (
                "V-W4",
                "ERROR 01-01 00:00:00 [gpu_model_runner.py:3000] Failed to load model - not enough GPU memory. Try lowering --gpu-memory-utilization to free memory for weights, increasing --tensor-parallel-size, or using --quantization. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more tips. (original error: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity of 23.52 GiB of which 1.02 GiB is free.)",
                "device-oom",
                "",
                0.0,
            ),
        ];
        for (id, line, kind, name, want) in rows {
            let out = run(line);
            let f = failure(&out).unwrap_or_else(|| panic!("{id}: no failure"));
            assert_eq!(f.kind, *kind, "{id}");
            assert_eq!(f.engine, id::VLLM, "{id}");
            if !name.is_empty() {
                let got = f.get(name).and_then(Value::as_f64);
                assert!(close(got, *want), "{id}: {name} = {got:?}, want {want}");
            }
        }
        // V-W4 carries the embedded PyTorch numbers itself.
        let out = run(rows[10].1);
        let f = failure(&out).unwrap();
        assert!(close(
            f.get("oom.requested_bytes").and_then(Value::as_f64),
            1.96 * GIB
        ));
        assert!(close(
            f.get("oom.total_bytes").and_then(Value::as_f64),
            23.52 * GIB
        ));
        // 0.33: the budget check after excluding weights held by an external process.
        let out = run(
            "ValueError: Free memory on device cuda:0 (20.10/79.19 GiB) on startup is less than the engine's budget after excluding external process's weights (0.9, 55.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
        );
        let f = failure(&out).unwrap();
        assert_eq!(f.kind, "engine-budget");
        assert!(close(
            f.get("vllm.budget_bytes").and_then(Value::as_f64),
            55.27 * GIB
        ));
        let out = run(
            "ValueError: Free memory on device cuda:3 (13.33/15.47 GiB) on startup is less than desired GPU memory utilization (0.9, 13.92 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
        );
        assert_eq!(failure(&out).unwrap().device, Some(3));
    }

    #[test]
    fn configuration_lines() {
        let out = run(
            "INFO 11-21 10:00:00 llm_engine.py:237] Initializing an LLM engine (v0.5.4) with config: model='/models/llama-3-1-70b', speculative_config=None, tokenizer='/models/llama-3-1-70b', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, rope_scaling=None, dtype=torch.float16, max_seq_len=131072, download_dir=None, load_format=LoadFormat.AUTO, tensor_parallel_size=2, pipeline_parallel_size=1, disable_custom_all_reduce=False, quantization=None, enforce_eager=False, kv_cache_dtype=auto, max_seq_len_to_capture=8192, device_config=cuda, seed=0)",
        );
        let f = facts(&out);
        assert_eq!(num_of(&f, "vllm.max_model_len"), Some(131072.0));
        assert_eq!(num_of(&f, "vllm.tensor_parallel_size"), Some(2.0));
        assert!(f.contains(&("vllm.enforce_eager", Value::Bool(false))));
        assert!(f.contains(&("vllm.kv_cache_dtype", Value::str("auto"))));
        assert!(f.contains(&("vllm.version", Value::str("0.5.4"))));
        assert!(f.contains(&("model.dtype", Value::str("float16"))));
        assert!(f.contains(&("model.name", Value::str("/models/llama-3-1-70b"))));
        assert!(
            out.records
                .iter()
                .any(|r| matches!(r.obs, Observation::RunStart))
        );

        // Before 0.4: no version in the line.
        let out = run(
            "INFO 01-25 12:00:00 llm_engine.py:72] Initializing an LLM engine with config: model='lmsys/vicuna-7b-v1.5', tokenizer='lmsys/vicuna-7b-v1.5', tokenizer_mode=auto, trust_remote_code=False, dtype=torch.float16, max_seq_len=4096, download_dir=None, load_format=auto, tensor_parallel_size=1, quantization=None, enforce_eager=False, seed=0)",
        );
        let f = facts(&out);
        assert_eq!(num_of(&f, "vllm.max_model_len"), Some(4096.0));
        assert!(
            out.records
                .iter()
                .any(|r| matches!(r.obs, Observation::RunStart))
        );

        let out = run(
            "(EngineCore_DP0 pid=31) INFO 08-22 20:52:30 [core.py:74] Initializing a V1 LLM engine (v0.10.1.1) with config: model='Qwen/Qwen3-8B', speculative_config=None, tokenizer='Qwen/Qwen3-8B', dtype=torch.bfloat16, max_seq_len=40960, tensor_parallel_size=1, pipeline_parallel_size=1, quantization=fp8, enforce_eager=True, kv_cache_dtype=fp8, compilation_config={\"level\":3,\"max_capture_size\":512}",
        );
        let f = facts(&out);
        assert!(f.contains(&("vllm.v1", Value::Bool(true))));
        assert!(f.contains(&("vllm.quantization", Value::str("fp8"))));
        assert!(f.contains(&("vllm.enforce_eager", Value::Bool(true))));
        assert_eq!(num_of(&f, "vllm.max_cudagraph_capture_size"), Some(512.0));

        let out = run(
            "(APIServer pid=1) INFO 09-01 12:00:00 [utils.py:326] non-default args: {'model_tag': 'google/gemma-3-27b-it', 'max_model_len': 65536, 'gpu_memory_utilization': 0.92, 'max_num_seqs': 64, 'max_num_batched_tokens': 8192, 'tensor_parallel_size': 2}",
        );
        let f = facts(&out);
        assert_eq!(num_of(&f, "vllm.max_num_seqs"), Some(64.0));
        assert_eq!(num_of(&f, "vllm.max_num_batched_tokens"), Some(8192.0));
        assert_eq!(num_of(&f, "vllm.gpu_memory_utilization"), Some(0.92));
        assert!(f.contains(&("model.name", Value::str("google/gemma-3-27b-it"))));

        let out = run(
            "$ vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 131072 --gpu-memory-utilization 0.95 -tp 2 --kv-cache-dtype fp8_e5m2 --enforce-eager",
        );
        let f = facts(&out);
        assert_eq!(num_of(&f, "vllm.max_model_len"), Some(131072.0));
        assert_eq!(num_of(&f, "vllm.tensor_parallel_size"), Some(2.0));
        assert!(f.contains(&("vllm.enforce_eager", Value::Bool(true))));
        assert!(f.contains(&("model.name", Value::str("meta-llama/Llama-3.1-8B-Instruct"))));

        let out = run(
            "python3 -m vllm.entrypoints.openai.api_server --port=8081 --model /mnt/models/gemma-2-27b-it --dtype bfloat16 --tensor-parallel-size 2 --max-model-len 4096 --max-num-seqs 128",
        );
        let f = facts(&out);
        assert_eq!(num_of(&f, "vllm.max_num_seqs"), Some(128.0));
        assert!(f.contains(&("model.name", Value::str("/mnt/models/gemma-2-27b-it"))));

        // The capture hint names enforce_eager but configures nothing.
        let out = run(
            "INFO 05-01 10:00:00 model_runner.py:1300] Capturing cudagraphs for decoding. This may lead to unexpected consequences if the model is not static. To run the model in eager mode, set 'enforce_eager=True' or use '--enforce-eager' in the CLI. If out-of-memory error occurs during cudagraph capture, consider decreasing `gpu_memory_utilization` or switching to eager mode.",
        );
        assert!(facts(&out).is_empty());
        assert!(
            out.records
                .iter()
                .any(|r| matches!(r.obs, Observation::Phase(PhaseMark::CudaGraphCapture)))
        );
    }

    #[test]
    fn phase_markers() {
        for (line, want) in [
            (
                "(EngineCore_0 pid=5) Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  45%|████▌     | 30/67 [00:02<00:02, 14.52it/s]",
                PhaseMark::CudaGraphCapture,
            ),
            (
                "Capturing CUDA graph shapes:   0%|          | 0/35 [00:00<?, ?it/s]",
                PhaseMark::CudaGraphCapture,
            ),
            (
                "INFO 05-01 10:00:00 model_runner.py:1530] Graph capturing finished in 12 secs, took 0.54 GiB",
                PhaseMark::Warmup,
            ),
            (
                "(EngineCore_0 pid=5) INFO 08-22 20:52:20 [gpu_model_runner.py:1953] Starting to load model m...",
                PhaseMark::ModelLoad,
            ),
            (
                "(EngineCore_0 pid=5) INFO 08-22 20:53:20 [core.py:214] init engine (profile, create kv cache, warmup model) took 61.32 seconds",
                PhaseMark::Serving,
            ),
            (
                "INFO 05-01 10:00:00 metrics.py:351] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 512.3 tokens/s, Running: 6 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 9.8%, CPU KV cache usage: 0.0%.",
                PhaseMark::Serving,
            ),
        ] {
            let out = run(line);
            assert!(
                out.records
                    .iter()
                    .any(|r| matches!(r.obs, Observation::Phase(p) if p == want)),
                "{line}"
            );
        }
    }

    #[test]
    fn look_alikes_are_not_failures() {
        for line in [
            "WARNING 05-01 10:00:00 scheduler.py:1089] Sequence group 1 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption=1",
            "ERROR 05-01 10:00:00 serving_chat.py:100] This model's maximum context length is 8192 tokens. However, you requested 9000 tokens (8000 in the messages, 1000 in the completion).",
            "Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 30.0 tokens/s, Running: 4 reqs, Waiting: 0 reqs, Preemptions: 12, GPU KV cache usage: 40.0%, Prefix cache hit rate: 0.0%",
            "INFO 05-01 10:00:00 [gpu_worker.py:100] Free memory on device (78.6/79.19 GiB) on startup. Desired GPU memory utilization is (0.9, 71.27 GiB).",
            // V-P8: another process released memory during profiling; no allocation failed.
            "AssertionError: Error in memory profiling. Initial free memory 70.1 GiB, current free memory 72.3 GiB. This happens when other processes sharing the same container release GPU memory while vLLM is profiling during initialization. To fix this, ensure consistent GPU memory allocation or isolate vLLM in its own container.",
            // V-R2: one request rejected, the engine keeps serving.
            "WARNING 05-01 10:00:00 scheduler.py:700] Input prompt (5000 tokens) + lookahead slots (0) is too long and exceeds the capacity of block_manager",
        ] {
            assert!(failure(&run(line)).is_none(), "{line}");
        }
    }
}
