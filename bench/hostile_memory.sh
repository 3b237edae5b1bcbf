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
# same zeros; `plan --model /dev/zero`. Uses GNU time's %M (peak RSS, KiB).
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
check() { # name, command...
  local name=$1; shift
  local kib secs code verdict=ok
  # %x is the command's exit status.
  /usr/bin/time -o "$DIR/time" -f '%M %e %x' timeout 120 "$@" > /dev/null 2>&1 || true
  read -r kib secs code < <(tail -1 "$DIR/time")
  if [ "$code" != 2 ] || [ "$kib" -ge "$LIMIT_KIB" ]; then verdict=FAIL; fail=1; fi
  printf '| %-42s | %4s | %9d KiB | %6s s | %s |\n' "$name" "$code" "$kib" "$secs" "$verdict"
}
echo "| case | exit | peak RSS | wall | |"
echo "|---|---|---|---|---|"
check "gzip bomb snapshot ($(du -k "$DIR/bomb.pickle.gz" | cut -f1) KiB on disk)" "$BIN" "$DIR/bomb.pickle.gz"
check "directory of four bombs" "$BIN" "$DIR/four"
check "valid pickle, then 4 GiB of zeros" "$BIN" "$DIR/valid-then-zeros.pickle.gz"
check "plan --model /dev/zero" "$BIN" plan --model /dev/zero --gpu h100
exit $fail
