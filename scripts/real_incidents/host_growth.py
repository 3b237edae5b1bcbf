"""Host memory that grows with no failure yet: a data loader that caches every decoded shard
in a dict and never evicts it (2 GiB a second for 30 s), with `free -m` printed every few
seconds beside it, as someone watching the machine would paste it."""
import subprocess
import time

cache = {}
t0 = time.time()
for shard in range(30):
    cache[shard] = bytearray(2 * 1024 ** 3)  # zero-filled: the pages are touched
    print(f"decoded shard {shard:05d}.tar -> cache ({len(cache) * 2} GiB held)", flush=True)
    if shard % 3 == 0:
        print(subprocess.run(["free", "-m"], capture_output=True, text=True).stdout, flush=True)
    time.sleep(max(0.0, (shard + 1) - (time.time() - t0)))
print("stopped by hand")
