//! Plain CSV (with a header) and JSON Lines: a timestamp and used memory [+ total, free,
//! device, pid, engine metrics], as users' own monitoring scripts write them.
//!
//! Column names and JSON keys are read by [`super::columns`]. Memory columns whose name
//! gives no unit take one from their values, decided on the first 256 rows (a note records
//! it); cells with their own unit (`22.8 GiB`) are read as written. A row with a pid is a
//! process sample; otherwise a device sample (device 0 when no device column).

use std::collections::HashMap;
use std::io::BufRead;

use serde_json::Value;

use super::build::{Builder, DevRef, EngineMetric, Fields, Lines};
use super::columns::{Col, Scale, classify, infer_scale, is_missing, memory_value};
use super::error::SeriesError;
use super::model::SeriesSet;
use super::time::{Stamp, TimeParser, epoch_from_f64, trim};
use super::{SeriesFormat, limits};
use crate::facts::evidence::InputName;

/// Rows read before deciding the unit of memory columns without one.
const INFER_ROWS: usize = 256;

/// Used, total, free.
const USED: usize = 0;
const TOTAL: usize = 1;
const FREE: usize = 2;

/// One row, decoded but not yet scaled.
#[derive(Default, Debug)]
struct RawRow {
    line: u64,
    text: Vec<u8>,
    time: Option<Stamp>,
    /// Memory values and their unit: the column's, or `Bytes` when the cell had its own
    /// unit (`2 GiB`), or `Auto` when neither says.
    mem: [Option<(f64, Scale)>; 3],
    device: Option<DevKey>,
    pid: Option<u32>,
    process: Option<String>,
    device_name: Option<String>,
    engine: [Option<f64>; 4],
    /// Why the row cannot be used, if it cannot.
    bad: Option<&'static str>,
}

#[derive(Debug, Clone)]
enum DevKey {
    Index(u32),
    Name(String),
}

/// Decides units of unit-less memory columns and writes rows into the builder.
struct Sink {
    b: Builder,
    /// The unit inferred for each role's unit-less values.
    auto: [Scale; 3],
    buffered: Vec<RawRow>,
    decided: bool,
}

impl Sink {
    fn new(b: Builder) -> Self {
        Sink {
            b,
            auto: [Scale::Auto; 3],
            buffered: Vec::new(),
            decided: false,
        }
    }

    fn row(&mut self, row: RawRow) -> Result<(), SeriesError> {
        if self.decided {
            return self.emit(row);
        }
        self.buffered.push(row);
        if self.buffered.len() >= INFER_ROWS {
            self.decide()?;
        }
        Ok(())
    }

    /// Picks units for unit-less memory columns from the buffered rows, then emits them.
    fn decide(&mut self) -> Result<(), SeriesError> {
        self.decided = true;
        for role in [USED, TOTAL, FREE] {
            let vals: Vec<f64> = self
                .buffered
                .iter()
                .filter_map(|r| r.mem[role])
                .filter(|(_, s)| *s == Scale::Auto)
                .map(|(v, _)| v)
                .collect();
            if vals.is_empty() {
                continue;
            }
            let max = vals.iter().cloned().fold(0.0, f64::max);
            let fractional = vals.iter().any(|v| v.fract() != 0.0);
            let s = infer_scale(max, fractional);
            self.auto[role] = s;
            let what = ["used", "total", "free"][role];
            self.b.note(format!(
                "the {what} column has no unit: read as {} from its values",
                s.name()
            ));
        }
        for row in std::mem::take(&mut self.buffered) {
            self.emit(row)?;
        }
        Ok(())
    }

    fn bytes(&self, role: usize, v: Option<(f64, Scale)>) -> Option<f64> {
        let (v, scale) = v?;
        // Values seen only after the first rows, in a role never seen unit-less: MiB, the
        // unit of every GPU tool's unit-less memory column.
        let scale = match (scale, self.auto[role]) {
            (Scale::Auto, Scale::Auto) => Scale::MiB,
            (Scale::Auto, inferred) => inferred,
            (named, _) => named,
        };
        let b = v * scale.factor();
        (b.is_finite() && b >= 0.0).then_some(b)
    }

    fn emit(&mut self, row: RawRow) -> Result<(), SeriesError> {
        self.b.rows += 1;
        if let Some(reason) = row.bad {
            self.b.skip(row.line, &row.text, reason);
            return Ok(());
        }
        let Some(stamp) = row.time else {
            self.b.skip(row.line, &row.text, "no timestamp");
            return Ok(());
        };
        let Some(t) = self.b.time(stamp) else {
            self.b.skip(
                row.line,
                &row.text,
                "timestamp is not a time like the others",
            );
            return Ok(());
        };
        let used = self.bytes(USED, row.mem[USED]);
        let total = self.bytes(TOTAL, row.mem[TOTAL]);
        let free = self.bytes(FREE, row.mem[FREE]);
        let used = used.or_else(|| Some(total? - free?)).filter(|&u| u >= 0.0);
        let total = total.or_else(|| Some(used? + free?));
        let mut wrote = false;
        if let Some(u) = used {
            let dev_index = match &row.device {
                Some(DevKey::Index(i)) => Some(*i),
                Some(DevKey::Name(n)) => Some(self.b.device_index_for(n)),
                None => None,
            };
            if let Some(pid) = row.pid {
                let uuid = match &row.device {
                    Some(DevKey::Name(n)) if n.starts_with("GPU-") => Some(n.as_str()),
                    _ => None,
                };
                let slot = self.b.process(
                    dev_index.unwrap_or(0),
                    uuid,
                    pid,
                    row.process.as_deref().unwrap_or(""),
                );
                self.b
                    .push_process(slot, t, u.round() as u64, row.line, row.text.as_slice())?;
            } else {
                let dev = match &row.device {
                    Some(DevKey::Index(i)) => DevRef::Index(*i),
                    Some(DevKey::Name(n)) => DevRef::Name(n),
                    None => DevRef::Unnamed,
                };
                let slot = self.b.device(dev, None);
                if let Some(n) = &row.device_name {
                    self.b.device_name(slot, n);
                }
                self.b.push_device(
                    slot,
                    t,
                    u.round() as u64,
                    total.map(|x| x.round() as u64),
                    row.line,
                    row.text.as_slice(),
                )?;
            }
            wrote = true;
        }
        let metrics = [
            EngineMetric::KvUsage,
            EngineMetric::Running,
            EngineMetric::Waiting,
            EngineMetric::Preemptions,
        ];
        if row.engine.iter().any(Option::is_some) {
            let slot = self.b.engine("plain");
            for (m, v) in metrics.iter().zip(row.engine) {
                if let Some(mut v) = v.filter(|v| v.is_finite() && *v >= 0.0) {
                    if *m == EngineMetric::KvUsage && v > 1.0 {
                        v /= 100.0; // a percentage
                    }
                    self.b
                        .push_engine(slot, *m, t, v, row.line, row.text.as_slice())?;
                    wrote = true;
                }
            }
        }
        if !wrote {
            self.b.missing();
        }
        Ok(())
    }

    fn finish(mut self, hint: &str) -> Result<SeriesSet, SeriesError> {
        if !self.decided {
            self.decide()?;
        }
        let hint = hint.to_string();
        self.b.finish(|| Some(hint))
    }
}

/// The row slot of a memory column.
fn role(col: Col) -> Option<(usize, Scale)> {
    match col {
        Col::Used(s) => Some((USED, s)),
        Col::Total(s) => Some((TOTAL, s)),
        Col::Free(s) => Some((FREE, s)),
        _ => None,
    }
}

/// Stores a JSON number into the row by what its key holds.
fn put_number(row: &mut RawRow, col: Col, x: f64, exact: Option<u64>) {
    if let Some((r, scale)) = role(col) {
        if row.mem[r].is_none() {
            row.mem[r] = Some((x, scale));
        }
        return;
    }
    match col {
        Col::Time(unit) => match epoch_from_f64(x, unit) {
            Some(s) => row.time = Some(s),
            None => row.bad = Some("timestamp not understood"),
        },
        Col::Pid => row.pid = exact.and_then(|v| u32::try_from(v).ok()),
        Col::Device => row.device = exact.and_then(|v| u32::try_from(v).ok()).map(DevKey::Index),
        Col::KvUsage => row.engine[0] = Some(x),
        Col::Running => row.engine[1] = Some(x),
        Col::Waiting => row.engine[2] = Some(x),
        Col::Preemptions => row.engine[3] = Some(x),
        _ => {}
    }
}

/// Stores a cell's text into the row by what its column holds.
fn put(row: &mut RawRow, col: Col, cell: &[u8], tp: &mut TimeParser) {
    let c = trim(cell);
    match col {
        Col::Time(unit) => {
            if is_missing(c) {
                return;
            }
            match tp.parse(c, unit) {
                Some(s) => row.time = Some(s),
                None => row.bad = Some("timestamp not understood"),
            }
        }
        Col::Used(scale) | Col::Total(scale) | Col::Free(scale) => {
            let Some((r, _)) = role(col) else { return };
            if row.mem[r].is_some() || is_missing(c) {
                return;
            }
            match std::str::from_utf8(c).ok().and_then(memory_value) {
                Some((v, own_unit)) => {
                    row.mem[r] = Some((v, if own_unit { Scale::Bytes } else { scale }))
                }
                None => row.bad = Some("memory value is not a number"),
            }
        }
        Col::Device => {
            let s = String::from_utf8_lossy(c);
            let s = s
                .trim_start_matches("cuda:")
                .trim_start_matches("gpu")
                .trim_start_matches("GPU");
            row.device = Some(match s.trim().parse::<u32>() {
                Ok(i) => DevKey::Index(i),
                Err(_) => DevKey::Name(String::from_utf8_lossy(c).into_owned()),
            });
        }
        Col::Uuid => {
            if !is_missing(c) && !matches!(row.device, Some(DevKey::Index(_))) {
                row.device = Some(DevKey::Name(String::from_utf8_lossy(c).into_owned()));
            }
        }
        Col::Pid => {
            if let Some(p) = std::str::from_utf8(c)
                .ok()
                .and_then(|s| s.parse::<u32>().ok())
            {
                row.pid = Some(p);
            } else if !is_missing(c) {
                row.bad = Some("pid is not a number");
            }
        }
        Col::ProcessName => row.process = Some(String::from_utf8_lossy(c).into_owned()),
        Col::DeviceName => row.device_name = Some(String::from_utf8_lossy(c).into_owned()),
        Col::KvUsage | Col::Running | Col::Waiting | Col::Preemptions => {
            let i = match col {
                Col::KvUsage => 0,
                Col::Running => 1,
                Col::Waiting => 2,
                _ => 3,
            };
            let v = std::str::from_utf8(c)
                .ok()
                .and_then(|s| s.trim_end_matches('%').trim().parse::<f64>().ok());
            if v.is_some() {
                row.engine[i] = v;
            }
        }
        Col::Other => {}
    }
}

/// Reads a CSV with a header.
pub(crate) fn read_csv(reader: impl BufRead, input: &InputName) -> Result<SeriesSet, SeriesError> {
    let mut reader = reader;
    super::smi::skip_bom(&mut reader).map_err(|e| SeriesError::Io {
        input: input.clone(),
        source: e,
    })?;
    let delimiter = {
        let head = reader.fill_buf().map_err(|e| SeriesError::Io {
            input: input.clone(),
            source: e,
        })?;
        let first = head.split(|&c| c == b'\n').next().unwrap_or_default();
        let count = |d: u8| first.iter().filter(|&&c| c == d).count();
        [b',', b'\t', b';']
            .into_iter()
            .max_by_key(|&d| count(d))
            .unwrap_or(b',')
    };
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .delimiter(delimiter)
        .from_reader(reader);
    let io = |e: csv::Error| {
        let source = match e.into_kind() {
            csv::ErrorKind::Io(e) => e,
            other => std::io::Error::other(format!("{other:?}")),
        };
        SeriesError::Io {
            input: input.clone(),
            source,
        }
    };
    let mut header = csv::ByteRecord::new();
    if !rdr.read_byte_record(&mut header).map_err(io)? {
        return Builder::new(input, SeriesFormat::PlainCsv).finish(|| Some(csv_hint()));
    }
    let names: Vec<String> = header
        .iter()
        .map(|f| String::from_utf8_lossy(f).into_owned())
        .collect();
    let has_pid = names.iter().any(|n| classify(n, false) == Col::Pid);
    let cols: Vec<Col> = names.iter().map(|n| classify(n, has_pid)).collect();
    let header_line = header.position().map_or(1, |p| p.line());
    let has = |f: fn(&Col) -> bool| cols.iter().any(f);
    if !has(|c| matches!(c, Col::Time(_)))
        || !(has(|c| matches!(c, Col::Used(_)))
            || has(|c| matches!(c, Col::Free(_))) && has(|c| matches!(c, Col::Total(_)))
            || has(|c| matches!(c, Col::KvUsage | Col::Running | Col::Waiting)))
    {
        return Err(SeriesError::NoUsedColumn {
            input: input.clone(),
            line: header_line,
            header: names.join(","),
        });
    }
    let mut sink = Sink::new(Builder::new(input, SeriesFormat::PlainCsv));
    let mut tp = TimeParser::new();
    let mut rec = csv::ByteRecord::new();
    let sep = if delimiter == b',' {
        ","
    } else if delimiter == b'\t' {
        "\t"
    } else {
        ";"
    };
    while rdr.read_byte_record(&mut rec).map_err(io)? {
        if rec.len() == 1 && rec.get(0).is_some_and(<[u8]>::is_empty) {
            continue;
        }
        if rec == header {
            continue; // a repeated header (appended runs)
        }
        let mut row = RawRow {
            line: rec.position().map_or(0, |p| p.line()),
            ..Default::default()
        };
        super::build::TextSource::write_text(&Fields(&rec, sep), &mut row.text);
        if rec.as_slice().len() > limits::MAX_LINE {
            row.bad = Some("line too long");
        } else if rec.len() < cols.len() {
            row.bad = Some("row shorter than the header");
        } else {
            for (i, cell) in rec.iter().enumerate() {
                if let Some(&col) = cols.get(i) {
                    put(&mut row, col, cell, &mut tp);
                }
            }
        }
        sink.row(row)?;
    }
    sink.finish(&csv_hint())
}

fn csv_hint() -> String {
    "expected a header like `timestamp,used_bytes,total_bytes` and rows like `2025-09-07T22:33:21Z,25065160704,25769803776`".to_string()
}

/// Reads JSON Lines: one object per line.
pub(crate) fn read_jsonl(
    reader: impl BufRead,
    input: &InputName,
) -> Result<SeriesSet, SeriesError> {
    let mut lines = Lines::new(reader);
    let mut sink = Sink::new(Builder::new(input, SeriesFormat::JsonLines));
    let mut tp = TimeParser::new();
    let mut classes: HashMap<String, Col> = HashMap::new();
    while let Some((n, raw, cut)) = lines.next_line().map_err(|e| SeriesError::Io {
        input: input.clone(),
        source: e,
    })? {
        let line = trim(raw);
        if line.is_empty() {
            continue;
        }
        let mut row = RawRow {
            line: n,
            text: line[..line.len().min(512)].to_vec(),
            ..Default::default()
        };
        if cut {
            row.bad = Some("line too long");
            sink.row(row)?;
            continue;
        }
        let obj: serde_json::Map<String, Value> = match serde_json::from_slice(line) {
            Ok(o) => o,
            Err(_) => {
                row.bad = Some("not a JSON object");
                sink.row(row)?;
                continue;
            }
        };
        let has_pid = obj.keys().any(|k| k == "pid");
        for (k, v) in &obj {
            let col = *classes
                .entry(format!("{has_pid}{k}"))
                .or_insert_with(|| classify(k, has_pid));
            match v {
                Value::Number(num) => {
                    if let Some(x) = num.as_f64() {
                        put_number(&mut row, col, x, num.as_u64());
                    }
                }
                Value::String(s) => put(&mut row, col, s.as_bytes(), &mut tp),
                _ => {}
            }
        }
        sink.row(row)?;
    }
    sink.finish("expected lines like {\"ts\": \"2025-09-07T22:33:21Z\", \"used_bytes\": 25065160704, \"total_bytes\": 25769803776}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const GIB: u64 = 1 << 30;

    #[test]
    fn csv_with_bytes_and_rfc3339() {
        let set = read_csv(
            "timestamp,used_bytes,total_bytes\n2025-09-07T22:33:21Z,1073741824,25769803776\n2025-09-07T22:33:36Z,2147483648,25769803776\n".as_bytes(),
            &Arc::from("mem.csv"),
        )
        .unwrap();
        let d = &set.devices[0];
        assert_eq!(d.used.values(), &[GIB, 2 * GIB]);
        assert_eq!(d.total_bytes, Some(24 * GIB));
        assert_eq!(d.used.times(), &[1_757_284_401_000, 1_757_284_416_000]);
        assert_eq!(
            d.texts.get(2).as_deref(),
            Some("2025-09-07T22:33:21Z,1073741824,25769803776")
        );
    }

    #[test]
    fn csv_mib_by_name_and_unitless_by_value() {
        let set = read_csv(
            "time,memory_used_mib\n1757284401,1024\n1757284402,2048\n".as_bytes(),
            &Arc::from("m.csv"),
        )
        .unwrap();
        assert_eq!(set.devices[0].used.values(), &[GIB, 2 * GIB]);
        let set = read_csv(
            "time,used,total\n1757284401,22.5,24\n1757284402,23,24\n".as_bytes(),
            &Arc::from("m.csv"),
        )
        .unwrap();
        assert_eq!(
            set.devices[0].used.values(),
            &[(22.5 * GIB as f64) as u64, 23 * GIB]
        );
        assert!(
            set.inputs[0].notes.iter().any(|n| n.contains("GiB")),
            "{:?}",
            set.inputs[0].notes
        );
    }

    #[test]
    fn csv_per_process_and_engine_columns() {
        let set = read_csv(
            "ts,gpu,pid,name,used_mib,kv_cache_usage,num_requests_waiting\n\
             2025-09-07 22:33:21,0,4242,python3,1000,95%,3\n"
                .as_bytes(),
            &Arc::from("m.csv"),
        )
        .unwrap();
        assert_eq!(set.processes[0].pid, 4242);
        assert_eq!(set.processes[0].name, "python3");
        assert_eq!(set.engines[0].kv_usage.values(), &[0.95]);
        assert_eq!(set.engines[0].requests_waiting.values(), &[3.0]);
        assert!(set.devices.is_empty());
    }

    #[test]
    fn csv_without_a_used_column_is_an_error() {
        let err = read_csv("epoch,loss\n1,0.5\n".as_bytes(), &Arc::from("m.csv")).unwrap_err();
        assert!(
            matches!(err, SeriesError::NoUsedColumn { line: 1, .. }),
            "{err:?}"
        );
    }

    #[test]
    fn jsonl_variants() {
        let text = "{\"ts\": 1757284401.5, \"gpu\": 1, \"used_mib\": 1024, \"total_mib\": 24576}\n\
                    {\"ts\": \"2025-09-07T22:33:22Z\", \"gpu\": 1, \"used\": \"2 GiB\"}\n\
                    not json\n\
                    {\"timestamp\": 1757284403000, \"device\": \"cuda:1\", \"memory_used_bytes\": 3221225472}\n";
        let set = read_jsonl(text.as_bytes(), &Arc::from("m.jsonl")).unwrap();
        let d = &set.devices[0];
        assert_eq!(d.index, 1);
        assert_eq!(d.used.values(), &[GIB, 2 * GIB, 3 * GIB]);
        assert_eq!(
            d.used.times(),
            &[1_757_284_401_500, 1_757_284_402_000, 1_757_284_403_000]
        );
        assert_eq!(set.inputs[0].skipped, 1);
        assert_eq!(set.inputs[0].first_skipped_line, Some(3));
    }
}
