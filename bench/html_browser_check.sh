#!/usr/bin/env bash
# Renders oomdoctor's HTML report of three cases in headless Chromium and fails on any
# console error or any network request the page makes; saves a screenshot of each.
#
#   bash bench/html_browser_check.sh [OUT_DIR]      # default target/html-check
#
# Needs Chromium (`apt-get install chromium` on Debian) and python3; not part of
# `cargo test`. OOMDOCTOR=path/to/binary picks the binary (default: builds the release one).
# The cases: a crash log, a memory snapshot, and a log fused with its nvidia-smi series.
# A self-test page with a network load and a script error runs first and must fail, so a
# pass means the check could see such errors.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-target/html-check}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

if [ -z "${OOMDOCTOR:-}" ]; then
    cargo build --release --quiet
    OOMDOCTOR=target/release/oomdoctor
fi
CHROMIUM=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)}
if [ -z "$CHROMIUM" ]; then
    echo "html_browser_check: no Chromium found (apt-get install chromium)" >&2
    exit 2
fi

declare -A CASES=(
    [log]="rules/torch-fragmentation/fires-hf-trainer-2ranks.log"
    [snapshot]="fixtures/snapshots/fragmentation_oom.pickle"
    [fused]="rules/series-steady-growth/fires-ambiguous-log-and-smi/train.log rules/series-steady-growth/fires-ambiguous-log-and-smi/gpu.csv"
)

# check NAME: renders $OUT/NAME.html; returns 1 on a console error, a network request the
# page made, or no screenshot.
check() {
    local name=$1
    rm -f "$OUT/$name.netlog.json" "$OUT/$name.png"
    # A fresh profile each time; console messages go to stderr, every network event to the
    # net log. Chromium's own background traffic is switched off where it can be, and what
    # is left is told apart by its initiator. --no-sandbox: CI containers often run as root.
    local profile
    profile=$(mktemp -d)
    timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --no-first-run \
        --no-default-browser-check --disable-background-networking --disable-sync \
        --disable-component-update --disable-default-apps --disable-extensions \
        --disable-client-side-phishing-detection --disable-domain-reliability \
        --disable-features=Translate,OptimizationHints,MediaRouter,SpellCheck,AutofillServerCommunication \
        --user-data-dir="$profile" --enable-logging=stderr --v=0 \
        --log-net-log="$OUT/$name.netlog.json" --net-log-capture-mode=Default \
        --window-size=1280,2600 --hide-scrollbars --virtual-time-budget=3000 \
        --screenshot="$OUT/$name.png" "file://$OUT/$name.html" >"$OUT/$name.chromium.log" 2>&1 || true
    rm -rf "$profile"
    python3 - "$name" "$OUT" <<'PY'
import json, re, sys
name, out = sys.argv[1], sys.argv[2]
problems = []
log = open(f"{out}/{name}.chromium.log", encoding="utf-8", errors="replace").read()
# Console messages are logged as `CONSOLE` lines, whatever their level; the report logs
# nothing, so any one is a problem (script errors, CSP refusals, console.error).
for line in log.splitlines():
    if ":CONSOLE" in line or "Uncaught" in line or "Refused to" in line:
        problems.append("console: " + line.strip())
# Network: any URL request that is not the page itself (file:) or inline (data:).
try:
    net = json.load(open(f"{out}/{name}.netlog.json"))
except (OSError, ValueError):
    # Chromium writes the closing bracket at exit; a cut-off log still lists the events.
    text = open(f"{out}/{name}.netlog.json").read().rstrip().rstrip(",")
    net = json.loads(text + "]}")
# Requests the page made carry its origin (`null` for a file: page) as initiator; the
# browser's own (time checks, account probes) carry "not an origin".
types = {v: k for k, v in net.get("constants", {}).get("logEventTypes", {}).items()}
urls = set()
for ev in net.get("events", []):
    params = ev.get("params") or {}
    url = params.get("url")
    if not url or not types.get(ev.get("type"), "").startswith("URL_REQUEST_START_JOB"):
        continue
    if params.get("initiator") == "not an origin":
        continue
    urls.add(url)
for url in sorted(urls):
    if not re.match(r"^(file|data|about|chrome|chrome-extension|devtools):", url):
        problems.append("network request: " + url)
import os
if not os.path.exists(f"{out}/{name}.png") or os.path.getsize(f"{out}/{name}.png") < 1000:
    problems.append("no screenshot written")
if problems:
    print(f"html_browser_check: {name}: FAILED")
    for p in problems:
        print("  " + p)
    sys.exit(1)
print(f"html_browser_check: {name}: ok (no console error, no network request) -> {out}/{name}.png")
PY
}

cat >"$OUT/selftest.html" <<'HTML'
<!doctype html><html><body><img src="http://127.0.0.1:9/x.png"><script>notDefined()</script></body></html>
HTML
if check selftest >/dev/null; then
    echo "html_browser_check: the self-test page passed: this Chromium hides errors from the check" >&2
    exit 2
fi
echo "html_browser_check: self-test ok (a page with a network load and a script error fails)"

failed=0
for name in log snapshot fused; do
    # shellcheck disable=SC2086
    "$OOMDOCTOR" ${CASES[$name]} --format html --output "$OUT/$name.html" --exit-zero
    check "$name" || failed=1
done
exit $failed
