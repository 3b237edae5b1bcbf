#!/usr/bin/env bash
# Peak memory on hostile inputs (issue 14): each case must exit 2 cleanly with a peak
# resident set under 1 GiB. Kept out of `cargo test` because it writes and reads
# gigabytes of decompressed data.
#
#   bench/hostile_memory.sh            (builds the release binary)
#   BIN=target/debug/oomdoctor bench/hostile_memory.sh
#
# Cases: a gzip snapshot that is a pickle header and then 4 GiB of zeros (a 4 MB file);
# a directory of four of them (read in parallel before); a valid pickle followed by the
# same zeros; `plan --model /dev/zero`; and the memo-sharing amplification files of
# bench/gen_hostile.py (1-2 MB gzip files whose entries all share one big string, list or
# file name), which must end (exit 0, 1 or 2) under 1 GiB. Uses GNU time's %M (peak RSS,
# KiB), %U/%S (CPU time).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${BIN:-}" ]; then
  cargo build --release --quiet
  BIN=target/release/oomdoctor
fi
DIR=$(mktemp -d /tmp/oomdoctor-hostile.XXXXXX)
trap 'rm -rf "$DIR"' EXIT

# 64 members of 64 MiB of zeros make 4 GiB without compressing 4 GiB here.
head -c $((64 << 20)) /dev/zero | gzip -1 > "$DIR/zeros.gz"
member() { for _ in $(seq 1 63); do cat "$DIR/zeros.gz"; done; }
{ printf '\x80\x04' | gzip -1; member; } > "$DIR/bomb.pickle.gz"
{ printf '\x80\x04}.' | gzip -1; member; } > "$DIR/valid-then-zeros.pickle.gz"
mkdir "$DIR/four"
for i in 1 2 3 4; do cp "$DIR/bomb.pickle.gz" "$DIR/four/snap-$i.pickle.gz"; done

LIMIT_KIB=$((1 << 20))
fail=0
check() { # name, accepted exit codes (regex), command...
  local name=$1 codes=$2; shift 2
  local kib secs user sys code verdict=ok
  # %x is the command's exit status.
  /usr/bin/time -o "$DIR/time" -f '%M %e %U %S %x' timeout 120 "$@" > /dev/null 2>&1 || true
  read -r kib secs user sys code < <(tail -1 "$DIR/time")
  if ! [[ "$code" =~ ^($codes)$ ]] || [ "$kib" -ge "$LIMIT_KIB" ]; then verdict=FAIL; fail=1; fi
  printf '| %-46s | %4s | %9d KiB | %6s s | %5s s | %s |\n' "$name" "$code" "$kib" "$secs" \
    "$(echo "$user + $sys" | bc)" "$verdict"
}
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| case | exit | peak RSS | wall | CPU | |"
echo "|---|---|---|---|---|---|"
check "gzip bomb snapshot ($(du -k "$DIR/bomb.pickle.gz" | cut -f1) KiB on disk)" 2 "$BIN" "$DIR/bomb.pickle.gz"
check "directory of four bombs" 2 "$BIN" "$DIR/four"
check "valid pickle, then 4 GiB of zeros" 2 "$BIN" "$DIR/valid-then-zeros.pickle.gz"
check "plan --model /dev/zero" 2 "$BIN" plan --model /dev/zero --gpu h100
# The same bomb under a 2 GiB address-space cap: exit 2, not SIGABRT.
check "bomb under ulimit -v 2 GiB" 2 bash -c "ulimit -v $((2 << 20)); exec $BIN $DIR/bomb.pickle.gz"

AMP=${AMP_DIR:-/tmp/oomdoctor-hostile-amp}
if [ ! -d "$AMP" ]; then python3 bench/gen_hostile.py "$AMP" > /dev/null; fi
for f in "$AMP"/*.pickle.gz; do
  check "$(basename "$f") ($(du -k "$f" | cut -f1) KiB)" '0|1|2' "$BIN" "$f"
done
exit $fail
