//! Prometheus text exposition: DCGM exporter, NVIDIA GPU exporters, vLLM and SGLang metrics.
//!
//! One or many scrapes concatenated (`while true; do curl -s :9400/metrics; sleep 15; done`),
//! or a dump with per-sample timestamps (`name{labels} value 1725748401000`). Without
//! timestamps, scrapes are told apart by a series repeating (or a `# TYPE` repeating, or
//! `# EOF`), and time is the scrape number, unless a line that is only a timestamp (a
//! `date` between curls, bare or after `#`) gives the scrape its wall time.
//!
//! Only the metrics below are read; others are checked for syntax and skipped. Memory
//! metrics of one device and one time (FB_USED, FB_FREE, FB_TOTAL are separate lines, in
//! separate families) are assembled into one sample. See `ENGINE-MESSAGES.md` §11.3, §11.4,
//! §2.7, §6.
//!
//! | metric | meaning | unit |
//! |---|---|---|
//! | `DCGM_FI_DEV_FB_USED` / `_FREE` / `_TOTAL` / `_RESERVED` | device memory | MiB |
//! | `nvidia_smi_memory_used_bytes`, `nvidia_gpu_memory_used_bytes`, `nv_gpu_memory_used_bytes` (and `_free`, `_total`) | device memory | bytes |
//! | `vllm:kv_cache_usage_perc`, `vllm:gpu_cache_usage_perc`, `sglang:token_usage` | KV usage | 0..1 |
//! | `vllm:num_requests_running`, `sglang:num_running_reqs` | requests running | count |
//! | `vllm:num_requests_waiting`, `sglang:num_queue_reqs` | requests waiting | count |
//! | `vllm:num_preemptions_total`, `vllm:num_preemptions`, `sglang:num_retracted_requests_total` | preemptions | counter |

use std::borrow::Cow;
use std::collections::HashSet;
use std::io::BufRead;

use super::SeriesFormat;
use super::build::{Builder, DevRef, EngineMetric, Lines};
use super::error::SeriesError;
use super::model::{Clock, SeriesSet};
use super::time::{EpochUnit, Stamp, TimeParser, epoch_from_f64, trim};
use crate::facts::evidence::InputName;

const MIB: f64 = 1024.0 * 1024.0;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mem {
    Used,
    Free,
    Total,
    Reserved,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// A device memory metric and the factor to bytes.
    Device(Mem, f64),
    /// An engine metric (`vllm` or `sglang`).
    Engine(EngineMetric, &'static str),
}

fn kind(name: &[u8]) -> Option<Kind> {
    use EngineMetric::*;
    use Mem::*;
    Some(match name {
        b"DCGM_FI_DEV_FB_USED" => Kind::Device(Used, MIB),
        b"DCGM_FI_DEV_FB_FREE" => Kind::Device(Free, MIB),
        b"DCGM_FI_DEV_FB_TOTAL" => Kind::Device(Total, MIB),
        b"DCGM_FI_DEV_FB_RESERVED" => Kind::Device(Reserved, MIB),
        b"vllm:kv_cache_usage_perc" | b"vllm:gpu_cache_usage_perc" => Kind::Engine(KvUsage, "vllm"),
        b"vllm:num_requests_running" => Kind::Engine(Running, "vllm"),
        b"vllm:num_requests_waiting" => Kind::Engine(Waiting, "vllm"),
        b"vllm:num_preemptions_total" | b"vllm:num_preemptions" => {
            Kind::Engine(Preemptions, "vllm")
        }
        b"sglang:token_usage" => Kind::Engine(KvUsage, "sglang"),
        b"sglang:num_running_reqs" => Kind::Engine(Running, "sglang"),
        b"sglang:num_queue_reqs" => Kind::Engine(Waiting, "sglang"),
        b"sglang:num_retracted_requests_total" => Kind::Engine(Preemptions, "sglang"),
        _ => {
            // NVIDIA GPU exporters (nvidia_gpu_exporter, Triton's nv_gpu_*): bytes.
            let gpu_family = name.starts_with(b"nvidia_") || name.starts_with(b"nv_gpu_");
            if !gpu_family {
                return None;
            }
            if name.ends_with(b"memory_used_bytes") {
                Kind::Device(Used, 1.0)
            } else if name.ends_with(b"memory_free_bytes") {
                Kind::Device(Free, 1.0)
            } else if name.ends_with(b"memory_total_bytes") {
                Kind::Device(Total, 1.0)
            } else {
                return None;
            }
        }
    })
}

/// The labels oomdoctor reads.
#[derive(Default, Debug)]
struct Labels<'a> {
    gpu: Option<Cow<'a, str>>,
    uuid: Option<Cow<'a, str>>,
    host: Option<Cow<'a, str>>,
    model: Option<Cow<'a, str>>,
    engine: Option<Cow<'a, str>>,
    model_name: Option<Cow<'a, str>>,
}

/// A parsed sample line.
struct Sample<'a> {
    name: &'a [u8],
    labels: Labels<'a>,
    value: f64,
    ts: Option<f64>,
}

/// Parses `name{l="v",…} value [timestamp]`; label values are kept only for known metrics.
fn parse_sample(
    line: &[u8],
    keep_labels: impl Fn(&[u8]) -> bool,
) -> Result<Sample<'_>, &'static str> {
    let name_end = line
        .iter()
        .position(|&c| !(c.is_ascii_alphanumeric() || c == b'_' || c == b':'))
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() || name[0].is_ascii_digit() {
        return Err("not a metric name");
    }
    let keep = keep_labels(name);
    let mut labels = Labels::default();
    let mut i = name_end;
    if line.get(i) == Some(&b'{') {
        i += 1;
        loop {
            while line.get(i).is_some_and(|c| c.is_ascii_whitespace()) {
                i += 1;
            }
            match line.get(i) {
                Some(b'}') => {
                    i += 1;
                    break;
                }
                Some(_) => {}
                None => return Err("unclosed label set"),
            }
            let ln_start = i;
            while line
                .get(i)
                .is_some_and(|&c| c.is_ascii_alphanumeric() || c == b'_')
            {
                i += 1;
            }
            let lname = &line[ln_start..i];
            if lname.is_empty() {
                return Err("bad label name");
            }
            while line.get(i).is_some_and(|c| c.is_ascii_whitespace()) {
                i += 1;
            }
            if line.get(i) != Some(&b'=') {
                return Err("label without `=`");
            }
            i += 1;
            while line.get(i).is_some_and(|c| c.is_ascii_whitespace()) {
                i += 1;
            }
            if line.get(i) != Some(&b'"') {
                return Err("label value not quoted");
            }
            i += 1;
            let v_start = i;
            let mut escaped = false;
            loop {
                // Label values are most of a DCGM line: jump to the next quote or escape.
                let rest = line.get(i..).unwrap_or_default();
                match memchr::memchr2(b'"', b'\\', rest).map(|k| (k, rest[k])) {
                    Some((k, b'\\')) => {
                        escaped = true;
                        i += k + 2;
                    }
                    Some((k, _)) => {
                        i += k;
                        break;
                    }
                    None => return Err("unterminated label value"),
                }
            }
            let raw = line.get(v_start..i).ok_or("unterminated label value")?;
            i += 1;
            if keep {
                let value = if escaped {
                    Cow::Owned(unescape(raw))
                } else {
                    match std::str::from_utf8(raw) {
                        Ok(v) => Cow::Borrowed(v),
                        Err(_) => String::from_utf8_lossy(raw),
                    }
                };
                let slot = match lname {
                    b"gpu" | b"minor_number" | b"gpu_index" | b"index" => &mut labels.gpu,
                    b"UUID" | b"uuid" | b"gpu_uuid" => &mut labels.uuid,
                    b"Hostname" | b"hostname" => &mut labels.host,
                    b"modelName" | b"name" | b"gpu_name" => &mut labels.model,
                    b"engine" => &mut labels.engine,
                    b"model_name" => &mut labels.model_name,
                    _ => &mut None,
                };
                if slot.is_none() {
                    *slot = Some(value);
                }
            }
            while line.get(i).is_some_and(|c| c.is_ascii_whitespace()) {
                i += 1;
            }
            if line.get(i) == Some(&b',') {
                i += 1;
            }
        }
    }
    let (value, ts) = value_and_time(line.get(i..).unwrap_or_default())?;
    Ok(Sample {
        name,
        labels,
        value,
        ts,
    })
}

/// ` value [timestamp]` after a metric's name and labels.
fn value_and_time(rest: &[u8]) -> Result<(f64, Option<f64>), &'static str> {
    if !rest.first().is_some_and(u8::is_ascii_whitespace) {
        return Err("no value after the metric");
    }
    let mut parts = rest
        .split(u8::is_ascii_whitespace)
        .filter(|p| !p.is_empty());
    let value = parts
        .next()
        .and_then(number)
        .ok_or("value is not a number")?;
    let ts = match parts.next() {
        Some(p) => Some(
            number(p)
                .filter(|v| v.is_finite())
                .ok_or("timestamp is not a number")?,
        ),
        None => None,
    };
    if parts.next().is_some() {
        return Err("text after the timestamp");
    }
    Ok((value, ts))
}

/// A sample value: a float, or `NaN`, `+Inf`, `-Inf`.
fn number(p: &[u8]) -> Option<f64> {
    match p {
        b"NaN" | b"nan" => Some(f64::NAN),
        b"+Inf" | b"Inf" | b"+inf" | b"inf" => Some(f64::INFINITY),
        b"-Inf" | b"-inf" => Some(f64::NEG_INFINITY),
        // Integers (MiB values, millisecond timestamps) are most values: read them directly.
        _ if !p.is_empty() && p.len() <= 15 && p.iter().all(u8::is_ascii_digit) => {
            Some(p.iter().fold(0u64, |a, &c| a * 10 + u64::from(c - b'0')) as f64)
        }
        _ => std::str::from_utf8(p).ok()?.parse().ok(),
    }
}

/// Label value escapes: `\\`, `\"`, `\n`.
fn unescape(raw: &[u8]) -> String {
    let mut out = Vec::with_capacity(raw.len());
    let mut it = raw.iter();
    while let Some(&c) = it.next() {
        if c == b'\\' {
            match it.next() {
                Some(b'n') => out.push(b'\n'),
                Some(&o) => out.push(o),
                None => out.push(b'\\'),
            }
        } else {
            out.push(c);
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Memory values of one device at one time, assembled from separate metric lines.
#[derive(Default)]
struct Pending {
    t: i64,
    used: Option<f64>,
    free: Option<f64>,
    total: Option<f64>,
    reserved: Option<f64>,
    line: u64,
    text: Vec<u8>,
    has_used_text: bool,
    active: bool,
}

struct State {
    tp: TimeParser,
    scrape: i64,
    scrape_time: Option<Stamp>,
    /// Without timestamps: series seen in the current scrape, and families typed in it.
    seen: HashSet<(u8, usize)>,
    families: HashSet<Vec<u8>>,
    /// `# EOF` seen: the next sample starts a new scrape.
    boundary: bool,
    pending: Vec<Pending>,
    other_names: Vec<String>,
    other_count: u64,
    /// (gpu label, UUID, host) → device slot.
    devices: Vec<DeviceKey>,
    /// Exact label texts already parsed: (device metric?, `{…}`, track).
    label_sets: Vec<(bool, Box<[u8]>, usize)>,
}

type DeviceKey = (Option<u32>, Option<Box<str>>, Option<Box<str>>, usize);

/// Label sets seen per kind of track; beyond this many, lines are parsed in full.
const MAX_LABEL_SETS: usize = 256;

impl State {
    /// A known metric whose exact label text was seen before: its kind, track and the
    /// text after the labels. The label set ends at the line's last `}` (values and
    /// timestamps never contain one).
    fn seen_labels<'a>(&self, line: &'a [u8]) -> Option<(Kind, usize, &'a [u8])> {
        let name_end = line
            .iter()
            .position(|&c| !(c.is_ascii_alphanumeric() || c == b'_' || c == b':'))?;
        if line[name_end] != b'{' {
            return None;
        }
        let k = kind(&line[..name_end])?;
        let close = memchr::memrchr(b'}', line)?;
        let raw = &line[name_end..=close];
        let device = matches!(k, Kind::Device(..));
        let slot = self
            .label_sets
            .iter()
            .find(|(d, l, _)| *d == device && l.as_ref() == raw)?
            .2;
        Some((k, slot, &line[close + 1..]))
    }

    /// Remembers a parsed line's label text for [`State::seen_labels`].
    fn remember_labels(&mut self, line: &[u8], name_len: usize, k: Kind, slot: usize) {
        if self.label_sets.len() >= MAX_LABEL_SETS || line.get(name_len) != Some(&b'{') {
            return;
        }
        if let Some(close) = memchr::memrchr(b'}', line) {
            let raw = &line[name_len..=close];
            let device = matches!(k, Kind::Device(..));
            if !self
                .label_sets
                .iter()
                .any(|(d, l, _)| *d == device && l.as_ref() == raw)
            {
                self.label_sets.push((device, Box::from(raw), slot));
            }
        }
    }

    fn new_scrape(&mut self) {
        self.scrape += 1;
        self.seen.clear();
        self.families.clear();
        self.boundary = false;
    }
}

/// Reads Prometheus text.
pub(crate) fn read(reader: impl BufRead, input: &InputName) -> Result<SeriesSet, SeriesError> {
    let mut b = Builder::new(input, SeriesFormat::Prometheus);
    let mut lines = Lines::new(reader);
    let mut st = State {
        tp: TimeParser::new(),
        scrape: 0,
        scrape_time: None,
        seen: HashSet::new(),
        families: HashSet::new(),
        boundary: false,
        pending: Vec::new(),
        other_names: Vec::new(),
        other_count: 0,
        devices: Vec::new(),
        label_sets: Vec::new(),
    };
    while let Some((n, raw, cut)) = lines.next_line().map_err(|e| SeriesError::Io {
        input: input.clone(),
        source: e,
    })? {
        let line = trim(raw);
        if line.is_empty() {
            continue;
        }
        if cut {
            b.rows += 1;
            b.skip(n, &line[..line.len().min(200)], "line too long");
            continue;
        }
        if let Some(comment) = line.strip_prefix(b"#") {
            comment_line(&mut st, trim(comment));
            continue;
        }
        if line.first().is_some_and(u8::is_ascii_digit) {
            // A bare timestamp between scrapes (`date -Is` in the capture loop).
            if let Some(s) = st
                .tp
                .parse(line, EpochUnit::Auto)
                .filter(|s| matches!(s, Stamp::Wall { .. }))
            {
                st.new_scrape();
                st.scrape_time = Some(s);
                continue;
            }
        }
        b.rows += 1;
        // Fast path: a metric read before with a label set seen before (every scrape
        // repeats them) needs only its value and timestamp.
        if let Some((k, slot, rest)) = st.seen_labels(line) {
            match value_and_time(rest) {
                Ok((value, ts)) => push_sample(&mut b, &mut st, k, slot, value, ts, n, line)?,
                Err(reason) => b.skip(n, line, reason),
            }
            continue;
        }
        let sample = match parse_sample(line, |name| kind(name).is_some()) {
            Ok(s) => s,
            Err(reason) => {
                b.skip(n, line, reason);
                continue;
            }
        };
        let Some(k) = kind(sample.name) else {
            st.other_count += 1;
            if st.other_names.len() < 8 {
                let name = String::from_utf8_lossy(sample.name).into_owned();
                if !st.other_names.contains(&name) {
                    st.other_names.push(name);
                }
            }
            continue;
        };
        let slot = resolve(&mut b, &mut st, k, &sample.labels);
        st.remember_labels(line, sample.name.len(), k, slot);
        push_sample(&mut b, &mut st, k, slot, sample.value, sample.ts, n, line)?;
    }
    for slot in 0..st.pending.len() {
        flush(&mut b, &mut st, slot)?;
    }
    let other = (st.other_count, st.other_names.join(", "));
    b.finish(|| {
        Some(if other.0 > 0 {
            format!(
                "read {} samples of other metrics ({}); oomdoctor reads DCGM_FI_DEV_FB_USED/FREE/TOTAL, nvidia_*_memory_used_bytes, vllm:* and sglang:* metrics",
                other.0, other.1
            )
        } else {
            "expected Prometheus text: `DCGM_FI_DEV_FB_USED{gpu=\"0\"} 23342 1725748401000`".to_string()
        })
    })
}

fn comment_line(st: &mut State, c: &[u8]) {
    if c == b"EOF" {
        st.boundary = true;
        st.families.clear();
    } else if let Some(rest) = c.strip_prefix(b"TYPE ") {
        // A family typed twice: a new scrape began with this family.
        let name = rest
            .split(u8::is_ascii_whitespace)
            .next()
            .unwrap_or_default();
        if !st.families.insert(name.to_vec()) {
            st.boundary = true;
            st.families.clear();
            st.families.insert(name.to_vec());
        }
    } else if c.starts_with(b"HELP ") {
    } else if let Some(s) = st
        .tp
        .parse(c, EpochUnit::Auto)
        .filter(|s| matches!(s, Stamp::Wall { .. }))
    {
        st.new_scrape();
        st.scrape_time = Some(s);
    }
}

/// The track a sample of metric `k` with these labels belongs to.
fn resolve(b: &mut Builder, st: &mut State, k: Kind, labels: &Labels<'_>) -> usize {
    match k {
        Kind::Device(..) => {
            let host = labels.host.as_deref();
            let gpu = labels
                .gpu
                .as_deref()
                .and_then(|g| g.trim().parse::<u32>().ok());
            let dev = match (gpu, labels.uuid.as_deref()) {
                (Some(i), Some(u)) => DevRef::Both(i, u),
                (Some(i), None) => DevRef::Index(i),
                (None, Some(u)) => DevRef::Name(u),
                (None, None) => DevRef::Unnamed,
            };
            // A few devices per file: a linear cache of the label values avoids the
            // builder's keyed lookups.
            let key = (gpu, labels.uuid.as_deref(), host);
            let cached = st
                .devices
                .iter()
                .find(|(g, u, h, _)| (*g, u.as_deref(), h.as_deref()) == key);
            match cached {
                Some(&(_, _, _, slot)) => slot,
                None => {
                    let slot = b.device(dev, host);
                    if let Some(model) = &labels.model {
                        b.device_name(slot, model);
                    }
                    st.devices
                        .push((gpu, key.1.map(Box::from), host.map(Box::from), slot));
                    slot
                }
            }
        }
        Kind::Engine(_, family) => {
            let mut label = family.to_string();
            if let Some(e) = &labels.engine {
                label.push_str(&format!(" engine={e}"));
            }
            if let Some(mn) = &labels.model_name {
                label.push_str(&format!(" model={mn}"));
            }
            b.engine(&label)
        }
    }
}

/// Adds one sample of metric `k` to track `slot`.
#[allow(clippy::too_many_arguments)]
fn push_sample(
    b: &mut Builder,
    st: &mut State,
    k: Kind,
    slot: usize,
    value: f64,
    ts: Option<f64>,
    n: u64,
    line: &[u8],
) -> Result<(), SeriesError> {
    if st.boundary {
        // Families of the new scrape are already being tracked by `comment_line`.
        let families = std::mem::take(&mut st.families);
        st.new_scrape();
        st.families = families;
        st.scrape_time = None;
    }
    let kind_id = match k {
        Kind::Device(m, _) => m as u8,
        Kind::Engine(m, _) => 16 + m as u8,
    };
    let t = match (ts, st.scrape_time) {
        (Some(ts), _) if b.clock() != Some(Clock::Sequence) => {
            match epoch_from_f64(ts, EpochUnit::Auto).and_then(|s| b.time(s)) {
                Some(t) => t,
                None => {
                    b.skip(n, line, "timestamp is not a time like the others");
                    return Ok(());
                }
            }
        }
        (_, Some(stamp)) if b.clock() != Some(Clock::Sequence) => match b.time(stamp) {
            Some(t) => t,
            None => {
                b.skip(n, line, "sample without a timestamp among timestamped ones");
                return Ok(());
            }
        },
        _ => {
            if matches!(b.clock(), Some(Clock::Wall | Clock::Relative)) {
                b.skip(n, line, "sample without a timestamp among timestamped ones");
                return Ok(());
            }
            b.sequence();
            if !st.seen.insert((kind_id, slot)) {
                // The same series again: a new scrape without TYPE lines began.
                st.new_scrape();
                st.seen.insert((kind_id, slot));
            }
            st.scrape
        }
    };
    match k {
        Kind::Engine(m, _) => {
            if !value.is_finite() {
                b.missing();
                return Ok(());
            }
            b.push_engine(slot, m, t, value, n, line)
        }
        Kind::Device(m, factor) => {
            if st.pending.len() <= slot {
                st.pending.resize_with(slot + 1, Pending::default);
            }
            if st.pending[slot].active && st.pending[slot].t != t {
                flush(b, st, slot)?;
            }
            let p = &mut st.pending[slot];
            if !p.active {
                *p = Pending {
                    t,
                    active: true,
                    ..std::mem::take(p)
                };
                p.text.clear();
            }
            let v = (value.is_finite() && value >= 0.0).then_some(value * factor);
            match m {
                Mem::Used => p.used = v,
                Mem::Free => p.free = v,
                Mem::Total => p.total = v,
                Mem::Reserved => p.reserved = v,
            }
            // The used line is the sample's provenance; else the first memory line.
            if m == Mem::Used || p.text.is_empty() && !p.has_used_text {
                p.text.clear();
                p.text.extend_from_slice(line);
                p.line = n;
                p.has_used_text = m == Mem::Used;
            }
            Ok(())
        }
    }
}

fn flush(b: &mut Builder, st: &mut State, slot: usize) -> Result<(), SeriesError> {
    let Some(p) = st.pending.get_mut(slot) else {
        return Ok(());
    };
    if !p.active {
        return Ok(());
    }
    p.active = false;
    let reserved = p.reserved.unwrap_or(0.0);
    let used = p
        .used
        .or_else(|| Some(p.total? - p.free? - reserved))
        .filter(|&u| u >= 0.0);
    let total = p.total.or_else(|| Some(p.used? + p.free? + reserved));
    let (t, line) = (p.t, p.line);
    let text = std::mem::take(&mut p.text);
    p.used = None;
    p.free = None;
    p.total = None;
    p.reserved = None;
    p.has_used_text = false;
    let result = match used {
        Some(u) => b.push_device(
            slot,
            t,
            u.round() as u64,
            total.map(|x| x.round() as u64),
            line,
            text.as_slice(),
        ),
        None => {
            b.missing();
            Ok(())
        }
    };
    if let Some(p) = st.pending.get_mut(slot) {
        p.text = text;
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn read_str(text: &str) -> SeriesSet {
        read(text.as_bytes(), &Arc::from("m.prom")).unwrap()
    }

    #[test]
    fn dcgm_with_timestamps_assembles_used_free_total() {
        let set = read_str(
            "# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).\n\
             # TYPE DCGM_FI_DEV_FB_FREE gauge\n\
             DCGM_FI_DEV_FB_FREE{gpu=\"0\",UUID=\"GPU-a\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node1\"} 29214 1757284401000\n\
             DCGM_FI_DEV_FB_FREE{gpu=\"1\",UUID=\"GPU-b\",device=\"nvidia1\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node1\"} 80000 1757284401000\n\
             # HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\n\
             # TYPE DCGM_FI_DEV_FB_USED gauge\n\
             DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-a\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node1\"} 52345 1757284401000\n\
             DCGM_FI_DEV_FB_USED{gpu=\"1\",UUID=\"GPU-b\",device=\"nvidia1\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node1\"} 1559 1757284401000\n\
             DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-a\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node1\"} 60000 1757284416000\n",
        );
        assert_eq!(set.devices.len(), 2);
        let d0 = &set.devices[0];
        assert_eq!(
            (
                d0.index,
                d0.uuid.as_deref(),
                d0.name.as_deref(),
                d0.host.as_deref()
            ),
            (
                0,
                Some("GPU-a"),
                Some("NVIDIA H100 80GB HBM3"),
                Some("node1")
            )
        );
        assert_eq!(d0.used.values(), &[52345 << 20, 60000 << 20]);
        assert_eq!(d0.used.times(), &[1_757_284_401_000, 1_757_284_416_000]);
        assert_eq!(d0.total_bytes, Some((52345 + 29214) << 20));
        assert_eq!(d0.used.line(0), Some(7), "provenance is the FB_USED line");
        assert_eq!(set.inputs[0].clock, Clock::Wall);
    }

    #[test]
    fn scrapes_without_timestamps_are_numbered() {
        let scrape = |used: u32| {
            format!(
                "# TYPE DCGM_FI_DEV_FB_USED gauge\nDCGM_FI_DEV_FB_USED{{gpu=\"0\"}} {used}\n\
                 # TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{engine=\"0\",model_name=\"m\"}} 3.0\n"
            )
        };
        let set = read_str(&format!("{}{}{}", scrape(100), scrape(200), scrape(300)));
        assert_eq!(set.devices[0].used.times(), &[0, 1, 2]);
        assert_eq!(
            set.devices[0].used.values(),
            &[100 << 20, 200 << 20, 300 << 20]
        );
        assert_eq!(set.engines[0].requests_waiting.times(), &[0, 1, 2]);
        assert_eq!(set.engines[0].label, "vllm engine=0 model=m");
        assert_eq!(set.inputs[0].clock, Clock::Sequence);
    }

    #[test]
    fn date_lines_between_scrapes_give_wall_time() {
        let set = read_str(
            "2025-09-07T22:33:21Z\nDCGM_FI_DEV_FB_USED{gpu=\"0\"} 100\n# 2025-09-07T22:33:36Z\nDCGM_FI_DEV_FB_USED{gpu=\"0\"} 200\n",
        );
        assert_eq!(
            set.devices[0].used.times(),
            &[1_757_284_401_000, 1_757_284_416_000]
        );
    }

    #[test]
    fn label_escapes_nan_inf_and_bytes_metrics() {
        let s = parse_sample(
            br#"nvidia_gpu_memory_used_bytes{name="a \"quoted\" \\ name\nx",uuid="GPU-1"} 1.5e9"#,
            |_| true,
        )
        .unwrap();
        assert_eq!(s.labels.model.as_deref(), Some("a \"quoted\" \\ name\nx"));
        assert_eq!(s.value, 1.5e9);
        assert!(
            parse_sample(b"vllm:kv_cache_usage_perc NaN", |_| true)
                .unwrap()
                .value
                .is_nan()
        );
        assert_eq!(
            parse_sample(b"x +Inf 123", |_| true).unwrap().ts,
            Some(123.0)
        );
        assert!(parse_sample(b"x{a=\"1\"", |_| true).is_err());
        assert!(parse_sample(b"Traceback (most recent call last):", |_| true).is_err());
        assert_eq!(number(b"1757284401000"), Some(1757284401000.0));
        assert_eq!(number(b"12345678901234567890"), Some(1.2345678901234567e19));
        assert_eq!(number(b"4.2e9"), Some(4.2e9));
        let set = read_str(
            "nvidia_gpu_memory_used_bytes{minor_number=\"2\",uuid=\"GPU-1\"} 1073741824\nnvidia_gpu_memory_total_bytes{minor_number=\"2\",uuid=\"GPU-1\"} 4294967296\nDCGM_FI_DEV_FB_USED{gpu=\"2\"} NaN\n",
        );
        assert_eq!(set.devices[0].index, 2);
        assert_eq!(set.devices[0].used.values(), &[1 << 30]);
        assert_eq!(set.devices[0].total_bytes, Some(4 << 30));
    }

    #[test]
    fn vllm_engine_metrics() {
        let set = read_str(
            "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"llama\"} 0.97 1757284401000\n\
             vllm:num_requests_running{engine=\"0\",model_name=\"llama\"} 48 1757284401000\n\
             vllm:num_preemptions_total{engine=\"0\",model_name=\"llama\"} 12 1757284401000\n\
             vllm:time_to_first_token_seconds_bucket{le=\"0.001\",engine=\"0\"} 0 1757284401000\n",
        );
        let e = &set.engines[0];
        assert_eq!(e.kv_usage.values(), &[0.97]);
        assert_eq!(e.requests_running.values(), &[48.0]);
        assert_eq!(e.preemptions.values(), &[12.0]);
        assert!(set.devices.is_empty());
    }

    #[test]
    fn other_metrics_only_is_an_empty_error_with_their_names() {
        let err = read(
            "# TYPE node_load1 gauge\nnode_load1 0.5\n".as_bytes(),
            &Arc::from("m.prom"),
        )
        .unwrap_err();
        match err {
            SeriesError::Empty { help: Some(h), .. } => assert!(h.contains("node_load1"), "{h}"),
            other => panic!("{other:?}"),
        }
    }
}
