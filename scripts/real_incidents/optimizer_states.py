"""Full fine-tuning in float32 of a model whose weights are 40% of the card: the weights and
gradients fit, AdamW's two states at the first optimizer step do not (model-too-large for
training this way)."""
import torch
import torch.nn as nn

from common import GIB, gpu_total

free, total = gpu_total()
print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {free / GIB:.1f} GiB free")
n = int(0.4 * total / (8192 * 8192 * 4))
with torch.device("cuda"):
    model = nn.Sequential(*[nn.Linear(8192, 8192, bias=False) for _ in range(n)])
n_params = sum(p.numel() for p in model.parameters())
print(f"number of parameters: {n_params / 1e9:.2f}B (float32)")
opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
for step in range(3):
    x = torch.randn(16, 8192, device="cuda")
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
