//! Memory time series: every parser (nvidia-smi GPU and per-process CSV, Prometheus/DCGM
//! text, plain CSV, JSON Lines) whatever the sniffer says, then the analysis, the facts for
//! each device and the terminal charts.
#![no_main]
use libfuzzer_sys::fuzz_target;
use oomdoctor::ingest::series::{self, SeriesFormat};

fuzz_target!(|data: &[u8]| {
    let input: oomdoctor::facts::evidence::InputName = std::sync::Arc::from("fuzz.csv");
    let _ = series::sniff(data);
    for format in [
        SeriesFormat::SmiGpu,
        SeriesFormat::SmiApps,
        SeriesFormat::Prometheus,
        SeriesFormat::PlainCsv,
        SeriesFormat::JsonLines,
    ] {
        let Ok(set) = series::read(data, &input, format) else { continue };
        let a = series::analyze(&set);
        let _ = a.facts_for(None, None);
        for d in a.devices() {
            let _ = a.facts_for(Some(d), None);
            let _ = a.sparkline(d, 40, None);
        }
    }
});
