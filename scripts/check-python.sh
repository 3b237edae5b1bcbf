#!/usr/bin/env bash
# Runs the Python tests of the oomdoctor package (python/tests) against a real torch.
#
#   bash scripts/check-python.sh            # uses .venv-torch/ (created with `pip install torch` if missing)
#   PYTHON=/path/to/python bash scripts/check-python.sh   # any interpreter that has torch
#
# Not part of .ci/run (CI needs only Rust). Needs the plain `torch` wheel from PyPI (a CPU-only
# machine is fine: the CUDA APIs are faked where the tests need a device) and a built
# oomdoctor binary, which it builds with cargo if target/release/oomdoctor is missing.
# OOMDOCTOR_KEEP_DUMP=FILE keeps the sidecar the end-to-end test wrote (for fixtures/sidecar/).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
    if [ ! -x .venv-torch/bin/python ]; then
        python3 -m venv .venv-torch
        .venv-torch/bin/pip install --quiet torch
    fi
    PYTHON=.venv-torch/bin/python
fi
if [ -z "${OOMDOCTOR_BIN:-}" ]; then
    [ -x target/release/oomdoctor ] || nice -n 10 cargo build --release --quiet
    OOMDOCTOR_BIN="$PWD/target/release/oomdoctor"
fi
export OOMDOCTOR_BIN
"$PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda available:", torch.cuda.is_available())'
PYTHONPATH="$PWD/python" "$PYTHON" -m unittest discover -s python/tests -v
