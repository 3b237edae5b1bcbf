"""batch-misconfiguration under torch.compile: the compiled model's first call at a batch
that does not fit, so the traceback runs through Dynamo and Inductor's generated code."""
import torch
import torch.nn as nn

from common import GIB, gpu_total

free, total = gpu_total()
print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {free / GIB:.1f} GiB free")
model = nn.Sequential(nn.Linear(4096, 16384), nn.GELU(), nn.Linear(16384, 4096)).cuda()
cmodel = torch.compile(model)
for batch in (1024, 4 * 1024 * 1024):
    x = torch.randn(batch, 4096, device="cuda", dtype=torch.bfloat16)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = cmodel(x).float().pow(2).mean()
    loss.backward()
    print(f"batch {batch}: loss {loss.item():.4f}")
