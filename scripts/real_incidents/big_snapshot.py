"""No OOM: a long recording (300,000 entries, Python stacks) of a small transformer's
training loop, to measure the snapshot reader on a real file of some size."""
import time

import torch
import torch.nn as nn

from common import dump, out, snapshot_on_oom

path = snapshot_on_oom(out("big_snapshot.pickle"), max_entries=300000)
layer = nn.TransformerEncoderLayer(768, 12, 3072, batch_first=True)
model = nn.TransformerEncoder(layer, 12).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
t0 = time.time()
step = 0
while time.time() - t0 < 25:
    x = torch.randn(8, 512, 768, device="cuda")
    model(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    step += 1
torch.cuda.synchronize()
print("steps", step)
dump(path)
