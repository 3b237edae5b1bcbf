//! HuggingFace Text Generation Inference (TGI): the launcher's `Args { ... }` dump and
//! command lines, warm-up, the prefill-token and max-total-tokens errors, the KV capacity it
//! infers, and the launcher's VRAM arithmetic, v0.9 to 3.x (`ENGINE-MESSAGES.md` §5).
//!
//! TGI warms up by running the largest prefill batch its settings allow; when that OOMs the
//! shard raises `Not enough memory to handle N prefill tokens` *from* the PyTorch OOM, and
//! the router and launcher repeat it. These restatements are wrappers: the PyTorch OOM next
//! to them carries the numbers, the wrapper names TGI and the prefill size. The launcher's
//! sizes are decimal (`24.00GB` = 24 x 10^9 bytes).
//!
//! With `--json-output` every line is a JSON object; `logscan::clean` unwraps its message
//! so the same patterns apply.
use std::sync::LazyLock;

use regex::Regex;

use super::serving::{
    Key, Kind, key, parse_count, re, read_flags, read_key_values, size, start_already_seen,
};
use super::{Domain, Emit, Failure, Line, PhaseMark, Recognizer, id};
use crate::facts::units::SiBase;

const KEYS: &[Key] = &[
    key(
        // `max_prefill_tokens`: the router's warm-up span (`warmup{max_input_length=512
        // max_prefill_tokens=512 max_total_tokens=2048}`) names the same setting.
        &["max_batch_prefill_tokens", "max_prefill_tokens"],
        "tgi.max_batch_prefill_tokens",
        Kind::Num,
    ),
    key(&["max_total_tokens"], "tgi.max_total_tokens", Kind::Num),
    key(
        &["max_input_tokens", "max_input_length"],
        "tgi.max_input_tokens",
        Kind::Num,
    ),
    key(
        &["max_batch_total_tokens"],
        "tgi.max_batch_total_tokens",
        Kind::Num,
    ),
    key(&["max_batch_size"], "tgi.max_batch_size", Kind::Num),
    key(
        &["max_concurrent_requests"],
        "tgi.max_concurrent_requests",
        Kind::Num,
    ),
    key(
        &["cuda_memory_fraction"],
        "tgi.cuda_memory_fraction",
        Kind::Ratio,
    ),
    key(&["num_shard"], "tgi.num_shard", Kind::Num),
    key(&["quantize"], "tgi.quantize", Kind::Text),
    key(&["dtype"], "tgi.dtype", Kind::Dtype),
    key(&["kv_cache_dtype"], "tgi.kv_cache_dtype", Kind::Text),
    key(&["cuda_graphs"], "tgi.cuda_graphs", Kind::Text),
    key(&["model_id"], "model.name", Kind::Text),
];

static COMMAND: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?:^|[\s/'\x22$])(?:text-generation-launcher\s+--|ghcr\.io/huggingface/text-generation-inference\S*)",
    )
});
static VERSION: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"text-generation-inference:(?P<v>\d+\.\d+(?:\.\d+)?)|Docker label: sha-\w+|TGI version:? (?P<v2>\d+\.\d+(?:\.\d+)?)",
    )
});
/// T-1 (v0.9+), including the v0.9 "total tokens with N prefill tokens" form.
static PREFILL_OOM: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Not enough memory to handle (?:(?P<total>\d+) total tokens with )?(?P<n>\d+) prefill tokens",
    )
});
/// T-3, as the router displays it and as the launcher's `Error: ...` debug-prints it.
static TOTAL_OOM: LazyLock<Regex> = LazyLock::new(|| {
    re(r"Not enough memory to handle `max_total_tokens=(?P<n>\d+)`|NotEnoughMemory\((?P<n2>\d+)\)")
});
/// T-4.
static KV_TOKENS: LazyLock<Regex> = LazyLock::new(|| {
    re(r"(?:Inferred max batch total tokens:|Setting max batch total tokens to) (?P<n>\d+)")
});
/// T-5.
static KV_BLOCKS: LazyLock<Regex> =
    LazyLock::new(|| re(r"KV-cache blocks: (?P<b>\d+), size: (?P<s>\d+)"));
/// T-6.
static GRAPHS: LazyLock<Regex> =
    LazyLock::new(|| re(r"Cuda Graphs are (?:enabled for sizes (?P<l>\[[^\]]*\])|disabled)"));
/// T-7.
static DEFAULT_PREFILL: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?:Default `max_batch_prefill_tokens` to|Reducing the max batch prefill from \d+ to) (?P<n>\d+)",
    )
});
static VRAM_PLAN: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Available vram (?P<a>{U})\s?(?P<au>[kKMGT]?B): model needs (?P<m>{U})\s?(?P<mu>[kKMGT]?B), every tokens requires (?P<t>{U})\s?(?P<tu>[kKMGT]?B), maximum allocatable tokens (?P<n>\d+)",
    )
});
static VRAM_SHORT: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Not enough VRAM to run the model: Available: (?P<a>{U})\s?(?P<au>[kKMGT]?B) - Model (?P<m>{U})\s?(?P<mu>[kKMGT]?B)",
    )
});
/// T-9: the shard died of SIGKILL.
/// The launcher giving up on a shard that never became ready.
static SHARD_START_FAILED: LazyLock<Regex> =
    LazyLock::new(|| re(r"Shard \d+ failed to start|Error: ShardCannotStart"));
static SHARD_KILLED: LazyLock<Regex> = LazyLock::new(|| {
    re(r"Shard (?:process )?(?:\d+ )?(?:was )?signaled to shutdown with signal (?P<s>9|SIGKILL)\b")
});

/// TGI's settings as environment variables, upper case as the launcher reads them.
const ENV_KEYS: &[&str] = &[
    "MAX_BATCH_PREFILL_TOKENS",
    "MAX_TOTAL_TOKENS",
    "MAX_INPUT_TOKENS",
    "MAX_INPUT_LENGTH",
    "MAX_BATCH_TOTAL_TOKENS",
    "CUDA_MEMORY_FRACTION",
    "NUM_SHARD",
];

fn is_start(t: &str) -> bool {
    t.contains("Args {") && t.contains("model_id") || is_command(t)
}

fn is_command(t: &str) -> bool {
    COMMAND.is_match(t) && !t.contains("File \"")
}

fn num_of(c: &regex::Captures<'_>, g: &str) -> Option<(f64, (usize, usize))> {
    let m = c.name(g)?;
    parse_count(m.as_str()).map(|v| (v, (m.start(), m.end())))
}

fn decimal(c: &regex::Captures<'_>, n: &str, u: &str) -> Option<(f64, (usize, usize))> {
    let (num, unit) = (c.name(n)?, c.name(u)?);
    size(num.as_str(), unit.as_str(), SiBase::Decimal).map(|v| (v, (num.start(), unit.end())))
}

/// The TGI recogniser.
pub struct Tgi;

impl Recognizer for Tgi {
    fn engine(&self) -> &'static str {
        id::TGI
    }

    fn anchors(&self) -> &'static [&'static str] {
        &[
            "Args {",
            "text-generation-launcher",
            "failed to start",
            "ShardCannotStart",
            // Flags on the lines of a command continued with backslashes.
            "--model-id",
            "--quantize",
            "--num-shard",
            "--max-input-length",
            "--max-total-tokens",
            "text-generation-inference",
            "max_batch_prefill_tokens",
            "max-batch-prefill-tokens",
            "Not enough memory to handle",
            "max batch total tokens",
            "KV-cache blocks:",
            "Cuda Graphs are",
            "Available vram",
            "Not enough VRAM",
            "Warming up model",
            "Method Warmup",
            // 2023's router: `thread 'main' panicked at 'Unable to warmup model: ...`.
            "Unable to warmup",
            "signaled to shutdown",
            "NotEnoughMemory(",
            "MAX_TOTAL_TOKENS",
            "MAX_INPUT_",
            "CUDA_MEMORY_FRACTION",
            "NUM_SHARD",
            "text_generation_server/",
            "text_generation_client",
            "text_generation_router",
        ]
    }

    fn recognize(&self, line: &Line<'_>, out: &mut Emit) {
        let text = line.text;
        // A traceback frame in the Python shard names the engine.
        if super::serving::quoted_code_or_frame(text, &["text_generation_server/"], id::TGI, out) {
            return;
        }
        if super::serving::continues_command(line, is_command) {
            read_flags(line, KEYS, out);
            return;
        }

        if is_start(text) {
            if !start_already_seen(line, is_start, is_command) {
                out.run_start();
            }
            out.engine(id::TGI);
            if is_command(text) {
                read_flags(line, KEYS, out);
                // `docker run -e MAX_TOTAL_TOKENS=8192 ...`
                read_key_values(text, KEYS, out);
                if let Some(c) = VERSION.captures(text) {
                    if let Some(m) = c.name("v") {
                        out.fact("tgi.version", m.as_str(), Some((m.start(), m.end())));
                    }
                }
            } else {
                read_key_values(text, KEYS, out);
            }
            return;
        }

        if let Some(c) = TOTAL_OOM.captures(text) {
            out.engine(id::TGI);
            out.phase(PhaseMark::Warmup);
            let mut f = Failure::new("kv-capacity", id::TGI, Domain::Device);
            if let Some((v, sp)) = num_of(&c, "n").or_else(|| num_of(&c, "n2")) {
                f.fact("tgi.max_total_tokens", v, Some(sp));
            }
            out.failure(f);
            return;
        }

        if let Some(c) = PREFILL_OOM.captures(text) {
            out.engine(id::TGI);
            out.phase(PhaseMark::Warmup);
            // Raised from the PyTorch OOM of the warm-up batch, then repeated by the router
            // and the launcher: a wrapper.
            let mut f = Failure::new("device-oom", id::TGI, Domain::Device);
            f.wrapper = true;
            if let Some((v, sp)) = num_of(&c, "n") {
                f.fact("tgi.prefill_tokens", v, Some(sp));
            }
            if let Some((v, sp)) = num_of(&c, "total") {
                f.fact("tgi.max_batch_total_tokens", v, Some(sp));
            }
            super::serving::embed_torch_oom(&mut f, text, 0);
            out.failure(f);
            // The router's `warmup{...}` span states the settings the warm-up ran with.
            if text.contains("warmup{") {
                read_key_values(text, KEYS, out);
            }
            return;
        }

        if let Some(m) = SHARD_START_FAILED.find(text) {
            out.engine(id::TGI);
            out.fact("tgi.shard_start_failed", true, Some((m.start(), m.end())));
            return;
        }
        if let Some(c) = SHARD_KILLED.captures(text) {
            out.engine(id::TGI);
            let m = c.name("s").expect("group s");
            let mut f = Failure::new("host-oom", id::TGI, Domain::Host);
            f.fact("host.killer", "unknown", None)
                .fact("host.signal", "KILL", Some((m.start(), m.end())))
                .fact("host.exit_code", 137u32, None)
                .fact("host.victim_name", "text-generation-server shard", None);
            out.failure(f);
            return;
        }

        // The router's tracing spans name the request being served:
        // `batch{batch_size=1}:prefill:prefill{id=9 size=1}: text_generation_client: ...`.
        if text.contains("text_generation_client") || text.contains("text_generation_router") {
            out.engine(id::TGI);
            // A request it finished (`generate_stream{...}: text_generation_router::server:
            // router/src/server.rs:452: Success`) is serving too.
            if !text.contains("warmup{")
                && (text.contains(":prefill")
                    || text.contains(":decode")
                    || text.trim_end().ends_with(": Success"))
            {
                out.phase(PhaseMark::Serving);
            }
        }

        let mut seen = true;
        if let Some(c) = KV_TOKENS.captures(text) {
            if let Some((v, sp)) = num_of(&c, "n") {
                out.fact("tgi.kv_tokens", v, Some(sp));
            }
            if text.contains("Setting max batch total tokens") {
                // Warm-up succeeded; the router serves from here on.
                out.phase(PhaseMark::Serving);
            }
        } else if let Some(c) = KV_BLOCKS.captures(text) {
            if let (Some((b, sp)), Some((s, _))) = (num_of(&c, "b"), num_of(&c, "s")) {
                out.fact("tgi.kv_tokens", b * s, Some(sp));
            }
            out.phase(PhaseMark::Warmup);
        } else if let Some(c) = GRAPHS.captures(text) {
            match c.name("l") {
                Some(m) => out.fact("tgi.cuda_graphs", m.as_str(), Some((m.start(), m.end()))),
                None => out.fact("tgi.cuda_graphs", "0", None),
            }
        } else if let Some(c) = DEFAULT_PREFILL.captures(text) {
            if let Some((v, sp)) = num_of(&c, "n") {
                out.fact("tgi.max_batch_prefill_tokens", v, Some(sp));
            }
        } else if let Some(c) = VRAM_PLAN.captures(text) {
            if let Some((v, sp)) = decimal(&c, "a", "au") {
                out.fact("tgi.vram_available_bytes", v, Some(sp));
            }
            if let Some((v, sp)) = decimal(&c, "m", "mu") {
                out.fact("model.weights_bytes", v, Some(sp));
            }
            if let Some((v, sp)) = decimal(&c, "t", "tu") {
                out.fact("tgi.bytes_per_token", v, Some(sp));
            }
            if let Some((v, sp)) = num_of(&c, "n") {
                out.fact("tgi.vram_max_tokens", v, Some(sp));
            }
        } else if let Some(c) = VRAM_SHORT.captures(text) {
            if let Some((v, sp)) = decimal(&c, "a", "au") {
                out.fact("tgi.vram_available_bytes", v, Some(sp));
            }
            if let Some((v, sp)) = decimal(&c, "m", "mu") {
                out.fact("model.weights_bytes", v, Some(sp));
            }
        } else if text.contains("Warming up model") || text.contains("Method Warmup") {
            out.phase(PhaseMark::Warmup);
        } else if text.contains("Unable to warmup") {
            // The router's own words: the warm-up batch (`--max-batch-prefill-tokens`) failed.
            out.engine(id::TGI);
            out.phase(PhaseMark::Warmup);
        } else if super::serving::is_argument_item(text) && text.contains("--") {
            // A command line as a YAML / list item (`- --max-batch-prefill-tokens=4096`). Only
            // a flag TGI has names the engine: `--max-model-len` in a pod spec is vLLM's.
            seen = read_flags(line, KEYS, out) > 0;
        } else if ENV_KEYS.iter().any(|k| text.contains(k)) {
            // Settings passed as environment (`- MAX_TOTAL_TOKENS=8192`, `-e ...`).
            seen = read_key_values(text, KEYS, out) > 0;
        } else {
            seen = false;
        }
        if seen {
            out.engine(id::TGI);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::evidence::Value;
    use crate::ingest::log::engines::Observation;

    fn run(raw: &str) -> Emit {
        crate::ingest::log::engines::run_line(&Tgi, raw)
    }

    fn fact(out: &Emit, name: &str) -> Option<Value> {
        crate::ingest::log::engines::emitted_fact(out, name)
    }

    fn failure(out: &Emit) -> Option<Failure> {
        crate::ingest::log::engines::emitted_failure(out)
    }

    #[test]
    fn every_accounting_wording() {
        let rows: &[(&str, &str, &str, f64)] = &[
            (
                "T-4 inferred",
                "2024-04-30T10:26:40.120000Z  WARN text_generation_router: router/src/main.rs:232: Inferred max batch total tokens: 425472",
                "tgi.kv_tokens",
                425472.0,
            ),
            (
                "T-4 setting",
                "2024-04-30T10:26:40.120000Z  INFO text_generation_router: router/src/main.rs:239: Setting max batch total tokens to 367184",
                "tgi.kv_tokens",
                367184.0,
            ),
            (
                "T-4 v3",
                "2025-01-10T10:00:00.000000Z  INFO text_generation_router_v3: backends/v3/src/lib.rs:137: Setting max batch total tokens to 50560",
                "tgi.kv_tokens",
                50560.0,
            ),
            (
                "T-5",
                "2025-01-10T09:59:58.000000Z  INFO text_generation_launcher: KV-cache blocks: 3160, size: 16",
                "tgi.kv_tokens",
                50560.0,
            ),
            (
                "T-7 default",
                "2025-01-10T09:59:40.000000Z  INFO text_generation_launcher: Default `max_batch_prefill_tokens` to 4096",
                "tgi.max_batch_prefill_tokens",
                4096.0,
            ),
            (
                "T-7 reducing",
                "2025-01-10T09:59:40.000000Z  INFO text_generation_launcher: Reducing the max batch prefill from 8192 to 2048 because there is not enough VRAM to support it.",
                "tgi.max_batch_prefill_tokens",
                2048.0,
            ),
            (
                "T-7 plan",
                "2025-01-10T09:59:40.000000Z DEBUG text_generation_launcher: Available vram 22.80GB: model needs 16.06GB, every tokens requires 131.07kB, maximum allocatable tokens 51400",
                "tgi.vram_max_tokens",
                51400.0,
            ),
            (
                "T-7 plan model",
                "Available vram 22.80GB: model needs 16.06GB, every tokens requires 131.07kB, maximum allocatable tokens 51400",
                "model.weights_bytes",
                16.06e9,
            ),
            (
                "T-7 short",
                "2025-01-10T09:59:40.000000Z  WARN text_generation_launcher: Not enough VRAM to run the model: Available: 22.80GB - Model 140.00GB.",
                "tgi.vram_available_bytes",
                22.8e9,
            ),
        ];
        for (id, line, name, want) in rows {
            let out = run(line);
            let got = fact(&out, name).and_then(|v| v.as_f64());
            assert!(
                got.is_some_and(|g| (g - want).abs() <= want * 1e-6 + 1.0),
                "{id}: {name} = {got:?}, want {want}"
            );
        }
        let out = run(
            "2025-01-10T09:59:59Z  INFO text_generation_launcher: Cuda Graphs are enabled for sizes [32, 16, 8, 4, 2, 1]",
        );
        assert_eq!(
            fact(&out, "tgi.cuda_graphs"),
            Some(Value::str("[32, 16, 8, 4, 2, 1]"))
        );
    }

    #[test]
    fn every_failure_wording() {
        let rows: &[(&str, &str, &str, &str, f64)] = &[
            (
                "T-1 shard",
                "2024-04-19T11:06:25.868590Z ERROR text_generation_launcher: Method Warmup encountered an error.",
                "",
                "",
                0.0,
            ),
            (
                "T-1",
                "RuntimeError: Not enough memory to handle 4096 prefill tokens. You need to decrease `--max-batch-prefill-tokens`",
                "device-oom",
                "tgi.prefill_tokens",
                4096.0,
            ),
            (
                "T-1 router",
                "2023-10-17T12:00:00.000000Z ERROR warmup{max_input_length=64 max_prefill_tokens=256}:warmup: text_generation_client: router/client/src/lib.rs:33: Server error: Not enough memory to handle 256 prefill tokens. You need to decrease `--max-batch-prefill-tokens`",
                "device-oom",
                "tgi.prefill_tokens",
                256.0,
            ),
            (
                "T-1 launcher",
                "Error: Warmup(Generation(\"Not enough memory to handle 4096 prefill tokens. You need to decrease `--max-batch-prefill-tokens`\"))",
                "device-oom",
                "tgi.prefill_tokens",
                4096.0,
            ),
            (
                "T-1 v0.9",
                "Error: Warmup(Generation(\"Not enough memory to handle 16000 total tokens with 2 prefill tokens. You need to decrease `--max-batch-total-tokens` or `--max-batch-prefill-tokens`\"))",
                "device-oom",
                "tgi.max_batch_total_tokens",
                16000.0,
            ),
            (
                "T-3",
                "2025-01-10T10:00:00.000000Z ERROR text_generation_launcher: Not enough memory to handle `max_total_tokens=32768`",
                "kv-capacity",
                "tgi.max_total_tokens",
                32768.0,
            ),
            (
                "T-2",
                "2024-06-17T13:18:40.000000Z ERROR text_generation_launcher: Unable to warmup the Python model shards: Generation(\"Not enough memory to handle 8192 prefill tokens. You need to decrease `--max-batch-prefill-tokens`\")",
                "device-oom",
                "tgi.prefill_tokens",
                8192.0,
            ),
            (
                "T-8",
                "Error: ArgumentValidation(\"`max_batch_prefill_tokens` must be >= `max_input_tokens`. Given: 4096 and 8000\")",
                "",
                "",
                0.0,
            ),
            (
                "T-3 debug",
                "Error: Backend(V3(NotEnoughMemory(32768)))",
                "kv-capacity",
                "tgi.max_total_tokens",
                32768.0,
            ),
            (
                "T-9",
                "2024-02-01T10:00:00.000000Z ERROR text_generation_launcher: Shard process was signaled to shutdown with signal 9",
                "host-oom",
                "host.exit_code",
                137.0,
            ),
        ];
        for (id, line, kind, name, want) in rows {
            let out = run(line);
            let f = failure(&out);
            if kind.is_empty() {
                assert!(f.is_none(), "{id}");
                continue;
            }
            let f = f.unwrap_or_else(|| panic!("{id}: no failure"));
            assert_eq!(f.kind, *kind, "{id}");
            assert_eq!(f.get(name).and_then(Value::as_f64), Some(*want), "{id}");
        }
        assert!(
            failure(&run("Not enough memory to handle 4096 prefill tokens."))
                .unwrap()
                .wrapper
        );
    }

    #[test]
    fn a_shard_that_failed_to_start() {
        for text in [
            "2023-08-17T10:23:27.032737Z ERROR text_generation_launcher: Shard 0 failed to start",
            "Error: ShardCannotStart",
        ] {
            assert_eq!(
                fact(&run(text), "tgi.shard_start_failed"),
                Some(Value::Bool(true)),
                "{text}"
            );
        }
    }

    #[test]
    fn the_warmup_span_states_the_settings() {
        let out = run(
            "ERROR warmup{max_input_length=512 max_prefill_tokens=512 max_total_tokens=2048}:warmup: text_generation_client: router/client/src/lib.rs:33: Server error: Not enough memory to handle 512 prefill tokens. You need to decrease `--max-batch-prefill-tokens`",
        );
        assert_eq!(fact(&out, "tgi.max_input_tokens"), Some(Value::Num(512.0)));
        assert_eq!(
            fact(&out, "tgi.max_batch_prefill_tokens"),
            Some(Value::Num(512.0))
        );
        assert_eq!(fact(&out, "tgi.max_total_tokens"), Some(Value::Num(2048.0)));
    }

    #[test]
    fn args_and_command_lines() {
        let out = run(
            "2024-04-30T10:25:51.994120Z  INFO text_generation_launcher: Args { model_id: \"/model_data/mistral7b\", revision: None, validation_workers: 2, sharded: None, num_shard: Some(2), quantize: Some(Awq), dtype: None, max_concurrent_requests: 128, max_input_tokens: None, max_input_length: Some(8000), max_total_tokens: Some(8512), waiting_served_ratio: 0.3, max_batch_prefill_tokens: Some(32768), max_batch_total_tokens: None, cuda_memory_fraction: 1.0, kv_cache_dtype: None, json_output: false }",
        );
        assert!(
            out.records
                .iter()
                .any(|r| matches!(r.obs, Observation::RunStart))
        );
        assert_eq!(fact(&out, "tgi.max_input_tokens"), Some(Value::Num(8000.0)));
        assert_eq!(fact(&out, "tgi.max_total_tokens"), Some(Value::Num(8512.0)));
        assert_eq!(
            fact(&out, "tgi.max_batch_prefill_tokens"),
            Some(Value::Num(32768.0))
        );
        assert_eq!(fact(&out, "tgi.num_shard"), Some(Value::Num(2.0)));
        assert_eq!(fact(&out, "tgi.quantize"), Some(Value::str("Awq")));
        assert_eq!(
            fact(&out, "tgi.cuda_memory_fraction"),
            Some(Value::Num(1.0))
        );
        assert_eq!(fact(&out, "tgi.max_batch_total_tokens"), None);
        assert_eq!(
            fact(&out, "model.name"),
            Some(Value::str("/model_data/mistral7b"))
        );
        // v1 printed plain values.
        let out = run(
            "2023-08-22T17:48:37.505854Z  INFO text_generation_launcher: Args { model_id: \"meta-llama/Llama-2-13b-chat-hf\", num_shard: Some(4), max_input_length: 4096, max_total_tokens: 8192, max_batch_prefill_tokens: 8192, max_batch_total_tokens: 16000 }",
        );
        assert_eq!(
            fact(&out, "tgi.max_batch_total_tokens"),
            Some(Value::Num(16000.0))
        );
        let out = run(
            "docker run --gpus all --shm-size 1g -e MAX_TOTAL_TOKENS=4096 -p 8080:80 ghcr.io/huggingface/text-generation-inference:2.4.1 --model-id meta-llama/Llama-3.1-8B-Instruct --max-batch-prefill-tokens 16384 --max-input-tokens 3072 --cuda-graphs 0",
        );
        assert_eq!(fact(&out, "tgi.max_total_tokens"), Some(Value::Num(4096.0)));
        assert_eq!(
            fact(&out, "tgi.max_batch_prefill_tokens"),
            Some(Value::Num(16384.0))
        );
        assert_eq!(fact(&out, "tgi.cuda_graphs"), Some(Value::str("0")));
        assert_eq!(fact(&out, "tgi.version"), Some(Value::str("2.4.1")));
        // The launcher's advice names flags with values; it configures nothing.
        let out = run(
            "2024-06-17T13:18:29.371622Z  INFO text_generation_launcher: Model supports up to 32768 but tgi will now set its default to 4096 instead. This is to save VRAM by refusing large prompts in order to allow more users on the same hardware. You can increase that size using `--max-batch-prefill-tokens=32818 --max-total-tokens=32768 --max-input-tokens=32767`.",
        );
        assert_eq!(fact(&out, "tgi.max_total_tokens"), None);
        // Environment settings in a compose file.
        let out = run("      - MAX_TOTAL_TOKENS=8192");
        assert_eq!(fact(&out, "tgi.max_total_tokens"), Some(Value::Num(8192.0)));
    }
}
