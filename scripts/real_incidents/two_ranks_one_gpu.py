"""torchrun with two ranks that both pick cuda:0 (a LOCAL_RANK slip): each rank builds a
model that fits the card alone, the two together do not (memory-contention)."""
import time
import torch
import torch.distributed as dist
import torch.nn as nn

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.cuda.set_device(0)  # should be int(os.environ["LOCAL_RANK"])
free, total = torch.cuda.mem_get_info()
print(f"rank {rank}: world {dist.get_world_size()}, device cuda:0, {free / (1 << 30):.1f} GiB free")
n_layers = int(0.6 * total / (8192 * 8192 * 2))
if rank == 1:
    time.sleep(5)
with torch.device("cuda:0"):
    model = nn.Sequential(*[nn.Linear(8192, 8192, bias=False, dtype=torch.bfloat16)
                            for _ in range(n_layers)])
print(f"rank {rank}: model on cuda:0 ({n_layers} layers)")
time.sleep(20)
dist.destroy_process_group()
