#!/usr/bin/env bash
# The shell steps of the GitHub Action (action.yml): `action.sh install` and `action.sh run`.
# Inputs arrive as INPUT_* environment variables (set by action.yml); results go to
# $GITHUB_OUTPUT, annotations to stdout and the report to $GITHUB_STEP_SUMMARY, as on a
# runner. scripts/check-action.sh runs both steps locally the same way.
set -euo pipefail

out() { # name=value to the step's outputs (or stdout when run by hand)
    if [ -n "${GITHUB_OUTPUT:-}" ]; then echo "$1" >> "$GITHUB_OUTPUT"; else echo "output: $1"; fi
}

install() {
    if [ -n "${INPUT_OOMDOCTOR_BIN:-}" ]; then
        [ -x "$INPUT_OOMDOCTOR_BIN" ] || { echo "::error title=oomdoctor::oomdoctor-bin $INPUT_OOMDOCTOR_BIN is not an executable file"; exit 2; }
        out "bin=$(cd "$(dirname "$INPUT_OOMDOCTOR_BIN")" && pwd)/$(basename "$INPUT_OOMDOCTOR_BIN")"
        return
    fi
    local py venv what
    py=$(command -v python3 || command -v python) || { echo "::error title=oomdoctor::no Python to install oomdoctor with; set oomdoctor-bin"; exit 2; }
    venv="${RUNNER_TEMP:-/tmp}/oomdoctor-venv"
    if [ -n "${INPUT_WHEEL:-}" ]; then
        what=$INPUT_WHEEL
    elif [ "${INPUT_VERSION:-}" = latest ]; then
        what=oomdoctor
    elif [ -n "${INPUT_VERSION:-}" ]; then
        what="oomdoctor==$INPUT_VERSION"
    else
        what=${GITHUB_ACTION_PATH:?GITHUB_ACTION_PATH is not set}  # build the wheel from source
    fi
    echo "::group::Install oomdoctor ($what)"
    "$py" -m venv "$venv"
    local bindir=$venv/bin
    [ -d "$bindir" ] || bindir=$venv/Scripts  # Windows runners
    "$bindir/python" -m pip install --quiet --disable-pip-version-check "$what"
    "$bindir/oomdoctor" --version
    echo "::endgroup::"
    out "bin=$bindir/oomdoctor"
}

run() {
    local bin=${OOMDOCTOR_BIN:-oomdoctor}
    local tmp=${RUNNER_TEMP:-/tmp}
    # Expand the patterns ourselves: `**` recurses, a pattern matching nothing is dropped,
    # a file matched by two patterns is read once.
    shopt -s globstar nullglob
    local -a patterns files=()
    local -A seen=()
    read -r -d '' -a patterns <<< "${INPUT_PATHS:-}" || true
    local p f
    for p in "${patterns[@]}"; do
        for f in $p; do
            [ -e "$f" ] || continue
            f=${f#./}
            [ -n "${seen[$f]:-}" ] && continue
            seen[$f]=1
            files+=("$f")
        done
    done
    if [ ${#files[@]} -eq 0 ]; then
        echo "::notice title=oomdoctor::no file matched paths (${INPUT_PATHS:-}) in $(pwd); nothing to diagnose"
        out "exit-code=0"
        return 0
    fi
    local -a extra=() policy=()
    read -r -a extra <<< "${INPUT_ARGS:-}" || true
    case "${INPUT_FAIL_ON:-any}" in
        any | "") ;;
        none) policy=(--exit-zero) ;;
        *) policy=(--fail-on "$INPUT_FAIL_ON") ;;
    esac
    echo "oomdoctor: diagnosing ${files[*]}"
    local report=$tmp/oomdoctor-report.json
    "$bin" "${files[@]}" "${extra[@]}" --format json --output "$report" --exit-zero || true
    out "report=$report"
    if [ -n "${INPUT_SARIF:-}" ]; then
        mkdir -p "$(dirname "$INPUT_SARIF")"
        "$bin" "${files[@]}" "${extra[@]}" --format sarif --output "$INPUT_SARIF" --exit-zero || true
        out "sarif=$INPUT_SARIF"
    fi
    # Annotations on stdout, the markdown report appended to $GITHUB_STEP_SUMMARY.
    local code=0
    "$bin" "${files[@]}" "${extra[@]}" --format github "${policy[@]}" || code=$?
    out "exit-code=$code"
    return "$code"
}

case "${1:-}" in
    install) install ;;
    run) run ;;
    *) echo "usage: action.sh install|run" >&2; exit 2 ;;
esac
