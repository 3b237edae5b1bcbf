"""Hugging Face Trainer evaluation with a compute_metrics and no eval_accumulation_steps:
every batch's logits (1024 x 50,257 floats a sample) stay on the GPU until the loop ends,
so memory grows batch by batch through the evaluation (its own cause: predictions kept)."""
import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class Tokens(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        ids = torch.randint(0, 50257, (1024,))
        return {"input_ids": ids, "labels": ids}


def compute_metrics(p):
    return {"n": len(p.predictions)}


model = GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=256, n_head=4))
args = TrainingArguments(output_dir="/tmp/gpt2-eval", per_device_eval_batch_size=32,
                         report_to="none", save_strategy="no", dataloader_num_workers=0)
trainer = Trainer(model=model, args=args, eval_dataset=Tokens(), compute_metrics=compute_metrics)
print(trainer.evaluate())
