"""Numba CUDA device arrays past the card: cuMemAlloc's CUDA_ERROR_OUT_OF_MEMORY as Numba
reports it."""
import numpy as np
from numba import cuda

print("numba", cuda.gpus)
arrays = []
for i in range(8):
    arrays.append(cuda.device_array(20 * 2 ** 30 // 8 * 2, dtype=np.float64))
    print(f"array {i}: {(i + 1) * 40} GiB")
