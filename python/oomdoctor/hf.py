"""A Hugging Face ``transformers`` callback: ``Trainer(..., callbacks=[OOMDoctorCallback()])``.

It starts ``oomdoctor.torch`` watching when training begins, registers the trainer's model
and per-device batch size, keeps the step current, and stops at the end of training. On a
CUDA out-of-memory error the snapshot and its sidecar are written as with
``oomdoctor.torch.watch()``. Importing this module imports ``transformers``; nothing else in
oomdoctor does.
"""

try:
    from transformers import TrainerCallback
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "oomdoctor.hf needs the transformers package (pip install transformers); "
        "without it use oomdoctor.torch.watch()"
    ) from e

from . import torch as _hook


class OOMDoctorCallback(TrainerCallback):
    """Watches a ``Trainer`` run for CUDA out-of-memory errors (see ``oomdoctor.torch.watch``)."""

    def __init__(self, seq_len=None, **watch_kwargs):
        self.seq_len = seq_len
        self.watch_kwargs = watch_kwargs
        self.started = False

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.started = not _hook.is_watching()
        batch = getattr(args, "per_device_train_batch_size", None)
        kw = dict(self.watch_kwargs)
        kw.setdefault("out_dir", getattr(args, "output_dir", None))
        _hook.watch(model, seq_len=self.seq_len, _hook="hf-trainer", **kw)
        if batch:
            # The shape's first dimension is all a Trainer knows before a batch exists.
            _hook.register(batch_shape=(int(batch),) if not self.seq_len else (int(batch), int(self.seq_len)))
        _hook.register(step=state.global_step)

    def on_step_end(self, args, state, control, **kwargs):
        _hook.register(step=state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        if self.started:
            _hook.unwatch()
