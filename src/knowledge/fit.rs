//! How each engine sizes its memory, what fits, and the settings that make it fit.
//!
//! Every engine reduces to one inequality, evaluated per GPU for tensor-parallel engines
//! (vLLM, SGLang, TGI) and over all GPUs for layer-splitting ones (llama.cpp, Ollama,
//! transformers' `device_map`):
//!
//! ```text
//! KV needed  = concurrency × KV(context rounded up to the engine's block)
//! KV budget  = engine budget − weights − overheads
//! fits       ⇔ KV needed ≤ KV budget
//! ```
//!
//! The engine budget (`ENGINE-MESSAGES.md` §2.8, §3.4, §4.4, §5, §6):
//! - **vLLM**: `total × gpu_memory_utilization` (default 0.9, a fraction of *total* memory);
//!   overheads = activation peak of the profiling run + non-torch memory + CUDA graphs
//!   (counted in the budget since v0.21). The CUDA context sits outside the budget, in the
//!   remaining `1 − util`, which caps the utilisation that can start.
//! - **SGLang**: `total × mem_fraction_static − CUDA context` holds weights + KV; the rest,
//!   `total × (1 − fraction)`, must hold activations and CUDA graphs.
//! - **TGI**: `(total × cuda_memory_fraction − context − weights − prefill activations −
//!   graphs) × 0.95` (`TGI_WIGGLE_ROOM`).
//! - **llama.cpp / Ollama**: all of the memory; overheads = CUDA context + compute buffer
//!   (+ Ollama's reserve); KV of `n_ctx = context × parallel` tokens on the layers offloaded;
//!   when the weights do not fit, `-ngl` layers that do.
//! - **transformers**: all of the memory; overheads = CUDA context + the prefill of the
//!   whole batch at once (no chunking, no paging).
//!
//! When the workload as asked does not fit, the settings are searched in the order that
//! costs the least: a higher memory fraction (when the engine has one and it is safe), a
//! quantised KV cache, fewer GPU layers (llama.cpp/Ollama, only when the weights do not fit),
//! and finally the longest context that fits. Every number is recomputed from the same
//! inequality, so a recommended setting fits by construction.

use serde::Serialize;

use crate::facts::evidence::Value;

use super::gpus::GpuSpec;
use super::memory::{
    self, CacheDtype, Dtype, Estimate, GIB, KvSpec, MIB, MlaLayout, Quant, Step, Trace,
    WeightFormat, fmt_bytes, fmt_gib, fmt_gib_f, fmt_int, token_phrase,
};
use crate::ingest::model::geometry::{Geometry, ParamCount};

/// The engines `oomdoctor plan` knows: a typed handle for the arithmetic below. Their ids
/// and names are [`crate::facts::engine`]'s, defined once there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Engine {
    Vllm,
    Sglang,
    Tgi,
    Llamacpp,
    Ollama,
    Transformers,
}

impl Engine {
    pub const ALL: [Engine; 6] = [
        Engine::Vllm,
        Engine::Sglang,
        Engine::Tgi,
        Engine::Llamacpp,
        Engine::Ollama,
        Engine::Transformers,
    ];

    /// The engine's stable id, as the diagnosis names it.
    pub fn id(self) -> &'static str {
        use crate::facts::engine::id;
        match self {
            Engine::Vllm => id::VLLM,
            Engine::Sglang => id::SGLANG,
            Engine::Tgi => id::TGI,
            Engine::Llamacpp => id::LLAMACPP,
            Engine::Ollama => id::OLLAMA,
            Engine::Transformers => id::TRANSFORMERS,
        }
    }

    /// Its name on the command line and in `plan`'s JSON.
    pub fn name(self) -> &'static str {
        crate::facts::engine::def(self.id()).map_or(self.id(), |d| d.cli_name)
    }

    /// Whether the engine shards each layer across GPUs (tensor parallel) rather than
    /// placing whole layers on each GPU.
    fn tensor_parallel(self) -> bool {
        matches!(self, Engine::Vllm | Engine::Sglang | Engine::Tgi)
    }

    /// The quantised KV type the engine offers when the cache is short.
    fn quantized_kv(self) -> Option<CacheDtype> {
        match self {
            Engine::Vllm => Some(CacheDtype::Fp8E4m3),
            Engine::Sglang | Engine::Tgi => Some(CacheDtype::Fp8E5m2),
            Engine::Llamacpp | Engine::Ollama => Some(CacheDtype::Q8_0),
            Engine::Transformers => None,
        }
    }

    /// The engine's name for a KV dtype, or `None` when it cannot store it.
    fn kv_dtype_knob(self, d: CacheDtype) -> Option<&'static str> {
        use CacheDtype as C;
        match (self, d) {
            (Engine::Vllm, C::Fp8E4m3) => Some("fp8"),
            (Engine::Vllm, C::Fp8E5m2) => Some("fp8_e5m2"),
            (Engine::Sglang, C::Fp8E4m3) => Some("fp8_e4m3"),
            (Engine::Sglang, C::Fp8E5m2) => Some("fp8_e5m2"),
            (Engine::Tgi, C::Fp8E4m3) => Some("fp8_e4m3fn"),
            (Engine::Tgi, C::Fp8E5m2) => Some("fp8_e5m2"),
            (
                Engine::Vllm | Engine::Sglang | Engine::Tgi | Engine::Transformers,
                C::F16 | C::Bf16 | C::F32,
            ) => Some("auto"),
            (Engine::Llamacpp, C::F32) => Some("f32"),
            (Engine::Llamacpp | Engine::Ollama, C::F16) => Some("f16"),
            (Engine::Llamacpp, C::Bf16) => Some("bf16"),
            (Engine::Ollama, C::Bf16) => Some("f16"),
            (Engine::Llamacpp | Engine::Ollama, C::Q8_0 | C::Q4_0) => Some(d.name()),
            (Engine::Llamacpp, C::Q4_1 | C::Q5_0 | C::Q5_1 | C::Iq4Nl) => Some(d.name()),
            _ => None,
        }
    }
}

impl clap::ValueEnum for Engine {
    fn value_variants<'a>() -> &'a [Self] {
        &Engine::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        let aliases = crate::facts::engine::def(self.id()).map_or(&[][..], |d| d.cli_aliases);
        Some(clap::builder::PossibleValue::new(self.name()).aliases(aliases.iter().copied()))
    }
}

impl Serialize for Engine {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// Fit outcome of one engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FitStatus {
    /// Fits with room to spare beyond the uncertainty of the estimates.
    Fits,
    /// Fits with the central estimates, but not with the high ones.
    Tight,
    /// Runs only with some layers in host memory (llama.cpp/Ollama `-ngl`).
    PartialOffload,
    DoesNotFit,
}

/// Knob → value, in a meaningful order; serialised as a JSON object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Settings(pub Vec<(String, Value)>);

impl Settings {
    fn set(&mut self, knob: &str, v: impl Into<Value>) {
        self.0.retain(|(k, _)| k != knob);
        self.0.push((knob.to_string(), v.into()));
    }
    /// The value of a knob.
    pub fn get(&self, knob: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == knob).map(|(_, v)| v)
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for Settings {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// The configuration a plan recommends, with its own numbers.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Recommendation {
    /// Whether this configuration fits entirely on the GPU(s).
    pub fits: bool,
    /// It fits with the central estimates but not with every overhead at its high end.
    pub tight: bool,
    pub context_tokens: u64,
    pub concurrency: u64,
    pub kv_cache_dtype: String,
    /// `gpu_memory_utilization` / `mem_fraction_static` / `cuda_memory_fraction`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_fraction: Option<f64>,
    /// Layers on the GPU (llama.cpp `-ngl`), when not all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_layers: Option<u64>,
    pub kv_needed_bytes: u64,
    pub kv_budget_bytes: i64,
    pub headroom_bytes: i64,
    /// What differs from the request, in words.
    pub changes: Vec<String>,
}

/// The plan for one engine.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EnginePlan {
    pub engine: Engine,
    /// Whether the workload fits as asked (context × concurrency, cache dtype, defaults).
    pub fits: bool,
    pub status: FitStatus,
    /// One sentence.
    pub verdict: String,
    /// `per-gpu` for tensor-parallel engines, `all-gpus` for layer-splitting ones.
    pub memory_scope: &'static str,
    /// GPUs the engine uses.
    pub gpus: u32,
    pub context_tokens: u64,
    pub concurrency: u64,
    pub kv_cache_dtype: String,
    pub kv_cache_bytes_per_token: u64,
    /// Memory the engine allows itself (in `memory_scope`).
    pub budget_bytes: u64,
    pub weights_bytes: u64,
    pub overheads: Vec<Estimate>,
    /// Budget left for the KV cache: what vLLM logs as "Available KV cache memory".
    pub kv_budget_bytes: i64,
    pub kv_needed_bytes: u64,
    /// Tokens the KV budget holds, rounded as the engine rounds (what it would log).
    pub kv_capacity_tokens: u64,
    /// KV budget minus KV needed (negative: the deficit).
    pub headroom_bytes: i64,
    /// Longest context per sequence that fits at the asked concurrency and cache dtype.
    pub max_context_tokens: u64,
    /// Sequences of the asked context that fit at once.
    pub max_concurrency: u64,
    pub recommended: Recommendation,
    pub settings: Settings,
    /// A copy-paste command line with the settings.
    pub command: String,
    /// Other ways to make it fit, with their numbers.
    pub alternatives: Vec<String>,
    pub notes: Vec<String>,
    pub explain: Vec<Step>,
}

/// What is planned: the model, the hardware and the workload.
#[derive(Clone, Debug)]
pub struct Workload<'a> {
    pub geometry: &'a Geometry,
    /// The weight format in effect (after `--dtype` / `--quantization`).
    pub format: WeightFormat,
    pub params: ParamCount,
    /// Bytes of all the weights in that format.
    pub weights_bytes: u64,
    pub gpu: &'a GpuSpec,
    /// `--tensor-parallel`, when given.
    pub tensor_parallel: Option<u32>,
    /// `--context` (None: each engine's default).
    pub context: Option<u64>,
    /// `--concurrency` (None: one sequence, and no concurrency knob is set).
    pub concurrency: Option<u64>,
    /// `--kv-cache-dtype` (None: the model's dtype).
    pub kv_cache_dtype: Option<CacheDtype>,
    /// How commands name the model (HF id or path).
    pub model_ref: String,
    /// Whether `--quantization` asked for online quantisation of a 16-bit checkpoint.
    pub online_quant: Option<String>,
}

/// Context limit when the model does not state one.
const UNKNOWN_MAX_CONTEXT: u64 = 1 << 22;
/// Most sequences searched for.
const MAX_CONCURRENCY: u64 = 1 << 20;
/// vLLM's KV block size.
const VLLM_BLOCK: u64 = 16;
/// llama.cpp pads its context to 256 cells.
const LLAMACPP_PAD: u64 = 256;
/// llama.cpp's and Ollama's default micro-batch (`-ub` / `num_batch`).
const N_UBATCH: u64 = 512;
/// llama.cpp's `-fa auto` turns flash attention on for CUDA builds (2025+), which keeps the
/// compute buffer independent of the context.
const LLAMACPP_FLASH_ATTN: bool = true;
/// Ollama keeps this much free per GPU (the `minimum` of its `gpu memory` log line).
const OLLAMA_RESERVE: u64 = 457 * MIB;
/// TGI keeps 5 % of the free memory out of the KV cache (`TGI_WIGGLE_ROOM` = 0.95).
const TGI_WIGGLE: f64 = 0.95;
/// TGI ≥ 3 prefill chunk budget assumed for `--max-batch-prefill-tokens`.
const TGI_PREFILL: u64 = 4096;

/// Evaluation of one configuration.
#[derive(Clone, Debug)]
struct Eval {
    budget: u64,
    weights: u64,
    overheads: Vec<Estimate>,
    kv_budget: i64,
    kv_needed: u64,
}

impl Eval {
    fn fits(&self) -> bool {
        self.kv_budget >= 0 && i128::from(self.kv_needed) <= i128::from(self.kv_budget)
    }
    fn headroom(&self) -> i64 {
        (i128::from(self.kv_budget) - i128::from(self.kv_needed))
            .clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }
    /// How much the overheads could exceed their central estimates together: the root of
    /// the summed squares of each one's excess, as they are independent.
    fn uncertainty(&self) -> u64 {
        let sq: f64 = self
            .overheads
            .iter()
            .map(|o| (o.high_bytes.saturating_sub(o.bytes) as f64).powi(2))
            .sum();
        sq.sqrt() as u64
    }
}

/// A configuration to evaluate.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Config {
    context: u64,
    concurrency: u64,
    dtype: CacheDtype,
    fraction: f64,
    /// Layers on the GPU (None: all, output layer included).
    gpu_layers: Option<u64>,
}

/// Weights split the way llama.cpp offloads them.
#[derive(Clone, Debug)]
struct LayerWeights {
    per_layer: Vec<u64>,
    /// The output layer (LM head, or the tied embeddings copied to the GPU).
    output: u64,
    /// Token embeddings: llama.cpp keeps them in host memory.
    token_embd: u64,
    /// Norms, projector and the like (with the output layer).
    other: u64,
}

fn layer_weights(w: &Workload) -> LayerWeights {
    let g = w.geometry;
    if let Some(t) = &g.gguf {
        return LayerWeights {
            per_layer: t.layer_bytes.clone(),
            output: if t.output_bytes > 0 {
                t.output_bytes
            } else {
                t.token_embd_bytes
            },
            token_embd: t.token_embd_bytes,
            other: t.other_bytes,
        };
    }
    // From a config: embeddings and head at the format's rate, the rest spread evenly.
    let part = |p: ParamCount| memory::weights_bytes(&p, &w.format, None, &mut Trace::new());
    let p = &w.params;
    let embd = part(ParamCount {
        embedding: p.embedding,
        ..ParamCount::default()
    });
    let head = part(ParamCount {
        lm_head: p.lm_head,
        ..ParamCount::default()
    });
    let output = if g.tie_word_embeddings { embd } else { head };
    let rest = w.weights_bytes.saturating_sub(embd).saturating_sub(head);
    // Spread evenly, the remainder one byte each over the first layers, so the parts add
    // up to the whole exactly.
    let n = g.layers.len().max(1) as u64;
    let per_layer = (0..g.layers.len() as u64)
        .map(|i| rest / n + u64::from(i < rest % n))
        .collect();
    LayerWeights {
        per_layer,
        output,
        token_embd: embd,
        other: 0,
    }
}

/// KV bytes of the layers from `first` on (the ones llama.cpp offloads with `-ngl`).
fn kv_bytes_from_layer(g: &Geometry, spec: &KvSpec, tokens: u64, first: usize) -> u64 {
    if first == 0 {
        return memory::kv_bytes_for_sequence(g, spec, tokens);
    }
    let mut tail = g.clone();
    tail.layers = g.layers.get(first..).map(<[_]>::to_vec).unwrap_or_default();
    memory::kv_bytes_for_sequence(&tail, spec, tokens)
}

struct Fitter<'a> {
    w: &'a Workload<'a>,
    engine: Engine,
    /// GPUs used and the memory in scope (one GPU for TP engines, all for the others).
    gpus: u32,
    tp: u32,
    mem: u64,
    weights: u64,
    layers: LayerWeights,
    spec: KvSpec,
    block: u64,
    /// (default, safe maximum) memory fraction.
    fraction: Option<(f64, f64)>,
    cap: u64,
    default_context: u64,
    notes: Vec<String>,
}

fn sglang_default_fraction(tp: u32) -> f64 {
    // SGLang's server_args defaults by tensor-parallel size (0.4.x).
    match tp {
        16.. => 0.79,
        8..=15 => 0.81,
        4..=7 => 0.85,
        2..=3 => 0.87,
        _ => 0.88,
    }
}

impl<'a> Fitter<'a> {
    fn new(engine: Engine, w: &'a Workload<'a>) -> Self {
        let g = w.geometry;
        let mut notes = Vec::new();
        let count = w.gpu.count.max(1);
        let (gpus, tp) = if engine.tensor_parallel() {
            let tp = w.tensor_parallel.unwrap_or(count).max(1);
            if g.num_attention_heads > 0 && g.num_attention_heads % u64::from(tp) != 0 {
                notes.push(format!(
                    "{} attention heads are not divisible by tensor parallel size {tp}: {} will refuse it",
                    g.num_attention_heads,
                    engine.name()
                ));
            }
            if tp < count {
                notes.push(format!(
                    "{count} GPUs given, tensor parallel {tp}: the plan covers one {tp}-GPU replica"
                ));
            }
            (tp, tp)
        } else {
            if count > 1 {
                notes.push(format!("{} splits whole layers across the {count} GPUs: memory is pooled, each GPU pays its own overheads", engine.name()));
            }
            if w.tensor_parallel.is_some_and(|t| t > 1) {
                notes.push(format!(
                    "{} does not use tensor parallelism: --tensor-parallel ignored",
                    engine.name()
                ));
            }
            (count, 1)
        };
        let mem = if engine.tensor_parallel() {
            w.gpu.memory_bytes
        } else {
            w.gpu.memory_bytes.saturating_mul(u64::from(gpus))
        };
        let weights = if engine.tensor_parallel() {
            w.weights_bytes.div_ceil(u64::from(tp))
        } else {
            w.weights_bytes
        };

        let mla = match engine {
            Engine::Transformers | Engine::Tgi => MlaLayout::Expanded,
            Engine::Llamacpp | Engine::Ollama
                if g.notes
                    .iter()
                    .any(|n| n.contains("predates llama.cpp's latent KV")) =>
            {
                MlaLayout::Expanded
            }
            _ => MlaLayout::Compressed,
        };
        // Engines that keep only the window on sliding layers (vLLM V1's hybrid allocator,
        // llama.cpp's iSWA cache, transformers' sliding caches) vs those we count at full
        // length for lack of evidence they do not (an upper bound).
        let cap_sliding = !matches!(engine, Engine::Sglang | Engine::Tgi);
        if !cap_sliding && g.sliding_layer_count() > 0 {
            notes.push(format!(
                "{} sliding-window layers counted at full length for {} (upper bound)",
                g.sliding_layer_count(),
                engine.name()
            ));
        }
        let spec = KvSpec {
            dtype: CacheDtype::from_activation(g.activation_dtype()),
            mla,
            cap_sliding,
            tensor_parallel: if engine.tensor_parallel() { tp } else { 1 },
        };
        let block = match engine {
            Engine::Vllm | Engine::Tgi => VLLM_BLOCK,
            Engine::Llamacpp | Engine::Ollama => LLAMACPP_PAD,
            _ => 1,
        };
        let fraction = match engine {
            Engine::Vllm => {
                // The CUDA context lives outside the budget, so util × total must leave it
                // room (vLLM refuses to start when free memory < util × total).
                let ctx_high = memory::cuda_context_estimate().high_bytes + 256 * MIB;
                let safe = ((w.gpu.memory_bytes.saturating_sub(ctx_high)) as f64
                    / w.gpu.memory_bytes.max(1) as f64
                    * 100.0)
                    .floor()
                    / 100.0;
                Some((0.9, safe.clamp(0.5, 0.95)))
            }
            Engine::Sglang => {
                let f = sglang_default_fraction(tp);
                Some((f, f.max(0.93)))
            }
            Engine::Tgi => Some((1.0, 1.0)),
            _ => None,
        };
        let model_max = g.max_context();
        let cap = model_max.unwrap_or(UNKNOWN_MAX_CONTEXT);
        if model_max.is_none() {
            notes.push(format!(
                "the model does not state its maximum context: searched up to {}",
                fmt_int(cap)
            ));
        }
        let default_context = match engine {
            Engine::Llamacpp | Engine::Ollama => 4096.min(cap),
            _ => model_max.unwrap_or(4096),
        };
        Fitter {
            w,
            engine,
            gpus,
            tp,
            mem,
            weights,
            layers: layer_weights(w),
            spec,
            block,
            fraction,
            cap,
            default_context,
            notes,
        }
    }

    fn act_bytes(&self) -> u64 {
        u64::from(self.w.geometry.activation_dtype().elem().bytes)
    }

    fn large_gpu(&self) -> bool {
        self.w.gpu.memory_bytes >= 70 * GIB
    }

    /// Weights on the GPU(s) with `gpu_layers` offloaded (llama.cpp's `-ngl`: the last
    /// layers first; `n_layer + 1` adds the output layer).
    fn weights_on_gpu(&self, gpu_layers: Option<u64>) -> u64 {
        if !matches!(self.engine, Engine::Llamacpp | Engine::Ollama) {
            return self.weights;
        }
        let l = &self.layers;
        let n = l.per_layer.len() as u64;
        let ngl = gpu_layers.unwrap_or(n + 1).min(n + 1);
        let first = (n - ngl.min(n)) as usize;
        let layers = l
            .per_layer
            .get(first..)
            .map(|s| s.iter().fold(0u64, |a, b| a.saturating_add(*b)))
            .unwrap_or(0);
        let output = if ngl > n {
            l.output.saturating_add(l.other)
        } else {
            0
        };
        layers.saturating_add(output)
    }

    fn eval(&self, c: Config) -> Eval {
        let g = self.w.geometry;
        let spec = KvSpec {
            dtype: c.dtype,
            ..self.spec
        };
        let ctx_rounded = c.context.div_ceil(self.block).saturating_mul(self.block);
        let n = g.layers.len();
        let first_gpu_layer = match c.gpu_layers {
            Some(ngl) if (ngl as usize) < n => n - ngl as usize,
            _ => 0,
        };
        let kv_needed = kv_bytes_from_layer(g, &spec, ctx_rounded, first_gpu_layer)
            .saturating_mul(c.concurrency);
        let per_gpu = |e: Estimate, k: u32| -> Estimate {
            if k <= 1 {
                return e;
            }
            let k64 = u64::from(k);
            Estimate {
                what: format!("{} × {k} GPUs", e.what),
                bytes: e.bytes.saturating_mul(k64),
                low_bytes: e.low_bytes.saturating_mul(k64),
                high_bytes: e.high_bytes.saturating_mul(k64),
                basis: e.basis,
            }
        };
        let act = self.act_bytes();
        let tp = u64::from(self.tp);
        let (budget, overheads, wiggle) = match self.engine {
            Engine::Vllm => {
                let (t, s) = if self.large_gpu() {
                    (8192, 1024)
                } else {
                    (2048, 256)
                };
                let o = vec![
                    memory::vllm_activation_estimate(g, t, s, act, tp),
                    memory::non_torch_estimate(self.tp),
                    memory::cuda_graph_estimate(g),
                ];
                (memory::fraction_of(self.mem, c.fraction), o, 1.0)
            }
            Engine::Sglang => (
                memory::fraction_of(self.mem, c.fraction),
                vec![memory::cuda_context_estimate()],
                1.0,
            ),
            Engine::Tgi => {
                let p = TGI_PREFILL.min(c.context.max(1));
                let o = vec![
                    memory::cuda_context_estimate(),
                    memory::prefill_activation_estimate(g, p, 1, act, tp),
                    memory::cuda_graph_estimate(g),
                ];
                (memory::fraction_of(self.mem, c.fraction), o, TGI_WIGGLE)
            }
            Engine::Llamacpp | Engine::Ollama => {
                let n_ctx = ctx_rounded.saturating_mul(c.concurrency);
                let mut o = vec![
                    per_gpu(memory::cuda_context_estimate(), self.gpus),
                    per_gpu(
                        memory::llamacpp_compute_estimate(g, N_UBATCH, n_ctx, LLAMACPP_FLASH_ATTN),
                        self.gpus,
                    ),
                ];
                if self.engine == Engine::Ollama {
                    o.push(per_gpu(
                        Estimate {
                            what: "Ollama reserve".to_string(),
                            bytes: OLLAMA_RESERVE,
                            low_bytes: OLLAMA_RESERVE,
                            high_bytes: OLLAMA_RESERVE,
                            basis: "memory Ollama keeps free per GPU (its `minimum`)".to_string(),
                        },
                        self.gpus,
                    ));
                }
                (self.mem, o, 1.0)
            }
            Engine::Transformers => {
                let tokens = c.context.saturating_mul(c.concurrency);
                let o = vec![
                    per_gpu(memory::cuda_context_estimate(), self.gpus),
                    memory::prefill_activation_estimate(g, tokens, c.concurrency, act, 1),
                ];
                (self.mem, o, 1.0)
            }
        };
        let weights = self.weights_on_gpu(c.gpu_layers);
        let spent: u64 = overheads
            .iter()
            .map(|o| o.bytes)
            .fold(weights, u64::saturating_add);
        let raw = i128::from(budget) - i128::from(spent);
        let kv_budget = if wiggle < 1.0 && raw > 0 {
            (raw as f64 * wiggle) as i128
        } else {
            raw
        };
        Eval {
            budget,
            weights,
            overheads,
            kv_budget: kv_budget.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64,
            kv_needed,
        }
    }

    /// For SGLang the part outside the fraction must hold activations and graphs.
    fn sglang_reserve_ok(&self, fraction: f64) -> (bool, u64) {
        let g = self.w.geometry;
        let t = if self.large_gpu() { 8192 } else { 2048 };
        let act =
            memory::prefill_activation_estimate(g, t, 1, self.act_bytes(), u64::from(self.tp));
        let need = act
            .bytes
            .saturating_add(memory::cuda_graph_estimate(g).bytes)
            .saturating_add(256 * MIB);
        let reserve = self
            .mem
            .saturating_sub(memory::fraction_of(self.mem, fraction));
        (reserve >= need, need)
    }

    fn max_context(&self, c: Config) -> u64 {
        memory::largest_fitting(self.cap, |ctx| {
            ctx == 0 || self.eval(Config { context: ctx, ..c }).fits()
        })
    }

    fn max_concurrency(&self, c: Config) -> u64 {
        memory::largest_fitting(MAX_CONCURRENCY, |n| {
            n == 0
                || self
                    .eval(Config {
                        concurrency: n,
                        ..c
                    })
                    .fits()
        })
    }

    /// Tokens the KV budget holds, as the engine would report them.
    fn capacity(&self, c: Config, e: &Eval) -> u64 {
        let budget = u64::try_from(e.kv_budget).unwrap_or(0);
        let spec = KvSpec {
            dtype: c.dtype,
            ..self.spec
        };
        let g = self.w.geometry;
        let capped = spec.cap_sliding && g.sliding_layer_count() > 0;
        if capped || c.gpu_layers.is_some() {
            let max = memory::max_context_for_budget(
                g,
                &spec,
                budget,
                1,
                self.cap.max(1).saturating_mul(64),
            );
            return max / self.block * self.block;
        }
        let bpt = memory::kv_bytes_per_token(g, &spec, &mut Trace::new());
        memory::paged_capacity_tokens(budget, bpt, self.block)
    }

    /// The smallest fraction in hundredths, from the default up to the safe maximum, at
    /// which `c` fits.
    fn min_fraction(&self, c: Config) -> Option<f64> {
        let (lo, hi) = self.fraction?;
        let (lo_h, hi_h) = ((lo * 100.0).round() as u64, (hi * 100.0).round() as u64);
        (lo_h..=hi_h)
            .map(|h| h as f64 / 100.0)
            .find(|f| self.eval(Config { fraction: *f, ..c }).fits())
    }

    /// The most GPU layers (0..=n+1) with which `c` fits.
    fn max_gpu_layers(&self, c: Config) -> Option<u64> {
        let n = self.w.geometry.layers.len() as u64;
        let fits = |ngl: u64| {
            self.eval(Config {
                gpu_layers: Some(ngl),
                ..c
            })
            .fits()
        };
        if !fits(0) {
            return None;
        }
        Some(memory::largest_fitting(n + 1, |ngl| ngl == 0 || fits(ngl)))
    }
}

/// Plans one engine.
pub fn plan_engine(engine: Engine, w: &Workload) -> EnginePlan {
    let mut f = Fitter::new(engine, w);
    let g = w.geometry;
    let mut notes = std::mem::take(&mut f.notes);
    let mut alternatives = Vec::new();
    let model_dtype = f.spec.dtype;
    let asked_dtype = match w.kv_cache_dtype {
        Some(d) if engine.kv_dtype_knob(d).is_some() => d,
        Some(d) => {
            // Use the engine's nearest type of the same size.
            let sub = if d.elem().per_elem() <= 1.1 {
                engine.quantized_kv().unwrap_or(model_dtype)
            } else {
                model_dtype
            };
            notes.push(format!(
                "{} cannot store a {} KV cache: planned with {}",
                engine.name(),
                d.name(),
                sub.name()
            ));
            sub
        }
        None => model_dtype,
    };
    let asked = Config {
        // 0 means the model's own maximum, as llama.cpp's `-c 0` does.
        context: match w.context {
            None => f.default_context,
            Some(0) => g.max_context().unwrap_or(f.default_context),
            Some(c) => c,
        },
        concurrency: w.concurrency.unwrap_or(1).max(1),
        dtype: asked_dtype,
        fraction: f.fraction.map(|(d, _)| d).unwrap_or(1.0),
        gpu_layers: None,
    };
    if w.context.is_none() {
        notes.push(match engine {
            Engine::Llamacpp => "no --context: llama.cpp's default -c 4096 (-c 0 would use the model's full context)".to_string(),
            Engine::Ollama => "no --context: Ollama's default num_ctx 4096 (OLLAMA_CONTEXT_LENGTH)".to_string(),
            _ => format!("no --context: {}'s default, the model's maximum ({})", engine.name(), fmt_int(asked.context)),
        });
    }
    if let Some(max) = g.max_context().filter(|m| asked.context > *m) {
        notes.push(format!(
            "{} tokens is beyond the model's maximum context of {}",
            fmt_int(asked.context),
            fmt_int(max)
        ));
    }
    let e = f.eval(asked);
    let fits = e.fits();
    let max_ctx = f.max_context(asked);
    let max_conc = f.max_concurrency(asked);
    let capacity = f.capacity(asked, &e);
    let bpt = memory::kv_bytes_per_token(
        g,
        &KvSpec {
            dtype: asked.dtype,
            ..f.spec
        },
        &mut Trace::new(),
    );

    // Search the cheapest change that makes the request fit.
    let weights_fit = f
        .eval(Config {
            context: 0,
            ..asked
        })
        .fits();
    let mut chosen = asked;
    let mut changes: Vec<String> = Vec::new();
    let mut partial = false;
    if !fits {
        let quant = engine
            .quantized_kv()
            .filter(|_| asked.dtype.is_full_precision());
        let found = f
            .min_fraction(asked)
            .map(|fr| {
                (
                    Config {
                        fraction: fr,
                        ..asked
                    },
                    None,
                )
            })
            .or_else(|| {
                let d = quant?;
                let q = Config { dtype: d, ..asked };
                f.min_fraction(q)
                    .or(f.eval(q).fits().then_some(q.fraction))
                    .map(|fr| (Config { fraction: fr, ..q }, Some(d)))
            });
        match found {
            Some((c, qd)) => {
                if f.fraction.is_some_and(|(d, _)| c.fraction > d) {
                    changes.push(format!("memory fraction raised to {:.2}", c.fraction));
                }
                if let Some(d) = qd {
                    changes.push(format!("{} KV cache", d.name()));
                }
                chosen = c;
            }
            None if !weights_fit && matches!(engine, Engine::Llamacpp | Engine::Ollama) => {
                if let Some(ngl) = f.max_gpu_layers(asked) {
                    chosen = Config {
                        gpu_layers: Some(ngl),
                        ..asked
                    };
                    partial = true;
                    changes.push(format!("{ngl} of {} layers on the GPU", g.layers.len() + 1));
                }
            }
            None => {
                // Shorten the context: at the safe maximum fraction, rounded to a setting.
                let top = Config {
                    fraction: f.fraction.map(|(_, m)| m).unwrap_or(1.0),
                    ..asked
                };
                let c = memory::round_context(f.max_context(top));
                if c > 0 {
                    let fr = f
                        .min_fraction(Config { context: c, ..top })
                        .unwrap_or(top.fraction);
                    chosen = Config {
                        context: c,
                        fraction: fr,
                        ..top
                    };
                    changes.push(format!(
                        "context {} instead of {}",
                        fmt_int(c),
                        fmt_int(asked.context)
                    ));
                    if f.fraction.is_some_and(|(d, _)| fr > d) {
                        changes.push(format!("memory fraction raised to {fr:.2}"));
                    }
                    if let Some(d) = quant {
                        let qc = memory::round_context(f.max_context(Config { dtype: d, ..top }));
                        if qc > c {
                            alternatives.push(format!(
                                "a {} KV cache holds {} tokens per sequence instead",
                                d.name(),
                                fmt_int(qc)
                            ));
                        }
                    }
                }
            }
        }
    }
    let ce = f.eval(chosen);
    let within_uncertainty = |ev: &Eval| {
        ev.fits() && ev.headroom() < i64::try_from(ev.uncertainty()).unwrap_or(i64::MAX)
    };
    let mut reserve_short = false;
    if engine == Engine::Sglang {
        let (ok, need) = f.sglang_reserve_ok(chosen.fraction);
        if !ok {
            reserve_short = true;
            notes.push(format!(
                "the {:.0} % outside --mem-fraction-static is less than the ≈{} that activations and CUDA graphs need: expect OOMs at graph capture; lower the fraction or --cuda-graph-max-bs",
                (1.0 - chosen.fraction) * 100.0,
                fmt_gib(need)
            ));
        }
    }
    let status = if fits {
        if within_uncertainty(&e) || reserve_short {
            FitStatus::Tight
        } else {
            FitStatus::Fits
        }
    } else if partial {
        FitStatus::PartialOffload
    } else {
        FitStatus::DoesNotFit
    };
    let rec_fits = ce.fits() && !partial;
    if !weights_fit {
        weights_alternatives(&f, asked, &mut alternatives);
    }
    if fits && asked.dtype.is_full_precision() {
        if let Some(d) = engine.quantized_kv() {
            let q = memory::round_context(f.max_context(Config { dtype: d, ..asked }));
            if q > max_ctx {
                alternatives.push(format!(
                    "a {} KV cache would hold {} tokens per sequence",
                    d.name(),
                    fmt_int(q)
                ));
            }
        }
    }

    if matches!(engine, Engine::Llamacpp | Engine::Ollama) {
        // What stays in host RAM: the token embeddings always, plus layers not offloaded.
        let on_gpu = f.weights_on_gpu(chosen.gpu_layers);
        let host =
            f.w.weights_bytes
                .saturating_sub(on_gpu)
                .max(f.layers.token_embd);
        let which = if chosen.gpu_layers.is_some() {
            " and the layers not offloaded"
        } else {
            ""
        };
        notes.push(format!(
            "{} of weights stay in host memory (token embeddings{which})",
            fmt_gib(host)
        ));
    }
    let mut settings = settings_for(&f, chosen, w, rec_fits);
    let mut command = command_for(engine, &settings, w);
    let mut recommended = Recommendation {
        fits: rec_fits,
        tight: rec_fits && (within_uncertainty(&ce) || reserve_short),
        context_tokens: chosen.context,
        concurrency: chosen.concurrency,
        kv_cache_dtype: chosen.dtype.name().to_string(),
        memory_fraction: f.fraction.map(|_| chosen.fraction),
        gpu_layers: chosen.gpu_layers,
        kv_needed_bytes: ce.kv_needed,
        kv_budget_bytes: ce.kv_budget,
        headroom_bytes: ce.headroom(),
        changes: changes.clone(),
    };
    // Weights too big for the GPU: quantise them at load time when the engine can.
    if !recommended.fits && !weights_fit {
        if let Some((q, p)) = online_quant_plan(engine, w) {
            let knob = online_quant_knob(engine, q).unwrap_or(q);
            let flag = match engine {
                Engine::Tgi => format!("--quantize {knob}"),
                Engine::Transformers => format!("quantization_config={knob}"),
                _ => format!("--quantization {knob}"),
            };
            let mut ch = vec![format!("{q} weights ({flag})")];
            ch.extend(p.recommended.changes.iter().cloned());
            changes = ch.clone();
            recommended = Recommendation {
                changes: ch,
                ..p.recommended.clone()
            };
            settings = p.settings.clone();
            command = p.command.clone();
        }
    }
    let headroom = e.headroom();
    let verdict = verdict(asked, &e, fits, status, &changes, max_ctx);
    let trace = explain(&f, asked, &e, capacity, max_ctx, max_conc, chosen, &ce);

    EnginePlan {
        engine,
        fits,
        status,
        verdict,
        memory_scope: if engine.tensor_parallel() || f.gpus == 1 {
            "per-gpu"
        } else {
            "all-gpus"
        },
        gpus: f.gpus,
        context_tokens: asked.context,
        concurrency: asked.concurrency,
        kv_cache_dtype: asked.dtype.name().to_string(),
        kv_cache_bytes_per_token: bpt,
        budget_bytes: e.budget,
        weights_bytes: e.weights,
        overheads: e.overheads.clone(),
        kv_budget_bytes: e.kv_budget,
        kv_needed_bytes: e.kv_needed,
        kv_capacity_tokens: capacity.min(u64::MAX / 2),
        headroom_bytes: headroom,
        max_context_tokens: max_ctx,
        max_concurrency: max_conc,
        recommended,
        settings,
        command,
        alternatives,
        notes,
        explain: trace.steps().to_vec(),
    }
}

/// The plan with the weights quantised at load time (vLLM/SGLang/TGI fp8; transformers
/// bitsandbytes int8, then nf4), when the checkpoint is 16-bit and that makes it fit.
fn online_quant_plan(engine: Engine, w: &Workload) -> Option<(&'static str, EnginePlan)> {
    let sixteen_bit = matches!(
        w.format,
        WeightFormat::Dense {
            dtype: Dtype::F16 | Dtype::Bf16 | Dtype::F32
        }
    );
    if !sixteen_bit || w.online_quant.is_some() || w.geometry.gguf.is_some() {
        return None;
    }
    let options: &[&'static str] = match engine {
        Engine::Vllm | Engine::Sglang | Engine::Tgi => &["fp8"],
        Engine::Transformers => &["bnb-int8", "bnb-nf4"],
        Engine::Llamacpp | Engine::Ollama => &[],
    };
    options.iter().find_map(|q| {
        let quant = match *q {
            "fp8" => Quant::fp8(None),
            "bnb-int8" => Quant::bnb_8bit(),
            _ => Quant::bnb_4bit("nf4", false),
        };
        let format = WeightFormat::Quantized {
            quant,
            rest: w.geometry.activation_dtype(),
        };
        let weights_bytes = memory::weights_bytes(&w.params, &format, None, &mut Trace::new());
        let w2 = Workload {
            format,
            weights_bytes,
            online_quant: Some((*q).to_string()),
            ..w.clone()
        };
        let p = plan_engine(engine, &w2);
        p.recommended.fits.then_some((*q, p))
    })
}

/// Ways out when the weights alone do not fit, each with its number: load-time fp8
/// (vLLM/SGLang/TGI), a smaller GGUF type (llama.cpp/Ollama), bitsandbytes
/// (transformers), vLLM's CPU offload, and the tensor-parallel size that would fit.
fn weights_alternatives(f: &Fitter, asked: Config, out: &mut Vec<String>) {
    let w = f.w;
    let top = Config {
        fraction: f.fraction.map(|(_, m)| m).unwrap_or(1.0),
        ..asked
    };
    let bare = f.eval(Config { context: 0, ..top });
    let deficit = if bare.kv_budget < 0 {
        bare.kv_budget.unsigned_abs()
    } else {
        0
    };
    out.push(format!(
        "the weights ({}) and overheads exceed the budget by {} before any KV cache",
        fmt_gib(f.weights),
        fmt_gib(deficit)
    ));
    let per_rank = |bytes: u64| {
        if f.engine.tensor_parallel() {
            bytes.div_ceil(u64::from(f.tp))
        } else {
            bytes
        }
    };
    let with = |quant: Quant| {
        let format = WeightFormat::Quantized {
            quant,
            rest: w.geometry.activation_dtype(),
        };
        per_rank(memory::weights_bytes(
            &w.params,
            &format,
            None,
            &mut Trace::new(),
        ))
    };
    let sixteen_bit = matches!(
        w.format,
        WeightFormat::Dense {
            dtype: Dtype::F16 | Dtype::Bf16 | Dtype::F32
        }
    );
    match f.engine {
        Engine::Vllm | Engine::Sglang | Engine::Tgi if sixteen_bit => {
            let flag = if f.engine == Engine::Tgi {
                "--quantize fp8"
            } else {
                "--quantization fp8"
            };
            out.push(format!(
                "fp8 weights would take {} ({flag}; Ada/Hopper or newer for fp8 compute)",
                fmt_gib(with(Quant::fp8(None)))
            ));
        }
        Engine::Transformers if sixteen_bit => {
            out.push(format!(
                "4-bit nf4 weights (bitsandbytes) would take {}",
                fmt_gib(with(Quant::bnb_4bit("nf4", false)))
            ));
        }
        Engine::Llamacpp | Engine::Ollama => {
            for t in ["q4_k_m", "q3_k_m"] {
                if let Some(q) = Quant::gguf_type(t) {
                    let b = with(q);
                    if b < w.weights_bytes {
                        out.push(format!(
                            "a {} file would take about {}",
                            t.to_ascii_uppercase(),
                            fmt_gib(b)
                        ));
                        break;
                    }
                }
            }
        }
        _ => {}
    }
    if f.engine == Engine::Vllm {
        // Offload enough weights for the asked context to fit (slow: weights cross PCIe).
        let e = f.eval(top);
        let short = u64::try_from(i128::from(e.kv_needed) - i128::from(e.kv_budget)).unwrap_or(0);
        let gib = short.div_ceil(GIB);
        if gib > 0 {
            out.push(format!(
                "--cpu-offload-gb {gib} keeps that much of the weights in host memory (much slower)"
            ));
        }
    }
    if f.engine.tensor_parallel() {
        let heads = w.geometry.num_attention_heads;
        let overheads = bare
            .overheads
            .iter()
            .fold(0u64, |a, o| a.saturating_add(o.bytes));
        for tp in [2u32, 4, 8, 16] {
            if tp <= f.tp || (heads > 0 && heads % u64::from(tp) != 0) {
                continue;
            }
            let per_gpu = w.weights_bytes.div_ceil(u64::from(tp));
            if per_gpu.saturating_add(overheads) < memory::fraction_of(f.mem, top.fraction) {
                out.push(format!(
                    "tensor parallel over {tp} such GPUs puts {} of weights on each",
                    fmt_gib(per_gpu)
                ));
                break;
            }
        }
    }
}

fn settings_for(f: &Fitter, c: Config, w: &Workload, fits: bool) -> Settings {
    let mut s = Settings::default();
    let engine = f.engine;
    let kv = engine.kv_dtype_knob(c.dtype).unwrap_or("auto");
    let quantized_kv = !c.dtype.is_full_precision();
    let conc_asked = w.concurrency.is_some();
    let f32_checkpoint = matches!(w.format, WeightFormat::Dense { dtype: Dtype::F32 });
    match engine {
        Engine::Vllm => {
            s.set("--max-model-len", c.context);
            s.set("--gpu-memory-utilization", Value::Num(c.fraction));
            if quantized_kv {
                s.set("--kv-cache-dtype", kv);
            }
            if conc_asked {
                s.set("--max-num-seqs", c.concurrency);
            }
            if f.tp > 1 {
                s.set("--tensor-parallel-size", f.tp);
            }
            if let Some(q) = w
                .online_quant
                .as_deref()
                .and_then(|q| online_quant_knob(engine, q))
            {
                s.set("--quantization", q);
            }
            if f32_checkpoint {
                s.set("--dtype", "bfloat16");
            }
        }
        Engine::Sglang => {
            s.set("--context-length", c.context);
            s.set("--mem-fraction-static", Value::Num(c.fraction));
            if conc_asked {
                s.set("--max-running-requests", c.concurrency);
            }
            if quantized_kv {
                s.set("--kv-cache-dtype", kv);
            }
            if f.tp > 1 {
                s.set("--tp-size", f.tp);
            }
            if let Some(q) = w
                .online_quant
                .as_deref()
                .and_then(|q| online_quant_knob(engine, q))
            {
                s.set("--quantization", q);
            }
        }
        Engine::Tgi => {
            s.set("--max-input-tokens", c.context.saturating_sub(1).max(1));
            s.set("--max-total-tokens", c.context);
            s.set(
                "--max-batch-prefill-tokens",
                TGI_PREFILL.min(c.context.max(1)),
            );
            if quantized_kv {
                s.set("--kv-cache-dtype", kv);
            }
            if f.tp > 1 {
                s.set("--num-shard", f.tp);
            }
            if let Some(q) = w
                .online_quant
                .as_deref()
                .and_then(|q| online_quant_knob(engine, q))
            {
                s.set("--quantize", q);
            }
        }
        Engine::Llamacpp => {
            s.set("-c", c.context.saturating_mul(c.concurrency));
            if c.concurrency > 1 || conc_asked {
                s.set("-np", c.concurrency);
            }
            let ngl = match c.gpu_layers {
                Some(n) => n,
                None => f.w.geometry.layers.len() as u64 + 1,
            };
            s.set("-ngl", ngl);
            if quantized_kv {
                s.set("--cache-type-k", kv);
                s.set("--cache-type-v", kv);
                s.set("-fa", "on");
            }
        }
        Engine::Ollama => {
            s.set("num_ctx", c.context);
            s.set("OLLAMA_NUM_PARALLEL", c.concurrency);
            if quantized_kv {
                s.set("OLLAMA_KV_CACHE_TYPE", kv);
                s.set("OLLAMA_FLASH_ATTENTION", "1");
            }
            if let Some(n) = c.gpu_layers {
                s.set("num_gpu", n);
            }
        }
        Engine::Transformers => {
            let dtype = match w.geometry.activation_dtype() {
                Dtype::Bf16 => "torch.bfloat16",
                _ if f32_checkpoint => "torch.bfloat16",
                _ => "torch.float16",
            };
            s.set("torch_dtype", dtype);
            s.set(
                "device_map",
                if f.gpus > 1 || !fits {
                    "auto"
                } else {
                    "cuda:0"
                },
            );
            if let Some(q) = w
                .online_quant
                .as_deref()
                .and_then(|q| online_quant_knob(engine, q))
            {
                s.set("quantization_config", q);
            }
            s.set("attn_implementation", "sdpa");
            s.set("batch_size", c.concurrency);
            s.set("max_length", c.context);
        }
    }
    s
}

/// The engine's spelling of an online (load-time) quantisation of a 16-bit checkpoint:
/// `fp8`, `bnb-nf4` or `bnb-int8` in oomdoctor's terms. None where the engine has none.
pub fn online_quant_knob(engine: Engine, q: &str) -> Option<&'static str> {
    Some(match (engine, q) {
        (Engine::Vllm | Engine::Sglang | Engine::Tgi, "fp8") => "fp8",
        (Engine::Vllm | Engine::Sglang, "bnb-nf4") => "bitsandbytes",
        (Engine::Tgi, "bnb-nf4") => "bitsandbytes-nf4",
        (Engine::Tgi, "bnb-int8") => "bitsandbytes",
        (Engine::Transformers, "bnb-nf4") => {
            "BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=\"nf4\")"
        }
        (Engine::Transformers, "bnb-int8") => "BitsAndBytesConfig(load_in_8bit=True)",
        (Engine::Transformers, "fp8") => "FineGrainedFP8Config()",
        _ => return None,
    })
}

fn flag_value(v: &Value) -> String {
    match v {
        Value::Num(n) if n.fract() != 0.0 => format!("{n:.2}"),
        other => other.to_string(),
    }
}

/// The file llama.cpp would load: the GGUF itself, or the conversion of an HF checkpoint
/// (`Llama-3.1-8B-BF16.gguf`).
fn gguf_ref(w: &Workload) -> String {
    if w.geometry.gguf.is_some() {
        return w.model_ref.clone();
    }
    let base = w
        .model_ref
        .rsplit('/')
        .find(|s| !s.is_empty())
        .unwrap_or("model");
    let ty = match &w.format {
        WeightFormat::Dense { dtype } => match dtype {
            Dtype::F32 => "F32".to_string(),
            Dtype::F16 => "F16".to_string(),
            _ => "BF16".to_string(),
        },
        WeightFormat::Quantized { quant, .. } if quant.whole_model => {
            quant.method.to_ascii_uppercase()
        }
        WeightFormat::Quantized { quant, .. } if quant.bits >= 8 => "Q8_0".to_string(),
        WeightFormat::Quantized { .. } => "Q4_K_M".to_string(),
        WeightFormat::Gguf { file_type } => file_type.clone(),
    };
    format!("{base}-{ty}.gguf")
}

fn command_for(engine: Engine, s: &Settings, w: &Workload) -> String {
    let flags = |skip: &[&str]| -> String {
        s.0.iter()
            .filter(|(k, _)| !skip.contains(&k.as_str()))
            .map(|(k, v)| format!("{k} {}", flag_value(v)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let m = &w.model_ref;
    match engine {
        Engine::Vllm => format!("vllm serve {m} {}", flags(&[])),
        Engine::Sglang => format!(
            "python -m sglang.launch_server --model-path {m} {}",
            flags(&[])
        ),
        Engine::Tgi => format!("text-generation-launcher --model-id {m} {}", flags(&[])),
        Engine::Llamacpp => format!("llama-server -m {} {}", gguf_ref(w), flags(&[])),
        Engine::Ollama => {
            let env: Vec<String> =
                s.0.iter()
                    .filter(|(k, _)| k.starts_with("OLLAMA_"))
                    .map(|(k, v)| format!("{k}={}", flag_value(v)))
                    .collect();
            let ctx = s.get("num_ctx").map(flag_value).unwrap_or_default();
            let mut cmd = format!("OLLAMA_CONTEXT_LENGTH={ctx} {} ollama serve", env.join(" "));
            if let Some(n) = s.get("num_gpu") {
                cmd.push_str(&format!(
                    "  # and PARAMETER num_gpu {} in the Modelfile",
                    flag_value(n)
                ));
            }
            cmd
        }
        Engine::Transformers => {
            let get = |k: &str| s.get(k).map(|v| v.to_string()).unwrap_or_default();
            let quant = s
                .get("quantization_config")
                .map(|q| format!(", quantization_config={q}"))
                .unwrap_or_default();
            format!(
                "AutoModelForCausalLM.from_pretrained(\"{m}\", torch_dtype={}, device_map=\"{}\", attn_implementation=\"sdpa\"{quant})  # batch {} × max_length {}",
                get("torch_dtype"),
                get("device_map"),
                get("batch_size"),
                get("max_length")
            )
        }
    }
}

fn verdict(
    asked: Config,
    e: &Eval,
    fits: bool,
    status: FitStatus,
    changes: &[String],
    max_ctx: u64,
) -> String {
    let what = token_phrase(asked.context, asked.concurrency);
    let kv = fmt_gib(e.kv_needed);
    let budget = fmt_gib_f(e.kv_budget as f64);
    if fits {
        let tight = if status == FitStatus::Tight {
            ", but within the uncertainty of the overhead estimates"
        } else {
            ""
        };
        return format!("fits{tight}: {what} need {kv} of KV cache and {budget} is left for it");
    }
    let fix = match (status, changes.is_empty()) {
        (_, true) => String::new(),
        (FitStatus::PartialOffload, false) => format!("; runs with {}", changes.join(", ")),
        _ => format!("; fits with {}", changes.join(" and ")),
    };
    if e.kv_budget < 0 || max_ctx == 0 {
        // Name what eats the memory: the weights, or an overhead that grows with the
        // workload (transformers' prefill of the whole batch).
        let biggest = e
            .overheads
            .iter()
            .max_by_key(|o| o.bytes)
            .filter(|o| o.bytes > e.weights / 4);
        let cause = match biggest {
            Some(o) => format!(
                "the weights ({}) and the {} ({})",
                fmt_gib(e.weights),
                o.what,
                fmt_gib(o.bytes)
            ),
            None => format!("the weights ({}) and overheads", fmt_gib(e.weights)),
        };
        return format!("does not fit: {cause} leave no memory for the KV cache ({budget}){fix}");
    }
    format!("does not fit: {what} need {kv} of KV cache and {budget} is left for it{fix}")
}

#[allow(clippy::too_many_arguments)]
fn explain(
    f: &Fitter,
    asked: Config,
    e: &Eval,
    capacity: u64,
    max_ctx: u64,
    max_conc: u64,
    chosen: Config,
    ce: &Eval,
) -> Trace {
    let mut t = Trace::new();
    let g = f.w.geometry;
    let scope = if f.engine.tensor_parallel() && f.tp > 1 {
        " per GPU"
    } else {
        ""
    };
    let total = fmt_gib(f.mem);
    match f.engine {
        Engine::Vllm | Engine::Sglang | Engine::Tgi => {
            let knob = match f.engine {
                Engine::Vllm => "gpu_memory_utilization",
                Engine::Sglang => "mem_fraction_static",
                _ => "cuda_memory_fraction",
            };
            t.add(
                format!("budget{scope}"),
                format!("{total} × {knob} {:.2}", asked.fraction),
                fmt_bytes(e.budget),
            );
        }
        _ => t.add(
            format!("budget{scope}"),
            "all of the GPU memory".to_string(),
            fmt_bytes(e.budget),
        ),
    }
    if f.engine.tensor_parallel() && f.tp > 1 {
        t.add(
            "weights per GPU",
            format!("{} / {} GPUs", fmt_gib(f.w.weights_bytes), f.tp),
            fmt_bytes(e.weights),
        );
    } else {
        t.add("weights on the GPU", String::new(), fmt_bytes(e.weights));
    }
    for o in &e.overheads {
        o.explain(&mut t);
    }
    let wiggle = if f.engine == Engine::Tgi {
        " × 0.95 (TGI_WIGGLE_ROOM)"
    } else {
        ""
    };
    let mut parts = vec![format!("budget − weights")];
    parts.extend(e.overheads.iter().map(|o| format!("− {}", o.what)));
    t.add(
        "KV budget",
        format!("({}){wiggle}", parts.join(" ")),
        fmt_gib_f(e.kv_budget as f64),
    );
    let spec = KvSpec {
        dtype: asked.dtype,
        ..f.spec
    };
    memory::kv_bytes_per_token(g, &spec, &mut t);
    let rounded = asked.context.div_ceil(f.block).saturating_mul(f.block);
    let mut sub = Trace::new();
    memory::kv_bytes_explained(g, &spec, rounded, asked.concurrency, &mut sub);
    for s in sub.steps() {
        t.add(
            format!(
                "KV needed for {}",
                token_phrase(asked.context, asked.concurrency)
            ),
            s.formula.clone(),
            s.result.clone(),
        );
    }
    let unit = if f.block > 1 {
        format!(" in whole {}-token blocks", f.block)
    } else {
        String::new()
    };
    let windows_capped = f.spec.cap_sliding && g.sliding_layer_count() > 0;
    let how = if windows_capped || asked.gpu_layers.is_some() {
        format!("longest single sequence whose KV fits the KV budget{unit}")
    } else {
        format!("KV budget / KV per token{unit}")
    };
    t.add(
        "KV capacity",
        how,
        if capacity >= u64::MAX / 4 {
            "unlimited (no per-token KV)".to_string()
        } else {
            format!("{} tokens", fmt_int(capacity))
        },
    );
    t.add(
        "headroom",
        "KV budget − KV needed".to_string(),
        fmt_gib_f(e.headroom() as f64),
    );
    t.add(
        format!("max context at {} sequence(s)", asked.concurrency),
        "longest context whose KV fits the budget".to_string(),
        format!("{} tokens", fmt_int(max_ctx)),
    );
    t.add(
        format!("max sequences of {} tokens", fmt_int(asked.context)),
        "sequences whose KV fits the budget".to_string(),
        fmt_int(max_conc),
    );
    if chosen != asked {
        t.add(
            "recommended",
            format!(
                "{}, {} KV{}{}",
                token_phrase(chosen.context, chosen.concurrency),
                chosen.dtype.name(),
                f.fraction
                    .map(|_| format!(", fraction {:.2}", chosen.fraction))
                    .unwrap_or_default(),
                chosen
                    .gpu_layers
                    .map(|n| format!(", {n} GPU layers"))
                    .unwrap_or_default()
            ),
            format!(
                "KV {} of {} budget, headroom {}",
                fmt_gib(ce.kv_needed),
                fmt_gib_f(ce.kv_budget as f64),
                fmt_gib_f(ce.headroom() as f64)
            ),
        );
    }
    t
}
