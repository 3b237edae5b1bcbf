//! Ollama: the server's own Go slog lines (its memory estimate in every era, the scheduler's
//! decisions, its errors) around the llama.cpp runner output that the llama.cpp recogniser
//! reads.
//!
//! Sources: `ENGINE-MESSAGES.md` §4. The estimate line moved from `msg="offload to gpu"`
//! (0.1.35) to `msg="offload to cuda"` (0.1.45) to `msg=offload library=cuda` (0.5.12, the
//! estimate's groups inlined) to per-device `msg="model weights" device=CUDA0 size="4.1 GiB"`,
//! `msg="kv cache"`, `msg="compute graph"`, `msg="total memory"` (0.11.5+); all are read into
//! the same facts. Sizes are `HumanBytes2` (`5.8 GiB`) or raw bytes.
//!
//! Ollama's KV cache holds `num_ctx × OLLAMA_NUM_PARALLEL` tokens; the runner's command line
//! (`--ctx-size 8192 --parallel 4`) shows both, the server config shows the environment.

use std::sync::LazyLock;

use regex::Regex;

use super::llamacpp::command_line;
use super::local::{human_bytes, slog_pairs, span};
use super::{Domain, Emit, Failure, Line, PhaseMark, Recognizer, id};
use crate::facts::units::SiBase;
use crate::ingest::log::pattern::static_regex;

static SYSTEM_MEMORY_ERR: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"model requires more system memory \((?P<req>[^)]+)\) than is available \((?P<avail>[^)]+)\)",
    )
});
static RUNNER_TERMINATED: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r#"(?:llama runner process (?:has )?terminated: |llama runner terminated"?\s+error="?|an error was encountered while running the model: |error:? (?:starting|loading) the model: )(?P<err>[^"}]*)"#,
    )
});
static LAYOUT_NUM_GPU: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"memory layout cannot be allocated with num_gpu = (?P<n>\d+)"));
/// 0.12+: `msg=load request="{Operation:fit ... Parallel:1 BatchSize:512 FlashAttention:Enabled
/// KvSize:8192 KvCacheType: NumThreads:8 GPULayers:49[...] ... UseMmap:false}"`.
static LOAD_REQUEST: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"\b(?P<k>Parallel|FlashAttention|KvSize|KvCacheType|GPULayers|UseMmap):(?P<v>[\w.]*)",
    )
});
static VERSION: LazyLock<Regex> = LazyLock::new(|| static_regex(r"\(version (?P<v>[\w.+-]+)\)"));
static ENV_MAP: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"(?P<k>OLLAMA_[A-Z_]+):(?P<v>[^\s\]]*)"));
/// The client's view of a runner that died mid-request: the CLI's
/// `Error: Post "http://127.0.0.1:11434/api/generate": EOF` (also `/api/chat`, `/api/embed`),
/// the server's `an error was encountered while running the model: unexpected EOF`.
static CONNECTION_LOST: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r#"Post "https?://[^"\s]*/api/(?:generate|chat|embed|embeddings)":\s*(?:unexpected )?EOF\b"#,
    )
});
/// Memory words in a runner error that make it an OOM.
/// `ollama ps`'s table: `NAME  ID  SIZE  PROCESSOR  [CONTEXT]  UNTIL`, then a row per model
/// the server holds (`mistral-nemo:12b  4f8b1a53a2c0  11 GB  100% GPU  4 minutes from now`;
/// a split model `48%/52% CPU/GPU`).
static PS_HEADER: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"^NAME\s+ID\s+SIZE\s+PROCESSOR\s+(?:CONTEXT\s+)?UNTIL\b"));
static PS_ROW: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"^\S+\s+[0-9a-f]{12}\s+(?P<size>\d+(?:\.\d+)?\s*[KMGT]?B)\s+(?:100% (?P<whole>GPU|CPU)|(?P<cpu>\d+)%/(?P<gpu>\d+)% CPU/GPU)\b",
    )
});
static OOM_WORDS: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?i)out of memory|out of device memory|malloc failed|failed to allocate|unable to allocate|allocation failed|not enough memory|insufficient memory|erroroutofdevicememory|erroroutofmemory",
    )
});

/// The Ollama recogniser.
pub struct Ollama;

impl Recognizer for Ollama {
    fn engine(&self) -> &'static str {
        id::OLLAMA
    }

    fn anchors(&self) -> &'static [&'static str] {
        &[
            "msg=",
            "requires more system memory",
            "llama runner process",
            "llama runner terminated",
            "while running the model",
            "memory layout cannot be allocated",
            "insufficient memory - required allocations",
            "OLLAMA_",
            "ollama runner",
            "ollama_llama_server",
            "KvSize:",
            // `ollama ps`'s header.
            "PROCESSOR",
            "\": EOF",
            // The CLI's `Error: Post ".../api/chat": unexpected EOF` when the runner died.
            "\": unexpected EOF",
        ]
    }

    fn recognize(&self, line: &Line<'_>, out: &mut Emit) {
        let text = line.text;
        if PS_HEADER.is_match(text.trim()) {
            ps_table(line, out);
            return;
        }
        // Errors can arrive outside slog lines too (the CLI's `Error: ...`, JSON API bodies).
        if let Some(c) = SYSTEM_MEMORY_ERR.captures(text) {
            out.engine(id::OLLAMA);
            let mut f = Failure::new("host-oom", id::OLLAMA, Domain::Host);
            f.fact("host.killer", "ollama", None);
            if let Some(m) = c.name("req") {
                if let Some(b) = human_bytes(m.as_str()) {
                    f.fact("ollama.system_required_bytes", b, span(&m));
                }
            }
            if let Some(m) = c.name("avail") {
                if let Some(b) = human_bytes(m.as_str()) {
                    f.fact("ollama.system_available_bytes", b, span(&m));
                }
            }
            // The WARN line before it is the failure; the error restates it.
            f.wrapper = true;
            out.failure(f);
            return;
        }
        if text.contains("model requires more system memory than is currently available")
            && !text.contains("evicting")
        {
            let mut f = Failure::new("host-oom", id::OLLAMA, Domain::Host);
            f.fact("host.killer", "ollama", None);
            f.wrapper = true;
            out.failure(f);
            return;
        }
        if CONNECTION_LOST.is_match(text) {
            connection_lost(line, out);
            return;
        }
        if let Some(c) = RUNNER_TERMINATED.captures(text) {
            out.engine(id::OLLAMA);
            let err = c.name("err").expect("group err");
            let e = err.as_str().trim();
            if matches!(e, "EOF" | "unexpected EOF") {
                connection_lost(line, out);
                return;
            }
            out.fact("ollama.runner_error", e.to_string(), span(&err));
            if e.contains("signal: killed") {
                let mut f = Failure::new("host-oom", id::OLLAMA, Domain::Host);
                // Killed from outside (usually the kernel or a cgroup): `signal`, so the
                // generic `process-killed` advice (written for Python loaders) stays out.
                f.fact("host.killer", "signal", None)
                    .fact("host.signal", "KILL", None)
                    .fact("host.exit_code", 137u32, None)
                    .fact("host.victim_name", "ollama runner", None);
                out.failure(f);
            } else if OOM_WORDS.is_match(e) {
                let kind = runner_kind(e);
                // The buffer the error names says which memory ran out: `CUDA0` the GPU's,
                // `CPU` the RAM holding the layers left off the GPU. 2024's `unable to
                // allocate backend buffer` names none.
                let buft = super::llamacpp::load_error_buffer(e);
                let mut f = if buft.flatten().is_some_and(super::llamacpp::is_host_buft) {
                    super::llamacpp::host_alloc_failure(id::OLLAMA, "host")
                } else {
                    let mut f = Failure::new("device-oom", id::OLLAMA, Domain::Device);
                    f.fact("llamacpp.alloc_kind", kind, None);
                    if kind == "weights" && buft == Some(None) {
                        f.fact("llamacpp.buffer_unnamed", true, None);
                    }
                    f
                };
                f.fact("oom.wording", "ggml", None);
                f.wrapper = true;
                out.failure(f);
            }
            return;
        }
        if let Some(c) = LAYOUT_NUM_GPU.captures(text) {
            out.engine(id::OLLAMA);
            let m = c.name("n").expect("group n");
            let mut f = Failure::new("device-oom", id::OLLAMA, Domain::Device);
            f.fact("llamacpp.alloc_kind", "weights", None).fact(
                "oom.wording",
                "ollama-layout",
                None,
            );
            if let Ok(n) = m.as_str().parse::<u32>() {
                f.fact("ollama.num_gpu", n, span(&m));
            }
            out.failure(f);
            return;
        }
        if text.contains("insufficient memory - required allocations") {
            out.engine(id::OLLAMA);
            let mut f = Failure::new("device-oom", id::OLLAMA, Domain::Device);
            f.fact("oom.wording", "ollama-layout", None);
            out.failure(f);
            return;
        }
        let pairs = slog_pairs(text);
        let Some(msg) = pairs.iter().find(|p| p.key == "msg") else {
            // Before slog, the server config was a plain log line:
            // `2024/11/27 21:43:34 routes.go:1197: INFO server config env="map[...]"`.
            if text.contains("server config") {
                if let Some(env) = pairs.iter().find(|p| p.key == "env") {
                    out.run_start();
                    out.engine(id::OLLAMA);
                    server_config(env.value, env.span.0, out);
                    return;
                }
            }
            // A runner command line outside slog (`ollama runner --model ...`).
            if text.contains("ollama runner") || text.contains("ollama_llama_server") {
                runner_command(text, out);
            }
            return;
        };
        let msg_text = msg.value;
        let get = |k: &str| pairs.iter().find(|p| p.key == k);
        let bytes = |k: &str| get(k).and_then(|p| human_bytes(p.value).map(|b| (b, p.span)));
        let set_bytes = |out: &mut Emit, name: &'static str, k: &str| {
            if let Some((b, sp)) = bytes(k) {
                out.fact(name, b, Some(sp));
            }
        };
        let m = msg_text.to_ascii_lowercase();
        // Only lines that are Ollama's: slog from its own source files or with its messages.
        let ours = m.starts_with("offload")
            || matches!(
                m.as_str(),
                "server config"
                    | "inference compute"
                    | "system memory"
                    | "gpu memory"
                    | "model weights"
                    | "kv cache"
                    | "compute graph"
                    | "total memory"
            )
            || m.starts_with("listening on")
            || m.starts_with("starting llama server")
            || m.starts_with("starting runner")
            || m.starts_with("starting ollama engine")
            || m.starts_with("llama runner started")
            || m.contains("model request too large for system")
            || m.contains("model is too large for system memory")
            || m.contains("memory layout cannot be allocated")
            || m.contains("failed to commit memory")
            || m.contains("quantized kv cache")
            || m.contains("kv cache type not supported")
            || m.contains("flash attention enabled but not supported")
            || m.contains("vram usage didn't recover")
            || m.contains("existing loaded models")
            || m.contains("evicting")
            || m.contains("runtime oom detected")
            || m.contains("reducing automatic context")
            || m.contains("truncating input prompt")
            || m.contains("requested context size too large")
            || m.contains("predicted usage exceeds vram")
            || m.contains("loading model")
            || m == "load"
            || m.starts_with("load request")
            || m.contains("new model will fit");
        if !ours {
            return;
        }
        out.engine(id::OLLAMA);
        if m == "server config" {
            out.run_start();
            out.engine(id::OLLAMA);
            if let Some(env) = get("env") {
                server_config(env.value, env.span.0, out);
            }
            return;
        }
        if m.starts_with("listening on") {
            if let Some(c) = VERSION.captures(msg_text) {
                let v = c.name("v").expect("group v");
                out.fact(
                    "ollama.version",
                    v.as_str().to_string(),
                    Some((msg.span.0 + v.start(), msg.span.0 + v.end())),
                );
            }
            if !line
                .preceding(40)
                .iter()
                .any(|l| l.text.contains("server config"))
            {
                out.run_start();
                out.engine(id::OLLAMA);
            }
            return;
        }
        if m == "inference compute" {
            let here_total = bytes("total").map(|b| b.0 as f64);
            let here_free = bytes("available").map(|b| b.0 as f64);
            let gpu = get("library").is_none_or(|l| !l.value.eq_ignore_ascii_case("cpu"));
            if gpu {
                let prev: Vec<_> = line
                    .preceding(16)
                    .into_iter()
                    .take_while(|l| l.text.contains("inference compute"))
                    .collect();
                let sum = |k: &str, here: Option<f64>| -> Option<f64> {
                    let mut s = here?;
                    for l in &prev {
                        let p = slog_pairs(&l.text);
                        if let Some(v) = p
                            .iter()
                            .find(|x| x.key == k)
                            .and_then(|x| human_bytes(x.value))
                        {
                            s += v as f64;
                        }
                    }
                    Some(s)
                };
                if let Some(t) = sum("total", here_total) {
                    out.fact("ollama.gpu_total_bytes", t, get("total").map(|p| p.span));
                }
                if let Some(fr) = sum("available", here_free) {
                    out.fact(
                        "ollama.gpu_free_bytes",
                        fr,
                        get("available").map(|p| p.span),
                    );
                }
            }
            return;
        }
        if m == "system memory" {
            set_bytes(out, "host.total_ram_bytes", "total");
            set_bytes(out, "host.free_ram_bytes", "free");
            set_bytes(out, "host.swap_free_bytes", "free_swap");
            return;
        }
        if m == "gpu memory" {
            set_bytes(out, "ollama.gpu_free_bytes", "available");
            set_bytes(out, "ollama.gpu_overhead_bytes", "overhead");
            return;
        }
        if m.starts_with("offload") {
            out.phase(PhaseMark::ModelLoad);
            // A pasted estimate is sometimes wrapped: continuation lines carry more pairs.
            let mut joined = text.to_string();
            let mut used = 0;
            for next in line.following(6) {
                let t = next.text.trim();
                let continues = next.meta.timestamp.is_none()
                    && (t.starts_with("layers.")
                        || t.starts_with("memory.")
                        || t.starts_with("projector."));
                if !continues {
                    break;
                }
                joined.push(' ');
                joined.push_str(t);
                used += 1;
            }
            if used > 0 {
                out.consume(used);
                offload(&joined, false, out);
            } else {
                offload(text, true, out);
            }
            earlier_load_of_same_model(line, &joined, out);
            return;
        }
        if matches!(
            m.as_str(),
            "model weights" | "kv cache" | "compute graph" | "total memory"
        ) {
            out.phase(PhaseMark::ModelLoad);
            let Some((b, sp)) = bytes("size") else {
                return;
            };
            if m == "total memory" {
                out.fact("ollama.total_memory_bytes", b, Some(sp));
                return;
            }
            let dev_of = |p: &[super::local::Kv<'_>]| -> String {
                p.iter()
                    .find(|x| x.key == "device" || x.key == "buffer" || x.key == "buffer_type")
                    .map(|x| x.value.to_string())
                    .unwrap_or_default()
            };
            let is_cpu = |d: &str| super::llamacpp::is_host_buft(d) || d.is_empty();
            let mut gpu = 0.0;
            let mut cpu = 0.0;
            let here_dev = dev_of(&pairs);
            if is_cpu(&here_dev) {
                cpu += b as f64;
            } else {
                gpu += b as f64;
            }
            for l in line.preceding(16) {
                let p = slog_pairs(&l.text);
                let same = p
                    .iter()
                    .find(|x| x.key == "msg")
                    .is_some_and(|x| x.value.eq_ignore_ascii_case(msg_text));
                if !same {
                    break;
                }
                if let Some(v) = p
                    .iter()
                    .find(|x| x.key == "size")
                    .and_then(|x| human_bytes(x.value))
                {
                    if is_cpu(&dev_of(&p)) {
                        cpu += v as f64;
                    } else {
                        gpu += v as f64;
                    }
                }
            }
            let (g, c) = match m.as_str() {
                "model weights" => ("ollama.weights_gpu_bytes", Some("ollama.weights_cpu_bytes")),
                "kv cache" => ("ollama.kv_gpu_bytes", Some("ollama.kv_cpu_bytes")),
                _ => ("ollama.graph_gpu_bytes", None),
            };
            out.fact(g, gpu, Some(sp));
            if let Some(c) = c {
                out.fact(c, cpu, Some(sp));
            }
            return;
        }
        if m.starts_with("starting llama server")
            || m.starts_with("starting runner")
            || m.starts_with("starting ollama engine")
        {
            out.phase(PhaseMark::ModelLoad);
            if let Some(cmd) = get("cmd") {
                runner_command_at(cmd.value, cmd.span.0, text, out);
            }
            return;
        }
        if m == "load" || m.starts_with("load request") || text.contains("KvSize:") {
            load_request(text, out);
            return;
        }
        if m.starts_with("llama runner started") {
            out.phase(PhaseMark::Serving);
            return;
        }
        if m.contains("model request too large for system") {
            let mut f = Failure::new("host-oom", id::OLLAMA, Domain::Host);
            f.fact("host.killer", "ollama", None);
            // What the load needed is the request: refusals of different sizes across
            // restarts are different incidents.
            if let Some((b, sp)) = bytes("requested") {
                f.fact("oom.requested_bytes", b, Some(sp));
            }
            for (k, name) in [
                ("requested", "ollama.system_required_bytes"),
                ("available", "ollama.system_available_bytes"),
                ("total", "host.total_ram_bytes"),
                ("free", "host.free_ram_bytes"),
                ("swap", "host.swap_free_bytes"),
            ] {
                if let Some((b, sp)) = bytes(k) {
                    f.fact(name, b, Some(sp));
                }
            }
            out.failure(f);
            return;
        }
        if m.contains("model is too large for system memory") {
            let mut f = Failure::new("host-oom", id::OLLAMA, Domain::Host);
            f.fact("host.killer", "ollama", None);
            out.failure(f);
            return;
        }
        if m.contains("memory layout cannot be allocated") || m.contains("failed to commit memory")
        {
            let mut f = Failure::new("device-oom", id::OLLAMA, Domain::Device);
            f.fact("oom.wording", "ollama-layout", None);
            f.wrapper = true;
            out.failure(f);
            return;
        }
        if m.contains("runtime oom detected") {
            let mut f = Failure::new("device-oom", id::OLLAMA, Domain::Device);
            f.fact("llamacpp.alloc_kind", "runtime", None)
                .fact("oom.wording", "ggml", None);
            f.wrapper = true;
            out.failure(f);
            return;
        }
        if m.contains("quantized kv cache") || m.contains("kv cache type not supported") {
            out.fact("ollama.kv_quant_ignored", true, Some(msg.span));
            return;
        }
        if m.contains("flash attention enabled but not supported") {
            out.fact("ollama.flash_attention", false, Some(msg.span));
            return;
        }
        if m.contains("vram usage didn't recover") {
            out.fact("ollama.vram_not_recovered", true, Some(msg.span));
            return;
        }
        if m.contains("existing loaded models") || m.contains("evicting") {
            out.fact("ollama.other_models_loaded", true, Some(msg.span));
            // `updated VRAM based on existing loaded models ... total="23.6 GiB"
            // available="1.9 GiB"`: the card's size beside what the loaded models left.
            set_bytes(out, "ollama.gpu_total_bytes", "total");
            return;
        }
        if m.contains("truncating input prompt") {
            if let Some(p) = get("limit") {
                if let Ok(n) = p.value.parse::<u64>() {
                    out.fact("ollama.num_ctx", n, Some(p.span));
                }
            }
            return;
        }
        if m.contains("requested context size too large") {
            if let Some(p) = get("n_ctx_train") {
                if let Ok(n) = p.value.parse::<u64>() {
                    out.fact("llamacpp.n_ctx_train", n, Some(p.span));
                }
            }
        }
    }
}

/// Ollama's estimate line (`msg="offload to cuda" layers.* memory.*`, every era).
fn offload(text: &str, keep_spans: bool, out: &mut Emit) {
    let pairs = slog_pairs(text);
    let get = |k: &str| pairs.iter().find(|p| p.key == k);
    let sp = |p: &super::local::Kv<'_>| keep_spans.then_some(p.span);
    let bytes = |k: &str| get(k).and_then(|p| human_bytes(p.value).map(|b| (b, sp(p))));
    let set_bytes = |out: &mut Emit, name: &'static str, k: &str| {
        if let Some((b, s)) = bytes(k) {
            out.fact(name, b, s);
        }
    };
    for (k, name) in [
        ("layers.requested", "ollama.num_gpu"),
        ("layers.model", "ollama.layers_model"),
        ("layers.offload", "ollama.layers_offload"),
    ] {
        if let Some(p) = get(k) {
            if let Ok(n) = p.value.parse::<i64>() {
                if n >= 0 {
                    out.fact(name, n as u64, sp(p));
                }
            }
        }
    }
    // 0.1.x's estimate: `available="22.6 GiB"`.
    if get("memory.available").is_none() {
        set_bytes(out, "ollama.memory_available_bytes", "available");
    }
    if let Some(p) = get("memory.available") {
        out.fact("ollama.memory_available_bytes", sum_of_gpus(p.value), sp(p));
    }
    set_bytes(
        out,
        "ollama.memory_required_full_bytes",
        "memory.required.full",
    );
    set_bytes(
        out,
        "ollama.memory_required_partial_bytes",
        "memory.required.partial",
    );
    set_bytes(out, "ollama.memory_required_kv_bytes", "memory.required.kv");
    set_bytes(out, "ollama.memory_weights_bytes", "memory.weights.total");
    set_bytes(
        out,
        "ollama.memory_weights_repeating_bytes",
        "memory.weights.repeating",
    );
    set_bytes(out, "ollama.gpu_overhead_bytes", "memory.gpu_overhead");
    let partial = match (get("layers.offload"), get("layers.model")) {
        (Some(o), Some(mo)) => o.value != mo.value,
        _ => false,
    };
    let graph_key = if partial {
        "memory.graph.partial"
    } else {
        "memory.graph.full"
    };
    set_bytes(out, "ollama.memory_graph_bytes", graph_key);
}

/// A per-GPU list of sizes (`[11.5 GiB 4.6 GiB]`, or one bare size) added up.
fn sum_of_gpus(value: &str) -> u64 {
    value
        .trim_matches(['[', ']'])
        .split(' ')
        .collect::<Vec<_>>()
        .chunks(2)
        .filter_map(|c| human_bytes(&c.join(" ")))
        .sum()
}

/// Lines back an earlier load of the same model is looked for (a server's log between two
/// loads: a model's metadata, a few requests).
const EARLIER_LOAD_LINES: usize = 400;

/// The free memory an offload estimate saw (`memory.available="[22.0 GiB]"`, every GPU
/// together; 0.1.x's `available="22.6 GiB"`) and what the model needed (`memory.required.full`,
/// 0.1.x's `required`), which tells one model's loads from another's.
fn estimate_available_and_required(text: &str) -> Option<(f64, &str)> {
    let pairs = slog_pairs(text);
    let get = |k: &str| pairs.iter().find(|p| p.key == k).map(|p| p.value);
    let available = get("memory.available")
        .map(sum_of_gpus)
        .or_else(|| get("available").and_then(human_bytes))?;
    let required = get("memory.required.full").or_else(|| get("required"))?;
    Some((available as f64, required))
}

/// The same model loaded earlier in this log (the same memory needed) found more memory free
/// than this load did: what went between them was taken by something else, since a model the
/// server unloaded to load it again holds nothing (another program on the GPU: an image
/// generator, a second server). The most an earlier load found is kept.
fn earlier_load_of_same_model(line: &Line<'_>, text: &str, out: &mut Emit) {
    let Some((_, required)) = estimate_available_and_required(text) else {
        return;
    };
    let earlier = line
        .preceding(EARLIER_LOAD_LINES)
        .iter()
        .filter(|l| l.text.contains("msg=offload") || l.text.contains("msg=\"offload"))
        .filter_map(|l| {
            estimate_available_and_required(&l.text)
                .filter(|(_, r)| *r == required)
                .map(|(a, _)| a)
        })
        .fold(None, |m: Option<f64>, a| Some(m.map_or(a, |m| m.max(a))));
    if let Some(a) = earlier {
        out.fact("ollama.earlier_load_available_bytes", a, None);
    }
}

/// The runner's load request (0.12+): KvSize is num_ctx x parallel.
fn load_request(text: &str, out: &mut Emit) {
    let mut parallel: Option<u64> = None;
    let mut kv_size: Option<(u64, (usize, usize))> = None;
    for c in LOAD_REQUEST.captures_iter(text) {
        let m = c.name("v").expect("group v");
        let v = m.as_str();
        let sp = Some((m.start(), m.end()));
        match &c["k"] {
            "Parallel" => {
                if let Ok(n) = v.parse::<u64>() {
                    if n > 0 {
                        parallel = Some(n);
                        out.fact("ollama.num_parallel", n, sp);
                    }
                }
            }
            "FlashAttention" => {
                let on = matches!(v.to_ascii_lowercase().as_str(), "enabled" | "true" | "1");
                out.fact("ollama.flash_attention", on, sp);
            }
            "KvSize" => {
                if let Ok(n) = v.parse::<u64>() {
                    kv_size = Some((n, (m.start(), m.end())));
                    out.fact("llamacpp.n_ctx", n, sp);
                }
            }
            "KvCacheType" => {
                let t = if v.is_empty() { "f16" } else { v };
                out.fact("ollama.kv_cache_type", t.to_ascii_lowercase(), sp);
            }
            "GPULayers" => {
                if let Ok(n) = v.parse::<u64>() {
                    out.fact("ollama.layers_offload", n, sp);
                }
            }
            "UseMmap" => out.fact("llamacpp.mmap", v.eq_ignore_ascii_case("true"), sp),
            _ => {}
        }
    }
    if let Some((n, sp)) = kv_size {
        out.fact("ollama.num_ctx", n / parallel.unwrap_or(1).max(1), Some(sp));
    }
}

/// What an error text from the runner says was being allocated.
/// The runner's connection dropped mid-request with no reason given. On Linux that is
/// nearly always the kernel or a cgroup killing it for memory (the runner holds the part of
/// the model that did not fit on the GPU in RAM); the diagnosis weighs that part against
/// the free RAM the server logged. A runner error nearby is the reason instead: a memory
/// error is read from its own line, and anything else (a crash, a model it cannot load)
/// makes the EOF no failure of ours.
fn connection_lost(line: &Line<'_>, out: &mut Emit) {
    let mut nearby = line.preceding(40).into_iter().chain(line.following(40));
    if nearby.any(|l| RUNNER_TERMINATED.is_match(&l.text) && !l.text.contains("EOF")) {
        return;
    }
    out.engine(id::OLLAMA);
    let mut f = Failure::new("host-oom", id::OLLAMA, Domain::Host);
    f.fact("host.killer", "unknown", None)
        .fact("host.victim_name", "ollama runner", None)
        .fact("ollama.connection_lost", true, None);
    out.failure(f);
}

fn runner_kind(e: &str) -> &'static str {
    let l = e.to_ascii_lowercase();
    if l.contains("kv cache") {
        "kv"
    } else if l.contains("compute") {
        "compute"
    } else if l.contains("error loading model") || l.contains("unable to allocate") {
        "weights"
    } else if l.contains("cuda error") {
        "runtime"
    } else {
        "unknown"
    }
}

/// The server config's environment map: `OLLAMA_CONTEXT_LENGTH:4096 OLLAMA_NUM_PARALLEL:4 ...`.
fn server_config(env: &str, offset: usize, out: &mut Emit) {
    for c in ENV_MAP.captures_iter(env) {
        let k = c.name("k").expect("group k").as_str();
        let vm = c.name("v").expect("group v");
        let v = vm.as_str();
        let sp = Some((offset + vm.start(), offset + vm.end()));
        match k {
            "OLLAMA_CONTEXT_LENGTH" => {
                if let Ok(n) = v.parse::<u64>() {
                    if n > 0 {
                        out.fact("ollama.num_ctx", n, sp);
                    }
                }
            }
            "OLLAMA_NUM_PARALLEL" => {
                if let Ok(n) = v.parse::<u64>() {
                    if n > 0 {
                        out.fact("ollama.num_parallel", n, sp);
                    }
                }
            }
            "OLLAMA_KV_CACHE_TYPE" => {
                let t = if v.is_empty() { "f16" } else { v };
                out.fact("ollama.kv_cache_type", t.to_ascii_lowercase(), sp);
            }
            "OLLAMA_FLASH_ATTENTION" => {
                let on = matches!(v.to_ascii_lowercase().as_str(), "1" | "true");
                out.fact("ollama.flash_attention", on, sp);
            }
            "OLLAMA_GPU_OVERHEAD" => {
                if let Ok(n) = v.parse::<u64>() {
                    out.fact("ollama.gpu_overhead_bytes", n, sp);
                }
            }
            "OLLAMA_MAX_LOADED_MODELS" => {
                if let Ok(n) = v.parse::<u64>() {
                    out.fact("ollama.max_loaded_models", n, sp);
                }
            }
            _ => {}
        }
    }
}

fn runner_command(text: &str, out: &mut Emit) {
    runner_command_at(text, 0, text, out);
}

/// The runner's command line: `--ctx-size` is num_ctx × parallel.
fn runner_command_at(cmd: &str, offset: usize, _line: &str, out: &mut Emit) {
    let mut inner = Emit::default();
    let cl = command_line(cmd, &mut inner, true);
    // Re-emit the llama.cpp facts with spans in the line's coordinates.
    for rec in inner.records {
        if let super::Observation::Fact { name, value } = rec.obs {
            let sp = rec.prov.span.map(|(a, b)| (a + offset, b + offset));
            out.fact(name, value, sp);
        }
    }
    let parallel = cl.parallel.unwrap_or(1).max(1);
    if let Some(p) = cl.parallel {
        out.fact("ollama.num_parallel", p, None);
    }
    if let Some(ctx) = cl.ctx {
        out.fact("llamacpp.n_ctx", ctx, None);
        out.fact("ollama.num_ctx", ctx / parallel, None);
    }
    if let Some(n) = cl.ngl {
        out.fact("ollama.num_gpu", n, None);
    }
    if let Some(t) = cl.kv_type {
        out.fact("ollama.kv_cache_type", t, None);
    }
    if let Some(fa) = cl.flash {
        out.fact("ollama.flash_attention", fa, None);
    }
}

/// The models `ollama ps` lists as resident, and how much of them is on the GPU: memory the
/// Ollama server holds whatever else runs on the card (a ComfyUI prompt-writer node, a second
/// server). Not the engine's own announcement: the fact alone, the log's engine unchanged.
fn ps_table(line: &Line<'_>, out: &mut Emit) {
    let mut on_gpu = 0.0;
    let mut rows = 0;
    super::local::walk_forward(line, 16, |raw| {
        let Some(c) = PS_ROW.captures(raw.trim()) else {
            return false;
        };
        let share = match c.name("whole").map(|m| m.as_str()) {
            Some("GPU") => 1.0,
            Some(_) => 0.0,
            None => c["gpu"].parse::<f64>().unwrap_or(0.0) / 100.0,
        };
        // Ollama's sizes are decimal (its `format.HumanBytes`: GB = 10^9 bytes).
        if let Some(b) = crate::facts::units::parse_size(&c["size"], SiBase::Decimal) {
            on_gpu += b as f64 * share;
            rows += 1;
        }
        true
    });
    if rows > 0 {
        out.fact("ollama.resident_gpu_bytes", on_gpu.round(), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::evidence::{InputName, Value};
    use crate::ingest::log::engines::Observation;

    use std::sync::Arc;

    const GIB: f64 = 1073741824.0;

    fn run(raw: &str) -> Emit {
        crate::ingest::log::engines::run_line(&Ollama, raw)
    }

    fn failure(text: &str) -> Option<Failure> {
        crate::ingest::log::engines::emitted_failure(&run(text))
    }

    fn fact(text: &str, name: &str) -> Option<Value> {
        run(text)
            .records
            .into_iter()
            .rev()
            .find_map(|r| match r.obs {
                Observation::Fact { name: n, value } if n == name => Some(value),
                _ => None,
            })
    }

    fn close(v: Option<Value>, want: f64) -> bool {
        v.and_then(|v| v.as_f64())
            .is_some_and(|g| (g - want).abs() <= want * 0.001 + 1.0)
    }

    /// The same model's earlier load found more free memory than this one: the most it found
    /// is kept; another model's load (other memory required) is not compared.
    #[test]
    fn earlier_load_of_the_same_model() {
        let load = |avail: &str, req: &str| {
            format!(
                "time=2025-03-02T09:20:41.779+01:00 level=INFO source=server.go:138 msg=offload library=cuda layers.requested=-1 layers.model=49 layers.offload=49 memory.available=\"[{avail}]\" memory.required.full=\"{req}\" memory.required.kv=\"1.5 GiB\"\n"
            )
        };
        let earlier = |log: String| {
            crate::ingest::log::grouping::analyze_text(&log)
                .context
                .get("ollama.earlier_load_available_bytes")
                .map(|f| f.value.clone())
        };
        let two = load("22.3 GiB", "11.2 GiB") + &load("11.6 GiB", "11.2 GiB");
        assert!(close(earlier(two), 22.3 * GIB));
        let other_model = load("22.3 GiB", "11.2 GiB") + &load("11.6 GiB", "19.8 GiB");
        assert_eq!(earlier(other_model), None);
        // 0.1.x's estimate names its free memory `available`.
        let old = r#"time=2024-03-20T14:09:41.258-04:00 level=INFO source=llm.go:111 msg="offload to gpu" reallayers=41 layers=41 required="8.9 GiB" used="8.9 GiB" available="9.3 GiB" kv="1.6 GiB""#;
        assert!(close(fact(old, "ollama.memory_available_bytes"), 9.3 * GIB));
    }

    /// `ollama ps`: each model's size times its GPU share, the log's engine left alone.
    #[test]
    fn ollama_ps_gives_what_the_server_holds_on_the_gpu() {
        let log = "got prompt\n$ ollama ps\nNAME                 ID              SIZE      PROCESSOR          UNTIL\nllama3.1:8b          46e0c10c039e    9.6 GB    100% GPU           4 minutes from now\nqwen2.5:14b          7cdf5a0187d5    12 GB     48%/52% CPU/GPU    Forever\nnomic-embed-text     0a109f422b47    0.8 GB    100% CPU           2 minutes from now\n";
        let ev = crate::ingest::log::grouping::analyze_text(log);
        let held = ev.context.num("ollama.resident_gpu_bytes").unwrap();
        let want = 9.6e9 + 0.52 * 12e9;
        assert!((held - want).abs() < 1e6, "{held} vs {want}");
        assert_eq!(ev.context.str("engine"), None);
    }

    /// The estimate lines of every era and the inventory lines.
    #[test]
    fn every_estimate_era() {
        let v1 = r#"time=2024-05-01T10:00:00.000Z level=INFO source=memory.go:127 msg="offload to gpu" layers.requested=-1 layers.real=33 memory.available="23.1 GiB" memory.required.full="5.4 GiB" memory.required.partial="5.4 GiB" memory.required.kv="1.0 GiB" memory.weights.total="3.9 GiB" memory.weights.repeating="3.5 GiB" memory.weights.nonrepeating="411.0 MiB" memory.graph.full="560.0 MiB" memory.graph.partial="585.0 MiB""#;
        assert!(close(fact(v1, "ollama.memory_required_kv_bytes"), GIB));
        assert!(close(fact(v1, "ollama.memory_available_bytes"), 23.1 * GIB));
        assert_eq!(fact(v1, "ollama.num_gpu"), None, "-1 is automatic");
        let v2 = r#"time=2024-12-01T10:00:00.000Z level=INFO source=memory.go:326 msg="offload to cuda" layers.requested=-1 layers.model=81 layers.offload=38 layers.split="" memory.available="[23.4 GiB]" memory.gpu_overhead="0 B" memory.required.full="45.6 GiB" memory.required.partial="22.9 GiB" memory.required.kv="2.5 GiB" memory.required.allocations="[22.9 GiB]" memory.weights.total="39.3 GiB" memory.weights.repeating="38.3 GiB" memory.weights.nonrepeating="1.0 GiB" memory.graph.full="1.1 GiB" memory.graph.partial="1.1 GiB""#;
        assert_eq!(fact(v2, "ollama.layers_offload"), Some(Value::Num(38.0)));
        assert_eq!(fact(v2, "ollama.layers_model"), Some(Value::Num(81.0)));
        assert!(close(
            fact(v2, "ollama.memory_required_full_bytes"),
            45.6 * GIB
        ));
        let wrapped = "time=2025-05-23T17:16:43.377Z level=INFO source=server.go:168 msg=offload library=cuda layers.requested=49 layers.model=49\n layers.offload=37 layers.split=37,0 memory.available=\"[11.5 GiB 4.6 GiB]\"\n memory.required.full=\"14.9 GiB\" memory.required.kv=\"2.0 GiB\"\n";
        let input: InputName = Arc::from("t.log");
        let ev = crate::ingest::log::grouping::analyze_log(&mut wrapped.as_bytes(), &input)
            .unwrap()
            .0;
        assert_eq!(ev.context.num("ollama.layers_offload"), Some(37.0));
        assert!(close(
            ev.context
                .get("ollama.memory_required_kv_bytes")
                .map(|f| f.value.clone()),
            2.0 * GIB
        ));
        let v2b = r#"msg="offload to cuda" layers.requested=20 layers.model=33 layers.offload=20 memory.available="[7.6 GiB 7.6 GiB]""#;
        assert!(close(
            fact(v2b, "ollama.memory_available_bytes"),
            15.2 * GIB
        ));
        assert_eq!(fact(v2b, "ollama.num_gpu"), Some(Value::Num(20.0)));
        let v3 = r#"time=2025-04-01T10:00:00.000+02:00 level=INFO source=server.go:138 msg=offload library=cuda layers.requested=-1 layers.model=49 layers.offload=49 layers.split="" memory.available="[31.3 GiB]" memory.gpu_overhead="0 B" memory.required.full="21.7 GiB" memory.required.partial="21.7 GiB" memory.required.kv="6.0 GiB" memory.weights.total="12.8 GiB""#;
        assert!(close(
            fact(v3, "ollama.memory_required_kv_bytes"),
            6.0 * GIB
        ));
        let v4 = r#"time=2025-09-01T10:00:00.000Z level=INFO source=device.go:245 msg="model weights" device=CUDA0 size="4.1 GiB""#;
        assert!(close(fact(v4, "ollama.weights_gpu_bytes"), 4.1 * GIB));
        let v4 = r#"msg="kv cache" device=CUDA0 size="2.0 GiB""#;
        assert!(close(fact(v4, "ollama.kv_gpu_bytes"), 2.0 * GIB));
        let v4 = r#"msg="compute graph" device=CUDA0 size="560.0 MiB""#;
        assert!(close(fact(v4, "ollama.graph_gpu_bytes"), 560.0 * 1048576.0));
        let v4 = r#"msg="total memory" size="6.9 GiB""#;
        assert!(close(fact(v4, "ollama.total_memory_bytes"), 6.9 * GIB));
        let v5 = r#"msg="model weights" buffer=CPU size="1.2 GiB""#;
        assert!(close(fact(v5, "ollama.weights_cpu_bytes"), 1.2 * GIB));
        let inv = r#"time=2025-01-01T00:00:00Z level=INFO source=types.go:131 msg="inference compute" id=GPU-1b2c library=cuda variant=v12 compute=8.9 driver=12.4 name="NVIDIA GeForce RTX 4090" total="23.6 GiB" available="22.1 GiB""#;
        assert!(close(fact(inv, "ollama.gpu_total_bytes"), 23.6 * GIB));
        assert!(close(fact(inv, "ollama.gpu_free_bytes"), 22.1 * GIB));
        let sys = r#"msg="system memory" total="31.2 GiB" free="20.5 GiB" free_swap="2.0 GiB""#;
        assert!(close(fact(sys, "host.total_ram_bytes"), 31.2 * GIB));
        assert!(close(fact(sys, "host.swap_free_bytes"), 2.0 * GIB));
        let cfg = r#"time=2025-01-01T00:00:00Z level=INFO source=routes.go:1259 msg="server config" env="map[CUDA_VISIBLE_DEVICES: OLLAMA_CONTEXT_LENGTH:8192 OLLAMA_FLASH_ATTENTION:false OLLAMA_KV_CACHE_TYPE:q8_0 OLLAMA_MAX_LOADED_MODELS:0 OLLAMA_NUM_PARALLEL:4 OLLAMA_GPU_OVERHEAD:0]""#;
        assert_eq!(fact(cfg, "ollama.num_ctx"), Some(Value::Num(8192.0)));
        assert_eq!(fact(cfg, "ollama.num_parallel"), Some(Value::Num(4.0)));
        assert_eq!(fact(cfg, "ollama.kv_cache_type"), Some(Value::str("q8_0")));
        assert_eq!(
            fact(cfg, "ollama.flash_attention"),
            Some(Value::Bool(false))
        );
        assert!(
            run(cfg)
                .records
                .iter()
                .any(|r| matches!(r.obs, Observation::RunStart))
        );
        let old_cfg = r#"2024/11/27 21:43:34 routes.go:1197: INFO server config env="map[OLLAMA_CONTEXT_LENGTH:2048 OLLAMA_NUM_PARALLEL:0]""#;
        assert_eq!(fact(old_cfg, "ollama.num_ctx"), Some(Value::Num(2048.0)));
        assert_eq!(fact(old_cfg, "ollama.num_parallel"), None, "0 = automatic");
        let cmd = r#"msg="starting llama server" cmd="/usr/local/bin/ollama runner --model /root/.ollama/models/blobs/sha256-6a0746a1 --ctx-size 32768 --batch-size 512 --n-gpu-layers 33 --threads 8 --flash-attn --kv-cache-type q8_0 --parallel 4 --port 40111""#;
        assert_eq!(fact(cmd, "ollama.num_ctx"), Some(Value::Num(8192.0)));
        assert_eq!(fact(cmd, "llamacpp.n_ctx"), Some(Value::Num(32768.0)));
        assert_eq!(fact(cmd, "ollama.num_gpu"), Some(Value::Num(33.0)));
        assert_eq!(fact(cmd, "ollama.flash_attention"), Some(Value::Bool(true)));
        assert_eq!(fact(cmd, "ollama.kv_cache_type"), Some(Value::str("q8_0")));
        let req = r#"time=2025-10-01T10:00:00.000Z level=INFO source=runner.go:1171 msg=load request="{Operation:commit LoraPath:[] Parallel:2 BatchSize:512 FlashAttention:Enabled KvSize:16384 KvCacheType:q8_0 NumThreads:8 GPULayers:49[ID:GPU-1 Layers:49(0..48)] MultiUserCache:false ProjectorPath: MainGPU:0 UseMmap:false}""#;
        assert_eq!(fact(req, "ollama.num_ctx"), Some(Value::Num(8192.0)));
        assert_eq!(fact(req, "ollama.kv_cache_type"), Some(Value::str("q8_0")));
        assert_eq!(fact(req, "ollama.flash_attention"), Some(Value::Bool(true)));
        assert_eq!(fact(req, "llamacpp.mmap"), Some(Value::Bool(false)));
        let ver = r#"msg="Listening on 127.0.0.1:11434 (version 0.5.7)""#;
        assert_eq!(fact(ver, "ollama.version"), Some(Value::str("0.5.7")));
        let w = r#"level=WARN source=server.go:200 msg="quantized kv cache requested but flash attention disabled" type=q8_0"#;
        assert_eq!(fact(w, "ollama.kv_quant_ignored"), Some(Value::Bool(true)));
    }

    /// O-E1..O-E11.
    #[test]
    fn every_error() {
        let f = failure(r#"time=2025-01-31T20:48:19.587Z level=WARN source=server.go:136 msg="model request too large for system" requested="391.0 GiB" available=393216983040 total="1690.2 GiB" free="358.4 GiB" swap="7.8 GiB""#).unwrap();
        assert_eq!(f.kind, "host-oom");
        assert!(!f.wrapper);
        assert_eq!(
            f.get("ollama.system_available_bytes")
                .and_then(Value::as_f64),
            Some(393216983040.0)
        );
        for t in [
            "Error: model requires more system memory (164.8 GiB) than is available (13.4 GiB)",
            r#"{"error":"model requires more system memory (5.5 GiB) than is available (3.4 GiB)"}"#,
            r#"msg="Load failed" model=/x error="model requires more system memory (5.5 GiB) than is available (3.4 GiB)""#,
        ] {
            let f = failure(t).unwrap();
            assert_eq!(f.kind, "host-oom", "{t}");
            assert!(f.wrapper, "{t}");
            assert!(
                f.get("ollama.system_required_bytes")
                    .and_then(Value::as_f64)
                    .is_some_and(|v| v > 0.0),
                "{t}"
            );
        }
        let f = failure(r#"level=ERROR source=sched.go:455 msg="error loading llama server" error="llama runner process has terminated: cudaMalloc failed: out of memory""#).unwrap();
        assert_eq!(f.kind, "device-oom");
        assert!(f.wrapper);
        let f = failure(r#"msg="error loading llama server" error="llama runner process has terminated: error loading model: unable to allocate CUDA0 buffer""#).unwrap();
        assert_eq!(
            f.get("llamacpp.alloc_kind").and_then(Value::as_str),
            Some("weights")
        );
        let f = failure(
            "Error: an error was encountered while running the model: CUDA error: out of memory",
        )
        .unwrap();
        assert!(f.wrapper);
        assert_eq!(f.engine, id::OLLAMA);
        let f = failure(r#"level=ERROR source=server.go:1 msg="llama runner terminated" error="signal: killed""#).unwrap();
        assert_eq!(f.kind, "host-oom");
        let f = failure(r#"msg="error loading llama server" error="llama runner process has terminated: signal: killed""#).unwrap();
        assert_eq!(f.kind, "host-oom");
        assert!(!f.wrapper);
        assert!(failure(r#"msg="error loading llama server" error="llama runner process has terminated: exit status 2""#).is_none());
        // The client's view of a runner that died mid-request: a host failure whose reason
        // the diagnosis weighs (a lone line has no runner error nearby to explain it).
        for lost in [
            r#"Error: Post "http://127.0.0.1:11434/api/generate": EOF"#,
            r#"Error: Post "http://localhost:11434/api/chat": unexpected EOF"#,
            r#"level=ERROR source=routes.go:1 msg="an error was encountered while running the model: unexpected EOF""#,
        ] {
            let f = failure(lost).unwrap_or_else(|| panic!("{lost}"));
            assert_eq!(f.kind, "host-oom", "{lost}");
            assert_eq!(f.get("ollama.connection_lost"), Some(&Value::Bool(true)));
            assert!(!f.wrapper, "{lost}");
        }
        // The server's access log of the same request is no failure.
        assert!(
            failure(r#"[GIN] 2025/03/03 - 21:15:20 | 500 | 1m17s | 127.0.0.1 | POST "/api/chat""#)
                .is_none()
        );
        assert!(failure(r#"msg="error loading llama server" error="llama runner process has terminated: error loading model: unknown model architecture: 'x'""#).is_none());
        let f = failure("Error: memory layout cannot be allocated with num_gpu = 60").unwrap();
        assert_eq!(f.get("ollama.num_gpu").and_then(Value::as_f64), Some(60.0));
        assert!(
            failure(
                "panic: insufficient memory - required allocations: {InputWeights:1 CPU:{Name:CPU}}"
            )
            .is_some()
        );
        let f = failure(r#"level=WARN source=sched.go:1 msg="runtime OOM detected; expiring loaded models to clear memory before next request" model=qwen3 error="CUDA error""#).unwrap();
        assert!(f.wrapper);
        assert!(
            failure(r#"level=INFO msg="model is too large for system memory" requireFull=true"#)
                .is_some()
        );
        // Look-alikes.
        assert!(failure(r#"msg="updated VRAM based on existing loaded models" gpu=GPU-1 library=cuda total="23.6 GiB" available="10.0 GiB""#).is_none());
        // ... but it gives the card's size, beside what the loaded models left of it.
        assert!(close(
            fact(
                r#"time=2025-11-25T06:43:58.402+02:00 level=INFO source=sched.go:543 msg="updated VRAM based on existing loaded models" gpu=GPU-1 library=CUDA total="23.6 GiB" available="1.9 GiB""#,
                "ollama.gpu_total_bytes"
            ),
            23.6 * GIB
        ));
        assert!(failure(r#"level=INFO source=sched.go:1 msg="model requires more system memory than is currently available, evicting a model to make space" required=1 free=2"#).is_none());
        assert!(
            failure(r#"level=INFO source=server.go:1 msg="llama runner started in 3.01 seconds""#)
                .is_none()
        );
    }
}
