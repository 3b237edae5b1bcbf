#!/usr/bin/env bash
# Log scanning against grep and ripgrep: the rows of README's "Speed and memory" table.
#
#   bench/scan_bench.sh                      (writes bench/RESULTS-scan.md)
#   RUNS=5 bench/scan_bench.sh               (best of 5 instead of 3)
#   BEFORE=/tmp/oomdoctor-old bench/scan_bench.sh   (adds rows for another build, run in turn)
#   NO_BUILD=1 bench/scan_bench.sh           (skip cargo build, e.g. while another build runs)
#   OUT=/tmp/scan.md bench/scan_bench.sh     (write the table elsewhere, e.g. to add it to the history by hand)
#
# Cases, each timed RUNS times in turn with the anchors (commands alternate, so a burst of
# load on a shared machine hits both sides), keeping the best wall time, the best CPU time
# (user + system, steadier than wall time) and the largest peak RSS (GNU time's %M):
#   1 GiB log     a realistic training/serving log (ANSI progress bars, access lines, loss
#                 dicts; examples/gen_log.rs) with a few hundred accounting lines (stats and
#                 memory lines, each about one in 32768) and one OOM traceback near the end;
#                 `oomdoctor LOG --format json` against `rg -c -i` and `grep -c -i -E` with
#                 4 OOM patterns; the same on one core (`taskset -c 0`)
#   redirect      the same log redirected to standard input (`oomdoctor < LOG`, a CI step's
#                 usual form): a regular file, mapped as the named one is
#   stdin         the same log piped through cat, oomdoctor and grep reading standard input,
#                 and a reader that only drains the pipe (examples/pipe_drain.rs): the floor;
#                 rg on standard input for how a pipe costs another fast reader
#   gzip          the log gzip-compressed (level 1), oomdoctor against zgrep
#   10,000 logs   a 273 MiB log of the same kind (default rates, an OOM every MiB) split into
#                 10,000 files in one directory; oomdoctor DIR against `grep -r -c -i -E`
#   2,000 OOMs    a CI post-mortem over failed jobs: 2,000 files, each one of the 10,000 that
#                 holds an OOM (copied in turn), so every file is an incident to diagnose
#
#   rg anchors    rg -c -i -F over every recogniser's anchor (bench/anchor_cover.py list):
#                 the same line search oomdoctor's scan does, for comparison
#
# Needs GNU time (/usr/bin/time), grep, zgrep, gzip, split and taskset; python3 for the
# rg-anchors row. ripgrep is optional:
# `apt-get install ripgrep`, or `CARGO_HOME=/tmp/rg-home cargo install ripgrep` and put
# /tmp/rg-home/bin on PATH; without it the rg rows are left out.
# Generated inputs live in $BENCH_DIR (default /tmp) and are reused by later runs.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
BENCH_DIR=${BENCH_DIR:-/tmp}
LOG=$BENCH_DIR/oomdoctor-scan-1GiB.log
GZ=$LOG.gz
DIR=$BENCH_DIR/oomdoctor-scan-10k
OOMS=$BENCH_DIR/oomdoctor-scan-2k-ooms
OUT=${OUT:-bench/RESULTS-scan.md}
PATTERNS='out of memory|outofmemory|resource_exhausted|killed process'
RG_ARGS=(-c -i -e 'out of memory' -e outofmemory -e resource_exhausted -e 'killed process')

if [ -z "${NO_BUILD:-}" ]; then # NO_BUILD=1: time the binaries already in target/release
  cargo build --release --quiet --example gen_log --example pipe_drain
  cargo build --release --quiet
fi
OOMDOCTOR=./target/release/oomdoctor
GEN=./target/release/examples/gen_log
[ -s "$LOG" ] || "$GEN" 1024 "$LOG" 1000 32768 32768
[ -s "$GZ" ] || gzip -1 -c "$LOG" > "$GZ"
if [ ! -f "$DIR/rank-09999.log" ]; then
  rm -rf "$DIR" && mkdir -p "$DIR"
  "$GEN" 273 "$DIR.src" 1
  (cd "$DIR" && split -d -a 5 -n l/10000 --additional-suffix=.log "$DIR.src" rank-)
  rm -f "$DIR.src"
fi
if [ ! -f "$OOMS/job-1999.log" ]; then
  rm -rf "$OOMS" && mkdir -p "$OOMS"
  mapfile -t with_oom < <(grep -l -i 'out of memory' "$DIR"/*.log)
  for i in $(seq 0 1999); do cp "${with_oom[i % ${#with_oom[@]}]}" "$OOMS/job-$i.log"; done
fi
cat "$LOG" "$GZ" > /dev/null
find "$DIR" "$OOMS" -type f -exec cat {} + > /dev/null
have_rg=$(command -v rg > /dev/null && echo 1 || echo 0)

# One timed run: prints "wall cpu rss_kb".
once() {
  local out
  out=$( { /usr/bin/time -f '%e %U %S %M' sh -c "$1" > /dev/null; } 2>&1 | tail -1 )
  read -r s u k m <<< "$out"
  awk -v s="$s" -v u="$u" -v k="$k" -v m="$m" 'BEGIN{printf "%s %.2f %d\n", s, u+k, m}'
}

declare -A WALL CPU RSS
# Runs each named command RUNS times, in turn: bench NAME CMD [NAME CMD ...].
bench() {
  local -a names=() cmds=()
  while [ $# -gt 0 ]; do names+=("$1"); cmds+=("$2"); shift 2; done
  for n in "${names[@]}"; do WALL[$n]=999999; CPU[$n]=999999; RSS[$n]=0; done
  for _ in $(seq "$RUNS"); do
    for i in "${!names[@]}"; do
      local n=${names[$i]}
      read -r s c m < <(once "${cmds[$i]}")
      WALL[$n]=$(awk -v a="${WALL[$n]}" -v b="$s" 'BEGIN{print (b<a)?b:a}')
      CPU[$n]=$(awk -v a="${CPU[$n]}" -v b="$c" 'BEGIN{print (b<a)?b:a}')
      RSS[$n]=$(( m > RSS[$n] ? m : RSS[$n] ))
    done
  done
}

OD="$OOMDOCTOR --format json --exit-zero"
cases=()
add() { # add NAME CMD, when the command's tool is there
  cases+=("$1" "$2")
}
add "oomdoctor 1 GiB" "$OD '$LOG'"
[ -n "${BEFORE:-}" ] && add "before 1 GiB" "$BEFORE --format json --exit-zero '$LOG'"
[ "$have_rg" = 1 ] && add "rg 1 GiB" "rg ${RG_ARGS[*]@Q} '$LOG'"
# The same work as oomdoctor's line search: every recogniser's anchor, ASCII case ignored.
if [ "$have_rg" = 1 ] && python3 bench/anchor_cover.py list > "$BENCH_DIR/oomdoctor-anchors.txt"; then
  add "rg anchors 1 GiB" "rg -c -i -F -f '$BENCH_DIR/oomdoctor-anchors.txt' '$LOG'"
fi
add "grep 1 GiB" "grep -c -i -E '$PATTERNS' '$LOG'"
add "oomdoctor 1 core" "taskset -c 0 $OD '$LOG'"
[ -n "${BEFORE:-}" ] && add "before 1 core" "taskset -c 0 $BEFORE --format json --exit-zero '$LOG'"
[ "$have_rg" = 1 ] && add "rg 1 core" "taskset -c 0 rg -j1 ${RG_ARGS[*]@Q} '$LOG'"
add "oomdoctor redirect" "$OD < '$LOG'"
[ -n "${BEFORE:-}" ] && add "before redirect" "$BEFORE --format json --exit-zero < '$LOG'"
[ "$have_rg" = 1 ] && add "rg redirect" "rg ${RG_ARGS[*]@Q} < '$LOG'"
add "oomdoctor stdin" "cat '$LOG' | $OD"
[ -n "${BEFORE:-}" ] && add "before stdin" "cat '$LOG' | $BEFORE --format json --exit-zero"
add "grep stdin" "cat '$LOG' | grep -c -i -E '$PATTERNS'"
add "pipe stdin" "cat '$LOG' | ./target/release/examples/pipe_drain"
[ "$have_rg" = 1 ] && add "rg stdin" "cat '$LOG' | rg ${RG_ARGS[*]@Q}"
add "oomdoctor gzip" "$OD '$GZ'"
[ -n "${BEFORE:-}" ] && add "before gzip" "$BEFORE --format json --exit-zero '$GZ'"
add "zgrep gzip" "zgrep -c -i -E '$PATTERNS' '$GZ'"
add "oomdoctor 10k" "$OD '$DIR'"
[ -n "${BEFORE:-}" ] && add "before 10k" "$BEFORE --format json --exit-zero '$DIR'"
add "grep 10k" "grep -r -c -i -E '$PATTERNS' '$DIR'"
add "oomdoctor ooms" "$OD '$OOMS'"
[ -n "${BEFORE:-}" ] && add "before ooms" "$BEFORE --format json --exit-zero '$OOMS'"
add "grep ooms" "grep -r -c -i -E '$PATTERNS' '$OOMS'"
bench "${cases[@]}"

ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b > 0) printf "%.1fx", a/b; else print "-" }'; }
row() { # row LABEL NAME ANCHOR_NAME
  local n=$2 a=$3
  [ -n "${WALL[$n]:-}" ] || return 0
  local r="-" rc="-"
  if [ -n "$a" ] && [ -n "${WALL[$a]:-}" ]; then
    r=$(ratio "${WALL[$n]}" "${WALL[$a]}"); rc=$(ratio "${CPU[$n]}" "${CPU[$a]}")
  fi
  printf '| %s | %s s | %s s | %d MiB | %s | %s |\n' "$1" "${WALL[$n]}" "${CPU[$n]}" $((RSS[$n] / 1024)) "$r" "$rc"
}
anchor=grep
[ "$have_rg" = 1 ] && anchor=rg
{
  echo "# Log scan benchmark"
  echo
  echo "\`bench/scan_bench.sh\` on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')),"
  echo "$(date -u +%Y-%m-%d), best of $RUNS runs each, load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
  echo "Ratios are against the row's anchor (rg where installed, else grep; zgrep, grep -r)."
  echo
  echo "| case | wall | CPU (user+sys) | peak RSS | wall vs anchor | CPU vs anchor |"
  echo "|---|---|---|---|---|---|"
  row "1 GiB log, oomdoctor --format json" "oomdoctor 1 GiB" "$anchor 1 GiB"
  row "1 GiB log, oomdoctor (before)" "before 1 GiB" "$anchor 1 GiB"
  row "1 GiB log, rg -c -i (4 patterns)" "rg 1 GiB" ""
  row "1 GiB log, grep -c -i -E (4 patterns)" "grep 1 GiB" ""
  row "1 GiB log, rg -c -i -F, oomdoctor's $(cat "$BENCH_DIR/oomdoctor-anchors.txt" 2>/dev/null | wc -l) anchors" "rg anchors 1 GiB" ""
  row "1 GiB log, one core, oomdoctor" "oomdoctor 1 core" "$anchor 1 core"
  row "1 GiB log, one core, oomdoctor (before)" "before 1 core" "$anchor 1 core"
  row "1 GiB log, one core, rg -j1" "rg 1 core" ""
  row "1 GiB log redirected to stdin (< file), oomdoctor" "oomdoctor redirect" "$anchor redirect"
  row "1 GiB log redirected to stdin (< file), oomdoctor (before)" "before redirect" "$anchor redirect"
  row "1 GiB log redirected to stdin (< file), rg -c -i (4 patterns)" "rg redirect" ""
  row "1 GiB log piped on stdin, oomdoctor" "oomdoctor stdin" "grep stdin"
  row "1 GiB log piped on stdin, oomdoctor (before)" "before stdin" "grep stdin"
  row "1 GiB log piped on stdin, grep" "grep stdin" ""
  row "1 GiB log piped on stdin, rg -c -i (4 patterns)" "rg stdin" ""
  row "1 GiB log piped on stdin, the pipe alone (examples/pipe_drain.rs)" "pipe stdin" ""
  row "1 GiB gzip, oomdoctor" "oomdoctor gzip" "zgrep gzip"
  row "1 GiB gzip, oomdoctor (before)" "before gzip" "zgrep gzip"
  row "1 GiB gzip, zgrep" "zgrep gzip" ""
  row "10,000 small logs (273 MiB), oomdoctor" "oomdoctor 10k" "grep 10k"
  row "10,000 small logs (273 MiB), oomdoctor (before)" "before 10k" "grep 10k"
  row "10,000 small logs (273 MiB), grep -r -c -i -E" "grep 10k" ""
  row "2,000 failed jobs' logs, each with an OOM, oomdoctor" "oomdoctor ooms" "grep ooms"
  row "2,000 failed jobs' logs, each with an OOM, oomdoctor (before)" "before ooms" "grep ooms"
  row "2,000 failed jobs' logs, each with an OOM, grep -r -c -i -E" "grep ooms" ""
  echo
  [ -n "${WALL[rg anchors 1 GiB]:-}" ] && echo "oomdoctor vs rg with the same anchors (1 GiB log): wall $(ratio "${WALL[oomdoctor 1 GiB]}" "${WALL[rg anchors 1 GiB]}"), CPU $(ratio "${CPU[oomdoctor 1 GiB]}" "${CPU[rg anchors 1 GiB]}")."
  echo "stdin redirected from the file vs file path (oomdoctor): wall $(ratio "${WALL[oomdoctor redirect]}" "${WALL[oomdoctor 1 GiB]}"), CPU $(ratio "${CPU[oomdoctor redirect]}" "${CPU[oomdoctor 1 GiB]}")."
  echo "stdin piped vs file path (oomdoctor): wall $(ratio "${WALL[oomdoctor stdin]}" "${WALL[oomdoctor 1 GiB]}"), CPU $(ratio "${CPU[oomdoctor stdin]}" "${CPU[oomdoctor 1 GiB]}")."
  [ -n "${WALL[rg stdin]:-}" ] && echo "stdin vs file path (rg): wall $(ratio "${WALL[rg stdin]}" "${WALL[rg 1 GiB]}"), CPU $(ratio "${CPU[rg stdin]}" "${CPU[rg 1 GiB]}")."
  echo "the pipe alone vs file path (oomdoctor): wall $(ratio "${WALL[pipe stdin]}" "${WALL[oomdoctor 1 GiB]}")."
  echo "stdin vs the pipe alone: wall $(ratio "${WALL[oomdoctor stdin]}" "${WALL[pipe stdin]}"), CPU $(ratio "${CPU[oomdoctor stdin]}" "${CPU[pipe stdin]}")."
} > "$OUT"
cat "$OUT"
