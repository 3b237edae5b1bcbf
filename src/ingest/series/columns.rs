//! What a column header or JSON key means: time, used/total/free memory (and in which unit),
//! device, process, engine metric.
//!
//! Plain CSV and JSON Lines come from users' own scripts, so names vary (`timestamp`,
//! `ts`, `time_ms`; `used`, `used_bytes`, `memory_used_mib`, `mem_used_gb`, `vram`). Names
//! are normalised (lower case, `[MiB]` → `_mib`, punctuation → `_`) and read by their
//! words, so `memory.used [MiB]` and `memory_used_mib` mean the same.
//!
//! Memory columns without a unit in the name are decided from their values by the caller
//! ([`infer_scale`]); `GB` is read as GiB, as the ML tools that print it compute it.

use super::time::EpochUnit;

/// The unit of a memory column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scale {
    Bytes,
    KiB,
    MiB,
    GiB,
    /// Not in the name: decided from the values.
    Auto,
}

impl Scale {
    pub(crate) fn factor(self) -> f64 {
        match self {
            Scale::Bytes | Scale::Auto => 1.0,
            Scale::KiB => 1024.0,
            Scale::MiB => 1024.0 * 1024.0,
            Scale::GiB => 1024.0 * 1024.0 * 1024.0,
        }
    }
    pub(crate) fn name(self) -> &'static str {
        match self {
            Scale::Bytes | Scale::Auto => "bytes",
            Scale::KiB => "KiB",
            Scale::MiB => "MiB",
            Scale::GiB => "GiB",
        }
    }
}

/// What a column holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Col {
    Time(EpochUnit),
    Used(Scale),
    Total(Scale),
    Free(Scale),
    Device,
    Uuid,
    Pid,
    ProcessName,
    DeviceName,
    KvUsage,
    Running,
    Waiting,
    Preemptions,
    Other,
}

/// Normalises a header: `memory.used [MiB]` → `memory_used_mib`.
pub(crate) fn normalise(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.trim().chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if c == '%' {
            out.push_str("_percent_");
        } else if !out.ends_with('_') && !out.is_empty() {
            out.push('_');
        }
    }
    while out.ends_with('_') {
        out.pop();
    }
    out
}

/// Classifies a column name. `has_pid`: the table also has a pid column (so `name` is the
/// process name, not the GPU's).
pub(crate) fn classify(name: &str, has_pid: bool) -> Col {
    let n = normalise(name);
    let words: Vec<&str> = n.split('_').filter(|w| !w.is_empty()).collect();
    let has = |w: &str| words.contains(&w);
    let any = |ws: &[&str]| ws.iter().any(|w| words.contains(w));
    let last = words.last().copied().unwrap_or("");

    if any(&["kv"])
        || (has("cache") && any(&["usage", "perc", "percent", "used"]))
        || n == "token_usage"
    {
        return Col::KvUsage;
    }
    if words
        .iter()
        .any(|w| w.starts_with("preempt") || w.starts_with("retract"))
    {
        return Col::Preemptions;
    }
    if has("running") {
        return Col::Running;
    }
    if any(&["waiting", "pending", "queue", "queued"]) {
        return Col::Waiting;
    }
    if any(&[
        "util",
        "utilization",
        "percent",
        "pct",
        "ratio",
        "fraction",
        "temperature",
        "power",
        "clock",
    ]) {
        return Col::Other;
    }
    if any(&["uuid"]) {
        return Col::Uuid;
    }
    if n == "pid" || n == "process_id" {
        return Col::Pid;
    }
    if matches!(
        n.as_str(),
        "process_name" | "process" | "command" | "comm" | "cmd" | "cmdline"
    ) || (has_pid && n == "name")
    {
        return Col::ProcessName;
    }
    if matches!(
        n.as_str(),
        "name" | "gpu_name" | "device_name" | "model_name" | "modelname"
    ) {
        return Col::DeviceName;
    }
    if matches!(
        n.as_str(),
        "gpu"
            | "device"
            | "index"
            | "gpu_index"
            | "device_index"
            | "dev"
            | "gpu_id"
            | "device_id"
            | "cuda_device"
            | "minor_number"
    ) {
        return Col::Device;
    }
    let memory_word = any(&[
        "memory",
        "mem",
        "vram",
        "fb",
        "gpu_memory",
        "bytes",
        "mib",
        "mb",
        "gib",
        "gb",
    ]);
    let time_word = any(&[
        "timestamp",
        "time",
        "ts",
        "date",
        "datetime",
        "epoch",
        "elapsed",
        "unixtime",
    ]) || n == "t";
    if time_word && !any(&["used", "usage", "free", "total"]) {
        let unit = match last {
            "ms" | "millis" | "milliseconds" => EpochUnit::Millis,
            "us" | "micros" | "microseconds" => EpochUnit::Micros,
            "ns" | "nanos" | "nanoseconds" => EpochUnit::Nanos,
            "s" | "sec" | "secs" | "seconds" => EpochUnit::Seconds,
            _ => EpochUnit::Auto,
        };
        return Col::Time(unit);
    }
    let scale = match last {
        "bytes" | "b" | "byte" => Scale::Bytes,
        "kb" | "kib" | "kibibytes" => Scale::KiB,
        "mb" | "mib" | "mebibytes" => Scale::MiB,
        "gb" | "gib" | "gibibytes" => Scale::GiB,
        _ => Scale::Auto,
    };
    if any(&["free", "available", "avail"]) && (memory_word || words.len() <= 2) {
        return Col::Free(scale);
    }
    if any(&["total", "capacity", "limit"]) && (memory_word || words.len() <= 2) {
        return Col::Total(scale);
    }
    if any(&["used", "usage", "allocated"]) || (memory_word && words.len() <= 3) {
        return Col::Used(scale);
    }
    Col::Other
}

/// A memory value from a cell: a number, or a number with its unit (`23342 MiB`, `22.8GiB`).
/// Returns the value and whether the cell carried its own unit (then it is in bytes).
pub(crate) fn memory_value(cell: &str) -> Option<(f64, bool)> {
    let c = cell.trim();
    if let Ok(v) = c.parse::<f64>() {
        return v.is_finite().then_some((v, false));
    }
    crate::facts::units::parse_size(c, crate::facts::units::SiBase::Binary)
        .map(|b| (b as f64, true))
}

/// Whether a cell is nvidia-smi's (or a script's) way of saying "no value".
pub(crate) fn is_missing(cell: &[u8]) -> bool {
    let c = super::time::trim(cell);
    c.is_empty()
        || c.eq_ignore_ascii_case(b"[N/A]")
        || c.eq_ignore_ascii_case(b"N/A")
        || c.eq_ignore_ascii_case(b"[Not Supported]")
        || c.eq_ignore_ascii_case(b"null")
        || c.eq_ignore_ascii_case(b"none")
        || c.eq_ignore_ascii_case(b"nan")
        || c == b"-"
}

/// The unit of a memory column without one in its name, from its largest value: fractional
/// values below 4096 are GiB (`22.8`), values below 16 Mi are MiB (nvidia-smi `nounits`), and
/// larger ones bytes (no GPU has 16 TiB).
pub(crate) fn infer_scale(max: f64, fractional: bool) -> Scale {
    if fractional && max < 4096.0 {
        Scale::GiB
    } else if max < 16_777_216.0 {
        Scale::MiB
    } else {
        Scale::Bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_names_people_use() {
        assert_eq!(classify("timestamp", false), Col::Time(EpochUnit::Auto));
        assert_eq!(classify("ts", false), Col::Time(EpochUnit::Auto));
        assert_eq!(classify("time_ms", false), Col::Time(EpochUnit::Millis));
        assert_eq!(classify("t", false), Col::Time(EpochUnit::Auto));
        assert_eq!(classify("elapsed_s", false), Col::Time(EpochUnit::Seconds));
        assert_eq!(classify("used", false), Col::Used(Scale::Auto));
        assert_eq!(classify("used_bytes", false), Col::Used(Scale::Bytes));
        assert_eq!(classify("memory.used [MiB]", false), Col::Used(Scale::MiB));
        assert_eq!(classify("memory_used_mib", false), Col::Used(Scale::MiB));
        assert_eq!(classify("mem_used_gb", false), Col::Used(Scale::GiB));
        assert_eq!(classify("vram", false), Col::Used(Scale::Auto));
        assert_eq!(
            classify("used_gpu_memory [MiB]", true),
            Col::Used(Scale::MiB)
        );
        assert_eq!(classify("total_bytes", false), Col::Total(Scale::Bytes));
        assert_eq!(
            classify("memory.total [MiB]", false),
            Col::Total(Scale::MiB)
        );
        assert_eq!(classify("free", false), Col::Free(Scale::Auto));
        assert_eq!(classify("memory_free_mib", false), Col::Free(Scale::MiB));
        assert_eq!(classify("utilization.memory [%]", false), Col::Other);
        assert_eq!(classify("memory_used_percent", false), Col::Other);
        assert_eq!(classify("gpu", false), Col::Device);
        assert_eq!(classify("index", false), Col::Device);
        assert_eq!(classify("gpu_uuid", true), Col::Uuid);
        assert_eq!(classify("pid", true), Col::Pid);
        assert_eq!(classify("name", true), Col::ProcessName);
        assert_eq!(classify("name", false), Col::DeviceName);
        assert_eq!(classify("kv_cache_usage", false), Col::KvUsage);
        assert_eq!(classify("gpu_cache_usage_perc", false), Col::KvUsage);
        assert_eq!(classify("num_requests_running", false), Col::Running);
        assert_eq!(classify("num_requests_waiting", false), Col::Waiting);
        assert_eq!(classify("num_preemptions_total", false), Col::Preemptions);
        assert_eq!(classify("loss", false), Col::Other);
        assert_eq!(classify("step", false), Col::Other);
    }

    #[test]
    fn memory_cells_with_and_without_units() {
        assert_eq!(memory_value("23342"), Some((23342.0, false)));
        assert_eq!(memory_value("23342 MiB"), Some((23342.0 * 1048576.0, true)));
        assert_eq!(memory_value("1.5GiB"), Some((1.5 * 1073741824.0, true)));
        assert_eq!(memory_value("lots"), None);
        assert!(is_missing(b" [N/A] "));
        assert!(is_missing(b"[Not Supported]"));
        assert!(!is_missing(b"0"));
    }

    #[test]
    fn unit_inference_from_values() {
        assert_eq!(infer_scale(22.8, true), Scale::GiB);
        assert_eq!(infer_scale(81920.0, false), Scale::MiB);
        assert_eq!(infer_scale(2.4e10, false), Scale::Bytes);
    }
}
