"""PyTorch Lightning fitting a small GPT-2 with a batch far too large: Lightning's own banner,
model summary (with its `Total params` line) and progress bar around the OOM."""
import torch
import lightning as L
from torch.utils.data import DataLoader, Dataset
from transformers import GPT2Config, GPT2LMHeadModel


class Tokens(Dataset):
    def __len__(self):
        return 10_000

    def __getitem__(self, i):
        return torch.randint(0, 50257, (1024,))


class LitGPT(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12))

    def training_step(self, batch, batch_idx):
        out = self.model(input_ids=batch, labels=batch)
        self.log("loss", out.loss, prog_bar=True)
        return out.loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=3e-4)


trainer = L.Trainer(accelerator="gpu", devices=1, max_steps=10, precision="bf16-mixed",
                    logger=False, enable_checkpointing=False)
trainer.fit(LitGPT(), DataLoader(Tokens(), batch_size=768))
