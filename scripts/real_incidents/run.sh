#!/usr/bin/env bash
# Produces real OOM logs, allocator snapshots and an nvidia-smi series on a CUDA machine:
#   INCIDENT_OUT=/tmp/out bash scripts/real_incidents/run.sh
# Each scenario's stdout+stderr is the log a user would paste. See README.md here.
set -u
cd "$(dirname "$0")"
O=${INCIDENT_OUT:?set INCIDENT_OUT}
mkdir -p "$O"
export PYTHONUNBUFFERED=1
run() { local name=$1; shift; echo "== $name"; timeout "${T:-80}" "$@" >"$O/$name.log" 2>&1; echo "rc=$?" | tee -a "$O/$name.rc"; tail -3 "$O/$name.log"; }
if [ "${ROUND:-1}" = 12 ]; then
  T=60 run host_growth python3 host_growth.py
  exit 0
fi
if [ "${ROUND:-1}" = 11 ]; then
  T=60 run leak_no_oom python3 leak_no_oom.py
  exit 0
fi
if [ "${ROUND:-1}" = 10 ]; then
  T=100 run variable_length python3 variable_length.py
  exit 0
fi
if [ "${ROUND:-1}" = 9 ]; then
  T=60 run cupy_oom python3 cupy_oom.py
  T=60 run numba_oom python3 numba_oom.py
  T=90 run triton_shared_memory python3 triton_shared_memory.py
  T=60 run device_assert python3 device_assert.py
  exit 0
fi
if [ "${ROUND:-1}" = 8 ]; then
  T=90 run trainer_eval_accumulate python3 trainer_eval_accumulate.py
  T=90 run peft_lora_batch python3 peft_lora_batch.py
  T=60 run eager_attention python3 eager_attention.py
  exit 0
fi
if [ "${ROUND:-1}" = 7 ]; then
  T=60 run kv_static python3 kv_static.py
  dmesg -C 2>/dev/null
  T=45 run host_oom_load bash in_cgroup.sh 3G python3 host_oom_load.py
  T=60 run host_oom_dataloader bash in_cgroup.sh 5G python3 host_oom_dataloader.py
  dmesg 2>&1 | tail -60 >"$O/host_oom_dmesg.txt"
  T=45 run jax_oversize python3 jax_oversize.py
  T=40 run graph_pool_snapshot python3 graph_pool_snapshot.py
  T=60 run big_snapshot python3 big_snapshot.py
  T=100 run compile_batch python3 compile_batch.py
  exit 0
fi
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
