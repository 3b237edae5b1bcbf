#!/usr/bin/env bash
# Builds the fuzz targets the way `cargo fuzz build` does, for machines without cargo-fuzz
# (it needs the crate registry's download of cargo-fuzz itself; this needs only nightly).
#
#   fuzz/build.sh                     # every target, no sanitizer (what the runs in README use)
#   SANITIZER=address fuzz/build.sh   # AddressSanitizer, as `cargo fuzz build` defaults to
#   fuzz/build.sh log_scan series     # some targets
#
# Binaries land in fuzz/target/x86_64-unknown-linux-gnu/release/<target>; run one with
#   fuzz/target/x86_64-unknown-linux-gnu/release/log_scan -max_len=1024 fuzz/corpus/log_scan
#
# Why no sanitizer by default: the library denies `unsafe` but for the log gate's AVX2 loads
# (src/ingest/log/gate.rs; the `log_gate` target checks it against the plain search, and is
# worth a run with SANITIZER=address after any change there), so elsewhere AddressSanitizer
# can only catch bugs in dependencies, and it makes `log_scan` about 2.6x slower (allocator,
# memcmp interceptors, stack depot). Coverage, compare tracing, debug assertions and overflow
# checks, which find our bugs, stay on: the flags below are cargo-fuzz 0.12's.
set -euo pipefail
cd "$(dirname "$0")"
SANITIZER=${SANITIZER:-none}
flags=(
  -Cpasses=sancov-module
  -Cllvm-args=-sanitizer-coverage-level=4
  -Cllvm-args=-sanitizer-coverage-inline-8bit-counters
  -Cllvm-args=-sanitizer-coverage-pc-table
  -Cllvm-args=-sanitizer-coverage-trace-compares
  --cfg fuzzing
  -Cllvm-args=-simplifycfg-branch-fold-threshold=0
  -Cdebug-assertions
  -Coverflow_checks
)
[[ $SANITIZER != none ]] && flags+=("-Zsanitizer=$SANITIZER")
bins=()
for t in "$@"; do bins+=(--bin "$t"); done
RUSTFLAGS="${flags[*]}" cargo +nightly build --release --target x86_64-unknown-linux-gnu "${bins[@]}"
