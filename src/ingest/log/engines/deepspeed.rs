//! DeepSpeed and HF Accelerate: ZeRO configuration, `see_memory_usage` checkpoints, the ZeRO
//! memory estimators, and Accelerate's batch-size search giving up.
//!
//! Sources: `ENGINE-MESSAGES.md` §9. The OOMs themselves are PyTorch's (read by
//! `pytorch.rs`); DeepSpeed's lines name the engine and say how the model states were
//! partitioned and offloaded, which decides whether to shard further or to shrink the step.
//! `see_memory_usage` prints its label on one line and `MA 10.5 GB  Max_MA 12.1 GB  CA 14.0
//! GB  Max_CA 15 GB` on the next (GB computed with 2**30), then the host's `CPU Virtual
//! Memory:  used = 120.5 GB, percent = 96.1%`.

use std::sync::LazyLock;

use regex::Regex;

use super::local::{size_bin, span};
use super::{Domain, Emit, Failure, Line, PhaseMark, Recognizer, id};
use crate::ingest::log::pattern::static_regex;

static MA_LINE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"\bMA (?P<ma>\d+(?:\.\d+)?) GB\s+Max_MA (?P<maxma>\d+(?:\.\d+)?) GB\s+CA (?P<ca>\d+(?:\.\d+)?) GB\s+Max_CA (?P<maxca>\d+(?:\.\d+)?) GB",
    )
});
static CPU_VM: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"CPU Virtual Memory:\s+used = (?P<used>\d+(?:\.\d+)?) GB, percent = (?P<pct>\d+(?:\.\d+)?)%",
    )
});
static EST_ROW: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"^\s*(?P<cpu>\d+(?:\.\d+)?)GB \|\s*(?P<gpu>\d+(?:\.\d+)?)GB \| (?:offload_param=(?P<p>\w+)\s*, )?offload_optimizer=(?P<o>\w+)\s*(?:, zero_init=(?P<z>\d))?",
    )
});
static EST_MODEL: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"SW: Model with (?P<m>\d+)M total params"));
/// `zero_optimization_stage ...... 3`, `"stage": 3`, `ZeRO Stage 3`, `zero_stage=3`, and the
/// engine's `Creating torch.float16 ZeRO stage 1 optimizer`.
static STAGE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r#"(?:zero_optimization_stage\s*\.*\s*|"stage":\s*|ZeRO[- ]?[Ss]tage |zero_stage[=:\s]+)(?P<s>[0-3])\b"#,
    )
});
static OFFLOAD: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r#"["']?offload_(?P<what>optimizer|param)["']?\s*[:=]\s*\{\s*["']?device["']?\s*[:=]\s*["']?(?P<dev>cpu|nvme|none)"#,
    )
});
static OFFLOAD_FLAT: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"offload_(?P<what>optimizer|param)(?:_device\s*[:=]?\s*\.*\s*|=DeepSpeedZeroOffload\w*Config\(device='?)(?P<dev>cpu|nvme|none)",
    )
});
static MICRO_BATCH: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"train_micro_batch_size_per_gpu\s*\.*\s*[:=]?\s*(?P<n>\d+)"));
static ACCUM: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"^gradient_accumulation_steps\s*\.{2,}\s*(?P<n>\d+)"));

/// The DeepSpeed / Accelerate recogniser.
pub struct DeepSpeed;

impl Recognizer for DeepSpeed {
    fn engine(&self) -> &'static str {
        id::DEEPSPEED
    }

    fn anchors(&self) -> &'static [&'static str] {
        &[
            "Max_MA",
            "CPU Virtual Memory",
            "offload_param=",
            "offload_optimizer=",
            "total params",
            "zero_optimization",
            "ZeRO Stage",
            "ZeRO-",
            "zero_stage",
            "offload_optimizer",
            "offload_param",
            "train_micro_batch_size_per_gpu",
            "gradient_accumulation_steps",
            "DeepSpeed info",
            "deepspeed/runtime/",
            "deepspeed/pt/",
            "No executable batch size found",
            "cpu_adam",
            "arithmetic capability",
        ]
    }

    fn recognize(&self, line: &Line<'_>, out: &mut Emit) {
        let text = line.text;
        if text.contains("No executable batch size found") {
            let mut f = Failure::new("device-oom", id::PYTORCH, Domain::Device);
            f.fact("deepspeed.batch_search_exhausted", true, None).fact(
                "oom.wording",
                "accelerate-batch-search",
                None,
            );
            out.failure(f);
            return;
        }
        if let Some(c) = MA_LINE.captures(text) {
            out.engine(id::DEEPSPEED);
            for (g, n) in [
                ("ma", "deepspeed.ma_bytes"),
                ("maxma", "deepspeed.max_ma_bytes"),
                ("ca", "deepspeed.ca_bytes"),
            ] {
                if let Some(m) = c.name(g) {
                    if let Some(b) = size_bin(m.as_str(), "GiB") {
                        out.fact(n, b, span(&m));
                    }
                }
            }
            // The label is the line before.
            if let Some(prev) = line.preceding(1).into_iter().next() {
                let label = prev.text.trim();
                if !label.is_empty() && label.len() < 200 && !MA_LINE.is_match(label) {
                    out.fact("deepspeed.checkpoint", label.to_string(), None);
                }
            }
            return;
        }
        if let Some(c) = CPU_VM.captures(text) {
            let (u, p) = (c.name("used").expect("u"), c.name("pct").expect("p"));
            if let Some(b) = size_bin(u.as_str(), "GiB") {
                out.fact("deepspeed.cpu_used_bytes", b, span(&u));
            }
            if let Ok(v) = p.as_str().parse::<f64>() {
                out.fact("deepspeed.cpu_percent", v / 100.0, span(&p));
            }
            return;
        }
        if let Some(c) = EST_ROW.captures(text) {
            let cpu = c.name("cpu").and_then(|m| size_bin(m.as_str(), "GiB"));
            let gpu_m = c.name("gpu").expect("gpu");
            let gpu = size_bin(gpu_m.as_str(), "GiB");
            let p = c.name("p").map(|m| m.as_str()).unwrap_or("none");
            let o = c.name("o").map(|m| m.as_str()).unwrap_or("none");
            // Of the zero_init 0/1 pairs, keep zero_init=1 (the usual way to load).
            if c.name("z").is_some_and(|z| z.as_str() == "0") {
                return;
            }
            let (g, h) = match (p, o) {
                ("none", "none") => ("deepspeed.est_gpu_bytes", None),
                ("none", _) => (
                    "deepspeed.est_gpu_offload_optimizer_bytes",
                    Some("deepspeed.est_cpu_offload_optimizer_bytes"),
                ),
                _ => (
                    "deepspeed.est_gpu_offload_all_bytes",
                    Some("deepspeed.est_cpu_offload_all_bytes"),
                ),
            };
            if let Some(b) = gpu {
                out.fact(g, b, span(&gpu_m));
            }
            if let (Some(h), Some(b)) = (h, cpu) {
                out.fact(h, b, c.name("cpu").as_ref().and_then(span));
            }
            return;
        }
        if let Some(c) = EST_MODEL.captures(text) {
            let m = c.name("m").expect("group m");
            if let Ok(v) = m.as_str().parse::<f64>() {
                out.fact("model.params", v * 1e6, span(&m));
            }
            return;
        }
        // DeepSpeedCPUAdam is what ZeRO-Offload steps with: building its op (`Loading
        // extension module cpu_adam...`) or creating it (`Adam Optimizer #0 is created with
        // AVX512 arithmetic capability.`) says the optimizer states are in host RAM even when
        // the log has no config dump.
        if text.contains("extension module cpu_adam")
            || (text.contains("Adam Optimizer #") && text.contains("arithmetic capability"))
        {
            out.engine(id::DEEPSPEED);
            out.fact("deepspeed.cpu_optimizer", true, None);
            return;
        }
        if text.contains("DeepSpeed info") {
            out.engine(id::DEEPSPEED);
            out.phase(PhaseMark::ModelLoad);
        }
        // A traceback through DeepSpeed's engine names it even when its banner is not in
        // the pasted log (`deepspeed/pt/`: its layout before 0.3, `deepspeed_light.py`).
        if text.contains("deepspeed/runtime/") || text.contains("deepspeed/pt/") {
            out.engine(id::DEEPSPEED);
            return;
        }
        let zero_line = text.contains("zero")
            || text.contains("ZeRO")
            || text.contains("offload")
            || text.contains("micro_batch")
            || text.contains("gradient_accumulation");
        if !zero_line {
            return;
        }
        if let Some(c) = STAGE.captures(text) {
            let m = c.name("s").expect("group s");
            if let Ok(s) = m.as_str().parse::<u32>() {
                out.engine(id::DEEPSPEED);
                out.fact("train.zero_stage", s, span(&m));
            }
        }
        for c in OFFLOAD
            .captures_iter(text)
            .chain(OFFLOAD_FLAT.captures_iter(text))
        {
            let d = c.name("dev").expect("group dev");
            let name = if &c["what"] == "optimizer" {
                "deepspeed.offload_optimizer"
            } else {
                "deepspeed.offload_param"
            };
            out.fact(name, d.as_str().to_string(), span(&d));
        }
        if let Some(c) = MICRO_BATCH.captures(text) {
            let m = c.name("n").expect("group n");
            if let Ok(n) = m.as_str().parse::<u32>() {
                out.fact("train.batch_size", n, span(&m));
                out.fact(
                    "train.batch_flag",
                    "train_micro_batch_size_per_gpu",
                    span(&m),
                );
            }
        }
        if let Some(c) = ACCUM.captures(text.trim()) {
            let m = c.name("n").expect("group n");
            if let Ok(n) = m.as_str().parse::<u32>() {
                out.fact("train.gradient_accumulation_steps", n, span(&m));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::evidence::Value;
    use crate::ingest::log::engines::Observation;

    const GIB: f64 = 1073741824.0;

    fn run(raw: &str) -> Emit {
        crate::ingest::log::engines::run_line(&DeepSpeed, raw)
    }

    fn fact(raw: &str, name: &str) -> Option<Value> {
        run(raw).records.into_iter().find_map(|r| match r.obs {
            Observation::Fact { name: n, value } if n == name => Some(value),
            _ => None,
        })
    }

    #[test]
    fn a_traceback_through_deepspeed_names_it_in_either_layout() {
        for frame in [
            r#"  File "/opt/venv/lib/python3.10/site-packages/deepspeed/runtime/zero/stage_1_and_2.py", line 654, in initialize_optimizer_states"#,
            r#"  File "/opt/conda/lib/python3.6/site-packages/deepspeed/pt/deepspeed_zero_optimizer.py", line 357, in initialize_optimizer_states"#,
        ] {
            let named = run(frame)
                .records
                .into_iter()
                .any(|r| matches!(r.obs, Observation::Engine(e) if e == id::DEEPSPEED));
            assert!(named, "{frame}");
        }
    }

    #[test]
    fn every_deepspeed_format() {
        let ma = "[2024-05-01 10:00:00,123] [INFO] [utils.py:791:see_memory_usage] MA 14.52 GB         Max_MA 15.9 GB         CA 15.98 GB         Max_CA 16 GB ";
        assert_eq!(
            fact(ma, "deepspeed.max_ma_bytes"),
            Some(Value::Num((15.9 * GIB).round()))
        );
        assert_eq!(
            fact(
                "[2024-05-01 10:00:00,124] [INFO] [utils.py:798:see_memory_usage] CPU Virtual Memory:  used = 120.45 GB, percent = 95.6%",
                "deepspeed.cpu_percent"
            ),
            Some(Value::Num(0.956))
        );
        assert_eq!(
            fact(
                "  76.55GB |   2.77GB | offload_param=cpu , offload_optimizer=cpu , zero_init=1",
                "deepspeed.est_gpu_offload_all_bytes"
            ),
            Some(Value::Num((2.77 * GIB).round()))
        );
        assert_eq!(
            fact(
                "  76.55GB |   2.77GB | offload_param=cpu , offload_optimizer=cpu , zero_init=0",
                "deepspeed.est_gpu_offload_all_bytes"
            ),
            None
        );
        assert_eq!(
            fact(
                "   0.59GB |  14.88GB | offload_param=none, offload_optimizer=none, zero_init=1",
                "deepspeed.est_gpu_bytes"
            ),
            Some(Value::Num((14.88 * GIB).round()))
        );
        assert_eq!(
            fact(
                "  19.03GB |  19.80GB | offload_optimizer=cpu ",
                "deepspeed.est_gpu_offload_optimizer_bytes"
            ),
            Some(Value::Num((19.8 * GIB).round()))
        );
        assert_eq!(
            fact(
                "SW: Model with 6738M total params, 131M largest layer params.",
                "model.params"
            ),
            Some(Value::Num(6738e6))
        );
        assert_eq!(
            fact(
                "[INFO] [config.py:1000:print]   zero_optimization_stage ...... 3",
                "train.zero_stage"
            ),
            Some(Value::Num(3.0))
        );
        assert_eq!(
            fact(
                "[2024-03-11 09:14:04,118] [INFO] [logging.py:96:log_dist] [Rank 0] Creating torch.float16 ZeRO stage 1 optimizer",
                "train.zero_stage"
            ),
            Some(Value::Num(1.0))
        );
        assert_eq!(
            fact(
                r#"  "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": true}},"#,
                "deepspeed.offload_optimizer"
            ),
            Some(Value::str("cpu"))
        );
        assert_eq!(
            fact(
                r#"  "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": true}},"#,
                "train.zero_stage"
            ),
            Some(Value::Num(2.0))
        );
        assert_eq!(
            fact(
                "[INFO] [config.py:997:print]   zero_config .................. stage=3 offload_param=DeepSpeedZeroOffloadParamConfig(device='cpu', nvme_path=None) offload_optimizer=DeepSpeedZeroOffloadOptimizerConfig(device='none', nvme_path=None)",
                "deepspeed.offload_param"
            ),
            Some(Value::str("cpu"))
        );
        assert_eq!(
            fact(
                "[INFO] [config.py:1000:print]   train_micro_batch_size_per_gpu  8",
                "train.batch_size"
            ),
            Some(Value::Num(8.0))
        );
        let out = run("ValueError: No executable batch size found, reached zero.");
        assert!(
            out.records
                .iter()
                .any(|r| matches!(r.obs, Observation::Failure(_)))
        );
    }
}
