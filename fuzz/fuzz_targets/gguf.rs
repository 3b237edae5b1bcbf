//! GGUF header reader (metadata only) and geometry.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = oomdoctor::model::gguf::read_header(&data[..], "fuzz.gguf", 1 << 20) {
        let _ = oomdoctor::model::gguf::geometry_from_gguf(&h, "fuzz.gguf");
    }
});
