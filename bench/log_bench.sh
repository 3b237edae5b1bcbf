#!/usr/bin/env bash
# Log scanning: oomdoctor's whole diagnosis against a multi-pattern grep over the same file.
#
#   bench/log_bench.sh [MiB] [log path]        (default 512 MiB in /tmp)
#   STATS_EVERY=8 bench/log_bench.sh 512       (worst case: a serving log of mostly stats lines)
#
# Generates a realistic noisy log with an OOM traceback every 64 MiB and a vLLM stats line
# every STATS_EVERY lines on average (default 128; examples/gen_log.rs explains the rates),
# warms the page cache, then times each command five times and keeps the best wall time, the
# best CPU time (user + system, steadier than wall time on a shared machine) and the peak
# resident memory (GNU time's %M). Prints the ratio oomdoctor / grep for both times.
set -euo pipefail
cd "$(dirname "$0")/.."
MIB=${1:-512}
STATS_EVERY=${STATS_EVERY:-128}
LOG=${2:-/tmp/oomdoctor-bench-${MIB}MiB-s${STATS_EVERY}.log}
cargo build --release --quiet --example gen_log
cargo build --release --quiet
[ -s "$LOG" ] || ./target/release/examples/gen_log "$MIB" "$LOG" 64 "$STATS_EVERY"
cat "$LOG" > /dev/null

best() { # best wall seconds, best CPU seconds and max RSS of five runs of "$@"
  local best_s=999999 best_cpu=999999 rss=0 out
  for _ in 1 2 3 4 5; do
    out=$( { /usr/bin/time -f '%e %U %S %M' "$@" > /dev/null; } 2>&1 | tail -1 )
    read -r s u k m <<< "$out"
    best_s=$(awk -v a="$best_s" -v b="$s" 'BEGIN{print (b<a)?b:a}')
    best_cpu=$(awk -v a="$best_cpu" -v b="$u" -v c="$k" 'BEGIN{print (b+c<a)?b+c:a}')
    rss=$(( m > rss ? m : rss ))
  done
  echo "$best_s $best_cpu $rss"
}

read -r g_s g_cpu g_kb < <(best sh -c "grep -c -i -E 'out of memory|outofmemory|resource_exhausted|killed process' '$LOG' > /tmp/oomdoctor-bench-grep.out || true")
read -r o_s o_cpu o_kb < <(best sh -c "./target/release/oomdoctor '$LOG' --format json --exit-zero")
size=$(stat -c %s "$LOG")
mibs() { awk -v b="$size" -v s="$1" 'BEGIN{print b/1048576/s}'; }
printf '%-30s %9s %9s %9s %12s\n' "command ($((size >> 20)) MiB log)" "wall (s)" "cpu (s)" "MiB/s" "peak RSS"
printf '%-30s %9s %9s %9.0f %8d MiB\n' "grep -c -i -E (4 patterns)" "$g_s" "$g_cpu" "$(mibs "$g_s")" $((g_kb / 1024))
printf '%-30s %9s %9s %9.0f %8d MiB\n' "oomdoctor (full diagnosis)" "$o_s" "$o_cpu" "$(mibs "$o_s")" $((o_kb / 1024))
printf 'ratio oomdoctor / grep: wall %.2f, cpu %.2f (load average: %s)\n' \
  "$(awk -v a="$o_s" -v b="$g_s" 'BEGIN{print a/b}')" "$(awk -v a="$o_cpu" -v b="$g_cpu" 'BEGIN{print a/b}')" \
  "$(cut -d' ' -f1-3 /proc/loadavg)"
