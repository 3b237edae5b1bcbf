#!/usr/bin/env bash
# Produces real OOM logs, allocator snapshots and an nvidia-smi series on a CUDA machine:
#   INCIDENT_OUT=/tmp/out bash scripts/real_incidents/run.sh
# Each scenario's stdout+stderr is the log a user would paste. See README.md here.
set -u
cd "$(dirname "$0")"
O=${INCIDENT_OUT:?set INCIDENT_OUT}
mkdir -p "$O"
export PYTHONUNBUFFERED=1
run() { local name=$1; shift; echo "== $name"; timeout 80 "$@" >"$O/$name.log" 2>&1; echo "rc=$?" | tee -a "$O/$name.rc"; tail -3 "$O/$name.log"; }
if [ "${ROUND:-1}" = 6 ]; then
  run cublas_full python3 cublas_full.py
  exit 0
fi
if [ "${ROUND:-1}" = 5 ]; then
  run lightning_batch python3 lightning_batch.py
  run jax_oom python3 jax_oom.py
  exit 0
fi
if [ "${ROUND:-1}" = 4 ]; then
  run graph_capture python3 graph_capture.py
  run capped python3 capped.py
  exit 0
fi
if [ "${ROUND:-1}" = 3 ]; then
  run graph_capture python3 graph_capture.py
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True run expandable_batch python3 expandable_batch.py
  run capped python3 capped.py
  run optimizer_states python3 optimizer_states.py
  run trainer_batch python3 trainer_batch.py
  exit 0
fi
if [ "${ROUND:-1}" = 2 ]; then
  run fragmentation python3 fragmentation.py
  run generate_kv python3 generate_kv.py
  run two_ranks_one_gpu torchrun --nproc-per-node 2 two_ranks_one_gpu.py
  exit 0
fi
nvidia-smi --query-gpu=timestamp,index,name,memory.used,memory.total,utilization.gpu --format=csv -lms 250 >"$O/leak_smi.csv" &
SMI=$!
run leak python3 leak.py
kill $SMI
run fragmentation python3 fragmentation.py
run batch_too_big python3 batch_too_big.py --batch_size 512
run model_too_large python3 model_too_large.py
rm -f /tmp/hog.ready
python3 contention_hog.py 0.85 /tmp/hog.ready >"$O/hog.log" 2>&1 &
HOG=$!
for _ in $(seq 60); do [ -f /tmp/hog.ready ] && break; sleep 1; done
nvidia-smi >"$O/contention_nvidia_smi.txt" 2>&1
run contention python3 contention.py
kill $HOG; wait $HOG 2>/dev/null
run two_ranks_one_gpu torchrun --nproc-per-node 2 two_ranks_one_gpu.py
nvidia-smi >"$O/nvidia_smi_idle.txt" 2>&1
