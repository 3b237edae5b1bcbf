//! Facts the `ingest::log::engines::training` stage may set.

use super::{FactDef, fact};
use crate::facts::evidence::Unit;

/// Facts about the training or inference loop.
pub const FACTS: &[FactDef] = &[
    fact(
        "train.batch_size",
        Unit::Count,
        "Per-device batch size the run used (per_device_train_batch_size, --batch-size, batch_size=).",
    ),
    fact(
        "train.batch_flag",
        Unit::Text,
        "The name the run gave its per-device batch size (per_device_train_batch_size, train_micro_batch_size_per_gpu, micro_batch_size, batch_size), so a fix names the knob that was set.",
    ),
    fact(
        "job.training",
        Unit::Flag,
        "Set when the job is known to train, not only run a model: a training-only setting (gradient accumulation, an optimizer, ZeRO, LoRA, gradient checkpointing, a trainer's batch flag, a global batch), epochs in the log, gradients or optimizer state in a snapshot, or a failure in the backward pass or optimizer step. Advice about gradient accumulation and checkpointing needs it.",
    ),
    fact(
        "train.global_batch_size",
        Unit::Count,
        "Total batch size across devices and accumulation steps.",
    ),
    fact(
        "train.gradient_accumulation_steps",
        Unit::Count,
        "Gradient accumulation steps.",
    ),
    fact(
        "train.seq_len",
        Unit::Tokens,
        "Sequence length / max length / block size the run used.",
    ),
    fact(
        "train.gradient_checkpointing",
        Unit::Flag,
        "Whether gradient (activation) checkpointing is on.",
    ),
    fact(
        "train.mixed_precision",
        Unit::Text,
        "Mixed precision mode (fp16, bf16, no).",
    ),
    fact(
        "train.world_size",
        Unit::Count,
        "Number of processes / GPUs in the job.",
    ),
    fact("train.zero_stage", Unit::Count, "DeepSpeed ZeRO stage."),
    fact(
        "train.optimizer",
        Unit::Text,
        "Optimizer name when logged (adamw, adafactor, 8-bit adam...).",
    ),
    fact(
        "train.lora",
        Unit::Flag,
        "Whether the run trains LoRA / PEFT adapters.",
    ),
    fact(
        "model.name",
        Unit::Text,
        "The model id or path the run loaded.",
    ),
    fact(
        "model.offloaded_to",
        Unit::Text,
        "Where Accelerate's device map put the layers that did not fit on the GPUs (`cpu`, `disk`, `cpu and disk`): its warning `Some parameters are on the meta device because they were offloaded to the cpu.`, or a printed `hf_device_map` with `'cpu'` / `'disk'` entries beside GPU ones.",
    ),
    fact(
        "model.params",
        Unit::Count,
        "Parameter count of the model, from the log.",
    ),
    fact(
        "model.trainable_params",
        Unit::Count,
        "Trainable parameter count (PEFT prints it).",
    ),
    fact(
        "model.dtype",
        Unit::Text,
        "dtype of the weights (float32, float16, bfloat16, int8, 4bit...).",
    ),
    fact(
        "model.weights_bytes",
        Unit::Bytes,
        "Memory of the weights on the device, from the log or computed from params x dtype.",
    ),
];
