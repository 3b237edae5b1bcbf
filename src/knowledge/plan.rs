//! `oomdoctor plan`: will this model, at this context and concurrency, fit on these GPUs
//! under each engine, and with which settings?
//!
//! ```text
//! oomdoctor plan --model config.json|model.gguf|DIR --gpu 24GiB|rtx4090|2xh100
//!                [--engine vllm|llamacpp|ollama|transformers|sglang|tgi]
//!                [--context N] [--concurrency N] [--kv-cache-dtype fp8|q8_0|...]
//!                [--dtype bf16] [--quantization awq|fp8|nf4|q4_k_m|...]
//!                [--tensor-parallel N] [--format human|json] [--explain]
//! ```
//!
//! [`plan`] loads the model (GGUF or `config.json`, told apart by content), resolves the
//! GPU, and asks [`super::fit`] for each engine's verdict. The report is data
//! ([`PlanReport`], `schema_version` 1); [`render_human`] and [`render_json`] print it.
//!
//! Exit contract for the CLI: 0 when `report.fits`, 1 when it does not (so CI can gate a
//! deployment), 2 on a [`PlanError`]. With `--engine` the verdict is that engine's; without
//! it, the workload fits when at least one engine fits it, and the top-level numbers are
//! those of the best engine (`primary_engine`).

use std::fmt::Write as _;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::fit::{self, Engine, EnginePlan, FitStatus, Settings, Workload};
use super::gpus::{self, GpuError, GpuSpec};
use super::memory::{
    self, CacheDtype, Dtype, KvSpec, Quant, Step, Trace, WeightFormat, fmt_gib, fmt_gib_f, fmt_int,
};
use crate::ingest::model::config::{self, ConfigError};
use crate::ingest::model::geometry::{Geometry, Mla, ModelFormat, Moe};
use crate::ingest::model::gguf::{self, GgufError};

/// Arguments of `oomdoctor plan`.
#[derive(Clone, Debug, clap::Args)]
pub struct PlanArgs {
    /// The model: a Hugging Face config.json, a .gguf file, or a directory holding one.
    #[arg(long, value_name = "PATH")]
    pub model: PathBuf,

    /// The GPU: a size (24GiB, 80GB), a name (rtx4090, a100-40gb, h100, l40s, mi300x), and
    /// a count for several (2xh100, h100:4).
    #[arg(long, value_name = "GPU")]
    pub gpu: String,

    /// Plan for one engine (default: all that can load the model).
    #[arg(long, value_enum)]
    pub engine: Option<Engine>,

    /// Context length per sequence, in tokens (default: each engine's default; 0 = the
    /// model's maximum, like llama.cpp's -c 0).
    #[arg(long, value_name = "TOKENS")]
    pub context: Option<u64>,

    /// Sequences served at once, each with the full context (default 1).
    #[arg(long, value_name = "N")]
    pub concurrency: Option<u64>,

    /// KV cache type: auto, f16, bf16, fp8, fp8_e4m3, fp8_e5m2, q8_0, q4_0, q4_1, q5_0,
    /// q5_1, iq4_nl.
    #[arg(long, value_name = "DTYPE")]
    pub kv_cache_dtype: Option<String>,

    /// Weight/activation dtype instead of the checkpoint's (float16, bfloat16, float32).
    #[arg(long, value_name = "DTYPE")]
    pub dtype: Option<String>,

    /// Plan with quantised weights: fp8, int8 / bnb-int8, nf4 / bnb-nf4, awq, gptq, mxfp4,
    /// or a GGUF type (q8_0, q6_k, q5_k_m, q4_k_m, ...).
    #[arg(long, value_name = "METHOD")]
    pub quantization: Option<String>,

    /// Tensor-parallel size (default: the number of GPUs).
    #[arg(long, value_name = "N")]
    pub tensor_parallel: Option<u32>,

    /// Output format.
    #[arg(long, value_enum, default_value_t = PlanFormat::Human)]
    pub format: PlanFormat,

    /// Show the arithmetic behind every number.
    #[arg(long)]
    pub explain: bool,
}

/// Output format of `plan`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PlanFormat {
    #[default]
    Human,
    Json,
}

/// Why a plan could not be made (exit code 2).
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum PlanError {
    #[error("cannot read {path}: {source}")]
    #[diagnostic(code(oomdoctor::plan::io))]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },

    #[error("{path}: {problem}")]
    #[diagnostic(code(oomdoctor::plan::model), help("{help}"))]
    Model {
        path: String,
        problem: String,
        help: String,
    },

    #[error("{0}")]
    #[diagnostic(code(oomdoctor::plan::args))]
    Args(String),

    #[error(transparent)]
    #[diagnostic(transparent)]
    Config(#[from] ConfigError),

    #[error(transparent)]
    #[diagnostic(transparent)]
    Gguf(#[from] GgufError),

    #[error(transparent)]
    #[diagnostic(transparent)]
    Gpu(#[from] GpuError),
}

/// A model read from disk.
#[derive(Clone, Debug)]
pub struct LoadedModel {
    pub geometry: Geometry,
    /// The file read.
    pub path: String,
    /// How commands should name it: the HF id when the config has one, else the path.
    pub model_ref: String,
}

/// A Hugging Face Hub id (`org/name`), not a path.
fn is_hub_id(s: &str) -> bool {
    let mut parts = s.split('/');
    let ok = |p: Option<&str>| {
        p.is_some_and(|p| {
            !p.is_empty()
                && p != "."
                && p != ".."
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        })
    };
    ok(parts.next()) && ok(parts.next()) && parts.next().is_none()
}

/// What to pass an engine as the model: the Hub id the config names (`_name_or_path`), the
/// one a Hugging Face cache path spells (`models--org--name/snapshots/<rev>/config.json`),
/// else the directory holding config.json as a path (`./model`), since a folder name alone
/// reads as a Hub id. A config saved under another name is named by its stem.
fn model_ref(path: &Path, name: Option<&str>, display: &str) -> String {
    if let Some(n) = name.filter(|n| is_hub_id(n)) {
        return n.to_string();
    }
    let cached = path.ancestors().find_map(|a| {
        let dir = a.file_name()?.to_str()?;
        let rest = dir.strip_prefix("models--")?;
        let (org, model) = rest.split_once("--")?;
        let id = format!("{org}/{model}");
        is_hub_id(&id).then_some(id)
    });
    if let Some(id) = cached {
        return id;
    }
    if let Some(n) = name {
        return n.to_string();
    }
    let is_config = path.file_name().is_some_and(|n| n == "config.json");
    match (
        is_config,
        path.parent().filter(|p| !p.as_os_str().is_empty()),
    ) {
        (true, Some(dir)) => {
            let d = dir.display().to_string();
            if dir.is_relative() && !d.starts_with('.') {
                format!("./{d}")
            } else {
                d
            }
        }
        _ => path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| display.to_string()),
    }
}

/// Reads a model: a GGUF file (by its magic), a `config.json`, or a directory holding a
/// `config.json` or a single `.gguf`.
pub fn load_model(path: &Path) -> Result<LoadedModel, PlanError> {
    let display = path.display().to_string();
    let io = |e| PlanError::Io {
        path: display.clone(),
        source: e,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if meta.is_dir() {
        let cfg = path.join("config.json");
        if cfg.is_file() {
            return load_model(&cfg);
        }
        let mut ggufs: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(io)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.extension()
                    .is_some_and(|x| x.eq_ignore_ascii_case("gguf"))
            })
            .collect();
        ggufs.sort();
        return match ggufs.as_slice() {
            [one] => load_model(one),
            [] => Err(PlanError::Model {
                path: display,
                problem: "the directory has no config.json and no .gguf file".to_string(),
                help: "point --model at a config.json or a .gguf".to_string(),
            }),
            many => Err(PlanError::Model {
                path: display,
                problem: format!("the directory has {} .gguf files", many.len()),
                help: "name the one to plan for (multi-part GGUFs: give the first part)"
                    .to_string(),
            }),
        };
    }
    // A device (`/dev/zero`), FIFO or socket has no end to read to, and opening a FIFO
    // blocks until something writes to it: only regular files are models.
    if !meta.is_file() {
        return Err(PlanError::Model {
            path: display,
            problem: "not a regular file (a device, FIFO or socket); nothing was read".to_string(),
            help: "--model takes a config.json or a .gguf file".to_string(),
        });
    }
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mut magic = [0u8; 4];
    let n = file.read(&mut magic).map_err(io)?;
    if gguf::is_gguf(&magic[..n]) {
        let header = gguf::read_gguf_model(path)?;
        let mut g = gguf::geometry_from_gguf(&header, &display)?;
        if g.name.is_none() {
            g.name = path.file_stem().map(|s| s.to_string_lossy().into_owned());
        }
        return Ok(LoadedModel {
            geometry: g,
            path: display.clone(),
            model_ref: display,
        });
    }
    if meta.len() > config::MAX_CONFIG_BYTES {
        return Err(PlanError::Model {
            path: display,
            problem: format!(
                "{} bytes is too large for a config.json and it is not a GGUF file",
                meta.len()
            ),
            help: "--model takes a config.json or a .gguf (safetensors weights are not read)"
                .to_string(),
        });
    }
    // Bounded even if the file grows after the size check.
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(config::MAX_CONFIG_BYTES + 1).read_to_end(&mut bytes))
        .map_err(io)?;
    if bytes.len() as u64 > config::MAX_CONFIG_BYTES {
        return Err(PlanError::Model {
            path: display,
            problem: format!(
                "more than {} bytes is too large for a config.json",
                config::MAX_CONFIG_BYTES
            ),
            help: "--model takes a config.json or a .gguf (safetensors weights are not read)"
                .to_string(),
        });
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidData))
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => PlanError::Model {
                path: display.clone(),
                problem: "neither a GGUF file nor UTF-8 JSON".to_string(),
                help: "--model takes a config.json or a .gguf (safetensors weights are not read)"
                    .to_string(),
            },
            _ => PlanError::Io {
                path: display.clone(),
                source: e,
            },
        })?;
    let g = config::parse_config(&text, &display)?;
    let model_ref = model_ref(path, g.name.as_deref(), &display);
    Ok(LoadedModel {
        geometry: g,
        path: display,
        model_ref,
    })
}

/// The workload asked for, validated.
#[derive(Clone, Debug, Default)]
pub struct PlanRequest {
    pub engine: Option<Engine>,
    pub context: Option<u64>,
    pub concurrency: Option<u64>,
    pub kv_cache_dtype: Option<CacheDtype>,
    pub dtype: Option<Dtype>,
    pub quantization: Option<String>,
    pub tensor_parallel: Option<u32>,
}

impl PlanRequest {
    /// Validates the arguments.
    pub fn from_args(a: &PlanArgs) -> Result<Self, PlanError> {
        let kv_cache_dtype = match a.kv_cache_dtype.as_deref().map(str::trim) {
            None | Some("auto") | Some("") => None,
            Some(s) => Some(CacheDtype::parse(s).ok_or_else(|| {
                PlanError::Args(format!(
                    "--kv-cache-dtype {s}: expected auto, f16, bf16, fp8, fp8_e4m3, fp8_e5m2, q8_0, q4_0, q4_1, q5_0, q5_1 or iq4_nl"
                ))
            })?),
        };
        let dtype = match a.dtype.as_deref() {
            None | Some("auto") => None,
            Some(s) => Some(Dtype::parse(s).filter(|d| matches!(d, Dtype::F32 | Dtype::F16 | Dtype::Bf16)).ok_or_else(|| {
                PlanError::Args(format!("--dtype {s}: expected float16, bfloat16 or float32 (use --quantization for 8- and 4-bit)"))
            })?),
        };
        if a.concurrency == Some(0) || a.concurrency.is_some_and(|c| c > 1 << 20) {
            return Err(PlanError::Args(
                "--concurrency must be from 1 to 1,048,576".to_string(),
            ));
        }
        if a.context.is_some_and(|c| c > config::MAX_CONTEXT) {
            return Err(PlanError::Args(format!(
                "--context must be at most {}",
                fmt_int(config::MAX_CONTEXT)
            )));
        }
        if a.tensor_parallel.is_some_and(|t| t == 0 || t > 4096) {
            return Err(PlanError::Args(
                "--tensor-parallel must be from 1 to 4096".to_string(),
            ));
        }
        if let Some(q) = &a.quantization {
            quant_override(q)?;
        }
        Ok(PlanRequest {
            engine: a.engine,
            context: a.context,
            concurrency: a.concurrency,
            kv_cache_dtype,
            dtype,
            quantization: a.quantization.clone(),
            tensor_parallel: a.tensor_parallel,
        })
    }
}

/// `--quantization`: the weight format and, for 16-bit checkpoints quantised at load time,
/// oomdoctor's name for it (`fp8`, `bnb-nf4`, `bnb-int8`).
fn quant_override(q: &str) -> Result<(Quant, Option<&'static str>), PlanError> {
    let n = q.trim().to_ascii_lowercase().replace('-', "_");
    Ok(match n.as_str() {
        "fp8" | "float8" => (Quant::fp8(None), Some("fp8")),
        "int8" | "bnb_int8" | "bnb_8bit" | "bitsandbytes_8bit" | "8bit" | "llm.int8" => {
            (Quant::bnb_8bit(), Some("bnb-int8"))
        }
        "nf4" | "bnb_nf4" | "bnb_4bit" | "bnb" | "bitsandbytes" | "bitsandbytes_nf4" | "4bit" => {
            (Quant::bnb_4bit("nf4", false), Some("bnb-nf4"))
        }
        "awq" | "gptq" | "int4" | "w4a16" => (
            Quant::gptq_like(
                if n == "int4" || n == "w4a16" {
                    "int4"
                } else {
                    &n
                },
                4,
                Some(128),
            ),
            None,
        ),
        "mxfp4" => (
            Quant {
                experts_only: true,
                ..Quant::mxfp4()
            },
            None,
        ),
        other => match Quant::gguf_type(other) {
            Some(qt) => (qt, None),
            None => {
                return Err(PlanError::Args(format!(
                    "--quantization {q}: expected fp8, int8, nf4, awq, gptq, int4, mxfp4 or a GGUF type (q8_0, q6_k, q5_k_m, q4_k_m, q4_0, q3_k_m, q2_k, iq4_xs, ...)"
                )));
            }
        },
    })
}

/// What the model is, for the report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelSummary {
    pub name: String,
    pub source: String,
    pub format: ModelFormat,
    pub architecture: String,
    pub model_type: String,
    pub params: u64,
    pub active_params: u64,
    pub layers: u64,
    pub kv_layers: u64,
    pub sliding_layers: u64,
    pub sliding_window: Option<u64>,
    pub attention_heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub hidden_size: u64,
    pub vocab_size: u64,
    pub max_context_tokens: Option<u64>,
    /// How the weights are stored (or planned).
    pub weights_format: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mla: Option<Mla>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moe: Option<Moe>,
}

/// The workload as asked.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RequestSummary {
    /// `--context` (None: each engine's default, see the engines).
    pub context_tokens: Option<u64>,
    pub concurrency: u64,
    /// `--kv-cache-dtype` or the model's dtype.
    pub kv_cache_dtype: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tensor_parallel: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<Engine>,
}

/// The plan (`schema_version` 1).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlanReport {
    pub schema_version: u32,
    /// With `--engine`: whether it fits that engine. Without: whether any engine fits it.
    pub fits: bool,
    /// The engine the top-level numbers come from.
    pub primary_engine: Engine,
    pub verdict: String,
    pub model: ModelSummary,
    pub gpu: GpuSpec,
    pub request: RequestSummary,
    /// All the weights in their format (exact for GGUF).
    pub weights_bytes: u64,
    /// KV bytes per token in the model's dtype, all layers with a cache, one GPU.
    pub kv_cache_bytes_per_token: u64,
    /// Per token past every sliding window (only full-attention layers still grow).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_cache_bytes_per_token_beyond_window: Option<u64>,
    /// The primary engine's longest context that fits at the asked concurrency.
    pub max_context_tokens: u64,
    /// The primary engine's sequences of the asked context that fit at once.
    pub max_concurrency: u64,
    /// The primary engine's KV budget minus what the workload needs.
    pub headroom_bytes: i64,
    /// The primary engine's recommended settings.
    pub settings: Settings,
    pub engines: Vec<EnginePlan>,
    pub assumptions: Vec<String>,
    /// Model-level arithmetic (each engine has its own in `engines[].explain`).
    pub explain: Vec<Step>,
}

/// Runs `oomdoctor plan`.
pub fn plan(args: &PlanArgs) -> Result<PlanReport, PlanError> {
    let req = PlanRequest::from_args(args)?;
    let model = load_model(&args.model)?;
    let gpu = gpus::parse_gpu(&args.gpu)?;
    plan_for(&model, &gpu, &req)
}

/// The plan for a loaded model on a resolved GPU: no I/O, for tests and other callers.
pub fn plan_for(
    model: &LoadedModel,
    gpu: &GpuSpec,
    req: &PlanRequest,
) -> Result<PlanReport, PlanError> {
    let mut g = model.geometry.clone();
    let mut assumptions: Vec<String> = Vec::new();
    let is_gguf = g.gguf.is_some();
    let mut online_quant = None;
    if is_gguf && (req.dtype.is_some() || req.quantization.is_some()) {
        assumptions.push("--dtype and --quantization do not apply to a GGUF: its tensor types are fixed by the file".to_string());
    } else {
        if let Some(d) = req.dtype {
            g.dtype = Some(d);
        }
        if let Some(q) = &req.quantization {
            let (quant, online) = quant_override(q)?;
            if g.quant.is_some() {
                assumptions.push(format!(
                    "the checkpoint is already quantised ({}); planned with {} instead",
                    g.weight_format().describe(),
                    quant.describe()
                ));
            }
            let sixteen = g.quant.is_none();
            if quant.whole_model {
                assumptions.push(format!(
                    "{}: previews a GGUF conversion for llama.cpp/Ollama",
                    quant.basis
                ));
            } else if online.is_none() {
                assumptions.push(format!(
                    "{} needs a checkpoint quantised that way (engines cannot do it at load time)",
                    quant.method
                ));
            }
            if sixteen {
                online_quant = online.map(str::to_string);
            }
            g.quant = Some(quant);
        }
    }
    let params = g.params();
    let format = g.weight_format();
    let engine_format = match &format {
        // Serving engines cast float32 checkpoints to 16 bits.
        WeightFormat::Dense { dtype: Dtype::F32 } if req.dtype.is_none() => {
            assumptions.push("float32 checkpoint: planned in bfloat16, as engines load it (vLLM casts it; pass torch_dtype to transformers)".to_string());
            g.dtype = Some(Dtype::Bf16);
            WeightFormat::Dense { dtype: Dtype::Bf16 }
        }
        f => f.clone(),
    };
    let mut wtrace = Trace::new();
    let exact = g.gguf.as_ref().map(|t| t.total_bytes);
    let weights_bytes = memory::weights_bytes(&params, &engine_format, exact, &mut wtrace);

    let engines: Vec<Engine> = match req.engine {
        Some(e) => vec![e],
        None if is_gguf => vec![Engine::Llamacpp, Engine::Ollama],
        None => Engine::ALL.to_vec(),
    };
    if is_gguf && req.engine.is_none() {
        assumptions.push("a GGUF file: planned for llama.cpp and Ollama (pass --engine to plan another engine with its sizes)".to_string());
    }
    let w = Workload {
        geometry: &g,
        format: engine_format.clone(),
        params,
        weights_bytes,
        gpu,
        tensor_parallel: req.tensor_parallel,
        context: req.context,
        concurrency: req.concurrency,
        kv_cache_dtype: req.kv_cache_dtype,
        model_ref: model.model_ref.clone(),
        online_quant,
    };
    let plans: Vec<EnginePlan> = engines.iter().map(|e| fit::plan_engine(*e, &w)).collect();

    // Top level: the asked engine, else the best one.
    let primary = match req.engine {
        Some(_) => 0,
        None => best_engine(&plans),
    };
    let Some(p) = plans.get(primary).or(plans.first()) else {
        return Err(PlanError::Args("no engine to plan for".to_string()));
    };
    let fits = match req.engine {
        Some(_) => p.fits,
        None => plans.iter().any(|e| e.fits),
    };

    // Model-level arithmetic.
    let default_dtype = CacheDtype::from_activation(g.activation_dtype());
    let mut explain = Trace::new();
    explain.add(
        "parameters",
        param_formula(&g),
        format!(
            "{}{}",
            fmt_int(params.total()),
            if params.exact_total.is_some() {
                " (tensor table)"
            } else {
                ""
            }
        ),
    );
    for s in wtrace.steps() {
        explain.add(s.what.clone(), s.formula.clone(), s.result.clone());
    }
    let spec = KvSpec::new(default_dtype);
    let kv_per_token = memory::kv_bytes_per_token(&g, &spec, &mut explain);
    let beyond = memory::kv_bytes_per_token_beyond_windows(&g, &spec);
    let beyond = (beyond != kv_per_token).then_some(beyond);
    if let Some(b) = beyond {
        explain.add(
            "KV per token past the windows",
            format!(
                "only the {} full-attention layers keep growing",
                g.layers
                    .iter()
                    .filter(|l| l.attention == crate::ingest::model::geometry::Attention::Full)
                    .count()
            ),
            format!("{} bytes", fmt_int(b)),
        );
    }

    assumptions.push(format!("GPU memory: {}", gpu.basis));
    assumptions.extend(gpu.notes.iter().cloned());
    assumptions.push("CUDA context, activation peaks, CUDA graphs and compute buffers are estimates: each has a range in `overheads` and `explain`".to_string());
    for e in &engines {
        assumptions.push(engine_assumption(*e).to_string());
    }
    assumptions.extend(g.notes.iter().cloned());

    let verdict = top_verdict(&plans, req.engine.is_some(), fits, primary);
    Ok(PlanReport {
        schema_version: 1,
        fits,
        primary_engine: p.engine,
        verdict,
        model: ModelSummary {
            name: g.name.clone().unwrap_or_else(|| model.model_ref.clone()),
            source: model.path.clone(),
            format: g.format,
            architecture: g.architecture.clone(),
            model_type: g.model_type.clone(),
            params: params.total(),
            active_params: g.active_params(),
            layers: g.num_layers,
            kv_layers: g.kv_layer_count(),
            sliding_layers: g.sliding_layer_count(),
            sliding_window: g.sliding_window,
            attention_heads: g.num_attention_heads,
            kv_heads: g.num_kv_heads,
            head_dim: g.head_dim,
            hidden_size: g.hidden_size,
            vocab_size: g.vocab_size,
            max_context_tokens: g.max_context(),
            weights_format: engine_format.describe(),
            mla: g.mla,
            moe: g.moe,
        },
        gpu: gpu.clone(),
        request: RequestSummary {
            context_tokens: req.context,
            concurrency: req.concurrency.unwrap_or(1),
            kv_cache_dtype: req
                .kv_cache_dtype
                .unwrap_or(default_dtype)
                .name()
                .to_string(),
            tensor_parallel: req.tensor_parallel,
            engine: req.engine,
        },
        weights_bytes,
        kv_cache_bytes_per_token: kv_per_token,
        kv_cache_bytes_per_token_beyond_window: beyond,
        max_context_tokens: p.max_context_tokens,
        max_concurrency: p.max_concurrency,
        headroom_bytes: p.headroom_bytes,
        settings: p.settings.clone(),
        engines: plans,
        assumptions,
        explain: explain.steps().to_vec(),
    })
}

/// The engine whose numbers lead the report: among those that fit, the most headroom;
/// if none fits, the longest context.
fn best_engine(plans: &[EnginePlan]) -> usize {
    let fitting = plans
        .iter()
        .enumerate()
        .filter(|(_, p)| p.fits)
        .max_by_key(|(i, p)| (p.headroom_bytes, std::cmp::Reverse(*i)));
    match fitting {
        Some((i, _)) => i,
        None => plans
            .iter()
            .enumerate()
            .max_by_key(|(i, p)| (p.max_context_tokens, std::cmp::Reverse(*i)))
            .map(|(i, _)| i)
            .unwrap_or(0),
    }
}

fn top_verdict(plans: &[EnginePlan], one_engine: bool, fits: bool, primary: usize) -> String {
    if one_engine {
        return plans.first().map(|p| p.verdict.clone()).unwrap_or_default();
    }
    let names = |f: bool| {
        plans
            .iter()
            .filter(|p| p.fits == f)
            .map(|p| p.engine.name())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (fits, plans.iter().all(|p| p.fits)) {
        (true, true) => format!("fits with every engine planned ({})", names(true)),
        (true, false) => format!(
            "fits with {}; does not fit with {}",
            names(true),
            names(false)
        ),
        _ => {
            let best = plans
                .get(primary)
                .filter(|p| !p.recommended.changes.is_empty());
            match best {
                Some(p) => format!(
                    "does not fit with any engine as asked; {} {} with {}",
                    p.engine.name(),
                    if p.recommended.fits { "fits" } else { "runs" },
                    p.recommended.changes.join(" and ")
                ),
                None => "does not fit with any engine as asked".to_string(),
            }
        }
    }
}

fn engine_assumption(e: Engine) -> &'static str {
    match e {
        Engine::Vllm => {
            "vllm: V1 engine; budget = total × gpu_memory_utilization (default 0.90); CUDA graphs counted in the budget (default since v0.21); max_num_batched_tokens 8192 and max_num_seqs 1024 on ≥70 GiB GPUs, 2048/256 below"
        }
        Engine::Sglang => {
            "sglang: weights + KV = total × mem_fraction_static − CUDA context; default fraction by TP size (0.88 at TP 1, 0.4.x defaults; newer releases may pick differently)"
        }
        Engine::Tgi => {
            "tgi: KV = (total × cuda_memory_fraction − weights − warm-up peak) × 0.95 (TGI_WIGGLE_ROOM); chunked prefill of 4096 tokens (TGI ≥ 3)"
        }
        Engine::Llamacpp => {
            "llamacpp: flash attention on (the default `auto` on CUDA), -ub 512; -c is split across -np slots; token embeddings stay in host memory"
        }
        Engine::Ollama => {
            "ollama: as llama.cpp, with num_ctx × OLLAMA_NUM_PARALLEL KV cells and ≈457 MiB kept free per GPU; OLLAMA_KV_CACHE_TYPE needs OLLAMA_FLASH_ATTENTION=1"
        }
        Engine::Transformers => {
            "transformers: generate() with a dynamic cache, SDPA attention, logits for the last token only (transformers ≥ 4.45); the whole batch is prefilled at once"
        }
    }
}

/// `embeddings + 32 × layer + final norm (+ lm_head)` in words, for `--explain`.
fn param_formula(g: &Geometry) -> String {
    if g.gguf.is_some() {
        return "sum of the element counts in the GGUF tensor table".to_string();
    }
    let p = g.params();
    let mut parts = vec![format!("embeddings {}", fmt_int(p.embedding))];
    if p.lm_head > 0 {
        parts.push(format!("lm_head {}", fmt_int(p.lm_head)));
    }
    parts.push(format!("attention {}", fmt_int(p.attention)));
    if p.mlp > 0 {
        parts.push(format!("MLP {}", fmt_int(p.mlp)));
    }
    if p.experts > 0 {
        parts.push(format!("experts {}", fmt_int(p.experts)));
    }
    if p.shared_experts > 0 {
        parts.push(format!("shared experts {}", fmt_int(p.shared_experts)));
    }
    if p.router > 0 {
        parts.push(format!("routers {}", fmt_int(p.router)));
    }
    parts.push(format!("norms and biases {}", fmt_int(p.small)));
    if p.vision > 0 {
        parts.push(format!("vision {}", fmt_int(p.vision)));
    }
    parts.join(" + ")
}

// ---------------------------------------------------------------------------------------
// Rendering
// ---------------------------------------------------------------------------------------

/// The report as pretty JSON (with a trailing newline).
pub fn render_json(report: &PlanReport) -> String {
    let mut s =
        serde_json::to_string_pretty(report).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}

fn status_word(p: &EnginePlan) -> &'static str {
    match p.status {
        FitStatus::Fits => "fits",
        FitStatus::Tight => "fits (tight)",
        FitStatus::PartialOffload => "partial offload",
        FitStatus::DoesNotFit => "does not fit",
    }
}

fn params_short(n: u64) -> String {
    if n >= 1_000_000_000 {
        format!("{:.2} B", n as f64 / 1e9)
    } else {
        format!("{:.0} M", n as f64 / 1e6)
    }
}

/// The report for people: a summary, a table of engines, then each engine's verdict and
/// command line; with `explain`, every step of the arithmetic.
pub fn render_human(report: &PlanReport, explain: bool) -> String {
    let mut o = String::new();
    let m = &report.model;
    let moe = m
        .moe
        .map(|x| format!(", {} experts (top {})", x.experts, x.experts_per_token))
        .unwrap_or_default();
    let _ = writeln!(
        o,
        "{} · {} · {} params{moe} · {}",
        m.name,
        if m.architecture.is_empty() {
            &m.model_type
        } else {
            &m.architecture
        },
        params_short(m.params),
        m.weights_format
    );
    let attn = if m.mla.is_some() {
        format!("{} layers, MLA", m.layers)
    } else if m.kv_layers != m.layers {
        format!(
            "{} layers ({} with KV) × {} KV heads × {}",
            m.layers, m.kv_layers, m.kv_heads, m.head_dim
        )
    } else {
        format!(
            "{} layers × {} KV heads × {}",
            m.layers, m.kv_heads, m.head_dim
        )
    };
    let sliding = match (m.sliding_layers, m.sliding_window) {
        (n, Some(w)) if n > 0 => format!(", {n} sliding-window layers ({} tokens)", fmt_int(w)),
        _ => String::new(),
    };
    let max = m
        .max_context_tokens
        .map(|c| format!(", max context {}", fmt_int(c)))
        .unwrap_or_default();
    let _ = writeln!(o, "  {attn}{sliding}{max}");
    let g = &report.gpu;
    let count = if g.count > 1 {
        format!("{} × ", g.count)
    } else {
        String::new()
    };
    let _ = writeln!(
        o,
        "GPU: {count}{} ({} usable each)",
        g.name,
        fmt_gib(g.memory_bytes)
    );
    let ctx = report
        .request
        .context_tokens
        .map(|c| format!("{} tokens", fmt_int(c)))
        .unwrap_or_else(|| "engine default context".to_string());
    let _ = writeln!(
        o,
        "Workload: {ctx} × {} sequence{}, {} KV cache",
        report.request.concurrency,
        if report.request.concurrency == 1 {
            ""
        } else {
            "s"
        },
        report.request.kv_cache_dtype
    );
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "  weights              {:>12}   {} bytes",
        fmt_gib(report.weights_bytes),
        fmt_int(report.weights_bytes)
    );
    let _ = writeln!(
        o,
        "  KV cache per token   {:>12}   {} bytes",
        format!("{:.1} KiB", report.kv_cache_bytes_per_token as f64 / 1024.0),
        fmt_int(report.kv_cache_bytes_per_token)
    );
    if let Some(b) = report.kv_cache_bytes_per_token_beyond_window {
        let _ = writeln!(
            o,
            "    past the windows   {:>12}   {} bytes",
            format!("{:.1} KiB", b as f64 / 1024.0),
            fmt_int(b)
        );
    }
    let _ = writeln!(o);

    // The table.
    let rows: Vec<[String; 6]> = report
        .engines
        .iter()
        .map(|p| {
            [
                p.engine.name().to_string(),
                status_word(p).to_string(),
                fmt_int(p.context_tokens),
                fmt_int(p.max_context_tokens),
                fmt_int(p.max_concurrency),
                fmt_gib_f(p.headroom_bytes as f64),
            ]
        })
        .collect();
    let head = [
        "engine",
        "verdict",
        "context",
        "max context",
        "max seqs",
        "headroom",
    ];
    let mut widths = head.map(str::len);
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r.iter()) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: [&str; 6]| -> String {
        let mut s = String::from("  ");
        for (i, c) in cells.iter().enumerate() {
            let pad = widths[i].saturating_sub(c.chars().count());
            if i >= 2 {
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            } else {
                s.push_str(c);
                s.push_str(&" ".repeat(pad));
            }
            s.push_str("   ");
        }
        s.trim_end().to_string()
    };
    let _ = writeln!(o, "{}", line(head));
    for r in &rows {
        let _ = writeln!(o, "{}", line([&r[0], &r[1], &r[2], &r[3], &r[4], &r[5]]));
    }
    let _ = writeln!(o);
    let mark = if report.fits { "✔" } else { "✘" };
    let _ = writeln!(o, "{mark} {}", report.verdict);

    for p in &report.engines {
        let _ = writeln!(o);
        let _ = writeln!(o, "{}: {}", p.engine.name(), p.verdict);
        let scope = if p.memory_scope == "all-gpus" {
            " (all GPUs)"
        } else if p.gpus > 1 {
            " (per GPU)"
        } else {
            ""
        };
        let _ = writeln!(
            o,
            "  budget {}{scope}, weights {}, overheads {}, KV budget {}, KV needed {}, capacity {} tokens",
            fmt_gib(p.budget_bytes),
            fmt_gib(p.weights_bytes),
            fmt_gib(
                p.overheads
                    .iter()
                    .fold(0u64, |a, x| a.saturating_add(x.bytes))
            ),
            fmt_gib_f(p.kv_budget_bytes as f64),
            fmt_gib(p.kv_needed_bytes),
            if p.kv_capacity_tokens >= u64::MAX / 4 {
                "unlimited".to_string()
            } else {
                fmt_int(p.kv_capacity_tokens)
            }
        );
        if !p.recommended.changes.is_empty() {
            let tight = if p.recommended.tight {
                " (tight: within the uncertainty of the estimates)"
            } else {
                ""
            };
            let _ = writeln!(
                o,
                "  recommended: {}{tight}",
                p.recommended.changes.join(", ")
            );
        }
        let _ = writeln!(o, "  $ {}", p.command);
        for a in &p.alternatives {
            let _ = writeln!(o, "  · {a}");
        }
        for n in &p.notes {
            let _ = writeln!(o, "  note: {n}");
        }
        if explain {
            for s in &p.explain {
                let _ = writeln!(o, "    {s}");
            }
        }
    }
    if explain {
        let _ = writeln!(o);
        let _ = writeln!(o, "model arithmetic:");
        for s in &report.explain {
            let _ = writeln!(o, "  {s}");
        }
    }
    let _ = writeln!(o);
    let _ = writeln!(o, "assumptions:");
    for a in &report.assumptions {
        let _ = writeln!(o, "  - {a}");
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_ref_prefers_a_hub_id() {
        let p = Path::new("model/config.json");
        assert_eq!(
            model_ref(p, Some("meta-llama/Llama-3.1-8B"), "x"),
            "meta-llama/Llama-3.1-8B"
        );
        assert_eq!(model_ref(p, None, "x"), "./model");
        let cache = Path::new(
            "/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-7B/snapshots/abc/config.json",
        );
        assert_eq!(model_ref(cache, Some("/tmp/ckpt"), "x"), "Qwen/Qwen2.5-7B");
        assert_eq!(
            model_ref(p, Some("/workspace/ckpt"), "x"),
            "/workspace/ckpt"
        );
        assert!(!is_hub_id("/abs/path") && !is_hub_id("a/b/c") && !is_hub_id("model"));
    }
    use clap::Parser;

    /// How the integrator will mount the arguments.
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        plan: PlanArgs,
    }

    #[test]
    fn arguments_parse_as_the_cli_will_take_them() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from([
            "oomdoctor",
            "--model",
            "config.json",
            "--gpu",
            "2xh100",
            "--engine",
            "llama.cpp",
            "--context",
            "8192",
            "--concurrency",
            "4",
            "--kv-cache-dtype",
            "q8_0",
            "--tensor-parallel",
            "2",
            "--format",
            "json",
            "--explain",
        ])
        .unwrap();
        let a = cli.plan;
        assert_eq!(a.engine, Some(Engine::Llamacpp));
        assert_eq!(
            (a.context, a.concurrency, a.tensor_parallel),
            (Some(8192), Some(4), Some(2))
        );
        assert_eq!(a.format, PlanFormat::Json);
        assert!(a.explain);
        let req = PlanRequest::from_args(&a).unwrap();
        assert_eq!(req.kv_cache_dtype, Some(CacheDtype::Q8_0));
        for name in [
            "vllm",
            "sglang",
            "tgi",
            "llamacpp",
            "llama-cpp",
            "ollama",
            "transformers",
            "hf",
        ] {
            assert!(
                Cli::try_parse_from(["o", "--model", "m", "--gpu", "h100", "--engine", name])
                    .is_ok(),
                "{name}"
            );
        }
        assert!(
            Cli::try_parse_from(["o", "--model", "m", "--gpu", "h100", "--engine", "exllama"])
                .is_err()
        );
        assert!(Cli::try_parse_from(["o", "--gpu", "h100"]).is_err());
    }
}
