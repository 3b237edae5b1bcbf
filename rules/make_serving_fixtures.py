#!/usr/bin/env python3
"""Writes the fixtures for the LLM-serving rules (vLLM, SGLang, TGI, TensorRT-LLM).

Each rule gets `fires-*.log` inputs its rule must decide and `near-miss-*.log` inputs that
look alike but must be decided by another rule or yield no incident. The logs are written
in the shapes users paste from these engines: docker compose prefixes, vLLM V1 process tags
with caret-form colour codes, tensor-parallel ranks printing the same error, journald with a
German locale, restart loops, tracebacks packed into one line by a log shipper, TGI's
`--json-output`, Triton's glog lines around TensorRT-LLM's own. Every number is made up but
consistent with the arithmetic the engines do (Llama-3.1-8B stores 128 KiB of bf16 KV per
token, a 24 GiB card reports 23.52-23.64 GiB, and so on).

`fixtures/engines/` receives longer logs used by tests/serving_engines.rs (restarts).

Run from the repository root:  python3 rules/make_serving_fixtures.py
The outputs are committed; tests never run this script.
"""
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
ENGINES = os.path.join(os.path.dirname(HERE), "fixtures", "engines")
rng = random.Random(20261122)

CARET_CYAN = "^[[1;36m"
CARET_RESET = "^[[0;0m"


def write(rule, name, lines, root=HERE):
    d = os.path.join(root, rule) if rule else root
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "w", encoding="utf-8", newline="") as f:
        f.write("\n".join(lines) + "\n")


class Clock:
    """A wall clock that moves forward as lines are written."""

    def __init__(self, month, day, h, m, s, year=2025):
        self.t = ((day * 24 + h) * 60 + m) * 60 + s
        self.month, self.year = month, year

    def tick(self, secs=1):
        self.t += secs

    def parts(self):
        s = self.t
        day, s = divmod(s, 86400)
        h, s = divmod(s, 3600)
        m, s = divmod(s, 60)
        return day, h, m, s

    def vllm(self):
        d, h, m, s = self.parts()
        return f"{self.month:02d}-{d:02d} {h:02d}:{m:02d}:{s:02d}"

    def iso(self):
        d, h, m, s = self.parts()
        return f"{self.year}-{self.month:02d}-{d:02d}T{h:02d}:{m:02d}:{s:02d}.{rng.randint(0, 999999):06d}Z"

    def sglang(self):
        d, h, m, s = self.parts()
        return f"{self.year}-{self.month:02d}-{d:02d} {h:02d}:{m:02d}:{s:02d}"

    def trt(self):
        d, h, m, s = self.parts()
        return f"{self.month:02d}/{d:02d}/{self.year}-{h:02d}:{m:02d}:{s:02d}"

    def glog(self):
        d, h, m, s = self.parts()
        return f"{self.month:02d}{d:02d} {h:02d}:{m:02d}:{s:02d}.{rng.randint(0, 999999):06d}"


def v1(clock, proc, level, src, msg, caret=False, compose=None, step=0):
    """A vLLM V1 line: `(EngineCore_0 pid=88) INFO 08-22 20:52:36 [gpu_worker.py:276] msg`."""
    clock.tick(step)
    tag = ""
    if proc:
        tag = f"{CARET_CYAN}({proc}){CARET_RESET} " if caret else f"({proc}) "
    line = f"{tag}{level} {clock.vllm()} [{src}] {msg}"
    return f"{compose}  | {line}" if compose else line


def v0(clock, level, src, msg, proc=None, step=0):
    """A vLLM V0 line: `INFO 04-28 04:07:49 worker.py:232] msg`."""
    clock.tick(step)
    tag = f"({proc}) " if proc else ""
    return f"{tag}{level} {clock.vllm()} {src}] {msg}"


def frames(fr):
    out = ["Traceback (most recent call last):"]
    for file, line, func, code in fr:
        out.append(f'  File "{file}", line {line}, in {func}')
        if code:
            out.append(f"    {code}")
    return out


def torch_oom(req, dev, total, free, alloc, unalloc, self_used=None, private=None, procs=(), exc="torch.OutOfMemoryError"):
    s = f"{exc}: CUDA out of memory. Tried to allocate {req}. GPU {dev} has a total capacity of {total} of which {free} is free. "
    for pid, used in procs:
        s += f"Process {pid} has {used} memory in use. "
    if self_used:
        s += f"Including non-PyTorch memory, this process has {self_used} memory in use. "
    s += f"Of the allocated memory {alloc} is allocated by PyTorch, "
    if private:
        s += f"with {private} allocated in private pools (e.g., CUDA Graphs), "
    s += (f"and {unalloc} is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
          "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  "
          "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
    return s


def stats_v0(running, pending, kv, prompt=None, gen=None):
    prompt = prompt if prompt is not None else rng.uniform(50, 900)
    gen = gen if gen is not None else rng.uniform(800, 2400)
    return (f"Avg prompt throughput: {prompt:.1f} tokens/s, Avg generation throughput: {gen:.1f} tokens/s, "
            f"Running: {running} reqs, Swapped: 0 reqs, Pending: {pending} reqs, GPU KV cache usage: {kv:.1f}%, CPU KV cache usage: 0.0%.")


def stats_v1(running, waiting, kv, preempt=0):
    p = f"Preemptions: {preempt}, " if preempt else ""
    return (f"Engine 000: Avg prompt throughput: {rng.uniform(100, 4000):.1f} tokens/s, Avg generation throughput: "
            f"{rng.uniform(500, 3000):.1f} tokens/s, Running: {running} reqs, Waiting: {waiting} reqs, {p}"
            f"GPU KV cache usage: {kv:.1f}%, Prefix cache hit rate: {rng.uniform(0, 40):.1f}%")


def http_ok(n, clock, proc="APIServer pid=1", compose=None):
    out = []
    for _ in range(n):
        clock.tick(rng.randint(0, 2))
        line = f"({proc}) INFO:     10.0.{rng.randint(0, 9)}.{rng.randint(2, 250)}:{rng.randint(30000, 60000)} - \"POST /v1/chat/completions HTTP/1.1\" 200 OK"
        out.append(f"{compose}  | {line}" if compose else line)
    return out


SITE = "/usr/local/lib/python3.12/dist-packages"
SITE310 = "/usr/local/lib/python3.10/dist-packages"

V1_CONFIG_TAIL = ("skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code=False, "
                  "download_dir=None, load_format=auto, disable_custom_all_reduce=False, device_config=cuda, "
                  "decoding_config=DecodingConfig(backend='auto', disable_fallback=False), observability_config=ObservabilityConfig(), seed=0, "
                  "enable_prefix_caching=True, chunked_prefill_enabled=True, use_async_output_proc=True, pooler_config=None")


def v1_config(version, model, dtype, max_len, tp, kv="auto", eager=False, quant="None", capture=512, served=None):
    return (f"Initializing a V1 LLM engine (v{version}) with config: model='{model}', speculative_config=None, tokenizer='{model}', "
            f"dtype=torch.{dtype}, max_seq_len={max_len}, tensor_parallel_size={tp}, pipeline_parallel_size=1, quantization={quant}, "
            f"enforce_eager={eager}, kv_cache_dtype={kv}, served_model_name={served or model}, {V1_CONFIG_TAIL}, "
            f"compilation_config={{\"level\":3,\"debug_dump_path\":\"\",\"backend\":\"\",\"use_inductor\":true,\"cudagraph_mode\":1,"
            f"\"use_cudagraph\":true,\"cudagraph_num_of_warmups\":1,\"max_capture_size\":{capture},\"local_cache_dir\":null}}")


def v0_config(version, model, dtype, max_len, tp, kv="auto", eager=False, quant="None"):
    return (f"Initializing an LLM engine (v{version}) with config: model='{model}', speculative_config=None, tokenizer='{model}', "
            f"skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, override_neuron_config=None, rope_scaling=None, rope_theta=None, "
            f"tokenizer_revision=None, trust_remote_code=False, dtype=torch.{dtype}, max_seq_len={max_len}, download_dir=None, "
            f"load_format=LoadFormat.AUTO, tensor_parallel_size={tp}, pipeline_parallel_size=1, disable_custom_all_reduce=False, "
            f"quantization={quant}, enforce_eager={eager}, kv_cache_dtype={kv}, quantization_param_path=None, device_config=cuda, "
            f"decoding_config=DecodingConfig(guided_decoding_backend='outlines'), seed=0, served_model_name={model}, "
            f"use_v2_block_manager=True, num_scheduler_steps=1, chunked_prefill_enabled=False multi_step_stream_outputs=True, "
            f"enable_prefix_caching=False, use_async_output_proc=True, use_cached_outputs=True, mm_processor_kwargs=None)")


def v0_namespace(model, max_len="None", util=0.9, seqs=256, batched="None", tp=1, chunked="None", extra=""):
    return (f"args: Namespace(host=None, port=8000, uvicorn_log_level='info', allow_credentials=False, "
            f"api_key=None, model='{model}', tokenizer=None, trust_remote_code=False, download_dir=None, load_format='auto', "
            f"dtype='auto', kv_cache_dtype='auto', max_model_len={max_len}, guided_decoding_backend='outlines', "
            f"distributed_executor_backend=None, pipeline_parallel_size=1, tensor_parallel_size={tp}, block_size=16, "
            f"enable_prefix_caching=False, swap_space=4, cpu_offload_gb=0, gpu_memory_utilization={util}, "
            f"max_num_batched_tokens={batched}, max_num_seqs={seqs}, max_logprobs=20, disable_log_stats=False, quantization=None, "
            f"enforce_eager=False, max_seq_len_to_capture=8192, enable_chunked_prefill={chunked}{extra})")


# =====================================================================================
# vLLM
# =====================================================================================

V1_ENGINE_FAIL_FRAMES = [
    (f"{SITE}/vllm/v1/engine/core.py", 691, "run_engine_core", "engine_core = EngineCoreProc(*args, **kwargs)"),
    (f"{SITE}/vllm/v1/engine/core.py", 492, "__init__", "super().__init__(vllm_config, executor_class, log_stats,"),
    (f"{SITE}/vllm/v1/engine/core.py", 89, "__init__", "self._initialize_kv_caches(vllm_config)"),
    (f"{SITE}/vllm/v1/engine/core.py", 189, "_initialize_kv_caches", "get_kv_cache_config(vllm_config, kv_cache_spec_one_worker,"),
    (f"{SITE}/vllm/v1/core/kv_cache_utils.py", 1095, "get_kv_cache_config", "check_enough_kv_cache_memory(vllm_config, kv_cache_spec, available_memory)"),
    (f"{SITE}/vllm/v1/core/kv_cache_utils.py", 699, "check_enough_kv_cache_memory", "raise ValueError("),
]


def api_server_died(clock, compose=None, caret=False):
    fr = frames([
        ("/usr/local/bin/vllm", 10, "<module>", "sys.exit(main())"),
        (f"{SITE}/vllm/entrypoints/cli/main.py", 54, "main", "args.dispatch_function(args)"),
        (f"{SITE}/vllm/entrypoints/openai/api_server.py", 1920, "run_server", "await run_server_worker(listen_address, sock, args, **uvicorn_kwargs)"),
        (f"{SITE}/vllm/v1/engine/utils.py", 714, "wait_for_engine_startup", "raise RuntimeError(\"Engine core initialization failed. \""),
    ]) + ["RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"]
    out = []
    for l in fr:
        tag = f"{CARET_CYAN}(APIServer pid=1){CARET_RESET} " if caret else "(APIServer pid=1) "
        line = tag + l
        out.append(f"{compose}  | {line}" if compose else line)
    return out


def vllm_kv_v1_131k():
    """V1 0.10, docker compose, caret colours: max_model_len 131072 on a 24 GiB card."""
    c = Clock(8, 22, 20, 52, 10)
    cp = "vllm-1"
    E = "EngineCore_0 pid=88"
    A = "APIServer pid=1"
    L = [
        "Attaching to vllm-1",
        v1(c, A, "INFO", "api_server.py:1805", "vLLM API server version 0.10.1.1", caret=True, compose=cp),
        v1(c, A, "INFO", "utils.py:326", "non-default args: {'model_tag': 'meta-llama/Llama-3.1-8B-Instruct', 'host': '0.0.0.0', 'model': 'meta-llama/Llama-3.1-8B-Instruct', 'served_model_name': ['llama']}", caret=True, compose=cp),
        v1(c, A, "INFO", "__init__.py:711", "Resolved architecture: LlamaForCausalLM", caret=True, compose=cp, step=7),
        v1(c, A, "INFO", "__init__.py:1750", "Using max model len 131072", caret=True, compose=cp),
        v1(c, A, "INFO", "scheduler.py:222", "Chunked prefill is enabled with max_num_batched_tokens=2048.", caret=True, compose=cp),
        v1(c, E, "INFO", "core.py:636", "Waiting for init message from front-end.", caret=True, compose=cp, step=4),
        v1(c, E, "INFO", "core.py:74", v1_config("0.10.1.1", "meta-llama/Llama-3.1-8B-Instruct", "bfloat16", 131072, 1, served="llama"), caret=True, compose=cp),
        v1(c, E, "INFO", "parallel_state.py:1134", "rank 0 in world size 1 is assigned as DP rank 0, PP rank 0, TP rank 0, EP rank 0", caret=True, compose=cp, step=2),
        v1(c, E, "INFO", "gpu_model_runner.py:1953", "Starting to load model meta-llama/Llama-3.1-8B-Instruct...", caret=True, compose=cp),
        v1(c, E, "INFO", "cuda.py:328", "Using Flash Attention backend on V1 engine.", caret=True, compose=cp),
    ]
    for i in range(1, 5):
        c.tick(1)
        L.append(f"{cp}  | {CARET_CYAN}({E}){CARET_RESET} Loading safetensors checkpoint shards: {i * 25:3d}% Completed | {i}/4 [00:0{i}<00:0{4 - i},  1.4{i}s/it]")
    L += [
        v1(c, E, "INFO", "default_loader.py:262", "Loading weights took 5.91 seconds", caret=True, compose=cp),
        v1(c, E, "INFO", "gpu_model_runner.py:2007", "Model loading took 14.9889 GiB and 6.524100 seconds", caret=True, compose=cp),
        v1(c, E, "INFO", "backends.py:548", "Using cache directory: /root/.cache/vllm/torch_compile_cache/3c2a1f9e0d/rank_0_0/backbone for vLLM's torch.compile", caret=True, compose=cp, step=2),
        v1(c, E, "INFO", "backends.py:559", "Dynamo bytecode transform time: 6.12 s", caret=True, compose=cp, step=6),
        v1(c, E, "INFO", "monitor.py:34", "torch.compile takes 6.12 s in total", caret=True, compose=cp, step=9),
        v1(c, E, "INFO", "gpu_worker.py:276", "Available KV cache memory: 5.62 GiB", caret=True, compose=cp, step=3),
    ]
    err = ("ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache is needed, which is larger "
           "than the available KV cache memory (5.62 GiB). Based on the available memory, the estimated maximum model length is 46032. "
           "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
    L.append(v1(c, E, "ERROR", "core.py:700", "EngineCore failed to start.", caret=True, compose=cp, step=1))
    for l in frames(V1_ENGINE_FAIL_FRAMES) + [err]:
        L.append(v1(c, E, "ERROR", "core.py:700", l, caret=True, compose=cp))
    L.append(f"{cp}  | {CARET_CYAN}({E}){CARET_RESET} Process EngineCore_0:")
    for l in frames([("/usr/lib/python3.12/multiprocessing/process.py", 314, "_bootstrap", "self.run()"),
                     ("/usr/lib/python3.12/multiprocessing/process.py", 108, "run", "self._target(*self._args, **self._kwargs)")]
                    + V1_ENGINE_FAIL_FRAMES[:1]) + [err]:
        L.append(f"{cp}  | {CARET_CYAN}({E}){CARET_RESET} {l}")
    L += api_server_died(c, cp, caret=True)
    L.append("vllm-1 exited with code 1")
    write("vllm-max-model-len-exceeds-kv", "fires-v1-131k-on-24g.log", L)


def vllm_kv_v1_with_free():
    """0.26-style: the INFO start-up summary shows free memory, so raising the budget is safe."""
    c = Clock(3, 4, 9, 15, 2, 2026)
    E = "EngineCore pid=4410"
    A = "APIServer pid=4377"
    W = "Worker pid=4461"
    M = "mistralai/Mistral-Small-3.1-24B-Instruct-2503"
    L = [
        f"$ vllm serve {M} --gpu-memory-utilization 0.8 --max-num-seqs 64",
        v1(c, A, "INFO", "utils.py:299", " █▄█▀ █     █     █     █  version 0.26.1", step=1),
        v1(c, A, "INFO", "utils.py:233", f"non-default args: {{'model_tag': '{M}', 'model': '{M}', 'gpu_memory_utilization': 0.8, 'max_num_seqs': 64}}"),
        v1(c, E, "INFO", "core.py:93", v1_config("0.26.1", M, "bfloat16", 131072, 1), step=6),
        v1(c, W, "INFO", "gpu_model_runner.py:3120", f"Starting to load model {M}...", step=2),
        v1(c, W, "INFO", "gpu_model_runner.py:3190", "Model loading took 44.7 GiB memory and 31.220031 seconds", step=31),
        v1(c, W, "INFO", "gpu_worker.py:402", "Available KV cache memory: 15.95 GiB", step=20),
        v1(c, W, "INFO", "gpu_worker.py:441", "Free memory on device (78.6/79.19 GiB) on startup. Desired GPU memory utilization is (0.8, 63.35 GiB). Actual usage is 44.7 GiB for weight, 2.4 GiB for peak activation, 0.3 GiB for non-torch memory, and 0.0 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with `--kv-cache-memory=17126115738` (15.95 GiB) to fit into requested memory, or `--kv-cache-memory=33500744499` (31.2 GiB) to fully utilize gpu memory. Current kv cache memory in use is 15.95 GiB."),
    ]
    err = ("ValueError: To serve at least one request with the model's max seq len (131072), (20.0 GiB KV cache is needed, which is larger than the "
           "available KV cache memory (15.95 GiB). Based on the available memory, the estimated maximum model length is 104528. Try increasing "
           "`gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the engine. "
           "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")
    L.append(v1(c, E, "ERROR", "core.py:1224", "EngineCore failed to start.", step=1))
    for l in frames(V1_ENGINE_FAIL_FRAMES) + [err]:
        L.append(v1(c, E, "ERROR", "core.py:1224", l))
    L += api_server_died(c)
    write("vllm-max-model-len-exceeds-kv", "fires-v1-free-memory-logged.log", L)


def vllm_kv_v0_restarts():
    """V0 0.6.3 under systemd with a German locale: the same KV error on three starts."""
    c = Clock(12, 3, 7, 58, 1)
    L = []
    for run in range(3):
        def j(msg, step=0, pid=2210 + run * 17):
            c.tick(step)
            d, h, m, s = c.parts()
            return f"Dez {d:02d} {h:02d}:{m:02d}:{s:02d} gpu-box-3 vllm[{pid}]: {msg}"
        L += [
            f"Dez 03 {7 + run:02d}:58:0{run} gpu-box-3 systemd[1]: Started vllm.service - vLLM OpenAI server.",
            j(v0(c, "INFO", "api_server.py:528", "vLLM API server version 0.6.3.post1"), step=3),
            j(v0(c, "INFO", "api_server.py:529", v0_namespace("meta-llama/Llama-3.1-8B-Instruct", max_len=32768))),
            j(v0(c, "INFO", "llm_engine.py:237", v0_config("0.6.3.post1", "meta-llama/Llama-3.1-8B-Instruct", "bfloat16", 32768, 1)), step=2),
            j(v0(c, "INFO", "model_runner.py:1056", "Starting to load model meta-llama/Llama-3.1-8B-Instruct..."), step=1),
            j(v0(c, "INFO", "weight_utils.py:243", "Using model weights format ['*.safetensors']")),
            j(v0(c, "INFO", "model_runner.py:1067", "Loading model weights took 14.9888 GB"), step=6),
            j(v0(c, "INFO", "gpu_executor.py:122", "# GPU blocks: 2043, # CPU blocks: 2048"), step=3),
            j(v0(c, "INFO", "gpu_executor.py:126", "Maximum concurrency for 32768 tokens per request: 1.00x")),
        ]
        # V0 0.6.3 printed the profiling results just before the block counts.
        L.insert(len(L) - 2, j(v0(c, "INFO", "worker.py:232", "Memory profiling results: total_gpu_memory=23.64GiB initial_memory_usage=15.32GiB peak_torch_memory=16.88GiB memory_usage_post_profile=15.41GiB non_torch_memory=0.41GiB kv_cache_size=3.99GiB gpu_memory_utilization=0.90")))
        tb = frames([
            (f"{SITE310}/vllm/entrypoints/openai/api_server.py", 585, "<module>", "uvloop.run(run_server(args))"),
            (f"{SITE310}/vllm/engine/llm_engine.py", 335, "__init__", "self._initialize_kv_caches()"),
            (f"{SITE310}/vllm/engine/llm_engine.py", 482, "_initialize_kv_caches", "self.model_executor.initialize_cache(num_gpu_blocks, num_cpu_blocks)"),
            (f"{SITE310}/vllm/executor/gpu_executor.py", 125, "initialize_cache", "self.driver_worker.initialize_cache(num_gpu_blocks, num_cpu_blocks)"),
            (f"{SITE310}/vllm/worker/worker.py", 266, "initialize_cache", "raise_if_cache_size_invalid(num_gpu_blocks,"),
            (f"{SITE310}/vllm/worker/worker.py", 492, "raise_if_cache_size_invalid", "raise ValueError("),
        ]) + ["ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be stored in KV cache (32688). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."]
        L += [j(l) for l in tb]
        c.tick(2)
        L += [
            f"Dez 03 {7 + run:02d}:59:1{run} gpu-box-3 systemd[1]: vllm.service: Main process exited, code=exited, status=1/FAILURE",
            f"Dez 03 {7 + run:02d}:59:1{run} gpu-box-3 systemd[1]: vllm.service: Failed with result 'exit-code'.",
            f"Dez 03 {7 + run:02d}:59:4{run} gpu-box-3 systemd[1]: vllm.service: Scheduled restart job, restart counter is at {run + 1}.",
        ]
    write("vllm-max-model-len-exceeds-kv", "fires-v0-journald-three-restarts.log", L)


def vllm_kv_near_miss():
    """A healthy V1 server rejecting one over-long request (HTTP 400): no incident."""
    c = Clock(6, 30, 13, 2, 0)
    A = "APIServer pid=1"
    E = "EngineCore_0 pid=211"
    L = [
        v1(c, A, "INFO", "api_server.py:1395", "vLLM API server version 0.9.2"),
        v1(c, A, "INFO", "cli_args.py:325", "non-default args: {'model': 'mistralai/Mistral-Small-3.2-24B-Instruct-2506', 'max_model_len': 32768, 'tensor_parallel_size': 2}"),
        v1(c, E, "INFO", "core.py:69", v1_config("0.9.2", "mistralai/Mistral-Small-3.2-24B-Instruct-2506", "bfloat16", 32768, 2), step=5),
        v1(c, "VllmWorker rank=0 pid=340", "INFO", "gpu_model_runner.py:1801", "Model loading took 22.1012 GiB and 18.220031 seconds", step=19),
        v1(c, "VllmWorker rank=1 pid=341", "INFO", "gpu_model_runner.py:1801", "Model loading took 22.1012 GiB and 18.410441 seconds"),
        v1(c, "VllmWorker rank=0 pid=340", "INFO", "gpu_worker.py:232", "Available KV cache memory: 46.86 GiB", step=12),
        v1(c, "VllmWorker rank=1 pid=341", "INFO", "gpu_worker.py:232", "Available KV cache memory: 46.86 GiB"),
        v1(c, E, "INFO", "kv_cache_utils.py:716", "GPU KV cache size: 614,144 tokens"),
        v1(c, E, "INFO", "kv_cache_utils.py:720", "Maximum concurrency for 32,768 tokens per request: 18.74x"),
        v1(c, "VllmWorker rank=0 pid=340", "INFO", "gpu_model_runner.py:2326", "Graph capturing finished in 21 secs, took 0.61 GiB", step=21),
        v1(c, E, "INFO", "core.py:172", "init engine (profile, create kv cache, warmup model) took 58.27 seconds"),
        v1(c, A, "INFO", "api_server.py:1457", "Starting vLLM API server 0 on http://0.0.0.0:8000", step=1),
        "INFO:     Application startup complete.",
    ]
    L += http_ok(6, c)
    L.append(v1(c, A, "INFO", "loggers.py:118", stats_v1(3, 0, 4.1), step=10))
    L.append(v1(c, A, "ERROR", "serving_chat.py:222", "Error in preprocessing prompt inputs", step=3))
    L += [f"({A}) " + l for l in frames([
        (f"{SITE}/vllm/entrypoints/openai/serving_chat.py", 205, "create_chat_completion", ") = await self._preprocess_chat("),
        (f"{SITE}/vllm/entrypoints/openai/serving_engine.py", 404, "_validate_input", "raise ValueError("),
    ])]
    L.append(f"({A}) ValueError: This model's maximum context length is 32768 tokens. However, you requested 40012 tokens (39000 in the messages, 1012 in the completion). Please reduce the length of the messages or completion.")
    L.append(f"({A}) INFO:     10.0.3.17:51234 - \"POST /v1/chat/completions HTTP/1.1\" 400 Bad Request")
    L += http_ok(4, c)
    L.append(v1(c, A, "INFO", "loggers.py:118", stats_v1(1, 0, 1.2), step=10))
    write("vllm-max-model-len-exceeds-kv", "not-oom-request-longer-than-context.log", L)


def vllm_no_blocks():
    """V0 0.6.6: a 14B model with gpu_memory_utilization lowered to share the card."""
    c = Clock(1, 12, 8, 0, 0)
    L = [
        "+ python -m vllm.entrypoints.openai.api_server --model Qwen/Qwen2.5-14B-Instruct --gpu-memory-utilization 0.45 --max-model-len 8192 --port 8001",
        v0(c, "INFO", "api_server.py:712", "vLLM API server version 0.6.6.post1", step=4),
        v0(c, "INFO", "api_server.py:713", v0_namespace("Qwen/Qwen2.5-14B-Instruct", max_len=8192, util=0.45)),
        v0(c, "INFO", "llm_engine.py:234", v0_config("0.6.6.post1", "Qwen/Qwen2.5-14B-Instruct", "bfloat16", 8192, 1), step=3),
        v0(c, "INFO", "model_runner.py:1094", "Starting to load model Qwen/Qwen2.5-14B-Instruct...", step=2),
        v0(c, "INFO", "model_runner.py:1099", "Loading model weights took 27.6592 GB", step=22),
        v0(c, "INFO", "worker.py:241", "Memory profiling takes 2.71 seconds", step=3),
        v0(c, "INFO", "worker.py:241", "the current vLLM instance can use total_gpu_memory (44.52GiB) x gpu_memory_utilization (0.45) = 20.03GiB"),
        v0(c, "INFO", "worker.py:241", "model weights take 27.66GiB; non_torch_memory takes 0.22GiB; PyTorch activation peak memory takes 1.42GiB; the rest of the memory reserved for KV Cache is -9.27GiB."),
        v0(c, "INFO", "gpu_executor.py:76", "# GPU blocks: 0, # CPU blocks: 1365"),
    ]
    L += frames([
        (f"{SITE310}/vllm/entrypoints/openai/api_server.py", 774, "<module>", "uvloop.run(run_server(args))"),
        (f"{SITE310}/vllm/engine/llm_engine.py", 276, "__init__", "self._initialize_kv_caches()"),
        (f"{SITE310}/vllm/engine/llm_engine.py", 434, "_initialize_kv_caches", "self.model_executor.initialize_cache(num_gpu_blocks, num_cpu_blocks)"),
        (f"{SITE310}/vllm/worker/worker.py", 271, "initialize_cache", "raise_if_cache_size_invalid(num_gpu_blocks,"),
        (f"{SITE310}/vllm/worker/worker.py", 476, "raise_if_cache_size_invalid", "raise ValueError(\"No available memory for the cache blocks. \""),
    ])
    L.append("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.")
    write("vllm-no-kv-cache-blocks", "fires-v0-util-lowered-to-share.log", L)

    # V1 0.9: fp16 7B on a 16 GB card, budget below the weights; KV budget negative.
    c = Clock(7, 2, 18, 30, 0)
    E = "EngineCore_0 pid=1207"
    L = [
        v1(c, "APIServer pid=1166", "INFO", "api_server.py:1287", "vLLM API server version 0.9.1"),
        v1(c, "APIServer pid=1166", "INFO", "cli_args.py:309", "non-default args: {'model': 'mistralai/Mistral-7B-Instruct-v0.3', 'dtype': 'half', 'max_model_len': 4096}"),
        v1(c, E, "INFO", "core.py:69", v1_config("0.9.1", "mistralai/Mistral-7B-Instruct-v0.3", "float16", 4096, 1), step=4),
        v1(c, E, "INFO", "gpu_model_runner.py:1595", "Starting to load model mistralai/Mistral-7B-Instruct-v0.3...", step=1),
        v1(c, E, "INFO", "gpu_model_runner.py:1600", "Model loading took 13.5083 GiB and 9.741811 seconds", step=10),
        v1(c, E, "INFO", "gpu_worker.py:216", "Memory profiling takes 4.81 seconds. Total non KV cache memory: 14.43GiB; torch peak memory increase: 0.83GiB; non-torch forward increase memory: 0.09GiB; weights memory: 13.51GiB.", step=6),
        v1(c, E, "INFO", "gpu_worker.py:227", "Available KV cache memory: -0.24 GiB", step=2),
        v1(c, E, "ERROR", "core.py:515", "EngineCore failed to start."),
    ]
    for l in frames(V1_ENGINE_FAIL_FRAMES[:5]) + [
            f'  File "{SITE}/vllm/v1/core/kv_cache_utils.py", line 528, in check_enough_kv_cache_memory',
            "    raise ValueError(\"No available memory for the cache blocks. \"",
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."]:
        L.append(v1(c, E, "ERROR", "core.py:515", l))
    L += api_server_died(c)
    write("vllm-no-kv-cache-blocks", "fires-v1-7b-fp16-on-16g.log", L)

    # Near miss: some KV room exists, it is just too small for max_model_len.
    c = Clock(7, 2, 19, 0, 0)
    L = [
        v1(c, "APIServer pid=1", "INFO", "api_server.py:1287", "vLLM API server version 0.9.1"),
        v1(c, "APIServer pid=1", "INFO", "cli_args.py:309", "non-default args: {'model': 'mistralai/Mistral-7B-Instruct-v0.3', 'dtype': 'half', 'gpu_memory_utilization': 0.95}"),
        v1(c, E, "INFO", "core.py:69", v1_config("0.9.1", "mistralai/Mistral-7B-Instruct-v0.3", "float16", 32768, 1), step=4),
        v1(c, E, "INFO", "gpu_model_runner.py:1600", "Model loading took 13.5083 GiB and 9.741811 seconds", step=10),
        v1(c, E, "INFO", "gpu_worker.py:227", "Available KV cache memory: 0.55 GiB", step=8),
        v1(c, E, "ERROR", "core.py:515", "EngineCore failed to start."),
    ]
    for l in frames(V1_ENGINE_FAIL_FRAMES) + ["ValueError: To serve at least one request with the models's max seq len (32768), (4.00 GiB KV cache is needed, which is larger than the available KV cache memory (0.55 GiB). Based on the available memory, the estimated maximum model length is 4496. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."]:
        L.append(v1(c, E, "ERROR", "core.py:515", l))
    L += api_server_died(c)
    write("vllm-no-kv-cache-blocks", "near-miss-little-kv-is-a-length-problem.log", L)

    # Only the command and the traceback were pasted: no accounting numbers.
    L = [
        "$ python -m vllm.entrypoints.openai.api_server --model /mnt/models/deepseek-coder-33b-instruct --dtype float16 --tensor-parallel-size 2 --gpu-memory-utilization 0.7 --port 8000",
        "...",
    ] + [f"[rank0]: {l}" for l in frames([
        (f"{SITE310}/vllm/engine/llm_engine.py", 317, "__init__", "self._initialize_kv_caches()"),
        (f"{SITE310}/vllm/worker/worker.py", 271, "initialize_cache", "raise_if_cache_size_invalid(num_gpu_blocks,"),
        (f"{SITE310}/vllm/worker/worker.py", 476, "raise_if_cache_size_invalid", "raise ValueError(\"No available memory for the cache blocks. \""),
    ])] + ["[rank0]: ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."]
    write("vllm-no-kv-cache-blocks", "fires-only-command-and-traceback.log", L)


def vllm_budget():
    c = Clock(9, 14, 11, 3, 0)
    E = "EngineCore_0 pid=5120"
    L = [
        "$ CUDA_VISIBLE_DEVICES=0 vllm serve Qwen/Qwen2.5-7B-Instruct --port 8002 --max-model-len 16384",
        v1(c, "APIServer pid=5077", "INFO", "api_server.py:1395", "vLLM API server version 0.9.2", step=3),
        v1(c, "APIServer pid=5077", "INFO", "cli_args.py:325", "non-default args: {'model_tag': 'Qwen/Qwen2.5-7B-Instruct', 'port': 8002, 'model': 'Qwen/Qwen2.5-7B-Instruct', 'max_model_len': 16384}"),
        v1(c, E, "INFO", "core.py:69", v1_config("0.9.2", "Qwen/Qwen2.5-7B-Instruct", "bfloat16", 16384, 1), step=5),
        v1(c, E, "ERROR", "core.py:515", "EngineCore failed to start.", step=2),
    ]
    for l in frames([
        (f"{SITE}/vllm/v1/engine/core.py", 506, "run_engine_core", "engine_core = EngineCoreProc(*args, **kwargs)"),
        (f"{SITE}/vllm/v1/engine/core.py", 76, "__init__", "self.model_executor = executor_class(vllm_config)"),
        (f"{SITE}/vllm/executor/uniproc_executor.py", 47, "_init_executor", "self.collective_rpc(\"init_device\")"),
        (f"{SITE}/vllm/worker/worker_base.py", 606, "init_device", "self.worker.init_device()  # type: ignore"),
        (f"{SITE}/vllm/v1/worker/gpu_worker.py", 145, "init_device", "raise ValueError("),
    ]) + ["ValueError: Free memory on device (21.07/44.52 GiB) on startup is less than desired GPU memory utilization (0.9, 40.07 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."]:
        L.append(v1(c, E, "ERROR", "core.py:515", l))
    L += api_server_died(c)
    write("vllm-startup-budget-exceeds-free", "fires-second-instance-on-gpu.log", L)

    # 0.14-style, docker restart policy, the error wrapped by an 80-column terminal.
    c = Clock(2, 9, 23, 40, 0, 2026)
    L = []
    msg = ("(EngineCore pid=42103) ValueError: Free memory on device cuda:0 (13.19/23.52 GiB) on startup is less than desired GPU memory utilization "
           "(0.9, 21.17 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.")
    for run in range(3):
        L += [
            v1(c, "APIServer pid=1", "INFO", "utils.py:299", "vLLM API server version 0.14.1", step=20),
            v1(c, "APIServer pid=1", "INFO", "utils.py:233", "non-default args: {'model_tag': 'google/gemma-3-12b-it', 'model': 'google/gemma-3-12b-it', 'max_model_len': 8192}"),
            v1(c, "EngineCore pid=42103", "INFO", "core.py:93", v1_config("0.14.1", "google/gemma-3-12b-it", "bfloat16", 8192, 1), step=4),
            v1(c, "EngineCore pid=42103", "ERROR", "core.py:866", "EngineCore failed to start.", step=1),
        ]
        for l in frames([
            (f"{SITE}/vllm/v1/engine/core.py", 857, "run_engine_core", "engine_core = EngineCoreProc(*args, **kwargs)"),
            (f"{SITE}/vllm/v1/worker/gpu_worker.py", 236, "init_device", "self.requested_memory = request_memory(init_snapshot, self.cache_config)"),
            (f"{SITE}/vllm/v1/worker/utils.py", 413, "request_memory", "raise ValueError("),
        ]):
            L.append(v1(c, "EngineCore pid=42103", "ERROR", "core.py:866", l))
        L += [msg[i:i + 80] for i in range(0, len(msg), 80)]
        L += api_server_died(c)[-1:]
    write("vllm-startup-budget-exceeds-free", "fires-wrapped-restart-loop.log", L)

    # Near miss: the 0.26 start-up summary also begins with "Free memory on device".
    c = Clock(3, 1, 10, 0, 0, 2026)
    W = "Worker pid=211"
    L = [
        v1(c, "APIServer pid=1", "INFO", "utils.py:299", " █▄█▀ █     █     █     █  version 0.26.0"),
        v1(c, "APIServer pid=1", "INFO", "utils.py:233", "non-default args: {'model_tag': 'meta-llama/Llama-3.1-8B-Instruct', 'model': 'meta-llama/Llama-3.1-8B-Instruct', 'max_model_len': 32768}"),
        v1(c, "EngineCore pid=150", "INFO", "core.py:93", v1_config("0.26.0", "meta-llama/Llama-3.1-8B-Instruct", "bfloat16", 32768, 1), step=4),
        v1(c, W, "INFO", "gpu_model_runner.py:3190", "Model loading took 15.0 GiB memory and 6.881201 seconds", step=8),
        v1(c, W, "INFO", "gpu_worker.py:402", "Available KV cache memory: 54.2 GiB", step=12),
        v1(c, W, "INFO", "gpu_worker.py:441", "Free memory on device (78.6/79.19 GiB) on startup. Desired GPU memory utilization is (0.9, 71.27 GiB). Actual usage is 15.0 GiB for weight, 1.4 GiB for peak activation, 0.1 GiB for non-torch memory, and 0.5 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with `--kv-cache-memory=58196811366` (54.2 GiB) to fit into requested memory, or `--kv-cache-memory=65302487859` (60.82 GiB) to fully utilize gpu memory. Current kv cache memory in use is 54.2 GiB."),
        v1(c, "EngineCore pid=150", "INFO", "kv_cache_utils.py:1087", "GPU KV cache size: 443,904 tokens, Maximum concurrency for 32,768 tokens per request: 13.55x"),
        v1(c, "EngineCore pid=150", "INFO", "core.py:254", "init engine (profile, create kv cache, warmup model) took 39.12 seconds", step=14),
        v1(c, "APIServer pid=1", "INFO", "api_server.py:2015", "Starting vLLM API server 0 on http://0.0.0.0:8000"),
    ]
    L += http_ok(5, c)
    L.append(v1(c, "APIServer pid=1", "INFO", "loggers.py:257", stats_v1(2, 0, 0.9), step=10))
    write("vllm-startup-budget-exceeds-free", "not-oom-startup-summary-is-fine.log", L)


def vllm_graph():
    """V0 0.6.1 tensor-parallel on two 24 GiB cards with the budget raised to 0.95."""
    c = Clock(10, 7, 16, 20, 0)
    W1 = "VllmWorkerProcess pid=2203"
    L = [
        v0(c, "INFO", "api_server.py:495", "vLLM API server version 0.6.1.post2"),
        v0(c, "INFO", "api_server.py:496", v0_namespace("mistralai/Mistral-Nemo-Instruct-2407", max_len=16384, util=0.95, seqs=256, tp=2)),
        v0(c, "INFO", "llm_engine.py:232", v0_config("0.6.1.post2", "mistralai/Mistral-Nemo-Instruct-2407", "bfloat16", 16384, 2), step=2),
        v0(c, "INFO", "multiproc_worker_utils.py:215", "Worker ready; awaiting tasks", proc=W1, step=3),
        v0(c, "INFO", "model_runner.py:997", "Starting to load model mistralai/Mistral-Nemo-Instruct-2407..."),
        v0(c, "INFO", "model_runner.py:997", "Starting to load model mistralai/Mistral-Nemo-Instruct-2407...", proc=W1),
        v0(c, "INFO", "model_runner.py:1008", "Loading model weights took 11.4376 GB", step=14),
        v0(c, "INFO", "model_runner.py:1008", "Loading model weights took 11.4376 GB", proc=W1),
        v0(c, "INFO", "distributed_gpu_executor.py:57", "# GPU blocks: 9283, # CPU blocks: 3276", step=5),
        v0(c, "INFO", "model_runner.py:1311", "Capturing the model for CUDA graphs. This may lead to unexpected consequences if the model is not static. To run the model in eager mode, set 'enforce_eager=True' or use '--enforce-eager' in the CLI.", step=2),
        v0(c, "INFO", "model_runner.py:1315", "CUDA graphs can take additional 1~3 GiB memory per GPU. If you are running out of memory, consider decreasing `gpu_memory_utilization` or enforcing eager mode. You can also reduce the `max_num_seqs` as needed to decrease memory usage."),
        v0(c, "INFO", "model_runner.py:1311", "Capturing the model for CUDA graphs. This may lead to unexpected consequences if the model is not static. To run the model in eager mode, set 'enforce_eager=True' or use '--enforce-eager' in the CLI.", proc=W1),
    ]
    cap_frames = [
        (f"{SITE310}/vllm/executor/multiproc_worker_utils.py", 223, "_run_worker_process", "output = executor(*args, **kwargs)"),
        (f"{SITE310}/vllm/worker/worker.py", 282, "_warm_up_model", "self.model_runner.capture_model(self.gpu_cache)"),
        (f"{SITE310}/vllm/worker/model_runner.py", 1407, "capture_model", "graph_runner.capture(**capture_inputs)"),
        (f"{SITE310}/vllm/worker/model_runner.py", 1662, "capture", "self.model("),
        (f"{SITE310}/vllm/model_executor/models/llama.py", 433, "forward", "model_output = self.model(input_ids, positions, kv_caches,"),
    ]
    c.tick(9)
    oom1 = torch_oom("224.00 MiB", 1, "23.64 GiB", "98.44 MiB", "22.61 GiB", "156.25 MiB", self_used="23.53 GiB", private="612.00 MiB")
    L.append(v0(c, "ERROR", "multiproc_worker_utils.py:226", "Exception in worker VllmWorkerProcess while processing method initialize_cache.", proc=W1))
    for l in frames(cap_frames) + [oom1]:
        L.append(v0(c, "ERROR", "multiproc_worker_utils.py:226", l, proc=W1))
    oom0 = torch_oom("224.00 MiB", 0, "23.64 GiB", "112.44 MiB", "22.60 GiB", "150.19 MiB", self_used="23.52 GiB", private="612.00 MiB")
    L += frames([(f"{SITE310}/vllm/entrypoints/openai/api_server.py", 571, "<module>", "uvloop.run(run_server(args))")] + cap_frames[1:]) + [oom0]
    L.append("ERROR 10-07 16:21:05 multiproc_worker_utils.py:120] Worker VllmWorkerProcess pid 2203 died, exit code: -15")
    write("vllm-cuda-graph-oom", "fires-v0-capture-tp2.log", L)

    # Near miss: graphs captured fine, the OOM comes later while serving.
    vllm_serving_v1(write_to=("vllm-cuda-graph-oom", "near-miss-oom-after-capture-while-serving.log"), compact=True)


def vllm_serving_v1(write_to=None, compact=False):
    """V1 0.11 behind fluent-bit: one JSON record per line, the traceback packed into one."""
    c = Clock(9, 28, 15, 40, 0)
    E = "EngineCore_DP0 pid=17374"
    A = "APIServer pid=17305"

    def rec(line):
        c.tick(rng.randint(0, 1))
        esc = line.replace("\\", "\\\\").replace('"', '\\"')
        return ('{"log":"' + esc + '\\n","stream":"stderr","time":"' + c.iso() + '","kubernetes":{"pod_name":"vllm-llama70b-7c9d5","namespace_name":"inference","container_name":"vllm"}}')

    lines = [
        v1(c, A, "INFO", "api_server.py:1896", "vLLM API server version 0.11.0"),
        v1(c, A, "INFO", "utils.py:233", "non-default args: {'model_tag': 'meta-llama/Llama-3.3-70B-Instruct', 'model': 'meta-llama/Llama-3.3-70B-Instruct', 'max_model_len': 32768, 'tensor_parallel_size': 4, 'gpu_memory_utilization': 0.95, 'max_num_seqs': 512, 'max_num_batched_tokens': 16384}"),
        v1(c, E, "INFO", "core.py:77", v1_config("0.11.0", "meta-llama/Llama-3.3-70B-Instruct", "bfloat16", 32768, 4), step=6),
        v1(c, "Worker_TP0 pid=17401", "INFO", "gpu_model_runner.py:2653", "Model loading took 32.8918 GiB and 44.731201 seconds", step=45),
        v1(c, "Worker_TP0 pid=17401", "INFO", "gpu_worker.py:298", "Available KV cache memory: 38.45 GiB", step=20),
        v1(c, E, "INFO", "kv_cache_utils.py:1087", "GPU KV cache size: 503,936 tokens"),
        v1(c, E, "INFO", "kv_cache_utils.py:1091", "Maximum concurrency for 32,768 tokens per request: 15.38x"),
        v1(c, "Worker_TP0 pid=17401", "INFO", "gpu_model_runner.py:3480", "Graph capturing finished in 12 secs, took 1.10 GiB", step=12),
        v1(c, E, "INFO", "core.py:210", "init engine (profile, create kv cache, warmup model) took 71.22 seconds"),
        v1(c, A, "INFO", "api_server.py:1971", "Starting vLLM API server 0 on http://0.0.0.0:8000", step=1),
    ]
    for i in range(4 if compact else 9):
        lines += http_ok(3, c, proc=A)
        lines.append(v1(c, A, "INFO", "loggers.py:123", stats_v1(120 + i * 12, i * 3, 80.0 + i * 2.1), step=10))
    tb = [v1(c, E, "ERROR", "core.py:710", "EngineCore encountered a fatal error.")] + frames([
        (f"{SITE}/vllm/v1/engine/core.py", 701, "run_engine_core", "engine_core.run_busy_loop()"),
        (f"{SITE}/vllm/v1/engine/core.py", 728, "run_busy_loop", "self._process_engine_step()"),
        (f"{SITE}/vllm/v1/engine/core.py", 754, "_process_engine_step", "outputs, model_executed = self.step_fn()"),
        (f"{SITE}/vllm/v1/engine/core.py", 284, "step", "model_output = self.execute_model_with_error_logging("),
        (f"{SITE}/vllm/v1/executor/multiproc_executor.py", 243, "execute_model", "(output, ) = self.collective_rpc("),
        (f"{SITE}/vllm/v1/worker/gpu_model_runner.py", 2280, "execute_model", "sampler_output = self.sampler("),
        (f"{SITE}/vllm/v1/sample/sampler.py", 92, "forward", "logits = self.apply_logits_processors(logits, sampling_metadata)"),
    ]) + [torch_oom("2.32 GiB", 0, "79.19 GiB", "1.12 GiB", "74.20 GiB", "1.31 GiB", self_used="78.06 GiB", private="1.10 GiB")]
    packed = "\\n".join(l.replace("\\", "\\\\").replace('"', '\\"') for l in tb)
    out = [rec(l) for l in lines]
    c.tick(1)
    out.append('{"log":"' + packed + '\\n","stream":"stderr","time":"' + c.iso() + '","kubernetes":{"pod_name":"vllm-llama70b-7c9d5","namespace_name":"inference","container_name":"vllm"}}')
    out.append(rec(v1(c, A, "ERROR", "async_llm.py:480", "AsyncLLM output_handler failed.")))
    out.append(rec(f"({A}) vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause."))
    rule, name = write_to or ("vllm-serving-oom", "fires-v1-k8s-json-packed-traceback.log")
    write(rule, name, out)


def vllm_profiling():
    """V0 0.5.5 without chunked prefill: the profiling batch is max_model_len tokens."""
    c = Clock(9, 2, 9, 12, 0)
    L = [
        "python -m vllm.entrypoints.openai.api_server --model Qwen/Qwen2-7B-Instruct --max-model-len 32768 --enable-chunked-prefill False --port 8000",
        v0(c, "INFO", "api_server.py:440", "vLLM API server version 0.5.5", step=4),
        v0(c, "INFO", "api_server.py:441", v0_namespace("Qwen/Qwen2-7B-Instruct", max_len=32768, chunked="False")),
        v0(c, "INFO", "llm_engine.py:184", v0_config("0.5.5", "Qwen/Qwen2-7B-Instruct", "bfloat16", 32768, 1), step=2),
        v0(c, "INFO", "model_runner.py:879", "Starting to load model Qwen/Qwen2-7B-Instruct...", step=1),
        v0(c, "INFO", "model_runner.py:890", "Loading model weights took 14.2487 GB", step=12),
    ]
    L += frames([
        (f"{SITE310}/vllm/entrypoints/openai/api_server.py", 476, "<module>", "asyncio.run(run_server(args))"),
        (f"{SITE310}/vllm/engine/llm_engine.py", 279, "__init__", "self._initialize_kv_caches()"),
        (f"{SITE310}/vllm/engine/llm_engine.py", 378, "_initialize_kv_caches", "self.model_executor.determine_num_available_blocks())"),
        (f"{SITE310}/vllm/worker/worker.py", 179, "determine_num_available_blocks", "self.model_runner.profile_run()"),
        (f"{SITE310}/vllm/worker/model_runner.py", 1068, "profile_run", "self.execute_model(model_input, kv_caches, intermediate_tensors)"),
        (f"{SITE310}/vllm/worker/model_runner.py", 1450, "execute_model", "hidden_or_intermediate_states = model_executable("),
        (f"{SITE310}/vllm/model_executor/models/qwen2.py", 241, "forward", "hidden_states, residual = layer("),
        (f"{SITE310}/vllm/model_executor/layers/activation.py", 36, "forward_cuda", "out = torch.empty(output_shape, dtype=x.dtype, device=x.device)"),
    ])
    L.append(torch_oom("2.32 GiB", 0, "22.19 GiB", "1.64 GiB", "19.83 GiB", "221.31 MiB", self_used="20.54 GiB", exc="torch.OutOfMemoryError"))
    write("vllm-profiling-oom", "fires-v0-32k-without-chunked-prefill.log", L)
    write("vllm-serving-oom", "near-miss-oom-in-startup-profiling.log", L)

    # Near miss for profiling: the sampler warm-up, which has its own rule.
    vllm_sampler(("vllm-profiling-oom", "near-miss-sampler-warmup.log"), seqs=512, vocab_gib="2.31 GiB")


def vllm_sampler(write_to=None, seqs=1024, vocab_gib="1.16 GiB"):
    c = Clock(6, 30, 13, 53, 0)
    E = "EngineCore_0 pid=3120"
    L = [
        f"$ vllm serve Qwen/Qwen3-8B --max-num-seqs {seqs} --gpu-memory-utilization 0.92 --max-model-len 32768",
        v1(c, "APIServer pid=3088", "INFO", "api_server.py:1395", "vLLM API server version 0.9.1", step=2),
        v1(c, "APIServer pid=3088", "INFO", "cli_args.py:325", f"non-default args: {{'model_tag': 'Qwen/Qwen3-8B', 'model': 'Qwen/Qwen3-8B', 'max_model_len': 32768, 'gpu_memory_utilization': 0.92, 'max_num_seqs': {seqs}}}"),
        v1(c, E, "INFO", "core.py:69", v1_config("0.9.1", "Qwen/Qwen3-8B", "bfloat16", 32768, 1), step=5),
        v1(c, E, "INFO", "gpu_model_runner.py:1600", "Model loading took 15.2683 GiB and 7.118801 seconds", step=9),
    ]
    fr = frames([
        (f"{SITE}/vllm/v1/engine/core.py", 506, "run_engine_core", "engine_core = EngineCoreProc(*args, **kwargs)"),
        (f"{SITE}/vllm/v1/engine/core.py", 143, "_initialize_kv_caches", "available_gpu_memory = self.model_executor.determine_available_memory()"),
        (f"{SITE}/vllm/v1/worker/gpu_worker.py", 203, "determine_available_memory", "self.model_runner.profile_run()"),
        (f"{SITE}/vllm/v1/worker/gpu_model_runner.py", 2005, "profile_run", "sampler_output = self._dummy_sampler_run(hidden_states)"),
        (f"{SITE}/vllm/v1/worker/gpu_model_runner.py", 1902, "_dummy_sampler_run", "sampler_output = self.sampler(logits=logits,"),
        (f"{SITE}/vllm/v1/sample/ops/topk_topp_sampler.py", 179, "apply_top_k_top_p", "logits_sort, logits_idx = logits.sort(dim=-1, descending=False)"),
    ])
    L.append(v1(c, E, "ERROR", "core.py:515", "EngineCore failed to start.", step=6))
    body = fr + [torch_oom(vocab_gib, 0, "44.52 GiB", "887.81 MiB", "41.92 GiB", "1.03 GiB", self_used="43.65 GiB"),
                 "",
                 "The above exception was the direct cause of the following exception:",
                 ""] + frames([
        (f"{SITE}/vllm/v1/worker/gpu_model_runner.py", 1910, "_dummy_sampler_run", "raise RuntimeError("),
    ]) + [f"RuntimeError: CUDA out of memory occurred when warming up sampler with {seqs} dummy requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine."]
    for l in body:
        L.append(v1(c, E, "ERROR", "core.py:515", l))
    L += api_server_died(c)
    rule, name = write_to or ("vllm-sampler-warmup-oom", "fires-v1-1024-seqs.log")
    write(rule, name, L)


def vllm_sampler_near_miss():
    """A profiling-run OOM in V1 (no sampler message)."""
    c = Clock(7, 11, 10, 0, 0)
    E = "EngineCore_0 pid=901"
    L = [
        v1(c, "APIServer pid=860", "INFO", "api_server.py:1395", "vLLM API server version 0.10.0"),
        v1(c, "APIServer pid=860", "INFO", "cli_args.py:261", "non-default args: {'model': 'Qwen/Qwen2.5-VL-7B-Instruct', 'max_model_len': 32768, 'max_num_batched_tokens': 32768, 'limit_mm_per_prompt': {'image': 8}}"),
        v1(c, E, "INFO", "core.py:69", v1_config("0.10.0", "Qwen/Qwen2.5-VL-7B-Instruct", "bfloat16", 32768, 1), step=5),
        v1(c, E, "INFO", "gpu_model_runner.py:1843", "Model loading took 15.6271 GiB and 8.221132 seconds", step=9),
        v1(c, E, "INFO", "gpu_model_runner.py:2326", "Encoder cache will be initialized with a budget of 32768 tokens, and profiled with 8 image items of the maximum feature size.", step=2),
        v1(c, E, "ERROR", "core.py:632", "EngineCore failed to start.", step=4),
    ]
    for l in frames([
        (f"{SITE}/vllm/v1/engine/core.py", 623, "run_engine_core", "engine_core = EngineCoreProc(*args, **kwargs)"),
        (f"{SITE}/vllm/v1/worker/gpu_worker.py", 230, "determine_available_memory", "self.model_runner.profile_run()"),
        (f"{SITE}/vllm/v1/worker/gpu_model_runner.py", 2346, "profile_run", "dummy_encoder_outputs = self.model.get_multimodal_embeddings("),
        (f"{SITE}/vllm/model_executor/models/qwen2_5_vl.py", 1001, "forward", "attn_output = self.attn(x)"),
    ]) + [torch_oom("3.78 GiB", 0, "23.52 GiB", "2.31 GiB", "20.46 GiB", "312.00 MiB", self_used="21.19 GiB")]:
        L.append(v1(c, E, "ERROR", "core.py:632", l))
    L += api_server_died(c)
    write("vllm-sampler-warmup-oom", "near-miss-multimodal-profile-run.log", L)


def vllm_weights():
    c = Clock(2, 17, 14, 4, 0, 2026)
    L = [
        "$ vllm serve meta-llama/Llama-3.3-70B-Instruct -tp 2 --max-model-len 16384",
        v1(c, "APIServer pid=7301", "INFO", "utils.py:299", "vLLM API server version 0.20.1", step=2),
        v1(c, "APIServer pid=7301", "INFO", "utils.py:233", "non-default args: {'model_tag': 'meta-llama/Llama-3.3-70B-Instruct', 'model': 'meta-llama/Llama-3.3-70B-Instruct', 'max_model_len': 16384, 'tensor_parallel_size': 2}"),
        v1(c, "EngineCore pid=7390", "INFO", "core.py:93", v1_config("0.20.1", "meta-llama/Llama-3.3-70B-Instruct", "bfloat16", 16384, 2), step=5),
    ]
    for r in (0, 1):
        L.append(v1(c, f"Worker_TP{r} pid={7420 + r}", "INFO", "gpu_model_runner.py:3120", "Starting to load model meta-llama/Llama-3.3-70B-Instruct...", step=2))
    for r in (1, 0):
        W = f"Worker_TP{r} pid={7420 + r}"
        oom = torch_oom("448.00 MiB", r, "44.52 GiB", f"{211.69 - r * 12:.2f} MiB", "43.81 GiB", "14.62 MiB", self_used="44.30 GiB").split("torch.OutOfMemoryError: ", 1)[1]
        L.append(v1(c, W, "ERROR", "gpu_model_runner.py:3175", "Failed to load model - not enough GPU memory. Try lowering --gpu-memory-utilization to free memory for weights, increasing --tensor-parallel-size, or using --quantization. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more tips. (original error: " + oom + ")", step=38))
        for l in frames([
            (f"{SITE}/vllm/v1/executor/multiproc_executor.py", 702, "worker_main", "worker = WorkerProc(*args, **kwargs)"),
            (f"{SITE}/vllm/v1/worker/gpu_worker.py", 265, "load_model", "self.model_runner.load_model(eep_scale_up=eep_scale_up)"),
            (f"{SITE}/vllm/v1/worker/gpu_model_runner.py", 3160, "load_model", "self.model = model_loader.load_model("),
            (f"{SITE}/vllm/model_executor/model_loader/base_loader.py", 56, "load_model", "self.load_weights(model, model_config)"),
            (f"{SITE}/vllm/model_executor/models/llama.py", 612, "load_weights", "param = params_dict[name]"),
        ]) + ["torch.OutOfMemoryError: " + oom]:
            L.append(v1(c, W, "ERROR", "multiproc_executor.py:708", l))
    L.append(v1(c, "EngineCore pid=7390", "ERROR", "core.py:1224", "EngineCore failed to start.", step=1))
    L.append(v1(c, "EngineCore pid=7390", "ERROR", "core.py:1224", "RuntimeError: WorkerProc initialization failed due to an exception in a background process. See stack trace for root cause."))
    L += api_server_died(c)
    write("vllm-weights-dont-fit", "fires-v1-70b-tp2-load-oom.log", L)
    # Near miss: the weights loaded; it is the KV cache that does not fit.
    write("vllm-weights-dont-fit", "near-miss-loaded-then-kv-short.log",
          open(os.path.join(HERE, "vllm-max-model-len-exceeds-kv", "fires-v1-131k-on-24g.log"), encoding="utf-8").read().splitlines())


def vllm_preemption():
    c = Clock(11, 5, 22, 10, 0)
    L = [
        v0(c, "INFO", "api_server.py:528", "vLLM API server version 0.6.4.post1"),
        v0(c, "INFO", "api_server.py:529", v0_namespace("meta-llama/Llama-3.1-8B-Instruct", max_len=16384, seqs=256)),
        v0(c, "INFO", "llm_engine.py:237", v0_config("0.6.4.post1", "meta-llama/Llama-3.1-8B-Instruct", "bfloat16", 16384, 1), step=2),
        v0(c, "INFO", "model_runner.py:1077", "Loading model weights took 14.9888 GB", step=9),
        v0(c, "INFO", "worker.py:232", "Memory profiling results: total_gpu_memory=23.64GiB initial_memory_usage=15.32GiB peak_torch_memory=16.52GiB memory_usage_post_profile=15.41GiB non_torch_memory=0.41GiB kv_cache_size=4.35GiB gpu_memory_utilization=0.90", step=3),
        v0(c, "INFO", "gpu_executor.py:113", "# GPU blocks: 2227, # CPU blocks: 2048"),
        v0(c, "INFO", "gpu_executor.py:117", "Maximum concurrency for 16384 tokens per request: 2.17x"),
        v0(c, "INFO", "model_runner.py:1400", "Capturing cudagraphs for decoding. This may lead to unexpected consequences if the model is not static. To run the model in eager mode, set 'enforce_eager=True' or use '--enforce-eager' in the CLI.", step=1),
        v0(c, "INFO", "model_runner.py:1518", "Graph capturing finished in 11 secs, took 0.52 GiB", step=11),
        v0(c, "INFO", "api_server.py:590", "Starting vLLM API server on http://0.0.0.0:8000", step=1),
    ]
    n = 1
    running = 40
    for block in range(16):
        running = min(256, running + rng.randint(4, 14))
        kv = min(99.9, 60.0 + block * 3.1)
        L += [l.replace("(APIServer pid=1) ", "") for l in http_ok(rng.randint(2, 4), c)]
        L.append(v0(c, "INFO", "metrics.py:349", stats_v0(running, max(0, block * 4 - 20), kv), step=5))
        if block in (7, 10, 12, 14):
            L.append(v0(c, "WARNING", "scheduler.py:1481", f"Sequence group chatcmpl-{rng.getrandbits(64):016x} is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption={n}"))
            n += 50
    write("vllm-preemption-storm", "fires-v0-preemption-warnings.log", L)

    L2 = L[:10]
    for block in range(6):
        L2 += [l.replace("(APIServer pid=1) ", "") for l in http_ok(3, c)]
        L2.append(v0(c, "INFO", "metrics.py:349", stats_v0(30 + block, 0, 40.0 + block), step=5))
        if block == 3:
            L2.append(v0(c, "WARNING", "scheduler.py:1481", "Sequence group chatcmpl-0d9a77e1c2b34f6e is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption=1"))
    write("vllm-preemption-storm", "not-oom-one-preemption.log", L2)


def vllm_restarts_different():
    """Three starts with three different failures: three incidents."""
    c = Clock(4, 8, 9, 0, 0, 2026)
    E = "EngineCore_0 pid=611"
    L = []
    # 1: another process holds the card.
    L += [
        v1(c, "APIServer pid=1", "INFO", "api_server.py:1395", "vLLM API server version 0.10.1.1"),
        v1(c, "APIServer pid=1", "INFO", "utils.py:326", "non-default args: {'model': 'Qwen/Qwen2.5-14B-Instruct', 'max_model_len': 32768}"),
        v1(c, E, "INFO", "core.py:74", v1_config("0.10.1.1", "Qwen/Qwen2.5-14B-Instruct", "bfloat16", 32768, 1), step=4),
        v1(c, E, "ERROR", "core.py:700", "EngineCore failed to start."),
        v1(c, E, "ERROR", "core.py:700", "ValueError: Free memory on device (30.12/44.52 GiB) on startup is less than desired GPU memory utilization (0.9, 40.07 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."),
    ] + api_server_died(c)
    # 2: lowered to 0.65: now the KV cache is short of 32k tokens.
    L += [
        v1(c, "APIServer pid=1", "INFO", "api_server.py:1395", "vLLM API server version 0.10.1.1", step=60),
        v1(c, "APIServer pid=1", "INFO", "utils.py:326", "non-default args: {'model': 'Qwen/Qwen2.5-14B-Instruct', 'max_model_len': 32768, 'gpu_memory_utilization': 0.65}"),
        v1(c, E, "INFO", "core.py:74", v1_config("0.10.1.1", "Qwen/Qwen2.5-14B-Instruct", "bfloat16", 32768, 1), step=4),
        v1(c, E, "INFO", "gpu_model_runner.py:2007", "Model loading took 27.6592 GiB and 12.100221 seconds", step=12),
        v1(c, E, "INFO", "gpu_worker.py:276", "Available KV cache memory: 0.82 GiB", step=9),
        v1(c, E, "ERROR", "core.py:700", "EngineCore failed to start."),
        v1(c, E, "ERROR", "core.py:700", "ValueError: To serve at least one request with the models's max seq len (32768), (6.00 GiB KV cache is needed, which is larger than the available KV cache memory (0.82 GiB). Based on the available memory, the estimated maximum model length is 4464. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."),
    ] + api_server_died(c)
    # 3: the other process is gone, the server starts and later runs out while serving.
    L += [
        v1(c, "APIServer pid=1", "INFO", "api_server.py:1395", "vLLM API server version 0.10.1.1", step=300),
        v1(c, "APIServer pid=1", "INFO", "utils.py:326", "non-default args: {'model': 'Qwen/Qwen2.5-14B-Instruct', 'max_model_len': 32768, 'max_num_seqs': 512}"),
        v1(c, E, "INFO", "core.py:74", v1_config("0.10.1.1", "Qwen/Qwen2.5-14B-Instruct", "bfloat16", 32768, 1), step=4),
        v1(c, E, "INFO", "gpu_model_runner.py:2007", "Model loading took 27.6592 GiB and 12.100221 seconds", step=12),
        v1(c, E, "INFO", "gpu_worker.py:276", "Available KV cache memory: 9.37 GiB", step=9),
        v1(c, E, "INFO", "kv_cache_utils.py:849", "GPU KV cache size: 51,168 tokens"),
        v1(c, E, "INFO", "core.py:214", "init engine (profile, create kv cache, warmup model) took 61.32 seconds", step=20),
    ]
    for i in range(5):
        L += http_ok(4, c)
        L.append(v1(c, "APIServer pid=1", "INFO", "loggers.py:123", stats_v1(180 + i * 20, 12, 91.0 + i), step=10))
    L.append(v1(c, E, "ERROR", "core.py:710", "EngineCore encountered a fatal error."))
    for l in frames([
        (f"{SITE}/vllm/v1/engine/core.py", 701, "run_engine_core", "engine_core.run_busy_loop()"),
        (f"{SITE}/vllm/v1/worker/gpu_model_runner.py", 1683, "execute_model", "logits = self.model.compute_logits(sample_hidden_states, None)"),
    ]) + [torch_oom("1.47 GiB", 0, "44.52 GiB", "615.44 MiB", "42.10 GiB", "488.12 MiB", self_used="43.91 GiB")]:
        L.append(v1(c, E, "ERROR", "core.py:710", l))
    write(None, "vllm-three-restarts-different-errors.log", L, root=ENGINES)


# =====================================================================================
# SGLang
# =====================================================================================

def sg(c, msg, tp=0, dp=None, step=0):
    c.tick(step)
    who = (f"DP{dp} " if dp is not None else "") + f"TP{tp}"
    return f"[{c.sglang()} {who}] {msg}"


def server_args(model, frac, tp=1, chunked=8192, max_bs=None, ctx="None", kv="auto", compile_=False, running="None"):
    bs = f"cuda_graph_max_bs={max_bs}, " if max_bs is not None else "cuda_graph_max_bs=None, "
    return (f"server_args=ServerArgs(model_path='{model}', tokenizer_path='{model}', tokenizer_mode='auto', skip_tokenizer_init=False, "
            f"load_format='auto', trust_remote_code=False, dtype='auto', kv_cache_dtype='{kv}', quantization=None, context_length={ctx}, "
            f"device='cuda', served_model_name='{model}', chat_template=None, is_embedding=False, revision=None, host='0.0.0.0', port=30000, "
            f"mem_fraction_static={frac}, max_running_requests={running}, max_total_tokens=None, chunked_prefill_size={chunked}, "
            f"max_prefill_tokens=16384, schedule_policy='fcfs', schedule_conservativeness=1.0, cpu_offload_gb=0, page_size=1, tp_size={tp}, "
            f"stream_interval=1, random_seed={rng.randint(10**8, 10**9)}, log_level='info', dp_size=1, load_balance_method='round_robin', "
            f"attention_backend='flashinfer', sampling_backend='flashinfer', disable_radix_cache=False, {bs}disable_cuda_graph=False, "
            f"enable_torch_compile={compile_}, torch_compile_max_bs=32)")


SG = f"{SITE}/sglang/srt"
SG_INIT = [
    (f"{SG}/managers/scheduler.py", 1748, "run_scheduler_process", "scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)"),
    (f"{SG}/managers/scheduler.py", 218, "__init__", "self.tp_worker = TpWorkerClass("),
    (f"{SG}/managers/tp_worker.py", 74, "__init__", "self.model_runner = ModelRunner("),
    (f"{SG}/model_executor/model_runner.py", 166, "__init__", "self.initialize(min_per_gpu_memory)"),
]


def sglang_not_enough():
    c = Clock(3, 12, 10, 2, 0)
    L = [
        "python3 -m sglang.launch_server --model-path google/gemma-2-9b-it --mem-fraction-static 0.6 --port 30000",
        f"[{c.sglang()}] " + server_args("google/gemma-2-9b-it", 0.6),
        sg(c, "Attention backend not set. Use flashinfer backend by default.", step=3),
        sg(c, "Init torch distributed begin."),
        sg(c, "Load weight begin. avail mem=23.18 GB", step=2),
        sg(c, "Using model weights format ['*.safetensors']"),
        sg(c, "Load weight end. type=Gemma2ForCausalLM, dtype=torch.bfloat16, avail mem=5.86 GB, mem usage=17.32 GB.", step=14),
        sg(c, "Scheduler hit an exception: Traceback (most recent call last):", step=1),
    ]
    L += frames(SG_INIT + [
        (f"{SG}/model_executor/model_runner.py", 205, "initialize", "self.init_memory_pool("),
        (f"{SG}/model_executor/model_runner.py", 730, "init_memory_pool", "raise RuntimeError("),
    ])[1:]
    L.append("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.")
    L += ["", "[2025-03-12 10:02:21] Received sigquit from a child process. It usually means the child failed."]
    write("sglang-not-enough-memory", "fires-fraction-lowered-to-0.6.log", L)

    # 0.5.2x: the weights nearly fill the card; SGLang computes the minimum itself.
    c = Clock(1, 20, 8, 0, 0, 2026)
    L = [
        "sglang serve --model-path Qwen/Qwen2.5-72B-Instruct-AWQ --tp-size 1 --mem-fraction-static 0.88 --context-length 32768",
        f"[{c.sglang()}] " + server_args("Qwen/Qwen2.5-72B-Instruct-AWQ", 0.88, ctx=32768),
        sg(c, "Load weight begin. avail mem=43.91 GB", step=4),
        sg(c, "Load weight end. type=Qwen2ForCausalLM, dtype=torch.float16, avail mem=2.58 GB, mem usage=41.33 GB.", step=40),
        sg(c, "Scheduler hit an exception: Traceback (most recent call last):", step=1),
    ]
    L += frames(SG_INIT + [(f"{SG}/model_executor/pool_configurator.py", 212, "configure", "raise RuntimeError(")])[1:]
    L.append("RuntimeError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.88. Raise --mem-fraction-static above 0.962 (minimum viable = 1 - available/pre = 0.9412). If using speculative decoding, draft weights are now counted.")
    write("sglang-not-enough-memory", "fires-72b-awq-fills-48g.log", L)

    # Only the command and the error were pasted.
    L = [
        "python -m sglang.launch_server --model-path mistralai/Mistral-7B-Instruct-v0.2 --port 30000 --mem-fraction-static 0.7",
        "Process Process-1:",
        "router init state: Traceback (most recent call last):",
        f'  File "{SITE310}/sglang/srt/managers/router/manager.py", line 68, in start_router_process',
        "    model_client = ModelRpcClient(server_args, port_args)",
        f'  File "{SITE310}/sglang/srt/managers/router/model_runner.py", line 244, in init_memory_pool',
        '    raise RuntimeError(',
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    ]
    write("sglang-not-enough-memory", "fires-only-command-and-error.log", L)


def sglang_graph(frac=0.92, write_to=None):
    c = Clock(4, 3, 15, 30, 0)
    L = [
        "docker run --gpus all --shm-size 32g -p 30000:30000 --ipc=host lmsysorg/sglang:v0.4.6.post5-cu124 python3 -m sglang.launch_server "
        f"--model-path meta-llama/Llama-3.3-70B-Instruct --tp 2 --mem-fraction-static {frac} --cuda-graph-max-bs 256 --host 0.0.0.0",
        f"[{c.sglang()}] " + server_args("meta-llama/Llama-3.3-70B-Instruct", frac, tp=2, max_bs=256),
    ]
    for tp in (0, 1):
        L.append(sg(c, "Load weight begin. avail mem=78.52 GB", tp=tp, step=2))
    for tp in (1, 0):
        L.append(sg(c, "Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=45.31 GB, mem usage=33.21 GB.", tp=tp, step=30))
    for tp in (0, 1):
        L.append(sg(c, "KV Cache is allocated. #tokens: 401522, K size: 19.15 GB, V size: 19.15 GB", tp=tp, step=1))
        L.append(sg(c, "Memory pool end. avail mem=6.91 GB", tp=tp))
    L.append(sg(c, "max_total_num_tokens=401522, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=4097, context_len=131072"))
    for tp in (0, 1):
        L.append(sg(c, "Capture cuda graph begin. This can take up to several minutes. avail mem=6.38 GB", tp=tp, step=1))
    for tp in (1, 0):
        L.append(sg(c, "Scheduler hit an exception: Traceback (most recent call last):", tp=tp, step=19))
        L += frames(SG_INIT + [
            (f"{SG}/model_executor/model_runner.py", 934, "init_cuda_graphs", "self.cuda_graph_runner = CudaGraphRunner(self)"),
            (f"{SG}/model_executor/cuda_graph_runner.py", 269, "__init__", "raise Exception("),
        ])[1:]
        L.append("Exception: Capture cuda graph failed: " + torch_oom("896.00 MiB", tp, "79.15 GiB", "412.00 MiB", "77.02 GiB", "212.00 MiB", self_used="78.74 GiB").split(": ", 1)[1].split(" If reserved")[0])
        L += [
            "Possible solutions:",
            "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
            "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)",
            "3. disable torch compile by not using --enable-torch-compile",
            "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)",
            "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose ",
            "",
        ]
    L.append(f"[{c.sglang()}] Received sigquit from a child process. It usually means the child failed.")
    rule, name = write_to or ("sglang-cuda-graph-oom", "fires-70b-tp2-capture.log")
    write(rule, name, L)


def sglang_graph_near_miss():
    c = Clock(4, 4, 9, 0, 0)
    L = [
        f"[{c.sglang()}] " + server_args("Qwen/Qwen2.5-32B-Instruct", 0.85, tp=4),
    ]
    for tp in range(4):
        L.append(sg(c, "Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=60.11 GB, mem usage=15.62 GB.", tp=tp, step=10))
    L.append(sg(c, "Capture cuda graph begin. This can take up to several minutes. avail mem=10.20 GB", step=3))
    L.append(sg(c, "Scheduler hit an exception: Traceback (most recent call last):", tp=2, step=2))
    L += frames(SG_INIT + [
        (f"{SG}/model_executor/cuda_graph_runner.py", 239, "__init__", "raise Exception("),
    ])[1:]
    L.append("Exception: Capture cuda graph failed: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.12]:2331")
    L += ["Possible solutions:", "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)", "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)"]
    write("sglang-cuda-graph-oom", "not-oom-capture-failed-not-oom.log", L)


def sglang_runtime():
    c = Clock(5, 19, 11, 0, 0)
    L = [
        f"[{c.sglang()}] " + server_args("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", 0.9, tp=2, chunked=8192),
        sg(c, "Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=48.10 GB, mem usage=30.70 GB.", step=30),
        sg(c, "KV Cache is allocated. #tokens: 360314, K size: 22.00 GB, V size: 22.00 GB", step=1),
        sg(c, "Memory pool end. avail mem=4.81 GB"),
        sg(c, "max_total_num_tokens=360314, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=2049, context_len=131072"),
        sg(c, "Capture cuda graph begin. This can take up to several minutes. avail mem=4.59 GB"),
        sg(c, "Capture cuda graph end. Time elapsed: 21.39 s. mem usage=0.96 GB. avail mem=3.63 GB.", step=21),
        f"[{c.sglang()}] INFO:     Started server process [1]",
        f"[{c.sglang()}] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
        f"[{c.sglang()}] The server is fired up and ready to roll!",
    ]
    running = 8
    for i in range(14):
        running = min(300, running + rng.randint(6, 25))
        c.tick(4)
        L.append(sg(c, f"Prefill batch. #new-seq: {rng.randint(1, 6)}, #new-token: {rng.randint(2000, 8192)}, #cached-token: {rng.randint(0, 4000)}, token usage: {0.3 + i * 0.04:.2f}, #running-req: {running}, #queue-req: {max(0, i - 8)}"))
        L.append(sg(c, f"Decode batch. #running-req: {running}, #token: {int(360314 * (0.3 + i * 0.04))}, token usage: {0.3 + i * 0.04:.2f}, cuda graph: False, gen throughput (token/s): {rng.uniform(1500, 3000):.2f}, #queue-req: {max(0, i - 8)}"))
    L.append(sg(c, "Scheduler hit an exception: Traceback (most recent call last):", step=1))
    L += frames([
        (f"{SG}/managers/scheduler.py", 2311, "run_scheduler_process", "scheduler.event_loop_overlap()"),
        (f"{SG}/managers/scheduler.py", 661, "event_loop_overlap", "result = self.run_batch(batch)"),
        (f"{SG}/managers/scheduler.py", 1535, "run_batch", ") = self.tp_worker.forward_batch_generation(model_worker_batch)"),
        (f"{SG}/managers/tp_worker.py", 210, "forward_batch_generation", "logits_output = self.model_runner.forward(forward_batch)"),
        (f"{SG}/layers/logits_processor.py", 305, "forward", "logits = torch.matmul(hidden_states, lm_head.weight.T)"),
    ])[1:]
    L.append(torch_oom("2.90 GiB", 0, "79.15 GiB", "1.74 GiB", "75.11 GiB", "0.98 GiB", self_used="77.41 GiB"))
    write("sglang-runtime-oom", "fires-decode-oom-while-serving.log", L)


def sglang_retract(storm=True):
    c = Clock(1, 22, 17, 0, 0, 2026)
    L = [
        f"[{c.sglang()}] " + server_args("Qwen/Qwen3-30B-A3B", 0.85, tp=1, running=256),
        sg(c, "Load weight begin. avail mem=78.91 GB", step=2),
        sg(c, "Load weight end. type=Qwen3MoeForCausalLM, dtype=torch.bfloat16, avail mem=21.42 GB, mem usage=57.49 GB.", step=30),
        sg(c, "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 108544, K size: 4.97 GB, V size: 4.97 GB", step=1),
        sg(c, "Memory pool end. avail mem=10.71 GB"),
        sg(c, "max_total_num_tokens=108544, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=256, context_len=40960, available_gpu_mem=10.71 GB"),
        sg(c, "Capture cuda graph begin. This can take up to several minutes. avail mem=10.52 GB"),
        sg(c, "Capture cuda graph end. Time elapsed: 18.20 s. mem usage=1.14 GB. avail mem=9.38 GB.", step=18),
        f"[{c.sglang()}] The server is fired up and ready to roll!",
    ]
    running = 60
    for i in range(18):
        c.tick(3)
        running = min(256, running + rng.randint(3, 12))
        usage = min(0.99, 0.6 + i * 0.03)
        L.append(sg(c, f"Decode batch[{1200 + i * 40}], #running-req: {running}, #token: {int(108544 * usage)}, token usage: {usage:.2f}, cuda graph: True, gen throughput (token/s): {rng.uniform(2500, 4200):.2f}, #queue-req: {max(0, i * 3 - 10)}"))
        if (storm and i >= 9 and i % 2 == 1) or (not storm and i == 13):
            n = rng.randint(2, 9) if storm else 1
            L.append(sg(c, f"KV cache pool is full. Retract requests. #retracted_reqs: {n}, #new_tokens_gained: {n * rng.randint(300, 900)}, #new_token_ratio: 0.{rng.randint(3000, 5000)} -> 0.{rng.randint(5000, 7000)}"))
            running -= n
    name = "fires-kv-pool-full-retract-storm.log" if storm else "not-oom-one-retraction.log"
    write("sglang-retraction-storm", name, L)


def sglang_pool():
    c = Clock(9, 13, 9, 0, 0)
    L = [
        f"[{c.sglang()}] " + server_args("Qwen/Qwen2.5-7B-Instruct-FP8", 0.7, tp=4, chunked=8192, running=64),
        sg(c, "max_total_num_tokens=94210, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=64, context_len=32768", step=40),
        f"[{c.sglang()}] The server is fired up and ready to roll!",
    ]
    for i in range(6):
        c.tick(5)
        L.append(sg(c, f"Decode batch. #running-req: {20 + i}, #token: {40000 + i * 7000}, token usage: {0.45 + i * 0.08:.2f}, cuda graph: True, gen throughput (token/s): {rng.uniform(300, 600):.2f}, #queue-req: {i}"))
    packed = "\\n".join([
        "Scheduler hit an exception: Traceback (most recent call last):",
        f'  File "{SG}/managers/scheduler.py", line 2344, in run_scheduler_process',
        "    scheduler.event_loop_overlap()",
        f'  File "{SG}/managers/schedule_batch.py", line 1172, in prepare_for_extend',
        "    out_cache_loc = self.alloc_token_slots(extend_num_tokens)",
        f'  File "{SG}/managers/schedule_batch.py", line 908, in alloc_token_slots',
        "    raise RuntimeError(error_msg)",
        "RuntimeError: Prefill out of memory. Try to lower your batch size.",
        "Try to allocate 12288 tokens.",
        "Available tokens: 5011",
        "",
    ])
    c.tick(2)
    L.append(f"[{c.sglang()} TP0] {packed}")
    write("sglang-token-pool-exhausted", "fires-prefill-oom-packed-line.log", L)
    write("sglang-runtime-oom", "near-miss-token-pool-not-cuda.log", L)

    # Near miss: the pool's self-check (engine bug), not an OOM.
    L = L[:9] + [
        sg(c, "Scheduler hit an exception: Traceback (most recent call last):", step=1),
    ] + frames([
        (f"{SG}/managers/scheduler.py", 2344, "run_scheduler_process", "scheduler.event_loop_overlap()"),
        (f"{SG}/managers/scheduler.py", 1312, "check_memory", "raise ValueError(msg)"),
    ])[1:] + ["ValueError: token_to_kv_pool_allocator memory leak detected! available_size=94008, protected_size=0, self.max_total_num_tokens=94210"]
    write("sglang-token-pool-exhausted", "not-oom-pool-leak-self-check.log", L)


# =====================================================================================
# TGI
# =====================================================================================

TGI_ARGS = ("Args {{ model_id: \"{model}\", revision: None, validation_workers: 2, sharded: None, num_shard: {shards}, quantize: None, "
            "speculate: None, dtype: None, kv_cache_dtype: None, trust_remote_code: false, max_concurrent_requests: 128, max_best_of: 2, "
            "max_stop_sequences: 4, max_top_n_tokens: 5, max_input_tokens: {inp}, max_input_length: None, max_total_tokens: {tot}, "
            "waiting_served_ratio: 0.3, max_batch_prefill_tokens: {pre}, max_batch_total_tokens: None, max_waiting_tokens: 20, "
            "max_batch_size: None, cuda_graphs: None, hostname: \"0.0.0.0\", port: 80, shard_uds_path: \"/tmp/text-generation-server\", "
            "master_addr: \"localhost\", master_port: 29500, huggingface_hub_cache: None, weights_cache_override: None, disable_custom_kernels: false, "
            "cuda_memory_fraction: 1.0, rope_scaling: None, rope_factor: None, json_output: {json}, otlp_endpoint: None, otlp_service_name: "
            "\"text-generation-inference.router\", cors_allow_origin: [], api_key: None, watermark_gamma: None, watermark_delta: None, "
            "ngrok: false, ngrok_authtoken: None, ngrok_edge: None, tokenizer_config_path: None, disable_grammar_support: false, env: false, "
            "max_client_batch_size: 4, lora_adapters: None, usage_stats: On }}")

TGI_SRV = "/usr/src/server/text_generation_server"


def tgi_shard_traceback(oom):
    return frames([
        ("/opt/conda/bin/text-generation-server", 8, "<module>", "sys.exit(app())"),
        ("/opt/conda/lib/python3.11/site-packages/typer/main.py", 311, "__call__", "return get_command(self)(*args, **kwargs)"),
        (f"{TGI_SRV}/interceptor.py", 21, "intercept", "return await response"),
        (f"{TGI_SRV}/server.py", 125, "Warmup", "max_supported_total_tokens = self.model.warmup(batch)"),
        (f"{TGI_SRV}/models/flash_causal_lm.py", 1237, "warmup", "_, batch, _ = self.generate_token(batch)"),
        (f"{TGI_SRV}/models/flash_causal_lm.py", 1517, "generate_token", "out, speculative_logits = self.forward(batch, adapter_data)"),
        (f"{TGI_SRV}/layers/attention/cuda.py", 282, "attention", "out = torch.empty_like(q)"),
    ]) + [oom, "", "During handling of the above exception, another exception occurred:", ""] + frames([
        (f"{TGI_SRV}/models/flash_causal_lm.py", 1240, "warmup", "raise RuntimeError("),
    ])


def tgi_prefill():
    c = Clock(6, 17, 13, 18, 0, 2024)

    def t(level, target, msg, step=0):
        c.tick(step)
        return f"{c.iso()} {level:>5} {target}: {msg}"
    L = [
        "docker run --gpus all --shm-size 1g -p 8080:80 -v $PWD/data:/data ghcr.io/huggingface/text-generation-inference:2.0.4 --model-id mistralai/Mistral-7B-Instruct-v0.2 --max-input-tokens 8000 --max-total-tokens 8192 --max-batch-prefill-tokens 16384",
        t("INFO", "text_generation_launcher", TGI_ARGS.format(model="mistralai/Mistral-7B-Instruct-v0.2", shards="None", inp="Some(8000)", tot="Some(8192)", pre="Some(16384)", json="false")),
        t("INFO", "text_generation_launcher", "Model supports up to 32768 but tgi will now set its default to 4096 instead. This is to save VRAM by refusing large prompts in order to allow more users on the same hardware. You can increase that size using `--max-batch-prefill-tokens=32818 --max-total-tokens=32768 --max-input-tokens=32767`."),
        t("INFO", "download", "text_generation_launcher: Starting download process.", step=1),
        t("INFO", "text_generation_launcher", "Files are already present on the host. Skipping download.", step=3),
        t("INFO", "download", "text_generation_launcher: Successfully downloaded weights."),
        t("INFO", "shard-manager", "text_generation_launcher: Starting shard rank=0"),
        t("INFO", "text_generation_launcher", "Server started at unix:///tmp/text-generation-server-0", step=9),
        t("INFO", "shard-manager", "text_generation_launcher: Shard ready in 10.41s rank=0"),
        t("INFO", "text_generation_launcher", "Starting Webserver"),
        t("INFO", "text_generation_router", "router/src/main.rs:195: Using the Hugging Face API"),
        t("INFO", "text_generation_router", "router/src/main.rs:289: Using config Some(Mistral)"),
        t("INFO", "text_generation_router", "router/src/main.rs:317: Warming up model"),
        t("ERROR", "text_generation_launcher", "Method Warmup encountered an error.", step=2),
    ]
    L += tgi_shard_traceback(torch_oom("1.88 GiB", 0, "22.07 GiB", "1.02 GiB", "19.83 GiB", "620.31 MiB", self_used="21.04 GiB"))
    L.append("RuntimeError: Not enough memory to handle 16384 prefill tokens. You need to decrease `--max-batch-prefill-tokens`")
    L += [
        t("ERROR", "warmup{max_input_length=8000 max_prefill_tokens=16384 max_total_tokens=8192 max_batch_size=None}:warmup", "text_generation_client: router/client/src/lib.rs:46: Server error: Not enough memory to handle 16384 prefill tokens. You need to decrease `--max-batch-prefill-tokens`"),
        "Error: WebServer(Warmup(Generation(\"Not enough memory to handle 16384 prefill tokens. You need to decrease `--max-batch-prefill-tokens`\")))",
        t("ERROR", "text_generation_launcher", "Webserver Crashed"),
        t("INFO", "text_generation_launcher", "Shutting down shards"),
        t("INFO", "shard-manager", "text_generation_launcher: Terminating shard rank=0"),
        t("INFO", "shard-manager", "text_generation_launcher: Waiting for shard to gracefully shutdown rank=0"),
        t("INFO", "shard-manager", "text_generation_launcher: shard terminated rank=0", step=1),
        "Error: WebserverFailed",
    ]
    write("tgi-prefill-tokens-oom", "fires-v2-text-logs.log", L)

    # v3 with --json-output; the launcher logged the weights at DEBUG, so the fit is computed.
    c = Clock(1, 10, 9, 59, 30, 2025)

    def j(level, target, msg, step=0, spans=None):
        c.tick(step)
        esc = msg.replace("\\", "\\\\").replace('"', '\\"')
        extra = f',"span":{spans}' if spans else ""
        return f'{{"timestamp":"{c.iso()}","level":"{level}","fields":{{"message":"{esc}"}},"target":"{target}"{extra}}}'
    args = TGI_ARGS.format(model="meta-llama/Llama-3.1-8B-Instruct", shards="None", inp="Some(8191)", tot="Some(8192)", pre="Some(16384)", json="true")
    L = [
        j("INFO", "text_generation_launcher", args),
        j("DEBUG", "text_generation_launcher", "Available vram 23.69GB: model needs 16.07GB, every tokens requires 131.07kB, maximum allocatable tokens 57329", step=1),
        j("INFO", "text_generation_launcher", "Using attention flashinfer - Prefix caching true"),
        j("INFO", "text_generation_launcher", "Starting shard", step=1, spans='{"rank":0,"name":"shard-manager"}'),
        j("INFO", "text_generation_launcher", "Shard ready in 14.2s", step=14, spans='{"rank":0,"name":"shard-manager"}'),
        j("INFO", "text_generation_router_v3", "Warming up model", step=1),
    ]
    tb = ["Method Warmup encountered an error."] + tgi_shard_traceback(torch_oom("1.94 GiB", 0, "22.07 GiB", "1.02 GiB", "19.83 GiB", "632.00 MiB", self_used="21.04 GiB")) + [
        "RuntimeError: Not enough memory to handle 16384 prefill tokens. You need to decrease `--max-batch-prefill-tokens`"]
    # The shard's traceback arrives as one record with the newlines escaped.
    L.append(j("ERROR", "text_generation_launcher", "@@".join(tb), step=3).replace("@@", "\\n"))
    L += [
        j("ERROR", "text_generation_router_v3::client", "Server error: Not enough memory to handle 16384 prefill tokens. You need to decrease `--max-batch-prefill-tokens`", spans='{"max_input_tokens":8191,"max_prefill_tokens":16384,"max_total_tokens":8192,"name":"warmup"}'),
        j("ERROR", "text_generation_launcher", "Webserver Crashed"),
        j("INFO", "text_generation_launcher", "Shutting down shards"),
    ]
    write("tgi-prefill-tokens-oom", "fires-v3-json-output.log", L)


def tgi_runtime():
    """TGI 1.x serving with the inferred KV size; a long prefill OOMs during serving."""
    c = Clock(8, 22, 17, 48, 0, 2023)

    def t(level, target, msg, step=0):
        c.tick(step)
        return f"{c.iso()} {level:>5} {target}: {msg}"
    L = [
        t("INFO", "text_generation_launcher", "Args { model_id: \"meta-llama/Llama-2-13b-chat-hf\", revision: None, validation_workers: 2, sharded: None, num_shard: Some(2), quantize: None, dtype: None, trust_remote_code: false, max_concurrent_requests: 128, max_best_of: 2, max_stop_sequences: 4, max_input_length: 4000, max_total_tokens: 4096, waiting_served_ratio: 1.2, max_batch_prefill_tokens: 8192, max_batch_total_tokens: None, max_waiting_tokens: 20, hostname: \"0.0.0.0\", port: 80, cuda_memory_fraction: 1.0, json_output: false, env: false }"),
        t("INFO", "text_generation_launcher", "Sharding model on 2 processes", step=1),
        t("INFO", "shard-manager", "text_generation_launcher: Shard ready in 21.4s rank=0", step=21),
        t("INFO", "shard-manager", "text_generation_launcher: Shard ready in 21.6s rank=1"),
        t("INFO", "text_generation_router", "router/src/main.rs:216: Warming up model", step=1),
        t("WARN", "text_generation_router", "router/src/main.rs:232: Model does not support automatic max batch total tokens"),
        t("INFO", "text_generation_router", "router/src/main.rs:239: Setting max batch total tokens to 16000", step=4),
        t("INFO", "text_generation_router", "router/src/main.rs:240: Connected"),
    ]
    for i in range(12):
        c.tick(rng.randint(1, 9))
        L.append(f"{c.iso()}  INFO HTTP request{{otel.name=POST /generate http.client_ip= http.flavor=1.1 http.host=10.0.0.4:8080 http.method=POST http.route=/generate}}:generate{{parameters=GenerateParameters {{ max_new_tokens: Some(512) }} total_time=\"{rng.uniform(2, 9):.3f}s\" validation_time=\"1.2ms\" queue_time=\"{rng.uniform(0, 2):.3f}s\"}}: text_generation_router::server: router/src/server.rs:289: Success")
    L.append(t("ERROR", "shard-manager", "text_generation_launcher: Method Prefill encountered an error.", step=3))
    L += frames([
        ("/opt/conda/bin/text-generation-server", 8, "<module>", "sys.exit(app())"),
        ("/opt/conda/lib/python3.9/site-packages/text_generation_server/interceptor.py", 20, "intercept", "return await response"),
        ("/opt/conda/lib/python3.9/site-packages/text_generation_server/server.py", 70, "Prefill", "generations, next_batch = self.model.generate_token(batch)"),
        ("/opt/conda/lib/python3.9/site-packages/text_generation_server/models/flash_causal_lm.py", 832, "generate_token", "out = self.forward("),
        ("/opt/conda/lib/python3.9/site-packages/text_generation_server/models/custom_modeling/flash_llama_modeling.py", 450, "forward", "logits = self.lm_head(hidden_states)"),
    ])
    L.append(torch_oom("1.22 GiB", 1, "22.19 GiB", "817.50 MiB", "20.12 GiB", "401.94 MiB", self_used="21.39 GiB", exc="torch.cuda.OutOfMemoryError").replace(" Including non-PyTorch memory, this process has 21.39 GiB memory in use.", "").replace(", with", ""))
    L += [
        t("ERROR", "batch{batch_size=9}:prefill:prefill{id=112 size=9}:prefill{id=112 size=9}", "text_generation_client: router/client/src/lib.rs:33: Server error: CUDA out of memory. Tried to allocate 1.22 GiB (GPU 1; 22.19 GiB total capacity; 20.12 GiB already allocated; 817.50 MiB free; 20.51 GiB reserved in total by PyTorch)"),
    ]
    write("tgi-runtime-oom", "fires-v1-prefill-oom-while-serving.log", L)
    with open(os.path.join(HERE, "tgi-prefill-tokens-oom", "fires-v2-text-logs.log"), encoding="utf-8") as f:
        write("tgi-runtime-oom", "near-miss-warmup-prefill.log", f.read().splitlines())


def tgi_total(write_to=None):
    c = Clock(1, 10, 10, 0, 0, 2025)

    def t(level, target, msg, step=0):
        c.tick(step)
        return f"{c.iso()} {level:>5} {target}: {msg}"
    L = [
        "tgi-1  | " + t("INFO", "text_generation_launcher", TGI_ARGS.format(model="Qwen/Qwen2.5-14B-Instruct", shards="Some(1)", inp="Some(30000)", tot="Some(32768)", pre="Some(30000)", json="false")),
        "tgi-1  | " + t("INFO", "text_generation_launcher", "Using attention flashinfer - Prefix caching true", step=1),
        "tgi-1  | " + t("INFO", "text_generation_launcher", "Starting shard rank=0"),
        "tgi-1  | " + t("INFO", "text_generation_launcher", "Shard ready in 22.1s rank=0", step=22),
        "tgi-1  | " + t("INFO", "text_generation_router_v3", "backends/v3/src/lib.rs:125: Warming up model"),
        "tgi-1  | " + t("INFO", "text_generation_launcher", "KV-cache blocks: 1416, size: 16", step=6),
        "tgi-1  | " + t("INFO", "text_generation_launcher", "Cuda Graphs are enabled for sizes [32, 16, 8, 4, 2, 1]"),
        "tgi-1  | Error: Backend(V3(NotEnoughMemory(32768)))",
        "tgi-1  | " + t("ERROR", "text_generation_launcher", "Webserver Crashed", step=1),
        "tgi-1  | " + t("INFO", "text_generation_launcher", "Shutting down shards"),
        "tgi-1 exited with code 1",
    ]
    rule, name = write_to or ("tgi-max-total-tokens-exceeds-kv", "fires-v3-32k-on-one-gpu.log")
    write(rule, name, L)


# =====================================================================================
# TensorRT-LLM
# =====================================================================================

def trt_reduced():
    c = Clock(4, 10, 16, 57, 50)

    def g(msg, step=0):
        c.tick(step)
        return f"I{c.glog()} 1 {msg}"

    def r(level, msg, step=0):
        c.tick(step)
        return f"[TensorRT-LLM][{level}] {msg}"
    L = [
        g("pinned_memory_manager.cc:277] \"Pinned memory pool is created at '0x7f2a40000000' with size 268435456\""),
        g("model_lifecycle.cc:472] \"loading: tensorrt_llm:1\"", step=1),
        "[TensorRT-LLM] TensorRT-LLM version: 0.16.0",
        r("INFO", "Initializing MPI with thread mode 3"),
        r("INFO", "Rank 0 is using GPU 0"),
        r("INFO", "TRTGptModel maxNumSequences: 64"),
        r("INFO", "TRTGptModel maxBatchSize: 64"),
        r("INFO", "TRTGptModel maxBeamWidth: 1"),
        r("INFO", "TRTGptModel maxSequenceLen: 131072"),
        r("INFO", "TRTGptModel maxDraftLen: 0"),
        r("INFO", "TRTGptModel mMaxAttentionWindowSize: (131072) * 32"),
        r("INFO", "TRTGptModel enableTrtOverlap: 0"),
        r("INFO", "TRTGptModel normalizeLogProbs: 0"),
        r("INFO", "TRTGptModel maxNumTokens: 8192"),
        r("INFO", "TRTGptModel maxInputLen: 131071 = maxSequenceLen - 1 since chunked context is enabled"),
        r("INFO", "Capacity Scheduler Policy: GUARANTEED_NO_EVICT"),
        r("INFO", "Context Chunking Scheduler Policy: FIRST_COME_FIRST_SERVED"),
        r("INFO", "Loaded engine size: 15388 MiB", step=6),
        r("INFO", "[MemUsageChange] Allocated 1216.03 MiB for execution context memory."),
        r("INFO", "[MemUsageChange] TensorRT-managed allocation in IExecutionContext creation: CPU +0, GPU +0, now: CPU 0, GPU 15380 (MiB)"),
        r("INFO", "[MemUsageChange] Allocated 12.63 MB GPU memory for runtime buffers."),
        r("INFO", "[MemUsageChange] Allocated 54.07 MB GPU memory for decoder."),
        r("INFO", "Memory usage when calculating max tokens in paged kv cache: total: 22.05 GiB, available: 5.21 GiB"),
        r("INFO", "Number of blocks in KV cache primary pool: 596"),
        r("INFO", "Number of blocks in KV cache secondary pool: 0, onboard blocks to primary memory before reuse: true"),
        r("WARNING", "maxAttentionWindow and maxSequenceLen are too large for at least one sequence to fit in kvCache. they are reduced to 38144"),
        r("WARNING", "maxInputLen is reduced to 38143"),
        r("INFO", "Max KV cache pages per sequence: 596"),
        r("INFO", "Number of tokens per block: 64."),
        r("INFO", "[MemUsageChange] Allocated 4.66 GiB for max tokens in paged KV cache (38144)."),
        g("model_lifecycle.cc:849] \"successfully loaded 'tensorrt_llm'\"", step=2),
        g("grpc_server.cc:2558] \"Started GRPCInferenceService at 0.0.0.0:8001\""),
        g("http_server.cc:4729] \"Started HTTPService at 0.0.0.0:8000\""),
    ]
    for _ in range(3):
        c.tick(rng.randint(20, 90))
        L.append(f"[TensorRT-LLM][ERROR] Encountered an error when fetching new request: Prompt length ({rng.randint(40000, 90000)}) exceeds maximum input length (38143). Set log level to info and check TRTGptModel logs for how maximum input length is set (/workspace/tensorrt_llm/cpp/include/tensorrt_llm/batch_manager/llmRequest.h:478)")
    write("trtllm-max-seq-len-reduced", "fires-triton-cpp-runtime.log", L)

    # PyTorch backend, newer per-window wording, fraction lowered by the user.
    c = Clock(1, 16, 6, 20, 0, 2026)

    def p(level, msg, step=0):
        c.tick(step)
        return f"[{c.trt()}] [TRT-LLM] [{level}] {msg}"
    L = [
        "$ trtllm-serve Qwen/Qwen2.5-14B-Instruct --backend pytorch --max_seq_len 32768 --max_batch_size 32 --kv_cache_free_gpu_memory_fraction 0.5 --tp_size 1",
        "[TensorRT-LLM] TensorRT-LLM version: 1.0.0",
        p("I", "Using LLM with PyTorch backend", step=2),
        p("I", "Set PluginConfig.nccl_plugin to None."),
        p("I", "Prefetching 29.54GB checkpoint files.", step=1),
        p("I", "Peak memory during memory usage profiling (torch + non-torch): 31.82 GiB, available KV cache memory when calculating max tokens: 22.32 GiB, fraction is set 0.5, kv size is 196608. device total memory 79.11 GiB, , tmp kv_mem 0.19 GiB", step=40),
        p("I", "Number of blocks in KV cache primary pool: 640"),
        p("I", "Number of tokens per block: 32."),
        p("W", "maxAttentionWindowVec too large to fit at least one sequence in kvCache. Old: [32768], New: [20480]"),
        p("W", "maxSequenceLen is reduced to maxAttentionWindow: 20480"),
        p("W", "maxInputLen is reduced to 20479"),
        p("I", "[MemUsageChange] Allocated 3.75 GiB for max tokens in paged KV cache (20480)."),
        "INFO:     Started server process [4410]",
        "INFO:     Application startup complete.",
        "INFO:     Uvicorn running on http://localhost:8000 (Press CTRL+C to quit)",
    ]
    write("trtllm-max-seq-len-reduced", "fires-pytorch-backend-per-window.log", L)

    L = [
        "[TensorRT-LLM] TensorRT-LLM version: 0.9.0",
        "[TensorRT-LLM][INFO] Initializing MPI with thread mode 3",
        "[TensorRT-LLM][INFO] MPI size: 2, rank: 1",
        "[TensorRT-LLM][INFO] MPI size: 2, rank: 0",
        "[TensorRT-LLM][WARNING] The value of maxAttentionWindow cannot exceed mMaxSequenceLen. Therefore, it has been adjusted to match the value of mMaxSequenceLen.",
        "[TensorRT-LLM][INFO] TRTGptModel maxNumSequences: 8",
        "[TensorRT-LLM][INFO] TRTGptModel maxBatchSize: 8",
        "[TensorRT-LLM][INFO] TRTGptModel mMaxAttentionWindowSize: 4096",
        "[TensorRT-LLM][INFO] Loaded engine size: 12852 MiB",
        "[TensorRT-LLM][INFO] Memory usage when calculating max tokens in paged kv cache: total: 79.10 GiB, available: 63.21 GiB",
        "[TensorRT-LLM][INFO] Number of blocks in KV cache primary pool: 7281",
        "[TensorRT-LLM][INFO] Number of tokens per block: 64.",
        "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 56.88 GiB for max tokens in paged KV cache (465984).",
        "[TensorRT-LLM][WARNING] Attention workspace size is not enough, increase the size from 0 bytes to 67462144 bytes",
        "I0410 16:58:08.485508 1 model_lifecycle.cc:849] \"successfully loaded 'tensorrt_llm'\"",
    ]
    write("trtllm-max-seq-len-reduced", "not-oom-window-clamped-to-seq-len.log", L)


def trt_fraction():
    c = Clock(7, 8, 19, 40, 0)

    def p(level, msg, rank=None, step=0):
        c.tick(step)
        rk = f"[RANK {rank}] " if rank is not None else ""
        return f"[{c.trt()}] [TRT-LLM] {rk}[{level}] {msg}"
    L = [
        "trtllm-serve meta-llama/Llama-3.1-70B-Instruct-FP8 --tp_size 2 --max_batch_size 256 --max_num_tokens 16384 --kv_cache_free_gpu_memory_fraction 0.95",
        "[TensorRT-LLM] TensorRT-LLM version: 0.19.0",
    ]
    for rank in (0, 1):
        L.append(f"[TensorRT-LLM][INFO] Loaded engine size: 35311 MiB")
        L.append(f"[TensorRT-LLM][INFO] Memory usage when calculating max tokens in paged kv cache: total: 79.10 GiB, available: 38.82 GiB")
        L.append(f"[TensorRT-LLM][INFO] Number of blocks in KV cache primary pool: 7372")
        L.append(f"[TensorRT-LLM][INFO] Number of tokens per block: 64.")
        L.append(f"[TensorRT-LLM][INFO] [MemUsageChange] Allocated 36.88 GiB for max tokens in paged KV cache (471808).")
    for rank in (1, 0):
        L += [
            f"[TensorRT-LLM][ERROR] [TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMalloc(ptr, n): out of memory (/home/jenkins/agent/workspace/LLM/release-0.19/L0_PostMerge/llm/cpp/tensorrt_llm/runtime/tllmBuffers.h:125)",
            "1       0x7f3a1c5e2a1b void tensorrt_llm::common::check<cudaError>(cudaError, char const*, char const*, int) + 139",
            "2       0x7f3a1c8b7f24 tensorrt_llm::runtime::BufferManager::gpu(unsigned long, nvinfer1::DataType) const + 308",
            "3       0x7f3a1d0c1a77 tensorrt_llm::batch_manager::RuntimeBuffers::reshape(tensorrt_llm::runtime::TllmRuntime const&) + 1863",
            "4       0x7f3a1d0e2b10 tensorrt_llm::batch_manager::TrtGptModelInflightBatching::createBuffers() + 512",
        ]
    L.append(p("E", "Failed to initialize executor on rank 0: [TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMalloc(ptr, n): out of memory", rank=0))
    write("trtllm-free-fraction-too-high", "fires-cudamalloc-after-kv-pool-tp2.log", L)

    # Near miss: the PyTorch backend could not create the model itself: weights too large.
    c = Clock(7, 8, 19, 47, 0)
    L = [
        "trtllm-serve Qwen/Qwen3-235B-A22B-FP8 --tp_size 4 --ep_size 4",
        "[TensorRT-LLM] TensorRT-LLM version: 1.0.0rc1",
        p("I", "Using LLM with PyTorch backend"),
    ] + frames([
        (f"{SITE}/tensorrt_llm/_torch/pyexecutor/py_executor_creator.py", 290, "create_py_executor", "model_engine = PyTorchModelEngine("),
        (f"{SITE}/tensorrt_llm/_torch/pyexecutor/model_engine.py", 377, "__init__", "self.model = self._load_model("),
        (f"{SITE}/tensorrt_llm/_torch/models/modeling_qwen3_moe.py", 388, "load_weights", "module.weight.data.copy_(weight)"),
    ]) + [torch_oom("1.50 GiB", 1, "139.81 GiB", "1.02 GiB", "137.50 GiB", "44.00 MiB", self_used="138.60 GiB"),
          "",
          "The above exception was the direct cause of the following exception:",
          "",
          p("E", "Failed to initialize executor on rank 1: Executor creation failed due to insufficient GPU memory.", rank=1),
          "",
          "The following component could not be created: Model",
          "Total GPU memory (GiB): 139.81",
          "Free GPU memory before component creation attempt (GiB): 138.92",
          "",
          "Please refer to the TensorRT LLM documentation for information on how to control the memory usage through TensorRT LLM configuration options. Possible options include:",
          "  Model: reduce max_num_tokens and/or shard the model weights across GPUs by enabling pipeline and/or tensor parallelism"]
    write("trtllm-free-fraction-too-high", "near-miss-model-does-not-fit.log", L)
    write("serving-weights-dont-fit", "fires-trtllm-pytorch-backend-model-component.log", L)


def sglang_load_oom():
    """SGLang loading a 32B model in bf16 on one 48 GB card."""
    c = Clock(8, 1, 12, 0, 0)
    L = [
        "python3 -m sglang.launch_server --model-path Qwen/QwQ-32B --tp 1 --port 30000",
        f"[{c.sglang()}] " + server_args("Qwen/QwQ-32B", 0.88, tp=1),
        sg(c, "Attention backend not set. Use flashinfer backend by default.", step=3),
        sg(c, "Load weight begin. avail mem=43.91 GB", step=2),
        sg(c, "Scheduler hit an exception: Traceback (most recent call last):", step=35),
    ]
    L += frames(SG_INIT + [
        (f"{SG}/model_executor/model_runner.py", 187, "initialize", "self.load_model()"),
        (f"{SG}/model_executor/model_runner.py", 453, "load_model", "self.model = get_model("),
        (f"{SG}/model_loader/loader.py", 381, "load_model", "self.load_weights_and_postprocess("),
        (f"{SG}/models/qwen2.py", 512, "load_weights", "weight_loader(param, loaded_weight, shard_id)"),
    ])[1:]
    L.append(torch_oom("270.00 MiB", 0, "44.52 GiB", "180.19 MiB", "43.69 GiB", "26.31 MiB", self_used="44.33 GiB"))
    L.append(f"[{c.sglang()}] Received sigquit from a child process. It usually means the child failed.")
    write("serving-weights-dont-fit", "fires-sglang-32b-bf16-on-48g.log", L)


def main():
    vllm_kv_v1_131k()
    vllm_kv_v1_with_free()
    vllm_kv_v0_restarts()
    vllm_kv_near_miss()
    vllm_no_blocks()
    vllm_budget()
    vllm_graph()
    vllm_serving_v1()
    vllm_profiling()
    vllm_sampler()
    vllm_sampler_near_miss()
    vllm_weights()
    vllm_preemption()
    vllm_restarts_different()
    sglang_not_enough()
    sglang_graph()
    sglang_graph(frac=0.95, write_to=("sglang-not-enough-memory", "near-miss-graph-oom-after-raising.log"))
    sglang_graph_near_miss()
    sglang_runtime()
    sglang_retract(storm=True)
    sglang_retract(storm=False)
    sglang_pool()
    sglang_load_oom()
    with open(os.path.join(HERE, "sglang-not-enough-memory", "fires-fraction-lowered-to-0.6.log"), encoding="utf-8") as f:
        write("serving-weights-dont-fit", "near-miss-sglang-weights-loaded-kv-short.log", f.read().splitlines())
    tgi_prefill()
    tgi_total()
    tgi_runtime()
    tgi_total(write_to=("tgi-prefill-tokens-oom", "near-miss-max-total-tokens.log"))
    # TGI near miss for the capacity rule: the prefill OOM.
    with open(os.path.join(HERE, "tgi-prefill-tokens-oom", "fires-v2-text-logs.log"), encoding="utf-8") as f:
        write("tgi-max-total-tokens-exceeds-kv", "near-miss-prefill-oom.log", f.read().splitlines())
    trt_reduced()
    trt_fraction()


if __name__ == "__main__":
    main()
