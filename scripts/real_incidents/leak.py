"""A training loop that keeps every step's loss tensor (and its graph) in a list: memory
grows by the same amount each step until the card is full (memory-leak)."""
import torch
import torch.nn as nn

from common import GIB, gpu_total, snapshot_on_oom, dump, out


def leaking_loop(steps):
    """Trains `steps` steps, keeping each step's loss and so its graph and activations."""
    model = nn.Sequential(nn.Linear(4096, 16384), nn.GELU(), nn.Linear(16384, 4096)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    history = []
    for step in range(steps):
        x = torch.randn(8192, 4096, device="cuda")
        loss = model(x).pow(2).mean()
        loss.backward(retain_graph=True)
        opt.step()
        opt.zero_grad()
        history.append(loss)  # keeps the graph, and its activations, alive
        if step % 5 == 0:
            print(f"step {step} loss {loss.item():.5f} "
                  f"mem_allocated {torch.cuda.memory_allocated() / GIB:.2f}GiB "
                  f"max_reserved {torch.cuda.max_memory_reserved() / GIB:.2f}GiB")
    return history


if __name__ == "__main__":
    free, total = gpu_total()
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {free / GIB:.1f} GiB free")
    snap = snapshot_on_oom(out("leak_oom.pickle"), max_entries=6000)
    try:
        leaking_loop(100_000)
    except torch.OutOfMemoryError:
        dump(snap)
        raise
