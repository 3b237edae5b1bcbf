//! The series readers and analysis never panic: random series of every length and shape
//! (flat, one sample, all zero, huge values, drops, duplicate times) and random garbage
//! through every parser, then every query of the analysis.

use std::sync::Arc;

use crate::common::Rng;
use chrono::DateTime;
use oomdoctor::facts::evidence::InputName;
use oomdoctor::ingest::series::{self, SeriesFormat, SeriesSet};

fn series_text(rng: &mut Rng) -> String {
    let n = rng.below(120) as usize;
    let total = [1u64, 1024, 24576, 81559][rng.below(4) as usize];
    let mut out = String::from("timestamp, index, memory.used [MiB], memory.total [MiB]\n");
    let mut t = 1_757_284_401_000i64;
    let mut level = rng.below(total);
    for _ in 0..n {
        // Times: mostly increasing, sometimes repeated or going back.
        t += match rng.below(10) {
            0 => 0,
            1 => -5000,
            _ => 1000 + rng.below(60_000) as i64,
        };
        level = match rng.below(12) {
            0 => 0,
            1 => total,
            2 => rng.below(total + 1),
            _ => (level + rng.below(200)).saturating_sub(100).min(total),
        };
        let dt = DateTime::from_timestamp_millis(t)
            .unwrap()
            .format("%Y/%m/%d %H:%M:%S%.3f");
        let gpu = rng.below(3);
        out.push_str(&format!("{dt}, {gpu}, {level} MiB, {total} MiB\n"));
    }
    out
}

fn exercise(set: &SeriesSet) {
    let a = series::analyze(set);
    let _ = serde_json::to_string(&a).unwrap();
    let _ = a.failures();
    let times = [
        None,
        Some(DateTime::from_timestamp_millis(1_757_284_401_000).unwrap()),
        Some(DateTime::from_timestamp_millis(1_757_300_000_000).unwrap()),
    ];
    for d in [None, Some(0), Some(1), Some(7)] {
        for t in times {
            let f = a.facts_for(d, t);
            let _ = a.facts_for_process(d, t, Some(42));
            for (name, _) in f.iter() {
                assert!(oomdoctor::facts::catalog::lookup(name).is_some(), "{name}");
            }
        }
    }
    for d in a.devices() {
        for w in [0, 1, 4, 80] {
            let _ = a.sparkline(d, w, None);
            let _ = a.chart(d, w, 0, times[1]);
            let _ = a.chart(d, w, 50, None);
        }
    }
}

#[test]
fn random_series_never_panic() {
    let mut rng = Rng(7);
    let input: InputName = Arc::from("random.csv");
    for _ in 0..300 {
        let text = series_text(&mut rng);
        match series::read(text.as_bytes(), &input, SeriesFormat::SmiGpu) {
            Ok(set) => exercise(&set),
            Err(e) => assert!(
                text.lines().count() <= 1 || matches!(e, series::SeriesError::Empty { .. }),
                "{e}"
            ),
        }
    }
}

#[test]
fn random_bytes_through_every_parser_never_panic() {
    let mut rng = Rng(11);
    let input: InputName = Arc::from("garbage");
    let alphabet: &[u8] = b"0123456789 ,.:/-_{}=\"\\#MiBGPU[N/A]\nTYPE DCGM_FI_DEV_FB_USED vllm:kv_cache_usage_perc gpu ts used \xff\xfe\r\t";
    for round in 0..400 {
        let len = rng.below(400) as usize;
        let bytes: Vec<u8> = (0..len)
            .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize])
            .collect();
        let _ = series::sniff(&bytes);
        for format in [
            SeriesFormat::SmiGpu,
            SeriesFormat::SmiApps,
            SeriesFormat::Prometheus,
            SeriesFormat::PlainCsv,
            SeriesFormat::JsonLines,
        ] {
            if let Ok(set) = series::read(bytes.as_slice(), &input, format) {
                if round % 4 == 0 {
                    exercise(&set);
                }
            }
        }
    }
}

#[test]
fn degenerate_series_analyse_cleanly() {
    let input: InputName = Arc::from("tiny.csv");
    for text in [
        "timestamp,used_bytes\n2025-09-07T22:33:21Z,0\n",
        "timestamp,used_bytes,total_bytes\n2025-09-07T22:33:21Z,5,10\n2025-09-07T22:33:21Z,5,10\n",
        "t,used\n1,1\n2,1\n3,1\n4,1\n5,1\n6,1\n7,1\n8,1\n9,1\n10,1\n",
        "timestamp,used_bytes,total_bytes\n2025-09-07T22:33:21Z,10,10\n2025-09-07T22:33:22Z,0,10\n",
    ] {
        let set = series::read(text.as_bytes(), &input, SeriesFormat::PlainCsv).unwrap();
        exercise(&set);
    }
}
