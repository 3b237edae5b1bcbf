//! The log gate (the crate's only `unsafe` code: AVX2 loads) against the obvious search, and
//! the gated scan of the input placed in the middle of a log larger than the scan's first
//! read: no panic, and no line the full walk would not deliver.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeSet;
use std::sync::LazyLock;

use oomdoctor::ingest::log::engines::{anchors, gate};
use oomdoctor::ingest::log::gate::GROUPS;
use oomdoctor::ingest::log::scanner::scan_planned;
use oomdoctor::ingest::log::{Hit, LineSink, ScanPlan};

static LITERALS: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| {
    GROUPS.iter().flat_map(|g| g.iter()).map(|(l, _)| l.bytes().map(|b| b | 0x20).collect()).collect()
});

/// 2 MiB and more of lines no gate literal or anchor holds.
static FILLER: LazyLock<Vec<u8>> =
    LazyLock::new(|| b"step 12 | loss 2.310 | lr 3.0e-5\n".repeat((2 << 20) / 32 + 4096));

fn naive(hay: &[u8], from: usize) -> Option<usize> {
    (from..hay.len()).find(|&i| {
        LITERALS.iter().any(|l| hay.get(i..i + l.len()).is_some_and(|w| w.iter().zip(l).all(|(&h, &c)| h | 0x20 == c)))
    })
}

#[derive(Default)]
struct Lines(BTreeSet<u64>);
impl LineSink for Lines {
    fn hit(&mut self, hit: &Hit<'_>) -> u32 {
        self.0.insert(hit.line_no);
        0
    }
}

fuzz_target!(|data: &[u8]| {
    let g = gate();
    for from in [0, 1, data.len() / 2] {
        assert_eq!(g.find(data, from), naive(data, from));
    }
    // The newline counts the search leaves for line numbers.
    let (mut found, mut marks) = (Vec::new(), Vec::new());
    g.hit_lines(data, &mut found, &mut marks);
    for &(at, n) in &marks {
        assert_eq!(n, data[..at].iter().filter(|&&b| b == b'\n').count() as u64, "at {at}");
    }
    let mut log = FILLER[..(1 << 20) - 7].to_vec();
    log.extend_from_slice(data);
    log.extend_from_slice(&FILLER);
    let plan = ScanPlan { head: 0, tail: 0, window: 512 };
    let mut gated = Lines::default();
    scan_planned(&mut &log[..], anchors(), Some(g), plan, &mut gated).unwrap();
    let mut full = Lines::default();
    scan_planned(&mut &log[..], anchors(), None, ScanPlan::full(), &mut full).unwrap();
    assert!(gated.0.is_subset(&full.0), "gated {:?} full {:?}", gated.0, full.0);
});
