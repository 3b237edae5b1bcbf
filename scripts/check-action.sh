#!/usr/bin/env bash
# Runs the GitHub Action's steps (action.yml) locally the way a runner does, on fixtures:
# each step's `run:` line from action.yml is written to a file and run with
# `bash --noprofile --norc -eo pipefail FILE` (GitHub's `shell: bash`) in its working
# directory, with INPUT_* set as action.yml maps them and GITHUB_OUTPUT, GITHUB_STEP_SUMMARY,
# GITHUB_ACTION_PATH, RUNNER_TEMP pointing into a scratch directory. Checks the annotations,
# the step summary, the SARIF file, the outputs and the exit codes of each fail-on policy.
#
#   bash scripts/check-action.sh                 # installs the wheel in target/wheels/ if there is one
#   OOMDOCTOR_BIN=target/release/oomdoctor bash scripts/check-action.sh   # or uses this binary
#
# Not part of .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "check-action: FAIL: $*" >&2; exit 1; }

# Two workspaces a training job could leave: tee'd logs under logs/ (ws), and the snapshot
# with its sidecar that oomdoctor.torch dumped (dumps); apart, since oomdoctor would rightly
# fuse a log and a snapshot of the same device into one incident.
ws=$scratch/workspace
dumps=$scratch/dumps
mkdir -p "$ws/logs" "$dumps/run1" "$scratch/runner"
cp rules/torch-fragmentation/fires-hf-trainer-2ranks.log "$ws/logs/train.log"
echo "step 4/100 loss 2.31" > "$ws/logs/healthy.log"
cp fixtures/snapshots/fragmentation_oom.pickle "$dumps/run1/oom-20261125-153809.pickle"
cp fixtures/sidecar/oom-20261125-153809.pickle.json "$dumps/run1/"

# The run lines and the default paths, from action.yml itself.
run_line() { grep -A3 "id: $1" action.yml | sed -n 's/^ *run: //p'; }
default_paths=$(grep -A8 '^  paths:' action.yml | sed -n 's/^ *default: "\(.*\)"$/\1/p')
[ -n "$(run_line install)" ] && [ -n "$(run_line run)" ] && [ -n "$default_paths" ] || fail "cannot read action.yml"

export GITHUB_ACTIONS=true CI=true GITHUB_ACTION_PATH=$root GITHUB_WORKSPACE=$ws RUNNER_TEMP=$scratch/runner
step() { # step ID WORKDIR: runs action.yml's step ID as the runner would; prints its exit code
    printf '%s\n' "$(run_line "$1")" > "$scratch/step-$1.sh"
    local code=0
    (cd "$2" && bash --noprofile --norc -eo pipefail "$scratch/step-$1.sh") > "$scratch/$1.out" 2> "$scratch/$1.err" || code=$?
    echo "$code"
}
output() { sed -n "s/^$1=//p" "$GITHUB_OUTPUT" | tail -1; }

# --- install -----------------------------------------------------------------------------
export GITHUB_OUTPUT=$scratch/install.output GITHUB_STEP_SUMMARY=$scratch/summary.md
: > "$GITHUB_OUTPUT"
wheel=$(ls target/wheels/oomdoctor-*.whl 2>/dev/null | head -1 || true)
if [ -n "${OOMDOCTOR_BIN:-}" ]; then
    export INPUT_OOMDOCTOR_BIN=$root/$OOMDOCTOR_BIN INPUT_WHEEL= INPUT_VERSION=
    how="oomdoctor-bin: $OOMDOCTOR_BIN"
elif [ -n "$wheel" ]; then
    export INPUT_OOMDOCTOR_BIN= INPUT_WHEEL=$root/$wheel INPUT_VERSION=
    how="wheel: $wheel"
else
    fail "no wheel in target/wheels (run scripts/check-wheel.sh) and no OOMDOCTOR_BIN"
fi
code=$(step install "$ws")
[ "$code" = 0 ] || { cat "$scratch/install.out" "$scratch/install.err"; fail "install step exited $code"; }
bin=$(output bin)
[ -x "$bin" ] || fail "install gave no binary: $bin"
echo "install ($how): $bin, $("$bin" --version)"
unset INPUT_OOMDOCTOR_BIN INPUT_WHEEL INPUT_VERSION
export OOMDOCTOR_BIN=$bin

inputs() { # NAME FAIL_ON PATHS SARIF: the run step's inputs, fresh output and summary files
    export GITHUB_OUTPUT=$scratch/$1.output INPUT_FAIL_ON=$2 INPUT_PATHS=$3 INPUT_SARIF=$4 INPUT_ARGS=
    : > "$GITHUB_OUTPUT"
    : > "$GITHUB_STEP_SUMMARY"
}

# --- run: default paths, fail on any incident, SARIF -----------------------------------------
inputs any any "$default_paths" reports/oom.sarif
code=$(step run "$ws")
cp "$scratch/run.out" "$scratch/any.out"
[ "$code" = 1 ] || { cat "$scratch/run.out" "$scratch/run.err"; fail "fail-on any: exit $code, expected 1"; }
[ "$(output exit-code)" = 1 ] || fail "exit-code output $(output exit-code)"
grep -q '^oomdoctor: diagnosing logs/healthy.log logs/train.log$' "$scratch/run.out" || fail "the logs were not found"
grep -q '^::error file=logs/train.log,line=[0-9]*,title=oomdoctor%3A fragmentation' "$scratch/run.out" \
    || { cat "$scratch/run.out"; fail "no error annotation at the log line"; }
grep -q 'fragmentation' "$GITHUB_STEP_SUMMARY" || fail "step summary has no report"
python3 - "$ws/reports/oom.sarif" "$(output report)" <<'PY' || fail "SARIF or JSON report"
import json, sys
sarif = json.load(open(sys.argv[1]))
assert sarif["version"] == "2.1.0", sarif["version"]
results = sarif["runs"][0]["results"]
assert results and all(r["ruleId"] for r in results), results
report = json.load(open(sys.argv[2]))
print("sarif: %d results; report: causes %s" % (len(results), [i["cause"] for i in report["incidents"]]))
PY
echo "fail-on any: exit 1, $(grep -c '^::error' "$scratch/run.out") error annotation(s), summary $(wc -c < "$GITHUB_STEP_SUMMARY") bytes"

# --- run: the hook's dump, found by the default paths; the sidecar is read -------------------
inputs dump any "$default_paths" ""
code=$(step run "$dumps")
[ "$code" = 1 ] || { cat "$scratch/run.out" "$scratch/run.err"; fail "dump: exit $code, expected 1"; }
grep -q '^::error file=run1/oom-20261125-153809.pickle' "$scratch/run.out" || { cat "$scratch/run.out"; fail "no annotation for the snapshot"; }
python3 - "$(output report)" <<'PY' || fail "the sidecar's facts are not in the report"
import json, sys
[inc] = json.load(open(sys.argv[1]))["incidents"]
assert inc["facts"]["runtime.device_name"]["value"] == "NVIDIA A10G", inc["facts"].keys()
print("dump: cause %s, device %s from the sidecar" % (inc["cause"], inc["facts"]["runtime.device_name"]["value"]))
PY

# --- fail-on none: report, never fail ------------------------------------------------------
inputs none none "$default_paths" ""
code=$(step run "$ws")
[ "$code" = 0 ] || fail "fail-on none: exit $code"
grep -q '^::error file=logs/train.log' "$scratch/run.out" || fail "fail-on none lost the annotations"
echo "fail-on none: exit 0, annotations kept"

# --- fail-on a cause that did not happen: warnings, exit 0 ----------------------------------
inputs policy host-oom,memory-leak "logs/" ""
code=$(step run "$ws")
[ "$code" = 0 ] || fail "fail-on host-oom: exit $code"
grep -q '^::warning file=logs/train.log' "$scratch/run.out" || { cat "$scratch/run.out"; fail "other causes should be warnings"; }
echo "fail-on host-oom,memory-leak: exit 0, the fragmentation incident is a warning"

# --- nothing matched -------------------------------------------------------------------------
inputs empty any "nothing/*.log" ""
code=$(step run "$ws")
[ "$code" = 0 ] || fail "no match: exit $code"
grep -q '^::notice title=oomdoctor::no file matched' "$scratch/run.out" || fail "no notice"
echo "no file matched: exit 0 with a notice"

echo "--- annotations (fail-on any) ---"
cut -c1-160 "$scratch/any.out" | grep '^::' | head -5
echo "check-action: OK"
