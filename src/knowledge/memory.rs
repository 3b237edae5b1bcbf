//! Memory arithmetic of a workload: exact where the layout is known, documented estimates
//! with their uncertainty where it is not.
//!
//! Exact:
//! - **bytes per element** of every weight and KV-cache type, including ggml's block formats
//!   (`q8_0` stores 32 elements in 34 bytes: 32 int8 + one f16 scale);
//! - **KV bytes per token** = Σ over layers that keep a KV cache of
//!   `kv_heads × (k_head_dim + v_head_dim) × bytes per element`, which for a uniform
//!   model is the familiar `2 × layers × kv_heads × head_dim × bytes`; MLA models store one
//!   latent row of `kv_lora_rank + qk_rope_head_dim` elements per layer instead;
//!   sliding-window layers stop growing at the window;
//! - **token capacities** of a KV budget, rounded the way each engine rounds (vLLM counts
//!   whole 16-token blocks).
//!
//! Estimated (each an [`Estimate`] with a low and a high bound, and the reason for the
//! number): the CUDA context, activation peaks, CUDA-graph pools, llama.cpp compute buffers.
//!
//! Every public function documents its formula, and the ones a user may want to audit
//! record their steps in a [`Trace`], which `oomdoctor plan --explain` prints.

use serde::Serialize;

use crate::ingest::model::geometry::{Attention, Geometry, ParamCount};

/// 1 KiB, 1 MiB, 1 GiB in bytes.
pub const KIB: u64 = 1 << 10;
pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;

// ---------------------------------------------------------------------------------------
// Number formatting for explanations
// ---------------------------------------------------------------------------------------

/// `131072` → `131,072`.
pub fn fmt_int(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Signed [`fmt_int`].
pub fn fmt_signed(n: i64) -> String {
    if n < 0 {
        format!("-{}", fmt_int(n.unsigned_abs()))
    } else {
        fmt_int(n as u64)
    }
}

/// Bytes as GiB with up to three decimals, never fewer than two: `3.125 GiB`, `8.00 GiB`,
/// `2.30 GiB`. Three decimals keep exact binary fractions exact (3,355,443,200 bytes is
/// 3.125 GiB, not the 3.12 that two decimals would round it to).
pub fn fmt_gib(bytes: u64) -> String {
    fmt_gib_f(bytes as f64)
}

/// [`fmt_gib`] for signed or fractional values (headroom, deficits).
pub fn fmt_gib_f(bytes: f64) -> String {
    if !bytes.is_finite() {
        return "? GiB".to_string();
    }
    let v = bytes / GIB as f64;
    let mut s = format!("{v:.3}");
    // Trim a trailing zero only when two decimals remain exact.
    if s.ends_with('0') {
        s.pop();
    }
    if s == "-0.00" {
        s = "0.00".to_string();
    }
    format!("{s} GiB")
}

/// `3,355,443,200 bytes (3.125 GiB)`; small values without the GiB part.
pub fn fmt_bytes(bytes: u64) -> String {
    if bytes < MIB {
        format!("{} bytes", fmt_int(bytes))
    } else {
        format!("{} bytes ({})", fmt_int(bytes), fmt_gib(bytes))
    }
}

// ---------------------------------------------------------------------------------------
// Explain trace
// ---------------------------------------------------------------------------------------

/// One step of arithmetic: `KV per token = 2 × 32 layers × 8 KV heads × 128 × 2 bytes =
/// 131,072 bytes`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Step {
    /// What is computed (`KV per token`).
    pub what: String,
    /// The formula with the numbers put in.
    pub formula: String,
    /// The result, with its unit.
    pub result: String,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.formula.is_empty() {
            write!(f, "{} = {}", self.what, self.result)
        } else {
            write!(f, "{} = {} = {}", self.what, self.formula, self.result)
        }
    }
}

/// The recorded arithmetic of a computation, in order. Cheap enough to keep always on: a
/// plan records a few dozen steps.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Trace {
    steps: Vec<Step>,
}

impl Trace {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a step.
    pub fn add(
        &mut self,
        what: impl Into<String>,
        formula: impl Into<String>,
        result: impl Into<String>,
    ) {
        self.steps.push(Step {
            what: what.into(),
            formula: formula.into(),
            result: result.into(),
        });
    }

    /// Appends another trace's steps, each `what` prefixed (`vllm: `).
    pub fn extend_prefixed(&mut self, prefix: &str, other: Trace) {
        for mut s in other.steps {
            s.what = format!("{prefix}{}", s.what);
            self.steps.push(s);
        }
    }

    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }
}

// ---------------------------------------------------------------------------------------
// Element types
// ---------------------------------------------------------------------------------------

/// The storage of `block` elements in `bytes` bytes. Plain types have `block == 1`; ggml's
/// quantised types store a block of 32 (or 256 for k-quants) elements with their scales.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ElemSize {
    pub block: u32,
    pub bytes: u32,
}

impl ElemSize {
    pub const fn new(block: u32, bytes: u32) -> Self {
        ElemSize { block, bytes }
    }

    /// Bytes of a row of `elems` elements: `ceil(elems / block) × bytes`. ggml requires
    /// rows to be a whole number of blocks, so for valid shapes this is exact.
    pub fn row_bytes(self, elems: u64) -> u64 {
        let block = u64::from(self.block.max(1));
        elems.div_ceil(block).saturating_mul(u64::from(self.bytes))
    }

    /// Average bytes per element (`34 / 32 = 1.0625` for q8_0).
    pub fn per_elem(self) -> f64 {
        f64::from(self.bytes) / f64::from(self.block.max(1))
    }

    /// `2 bytes` or `34/32 bytes` for explanations.
    pub fn describe(self) -> String {
        if self.block == 1 {
            format!("{} bytes", self.bytes)
        } else {
            format!("{}/{} bytes", self.bytes, self.block)
        }
    }
}

/// A dense weight or activation dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    F32,
    F16,
    Bf16,
    /// float8 (e4m3 or e5m2): one byte.
    F8,
    Int8,
    /// 4-bit integers packed two per byte (scales not included; see [`Quant`]).
    Int4,
}

impl Dtype {
    /// Parses the spellings of HF (`bfloat16`, `torch.float16`), vLLM (`half`, `auto` is not
    /// a dtype) and llama.cpp (`f16`).
    pub fn parse(s: &str) -> Option<Dtype> {
        let t = s.trim().to_ascii_lowercase();
        let t = t.strip_prefix("torch.").unwrap_or(&t);
        Some(match t {
            "float32" | "fp32" | "f32" | "float" => Dtype::F32,
            "float16" | "fp16" | "f16" | "half" => Dtype::F16,
            "bfloat16" | "bf16" => Dtype::Bf16,
            "fp8" | "float8" | "f8" | "float8_e4m3fn" | "float8_e4m3" | "fp8_e4m3" | "e4m3"
            | "float8_e5m2" | "fp8_e5m2" | "e5m2" => Dtype::F8,
            "int8" | "i8" => Dtype::Int8,
            "int4" | "i4" => Dtype::Int4,
            _ => return None,
        })
    }

    /// Bytes per element; `Int4` is half a byte, so it is given as 1 byte per 2 elements.
    pub fn elem(self) -> ElemSize {
        match self {
            Dtype::F32 => ElemSize::new(1, 4),
            Dtype::F16 | Dtype::Bf16 => ElemSize::new(1, 2),
            Dtype::F8 | Dtype::Int8 => ElemSize::new(1, 1),
            Dtype::Int4 => ElemSize::new(2, 1),
        }
    }

    /// The name HF and PyTorch use.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "float32",
            Dtype::F16 => "float16",
            Dtype::Bf16 => "bfloat16",
            Dtype::F8 => "float8",
            Dtype::Int8 => "int8",
            Dtype::Int4 => "int4",
        }
    }

    /// The dtype activations and an `auto` KV cache use when weights are stored in `self`:
    /// engines compute in 16 bits (vLLM casts float32 checkpoints to 16 bits by default;
    /// 8- and 4-bit weights are dequantised to 16-bit activations).
    pub fn activation(self) -> Dtype {
        match self {
            Dtype::Bf16 => Dtype::Bf16,
            _ => Dtype::F16,
        }
    }
}

/// The element type of a KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheDtype {
    F32,
    F16,
    Bf16,
    Fp8E4m3,
    Fp8E5m2,
    Q8_0,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Iq4Nl,
}

impl CacheDtype {
    /// Parses every engine's spelling: vLLM `fp8`/`fp8_e4m3`/`fp8_e5m2`, TGI `fp8_e4m3fn`,
    /// llama.cpp and Ollama `f16`/`q8_0`/`q4_0`/…. Returns `None` for `auto` (the model's
    /// dtype) and for unknown names.
    pub fn parse(s: &str) -> Option<CacheDtype> {
        let t = s.trim().to_ascii_lowercase().replace('-', "_");
        Some(match t.as_str() {
            "f32" | "fp32" | "float32" => CacheDtype::F32,
            "f16" | "fp16" | "float16" | "half" => CacheDtype::F16,
            "bf16" | "bfloat16" => CacheDtype::Bf16,
            "fp8" | "fp8_e4m3" | "fp8_e4m3fn" | "float8_e4m3fn" | "e4m3" | "fp8_inc" => {
                CacheDtype::Fp8E4m3
            }
            "fp8_e5m2" | "float8_e5m2" | "e5m2" => CacheDtype::Fp8E5m2,
            "q8_0" => CacheDtype::Q8_0,
            "q4_0" => CacheDtype::Q4_0,
            "q4_1" => CacheDtype::Q4_1,
            "q5_0" => CacheDtype::Q5_0,
            "q5_1" => CacheDtype::Q5_1,
            "iq4_nl" => CacheDtype::Iq4Nl,
            _ => return None,
        })
    }

    /// The `auto` cache dtype of a model computing in `activation`.
    pub fn from_activation(activation: Dtype) -> CacheDtype {
        match activation {
            Dtype::F32 => CacheDtype::F32,
            Dtype::Bf16 => CacheDtype::Bf16,
            _ => CacheDtype::F16,
        }
    }

    /// Storage per element. ggml blocks (`ggml-common.h`): q8_0 = 32 × int8 + f16 scale =
    /// 34 bytes; q4_0 = 16 bytes of nibbles + f16 scale = 18; q4_1 adds an f16 minimum (20);
    /// q5_0 = 18 + 4 bytes of high bits (22); q5_1 = 24; iq4_nl = 18.
    pub fn elem(self) -> ElemSize {
        match self {
            CacheDtype::F32 => ElemSize::new(1, 4),
            CacheDtype::F16 | CacheDtype::Bf16 => ElemSize::new(1, 2),
            CacheDtype::Fp8E4m3 | CacheDtype::Fp8E5m2 => ElemSize::new(1, 1),
            CacheDtype::Q8_0 => ElemSize::new(32, 34),
            CacheDtype::Q4_0 | CacheDtype::Iq4Nl => ElemSize::new(32, 18),
            CacheDtype::Q4_1 => ElemSize::new(32, 20),
            CacheDtype::Q5_0 => ElemSize::new(32, 22),
            CacheDtype::Q5_1 => ElemSize::new(32, 24),
        }
    }

    /// Canonical lower-case name (llama.cpp spelling for ggml types, vLLM's for fp8).
    pub fn name(self) -> &'static str {
        match self {
            CacheDtype::F32 => "f32",
            CacheDtype::F16 => "f16",
            CacheDtype::Bf16 => "bf16",
            CacheDtype::Fp8E4m3 => "fp8_e4m3",
            CacheDtype::Fp8E5m2 => "fp8_e5m2",
            CacheDtype::Q8_0 => "q8_0",
            CacheDtype::Q4_0 => "q4_0",
            CacheDtype::Q4_1 => "q4_1",
            CacheDtype::Q5_0 => "q5_0",
            CacheDtype::Q5_1 => "q5_1",
            CacheDtype::Iq4Nl => "iq4_nl",
        }
    }

    /// Whether this is one of ggml's block-quantised types (llama.cpp needs flash attention
    /// for a quantised V cache).
    pub fn is_ggml_quant(self) -> bool {
        self.elem().block > 1
    }

    /// Whether it is 16 bits or wider (an unquantised cache).
    pub fn is_full_precision(self) -> bool {
        matches!(self, CacheDtype::F32 | CacheDtype::F16 | CacheDtype::Bf16)
    }
}

// ---------------------------------------------------------------------------------------
// Weight formats
// ---------------------------------------------------------------------------------------

/// How a checkpoint's quantised linear layers are stored.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Quant {
    /// `gptq`, `awq`, `bitsandbytes-nf4`, `fp8`, `compressed-tensors`, `mxfp4`, `q4_k_m`, ...
    pub method: String,
    /// Bits of each quantised weight.
    pub bits: u32,
    /// Elements sharing one scale (`None`: per channel or per tensor).
    pub group_size: Option<u64>,
    /// Average bits per quantised weight including scales and zero points.
    pub bits_per_weight: f64,
    /// How `bits_per_weight` was obtained.
    pub basis: String,
    /// Attention projections are left unquantised (gpt-oss's `modules_to_not_convert`).
    pub skip_attention: bool,
    /// Only the routed experts are quantised (MXFP4 checkpoints).
    pub experts_only: bool,
    /// The figure applies to every tensor, embeddings included (a GGUF file type: its mix
    /// of block types already covers embeddings and output).
    pub whole_model: bool,
}

impl Quant {
    /// GPTQ and AWQ (`qweight` int32-packed, `scales` f16 and `qzeros` packed at `bits`, one
    /// each per group): `bits + (16 + bits) / group_size` bits per weight. GPTQ's `g_idx`
    /// (one int32 per input row) adds `32 / out_features` bits, under 0.01, and is ignored.
    pub fn gptq_like(method: &str, bits: u32, group_size: Option<u64>) -> Quant {
        let g = group_size.filter(|g| *g > 0);
        let bpw = match g {
            Some(g) => f64::from(bits) + (16.0 + f64::from(bits)) / g as f64,
            None => f64::from(bits),
        };
        let basis = match g {
            Some(g) => format!("{bits} bits + (16-bit scale + {bits}-bit zero) per {g} weights"),
            None => format!("{bits} bits, per-channel scales (negligible)"),
        };
        Quant {
            method: method.to_string(),
            bits,
            group_size: g,
            bits_per_weight: bpw,
            basis,
            skip_attention: false,
            experts_only: false,
            whole_model: false,
        }
    }

    /// bitsandbytes 4-bit (nf4/fp4): 4 bits + an fp32 absmax per 64 weights = 4.5 bits;
    /// with double quantisation the absmax is 8-bit plus an fp32 per 256 absmax values:
    /// `4 + 8/64 + 32/(64 × 256)` ≈ 4.127 bits.
    pub fn bnb_4bit(kind: &str, double_quant: bool) -> Quant {
        let (bpw, basis) = if double_quant {
            (
                4.0 + 8.0 / 64.0 + 32.0 / (64.0 * 256.0),
                "4 bits + 8-bit absmax per 64 + fp32 per 16,384 (double quant)",
            )
        } else {
            (4.0 + 32.0 / 64.0, "4 bits + fp32 absmax per 64")
        };
        Quant {
            method: format!("bitsandbytes-{kind}"),
            bits: 4,
            group_size: Some(64),
            bits_per_weight: bpw,
            basis: basis.to_string(),
            skip_attention: false,
            experts_only: false,
            whole_model: false,
        }
    }

    /// bitsandbytes LLM.int8(): int8 weights plus one fp32 scale per output row, which is
    /// `32 / in_features` bits (under 0.01): 8 bits.
    pub fn bnb_8bit() -> Quant {
        Quant {
            method: "bitsandbytes-int8".to_string(),
            bits: 8,
            group_size: None,
            bits_per_weight: 8.0,
            basis: "8 bits + fp32 scale per row (negligible)".to_string(),
            skip_attention: false,
            experts_only: false,
            whole_model: false,
        }
    }

    /// fp8 weights: 8 bits, plus an fp32 scale per `block` elements when block-scaled
    /// (DeepSeek-V3's 128 × 128 blocks add 32/16,384 bits).
    pub fn fp8(block_elems: Option<u64>) -> Quant {
        let (bpw, basis) = match block_elems.filter(|b| *b > 0) {
            Some(b) => (
                8.0 + 32.0 / b as f64,
                format!("8 bits + fp32 scale per {b} weights"),
            ),
            None => (
                8.0,
                "8 bits, per-tensor or per-channel scales (negligible)".to_string(),
            ),
        };
        Quant {
            method: "fp8".to_string(),
            bits: 8,
            group_size: block_elems,
            bits_per_weight: bpw,
            basis,
            skip_attention: false,
            experts_only: false,
            whole_model: false,
        }
    }

    /// MXFP4 (OCP microscaling): 32 fp4 values share an 8-bit exponent: 4 + 8/32 = 4.25 bits.
    pub fn mxfp4() -> Quant {
        Quant {
            method: "mxfp4".to_string(),
            bits: 4,
            group_size: Some(32),
            bits_per_weight: 4.25,
            basis: "4 bits + 8-bit shared exponent per 32 weights".to_string(),
            skip_attention: false,
            experts_only: false,
            whole_model: false,
        }
    }

    /// A llama.cpp file type applied to a whole model (`--quantization q4_k_m` on an HF
    /// config, to preview a GGUF conversion). Single-type files are exact (`q8_0` = 8.5
    /// bits); the `_K_S/_M/_L` mixes use bigger types for some tensors, so their figures are
    /// typical whole-file averages of Llama-family conversions, ±5 %.
    pub fn gguf_type(name: &str) -> Option<Quant> {
        let n = name.trim().to_ascii_lowercase();
        let (bpw, exact): (f64, bool) = match n.as_str() {
            "f32" => (32.0, true),
            "f16" | "bf16" => (16.0, true),
            "q8_0" => (8.5, true),
            "q6_k" => (6.5625, true),
            "q5_1" => (6.0, true),
            "q5_0" => (5.5, true),
            "q4_1" => (5.0, true),
            "q4_0" => (4.5, true),
            "iq4_nl" => (4.5, true),
            "iq4_xs" => (4.25, true),
            "q5_k_m" => (5.70, false),
            "q5_k_s" => (5.55, false),
            "q4_k_m" => (4.85, false),
            "q4_k_s" => (4.60, false),
            "q3_k_l" => (4.30, false),
            "q3_k_m" => (3.90, false),
            "q3_k_s" => (3.50, false),
            "iq3_m" => (3.70, false),
            "iq3_xxs" => (3.10, false),
            "q2_k" => (3.35, false),
            "iq2_m" => (2.70, false),
            "iq2_xs" => (2.40, false),
            "iq1_m" => (1.90, false),
            _ => return None,
        };
        let basis = if exact {
            format!("{n}: {bpw} bits per weight (block layout)")
        } else {
            format!("{n}: about {bpw} bits per weight (typical file average, ±5%)")
        };
        Some(Quant {
            method: n,
            bits: bpw.floor() as u32,
            group_size: None,
            bits_per_weight: bpw,
            basis,
            skip_attention: false,
            experts_only: false,
            whole_model: true,
        })
    }

    /// `awq 4-bit g128 (4.156 bits/weight)`.
    pub fn describe(&self) -> String {
        let g = self
            .group_size
            .map(|g| format!(" g{g}"))
            .unwrap_or_default();
        format!(
            "{} {}-bit{g} ({:.3} bits/weight)",
            self.method, self.bits, self.bits_per_weight
        )
    }
}

/// How the weights are stored, which decides their bytes.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum WeightFormat {
    /// Every parameter in one dtype.
    Dense { dtype: Dtype },
    /// Linear layers quantised; embeddings, norms and routers in `rest` (16-bit).
    Quantized { quant: Quant, rest: Dtype },
    /// A GGUF file: the bytes are the file's tensor bytes, summed from its header.
    Gguf { file_type: String },
}

impl WeightFormat {
    /// Short description: `bfloat16`, `awq 4-bit g128 (...)`, `gguf Q4_K_M`.
    pub fn describe(&self) -> String {
        match self {
            WeightFormat::Dense { dtype } => dtype.name().to_string(),
            WeightFormat::Quantized { quant, .. } => quant.describe(),
            WeightFormat::Gguf { file_type } => format!("gguf {file_type}"),
        }
    }
}

/// Bytes of the weights.
///
/// - dense: `params × bytes per element`;
/// - quantised: `quantised params × bits_per_weight / 8 + other params × 2` where the
///   quantised params are the linear layers (attention, MLP, experts) minus what the
///   checkpoint leaves unquantised, and the others (embeddings, lm_head, norms, routers,
///   vision tower) stay 16-bit;
/// - GGUF: the sum of the tensor sizes in the header (`exact_bytes`), which is exact.
pub fn weights_bytes(
    params: &ParamCount,
    format: &WeightFormat,
    exact_bytes: Option<u64>,
    trace: &mut Trace,
) -> u64 {
    match format {
        WeightFormat::Gguf { file_type } => {
            let b = exact_bytes.unwrap_or(0);
            trace.add(
                "weights",
                format!(
                    "sum of the GGUF tensor sizes ({file_type}, {} params)",
                    fmt_int(params.total())
                ),
                fmt_bytes(b),
            );
            b
        }
        WeightFormat::Dense { dtype } => {
            let e = dtype.elem();
            let b = e.row_bytes(params.total());
            trace.add(
                "weights",
                format!(
                    "{} params × {} ({})",
                    fmt_int(params.total()),
                    e.describe(),
                    dtype.name()
                ),
                fmt_bytes(b),
            );
            b
        }
        WeightFormat::Quantized { quant, rest } => {
            let q_params = if quant.whole_model {
                params.total()
            } else if quant.experts_only {
                params.experts
            } else {
                let attn = if quant.skip_attention {
                    0
                } else {
                    params.attention
                };
                [attn, params.mlp, params.experts, params.shared_experts]
                    .iter()
                    .fold(0u64, |a, b| a.saturating_add(*b))
            };
            let other = params.total().saturating_sub(q_params);
            let q_bytes = (q_params as f64 * quant.bits_per_weight / 8.0).ceil() as u64;
            let e = rest.elem();
            let o_bytes = e.row_bytes(other);
            let b = q_bytes.saturating_add(o_bytes);
            trace.add(
                "weights",
                format!(
                    "{} quantised params × {:.4} bits / 8 + {} other params × {}",
                    fmt_int(q_params),
                    quant.bits_per_weight,
                    fmt_int(other),
                    e.describe()
                ),
                fmt_bytes(b),
            );
            b
        }
    }
}

// ---------------------------------------------------------------------------------------
// KV cache
// ---------------------------------------------------------------------------------------

/// How an engine lays out an MLA model's cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MlaLayout {
    /// One latent row of `kv_lora_rank + qk_rope_head_dim` elements per layer and token
    /// (vLLM, SGLang, recent llama.cpp).
    Compressed,
    /// Decompressed per-head K (`qk_nope + qk_rope`) and V (`v_head_dim`), as HF
    /// transformers' cache stores them.
    Expanded,
}

/// What decides the KV layout besides the model: the cache dtype and the engine's habits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct KvSpec {
    pub dtype: CacheDtype,
    pub mla: MlaLayout,
    /// Whether sliding-window layers keep only the window (vLLM V1, llama.cpp, Ollama,
    /// transformers' sliding caches). When false every layer is counted at full length.
    pub cap_sliding: bool,
    /// Tensor-parallel ranks: each holds `kv_heads / tp` heads (at least one; heads are
    /// replicated when there are fewer KV heads than ranks). MLA latents are replicated.
    pub tensor_parallel: u32,
}

impl KvSpec {
    /// A spec with the usual habits (compressed MLA, windows capped, one GPU).
    pub fn new(dtype: CacheDtype) -> Self {
        KvSpec {
            dtype,
            mla: MlaLayout::Compressed,
            cap_sliding: true,
            tensor_parallel: 1,
        }
    }
}

/// Elements of K and of V one layer stores per token, on one rank.
fn layer_kv_elems(g: &Geometry, kv_heads: u64, spec: &KvSpec) -> (u64, u64) {
    let tp = u64::from(spec.tensor_parallel.max(1));
    if let Some(mla) = &g.mla {
        return match spec.mla {
            MlaLayout::Compressed => (mla.kv_lora_rank.saturating_add(mla.qk_rope_head_dim), 0),
            MlaLayout::Expanded => {
                let heads = g.num_attention_heads.div_ceil(tp).max(1);
                (
                    heads * (mla.qk_nope_head_dim + mla.qk_rope_head_dim),
                    heads * mla.v_head_dim,
                )
            }
        };
    }
    let heads = if kv_heads >= tp {
        kv_heads.div_ceil(tp)
    } else {
        kv_heads.min(1)
    };
    (
        heads.saturating_mul(g.head_dim),
        heads.saturating_mul(g.v_head_dim),
    )
}

/// Bytes one layer stores per token: `row(K) + row(V)` in the cache dtype.
fn layer_bytes_per_token(g: &Geometry, kv_heads: u64, spec: &KvSpec) -> u64 {
    let (k, v) = layer_kv_elems(g, kv_heads, spec);
    let e = spec.dtype.elem();
    e.row_bytes(k).saturating_add(e.row_bytes(v))
}

/// Groups of identical layers for compact explanations: (attention, kv_heads, count).
fn layer_groups(g: &Geometry) -> Vec<(Attention, u64, u64)> {
    let mut groups: Vec<(Attention, u64, u64)> = Vec::new();
    for l in &g.layers {
        match groups
            .iter_mut()
            .find(|(a, h, _)| *a == l.attention && *h == l.kv_heads)
        {
            Some(grp) => grp.2 += 1,
            None => groups.push((l.attention, l.kv_heads, 1)),
        }
    }
    groups
}

/// KV bytes per token for a context shorter than every window, i.e. the marginal cost of a
/// token on every layer that keeps a cache:
///
/// `Σ_layers kv_heads_l × (head_dim + v_head_dim) × bytes` — for a uniform model
/// `2 × layers × kv_heads × head_dim × bytes` (Llama-3.1-8B in bf16: 2 × 32 × 8 × 128 × 2 =
/// 131,072); for MLA `layers × (kv_lora_rank + qk_rope_head_dim) × bytes`. Layers without
/// a KV cache (linear attention, SSM) count zero.
pub fn kv_bytes_per_token(g: &Geometry, spec: &KvSpec, trace: &mut Trace) -> u64 {
    let mut total: u64 = 0;
    for l in &g.layers {
        if l.attention != Attention::NoCache {
            total = total.saturating_add(layer_bytes_per_token(g, l.kv_heads, spec));
        }
    }
    let e = spec.dtype.elem();
    let kv_layers = g.kv_layer_count();
    let tp = spec.tensor_parallel.max(1);
    let tp_note = if tp > 1 {
        format!(" on each of {tp} GPUs")
    } else {
        String::new()
    };
    let formula = if let (Some(mla), MlaLayout::Compressed) = (&g.mla, spec.mla) {
        format!(
            "{kv_layers} layers × ({} kv_lora_rank + {} qk_rope_head_dim) × {} (MLA latent, {})",
            mla.kv_lora_rank,
            mla.qk_rope_head_dim,
            e.describe(),
            spec.dtype.name()
        )
    } else if let Some(mla) = &g.mla {
        format!(
            "{kv_layers} layers × {} heads × ({} + {} K + {} V) × {} (MLA expanded, {})",
            g.num_attention_heads,
            mla.qk_nope_head_dim,
            mla.qk_rope_head_dim,
            mla.v_head_dim,
            e.describe(),
            spec.dtype.name()
        )
    } else {
        let groups: Vec<(Attention, u64, u64)> = layer_groups(g)
            .into_iter()
            .filter(|(a, _, _)| *a != Attention::NoCache)
            .collect();
        let dims = if g.head_dim == g.v_head_dim {
            format!("2 × {{}} × {}", g.head_dim)
        } else {
            format!("{{}} × ({} K + {} V)", g.head_dim, g.v_head_dim)
        };
        let heads_per_group: Vec<u64> = groups.iter().map(|(_, h, _)| *h).collect();
        let uniform_heads = heads_per_group.windows(2).all(|w| w[0] == w[1]);
        let heads_txt = |h: u64| {
            let shown = if u64::from(tp) > 1 && h >= u64::from(tp) {
                h.div_ceil(u64::from(tp))
            } else {
                h
            };
            format!("{shown} KV heads")
        };
        if uniform_heads {
            let h = heads_per_group.first().copied().unwrap_or(0);
            let body = dims.replace("{}", &format!("{kv_layers} layers × {}", heads_txt(h)));
            format!("{body} × {} ({})", e.describe(), spec.dtype.name())
        } else {
            let parts: Vec<String> = groups
                .iter()
                .map(|(_, h, n)| dims.replace("{}", &format!("{n} layers × {}", heads_txt(*h))))
                .collect();
            format!(
                "({}) × {} ({})",
                parts.join(" + "),
                e.describe(),
                spec.dtype.name()
            )
        }
    };
    trace.add(
        format!("KV per token{tp_note}"),
        formula,
        format!("{} bytes", fmt_int(total)),
    );
    total
}

/// KV bytes per token once the context is past every window: only full-attention layers
/// still grow. Equal to [`kv_bytes_per_token`] for models without sliding windows or when
/// the engine does not cap them.
pub fn kv_bytes_per_token_beyond_windows(g: &Geometry, spec: &KvSpec) -> u64 {
    g.layers
        .iter()
        .filter(|l| match l.attention {
            Attention::Full => true,
            Attention::Sliding { .. } => !spec.cap_sliding,
            Attention::NoCache => false,
        })
        .map(|l| layer_bytes_per_token(g, l.kv_heads, spec))
        .fold(0u64, u64::saturating_add)
}

/// KV bytes one sequence of `tokens` tokens holds:
/// `Σ_layers bytes_per_token_l × min(tokens, window_l)` (window = ∞ for full attention, or
/// when the engine does not cap windows).
pub fn kv_bytes_for_sequence(g: &Geometry, spec: &KvSpec, tokens: u64) -> u64 {
    g.layers
        .iter()
        .map(|l| {
            let t = match l.attention {
                Attention::Full => tokens,
                Attention::Sliding { window } => {
                    if spec.cap_sliding {
                        tokens.min(window)
                    } else {
                        tokens
                    }
                }
                Attention::NoCache => 0,
            };
            layer_bytes_per_token(g, l.kv_heads, spec).saturating_mul(t)
        })
        .fold(0u64, u64::saturating_add)
}

/// KV bytes of `tokens` tokens of one sequence with the model's `auto` layout in
/// `cache_dtype` (compressed MLA, windows capped, one GPU). The helper the diagnosis calls.
pub fn kv_bytes(g: &Geometry, tokens: u64, cache_dtype: CacheDtype) -> u64 {
    kv_bytes_for_sequence(g, &KvSpec::new(cache_dtype), tokens)
}

/// KV bytes of `concurrency` sequences of `context` tokens each:
/// `concurrency × kv_bytes_for_sequence(context)` (every sequence keeps its own window).
pub fn kv_bytes_for(g: &Geometry, spec: &KvSpec, context: u64, concurrency: u64) -> u64 {
    kv_bytes_for_sequence(g, spec, context).saturating_mul(concurrency)
}

/// Records the KV bytes of `concurrency × context` in the trace and returns them.
pub fn kv_bytes_explained(
    g: &Geometry,
    spec: &KvSpec,
    context: u64,
    concurrency: u64,
    trace: &mut Trace,
) -> u64 {
    let total = kv_bytes_for(g, spec, context, concurrency);
    let per_seq = kv_bytes_for_sequence(g, spec, context);
    let sliding: Vec<u64> = g
        .layers
        .iter()
        .filter_map(|l| match l.attention {
            Attention::Sliding { window } if spec.cap_sliding && window < context => Some(window),
            _ => None,
        })
        .collect();
    let conc = if concurrency != 1 {
        format!("{} sequences × ", fmt_int(concurrency))
    } else {
        String::new()
    };
    let formula = if sliding.is_empty() {
        let bpt = kv_bytes_per_token(g, spec, &mut Trace::new());
        format!("{conc}{} tokens × {} bytes", fmt_int(context), fmt_int(bpt))
    } else {
        let beyond = kv_bytes_per_token_beyond_windows(g, spec);
        let capped = per_seq.saturating_sub(beyond.saturating_mul(context));
        format!(
            "{conc}({} tokens × {} bytes on full-attention layers + {} on {} sliding-window layers capped at their window)",
            fmt_int(context),
            fmt_int(beyond),
            fmt_bytes(capped),
            sliding.len()
        )
    };
    trace.add(
        format!("KV for {}", token_phrase(context, concurrency)),
        formula,
        fmt_bytes(total),
    );
    total
}

/// `4,096 tokens` or `4 × 4,096 tokens`.
pub fn token_phrase(context: u64, concurrency: u64) -> String {
    if concurrency == 1 {
        format!("{} tokens", fmt_int(context))
    } else {
        format!("{} × {} tokens", fmt_int(concurrency), fmt_int(context))
    }
}

/// The largest `n` in `0..=max` with `fits(n)`, for a `fits` that holds up to some point
/// and fails after it (a monotone predicate). Binary search: 64 probes at most.
pub fn largest_fitting(max: u64, fits: impl Fn(u64) -> bool) -> u64 {
    if fits(max) {
        return max;
    }
    let (mut lo, mut hi) = (0u64, max); // fits(lo) assumed (0 tokens always fit), !fits(hi)
    if !fits(0) {
        return 0;
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// The longest context per sequence such that `concurrency` sequences fit `budget` bytes:
/// the largest `c ≤ max` with `concurrency × kv_bytes_for_sequence(c) ≤ budget`. Exact for
/// sliding-window models too (their cost is piecewise linear in `c`).
pub fn max_context_for_budget(
    g: &Geometry,
    spec: &KvSpec,
    budget: u64,
    concurrency: u64,
    max: u64,
) -> u64 {
    largest_fitting(max, |c| {
        kv_bytes_for(g, spec, c, concurrency.max(1)) <= budget
    })
}

// ---------------------------------------------------------------------------------------
// Capacities and rounding: the helpers the diagnosis calls with a log's numbers
// ---------------------------------------------------------------------------------------

/// Tokens a KV budget holds: `floor(kv_budget_bytes / kv_bytes_per_token)`. A model without
/// a per-token KV cache (`kv_bytes_per_token == 0`, SSMs) is limited by nothing here:
/// `u64::MAX`.
pub fn max_tokens_for_budget(kv_budget_bytes: u64, kv_bytes_per_token: u64) -> u64 {
    kv_budget_bytes
        .checked_div(kv_bytes_per_token)
        .unwrap_or(u64::MAX)
}

/// Tokens a paged KV budget holds when the engine allocates whole blocks:
/// `floor(budget / (block_size × bytes_per_token)) × block_size`. This is how vLLM V1 turns
/// "Available KV cache memory" into "GPU KV cache size: N tokens" (block_size 16 by
/// default): 8.00 GiB at 131,072 bytes/token is 4,096 blocks = 65,536 tokens.
pub fn paged_capacity_tokens(
    kv_budget_bytes: u64,
    kv_bytes_per_token: u64,
    block_size: u64,
) -> u64 {
    let block = block_size.max(1);
    match kv_bytes_per_token.checked_mul(block) {
        Some(0) => u64::MAX,
        Some(per_block) => (kv_budget_bytes / per_block).saturating_mul(block),
        None => 0,
    }
}

/// The step a context length is rounded to: 1,024 tokens from 4,096 up, 256 from 256 up,
/// 16 (one vLLM block) below. Round numbers are what people type, and llama.cpp pads its
/// context to 256 anyway.
pub fn context_step(tokens: u64) -> u64 {
    if tokens >= 4096 {
        1024
    } else if tokens >= 256 {
        256
    } else {
        16
    }
}

/// Rounds a token capacity **down** to a sensible setting ([`context_step`]), so the result
/// never exceeds the capacity: 65,536 → 65,536; 18,900 → 18,432; 3,000 → 2,816; 100 → 96.
pub fn round_context(tokens: u64) -> u64 {
    let step = context_step(tokens);
    tokens / step * step
}

/// Full-length sequences a KV capacity holds at once: `floor(capacity / context)`. vLLM
/// prints this as "Maximum concurrency for 32,768 tokens per request: 2.00x".
pub fn concurrency_for(kv_capacity_tokens: u64, context: u64) -> u64 {
    kv_capacity_tokens.checked_div(context).unwrap_or(0)
}

/// The smallest fraction of `total` (rounded **up** to 0.01) that holds `needed` bytes:
/// `ceil(needed / total × 100) / 100`. Used for `--gpu-memory-utilization` and
/// `--mem-fraction-static`.
pub fn fraction_for(needed: u64, total: u64) -> f64 {
    if total == 0 {
        return f64::INFINITY;
    }
    // Integer arithmetic avoids 0.29 becoming 0.2900000001 → 0.30.
    let hundredths = (u128::from(needed) * 100).div_ceil(u128::from(total));
    hundredths as f64 / 100.0
}

/// `total × fraction`, floored to a byte.
pub fn fraction_of(total: u64, fraction: f64) -> u64 {
    (total as f64 * fraction).floor().max(0.0) as u64
}

/// What a KV budget read from a log allows: the numbers a fix needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct KvFit {
    /// Tokens the budget holds (whole blocks).
    pub capacity_tokens: u64,
    /// Longest context per sequence at the concurrency asked, rounded down to a setting
    /// ([`round_context`]) — the value to put in `--max-model-len` / `num_ctx` / `-c`.
    pub max_context: u64,
    /// Sequences of the context asked that fit at once.
    pub max_concurrency: u64,
    /// KV bytes the context × concurrency asked needs.
    pub needed_bytes: u64,
    /// Whether context × concurrency fits.
    pub fits: bool,
}

/// The fix values for a KV budget in bytes (vLLM's "Available KV cache memory", SGLang's
/// K + V sizes, llama.cpp's KV buffer):
///
/// - `capacity = paged_capacity_tokens(budget, bytes_per_token, block)`;
/// - `max_context = round_context(capacity / concurrency)`;
/// - `max_concurrency = capacity / context`;
/// - `fits ⇔ concurrency × ceil(context / block) × block ≤ capacity`.
///
/// For llama.cpp, whose `-c` is shared by `-np` slots, `max_context × concurrency` is the
/// `-c` to set.
pub fn kv_fit(
    kv_budget_bytes: u64,
    kv_bytes_per_token: u64,
    block_size: u64,
    context: u64,
    concurrency: u64,
) -> KvFit {
    let capacity = paged_capacity_tokens(kv_budget_bytes, kv_bytes_per_token, block_size);
    let mut fit = kv_fit_from_capacity(capacity, block_size, context, concurrency);
    fit.needed_bytes = context
        .saturating_mul(concurrency)
        .saturating_mul(kv_bytes_per_token);
    fit
}

/// [`kv_fit`], recording its steps for `--explain`:
///
/// ```text
/// KV capacity = 2.30 GiB / (16 × 131,072 bytes) whole blocks = 18,832 tokens
/// max context at 1 sequence = 18,832 rounded down to 1,024 = 18,432 tokens
/// ```
pub fn kv_fit_explained(
    kv_budget_bytes: u64,
    kv_bytes_per_token: u64,
    block_size: u64,
    context: u64,
    concurrency: u64,
    trace: &mut Trace,
) -> KvFit {
    let fit = kv_fit(
        kv_budget_bytes,
        kv_bytes_per_token,
        block_size,
        context,
        concurrency,
    );
    let blocks = if block_size > 1 {
        format!(
            "({} × {} bytes) whole blocks",
            block_size,
            fmt_int(kv_bytes_per_token)
        )
    } else {
        format!("{} bytes", fmt_int(kv_bytes_per_token))
    };
    trace.add(
        "KV capacity",
        format!("{} / {blocks}", fmt_gib(kv_budget_bytes)),
        format!("{} tokens", fmt_int(fit.capacity_tokens)),
    );
    let conc = concurrency.max(1);
    let per_seq = if conc > 1 {
        format!("{} / {conc} sequences", fmt_int(fit.capacity_tokens))
    } else {
        fmt_int(fit.capacity_tokens)
    };
    trace.add(
        format!(
            "max context at {conc} sequence{}",
            if conc == 1 { "" } else { "s" }
        ),
        format!(
            "{per_seq} rounded down to a multiple of {}",
            context_step(fit.capacity_tokens / conc)
        ),
        format!("{} tokens", fmt_int(fit.max_context)),
    );
    trace.add(
        format!("KV for {}", token_phrase(context, concurrency)),
        format!(
            "{} × {} × {} bytes",
            fmt_int(conc),
            fmt_int(context),
            fmt_int(kv_bytes_per_token)
        ),
        format!(
            "{} ({})",
            fmt_bytes(fit.needed_bytes),
            if fit.fits { "fits" } else { "does not fit" }
        ),
    );
    fit
}

/// [`kv_fit`] when the log gives the capacity in tokens ("GPU KV cache size: 65,536
/// tokens", SGLang's `max_total_num_tokens`, TGI's "max batch total tokens").
/// `needed_bytes` is 0: the log gave no byte size.
pub fn kv_fit_from_capacity(
    capacity_tokens: u64,
    block_size: u64,
    context: u64,
    concurrency: u64,
) -> KvFit {
    let block = block_size.max(1);
    let conc = concurrency.max(1);
    let per_seq = capacity_tokens / conc / block * block;
    let max_context = round_context(per_seq);
    let needed_tokens = context
        .div_ceil(block)
        .saturating_mul(block)
        .saturating_mul(conc);
    KvFit {
        capacity_tokens,
        max_context,
        max_concurrency: concurrency_for(
            capacity_tokens,
            context.div_ceil(block).saturating_mul(block),
        ),
        needed_bytes: 0,
        fits: needed_tokens <= capacity_tokens,
    }
}

/// The capacity of the same KV budget in another cache dtype:
/// `floor(capacity × from_bytes_per_token / to_bytes_per_token)` (fp8 instead of bf16
/// doubles it; q8_0 instead of f16 multiplies it by 32/17).
pub fn capacity_in_dtype(
    capacity_tokens: u64,
    from_bytes_per_token: u64,
    to_bytes_per_token: u64,
) -> u64 {
    if to_bytes_per_token == 0 {
        return u64::MAX;
    }
    (u128::from(capacity_tokens) * u128::from(from_bytes_per_token)
        / u128::from(to_bytes_per_token))
    .min(u128::from(u64::MAX)) as u64
}

/// The `--gpu-memory-utilization` (or SGLang `--mem-fraction-static`) that holds the
/// non-KV memory the log reports plus the KV a context needs:
/// `fraction_for(non_kv_bytes + kv_needed_bytes, total_bytes)`, rounded up to 0.01.
pub fn fraction_for_kv(total_bytes: u64, non_kv_bytes: u64, kv_needed_bytes: u64) -> f64 {
    fraction_for(non_kv_bytes.saturating_add(kv_needed_bytes), total_bytes)
}

// ---------------------------------------------------------------------------------------
// Overhead estimates
// ---------------------------------------------------------------------------------------

/// An estimated amount of memory with its plausible range and the reason for the number.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Estimate {
    pub what: String,
    /// The central estimate the plan uses.
    pub bytes: u64,
    pub low_bytes: u64,
    pub high_bytes: u64,
    /// Where the number comes from.
    pub basis: String,
}

impl Estimate {
    fn new(what: &str, bytes: u64, low: u64, high: u64, basis: impl Into<String>) -> Self {
        Estimate {
            what: what.to_string(),
            bytes,
            low_bytes: low.min(bytes),
            high_bytes: high.max(bytes),
            basis: basis.into(),
        }
    }

    /// A central value with a relative range (`low = bytes × lo`, `high = bytes × hi`).
    fn scaled(what: &str, bytes: u64, lo: f64, hi: f64, basis: impl Into<String>) -> Self {
        let b = bytes as f64;
        Estimate::new(what, bytes, (b * lo) as u64, (b * hi) as u64, basis)
    }

    /// Records the estimate in a trace.
    pub fn explain(&self, trace: &mut Trace) {
        trace.add(
            format!("{} (estimate)", self.what),
            format!(
                "{}; range {} – {}",
                self.basis,
                fmt_gib(self.low_bytes),
                fmt_gib(self.high_bytes)
            ),
            fmt_gib(self.bytes),
        );
    }
}

/// The CUDA context and driver allocations of one process on one GPU: about 0.5 GiB
/// (0.3 GiB with lazy module loading on small GPUs, up to 1 GiB with eager loading and
/// big kernel libraries). It is outside every allocator's accounting.
pub fn cuda_context_estimate() -> Estimate {
    Estimate::new(
        "CUDA context",
        512 * MIB,
        300 * MIB,
        GIB,
        "driver context, cuBLAS/cuDNN handles and kernel images of one process",
    )
}

/// Elements of the widest per-token activation of one layer on one rank: the MLP's gate,
/// up and activated tensors (`3 × intermediate / tp`), for MoE the routed copies
/// (`top_k × (3 × expert_intermediate + hidden)`, the fused-MoE scratch), and the residual
/// stream plus a normalised copy (`2 × hidden`) beside them.
fn activation_elems_per_token(g: &Geometry, tp: u64) -> u64 {
    let tp = tp.max(1);
    let dense = g.intermediate_size.saturating_mul(3) / tp;
    let moe = g
        .moe
        .as_ref()
        .map(|m| {
            let per_expert = m.expert_intermediate_size.saturating_mul(3) / tp;
            m.experts_per_token
                .saturating_mul(per_expert.saturating_add(g.hidden_size))
        })
        .unwrap_or(0);
    g.hidden_size
        .saturating_mul(4)
        .saturating_add(dense.max(moe))
}

/// vLLM's "torch peak memory increase" of its profiling run: the forward pass over
/// `max_num_batched_tokens` tokens and the sampler warm-up over `max_num_seqs` dummy
/// requests, whichever is larger:
///
/// `max(T × (4 × hidden + 3 × intermediate / tp) × act_bytes, S × vocab × 4 bytes × 2)`
///
/// (fp32 logits plus one softmax-sized temporary). Measured peaks scatter around this by
/// about a factor of two either way, hence the range.
pub fn vllm_activation_estimate(
    g: &Geometry,
    batched_tokens: u64,
    max_num_seqs: u64,
    act_bytes: u64,
    tp: u64,
) -> Estimate {
    let forward = batched_tokens
        .saturating_mul(activation_elems_per_token(g, tp))
        .saturating_mul(act_bytes);
    let sampler = max_num_seqs.saturating_mul(g.vocab_size).saturating_mul(8);
    let basis = format!(
        "max(forward over {} batched tokens = {}, sampler over {} sequences × {} vocab × 8 bytes = {})",
        fmt_int(batched_tokens),
        fmt_gib(forward),
        fmt_int(max_num_seqs),
        fmt_int(g.vocab_size),
        fmt_gib(sampler)
    );
    Estimate::scaled("activation peak", forward.max(sampler), 0.5, 2.0, basis)
}

/// Activation peak of a prefill of `tokens` tokens at once, with memory-efficient attention
/// (SDPA/flash; no `tokens²` score matrix): `tokens × (4 × hidden + 3 × intermediate / tp)
/// × act_bytes`, plus fp32 logits for the last token of each of `sequences`.
pub fn prefill_activation_estimate(
    g: &Geometry,
    tokens: u64,
    sequences: u64,
    act_bytes: u64,
    tp: u64,
) -> Estimate {
    let forward = tokens
        .saturating_mul(activation_elems_per_token(g, tp))
        .saturating_mul(act_bytes);
    let logits = sequences.saturating_mul(g.vocab_size).saturating_mul(4);
    let basis = format!(
        "{} prefill tokens × {} elements × {act_bytes} bytes + last-token logits",
        fmt_int(tokens),
        fmt_int(activation_elems_per_token(g, tp))
    );
    Estimate::scaled(
        "prefill activations",
        forward.saturating_add(logits),
        0.6,
        1.8,
        basis,
    )
}

/// Memory the engine's process holds outside PyTorch's allocator besides the CUDA context:
/// cuBLAS workspaces and, with tensor parallelism, NCCL and custom all-reduce buffers.
pub fn non_torch_estimate(tp: u32) -> Estimate {
    if tp > 1 {
        Estimate::new(
            "non-torch memory",
            768 * MIB,
            384 * MIB,
            2 * GIB,
            "cuBLAS workspaces + NCCL / custom all-reduce buffers for tensor parallelism",
        )
    } else {
        Estimate::new(
            "non-torch memory",
            256 * MIB,
            100 * MIB,
            600 * MIB,
            "cuBLAS workspaces and small buffers",
        )
    }
}

/// The CUDA-graph memory pool: intermediate buffers of the captured decode batch sizes
/// (vLLM captures up to 512, SGLang up to `cuda_graph_max_bs`). Engine logs show 0.1 to
/// 1.5 GiB for 7–70B models, growing with depth: half a GiB for a 32-layer model, scaled
/// by layers, from a quarter to two and a half times that.
pub fn cuda_graph_estimate(g: &Geometry) -> Estimate {
    let central = ((512 * MIB).saturating_mul(g.num_layers.max(1)) / 32).clamp(128 * MIB, 2 * GIB);
    Estimate::scaled(
        "CUDA graphs",
        central,
        0.25,
        2.5,
        "graph pools of the captured decode batch sizes, 0.5 GiB per 32 layers",
    )
}

/// llama.cpp's compute buffer on a GPU (`CUDA0 compute buffer size = …`): the graph's
/// largest live tensors for one micro-batch of `n_ubatch` tokens.
///
/// `n_ubatch × n_vocab × 4` (the f32 logits of the micro-batch) `+ n_ubatch × 4 × n_embd ×
/// 4` (f32 scratch) and, without flash attention, the f32 attention scores of one layer,
/// `n_ubatch × n_ctx × n_head × 4`. Llama-3-8B with flash attention at the default
/// ub 512: ≈ 258 MiB, which is what it logs.
pub fn llamacpp_compute_estimate(
    g: &Geometry,
    n_ubatch: u64,
    n_ctx: u64,
    flash_attn: bool,
) -> Estimate {
    let logits = n_ubatch.saturating_mul(g.vocab_size).saturating_mul(4);
    let scratch = n_ubatch.saturating_mul(16).saturating_mul(g.hidden_size);
    let scores = if flash_attn {
        0
    } else {
        n_ubatch
            .saturating_mul(n_ctx)
            .saturating_mul(g.num_attention_heads)
            * 4
    };
    let basis = if flash_attn {
        format!(
            "{n_ubatch} ubatch × ({} vocab + 4 × {} hidden) × 4 bytes",
            fmt_int(g.vocab_size),
            g.hidden_size
        )
    } else {
        format!(
            "{n_ubatch} ubatch × ({} vocab + 4 × {} hidden + {} ctx × {} heads) × 4 bytes (no flash attention)",
            fmt_int(g.vocab_size),
            g.hidden_size,
            fmt_int(n_ctx),
            g.num_attention_heads
        )
    };
    Estimate::scaled(
        "compute buffer",
        logits.saturating_add(scratch).saturating_add(scores),
        0.7,
        1.6,
        basis,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_numbers_for_people() {
        assert_eq!(fmt_int(131_072), "131,072");
        assert_eq!(fmt_int(999), "999");
        assert_eq!(fmt_int(1_000), "1,000");
        assert_eq!(fmt_int(3_355_443_200), "3,355,443,200");
        assert_eq!(fmt_gib(3_355_443_200), "3.125 GiB");
        assert_eq!(fmt_gib(8 * GIB), "8.00 GiB");
        assert_eq!(fmt_gib_f(-1.5 * GIB as f64), "-1.50 GiB");
        assert_eq!(fmt_signed(-1234), "-1,234");
        assert_eq!(fmt_bytes(131_072), "131,072 bytes");
    }

    #[test]
    fn ggml_blocks_are_exact() {
        assert_eq!(CacheDtype::Q8_0.elem().row_bytes(1024), 1088); // 32 blocks × 34
        assert_eq!(CacheDtype::Q4_0.elem().row_bytes(128), 72); // 4 × 18
        assert_eq!(CacheDtype::Q5_1.elem().row_bytes(64), 48);
        assert_eq!(CacheDtype::F16.elem().row_bytes(128), 256);
        assert!((CacheDtype::Q8_0.elem().per_elem() - 34.0 / 32.0).abs() < 1e-12);
    }

    #[test]
    fn parses_engine_dtype_spellings() {
        assert_eq!(CacheDtype::parse("fp8"), Some(CacheDtype::Fp8E4m3));
        assert_eq!(CacheDtype::parse("fp8_e4m3fn"), Some(CacheDtype::Fp8E4m3));
        assert_eq!(CacheDtype::parse("FP8-E5M2"), Some(CacheDtype::Fp8E5m2));
        assert_eq!(CacheDtype::parse("q8_0"), Some(CacheDtype::Q8_0));
        assert_eq!(CacheDtype::parse("auto"), None);
        assert_eq!(Dtype::parse("torch.bfloat16"), Some(Dtype::Bf16));
        assert_eq!(Dtype::parse("half"), Some(Dtype::F16));
        assert_eq!(Dtype::parse("q4"), None);
    }

    #[test]
    fn capacity_helpers() {
        assert_eq!(max_tokens_for_budget(8 * GIB, 131_072), 65_536);
        assert_eq!(max_tokens_for_budget(1, 0), u64::MAX);
        assert_eq!(paged_capacity_tokens(8 * GIB, 131_072, 16), 65_536);
        // 10 GiB at 819,200 bytes/token: 13,107.2 tokens, 819 whole 16-token blocks.
        assert_eq!(paged_capacity_tokens(10 * GIB, 819_200, 16), 13_104);
        assert_eq!(concurrency_for(65_536, 32_768), 2);
        assert_eq!(concurrency_for(65_536, 0), 0);
        assert_eq!(round_context(65_536), 65_536);
        assert_eq!(round_context(18_900), 18_432);
        assert_eq!(round_context(3_000), 2_816);
        assert_eq!(round_context(100), 96);
        for t in [0u64, 1, 15, 255, 256, 4095, 4096, 70_001, 1 << 40] {
            assert!(round_context(t) <= t);
        }
    }

    #[test]
    fn kv_fit_gives_fix_values() {
        // vLLM: 8 GiB at 131,072 bytes/token holds 65,536 tokens: 2 × 32,768 or 1 × 65,536.
        let f = kv_fit(8 * GIB, 131_072, 16, 32_768, 1);
        assert_eq!(f.capacity_tokens, 65_536);
        assert_eq!(f.max_context, 65_536);
        assert_eq!(f.max_concurrency, 2);
        assert!(f.fits);
        assert_eq!(f.needed_bytes, 4 * GIB);
        let f = kv_fit(8 * GIB, 131_072, 16, 131_072, 1);
        assert!(!f.fits);
        assert_eq!(f.max_context, 65_536);
        // Three sequences: 21,845 tokens each, rounded down to 21,504.
        let f = kv_fit_from_capacity(65_536, 16, 16_384, 3);
        assert_eq!(f.max_context, 21_504);
        assert!(f.fits);
        assert!(3 * f.max_context <= 65_536);
        // fp8 doubles the capacity; q8_0 instead of f16 gives 32/17 of it.
        assert_eq!(capacity_in_dtype(65_536, 131_072, 65_536), 131_072);
        assert_eq!(capacity_in_dtype(17, 131_072, 69_632), 32);
        assert_eq!(fraction_for_kv(80 * GIB, 20 * GIB, 8 * GIB), 0.35);
        let mut t = Trace::new();
        let f = kv_fit_explained((2.30 * GIB as f64) as u64, 131_072, 16, 32_768, 1, &mut t);
        assert_eq!(f.max_context, 18_432);
        let lines: Vec<String> = t.steps().iter().map(|s| s.to_string()).collect();
        assert_eq!(
            lines[0],
            "KV capacity = 2.30 GiB / (16 × 131,072 bytes) whole blocks = 18,832 tokens"
        );
        assert_eq!(
            lines[1],
            "max context at 1 sequence = 18,832 rounded down to a multiple of 1024 = 18,432 tokens"
        );
        assert!(lines[2].ends_with("(does not fit)"), "{}", lines[2]);
    }

    #[test]
    fn fractions_round_up_to_hundredths() {
        assert_eq!(fraction_for(29, 100), 0.29);
        assert_eq!(fraction_for(2901, 10_000), 0.30);
        assert_eq!(fraction_for(0, 100), 0.0);
        assert!(fraction_for(1, 0).is_infinite());
        assert_eq!(fraction_of(100 * GIB, 0.9), 90 * GIB);
    }

    #[test]
    fn largest_fitting_finds_the_boundary() {
        assert_eq!(largest_fitting(1000, |n| n <= 417), 417);
        assert_eq!(largest_fitting(1000, |_| true), 1000);
        assert_eq!(largest_fitting(1000, |n| n == 0), 0);
        assert_eq!(largest_fitting(u64::MAX, |n| n <= 1 << 50), 1 << 50);
    }

    #[test]
    fn quant_bits_per_weight() {
        let q = Quant::gptq_like("awq", 4, Some(128));
        assert!((q.bits_per_weight - 4.15625).abs() < 1e-12);
        assert!((Quant::bnb_4bit("nf4", false).bits_per_weight - 4.5).abs() < 1e-12);
        assert!((Quant::bnb_4bit("nf4", true).bits_per_weight - 4.1269531).abs() < 1e-6);
        assert!((Quant::mxfp4().bits_per_weight - 4.25).abs() < 1e-12);
        assert_eq!(
            Quant::gguf_type("Q8_0").map(|q| q.bits_per_weight),
            Some(8.5)
        );
        assert!(Quant::gguf_type("q9_k").is_none());
    }

    #[test]
    fn trace_records_steps() {
        let mut t = Trace::new();
        t.add(
            "KV per token",
            "2 × 32 × 8 × 128 × 2 bytes",
            "131,072 bytes",
        );
        assert_eq!(
            t.steps()[0].to_string(),
            "KV per token = 2 × 32 × 8 × 128 × 2 bytes = 131,072 bytes"
        );
        let mut all = Trace::new();
        all.extend_prefixed("vllm: ", t);
        assert_eq!(all.steps()[0].what, "vllm: KV per token");
    }
}
