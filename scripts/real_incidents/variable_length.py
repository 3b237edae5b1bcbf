"""Training on samples of varying length (no packing, no bucketing): the longest batch was
measured to fit a fresh allocator with 4% to spare, then batches of random length follow.
The cache fills with blocks sized for earlier lengths; whether the longest batch still finds
room is what this run shows (fragmentation, if the allocator's numbers say so)."""
import random
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from common import GIB, gpu_total

random.seed(0)
free, total = gpu_total()
print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {free / GIB:.1f} GiB free")
cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
                  num_attention_heads=16, num_key_value_heads=16, vocab_size=32000,
                  max_position_embeddings=65536)
with torch.device("cuda"):
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
print(f"model: {sum(p.numel() for p in model.parameters()) / 1e9:.2f}B params")


def step(batch, length):
    ids = torch.randint(0, cfg.vocab_size, (batch, length), device="cuda")
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


batch = 8
step(batch, 512)  # optimizer states exist from here on
base = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
step(batch, 2048)
per_token = (torch.cuda.max_memory_allocated() - base) / (batch * 2048)
longest = int((0.96 * total - base) / (per_token * batch)) // 64 * 64
torch.cuda.empty_cache()
print(f"resident {base / GIB:.2f} GiB, {per_token / 2 ** 20:.2f} MiB per token; "
      f"longest batch {batch} x {longest} tokens")
t0 = time.time()
n = 0
while time.time() - t0 < 45:
    length = random.randint(longest // 8, longest) // 64 * 64
    loss = step(batch, length)
    n += 1
    print(f"step {n} seq_len={length} loss={loss:.3f} "
          f"allocated={torch.cuda.memory_allocated() / GIB:.2f}GiB "
          f"reserved={torch.cuda.memory_reserved() / GIB:.2f}GiB")
print("no OOM in", n, "steps")
