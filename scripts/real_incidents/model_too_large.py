"""Loads a decoder whose bf16 weights are larger than the whole GPU (model-too-large)."""
import math
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from common import gpu_total, GIB

free, total = gpu_total()
# 8192 hidden, 28672 intermediate: about 0.81 G parameters (1.63 GB in bf16) per layer.
per_layer = (2 * 8192 * 8192 + 2 * 8192 * 1024) + 3 * 8192 * 28672
layers = math.ceil(1.25 * total / (2 * per_layer))
print(f"torch {torch.__version__}, {torch.cuda.get_device_name()} with {total / GIB:.1f} GiB")
cfg = LlamaConfig(hidden_size=8192, intermediate_size=28672, num_hidden_layers=layers,
                  num_attention_heads=64, num_key_value_heads=8, vocab_size=128256)
print(f"building LlamaForCausalLM with {layers} layers in bfloat16 on cuda")
torch.set_default_dtype(torch.bfloat16)
with torch.device("cuda"):
    model = LlamaForCausalLM(cfg)
print("loaded")
