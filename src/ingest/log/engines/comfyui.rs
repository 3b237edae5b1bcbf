//! ComfyUI: the node-graph diffusion front-end, and its model manager's accounting.
//!
//! ComfyUI runs PyTorch, so the OOM itself is PyTorch's (usually the bare
//! `torch.OutOfMemoryError: Allocation on device` of `cudaMallocAsync`, which carries no
//! numbers). What makes the diagnosis possible is ComfyUI's own accounting around it:
//!
//! - start-up: `Total VRAM 8188 MB, total RAM 32607 MB`, `Set vram state to: NORMAL_VRAM`,
//!   `Device: cuda:0 NVIDIA GeForce RTX 3060 : cudaMallocAsync`;
//! - the model manager, before each sampler run: `Requested to load Flux`, then
//!   `loaded completely; 20683.88 MB usable, 19483.95 MB loaded, full load: True` or
//!   `loaded partially; 5167.08 MB usable, 5100.00 MB loaded, 3200.00 MB offloaded, ...`
//!   (before late 2024 without labels: `loaded partially 3753.14 3753.14 0`,
//!   `loaded completely 0.0 4777.53 True`, and `loading in lowvram mode 9771.07`);
//! - the error report users paste (`# ComfyUI Error Report`, `- **Node Type:** KSampler`,
//!   `- **Arguments:** main.py --lowvram`, `- **VRAM Total:** 8589410304`) and the console's
//!   `!!! Exception during processing !!!` and `Got an OOM, unloading all loaded models.`;
//! - `Warning: Ran out of memory when regular VAE decoding, retrying with tiled VAE decoding.`
//!
//! A partial load means the weights did not fit next to the working memory ComfyUI
//! estimated: the model is too large for the card. A complete load followed by an OOM
//! means the sampler's or the VAE's working memory (resolution x batch x frames) was.

use std::sync::LazyLock;

use regex::Regex;

use super::local::{span, walk_back};
use super::{Domain, Emit, Failure, Line, Recognizer, id};
use crate::facts::units::{mib_to_bytes, parse_number};
use crate::ingest::log::pattern::static_regex;

static TOTAL_VRAM: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"Total VRAM (?P<v>\d+(?:\.\d+)?) MB, total RAM (?P<r>\d+(?:\.\d+)?) MB")
});
static REPORT_VRAM: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"^[-*\s]*(?:\*\*)?VRAM Total:(?:\*\*)?\s*(?P<v>\d+)\s*$"));
static VRAM_STATE: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"Set vram state to: (?P<s>[A-Z_]+)"));
static DEVICE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"^Device: (?:cuda|xpu|mps|npu):?\d*\s+(?P<name>.+?)\s*:\s*(?P<alloc>cudaMallocAsync|native)\s*$",
    )
});
static REQUESTED: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"(?:^|\s)Requested to load (?P<m>\S+)"));
/// How far above the batch file's `pause` the end of ComfyUI's own output is looked for.
const EXIT_LOOKBACK: usize = 40;

/// What ComfyUI was doing when its process ended without a word, when the portable build's
/// batch file reached `pause` (`Press any key to continue . . .`) right after model loading
/// or sampling output: `"loading"` or `"sampling"`. A server only stops by itself on an
/// error, and every error it can report (a traceback, `Exception during processing`, Ctrl-C)
/// prints something; a process that vanishes mid-load was ended from outside, on Windows
/// most often for running out of RAM and page file while the checkpoint is read.
fn vanished_while(line: &Line<'_>) -> Option<&'static str> {
    let above = line.preceding(EXIT_LOOKBACK);
    let mut own = above
        .iter()
        .map(|l| l.text.trim())
        .filter(|t| !(t.is_empty() || t.ends_with(">pause") || t.ends_with("> pause")));
    let last = own.next()?;
    let stage = if [
        "model_type",
        "model weight dtype",
        "Requested to load",
        "loaded completely",
        "loaded partially",
        "lowvram mode",
        "got prompt",
        "clip missing",
        "Using pytorch attention",
    ]
    .iter()
    .any(|m| last.contains(m))
    {
        "loading"
    } else if last.contains("it/s") || last.contains("s/it") {
        "sampling"
    } else {
        return None;
    };
    let said_why = above.iter().any(|l| {
        let t = l.text.as_str();
        t.contains("Traceback")
            || t.contains("Error")
            || t.contains("Exception")
            || t.contains("KeyboardInterrupt")
            || t.contains("Terminate batch job")
            || t.contains("Prompt executed")
            || t.contains("Killed")
    });
    let comfy = above
        .iter()
        .any(|l| l.text.contains("ComfyUI") || l.text.contains("Total VRAM"));
    (comfy && !said_why).then_some(stage)
}

/// Since late 2024: `loaded partially; 5167.08 MB usable, 5100.00 MB loaded, 3200.00 MB
/// offloaded, ...` and `loaded completely; 9597.40 MB usable, 4897.00 MB loaded, full load: True`.
static LOADED_LABELLED: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"^loaded (?P<how>partially|completely);\s*(?P<usable>\d+(?:\.\d+)?) MB usable,\s*(?P<loaded>\d+(?:\.\d+)?) MB loaded(?:,\s*(?P<off>\d+(?:\.\d+)?) MB offloaded)?",
    )
});
/// Before: `loaded partially <usable MB> <loaded MB> <patches>`, `loaded completely <usable
/// MB> <model MB> <full load>`. With memory shared with the host (Apple silicon's `SHARED`
/// state) nothing limits the load, and "usable" is printed as a huge float
/// (`loaded completely 9.5367431640625e+25 15366.67 True`).
static LOADED_BARE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"^loaded (?P<how>partially|completely) (?P<usable>\d+(?:\.\d+)?(?:e\+?\d+)?) (?P<loaded>\d+(?:\.\d+)?)(?:\s|$)",
    )
});
/// A "usable" figure above this many MB (a petabyte) is ComfyUI's "no limit", not memory.
const NO_LIMIT_MB: f64 = 1e9;
static LOWVRAM_LOAD: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"^loading in lowvram mode (?P<usable>\d+(?:\.\d+)?)"));
static NODE_TYPE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"^[-*\s]*(?:\*\*)?Node Type:(?:\*\*)?\s*(?P<n>\S+)\s*$|^Error occurred when executing (?P<n2>[^:\s]+):",
    )
});
static ARGS: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"^[-*\s]*(?:\*\*)?Arguments:(?:\*\*)?\s*(?P<a>.*\S)|(?P<cmd>\S*main\.py(?:\s.*)?)$",
    )
});
static RESERVE_VRAM: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"--reserve-vram[=\s]+(?P<g>\d+(?:\.\d+)?)"));
static TILED_RETRY: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"Ran out of memory when regular VAE (?:decoding|encoding), retrying with tiled VAE",
    )
});
static WEIGHT_DTYPE: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"^model weight dtype (?:torch\.)?(?P<d>\w+), manual cast"));

/// The ComfyUI recogniser.
pub struct ComfyUi;

impl Recognizer for ComfyUi {
    fn engine(&self) -> &'static str {
        id::COMFYUI
    }

    fn anchors(&self) -> &'static [&'static str] {
        &[
            "Total VRAM",
            "VRAM Total",
            "Set vram state",
            "cudaMallocAsync",
            "Requested to load",
            "loaded partially",
            "loaded completely",
            "lowvram mode",
            "Node Type",
            "Error occurred when executing",
            "Arguments:",
            "main.py",
            "retrying with tiled VAE",
            "model weight dtype",
            "Exception during processing",
            "ComfyUI Error Report",
            "unloading all loaded models",
            // The Windows portable build's `run_nvidia_gpu.bat` ends in `pause`.
            "Press any key to continue",
        ]
    }

    fn recognize(&self, line: &Line<'_>, out: &mut Emit) {
        let text = line.text.trim_end();
        if text.contains("Press any key to continue") {
            if let Some(last) = vanished_while(line) {
                out.engine(id::COMFYUI);
                let mut f = Failure::new("host-oom", id::COMFYUI, Domain::Host);
                f.fact("host.killer", "unknown", None)
                    .fact("host.victim_name", "ComfyUI", None)
                    .fact("comfyui.exited_silently", last, None);
                out.failure(f);
            }
            return;
        }
        if text.contains("Exception during processing")
            || text.contains("ComfyUI Error Report")
            || text.contains("Got an OOM, unloading all loaded models")
        {
            out.engine(id::COMFYUI);
            return;
        }
        if let Some(c) = TOTAL_VRAM.captures(text) {
            out.engine(id::COMFYUI);
            mib_fact(out, &c, "v", "comfyui.vram_total_bytes");
            mib_fact(out, &c, "r", "comfyui.ram_total_bytes");
            return;
        }
        if let Some(c) = REPORT_VRAM.captures(text) {
            if let Some(m) = c.name("v") {
                if let Ok(v) = m.as_str().parse::<u64>() {
                    out.fact("comfyui.vram_total_bytes", v, span(&m));
                }
            }
            return;
        }
        if let Some(c) = VRAM_STATE.captures(text) {
            out.engine(id::COMFYUI);
            let m = c.name("s").expect("group s");
            out.fact("comfyui.vram_state", m.as_str(), span(&m));
            if matches!(m.as_str(), "LOW_VRAM" | "NO_VRAM") {
                out.fact("comfyui.lowvram", true, span(&m));
            }
            return;
        }
        if let Some(c) = DEVICE.captures(text) {
            let a = c.name("alloc").expect("group alloc");
            out.fact(
                "torch.async_allocator",
                a.as_str() == "cudaMallocAsync",
                span(&a),
            );
            return;
        }
        if let Some(c) = REQUESTED.captures(text) {
            out.engine(id::COMFYUI);
            let m = c.name("m").expect("group m");
            out.fact("comfyui.requested_model", m.as_str(), span(&m));
            return;
        }
        if let Some(c) = LOADED_LABELLED
            .captures(text)
            .or_else(|| LOADED_BARE.captures(text))
        {
            out.engine(id::COMFYUI);
            let how = c.name("how").expect("group how");
            let partial = how.as_str() == "partially";
            out.fact(
                "comfyui.load",
                if partial { "partial" } else { "complete" },
                span(&how),
            );
            if c.name("usable")
                .and_then(|m| m.as_str().parse::<f64>().ok())
                .is_some_and(|mb| mb < NO_LIMIT_MB)
            {
                mib_fact(out, &c, "usable", "comfyui.load_usable_bytes");
            }
            mib_fact(out, &c, "loaded", "comfyui.load_loaded_bytes");
            if c.name("off").is_some() {
                mib_fact(out, &c, "off", "comfyui.load_offloaded_bytes");
            }
            load_model(line, out);
            return;
        }
        if let Some(c) = LOWVRAM_LOAD.captures(text) {
            out.engine(id::COMFYUI);
            out.fact("comfyui.load", "lowvram", None);
            mib_fact(out, &c, "usable", "comfyui.load_usable_bytes");
            load_model(line, out);
            return;
        }
        if let Some(c) = NODE_TYPE.captures(text) {
            if let Some(m) = c.name("n").or(c.name("n2")) {
                out.fact("comfyui.node_type", m.as_str(), span(&m));
            }
            return;
        }
        if TILED_RETRY.is_match(text) {
            out.engine(id::COMFYUI);
            out.fact("comfyui.vae_tiled_retry", true, None);
            return;
        }
        if let Some(c) = WEIGHT_DTYPE.captures(text) {
            let m = c.name("d").expect("group d");
            let d = m.as_str();
            let dtype = if d.starts_with("float8") { "fp8" } else { d };
            out.fact("model.dtype", dtype, span(&m));
            return;
        }
        if let Some(c) = ARGS.captures(text) {
            let Some(a) = c.name("a").or(c.name("cmd")) else {
                return;
            };
            let args = a.as_str();
            // `main.py` alone names many programs; ComfyUI's flags name ComfyUI.
            let comfy_flags = [
                "--lowvram",
                "--novram",
                "--highvram",
                "--gpu-only",
                "--reserve-vram",
                "--disable-smart-memory",
                "--windows-standalone-build",
                "--use-sage-attention",
                "--listen",
            ];
            // The error report's `- **Arguments:** main.py ...`; AUTOMATIC1111 prints
            // `*** Arguments: ('task(...)', ...)` under its errors, which is not ComfyUI.
            let is_report =
                c.name("a").is_some() && (args.contains("main.py") || args.starts_with('-'));
            if !is_report && !comfy_flags.iter().any(|f| args.contains(f)) {
                return;
            }
            out.engine(id::COMFYUI);
            out.fact("comfyui.args", args, span(&a));
            if args.contains("--lowvram") || args.contains("--novram") {
                out.fact("comfyui.lowvram", true, span(&a));
            }
            if let Some(g) = RESERVE_VRAM.captures(args).and_then(|r| r.name("g")) {
                if let Some(v) = parse_number(g.as_str()) {
                    out.fact(
                        "comfyui.reserve_vram_bytes",
                        (v * 1073741824.0).round(),
                        Some((a.start() + g.start(), a.start() + g.end())),
                    );
                }
            }
        }
    }
}

fn mib_fact(out: &mut Emit, c: &regex::Captures<'_>, group: &str, name: &'static str) {
    if let Some(m) = c.name(group) {
        if let Some(b) = parse_number(m.as_str()).and_then(mib_to_bytes) {
            out.fact(name, b, span(&m));
        }
    }
}

/// The model a `loaded ...` line belongs to. ComfyUI prints the requests of one load
/// together (`Requested to load A`, `Requested to load B`, `Loading 2 new models`) and then
/// one `loaded ...` line per model in the same order: the k-th load line after the requests
/// belongs to the k-th request.
fn load_model(line: &Line<'_>, out: &mut Emit) {
    let mut loads_above = 0usize;
    let mut requests: Vec<String> = Vec::new();
    walk_back(line, 24, |raw| {
        if let Some(c) = REQUESTED.captures(raw) {
            if let Some(m) = c.name("m") {
                requests.push(m.as_str().to_string());
            }
            return true;
        }
        if !requests.is_empty() {
            // The block of requests has ended.
            return false;
        }
        if raw.contains("loaded partially")
            || raw.contains("loaded completely")
            || raw.contains("lowvram mode")
        {
            loads_above += 1;
        }
        true
    });
    requests.reverse();
    if let Some(m) = requests.into_iter().nth(loads_above) {
        out.fact("comfyui.load_model", m, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::evidence::{InputName, Value};
    use crate::ingest::log::clean::clean_line;
    use std::sync::Arc;

    /// Facts from the last line of `text`, with the lines before it as context.
    fn facts(text: &str) -> Vec<(&'static str, Value)> {
        let input: InputName = Arc::from("t.log");
        let (before, last) = text.rsplit_once('\n').unwrap_or(("", text));
        let cleaned = clean_line(last.as_bytes());
        let line = Line {
            input: &input,
            no: 1,
            text: &cleaned.text,
            meta: &cleaned.meta,
            siblings_before: &[],
            siblings_after: &[],
            before: before.as_bytes(),
            after: &[],
        };
        let mut out = Emit::default();
        out.begin_line(&line);
        ComfyUi.recognize(&line, &mut out);
        crate::ingest::log::engines::fact_records(out)
    }

    fn num(f: &[(&'static str, Value)], name: &str) -> Option<f64> {
        f.iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| v.as_f64())
    }

    fn text<'a>(f: &'a [(&'static str, Value)], name: &str) -> Option<&'a str> {
        f.iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| v.as_str())
    }

    const MIB: f64 = 1048576.0;

    #[test]
    fn start_up_lines() {
        let f = facts("Total VRAM 8188 MB, total RAM 32607 MB");
        assert_eq!(num(&f, "comfyui.vram_total_bytes"), Some(8188.0 * MIB));
        assert_eq!(num(&f, "comfyui.ram_total_bytes"), Some(32607.0 * MIB));
        let f = facts("2024-09-16 01:39:51,005 - root - INFO - Set vram state to: LOW_VRAM");
        assert_eq!(text(&f, "comfyui.vram_state"), Some("LOW_VRAM"));
        assert_eq!(
            f.iter()
                .find(|(n, _)| *n == "comfyui.lowvram")
                .map(|x| &x.1),
            Some(&Value::Bool(true))
        );
        let f = facts("Device: cuda:0 NVIDIA GeForce RTX 3060 : cudaMallocAsync");
        assert_eq!(
            f.iter()
                .find(|(n, _)| *n == "torch.async_allocator")
                .map(|x| &x.1),
            Some(&Value::Bool(true))
        );
        let f = facts("  - **VRAM Total:** 4294639616");
        assert_eq!(num(&f, "comfyui.vram_total_bytes"), Some(4294639616.0));
    }

    #[test]
    fn both_generations_of_the_load_line() {
        let f = facts(
            "Requested to load WAN21\n0 models unloaded.\nloaded partially; 4691.20 MB usable, 4580.45 MB loaded, 4756.74 MB offloaded, 161.55 MB buffer reserved, lowvram patches: 0",
        );
        assert_eq!(text(&f, "comfyui.load"), Some("partial"));
        assert_eq!(
            num(&f, "comfyui.load_offloaded_bytes"),
            Some((4756.74 * MIB).round())
        );
        assert_eq!(text(&f, "comfyui.load_model"), Some("WAN21"));
        let f = facts(
            "2024-09-07 03:21:03,934 - root - INFO - loaded partially 3753.1486518859865 3753.1482009887695 0",
        );
        assert_eq!(text(&f, "comfyui.load"), Some("partial"));
        assert!(
            num(&f, "comfyui.load_loaded_bytes").is_some_and(|v| (v - 3753.148 * MIB).abs() < MIB)
        );
        let f = facts(
            "Requested to load FluxClipModel_\nLoading 1 new model\nloaded completely 0.0 4777.53759765625 True",
        );
        assert_eq!(text(&f, "comfyui.load"), Some("complete"));
        assert_eq!(text(&f, "comfyui.load_model"), Some("FluxClipModel_"));
        // Two requests, two loads: each load is its own model's.
        let two = "Requested to load BaseModel\nRequested to load AnimateDiffModel\nLoading 2 new models\nloaded completely 0.0 1639.40 True";
        assert_eq!(text(&facts(two), "comfyui.load_model"), Some("BaseModel"));
        let f = facts(&format!("{two}\nloaded completely 0.0 866.38 True"));
        assert_eq!(text(&f, "comfyui.load_model"), Some("AnimateDiffModel"));
        let f = facts("loaded completely; 20683.88 MB usable, 19483.95 MB loaded, full load: True");
        assert_eq!(
            num(&f, "comfyui.load_usable_bytes"),
            Some((20683.88 * MIB).round())
        );
        // Memory shared with the host: "usable" is ComfyUI's no-limit, the model's size stands.
        let f = facts("Requested to load SD3\nloaded completely 9.5367431640625e+25 15366.67 True");
        assert_eq!(text(&f, "comfyui.load"), Some("complete"));
        assert_eq!(num(&f, "comfyui.load_usable_bytes"), None);
        assert!(
            num(&f, "comfyui.load_loaded_bytes").is_some_and(|v| (v - 15366.67 * MIB).abs() < MIB)
        );
    }

    #[test]
    fn report_fields_and_arguments() {
        let f = facts("- **Node Type:** VAEDecode");
        assert_eq!(text(&f, "comfyui.node_type"), Some("VAEDecode"));
        let f = facts("Error occurred when executing KSamplerAdvanced:");
        assert_eq!(text(&f, "comfyui.node_type"), Some("KSamplerAdvanced"));
        let f = facts("- **Arguments:** main.py --lowvram --reserve-vram 1.5");
        assert_eq!(
            num(&f, "comfyui.reserve_vram_bytes"),
            Some(1.5 * 1073741824.0)
        );
        assert!(f.iter().any(|(n, _)| *n == "comfyui.lowvram"));
        // Someone else's main.py is not ComfyUI.
        assert!(facts("python main.py --epochs 10 --lr 0.1").is_empty());
        let f = facts("model weight dtype torch.float8_e4m3fn, manual cast: torch.bfloat16");
        assert_eq!(text(&f, "model.dtype"), Some("fp8"));
    }
}
