//! Slurm: job steps killed by their cgroup memory limit.
//!
//! Shapes: `slurmstepd: error: Detected 1 oom_kill event in StepId=4242.0. Some of the step
//! tasks have been OOM Killed.` (older: `Detected 2 oom-kill event(s) in step 4242.batch
//! cgroup. Some of your processes may have been killed by the cgroup out-of-memory
//! handler.`), `srun: error: node17: task 0: Out Of Memory`, the older `Job 4242 exceeded
//! memory limit (34000000 > 33554432), being killed` (kB), `sacct` states `OUT_OF_MEMORY`, and
//! `seff`'s `Memory Utilized` / `Memory Efficiency: 99.8% of 64.00 GB`. The job's request
//! comes from `#SBATCH --mem=64G` / `--mem-per-gpu` / `--mem-per-cpu` lines or a command line.

use std::sync::LazyLock;

use regex::Regex;

use super::local::{size_bin, slurm_size, span, victim_engine_nearby};
use super::{Domain, Emit, Failure, Line, Recognizer, id};
use crate::ingest::log::pattern::static_regex;

static OOM_EVENT: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"Detected (?P<n>\d+) oom[-_]kill events? ?(?:\(s\))? in (?:StepId=|step )(?P<step>\w+(?:\.\w+)?)",
    )
});
static SRUN_OOM: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"srun: error: (?P<node>[\w.-]+): tasks? (?P<tasks>[\d,-]+): Out Of Memory")
});
static EXCEEDED: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?:Job|Step) (?P<id>[\w.]+) exceeded (?:job )?memory limit \((?P<u>\d+) > (?P<l>\d+)\)",
    )
});
static EXCEEDED_BARE: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"Exceeded (?:job|step) memory limit"));
static STATE_OOM: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"\bOUT_OF_MEMORY\b|State: OUT_OF_MEMORY"));
static SEFF_USED: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"Memory Utilized: (?P<n>\d+(?:\.\d+)?) (?P<u>[KMGT]B)"));
static SEFF_EFF: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"Memory Efficiency: [\d.]+% of (?P<n>\d+(?:\.\d+)?) (?P<u>[KMGT]B)")
});
static MEM_FLAG: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"--(?P<k>mem|mem-per-gpu|mem-per-cpu)[= ](?P<v>\d+(?:\.\d+)?[KMGTkmgt]?[Bb]?)\b")
});
static GPUS_FLAG: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"--(?:gres[= ]gpu(?::[\w-]+)?:|gpus-per-node[= ]|gpus[= ])(?P<n>\d+)")
});
static CPUS_FLAG: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"--cpus-per-task[= ](?P<n>\d+)"));

/// The Slurm recogniser.
pub struct Slurm;

impl Recognizer for Slurm {
    fn engine(&self) -> &'static str {
        "slurm"
    }

    fn anchors(&self) -> &'static [&'static str] {
        &[
            "oom_kill event",
            "oom-kill event",
            "Out Of Memory",
            "exceeded memory limit",
            "exceeded job memory limit",
            "Exceeded job memory limit",
            "Exceeded step memory limit",
            "OUT_OF_MEMORY",
            "Memory Utilized",
            "Memory Efficiency",
            "--mem",
            "--gres",
            "--gpus",
            "--cpus-per-task",
        ]
    }

    fn recognize(&self, line: &Line<'_>, out: &mut Emit) {
        let text = line.text;
        if let Some(c) = OOM_EVENT.captures(text) {
            let mut f = failure(line);
            if let Some(m) = c.name("n") {
                if let Ok(n) = m.as_str().parse::<u32>() {
                    f.fact("host.oom_events", n, span(&m));
                }
            }
            if let Some(m) = c.name("step") {
                f.fact("slurm.step", m.as_str().to_string(), span(&m));
                f.fact("host.cgroup", format!("slurm step {}", m.as_str()), None);
            }
            out.failure(f);
            return;
        }
        if let Some(c) = EXCEEDED.captures(text) {
            let mut f = failure(line);
            for (g, name) in [
                ("u", "host.cgroup_usage_bytes"),
                ("l", "host.cgroup_limit_bytes"),
            ] {
                if let Some(m) = c.name(g) {
                    if let Some(b) = size_bin(m.as_str(), "KiB") {
                        f.fact(name, b, span(&m));
                    }
                }
            }
            out.failure(f);
            return;
        }
        if SRUN_OOM.is_match(text) || EXCEEDED_BARE.is_match(text) || STATE_OOM.is_match(text) {
            let mut f = failure(line);
            // slurmstepd's own line says more; these restate it.
            f.wrapper = true;
            out.failure(f);
            return;
        }
        if let Some(c) = SEFF_USED.captures(text) {
            let (n, u) = (c.name("n").expect("n"), c.name("u").expect("u"));
            if let Some(b) = size_bin(n.as_str(), u.as_str()) {
                out.fact("host.cgroup_usage_bytes", b, span(&n));
            }
            return;
        }
        if let Some(c) = SEFF_EFF.captures(text) {
            let (n, u) = (c.name("n").expect("n"), c.name("u").expect("u"));
            if let Some(b) = size_bin(n.as_str(), u.as_str()) {
                out.fact("host.cgroup_limit_bytes", b, span(&n));
            }
            return;
        }
        if text.contains("SBATCH")
            || text.contains("srun")
            || text.contains("sbatch")
            || text.contains("salloc")
        {
            for c in MEM_FLAG.captures_iter(text) {
                let m = c.name("v").expect("group v");
                let Some(b) = slurm_size(m.as_str()) else {
                    continue;
                };
                let name = match &c["k"] {
                    "mem" => "slurm.mem_bytes",
                    "mem-per-gpu" => "slurm.mem_per_gpu_bytes",
                    _ => "slurm.mem_per_cpu_bytes",
                };
                out.fact(name, b, span(&m));
            }
            if let Some(c) = GPUS_FLAG.captures(text) {
                let m = c.name("n").expect("group n");
                if let Ok(n) = m.as_str().parse::<u32>() {
                    out.fact("slurm.gpus", n, span(&m));
                }
            }
            if let Some(c) = CPUS_FLAG.captures(text) {
                let m = c.name("n").expect("group n");
                if let Ok(n) = m.as_str().parse::<u32>() {
                    out.fact("slurm.cpus", n, span(&m));
                }
            }
        }
    }
}

fn failure(line: &Line<'_>) -> Failure {
    let mut f = Failure::new(
        "host-oom",
        victim_engine_nearby(line, id::LINUX),
        Domain::Host,
    );
    f.fact("host.killer", "slurm", None)
        .fact("host.constraint", "memcg", None)
        .fact("host.container", "slurm", None)
        .fact("host.signal", "KILL", None);
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::evidence::Value;
    use crate::ingest::log::engines::Observation;

    fn run(raw: &str) -> Emit {
        crate::ingest::log::engines::run_line(&Slurm, raw)
    }

    fn failure_of(raw: &str) -> Option<Failure> {
        run(raw).records.into_iter().find_map(|r| match r.obs {
            Observation::Failure(f) => Some(f),
            _ => None,
        })
    }

    fn fact(raw: &str, name: &str) -> Option<Value> {
        run(raw).records.into_iter().find_map(|r| match r.obs {
            Observation::Fact { name: n, value } if n == name => Some(value),
            _ => None,
        })
    }

    #[test]
    fn every_slurm_format() {
        let f = failure_of("slurmstepd: error: Detected 1 oom_kill event in StepId=812345.0. Some of the step tasks have been OOM Killed.").unwrap();
        assert_eq!(
            f.get("slurm.step").and_then(Value::as_str),
            Some("812345.0")
        );
        assert!(!f.wrapper);
        let f = failure_of("slurmstepd: error: Detected 2 oom-kill event(s) in step 3756240.batch cgroup. Some of your processes may have been killed by the cgroup out-of-memory handler.").unwrap();
        assert_eq!(f.get("host.oom_events").and_then(Value::as_f64), Some(2.0));
        assert_eq!(
            f.get("slurm.step").and_then(Value::as_str),
            Some("3756240.batch")
        );
        let f = failure_of(
            "slurmstepd: error: Job 4242 exceeded memory limit (34000000 > 33554432), being killed",
        )
        .unwrap();
        assert_eq!(
            f.get("host.cgroup_limit_bytes").and_then(Value::as_f64),
            Some(33554432.0 * 1024.0)
        );
        assert!(
            failure_of("srun: error: gpu-node-17: task 0: Out Of Memory")
                .unwrap()
                .wrapper
        );
        assert!(failure_of("srun: error: nid001277: tasks 1-3: Out Of Memory").is_some());
        assert!(failure_of("812345.0     python  gpu   OUT_OF_MEMORY      0:125").is_some());
        assert_eq!(
            fact(
                "Memory Efficiency: 99.81% of 64.00 GB",
                "host.cgroup_limit_bytes"
            ),
            Some(Value::Num(64.0 * 1073741824.0))
        );
        assert_eq!(
            fact("#SBATCH --mem=64G", "slurm.mem_bytes"),
            Some(Value::Num(64.0 * 1073741824.0))
        );
        assert_eq!(
            fact("#SBATCH --mem-per-gpu=80G", "slurm.mem_per_gpu_bytes"),
            Some(Value::Num(80.0 * 1073741824.0))
        );
        assert_eq!(
            fact("#SBATCH --gres=gpu:a100:4", "slurm.gpus"),
            Some(Value::Num(4.0))
        );
        assert!(failure_of("slurmstepd: error: *** JOB 812345 ON gpu-node-17 CANCELLED AT 2025-01-01T00:00:00 DUE TO TIME LIMIT ***").is_none());
    }
}
