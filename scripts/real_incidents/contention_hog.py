"""Holds most of the GPU from a second process until killed."""
import sys, time
import torch
free, total = torch.cuda.mem_get_info()
frac = float(sys.argv[1])
hold = torch.empty(int(free * frac), dtype=torch.uint8, device="cuda")
print(f"hog pid holds {hold.numel() / (1 << 30):.1f} GiB", flush=True)
open(sys.argv[2], "w").write("ready")
time.sleep(600)
