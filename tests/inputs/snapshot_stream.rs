//! The snapshot reader as a stream (issue 15) and its bounds on hostile inputs (issue 14):
//! a pickle read through any split of its bytes parses to the same arena as the whole
//! buffer; truncation anywhere names the byte offset; a decompression bomb stops after one
//! buffer; structures shared by memo are paid for once, however often they are referenced.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::common;
use crate::log_mapped::TempLog;
use oomdoctor::facts::evidence::InputName;
use oomdoctor::ingest::snapshot::pickle::{
    BlockFeed, Handle, Pickle, PickleError, PickleLimits, Value,
};
use oomdoctor::ingest::snapshot::{
    SnapshotAnalysis, SnapshotError, read_snapshot, read_snapshot_ahead, read_snapshot_from, schema,
};

/// Hands out the input in pieces: sizes cycle through `sizes` (a size of 1 is the worst case).
struct Pieces<'a> {
    data: &'a [u8],
    sizes: &'a [usize],
    i: usize,
    /// Bytes handed out so far.
    pulled: u64,
}

impl<'a> Pieces<'a> {
    fn new(data: &'a [u8], sizes: &'a [usize]) -> Self {
        Pieces {
            data,
            sizes,
            i: 0,
            pulled: 0,
        }
    }
}

impl Read for Pieces<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let want = self.sizes[self.i % self.sizes.len()];
        self.i += 1;
        let n = want.min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        self.pulled += n as u64;
        Ok(n)
    }
}

/// Hands out the input in blocks, as `input::ReadAhead` does: sizes cycle through `sizes`,
/// each block's data after `headroom` bytes of junk (which the reader may overwrite with
/// the unread end of the block before, and must never read as input).
struct Blocks<'a> {
    data: &'a [u8],
    sizes: &'a [usize],
    headroom: usize,
    i: usize,
    /// Blocks handed back for reuse.
    returned: usize,
}

impl<'a> Blocks<'a> {
    fn new(data: &'a [u8], sizes: &'a [usize], headroom: usize) -> Self {
        Blocks {
            data,
            sizes,
            headroom,
            i: 0,
            returned: 0,
        }
    }
}

impl BlockFeed for Blocks<'_> {
    fn headroom(&self) -> usize {
        self.headroom
    }

    fn next_block(&mut self, spent: Option<Vec<u8>>) -> std::io::Result<Option<Vec<u8>>> {
        self.returned += usize::from(spent.is_some());
        if self.data.is_empty() {
            return Ok(None);
        }
        let n = self.sizes[self.i % self.sizes.len()].min(self.data.len());
        self.i += 1;
        let mut block = vec![0xAA; self.headroom];
        block.extend_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(Some(block))
    }
}

/// A canonical dump of everything reachable from the root: values in depth-first order,
/// containers numbered by first visit (so sharing shows), strings by content.
fn dump(p: &Pickle<'_>) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashMap::new();
    let mut todo: Vec<Handle> = vec![p.root()];
    while let Some(h) = todo.pop() {
        let v = p.value(h);
        match v {
            Value::List(c)
            | Value::Tuple(c)
            | Value::Dict(c)
            | Value::Set(c)
            | Value::FrozenSet(c) => {
                let next = seen.len();
                match seen.entry(c.index()) {
                    std::collections::hash_map::Entry::Occupied(e) => {
                        out.push(format!("ref {}", e.get()));
                    }
                    std::collections::hash_map::Entry::Vacant(e) => {
                        e.insert(next);
                        out.push(format!("{} #{next} len {}", v.type_name(), p.len(c)));
                        let items: Vec<Handle> = p.items(c).collect();
                        todo.extend(items.into_iter().rev());
                    }
                }
            }
            other => out.push(format!("{other:?}")),
        }
    }
    out.push(format!("end {} leftover {}", p.end(), p.leftover()));
    out
}

fn real_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/eval/snapshots")
}

/// The real snapshots (read in place), smallest first; empty when the directory is absent.
fn real_snapshots() -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(real_dir())
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| {
                    matches!(
                        p.extension().and_then(|x| x.to_str()),
                        Some("pickle" | "pkl")
                    )
                })
                .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
                .collect()
        })
        .unwrap_or_default();
    files.sort_by_key(|(_, b)| b.len());
    files
}

fn name(s: &str) -> InputName {
    Arc::from(s)
}

/// Two analyses of one snapshot, read two ways, are the same report.
fn assert_same_analysis(a: &SnapshotAnalysis, b: &SnapshotAnalysis, what: &str) {
    assert_eq!(
        serde_json::to_string(a).unwrap(),
        serde_json::to_string(b).unwrap(),
        "{what}"
    );
}

/// A pickle that uses every data opcode family: text and binary ints, longs, floats,
/// strings of each width, bytes, memo puts and gets (short and long), tuples, lists, dicts,
/// sets, frozensets, FRAME, MARK/APPENDS/SETITEMS.
fn every_opcode() -> Vec<u8> {
    let mut v: Vec<u8> = vec![0x80, 4, 0x95];
    v.extend_from_slice(&0u64.to_le_bytes());
    v.extend_from_slice(b"}q\x00("); // EMPTY_DICT, BINPUT 0, MARK
    let key = |v: &mut Vec<u8>, k: &str| {
        v.push(0x8c);
        v.push(k.len() as u8);
        v.extend_from_slice(k.as_bytes());
    };
    key(&mut v, "ints");
    v.extend_from_slice(
        b"(K\x07M\x34\x12J\xff\xff\xff\xff\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00",
    );
    v.extend_from_slice(b"I42\nI01\nL123456789012345678901234567890L\n\x88\x89Nl");
    key(&mut v, "floats");
    v.extend_from_slice(b"G\x3f\xf8\x00\x00\x00\x00\x00\x00F2.5\n\x86");
    key(&mut v, "strings");
    v.extend_from_slice(b"(X\x05\x00\x00\x00hello\x8d\x03\x00\x00\x00\x00\x00\x00\x00abcVuni\\u00e9\nS'py2'\nU\x03abcT\x02\x00\x00\x00xyr\x00\x01\x00\x00t");
    key(&mut v, "bytes");
    v.extend_from_slice(
        b"C\x02\x00\x01B\x03\x00\x00\x00abc\x8e\x01\x00\x00\x00\x00\x00\x00\x00z\x87",
    );
    key(&mut v, "shared");
    v.extend_from_slice(b"](h\x00j\x00\x01\x00\x00g0\n\x94e");
    key(&mut v, "sets");
    v.extend_from_slice(b"\x8f(K\x01K\x02\x90(K\x03\x91\x86");
    key(&mut v, "empty");
    v.extend_from_slice(b")\x85");
    v.extend_from_slice(b"u.");
    v
}

#[test]
fn every_opcode_parses_the_same_split_at_every_byte() {
    let data = every_opcode();
    let limits = PickleLimits::default();
    let whole = Pickle::parse(&data, &limits).unwrap();
    let expected = dump(&whole);
    assert!(expected.len() > 20, "{expected:?}");
    for k in 0..=data.len() {
        let sizes = [k.max(1), usize::MAX];
        let p = Pickle::from_reader(Pieces::new(&data, &sizes), &limits).unwrap();
        assert_eq!(dump(&p), expected, "split at byte {k}");
        assert_eq!(p.input_len(), data.len());
        assert!(!p.input_len_is_lower_bound());
    }
    let p = Pickle::from_reader(Pieces::new(&data, &[1]), &limits).unwrap();
    assert_eq!(dump(&p), expected, "one byte at a time");
}

#[test]
fn real_snapshots_parse_the_same_one_byte_at_a_time() {
    let limits = PickleLimits::default();
    let files = real_snapshots();
    for (path, bytes) in &files {
        let whole = Pickle::parse(bytes, &limits).unwrap();
        // One byte per read for the small files; odd piece sizes for the large ones.
        let sizes: &[usize] = if bytes.len() < 2 << 20 {
            &[1]
        } else {
            &[1, 7, 4093, 65537]
        };
        let streamed = Pickle::from_reader(Pieces::new(bytes, sizes), &limits).unwrap();
        assert_eq!(dump(&streamed), dump(&whole), "{path}");
        // And the whole analysis, as the app reads it.
        let a = read_snapshot(bytes, &name(path), &limits).unwrap();
        let b = read_snapshot_from(Pieces::new(bytes, sizes), &name(path), &limits).unwrap();
        assert_same_analysis(&a, &b, path);
    }
}

#[test]
fn every_opcode_parses_the_same_from_blocks_of_every_size() {
    let data = every_opcode();
    let limits = PickleLimits::default();
    let expected = dump(&Pickle::parse(&data, &limits).unwrap());
    // Headroom 0: every cut value is joined by appending; 3: short tails go in front of
    // the next block, long ones (a string across the edge) are appended; 64: all in front.
    for headroom in [0, 1, 3, 64] {
        for k in 1..=data.len() {
            let sizes = [k, 1, usize::MAX];
            let mut feed = Blocks::new(&data, &sizes, headroom);
            let p = Pickle::from_blocks(&mut feed, &limits).unwrap();
            assert_eq!(dump(&p), expected, "headroom {headroom}, first block {k}");
            assert_eq!(p.input_len(), data.len());
            assert!(!p.input_len_is_lower_bound());
        }
        let mut feed = Blocks::new(&data, &[1], headroom);
        let p = Pickle::from_blocks(&mut feed, &limits).unwrap();
        assert_eq!(dump(&p), expected, "headroom {headroom}, one byte a block");
        assert!(feed.returned > 0, "spent blocks are handed back");
    }
}

#[test]
fn real_snapshots_analyse_the_same_from_blocks_and_read_ahead() {
    let limits = PickleLimits::default();
    for (path, bytes) in &real_snapshots() {
        let whole = Pickle::parse(bytes, &limits).unwrap();
        let mut feed = Blocks::new(bytes, &[1, 7, 4093, 65537], 5);
        let blocks = Pickle::from_blocks(&mut feed, &limits).unwrap();
        assert_eq!(dump(&blocks), dump(&whole), "{path}");
        // The whole analysis, as the app reads a file (1 MiB blocks on a second thread).
        let a = read_snapshot(bytes, &name(path), &limits).unwrap();
        let b =
            read_snapshot_ahead(std::io::Cursor::new(bytes.clone()), &name(path), &limits).unwrap();
        assert_same_analysis(&a, &b, path);
    }
}

/// `EMPTY_LIST MEMOIZE MARK` nested: the reader runs the MEMOIZE and the MARK behind a new
/// container without a dispatch each, and an error there still names its own opcode's byte.
#[test]
fn an_error_in_a_run_behind_a_new_container_names_its_own_byte() {
    let mut data = vec![0x80, 4];
    for _ in 0..8 {
        data.extend_from_slice(b"]\x94(");
    }
    // Level 4's EMPTY_LIST makes the depth 9 (five lists, four marks): its MARK, at byte
    // 2 + 4 * 3 + 2, is the one refused.
    let limits = PickleLimits {
        max_stack_depth: 9,
        ..PickleLimits::default()
    };
    for result in [
        Pickle::parse(&data, &limits).map(|_| ()),
        Pickle::from_reader(Pieces::new(&data, &[1, 300]), &limits).map(|_| ()),
        Pickle::from_blocks(&mut Blocks::new(&data, &[5, 300], 2), &limits).map(|_| ()),
    ] {
        match result {
            Err(e @ PickleError::LimitExceeded { .. }) => assert_eq!(e.offset(), 16, "{e:?}"),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn truncation_anywhere_names_the_byte_offset() {
    let limits = PickleLimits::default();
    let mut cases = vec![("every_opcode".to_string(), every_opcode())];
    cases.extend(real_snapshots().into_iter().take(3));
    for (path, bytes) in &cases {
        let step = (bytes.len() / 150).max(1);
        for cut in (0..bytes.len()).step_by(step) {
            let part = &bytes[..cut];
            for result in [
                Pickle::parse(part, &limits).map(|_| ()),
                Pickle::from_reader(Pieces::new(part, &[1, 300]), &limits).map(|_| ()),
                Pickle::from_blocks(&mut Blocks::new(part, &[1, 300], 2), &limits).map(|_| ()),
            ] {
                match result {
                    Err(PickleError::Truncated { offset, .. }) => {
                        assert_eq!(offset, cut as u64, "{path} cut at {cut}")
                    }
                    other => panic!("{path} cut at {cut}: {other:?}"),
                }
            }
        }
    }
}

/// A protocol-4 writer for shared structures: memo puts and gets by hand.
struct W(Vec<u8>);

impl W {
    fn new() -> W {
        W(vec![0x80, 4])
    }
    fn s(&mut self, s: &str) -> &mut W {
        self.0.push(b'X');
        self.0.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    fn int(&mut self, v: i32) -> &mut W {
        self.0.push(b'J');
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn put(&mut self, i: u32) -> &mut W {
        self.0.push(b'r');
        self.0.extend_from_slice(&i.to_le_bytes());
        self
    }
    fn get(&mut self, i: u32) -> &mut W {
        self.0.push(b'j');
        self.0.extend_from_slice(&i.to_le_bytes());
        self
    }
    fn raw(&mut self, b: &[u8]) -> &mut W {
        self.0.extend_from_slice(b);
        self
    }
}

/// `{"segments": [], "device_traces": [[entry * n]]}` where each entry is
/// `{"action": "alloc", "addr": i, "size": 512, <key>: memo[shared]}`; `shared` is written
/// by `shared_value` into memo slot 0 inside a throwaway list first.
fn shared_snapshot(n: i32, key: &str, shared_value: impl FnOnce(&mut W)) -> Vec<u8> {
    let mut w = W::new();
    w.raw(b"]"); // a list that holds the shared value, popped afterwards
    shared_value(&mut w);
    w.put(0).raw(b"a0");
    w.raw(b"}(")
        .s("segments")
        .raw(b"]")
        .s("device_traces")
        .raw(b"](](");
    for i in 0..n {
        w.raw(b"}(")
            .s("action")
            .s("alloc")
            .s("addr")
            .int(i * 512 + 4096);
        w.s("size").int(512).s(key).get(0).raw(b"u");
    }
    w.raw(b"eeu.");
    w.0
}

/// Limits that allow visiting about as many elements as the file has bytes: sharing that
/// costs work per reference would run out at once.
fn tight() -> PickleLimits {
    PickleLimits {
        max_expansion_ratio: 1,
        ..PickleLimits::default()
    }
}

#[test]
fn a_shared_megabyte_string_is_stored_once() {
    let big = "m".repeat(1 << 20);
    let data = shared_snapshot(20_000, "user_metadata", |w| {
        w.s(&big);
    });
    assert!(data.len() < 4 << 20, "{}", data.len());
    let p = Pickle::parse(&data, &tight()).unwrap();
    let snap = schema::decode(&p, &tight()).unwrap();
    let entries = &snap.traces[0];
    assert_eq!(entries.len(), 20_000);
    let first = snap
        .extra(&entries[0])
        .unwrap()
        .user_metadata
        .clone()
        .unwrap();
    for e in entries {
        let s = snap.extra(e).unwrap().user_metadata.as_ref().unwrap();
        assert!(Arc::ptr_eq(s, &first), "one string, shared");
    }
    assert!(read_snapshot(&data, &name("m.pickle"), &tight()).is_ok());
}

#[test]
fn a_shared_forward_frames_list_is_read_once() {
    let data = shared_snapshot(20_000, "forward_frames", |w| {
        w.raw(b"](");
        for i in 0..5_000 {
            w.s(&format!("  File \"/x/model.py\", line {i}, in forward"));
        }
        w.raw(b"e");
    });
    // 20,000 entries x 5,000 lines would be 10^8 visits; the budget is about 1.3 M.
    let p = Pickle::parse(&data, &tight()).unwrap();
    let snap = schema::decode(&p, &tight()).unwrap();
    let entries = &snap.traces[0];
    let first = snap
        .extra(&entries[0])
        .unwrap()
        .forward_frames
        .clone()
        .unwrap();
    assert_eq!(first.len(), 5_000);
    for e in entries {
        let l = snap.extra(e).unwrap().forward_frames.as_ref().unwrap();
        assert!(Arc::ptr_eq(l, &first));
    }
}

#[test]
fn a_shared_frame_list_is_interned_once() {
    let data = shared_snapshot(20_000, "frames", |w| {
        w.raw(b"](");
        for i in 0..5_000 {
            w.raw(b"}(")
                .s("filename")
                .s("/x/a.py")
                .s("line")
                .int(i)
                .s("name")
                .s("f")
                .raw(b"u");
        }
        w.raw(b"e");
    });
    let p = Pickle::parse(&data, &tight()).unwrap();
    let snap = schema::decode(&p, &tight()).unwrap();
    assert_eq!(snap.frames.frames.len(), 5_000);
    assert_eq!(
        snap.frames.list_count(),
        2,
        "the empty list and the shared one"
    );
    assert!(
        snap.traces[0]
            .iter()
            .all(|e| e.frames == snap.traces[0][0].frames)
    );
    assert!(read_snapshot(&data, &name("f.pickle"), &tight()).is_ok());
}

#[test]
fn many_frames_sharing_a_huge_file_name_end_in_a_clean_error() {
    let huge = format!("/{}.py", "d".repeat(1 << 20));
    // 20,000 distinct frames (one line each) that all name one megabyte file: the analysis
    // would scan 20 GB of names.
    let mut w = W::new();
    w.s(&huge).put(0).raw(b"0");
    w.raw(b"}(")
        .s("segments")
        .raw(b"]")
        .s("device_traces")
        .raw(b"](](");
    for i in 0..20_000 {
        w.raw(b"}(")
            .s("action")
            .s("alloc")
            .s("addr")
            .int(i * 512)
            .s("size")
            .int(512);
        w.s("frames")
            .raw(b"](}(")
            .s("filename")
            .get(0)
            .s("line")
            .int(i);
        w.s("name").s("f").raw(b"ueu");
    }
    w.raw(b"eeu.");
    let data = w.0;
    assert!(data.len() < 4 << 20);
    let err =
        read_snapshot(&data, &name("huge-names.pickle"), &PickleLimits::default()).unwrap_err();
    assert!(matches!(err, SnapshotError::ExpansionLimit { .. }), "{err}");
}

#[test]
fn a_zeros_bomb_stops_after_one_buffer() {
    // PROTO 4, then 64 MiB of zeros (0x00 is not an opcode).
    let mut data = vec![0x80, 4];
    data.resize(64 << 20, 0);
    let mut reader = Pieces::new(&data, &[usize::MAX]);
    let err = Pickle::from_reader(&mut reader, &PickleLimits::default()).unwrap_err();
    assert_eq!(err.offset(), 2, "{err}");
    assert!(reader.pulled <= 1 << 20, "read {} bytes", reader.pulled);
}

#[test]
fn a_stream_longer_than_the_input_limit_stops_at_the_limit() {
    // A valid pickle that never ends: an endless run of `NONE` then `POP`.
    struct Endless(u64);
    impl Read for Endless {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            for b in buf.iter_mut() {
                *b = if self.0 % 2 == 0 { b'N' } else { b'0' };
                self.0 += 1;
            }
            Ok(buf.len())
        }
    }
    let limits = PickleLimits {
        max_input_bytes: 3 << 20,
        ..PickleLimits::default()
    };
    match Pickle::from_reader(Endless(0), &limits) {
        Err(PickleError::LimitExceeded { offset, what, .. }) => {
            assert_eq!(what, "the input size");
            assert_eq!(offset, 3 << 20);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_binary_exits_2_on_a_gzip_zeros_bomb_naming_the_file_and_byte() {
    let dir = common::tmp_dir("stream", "bomb");
    let path = dir.join("bomb.pickle.gz");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &[0x80, 4]).unwrap();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..64 {
        std::io::Write::write_all(&mut gz, &zeros).unwrap();
    }
    std::fs::write(&path, gz.finish().unwrap()).unwrap();
    let out = common::run_bin(&[&path]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("bomb.pickle.gz"), "{stderr}");
    assert!(stderr.contains("byte 2"), "{stderr}");
}

#[test]
fn the_binary_names_the_offset_of_a_truncated_snapshot() {
    let Some((_, bytes)) = real_snapshots().into_iter().next() else {
        return;
    };
    let dir = common::tmp_dir("stream", "truncated");
    let path = dir.join("cut.pickle");
    let cut = bytes.len() / 2;
    std::fs::write(&path, &bytes[..cut]).unwrap();
    let out = common::run_bin(&[&path]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cut.pickle"), "{stderr}");
    assert!(
        stderr.contains(&format!("truncated at byte {cut}")),
        "{stderr}"
    );
}

/// Everything a decoded snapshot says about its traces, frames resolved to their text.
fn trace_summary(snap: &schema::Snapshot) -> Vec<String> {
    let mut out = vec![
        format!("{:?}", snap.markers),
        format!("{:?}", snap.anomalies),
        format!("{:?}", snap.frames.frames),
    ];
    for (name, traces) in [("device", &snap.traces), ("host", &snap.host_traces)] {
        for (dev, entries) in traces.iter().enumerate() {
            out.push(format!("{name} {dev}: {} entries", entries.len()));
            for e in entries {
                let frames: Vec<String> = snap
                    .frames
                    .list(e.frames)
                    .iter()
                    .map(|&f| format!("{:?}", snap.frames.frame(f)))
                    .collect();
                out.push(format!(
                    "{:?} {} {} {} {:?} {:?}",
                    e.action,
                    e.addr,
                    e.size,
                    e.time_us,
                    frames,
                    snap.extra(e)
                ));
            }
        }
    }
    out
}

/// Device 0 empty, device 1 with 2,500 entries in three `APPENDS` batches, then
/// `host_traces`: frame dicts and frame lists made in the first batch are referenced by
/// memo in later ones, a `pool_id` tuple of one batch is referenced in another, and an
/// entry dict of the first batch is an element again in the last.
fn batched_snapshot() -> Vec<u8> {
    let mut w = W::new();
    w.raw(b"}(").s("segments").raw(b"]("); // root, its MARK, segments list, its MARK
    w.raw(b"}(")
        .s("address")
        .int(4096)
        .s("total_size")
        .int(1 << 20);
    w.s("frames").raw(b"](");
    for f in 0..2 {
        w.raw(b"}(").s("filename").s("seg.py").s("line").int(f);
        w.s("name").s("setup").raw(b"u").put(7000 + f as u32);
    }
    w.raw(b"e").s("blocks").raw(b"]u").raw(b"e");
    w.s("device_traces").raw(b"](]]"); // O, MARK, device 0 (empty), device 1
    let mut i = 0i32;
    for batch in [1000, 1000, 500] {
        w.raw(b"(");
        for _ in 0..batch {
            if i == 2200 {
                w.get(8000); // entry 3 again
                i += 1;
                continue;
            }
            w.raw(b"}");
            if i == 3 {
                w.put(8000);
            }
            w.raw(b"(").s("action");
            w.s(if i % 2 == 0 {
                "alloc"
            } else {
                "free_completed"
            });
            w.s("addr")
                .int(i * 512)
                .s("size")
                .int(512)
                .s("time_us")
                .int(i);
            w.s("frames");
            if i < 10 {
                w.raw(b"](");
                for f in 0..3 {
                    w.raw(b"}(").s("filename").s(&format!("m{i}.py"));
                    w.s("line").int(f).s("name").s("fwd").raw(b"u");
                    w.put(100 + (i * 3 + f) as u32);
                }
                w.get(7000).raw(b"e").put(50 + i as u32);
            } else if i % 2 == 0 {
                w.get(50 + (i % 10) as u32);
            } else {
                w.raw(b"](").get(100 + (i % 30) as u32).get(7001).raw(b"e");
            }
            w.s("pool_id");
            if i == 1500 {
                w.get(9000);
            } else {
                w.int(1).int(i % 3).raw(b"\x86");
                if i == 5 {
                    w.put(9000);
                }
            }
            if i == 7 {
                w.s("size").int(-1); // an anomaly, noted in order
            }
            w.raw(b"u");
            i += 1;
        }
        w.raw(b"e");
    }
    w.raw(b"e"); // O's APPENDS
    w.s("host_traces").raw(b"](](");
    for j in 0..3 {
        w.raw(b"}(")
            .s("action")
            .s("alloc")
            .s("addr")
            .int(j)
            .s("size")
            .int(8);
        w.s("frames").get(50).raw(b"u");
    }
    w.raw(b"eeu.");
    w.0
}

#[test]
fn trace_entries_decoded_while_read_equal_the_whole_arena_decode() {
    let data = batched_snapshot();
    let limits = PickleLimits::default();
    let whole = Pickle::parse(&data, &limits).unwrap();
    let expected = schema::decode(&whole, &limits).unwrap();
    assert_eq!(expected.traces.len(), 2);
    assert_eq!(expected.traces[1].len(), 2500);
    assert_eq!(expected.host_traces[0].len(), 3);
    assert!(expected.anomalies.count > 0);

    for sizes in [&[usize::MAX][..], &[1, 7, 300]] {
        let mut decoder = schema::StreamDecoder::new(&limits);
        let p = Pickle::from_reader_with(Pieces::new(&data, sizes), &limits, &mut decoder).unwrap();
        // The arena never held the trace: at most one batch of it, released afterwards.
        assert!(
            p.item_count() < whole.item_count() / 10,
            "{} items left of {}",
            p.item_count(),
            whole.item_count()
        );
        let streamed = decoder.finish(&p).unwrap();
        assert_eq!(trace_summary(&streamed), trace_summary(&expected));
        assert_eq!(streamed.segments.len(), 1);
    }
    // And through the public entry point.
    let a = read_snapshot(&data, &name("b.pickle"), &limits).unwrap();
    let b = read_snapshot_from(&data[..], &name("b.pickle"), &limits).unwrap();
    assert_same_analysis(&a, &b, "b.pickle");
}

#[test]
fn adding_to_an_entry_dict_after_its_batch_is_refused() {
    // A hand-made pickle: the memo hands back an entry dict of a finished batch and
    // SETITEMS adds to it. Python never writes this; the reader refuses it with the offset.
    let mut w = W::new();
    w.raw(b"}(")
        .s("segments")
        .raw(b"]")
        .s("device_traces")
        .raw(b"](](");
    w.raw(b"}")
        .put(1)
        .raw(b"(")
        .s("action")
        .s("alloc")
        .raw(b"u");
    w.raw(b"ee").get(1).raw(b"(").s("size").int(1).raw(b"u0u.");
    let data = w.0;
    let mut decoder = schema::StreamDecoder::new(&PickleLimits::default());
    let err = Pickle::parse_with(&data, &PickleLimits::default(), Some(&mut decoder));
    match err {
        Err(PickleError::Malformed { offset, .. }) => assert!(offset > 0),
        other => panic!("{other:?}"),
    }
}

// ---- pipelined reads ------------------------------------------------------------------------

/// What reading `bytes` with a snapshot decoder comes to: the analysis and the arena's dump,
/// or the error, as text. `pipelined`: through `Pickle::from_blocks_with`, where the decoder
/// works on a second thread while the next batch is parsed; otherwise on one thread.
fn decoded_outcome(bytes: &[u8], limits: &PickleLimits, pipelined: bool) -> String {
    let mut decoder = schema::StreamDecoder::new(limits);
    let pickle = if pipelined {
        let mut feed = Blocks::new(bytes, &[4093, 1, 65537, 300], 3);
        Pickle::from_blocks_with(&mut feed, limits, &mut decoder)
    } else {
        Pickle::parse_with(bytes, limits, Some(&mut decoder))
    };
    match pickle {
        Ok(p) => {
            let arena = dump(&p).join("\n");
            match decoder.finish(&p) {
                Ok(snap) => {
                    let analysis = oomdoctor::ingest::snapshot::analyze_snapshot(&snap, &name("x"));
                    format!("{}\n{arena}", serde_json::to_string(&analysis).unwrap())
                }
                Err(e) => format!("decode error {e:?}"),
            }
        }
        // The reader stops where the decoder does; its own offset is not reported.
        Err(PickleError::Stopped { .. }) => format!("stopped: {:?}", decoder.error()),
        Err(e) => format!("pickle error {e:?}"),
    }
}

fn assert_pipelined_same(bytes: &[u8], limits: &PickleLimits, what: &str) {
    let one = decoded_outcome(bytes, limits, false);
    let two = decoded_outcome(bytes, limits, true);
    assert!(
        one == two,
        "{what}: one thread\n{one:.2000}\npipelined\n{two:.2000}"
    );
}

/// How a hand-made trace deviates from what PyTorch writes, to reach the pipeline's
/// unusual paths.
#[derive(Clone, Copy, PartialEq)]
enum Twist {
    None,
    /// Between two batches, an `APPEND` into the `segments` list (made before the trace).
    AppendToOldList,
    /// Between two batches, a `SETITEM` into an entry dict of the batch before.
    SetItemInReleasedEntry,
    /// Each batch memoises one of its wide integers and a later batch gets it.
    MemoisedNumbers,
    /// The `host_traces` key follows, with its own lists.
    HostTraces,
}

/// A snapshot whose trace is written as Python's pickler writes it: per device a list,
/// its entries in batches of `batch` (`MARK ... APPENDS`, a last single one with `APPEND`),
/// frame dicts memoised at first use and fetched by memo after; wide addresses.
fn batched_trace(devices: &[usize], batch: usize, twist: Twist) -> Vec<u8> {
    let mut w = W::new();
    let mut memo = 0u32;
    let mut next = || {
        memo += 1;
        memo - 1
    };
    w.raw(b"}");
    let root = next();
    w.put(root).raw(b"(").s("segments").raw(b"]");
    let segments = next();
    w.put(segments).s("device_traces").raw(b"](");
    let mut frames: Vec<u32> = Vec::new();
    let mut entry_memo: Option<u32> = None;
    let mut number_memo: Option<u32> = None;
    let lists: Vec<(&str, &[usize])> = if twist == Twist::HostTraces {
        vec![("device_traces", devices), ("host_traces", &devices[..1])]
    } else {
        vec![("device_traces", devices)]
    };
    for (k, (key, devs)) in lists.iter().enumerate() {
        if k > 0 {
            w.raw(b"e").s(key).raw(b"](");
        }
        for (dev, &n) in devs.iter().enumerate() {
            w.raw(b"]");
            let mut i = 0;
            while i < n {
                let m = batch.min(n - i);
                if i > 0 {
                    match twist {
                        Twist::AppendToOldList => {
                            w.get(segments).s("stray").raw(b"a0");
                        }
                        Twist::SetItemInReleasedEntry if dev == 0 => {
                            if let Some(e) = entry_memo {
                                w.get(e).s("late").s("key").raw(b"s0");
                            }
                        }
                        _ => {}
                    }
                }
                if m > 1 {
                    w.raw(b"(");
                }
                for j in 0..m {
                    let at = i + j;
                    w.raw(b"}");
                    if j == 0 {
                        let e = next();
                        w.put(e);
                        entry_memo = Some(e);
                    }
                    w.raw(b"(").s("action").s(if at % 3 == 2 {
                        "free_completed"
                    } else {
                        "alloc"
                    });
                    w.s("addr");
                    if twist == Twist::MemoisedNumbers && j == 1 {
                        if let Some(nm) = number_memo {
                            w.get(nm);
                        } else {
                            w.int(0x4000_0000 + (at as i32 % 3) * 512);
                        }
                        let nm = next();
                        w.raw(b"J")
                            .raw(&(0x5000_0000i32 + at as i32).to_le_bytes())
                            .put(nm)
                            .raw(b"0");
                        number_memo = Some(nm);
                    } else {
                        w.int(0x4000_0000 + (at as i32 % 3) * 512);
                    }
                    w.s("size").int(512 + (at as i32 % 7) * 0x100_0000);
                    w.s("stream")
                        .int(0)
                        .s("time_us")
                        .int(0x2000_0000 + at as i32);
                    w.s("frames").raw(b"](");
                    for f in 0..(2 + at % 4) {
                        let id = (at * 7 + f * 3) % 40;
                        if let Some(&h) = frames.get(id).filter(|&&h| h != u32::MAX) {
                            w.get(h);
                        } else {
                            w.raw(b"}(")
                                .s("filename")
                                .s(&format!("model/layer_{id}.py"))
                                .s("line")
                                .int(10 + id as i32)
                                .s("name")
                                .s(&format!("forward_{}", id % 5))
                                .raw(b"u");
                            let h = next();
                            w.put(h);
                            if frames.len() <= id {
                                frames.resize(id + 1, u32::MAX);
                            }
                            frames[id] = h;
                        }
                    }
                    w.raw(b"eu");
                }
                w.raw(if m > 1 { b"e" } else { b"a" });
                i += m;
            }
        }
    }
    w.raw(b"eu.");
    w.0
}

#[test]
fn pipelined_reads_of_real_snapshots_decode_as_one_thread_does() {
    let limits = PickleLimits::default();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/snapshots");
    let mut files = real_snapshots();
    for e in std::fs::read_dir(fixtures).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "pickle") {
            files.push((p.display().to_string(), std::fs::read(&p).unwrap()));
        }
    }
    assert!(files.len() >= 20, "the bundled snapshots are read");
    for (path, bytes) in &files {
        assert_pipelined_same(bytes, &limits, path);
    }
}

#[test]
fn pipelined_reads_of_batched_traces_decode_as_one_thread_does() {
    let limits = PickleLimits::default();
    for twist in [
        Twist::None,
        Twist::AppendToOldList,
        Twist::SetItemInReleasedEntry,
        Twist::MemoisedNumbers,
        Twist::HostTraces,
    ] {
        for (devices, batch) in [
            (&[1usize][..], 10),
            (&[9], 10),
            (&[31], 10),
            (&[41, 0, 17], 10),
            (&[2001, 1000], 1000),
            (&[3, 2, 1, 5], 2),
        ] {
            let bytes = batched_trace(devices, batch, twist);
            let what = format!("devices {devices:?} batch {batch}");
            let one = decoded_outcome(&bytes, &limits, false);
            assert!(
                twist == Twist::SetItemInReleasedEntry || !one.starts_with("pickle error"),
                "{what}: the hand-made trace reads: {one:.300}"
            );
            assert_pipelined_same(&bytes, &limits, &what);
        }
    }
}

/// Errors land the same: the decoder's walk budget running out mid-trace (it stops the
/// reader, whatever the parser meets after), and the input cut anywhere.
#[test]
fn pipelined_reads_stop_and_fail_as_one_thread_does() {
    let bytes = batched_trace(&[57, 12], 8, Twist::None);
    for ratio in [0, 1] {
        let limits = PickleLimits {
            max_expansion_ratio: ratio,
            ..PickleLimits::default()
        };
        assert_pipelined_same(&bytes, &limits, &format!("expansion ratio {ratio}"));
    }
    let limits = PickleLimits::default();
    for cut in (0..bytes.len()).step_by(7) {
        assert_pipelined_same(&bytes[..cut], &limits, &format!("cut at {cut}"));
    }
}

/// A large snapshot file written for a test, mapped as the app maps it.
fn mapped_blocks(file: &TempLog) -> oomdoctor::input::MappedBlocks {
    oomdoctor::input::MappedBlocks::new(file.mapped())
}

/// A large snapshot file (the app maps one of 8 MiB or more, `input::MappedBlocks`) reads
/// through its map as the same bytes read from memory do: its windows and blocks cut the
/// trace's batches anywhere.
#[test]
fn a_mapped_snapshot_reads_as_the_read_one_does() {
    let bytes = batched_trace(&[70_000, 50_000], 1000, Twist::HostTraces);
    assert!(bytes.len() > 9 << 20, "{} bytes", bytes.len());
    let file = TempLog::new("snapshot-mapped-agrees", &bytes);
    let limits = PickleLimits::default();
    let from_memory = read_snapshot(&bytes, &name("x"), &limits).unwrap();
    let from_map = oomdoctor::ingest::snapshot::read_snapshot_blocks(
        mapped_blocks(&file),
        &name("x"),
        &limits,
    )
    .unwrap();
    assert_eq!(from_map.devices().len(), 2);
    assert_eq!(
        serde_json::to_string(&from_map).unwrap(),
        serde_json::to_string(&from_memory).unwrap()
    );
}

/// A snapshot file cut short after it was mapped (copied over, rewritten by the job that
/// dumps it) ends at the cut as a truncated file read through a reader does, instead of
/// the process dying of SIGBUS on the pages the file no longer has.
#[test]
fn a_snapshot_cut_under_its_map_reads_as_truncated() {
    let bytes = batched_trace(&[100_000], 1000, Twist::None);
    for keep in [0u64, 4096, 5 << 20] {
        let file = TempLog::new(&format!("snapshot-mapped-cut-{keep}"), &bytes);
        let blocks = mapped_blocks(&file);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&file.0)
            .unwrap()
            .set_len(keep)
            .unwrap();
        let from_map = oomdoctor::ingest::snapshot::read_snapshot_blocks(
            blocks,
            &name("x"),
            &PickleLimits::default(),
        );
        let from_read = read_snapshot_from(
            &bytes[..keep as usize],
            &name("x"),
            &PickleLimits::default(),
        );
        match (from_map, from_read) {
            (Err(m), Err(r)) => assert_eq!(m.to_string(), r.to_string(), "cut at {keep}"),
            (m, r) => panic!("cut at {keep}: map {:?}, read {:?}", m.err(), r.err()),
        }
    }
}
