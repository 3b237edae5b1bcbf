"""Shared helpers for the real-incident scenarios (run on a machine with a CUDA GPU)."""
import os
import sys

import torch

GIB = 1 << 30


def gpu_total():
    free, total = torch.cuda.mem_get_info()
    return free, total


def snapshot_on_oom(path, max_entries=20000):
    """Record allocator history from now on; the caller dumps it in its OOM handler."""
    torch.cuda.memory._record_memory_history(max_entries=max_entries, stacks="python")
    return path


def dump(path):
    torch.cuda.memory._dump_snapshot(path)
    torch.cuda.memory._record_memory_history(enabled=None)
    print(f"memory snapshot written to {path}", file=sys.stderr)


def out(name):
    return os.path.join(os.environ.get("INCIDENT_OUT", "."), name)
