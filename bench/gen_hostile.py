#!/usr/bin/env python3
"""Writes small gzip snapshots that share big structures by memo (issue 14 amplification).

    python3 bench/gen_hostile.py OUT_DIR

Each file is a valid pickle of a snapshot-shaped dict whose trace entries all refer
(by BINGET) to one large shared object: a reader that copies or walks the shared object
per entry expands a file of a few hundred KB into gigabytes of work or memory.
"""
import gzip, os, pickle, sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
N = int(os.environ.get("N", "1000000"))


def write(name, obj):
    path = os.path.join(out, name)
    with gzip.open(path, "wb", compresslevel=9) as f:
        pickle.dump(obj, f, protocol=4)
    print(f"{path}: {os.path.getsize(path)} bytes")


def snap(entries, **extra):
    d = {"segments": [], "device_traces": [entries]}
    d.update(extra)
    return d


# 1. One 1 MB string as every entry's user_metadata / compile_context.
big = "x" * (1 << 20)
e = [{"action": "alloc", "addr": i, "size": 512, "stream": 0, "frames": [],
      "user_metadata": big, "compile_context": big} for i in range(N)]
write("shared-string.pickle.gz", snap(e))
del e

# 2. One 20,000-line forward_frames list shared by every entry.
ff = [f"  File \"/x/model.py\", line {i}, in forward" for i in range(20000)]
e = [{"action": "alloc", "addr": i, "size": 512, "stream": 0, "frames": [],
      "forward_frames": ff} for i in range(N)]
write("shared-forward-frames.pickle.gz", snap(e))
del e

# 3. Distinct frames (a different line each) that share one 1 MB filename.
fname = "/" + "d" * (1 << 20) + ".py"
e = [{"action": "alloc", "addr": i, "size": 512, "stream": 0,
      "frames": [{"filename": fname, "line": i, "name": "f"}]} for i in range(N // 4)]
write("shared-filename.pickle.gz", snap(e))
del e

# 4. One 100,000-frame list shared by every entry and every block.
frames = [{"filename": "/x/a.py", "line": i, "name": "f"} for i in range(100000)]
e = [{"action": "alloc", "addr": i, "size": 512, "stream": 0, "frames": frames}
     for i in range(N)]
write("shared-frame-list.pickle.gz", snap(e))
del e

# 5. Annotations that share one 1 MB name.
ann = [{"name": big, "stage": "START", "device": 0, "time_us": i} for i in range(N)]
write("shared-annotation.pickle.gz", {"segments": [], "device_traces": [[]],
                                      "external_annotations": ann})
