//! Pickle reader + snapshot decoder + analysis + facts + plot data.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let input: oomdoctor::facts::evidence::InputName = std::sync::Arc::from("fuzz.pickle");
    let limits = oomdoctor::ingest::snapshot::pickle::PickleLimits::default();
    if let Ok(a) = oomdoctor::ingest::snapshot::read_snapshot(data, &input, &limits) {
        let _ = a.facts();
        let _ = oomdoctor::render::plot::SnapshotPlot::from_analysis(&a);
    }
});
