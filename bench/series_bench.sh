#!/usr/bin/env bash
# Parses and analyses 10 million memory samples (nvidia-smi CSV, then DCGM Prometheus text)
# and records wall time and peak memory. Results go in bench/RESULTS-series.md (by hand).
#
#   bash bench/series_bench.sh [SAMPLES]     # default 10000000
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-10000000}
dir=${TMPDIR:-/tmp}/oomdoctor-series-bench
mkdir -p "$dir"
cargo build --release --example series_bench >/dev/null
bin=target/release/examples/series_bench
if [ ! -s "$dir/smi-$n.csv" ]; then "$bin" gen-smi "$dir/smi-$n.csv" "$n"; fi
if [ ! -s "$dir/dcgm-$n.prom" ]; then "$bin" gen-prom "$dir/dcgm-$n.prom" "$n"; fi
ls -l "$dir/smi-$n.csv" "$dir/dcgm-$n.prom"
echo "load average: $(cut -d" " -f1-3 /proc/loadavg) on $(nproc) cores"
for f in "$dir/smi-$n.csv" "$dir/dcgm-$n.prom"; do
  # Warm the page cache so the numbers measure parsing, not the disk.
  cat "$f" >/dev/null
  for run in 1 2 3; do
    /usr/bin/time -f "  run $run: %e s wall, %U s user, %S s sys, %M KB max RSS" "$bin" --quiet "$f"
  done
done
