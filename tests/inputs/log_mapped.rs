//! A large log read through a map ([`oomdoctor::input::MappedFile`]) gives what the same
//! log read through a reader gives, and a log cut short under the map ends the scan at the
//! cut instead of killing the process.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use oomdoctor::ingest::log::engines::{anchors, gate};
use oomdoctor::ingest::log::grouping::analyze_log_source;
use oomdoctor::ingest::log::scanner::{Source, scan_source};
use oomdoctor::ingest::log::{Hit, LineSink, ScanPlan};
use oomdoctor::input::MappedFile;

use crate::log_gate::Lines;

/// A file in the system's temporary folder, removed when dropped (also the snapshot tests'
/// large files, `snapshot_stream`).
pub(crate) struct TempLog(pub(crate) PathBuf);

impl TempLog {
    pub(crate) fn new(name: &str, bytes: &[u8]) -> TempLog {
        let path =
            std::env::temp_dir().join(format!("oomdoctor-{}-{name}.log", std::process::id()));
        let mut f = File::create(&path).unwrap();
        f.write_all(bytes).unwrap();
        TempLog(path)
    }

    pub(crate) fn mapped(&self) -> MappedFile {
        let f = File::open(&self.0).unwrap();
        let len = f.metadata().unwrap().len();
        MappedFile::new(f, len).expect("a large file maps")
    }
}

impl Drop for TempLog {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A 40 MiB log: noise of varied line lengths (a few lines longer than the scan's long-line
/// limit, CRLF endings), readings and failures from the project's fixtures spread through
/// it, so that hits fall across every boundary of the map's windows and hand-outs.
fn big_log() -> Vec<u8> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pastes");
    let mut pastes: Vec<Vec<u8>> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    pastes.sort();
    assert!(pastes.len() > 10);
    let mut rng = crate::common::Rng(0x6d61_7070_6564_0001);
    let mut log = Vec::new();
    let mut k = 0;
    while log.len() < 40 << 20 {
        match rng.below(1000) {
            0 => {
                // A line longer than the scan's 2 MiB long-line limit, with a hit inside.
                // One of up to about 5 MiB may still be delivered whole when its newline
                // arrives in the same read as the limit is crossed, which depends on where
                // the reads end; past that it is windowed wherever they end.
                log.extend(std::iter::repeat_n(b'z', 6 << 20));
                log.extend(b" CUDA out of memory ");
                log.extend(std::iter::repeat_n(b'y', 100_000));
                log.push(b'\n');
            }
            1..=20 => {
                log.extend(&pastes[k % pastes.len()]);
                if !log.ends_with(b"\n") {
                    log.push(b'\n');
                }
                k += 1;
            }
            21..=60 => log.extend(
                format!(
                    "[2026-03-02 10:59:27,864] INFO  trainer: step {} | loss 2.2610 | mem {}.92 GiB\r\n",
                    rng.below(100_000),
                    rng.below(80)
                )
                .bytes(),
            ),
            _ => {
                let n = rng.below(300) as usize;
                log.extend(std::iter::repeat_n(b'.', n));
                log.extend(b" step done tokens=2243\n");
            }
        }
    }
    // The end is ordinary lines: a line longer than the long-line limit is delivered as a
    // window or whole depending on whether the end of the input is known yet, which a map
    // knows from the start and a reader only once it reads nothing more.
    while log.len() < 44 << 20 {
        log.extend(b"INFO 10:00:00 step 12 | loss 2.310 | tokens/s 11000\n");
    }
    log
}

#[test]
fn a_mapped_log_scans_as_the_read_one_does() {
    let log = big_log();
    let file = TempLog::new("mapped-agrees", &log);
    for plan in [
        ScanPlan::default(),
        ScanPlan {
            head: 0,
            tail: 0,
            window: 16 << 10,
        },
        ScanPlan::full(),
    ] {
        let mut read = Lines::default();
        let read_stats = scan_source(
            Source::Read(&mut &log[..]),
            anchors(),
            Some(gate()),
            plan,
            &mut read,
        )
        .unwrap();
        let mut mapped = Lines::default();
        let mut m = file.mapped();
        let mapped_stats = scan_source(
            Source::Mapped(&mut m),
            anchors(),
            Some(gate()),
            plan,
            &mut mapped,
        )
        .unwrap();
        assert!(read.0.len() > 100, "{} hits", read.0.len());
        assert_eq!(mapped_stats, read_stats, "{plan:?}");
        if let Some(i) =
            (0..read.0.len().max(mapped.0.len())).find(|&i| read.0.get(i) != mapped.0.get(i))
        {
            let show = |h: Option<&(u64, String)>| {
                h.map(|(n, t)| {
                    format!(
                        "line {n} ({} bytes): {}",
                        t.len(),
                        t.chars().take(60).collect::<String>()
                    )
                })
            };
            panic!(
                "{plan:?}: hit {i} of {} read, {} mapped: read {:?}, mapped {:?}",
                read.0.len(),
                mapped.0.len(),
                show(read.0.get(i)),
                show(mapped.0.get(i))
            );
        }
        assert_eq!(m.shrunk_at(), None);
    }
    // The diagnosis built on them is the same too.
    let input = Arc::from("big.log");
    let (from_read, _) =
        analyze_log_source(Source::Read(&mut &log[..]), &input, ScanPlan::default()).unwrap();
    let mut m = file.mapped();
    let (from_map, _) =
        analyze_log_source(Source::Mapped(&mut m), &input, ScanPlan::default()).unwrap();
    assert!(!from_read.incidents.is_empty());
    assert_eq!(
        format!("{:?}", from_map.incidents),
        format!("{:?}", from_read.incidents)
    );
}

/// Cuts the file to `keep` bytes at the first hit the scan delivers.
struct CutAtFirstHit<'a> {
    path: &'a Path,
    keep: u64,
    lines: Lines,
}

impl LineSink for CutAtFirstHit<'_> {
    fn hit(&mut self, hit: &Hit<'_>) -> u32 {
        if self.lines.0.is_empty() {
            std::fs::OpenOptions::new()
                .write(true)
                .open(self.path)
                .unwrap()
                .set_len(self.keep)
                .unwrap();
        }
        self.lines.hit(hit)
    }
}

#[test]
fn a_log_cut_short_while_it_is_scanned_ends_at_the_cut() {
    // logrotate's copytruncate empties a log while a reader maps it: the pages past the new
    // end are gone, and touching one raises SIGBUS. The scan must end there, not die.
    let mut log =
        b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n".to_vec();
    while log.len() < 24 << 20 {
        log.extend(b"INFO 10:00:00 step 12 | loss 2.310 | mem 61.92 GiB | tokens/s 11000\n");
    }
    for keep in [0, 5000, 3 << 20] {
        let file = TempLog::new(&format!("mapped-cut-{keep}"), &log);
        let mut m = file.mapped();
        let mut sink = CutAtFirstHit {
            path: &file.0,
            keep,
            lines: Lines::default(),
        };
        let stats = scan_source(
            Source::Mapped(&mut m),
            anchors(),
            Some(gate()),
            ScanPlan::default(),
            &mut sink,
        )
        .unwrap();
        let cut = m.shrunk_at().expect("the cut is noticed");
        // The cut is seen at the first page the file no longer holds.
        assert!(
            cut >= keep && cut < keep + 4096 * 16,
            "cut at {cut}, kept {keep}"
        );
        assert!(stats.bytes < log.len() as u64, "{stats:?}");
        assert_eq!(sink.lines.0[0].0, 1);
    }
}

#[test]
fn small_and_unreadable_files_are_not_mapped() {
    let file = TempLog::new("mapped-small", b"CUDA out of memory\n");
    let f = File::open(&file.0).unwrap();
    assert!(MappedFile::new(f, 19).is_none());
}
