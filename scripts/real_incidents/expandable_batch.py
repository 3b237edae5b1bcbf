"""batch_too_big.py's failure with expandable segments already on: nothing is stranded, and
the fix must not be to turn them on."""
import os
import runpy
import sys

print("PYTORCH_CUDA_ALLOC_CONF=" + os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""))
sys.argv = ["batch_too_big.py", "--batch_size", "384", "--seq_len", "4096"]
runpy.run_path("batch_too_big.py", run_name="__main__")
