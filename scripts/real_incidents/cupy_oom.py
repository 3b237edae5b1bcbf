"""CuPy arrays past the card: 40 GiB buffers until one does not fit (CuPy's own
OutOfMemoryError, with what its memory pool had handed out so far)."""
import cupy as cp

print("cupy", cp.__version__, cp.cuda.runtime.getDeviceProperties(0)["name"].decode())
buffers = []
for i in range(8):
    buffers.append(cp.ones((40 * 2 ** 30 // 4,), dtype=cp.float32))
    print(f"buffer {i}: {cp.get_default_memory_pool().used_bytes() / 2 ** 30:.1f} GiB in use")
