//! JAX / XLA and TensorFlow: `RESOURCE_EXHAUSTED`, `ResourceExhaustedError: OOM when
//! allocating tensor`, the BFC allocator's report, and the memory configuration.
//!
//! Sources: `ENGINE-MESSAGES.md` §8. Both runtimes share the BFC allocator, whose report
//! starts with `Allocator (GPU_0_bfc) ran out of memory trying to allocate 2.93GiB (rounded
//! to 3149744640)requested by op ...` (no space before `requested`), lists bins and chunks
//! (thousands of lines), and ends with a `Stats:` block (`Limit:`, `InUse:`, `MaxInUse:`,
//! `LargestFreeBlock:`). The error the program dies of (`OOM when allocating tensor with
//! shape[32,1024,1024] and type float ...`, `RESOURCE_EXHAUSTED: Out of memory while trying
//! to allocate N bytes.`) comes after the report, so the report's numbers are context facts
//! by the time it is seen. The report's first line is a failure only when no such error
//! follows it in the log.
//!
//! Not failures: `... ran out of memory trying to allocate 1.2GiB with freed_by_count=0. The
//! caller indicates that this is not a failure, but this may mean that there could be
//! performance gains if more memory were available.` and the garbage-collection notice; the
//! `TF_GPU_ALLOCATOR=cuda_malloc_async` hint in the report is a hint, not configuration.

use std::sync::LazyLock;

use regex::Regex;

use super::local::{size_bin, span, walk_back, walk_forward};
use super::{Domain, Emit, Failure, Line, Recognizer, id};
use crate::facts::units::{SiBase, parse_size};
use crate::ingest::log::pattern::static_regex;

static TF_OOM: LazyLock<Regex> = LazyLock::new(|| {
    // TensorFlow before 1.0 printed the shape as its proto (`shapedim { size: 10000 } dim {
    // size: 18 }`).
    static_regex(
        r"OOM when allocating tensor (?:with|of) shape\s*(?:\[(?P<shape>[\d,\s]*)\]|(?P<dims>dim\s*\{\s*size:\s*\d+\s*\}(?:\s*dim\s*\{\s*size:\s*\d+\s*\})*))(?: and type (?P<dtype>\w+))?(?: on (?P<dev>\S+?))?(?: by allocator (?P<alloc>\w+))?(?:[\s\n.]|$)",
    )
});
/// The stream executor creating a library handle (`cuda_blas.cc: failed to create cublas
/// handle: CUBLAS_STATUS_NOT_INITIALIZED`, `cuda_dnn.cc: Could not create cudnn handle:
/// CUDNN_STATUS_ALLOC_FAILED` or `..._INTERNAL_ERROR`): the handle's workspace is allocated
/// outside the preallocated pool, so these are the runtime finding the device already taken.
/// PyTorch's own `CUBLAS_STATUS_NOT_INITIALIZED when calling cublasCreate` is not read here:
/// it is as often a device-side assert reported late.
static LIBRARY_HANDLE: LazyLock<Regex> = LazyLock::new(|| {
    // From the handle's name: a hard wrap may cut the sentence's first words off.
    static_regex(
        r"(?i)(?:cublas handle: CUBLAS_STATUS_(?:NOT_INITIALIZED|ALLOC_FAILED)|cudnn handle: CUDNN_STATUS_(?:ALLOC_FAILED|INTERNAL_ERROR|NOT_INITIALIZED))",
    )
});
static CONTEXT_OOM: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"failed call to cu(?:DevicePrimaryCtxRetain|CtxCreate)\w*: CUDA_ERROR_OUT_OF_MEMORY",
    )
});
static DIGITS: LazyLock<Regex> = LazyLock::new(|| static_regex(r"\d+"));
static XLA_OOM: LazyLock<Regex> = LazyLock::new(|| {
    // TensorFlow's `OP_REQUIRES failed ... : Resource exhausted: Out of memory ...` spells the
    // status the older way.
    static_regex(
        r"(?:RESOURCE_EXHAUSTED|Resource exhausted):? Out of memory (?:while trying to allocate|allocating) (?P<n>\d+(?:\.\d+)?)\s*(?P<u>bytes|[KMGT]i?B|B)?",
    )
});
static XLA_REQUEST: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"RESOURCE_EXHAUSTED: Failed to allocate request for (?P<h>\S+) \((?P<b>\d+)B\) on device ordinal (?P<d>\d+)",
    )
});
static TPU_HBM: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"Ran out of memory in memory space (?P<space>\w+)\. Used (?P<u>\d+(?:\.\d+)?)(?P<uu>[KMGT])? of (?P<t>\d+(?:\.\d+)?)(?P<tu>[KMGT])? (?:hbm|vmem)",
    )
});
/// The TPU runtime's refusal to place a buffer: `Attempting to reserve 11.35G at the bottom of
/// memory. That was not possible. There are 12.18G free, 0B reserved, and 10.52G
/// reservable.` "Reservable" is the largest run it could still place at the bottom of
/// memory: free above the request but reservable below it is free memory in pieces.
static TPU_RESERVE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"Attempting to reserve (?P<r>\d+(?:\.\d+)?)(?P<ru>[KMGT])?B? at the bottom of memory\. That was not possible\. There are (?P<f>\d+(?:\.\d+)?)(?P<fu>[KMGT])?B? free, (?:\d+(?:\.\d+)?[KMGT]?B? reserved, and )?(?P<a>\d+(?:\.\d+)?)(?P<au>[KMGT])?B? reservable",
    )
});
/// The TPU runtime's refusal of a buffer: `Attempting to allocate 382.86M. That was not
/// possible. There are 1.05G free.`, where the free memory was in pieces followed by `The
/// largest contiguous region of free memory is 314.55M due to fragmentation.` (older runtimes:
/// `Due to fragmentation, the largest contiguous region of free memory is 314.55M.`).
static TPU_ALLOCATE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"Attempting to allocate (?P<r>\d+(?:\.\d+)?)(?P<ru>[KMGT])?B?\. That was not possible\. There are (?P<f>\d+(?:\.\d+)?)(?P<fu>[KMGT])?B? free\.(?: (?:Due to fragmentation, the|The) largest contiguous region of free memory is (?P<a>\d+(?:\.\d+)?)(?P<au>[KMGT])?B?)?",
    )
});
static RESOURCE_EXHAUSTED: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?:XlaRuntimeError|JaxRuntimeError|ResourceExhaustedError|errors_impl\.ResourceExhaustedError)?:?\s*(?:RESOURCE_EXHAUSTED|Resource exhausted):?\s*(?P<rest>.*)",
    )
});
static BFC_HEAD: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"Allocator \((?P<name>[^)]+)\) ran out of memory trying to allocate (?P<h>\d+(?:\.\d+)?\s*[KMGT]?i?B)(?: \(rounded to (?P<r>\d+)\))?",
    )
});
static STAT: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"^(?P<k>Limit|InUse|MaxInUse|LargestFreeBlock):\s+(?P<v>\d+)\s*$")
});
/// A free chunk TensorFlow 1.x lists under `Bin for 1.50GiB was 256.00MiB, Chunk State:`
/// (`Size: 1.19GiB | Requested Size: 0B | in_use: 0, prev: ...`): the chunks of the bin the
/// request maps to. The allocator searches that bin and every larger one, so when the
/// request failed, none of those held a chunk as large as it, and the largest of these is
/// the largest free chunk in the pool (TensorFlow 2 prints it as `LargestFreeBlock`).
static FREE_CHUNK: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"^Size: (?P<s>\d+(?:\.\d+)?\s*[KMGT]?i?B) \| Requested Size: [^|]*\| in_use: 0\b")
});
static SUM_IN_USE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"Sum Total of in-use chunks: (?P<v>\d+(?:\.\d+)?\s*[KMGT]?i?B)")
});
static REGION: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"(?:memory_limit_|memoryLimit_): (?P<l>\d+) available bytes: (?P<a>\d+)")
});
static SUMMARY: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"total free in pool (?P<f>\d+(?:\.\d+)?\s*[KMGT]?i?B?), largest free chunk usable by \w+ end (?P<l>\d+(?:\.\d+)?\s*[KMGT]?i?B?),.*?pool limit (?P<lim>\d+(?:\.\d+)?\s*[KMGT]?i?B?)",
    )
});
static BACKEND_POOL: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"XLA backend (?:allocating|will use up to) (?P<n>\d+) bytes on device (?P<d>\d+)")
});
static TF_DEVICE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"Created (?:TensorFlow )?device \(?/job:\w+/replica:\d+/task:\d+/device:GPU:(?P<d>\d+) with (?P<n>\d+) MB memory",
    )
});
/// TensorFlow's description of a GPU it found: 1.x prints the card's size and what was free
/// when the process started (`totalMemory: 10.92GiB freeMemory: 355.44MiB`, under `Found
/// device 0 with properties:`), 2.0-2.3 the size only (`deviceMemorySize: 10.92GiB`).
static TF_FOUND_MEMORY: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?:totalMemory|deviceMemorySize): (?P<t>\d+(?:\.\d+)?\s*[KMGT]i?B)(?: freeMemory: (?P<f>\d+(?:\.\d+)?\s*[KMGT]i?B))?",
    )
});
static TF_FOUND_DEVICE: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"Found device (?P<d>\d+) with properties"));
/// `per_process_gpu_memory_fraction=0.4` (TensorFlow 1.x's `GPUOptions`): a pool smaller
/// than the card on purpose.
static TF_MEMORY_FRACTION: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"per_process_gpu_memory_fraction\s*=\s*(?P<v>\d*\.\d+|1|0)\b"));
/// How many lines above a failed device allocation an earlier, smaller one is looked for.
const START_RETRY_LOOKBACK: usize = 12;
/// A failed device allocation as the stream executor prints it, after `failed to `. ROCm
/// builds print HIP's code: `hipError_t(1002)` (hipErrorMemoryAllocation, before HIP
/// renumbered it) or `hipErrorOutOfMemory`.
const DEVICE_ALLOC: &str = r"allocate (?P<h>\S+ ?[KMGT]?i?B?) \((?P<b>\d+) bytes\) from device: (?P<code>CUDA_ERROR_OUT_OF_MEMORY|hipError_t\((?:1002|2)\)|hipErrorOutOfMemory|hipErrorMemoryAllocation)";
/// [`DEVICE_ALLOC`] alone: all that is left of an earlier one in the raw lines above when a
/// terminal wrapped it after `failed to`.
static DEVICE_ALLOC_SIZE: LazyLock<Regex> = LazyLock::new(|| static_regex(DEVICE_ALLOC));
static TF_STARTUP_FAIL: LazyLock<Regex> =
    LazyLock::new(|| static_regex(&format!("failed to {DEVICE_ALLOC}")));
static BA_STAT: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?P<k>total allocation|preallocated temp allocation):\s*(?P<v>\d+(?:\.\d+)?\s*[KMGT]?i?B)",
    )
});
static ENV: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r#"(?P<k>XLA_PYTHON_CLIENT_MEM_FRACTION|XLA_PYTHON_CLIENT_PREALLOCATE|XLA_PYTHON_CLIENT_ALLOCATOR|TF_GPU_ALLOCATOR|TF_FORCE_GPU_ALLOW_GROWTH)['"]?\]?\s*[=:]\s*['"]?(?P<v>[\w.]+)"#,
    )
});
static GROWTH_CALL: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"set_memory_growth\([^,]+,\s*(?P<v>True|False)\)"));
static MEMORY_LIMIT: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"LogicalDeviceConfiguration\(\s*memory_limit\s*=\s*(?P<v>\d+)"));

/// The graph node TensorFlow names under a failed op (`[[Node: name = Op[...]]]` in 1.x,
/// `[[{{node name}}]]` in 2.x), on the error's line or the one after it.
static TF_NODE: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"\[\[(?:Node: |\{\{node )(?P<n>[\w/.:\-]+)"));

/// The JAX/XLA and TensorFlow recogniser.
pub struct Xla;

impl Recognizer for Xla {
    fn engine(&self) -> &'static str {
        id::JAX
    }

    fn anchors(&self) -> &'static [&'static str] {
        &[
            "OOM when allocating",
            "RESOURCE_EXHAUSTED",
            "Resource exhausted:",
            "ran out of memory trying to allocate",
            "Ran out of memory in memory space",
            "Limit:",
            "InUse:",
            "LargestFreeBlock:",
            "Sum Total of in-use chunks",
            // TensorFlow 1.x's dump of the free chunks in the request's bin.
            "Chunk State:",
            "memory_limit_:",
            "memoryLimit_:",
            "total free in pool",
            "XLA backend",
            "Created device",
            "Created TensorFlow device",
            "totalMemory:",
            "deviceMemorySize:",
            "per_process_gpu_memory_fraction",
            "CUDA_ERROR_OUT_OF_MEMORY",
            "cublas handle",
            "cudnn handle",
            "from device: hipError",
            "XLA_PYTHON_CLIENT",
            "TF_GPU_ALLOCATOR",
            "TF_FORCE_GPU_ALLOW_GROWTH",
            "set_memory_growth",
            "memory_limit=",
            "[[Node: ",
            "{{node ",
        ]
    }

    fn recognize(&self, line: &Line<'_>, out: &mut Emit) {
        let text = line.text;
        // The op's message cut short by a wrap before its allocator (`... on /job:` /
        // `localhost/replica:0/task:0/device:GPU:2 by allocator GPU_2_bfc`), or inside the
        // shape, is read joined with its pieces: the device is in the part that was cut.
        let tf_joined = if text.contains("OOM when allocating") && !tf_complete(text) {
            super::join_whole(line, tf_complete, |piece| {
                piece.contains("OOM when allocating")
            })
        } else {
            None
        };
        let tf_text = tf_joined.as_ref().map_or(text, |(t, _)| t.as_str());
        if let Some(c) = TF_OOM.captures(tf_text) {
            out.engine(id::TENSORFLOW);
            let mut f = tf_failure(&c);
            if let Some(n) = TF_NODE.captures(tf_text).and_then(|n| n.name("n")) {
                let span = (tf_joined.is_none()).then_some((n.start(), n.end()));
                f.fact("tf.node", n.as_str(), span);
            }
            // The kernel's `OP_REQUIRES failed at ...` warning precedes the exception that
            // repeats it.
            f.wrapper = tf_text.contains("OP_REQUIRES failed");
            if let Some((joined, used)) = &tf_joined {
                out.consume(*used);
                f.text = Some(joined.clone());
            }
            out.failure(f);
            return;
        }
        if text.contains("Chunk State:") {
            let mut largest: Option<u64> = None;
            walk_forward(line, 64, |raw| {
                let t = raw.trim();
                let own = t.find("Size: ").map(|at| &t[at..]).unwrap_or("");
                match FREE_CHUNK.captures(own) {
                    Some(c) => {
                        if let Some(b) = parse_size(&c["s"], SiBase::Binary) {
                            largest = largest.max(Some(b));
                        }
                        true
                    }
                    None => false,
                }
            });
            if let Some(b) = largest {
                out.fact("xla.largest_free_block_bytes", b, None);
            }
            return;
        }
        // The node under the failed op, on the line after its message.
        if let Some(n) = TF_NODE.captures(text).and_then(|n| n.name("n")) {
            out.engine(id::TENSORFLOW);
            out.fact("tf.node", n.as_str(), Some((n.start(), n.end())));
            return;
        }
        if let Some(c) = TPU_HBM.captures(text) {
            let mut f = xla_failure(line, "tpu-compile");
            f.fact("oom.backend", "tpu", None);
            let g = |n: &str, u: &str| size_bin(n, if u.is_empty() { "B" } else { u });
            let (uu, tu) = (
                c.name("uu").map(|m| m.as_str()).unwrap_or(""),
                c.name("tu").map(|m| m.as_str()).unwrap_or(""),
            );
            if let Some(m) = c.name("u") {
                if let Some(b) = g(m.as_str(), uu) {
                    f.fact("xla.program_bytes", b, span(&m));
                }
            }
            if let Some(m) = c.name("t") {
                if let Some(b) = g(m.as_str(), tu) {
                    f.fact("oom.total_bytes", b, span(&m));
                }
            }
            out.failure(f);
            return;
        }
        if let Some(c) = XLA_REQUEST.captures(text) {
            let mut f = xla_failure(line, "xla-runtime");
            if let Some(m) = c.name("b") {
                if let Ok(b) = m.as_str().parse::<u64>() {
                    f.fact("oom.requested_bytes", b, span(&m));
                }
            }
            if let Some(d) = c.name("d").and_then(|d| d.as_str().parse::<u32>().ok()) {
                f.device = Some(d);
                f.fact("oom.device", d, None);
            }
            buffer_assignment(line, &mut f);
            out.failure(f);
            return;
        }
        // A status line cut short by a hard wrap (`... Resource exhausted: Out` / `of memory
        // while trying to allocate 5520758552 bytes.`) is read joined with its pieces.
        let joined = if (text.contains("Resource exhausted") || text.contains("RESOURCE_EXHAUSTED"))
            && !XLA_OOM.is_match(text)
        {
            super::join_whole(
                line,
                |t| XLA_OOM.is_match(t),
                |piece| {
                    piece.contains("RESOURCE_EXHAUSTED") || piece.contains("Resource exhausted")
                },
            )
        } else {
            None
        };
        let (text, used): (&str, u32) = match &joined {
            Some((t, used)) => (t.as_str(), *used),
            None => (text, 0),
        };
        if let Some(c) = XLA_OOM.captures(text) {
            out.consume(used);
            let mut f = xla_failure(line, "xla-runtime");
            if used > 0 {
                // Spans below point into the joined text.
                f.text = Some(text.to_string());
            }
            if let Some(m) = c.name("n") {
                let unit = c.name("u").map(|u| u.as_str()).unwrap_or("bytes");
                if let Some(b) = size_bin(m.as_str(), unit) {
                    f.fact("oom.requested_bytes", b, span(&m));
                }
            }
            buffer_assignment(line, &mut f);
            out.failure(f);
            return;
        }
        if let Some(c) = BFC_HEAD.captures(text) {
            if text.contains("freed_by_count") || text.contains("not a failure") {
                return;
            }
            let name = c.name("name").expect("group name");
            out.fact("xla.allocator", name.as_str().to_string(), span(&name));
            // The error the program dies of follows the report; only without one is this
            // line the failure.
            let mut followed = false;
            walk_forward(line, 6000, |raw| {
                if raw.contains("OOM when allocating")
                    || raw.contains("RESOURCE_EXHAUSTED")
                    || raw.contains("ResourceExhaustedError")
                {
                    followed = true;
                    return false;
                }
                true
            });
            if followed {
                return;
            }
            let mut f = xla_failure(line, "xla-bfc");
            f.fact("xla.allocator", name.as_str().to_string(), span(&name));
            let req = c
                .name("r")
                .and_then(|r| r.as_str().parse::<u64>().ok().map(|v| (v, span(&r))))
                .or_else(|| {
                    c.name("h")
                        .and_then(|h| parse_size(h.as_str(), SiBase::Binary).map(|v| (v, span(&h))))
                });
            if let Some((v, sp)) = req {
                f.fact("oom.requested_bytes", v, sp);
            }
            // The report's stats block below it.
            walk_forward(line, 6000, |raw| {
                let t = raw.trim();
                if let Some(s) = STAT.captures(t) {
                    if let Ok(v) = s["v"].parse::<u64>() {
                        if let Some(n) = stat_fact(&s["k"]) {
                            f.fact(n, v, None);
                        }
                    }
                }
                !t.starts_with("LargestFreeBlock")
            });
            out.failure(f);
            return;
        }
        // Loading a compiled kernel (a CUBIN or PTX module) needs device memory outside the
        // runtime's preallocated pool; when none is left the load fails with the driver's
        // out-of-memory error, whatever status wraps it (INTERNAL, UNKNOWN).
        if CUDA_MODULE_LOAD.is_match(text) {
            out.failure(xla_failure(line, "cuda-module-load"));
            return;
        }
        // Older TPU runtimes word the status `Resource exhausted:` (TensorFlow's own
        // `Resource exhausted: OOM when allocating` was read above).
        if text.contains("RESOURCE_EXHAUSTED") || text.contains("Resource exhausted: Attempting to")
        {
            // Other RESOURCE_EXHAUSTED texts: only memory ones.
            if let Some(c) = RESOURCE_EXHAUSTED.captures(text) {
                let rest = c.name("rest").map(|m| m.as_str()).unwrap_or("");
                let l = rest.to_ascii_lowercase();
                if l.contains("out of memory")
                    || l.contains("failed to allocate")
                    || l.contains("attempting to reserve")
                    || l.contains("attempting to allocate")
                {
                    let mut f = xla_failure(line, "xla-runtime");
                    if l.contains("attempting to reserve") {
                        tpu_reserve(line, text, &mut f);
                    } else if l.contains("attempting to allocate") {
                        tpu_allocate(text, &mut f);
                    }
                    out.failure(f);
                }
            }
            return;
        }
        // The status may sit on the next piece of a hard-wrapped line: how many pieces the
        // message took, when it is one.
        let handle_pieces = if LIBRARY_HANDLE.is_match(text) {
            Some(0)
        } else if text.contains("cublas handle") || text.contains("cudnn handle") {
            super::join_whole(line, |t| LIBRARY_HANDLE.is_match(t), |_| false).map(|(_, n)| n)
        } else {
            None
        };
        if let Some(used) = handle_pieces {
            out.consume(used);
            let engine = xla_engine(line);
            out.engine(engine);
            let mut f = Failure::new("device-oom", engine, Domain::Device);
            f.fact("oom.backend", "cuda", None)
                .fact("oom.wording", "cuda-library", None)
                .fact("xla.library_handle_failed", true, None);
            out.failure(f);
            return;
        }
        // Creating the CUDA context itself failed for memory: the device was already full
        // before this process allocated anything.
        if CONTEXT_OOM.is_match(text) {
            out.engine(id::TENSORFLOW);
            let mut f = Failure::new("device-oom", id::TENSORFLOW, Domain::Device);
            f.fact("oom.backend", "cuda", None)
                .fact("oom.wording", "cuda-context", None)
                .fact("xla.context_create_failed", true, None);
            out.failure(f);
            return;
        }
        if let Some(c) = TF_STARTUP_FAIL.captures(text) {
            out.engine(id::TENSORFLOW);
            let mut f = Failure::new("device-oom", id::TENSORFLOW, Domain::Device);
            let backend = if c["code"].starts_with("hip") {
                "rocm"
            } else {
                "cuda"
            };
            f.fact("oom.backend", backend, None)
                .fact("oom.wording", "tf-startup", None)
                .fact("xla.startup_alloc_failed", true, None);
            if let Some(m) = c.name("b") {
                if let Ok(b) = m.as_str().parse::<u64>() {
                    f.fact("oom.requested_bytes", b, span(&m));
                }
            }
            // TensorFlow retries with 90% of the size each time: one failure, many lines.
            f.wrapper = line
                .preceding(1)
                .iter()
                .any(|l| TF_STARTUP_FAIL.is_match(&l.text));
            // A pool reserved at start shrinks from one try to the next. A request larger
            // than one that failed just before is the allocator growing on demand while the
            // program runs (allow_growth, an on-demand allocator): not the start.
            let asked = c.name("b").and_then(|m| m.as_str().parse::<u64>().ok());
            let grew = asked.is_some_and(|asked| {
                line.preceding(START_RETRY_LOOKBACK).iter().any(|l| {
                    DEVICE_ALLOC_SIZE
                        .captures(&l.text)
                        .and_then(|p| p.name("b").and_then(|m| m.as_str().parse::<u64>().ok()))
                        .is_some_and(|before| before < asked)
                })
            });
            if grew {
                out.fact("xla.device_alloc_grew", true, None);
                f.wrapper = true;
            }
            out.failure(f);
            return;
        }
        // Accounting.
        if let Some(c) = STAT.captures(text.trim()) {
            let m = c.name("v").expect("group v");
            if let (Ok(v), Some(n)) = (m.as_str().parse::<u64>(), stat_fact(&c["k"])) {
                out.fact(n, v, span(&m));
            }
            return;
        }
        if let Some(c) = SUM_IN_USE.captures(text) {
            let m = c.name("v").expect("group v");
            if let Some(b) = parse_size(m.as_str(), SiBase::Binary) {
                out.fact("xla.in_use_bytes", b, span(&m));
            }
            return;
        }
        if let Some(c) = REGION.captures(text) {
            // `available bytes` is the limit minus what the pool has reserved from the
            // device, not the free chunks inside it; only the limit is used.
            let l = c.name("l").expect("l");
            if let Ok(v) = l.as_str().parse::<u64>() {
                out.fact("xla.pool_limit_bytes", v, span(&l));
            }
            return;
        }
        if let Some(c) = SUMMARY.captures(text) {
            for (g, n) in [
                ("f", "xla.free_in_pool_bytes"),
                ("l", "xla.largest_free_block_bytes"),
                ("lim", "xla.pool_limit_bytes"),
            ] {
                if let Some(m) = c.name(g) {
                    if let Some(b) = parse_size(m.as_str(), SiBase::Binary) {
                        out.fact(n, b, span(&m));
                    }
                }
            }
            return;
        }
        if let Some(c) = BACKEND_POOL.captures(text) {
            out.engine(id::JAX);
            let m = c.name("n").expect("group n");
            if let Ok(v) = m.as_str().parse::<u64>() {
                out.fact("xla.pool_limit_bytes", v, span(&m));
            }
            return;
        }
        if let Some(c) = TF_FOUND_MEMORY.captures(text) {
            found_device_memory(line, &c, out);
            return;
        }
        if let Some(c) = TF_DEVICE.captures(text) {
            out.engine(id::TENSORFLOW);
            let m = c.name("n").expect("group n");
            if let Some(b) = size_bin(m.as_str(), "MiB") {
                out.fact("xla.device_memory_bytes", b, span(&m));
            }
            return;
        }
        // Configuration the user set (never the allocator's own hint).
        if text.contains("will improve the situation")
            || text.contains("may improve the situation")
            || text.contains("environment variable")
        {
            return;
        }
        for c in ENV.captures_iter(text) {
            let m = c.name("v").expect("group v");
            let v = m.as_str();
            match &c["k"] {
                "XLA_PYTHON_CLIENT_MEM_FRACTION" => {
                    out.engine(id::JAX);
                    if let Ok(x) = v.parse::<f64>() {
                        if x > 0.0 && x <= 1.0 {
                            out.fact("xla.mem_fraction", x, span(&m));
                        }
                    }
                }
                "XLA_PYTHON_CLIENT_PREALLOCATE" => {
                    out.engine(id::JAX);
                    let on = !matches!(v.to_ascii_lowercase().as_str(), "false" | "0");
                    out.fact("xla.preallocate", on, span(&m));
                }
                "XLA_PYTHON_CLIENT_ALLOCATOR" => {
                    out.fact("xla.client_allocator", v.to_string(), span(&m))
                }
                "TF_GPU_ALLOCATOR" => out.fact("tf.gpu_allocator", v.to_string(), span(&m)),
                _ => {
                    let on = matches!(v.to_ascii_lowercase().as_str(), "true" | "1");
                    out.fact("tf.memory_growth", on, span(&m));
                }
            }
        }
        if let Some(c) = TF_MEMORY_FRACTION.captures(text) {
            let m = c.name("v").expect("group v");
            if let Ok(x) = m.as_str().parse::<f64>() {
                if x > 0.0 && x <= 1.0 {
                    out.fact("tf.memory_fraction", x, span(&m));
                }
            }
        }
        if let Some(c) = GROWTH_CALL.captures(text) {
            let m = c.name("v").expect("group v");
            out.fact("tf.memory_growth", m.as_str() == "True", span(&m));
        }
        if let Some(c) = MEMORY_LIMIT.captures(text) {
            let m = c.name("v").expect("group v");
            if let Some(b) = size_bin(m.as_str(), "MiB") {
                out.fact("tf.memory_limit_bytes", b, span(&m));
            }
        }
    }
}

fn stat_fact(k: &str) -> Option<&'static str> {
    Some(match k {
        "Limit" => "xla.pool_limit_bytes",
        "InUse" => "xla.in_use_bytes",
        "MaxInUse" => "xla.peak_in_use_bytes",
        "LargestFreeBlock" => "xla.largest_free_block_bytes",
        _ => return None,
    })
}

/// Bytes per element of a TensorFlow dtype name.
fn dtype_size(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "float" | "float32" | "int32" | "uint32" | "qint32" => 4,
        "half" | "float16" | "bfloat16" | "int16" | "uint16" => 2,
        "double" | "float64" | "int64" | "uint64" | "complex64" => 8,
        "complex128" => 16,
        "int8" | "uint8" | "bool" | "qint8" | "quint8" | "float8_e4m3fn" | "float8_e5m2" => 1,
        _ => return None,
    })
}

/// Whether a TensorFlow op's OOM message is whole: its shape and the allocator that ends it.
fn tf_complete(text: &str) -> bool {
    TF_OOM
        .captures(text)
        .is_some_and(|c| c.name("alloc").is_some())
}

fn tf_failure(c: &regex::Captures<'_>) -> Failure {
    let mut f = Failure::new("device-oom", id::TENSORFLOW, Domain::Device);
    f.fact("oom.wording", "tf-op", None);
    let shape = c
        .name("shape")
        .or_else(|| c.name("dims"))
        .expect("one of the shape groups");
    // Both spellings hold the dimensions as their only numbers.
    let dims: Vec<u64> = DIGITS
        .find_iter(shape.as_str())
        .filter_map(|d| d.as_str().parse::<u64>().ok())
        .collect();
    let listed: Vec<String> = dims.iter().map(u64::to_string).collect();
    f.fact(
        "tf.tensor_shape",
        format!("[{}]", listed.join(",")),
        span(&shape),
    );
    if let Some(first) = dims.first() {
        f.fact("tf.batch_dim", *first, None);
    }
    // TensorFlow 1.x printed the shape alone (`OOM when allocating tensor with shape[90,17,
    // 17,32]`); without the dtype the size of the request is not known.
    if let Some(dtype) = c.name("dtype") {
        f.fact("tf.tensor_dtype", dtype.as_str().to_string(), span(&dtype));
        if let Some(sz) = dtype_size(dtype.as_str()) {
            let n: u64 = dims.iter().fold(1u64, |a, d| a.saturating_mul(*d));
            f.fact("oom.requested_bytes", n.saturating_mul(sz), span(&shape));
        }
    }
    if let Some(dev) = c.name("dev") {
        let d = dev.as_str();
        // Intel's extension for TensorFlow places ops on `device:XPU:0` (an Arc or Max GPU,
        // its own `XPU_0_bfc` pool): device memory, not the host's.
        let backend = if d.contains("GPU") {
            "cuda"
        } else if d.contains("TPU") {
            "tpu"
        } else if d.contains("XPU") {
            "xpu"
        } else {
            "cpu"
        };
        f.fact("oom.backend", backend, None);
        if let Some(i) = d
            .rsplit(':')
            .next()
            .and_then(|x| x.trim_end_matches([',', '.']).parse::<u32>().ok())
        {
            f.device = Some(i);
            f.fact("oom.device", i, None);
        }
        if backend == "cpu" {
            f.kind = "host-oom";
            f.domain = Domain::Host;
            f.fact("host.killer", "allocator", None);
        }
    }
    if let Some(a) = c.name("alloc") {
        f.fact("xla.allocator", a.as_str().to_string(), span(&a));
    }
    f
}

/// Which runtime printed an XLA failure: the lines before it (their source paths are kept in
/// the raw text: `tensorflow/tsl/...`, `external/xla/...`, `jax/_src/...`) or the line.
fn xla_engine(line: &Line<'_>) -> &'static str {
    let t = line.text;
    if t.contains("XlaRuntimeError") || t.contains("JaxRuntimeError") || t.contains("jax") {
        return id::JAX;
    }
    if t.contains("tensorflow") || t.contains("ResourceExhaustedError") {
        return id::TENSORFLOW;
    }
    // The source path of the line's absl prefix (`W tensorflow/core/common_runtime/
    // bfc_allocator.cc:457]`; jaxlib's are under `external/xla/`).
    match line.meta.tag.as_deref() {
        Some(p) if p.starts_with("tensorflow/") => return id::TENSORFLOW,
        Some(p) if p.contains("xla/") || p.contains("jax") => return id::JAX,
        _ => {}
    }
    let mut engine = None;
    walk_back(line, 300, |raw| {
        if raw.contains("jax") || raw.contains("XLA_PYTHON") || raw.contains("XlaRuntimeError") {
            engine = Some(id::JAX);
            false
        } else if raw.contains("tensorflow") || raw.contains("keras") || raw.contains("Keras") {
            engine = Some(id::TENSORFLOW);
            false
        } else {
            true
        }
    });
    engine.unwrap_or(id::JAX)
}

static CUDA_MODULE_LOAD: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"Failed to load (?:in-memory )?(?:CUBIN|PTX|cubin|module)[^\n]*CUDA_ERROR_OUT_OF_MEMORY",
    )
});

fn xla_failure(line: &Line<'_>, wording: &str) -> Failure {
    let engine = xla_engine(line);
    let mut f = Failure::new("device-oom", engine, Domain::Device);
    f.fact("oom.wording", wording.to_string(), None)
        .fact("oom.backend", "cuda", None);
    f
}

/// JAX appends `BufferAssignment OOM Debugging.` and the program's buffer stats to the error.
fn buffer_assignment(line: &Line<'_>, f: &mut Failure) {
    let mut seen = false;
    walk_forward(line, 40, |raw| {
        if raw.contains("BufferAssignment") {
            seen = true;
        }
        if let Some(c) = BA_STAT.captures(raw) {
            if let Some(b) = parse_size(&c["v"], SiBase::Binary) {
                let name = if &c["k"] == "total allocation" {
                    "xla.program_bytes"
                } else {
                    "xla.temp_bytes"
                };
                f.fact(name, b, None);
            }
        }
        seen || !raw.trim().is_empty()
    });
}

/// The TPU runtime's reserve message's numbers ([`TPU_RESERVE`]): the request, the free
/// memory and what of it could still be placed. The message is long: a hard wrap cuts it
/// before its numbers, so it is read whole.
fn tpu_reserve(line: &Line<'_>, text: &str, f: &mut Failure) {
    let whole = (!TPU_RESERVE.is_match(text))
        .then(|| {
            super::join_whole(
                line,
                |t| TPU_RESERVE.is_match(t),
                |piece| piece.contains("RESOURCE_EXHAUSTED"),
            )
        })
        .flatten();
    let Some(c) = TPU_RESERVE.captures(whole.as_ref().map_or(text, |(t, _)| t.as_str())) else {
        return;
    };
    tpu_figures(&c, whole.is_none(), f);
}

/// The request, the free memory and the largest run that could still be placed, as the TPU
/// runtime's reserve and allocate messages give them (groups `r`, `f`, `a` with their units
/// `ru`, `fu`, `au`); `on_line`: the captures are of the line itself, so their offsets are
/// spans on it (a joined message's are not).
fn tpu_figures(c: &regex::Captures<'_>, on_line: bool, f: &mut Failure) {
    // Only the TPU runtime words its refusals so: the backend `xla_failure` assumed is not it.
    f.facts.retain(|(n, ..)| *n != "oom.backend");
    f.fact("oom.backend", "tpu", None);
    for (n, u, name) in [
        ("r", "ru", "oom.requested_bytes"),
        ("f", "fu", "oom.free_bytes"),
        ("a", "au", "xla.reservable_bytes"),
    ] {
        let unit = c.name(u).map_or("B", |m| m.as_str());
        if let Some((b, m)) = c
            .name(n)
            .and_then(|m| size_bin(m.as_str(), unit).map(|b| (b, m)))
        {
            f.fact(name, b, if on_line { span(&m) } else { None });
        }
    }
}

/// The TPU runtime's allocate message's numbers ([`TPU_ALLOCATE`]): the request, the free
/// memory and, where it names one, the largest run of it that was left in one piece.
fn tpu_allocate(text: &str, f: &mut Failure) {
    if let Some(c) = TPU_ALLOCATE.captures(text) {
        tpu_figures(&c, true, f);
    }
}

/// The card's size and (TensorFlow 1.x) its free memory when the process started, from a
/// `Found device N with properties` block. Only the first GPU's (`Found device 0`, where the
/// line's own block names it): TensorFlow places ops on `GPU:0` unless told otherwise, and a
/// later device's figures would stand in for the first's.
fn found_device_memory(line: &Line<'_>, c: &regex::Captures<'_>, out: &mut Emit) {
    let mut device = TF_FOUND_DEVICE
        .captures(line.text)
        .and_then(|d| d["d"].parse::<u32>().ok());
    if device.is_none() {
        walk_back(line, 3, |raw| match TF_FOUND_DEVICE.captures(raw) {
            Some(d) => {
                device = d["d"].parse::<u32>().ok();
                false
            }
            None => true,
        });
    }
    if device.is_some_and(|d| d != 0) {
        return;
    }
    out.engine(id::TENSORFLOW);
    let t = c.name("t").expect("group t");
    let Some(total) = parse_size(t.as_str(), SiBase::Binary) else {
        return;
    };
    out.fact("tf.device_total_bytes", total, span(&t));
    if let Some(f) = c.name("f") {
        if let Some(free) = parse_size(f.as_str(), SiBase::Binary).filter(|&b| b <= total) {
            out.fact("tf.device_free_at_start_bytes", free, span(&f));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::evidence::{InputName, Value};
    use crate::ingest::log::engines::Observation;
    use crate::ingest::log::grouping::analyze_log;

    use std::sync::Arc;

    /// TensorFlow 1.x's free chunks in the request's bin give the largest free chunk.
    #[test]
    fn tf1_chunk_state_gives_the_largest_free_chunk() {
        let log = "2018-09-27 22:58:41.873117: W tensorflow/core/common_runtime/bfc_allocator.cc:275] Ran out of memory trying to allocate 1.50GiB.  Current allocation summary follows.\n2018-09-27 22:58:41.873427: I tensorflow/core/common_runtime/bfc_allocator.cc:646] Bin for 1.50GiB was 256.00MiB, Chunk State: \n2018-09-27 22:58:41.873441: I tensorflow/core/common_runtime/bfc_allocator.cc:652]   Size: 1.19GiB | Requested Size: 0B | in_use: 0, prev:   Size: 96.00MiB | Requested Size: 96.00MiB | in_use: 1\n2018-09-27 22:58:41.873452: I tensorflow/core/common_runtime/bfc_allocator.cc:652]   Size: 1000.00MiB | Requested Size: 0B | in_use: 0, prev:   Size: 48.00MiB | Requested Size: 48.00MiB | in_use: 1\n2018-09-27 22:58:41.873481: I tensorflow/core/common_runtime/bfc_allocator.cc:665] Chunk at 0x7f94a6000000 of size 1024\n2018-09-27 22:58:41.992410: W tensorflow/core/framework/op_kernel.cc:1318] OP_REQUIRES failed at conv_grad_input_ops.cc:1013 : Resource exhausted: OOM when allocating tensor with shape[4,1024,768,128]\n";
        let input: InputName = Arc::from("t.log");
        let ev = analyze_log(&mut log.as_bytes(), &input).unwrap().0;
        assert_eq!(
            ev.incidents[0].facts.num("xla.largest_free_block_bytes"),
            Some((1.19 * 1073741824.0f64).round())
        );
    }

    /// The first GPU's size and, in 1.x, what was free on it when TensorFlow started; a
    /// second GPU's block is not read as the first's, and a fraction the user set is read.
    #[test]
    fn tf_found_device_gives_the_cards_size_and_free_memory() {
        let log = "2019-05-07 16:02:12.039911: I tensorflow/core/common_runtime/gpu/gpu_device.cc:1433] Found device 0 with properties: \nname: GeForce GTX 1080 Ti major: 6 minor: 1 memoryClockRate(GHz): 1.582\npciBusID: 0000:02:00.0\ntotalMemory: 10.92GiB freeMemory: 355.44MiB\n2019-05-07 16:02:12.040001: I tensorflow/core/common_runtime/gpu/gpu_device.cc:1433] Found device 1 with properties: \nname: GeForce GTX 1080 Ti major: 6 minor: 1 memoryClockRate(GHz): 1.582\npciBusID: 0000:03:00.0\ntotalMemory: 10.92GiB freeMemory: 10.76GiB\n2019-05-07 16:02:24.890572: W tensorflow/core/framework/op_kernel.cc:1401] OP_REQUIRES failed at conv_ops.cc:446 : Resource exhausted: OOM when allocating tensor with shape[128,64,32,32] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n";
        let input: InputName = Arc::from("t.log");
        let ev = analyze_log(&mut log.as_bytes(), &input).unwrap().0;
        let facts = &ev.incidents[0].facts;
        assert_eq!(
            facts.num("tf.device_total_bytes"),
            Some((10.92 * GIB).round())
        );
        assert_eq!(
            facts.num("tf.device_free_at_start_bytes"),
            Some((355.44 * 1048576.0f64).round())
        );
        // TensorFlow 2.0-2.3: the size on the `Found device` line, no free figure.
        let v2 = "2020-06-01 09:00:00.000000: I tensorflow/core/common_runtime/gpu/gpu_device.cc:1561] Found device 0 with properties: pciBusID: 0000:01:00.0 name: GeForce RTX 2080 Ti computeCapability: 7.5 coreClock: 1.545GHz coreCount: 68 deviceMemorySize: 10.76GiB deviceMemoryBandwidth: 573.69GiB/s";
        assert_eq!(
            fact(v2, "tf.device_total_bytes"),
            Some(Value::Num((10.76 * GIB).round()))
        );
        assert_eq!(fact(v2, "tf.device_free_at_start_bytes"), None);
        assert_eq!(
            fact(
                "    gpu_options = tf.GPUOptions(per_process_gpu_memory_fraction=0.3)",
                "tf.memory_fraction"
            ),
            Some(Value::Num(0.3))
        );
    }

    /// The TPU runtime's allocate message, current and older wordings: the request, the free
    /// memory and the longest free run where it names one.
    #[test]
    fn tpu_allocate_message_gives_request_free_and_longest_run() {
        const MIB: f64 = 1048576.0;
        for (raw, longest) in [
            (
                "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Attempting to allocate 382.86M. That was not possible. There are 1.05G free. The largest contiguous region of free memory is 314.55M due to fragmentation.; (0x0x0_HBM0)",
                Some(314.55),
            ),
            (
                "RuntimeError: Resource exhausted: Attempting to allocate 382.86M. That was not possible. There are 1.05G free. Due to fragmentation, the largest contiguous region of free memory is 314.55M.; (0x0x0_HBM0)",
                Some(314.55),
            ),
            (
                "XlaRuntimeError: RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to allocate 382.86M. That was not possible. There are 27.86M free.; (0x0x0_HBM0)",
                None,
            ),
        ] {
            let f = failure(raw).unwrap_or_else(|| panic!("{raw}"));
            assert_eq!(f.get("oom.backend"), Some(&Value::str("tpu")), "{raw}");
            assert_eq!(
                f.get("oom.requested_bytes").and_then(Value::as_f64),
                Some((382.86 * MIB).round()),
                "{raw}"
            );
            assert_eq!(
                f.get("xla.reservable_bytes").and_then(Value::as_f64),
                longest.map(|m: f64| (m * MIB).round()),
                "{raw}"
            );
        }
    }

    const GIB: f64 = 1073741824.0;

    fn run(raw: &str) -> Emit {
        crate::ingest::log::engines::run_line(&Xla, raw)
    }

    fn failure(raw: &str) -> Option<Failure> {
        crate::ingest::log::engines::emitted_failure(&run(raw))
    }

    fn fact(raw: &str, name: &str) -> Option<Value> {
        run(raw).records.into_iter().find_map(|r| match r.obs {
            Observation::Fact { name: n, value } if n == name => Some(value),
            _ => None,
        })
    }

    /// The graph node under a failed op: on its own line (1.x's `[[Node: ...`) or on the
    /// error's line (2.x's `[[{{node ...}}]]`); the phase it shows is decided later.
    #[test]
    fn the_failed_ops_graph_node() {
        assert_eq!(
            fact(
                "\t [[Node: embeddings/Adam/Initializer/zeros = Const[dtype=DT_FLOAT, value=Tensor<type: float shape: [400000,300] values: [0 0 0]...>, _device=\"/job:localhost/replica:0/task:0/device:GPU:0\"]()]]",
                "tf.node"
            ),
            Some(Value::str("embeddings/Adam/Initializer/zeros"))
        );
        let f = failure("tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[64,256,128,128] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc [[{{node gradients/conv3/Conv2D_grad/Conv2DBackpropInput}}]]").unwrap();
        assert_eq!(
            f.get("tf.node"),
            Some(&Value::str(
                "gradients/conv3/Conv2D_grad/Conv2DBackpropInput"
            ))
        );
    }

    /// Both runtimes print the BFC allocator's report; its absl prefix's source path says
    /// whose it is when nothing else in the paste does.
    #[test]
    fn the_allocators_source_path_names_the_runtime() {
        for (log, engine) in [
            (
                "2021-12-03 08:48:43.805276: W tensorflow/core/common_runtime/bfc_allocator.cc:457] Allocator (GPU_0_bfc) ran out of memory trying to allocate 73.50MiB (rounded to 77070336)requested by op Mul\n",
                "tensorflow",
            ),
            (
                "2024-03-01 10:00:00.000000: W external/xla/xla/tsl/framework/bfc_allocator.cc:482] Allocator (GPU_0_bfc) ran out of memory trying to allocate 73.50MiB (rounded to 77070336)requested by op\n",
                "jax",
            ),
        ] {
            let input: crate::facts::evidence::InputName = std::sync::Arc::from("t.log");
            let ev = crate::ingest::log::grouping::analyze_log(&mut log.as_bytes(), &input)
                .unwrap()
                .0;
            assert_eq!(ev.incidents.len(), 1, "{log}");
            assert_eq!(ev.incidents[0].engine, engine, "{log}");
        }
    }

    /// X-1..X-7 and the configuration lines.
    #[test]
    fn a_status_cut_by_a_hard_wrap() {
        let log = "2024-05-01 10:00:00.123 W tensorflow/core/framework/op_kernel.cc:1840] OP_REQUIRES failed at xla_ops.cc:503 : Resource exhausted: Out\nof memory while trying to allocate 5520758552 bytes.\n";
        let input: crate::facts::evidence::InputName = std::sync::Arc::from("t.log");
        let ev = crate::ingest::log::grouping::analyze_log(&mut log.as_bytes(), &input)
            .unwrap()
            .0;
        assert_eq!(ev.incidents.len(), 1);
        assert_eq!(
            ev.incidents[0].facts.num("oom.requested_bytes"),
            Some(5520758552.0)
        );
    }

    #[test]
    fn tensorflow_0x_printed_the_shape_as_its_proto() {
        let f = failure("ResourceExhaustedError: OOM when allocating tensor with shapedim { size: 10000 } dim { size: 18 } dim { size: 18 } dim { size: 32 }").unwrap();
        assert_eq!(f.engine, id::TENSORFLOW);
        assert_eq!(
            f.get("tf.tensor_shape").and_then(Value::as_str),
            Some("[10000,18,18,32]")
        );
        assert_eq!(f.get("tf.batch_dim").and_then(Value::as_f64), Some(10000.0));
    }

    #[test]
    fn rocm_start_pool_refused() {
        for raw in [
            "E tensorflow/stream_executor/rocm/rocm_driver.cc:601] failed to allocate 7.35G (7889485824 bytes) from device: hipError_t(1002)",
            "E external/xla/xla/stream_executor/rocm/rocm_driver.cc:702] failed to allocate 7.35G (7889485824 bytes) from device: hipErrorOutOfMemory",
        ] {
            let f = failure(raw).expect(raw);
            assert_eq!(f.get("oom.backend").and_then(Value::as_str), Some("rocm"));
            assert_eq!(
                f.get("oom.requested_bytes").and_then(Value::as_f64),
                Some(7889485824.0)
            );
        }
        // Another HIP error is not a memory one.
        assert!(
            failure("failed to allocate 7.35G (7889485824 bytes) from device: hipError_t(1001)")
                .is_none()
        );
    }

    #[test]
    fn a_kernel_that_cannot_be_loaded() {
        for raw in [
            "XlaRuntimeError: INTERNAL: Failed to load in-memory CUBIN: CUDA_ERROR_OUT_OF_MEMORY: out of memory",
            "jaxlib.xla_extension.XlaRuntimeError: UNKNOWN: Failed to load PTX text as a module: CUDA_ERROR_OUT_OF_MEMORY: out of memory",
        ] {
            let f = failure(raw).expect(raw);
            assert_eq!(
                f.get("oom.wording").and_then(Value::as_str),
                Some("cuda-module-load")
            );
        }
        assert!(failure("XlaRuntimeError: INTERNAL: Failed to load in-memory CUBIN: CUDA_ERROR_INVALID_IMAGE").is_none());
    }

    #[test]
    fn every_xla_and_tf_format() {
        let f = failure("tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[64,16,1024,1024] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc").unwrap();
        assert_eq!(f.engine, id::TENSORFLOW);
        assert_eq!(
            f.get("oom.requested_bytes").and_then(Value::as_f64),
            Some(64.0 * 16.0 * 1024.0 * 1024.0 * 4.0)
        );
        assert_eq!(f.get("tf.batch_dim").and_then(Value::as_f64), Some(64.0));
        assert_eq!(f.device, Some(0));
        let f = failure("  (0) RESOURCE_EXHAUSTED:  OOM when allocating tensor with shape[128,50257] and type half on /job:localhost/replica:0/task:0/device:GPU:1 by allocator GPU_1_bfc").unwrap();
        assert_eq!(f.device, Some(1));
        assert_eq!(
            f.get("oom.requested_bytes").and_then(Value::as_f64),
            Some(128.0 * 50257.0 * 2.0)
        );
        let f = failure("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.").unwrap();
        assert_eq!(f.engine, id::JAX);
        assert_eq!(
            f.get("oom.requested_bytes").and_then(Value::as_f64),
            Some(17179869184.0)
        );
        let f = failure("jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 11.96GiB.").unwrap();
        assert_eq!(
            f.get("oom.requested_bytes").and_then(Value::as_f64),
            Some((11.96 * GIB).round())
        );
        let f = failure("XlaRuntimeError: RESOURCE_EXHAUSTED: Failed to allocate request for 8.00GiB (8589934592B) on device ordinal 2").unwrap();
        assert_eq!(f.device, Some(2));
        let f = failure("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm. Used 17.63G of 15.48G hbm. Exceeded hbm capacity by 2.15G.").unwrap();
        assert_eq!(
            f.get("oom.total_bytes").and_then(Value::as_f64),
            Some((15.48 * GIB).round())
        );
        assert!(failure("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Attempting to reserve 5.12G at the bottom of memory. That was not possible. There are 3.31G free, 0B reserved, and 3.31G reservable.").is_some());
        let raw = "RuntimeError: RESOURCE_EXHAUSTED: Attempting to reserve 11.35G at the bottom of memory. That was not possible. There are 12.18G free, 0B reserved, and 10.52G reservable.: while running replica 0 and partition 0 of a replicated computation";
        let f = failure(raw).unwrap();
        let gib = |x: f64| Some((x * 1073741824.0).round());
        assert_eq!(
            f.get("oom.requested_bytes").and_then(Value::as_f64),
            gib(11.35)
        );
        assert_eq!(f.get("oom.free_bytes").and_then(Value::as_f64), gib(12.18));
        assert_eq!(
            f.get("xla.reservable_bytes").and_then(Value::as_f64),
            gib(10.52)
        );
        // X-1 with nothing after it is the failure itself.
        let f = failure("Allocator (GPU_0_bfc) ran out of memory trying to allocate 2.93GiB (rounded to 3149744640)requested by op model/dense/MatMul").unwrap();
        assert_eq!(
            f.get("oom.requested_bytes").and_then(Value::as_f64),
            Some(3149744640.0)
        );
        // Look-alikes.
        for t in [
            "Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.18GiB with freed_by_count=0. The caller indicates that this is not a failure, but this may mean that there could be performance gains if more memory were available.",
            "Garbage collection: deallocate free memory regions (i.e., allocations) so that we can re-allocate a larger region to avoid OOM due to memory fragmentation.",
            "If the cause is memory fragmentation maybe the environment variable 'TF_GPU_ALLOCATOR=cuda_malloc_async' will improve the situation. ",
            "RESOURCE_EXHAUSTED: received trailing metadata size exceeds limit",
        ] {
            assert!(failure(t).is_none(), "{t}");
        }
        assert!(fact("If the cause is memory fragmentation maybe the environment variable 'TF_GPU_ALLOCATOR=cuda_malloc_async' will improve the situation. ", "tf.gpu_allocator").is_none());
        // Accounting and configuration.
        assert_eq!(
            fact(
                "Limit:                     15652425728",
                "xla.pool_limit_bytes"
            ),
            Some(Value::Num(15652425728.0))
        );
        assert_eq!(
            fact(
                "LargestFreeBlock:            201326592",
                "xla.largest_free_block_bytes"
            ),
            Some(Value::Num(201326592.0))
        );
        assert_eq!(
            fact("Sum Total of in-use chunks: 13.70GiB", "xla.in_use_bytes"),
            Some(Value::Num((13.7 * GIB).round()))
        );
        assert_eq!(
            fact(
                "total_region_allocated_bytes_: 15652425728 memory_limit_: 15652425728 available bytes: 0 curr_region_allocation_bytes_: 31304851456",
                "xla.pool_limit_bytes"
            ),
            Some(Value::Num(15652425728.0))
        );
        assert_eq!(
            fact(
                "2024-03-01 10:00:00.000000: I tensorflow/core/common_runtime/gpu/gpu_device.cc:1928] Created device /job:localhost/replica:0/task:0/device:GPU:0 with 22282 MB memory:  -> device: 0, name: NVIDIA GeForce RTX 3090, pci bus id: 0000:01:00.0, compute capability: 8.6",
                "xla.device_memory_bytes"
            ),
            Some(Value::Num(22282.0 * 1048576.0))
        );
        assert_eq!(
            fact(
                "export XLA_PYTHON_CLIENT_MEM_FRACTION=.90",
                "xla.mem_fraction"
            ),
            Some(Value::Num(0.9))
        );
        assert_eq!(
            fact(
                "os.environ['XLA_PYTHON_CLIENT_PREALLOCATE'] = 'false'",
                "xla.preallocate"
            ),
            Some(Value::Bool(false))
        );
        assert_eq!(
            fact(
                "tf.config.experimental.set_memory_growth(gpu, True)",
                "tf.memory_growth"
            ),
            Some(Value::Bool(true))
        );
        assert_eq!(
            fact(
                "I0101 00:00:00.000 140 gpu_helpers.cc:41] XLA backend allocating 30635393433 bytes on device 0 for BFCAllocator.",
                "xla.pool_limit_bytes"
            ),
            Some(Value::Num(30635393433.0))
        );
        let f = failure("2024-01-01 00:00:00.000: E tensorflow/stream_executor/cuda/cuda_driver.cc:794] failed to allocate 21.35G (22923706368 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory").unwrap();
        assert_eq!(
            f.get("xla.startup_alloc_failed").and_then(Value::as_bool),
            Some(true)
        );
    }

    #[test]
    fn report_numbers_reach_the_error_after_it() {
        let log = "\
2024-07-13 01:58:23.985593: W tensorflow/tsl/framework/bfc_allocator.cc:485] Allocator (GPU_0_bfc) ran out of memory trying to allocate 2.00GiB (rounded to 2147483648)requested by op Conv2D
If the cause is memory fragmentation maybe the environment variable 'TF_GPU_ALLOCATOR=cuda_malloc_async' will improve the situation. 
Current allocation summary follows.
Current allocation summary follows.
2024-07-13 01:58:23.985800: I tensorflow/tsl/framework/bfc_allocator.cc:1039] BFCAllocator dump for GPU_0_bfc
2024-07-13 01:58:23.990000: I tensorflow/tsl/framework/bfc_allocator.cc:1101]      Summary of in-use Chunks by size: 
2024-07-13 01:58:23.990100: I tensorflow/tsl/framework/bfc_allocator.cc:1107] Sum Total of in-use chunks: 12.10GiB
2024-07-13 01:58:23.990200: I tensorflow/tsl/framework/bfc_allocator.cc:1109] Total bytes in pool: 14000000000 memoryLimit_: 14000000000 available bytes: 0 curr_region_allocation_bytes_: 28000000000
2024-07-13 01:58:23.990300: I tensorflow/tsl/framework/bfc_allocator.cc:1114] Stats: 
Limit:                     14000000000
InUse:                     12992272384
MaxInUse:                  13600000000
NumAllocs:                       48211
MaxAllocSize:               2147483648
Reserved:                            0
PeakReserved:                        0
LargestFreeBlock:            536870912

2024-07-13 01:58:23.990400: W tensorflow/tsl/framework/bfc_allocator.cc:497] ***************************************************************************************_____
tensorflow.python.framework.errors_impl.ResourceExhaustedError: {{function_node __wrapped__Conv2D_device_/job:localhost/replica:0/task:0/device:GPU:0}} OOM when allocating tensor with shape[32,256,256,256] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc [Op:Conv2D]
";
        let input: InputName = Arc::from("t.log");
        let ev = analyze_log(&mut log.as_bytes(), &input).unwrap().0;
        assert_eq!(ev.incidents.len(), 1, "{:?}", ev.incidents);
        let inc = &ev.incidents[0];
        assert_eq!(inc.engine, id::TENSORFLOW);
        let f = &inc.facts;
        assert_eq!(f.num("xla.pool_limit_bytes"), Some(14000000000.0));
        assert_eq!(f.num("xla.in_use_bytes"), Some(12992272384.0));
        assert_eq!(f.num("xla.largest_free_block_bytes"), Some(536870912.0));
        assert_eq!(f.num("tf.batch_dim"), Some(32.0));
        assert_eq!(f.get("tf.gpu_allocator"), None);
    }
}
