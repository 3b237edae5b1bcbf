//! Telling series formats apart from the first few KiB of content (never the file name).
//!
//! The sniffer must not claim a crash log, a pickle or a config file, because the caller
//! tries it on every input: each format is recognised by structure every line of the head
//! shares (a known header, the exposition grammar, a JSON object with a time and a memory
//! key), not by a word appearing somewhere.

use super::SeriesFormat;
use super::columns::{Col, classify};
use super::smi;
use super::time::{EpochUnit, TimeParser, trim};

/// Lines of the head looked at.
const MAX_LINES: usize = 64;

/// The series format of an input, from its first bytes (a few KiB), or `None` if it is not
/// a series oomdoctor reads.
pub fn sniff(head: &[u8]) -> Option<SeriesFormat> {
    let head = head.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(head);
    // Binary (pickles start with 0x80, gzip with 0x1f8b; both have control bytes).
    // No early exit: the branch-free fold compiles to vector compares, and text (the
    // common case) has to be read to the end anyway.
    if head[..head.len().min(4096)].iter().fold(false, |bin, &c| {
        bin | (c < 0x09) | ((0x0e..0x20).contains(&c) & (c != 0x1b))
    }) {
        return None;
    }
    // Only the first MAX_LINES non-blank lines are looked at: cut there before validating
    // and splitting (a directory of logs sniffs every file; its head is 64 KiB).
    let head = &head[..head_lines_end(head, MAX_LINES)];
    let text = match std::str::from_utf8(head) {
        Ok(t) => t,
        // A head cut inside a multi-byte character is fine; invalid bytes elsewhere are not.
        Err(e) if e.error_len().is_none() => {
            std::str::from_utf8(head.get(..e.valid_up_to())?).ok()?
        }
        Err(_) => return None,
    };
    // The last piece may be cut mid-line, unless it is all there is. Only the first
    // MAX_LINES lines are split off: a directory of small logs sniffs each file whole.
    let complete = match text.rfind('\n') {
        Some(i) if !text.ends_with('\n') => &text[..=i],
        _ => text,
    };
    // Split at each `\n` found by `memchr` (what `str::split` does, without its
    // per-character searcher: this runs on every file of a directory). A `\n` is ASCII, so
    // both ends of every piece are character boundaries.
    let ends = memchr::memchr_iter(b'\n', complete.as_bytes()).chain([complete.len()]);
    let lines: Vec<&str> = ends
        .scan(0, |start, end| {
            let line = &complete[*start..end];
            *start = end + 1;
            Some(line)
        })
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| !l.trim().is_empty())
        .take(MAX_LINES)
        .collect();
    let first = *lines.first()?;
    if first.trim_start().starts_with('{') {
        return jsonl(&lines).then_some(SeriesFormat::JsonLines);
    }
    if prometheus(&lines) {
        return Some(SeriesFormat::Prometheus);
    }
    let fields: Vec<&str> = first.split(',').collect();
    if let Some(kind) = smi::header_kind(&fields) {
        return Some(kind);
    }
    if plain_csv(&lines) {
        return Some(SeriesFormat::PlainCsv);
    }
    // Headerless rows need a field count most of them share: counted first, so a log's
    // lines are not split into vectors only to find that they do not.
    smi::modal(
        lines
            .iter()
            .map(|l| memchr::memchr_iter(b',', l.as_bytes()).count() + 1),
    )?;
    let rows: Vec<Vec<&[u8]>> = lines
        .iter()
        .map(|l| l.split(',').map(str::as_bytes).collect())
        .collect();
    // A single line of numbers proves little; a headerless log has rows to spare.
    if rows.len() >= 2 || rows.first().is_some_and(|r| r.len() >= 3) {
        return smi::headerless_kind(&rows);
    }
    None
}

/// Where the `lines`-th line holding an ASCII byte other than whitespace ends (after its
/// newline), or the head's length. A line blank to `str::trim` is never counted, so the
/// cut keeps at least the lines [`sniff`] takes.
fn head_lines_end(head: &[u8], lines: usize) -> usize {
    let mut seen = 0;
    let mut start = 0;
    for nl in memchr::memchr_iter(b'\n', head) {
        if head[start..nl]
            .iter()
            .any(|b| b.is_ascii() && !b.is_ascii_whitespace())
        {
            seen += 1;
            if seen == lines {
                return nl + 1;
            }
        }
        start = nl + 1;
    }
    head.len()
}

/// Every line a JSON object, the first with a time key and a memory (or engine) key.
fn jsonl(lines: &[&str]) -> bool {
    let mut ok = 0;
    for (i, l) in lines.iter().enumerate() {
        let Ok(serde_json::Value::Object(obj)) = serde_json::from_str::<serde_json::Value>(l)
        else {
            return false;
        };
        if i == 0 {
            let has_pid = obj.contains_key("pid");
            let cols: Vec<Col> = obj.keys().map(|k| classify(k, has_pid)).collect();
            let time = cols.iter().any(|c| matches!(c, Col::Time(_)));
            let memory = cols
                .iter()
                .any(|c| matches!(c, Col::Used(_) | Col::Free(_) | Col::KvUsage));
            if !(time && memory) {
                return false;
            }
        }
        ok += 1;
    }
    ok > 0
}

/// Exposition lines: `# HELP`/`# TYPE`/comments and `name{labels} value [ts]` samples, with
/// at least one HELP/TYPE line, labels, or a metric oomdoctor reads (so `step 3` lines of a
/// log are not enough).
fn prometheus(lines: &[&str]) -> bool {
    let mut samples = 0;
    let mut strong = false;
    let mut other = 0;
    let mut tp = TimeParser::new();
    for l in lines {
        let l = l.trim();
        if let Some(c) = l.strip_prefix('#') {
            let c = c.trim_start();
            if c.starts_with("HELP ") || c.starts_with("TYPE ") {
                strong = true;
            }
            continue;
        }
        if l.starts_with(|c: char| c.is_ascii_digit())
            && tp.parse(l.as_bytes(), EpochUnit::Auto).is_some()
        {
            continue; // a `date` line between scrapes
        }
        if sample_line(l) {
            samples += 1;
            let name_end = l
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(l.len());
            let name = &l[..name_end];
            if l[name_end..].starts_with('{')
                || name.starts_with("DCGM_")
                || name.starts_with("vllm:")
                || name.starts_with("sglang:")
            {
                strong = true;
            }
        } else {
            other += 1;
            // At most a tenth of the lines may be other lines: past that no later line can
            // make up for it, and a log is given up on after a few lines instead of 64.
            if other * 10 > lines.len() {
                return false;
            }
        }
    }
    samples > 0 && strong && other * 10 <= samples + other
}

/// `name{…} value [timestamp]` with a valid metric name and numeric value.
fn sample_line(l: &str) -> bool {
    let name_end = l
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(l.len());
    if name_end == 0 || l.starts_with(|c: char| c.is_ascii_digit()) {
        return false;
    }
    let mut rest = &l[name_end..];
    if rest.starts_with('{') {
        // The label set ends at the last `}` (label values may contain anything else).
        let Some(close) = rest.rfind('}') else {
            return false;
        };
        if !rest[1..close].trim().is_empty() && !rest[1..close].contains("=\"") {
            return false;
        }
        rest = &rest[close + 1..];
    }
    if !rest.starts_with([' ', '\t']) {
        return false;
    }
    let mut parts = rest.split_whitespace();
    let value_ok = parts
        .next()
        .is_some_and(|v| matches!(v, "NaN" | "+Inf" | "-Inf" | "Inf") || v.parse::<f64>().is_ok());
    let ts_ok = parts.next().is_none_or(|t| t.parse::<f64>().is_ok());
    value_ok && ts_ok && parts.next().is_none()
}

/// A header naming a time column and a memory column, every name identifier-like, and the
/// next row's time and memory cells readable.
fn plain_csv(lines: &[&str]) -> bool {
    let Some((header, rows)) = lines.split_first() else {
        return false;
    };
    let delim = [',', '\t', ';']
        .into_iter()
        .max_by_key(|&d| header.matches(d).count())
        .unwrap_or(',');
    let names: Vec<&str> = header.split(delim).map(str::trim).collect();
    if names.len() < 2
        || names.iter().any(|n| {
            n.is_empty()
                || n.len() > 64
                || !n
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || " _-.[]()%/:".contains(c))
        })
    {
        return false;
    }
    let has_pid = names.iter().any(|n| classify(n, false) == Col::Pid);
    let cols: Vec<Col> = names.iter().map(|n| classify(n, has_pid)).collect();
    let Some(ti) = cols.iter().position(|c| matches!(c, Col::Time(_))) else {
        return false;
    };
    let Some(mi) = cols
        .iter()
        .position(|c| matches!(c, Col::Used(_) | Col::Free(_)))
    else {
        return false;
    };
    let Some(row) = rows.first() else {
        return false;
    };
    let cells: Vec<&str> = row.split(delim).collect();
    if cells.len() != names.len() {
        return false;
    }
    let unit = match cols[ti] {
        Col::Time(u) => u,
        _ => EpochUnit::Auto,
    };
    let time_ok = TimeParser::new()
        .parse(trim(cells[ti].as_bytes()), unit)
        .is_some();
    let mem_ok = super::columns::memory_value(cells[mi]).is_some()
        || super::columns::is_missing(cells[mi].as_bytes());
    time_ok && mem_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_is_cut_after_the_lines_sniff_reads() {
        assert_eq!(head_lines_end(b"a\nb\nc\n", 2), 4);
        // Blank lines, and lines of only non-ASCII text, are not counted: the cut may keep
        // more than `sniff` takes, never less.
        assert_eq!(head_lines_end(b"a\n \r\n\xe4\xb8\x80\nb\nc", 2), 11);
        assert_eq!(head_lines_end(b"a\nb", 2), 3);
        assert_eq!(head_lines_end(b"", 2), 0);
    }

    #[test]
    fn recognises_each_format() {
        let cases: &[(&str, SeriesFormat)] = &[
            (
                "timestamp, index, name, memory.used [MiB], memory.total [MiB]\n2025/09/07 22:33:21.481, 0, NVIDIA A10G, 100 MiB, 23028 MiB\n",
                SeriesFormat::SmiGpu,
            ),
            (
                "2025/09/07 22:33:21.481, 0, NVIDIA A10G, 100 MiB, 23028 MiB\n2025/09/07 22:33:21.490, 1, NVIDIA A10G, 100 MiB, 23028 MiB\n",
                SeriesFormat::SmiGpu,
            ),
            (
                "0, 23342, 24576\n1, 100, 24576\n0, 23342, 24576\n",
                SeriesFormat::SmiGpu,
            ),
            (
                "pid, process_name, used_gpu_memory [MiB]\n3858903, VLLM::EngineCore, 6265 MiB\n",
                SeriesFormat::SmiApps,
            ),
            (
                "3858903, VLLM::EngineCore, 6265 MiB\n3858911, python3, 1200 MiB\n",
                SeriesFormat::SmiApps,
            ),
            (
                "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\n# TYPE DCGM_FI_DEV_FB_USED gauge\nDCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-1\"} 1234\n",
                SeriesFormat::Prometheus,
            ),
            (
                "vllm:kv_cache_usage_perc{engine=\"0\"} 0.5 1757284401000\n",
                SeriesFormat::Prometheus,
            ),
            (
                "timestamp,used_bytes,total_bytes\n2025-09-07T22:33:21Z,1073741824,25769803776\n",
                SeriesFormat::PlainCsv,
            ),
            (
                "time,memory_used_mib\n1757284401,1024\n",
                SeriesFormat::PlainCsv,
            ),
            (
                "{\"ts\": 1757284401.5, \"used\": 1024}\n{\"ts\": 1757284402.5, \"used\": 1025}\n",
                SeriesFormat::JsonLines,
            ),
        ];
        for (text, want) in cases {
            assert_eq!(sniff(text.as_bytes()), Some(*want), "{text}");
        }
    }

    #[test]
    fn refuses_logs_pickles_and_configs() {
        let crash = "Traceback (most recent call last):\n  File \"train.py\", line 12, in <module>\n    loss.backward()\n\
                     torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.68 GiB of which 1.12 GiB is free.\n";
        let pylog = "2024-05-01 12:34:56,789 - INFO - step 3 loss 1.23\n2024-05-01 12:34:57,789 - INFO - step 4 loss 1.21\n";
        let config =
            "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"hidden_size\": 4096\n}\n";
        let minified = "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 4096, \"torch_dtype\": \"bfloat16\"}";
        let json_log =
            "{\"time\": \"2025-09-07T22:33:21Z\", \"level\": \"INFO\", \"msg\": \"started\"}\n";
        let metrics_csv = "epoch,loss,accuracy\n1,0.53,0.71\n2,0.41,0.77\n";
        let progress = "step 100\nstep 200\nloss 1.5\n";
        let numbers = "1, 0.5, 0.25\n2, 0.4, 0.2\n";
        let vllm_log = "INFO 08-22 20:52:36 [gpu_worker.py:563] Available KV cache memory: 11.76 GiB\nINFO 08-22 20:52:37 [kv_cache_utils.py:1087] GPU KV cache size: 96,336 tokens\n";
        for text in [
            crash,
            pylog,
            config,
            minified,
            json_log,
            metrics_csv,
            progress,
            numbers,
            vllm_log,
        ] {
            assert_eq!(sniff(text.as_bytes()), None, "{text}");
        }
        let pickle: &[u8] =
            b"\x80\x04\x95\x1a\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x08segments\x94]\x94u.";
        assert_eq!(sniff(pickle), None);
        let gzip: &[u8] = b"\x1f\x8b\x08\x00\x00\x00\x00\x00";
        assert_eq!(sniff(gzip), None);
        assert_eq!(sniff(b""), None);
    }

    #[test]
    fn a_head_cut_mid_line_is_still_recognised() {
        let text = "timestamp, index, memory.used [MiB], memory.total [MiB]\n2025/09/07 22:33:21.481, 0, 100 MiB, 24576 MiB\n2025/09/07 22:3";
        assert_eq!(sniff(text.as_bytes()), Some(SeriesFormat::SmiGpu));
        let prom = "# TYPE DCGM_FI_DEV_FB_USED gauge\nDCGM_FI_DEV_FB_USED{gpu=\"0\"} 1234\nDCGM_FI_DEV_FB_USED{gp";
        assert_eq!(sniff(prom.as_bytes()), Some(SeriesFormat::Prometheus));
    }
}
