//! Small pieces of wording shared by the renderers, so every format says the same thing the
//! same way.

use crate::report::{EvidenceItem, IncidentReport, Location, Summary};
use crate::units::format_bytes;

/// `device-oom · GPU 1 · pytorch · phase backward (after 319 steps) · requested 1.96 GiB ·
/// seen 2× across ranks 0, 1`.
pub(crate) fn headline(r: &IncidentReport) -> String {
    let mut parts = vec![r.kind.clone()];
    if let Some(d) = r.device {
        parts.push(format!("GPU {d}"));
    }
    if r.engine != "unknown" {
        parts.push(r.engine.clone());
    }
    parts.push(format!("phase {}", phase(r)));
    if let Some(b) = r.requested_bytes {
        parts.push(format!("requested {}", format_bytes(b)));
    }
    if r.copies > 1 {
        parts.push(format!("seen {}×{}", r.copies, ranks(r)));
    }
    parts.join(" · ")
}

/// `backward (after 319 steps)`.
pub(crate) fn phase(r: &IncidentReport) -> String {
    let mut phase = r.phase.clone();
    if let Some(s) = r.facts.num("phase.steps_completed") {
        if s >= 1.0 {
            phase.push_str(&format!(" (after {} steps)", s as u64));
        }
    }
    phase
}

/// ` across ranks 0, 1`, or nothing.
pub(crate) fn ranks(r: &IncidentReport) -> String {
    if r.ranks.len() > 1 {
        format!(
            " across ranks {}",
            r.ranks
                .iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    } else {
        String::new()
    }
}

/// `+4`, `-1.5`.
pub(crate) fn weight(w: f64) -> String {
    let n = if w.fract() == 0.0 {
        format!("{}", w.abs() as i64)
    } else {
        format!("{:.1}", w.abs())
    };
    if w < 0.0 {
        format!("-{n}")
    } else {
        format!("+{n}")
    }
}

/// `crash.log:378`, or the first source's place.
pub(crate) fn place(e: &EvidenceItem) -> String {
    match e.line {
        Some(l) => format!("{}:{l}", e.input),
        None => e
            .sources
            .first()
            .map(|s| s.short())
            .unwrap_or_else(|| e.input.clone()),
    }
}

/// `crash.log:378` or `crash.log`.
pub(crate) fn location(l: &Location) -> String {
    match l.line {
        Some(n) => format!("{}:{n}", l.input),
        None => l.input.clone(),
    }
}

/// `1 incident`, `3 incidents`.
pub(crate) fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// `fragmentation 2, host-oom 1`.
pub(crate) fn by_cause(s: &Summary) -> String {
    s.by_cause
        .iter()
        .map(|(c, n)| format!("{c} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Bytes in GiB with two decimals (`79.25 GiB`), for charts and tables where one unit reads
/// best; below 1 GiB the usual binary unit.
pub(crate) fn gib(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
    } else {
        format_bytes(bytes)
    }
}

/// Cuts `s` to at most `max` bytes at a character boundary, marking the cut with `…`.
pub(crate) fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}
