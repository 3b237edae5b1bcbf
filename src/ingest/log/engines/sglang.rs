//! SGLang: `server_args=ServerArgs(...)`, the weight and KV-pool accounting, CUDA-graph
//! capture, the start-up "Not enough memory" error, runtime retraction and the token-pool
//! errors, 0.3 to 0.5 (`ENGINE-MESSAGES.md` §6).
//!
//! SGLang's one knob for memory, `--mem-fraction-static`, points in opposite directions by
//! phase: at start-up "Not enough memory" means the static budget left no room for the KV
//! pool (raise it), while an OOM during CUDA-graph capture or serving means the pool left no
//! room for activations (lower it). The lines here give rules what they need to tell the
//! two apart and to compute the value: free memory before and after the weights, the pool's
//! size, graph memory.
//!
//! Sizes print as `GB` but are computed with 1 << 30, so they are read as GiB.
//!
//! `token_to_kv_pool_allocator memory leak detected!` is **not** an incident: it is the
//! scheduler's self-check that its free-list count matches the pool size after a batch,
//! raised when SGLang's own bookkeeping is wrong (an engine bug, fixed by upgrading or
//! reporting it). No allocation failed and no setting makes memory fit, so reporting it as
//! an out-of-memory incident would send users after the wrong knob.
use std::sync::LazyLock;

use regex::Regex;

use super::serving::{
    Key, Kind, count_preceding, gib, key, parse_count, re, read_flags, read_key_values,
    start_already_seen,
};
use super::{Domain, Emit, Failure, Line, PhaseMark, Recognizer, id};

const KEYS: &[Key] = &[
    key(
        &["mem_fraction_static"],
        "sglang.mem_fraction_static",
        Kind::Ratio,
    ),
    key(
        &["max_running_requests"],
        "sglang.max_running_requests",
        Kind::Num,
    ),
    key(&["max_total_tokens"], "sglang.max_total_tokens", Kind::Num),
    key(
        &["chunked_prefill_size"],
        "sglang.chunked_prefill_size",
        Kind::Num,
    ),
    key(
        &["max_prefill_tokens"],
        "sglang.max_prefill_tokens",
        Kind::Num,
    ),
    key(&["context_length"], "sglang.context_length", Kind::Num),
    key(
        &["tp_size", "tp", "tensor_parallel_size"],
        "sglang.tp_size",
        Kind::Num,
    ),
    key(
        &["dp_size", "dp", "data_parallel_size"],
        "sglang.dp_size",
        Kind::Num,
    ),
    key(&["kv_cache_dtype"], "sglang.kv_cache_dtype", Kind::Text),
    key(
        &["cuda_graph_max_bs"],
        "sglang.cuda_graph_max_bs",
        Kind::Num,
    ),
    key(
        &["disable_cuda_graph"],
        "sglang.disable_cuda_graph",
        Kind::Flag,
    ),
    key(&["quantization"], "sglang.quantization", Kind::Text),
    key(&["dtype"], "sglang.dtype", Kind::Dtype),
    key(
        &["enable_torch_compile"],
        "sglang.enable_torch_compile",
        Kind::Flag,
    ),
    key(&["model_path", "model"], "model.name", Kind::Text),
];

static COMMAND: LazyLock<Regex> = LazyLock::new(|| {
    re(r"(?:^|[\s/'\x22$])(?:sglang\.launch_server|sglang serve|lmsysorg/sglang\S*)")
});
/// S-1.
static WEIGHT_BEGIN: LazyLock<Regex> =
    LazyLock::new(|| re(r"Load weight begin\. avail mem=(?P<f>{N}) GB"));
static WEIGHT_END: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Load weight end\. (?:type=\w+, )?(?:dtype=(?P<dtype>[\w.]+), )?avail mem=(?P<f>{N}) GB(?:, mem usage=(?P<w>{N}) GB)?",
    )
});
/// S-2.
/// The tensor-parallel start-up check (`model_runner.py`): the least memory free on any GPU
/// of the group was below 0.9 x this GPU's, in GiB (`min_per_gpu_memory`; 0.5's
/// `pre_model_load_memory`, the NPU build's `min_available_device_memory`; 0.3 printed no
/// figures). Raised as a `ValueError` (0.3, 0.4) or a `RuntimeError` (0.5, where
/// `SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK` asks for it), otherwise logged as a warning.
static UNBALANCED: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"The memory capacity is unbalanced\.(?:.*?(?:min_per_gpu_memory|pre_model_load_memory|min_available_device_memory)=(?P<min>{N}))?(?:.*?(?:local_gpu_memory|local_device_memory)=(?P<local>{N}))?",
    )
});

static NOT_ENOUGH: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Not enough memory\. Please try to increase --mem-fraction-static\.?(?:\s*Current value: (?:self\.server_args\.)?mem_fraction_static=(?P<f>{N}))?",
    )
});
/// S-3.
static NO_KV_ROOM: LazyLock<Regex> = LazyLock::new(|| {
    re(
        // Every part after the first clause is optional: pastes cut it, and versions reword it.
        r"Loaded weights leave no GPU memory for the KV cache(?: under --mem-fraction-static=(?P<f>{N}))?(?:\.\s*Raise --mem-fraction-static above (?P<s>{N})(?: \(minimum viable = 1 - available/pre = (?P<m>{N})\))?)?",
    )
});
/// `max_total_tokens=131072 is larger than the profiled value -561981. Use the profiled value instead.`
static PROFILED: LazyLock<Regex> = LazyLock::new(|| {
    re(r"max_total_tokens=(?P<cfg>\d+) is larger than the profiled value (?P<p>-?\d+)")
});
/// S-4 pieces.
static KV_TOKENS: LazyLock<Regex> = LazyLock::new(|| re(r"#tokens: (?P<t>\d{1,3}(?:,\d{3})+|\d+)"));
static KV_SIZES: LazyLock<Regex> =
    LazyLock::new(|| re(r"K size: (?P<k>{N}) GB, V size: (?P<v>{N}) GB"));
static KV_SIZE_MLA: LazyLock<Regex> = LazyLock::new(|| re(r"\bKV size: (?P<kv>{N}) GB"));
/// S-5.
static POOL_END: LazyLock<Regex> =
    LazyLock::new(|| re(r"Memory pool end\. avail mem=(?P<f>{N}) GB"));
/// S-6.
static LIMITS: LazyLock<Regex> = LazyLock::new(|| re(r"max_total_num_tokens=(?P<t>\d+)"));
static LIMIT_FIELDS: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?P<k>chunked_prefill_size|max_prefill_tokens|max_running_requests|context_len)=(?P<v>-?\d+)",
    )
});
/// S-7.
static GRAPH_BEGIN: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)Capture (?:[\w-]+ )?cuda graph begin\..*?avail mem=(?P<f>{N}) GB|(?i)Capture (?:[\w-]+ )?cuda graph begin",
    )
});
static GRAPH_END: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)Capture (?:[\w-]+ )?cuda graph end\..*?mem usage=(?P<g>{N}) GB[.,]\s*avail mem=(?P<f>{N}) GB",
    )
});
/// S-8.
static GRAPH_FAILED: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?i)Capture (?:[\w-]+ )?cuda graph failed: (?P<err>.*)"));
/// S-9.
static RETRACT: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?:Decode out of memory happened|KV cache pool is full\. Retract requests)\. #retracted_reqs: (?P<n>\d+)",
    )
});
/// S-10.
static POOL_OOM: LazyLock<Regex> = LazyLock::new(|| {
    re(r"(?P<which>Prefill|Decode) out of memory\. Try to lower your batch size\.")
});
static POOL_REQ: LazyLock<Regex> = LazyLock::new(|| re(r"Try to allocate (?P<t>\d+) tokens"));
static POOL_AVAIL: LazyLock<Regex> = LazyLock::new(|| re(r"Available tokens: (?P<a>\d+)"));
const REQ_SLOTS: &str = "alloc_req_slots runs out of memory";
/// S-11.
static BATCH_STATS: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?:Prefill|Decode) batch(?:\[\d+\])?[.,].*?\btoken usage: (?P<u>{N})"));
static STATS_RUNNING: LazyLock<Regex> = LazyLock::new(|| re(r"#running-req: (?P<n>\d+)"));
static STATS_QUEUE: LazyLock<Regex> = LazyLock::new(|| re(r"#queue-req: (?P<n>\d+)"));

fn is_start(t: &str) -> bool {
    t.contains("server_args=ServerArgs(") || is_command(t)
}

fn is_command(t: &str) -> bool {
    COMMAND.is_match(t) && !t.contains("File \"")
}

fn is_retraction(t: &str) -> bool {
    t.contains("#retracted_reqs")
}

fn gib_fact(out: &mut Emit, c: &regex::Captures<'_>, g: &str, name: &'static str) {
    if let Some(m) = c.name(g) {
        if let Some(v) = gib(m.as_str()) {
            out.fact(name, v, Some((m.start(), m.end())));
        }
    }
}

fn num_of(c: &regex::Captures<'_>, g: &str) -> Option<(f64, (usize, usize))> {
    let m = c.name(g)?;
    parse_count(m.as_str()).map(|v| (v, (m.start(), m.end())))
}

/// The SGLang recogniser.
pub struct Sglang;

impl Recognizer for Sglang {
    fn engine(&self) -> &'static str {
        id::SGLANG
    }

    fn anchors(&self) -> &'static [&'static str] {
        &[
            "server_args=ServerArgs(",
            "sglang.launch_server",
            "sglang serve",
            "lmsysorg/sglang",
            "--mem-fraction-static",
            // Flags on the lines of a command continued with backslashes.
            "--model-path",
            "--tp",
            "--quantization",
            "--context-length",
            "Load weight begin",
            "Load weight end",
            "Not enough memory. Please try to increase",
            "Loaded weights leave no GPU memory",
            "is larger than the profiled value",
            "is allocated. ",
            "KV cache allocated",
            "Memory pool end",
            "max_total_num_tokens=",
            "cuda graph begin",
            "cuda graph end",
            "cuda graph failed",
            "#retracted_reqs",
            "out of memory. Try to lower your batch size",
            "alloc_req_slots runs out of memory",
            "token usage:",
            "fired up and ready to roll",
            "memory leak detected",
            "/sglang/srt/",
            "Received sigquit from a child process",
            "The memory capacity is unbalanced",
        ]
    }

    fn recognize(&self, line: &Line<'_>, out: &mut Emit) {
        let text = line.text;
        // The launcher's word after a scheduler or detokenizer process died: only SGLang
        // prints it, so it names the engine of the failure just above.
        if text.contains("Received sigquit from a child process") {
            out.engine(id::SGLANG);
            return;
        }
        if super::serving::continues_command(line, is_command) {
            read_flags(line, KEYS, out);
            return;
        }
        // A traceback frame in SGLang's runtime names the engine.
        if super::serving::quoted_code_or_frame(text, &["/sglang/srt/"], id::SGLANG, out) {
            return;
        }

        if is_start(text) {
            if !start_already_seen(line, is_start, is_command) {
                out.run_start();
            }
            out.engine(id::SGLANG);
            if is_command(text) {
                read_flags(line, KEYS, out);
            } else {
                read_key_values(text, KEYS, out);
            }
            return;
        }

        if text.contains("memory leak detected") {
            // See the module comment: a bookkeeping self-check, not an OOM.
            if text.contains("token_to_kv_pool") || text.contains("req_to_token_pool") {
                out.engine(id::SGLANG);
            }
            return;
        }

        if let Some(c) = UNBALANCED.captures(text) {
            // Another process holds part of one GPU of the group. Raised, it stops the
            // start; as a warning it is what a later failure of the same run had against it.
            out.engine(id::SGLANG);
            out.phase(PhaseMark::EngineStartup);
            out.fact("sglang.tp_memory_unbalanced", true, None);
            gib_fact(out, &c, "min", "sglang.tp_min_free_bytes");
            gib_fact(out, &c, "local", "sglang.tp_local_free_bytes");
            if text.contains("Error: The memory capacity is unbalanced") {
                out.failure(Failure::new("engine-budget", id::SGLANG, Domain::Device));
            }
            return;
        }

        if let Some(c) = NOT_ENOUGH.captures(text) {
            out.engine(id::SGLANG);
            out.phase(PhaseMark::EngineStartup);
            let mut f = Failure::new("no-kv-memory", id::SGLANG, Domain::Device);
            if let Some((v, sp)) = c.name("f").and_then(|m| {
                m.as_str()
                    .parse::<f64>()
                    .ok()
                    .map(|v| (v, (m.start(), m.end())))
            }) {
                f.fact("sglang.mem_fraction_static", v, Some(sp));
            }
            out.failure(f);
            return;
        }

        if let Some(c) = NO_KV_ROOM.captures(text) {
            out.engine(id::SGLANG);
            out.phase(PhaseMark::EngineStartup);
            let mut f = Failure::new("no-kv-memory", id::SGLANG, Domain::Device);
            for (g, name) in [
                ("f", "sglang.mem_fraction_static"),
                ("s", "sglang.suggested_mem_fraction"),
                ("m", "sglang.min_viable_mem_fraction"),
            ] {
                if let Some(m) = c.name(g) {
                    if let Ok(v) = m.as_str().parse::<f64>() {
                        f.fact(name, v, Some((m.start(), m.end())));
                    }
                }
            }
            out.failure(f);
            return;
        }

        if let Some(c) = GRAPH_FAILED.captures(text) {
            out.engine(id::SGLANG);
            out.phase(PhaseMark::CudaGraphCapture);
            // Only an out-of-memory capture failure is an incident; the PyTorch recogniser
            // reads the embedded OOM from this same line, this wrapper names SGLang.
            let (err, at) = c
                .name("err")
                .map(|m| (m.as_str(), m.start()))
                .unwrap_or(("", 0));
            if err.contains("out of memory") || err.contains("OutOfMemory") {
                let mut f = Failure::new("device-oom", id::SGLANG, Domain::Device);
                f.wrapper = true;
                super::serving::embed_torch_oom(&mut f, err, at);
                out.failure(f);
            }
            return;
        }

        if let Some(c) = RETRACT.captures(text) {
            out.engine(id::SGLANG);
            out.phase(PhaseMark::Serving);
            let n = num_of(&c, "n");
            if let Some((v, sp)) = n {
                out.fact("sglang.retracted_requests", v, Some(sp));
            }
            // One retraction is SGLang working as designed; the third within a few hundred
            // lines is a storm that throughput and latency pay for.
            if count_preceding(line, 300, is_retraction) >= 2 {
                let mut f = Failure::new("kv-exhausted", id::SGLANG, Domain::Device);
                if let Some((v, sp)) = n {
                    f.fact("sglang.retracted_requests", v, Some(sp));
                }
                out.failure(f);
            }
            return;
        }

        if POOL_OOM.is_match(text) {
            out.engine(id::SGLANG);
            out.phase(PhaseMark::Serving);
            let mut f = Failure::new("kv-exhausted", id::SGLANG, Domain::Device);
            // The counts follow on the same line (a packed message) or the next two.
            let mut joined = text.to_string();
            let mut used = 0;
            for next in line.following(2) {
                if POOL_REQ.is_match(&next.text) || POOL_AVAIL.is_match(&next.text) {
                    joined.push(' ');
                    joined.push_str(next.text.trim());
                    used += 1;
                } else {
                    break;
                }
            }
            let same_line = used == 0;
            if let Some(c) = POOL_REQ.captures(&joined) {
                if let Some((v, sp)) = num_of(&c, "t") {
                    f.fact("sglang.requested_tokens", v, same_line.then_some(sp));
                }
            }
            if let Some(c) = POOL_AVAIL.captures(&joined) {
                if let Some((v, sp)) = num_of(&c, "a") {
                    f.fact("sglang.available_tokens", v, same_line.then_some(sp));
                }
            }
            if used > 0 {
                f.text = Some(joined);
                out.consume(used);
            }
            out.failure(f);
            return;
        }

        if text.contains(REQ_SLOTS) {
            out.engine(id::SGLANG);
            out.phase(PhaseMark::Serving);
            let mut f = Failure::new("kv-exhausted", id::SGLANG, Domain::Device);
            f.fact("sglang.req_slots_exhausted", true, None);
            out.failure(f);
            return;
        }

        self.accounting(text, out);
    }
}

impl Sglang {
    fn accounting(&self, text: &str, out: &mut Emit) {
        if let Some(c) = WEIGHT_BEGIN.captures(text) {
            gib_fact(out, &c, "f", "sglang.avail_before_weights_bytes");
            out.phase(PhaseMark::ModelLoad);
        } else if let Some(c) = WEIGHT_END.captures(text) {
            gib_fact(out, &c, "f", "sglang.avail_after_weights_bytes");
            gib_fact(out, &c, "w", "model.weights_bytes");
            if let Some(m) = c.name("dtype") {
                let d = m.as_str().trim_start_matches("torch.");
                if crate::facts::derive::dtype_bytes(d).is_some() {
                    out.fact("model.dtype", d, Some((m.start(), m.end())));
                }
            }
            out.phase(PhaseMark::EngineStartup);
        } else if let Some(c) = PROFILED.captures(text) {
            if let Some((v, sp)) = num_of(&c, "cfg") {
                out.fact("sglang.max_total_tokens", v, Some(sp));
            }
            if let Some(m) = c.name("p") {
                if let Ok(v) = m.as_str().parse::<f64>() {
                    out.fact("sglang.profiled_kv_tokens", v, Some((m.start(), m.end())));
                }
            }
            out.phase(PhaseMark::EngineStartup);
        } else if text.contains("is allocated.") || text.contains("KV cache allocated") {
            if !(text.contains("KV Cache") || text.contains("KV cache")) {
                return;
            }
            if let Some(c) = KV_TOKENS.captures(text) {
                if let Some((v, sp)) = num_of(&c, "t") {
                    out.fact("sglang.kv_tokens", v, Some(sp));
                }
            }
            if let Some(c) = KV_SIZES.captures(text) {
                if let (Some(k), Some(v)) = (
                    c.name("k").and_then(|m| gib(m.as_str())),
                    c.name("v").and_then(|m| gib(m.as_str())),
                ) {
                    let sp = c.get(0).map(|m| (m.start(), m.end()));
                    out.fact("sglang.kv_cache_bytes", k + v, sp);
                }
            } else if let Some(c) = KV_SIZE_MLA.captures(text) {
                gib_fact(out, &c, "kv", "sglang.kv_cache_bytes");
            }
            out.phase(PhaseMark::EngineStartup);
        } else if let Some(c) = POOL_END.captures(text) {
            gib_fact(out, &c, "f", "sglang.avail_after_kv_bytes");
            out.phase(PhaseMark::EngineStartup);
        } else if let Some(c) = LIMITS.captures(text) {
            if let Some((v, sp)) = num_of(&c, "t") {
                out.fact("sglang.kv_tokens", v, Some(sp));
            }
            for c in LIMIT_FIELDS.captures_iter(text) {
                let name = match &c["k"] {
                    "chunked_prefill_size" => "sglang.chunked_prefill_size",
                    "max_prefill_tokens" => "sglang.max_prefill_tokens",
                    "max_running_requests" => "sglang.max_running_requests",
                    "context_len" => "sglang.context_length",
                    _ => continue,
                };
                if let Some((v, sp)) = num_of(&c, "v") {
                    out.fact(name, v, Some(sp));
                }
            }
            out.phase(PhaseMark::EngineStartup);
        } else if let Some(c) = GRAPH_END.captures(text) {
            gib_fact(out, &c, "g", "sglang.cuda_graph_bytes");
            out.phase(PhaseMark::Warmup);
        } else if let Some(c) = GRAPH_BEGIN.captures(text) {
            gib_fact(out, &c, "f", "sglang.avail_before_graph_bytes");
            out.phase(PhaseMark::CudaGraphCapture);
        } else if let Some(c) = BATCH_STATS.captures(text) {
            if let Some((v, sp)) = num_of(&c, "u") {
                out.fact("sglang.token_usage", v, Some(sp));
            }
            if let Some(c) = STATS_RUNNING.captures(text) {
                if let Some((v, sp)) = num_of(&c, "n") {
                    out.fact("sglang.running_requests", v, Some(sp));
                }
            }
            if let Some(c) = STATS_QUEUE.captures(text) {
                if let Some((v, sp)) = num_of(&c, "n") {
                    out.fact("sglang.queue_requests", v, Some(sp));
                }
            }
            out.phase(PhaseMark::Serving);
        } else if text.contains("fired up and ready to roll") {
            out.phase(PhaseMark::Serving);
        } else {
            return;
        }
        out.engine(id::SGLANG);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::evidence::Value;
    use crate::ingest::log::engines::Observation;

    const GIB: f64 = 1073741824.0;

    fn run(raw: &str) -> Emit {
        crate::ingest::log::engines::run_line(&Sglang, raw)
    }

    fn fact(out: &Emit, name: &str) -> Option<Value> {
        crate::ingest::log::engines::emitted_fact(out, name)
    }

    fn failure(out: &Emit) -> Option<Failure> {
        crate::ingest::log::engines::emitted_failure(out)
    }

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() <= b.abs() * 0.0001 + 1.0)
    }

    /// The tensor-parallel balance check: raised, a start-up failure with its figures;
    /// logged as a warning, only the figures.
    #[test]
    fn unbalanced_memory_across_the_group() {
        let raised = run(
            "ValueError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes. min_per_gpu_memory=62.41, local_gpu_memory=78.83, local_gpu_memory * 0.9=70.947",
        );
        let f = failure(&raised).expect("a failure");
        assert_eq!((f.kind, f.engine), ("engine-budget", id::SGLANG));
        let num = |out: &Emit, name: &str| match fact(out, name) {
            Some(Value::Num(n)) => Some(n),
            _ => None,
        };
        assert!(close(num(&raised, "sglang.tp_min_free_bytes"), 62.41 * GIB));
        assert!(close(
            num(&raised, "sglang.tp_local_free_bytes"),
            78.83 * GIB
        ));
        assert_eq!(
            fact(&raised, "sglang.tp_memory_unbalanced"),
            Some(Value::Bool(true))
        );
        let old = run(
            "ValueError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes.",
        );
        assert!(failure(&old).is_some());
        let warned = run(
            "[2025-09-22 14:02:59 TP1] The memory capacity is unbalanced. Some GPUs may be occupied by other processes. pre_model_load_memory=41.6, local_gpu_memory=46.2, local_gpu_memory * 0.9=41.58",
        );
        assert!(failure(&warned).is_none());
        assert!(close(num(&warned, "sglang.tp_min_free_bytes"), 41.6 * GIB));
    }

    #[test]
    fn every_accounting_wording() {
        let rows: &[(&str, &str, &str, f64)] = &[
            (
                "S-1 begin",
                "[2025-03-29 18:12:45 TP0] Load weight begin. avail mem=23.40 GB",
                "sglang.avail_before_weights_bytes",
                23.40 * GIB,
            ),
            (
                "S-1 end 0.4",
                "[2025-03-29 18:12:58 TP0] Load weight end. type=Gemma3ForConditionalGeneration, dtype=torch.bfloat16, avail mem=7.15 GB, mem usage=16.25 GB.",
                "model.weights_bytes",
                16.25 * GIB,
            ),
            (
                "S-1 end 0.3",
                "[2024-10-22 06:31:40 TP0] Load weight end. type=Phi3ForCausalLM, dtype=torch.bfloat16, avail mem=14.22 GB",
                "sglang.avail_after_weights_bytes",
                14.22 * GIB,
            ),
            (
                "profiled",
                "[2025-07-02 07:41:59 DP0 TP0] max_total_tokens=131072 is larger than the profiled value -561981. Use the profiled value instead.",
                "sglang.profiled_kv_tokens",
                -561981.0,
            ),
            (
                "S-4 0.4",
                "[2025-03-29 18:13:01 TP0] KV Cache is allocated. #tokens: 520000, K size: 31.74 GB, V size: 31.74 GB",
                "sglang.kv_cache_bytes",
                63.48 * GIB,
            ),
            (
                "S-4 tokens",
                "KV Cache is allocated. #tokens: 520000, K size: 31.74 GB, V size: 31.74 GB",
                "sglang.kv_tokens",
                520000.0,
            ),
            (
                "S-4 MLA",
                "[2025-05-01 10:00:00 TP3] KV Cache is allocated. #tokens: 1200000, KV size: 40.10 GB",
                "sglang.kv_cache_bytes",
                40.10 * GIB,
            ),
            (
                "S-4 0.5.2x",
                "[2026-01-10 10:00:00 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 88000, K size: 5.37 GB, V size: 5.37 GB",
                "sglang.kv_tokens",
                88000.0,
            ),
            (
                "S-4 post-capture",
                "Post-capture KV sizing: KV cache allocated. dtype: torch.float8_e5m2, #tokens: 300000, KV size: 9.16 GB, avail mem=3.10 GB",
                "sglang.kv_cache_bytes",
                9.16 * GIB,
            ),
            (
                "S-5",
                "[2024-10-22 06:31:49 TP0] Memory pool end. avail mem=8.38 GB",
                "sglang.avail_after_kv_bytes",
                8.38 * GIB,
            ),
            (
                "S-6 0.4",
                "[2025-03-29 18:13:05 TP0] max_total_num_tokens=520000, chunked_prefill_size=2048, max_prefill_tokens=16384, max_running_requests=4097, context_len=4096",
                "sglang.kv_tokens",
                520000.0,
            ),
            (
                "S-6 0.5",
                "max_total_num_tokens=88000, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=2048, context_len=131072, available_gpu_mem=7.95 GB",
                "sglang.max_running_requests",
                2048.0,
            ),
            (
                "S-6 0.3",
                "max_total_num_tokens=183000, max_prefill_tokens=16384, max_running_requests=2047, context_len=8192",
                "sglang.context_length",
                8192.0,
            ),
            (
                "S-7 begin",
                "[2024-10-22 06:31:49 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=8.38 GB",
                "sglang.avail_before_graph_bytes",
                8.38 * GIB,
            ),
            (
                "S-7 end",
                "[2025-03-29 18:13:20 TP0] Capture cuda graph end. Time elapsed: 14.21 s. mem usage=1.21 GB. avail mem=5.93 GB.",
                "sglang.cuda_graph_bytes",
                1.21 * GIB,
            ),
            (
                "S-7 end 0.5",
                "Capture piecewise CUDA graph end. Time elapsed: 30.02 s. mem usage=2.10 GB, avail mem=4.00 GB.",
                "sglang.cuda_graph_bytes",
                2.10 * GIB,
            ),
            (
                "S-9 0.3",
                "[2024-09-01 10:00:00 TP0] Decode out of memory happened. #retracted_reqs: 12, #new_token_ratio: 0.4000 -> 0.6000",
                "sglang.retracted_requests",
                12.0,
            ),
            (
                "S-9 0.5",
                "[2026-01-10 10:00:00 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_tokens_gained: 1024, #new_token_ratio: 0.3000 -> 0.5000",
                "sglang.retracted_requests",
                3.0,
            ),
            (
                "S-11 decode",
                "[2025-09-13 09:09:15 TP0] Decode batch. #running-req: 36, #token: 51234, token usage: 0.98, cuda graph: True, gen throughput (token/s): 1234.50, #queue-req: 12",
                "sglang.token_usage",
                0.98,
            ),
            (
                "S-11 prefill",
                "Prefill batch. #new-seq: 4, #new-token: 8192, #cached-token: 0, token usage: 0.71, #running-req: 20, #queue-req: 5",
                "sglang.queue_requests",
                5.0,
            ),
            (
                "S-11 0.5.2x",
                "Decode batch[1200], #running-req: 8, #token: 4000, token usage: 0.05, cuda graph: True, gen throughput (token/s): 800.00, #queue-req: 0",
                "sglang.running_requests",
                8.0,
            ),
        ];
        for (id, line, name, want) in rows {
            let out = run(line);
            let got = fact(&out, name).and_then(|v| v.as_f64());
            assert!(close(got, *want), "{id}: {name} = {got:?}, want {want}");
            assert!(
                out.records
                    .iter()
                    .any(|r| matches!(r.obs, Observation::Engine(id::SGLANG))),
                "{id}"
            );
        }
    }

    #[test]
    fn every_failure_wording() {
        let rows: &[(&str, &str, &str, &str, f64)] = &[
            (
                "S-3 cut short",
                "RuntimeError: Not enough memory. Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.88. Please try a larger value.",
                "no-kv-memory",
                "sglang.mem_fraction_static",
                0.88,
            ),
            (
                "S-2",
                "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
                "no-kv-memory",
                "",
                0.0,
            ),
            (
                "S-2 0.5.23",
                "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.2",
                "no-kv-memory",
                "sglang.mem_fraction_static",
                0.2,
            ),
            (
                "S-2 self",
                "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: self.server_args.mem_fraction_static=0.35",
                "no-kv-memory",
                "sglang.mem_fraction_static",
                0.35,
            ),
            (
                "S-3",
                "RuntimeError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.7. Raise --mem-fraction-static above 0.812 (minimum viable = 1 - available/pre = 0.7912). If using speculative decoding, draft weights are now counted.",
                "no-kv-memory",
                "sglang.suggested_mem_fraction",
                0.812,
            ),
            (
                "S-8",
                "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 MiB. GPU 7 has a total capacity of 95.00 GiB of which 300.00 MiB is free.",
                "device-oom",
                "",
                0.0,
            ),
            (
                "S-10 packed",
                "RuntimeError: Prefill out of memory. Try to lower your batch size.\\nTry to allocate 9000 tokens.\\nAvailable tokens: 4000",
                "kv-exhausted",
                "sglang.requested_tokens",
                9000.0,
            ),
            (
                "S-10 decode",
                "RuntimeError: Decode out of memory. Try to lower your batch size. Try to allocate 64 tokens. Available tokens: 10",
                "kv-exhausted",
                "sglang.available_tokens",
                10.0,
            ),
            (
                "req slots",
                "RuntimeError: alloc_req_slots runs out of memory. Please set a smaller number for `--max-running-requests`. self.req_to_token_pool.available_size()=1, num_reqs=2,",
                "kv-exhausted",
                "",
                0.0,
            ),
        ];
        for (id, line, kind, name, want) in rows {
            let out = run(line);
            let f = failure(&out).unwrap_or_else(|| panic!("{id}: no failure"));
            assert_eq!(f.kind, *kind, "{id}");
            if !name.is_empty() {
                let got = f.get(name).and_then(Value::as_f64);
                assert!(close(got, *want), "{id}: {name} = {got:?}");
            }
        }
        // S-8 wraps the PyTorch OOM on the same line.
        assert!(failure(&run("Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 MiB.")).unwrap().wrapper);
    }

    #[test]
    fn server_args_and_command_lines() {
        let out = run(
            "[2025-03-29 18:12:40] server_args=ServerArgs(model_path='/llm/model/google/gemma-3-27b-it-int4-awq/', tokenizer_path='/llm/model/x', dtype='auto', kv_cache_dtype='auto', quantization=None, context_length=4096, mem_fraction_static=0.88, max_running_requests=None, max_total_tokens=None, chunked_prefill_size=2048, max_prefill_tokens=16384, tp_size=1, dp_size=1, cuda_graph_max_bs=160, disable_cuda_graph=False, enable_torch_compile=False)",
        );
        assert!(
            out.records
                .iter()
                .any(|r| matches!(r.obs, Observation::RunStart))
        );
        assert_eq!(
            fact(&out, "sglang.mem_fraction_static"),
            Some(Value::Num(0.88))
        );
        assert_eq!(
            fact(&out, "sglang.context_length"),
            Some(Value::Num(4096.0))
        );
        assert_eq!(
            fact(&out, "sglang.cuda_graph_max_bs"),
            Some(Value::Num(160.0))
        );
        assert_eq!(
            fact(&out, "sglang.disable_cuda_graph"),
            Some(Value::Bool(false))
        );
        assert_eq!(fact(&out, "sglang.max_running_requests"), None);
        assert_eq!(
            fact(&out, "model.name"),
            Some(Value::str("/llm/model/google/gemma-3-27b-it-int4-awq/"))
        );
        let out = run(
            "python3 -m sglang.launch_server --model-path Qwen/Qwen2.5-72B-Instruct --tp 2 --dp 2 --mem-fraction-static 0.8 --chunked-prefill-size 8192 --context-length 32768 --enable-torch-compile --kv-cache-dtype fp8_e5m2",
        );
        assert_eq!(fact(&out, "sglang.tp_size"), Some(Value::Num(2.0)));
        assert_eq!(
            fact(&out, "sglang.mem_fraction_static"),
            Some(Value::Num(0.8))
        );
        assert_eq!(
            fact(&out, "sglang.enable_torch_compile"),
            Some(Value::Bool(true))
        );
        assert_eq!(
            fact(&out, "sglang.kv_cache_dtype"),
            Some(Value::str("fp8_e5m2"))
        );
    }

    #[test]
    fn look_alikes_are_not_failures() {
        for line in [
            // The pool allocator's self-check: an engine bug, not an OOM (see module doc).
            "ValueError: token_to_kv_pool_allocator memory leak detected! available_size=1000, protected_size=0, self.max_total_num_tokens=520000",
            // A single retraction is SGLang's normal preemption.
            "[2026-01-10 10:00:00 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: 512, #new_token_ratio: 0.3000 -> 0.4000",
            // A capture failure that is not about memory.
            "Exception: Capture cuda graph failed: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer",
        ] {
            assert!(failure(&run(line)).is_none(), "{line}");
        }
    }
}
