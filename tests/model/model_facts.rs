//! The model facts the diagnosis reads, and the helpers that turn a log's KV numbers into
//! fix values.

use std::path::Path;
use std::sync::Arc;

use oomdoctor::facts::catalog;
use oomdoctor::facts::evidence::{Facts, InputName, Provenance};
use oomdoctor::ingest::model::{config, geometry_facts, geometry_from_facts};
use oomdoctor::knowledge::memory::{self, CacheDtype, GIB};

fn load(name: &str) -> oomdoctor::ingest::model::Geometry {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/models")
        .join(name);
    config::parse_config(&std::fs::read_to_string(path).unwrap(), name).unwrap()
}

#[test]
fn geometry_facts_are_catalogued_with_provenance() {
    let input: InputName = Arc::from("config.json");
    let f = geometry_facts(&load("llama-3.1-8b.json"), &input);
    for (name, _) in f.iter() {
        let def = catalog::lookup(name).unwrap_or_else(|| panic!("{name} is not catalogued"));
        assert!(!def.doc.is_empty());
    }
    assert_eq!(f.num("model.kv_bytes_per_token"), Some(131_072.0));
    assert_eq!(f.num("model.params"), Some(8_030_261_248.0));
    assert_eq!(f.num("model.weights_bytes"), Some(16_060_522_496.0));
    assert_eq!(f.num("model.layers"), Some(32.0));
    assert_eq!(f.num("model.kv_heads"), Some(8.0));
    assert_eq!(f.num("model.head_dim"), Some(128.0));
    assert_eq!(f.num("model.max_position_embeddings"), Some(131_072.0));
    assert_eq!(f.str("model.name"), Some("meta-llama/Llama-3.1-8B"));
    assert_eq!(f.str("model.dtype"), Some("bfloat16"));
    assert_eq!(f.str("model.kv_cache_dtype"), Some("bf16"));
    assert_eq!(f.str("model.architecture"), Some("LlamaForCausalLM"));
    let layers = f.get("model.layers").unwrap();
    assert_eq!(
        layers.sources[0].locator.as_deref(),
        Some("num_hidden_layers")
    );
    assert_eq!(
        f.display("model.weights_bytes").as_deref(),
        Some("14.96 GiB")
    );
    assert!(!f.contains("model.sliding_window"));

    // Nested and defaulted keys keep their path; MoE, MLA, sliding and quantised facts.
    let f = geometry_facts(&load("llava-1.5-7b.json"), &input);
    assert_eq!(
        f.get("model.layers").unwrap().sources[0].locator.as_deref(),
        Some("text_config.num_hidden_layers (class default)")
    );
    let f = geometry_facts(&load("deepseek-v2-lite.json"), &input);
    assert_eq!(f.num("model.kv_lora_rank"), Some(512.0));
    assert_eq!(f.num("model.experts"), Some(64.0));
    assert_eq!(f.num("model.experts_per_token"), Some(6.0));
    assert_eq!(f.num("model.kv_bytes_per_token"), Some(31_104.0));
    let f = geometry_facts(&load("gemma-2-9b.json"), &input);
    assert_eq!(f.num("model.sliding_window"), Some(4096.0));
    assert_eq!(f.num("model.sliding_layers"), Some(21.0));
    assert_eq!(
        f.num("model.kv_bytes_per_token_beyond_window"),
        Some(172_032.0)
    );
    let f = geometry_facts(&load("llama-3.1-8b-instruct-awq.json"), &input);
    assert!(
        f.str("model.quantization")
            .unwrap()
            .starts_with("awq 4-bit g128")
    );
    let f = geometry_facts(&load("qwen3-next-80b-a3b.json"), &input);
    assert_eq!(f.num("model.kv_layers"), Some(12.0));
}

#[test]
fn geometry_from_log_facts_gives_kv_arithmetic() {
    // What llama.cpp prints for Llama-3-8B: n_layer 32, n_head 32, n_head_kv 8,
    // n_embd_head_k 128.
    let input: InputName = Arc::from("llama.log");
    let mut f = Facts::new();
    let p = |line: u64| {
        Some(Provenance::line(
            input.clone(),
            line,
            Arc::from("print_info: ..."),
        ))
    };
    f.set("model.layers", 32u64, p(10));
    f.set("model.attention_heads", 32u64, p(11));
    f.set("model.kv_heads", 8u64, p(12));
    f.set("model.head_dim", 128u64, p(13));
    let g = geometry_from_facts(&f).expect("enough facts");
    assert_eq!(memory::kv_bytes(&g, 4096, CacheDtype::F16), 512 << 20);
    assert_eq!(memory::kv_bytes(&g, 4096, CacheDtype::Q8_0), 272 << 20);

    // A hybrid model: 12 of 48 layers keep KV.
    f.set("model.layers", 48u64, p(10));
    f.set("model.kv_layers", 12u64, p(14));
    f.set("model.kv_heads", 2u64, p(12));
    f.set("model.head_dim", 256u64, p(13));
    let g = geometry_from_facts(&f).unwrap();
    assert_eq!(memory::kv_bytes(&g, 1, CacheDtype::Bf16), 24_576);

    // Garbled numbers are refused rather than trusted.
    let mut garbled = f.clone();
    garbled.set("model.layers", 1e30, p(10));
    assert!(geometry_from_facts(&garbled).is_none());
    garbled.set("model.layers", -3.0, p(10));
    assert!(geometry_from_facts(&garbled).is_none());

    // Not enough to go on.
    let mut thin = Facts::new();
    thin.set("model.layers", 32u64, p(10));
    assert!(geometry_from_facts(&thin).is_none());
    // head_dim from hidden_size / heads.
    thin.set("model.hidden_size", 4096u64, p(11));
    thin.set("model.attention_heads", 32u64, p(12));
    let g = geometry_from_facts(&thin).unwrap();
    assert_eq!((g.num_kv_heads, g.head_dim), (32, 128));
}

#[test]
fn fix_values_from_a_logged_kv_budget() {
    // vLLM: "Available KV cache memory: 2.30 GiB", Llama-3.1-8B, max_model_len 32768.
    let budget = (2.30 * GIB as f64) as u64;
    let fit = memory::kv_fit(budget, 131_072, 16, 32_768, 1);
    assert!(!fit.fits);
    assert_eq!(fit.capacity_tokens, 18_832);
    // The value to print: --max-model-len 18432, which needs 2.25 GiB of the 2.30.
    assert_eq!(fit.max_context, 18_432);
    assert!(fit.max_context * 131_072 <= budget);
    assert_eq!(fit.max_concurrency, 0);
    // The same budget with --kv-cache-dtype fp8 holds twice the tokens.
    assert_eq!(
        memory::capacity_in_dtype(fit.capacity_tokens, 131_072, 65_536),
        37_664
    );
    // The utilisation that would hold 32,768 tokens on an 80 GiB GPU with 17.5 GiB of
    // non-KV memory (weights + activations + non-torch): (17.5 + 4) / 80 → 0.27.
    assert_eq!(
        memory::fraction_for_kv(80 * GIB, 17 * GIB + GIB / 2, 4 * GIB),
        0.27
    );
    // llama.cpp shares -c across -np slots: 4 slots of a 65,536-cell cache get 16,384 each.
    let fit = memory::kv_fit_from_capacity(65_536, 256, 16_384, 4);
    assert!(fit.fits);
    assert_eq!(fit.max_context, 16_384);
}
