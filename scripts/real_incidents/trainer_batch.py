"""Hugging Face Trainer on a small GPT-2 with per_device_train_batch_size far too large:
the first training step runs out (batch-misconfiguration), in the Trainer's own log shape."""
import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class Tokens(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        ids = torch.randint(0, 50257, (1024,))
        return {"input_ids": ids, "labels": ids}


model = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12))
args = TrainingArguments(output_dir="/tmp/gpt2-out", per_device_train_batch_size=1024,
                         max_steps=20, logging_steps=1, report_to="none", save_strategy="no",
                         bf16=True, dataloader_num_workers=0)
Trainer(model=model, args=args, train_dataset=Tokens()).train()
