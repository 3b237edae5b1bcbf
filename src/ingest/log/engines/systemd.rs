//! systemd's unit manager and systemd-oomd.
//!
//! Sources: `ENGINE-MESSAGES.md` §10.2. The unit manager restates kernel kills
//! (`A process of this unit has been killed by the OOM killer.`, `Failed with result
//! 'oom-kill'.`): wrappers. systemd-oomd kills on its own, for swap use
//! (`Killed /user.slice/... due to memory used (X) / total (Y) and swap used (A) / total (B)
//! being more than 90.00%`) or memory pressure (`... due to memory pressure for ... being
//! 74.21% > 50.00% for > 20s with reclaim activity`); newer releases say `Marked ... for
//! killing`. The `Considered N cgroups for killing, top candidates were:` survey before it is
//! not a kill.

use std::sync::LazyLock;

use regex::Regex;

use super::local::{container_of_cgroup, span, victim_engine_nearby};
use super::{Domain, Emit, Failure, Line, Recognizer, id};
use crate::facts::engine;
use crate::ingest::log::pattern::static_regex;

static OOMD_SWAP: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?:Killed|Marked) (?P<cg>\S+)(?: for killing)? due to memory used \((?P<used>\d+)\) / total \((?P<total>\d+)\) and swap used \((?P<su>\d+)\) / total \((?P<st>\d+)\) being more than (?P<pct>\d+(?:\.\d+)?)%",
    )
});
static OOMD_PRESSURE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?:Killed|Marked) (?P<cg>\S+)(?: for killing)? due to memory pressure for (?P<mon>\S+) being (?P<p>\d+(?:\.\d+)?)% > (?P<lim>\d+(?:\.\d+)?)% for > (?P<dur>\S+)",
    )
});
static UNIT_OOM: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?P<unit>[\w@.:\\-]+\.(?:service|scope|slice)): (?:A process of this unit has been killed by the OOM killer|Failed with result 'oom-kill'|systemd-oomd killed (?P<n>\d+) process\(es\) in this unit)",
    )
});
static ACTIVE_OOM: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"Active: failed \(Result: oom-kill\)"));
static MAIN_KILLED: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?P<unit>[\w@.:\\-]+\.(?:service|scope)): Main process exited, code=killed, status=9/KILL",
    )
});

/// The systemd / systemd-oomd recogniser.
pub struct Systemd;

impl Recognizer for Systemd {
    fn engine(&self) -> &'static str {
        id::SYSTEMD
    }

    fn anchors(&self) -> &'static [&'static str] {
        &[
            "due to memory used",
            "due to memory pressure",
            "killed by the OOM killer",
            "result 'oom-kill'",
            "process(es) in this unit",
            "Result: oom-kill",
            "status=9/KILL",
        ]
    }

    fn recognize(&self, line: &Line<'_>, out: &mut Emit) {
        let text = line.text;
        if let Some(c) = OOMD_SWAP.captures(text) {
            let mut f = oomd(&c, "swap");
            let num = |g: &str| c.name(g).and_then(|m| m.as_str().parse::<u64>().ok());
            for (g, name) in [
                ("used", "host.used_ram_bytes"),
                ("total", "host.total_ram_bytes"),
                ("su", "host.swap_used_bytes"),
                ("st", "host.swap_total_bytes"),
            ] {
                if let (Some(v), Some(m)) = (num(g), c.name(g)) {
                    f.fact(name, v, span(&m));
                }
            }
            if let (Some(su), Some(st)) = (num("su"), num("st")) {
                f.fact("host.swap_free_bytes", st.saturating_sub(su), None);
            }
            if let Some(m) = c.name("pct") {
                if let Ok(p) = m.as_str().parse::<f64>() {
                    f.fact("host.pressure_limit", p / 100.0, span(&m));
                }
            }
            out.failure(f);
            return;
        }
        if let Some(c) = OOMD_PRESSURE.captures(text) {
            let mut f = oomd(&c, "pressure");
            if let Some(m) = c.name("p") {
                if let Ok(p) = m.as_str().parse::<f64>() {
                    f.fact("host.memory_pressure", p / 100.0, span(&m));
                }
            }
            if let Some(m) = c.name("lim") {
                if let Ok(p) = m.as_str().parse::<f64>() {
                    f.fact("host.pressure_limit", p / 100.0, span(&m));
                }
            }
            out.failure(f);
            return;
        }
        if let Some(c) = UNIT_OOM.captures(text) {
            let unit = c.name("unit").map(|m| m.as_str()).unwrap_or("");
            let by_oomd = c.name("n").is_some();
            let engine = victim_engine_nearby(line, engine_of_unit(unit));
            let mut f = Failure::new("host-oom", engine, Domain::Host);
            f.fact(
                "host.killer",
                if by_oomd { "systemd-oomd" } else { "systemd" },
                None,
            )
            .fact(
                "host.cgroup",
                unit.to_string(),
                c.name("unit").as_ref().and_then(span),
            )
            .fact("host.container", "systemd", None)
            .fact("host.signal", "KILL", None);
            // The kernel's or oomd's own line says more; this restates it.
            f.wrapper = true;
            out.failure(f);
            return;
        }
        if ACTIVE_OOM.is_match(text) {
            let engine = victim_engine_nearby(line, id::SYSTEMD);
            let mut f = Failure::new("host-oom", engine, Domain::Host);
            f.fact("host.killer", "systemd", None)
                .fact("host.container", "systemd", None);
            f.wrapper = true;
            out.failure(f);
            return;
        }
        if let Some(c) = MAIN_KILLED.captures(text) {
            // SIGKILL of a unit's main process: the OOM killer, or a stop timeout. Only
            // worth an incident next to OOM evidence, which is what a wrapper gives.
            let unit = c.name("unit").map(|m| m.as_str()).unwrap_or("");
            let engine = victim_engine_nearby(line, engine_of_unit(unit));
            let mut f = Failure::new("host-oom", engine, Domain::Host);
            f.fact("host.killer", "unknown", None)
                .fact("host.signal", "KILL", None)
                .fact("host.exit_code", 137u32, None)
                .fact("host.cgroup", unit.to_string(), None);
            f.wrapper = true;
            out.failure(f);
        }
    }
}

fn oomd(c: &regex::Captures<'_>, reason: &str) -> Failure {
    let cg = c.name("cg").map(|m| m.as_str()).unwrap_or("");
    let victim = cg.rsplit('/').find(|p| !p.is_empty()).unwrap_or(cg);
    let mut f = Failure::new("host-oom", engine_of_unit(victim), Domain::Host);
    f.fact("host.killer", "systemd-oomd", None)
        .fact("host.oom_reason", reason.to_string(), None)
        .fact("host.constraint", "global", None)
        .fact("host.signal", "KILL", None)
        .fact("host.victim_name", victim.to_string(), None);
    if let Some(m) = c.name("cg") {
        f.fact("host.cgroup", cg.to_string(), span(&m));
    }
    if let Some(k) = container_of_cgroup(cg) {
        f.fact("host.container", k, None);
    }
    f
}

/// `ollama.service` → ollama; `vllm-server.service` → vllm; `app-...-python3-1234.scope`.
fn engine_of_unit(unit: &str) -> &'static str {
    let lower = unit.to_ascii_lowercase();
    let stem = lower
        .trim_end_matches(".service")
        .trim_end_matches(".scope")
        .trim_end_matches(".slice");
    match engine::of_process(stem) {
        // A scope named after the interpreter (`app-python3-1234.scope`) is a Python job.
        id::LINUX => engine::mentioned_in(stem).unwrap_or(
            if stem.contains("python") || stem.contains("jupyter") {
                id::PYTORCH
            } else {
                id::SYSTEMD
            },
        ),
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::facts::evidence::Value;

    fn failure(raw: &str) -> Option<Failure> {
        crate::ingest::log::engines::emitted_failure(&crate::ingest::log::engines::run_line(
            &Systemd, raw,
        ))
    }

    #[test]
    fn every_systemd_format() {
        let f = failure("Jun 02 14:10:11 ws systemd-oomd[812]: Killed /user.slice/user-1000.slice/user@1000.service/app.slice/app-org.gnome.Terminal.slice/vte-spawn-7c1.scope due to memory used (66572136448) / total (67108864000) and swap used (7730941132) / total (8589930496) being more than 90.00%").unwrap();
        assert_eq!(
            f.get("host.killer").and_then(Value::as_str),
            Some("systemd-oomd")
        );
        assert_eq!(
            f.get("host.swap_used_bytes").and_then(Value::as_f64),
            Some(7730941132.0)
        );
        assert_eq!(
            f.get("host.pressure_limit").and_then(Value::as_f64),
            Some(0.9)
        );
        assert!(!f.wrapper);
        let f = failure("systemd-oomd[600]: Marked /user.slice/user-1000.slice/user@1000.service/app.slice/ollama.service for killing due to memory pressure for /user.slice/user-1000.slice/user@1000.service being 74.21% > 50.00% for > 20s with reclaim activity").unwrap();
        assert_eq!(f.engine, id::OLLAMA);
        assert_eq!(
            f.get("host.memory_pressure").and_then(Value::as_f64),
            Some(0.7421)
        );
        let f = failure("Mär 04 10:00:01 box systemd[1]: ollama.service: A process of this unit has been killed by the OOM killer.").unwrap();
        assert!(f.wrapper);
        assert_eq!(f.engine, id::OLLAMA);
        assert!(failure("systemd[1]: vllm.service: Failed with result 'oom-kill'.").is_some());
        assert!(
            failure(
                "systemd[1]: session-4.scope: systemd-oomd killed 37 process(es) in this unit."
            )
            .is_some()
        );
        assert!(
            failure(
                "     Active: failed (Result: oom-kill) since Tue 2025-06-03 10:00:00 UTC; 2min ago"
            )
            .is_some()
        );
        assert!(
            failure("systemd[1]: llama.service: Main process exited, code=killed, status=9/KILL")
                .unwrap()
                .wrapper
        );
        // The survey is not a kill.
        for t in [
            "systemd-oomd[812]: Considered 12 cgroups for killing, top candidates were:",
            "systemd-oomd[812]:         Path: /user.slice/user-1000.slice/session-2.scope",
            "systemd-oomd[812]:                 Swap Usage: 2.1G",
            "systemd-oomd[812]:                 Memory Pressure Limit: 0.00%",
            "systemd[1]: ollama.service: Main process exited, code=exited, status=1/FAILURE",
        ] {
            assert!(failure(t).is_none(), "{t}");
        }
    }
}
