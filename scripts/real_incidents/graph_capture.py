"""Captures a CUDA graph of a forward pass when the card is nearly full: the capture's
private memory pool cannot grow (an OOM during CUDA-graph capture)."""
import torch
import torch.nn as nn

from common import GIB, gpu_total, snapshot_on_oom, dump, out

free, total = gpu_total()
print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {free / GIB:.1f} GiB free")
model = nn.Sequential(*[nn.Linear(8192, 8192) for _ in range(8)]).cuda().half().eval()
static_x = torch.randn(65536, 8192, device="cuda", dtype=torch.half)  # 1 GiB input
with torch.no_grad():
    for _ in range(2):  # warm up on a side stream, as the docs do
        model(static_x)
torch.cuda.synchronize()
torch.cuda.empty_cache()
free, _ = gpu_total()
ballast = torch.empty(int(free - 0.5 * GIB), dtype=torch.uint8, device="cuda")
print(f"serving cache reserved, {torch.cuda.mem_get_info()[0] / GIB:.2f} GiB left for graphs")
snap = snapshot_on_oom(out("graph_capture_oom.pickle"), max_entries=2000)
g = torch.cuda.CUDAGraph()
print("capturing cuda graph for batch 65536")
try:
    with torch.no_grad(), torch.cuda.graph(g):
        static_y = model(static_x)
except torch.OutOfMemoryError:
    dump(snap)
    raise
