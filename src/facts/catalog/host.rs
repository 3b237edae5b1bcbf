//! Facts the `ingest::log::engines::host` stage may set.

use super::{FactDef, fact};
use crate::facts::evidence::Unit;

/// Host-memory facts, shared by every host-side recogniser.
pub const FACTS: &[FactDef] = &[
    fact(
        "host.killer",
        Unit::Text,
        "What killed the process or refused memory: kernel (global OOM killer), memcg (a cgroup / container limit), systemd (a unit's OOM kill), systemd-oomd, kubernetes (OOMKilled), eviction (kubelet node-pressure eviction), docker, containerd, ray (memory monitor), slurm, ollama (refused to load), allocator (a host allocation failed), signal (an engine saw its child die of SIGKILL), dataloader, shell, unknown.",
    ),
    fact(
        "host.constraint",
        Unit::Text,
        "Kernel OOM constraint: global (the whole machine) or memcg (a cgroup / container limit), cpuset, mempolicy.",
    ),
    fact(
        "host.victim_pid",
        Unit::Count,
        "PID of the process that was killed.",
    ),
    fact(
        "host.victim_name",
        Unit::Text,
        "Command name of the process that was killed.",
    ),
    fact(
        "host.victim_anon_rss_bytes",
        Unit::Bytes,
        "Anonymous resident memory of the killed process (its real usage).",
    ),
    fact(
        "host.victim_file_rss_bytes",
        Unit::Bytes,
        "File-backed resident memory of the killed process (mmap'd model files, page cache).",
    ),
    fact(
        "host.victim_shmem_rss_bytes",
        Unit::Bytes,
        "Shared-memory resident pages of the killed process.",
    ),
    fact(
        "host.victim_total_vm_bytes",
        Unit::Bytes,
        "Virtual size of the killed process (irrelevant for GPU runtimes, which map huge ranges).",
    ),
    fact(
        "host.invoker_name",
        Unit::Text,
        "The task whose allocation triggered the OOM killer (not necessarily the victim).",
    ),
    fact(
        "host.cgroup",
        Unit::Text,
        "The cgroup / container / pod whose limit was hit.",
    ),
    fact(
        "host.cgroup_limit_bytes",
        Unit::Bytes,
        "The memory limit of that cgroup or container.",
    ),
    fact(
        "host.cgroup_usage_bytes",
        Unit::Bytes,
        "Memory usage of that cgroup at the kill.",
    ),
    fact("host.total_ram_bytes", Unit::Bytes, "Total system RAM."),
    fact(
        "host.windows_commit_limit",
        Unit::Flag,
        "Windows refused to commit memory (error 1455, `The paging file is too small for this operation to complete`): RAM plus the paging file were spoken for.",
    ),
    fact(
        "host.commit_limit_bytes",
        Unit::Bytes,
        "Windows' commit limit, RAM plus the paging file (`systeminfo`'s `Virtual Memory: Max Size`).",
    ),
    fact(
        "host.committed_bytes",
        Unit::Bytes,
        "Memory committed on Windows when `systeminfo` ran (`Virtual Memory: In Use`).",
    ),
    fact(
        "host.memory_samples",
        Unit::Count,
        "How many readings of the machine's memory (`free`'s `Mem:` row, `top`'s summary) the log holds before the failure.",
    ),
    fact(
        "host.memory_increases",
        Unit::Count,
        "How many of those readings showed more memory in use than the one before.",
    ),
    fact(
        "host.memory_first_share",
        Unit::Ratio,
        "Memory in use at the first reading, as a share (0..1) of the machine's total.",
    ),
    fact(
        "host.memory_last_share",
        Unit::Ratio,
        "Memory in use at the last reading before the failure, as a share (0..1) of the total.",
    ),
    fact(
        "host.memory_max_share",
        Unit::Ratio,
        "The highest reading's share (0..1) of the machine's memory in use.",
    ),
    fact(
        "host.memory_growth_share",
        Unit::Ratio,
        "Last minus first reading's share of the machine's memory in use.",
    ),
    fact(
        "host.rss_samples",
        Unit::Count,
        "How many readings of its own resident memory (`rss=2655MB`, `RSS: 12.3 GB`) the program logged before the failure.",
    ),
    fact(
        "host.rss_increases",
        Unit::Count,
        "How many of those readings were higher than the one before.",
    ),
    fact(
        "host.rss_first_bytes",
        Unit::Bytes,
        "The process's resident memory at its first logged reading.",
    ),
    fact(
        "host.rss_last_bytes",
        Unit::Bytes,
        "The process's resident memory at its last logged reading before the failure.",
    ),
    fact(
        "host.rss_max_bytes",
        Unit::Bytes,
        "The largest of the process's logged resident memory readings.",
    ),
    fact(
        "host.rss_growth_bytes",
        Unit::Bytes,
        "Last minus first logged reading of the process's resident memory.",
    ),
    fact(
        "host.free_ram_bytes",
        Unit::Bytes,
        "Free system RAM at the failure.",
    ),
    fact(
        "host.swap_free_bytes",
        Unit::Bytes,
        "Free swap at the failure.",
    ),
    fact(
        "host.exit_code",
        Unit::Count,
        "Exit code of the killed process or container (137 = SIGKILL).",
    ),
    fact(
        "host.signal",
        Unit::Text,
        "The signal that ended the process (KILL, TERM, BUS, SEGV).",
    ),
    fact(
        "host.shm_exhausted",
        Unit::Flag,
        "Shared memory (/dev/shm) ran out: a bus error in a DataLoader worker.",
    ),
    fact(
        "host.dataloader_workers",
        Unit::Count,
        "num_workers of the DataLoader, when the log shows it.",
    ),
    // Filled by the kernel, systemd, Kubernetes, Ray and Slurm recognisers.
    fact(
        "host.oom_reason",
        Unit::Text,
        "The killer's reason as printed: `Out of memory`, `Memory cgroup out of memory`, `oom_kill_allocating_task`, swap, pressure, OOMKilled, Evicted.",
    ),
    fact(
        "host.used_ram_bytes",
        Unit::Bytes,
        "Memory in use on the host or node at the kill (Ray's memory monitor, systemd-oomd).",
    ),
    fact("host.swap_total_bytes", Unit::Bytes, "Total swap."),
    fact(
        "host.swap_used_bytes",
        Unit::Bytes,
        "Swap in use at the kill (systemd-oomd).",
    ),
    fact(
        "host.memory_pressure",
        Unit::Ratio,
        "Memory pressure (PSI, 0..1) that made systemd-oomd act.",
    ),
    fact(
        "host.pressure_limit",
        Unit::Ratio,
        "The limit systemd-oomd compared against (memory pressure or swap used, 0..1).",
    ),
    fact(
        "host.container",
        Unit::Text,
        "Where the process ran, from its cgroup or the log: docker, kubernetes, slurm, systemd, ray.",
    ),
    fact(
        "host.memory_request_bytes",
        Unit::Bytes,
        "The memory the scheduler reserved for the job (Kubernetes requests.memory, Ray's memory= resource).",
    ),
    fact(
        "host.node_available_bytes",
        Unit::Bytes,
        "Memory available on the node when the kubelet evicted the pod.",
    ),
    fact(
        "host.eviction_threshold_bytes",
        Unit::Bytes,
        "The kubelet's memory.available eviction threshold.",
    ),
    fact(
        "host.restart_count",
        Unit::Count,
        "How many times the container was restarted (kubectl describe pod).",
    ),
    fact(
        "host.oom_events",
        Unit::Count,
        "OOM-kill events the job's cgroup recorded (Slurm: `Detected N oom_kill events`).",
    ),
    fact(
        "host.shm_size_bytes",
        Unit::Bytes,
        "Size of /dev/shm (docker --shm-size, Ray's object-store warning).",
    ),
    fact(
        "host.required_bytes",
        Unit::Bytes,
        "Derived: the memory the killed workload needed at least (its usage, anon-rss, or the limit it exceeded).",
    ),
    fact(
        "host.limit_fit_bytes",
        Unit::Bytes,
        "Derived: a memory limit that holds the usage the log shows with 25% headroom, rounded up to a GiB.",
    ),
];
