//! The restricted pickle reader on arbitrary bytes, with small limits so the fuzzer explores
//! limit errors too.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut limits = oomdoctor::ingest::snapshot::pickle::PickleLimits::default();
    limits.max_objects = 100_000;
    limits.max_stack_depth = 10_000;
    let _ = oomdoctor::ingest::snapshot::pickle::Pickle::parse(data, &limits);
});
