//! Small helpers shared by the local-engine recognisers (llama.cpp, Ollama, XLA/TF,
//! DeepSpeed) and the host-side ones (kernel, systemd, Kubernetes, Ray, Slurm): byte sizes in
//! their formats, Go slog `key=value` pairs, and naming the engine behind a process name.

use super::{Line, id};
use crate::facts::units::{SiBase, parse_number, size_from_parts};
use crate::ingest::log::scanner::{lines_back, lines_forward};

/// The byte range of a capture, for fact spans.
pub(crate) fn span(m: &regex::Match<'_>) -> Option<(usize, usize)> {
    Some((m.start(), m.end()))
}

/// `1234.56` MiB (llama.cpp, nvidia-smi) in bytes.
pub(crate) fn mib(text: &str) -> Option<u64> {
    size_from_parts(text, "MiB", SiBase::Binary)
}

/// The kernel's `123456kB` (KiB) in bytes.
pub(crate) fn kib(text: &str) -> Option<u64> {
    size_from_parts(text, "KiB", SiBase::Binary)
}

/// A size with a unit where `GB`/`MB` mean powers of 1024 (most ML tools).
pub(crate) fn size_bin(number: &str, unit: &str) -> Option<u64> {
    size_from_parts(number, unit, SiBase::Binary)
}

/// A Kubernetes / Docker quantity: `32Gi`, `500Mi`, `16G` (decimal), `1.5Gi`, `17179869184`,
/// docker's `16g` / `512m` (binary, as docker reads them).
pub(crate) fn k8s_quantity(text: &str, docker: bool) -> Option<u64> {
    let t = text
        .trim()
        .trim_matches(['"', '\''])
        .trim_end_matches(['.', ',']);
    let split = t
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_digit() || *c == '.'))
        .map(|(i, _)| i)
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n = parse_number(num)?;
    let mult: f64 = match unit.trim() {
        "" => 1.0,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "k" | "K" if !docker => 1e3,
        "M" if !docker => 1e6,
        "G" if !docker => 1e9,
        "T" if !docker => 1e12,
        "k" | "K" | "kb" | "KB" => 1024.0,
        "m" | "M" | "mb" | "MB" => 1024f64.powi(2),
        "g" | "G" | "gb" | "GB" => 1024f64.powi(3),
        "t" | "T" | "tb" | "TB" => 1024f64.powi(4),
        "b" | "B" => 1.0,
        _ => return None,
    };
    let v = n * mult;
    (v.is_finite() && v >= 0.0).then_some(v.round() as u64)
}

/// A Slurm memory size: `64G`, `64Gb`, `500M`, `4096` (MiB by default), binary units.
pub(crate) fn slurm_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_digit() || *c == '.'))
        .map(|(i, _)| i)
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n = parse_number(num)?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "m" | "mb" => 1024f64.powi(2),
        "k" | "kb" => 1024.0,
        "g" | "gb" => 1024f64.powi(3),
        "t" | "tb" => 1024f64.powi(4),
        _ => return None,
    };
    Some((n * mult).round() as u64)
}

/// One `key=value` pair of a Go slog line, with the byte range of the (unquoted) value.
pub(crate) struct Kv<'a> {
    pub key: &'a str,
    pub value: &'a str,
    pub span: (usize, usize),
}

/// Reads the `key=value` pairs of a Go slog text line: `msg="offload to cuda"
/// layers.requested=-1 memory.available="[7.6 GiB]" "total vram"="8.0 GiB"`. Quoted values
/// may contain spaces; bracketed lists are kept whole.
pub(crate) fn slog_pairs(text: &str) -> Vec<Kv<'_>> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        // Find the start of a key.
        while i < b.len() && b[i] == b' ' {
            i += 1;
        }
        let key_start = i;
        let key_end = if i < b.len() && b[i] == b'"' {
            // quoted key: "total vram"=...
            let Some(close) = text[i + 1..].find('"') else {
                break;
            };
            i + 1 + close + 1
        } else {
            while i < b.len() && b[i] != b'=' && b[i] != b' ' {
                i += 1;
            }
            i
        };
        i = key_end;
        if i >= b.len() || b[i] != b'=' {
            // Not a pair: skip this token.
            while i < b.len() && b[i] != b' ' {
                i += 1;
            }
            continue;
        }
        let key = text[key_start..key_end].trim_matches('"');
        i += 1;
        let (vs, ve, next) = if i < b.len() && b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                if b[j] == b'\\' {
                    j += 1;
                }
                j += 1;
            }
            let end = j.min(b.len());
            (i + 1, end, (end + 1).min(b.len()))
        } else {
            let mut j = i;
            let mut depth = 0i32;
            while j < b.len() && (b[j] != b' ' || depth > 0) {
                match b[j] {
                    b'[' | b'{' => depth += 1,
                    b']' | b'}' => depth -= 1,
                    _ => {}
                }
                j += 1;
            }
            (i, j, j)
        };
        if text.is_char_boundary(vs) && text.is_char_boundary(ve) && vs <= ve {
            out.push(Kv {
                key,
                value: &text[vs..ve],
                span: (vs, ve),
            });
        }
        i = next;
    }
    out
}

/// Ollama's `HumanBytes2` sizes (`5.8 GiB`, `512.0 MiB`, `0 B`) or raw byte counts.
pub(crate) fn human_bytes(text: &str) -> Option<u64> {
    let t = text.trim().trim_matches(['"', '[', ']']);
    if t.is_empty() {
        return None;
    }
    if t.chars().all(|c| c.is_ascii_digit()) {
        return t.parse().ok();
    }
    crate::facts::units::parse_size(t, SiBase::Binary)
}

/// Whether a line comes from inside an Ollama server log: the process tag names ollama, or
/// Go slog lines sit just before it (the runner's llama.cpp output is interleaved with them).
pub(crate) fn in_ollama(line: &Line<'_>) -> bool {
    if line
        .meta
        .process
        .as_deref()
        .is_some_and(|p| p.to_ascii_lowercase().contains("ollama"))
    {
        return true;
    }
    // Raw lines, unclean: a substring test is all this needs.
    let mut found = false;
    walk_back(line, 400, |raw| {
        if raw.contains("msg=") || raw.contains("ollama") {
            found = true;
            return false;
        }
        true
    });
    found
}

/// Walks back from a line over at most `max` raw lines, nearest first (packed sibling lines
/// first), without cleaning them: callers that only look for a few substrings in a long
/// stretch (a kernel OOM report's task table) stay cheap. Stops when `f` returns false.
pub(crate) fn walk_back(line: &Line<'_>, max: usize, mut f: impl FnMut(&str) -> bool) {
    let mut n = 0;
    for s in line.siblings_before.iter().rev() {
        if n >= max || !f(s) {
            return;
        }
        n += 1;
    }
    for raw in lines_back(line.before) {
        if n >= max {
            return;
        }
        let text = String::from_utf8_lossy(raw);
        if !f(&text) {
            return;
        }
        n += 1;
    }
}

/// Like [`walk_back`], forwards.
pub(crate) fn walk_forward(line: &Line<'_>, max: usize, mut f: impl FnMut(&str) -> bool) {
    let mut n = 0;
    for s in line.siblings_after.iter() {
        if n >= max || !f(s) {
            return;
        }
        n += 1;
    }
    for raw in lines_forward(line.after) {
        if n >= max {
            return;
        }
        let text = String::from_utf8_lossy(raw);
        if !f(&text) {
            return;
        }
        n += 1;
    }
}

/// The engine of the process a restating message (systemd's unit line, Slurm's `srun:
/// error: ... Out Of Memory`) is about, from the kill reported just before it: the kernel's
/// `Killed process N (comm)`, a shell's `Killed  python ...`, or Python on the lines nearby.
/// A wrapper's engine replaces a `pytorch` incident's, so it must not be vaguer than that.
pub(crate) fn victim_engine_nearby(line: &Line<'_>, default: &'static str) -> &'static str {
    let mut found = None;
    walk_back(line, 60, |raw| {
        if let Some(i) = raw.find("Killed process ") {
            let rest = &raw[i + "Killed process ".len()..];
            if let (Some(a), Some(b)) = (rest.find('('), rest.find(')')) {
                if a < b {
                    found = Some(crate::facts::engine::of_process(&rest[a + 1..b]));
                    return false;
                }
            }
        }
        if raw.contains(" Killed ") && raw.contains("python")
            || raw.contains("torchrun")
            || raw.contains("Traceback (most recent call last)")
        {
            found = Some(id::PYTORCH);
            return false;
        }
        true
    });
    match found {
        Some(id::LINUX) | None => default,
        Some(e) => e,
    }
}

/// Where a cgroup path says the process ran.
pub(crate) fn container_of_cgroup(path: &str) -> Option<&'static str> {
    let p = path.to_ascii_lowercase();
    if p.contains("kubepods") {
        Some("kubernetes")
    } else if p.contains("docker") || p.contains("libpod") || p.contains("containerd") {
        Some("docker")
    } else if p.contains("slurm") {
        Some("slurm")
    } else if p.contains(".service") || p.contains(".scope") || p.contains(".slice") {
        Some("systemd")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(mib("512.00"), Some(512 << 20));
        assert_eq!(kib("123456"), Some(123456 * 1024));
        assert_eq!(k8s_quantity("32Gi", false), Some(32 << 30));
        assert_eq!(k8s_quantity("16G", false), Some(16_000_000_000));
        assert_eq!(k8s_quantity("16g", true), Some(16 << 30));
        assert_eq!(k8s_quantity("51200Ki", false), Some(51200 * 1024));
        assert_eq!(k8s_quantity("lots", false), None);
        assert_eq!(slurm_size("64G"), Some(64 << 30));
        assert_eq!(slurm_size("64Gb"), Some(64 << 30));
        assert_eq!(slurm_size("4096"), Some(4096 << 20));
        assert_eq!(
            human_bytes("\"5.5 GiB\""),
            Some((5.5 * 1073741824.0) as u64)
        );
        assert_eq!(human_bytes("393216983040"), Some(393216983040));
        assert_eq!(human_bytes("0 B"), Some(0));
    }

    #[test]
    fn slog() {
        let t = r#"msg="offload to cuda" layers.requested=-1 memory.available="[7.6 GiB]" memory.required.full="7.1 GiB" "total vram"="8.0 GiB" list=[1 2] x="a \"q\" b""#;
        let kv = slog_pairs(t);
        let get = |k: &str| kv.iter().find(|p| p.key == k).map(|p| p.value);
        assert_eq!(get("msg"), Some("offload to cuda"));
        assert_eq!(get("layers.requested"), Some("-1"));
        assert_eq!(get("memory.available"), Some("[7.6 GiB]"));
        assert_eq!(get("memory.required.full"), Some("7.1 GiB"));
        assert_eq!(get("total vram"), Some("8.0 GiB"));
        assert_eq!(get("list"), Some("[1 2]"));
        let p = kv.iter().find(|p| p.key == "memory.required.full").unwrap();
        assert_eq!(&t[p.span.0..p.span.1], "7.1 GiB");
    }
}
