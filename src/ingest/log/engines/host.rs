//! Host-memory failures that any engine's process can show: a DataLoader worker killed, a
//! shared-memory (`/dev/shm`) bus error, a process killed by SIGKILL (`Killed`, exit 137),
//! and Python's own failed host allocations (`OSError: [Errno 12] Cannot allocate memory`
//! from `fork`/`mmap`, NumPy's `Unable to allocate 3.20 GiB for an array`, `MemoryError`).
//!
//! It also reads the machine's memory where a log holds readings of it (`free`'s `Mem:` row,
//! `top`'s summary), which the analyser turns into host-memory growth facts: a host kill after
//! readings that climbed is a leak, after level ones it is not.
//!
//! This module also owns the `host.*` fact namespace. The kernel OOM killer, systemd-oomd,
//! cgroups, Kubernetes and Ray recognisers fill the same facts from their own messages, so
//! host-oom rules read one vocabulary whatever killed the process.

use std::sync::LazyLock;

use regex::Regex;

use super::local::walk_back;
use super::{Domain, Emit, Failure, Line, Recognizer, id};
use crate::ingest::log::pattern::static_regex;

static WORKER_KILLED: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"DataLoader worker \(pid(?:\(s\))? (?P<pid>\d+|[xX]+|\.{2,}|…|\*+|\?+|<[^>\s]*>)[^)]*\) (?:is killed by signal: (?P<sig>[\w ]+)|exited unexpectedly)",
    )
});
static SHM: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"insufficient shared memory \(shm\)|No space left on device.*/dev/shm|unable to write to file </torch_\d+|workers are out of shared memory|raise your shared memory limit",
    )
});
/// Shells print `Killed` (bash: `line 1: 4242 Killed  python train.py`, its `line` in the
/// user's language: `riga`, `Zeile`, `ligne`) when a child dies of
/// SIGKILL; job control prints `[1]+  14875 killed  python main.py` (zsh) or
/// `[1]+  Killed  python main.py` (bash), its job number sometimes left on the line above
/// (`60190 killed     python main.py`, zsh pads the state); job runners print exit code 137
/// (128 + 9). A progress bar redraws its line with `\r` and no newline, so the shell's
/// `Killed` often lands glued to the end of the last bar (`| 0/2 [00:00<?, ?it/s]Killed`).
/// Under another locale bash writes `Killed` in the user's language
/// ([`KILLED_TRANSLATED`]): `已杀死` alone on the line, `行 12: 31337 已杀死  python train.py`,
/// `Zeile 3: 4711 Abgebrochen (Killed)  python train.py`.
static SHELL_KILLED: LazyLock<Regex> = LazyLock::new(|| {
    let killed = killed_alternation();
    static_regex(&format!(
        r"^(?:(?:[Kk]illed|{killed})\s*$|(?:zsh|sh|bash): killed\s+(?P<cmd>\S.*)$|(?:.*: )?\p{{L}}+ \d+:\s+(?P<pid>\d+) (?:Killed|{killed})\s+(?P<cmd2>.*)$|\[\d+\]\s*[+-]?\s+(?:(?P<pid3>\d+)\s+)?(?:killed|Killed|{killed})\s+(?P<cmd3>\S.*)$|(?P<pid4>\d+)\s+killed\s{{2,}}(?P<cmd4>\S.*)$|.*(?:\]|it/s|s/it|%)\s?(?:Killed|{killed})$)",
    ))
});

/// What bash prints for a child killed by SIGKILL under another locale: the translations
/// of `Killed` in glibc's catalogues (`strsignal`, `libc.mo`) and in bash's own (`bash.mo`),
/// as Debian 12 ships them, that are written in ASCII, and the Chinese one (`zh_CN`, the
/// commonest other locale in the issue threads we read).
///
/// The others (`Getötet`, `Processus arrêté`, `強制終了`, `죽었음`, `Убито`, ...) are not
/// read: every byte value an anchor holds becomes a class of the anchor automaton, which
/// every state's row then spans. All 47 catalogue words cost a crash log 15 ms of start-up
/// (65 ms to 80 ms), the Latin ones with diacritics 10 ms, Japanese and Korean 5 ms; these
/// cost nothing measurable.
///
/// Only those that contain `kill` (`Zabit (SIGKILL)`, `Morto (Killed)`) hold a gate literal
/// (see `crate::ingest::log::gate`), so in a log larger than the scan's head and tail
/// (33 MiB) the others are read only where those or a failure's window reach; a shell
/// prints its report last, in the tail.
const KILLED_TRANSLATED: &[&str] = &[
    // glibc (`libc.mo`)
    "Matat",
    "Zabit (SIGKILL)",
    "Terminado (killed)",
    "Tapettu",
    "Matado",
    "Ubijen",
    "Terbunuh",
    "Ucciso",
    "Nutraukta (killed)",
    "Drept",
    "Unicestwiony",
    "Morto",
    "Pobit",
    "已杀死",
    // bash's own (`bash.mo`), where they differ
    "Mort",
    "Zabit",
    "Abgebrochen (Killed)",
    "Murdu",
    "Maraithe",
    "Dibunuh",
    "Morto (Killed)",
];

/// [`KILLED_TRANSLATED`] as a regex alternation, longest first, so that `Morto (Killed)` is
/// taken whole rather than as `Morto` followed by a command `(Killed)`.
fn killed_alternation() -> String {
    let mut words: Vec<&str> = KILLED_TRANSLATED.to_vec();
    words.sort_by_key(|w| std::cmp::Reverse(w.len()));
    words
        .iter()
        .map(|w| regex::escape(w))
        .collect::<Vec<_>>()
        .join("|")
}

/// [`Host`]'s anchors: its own and [`KILLED_TRANSLATED`].
static HOST_ANCHORS: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    let own = [
        "DataLoader worker",
        "shared memory",
        "/dev/shm",
        "torch_",
        "Killed",
        // Exit code 137 as runners phrase it; a bare "137" hits timestamps and addresses.
        "code 137",
        "code (137)",
        "code: 137",
        "code=137",
        "status 137",
        "status: 137",
        "exitcode: -9",
        "exit code:",
        // A parent's report of a child's SIGKILL (`died with <Signals.SIGKILL: 9>`,
        // `process 0 terminated with signal SIGKILL`).
        "Signals.SIGKILL",
        "signal SIGKILL",
        // `docker ps -a`'s status column: `Exited (137) 3 minutes ago`.
        "Exited (137)",
        // DeepSpeed's launcher: `exits with return code = -9`.
        "code = -9",
        "code = 137",
        // Lightning's launcher: `Child process with PID 652 terminated with code -9.`
        "with code -9",
        "num_workers",
        "Errno 12",
        // Windows' commit limit (RAM plus the paging file): `[WinError 1455] The paging file
        // is too small for this operation to complete`, and `systeminfo`'s memory lines.
        "paging file is too small",
        // A foreground program interrupted from the terminal (a server stopped before the
        // next was started).
        "^C",
        "KeyboardInterrupt",
        "Physical Memory:",
        "Virtual Memory:",
        "MemoryError",
        "std::bad_alloc",
        // `free`'s row and `top`'s summary (`MiB Mem :`).
        "Mem:",
        "Mem :",
        // A program's own resident memory (`rss=2655MB`, `RSS: 12.3 GB`, `RSS 1.71 GB`,
        // `rss_after=`).
        "rss=",
        "rss ",
        // `ps`'s header (`PID   RSS ...`, `ps aux`'s `VSZ   RSS TTY`).
        " RSS",
        "rss:",
        "rss =",
        "rss_",
        "footprint=",
        "footprint:",
        "used ram",
        "used_ram",
        "ram used",
        "ram_used",
        "ram usage",
    ];
    own.into_iter()
        .chain(KILLED_TRANSLATED.iter().copied())
        .collect()
});
static EXIT_137: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?i)(?:exit(?:ed)?(?: with)?(?: status| code)?|exitcode|returned non-zero exit status|return code|terminated with code)\s*[:=]?\s*\(?(?P<code>137|-9)\b",
    )
});
/// A parent's report of a child killed by SIGKILL: Python's `subprocess.CalledProcessError`
/// (`Command '[...]' died with <Signals.SIGKILL: 9>.`, what `accelerate launch` and
/// `subprocess.run(check=True)` raise) and `torch.multiprocessing.spawn`'s
/// `ProcessExitedException` (`process 0 terminated with signal SIGKILL`). The same death as a
/// shell's `Killed` or exit code 137, told by the process that started the child.
static CHILD_SIGKILL: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"died with <Signals\.SIGKILL: 9>|(?P<spawn>process \d+ terminated with signal) SIGKILL\b",
    )
});
/// Python's failed host allocations, at the start of the exception line: ENOMEM from the
/// kernel (`OSError: [Errno 12] Cannot allocate memory`, a `fork` of a large process or an
/// `mmap`), NumPy's `_ArrayMemoryError: Unable to allocate 3.20 GiB for an array with shape
/// (...)`, and a bare `MemoryError` (`torch.cuda.OutOfMemoryError` is a device failure and
/// does not start with it).
static PY_HOST_ALLOC: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"^(?:[\w.]+\.)?(?:OSError: \[Errno 12\] Cannot allocate memory|_ArrayMemoryError: Unable to allocate (?P<req>\d+(?:\.\d+)?\s*[KMGTP]?i?B)|MemoryError(?:\s*$|: (?:Unable to allocate|std::bad_alloc|$)))",
    )
});
/// Windows refusing to commit memory: RAM plus the paging file are spoken for (error 1455,
/// `ERROR_COMMITMENT_LIMIT`). Python raises it as `OSError: [WinError 1455] The paging file is
/// too small for this operation to complete` (often loading torch's DLLs in each DataLoader
/// worker), Rust's safetensors as `(os error 1455)` mapping a checkpoint.
static WIN_COMMIT_LIMIT: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"The paging file is too small for this operation to complete"));
/// `systeminfo`'s memory lines (`Total Physical Memory:     16,086 MB`, `Virtual Memory: Max
/// Size:  18,518 MB`): the RAM, and the commit limit (RAM plus the paging file).
static SYSTEMINFO: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"^(?P<what>Total Physical Memory|Available Physical Memory|Virtual Memory: Max Size|Virtual Memory: In Use):\s+(?P<n>\d[\d,.]*)\s*MB\b",
    )
});
/// A C++ program (TensorFlow's runtime, Caffe, a llama.cpp tool) dying of a failed host
/// allocation: the runtime's `terminate called after throwing an instance of
/// 'std::bad_alloc'` (libstdc++) or `uncaught exception of type std::bad_alloc` (libc++).
static CXX_BAD_ALLOC: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?:terminate called after throwing an instance of|terminating due to uncaught exception of type) '?std::bad_alloc",
    )
});
/// `free`'s `Mem:` row: total, used, free, then shared, buff/cache and available (procps-ng)
/// or shared, buffers and cached (older procps). `free -g`, `-m` and plain `free` print bare
/// numbers, `-h` a unit on each (`251Gi`, `38G`, `0B`). A `watch`/cron paste may put a time
/// before it.
static FREE_ROW: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?:^|\s)Mem:\s+(?P<total>\d+(?:\.\d+)?)(?P<tu>[KMGTP]i?|B)?\s+(?P<used>\d+(?:\.\d+)?)(?P<uu>[KMGTP]i?|B)?\s+\d+(?:\.\d+)?(?:[KMGTP]i?|B)?(?:\s|$)",
    )
});
/// `top`'s memory summary: `MiB Mem :  31906.7 total,   1021.4 free,  20455.5 used, ...`
/// (procps-ng), `Mem:  16333668k total, 15906260k used,   427408k free, ...` (older).
static TOP_ROW: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?:^|\s)Mem\s*:\s*(?P<total>\d+(?:\.\d+)?)(?P<tu>[kmgt])?\s+total,\s*(?P<a>\d+(?:\.\d+)?)(?P<au>[kmgt])?\s+(?P<al>free|used),\s*(?P<b>\d+(?:\.\d+)?)(?P<bu>[kmgt])?\s+(?P<bl>free|used)\b",
    )
});
static NUM_WORKERS: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"num_workers\s*[=:]\s*(?P<n>\d+)"));

/// How far above `exited unexpectedly` the worker's own death is looked for: the chained
/// exception between them is about twenty frames.
const WORKER_DEATH_LOOKBACK: usize = 80;

/// Whether a line above says the DataLoader worker `pid` died of something other than
/// SIGKILL (`is killed by signal: Segmentation fault`, `Unexpected segmentation fault
/// encountered in worker`).
fn worker_crashed_above(line: &Line<'_>, pid: Option<&str>) -> bool {
    line.preceding(WORKER_DEATH_LOOKBACK).iter().any(|l| {
        let t = l.text.as_str();
        if t.contains("Unexpected segmentation fault encountered in worker")
            || t.contains("Unexpected floating-point exception encountered in worker")
        {
            return true;
        }
        WORKER_KILLED.captures(t).is_some_and(|c| {
            let same_worker = match (pid, c.name("pid")) {
                (Some(a), Some(b)) => a == b.as_str(),
                _ => true,
            };
            same_worker
                && c.name("sig").is_some_and(|s| {
                    let s = s.as_str().trim();
                    !s.eq_ignore_ascii_case("killed") && !s.contains("SIGKILL")
                })
        })
    })
}

/// A figure of a memory table in the table's unit: the number times its unit's size, where
/// the table gives one (`251Gi`, `16333668k`), else the bare number; `None` for a unit it is
/// not.
fn table_figure(number: &str, unit: Option<regex::Match<'_>>) -> Option<f64> {
    let n: f64 = number.parse().ok()?;
    let unit = unit.map_or("", |u| u.as_str());
    let figure =
        n * crate::facts::units::unit_multiplier(unit, crate::facts::units::SiBase::Binary)?;
    // Four hundred digits parse as infinity, and infinity over infinity is no share.
    figure.is_finite().then_some(figure)
}

/// The machine's memory in use and its total from a `free` or `top` line, in one unit, and
/// the span of the row's figures. A row whose columns mix bare numbers and units, or whose
/// use exceeds its total, is not a reading.
fn host_memory_reading(text: &str) -> Option<(f64, f64, (usize, usize))> {
    if let Some(c) = FREE_ROW.captures(text) {
        let (t, u) = (c.name("total")?, c.name("used")?);
        let (tu, uu) = (c.name("tu"), c.name("uu"));
        if tu.is_some() != uu.is_some() {
            return None;
        }
        let total = table_figure(t.as_str(), tu)?;
        let used = table_figure(u.as_str(), uu)?;
        let end = uu.map_or(u.end(), |m| m.end());
        return (total > 0.0 && used <= total).then_some((used, total, (t.start(), end)));
    }
    let c = TOP_ROW.captures(text)?;
    // One of the two figures after the total is `used`, the other `free`.
    if c.name("al")?.as_str() == c.name("bl")?.as_str() {
        return None;
    }
    let (label, number, unit) = if c.name("al")?.as_str() == "used" {
        ("al", "a", "au")
    } else {
        ("bl", "b", "bu")
    };
    let total = table_figure(c.name("total")?.as_str(), c.name("tu"))?;
    let used = table_figure(c.name(number)?.as_str(), c.name(unit))?;
    let span = (c.name("total")?.start(), c.name(label)?.end());
    (total > 0.0 && used <= total).then_some((used, total, span))
}

/// A program's own resident memory as scripts log it from psutil or `/proc` (`rss=2655MB`,
/// `RSS: 12.3 GB`, `RSS 1.71 GB`, `rss_after=2.1GiB`), or macOS's measure of it (`footprint=5.31GB`,
/// `phys_footprint`, what Activity Monitor shows), with a unit; the last such figure of a
/// line is its reading (`rss_before=1022MB rss_after=2655MB`). Not the kernel's kill report
/// (`anon-rss:15451668kB`), nor a figure whose unit is in its key (`rss_mb=1234`). A repro
/// script's `used RAM: 5981 MB` / `RAM usage: 5.8 GB` (psutil's `used`, between rounds of
/// requests) reads the same way: the host's use, which the program's growth moves. Not a
/// machine's size (`RAM: 32GB`): a reading says used or usage.
static PROCESS_RSS: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?i)(?:^|[\s,;(\[{|])(?:(?:process[ _]|phys_)?(?:rss|footprint)(?:[ _](?:before|after|now|mem(?:ory)?|usage))?|used[ _]ram|ram[ _](?:used|usage))(?:\s*[:=]\s*|\s+)(?P<n>\d+(?:\.\d+)?)\s*(?P<u>[KMGT]i?B|[KMGT])\b",
    )
});

/// `ps`'s header with a resident-size column (`ps aux`: `USER PID %CPU %MEM VSZ RSS TTY ...`;
/// `ps -o pid,rss,etime,args`: `PID RSS ELAPSED COMMAND`).
static PS_HEADER: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"^\s*(?:USER\s+)?PID\b.*\sRSS\b"));
/// How far below a `ps` header its rows are looked for: a loop that prints the header once
/// and its rows every poll, with other readings between them.
const PS_ROWS_LINES: usize = 600;

/// A `ps` table polled over the run: each row's resident size (KiB) by pid. The process
/// whose size grew the most over three polls or more is the run's (a server beside a steady
/// worker); its readings are the program's own resident memory, as a script's `rss=` lines.
fn ps_rss_series(line: &Line<'_>, out: &mut Emit) {
    let header: Vec<&str> = line.text.split_whitespace().collect();
    let (Some(pid_at), Some(rss_at)) = (
        header.iter().position(|h| *h == "PID"),
        header.iter().position(|h| *h == "RSS"),
    ) else {
        return;
    };
    // pid -> readings in order, at most a few processes.
    let mut series: Vec<(u64, Vec<f64>)> = Vec::new();
    super::local::walk_forward(line, PS_ROWS_LINES, |raw| {
        let cells: Vec<&str> = raw.split_whitespace().collect();
        if cells.len() < header.len().min(rss_at + 2) {
            return true;
        }
        let (Ok(pid), Ok(kib)) = (cells[pid_at].parse::<u64>(), cells[rss_at].parse::<u64>())
        else {
            return true;
        };
        let bytes = kib as f64 * 1024.0;
        if let Some((_, r)) = series.iter_mut().find(|(p, _)| *p == pid) {
            r.push(bytes);
        } else if series.len() < 16 {
            series.push((pid, vec![bytes]));
        }
        true
    });
    let grown = |r: &Vec<f64>| r.last().unwrap_or(&0.0) - r.first().unwrap_or(&0.0);
    if let Some((_, readings)) = series
        .iter()
        .filter(|(_, r)| r.len() >= 3)
        .max_by(|a, b| grown(&a.1).total_cmp(&grown(&b.1)))
    {
        for &b in readings {
            out.process_memory_sample(b, None);
        }
    }
}

/// A SIGKILL that someone else reports (a runner's exit code 137, a parent's `died with
/// <Signals.SIGKILL: 9>`), its killer unnamed: the restatement of a kill that the kernel's or
/// the shell's own report, where the log has one, tells better.
fn sigkill_reported(engine: &'static str) -> Failure {
    let mut f = Failure::new("host-oom", engine, Domain::Host);
    f.wrapper = true;
    f.fact("host.killer", "unknown", None)
        .fact("host.signal", "KILL", None);
    f
}

/// The generic host-memory recogniser.
pub struct Host;

impl Recognizer for Host {
    fn engine(&self) -> &'static str {
        id::UNKNOWN
    }

    fn anchors(&self) -> &'static [&'static str] {
        &HOST_ANCHORS
    }

    fn recognize(&self, line: &Line<'_>, out: &mut Emit) {
        let text = line.text;
        if PS_HEADER.is_match(text) {
            ps_rss_series(line, out);
            return;
        }
        if let Some((used, total, span)) = host_memory_reading(text) {
            out.host_memory_sample(used, total, Some(span));
            return;
        }
        if let Some(c) = PROCESS_RSS.captures_iter(text).last() {
            let (n, u) = (c.name("n").expect("group n"), c.name("u").expect("group u"));
            let bytes = crate::facts::units::size_from_parts(
                n.as_str(),
                u.as_str(),
                crate::facts::units::SiBase::Binary,
            );
            // Not the line's end: a kill glued to the reading (`rss=13770MB Killed`) is
            // still read below.
            if let Some(b) = bytes {
                out.process_memory_sample(b as f64, Some((n.start(), u.end())));
            }
        }
        if let Some(c) = NUM_WORKERS.captures(text) {
            let m = c.name("n").expect("group n");
            if let Ok(n) = m.as_str().parse::<u32>() {
                out.fact("host.dataloader_workers", n, Some((m.start(), m.end())));
            }
        }
        if let Some(c) = PY_HOST_ALLOC.captures(text.trim_end()) {
            let mut f = Failure::new("host-oom", id::UNKNOWN, Domain::Host);
            f.fact("host.killer", "allocator", None);
            if let Some(m) = c.name("req") {
                if let Some(b) =
                    crate::facts::units::parse_size(m.as_str(), crate::facts::units::SiBase::Binary)
                {
                    f.fact("host.requested_bytes", b, Some((m.start(), m.end())));
                }
            }
            out.failure(f);
            return;
        }
        let trimmed = text.trim();
        if trimmed == "^C" || trimmed.starts_with("^CTraceback") || trimmed == "KeyboardInterrupt" {
            out.fact("engine.server_stopped", true, None);
            return;
        }
        if let Some(c) = SYSTEMINFO.captures(text.trim()) {
            let n = c.name("n").expect("group n");
            let name = match &c["what"] {
                "Total Physical Memory" => "host.total_ram_bytes",
                "Available Physical Memory" => "host.free_ram_bytes",
                "Virtual Memory: Max Size" => "host.commit_limit_bytes",
                _ => "host.committed_bytes",
            };
            if let Some(b) = crate::facts::units::size_from_parts(
                n.as_str(),
                "MB",
                crate::facts::units::SiBase::Binary,
            ) {
                out.fact(name, b, Some((n.start(), n.end())));
            }
            return;
        }
        if WIN_COMMIT_LIMIT.is_match(text) {
            let mut f = Failure::new("host-oom", id::UNKNOWN, Domain::Host);
            f.fact("host.killer", "allocator", None)
                .fact("host.windows_commit_limit", true, None);
            out.failure(f);
            return;
        }
        if CXX_BAD_ALLOC.is_match(text) {
            let mut f = Failure::new("host-oom", id::UNKNOWN, Domain::Host);
            f.fact("host.killer", "allocator", None);
            out.failure(f);
            return;
        }
        if SHM.is_match(text) {
            let mut f = Failure::new("host-oom", id::PYTORCH, Domain::Host);
            f.fact("host.killer", "dataloader", None)
                .fact("host.shm_exhausted", true, None)
                .fact("host.signal", "BUS", None);
            out.failure(f);
            return;
        }
        if let Some(c) = WORKER_KILLED.captures(text) {
            let sig = c.name("sig").map(|s| s.as_str().trim().to_string());
            // A segfault or bus error is not memory exhaustion (the shm case is caught above).
            if let Some(s) = &sig {
                if !s.eq_ignore_ascii_case("killed") && !s.contains("SIGKILL") {
                    return;
                }
            }
            // `exited unexpectedly` is raised for every dead worker; PyTorch names the
            // signal a few lines above it (in the chained exception). A worker that died of a
            // segfault or an abort is a crash, not memory.
            if sig.is_none() && worker_crashed_above(line, c.name("pid").map(|p| p.as_str())) {
                return;
            }
            let mut f = Failure::new("host-oom", id::PYTORCH, Domain::Host);
            f.fact("host.killer", "dataloader", None);
            if let Some(p) = c.name("pid") {
                if let Ok(pid) = p.as_str().parse::<u64>() {
                    f.fact("host.victim_pid", pid, Some((p.start(), p.end())));
                }
            }
            f.fact("host.victim_name", "DataLoader worker", None);
            if sig.is_some() {
                f.fact("host.signal", "KILL", None);
            }
            out.failure(f);
            return;
        }
        // A shell's `Killed` and an exit status 137 restate a kill that the kernel, a cgroup or
        // an orchestrator may report with numbers next to them: they are wrappers, so they
        // name no extra copy and yield to that report; alone they still make an incident.
        if let Some(c) = SHELL_KILLED.captures(text.trim_end()) {
            // SGLang's launcher kills its own children after one reports an error
            // ("Received sigquit from a child process"); that `Killed` is not memory.
            if line
                .preceding(3)
                .iter()
                .any(|l| l.text.contains("Received sigquit") || l.text.contains("Received SIGQUIT"))
            {
                return;
            }
            // A Python victim is a PyTorch-side process, so the incident takes the engine the
            // log shows (vLLM, DeepSpeed, ...).
            let engine = match c
                .name("cmd")
                .or(c.name("cmd2"))
                .or(c.name("cmd3"))
                .or(c.name("cmd4"))
                .map(|m| {
                    crate::facts::engine::of_process(
                        m.as_str().split_whitespace().next().unwrap_or(""),
                    )
                }) {
                Some(id::LINUX) | None => id::UNKNOWN,
                Some(e) => e,
            };
            let mut f = Failure::new("host-oom", engine, Domain::Host);
            f.wrapper = true;
            f.fact("host.killer", "shell", None)
                .fact("host.signal", "KILL", None)
                .fact("host.exit_code", 137u32, None);
            if let Some(cmd) = c
                .name("cmd")
                .or(c.name("cmd2"))
                .or(c.name("cmd3"))
                .or(c.name("cmd4"))
            {
                f.fact(
                    "host.victim_name",
                    cmd.as_str().split_whitespace().next().unwrap_or(""),
                    Some((cmd.start(), cmd.end())),
                );
            }
            if let Some(p) = c
                .name("pid")
                .or(c.name("pid3"))
                .or(c.name("pid4"))
                .and_then(|p| p.as_str().parse::<u64>().ok())
            {
                f.fact("host.victim_pid", p, None);
            }
            out.failure(f);
            return;
        }
        if let Some(c) = CHILD_SIGKILL.captures(text) {
            let engine = if c.name("spawn").is_some() {
                id::PYTORCH
            } else {
                id::UNKNOWN
            };
            out.failure(sigkill_reported(engine));
            return;
        }
        if let Some(c) = EXIT_137.captures(text) {
            // `kubectl describe` prints `Reason:` just above `Exit Code:`. OOMKilled is the
            // Kubernetes recogniser's; any other reason (a failed liveness probe, a preStop
            // timeout) is a SIGKILL that says nothing about memory.
            if text.trim_start().starts_with("Exit Code:")
                && line
                    .preceding(3)
                    .iter()
                    .any(|l| l.text.trim_start().starts_with("Reason:"))
            {
                return;
            }
            // Only a process exit, not any number 137 in a line.
            let m = c.name("code").expect("group code");
            // torchrun's `failed (exitcode: -9) local_rank: 3` is PyTorch's launcher.
            let engine = if text.contains("local_rank") || text.contains("exitcode") {
                id::PYTORCH
            } else {
                id::UNKNOWN
            };
            // A process that had already failed on its own (an NCCL watchdog's abort, a
            // fatal signal) and whose exit status says 137: the engine or its launcher killed
            // what was left of it (SGLang kills its own process tree), not the host.
            if engine == id::UNKNOWN && died_of_its_own_error(line) {
                return;
            }
            let mut f = sigkill_reported(engine);
            f.fact("host.exit_code", 137u32, Some((m.start(), m.end())));
            out.failure(f);
        }
    }
}

/// Whether the lines above an exit status show the program aborting on an error of its own
/// that is not about memory: PyTorch's NCCL watchdog tearing the process down, Python's
/// `Fatal Python error: Aborted` or `Segmentation fault`, a server's child reporting its
/// failure (`Received sigquit from a child process`).
fn died_of_its_own_error(line: &Line<'_>) -> bool {
    const OWN_ABORTS: &[&str] = &[
        "Watchdog caught collective operation timeout",
        "Fatal Python error: Aborted",
        "Fatal Python error: Segmentation fault",
        "Received sigquit from a child process",
    ];
    // Raw lines, not cleaned ones: the phrases survive any prefix, and a log of many exit
    // lines must not clean the same lines again for each.
    let mut aborted = false;
    walk_back(line, 150, |raw| {
        aborted = OWN_ABORTS.iter().any(|a| raw.contains(a));
        !aborted
    });
    aborted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::evidence::Value;
    use crate::ingest::log::engines::Observation;

    /// The machine's memory in use as a share of its total, as `free` and `top` print it.
    fn share(text: &str) -> Option<f64> {
        host_memory_reading(text).map(|(used, total, span)| {
            assert!(span.0 < span.1 && span.1 <= text.len(), "{text}: {span:?}");
            used / total
        })
    }

    #[test]
    fn free_and_top_rows_are_readings_of_the_machine() {
        let close = |text: &str, want: f64| {
            let got = share(text).unwrap_or_else(|| panic!("no reading in {text:?}"));
            assert!((got - want).abs() < 1e-9, "{text}: {got} != {want}");
        };
        // procps-ng `free -m` / `-g`, a time before the row, `-h` with a unit per column
        // (and columns of different units), older procps, `top` new and old.
        close(
            "Mem:          515701       61240      440118         312       14343      450561",
            61240.0 / 515701.0,
        );
        close(
            "2025-03-26T08:15  Mem:  251  97  148 ...  available 152",
            97.0 / 251.0,
        );
        close(
            "10:10  Mem:            31Gi       6.1Gi        23Gi       4.0Mi       1.9Gi        24Gi",
            6.1 / 31.0,
        );
        close(
            "Mem:           1.5Ti       512Mi       1.4Ti",
            0.5 / (1.5 * 1024.0),
        );
        close(
            "Mem:          7872       7601        270          0        210       3462",
            7601.0 / 7872.0,
        );
        close(
            "MiB Mem :  31906.7 total,   1021.4 free,  20455.5 used,  10429.8 buff/cache",
            20455.5 / 31906.7,
        );
        close(
            "Mem:  16333668k total, 15906260k used,   427408k free,   123456k buffers",
            15906260.0 / 16333668.0,
        );
        // Not readings: a progress line's memory figure, htop's bar, a percentage, swap, a
        // row mixing bare numbers and units, use above the total, two `free` labels in `top`.
        for text in [
            "step 400 | loss 2.1 | gpu_mem: 12.0G",
            "Mem[|||||||||||      12.3G/31.2G]",
            "Mem: 45%",
            "Swap:          2047           0        2047",
            "Mem:            31Gi       6100        23Gi",
            "Mem:   100   250   3",
            "Mem:   100   0   100   0",
            "KiB Mem :  1000 total,   900 free,   100 free,   0 buff/cache",
        ] {
            assert!(
                share(text).is_none_or(|s| s == 0.0),
                "{text}: {:?}",
                share(text)
            );
        }
        assert_eq!(share("Mem:   100   0   100   0"), Some(0.0));
        assert_eq!(share("Mem:   100   250   3"), None);
        let endless = "9".repeat(400);
        assert_eq!(share(&format!("Mem:   {endless}   {endless}   3")), None);
    }

    /// The process's own resident memory a line logs, in bytes.
    fn rss(text: &str) -> Option<f64> {
        crate::ingest::log::engines::run_line(&Host, text)
            .records
            .iter()
            .find_map(|r| match r.obs {
                Observation::ProcessMemorySample(b) => Some(b),
                _ => None,
            })
    }

    /// A `ps` table polled with its header once: the process that grew is the one read, in
    /// KiB, whatever else is printed between the polls.
    #[test]
    fn a_polled_ps_table_gives_the_growing_process() {
        let log = "$ while true; do date; ps -o pid,rss,etime,args -p 4101,4102; free -g; sleep 600; done\n10:00\n    PID   RSS     ELAPSED COMMAND\n   4101 1048576   00:10 node server.js\n   4102 2097152   00:09 worker --gpu\n10:10\n   4101 3145728   10:10 node server.js\n   4102 2097152   10:09 worker --gpu\nMem:  62  9  40  0  13  52\n10:20\n   4101 6291456   20:10 node server.js\n   4102 2097200   20:09 worker --gpu\n";
        let ev = crate::ingest::log::grouping::analyze_text(log);
        assert_eq!(ev.context.num("host.rss_samples"), Some(3.0));
        assert_eq!(
            ev.context.num("host.rss_first_bytes"),
            Some(1024.0 * 1048576.0)
        );
        assert_eq!(
            ev.context.num("host.rss_last_bytes"),
            Some(6.0 * 1024.0 * 1048576.0)
        );
    }

    #[test]
    fn a_programs_own_resident_memory_is_a_reading() {
        const MIB: f64 = 1048576.0;
        assert_eq!(rss("round  3/20  rss=4133MB"), Some(4133.0 * MIB));
        assert_eq!(
            rss("req=000148 active=4.53GB cache=1.61GB peak=6.02GB footprint=6.48GB"),
            Some((6.48 * 1024.0 * MIB).round())
        );
        assert_eq!(
            rss("INFO shard 2/48 done  RSS: 3.5 GiB"),
            Some(3.5 * 1024.0 * MIB)
        );
        assert_eq!(
            rss("round 2 after 200 requests     used RAM:   8712 MB"),
            Some(8712.0 * MIB)
        );
        // A notebook's print with the figure after a space.
        assert_eq!(
            rss("epoch  25 | loss 0.2852 | RSS 6.06 GB | cuda alloc 0.2 MB"),
            Some((6.06 * 1024.0 * MIB).round())
        );
        assert_eq!(rss("CPU: 8 cores, RAM: 32GB, GPU: A10 24GB"), None);
        // Before and after on one line: the last is the reading.
        assert_eq!(
            rss("round  2/20  rss_before=2655MB  rss_after=3471MB  after_gc=3470MB"),
            Some(3471.0 * MIB)
        );
        // The kernel's kill report, a unit in the key, a figure without a unit: not readings.
        assert_eq!(
            rss(
                "Out of memory: Killed process 218443 (python) total-vm:27484816kB, anon-rss:15451668kB, file-rss:0kB, shmem-rss:0kB"
            ),
            None
        );
        assert_eq!(rss("step 40 rss_mb=1234"), None);
        assert_eq!(rss("rss: 1234"), None);
        // A kill glued to a bar whose postfix holds the reading is read too.
        let glued = crate::ingest::log::engines::run_line(
            &Host,
            "Epoch 3:  40%|####      | 40/100 [01:02<01:33,  1.55s/it, rss=13.5GiB]已杀死",
        );
        assert!(crate::ingest::log::engines::emitted_failure(&glued).is_some());
    }

    fn failure(text: &str) -> Option<Failure> {
        crate::ingest::log::engines::emitted_failure(&crate::ingest::log::engines::run_line(
            &Host, text,
        ))
    }

    /// The process that started a child reports its SIGKILL: Python's subprocess error,
    /// `torch.multiprocessing.spawn`'s; another signal is a crash, not memory.
    #[test]
    fn a_parent_reports_its_childs_sigkill() {
        let f = failure("subprocess.CalledProcessError: Command '['/venv/bin/python', 'train.py']' died with <Signals.SIGKILL: 9>.").expect("a child killed");
        assert_eq!(f.get("host.signal").and_then(Value::as_str), Some("KILL"));
        assert_eq!(f.engine, id::UNKNOWN);
        let f = failure("torch.multiprocessing.spawn.ProcessExitedException: process 2 terminated with signal SIGKILL").expect("a rank killed");
        assert_eq!(f.engine, id::PYTORCH);
        assert!(failure("subprocess.CalledProcessError: Command '['python', 'x.py']' died with <Signals.SIGSEGV: 11>.").is_none());
        assert!(failure("torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with signal SIGSEGV").is_none());
    }

    /// An exit status of 137 after the program aborted on its own (an NCCL watchdog's
    /// timeout): its launcher or the engine killed what was left, the host did not.
    #[test]
    fn exit_137_after_its_own_abort_is_not_a_host_kill() {
        let input: crate::facts::evidence::InputName = std::sync::Arc::from("t.log");
        let incidents = |log: &str| {
            crate::ingest::log::grouping::analyze_log(&mut log.as_bytes(), &input)
                .unwrap()
                .0
                .incidents
                .len()
        };
        let status = "$ docker ps -a --format '{{.Image}}  {{.Status}}'\nlmsysorg/sglang:v0.4.3  Exited (137) 41 seconds ago\n";
        let aborted = format!(
            "[rank4]:[E304 12:54:52.122900428 ProcessGroupNCCL.cpp:616] [Rank 4] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=151721, OpType=_ALLGATHER_BASE) ran for 600023 milliseconds before timing out.\nFatal Python error: Aborted\n\n{status}"
        );
        assert_eq!(incidents(&aborted), 0);
        assert_eq!(incidents(&format!("INFO serving\n{status}")), 1);
    }

    #[test]
    fn windows_commit_limit_and_systeminfo() {
        for line in [
            "OSError: [WinError 1455] The paging file is too small for this operation to complete. Error loading \"C:\\venv\\lib\\site-packages\\torch\\lib\\caffe2_nvrtc.dll\" or one of its dependencies.",
            "2025-04-09T20:26:37.902655 - !!! Exception during processing !!! The paging file is too small for this operation to complete. (os error 1455)",
        ] {
            let f = failure(line).expect("a commit-limit failure");
            assert_eq!(f.kind, "host-oom");
            assert_eq!(f.get("host.windows_commit_limit"), Some(&Value::Bool(true)));
        }
        let fact = |t: &str, name: &str| {
            crate::ingest::log::engines::emitted_fact(
                &crate::ingest::log::engines::run_line(&Host, t),
                name,
            )
        };
        assert_eq!(
            fact(
                "Virtual Memory: Max Size:  18,518 MB",
                "host.commit_limit_bytes"
            ),
            Some(Value::Num(18518.0 * 1048576.0))
        );
        assert_eq!(
            fact(
                "Total Physical Memory:     16,086 MB",
                "host.total_ram_bytes"
            ),
            Some(Value::Num(16086.0 * 1048576.0))
        );
    }

    #[test]
    fn host_failures() {
        let f = failure("RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed. ")
            .unwrap();
        assert_eq!(f.get("host.victim_pid"), Some(&Value::Num(4242.0)));
        assert!(failure("RuntimeError: DataLoader worker (pid 4242) is killed by signal: Segmentation fault. ").is_none());
        // A pid the paste redacted (`xxx`, `...`) is still a worker killed; the f-string in
        // PyTorch's own source, quoted in a traceback, is not.
        assert!(failure("    raise RuntimeError(f'DataLoader worker (pid(s) {pids_str}) exited unexpectedly') from e").is_none());
        for redacted in ["xxx", "...", "<pid>"] {
            let f = failure(&format!(
                "RuntimeError: DataLoader worker (pid {redacted}) is killed by signal: Killed"
            ))
            .expect("a killed worker");
            assert_eq!(f.get("host.victim_pid"), None);
        }
        let f = failure("ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).").unwrap();
        assert_eq!(f.get("host.shm_exhausted"), Some(&Value::Bool(true)));
        for localized in [
            "./invokeai/invoke.sh: riga 24:  8612 Killed                  .venv/bin/python invoke.py",
            "run.sh: Zeile 3: 4711 Killed                  python train.py",
        ] {
            assert!(failure(localized).is_some(), "{localized}");
        }
        // bash under another locale says `Killed` in the user's language.
        for translated in [
            "已杀死",
            "Ucciso",
            "Terminado (killed)",
            "train.sh: 行 12: 31337 已杀死               python train.py --bs 64",
            "run.sh: Zeile 3: 4711 Abgebrochen (Killed)  python train.py",
            "[1]+  Morto (Killed)          python main.py",
            "Epoch 3:  40%|####      | 40/100 [01:02<01:33,  1.55s/it]已杀死",
        ] {
            let f = failure(translated).unwrap_or_else(|| panic!("{translated}"));
            assert_eq!(
                f.get("host.killer").and_then(Value::as_str),
                Some("shell"),
                "{translated}"
            );
        }
        let f = failure("train.sh: 行 12: 31337 已杀死               python train.py").unwrap();
        assert_eq!(f.get("host.victim_pid"), Some(&Value::Num(31337.0)));
        let f = failure("[1]+  Morto (Killed)          python main.py").unwrap();
        assert_eq!(
            f.get("host.victim_name").and_then(Value::as_str),
            Some("python")
        );
        // A translation inside a sentence is not the shell's report.
        assert!(failure("Mort de rire").is_none());
        assert!(failure("Morto di fame").is_none());
        assert!(failure("[rank: 1] Child process with PID 652 terminated with code -9. Forcefully terminating all other processes to avoid zombies").is_some());
        let f = failure("train.sh: line 12: 31337 Killed                  python train.py --bs 64")
            .unwrap();
        assert_eq!(f.get("host.victim_pid"), Some(&Value::Num(31337.0)));
        assert_eq!(
            f.get("host.victim_name").and_then(Value::as_str),
            Some("python")
        );
        assert!(failure("Killed").is_some());
        assert!(failure("subprocess.CalledProcessError: Command '['python', 'x.py']' returned non-zero exit status 137.").is_some());
        assert!(failure("processed 137 files").is_none());
        // `docker ps -a`
        assert!(failure("4f1e2d9a0b7c   vllm/vllm-openai:latest   \"python3 -m vllm.ent…\"   3 minutes ago   Exited (137) 2 minutes ago             vllm").is_some());
        assert!(failure("Killed 3 zombie workers during cleanup").is_none());
        // Python's own failed host allocations.
        let f = failure("OSError: [Errno 12] Cannot allocate memory").unwrap();
        assert_eq!(
            f.get("host.killer").and_then(Value::as_str),
            Some("allocator")
        );
        let f = failure("numpy.core._exceptions._ArrayMemoryError: Unable to allocate 3.20 GiB for an array with shape (429496730,) and data type float64").unwrap();
        assert_eq!(
            f.get("host.requested_bytes").and_then(Value::as_f64),
            Some(3.2 * 1024.0 * 1024.0 * 1024.0_f64).map(|b| b.round())
        );
        assert!(failure("MemoryError").is_some());
        assert!(failure("killed").is_some());
        for bad_alloc in [
            "terminate called after throwing an instance of 'std::bad_alloc'",
            "libc++abi: terminating due to uncaught exception of type std::bad_alloc: std::bad_alloc",
        ] {
            let f = failure(bad_alloc).unwrap();
            assert_eq!(f.kind, "host-oom");
        }
        assert!(failure("  what():  std::bad_alloc").is_none());
        assert!(failure("torch.cuda.OutOfMemoryError: CUDA out of memory.").is_none());
        assert!(failure("    except MemoryError:").is_none());
        assert!(failure("OSError: [Errno 28] No space left on device").is_none());
        // Job control, and a `Killed` glued to the last redraw of a progress bar.
        let f = failure("[1]  + 14875 killed     python main.py --bs 32").expect("job control");
        assert_eq!(
            f.get("host.victim_pid").and_then(|v| v.as_f64()),
            Some(14875.0)
        );
        assert!(failure("[2]+  Killed                  python train.py").is_some());
        // zsh's job report with its `[1]` left glued to the progress bar on the line above.
        let f = failure("60190 killed     python main.py").expect("job report, number above");
        assert_eq!(
            f.get("host.victim_pid").and_then(|v| v.as_f64()),
            Some(60190.0)
        );
        assert!(failure("3 killed by the scheduler").is_none());
        assert!(
            failure("Loading checkpoint shards:   0%|          | 0/2 [00:00<?, ?it/s]Killed")
                .is_some()
        );
        assert!(
            failure("Epoch 3:  40%|####      | 40/100 [01:02<01:33,  1.55s/it]Killed").is_some()
        );
        assert!(failure("The operator Killed the job").is_none());
        assert_eq!(
            failure("zsh: killed     python3 serve.py")
                .unwrap()
                .get("host.victim_name")
                .and_then(Value::as_str),
            Some("python3")
        );
    }
}
