#!/usr/bin/env bash
# One command for a GPU machine (issue 5): builds hookstream against the PyTorch wheel's LibTorch
# (tools/gpu_build.sh), runs the GPU correctness checks, then the benchmarks:
#   (a) no checkpointing, (b) non-reentrant checkpointing, (c) offload with one reload buffer,
#   (d) offload with two buffers and events  -- `hookstream run` on bench/plans/llama8b-lora-8k-*.yaml
#   (e) PyTorch's Python path: torch.utils.checkpoint + save_on_cpu(pin_memory=True), and the same
#       model with checkpointing only / nothing, for reference (bench/python_offload_baseline.py)
# and, with --ddp, the same plan on 1 and on 2 GPUs (DDP over NCCL), plus a traced 2-GPU run whose
# two rank traces are replayed together against the plan.
# With --calibrate, (d) is also traced (`hookstream run --trace`), the trace replayed against its plan
# (`hookstream replay --plan --calibrate`), and (a)-(d) predicted again with that calibration.
# Results go to ./out/gpu, and, where the device tool's $OUT is set, as $OUT/results.tgz;
# bench/gpu_results.py turns them into the table in bench/RESULTS.md.
#
#   tools/gpu_check.sh [--ddp] [--skip-bench] [--no-python] [--no-check] [--calibrate] [--steps N]
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out=$here/out/gpu
rm -rf "$out"; mkdir -p "$out"
# The device tool returns at most 8 files: everything is packed into one archive at the end.
# Traces travel as files of their own: one archive over the device tool's 16 MiB limit returns nothing.
[[ -n "${OUT:-}" ]] && trap 'tar czf "$OUT/results.tgz" --exclude="trace-*.json.gz" -C "$out" .; cp "$out"/trace-*.json.gz "$OUT"/ 2>/dev/null' EXIT
ddp=0 bench=1 python=1 check=1 calibrate=0 steps=6
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ddp) ddp=1 ;;
    --skip-bench) bench=0 ;;
    --no-python) python=0 ;;
    --no-check) check=0 ;;
    --calibrate) calibrate=1 ;;
    --steps) steps=$2; shift ;;
    *) echo "gpu_check.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

log() { echo "[gpu_check $(date +%H:%M:%S)] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$out/machine.txt" 2>&1
python3 -c 'import torch; print("torch", torch.__version__)' >> "$out/machine.txt" 2>&1
log "build"
if ! tools/gpu_build.sh "$here/build-gpu" > "$out/build.log" 2>&1; then
  grep -E "error|FAILED" -A3 "$out/build.log" | head -60
  exit 1
fi
hs=build-gpu/tools/hookstream
status=0

if [[ $check == 1 ]]; then
  log "GPU correctness checks"
  if build-gpu/runtime/hookstream-runtime-gpu-check > "$out/gpu-check.txt" 2>&1; then
    log "gpu-check passed"
  else
    log "gpu-check FAILED"; status=1
  fi
  tail -40 "$out/gpu-check.txt"
fi

run_plan() {  # name plan [extra run args...]
  local name=$1 plan=$2; shift 2
  log "run $name"
  if ! "$hs" run "$plan" --device cuda --steps "$steps" --json "$out/run-$name.json" "$@" > "$out/run-$name.log" 2>&1; then
    log "run $name FAILED"; tail -20 "$out/run-$name.log"; status=1
  else
    tail -4 "$out/run-$name.log"
  fi
}

if [[ $bench == 1 ]]; then
  for m in none checkpoint offload_single offload_double; do
    run_plan "$m" "bench/plans/llama8b-lora-8k-$m.yaml" --nproc 1
  done
  [[ $python == 1 ]] && for m in none checkpoint save_on_cpu; do
    log "python $m"
    python3 bench/python_offload_baseline.py --config presets/Llama-3.1-8B.json --mode "$m" --steps "$steps" \
      > "$out/python-$m.json" 2> "$out/python-$m.log" || { log "python $m FAILED"; tail -5 "$out/python-$m.log"; status=1; }
  done
fi

if [[ $calibrate == 1 ]]; then
  plan=bench/plans/llama8b-lora-8k-offload_double.yaml
  run_plan traced "$plan" --nproc 1 --trace "$out/trace-offload_double.json"
  log "replay --calibrate"
  if "$hs" replay "$out/trace-offload_double.json" --plan "$plan" --calibrate "$out/calibration.yaml" \
      --format json -o "$out/replay.json" > "$out/replay.log" 2>&1; then
    for m in none checkpoint offload_single offload_double; do
      "$hs" plan "bench/plans/llama8b-lora-8k-$m.yaml" --gpu H100-SXM --budget-gib 80 \
        --set hookstream.calibration="$out/calibration.yaml" > "$out/calibrated-$m.txt" 2>&1
      head -3 "$out/calibrated-$m.txt" | tail -2
    done
  else
    log "replay FAILED"; tail -5 "$out/replay.log"; status=1
  fi
  gzip -f "$out/trace-offload_double.json"
fi

if [[ $ddp == 1 ]]; then
  gpus=$(nvidia-smi -L | wc -l)
  gpu=H100-SXM
  nvidia-smi -L | grep -q H200 && gpu=H200
  run_plan ddp1 bench/plans/llama8b-lora-8k-offload_double.yaml --nproc 1 --set hookstream.gpu=$gpu
  if [[ $gpus -ge 2 ]]; then
    run_plan ddp2 bench/plans/llama8b-lora-8k-offload_double.yaml --nproc 2 --set hookstream.world_size=2 \
      --set hookstream.gpu=$gpu
    # A shorter traced run apart from the timed one (the profiler costs time): one trace per rank,
    # replayed together against the plan (per-rank steps, the slowest rank named).
    steps=3 run_plan ddp2-traced bench/plans/llama8b-lora-8k-offload_double.yaml --nproc 2 \
      --set hookstream.world_size=2 --set hookstream.gpu=$gpu --trace "$out/trace-ddp2.json"
    log "replay both ranks"
    "$hs" replay "$out/trace-ddp2.rank0.json" "$out/trace-ddp2.rank1.json" \
      --plan bench/plans/llama8b-lora-8k-offload_double.yaml --set hookstream.world_size=2 --set hookstream.gpu=$gpu \
      > "$out/replay-ddp2.txt" 2>&1 || { log "replay FAILED"; status=1; }
    sed -n '/Plan vs trace/,/largest differences/p' "$out/replay-ddp2.txt"
    gzip -f "$out"/trace-ddp2.rank*.json
  fi
fi
exit $status
