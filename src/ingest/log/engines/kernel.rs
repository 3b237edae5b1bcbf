//! The Linux kernel OOM killer, global and memory-cgroup, in every kernel generation.
//!
//! Sources: `ENGINE-MESSAGES.md` §10.1. One kill is a sequence: `X invoked oom-killer:` (X is
//! the task whose allocation triggered reclaim, *not* the victim), `Mem-Info:` with free
//! memory and swap, or for a cgroup `memory: usage ..kB, limit ..kB`, the task table (in
//! pages), the one-line summary `oom-kill:constraint=CONSTRAINT_MEMCG,...,task=...,pid=...`,
//! and finally `Killed process PID (comm) total-vm:..kB, anon-rss:..kB, file-rss:..kB, ...`.
//!
//! The `Killed process` line is the failure. It walks back over its own sequence (to the
//! previous kill) to carry the constraint, the cgroup and its limit, the invoker and the
//! free swap into the failure, so a later kill never inherits an earlier one's numbers.
//! `anon-rss` is what the victim really used; `total-vm` is irrelevant for GPU runtimes,
//! which map terabytes of address space; `file-rss` is mmap'd model files and page cache.
//!
//! `dmesg` pasted from a narrow terminal wraps the kill line mid-number; the continuation
//! carries no timestamp, so it is joined back.

use std::sync::LazyLock;

use regex::Regex;

use super::local::{container_of_cgroup, kib, span, walk_back};
use super::{Domain, Emit, Failure, Line, Recognizer, id};
use crate::ingest::log::clean::clean_line;
use crate::ingest::log::pattern::static_regex;

static KILLED: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?:(?P<reason>Out of memory(?: \(oom_kill_allocating_task\))?|Memory cgroup out of memory): )?Killed process (?P<pid>\d+),? (?:UID \d+, )?\((?P<comm>.+?)\)(?:[\s,]|$)",
    )
});
static KILL_OLD: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?P<reason>Out of memory|Memory cgroup out of memory): Kill process (?P<pid>\d+) \((?P<comm>.+?)\) score \d+ or sacrifice child",
    )
});
static FIELD: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"(?P<k>total-vm|anon-rss|file-rss|shmem-rss):\s*(?P<v>\d[\d,]*)kB")
});
static COMPLETE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"(?:oom_score_adj:\s*-?\d+|shmem-rss:\s*\d+kB|file-rss:\s*\d+kB)\s*$")
});
static INVOKER: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"(?P<comm>\S[^:]*?) invoked oom-killer: gfp_mask="));
static CONSTRAINT: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"oom-kill:constraint=CONSTRAINT_(?P<c>[A-Z_]+)"));
static OOM_MEMCG: LazyLock<Regex> = LazyLock::new(|| static_regex(r"[,:]oom_memcg=(?P<p>[^,\s]+)"));
static TASK_MEMCG: LazyLock<Regex> = LazyLock::new(|| static_regex(r",task_memcg=(?P<p>[^,\s]+)"));
static MEMCG_USAGE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"(?:^|[\s\]:])memory: usage (?P<u>\d+)kB, limit (?P<l>\d+)kB, failcnt \d+")
});
static FREE_SWAP: LazyLock<Regex> = LazyLock::new(|| static_regex(r"Free swap\s*=\s*(?P<n>\d+)kB"));
static TOTAL_SWAP: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"Total swap\s*=\s*(?P<n>\d+)kB"));
static PAGES_RAM: LazyLock<Regex> = LazyLock::new(|| static_regex(r"(?:^|\s)(?P<n>\d+) pages RAM"));
static MEMINFO_FREE: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"(?:^|\s)free:(?P<n>\d+) free_pcp:"));
static CGROUP_STATS: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"Memory cgroup stats for (?P<p>\S+?):?\s*$"));

/// A cgroup's own count of its OOM kills, as `cat memory.events` (v2) or `memory.oom_control`
/// (v1) prints it: `oom_kill 3` on a line of its own.
static CGROUP_OOM_KILLS: LazyLock<Regex> = LazyLock::new(|| static_regex(r"^oom_kill (?P<n>\d+)$"));
/// The lines printed beside it: `low 0`, `max 214`, `oom 3`, `under_oom 0`, ...
static CGROUP_COUNTER: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"^(?:low|high|max|oom|oom_group_kill|oom_kill_disable|under_oom) \d+$")
});

/// A memcg limit at or above this many kB means "no limit" (`PAGE_COUNTER_MAX`).
const UNLIMITED_KB: u64 = 1 << 50;

/// The kernel OOM-killer recogniser.
pub struct Kernel;

impl Recognizer for Kernel {
    fn engine(&self) -> &'static str {
        id::LINUX
    }

    fn anchors(&self) -> &'static [&'static str] {
        &[
            "Killed process",
            "Kill process",
            "no killable processes",
            "deadlocked on memory",
            "oom_kill ",
        ]
    }

    fn recognize(&self, line: &Line<'_>, out: &mut Emit) {
        let text = line.text;
        if text.contains("Killed process") {
            let (joined, used) = join_wrapped(line);
            let t = joined.as_deref().unwrap_or(text);
            let Some(c) = KILLED.captures(t) else {
                return;
            };
            let mut f = kill_failure(&c, t);
            sequence(line, &mut f);
            if let Some(j) = joined {
                f.text = Some(j);
                out.consume(used);
            }
            out.failure(f);
            return;
        }
        if let Some(c) = CGROUP_OOM_KILLS.captures(text.trim()) {
            if let Some(f) = cgroup_counted_kills(line, &c) {
                out.failure(f);
            }
            return;
        }
        if let Some(c) = KILL_OLD.captures(text) {
            let mut f = kill_failure(&c, text);
            sequence(line, &mut f);
            // The `Killed process` line that follows has the numbers.
            f.wrapper = true;
            out.failure(f);
            return;
        }
        if text.contains("Out of memory and no killable processes")
            || text.contains("System is deadlocked on memory")
        {
            let mut f = Failure::new("host-oom", id::LINUX, Domain::Host);
            f.fact("host.killer", "kernel", None)
                .fact("host.constraint", "global", None)
                .fact("host.oom_reason", "no killable processes", None);
            f.wrapper = text.contains("deadlocked");
            sequence(line, &mut f);
            out.failure(f);
        }
    }
}

/// A cgroup's counters read from inside a container (`cat /sys/fs/cgroup/memory.events`):
/// a nonzero `oom_kill` is the kernel killing a process of this cgroup at its memory limit,
/// whatever the program printed (often nothing: a launcher's `Shard 0 failed to start:`).
/// Only beside the file's name or its other counters: a bare `oom_kill 3` is anyone's.
fn cgroup_counted_kills(line: &Line<'_>, c: &regex::Captures<'_>) -> Option<Failure> {
    let m = c.name("n")?;
    let kills = m.as_str().parse::<u32>().ok().filter(|n| *n > 0)?;
    let beside_counters = line.preceding(8).iter().any(|l| {
        let t = l.text.trim();
        t.contains("memory.events")
            || t.contains("memory.oom_control")
            || CGROUP_COUNTER.is_match(t)
    });
    if !beside_counters {
        return None;
    }
    let mut f = Failure::new("host-oom", id::LINUX, Domain::Host);
    f.fact("host.killer", "memcg", None)
        .fact("host.constraint", "memcg", None)
        .fact("host.oom_events", kills, span(&m))
        .fact("host.signal", "KILL", None);
    Some(f)
}

/// Joins a kill line that a terminal wrapped: continuation lines have no prefix of their own.
fn join_wrapped(line: &Line<'_>) -> (Option<String>, u32) {
    if COMPLETE.is_match(line.text.trim_end()) {
        return (None, 0);
    }
    let mut joined = line.text.trim_end().to_string();
    for (i, next) in line.following(3).into_iter().enumerate() {
        let raw_prefixed = next.meta.timestamp.is_some() || next.meta.process.is_some();
        let piece = next.text.trim();
        if raw_prefixed || piece.is_empty() || piece.contains("Killed process") {
            break;
        }
        joined.push_str(piece);
        if COMPLETE.is_match(&joined) {
            return (Some(joined), i as u32 + 1);
        }
    }
    (None, 0)
}

fn kill_failure(c: &regex::Captures<'_>, text: &str) -> Failure {
    let comm = c.name("comm").map(|m| m.as_str()).unwrap_or("");
    let reason = c.name("reason").map(|m| m.as_str());
    let engine = crate::facts::engine::of_process(comm);
    let mut f = Failure::new("host-oom", engine, Domain::Host);
    if let Some(m) = c.name("pid") {
        if let Ok(p) = m.as_str().parse::<u64>() {
            f.fact("host.victim_pid", p, span(&m));
        }
    }
    if let Some(m) = c.name("comm") {
        f.fact("host.victim_name", comm.to_string(), span(&m));
    }
    if let Some(r) = reason {
        f.fact("host.oom_reason", r.to_string(), None);
        if r.starts_with("Memory cgroup") {
            f.fact("host.constraint", "memcg", None);
        }
    }
    for fc in FIELD.captures_iter(text) {
        let k = fc.name("k").map(|m| m.as_str()).unwrap_or("");
        let Some(v) = fc.name("v") else { continue };
        let Some(b) = kib(v.as_str()) else { continue };
        let name = match k {
            "total-vm" => "host.victim_total_vm_bytes",
            "anon-rss" => "host.victim_anon_rss_bytes",
            "file-rss" => "host.victim_file_rss_bytes",
            _ => "host.victim_shmem_rss_bytes",
        };
        f.fact(name, b, span(&v));
    }
    f.fact("host.signal", "KILL", None)
        .fact("host.exit_code", 137u32, None);
    f
}

/// Reads the lines of this kill's sequence, back to the previous kill, into the failure.
fn sequence(line: &Line<'_>, f: &mut Failure) {
    let mut constraint: Option<&'static str> = None;
    let mut cgroup: Option<String> = None;
    let mut usage_limit: Option<(u64, u64)> = None;
    let mut invoker: Option<String> = None;
    let mut free_swap = None;
    let mut total_swap = None;
    let mut pages_ram = None;
    let mut free_pages = None;
    walk_back(line, 3000, |raw| {
        if raw.contains("Killed process") || raw.contains("oom_reaper:") {
            return false;
        }
        // Only a few lines of the report matter; skip the rest without cleaning.
        if !(raw.contains("oom")
            || raw.contains("memory")
            || raw.contains("Memory cgroup")
            || raw.contains("swap")
            || raw.contains("pages RAM")
            || raw.contains("free:"))
        {
            return true;
        }
        let c = clean_line(raw.as_bytes());
        let t = c.text.as_str();
        if let Some(m) = CONSTRAINT.captures(t) {
            constraint.get_or_insert(match &m["c"] {
                "MEMCG" => "memcg",
                "CPUSET" => "cpuset",
                "MEMORY_POLICY" => "mempolicy",
                _ => "global",
            });
            let path = OOM_MEMCG
                .captures(t)
                .or_else(|| TASK_MEMCG.captures(t))
                .map(|m| m["p"].to_string());
            if cgroup.is_none() {
                cgroup = path;
            }
        }
        if usage_limit.is_none() {
            if let Some(m) = MEMCG_USAGE.captures(t) {
                if let (Ok(u), Ok(l)) = (m["u"].parse::<u64>(), m["l"].parse::<u64>()) {
                    usage_limit = Some((u, l));
                }
            }
        }
        if cgroup.is_none() {
            if let Some(m) = CGROUP_STATS.captures(t) {
                cgroup = Some(m["p"].to_string());
            }
        }
        if free_swap.is_none() {
            free_swap = FREE_SWAP
                .captures(t)
                .and_then(|m| m["n"].parse::<u64>().ok());
        }
        if total_swap.is_none() {
            total_swap = TOTAL_SWAP
                .captures(t)
                .and_then(|m| m["n"].parse::<u64>().ok());
        }
        if pages_ram.is_none() {
            pages_ram = PAGES_RAM
                .captures(t)
                .and_then(|m| m["n"].parse::<u64>().ok());
        }
        if free_pages.is_none() {
            free_pages = MEMINFO_FREE
                .captures(t)
                .and_then(|m| m["n"].parse::<u64>().ok());
        }
        if let Some(m) = INVOKER.captures(t) {
            invoker = Some(m["comm"].trim().to_string());
            // The start of this kill's report.
            return false;
        }
        true
    });
    let has_reason_memcg = f
        .get("host.constraint")
        .and_then(|v| v.as_str())
        .is_some_and(|c| c == "memcg");
    let limited = usage_limit.is_some_and(|(_, l)| l < UNLIMITED_KB);
    let constraint = constraint.unwrap_or(if has_reason_memcg || limited {
        "memcg"
    } else {
        "global"
    });
    if !has_reason_memcg {
        f.fact("host.constraint", constraint, None);
    }
    f.fact(
        "host.killer",
        if constraint == "memcg" {
            "memcg"
        } else {
            "kernel"
        },
        None,
    );
    if let Some(inv) = invoker {
        f.fact("host.invoker_name", inv, None);
    }
    if let Some(cg) = cgroup {
        if let Some(k) = container_of_cgroup(&cg) {
            f.fact("host.container", k, None);
        }
        f.fact("host.cgroup", cg, None);
    }
    // kB and 4 KiB pages to bytes. A count whose byte size does not fit in 64 bits (more
    // than 16 EiB) is no machine's: a corrupt or forged line, left out rather than wrapped.
    let kib = |n: u64| n.checked_mul(1024);
    let pages = |n: u64| n.checked_mul(4096);
    if let Some((u, l)) = usage_limit {
        if let Some(b) = kib(u) {
            f.fact("host.cgroup_usage_bytes", b, None);
        }
        if let Some(b) = kib(l).filter(|_| l < UNLIMITED_KB) {
            f.fact("host.cgroup_limit_bytes", b, None);
        }
    }
    if let Some(b) = free_swap.and_then(kib) {
        f.fact("host.swap_free_bytes", b, None);
    }
    if let Some(b) = total_swap.and_then(kib) {
        f.fact("host.swap_total_bytes", b, None);
    }
    if let Some(b) = pages_ram.and_then(pages) {
        f.fact("host.total_ram_bytes", b, None);
    }
    if let Some(b) = free_pages.and_then(pages) {
        f.fact("host.free_ram_bytes", b, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::facts::evidence::{InputName, Value};
    use crate::ingest::log::grouping::analyze_log;
    use std::sync::Arc;

    /// A cgroup's own counters: a nonzero `oom_kill` beside them is a kill at its limit.
    #[test]
    fn a_cgroups_counted_kills() {
        let input: crate::facts::evidence::InputName = std::sync::Arc::from("t.log");
        let kills = |log: &str| {
            let ev = crate::ingest::log::grouping::analyze_log(&mut log.as_bytes(), &input)
                .unwrap()
                .0;
            ev.incidents.first().map(|i| {
                (
                    i.facts.num("host.oom_events"),
                    i.facts.str("host.killer").map(String::from),
                )
            })
        };
        let events =
            "sh-4.4$ cat /sys/fs/cgroup/memory.events\nlow 0\nhigh 0\nmax 214\noom 3\noom_kill 3\n";
        assert_eq!(kills(events), Some((Some(3.0), Some("memcg".into()))));
        let grepped = "$ cat /sys/fs/cgroup/memory.events | grep oom_kill\noom_kill 4\n";
        assert_eq!(kills(grepped).and_then(|k| k.0), Some(4.0));
        // None yet, or a count with nothing to say it is a cgroup's.
        assert_eq!(
            kills("$ cat memory.events\nlow 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n"),
            None
        );
        assert_eq!(kills("stats:\noom_kill 2\n"), None);
    }

    fn failure(raw: &str) -> Option<Failure> {
        crate::ingest::log::engines::emitted_failure(&crate::ingest::log::engines::run_line(
            &Kernel, raw,
        ))
    }

    fn s<'a>(f: &'a Failure, n: &str) -> Option<&'a str> {
        f.get(n).and_then(Value::as_str)
    }
    fn n(f: &Failure, name: &str) -> Option<f64> {
        f.get(name).and_then(Value::as_f64)
    }

    /// Every generation of the kill line.
    #[test]
    fn every_kill_line() {
        // >= 5.x with UID and pgtables
        let f = failure("[ 8123.456789] Out of memory: Killed process 4242 (python3) total-vm:120123456kB, anon-rss:30123456kB, file-rss:65536kB, shmem-rss:2048kB, UID:1000 pgtables:61234kB oom_score_adj:0").unwrap();
        assert_eq!(f.engine, id::PYTORCH);
        assert_eq!(n(&f, "host.victim_pid"), Some(4242.0));
        assert_eq!(s(&f, "host.victim_name"), Some("python3"));
        assert_eq!(
            n(&f, "host.victim_anon_rss_bytes"),
            Some(30123456.0 * 1024.0)
        );
        assert_eq!(n(&f, "host.victim_file_rss_bytes"), Some(65536.0 * 1024.0));
        assert_eq!(s(&f, "host.constraint"), Some("global"));
        assert_eq!(s(&f, "host.killer"), Some("kernel"));
        // 4.19-5.x without UID
        let f = failure("Feb 03 19:57:08 gpu-node-7 kernel: Memory cgroup out of memory: Killed process 9001 (VLLM::EngineCor) total-vm:98765432kB, anon-rss:12345678kB, file-rss:0kB, shmem-rss:0kB").unwrap();
        assert_eq!(f.engine, id::VLLM);
        assert_eq!(s(&f, "host.constraint"), Some("memcg"));
        assert_eq!(s(&f, "host.killer"), Some("memcg"));
        // 4.5-4.18, no reason prefix
        let f = failure("[Tue May 19 09:42:18 2026] Killed process 777 (llama-server) total-vm:5000000kB, anon-rss:4000000kB, file-rss:900000kB, shmem-rss:0kB").unwrap();
        assert_eq!(f.engine, id::LLAMACPP);
        // < 4.5, no shmem-rss
        let f = failure(
            "Killed process 31 (ollama_llama_se) total-vm:100kB, anon-rss:50kB, file-rss:10kB",
        )
        .unwrap();
        assert_eq!(f.engine, id::OLLAMA);
        assert_eq!(n(&f, "host.victim_anon_rss_bytes"), Some(50.0 * 1024.0));
        // oom_kill_allocating_task
        let f = failure("Out of memory (oom_kill_allocating_task): Killed process 5 (java) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:4kB oom_score_adj:0").unwrap();
        assert_eq!(f.engine, id::LINUX);
        assert_eq!(
            s(&f, "host.oom_reason"),
            Some("Out of memory (oom_kill_allocating_task)")
        );
        // The old two-line form: the `Kill process ... or sacrifice child` header is a wrapper.
        let f = failure("Out of memory: Kill process 4242 (python) score 912 or sacrifice child")
            .unwrap();
        assert!(f.wrapper);
        let f = failure("Out of memory and no killable processes...").unwrap();
        assert_eq!(f.kind, "host-oom");
        // Not kills.
        assert!(
            failure("oom_reaper: reaped process 4242 (python3), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB").is_none()
        );
        assert!(
            failure("python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0").is_none()
        );
    }

    const MEMCG_SEQ: &str = "\
[ 9000.000001] pt_data_worker invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0
[ 9000.000002] CPU: 12 PID: 5555 Comm: pt_data_worker Not tainted 5.15.0-105-generic #115-Ubuntu
[ 9000.000003] memory: usage 33554432kB, limit 33554432kB, failcnt 4711
[ 9000.000004] swap: usage 0kB, limit 9007199254740988kB, failcnt 0
[ 9000.000005] Memory cgroup stats for /kubepods/burstable/pod1234/abcd:
[ 9000.000006] Tasks state (memory values in pages):
[ 9000.000007] [  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name
[ 9000.000008] [   4242]  1000  4242 30030864  7800000 62914560        0           937 python3
[ 9000.000009] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=abcd,mems_allowed=0-1,oom_memcg=/kubepods/burstable/pod1234/abcd,task_memcg=/kubepods/burstable/pod1234/abcd,task=python3,pid=4242,uid=1000
[ 9000.000010] Memory cgroup out of memory: Killed process 4242 (python3) total-vm:120123456kB, anon-rss:31000000kB, file-rss:12000kB, shmem-rss:0kB, UID:1000 pgtables:61440kB oom_score_adj:937
";

    #[test]
    fn the_sequence_is_carried_into_the_kill() {
        let input: InputName = Arc::from("t.log");
        let ev = analyze_log(&mut MEMCG_SEQ.as_bytes(), &input).unwrap().0;
        assert_eq!(ev.incidents.len(), 1);
        let inc = &ev.incidents[0];
        let f = &inc.facts;
        assert_eq!(f.str("host.constraint"), Some("memcg"));
        assert_eq!(f.str("host.invoker_name"), Some("pt_data_worker"));
        assert_eq!(f.str("host.victim_name"), Some("python3"));
        assert_eq!(f.num("host.cgroup_limit_bytes"), Some(33554432.0 * 1024.0));
        assert_eq!(f.str("host.container"), Some("kubernetes"));
        assert_eq!(inc.engine, id::PYTORCH);
        // A global kill later in the same log does not inherit the memcg numbers.
        let later = format!(
            "{MEMCG_SEQ}{}[ 9900.000001] Xorg invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0\n[ 9900.000002] Free swap  = 0kB\n[ 9900.000003] Total swap = 2097148kB\n[ 9900.000004] 16734012 pages RAM\n[ 9900.000005] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/user.slice/user-1000.slice/session-2.scope,task=llama-server,pid=777,uid=1000\n[ 9900.000006] Out of memory: Killed process 777 (llama-server) total-vm:70000000kB, anon-rss:50000000kB, file-rss:8000000kB, shmem-rss:0kB, UID:1000 pgtables:100000kB oom_score_adj:0\n",
            "noise\n".repeat(500)
        );
        let ev = analyze_log(&mut later.as_bytes(), &input).unwrap().0;
        assert_eq!(ev.incidents.len(), 2);
        let g = &ev.incidents[1].facts;
        assert_eq!(g.str("host.constraint"), Some("global"));
        assert_eq!(g.num("host.cgroup_limit_bytes"), None);
        assert_eq!(g.num("host.swap_free_bytes"), Some(0.0));
        assert_eq!(g.num("host.total_ram_bytes"), Some(16734012.0 * 4096.0));
        assert_eq!(ev.incidents[1].engine, id::LLAMACPP);
    }

    #[test]
    fn hard_wrapped_kill_line_is_joined() {
        let log = "[ 8123.456789] Out of memory: Killed process 4242 (python3) total-vm:12012345\n6kB, anon-rss:30123456kB, file-rss:65536kB, shmem-rss:0kB, UID:1000 pgtables:6123\n4kB oom_score_adj:0\n";
        let input: InputName = Arc::from("t.log");
        let ev = analyze_log(&mut log.as_bytes(), &input).unwrap().0;
        assert_eq!(ev.incidents.len(), 1);
        assert_eq!(
            ev.incidents[0].facts.num("host.victim_anon_rss_bytes"),
            Some(30123456.0 * 1024.0)
        );
        assert_eq!(
            ev.incidents[0].facts.num("host.victim_total_vm_bytes"),
            Some(120123456.0 * 1024.0)
        );
    }
}
