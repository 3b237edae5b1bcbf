#!/usr/bin/env bash
# Log scanning: oomdoctor's whole diagnosis against a multi-pattern grep over the same file.
#
#   bench/log_bench.sh [MiB] [log path]        (default 512 MiB in /tmp)
#
# Generates a realistic noisy log with an OOM traceback every 64 MiB (examples/gen_log.rs),
# warms the page cache, then times each command three times and keeps the best wall time and
# the peak resident memory (GNU time's %M). Prints the ratio oomdoctor / grep.
set -euo pipefail
cd "$(dirname "$0")/.."
MIB=${1:-512}
LOG=${2:-/tmp/oomdoctor-bench-${MIB}MiB.log}
cargo build --release --quiet --example gen_log
cargo build --release --quiet
[ -s "$LOG" ] || ./target/release/examples/gen_log "$MIB" "$LOG" 64
cat "$LOG" > /dev/null

best() { # best wall seconds and max RSS of three runs of "$@"
  local best_s=999999 rss=0 out
  for _ in 1 2 3; do
    out=$( { /usr/bin/time -f '%e %M' "$@" > /dev/null; } 2>&1 | tail -1 )
    local s=${out% *} m=${out#* }
    best_s=$(awk -v a="$best_s" -v b="$s" 'BEGIN{print (b<a)?b:a}')
    rss=$(( m > rss ? m : rss ))
  done
  echo "$best_s $rss"
}

read -r g_s g_kb < <(best sh -c "grep -c -i -E 'out of memory|outofmemory|resource_exhausted|killed process' '$LOG' > /tmp/oomdoctor-bench-grep.out || true")
read -r o_s o_kb < <(best sh -c "./target/release/oomdoctor '$LOG' --format json --exit-zero")
size=$(stat -c %s "$LOG")
printf '%-34s %10s %12s %12s\n' "command ($((size >> 20)) MiB log)" "wall (s)" "MiB/s" "peak RSS"
printf '%-34s %10s %12.0f %9d MiB\n' "grep -c -i -E (4 patterns)" "$g_s" "$(awk -v b="$size" -v s="$g_s" 'BEGIN{print b/1048576/s}')" $((g_kb / 1024))
printf '%-34s %10s %12.0f %9d MiB\n' "oomdoctor (full diagnosis)" "$o_s" "$(awk -v b="$size" -v s="$o_s" 'BEGIN{print b/1048576/s}')" $((o_kb / 1024))
printf 'ratio oomdoctor / grep: %.2f\n' "$(awk -v a="$o_s" -v b="$g_s" 'BEGIN{print a/b}')"
