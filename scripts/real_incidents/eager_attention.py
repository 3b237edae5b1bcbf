"""Eager attention at 32,768 tokens: the attention weights (batch x heads x seq x seq) of
one layer are larger than the card, on a model that is small (batch-misconfiguration by
sequence length; SDPA / FlashAttention never build that matrix)."""
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from common import GIB, gpu_total

free, total = gpu_total()
print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {free / GIB:.1f} GiB free")
cfg = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                  num_attention_heads=16, num_key_value_heads=16, vocab_size=32000,
                  max_position_embeddings=65536, attn_implementation="eager")
torch.set_default_dtype(torch.bfloat16)
with torch.device("cuda"):
    model = LlamaForCausalLM(cfg)
print(f"attn_implementation={model.config._attn_implementation} "
      f"params={sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
batch, seq = 2, 32768
print(f"batch_size={batch} seq_len={seq}")
ids = torch.randint(0, cfg.vocab_size, (batch, seq), device="cuda")
for step in range(3):
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    print(f"step {step} loss {loss.item():.3f}")
