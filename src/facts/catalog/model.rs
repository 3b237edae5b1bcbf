//! Facts the `ingest::model` stage may set.

use super::{FactDef, fact};
use crate::facts::evidence::Unit;

/// Facts about the model. `model.name`, `model.params`, `model.dtype` and
/// `model.weights_bytes` are catalogued by `engines::training` and set here too.
#[rustfmt::skip]
pub const FACTS: &[FactDef] = &[
    fact("model.architecture", Unit::Text, "Model architecture: HF architectures[0] (LlamaForCausalLM) or GGUF general.architecture (llama)."),
    fact("model.format", Unit::Text, "Where the model geometry was read: hf-config, gguf or log."),
    fact("model.layers", Unit::Count, "Decoder layers (num_hidden_layers, {arch}.block_count, llama.cpp n_layer)."),
    fact("model.kv_layers", Unit::Count, "Layers that keep a KV cache: fewer than model.layers in hybrid linear-attention / SSM models."),
    fact("model.attention_heads", Unit::Count, "Attention (query) heads per layer."),
    fact("model.kv_heads", Unit::Count, "KV heads per layer (GQA: fewer than attention heads; llama.cpp n_head_kv)."),
    fact("model.head_dim", Unit::Count, "Elements per K head (head_dim, or hidden_size / heads; llama.cpp n_embd_head_k)."),
    fact("model.hidden_size", Unit::Count, "Width of the residual stream (hidden_size, n_embd)."),
    fact("model.vocab_size", Unit::Count, "Vocabulary size."),
    fact("model.max_position_embeddings", Unit::Tokens, "The context the model was trained for (max_position_embeddings, {arch}.context_length, n_ctx_train), rope-scaled when the config extends it."),
    fact("model.sliding_window", Unit::Tokens, "Window of the sliding-window layers, when the model has any."),
    fact("model.sliding_layers", Unit::Count, "Layers whose KV cache stops growing at model.sliding_window."),
    fact("model.experts", Unit::Count, "Routed experts per MoE layer."),
    fact("model.experts_per_token", Unit::Count, "Experts each token is routed to."),
    fact("model.active_params", Unit::Count, "Parameters one token uses (all but the unused experts)."),
    fact("model.kv_lora_rank", Unit::Count, "MLA latent rank: the KV cache stores kv_lora_rank + qk_rope_head_dim elements per layer and token."),
    fact("model.quantization", Unit::Text, "How the checkpoint's weights are quantised (awq 4-bit g128, fp8, gguf Q4_K_M...)."),
    fact("model.kv_bytes_per_token", Unit::Bytes, "KV cache bytes per token over all layers with a cache, in model.kv_cache_dtype (131,072 for Llama-3.1-8B in bf16)."),
    fact("model.kv_bytes_per_token_beyond_window", Unit::Bytes, "KV bytes per token once the context is past every sliding window (only full-attention layers grow)."),
    fact("model.kv_cache_dtype", Unit::Text, "The KV cache dtype model.kv_bytes_per_token assumes (the model's dtype unless a log says otherwise)."),
];
