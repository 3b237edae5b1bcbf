#!/usr/bin/env python3
"""Reads standard input to the end and does nothing with it, through a pipe widened to 1 MiB
as oomdoctor widens its own: what a pipe alone costs (the floor under any reader of a piped
log). bench/scan_bench.sh's "pipe alone" row: `cat LOG | python3 bench/pipe_drain.py`."""
import fcntl
import os
import sys

F_SETPIPE_SZ = 1031  # Linux; not in Python's fcntl module before 3.10
try:
    fcntl.fcntl(0, F_SETPIPE_SZ, 1 << 20)
except OSError as e:
    print(f"pipe_drain: the pipe keeps its size ({e})", file=sys.stderr)
n = 0
while True:
    block = os.read(0, 1 << 20)
    if not block:
        break
    n += len(block)
print(n)
