"""host-oom: checkpoint shards materialised in RAM by a process whose cgroup allows 3 GiB
(a container's memory limit); the kernel's OOM killer ends it with SIGKILL."""
import torch
from tqdm import tqdm

print(f"torch {torch.__version__}; loading a 16-shard checkpoint into CPU memory")
state = {}
for i in tqdm(range(16), desc="Loading checkpoint shards"):
    # 512 MiB per shard, written so that the pages are really touched.
    state[f"model.layers.{i}.weight"] = torch.ones(128 * 1024 * 1024, dtype=torch.float32)
print("loaded", len(state), "shards")
