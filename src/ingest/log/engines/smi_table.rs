//! `nvidia-smi`'s process table pasted into a log: which processes held memory on each GPU
//! around the failure.
//!
//! People paste it right under the error ("nvidia-smi shows:"). Two processes listed on one
//! GPU are two CUDA contexts sharing its memory: another job, a notebook kernel, or a rank
//! that created a context on the wrong device. Shapes, before and after the 450 driver's
//! `GI ID`/`CI ID` columns:
//!
//! ```text
//! |    0     32317      C   python                                      7773MiB |
//! |    0   N/A  N/A     32317      C   python                            7773MiB |
//! ```

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;

use super::local::walk_forward;
use super::{Emit, Line, Recognizer, id};
use crate::ingest::log::clean::clean_line;

static ROW: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\|\s+(?P<gpu>\d+)\s+(?:(?:N/A|\d+)\s+(?:N/A|\d+)\s+)?(?P<pid>\d+)\s+(?:C\+G|C|G|M)\s+\S.*?\s(?P<mib>\d+)\s?MiB\s*\|\s*$")
        .expect("static regex")
});

/// Reads the table under a `Processes:` header.
pub struct SmiTable;

impl Recognizer for SmiTable {
    fn engine(&self) -> &'static str {
        id::UNKNOWN
    }

    fn anchors(&self) -> &'static [&'static str] {
        &["| Processes:", "|  Processes:"]
    }

    fn recognize(&self, line: &Line<'_>, out: &mut Emit) {
        // GPU index -> (processes, MiB of each).
        let mut gpus: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
        let mut misses = 0;
        walk_forward(line, 72, |raw| {
            // The rows carry the same prefixes as the title line when a tool or a rank
            // prefix printed the whole table (`[rank0]: |    0  ...`, `svc-1  | |    0  ...`).
            let cleaned = clean_line(raw.as_bytes());
            let t = cleaned.text.trim();
            match ROW.captures(t) {
                Some(c) => {
                    if let (Ok(g), Ok(m)) = (c["gpu"].parse::<u32>(), c["mib"].parse::<f64>()) {
                        gpus.entry(g).or_default().push(m * 1048576.0);
                    }
                    misses = 0;
                    true
                }
                // Header and ruler lines sit between the title and the rows.
                None => {
                    misses += 1;
                    misses <= 4 && (t.starts_with('|') || t.starts_with('+') || t.is_empty())
                }
            }
        });
        let Some((gpu, procs)) = gpus
            .iter()
            .max_by(|a, b| a.1.len().cmp(&b.1.len()).then(b.0.cmp(a.0)))
        else {
            return;
        };
        let total: f64 = procs.iter().sum();
        let largest = procs.iter().copied().fold(0.0, f64::max);
        out.fact("smi.busiest_gpu", *gpu, None);
        out.fact("smi.busiest_gpu_processes", procs.len() as u32, None);
        out.fact("smi.busiest_gpu_bytes", total, None);
        out.fact("smi.busiest_gpu_second_bytes", total - largest, None);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::facts::evidence::InputName;
    use crate::ingest::log::grouping::analyze_log;

    #[test]
    fn two_processes_on_one_gpu() {
        for table in [
            "|  GPU       PID   Type   Process name                     Usage      |\n|===========================================|\n|    0     32317      C   python                                      7773MiB |\n|    0     34873      C   python                                       217MiB |\n|    1     40001      C   python                                      9001MiB |\n+-------------------------------------------+\n",
            "|  GPU   GI   CI        PID   Type   Process name                  GPU Memory |\n|        ID   ID                                                   Usage      |\n|=============================================================================|\n|    0   N/A  N/A     32317      C   python                           7773MiB |\n|    0   N/A  N/A     34873      C   python                            217MiB |\n+-----------------------------------------------------------------------------+\n",
        ] {
            let log = format!(
                "RuntimeError: CUDA error: out of memory\n+-----------------+\n| Processes:                                                       GPU Memory |\n{table}"
            );
            let input: InputName = Arc::from("t.log");
            let ev = analyze_log(&mut log.as_bytes(), &input).unwrap().0;
            assert_eq!(ev.incidents.len(), 1, "{log}");
            let f = &ev.incidents[0].facts;
            assert_eq!(f.num("smi.busiest_gpu"), Some(0.0));
            assert_eq!(f.num("smi.busiest_gpu_processes"), Some(2.0));
            assert_eq!(
                f.num("smi.busiest_gpu_second_bytes"),
                Some(217.0 * 1048576.0)
            );
        }
    }

    /// The table printed through a per-line prefix (a rank tag, a CI timestamp, compose's
    /// service column) reads as the bare table does.
    #[test]
    fn prefixed_rows() {
        let rows = [
            "RuntimeError: CUDA error: out of memory",
            "+-----------------------------------------------------------------------------+",
            "| Processes:                                                       GPU Memory |",
            "|  GPU       PID   Type   Process name                             Usage      |",
            "|=============================================================================|",
            "|    1     51200      C   /opt/conda/bin/python                       10240MiB |",
            "|    1     51377      C   jupyter-lab                                  5120MiB |",
            "+-----------------------------------------------------------------------------+",
        ];
        for prefix in [
            "[rank1]: ",
            "2025-09-14T08:01:02.5550123Z ",
            "trainer-1  | ",
            "(RayWorkerWrapper pid=8812) ",
        ] {
            let log: String = rows.iter().map(|r| format!("{prefix}{r}\n")).collect();
            let input: InputName = Arc::from("t.log");
            let ev = analyze_log(&mut log.as_bytes(), &input).unwrap().0;
            assert_eq!(ev.incidents.len(), 1, "{log}");
            let f = &ev.incidents[0].facts;
            assert_eq!(f.num("smi.busiest_gpu"), Some(1.0), "{prefix}");
            assert_eq!(f.num("smi.busiest_gpu_processes"), Some(2.0), "{prefix}");
            assert_eq!(
                f.num("smi.busiest_gpu_second_bytes"),
                Some(5120.0 * 1048576.0),
                "{prefix}"
            );
        }
    }
}
