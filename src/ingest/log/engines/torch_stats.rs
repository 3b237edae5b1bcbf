//! PyTorch's allocator statistics as a program prints them: `torch.cuda.memory_summary()`'s
//! table and `torch.cuda.memory_stats()`'s keys.
//!
//! People print these in the `except` block around an OOM, or paste them under the error
//! when asked in a thread. They count what the OOM message does not: the memory inside
//! segments in use that is free but split off (the summary's `Non-releasable memory`,
//! `inactive_split_bytes`), how many segments the allocator holds, and how often a
//! `cudaMalloc` failed and the cache was flushed to retry. Shapes (sizes as
//! `_format_size` prints them, `B`/`KiB`/`MiB`/`GiB`, `KB`/`MB`/`GB` before 1.6; counts as
//! `_format_count` does, `1234 K` past 750,000):
//!
//! ```text
//! |            CUDA OOMs: 1            |        cudaMalloc retries: 3         |
//! | Allocated memory      |  21452 MiB |  21877 MiB |   1234 GiB |   1213 GiB |
//! | GPU reserved memory   |  23408 MiB |  23408 MiB |  30000 MiB |   6592 MiB |
//! | Non-releasable memory |   1955 MiB |   2301 MiB |    880 GiB |    878 GiB |
//! | GPU reserved segments |     412    |     415    |     530    |     118    |
//! 'inactive_split_bytes.all.current': 2050843136, 'num_alloc_retries': 3,
//! inactive_split_bytes.all.current : 2,050,843,136
//! ```
//!
//! Only the current value (the first column, the `.all.current` key) is read, and only the
//! totals (`all`, not the large or small pool's share). What the figures mean for a cause is
//! the rules' business (`rules/decision/findings.toml`); filling in the OOM message's own
//! figures where it lacks them is `facts::derive`'s.

use std::sync::LazyLock;

use regex::Regex;

use super::local::{size_bin, span};
use super::{Emit, Line, Recognizer, id};
use crate::facts::units::parse_number;
use crate::ingest::log::pattern::static_regex;

/// A summary row's name and its `Cur Usage` cell: a size or a count.
static SUMMARY_ROW: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"\|\s*(?P<row>Allocated memory|GPU reserved memory|Reserved memory|Non-releasable memory|GPU reserved segments)\s*\|\s*(?P<n>\d+)\s*(?P<unit>[KMGTP]?i?B|K|M)?\s*\|",
    )
});
/// The summary's header counters.
static SUMMARY_RETRIES: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"cudaMalloc retries:\s*(?P<n>\d+)"));
/// A `memory_stats()` key and its value, quoted or not, as a dict's repr, JSON or a table
/// the user printed (`key : 2,050,843,136`) shows it.
static STATS_KEY: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r#"(?P<key>\ballocated_bytes\.all\.current|\breserved_bytes\.all\.current|\binactive_split_bytes\.all\.current|\bsegment\.all\.current|\bnum_alloc_retries)['"]?\s*[:=,]\s*(?P<n>\d[\d,_]*)"#,
    )
});

/// The fact each row or key sets.
fn fact_of(name: &str) -> Option<&'static str> {
    Some(match name {
        "Allocated memory" | "allocated_bytes.all.current" => "torch.stats.allocated_bytes",
        "GPU reserved memory" | "Reserved memory" | "reserved_bytes.all.current" => {
            "torch.stats.reserved_bytes"
        }
        "Non-releasable memory" | "inactive_split_bytes.all.current" => {
            "torch.stats.inactive_split_bytes"
        }
        "GPU reserved segments" | "segment.all.current" => "torch.stats.segments",
        "num_alloc_retries" => "torch.stats.alloc_retries",
        _ => return None,
    })
}

/// Reads the allocator's statistics.
pub struct TorchStats;

impl Recognizer for TorchStats {
    fn engine(&self) -> &'static str {
        id::PYTORCH
    }

    fn anchors(&self) -> &'static [&'static str] {
        &[
            "| Allocated memory",
            "reserved memory",
            "| Non-releasable memory",
            "| GPU reserved segments",
            "cudaMalloc retries:",
            ".all.current",
            "num_alloc_retries",
        ]
    }

    fn recognize(&self, line: &Line<'_>, out: &mut Emit) {
        let text = line.text;
        if let Some(c) = SUMMARY_ROW.captures(text) {
            let Some(name) = fact_of(&c["row"]) else {
                return;
            };
            let n = c.name("n").expect("group n");
            let unit = c.name("unit").map_or("", |u| u.as_str());
            let value = if name == "torch.stats.segments" {
                let scale = match unit {
                    "K" => 1000,
                    "M" => 1_000_000,
                    "" => 1,
                    _ => return,
                };
                n.as_str().parse::<u64>().ok().map(|v| v * scale)
            } else if matches!(unit, "" | "K" | "M") {
                None
            } else {
                size_bin(n.as_str(), unit)
            };
            if let Some(v) = value {
                out.fact(name, v, span(&n));
            }
            return;
        }
        if let Some(c) = SUMMARY_RETRIES.captures(text) {
            let n = c.name("n").expect("group n");
            if let Ok(v) = n.as_str().parse::<u64>() {
                out.fact("torch.stats.alloc_retries", v, span(&n));
            }
        }
        for c in STATS_KEY.captures_iter(text) {
            let (Some(name), n) = (fact_of(&c["key"]), c.name("n").expect("group n")) else {
                continue;
            };
            let digits = n.as_str().trim_end_matches([',', '_']).replace('_', "");
            if let Some(v) = parse_number(&digits).filter(|v| v.is_finite() && *v >= 0.0) {
                out.fact(name, v as u64, Some((n.start(), n.start() + digits.len())));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::evidence::Value;

    fn facts(text: &str) -> Vec<(&'static str, Value)> {
        crate::ingest::log::engines::fact_records(crate::ingest::log::engines::run_line(
            &TorchStats,
            text,
        ))
    }

    #[test]
    fn the_summary_table_current_column() {
        assert_eq!(
            facts("| Non-releasable memory |   1955 MiB |   2301 MiB |    880 GiB |    878 GiB |"),
            vec![(
                "torch.stats.inactive_split_bytes",
                Value::Num(1955.0 * 1048576.0)
            )]
        );
        assert_eq!(
            facts(
                "[rank0]: | GPU reserved memory   | 235520 KiB | 235520 KiB | 235520 KiB |      0 B   |"
            ),
            vec![("torch.stats.reserved_bytes", Value::Num(235520.0 * 1024.0))]
        );
        // Before 1.6 the units were KB/MB/GB, powers of 1024 all the same.
        assert_eq!(
            facts("| Allocated memory      |   14935 MB |   15377 MB |     995 GB |     980 GB |"),
            vec![(
                "torch.stats.allocated_bytes",
                Value::Num(14935.0 * 1048576.0)
            )]
        );
        assert_eq!(
            facts("| GPU reserved segments |     412    |     415    |     530    |     118    |"),
            vec![("torch.stats.segments", Value::Num(412.0))]
        );
        assert_eq!(
            facts("|            CUDA OOMs: 1            |        cudaMalloc retries: 214        |"),
            vec![("torch.stats.alloc_retries", Value::Num(214.0))]
        );
        // The pools' shares and other rows are not the totals.
        assert!(
            facts("|       from large pool |   9335 MiB |  13730 MiB |  35584 GiB |  35575 GiB |")
                .is_empty()
        );
        assert!(
            facts("| Active memory         |   9341 MiB |  13736 MiB |  35624 GiB |  35615 GiB |")
                .is_empty()
        );
        // A size row whose cell has no unit is not a size.
        assert!(facts("| Allocated memory      |       21    |      23    |").is_empty());
    }

    #[test]
    fn memory_stats_keys_in_every_print() {
        let f = facts(
            "OrderedDict([('active.all.allocated', 1234), ('allocated_bytes.all.current', 22494519296), ('inactive_split_bytes.all.current', 2050843136), ('num_alloc_retries', 3), ('reserved_bytes.all.current', 24545918976), ('segment.all.current', 412)])",
        );
        assert_eq!(
            f,
            vec![
                ("torch.stats.allocated_bytes", Value::Num(22494519296.0)),
                ("torch.stats.inactive_split_bytes", Value::Num(2050843136.0)),
                ("torch.stats.alloc_retries", Value::Num(3.0)),
                ("torch.stats.reserved_bytes", Value::Num(24545918976.0)),
                ("torch.stats.segments", Value::Num(412.0)),
            ]
        );
        assert_eq!(
            facts("  inactive_split_bytes.all.current : 2,050,843,136"),
            vec![("torch.stats.inactive_split_bytes", Value::Num(2050843136.0))]
        );
        assert_eq!(
            facts(r#"  "reserved_bytes.all.current": 24545918976,"#),
            vec![("torch.stats.reserved_bytes", Value::Num(24545918976.0))]
        );
        // Peaks and the pools' keys are other numbers.
        assert!(
            facts(
                "'allocated_bytes.all.peak': 23000000000, 'allocated_bytes.large_pool.current': 1"
            )
            .is_empty()
        );
    }
}
