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
//!
//! Also its query form, run before a launch to show the device is busy
//! (`nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv[,noheader]`): the fields
//! come from the command line, the rows follow it. One GPU's row is read as that device's
//! use and size; a query printed before the engine starts is memory someone else held (see
//! `grouping`, which keeps it across the start).

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;

use super::local::walk_forward;
use super::{Emit, Line, Recognizer, id};
use crate::ingest::log::clean::clean_line;
use crate::ingest::log::pattern::static_regex;

/// `--query-gpu=name,memory.used,memory.total` (also `--query-gpu name,...`).
static QUERY: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"nvidia-smi\b.*--query-gpu[=\s]\s*(?P<fields>[\w.,]+)"));
/// `--query-compute-apps=pid,process_name,used_memory`: the processes holding device memory.
static QUERY_APPS: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"nvidia-smi\b.*--query-compute-apps[=\s]\s*(?P<fields>[\w.,]+)")
});
/// A value of the CSV output: `3578 MiB`, `8188 MiB`, or bare with `nounits`.
static MIB_VALUE: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"^(?P<n>\d+(?:\.\d+)?)(?:\s*MiB)?$"));
/// A device row's memory cell: `|    9439MiB /  46068MiB |`.
static USAGE_CELL: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"\|\s*(?P<used>\d+)\s?MiB\s*/\s*(?P<total>\d+)\s?MiB\s*\|"));
static ROW: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"^\|\s+(?P<gpu>\d+)\s+(?:(?:N/A|\d+)\s+(?:N/A|\d+)\s+)?(?P<pid>\d+)\s+(?:C\+G|C|G|M)\s+\S.*?\s(?P<mib>\d+)\s?MiB\s*\|\s*$",
    )
});

/// Reads the table under a `Processes:` header.
pub struct SmiTable;

impl Recognizer for SmiTable {
    fn engine(&self) -> &'static str {
        id::UNKNOWN
    }

    fn anchors(&self) -> &'static [&'static str] {
        &[
            "| Processes:",
            "|  Processes:",
            "--query-gpu",
            "--query-compute-apps",
            "Memory-Usage",
        ]
    }

    fn recognize(&self, line: &Line<'_>, out: &mut Emit) {
        if let Some(c) = QUERY.captures(line.text) {
            query_rows(line, &c["fields"], out);
            query_series(line, &c["fields"], out);
            return;
        }
        if let Some(c) = QUERY_APPS.captures(line.text) {
            app_rows(line, &c["fields"], out);
            return;
        }
        if line.text.contains("Memory-Usage") {
            device_rows(line, out);
            return;
        }
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

/// The table's device rows under its `Memory-Usage` header: with one GPU listed, its
/// `9439MiB /  46068MiB` cell is that device's use and size, as a one-row query's would be
/// (several GPUs say nothing about the one used). The rows end at the process table.
fn device_rows(line: &Line<'_>, out: &mut Emit) {
    let mut cells: Vec<(f64, f64)> = Vec::new();
    walk_forward(line, 40, |raw| {
        let cleaned = clean_line(raw.as_bytes());
        let t = cleaned.text.trim();
        if !(t.starts_with('|') || t.starts_with('+')) || t.contains("Processes:") {
            return false;
        }
        if let Some(c) = USAGE_CELL.captures(t)
            && let (Ok(used), Ok(total)) = (c["used"].parse::<f64>(), c["total"].parse::<f64>())
        {
            cells.push((used * 1048576.0, total * 1048576.0));
        }
        true
    });
    if !cells.is_empty() {
        out.fact("smi.query_gpus", cells.len() as u32, None);
    }
    if let [(used, total)] = cells[..] {
        out.fact("smi.query_used_bytes", used, None);
        out.fact("smi.query_total_bytes", total, None);
    }
}

/// A memory cell of the CSV output in bytes (`8188 MiB`, or bare MiB with `nounits`).
fn mib_cell(cell: &str) -> Option<f64> {
    MIB_VALUE
        .captures(cell)
        .and_then(|c| c["n"].parse::<f64>().ok())
        .map(|m| m * 1048576.0)
}

/// The rows of a one-shot query's CSV output under its command, `fields` its `--query-...=`
/// list: as many cells as fields, the header (whose memory cells name their field,
/// `memory.used [MiB]`) only first, and each memory cell (`memory_at`) a number. The rows
/// end at the first line that is none of these, though it may have as many commas (the
/// next command, `--query-compute-apps=pid,process_name,used_memory`, and its header; a note
/// like `(works, ~8 tok/s)`).
fn query_csv_rows(line: &Line<'_>, fields: &[&str], memory_at: &[usize]) -> Vec<Vec<String>> {
    let mut rows: Vec<Vec<String>> = Vec::new();
    walk_forward(line, 12, |raw| {
        let cleaned = clean_line(raw.as_bytes());
        let cells: Vec<String> = cleaned
            .text
            .split(',')
            .map(|c| c.trim().to_string())
            .collect();
        if cells.len() != fields.len() {
            return false;
        }
        if memory_at.iter().any(|&i| cells[i].starts_with(fields[i])) {
            return rows.is_empty();
        }
        if !memory_at.iter().all(|&i| MIB_VALUE.is_match(&cells[i])) {
            return false;
        }
        rows.push(cells);
        true
    });
    rows
}

/// The rows under a `--query-compute-apps` command: where one process is listed, its
/// `used_memory` is what the device held, short of what the driver keeps (run before a
/// launch, someone else's memory where no `--query-gpu` row says it: see `grouping`).
/// Several processes may be on several GPUs: nothing is read from them.
fn app_rows(line: &Line<'_>, fields: &str, out: &mut Emit) {
    let fields: Vec<&str> = fields.split(',').map(str::trim).collect();
    let Some(used_at) = fields.iter().position(|f| *f == "used_memory") else {
        return;
    };
    if let [row] = &query_csv_rows(line, &fields, &[used_at])[..] {
        if let Some(used) = mib_cell(&row[used_at]) {
            out.fact("smi.apps_used_bytes", used, None);
        }
    }
}

/// The rows under a `--query-gpu` command: with one GPU's row, its `memory.used` and
/// `memory.total` (MiB). Several rows say nothing about which GPU the engine used.
fn query_rows(line: &Line<'_>, fields: &str, out: &mut Emit) {
    let fields: Vec<&str> = fields.split(',').map(str::trim).collect();
    let used_at = fields.iter().position(|f| *f == "memory.used");
    let total_at = fields.iter().position(|f| *f == "memory.total");
    let memory_at: Vec<usize> = used_at.into_iter().chain(total_at).collect();
    if memory_at.is_empty() {
        return;
    }
    let rows = query_csv_rows(line, &fields, &memory_at);
    let mib = |row: &[String], at: Option<usize>| at.and_then(|i| mib_cell(&row[i]));
    if !rows.is_empty() {
        out.fact("smi.query_gpus", rows.len() as u32, None);
    }
    if let [row] = &rows[..] {
        if let Some(b) = mib(row, used_at) {
            out.fact("smi.query_used_bytes", b, None);
        }
    }
    // Several GPUs of one model (a node's eight A100s) have one size: that is the device's,
    // whichever the failure was on. Their use differs, and says nothing of one GPU.
    let totals: Vec<Option<f64>> = rows.iter().map(|r| mib(r, total_at)).collect();
    if let Some(&Some(b)) = totals.first() {
        if totals.iter().all(|t| *t == Some(b)) {
            out.fact("smi.query_total_bytes", b, None);
        }
    }
}

/// Lines a polling loop's readings are looked for after its command (`while true; do date;
/// nvidia-smi --query-gpu=... --format=csv,noheader; sleep 300; done`), and the run of lines
/// without a reading that ends them.
const SERIES_LINES: usize = 600;
const SERIES_GAP: usize = 80;

/// A polling loop's readings: the query command printed once, then a group of rows (one per
/// GPU) each time it polled: after a timestamp the loop echoes, or told apart by the rows' own
/// `timestamp` field or a GPU `index` that comes round again (`nvidia-smi -l 60`). Three
/// groups or more are memory the run logged over time: each group's largest `memory.used` is
/// one reading (the GPU the job fills). The readings stop at an error or a traceback: what
/// the loop printed after a crash is not the run's memory.
fn query_series(line: &Line<'_>, fields: &str, out: &mut Emit) {
    let fields: Vec<&str> = fields.split(',').map(str::trim).collect();
    let Some(used_at) = fields.iter().position(|f| *f == "memory.used") else {
        return;
    };
    let index_at = fields.iter().position(|f| *f == "index");
    let time_at = fields.iter().position(|f| *f == "timestamp");
    let mut groups: Vec<f64> = Vec::new();
    // The open group: its largest reading, its timestamp, the GPU indices in it.
    let mut open: Option<(f64, String, Vec<String>)> = None;
    let mut gap = 0;
    walk_forward(line, SERIES_LINES, |raw| {
        let cleaned = clean_line(raw.as_bytes());
        let t = cleaned.text.trim();
        let cells: Vec<&str> = t.split(',').map(str::trim).collect();
        let used = (cells.len() == fields.len())
            .then(|| MIB_VALUE.captures(cells[used_at]))
            .flatten()
            .and_then(|c| c["n"].parse::<f64>().ok());
        if let Some(mib) = used {
            // A loop that echoes the time before the rows (`echo "$(date +%T) $(nvidia-smi
            // ...)"`) glues it to the first cell: `14:40:20  0, 80341 MiB, 97871 MiB`.
            let (glued, first) = match cells[0].rsplit_once(char::is_whitespace) {
                Some((time, rest)) if !rest.is_empty() => (time.trim(), rest),
                _ => ("", cells[0]),
            };
            let cell = |i: usize| if i == 0 { first } else { cells[i] };
            let time = time_at.map_or(glued, cell).to_string();
            let index = index_at.map_or("", cell).to_string();
            let polled_again = open.as_ref().is_some_and(|(_, t0, seen)| {
                *t0 != time || (index_at.is_some() && seen.contains(&index))
            });
            if polled_again {
                if let Some((m, ..)) = open.take() {
                    groups.push(m * 1048576.0);
                }
            }
            let group = open.get_or_insert_with(|| (mib, time, Vec::new()));
            group.0 = group.0.max(mib);
            group.2.push(index);
            gap = 0;
            return true;
        }
        if let Some((m, ..)) = open.take() {
            groups.push(m * 1048576.0);
        }
        // The next query command reads its own rows: the walks never overlap, so a log that
        // repeats the command (a shell's `set -x`) costs one pass, and no poll is read twice.
        if t.contains("--query-gpu") {
            return false;
        }
        if t.contains("Traceback")
            || t.contains("Error")
            || t.contains("error")
            || t.contains("out of memory")
            || t.contains("Killed")
        {
            return false;
        }
        gap += 1;
        gap <= SERIES_GAP
    });
    if let Some((m, ..)) = open {
        groups.push(m * 1048576.0);
    }
    if groups.len() < 3 {
        return;
    }
    // Readings that fell to nothing after the highest: the process the loop watched ended
    // there (a crash frees its memory at once). What came before is the run up to its end.
    // (The last reading above that share is at or after the highest, so what is cut is
    // always after it.)
    let max = groups.iter().copied().fold(0.0, f64::max);
    let alive = groups
        .iter()
        .rposition(|&b| b >= EXITED_SHARE * max)
        .map_or(0, |i| i + 1);
    if alive < groups.len() && alive >= 3 {
        groups.truncate(alive);
        out.polled_memory_to_exit(groups);
        return;
    }
    for bytes in groups {
        out.memory_sample(bytes, None);
    }
}

/// A reading below this share of the series' highest, after it, is the device with the
/// watched process gone (the CUDA context alone is a few hundred MiB).
const EXITED_SHARE: f64 = 0.05;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::facts::evidence::InputName;
    use crate::ingest::log::grouping::analyze_log;

    /// A polling loop's readings before the failure: one reading a poll (the fullest GPU),
    /// told apart by the timestamps the loop echoes, a `timestamp` field, or an index that
    /// comes round again; two polls are not a series, and what follows the error is not read
    /// unless its readings end where the process did.
    #[test]
    fn a_polling_loops_readings_are_memory_over_time() {
        const OOM: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 39.39 GiB of which 3.06 MiB is free.";
        let samples = |log: &str| {
            let input: InputName = Arc::from("t.log");
            let ev = analyze_log(&mut log.as_bytes(), &input).unwrap().0;
            let f = &ev.incidents[0].facts;
            (f.num("log.memory_samples"), f.num("log.memory_last_bytes"))
        };
        let echoed = "$ while true; do date; nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader; sleep 300; done\n[05:03:01]\n0, 8541 MiB, 40960 MiB\n1, 8539 MiB, 40960 MiB\nINFO served 10 requests\n[05:08:01]\n0, 15874 MiB, 40960 MiB\n1, 15990 MiB, 40960 MiB\n[05:13:01]\n0, 22306 MiB, 40960 MiB\n1, 22011 MiB, 40960 MiB\n";
        assert_eq!(
            samples(&format!("{echoed}{OOM}\n")),
            (Some(3.0), Some(22306.0 * 1048576.0))
        );
        let looped = "$ nvidia-smi --query-gpu=timestamp,memory.used --format=csv -l 60\ntimestamp, memory.used [MiB]\n2024/05/01 10:00:00.101, 8541 MiB\n2024/05/01 10:01:00.102, 9120 MiB\n2024/05/01 10:02:00.104, 9733 MiB\n2024/05/01 10:03:00.101, 10301 MiB\n";
        assert_eq!(
            samples(&format!("{looped}{OOM}\n")),
            (Some(4.0), Some(10301.0 * 1048576.0))
        );
        let two = "$ nvidia-smi --query-gpu=index,memory.used --format=csv,noheader -l 5\n0, 8541 MiB\n1, 8539 MiB\n0, 9541 MiB\n1, 9539 MiB\n";
        assert_eq!(samples(&format!("{two}{OOM}\n")), (None, None));
        // A command echoed before every poll: each reads its own poll, none a series.
        let echoed_each =
            "+ nvidia-smi --query-gpu=index,memory.used --format=csv,noheader\n0, 8541 MiB\n"
                .repeat(2)
                + "+ nvidia-smi --query-gpu=index,memory.used --format=csv,noheader\n0, 9541 MiB\n";
        assert_eq!(samples(&format!("{echoed_each}{OOM}\n")), (None, None));
        // Polled after the crash: the error stops the readings.
        let after = format!("{OOM}\n{looped}");
        assert_eq!(samples(&after).0, None);
        // Pasted under the failure, but ending where the watched process did (its memory
        // gone at once): the readings before the fall are the failed run's.
        let to_exit = format!(
            "{OOM}\n\nmeanwhile in a second shell:\n{looped}2024/05/01 10:04:00.101, 0 MiB\n"
        );
        assert_eq!(samples(&to_exit), (Some(4.0), Some(10301.0 * 1048576.0)));
    }

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

    /// A query run before the launch: the device's use then is someone else's memory, kept
    /// across the engine's start; several GPUs' rows say nothing about the one used.
    #[test]
    fn query_before_the_start() {
        let input: InputName = Arc::from("t.log");
        for (query, used) in [
            (
                "$ nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader\nNVIDIA GeForce RTX 4060 Ti, 3578 MiB, 8188 MiB\n",
                Some(3578.0),
            ),
            (
                "$ nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv\nindex, memory.used [MiB], memory.total [MiB]\n0, 14352 MiB, 24564 MiB\n",
                Some(14352.0),
            ),
            (
                "$ nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader,nounits\n812, 81559\n",
                Some(812.0),
            ),
            (
                "$ nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader\n3578 MiB, 8188 MiB\n20100 MiB, 24564 MiB\n",
                None,
            ),
        ] {
            let log = format!(
                "{query}INFO 06-04 14:31:02 [__init__.py:244] Automatically detected platform cuda.\nINFO 06-04 14:31:05 [api_server.py:1289] vLLM API server version 0.9.0.1\nValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.\n"
            );
            let ev = analyze_log(&mut log.as_bytes(), &input).unwrap().0;
            assert_eq!(ev.incidents.len(), 1, "{log}");
            let f = &ev.incidents[0].facts;
            assert_eq!(
                f.num("smi.used_before_start_bytes"),
                used.map(|m| m * 1048576.0),
                "{log}"
            );
        }
    }

    /// Several GPUs of one size give the device's size; of different sizes, none; their
    /// use is one GPU's only where there is one row.
    #[test]
    fn query_rows_of_several_gpus_give_their_size() {
        let input: InputName = Arc::from("t.log");
        let total = |rows: &str| {
            let log = format!(
                "$ nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv\nindex, name, memory.used [MiB], memory.total [MiB]\n{rows}jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 31207864320 bytes.\n"
            );
            let ev = analyze_log(&mut log.as_bytes(), &input).unwrap().0;
            let f = &ev.incidents[0].facts;
            (
                f.num("smi.query_total_bytes"),
                f.num("smi.query_used_bytes"),
            )
        };
        assert_eq!(
            total(
                "0, Tesla V100-SXM2-32GB, 29581 MiB, 32768 MiB\n1, Tesla V100-SXM2-32GB, 29581 MiB, 32768 MiB\n"
            ),
            (Some(32768.0 * 1048576.0), None)
        );
        assert_eq!(
            total(
                "0, NVIDIA GeForce RTX 4090, 812 MiB, 24564 MiB\n1, NVIDIA GeForce RTX 3090, 4 MiB, 24576 MiB\n"
            ),
            (None, None)
        );
    }

    /// One process listed by `--query-compute-apps` before the launch is memory held before
    /// it; several say nothing of one GPU.
    #[test]
    fn compute_apps_before_the_start() {
        let log = |rows: &str| {
            format!(
                "$ nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv\npid, process_name, used_memory [MiB]\n{rows}INFO 04-21 15:12:20 llm_engine.py:72] Initializing an LLM engine with config: model='m', tokenizer='m'\nValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.\n"
            )
        };
        let ev = crate::ingest::log::grouping::analyze_text(&log(
            "65914, ray::ServeReplica:model1, 9634 MiB\n",
        ));
        assert_eq!(
            ev.incidents[0].facts.num("smi.used_before_start_bytes"),
            Some(9634.0 * 1048576.0)
        );
        let ev = crate::ingest::log::grouping::analyze_text(&log(
            "65914, python, 9634 MiB\n70012, python, 4100 MiB\n",
        ));
        assert_eq!(
            ev.incidents[0].facts.num("smi.used_before_start_bytes"),
            None
        );
    }

    /// The rows end where the next command starts, though it and its header have as many
    /// commas (`--query-compute-apps=pid,process_name,used_memory`).
    #[test]
    fn query_rows_end_at_the_next_command() {
        let log = "$ nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv\nindex, memory.used [MiB], memory.total [MiB]\n0, 24873 MiB, 81920 MiB\n$ nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv\npid, process_name, used_memory [MiB]\n2218731, python3, 24856 MiB\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.15 GiB of which 10.00 MiB is free.\n";
        let ev = crate::ingest::log::grouping::analyze_text(log);
        let f = &ev.incidents[0].facts;
        assert_eq!(f.num("smi.query_gpus"), Some(1.0));
        assert_eq!(f.num("smi.query_used_bytes"), Some(24873.0 * 1048576.0));
        assert_eq!(f.num("smi.query_total_bytes"), Some(81920.0 * 1048576.0));
    }

    /// The full table's device rows printed before the launch read as a one-row query.
    #[test]
    fn table_before_the_start() {
        let input: InputName = Arc::from("t.log");
        let table = |rows: &str| {
            format!(
                "$ nvidia-smi\n+-----------------------------------------------------------------------------------------+\n| NVIDIA-SMI 550.127.05             Driver Version: 550.127.05     CUDA Version: 12.4     |\n|-----------------------------------------+------------------------+----------------------+\n| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |\n| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |\n|=========================================+========================+======================|\n{rows}+-----------------------------------------+------------------------+----------------------+\n| Processes:                                                                              |\n|    0   N/A  N/A     21877      C   /usr/bin/python3                             9430MiB |\n+-----------------------------------------------------------------------------------------+\nINFO 03-05 13:46:23 api_server.py:912] vLLM API server version 0.7.3\nValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.\n"
            )
        };
        let gpu0 = "|   0  NVIDIA L40S                    On  |   00000000:00:1E.0 Off |                    0 |\n| N/A   34C    P0             81W /  350W |    9439MiB /  46068MiB |      0%      Default |\n";
        let gpu1 = "|   1  NVIDIA L40S                    On  |   00000000:00:1F.0 Off |                    0 |\n| N/A   31C    P8             22W /  350W |       4MiB /  46068MiB |      0%      Default |\n";
        let ev = analyze_log(&mut table(gpu0).as_bytes(), &input).unwrap().0;
        let f = &ev.incidents[0].facts;
        assert_eq!(
            f.num("smi.used_before_start_bytes"),
            Some(9439.0 * 1048576.0)
        );
        assert_eq!(f.num("smi.query_total_bytes"), Some(46068.0 * 1048576.0));
        let both = format!("{gpu0}{gpu1}");
        let ev = analyze_log(&mut table(&both).as_bytes(), &input).unwrap().0;
        assert_eq!(
            ev.incidents[0].facts.num("smi.used_before_start_bytes"),
            None
        );
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

    /// A loop that echoes the time on the same line as the rows: each line a poll.
    #[test]
    fn rows_with_the_time_glued_to_them_are_polls() {
        let input: InputName = Arc::from("t.log");
        let log = "$ while true; do echo \"$(date +%T) $(nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader)\"; sleep 900; done\n14:40:20  0, 80341 MiB, 97871 MiB\n14:55:20  0, 83907 MiB, 97871 MiB\n15:10:20  0, 88676 MiB, 97871 MiB\n15:25:20  0, 92240 MiB, 97871 MiB\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.74 GiB. GPU 0 has a total capacity of 95.08 GiB of which 1.21 GiB is free. Including non-PyTorch memory, this process has 93.86 GiB memory in use. Of the allocated memory 91.47 GiB is allocated by PyTorch, and 744.02 MiB is reserved by PyTorch but unallocated.\n";
        let ev = analyze_log(&mut log.as_bytes(), &input).unwrap().0;
        let f = &ev.incidents[0].facts;
        assert_eq!(f.num("log.memory_samples"), Some(4.0));
        assert_eq!(f.num("log.memory_first_bytes"), Some(80341.0 * 1048576.0));
    }
}
