//! LM Studio: its load guardrail, which refuses a model that its own estimate says will not
//! fit in the memory free at that moment.
//!
//! LM Studio (0.3+, `lms log stream`, the app's developer logs) prints, before loading a
//! model, the device's memory as it measured it and its estimate of the load:
//!
//! ```text
//!  [LM Studio] Live GPU memory info (source 'LMS Core'):
//!   GPU 0
//!     Name: NVIDIA GeForce RTX 4090
//!     Total: 23.99 GB
//!     Used: 20.87 GB
//!     Free: 3.12 GB
//!  [LM Studio] Model load size estimate with raw num offload layers 'max' and context length '16384':
//!   Model: 11.20 GB
//!   Context: 930.12 MB
//!   Total: 12.13 GB
//! ```
//!
//! and, when the estimate exceeds what is free, refuses with `Error: Not enough resources to
//! load the model with the current settings` (the app: `Failed to load the model`). Its
//! "GB" are binary (a 24,564 MiB card reads 23.99 GB). Nothing was allocated: the numbers
//! decide between a model larger than the device, its context, and memory something else
//! (often another model LM Studio keeps loaded) holds.
//!
//! When a loaded model crashes, LM Studio 0.2 shows a diagnostic report (pasted into most of
//! its bug reports) with the machine's memory at that moment:
//!
//! ```text
//! "cause": "(Exit code: 0). Some model operation failed. Try a different model and/or config.",
//! "data": { "memory": { "ram_capacity": "7.88 GB", "ram_unused": "832.32 MB" },
//!           "gpu": { "type": "NvidiaCuda", "vram_recommended_capacity": "11.93 GB", "vram_unused": "6.02 GB" }, ...
//! ```
//!
//! A crash is not a failure to allocate by itself (an unsupported architecture exits the
//! same way); with the RAM all but used up and the GPU not, it is the host's memory
//! ([`RAM_NEARLY_FULL`]).

use std::sync::LazyLock;

use regex::Regex;

use super::local::{size_bin, walk_forward};
use super::{Domain, Emit, Failure, Line, PhaseMark, Recognizer, id};
use crate::ingest::log::clean::clean_line;
use crate::ingest::log::pattern::static_regex;

/// `Total: 23.99 GB`, `Context: 930.12 MB` under one of the two headers.
static FIGURE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"^(?P<k>Total|Used|Free|Model|Context):\s*(?P<n>\d+(?:\.\d+)?)\s*(?P<u>[KMGT]i?B)\b",
    )
});
static CONTEXT_LENGTH: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"context length '(?P<n>\d+)'"));
/// A crash report's figure: `"ram_unused": "832.32 MB"`.
static REPORT_FIGURE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r#""(?P<k>ram_capacity|ram_unused|vram_recommended_capacity|vram_unused)"\s*:\s*"(?P<n>\d+(?:\.\d+)?)\s*(?P<u>[KMGT]i?B)""#,
    )
});
/// The hardware survey LM Studio logs at start: each GPU's memory
/// (`"totalMemoryCapacityBytes":17179869184`; on Apple silicon Metal's working set).
static SURVEY_GPU: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r#""totalMemoryCapacityBytes"\s*:\s*(?P<n>\d+)"#));
/// `Loading model mlx-community/QwQ-32B-4bit (size on disk: 18.44 GB, context length:
/// 4096)`: the model file's size, in decimal gigabytes as the app shows it.
static LOADING_MODEL: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"Loading model (?P<name>\S+) \(size on disk: (?P<n>\d+(?:\.\d+)?) (?P<u>[KMGT]B)(?:, context length: (?P<ctx>\d+))?",
    )
});
/// The guardrail's refusal, in either wording (0.3.x's `Not enough resources to load the
/// model with the current settings`; `Model loading aborted due to insufficient system
/// resources. Overloading the system will likely cause it to freeze.`).
const GUARDRAIL: [&str; 2] = [
    "Not enough resources to load the model",
    "Model loading aborted due to insufficient system resources",
];
/// `"use_mlock": true` in a model preset or load config ("Keep model in memory").
static USE_MLOCK: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r#""use_mlock"\s*:\s*(?P<v>true|false)"#));

/// The share of RAM left unused at a crash at or below which the crash is the host's memory
/// running out: a desktop never idles with less than a few percent of its RAM free, and
/// the GPU's memory, when the report gives it, must not be the scarcer of the two.
const RAM_NEARLY_FULL: f64 = 0.12;

/// The LM Studio recogniser.
pub struct LmStudio;

impl Recognizer for LmStudio {
    fn engine(&self) -> &'static str {
        id::LMSTUDIO
    }

    fn anchors(&self) -> &'static [&'static str] {
        &[
            "Live GPU memory info",
            "Model load size estimate",
            "Not enough resources to load the model",
            "Model loading aborted due to insufficient",
            "totalMemoryCapacityBytes",
            "size on disk:",
            "(Exit code: ",
            "[LM STUDIO SERVER] Processing queued request",
            "[LM STUDIO SERVER] Streaming response",
            "\"use_mlock\"",
        ]
    }

    fn recognize(&self, line: &Line<'_>, out: &mut Emit) {
        let text = line.text;
        if GUARDRAIL.iter().any(|g| text.contains(g)) {
            out.engine(id::LMSTUDIO);
            out.phase(PhaseMark::LoadFailed);
            let mut f = Failure::new("device-oom", id::LMSTUDIO, Domain::Device);
            f.fact("oom.wording", "lmstudio-guardrail", None);
            out.failure(f);
            return;
        }
        // The local server at work: a crash after these is one while serving.
        if text.contains("[LM STUDIO SERVER] Processing queued request")
            || text.contains("[LM STUDIO SERVER] Streaming response")
        {
            out.engine(id::LMSTUDIO);
            out.phase(PhaseMark::Serving);
            return;
        }
        if text.contains("totalMemoryCapacityBytes") {
            let total: u64 = SURVEY_GPU
                .captures_iter(text)
                .filter_map(|c| c["n"].parse::<u64>().ok())
                .sum();
            if total > 0 {
                out.engine(id::LMSTUDIO);
                out.fact("lmstudio.gpu_total_bytes", total, None);
            }
            return;
        }
        if let Some(c) = LOADING_MODEL.captures(text) {
            out.engine(id::LMSTUDIO);
            if let Some(b) = crate::facts::units::parse_size(
                &format!("{} {}", &c["n"], &c["u"]),
                crate::facts::units::SiBase::Decimal,
            ) {
                out.fact("lmstudio.model_file_bytes", b, None);
            }
            out.fact("model.name", c["name"].to_string(), None);
            if let Some(n) = c.name("ctx").and_then(|m| m.as_str().parse::<u64>().ok()) {
                out.fact("lmstudio.context_length", n, None);
            }
            return;
        }
        if let Some(c) = USE_MLOCK.captures(text) {
            out.fact("lmstudio.use_mlock", &c["v"] == "true", None);
            return;
        }
        if text.contains("\"cause\"") && text.contains("(Exit code: ") {
            crash_report(line, out);
            return;
        }
        let (names, sums): (&[(&str, &str)], bool) = if text.contains("Live GPU memory info") {
            (
                &[
                    ("Total", "lmstudio.gpu_total_bytes"),
                    ("Used", "lmstudio.gpu_used_bytes"),
                    ("Free", "lmstudio.gpu_free_bytes"),
                ],
                true,
            )
        } else if text.contains("Model load size estimate") {
            if let Some(n) = CONTEXT_LENGTH
                .captures(text)
                .and_then(|c| c["n"].parse::<u64>().ok())
            {
                out.fact("lmstudio.context_length", n, None);
            }
            (
                &[
                    ("Total", "lmstudio.estimate_bytes"),
                    ("Model", "lmstudio.estimate_model_bytes"),
                    ("Context", "lmstudio.estimate_context_bytes"),
                ],
                false,
            )
        } else {
            return;
        };
        out.engine(id::LMSTUDIO);
        // The figures follow, indented; the next log entry (`[LM Studio] ...`, a timestamp)
        // ends them. Several GPUs' figures add up: the model is split over them.
        let mut found: Vec<(&str, u64)> = Vec::new();
        walk_forward(line, 16, |raw| {
            let cleaned = clean_line(raw.as_bytes());
            let t = cleaned.text.trim();
            if t.starts_with('[') || (cleaned.meta.timestamp.is_some() && t.is_empty()) {
                return false;
            }
            if let Some(c) = FIGURE.captures(t)
                && let Some(b) = size_bin(&c["n"], &c["u"])
                && let Some((_, name)) = names.iter().find(|(k, _)| *k == &c["k"])
            {
                match found.iter_mut().find(|(n, _)| n == name) {
                    Some((_, v)) if sums => *v += b,
                    Some(_) => {}
                    None => found.push((name, b)),
                }
            }
            true
        });
        // A figure the paste lost (cut, or garbled by a control character) follows from the
        // other two.
        let get = |found: &[(&str, u64)], n: &str| found.iter().find(|(k, _)| *k == n).map(|f| f.1);
        if sums
            && get(&found, "lmstudio.gpu_used_bytes").is_none()
            && let (Some(total), Some(free)) = (
                get(&found, "lmstudio.gpu_total_bytes"),
                get(&found, "lmstudio.gpu_free_bytes"),
            )
        {
            found.push(("lmstudio.gpu_used_bytes", total.saturating_sub(free)));
        }
        for (name, bytes) in found {
            out.fact(name, bytes, None);
        }
    }
}

/// A crash report's memory figures (the JSON after its `"cause"`): a host failure where the
/// RAM was all but used up and the GPU was not; otherwise only the figures, as facts.
fn crash_report(line: &Line<'_>, out: &mut Emit) {
    out.engine(id::LMSTUDIO);
    let mut figures: Vec<(&'static str, u64)> = Vec::new();
    walk_forward(line, 24, |raw| {
        if let Some(c) = REPORT_FIGURE.captures(raw)
            && let Some(b) = size_bin(&c["n"], &c["u"])
        {
            let name = match &c["k"] {
                "ram_capacity" => "lmstudio.ram_total_bytes",
                "ram_unused" => "lmstudio.ram_free_bytes",
                "vram_recommended_capacity" => "lmstudio.vram_total_bytes",
                _ => "lmstudio.vram_free_bytes",
            };
            if !figures.iter().any(|(n, _)| *n == name) {
                figures.push((name, b));
            }
        }
        // The report's end: its title, the last key LM Studio writes.
        !raw.contains("\"title\"")
    });
    let get = |n: &str| figures.iter().find(|(k, _)| *k == n).map(|f| f.1 as f64);
    let share = |free: Option<f64>, total: Option<f64>| match (free, total) {
        (Some(f), Some(t)) if t > 0.0 => Some(f / t),
        _ => None,
    };
    let ram = share(
        get("lmstudio.ram_free_bytes"),
        get("lmstudio.ram_total_bytes"),
    );
    let vram = share(
        get("lmstudio.vram_free_bytes"),
        get("lmstudio.vram_total_bytes"),
    );
    let host_ran_out = ram.is_some_and(|r| r <= RAM_NEARLY_FULL && vram.is_none_or(|v| v > r));
    if host_ran_out {
        // Nothing killed it: the model crashed when an allocation in RAM failed.
        let mut f = Failure::new("host-oom", id::LMSTUDIO, Domain::Host);
        for (name, bytes) in &figures {
            f.fact(name, *bytes, None);
        }
        out.failure(f);
    } else {
        for (name, bytes) in figures {
            out.fact(name, bytes, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::facts::evidence::InputName;
    use crate::ingest::log::grouping::analyze_log;

    const LOG: &str = "2026-02-25 21:16:40 [DEBUG]\n [LM Studio] Live GPU memory info (source 'LMS Core'):\n  GPU 0\n    Name: NVIDIA GeForce RTX 4090\n    Total: 23.99 GB\n    Used: 20.87 GB\n    Free: 3.12 GB\n2026-02-25 21:16:40 [DEBUG]\n [LM Studio] Model load size estimate with raw num offload layers 'max' and context length '16384':\n  Model: 11.20 GB\n  Context: 930.12 MB\n  Total: 12.13 GB\n2026-02-25 21:16:40 [ERROR]\n [LMSInternal][Client=LM Studio][Endpoint=loadModel] Error in channel handler: Error: Not enough resources to load the model with the current settings\n";

    /// The guardrail's refusal, with the device as LM Studio measured it and its estimate.
    #[test]
    fn the_guardrail_and_its_figures() {
        let input: InputName = Arc::from("t.log");
        let ev = analyze_log(&mut LOG.as_bytes(), &input).unwrap().0;
        assert_eq!(ev.incidents.len(), 1);
        let f = &ev.incidents[0].facts;
        let gib = |n: &str| f.num(n).map(|b| (b / 1073741824.0 * 100.0).round() / 100.0);
        assert_eq!(gib("lmstudio.gpu_total_bytes"), Some(23.99));
        assert_eq!(gib("lmstudio.gpu_used_bytes"), Some(20.87));
        assert_eq!(gib("lmstudio.gpu_free_bytes"), Some(3.12));
        assert_eq!(gib("lmstudio.estimate_bytes"), Some(12.13));
        assert_eq!(gib("lmstudio.estimate_model_bytes"), Some(11.2));
        assert_eq!(f.num("lmstudio.context_length"), Some(16384.0));
        assert_eq!(f.str("phase"), Some("model-load"));
        // A control character after a figure, and a figure missing: the rest still read.
        let noisy = LOG
            .replace("    Used: 20.87 GB\n", "")
            .replace("Free: 3.12 GB", "Free: 3.12 GB\u{7}");
        let ev = analyze_log(&mut noisy.as_bytes(), &input).unwrap().0;
        let f = &ev.incidents[0].facts;
        let gib = |n: &str| f.num(n).map(|b| (b / 1073741824.0 * 100.0).round() / 100.0);
        assert_eq!(gib("lmstudio.gpu_free_bytes"), Some(3.12));
        assert_eq!(gib("lmstudio.gpu_used_bytes"), Some(20.87));
    }

    /// A crash report is the host's memory running out only where the RAM was all but used
    /// up and the GPU's memory was not the scarcer.
    #[test]
    fn a_crash_report_with_the_ram_used_up() {
        let report = |ram_unused: &str, vram_unused: &str| {
            format!(
                "[ERROR][LM STUDIO SERVER] Error: Model error: (Exit code: 0). Some model operation failed.\n{{\n  \"cause\": \"(Exit code: 0). Some model operation failed. Try a different model and/or config.\",\n  \"data\": {{\n    \"memory\": {{\n      \"ram_capacity\": \"7.88 GB\",\n      \"ram_unused\": \"{ram_unused}\"\n    }},\n    \"gpu\": {{\n      \"type\": \"NvidiaCuda\",\n      \"vram_recommended_capacity\": \"11.93 GB\",\n      \"vram_unused\": \"{vram_unused}\"\n    }}\n  }},\n  \"title\": \"Model error\"\n}}\n"
            )
        };
        let input: InputName = Arc::from("t.log");
        let ev = analyze_log(&mut report("832.32 MB", "6.02 GB").as_bytes(), &input)
            .unwrap()
            .0;
        assert_eq!(ev.incidents.len(), 1);
        let f = &ev.incidents[0].facts;
        assert_eq!(f.str("failure.kind"), Some("host-oom"));
        assert_eq!(
            f.num("lmstudio.ram_free_bytes"),
            Some((832.32f64 * 1048576.0).floor())
        );
        assert_eq!(
            f.num("lmstudio.vram_total_bytes")
                .map(|b| (b / 1073741824.0 * 100.0).round()),
            Some(1193.0)
        );
        // RAM to spare, or the GPU even fuller: not the host's memory.
        for (ram, vram) in [("3.20 GB", "6.02 GB"), ("832.32 MB", "310.00 MB")] {
            let ev = analyze_log(&mut report(ram, vram).as_bytes(), &input)
                .unwrap()
                .0;
            assert!(ev.incidents.is_empty(), "{ram} {vram}");
        }
    }
}
