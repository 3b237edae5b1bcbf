//! The geometry of a transformer: what memory arithmetic needs to know about a model,
//! whichever file it was read from (HF `config.json`, a GGUF header, or an engine's log).
//!
//! A [`Geometry`] lists every layer with its attention kind (full, sliding window, or no KV
//! cache at all for linear-attention and SSM layers) and its KV head count, because models
//! now mix them: Gemma 2 alternates sliding and full layers, Qwen3-Next keeps a KV cache on
//! one layer in four, some GGUFs give a KV head count per layer. Counting "layers × KV
//! heads" over the whole model is the mistake estimators keep making with such models.
//!
//! The parameter count is computed from the shapes ([`Geometry::params`]): embeddings,
//! per-layer attention (with GQA, or MLA's low-rank projections), MLP (gated: three
//! matrices) or mixture-of-experts, norms and biases, the LM head unless tied, and a vision
//! tower when the config describes one.

use serde::Serialize;

use crate::knowledge::memory::{Dtype, Quant, WeightFormat};

/// Where a geometry was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelFormat {
    /// A Hugging Face `config.json`.
    HfConfig,
    /// A GGUF file header.
    Gguf,
    /// Numbers an engine printed in its log.
    Log,
}

/// How one layer attends, which decides how its KV cache grows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Attention {
    /// Full causal attention: the cache grows with every token.
    Full,
    /// Sliding-window (or chunked) attention: the cache stops growing at `window` tokens.
    Sliding { window: u64 },
    /// No per-token KV cache: linear attention, Mamba/SSM or recurrent layers (they keep a
    /// fixed-size state per sequence instead, not counted here).
    NoCache,
}

/// One decoder layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Layer {
    pub attention: Attention,
    /// KV heads of this layer (GGUF may give one count per layer).
    pub kv_heads: u64,
    /// Whether the layer's MLP is a mixture of experts.
    pub moe: bool,
}

/// Multi-head latent attention (DeepSeek-V2/V3, Kimi K2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Mla {
    pub kv_lora_rank: u64,
    pub qk_rope_head_dim: u64,
    pub qk_nope_head_dim: u64,
    pub v_head_dim: u64,
    /// Low-rank query projection (None: a full `q_proj`).
    pub q_lora_rank: Option<u64>,
}

/// Mixture-of-experts sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Moe {
    /// Routed experts per MoE layer.
    pub experts: u64,
    /// Experts each token is routed to.
    pub experts_per_token: u64,
    /// Intermediate size of one routed expert.
    pub expert_intermediate_size: u64,
    /// Total intermediate size of the always-on shared expert MLP (0 when none).
    pub shared_intermediate_size: u64,
    /// Qwen2-MoE's sigmoid gate on the shared expert (`hidden × 1`).
    pub shared_expert_gate: bool,
    /// The router has a bias (gpt-oss).
    pub router_bias: bool,
}

/// A vision tower (and projector) counted from a multimodal config.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Vision {
    pub params: u64,
    pub projector_params: u64,
    /// How the figure was obtained, or why it is incomplete.
    pub basis: String,
}

/// Sizes read from a GGUF tensor table: exact bytes as stored.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct GgufTensors {
    pub total_bytes: u64,
    pub total_params: u64,
    /// Bytes of each `blk.N.*` group, by layer index.
    pub layer_bytes: Vec<u64>,
    /// `output.weight` (the LM head; offloaded as llama.cpp's extra "output layer").
    pub output_bytes: u64,
    /// `token_embd.weight` (llama.cpp keeps it in host memory).
    pub token_embd_bytes: u64,
    /// Everything else (norms, vision projector, ...).
    pub other_bytes: u64,
    /// `(ggml type name, tensor count, params, bytes)` per type, largest first.
    pub by_type: Vec<TypeTotal>,
    /// Tensor types this build does not know the size of (their bytes are missing above).
    pub unknown_types: Vec<u32>,
}

/// Totals of one ggml tensor type in a GGUF file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TypeTotal {
    pub ggml_type: String,
    pub tensors: u64,
    pub params: u64,
    pub bytes: u64,
}

/// A model's geometry. Construct it with [`super::config::parse_config`],
/// [`super::gguf::geometry_from_gguf`], [`super::geometry_from_facts`] or
/// [`Geometry::uniform`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Geometry {
    pub format: ModelFormat,
    /// `_name_or_path`, `general.name`, or the file name.
    pub name: Option<String>,
    /// `architectures[0]` (`LlamaForCausalLM`) or GGUF `general.architecture` (`llama`).
    pub architecture: String,
    /// HF `model_type` (`llama`, `gemma2`) or the GGUF architecture.
    pub model_type: String,
    pub hidden_size: u64,
    pub num_layers: u64,
    pub num_attention_heads: u64,
    /// KV heads of most layers (per-layer counts are in `layers`).
    pub num_kv_heads: u64,
    /// K head dimension (`head_dim`, or `hidden_size / num_attention_heads`).
    pub head_dim: u64,
    /// V head dimension (equal to `head_dim` except in a few models).
    pub v_head_dim: u64,
    pub intermediate_size: u64,
    pub vocab_size: u64,
    pub tie_word_embeddings: bool,
    /// Bias on q/k/v projections (Qwen2, GPT-2, `attention_bias`).
    pub qkv_bias: bool,
    /// Bias on the output projection.
    pub o_bias: bool,
    /// Bias on MLP / expert projections.
    pub mlp_bias: bool,
    /// Gated MLP (SwiGLU/GeGLU: gate, up, down) rather than two matrices.
    pub gated_mlp: bool,
    /// Norms per decoder layer (2 for Llama, 4 for Gemma 2/3, 1 for parallel blocks).
    pub norms_per_layer: u64,
    /// LayerNorm with a bias (GPT-2 style) rather than RMSNorm.
    pub norm_bias: bool,
    /// Per-head RMSNorm on q and k (Qwen3, Gemma 3).
    pub qk_norm: bool,
    /// Learned position embeddings (GPT-2, OPT): their count.
    pub learned_positions: u64,
    /// Per-head attention sinks (gpt-oss).
    pub attention_sinks: bool,
    /// `torch_dtype` of the checkpoint.
    pub dtype: Option<Dtype>,
    /// Quantisation of the checkpoint (`quantization_config`).
    pub quant: Option<Quant>,
    /// The context the model was trained for (`max_position_embeddings`,
    /// `{arch}.context_length`).
    pub max_position_embeddings: Option<u64>,
    /// The context vLLM derives from rope scaling when it extends `max_position_embeddings`
    /// (YaRN: `original × factor`).
    pub rope_scaled_context: Option<u64>,
    /// `rope_scaling.rope_type` (`llama3`, `yarn`, ...).
    pub rope_scaling: Option<String>,
    /// The sliding window when any layer has one.
    pub sliding_window: Option<u64>,
    pub layers: Vec<Layer>,
    pub mla: Option<Mla>,
    pub moe: Option<Moe>,
    pub vision: Option<Vision>,
    /// Exact tensor sizes when read from a GGUF header.
    pub gguf: Option<GgufTensors>,
    /// `general.file_type` of a GGUF (`Q4_K_M`).
    pub gguf_file_type: Option<String>,
    /// Things assumed while reading the model (unknown model type, pattern guessed...).
    pub notes: Vec<String>,
    /// Where each field was read: (field, locator) for fact provenance.
    pub locators: Vec<(String, String)>,
}

/// A parameter count split by what quantisation treats differently.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ParamCount {
    /// Token embeddings (and learned position embeddings).
    pub embedding: u64,
    /// The LM head (0 when tied to the embeddings).
    pub lm_head: u64,
    /// Attention projection matrices (q, k, v, o, or MLA's).
    pub attention: u64,
    /// Dense MLP matrices.
    pub mlp: u64,
    /// Routed experts, all of them.
    pub experts: u64,
    /// Shared experts.
    pub shared_experts: u64,
    /// Routers.
    pub router: u64,
    /// Norms, biases, sinks: small tensors nobody quantises.
    pub small: u64,
    /// Vision tower and projector.
    pub vision: u64,
    /// When read from a GGUF: the exact element count of the tensors (the split above is
    /// then empty).
    pub exact_total: Option<u64>,
}

impl ParamCount {
    /// All parameters.
    pub fn total(&self) -> u64 {
        if let Some(t) = self.exact_total {
            return t;
        }
        [
            self.embedding,
            self.lm_head,
            self.attention,
            self.mlp,
            self.experts,
            self.shared_experts,
            self.router,
            self.small,
            self.vision,
        ]
        .iter()
        .fold(0u64, |a, b| a.saturating_add(*b))
    }
}

/// `a × b` saturating, for parameter arithmetic on untrusted sizes.
fn m(a: u64, b: u64) -> u64 {
    a.saturating_mul(b)
}

/// A saturating sum.
fn a(xs: &[u64]) -> u64 {
    xs.iter().fold(0u64, |acc, x| acc.saturating_add(*x))
}

impl Geometry {
    /// A plain decoder with `layers` identical full-attention layers: what an engine log
    /// gives (llama.cpp prints `n_layer`, `n_head_kv`, `n_embd_head_k`). Sizes not known
    /// are zero, so only the KV arithmetic is meaningful.
    pub fn uniform(layers: u64, attention_heads: u64, kv_heads: u64, head_dim: u64) -> Geometry {
        let layer = Layer {
            attention: Attention::Full,
            kv_heads,
            moe: false,
        };
        // Bounded: a log could claim any layer count.
        let n = layers.min(super::config::MAX_LAYERS);
        Geometry {
            format: ModelFormat::Log,
            name: None,
            architecture: String::new(),
            model_type: String::new(),
            hidden_size: attention_heads.saturating_mul(head_dim),
            num_layers: n,
            num_attention_heads: attention_heads,
            num_kv_heads: kv_heads,
            head_dim,
            v_head_dim: head_dim,
            intermediate_size: 0,
            vocab_size: 0,
            tie_word_embeddings: false,
            qkv_bias: false,
            o_bias: false,
            mlp_bias: false,
            gated_mlp: true,
            norms_per_layer: 2,
            norm_bias: false,
            qk_norm: false,
            learned_positions: 0,
            attention_sinks: false,
            dtype: None,
            quant: None,
            max_position_embeddings: None,
            rope_scaled_context: None,
            rope_scaling: None,
            sliding_window: None,
            layers: vec![layer; n as usize],
            mla: None,
            moe: None,
            vision: None,
            gguf: None,
            gguf_file_type: None,
            notes: Vec::new(),
            locators: Vec::new(),
        }
    }

    /// Layers that keep a KV cache.
    pub fn kv_layer_count(&self) -> u64 {
        self.layers
            .iter()
            .filter(|l| l.attention != Attention::NoCache)
            .count() as u64
    }

    /// Layers with a sliding window.
    pub fn sliding_layer_count(&self) -> u64 {
        self.layers
            .iter()
            .filter(|l| matches!(l.attention, Attention::Sliding { .. }))
            .count() as u64
    }

    /// The model's context limit as engines derive it: the rope-scaled context when rope
    /// scaling extends it, else `max_position_embeddings`.
    pub fn max_context(&self) -> Option<u64> {
        match (self.rope_scaled_context, self.max_position_embeddings) {
            (Some(r), Some(m)) => Some(r.max(m)),
            (a, b) => a.or(b),
        }
    }

    /// How the weights are stored.
    pub fn weight_format(&self) -> WeightFormat {
        if self.gguf.is_some() {
            return WeightFormat::Gguf {
                file_type: self
                    .gguf_file_type
                    .clone()
                    .unwrap_or_else(|| "mixed".to_string()),
            };
        }
        let dtype = self.dtype.unwrap_or(Dtype::Bf16);
        match &self.quant {
            Some(q) => WeightFormat::Quantized {
                quant: q.clone(),
                rest: dtype.activation(),
            },
            None => WeightFormat::Dense { dtype },
        }
    }

    /// The dtype activations (and an `auto` KV cache) use.
    pub fn activation_dtype(&self) -> Dtype {
        match (&self.dtype, &self.quant) {
            (Some(d), _) => d.activation(),
            (None, _) => Dtype::F16,
        }
    }

    /// Parameters of one layer's attention block (matrices; biases and norms go to
    /// `small`). Standard: `hidden × heads × head_dim` (q) + `hidden × kv × head_dim` (k) +
    /// `hidden × kv × v_head_dim` (v) + `heads × v_head_dim × hidden` (o). MLA: q (full or
    /// low-rank) + `hidden × (kv_lora_rank + rope)` + `kv_lora_rank × heads × (nope + v)` +
    /// `heads × v × hidden`.
    fn attention_params(&self, kv_heads: u64) -> (u64, u64) {
        let h = self.hidden_size;
        let heads = self.num_attention_heads;
        if let Some(mla) = &self.mla {
            let qk = a(&[mla.qk_nope_head_dim, mla.qk_rope_head_dim]);
            let (q, q_norm) = match mla.q_lora_rank {
                Some(r) => (a(&[m(h, r), m(r, m(heads, qk))]), r),
                None => (m(h, m(heads, qk)), 0),
            };
            let kv_a = m(h, a(&[mla.kv_lora_rank, mla.qk_rope_head_dim]));
            let kv_b = m(
                mla.kv_lora_rank,
                m(heads, a(&[mla.qk_nope_head_dim, mla.v_head_dim])),
            );
            let o = m(m(heads, mla.v_head_dim), h);
            return (a(&[q, kv_a, kv_b, o]), a(&[q_norm, mla.kv_lora_rank]));
        }
        let q = m(h, m(heads, self.head_dim));
        let k = m(h, m(kv_heads, self.head_dim));
        let v = m(h, m(kv_heads, self.v_head_dim));
        let o = m(m(heads, self.v_head_dim), h);
        let qkv_bias = if self.qkv_bias {
            a(&[
                m(heads, self.head_dim),
                m(kv_heads, self.head_dim),
                m(kv_heads, self.v_head_dim),
            ])
        } else {
            0
        };
        let small = a(&[
            qkv_bias,
            if self.o_bias { h } else { 0 },
            if self.qk_norm { m(2, self.head_dim) } else { 0 },
            if self.attention_sinks { heads } else { 0 },
        ]);
        (a(&[q, k, v, o]), small)
    }

    /// `(matrices, biases)` of an MLP of intermediate size `inter`: gated `3 × hidden ×
    /// inter` (biases `2 × inter + hidden`), plain `2 × hidden × inter` (`inter + hidden`).
    fn mlp_params(&self, inter: u64) -> (u64, u64) {
        let h = self.hidden_size;
        if self.gated_mlp {
            (
                m(3, m(h, inter)),
                if self.mlp_bias {
                    a(&[m(2, inter), h])
                } else {
                    0
                },
            )
        } else {
            (
                m(2, m(h, inter)),
                if self.mlp_bias { a(&[inter, h]) } else { 0 },
            )
        }
    }

    /// The parameter count from the shapes, or the exact GGUF tensor total.
    ///
    /// `vocab × hidden` (embeddings) + the LM head unless tied + per layer: attention
    /// (q, k, v, o with GQA, or MLA's projections), MLP (`3 × hidden × intermediate` gated) or MoE
    /// (`experts × 3 × hidden × expert_intermediate` + shared experts + `hidden × experts`
    /// router), norms (`norms_per_layer × hidden`) and biases; + the final norm + the vision
    /// tower. Linear-attention/SSM layers are counted as attention layers of the same
    /// shape, an approximation noted in [`Geometry::notes`] by the parser.
    pub fn params(&self) -> ParamCount {
        if let Some(t) = &self.gguf {
            return ParamCount {
                exact_total: Some(t.total_params),
                ..ParamCount::default()
            };
        }
        let h = self.hidden_size;
        let norm = if self.norm_bias { m(2, h) } else { h };
        let mut p = ParamCount {
            embedding: a(&[m(self.vocab_size, h), m(self.learned_positions, h)]),
            lm_head: if self.tie_word_embeddings {
                0
            } else {
                m(self.vocab_size, h)
            },
            small: norm, // final norm
            ..ParamCount::default()
        };
        for layer in &self.layers {
            let (attn, attn_small) = self.attention_params(layer.kv_heads);
            p.attention = p.attention.saturating_add(attn);
            p.small = p
                .small
                .saturating_add(attn_small)
                .saturating_add(m(self.norms_per_layer, norm));
            match (&self.moe, layer.moe) {
                (Some(moe), true) => {
                    let (e, e_bias) = self.mlp_params(moe.expert_intermediate_size);
                    p.experts = p.experts.saturating_add(m(moe.experts, e));
                    p.small = p.small.saturating_add(m(moe.experts, e_bias));
                    if moe.shared_intermediate_size > 0 {
                        let (s, s_bias) = self.mlp_params(moe.shared_intermediate_size);
                        p.shared_experts = p.shared_experts.saturating_add(s);
                        p.small = p.small.saturating_add(s_bias);
                    }
                    let gate = if moe.shared_expert_gate { h } else { 0 };
                    p.router = a(&[p.router, m(h, moe.experts), gate]);
                    if moe.router_bias {
                        p.small = p.small.saturating_add(moe.experts);
                    }
                }
                _ => {
                    let (d, d_bias) = self.mlp_params(self.intermediate_size);
                    p.mlp = p.mlp.saturating_add(d);
                    p.small = p.small.saturating_add(d_bias);
                }
            }
        }
        if let Some(v) = &self.vision {
            p.vision = v.params.saturating_add(v.projector_params);
        }
        p
    }

    /// Parameters one token uses: all but the routed experts it is not sent to,
    /// `total − experts × (1 − top_k / n_experts)`.
    pub fn active_params(&self) -> u64 {
        let p = self.params();
        match &self.moe {
            Some(moe) if moe.experts > 0 && p.exact_total.is_none() => {
                let unused = (p.experts as u128
                    * u128::from(moe.experts.saturating_sub(moe.experts_per_token))
                    / u128::from(moe.experts)) as u64;
                p.total().saturating_sub(unused)
            }
            _ => p.total(),
        }
    }

    /// Records where a field was read, for fact provenance.
    pub(crate) fn locate(&mut self, field: &str, locator: impl Into<String>) {
        self.locators.push((field.to_string(), locator.into()));
    }

    /// Where a field was read (`text_config.num_hidden_layers`), if recorded.
    pub fn locator(&self, field: &str) -> Option<&str> {
        self.locators
            .iter()
            .rev()
            .find(|(f, _)| f == field)
            .map(|(_, l)| l.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_geometry_counts_kv_layers() {
        let g = Geometry::uniform(32, 32, 8, 128);
        assert_eq!(g.kv_layer_count(), 32);
        assert_eq!(g.sliding_layer_count(), 0);
        assert_eq!(g.hidden_size, 4096);
    }

    #[test]
    fn uniform_geometry_bounds_hostile_layer_counts() {
        let g = Geometry::uniform(u64::MAX, 1, 1, 1);
        assert_eq!(g.layers.len() as u64, super::super::config::MAX_LAYERS);
    }

    #[test]
    fn llama_params_from_shapes() {
        // Llama-3.1-8B: the well-known 8,030,261,248.
        let mut g = Geometry::uniform(32, 32, 8, 128);
        g.intermediate_size = 14336;
        g.vocab_size = 128_256;
        assert_eq!(g.params().total(), 8_030_261_248);
        g.tie_word_embeddings = true;
        assert_eq!(g.params().total(), 8_030_261_248 - 128_256 * 4096);
    }
}
