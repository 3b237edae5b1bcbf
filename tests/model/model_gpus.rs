//! `--gpu`: sizes, names as people and nvidia-smi write them, counts for tensor
//! parallelism, names that need a size, and helpful errors.

use oomdoctor::knowledge::gpus::{GpuError, parse_gpu};
use oomdoctor::knowledge::memory::GIB;

fn gib(spec: &str) -> f64 {
    let g = parse_gpu(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
    g.memory_bytes as f64 / GIB as f64
}

#[test]
fn sizes_are_taken_as_given() {
    assert_eq!(parse_gpu("24GiB").unwrap().memory_bytes, 24 * GIB);
    // GB is read as GiB, as ML tools do; `g` and a space are fine.
    assert_eq!(parse_gpu("24GB").unwrap().memory_bytes, 24 * GIB);
    assert_eq!(parse_gpu("80g").unwrap().memory_bytes, 80 * GIB);
    assert_eq!(
        parse_gpu("47.5 GiB").unwrap().memory_bytes,
        47 * GIB + GIB / 2
    );
    let bare = parse_gpu("24").unwrap();
    assert_eq!(bare.memory_bytes, 24 * GIB);
    assert!(bare.notes.iter().any(|n| n.contains("read as GiB")));
    assert_eq!(parse_gpu("24GiB").unwrap().count, 1);
}

#[test]
fn names_resolve_however_they_are_written() {
    for spec in [
        "rtx4090",
        "RTX 4090",
        "4090",
        "NVIDIA GeForce RTX 4090",
        "rtx-4090",
    ] {
        let g = parse_gpu(spec).unwrap();
        assert_eq!(g.name, "NVIDIA GeForce RTX 4090", "{spec}");
        // The total PyTorch reports for a 4090, not the marketed 24 GB.
        assert_eq!(g.memory_bytes, (23.65 * GIB as f64) as u64);
        assert_eq!(g.nominal_bytes, 24 * GIB);
    }
    assert!((gib("a100") - 79.15).abs() < 0.01);
    assert!((gib("A100-SXM4-40GB") - 39.39).abs() < 0.01);
    assert!((gib("a100-40gb") - 39.39).abs() < 0.01);
    assert!((gib("t4") - 14.75).abs() < 0.01);
    assert_eq!(parse_gpu("h100").unwrap().nominal_bytes, 80 * GIB);
    // Estimated usable memory: 98.5 % of nominal.
    assert!((gib("h100") - 78.8).abs() < 0.01);
    assert_eq!(parse_gpu("h100-nvl").unwrap().nominal_bytes, 94 * GIB);
    assert_eq!(parse_gpu("h200").unwrap().nominal_bytes, 141 * GIB);
    assert_eq!(parse_gpu("rtx5090").unwrap().nominal_bytes, 32 * GIB);
    assert_eq!(parse_gpu("a10g").unwrap().name, "NVIDIA A10G");
    assert_eq!(parse_gpu("a10").unwrap().name, "NVIDIA A10");
    assert_eq!(parse_gpu("l40s").unwrap().nominal_bytes, 48 * GIB);
    assert_eq!(parse_gpu("RTX A6000").unwrap().nominal_bytes, 48 * GIB);
    assert_eq!(parse_gpu("mi300x").unwrap().nominal_bytes, 192 * GIB);
    assert_eq!(parse_gpu("v100-32gb").unwrap().nominal_bytes, 32 * GIB);
    assert_eq!(parse_gpu("4060ti-16gb").unwrap().nominal_bytes, 16 * GIB);
    let mi250 = parse_gpu("mi250").unwrap();
    assert_eq!(mi250.nominal_bytes, 64 * GIB);
    assert!(mi250.notes.iter().any(|n| n.contains("two GCDs")));
    assert_eq!(
        parse_gpu("Quadro RTX 8000").unwrap().nominal_bytes,
        48 * GIB
    );
}

#[test]
fn counts_for_several_gpus() {
    for spec in ["2xh100", "2 x H100", "h100:2", "h100x2", "2×h100", "2*h100"] {
        let g = parse_gpu(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
        assert_eq!(
            (g.count, g.name.as_str()),
            (2, "NVIDIA H100 80GB"),
            "{spec}"
        );
        assert_eq!(g.total_bytes(), 2 * g.memory_bytes);
    }
    let g = parse_gpu("4x24GiB").unwrap();
    assert_eq!((g.count, g.memory_bytes), (4, 24 * GIB));
    let g = parse_gpu("8xa100-40gb").unwrap();
    assert_eq!(g.count, 8);
    assert!(matches!(parse_gpu("0xh100"), Err(GpuError::Invalid { .. })));
    assert!(matches!(
        parse_gpu("h100:zero"),
        Err(GpuError::Invalid { .. })
    ));
    // A name ending in digits after an x is not a count unless the rest is a GPU.
    assert!(matches!(
        parse_gpu("gtx9999"),
        Err(GpuError::Unknown { .. })
    ));
}

#[test]
fn ambiguous_names_ask_which() {
    for spec in ["v100", "4060ti", "RTX 4060 Ti", "rtx3080", "rtx6000"] {
        match parse_gpu(spec) {
            Err(GpuError::Ambiguous { options, .. }) => assert!(
                options.contains("gb") || options.contains("GB"),
                "{options}"
            ),
            other => panic!("{spec}: {other:?}"),
        }
    }
}

#[test]
fn apple_silicon_needs_its_memory_size() {
    let g = parse_gpu("m3-max-64gb").unwrap();
    assert!(g.unified);
    assert_eq!(g.nominal_bytes, 64 * GIB);
    assert_eq!(g.memory_bytes, 48 * GIB); // the default Metal working-set limit
    let g = parse_gpu("Apple M2 Ultra 192GB").unwrap();
    assert_eq!(g.memory_bytes, 144 * GIB);
    let e = parse_gpu("m3max").unwrap_err();
    assert!(e.to_string().contains("unified"), "{e}");
}

#[test]
fn unknown_names_suggest_close_ones() {
    match parse_gpu("h10") {
        Err(GpuError::Unknown { help, .. }) => assert!(help.contains("h100"), "{help}"),
        other => panic!("{other:?}"),
    }
    match parse_gpu("banana") {
        Err(GpuError::Unknown { help, .. }) => assert!(help.contains("--gpu 24GiB"), "{help}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(parse_gpu(""), Err(GpuError::Invalid { .. })));
    assert!(matches!(parse_gpu("1KiB"), Err(GpuError::Invalid { .. })));
}
