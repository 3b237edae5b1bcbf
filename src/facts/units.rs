//! Byte sizes as engines print them, and as we print them back.
//!
//! Every engine formats sizes its own way (see `ENGINE-MESSAGES.md` §0.4): PyTorch's
//! `format_size` prints `2.00 GiB` or `512 bytes`, vLLM prints `11.76GiB` with no space,
//! TGI prints decimal `24.00GB`, SGLang prints GiB values labelled `GB`, the kernel prints
//! `123456kB` meaning KiB. This module turns all of them into exact-as-possible byte counts,
//! so nothing downstream ever compares numbers in different units.
//!
//! The one ambiguity is the SI-looking suffix (`KB`, `MB`, `GB`): most ML tools compute it
//! with 1024 anyway. Callers say which base they know the producer used with [`SiBase`].

/// How to read `KB`/`MB`/`GB`/`TB` suffixes, which producers use inconsistently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SiBase {
    /// Powers of 1024 (PyTorch MPS, SGLang, DeepSpeed, llama.cpp's 2023 `MB`, the kernel's `kB`).
    Binary,
    /// Powers of 1000 (TGI's launcher `human_size`).
    Decimal,
}

const KIB: f64 = 1024.0;

/// Multiplier for a unit suffix, or `None` if the suffix is not a size unit.
///
/// Matching is case-insensitive on the letters (vLLM 0.6 printed `Gib`), and accepts the
/// spelled-out `bytes`/`byte`/`B`.
pub fn unit_multiplier(unit: &str, si: SiBase) -> Option<f64> {
    let u = unit.trim();
    let lower = u.to_ascii_lowercase();
    let si_k = match si {
        SiBase::Binary => KIB,
        SiBase::Decimal => 1000.0,
    };
    Some(match lower.as_str() {
        "" | "b" | "byte" | "bytes" => 1.0,
        "kib" | "ki" => KIB,
        "mib" | "mi" => KIB * KIB,
        "gib" | "gi" => KIB * KIB * KIB,
        "tib" | "ti" => KIB * KIB * KIB * KIB,
        "pib" => KIB.powi(5),
        "kb" | "k" => si_k,
        "mb" | "m" => si_k * si_k,
        "gb" | "g" => si_k * si_k * si_k,
        "tb" | "t" => si_k.powi(4),
        "pb" => si_k.powi(5),
        _ => return None,
    })
}

/// Parses a number with thousands separators (`1,793,232`) or decimals (`11.76`).
pub fn parse_number(text: &str) -> Option<f64> {
    let t = text.trim();
    if t.is_empty() {
        return None;
    }
    let cleaned: String = if t.contains(',') {
        // Only accept commas as thousands separators: `1,234` or `1,234,567.5`.
        let int_part = t.split('.').next().unwrap_or(t);
        let groups: Vec<&str> = int_part.trim_start_matches('-').split(',').collect();
        let well_formed = groups.len() > 1
            && !groups[0].is_empty()
            && groups[0].len() <= 3
            && groups[1..].iter().all(|g| g.len() == 3);
        if !well_formed {
            return None;
        }
        t.replace(',', "")
    } else {
        t.to_string()
    };
    let v: f64 = cleaned.parse().ok()?;
    v.is_finite().then_some(v)
}

/// Parses `"<number> <unit>"` or `"<number><unit>"` into bytes.
///
/// ```
/// use oomdoctor::facts::units::{parse_size, SiBase};
/// assert_eq!(parse_size("2.00 GiB", SiBase::Binary), Some(2 * 1024 * 1024 * 1024));
/// assert_eq!(parse_size("512 bytes", SiBase::Binary), Some(512));
/// assert_eq!(parse_size("24.00GB", SiBase::Decimal), Some(24_000_000_000));
/// ```
pub fn parse_size(text: &str, si: SiBase) -> Option<u64> {
    let t = text.trim();
    let split = t
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_digit() || *c == '.' || *c == ',' || *c == '-' || *c == '+'))
        .map(|(i, _)| i)
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n = parse_number(num)?;
    let m = unit_multiplier(unit, si)?;
    to_bytes(n * m)
}

/// Parses a number and a separately captured unit.
pub fn size_from_parts(number: &str, unit: &str, si: SiBase) -> Option<u64> {
    let n = parse_number(number)?;
    to_bytes(n * unit_multiplier(unit, si)?)
}

/// Converts a value in GiB (as vLLM and SGLang print) to bytes.
pub fn gib_to_bytes(gib: f64) -> Option<u64> {
    to_bytes(gib * KIB * KIB * KIB)
}

/// Converts a value in MiB (llama.cpp, nvidia-smi) to bytes.
pub fn mib_to_bytes(mib: f64) -> Option<u64> {
    to_bytes(mib * KIB * KIB)
}

fn to_bytes(v: f64) -> Option<u64> {
    if !v.is_finite() || v < 0.0 {
        return None;
    }
    // Values printed with two decimals lose up to 0.005 of a unit; rounding to the nearest
    // byte is the honest reconstruction. A size of an exbibyte or more is no memory any
    // machine has (`1e308 MiB` in a hostile log): it is not read as a size at all, rather
    // than saturated and shown as "16384 PiB".
    if v >= MAX_SIZE_BYTES as f64 {
        None
    } else {
        Some(v.round() as u64)
    }
}

/// Sizes from 1 EiB up are refused as absurd (see `to_bytes`).
pub const MAX_SIZE_BYTES: u64 = 1 << 60;

/// Formats bytes the way PyTorch does (binary units, two decimals), which is what users
/// recognise from their tracebacks: `512 bytes`, `20.00 MiB`, `2.00 GiB`, `1.50 TiB`.
pub fn format_bytes(bytes: u64) -> String {
    format_bytes_f(bytes as f64)
}

/// [`format_bytes`] for values that may be fractional or negative (differences, slopes).
pub fn format_bytes_f(bytes: f64) -> String {
    if !bytes.is_finite() {
        return "?".to_string();
    }
    let sign = if bytes < 0.0 { "-" } else { "" };
    let b = bytes.abs();
    if b < 1024.0 {
        return format!("{sign}{} bytes", b.round() as u64);
    }
    let units = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b / KIB;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < units.len() {
        v /= KIB;
        i += 1;
    }
    format!("{sign}{v:.2} {}", units[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_sizes_are_not_sizes() {
        // Issue 14: `1e308 MiB` was saturated and shown as "16384 PiB".
        assert_eq!(size_from_parts("1e308", "MiB", SiBase::Binary), None);
        assert_eq!(parse_size("99999999999999999999 MiB", SiBase::Binary), None);
        assert_eq!(parse_size("2048 PiB", SiBase::Binary), None);
        assert_eq!(parse_size("1023 PiB", SiBase::Binary), Some(1023 << 50));
    }

    #[test]
    fn parses_every_producer_format() {
        let gib = 1u64 << 30;
        let mib = 1u64 << 20;
        let cases: &[(&str, SiBase, u64)] = &[
            ("2.00 GiB", SiBase::Binary, 2 * gib),
            ("0 bytes", SiBase::Binary, 0),
            ("1024 bytes", SiBase::Binary, 1024),
            ("20.00 MiB", SiBase::Binary, 20 * mib),
            ("1.50 KiB", SiBase::Binary, 1536),
            (
                "11.76GiB",
                SiBase::Binary,
                (11.76 * gib as f64).round() as u64,
            ),
            ("3.5Gib", SiBase::Binary, (3.5 * gib as f64) as u64),
            ("24.00GB", SiBase::Decimal, 24_000_000_000),
            (
                "2.93GiB",
                SiBase::Binary,
                (2.93 * gib as f64).round() as u64,
            ),
            ("123456kB", SiBase::Binary, 123456 * 1024),
            (
                "13535.27 GiB",
                SiBase::Binary,
                (13535.27 * gib as f64).round() as u64,
            ),
            ("1,234 MiB", SiBase::Binary, 1234 * mib),
        ];
        for (text, si, want) in cases {
            assert_eq!(parse_size(text, *si), Some(*want), "{text}");
        }
    }

    #[test]
    fn rejects_non_sizes() {
        assert_eq!(parse_size("", SiBase::Binary), None);
        assert_eq!(parse_size("GiB", SiBase::Binary), None);
        assert_eq!(parse_size("12 apples", SiBase::Binary), None);
        assert_eq!(parse_size("1,23 MiB", SiBase::Binary), None);
        assert_eq!(parse_size("-1 GiB", SiBase::Binary), None);
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(parse_number("1,793,232"), Some(1_793_232.0));
        assert_eq!(parse_number("44560"), Some(44560.0));
        assert_eq!(parse_number("1,2,3"), None);
    }

    #[test]
    fn formats_like_pytorch() {
        assert_eq!(format_bytes(512), "512 bytes");
        assert_eq!(format_bytes(2 << 30), "2.00 GiB");
        assert_eq!(format_bytes(20 << 20), "20.00 MiB");
        assert_eq!(format_bytes_f(-1536.0), "-1.50 KiB");
    }
}
