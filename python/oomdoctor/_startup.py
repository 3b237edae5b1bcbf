"""``OOMDOCTOR_WATCH=1 python train.py``: start watching in a script you cannot edit.

The wheel installs ``oomdoctor_watch.pth`` into site-packages; Python runs its one line at
start-up, which imports this module only when ``OOMDOCTOR_WATCH`` is set (otherwise the cost
is one environment lookup). This module does not import torch: it waits for the script to
import it, then starts ``oomdoctor.torch.watch()``, so a script that never uses torch pays
nothing and one that does is watched from its first allocation on.
"""

import os
import sys


def _enabled():
    return os.environ.get("OOMDOCTOR_WATCH", "").strip().lower() not in ("", "0", "false", "no", "off")


def _start():
    try:
        import oomdoctor.torch  # noqa: F401 - watches on import when OOMDOCTOR_WATCH is set
    except Exception as e:  # noqa: BLE001 - never break the user's program
        sys.stderr.write("oomdoctor: OOMDOCTOR_WATCH is set but watching failed: %s\n" % e)


class _AfterTorch(object):
    """A meta-path finder that lets the real finders load ``torch``, then starts watching."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)  # once; and the real finders are asked below
        try:
            import importlib.util

            spec = importlib.util.find_spec("torch")
        except Exception:  # noqa: BLE001
            return None
        loader = getattr(spec, "loader", None)
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec

        def exec_then_watch(module):
            exec_module(module)
            _start()

        loader.exec_module = exec_then_watch
        return spec


def install():
    if not _enabled():
        return
    if "torch" in sys.modules:
        _start()
    elif not any(isinstance(f, _AfterTorch) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterTorch())
