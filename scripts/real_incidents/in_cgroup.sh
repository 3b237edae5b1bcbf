#!/usr/bin/env bash
# in_cgroup.sh LIMIT CMD...: runs CMD inside a fresh cgroup v2 whose memory.max is LIMIT (a
# container's memory limit), through a non-interactive bash, so that a SIGKILL from the OOM
# killer is reported the way a shell reports it ("... Killed ...").
limit=$1; shift
cg=/sys/fs/cgroup/oomdoctor_$$
echo +memory >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
mkdir -p "$cg" && echo "$limit" >"$cg/memory.max" || echo "in_cgroup: no cgroup v2 memory controller" >&2
echo 0 >"$cg/memory.swap.max" 2>/dev/null
echo $$ >"$cg/cgroup.procs" 2>/dev/null
bash -c "$*; echo \"exit status \$?\""
