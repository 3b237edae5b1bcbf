//! GGUF header reader (metadata only) and geometry.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = oomdoctor::ingest::model::gguf::read_header(&data[..], "fuzz.gguf", 1 << 20) {
        let _ = oomdoctor::ingest::model::gguf::geometry_from_gguf(&h, "fuzz.gguf");
    }
});
