"""Record what oomdoctor needs *before* the crash: ``import oomdoctor.torch; oomdoctor.torch.watch()``.

``watch()`` turns on PyTorch's allocation-history recording with a bounded ring buffer
(``max_entries``, python stacks only) and attaches an out-of-memory observer. When CUDA runs
out of memory it dumps the allocator's snapshot to ``oom-<time>.pickle`` and writes a sidecar
``oom-<time>.pickle.json`` with what a snapshot cannot hold: the model's parameter count and
dtype (if a module was registered), the batch shape (if given), the PyTorch and CUDA versions,
``PYTORCH_CUDA_ALLOC_CONF``, the device's name and total memory. Then it prints the one command
to run, ``oomdoctor oom-<time>.pickle``, or runs it when the process exits and the binary is
installed. ``oomdoctor`` reads the sidecar as facts.

Three ways to turn it on::

    import oomdoctor.torch
    oomdoctor.torch.watch(model, batch_shape=(8, 2048))   # for the rest of the process

    with oomdoctor.torch.watching(model):                 # for a block; also catches the OOM
        train()

    OOMDOCTOR_WATCH=1 python train.py                     # scripts you cannot edit

Off, it costs nothing: importing this module imports nothing heavy and installs nothing;
``OOMDOCTOR_WATCH`` is read once, when this module or the installed ``.pth`` start-up hook is
imported. PyTorch's private APIs differ between 2.0 and 2.11+; each is looked up when used
and a missing one is a one-line message on stderr, never an exception in your training.
"""

import os
import sys
import time

# threading, json, pickle, platform, subprocess and atexit are imported when first needed:
# importing this module must cost nothing measurable while watching is off.

__all__ = [
    "watch",
    "unwatch",
    "watching",
    "register",
    "dump",
    "is_watching",
    "DEFAULT_MAX_ENTRIES",
]

SIDECAR_VERSION = 1
#: Bound on recorded allocation events. Each costs ~100-350 bytes on disk and a few hundred
#: bytes in the allocator's ring buffer; 100,000 covers several training steps of a large model.
DEFAULT_MAX_ENTRIES = 100_000
_ENV = "OOMDOCTOR_WATCH"

_lock = None  # a threading.RLock, made by the first watch()/unwatch()
_state = None  # a _Watch while watching, else None
_observer_attached = False  # PyTorch offers no way to detach one: it checks _state instead
_atexit_registered = False
_to_diagnose = []  # dumps to diagnose at exit


def _the_lock():
    global _lock
    if _lock is None:
        import threading

        _lock = threading.RLock()
    return _lock


def _say(msg):
    sys.stderr.write("oomdoctor: %s\n" % msg)
    sys.stderr.flush()


class _Watch(object):
    def __init__(self, out_dir, max_entries, diagnose, max_dumps, hook, quiet):
        self.out_dir = out_dir
        self.max_entries = max_entries
        self.diagnose = diagnose
        self.max_dumps = max_dumps
        self.hook = hook
        self.quiet = quiet
        self.model = None
        self.batch_shape = None
        self.seq_len = None
        self.step = None
        self.dumps = []  # paths of snapshots written
        self.recording = False
        self.mode = None  # "observer" or "exception"


# --- PyTorch's private APIs, looked up when used (2.0 .. 2.11+) -----------------------------


def _torch():
    import torch  # noqa: PLC0415 - imported only when watching

    return torch


def _oom_error_types(torch):
    """The exception classes PyTorch raises for an allocation failure, across versions."""
    types = []
    for owner, name in ((torch, "OutOfMemoryError"), (getattr(torch, "cuda", None), "OutOfMemoryError")):
        t = getattr(owner, name, None) if owner is not None else None
        if isinstance(t, type) and t not in types:
            types.append(t)
    return tuple(types)


def _is_oom(exc):
    try:
        torch = sys.modules.get("torch")
        types = _oom_error_types(torch) if torch is not None else ()
    except Exception:  # noqa: BLE001
        types = ()
    if types and isinstance(exc, types):
        return True
    # Before 1.13, and from CUDA runtime/library errors: the message says so.
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc)


def _start_recording(torch, max_entries):
    """Turns on allocation history; returns (ok, message)."""
    mem = getattr(getattr(torch, "cuda", None), "memory", None)
    record = getattr(mem, "_record_memory_history", None)
    if record is None:
        return False, "torch.cuda.memory._record_memory_history is missing in torch %s" % torch.__version__
    try:
        # 2.1+: python stacks only (C++ frames make a dump take minutes on big jobs).
        record(enabled="all", context="all", stacks="python", max_entries=max_entries)
        return True, None
    except TypeError:
        pass
    except Exception as e:  # noqa: BLE001
        return False, "could not turn on allocation history: %s" % e
    try:
        # 2.0: the legacy form; its ring buffer defaults to one entry, so size it.
        record(True, trace_alloc_max_entries=max_entries, trace_alloc_record_context=True)
        return True, None
    except Exception as e:  # noqa: BLE001
        return False, "could not turn on allocation history: %s" % e


def _stop_recording(torch):
    record = getattr(getattr(getattr(torch, "cuda", None), "memory", None), "_record_memory_history", None)
    if record is None:
        return
    try:
        record(enabled=None)
    except TypeError:
        try:
            record(False)
        except Exception:  # noqa: BLE001
            pass
    except Exception:  # noqa: BLE001
        pass


def _attach_observer(torch):
    """Attaches the OOM observer once per process; returns True when PyTorch has the API."""
    global _observer_attached
    if _observer_attached:
        return True
    attach = getattr(getattr(torch, "_C", None), "_cuda_attach_out_of_memory_observer", None)
    if attach is None:
        return False
    try:
        attach(_on_oom)
    except Exception as e:  # noqa: BLE001
        _say("could not attach the out-of-memory observer (%s); catching the exception instead" % e)
        return False
    _observer_attached = True
    return True


def _write_snapshot(torch, path):
    mem = torch.cuda.memory
    dump_fn = getattr(mem, "_dump_snapshot", None)
    if dump_fn is not None:  # 2.1+
        dump_fn(path)
        return
    snap_fn = getattr(mem, "_snapshot", None)
    if snap_fn is None:
        raise RuntimeError("torch.cuda.memory._snapshot is missing in torch %s" % torch.__version__)
    import pickle

    with open(path, "wb") as f:  # 2.0: what _dump_snapshot later did
        pickle.dump(snap_fn(), f)


# --- what a snapshot cannot hold ------------------------------------------------------------


def _model_facts(model):
    params = trainable = nbytes = 0
    by_dtype = {}
    for p in model.parameters():
        n = p.numel()
        params += n
        if p.requires_grad:
            trainable += n
        nbytes += n * p.element_size()
        key = str(p.dtype)
        by_dtype[key] = by_dtype.get(key, 0) + n
    out = {
        "class": type(model).__name__,
        "params": params,
        "trainable_params": trainable,
        "param_bytes": nbytes,
    }
    if by_dtype:
        out["dtype"] = max(by_dtype, key=by_dtype.get)
        if len(by_dtype) > 1:
            out["dtypes"] = by_dtype
    return out


def _device_facts(torch, device):
    out = {"index": device}
    try:
        props = torch.cuda.get_device_properties(device)
        out["name"] = getattr(props, "name", None) or torch.cuda.get_device_name(device)
        out["total_memory_bytes"] = int(props.total_memory)
    except Exception as e:  # noqa: BLE001
        out["error"] = str(e)
    return out


def _sidecar(torch, w, snapshot_path, oom):
    import platform

    version = getattr(torch, "version", None)
    data = {
        "oomdoctor_sidecar": SIDECAR_VERSION,
        "written_by": "oomdoctor.torch %s" % _own_version(),
        "hook": w.hook,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "snapshot": os.path.basename(snapshot_path),
        "torch_version": str(getattr(torch, "__version__", "")),
        "cuda_version": getattr(version, "cuda", None) or getattr(version, "hip", None),
        "python_version": platform.python_version(),
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
        or os.environ.get("PYTORCH_ALLOC_CONF")
        or os.environ.get("PYTORCH_HIP_ALLOC_CONF"),
        "max_entries": w.max_entries if w.recording else None,
        "capture": w.mode,
        "oom": oom,
    }
    device = oom.get("device")
    if device is None:
        try:
            device = torch.cuda.current_device()
        except Exception:  # noqa: BLE001
            device = None
    if device is not None:
        data["device"] = _device_facts(torch, device)
    if w.model is not None:
        try:
            data["model"] = _model_facts(w.model)
        except Exception as e:  # noqa: BLE001
            data["model"] = {"error": str(e)}
    if w.batch_shape is not None or w.seq_len is not None:
        data["batch"] = {}
        if w.batch_shape is not None:
            data["batch"]["shape"] = [int(d) for d in w.batch_shape]
        if w.seq_len is not None:
            data["batch"]["seq_len"] = int(w.seq_len)
    if w.step is not None:
        data["step"] = int(w.step)
    for rank in ("RANK", "LOCAL_RANK"):
        if os.environ.get(rank, "").isdigit():
            data.setdefault("ranks", {})[rank.lower()] = int(os.environ[rank])
    return data


def _own_version():
    try:
        from . import __version__

        return __version__
    except Exception:  # noqa: BLE001
        return "unknown"


def _dump_path(out_dir):
    stamp = time.strftime("%Y%m%d-%H%M%S")
    rank = os.environ.get("RANK") or os.environ.get("LOCAL_RANK")
    base = "oom-%s%s" % (stamp, "-rank%s" % rank if rank and rank.isdigit() else "")
    path = os.path.join(out_dir, base + ".pickle")
    n = 1
    while os.path.exists(path):
        n += 1
        path = os.path.join(out_dir, "%s-%d.pickle" % (base, n))
    return path


def _dump(w, oom):
    """Writes snapshot and sidecar; returns the snapshot's path or None."""
    if len(w.dumps) >= w.max_dumps:
        return None
    import json

    torch = _torch()
    os.makedirs(w.out_dir, exist_ok=True)
    path = _dump_path(w.out_dir)
    try:
        _write_snapshot(torch, path)
    except Exception as e:  # noqa: BLE001
        _say("could not dump the memory snapshot: %s" % e)
        return None
    try:
        with open(path + ".json", "w") as f:
            json.dump(_sidecar(torch, w, path, oom), f, indent=1, sort_keys=True)
            f.write("\n")
    except Exception as e:  # noqa: BLE001
        _say("wrote %s, but not its sidecar: %s" % (path, e))
    w.dumps.append(path)
    if w.diagnose:
        _to_diagnose.append(path)
    if not w.quiet:
        _say("out of memory: wrote %s and %s.json; diagnose it with:\n    oomdoctor %s" % (path, path, _shell_quote(path)))
    return path


def _shell_quote(s):
    if s and all(c.isalnum() or c in "/._-+:@" for c in s):
        return s
    return "'" + s.replace("'", "'\"'\"'") + "'"


def _on_oom(device, alloc, device_limit, device_free):
    """PyTorch's OOM observer: called just before OutOfMemoryError is raised."""
    w = _state
    if w is None:
        return
    try:
        _dump(
            w,
            {
                "device": int(device),
                "requested_bytes": int(alloc),
                "device_limit_bytes": int(device_limit),
                "device_free_bytes": int(device_free),
            },
        )
    except Exception as e:  # noqa: BLE001 - never turn an OOM into something else
        _say("snapshot on out-of-memory failed: %s" % e)


def _on_exception(exc):
    """The fallback when there is no observer: an OOM exception reached our wrapper."""
    w = _state
    if w is None or not _is_oom(exc):
        return
    if getattr(exc, "_oomdoctor_seen", False):
        return
    try:
        exc._oomdoctor_seen = True
    except Exception:  # noqa: BLE001
        pass
    if w.mode == "observer":
        return  # the observer already dumped it
    try:
        _dump(w, {"message": str(exc).splitlines()[0][:500] if str(exc) else type(exc).__name__})
    except Exception as e:  # noqa: BLE001
        _say("snapshot on out-of-memory failed: %s" % e)


_previous_excepthook = None


def _excepthook(etype, value, tb):
    _on_exception(value)
    (_previous_excepthook or sys.__excepthook__)(etype, value, tb)


def _at_exit():
    """Runs the diagnosis of every dump when the process exits (traceback first, then this)."""
    if not _to_diagnose:
        return
    import subprocess

    from ._find import find_oomdoctor_bin

    exe = find_oomdoctor_bin(required=False)
    if exe is None:
        return
    try:
        sys.stderr.flush()
        out = sys.stderr.fileno()
    except Exception:  # noqa: BLE001 - stderr replaced by an object without a descriptor
        out = 2
    for path in _to_diagnose:
        try:
            subprocess.call([exe, path], stdout=out)
        except Exception as e:  # noqa: BLE001
            _say("could not run %s: %s" % (exe, e))
    del _to_diagnose[:]


# --- the public API -------------------------------------------------------------------------


def watch(
    model=None,
    batch_shape=None,
    seq_len=None,
    out_dir=None,
    max_entries=DEFAULT_MAX_ENTRIES,
    diagnose=True,
    max_dumps=1,
    quiet=False,
    _hook="watch",
):
    """Starts watching for CUDA out-of-memory errors for the rest of the process.

    model: an ``nn.Module`` whose parameter count, dtype and size go into the sidecar.
    batch_shape: the shape of a batch (``(8, 2048)``); its first dimension is the batch size.
    seq_len: the sequence length, when the shape does not say it.
    out_dir: where ``oom-<time>.pickle`` and its sidecar go (default: ``$OOMDOCTOR_DIR`` or
        the working directory).
    max_entries: bound on recorded allocation events (the history's memory and dump time).
    diagnose: run ``oomdoctor`` on the dump when the process exits, if the binary is found
        (otherwise the command to run is printed either way).
    max_dumps: how many OOMs to dump (a job that catches OOMs and retries smaller would
        otherwise write one snapshot per try).

    Returns True when watching (also when already watching: model, batch_shape and seq_len
    then update it; the other arguments keep their first values); False when there is
    nothing to watch (no torch, no CUDA), with the reason printed. A missing or failing
    private API is printed too, and watching goes on with what remains.
    """
    global _state, _previous_excepthook, _atexit_registered
    with _the_lock():
        if _state is not None:
            register(model=model, batch_shape=batch_shape, seq_len=seq_len)
            return True
        try:
            torch = _torch()
        except ImportError:
            _say("PyTorch is not installed; nothing to watch")
            return False
        cuda = getattr(torch, "cuda", None)
        if cuda is None or not cuda.is_available():
            _say("CUDA is not available (torch %s); not watching" % torch.__version__)
            return False
        w = _Watch(
            out_dir or os.environ.get("OOMDOCTOR_DIR") or os.getcwd(),
            int(max_entries),
            diagnose,
            int(max_dumps),
            _hook,
            quiet,
        )
        w.recording, why = _start_recording(torch, w.max_entries)
        if not w.recording:
            _say("%s; the snapshot will show the allocator's state at the OOM, without history" % why)
        if _attach_observer(torch):
            w.mode = "observer"
        else:
            w.mode = "exception"
            if not quiet:
                _say(
                    "torch %s has no out-of-memory observer; an OutOfMemoryError is caught when it "
                    "leaves watching(), a callback or the program" % torch.__version__
                )
        _previous_excepthook = sys.excepthook
        sys.excepthook = _excepthook
        if not _atexit_registered:
            import atexit

            atexit.register(_at_exit)
            _atexit_registered = True
        _state = w
        register(model=model, batch_shape=batch_shape, seq_len=seq_len)
        return True


def unwatch():
    """Stops watching: history recording off, observer inert, excepthook restored."""
    global _state, _previous_excepthook
    with _the_lock():
        w = _state
        if w is None:
            return
        if sys.excepthook is _excepthook:
            sys.excepthook = _previous_excepthook or sys.__excepthook__
        _previous_excepthook = None
        if w.recording:
            try:
                _stop_recording(_torch())
            except ImportError:
                pass
        w.recording = False
        _state = None


def is_watching():
    return _state is not None


def register(model=None, batch_shape=None, seq_len=None, step=None):
    """Updates what the sidecar will say (the model, the batch, the step) while watching."""
    w = _state
    if w is None:
        return
    if model is not None:
        w.model = model
    if batch_shape is not None:
        w.batch_shape = tuple(int(d) for d in batch_shape)
    if seq_len is not None:
        w.seq_len = int(seq_len)
    if step is not None:
        w.step = int(step)


def dump(reason="manual"):
    """Dumps a snapshot and sidecar now (while watching); returns the snapshot's path."""
    w = _state
    if w is None:
        _say("not watching; call oomdoctor.torch.watch() first")
        return None
    return _dump(w, {"reason": reason})


class watching(object):
    """``with watching(model, batch_shape=...):`` watches inside the block.

    An out-of-memory error that leaves the block is dumped (if the observer did not already)
    and re-raised. Watching stops at the end of the block, unless it was on before.
    """

    def __init__(self, model=None, **kwargs):
        self.model = model
        self.kwargs = kwargs
        self.started = False

    def __enter__(self):
        self.started = not is_watching()
        watch(self.model, **self.kwargs)
        return self

    def __exit__(self, etype, exc, tb):
        if exc is not None:
            _on_exception(exc)
        if self.started:
            unwatch()
        return False


def _watch_from_env():
    value = os.environ.get(_ENV, "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    return watch(_hook="env")


# OOMDOCTOR_WATCH=1: watching starts when this module is imported (by a callback, by
# `python -m oomdoctor.torch script.py`, or by the start-up hook once torch is imported).
if __name__ != "__main__" and os.environ.get(_ENV):
    _watch_from_env()


def _main(argv):
    """``python -m oomdoctor.torch script.py ARGS``: runs a script you cannot edit, watched."""
    import runpy

    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write("usage: python -m oomdoctor.torch script.py [args...]\n       python -m oomdoctor.torch -m module [args...]\n")
        return 0 if argv else 2
    mod = sys.modules.get("oomdoctor.torch")
    if mod is None:
        import importlib

        mod = importlib.import_module("oomdoctor.torch")
    mod.watch(_hook="env")
    if argv[0] == "-m" and len(argv) > 1:
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
