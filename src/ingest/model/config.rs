//! Hugging Face `config.json` → [`Geometry`].
//!
//! Tolerant by design: unknown fields are ignored, the spellings of older architectures are
//! accepted (`n_layer`, `n_embd`, `multi_query`), multimodal configs are read through their
//! nested `text_config` / `llm_config` / `language_config`, and values a config leaves to
//! its class defaults (Llava's `text_config` often names only `model_type` and
//! `vocab_size`) are filled from the defaults of the few classes where that happens, with a
//! note saying so.
//!
//! Strict where it matters: sizes must be non-negative integers within generous bounds
//! ([`MAX_LAYERS`], ...), so a hostile config cannot make the arithmetic allocate or
//! overflow. Errors name the key and carry `code(oomdoctor::config::...)`.
//!
//! Per-layer attention is resolved here, in this order: an explicit `layer_types` list;
//! `layers_block_type` (Jamba, Zamba); Jamba's `attn_layer_period/offset`; Qwen3-Next's
//! `full_attention_interval`; Llama 4's chunked layers; Qwen's `use_sliding_window` +
//! `max_window_layers`; Gemma 2's alternation; `sliding_window_pattern` (Gemma 3,
//! Cohere 2); and a plain `sliding_window` on every layer (Mistral v0.1, Phi-3).

use serde_json::{Map, Value};

use super::geometry::{Attention, Geometry, Layer, Mla, ModelFormat, Moe, Vision};
use crate::knowledge::memory::{Dtype, Quant};

/// Most layers a model may declare (the deepest public models have under 200).
pub const MAX_LAYERS: u64 = 4096;
/// Bound on widths (hidden, intermediate, head dims).
pub const MAX_DIM: u64 = 1 << 24;
/// Bound on head counts.
pub const MAX_HEADS: u64 = 1 << 16;
/// Bound on vocabularies.
pub const MAX_VOCAB: u64 = 1 << 26;
/// Bound on expert counts.
pub const MAX_EXPERTS: u64 = 1 << 16;
/// Bound on context lengths and windows.
pub const MAX_CONTEXT: u64 = 1 << 40;
/// Largest config file read (real ones are a few KiB).
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// Why a config could not be read.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum ConfigError {
    #[error("{input}: not valid JSON (line {line}, column {column}): {message}")]
    #[diagnostic(
        code(oomdoctor::config::json),
        help("`--model` takes a Hugging Face config.json or a .gguf file")
    )]
    Json {
        input: String,
        line: usize,
        column: usize,
        message: String,
    },

    #[error("{input}: the top level of the config is not a JSON object")]
    #[diagnostic(code(oomdoctor::config::not_object))]
    NotObject { input: String },

    #[error("{input}: the config has no {field} (looked for {keys})")]
    #[diagnostic(
        code(oomdoctor::config::missing),
        help(
            "is this a model's config.json? tokenizer_config.json and generation_config.json do not describe the model"
        )
    )]
    Missing {
        input: String,
        field: &'static str,
        keys: String,
    },

    #[error("{input}: `{key}` is {value}, expected {expected}")]
    #[diagnostic(code(oomdoctor::config::value))]
    BadValue {
        input: String,
        key: String,
        value: String,
        expected: String,
    },
}

/// Reads a config from text. `input` names it in errors and notes.
pub fn parse_config(text: &str, input: &str) -> Result<Geometry, ConfigError> {
    let root: Value = serde_json::from_str(text).map_err(|e| ConfigError::Json {
        input: input.to_string(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    let Value::Object(root) = root else {
        return Err(ConfigError::NotObject {
            input: input.to_string(),
        });
    };
    let (text_cfg, prefix) = nested_text_config(&root);
    let cfg = Cfg {
        input,
        text: text_cfg,
        root: &root,
        prefix,
    };
    build(&cfg)
}

/// The sub-object describing the language model of a multimodal config, and its key path.
fn nested_text_config(root: &Map<String, Value>) -> (&Map<String, Value>, String) {
    for key in [
        "text_config",
        "llm_config",
        "language_config",
        "text_model_config",
    ] {
        if let Some(Value::Object(m)) = root.get(key) {
            // Some processors write an empty `text_config` next to a flat config.
            if m.contains_key("num_hidden_layers")
                || m.contains_key("hidden_size")
                || m.contains_key("model_type")
            {
                return (m, format!("{key}."));
            }
        }
    }
    if let Some(Value::Object(thinker)) = root.get("thinker_config") {
        if let Some(Value::Object(m)) = thinker.get("text_config") {
            return (m, "thinker_config.text_config.".to_string());
        }
    }
    (root, String::new())
}

/// Typed access to the language-model part of a config, with fall-back to the top level
/// for the keys multimodal configs keep there (dtype, quantisation, tying).
struct Cfg<'a> {
    input: &'a str,
    text: &'a Map<String, Value>,
    root: &'a Map<String, Value>,
    prefix: String,
}

fn as_u64(v: &Value) -> Option<u64> {
    if let Some(u) = v.as_u64() {
        return Some(u);
    }
    let f = v.as_f64()?;
    (f >= 0.0 && f.fract() == 0.0 && f < 1.8e19).then_some(f as u64)
}

impl Cfg<'_> {
    /// The first non-null value among `keys`, in the text config, then (when `fallback`) at
    /// the top level; with its key path.
    fn raw(&self, keys: &[&str], fallback: bool) -> Option<(&Value, String)> {
        for k in keys {
            if let Some(v) = self.text.get(*k).filter(|v| !v.is_null()) {
                return Some((v, format!("{}{k}", self.prefix)));
            }
        }
        if fallback && !self.prefix.is_empty() {
            for k in keys {
                if let Some(v) = self.root.get(*k).filter(|v| !v.is_null()) {
                    return Some((v, (*k).to_string()));
                }
            }
        }
        None
    }

    fn bad(&self, key: &str, v: &Value, expected: &str) -> ConfigError {
        // Cut at a character boundary: the value is the stranger's text, and a multi-byte
        // character across byte 60 made `String::truncate` panic.
        let value = crate::render::text::clip(&v.to_string(), 60);
        ConfigError::BadValue {
            input: self.input.to_string(),
            key: key.to_string(),
            value,
            expected: expected.to_string(),
        }
    }

    /// An unsigned integer in `0..=max`.
    fn uint(
        &self,
        keys: &[&str],
        fallback: bool,
        max: u64,
    ) -> Result<Option<(u64, String)>, ConfigError> {
        match self.raw(keys, fallback) {
            None => Ok(None),
            Some((v, key)) => match as_u64(v) {
                Some(n) if n <= max => Ok(Some((n, key))),
                _ => Err(self.bad(&key, v, &format!("an integer from 0 to {max}"))),
            },
        }
    }

    fn boolean(&self, keys: &[&str], fallback: bool) -> Option<bool> {
        self.raw(keys, fallback).and_then(|(v, _)| v.as_bool())
    }

    fn string(&self, keys: &[&str], fallback: bool) -> Option<(&str, String)> {
        self.raw(keys, fallback)
            .and_then(|(v, k)| v.as_str().map(|s| (s, k)))
    }

    fn missing(&self, field: &'static str, keys: &[&str]) -> ConfigError {
        ConfigError::Missing {
            input: self.input.to_string(),
            field,
            keys: keys.join(", "),
        }
    }
}

/// Per-family habits the config does not spell out.
struct Family {
    gated: bool,
    norm_bias: bool,
    norms: u64,
    qkv_bias: bool,
    o_bias: bool,
    mlp_bias: bool,
    tie_default: bool,
    qk_norm: bool,
    learned_positions: bool,
    sinks: bool,
    known: bool,
}

fn family(model_type: &str) -> Family {
    let llama = Family {
        gated: true,
        norm_bias: false,
        norms: 2,
        qkv_bias: false,
        o_bias: false,
        mlp_bias: false,
        tie_default: false,
        qk_norm: false,
        learned_positions: false,
        sinks: false,
        known: true,
    };
    let gpt2 = Family {
        gated: false,
        norm_bias: true,
        qkv_bias: true,
        o_bias: true,
        mlp_bias: true,
        tie_default: true,
        learned_positions: true,
        ..llama
    };
    match model_type {
        "llama" | "mistral" | "mixtral" | "deepseek_v2" | "deepseek_v3" | "kimi_k2" | "phi3"
        | "phimoe" | "cohere" | "cohere2" | "olmo" | "olmo2" | "granite" | "granitemoe"
        | "internlm2" | "internlm3" | "yi" | "baichuan" | "minicpm" | "llama4_text" | "llama4"
        | "exaone" | "smollm3" | "ernie4_5" | "hunyuan" | "glm" | "glm4" | "jamba" | "nemotron"
        | "dbrx" | "mistral3" | "ministral" => llama,
        "qwen2" | "qwen2_moe" | "qwen2_vl" | "qwen2_5_vl" | "qwen2_audio" => Family {
            qkv_bias: true,
            ..llama
        },
        "qwen3" | "qwen3_moe" | "qwen3_next" | "qwen3_vl" | "qwen3_vl_moe" => Family {
            qk_norm: true,
            ..llama
        },
        "gemma" => Family {
            tie_default: true,
            ..llama
        },
        "gemma2" => Family {
            tie_default: true,
            norms: 4,
            ..llama
        },
        "gemma3" | "gemma3_text" => Family {
            tie_default: true,
            norms: 4,
            qk_norm: true,
            ..llama
        },
        "gpt_oss" => Family {
            qkv_bias: true,
            o_bias: true,
            mlp_bias: true,
            sinks: true,
            ..llama
        },
        "gpt2" | "gpt_bigcode" | "opt" => gpt2,
        "gpt_neox" => Family {
            tie_default: false,
            learned_positions: false,
            ..gpt2
        },
        "phi" => Family {
            norms: 1,
            tie_default: false,
            learned_positions: false,
            ..gpt2
        },
        "gptj" => Family {
            norms: 1,
            qkv_bias: false,
            o_bias: false,
            tie_default: false,
            learned_positions: false,
            ..gpt2
        },
        "falcon" => Family {
            qkv_bias: false,
            o_bias: false,
            mlp_bias: false,
            learned_positions: false,
            ..gpt2
        },
        "bloom" | "starcoder2" => Family {
            learned_positions: false,
            ..gpt2
        },
        _ => Family {
            known: false,
            ..llama
        },
    }
}

/// Class defaults for keys that real configs leave out (values of the transformers config
/// classes). Only the families whose nested configs are commonly minimal.
fn class_default(model_type: &str, field: &str) -> Option<u64> {
    Some(match (model_type, field) {
        ("llama", "hidden_size") => 4096,
        ("llama", "intermediate_size") => 11008,
        ("llama", "num_hidden_layers") => 32,
        ("llama", "num_attention_heads") => 32,
        ("llama", "vocab_size") => 32000,
        ("llama", "max_position_embeddings") => 2048,
        ("mistral", "hidden_size") => 4096,
        ("mistral", "intermediate_size") => 14336,
        ("mistral", "num_hidden_layers") => 32,
        ("mistral", "num_attention_heads") => 32,
        ("mistral", "num_key_value_heads") => 8,
        ("mistral", "vocab_size") => 32000,
        ("mistral", "max_position_embeddings") => 131_072,
        ("gemma3_text", "hidden_size") => 2304,
        ("gemma3_text", "intermediate_size") => 9216,
        ("gemma3_text", "num_hidden_layers") => 26,
        ("gemma3_text", "num_attention_heads") => 8,
        ("gemma3_text", "num_key_value_heads") => 4,
        ("gemma3_text", "head_dim") => 256,
        ("gemma3_text", "vocab_size") => 262_208,
        ("gemma3_text", "max_position_embeddings") => 131_072,
        ("gemma3_text", "sliding_window") => 4096,
        ("gemma3_text", "sliding_window_pattern") => 6,
        _ => return None,
    })
}

const LAYER_KEYS: &[&str] = &["num_hidden_layers", "n_layer", "n_layers", "num_layers"];
const HIDDEN_KEYS: &[&str] = &["hidden_size", "n_embd", "d_model", "model_dim", "dim"];
const HEAD_KEYS: &[&str] = &["num_attention_heads", "n_head", "n_heads", "num_heads"];
const KV_KEYS: &[&str] = &[
    "num_key_value_heads",
    "num_kv_heads",
    "n_head_kv",
    "num_kv_head",
];
const INTER_KEYS: &[&str] = &[
    "intermediate_size",
    "n_inner",
    "ffn_hidden_size",
    "ffn_dim",
    "d_ff",
];
const VOCAB_KEYS: &[&str] = &["vocab_size", "padded_vocab_size", "n_vocab"];
const MAXPOS_KEYS: &[&str] = &[
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "max_sequence_length",
    "n_ctx",
];

/// A required size: from the config, else the class default (noted), else an error.
fn required(
    cfg: &Cfg,
    g: &mut Geometry,
    field: &'static str,
    keys: &[&str],
    max: u64,
) -> Result<u64, ConfigError> {
    if let Some((v, key)) = cfg.uint(keys, false, max)? {
        g.locate(field, key);
        return Ok(v);
    }
    match class_default(&g.model_type, keys[0]) {
        Some(v) => {
            g.notes.push(format!(
                "{} not in the config: using the {} class default {v}",
                keys[0], g.model_type
            ));
            g.locate(field, format!("{}{} (class default)", cfg.prefix, keys[0]));
            Ok(v)
        }
        None => Err(cfg.missing(field, keys)),
    }
}

/// An optional size: from the config, else the class default.
fn optional(
    cfg: &Cfg,
    g: &mut Geometry,
    field: &str,
    keys: &[&str],
    fallback: bool,
    max: u64,
) -> Result<Option<u64>, ConfigError> {
    if let Some((v, key)) = cfg.uint(keys, fallback, max)? {
        g.locate(field, key);
        return Ok(Some(v));
    }
    Ok(class_default(&g.model_type, keys[0]).inspect(|_| {
        g.locate(field, format!("{}{} (class default)", cfg.prefix, keys[0]));
    }))
}

fn build(cfg: &Cfg) -> Result<Geometry, ConfigError> {
    let root_type = cfg
        .root
        .get("model_type")
        .and_then(Value::as_str)
        .unwrap_or("");
    let model_type = cfg
        .string(&["model_type"], false)
        .map(|(s, _)| s)
        .unwrap_or(root_type)
        .to_string();
    let architecture = cfg
        .root
        .get("architectures")
        .or_else(|| cfg.text.get("architectures"))
        .and_then(|a| a.as_array())
        .and_then(|a| a.first())
        .and_then(Value::as_str)
        .unwrap_or(&model_type)
        .to_string();

    let mut g = Geometry::uniform(0, 0, 0, 0);
    g.format = ModelFormat::HfConfig;
    g.model_type = model_type.clone();
    g.architecture = architecture;
    g.name = cfg
        .root
        .get("_name_or_path")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string);

    let fam = family(&model_type);
    if !fam.known {
        g.notes.push(format!(
            "model_type `{model_type}` is not one oomdoctor knows: parameters counted as a Llama-style decoder (gated MLP, RMSNorm, no biases)"
        ));
    }

    let layers = required(cfg, &mut g, "layers", LAYER_KEYS, MAX_LAYERS)?;
    let hidden = required(cfg, &mut g, "hidden_size", HIDDEN_KEYS, MAX_DIM)?;
    let heads = required(cfg, &mut g, "attention_heads", HEAD_KEYS, MAX_HEADS)?;
    if layers == 0 || hidden == 0 || heads == 0 {
        let (key, v) = if layers == 0 {
            ("num_hidden_layers", 0)
        } else if hidden == 0 {
            ("hidden_size", 0)
        } else {
            ("num_attention_heads", 0)
        };
        return Err(cfg.bad(key, &Value::from(v), "a positive integer"));
    }

    // Absurd head geometry is refused with its key rather than quietly replaced: zero KV
    // heads (or more KV heads than query heads) and a zero head_dim make every KV-cache
    // number that follows wrong.
    if let Some((v, key)) = cfg.uint(KV_KEYS, false, MAX_HEADS)? {
        if v == 0 || v > heads {
            return Err(cfg.bad(
                &key,
                &Value::from(v),
                &format!("an integer from 1 to the {heads} attention heads"),
            ));
        }
    }
    if let Some((0, key)) = cfg.uint(
        &["head_dim", "attention_head_dim", "kv_channels"],
        false,
        MAX_DIM,
    )? {
        return Err(cfg.bad(&key, &Value::from(0u64), "a positive integer"));
    }

    // KV heads: explicit, multi-query flags, or one per attention head (plain MHA).
    let mut kv_heads = match optional(cfg, &mut g, "kv_heads", KV_KEYS, false, MAX_HEADS)? {
        Some(k) => k,
        None => {
            let mq = cfg.boolean(&["multi_query"], false).unwrap_or(
                model_type == "falcon"
                    && !cfg
                        .boolean(&["new_decoder_architecture"], false)
                        .unwrap_or(false),
            );
            if mq {
                g.locate("kv_heads", format!("{}multi_query", cfg.prefix));
                1
            } else if cfg.boolean(&["multi_query_attention"], false) == Some(true) {
                cfg.uint(&["multi_query_group_num"], false, MAX_HEADS)?
                    .map(|(v, _)| v)
                    .unwrap_or(1)
            } else {
                heads
            }
        }
    };
    if kv_heads == 0 {
        kv_heads = heads;
    }
    if heads % kv_heads != 0 {
        g.notes.push(format!(
            "{heads} attention heads are not a multiple of {kv_heads} KV heads; taken as given"
        ));
    }

    let head_dim = match optional(
        cfg,
        &mut g,
        "head_dim",
        &["head_dim", "attention_head_dim", "kv_channels"],
        false,
        MAX_DIM,
    )? {
        Some(d) if d > 0 => d,
        _ => {
            if hidden % heads != 0 {
                g.notes.push(format!(
                    "hidden_size {hidden} is not a multiple of {heads} heads: head_dim rounded down"
                ));
            }
            hidden / heads
        }
    };

    let intermediate = match optional(cfg, &mut g, "intermediate_size", INTER_KEYS, false, MAX_DIM)?
    {
        Some(i) => i,
        None => {
            g.notes
                .push("no intermediate_size: assuming 4 × hidden_size".to_string());
            4 * hidden
        }
    };
    let vocab = match optional(cfg, &mut g, "vocab_size", VOCAB_KEYS, true, MAX_VOCAB)? {
        Some(v) => v,
        None => {
            g.notes
                .push("no vocab_size: embeddings not counted".to_string());
            0
        }
    };

    g.hidden_size = hidden;
    g.num_layers = layers;
    g.num_attention_heads = heads;
    g.num_kv_heads = kv_heads;
    g.head_dim = head_dim;
    g.v_head_dim = head_dim;
    g.intermediate_size = intermediate;
    g.vocab_size = vocab;

    // Tying: explicit at either level, else the class default.
    g.tie_word_embeddings = cfg
        .boolean(&["tie_word_embeddings"], true)
        .unwrap_or(fam.tie_default);
    let all_bias = cfg.boolean(&["bias", "use_bias"], false);
    let attn_bias = cfg.boolean(&["attention_bias"], false);
    g.qkv_bias = attn_bias.or(all_bias).unwrap_or(fam.qkv_bias);
    g.o_bias = if model_type.starts_with("qwen2") {
        false
    } else {
        attn_bias.or(all_bias).unwrap_or(fam.o_bias)
    };
    g.mlp_bias = cfg
        .boolean(&["mlp_bias"], false)
        .or(all_bias)
        .unwrap_or(fam.mlp_bias);
    g.gated_mlp = fam.gated;
    g.norm_bias = fam.norm_bias;
    g.norms_per_layer = if model_type == "falcon"
        && cfg.boolean(&["new_decoder_architecture"], false) == Some(true)
    {
        2
    } else {
        fam.norms
    };
    g.qk_norm = fam.qk_norm;
    g.attention_sinks = fam.sinks;

    read_dtype_and_quant(cfg, &mut g)?;
    read_context(cfg, &mut g, fam.learned_positions)?;
    read_mla(cfg, &mut g)?;
    let moe_rule = read_moe(cfg, &mut g)?;
    read_layers(cfg, &mut g, moe_rule)?;
    read_vision(cfg, &mut g)?;

    if g.layers.iter().any(|l| l.attention == Attention::NoCache) {
        g.notes.push(
            "layers without a KV cache (linear attention / SSM) are counted in the parameters as attention layers of the same width: parameter count approximate".to_string(),
        );
    }
    Ok(g)
}

fn read_dtype_and_quant(cfg: &Cfg, g: &mut Geometry) -> Result<(), ConfigError> {
    if let Some((s, key)) = cfg.string(&["torch_dtype", "dtype"], true) {
        match Dtype::parse(s) {
            Some(d) => {
                g.dtype = Some(d);
                g.locate("dtype", key);
            }
            None => g
                .notes
                .push(format!("unknown {key} `{s}`: assuming bfloat16")),
        }
    }
    let Some((Value::Object(q), key)) = cfg.raw(&["quantization_config", "quantization"], true)
    else {
        return Ok(());
    };
    g.locate("quantization", key.clone());
    let method = q
        .get("quant_method")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_ascii_lowercase();
    let num = |k: &str| q.get(k).and_then(as_u64);
    let group = |k: &str| -> Option<u64> {
        // -1 means per channel in GPTQ.
        q.get(k)
            .and_then(Value::as_i64)
            .filter(|g| *g > 0)
            .map(|g| g as u64)
    };
    let bits = num("bits")
        .or_else(|| num("w_bit"))
        .map(|b| b.min(32) as u32);
    let mut quant = match method.as_str() {
        "gptq" | "awq" | "autoround" | "auto-round" | "gptqmodel" => Some(Quant::gptq_like(
            &method,
            bits.unwrap_or(4),
            group("group_size").or_else(|| group("q_group_size")),
        )),
        "bitsandbytes" => {
            if q.get("load_in_4bit").and_then(Value::as_bool) == Some(true) {
                let kind = q
                    .get("bnb_4bit_quant_type")
                    .and_then(Value::as_str)
                    .unwrap_or("nf4")
                    .to_string();
                let dq = q
                    .get("bnb_4bit_use_double_quant")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                Some(Quant::bnb_4bit(&kind, dq))
            } else {
                Some(Quant::bnb_8bit())
            }
        }
        "fp8" | "fbgemm_fp8" => {
            let block = q
                .get("weight_block_size")
                .and_then(Value::as_array)
                .and_then(|b| {
                    let dims: Vec<u64> = b.iter().filter_map(as_u64).collect();
                    (dims.len() == b.len() && !dims.is_empty())
                        .then(|| dims.iter().fold(1u64, |a, d| a.saturating_mul(*d)))
                });
            Some(Quant::fp8(block))
        }
        "mxfp4" => Some(Quant {
            experts_only: true,
            ..Quant::mxfp4()
        }),
        "compressed-tensors" => compressed_tensors(q),
        _ => bits.map(|b| Quant::gptq_like(&method, b, group("group_size"))),
    };
    match &mut quant {
        Some(qt) => {
            if let Some(skip) = q.get("modules_to_not_convert").and_then(Value::as_array) {
                if skip.iter().filter_map(Value::as_str).any(|s| s.contains("self_attn") || s.ends_with(".attn")) {
                    qt.skip_attention = true;
                }
            }
            g.quant = quant;
        }
        None => g.notes.push(format!(
            "quantization method `{method}` is not modelled: weights counted at the checkpoint dtype (an overestimate)"
        )),
    }
    Ok(())
}

/// `compressed-tensors` (llm-compressor): the first config group's weight scheme.
fn compressed_tensors(q: &Map<String, Value>) -> Option<Quant> {
    let groups = q.get("config_groups")?.as_object()?;
    let w = groups
        .values()
        .find_map(|g| g.get("weights").and_then(Value::as_object))?;
    let bits = w.get("num_bits").and_then(as_u64)?.min(32) as u32;
    let is_float = w.get("type").and_then(Value::as_str) == Some("float");
    let strategy = w
        .get("strategy")
        .and_then(Value::as_str)
        .unwrap_or("tensor");
    let symmetric = w.get("symmetric").and_then(Value::as_bool).unwrap_or(true);
    let group = w.get("group_size").and_then(as_u64).filter(|g| *g > 0);
    let mut quant = match (is_float, bits, strategy) {
        (true, 8, "block") => {
            let block = w.get("block_structure").and_then(Value::as_array).map(|b| {
                b.iter()
                    .filter_map(as_u64)
                    .fold(1u64, |a, d| a.saturating_mul(d))
            });
            Quant::fp8(block)
        }
        (true, 8, _) => Quant::fp8(None),
        (_, b, "group") => {
            // Scales are 16-bit per group; asymmetric schemes add a zero point per group.
            let g = group.unwrap_or(128);
            let zero = if symmetric { 0.0 } else { f64::from(b) };
            let mut qt = Quant::gptq_like("compressed-tensors", b, Some(g));
            qt.bits_per_weight = f64::from(b) + (16.0 + zero) / g as f64;
            qt.basis = format!(
                "{b} bits + 16-bit scale{} per {g} weights",
                if symmetric { "" } else { " + zero point" }
            );
            qt
        }
        (_, b, _) => Quant::gptq_like("compressed-tensors", b, None),
    };
    quant.method = "compressed-tensors".to_string();
    Some(quant)
}

fn read_context(cfg: &Cfg, g: &mut Geometry, learned_positions: bool) -> Result<(), ConfigError> {
    let max_pos = optional(
        cfg,
        g,
        "max_position_embeddings",
        MAXPOS_KEYS,
        true,
        MAX_CONTEXT,
    )?;
    g.max_position_embeddings = max_pos;
    if learned_positions {
        g.learned_positions = max_pos.unwrap_or(0);
    }
    let rope = cfg
        .raw(&["rope_scaling", "rope_parameters"], false)
        .and_then(|(v, _)| v.as_object());
    if let Some(r) = rope {
        let kind = r
            .get("rope_type")
            .or_else(|| r.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("default");
        g.rope_scaling = Some(kind.to_string());
        // vLLM's derived max length: YaRN extends `original_max_position_embeddings` by
        // `factor`. llama3/longrope configs already state the extended length.
        if kind == "yarn" {
            let factor = r.get("factor").and_then(Value::as_f64).unwrap_or(1.0);
            if let Some(orig) = r.get("original_max_position_embeddings").and_then(as_u64) {
                let scaled = (orig as f64 * factor).floor();
                if scaled.is_finite() && scaled >= 0.0 && scaled <= MAX_CONTEXT as f64 {
                    g.rope_scaled_context = Some(scaled as u64);
                }
            }
        }
    }
    Ok(())
}

fn read_mla(cfg: &Cfg, g: &mut Geometry) -> Result<(), ConfigError> {
    let Some((rank, key)) = cfg.uint(&["kv_lora_rank"], false, MAX_DIM)? else {
        return Ok(());
    };
    let get = |k: &str| cfg.uint(&[k], false, MAX_DIM).map(|v| v.map(|(n, _)| n));
    let rope = get("qk_rope_head_dim")?.unwrap_or(64);
    let nope = get("qk_nope_head_dim")?.unwrap_or(128);
    let v = get("v_head_dim")?.unwrap_or(128);
    let q_lora = get("q_lora_rank")?;
    g.mla = Some(Mla {
        kv_lora_rank: rank,
        qk_rope_head_dim: rope,
        qk_nope_head_dim: nope,
        v_head_dim: v,
        q_lora_rank: q_lora,
    });
    g.locate("kv_lora_rank", key);
    // MLA heads: K is nope + rope wide, V is v_head_dim (used by expanded caches).
    g.head_dim = nope + rope;
    g.v_head_dim = v;
    g.num_kv_heads = g.num_attention_heads;
    Ok(())
}

/// Which layers are MoE: decided after the layer count is known.
enum MoeRule {
    None,
    /// DeepSeek: `i >= first_k_dense_replace && i % moe_layer_freq == 0`.
    DenseFirst {
        first_dense: u64,
        freq: u64,
    },
    /// Qwen2-MoE: `(i + 1) % decoder_sparse_step == 0 && i ∉ mlp_only_layers`.
    SparseStep {
        step: u64,
        dense: Vec<u64>,
    },
    /// Jamba: `i % period == offset`.
    Period {
        period: u64,
        offset: u64,
    },
}

fn read_moe(cfg: &Cfg, g: &mut Geometry) -> Result<MoeRule, ConfigError> {
    let experts_keys = [
        "num_local_experts",
        "n_routed_experts",
        "num_experts",
        "moe_num_experts",
        "num_experts_local",
    ];
    let Some((experts, key)) = cfg.uint(&experts_keys, false, MAX_EXPERTS)? else {
        return Ok(MoeRule::None);
    };
    if experts <= 1 {
        return Ok(MoeRule::None);
    }
    g.locate("experts", key);
    let u = |keys: &[&str]| cfg.uint(keys, false, MAX_DIM).map(|v| v.map(|(n, _)| n));
    // Bounded by the expert bound: no model routes a token to more experts than it has.
    let top_k_keys = [
        "num_experts_per_tok",
        "experts_per_token",
        "moe_top_k",
        "top_k",
        "num_selected_experts",
    ];
    let top_k = cfg
        .uint(&top_k_keys, false, MAX_EXPERTS)?
        .map(|(n, _)| n)
        .unwrap_or(2);
    let expert_inter =
        u(&["moe_intermediate_size", "expert_intermediate_size"])?.unwrap_or(g.intermediate_size);
    let shared = match u(&["shared_expert_intermediate_size"])? {
        Some(s) => s,
        None => u(&["n_shared_experts", "num_shared_experts"])?
            .unwrap_or(0)
            .saturating_mul(expert_inter),
    };
    let shared_gate = shared > 0
        && (g.model_type.starts_with("qwen2_moe") || g.model_type.starts_with("qwen3_next"));
    g.moe = Some(Moe {
        experts,
        experts_per_token: top_k,
        expert_intermediate_size: expert_inter,
        shared_intermediate_size: shared,
        shared_expert_gate: shared_gate,
        router_bias: g.model_type == "gpt_oss",
    });
    if let Some(first) = u(&["first_k_dense_replace"])? {
        let freq = u(&["moe_layer_freq"])?.unwrap_or(1).max(1);
        return Ok(MoeRule::DenseFirst {
            first_dense: first,
            freq,
        });
    }
    if let Some(period) = u(&["expert_layer_period"])? {
        let offset = u(&["expert_layer_offset"])?.unwrap_or(0);
        return Ok(MoeRule::Period {
            period: period.max(1),
            offset,
        });
    }
    let step = u(&["decoder_sparse_step"])?.unwrap_or(1).max(1);
    let dense: Vec<u64> = cfg
        .raw(&["mlp_only_layers"], false)
        .and_then(|(v, _)| v.as_array())
        .map(|a| {
            a.iter()
                .filter_map(as_u64)
                .take(MAX_LAYERS as usize)
                .collect()
        })
        .unwrap_or_default();
    Ok(MoeRule::SparseStep { step, dense })
}

/// Maps a `layer_types` entry to an attention kind.
fn layer_kind(name: &str, window: Option<u64>, chunk: Option<u64>) -> Option<Attention> {
    let n = name.to_ascii_lowercase();
    Some(match n.as_str() {
        "full_attention" | "attention" | "global" | "global_attention" | "full" | "hybrid" => {
            Attention::Full
        }
        "sliding_attention" | "sliding" | "local" | "local_attention" | "sliding_window" => window
            .map(|w| Attention::Sliding { window: w })
            .unwrap_or(Attention::Full),
        "chunked_attention" => chunk
            .or(window)
            .map(|w| Attention::Sliding { window: w })
            .unwrap_or(Attention::Full),
        "linear_attention" | "mamba" | "mamba2" | "ssm" | "conv" | "recurrent" | "rwkv"
        | "linear" | "deltanet" | "gated_deltanet" | "short_conv" => Attention::NoCache,
        _ => return None,
    })
}

fn read_layers(cfg: &Cfg, g: &mut Geometry, moe_rule: MoeRule) -> Result<(), ConfigError> {
    let n = g.num_layers;
    let window = match optional(
        cfg,
        g,
        "sliding_window",
        &["sliding_window", "sliding_window_size"],
        false,
        MAX_CONTEXT,
    )? {
        Some(w) if w > 0 => Some(w),
        _ => None,
    };
    let chunk = cfg
        .uint(&["attention_chunk_size"], false, MAX_CONTEXT)?
        .map(|(c, _)| c)
        .filter(|c| *c > 0);
    let mut kinds: Vec<Attention> = vec![Attention::Full; n as usize];

    let list = cfg
        .raw(&["layer_types", "layers_block_type"], false)
        .and_then(|(v, k)| v.as_array().map(|a| (a, k)));
    let uint = |keys: &[&str]| cfg.uint(keys, false, MAX_LAYERS).map(|v| v.map(|(x, _)| x));
    if let Some((arr, key)) = list {
        if arr.len() as u64 == n {
            for (i, item) in arr.iter().enumerate() {
                let name = item.as_str().unwrap_or("");
                match (layer_kind(name, window, chunk), kinds.get_mut(i)) {
                    (Some(k), Some(slot)) => *slot = k,
                    _ => {
                        g.notes.push(format!("{key}[{i}] = `{name}` is not a known layer type: counted as full attention"));
                    }
                }
            }
            g.locate("layer_types", key);
        } else {
            g.notes.push(format!(
                "{key} has {} entries for {n} layers: ignored",
                arr.len()
            ));
        }
    } else if let Some(period) = uint(&["attn_layer_period"])? {
        // Jamba: attention every `period` layers at `offset`, Mamba elsewhere.
        let offset = uint(&["attn_layer_offset"])?.unwrap_or(0);
        let period = period.max(1);
        for (i, k) in kinds.iter_mut().enumerate() {
            if i as u64 % period != offset {
                *k = Attention::NoCache;
            }
        }
    } else if let Some(interval) = uint(&["full_attention_interval"])? {
        // Qwen3-Next: full attention on every `interval`-th layer, linear attention between.
        let interval = interval.max(1);
        for (i, k) in kinds.iter_mut().enumerate() {
            if (i as u64 + 1) % interval != 0 {
                *k = Attention::NoCache;
            }
        }
    } else if let (Some(c), true) = (chunk, g.model_type.starts_with("llama4")) {
        // Llama 4: RoPE layers use chunked attention; every 4th (NoPE) layer is global.
        let nope: Option<Vec<u64>> = cfg
            .raw(&["no_rope_layers"], false)
            .and_then(|(v, _)| v.as_array())
            .filter(|a| a.len() as u64 == n)
            .map(|a| a.iter().map(|x| as_u64(x).unwrap_or(1)).collect());
        for (i, k) in kinds.iter_mut().enumerate() {
            let uses_rope = match &nope {
                Some(v) => v.get(i).copied().unwrap_or(1) != 0,
                None => (i + 1) % 4 != 0,
            };
            if uses_rope {
                *k = Attention::Sliding { window: c };
            }
        }
    } else if let Some(w) = window {
        let sliding = Attention::Sliding { window: w };
        let use_sw = cfg.boolean(&["use_sliding_window"], false);
        let pattern = optional(
            cfg,
            g,
            "sliding_window_pattern",
            &["sliding_window_pattern", "_sliding_window_pattern"],
            false,
            MAX_LAYERS,
        )?;
        if let Some(use_sw) = use_sw {
            // Qwen: the first `max_window_layers` layers stay full, the rest slide.
            if use_sw {
                let first_full = uint(&["max_window_layers"])?.unwrap_or(0);
                for (i, k) in kinds.iter_mut().enumerate() {
                    if i as u64 >= first_full {
                        *k = sliding;
                    }
                }
            }
        } else if g.model_type == "gemma2" {
            // Gemma 2: even layers slide, odd layers are global.
            for (i, k) in kinds.iter_mut().enumerate() {
                if i % 2 == 0 {
                    *k = sliding;
                }
            }
        } else if let Some(p) = pattern.filter(|p| *p > 0) {
            // Gemma 3 / Cohere 2: every `p`-th layer is global.
            for (i, k) in kinds.iter_mut().enumerate() {
                if (i as u64 + 1) % p != 0 {
                    *k = sliding;
                }
            }
        } else {
            // Mistral v0.1, Phi-3, Starcoder2: one window on every layer.
            kinds.iter_mut().for_each(|k| *k = sliding);
        }
    }

    g.layers = kinds
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let i = i as u64;
            let moe = match &moe_rule {
                MoeRule::None => false,
                MoeRule::DenseFirst { first_dense, freq } => i >= *first_dense && i % freq == 0,
                MoeRule::SparseStep { step, dense } => (i + 1) % step == 0 && !dense.contains(&i),
                MoeRule::Period { period, offset } => i % period == *offset,
            };
            Layer {
                attention: *a,
                kv_heads: if *a == Attention::NoCache {
                    0
                } else {
                    g.num_kv_heads
                },
                moe,
            }
        })
        .collect();
    g.sliding_window = g.layers.iter().find_map(|l| match l.attention {
        Attention::Sliding { window } => Some(window),
        _ => None,
    });
    Ok(())
}

/// Vision towers: CLIP and SigLIP counted exactly from their config (they are standard
/// ViTs), Qwen2-VL's approximately; the Llava and Gemma 3 projectors exactly. Sizes are
/// bounded (2^20) and the arithmetic is done in `u128`, so no config can overflow it.
fn read_vision(cfg: &Cfg, g: &mut Geometry) -> Result<(), ConfigError> {
    let Some(Value::Object(v)) = cfg.root.get("vision_config") else {
        return Ok(());
    };
    let get = |k: &str| {
        v.get(k)
            .and_then(as_u64)
            .filter(|x| *x <= 1 << 20)
            .map(u128::from)
    };
    let vtype = v.get("model_type").and_then(Value::as_str).unwrap_or("");
    let root_type = cfg
        .root
        .get("model_type")
        .and_then(Value::as_str)
        .unwrap_or("");
    let text_hidden = u128::from(g.hidden_size);
    let sat = |x: u128| u64::try_from(x).unwrap_or(u64::MAX);

    let (params, basis, vision_hidden) = match (
        get("hidden_size"),
        get("num_hidden_layers"),
        get("intermediate_size"),
    ) {
        (Some(h), Some(l), Some(i))
            if vtype.contains("clip") || vtype.contains("siglip") || vtype.is_empty() =>
        {
            let patch = get("patch_size").unwrap_or(14).max(1);
            let image = get("image_size").unwrap_or(224);
            let channels = get("num_channels").unwrap_or(3);
            let patches = (image / patch) * (image / patch);
            // Per layer: q, k, v, o with biases; fc1, fc2 with biases; two LayerNorms.
            let per_layer = 4 * (h * h + h) + (h * i + i) + (i * h + h) + 4 * h;
            let clip = vtype.contains("clip");
            let (embed, norms) = if clip {
                // No conv bias; class token; one extra position; pre and post LayerNorm.
                (channels * patch * patch * h + h + (patches + 1) * h, 4 * h)
            } else {
                (channels * patch * patch * h + h + patches * h, 2 * h)
            };
            // SigLIP's attention-pooling head, unless disabled (Gemma 3 disables it).
            let use_head = v
                .get("vision_use_head")
                .and_then(Value::as_bool)
                .unwrap_or(!root_type.is_empty());
            let head = if !clip && use_head {
                h + 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h)
            } else {
                0
            };
            let total = l * per_layer + embed + norms + head;
            let kind = if clip { "CLIP" } else { "SigLIP" };
            (
                sat(total),
                format!(
                    "{kind} ViT: {l} layers × {} + embeddings",
                    crate::knowledge::memory::fmt_int(sat(per_layer))
                ),
                h,
            )
        }
        _ => match (get("embed_dim"), get("depth")) {
            (Some(e), Some(d)) => {
                // Qwen2-VL: ViT blocks of width e with an MLP of mlp_ratio × e, then a merger.
                let ratio = v
                    .get("mlp_ratio")
                    .and_then(Value::as_f64)
                    .unwrap_or(4.0)
                    .clamp(0.0, 64.0);
                let mlp = (e as f64 * ratio) as u128;
                let per_layer = 4 * (e * e + e) + 2 * e * mlp + mlp + e + 4 * e;
                let patch = get("patch_size").unwrap_or(14);
                let temporal = get("temporal_patch_size").unwrap_or(2);
                let merge = get("spatial_merge_size").unwrap_or(2);
                let out = get("hidden_size").unwrap_or(text_hidden);
                let m_in = e * merge * merge;
                let merger = 2 * e + m_in * m_in + m_in + m_in * out + out;
                let total = d * per_layer + 3 * temporal * patch * patch * e + merger;
                (
                    sat(total),
                    format!("Qwen2-VL-style ViT: {d} blocks of width {e} + merger (approximate)"),
                    0,
                )
            }
            _ => {
                g.notes.push(
                    "vision_config not recognised: the vision tower is not counted".to_string(),
                );
                return Ok(());
            }
        },
    };
    let projector = match root_type {
        "llava" | "llava_next" | "llava_onevision" | "vipllava" if vision_hidden > 0 => {
            let newline = if root_type == "llava" { 0 } else { text_hidden };
            vision_hidden * text_hidden
                + text_hidden
                + text_hidden * text_hidden
                + text_hidden
                + newline
        }
        "gemma3" if vision_hidden > 0 => vision_hidden * text_hidden + vision_hidden,
        _ => 0,
    };
    if projector == 0 && vision_hidden > 0 {
        g.notes.push(format!(
            "the `{root_type}` multimodal projector is not counted"
        ));
    }
    g.vision = Some(Vision {
        params,
        projector_params: sat(projector),
        basis,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_head_geometry_is_refused_with_its_key() {
        let base = r#""num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 8"#;
        for (extra, key) in [
            (r#""num_key_value_heads": 0"#, "num_key_value_heads"),
            (r#""num_key_value_heads": 16"#, "num_key_value_heads"),
            (r#""head_dim": 0"#, "head_dim"),
        ] {
            let e = parse_config(&format!("{{{base}, {extra}}}"), "c.json").unwrap_err();
            assert!(matches!(e, ConfigError::BadValue { .. }), "{e}");
            assert!(e.to_string().contains(key), "{e}");
        }
        let g = parse_config(
            &format!(r#"{{{base}, "num_key_value_heads": 2}}"#),
            "c.json",
        )
        .unwrap();
        assert_eq!((g.num_kv_heads, g.head_dim), (2, 8));
    }

    #[test]
    fn a_bad_value_with_multibyte_characters_is_cut_at_a_character_boundary() {
        // Found by the `model_config` fuzz target: a bad value whose quoted form has a
        // multi-byte character across byte 60 panicked in `String::truncate`. Every offset
        // of the character around the cut is tried.
        for pad in 50..64 {
            for ch in ["é", "€", "😀"] {
                let value = format!("{}{}", "x".repeat(pad), ch.repeat(8));
                let cfg = format!(
                    r#"{{"num_hidden_layers": "{value}", "hidden_size": 1, "num_attention_heads": 1}}"#
                );
                let e = parse_config(&cfg, "c.json").unwrap_err();
                assert!(matches!(e, ConfigError::BadValue { .. }), "{e}");
                assert!(e.to_string().contains('…'), "{e}");
            }
        }
    }

    #[test]
    fn gpt2_parameter_count_is_exact() {
        // GPT-2 small: 124,439,808 parameters (tied head, learned positions, biases).
        let cfg = r#"{"model_type":"gpt2","n_embd":768,"n_layer":12,"n_head":12,"n_positions":1024,
                      "n_inner":null,"vocab_size":50257,"architectures":["GPT2LMHeadModel"]}"#;
        let g = parse_config(cfg, "gpt2.json").unwrap();
        assert_eq!(g.intermediate_size, 3072);
        assert_eq!(g.params().total(), 124_439_808);
        assert_eq!(g.num_kv_heads, 12);
    }

    #[test]
    fn falcon_multi_query_has_one_kv_head() {
        let cfg = r#"{"model_type":"falcon","hidden_size":4544,"num_hidden_layers":32,"num_attention_heads":71,
                      "multi_query":true,"vocab_size":65024}"#;
        let g = parse_config(cfg, "falcon.json").unwrap();
        assert_eq!(g.num_kv_heads, 1);
        assert_eq!(g.head_dim, 64);
    }

    #[test]
    fn errors_name_the_key() {
        let e = parse_config(r#"{"hidden_size": 4096}"#, "c.json").unwrap_err();
        assert!(
            matches!(
                e,
                ConfigError::Missing {
                    field: "layers",
                    ..
                }
            ),
            "{e}"
        );
        let e = parse_config(
            r#"{"num_hidden_layers": "32", "hidden_size": 1, "num_attention_heads": 1}"#,
            "c.json",
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("`num_hidden_layers` is \"32\""),
            "{e}"
        );
        let e = parse_config(
            r#"{"num_hidden_layers": 99999999999, "hidden_size": 1, "num_attention_heads": 1}"#,
            "c.json",
        )
        .unwrap_err();
        assert!(matches!(e, ConfigError::BadValue { .. }), "{e}");
        let e = parse_config("[1,2]", "c.json").unwrap_err();
        assert!(matches!(e, ConfigError::NotObject { .. }));
        let e = parse_config("{\n \"a\": ", "c.json").unwrap_err();
        assert!(matches!(e, ConfigError::Json { line: 2, .. }), "{e}");
    }

    #[test]
    fn qwen_sliding_window_respects_use_sliding_window() {
        let base = r#""model_type":"qwen2","hidden_size":896,"num_hidden_layers":24,"num_attention_heads":14,
                      "num_key_value_heads":2,"intermediate_size":4864,"vocab_size":151936,"sliding_window":4096,
                      "max_window_layers":21"#;
        let off = parse_config(
            &format!("{{{base},\"use_sliding_window\":false}}"),
            "q.json",
        )
        .unwrap();
        assert_eq!(off.sliding_layer_count(), 0);
        assert_eq!(off.sliding_window, None);
        let on =
            parse_config(&format!("{{{base},\"use_sliding_window\":true}}"), "q.json").unwrap();
        assert_eq!(on.sliding_layer_count(), 3);
        assert_eq!(on.layers[20].attention, Attention::Full);
        assert_eq!(on.layers[21].attention, Attention::Sliding { window: 4096 });
    }

    #[test]
    fn layer_types_list_wins() {
        let cfg = r#"{"model_type":"x","hidden_size":64,"num_hidden_layers":4,"num_attention_heads":4,
                      "sliding_window":128,"layer_types":["sliding_attention","full_attention","linear_attention","bogus"]}"#;
        let g = parse_config(cfg, "x.json").unwrap();
        let kinds: Vec<Attention> = g.layers.iter().map(|l| l.attention).collect();
        assert_eq!(
            kinds,
            vec![
                Attention::Sliding { window: 128 },
                Attention::Full,
                Attention::NoCache,
                Attention::Full
            ]
        );
        assert_eq!(g.layers[2].kv_heads, 0);
        assert!(g.notes.iter().any(|n| n.contains("bogus")));
        assert!(
            g.notes
                .iter()
                .any(|n| n.contains("not one oomdoctor knows"))
        );
    }

    #[test]
    fn jamba_attention_period() {
        let cfg = r#"{"model_type":"jamba","hidden_size":4096,"num_hidden_layers":32,"num_attention_heads":32,
                      "num_key_value_heads":8,"attn_layer_period":8,"attn_layer_offset":4,"num_experts":16,
                      "expert_layer_period":2,"expert_layer_offset":1,"intermediate_size":14336,"vocab_size":65536}"#;
        let g = parse_config(cfg, "jamba.json").unwrap();
        assert_eq!(g.kv_layer_count(), 4);
        assert_eq!(g.layers.iter().filter(|l| l.moe).count(), 16);
        assert!(g.layers[4].attention == Attention::Full && !g.layers[4].moe && g.layers[5].moe);
    }

    #[test]
    fn quantization_configs() {
        let mk = |q: &str| {
            format!(
                r#"{{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"torch_dtype":"float16","quantization_config":{q}}}"#
            )
        };
        let g = parse_config(
            &mk(r#"{"quant_method":"gptq","bits":4,"group_size":-1}"#),
            "c",
        )
        .unwrap();
        assert_eq!(g.quant.as_ref().map(|q| q.bits_per_weight), Some(4.0));
        let g = parse_config(
            &mk(r#"{"quant_method":"bitsandbytes","load_in_8bit":true}"#),
            "c",
        )
        .unwrap();
        assert_eq!(g.quant.as_ref().map(|q| q.bits), Some(8));
        let g = parse_config(
            &mk(r#"{"quant_method":"fp8","weight_block_size":[128,128]}"#),
            "c",
        )
        .unwrap();
        assert_eq!(g.quant.as_ref().and_then(|q| q.group_size), Some(16384));
        let ct = r#"{"quant_method":"compressed-tensors","config_groups":{"group_0":{"weights":
                    {"num_bits":4,"type":"int","strategy":"group","group_size":128,"symmetric":true}}}}"#;
        let g = parse_config(&mk(ct), "c").unwrap();
        assert_eq!(g.quant.as_ref().map(|q| q.bits_per_weight), Some(4.125));
        let g = parse_config(&mk(r#"{"quant_method":"mystery"}"#), "c").unwrap();
        assert!(g.quant.is_none() && g.notes.iter().any(|n| n.contains("mystery")));
    }
}
