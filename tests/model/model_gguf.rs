//! GGUF headers built byte by byte in the test: v2 and v3, arrays (skipped tokenizer
//! vocabularies, kept per-layer head counts), tensor tables of mixed ggml types, sliding
//! windows and MLA by architecture, and hostile input (every truncation, random
//! corruption) that must give an error, never a panic.

use oomdoctor::ingest::model::geometry::Attention;
use oomdoctor::ingest::model::gguf::{self, GgufError, GgufValue};
use oomdoctor::knowledge::memory::{self, CacheDtype, KvSpec, Trace};

/// A metadata value to write.
#[derive(Clone)]
enum Val {
    U32(u32),
    U64(u64),
    F32(f32),
    Str(String),
    ArrU32(Vec<u32>),
    ArrI32(Vec<i32>),
    ArrF32(Vec<f32>),
    ArrStr(Vec<String>),
    ArrBool(Vec<bool>),
}

/// A GGUF file under construction: metadata, then tensor infos (name, shape, ggml type).
struct Gguf {
    version: u32,
    kvs: Vec<(String, Val)>,
    tensors: Vec<(String, Vec<u64>, u32)>,
}

fn put_str(b: &mut Vec<u8>, s: &str) {
    b.extend_from_slice(&(s.len() as u64).to_le_bytes());
    b.extend_from_slice(s.as_bytes());
}

impl Gguf {
    fn new(version: u32) -> Self {
        Gguf {
            version,
            kvs: Vec::new(),
            tensors: Vec::new(),
        }
    }
    fn kv(mut self, k: &str, v: Val) -> Self {
        self.kvs.push((k.to_string(), v));
        self
    }
    fn tensor(mut self, name: &str, shape: &[u64], ty: u32) -> Self {
        self.tensors.push((name.to_string(), shape.to_vec(), ty));
        self
    }

    /// The header bytes (no tensor data). Offsets are consecutive and 32-aligned, as the
    /// real writer lays them out; sizes use the same block table as the reader.
    fn header(&self) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend_from_slice(&self.version.to_le_bytes());
        b.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        b.extend_from_slice(&(self.kvs.len() as u64).to_le_bytes());
        for (k, v) in &self.kvs {
            put_str(&mut b, k);
            let arr = |b: &mut Vec<u8>, ty: u32, n: usize| {
                b.extend_from_slice(&9u32.to_le_bytes());
                b.extend_from_slice(&ty.to_le_bytes());
                b.extend_from_slice(&(n as u64).to_le_bytes());
            };
            match v {
                Val::U32(x) => {
                    b.extend_from_slice(&4u32.to_le_bytes());
                    b.extend_from_slice(&x.to_le_bytes());
                }
                Val::U64(x) => {
                    b.extend_from_slice(&10u32.to_le_bytes());
                    b.extend_from_slice(&x.to_le_bytes());
                }
                Val::F32(x) => {
                    b.extend_from_slice(&6u32.to_le_bytes());
                    b.extend_from_slice(&x.to_le_bytes());
                }
                Val::Str(s) => {
                    b.extend_from_slice(&8u32.to_le_bytes());
                    put_str(&mut b, s);
                }
                Val::ArrU32(xs) => {
                    arr(&mut b, 4, xs.len());
                    xs.iter()
                        .for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
                }
                Val::ArrI32(xs) => {
                    arr(&mut b, 5, xs.len());
                    xs.iter()
                        .for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
                }
                Val::ArrF32(xs) => {
                    arr(&mut b, 6, xs.len());
                    xs.iter()
                        .for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
                }
                Val::ArrStr(xs) => {
                    arr(&mut b, 8, xs.len());
                    xs.iter().for_each(|x| put_str(&mut b, x));
                }
                Val::ArrBool(xs) => {
                    arr(&mut b, 7, xs.len());
                    xs.iter().for_each(|x| b.push(u8::from(*x)));
                }
            }
        }
        let mut offset = 0u64;
        for (name, shape, ty) in &self.tensors {
            put_str(&mut b, name);
            b.extend_from_slice(&(shape.len() as u32).to_le_bytes());
            shape
                .iter()
                .for_each(|d| b.extend_from_slice(&d.to_le_bytes()));
            b.extend_from_slice(&ty.to_le_bytes());
            b.extend_from_slice(&offset.to_le_bytes());
            // Wrapping: some tests write shapes whose size overflows on purpose.
            let size = gguf::ggml_type(*ty)
                .map(|t| {
                    (shape[0] / t.block)
                        .wrapping_mul(t.bytes)
                        .wrapping_mul(shape[1..].iter().fold(1u64, |a, d| a.wrapping_mul(*d)))
                })
                .unwrap_or(0);
            offset = offset.wrapping_add(size.div_ceil(32).wrapping_mul(32));
        }
        b
    }
}

const Q4_K: u32 = 12;
const Q6_K: u32 = 14;
const F32: u32 = 0;
const F16: u32 = 1;

/// A 4-layer Llama-style model, 256 wide, 8 heads, 2 KV heads, 1,000-token vocabulary,
/// Q4_K_M-like mix of types, with the tokenizer arrays a real file has.
fn tiny_llama(version: u32) -> Gguf {
    with_vocab(version, 1000)
}

/// [`tiny_llama`] with a tokenizer of `n` entries (the tensor shapes keep 1,000 rows).
fn with_vocab(version: u32, n: usize) -> Gguf {
    let vocab: Vec<String> = (0..n).map(|i| format!("tok{i}")).collect();
    let mut g = Gguf::new(version)
        .kv("general.architecture", Val::Str("llama".into()))
        .kv("general.name", Val::Str("Tiny Llama".into()))
        .kv("general.file_type", Val::U32(15))
        .kv("llama.block_count", Val::U32(4))
        .kv("llama.context_length", Val::U32(8192))
        .kv("llama.embedding_length", Val::U32(256))
        .kv("llama.feed_forward_length", Val::U32(512))
        .kv("llama.attention.head_count", Val::U32(8))
        .kv("llama.attention.head_count_kv", Val::U32(2))
        .kv("llama.rope.freq_base", Val::F32(500000.0))
        .kv("tokenizer.ggml.model", Val::Str("gpt2".into()))
        .kv("tokenizer.ggml.tokens", Val::ArrStr(vocab))
        .kv("tokenizer.ggml.scores", Val::ArrF32(vec![0.0; n]))
        .kv("tokenizer.ggml.token_type", Val::ArrI32(vec![1; n]))
        .kv("general.quantization_version", Val::U32(2))
        .tensor("token_embd.weight", &[256, 1000], Q4_K)
        .tensor("output_norm.weight", &[256], F32)
        .tensor("output.weight", &[256, 1000], Q6_K);
    for i in 0..4 {
        let t = |n: &str| format!("blk.{i}.{n}.weight");
        g = g
            .tensor(&t("attn_norm"), &[256], F32)
            .tensor(&t("attn_q"), &[256, 256], Q4_K)
            .tensor(&t("attn_k"), &[256, 64], Q4_K)
            .tensor(&t("attn_v"), &[256, 64], Q6_K)
            .tensor(&t("attn_output"), &[256, 256], Q4_K)
            .tensor(&t("ffn_norm"), &[256], F32)
            .tensor(&t("ffn_gate"), &[256, 512], Q4_K)
            .tensor(&t("ffn_up"), &[256, 512], Q4_K)
            .tensor(&t("ffn_down"), &[512, 256], Q6_K);
    }
    g
}

fn parse(bytes: &[u8]) -> Result<gguf::GgufHeader, GgufError> {
    gguf::read_header(bytes, "test.gguf", gguf::DEFAULT_HEADER_LIMIT)
}

#[test]
fn reads_v2_and_v3_headers_and_totals_tensor_bytes() {
    for version in [2, 3] {
        let h = parse(&tiny_llama(version).header()).expect("valid header");
        assert_eq!(h.version, version);
        assert_eq!(h.tensor_count, 39);
        assert_eq!(h.architecture(), Some("llama"));
        // The vocabulary is skipped, not kept; its length still counts.
        let tokens = h.get("tokenizer.ggml.tokens").expect("tokens");
        assert_eq!(tokens.array_len(), Some(1000));
        assert!(tokens.items().is_none());
        assert_eq!(
            h.get("llama.rope.freq_base").and_then(GgufValue::as_f64),
            Some(500000.0)
        );

        // Q4_K: 144 bytes per 256; Q6_K: 210 per 256; F32: 4 per element.
        let t = &h.tensors;
        assert_eq!(t.token_embd_bytes, 1000 * 144);
        assert_eq!(t.output_bytes, 1000 * 210);
        let layer =
            256 * 144 + 64 * 144 + 64 * 210 + 256 * 144 + 2 * 512 * 144 + 256 * 2 * 210 + 2 * 1024;
        assert_eq!(layer, 353_408);
        assert_eq!(t.layer_bytes, vec![layer; 4]);
        assert_eq!(t.other_bytes, 1024);
        assert_eq!(t.total_bytes, 144_000 + 210_000 + 4 * 353_408 + 1024);
        assert_eq!(t.total_params, 2 * 256_000 + 4 * 557_568 + 256);
        assert_eq!(t.by_type[0].ggml_type, "Q4_K");
        assert!(t.unknown_types.is_empty());
        assert_eq!(h.data_offset % 32, 0);
    }
}

#[test]
fn geometry_from_a_llama_header() {
    let h = parse(&tiny_llama(3).header()).unwrap();
    let g = gguf::geometry_from_gguf(&h, "tiny.gguf").unwrap();
    assert_eq!(
        (
            g.num_layers,
            g.num_attention_heads,
            g.num_kv_heads,
            g.head_dim
        ),
        (4, 8, 2, 32)
    );
    assert_eq!(g.vocab_size, 1000);
    assert_eq!(g.max_position_embeddings, Some(8192));
    assert_eq!(g.gguf_file_type.as_deref(), Some("Q4_K_M"));
    assert_eq!(g.name.as_deref(), Some("Tiny Llama"));
    assert!(!g.tie_word_embeddings);
    assert_eq!(g.locator("kv_heads"), Some("llama.attention.head_count_kv"));
    // Exact counts from the tensor table.
    assert_eq!(g.params().total(), 2_742_528);
    let w = memory::weights_bytes(
        &g.params(),
        &g.weight_format(),
        g.gguf.as_ref().map(|t| t.total_bytes),
        &mut Trace::new(),
    );
    assert_eq!(w, 1_768_656);
    // f16 KV: 2 × 4 layers × 2 heads × 32 × 2 bytes.
    let bpt = memory::kv_bytes_per_token(&g, &KvSpec::new(CacheDtype::F16), &mut Trace::new());
    assert_eq!(bpt, 1024);
}

#[test]
fn per_layer_kv_head_counts_mark_recurrent_layers() {
    // A hybrid model: layers 1 and 3 are recurrent (0 KV heads) as llama.cpp writes them.
    let h = parse(
        &Gguf::new(3)
            .kv("general.architecture", Val::Str("granitehybrid".into()))
            .kv("granitehybrid.block_count", Val::U32(4))
            .kv("granitehybrid.embedding_length", Val::U32(256))
            .kv("granitehybrid.attention.head_count", Val::U32(8))
            .kv(
                "granitehybrid.attention.head_count_kv",
                Val::ArrU32(vec![2, 0, 4, 0]),
            )
            .header(),
    )
    .unwrap();
    let g = gguf::geometry_from_gguf(&h, "hybrid.gguf").unwrap();
    let kinds: Vec<Attention> = g.layers.iter().map(|l| l.attention).collect();
    assert_eq!(
        kinds,
        vec![
            Attention::Full,
            Attention::NoCache,
            Attention::Full,
            Attention::NoCache
        ]
    );
    assert_eq!(
        g.layers.iter().map(|l| l.kv_heads).collect::<Vec<_>>(),
        vec![2, 0, 4, 0]
    );
    // 2 × (2 + 4) heads × 32 × 2 bytes.
    assert_eq!(
        memory::kv_bytes_per_token(&g, &KvSpec::new(CacheDtype::F16), &mut Trace::new()),
        768
    );
}

#[test]
fn sliding_window_patterns_follow_llama_cpp() {
    let base = |arch: &str| {
        Gguf::new(3)
            .kv("general.architecture", Val::Str(arch.into()))
            .kv(&format!("{arch}.block_count"), Val::U32(12))
            .kv(&format!("{arch}.embedding_length"), Val::U32(256))
            .kv(&format!("{arch}.attention.head_count"), Val::U32(8))
            .kv(&format!("{arch}.attention.head_count_kv"), Val::U32(4))
            .kv(&format!("{arch}.attention.sliding_window"), Val::U32(1024))
    };
    let sliding = |g: &oomdoctor::ingest::model::geometry::Geometry| -> Vec<usize> {
        (0..g.layers.len())
            .filter(|i| matches!(g.layers[*i].attention, Attention::Sliding { .. }))
            .collect()
    };
    let g2 = gguf::geometry_from_gguf(&parse(&base("gemma2").header()).unwrap(), "g2").unwrap();
    assert_eq!(sliding(&g2), vec![0, 2, 4, 6, 8, 10]);
    let g3 = gguf::geometry_from_gguf(&parse(&base("gemma3").header()).unwrap(), "g3").unwrap();
    assert_eq!(sliding(&g3), vec![0, 1, 2, 3, 4, 6, 7, 8, 9, 10]);
    // An explicit per-layer pattern wins.
    let explicit = base("gemma3").kv(
        "gemma3.attention.sliding_window_pattern",
        Val::ArrBool((0..12).map(|i| i < 3).collect()),
    );
    let ge = gguf::geometry_from_gguf(&parse(&explicit.header()).unwrap(), "ge").unwrap();
    assert_eq!(sliding(&ge), vec![0, 1, 2]);
    // An architecture whose pattern we do not know: full length everywhere, with a note.
    let gu = gguf::geometry_from_gguf(&parse(&base("mystery").header()).unwrap(), "gu").unwrap();
    assert!(sliding(&gu).is_empty());
    assert!(gu.notes.iter().any(|n| n.contains("upper bound")));
}

#[test]
fn mla_header_gives_the_latent_cache() {
    let h = parse(
        &Gguf::new(3)
            .kv("general.architecture", Val::Str("deepseek2".into()))
            .kv("deepseek2.block_count", Val::U32(27))
            .kv("deepseek2.embedding_length", Val::U32(2048))
            .kv("deepseek2.attention.head_count", Val::U32(16))
            .kv("deepseek2.attention.head_count_kv", Val::U32(1))
            .kv("deepseek2.attention.key_length", Val::U32(576))
            .kv("deepseek2.attention.value_length", Val::U32(512))
            .kv("deepseek2.attention.key_length_mla", Val::U32(192))
            .kv("deepseek2.attention.value_length_mla", Val::U32(128))
            .kv("deepseek2.attention.kv_lora_rank", Val::U32(512))
            .kv("deepseek2.rope.dimension_count", Val::U32(64))
            .kv("deepseek2.expert_count", Val::U32(64))
            .kv("deepseek2.expert_used_count", Val::U32(6))
            .kv("deepseek2.leading_dense_block_count", Val::U32(1))
            .header(),
    )
    .unwrap();
    let g = gguf::geometry_from_gguf(&h, "dsv2.gguf").unwrap();
    let mla = g.mla.expect("mla");
    assert_eq!(
        (
            mla.kv_lora_rank,
            mla.qk_rope_head_dim,
            mla.qk_nope_head_dim,
            mla.v_head_dim
        ),
        (512, 64, 128, 128)
    );
    assert_eq!(
        memory::kv_bytes_per_token(&g, &KvSpec::new(CacheDtype::F16), &mut Trace::new()),
        27 * 576 * 2
    );
    assert_eq!(g.layers.iter().filter(|l| l.moe).count(), 26);
}

#[test]
fn unknown_tensor_types_are_flagged_not_fatal() {
    let h = parse(
        &tiny_llama(3)
            .tensor("blk.0.mystery.weight", &[256, 4], 200)
            .tensor("blk.1.mystery2.weight", &[256], 201)
            .header(),
    )
    .unwrap();
    assert_eq!(h.tensors.unknown_types, vec![200, 201]);
    assert!(h.notes.iter().any(|n| n.contains("[200, 201]")));
    assert_eq!(h.tensors.total_bytes, 1_768_656);
}

#[test]
fn malformed_tensors_are_errors_with_offsets() {
    // A Q4_K row of 100 elements is not a whole number of 256-element blocks.
    let e = parse(&Gguf::new(3).tensor("bad", &[100, 2], Q4_K).header()).unwrap_err();
    assert!(matches!(e, GgufError::Tensor { offset: 24, .. }), "{e}");
    // Five dimensions.
    let e = parse(&Gguf::new(3).tensor("bad", &[1, 1, 1, 1, 1], F16).header()).unwrap_err();
    assert!(e.to_string().contains("5 dimensions"), "{e}");
    // A shape whose product overflows.
    let e = parse(
        &Gguf::new(3)
            .tensor("huge", &[1 << 32, 1 << 32, 1 << 32], F16)
            .header(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("overflows"), "{e}");
}

#[test]
fn every_truncation_is_an_error_never_a_panic() {
    // A short tokenizer keeps the quadratic loop quick; the arrays are still skipped.
    let full = with_vocab(3, 40).header();
    assert!(parse(&full).is_ok());
    for len in 0..full.len() {
        match parse(&full[..len]) {
            Err(GgufError::Truncated { offset, .. }) => assert!(offset <= len as u64),
            Err(GgufError::Magic { .. }) => assert!(len < 4),
            Err(other) => panic!("prefix {len}: unexpected {other}"),
            Ok(_) => panic!("prefix {len} of {} parsed", full.len()),
        }
    }
}

#[test]
fn random_corruption_never_panics() {
    let full = with_vocab(3, 40).header();
    // A fixed linear congruential generator: reproducible, no dependency.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        state >> 33
    };
    let mut errors = 0;
    for _ in 0..3000 {
        let mut b = full.clone();
        for _ in 0..1 + next() % 4 {
            let i = (next() as usize) % b.len();
            b[i] = (next() & 0xff) as u8;
        }
        // Corrupt counts and lengths too: they are where hostile files attack.
        if next() % 4 == 0 {
            let at = 8 + (next() as usize % 2) * 8;
            b[at + 7] = 0x7f;
        }
        if let Ok(h) = parse(&b) {
            let _ = gguf::geometry_from_gguf(&h, "fuzz.gguf");
        } else {
            errors += 1;
        }
    }
    assert!(errors > 0);
}

#[test]
fn the_header_budget_is_enforced() {
    let full = tiny_llama(3).header();
    let e = gguf::read_header(&full[..], "t.gguf", 200).unwrap_err();
    assert!(matches!(e, GgufError::Limit { limit: 200, .. }), "{e}");
}

#[test]
fn a_short_file_is_reported_as_an_incomplete_download() {
    let dir = std::env::temp_dir().join(format!("oomdoctor-gguf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("short.gguf");
    std::fs::write(&path, tiny_llama(3).header()).unwrap();
    let h = gguf::read_gguf_file(&path).unwrap();
    assert!(
        h.notes.iter().any(|n| n.contains("incomplete download")),
        "{:?}",
        h.notes
    );
    let missing = gguf::read_gguf_file(&dir.join("absent.gguf")).unwrap_err();
    assert!(matches!(missing, GgufError::Io { .. }));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn implausible_sizes_are_refused() {
    let h = parse(
        &Gguf::new(3)
            .kv("general.architecture", Val::Str("llama".into()))
            .kv("llama.block_count", Val::U32(2))
            .kv("llama.embedding_length", Val::U64(1 << 40))
            .kv("llama.attention.head_count", Val::U32(8))
            .header(),
    )
    .unwrap();
    let e = gguf::geometry_from_gguf(&h, "x.gguf").unwrap_err();
    assert!(
        matches!(e, GgufError::BadValue { ref key, .. } if key == "llama.embedding_length"),
        "{e}"
    );
    let h = parse(
        &Gguf::new(3)
            .kv("general.architecture", Val::Str("llama".into()))
            .kv("llama.block_count", Val::U32(1 << 20))
            .kv("llama.embedding_length", Val::U32(64))
            .kv("llama.attention.head_count", Val::U32(8))
            .header(),
    )
    .unwrap();
    assert!(matches!(
        gguf::geometry_from_gguf(&h, "x.gguf"),
        Err(GgufError::Limit { .. })
    ));
}

#[test]
fn missing_geometry_keys_are_named() {
    let h = parse(
        &Gguf::new(3)
            .kv("general.architecture", Val::Str("llama".into()))
            .header(),
    )
    .unwrap();
    let e = gguf::geometry_from_gguf(&h, "x.gguf").unwrap_err();
    assert_eq!(
        e.to_string(),
        "x.gguf: the metadata has no `llama.block_count`"
    );
    let h = parse(&Gguf::new(3).kv("general.alignment", Val::U64(64)).header()).unwrap();
    assert_eq!(h.alignment, 64);
    assert!(gguf::geometry_from_gguf(&h, "x.gguf").is_err());
}

// ---------------------------------------------------------------------------------------
// Plans from a GGUF header: exact tensor bytes per layer decide -ngl.
// ---------------------------------------------------------------------------------------

use oomdoctor::knowledge::Engine;
use oomdoctor::knowledge::fit::FitStatus;
use oomdoctor::knowledge::plan::{PlanArgs, PlanFormat, plan};

/// Llama-3-8B shapes with a Q4_K/Q6_K mix like Q4_K_M (header only: plans never read data).
fn llama3_8b_q4() -> Gguf {
    let mut g = Gguf::new(3)
        .kv("general.architecture", Val::Str("llama".into()))
        .kv("general.name", Val::Str("Meta Llama 3 8B Instruct".into()))
        .kv("general.file_type", Val::U32(15))
        .kv("llama.block_count", Val::U32(32))
        .kv("llama.context_length", Val::U32(8192))
        .kv("llama.embedding_length", Val::U32(4096))
        .kv("llama.feed_forward_length", Val::U32(14336))
        .kv("llama.attention.head_count", Val::U32(32))
        .kv("llama.attention.head_count_kv", Val::U32(8))
        .kv("llama.vocab_size", Val::U32(128_256))
        .tensor("token_embd.weight", &[4096, 128_256], Q4_K)
        .tensor("output_norm.weight", &[4096], F32)
        .tensor("output.weight", &[4096, 128_256], Q6_K);
    for i in 0..32 {
        let t = |n: &str| format!("blk.{i}.{n}.weight");
        g = g
            .tensor(&t("attn_norm"), &[4096], F32)
            .tensor(&t("attn_q"), &[4096, 4096], Q4_K)
            .tensor(&t("attn_k"), &[4096, 1024], Q4_K)
            .tensor(&t("attn_v"), &[4096, 1024], Q6_K)
            .tensor(&t("attn_output"), &[4096, 4096], Q4_K)
            .tensor(&t("ffn_norm"), &[4096], F32)
            .tensor(&t("ffn_gate"), &[4096, 14336], Q4_K)
            .tensor(&t("ffn_up"), &[4096, 14336], Q4_K)
            .tensor(&t("ffn_down"), &[14336, 4096], Q6_K);
    }
    g
}

const LAYER_BYTES: u64 =
    2 * 9_437_184 + 2_359_296 + 3_440_640 + 2 * 33_030_144 + 48_168_960 + 32_768;

fn write_temp(name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("oomdoctor-plan-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.gguf"));
    std::fs::write(&path, bytes).unwrap();
    path
}

fn plan_args(model: std::path::PathBuf, gpu: &str) -> PlanArgs {
    PlanArgs {
        model,
        gpu: gpu.into(),
        engine: None,
        context: None,
        concurrency: None,
        kv_cache_dtype: None,
        dtype: None,
        quantization: None,
        tensor_parallel: None,
        format: PlanFormat::Json,
        explain: false,
    }
}

#[test]
fn gguf_tensor_table_gives_exact_weights() {
    let h = parse(&llama3_8b_q4().header()).unwrap();
    assert_eq!(LAYER_BYTES, 138_936_320);
    assert_eq!(h.tensors.layer_bytes, vec![LAYER_BYTES; 32]);
    assert_eq!(
        h.tensors.total_bytes,
        32 * LAYER_BYTES + 295_501_824 + 430_940_160 + 16_384
    );
    let g = gguf::geometry_from_gguf(&h, "l3.gguf").unwrap();
    assert_eq!(g.params().total(), 8_030_261_248);
}

#[test]
fn llamacpp_plan_offloads_the_layers_that_fit() {
    let path = write_temp("l3q4", &llama3_8b_q4().header());
    // A GGUF is planned for llama.cpp and Ollama by default.
    let r = plan(&plan_args(path.clone(), "8GiB")).unwrap();
    let engines: Vec<Engine> = r.engines.iter().map(|p| p.engine).collect();
    assert_eq!(engines, vec![Engine::Llamacpp, Engine::Ollama]);
    assert!(r.fits, "{}", r.verdict);
    assert_eq!(
        r.weights_bytes,
        32 * LAYER_BYTES + 295_501_824 + 430_940_160 + 16_384
    );
    let l = r
        .engines
        .iter()
        .find(|p| p.engine == Engine::Llamacpp)
        .unwrap();
    assert_eq!(l.context_tokens, 4096); // llama.cpp's default -c
    // On the GPU: everything but the token embeddings.
    assert_eq!(l.weights_bytes, r.weights_bytes - 295_501_824);
    assert_eq!(
        l.settings.get("-ngl").map(|v| v.to_string()).as_deref(),
        Some("33")
    );
    assert!(l.max_context_tokens >= 8192);
    assert!(l.command.starts_with(&format!(
        "llama-server -m {} -c 4096 -ngl 33",
        path.display()
    )));

    // 4 GiB cannot hold 4.5 GiB of layers: -ngl N with exactly N layers' bytes.
    let mut a = plan_args(path.clone(), "4GiB");
    a.engine = Some(Engine::Llamacpp);
    let r = plan(&a).unwrap();
    assert!(!r.fits);
    let l = &r.engines[0];
    assert_eq!(l.status, FitStatus::PartialOffload);
    let ngl = l.recommended.gpu_layers.expect("-ngl");
    let overheads: u64 = l.overheads.iter().map(|o| o.bytes).sum();
    let kv_layer = 4096 * 2 * 8 * 128 * 2; // one layer's f16 KV at 4,096 cells
    let used = |n: u64| n * (LAYER_BYTES + kv_layer) + overheads;
    assert!(used(ngl) <= 4 << 30, "ngl {ngl} uses {}", used(ngl));
    assert!(used(ngl + 1) > 4 << 30, "ngl {} would also fit", ngl + 1);
    assert!(
        l.verdict
            .contains(&format!("{ngl} of 33 layers on the GPU")),
        "{}",
        l.verdict
    );
    assert!(l.notes.iter().any(|n| n.contains("stay in host memory")));
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn ollama_parallel_multiplies_the_cache() {
    let path = write_temp("l3q4-ollama", &llama3_8b_q4().header());
    let mut a = plan_args(path.clone(), "rtx3060");
    a.engine = Some(Engine::Ollama);
    a.context = Some(8192);
    a.concurrency = Some(4);
    let r = plan(&a).unwrap();
    let p = &r.engines[0];
    // 4 × 8,192 cells × 128 KiB = 4 GiB of f16 KV next to 4.5 GiB of layers on 11.76 GiB.
    assert_eq!(p.kv_needed_bytes, 4 << 30);
    assert_eq!(
        p.settings
            .get("OLLAMA_NUM_PARALLEL")
            .map(|v| v.to_string())
            .as_deref(),
        Some("4")
    );
    assert_eq!(
        p.settings.get("num_ctx").map(|v| v.to_string()).as_deref(),
        Some("8192")
    );
    assert!(
        p.command
            .contains("OLLAMA_CONTEXT_LENGTH=8192 OLLAMA_NUM_PARALLEL=4"),
        "{}",
        p.command
    );
    // On an 8 GiB card the same request needs the q8_0 cache, with flash attention.
    a.gpu = "8GiB".into();
    let r = plan(&a).unwrap();
    let p = &r.engines[0];
    assert!(!p.fits);
    assert_eq!(p.recommended.kv_cache_dtype, "q8_0");
    assert_eq!(
        p.settings
            .get("OLLAMA_KV_CACHE_TYPE")
            .map(|v| v.to_string())
            .as_deref(),
        Some("q8_0")
    );
    assert_eq!(
        p.settings
            .get("OLLAMA_FLASH_ATTENTION")
            .map(|v| v.to_string())
            .as_deref(),
        Some("1")
    );
    // A directory holding one GGUF is read as that GGUF.
    let r = plan(&plan_args(path.parent().unwrap().to_path_buf(), "8GiB")).unwrap();
    assert_eq!(r.model.name, "Meta Llama 3 8B Instruct");
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn split_models_are_summed_over_their_parts() {
    // llama-gguf-split: metadata in part 1, tensors spread over both parts.
    let dir = std::env::temp_dir().join(format!("oomdoctor-split-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let layer = |g: Gguf, i: u32| {
        g.tensor(&format!("blk.{i}.attn_q.weight"), &[256, 256], Q4_K)
            .tensor(&format!("blk.{i}.ffn_down.weight"), &[512, 256], Q6_K)
    };
    let first = Gguf::new(3)
        .kv("general.architecture", Val::Str("llama".into()))
        .kv("llama.block_count", Val::U32(2))
        .kv("llama.embedding_length", Val::U32(256))
        .kv("llama.attention.head_count", Val::U32(8))
        .kv("split.no", Val::U32(0))
        .kv("split.count", Val::U32(2))
        .tensor("token_embd.weight", &[256, 1000], Q4_K);
    let second = Gguf::new(3)
        .kv("split.no", Val::U32(1))
        .kv("split.count", Val::U32(2));
    let p1 = dir.join("m-00001-of-00002.gguf");
    std::fs::write(&p1, layer(first, 0).header()).unwrap();
    let part_two = layer(second, 1).tensor("output.weight", &[256, 1000], Q6_K);
    std::fs::write(dir.join("m-00002-of-00002.gguf"), part_two.header()).unwrap();

    let h = gguf::read_gguf_model(&p1).unwrap();
    let layer_bytes = 256 * 144 + 256 * 2 * 210;
    assert_eq!(h.tensors.layer_bytes, vec![layer_bytes; 2]);
    assert_eq!(h.tensors.output_bytes, 1000 * 210);
    assert_eq!(
        h.tensors.total_bytes,
        2 * layer_bytes + 1000 * 144 + 1000 * 210
    );
    assert_eq!(h.tensor_count, 6);

    // A missing part is noted, not fatal.
    std::fs::remove_file(dir.join("m-00002-of-00002.gguf")).unwrap();
    let h = gguf::read_gguf_model(&p1).unwrap();
    assert_eq!(h.tensors.total_bytes, layer_bytes + 1000 * 144);
    assert!(
        h.notes
            .iter()
            .any(|n| n.contains("m-00002-of-00002.gguf is missing")),
        "{:?}",
        h.notes
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
