#!/usr/bin/env bash
# Times oomdoctor's whole snapshot analysis (streamed read + parse + decode + analyse)
# against Python's bare `pickle.load` of the same file: wall time, CPU time (user + system)
# and peak memory.
#
#   bench/snapshot_bench.sh                # 1,000,000 entries, protocol 4, 3 runs each
#   N=5000000 RUNS=1 bench/snapshot_bench.sh
#   N=100000 PROTO=5 RUNS=5 bench/snapshot_bench.sh
#   gunzip -c fixtures/real/big_snapshot.pickle.gz >/tmp/real300k.pickle
#   SNAP=/tmp/real300k.pickle RUNS=5 bench/snapshot_bench.sh   # a real 2.11 snapshot
#
# The snapshot is generated once under /tmp by bench/gen_snapshot.py (crates.md Appendix A,
# shared frames, one oom entry) and reused. Needs python3 and GNU time (/usr/bin/time).
set -euo pipefail
cd "$(dirname "$0")/.."

N=${N:-1000000}
PROTO=${PROTO:-4}
RUNS=${RUNS:-3}
SNAP=${SNAP:-/tmp/oomdoctor-bench-$N-p$PROTO.pickle}

cargo build --release --quiet --example snapshot_bench
BIN=target/release/examples/snapshot_bench

if [[ ! -f "$SNAP" ]]; then
  echo "generating $SNAP ($N entries, protocol $PROTO)..."
  python3 bench/gen_snapshot.py "$SNAP" "$PROTO" "$N" shared
fi
echo "snapshot: $SNAP ($(stat -c %s "$SNAP") bytes)"
echo "machine:  $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, load average $(cut -d' ' -f1-3 /proc/loadavg)"
cat "$SNAP" > /dev/null # page cache warm for both contenders

# One run of a command under GNU time: "wall_s cpu_s max_rss_kb" (cpu = user + system).
measure_once() {
  local out
  out=$( { /usr/bin/time -f '%e %U %S %M' "$@" > /dev/null; } 2>&1 | tail -n 1 )
  echo "$out" | awk '{printf "%s %.2f %s\n", $1, $2 + $3, $4}'
}

# Median of column $1 over stdin.
median() { awk -v c="$1" '{print $c}' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# The two contenders run in turn (oomdoctor, Python, oomdoctor, ...), not one's runs then
# the other's: on a shared VM whose speed drifts over minutes, runs taken apart would
# compare two different machines. Each pair also gives a ratio of its own; their median is
# reported beside the ratio of the medians.
rust=""; py=""
for _ in $(seq "$RUNS"); do
  rust+="$(measure_once "$BIN" "$SNAP")"$'\n'
  py+="$(measure_once python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb"))' "$SNAP")"$'\n'
done
rust=${rust%$'\n'}; py=${py%$'\n'}
echo
echo "oomdoctor (as the CLI reads it: streamed read + parse + decode + analyse):"
echo "$rust" | awk '{printf "  %s s wall, %s s CPU, %s KB peak RSS\n", $1, $2, $3}'
echo "python3 pickle.load:"
echo "$py" | awk '{printf "  %s s wall, %s s CPU, %s KB peak RSS\n", $1, $2, $3}'

rw=$(echo "$rust" | median 1); ru=$(echo "$rust" | median 2); rm=$(echo "$rust" | median 3)
pw=$(echo "$py" | median 1); pu=$(echo "$py" | median 2); pm=$(echo "$py" | median 3)
pairs=$(paste -d' ' <(echo "$rust") <(echo "$py") | awk '{printf "%.3f\n", $4 / $1}')
pair_median=$(echo "$pairs" | median 1)
echo
echo "medians: oomdoctor ${rw} s / ${rm} KB, python ${pw} s / ${pm} KB"
awk -v rw="$rw" -v pw="$pw" -v ru="$ru" -v pu="$pu" -v rm="$rm" -v pm="$pm" \
    -v pair="$pair_median" -v all="$(echo $pairs)" 'BEGIN {
  printf "speed-up (wall):  %.2fx  (target >= 10x)\n", pw / rw
  printf "  run by run:     %s (median %.2fx)\n", all, pair
  printf "speed-up (CPU):   %.2fx\n", pu / ru
  printf "memory ratio:     %.2f   (oomdoctor / python peak RSS)\n", rm / pm
}'
echo
"$BIN" "$SNAP" --phases
