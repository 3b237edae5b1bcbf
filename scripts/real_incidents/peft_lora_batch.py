"""LoRA fine-tuning (PEFT) of a 1.1B Llama in the Trainer at batch 32 x 4096 tokens: the
adapters make the optimizer small, the activations of the first step still do not fit
(batch-misconfiguration; LoRA is already on, so it is no fix to offer)."""
import torch
from peft import LoraConfig, get_peft_model
from torch.utils.data import Dataset
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments


class Tokens(Dataset):
    def __len__(self):
        return 10_000

    def __getitem__(self, i):
        ids = torch.randint(0, 32000, (4096,))
        return {"input_ids": ids, "labels": ids}


cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                  num_attention_heads=32, num_key_value_heads=4, vocab_size=32000)
model = LlamaForCausalLM(cfg).to(torch.bfloat16)
model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "v_proj"],
                                         task_type="CAUSAL_LM"))
model.print_trainable_parameters()
args = TrainingArguments(output_dir="/tmp/lora-out", per_device_train_batch_size=32,
                         max_steps=10, logging_steps=1, report_to="none", save_strategy="no",
                         bf16=True, dataloader_num_workers=0)
Trainer(model=model, args=args, train_dataset=Tokens()).train()
