#!/usr/bin/env bash
# Builds the wheel (maturin, `bindings = "bin"`), installs it into a fresh virtual environment
# and checks what a user gets: the `oomdoctor` binary on PATH, `python -m oomdoctor`, the
# package (`oomdoctor.torch`, the callbacks), and the OOMDOCTOR_WATCH start-up hook.
#
#   bash scripts/check-wheel.sh
#
# Needs Python 3.8+, the Rust toolchain and PyPI (for maturin, unless it is installed). Not
# part of .ci/run, which needs only Rust. Build outputs go to target/wheels/ and the throwaway
# environments to .venv-wheel-build/ and .venv-wheel-check/ (ignored by git).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
py=${PYTHON:-python3}
fail() { echo "check-wheel: FAIL: $*" >&2; exit 1; }

# 1. Build: maturin in a build environment of its own.
[ -x .venv-wheel-build/bin/maturin ] || {
    "$py" -m venv .venv-wheel-build
    .venv-wheel-build/bin/pip install --quiet "maturin>=1.5,<2.0"
}
rm -f target/wheels/oomdoctor-*.whl
nice -n 10 .venv-wheel-build/bin/maturin build --release --out target/wheels
wheel=$(ls target/wheels/oomdoctor-*.whl)
echo "built $wheel ($(du -h "$wheel" | cut -f1))"
"$py" - "$wheel" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
print("\n".join("  " + n for n in names))
need = ["oomdoctor/__init__.py", "oomdoctor/__main__.py", "oomdoctor/torch.py", "oomdoctor/hf.py", "oomdoctor/lightning.py"]
missing = [n for n in need if n not in names]
missing += [] if any(n.endswith(".data/scripts/oomdoctor") for n in names) else ["<data>/scripts/oomdoctor"]
missing += [] if any(n.endswith(".data/purelib/oomdoctor_watch.pth") for n in names) else ["<data>/purelib/oomdoctor_watch.pth"]
assert not [n for n in names if "tests/" in n], "python/tests leaked into the wheel"
if missing:
    sys.exit("missing from the wheel: %s" % missing)
PY

# 2. Install into a fresh environment, from the wheel file only (no index needed).
rm -rf .venv-wheel-check
"$py" -m venv .venv-wheel-check
.venv-wheel-check/bin/pip install --quiet --no-index "$wheel"
bin=.venv-wheel-check/bin
cd "$(mktemp -d)"  # away from the checkout, so nothing is imported from python/ by accident

# 3. The binary on the environment's PATH.
version=$("$root/$bin/oomdoctor" --version)
echo "oomdoctor --version: $version"
[ "$version" = "oomdoctor $(grep -m1 '^version' "$root/Cargo.toml" | cut -d'"' -f2)" ] || fail "unexpected version: $version"

# 4. python -m oomdoctor on a bundled fixture: the fragmentation log, as JSON.
fixture=$root/rules/torch-fragmentation/fires-hf-trainer-2ranks.log
set +e
"$root/$bin/python" -m oomdoctor "$fixture" --format json > out.json
code=$?
set -e
[ "$code" = 1 ] || fail "python -m oomdoctor exited $code, expected 1 (an incident)"
cause=$("$root/$bin/python" -c 'import json; print(json.load(open("out.json"))["incidents"][0]["cause"])')
[ "$cause" = fragmentation ] || fail "cause $cause, expected fragmentation"
echo "python -m oomdoctor $fixture: exit 1, cause $cause"
"$root/$bin/python" -m oomdoctor --version | grep -q '^oomdoctor ' || fail "python -m oomdoctor --version"

# 5. The package: found binary, hook importable without torch, callbacks fail with a clear message.
"$root/$bin/python" - <<'PY'
import os, sys
import oomdoctor
import oomdoctor.torch as hook
exe = oomdoctor.find_oomdoctor_bin()
assert exe.startswith(sys.prefix), exe
assert "torch" not in sys.modules, "importing the hook imported torch"
assert not hook.watch(), "watch() without torch must fail soft"
for mod, hint in (("oomdoctor.hf", "transformers"), ("oomdoctor.lightning", "lightning")):
    try:
        __import__(mod)
    except ImportError as e:
        assert hint in str(e), e
    else:
        raise AssertionError(mod + " imported without " + hint)
print("package: version %s, binary %s" % (oomdoctor.__version__, exe))
PY

# 6. The OOMDOCTOR_WATCH start-up hook: off costs an environment lookup, on waits for torch.
off=$("$root/$bin/python" -c 'import sys; print("oomdoctor._startup" in sys.modules)')
on=$(OOMDOCTOR_WATCH=1 "$root/$bin/python" -c 'import sys; print("oomdoctor._startup" in sys.modules, "oomdoctor.torch" in sys.modules)')
[ "$off" = False ] || fail "the start-up hook loaded without OOMDOCTOR_WATCH"
[ "$on" = "True False" ] || fail "OOMDOCTOR_WATCH=1 did not install the start-up hook (or imported torch early): $on"
echo "OOMDOCTOR_WATCH start-up hook: off=$off, on=$on"
echo "check-wheel: OK"
