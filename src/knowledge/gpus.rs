//! Common GPUs and their memory, and the parser of `--gpu`.
//!
//! `--gpu` takes a size (`24GiB`, `24GB`, `80g`: `GB` is read as GiB, as every ML tool
//! does), a name from [`GPUS`] (`rtx4090`, `h100`, `a100-40gb`, `NVIDIA GeForce RTX 4090`
//! as nvidia-smi prints it), and a count for multi-GPU runs (`2xh100`, `h100:2`,
//! `4x24GiB`).
//!
//! Engines size themselves from the total that CUDA reports, which is a little below the
//! marketed size (ECC and driver reservations: a "24 GB" RTX 4090 reports 23.65 GiB). The
//! table keeps the reported total where it is well known (from PyTorch's own OOM messages)
//! and otherwise estimates it as 98.5 % of the nominal size, which is within about 0.5 % of
//! the known cases. A size given explicitly is taken as that total, as is.
//!
//! Apple silicon has unified memory of many sizes, so its names need one
//! (`m3-max-64gb`); Metal lets the GPU wire about 75 % of it by default.

use crate::facts::units::{SiBase, parse_size};

use super::memory::GIB;

/// One GPU model.
#[derive(Debug)]
pub struct GpuModel {
    /// Display name.
    pub name: &'static str,
    /// Accepted names, compared after [`normalize`] (lower case, no spaces or dashes,
    /// vendor words removed).
    pub aliases: &'static [&'static str],
    /// Marketed memory per device, in GiB.
    pub nominal_gib: f64,
    /// Total memory CUDA reports, in GiB, where well known.
    pub reported_gib: Option<f64>,
    /// What to know about it (per-die devices, unified memory).
    pub note: Option<&'static str>,
}

const fn gpu(name: &'static str, aliases: &'static [&'static str], nominal_gib: f64) -> GpuModel {
    GpuModel {
        name,
        aliases,
        nominal_gib,
        reported_gib: None,
        note: None,
    }
}

const fn gpu_r(
    name: &'static str,
    aliases: &'static [&'static str],
    nominal_gib: f64,
    reported: f64,
) -> GpuModel {
    GpuModel {
        name,
        aliases,
        nominal_gib,
        reported_gib: Some(reported),
        note: None,
    }
}

const fn gpu_n(
    name: &'static str,
    aliases: &'static [&'static str],
    nominal_gib: f64,
    note: &'static str,
) -> GpuModel {
    GpuModel {
        name,
        aliases,
        nominal_gib,
        reported_gib: None,
        note: Some(note),
    }
}

/// The table. Aliases are already normalised.
pub const GPUS: &[GpuModel] = &[
    // NVIDIA data centre.
    gpu(
        "NVIDIA H100 80GB",
        &[
            "h100",
            "h10080gb",
            "h100sxm",
            "h100sxm5",
            "h100sxm580gb",
            "h10080gbhbm3",
            "h100pcie",
            "h100pcie80gb",
        ],
        80.0,
    ),
    gpu(
        "NVIDIA H100 NVL",
        &["h100nvl", "h10094gb", "h100nvl94gb"],
        94.0,
    ),
    gpu("NVIDIA H800", &["h800", "h80080gb"], 80.0),
    gpu("NVIDIA H20", &["h20", "h2096gb"], 96.0),
    gpu(
        "NVIDIA H200",
        &["h200", "h200141gb", "h200sxm", "h200nvl"],
        141.0,
    ),
    gpu("NVIDIA GH200 (96 GB HBM3)", &["gh200", "gh20096gb"], 96.0),
    gpu("NVIDIA GH200 (144 GB HBM3e)", &["gh200144gb"], 144.0),
    gpu("NVIDIA B200", &["b200", "b200180gb"], 180.0),
    gpu("NVIDIA B100", &["b100"], 180.0),
    gpu_n(
        "NVIDIA GB200 (per GPU)",
        &["gb200"],
        186.0,
        "a GB200 superchip has two GPUs; this is one of them",
    ),
    gpu("NVIDIA B300", &["b300", "gb300"], 288.0),
    gpu_r(
        "NVIDIA A100 80GB",
        &[
            "a100",
            "a10080gb",
            "a100sxm480gb",
            "a100pcie80gb",
            "a10080gbpcie",
            "a100sxm80gb",
        ],
        80.0,
        79.15,
    ),
    gpu_r(
        "NVIDIA A100 40GB",
        &["a10040gb", "a100sxm440gb", "a100pcie40gb", "a100sxm40gb"],
        40.0,
        39.39,
    ),
    gpu("NVIDIA A800 80GB", &["a800", "a80080gb"], 80.0),
    gpu("NVIDIA A10", &["a10", "a1024gb"], 24.0),
    gpu("NVIDIA A10G", &["a10g"], 24.0),
    gpu("NVIDIA A30", &["a30", "a3024gb"], 24.0),
    gpu("NVIDIA A40", &["a40", "a4048gb"], 48.0),
    gpu("NVIDIA A16 (per GPU)", &["a16"], 16.0),
    gpu("NVIDIA A2", &["a2"], 16.0),
    gpu("NVIDIA L4", &["l4", "l424gb"], 24.0),
    gpu("NVIDIA L20", &["l20"], 48.0),
    gpu("NVIDIA L40", &["l40", "l4048gb"], 48.0),
    gpu("NVIDIA L40S", &["l40s", "l40s48gb"], 48.0),
    gpu_r("NVIDIA T4", &["t4", "t416gb"], 16.0, 14.75),
    gpu(
        "NVIDIA V100 16GB",
        &["v10016gb", "v100sxm216gb", "v100pcie16gb"],
        16.0,
    ),
    gpu(
        "NVIDIA V100 32GB",
        &[
            "v10032gb",
            "v100sxm232gb",
            "v100pcie32gb",
            "v100s",
            "v100s32gb",
        ],
        32.0,
    ),
    gpu_r(
        "NVIDIA P100 16GB",
        &["p100", "p10016gb", "p100pcie16gb"],
        16.0,
        15.89,
    ),
    gpu("NVIDIA P40", &["p40"], 24.0),
    gpu_n(
        "NVIDIA K80 (per GPU)",
        &["k80"],
        12.0,
        "a K80 board has two GPUs of 12 GB each",
    ),
    // NVIDIA workstation.
    gpu_r("NVIDIA RTX A6000", &["rtxa6000", "a6000"], 48.0, 47.54),
    gpu("NVIDIA RTX A5000", &["rtxa5000", "a5000"], 24.0),
    gpu("NVIDIA RTX A4500", &["rtxa4500", "a4500"], 20.0),
    gpu("NVIDIA RTX A4000", &["rtxa4000", "a4000"], 16.0),
    gpu(
        "NVIDIA RTX 6000 Ada",
        &["rtx6000ada", "6000ada", "rtx6000adageneration"],
        48.0,
    ),
    gpu(
        "NVIDIA RTX 5000 Ada",
        &["rtx5000ada", "5000ada", "rtx5000adageneration"],
        32.0,
    ),
    gpu(
        "NVIDIA RTX 4000 Ada",
        &["rtx4000ada", "4000ada", "rtx4000adageneration"],
        20.0,
    ),
    gpu(
        "NVIDIA RTX PRO 6000 Blackwell",
        &["rtxpro6000", "rtxpro6000blackwell", "pro6000"],
        96.0,
    ),
    gpu(
        "NVIDIA Quadro RTX 8000",
        &["quadrortx8000", "rtx8000"],
        48.0,
    ),
    gpu("NVIDIA Quadro RTX 6000", &["quadrortx6000"], 24.0),
    // NVIDIA consumer.
    gpu("NVIDIA GeForce RTX 5090", &["rtx5090", "5090"], 32.0),
    gpu("NVIDIA GeForce RTX 5080", &["rtx5080", "5080"], 16.0),
    gpu("NVIDIA GeForce RTX 5070 Ti", &["rtx5070ti", "5070ti"], 16.0),
    gpu("NVIDIA GeForce RTX 5070", &["rtx5070", "5070"], 12.0),
    gpu(
        "NVIDIA GeForce RTX 5060 Ti 16GB",
        &["rtx5060ti16gb", "5060ti16gb"],
        16.0,
    ),
    gpu(
        "NVIDIA GeForce RTX 5060 Ti 8GB",
        &["rtx5060ti8gb", "5060ti8gb"],
        8.0,
    ),
    gpu_r(
        "NVIDIA GeForce RTX 4090",
        &["rtx4090", "4090", "rtx4090d", "4090d"],
        24.0,
        23.65,
    ),
    gpu(
        "NVIDIA GeForce RTX 4080",
        &["rtx4080", "4080", "rtx4080super", "4080super"],
        16.0,
    ),
    gpu(
        "NVIDIA GeForce RTX 4070 Ti SUPER",
        &["rtx4070tisuper", "4070tisuper"],
        16.0,
    ),
    gpu("NVIDIA GeForce RTX 4070 Ti", &["rtx4070ti", "4070ti"], 12.0),
    gpu(
        "NVIDIA GeForce RTX 4070",
        &["rtx4070", "4070", "rtx4070super", "4070super"],
        12.0,
    ),
    gpu(
        "NVIDIA GeForce RTX 4060 Ti 16GB",
        &["rtx4060ti16gb", "4060ti16gb"],
        16.0,
    ),
    gpu(
        "NVIDIA GeForce RTX 4060 Ti 8GB",
        &["rtx4060ti8gb", "4060ti8gb"],
        8.0,
    ),
    gpu("NVIDIA GeForce RTX 4060", &["rtx4060", "4060"], 8.0),
    gpu_r(
        "NVIDIA GeForce RTX 3090",
        &["rtx3090", "3090", "rtx3090ti", "3090ti"],
        24.0,
        23.69,
    ),
    gpu("NVIDIA GeForce RTX 3080 Ti", &["rtx3080ti", "3080ti"], 12.0),
    gpu(
        "NVIDIA GeForce RTX 3080 10GB",
        &["rtx308010gb", "308010gb"],
        10.0,
    ),
    gpu(
        "NVIDIA GeForce RTX 3080 12GB",
        &["rtx308012gb", "308012gb"],
        12.0,
    ),
    gpu(
        "NVIDIA GeForce RTX 3070",
        &["rtx3070", "3070", "rtx3070ti", "3070ti"],
        8.0,
    ),
    gpu("NVIDIA GeForce RTX 3060 Ti", &["rtx3060ti", "3060ti"], 8.0),
    gpu_r(
        "NVIDIA GeForce RTX 3060",
        &["rtx3060", "3060", "rtx306012gb"],
        12.0,
        11.76,
    ),
    gpu_r(
        "NVIDIA GeForce RTX 2080 Ti",
        &["rtx2080ti", "2080ti"],
        11.0,
        10.75,
    ),
    gpu("NVIDIA TITAN RTX", &["titanrtx"], 24.0),
    gpu("NVIDIA GeForce GTX 1080 Ti", &["gtx1080ti", "1080ti"], 11.0),
    // AMD.
    gpu("AMD Instinct MI300X", &["mi300x", "mi300"], 192.0),
    gpu("AMD Instinct MI325X", &["mi325x", "mi325"], 256.0),
    gpu("AMD Instinct MI355X", &["mi355x", "mi355", "mi350x"], 288.0),
    gpu_n(
        "AMD Instinct MI300A",
        &["mi300a"],
        128.0,
        "APU: the 128 GB is unified with the CPU",
    ),
    gpu_n(
        "AMD Instinct MI250X (per GCD)",
        &["mi250x", "mi250"],
        64.0,
        "each MI250/MI250X is two GCDs of 64 GB, seen as two devices",
    ),
    gpu("AMD Instinct MI210", &["mi210"], 64.0),
    gpu("AMD Instinct MI100", &["mi100"], 32.0),
    gpu("AMD Radeon RX 7900 XTX", &["rx7900xtx", "7900xtx"], 24.0),
    gpu("AMD Radeon RX 7900 XT", &["rx7900xt", "7900xt"], 20.0),
    gpu("AMD Radeon PRO W7900", &["w7900", "prow7900"], 48.0),
];

/// Names that exist in several memory sizes: the user has to say which.
const AMBIGUOUS: &[(&str, &[&str])] = &[
    ("v100", &["v100-16gb", "v100-32gb"]),
    ("4060ti", &["rtx4060ti-8gb", "rtx4060ti-16gb"]),
    ("rtx4060ti", &["rtx4060ti-8gb", "rtx4060ti-16gb"]),
    ("5060ti", &["rtx5060ti-8gb", "rtx5060ti-16gb"]),
    ("rtx5060ti", &["rtx5060ti-8gb", "rtx5060ti-16gb"]),
    ("3080", &["rtx3080-10gb", "rtx3080-12gb"]),
    ("rtx3080", &["rtx3080-10gb", "rtx3080-12gb"]),
    (
        "rtx6000",
        &["rtx6000-ada (48 GB)", "quadro-rtx-6000 (24 GB)"],
    ),
];

/// Why `--gpu` could not be understood.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum GpuError {
    #[error("unknown GPU `{spec}`")]
    #[diagnostic(code(oomdoctor::gpu::unknown), help("{help}"))]
    Unknown { spec: String, help: String },

    #[error("`{spec}` comes in several memory sizes: say which ({options})")]
    #[diagnostic(code(oomdoctor::gpu::ambiguous))]
    Ambiguous { spec: String, options: String },

    #[error("`{spec}`: {problem}")]
    #[diagnostic(code(oomdoctor::gpu::invalid))]
    Invalid { spec: String, problem: String },
}

/// What `--gpu` resolved to.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct GpuSpec {
    /// Display name (`NVIDIA GeForce RTX 4090`, or `24.00 GiB GPU`).
    pub name: String,
    /// Number of GPUs.
    pub count: u32,
    /// Memory of one GPU as the engines see it (the CUDA total).
    pub memory_bytes: u64,
    /// Marketed memory of one GPU.
    pub nominal_bytes: u64,
    /// Where `memory_bytes` comes from.
    pub basis: String,
    /// Whether the memory is shared with the CPU (Apple silicon, APUs).
    pub unified: bool,
    pub notes: Vec<String>,
}

impl GpuSpec {
    /// Memory of all GPUs together.
    pub fn total_bytes(&self) -> u64 {
        self.memory_bytes.saturating_mul(u64::from(self.count))
    }
}

/// Lower case, without spaces, dashes, underscores, dots and the vendor words nvidia-smi
/// and rocm-smi print (`NVIDIA GeForce RTX 4090` → `rtx4090`).
pub fn normalize(name: &str) -> String {
    let mut s: String = name
        .to_ascii_lowercase()
        .chars()
        .filter(|c| !matches!(c, ' ' | '-' | '_' | '.' | '(' | ')' | ','))
        .collect();
    // Not `quadro`: "RTX 6000" (Ada, 48 GB) and "Quadro RTX 6000" (Turing, 24 GB) differ.
    for word in ["nvidia", "geforce", "tesla", "instinct", "radeon", "amd"] {
        s = s.replace(word, "");
    }
    s
}

/// Finds a GPU by name.
pub fn lookup(name: &str) -> Option<&'static GpuModel> {
    let n = normalize(name);
    if n.is_empty() {
        return None;
    }
    GPUS.iter()
        .find(|g| g.aliases.iter().any(|a| normalize(a) == n))
}

/// Bytes engines see on a GPU of the table.
fn usable_bytes(g: &GpuModel) -> (u64, String) {
    match g.reported_gib {
        Some(r) => (
            (r * GIB as f64) as u64,
            format!("{r:.2} GiB, the total PyTorch reports for a {}", g.name),
        ),
        None => {
            let b = (g.nominal_gib * 0.985 * GIB as f64) as u64;
            (
                b,
                format!(
                    "{} GB nominal less about 1.5 % that CUDA does not report (estimate)",
                    g.nominal_gib
                ),
            )
        }
    }
}

/// Splits `2xh100`, `2 x h100`, `h100:2`, `h100x2`, `4*24GiB` into (count, rest).
fn split_count(spec: &str) -> Result<(u32, &str), GpuError> {
    let s = spec.trim();
    let bad = |problem: String| GpuError::Invalid {
        spec: spec.to_string(),
        problem,
    };
    let parse_n = |t: &str| -> Result<u32, GpuError> {
        let n: u32 = t
            .trim()
            .parse()
            .map_err(|_| bad(format!("`{t}` is not a GPU count")))?;
        if n == 0 || n > 4096 {
            return Err(bad(format!("{n} GPUs: expected 1 to 4096")));
        }
        Ok(n)
    };
    // Prefix: digits, then x / × / *.
    let digits = s.chars().take_while(|c| c.is_ascii_digit()).count();
    if digits > 0 {
        let rest = s[digits..].trim_start();
        for sep in ['x', 'X', '×', '*'] {
            if let Some(r) = rest.strip_prefix(sep) {
                // `4x24GiB`, `2xh100`; but not `4090` or `24GiB`.
                if !r.is_empty() {
                    return Ok((parse_n(&s[..digits])?, r.trim()));
                }
            }
        }
    }
    // Suffix: `:N`, or `xN` / `*N` / `×N` after a name.
    if let Some((name, n)) = s.rsplit_once(':') {
        return Ok((parse_n(n)?, name.trim()));
    }
    // Only when what precedes is a GPU (`h100x2`), so `gtx1080ti` or a typo is not split.
    for sep in ['×', '*', 'x', 'X'] {
        if let Some((name, n)) = s.rsplit_once(sep) {
            let (name, n) = (name.trim(), n.trim());
            let known =
                lookup(name).is_some() || AMBIGUOUS.iter().any(|(a, _)| *a == normalize(name));
            if known
                && !n.is_empty()
                && n.chars().all(|c| c.is_ascii_digit())
                && lookup(s).is_none()
            {
                return Ok((parse_n(n)?, name));
            }
        }
    }
    Ok((1, s))
}

/// Parses `--gpu`.
pub fn parse_gpu(spec: &str) -> Result<GpuSpec, GpuError> {
    let (count, rest) = split_count(spec)?;
    if rest.is_empty() {
        return Err(GpuError::Invalid {
            spec: spec.to_string(),
            problem: "no GPU name or size".to_string(),
        });
    }
    // Names first: `4060ti` must not be read as 4,060 TiB.
    let n = normalize(rest);
    if let Some((_, options)) = AMBIGUOUS.iter().find(|(a, _)| *a == n) {
        return Err(GpuError::Ambiguous {
            spec: rest.to_string(),
            options: options.join(", "),
        });
    }
    if let Some(g) = lookup(rest) {
        let (memory_bytes, basis) = usable_bytes(g);
        return Ok(GpuSpec {
            name: g.name.to_string(),
            count,
            memory_bytes,
            nominal_bytes: (g.nominal_gib * GIB as f64) as u64,
            basis,
            unified: g.note.is_some_and(|n| n.contains("unified")),
            notes: g.note.map(str::to_string).into_iter().collect(),
        });
    }
    // A size: `24GiB`, `24GB`, `80g`, or a bare number of GiB.
    if rest.starts_with(|c: char| c.is_ascii_digit()) {
        let bare = rest.chars().all(|c| c.is_ascii_digit() || c == '.');
        let bytes = if bare {
            rest.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v > 0.0)
                .map(|v| (v * GIB as f64) as u64)
        } else {
            parse_size(rest, SiBase::Binary)
        };
        if let Some(b) = bytes {
            if !(256 << 20..=16 << 40).contains(&b) {
                return Err(GpuError::Invalid {
                    spec: spec.to_string(),
                    problem: format!(
                        "{} is not a plausible GPU memory size",
                        super::memory::fmt_gib(b)
                    ),
                });
            }
            let mut notes = Vec::new();
            if bare {
                notes.push(format!("`{rest}` has no unit: read as GiB"));
            }
            return Ok(GpuSpec {
                name: format!("{} GPU", super::memory::fmt_gib(b)),
                count,
                memory_bytes: b,
                nominal_bytes: b,
                basis: "as given (the total the engine sees; a card sold as 24 GB shows about 23.6 GiB)".to_string(),
                unified: false,
                notes,
            });
        }
    }
    if let Some(apple) = apple(rest, spec, count)? {
        return Ok(apple);
    }
    Err(GpuError::Unknown {
        spec: rest.to_string(),
        help: suggest(&n),
    })
}

/// Apple silicon: `m2-ultra-192gb`, `m3max64gb`. The size is required; the GPU may wire
/// about 75 % of unified memory by default (`iogpu.wired_limit_mb` raises it).
fn apple(rest: &str, spec: &str, count: u32) -> Result<Option<GpuSpec>, GpuError> {
    let n = normalize(rest);
    let n = n.strip_prefix("apple").unwrap_or(&n);
    let is_m = n.len() >= 2
        && n.starts_with('m')
        && n[1..].starts_with(|c: char| ('1'..='9').contains(&c));
    if !is_m {
        return Ok(None);
    }
    let chip_end = n[1..]
        .find(|c: char| !c.is_ascii_digit())
        .map(|i| i + 1)
        .unwrap_or(n.len());
    let tail = &n[chip_end..];
    let (variant, size) = match tail.find(|c: char| c.is_ascii_digit()) {
        Some(i) => (&tail[..i], &tail[i..]),
        None => (tail, ""),
    };
    if !matches!(variant, "" | "pro" | "max" | "ultra") {
        return Ok(None);
    }
    let Some(total) = parse_size(size, SiBase::Binary).filter(|b| *b >= GIB) else {
        return Err(GpuError::Invalid {
            spec: spec.to_string(),
            problem: "Apple silicon memory is unified and comes in many sizes: give it, e.g. `m3-max-64gb` or `48GiB`".to_string(),
        });
    };
    let usable = total / 4 * 3;
    Ok(Some(GpuSpec {
        name: format!("Apple {}{} ({} unified)", &n[..chip_end].to_ascii_uppercase(), variant, super::memory::fmt_gib(total)),
        count,
        memory_bytes: usable,
        nominal_bytes: total,
        basis: "75 % of unified memory, the default Metal working-set limit".to_string(),
        unified: true,
        notes: vec!["unified memory: the GPU's share also holds the OS and other programs; sudo sysctl iogpu.wired_limit_mb raises the limit".to_string()],
    }))
}

/// Levenshtein distance, for suggestions.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

fn suggest(n: &str) -> String {
    let mut scored: Vec<(usize, &str)> = GPUS
        .iter()
        .flat_map(|g| g.aliases.iter().map(move |a| (distance(n, a), *a)))
        .filter(|(d, _)| *d <= 3)
        .collect();
    scored.sort();
    scored.dedup_by(|a, b| a.1 == b.1);
    let names: Vec<&str> = scored.iter().take(4).map(|(_, a)| *a).collect();
    if names.is_empty() {
        "give the memory instead, e.g. --gpu 24GiB, or a name such as rtx4090, a100-40gb, h100, l40s".to_string()
    } else {
        format!(
            "did you mean {}? Or give the memory, e.g. --gpu 24GiB",
            names.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_are_normalised_and_unique() {
        let mut seen = std::collections::HashSet::new();
        for g in GPUS {
            for a in g.aliases {
                assert_eq!(normalize(a), *a, "{a} is not normalised");
                assert!(seen.insert(*a), "alias {a} listed twice");
                assert!(
                    !AMBIGUOUS.iter().any(|(x, _)| x == a),
                    "{a} is both a name and ambiguous"
                );
            }
        }
    }

    #[test]
    fn levenshtein() {
        assert_eq!(distance("h10", "h100"), 1);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("kitten", "sitting"), 3);
    }
}
