//! Helpers shared by the LLM-serving recognisers (vLLM, SGLang, TGI, TensorRT-LLM).
//!
//! The serving engines print their configuration in four shapes that differ only in
//! punctuation: Python reprs (`max_seq_len=131072`, `ServerArgs(mem_fraction_static=0.88)`),
//! dicts (`'max_model_len': 32768`), Rust `Debug` dumps (`max_total_tokens: Some(8192)`) and
//! command lines (`--max-model-len 32k`, `--max_model_len=32768`, a YAML list item whose
//! value sits on the next line). One key table per engine maps every spelling of a setting
//! to its catalogued fact; this module reads the shapes.
//!
//! It also decides when an engine's start line is a **restart**: one start prints several
//! start-like lines (the command line, the API server's version, the argument dump, the
//! engine core's config), so only the first of a cluster resets the context.

use std::sync::LazyLock;

use regex::Regex;

use super::{Emit, Line};
use crate::facts::units::{SiBase, parse_number, size_from_parts};
use crate::ingest::log::pattern::static_regex;

/// Compiles one of the serving recognisers' static patterns, with `{N}` standing for a
/// number that may be negative (`avail mem=-0.25 GB`) and `{U}` for one that may not.
pub(crate) fn re(pattern: &str) -> Regex {
    static_regex(
        &pattern
            .replace("{N}", r"-?\d+(?:\.\d+)?")
            .replace("{U}", r"\d+(?:\.\d+)?"),
    )
}

/// How a configuration value is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A count or token number; accepts `1,024`, vLLM's `32k` / `32K`, and `-1` (off).
    Num,
    /// A fraction (`0.9`).
    Ratio,
    /// A boolean; a command-line flag without a value means true.
    Flag,
    /// Text as printed, quotes removed.
    Text,
    /// A dtype; also fills `model.dtype` unless it is `auto`.
    Dtype,
    /// A byte size (`10G`, `10737418240`).
    Bytes,
}

/// One setting: its spellings (normalised: lower case, `_` for `-`, camelCase split) and
/// the fact it fills.
pub(crate) struct Key {
    pub names: &'static [&'static str],
    pub fact: &'static str,
    pub kind: Kind,
}

pub(crate) const fn key(names: &'static [&'static str], fact: &'static str, kind: Kind) -> Key {
    Key { names, fact, kind }
}

/// `key=value`, `'key': value`, `key: Some(value)`.
static KEY_VALUE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r#"(?:^|[\s,({\[])['"]?(?P<k>[A-Za-z_][A-Za-z0-9_.-]*)['"]?\s*[:=]\s*(?P<v>'[^']*'|"[^"]*"|Some\([^)]*\)|[^,\s)}\]]+)"#,
    )
});
/// `--flag value`, `--flag=value`, `'--flag', 'value'`, a bare `--flag`.
static FLAG: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r#"(?:^|[\s'"\[,(])--(?P<k>[A-Za-z][A-Za-z0-9_-]*)(?:(?:\s*=\s*|['"]?\s*,?\s+['"]?)(?P<v>(?:-\d|[^-\s'",\]\\)])[^\s'",\]\\)]*))?"#,
    )
});
/// `-tp 2`, `-pp 2` (vLLM's short forms).
static SHORT_FLAG: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"(?:^|\s)-(?P<k>tp|pp|dp)(?:\s+|=)(?P<v>\d+)"));
/// `32k`, `1.5M`: vLLM's human-readable integers (lower case decimal, upper case binary).
static HUMAN_INT: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"^(?P<n>\d+(?:\.\d+)?)(?P<s>[kKmMgG])$"));

/// Normalises a key: lower case, `-` and `.` to `_`, camelCase split (`maxSequenceLen` →
/// `max_sequence_len`).
pub(crate) fn normalise_key(k: &str) -> String {
    let mut out = String::with_capacity(k.len() + 4);
    let mut prev_lower = false;
    for c in k.chars() {
        if c.is_ascii_uppercase() {
            if prev_lower {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
            prev_lower = false;
        } else if c == '-' {
            out.push('_');
            prev_lower = false;
        } else {
            out.push(c);
            prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        }
    }
    out
}

/// A count as engines print it: `131072`, `131,072`, `32k` (1000), `32K` (1024).
pub(crate) fn parse_count(s: &str) -> Option<f64> {
    let t = s.trim().trim_matches(|c| c == '\'' || c == '"');
    if let Some(v) = parse_number(t) {
        return Some(v);
    }
    let c = HUMAN_INT.captures(t)?;
    let n: f64 = c.name("n")?.as_str().parse().ok()?;
    let mult = match c.name("s")?.as_str() {
        "k" => 1e3,
        "m" => 1e6,
        "g" => 1e9,
        "K" => 1024.0,
        "M" => 1024.0 * 1024.0,
        "G" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some(n * mult)
}

/// A GiB figure as vLLM, SGLang and TensorRT-LLM print it (`11.76`, `0.0`) in bytes.
pub(crate) fn gib(s: &str) -> Option<f64> {
    size_from_parts(s.trim(), "GiB", SiBase::Binary).map(|b| b as f64)
}

/// A possibly negative GiB figure (vLLM prints `-1.25GiB` for an exhausted KV budget).
pub(crate) fn gib_signed(s: &str) -> Option<f64> {
    let t = s.trim();
    match t.strip_prefix('-') {
        Some(rest) => gib(rest).map(|v| -v),
        None => gib(t),
    }
}

/// A size with its unit as printed.
pub(crate) fn size(number: &str, unit: &str, si: SiBase) -> Option<f64> {
    size_from_parts(number.trim(), unit.trim(), si).map(|b| b as f64)
}

fn clean_value(v: &str) -> Option<(&str, usize)> {
    // Returns the inner value and its offset within `v`.
    let mut s = v;
    let mut off = 0;
    if let Some(inner) = s.strip_prefix("Some(").and_then(|x| x.strip_suffix(')')) {
        s = inner;
        off += 5;
    }
    let trimmed = s.trim_matches(|c| c == '\'' || c == '"');
    off += s.len() - s.trim_start_matches(['\'', '"']).len();
    let t = trimmed.trim();
    if t.is_empty() || t == "None" || t == "null" || t == "none" {
        return None;
    }
    Some((t, off))
}

/// Emits the fact for `raw` under `k`. Returns whether a fact was emitted.
fn emit_value(k: &Key, raw: &str, span: Option<(usize, usize)>, out: &mut Emit) -> bool {
    let Some((v, off)) = clean_value(raw) else {
        return false;
    };
    let span = span.map(|s| (s.0 + off, s.0 + off + v.len()));
    match k.kind {
        Kind::Num => match parse_count(v) {
            Some(n) => out.fact(k.fact, n, span),
            None => return false,
        },
        Kind::Ratio => match v.parse::<f64>() {
            Ok(r) if (0.0..=1.0).contains(&r) => out.fact(k.fact, r, span),
            _ => return false,
        },
        Kind::Flag => match v.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => out.fact(k.fact, true, span),
            "false" | "0" | "no" | "off" => out.fact(k.fact, false, span),
            _ => return false,
        },
        Kind::Text => out.fact(k.fact, v, span),
        Kind::Dtype => {
            let d = v
                .trim_start_matches("torch.")
                .trim_start_matches("DType.")
                .to_ascii_lowercase();
            out.fact(k.fact, d.as_str(), span);
            if d != "auto" && crate::facts::derive::dtype_bytes(&d).is_some() {
                out.fact("model.dtype", d.as_str(), span);
            }
        }
        Kind::Bytes => {
            let b = parse_count(v).or_else(|| {
                let split = v
                    .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                    .unwrap_or(v.len());
                size(&v[..split], &v[split..], SiBase::Binary)
            });
            match b {
                Some(b) => out.fact(k.fact, b, span),
                None => return false,
            }
        }
    }
    true
}

fn find_key<'k>(keys: &'k [Key], raw: &str) -> Option<&'k Key> {
    let n = normalise_key(raw);
    keys.iter().find(|k| k.names.contains(&n.as_str()))
}

/// Reads `key=value` / `'key': value` / `key: Some(value)` pairs of a configuration dump.
/// Returns how many facts were emitted.
pub(crate) fn read_key_values(text: &str, keys: &[Key], out: &mut Emit) -> usize {
    // Start after the dump's own label (`with config: `, `non-default args: `), so the label
    // is not read as a key whose value is the first real key.
    let start = ["config: ", "args: ", "Namespace(", "ServerArgs(", "Args {"]
        .iter()
        .filter_map(|m| text.find(m).map(|i| i + m.len()))
        .min()
        .unwrap_or(0);
    let mut n = 0;
    for c in KEY_VALUE.captures_iter(&text[start..]) {
        let (Some(k), Some(v)) = (c.name("k"), c.name("v")) else {
            continue;
        };
        if let Some(key) = find_key(keys, k.as_str()) {
            if emit_value(
                key,
                v.as_str(),
                Some((start + v.start(), start + v.end())),
                out,
            ) {
                n += 1;
            }
        }
    }
    n
}

/// Whether `line` carries flags of a command cut over several lines with backslashes
/// (`python3 -m vllm.entrypoints.openai.api_server \` / `    --model /models/x \`), as
/// shells, READMEs and issue pastes write long commands: the line starts with a flag and
/// every line above it back to one `is_command` accepts ends with `\`.
pub(crate) fn continues_command(line: &Line<'_>, is_command: fn(&str) -> bool) -> bool {
    if !line.text.trim_start().starts_with('-') {
        return false;
    }
    // The line just above first: most flag-like lines continue nothing, and cleaning forty
    // lines for each would be work done for no command.
    let continued = |l: &crate::ingest::log::clean::CleanLine| l.text.trim_end().ends_with('\\');
    if !line.preceding(1).first().is_some_and(continued) {
        return false;
    }
    for prev in line.preceding(40) {
        let t = prev.text.trim_end();
        if !t.ends_with('\\') {
            return false;
        }
        if is_command(t) {
            return true;
        }
    }
    false
}

/// Reads command-line flags (`--max-model-len 8192`, `--enforce-eager`, `-tp 2`). A flag
/// that ends the line takes its value from the next line (YAML and Python list dumps print
/// `'--max_model_len',` and `'131072',` on separate lines). Returns how many facts were
/// emitted.
pub(crate) fn read_flags(line: &Line<'_>, keys: &[Key], out: &mut Emit) -> usize {
    let text = line.text;
    let mut n = 0;
    for c in FLAG.captures_iter(text) {
        let Some(k) = c.name("k") else { continue };
        let Some(key) = find_key(keys, k.as_str()) else {
            continue;
        };
        match c.name("v") {
            Some(v) => {
                if emit_value(key, v.as_str(), Some((v.start(), v.end())), out) {
                    n += 1;
                }
            }
            None if key.kind == Kind::Flag => {
                out.fact(key.fact, true, Some((k.start(), k.end())));
                n += 1;
            }
            None => {
                let rest = text[k.end()..]
                    .trim_matches(|c: char| c.is_whitespace() || c == '\'' || c == '"' || c == ',');
                if rest.is_empty() {
                    if let Some(next) = line.following(1).first() {
                        let v = next
                            .text
                            .trim()
                            .trim_start_matches(['-', ' '])
                            .trim_matches(|c: char| c == '\'' || c == '"' || c == ',');
                        let val = v.split_whitespace().next().unwrap_or("");
                        if !val.is_empty()
                            && !val.starts_with("--")
                            && emit_value(key, val, None, out)
                        {
                            n += 1;
                        }
                    }
                }
            }
        }
    }
    for c in SHORT_FLAG.captures_iter(text) {
        let (Some(k), Some(v)) = (c.name("k"), c.name("v")) else {
            continue;
        };
        if let Some(key) = find_key(keys, k.as_str()) {
            if emit_value(key, v.as_str(), Some((v.start(), v.end())), out) {
                n += 1;
            }
        }
    }
    n
}

/// What every serving recogniser does first with a line: a line of source quoted in a
/// traceback is never evidence, and a traceback frame is only a sign of the engine when its
/// path is one of the engine's own directories (`engine_dirs`). True when the line is done.
pub(crate) fn quoted_code_or_frame(
    text: &str,
    engine_dirs: &[&str],
    engine: &'static str,
    out: &mut Emit,
) -> bool {
    if is_source_line(text) {
        return true;
    }
    if text.trim_start().starts_with("File \"") {
        if engine_dirs.iter().any(|d| text.contains(d)) {
            out.engine(engine);
        }
        return true;
    }
    false
}

/// A traceback's source-code line (`raise ValueError("No available memory ..."`), which
/// quotes a message without being one.
pub(crate) fn is_source_line(text: &str) -> bool {
    let t = text.trim_start();
    t.starts_with("raise ")
        || t.starts_with("f\"")
        || t.starts_with("msg = ")
        || t.starts_with("logger.")
        || t.starts_with("error_msg = ")
}

/// Copies the numbers of a PyTorch allocator OOM that an engine embeds in its own message
/// (`(original error: CUDA out of memory. Tried to allocate ...)`, `Capture cuda graph
/// failed: CUDA out of memory ...`) into the engine's wrapper failure, so the wrapper carries
/// them even where the PyTorch line itself is cut or wrapped.
/// `offset` is where `text` starts in the line, so spans point into the line.
pub(crate) fn embed_torch_oom(f: &mut super::Failure, text: &str, offset: usize) {
    if let Some(t) = super::pytorch::parse_allocator_oom(text) {
        f.device = f.device.or(t.device);
        for (name, value, span) in t.facts {
            if f.get(name).is_none() {
                f.fact(name, value, span.map(|(a, b)| (a + offset, b + offset)));
            }
        }
    }
}

/// A command line's argument as a YAML or list item (`- --max-model-len=8192`,
/// `'--max_model_len',`, `command: --model x ...`), as opposed to prose that mentions a flag
/// (`You can increase that size using --max-total-tokens=32768`).
pub(crate) fn is_argument_item(text: &str) -> bool {
    let t = text.trim_start();
    t.starts_with('-')
        || t.starts_with('\'')
        || t.starts_with('"')
        || t.starts_with("command:")
        || t.starts_with("args:")
}

/// Lines this far back are searched for an earlier start line of the same launch.
const START_WINDOW: usize = 80;

/// An exception being raised: `ValueError: ...`, `torch.OutOfMemoryError: ...`.
static RAISED: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"^[\w.]*(?:Error|Exception)(?:\([^)]*\))?:"));

/// Whether a line ends a run: a traceback, a raised exception, an exit or a kill. Prose that
/// merely mentions an error (`Error while fetching HF_TOKEN`) does not. A server that came up
/// ends its launch's start lines too: a start after it is another launch (a second instance).
fn ends_a_run(t: &str) -> bool {
    let t = t.trim_start();
    t.starts_with("Traceback")
        || RAISED.is_match(t)
        || t.starts_with("Killed")
        || t.contains("exited with code")
        || t.contains("exited, code=")
        || t.contains("Shutting down")
        || t.contains("signaled to shutdown")
        || t.contains("failed to start")
        || t.contains("initialization failed")
        || t.contains("Application startup complete")
        || t.contains("Uvicorn running on")
}

/// Whether this start line belongs to a launch whose first start line was already seen a
/// few lines above (the API server's version, then the argument dump, then the engine's
/// config are one start, not three). An error between them means a new launch, and so does
/// a launch command after another (two servers started in turn, `nvidia-smi` between them).
pub(crate) fn start_already_seen(
    line: &Line<'_>,
    is_start: fn(&str) -> bool,
    is_command: fn(&str) -> bool,
) -> bool {
    let command = is_command(line.text);
    for prev in line.preceding(START_WINDOW) {
        let t = prev.text.as_str();
        if ends_a_run(t) {
            return false;
        }
        if is_start(t) {
            return !(command && is_command(t));
        }
    }
    false
}

/// How many of the `window` preceding lines satisfy `pred`.
pub(crate) fn count_preceding(line: &Line<'_>, window: usize, pred: fn(&str) -> bool) -> usize {
    line.preceding(window)
        .iter()
        .filter(|l| pred(&l.text))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::evidence::{InputName, Value};
    use crate::ingest::log::clean::LineMeta;
    use std::sync::Arc;

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
        key(&["enforce_eager"], "vllm.enforce_eager", Kind::Flag),
        key(
            &["tensor_parallel_size", "tp"],
            "vllm.tensor_parallel_size",
            Kind::Num,
        ),
        key(&["dtype"], "vllm.dtype", Kind::Dtype),
        key(&["kv_cache_dtype"], "vllm.kv_cache_dtype", Kind::Text),
    ];

    fn facts(text: &str, flags: bool) -> Vec<(&'static str, Value)> {
        let input: InputName = Arc::from("t.log");
        let meta = LineMeta::default();
        let line = Line::standalone(&input, 1, text, &meta);
        let mut out = Emit::default();
        out.begin_line(&line);
        if flags {
            read_flags(&line, KEYS, &mut out);
        } else {
            read_key_values(text, KEYS, &mut out);
        }
        crate::ingest::log::engines::fact_records(out)
    }

    #[test]
    fn key_value_shapes() {
        let f = facts(
            "model='m', dtype=torch.bfloat16, max_seq_len=131072, tensor_parallel_size=2, enforce_eager=False, kv_cache_dtype=auto",
            false,
        );
        assert!(f.contains(&("vllm.max_model_len", Value::Num(131072.0))));
        assert!(f.contains(&("vllm.tensor_parallel_size", Value::Num(2.0))));
        assert!(f.contains(&("vllm.enforce_eager", Value::Bool(false))));
        assert!(f.contains(&("model.dtype", Value::str("bfloat16"))));
        assert!(f.contains(&("vllm.kv_cache_dtype", Value::str("auto"))));
        let f = facts(
            "non-default args: {'model_tag': 'x', 'max_model_len': 32768, 'gpu_memory_utilization': 0.95, 'enforce_eager': True}",
            false,
        );
        assert!(f.contains(&("vllm.max_model_len", Value::Num(32768.0))));
        assert!(f.contains(&("vllm.gpu_memory_utilization", Value::Num(0.95))));
        assert!(f.contains(&("vllm.enforce_eager", Value::Bool(true))));
        // Rust Debug dumps and `None`.
        let f = facts("Args { max_seq_len: Some(8192), dtype: None }", false);
        assert_eq!(f, vec![("vllm.max_model_len", Value::Num(8192.0))]);
    }

    #[test]
    fn flag_shapes() {
        let f = facts(
            "vllm serve m --max-model-len 32k --gpu_memory_utilization=0.85 --enforce-eager -tp 4 --kv-cache-dtype fp8",
            true,
        );
        assert!(f.contains(&("vllm.max_model_len", Value::Num(32000.0))));
        assert!(f.contains(&("vllm.gpu_memory_utilization", Value::Num(0.85))));
        assert!(f.contains(&("vllm.enforce_eager", Value::Bool(true))));
        assert!(f.contains(&("vllm.tensor_parallel_size", Value::Num(4.0))));
        assert!(f.contains(&("vllm.kv_cache_dtype", Value::str("fp8"))));
        let f = facts(
            "['serve', 'm', '--max_model_len', '65536', '--dtype', 'bfloat16']",
            true,
        );
        assert!(f.contains(&("vllm.max_model_len", Value::Num(65536.0))));
        assert!(f.contains(&("model.dtype", Value::str("bfloat16"))));
        assert_eq!(parse_count("32K"), Some(32768.0));
        assert_eq!(parse_count("1,024"), Some(1024.0));
    }

    #[test]
    fn one_launch_is_one_start_and_an_error_between_makes_two() {
        fn is_start(t: &str) -> bool {
            t.contains("API server version") || t.contains("non-default args")
        }
        let input: InputName = Arc::from("t.log");
        let meta = LineMeta::default();
        let check = |before: &str| {
            let line = Line {
                input: &input,
                no: 9,
                text: "non-default args: {'max_model_len': 8192}",
                meta: &meta,
                siblings_before: &[],
                siblings_after: &[],
                before: before.as_bytes(),
                after: b"",
            };
            start_already_seen(&line, is_start, |_| false)
        };
        assert!(check(
            "INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.9.1\nWARNING 01-01 00:00:00 [x.py:1] Error while fetching HF_TOKEN, using anonymous access\n"
        ));
        assert!(!check(
            "INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.9.1\nValueError: boom\n"
        ));
        assert!(!check("INFO 01-01 00:00:00 [x.py:1] something else\n"));
        // A second launch command after a first: two servers started in turn.
        fn is_command(t: &str) -> bool {
            t.starts_with("$ vllm serve")
        }
        let second = |text: &str, before: &str| {
            let line = Line {
                input: &input,
                no: 9,
                text,
                meta: &meta,
                siblings_before: &[],
                siblings_after: &[],
                before: before.as_bytes(),
                after: b"",
            };
            start_already_seen(&line, |t| is_start(t) || is_command(t), is_command)
        };
        let first_launch = "$ vllm serve a --gpu-memory-utilization 0.2\n$ nvidia-smi\n|    9439MiB /  46068MiB |\n";
        assert!(!second(
            "$ vllm serve b --gpu-memory-utilization 0.2",
            first_launch
        ));
        assert!(second("non-default args: {'model': 'a'}", first_launch));
    }

    #[test]
    fn camel_case_keys() {
        assert_eq!(normalise_key("maxSequenceLen"), "max_sequence_len");
        assert_eq!(normalise_key("max-model-len"), "max_model_len");
        assert_eq!(normalise_key("MAX_TOTAL_TOKENS"), "max_total_tokens");
    }
}
