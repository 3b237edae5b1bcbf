"""oomdoctor: tells you why your GPU ran out of memory and what to change, with numbers.

The wheel installs the native ``oomdoctor`` binary on the PATH of the environment; this
package finds it (``python -m oomdoctor ...``) and holds the PyTorch hook
(``import oomdoctor.torch; oomdoctor.torch.watch()``) and the Trainer / Lightning callbacks
(``oomdoctor.hf``, ``oomdoctor.lightning``). Importing it imports nothing heavy.
"""

from ._find import find_oomdoctor_bin

__all__ = ["find_oomdoctor_bin", "__version__"]

try:  # the installed distribution's version (the crate's, via maturin)
    from importlib.metadata import PackageNotFoundError, version as _version

    try:
        __version__ = _version("oomdoctor")
    except PackageNotFoundError:  # running from a source checkout
        __version__ = "0.0.0+source"
except ImportError:  # pragma: no cover - Python < 3.8
    __version__ = "0.0.0+unknown"
