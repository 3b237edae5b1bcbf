//! `oomdoctor plan` end to end on the fixture configs: verdicts, recommended settings that
//! are re-checked with independent arithmetic, the JSON contract, and the KV capacities
//! engines report for a logged budget.

use std::path::PathBuf;

use oomdoctor::ingest::model::config;
use oomdoctor::knowledge::fit::{EnginePlan, FitStatus};
use oomdoctor::knowledge::memory::{self, CacheDtype, GIB, KvSpec, Trace};
use oomdoctor::knowledge::plan::{
    PlanArgs, PlanError, PlanFormat, PlanReport, plan, render_human, render_json,
};
use oomdoctor::knowledge::{Engine, gpus};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/models")
        .join(name)
}

fn args(model: &str, gpu: &str) -> PlanArgs {
    PlanArgs {
        model: fixture(model),
        gpu: gpu.to_string(),
        engine: None,
        context: None,
        concurrency: None,
        kv_cache_dtype: None,
        dtype: None,
        quantization: None,
        tensor_parallel: None,
        format: PlanFormat::Human,
        explain: false,
    }
}

fn run(a: &PlanArgs) -> PlanReport {
    plan(a).unwrap_or_else(|e| panic!("{e}"))
}

fn engine(r: &PlanReport, e: Engine) -> &EnginePlan {
    r.engines
        .iter()
        .find(|p| p.engine == e)
        .unwrap_or_else(|| panic!("no {e:?} in the report"))
}

fn geometry(name: &str) -> oomdoctor::ingest::model::Geometry {
    config::parse_config(&std::fs::read_to_string(fixture(name)).unwrap(), name).unwrap()
}

// ---------------------------------------------------------------------------------------
// Capacities engines report for a logged KV budget. Derived with the engines' own rules
// (vLLM: whole 16-token blocks; SGLang: one token per slot), not copied from logs.
// ---------------------------------------------------------------------------------------

#[test]
fn vllm_capacity_for_logged_budgets() {
    // "Available KV cache memory: 8.00 GiB" for Llama-3.1-8B (bf16) →
    // "GPU KV cache size: 65,536 tokens"; "Maximum concurrency for 32,768 tokens per
    // request: 2.00x".
    let bpt = memory::kv_bytes_per_token(
        &geometry("llama-3.1-8b.json"),
        &KvSpec::new(CacheDtype::Bf16),
        &mut Trace::new(),
    );
    assert_eq!(memory::paged_capacity_tokens(8 * GIB, bpt, 16), 65_536);
    assert_eq!(memory::concurrency_for(65_536, 32_768), 2);
    // Same budget, fp8 cache: twice the tokens.
    let fp8 = memory::kv_bytes_per_token(
        &geometry("llama-3.1-8b.json"),
        &KvSpec::new(CacheDtype::Fp8E4m3),
        &mut Trace::new(),
    );
    assert_eq!(memory::paged_capacity_tokens(8 * GIB, fp8, 16), 131_072);

    // Derived cases: (fixture, budget, tokens vLLM would report).
    let cases: &[(&str, u64, u64)] = &[
        // 10 GiB / (16 × 819,200) = 819 whole blocks.
        ("llama-2-13b.json", 10 * GIB, 13_104),
        // 20 GiB / (16 × 57,344) = 23,405 blocks.
        ("qwen2.5-7b.json", 20 * GIB, 374_480),
        // MLA: 10 GiB / (16 × 27 × 576 × 2) = 21,575 blocks.
        ("deepseek-v2-lite.json", 10 * GIB, 345_200),
        // Mixtral has Mistral's attention: 4.5 GiB → 36,864 tokens.
        ("mixtral-8x7b.json", 4 * GIB + GIB / 2, 36_864),
    ];
    for (name, budget, tokens) in cases {
        let g = geometry(name);
        let dtype = CacheDtype::from_activation(g.activation_dtype());
        let bpt = memory::kv_bytes_per_token(&g, &KvSpec::new(dtype), &mut Trace::new());
        assert_eq!(
            memory::paged_capacity_tokens(*budget, bpt, 16),
            *tokens,
            "{name}"
        );
        assert_eq!(
            memory::kv_fit(*budget, bpt, 16, 4096, 1).capacity_tokens,
            *tokens,
            "{name}"
        );
    }
}

#[test]
fn sglang_and_llamacpp_sizes_for_logged_budgets() {
    let g = geometry("llama-3.1-8b.json");
    // SGLang "KV Cache is allocated. #tokens: 40960, K size: 2.50 GB, V size: 2.50 GB":
    // 5 GiB at 131,072 bytes per token, K and V half each.
    let bpt = memory::kv_bytes_per_token(&g, &KvSpec::new(CacheDtype::Bf16), &mut Trace::new());
    let tokens = memory::max_tokens_for_budget(5 * GIB, bpt);
    assert_eq!(tokens, 40_960);
    assert_eq!(tokens * bpt / 2, 5 * GIB / 2);
    // llama.cpp at -c 32768: "KV buffer size = 4096.00 MiB", K (f16) 2048 MiB + V 2048 MiB;
    // with -ctk q8_0 -ctv q8_0: 1088 MiB each (34 bytes per 32 elements).
    assert_eq!(memory::kv_bytes(&g, 32_768, CacheDtype::F16), 4096 << 20);
    assert_eq!(
        memory::kv_bytes(&g, 32_768, CacheDtype::Q8_0),
        2 * (1088 << 20)
    );
    // Ollama with num_ctx 8192 and OLLAMA_NUM_PARALLEL=4: 32,768 cells, the same 4 GiB.
    let spec = KvSpec::new(CacheDtype::F16);
    assert_eq!(memory::kv_bytes_for(&g, &spec, 8192, 4), 4096 << 20);
}

// ---------------------------------------------------------------------------------------
// Plan outcomes
// ---------------------------------------------------------------------------------------

#[test]
fn llama_8b_full_context_fits_an_h100_under_vllm() {
    let mut a = args("llama-3.1-8b.json", "h100");
    a.engine = Some(Engine::Vllm);
    let r = run(&a);
    assert!(r.fits, "{}", r.verdict);
    assert_eq!(r.primary_engine, Engine::Vllm);
    let p = engine(&r, Engine::Vllm);
    assert_eq!(p.context_tokens, 131_072);
    assert_eq!(p.kv_needed_bytes, 16 * GIB);
    assert_eq!(r.kv_cache_bytes_per_token, 131_072);
    assert_eq!(r.weights_bytes, 16_060_522_496);
    assert!(p.max_context_tokens >= 131_072);
    assert!(p.max_concurrency >= 2, "{}", p.max_concurrency);
    assert_eq!(
        p.settings
            .get("--max-model-len")
            .map(|v| v.to_string())
            .as_deref(),
        Some("131072")
    );
    assert!(p.command.starts_with("vllm serve meta-llama/Llama-3.1-8B --max-model-len 131072 --gpu-memory-utilization 0.90"), "{}", p.command);
    assert!(p.headroom_bytes > 0);
}

/// Re-checks a vLLM recommendation with the report's own overheads and independent
/// arithmetic: total × util − weights − overheads ≥ concurrency × KV(context in blocks).
fn assert_vllm_recommendation_fits(r: &PlanReport, g: &oomdoctor::ingest::model::Geometry) {
    let p = engine(r, Engine::Vllm);
    let rec = &p.recommended;
    assert!(rec.fits, "{}", p.verdict);
    let util = rec.memory_fraction.expect("vLLM has a fraction");
    let total = r.gpu.memory_bytes;
    let overheads: u64 = p.overheads.iter().map(|o| o.bytes).sum();
    let budget =
        memory::fraction_of(total, util) as i128 - p.weights_bytes as i128 - overheads as i128;
    let dtype = CacheDtype::parse(&rec.kv_cache_dtype).unwrap();
    let spec = KvSpec {
        cap_sliding: true,
        ..KvSpec::new(dtype)
    };
    let ctx = rec.context_tokens.div_ceil(16) * 16;
    let need = memory::kv_bytes_for(g, &spec, ctx, rec.concurrency) as i128;
    assert!(
        need <= budget,
        "recommended {} × {} needs {need} > budget {budget}",
        rec.concurrency,
        rec.context_tokens
    );
    // And the settings say the same.
    assert_eq!(
        p.settings.get("--max-model-len").map(|v| v.to_string()),
        Some(rec.context_tokens.to_string())
    );
}

#[test]
fn full_context_on_a_4090_does_not_fit_and_the_fix_fits() {
    let mut a = args("llama-3.1-8b.json", "rtx4090");
    a.engine = Some(Engine::Vllm);
    a.context = Some(131_072);
    let r = run(&a);
    assert!(!r.fits);
    let p = engine(&r, Engine::Vllm);
    assert_eq!(p.status, FitStatus::DoesNotFit);
    assert!(p.headroom_bytes < 0);
    assert!(
        p.max_context_tokens < 131_072 && p.max_context_tokens > 16_384,
        "{}",
        p.max_context_tokens
    );
    // The capacity vLLM would log is the same arithmetic on the KV budget.
    assert_eq!(
        p.kv_capacity_tokens,
        memory::paged_capacity_tokens(p.kv_budget_bytes as u64, 131_072, 16)
    );
    assert_eq!(p.max_context_tokens, p.kv_capacity_tokens);
    assert!(
        p.verdict
            .starts_with("does not fit: 131,072 tokens need 16.00 GiB of KV cache"),
        "{}",
        p.verdict
    );
    assert_vllm_recommendation_fits(&r, &geometry("llama-3.1-8b.json"));
    // A rounded setting, never above what fits at that utilisation.
    let rec = &p.recommended;
    assert_eq!(rec.context_tokens % 1024, 0);
    assert!(rec.changes.iter().any(|c| c.contains("instead of 131,072")));
    assert!(
        p.alternatives.iter().any(|x| x.contains("fp8")),
        "{:?}",
        p.alternatives
    );
}

#[test]
fn quantized_kv_is_recommended_when_it_is_what_makes_it_fit() {
    // 4 sequences of 16k on a 4090: 8 GiB of bf16 KV does not fit; fp8 (4 GiB) does.
    let mut a = args("llama-3.1-8b.json", "rtx4090");
    a.engine = Some(Engine::Vllm);
    a.context = Some(16_384);
    a.concurrency = Some(4);
    let r = run(&a);
    let p = engine(&r, Engine::Vllm);
    assert!(!p.fits);
    assert_eq!(p.recommended.kv_cache_dtype, "fp8_e4m3");
    assert_eq!(p.recommended.context_tokens, 16_384);
    assert_eq!(
        p.settings
            .get("--kv-cache-dtype")
            .map(|v| v.to_string())
            .as_deref(),
        Some("fp8")
    );
    assert_eq!(
        p.settings
            .get("--max-num-seqs")
            .map(|v| v.to_string())
            .as_deref(),
        Some("4")
    );
    assert_vllm_recommendation_fits(&r, &geometry("llama-3.1-8b.json"));

    // llama.cpp: q8_0 for K and V, with flash attention for the quantised V cache.
    a.engine = Some(Engine::Llamacpp);
    a.context = Some(32_768);
    let r = run(&a);
    let p = engine(&r, Engine::Llamacpp);
    if !p.fits {
        assert_eq!(
            p.settings
                .get("--cache-type-v")
                .map(|v| v.to_string())
                .as_deref(),
            Some("q8_0")
        );
        assert_eq!(
            p.settings.get("-fa").map(|v| v.to_string()).as_deref(),
            Some("on")
        );
    }
    assert_eq!(
        p.settings.get("-np").map(|v| v.to_string()).as_deref(),
        Some("4")
    );
}

#[test]
fn recommendations_of_every_engine_fit_when_replanned() {
    // For engines without a memory fraction the recommendation is re-planned as a request:
    // it must then fit as asked.
    let mut replanned = 0;
    for (model, gpu, ctx, conc) in [
        ("llama-3.1-8b.json", "rtx4090", 131_072u64, 1u64),
        ("gemma-2-9b.json", "l4", 8192, 8),
        ("qwen2.5-7b.json", "a10g", 131_072, 2),
        ("gpt-oss-20b.json", "rtx4090", 131_072, 4),
    ] {
        for e in [
            Engine::Llamacpp,
            Engine::Ollama,
            Engine::Transformers,
            Engine::Tgi,
        ] {
            let mut a = args(model, gpu);
            a.engine = Some(e);
            a.context = Some(ctx);
            a.concurrency = Some(conc);
            let r = run(&a);
            let p = engine(&r, e);
            if p.fits || !p.recommended.fits || p.recommended.gpu_layers.is_some() {
                continue;
            }
            let mut again = a.clone();
            again.context = Some(p.recommended.context_tokens);
            again.concurrency = Some(p.recommended.concurrency);
            again.kv_cache_dtype = Some(p.recommended.kv_cache_dtype.clone());
            let r2 = run(&again);
            let p2 = engine(&r2, e);
            assert!(
                p2.fits,
                "{model} {e:?}: recommended {:?} does not fit when re-planned: {}",
                p.recommended, p2.verdict
            );
            assert!(p2.max_context_tokens >= p.recommended.context_tokens);
            replanned += 1;
        }
    }
    assert!(
        replanned >= 8,
        "only {replanned} recommendations were re-planned"
    );
}

#[test]
fn sliding_window_and_mla_models_plan_with_their_real_cache() {
    // gpt-oss-20b on a 4090: half its layers keep 128 tokens, so its KV per token past the
    // window is half the short-context figure.
    let mut a = args("gpt-oss-20b.json", "rtx4090");
    a.engine = Some(Engine::Vllm);
    let r = run(&a);
    assert_eq!(r.kv_cache_bytes_per_token, 49_152);
    assert_eq!(r.kv_cache_bytes_per_token_beyond_window, Some(24_576));
    let p = engine(&r, Engine::Vllm);
    assert!(p.fits, "{}", p.verdict);
    let g = geometry("gpt-oss-20b.json");
    assert_eq!(
        p.kv_needed_bytes,
        memory::kv_bytes(&g, 131_072, CacheDtype::Bf16)
    );

    // DeepSeek-V2-Lite: the latent cache (31,104 bytes/token) under vLLM, the expanded one
    // (276,480) under transformers.
    let mut a = args("deepseek-v2-lite.json", "h100");
    a.context = Some(32_768);
    let r = run(&a);
    assert_eq!(engine(&r, Engine::Vllm).kv_cache_bytes_per_token, 31_104);
    assert_eq!(
        engine(&r, Engine::Transformers).kv_cache_bytes_per_token,
        276_480
    );
}

#[test]
fn weights_that_do_not_fit_get_weight_fixes() {
    // Mixtral in bf16 (87 GiB) on one H100: no KV budget at all.
    let mut a = args("mixtral-8x7b.json", "h100");
    a.context = Some(32_768);
    let r = run(&a);
    assert!(!r.fits);
    let v = engine(&r, Engine::Vllm);
    assert!(v.kv_budget_bytes < 0);
    assert_eq!(v.max_context_tokens, 0);
    assert_eq!(
        v.settings
            .get("--quantization")
            .map(|x| x.to_string())
            .as_deref(),
        Some("fp8")
    );
    assert!(v.recommended.fits);
    assert!(
        v.alternatives
            .iter()
            .any(|x| x.contains("tensor parallel over 2")),
        "{:?}",
        v.alternatives
    );
    // Each alternative carries its number.
    let starts = |xs: &[String], p: &str| xs.iter().any(|x| x.starts_with(p));
    assert!(
        starts(&v.alternatives, "fp8 weights would take"),
        "{:?}",
        v.alternatives
    );
    assert!(
        starts(&v.alternatives, "--cpu-offload-gb "),
        "{:?}",
        v.alternatives
    );
    // llama.cpp runs it with part of the layers on the GPU.
    let l = engine(&r, Engine::Llamacpp);
    assert_eq!(l.status, FitStatus::PartialOffload);
    let ngl = l.recommended.gpu_layers.expect("-ngl");
    assert!(ngl > 0 && ngl < 33);
    assert_eq!(
        l.settings.get("-ngl").map(|x| x.to_string()),
        Some(ngl.to_string())
    );
    assert!(
        starts(&l.alternatives, "a Q4_K_M file would take about"),
        "{:?}",
        l.alternatives
    );

    // Two H100s: tensor parallel 2 fits, with the size in the settings.
    let mut a = args("mixtral-8x7b.json", "2xh100");
    a.engine = Some(Engine::Vllm);
    a.context = Some(32_768);
    let r = run(&a);
    assert!(r.fits, "{}", r.verdict);
    let v = engine(&r, Engine::Vllm);
    assert_eq!(v.gpus, 2);
    assert_eq!(v.weights_bytes, r.weights_bytes.div_ceil(2));
    assert_eq!(
        v.settings
            .get("--tensor-parallel-size")
            .map(|x| x.to_string())
            .as_deref(),
        Some("2")
    );
}

#[test]
fn quantization_override_and_quantized_checkpoints() {
    // The AWQ checkpoint weighs 5.33 GiB, so 8B fits a 12 GiB card.
    let mut a = args("llama-3.1-8b-instruct-awq.json", "rtx3060");
    a.engine = Some(Engine::Vllm);
    a.context = Some(8192);
    let r = run(&a);
    assert!(r.fits, "{}", r.verdict);
    assert!(r.weights_bytes < 6 * GIB);
    assert!(r.model.weights_format.starts_with("awq 4-bit g128"));
    // --quantization fp8 on the bf16 checkpoint: vLLM quantises at load time.
    let mut a = args("llama-3.1-8b.json", "rtx3060");
    a.engine = Some(Engine::Vllm);
    a.context = Some(4096);
    a.quantization = Some("fp8".into());
    let r = run(&a);
    let v = engine(&r, Engine::Vllm);
    assert_eq!(
        v.settings
            .get("--quantization")
            .map(|x| x.to_string())
            .as_deref(),
        Some("fp8")
    );
    assert!(r.weights_bytes < 9 * GIB);
    // --quantization q4_k_m previews a GGUF for llama.cpp.
    let mut a = args("llama-3.1-8b.json", "8GiB");
    a.engine = Some(Engine::Llamacpp);
    a.quantization = Some("q4_k_m".into());
    let r = run(&a);
    assert!(r.fits, "{}", r.verdict);
    assert!(
        engine(&r, Engine::Llamacpp)
            .command
            .contains("Llama-3.1-8B-Q4_K_M.gguf")
    );
}

#[test]
fn no_engine_means_every_engine_and_the_best_leads() {
    let mut a = args("llama-3.1-8b.json", "rtx4090");
    a.context = Some(32_768);
    let r = run(&a);
    let names: Vec<Engine> = r.engines.iter().map(|p| p.engine).collect();
    assert_eq!(
        names,
        vec![
            Engine::Vllm,
            Engine::Sglang,
            Engine::Tgi,
            Engine::Llamacpp,
            Engine::Ollama,
            Engine::Transformers
        ]
    );
    assert_eq!(r.fits, r.engines.iter().any(|p| p.fits));
    let best = engine(&r, r.primary_engine);
    assert!(best.fits);
    assert!(
        r.engines
            .iter()
            .filter(|p| p.fits)
            .all(|p| p.headroom_bytes <= best.headroom_bytes)
    );
    assert_eq!(r.max_context_tokens, best.max_context_tokens);
    assert_eq!(r.settings, best.settings);
}

#[test]
fn json_has_the_contracted_keys() {
    let mut a = args("gemma-2-9b.json", "l4");
    a.context = Some(8192);
    a.concurrency = Some(2);
    a.format = PlanFormat::Json;
    let r = run(&a);
    let v: serde_json::Value = serde_json::from_str(&render_json(&r)).expect("valid JSON");
    for key in [
        "schema_version",
        "fits",
        "primary_engine",
        "weights_bytes",
        "kv_cache_bytes_per_token",
        "max_context_tokens",
        "max_concurrency",
        "headroom_bytes",
        "settings",
        "engines",
        "assumptions",
        "explain",
        "model",
        "gpu",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["kv_cache_bytes_per_token"], 344_064);
    let e = &v["engines"][0];
    for key in [
        "engine",
        "fits",
        "status",
        "settings",
        "max_context_tokens",
        "kv_capacity_tokens",
        "overheads",
        "recommended",
        "command",
    ] {
        assert!(e.get(key).is_some(), "engines[0] misses {key}");
    }
    assert!(e["settings"].is_object());
    assert!(e["overheads"][0]["high_bytes"].as_u64() >= e["overheads"][0]["bytes"].as_u64());
    // Settings keep their order and types: numbers are numbers.
    let vllm = v["engines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["engine"] == "vllm")
        .unwrap();
    assert!(vllm["settings"]["--max-model-len"].is_u64());
    assert!(
        vllm["settings"]["--gpu-memory-utilization"].is_f64()
            || vllm["settings"]["--gpu-memory-utilization"].is_u64()
    );
}

#[test]
fn human_output_states_the_verdict_and_the_arithmetic() {
    let mut a = args("llama-2-13b.json", "a100-40gb");
    a.engine = Some(Engine::Vllm);
    a.context = Some(4096);
    let r = run(&a);
    let plain = render_human(&r, false);
    assert!(plain.contains("✔ fits"), "{plain}");
    assert!(plain.contains("vllm serve meta-llama/Llama-2-13b-hf --max-model-len 4096"));
    assert!(!plain.contains("KV per token ="));
    let explained = render_human(&r, true);
    assert!(
        explained.contains(
            "KV per token = 2 × 40 layers × 40 KV heads × 128 × 2 bytes (f16) = 819,200 bytes"
        ),
        "{explained}"
    );
    assert!(explained.contains("KV needed for 4,096 tokens = 4,096 tokens × 819,200 bytes = 3,355,443,200 bytes (3.125 GiB)"));
    assert!(explained.contains("parameters = embeddings 163,840,000"));
}

#[test]
fn errors_are_typed() {
    let mut a = args("llama-3.1-8b.json", "rtx4090");
    a.kv_cache_dtype = Some("int3".into());
    assert!(matches!(plan(&a), Err(PlanError::Args(_))));
    let mut a = args("llama-3.1-8b.json", "rtx4090");
    a.concurrency = Some(0);
    assert!(matches!(plan(&a), Err(PlanError::Args(_))));
    let mut a = args("llama-3.1-8b.json", "rtx4090");
    a.quantization = Some("magic".into());
    assert!(matches!(plan(&a), Err(PlanError::Args(_))));
    let mut a = args("llama-3.1-8b.json", "rtx4090");
    a.context = Some(u64::MAX);
    assert!(matches!(plan(&a), Err(PlanError::Args(_))));
    let a = args("does-not-exist.json", "rtx4090");
    assert!(matches!(plan(&a), Err(PlanError::Io { .. })));
    let a = args("llama-3.1-8b.json", "gtx9999");
    assert!(matches!(
        plan(&a),
        Err(PlanError::Gpu(gpus::GpuError::Unknown { .. }))
    ));
    // A directory: its config.json is read.
    let mut a = args("llama-3.1-8b.json", "h100");
    a.model = fixture("");
    assert!(matches!(plan(&a), Err(PlanError::Model { .. })));
}

#[test]
fn context_zero_means_the_model_maximum_and_kv_dtype_passes_through() {
    let mut a = args("qwen2.5-7b.json", "h100");
    a.engine = Some(Engine::Sglang);
    a.context = Some(0);
    a.kv_cache_dtype = Some("fp8_e5m2".into());
    let r = run(&a);
    let p = engine(&r, Engine::Sglang);
    assert_eq!(p.context_tokens, 131_072);
    assert_eq!(p.kv_cache_dtype, "fp8_e5m2");
    assert_eq!(p.kv_cache_bytes_per_token, 28_672);
    assert_eq!(
        p.settings
            .get("--kv-cache-dtype")
            .map(|v| v.to_string())
            .as_deref(),
        Some("fp8_e5m2")
    );
    // llama.cpp too: -c 0 is n_ctx_train, not the 4,096 default.
    a.engine = Some(Engine::Llamacpp);
    let r = run(&a);
    assert_eq!(engine(&r, Engine::Llamacpp).context_tokens, 131_072);
    // Ollama cannot store fp8: it plans with its own 1-byte type, q8_0, and says so.
    a.engine = Some(Engine::Ollama);
    let r = run(&a);
    let p = engine(&r, Engine::Ollama);
    assert_eq!(p.kv_cache_dtype, "q8_0");
    assert!(
        p.notes
            .iter()
            .any(|n| n.contains("cannot store a fp8_e5m2"))
    );
}

#[test]
fn a_directory_with_config_json_is_a_model() {
    let dir = std::env::temp_dir().join(format!("oomdoctor-plan-dir-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(fixture("qwen3-next-80b-a3b.json"), dir.join("config.json")).unwrap();
    let mut a = args("unused", "2xh200");
    a.model = dir.clone();
    a.engine = Some(Engine::Vllm);
    a.context = Some(65_536);
    let r = run(&a);
    // No _name_or_path: commands name the directory, as `vllm serve DIR` takes it.
    assert_eq!(r.model.name, dir.display().to_string());
    assert!(
        engine(&r, Engine::Vllm)
            .command
            .starts_with(&format!("vllm serve {} ", dir.display()))
    );
    // Only 12 of 48 layers keep KV: 65,536 tokens are 1.5 GiB in bf16.
    assert_eq!(r.model.kv_layers, 12);
    assert_eq!(r.kv_cache_bytes_per_token * 65_536, 3 * GIB / 2);
    std::fs::remove_dir_all(&dir).unwrap();
}
