"""A process limited to a quarter of the card (set_per_process_memory_fraction) loads a model
that needs a third of it: the cap, not the device, runs out."""
import torch
import torch.nn as nn

from common import GIB, gpu_total

free, total = gpu_total()
torch.cuda.set_per_process_memory_fraction(0.25)
print(f"torch {torch.__version__}: memory fraction 0.25 of {total / GIB:.1f} GiB")
n = int(total / 3 / (8192 * 8192 * 4))
with torch.device("cuda"):
    model = nn.Sequential(*[nn.Linear(8192, 8192, bias=False) for _ in range(n)])
