//! Times the log scan's gate ([`oomdoctor::ingest::log::gate`]) alone over a log's first
//! 256 MiB held in memory: 1 GiB searched as a 1 MiB piece again and again (in a core's
//! cache: what the search itself costs) and as 256 MiB four times (from memory: what the
//! memory bus allows).
//!
//! ```text
//! head -c 300000000 /tmp/oomdoctor-scan-1GiB.log >/tmp/probe.log
//! cargo run --release --example gate_throughput -- /tmp/probe.log
//! ```

use std::time::Instant;
fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: gate_throughput <log of 256 MiB or more>");
        std::process::exit(2);
    };
    let data = std::fs::read(&path).expect("readable log");
    assert!(data.len() >= 256 << 20, "{path}: under 256 MiB");
    let g = oomdoctor::ingest::log::engines::gate();
    for size in [1usize << 20, 256 << 20] {
        let hay = &data[..size];
        let reps = (1usize << 30) / size;
        let mut out = Vec::new();
        let mut marks = Vec::new();
        let t = Instant::now();
        let mut n = 0;
        for _ in 0..reps {
            out.clear();
            g.hit_lines(hay, &mut out, &mut marks);
            n += out.len();
        }
        let s = t.elapsed().as_secs_f64();
        println!(
            "chunk {} MiB x{reps}: {:.3} s for 1 GiB ({:.1} GB/s), {} hits",
            size >> 20,
            s,
            1.073741824 / s,
            n
        );
    }
}
