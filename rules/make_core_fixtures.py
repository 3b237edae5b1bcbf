#!/usr/bin/env python3
"""Writes the fixtures for the core (PyTorch and host) rules.

Each rule gets a `fires-*.log` that its rule must decide and a `near-miss-*.log` that looks
similar but must be decided by another rule (or yield no incident). The logs are written in
the shapes users paste: progress bars with escape codes, torchrun rank prefixes, docker
compose prefixes, Jupyter's coloured tracebacks, messages wrapped by a terminal, journald
timestamps. Numbers are made up but consistent (a 24 GiB card has 23.64 GiB usable, etc.).

Run from the repository root:  python3 rules/make_core_fixtures.py
The outputs are committed; tests never run this script.
"""
import os
import random

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)))
rng = random.Random(20261121)


def write(rule, name, lines):
    d = os.path.join(ROOT, rule)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "w", encoding="utf-8", newline="") as f:
        f.write("\n".join(lines) + "\n")


def tb(frames, error):
    out = ["Traceback (most recent call last):"]
    for file, line, func, code in frames:
        out.append(f'  File "{file}", line {line}, in {func}')
        if code:
            out.append(f"    {code}")
    out.append(error)
    return out


def modern(req, dev, total, free, alloc, unalloc, procs=(), self_used=None, allowed=None, exc="torch.OutOfMemoryError", private=None, docs_new=False):
    s = f"{exc}: CUDA out of memory. Tried to allocate {req}. GPU {dev} has a total capacity of {total} of which {free} is free. "
    for pid, used in procs:
        s += f"Process {pid} has {used} memory in use. "
    if self_used:
        s += f"Including non-PyTorch memory, this process has {self_used} memory in use. "
    if allowed:
        s += f"{allowed} allowed; "
    s += f"Of the allocated memory {alloc} is allocated by PyTorch, "
    if private:
        s += f"with {private} allocated in private pools (e.g., CUDA Graphs), "
    s += f"and {unalloc} is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  "
    s += "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)" if docs_new else "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    return s


SITE = "/opt/conda/lib/python3.11/site-packages"
HF_TRAIN_FRAMES = [
    ("/workspace/train.py", 188, "<module>", "trainer.train()"),
    (f"{SITE}/transformers/trainer.py", 2164, "train", "return inner_training_loop("),
    (f"{SITE}/transformers/trainer.py", 2522, "_inner_training_loop", "tr_loss_step = self.training_step(model, inputs, num_items_in_batch)"),
    (f"{SITE}/transformers/trainer.py", 3688, "training_step", "self.accelerator.backward(loss, **kwargs)"),
    (f"{SITE}/accelerate/accelerator.py", 2246, "backward", "loss.backward(**kwargs)"),
    (f"{SITE}/torch/_tensor.py", 581, "backward", "torch.autograd.backward("),
    (f"{SITE}/torch/autograd/__init__.py", 347, "backward", "_engine_run_backward("),
    (f"{SITE}/torch/autograd/graph.py", 825, "_engine_run_backward", "return Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass"),
]
FORWARD_FRAMES = [
    ("train.py", 141, "<module>", "main(args)"),
    ("train.py", 97, "main", "logits = model(images)"),
    (f"{SITE}/torch/nn/modules/module.py", 1736, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)"),
    (f"{SITE}/torch/nn/modules/module.py", 1747, "_call_impl", "return forward_call(*args, **kwargs)"),
    ("/workspace/models/vit.py", 212, "forward", "x = blk(x)"),
    ("/workspace/models/vit.py", 88, "forward", "attn = (q @ k.transpose(-2, -1)) * self.scale"),
]


def tqdm(cur, total, it="2.31s/it", prefix=""):
    pct = cur * 100 // total
    bar = ("█" * (pct // 10)).ljust(10)
    return f"\x1b[A{prefix}{pct:3d}%|{bar}| {cur}/{total} [00:{cur % 60:02d}<1:10:00, {it}]"


def hf_preamble(batch, accum, model="meta-llama/Llama-3.1-8B", extra=()):
    lines = [
        f"+ accelerate launch --num_processes 2 sft.py --model_name_or_path {model} --per_device_train_batch_size {batch} --gradient_accumulation_steps {accum} --max_seq_length 4096 --bf16 --report_to none",
        *extra,
        "The following values were not passed to `accelerate launch` and had defaults used instead: `--mixed_precision` was set to a value of `'no'`",
        "Loading checkpoint shards: 100%|██████████| 4/4 [00:09<00:00,  2.31s/it]",
        "***** Running training *****",
        "  Num examples = 120,000",
        "  Num Epochs = 1",
        f"  Instantaneous batch size per device = {batch}",
        f"  Gradient Accumulation steps = {accum}",
        "  Total optimization steps = 3,750",
    ]
    return lines


# ---------------------------------------------------------------- torch-fragmentation
def fragmentation():
    L = ["+ export PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128"] + hf_preamble(8, 2, "mistralai/Mistral-7B-v0.1")
    for s in range(1, 320):
        if s % 10 == 0:
            L.append("{'loss': %.4f, 'grad_norm': %.3f, 'learning_rate': 2e-05, 'epoch': %.2f}" % (1.9 - s * 0.002 + rng.random() * 0.05, 0.8 + rng.random(), s / 3750))
        L.append(tqdm(s, 3750))
    for r in (1, 0):
        for line in tb(HF_TRAIN_FRAMES, modern("1.96 GiB", r, "79.25 GiB", "1.21 GiB", "68.90 GiB", "8.47 GiB", self_used="78.03 GiB")):
            L.append(f"[rank{r}]: {line}")
    L.append("W0302 10:27:41.003000 4402 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 4412 closing signal SIGTERM")
    write("torch-fragmentation", "fires-hf-trainer-2ranks.log", L)

    # PyTorch 1.12 era, docker compose prefix, the max_split_size_mb hint, 8-space wrapped by a terminal at 100 columns.
    msg = ("RuntimeError: CUDA out of memory. Tried to allocate 1.50 GiB (GPU 0; 23.69 GiB total capacity; 14.12 GiB already allocated; "
           "1.08 GiB free; 21.55 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb "
           "to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF")
    wrapped = [msg[i:i + 100] for i in range(0, len(msg), 100)]
    L = [
        "trainer-1  | [INFO] torch 1.12.1+cu116, 1 GPU(s): NVIDIA GeForce RTX 3090",
        "trainer-1  | PyTorch version: 1.12.1+cu116",
        "trainer-1  | Namespace(batch_size=12, epochs=40, lr=0.0003, img_size=(512, 1024), num_workers=8, amp=True)",
    ]
    for e in range(3):
        for b in range(0, 240, 40):
            L.append(f"trainer-1  | epoch {e} iter {b:4d}/240  loss {0.9 - e * 0.1 - b / 2000:.4f}  lr 3.0e-04")
    L += [f"trainer-1  | {x}" for x in tb([
        ("/app/train_seg.py", 301, "<module>", "train(cfg)"),
        ("/app/train_seg.py", 233, "train", "out = model(img)"),
        ("/usr/local/lib/python3.9/site-packages/torch/nn/modules/module.py", 1130, "_call_impl", "return forward_call(*input, **kwargs)"),
        ("/app/models/deeplab.py", 144, "forward", "x = F.interpolate(x, size=size, mode='bilinear', align_corners=False)"),
    ], wrapped[0])]
    L += [f"trainer-1  | {w}" for w in wrapped[1:]]
    L.append("trainer-1 exited with code 1")
    write("torch-fragmentation", "fires-legacy-compose-wrapped.log", L)

    # Near miss: little cached memory, the step itself is too big.
    L = hf_preamble(16, 1, "Qwen/Qwen2.5-7B")
    L += [tqdm(s, 3750) for s in range(0, 1)]
    L += tb(HF_TRAIN_FRAMES, modern("2.00 GiB", 0, "79.25 GiB", "1.02 GiB", "77.10 GiB", "312.00 MiB", self_used="78.22 GiB"))
    write("torch-fragmentation", "near-miss-little-cached.log", L)


# ---------------------------------------------------------------- torch-other-processes
def other_processes():
    red, reset, green = "\x1b[0;31m", "\x1b[0m", "\x1b[0;32m"
    L = [
        "[I 2026-02-11 09:12:44.102 ServerApp] Kernel started: 3f6d1c",
        f"{red}---------------------------------------------------------------------------{reset}",
        f"{red}OutOfMemoryError{reset}                          Traceback (most recent call last)",
        f"Cell {green}In[7], line 3{reset}",
        "      1 pipe = StableDiffusionXLPipeline.from_pretrained(model_id, torch_dtype=torch.float16)",
        "      2 pipe = pipe.to('cuda')",
        f"{green}----> 3{reset} images = pipe(prompt, num_images_per_prompt=4, height=1024, width=1024).images",
        f"{red}OutOfMemoryError{reset}: CUDA out of memory. Tried to allocate 2.50 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.19 GiB is free. Process 3312 has 40.02 GiB memory in use. Process 3377 has 21.70 GiB memory in use. Including non-PyTorch memory, this process has 16.20 GiB memory in use. Of the allocated memory 14.85 GiB is allocated by PyTorch, and 713.44 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
    ]
    write("torch-other-processes", "fires-notebook-two-neighbours.log", L)

    L = [
        "2023-01-18 14:03:10,447 - INFO - loaded config configs/yolov5l.yaml",
        "2023-01-18 14:03:12,008 - INFO - batch_size=32 imgsz=640 workers=8",
    ] + [f"2023-01-18 14:03:{20 + i:02d},000 - INFO - Epoch 0 step {i} loss 0.41{i}" for i in range(3)]
    L += tb([("train.py", 410, "train", "pred = model(imgs)"), ("models/yolo.py", 209, "forward", "return self._forward_once(x)")],
            "RuntimeError: CUDA out of memory. Tried to allocate 200.00 MiB (GPU 0; 23.65 GiB total capacity; 7.86 GiB already allocated; 20.06 MiB free; 8.02 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF")
    write("torch-other-processes", "fires-legacy-unaccounted.log", L)

    L = hf_preamble(8, 4, "google/gemma-2-9b")
    L += [tqdm(s, 3750) for s in range(1, 3)]
    L += tb(HF_TRAIN_FRAMES, modern("1.25 GiB", 0, "23.64 GiB", "602.31 MiB", "21.31 GiB", "210.55 MiB", procs=[(2231, "312.00 MiB")], self_used="22.75 GiB"))
    write("torch-other-processes", "near-miss-small-monitor-process.log", L)


# ---------------------------------------------------------------- torch-non-pytorch-memory
def non_pytorch():
    L = ["+ torchrun --nproc_per_node=8 pretrain.py --micro-batch-size 2 --global-batch-size 512 --seq-length 8192",
         "Distributed environment: MULTI_GPU  Backend: nccl", "Num processes: 8"]
    L += [f"[default{r}]:NCCL INFO Channel 00/32 : {r} {(r + 1) % 8}" for r in range(8)]
    L += [f"[default0]:iteration {i:6d}/ 100000 | consumed samples: {i * 512:10d} | lm loss: {3.1 - i / 5000:.4E} |" for i in range(10, 60, 10)]
    L += [f"[default3]:{x}" for x in tb([
        ("pretrain.py", 512, "train_step", "losses = forward_backward_func(model, data)"),
        ("megatron/core/pipeline_parallel/schedules.py", 402, "forward_backward_no_pipelining", "output_tensor = forward_step(model, data)"),
    ], modern("1.00 GiB", 3, "79.11 GiB", "845.00 MiB", "46.20 GiB", "1.75 GiB", self_used="78.25 GiB"))]
    write("torch-non-pytorch-memory", "fires-nccl-heavy-rank3.log", L)

    L = ["python finetune_lora.py --batch_size 4"] + [f"step {i} loss {1.2 - i * 0.01:.3f}" for i in range(1, 4)]
    L += tb(FORWARD_FRAMES, modern("1.10 GiB", 0, "23.64 GiB", "318.50 MiB", "20.92 GiB", "1.01 GiB", self_used="22.61 GiB"))
    write("torch-non-pytorch-memory", "near-miss-context-only.log", L)


# ---------------------------------------------------------------- torch-memory-fraction
def memory_fraction():
    L = ["INFO:__main__:capping this worker at 15% of the GPU: torch.cuda.set_per_process_memory_fraction(0.15)",
         "INFO:__main__:serving model resnet152 with batch 256"]
    L += tb([("worker.py", 77, "predict", "out = self.model(batch)")],
            modern("2.00 GiB", 0, "79.15 GiB", "60.33 GiB", "10.12 GiB", "1.56 GiB", self_used="12.60 GiB", allowed="11.87 GiB"))
    write("torch-memory-fraction", "fires-capped-worker.log", L)

    L = ["INFO:__main__:torch.cuda.set_per_process_memory_fraction(0.95)", "INFO:__main__:serving model resnet152 with batch 1024"]
    L += tb([("worker.py", 77, "predict", "out = self.model(batch)")],
            modern("3.00 GiB", 0, "79.15 GiB", "210.00 MiB", "74.02 GiB", "1.10 GiB", self_used="78.80 GiB", allowed="75.19 GiB"))
    write("torch-memory-fraction", "near-miss-cap-not-binding.log", L)


# ---------------------------------------------------------------- torch-weights-on-load
LOAD_FRAMES = [
    ("/home/ana/chat.py", 14, "<module>", "model = AutoModelForCausalLM.from_pretrained(\"meta-llama/Llama-2-13b-hf\", device_map=\"cuda\")"),
    (f"{SITE}/transformers/models/auto/auto_factory.py", 564, "from_pretrained", "return model_class.from_pretrained("),
    (f"{SITE}/transformers/modeling_utils.py", 4225, "from_pretrained", ") = cls._load_pretrained_model("),
    (f"{SITE}/transformers/modeling_utils.py", 4728, "_load_pretrained_model", "new_error_msgs, offload_index, state_dict_index = _load_state_dict_into_meta_model("),
    (f"{SITE}/transformers/modeling_utils.py", 993, "_load_state_dict_into_meta_model", "set_module_tensor_to_device(model, param_name, param_device, **set_module_kwargs)"),
    (f"{SITE}/accelerate/utils/modeling.py", 329, "set_module_tensor_to_device", "new_value = value.to(device)"),
]


def weights_on_load():
    L = ["$ python chat.py", "trainable params: 0 || all params: 13,015,864,320 || trainable%: 0.0000",
         "Loading checkpoint shards:  67%|██████▋   | 2/3 [00:41<00:20, 20.61s/it]"]
    L += tb(LOAD_FRAMES, modern("250.00 MiB", 0, "23.64 GiB", "67.31 MiB", "23.12 GiB", "1.20 MiB", self_used="23.57 GiB"))
    write("torch-weights-on-load", "fires-13b-fp32-on-24g.log", L)

    L = hf_preamble(4, 8, "meta-llama/Llama-2-13b-hf")
    L += tb([
        ("/workspace/train.py", 188, "<module>", "trainer.train()"),
        (f"{SITE}/transformers/trainer.py", 3650, "training_step", "loss = self.compute_loss(model, inputs)"),
        (f"{SITE}/torch/nn/modules/module.py", 1747, "_call_impl", "return forward_call(*args, **kwargs)"),
        (f"{SITE}/transformers/models/llama/modeling_llama.py", 1190, "forward", "logits = self.lm_head(hidden_states)"),
    ], modern("3.91 GiB", 0, "79.25 GiB", "2.86 GiB", "74.82 GiB", "1.01 GiB", self_used="76.39 GiB"))
    write("torch-weights-on-load", "near-miss-loaded-then-first-step.log", L)


# ---------------------------------------------------------------- torch-optimizer-state
def optimizer_state():
    L = hf_preamble(1, 16, "meta-llama/Llama-3.1-8B", extra=["trainable params: 8,030,261,248 || all params: 8,030,261,248 || trainable%: 100.0000"])
    L += tb(HF_TRAIN_FRAMES[:3] + [
        (f"{SITE}/transformers/trainer.py", 2575, "_inner_training_loop", "self.optimizer.step()"),
        (f"{SITE}/accelerate/optimizer.py", 171, "step", "self.optimizer.step(closure)"),
        (f"{SITE}/torch/optim/optimizer.py", 487, "wrapper", "out = func(*args, **kwargs)"),
        (f"{SITE}/torch/optim/adamw.py", 209, "step", "has_complex = self._init_group("),
        (f"{SITE}/torch/optim/adamw.py", 152, "_init_group", "state[\"exp_avg_sq\"] = torch.zeros_like("),
    ], modern("1.96 GiB", 0, "79.25 GiB", "1.45 GiB", "75.80 GiB", "1.29 GiB", self_used="77.79 GiB"))
    write("torch-optimizer-state", "fires-full-finetune-adamw.log", L)

    L = hf_preamble(1, 16, "meta-llama/Llama-3.1-8B")
    L += tb(HF_TRAIN_FRAMES, modern("1.96 GiB", 0, "79.25 GiB", "1.45 GiB", "75.80 GiB", "1.29 GiB", self_used="77.79 GiB"))
    write("torch-optimizer-state", "near-miss-backward-first-step.log", L)


# ---------------------------------------------------------------- torch-activations
def activations():
    L = ["Namespace(arch='vit_large_patch16', batch_size=64, epochs=300, img_size=384, lr=0.001, num_workers=10)",
         "Epoch 0:   0%|          | 0/5005 [00:00<?, ?it/s]"]
    L += tb(FORWARD_FRAMES, modern("1.52 GiB", 0, "23.64 GiB", "910.81 MiB", "21.93 GiB", "121.15 MiB", self_used="22.74 GiB"))
    write("torch-activations", "fires-vit-first-step.log", L)

    L = ["$ python3 train_rnn.py --bs 128", "loading vocab ... 50000 words", "Traceback (most recent call last):",
         '  File "train_rnn.py", line 66, in <module>', "    output, hidden = model(inputs, hidden)",
         "RuntimeError: CUDA out of memory."]
    write("torch-activations", "fires-bare-old-message.log", L)

    L = hf_preamble(8, 2, "mistralai/Mistral-7B-v0.1")
    L += [tqdm(s, 3750) for s in range(1, 40)]
    L += tb(HF_TRAIN_FRAMES, modern("1.96 GiB", 0, "79.25 GiB", "1.21 GiB", "68.90 GiB", "8.47 GiB", self_used="78.03 GiB"))
    write("torch-activations", "near-miss-fragmentation.log", L)


# ---------------------------------------------------------------- torch-leak-after-many-steps
def leak():
    L = ["[2026-05-02 08:00:01] config: batch_size=32 seq_len=1024 grad_ckpt=True"]
    mem = 9.8
    for s in range(100, 2500, 100):
        mem += 0.5 + rng.random() * 0.05
        L.append(f"[2026-05-02 08:{s // 100:02d}:00] step {s:5d} | loss {3.2 - s / 1500:.3f} | lr 6.0e-04 | mem {mem:.2f} GiB")
    L += tb([("train.py", 220, "<module>", "loss = train_step(batch)"), ("train.py", 141, "train_step", "logits = model(input_ids)")],
            modern("512.00 MiB", 0, "23.64 GiB", "412.06 MiB", "22.84 GiB", "121.52 MiB", self_used="23.20 GiB"))
    write("torch-leak-after-many-steps", "fires-memory-creeps-up.log", L)

    L = ["[2026-05-02 08:00:01] config: batch_size=32 seq_len=1024 grad_ckpt=True"]
    for s in range(100, 2500, 100):
        L.append(f"[2026-05-02 08:{s // 100:02d}:00] step {s:5d} | loss {3.2 - s / 1500:.3f} | lr 6.0e-04 | mem {14.1 + rng.random() * 0.3:.2f} GiB")
    L += tb([("train.py", 220, "<module>", "loss = train_step(batch)"), ("train.py", 141, "train_step", "logits = model(input_ids)")],
            modern("4.00 GiB", 0, "23.64 GiB", "3.06 GiB", "18.84 GiB", "721.52 MiB", self_used="20.20 GiB"))
    write("torch-leak-after-many-steps", "near-miss-flat-then-long-batch.log", L)


# ---------------------------------------------------------------- torch-single-request-exceeds-device
def single_request():
    L = ["INFO: sequence length 200000, heads 32", "INFO: computing dense attention"]
    L += tb([("attn_bench.py", 40, "<module>", "scores = torch.matmul(q, k.transpose(-1, -2))")],
            modern("4768.37 GiB", 0, "79.15 GiB", "77.90 GiB", "610.03 MiB", "19.97 MiB", self_used="1.21 GiB"))
    write("torch-single-request-exceeds-device", "fires-dense-attention-200k.log", L)

    L = ["INFO: sequence length 65536, heads 8", "INFO: computing dense attention"]
    L += tb([("attn_bench.py", 40, "<module>", "scores = torch.matmul(q, k.transpose(-1, -2))")],
            modern("64.00 GiB", 0, "79.15 GiB", "47.90 GiB", "30.03 GiB", "19.97 MiB", self_used="31.21 GiB"))
    write("torch-single-request-exceeds-device", "near-miss-large-but-smaller-than-device.log", L)


# ---------------------------------------------------------------- cuda-runtime-oom
def cuda_runtime():
    L = ["INFO 05-01 10:00:00 launching 4 inference workers on GPU 0"] + tb([
        ("infer.py", 33, "<module>", "y = model(x)"),
        (f"{SITE}/torch/nn/modules/linear.py", 125, "forward", "return F.linear(input, self.weight, self.bias)"),
    ], "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")
    write("cuda-runtime-oom", "fires-cublas-handle.log", L)

    L = ["INFO 05-01 10:00:00 launching worker"] + tb([("infer.py", 33, "<module>", "y = model(x)")],
        "RuntimeError: CUDA error: an illegal memory access was encountered") + [
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."]
    write("cuda-runtime-oom", "not-oom-illegal-access.log", L)


# ---------------------------------------------------------------- mps-oom
def mps():
    L = ["$ python sdxl_mac.py --steps 30", "Loading pipeline components...: 100%|██████████| 7/7 [00:03<00:00,  2.01it/s]",
         " 13%|█▎        | 4/30 [00:21<02:19,  5.36s/it]"]
    L += tb([("sdxl_mac.py", 21, "<module>", "image = pipe(prompt).images[0]")],
            "RuntimeError: MPS backend out of memory (MPS allocated: 16.87 GB, other allocations: 1.02 GB, max allowed: 18.13 GB). Tried to allocate 640.00 MB on private pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory allocations (may cause system failure).")
    write("mps-oom", "fires-sdxl-on-mac.log", L)

    L = ["$ python sdxl_mac.py --steps 30"] + tb([("sdxl_mac.py", 21, "<module>", "image = pipe(prompt).images[0]")],
        "RuntimeError: MPS backend out of memory (MPS allocated: 7.10 GiB, other allocations: 10.45 GiB, max allowed: 18.13 GiB). Tried to allocate 1.00 GiB on shared pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory allocations (may cause system failure).")
    write("mps-oom", "near-miss-other-metal-allocations.log", L)


# ---------------------------------------------------------------- host rules
def host():
    L = ["2026-01-09 22:11:03 | INFO | DataLoader(num_workers=16, prefetch_factor=4, persistent_workers=True)",
         "Epoch 1:  12%|█▏        | 120/1000 [01:03<07:45,  1.89it/s, loss=0.412]"]
    L += tb([("train.py", 88, "<module>", "for batch in loader:"),
             (f"{SITE}/torch/utils/data/dataloader.py", 1465, "_next_data", "idx, data = self._get_data()"),
             (f"{SITE}/torch/utils/data/_utils/signal_handling.py", 73, "handler", "_error_if_any_worker_fails()")],
            "RuntimeError: DataLoader worker (pid 48213) is killed by signal: Killed. ")
    write("dataloader-worker-killed", "fires-16-workers.log", L)
    L = ["Epoch 1:  12%|█▏        | 120/1000 [01:03<07:45,  1.89it/s, loss=0.412]"] + tb(
        [("train.py", 88, "<module>", "for batch in loader:")],
        "RuntimeError: DataLoader worker (pid 48213) is killed by signal: Segmentation fault. ")
    write("dataloader-worker-killed", "not-oom-segfault.log", L)

    L = ["detectron2-1  | [01/09 22:11:03 d2.data.build]: Using training sampler TrainingSampler, num_workers=8",
         "detectron2-1  | ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
         "detectron2-1  |  (function _error_if_any_worker_fails)"]
    write("shared-memory-exhausted", "fires-docker-default-shm.log", L)
    L = ["detectron2-1  | [01/09 22:11:03 d2.data.build]: Using training sampler TrainingSampler, num_workers=8",
         "detectron2-1  | RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed. "]
    write("shared-memory-exhausted", "near-miss-worker-killed.log", L)

    L = ["$ ./run_70b.sh", "Loading checkpoint shards:  47%|████▋     | 14/30 [03:02<03:29, 13.10s/it]",
         "./run_70b.sh: line 9: 918273 Killed                  python load_and_quantize.py --model meta-llama/Llama-2-70b-hf"]
    write("process-killed", "fires-bash-killed-while-loading.log", L)
    L = ["$ timeout 3600 python train.py", "step 5000 loss 1.23", "Terminated"]
    write("process-killed", "not-oom-terminated-by-timeout.log", L)

    L = ["RuntimeError: [enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: not enough memory: you tried to allocate 17179869184 bytes."]
    L = tb([("convert.py", 12, "<module>", "sd = torch.load('pytorch_model.bin', map_location='cpu')"),
            (f"{SITE}/torch/serialization.py", 1097, "load", "return _load(")], L[0])
    write("host-allocation-failed", "fires-torch-load-16g.log", L)
    L = tb([("x.py", 3, "<module>", "for b in dl:")], "RuntimeError: DataLoader worker (pid 77) is killed by signal: Killed. ")
    write("host-allocation-failed", "near-miss-dataloader-killed.log", L)


# ---------------------------------------------------------------- torch-generation-cache
def generation():
    L = ["Setting `pad_token_id` to `eos_token_id`:128001 for open-end generation."] + tb([
        ("gen.py", 40, "<module>", "out = model.generate(**enc, max_new_tokens=8192, num_beams=4)"),
        (f"{SITE}/transformers/generation/utils.py", 2255, "generate", "result = self._beam_search("),
        (f"{SITE}/transformers/generation/utils.py", 3480, "_beam_search", "outputs = self(**model_inputs, return_dict=True)"),
        (f"{SITE}/transformers/models/llama/modeling_llama.py", 604, "forward", "key_states, value_states = past_key_value.update(key_states, value_states, self.layer_idx, cache_kwargs)"),
        (f"{SITE}/transformers/cache_utils.py", 447, "update", "self.key_cache[layer_idx] = torch.cat([self.key_cache[layer_idx], key_states], dim=-2)"),
    ], modern("160.00 MiB", 0, "23.64 GiB", "98.44 MiB", "22.99 GiB", "230.12 MiB", self_used="23.54 GiB"))
    write("torch-generation-cache", "fires-beam-search-cat.log", L)
    L = ["***** Running Evaluation *****", "  Num examples = 2000", "  Batch size = 64"] + tb([
        (f"{SITE}/transformers/trainer.py", 4200, "evaluation_loop", "losses, logits, labels = self.prediction_step(model, inputs)"),
        (f"{SITE}/transformers/trainer.py", 4450, "prediction_step", "outputs = model(**inputs)"),
    ], modern("3.91 GiB", 0, "79.25 GiB", "1.44 GiB", "76.02 GiB", "512.00 MiB", self_used="77.68 GiB"))
    write("torch-generation-cache", "near-miss-evaluation-logits.log", L)


if __name__ == "__main__":
    for f in (fragmentation, other_processes, non_pytorch, memory_fraction, weights_on_load, optimizer_state,
              activations, leak, single_request, cuda_runtime, mps, host, generation):
        f()
