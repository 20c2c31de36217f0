#!/usr/bin/env bash
# Issue 22 on one GPU machine, in one call: builds hookstream against the PyTorch wheel's LibTorch
# (tools/gpu_build.sh), then at 8K tokens (Llama-3.1-8B shape, LoRA r=16, bench/plans/llama8b-lora-8k-*)
# PyTorch eager (bench/python_offload_baseline.py: none, checkpoint, checkpoint + save_on_cpu,
# checkpoint + torchtune's OffloadActivations from the wheels in .wheels, carried) and
# `hookstream run` ((a) none, (b) checkpoint, (d) double-buffered offload), each eager/hookstream pair
# run back to back; one profiled step of eager (a) and two of hookstream (a), replayed
# (`hookstream replay --format json`); then the long-context ladder (bench/long_context.py) until
# the deadline; then the GPU correctness checks.
# Results: ./out/gpu-runtime, and in $OUT (device tool): results.tgz and the two traces (.json.gz).
#
#   tools/gpu_runtime.sh [--steps N] [--repeats N] [--long-steps N] [--run-timeout S] [--lengths 16384,32768,...] [--deadline S] [--traces "e:h ..."]
#                        [--variants "name=plan:k=v,... ..."] [--no-traces] [--no-8k] [--oom-check] [--long-trace]
# Each traced hookstream plan is replayed against its plan with --calibrate (calibration-PLAN.json); with
# --long-trace every long-context run is traced and replayed the same way (bench/long_context.py --trace).
# --oom-check: a real out-of-memory error and `hookstream run`'s fallback (docs/run.md): the 8K
# plan without checkpointing at a length whose activations cannot fit the device (16K on an H100,
# 32K on an H200), 2 steps; the log is oom-fallback.log.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
out=$here/out/gpu-runtime
rm -rf "$out"; mkdir -p "$out"
[[ -n "${OUT:-}" ]] && trap 'tar czf "$OUT/results.tgz" --exclude="trace-*.json*" -C "$out" .; cp "$out"/trace-eager-*.json.gz "$out"/trace-hookstream-*.json.gz "$OUT"/ 2>/dev/null' EXIT
steps=6 repeats=1 sfx="" long_steps=2 run_timeout=240 lengths=16384,32768,65536,131072 deadline=420 traces="none:none" eight=1 variants="" oom=0 long_trace=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --steps) steps=$2; shift ;;
    --repeats) repeats=$2; shift ;;  # the 8K pairs, run this many times (interleaved)
    --long-steps) long_steps=$2; shift ;;
    --run-timeout) run_timeout=$2; shift ;;  # seconds one long-context run may take
    --lengths) lengths=$2; shift ;;
    --deadline) deadline=$2; shift ;;
    --traces) traces=$2; shift ;;      # "eagermode:plan ..." pairs, e.g. "checkpoint:checkpoint"
    --variants) variants=$2; shift ;;  # "name=plan:key=value,key=value ..." extra hookstream runs
    --no-traces) traces="" ;;
    --no-8k) eight=0 ;;
    --oom-check) oom=1 ;;
    --long-trace) long_trace=--trace ;;
    *) echo "gpu_runtime.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
t0=$(date +%s)
log() { echo "[gpu_runtime +$(( $(date +%s) - t0 ))s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader > "$out/machine.txt" 2>&1
python3 -c 'import torch; print("torch", torch.__version__)' >> "$out/machine.txt" 2>&1
grep -E "MemTotal|MemAvailable" /proc/meminfo >> "$out/machine.txt"; date -u >> "$out/machine.txt"
cat "$out/machine.txt"
log "build"
if ! tools/gpu_build.sh "$here/build-gpu" > "$out/build.log" 2>&1; then
  grep -E "error|FAILED" -A3 "$out/build.log" | head -60
  exit 1
fi
hs=build-gpu/tools/hookstream
gpu=H100-SXM; nvidia-smi -L | grep -q H200 && gpu=H200
# The device budget of the long-context plans: ~96% of what torch sees (79.18 GiB on an H100,
# 139.8 GiB on an H200), leaving the CUDA context and the allocator's fragmentation room.
budget=76; [[ $gpu == H200 ]] && budget=134
status=0

py() {  # mode [extra args]
  local m=$1; shift
  python3 bench/python_offload_baseline.py --config presets/Llama-3.1-8B.json --mode "$m" --steps "$steps" "$@" \
    > "$out/python-$m$sfx.json" 2> "$out/python-$m$sfx.log" || { log "python $m FAILED"; tail -5 "$out/python-$m$sfx.log"; status=1; }
}
hsrun() {  # name plan [extra]
  local name=$1 plan=$2; shift 2
  "$hs" run "$plan" --device cuda --nproc 1 --steps "$steps" --set hookstream.gpu=$gpu --json "$out/run-$name$sfx.json" "$@" \
    > "$out/run-$name$sfx.log" 2>&1 || { log "run $name FAILED"; tail -20 "$out/run-$name$sfx.log"; status=1; }
}

if [[ $eight == 1 ]]; then
  # Each repeat runs every eager/hookstream pair back to back, the order alternating between
  # repeats (eager first, then hookstream first) so that neither side always runs on the warmer
  # GPU; the summary compares each pair within its repeat, so slow drift of the machine cancels.
  for r in $(seq 1 "$repeats"); do
    sfx=""; [[ $repeats -gt 1 ]] && sfx="-r$r"
    if (( r % 2 )); then
      log "repeat $r: eager none / hookstream none"; py none; hsrun none bench/plans/llama8b-lora-8k-none.yaml
      log "repeat $r: hookstream checkpoint / eager checkpoint"; hsrun checkpoint bench/plans/llama8b-lora-8k-checkpoint.yaml; py checkpoint
      log "repeat $r: eager save_on_cpu / hookstream offload_double"; py save_on_cpu; hsrun offload_double bench/plans/llama8b-lora-8k-offload_double.yaml
    else
      log "repeat $r: hookstream none / eager none"; hsrun none bench/plans/llama8b-lora-8k-none.yaml; py none
      log "repeat $r: eager checkpoint / hookstream checkpoint"; py checkpoint; hsrun checkpoint bench/plans/llama8b-lora-8k-checkpoint.yaml
      log "repeat $r: hookstream offload_double / eager save_on_cpu"; hsrun offload_double bench/plans/llama8b-lora-8k-offload_double.yaml; py save_on_cpu
    fi
    # torchtune's OffloadActivations (bench/anchor-wheels.txt, carried in .wheels) over the same
    # checkpointing: the anchor of issue 22 item 4.
    log "repeat $r: eager torchtune_offload"; py torchtune_offload --wheels "$here/.wheels"
    for v in $variants; do  # name=plan-suffix:--set k=v,...
      name=${v%%=*}; rest=${v#*=}; plan=${rest%%:*}; sets=${rest#*:}
      log "repeat $r: hookstream $name"; hsrun "$name" "bench/plans/llama8b-lora-8k-$plan.yaml" $(echo "$sets" | tr ',' '\n' | sed 's/^/--set /')
    done
  done
  sfx=""
  python3 bench/gpu_8k_summary.py "$out" | tee "$out/summary-8k.txt"
fi

if [[ $oom == 1 ]]; then
  oom_len=16384; [[ $gpu == H200 ]] && oom_len=32768
  log "out of memory and fallback: llama8b-lora-8k-none at $oom_len tokens"
  "$hs" run bench/plans/llama8b-lora-8k-none.yaml --device cuda --nproc 1 --steps 2 --set hookstream.gpu=$gpu \
    --set sequence_len=$oom_len --json "$out/run-oom-fallback.json" > "$out/oom-fallback.log" 2>&1
  echo "exit status $?" >> "$out/oom-fallback.log"
  grep -E "out of device memory|predicted to peak|falling back|^[-+][a-z]|^step|exit status" "$out/oom-fallback.log"
fi

for pair in $traces; do
  e=${pair%%:*}; h=${pair#*:}
  log "traces eager $e / hookstream $h"
  python3 bench/python_offload_baseline.py --config presets/Llama-3.1-8B.json --mode "$e" --steps 1 --warmup 2 \
    --trace "$out/trace-eager-$e.json" > "$out/python-traced-$e.json" 2> "$out/python-traced-$e.log" || { log "eager trace FAILED"; tail -5 "$out/python-traced-$e.log"; }
  steps=2 hsrun "traced-$h" "bench/plans/llama8b-lora-8k-$h.yaml" --trace "$out/trace-hookstream-$h.json"
  for t in "eager-$e" "hookstream-$h"; do
    [[ -f "$out/trace-$t.json" ]] || continue
    "$hs" replay "$out/trace-$t.json" --format json -o "$out/replay-$t.json" > "$out/replay-$t.log" 2>&1 || log "replay $t FAILED"
    "$hs" replay "$out/trace-$t.json" > "$out/replay-$t.txt" 2>&1
    if [[ $t == hookstream-* ]]; then  # against its plan: per op group, and the calibration it gives
      "$hs" replay "$out/trace-$t.json" --plan "bench/plans/llama8b-lora-8k-$h.yaml" --set hookstream.gpu=$gpu \
        --calibrate "$out/calibration-$h.json" > "$out/replay-plan-$t.txt" 2>&1 || log "replay --plan $t FAILED"
    fi
    gzip -f "$out/trace-$t.json"
  done
done
ls -la "$out"/trace-* 2>/dev/null

left=$(( deadline - ($(date +%s) - t0) ))
if [[ -n "$lengths" && $left -gt 30 ]]; then
  log "long context ($lengths), ${left}s left"
  python3 bench/long_context.py --hookstream "$hs" --plan bench/plans/llama8b-lora-long.yaml --gpu $gpu --budget-gib $budget \
    --lengths "$lengths" --steps "$long_steps" --deadline "$left" --run-timeout "$run_timeout" --out "$out/long.jsonl" --logdir "$out" \
    $long_trace || status=1
fi

left=$(( deadline + 120 - ($(date +%s) - t0) ))
if [[ $left -gt 60 ]]; then
  log "GPU correctness checks"
  if timeout $((left - 10)) build-gpu/runtime/hookstream-runtime-gpu-check > "$out/gpu-check.txt" 2>&1; then log "gpu-check passed"
  else log "gpu-check FAILED or timed out"; tail -15 "$out/gpu-check.txt"; status=1; fi
fi
log "done"
exit $status
