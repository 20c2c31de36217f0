#!/usr/bin/env bash
# Issue 22: where a first step's extra time goes. `hookstream run` at 64K tokens (Llama-3.1-8B LoRA,
# Liger, tiled MLP 16 shards, every layer offloaded to exact pinned slots: session 24's call 4, whose
# step 1 took 20.13 s against step 2's 17.12 after the slots moved out of the step) is traced for two
# steps, and bench/kineto_compare.py compares step 1 with step 2 (GPU ops per kernel, host time in CUDA
# API calls, idle gaps); then the same run untraced under settings that remove one suspect each
# (the caching allocator's growth: expandable segments; lazy kernel-module loading: CUDA_MODULE_LOADING=EAGER).
#
#   bench/first_step_probe.sh [LEN]     # on a GPU machine; results in $OUT (else out/first-step)
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
n=${1:-65536}
out=${OUT:-$here/out/first-step}
mkdir -p "$out"
t_start=$(date +%s)
elapsed() { echo $(( $(date +%s) - t_start )); }
log() { echo "[probe +$(elapsed)s] $*" | tee -a "$out/probe.log"; }
nvidia-smi --query-gpu=name,memory.total,driver_version,power.limit,clocks.max.sm --format=csv,noheader >> "$out/probe.log" 2>&1
log "build"
HOOKSTREAM_GPU_TARGETS=hookstream tools/gpu_build.sh build-gpu > /tmp/probe-build.log 2>&1 || { tail -40 /tmp/probe-build.log; exit 1; }
hs=build-gpu/tools/hookstream
flags=(--set sequence_len=$n --set hookstream.gpu=H200 --set "plugins=[axolotl.integrations.liger.LigerPlugin]"
       --set liger_rms_norm=true --set liger_glu_activation=true --set tiled_mlp=true --set tiled_mlp_num_shards=16
       --set hookstream.tiled_mlp_backward=grad_then_backward --set hookstream.pinned_slots=exact)
plan=bench/plans/llama8b-lora-long.yaml

log "traced run, 2 steps"
$hs run $plan "${flags[@]}" --device cuda --nproc 1 --steps 2 --trace /tmp/probe-trace.json --json /tmp/probe-traced.json \
  > "$out/traced.log" 2>&1
log "traced run exit $?"; grep -E "^step|pinned" "$out/traced.log" | tee -a "$out/probe.log"
if [[ -f /tmp/probe-trace.json ]]; then
  ls -la /tmp/probe-trace.json >> "$out/probe.log"
  a=/tmp/probe-trace.json@hookstream:step:1 b=/tmp/probe-trace.json@hookstream:step:2
  python3 bench/kineto_compare.py kernels $a $b > "$out/kernels.txt" 2>&1 &
  python3 bench/kineto_compare.py api $a $b > "$out/api.txt" 2>&1 &
  python3 bench/kineto_compare.py gaps $a $b > "$out/gaps.txt" 2>&1 &
  { $hs replay /tmp/probe-trace.json --step 1; echo "=== step 2"; $hs replay /tmp/probe-trace.json --step 2; } > "$out/replay.txt" 2>&1 &
  wait
  log "analyses done"
fi

variant() {  # name env...
  local name=$1; shift
  if (( $(elapsed) > ${PROBE_DEADLINE:-470} )); then log "skip $name: deadline"; return; fi
  log "untraced $name"
  env "$@" $hs run $plan "${flags[@]}" --device cuda --nproc 1 --steps 2 > "/tmp/probe-$name.log" 2>&1
  log "$name exit $?"; grep -E "^step|pinned" "/tmp/probe-$name.log" | sed "s/^/$name: /" | tee -a "$out/probe.log"
}
variant plain HOOKSTREAM_PROBE=1
variant expandable PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
variant eager_modules CUDA_MODULE_LOADING=EAGER
log "done"
