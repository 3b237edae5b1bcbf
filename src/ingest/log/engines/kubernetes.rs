//! Kubernetes, Docker and containerd: containers killed at their memory limit (OOMKilled,
//! exit 137) and pods evicted for node memory pressure.
//!
//! Sources: `ENGINE-MESSAGES.md` §10.3. `kubectl describe pod` prints the container's last
//! state (`Reason: OOMKilled`, `Exit Code: 137`, `Restart Count: 5`) above its
//! `Limits:`/`Requests:`; the failure is the `OOMKilled` line, which reads the rest of the
//! container block around it. An eviction (`The node was low on resource: memory. ...
//! Container x was using 30Gi, request is 16Gi`) is node pressure, not the container's own
//! limit, and gets different advice. Exit code 137 without `OOMKilled` is a SIGKILL from
//! elsewhere (probe, eviction, a person): `host.rs` reads it as an unexplained kill.

use std::sync::LazyLock;

use regex::Regex;

use super::local::{k8s_quantity, span, walk_back, walk_forward};
use super::{Domain, Emit, Failure, Line, Recognizer, id};
use crate::facts::engine;
use crate::ingest::log::clean::clean_line;
use crate::ingest::log::pattern::static_regex;

static REASON_OOMKILLED: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r#"(?:^|\s)(?:Reason|reason):\s+OOMKilled\b|"reason":\s*"OOMKilled"|\breason="?OOMKilled\b"#,
    )
});
static GET_PODS: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"^(?P<pod>[a-z0-9][\w.-]*)\s+\d+/\d+\s+OOMKilled\s+(?P<restarts>\d+)")
});
static EVICTED: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"The node (?:was low on resource: memory|had condition: \[?MemoryPressure)")
});
static THRESHOLD: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"Threshold quantity: (?P<q>[\w.]+), available: (?P<a>[\w.]+)"));
static USING: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"Container (?P<c>[\w.-]+) was using (?P<u>[\w.]+), (?:request is (?P<r>[\w.]+)|which exceeds its request of (?P<r2>[\w.]+))",
    )
});
static SYSTEM_OOM: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"System OOM encountered(?:, victim process: (?P<comm>[^,]+), pid: (?P<pid>\d+))?")
});
static DOCKER_OOM: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r#""OOMKilled":\s*true|\bcontainer oom [0-9a-f]{12}"#));
static CONTAINERD_OOM: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r#"TaskOOM event|publish OOM event|msg="?OOM event"#));
static DOCKER_MEMORY: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"(?:^|\s)(?:-m|--memory)[ =](?P<v>\d+(?:\.\d+)?[bkmgBKMG]?)\b"));
static SHM: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r#"(?:--shm-size[ =]|shm_size:\s*['"]?)(?P<v>\d+(?:\.\d+)?[bkmgBKMG]?[bB]?)"#)
});
static COMPOSE_LIMIT: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r#"^(?:(?P<key>mem_limit)|memory):\s*['"]?(?P<v>\d+(?:\.\d+)?(?:[kmgKMG]i?|[bkmgBKMG][bB]?)?)['"]?\s*$"#,
    )
});

/// The Kubernetes / Docker recogniser.
pub struct Kubernetes;

impl Recognizer for Kubernetes {
    fn engine(&self) -> &'static str {
        id::KUBERNETES
    }

    fn anchors(&self) -> &'static [&'static str] {
        &[
            "OOMKilled",
            "The node was low on resource",
            "MemoryPressure",
            "System OOM encountered",
            "TaskOOM",
            "OOM event",
            "container oom",
            "--memory",
            "docker run",
            "--shm-size",
            "shm_size",
            "mem_limit",
            "memory:",
        ]
    }

    fn recognize(&self, line: &Line<'_>, out: &mut Emit) {
        let text = line.text;
        if REASON_OOMKILLED.is_match(text) {
            out.failure(oomkilled(line, text.contains("\"reason\"")));
            return;
        }
        if let Some(c) = GET_PODS.captures(text.trim()) {
            let mut f = base("kubernetes");
            f.fact("host.oom_reason", "OOMKilled", None)
                .fact("host.constraint", "memcg", None)
                .fact("host.exit_code", 137u32, None);
            if let Some(m) = c.name("restarts") {
                if let Ok(n) = m.as_str().parse::<u32>() {
                    f.fact("host.restart_count", n, span(&m));
                }
            }
            if let Some(m) = c.name("pod") {
                f.fact("host.cgroup", m.as_str().to_string(), span(&m));
            }
            out.failure(f);
            return;
        }
        if EVICTED.is_match(text) {
            let mut f = Failure::new("host-oom", id::KUBERNETES, Domain::Host);
            // `kubectl describe` prints the message twice (status and events).
            f.wrapper = line.preceding(80).iter().any(|l| EVICTED.is_match(&l.text));
            f.fact("host.killer", "eviction", None)
                .fact("host.oom_reason", "Evicted", None)
                .fact("host.constraint", "global", None)
                .fact("host.container", "kubernetes", None);
            if let Some(c) = THRESHOLD.captures(text) {
                if let (Some(q), Some(a)) = (c.name("q"), c.name("a")) {
                    if let Some(b) = k8s_quantity(q.as_str(), false) {
                        f.fact("host.eviction_threshold_bytes", b, span(&q));
                    }
                    if let Some(b) = k8s_quantity(a.as_str(), false) {
                        f.fact("host.node_available_bytes", b, span(&a));
                    }
                }
            }
            if let Some(c) = USING.captures(text) {
                if let Some(m) = c.name("u") {
                    if let Some(b) = k8s_quantity(m.as_str(), false) {
                        f.fact("host.cgroup_usage_bytes", b, span(&m));
                    }
                }
                if let Some(m) = c.name("r").or(c.name("r2")) {
                    if let Some(b) = k8s_quantity(m.as_str(), false) {
                        f.fact("host.memory_request_bytes", b, span(&m));
                    }
                }
                if let Some(m) = c.name("c") {
                    f.fact("host.victim_name", m.as_str().to_string(), span(&m));
                }
            }
            out.failure(f);
            return;
        }
        if let Some(c) = SYSTEM_OOM.captures(text) {
            let comm = c.name("comm").map(|m| m.as_str().trim()).unwrap_or("");
            let mut f = Failure::new("host-oom", engine::of_process(comm), Domain::Host);
            f.fact("host.killer", "kernel", None)
                .fact("host.constraint", "global", None)
                .fact("host.container", "kubernetes", None);
            if let Some(m) = c.name("comm") {
                f.fact("host.victim_name", comm.to_string(), span(&m));
            }
            if let Some(m) = c.name("pid") {
                if let Ok(p) = m.as_str().parse::<u64>() {
                    f.fact("host.victim_pid", p, span(&m));
                }
            }
            out.failure(f);
            return;
        }
        if DOCKER_OOM.is_match(text) {
            let mut f = base("docker");
            f.fact("host.constraint", "memcg", None)
                .fact("host.oom_reason", "OOMKilled", None);
            // `docker inspect` JSON: the limit and exit code sit near it.
            let mut scan = |t: &str| {
                if let Some(v) = json_num(t, "\"Memory\":") {
                    if v > 0 {
                        f.fact("host.cgroup_limit_bytes", v, None);
                    }
                }
                if json_num(t, "\"ExitCode\":") == Some(137) {
                    f.fact("host.exit_code", 137u32, None);
                }
                true
            };
            walk_back(line, 60, &mut scan);
            walk_forward(line, 200, &mut scan);
            out.failure(f);
            return;
        }
        if CONTAINERD_OOM.is_match(text) {
            let mut f = base("containerd");
            f.engine = super::local::victim_engine_nearby(line, f.engine);
            f.fact("host.constraint", "memcg", None);
            f.wrapper = true;
            out.failure(f);
            return;
        }
        // Configuration: docker run flags and compose keys.
        if text.contains("docker") || text.contains("--memory") || text.contains("podman") {
            if let Some(c) = DOCKER_MEMORY.captures(text) {
                let m = c.name("v").expect("group v");
                if let Some(b) = k8s_quantity(m.as_str(), true) {
                    out.fact("host.cgroup_limit_bytes", b, span(&m));
                    out.fact("host.container", "docker", None);
                }
            }
        }
        if let Some(c) = SHM.captures(text) {
            let m = c.name("v").expect("group v");
            let v = m.as_str().trim_end_matches(['b', 'B']);
            let v = if v.is_empty() { m.as_str() } else { v };
            if let Some(b) = k8s_quantity(v, true) {
                out.fact("host.shm_size_bytes", b, span(&m));
            }
        }
        if let Some(c) = COMPOSE_LIMIT.captures(text.trim()) {
            // A bare `memory: 16G` is a limit only under a `limits:` key (compose's
            // `deploy.resources.limits`, a pod spec or `kubectl describe`'s `Limits:`); under
            // `requests:` it is what the scheduler reserved, which caps nothing.
            let fact = if c.name("key").is_some_and(|k| k.as_str() == "mem_limit") {
                "host.cgroup_limit_bytes"
            } else {
                match enclosing_key(line).as_deref() {
                    Some("limits") => "host.cgroup_limit_bytes",
                    Some("requests") => "host.memory_request_bytes",
                    _ => return,
                }
            };
            let m = c.name("v").expect("group v");
            let v = m.as_str();
            let docker = !v.contains('i');
            let v = if docker {
                v.trim_end_matches(['b', 'B'])
            } else {
                v
            };
            if let Some(b) = k8s_quantity(v, docker) {
                out.fact(fact, b, span(&m));
            }
        }
    }
}

/// The YAML-ish key a `memory:` line sits under: the nearest line above that is a bare
/// `key:` header, lower-cased (`Limits:` from `kubectl describe`, `limits:` from a spec).
/// Sibling keys in between (`cpu: 8`, `nvidia.com/gpu: 1`) are skipped.
fn enclosing_key(line: &Line<'_>) -> Option<String> {
    let mut key = None;
    walk_back(line, 4, |raw| {
        let t = clean_line(raw.as_bytes()).text;
        let t = t.trim();
        match t.strip_suffix(':') {
            Some(k) if !k.contains(char::is_whitespace) => {
                key = Some(k.to_ascii_lowercase());
                false
            }
            _ => t.contains(':'),
        }
    });
    key
}

fn base(killer: &str) -> Failure {
    let engine = if killer == "kubernetes" {
        id::KUBERNETES
    } else {
        id::LINUX
    };
    let mut f = Failure::new("host-oom", engine, Domain::Host);
    f.fact("host.killer", killer.to_string(), None)
        .fact("host.signal", "KILL", None)
        .fact(
            "host.container",
            if killer == "kubernetes" {
                "kubernetes"
            } else {
                "docker"
            },
            None,
        );
    f
}

fn json_num(t: &str, key: &str) -> Option<u64> {
    let i = t.find(key)?;
    let rest = t[i + key.len()..].trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// A container's `Reason: OOMKilled` in `kubectl describe pod`, with what its block says:
/// the container name above it; exit code, restarts, limits and requests below.
fn oomkilled(line: &Line<'_>, json: bool) -> Failure {
    let mut f = base("kubernetes");
    f.fact("host.oom_reason", "OOMKilled", None)
        .fact("host.constraint", "memcg", None)
        .fact("host.exit_code", 137u32, None);
    if json {
        return f;
    }
    // The container's name: the nearest `name:` header line above, at a smaller indent.
    let mut name: Option<String> = None;
    walk_back(line, 30, |raw| {
        let t = clean_line(raw.as_bytes()).text;
        let t = t.trim();
        if t.ends_with(':') && !t.contains(' ') && !t.contains('\t') {
            let n = t.trim_end_matches(':');
            if !matches!(
                n,
                "Containers"
                    | "Limits"
                    | "Requests"
                    | "Environment"
                    | "Mounts"
                    | "Args"
                    | "Command"
                    | "Conditions"
                    | "Volumes"
                    | "Events"
            ) {
                name = Some(n.to_string());
                return false;
            }
        }
        true
    });
    if let Some(n) = name {
        f.engine = match engine::of_process(&n) {
            id::LINUX => engine::mentioned_in(&n).unwrap_or(id::KUBERNETES),
            e => e,
        };
        f.fact("host.victim_name", n, None);
    }
    let mut section = "";
    let mut limit = None;
    let mut request = None;
    let mut restarts = None;
    walk_forward(line, 40, |raw| {
        let t = clean_line(raw.as_bytes()).text;
        let t = t.trim();
        if t.starts_with("Limits:") {
            section = "limits";
        } else if t.starts_with("Requests:") {
            section = "requests";
        } else if let Some(v) = t.strip_prefix("memory:") {
            let q = k8s_quantity(v.trim(), false);
            match section {
                "limits" if limit.is_none() => limit = q,
                "requests" if request.is_none() => request = q,
                _ => {}
            }
        } else if let Some(v) = t.strip_prefix("Restart Count:") {
            restarts = v.trim().parse::<u32>().ok();
        } else if [
            "Environment:",
            "Mounts:",
            "Conditions:",
            "Volumes:",
            "Events:",
            "Liveness:",
            "Readiness:",
        ]
        .iter()
        .any(|p| t.starts_with(p))
        {
            return false;
        }
        true
    });
    if let Some(l) = limit {
        f.fact("host.cgroup_limit_bytes", l, None);
    }
    if let Some(r) = request {
        f.fact("host.memory_request_bytes", r, None);
    }
    if let Some(r) = restarts {
        f.fact("host.restart_count", r, None);
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::facts::evidence::{InputName, Value};
    use crate::ingest::log::grouping::analyze_log;

    use std::sync::Arc;

    fn failure(raw: &str) -> Option<Failure> {
        crate::ingest::log::engines::emitted_failure(&crate::ingest::log::engines::run_line(
            &Kubernetes,
            raw,
        ))
    }

    const DESCRIBE: &str = "\
Name:             vllm-7b-5d9c8f7b6-x2x9k
Namespace:        inference
Containers:
  vllm:
    Container ID:  containerd://4f1e2d
    Image:         vllm/vllm-openai:v0.6.3
    State:          Waiting
      Reason:       CrashLoopBackOff
    Last State:     Terminated
      Reason:       OOMKilled
      Exit Code:    137
      Started:      Mon, 03 Feb 2025 10:00:01 +0000
      Finished:     Mon, 03 Feb 2025 10:03:12 +0000
    Ready:          False
    Restart Count:  4
    Limits:
      memory:          24Gi
      nvidia.com/gpu:  1
    Requests:
      cpu:             4
      memory:          16Gi
      nvidia.com/gpu:  1
    Environment:
      HF_HOME:  /data
";

    #[test]
    fn describe_pod_block_is_read() {
        let input: InputName = Arc::from("t.log");
        let ev = analyze_log(&mut DESCRIBE.as_bytes(), &input).unwrap().0;
        assert_eq!(ev.incidents.len(), 1);
        let inc = &ev.incidents[0];
        assert_eq!(inc.engine, id::VLLM);
        let f = &inc.facts;
        assert_eq!(f.str("host.killer"), Some("kubernetes"));
        assert_eq!(f.num("host.cgroup_limit_bytes"), Some(24.0 * 1073741824.0));
        assert_eq!(
            f.num("host.memory_request_bytes"),
            Some(16.0 * 1073741824.0)
        );
        assert_eq!(f.num("host.restart_count"), Some(4.0));
        assert_eq!(f.num("host.exit_code"), Some(137.0));
        assert_eq!(inc.copies, 1, "Exit Code: 137 restates the OOMKilled");
    }

    /// The facts a whole input gives before any failure: the run's context.
    fn context_facts(text: &str) -> crate::facts::evidence::Facts {
        let input: InputName = Arc::from("t.log");
        let kill = "[12.5] Memory cgroup out of memory: Killed process 42 (python) total-vm:900kB, anon-rss:800kB, file-rss:0kB, shmem-rss:0kB\n";
        let log = format!("{text}{kill}");
        let ev = analyze_log(&mut log.as_bytes(), &input).unwrap().0;
        ev.incidents[0].facts.clone()
    }

    #[test]
    fn memory_keys_are_limits_only_under_limits() {
        let compose = "services:\n  trainer:\n    deploy:\n      resources:\n        limits:\n          cpus: '8'\n          memory: 16G\n";
        let f = context_facts(compose);
        assert_eq!(f.num("host.cgroup_limit_bytes"), Some(16.0 * 1073741824.0));
        let spec = "    resources:\n      requests:\n        memory: 12Gi\n";
        let f = context_facts(spec);
        assert_eq!(f.num("host.cgroup_limit_bytes"), None);
        assert_eq!(
            f.num("host.memory_request_bytes"),
            Some(12.0 * 1073741824.0)
        );
        // A `memory:` value under any other key says nothing about a limit.
        let f = context_facts("gpu:\n  memory: 24G\n");
        assert_eq!(f.num("host.cgroup_limit_bytes"), None);
        let f = context_facts("    mem_limit: 8g\n");
        assert_eq!(f.num("host.cgroup_limit_bytes"), Some(8.0 * 1073741824.0));
    }

    #[test]
    fn every_kubernetes_and_docker_format() {
        assert!(
            failure(r#"  "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}"#)
                .is_some()
        );
        let f = failure("llama-cpp-0   0/1     OOMKilled   3 (20s ago)   5m").unwrap();
        assert_eq!(
            f.get("host.restart_count").and_then(Value::as_f64),
            Some(3.0)
        );
        let f = failure("  Warning  Evicted  2m  kubelet  The node was low on resource: memory. Threshold quantity: 100Mi, available: 51200Ki. Container trainer was using 30Gi, request is 16Gi, has larger consumption of memory.").unwrap();
        assert_eq!(
            f.get("host.killer").and_then(Value::as_str),
            Some("eviction")
        );
        assert_eq!(
            f.get("host.cgroup_usage_bytes").and_then(Value::as_f64),
            Some(30.0 * 1073741824.0)
        );
        assert_eq!(
            f.get("host.memory_request_bytes").and_then(Value::as_f64),
            Some(16.0 * 1073741824.0)
        );
        let f = failure("Message: The node was low on resource: memory. Container ollama was using 12Gi, which exceeds its request of 8Gi.").unwrap();
        assert_eq!(
            f.get("host.memory_request_bytes").and_then(Value::as_f64),
            Some(8.0 * 1073741824.0)
        );
        let f = failure("  Warning  SystemOOM  7m  kubelet  System OOM encountered, victim process: python3, pid: 40123").unwrap();
        assert_eq!(f.engine, id::PYTORCH);
        assert!(failure(r#"            "OOMKilled": true,"#).is_some());
        assert!(failure("      reason: OOMKilled").is_some());
        assert!(failure("2025-01-10T09:12:44.000000000Z container oom 7f3a9c2e1b5d4e0f8a6b (image=vllm/vllm-openai:latest, name=vllm)").is_some());
        assert!(
            failure(r#"time="2025-01-01T00:00:00Z" level=info msg="TaskOOM event &TaskOOM{ContainerID:abc,}""#)
                .unwrap()
                .wrapper
        );
        // Not failures.
        for t in [
            "      Reason:       Completed",
            "      Reason:       Error",
            "  Warning  BackOff  1m  kubelet  Back-off restarting failed container",
        ] {
            assert!(failure(t).is_none(), "{t}");
        }
    }
}
