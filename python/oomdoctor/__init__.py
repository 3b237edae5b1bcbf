"""oomdoctor: tells you why your GPU ran out of memory and what to change, with numbers.

The wheel installs the native ``oomdoctor`` binary on the PATH of the environment; this
package finds it (``python -m oomdoctor ...``) and holds the PyTorch hook
(``import oomdoctor.torch; oomdoctor.torch.watch()``) and the Trainer / Lightning callbacks
(``oomdoctor.hf``, ``oomdoctor.lightning``). Importing it imports nothing heavy.
"""

__all__ = ["find_oomdoctor_bin", "__version__"]


def find_oomdoctor_bin(required=True):
    """The path of the ``oomdoctor`` binary (see ``oomdoctor._find``)."""
    from ._find import find_oomdoctor_bin as find  # sysconfig/shutil: only when needed

    return find(required)


def __getattr__(name):
    # The version is looked up on first use: importlib.metadata is slow to import.
    if name != "__version__":
        raise AttributeError(name)
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover - Python < 3.8
        return "0.0.0+unknown"
    try:
        return version("oomdoctor")  # the installed distribution's (the crate's, via maturin)
    except PackageNotFoundError:  # running from a source checkout
        return "0.0.0+source"
