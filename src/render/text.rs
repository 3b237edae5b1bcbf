//! Small pieces of wording shared by the renderers, so every format says the same thing the
//! same way.

use crate::diagnosis::report::{EvidenceItem, IncidentReport, Location, Summary};
use crate::facts::units::format_bytes;

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

/// `0, 1, 3`.
fn join_ranks(ranks: &[u32]) -> String {
    ranks
        .iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// ` across ranks 0, 1`, or nothing.
pub(crate) fn ranks(r: &IncidentReport) -> String {
    if r.ranks.len() > 1 {
        format!(" across ranks {}", join_ranks(&r.ranks))
    } else {
        String::new()
    }
}

/// `also seen in rank1.log:378, rank2.log:378 (incidents 2, 3; ranks 0, 1, 2, 3): same
/// fingerprint` under the first incident of a group that shares a fingerprint.
pub(crate) fn also_seen(first: &IncidentReport, repeats: &[&IncidentReport]) -> String {
    let places: Vec<String> = repeats.iter().map(|r| location(&r.location)).collect();
    let ids: Vec<String> = repeats.iter().map(|r| r.id.to_string()).collect();
    let mut ranks: Vec<u32> = std::iter::once(first)
        .chain(repeats.iter().copied())
        .flat_map(|r| r.ranks.iter().copied())
        .collect();
    ranks.sort_unstable();
    ranks.dedup();
    let ranks = if ranks.len() > 1 {
        format!("; ranks {}", join_ranks(&ranks))
    } else {
        String::new()
    };
    format!(
        "also seen in {} ({} {}{ranks}): same fingerprint",
        places.join(", "),
        if ids.len() == 1 {
            "incident"
        } else {
            "incidents"
        },
        ids.join(", ")
    )
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

/// Display columns of `s` (one per character: the text oomdoctor prints is narrow).
pub(crate) fn cols(s: &str) -> usize {
    s.chars().count()
}

/// Units kept on the line of the number before them when wrapping.
const UNITS: &[&str] = &[
    "B", "KiB", "MiB", "GiB", "TiB", "KB", "MB", "GB", "TB", "bytes", "tokens", "steps", "s", "ms",
    "min", "h", "%",
];

/// Word-wraps `text` into lines of at most `width` columns, the first of which starts
/// `first` columns in and the others `indent` columns in. A word longer than a line stays
/// whole on a line of its own. Returns the lines without their indentation.
pub(crate) fn wrap(text: &str, width: usize, first: usize, indent: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    let mut room = width.saturating_sub(first).max(20);
    // A number and its unit (`1.96 GiB`) stay on one line.
    let mut words: Vec<String> = Vec::new();
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        let unit = UNITS.contains(&word.trim_end_matches([',', '.', ';', ':', ')']));
        match words.last_mut() {
            Some(prev) if unit && prev.ends_with(|c: char| c.is_ascii_digit()) => {
                prev.push(' ');
                prev.push_str(word);
            }
            _ => words.push(word.to_string()),
        }
    }
    for word in &words {
        if line.is_empty() {
            line.push_str(word);
        } else if cols(&line) + 1 + cols(word) <= room {
            line.push(' ');
            line.push_str(word);
        } else {
            lines.push(std::mem::take(&mut line));
            room = width.saturating_sub(indent).max(20);
            line.push_str(word);
        }
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_fits_words_into_the_width() {
        let t = "eight point four seven GiB sat reserved but unallocated when a request failed";
        let lines = wrap(t, 30, 10, 4);
        assert!(cols(&lines[0]) <= 20, "{lines:?}");
        assert!(lines[1..].iter().all(|l| cols(l) <= 26), "{lines:?}");
        assert_eq!(lines.join(" "), t);
        assert_eq!(wrap("", 80, 0, 0), vec![String::new()]);
        let long = "a".repeat(50);
        assert_eq!(wrap(&long, 30, 0, 0), vec![long.clone()]);
    }
}
