//! nvidia-smi CSV: `--query-gpu=…` (per device) and `--query-compute-apps=…` (per process).
//!
//! See `ENGINE-MESSAGES.md` §11.1. The header is the query's field names joined by `, `
//! with units in brackets (`memory.used [MiB]`); `noheader` drops it, `nounits` drops the
//! units from both header and values. Missing values print `[N/A]` or `[Not Supported]`.
//! `-l 1` logs one row per GPU per interval, GPUs interleaved; appending several runs to
//! one file repeats the header. Timestamps are local time without a zone
//! (`YYYY/MM/DD HH:MM:SS.mmm`).
//!
//! Without a header the column layout is inferred from the first rows by what the cells
//! look like (a timestamp, `NNN MiB`, a `GPU-…` UUID, a small index, a constant total that
//! is the largest memory value, a used/free pair that sums to it); the assumption is written
//! to the input's notes so the output can state it.

use std::collections::HashSet;
use std::io::BufRead;

use csv::ByteRecord;

use super::build::{Builder, DevRef, Fields};
use super::columns::is_missing;
use super::error::SeriesError;
use super::model::SeriesSet;
use super::time::{EpochUnit, TimeParser, trim};
use super::{SeriesFormat, limits};
use crate::facts::evidence::InputName;

const MIB: f64 = 1024.0 * 1024.0;
/// Rows read before deciding the layout of a headerless file.
const INFER_ROWS: usize = 64;

/// The kind of a header, when it is an nvidia-smi header.
pub(crate) fn header_kind(fields: &[&str]) -> Option<SeriesFormat> {
    let keys: Vec<String> = fields.iter().map(|f| field_key(f)).collect();
    let has = |k: &str| keys.iter().any(|x| x == k);
    if has("pid") && (has("used_gpu_memory") || has("used_memory")) {
        return Some(SeriesFormat::SmiApps);
    }
    if !(has("memory.used") || has("memory.total") || has("memory.free")) {
        return None;
    }
    // Every field must look like an nvidia-smi property name (lower case, dotted).
    let smi_like = keys.iter().all(|k| {
        !k.is_empty()
            && k.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '_')
    });
    smi_like.then_some(SeriesFormat::SmiGpu)
}

/// `memory.used [MiB]` → `memory.used`.
fn field_key(f: &str) -> String {
    let f = f.trim();
    let f = f.split_once(" [").map_or(f, |(k, _)| k);
    f.trim().to_ascii_lowercase()
}

/// What a headerless cell looks like.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Cell {
    Stamp,
    Mib(f64),
    Int(f64),
    Float(f64),
    Percent,
    Uuid,
    BusId,
    Na,
    Text,
}

fn cell_class(c: &[u8], tp: &mut TimeParser) -> Cell {
    let c = trim(c);
    if is_missing(c) {
        return Cell::Na;
    }
    if c.starts_with(b"GPU-") || c.starts_with(b"MIG-") {
        return Cell::Uuid;
    }
    if c.len() >= 19
        && c.first().is_some_and(u8::is_ascii_digit)
        && tp.parse(c, EpochUnit::Auto).is_some()
    {
        return Cell::Stamp;
    }
    if is_bus_id(c) {
        return Cell::BusId;
    }
    let s = std::str::from_utf8(c).unwrap_or("");
    if let Some(num) = s.strip_suffix("MiB") {
        if let Ok(v) = num.trim().parse::<f64>() {
            return Cell::Mib(v);
        }
    }
    if let Some(num) = s.strip_suffix('%') {
        if num.trim().parse::<f64>().is_ok() {
            return Cell::Percent;
        }
    }
    if c.iter().all(u8::is_ascii_digit) {
        if let Ok(v) = s.parse::<f64>() {
            return Cell::Int(v);
        }
    }
    if let Ok(v) = s.parse::<f64>() {
        if v.is_finite() {
            return Cell::Float(v);
        }
    }
    Cell::Text
}

/// `00000000:3B:00.0`.
fn is_bus_id(c: &[u8]) -> bool {
    let parts: Vec<&[u8]> = c.split(|&b| b == b':').collect();
    parts.len() == 3
        && parts.iter().all(|p| !p.is_empty())
        && parts[0].iter().all(u8::is_ascii_hexdigit)
        && parts[1].iter().all(u8::is_ascii_hexdigit)
        && parts[2].contains(&b'.')
}

/// GPU model names as nvidia-smi prints them (to tell a query-gpu `name` column from a
/// compute-apps `process_name`).
fn looks_like_gpu_name(s: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "NVIDIA",
        "Tesla",
        "Quadro",
        "GeForce",
        "TITAN",
        "Graphics Device",
        "GRID",
        "A100",
        "H100",
        "H200",
        "B200",
        "A10",
        "L4",
        "L40",
        "RTX",
        "A40",
        "A30",
        "V100",
        "T4",
    ];
    PREFIXES.iter().any(|p| s.starts_with(p))
}

/// Column classes of headerless rows: for each column, the class all non-missing cells
/// share, or `None` if they disagree (or rows disagree on the column count).
fn column_classes(rows: &[Vec<&[u8]>]) -> Option<Vec<Cell>> {
    let width = modal_width(rows)?;
    let mut tp = TimeParser::new();
    let mut classes: Vec<Option<Cell>> = vec![None; width];
    for row in rows.iter().filter(|r| r.len() == width) {
        for (i, c) in row.iter().enumerate() {
            let class = cell_class(c, &mut tp);
            if class == Cell::Na {
                continue;
            }
            classes[i] = match (classes[i], class) {
                (None, c) => Some(c),
                (Some(a), b) if std::mem::discriminant(&a) == std::mem::discriminant(&b) => Some(a),
                // Ints and floats mix in one column (`0` and `12.5`).
                (Some(Cell::Int(_) | Cell::Float(_)), Cell::Int(_) | Cell::Float(_)) => {
                    Some(Cell::Float(0.0))
                }
                _ => return None,
            };
        }
    }
    Some(classes.into_iter().map(|c| c.unwrap_or(Cell::Na)).collect())
}

/// The field count most rows share, if at least 80% do (a torn last line or a stray
/// message row may differ).
fn modal_width(rows: &[Vec<&[u8]>]) -> Option<usize> {
    modal(rows.iter().map(Vec::len))
}

/// The value most of `widths` share, if at least 80% do.
pub(crate) fn modal(widths: impl Iterator<Item = usize>) -> Option<usize> {
    let mut counts: Vec<(usize, usize)> = Vec::new();
    let mut total = 0;
    for w in widths {
        total += 1;
        match counts.iter_mut().find(|(v, _)| *v == w) {
            Some((_, c)) => *c += 1,
            None => counts.push((w, 1)),
        }
    }
    let (width, n) = counts.into_iter().max_by_key(|&(w, c)| (c, w))?;
    (n * 5 >= total * 4).then_some(width)
}

/// Numeric values of column `i` over the rows (missing cells skipped).
fn column_values(rows: &[Vec<&[u8]>], i: usize) -> Vec<f64> {
    let mut tp = TimeParser::new();
    let width = modal_width(rows).unwrap_or(0);
    rows.iter()
        .filter(|r| r.len() == width)
        .filter_map(|r| r.get(i))
        .filter_map(|c| match cell_class(c, &mut tp) {
            Cell::Mib(v) | Cell::Int(v) | Cell::Float(v) => Some(v),
            _ => None,
        })
        .collect()
}

/// Which nvidia-smi query a headerless file is, if it is one.
pub(crate) fn headerless_kind(rows: &[Vec<&[u8]>]) -> Option<SeriesFormat> {
    let classes = column_classes(rows)?;
    let n = |f: fn(&Cell) -> bool| classes.iter().filter(|c| f(c)).count();
    let mib = n(|c| matches!(c, Cell::Mib(_)));
    let ints = n(|c| matches!(c, Cell::Int(_)));
    let floats = n(|c| matches!(c, Cell::Float(_)));
    let stamps = n(|c| matches!(c, Cell::Stamp));
    let texts: Vec<usize> = (0..classes.len())
        .filter(|&i| classes[i] == Cell::Text)
        .collect();
    // Free text must be short names, not sentences: a long cell, or one with a `: ` (an
    // error's `OutOfMemoryError: Out of memory allocating 171,798,691,840 bytes`, whose
    // thousands separators split it into number-looking cells).
    let long_text = texts.iter().any(|&i| {
        rows.iter().any(|r| {
            r.get(i)
                .is_some_and(|c| c.len() > 80 || c.windows(2).any(|w| w == b": "))
        })
    });
    if long_text || texts.len() > 2 || stamps > 1 {
        return None;
    }
    let text_is_gpu = texts.iter().all(|&i| {
        rows.iter().all(|r| {
            r.get(i)
                .is_none_or(|c| looks_like_gpu_name(std::str::from_utf8(trim(c)).unwrap_or("")))
        })
    });
    let big_int = (0..classes.len()).any(|i| {
        matches!(classes[i], Cell::Int(_)) && column_values(rows, i).iter().any(|&v| v >= 64.0)
    });
    if mib >= 1 {
        if mib == 1 && (!texts.is_empty() && !text_is_gpu || texts.is_empty() && big_int) {
            return Some(SeriesFormat::SmiApps);
        }
        return Some(SeriesFormat::SmiGpu);
    }
    // `nounits`: bare numbers. Claim only integer tables with a memory-sized value, so an
    // arbitrary numeric CSV is not taken for GPU memory.
    if floats > 0 || ints == 0 {
        return None;
    }
    if !texts.is_empty() && !text_is_gpu && ints >= 2 {
        return Some(SeriesFormat::SmiApps);
    }
    let memory_sized =
        (0..classes.len()).any(|i| column_values(rows, i).iter().any(|&v| v >= 256.0));
    (memory_sized && (ints >= 2 || stamps == 1 || rows.len() >= 5)).then_some(SeriesFormat::SmiGpu)
}

/// Where each wanted column is in a header: slot `k` gets the first field whose key is one of
/// `names[k]`. One mechanism for both nvidia-smi layouts (query-gpu and compute-apps).
fn locate<const N: usize>(fields: &[&str], names: [&[&str]; N]) -> [Option<usize>; N] {
    let mut slots = [None; N];
    for (i, f) in fields.iter().enumerate() {
        let key = field_key(f);
        if let Some(k) = names.iter().position(|alts| alts.contains(&key.as_str())) {
            slots[k].get_or_insert(i);
        }
    }
    slots
}

/// A header's first field, kept to recognise the header when it is repeated mid-file.
fn first_field(fields: &[&str]) -> Option<Vec<u8>> {
    fields.first().map(|f| f.trim().as_bytes().to_vec())
}

/// Where the fields of a query-gpu row are.
#[derive(Clone, Debug, Default)]
struct GpuLayout {
    ts: Option<usize>,
    index: Option<usize>,
    uuid: Option<usize>,
    bus: Option<usize>,
    name: Option<usize>,
    used: Option<usize>,
    total: Option<usize>,
    free: Option<usize>,
    reserved: Option<usize>,
    /// The header's first field, to skip repeated headers.
    header_first: Option<Vec<u8>>,
    /// Fields per row: shorter rows are torn (the last line of a live log) and skipped.
    width: usize,
}

impl GpuLayout {
    fn from_header(fields: &[&str]) -> GpuLayout {
        let [ts, index, uuid, bus, name, used, total, free, reserved] = locate(
            fields,
            [
                &["timestamp"],
                &["index"],
                &["uuid", "gpu_uuid"],
                &["pci.bus_id", "gpu_bus_id"],
                &["name", "gpu_name"],
                &["memory.used"],
                &["memory.total"],
                &["memory.free"],
                &["memory.reserved"],
            ],
        );
        GpuLayout {
            ts,
            index,
            uuid,
            bus,
            name,
            used,
            total,
            free,
            reserved,
            header_first: first_field(fields),
            width: fields.len(),
        }
    }

    /// Infers the layout of headerless rows (see the module doc); the note says what was
    /// assumed.
    fn infer(rows: &[Vec<&[u8]>]) -> Option<(GpuLayout, String)> {
        let classes = column_classes(rows)?;
        let mut l = GpuLayout {
            width: classes.len(),
            ..Default::default()
        };
        let find = |f: &dyn Fn(&Cell) -> bool| (0..classes.len()).find(|&i| f(&classes[i]));
        l.ts = find(&|c| matches!(c, Cell::Stamp));
        l.uuid = find(&|c| matches!(c, Cell::Uuid));
        l.bus = find(&|c| matches!(c, Cell::BusId));
        l.name = find(&|c| matches!(c, Cell::Text));
        let units = classes.iter().any(|c| matches!(c, Cell::Mib(_)));
        let ints: Vec<usize> = (0..classes.len())
            .filter(|&i| matches!(classes[i], Cell::Int(_)))
            .collect();
        let small = |i: usize| column_values(rows, i).iter().all(|&v| v < 64.0);
        let mut memory: Vec<usize> = if units {
            (0..classes.len())
                .filter(|&i| matches!(classes[i], Cell::Mib(_)))
                .collect()
        } else {
            ints.clone()
        };
        // The index: a small integer column before the memory values.
        if let Some(&first) = ints.first() {
            if small(first)
                && (units
                    || ints.len() >= 3
                    || ints.len() == 2 && !small(ints[1]) && rows_alternate(rows, first))
            {
                l.index = Some(first);
                memory.retain(|&i| i != first);
            }
        }
        if memory.is_empty() {
            return None;
        }
        let vals: Vec<Vec<f64>> = memory.iter().map(|&i| column_values(rows, i)).collect();
        // The total: the largest value in every row, constant, at least 1 GiB.
        let total_pos = (0..memory.len()).find(|&a| {
            let v = &vals[a];
            let max = v.iter().cloned().fold(0.0, f64::max);
            max >= 1024.0
                && v.iter().filter(|&&x| x == max).count() * 10 >= v.len() * 9
                && (0..memory.len()).all(|b| b == a || vals[b].iter().zip(v).all(|(y, x)| y <= x))
        });
        let rest: Vec<usize> = (0..memory.len())
            .filter(|&p| Some(p) != total_pos)
            .collect();
        if let Some(tp) = total_pos {
            l.total = Some(memory[tp]);
            let total = vals[tp].iter().cloned().fold(0.0, f64::max);
            // used + free ≈ total (a few % are reserved by the driver on newer GPUs).
            let pair = rest.iter().enumerate().find_map(|(k, &a)| {
                rest[k + 1..]
                    .iter()
                    .find(|&&b| {
                        vals[a]
                            .iter()
                            .zip(&vals[b])
                            .all(|(x, y)| x + y <= total * 1.001 && x + y >= total * 0.93)
                    })
                    .map(|&b| (a, b))
            });
            if let Some((a, b)) = pair {
                l.used = Some(memory[a]);
                l.free = Some(memory[b]);
            }
        }
        if l.used.is_none() {
            // Prefer a column that exceeds 100 (a utilization percentage never does).
            let pick = rest
                .iter()
                .copied()
                .find(|&p| vals[p].iter().any(|&v| v > 100.0))
                .or(rest.first().copied())?;
            l.used = Some(memory[pick]);
        }
        let mut parts = Vec::new();
        let col = |i: Option<usize>| i.map_or(String::new(), |i| format!(" (column {})", i + 1));
        if l.ts.is_some() {
            parts.push(format!("timestamp{}", col(l.ts)));
        }
        if l.index.is_some() {
            parts.push(format!("index{}", col(l.index)));
        }
        parts.push(format!("used MiB{}", col(l.used)));
        if l.free.is_some() {
            parts.push(format!("free MiB{}", col(l.free)));
        }
        if l.total.is_some() {
            parts.push(format!("total MiB{}", col(l.total)));
        }
        Some((
            l,
            format!("no header: columns read as {}", parts.join(", ")),
        ))
    }
}

/// Whether a small-integer column cycles (0,1,0,1…): GPU indices, not memory.
fn rows_alternate(rows: &[Vec<&[u8]>], i: usize) -> bool {
    let v = column_values(rows, i);
    let distinct: HashSet<u64> = v.iter().map(|x| *x as u64).collect();
    distinct.len() >= 2 && v.windows(2).any(|w| w[0] != w[1])
}

/// A memory cell in bytes: `23342 MiB`, `23342` (MiB), `[N/A]` → `Ok(None)`.
fn mib_cell(c: &[u8]) -> Result<Option<u64>, ()> {
    let c = trim(c);
    // Fast path: digits with an optional ` MiB`.
    let digits = c.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits > 0 && digits <= 12 {
        let rest = trim(&c[digits..]);
        if rest.is_empty() || rest == b"MiB" {
            let v = c[..digits]
                .iter()
                .fold(0u64, |a, &b| a * 10 + u64::from(b - b'0'));
            return Ok(Some(v << 20));
        }
    }
    if is_missing(c) {
        return Ok(None);
    }
    let s = std::str::from_utf8(c).map_err(|_| ())?;
    if let Ok(v) = s.parse::<f64>() {
        if v.is_finite() && v >= 0.0 {
            return Ok(Some((v * MIB).round() as u64));
        }
        return Err(());
    }
    crate::facts::units::parse_size(s, crate::facts::units::SiBase::Binary)
        .map(Some)
        .ok_or(())
}

fn uint_cell(c: &[u8]) -> Option<u32> {
    let c = trim(c);
    if c.is_empty() || c.len() > 10 || !c.iter().all(u8::is_ascii_digit) {
        return None;
    }
    c.iter().try_fold(0u32, |a, &b| {
        a.checked_mul(10)?.checked_add(u32::from(b - b'0'))
    })
}

fn csv_reader<R: std::io::Read>(r: R) -> csv::Reader<R> {
    csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        // Cells are trimmed where they are read: csv's own trimming copies every record.
        .trim(csv::Trim::None)
        .comment(None)
        .from_reader(r)
}

fn io_err(input: &InputName, e: csv::Error) -> SeriesError {
    let source = match e.into_kind() {
        csv::ErrorKind::Io(e) => e,
        other => std::io::Error::other(format!("{other:?}")),
    };
    SeriesError::Io {
        input: input.clone(),
        source,
    }
}

fn line_of(rec: &ByteRecord) -> u64 {
    rec.position().map_or(0, |p| p.line())
}

/// Skips a UTF-8 byte-order mark (Windows tools write one).
pub(crate) fn skip_bom(r: &mut impl BufRead) -> std::io::Result<()> {
    let buf = r.fill_buf()?;
    if buf.starts_with(b"\xEF\xBB\xBF") {
        r.consume(3);
    }
    Ok(())
}

/// Reads the first rows: the header (if any) and up to [`INFER_ROWS`] data rows.
fn read_head<R: std::io::Read>(
    rdr: &mut csv::Reader<R>,
    input: &InputName,
) -> Result<Vec<ByteRecord>, SeriesError> {
    let mut head = Vec::new();
    loop {
        let mut rec = ByteRecord::new();
        if !rdr
            .read_byte_record(&mut rec)
            .map_err(|e| io_err(input, e))?
        {
            break;
        }
        if rec.len() == 1 && rec.get(0).is_some_and(|f| f.is_empty()) {
            continue;
        }
        head.push(rec);
        if head.len() > INFER_ROWS {
            break;
        }
    }
    Ok(head)
}

fn as_strs(rec: &ByteRecord) -> Vec<&str> {
    rec.iter()
        .map(|f| std::str::from_utf8(f).unwrap_or(""))
        .collect()
}

fn too_long(rec: &ByteRecord) -> bool {
    rec.as_slice().len() > limits::MAX_LINE
}

/// Reads `nvidia-smi --query-gpu` CSV.
pub(crate) fn read_gpu(reader: impl BufRead, input: &InputName) -> Result<SeriesSet, SeriesError> {
    let mut st = GpuState::default();
    read_smi::<GpuLayout>(
        reader,
        input,
        |layout, b, first| {
            if layout.used.is_none() && (layout.total.is_none() || layout.free.is_none()) {
                return Err(SeriesError::NoUsedColumn {
                    input: input.clone(),
                    line: line_of(first),
                    header: as_strs(first).join(", "),
                });
            }
            if layout.ts.is_none() {
                b.sequence();
            }
            if layout.index.is_none()
                && layout.uuid.is_none()
                && layout.bus.is_none()
                && layout.ts.is_some()
            {
                b.note("no index column: rows with the same timestamp are read as GPUs 0, 1, … in order");
            }
            Ok(())
        },
        |b, layout, rec| gpu_row(b, layout, &mut st, rec),
    )
}

fn smi_hint() -> String {
    "expected rows of `nvidia-smi --query-gpu=timestamp,index,memory.used,memory.total --format=csv -l 1`".to_string()
}

#[derive(Default)]
struct GpuState {
    tp: TimeParser,
    /// For files without an index column: the last timestamp and the position within it.
    group_t: Option<i64>,
    group_pos: u32,
    /// Device slots whose name was recorded (a Vec: this is checked on every row).
    named: Vec<bool>,
}

fn gpu_row(
    b: &mut Builder,
    l: &GpuLayout,
    st: &mut GpuState,
    rec: &ByteRecord,
) -> Result<(), SeriesError> {
    if rec.len() == 1 && rec.get(0).is_some_and(<[u8]>::is_empty) {
        return Ok(());
    }
    if let (Some(h), Some(f)) = (&l.header_first, rec.get(0)) {
        if trim(f) == h.as_slice() {
            return Ok(()); // a repeated header (runs appended to one file)
        }
    }
    let line = line_of(rec);
    b.rows += 1;
    if too_long(rec) {
        b.skip(line, b"(line too long)", "line too long");
        return Ok(());
    }
    if rec.len() < l.width {
        b.skip(
            line,
            &Fields(rec, ",").to_vec(),
            "row shorter than the header",
        );
        return Ok(());
    }
    let field = |i: Option<usize>| i.and_then(|i| rec.get(i));
    let t = match field(l.ts) {
        Some(c) => match st.tp.parse(c, EpochUnit::Auto).and_then(|s| b.time(s)) {
            Some(t) => Some(t),
            None => {
                b.skip(
                    line,
                    &Fields(rec, ",").to_vec(),
                    "no timestamp where the header has one",
                );
                return Ok(());
            }
        },
        None if l.ts.is_some() => {
            b.skip(
                line,
                &Fields(rec, ",").to_vec(),
                "row shorter than the header",
            );
            return Ok(());
        }
        None => None,
    };
    let dev = if let Some(c) = field(l.index) {
        match (uint_cell(c), field(l.uuid)) {
            (Some(i), Some(u)) => DevRef::Both(i, std::str::from_utf8(trim(u)).unwrap_or("")),
            (Some(i), None) => DevRef::Index(i),
            (None, _) => {
                b.skip(
                    line,
                    &Fields(rec, ",").to_vec(),
                    "GPU index is not a number",
                );
                return Ok(());
            }
        }
    } else if let Some(u) = field(l.uuid).or(field(l.bus)) {
        DevRef::Name(std::str::from_utf8(trim(u)).unwrap_or(""))
    } else if let Some(t) = t {
        if st.group_t == Some(t) {
            st.group_pos += 1;
        } else {
            st.group_t = Some(t);
            st.group_pos = 0;
        }
        DevRef::Index(st.group_pos)
    } else {
        DevRef::Unnamed
    };
    let mem = |i: Option<usize>| match i.and_then(|i| rec.get(i)) {
        Some(c) => mib_cell(c),
        None => Ok(None),
    };
    let (Ok(used), Ok(total), Ok(free), Ok(reserved)) =
        (mem(l.used), mem(l.total), mem(l.free), mem(l.reserved))
    else {
        b.skip(
            line,
            &Fields(rec, ",").to_vec(),
            "memory value is not a number of MiB",
        );
        return Ok(());
    };
    let reserved = reserved.unwrap_or(0);
    let used = used.or_else(|| Some(total?.saturating_sub(free?).saturating_sub(reserved)));
    let total = total.or_else(|| Some(used? + free? + reserved));
    let Some(used) = used else {
        b.missing();
        return Ok(());
    };
    let slot = b.device(dev, None);
    // A device's total does not change; a row that says otherwise is torn (the last line
    // of a capture cut mid-number) or garbled.
    if let (Some(new), Some(known)) = (total, b.device_total(slot)) {
        if new.abs_diff(known) > known / 100 {
            b.skip(
                line,
                &Fields(rec, ",").to_vec(),
                "total differs from the device's earlier rows",
            );
            return Ok(());
        }
    }
    if let Some(ni) = l.name {
        if !st.named.get(slot).copied().unwrap_or(false) {
            if st.named.len() <= slot {
                st.named.resize(slot + 1, false);
            }
            st.named[slot] = true;
            if let Some(n) = rec.get(ni) {
                b.device_name(slot, std::str::from_utf8(trim(n)).unwrap_or(""));
            }
        }
    }
    let t = t.unwrap_or_else(|| b.device_seq(slot));
    // The cells the evidence quotes: memory.used (or, when it is derived, memory.free),
    // memory.total, the timestamp, the GPU index.
    let text = Fields(rec, ",").marked(l.used.or(l.free), l.total, l.ts, l.index);
    b.push_device(slot, t, used, total, line, &text)
}

impl Fields<'_> {
    fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::new();
        super::build::TextSource::write_text(self, &mut v);
        v
    }
}

/// Where the fields of a compute-apps row are.
#[derive(Clone, Debug, Default)]
struct AppsLayout {
    ts: Option<usize>,
    uuid: Option<usize>,
    bus: Option<usize>,
    pid: Option<usize>,
    name: Option<usize>,
    used: Option<usize>,
    header_first: Option<Vec<u8>>,
    width: usize,
}

impl AppsLayout {
    fn from_header(fields: &[&str]) -> AppsLayout {
        let [ts, uuid, bus, pid, name, used] = locate(
            fields,
            [
                &["timestamp"],
                &["gpu_uuid", "uuid"],
                &["gpu_bus_id", "pci.bus_id"],
                &["pid"],
                &["process_name", "name"],
                &["used_gpu_memory", "used_memory"],
            ],
        );
        AppsLayout {
            ts,
            uuid,
            bus,
            pid,
            name,
            used,
            header_first: first_field(fields),
            width: fields.len(),
        }
    }

    fn infer(rows: &[Vec<&[u8]>]) -> Option<(AppsLayout, String)> {
        let classes = column_classes(rows)?;
        let find = |f: &dyn Fn(&Cell) -> bool| (0..classes.len()).find(|&i| f(&classes[i]));
        let ints: Vec<usize> = (0..classes.len())
            .filter(|&i| matches!(classes[i], Cell::Int(_)))
            .collect();
        let mut l = AppsLayout {
            ts: find(&|c| matches!(c, Cell::Stamp)),
            uuid: find(&|c| matches!(c, Cell::Uuid)),
            bus: find(&|c| matches!(c, Cell::BusId)),
            name: find(&|c| matches!(c, Cell::Text)),
            pid: ints.first().copied(),
            width: classes.len(),
            ..Default::default()
        };
        l.used = find(&|c| matches!(c, Cell::Mib(_))).or_else(|| ints.get(1).copied());
        l.pid?;
        l.used?;
        Some((l, "no header: columns read as [timestamp,] [gpu_uuid,] pid, [process_name,] used_memory MiB".to_string()))
    }
}

/// Reads `nvidia-smi --query-compute-apps` CSV.
pub(crate) fn read_apps(reader: impl BufRead, input: &InputName) -> Result<SeriesSet, SeriesError> {
    let mut st = AppsState::default();
    read_smi::<AppsLayout>(
        reader,
        input,
        |layout, b, first| {
            if layout.pid.is_none() || layout.used.is_none() {
                return Err(SeriesError::NoUsedColumn {
                    input: input.clone(),
                    line: line_of(first),
                    header: as_strs(first).join(", "),
                });
            }
            if layout.ts.is_none() {
                b.sequence();
                b.note("no timestamp column: a new snapshot starts when a process repeats");
            }
            if layout.uuid.is_none() && layout.bus.is_none() {
                b.note("no gpu_uuid column: processes are taken to be on GPU 0");
            }
            Ok(())
        },
        |b, layout, rec| apps_row(b, layout, &mut st, rec),
    )
}

/// The two nvidia-smi CSV queries: how each finds its columns.
trait SmiLayout: Sized {
    const FORMAT: SeriesFormat;
    /// What a row that fits neither a header nor an inferred layout is not.
    const NOT_A_ROW: &'static str;
    fn hint() -> String;
    fn from_header(fields: &[&str]) -> Self;
    /// A layout guessed from the values of headerless rows, with a note saying how.
    fn infer(rows: &[Vec<&[u8]>]) -> Option<(Self, String)>;
}

impl SmiLayout for GpuLayout {
    const FORMAT: SeriesFormat = SeriesFormat::SmiGpu;
    const NOT_A_ROW: &'static str = "not an nvidia-smi --query-gpu row";
    fn hint() -> String {
        smi_hint()
    }
    fn from_header(fields: &[&str]) -> Self {
        GpuLayout::from_header(fields)
    }
    fn infer(rows: &[Vec<&[u8]>]) -> Option<(Self, String)> {
        GpuLayout::infer(rows)
    }
}

impl SmiLayout for AppsLayout {
    const FORMAT: SeriesFormat = SeriesFormat::SmiApps;
    const NOT_A_ROW: &'static str = "not an nvidia-smi --query-compute-apps row";
    fn hint() -> String {
        apps_hint()
    }
    fn from_header(fields: &[&str]) -> Self {
        AppsLayout::from_header(fields)
    }
    fn infer(rows: &[Vec<&[u8]>]) -> Option<(Self, String)> {
        AppsLayout::infer(rows)
    }
}

/// What both queries' readers share: the BOM, the layout from the header or inferred from
/// the first rows (headerless `--format=csv,noheader`), then every row streamed to `row`.
/// `check` refuses a layout that lacks what the query needs and notes what is assumed.
fn read_smi<L: SmiLayout>(
    mut reader: impl BufRead,
    input: &InputName,
    check: impl FnOnce(&L, &mut Builder, &ByteRecord) -> Result<(), SeriesError>,
    mut row: impl FnMut(&mut Builder, &L, &ByteRecord) -> Result<(), SeriesError>,
) -> Result<SeriesSet, SeriesError> {
    skip_bom(&mut reader).map_err(|e| SeriesError::Io {
        input: input.clone(),
        source: e,
    })?;
    let mut b = Builder::new(input, L::FORMAT);
    let mut rdr = csv_reader(reader);
    let head = read_head(&mut rdr, input)?;
    let Some(first) = head.first() else {
        return b.finish(|| None);
    };
    let (layout, data_from) = if header_kind(&as_strs(first)) == Some(L::FORMAT) {
        (L::from_header(&as_strs(first)), 1)
    } else {
        let rows: Vec<Vec<&[u8]>> = head.iter().map(|r| r.iter().collect()).collect();
        match L::infer(&rows) {
            Some((l, note)) => {
                b.note(note);
                (l, 0)
            }
            None => {
                b.rows = head.len() as u64;
                for r in &head {
                    b.skip(line_of(r), &Fields(r, ",").to_vec(), L::NOT_A_ROW);
                }
                return b.finish(|| Some(L::hint()));
            }
        }
    };
    check(&layout, &mut b, first)?;
    for rec in head.iter().skip(data_from) {
        row(&mut b, &layout, rec)?;
    }
    let mut rec = ByteRecord::new();
    while rdr
        .read_byte_record(&mut rec)
        .map_err(|e| io_err(input, e))?
    {
        row(&mut b, &layout, &rec)?;
    }
    b.finish(|| Some(L::hint()))
}

fn apps_hint() -> String {
    "expected rows of `nvidia-smi --query-compute-apps=timestamp,gpu_uuid,pid,process_name,used_memory --format=csv -l 1`".to_string()
}

#[derive(Default)]
struct AppsState {
    tp: TimeParser,
    /// Without timestamps: the snapshot number and the processes already in it.
    snapshot: i64,
    seen: HashSet<(u32, u32)>,
}

fn apps_row(
    b: &mut Builder,
    l: &AppsLayout,
    st: &mut AppsState,
    rec: &ByteRecord,
) -> Result<(), SeriesError> {
    if rec.len() == 1 && rec.get(0).is_some_and(<[u8]>::is_empty) {
        return Ok(());
    }
    if let (Some(h), Some(f)) = (&l.header_first, rec.get(0)) {
        if trim(f) == h.as_slice() {
            // A repeated header starts a new run of snapshots.
            st.snapshot += 1;
            st.seen.clear();
            return Ok(());
        }
    }
    let line = line_of(rec);
    b.rows += 1;
    if too_long(rec) {
        b.skip(line, b"(line too long)", "line too long");
        return Ok(());
    }
    let field = |i: Option<usize>| i.and_then(|i| rec.get(i));
    let text = Fields(rec, ",");
    if rec.len() == 1 && rec.get(0).is_some_and(|f| f.starts_with(b"No running")) {
        b.rows -= 1; // "No running processes found": an empty snapshot, not a bad row
        return Ok(());
    }
    if rec.len() < l.width {
        b.skip(line, &text.to_vec(), "row shorter than the header");
        return Ok(());
    }
    let Some(pid) = field(l.pid).and_then(uint_cell) else {
        b.skip(line, &text.to_vec(), "pid is not a number");
        return Ok(());
    };
    let uuid = field(l.uuid)
        .or(field(l.bus))
        .map(|u| std::str::from_utf8(trim(u)).unwrap_or("").to_string());
    let device = match &uuid {
        Some(u) => b.device_index_for(u),
        None => 0,
    };
    let t = match field(l.ts) {
        Some(c) => match st.tp.parse(c, EpochUnit::Auto).and_then(|s| b.time(s)) {
            Some(t) => t,
            None => {
                b.skip(
                    line,
                    &text.to_vec(),
                    "no timestamp where the header has one",
                );
                return Ok(());
            }
        },
        None if l.ts.is_some() => {
            b.skip(line, &text.to_vec(), "row shorter than the header");
            return Ok(());
        }
        None => {
            if !st.seen.insert((device, pid)) {
                st.snapshot += 1;
                st.seen.clear();
                st.seen.insert((device, pid));
            }
            st.snapshot
        }
    };
    let used = match field(l.used).map(mib_cell) {
        Some(Ok(Some(u))) => u,
        Some(Ok(None)) => {
            b.missing();
            return Ok(());
        }
        _ => {
            b.skip(
                line,
                &text.to_vec(),
                "used_gpu_memory is not a number of MiB",
            );
            return Ok(());
        }
    };
    let name = field(l.name)
        .map(|n| String::from_utf8_lossy(trim(n)).into_owned())
        .unwrap_or_default();
    let slot = b.process(
        device,
        uuid.as_deref()
            .filter(|u| u.starts_with("GPU-") || u.starts_with("MIG-")),
        pid,
        &name,
    );
    b.push_process(slot, t, used, line, &text.marked(l.used, None, l.ts, l.pid))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn read(text: &str) -> SeriesSet {
        read_gpu(text.as_bytes(), &Arc::from("gpu.csv")).unwrap()
    }

    const GIB: u64 = 1 << 30;

    #[test]
    fn header_with_units_and_two_gpus_interleaved() {
        let set = read(
            "timestamp, index, name, memory.used [MiB], memory.total [MiB], memory.free [MiB]\n\
             2025/09/07 22:33:21.481, 0, NVIDIA GeForce RTX 3090, 23342 MiB, 24576 MiB, 1234 MiB\n\
             2025/09/07 22:33:21.483, 1, NVIDIA GeForce RTX 3090, 1024 MiB, 24576 MiB, 23552 MiB\n\
             2025/09/07 22:33:22.481, 0, NVIDIA GeForce RTX 3090, [N/A], 24576 MiB, [N/A]\n\
             2025/09/07 22:33:22.483, 1, NVIDIA GeForce RTX 3090, 2048 MiB, 24576 MiB, 22528 MiB\n",
        );
        assert_eq!(set.devices.len(), 2);
        let d0 = &set.devices[0];
        assert_eq!(d0.index, 0);
        assert_eq!(d0.name.as_deref(), Some("NVIDIA GeForce RTX 3090"));
        assert_eq!(d0.total_bytes, Some(24 * GIB));
        assert_eq!(d0.used.values(), &[23342 << 20]);
        assert_eq!(set.devices[1].used.values(), &[GIB, 2 * GIB]);
        assert_eq!(set.inputs[0].missing, 1);
        assert!(set.inputs[0].naive_time);
        assert_eq!(
            set.devices[0].texts.get(2).as_deref(),
            Some(
                "2025/09/07 22:33:21.481, 0, NVIDIA GeForce RTX 3090, 23342 MiB, 24576 MiB, 1234 MiB"
            )
        );
    }

    #[test]
    fn nounits_header_and_repeated_headers() {
        let set = read(
            "timestamp, index, memory.used, memory.total\n\
             2025/09/07 22:33:21.481, 0, 100, 24576\n\
             timestamp, index, memory.used, memory.total\n\
             2025/09/07 22:33:22.481, 0, 200, 24576\n",
        );
        assert_eq!(set.devices[0].used.values(), &[100 << 20, 200 << 20]);
        assert_eq!(set.inputs[0].skipped, 0);
    }

    #[test]
    fn headerless_with_units() {
        let set = read(
            "2025/09/07 22:33:21.481, 0, NVIDIA A10G, 20000 MiB, 23028 MiB\n\
             2025/09/07 22:33:21.490, 1, NVIDIA A10G, 512 MiB, 23028 MiB\n\
             2025/09/07 22:33:22.481, 0, NVIDIA A10G, 20100 MiB, 23028 MiB\n",
        );
        assert_eq!(set.devices.len(), 2);
        assert_eq!(set.devices[0].used.values(), &[20000 << 20, 20100 << 20]);
        assert_eq!(set.devices[0].total_bytes, Some(23028 << 20));
        assert!(
            set.inputs[0].notes[0].starts_with("no header"),
            "{:?}",
            set.inputs[0].notes
        );
    }

    #[test]
    fn headerless_nounits_bare_numbers() {
        let set = read("0, 23342, 24576\n1, 100, 24576\n0, 23400, 24576\n1, 100, 24576\n");
        assert_eq!(set.devices.len(), 2);
        assert_eq!(set.devices[0].used.values(), &[23342 << 20, 23400 << 20]);
        assert_eq!(set.devices[0].used.times(), &[0, 1]);
        assert_eq!(set.devices[1].total_bytes, Some(24576 << 20));
    }

    #[test]
    fn headerless_nounits_total_used_free_in_any_order() {
        // --query-gpu=timestamp,memory.total,memory.used,memory.free --format=csv,noheader,nounits
        let set = read(
            "2025/09/07 22:33:21.481, 24576, 20000, 4200\n\
             2025/09/07 22:33:22.481, 24576, 21000, 3200\n\
             2025/09/07 22:33:23.481, 24576, 22000, 2200\n",
        );
        assert_eq!(
            set.devices[0].used.values(),
            &[20000 << 20, 21000 << 20, 22000 << 20]
        );
        assert_eq!(set.devices[0].total_bytes, Some(24576 << 20));
    }

    #[test]
    fn used_from_total_and_free_when_used_is_not_queried() {
        let set = read(
            "timestamp, memory.total [MiB], memory.free [MiB]\n2025/09/07 22:33:21.481, 24576 MiB, 4576 MiB\n",
        );
        assert_eq!(set.devices[0].used.values(), &[20000 << 20]);
    }

    #[test]
    fn bad_rows_are_skipped_and_counted() {
        let set = read(
            "timestamp, index, memory.used [MiB], memory.total [MiB]\n\
             2025/09/07 22:33:21.481, 0, 100 MiB, 24576 MiB\n\
             Failed to initialize NVML: Driver/library version mismatch\n\
             2025/09/07 22:33:23.481, 0, 300 MiB, 24576 MiB\n\
             2025/09/07 22:33:24.481, 0, 40",
        );
        // The NVML message and the torn last line are skipped.
        assert_eq!(set.devices[0].used.len(), 2);
        assert_eq!(set.inputs[0].skipped, 2);
        assert_eq!(set.inputs[0].first_skipped_line, Some(3));
    }

    #[test]
    fn mostly_garbage_is_an_error_naming_the_line() {
        let text = "timestamp, index, memory.used [MiB]\nnot, a, row\nnot, a, row\nnot, a, row\n";
        let err = read_gpu(text.as_bytes(), &Arc::from("gpu.csv")).unwrap_err();
        assert!(
            matches!(err, SeriesError::Unparseable { line: 2, .. }),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(msg.starts_with("gpu.csv:2:"), "{msg}");
    }

    #[test]
    fn compute_apps_with_uuid_and_timestamps() {
        let text = "timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n\
                    2025/09/07 22:33:21.481, GPU-aaaa, 3858903, VLLM::EngineCore, 6265 MiB\n\
                    2025/09/07 22:33:21.481, GPU-aaaa, 12, python3, [N/A]\n\
                    2025/09/07 22:33:22.481, GPU-aaaa, 3858903, VLLM::EngineCore, 6300 MiB\n\
                    2025/09/07 22:33:22.481, GPU-bbbb, 4000, /usr/bin/python3, 100 MiB\n";
        let set = read_apps(text.as_bytes(), &Arc::from("apps.csv")).unwrap();
        assert_eq!(set.processes.len(), 2);
        let p = &set.processes[0];
        assert_eq!(
            (p.pid, p.name.as_str(), p.device, p.device_uuid.as_deref()),
            (3858903, "VLLM::EngineCore", 0, Some("GPU-aaaa"))
        );
        assert_eq!(p.used.values(), &[6265 << 20, 6300 << 20]);
        assert_eq!(set.processes[1].device, 1);
        assert_eq!(set.inputs[0].missing, 1);
    }

    #[test]
    fn compute_apps_without_timestamps_split_snapshots_on_repeats() {
        let text = "pid, process_name, used_gpu_memory [MiB]\n\
                    10, python3, 1000 MiB\n20, ollama, 50 MiB\n\
                    10, python3, 1000 MiB\n20, ollama, 3000 MiB\n";
        let set = read_apps(text.as_bytes(), &Arc::from("apps.csv")).unwrap();
        let ollama = set.processes.iter().find(|p| p.pid == 20).unwrap();
        assert_eq!(ollama.used.times(), &[0, 1]);
        assert_eq!(ollama.used.values(), &[50 << 20, 3000 << 20]);
    }

    #[test]
    fn a_sentence_with_thousands_separators_is_no_row() {
        let line: &[u8] = b"cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 171,798,691,840 bytes (allocated so far: 0 bytes).";
        let rows = vec![line.split(|&b| b == b',').collect::<Vec<_>>()];
        assert_eq!(headerless_kind(&rows), None);
    }

    #[test]
    fn headerless_kinds() {
        let rows = |t: &'static str| -> Vec<Vec<&'static [u8]>> {
            t.lines()
                .map(|l| l.split(',').map(str::as_bytes).collect())
                .collect()
        };
        assert_eq!(
            headerless_kind(&rows(
                "3858903, VLLM::EngineCore, 6265 MiB\n3858904, python3, 100 MiB"
            )),
            Some(SeriesFormat::SmiApps)
        );
        assert_eq!(
            headerless_kind(&rows("0, NVIDIA A10G, 6265 MiB\n1, NVIDIA A10G, 100 MiB")),
            Some(SeriesFormat::SmiGpu)
        );
        assert_eq!(
            headerless_kind(&rows("0, 23342, 24576\n1, 100, 24576")),
            Some(SeriesFormat::SmiGpu)
        );
        assert_eq!(headerless_kind(&rows("1, 0.53, 0.71\n2, 0.5, 0.7")), None);
        assert_eq!(
            headerless_kind(&rows("2024-05-01 12:34:56,789 - INFO - step 3")),
            None
        );
    }
}
