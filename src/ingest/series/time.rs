//! Timestamps of series samples, as the producers write them.
//!
//! nvidia-smi writes local wall time without a zone (`2025/09/07 22:33:21.481`), Prometheus
//! writes epoch milliseconds, OpenMetrics epoch seconds, JSON exporters RFC 3339 or epoch
//! seconds/milliseconds/microseconds, pandas `2025-09-07 22:33:21.481000`. Everything is
//! reduced to milliseconds since the Unix epoch (`i64`).
//!
//! Times without a zone are kept as if they were UTC and flagged `naive`, never shifted into
//! the analysing machine's zone: a log from the same machine is naive in the same way, so the
//! two still line up, and the caller can say "assumed UTC" where it matters.
//!
//! The common shapes (`YYYY-MM-DD HH:MM:SS[.fff][Z|±HH:MM]`, with `/` or `-` and ` ` or `T`)
//! are read by a byte-level fast path that caches the last date's day number, because a
//! 10-million-row nvidia-smi log repeats the same date for a day of rows; the calendar
//! arithmetic is chrono's. Everything else goes through chrono's parsers.

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime};

/// A parsed timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stamp {
    /// Milliseconds since the Unix epoch. `naive`: the text had no zone (read as UTC).
    Wall { ms: i64, naive: bool },
    /// Milliseconds since some unknown origin (an `elapsed` column: small numbers).
    Relative { ms: i64 },
}

impl Stamp {
    #[cfg(test)]
    pub(crate) fn ms(self) -> i64 {
        match self {
            Stamp::Wall { ms, .. } | Stamp::Relative { ms } => ms,
        }
    }
}

/// The unit an epoch number is in, when a column name says so (`time_ms`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) enum EpochUnit {
    /// Decide by magnitude.
    #[default]
    Auto,
    Seconds,
    Millis,
    Micros,
    Nanos,
}

/// Numbers below this are durations since an unknown start, not epoch seconds (they would
/// be dates before March 1973, which no GPU log has).
const RELATIVE_LIMIT: f64 = 1e8;

/// Reads timestamps, caching the day number of the last date seen.
#[derive(Debug, Default)]
pub(crate) struct TimeParser {
    last_date: [u8; 10],
    last_days: i64,
    has_date: bool,
}

impl TimeParser {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Parses any supported timestamp; `None` if it is not one.
    pub(crate) fn parse(&mut self, text: &[u8], unit: EpochUnit) -> Option<Stamp> {
        let text = trim(text);
        if text.is_empty() {
            return None;
        }
        if let Some(s) = self.fast(text) {
            return Some(s);
        }
        let first = *text.first()?;
        if first.is_ascii_digit() || first == b'-' || first == b'+' || first == b'.' {
            if let Some(s) = parse_epoch(text, unit) {
                return Some(s);
            }
        }
        let s = std::str::from_utf8(text).ok()?;
        slow(s)
    }

    /// `YYYY?MM?DD?HH:MM:SS[.f+][Z|z|±HH:MM|±HHMM]` with `?` one of `-`/`/` then ` `/`T`.
    fn fast(&mut self, b: &[u8]) -> Option<Stamp> {
        if b.len() < 19 {
            return None;
        }
        let sep = b[4];
        if !(sep == b'-' || sep == b'/') || b[7] != sep || !(b[10] == b' ' || b[10] == b'T') {
            return None;
        }
        if b[13] != b':' || b[16] != b':' {
            return None;
        }
        let days = if self.has_date && b[..10] == self.last_date {
            self.last_days
        } else {
            let y = digits(&b[0..4])? as i32;
            let m = digits(&b[5..7])?;
            let d = digits(&b[8..10])?;
            let date = NaiveDate::from_ymd_opt(y, m, d)?;
            // 719_163 = days from 0001-01-01 (CE day 1) to 1970-01-01.
            let days = i64::from(date.num_days_from_ce()) - 719_163;
            self.last_date.copy_from_slice(&b[..10]);
            self.last_days = days;
            self.has_date = true;
            days
        };
        let h = digits(&b[11..13])?;
        let mi = digits(&b[14..16])?;
        let s = digits(&b[17..19])?.min(59); // a leap second reads as :59
        if h > 23 || mi > 59 {
            return None;
        }
        let mut ms = days * 86_400_000 + (h * 3_600_000 + mi * 60_000 + s * 1000) as i64;
        let mut rest = &b[19..];
        if let Some((&c, tail)) = rest.split_first() {
            if c == b'.' || c == b',' {
                let n = tail.iter().take_while(|c| c.is_ascii_digit()).count();
                if n == 0 {
                    return None;
                }
                // Milliseconds from the first three digits; finer digits are dropped.
                let mut frac = 0i64;
                for i in 0..3 {
                    frac = frac * 10
                        + tail
                            .get(i)
                            .filter(|_| i < n)
                            .map_or(0, |c| i64::from(c - b'0'));
                }
                ms += frac;
                rest = &tail[n..];
            }
        }
        let rest = trim(rest);
        match rest {
            [] => Some(Stamp::Wall { ms, naive: true }),
            [b'Z' | b'z'] => Some(Stamp::Wall { ms, naive: false }),
            [b'U', b'T', b'C'] => Some(Stamp::Wall { ms, naive: false }),
            [sign @ (b'+' | b'-'), tz @ ..] => {
                let (oh, om) = match tz {
                    [a, b2, b':', c, d] => (digits(&[*a, *b2])?, digits(&[*c, *d])?),
                    [a, b2, c, d] => (digits(&[*a, *b2])?, digits(&[*c, *d])?),
                    [a, b2] => (digits(&[*a, *b2])?, 0),
                    _ => return None,
                };
                let off = (oh * 3_600_000 + om * 60_000) as i64;
                let ms = if *sign == b'+' { ms - off } else { ms + off };
                Some(Stamp::Wall { ms, naive: false })
            }
            _ => None,
        }
    }
}

/// Epoch numbers: seconds, milliseconds, microseconds or nanoseconds by magnitude (or by the
/// column's stated unit); small numbers are relative seconds.
pub(crate) fn parse_epoch(text: &[u8], unit: EpochUnit) -> Option<Stamp> {
    let s = std::str::from_utf8(text).ok()?;
    let v: f64 = s.parse().ok()?;
    epoch_from_f64(v, unit)
}

/// See [`parse_epoch`].
pub(crate) fn epoch_from_f64(v: f64, unit: EpochUnit) -> Option<Stamp> {
    if !v.is_finite() || v < 0.0 {
        return None;
    }
    let factor_ms = match unit {
        EpochUnit::Seconds => 1e3,
        EpochUnit::Millis => 1.0,
        EpochUnit::Micros => 1e-3,
        EpochUnit::Nanos => 1e-6,
        EpochUnit::Auto => {
            if v < RELATIVE_LIMIT {
                return Some(Stamp::Relative {
                    ms: (v * 1e3).round() as i64,
                });
            } else if v < 1e11 {
                1e3
            } else if v < 1e14 {
                1.0
            } else if v < 1e17 {
                1e-3
            } else {
                1e-6
            }
        }
    };
    let ms = v * factor_ms;
    // Explicitly-unitted small values are still relative (an `elapsed_ms` column).
    if ms < RELATIVE_LIMIT * 1e3 {
        return Some(Stamp::Relative {
            ms: ms.round() as i64,
        });
    }
    if ms > 1e15 {
        return None; // beyond year 33658: not a timestamp
    }
    Some(Stamp::Wall {
        ms: ms.round() as i64,
        naive: false,
    })
}

/// Shapes the fast path does not take: RFC 3339 oddities, RFC 2822, ISO without seconds.
fn slow(s: &str) -> Option<Stamp> {
    if let Ok(dt) = DateTime::parse_from_rfc3339(s) {
        return Some(Stamp::Wall {
            ms: dt.timestamp_millis(),
            naive: false,
        });
    }
    if let Ok(dt) = DateTime::parse_from_rfc2822(s) {
        return Some(Stamp::Wall {
            ms: dt.timestamp_millis(),
            naive: false,
        });
    }
    for fmt in [
        "%Y-%m-%d %H:%M:%S%.f %z",
        "%Y-%m-%dT%H:%M:%S%.f%z",
        "%Y-%m-%d %H:%M:%S%.f%z",
    ] {
        if let Ok(dt) = DateTime::parse_from_str(s, fmt) {
            return Some(Stamp::Wall {
                ms: dt.timestamp_millis(),
                naive: false,
            });
        }
    }
    for fmt in [
        "%Y-%m-%d %H:%M",
        "%Y-%m-%dT%H:%M",
        "%Y/%m/%d %H:%M",
        "%Y%m%dT%H%M%S",
        "%Y%m%d %H%M%S",
    ] {
        if let Ok(dt) = NaiveDateTime::parse_from_str(s, fmt) {
            return Some(Stamp::Wall {
                ms: dt.and_utc().timestamp_millis(),
                naive: true,
            });
        }
    }
    None
}

/// Reads a timestamp as logs print it, to line a log up with a series: anything
/// [`TimeParser`] reads (wall times only), and the yearless stamps of vLLM
/// (`08-22 20:52:36`), glog (`W0822 20:52:36.123456`) and syslog (`Aug 22 20:52:36`),
/// which take `year`. Returns the time and whether it had no zone (read as UTC, like the
/// series' own naive times, so two naive times from one machine compare correctly).
pub fn parse_log_time(text: &str, year: Option<i32>) -> Option<(DateTime<chrono::Utc>, bool)> {
    let text = text
        .trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .trim();
    if let Some(Stamp::Wall { ms, naive }) =
        TimeParser::new().parse(text.as_bytes(), EpochUnit::Auto)
    {
        return Some((DateTime::from_timestamp_millis(ms)?, naive));
    }
    let year = year?;
    // glog: a level letter, then MMDD.
    let glog = text
        .strip_prefix(['I', 'W', 'E', 'F'])
        .filter(|r| r.len() > 4 && r.as_bytes()[..4].iter().all(u8::is_ascii_digit))
        .map(|r| format!("{}-{} {}", &r[..2], &r[2..4], r[4..].trim()));
    let candidate = glog.as_deref().unwrap_or(text);
    for fmt in [
        "%Y %m-%d %H:%M:%S%.f",
        "%Y %b %d %H:%M:%S%.f",
        "%Y %b %e %H:%M:%S%.f",
    ] {
        if let Ok(dt) = NaiveDateTime::parse_from_str(&format!("{year} {candidate}"), fmt) {
            return Some((dt.and_utc(), true));
        }
    }
    None
}

fn digits(b: &[u8]) -> Option<u32> {
    let mut v = 0u32;
    for &c in b {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + u32::from(c - b'0');
    }
    Some(v)
}

pub(crate) fn trim(b: &[u8]) -> &[u8] {
    let start = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &b[start..end.max(start)]
}

/// Formats epoch milliseconds as RFC 3339 UTC (`2025-09-07T22:33:21.481Z`; whole seconds
/// without the fraction).
pub(crate) fn rfc3339(ms: i64) -> String {
    match DateTime::from_timestamp_millis(ms) {
        Some(dt) => {
            let fmt = if ms.rem_euclid(1000) == 0 {
                chrono::SecondsFormat::Secs
            } else {
                chrono::SecondsFormat::Millis
            };
            dt.to_rfc3339_opts(fmt, true)
        }
        None => format!("{ms} ms"),
    }
}

/// Formats epoch milliseconds as the input wrote the time: RFC 3339 UTC for a zoned time
/// (`2025-09-07T22:33:21.481Z`), the same without the `Z` for a time read without a zone
/// (`naive`: nvidia-smi's local wall time), which must not be shown as if it were UTC.
pub fn format_wall(ms: i64, naive: bool) -> String {
    let s = rfc3339(ms);
    match s.strip_suffix('Z') {
        Some(bare) if naive => bare.to_string(),
        _ => s,
    }
}

/// Reads a time written by [`format_wall`] (or any RFC 3339 / ISO 8601 time): the instant
/// (naive times read as UTC) and whether it had no zone.
pub fn read_wall(text: &str) -> Option<(DateTime<chrono::Utc>, bool)> {
    match TimeParser::new().parse(text.trim().as_bytes(), EpochUnit::Auto)? {
        Stamp::Wall { ms, naive } => Some((DateTime::from_timestamp_millis(ms)?, naive)),
        Stamp::Relative { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wall(s: &str) -> (i64, bool) {
        match TimeParser::new().parse(s.as_bytes(), EpochUnit::Auto) {
            Some(Stamp::Wall { ms, naive }) => (ms, naive),
            other => panic!("{s}: {other:?}"),
        }
    }

    const T0: i64 = 1_757_284_401_000; // 2025-09-07T22:33:21Z

    #[test]
    fn nvidia_smi_timestamps_are_naive_milliseconds() {
        assert_eq!(wall("2025/09/07 22:33:21.481"), (T0 + 481, true));
        assert_eq!(wall(" 2025/09/07 22:33:21.481 "), (T0 + 481, true));
    }

    #[test]
    fn iso_and_rfc3339_shapes() {
        assert_eq!(wall("2025-09-07T22:33:21Z"), (T0, false));
        assert_eq!(wall("2025-09-07T22:33:21.5Z"), (T0 + 500, false));
        assert_eq!(wall("2025-09-07T22:33:21.123456789Z"), (T0 + 123, false));
        assert_eq!(wall("2025-09-08T00:33:21+02:00"), (T0, false));
        assert_eq!(wall("2025-09-07T20:33:21-0200"), (T0, false));
        assert_eq!(wall("2025-09-07 22:33:21,481"), (T0 + 481, true));
        assert_eq!(wall("2025-09-07 22:33:21.481000"), (T0 + 481, true));
        assert_eq!(wall("2025-09-07 22:33:21 UTC"), (T0, false));
        assert_eq!(wall("Sun, 07 Sep 2025 22:33:21 +0000"), (T0, false));
        assert_eq!(wall("2025-09-07 22:33"), (T0 - 21_000, true));
    }

    #[test]
    fn the_date_cache_follows_date_changes() {
        let mut p = TimeParser::new();
        let a = p
            .parse(b"2025/09/07 23:59:59.000", EpochUnit::Auto)
            .unwrap()
            .ms();
        let b = p
            .parse(b"2025/09/08 00:00:00.000", EpochUnit::Auto)
            .unwrap()
            .ms();
        assert_eq!(b - a, 1000);
    }

    #[test]
    fn epoch_numbers_by_magnitude() {
        assert_eq!(wall("1757284401"), (T0, false));
        assert_eq!(wall("1757284401.25"), (T0 + 250, false));
        assert_eq!(wall("1757284401000"), (T0, false));
        assert_eq!(wall("1757284401000000"), (T0, false));
        assert_eq!(wall("1757284401000000000"), (T0, false));
        let mut p = TimeParser::new();
        assert_eq!(
            p.parse(b"12.5", EpochUnit::Auto),
            Some(Stamp::Relative { ms: 12_500 })
        );
        assert_eq!(
            p.parse(b"12500", EpochUnit::Millis),
            Some(Stamp::Relative { ms: 12_500 })
        );
    }

    #[test]
    fn rejects_what_is_not_a_time() {
        let mut p = TimeParser::new();
        for s in [
            "",
            "abc",
            "2025/13/07 22:33:21.481",
            "2025/09/07 25:33:21",
            "-5",
            "NaN",
            "2025-09-07T22:33:21Q",
        ] {
            assert_eq!(p.parse(s.as_bytes(), EpochUnit::Auto), None, "{s}");
        }
    }

    #[test]
    fn log_times_with_and_without_a_year() {
        let at = |s: &str, y| parse_log_time(s, y).map(|(t, naive)| (t.timestamp_millis(), naive));
        assert_eq!(at("2025-09-07 22:33:21,481", None), Some((T0 + 481, true)));
        assert_eq!(at("[2025-09-07T22:33:21Z]", None), Some((T0, false)));
        assert_eq!(at("09-07 22:33:21", Some(2025)), Some((T0, true)));
        assert_eq!(
            at("W0907 22:33:21.481000", Some(2025)),
            Some((T0 + 481, true))
        );
        assert_eq!(at("Sep  7 22:33:21", Some(2025)), Some((T0, true)));
        assert_eq!(at("09-07 22:33:21", None), None);
        assert_eq!(
            at("12345.678901", Some(2025)),
            None,
            "dmesg uptime is not a wall time"
        );
    }

    #[test]
    fn formats_rfc3339() {
        assert_eq!(rfc3339(T0), "2025-09-07T22:33:21Z");
        assert_eq!(rfc3339(T0 + 481), "2025-09-07T22:33:21.481Z");
        // A time read without a zone is written without one, and reads back the same.
        assert_eq!(format_wall(T0 + 481, true), "2025-09-07T22:33:21.481");
        assert_eq!(format_wall(T0, false), "2025-09-07T22:33:21Z");
        for naive in [true, false] {
            let (t, n) = read_wall(&format_wall(T0 + 481, naive)).unwrap();
            assert_eq!((t.timestamp_millis(), n), (T0 + 481, naive));
        }
    }
}
