"""A Lightning callback: ``Trainer(callbacks=[OOMDoctorCallback()])``.

Works with ``lightning`` (``lightning.pytorch``) and the older ``pytorch_lightning``. It
starts ``oomdoctor.torch`` watching when fitting begins, registers the LightningModule, keeps
the global step current, dumps on an out-of-memory exception Lightning reports (when PyTorch
had no observer to do it at the moment of the failure) and stops when fitting ends.
Importing this module imports Lightning; nothing else in oomdoctor does.
"""

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:
    try:
        from pytorch_lightning.callbacks import Callback
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "oomdoctor.lightning needs lightning or pytorch_lightning; "
            "without it use oomdoctor.torch.watch()"
        ) from e

from . import torch as _hook


class OOMDoctorCallback(Callback):
    """Watches a Lightning run for CUDA out-of-memory errors (see ``oomdoctor.torch.watch``)."""

    def __init__(self, batch_shape=None, seq_len=None, **watch_kwargs):
        self.batch_shape = batch_shape
        self.seq_len = seq_len
        self.watch_kwargs = watch_kwargs
        self.started = False

    def setup(self, trainer, pl_module, stage=None):
        self.started = not _hook.is_watching()
        kw = dict(self.watch_kwargs)
        kw.setdefault("out_dir", getattr(trainer, "default_root_dir", None))
        _hook.watch(pl_module, batch_shape=self.batch_shape, seq_len=self.seq_len, _hook="lightning", **kw)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        shape = None if self.batch_shape is not None else _first_shape(batch)
        _hook.register(batch_shape=shape, step=trainer.global_step)

    def on_exception(self, trainer, pl_module, exception):
        _hook._on_exception(exception)

    def teardown(self, trainer, pl_module, stage=None):
        if self.started:
            _hook.unwatch()


def _first_shape(batch):
    """The shape of the first tensor in a batch (a tensor, a tuple/list or a dict of them)."""
    todo = [batch]
    for _ in range(64):
        if not todo:
            return None
        b = todo.pop(0)
        shape = getattr(b, "shape", None)
        if shape is not None and len(shape) > 0:
            return tuple(int(d) for d in shape)
        if isinstance(b, dict):
            todo.extend(b.values())
        elif isinstance(b, (list, tuple)):
            todo.extend(b)
    return None
