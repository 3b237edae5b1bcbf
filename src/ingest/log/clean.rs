//! Line clean-up: turns a raw log line as users paste it into the message text recognisers
//! match on, and keeps what the prefixes said (rank, pid, process, timestamp).
//!
//! Real logs arrive wrapped in layers: docker compose's `vllm-1  | `, a timestamp, vLLM's
//! `INFO 08-22 20:52:36 [gpu_worker.py:563]`, `(EngineCore pid=123)`, torchrun's `[rank0]:`,
//! journald's `Feb 03 19:57:08 host kernel:`, colour codes as real escape bytes or pasted as
//! `^[[0;36m`. The layers stack in any order, so the prefix table is applied repeatedly
//! until nothing more matches. Only lines that hit an anchor are cleaned, so this is off
//! the hot path.

use std::sync::LazyLock;

use crate::ingest::log::pattern::static_regex;
use regex::Regex;

/// What the stripped prefixes said about the line.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LineMeta {
    /// torch.distributed rank, tensor-parallel rank, or worker rank.
    pub rank: Option<u32>,
    pub pid: Option<u32>,
    /// Process or service name: `EngineCore`, `VllmWorker`, a compose service, a journald comm.
    pub process: Option<String>,
    /// The timestamp text as printed (parsed later, only where series need aligning).
    pub timestamp: Option<String>,
    /// Log level, upper-cased (`INFO`, `WARNING`, `ERROR`, ...).
    pub level: Option<String>,
    /// A producer tag that was stripped, such as `TensorRT-LLM` or `kernel`.
    pub tag: Option<String>,
}

/// A cleaned line.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CleanLine {
    pub text: String,
    pub meta: LineMeta,
    /// The raw line began with a space or a tab (after colour codes). A piece of a message
    /// that a fixed-width terminal or viewer cut keeps the space the cut fell on, which
    /// clean-up trims; joiners use this to put it back.
    pub indented: bool,
}

/// ANSI escape sequences: CSI (`ESC [ ... final`), OSC (`ESC ] ... BEL`), two-byte escapes,
/// the caret form users paste (`^[[0;36m`), rsyslog's octal escape (`#033[2m`), and orphaned
/// SGR codes whose ESC byte was lost.
static ANSI: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]|\^\[\[[0-9;?]*[A-Za-z]|#033\[[0-9;?]*[A-Za-z]|\[(?:\d{1,3}(?:;\d{1,3})*)?m",
    )
});

struct Prefix {
    re: Regex,
    /// Where the groups `meta` takes from are in `re`'s captures, found once: looking a
    /// group up by name hashes the name, six times per prefix of every line read.
    groups: MetaGroups,
}

#[derive(Default)]
struct MetaGroups {
    ts: Option<usize>,
    level: Option<usize>,
    rank: Option<usize>,
    pid: Option<usize>,
    process: Option<usize>,
    tag: Option<usize>,
}

impl Prefix {
    fn new(pattern: &str) -> Prefix {
        let re = static_regex(pattern);
        let at = |name: &str| re.capture_names().position(|n| n == Some(name));
        let groups = MetaGroups {
            ts: at("ts"),
            level: at("level"),
            rank: at("rank"),
            pid: at("pid"),
            process: at("proc"),
            tag: at("tag"),
        };
        Prefix { re, groups }
    }

    /// Fills what `meta` does not hold yet from a match's groups.
    fn apply(&self, c: &regex::Captures<'_>, m: &mut LineMeta) {
        let g = &self.groups;
        let get = |i: Option<usize>| i.and_then(|i| c.get(i)).map(|x| x.as_str());
        if let Some(t) = get(g.ts) {
            m.timestamp.get_or_insert_with(|| t.trim().to_string());
        }
        if let Some(l) = get(g.level) {
            m.level.get_or_insert_with(|| normalise_level(l));
        }
        if let Some(r) = get(g.rank).and_then(|r| r.parse().ok()) {
            m.rank.get_or_insert(r);
        }
        if let Some(p) = get(g.pid).and_then(|r| r.parse().ok()) {
            m.pid.get_or_insert(p);
        }
        if let Some(p) = get(g.process) {
            m.process.get_or_insert_with(|| p.to_string());
        }
        if let Some(t) = get(g.tag) {
            m.tag.get_or_insert_with(|| t.to_string());
        }
    }
}

fn normalise_level(l: &str) -> String {
    match l.trim().to_ascii_uppercase().as_str() {
        "W" | "WARN" | "WARNING" => "WARNING".into(),
        "E" | "ERR" | "ERROR" => "ERROR".into(),
        "I" | "INFO" => "INFO".into(),
        "F" | "FATAL" | "CRITICAL" => "CRITICAL".into(),
        "D" | "DEBUG" | "TRACE" => "DEBUG".into(),
        other => other.to_string(),
    }
}

/// A month as journald prints it in any locale: `Feb`, `Mär`, `févr.`, `3月`, `10월`.
///
/// A name's letters are spelled "not a space, digit or bracket" (here and in dmesg -T's
/// prefix) rather than `\p{L}`: the timestamp after them pins the place down, and `\p{L}`
/// is the costliest class to build (about 440 µs a copy, and `\p{L}{3,5}` is five): the two
/// journald prefixes and dmesg -T's took 8.5 ms of every run's start-up, twice with the
/// prefix set.
const MONTH: &str = r"(?:[^\s0-9\[\]]{3,5}\.?|\d{1,2}\s?[月월])";

/// The prefix table. Where several match at a line's start, the first in this order is stripped.
///
/// Classes are spelled in ASCII (`[0-9]`, `[A-Za-z0-9_]`) rather than Unicode `\d` and `\w`:
/// prefixes are ASCII in practice, and the Unicode classes make automata that are several
/// times slower to build and run, which matters because every line that hits an anchor tries
/// the whole table.
static PREFIXES: LazyLock<Vec<Prefix>> = LazyLock::new(|| {
    let p = Prefix::new;
    vec![
        // Markdown quotes in pasted reports: `> `, `>> `.
        p(r"^(?:>\s?)+"),
        // docker compose: `vllm-1  | `, `api_1 | ` (a service name, spaces, a bar).
        p(r"^(?P<proc>[A-Za-z0-9][A-Za-z0-9_.-]{0,62})[ \t]+\|[ \t]?"),
        // kubectl logs --prefix: `[pod/name-abc/container] `
        p(r"^\[pod/(?P<proc>[^\]/]+)/[^\]]*\]\s*"),
        // journald / syslog: `Feb 03 19:57:08 host kernel: `, `Mär 03 ...`, `2024-02-03T19:57:08+0100 host python3[12]: `
        p(&format!(
            r"^(?P<ts>(?:{MONTH}\s+[0-9]{{1,2}}|[0-9]{{4}}-[0-9]{{2}}-[0-9]{{2}}T)\s*[0-9]{{2}}:[0-9]{{2}}:[0-9]{{2}}(?:[.,][0-9]+)?(?:[+-][0-9]{{2}}:?[0-9]{{2}}|Z)?)\s+[A-Za-z0-9_.-]+\s+(?P<proc>[A-Za-z0-9_.@/()-]+?)(?:\[(?P<pid>[0-9]+)\])?:\s"
        )),
        // journald without the host field (as users trim it): `Feb 13 13:11:44 ollama[18421]: `
        p(&format!(
            r"^(?P<ts>{MONTH}\s+[0-9]{{1,2}}\s+[0-9]{{2}}:[0-9]{{2}}:[0-9]{{2}})\s+(?P<proc>[A-Za-z0-9_.@/-]+)\[(?P<pid>[0-9]+)\]:\s"
        )),
        // dmesg: `[12345.678901] `, dmesg -T: `[Tue May 19 09:42:18 2026] `, localised `[Di Mai 19 ...]`
        p(r"^\[\s*(?P<ts>[0-9]+\.[0-9]+)\]\s*"),
        p(
            r"^\[(?P<ts>[^\s0-9\[\]]{2,4}\.? [^\s0-9\[\]]{3,5}\.?\s+[0-9]{1,2} [0-9]{2}:[0-9]{2}:[0-9]{2} [0-9]{4})\]\s*",
        ),
        // Go slog text (Ollama): `time=2025-01-31T20:48:19.586Z level=INFO source=server.go:104 `,
        // sometimes after a terminal spinner character.
        p(
            r"^(?:[\u{2800}-\u{28FF}]\s*)?time=(?P<ts>\S+)\s+level=(?P<level>[A-Za-z]+)\s+(?:source=\S+\s+)?",
        ),
        // llama.cpp `--log-timestamps`: `0.00.035.060 I `
        p(r"^(?P<ts>[0-9]+\.[0-9]{2}\.[0-9]{3}\.[0-9]{3})\s+(?P<level>[IWEDT])\s+"),
        // Ray's glog-style header: `[2025-04-02 15:02:00,117 E 135782 135782] `
        p(
            r"^\[(?P<ts>[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(?:[.,][0-9]+)?) (?P<level>[IWEF]) [0-9]+ [0-9]+\]\s*",
        ),
        // vLLM: `INFO 04-28 04:07:49 worker.py:232] ` and `INFO 08-22 20:52:36 [gpu_worker.py:563] `
        p(
            r"^(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+(?P<ts>[0-9]{2}-[0-9]{2}\s+[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?)\s+(?:\[[A-Za-z0-9_./-]+:[0-9]+\]|[A-Za-z0-9_./-]+:[0-9]+\])\s*",
        ),
        // vLLM V1 / Ray process tags: `(EngineCore pid=123) `, `(VllmWorker rank=0 pid=4) `,
        // `(EngineCore_DP0 pid=1) `, `(RayWorkerWrapper pid=1, ip=10.0.0.1) `, `(pid=55) `, `(raylet) `
        p(
            r"^\((?:(?P<proc>[A-Za-z_][A-Za-z0-9_:.-]*)\s*)?(?:rank=(?P<rank>[0-9]+),?\s*)?(?:pid=(?P<pid>[0-9]+))?(?:,\s*ip=[A-Za-z0-9_.:]+)?\)\s*",
        ),
        // torchrun / accelerate: `[rank0]: `, `[rank 3]:`, `[default0]:`, `[RANK 0] `
        p(r"^\[(?:rank|RANK|default)\s*(?P<rank>[0-9]+)\]:?\s*"),
        // Slurm's `srun --label`: `5: torch.cuda.OutOfMemoryError: ...` (the task number, a
        // colon and one space; a timestamp's `12:34` has no space after its colon).
        p(r"^(?P<rank>[0-9]{1,4}): "),
        // SGLang: `[2025-01-01 12:00:00 TP0] `, `[2025-01-01 12:00:00 DP1 TP3] `
        p(
            r"^\[(?P<ts>[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(?:[.,][0-9]+)?)(?:\s+(?:DP|PP|EP)[0-9]+)*(?:\s+TP(?P<rank>[0-9]+))?(?:\s+(?:DP|PP|EP)[0-9]+)*\]\s*",
        ),
        // bracketed timestamp + optional level and location (DeepSpeed, many Python loggers):
        // `[2024-01-01 00:00:00,000] [INFO] [utils.py:791:see_memory_usage] `
        p(
            r"^\[(?P<ts>[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}(?:[.,][0-9]+)?(?:Z|[+-][0-9]{2}:?[0-9]{2})?)\]\s*(?:\[(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\]\s*)?(?:\[[A-Za-z0-9_./-]+:[0-9]+(?::[A-Za-z0-9_]+)?\]\s*)?",
        ),
        // TensorRT-LLM: `[TensorRT-LLM][INFO] `, `[TRT-LLM] [I] `, `[01/16/2026-06:20:15] `
        p(r"^\[(?P<tag>TensorRT-LLM)\]\s*(?:\[RANK [0-9]+\]\s*)?\[(?P<level>[A-Z]+)\]\s*"),
        p(r"^\[(?P<ts>[0-9]{2}/[0-9]{2}/[0-9]{4}-[0-9]{2}:[0-9]{2}:[0-9]{2})\]\s*"),
        p(r"^\[(?P<tag>TRT-LLM)\]\s*(?:\[RANK (?P<rank>[0-9]+)\]\s*)?\[(?P<level>[A-Z])\]\s*"),
        // glog / absl: `W0623 18:20:12.602631 2860192 bfc_allocator.cc:514] `
        p(
            r"^(?P<level>[IWEF])(?P<ts>[0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]+)\s+[0-9]+\s+[A-Za-z0-9_./-]+:[0-9]+\]\s*",
        ),
        // loguru's default format: `2024-05-01 12:34:56.789 | INFO     | pkg.mod:func:42 - `.
        p(
            r"^(?P<ts>[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}(?:[.,][0-9]+)?)\s*\|\s*(?P<level>TRACE|DEBUG|INFO|SUCCESS|WARNING|ERROR|CRITICAL)\s*\|\s*(?:[A-Za-z0-9_.<>-]+:[A-Za-z0-9_.<>-]+:[0-9]+\s+-\s+)?",
        ),
        // ISO timestamp, optional level: `2024-06-17T13:18:29.371622Z ERROR `, `2024-05-01 12:34:56,789 `,
        // ComfyUI's `2024-12-05T05:50:32.905540 - ` (its log and error reports), and Python
        // logging's `%(asctime)s - %(levelname)s - ` (the dash after the level too).
        p(
            r"^(?P<ts>[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}(?:[.,][0-9]+)?(?:Z|[+-][0-9]{2}:?[0-9]{2})?):?\s+(?:-\s+)?(?:(?P<level>TRACE|DEBUG|INFO|WARN|WARNING|ERROR|CRITICAL)\b:?\s*(?:-\s+)?)?",
        ),
        // TF absl after its timestamp: `: W tensorflow/tsl/framework/bfc_allocator.cc:485] `
        // The source path is kept as the line's tag: `tensorflow/...` is TensorFlow's,
        // `external/xla/...` jaxlib's, for the allocator messages both runtimes print.
        p(r"^(?P<level>[IWEF])\s+(?P<tag>[A-Za-z0-9_./-]+\.(?:cc|h|cpp)):[0-9]+\]\s*"),
        // TGI tracing targets: `shard-manager: text_generation_launcher: `
        p(
            r"^(?:(?:shard-manager|download|webserver|warmup|text_generation_[a-z_]+|text_generation_launcher)(?:\{[^}]*\})?:\s+)+",
        ),
        // Python logging: `- name - ERROR - `, `root - INFO - `, `INFO:root:`, `WARNING:__main__:`
        p(r"^-?\s*[A-Za-z0-9_.]+\s+-\s+(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+-\s+"),
        p(r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL):[A-Za-z0-9_.]+:"),
        // Bare level tags: `[INFO] `, `ERROR: `, `WARNING `
        p(r"^\[(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\]\s*"),
        p(r"^(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)(?::\s*|\s+)(?:-\s+)?"),
        // A source location in brackets: `[utils.py:791:see_memory_usage] `
        p(r"^\[[A-Za-z0-9_./-]+\.(?:py|cc|cpp|rs|go):[0-9]+(?::[A-Za-z0-9_]+)?\]\s*"),
    ]
});

/// Room for the prefix table's match flags, on the stack.
const MAX_PREFIXES: usize = 64;

/// Every prefix of [`PREFIXES`] in one automaton: one search tells which prefixes match at
/// the start of a line. Trying them in turn cost a search each (a line starting with `[`
/// could match ten of them), on every pass over every hit line.
static PREFIX_SET: LazyLock<regex::RegexSet> = LazyLock::new(|| {
    assert!(PREFIXES.len() <= MAX_PREFIXES);
    regex::RegexSet::new(PREFIXES.iter().map(|p| p.re.as_str())).expect("static regexes")
});

/// Removes ANSI colour codes in all their forms.
pub fn strip_ansi(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains('\x1b')
        && !text.contains("^[")
        && !text.contains("#033")
        && !has_orphan_sgr(text)
    {
        return std::borrow::Cow::Borrowed(text);
    }
    ANSI.replace_all(text, |c: &regex::Captures<'_>| {
        let m = c.get(0).expect("group 0");
        if m.as_str() == "[m" && is_bracket_tag(&text.as_bytes()[m.end()..]) {
            m.as_str().to_string()
        } else {
            String::new()
        }
    })
}

/// Whether the bytes after a `[m` finish a bracketed tag (`[malloc_or_wait]`, `[model]`,
/// `[metal::malloc]`): a word closed by `]`. Then the `[m` is the tag's start, not a reset
/// code that lost its ESC, which is followed by text that does not close a bracket.
fn is_bracket_tag(after: &[u8]) -> bool {
    let word = after
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric() || b"_:.-/".contains(c))
        .count();
    after.get(word) == Some(&b']')
}

/// Whether the text holds an SGR code whose ESC byte was lost (`[0;31m`, `[m`): a `[`, then
/// only digits and `;`, then `m`. Checked without a regex because nearly every line has a `[`
/// or an `m` and this runs on every line that hits an anchor.
fn has_orphan_sgr(text: &str) -> bool {
    let b = text.as_bytes();
    memchr::memchr_iter(b'[', b).any(|i| {
        let rest = &b[i + 1..];
        let digits = rest
            .iter()
            .take_while(|c| c.is_ascii_digit() || **c == b';')
            .count();
        digits <= 16
            && rest.get(digits) == Some(&b'm')
            && (digits > 0 || !is_bracket_tag(&rest[1..]))
    })
}

/// Builds the clean-up's expressions now, for [`super::engines::warm`]: the prefix table
/// and its set are as much work as the anchor automaton, and the first line that hits an
/// anchor waited for them.
pub fn warm() {
    LazyLock::force(&ANSI);
    LazyLock::force(&PREFIXES);
    LazyLock::force(&PREFIX_SET);
    LazyLock::force(&JSON_FIELD);
}

/// Cleans one raw line: decodes lossily, drops CR and colour codes, unwraps a JSON log
/// record's message, strips stacked prefixes.
pub fn clean_line(raw: &[u8]) -> CleanLine {
    let text = String::from_utf8_lossy(raw);
    let text = text.trim_end_matches(['\r', '\n']);
    let text = strip_ansi(text);
    let indented = text.starts_with([' ', '\t']);
    let mut meta = LineMeta::default();
    if let Some(message) = json_message(&text, &mut meta) {
        let message = strip_ansi(&message).into_owned();
        let stripped = strip_prefixes(&message, &mut meta);
        return CleanLine {
            text: stripped.to_string(),
            meta,
            indented: false,
        };
    }
    let stripped = strip_prefixes(&text, &mut meta);
    CleanLine {
        text: stripped.to_string(),
        meta,
        indented,
    }
}

static JSON_FIELD: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r#""(?P<k>message|msg|log|timestamp|time|level)"\s*:\s*""#));

/// The message of a JSON log record: tracing's `--json-output` (TGI:
/// `{"timestamp":..,"level":"ERROR","fields":{"message":"..."},"target":..}`), loguru's
/// serialised records, Docker's json-file (`{"log":"...","stream":"stderr"}`). Level and
/// timestamp go to `meta`. A message that packs a traceback keeps its `\n` escapes so
/// [`split_packed`] splits it; a short one is unescaped.
fn json_message(text: &str, meta: &mut LineMeta) -> Option<String> {
    let t = text.trim_start();
    if !t.starts_with('{') || !t.contains('"') {
        return None;
    }
    let mut message: Option<(usize, &str)> = None;
    for c in JSON_FIELD.captures_iter(t) {
        let (Some(k), Some(all)) = (c.name("k"), c.get(0)) else {
            continue;
        };
        let value = json_string_body(&t[all.end()..]);
        let rank = match k.as_str() {
            "message" => 0,
            "msg" => 1,
            "log" => 2,
            "timestamp" | "time" => {
                meta.timestamp.get_or_insert_with(|| value.to_string());
                continue;
            }
            _ => {
                meta.level.get_or_insert_with(|| normalise_level(value));
                continue;
            }
        };
        if message.is_none_or(|(r, _)| rank < r) {
            message = Some((rank, value));
        }
    }
    let (_, raw) = message?;
    if raw.len() >= 80 && raw.matches("\\n").count() >= 2 {
        return Some(raw.replace("\\u001b", ""));
    }
    Some(
        raw.replace("\\u001b", "")
            .replace("\\n", " ")
            .replace("\\t", "\t")
            .replace("\\\"", "\"")
            .replace("\\\\", "\\")
            .trim_end()
            .to_string(),
    )
}

/// The escaped body of a JSON string that starts at `s` (after the opening quote).
fn json_string_body(s: &str) -> &str {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return &s[..i],
            _ => i += 1,
        }
    }
    s
}

/// Strips stacked prefixes, filling `meta`. Bounded passes: a prefix can never loop.
pub fn strip_prefixes<'a>(mut text: &'a str, meta: &mut LineMeta) -> &'a str {
    for _ in 0..10 {
        let trimmed = text.trim_start_matches([' ', '\t']);
        let mut progressed = false;
        // One search of the set finds the prefixes that match; only those run their
        // capturing engine, in table order.
        let set = &*PREFIX_SET; // first: it checks that the flags fit
        let mut matched = [false; MAX_PREFIXES];
        let matched = &mut matched[..PREFIXES.len()];
        if !set.matches_read_at(matched, trimmed, 0) {
            return trimmed;
        }
        for p in PREFIXES
            .iter()
            .zip(matched.iter())
            .filter(|(_, m)| **m)
            .map(|(p, _)| p)
        {
            if let Some(c) = p.re.captures(trimmed) {
                let whole = c.get(0).map(|m| m.end()).unwrap_or(0);
                if whole == 0 {
                    continue;
                }
                // A compose-style `name | ` prefix must not eat table rows or llama.cpp's
                // breakdown lines; those have a `|` with more `|` after it on the line.
                if p.re.as_str().starts_with(r"^(?P<proc>[A-Za-z0-9]")
                    && trimmed[whole..].contains(" | ")
                {
                    continue;
                }
                p.apply(&c, meta);
                text = &trimmed[whole..];
                progressed = true;
                break;
            }
        }
        if !progressed {
            return trimmed;
        }
    }
    text.trim_start()
}

/// Splits a line that packs a whole traceback with literal `\n` sequences (JSON logs, Python
/// `repr` of an exception, some log shippers) into its sub-lines, undoing the JSON-style
/// escapes (`\"`, `\\`, `\t`) those producers add. Returns `None` for an ordinary line.
pub fn split_packed(text: &str) -> Option<Vec<String>> {
    if text.len() < 80 || text.matches("\\n").count() < 2 {
        return None;
    }
    Some(
        text.split("\\n")
            .map(|s| {
                s.trim_end_matches("\\r")
                    .replace("\\\"", "\"")
                    .replace("\\t", "\t")
                    .replace("\\\\", "\\")
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clean(s: &str) -> CleanLine {
        clean_line(s.as_bytes())
    }

    /// The prefix set reports exactly the prefixes whose own regex matches: checked at every
    /// word start of every line of the bundled fixtures.
    #[test]
    fn the_prefix_set_agrees_with_each_prefix() {
        let logs = crate::input::walk::Filter {
            include: vec!["*.log".into(), "*.txt".into()],
            exclude: Vec::new(),
        };
        let mut files = Vec::new();
        for dir in ["fixtures", "rules"] {
            let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
            files.extend(
                crate::input::walk::walk_filtered(&root, &logs)
                    .unwrap()
                    .files,
            );
        }
        assert!(files.len() > 50, "the fixtures are there");
        let (mut checked, mut matched) = (0, 0);
        for f in files {
            let text = String::from_utf8_lossy(&std::fs::read(&f).unwrap()).into_owned();
            for line in text.lines() {
                let line = strip_ansi(line);
                let starts = std::iter::once(0).chain(line.match_indices(' ').map(|(i, _)| i + 1));
                for i in starts.take(12) {
                    let t = &line[i..];
                    let set = PREFIX_SET.matches(t);
                    for (i, p) in PREFIXES.iter().enumerate() {
                        assert_eq!(
                            set.matched(i),
                            p.re.is_match(t),
                            "{} on {t:?} ({})",
                            p.re.as_str(),
                            f.display()
                        );
                        matched += usize::from(set.matched(i));
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 100_000);
        assert!(matched > 1_000, "{matched} prefixes matched");
    }

    #[test]
    fn strips_colour_in_every_form() {
        assert_eq!(clean("\x1b[0;31mERROR\x1b[0m boom").text, "boom");
        assert_eq!(
            clean("^[[0;36mtorch.OutOfMemoryError^[[0m: CUDA").text,
            "torch.OutOfMemoryError: CUDA"
        );
        assert_eq!(clean("[32mhello[0m world").text, "hello world");
        // A reset that lost its ESC is `[m`; a bracketed tag that starts with m is a tag.
        assert_eq!(clean("done[m next").text, "done next");
        assert_eq!(
            clean("RuntimeError: [malloc_or_wait] Unable to allocate 12 bytes.").text,
            "RuntimeError: [malloc_or_wait] Unable to allocate 12 bytes."
        );
        assert_eq!(
            clean("x [metal::malloc] Attempting to allocate 8 bytes[m").text,
            "x [metal::malloc] Attempting to allocate 8 bytes"
        );
        assert_eq!(
            clean("\x1b[1mload\x1b[0m [model] ready").text,
            "load [model] ready"
        );
    }

    #[test]
    fn strips_stacked_prefixes_and_keeps_metadata() {
        let c = clean(
            "vllm-1  | (EngineCore pid=5123) ERROR 08-22 20:52:36 [core.py:700] ValueError: boom",
        );
        assert_eq!(c.text, "ValueError: boom");
        assert_eq!(c.meta.pid, Some(5123));
        assert_eq!(c.meta.process.as_deref(), Some("vllm-1"));
        assert_eq!(c.meta.level.as_deref(), Some("ERROR"));

        let c = clean("[rank3]: torch.OutOfMemoryError: CUDA out of memory.");
        assert_eq!(c.meta.rank, Some(3));
        assert_eq!(c.text, "torch.OutOfMemoryError: CUDA out of memory.");
        let c = clean("5:     Variable._execution_engine.run_backward(");
        assert_eq!(c.meta.rank, Some(5));
        assert_eq!(c.text, "Variable._execution_engine.run_backward(");
        assert_eq!(clean("12:34:56 step 3").meta.rank, None);

        let c = clean("INFO 04-28 04:07:49 worker.py:232] Memory profiling takes 3.2 seconds");
        assert_eq!(c.text, "Memory profiling takes 3.2 seconds");

        let c = clean("(VllmWorker rank=1 pid=777) INFO 08-22 20:52:36 [gpu_worker.py:563] x");
        assert_eq!(
            (c.meta.rank, c.meta.pid, c.text.as_str()),
            (Some(1), Some(777), "x")
        );
    }

    #[test]
    fn kernel_prefixes() {
        let c = clean(
            "Feb 03 19:57:08 gpu-node-7 kernel: Out of memory: Killed process 4242 (python3)",
        );
        assert_eq!(c.text, "Out of memory: Killed process 4242 (python3)");
        assert_eq!(c.meta.process.as_deref(), Some("kernel"));
        let c = clean("[12345.678901] python3 invoked oom-killer: gfp_mask=0x100cca");
        assert_eq!(c.text, "python3 invoked oom-killer: gfp_mask=0x100cca");
        let c = clean("Mär 03 19:57:08 host kernel: oom-kill:constraint=CONSTRAINT_MEMCG");
        assert_eq!(c.text, "oom-kill:constraint=CONSTRAINT_MEMCG");
        let c =
            clean("[Tue May 19 09:42:18 2026] Memory cgroup out of memory: Killed process 1 (x)");
        assert_eq!(c.text, "Memory cgroup out of memory: Killed process 1 (x)");
    }

    #[test]
    fn local_engine_and_host_prefixes() {
        let c = clean(
            "3月 25 09:28:05 gpu-box ollama[2816880]: time=2026-03-25T09:28:05.821+08:00 level=WARN source=server.go:1044 msg=\"model request too large for system\" requested=\"338.1 GiB\"",
        );
        assert_eq!(
            c.text,
            "msg=\"model request too large for system\" requested=\"338.1 GiB\""
        );
        assert_eq!(c.meta.process.as_deref(), Some("ollama"));
        assert_eq!(c.meta.level.as_deref(), Some("WARNING"));
        let c = clean("Feb 13 13:11:44 ollama[18421]: print_info: n_layer          = 92");
        assert_eq!(c.text, "print_info: n_layer          = 92");
        assert_eq!(c.meta.pid, Some(18421));
        let c = clean("10월 19 15:17:57 vm1 kernel: Out of memory: Killed process 1 (x)");
        assert_eq!(c.text, "Out of memory: Killed process 1 (x)");
        let c = clean(
            "⠹ time=2025-01-31T20:48:19.586Z level=INFO source=server.go:104 msg=\"system memory\" total=\"1690.2 GiB\"",
        );
        assert_eq!(c.text, "msg=\"system memory\" total=\"1690.2 GiB\"");
        let c =
            clean("0.00.035.060 I llama_model_loader: loaded meta data with 30 key-value pairs");
        assert_eq!(
            c.text,
            "llama_model_loader: loaded meta data with 30 key-value pairs"
        );
        let c = clean(
            "#033[2m#033[33m(raylet)#033[0m [2025-04-02 15:02:00,117 E 135782 135782] (raylet) node_manager.cc:3069: 1 Workers (tasks / actors) killed due to memory pressure (OOM)",
        );
        assert_eq!(
            c.text,
            "node_manager.cc:3069: 1 Workers (tasks / actors) killed due to memory pressure (OOM)"
        );
        let c = clean("[Di Mai 19 09:42:18 2026] oom-kill:constraint=CONSTRAINT_MEMCG");
        assert_eq!(c.text, "oom-kill:constraint=CONSTRAINT_MEMCG");
    }

    #[test]
    fn other_engines_prefixes() {
        assert_eq!(
            clean("[2025-01-01 12:00:00 TP3] Load weight end.")
                .meta
                .rank,
            Some(3)
        );
        assert_eq!(
            clean("2024-07-13 01:58:23.985593: W tensorflow/tsl/framework/bfc_allocator.cc:485] Allocator (GPU_0_bfc) ran out").text,
            "Allocator (GPU_0_bfc) ran out"
        );
        assert_eq!(
            clean("2024-06-17T13:18:29.371622Z ERROR shard-manager: text_generation_launcher: Shard complete").text,
            "Shard complete"
        );
        assert_eq!(
            clean("[TensorRT-LLM][INFO] Loaded engine size: 12 MiB").text,
            "Loaded engine size: 12 MiB"
        );
        assert_eq!(
            clean("W0623 18:20:12.602631 2860192 bfc_allocator.cc:514] x").text,
            "x"
        );
        assert_eq!(
            clean("2024-05-01 12:34:56,789 - trainer - ERROR - boom").text,
            "boom"
        );
        // `%(asctime)s - %(levelname)s - %(message)s` and `[%(asctime)s] %(levelname)s - `.
        let c = clean("2025-02-11 07:45:03,518 - ERROR - Tried to allocate 2.00 GiB");
        assert_eq!(c.text, "Tried to allocate 2.00 GiB");
        assert_eq!(c.meta.level.as_deref(), Some("ERROR"));
        assert_eq!(
            clean("[2025-02-11 07:45:03,518] WARNING - |    0   1234   C   python   900MiB |").text,
            "|    0   1234   C   python   900MiB |"
        );
        // loguru's default format.
        let c = clean(
            "2025-02-11 07:45:03.518 | ERROR    | trainer.loop:step:88 - RuntimeError: CUDA out of memory.",
        );
        assert_eq!(c.text, "RuntimeError: CUDA out of memory.");
        assert_eq!(c.meta.level.as_deref(), Some("ERROR"));
        assert_eq!(
            clean("2025-02-11 07:45:03.518 | SUCCESS  | __main__:<module>:12 - done").text,
            "done"
        );
        // ComfyUI's own log format, in its console and error reports.
        assert_eq!(
            clean("2025-06-15T10:05:53.100000 - Traceback (most recent call last):").text,
            "Traceback (most recent call last):"
        );
        assert_eq!(
            clean("[2024-11-06 23:41:06.473] Total VRAM 4096 MB, total RAM 16000 MB").text,
            "Total VRAM 4096 MB, total RAM 16000 MB"
        );
        assert_eq!(
            clean("[2024-01-01 00:00:00,000] [INFO] [utils.py:791:see_memory_usage] MA 1 GB").text,
            "MA 1 GB"
        );
    }

    #[test]
    fn leaves_message_text_alone() {
        for s in [
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
            "llama_memory_breakdown_print: | memory breakdown [MiB] | total free |",
            "| Allocated memory      |   1024 MiB |",
            "load_tensors: offloaded 33/33 layers to GPU",
            "  File \"/app/train.py\", line 10, in <module>",
        ] {
            assert_eq!(clean(s).text, s.trim_start(), "{s}");
        }
    }

    #[test]
    fn a_piece_cut_on_a_space_says_so() {
        assert!(clean(" free; 9.57 GiB reserved in total by PyTorch)").indented);
        assert!(clean("\tat foo").indented);
        assert!(!clean("6.00 MiB (GPU 0; 10.76 GiB total capacity;").indented);
    }

    #[test]
    fn crlf_and_invalid_utf8() {
        assert_eq!(clean_line(b"abc\r").text, "abc");
        assert_eq!(clean_line(b"a\xffb").text, "a\u{fffd}b");
    }

    #[test]
    fn json_log_records_unwrap() {
        let c = clean(
            r#"{"timestamp":"2024-06-17T13:18:29.371622Z","level":"ERROR","fields":{"message":"Not enough memory to handle 4096 prefill tokens. You need to decrease `--max-batch-prefill-tokens`"},"target":"text_generation_launcher"}"#,
        );
        assert_eq!(
            c.text,
            "Not enough memory to handle 4096 prefill tokens. You need to decrease `--max-batch-prefill-tokens`"
        );
        assert_eq!(c.meta.level.as_deref(), Some("ERROR"));
        assert_eq!(
            c.meta.timestamp.as_deref(),
            Some("2024-06-17T13:18:29.371622Z")
        );
        // A packed traceback keeps its escapes for `split_packed`.
        let c = clean(
            r#"{"timestamp":"2024-06-17T13:18:29Z","level":"ERROR","message":"Method Warmup encountered an error.\nTraceback (most recent call last):\n  File \"/opt/x.py\", line 1, in warmup\ntorch.OutOfMemoryError: CUDA out of memory.","target":"text_generation_launcher"}"#,
        );
        let parts = split_packed(&c.text).unwrap();
        assert_eq!(parts[0], "Method Warmup encountered an error.");
        assert_eq!(parts[2], "  File \"/opt/x.py\", line 1, in warmup");
        // Quotes and colour codes inside a short message.
        let c =
            clean(r#"{"level":"INFO","message":"\u001b[32mArgs { model_id: \"m\" }\u001b[0m"}"#);
        assert_eq!(c.text, "Args { model_id: \"m\" }");
        // Not a log record.
        assert_eq!(clean(r#"{"model": "x"}"#).text, r#"{"model": "x"}"#);
    }

    #[test]
    fn packed_tracebacks_split() {
        let line = "Traceback (most recent call last):\\n  File \"a.py\", line 1, in <module>\\n    f()\\ntorch.OutOfMemoryError: CUDA out of memory.";
        let parts = split_packed(line).unwrap();
        assert_eq!(parts.len(), 4);
        assert!(parts[3].starts_with("torch.OutOfMemoryError"));
        assert!(split_packed("plain line").is_none());
    }
}
