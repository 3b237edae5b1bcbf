"""``python -m oomdoctor ARGS...`` runs the installed ``oomdoctor`` binary with ARGS."""

import os
import subprocess
import sys

from ._find import find_oomdoctor_bin


def main():
    try:
        exe = find_oomdoctor_bin()
    except FileNotFoundError as e:
        sys.stderr.write("oomdoctor: %s\n" % e)
        return 2
    args = [exe] + sys.argv[1:]
    if sys.platform == "win32":
        return subprocess.call(args)
    os.execv(exe, args)  # replaces this process: exit code and signals are the binary's
    return 0  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
