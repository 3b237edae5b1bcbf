"""Not a memory OOM: a Triton kernel whose tiles need more shared memory than a
multiprocessor has (Triton's OutOfResources, fixed by smaller blocks, not by memory)."""
import torch
import triton
import triton.language as tl


@triton.jit
def square_tile(X, Y, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(X + offs[:, None] * BLOCK + offs[None, :])
    y = tl.dot(x, x)
    tl.store(Y + offs[:, None] * BLOCK + offs[None, :], y.to(tl.float16))


print("triton", triton.__version__)
x = torch.randn(512 * 512, device="cuda", dtype=torch.float16)
y = torch.empty_like(x)
square_tile[(1,)](x, y, BLOCK=512)
torch.cuda.synchronize()
print(y.sum())
