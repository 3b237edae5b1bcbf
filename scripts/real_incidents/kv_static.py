"""Generation with a static KV cache sized for a long max_new_tokens: the 7B model fits with
room to spare, the cache for 32 sequences x 65,664 positions does not (kv-cache-overflow)."""
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from common import GIB, gpu_total

free, total = gpu_total()
print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {free / GIB:.1f} GiB free")
cfg = LlamaConfig(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=32, vocab_size=32000,
                  max_position_embeddings=131072)
torch.set_default_dtype(torch.bfloat16)
with torch.device("cuda"):
    model = LlamaForCausalLM(cfg).eval()
print(f"model loaded: {sum(p.numel() for p in model.parameters()) / 1e9:.2f}B params, "
      f"{torch.cuda.memory_allocated() / GIB:.1f} GiB allocated")
batch, prompt_len, max_new = 32, 128, 65536
print(f"generate: batch_size={batch} prompt_len={prompt_len} max_new_tokens={max_new} "
      f"cache_implementation=static")
ids = torch.randint(0, cfg.vocab_size, (batch, prompt_len), device="cuda")
with torch.no_grad():
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new,
                         do_sample=False, pad_token_id=0, cache_implementation="static")
print(out.shape)
