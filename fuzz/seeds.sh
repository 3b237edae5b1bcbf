#!/usr/bin/env bash
# Builds the fuzz corpora (fuzz/corpus/<target>/) from the project's own fixtures.
#
#   fuzz/seeds.sh            # every target
#   MAX=512 fuzz/seeds.sh    # smaller log and series windows
#
# Logs and series are cut into line-aligned windows of at most MAX bytes (1024 by default),
# each a seed of its own, instead of whole files or their first few KiB: the first 4 KiB of a
# log is mostly its preamble, so seeds cut that way rarely reach the OOM message, and every
# byte of a seed is work the fuzzer repeats on each mutation (the throughput of `log_scan`
# and `series` is about inversely proportional to the input's length). A series window after
# the first starts with the file's first line again, so a header stays a header.
# The other targets take their fixtures whole (pickles, GGUF headers, configs, rule files
# are small).
set -euo pipefail
cd "$(dirname "$0")"
MAX=${MAX:-1024}
root=..

rm -rf corpus
mkdir -p corpus/{log_scan,log_gate,render_hostile,series,pickle,snapshot,rule_file,model_config,gguf}

# window FILE OUTDIR PREFIX REPEAT_HEADER: line-aligned pieces of at most MAX bytes.
window() {
  awk -v max="$MAX" -v out="$2" -v pre="$3" -v hdr="$4" '
    function flush() { if (buf != "") { n++; f = sprintf("%s/%s-%03d", out, pre, n); printf "%s", buf > f; close(f) } buf = "" }
    NR == 1 { head = $0 "\n" }
    {
      line = substr($0, 1, max - 1) "\n"
      if (length(buf) + length(line) > max) { flush(); if (hdr == 1 && NR > 1 && length(head) + length(line) <= max) buf = head }
      buf = buf line
    }
    END { flush() }' "$1"
}

for f in "$root"/rules/*/*.log "$root"/fixtures/engines/*.log "$root"/fixtures/pastes/*.log; do
  [[ -f $f ]] || continue
  name=$(basename "$(dirname "$f")")-$(basename "$f" .log)
  window "$f" corpus/log_scan "$name" 0
done
cp corpus/log_scan/* corpus/render_hostile/
cp corpus/log_scan/* corpus/log_gate/

for f in "$root"/fixtures/series/*.{csv,prom,jsonl} "$root"/fixtures/series/*/*.{csv,prom,jsonl}; do
  [[ -f $f ]] || continue
  window "$f" corpus/series "$(basename "$f")" 1
  # A long series gives hundreds of windows of the same shape: keep its first and last four.
  ls corpus/series/"$(basename "$f")"-* | awk 'NR > 4' | head -n -4 | xargs -r rm --
done

cp "$root"/fixtures/snapshots/*.pickle corpus/pickle/
cp "$root"/fixtures/snapshots/*.pickle corpus/snapshot/
for f in "$root"/rules/*/rule.toml; do cp "$f" "corpus/rule_file/$(basename "$(dirname "$f")").toml"; done
cp "$root"/fixtures/models/*.json corpus/model_config/
# No GGUF file is committed (the model tests build theirs in code): one small header, written
# here: magic, version 3, no tensors, two key/values (architecture, context length).
u64() { printf "$(printf '\\x%02x' $(( $1 & 255 )) $(( $1 >> 8 & 255 )) $(( $1 >> 16 & 255 )) $(( $1 >> 24 & 255 )) 0 0 0 0)"; }
u32() { printf "$(printf '\\x%02x' $(( $1 & 255 )) $(( $1 >> 8 & 255 )) $(( $1 >> 16 & 255 )) $(( $1 >> 24 & 255 )))"; }
gstr() { u64 ${#1}; printf '%s' "$1"; }
{
  printf 'GGUF'; u32 3; u64 0; u64 2
  gstr general.architecture; u32 8; gstr llama
  gstr llama.context_length; u32 4; u32 8192
} > corpus/gguf/llama-header.gguf

for d in corpus/*; do
  printf '%-28s %5d seeds, %s\n' "$d" "$(find "$d" -type f | wc -l)" "$(du -sh "$d" | cut -f1)"
done
