//! Reads memory series the way oomdoctor will, and times it.
//!
//! ```text
//! cargo run --release --example series_bench -- FILE...        # sniff, read, merge, analyse; print patterns, facts, charts
//! cargo run --release --example series_bench -- --quiet FILE... # timings and counts only
//! cargo run --release --example series_bench -- gen-smi PATH N  # write N samples of nvidia-smi CSV (8 GPUs interleaved)
//! cargo run --release --example series_bench -- gen-prom PATH N # write N device samples of DCGM Prometheus text
//! ```
//!
//! `bench/series_bench.sh` generates 10 million samples of each and records wall time and
//! peak memory with `/usr/bin/time`.

#[path = "../tests/common/rng.rs"]
mod rng;

use rng::Rng;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::sync::Arc;
use std::time::Instant;

use oomdoctor::facts::evidence::InputName;
use oomdoctor::ingest::series::{self, SeriesSet};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("gen-smi") => generate(&args, gen_smi),
        Some("gen-prom") => generate(&args, gen_prom),
        Some(_) => inspect(&args),
        None => Err(
            "usage: series_bench [--quiet] FILE... | gen-smi PATH N | gen-prom PATH N".to_string(),
        ),
    };
    if let Err(e) = result {
        eprintln!("{e}");
        std::process::exit(2);
    }
}

fn generate(
    args: &[String],
    f: fn(&mut dyn Write, u64) -> std::io::Result<()>,
) -> Result<(), String> {
    let (Some(path), Some(n)) = (args.get(1), args.get(2).and_then(|n| n.parse::<u64>().ok()))
    else {
        return Err("usage: gen-smi|gen-prom PATH N".to_string());
    };
    let mut out = BufWriter::with_capacity(
        1 << 20,
        File::create(path).map_err(|e| format!("{path}: {e}"))?,
    );
    f(&mut out, n).map_err(|e| e.to_string())?;
    out.flush().map_err(|e| e.to_string())
}

/// nvidia-smi `--query-gpu=timestamp,index,name,memory.used,memory.total,memory.free
/// --format=csv` at 1 s, 8 GPUs interleaved; GPU 3 leaks slowly.
fn gen_smi(out: &mut dyn Write, n: u64) -> std::io::Result<()> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let total = 81559i64;
    writeln!(
        out,
        "timestamp, index, name, memory.used [MiB], memory.total [MiB], memory.free [MiB]"
    )?;
    let t0 = chrono::NaiveDate::from_ymd_opt(2025, 9, 1)
        .and_then(|d| d.and_hms_milli_opt(0, 0, 0, 0))
        .ok_or_else(|| std::io::Error::other("date"))?;
    for k in 0..n {
        let (step, gpu) = (k / 8, k % 8);
        let t = t0 + chrono::Duration::milliseconds(step as i64 * 1000 + gpu as i64 * 2);
        let base = 52_000 + gpu as i64 * 1000;
        let leak = if gpu == 3 {
            (step as i64 / 97).min(28_000)
        } else {
            0
        };
        let used = (base + leak + rng.noise(300)).clamp(0, total);
        writeln!(
            out,
            "{}, {gpu}, NVIDIA H100 80GB HBM3, {used} MiB, {total} MiB, {} MiB",
            t.format("%Y/%m/%d %H:%M:%S%.3f"),
            total - used
        )?;
    }
    Ok(())
}

/// DCGM exporter via Prometheus federation: FB_USED and FB_FREE per GPU per scrape, with
/// timestamps, 8 GPUs; `n` device samples (2n metric lines).
fn gen_prom(out: &mut dyn Write, n: u64) -> std::io::Result<()> {
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    let total = 81559i64;
    let t0 = 1_756_684_800_000i64;
    let scrapes = n.div_ceil(8);
    for s in 0..scrapes {
        let ts = t0 + s as i64 * 15_000;
        let used: Vec<i64> = (0..8).map(|g| 52_000 + g * 1000 + rng.noise(400)).collect();
        for (metric, help) in [
            ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
            ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
        ] {
            writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} gauge")?;
            for (g, u) in used.iter().enumerate() {
                if s * 8 + g as u64 >= n {
                    break;
                }
                let v = if metric.ends_with("FREE") {
                    total - u
                } else {
                    *u
                };
                writeln!(
                    out,
                    "{metric}{{gpu=\"{g}\",UUID=\"GPU-6a1f0c2e-0000-4000-8000-00000000000{g}\",device=\"nvidia{g}\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node-3\"}} {v} {ts}"
                )?;
            }
        }
    }
    Ok(())
}

fn inspect(args: &[String]) -> Result<(), String> {
    let quiet = args.iter().any(|a| a == "--quiet");
    let mut set = SeriesSet::default();
    let started = Instant::now();
    let mut bytes = 0u64;
    for path in args.iter().filter(|a| !a.starts_with("--")) {
        let file = File::open(path).map_err(|e| format!("{path}: {e}"))?;
        bytes += file.metadata().map(|m| m.len()).unwrap_or(0);
        let mut reader = BufReader::with_capacity(1 << 20, file);
        let head = reader.fill_buf().map_err(|e| e.to_string())?;
        let Some(format) = series::sniff(&head[..head.len().min(64 << 10)]) else {
            return Err(format!("{path}: not a memory series"));
        };
        let name: InputName = Arc::from(path.rsplit('/').next().unwrap_or(path));
        let one = series::read(reader.by_ref(), &name, format)
            .map_err(|e| format!("{:?}", miette::Report::new(e)))?;
        set.merge(one);
    }
    let parsed = started.elapsed();
    let analysis = series::analyze(&set);
    let analysed = started.elapsed() - parsed;
    let samples = set.samples();
    println!(
        "read {samples} samples ({:.1} MB) in {:.3} s ({:.1} M samples/s, {:.0} MB/s); analysed in {:.3} s; sample storage {:.1} MB ({:.1} bytes/sample)",
        bytes as f64 / 1e6,
        parsed.as_secs_f64(),
        samples as f64 / parsed.as_secs_f64() / 1e6,
        bytes as f64 / parsed.as_secs_f64() / 1e6,
        analysed.as_secs_f64(),
        set.heap_bytes() as f64 / 1e6,
        set.heap_bytes() as f64 / samples.max(1) as f64,
    );
    if quiet {
        return Ok(());
    }
    for i in &set.inputs {
        println!(
            "{}: {} ({} rows, {} samples, {} skipped, {} missing) {:?}",
            i.input, i.format, i.rows, i.samples, i.skipped, i.missing, i.notes
        );
    }
    for p in analysis.patterns() {
        println!("  {}", p.describe());
    }
    for f in analysis.failures() {
        println!(
            "series failure: gpu {} at {:?}",
            f.device,
            f.time.map(|t| t.to_rfc3339())
        );
    }
    for d in analysis.devices() {
        println!("\ngpu {d}:\n{}", analysis.chart(d, 72, 5, None));
        let facts = analysis.facts_for(Some(d), None);
        for (name, fact) in facts.iter() {
            let src = fact.sources.first().map(|s| s.short()).unwrap_or_default();
            println!(
                "  {name} = {} [{src}]",
                facts.display(name).unwrap_or_default()
            );
        }
    }
    if analysis.devices().is_empty() {
        let facts = analysis.facts_for(None, None);
        for (name, fact) in facts.iter() {
            let src = fact.sources.first().map(|s| s.short()).unwrap_or_default();
            println!(
                "  {name} = {} [{src}]",
                facts.display(name).unwrap_or_default()
            );
        }
    }
    Ok(())
}
