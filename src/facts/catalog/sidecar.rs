//! Facts the `ingest::sidecar` stage may set.

use super::{FactDef, fact};
use crate::facts::evidence::Unit;

/// Facts only a sidecar provides. It also sets facts other inputs have names for
/// (`torch.version`, `torch.alloc_conf` and its knobs, `model.params`, `model.trainable_params`,
/// `model.dtype`, `model.weights_bytes`, `model.architecture`, `train.batch_size`,
/// `train.seq_len`, `oom.total_bytes`, `phase.steps_completed`).
pub const FACTS: &[FactDef] = &[
    fact(
        "runtime.sidecar",
        Unit::Text,
        "The sidecar file (written by oomdoctor.torch beside the snapshot) that supplied the run's facts.",
    ),
    fact(
        "runtime.sidecar_error",
        Unit::Text,
        "Why a sidecar found beside the snapshot was ignored (not JSON, too large, no oomdoctor_sidecar marker).",
    ),
    fact(
        "runtime.hook",
        Unit::Text,
        "Which oomdoctor.torch hook dumped the snapshot: watch, env (OOMDOCTOR_WATCH=1), hf-trainer or lightning.",
    ),
    fact(
        "runtime.cuda_version",
        Unit::Text,
        "CUDA (or HIP) version PyTorch was built with (torch.version.cuda / torch.version.hip), from the sidecar.",
    ),
    fact(
        "runtime.python_version",
        Unit::Text,
        "Python version of the process that ran out of memory, from the sidecar.",
    ),
    fact(
        "runtime.device_name",
        Unit::Text,
        "Name of the device that ran out of memory (torch.cuda.get_device_name), from the sidecar.",
    ),
    fact(
        "runtime.batch_shape",
        Unit::Text,
        "Shape of the batch the user registered with the hook (`8x2048`), from the sidecar.",
    ),
    fact(
        "runtime.history_entries",
        Unit::Count,
        "The bound on recorded allocation-history entries (max_entries) the hook set: older events were dropped.",
    ),
];
