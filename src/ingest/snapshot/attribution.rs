//! What live memory is for: categories and allocation sites, read from stack frames.
//!
//! This module owns the heuristics of `snapshot-format.md` §4.3–§4.7 that turn a frame list
//! into a [`Category`] (weights, gradients, optimizer state, activations, KV cache,
//! communication buffers) and into an allocation [`Site`] (`file:line function` of the first
//! Python frame outside torch).
//!
//! The rules are one table, `SIGNALS`, checked frame by frame from the innermost frame
//! out; the **innermost** frame that matches any rule decides. That is what makes nested
//! cases come out right: a KV-cache update called from an attention `forward` is KV cache
//! (its frame is inside the forward), an activation computed in a closure that
//! `optimizer.step(closure)` runs is an activation, and an offloaded weight brought in by
//! a pre-forward hook is a weight.
//!
//! Frames are classified once per distinct frame and per distinct frame list (the frame
//! table is interned), so this costs nothing per trace entry.

use serde::Serialize;

use super::schema::{Frame, FrameListId, FrameTable};

/// What a block of live memory is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Weights,
    Gradients,
    Optimizer,
    Activations,
    KvCache,
    Communication,
    /// No frames and no `alloc` in the trace: allocated before recording began (usually
    /// the model weights, loaded before `_record_memory_history`). An inference.
    BeforeRecording,
    /// Frames that match no rule, or an allocation recorded without a stack.
    Other,
}

impl Category {
    /// Every category, in report order.
    pub const ALL: [Category; 8] = [
        Category::Weights,
        Category::Gradients,
        Category::Optimizer,
        Category::Activations,
        Category::KvCache,
        Category::Communication,
        Category::BeforeRecording,
        Category::Other,
    ];

    /// The name used in facts (`snapshot.category.<name>_bytes`) and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Category::Weights => "weights",
            Category::Gradients => "gradients",
            Category::Optimizer => "optimizer",
            Category::Activations => "activations",
            Category::KvCache => "kv_cache",
            Category::Communication => "communication",
            Category::BeforeRecording => "before_recording",
            Category::Other => "other",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    /// The category a profiler-made snapshot names on its trace entries
    /// (`_memory_viz.profile_plot`), if it maps to one of ours.
    pub fn from_profiler_category(s: &str) -> Option<Category> {
        if s.len() > 32 {
            return None;
        }
        Some(match s.to_ascii_lowercase().as_str() {
            "parameter" => Category::Weights,
            "optimizer_state" => Category::Optimizer,
            "gradient" => Category::Gradients,
            "activation" | "temporary" | "autograd_detail" => Category::Activations,
            _ => return None,
        })
    }
}

/// Where a rule looks.
#[derive(Clone, Copy, Debug)]
enum Field {
    /// The function name equals the pattern.
    NameIs,
    /// The function name contains the pattern.
    NameHas,
    /// The file path contains the pattern (forward or back slashes both match `/`).
    FileHas,
    /// The file path contains the first pattern and the name equals one of the rest.
    FileAndName(&'static [&'static str]),
}

struct Signal {
    category: Category,
    field: Field,
    pattern: &'static str,
}

const fn sig(category: Category, field: Field, pattern: &'static str) -> Signal {
    Signal {
        category,
        field,
        pattern,
    }
}

use Category as C;
use Field as F;

/// The classification table. Order matters only within one frame (the first matching rule
/// for that frame wins); across frames the innermost match wins.
const SIGNALS: &[Signal] = &[
    // KV cache: HF transformers caches, vLLM's cache engine and allocation helpers.
    sig(C::KvCache, F::FileHas, "cache_utils"),
    sig(C::KvCache, F::FileHas, "cache_engine"),
    sig(C::KvCache, F::FileHas, "kv_cache"),
    sig(C::KvCache, F::FileHas, "kvcache"),
    sig(C::KvCache, F::NameHas, "kv_cache"),
    sig(C::KvCache, F::NameHas, "past_key_value"),
    sig(C::KvCache, F::NameHas, "allocate_cache"),
    sig(C::KvCache, F::NameIs, "_init_cache"),
    sig(C::KvCache, F::NameIs, "init_cache"),
    // Communication: collectives and their buffers.
    sig(C::Communication, F::FileHas, "/torch/distributed/"),
    sig(C::Communication, F::FileHas, "/deepspeed/comm/"),
    sig(
        C::Communication,
        F::FileHas,
        "/torch/nn/parallel/distributed.py",
    ),
    sig(C::Communication, F::FileHas, "nccl"),
    sig(C::Communication, F::NameHas, "all_reduce"),
    sig(C::Communication, F::NameHas, "allreduce"),
    sig(C::Communication, F::NameHas, "all_gather"),
    sig(C::Communication, F::NameHas, "allgather"),
    sig(C::Communication, F::NameHas, "reduce_scatter"),
    sig(C::Communication, F::NameHas, "all_to_all"),
    sig(C::Communication, F::NameHas, "ProcessGroupNCCL"),
    sig(C::Communication, F::NameHas, "c10d::"),
    sig(C::Communication, F::NameHas, "nccl"),
    // Optimizer state and step (torch.optim, DeepSpeed/apex/bitsandbytes optimizers).
    sig(C::Optimizer, F::FileHas, "/optim/"),
    sig(C::Optimizer, F::FileHas, "optimizer"),
    sig(C::Optimizer, F::NameIs, "_init_group"),
    sig(C::Optimizer, F::NameHas, "exp_avg"),
    sig(C::Optimizer, F::NameHas, "_multi_tensor_adam"),
    sig(C::Optimizer, F::NameHas, "_single_tensor_adam"),
    // Weights: loading, initialisation, moving the module to the device.
    sig(C::Weights, F::NameHas, "from_pretrained"),
    sig(C::Weights, F::NameHas, "load_state_dict"),
    sig(C::Weights, F::NameHas, "_load_from_state_dict"),
    sig(C::Weights, F::NameHas, "_load_pretrained_model"),
    sig(C::Weights, F::NameHas, "load_weights"),
    sig(C::Weights, F::NameIs, "weight_loader"),
    sig(C::Weights, F::NameIs, "load_model"),
    sig(C::Weights, F::NameIs, "initialize_model"),
    sig(C::Weights, F::NameIs, "_initialize_model"),
    sig(C::Weights, F::NameIs, "create_weights"),
    sig(C::Weights, F::NameHas, "init_weight"),
    sig(C::Weights, F::NameIs, "_init_weights"),
    sig(C::Weights, F::NameIs, "reset_parameters"),
    sig(C::Weights, F::NameIs, "set_module_tensor_to_device"),
    sig(C::Weights, F::NameHas, "load_checkpoint"),
    sig(C::Weights, F::NameIs, "dispatch_model"),
    sig(C::Weights, F::FileHas, "safetensors"),
    // DataParallel copies the module's parameters to every device before each forward.
    sig(C::Weights, F::FileHas, "/torch/nn/parallel/replicate.py"),
    sig(C::Weights, F::FileHas, "/torch/nn/parameter.py"),
    sig(
        C::Weights,
        F::FileAndName(&[
            "_apply", "convert", "to", "cuda", "half", "float", "double", "bfloat16", "to_empty",
            "type",
        ]),
        "/torch/nn/modules/module.py",
    ),
    sig(
        C::Weights,
        F::FileAndName(&["to", "cuda", "half", "float"]),
        "modeling_utils.py",
    ),
    // Gradients: the backward pass (Python entry points and the C++ autograd engine).
    sig(C::Gradients, F::NameIs, "backward"),
    sig(C::Gradients, F::NameIs, "_engine_run_backward"),
    sig(C::Gradients, F::NameIs, "run_backward"),
    sig(C::Gradients, F::NameHas, "AccumulateGrad"),
    sig(C::Gradients, F::NameHas, "accumulate_grad"),
    sig(C::Gradients, F::NameHas, "autograd::Engine"),
    sig(C::Gradients, F::NameHas, "Backward"),
    sig(C::Gradients, F::NameHas, "_backward"),
    // Activations: anything computed inside a module's forward or a step function.
    sig(C::Activations, F::NameIs, "forward"),
    sig(C::Activations, F::NameIs, "_call_impl"),
    sig(C::Activations, F::NameIs, "_wrapped_call_impl"),
    sig(C::Activations, F::NameHas, "_forward"),
    sig(C::Activations, F::NameIs, "training_step"),
    sig(C::Activations, F::NameIs, "validation_step"),
    sig(C::Activations, F::NameIs, "test_step"),
    sig(C::Activations, F::NameIs, "predict_step"),
    sig(C::Activations, F::NameIs, "compute_loss"),
    sig(C::Activations, F::NameIs, "generate"),
];

fn path_has(file: &str, pattern: &str) -> bool {
    if file.contains(pattern) {
        return true;
    }
    // Windows paths: compare with backslashes turned into slashes, only when needed.
    file.contains('\\') && file.replace('\\', "/").contains(pattern)
}

/// Files whose frames say nothing about intent even though their names look like they do:
/// DataParallel's autograd Functions are all called `forward` (Broadcast copies weights,
/// Scatter copies inputs); the scan goes on to the frame that called them.
const NEUTRAL_FILES: &[&str] = &[
    "/torch/nn/parallel/_functions.py",
    "/torch/autograd/function.py",
];

/// The category one frame signals, if any.
pub fn classify_frame(f: &Frame) -> Option<Category> {
    let name = &*f.name;
    let file = &*f.filename;
    if NEUTRAL_FILES.iter().any(|n| path_has(file, n)) {
        return None;
    }
    SIGNALS
        .iter()
        .find(|s| match s.field {
            Field::NameIs => name == s.pattern,
            Field::NameHas => name.contains(s.pattern),
            Field::FileHas => path_has(file, s.pattern),
            Field::FileAndName(names) => path_has(file, s.pattern) && names.contains(&name),
        })
        .map(|s| s.category)
}

/// Whether a frame is Python code (not C++ from `stacks="all"`, not the interpreter).
pub fn is_python_frame(f: &Frame) -> bool {
    let file = &*f.filename;
    file.ends_with(".py")
        || file.ends_with(".pyx")
        || (file.starts_with('<') && file.ends_with('>'))
}

/// Whether a Python frame is inside torch or the Python standard library: not a place a
/// user would change.
pub fn is_internal_python(f: &Frame) -> bool {
    // Windows paths are read with forward slashes (copied only where there is a backslash).
    let file: std::borrow::Cow<'_, str> = if f.filename.contains('\\') {
        f.filename.replace('\\', "/").into()
    } else {
        (*f.filename).into()
    };
    if file.contains("/torch/") || file.starts_with("torch/") || file.starts_with("<frozen") {
        return true;
    }
    // The standard library: `/lib/python3.11/threading.py`, but not site-packages.
    if let Some(pos) = file.find("/lib/python") {
        let rest = &file[pos..];
        return !(rest.contains("/site-packages/") || rest.contains("/dist-packages/"));
    }
    false
}

/// An allocation site: the first Python frame outside torch and the standard library.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Site {
    pub file: std::sync::Arc<str>,
    pub line: i64,
    pub function: std::sync::Arc<str>,
    /// `models.py:181 update_nodes`: the file's base name, for people.
    pub label: String,
}

impl Site {
    fn of(f: &Frame) -> Site {
        let label = if is_python_frame(f) {
            let base = f.filename.rsplit(['/', '\\']).next().unwrap_or(&f.filename);
            format!("{base}:{} {}", f.line, f.name)
        } else {
            cpp_label(&f.name)
        };
        // The file and function are shared with the frame table; the label is bounded, so
        // a file of many sites that all name one enormous file costs no more per site than
        // a real one.
        Site {
            file: f.filename.clone(),
            line: f.line,
            function: f.name.clone(),
            label: bounded_label(label),
        }
    }
}

/// Longest site label kept, in bytes; real ones are under a hundred.
const MAX_LABEL_BYTES: usize = 512;

fn bounded_label(mut label: String) -> String {
    if label.len() > MAX_LABEL_BYTES {
        let mut end = MAX_LABEL_BYTES;
        while !label.is_char_boundary(end) {
            end -= 1;
        }
        label.truncate(end);
        label.push('…');
        label.shrink_to_fit();
    }
    label
}

/// A C++ symbol without its argument list: `at::_ops::bmm::call(at::Tensor const&, ...)`
/// becomes `at::_ops::bmm::call`, and an op dispatch stub reads `aten::bmm`.
fn cpp_label(name: &str) -> String {
    let mut depth = 0usize;
    let mut end = name.len();
    for (i, c) in name.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => depth = depth.saturating_sub(1),
            '(' if depth == 0 && i > 0 => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let bare = name[..end].trim();
    // Keep the function, drop a leading return type (`at::TensorBase at::detail::...`).
    let bare = bare.rsplit(' ').next().unwrap_or(bare);
    if let Some(op) = bare.strip_prefix("at::_ops::") {
        if let Some(op) = op.split("::").next() {
            return format!("aten::{op}");
        }
    }
    bare.to_string()
}

/// Frames between the allocation and user code that never say anything about intent.
fn is_noise_cpp(f: &Frame) -> bool {
    let n = &*f.name;
    n.starts_with("torch::unwind")
        || n.contains("CapturedTraceback")
        || n.contains("gather_with_cpp")
        || n.contains("CUDACachingAllocator")
        || n.starts_with("_PyEval")
        || n.starts_with("PyEval")
        || n.starts_with("_PyObject")
        || n.starts_with("PyObject")
        || n.starts_with("_PyFunction")
        || n == "cfunction_call"
        || n == "method_vectorcall"
}

/// Per-snapshot memo of frame and frame-list classifications.
pub struct Classifier<'t> {
    table: &'t FrameTable,
    frame_category: Vec<Option<Option<Category>>>,
    /// Per frame: 0 = not looked at yet, 1 = user code, 2 = not (see `is_user_frame`).
    frame_is_user: Vec<u8>,
    list_category: Vec<Option<Option<Category>>>,
    list_site: Vec<Option<Option<u32>>>,
    /// Distinct sites; `list_site` points here.
    pub sites: Vec<Site>,
    site_index: std::collections::HashMap<Site, u32>,
}

impl<'t> Classifier<'t> {
    pub fn new(table: &'t FrameTable) -> Self {
        Classifier {
            table,
            frame_category: vec![None; table.frames.len()],
            frame_is_user: vec![0; table.frames.len()],
            list_category: vec![None; table.list_count()],
            list_site: vec![None; table.list_count()],
            sites: Vec::new(),
            site_index: std::collections::HashMap::new(),
        }
    }

    fn frame_category(&mut self, id: u32) -> Option<Category> {
        if let Some(Some(c)) = self.frame_category.get(id as usize) {
            return *c;
        }
        let c = self.table.frame(id).and_then(classify_frame);
        if let Some(slot) = self.frame_category.get_mut(id as usize) {
            *slot = Some(c);
        }
        c
    }

    /// The category of a frame list: the innermost frame that matches a rule decides.
    /// `None` for an empty list or one no rule matches.
    pub fn category(&mut self, list: FrameListId) -> Option<Category> {
        if let Some(Some(c)) = self.list_category.get(list.0 as usize) {
            return *c;
        }
        let mut found = None;
        for &fid in self.table.list(list) {
            if let Some(c) = self.frame_category(fid) {
                found = Some(c);
                break;
            }
        }
        if let Some(slot) = self.list_category.get_mut(list.0 as usize) {
            *slot = Some(found);
        }
        found
    }

    /// The site of a frame list: the first Python frame outside torch/stdlib; else the
    /// first Python frame; else the first C++ frame that is not unwinder/allocator noise.
    pub fn site(&mut self, list: FrameListId) -> Option<u32> {
        if let Some(Some(s)) = self.list_site.get(list.0 as usize) {
            return *s;
        }
        let frames: Vec<&Frame> = self
            .table
            .list(list)
            .iter()
            .filter_map(|&id| self.table.frame(id))
            .collect();
        // C++-only stacks (backward on autograd threads, `stacks="all"`): the autograd node
        // says what ran (`BmmBackward0::apply`), else the op (`at::_ops::bmm::call`).
        let chosen = frames
            .iter()
            .find(|f| is_python_frame(f) && !is_internal_python(f))
            .or_else(|| frames.iter().find(|f| is_python_frame(f)))
            .or_else(|| {
                frames
                    .iter()
                    .find(|f| f.name.contains("Backward") && f.name.contains("::apply"))
            })
            .or_else(|| frames.iter().find(|f| f.name.starts_with("at::_ops::")))
            .or_else(|| {
                frames
                    .iter()
                    .find(|f| !is_noise_cpp(f) && !f.name.is_empty())
            });
        let id = chosen.map(|f| {
            let site = Site::of(f);
            match self.site_index.get(&site) {
                Some(&id) => id,
                None => {
                    let id = self.sites.len() as u32;
                    self.site_index.insert(site.clone(), id);
                    self.sites.push(site);
                    id
                }
            }
        });
        if let Some(slot) = self.list_site.get_mut(list.0 as usize) {
            *slot = Some(id);
        }
        id
    }

    /// Appends the user-code frames of a list to `out`, outermost first (for iteration
    /// detection).
    pub fn push_user_frames_outermost_first(&mut self, list: FrameListId, out: &mut Vec<u32>) {
        let from = out.len();
        for &id in self.table.list(list) {
            if self.is_user_frame(id) {
                out.push(id);
            }
        }
        out[from..].reverse();
    }

    /// Whether a frame is Python code outside torch and the standard library, worked out
    /// once per frame: lists share frames, and the test looks into the path.
    fn is_user_frame(&mut self, id: u32) -> bool {
        const UNKNOWN: u8 = 0;
        const USER: u8 = 1;
        const NOT_USER: u8 = 2;
        let Some(known) = self.frame_is_user.get(id as usize).copied() else {
            return false;
        };
        if known != UNKNOWN {
            return known == USER;
        }
        let user = self
            .table
            .frame(id)
            .is_some_and(|f| is_python_frame(f) && !is_internal_python(f));
        self.frame_is_user[id as usize] = if user { USER } else { NOT_USER };
        user
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fr(file: &str, line: i64, name: &str) -> Frame {
        Frame {
            filename: file.into(),
            line,
            name: name.into(),
        }
    }

    #[test]
    fn frame_rules() {
        let cases = [
            (
                fr("/x/transformers/cache_utils.py", 224, "update"),
                Some(C::KvCache),
            ),
            (
                fr("/x/SketchKV/cache_utils_V2.py", 225, "update_new"),
                Some(C::KvCache),
            ),
            (
                fr("/x/vllm/worker/cache_engine.py", 80, "_allocate_kv_cache"),
                Some(C::KvCache),
            ),
            (
                fr("/x/torch/optim/adam.py", 120, "_init_group"),
                Some(C::Optimizer),
            ),
            (
                fr("/x/torch/nn/modules/module.py", 900, "_apply"),
                Some(C::Weights),
            ),
            (
                fr("/x/torch/nn/modules/module.py", 1784, "_call_impl"),
                Some(C::Activations),
            ),
            (
                fr("/x/flexgen/flex_opt.py", 190, "init_weight_list"),
                Some(C::Weights),
            ),
            (
                fr("/x/train/models.py", 231, "forward"),
                Some(C::Activations),
            ),
            (
                fr(
                    "??",
                    0,
                    "torch::autograd::generated::MmBackward0::apply(...)",
                ),
                Some(C::Gradients),
            ),
            (
                fr(
                    "??",
                    0,
                    "torch::autograd::VariableType::(anonymous namespace)::relu(...)",
                ),
                None,
            ),
            (
                fr("/x/torch/distributed/distributed_c10d.py", 10, "all_reduce"),
                Some(C::Communication),
            ),
            (
                fr("C:\\Users\\a\\torch\\optim\\adamw.py", 10, "step"),
                Some(C::Optimizer),
            ),
            (fr("/x/train/models.py", 181, "update_nodes"), None),
        ];
        for (f, want) in cases {
            assert_eq!(classify_frame(&f), want, "{f:?}");
        }
    }

    #[test]
    fn cpp_labels_drop_arguments() {
        assert_eq!(
            cpp_label("at::_ops::bmm::call(at::Tensor const&, at::Tensor const&)"),
            "aten::bmm"
        );
        assert_eq!(
            cpp_label(
                "torch::autograd::generated::BmmBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)"
            ),
            "torch::autograd::generated::BmmBackward0::apply"
        );
        assert_eq!(
            cpp_label("at::TensorBase at::detail::_empty_generic<long>(c10::ArrayRef<long>)"),
            "at::detail::_empty_generic<long>"
        );
    }

    #[test]
    fn internal_frames() {
        assert!(is_internal_python(&fr(
            "/opt/conda/lib/python3.11/site-packages/torch/nn/functional.py",
            1,
            "relu"
        )));
        assert!(is_internal_python(&fr(
            "/usr/lib/python3.11/threading.py",
            982,
            "run"
        )));
        assert!(!is_internal_python(&fr(
            "/opt/conda/lib/python3.11/site-packages/transformers/cache_utils.py",
            1,
            "update"
        )));
        assert!(!is_internal_python(&fr(
            "/mnt/src/train/models.py",
            181,
            "update_nodes"
        )));
        assert!(is_python_frame(&fr("<ipython-input-3-abc>", 4, "<module>")));
        assert!(!is_python_frame(&fr("RegisterCUDA_0.cpp", 0, "at::empty")));
    }
}
