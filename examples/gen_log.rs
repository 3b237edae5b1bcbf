//! Writes a large realistic log for the scan benchmark: training progress, tqdm bars with
//! escape codes, HTTP access lines, loss dicts, compiler and NCCL warnings, data-loader debug
//! lines, and an OOM traceback every `oom-every-MiB` MiB (so the scanner meets real work
//! spread through the file).
//!
//! Lines that hit an anchor and carry evidence come at the rates real logs print them: a vLLM
//! stats line (`... GPU KV cache usage: 41.3% ...`) on average every `stats-every` lines
//! (default 128: vLLM logs one every 10 s, and a server doing 10 requests a second writes
//! about a hundred access lines in between) and a training line with a memory figure every
//! 256. `stats-every` 8 gives the worst case of a serving log that is mostly stats lines.
//!
//! `mem-every` (default 256) sets the rate of the training lines with a memory figure; the
//! scan benchmark (`bench/scan_bench.sh`) raises both rates' periods to get a log with a few
//! hundred accounting lines.
//!
//! cargo run --release --example gen_log -- <MiB> <out.log> [oom-every-MiB] [stats-every] [mem-every]

use std::io::{BufWriter, Write};

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let mib: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1024);
    let out = args
        .get(2)
        .cloned()
        .unwrap_or_else(|| "/tmp/oomdoctor-bench.log".into());
    let every: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(64);
    let stats_every: u64 = args
        .get(4)
        .and_then(|s| s.parse().ok())
        .unwrap_or(128)
        .max(1);
    let mem_every: u64 = args
        .get(5)
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
        .max(1);
    let target = mib << 20;
    let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(&out)?);
    let mut written = 0u64;
    let mut next_oom = every << 20;
    let mut state = 0x9E3779B97F4A7C15u64;
    let mut rnd = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut step = 0u64;
    while written < target {
        let r = rnd();
        // Independent draws for the line kind, so the evidence lines' rates are exact.
        let kind = rnd();
        let line = if kind % stats_every == 0 {
            format!(
                "INFO 03-02 10:{:02}:{:02} [loggers.py:123] Engine 000: Avg prompt throughput: {:.1} tokens/s, Avg generation throughput: {:.1} tokens/s, Running: {} reqs, Waiting: 0 reqs, GPU KV cache usage: {:.1}%, Prefix cache hit rate: {:.1}%\n",
                (r >> 8) % 60,
                (r >> 16) % 60,
                ((r >> 20) % 10000) as f64 / 10.0,
                ((r >> 30) % 10000) as f64 / 10.0,
                (r >> 40) % 64,
                ((r >> 44) % 1000) as f64 / 10.0,
                ((r >> 50) % 1000) as f64 / 10.0
            )
        } else if (kind >> 32) % mem_every == 0 {
            format!(
                "[2026-03-02 10:{:02}:{:02},{:03}] INFO  trainer: step {step} | loss {:.4} | mem {:.2} GiB | tokens/s {}\n",
                (r >> 8) % 60,
                (r >> 16) % 60,
                (r >> 24) % 1000,
                2.0 + ((r >> 32) % 1000) as f64 / 1000.0,
                61.0 + ((r >> 40) % 100) as f64 / 100.0,
                10_000 + (r >> 20) % 5000
            )
        } else {
            match r % 8 {
                0 => format!(
                    "[2026-03-02 10:{:02}:{:02},{:03}] INFO  trainer: step {step} | loss {:.4} | lr {:.2e} | grad_norm {:.3} | tokens/s {}\n",
                    (r >> 8) % 60,
                    (r >> 16) % 60,
                    (r >> 24) % 1000,
                    2.0 + ((r >> 32) % 1000) as f64 / 1000.0,
                    3e-5,
                    ((r >> 40) % 500) as f64 / 100.0,
                    10_000 + (r >> 20) % 5000
                ),
                1 => format!(
                    "\x1b[A {:3}%|{}| {step}/500000 [12:{:02}:{:02}<40:00:00,  2.31it/s]\n",
                    step / 5000,
                    "█".repeat(((step / 50000) % 10) as usize),
                    (r >> 8) % 60,
                    (r >> 16) % 60
                ),
                2 => format!(
                    "INFO:     10.2.{}.{}:{} - \"POST /v1/chat/completions HTTP/1.1\" 200 OK\n",
                    (r >> 8) % 256,
                    (r >> 16) % 256,
                    30000 + (r >> 24) % 30000
                ),
                3 => format!(
                    "INFO 03-02 10:{:02}:{:02} [logger.py:41] Received request chatcmpl-{:016x}: params: SamplingParams(n=1, temperature=0.7, top_p=0.95, max_tokens={}), prompt_token_ids: None, lora_request: None.\n",
                    (r >> 8) % 60,
                    (r >> 16) % 60,
                    r >> 4,
                    256 + (r >> 40) % 3840
                ),
                4 => format!(
                    "{{'loss': {:.4}, 'grad_norm': {:.4}, 'learning_rate': 1.9e-05, 'epoch': {:.2}}}\n",
                    1.0 + ((r >> 8) % 1000) as f64 / 1000.0,
                    ((r >> 20) % 1000) as f64 / 100.0,
                    step as f64 / 100000.0
                ),
                5 => format!(
                    "W0302 10:{:02}:{:02}.{:06} 4402 torch/_dynamo/convert_frame.py:844] torch._dynamo hit config.cache_size_limit (8)\n",
                    (r >> 8) % 60,
                    (r >> 16) % 60,
                    (r >> 24) % 1_000_000
                ),
                6 => format!(
                    "[rank{}]:[W302 10:14:{:02}] ProcessGroupNCCL.cpp:1168 Warning: collective {} took {} ms\n",
                    r % 8,
                    (r >> 8) % 60,
                    (r >> 16) % 100000,
                    (r >> 32) % 900
                ),
                _ => format!(
                    "DEBUG data.py:88 sample {} tokens={} truncated=False source=shard-{:05}.parquet\n",
                    (r >> 8) % 10_000_000,
                    (r >> 32) % 4096,
                    (r >> 40) % 99999
                ),
            }
        };
        step += 1;
        w.write_all(line.as_bytes())?;
        written += line.len() as u64;
        if written >= next_oom {
            next_oom += every << 20;
            let oom = format!(
                "Traceback (most recent call last):\n  File \"train.py\", line 210, in <module>\n    loss.backward()\n  File \"/opt/conda/lib/python3.11/site-packages/torch/_tensor.py\", line 581, in backward\n[rank{}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {}.00 GiB. GPU {} has a total capacity of 79.25 GiB of which 1.21 GiB is free. Including non-PyTorch memory, this process has 78.03 GiB memory in use. Of the allocated memory 68.90 GiB is allocated by PyTorch, and 8.47 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n",
                r % 8,
                1 + (r >> 8) % 3,
                r % 8
            );
            w.write_all(oom.as_bytes())?;
            written += oom.len() as u64;
        }
    }
    w.flush()?;
    eprintln!("wrote {} MiB to {out}", written >> 20);
    Ok(())
}
