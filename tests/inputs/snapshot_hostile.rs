//! Snapshots with absurd or inconsistent *values* (the pickle itself is well formed): the
//! analysis must count what it cannot use and carry on, never panic or overflow (these
//! tests run in debug, where integer overflow panics).

use std::sync::Arc;

use oomdoctor::facts::evidence::InputName;
use oomdoctor::ingest::snapshot::pickle::PickleLimits;
use oomdoctor::ingest::snapshot::read_snapshot;

/// A tiny protocol-4 pickle writer for hand-made test values (no memo, no sharing).
enum P {
    None,
    Bool(bool),
    Int(i128),
    Str(&'static str),
    List(Vec<P>),
    Tuple(Vec<P>),
    Dict(Vec<(&'static str, P)>),
}

fn write(p: &P, out: &mut Vec<u8>) {
    match p {
        P::None => out.push(b'N'),
        P::Bool(b) => out.push(if *b { 0x88 } else { 0x89 }),
        P::Int(v) => {
            if let Ok(small) = i32::try_from(*v) {
                out.push(b'J');
                out.extend_from_slice(&small.to_le_bytes());
            } else {
                // LONG1: minimal little-endian two's complement.
                let bytes = v.to_le_bytes();
                let mut n = 16;
                while n > 1 {
                    let (top, next) = (bytes[n - 1], bytes[n - 2]);
                    let redundant =
                        (top == 0 && next & 0x80 == 0) || (top == 0xFF && next & 0x80 != 0);
                    if !redundant {
                        break;
                    }
                    n -= 1;
                }
                out.push(0x8a);
                out.push(n as u8);
                out.extend_from_slice(&bytes[..n]);
            }
        }
        P::Str(s) => {
            out.push(b'X');
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        P::List(items) => {
            out.extend_from_slice(b"](");
            items.iter().for_each(|i| write(i, out));
            out.push(b'e');
        }
        P::Tuple(items) => {
            out.push(b'(');
            items.iter().for_each(|i| write(i, out));
            out.push(b't');
        }
        P::Dict(pairs) => {
            out.extend_from_slice(b"}(");
            for (k, v) in pairs {
                write(&P::Str(k), out);
                write(v, out);
            }
            out.push(b'u');
        }
    }
}

fn pickle(p: &P) -> Vec<u8> {
    let mut out = vec![0x80, 4];
    write(p, &mut out);
    out.push(b'.');
    out
}

const MAX: i128 = u64::MAX as i128;

fn entry(action: &'static str, addr: Option<i128>, size: i128) -> P {
    let mut pairs = vec![
        ("action", P::Str(action)),
        ("size", P::Int(size)),
        ("stream", P::Int(0)),
    ];
    if let Some(a) = addr {
        pairs.push(("addr", P::Int(a)));
    }
    P::Dict(pairs)
}

fn block(addr: i128, size: i128, state: &'static str) -> P {
    P::Dict(vec![
        ("address", P::Int(addr)),
        ("size", P::Int(size)),
        ("requested_size", P::Int(size)),
        ("state", P::Str(state)),
        ("frames", P::List(vec![])),
    ])
}

fn segment(device: i128, addr: i128, size: i128, blocks: Vec<P>) -> P {
    P::Dict(vec![
        ("device", P::Int(device)),
        ("address", P::Int(addr)),
        ("total_size", P::Int(size)),
        ("allocated_size", P::Int(size)),
        ("active_size", P::Int(size)),
        ("requested_size", P::Int(size)),
        ("stream", P::Int(0)),
        ("segment_type", P::Str("large")),
        ("segment_pool_id", P::Tuple(vec![P::Int(0), P::Int(0)])),
        ("is_expandable", P::Bool(true)),
        ("frames", P::List(vec![])),
        ("blocks", P::List(blocks)),
    ])
}

#[test]
fn absurd_values_are_counted_not_fatal() {
    let snap = P::Dict(vec![
        (
            "segments",
            P::List(vec![
                segment(
                    0,
                    MAX - 10,
                    MAX,
                    vec![
                        block(MAX - 10, MAX, "active_allocated"),
                        block(5, MAX, "active_allocated"),
                        block(7, MAX, "inactive"),
                        block(-1, -1, "exploded"),
                    ],
                ),
                segment(0, 4096, MAX, vec![block(4096, MAX, "active_pending_free")]),
                segment(-3, 0, 1, vec![]),
                segment(1 << 40, 0, 1, vec![]),
                P::Str("not a segment"),
                P::Dict(vec![
                    ("segment_pool_id", P::Str("(1, 2)")),
                    ("blocks", P::Str("nope")),
                ]),
            ]),
        ),
        (
            "device_traces",
            P::List(vec![
                P::List(vec![
                    entry("segment_map", Some(MAX - 1), MAX),
                    entry("alloc", Some(MAX), MAX),
                    entry("alloc", Some(MAX), MAX),
                    entry("free_completed", Some(7), MAX),
                    entry("free_completed", Some(7), MAX),
                    entry("oom", None, MAX),
                    entry("segment_free", Some(0), MAX),
                    entry("segment_unmap", Some(MAX - 100), MAX),
                    entry("free_completed", None, -5),
                    entry("alloc", Some(99), 1),
                    entry("teleport", Some(1), 1),
                    P::Int(17),
                    P::Dict(vec![
                        ("action", P::Str("oom")),
                        ("device_free", P::Int(-5)),
                        ("size", P::Int(MAX * 4)),
                    ]),
                ]),
                P::Str("device 1 is not a list"),
                P::List(vec![P::None]),
            ]),
        ),
        (
            "allocator_settings",
            P::Dict(vec![
                ("max_split_size", P::Str("x")),
                ("expandable_segments", P::Int(3)),
            ]),
        ),
        (
            "external_annotations",
            P::List(vec![
                P::Dict(vec![
                    ("name", P::Str("ProfilerStep#1")),
                    ("stage", P::Str("START")),
                    ("time_us", P::Int(-1)),
                ]),
                P::Int(4),
            ]),
        ),
    ]);
    let bytes = pickle(&snap);
    let input: InputName = Arc::from("absurd.pickle");
    let a = read_snapshot(&bytes, &input, &PickleLimits::default())
        .expect("absurd values are not fatal");
    assert!(a.anomalies.count >= 6, "{:?}", a.anomalies);
    assert!(!a.anomalies.examples.is_empty());
    let d = a.device(0).expect("device 0");
    assert_eq!(d.segments.reserved_bytes, u64::MAX, "sums saturate");
    assert!(d.trace.replay_inconsistencies > 0);
    assert_eq!(a.oom_device(), Some(0));
    let facts = a.facts();
    assert!(facts.contains("oom.requested_bytes"));
    serde_json::to_string(&a).unwrap();
}

/// The timeline undoes the trace from the final state as a map of live blocks by address
/// would: the last final block listed at an address is the one there (both still count in
/// the live bytes), an alloc with no block at its address and a free onto a live block are
/// counted and change nothing, a segment's allocation larger than what is reserved empties
/// the reserve. Worked by hand, entry by entry, backwards.
#[test]
fn the_timeline_replays_an_inconsistent_trace_as_a_map_of_blocks_would() {
    let snap = P::Dict(vec![
        (
            "segments",
            P::List(vec![segment(
                0,
                0x1000,
                8192,
                vec![
                    block(0x1000, 1024, "active_allocated"),
                    block(0x1000, 2048, "active_allocated"),
                    block(0x2000, 512, "inactive"),
                ],
            )]),
        ),
        (
            "device_traces",
            P::List(vec![P::List(vec![
                entry("alloc", Some(0x3000), 100),
                entry("free_completed", Some(0x3000), 100),
                entry("free_completed", Some(0x4000), 700),
                entry("free_completed", Some(0x4000), 700),
                entry("alloc", Some(0x1000), 2048),
                entry("alloc", Some(0x1000), 2048),
                entry("segment_alloc", Some(0x10000), 16384),
            ])]),
        ),
    ]);
    let input: InputName = Arc::from("inconsistent.pickle");
    let a = read_snapshot(&pickle(&snap), &input, &PickleLimits::default()).expect("a snapshot");
    let d = a.device(0).expect("device 0");
    let t = &d.timeline;
    // Backwards from 1024 + 2048 live, 8192 reserved: [6] empties the reserve (1); [5]
    // takes the 2048 block at 0x1000; [4] finds none there (2); [3] frees 700 at 0x4000
    // back (a block of 1024); [2] finds that block (3); [1] frees the 100 at 0x3000 back
    // (512); [0] takes it.
    let live: Vec<(i64, u64)> = t.points.iter().map(|p| (p.index, p.live_bytes)).collect();
    assert_eq!(
        live,
        [
            (-1, 2048),
            (0, 2560),
            (1, 2048),
            (2, 2048),
            (3, 1024),
            (4, 1024),
            (5, 3072),
            (6, 3072),
        ]
    );
    let reserved: Vec<u64> = t.points.iter().map(|p| p.reserved_bytes).collect();
    assert_eq!(reserved, [0, 0, 0, 0, 0, 0, 0, 8192]);
    assert_eq!((t.start_live_bytes, t.end_live_bytes), (2048, 3072));
    // Among equal highs, the earliest.
    assert_eq!((t.peak_live_bytes, t.peak_index), (3072, 5));
    assert_eq!(t.peak_reserved_bytes, 8192);
    assert_eq!(d.trace.replay_inconsistencies, 3);
}

#[test]
fn wrong_shapes_are_not_snapshots() {
    let input: InputName = Arc::from("shapes.pickle");
    for (p, found) in [
        (P::Int(3), "a single int"),
        (P::Str("segments"), "a string"),
        (
            P::List(vec![P::Int(1), P::Int(2)]),
            "a list of 2 values (the first is a int)",
        ),
        (
            P::Dict(vec![("segments", P::Int(1))]),
            "a dict whose `segments` is a single int",
        ),
        (P::Tuple(vec![]), "an empty tuple"),
    ] {
        let err = read_snapshot(&pickle(&p), &input, &PickleLimits::default()).unwrap_err();
        assert!(err.to_string().contains(found), "{err}");
    }
    // An empty list is a valid (empty) memory_snapshot() result.
    let a = read_snapshot(&pickle(&P::List(vec![])), &input, &PickleLimits::default()).unwrap();
    assert!(a.devices().is_empty());
}

/// A size that does not fit a byte count is left out and the user is told where and what
/// it was (issue 14: a block of 2^70 bytes was shown as "0 bytes" without a word).
#[test]
fn out_of_range_sizes_are_reported_with_their_place() {
    let block = P::Dict(vec![
        ("address", P::Int(4096)),
        ("size", P::Int(1 << 70)),
        ("requested_size", P::Int(-1)),
        ("state", P::Str("active_allocated")),
        ("frames", P::List(vec![])),
    ]);
    let seg = P::Dict(vec![
        ("device", P::Int(0)),
        ("address", P::Int(4096)),
        ("total_size", P::Int(1 << 20)),
        ("allocated_size", P::Int(0)),
        ("active_size", P::Int(0)),
        ("requested_size", P::Int(0)),
        ("stream", P::Int(0)),
        ("segment_type", P::Str("large")),
        ("frames", P::List(vec![])),
        ("blocks", P::List(vec![block])),
    ]);
    let snap = P::Dict(vec![
        ("segments", P::List(vec![seg])),
        ("device_traces", P::List(vec![P::List(vec![])])),
    ]);
    let dir = std::env::temp_dir().join(format!("oomdoctor-range-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("range.pickle");
    std::fs::write(&path, pickle(&snap)).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_oomdoctor"))
        .arg(&path)
        .args(["--format", "json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let w = v["inputs"][0]["warnings"][0].as_str().unwrap_or_default();
    assert!(
        w.contains("1180591620717411303424 does not fit in 64 bits"),
        "{v:#}"
    );
    assert!(w.contains("-1 is negative"), "{w}");
    let _ = std::fs::remove_dir_all(&dir);
}
