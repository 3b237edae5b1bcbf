"""The leak of leak.py stopped early, as someone would stop a run whose memory they watch
climb: forty steps, no OOM yet. The log and a snapshot dumped at the stop are what they
would have (memory-leak, before the failure)."""
import torch
import torch.nn as nn

from common import GIB, dump, out, snapshot_on_oom

snap = snapshot_on_oom(out("leak_no_oom.pickle"), max_entries=4000)
model = nn.Sequential(nn.Linear(4096, 16384), nn.GELU(), nn.Linear(16384, 4096)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
history = []
for step in range(40):
    x = torch.randn(8192, 4096, device="cuda")
    loss = model(x).pow(2).mean()
    loss.backward(retain_graph=True)
    opt.step()
    opt.zero_grad()
    history.append(loss)  # keeps the graph, and its activations, alive
    if step % 5 == 0:
        print(f"step {step} loss {loss.item():.5f} "
              f"mem_allocated {torch.cuda.memory_allocated() / GIB:.2f}GiB "
              f"max_reserved {torch.cuda.max_memory_reserved() / GIB:.2f}GiB")
print("stopped by hand at step 40")
dump(snap)
