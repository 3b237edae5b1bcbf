"""Not a memory OOM: an index past a tensor's end on the GPU (a device-side assert, which
CUDA reports as an error on a later call; often mistaken for memory trouble)."""
import torch

emb = torch.nn.Embedding(32000, 1024).cuda()
ids = torch.randint(0, 32000, (8, 512), device="cuda")
ids[0, 0] = 32005  # a token id past the vocabulary
print("forward")
out = emb(ids)
print(out.sum().item())
