"""Another process holds 85% of the card; this one then fine-tunes a mid-sized model that
would fit an empty card with room to spare (memory-contention)."""
import torch
import torch.nn as nn

from common import GIB, gpu_total

free, total = gpu_total()
print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, "
      f"{free / GIB:.1f} of {total / GIB:.1f} GiB free at start")
model = nn.Sequential(*[nn.Linear(8192, 8192) for _ in range(48)]).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
print(f"model parameters: {sum(p.numel() for p in model.parameters()) / 1e9:.2f}B")
for step in range(5):
    x = torch.randn(64, 8192, device="cuda")
    model(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
    print(f"step {step}")
