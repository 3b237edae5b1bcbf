//! `oomdoctor bundle`: a report to attach to a bug report, redacted.
//!
//! It carries the diagnosis, the evidence lines with two lines either side (re-read from the
//! input files, streaming, so a multi-gigabyte log costs no memory), the environment the
//! logs state (versions, GPU model, driver, CUDA, from the diagnosis' facts and a scan of the
//! lines), and a few lines per snapshot instead of the pickle. Everything goes through
//! [`crate::bundle::redact`] before it is written.

pub mod redact;

use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Read};
use std::sync::LazyLock;

use regex::Regex;
use serde::Serialize;

use crate::diagnosis::report::Diagnosis;
use crate::render::bundle::{ContextBlock, EnvFact, Extras, SnapshotSummary, snapshot_summary};
use crate::render::plot::SnapshotPlot;
use redact::Counts;

/// Lines either side of an evidence line.
pub const RADIUS: u64 = 2;
/// Evidence lines quoted per input, at most.
pub const MAX_FOCUS: usize = 16;
/// Characters kept of one quoted line.
const MAX_LINE: usize = 600;

/// Version lines logs print: `torch 2.3.1+cu121`, `transformers==4.41.2`, `vLLM version
/// 0.9.1`, `Python 3.11.7`, `Driver Version: 535.104.05`, `CUDA Version: 12.2`, and GPU
/// model names as nvidia-smi, torch and engines print them.
static ENV: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?i)\b(?P<pkg>torch|pytorch|transformers|vllm|deepspeed|accelerate|peft|flash[-_]attn|bitsandbytes|xformers|triton|sglang|trl|jax|tensorflow)",
        r"(?:\s+version)?\s*(?:==|:|=|\s)\s*v?(?P<ver>\d+\.\d+(?:\.\d+)?(?:[a-z0-9.+-]*))",
        r"|\b(?P<py>python)\s*(?:version)?\s*:?\s*(?P<pyver>3\.\d+\.\d+)",
        r"|\b(?P<drv>driver version)\s*:?\s*(?P<drvver>\d+\.\d+(?:\.\d+)?)",
        r"|\b(?P<cuda>cuda(?: runtime)? version)\s*:?\s*(?P<cudaver>\d+\.\d+(?:\.\d+)?)",
        r"|(?-i:\b(?P<gpu>NVIDIA (?:GeForce |Tesla |Quadro )?(?:RTX |GTX )?[A-Z]{0,2}\d{1,4}[A-Za-z0-9-]*(?: \d+GB)?(?: HBM\d[a-z]?)?|Tesla [A-Z]\d{2,3}[A-Za-z0-9-]*|AMD Instinct MI\d+[A-Za-z]*|Apple M\d(?: Pro| Max| Ultra)?)\b)"
    ))
    .expect("static regex")
});

/// Facts worth stating in a bug report, with the label they get.
const ENV_FACTS: &[(&str, &str)] = &[
    ("torch.version", "PyTorch"),
    ("engine", "Engine"),
    ("oom.backend", "Device family"),
    ("oom.total_bytes", "Device capacity"),
    ("host.total_ram_bytes", "Host RAM"),
    ("host.cgroup_limit_bytes", "Container limit"),
    ("model.name", "Model"),
    ("model.params", "Parameters"),
    ("model.dtype", "Weights dtype"),
    ("train.batch_size", "Batch size"),
    ("train.seq_len", "Sequence length"),
    ("train.gradient_accumulation_steps", "Gradient accumulation"),
    ("train.mixed_precision", "Mixed precision"),
    ("train.gradient_checkpointing", "Gradient checkpointing"),
    ("train.world_size", "World size"),
    ("train.zero_stage", "ZeRO stage"),
    ("torch.alloc_conf", "PYTORCH_CUDA_ALLOC_CONF"),
];

/// The environment the diagnosis' facts state (first incident that has each).
pub fn environment_from_facts(d: &Diagnosis) -> Vec<EnvFact> {
    let mut out = Vec::new();
    for (name, label) in ENV_FACTS {
        for i in &d.incidents {
            if let Some(v) = i.facts.display(name) {
                let source = i
                    .facts
                    .get(name)
                    .and_then(|f| f.sources.first())
                    .filter(|s| s.line.is_some())
                    .map(|s| s.short());
                out.push(EnvFact {
                    name: label.to_string(),
                    value: v,
                    source,
                });
                break;
            }
        }
    }
    out
}

/// Reads one line, keeping at most `max` bytes of it; `None` at the end.
fn bounded_line(r: &mut dyn BufRead, max: usize, buf: &mut Vec<u8>) -> io::Result<Option<()>> {
    buf.clear();
    let mut any = false;
    loop {
        let chunk = r.fill_buf()?;
        if chunk.is_empty() {
            return Ok(any.then_some(()));
        }
        any = true;
        let (take, done) = match memchr::memchr(b'\n', chunk) {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        let room = max.saturating_sub(buf.len());
        buf.extend_from_slice(&chunk[..take.min(room)]);
        r.consume(take);
        if done {
            return Ok(Some(()));
        }
    }
}

fn tidy(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    let text = text.trim_end_matches(['\r', '\n']);
    let text = crate::ingest::log::clean::strip_ansi(text);
    crate::render::text::clip(&text, MAX_LINE)
}

/// The lines of one input that evidence points at, most important first.
fn focus_lines(d: &Diagnosis, input: &str) -> Vec<u64> {
    let mut v: Vec<u64> = Vec::new();
    let mut add = |l: Option<u64>| {
        if let Some(l) = l {
            if !v.contains(&l) && v.len() < MAX_FOCUS {
                v.push(l);
            }
        }
    };
    for i in d.incidents.iter().filter(|i| i.location.input == input) {
        add(i.location.line);
    }
    for i in &d.incidents {
        for e in &i.evidence {
            if e.input == input {
                add(e.line);
            }
            for s in e.sources.iter().filter(|s| &*s.input == input) {
                add(s.line);
            }
        }
    }
    v.sort_unstable();
    v
}

/// Streams one input: the lines within [`RADIUS`] of its evidence lines, and the
/// environment lines it states.
pub fn scan_input(
    name: &str,
    reader: &mut dyn Read,
    focus: &[u64],
    env: &mut BTreeMap<String, EnvFact>,
) -> io::Result<ContextBlock> {
    let mut r = BufReader::with_capacity(1 << 16, reader);
    let mut buf = Vec::new();
    let mut n = 0u64;
    let mut lines = Vec::new();
    let wanted = |n: u64| {
        focus
            .iter()
            .any(|f| n + RADIUS >= *f && n <= f.saturating_add(RADIUS))
    };
    while bounded_line(&mut r, 4096, &mut buf)?.is_some() {
        n += 1;
        if wanted(n) {
            lines.push((n, tidy(&buf)));
        }
        if env.len() < 24 {
            let text = String::from_utf8_lossy(&buf[..buf.len().min(2000)]);
            for c in ENV.captures_iter(&text) {
                let (key, value) = if let (Some(p), Some(v)) = (c.name("pkg"), c.name("ver")) {
                    let p = p.as_str().to_ascii_lowercase();
                    let p = if p == "pytorch" {
                        "torch".to_string()
                    } else {
                        p
                    };
                    (p, v.as_str().to_string())
                } else if let Some(v) = c.name("pyver") {
                    ("python".into(), v.as_str().to_string())
                } else if let Some(v) = c.name("drvver") {
                    ("NVIDIA driver".into(), v.as_str().to_string())
                } else if let Some(v) = c.name("cudaver") {
                    ("CUDA".into(), v.as_str().to_string())
                } else if let Some(g) = c.name("gpu") {
                    ("GPU".into(), g.as_str().trim().to_string())
                } else {
                    continue;
                };
                env.entry(key.clone()).or_insert(EnvFact {
                    name: key,
                    value,
                    source: Some(format!("{name}:{n}")),
                });
            }
        }
    }
    Ok(ContextBlock {
        input: name.to_string(),
        lines,
        focus: focus.to_vec(),
        note: None,
    })
}

/// A file to re-read for context: its name in the diagnosis and a way to open it again.
pub struct Source<'a> {
    pub name: String,
    pub open: Box<dyn Fn() -> io::Result<Box<dyn Read>> + 'a>,
}

/// Gathers the extras: environment and context from the sources that can be re-read,
/// excerpt lines alone for the others (standard input), a summary per snapshot.
pub fn gather(d: &Diagnosis, sources: &[Source<'_>], snapshots_unread: &[String]) -> Extras {
    let mut env: BTreeMap<String, EnvFact> = BTreeMap::new();
    let mut context = Vec::new();
    for input in d.inputs.iter().filter(|i| i.kind == "log") {
        let focus = focus_lines(d, &input.name);
        let source = sources.iter().find(|s| s.name == input.name);
        let block = match source.map(|s| (s.open)()) {
            Some(Ok(mut r)) => scan_input(&input.name, &mut r, &focus, &mut env).ok(),
            _ => None,
        };
        match block {
            Some(b) if !b.lines.is_empty() => context.push(b),
            Some(_) => {}
            None if !focus.is_empty() => {
                // Not re-readable: the evidence lines themselves, from the diagnosis.
                let lines: Vec<(u64, String)> = d
                    .excerpts
                    .iter()
                    .filter(|x| x.input == input.name && focus.contains(&x.line))
                    .map(|x| (x.line, crate::render::text::clip(&x.text, MAX_LINE)))
                    .collect();
                context.push(ContextBlock {
                    input: input.name.clone(),
                    lines,
                    focus: focus.clone(),
                    note: Some(
                        "Standard input cannot be read twice, so these are the evidence lines alone (cleaned of prefixes), without the lines around them."
                            .into(),
                    ),
                });
            }
            None => {}
        }
    }
    let mut environment = environment_from_facts(d);
    for (_, e) in env {
        let label = match e.name.as_str() {
            "torch" => "PyTorch".to_string(),
            "python" => "Python".to_string(),
            other => other.to_string(),
        };
        match environment.iter_mut().find(|x| x.name == label) {
            // A version the log printed beats one inferred from the OOM's wording (`>=2.4`).
            Some(x) if x.value.starts_with(['<', '>']) => {
                *x = EnvFact { name: label, ..e };
            }
            Some(_) => {}
            None => environment.push(EnvFact { name: label, ..e }),
        }
    }
    let mut snapshots: Vec<SnapshotSummary> = d
        .snapshots
        .iter()
        .map(|p: &SnapshotPlot| SnapshotSummary {
            input: p.input.clone(),
            text: Some(snapshot_summary(p)),
        })
        .collect();
    for s in snapshots_unread {
        if !snapshots.iter().any(|x| &x.input == s) {
            snapshots.push(SnapshotSummary {
                input: s.clone(),
                text: None,
            });
        }
    }
    Extras {
        environment,
        context,
        snapshots,
    }
}

fn masked_note(c: &Counts) -> String {
    if c.total() == 0 {
        return "Nothing needed masking.".into();
    }
    let mut parts = Vec::new();
    for (n, what) in [
        (c.users, "user name"),
        (c.hosts, "host name"),
        (c.ips, "IP address"),
        (c.tokens, "token or key"),
        (c.emails, "e-mail address"),
        (c.other, "match of the added patterns"),
    ] {
        if n > 0 {
            parts.push(crate::render::text::count(n, what));
        }
    }
    format!("Masked: {}.", parts.join(", "))
}

/// The bundle as markdown: rendered, then redacted; the header says what was masked.
pub fn markdown(d: &Diagnosis, extras: &Extras) -> String {
    markdown_with(d, extras, &[])
}

/// [`markdown`], also masking what `extra` matches (`--redact`) as `[REDACTED]`.
pub fn markdown_with(d: &Diagnosis, extras: &Extras, extra: &[regex::Regex]) -> String {
    let body = crate::render::bundle::render(d, extras);
    let (body, counts) = redact::redact_with(&body, extra);
    format!(
        "# oomdoctor bundle\n\n> Made by oomdoctor {} for a bug report. Home directories, host names, IP addresses, tokens and e-mail addresses are masked as `[USER]`, `[HOST]`, `[IP]`, `[TOKEN]`, `[EMAIL]`. {} Read it before you post it.\n\n{body}",
        d.tool.version,
        masked_note(&counts)
    )
}

#[derive(Serialize)]
struct JsonBundle<'a> {
    bundle_version: u32,
    diagnosis: &'a Diagnosis,
    #[serde(flatten)]
    extras: &'a Extras,
}

/// The bundle as JSON: the diagnosis (schema v1) and the extras, every string redacted.
pub fn json(d: &Diagnosis, extras: &Extras) -> String {
    json_with(d, extras, &[])
}

/// [`json`], also masking what `extra` matches (`--redact`) as `[REDACTED]`.
pub fn json_with(d: &Diagnosis, extras: &Extras, extra: &[regex::Regex]) -> String {
    let mut v = serde_json::to_value(JsonBundle {
        bundle_version: 1,
        diagnosis: d,
        extras,
    })
    .unwrap_or_default();
    let counts = redact::redact_json_with(&mut v, extra);
    v["masked"] = serde_json::json!({
        "users": counts.users, "hosts": counts.hosts, "ips": counts.ips,
        "tokens": counts.tokens, "emails": counts.emails, "other": counts.other
    });
    let mut s = serde_json::to_string_pretty(&v).unwrap_or_default();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_lines_are_found() {
        let log = "Python 3.11.7\ntorch==2.3.1+cu121 transformers 4.41.2\n| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2 |\n|   0  NVIDIA A100-SXM4-80GB  On |\nstep 1\nstep 2\nboom\nafter\n";
        let mut env = BTreeMap::new();
        let block = scan_input("x.log", &mut log.as_bytes(), &[7], &mut env).unwrap();
        let get = |k: &str| env.get(k).map(|e| e.value.as_str());
        assert_eq!(get("python"), Some("3.11.7"));
        assert_eq!(get("torch"), Some("2.3.1+cu121"));
        assert_eq!(get("transformers"), Some("4.41.2"));
        assert_eq!(get("NVIDIA driver"), Some("535.104.05"));
        assert_eq!(get("CUDA"), Some("12.2"));
        assert_eq!(get("GPU"), Some("NVIDIA A100-SXM4-80GB"));
        assert_eq!(
            block.lines.iter().map(|l| l.0).collect::<Vec<_>>(),
            vec![5, 6, 7, 8]
        );
    }

    #[test]
    fn long_lines_are_bounded() {
        let long = format!("{}\nnext\n", "x".repeat(100_000));
        let mut r = BufReader::new(long.as_bytes());
        let mut buf = Vec::new();
        assert!(bounded_line(&mut r, 100, &mut buf).unwrap().is_some());
        assert_eq!(buf.len(), 100);
        bounded_line(&mut r, 100, &mut buf).unwrap();
        assert_eq!(buf, b"next\n");
        assert!(bounded_line(&mut r, 100, &mut buf).unwrap().is_none());
    }
}
