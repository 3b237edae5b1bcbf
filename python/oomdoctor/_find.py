"""Finding the ``oomdoctor`` binary the wheel installed (the way ruff finds ``ruff``)."""

import os
import shutil
import sys
import sysconfig

_EXE = "oomdoctor" + (sysconfig.get_config_var("EXE") or "")


def _candidates():
    # The environment's scripts directory: where pip put the binary of this wheel.
    yield sysconfig.get_path("scripts")
    # A `pip install --user`.
    scheme = {"nt": "nt_user", "posix": "posix_user"}.get(os.name)
    if sys.version_info >= (3, 10):
        scheme = sysconfig.get_preferred_scheme("user")
    if scheme:
        try:
            yield sysconfig.get_path("scripts", scheme=scheme)
        except KeyError:
            pass
    # `pip install --target DIR`: DIR/bin next to DIR/oomdoctor.
    yield os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bin")


def find_oomdoctor_bin(required=True):
    """The path of the ``oomdoctor`` binary.

    ``$OOMDOCTOR_BIN`` wins when set; then the environment this package is installed in; then
    ``PATH``. With ``required=False`` returns ``None`` instead of raising when none is found.
    """
    explicit = os.environ.get("OOMDOCTOR_BIN")
    if explicit:
        if os.path.isfile(explicit):
            return explicit
        if required:
            raise FileNotFoundError("OOMDOCTOR_BIN=%s is not a file" % explicit)
        return None
    for d in _candidates():
        if d:
            p = os.path.join(d, _EXE)
            if os.path.isfile(p) and os.access(p, os.X_OK):
                return p
    on_path = shutil.which(_EXE)
    if on_path:
        return on_path
    if required:
        raise FileNotFoundError(
            "the oomdoctor binary was not found: install the wheel (`pip install oomdoctor`) "
            "or `cargo install oomdoctor`, or set OOMDOCTOR_BIN"
        )
    return None
