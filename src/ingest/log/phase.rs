//! The log's reading of when a failure hit, from the lines just above it.
//!
//! Evidence, strongest first:
//! 1. the traceback right above the error (the frames say `from_pretrained`, `backward`,
//!    `optimizer.step`, `generate`, `capture_model`, ...);
//! 2. the latest phase marker a recogniser saw ("Loading checkpoint shards", "Capturing CUDA
//!    graphs"), if no training progress was logged after it;
//! 3. progress counters in the lines before the failure (tqdm `450/1000`, `step 1200`,
//!    `{'loss': ..., 'epoch': 1.3}`): several steps done means steady state.
//!
//! The ids are [`crate::facts::phase`]'s; the incident's phase is settled after fusion by
//! [`crate::incident::timeline`], which weighs this reading against the other inputs'.

use std::sync::LazyLock;

use regex::Regex;

use crate::facts::phase::id;
use crate::ingest::log::clean::CleanLine;
use crate::ingest::log::engines::PhaseMark;
use crate::ingest::log::pattern::static_regex;

/// The decision and what it rested on.
#[derive(Clone, Debug, PartialEq)]
pub struct PhaseDecision {
    pub phase: &'static str,
    /// The traceback's frames, innermost first, as `file:function` (at most 40).
    pub frames: Option<String>,
    /// The frame or line that decided it.
    pub evidence: Option<String>,
    pub steps_completed: Option<u64>,
    pub epoch: Option<u64>,
    /// Evaluation rounds the log announced before the failure (`Start validating.`,
    /// `***** Running Evaluation *****`): each means the training before it had run through.
    pub evaluation_rounds: Option<u64>,
    /// The log shows a training loop: loss values logged before the failure, or a
    /// training-step function in the traceback. Inference loops have steps too, not these.
    pub training_loop: bool,
}

/// Frame keywords, in priority order: the first class any frame matches wins. Function names
/// match exactly; file fragments match anywhere in the path.
struct FrameClass {
    phase: &'static str,
    functions: &'static [&'static str],
    files: &'static [&'static str],
}

const FRAME_CLASSES: &[FrameClass] = &[
    FrameClass {
        phase: id::CUDA_GRAPH_CAPTURE,
        functions: &[
            "capture_model",
            "_capture_cudagraphs",
            "capture",
            "cuda_graph_warmup",
            "warmup_cuda_graphs",
            // `torch.cuda.graph` / `CUDAGraph` and `make_graphed_callables`.
            "capture_begin",
            "capture_end",
            "make_graphed_callables",
        ],
        files: &[
            "cuda_graph_runner.py",
            "cudagraph",
            "torch/cuda/graphs.py",
            "torch\\cuda\\graphs.py",
        ],
    },
    FrameClass {
        phase: id::ENGINE_STARTUP,
        functions: &[
            "profile_run",
            "init_device",
            "request_memory",
            "determine_available_memory",
            "determine_num_available_blocks",
            "_initialize_kv_caches",
            "initialize_kv_cache",
            "_allocate_kv_cache",
            "_allocate_kv_cache_tensors",
            // vLLM checking the KV cache it sized against one full-length request (V0's
            // worker, V1's kv_cache_utils): the weights are loaded and profiled by then.
            "raise_if_cache_size_invalid",
            "check_enough_kv_cache_memory",
            "init_memory_pool",
            // LightLLM allocating its KV buffers.
            "_init_mem_manager",
            // ExLlamaV2's cache, allocated whole for max_seq_len when it is created.
            "create_state_tensors",
            "_dummy_sampler_run",
            "_dummy_pooler_run",
        ],
        files: &["cache_engine.py", "kv_cache_utils.py", "mem_manager.py"],
    },
    FrameClass {
        phase: id::WARMUP,
        functions: &["warmup", "_warmup", "warm_up", "compile_or_warm_up_model"],
        files: &[],
    },
    FrameClass {
        phase: id::MODEL_LOAD,
        functions: &[
            "from_pretrained",
            "load_state_dict",
            "_load_state_dict_into_meta_model",
            "_load_pretrained_model",
            "load_checkpoint",
            "load_checkpoint_and_dispatch",
            "load_model",
            "load_weights",
            "_load_from_state_dict",
            "dispatch_model",
            "init_weight",
            "init_weight_list",
            "cuda",
            // `module.to()` / `.cuda()` / `.half()` all go through `Module._apply`; a tensor's
            // `.to()` does not, so this frame means a model is being moved.
            "_apply",
            // `Module.to`, a diffusers pipeline's `.to("cuda")`, Lightning's mixin: a Python
            // frame named `to` moves a model (a tensor's `.to()` has no Python frame).
            "to",
            // TensorFlow creating or restoring variables.
            "global_variables_initializer",
            "initialize_all_variables",
            "variables_initializer",
            // ComfyUI loading (or partly loading) a model onto the device before sampling.
            "load_models_gpu",
            "load_model_gpu",
            "model_load",
            "partially_load",
            "patch_weight_to_device",
            // AUTOMATIC1111 / Forge.
            "load_model_weights",
            "reload_model_weights",
            "send_model_to_device",
            // Sharding or wrapping a model onto the devices before training: FSDP's flat
            // parameters, Accelerate's `prepare_model`, DeepSpeed's engine moving the module,
            // a DDP or FSDP wrapper constructed around the model (`model =
            // DistributedDataParallel(model, ...)`, mmengine's `MMDistributedDataParallel`).
            "prepare_model",
            "DistributedDataParallel",
            "MMDistributedDataParallel",
            "FullyShardedDataParallel",
            "_init_param_handle_from_module",
            "_init_param_handle_from_params",
            "_configure_distributed_model",
            // Runtimes that load a model when it is constructed or deserialised: ONNX
            // Runtime's session, TensorRT's engine, faster-whisper's model (also as the call
            // on a user's own source line: `model = WhisperModel("large-v3", ...)`).
            "_create_inference_session",
            "InferenceSession",
            "deserialize_cuda_engine",
            "WhisperModel",
        ],
        files: &["safetensors", "model_loader", "modeling_utils.py"],
    },
    FrameClass {
        phase: id::BACKWARD,
        functions: &[
            "backward",
            "_engine_run_backward",
            "run_backward",
            "_backward",
        ],
        // The autograd entry points, not the whole package: `torch/autograd/function.py`'s
        // `apply` runs a custom Function's forward (AOT autograd's compiled forward, a
        // checkpointed block), and in a backward the frames above it already say so.
        files: &[
            "torch/autograd/__init__.py",
            "torch/autograd/graph.py",
            "torch\\autograd\\__init__.py",
            "torch\\autograd\\graph.py",
        ],
    },
    FrameClass {
        phase: id::OPTIMIZER_STEP,
        functions: &[
            "_multi_tensor_adam",
            "_single_tensor_adam",
            "_multi_tensor_adamw",
            "adamw",
            "adam",
            "_init_group",
            "optimizer_step",
            "_fused_adamw",
            // DeepSpeed's engine stepping its ZeRO optimizer (`engine.step()` ->
            // `_take_model_step` -> `optimizer.step()`).
            "_take_model_step",
        ],
        files: &["torch/optim/", "torch\\optim\\", "bitsandbytes/optim"],
    },
    // Before evaluation: an evaluation that generates (a harness's generation tasks, a
    // trainer's `predict_with_generate`) failed in the generation, whose cache grows.
    FrameClass {
        phase: id::GENERATION,
        functions: &[
            "generate",
            "_sample",
            // Not a bare `sample`: diffusion front-ends (ComfyUI's KSampler, k-diffusion) name
            // their denoising loop that, and it has no growing cache.
            "greedy_search",
            "beam_search",
            "_beam_search",
            "_assisted_decoding",
            "generate_step",
            // lm-evaluation-harness's generation tasks.
            "generate_until",
            "_model_generate",
            // Allocating a generation's KV cache up front: torchtune's `setup_caches`,
            // Transformers' static caches.
            "setup_caches",
            "_setup_cache",
        ],
        files: &[
            "generation/utils.py",
            "cache_utils.py",
            "/kv_cache.py",
            "\\kv_cache.py",
        ],
    },
    FrameClass {
        phase: id::EVALUATION,
        functions: &[
            "evaluate",
            "evaluation_loop",
            "prediction_step",
            "prediction_loop",
            "validation_step",
            "validate",
            "eval_step",
            "_evaluate",
            "test_step",
        ],
        files: &[],
    },
    FrameClass {
        phase: id::SERVING,
        functions: &[
            "execute_model",
            "step_with_batch_queue",
            "process_input_sockets",
            "forward_batch_generation",
            "run_batch",
        ],
        files: &[],
    },
];

/// Training-loop frames: the failure is inside a step, whose number decides first vs steady.
const STEP_FUNCTIONS: &[&str] = &[
    "training_step",
    "train_step",
    "_inner_training_loop",
    "fit_loop",
    "train_one_epoch",
    "run_training_epoch",
    "training_loop",
];

/// A source line's outermost call: `model = AutoModel.from_pretrained(`, `loss.backward()`,
/// `return self.generate(`.
static CALL: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"^(?:return\s+|await\s+)?(?:[\w.\[\]]+(?:\s*,\s*[\w.\[\]]+)*\s*=\s*)?(?:await\s+)?(?:[\w\[\]]+\.)*(?P<name>\w+)\(",
    )
});
/// A traceback frame as Python prints it (`File "x.py", line 3, in f`), as `rich` prints it
/// inside its box (`│ /path/x.py:3 in f │`, the path sometimes wrapped onto the line before),
/// and as IPython prints it (`~/lib/x.py in f(self, a)`, `<ipython-input-8-..> in <module>`;
/// IPython 8: `File ~/lib/trainer.py:2113, in Trainer.evaluate(self, ...)`, the method's
/// class dropped).
static FRAME: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r#"^\s*File "(?P<file>[^"]+)",(?: line \d+,)? in (?P<func>[\w<>.]+)|^\s*[│|]\s*(?P<rfile>\S*):\d+ in (?P<rfunc>[\w<>.]+)\s*[│|]\s*$|^(?P<ifile>(?:~|/|[A-Za-z]:\\)\S*\.py|<ipython-input-[\w-]+>) in (?P<ifunc>[\w<>.]+)(?:\(|$)|^\s*File (?P<jfile>(?:~|/|[A-Za-z]:\\)\S*?\.py):\d+, in (?:[\w<>]+\.)*(?P<jfunc>[\w<>]+)"#,
    )
});
/// A progress bar's counter: tqdm's `| 450/1000 [`, rich's (Lightning's RichProgressBar)
/// `0/10 0:00:01 •`, and the bracketed one of PyTorch's ImageNet example and the training
/// scripts written after it (`Epoch: [3][256/1389]`, mmengine's `Epoch(train) [1][100/3665]`;
/// after an epoch's, not any `[3/8]`: build and download steps print those).
static TQDM: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"\|\s*(?P<cur>\d+)/(?P<total>\d+)\s*\[|\b(?P<rcur>\d+)/(?P<rtotal>\d+)\s+\d+:\d{2}:\d{2}\s+•|(?i:\bepoch\b).{0,12}?\[\s*\d+\s*\]\s*\[\s*(?P<bcur>\d+)\s*/\s*(?P<btotal>\d+)\s*\]",
    )
});
static STEP: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?i)\b(?:global[_ ]step|step|iter(?:ation)?|it|episode)\s*[=:#\[]?\s*(?P<n>\d+)\b",
    )
});
/// A checkpoint being loaded or resumed: a step count on its line or just below it
/// (latent-diffusion's `Loading model from x.ckpt` / `Global Step: 140000`, `Restored
/// checkpoint at step 5000`) is the checkpoint's training history, not steps this run took.
static CHECKPOINT_LOAD: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?i)\bloading (?:model|checkpoint|weights|state dict) from\b|\b(?:restor|resum|load)\w* (?:from )?(?:the )?(?:checkpoint|ckpt)\b",
    )
});
static EPOCH: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"(?i)(?:\bepoch\b|'epoch')\s*[=:]?\s*\[?(?P<n>\d+(?:\.\d+)?)(?P<of>\s*/\s*\d+)?")
});
static NOT_STEPS: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?i)slurmstepd|\bsrun: |\bstepid=|\*\*\* step \d|loading checkpoint shards|loading pipeline components|loading safetensors|downloading|fetching \d+ files|capturing (?:cuda )?graphs|capturing cudagraph|loading weights|processed prompts|\b(?:map|filter|datasets?)\s*(?:\(num_proc=\d+\)\s*)?:|tokeniz|convert(?:ing)? to turbomind|converting format of dataset|saving the dataset|loading dataset shards|grouping texts|\bcaching (?:latents|text encoder|metadata|embeddings)|generating \w+ split|resolving data files|extracting data files|calibrat|quantiz|propagating",
    )
});
/// A training script announcing an evaluation round, once per round: `Start validating.`,
/// `Starting evaluation`, Transformers' `***** Running Evaluation *****`, `Running validation`.
/// Not the progress bars inside a round, which print many lines each.
static EVALUATION_ROUND: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?i)^[\W_]*(?:start(?:ing|ed)? (?:the )?(?:validat|evaluat)\w*|running (?:evaluation|validation))\b[\W_]*$",
    )
});
static LOSS_LOG: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"\{'loss': |\b(?:train_)?loss\s*[=:]?\s*\d"));
/// A script reporting that a model finished loading.
static LOAD_DONE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"(?i)\bmodel loaded (?:in|successfully)\b|\b(?:done|finished) loading (?:the )?model\b|\bloaded (?:the )?model in\b",
    )
});
/// A loss line that starts with its step (`print(f"{it:5d} loss {loss:.5f}")`: `  6300 loss
/// 0.04810`): the number before the loss is the step.
static LEADING_STEP: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"^\s*(?P<n>\d{1,8})\s+(?:train_)?loss\b"));

/// The progress counter of a line, which may be a bar redrawn in place: captured to a file,
/// such a bar is one line of `\r`-separated updates (`0/500 [...]\r5/500 [...]\r...\r300/500
/// [...]`), of which a terminal shows the last. Each piece is read as a line of its own and
/// the highest count kept, as it is across lines. `None`: `re` matches no piece; `Some(None)`:
/// it matches, but `counter` reads no count from it.
fn redrawn_count(
    line: &str,
    re: &Regex,
    counter: impl Fn(&regex::Captures<'_>) -> Option<u64>,
) -> Option<Option<u64>> {
    let mut matched = false;
    let mut highest = None;
    for piece in line.split('\r') {
        let Some(c) = re.captures(piece) else {
            continue;
        };
        matched = true;
        highest = highest.max(counter(&c));
    }
    matched.then_some(highest)
}

/// Whether a progress bar line's last drawing shows its count at its total (`512/512`).
fn bar_finished(line: &str) -> bool {
    let Some(piece) = line.rsplit('\r').find(|p| TQDM.is_match(p)) else {
        return false;
    };
    TQDM.captures(piece).is_some_and(|c| {
        let cur = c.name("cur").or(c.name("rcur")).or(c.name("bcur"));
        let total = c.name("total").or(c.name("rtotal")).or(c.name("btotal"));
        matches!((cur, total), (Some(a), Some(b)) if a.as_str() == b.as_str())
    })
}

/// What a progress bar line is labelled, its numbers left out, so that the bars of one
/// loop (`Epoch 3: ...`, `Epoch 4: ...`) read alike: the letters before the bar's
/// percentage (tqdm) or its counter (rich), lower-cased, one space between words. An
/// unlabelled bar reads "".
fn bar_label(line: &str) -> String {
    let piece = line.rsplit('\r').find(|p| TQDM.is_match(p)).unwrap_or(line);
    // Up to the counter: the bracketed form's match starts at its `Epoch`, the label.
    let before = TQDM
        .captures(piece)
        .and_then(|c| c.name("cur").or(c.name("rcur")).or(c.name("bcur")))
        .map_or(piece, |m| &piece[..m.start()]);
    let before = before.rfind('%').map_or(before, |i| &before[..i]);
    before
        .split(|c: char| !c.is_alphabetic())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A counter's digits as a number.
fn count_of(m: Option<regex::Match<'_>>) -> Option<u64> {
    m?.as_str().parse().ok()
}

/// Which of the progress regexes can match a line, from a word (or byte) each one's every
/// match holds: `EVALUATION_ROUND` `validat`/`evaluat`, `TQDM` a `/`, `STEP` `it` or `step`
/// (or `ſ`, which case-folds to `s`), `LOSS_LOG` `loss`, `EPOCH` `epoch`; ASCII case
/// ignored where the regex ignores case. `false` means the regex cannot match; `true` only
/// that it may.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct ProgressWords {
    evaluation: bool,
    tqdm: bool,
    step: bool,
    loss: bool,
    epoch: bool,
}

impl ProgressWords {
    /// `lower`: a buffer reused across lines for the ASCII-lowercased text.
    fn of(text: &str, lower: &mut Vec<u8>) -> ProgressWords {
        use memchr::memmem::Finder;
        // Built once: `memmem::find` builds its searcher on every call.
        static WORDS: LazyLock<[Finder<'static>; 7]> = LazyLock::new(|| {
            [
                "validat", "evaluat", "step", "ſ", "loss", "epoch", "episode",
            ]
            .map(Finder::new)
        });
        let [validat, evaluat, step, long_s, loss, epoch, episode] = &*WORDS;
        lower.clear();
        lower.extend(text.bytes().map(|b| b.to_ascii_lowercase()));
        let l = &lower[..];
        ProgressWords {
            evaluation: validat.find(l).is_some() || evaluat.find(l).is_some(),
            // `\d+/\d+`: a digit either side of a slash (a byte of a non-ASCII character
            // let through: Unicode has other digits).
            tqdm: memchr::memchr_iter(b'/', l).any(|i| {
                let digit = |b: Option<&u8>| b.is_some_and(|&b| b.is_ascii_digit() || b >= 0x80);
                i > 0 && digit(l.get(i - 1)) && digit(l.get(i + 1))
            }),
            // `\bit`: not after a letter, digit or `_` (`with`, `4.5it/s` are no steps).
            step: memchr::memchr_iter(b'i', l).any(|i| {
                l.get(i + 1) == Some(&b't')
                    && (i == 0 || !(l[i - 1].is_ascii_alphanumeric() || l[i - 1] == b'_'))
            }) || step.find(l).is_some()
                || long_s.find(l).is_some()
                // A reinforcement-learning loop's `episode 405`: the same work, repeated.
                || episode.find(l).is_some(),
            loss: loss.find(text.as_bytes()).is_some(),
            epoch: epoch.find(l).is_some(),
        }
    }

    fn any(self) -> bool {
        self.evaluation || self.tqdm || self.step || self.loss || self.epoch
    }
}

/// One traceback frame line's file and function, in any form [`FRAME`] reads.
pub(crate) struct FrameLocation<'t> {
    pub file: &'t str,
    pub func: &'t str,
    /// Python's own `File "x.py", line 3, in f` (the form a terminal may cut mid-name).
    pub python_form: bool,
}

/// Reads a traceback frame line: Python's, `rich`'s boxed one, IPython's old and new forms.
pub(crate) fn frame_location(text: &str) -> Option<FrameLocation<'_>> {
    let c = FRAME.captures(text)?;
    let file = c
        .name("file")
        .or(c.name("rfile"))
        .or(c.name("ifile"))
        .or(c.name("jfile"))?;
    let func = c
        .name("func")
        .or(c.name("rfunc"))
        .or(c.name("ifunc"))
        .or(c.name("jfunc"))?;
    Some(FrameLocation {
        file: file.as_str(),
        func: func.as_str(),
        python_form: c.name("func").is_some(),
    })
}

/// The frames and calls that move something to the device: a model being loaded, unless the
/// traceback says training (a step may move a model too), and never on their own as a
/// source line's call (`images.to(device)` moves a tensor).
fn moves_a_model(func: &str) -> bool {
    matches!(func, "to" | "cuda" | "_apply" | "convert")
}

/// The phase a frame shows: its function or file, or its source line (`source`, empty when
/// unknown) for a constructor.
fn frame_phase(file: &str, func: &str, source: &str) -> Option<&'static str> {
    let base = func.rsplit('.').next().unwrap_or(func);
    FRAME_CLASSES
        .iter()
        .find(|c| c.functions.contains(&base) || c.files.iter().any(|f| file.contains(f)))
        .map(|c| c.phase)
        .or_else(|| {
            // A layer's constructor allocating its parameters: the model is being built on
            // the device (`with torch.device("cuda"): model = Model(config)`, `nn.Linear(...,
            // device="cuda")`), which is loading by another road.
            // `convert` is `Module.to`'s own inner function, which `_apply` runs on every
            // parameter: a traceback cut to its last frames still shows a model being moved.
            let torch_module =
                file.contains("torch/nn/modules/") || file.contains("torch\\nn\\modules\\");
            let module_to = base == "convert"
                && (file.ends_with("torch/nn/modules/module.py")
                    || file.ends_with("torch\\nn\\modules\\module.py"));
            // faster-whisper's `WhisperModel.__init__` and ONNX Runtime's
            // `InferenceSession.__init__` load the model onto the device themselves.
            let runtime_loader = base == "__init__"
                && (file.contains("faster_whisper")
                    || file.contains("onnxruntime_inference_collection"));
            // Any constructor creating a parameter (`self.weight = Parameter(...)`:
            // fairscale's and Megatron's parallel layers, a project's own layers) is the
            // model being built; a constructor's other allocations may run anywhere.
            let builds_parameter = base == "__init__" && source.contains("Parameter(");
            // Keras drawing a new layer's initial weights (`add_weight`, its initializers'
            // random draws in `keras/backend.py`, often the one frame Keras's filtered
            // traceback keeps): the model is being built.
            let keras_init = (file.contains("keras/") || file.contains("keras\\"))
                && matches!(
                    base,
                    "add_weight" | "random_uniform" | "random_normal" | "truncated_normal"
                );
            (torch_module && matches!(base, "__init__" | "reset_parameters")
                || module_to
                || runtime_loader
                || builds_parameter
                || keras_init)
                .then_some(id::MODEL_LOAD)
        })
        .or_else(|| {
            // Servers and front-ends name their loaders after what they do
            // (`load_model_sync`, `load_model_gen`, exllamav2's `load_weight`): loading.
            (base.starts_with("load_model") || base.starts_with("load_weight"))
                .then_some(id::MODEL_LOAD)
        })
        .or_else(|| {
            // Projects name their own evaluation code (`evaluate_predictions`,
            // `validation_epoch`, `run_validation`): the word is the evidence.
            let b = base.to_ascii_lowercase();
            (b.starts_with("evaluat")
                || b.starts_with("validat")
                || b.starts_with("run_eval")
                || b.starts_with("run_validat"))
            .then_some(id::EVALUATION)
        })
}

/// Words naming a KV cache pool's buffers in the source line that allocates them
/// (LightLLM's `key_buffer`/`value_buffer`/`kv_buffer`, SGLang's `k_buffer`/`v_buffer`).
const KV_POOL_BUFFERS: &[&str] = &[
    "key_buffer",
    "value_buffer",
    "kv_buffer",
    "k_buffer",
    "v_buffer",
];

/// What the failing source line says of the phase: the innermost frame's (`file` its file),
/// or, in a paste that kept no frame, the line above the error. A KV pool's buffers
/// allocated in it (`self.value_buffer = [torch.empty((size, head_num, ...`) are an engine
/// sizing its KV cache at start-up; the call it makes is read as a frame would be
/// (`model = AutoModel.from_pretrained(...)`, `loss.backward()`,
/// `Variable._execution_engine.run_backward(`), except a `.to()` or `.cuda()`, which may move
/// a tensor as well as a model; Adam's state in it (`denom = (exp_avg_sq.sqrt() / ...`)
/// means the optimizer's step was running.
fn failing_source_line(t: &str, file: Option<&str>) -> Option<(&'static str, String)> {
    if file.is_none() && (t.starts_with("File ") || t.contains("Error") || t.contains("Traceback"))
    {
        return None;
    }
    let allocates = ["torch.empty(", "torch.zeros(", "torch.ones("]
        .iter()
        .any(|a| t.contains(a));
    if let Some(b) = KV_POOL_BUFFERS.iter().find(|b| allocates && t.contains(*b)) {
        return Some((
            id::ENGINE_STARTUP,
            format!("{b} (the KV pool buffers allocated in the failing source line)"),
        ));
    }
    let called = CALL
        .captures(t)
        .map(|c| c["name"].to_string())
        .filter(|name| !moves_a_model(name))
        .and_then(|name| frame_phase("", &name, t).map(|p| (p, name)));
    if let Some((p, name)) = called {
        let origin = match file {
            Some(f) => format!("called from {f}"),
            None => "called in the failing source line".to_string(),
        };
        return Some((p, format!("{name} ({origin})")));
    }
    // `exp_avg_sq` also covers AMSGrad's `max_exp_avg_sq`.
    ["exp_avg_sq", "exp_avg"]
        .into_iter()
        .find(|w| t.contains(w))
        .map(|state| {
            (
                id::OPTIMIZER_STEP,
                format!("{state} (the optimizer's state, in the failing source line)"),
            )
        })
}

/// The phase a recogniser's marker names.
pub fn of_mark(mark: PhaseMark) -> &'static str {
    match mark {
        PhaseMark::ModelLoad | PhaseMark::LoadFailed => id::MODEL_LOAD,
        PhaseMark::EngineStartup => id::ENGINE_STARTUP,
        PhaseMark::CudaGraphCapture => id::CUDA_GRAPH_CAPTURE,
        PhaseMark::Warmup => id::WARMUP,
        PhaseMark::TrainingStart => id::FIRST_STEP,
        PhaseMark::Evaluation => id::EVALUATION,
        PhaseMark::Generation => id::GENERATION,
        PhaseMark::Serving => id::SERVING,
    }
}

/// Whether a frame's file is a launcher's: code that starts the script in another process
/// and waits for it (accelerate's and DeepSpeed's launchers, torchrun and its elastic agent,
/// `torch.multiprocessing.spawn`, Python's `subprocess`, and their console scripts).
fn launcher_file(file: &str) -> bool {
    const LAUNCHERS: &[&str] = &[
        "accelerate/commands/",
        "torch/distributed/run.py",
        "torch/distributed/launch.py",
        "torch/distributed/elastic/",
        "torch/multiprocessing/spawn.py",
        "deepspeed/launcher/",
        "/subprocess.py",
        "bin/accelerate",
        "bin/torchrun",
        "bin/deepspeed",
        "Scripts/accelerate",
        "Scripts/torchrun",
    ];
    let file = file.replace('\\', "/");
    LAUNCHERS.iter().any(|l| file.contains(l))
}

/// Decides the phase of a failure.
///
/// `preceding` are the cleaned lines before the failure line, nearest first (bounded by the
/// scanner's look-back window). `marker` is the latest phase marker and how many lines
/// before the failure it was (`None` if it was outside the window or never seen).
pub fn decide(preceding: &[CleanLine], marker: Option<(PhaseMark, u64)>) -> PhaseDecision {
    // 1. The traceback directly above the error: frames up to the "Traceback" header.
    // (file, function, the frame's source line or "").
    let mut frames: Vec<(String, String, String)> = Vec::new();
    // The innermost frame shown and its source line: the call that failed.
    let mut innermost_call: Option<(String, String)> = None;
    let mut saw_frames = false;
    for (i, l) in preceding.iter().take(400).enumerate() {
        let t = l.text.trim_start();
        // A frame line a terminal cut (`File "/x/generation/utils.py", li` / `ne 2465, in
        // generate`) is read joined with its piece, the line after it (nearer the error).
        let joined = (t.starts_with("File \"") && !FRAME.is_match(&l.text))
            .then(|| i.checked_sub(1).map(|j| &preceding[j]))
            .flatten()
            .and_then(|next| {
                let gap = if next.indented { " " } else { "" };
                [
                    format!("{}{gap}{}", l.text, next.text),
                    format!("{} {}", l.text.trim_end(), next.text),
                    format!("{}{}", l.text.trim_end(), next.text),
                ]
                .into_iter()
                .find(|j| FRAME.is_match(j))
            });
        let text = joined.as_deref().unwrap_or(&l.text);
        if let Some(frame) = frame_location(text) {
            let file = frame.file;
            let mut func = frame.func.to_string();
            // Lines the function name's piece took: the source line follows them.
            let mut name_piece = usize::from(joined.is_some());
            // Cut inside the function's name (`..., line 109, in __in` / `it__`): the
            // piece is the next line, unindented and a bare lower-case identifier, where
            // Python prints the indented source line. (An exception's name, which can
            // follow a frame without source, starts upper-case.)
            if frame.python_form && text.len() >= 60 {
                if let Some(next) = i.checked_sub(1).map(|j| &preceding[j]) {
                    let piece = next.text.trim_end();
                    if !next.indented
                        && piece.len() <= 40
                        && piece.starts_with(|ch: char| ch.is_ascii_lowercase() || ch == '_')
                        && piece
                            .chars()
                            .all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
                    {
                        func.push_str(piece);
                        name_piece += 1;
                    }
                }
            }
            let source = i
                .checked_sub(1 + name_piece)
                .map_or("", |j| preceding[j].text.trim());
            if frames.is_empty() {
                innermost_call = i
                    .checked_sub(1)
                    .map(|j| (file.to_string(), preceding[j].text.trim().to_string()));
            }
            frames.push((file.to_string(), func, source.to_string()));
            saw_frames = true;
            continue;
        }
        // `rich` draws the header inside its box: `╭──── Traceback (most recent call last) ──╮`.
        if t.starts_with("Traceback (most recent call last)")
            || (t.starts_with('╭') && t.contains("Traceback (most recent call last)"))
        {
            break;
        }
        // Between the frames sit source lines and `^^^^` markers; after the exception line we
        // may also see chained-exception banners. Stop at the banner of a previous exception.
        if saw_frames
            && (t.starts_with("During handling of the above exception")
                || t.starts_with("The above exception was the direct cause"))
        {
            break;
        }
    }
    let mut steps = None;
    let mut epoch = None;
    let (mut saw_epoch_zero, mut bare_epoch_one) = (false, false);
    let mut last_progress_distance: Option<u64> = None;
    let mut saw_loss_log = false;
    let mut evaluation_rounds = None;
    let mut lower = Vec::new();
    // What the bar nearest the failure is labelled: the work that failed. Bars labelled
    // otherwise counted other work (`Running loglikelihood requests: 147/147` above
    // `Running generate_until requests: 0/20`; a dataset's unlabelled `444218/444218`
    // above `Epoch: [0][256/1389]`), whose steps say nothing of whether this one fits.
    let mut nearest_bar: Option<String> = None;
    // Whether that bar had reached its total: its work was done before the failure.
    let mut nearest_bar_finished = false;
    // The nearest bar is finished, unlabelled and above the step or loss lines the loop
    // printed (`iter 4 step 0: loss 1.55` under a data preparation's `50002/50002`): it and
    // the bars above it counted other work.
    let mut bars_counted_other_work = false;
    for (distance, l) in preceding.iter().enumerate() {
        let t = &l.text;
        // Which of the regexes below can match at all, from words each needs: most lines
        // before a failure hold none, and six regex searches over each of hundreds of lines
        // were most of what a failure cost.
        let may = ProgressWords::of(t, &mut lower);
        if !may.any() {
            continue;
        }
        if may.evaluation && EVALUATION_ROUND.is_match(t) {
            evaluation_rounds = Some(evaluation_rounds.unwrap_or(0u64) + 1);
            continue;
        }
        let mut progress = false;
        // Progress bars of loading, downloading, graph capture or preparing a dataset
        // (`Training datasets: 100%|...| 231/231`, `Map:`, `Generating train split`) are
        // not training steps.
        if (may.tqdm || may.step || may.loss || may.epoch) && NOT_STEPS.is_match(t) {
            continue;
        }
        if let Some(count) = may
            .tqdm
            .then(|| {
                redrawn_count(t, &TQDM, |c| {
                    count_of(c.name("cur").or(c.name("rcur")).or(c.name("bcur")))
                })
            })
            .flatten()
        {
            if let Some(n) = count {
                let label = bar_label(t);
                if nearest_bar.is_none() {
                    nearest_bar_finished = bar_finished(t);
                    bars_counted_other_work = nearest_bar_finished
                        && label.is_empty()
                        && last_progress_distance.is_some();
                }
                let same_work = nearest_bar.get_or_insert_with(|| label.clone()) == &label;
                if same_work && !bars_counted_other_work {
                    steps = Some(steps.unwrap_or(0u64).max(n));
                    progress = true;
                }
            }
        } else if let Some(count) = may
            .step
            .then(|| {
                // A counter past 10^8 is an id or a timestamp, not steps (per update).
                redrawn_count(t, &STEP, |c| {
                    count_of(c.name("n")).filter(|&n| n < 100_000_000)
                })
            })
            .flatten()
        {
            let checkpoints = || {
                (distance..distance + 3)
                    .filter_map(|d| preceding.get(d))
                    .any(|l| CHECKPOINT_LOAD.is_match(&l.text))
            };
            if let Some(n) = count.filter(|_| !t.contains("File \"") && !checkpoints()) {
                steps = Some(steps.unwrap_or(0u64).max(n));
                progress = true;
            }
        }
        if may.loss && LOSS_LOG.is_match(t) {
            saw_loss_log = true;
            progress = true;
            let leading = LEADING_STEP
                .captures(t)
                .and_then(|c| c["n"].parse::<u64>().ok());
            steps = Some(steps.unwrap_or(1).max(leading.unwrap_or(1)).max(1));
        }
        // Not a setting that names the epoch as a unit (`Num batches each epoch = 3`,
        // `steps per epoch: 100`): those are sizes, not a count of epochs done.
        let epoch_count = may.epoch.then(|| EPOCH.captures(t)).flatten().filter(|c| {
            let before = t[..c.get(0).map_or(0, |m| m.start())].trim_end();
            let unit_of = before
                .rsplit(|ch: char| !ch.is_alphanumeric())
                .next()
                .unwrap_or("");
            !["each", "per", "every", "an", "one"]
                .iter()
                .any(|w| unit_of.eq_ignore_ascii_case(w))
        });
        if let Some(c) = epoch_count {
            if let Ok(e) = c["n"].parse::<f64>() {
                // `Epoch 3/30` (Keras, many trainers) counts from 1: two epochs are done.
                // A bare label may count from 0 (Lightning's `Epoch 1:` is the second) or
                // from 1 (`Training Epoch: 1`, most scripts' `epoch + 1`): `Epoch 1` says an
                // epoch is done only beside an `Epoch 0` (see below). Trainer dicts'
                // `'epoch': 1.0` measure progress and are exact.
                let label = c.get(0).map_or("", |m| m.as_str());
                let bare =
                    c.name("of").is_none() && !label.starts_with('\'') && !c["n"].contains('.');
                let done = if c.name("of").is_some() {
                    (e.floor() as u64).saturating_sub(1)
                } else {
                    e.floor() as u64
                };
                if bare && done == 0 {
                    saw_epoch_zero = true;
                }
                if bare && done == 1 {
                    bare_epoch_one = true;
                    epoch = Some(epoch.unwrap_or(0u64));
                } else {
                    epoch = Some(epoch.unwrap_or(0u64).max(done));
                }
            }
        }
        if progress && last_progress_distance.is_none() {
            last_progress_distance = Some(distance as u64 + 1);
        }
    }
    if bare_epoch_one && saw_epoch_zero {
        epoch = epoch.map(|e| e.max(1));
    }
    let frames_text = (!frames.is_empty()).then(|| {
        frames
            .iter()
            .take(40)
            .map(|(file, func, _)| {
                let base = file.rsplit(['/', '\\']).next().unwrap_or(file);
                format!("{base}:{func}")
            })
            .collect::<Vec<_>>()
            .join(" < ")
    });
    let steady = steps.is_some_and(|s| s >= 2)
        || epoch.is_some_and(|e| e >= 1)
        || evaluation_rounds.is_some_and(|r| r >= 1)
        || saw_loss_log && steps.is_some_and(|s| s >= 2);

    // Frames: the outermost-decisive class, in priority order.
    let mut best: Option<(usize, &'static str, String)> = None;
    let mut in_training_step = false;
    let mut in_optimizer_step = false;
    for (file, func, source) in &frames {
        if STEP_FUNCTIONS.contains(&func.as_str()) {
            in_training_step = true;
        }
        if let Some(p) = frame_phase(file, func, source) {
            // Frames run innermost first. An optimizer's `step(closure)` that calls the
            // training step (Lightning's automatic optimisation, LBFGS) wraps the forward:
            // with the step function inside it, the failure is in the step, not the update.
            if p == id::OPTIMIZER_STEP && in_training_step {
                continue;
            }
            // The reverse nesting: a `backward` that steps the optimizer itself
            // (Accelerate's DeepSpeed `backward` calls `engine.step()`; optimizers run in
            // backward hooks) failed in the step it called, not in autograd.
            if p == id::OPTIMIZER_STEP {
                in_optimizer_step = true;
            } else if p == id::BACKWARD && in_optimizer_step {
                continue;
            }
            let rank = FRAME_CLASSES
                .iter()
                .position(|c| c.phase == p)
                .unwrap_or(usize::MAX);
            if best.as_ref().is_none_or(|(r, ..)| rank < *r) {
                best = Some((rank, p, format!("{func} ({file})")));
            }
        }
    }
    // A traceback cut to the user's own frames (a debugger's or an IDE's report, the last
    // lines of one pasted) names no library function, and a paste may keep no frame at all,
    // only the source line above the error: that line shows what failed (see
    // `failing_source_line`).
    if best.is_none() {
        let source = match &innermost_call {
            Some((file, text)) => Some((text.as_str(), Some(file.as_str()))),
            None if frames.is_empty() => preceding
                .iter()
                .take(2)
                .map(|l| l.text.trim())
                .find(|t| !t.is_empty() && !t.starts_with('^') && !t.starts_with('~'))
                .map(|t| (t, None)),
            None => None,
        };
        if let Some((p, ev)) = source.and_then(|(t, file)| failing_source_line(t, file)) {
            best = Some((0, p, ev));
        }
    }
    let training_loop = saw_loss_log || in_training_step;
    // A function decorated with `torch.no_grad()` / `inference_mode()` (their
    // `decorate_context` frame, in `grad_mode.py` before 2.0 and `_contextlib.py` since) runs
    // without autograd: its progress bars count samples or batches of inference, not
    // training steps.
    let no_grad = frames.iter().any(|(file, func, _)| {
        func == "decorate_context"
            && (file.ends_with("grad_mode.py") || file.ends_with("_contextlib.py"))
    });
    // A finished bar above a failure in generation counted work that was done (a
    // quantiser's calibration, a dataset's preparation): the generation that failed is other
    // work, and did not fit many times.
    let steps =
        if best.as_ref().is_some_and(|(_, p, _)| *p == id::GENERATION) && nearest_bar_finished {
            None
        } else {
            steps
        };
    // `.cuda()` / `.to()` only mean loading when nothing in the frames says training.
    if let Some((_, p, ev)) = &best {
        let load_by_move = *p == id::MODEL_LOAD && ev.split(' ').next().is_some_and(moves_a_model);
        if !(load_by_move && in_training_step) {
            return PhaseDecision {
                frames: frames_text.clone(),
                phase: p,
                evidence: Some(format!("traceback frame {ev}")),
                steps_completed: steps,
                epoch,
                evaluation_rounds,
                training_loop,
            };
        }
    }

    // 2. A marker that no training progress followed. A loading marker does not outweigh a
    // traceback that shows where the failure was: library frames, none of them loading
    // (the load finished and something after it failed, e.g. a pipeline's call whose
    // progress bar the paste does not show). A library is what the script called: an
    // installed package, or another file than the script's own (the outermost frame's),
    // such as a checkout run from its source tree.
    if let Some((mark, distance)) = marker {
        // A script saying the load it announced has finished (`Model loaded in 6.41s`,
        // `Done loading model in 61.8 seconds`) below the marker: what failed came after.
        let load_done_after = of_mark(mark) == id::MODEL_LOAD
            && preceding
                .iter()
                .take((distance as usize).saturating_sub(1))
                .any(|l| LOAD_DONE.is_match(&l.text));
        let progress_after =
            load_done_after || last_progress_distance.is_some_and(|d| d < distance);
        // A launcher's own frames (accelerate's `launch`, torchrun, a `subprocess` call) are
        // the parent that waited for the script's process, not where the failure was: a
        // parent's traceback over a child's death shows nothing of the child.
        let own: Vec<&str> = frames
            .iter()
            .map(|(file, _, _)| file.as_str())
            .filter(|file| !launcher_file(file))
            .collect();
        let script = own.last().copied();
        let library_frames = own
            .iter()
            .filter(|file| file.contains("-packages") || Some(**file) != script)
            .count();
        let traceback_elsewhere =
            of_mark(mark) == id::MODEL_LOAD && best.is_none() && library_frames >= 3;
        if !progress_after && !traceback_elsewhere {
            let phase = of_mark(mark);
            let phase = if phase == id::FIRST_STEP && steady {
                id::STEADY_STATE
            } else {
                phase
            };
            return PhaseDecision {
                frames: frames_text.clone(),
                phase,
                evidence: Some(format!("log marker {mark:?}, {distance} lines before")),
                steps_completed: steps,
                epoch,
                evaluation_rounds,
                training_loop,
            };
        }
    }

    // 3. Progress counters.
    if steady {
        return PhaseDecision {
            frames: frames_text.clone(),
            phase: id::STEADY_STATE,
            evidence: Some(match (steps, evaluation_rounds) {
                (None, Some(r)) => format!("{r} evaluation rounds completed before the failure"),
                _ => format!("{} steps completed before the failure", steps.unwrap_or(0)),
            }),
            steps_completed: steps,
            epoch,
            evaluation_rounds,
            training_loop,
        };
    }
    // Bars over a no-grad function count inference, unless a training loop shows too.
    let bars_count_training = training_loop || !no_grad;
    if in_training_step || (steps.is_some() && bars_count_training) {
        return PhaseDecision {
            frames: frames_text.clone(),
            phase: id::FIRST_STEP,
            evidence: Some("inside the first training step".into()),
            steps_completed: steps,
            epoch,
            evaluation_rounds,
            training_loop,
        };
    }
    PhaseDecision {
        frames: frames_text.clone(),
        phase: id::UNKNOWN,
        evidence: None,
        steps_completed: steps,
        epoch,
        evaluation_rounds,
        training_loop,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::log::clean::clean_line;

    /// A regex matches only lines whose words say it may: every line of every bundled log
    /// (and of the real-world set beside the project, when it is there), cleaned as the
    /// scan cleans them, and lines made to test the case folding.
    #[test]
    fn progress_words_never_rule_out_a_match() {
        let logs = crate::input::walk::Filter {
            include: vec!["*.log".into(), "*.txt".into()],
            exclude: Vec::new(),
        };
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        for dir in [
            "fixtures",
            "rules",
            "tests/regressions",
            "../shared/eval/realworld",
        ] {
            // The real-world set is beside the project only where it is checked out.
            if let Ok(w) = crate::input::walk::walk_filtered(&root.join(dir), &logs) {
                files.extend(w.files);
            }
        }
        let mut lines: Vec<String> = [
            "STEP 12 | LOSS 3.1",
            "ſtep 5",
            "Iteration: 7",
            "global_step=40",
            "EPOCH [3/30]",
            "'Epoch': 2.5",
            "*** Running Evaluation ***",
            "Starting the VALIDATION loop",
            " 45%|████▌     | 45/100 [00:10<00:12,  4.50it/s]",
            "Map: 100%|██████████| 10/10",
            "{'loss': 1.2, 'grad_norm': 0.5}",
            "train_loss=0.73",
            "İteration 5",
            "ıt 5",
            "ÉIT 5",
            "3/4 [00:01<00:02]",
            "٣/٤ 00:01:02 •",
            "| 12/40 [",
        ]
        .map(String::from)
        .to_vec();
        for f in &files {
            let bytes = std::fs::read(f).unwrap();
            lines.extend(bytes.split(|&b| b == b'\n').map(|l| clean_line(l).text));
        }
        assert!(lines.len() > 3_000, "{} lines", lines.len());
        let mut lower = Vec::new();
        let mut matched = 0;
        for t in &lines {
            let may = ProgressWords::of(t, &mut lower);
            for (name, re, allowed) in [
                ("evaluation", &*EVALUATION_ROUND, may.evaluation),
                ("tqdm", &*TQDM, may.tqdm),
                ("step", &*STEP, may.step),
                ("loss", &*LOSS_LOG, may.loss),
                ("epoch", &*EPOCH, may.epoch),
                // NOT_STEPS is asked only where one of the four above may match: it can only
                // stop them, so the four checks cover it.
            ] {
                if re.is_match(t) {
                    matched += 1;
                    assert!(allowed, "{name} matches {t:?} but its words were not seen");
                }
            }
        }
        assert!(matched > 500, "{matched} matches");
    }

    /// Lines in file order; `decide` wants them nearest-first.
    fn pre(text: &str) -> Vec<CleanLine> {
        text.lines()
            .rev()
            .map(|l| clean_line(l.as_bytes()))
            .collect()
    }

    #[test]
    fn traceback_frames_decide() {
        let tb = r#"Traceback (most recent call last):
  File "/app/train.py", line 88, in <module>
    model = AutoModelForCausalLM.from_pretrained(name, torch_dtype=torch.float32)
  File "/usr/lib/python3/site-packages/transformers/modeling_utils.py", line 4100, in from_pretrained
    model = cls(config)
  File "/usr/lib/python3/site-packages/torch/nn/modules/module.py", line 1150, in to
    return self._apply(convert)"#;
        assert_eq!(decide(&pre(tb), None).phase, id::MODEL_LOAD);

        // `torch.cuda.graph`'s context manager ending a capture.
        let tb = r#"Traceback (most recent call last):
  File "/app/serve.py", line 40, in <module>
    with torch.cuda.graph(g):
  File "/opt/venv/lib/python3.11/site-packages/torch/cuda/graphs.py", line 186, in __exit__
    self.cuda_graph.capture_end()"#;
        assert_eq!(decide(&pre(tb), None).phase, id::CUDA_GRAPH_CAPTURE);

        let tb = r#"{'loss': 1.2, 'learning_rate': 1e-05, 'epoch': 0.4}
 45%|████▌     | 450/1000 [10:00<12:00,  1.2s/it]
Traceback (most recent call last):
  File "train.py", line 10, in <module>
    trainer.train()
  File "/site-packages/transformers/trainer.py", line 3000, in training_step
    self.accelerator.backward(loss)
  File "/site-packages/torch/_tensor.py", line 520, in backward
    torch.autograd.backward("#;
        let d = decide(&pre(tb), None);
        assert_eq!(d.phase, id::BACKWARD);
        assert_eq!(d.steps_completed, Some(450));

        // An evaluation that generates failed in the generation: here allocating the cache.
        let tb = r#"Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/recipes/eleuther_eval.py", line 229, in evaluate
    eleuther_results = evaluate(
  File "/venv/lib/python3.11/site-packages/lm_eval/models/huggingface.py", line 1292, in generate_until
    cont = self._model_generate(
  File "/venv/lib/python3.11/site-packages/torchtune/modules/transformer.py", line 183, in setup_caches
    layer.attn.kv_cache = KVCache(
  File "/venv/lib/python3.11/site-packages/torchtune/modules/kv_cache.py", line 36, in __init__
    "k_cache", torch.zeros(cache_shape, dtype=dtype), persistent=False"#;
        let d = decide(&pre(tb), None);
        assert_eq!(d.phase, id::GENERATION);
        assert!(d.evidence.is_some_and(|e| e.contains("kv_cache.py")));

        // A server loading a model on request: its loaders say so by name.
        let tb = r#"Traceback (most recent call last):
  File "C:\tabbyAPI\backends\exllamav2\model.py", line 720, in load_model_sync
    for value in self.model.load_gen(
  File "C:\tabbyAPI\venv\Lib\site-packages\exllamav2\linear.py", line 134, in load
    w = self.load_weight(cpu = output_map is not None)
  File "C:\tabbyAPI\venv\Lib\site-packages\exllamav2\stloader.py", line 157, in get_tensor
    tensor = tensor.to(device, non_blocking = True)"#;
        assert_eq!(decide(&pre(tb), None).phase, id::MODEL_LOAD);
    }

    /// A model built straight on the device (`with torch.device("cuda"): Model(config)`):
    /// the innermost frames are a layer's constructor allocating its parameters.
    #[test]
    fn a_layer_constructor_on_the_device_is_loading() {
        let tb = r#"Traceback (most recent call last):
  File "/work/build.py", line 18, in <module>
    model = LlamaForCausalLM(cfg)
  File "/venv/lib/python3.12/site-packages/transformers/models/llama/modeling_llama.py", line 239, in __init__
    self.o_proj = nn.Linear(
  File "/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py", line 109, in __init__
    torch.empty((out_features, in_features), **factory_kwargs)
  File "/venv/lib/python3.12/site-packages/torch/utils/_device.py", line 116, in __torch_function__
    return func(*args, **kwargs)"#;
        let d = decide(&pre(tb), None);
        assert_eq!(d.phase, id::MODEL_LOAD);
        assert!(d.evidence.unwrap().contains("linear.py"));

        // A user's own module's constructor is not read as loading: it may run anywhere.
        let tb = r#"Traceback (most recent call last):
  File "/work/train.py", line 30, in <module>
    head = Head(cfg).cuda()
  File "/work/model.py", line 12, in __init__
    self.buf = torch.zeros(n, device="cuda")"#;
        assert_eq!(decide(&pre(tb), None).phase, id::UNKNOWN);
    }

    /// A parallel layer's constructor creating its weight (fairscale, Megatron): the model is
    /// being built; a constructor's other allocations say nothing.
    #[test]
    fn a_constructor_creating_a_parameter_is_loading() {
        let tb = r#"Traceback (most recent call last):
  File "/srv/chat/run.py", line 59, in load
    model = Transformer(model_args)
  File "/srv/chat/model.py", line 166, in __init__
    self.w2 = RowParallelLinear(
  File "/venv/lib/python3.10/site-packages/fairscale/nn/model_parallel/layers.py", line 349, in __init__
    self.weight = Parameter(torch.Tensor(self.out_features, self.in_features))"#;
        let d = decide(&pre(tb), None);
        assert_eq!(d.phase, id::MODEL_LOAD, "{:?}", d.evidence);
        assert!(d.evidence.unwrap().contains("layers.py"));

        let tb = tb.replace("Parameter(torch.Tensor", "torch.Tensor(");
        assert_eq!(decide(&pre(&tb), None).phase, id::UNKNOWN);
    }

    /// A quantisation tool's calibration passes over its samples are not training steps.
    #[test]
    fn calibration_passes_are_not_steps() {
        let log = "(80/81): Calibrating: 100%|██████████| 512/512 [00:07<00:00, 70.12it/s]\n2026-02-17T10:39:40 | compress_modules | INFO - Quantizing model.layers.79.mlp.down_proj using 512 samples\n(81/81): Propagating: 100%|██████████| 512/512 [00:00<00:00, 2391.05it/s]\nTraceback (most recent call last):\n  File \"example.py\", line 40, in <module>\n    output = model.generate(input_ids, max_new_tokens=100)";
        assert_eq!(decide(&pre(log), None).steps_completed, None);
    }

    /// A finished bar of other work above a failure in generation is no count of
    /// generations that fit; a bar still running over the generations is.
    #[test]
    fn a_finished_bar_above_a_generation_is_other_work() {
        let tb = "Traceback (most recent call last):\n  File \"run.py\", line 74, in <module>\n    output = model.generate(input_ids, max_new_tokens=100)\n  File \"/venv/lib/python3.12/site-packages/transformers/generation/utils.py\", line 2700, in _sample\n    outputs = self(**model_inputs, return_dict=True)";
        let done =
            format!("Preparing cache: 100%|██████████| 512/512 [00:03<00:00, 146.27it/s]\n{tb}");
        let d = decide(&pre(&done), None);
        assert_eq!((d.phase, d.steps_completed), (id::GENERATION, None));
        let running =
            format!("Generating: 45%|████▌     | 450/1000 [09:12<11:15,  1.23s/it]\n{tb}");
        assert_eq!(decide(&pre(&running), None).steps_completed, Some(450));
    }

    /// A data preparation's finished, unlabelled bar above the loop's own step lines
    /// counted examples, not steps; a training bar running above loss lines still counts.
    #[test]
    fn a_finished_preparation_bar_above_step_lines_is_other_work() {
        let log = "Processing train split ...\n\
                   100%|██████████| 50002/50002 [00:38<00:00, 1298.41it/s]\n\
                   iter 0 step 0: loss 1.6107, iter time: 1712.35ms\n\
                   iter 4 step 0: loss 1.5530, iter time: 1186.11ms";
        assert_eq!(decide(&pre(log), None).steps_completed, Some(4));
        let hf = " 45%|████▌     | 450/1000 [09:12<11:15,  1.23s/it]\n{'loss': 1.2093, 'learning_rate': 2e-05, 'epoch': 0.45}";
        assert_eq!(decide(&pre(hf), None).steps_completed, Some(450));
    }

    /// A reinforcement-learning loop's episodes are its steps: the same work, repeated.
    #[test]
    fn episodes_count_as_steps() {
        let log = "episode  400 | frames   918 | reward -19.0 | compile+fit 7.35s\nepisode  405 | frames   954 | reward -20.0 | compile+fit 7.41s\nTraceback (most recent call last):\n  File \"dqn.py\", line 88, in <module>\n    agent.model.fit(states, targets, epochs=1, verbose=0)";
        let d = decide(&pre(log), None);
        assert_eq!(d.steps_completed, Some(405));
        assert_eq!(d.phase, id::STEADY_STATE);
    }

    /// A progress bar over a function run under `torch.no_grad()` counts inference, not
    /// training steps.
    #[test]
    fn a_bar_over_no_grad_work_is_not_a_training_step() {
        let tb = |decorator: &str| {
            format!(
                "Sampling:   0%|          | 0/3 [00:00<?, ?it/s]\nTraceback (most recent call last):\n  File \"scripts/txt2img.py\", line 358, in main\n    x_samples = model.decode_first_stage(samples)\n{decorator}  File \"ldm/models/autoencoder.py\", line 90, in decode\n    dec = self.decoder(z)"
            )
        };
        let with = tb(
            "  File \"/venv/lib/python3.10/site-packages/torch/utils/_contextlib.py\", line 115, in decorate_context\n    return func(*args, **kwargs)\n",
        );
        assert_eq!(decide(&pre(&with), None).phase, id::UNKNOWN);
        assert_eq!(decide(&pre(&tb("")), None).phase, id::FIRST_STEP);
    }

    /// A checkpoint's step, printed as it loads, is its training history: no step of this
    /// run had happened. A step saved to a checkpoint is one this run took.
    #[test]
    fn a_loaded_checkpoints_step_is_not_this_runs() {
        let tail = "Sampling:   0%|          | 0/3 [00:00<?, ?it/s]\nTraceback (most recent call last):\n  File \"scripts/txt2img.py\", line 358, in main\n    x_samples = model.decode_first_stage(samples)";
        let log = format!(
            "Loading model from checkpoints/768-v-ema.ckpt\nGlobal Step: 140000\nLatentDiffusion: Running in v-prediction mode\n{tail}"
        );
        assert_ne!(decide(&pre(&log), None).steps_completed, Some(140000));
        let log = format!("Restored from checkpoint at global_step=5000\n{tail}");
        assert_ne!(decide(&pre(&log), None).steps_completed, Some(5000));
        let log = format!("step 300 loss 2.41\nSaving checkpoint at step 300\n{tail}");
        assert_eq!(decide(&pre(&log), None).steps_completed, Some(300));
    }

    /// Lightning's automatic optimisation runs the training step inside `optimizer.step(closure)`:
    /// an OOM in the forward is in the step, and rich's bar counts steps.
    #[test]
    fn a_training_step_inside_the_optimizers_closure_is_the_step() {
        let tb = "Epoch 0/-2                                     0/10 0:00:01 • -:--:-- 0.00it/s\nTraceback (most recent call last):\n  File \"/venv/lib/python3.12/site-packages/lightning/pytorch/loops/optimization/automatic.py\", line 270, in _optimizer_step\n    call._call_lightning_module_hook(\n  File \"/venv/lib/python3.12/site-packages/torch/optim/optimizer.py\", line 526, in wrapper\n    out = func(*args, **kwargs)\n  File \"/venv/lib/python3.12/site-packages/torch/optim/adamw.py\", line 220, in step\n    loss = closure()\n  File \"/work/train.py\", line 21, in training_step\n    out = self.model(input_ids=batch, labels=batch)";
        let d = decide(&pre(tb), None);
        assert_eq!(d.phase, id::FIRST_STEP, "{:?}", d.evidence);
        assert_eq!(d.steps_completed, Some(0));
    }

    #[test]
    fn module_to_s_convert_is_loading() {
        let tb = "  File \"C:\\env\\lib\\site-packages\\torch\\nn\\modules\\module.py\", line 1143, in convert\n    return t.to(device, dtype if t.is_floating_point() else None, non_blocking)";
        assert_eq!(decide(&pre(tb), None).phase, id::MODEL_LOAD);
        let tb = "  File \"/work/data.py\", line 10, in convert\n    return t.to(device)";
        assert_eq!(decide(&pre(tb), None).phase, id::UNKNOWN);
    }

    /// Accelerate's DeepSpeed `backward` steps the engine: the failure is in the step.
    #[test]
    fn an_optimizer_step_called_from_backward_is_the_step() {
        let tb = "  File \"/env/site-packages/accelerate/accelerator.py\", line 1983, in backward\n    self.deepspeed_engine_wrapped.backward(loss, **kwargs)\n  File \"/env/site-packages/accelerate/utils/deepspeed.py\", line 176, in backward\n    self.engine.step()\n  File \"/env/site-packages/deepspeed/runtime/engine.py\", line 2087, in step\n    self._take_model_step(lr_kwargs)\n  File \"/env/site-packages/deepspeed/runtime/engine.py\", line 1994, in _take_model_step\n    self.optimizer.step()";
        let d = decide(&pre(tb), None);
        assert_eq!(d.phase, id::OPTIMIZER_STEP, "{:?}", d.evidence);
        // A backward with no optimizer step inside it stays the backward pass.
        let tb = "  File \"/work/train.py\", line 40, in main\n    loss.backward()\n  File \"/env/site-packages/torch/_tensor.py\", line 521, in backward\n    torch.autograd.backward(";
        assert_eq!(decide(&pre(tb), None).phase, id::BACKWARD);
    }

    /// Only the user's own frame: its source line shows the call that failed.
    #[test]
    fn the_innermost_frames_call_decides_when_no_frame_does() {
        let tb = "  File \"E:\\work\\load.py\", line 8, in <module>\n    model = AutoModelForCausalLM.from_pretrained(\"org/model\", device_map=\"cuda\").eval()";
        let d = decide(&pre(tb), None);
        assert_eq!(d.phase, id::MODEL_LOAD, "{:?}", d.evidence);
        assert!(
            d.evidence
                .unwrap()
                .starts_with("traceback frame from_pretrained")
        );
        let tb = "  File \"/work/train.py\", line 40, in main\n    loss.backward()";
        assert_eq!(decide(&pre(tb), None).phase, id::BACKWARD);
        // A tensor's `.to()` is no model being moved; a call in an outer frame is not the
        // one that failed.
        let tb = "  File \"/work/train.py\", line 40, in main\n    images = images.to(device)";
        assert_eq!(decide(&pre(tb), None).phase, id::UNKNOWN);
        let tb = "  File \"/work/train.py\", line 12, in <module>\n    model = AutoModel.from_pretrained(name)\n  File \"/work/train.py\", line 40, in main\n    out = run(batch)";
        assert_eq!(decide(&pre(tb), None).phase, id::UNKNOWN);
    }

    /// Only the failing source line survived the paste: Adam's state names the step.
    #[test]
    fn adam_state_in_the_failing_line_is_the_optimizer_step() {
        let log = "    denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)";
        assert_eq!(decide(&pre(log), None).phase, id::OPTIMIZER_STEP);
        let log = "    logits = self.lm_head(hidden_states)";
        assert_eq!(decide(&pre(log), None).phase, id::UNKNOWN);
    }

    /// Wrapping a model for data parallelism places it on the devices: loading, whether a
    /// frame or a lone source line shows the call.
    #[test]
    fn wrapping_a_model_for_data_parallel_is_loading() {
        let tb = "  File \"/work/train.py\", line 88, in main\n    model = DistributedDataParallel(model, device_ids=[local_rank])";
        assert_eq!(decide(&pre(tb), None).phase, id::MODEL_LOAD);
        let log = "    model = MMDistributedDataParallel(module=model.cuda(), device_ids=[torch.cuda.current_device()])";
        assert_eq!(decide(&pre(log), None).phase, id::MODEL_LOAD);
    }

    /// Only the failing source line survived the paste, with no frame above it: its call is
    /// read as an innermost frame's would be, and a KV pool's buffers allocated in it are the
    /// engine's start-up. A tensor moved, a layer called or a buffer of another kind is not.
    #[test]
    fn a_lone_source_line_names_its_call() {
        let log = "    Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass";
        assert_eq!(decide(&pre(log), None).phase, id::BACKWARD);
        let log =
            "    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float16)";
        assert_eq!(decide(&pre(log), None).phase, id::MODEL_LOAD);
        let log = "    self.value_buffer = [torch.empty((size, head_num, head_dim), dtype=dtype, device=\"cuda\") for _ in range(layer_num)]";
        let d = decide(&pre(log), None);
        assert_eq!(d.phase, id::ENGINE_STARTUP);
        assert!(d.evidence.unwrap().contains("KV pool buffers"));
        for log in [
            "    images = images.to(device)",
            "    out = self.proj(x)",
            "    self.out_buffer = torch.empty((n, d), device=\"cuda\")",
        ] {
            assert_eq!(decide(&pre(log), None).phase, id::UNKNOWN, "{log}");
        }
    }

    /// A script that announces each evaluation round but counts no steps: two rounds before
    /// the failure mean the step had run through twice.
    #[test]
    fn evaluation_rounds_count_as_progress() {
        let log = "Start training.\n...\nStart validating.\n...\nStart training.\n...\nStart validating.\n...\nStart training.\n...";
        let d = decide(&pre(log), None);
        assert_eq!(d.evaluation_rounds, Some(2));
        assert_eq!(d.phase, id::STEADY_STATE, "{:?}", d.evidence);
        // The progress bar inside a round is not a round.
        let log = "Validating: 100%|##########| 50/50 [00:03<00:00]\nValidation loss: 0.41";
        assert_eq!(decide(&pre(log), None).evaluation_rounds, None);
        let log = "***** Running Evaluation *****\n  Num examples = 500";
        assert_eq!(decide(&pre(log), None).evaluation_rounds, Some(1));
    }

    /// A training script's header sizes an epoch (`Num batches each epoch = 3`); it does not
    /// say three epochs ran. `Epoch 3/30` and `'epoch': 2.5` do.
    #[test]
    fn an_epochs_size_is_not_epochs_done() {
        let log = "  Num batches each epoch = 3\n  Num Epochs = 500\n  steps per epoch: 120\nSteps:   0%|   | 0/500 [00:00<?, ?it/s]";
        let d = decide(&pre(log), None);
        assert_eq!((d.epoch, d.steps_completed), (None, Some(0)), "{d:?}");
        assert_ne!(d.phase, id::STEADY_STATE);
        assert_eq!(decide(&pre("Epoch 3/30"), None).epoch, Some(2));
        assert_eq!(
            decide(&pre("{'loss': 1.2, 'epoch': 2.5}"), None).epoch,
            Some(2)
        );
        // A bare `Epoch 1` may be the first epoch (counted from 1) or the second (from 0):
        // the first unless the log shows an `Epoch 0` too.
        let first = "Training Epoch: 1:   0%|          | 0/97 [00:00<?, ?it/s]";
        let d = decide(&pre(first), None);
        assert_eq!((d.epoch, d.phase), (Some(0), id::FIRST_STEP), "{d:?}");
        let second = "Epoch 0: 100%|##########| 97/97 [01:10<00:00]\nEpoch 1:   0%|          | 0/97 [00:00<?, ?it/s]";
        assert_eq!(decide(&pre(second), None).epoch, Some(1));
        assert_eq!(decide(&pre("Epoch 2:   0%| | 0/97"), None).epoch, Some(2));
        assert_eq!(
            decide(&pre("{'loss': 0.9, 'epoch': 1.0}"), None).epoch,
            Some(1)
        );
    }

    /// Runtimes that load a model in a constructor: faster-whisper, ONNX Runtime, TensorRT;
    /// the same runtimes' inference calls are not loading.
    #[test]
    fn runtime_constructors_load_the_model() {
        for tb in [
            "  File \"D:\\whisper-fast\\__main__.py\", line 529, in cli\n  File \"faster_whisper\\transcribe.py\", line 125, in __init__",
            "  File \"/app/run.py\", line 12, in <module>\n    model = WhisperModel(\"large-v3\", device=\"cuda\", compute_type=\"float16\")",
            "  File \"/app/serve.py\", line 30, in load\n    sess = ort.InferenceSession(path, providers=providers)\n  File \"/usr/lib/python3/site-packages/onnxruntime/capi/onnxruntime_inference_collection.py\", line 419, in __init__\n    self._create_inference_session(providers, provider_options, disabled_optimizers)",
            "  File \"/app/trt.py\", line 22, in load_engine\n    engine = runtime.deserialize_cuda_engine(f.read())",
        ] {
            let d = decide(&pre(tb), None);
            assert_eq!(d.phase, id::MODEL_LOAD, "{tb}: {:?}", d.evidence);
        }
        let tb = "  File \"/opt/conda/lib/python3.10/site-packages/accelerate/accelerator.py\", line 1717, in prepare_model\n    model = FSDP(model, **kwargs)\n  File \"/opt/conda/lib/python3.10/site-packages/torch/distributed/fsdp/_flat_param.py\", line 1005, in _get_shard\n    shard = chunk.clone()";
        assert_eq!(decide(&pre(tb), None).phase, id::MODEL_LOAD);
        let tb = "  File \"/app/run.py\", line 30, in <module>\n    segments, info = model.transcribe(audio, beam_size=5)\n  File \"/usr/lib/python3/site-packages/faster_whisper/transcribe.py\", line 940, in encode\n    return self.model.encode(features, to_cpu=to_cpu)";
        assert_ne!(decide(&pre(tb), None).phase, id::MODEL_LOAD);
        // Keras building a model: its filtered traceback keeps the initializer's draw.
        let tb = "  File \"/home/a/sd.py\", line 7, in <module>\n    model = DiffusionModel(512, 512)\n  File \"/env/lib/python3.10/site-packages/keras/utils/traceback_utils.py\", line 70, in error_handler\n    raise e.with_traceback(filtered_tb) from None\n  File \"/env/lib/python3.10/site-packages/keras/backend.py\", line 2100, in random_uniform\n    return tf.random.stateless_uniform(";
        assert_eq!(decide(&pre(tb), None).phase, id::MODEL_LOAD);
    }

    /// Cut at 100 columns inside the function's name: `in __in` / `it__`.
    #[test]
    fn a_function_name_cut_in_two_is_joined() {
        let tb = "Traceback (most recent call last):\n  File \"/work/build.py\", line 18, in <module>\n    model = Net(cfg)\n  File \"/opt/torch/.venv/lib/python3.12/site-packages/torch/nn/modules/linear.py\", line 109, in __in\nit__\n    torch.empty((out_features, in_features), **factory_kwargs)";
        let d = decide(&pre(tb), None);
        assert_eq!(d.phase, id::MODEL_LOAD, "{:?}", d.frames);
        // An exception named right under a frame without source is not part of it.
        let tb = "Traceback (most recent call last):\n  File \"/opt/conda/lib/python3.11/site-packages/torch/nn/modules/module.py\", line 1553, in backward\nKeyboardInterrupt";
        assert!(
            decide(&pre(tb), None)
                .frames
                .unwrap()
                .ends_with(":backward")
        );
    }

    /// The same traceback cut by an 80-column terminal: the frame's function is on the
    /// piece after its `File` line.
    #[test]
    fn frames_cut_at_a_fixed_width_are_read() {
        let tb = "Loading checkpoint shards: 100%|##########| 2/2 [00:03<00:00,  1.61s/it]\n\
Traceback (most recent call last):\n\
  File \"/srv/app/batch_generate.py\", line 52, in <module>\n\
    outputs = model.generate(**enc, max_new_tokens=16384)\n\
  File \"/opt/venv/lib/python3.10/site-packages/transformers/generation/utils.py\"\n\
, line 1989, in generate\n\
    result = self._sample(\n\
  File \"/opt/venv/lib/python3.10/site-packages/transformers/cache_utils.py\", line\n\
 1402, in update\n\
    self.key_cache[layer_idx] = torch.cat([self.key_cache[layer_idx], key_states],\n\
 dim=-2)";
        let d = decide(&pre(tb), Some((PhaseMark::ModelLoad, 11)));
        assert_eq!(d.phase, id::GENERATION);
    }

    #[test]
    fn a_training_loop_shows_in_losses_or_step_functions() {
        assert!(decide(&pre("step 1 loss 1.190\nstep 2 loss 1.180"), None).training_loop);
        assert!(decide(&pre("epoch 1 | train_loss=0.42"), None).training_loop);
        let tb = "Traceback (most recent call last):\n  File \"/x/lightning/loops.py\", line 9, in training_step\n    out = self.model(x)";
        assert!(decide(&pre(tb), None).training_loop);
        // Progress alone is not training: inference and embedding loops count batches too.
        assert!(
            !decide(
                &pre("shard 4: 250000 docs embedded\n 12/500 [00:10<07:00]"),
                None
            )
            .training_loop
        );
        assert!(!decide(&pre("lossless 3 files"), None).training_loop);
    }

    /// A load marker the script itself closed (`Model loaded in 6.41s`) is not where a
    /// later failure was; one it did not close still is.
    #[test]
    fn a_load_the_script_says_finished() {
        let open = "[INFO] Loading model llama3 from ~/.cache ...\n[INFO] Prompt tokens: 16896";
        let d = decide(&pre(open), Some((PhaseMark::ModelLoad, 2)));
        assert_eq!(d.phase, id::MODEL_LOAD);
        let closed = "[INFO] Loading model llama3 from ~/.cache ...\n[INFO] Model loaded in 6.41s (8.03B params)\n[INFO] Prompt tokens: 16896";
        let d = decide(&pre(closed), Some((PhaseMark::ModelLoad, 3)));
        assert_ne!(d.phase, id::MODEL_LOAD);
    }

    /// A loss line that starts with its step counts that step; a number elsewhere on a loss
    /// line does not.
    #[test]
    fn a_step_printed_before_its_loss() {
        let d = decide(&pre("   20 loss 0.84517\n 6300 loss 0.04810"), None);
        assert_eq!(d.steps_completed, Some(6300));
        let d = decide(&pre("batch of 64 loss 0.5"), None);
        assert_eq!(d.steps_completed, Some(1));
    }

    #[test]
    fn markers_and_steps() {
        let d = decide(
            &pre("Loading checkpoint shards:  50%|█████     | 1/2 [00:03<00:03]"),
            Some((PhaseMark::ModelLoad, 1)),
        );
        assert_eq!(d.phase, id::MODEL_LOAD);
        let d = decide(
            &pre("step 1200 loss 2.1\nstep 1210 loss 2.0"),
            Some((PhaseMark::ModelLoad, 500)),
        );
        assert_eq!(d.phase, id::STEADY_STATE);
        assert_eq!(d.steps_completed, Some(1210));
        let d = decide(&pre("Epoch 0: 0%|          | 0/500 [00:00<?, ?it/s]"), None);
        assert_eq!(d.phase, id::FIRST_STEP);
        assert_eq!(decide(&pre("hello"), None).phase, id::UNKNOWN);
        // A loading marker above a traceback through a checkout's own modules (not
        // installed, so no `-packages`), none of them loading: the load had finished.
        let tb = "Traceback (most recent call last):\n  File \"/home/a/exllamav2/examples/chat.py\", line 301, in <module>\n    res = generator.stream_ex()\n  File \"/home/a/exllamav2/exllamav2/generator/streaming.py\", line 312, in stream_ex\n    chunk = self._stream()\n  File \"/home/a/exllamav2/exllamav2/generator/streaming.py\", line 540, in _stream\n    self._gen_feed_tokens(ids)\n  File \"/home/a/exllamav2/exllamav2/model.py\", line 842, in forward_chunk\n    x = module.forward(x)";
        assert_ne!(
            decide(&pre(tb), Some((PhaseMark::ModelLoad, 12))).phase,
            id::MODEL_LOAD
        );
        // The script's own frames alone do not outweigh the marker.
        let own = "Traceback (most recent call last):\n  File \"/home/a/run.py\", line 9, in <module>\n    main()\n  File \"/home/a/run.py\", line 5, in main\n    build()\n  File \"/home/a/run.py\", line 2, in build\n    x = make()";
        assert_eq!(
            decide(&pre(own), Some((PhaseMark::ModelLoad, 9))).phase,
            id::MODEL_LOAD
        );
        // Nor do a launcher's (the parent waiting for the script's process, which died
        // while loading): the steps of a progress bar above the marker are not the run's.
        let launcher = "Processing prompts: 100%|##########| 1043/1043 [00:00<00:00]\nLoading model: black-forest-labs/FLUX.1-dev\nTraceback (most recent call last):\n  File \"/w/.venv/bin/accelerate\", line 8, in <module>\n    sys.exit(main())\n  File \"/w/.venv/lib/python3.11/site-packages/accelerate/commands/accelerate_cli.py\", line 48, in main\n    args.func(args)\n  File \"/w/.venv/lib/python3.11/site-packages/accelerate/commands/launch.py\", line 1106, in launch_command\n    simple_launcher(args)\n  File \"/w/.venv/lib/python3.11/site-packages/accelerate/commands/launch.py\", line 704, in simple_launcher\n    raise subprocess.CalledProcessError(returncode=process.returncode, cmd=cmd)";
        assert_eq!(
            decide(&pre(launcher), Some((PhaseMark::ModelLoad, 10))).phase,
            id::MODEL_LOAD
        );
        let torchrun = launcher
            .replace("accelerate/commands/launch.py", "torch/distributed/run.py")
            .replace(
                "accelerate/commands/accelerate_cli.py",
                "torch/distributed/elastic/multiprocessing/errors/__init__.py",
            );
        assert_eq!(
            decide(&pre(&torchrun), Some((PhaseMark::ModelLoad, 10))).phase,
            id::MODEL_LOAD
        );
        // A library's frames under a launcher's still show where it failed.
        let under_launcher = format!(
            "{launcher}\n  File \"/w/.venv/lib/python3.11/site-packages/diffusers/pipelines/flux/pipeline_flux.py\", line 700, in __call__\n    latents = self.transformer(x)\n  File \"/w/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py\", line 1532, in _wrapped_call_impl\n    return self._call_impl(*args, **kwargs)\n  File \"/w/.venv/lib/python3.11/site-packages/diffusers/models/transformers/transformer_flux.py\", line 480, in forward\n    hidden_states = block(hidden_states)"
        );
        assert_ne!(
            decide(&pre(&under_launcher), Some((PhaseMark::ModelLoad, 14))).phase,
            id::MODEL_LOAD
        );
    }

    #[test]
    fn a_bar_redrawn_in_place_counts_its_last_update() {
        // tqdm captured to a file: every update on one line, each after a `\r`.
        let bar = (0..=300)
            .step_by(5)
            .map(|i| {
                format!(
                    "{:3}%|##        | {i}/500 [00:{:02}<01:00, 4.95it/s]",
                    i / 5,
                    i % 60
                )
            })
            .collect::<Vec<_>>()
            .join("\r");
        let d = decide(&pre(&format!("Training: \r{bar}")), None);
        assert_eq!(d.steps_completed, Some(300));
        assert_eq!(d.phase, id::STEADY_STATE);
        // Counters redrawn the same way; a piece that is not a counter changes nothing.
        let d = decide(&pre("step 38 loss 2.1\rstep 39 loss 2.0\r  \rdone"), None);
        assert_eq!(d.steps_completed, Some(39));
        // A piece's counter past 10^8 is dropped, not the line's other updates.
        let d = decide(&pre("step 38 loss 2.1\rstep 1763000000000 loss 2.0"), None);
        assert_eq!(d.steps_completed, Some(38));
        // One update only: the first step, as before.
        let d = decide(&pre("\r  0%|          | 0/500 [00:00<?, ?it/s]"), None);
        assert_eq!(d.phase, id::FIRST_STEP);
    }

    #[test]
    fn rich_and_ipython_frames_are_frames() {
        let rich = "╭──────────── Traceback (most recent call last) ─────────────╮
│ /srv/app/train.py:40 in main                               │
│ ❱  40 │   model.to(device)                                   │
│ /venv/lib/python3.10/site-packages/torch/nn/modules/module.p │
│ y:1160 in to                                                 │
╰──────────────────────────────────────────────────────────────╯";
        let d = decide(&pre(rich), None);
        assert_eq!(d.phase, id::MODEL_LOAD, "{:?}", d.frames);
        let ipy = "<ipython-input-4-1f2e> in <module>
----> 1 out = trainer.evaluate()
~/venv/lib/python3.8/site-packages/transformers/trainer.py in evaluate(self, eval_dataset)
   1157         output = self.prediction_loop(eval_dataloader)";
        assert_eq!(decide(&pre(ipy), None).phase, id::EVALUATION);
        let own = r#"Traceback (most recent call last):
  File "train.py", line 193, in test
    stats = evaluator.evaluate_predictions(results, topk=args.topk)
  File "/src/models/common.py", line 489, in evaluate_predictions
    results = self.score_fast_model(scores, topk=topk)
  File "/src/models/common.py", line 363, in score_fast_model
    scores[~mask] += bias"#;
        assert_eq!(decide(&pre(own), None).phase, id::EVALUATION);
    }

    #[test]
    fn a_diffusion_sampler_is_not_llm_generation() {
        let tb = r#"Traceback (most recent call last):
  File "C:\ComfyUI\execution.py", line 327, in execute
    output_data = get_output_data(obj, input_data_all)
  File "C:\ComfyUI\nodes.py", line 1525, in sample
    return common_ksampler(model, seed, steps, cfg)
  File "C:\ComfyUI\comfy\samplers.py", line 930, in sample
    output = executor.execute(noise, latent_image, sampler, sigmas)"#;
        assert_ne!(decide(&pre(tb), None).phase, id::GENERATION);
        let tb = r#"Traceback (most recent call last):
  File "C:\ComfyUI\comfy\sampler_helpers.py", line 116, in prepare_sampling
    comfy.model_management.load_models_gpu([model] + models)
  File "C:\ComfyUI\comfy\model_management.py", line 604, in load_models_gpu
    loaded_model.model_load(lowvram_model_memory)
  File "C:\ComfyUI\comfy\model_patcher.py", line 829, in partially_load
    self.load(device_to)"#;
        assert_eq!(decide(&pre(tb), None).phase, id::MODEL_LOAD);
    }

    #[test]
    fn moving_a_batch_inside_a_step_is_not_loading() {
        let tb = r#"Traceback (most recent call last):
  File "train.py", line 40, in train_one_epoch
    x = x.cuda()
  File "train.py", line 12, in cuda
    pass"#;
        assert_eq!(decide(&pre(tb), None).phase, id::FIRST_STEP);
    }
}

#[cfg(test)]
mod counting {
    use super::*;
    use crate::ingest::log::clean::clean_line;

    fn pre(text: &str) -> Vec<CleanLine> {
        text.lines()
            .rev()
            .map(|l| clean_line(l.as_bytes()))
            .collect()
    }

    #[test]
    fn loading_bars_are_not_steps_and_keras_epochs_count_from_one() {
        let d = decide(
            &pre("Loading checkpoint shards:  47%|████▋     | 14/30 [03:02<03:29, 13.10s/it]"),
            Some((PhaseMark::ModelLoad, 1)),
        );
        assert_eq!((d.phase, d.steps_completed), (id::MODEL_LOAD, None));
        let d = decide(
            &pre("Epoch 1/30\n 12/500 [>.....] - ETA: 2:01 - loss: 0.69"),
            None,
        );
        assert_eq!(d.epoch, Some(0));
        assert_ne!(d.phase, id::STEADY_STATE);
        let d = decide(&pre("Epoch 3/30"), None);
        assert_eq!(d.epoch, Some(2));
    }

    #[test]
    fn dataset_bars_are_not_steps() {
        // Building datasets runs bars to 100% before the first step; the training bar that
        // follows has not moved.
        let d = decide(
            &pre(
                "Training datasets: 100%|██████████| 231/231 [00:00<00:00, 1087.41it/s]\n\
                  Validation datasets: 100%|██████████| 42/42 [00:00<00:00, 2241.66it/s]\n\
                  Generating train split: 100%|██████████| 5000/5000 [00:01<00:00]\n\
                  Map (num_proc=8): 100%|██████████| 184/184 [00:02<00:00, 71.36 examples/s]\n\
                  Filter (num_proc=16): 100%|██████████| 975/975 [00:00<00:00]\n\
                  Converting format of dataset (num_proc=16): 100%|██████████| 975/975\n\
                  Caching latents: 100%|██████████| 132/132 [21:08<00:00,  9.61s/it]\n\
                  Training:   0%|          | 0/1000 [00:00<?, ?it/s]",
            ),
            None,
        );
        assert_eq!(d.steps_completed, Some(0));
        assert_ne!(d.phase, id::STEADY_STATE);
        // A training loop's own bar still counts.
        let d = decide(
            &pre("Epoch 0:  46%|████▌     | 231/500 [01:02<01:13, 3.7it/s]"),
            None,
        );
        assert_eq!(d.steps_completed, Some(231));
    }

    #[test]
    fn only_the_failed_works_bars_count() {
        // An evaluation harness: one task's bar ran through, the next failed on its first
        // item. The first task's requests are not steps of the second.
        let d = decide(
            &pre(
                "Running loglikelihood requests: 100%|██████████| 147/147 [00:09<00:00, 15.28it/s]\n\
                 Running generate_until requests:   0%|          | 0/20 [00:00<?, ?it/s]",
            ),
            None,
        );
        assert_eq!(d.steps_completed, Some(0));
        assert_ne!(d.phase, id::STEADY_STATE);
        // An unlabelled bar of building the dataset is not training either; the bracketed
        // counter of PyTorch's ImageNet example is.
        let d = decide(
            &pre("Found 444218 structures, building graphs\n\
                 100%|██████████| 444218/444218 [21:47<00:00, 339.85it/s]\n\
                 Epoch: [0][0/1389]\tTime 9.812 (9.812)\tLoss 1.0113 (1.0113)\n\
                 Epoch: [0][256/1389]\tTime 0.411 (0.449)\tLoss 0.5539 (0.6923)"),
            None,
        );
        assert_eq!(d.steps_completed, Some(256));
        // One loop's bars, an epoch apart, are one work: their numbers do not make them two.
        let d = decide(
            &pre(
                "Epoch 2: 100%|██████████| 500/500 [02:13<00:00, 3.75it/s, loss=0.412]\n\
                 Epoch 3:   0%|          | 0/500 [00:00<?, ?it/s]",
            ),
            None,
        );
        assert_eq!(d.steps_completed, Some(500));
        assert_eq!(d.phase, id::STEADY_STATE);
    }
}
