"""Fills the GPU with 96 MiB tensors carved out of 2 GiB cached segments, frees every other
one, then asks for 192 MiB: half the card is reserved but unallocated, in 96 MiB holes, and
no hole is big enough (fragmentation). Records the allocator history and dumps it on the OOM."""
import os
import torch

from common import GIB, gpu_total, snapshot_on_oom, dump, out

free, total = gpu_total()
print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {free / GIB:.1f} GiB free")
print("PYTORCH_CUDA_ALLOC_CONF=" + os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""))
snap = snapshot_on_oom(out("fragmentation_oom.pickle"), max_entries=8000)
MIB = 1 << 20
pieces = []
fill = []
try:
    for round_ in range(10_000):
        big = torch.empty(2 * GIB, dtype=torch.uint8, device="cuda")  # one 2 GiB segment
        del big
        pieces.extend(torch.empty(96 * MIB, dtype=torch.uint8, device="cuda") for _ in range(21))
        if round_ % 20 == 0:
            print(f"batch {round_}: allocated {torch.cuda.memory_allocated() / GIB:.2f} GiB, "
                  f"reserved {torch.cuda.memory_reserved() / GIB:.2f} GiB")
except torch.OutOfMemoryError:
    pass  # no room for another 2 GiB segment
try:
    while True:  # the rest of the card in 128 MiB tensors, kept
        fill.append(torch.empty(128 * MIB, dtype=torch.uint8, device="cuda"))
except torch.OutOfMemoryError:
    pass
del pieces[1::2]  # every other tensor back to the cache: 96 MiB holes in every segment
print(f"after freeing every other buffer: allocated {torch.cuda.memory_allocated() / GIB:.2f} GiB, "
      f"reserved {torch.cuda.memory_reserved() / GIB:.2f} GiB")
try:
    workspace = torch.empty(192 * MIB, dtype=torch.uint8, device="cuda")
except torch.OutOfMemoryError:
    dump(snap)
    raise
