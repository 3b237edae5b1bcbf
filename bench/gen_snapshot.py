#!/usr/bin/env python3
"""Write a large pickle shaped like torch.cuda.memory._snapshot() output, for benchmarks.

Adapted from crates.md Appendix A (the generator behind its serde-pickle numbers):

    python3 bench/gen_snapshot.py OUT.pickle PROTOCOL N_TRACE_ENTRIES [shared|unshared] [N_SEGMENTS]

Frame dicts {name, filename, line} are shared Python objects reused by every traceback that
contains them (as PyTorch's py_symbolize does), so pickle memoises them and later
occurrences become (LONG_)BINGET back-references. "unshared" deep-copies each frame dict
(strings stay shared). Changes from the appendix: the random actions no longer include
`oom` and `snapshot`; instead exactly one `oom` entry (rounded size, `device_free`, no
`addr`, as PyTorch writes it) sits at 90% of the trace, so the analysis replays the last
10% backwards; and a `time_us` is present on every entry (2.2+). Like the appendix, the
trace is random (frees of never-allocated addresses and so on), which also exercises the
replay's tolerance of inconsistent traces. 1M shared entries write a ~170 MB file in ~10 s.
"""
import pickle
import random
import sys

out, proto, n_trace = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
shared = (sys.argv[4] if len(sys.argv) > 4 else "shared") == "shared"
n_seg = int(sys.argv[5]) if len(sys.argv) > 5 else max(1, n_trace // 500)
rng = random.Random(42)
filenames = [f"/opt/conda/lib/python3.11/site-packages/torch/nn/modules/mod_{i:03d}.py" for i in range(200)] + \
            [f"/workspace/train/model/layer_{i:03d}.py" for i in range(100)]
names = [f"forward_{i}" for i in range(1000)] + [f"_call_impl_{i}" for i in range(500)] + ["<module>", "backward", "step"]
frame_pool = [{"name": rng.choice(names), "filename": rng.choice(filenames), "line": rng.randint(1, 3000)}
              for _ in range(6000)]
stacks = [[rng.choice(frame_pool) for _ in range(30)] for _ in range(400)]


def frames():
    fr = rng.choice(stacks)[: rng.randint(10, 30)]
    return list(fr) if shared else [dict(f) for f in fr]


ACTIONS = ["alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap"]
base, segments = 0x7F3A00000000, []
for s in range(n_seg):
    addr, blocks, off = base + s * (1 << 26), [], 0
    for _ in range(rng.randint(5, 100)):
        size = rng.choice([512, 1024, 2 << 20, 4 << 20, 20 << 20])
        state = rng.choice(["active_allocated", "active_pending_free", "inactive"])
        blocks.append({"address": addr + off, "size": size, "requested_size": size - rng.randint(0, 511),
                       "state": state, "frames": frames() if state != "inactive" else []})
        off += size
    alloc = sum(b["size"] for b in blocks if b["state"] != "inactive")
    segments.append({"device": 0, "address": addr, "total_size": off, "allocated_size": alloc,
                     "active_size": alloc, "requested_size": alloc, "stream": 0,
                     "segment_type": rng.choice(["large", "small"]), "segment_pool_id": (0, 0),
                     "is_expandable": False, "frames": frames(), "blocks": blocks})
t, trace = 1_715_000_000_000_000, []
oom_at = n_trace * 9 // 10
for i in range(n_trace):
    t += rng.randint(1, 200)
    if i == oom_at:
        trace.append({"action": "oom", "size": 2 << 30, "stream": 0, "time_us": t, "device_free": 300 << 20,
                      "frames": frames()})
        continue
    trace.append({"action": rng.choice(ACTIONS), "addr": base + rng.randrange(0, 1 << 36, 512),
                  "size": rng.choice([512, 4096, 1 << 20, 2 << 20, 1 << 30]), "stream": 0,
                  "time_us": t, "frames": frames()})
snap = {"segments": segments, "device_traces": [trace],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False",
                               "max_split_size": -1, "expandable_segments": False}}
with open(out, "wb") as f:
    pickle.dump(snap, f, protocol=proto)
