//! Hugging Face config.json parser and the arithmetic on what it yields.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(g) = oomdoctor::ingest::model::config::parse_config(text, "fuzz.json") {
        let _ = g.params();
        let _ = oomdoctor::knowledge::memory::kv_bytes(&g, 4096, oomdoctor::knowledge::memory::CacheDtype::F16);
    }
});
