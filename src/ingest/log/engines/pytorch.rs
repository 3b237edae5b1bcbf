//! PyTorch's own out-of-memory messages, every wording from 1.x to 2.15, and the allocator
//! configuration a log may show.
//!
//! Sources: `ENGINE-MESSAGES.md` §1 and `snapshot-format.md` §2. The message changed eight
//! times (the `cached)` ancestor, `reserved in total by PyTorch`, the `N allowed;` piece, the
//! 2.1 `capacty` typo, the sentence form with NVML's process list, private pools), exists for
//! CUDA, HIP, XPU, MPS and vendor forks, and is often wrapped over several lines by the tool
//! that printed it. The numbers are read piece by piece from the joined message, so a piece
//! that a version or build leaves out simply yields no fact.
//!
//! The hint PyTorch appends to every OOM (`try setting PYTORCH_CUDA_ALLOC_CONF=...`) is never
//! read as configuration and never counted as evidence: only a line where the user *sets* the
//! variable is.
use std::sync::LazyLock;

use regex::Regex;

use super::{Domain, Emit, Failure, Line, PhaseMark, Recognizer, id};
use crate::facts::evidence::Value;
use crate::facts::units::{SiBase, parse_size};
use crate::ingest::log::pattern::static_regex;

/// A size as PyTorch prints it (`2.00 GiB`, `512 bytes`, older MPS `1.50 GB`).
const SIZE: &str = r"\d+(?:\.\d+)?\s*(?:bytes|[KMGTP]i?B)";

/// A launcher naming one of the job's workers: torchrun's `Sending process 554 closing signal
/// SIGTERM`, `failed (exitcode: 1) local_rank: 1 (pid: 555)` and its summary's `exitcode  :
/// -15 (pid: 554)`; DeepSpeed's `Killing subprocess 1234`.
static WORKER_PID: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"Sending process (\d+) closing signal|local_rank: \d+ \(pid: (\d+)\)|exitcode\s*: -?\d+ \(pid: (\d+)\)|Killing subprocess (\d+)",
    )
});

/// The allocator's first sentence. A size cut off at the end of the text (`Tried to allocate
/// 18`, the last line of a paste, or a wrap whose rest could not be joined) is `cut`: the
/// OOM is read without its request rather than not at all.
static HEAD: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(&format!(
        r"(?:(?:(?P<exc>[\w.]*(?:Error|Exception)):\s*)?(?P<backend>CUDA|HIP|XPU|MUSA|MLU|NPU|DPCPP|GCU) out of memory\.\s*|^\s*)Tried to allocate (?:(?P<req>{SIZE}|more than 1EB memory)|(?P<cut>\d[\d.]*)\s*$)"
    ))
});
/// The allocator's message cut short within its first sentence by a wrap (`CUDA out of
/// memory. Tried to allocate 74` / `.00 MiB (GPU 0; ...`): read joined with what follows.
static HEAD_CUT: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"(?:CUDA|HIP|XPU|MUSA|MLU|NPU|DPCPP|GCU) out of memory\.[^()]{0,40}$")
});
static MODERN_DEVICE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(&format!(
        r"GPU\s*(?P<dev>\d*) has a total capac(?:i)?ty of (?P<total>{SIZE})(?: of which (?P<free>{SIZE}) is free)?"
    ))
});
static OTHER_PROCESS: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(&format!(
        r"Process (?P<pid>\d+) has (?P<used>{SIZE}) memory in use"
    ))
});
static SELF_PROCESS: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(&format!(
        r"Including non-PyTorch memory, this process has (?P<used>{SIZE}) memory in use"
    ))
});
static ALLOWED: LazyLock<Regex> =
    LazyLock::new(|| static_regex(&format!(r"(?P<allowed>{SIZE}) allowed;")));
// The allocator numbers are read piece by piece so a message cut short (an issue title, a
// truncated terminal line) still yields what it has.
// (`Of the allocated memory X is allocated by PyTorch`, from the figure on: a paste may start
// inside the sentence.)
static MODERN_ALLOC: LazyLock<Regex> =
    LazyLock::new(|| static_regex(&format!(r"(?P<alloc>{SIZE}) is allocated by PyTorch")));
static MODERN_PRIVATE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(&format!(
        r"with (?P<private>{SIZE}) allocated in private pools"
    ))
});
static MODERN_UNALLOC: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(&format!(
        r"(?P<unalloc>{SIZE}) is reserved by PyTorch but unallocated"
    ))
});
/// PyTorch before 2.1 (and Ascend's, Cambricon's, Moore Threads' builds): `(GPU 0; 7.92 GiB
/// total capacity; 6.91 GiB already allocated; 98.56 MiB free; 7.02 GiB reserved in total by
/// PyTorch)`. Intel's extension (IPEX before 2.1) leaves out the free figure: `(GPU 0; 15.56
/// GiB total capacity; 176.00 MiB already allocated; 176.00 MiB reserved in total by PyTorch)`.
static LEGACY: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(&format!(
        r"\((?:GPU|NPU|XPU|MLU|MUSA)\s+(?P<dev>\d+);\s*(?P<total>{SIZE}) total capacity;\s*(?P<alloc>{SIZE}) already allocated;(?:\s*{SIZE} current active;)?(?:\s*(?P<free>{SIZE}) free;)?(?:\s*(?P<allowed>{SIZE}) allowed;)?\s*(?P<reserved>{SIZE}) (?P<word>reserved in total by PyTorch|cached)\)"
    ))
});
/// torch-directml (AMD and Intel GPUs on Windows, the `privateuseone` device of the
/// DirectML forks of AUTOMATIC1111 and Forge): `RuntimeError: Could not allocate tensor with
/// 1073741824 bytes. There is not enough GPU video memory available!`. Only the request is
/// printed.
static DIRECTML: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"Could not allocate tensor with (?P<req>\d+) bytes\. There is not enough GPU video memory available",
    )
});
static MPS: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(&format!(
        r"MPS backend out of memory \(MPS allocated: (?P<alloc>{SIZE}), other allocations: (?P<other>{SIZE})(?:, max allowed: (?P<allowed>{SIZE}))?\)\.\s*Tried to allocate (?P<req>{SIZE}) on (?P<pool>\w+) pool"
    ))
});
static ASYNC_HEAD: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"Allocation on device (?P<dev>\d+) would exceed allowed memory\.?\s*\(out of memory\)",
    )
});
/// OOMs raised by the CUDA runtime or libraries outside the caching allocator. They carry no
/// numbers; `cuda runtime error (2)` and `THCudaCheck` are the pre-1.0 forms.
static RUNTIME: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?i)(?P<b>CUDA|HIP|ROCm|MUSA) error: out of memory|cuda runtime error \(2\) : out of memory|THCudaCheck FAIL .*error=2 : out of memory|CUBLAS_STATUS_ALLOC_FAILED|CUDA out of memory\.?\s*(?:Tried to allocate\s*)?$|CUDNN_STATUS_ALLOC_FAILED|Cuda failure '?out of memory'?",
    )
});
/// IPython's (Jupyter's, Colab's) traceback header names the exception before the stack:
/// `MemoryError                               Traceback (most recent call last)`. A paste
/// that stops inside the stack keeps only this line of the failure. PyTorch's own
/// `OutOfMemoryError` header is `BARE_CLASS`'s, with the class's other bare forms.
static NOTEBOOK_HEADER: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"^(?:[\w.]+\.)?(?P<exc>ResourceExhaustedError|_ArrayMemoryError|MemoryError)\s{3,}Traceback \(most recent call last\)",
    )
});
static LOAD_FAILED: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?i)(?:could not be loaded|failed to load(?: the)? model|error (?:while )?loading (?:the )?model|unable to load(?: the)? model)[^:]{0,80}:.{0,40}out of memory",
    )
});
static CPU_ALLOC: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory): you tried to allocate (?P<req>\d+) bytes",
    )
});
/// A user *setting* the allocator configuration: `export PYTORCH_CUDA_ALLOC_CONF=...`,
/// `PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True" python ...`, `os.environ[...] = "..."`,
/// an env dump `PYTORCH_CUDA_ALLOC_CONF: expandable_segments:True`.
static ALLOC_CONF: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r#"PYTORCH_(?:CUDA_|HIP_)?ALLOC_CONF['"]?\s*\]?\s*(?:=|:|\bis\b)\s*['"]?(?P<v>[A-Za-z_]+:[^\s'"]+)"#,
    )
});
static TORCH_VERSION: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?i)(?:PyTorch version|torch version|torch==|\btorch:\s|torch\.__version__\s*[=:]?)\s*:?\s*'?v?(?P<v>\d+\.\d+(?:\.\d+)?)",
    )
});
static MEMORY_FRACTION: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"set_per_process_memory_fraction\(\s*(?P<f>0?\.\d+|1(?:\.0+)?)")
});

/// The PyTorch recogniser.
pub struct PyTorch;

impl Recognizer for PyTorch {
    fn engine(&self) -> &'static str {
        id::PYTORCH
    }

    fn anchors(&self) -> &'static [&'static str] {
        &[
            "out of memory",
            // A pasted fragment without the exception's first words.
            "Tried to allocate",
            "CUBLAS_STATUS_ALLOC_FAILED",
            "CUDNN_STATUS_ALLOC_FAILED",
            "DefaultCPUAllocator",
            "would exceed allowed memory",
            "OutOfMemoryError",
            "not enough GPU video memory",
            // A notebook's traceback header (`NOTEBOOK_HEADER`).
            "MemoryError",
            "ResourceExhaustedError",
            "Allocation on device",
            "ALLOC_CONF",
            "torch version",
            "PyTorch version",
            "torch==",
            "torch.__version__",
            "set_per_process_memory_fraction",
            // torchrun's (torch.distributed.elastic's) and DeepSpeed's launcher naming the
            // job's own worker processes.
            "closing signal",
            "(pid: ",
            "Killing subprocess",
            // `torch.cuda.graph` ending a capture that an error cut short.
            "CUDA Graph is empty",
            "cuda/graphs.py:",
            "cuda\\graphs.py:",
            // The end of 2.1+'s message, for a paste that starts after its first words.
            "but unallocated",
        ]
    }

    fn recognize(&self, line: &Line<'_>, out: &mut Emit) {
        let text = line.text;
        if let Some(pid) = WORKER_PID
            .captures(text)
            .and_then(|c| c.iter().skip(1).flatten().next())
            .and_then(|m| m.as_str().parse::<u64>().ok())
        {
            out.worker_pid(pid);
        }
        // `torch.cuda.graph`'s exit warns that the graph is empty when an error (an OOM in
        // the captured region) ended the capture: the traceback below it happened while
        // capturing, though its frames are only the model's.
        // (Matched by the warning's source too: a paste wrapped at 100 columns cuts the
        // sentence after `/…/torch/cuda/graphs.py:126: UserWarning: The CUDA Gr`.)
        let graphs_py = text.contains("cuda/graphs.py:") || text.contains("cuda\\graphs.py:");
        if text.contains("The CUDA Graph is empty") || (graphs_py && text.contains("UserWarning")) {
            out.phase(PhaseMark::CudaGraphCapture);
        }
        // `Tried to allocate more than 1EB memory` (c10's wording for a size past an exabyte)
        // is no request any device could meet: a corrupted size (a shape computed from
        // garbage, often after another failure such as a collective's timeout), not memory
        // running out. It makes no OOM incident; the error before it is the one to read.
        if text.contains("allocate more than 1EB") {
            return;
        }
        if let Some(c) = text
            .contains("Traceback (most recent")
            .then(|| NOTEBOOK_HEADER.captures(text))
            .flatten()
        {
            out.failure(notebook_header_failure(&c["exc"]));
            return;
        }
        if let Some(restored) = restore_case(text) {
            let fixed = Line {
                text: &restored,
                ..*line
            };
            if recognize_oom(&fixed, out) {
                return;
            }
        }
        let oom_like = text.contains("out of memory")
            || text.contains("OUT OF MEMORY")
            || text.contains("ALLOC_FAILED")
            || text.trim_start().starts_with("Tried to allocate")
            || text.contains("not enough GPU video memory");
        if oom_like && recognize_oom(line, out) {
            return;
        }
        if text.contains("reserved by PyTorch but unallocated") && recognize_message_tail(line, out)
        {
            return;
        }
        // A wrap can cut the request's byte count (`you tried to allocate 65` / `641881600
        // bytes.`): read the message joined with its pieces when the line alone is short.
        let cpu_joined = if text.contains("DefaultCPUAllocator:") && !CPU_ALLOC.is_match(text) {
            super::join_whole(line, |t| CPU_ALLOC.is_match(t), |_| false)
        } else {
            None
        };
        let cpu_text = cpu_joined.as_ref().map_or(text, |(t, _)| t.as_str());
        if let Some(c) = CPU_ALLOC.captures(cpu_text) {
            let mut f = Failure::new("host-oom", id::PYTORCH, Domain::Host);
            // Spans then point into the joined text.
            if let Some((joined, used)) = &cpu_joined {
                out.consume(*used);
                f.text = Some(joined.clone());
            }
            if let Some(m) = c.name("req") {
                if let Ok(n) = m.as_str().parse::<u64>() {
                    f.fact("host.requested_bytes", n, Some((m.start(), m.end())));
                }
            }
            f.fact("oom.backend", "cpu", None)
                .fact("oom.wording", "cpu-allocator", None);
            out.failure(f);
            return;
        }
        if let Some(c) = ASYNC_HEAD.captures(text) {
            recognize_async(line, &c, out);
            return;
        }
        if let Some(c) = BARE_CLASS.captures(text.trim()) {
            let mut f = Failure::new("device-oom", id::PYTORCH, Domain::Device);
            let is_async = text.contains("Allocation on device");
            f.fact("oom.backend", "cuda", None).fact(
                "oom.wording",
                if is_async {
                    "cuda-malloc-async"
                } else {
                    "torch-bare"
                },
                None,
            );
            if let Some(exc) = c.name("exc") {
                f.fact("oom.exception", exc.as_str(), span(&exc));
            }
            if is_async {
                f.fact("torch.async_allocator", true, None);
            }
            // The header heads the traceback whose last line, when the paste has it, is the
            // message itself: the header restates it.
            f.wrapper = c.name("ipython").is_some();
            out.failure(f);
            return;
        }
        if text.contains("ALLOC_CONF") {
            recognize_alloc_conf(text, out);
        }
        if let Some(c) = TORCH_VERSION.captures(text) {
            let m = c.name("v").expect("group v");
            set_version(out, m.as_str(), Some((m.start(), m.end())));
        }
        if let Some(c) = MEMORY_FRACTION.captures(text) {
            let m = c.name("f").expect("group f");
            if let Ok(v) = m.as_str().parse::<f64>() {
                out.fact("torch.memory_fraction", v, Some((m.start(), m.end())));
            }
        }
    }
}

/// The words of the allocator's message that a pasted report may have lower-cased (issue
/// templates, chat tools, people retyping it), with their printed case. Each replacement has
/// the same length, so spans into the restored text are spans into the original.
const CASED: &[&str] = &[
    "CUDA out of memory",
    "HIP out of memory",
    "XPU out of memory",
    "Tried to allocate",
    "OutOfMemoryError",
    "RuntimeError",
    "(GPU ",
    "(NPU ",
    "GPU ",
    "total capacity",
    "reserved in total by PyTorch",
    "allocated by PyTorch",
    "reserved by PyTorch",
    "Including non-PyTorch memory",
    "Of the allocated memory",
    "Process ",
    " KiB",
    " MiB",
    " GiB",
    " TiB",
];

/// A lower-cased allocator message with its case restored, or `None` when the text is not
/// one (or already has its case).
fn restore_case(text: &str) -> Option<String> {
    if text.contains("Tried to allocate") || !text.contains("tried to allocate") {
        return None;
    }
    let lower = text.to_ascii_lowercase();
    if !lower.contains(" out of memory") {
        return None;
    }
    let mut out = text.to_string();
    for word in CASED {
        let needle = word.to_ascii_lowercase();
        let mut from = 0;
        while let Some(i) = lower[from..].find(&needle) {
            let at = from + i;
            // ASCII lower-casing keeps byte offsets, so the slice is on char boundaries.
            out.replace_range(at..at + word.len(), word);
            from = at + word.len();
        }
    }
    Some(out)
}

fn set_version(out: &mut Emit, version: &str, span: Option<(usize, usize)>) {
    out.fact("torch.version", version, span);
    let mut parts = version.split('.').filter_map(|p| p.parse::<u32>().ok());
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    out.fact(
        "torch.has_expandable_segments",
        (major, minor) >= (2, 1),
        span,
    );
}

/// Lines that end a wrapped OOM message, whatever the version.
fn message_complete(text: &str) -> bool {
    text.contains("but unallocated")
        || text.contains("reserved in total by PyTorch)")
        || text.contains("cached)")
        || text.contains("empty_cache")
        || text.contains("1EB memory")
}

/// Joins an OOM message that a tool wrapped over several lines (see
/// [`super::join_wrapped`]); a new OOM message on a following line is not a continuation.
fn join_wrapped(line: &Line<'_>) -> (Vec<String>, u32) {
    super::join_wrapped(line, message_complete, |piece| {
        piece.contains("out of memory. Tried")
    })
}

fn size(m: regex::Match<'_>) -> Option<u64> {
    parse_size(m.as_str(), SiBase::Binary)
}

fn span(m: &regex::Match<'_>) -> Option<(usize, usize)> {
    Some((m.start(), m.end()))
}

/// The failure a notebook's traceback header names. A wrapper: the message at the bottom of
/// the traceback, when the paste kept it, is the failure and carries the numbers; alone the
/// header still makes the incident.
fn notebook_header_failure(exception: &str) -> Failure {
    let mut f = match exception {
        "ResourceExhaustedError" => Failure::new("device-oom", id::TENSORFLOW, Domain::Device),
        // Python's own `MemoryError` (NumPy's `_ArrayMemoryError` is one): host RAM.
        _ => Failure::new("host-oom", id::UNKNOWN, Domain::Host),
    };
    f.fact("oom.wording", "notebook-header", None);
    f.wrapper = true;
    f
}

/// Reads a caching-allocator, MPS or runtime OOM. Returns whether the line was one.
fn recognize_oom(line: &Line<'_>, out: &mut Emit) -> bool {
    let text = line.text;
    // A front-end that reports the OOM as the reason a model did not load (InvokeAI's
    // `** model X could not be loaded: CUDA out of memory. ...`, `Failed to load model: ...`)
    // says the phase on the failure line itself.
    if LOAD_FAILED.is_match(text) {
        out.phase(PhaseMark::ModelLoad);
    }
    // An MPS message that a terminal or a paste wrapped is read joined with its pieces.
    let mps_joined = if text.contains("MPS backend out of memory") && !MPS.is_match(text) {
        super::join_whole(
            line,
            |t| MPS.is_match(t),
            |piece| piece.contains("MPS backend out of memory"),
        )
    } else {
        None
    };
    let mps_text = mps_joined.as_ref().map_or(text, |(t, _)| t.as_str());
    if let Some(c) = DIRECTML.captures(text) {
        let mut f = Failure::new("device-oom", id::PYTORCH, Domain::Device);
        f.fact("oom.backend", "directml", None)
            .fact("oom.wording", "directml", None);
        let m = c.name("req").expect("group req");
        if let Ok(v) = m.as_str().parse::<u64>() {
            f.fact("oom.requested_bytes", v, span(&m));
        }
        f.device = Some(0);
        out.failure(f);
        return true;
    }
    if let Some(c) = MPS.captures(mps_text) {
        let mut f = Failure::new("device-oom", id::PYTORCH, Domain::Device);
        f.fact("oom.backend", "mps", None)
            .fact("oom.wording", "mps", None);
        for (group, fact) in [
            ("req", "oom.requested_bytes"),
            ("alloc", "oom.allocated_bytes"),
            ("other", "oom.mps_other_bytes"),
            ("allowed", "oom.allowed_bytes"),
        ] {
            if let Some(m) = c.name(group) {
                if let Some(v) = size(m) {
                    f.fact(fact, v, span(&m));
                }
            }
        }
        f.device = Some(0);
        if let Some((joined, used)) = &mps_joined {
            out.consume(*used);
            f.text = Some(joined.clone());
        }
        out.failure(f);
        return true;
    }
    if HEAD.is_match(text) || HEAD_CUT.is_match(text) {
        let (candidates, used) = join_wrapped(line);
        // Keep the reading that yields the most numbers.
        let best = candidates
            .into_iter()
            .filter_map(|t| parse_allocator_oom(&t).map(|f| (f, t)))
            .max_by_key(|(f, _)| f.facts.len());
        if let Some((mut f, joined)) = best {
            out.consume(used);
            if used > 0 {
                f.text = Some(joined);
            }
            out.failure(f);
            return true;
        }
        // Pieces that complete the message but do not read with it (each carries a prefix
        // of its own): the line alone, with what it holds.
        if used > 0 {
            if let Some(f) = parse_allocator_oom(text) {
                out.failure(f);
                return true;
            }
        }
    }
    if let Some(c) = RUNTIME.captures(text) {
        // llama.cpp prints `CUDA error: out of memory` followed by `current device: N, in
        // function ggml_...`; that message belongs to its recogniser.
        let next = line.following(2);
        if next
            .iter()
            .any(|l| l.text.contains("current device:") || l.text.contains("ggml"))
            || text.contains("ggml")
            // Ollama restates its runner's last error; the llama.cpp/Ollama recognisers own it.
            || text.contains("llama runner process")
        {
            return false;
        }
        // Look-alikes that mention memory but are not OOMs are excluded by the regex itself
        // (`an illegal memory access`, pinned-memory fallbacks have their own words).
        let backend = c
            .name("b")
            .map(|b| b.as_str().to_ascii_lowercase())
            .unwrap_or_else(|| "cuda".into());
        let backend = if backend == "rocm" {
            "hip".to_string()
        } else {
            backend
        };
        let mut f = Failure::new("device-oom", id::PYTORCH, Domain::Device);
        let wording = if text.contains("CUBLAS") || text.contains("CUDNN") {
            "cuda-library"
        } else if text.contains("Cuda failure") {
            "nccl"
        } else if c
            .get(0)
            .is_some_and(|m| m.as_str().starts_with("CUDA out of memory"))
        {
            "torch-bare"
        } else if c.name("b").is_none() {
            // `cuda runtime error (2)` and `THCudaCheck`: before 1.0 the caching allocator
            // itself failed with the runtime's words, so this is an allocator OOM without
            // numbers, not a runtime failure beside the allocator.
            "thc"
        } else {
            "cuda-runtime"
        };
        f.fact("oom.backend", backend, None)
            .fact("oom.wording", wording, None);
        // c10's CUDA check (`CUDA error: out of memory`, 1.x and later) fails outside the
        // caching allocator, which reports tensors with its own message.
        if wording == "cuda-runtime" {
            f.fact("oom.outside_allocator", true, None);
        }
        out.failure(f);
        return true;
    }
    false
}

/// A paste that starts inside PyTorch 2.1+'s OOM message (`... PyTorch, and 1.91 GiB is
/// reserved by PyTorch but unallocated. If reserved but unallocated memory is large ...`):
/// the sentence is printed only by that message, so it is the OOM even without its head,
/// with the numbers the paste kept. Not when the head is just above: that message was read
/// whole (or deliberately not) from its first line.
fn recognize_message_tail(line: &Line<'_>, out: &mut Emit) -> bool {
    let above = line.preceding(12);
    if above.iter().any(|l| {
        l.text.contains("Tried to allocate")
            || l.text.contains("out of memory")
            || l.text.contains("OutOfMemoryError")
    }) {
        return false;
    }
    // A hard wrap may have put the message's middle on the line before: read it glued and
    // spaced, and keep the reading with the most numbers.
    let prev = above
        .first()
        .map(|l| l.text.trim_end().to_string())
        .filter(|t| !t.is_empty() && !t.contains("but unallocated"));
    let mut readings = vec![line.text.to_string()];
    if let Some(p) = prev {
        readings.push(format!("{p}{}", line.text));
        readings.push(format!("{p} {}", line.text));
    }
    let best = readings
        .into_iter()
        .filter_map(|t| parse_message_tail(&t).map(|f| (f, t)))
        .max_by_key(|(f, _)| f.facts.len());
    let Some((mut f, joined)) = best else {
        return false;
    };
    if joined != line.text {
        f.text = Some(joined);
    }
    out.failure(f);
    true
}

/// The numbers at the end of PyTorch 2.1+'s OOM message.
fn parse_message_tail(text: &str) -> Option<Failure> {
    let unalloc = MODERN_UNALLOC.captures(text)?.name("unalloc")?;
    let mut f = Failure::new("device-oom", id::PYTORCH, Domain::Device);
    f.fact("oom.backend", "cuda", None)
        .fact("oom.wording", "torch-message-tail", None);
    size(unalloc)?;
    allocator_figures(text, &mut f);
    if let Some(m) = SELF_PROCESS.captures(text).and_then(|c| c.name("used")) {
        if let Some(v) = size(m) {
            f.fact("oom.self_used_bytes", v, span(&m));
        }
    }
    f.fact("torch.has_expandable_segments", true, None);
    Some(f)
}

/// The allocator's figures that close the 2.1+ message, read piece by piece so a message
/// cut short (or a paste that starts inside it) yields what it has: `X is allocated by
/// PyTorch`, `with P allocated in private pools` (2.4+), `U is reserved by PyTorch but
/// unallocated`, and their sum as the reserved total. Returns whether private pools were
/// named.
fn allocator_figures(text: &str, f: &mut Failure) -> bool {
    let alloc = MODERN_ALLOC.captures(text).and_then(|c| c.name("alloc"));
    let unalloc = MODERN_UNALLOC
        .captures(text)
        .and_then(|c| c.name("unalloc"));
    if let Some(m) = alloc {
        if let Some(a) = size(m) {
            f.fact("oom.allocated_bytes", a, span(&m));
        }
    }
    if let Some(m) = unalloc {
        if let Some(u) = size(m) {
            f.fact("oom.reserved_unallocated_bytes", u, span(&m));
        }
    }
    if let (Some(a), Some(u)) = (alloc.and_then(size), unalloc.and_then(size)) {
        f.fact("oom.reserved_bytes", a + u, None);
    }
    let private = MODERN_PRIVATE
        .captures(text)
        .and_then(|c| c.name("private"))
        .and_then(|m| size(m).map(|p| (p, m)));
    if let Some((p, m)) = private {
        f.fact("oom.private_pool_bytes", p, span(&m));
    }
    private.is_some()
}

/// Parses the caching allocator's message (any generation) from joined text.
pub fn parse_allocator_oom(text: &str) -> Option<Failure> {
    let head = HEAD.captures(text)?;
    // A fragment pasted without its exception and backend (`Tried to allocate 216.00 MiB
    // (GPU 0; 7.92 GiB total capacity; ...)`) is an OOM only with the device figures behind it.
    if head.name("backend").is_none() && !LEGACY.is_match(text) && !MODERN_DEVICE.is_match(text) {
        return None;
    }
    let mut f = Failure::new("device-oom", id::PYTORCH, Domain::Device);
    let backend = head
        .name("backend")
        .map(|m| m.as_str().to_ascii_lowercase())
        .unwrap_or_else(|| "cuda".into());
    f.fact("oom.backend", backend.as_str(), None);
    if let Some(exc) = head.name("exc") {
        f.fact("oom.exception", exc.as_str(), span(&exc));
    }
    if let Some(req) = head.name("req") {
        if req.as_str().starts_with("more than") {
            f.fact("oom.requested_bytes", 1u64 << 60, span(&req));
        } else if let Some(v) = size(req) {
            f.fact("oom.requested_bytes", v, span(&req));
        }
    }

    let mut wording = "torch-bare";
    if let Some(c) = LEGACY.captures(text) {
        wording = if c.name("word").is_some_and(|w| w.as_str() == "cached") {
            "torch-cached"
        } else {
            "torch-legacy"
        };
        if let Some(d) = c.name("dev").and_then(|d| d.as_str().parse::<u32>().ok()) {
            f.device = Some(d);
            f.fact("oom.device", d, None);
        }
        for (group, fact) in [
            ("total", "oom.total_bytes"),
            ("alloc", "oom.allocated_bytes"),
            ("free", "oom.free_bytes"),
            ("allowed", "oom.allowed_bytes"),
        ] {
            if let Some(m) = c.name(group) {
                if let Some(v) = size(m) {
                    f.fact(fact, v, span(&m));
                }
            }
        }
        let num = |f: &Failure, n: &str| f.get(n).and_then(Value::as_f64);
        if let Some(m) = c.name("reserved") {
            if let Some(r) = size(m) {
                let r = r as f64;
                let (alloc, total, free) = (
                    num(&f, "oom.allocated_bytes"),
                    num(&f, "oom.total_bytes"),
                    num(&f, "oom.free_bytes"),
                );
                // 1.0-1.3 printed `amount_cached - amount_allocated` as "cached": memory held
                // by the allocator but in no tensor. Read as a total it makes a device where
                // the allocator holds less than its own tensors and everything else looks
                // like another process. Some builds printed the whole cache; the numbers tell
                // which: the unallocated reading must fit on the device with the rest.
                let cached_is_unallocated = wording == "torch-cached"
                    && match (alloc, total, free) {
                        (Some(a), Some(t), Some(fr)) => a + r + fr <= t * 1.02 || r < a,
                        (Some(a), ..) => r < a,
                        _ => false,
                    };
                if cached_is_unallocated {
                    f.fact("oom.reserved_unallocated_bytes", r, span(&m));
                    if let Some(a) = alloc {
                        f.fact("oom.reserved_bytes", a + r, None);
                    }
                } else {
                    f.fact("oom.reserved_bytes", r, span(&m));
                    if let Some(a) = alloc {
                        f.fact("oom.reserved_unallocated_bytes", (r - a).max(0.0), None);
                    }
                }
            }
        }
        // expandable_segments arrived in 2.1: a legacy message means this PyTorch lacks it.
        f.fact("torch.has_expandable_segments", false, None);
        f.fact(
            "torch.version",
            if wording == "torch-cached" {
                "<=1.3"
            } else {
                "<=2.0"
            },
            None,
        );
    } else if let Some(c) = MODERN_DEVICE.captures(text) {
        let typo = text.contains("capacty");
        wording = if typo { "torch-2.1" } else { "torch-2.2+" };
        let dev = c.name("dev").and_then(|d| d.as_str().parse::<u32>().ok());
        f.device = dev;
        if let Some(d) = dev {
            f.fact("oom.device", d, None);
        }
        if let Some(m) = c.name("total").filter(|m| size(*m).is_some()) {
            f.fact("oom.total_bytes", size(m).unwrap_or(0), span(&m));
        }
        if let Some(m) = c.name("free").filter(|m| size(*m).is_some()) {
            f.fact("oom.free_bytes", size(m).unwrap_or(0), span(&m));
        }
        // NVML's process list: other processes and this one.
        let listed: Vec<(u64, u64, (usize, usize))> = OTHER_PROCESS
            .captures_iter(text)
            .filter_map(|p| {
                let used = p.name("used")?;
                Some((
                    p.name("pid")?.as_str().parse::<u64>().ok()?,
                    size(used)?,
                    (used.start(), used.end()),
                ))
            })
            .collect();
        let self_listed = if text.contains("Including non-PyTorch memory") {
            None
        } else {
            self_in_process_list(text, &listed, c.name("total").and_then(size))
        };
        let mut others = 0u64;
        let mut count = 0u32;
        let mut largest: Option<(u64, u64)> = None;
        for (i, &(pid, used, _)) in listed.iter().enumerate() {
            if Some(i) == self_listed {
                continue;
            }
            others += used;
            count += 1;
            if largest.is_none_or(|(_, u)| used > u) {
                largest = Some((pid, used));
            }
        }
        if count > 0 {
            f.fact("oom.other_processes_bytes", others, None);
            f.fact("oom.other_process_count", count, None);
            if let Some((pid, used)) = largest {
                f.fact("oom.largest_other_process_pid", pid, None);
                f.fact("oom.largest_other_process_bytes", used, None);
            }
        } else if text.contains("Including non-PyTorch memory") || self_listed.is_some() {
            // NVML listed only this process: nobody else is on the device.
            f.fact("oom.other_processes_bytes", 0u64, None);
            f.fact("oom.other_process_count", 0u32, None);
        }
        if let Some(&(_, used, sp)) = self_listed.and_then(|i| listed.get(i)) {
            f.fact("oom.self_used_bytes", used, Some(sp));
        }
        if let Some(m) = SELF_PROCESS.captures(text).and_then(|c| c.name("used")) {
            if let Some(v) = size(m) {
                f.fact("oom.self_used_bytes", v, span(&m));
            }
        }
        if let Some(m) = ALLOWED.captures(text).and_then(|c| c.name("allowed")) {
            if let Some(v) = size(m) {
                f.fact("oom.allowed_bytes", v, span(&m));
            }
        }
        if allocator_figures(text, &mut f) {
            wording = "torch-2.4+";
        }
        // NVML's figure for this process below what PyTorch itself holds is not this
        // process: NVML cannot see it (a container's own pid namespace, WSL), and reports 0
        // bytes or a stranger's use. Read as this process's, it would make everything
        // PyTorch holds someone else's.
        let num = |f: &Failure, n: &str| f.get(n).and_then(Value::as_f64);
        if let (Some(used), Some(alloc)) = (
            num(&f, "oom.self_used_bytes"),
            num(&f, "oom.allocated_bytes"),
        ) {
            let held = alloc + num(&f, "oom.reserved_unallocated_bytes").unwrap_or(0.0);
            if used < 0.9 * held {
                f.facts.retain(|(n, ..)| *n != "oom.self_used_bytes");
            }
        }
        let exc = head.name("exc").map(|m| m.as_str()).unwrap_or("");
        if exc == "torch.OutOfMemoryError"
            || text.contains("PYTORCH_ALLOC_CONF")
            || text.contains("docs.pytorch.org")
        {
            wording = "torch-2.4+";
        }
        let version = match wording {
            "torch-2.1" => "2.1",
            "torch-2.4+" => ">=2.4",
            _ => ">=2.2",
        };
        f.fact("torch.version", version, None);
        f.fact("torch.has_expandable_segments", true, None);
    } else if backend == "xpu" || backend == "dpcpp" {
        wording = "xpu";
    }
    if let Some(d) = f.device {
        if !f.facts.iter().any(|(n, ..)| *n == "oom.device") {
            f.fact("oom.device", d, None);
        }
    }
    f.fact("oom.wording", wording, None);
    Some(f)
}

/// Which entry of NVML's process list is this process, when the message does not say.
///
/// PyTorch names itself `Including non-PyTorch memory, this process has ...` only when
/// NVML's pid equals its own. Inside a container (Docker, Kubernetes, Colab, most notebook
/// hosts) NVML reports host pids, so the process lists itself as `Process N has X memory
/// in use` and looks like a stranger holding the device. Its own entry is recognisable:
/// it holds at least what its allocator reserved (allocated + reserved-but-unallocated),
/// plus a CUDA context and library workspaces. The closest entry above the reservation,
/// within that margin, is taken as this process. Past the margin (an engine with gigabytes
/// outside the allocator: CUDA graphs, NCCL, custom kernels' workspaces) an entry still is
/// this process when it and the reservation could not both fit on the device as two
/// processes.
fn self_in_process_list(
    text: &str,
    listed: &[(u64, u64, (usize, usize))],
    total: Option<u64>,
) -> Option<usize> {
    let alloc = MODERN_ALLOC
        .captures(text)
        .and_then(|c| c.name("alloc"))
        .and_then(size)?;
    let unalloc = MODERN_UNALLOC
        .captures(text)
        .and_then(|c| c.name("unalloc"))
        .and_then(size)
        .unwrap_or(0);
    let reserved = (alloc + unalloc) as f64;
    let margin = (3.0 * 1073741824.0f64).max(0.15 * reserved);
    listed
        .iter()
        .enumerate()
        .filter(|(_, (_, used, _))| {
            let u = *used as f64;
            // Sizes are printed with two decimals: allow the rounding.
            u >= reserved * 0.995 && u <= reserved + margin
        })
        .min_by(|a, b| a.1.1.cmp(&b.1.1))
        .map(|(i, _)| i)
        .or_else(|| {
            // Two distinct processes would need more than the device holds (with the
            // rounding of two-decimal figures).
            let total = total? as f64;
            listed
                .iter()
                .enumerate()
                .filter(|(_, (_, used, _))| {
                    let u = *used as f64;
                    u >= reserved * 0.995 && u <= total * 1.005 && u + reserved > total * 1.02
                })
                .min_by(|a, b| a.1.1.cmp(&b.1.1))
                .map(|(i, _)| i)
        })
}

/// `backend:cudaMallocAsync` prints a multi-line report instead of the usual sentence:
/// `Allocation on device 0 would exceed allowed memory. (out of memory)` then aligned
/// `Currently allocated : X`, `Requested : Y`, `Device limit : Z`, `Free (according to CUDA): W`
/// and the user fraction (its value wrapped onto the next line). Pasted reports often put it
/// all on one line, so the fields are read from the joined text.
static ASYNC_FIELDS: LazyLock<[(Regex, &'static str); 5]> = LazyLock::new(|| {
    let f = |label: &str| static_regex(&format!(r"{label}\s*:\s*(?P<v>{SIZE})"));
    [
        (f("Currently allocated"), "oom.allocated_bytes"),
        (f("Requested"), "oom.requested_bytes"),
        (f("Device limit"), "oom.total_bytes"),
        (f(r"Free \(according to CUDA\)"), "oom.free_bytes"),
        (
            f(r"PyTorch limit \(set by user-supplied memory fraction\)"),
            "oom.allowed_bytes",
        ),
    ]
});

fn recognize_async(line: &Line<'_>, head: &regex::Captures<'_>, out: &mut Emit) {
    let mut f = Failure::new("device-oom", id::PYTORCH, Domain::Device);
    f.fact("oom.backend", "cuda", None)
        .fact("oom.wording", "cuda-malloc-async", None);
    f.fact("torch.async_allocator", true, None);
    if let Some(d) = head
        .name("dev")
        .and_then(|d| d.as_str().parse::<u32>().ok())
    {
        f.device = Some(d);
        f.fact("oom.device", d, None);
    }
    let mut used = 0;
    let mut joined = line.text.to_string();
    for next in line.following(8) {
        let t = next.text.trim();
        let is_field = [
            "Currently allocated",
            "Requested",
            "Device limit",
            "Free (according",
            "PyTorch limit",
        ]
        .iter()
        .any(|k| t.starts_with(k))
            || (t.starts_with(':') && t.len() < 48);
        if !is_field {
            break;
        }
        used += 1;
        joined.push(' ');
        joined.push_str(t);
    }
    let mut total = None;
    for (re, fact) in ASYNC_FIELDS.iter() {
        let Some(m) = re.captures(&joined).and_then(|c| c.name("v")) else {
            continue;
        };
        let Some(v) = size(m) else { continue };
        if *fact == "oom.total_bytes" {
            total = Some(v);
        }
        // No fraction set prints an absurd limit (17179869184.00 GiB): that is no cap at all.
        if *fact == "oom.allowed_bytes" && total.is_none_or(|t| v >= t) {
            continue;
        }
        let in_line = if used == 0 { span(&m) } else { None };
        f.fact(fact, v, in_line);
    }
    out.consume(used);
    if used > 0 {
        f.text = Some(joined);
    }
    out.failure(f);
}

/// The exception class alone, without the allocator's sentence: ComfyUI's error report
/// (`Exception Type: torch.cuda.OutOfMemoryError`, `Exception Message: Allocation on device`),
/// tools that print only `type(e).__name__`, a message truncated after the class, and
/// IPython's traceback header (`OutOfMemoryError      Traceback (most recent call last)`),
/// which a notebook paste keeps when the message at the bottom is cut.
static BARE_CLASS: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"^(?:[-*\s]*(?:\*\*)?Exception Type:(?:\*\*)?\s*)?(?P<exc>(?:torch\.)?(?:cuda\.)?OutOfMemoryError)\s*(?::|$|(?P<ipython>Traceback \(most recent call last\)))|^(?:!!! Exception during processing !!!\s*)?Allocation on device\s*\d*\s*$",
    )
});

/// Reads a line where the user sets PYTORCH_CUDA_ALLOC_CONF, ignoring PyTorch's own hint.
fn recognize_alloc_conf(text: &str, out: &mut Emit) {
    if text.contains("try setting")
        || text.contains("See documentation")
        || text.contains("If reserved")
    {
        return;
    }
    let Some(c) = ALLOC_CONF.captures(text) else {
        return;
    };
    let v = c.name("v").expect("group v");
    let conf = v.as_str().trim_end_matches([',', ';', ')']);
    out.fact("torch.alloc_conf", conf, Some((v.start(), v.end())));
    for opt in conf.split(',') {
        let mut kv = opt.splitn(2, ':');
        let (Some(k), Some(val)) = (kv.next(), kv.next()) else {
            continue;
        };
        match k.trim() {
            "expandable_segments" => out.fact(
                "torch.expandable_segments",
                val.trim().eq_ignore_ascii_case("true"),
                Some((v.start(), v.end())),
            ),
            "max_split_size_mb" => {
                if let Ok(n) = val.trim().parse::<f64>() {
                    out.fact("torch.max_split_size_mb", n, Some((v.start(), v.end())));
                }
            }
            "garbage_collection_threshold" => {
                if let Ok(n) = val.trim().parse::<f64>() {
                    out.fact(
                        "torch.garbage_collection_threshold",
                        n,
                        Some((v.start(), v.end())),
                    );
                }
            }
            "backend" => out.fact(
                "torch.async_allocator",
                val.trim() == "cudaMallocAsync",
                Some((v.start(), v.end())),
            ),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: f64 = 1073741824.0;
    const MIB: f64 = 1048576.0;

    fn run(text: &str) -> Emit {
        crate::ingest::log::engines::run_standalone(&PyTorch, text)
    }

    fn failure(text: &str) -> Failure {
        let out = run(text);
        out.records
            .into_iter()
            .find_map(|r| match r.obs {
                super::super::Observation::Failure(f) => Some(f),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no failure in {text}"))
    }

    fn num(f: &Failure, name: &str) -> Option<f64> {
        f.get(name).and_then(Value::as_f64)
    }

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() <= b * 0.0001 + 1.0)
    }

    #[test]
    fn a_fragment_without_the_exception_name() {
        // Intel's extension before 2.1 prints no free figure.
        let x = parse_allocator_oom("Tried to allocate 158.00 MiB (GPU 0; 15.11 GiB total capacity; 13.21 GiB already allocated; 14.98 GiB reserved in total by PyTorch)").expect("ipex legacy fragment");
        assert!(close(
            num(&x, "oom.reserved_unallocated_bytes"),
            (14.98 - 13.21) * GIB
        ));
        assert!(x.get("oom.free_bytes").is_none());
        let f = parse_allocator_oom("Tried to allocate 216.00 MiB (GPU 0; 7.92 GiB total capacity; 6.91 GiB already allocated; 98.56 MiB free; 7.02 GiB reserved in total by PyTorch)").expect("legacy fragment");
        assert!(close(num(&f, "oom.requested_bytes"), 216.0 * 1048576.0));
        assert!(close(num(&f, "oom.total_bytes"), 7.92 * 1073741824.0));
        assert!(parse_allocator_oom("Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.69 GiB of which 1.00 GiB is free.").is_some());
        // Without the device figures it is any program's sentence, not an OOM.
        assert!(parse_allocator_oom("Tried to allocate 5 buffers for the queue").is_none());
        assert!(parse_allocator_oom("Tried to allocate 2.00 GiB").is_none());
    }

    /// Every wording in the catalogue, with the byte values it must yield.
    /// (text, wording, device, requested, total, free, allocated, reserved_unallocated)
    #[test]
    fn every_wording_parses_to_bytes() {
        type Row = (
            &'static str,
            &'static str,
            Option<u32>,
            f64,
            Option<f64>,
            Option<f64>,
            Option<f64>,
            Option<f64>,
        );
        let rows: &[Row] = &[
            // 1.0-1.3 "cached"
            (
                "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 10.76 GiB total capacity; 9.56 GiB already allocated; 13.56 MiB free; 9.93 GiB cached)",
                "torch-cached",
                Some(0),
                20.0 * MIB,
                Some(10.76 * GIB),
                Some(13.56 * MIB),
                Some(9.56 * GIB),
                Some((9.93 - 9.56) * GIB),
            ),
            // 1.4-1.7
            (
                "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 1; 15.78 GiB total capacity; 12.01 GiB already allocated; 1.50 GiB free; 13.50 GiB reserved in total by PyTorch)",
                "torch-legacy",
                Some(1),
                2.0 * GIB,
                Some(15.78 * GIB),
                Some(1.5 * GIB),
                Some(12.01 * GIB),
                Some(1.49 * GIB),
            ),
            // 1.8-2.0 with allowed and the max_split_size_mb hint
            (
                "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB (GPU 0; 39.59 GiB total capacity; 18.00 GiB already allocated; 20.10 GiB free; 19.79 GiB allowed; 19.50 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF",
                "torch-legacy",
                Some(0),
                512.0 * MIB,
                Some(39.59 * GIB),
                Some(20.10 * GIB),
                Some(18.0 * GIB),
                Some(1.5 * GIB),
            ),
            // 2.1 typo
            (
                "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.02 GiB. GPU 0 has a total capacty of 23.65 GiB of which 595.06 MiB is free. Including non-PyTorch memory, this process has 23.05 GiB memory in use. Of the allocated memory 20.11 GiB is allocated by PyTorch, and 2.48 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF",
                "torch-2.1",
                Some(0),
                1.02 * GIB,
                Some(23.65 * GIB),
                Some(595.06 * MIB),
                Some(20.11 * GIB),
                Some(2.48 * GIB),
            ),
            // 2.2-2.3 with another process
            (
                "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB. GPU 0 has a total capacity of 79.15 GiB of which 31.25 MiB is free. Process 4112 has 40.02 GiB memory in use. Including non-PyTorch memory, this process has 39.09 GiB memory in use. Of the allocated memory 38.20 GiB is allocated by PyTorch, and 301.44 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
                "torch-2.2+",
                Some(0),
                256.0 * MIB,
                Some(79.15 * GIB),
                Some(31.25 * MIB),
                Some(38.2 * GIB),
                Some(301.44 * MIB),
            ),
            // 2.4+ private pools, this process listed first
            (
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB. GPU 3 has a total capacity of 44.52 GiB of which 12.25 MiB is free. Including non-PyTorch memory, this process has 44.50 GiB memory in use. Of the allocated memory 41.87 GiB is allocated by PyTorch, with 1.25 GiB allocated in private pools (e.g., CUDA Graphs), and 1.08 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)",
                "torch-2.4+",
                Some(3),
                64.0 * MIB,
                Some(44.52 * GIB),
                Some(12.25 * MIB),
                Some(41.87 * GIB),
                Some(1.08 * GIB),
            ),
            // empty device index
            (
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU  has a total capacity of 7.78 GiB of which 2.88 MiB is free. Of the allocated memory 7.12 GiB is allocated by PyTorch, and 210.11 MiB is reserved by PyTorch but unallocated.",
                "torch-2.4+",
                None,
                20.0 * MIB,
                Some(7.78 * GIB),
                Some(2.88 * MIB),
                Some(7.12 * GIB),
                Some(210.11 * MIB),
            ),
            // HIP with allowed and private pools
            (
                "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacity of 255.98 GiB of which 244.65 GiB is free. 1.05 GiB allowed; Of the allocated memory 1017.01 MiB is allocated by PyTorch, with 17.00 MiB allocated in private pools (e.g., HIP Graphs), and 54.99 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_HIP_ALLOC_CONF=expandable_segments:True to avoid fragmentation.",
                "torch-2.4+",
                Some(0),
                2.0 * MIB,
                Some(255.98 * GIB),
                Some(244.65 * GIB),
                Some(1017.01 * MIB),
                Some(54.99 * MIB),
            ),
            // XPU current and old (no free)
            (
                "torch.OutOfMemoryError: XPU out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 15.11 GiB of which 312.00 MiB is free. Of the allocated memory 13.50 GiB is allocated by PyTorch, and 1.01 GiB is reserved by PyTorch but unallocated. Please use `empty_cache` to release all unoccupied cached memory.",
                "torch-2.4+",
                Some(0),
                GIB,
                Some(15.11 * GIB),
                Some(312.0 * MIB),
                Some(13.5 * GIB),
                Some(1.01 * GIB),
            ),
            (
                "RuntimeError: XPU out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 15.11 GiB. Of the allocated memory 13.50 GiB is allocated by PyTorch, and 1.01 GiB is reserved by PyTorch but unallocated. Please use `empty_cache` to release all unoccupied cached memory.",
                "torch-2.2+",
                Some(0),
                GIB,
                Some(15.11 * GIB),
                None,
                Some(13.5 * GIB),
                Some(1.01 * GIB),
            ),
            // Ascend NPU legacy with "current active"
            (
                "RuntimeError: NPU out of memory. Tried to allocate 4.00 GiB (NPU 2; 60.96 GiB total capacity; 55.10 GiB already allocated; 55.10 GiB current active; 1.20 GiB free; 57.00 GiB reserved in total by PyTorch)",
                "torch-legacy",
                Some(2),
                4.0 * GIB,
                Some(60.96 * GIB),
                Some(1.2 * GIB),
                Some(55.10 * GIB),
                Some(1.9 * GIB),
            ),
            // bytes-sized request
            (
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512 bytes. GPU 0 has a total capacity of 10.00 GiB of which 0 bytes is free. Of the allocated memory 9.00 GiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated.",
                "torch-2.4+",
                Some(0),
                512.0,
                Some(10.0 * GIB),
                Some(0.0),
                Some(9.0 * GIB),
                Some(0.0),
            ),
        ];
        for (text, wording, dev, req, total, free, alloc, unalloc) in rows {
            let f = failure(text);
            assert_eq!(
                f.get("oom.wording").and_then(Value::as_str),
                Some(*wording),
                "{text}"
            );
            assert_eq!(f.device, *dev, "{text}");
            assert!(close(num(&f, "oom.requested_bytes"), *req), "req {text}");
            for (name, want) in [
                ("oom.total_bytes", total),
                ("oom.free_bytes", free),
                ("oom.allocated_bytes", alloc),
                ("oom.reserved_unallocated_bytes", unalloc),
            ] {
                match want {
                    Some(w) => assert!(
                        close(num(&f, name), *w),
                        "{name}: got {:?} want {w} in {text}",
                        num(&f, name)
                    ),
                    None => assert_eq!(num(&f, name), None, "{name} in {text}"),
                }
            }
        }
    }

    #[test]
    fn cached_is_what_the_allocator_holds_beyond_its_tensors() {
        // 1.0-1.3: "cached" = cached - allocated. Here it is smaller than the allocation,
        // which only that reading allows.
        let f = failure(
            "RuntimeError: CUDA out of memory. Tried to allocate 96.00 MiB (GPU 0; 4.00 GiB total capacity; 2.90 GiB already allocated; 24.28 MiB free; 29.64 MiB cached)",
        );
        assert!(close(
            num(&f, "oom.reserved_unallocated_bytes"),
            29.64 * MIB
        ));
        assert!(close(
            num(&f, "oom.reserved_bytes"),
            2.90 * GIB + 29.64 * MIB
        ));
        // Alloc + cached + free fits on the device: also the unallocated reading.
        let f = failure(
            "RuntimeError: CUDA out of memory. Tried to allocate 1.48 GiB (GPU 0; 8.00 GiB total capacity; 2.60 GiB already allocated; 282.65 MiB free; 3.32 GiB cached)",
        );
        assert!(close(num(&f, "oom.reserved_unallocated_bytes"), 3.32 * GIB));
    }

    /// NVML blind to this process (a container's pid namespace): `this process has 0 bytes
    /// memory in use` under 20 GiB that PyTorch itself holds is no figure for this process.
    #[test]
    fn nvml_blind_to_this_process_is_not_its_use() {
        let f = failure(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB. GPU 0 has a total capacity of 21.99 GiB of which 759.38 MiB is free. Including non-PyTorch memory, this process has 0 bytes memory in use. Of the allocated memory 20.52 GiB is allocated by PyTorch, and 102.08 MiB is reserved by PyTorch but unallocated.",
        );
        assert_eq!(num(&f, "oom.self_used_bytes"), None);
        let f = failure(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB. GPU 0 has a total capacity of 21.99 GiB of which 759.38 MiB is free. Including non-PyTorch memory, this process has 21.21 GiB memory in use. Of the allocated memory 20.52 GiB is allocated by PyTorch, and 102.08 MiB is reserved by PyTorch but unallocated.",
        );
        assert!(close(num(&f, "oom.self_used_bytes"), 21.21 * GIB));
    }

    #[test]
    fn a_container_lists_itself_under_its_host_pid() {
        let f = failure(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 518.00 MiB. GPU 0 has a total capacty of 21.67 GiB of which 4.06 MiB is free. Process 2417585 has 21.65 GiB memory in use. Of the allocated memory 21.32 GiB is allocated by PyTorch, and 1018.00 KiB is reserved by PyTorch but unallocated.",
        );
        assert_eq!(num(&f, "oom.other_processes_bytes"), Some(0.0));
        assert!(close(num(&f, "oom.self_used_bytes"), 21.65 * GIB));
        // A real neighbour next to this process stays a neighbour.
        let f = failure(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 250.00 MiB. GPU 0 has a total capacity of 79.25 GiB of which 10.75 MiB is free. Process 77 has 30.00 GiB memory in use. Process 78 has 49.20 GiB memory in use. Of the allocated memory 47.50 GiB is allocated by PyTorch, and 1.10 GiB is reserved by PyTorch but unallocated.",
        );
        assert!(close(num(&f, "oom.other_processes_bytes"), 30.0 * GIB));
        assert_eq!(num(&f, "oom.largest_other_process_pid"), Some(77.0));
        assert!(close(num(&f, "oom.self_used_bytes"), 49.2 * GIB));
        // Nobody in the list is large enough to be this process: all are others.
        let f = failure(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 23.65 GiB of which 3.06 MiB is free. Process 501 has 15.10 GiB memory in use. Of the allocated memory 7.91 GiB is allocated by PyTorch, and 90.00 MiB is reserved by PyTorch but unallocated.",
        );
        assert!(close(num(&f, "oom.other_processes_bytes"), 15.10 * GIB));
        // An engine with gigabytes outside its allocator (CUDA graphs, NCCL): past the margin,
        // but it and the reservation could not both be on the device.
        let f = failure(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 112.00 MiB. GPU 0 has a total capacty of 44.35 GiB of which 53.38 MiB is free. Process 3663367 has 44.28 GiB memory in use. Of the allocated memory 37.38 GiB is allocated by PyTorch, and 275.68 MiB is reserved by PyTorch but unallocated.",
        );
        assert_eq!(num(&f, "oom.other_processes_bytes"), Some(0.0));
        assert!(close(num(&f, "oom.self_used_bytes"), 44.28 * GIB));
    }

    #[test]
    fn a_lower_cased_paste_is_read() {
        let out = run(
            "\"cuda out of memory. tried to allocate 30.00 mib (gpu 0; 8.00 gib total capacity; 7.04 gib already allocated; 0 bytes free; 7.28 gib reserved in total by pytorch)\"",
        );
        let f = out
            .records
            .into_iter()
            .find_map(|r| match r.obs {
                super::super::Observation::Failure(f) => Some(f),
                _ => None,
            })
            .expect("a failure");
        assert!(close(num(&f, "oom.requested_bytes"), 30.0 * MIB));
        assert!(close(num(&f, "oom.total_bytes"), 8.0 * GIB));
        assert!(close(num(&f, "oom.reserved_bytes"), 7.28 * GIB));
        assert!(restore_case("we ran out of memory and tried to allocate less").is_some());
        assert!(restore_case("nothing to see here").is_none());
    }

    #[test]
    fn process_list_is_read() {
        let f = failure(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 23.69 GiB of which 100.00 MiB is free. Process 1001 has 12.00 GiB memory in use. Process 1002 has 2.00 GiB memory in use. Including non-PyTorch memory, this process has 9.50 GiB memory in use. Of the allocated memory 8.00 GiB is allocated by PyTorch, and 500.00 MiB is reserved by PyTorch but unallocated.",
        );
        assert!(close(num(&f, "oom.other_processes_bytes"), 14.0 * GIB));
        assert_eq!(num(&f, "oom.other_process_count"), Some(2.0));
        assert_eq!(num(&f, "oom.largest_other_process_pid"), Some(1001.0));
        assert!(close(num(&f, "oom.self_used_bytes"), 9.5 * GIB));
        assert!(close(
            num(&f, "oom.reserved_bytes"),
            8.0 * GIB + 500.0 * MIB
        ));
    }

    #[test]
    fn mps_both_forms() {
        let f = failure(
            "RuntimeError: MPS backend out of memory (MPS allocated: 17.88 GB, other allocations: 1.05 GB, max allowed: 18.13 GB). Tried to allocate 256.00 MB on private pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory allocations (may cause system failure).",
        );
        assert_eq!(f.get("oom.backend").and_then(Value::as_str), Some("mps"));
        assert!(close(num(&f, "oom.allowed_bytes"), 18.13 * GIB));
        assert!(close(num(&f, "oom.requested_bytes"), 256.0 * MIB));
        let f = failure(
            "RuntimeError: MPS backend out of memory (MPS allocated: 9.00 GiB, other allocations: 2.00 GiB). Tried to allocate 1.00 GiB on shared pool.",
        );
        assert_eq!(num(&f, "oom.allowed_bytes"), None);
        assert!(close(num(&f, "oom.mps_other_bytes"), 2.0 * GIB));
    }

    /// torch-directml prints the request only.
    #[test]
    fn directml_request() {
        let f = failure(
            "RuntimeError: Could not allocate tensor with 1073741824 bytes. There is not enough GPU video memory available!",
        );
        assert_eq!(
            f.get("oom.backend").and_then(Value::as_str),
            Some("directml")
        );
        assert_eq!(num(&f, "oom.requested_bytes"), Some(1073741824.0));
    }

    /// A notebook's traceback header alone is the failure it names, as a wrapper.
    #[test]
    fn a_notebook_traceback_header_names_the_failure() {
        for (text, kind) in [
            (
                "ResourceExhaustedError                    Traceback (most recent call last)",
                "device-oom",
            ),
            (
                "MemoryError                               Traceback (most recent call last)",
                "host-oom",
            ),
        ] {
            let f = failure(text);
            assert_eq!(f.kind, kind, "{text}");
            assert!(f.wrapper, "{text}");
        }
        let no_failure =
            |text: &str| crate::ingest::log::engines::emitted_failure(&run(text)).is_none();
        assert!(no_failure(
            "ValueError                                Traceback (most recent call last)"
        ));
        assert!(no_failure("Traceback (most recent call last):"));
    }

    #[test]
    fn runtime_and_host_forms() {
        for (text, wording) in [
            ("RuntimeError: CUDA error: out of memory", "cuda-runtime"),
            (
                "torch.AcceleratorError: CUDA error: out of memory",
                "cuda-runtime",
            ),
            (
                "RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/THCCachingAllocator.cpp:510",
                "thc",
            ),
            (
                "THCudaCheck FAIL file=/pytorch/aten/src/THC/THCGeneral.cpp line=383 error=2 : out of memory",
                "thc",
            ),
            (
                "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
                "cuda-library",
            ),
            (
                "node1:1234:1234 [0] misc/utils.cc:12 NCCL WARN Cuda failure 'out of memory'",
                "nccl",
            ),
            ("RuntimeError: CUDA out of memory.", "torch-bare"),
        ] {
            let f = failure(text);
            assert_eq!(
                f.get("oom.wording").and_then(Value::as_str),
                Some(wording),
                "{text}"
            );
            assert_eq!(f.kind, "device-oom");
        }
        let f = failure(
            "RuntimeError: [enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: not enough memory: you tried to allocate 34359738368 bytes.",
        );
        assert_eq!(f.kind, "host-oom");
        assert_eq!(num(&f, "host.requested_bytes"), Some(34359738368.0));
    }

    #[test]
    fn look_alikes_are_not_failures() {
        for text in [
            // A size past an exabyte is a corrupted one, not a request for memory.
            "RuntimeError: CUDA out of memory. Tried to allocate more than 1EB memory.",
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.",
            "WARNING: pinned memory fallback, out of pinned memory? no",
        ] {
            let out = run(text);
            assert!(
                !out.records
                    .iter()
                    .any(|r| matches!(r.obs, super::super::Observation::Failure(_))),
                "{text}"
            );
        }
    }

    #[test]
    fn alloc_conf_is_read_only_when_set_by_the_user() {
        let facts = |t: &str| -> Vec<(&'static str, Value)> {
            run(t)
                .records
                .into_iter()
                .filter_map(|r| match r.obs {
                    super::super::Observation::Fact { name, value } => Some((name, value)),
                    _ => None,
                })
                .collect()
        };
        let f =
            facts("export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,max_split_size_mb:128");
        assert!(f.contains(&("torch.expandable_segments", Value::Bool(true))));
        assert!(f.contains(&("torch.max_split_size_mb", Value::Num(128.0))));
        let f = facts("os.environ[\"PYTORCH_CUDA_ALLOC_CONF\"] = \"expandable_segments:False\"");
        assert!(f.contains(&("torch.expandable_segments", Value::Bool(false))));
        assert!(facts("If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.").is_empty());
        let f = facts("PyTorch version: 2.0.1+cu118");
        assert!(f.contains(&("torch.has_expandable_segments", Value::Bool(false))));
    }
}

#[cfg(test)]
mod pasted_shapes {
    use super::*;
    use crate::facts::evidence::InputName;
    use crate::ingest::log::clean::clean_line;
    use crate::ingest::log::engines::Observation;
    use std::sync::Arc;

    /// Runs the recogniser on the first line of `text`, with the rest as following lines.
    fn first_failure(text: &str) -> Option<Failure> {
        let input: InputName = Arc::from("t.log");
        let (first, rest) = text.split_once('\n').unwrap_or((text, ""));
        let cleaned = clean_line(first.as_bytes());
        let line = Line {
            input: &input,
            no: 1,
            text: &cleaned.text,
            meta: &cleaned.meta,
            siblings_before: &[],
            siblings_after: &[],
            before: &[],
            after: rest.as_bytes(),
        };
        let mut out = Emit::default();
        out.begin_line(&line);
        PyTorch.recognize(&line, &mut out);
        out.records.into_iter().find_map(|r| {
            if let Observation::Failure(f) = r.obs {
                Some(f)
            } else {
                None
            }
        })
    }

    fn num(f: &Failure, n: &str) -> Option<f64> {
        f.get(n).and_then(Value::as_f64)
    }

    #[test]
    fn async_report_multi_line_and_inline() {
        let multi = "torch.cuda.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)\nCurrently allocated     : 14.20 GiB\nRequested               : 2.50 GiB\nDevice limit            : 15.99 GiB\nFree (according to CUDA): 0 bytes\nPyTorch limit (set by user-supplied memory fraction)\n                        : 17179869184.00 GiB\n";
        let f = first_failure(multi).unwrap();
        assert_eq!(num(&f, "oom.requested_bytes"), Some(2.5 * 1073741824.0));
        assert_eq!(
            num(&f, "oom.total_bytes"),
            Some((15.99f64 * 1073741824.0).round())
        );
        assert_eq!(num(&f, "oom.free_bytes"), Some(0.0));
        assert_eq!(
            num(&f, "oom.allowed_bytes"),
            None,
            "no fraction set is not a cap"
        );
        let inline = "Allocation on device 0 would exceed allowed memory. (out of memory) Currently allocated : 1.50 GiB Requested : 30.00 MiB Device limit : 6.00 GiB Free (according to CUDA): 3.20 GiB";
        let f = first_failure(inline).unwrap();
        assert_eq!(
            num(&f, "oom.free_bytes"),
            Some((3.2f64 * 1073741824.0).round())
        );
        assert_eq!(num(&f, "oom.requested_bytes"), Some(30.0 * 1048576.0));
    }

    #[test]
    fn truncated_and_bare_messages() {
        let f = first_failure("CUDA out of memory. Tried to allocate 14.00 MiB. GPU 0 has a total capacty of 4.00 GiB of which 0 bytes is free. Of the allocated memory 3.41 GiB is allocated by PyTorch, and 65.23 MiB is reserved by").unwrap();
        assert_eq!(
            num(&f, "oom.allocated_bytes"),
            Some((3.41f64 * 1073741824.0).round())
        );
        assert_eq!(num(&f, "oom.reserved_unallocated_bytes"), None);
        assert!(first_failure("- **Exception Type:** torch.cuda.OutOfMemoryError").is_some());
        assert!(first_failure("torch.cuda.OutOfMemoryError: Allocation on device ").is_some());
        assert!(
            first_failure("!!! Exception during processing !!! Allocation on device").is_some()
        );
        assert!(
            first_failure(
                "OutOfMemoryError                          Traceback (most recent call last)"
            )
            .is_some()
        );
        assert!(
            first_failure(
                "ValueError                                Traceback (most recent call last)"
            )
            .is_none()
        );
        assert!(first_failure("    except torch.cuda.OutOfMemoryError:").is_none());
        assert!(first_failure("if isinstance(e, torch.OutOfMemoryError): retry()").is_none());
        assert!(first_failure("> RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 5.80 GiB total capacity; 4.36 GiB already allocated; 6.69 MiB free; 4.63 GiB reserved in total by PyTorch)").is_some());
    }

    #[test]
    fn a_request_cut_mid_number_is_still_an_oom() {
        // The paste ends inside the size: the OOM without its request.
        let f = first_failure("RuntimeError: CUDA out of memory. Tried to allocate 18").unwrap();
        assert_eq!(num(&f, "oom.requested_bytes"), None);
        assert_eq!(
            f.get("oom.exception").and_then(|v| v.as_str()),
            Some("RuntimeError")
        );
        // The rest follows, joined: the size read whole.
        let f = first_failure("RuntimeError: CUDA out of memory. Tried to allocate 18\n6.00 MiB (GPU 0; 10.76 GiB total capacity; 9.21 GiB already allocated; 95.44 MiB free; 9.57 GiB reserved in total by PyTorch)").unwrap();
        assert_eq!(num(&f, "oom.requested_bytes"), Some(186.0 * 1048576.0));
        assert!(num(&f, "oom.total_bytes").is_some());
        // The rest follows with a prefix of its own on every piece (a pod or host name):
        // the pieces complete the message but do not read with it; the line alone is kept.
        let f = first_failure("RuntimeError: CUDA out of memory. Tried to allocate 18\ntrainer-7d9f8 6.00 MiB (GPU 0; 10.76 GiB total capacity; 9.21 GiB already allocated; 95.44 MiB\ntrainer-7d9f8  free; 9.57 GiB reserved in total by PyTorch)").unwrap();
        assert_eq!(num(&f, "oom.requested_bytes"), None);
        // A number that is not the end of the text is no cut request.
        assert!(first_failure("Tried to allocate 18 blocks per step").is_none());
    }
}
