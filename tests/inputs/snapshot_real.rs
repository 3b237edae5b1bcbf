//! The snapshot analysis on the real snapshots of `../shared/eval/snapshots` (SOURCES.md).
//!
//! The files are third-party data and never copied into the repository: when the folder is
//! absent these tests print a note and pass without checking anything.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use oomdoctor::facts::evidence::InputName;
use oomdoctor::ingest::snapshot::pickle::PickleLimits;
use oomdoctor::ingest::snapshot::{Category, Layout, Moment, SnapshotAnalysis, read_snapshot};

const GIB: f64 = (1u64 << 30) as f64;
const MIB: f64 = (1u64 << 20) as f64;

fn dir() -> Option<PathBuf> {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/eval/snapshots");
    if d.is_dir() {
        Some(d)
    } else {
        eprintln!(
            "note: {} is absent; skipping the real-snapshot checks",
            d.display()
        );
        None
    }
}

fn analyse(name: &str) -> Option<SnapshotAnalysis> {
    let path = dir()?.join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let input: InputName = Arc::from(name);
    Some(
        read_snapshot(&bytes, &input, &PickleLimits::default())
            .unwrap_or_else(|e| panic!("{name}: {e}")),
    )
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / GIB
}

fn close(got: f64, want: f64, tol: f64, what: &str) {
    assert!(
        (got - want).abs() <= tol,
        "{what}: got {got:.3}, want {want} ± {tol}"
    );
}

#[test]
fn every_real_snapshot_reads_and_serialises() {
    let Some(dir) = dir() else { return };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pickle" || x == "pkl"))
        .collect();
    files.sort();
    assert!(files.len() >= 17, "{} files", files.len());
    for path in files {
        let name = path.file_name().unwrap().to_str().unwrap();
        let a = analyse(name).unwrap();
        let json = serde_json::to_string(&a).unwrap();
        assert!(
            json.len() < 4 << 20,
            "{name}: JSON summary is {} bytes",
            json.len()
        );
        let facts = a.facts();
        assert!(facts.contains("snapshot.generation"), "{name}");
        for d in a.devices() {
            assert!(d.timeline.points.len() <= 2000, "{name}");
            assert_eq!(
                d.segments.inconsistent_segments, 0,
                "{name}: blocks tile their segments"
            );
            assert_eq!(
                d.attribution
                    .categories
                    .iter()
                    .map(|c| c.bytes)
                    .sum::<u64>(),
                d.attribution.total_bytes,
                "{name}: categories add up"
            );
        }
    }
}

#[test]
fn generations_match_sources_md() {
    let cases = [
        ("yiyi_llm-inference_oom_snapshot.pickle", "2.0"),
        ("yiyi_llm-inference_1.3b_snapshot.pickle", "2.0"),
        ("layoutediting_dump_snapshot.pickle", "2.2"),
        ("ftcourse_memory_snapshot.pickle", "2.1"),
        ("select_n_snapshot.pickle", "2.1"),
        ("diffusion_my_snapshot.pickle", "2.2"),
        ("sketchkv2_kvcache_my_snapshot.pickle", "2.3-2.4"),
        ("octree_nca_my_snapshot.pickle", "2.5-2.7"),
        ("cs336_silmont_mem_snapshot.pickle", "2.5-2.7"),
        ("sqattn_cuda_memory_snapshot.pickle", "2.5-2.7"),
        ("code_location_oom_expandable_memory_snapshot.pickle", "2.8"),
        ("cs336_magma27_memory_snapshot.pickle", "2.9+"),
        ("cs336_bcrafton_memory_snapshot.pickle", "2.9+"),
        ("text2sql_expandable_config_dump_snapshot.pickle", "2.5+"),
        ("hitsbe_empty_my_snapshot.pickle", "2.5+"),
        ("attention_memory.pickle", "2.1-2.2"),
    ];
    for (name, want) in cases {
        let Some(a) = analyse(name) else { return };
        assert_eq!(
            a.generation.label, want,
            "{name}: {}",
            a.generation.evidence
        );
    }
}

#[test]
fn code_location_oom_is_replayed_on_device_1() {
    let Some(a) = analyse("code_location_oom_expandable_memory_snapshot.pickle") else {
        return;
    };
    assert_eq!(a.oom_device(), Some(1));
    let d = a.device(1).unwrap();
    let oom = d.oom.as_ref().unwrap();
    assert_eq!(oom.trace_index, 421);
    close(gib(oom.requested_bytes), 4.94, 0.01, "request");
    close(
        oom.device_free_bytes.unwrap() as f64 / MIB,
        91.25,
        0.1,
        "device free",
    );
    // The dump came after unwinding: 385 MiB allocated in the final segments...
    close(
        d.segments.allocated_bytes as f64 / MIB,
        384.8,
        1.0,
        "final allocated",
    );
    // ...but 78.3 GiB were live at the OOM.
    assert!(d.state.replayed);
    assert_eq!(d.state.moment, Moment::Oom);
    close(gib(d.state.live_bytes), 78.29, 0.05, "live at OOM");
    assert_eq!(d.state.live_blocks, 111);
    close(gib(d.state.reserved_bytes), 78.42, 0.01, "mapped at OOM");
    assert!(
        d.state.largest_free_block_bytes < oom.requested_bytes,
        "no gap fits the request"
    );
    // 130 MiB mapped but not live; expandable segments unmap such gaps, so it is not
    // counted as fragmentation.
    close(
        d.state.free_bytes as f64 / MIB,
        132.9,
        1.0,
        "mapped but free at OOM",
    );
    assert_eq!(d.state.fragmented_free_bytes, 0);
    assert_eq!(d.trace.replay_inconsistencies, 0);
    assert_eq!(d.attribution.dominant(), Some(Category::Activations));
    assert!(d.attribution.bytes(Category::Activations) as f64 > 0.95 * d.state.live_bytes as f64);
    assert!(
        d.attribution.top_sites[0]
            .site
            .label
            .starts_with("models.py:"),
        "{:?}",
        d.attribution.top_sites[0].site
    );
    assert_eq!(
        oom.site.as_ref().unwrap().label,
        "models.py:181 update_nodes"
    );
    assert_eq!(oom.category, Some(Category::Activations));

    let f = a.facts();
    assert_eq!(f.num("oom.device"), Some(1.0));
    assert_eq!(f.num("snapshot.device"), Some(1.0));
    assert_eq!(
        f.num("oom.requested_bytes"),
        Some(oom.requested_bytes as f64)
    );
    assert_eq!(
        f.num("oom.allocated_bytes"),
        Some(d.state.live_bytes as f64)
    );
    assert_eq!(f.bool("torch.expandable_segments"), Some(true));
    assert_eq!(f.str("torch.alloc_conf"), Some("expandable_segments:True"));
    assert_eq!(f.bool("snapshot.replayed"), Some(true));
    assert_eq!(f.str("torch.version"), Some("2.8"));
    let src = &f.get("oom.requested_bytes").unwrap().sources[0];
    assert_eq!(
        src.locator.as_deref(),
        Some("device_traces[1][421] (oom).size")
    );
    // Device 2 holds the same activations, no OOM.
    let d2 = a.device(2).unwrap();
    assert!(d2.oom.is_none());
    close(
        gib(d2.segments.allocated_bytes),
        18.84,
        0.05,
        "device 2 allocated",
    );
}

#[test]
fn yiyi_oom_is_a_model_too_large() {
    let Some(a) = analyse("yiyi_llm-inference_oom_snapshot.pickle") else {
        return;
    };
    let d = a.device(0).unwrap();
    close(gib(d.segments.reserved_bytes), 11.03, 0.01, "reserved");
    close(gib(d.segments.allocated_bytes), 11.03, 0.01, "allocated");
    close(d.segments.inactive_bytes as f64 / MIB, 4.3, 0.1, "inactive");
    assert_eq!(d.attribution.dominant(), Some(Category::Weights));
    assert!(d.attribution.bytes(Category::Weights) as f64 > 0.99 * d.state.live_bytes as f64);
    assert!(
        d.attribution.top_sites[0]
            .site
            .label
            .starts_with("pytorch_backend.py:")
    );
    assert_eq!(d.trace.entries, 1);
    assert!(d.leak.is_none());
}

#[test]
fn yiyi_1_3b_legacy_blocks() {
    let Some(a) = analyse("yiyi_llm-inference_1.3b_snapshot.pickle") else {
        return;
    };
    let d = a.device(0).unwrap();
    close(gib(d.segments.reserved_bytes), 7.09, 0.01, "reserved");
    close(gib(d.segments.allocated_bytes), 5.29, 0.01, "allocated");
}

#[test]
fn magma27_is_cache_not_fragmentation() {
    let Some(a) = analyse("cs336_magma27_memory_snapshot.pickle") else {
        return;
    };
    let d = a.device(0).unwrap();
    close(gib(d.segments.reserved_bytes), 13.21, 0.01, "reserved");
    close(gib(d.segments.allocated_bytes), 1.28, 0.01, "allocated");
    close(
        gib(d.segments.releasable_cache_bytes),
        10.96,
        0.01,
        "cache in fully free segments",
    );
    assert_eq!(d.segments.releasable_segments, 170);
    assert!(d.segments.releasable_cache_bytes > 10 * d.segments.fragmented_free_bytes);
    let f = a.facts();
    assert_eq!(
        f.num("snapshot.releasable_cache_bytes"),
        Some(d.segments.releasable_cache_bytes as f64)
    );
}

#[test]
fn sketchkv2_weights_before_recording_and_kv_cache() {
    let Some(a) = analyse("sketchkv2_kvcache_my_snapshot.pickle") else {
        return;
    };
    let d = a.device(0).unwrap();
    close(gib(d.segments.reserved_bytes), 15.96, 0.05, "reserved");
    close(gib(d.segments.allocated_bytes), 15.27, 0.01, "allocated");
    close(
        gib(d.attribution.bytes(Category::BeforeRecording)),
        12.55,
        0.01,
        "frameless, before recording",
    );
    assert!(gib(d.attribution.bytes(Category::KvCache)) > 1.9);
    let top = &d.attribution.top_sites[0].site;
    assert!(
        top.label.starts_with("cache_utils_V2.py:22") && top.label.ends_with("update_new"),
        "{top:?}"
    );
    let second = &d.attribution.top_sites[1].site;
    assert!(
        second.label.starts_with("cache_utils_V2.py:22"),
        "{second:?}"
    );
    assert!(d.leak.is_none());
}

#[test]
fn hitsbe_empty_snapshot() {
    let Some(a) = analyse("hitsbe_empty_my_snapshot.pickle") else {
        return;
    };
    assert!(a.devices().is_empty());
    assert_eq!(a.oom_device(), None);
    assert_eq!(a.facts().num("snapshot.devices"), Some(0.0));
}

#[test]
fn layoutediting_segment_list_and_dump() {
    let Some(a) = analyse("layoutediting_memory_snapshot_segments_list.pkl") else {
        return;
    };
    assert_eq!(a.layout, Layout::SegmentList);
    assert_eq!(a.devices().len(), 1);
    let d = a.device(1).unwrap();
    close(gib(d.segments.reserved_bytes), 3.40, 0.01, "reserved");
    close(gib(d.segments.allocated_bytes), 3.12, 0.01, "allocated");
    assert_eq!(d.state.moment, Moment::Final);

    let Some(a) = analyse("layoutediting_dump_snapshot.pickle") else {
        return;
    };
    let d = a.device(1).unwrap();
    assert_eq!(d.segments.segment_count, 673);
    assert_eq!(d.segments.block_count, 6644);
    close(gib(d.segments.reserved_bytes), 10.5, 0.01, "reserved");
    close(gib(d.segments.allocated_bytes), 9.98, 0.01, "allocated");
    assert_eq!(a.focus_device(), Some(1));
}

#[test]
fn the_rest_match_sources_md() {
    let cases = [
        ("ftcourse_memory_snapshot.pickle", 6.03, 2.14),
        ("select_n_snapshot.pickle", 17.29, 15.09),
        ("octree_nca_my_snapshot.pickle", 8.56, 1.39),
        ("cs336_bcrafton_memory_snapshot.pickle", 3.95, 2.86),
        ("attention_memory.pickle", 15.12, 7.96),
        ("sqattn_cuda_memory_snapshot.pickle", 0.2148, 0.2003),
    ];
    for (name, reserved, allocated) in cases {
        let Some(a) = analyse(name) else { return };
        let d = a.device(0).unwrap();
        close(gib(d.segments.reserved_bytes), reserved, 0.01, name);
        close(gib(d.segments.allocated_bytes), allocated, 0.01, name);
    }
    let Some(a) = analyse("attention_memory.pickle") else {
        return;
    };
    assert_eq!(a.device(0).unwrap().segments.segment_count, 499);
    let Some(a) = analyse("diffusion_my_snapshot.pickle") else {
        return;
    };
    assert_eq!(a.device(0).unwrap().segments.segment_count, 7);
    let Some(a) = analyse("sqattn_cuda_memory_snapshot.pickle") else {
        return;
    };
    let d = a.device(0).unwrap();
    assert_eq!(d.trace.entries, 9576);
    assert!(
        a.frames.distinct_frames < 5000,
        "{} frames",
        a.frames.distinct_frames
    );
}

#[test]
fn text2sql_allocator_settings() {
    let Some(a) = analyse("text2sql_expandable_config_dump_snapshot.pickle") else {
        return;
    };
    assert_eq!(a.devices().len(), 2);
    let s = a.allocator_settings.as_ref().unwrap();
    assert_eq!(s.max_split_size, Some(134_217_728));
    let f = a.facts();
    assert_eq!(f.num("torch.max_split_size_mb"), Some(128.0));
    assert_eq!(f.bool("torch.expandable_segments"), Some(true));
    assert_eq!(
        f.str("torch.alloc_conf"),
        Some("expandable_segments:True,max_split_size_mb:128")
    );
}
