//! The restricted pickle reader against an oracle and against hostile input.
//!
//! - Differential: random plain values (no shared containers, which serde-pickle cannot
//!   read) are written with serde-pickle and read back by our reader; hand-built pickles
//!   of every protocol are read by both readers; the results must agree.
//! - Hostile: code-executing opcodes are refused (and nothing runs), deep nesting neither
//!   overflows the stack nor fails, memo bombs stay cheap, every prefix of a real-shaped
//!   file fails cleanly with the byte offset, and flipped bytes never panic.

use std::sync::Arc;

use crate::common::Rng;
use oomdoctor::facts::evidence::InputName;
use oomdoctor::ingest::snapshot::pickle::{Handle, Pickle, PickleError, PickleLimits, Value};
use oomdoctor::ingest::snapshot::{SnapshotError, read_snapshot};
use serde_pickle::{DeOptions, HashableValue, SerOptions, Value as Oracle};

fn random_string(rng: &mut Rng) -> String {
    const PIECES: &[&str] = &[
        "a",
        "frames",
        "é",
        "€",
        "😀",
        " ",
        "\\",
        "'",
        "\"",
        "\n",
        "x9",
        "torch::unwind()",
    ];
    (0..rng.below(6))
        .map(|_| PIECES[rng.below(PIECES.len() as u64) as usize])
        .collect()
}

fn random_key(rng: &mut Rng) -> HashableValue {
    match rng.below(3) {
        0 => HashableValue::I64(rng.next() as i64 >> rng.below(64)),
        1 => HashableValue::Tuple(vec![
            HashableValue::I64(rng.below(9) as i64),
            HashableValue::String(random_string(rng)),
        ]),
        _ => HashableValue::String(random_string(rng)),
    }
}

fn random_value(rng: &mut Rng, depth: u32) -> Oracle {
    let leaf = depth == 0 || rng.below(3) == 0;
    if leaf {
        return match rng.below(7) {
            0 => Oracle::None,
            1 => Oracle::Bool(rng.below(2) == 1),
            2 => Oracle::I64(rng.next() as i64 >> rng.below(64)),
            3 => Oracle::F64((rng.next() as i64 >> 20) as f64 / 7.0),
            4 => Oracle::Bytes((0..rng.below(8)).map(|_| rng.next() as u8).collect()),
            _ => Oracle::String(random_string(rng)),
        };
    }
    let n = rng.below(5) as usize;
    match rng.below(3) {
        0 => Oracle::List((0..n).map(|_| random_value(rng, depth - 1)).collect()),
        1 => Oracle::Tuple((0..n).map(|_| random_value(rng, depth - 1)).collect()),
        _ => Oracle::Dict(
            (0..n)
                .map(|_| (random_key(rng), random_value(rng, depth - 1)))
                .collect(),
        ),
    }
}

/// Structural equality between our value and the oracle's. Dicts compare as maps (the
/// oracle's is a BTreeMap; ours keeps written order, and duplicates resolve to the last).
fn same(p: &Pickle<'_>, h: Handle, o: &Oracle) -> bool {
    match (p.value(h), o) {
        (Value::None, Oracle::None) => true,
        (Value::Bool(a), Oracle::Bool(b)) => a == *b,
        (Value::Int(a), Oracle::I64(b)) => a == *b,
        (Value::BigInt(a), Oracle::Int(b)) => !a.saturated && a.value.to_string() == b.to_string(),
        (Value::Float(a), Oracle::F64(b)) => a.to_bits() == b.to_bits(),
        (Value::Str(a), Oracle::String(b)) => a == b,
        (Value::Bytes(a), Oracle::Bytes(b)) => a == b.as_slice(),
        (Value::List(c), Oracle::List(v)) | (Value::Tuple(c), Oracle::Tuple(v)) => {
            p.len(c) == v.len() && p.items(c).zip(v).all(|(h, o)| same(p, h, o))
        }
        (Value::Dict(c), Oracle::Dict(m)) => {
            let pairs: Vec<(Handle, Handle)> = p.pairs(c).collect();
            m.iter().all(|(k, v)| {
                pairs
                    .iter()
                    .rev()
                    .find(|(pk, _)| same_key(p, *pk, k))
                    .is_some_and(|(_, pv)| same(p, *pv, v))
            }) && pairs
                .iter()
                .all(|(pk, _)| m.keys().any(|k| same_key(p, *pk, k)))
        }
        (Value::Set(c), Oracle::Set(s)) | (Value::FrozenSet(c), Oracle::FrozenSet(s)) => {
            p.len(c) == s.len() && s.iter().all(|k| p.items(c).any(|h| same_key(p, h, k)))
        }
        _ => false,
    }
}

fn same_key(p: &Pickle<'_>, h: Handle, k: &HashableValue) -> bool {
    same(p, h, &k.clone().into_value())
}

fn contains_bytes(v: &Oracle) -> bool {
    match v {
        Oracle::Bytes(_) => true,
        Oracle::List(items) | Oracle::Tuple(items) => items.iter().any(contains_bytes),
        Oracle::Dict(m) => m.values().any(contains_bytes),
        _ => false,
    }
}

fn read(bytes: &[u8]) -> Pickle<'_> {
    Pickle::parse(bytes, &PickleLimits::default()).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn agrees_with_serde_pickle_on_random_plain_values() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for case in 0..400 {
        let value = random_value(&mut rng, 4);
        for (v2, opts) in [
            (false, SerOptions::new()),
            (true, SerOptions::new().proto_v2()),
        ] {
            let bytes = serde_pickle::value_to_vec(&value, opts).unwrap();
            if v2 && contains_bytes(&value) {
                // Protocol 2 has no bytes opcode: serde-pickle (like Python) calls
                // `_codecs.encode`, which we refuse.
                let err = Pickle::parse(&bytes, &PickleLimits::default()).unwrap_err();
                assert!(
                    matches!(&err, PickleError::RefusedCode { detail, .. } if detail.contains("_codecs.encode")),
                    "{err}"
                );
                continue;
            }
            let p = read(&bytes);
            assert!(same(&p, p.root(), &value), "case {case}: {value:?}");
        }
    }
}

#[test]
fn wide_integers_agree_with_serde_pickle() {
    for v in [u64::MAX, 1 << 63, (1 << 59) + 3, 12_345] {
        let bytes = serde_pickle::to_vec(&v, SerOptions::new()).unwrap();
        let p = read(&bytes);
        assert_eq!(p.as_u64(p.root()), Some(v));
        let oracle = serde_pickle::value_from_slice(&bytes, DeOptions::new()).unwrap();
        assert!(same(&p, p.root(), &oracle), "{v}: {oracle:?}");
    }
}

/// Pickles written by CPython (`pickle.dumps(obj, protocol=N)`), one per protocol, of
/// `{'a': [1, 2**64 - 1, -5, (1, 2)], 'b': 1.5, 'c': None, 'd': True, 'e': 'é€'}`, plus
/// a protocol-4 set and frozenset and a protocol-5 bytearray.
const CPYTHON: &[(&str, &[u8])] = &[
    ("protocol 0", b"(dp0\nVa\np1\n(lp2\nI1\naL18446744073709551615L\naI-5\na(I1\nI2\ntp3\nasVb\np4\nF1.5\nsVc\np5\nNsVd\np6\nI01\nsVe\np7\nV\xe9\\u20ac\np8\ns."),
    ("protocol 1", b"}q\x00(X\x01\x00\x00\x00aq\x01]q\x02(K\x01L18446744073709551615L\nJ\xfb\xff\xff\xff(K\x01K\x02tq\x03eX\x01\x00\x00\x00bq\x04G?\xf8\x00\x00\x00\x00\x00\x00X\x01\x00\x00\x00cq\x05NX\x01\x00\x00\x00dq\x06I01\nX\x01\x00\x00\x00eq\x07X\x05\x00\x00\x00\xc3\xa9\xe2\x82\xacq\x08u."),
    ("protocol 2", b"\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01]q\x02(K\x01\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00J\xfb\xff\xff\xffK\x01K\x02\x86q\x03eX\x01\x00\x00\x00bq\x04G?\xf8\x00\x00\x00\x00\x00\x00X\x01\x00\x00\x00cq\x05NX\x01\x00\x00\x00dq\x06\x88X\x01\x00\x00\x00eq\x07X\x05\x00\x00\x00\xc3\xa9\xe2\x82\xacq\x08u."),
    ("protocol 3", b"\x80\x03}q\x00(X\x01\x00\x00\x00aq\x01]q\x02(K\x01\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00J\xfb\xff\xff\xffK\x01K\x02\x86q\x03eX\x01\x00\x00\x00bq\x04G?\xf8\x00\x00\x00\x00\x00\x00X\x01\x00\x00\x00cq\x05NX\x01\x00\x00\x00dq\x06\x88X\x01\x00\x00\x00eq\x07X\x05\x00\x00\x00\xc3\xa9\xe2\x82\xacq\x08u."),
    ("protocol 4", b"\x80\x04\x95H\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x01a\x94]\x94(K\x01\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00J\xfb\xff\xff\xffK\x01K\x02\x86\x94e\x8c\x01b\x94G?\xf8\x00\x00\x00\x00\x00\x00\x8c\x01c\x94N\x8c\x01d\x94\x88\x8c\x01e\x94\x8c\x05\xc3\xa9\xe2\x82\xac\x94u."),
    ("protocol 5", b"\x80\x05\x95H\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x01a\x94]\x94(K\x01\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00J\xfb\xff\xff\xffK\x01K\x02\x86\x94e\x8c\x01b\x94G?\xf8\x00\x00\x00\x00\x00\x00\x8c\x01c\x94N\x8c\x01d\x94\x88\x8c\x01e\x94\x8c\x05\xc3\xa9\xe2\x82\xac\x94u."),
    // ({1, 2}, frozenset({3})), protocol 4: EMPTY_SET/ADDITEMS and FROZENSET.
    ("sets", b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00\x8f\x94(K\x01K\x02\x90(K\x03\x91\x94\x86\x94."),
    // bytearray(b'xy'), protocol 5: BYTEARRAY8.
    ("bytearray", b"\x80\x05\x95\x0d\x00\x00\x00\x00\x00\x00\x00\x96\x02\x00\x00\x00\x00\x00\x00\x00xy\x94."),
];

#[test]
fn every_protocol_reads_like_the_oracle() {
    for (name, bytes) in CPYTHON {
        let p = read(bytes);
        let oracle = serde_pickle::value_from_slice(bytes, DeOptions::new())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            same(&p, p.root(), &oracle),
            "{name}: ours {:?} vs {oracle:?}",
            p.value(p.root())
        );
        if name.starts_with("protocol") {
            let d = p.as_dict(p.root()).unwrap();
            let a = p.as_sequence(p.dict_get(d, "a").unwrap()).unwrap();
            assert_eq!(p.as_u64(p.get(a, 1).unwrap()), Some(u64::MAX), "{name}");
            assert_eq!(p.as_str(p.dict_get(d, "e").unwrap()), Some("é€"), "{name}");
        }
    }
}

#[test]
fn serde_pickle_sets_are_refused_because_they_call_code() {
    // serde-pickle writes sets as `__builtin__.set(list)`: GLOBAL then REDUCE.
    let set: std::collections::BTreeSet<HashableValue> = [HashableValue::I64(1)].into();
    let bytes = serde_pickle::value_to_vec(&Oracle::Set(set), SerOptions::new()).unwrap();
    let err = Pickle::parse(&bytes, &PickleLimits::default()).unwrap_err();
    assert!(
        matches!(err, PickleError::RefusedCode { name: "GLOBAL", .. }),
        "{err:?}"
    );
}

fn input() -> InputName {
    Arc::from("hostile.pickle")
}

#[test]
fn os_system_is_refused_and_never_runs() {
    let marker = std::env::temp_dir().join(format!("oomdoctor-pickle-ran-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let cmd = format!("touch {}", marker.display());
    // Protocol 2: GLOBAL os.system, the command, TUPLE1, REDUCE.
    let mut p2 = b"\x80\x02cos\nsystem\nq\x00X".to_vec();
    p2.extend_from_slice(&(cmd.len() as u32).to_le_bytes());
    p2.extend_from_slice(cmd.as_bytes());
    p2.extend_from_slice(b"q\x01\x85q\x02Rq\x03.");
    // Protocol 4: STACK_GLOBAL from two strings.
    let mut p4 = b"\x80\x04\x8c\x02os\x94\x8c\x06system\x94\x93\x94X".to_vec();
    p4.extend_from_slice(&(cmd.len() as u32).to_le_bytes());
    p4.extend_from_slice(cmd.as_bytes());
    p4.extend_from_slice(b"\x85R.");
    for (bytes, opcode, offset) in [(p2, "GLOBAL", 2u64), (p4, "STACK_GLOBAL", 16)] {
        let err = read_snapshot(&bytes, &input(), &PickleLimits::default()).unwrap_err();
        let SnapshotError::Pickle {
            source:
                PickleError::RefusedCode {
                    name,
                    offset: at,
                    detail,
                    ..
                },
            ..
        } = &err
        else {
            panic!("{err:?}");
        };
        assert_eq!(*name, opcode);
        assert_eq!(*at, offset);
        assert!(detail.contains("os.system"), "{detail}");
        let text = err.to_string();
        assert!(
            text.contains(&format!("byte {offset}")) && text.contains("import or call code"),
            "{text}"
        );
        let code = miette::Diagnostic::code(&err).map(|c| c.to_string());
        assert_eq!(code.as_deref(), Some("oomdoctor::pickle::refused_code"));
    }
    assert!(!marker.exists(), "the command ran");
    // Every other code-running opcode is refused too, by name.
    for (op, name) in [
        (b'R', "REDUCE"),
        (b'b', "BUILD"),
        (b'o', "OBJ"),
        (0x81, "NEWOBJ"),
        (0x92, "NEWOBJ_EX"),
        (b'Q', "BINPERSID"),
        (0x82, "EXT1"),
        (0x83, "EXT2"),
        (0x84, "EXT4"),
        (0x97, "NEXT_BUFFER"),
        (0x98, "READONLY_BUFFER"),
    ] {
        let bytes = [0x80, 5, b'N', b'N', op, b'.'];
        let err = Pickle::parse(&bytes, &PickleLimits::default()).unwrap_err();
        assert!(
            matches!(err, PickleError::RefusedCode { offset: 4, name: n, .. } if n == name),
            "{name}: {err:?}"
        );
    }
    for (bytes, name) in [
        (&b"Pabc\n."[..], "PERSID"),
        (&b"(i__main__\nX\n."[..], "INST"),
    ] {
        let err = Pickle::parse(bytes, &PickleLimits::default()).unwrap_err();
        assert!(
            matches!(err, PickleError::RefusedCode { name: n, .. } if n == name),
            "{name}: {err:?}"
        );
    }
}

fn nested_lists(depth: usize) -> Vec<u8> {
    let mut bytes = vec![0x80, 4];
    bytes.extend(std::iter::repeat_n(b']', depth));
    bytes.extend(std::iter::repeat_n(b'a', depth - 1));
    bytes.push(b'.');
    bytes
}

#[test]
fn nesting_200000_deep_works_without_recursion() {
    let bytes = nested_lists(200_000);
    let p = read(&bytes);
    // Walk down iteratively: every level holds exactly the next one.
    let mut h = p.root();
    let mut depth = 1;
    while let Some(c) = p.as_sequence(h) {
        match p.items(c).next() {
            Some(inner) => {
                h = inner;
                depth += 1;
            }
            None => break,
        }
    }
    assert_eq!(depth, 200_000);
    // Not a snapshot: a clean error naming what it is.
    let err = read_snapshot(&bytes, &input(), &PickleLimits::default()).unwrap_err();
    assert!(matches!(err, SnapshotError::NotASnapshot { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("a list of 1 values (the first is a list)"),
        "{err}"
    );
    // With a lower limit it fails cleanly instead.
    let limits = PickleLimits {
        max_stack_depth: 10_000,
        ..PickleLimits::default()
    };
    let err = Pickle::parse(&bytes, &limits).unwrap_err();
    assert!(
        matches!(err, PickleError::LimitExceeded { offset: 10_002, .. }),
        "{err:?}"
    );
}

#[test]
fn memo_bombs_stay_cheap() {
    // L0 = [0]; L(k+1) = [Lk] * 1000 for 6 levels: 10^18 leaves if expanded, ~12 KB here.
    let mut bytes = vec![0x80, 4, b']', b'K', 0, b'a', 0x94];
    for level in 0..6u32 {
        bytes.extend_from_slice(b"](");
        for _ in 0..1000 {
            bytes.push(b'j');
            bytes.extend_from_slice(&level.to_le_bytes());
        }
        bytes.extend_from_slice(b"e\x94");
    }
    bytes.push(b'.');
    let p = read(&bytes);
    assert!(p.object_count() < 10, "sharing must be kept by handle");
    let err = read_snapshot(&bytes, &input(), &PickleLimits::default()).unwrap_err();
    assert!(matches!(err, SnapshotError::NotASnapshot { .. }), "{err:?}");

    // A snapshot-shaped bomb: 1000 device traces sharing one list of 1000 references to
    // one entry dict. Decoding would walk a million entries from a 9 KB file.
    let mut bytes = b"\x80\x04}\x94(\x8c\x08segments\x94]\x94\x8c\x0ddevice_traces\x94](".to_vec();
    bytes.extend_from_slice(
        b"](}\x94(\x8c\x06action\x94\x8c\x05alloc\x94\x8c\x04addr\x94K\x00\x8c\x04size\x94K\x01u",
    );
    for _ in 0..999 {
        bytes.extend_from_slice(b"h\x04");
    }
    bytes.extend_from_slice(b"e\x94");
    for _ in 0..999 {
        bytes.extend_from_slice(b"h\x09");
    }
    bytes.extend_from_slice(b"eu.");
    let p = read(&bytes);
    let top = p.as_dict(p.root()).unwrap();
    let traces = p
        .as_sequence(p.dict_get(top, "device_traces").unwrap())
        .unwrap();
    assert_eq!(p.len(traces), 1000);
    let err = read_snapshot(&bytes, &input(), &PickleLimits::default()).unwrap_err();
    assert!(
        matches!(err, SnapshotError::ExpansionLimit { .. }),
        "{err:?}"
    );
    assert_eq!(
        miette::Diagnostic::code(&err)
            .map(|c| c.to_string())
            .as_deref(),
        Some("oomdoctor::snapshot::expansion_limit")
    );
}

fn fixture(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/snapshots")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_truncation_fails_cleanly_with_the_offset() {
    for name in [
        "v2_2.pickle",
        "v2_2_protocol0.pickle",
        "v2_11_protocol5.pickle",
    ] {
        let bytes = fixture(name);
        assert!(
            read_snapshot(&bytes, &input(), &PickleLimits::default()).is_ok(),
            "{name} itself must read"
        );
        for cut in 0..bytes.len() {
            let err = read_snapshot(&bytes[..cut], &input(), &PickleLimits::default()).unwrap_err();
            match &err {
                SnapshotError::Pickle {
                    source: PickleError::Truncated { offset, what },
                    ..
                } => {
                    assert_eq!(*offset, cut as u64, "{name} cut at {cut}: {what}");
                    assert!(
                        err.to_string()
                            .contains(&format!("truncated at byte {cut} while reading")),
                        "{err}"
                    );
                }
                other => panic!("{name} cut at {cut}: {other:?}"),
            }
        }
    }
}

#[test]
fn flipped_bytes_never_panic() {
    let bytes = fixture("v2_2.pickle");
    let mut outcomes = [0usize; 2];
    for i in 0..bytes.len() {
        for mask in [0x01u8, 0xFF] {
            let mut corrupt = bytes.clone();
            corrupt[i] ^= mask;
            let ok = read_snapshot(&corrupt, &input(), &PickleLimits::default()).is_ok();
            outcomes[ok as usize] += 1;
        }
    }
    // Most flips break the file; some (inside a number or a string) do not. Both are fine
    // as long as nothing panics; make sure both kinds actually happened.
    assert!(outcomes[0] > 0 && outcomes[1] > 0, "{outcomes:?}");
}

#[test]
fn errors_are_diagnostics_with_stable_codes() {
    let cases: &[(&[u8], &str)] = &[
        (b"\x80\x04X\x10\x00", "oomdoctor::pickle::truncated"),
        (b"\x80\x04\xff.", "oomdoctor::pickle::unknown_opcode"),
        (b"\x80\x09.", "oomdoctor::pickle::protocol"),
        (b"\x80\x04a.", "oomdoctor::pickle::malformed"),
        (b"\x80\x04K\x01.", "oomdoctor::snapshot::not_a_snapshot"),
        (
            b"\x80\x04}\x94(\x8c\x01a\x94K\x01u.",
            "oomdoctor::snapshot::not_a_snapshot",
        ),
    ];
    for (bytes, code) in cases {
        let err = read_snapshot(bytes, &input(), &PickleLimits::default()).unwrap_err();
        let got = miette::Diagnostic::code(&err).map(|c| c.to_string());
        assert_eq!(got.as_deref(), Some(*code), "{err}");
        assert!(miette::Diagnostic::help(&err).is_some(), "{err}");
        assert!(err.to_string().starts_with("hostile.pickle"), "{err}");
    }
    let err = read_snapshot(
        b"\x80\x04}\x94(\x8c\x01a\x94K\x01u.",
        &input(),
        &PickleLimits::default(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "hostile.pickle is not a PyTorch memory snapshot: it holds a dict with 1 keys [a] but no `segments`"
    );
    let err = read_snapshot(
        b"\x80\x04](K\x01K\x02e.",
        &input(),
        &PickleLimits::default(),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("a list of 2 values (the first is a int), not a list of segments"),
        "{err}"
    );
}
