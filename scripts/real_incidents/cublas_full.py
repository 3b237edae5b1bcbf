"""Tensors fill the card to the last segment before the first matrix product: cuBLAS cannot
create its handle (memory outside PyTorch's allocator ran out)."""
import torch

from common import GIB, gpu_total

free, total = gpu_total()
print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {free / GIB:.1f} GiB free")
a = torch.randn(64, 64, device="cuda")  # before the fill: its 2 MiB segment has room for the product
keep = []
try:
    while True:
        keep.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))
except torch.OutOfMemoryError:
    pass
try:
    while True:
        keep.append(torch.empty(2 << 20, dtype=torch.uint8, device="cuda"))
except torch.OutOfMemoryError:
    pass
print(f"cache filled: {torch.cuda.memory_allocated() / GIB:.2f} GiB allocated, "
      f"{torch.cuda.mem_get_info()[0] / (1 << 20):.0f} MiB left on the device")
print(a @ a)
