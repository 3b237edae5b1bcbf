//! Model inputs: a model's geometry from a Hugging Face `config.json`, a GGUF header, or an
//! engine's log.
//!
//! - [`config`] and [`gguf`] read a model into a [`geometry::Geometry`];
//! - the arithmetic on it (KV bytes per token, weights, capacities), engine defaults, GPUs
//!   and `oomdoctor plan` live in [`crate::knowledge`].
//!
//! The diagnosis reads models through facts: [`geometry_facts`] turns a geometry into the
//! `model.*` facts of [`crate::facts::catalog::model::FACTS`], and [`geometry_from_facts`] rebuilds a geometry from the
//! ones an engine's log gave (llama.cpp prints `n_layer`, `n_head_kv`, `n_embd_head_k`).

pub mod config;
pub mod geometry;
pub mod gguf;

use crate::facts::evidence::{Facts, InputName, Provenance};
use crate::knowledge::memory;

pub use geometry::Geometry;

/// The `model.*` facts of a geometry. Sizes read from the file carry their key path
/// (`text_config.num_hidden_layers`, `llama.block_count`) as provenance; computed ones say
/// what they were computed from.
pub fn geometry_facts(g: &Geometry, input: &InputName) -> Facts {
    let mut f = Facts::new();
    let at = |field: &str, fallback: &str| {
        Provenance::at(
            input.clone(),
            g.locator(field).unwrap_or(fallback).to_string(),
        )
    };
    let computed = |what: &str| Provenance::at(input.clone(), format!("computed: {what}"));

    if let Some(n) = &g.name {
        f.set("model.name", n.as_str(), Some(at("name", "_name_or_path")));
    }
    let arch = if g.architecture.is_empty() {
        &g.model_type
    } else {
        &g.architecture
    };
    if !arch.is_empty() {
        f.set(
            "model.architecture",
            arch.as_str(),
            Some(at("architecture", "architectures")),
        );
    }
    let format = match g.format {
        geometry::ModelFormat::HfConfig => "hf-config",
        geometry::ModelFormat::Gguf => "gguf",
        geometry::ModelFormat::Log => "log",
    };
    f.set(
        "model.format",
        format,
        Some(Provenance::at(input.clone(), "file content")),
    );
    f.set(
        "model.layers",
        g.num_layers,
        Some(at("layers", "num_hidden_layers")),
    );
    f.set(
        "model.kv_layers",
        g.kv_layer_count(),
        Some(computed("layers with a KV cache")),
    );
    if g.num_attention_heads > 0 {
        f.set(
            "model.attention_heads",
            g.num_attention_heads,
            Some(at("attention_heads", "num_attention_heads")),
        );
    }
    f.set(
        "model.kv_heads",
        g.num_kv_heads,
        Some(at("kv_heads", "num_key_value_heads")),
    );
    f.set(
        "model.head_dim",
        g.head_dim,
        Some(at("head_dim", "hidden_size / num_attention_heads")),
    );
    if g.hidden_size > 0 {
        f.set(
            "model.hidden_size",
            g.hidden_size,
            Some(at("hidden_size", "hidden_size")),
        );
    }
    if g.vocab_size > 0 {
        f.set(
            "model.vocab_size",
            g.vocab_size,
            Some(at("vocab_size", "vocab_size")),
        );
    }
    if let Some(m) = g.max_context() {
        f.set(
            "model.max_position_embeddings",
            m,
            Some(at("max_position_embeddings", "max_position_embeddings")),
        );
    }
    if let Some(w) = g.sliding_window {
        f.set(
            "model.sliding_window",
            w,
            Some(at("sliding_window", "sliding_window")),
        );
        f.set(
            "model.sliding_layers",
            g.sliding_layer_count(),
            Some(computed("per-layer attention pattern")),
        );
    }
    if let Some(m) = &g.moe {
        f.set(
            "model.experts",
            m.experts,
            Some(at("experts", "num_experts")),
        );
        f.set(
            "model.experts_per_token",
            m.experts_per_token,
            Some(at("experts", "num_experts_per_tok")),
        );
        f.set(
            "model.active_params",
            g.active_params(),
            Some(computed("parameters less the experts a token skips")),
        );
    }
    if let Some(m) = &g.mla {
        f.set(
            "model.kv_lora_rank",
            m.kv_lora_rank,
            Some(at("kv_lora_rank", "kv_lora_rank")),
        );
    }
    if let Some(q) = &g.quant {
        f.set(
            "model.quantization",
            q.describe(),
            Some(at("quantization", "quantization_config")),
        );
    } else if let Some(t) = &g.gguf_file_type {
        f.set(
            "model.quantization",
            format!("gguf {t}"),
            Some(at("dtype", "general.file_type")),
        );
    }

    let params = g.params();
    let source = if params.exact_total.is_some() {
        "GGUF tensor table"
    } else {
        "the layer shapes"
    };
    f.set("model.params", params.total(), Some(computed(source)));
    let format = g.weight_format();
    f.set(
        "model.dtype",
        format.describe(),
        Some(at("dtype", "torch_dtype")),
    );
    let exact = g.gguf.as_ref().map(|t| t.total_bytes);
    let mut t = memory::Trace::new();
    let w = memory::weights_bytes(&params, &format, exact, &mut t);
    let how = t
        .steps()
        .first()
        .map(|s| s.formula.clone())
        .unwrap_or_default();
    f.set("model.weights_bytes", w, Some(computed(&how)));

    let dtype = memory::CacheDtype::from_activation(g.activation_dtype());
    let spec = memory::KvSpec::new(dtype);
    let mut t = memory::Trace::new();
    let bpt = memory::kv_bytes_per_token(g, &spec, &mut t);
    let how = t
        .steps()
        .first()
        .map(|s| s.formula.clone())
        .unwrap_or_default();
    f.set("model.kv_bytes_per_token", bpt, Some(computed(&how)));
    let beyond = memory::kv_bytes_per_token_beyond_windows(g, &spec);
    if beyond != bpt {
        f.set(
            "model.kv_bytes_per_token_beyond_window",
            beyond,
            Some(computed("full-attention layers only")),
        );
    }
    f.set(
        "model.kv_cache_dtype",
        dtype.name(),
        Some(computed("the model's dtype")),
    );
    f
}

/// A geometry from `model.*` facts an engine's log gave: needs `model.layers`,
/// `model.kv_heads` and `model.head_dim` (or `model.hidden_size` and
/// `model.attention_heads`). `model.kv_layers` below `model.layers` marks the difference as
/// layers without a cache, `model.sliding_layers` as sliding-window layers: which layers
/// they are does not change any total. Enough for KV arithmetic, not for parameter counts.
pub fn geometry_from_facts(facts: &Facts) -> Option<Geometry> {
    // Bounded like a config's sizes, so a garbled log line cannot feed absurd values on.
    let int = |name: &str| {
        facts
            .num(name)
            .filter(|v| v.is_finite() && *v >= 0.0 && *v <= config::MAX_CONTEXT as f64)
            .map(|v| v as u64)
    };
    let layers = int("model.layers").filter(|l| (1..=config::MAX_LAYERS).contains(l))?;
    let heads = int("model.attention_heads")
        .filter(|h| *h <= config::MAX_HEADS)
        .unwrap_or(0);
    let kv_heads = int("model.kv_heads")
        .or((heads > 0).then_some(heads))
        .filter(|h| *h <= config::MAX_HEADS)?;
    let head_dim = int("model.head_dim")
        .or_else(|| {
            let hidden = int("model.hidden_size")?;
            hidden.checked_div(heads)
        })
        .filter(|d| *d <= config::MAX_DIM)?;
    let mut g = Geometry::uniform(layers, heads.max(kv_heads), kv_heads, head_dim);
    if let Some(h) = int("model.hidden_size") {
        g.hidden_size = h;
    }
    g.vocab_size = int("model.vocab_size").unwrap_or(0);
    g.max_position_embeddings = int("model.max_position_embeddings");
    g.name = facts.str("model.name").map(str::to_string);
    g.architecture = facts.str("model.architecture").unwrap_or("").to_string();
    let n = g.layers.len();
    if let Some(kv_layers) = int("model.kv_layers").filter(|k| (*k as usize) < n) {
        for l in g.layers.iter_mut().take(n - kv_layers as usize) {
            l.attention = geometry::Attention::NoCache;
            l.kv_heads = 0;
        }
    }
    if let (Some(w), Some(s)) = (int("model.sliding_window"), int("model.sliding_layers")) {
        let mut left = s;
        for l in g.layers.iter_mut().rev() {
            if left == 0 {
                break;
            }
            if l.attention == geometry::Attention::Full {
                l.attention = geometry::Attention::Sliding { window: w };
                left -= 1;
            }
        }
        g.sliding_window = Some(w);
    }
    Some(g)
}
