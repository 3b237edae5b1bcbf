//! Ray's memory monitor: the raylet kills a worker when the node's memory use crosses
//! `RAY_memory_usage_threshold` (0.95 by default).
//!
//! Shapes (checked against the messages users paste): the driver raises
//! `ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.`
//! followed by `Memory on the node (IP: ..., ID: ...) where the task (task ID: ..., name=...,
//! pid=..., memory used=12.18GB) was running was 21.91GB / 33.28GB (0.658192), which exceeds
//! the memory usage threshold of 0.65. Ray killed this worker ...` (older releases leave out
//! the parenthesised task details; actors say `actor ID`), then a `Top 10 memory users:`
//! table. The raylet periodically summarises `N Workers (tasks / actors) killed due to memory
//! pressure (OOM)`. Ray prints these sizes with a `GB` label computed in powers of 1024.

use std::sync::LazyLock;

use regex::Regex;

use super::local::{size_bin, span, walk_forward};
use super::{Domain, Emit, Failure, Line, Recognizer, id};
use crate::ingest::log::pattern::static_regex;

static NODE_MEMORY: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"Memory on the node \(IP: (?P<ip>[^,)]+)(?:, ID: \w+)?\) where the (?:task|actor)(?: \((?P<inner>[^)]*)\))? was running was (?P<used>\d+(?:\.\d+)?)GB / (?P<total>\d+(?:\.\d+)?)GB \((?P<frac>\d+(?:\.\d+)?)\), which exceeds the memory usage threshold of (?P<thr>\d+(?:\.\d+)?)",
    )
});
static INNER_NAME: LazyLock<Regex> = LazyLock::new(|| static_regex(r"name=(?P<n>[^,]+)"));
static INNER_PID: LazyLock<Regex> = LazyLock::new(|| static_regex(r"pid=(?P<n>\d+)"));
static INNER_USED: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"memory used=(?P<n>\d+(?:\.\d+)?)GB"));
static WORKERS_KILLED: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?:(?P<n>\d+) Workers \(tasks /\s*)?(?:actors\) )?killed due to memory pressure \(OOM\)",
    )
});
static THRESHOLD_ENV: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"RAY_memory_usage_threshold(?:_fraction)?\s*[=:]\s*['\x22]?(?P<v>0?\.\d+|1(?:\.0+)?)",
    )
});
static TOP_ROW: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"^\s*(?P<pid>\d+)\s+(?P<gb>\d+(?:\.\d+)?)\s+(?P<cmd>\S.*)$"));
static SHM_WARNING: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"/dev/shm has only (?P<n>\d+) bytes available"));

/// The Ray recogniser.
pub struct Ray;

impl Recognizer for Ray {
    fn engine(&self) -> &'static str {
        id::RAY
    }

    fn anchors(&self) -> &'static [&'static str] {
        &[
            "running low on memory",
            "NODE_OUT_OF_MEMORY",
            "Memory on the node",
            "killed due to memory pressure",
            "RAY_memory_usage_threshold",
            "/dev/shm has only",
            "how to address the out of memory issue",
            "ray-oom-prevention",
        ]
    }

    fn recognize(&self, line: &Line<'_>, out: &mut Emit) {
        let text = line.text;
        if let Some(c) = NODE_MEMORY.captures(text) {
            let inner = c.name("inner").map(|m| m.as_str()).unwrap_or("");
            let base = c.name("inner").map(|m| m.start()).unwrap_or(0);
            let name = INNER_NAME.captures(inner).and_then(|n| n.name("n"));
            let engine = match name.map(|n| n.as_str()) {
                Some(n) if n.to_ascii_lowercase().contains("vllm") => id::VLLM,
                _ => id::RAY,
            };
            let mut f = Failure::new("host-oom", engine, Domain::Host);
            f.fact("host.killer", "ray", None)
                .fact("host.constraint", "global", None)
                .fact("host.container", "ray", None)
                .fact("host.signal", "KILL", None);
            if let Some(n) = name {
                f.fact(
                    "host.victim_name",
                    n.as_str().trim().to_string(),
                    Some((base + n.start(), base + n.end())),
                );
            }
            if let Some(p) = INNER_PID.captures(inner).and_then(|p| p.name("n")) {
                if let Ok(v) = p.as_str().parse::<u64>() {
                    f.fact(
                        "host.victim_pid",
                        v,
                        Some((base + p.start(), base + p.end())),
                    );
                }
            }
            if let Some(u) = INNER_USED.captures(inner).and_then(|p| p.name("n")) {
                if let Some(b) = size_bin(u.as_str(), "GB") {
                    f.fact(
                        "host.victim_anon_rss_bytes",
                        b,
                        Some((base + u.start(), base + u.end())),
                    );
                }
            }
            for (g, name) in [
                ("used", "host.used_ram_bytes"),
                ("total", "host.total_ram_bytes"),
            ] {
                if let Some(m) = c.name(g) {
                    if let Some(b) = size_bin(m.as_str(), "GB") {
                        f.fact(name, b, span(&m));
                    }
                }
            }
            for (g, name) in [
                ("frac", "ray.memory_usage_fraction"),
                ("thr", "ray.memory_usage_threshold"),
            ] {
                if let Some(m) = c.name(g) {
                    if let Ok(v) = m.as_str().parse::<f64>() {
                        f.fact(name, v, span(&m));
                    }
                }
            }
            // The `Top 10 memory users` table that follows.
            let mut in_table = false;
            let mut best: Option<(f64, String)> = None;
            walk_forward(line, 16, |raw| {
                let t = raw.trim();
                if t.contains("MEM(GB)") {
                    in_table = true;
                    return true;
                }
                if !in_table {
                    return !t.is_empty() || best.is_none();
                }
                match TOP_ROW.captures(t) {
                    Some(r) => {
                        if let Ok(gb) = r["gb"].parse::<f64>() {
                            if best.as_ref().is_none_or(|(b, _)| gb > *b) {
                                best = Some((gb, r["cmd"].trim().to_string()));
                            }
                        }
                        true
                    }
                    None => false,
                }
            });
            if let Some((gb, cmd)) = best {
                f.fact("ray.top_process_name", cmd, None);
                if let Some(b) = size_bin(&format!("{gb}"), "GB") {
                    f.fact("ray.top_process_bytes", b, None);
                }
            }
            out.failure(f);
            return;
        }
        // Lines that restate a memory-monitor kill without its numbers: the task's exception,
        // the raylet's count of workers killed, and the advice paragraph printed after a kill.
        // A job's status message quotes only the last 20,000 characters of the log, so the
        // advice is often all that is left of the kill: alone it still means one happened.
        let restatement = text.contains("node running low on memory")
            || text.contains("NODE_OUT_OF_MEMORY")
            || text.contains("how to address the out of memory issue")
            || text.contains("ray-oom-prevention");
        let workers_killed = WORKERS_KILLED.captures(text);
        if restatement || workers_killed.is_some() {
            let mut f = Failure::new("host-oom", id::RAY, Domain::Host);
            f.fact("host.killer", "ray", None)
                .fact("host.container", "ray", None);
            let n = workers_killed
                .as_ref()
                .and_then(|c| c.name("n"))
                .and_then(|m| m.as_str().parse::<u32>().ok().map(|v| (v, span(&m))));
            if let Some((v, sp)) = n {
                f.fact("ray.workers_killed", v, sp);
            }
            f.wrapper = true;
            out.failure(f);
            return;
        }
        if let Some(c) = THRESHOLD_ENV.captures(text) {
            let m = c.name("v").expect("group v");
            if let Ok(v) = m.as_str().parse::<f64>() {
                out.fact("ray.memory_usage_threshold", v, span(&m));
            }
            return;
        }
        if let Some(c) = SHM_WARNING.captures(text) {
            let m = c.name("n").expect("group n");
            if let Ok(v) = m.as_str().parse::<u64>() {
                out.fact("host.shm_size_bytes", v, span(&m));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::facts::evidence::{InputName, Value};
    use crate::ingest::log::grouping::analyze_log;

    use std::sync::Arc;

    const GIB: f64 = 1073741824.0;

    fn failure(raw: &str) -> Option<Failure> {
        crate::ingest::log::engines::emitted_failure(&crate::ingest::log::engines::run_line(
            &Ray, raw,
        ))
    }

    #[test]
    fn the_advice_alone_is_a_kill() {
        let f = failure("Refer to the documentation on how to address the out of memory issue: https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html. Consider provisioning more memory on this node or reducing task parallelism by requesting more CPUs per task.").expect("advice");
        assert_eq!(f.kind, "host-oom");
        assert!(f.wrapper);
        assert!(
            failure("See https://docs.ray.io/en/latest/ray-core/scheduling/resources.html")
                .is_none()
        );
    }

    #[test]
    fn every_ray_format() {
        let f = failure("Memory on the node (IP: 10.0.0.7, ID: 4c1d9e) where the task (task ID: 9a8b, name=tokenize_shard, pid=3141, memory used=9.50GB) was running was 60.80GB / 62.80GB (0.968153), which exceeds the memory usage threshold of 0.95. Ray killed this worker (ID: 77ab) because it was the most recently scheduled task; to see more information about memory usage on this node, use `ray logs raylet.out -ip 10.0.0.7`.").unwrap();
        assert_eq!(
            f.get("host.victim_name").and_then(Value::as_str),
            Some("tokenize_shard")
        );
        assert_eq!(
            f.get("host.victim_anon_rss_bytes").and_then(Value::as_f64),
            Some((9.5 * GIB).round())
        );
        assert_eq!(
            f.get("host.total_ram_bytes").and_then(Value::as_f64),
            Some((62.8 * GIB).round())
        );
        assert_eq!(
            f.get("ray.memory_usage_threshold").and_then(Value::as_f64),
            Some(0.95)
        );
        // Older: no task details. Actors: `actor ID`, and vLLM workers name the engine.
        let f = failure("Memory on the node (IP: 172.17.0.2, ID: 3a4b) where the task was running was 31.00GB / 32.00GB (0.96875), which exceeds the memory usage threshold of 0.95. Ray killed this worker (ID: 39) because it was the most recently scheduled task;").unwrap();
        assert_eq!(f.get("host.victim_name"), None);
        let f = failure("Memory on the node (IP: 10.1.1.1, ID: 70) where the task (actor ID: 0d, name=RayWorkerVllm.__init__, pid=308, memory used=11.15GB) was running was 12.49GB / 13.15GB (0.950003), which exceeds the memory usage threshold of 0.95. Ray killed this worker").unwrap();
        assert_eq!(f.engine, id::VLLM);
        assert!(
            failure("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.")
                .unwrap()
                .wrapper
        );
        let f = failure("(raylet) [2025-04-02 15:02:00,117 E 135782 135782] (raylet) node_manager.cc:3069: 2 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: 35, IP: 10.9.1.7) over the last time period.").unwrap();
        assert_eq!(
            f.get("ray.workers_killed").and_then(Value::as_f64),
            Some(2.0)
        );
        assert!(failure("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task. Worker exit type: NODE_OUT_OF_MEMORY").is_some());
        // Hard-wrapped summary: the second half still counts.
        assert!(failure(" actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons").is_some());
        // Not kills.
        assert!(failure("To adjust the kill threshold, set the environment variable `RAY_memory_usage_threshold` when starting Ray.").is_none());
    }

    #[test]
    fn top_users_table() {
        let log = "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\nMemory on the node (IP: 10.0.0.7, ID: 4c) where the task (task ID: 9a, name=embed, pid=31, memory used=3.00GB) was running was 60.80GB / 62.80GB (0.968153), which exceeds the memory usage threshold of 0.95. Ray killed this worker (ID: 77) because it was the most recently scheduled task. Top 10 memory users:\nPID\tMEM(GB)\tCOMMAND\n2201\t21.40\tray::Trainer.fit\n31\t3.00\tray::embed\n\nRefer to the documentation on how to address the out of memory issue.\n";
        let input: InputName = Arc::from("t.log");
        let ev = analyze_log(&mut log.as_bytes(), &input).unwrap().0;
        assert_eq!(ev.incidents.len(), 1);
        let f = &ev.incidents[0].facts;
        assert_eq!(f.str("ray.top_process_name"), Some("ray::Trainer.fit"));
        assert_eq!(f.num("ray.top_process_bytes"), Some((21.4 * GIB).round()));
    }
}
