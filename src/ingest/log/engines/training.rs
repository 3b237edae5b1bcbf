//! Training and inference loop context: batch sizes, step counters, epochs, model size.
//!
//! Frameworks (HF Trainer, Accelerate, Lightning, DeepSpeed, plain argparse scripts) print
//! their configuration and progress in many shapes; this module reads the common ones so the
//! diagnosis knows how far the run got and which batch size it ran with.

use std::sync::LazyLock;

use regex::Regex;

use super::{Emit, Line, PhaseMark, Recognizer, id};
use crate::facts::units::parse_number;
use crate::ingest::log::pattern::static_regex;

/// `key=value`, `key: value`, `--key value`, `"key": value` for the configuration keys that
/// matter for memory. Several may sit on one line (argparse `Namespace(...)`, HF
/// `TrainingArguments(...)` dumps, DeepSpeed JSON).
static CONFIG_KV: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r#"(?x)
        (?:^|[\s,({"'-])
        (?P<key>per_device_train_batch_size|train_micro_batch_size_per_gpu|micro_batch_size_per_gpu|micro_batch_size|train_batch_size|batch_size|gradient_accumulation_steps|max_seq_length|max_seq_len|seq_length|seq_len|block_size|max_length|cutoff_len|model_max_length|gradient_checkpointing|grad_ckpt|mixed_precision|model_name_or_path|world_size|num_processes|nproc_per_node|num_gpus|optim)
        ["']?\s*(?:=|:|\s)\s*["']?
        (?P<val>[\w./-]+)"#,
    )
});
static HF_BATCH: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"Instantaneous batch size per device = (?P<n>\d+)"));
static HF_TOTAL_BATCH: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"Total train batch size \(w\. parallel, distributed & accumulation\) = (?P<n>\d+)",
    )
});
static HF_ACCUM: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"Gradient Accumulation steps = (?P<n>\d+)"));
/// The weights' dtype as the user's pasted loading code sets it: Hugging Face's and
/// diffusers' `from_pretrained(..., torch_dtype=torch.bfloat16)` (newer: `dtype=` inside the
/// call), `load_in_4bit=True` / `load_in_8bit=True` (also inside `BitsAndBytesConfig`). A
/// fix that says "load in bfloat16" must not be offered to code that already does.
static LOAD_DTYPE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"\btorch_dtype\s*=\s*(?:torch\.)?(?P<d>bfloat16|float16|half|float32|float)\b|from_pretrained\(.*\bdtype\s*=\s*torch\.(?P<d2>bfloat16|float16|half|float32|float)\b|\bload_in_(?P<bits>4|8)bit\s*=\s*True\b",
    )
});
static PEFT_PARAMS: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"trainable params: (?P<t>[\d,]+) \|\| all params: (?P<a>[\d,]+)")
});
/// A model's size as scripts and summaries print it: `number of parameters: 123.69M`
/// (nanoGPT), `model parameters: 100.8M`, `Total params: 6,738,415,616` (torchinfo, Keras),
/// `num_params = 7241732096`.
static PARAM_COUNT_KEYED: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?i)(?P<pre>non-trainable[ _]|trainable[ _])?\b(?:total[ _]|all[ _]|number[ _]of[ _]|num[ _]|n[ _]|model[ _])?param(?:eter)?s?(?:[ _]count)?\s*[:=]\s*(?P<n>\d[\d,]*(?:\.\d+)?)\s*(?P<u>[KMBT]\b)?",
    )
});
/// The same with the number first: `Model has 7.24B parameters`, `124.4M params`, Lightning's
/// summary `6.7 B     Total params`, llama-recipes' `has 6738.415616 Million params`.
static PARAM_COUNT_SUFFIXED: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?i)\b(?P<n>\d+(?:\.\d+)?)\s*(?P<u>[KMBT]|thousand|million|billion|trillion)\s+(?P<pre>non-trainable |trainable )?(?:total )?param(?:eter)?s\b",
    )
});
static ACCELERATE_PROCS: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"Num processes: (?P<n>\d+)"));
/// Lightning's banner: `Using bfloat16 Automatic Mixed Precision (AMP)`, `Using 16bit
/// Automatic Mixed Precision (AMP)`.
static LIGHTNING_AMP: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"Using (?P<p>bfloat16|16bit|16-bit|float16) Automatic Mixed Precision")
});
/// Also Lightning's and LitGPT's precision (`--precision bf16-true`, `precision="16-mixed"`,
/// `'precision': 'bf16-mixed'`): half-precision weights or autocast either way.
static MIXED: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r#"(?:^|[\s,(])(?:(?P<k>bf16|fp16)\s*=\s*True|--(?P<f>bf16|fp16)(?:\s|$|\s+True))|\bprecision['"]?\s*[=:]?\s*['"]?(?:(?P<l>bf16)(?:-(?:true|mixed))?|(?P<l16>16)-(?:true|mixed))\b"#,
    )
});

/// A device-memory figure in a progress line: `mem 10.51 GiB`, `gpu_mem=12.3G`,
/// `memory_allocated: 10234 MB`, `max_memory_allocated=...`, and a callback's own print of
/// `torch.cuda.memory_allocated()` beside its batch (`train batch 10  allocated 102.7 MB`).
static MEMORY_FIGURE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?i)\b(?:(?:gpu[ _]?)?(?:max_)?mem(?:ory)?(?:[ _](?:allocated|alloc|used|reserved|usage))?|allocated)\s*[:=]?\s*(?P<n>\d+(?:\.\d+)?)\s*(?P<u>GiB|GB|MiB|MB|G|M)\b",
    )
});
/// What the allocator holds, logged beside the memory in use (`mem alloc 11.9G (peak 74.4G)
/// | reserved 78.6G`, `memory_reserved=31.2GB`, PyTorch before 1.4's name for it: `cached
/// 872.0 MB`): a figure of its own, not the first one.
static RESERVED_FIGURE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?i)(?:^|[^\w])(?:mem(?:ory)?[ _])?(?:reserved|cached)\s*[:=]?\s*(?P<n>\d+(?:\.\d+)?)\s*(?P<u>GiB|GB|MiB|MB|G|M)\b",
    )
});
/// Megatron's report's reserved figure, in the report's unit (`| reserved: 2158.0 |`).
static MEMORY_REPORT_RESERVED: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"\|\s*reserved:\s*(?P<n>\d+(?:\.\d+)?)"));
/// DeepSpeed's `see_memory_usage`: `MA 10.5 GB  Max_MA 12.1 GB  CA 14.0 GB  Max_CA 15 GB`.
static DEEPSPEED_MA: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"\bMA (?P<n>\d+(?:\.\d+)?) GB\s+Max_MA"));
/// Megatron-LM's `report_memory` (also NeMo, GPT-NeoX and scripts that copied it), a
/// per-iteration report with the unit up front: `memory (MB) | allocated: 1357.46 | max
/// allocated: 2036.19 | reserved: 2158.0 | max reserved: 2158.0`.
static MEMORY_REPORT: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"(?i)\bmemory \((?P<u>MB|MiB|GB|GiB)\)\s*\|\s*allocated:\s*(?P<n>\d+(?:\.\d+)?)")
});
/// Bytes per unit of a progress line's memory figure (`G`, `GB`, `GiB`: GiB; else MiB).
fn figure_unit(u: &str) -> f64 {
    match u.to_ascii_uppercase().as_str() {
        "G" | "GB" | "GIB" => 1073741824.0,
        _ => 1048576.0,
    }
}

/// A line a monitor prints between rounds (`[Memory monitoring] ... | GPU memory used
/// 4282 MB`, `gpu_mem_allocated: 3.2GB`): the GPU's memory named as a reading of use, so its
/// figure is a sample like a progress line's even where no step is printed beside it.
static GPU_READING: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"(?i)\bgpu[ _]?mem(?:ory)?[ _](?:allocated|alloc|used|usage)\s*[:=]?\s*\d")
});
/// A progress indicator, so a memory figure is a per-step sample and not an accounting line.
static PROGRESS: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?i)\b(?:step|iter(?:ation)?|it|epoch|batch)\b\s*[=:#\[]?\s*\d+|\|\s*\d+/\d+\s*\[|memory_allocated",
    )
});

/// A program saying a model's load failed: A1111's `Failed to load checkpoint, restoring
/// previous`, `Exception: Failed to load SDXL model`, `Could not load model ...`.
static LOAD_FAILED: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?i)\b(?:failed to load|could not load|unable to load|error loading)\s+(?:the\s+)?(?:[\w./-]+\s+){0,2}?(?:model|checkpoint|weights|pipeline)s?\b",
    )
});

/// Where Accelerate offloaded what did not fit on the GPUs: its warning (`Some parameters
/// are on the meta device [device] because they were offloaded to the cpu and disk.`), or a
/// printed `model.hf_device_map` that places some modules on a GPU (`'model.layers.0': 0`)
/// and others on `'cpu'` or `'disk'`.
fn offloaded_to(text: &str) -> Option<&'static str> {
    let (cpu, disk) = if let Some(at) = text.find("because they were offloaded to the") {
        let place = &text[at..];
        (place.contains("cpu"), place.contains("disk"))
    } else {
        let (cpu, disk) = (text.contains("': 'cpu'"), text.contains("': 'disk'"));
        // Beside them, a module placed on a GPU: a module path (`model.layers.3`,
        // `transformer.h.0`) or a top-level module's name, not any dict's number
        // (`{'device': 'cpu', 'batch_size': 8}`).
        let on_gpu = || {
            text.match_indices("': ").any(|(at, m)| {
                let key = text[..at].rsplit('\'').next().unwrap_or("");
                text[at + m.len()..].starts_with(|c: char| c.is_ascii_digit())
                    && (key.contains('.')
                        || ["layer", "embed", "lm_head"]
                            .iter()
                            .any(|w| key.contains(w)))
            })
        };
        if !(cpu || disk) || !on_gpu() {
            return None;
        }
        (cpu, disk)
    };
    match (cpu, disk) {
        (true, true) => Some("cpu and disk"),
        (true, false) => Some("cpu"),
        (false, true) => Some("disk"),
        (false, false) => None,
    }
}

/// The training/inference-loop recogniser.
pub struct Training;

impl Recognizer for Training {
    fn engine(&self) -> &'static str {
        id::TRANSFORMERS
    }

    fn anchors(&self) -> &'static [&'static str] {
        &[
            "batch_size",
            "batch size",
            "gradient_accumulation",
            "Gradient Accumulation",
            "gradient_checkpointing",
            "Running training",
            // A model's load reported failed.
            "failed to load",
            "could not load",
            "unable to load",
            "error loading",
            // MLX-LM's `Starting training..., iters: 600`.
            "Starting training",
            "Running Evaluation",
            "Running Prediction",
            "trainable params",
            // Parameter counts: `number of parameters: 123.69M`, `Total params: 6,738,415,616`,
            // `7.24B parameters`. Not a bare `param`: vLLM logs `params: SamplingParams(...)`
            // on every request.
            "number of parameters",
            "total parameters",
            "model parameters",
            "total params",
            "num_params",
            "num params",
            "n_params",
            "param count",
            "parameter count",
            "b parameters",
            "m parameters",
            "b params",
            "m params",
            "illion params",
            "illion parameters",
            "Loading checkpoint shards",
            "loading weights file",
            // Accelerate's device map offloading what does not fit on the GPUs.
            "because they were offloaded to the",
            "': 'cpu'",
            "': 'disk'",
            "Loading model",
            "Automatic Mixed Precision",
            "model_name_or_path",
            "max_seq_len",
            "seq_length",
            "seq_len",
            "block_size",
            "max_length",
            "cutoff_len",
            "mixed_precision",
            "world_size",
            // Launchers: `accelerate launch --num_processes 2`, `torchrun --nproc_per_node=4`,
            // `deepspeed --num_gpus 1`.
            "num_processes",
            "nproc_per_node",
            "num_gpus",
            "Num processes",
            "bf16",
            "fp16",
            "16-mixed",
            "16-true",
            "mem",
            // A callback's print of `torch.cuda.memory_allocated()` beside its batch.
            "allocated ",
            "Max_MA",
            // Pasted loading code (`LOAD_DTYPE`).
            "torch_dtype",
            "from_pretrained(",
            "load_in_4bit",
            "load_in_8bit",
        ]
    }

    fn recognize(&self, line: &Line<'_>, out: &mut Emit) {
        let text = line.text;
        if text.contains("Running training") || text.contains("Starting training...") {
            out.phase(PhaseMark::TrainingStart);
        }
        if text.contains("Running Evaluation")
            || text.contains("Running evaluation")
            || text.contains("Running Prediction")
        {
            out.phase(PhaseMark::Evaluation);
        }
        // A script or a front-end saying it starts loading (`Loading model: black-forest-labs/
        // FLUX.1-dev`, `Loading model from ./checkpoints/...`, vLLM V1's `Loading model from
        // scratch...`); not vLLM's report of a load that has finished (`Loading model
        // weights took 14.99 GB`).
        if text.contains("Loading checkpoint shards")
            || text.contains("loading weights file")
            || (text.contains("Loading model") && !text.contains("weights took"))
        {
            out.phase(PhaseMark::ModelLoad);
        }
        if LOAD_FAILED.is_match(text) {
            out.phase(PhaseMark::LoadFailed);
        }
        if let Some(to) = offloaded_to(text) {
            out.fact("model.offloaded_to", to, None);
        }
        let num = |c: &regex::Captures<'_>, g: &str| {
            c.name(g)
                .and_then(|m| parse_number(m.as_str()).map(|v| (v, (m.start(), m.end()))))
        };
        // Every progress line with `mem` reaches this recogniser: the regex only where it can match.
        if let Some(c) = (text.contains("dtype") || text.contains("load_in_"))
            .then(|| LOAD_DTYPE.captures(text))
            .flatten()
        {
            let (m, dtype) = if let Some(b) = c.name("bits") {
                (b, if b.as_str() == "4" { "4bit" } else { "int8" })
            } else {
                let m = c
                    .name("d")
                    .or(c.name("d2"))
                    .expect("one dtype group matched");
                let d = match m.as_str() {
                    "half" => "float16",
                    "float" => "float32",
                    other => other,
                };
                (m, d)
            };
            out.fact("model.dtype", dtype, Some((m.start(), m.end())));
        }
        if let Some((n, sp)) = HF_BATCH.captures(text).and_then(|c| num(&c, "n")) {
            out.fact("train.batch_size", n, Some(sp));
            // The Trainer's banner: its batch is `per_device_train_batch_size`.
            out.fact("train.batch_flag", "per_device_train_batch_size", Some(sp));
        }
        if let Some((n, sp)) = HF_TOTAL_BATCH.captures(text).and_then(|c| num(&c, "n")) {
            out.fact("train.global_batch_size", n, Some(sp));
        }
        if let Some((n, sp)) = HF_ACCUM.captures(text).and_then(|c| num(&c, "n")) {
            out.fact("train.gradient_accumulation_steps", n, Some(sp));
        }
        if let Some((n, sp)) = ACCELERATE_PROCS.captures(text).and_then(|c| num(&c, "n")) {
            out.fact("train.world_size", n, Some(sp));
        }
        if let Some(c) = PEFT_PARAMS.captures(text) {
            if let (Some((t, ts)), Some((a, as_))) = (num(&c, "t"), num(&c, "a")) {
                out.fact("model.trainable_params", t, Some(ts));
                out.fact("model.params", a, Some(as_));
                out.fact("train.lora", t < a * 0.5, Some(ts));
            }
        }
        if text.contains("Automatic Mixed Precision")
            && let Some(m) = LIGHTNING_AMP.captures(text).and_then(|c| c.name("p"))
        {
            let p = if m.as_str() == "bfloat16" {
                "bf16"
            } else {
                "fp16"
            };
            out.fact("train.mixed_precision", p, Some((m.start(), m.end())));
        }
        // (The check before the regexes keeps their cost off the lines other anchors bring.)
        if (text.contains("aram") || text.contains("ARAM"))
            && let Some((n, sp)) = param_count(text)
        {
            out.fact("model.params", n, Some(sp));
        }
        if let Some(c) = MIXED.captures(text) {
            if let Some(k) = c.name("k").or(c.name("f")).or(c.name("l")) {
                out.fact(
                    "train.mixed_precision",
                    k.as_str(),
                    Some((k.start(), k.end())),
                );
            } else if let Some(k) = c.name("l16") {
                out.fact("train.mixed_precision", "fp16", Some((k.start(), k.end())));
            }
        }
        // Lines that merely explain a key (help text, error hints) are not configuration.
        if text.contains("Tried to allocate") {
            return;
        }
        if let Some(c) = DEEPSPEED_MA.captures(text) {
            let m = c.name("n").expect("group n");
            if let Some(v) = parse_number(m.as_str()) {
                out.memory_sample(v * 1073741824.0, Some((m.start(), m.end())));
            }
        } else if let Some(c) = MEMORY_REPORT.captures(text) {
            let (n, u) = (c.name("n").expect("group n"), c.name("u").expect("group u"));
            let unit = if u.as_str().to_ascii_uppercase().starts_with('G') {
                1073741824.0
            } else {
                1048576.0
            };
            if let Some(v) = parse_number(n.as_str()) {
                out.memory_sample(v * unit, Some((n.start(), n.end())));
            }
            if let Some(r) = MEMORY_REPORT_RESERVED
                .captures(text)
                .and_then(|c| c.name("n"))
            {
                if let Some(v) = parse_number(r.as_str()) {
                    out.reserved_memory_sample(v * unit, Some((r.start(), r.end())));
                }
            }
        } else if PROGRESS.is_match(text) || GPU_READING.is_match(text) {
            // A bar redrawn in place (tqdm captured to a file) holds every update on one
            // line, each after a `\r`: one sample per update, in order, so the last sample
            // is the latest figure and the rises between updates count.
            let mut at = 0;
            for piece in text.split('\r') {
                let mut taken = None;
                if let Some(c) = MEMORY_FIGURE.captures(piece) {
                    let (n, u) = (c.name("n").expect("group n"), c.name("u").expect("group u"));
                    taken = Some(n.start());
                    if let Some(v) = parse_number(n.as_str()) {
                        out.memory_sample(
                            v * figure_unit(u.as_str()),
                            Some((at + n.start(), at + u.end())),
                        );
                    }
                }
                // The reserved figure, where it is another than the one taken above (a
                // line that logs only `memory_reserved` has it once, as its figure).
                if let Some(c) = RESERVED_FIGURE
                    .captures(piece)
                    .filter(|c| c.name("n").map(|n| n.start()) != taken)
                {
                    let (n, u) = (c.name("n").expect("group n"), c.name("u").expect("group u"));
                    if let Some(v) = parse_number(n.as_str()) {
                        out.reserved_memory_sample(
                            v * figure_unit(u.as_str()),
                            Some((at + n.start(), at + u.end())),
                        );
                    }
                }
                at += piece.len() + 1;
            }
        }
        for c in CONFIG_KV.captures_iter(text) {
            let (Some(key), Some(val)) = (c.name("key"), c.name("val")) else {
                continue;
            };
            let sp = Some((val.start(), val.end()));
            let v = val.as_str();
            let n = parse_number(v);
            match key.as_str() {
                "per_device_train_batch_size"
                | "train_micro_batch_size_per_gpu"
                | "micro_batch_size_per_gpu"
                | "micro_batch_size"
                | "batch_size" => {
                    if let Some(n) = n.filter(|n| *n >= 1.0) {
                        out.fact("train.batch_size", n, sp);
                        // What the run calls it, so a fix names the knob the user set.
                        out.fact(
                            "train.batch_flag",
                            key.as_str(),
                            Some((key.start(), key.end())),
                        );
                    }
                }
                "train_batch_size" => {
                    if let Some(n) = n.filter(|n| *n >= 1.0) {
                        out.fact("train.global_batch_size", n, sp);
                    }
                }
                "gradient_accumulation_steps" => {
                    if let Some(n) = n.filter(|n| *n >= 1.0) {
                        out.fact("train.gradient_accumulation_steps", n, sp);
                    }
                }
                "max_seq_length" | "max_seq_len" | "seq_length" | "seq_len" | "block_size"
                | "max_length" | "cutoff_len" | "model_max_length" => {
                    // Tokenizer defaults print absurd sentinels (1e30); only plausible lengths count.
                    if let Some(n) = n.filter(|n| *n >= 16.0 && *n <= 16_777_216.0) {
                        out.fact("train.seq_len", n, sp);
                    }
                }
                "gradient_checkpointing" | "grad_ckpt" => {
                    let on = matches!(v.to_ascii_lowercase().as_str(), "true" | "1" | "yes" | "on");
                    let off = matches!(
                        v.to_ascii_lowercase().as_str(),
                        "false" | "0" | "no" | "off" | "none"
                    );
                    if on || off {
                        out.fact("train.gradient_checkpointing", on, sp);
                    }
                }
                "mixed_precision" => {
                    if matches!(v, "fp16" | "bf16" | "no" | "fp8") {
                        out.fact("train.mixed_precision", v, sp);
                    }
                }
                "model_name_or_path" if v.len() > 1 && v != "None" => out.fact("model.name", v, sp),
                // A launcher's process count on one node is the world size or a floor of it.
                "world_size" | "num_processes" | "nproc_per_node" | "num_gpus" => {
                    if let Some(n) = n.filter(|n| *n >= 1.0) {
                        out.fact("train.world_size", n, sp);
                    }
                }
                "optim" => out.fact("train.optimizer", v, sp),
                _ => {}
            }
        }
        // A bare `--gradient_checkpointing` flag on a command line turns it on: at the end
        // of the line (or before a shell's `\` continuation) or before the next flag, not
        // before a value (`--gradient_checkpointing False` is read with the keys above).
        if let Some(at) = text.find("--gradient_checkpointing") {
            let rest = text[at + "--gradient_checkpointing".len()..].trim_start();
            if rest.is_empty() || rest.starts_with("--") || rest.starts_with('\\') {
                out.fact("train.gradient_checkpointing", true, None);
            }
        }
    }
}

/// The model's parameter count a line prints, and the span of the number; counts of
/// trainable parameters only (LoRA adapters, frozen layers) are not the model's size.
fn param_count(text: &str) -> Option<(f64, (usize, usize))> {
    PARAM_COUNT_KEYED
        .captures_iter(text)
        .chain(PARAM_COUNT_SUFFIXED.captures_iter(text))
        .filter(|c| c.name("pre").is_none())
        .find_map(|c| {
            let n = c.name("n")?;
            let scale = match c.name("u").map(|u| u.as_str().to_ascii_lowercase()) {
                Some(u) if u == "k" || u == "thousand" => 1e3,
                Some(u) if u == "m" || u == "million" => 1e6,
                Some(u) if u == "b" || u == "billion" => 1e9,
                Some(u) if u == "t" || u == "trillion" => 1e12,
                _ => 1.0,
            };
            let v = parse_number(&n.as_str().replace(',', ""))? * scale;
            // A model has thousands of parameters at least; smaller numbers are something else.
            (v >= 1e3).then(|| {
                (
                    v.round(),
                    (n.start(), c.name("u").map_or(n.end(), |u| u.end())),
                )
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::evidence::Value;
    use crate::ingest::log::engines::Observation;

    fn facts(text: &str) -> Vec<(&'static str, Value)> {
        crate::ingest::log::engines::facts_of(&Training, text)
    }

    /// The value the line gives fact `name`.
    fn fact(text: &str, name: &str) -> Option<Value> {
        facts(text)
            .into_iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
    }

    /// Lightning's precision names the half-precision type, both the weights' and autocast's.
    #[test]
    fn lightning_precision_is_mixed_precision() {
        let get = |t: &str| fact(t, "train.mixed_precision");
        for (line, want) in [
            (
                "$ python finetune/lora.py --precision bf16-true --out_dir out/lora",
                "bf16",
            ),
            (
                "trainer = L.Trainer(devices=2, precision=\"16-mixed\")",
                "fp16",
            ),
            ("{'precision': 'bf16-mixed', 'devices': 1}", "bf16"),
        ] {
            assert_eq!(get(line), Some(Value::str(want)), "{line}");
        }
    }

    #[test]
    fn accelerate_offloading_what_did_not_fit() {
        let to = |t: &str| fact(t, "model.offloaded_to");
        assert_eq!(
            to("Some parameters are on the meta device because they were offloaded to the cpu."),
            Some(Value::str("cpu"))
        );
        assert_eq!(
            to(
                "WARNING:root:Some parameters are on the meta device device because they were offloaded to the cpu and disk."
            ),
            Some(Value::str("cpu and disk"))
        );
        assert_eq!(
            to(
                "{'model.embed_tokens': 0, 'model.layers.0': 0, 'model.layers.31': 'cpu', 'model.norm': 'cpu', 'lm_head': 'cpu'}"
            ),
            Some(Value::str("cpu"))
        );
        // All on the GPUs, or a settings dict that names the CPU: nothing offloaded.
        assert_eq!(
            to("{'model.embed_tokens': 0, 'model.layers.0': 1, 'lm_head': 1}"),
            None
        );
        assert_eq!(to("{'device': 'cpu', 'batch_size': 8}"), None);
    }

    #[test]
    fn pasted_loading_code_says_the_weights_dtype() {
        for (line, dtype) in [
            (
                r#"pipe = FluxPipeline.from_pretrained("black-forest-labs/FLUX.1-schnell", torch_dtype=torch.bfloat16)"#,
                "bfloat16",
            ),
            (
                r#"model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.float16, device_map="auto")"#,
                "float16",
            ),
            ("    torch_dtype=torch.half,", "float16"),
            (
                "bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4')",
                "4bit",
            ),
            (
                "model = Model.from_pretrained(p, load_in_8bit=True)",
                "int8",
            ),
        ] {
            assert!(
                facts(line).contains(&("model.dtype", Value::from(dtype))),
                "{line}: {:?}",
                facts(line)
            );
        }
        // A tensor's dtype is not the weights'; a config dump's is the checkpoint's.
        for line in [
            "x = torch.zeros(4, dtype=torch.float16, device='cuda')",
            r#"  "torch_dtype": "float32","#,
            "load_in_4bit=False",
        ] {
            assert!(
                !facts(line).iter().any(|(n, _)| *n == "model.dtype"),
                "{line}"
            );
        }
    }

    #[test]
    fn a_launchers_process_count_is_the_world_size() {
        for line in [
            "+ accelerate launch --num_processes 2 sft.py --model_name_or_path m",
            "torchrun --nproc_per_node=2 --master_port=29811 train.py",
            "deepspeed --num_gpus 2 train.py --deepspeed_config ds.json",
        ] {
            assert!(
                facts(line).contains(&("train.world_size", Value::from(2.0))),
                "{line}: {:?}",
                facts(line)
            );
        }
    }

    #[test]
    fn memory_figures_in_progress_lines() {
        let samples = |t: &str| {
            crate::ingest::log::engines::run_standalone(&Training, t)
                .records
                .into_iter()
                .filter_map(|r| {
                    if let Observation::MemorySample(b) = r.obs {
                        Some(b)
                    } else {
                        None
                    }
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            samples("step 400 | loss 2.1 | mem 10.50 GiB"),
            vec![10.5 * 1073741824.0]
        );
        assert_eq!(
            samples("Epoch 2:  40%|████ | 40/100 [00:10<00:15, loss=0.3, gpu_mem=12.0G]"),
            vec![12.0 * 1073741824.0]
        );
        assert_eq!(
            samples("MA 10.5 GB         Max_MA 12.1 GB         CA 14.0 GB         Max_CA 15 GB"),
            vec![10.5 * 1073741824.0]
        );
        assert!(samples("Available KV cache memory: 3.20 GiB").is_empty());
        // A monitor's line between rounds names the GPU's memory in use: a reading without
        // a step beside it. A figure that only names memory is not.
        assert_eq!(
            samples(
                "[Memory monitoring] Free memory CPU 120499.0 MB (4.5 % used) | GPU memory used 4282 MB"
            ),
            vec![4282.0 * 1048576.0]
        );
        assert!(samples("Of the allocated memory 20.10 GiB is allocated by PyTorch").is_empty());
        // Redrawn in place: one sample per update, in order.
        assert_eq!(
            samples(
                "Epoch 2:  40%|████ | 40/100 [00:10<00:15, gpu_mem=12.0G]\r\
                 Epoch 2:  41%|████ | 41/100 [00:10<00:15, gpu_mem=12.5G]\r\
                 Epoch 2:  42%|████ | 42/100 [00:11<00:15, gpu_mem=13.0G]"
            ),
            vec![
                12.0 * 1073741824.0,
                12.5 * 1073741824.0,
                13.0 * 1073741824.0
            ]
        );
    }

    /// A script announcing that it loads a model marks the load; vLLM's report of a load
    /// that finished does not.
    #[test]
    fn loading_a_model_is_announced() {
        let marks = |t: &str| {
            crate::ingest::log::engines::run_standalone(&Training, t)
                .records
                .into_iter()
                .any(|r| matches!(r.obs, Observation::Phase(PhaseMark::ModelLoad)))
        };
        assert!(marks(
            "2024-08-07 10:20:03,404 [INFO] (__main__) Loading model: black-forest-labs/FLUX.1-dev"
        ));
        assert!(marks("Loading model from ./checkpoints/llama-13b ..."));
        assert!(!marks(
            "INFO 11-05 22:10:11 model_runner.py:1077] Loading model weights took 14.9888 GB"
        ));
    }

    /// What the allocator holds is read apart from what is in use, where a line logs both;
    /// a line that logs only the reserved figure has it as its one figure.
    #[test]
    fn reserved_figures_beside_the_memory_in_use() {
        const G: f64 = 1073741824.0;
        let both = |t: &str| {
            let (mut used, mut reserved) = (Vec::new(), Vec::new());
            for r in crate::ingest::log::engines::run_standalone(&Training, t).records {
                match r.obs {
                    Observation::MemorySample(b) => used.push(b),
                    Observation::ReservedMemorySample(b) => reserved.push(b),
                    _ => {}
                }
            }
            (used, reserved)
        };
        assert_eq!(
            both("step  1000 | loss 0.22 | mem alloc 11.9G (peak 73.6G) | reserved 75.0G"),
            (vec![11.9 * G], vec![75.0 * G])
        );
        assert_eq!(
            both("iter 500 | mem_alloc 9.21GB peak 37.02GB | mem_reserved 38.60GB"),
            (vec![9.21 * G], vec![38.6 * G])
        );
        assert_eq!(
            both("step 20 | memory_reserved=31.2GB"),
            (vec![31.2 * G], vec![])
        );
        // Megatron's report: the unit up front.
        assert_eq!(
            both(
                " [Rank 0] (after 10 iterations) memory (MB) | allocated: 1357.46 | max allocated: 2036.19 | reserved: 2158.0 | max reserved: 2158.0"
            ),
            (vec![1357.46 * 1048576.0], vec![2158.0 * 1048576.0])
        );
    }

    #[test]
    fn reads_common_config_shapes() {
        let f = facts(
            "Namespace(batch_size=32, lr=0.001, max_seq_len=2048, gradient_checkpointing=False)",
        );
        assert!(f.contains(&("train.batch_size", Value::Num(32.0))));
        assert!(f.contains(&("train.seq_len", Value::Num(2048.0))));
        assert!(f.contains(&("train.gradient_checkpointing", Value::Bool(false))));
        let f = facts(
            "python train.py --per_device_train_batch_size 8 --gradient_accumulation_steps 4 --bf16",
        );
        assert!(f.contains(&("train.batch_size", Value::Num(8.0))));
        assert!(f.contains(&(
            "train.batch_flag",
            Value::Str("per_device_train_batch_size".into())
        )));
        assert!(f.contains(&("train.gradient_accumulation_steps", Value::Num(4.0))));
        let f = facts("  Instantaneous batch size per device = 16");
        assert!(f.contains(&("train.batch_size", Value::Num(16.0))));
        assert!(f.contains(&(
            "train.batch_flag",
            Value::Str("per_device_train_batch_size".into())
        )));
        let f = facts("\"train_micro_batch_size_per_gpu\": 4,");
        assert!(f.contains(&("train.batch_size", Value::Num(4.0))));
        // The bare flag, also before a shell's line continuation or the next flag.
        for line in [
            "  --train_batch_size=1 --gradient_checkpointing \\",
            "accelerate launch train.py --gradient_checkpointing --bf16",
            "python train.py --gradient_checkpointing",
        ] {
            let f = facts(line);
            assert!(
                f.contains(&("train.gradient_checkpointing", Value::Bool(true))),
                "{line}"
            );
        }
        let f = facts("python train.py --gradient_checkpointing False");
        assert!(!f.contains(&("train.gradient_checkpointing", Value::Bool(true))));
        let f = facts("config: batch_size=32 seq_len=1024 grad_ckpt=True");
        assert!(f.contains(&("train.batch_flag", Value::Str("batch_size".into()))));
        assert!(f.contains(&("train.gradient_checkpointing", Value::Bool(true))));
        let f =
            facts("trainable params: 4,194,304 || all params: 6,742,609,920 || trainable%: 0.0622");
        assert!(f.contains(&("model.params", Value::Num(6742609920.0))));
        assert!(f.contains(&("train.lora", Value::Bool(true))));
        let f = facts("model_max_length=1000000000000000019884624838656");
        assert!(f.is_empty());
    }

    #[test]
    fn parameter_counts_in_their_common_shapes() {
        let params = |t: &str| {
            facts(t)
                .into_iter()
                .filter(|(n, _)| *n == "model.params")
                .map(|(_, v)| v)
                .collect::<Vec<_>>()
        };
        for (line, want) in [
            ("number of parameters: 123.69M", 123_690_000.0),
            ("model parameters: 100.8M", 100_800_000.0),
            ("Total params: 6,738,415,616", 6_738_415_616.0),
            ("Total params: 1,234,567 (4.71 MB)", 1_234_567.0),
            ("INFO num_params = 7241732096", 7_241_732_096.0),
            ("Model has 7.24B parameters", 7_240_000_000.0),
            ("6.7 B     Total params", 6_700_000_000.0),
            (
                "--> llama-2-7b-hf has 6738.415616 Million params",
                6_738_415_616.0,
            ),
            ("Model size: 1.3 billion parameters", 1_300_000_000.0),
        ] {
            assert_eq!(params(line), vec![Value::Num(want)], "{line}");
        }
        // Trainable-only counts, optimiser groups and small numbers are not the model's size.
        for line in [
            "Trainable params: 4,194,304",
            "Non-trainable params: 0",
            "4.2 M     Trainable params",
            "param_groups: 2",
            "n_params=12",
            "4.2 million trainable parameters",
            "optimizer params = {'lr': 0.001}",
        ] {
            assert!(params(line).is_empty(), "{line}");
        }
    }
}
