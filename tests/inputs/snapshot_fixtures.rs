//! The snapshot analysis against the generated fixtures in `fixtures/snapshots`.
//!
//! `fixtures/snapshots/gen.py` simulates the caching allocator and records, next to each
//! pickle, the ground truth in `expected.json`: the allocator state and live bytes per
//! category *at* the OOM (or peak) as the simulator saw it, not as a replay would compute
//! it. These tests check that the Rust side reconstructs the same numbers from the file.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use oomdoctor::facts::catalog;
use oomdoctor::facts::evidence::{InputName, Unit};
use oomdoctor::ingest::snapshot::pickle::{Pickle, PickleLimits};
use oomdoctor::ingest::snapshot::schema::{self, Action, BlockState};
use oomdoctor::ingest::snapshot::{Category, LeakMethod, Moment, SnapshotAnalysis, read_snapshot};
use serde_json::Value as Json;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/snapshots")
}

fn expected() -> serde_json::Map<String, Json> {
    let text = std::fs::read_to_string(dir().join("expected.json")).expect("expected.json");
    match serde_json::from_str(&text).expect("expected.json parses") {
        Json::Object(m) => m,
        _ => panic!("expected.json is not an object"),
    }
}

fn bytes_of(name: &str) -> Vec<u8> {
    std::fs::read(dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn analyse(name: &str) -> SnapshotAnalysis {
    let input: InputName = Arc::from(name);
    read_snapshot(&bytes_of(name), &input, &PickleLimits::default())
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn num(v: &Json, path: &str) -> u64 {
    let mut cur = v;
    for key in path.split('.') {
        cur = &cur[key];
    }
    cur.as_u64()
        .unwrap_or_else(|| panic!("{path} missing in {v}"))
}

fn moment_name(m: Moment) -> &'static str {
    match m {
        Moment::Oom => "oom",
        Moment::Peak => "peak",
        Moment::Final => "final",
    }
}

#[test]
fn every_fixture_matches_the_simulators_ground_truth() {
    let expected = expected();
    assert!(expected.len() >= 20, "{} fixtures", expected.len());
    for (name, exp) in &expected {
        let a = analyse(name);
        assert_eq!(
            a.generation.label,
            exp["generation"].as_str().unwrap(),
            "{name}: generation ({})",
            a.generation.evidence
        );
        let protocol = exp["protocol"].as_u64().unwrap();
        assert_eq!(
            a.pickle_protocol.map(u64::from),
            (protocol >= 2).then_some(protocol),
            "{name}: protocol"
        );
        let layout = serde_json::to_value(a.layout).unwrap();
        assert_eq!(
            layout.as_str().unwrap().replace('_', "-"),
            exp["layout"].as_str().unwrap(),
            "{name}: layout"
        );
        let Some(device) = exp["device"].as_u64() else {
            assert!(a.devices().is_empty(), "{name}: expected no devices");
            continue;
        };
        assert_eq!(
            a.focus_device(),
            Some(device as u32),
            "{name}: focus device"
        );
        let d = a.device(device as u32).unwrap();

        // The final state, straight from `segments`.
        let fin = &exp["final"];
        assert_eq!(
            d.segments.reserved_bytes,
            num(fin, "reserved_bytes"),
            "{name}: reserved"
        );
        assert_eq!(
            d.segments.allocated_bytes,
            num(fin, "allocated_bytes"),
            "{name}: allocated"
        );
        assert_eq!(
            d.segments.pending_free_bytes,
            num(fin, "pending_free_bytes"),
            "{name}: pending free"
        );
        assert_eq!(
            d.segments.releasable_cache_bytes,
            num(fin, "releasable_bytes"),
            "{name}: releasable"
        );
        assert_eq!(
            d.segments.fragmented_free_bytes,
            num(fin, "fragmented_free_bytes"),
            "{name}: fragmented"
        );
        assert_eq!(
            d.segments.largest_free_block_bytes,
            num(fin, "largest_free_block_bytes"),
            "{name}: largest free"
        );
        assert_eq!(
            d.trace.entries,
            num(exp, "trace_entries"),
            "{name}: entries"
        );

        // The analysed moment, replayed when needed.
        let at = &exp["at_moment"];
        assert_eq!(
            moment_name(d.state.moment),
            exp["moment"].as_str().unwrap(),
            "{name}: moment"
        );
        assert_eq!(
            d.state.live_bytes,
            num(at, "live_bytes"),
            "{name}: live at {:?}",
            d.state.moment
        );
        assert_eq!(
            d.state.reserved_bytes,
            num(at, "reserved_bytes"),
            "{name}: reserved at {:?}",
            d.state.moment
        );
        assert_eq!(
            d.state.largest_free_block_bytes,
            num(at, "largest_free_block_bytes"),
            "{name}: largest free at moment"
        );
        assert_eq!(
            d.state.fragmented_free_bytes,
            num(at, "fragmented_free_bytes"),
            "{name}: fragmented at moment"
        );
        assert_eq!(
            d.trace.replay_inconsistencies, 0,
            "{name}: a consistent trace replays without inconsistencies"
        );
        for c in Category::ALL {
            let want = num(&at["categories"], c.name());
            assert_eq!(
                d.attribution.bytes(c),
                want,
                "{name}: {} at {:?}",
                c.name(),
                d.state.moment
            );
        }
        let sites = at["top_sites"].as_array().unwrap();
        if let Some(top) = sites.first() {
            let unique = sites
                .get(1)
                .is_none_or(|second| second[1].as_u64() < top[1].as_u64());
            if unique {
                let got = &d.attribution.top_sites[0];
                assert_eq!(got.site.label, top[0].as_str().unwrap(), "{name}: top site");
                assert_eq!(
                    got.bytes,
                    top[1].as_u64().unwrap(),
                    "{name}: top site bytes"
                );
            }
        }

        if exp["moment"] == "oom" {
            let oom = d.oom.as_ref().expect("oom event");
            assert_eq!(a.oom_device(), Some(device as u32), "{name}");
            assert_eq!(
                oom.requested_bytes,
                num(at, "requested_bytes"),
                "{name}: requested"
            );
            assert_eq!(
                oom.device_free_bytes,
                Some(num(at, "device_free_bytes")),
                "{name}: device free"
            );
            assert_eq!(oom.trace_index, num(at, "trace_index"), "{name}: oom index");
            assert_eq!(
                d.state.replayed,
                exp["replayed"].as_bool().unwrap(),
                "{name}: replayed"
            );
        } else {
            assert_eq!(a.oom_device(), None, "{name}");
        }

        match exp["leak"].as_object() {
            None => assert!(d.leak.is_none(), "{name}: unexpected leak {:?}", d.leak),
            Some(want) => {
                let leak = d
                    .leak
                    .as_ref()
                    .unwrap_or_else(|| panic!("{name}: leak not found"));
                let slope = want["slope_bytes_per_step"].as_f64().unwrap();
                assert!(
                    (leak.slope_bytes_per_step - slope).abs() <= slope * 0.05,
                    "{name}: slope {}",
                    leak.slope_bytes_per_step
                );
                assert_eq!(
                    leak.sites[0].site.label,
                    want["site"].as_str().unwrap(),
                    "{name}"
                );
                let method = match leak.method {
                    LeakMethod::ProfilerSteps => "profiler-steps",
                    LeakMethod::OptimizerSteps => "optimizer-steps",
                    LeakMethod::RepeatedCallSites => "repeated-call-sites",
                };
                assert_eq!(method, want["method"].as_str().unwrap(), "{name}");
            }
        }
    }
}

#[test]
fn fragmentation_oom_shows_gaps_smaller_than_the_request() {
    let a = analyse("fragmentation_oom.pickle");
    let f = a.facts();
    let request = f.num("oom.requested_bytes").unwrap();
    let largest = f.num("snapshot.largest_free_block_at_oom_bytes").unwrap();
    let fragmented = f.num("snapshot.fragmented_free_at_oom_bytes").unwrap();
    assert!(largest < request, "every gap is smaller than the request");
    assert!(fragmented > request, "but together they exceed it");
    assert_eq!(
        f.num("snapshot.releasable_cache_bytes"),
        Some(0.0),
        "no free segment to release: fragmentation, not cache"
    );
    assert!(f.num("snapshot.free_blocks").unwrap() >= 24.0);
    assert_eq!(
        f.bool("snapshot.replayed"),
        Some(false),
        "an OOM-observer dump is already the OOM state"
    );
    assert_eq!(f.num("oom.free_bytes"), Some(8.0 * 1024.0 * 1024.0));
}

#[test]
fn unwound_activation_oom_is_replayed_to_the_failure() {
    let a = analyse("activation_oom_unwound.pickle");
    let d = a.device(0).unwrap();
    assert!(d.state.replayed && d.state.replayed_entries > 10);
    assert!(
        d.state.live_bytes > 6 * d.segments.allocated_bytes,
        "the dump shows the unwound state, not the OOM"
    );
    assert!(d.segments.expandable_segment_count > 0);
    assert_eq!(d.attribution.dominant(), Some(Category::Activations));
    let f = a.facts();
    assert_eq!(
        f.num("oom.allocated_bytes"),
        Some(d.state.live_bytes as f64)
    );
    assert_eq!(
        f.num("snapshot.live_bytes_at_oom"),
        Some(d.state.live_bytes as f64)
    );
    assert_eq!(f.bool("torch.expandable_segments"), Some(true));
    assert_eq!(f.str("torch.alloc_conf"), Some("expandable_segments:True"));
    assert_eq!(f.str("snapshot.oom_category"), Some("activations"));
    assert_eq!(f.str("snapshot.oom_site"), Some("model.py:44 forward"));
    let loc = f.get("snapshot.live_bytes_at_oom").unwrap().sources[0]
        .locator
        .clone()
        .unwrap();
    assert!(
        loc.starts_with("device_traces[0][74] (oom; replayed backwards over 13 later entries)"),
        "{loc}"
    );
    // The segment map at the OOM shows the mapped range full of live blocks.
    assert_eq!(d.segment_map.moment, Moment::Oom);
    let live: u64 = d.segment_map.segments.iter().map(|s| s.live_bytes).sum();
    assert_eq!(live, d.state.live_bytes);
}

#[test]
fn weight_loading_oom_is_weights() {
    let a = analyse("weights_oom.pickle");
    let f = a.facts();
    assert_eq!(f.str("snapshot.dominant_category"), Some("weights"));
    assert_eq!(f.str("snapshot.oom_category"), Some("weights"));
    assert_eq!(
        f.str("snapshot.top_site"),
        Some("modeling_utils.py:4346 _load_state_dict_into_meta_model")
    );
    let reserved = f.num("snapshot.reserved_bytes").unwrap();
    let allocated = f.num("snapshot.allocated_bytes").unwrap();
    assert!(allocated / reserved > 0.98);
}

#[test]
fn kv_cache_staircase_is_growth_not_a_leak() {
    let a = analyse("kv_cache_staircase.pickle");
    let d = a.device(0).unwrap();
    assert!(d.leak.is_none());
    assert!(d.attribution.bytes(Category::KvCache) > 0);
    assert!(
        d.attribution.bytes(Category::BeforeRecording) > d.attribution.bytes(Category::KvCache),
        "weights loaded before recording"
    );
    assert!(
        d.attribution.top_sites[0]
            .site
            .label
            .starts_with("cache_utils.py:45")
    );
    assert_eq!(a.annotations.profiler_steps, 11);
}

#[test]
fn leaks_are_found_with_and_without_annotations() {
    for (name, method) in [
        ("leak_profiler_steps.pickle", "profiler-steps"),
        ("leak_repeated_sites.pickle", "repeated-call-sites"),
    ] {
        let f = analyse(name).facts();
        assert_eq!(f.str("snapshot.leak_method"), Some(method), "{name}");
        assert_eq!(
            f.str("snapshot.leak_site"),
            Some("train.py:57 record_metrics"),
            "{name}"
        );
        assert_eq!(
            f.num("snapshot.leak_slope_bytes_per_step"),
            Some(2.0 * 1024.0 * 1024.0),
            "{name}"
        );
        assert_eq!(f.num("snapshot.leak_steps"), Some(8.0), "{name}");
        assert!(
            f.num("snapshot.leak_growth_bytes").unwrap() >= 12.0 * 1024.0 * 1024.0,
            "{name}"
        );
    }
}

#[test]
fn healthy_run_summary() {
    let a = analyse("no_oom_summary.pickle");
    assert_eq!(a.devices().len(), 2);
    assert_eq!(a.oom_device(), None);
    let d = a.device(0).unwrap();
    assert!(d.leak.is_none(), "churn is not a leak");
    assert!(d.segments.pending_free_bytes > 0, "a record_stream block");
    assert_eq!(d.state.moment, Moment::Peak);
    assert!(d.attribution.bytes(Category::Communication) > 0);
    assert!(
        d.timeline.points.len() <= 2000 && d.timeline.points.len() as u64 == d.trace.entries + 1
    );
    assert_eq!(d.timeline.peak_live_bytes, d.state.live_bytes);
    let f = a.facts();
    assert_eq!(f.num("snapshot.device"), Some(0.0));
    assert_eq!(f.str("snapshot.moment"), Some("peak"));
    assert!(!f.contains("oom.requested_bytes"), "no OOM, no oom.* facts");
}

#[test]
fn empty_snapshot() {
    let a = analyse("empty.pickle");
    assert!(a.devices().is_empty());
    assert_eq!(a.oom_device(), None);
    let f = a.facts();
    assert_eq!(f.str("snapshot.generation"), Some("2.5+"));
    assert_eq!(f.num("snapshot.devices"), Some(0.0));
    serde_json::to_string(&a).unwrap();
}

fn decode(name: &str) -> schema::Snapshot {
    let bytes = bytes_of(name);
    let p = Pickle::parse(&bytes, &PickleLimits::default()).unwrap();
    schema::decode(&p, &PickleLimits::default()).unwrap()
}

#[test]
fn nine_byte_long1_reads_as_u64_max() {
    let s = decode("long1_9byte.pickle");
    assert_eq!(s.stream_of(s.traces[0].last().unwrap()), u64::MAX);
    // max_split_size 2^64-1 is PyTorch's -1 seen as unsigned: unlimited.
    assert_eq!(s.allocator_settings.as_ref().unwrap().max_split_size, None);
    assert!(
        !analyse("long1_9byte.pickle")
            .facts()
            .contains("torch.max_split_size_mb")
    );
}

#[test]
fn schema_generations_decode_their_specific_fields() {
    // 1.13 / 2.0 legacy blocks have no address: computed from the segment base.
    for name in ["v1_13.pickle", "v2_0.pickle"] {
        let s = decode(name);
        assert!(s.markers.legacy_blocks, "{name}");
        for seg in &s.segments {
            let blocks = s.blocks_of(seg);
            assert_eq!(blocks[0].address, seg.address, "{name}");
            assert!(blocks.iter().all(|b| b.address_computed), "{name}");
            assert_eq!(
                blocks.iter().map(|b| b.size).sum::<u64>(),
                seg.total_size,
                "{name}"
            );
        }
        assert!(
            s.blocks
                .iter()
                .any(|b| b.state == BlockState::ActiveAllocated && !b.frames.is_empty()),
            "{name}: history frames"
        );
    }
    // 2.1: segment_alloc entries without a frames key.
    let s = decode("v2_1.pickle");
    assert!(
        s.traces[0]
            .iter()
            .any(|e| e.action == Action::SegmentAlloc && e.frames.is_empty())
    );
    assert!(s.traces[0].iter().all(|e| e.time().is_none()));
    // 2.2: time_us.
    assert!(
        decode("v2_2.pickle").traces[0]
            .iter()
            .all(|e| e.time().is_some())
    );
    // 2.3: allocator settings and a pending-free block.
    let s = decode("v2_3.pickle");
    assert_eq!(
        s.allocator_settings.as_ref().unwrap().expandable_segments,
        Some(false)
    );
    assert!(
        s.blocks
            .iter()
            .any(|b| b.state == BlockState::ActivePendingFree)
    );
    // 2.10 spells it `active_awaiting_free` (as the docstring does) and sets user_metadata.
    let s = decode("v2_10.pickle");
    assert!(
        s.blocks
            .iter()
            .any(|b| b.state == BlockState::ActivePendingFree)
    );
    assert!(
        s.traces[0]
            .iter()
            .any(|e| s.extra(e).and_then(|x| x.user_metadata.as_deref())
                == Some("{\"phase\": \"eval\"}"))
    );
    // 2.11: forward_frames on backward allocations.
    let s = decode("v2_11_protocol5.pickle");
    let ff = s.traces[0]
        .iter()
        .find_map(|e| s.extra(e).and_then(|x| x.forward_frames.clone()))
        .unwrap();
    assert!(ff[0].contains("model.py\", line 41"));
    // 2.12: a private pool, pool_id on its events.
    let a = analyse("v2_12_protocol2.pickle");
    let d = a.device(0).unwrap();
    assert_eq!(d.segments.private_pools, 1);
    assert!(d.segments.private_pool_bytes > 0 && d.segments.private_pool_allocated_bytes > 0);
    let s = decode("v2_12_protocol2.pickle");
    assert!(
        s.traces[0]
            .iter()
            .any(|e| s.extra(e).and_then(|x| x.pool_id) == Some((1, 0)))
    );
    assert_eq!(
        a.facts().num("snapshot.private_pool_bytes"),
        Some(d.segments.private_pool_bytes as f64)
    );
    // 2.14: pinned host memory and an annotate event.
    let a = analyse("v2_14.pickle");
    let host = a.host.as_ref().unwrap();
    assert_eq!(
        (host.segments, host.allocated_bytes, host.trace_entries),
        (1, 2 << 20, 1)
    );
    assert!(
        decode("v2_14.pickle").traces[0]
            .iter()
            .any(|e| e.action == Action::Annotate)
    );
}

#[test]
fn frames_are_shared_and_interned() {
    let s = decode("leak_profiler_steps.pickle");
    let refs: usize = s.traces[0]
        .iter()
        .map(|e| s.frames.list(e.frames).len())
        .sum();
    assert!(refs > 500, "{refs} frame references");
    assert!(
        s.frames.frames.len() < 40,
        "{} distinct frames",
        s.frames.frames.len()
    );
    assert!(
        s.frames.list_count() < 20,
        "{} distinct lists",
        s.frames.list_count()
    );
}

#[test]
fn every_protocol_gives_the_same_analysis() {
    let strip = |name: &str| {
        let mut v = serde_json::to_value(analyse(name)).unwrap();
        let o = v.as_object_mut().unwrap();
        o.remove("input");
        o.remove("pickle_protocol");
        v
    };
    let reference = strip("v2_2.pickle");
    for name in ["v2_2_protocol0.pickle", "v2_2_protocol1.pickle"] {
        assert_eq!(strip(name), reference, "{name}");
    }
}

#[test]
fn facts_are_catalogued_with_units_and_provenance() {
    for name in expected().keys() {
        let a = analyse(name);
        let facts = a.facts();
        for (fact, value) in facts.iter() {
            let def =
                catalog::lookup(fact).unwrap_or_else(|| panic!("{name}: {fact} not catalogued"));
            if def.unit == Unit::Bytes {
                let n = value
                    .value
                    .as_f64()
                    .unwrap_or_else(|| panic!("{fact} is not a number"));
                assert!(n >= 0.0 && n.fract() == 0.0, "{name}: {fact} = {n}");
            }
            let src = value
                .sources
                .first()
                .unwrap_or_else(|| panic!("{name}: {fact} has no provenance"));
            assert_eq!(&*src.input, name.as_str());
            assert!(src.locator.is_some(), "{name}: {fact}");
        }
    }
}

#[test]
fn json_summary_is_bounded_and_uses_integer_bytes() {
    let a = analyse("no_oom_summary.pickle");
    let v = serde_json::to_value(&a).unwrap();
    let d = &v["devices"][0];
    assert!(d["segments"]["reserved_bytes"].is_u64());
    assert!(d["state"]["live_bytes"].is_u64());
    assert!(d["timeline"]["points"].as_array().unwrap().len() <= 2000);
    assert!(!d["segment_map"]["segments"].as_array().unwrap().is_empty());
    assert_eq!(v["generation"]["label"], "2.5-2.7");
}
