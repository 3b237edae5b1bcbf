//! Reads one PyTorch memory snapshot and prints a short summary of the analysis.
//!
//! Used by `bench/snapshot_bench.sh` to time the whole analysis (read + parse + decode +
//! analyse) until the CLI is wired. `--json` prints the full analysis as JSON instead,
//! `--facts` the facts for the OOM (or busiest) device, `--phases` the time of each phase
//! (parse, decode, analyse) run one after the other.
//!
//! ```text
//! cargo run --release --example snapshot_bench -- /tmp/snap.pickle [--json|--facts]
//! ```

use std::sync::Arc;
use std::time::Instant;

use oomdoctor::facts::evidence::InputName;
use oomdoctor::facts::units::format_bytes;
use oomdoctor::ingest::snapshot::pickle::{Pickle, PickleLimits};
use oomdoctor::ingest::snapshot::{
    read_snapshot, read_snapshot_ahead, read_snapshot_blocks, read_snapshot_from,
};
use oomdoctor::input::MappedBlocks;

fn main() -> miette::Result<()> {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: snapshot_bench <snapshot.pickle> [--json|--facts]");
        std::process::exit(2);
    };
    let mode = args.next().unwrap_or_default();
    if mode == "--phases" {
        return phases(&path);
    }
    let t0 = Instant::now();
    let input: InputName = Arc::from(path.as_str());
    // As the app reads it: streamed from the file, never held whole, in blocks copied out
    // of a map (a file of 8 MiB or more, on two cores or more) or read ahead on a second
    // thread (`--read-ahead` forces that; `--no-read-ahead` reads it on this thread through
    // the pickle reader's buffer; `--whole` reads it into memory first, as before issue 15).
    let limits = PickleLimits::default();
    let analysis = if mode == "--whole" {
        let bytes = std::fs::read(&path).map_err(|e| miette::miette!("{path}: {e}"))?;
        read_snapshot(&bytes, &input, &limits)?
    } else {
        let file = std::fs::File::open(&path).map_err(|e| miette::miette!("{path}: {e}"))?;
        let forced = mode == "--read-ahead" || mode == "--no-read-ahead";
        match mapped(&file).filter(|_| !forced) {
            Some(map) => read_snapshot_blocks(MappedBlocks::new(map), &input, &limits)?,
            None if mode == "--no-read-ahead" => read_snapshot_from(file, &input, &limits)?,
            None => read_snapshot_ahead(file, &input, &limits)?,
        }
    };
    let t_total = t0.elapsed();

    match mode.as_str() {
        "--json" => {
            println!(
                "{}",
                serde_json::to_string_pretty(&analysis).map_err(|e| miette::miette!("{e}"))?
            );
            return Ok(());
        }
        "--facts" => {
            let facts = analysis.facts();
            for (name, fact) in facts.iter() {
                let shown = facts.display(name).unwrap_or_default();
                let at = fact.sources.first().map(|s| s.short()).unwrap_or_default();
                println!("{name:<45} {shown:<28} {at}");
            }
            return Ok(());
        }
        _ => {}
    }
    println!(
        "{path}: PyTorch {} ({:?}, protocol {:?})",
        analysis.generation.label, analysis.layout, analysis.pickle_protocol
    );
    println!("  total {:.3} s", t_total.as_secs_f64());
    for d in analysis.devices() {
        println!(
            "  device {}: {} segments, reserved {}, allocated {}, {} trace entries, peak live {}",
            d.device,
            d.segments.segment_count,
            format_bytes(d.segments.reserved_bytes),
            format_bytes(d.segments.allocated_bytes),
            d.trace.entries,
            format_bytes(d.timeline.peak_live_bytes)
        );
        if let Some(oom) = &d.oom {
            println!(
                "    OOM at [{}]: requested {}, device free {:?}, live at OOM {} (replayed: {})",
                oom.trace_index,
                format_bytes(oom.requested_bytes),
                oom.device_free_bytes.map(format_bytes),
                format_bytes(d.state.live_bytes),
                d.state.replayed
            );
        }
        let cats: Vec<String> = d
            .attribution
            .categories
            .iter()
            .filter(|c| c.bytes > 0)
            .map(|c| format!("{} {}", c.category.name(), format_bytes(c.bytes)))
            .collect();
        println!("    at {:?}: {}", d.attribution.moment, cats.join(", "));
        if let Some(top) = d.attribution.top_sites.first() {
            println!(
                "    top site: {} ({})",
                top.site.label,
                format_bytes(top.bytes)
            );
        }
        if let Some(leak) = &d.leak {
            println!(
                "    leak: {:.0} bytes/step over {} steps at {:?}",
                leak.slope_bytes_per_step,
                leak.leaking_steps,
                leak.sites.first().map(|s| &s.site.label)
            );
        }
    }
    Ok(())
}

/// The file mapped as the app maps a snapshot: one of 8 MiB or more, where two cores may be
/// used (`None`: it is read ahead instead).
fn mapped(file: &std::fs::File) -> Option<oomdoctor::input::MappedFile> {
    if !oomdoctor::input::read_ahead_worthwhile() {
        return None;
    }
    let len = file.metadata().ok()?.len();
    oomdoctor::input::MappedFile::new(file.try_clone().ok()?, len)
}

/// Times each phase of the read separately (the trace entries are decoded
/// while the file is read, so they count in the first phase).
fn phases(path: &str) -> miette::Result<()> {
    let limits = PickleLimits::default();
    let t = Instant::now();
    let file = std::fs::File::open(path).map_err(|e| miette::miette!("{path}: {e}"))?;
    let mut decoder = oomdoctor::ingest::snapshot::schema::StreamDecoder::new(&limits);
    // As the app reads it: blocks copied out of a map or filled on a second thread, where
    // there is one.
    let parsed = if oomdoctor::input::read_ahead_worthwhile() {
        match mapped(&file) {
            Some(map) => {
                Pickle::from_blocks_with(&mut MappedBlocks::new(map), &limits, &mut decoder)
            }
            None => {
                let mut feed = oomdoctor::input::ReadAhead::new(file);
                Pickle::from_blocks_with(&mut feed, &limits, &mut decoder)
            }
        }
    } else {
        Pickle::from_reader_with(file, &limits, &mut decoder)
    };
    let pickle = match parsed {
        Ok(p) => p,
        Err(e) => match decoder.error() {
            Some(d) => return Err(miette::miette!("{d:?}")),
            None => return Err(e.into()),
        },
    };
    println!(
        "read + parse + decode traces {:>7.3} s  ({} bytes, {} objects, {} items left)",
        t.elapsed().as_secs_f64(),
        pickle.input_len(),
        pickle.object_count(),
        pickle.item_count()
    );
    let t = Instant::now();
    let snap = decoder
        .finish(&pickle)
        .map_err(|e| miette::miette!("{e:?}"))?;
    println!(
        "decode the rest {:>7.3} s  ({} frames, {} frame lists)",
        t.elapsed().as_secs_f64(),
        snap.frames.frames.len(),
        snap.frames.list_count()
    );
    let t = Instant::now();
    drop(pickle);
    println!("drop    {:>7.3} s", t.elapsed().as_secs_f64());
    let t = Instant::now();
    let input: InputName = Arc::from(path);
    let analysis = oomdoctor::ingest::snapshot::analyze_snapshot(&snap, &input);
    println!(
        "analyse {:>7.3} s  ({} devices)",
        t.elapsed().as_secs_f64(),
        analysis.devices().len()
    );
    Ok(())
}
