//! AUTOMATIC1111's stable-diffusion-webui and its forks (Forge, reForge, SD.Next's A1111
//! mode): the launch arguments and the memory figures the web UI prints.
//!
//! Shapes users paste: `Launching Web UI with arguments: --xformers --medvram`,
//! `set COMMANDLINE_ARGS=--lowvram --xformers` from `webui-user.bat`, the status line under
//! a failed generation (`Torch active/reserved: 3457/3576 MiB, Sys VRAM: 4096/4096 MiB
//! (100.0%)`, newer `A: 2.82 GB, R: 2.90 GB, Sys: 3.8/3.8125 GB (99.7%)`), `Loading weights
//! [e1441589a6] from ...`, `Stable diffusion model failed to load`, and Forge's model manager
//! (`[Memory Management] Target: KModel, Free GPU: 3231.00 MB, Model Require: 5154.62 MB,
//! ..., Remaining: -2947.62 MB, CPU Swap Loaded (blocked method): 3192.00 MB, GPU Loaded: ...`).
//! The OOM itself is PyTorch's.

use std::sync::LazyLock;

use regex::Regex;

use super::local::span;
use super::{Emit, Line, PhaseMark, Recognizer, id};
use crate::facts::units::{mib_to_bytes, parse_number};
use crate::ingest::log::pattern::static_regex;

static LAUNCH_ARGS: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"Launching Web UI with arguments:\s*(?P<a>.*?)\s*$|(?:^|\s)(?:set |export )?COMMANDLINE_ARGS\s*=\s*['\x22]?(?P<b>[^'\x22]*)",
    )
});
static STATUS_OLD: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"Torch active/reserved: \d+/\d+ MiB, Sys VRAM: (?P<used>\d+)/(?P<total>\d+) MiB")
});
static STATUS_NEW: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"\bA: \d+(?:\.\d+)? GB, R: \d+(?:\.\d+)? GB, Sys: (?P<used>\d+(?:\.\d+)?)/(?P<total>\d+(?:\.\d+)?) GB",
    )
});
static FORGE_MM: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"\[Memory Management\] Target: \S+?, Free GPU: (?P<free>-?\d+(?:\.\d+)?) MB, Model Require: (?P<req>\d+(?:\.\d+)?) MB",
    )
});
/// A memory-efficient attention the UI set up at start: AUTOMATIC1111's `Applying attention
/// optimization: sub-quadratic... done.` (xformers, sdp, sub-quadratic; not Doggettx's split
/// attention, its default without them, which still holds large chunks of the map), Forge's
/// and ComfyUI's `Using sub quadratic optimization for cross attention`, `Using pytorch cross
/// attention`, `Using xformers cross attention`.
static ATTENTION_SET_UP: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"Applying attention optimization: (?:xformers|sdp|sub-quadratic)\.\.\.|^Using (?:sub quadratic optimization for (?:cross )?attention|pytorch cross attention|xformers cross attention)",
    )
});
static FORGE_SWAP: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"CPU Swap Loaded \([^)]*\): (?P<swap>\d+(?:\.\d+)?) MB"));

/// The AUTOMATIC1111 / Forge recogniser.
pub struct WebUi;

impl Recognizer for WebUi {
    fn engine(&self) -> &'static str {
        id::WEBUI
    }

    fn anchors(&self) -> &'static [&'static str] {
        &[
            "Launching Web UI",
            "COMMANDLINE_ARGS",
            "Torch active/reserved",
            "Sys VRAM",
            ", Sys: ",
            "Stable diffusion model failed to load",
            "Loading weights [",
            "[Memory Management]",
            "Applying attention optimization",
            "quadratic optimization for",
            "pytorch cross attention",
            "xformers cross attention",
            "split attention for",
        ]
    }

    fn recognize(&self, line: &Line<'_>, out: &mut Emit) {
        let text = line.text;
        if let Some(c) = LAUNCH_ARGS.captures(text) {
            let Some(a) = c.name("a").or(c.name("b")) else {
                return;
            };
            out.engine(id::WEBUI);
            let args = a.as_str();
            out.fact("webui.args", args, span(&a));
            if args.contains("--medvram") {
                out.fact("webui.medvram", true, span(&a));
            }
            if args.contains("--lowvram") {
                out.fact("webui.lowvram", true, span(&a));
            }
            if [
                "--xformers",
                "--opt-sdp-attention",
                "--opt-sdp-no-mem-attention",
                "--opt-split-attention",
                "--opt-sub-quad-attention",
                "--force-enable-xformers",
            ]
            .iter()
            .any(|f| args.contains(f))
            {
                out.fact("webui.attention_opt", true, span(&a));
            }
            return;
        }
        if let Some(m) = ATTENTION_SET_UP.find(text) {
            out.fact("webui.attention_opt", true, span(&m));
            return;
        }
        if let Some(c) = STATUS_OLD.captures(text) {
            out.engine(id::WEBUI);
            if let Some(m) = c.name("total") {
                if let Some(b) = parse_number(m.as_str()).and_then(mib_to_bytes) {
                    out.fact("webui.vram_total_bytes", b, span(&m));
                }
            }
            return;
        }
        if let Some(c) = STATUS_NEW.captures(text) {
            out.engine(id::WEBUI);
            if let Some(m) = c.name("total") {
                // The web UI divides by 1024**3 and labels it GB.
                if let Some(v) = parse_number(m.as_str()) {
                    out.fact(
                        "webui.vram_total_bytes",
                        (v * 1073741824.0).round(),
                        span(&m),
                    );
                }
            }
            return;
        }
        if text.contains("Stable diffusion model failed to load")
            || text.starts_with("Loading weights [")
        {
            out.engine(id::WEBUI);
            out.phase(PhaseMark::ModelLoad);
            return;
        }
        if let Some(c) = FORGE_MM.captures(text) {
            out.engine(id::WEBUI);
            for (g, name) in [
                ("free", "webui.forge_free_gpu_bytes"),
                ("req", "webui.forge_model_require_bytes"),
            ] {
                if let Some(m) = c.name(g) {
                    if let Some(b) = parse_number(m.as_str()).and_then(mib_to_bytes) {
                        out.fact(name, b, span(&m));
                    }
                }
            }
            if let Some(m) = FORGE_SWAP.captures(text).and_then(|s| s.name("swap")) {
                if let Some(b) = parse_number(m.as_str()).and_then(mib_to_bytes) {
                    out.fact("webui.forge_swapped_bytes", b, span(&m));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::evidence::Value;

    fn facts(text: &str) -> Vec<(&'static str, Value)> {
        crate::ingest::log::engines::facts_of(&WebUi, text)
    }

    fn get<'a>(f: &'a [(&'static str, Value)], name: &str) -> Option<&'a Value> {
        f.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// A memory-efficient attention set up at start counts; Doggettx's split attention (the
    /// default without one) and the VAE's do not.
    #[test]
    fn attention_set_up_at_start() {
        for line in [
            "Applying attention optimization: sub-quadratic... done.",
            "Applying attention optimization: xformers... done.",
            "Using sub quadratic optimization for cross attention",
            "Using pytorch cross attention",
        ] {
            assert_eq!(
                get(&facts(line), "webui.attention_opt"),
                Some(&Value::Bool(true)),
                "{line}"
            );
        }
        for line in [
            "Applying attention optimization: None... done.",
            "Applying attention optimization: Doggettx... done.",
            "Using split attention for VAE",
            "Using split attention in VAE",
        ] {
            assert_eq!(get(&facts(line), "webui.attention_opt"), None, "{line}");
        }
    }

    #[test]
    fn arguments_and_status_lines() {
        let f = facts("Launching Web UI with arguments: --xformers --medvram --theme dark");
        assert_eq!(get(&f, "webui.medvram"), Some(&Value::Bool(true)));
        assert_eq!(get(&f, "webui.attention_opt"), Some(&Value::Bool(true)));
        assert_eq!(get(&f, "webui.lowvram"), None);
        let f = facts("set COMMANDLINE_ARGS=--lowvram --opt-split-attention");
        assert_eq!(get(&f, "webui.lowvram"), Some(&Value::Bool(true)));
        let f = facts(
            "Time taken: 2m 24.41sTorch active/reserved: 3457/3576 MiB, Sys VRAM: 4096/4096 MiB (100.0%)",
        );
        assert_eq!(
            get(&f, "webui.vram_total_bytes").and_then(Value::as_f64),
            Some(4096.0 * 1048576.0)
        );
        let f = facts("A: 2.82 GB, R: 2.90 GB, Sys: 3.8/3.8125 GB (99.7%)");
        assert_eq!(
            get(&f, "webui.vram_total_bytes").and_then(Value::as_f64),
            Some((3.8125f64 * 1073741824.0).round())
        );
        let f = facts(
            "[Memory Management] Target: KModel, Free GPU: 3231.00 MB, Model Require: 5154.62 MB, Previously Loaded: 0.00 MB, Inference Require: 1024.00 MB, Remaining: -2947.62 MB, CPU Swap Loaded (blocked method): 3192.00 MB, GPU Loaded: 1962.62 MB",
        );
        assert!(get(&f, "webui.forge_swapped_bytes").is_some());
        assert!(get(&f, "webui.forge_model_require_bytes").is_some());
    }
}
