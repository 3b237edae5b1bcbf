"""host-oom in a DataLoader worker: each sample is decoded into a 2.5 GiB array inside a
cgroup that allows 5 GiB; the OOM killer takes a worker and the loop in the main process
fails with the DataLoader's own error."""
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class DecodedVolumes(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        volume = np.ones((640, 1024, 1024), dtype=np.float32)  # 2.5 GiB, touched
        return torch.from_numpy(volume[:1, :64, :64].copy())


model = nn.Conv2d(1, 8, 3).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(DecodedVolumes(), batch_size=1, num_workers=2)
for epoch in range(2):
    for step, x in enumerate(loader):
        loss = model(x.cuda()).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"epoch {epoch} step {step} loss {loss.item():.4f}")
