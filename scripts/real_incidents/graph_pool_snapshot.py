"""No OOM: a snapshot of a run that captured a CUDA graph, so the snapshot holds a private
memory pool (segment_pool_id other than (0, 0)) next to the default one."""
import torch
import torch.nn as nn

from common import dump, out, snapshot_on_oom

path = snapshot_on_oom(out("graph_pool.pickle"), max_entries=100000)
model = nn.Sequential(nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 4096)).cuda()
x = torch.randn(256, 4096, device="cuda")
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3):
        model(x)
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    y = model(x)
for _ in range(3):
    g.replay()
torch.cuda.synchronize()
print("graph replayed; output", tuple(y.shape))
dump(path)
