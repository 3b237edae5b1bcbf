"""Trains a small transformer with a batch whose attention activations cannot fit
(batch-misconfiguration): weights are a few hundred MiB, the step needs far more."""
import argparse
import torch
import torch.nn as nn

from common import gpu_total, GIB

p = argparse.ArgumentParser()
p.add_argument("--batch_size", type=int, default=512)
p.add_argument("--seq_len", type=int, default=4096)
p.add_argument("--d_model", type=int, default=1024)
p.add_argument("--layers", type=int, default=8)
args = p.parse_args()
print(args)
free, total = gpu_total()
print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {free / GIB:.1f} GiB free")

layer = nn.TransformerEncoderLayer(args.d_model, 16, 4 * args.d_model, batch_first=True)
model = nn.TransformerEncoder(layer, args.layers).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
n = sum(p.numel() for p in model.parameters())
print(f"model parameters: {n / 1e6:.1f}M")
for step in range(3):
    x = torch.randn(args.batch_size, args.seq_len, args.d_model, device="cuda")
    loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"step {step} loss {loss.item():.4f}")
