#!/usr/bin/env bash
# Session 25 device job (calls 2-4), as run from the repository root: `setsid nohup bash ./job.sh &`
# (the file sat at the root then), then two calls waiting for it. Results beside this file.
cd "$(dirname "$0")"
out=/tmp/s25; mkdir -p $out
echo "start $(date -u)" > $out/stdout.txt
nvidia-smi --query-gpu=name,memory.total,driver_version,power.limit,clocks.max.sm --format=csv,noheader >> $out/stdout.txt
HOOKSTREAM_GPU_TARGETS=hookstream tools/gpu_build.sh build-gpu > $out/build.log 2>&1 || { echo BUILD FAILED >> $out/stdout.txt; tail -30 $out/build.log >> $out/stdout.txt; exit 1; }
echo "built $(date -u)" >> $out/stdout.txt
nvidia-smi --query-gpu=timestamp,clocks.current.sm,power.draw,memory.used,clocks_event_reasons.active --format=csv -l 2 > $out/clocks.csv &
hs=build-gpu/tools/hookstream
f32=(--set sequence_len=32768 --set hookstream.gpu=H200 --set "plugins=[axolotl.integrations.liger.LigerPlugin]"
     --set liger_rms_norm=true --set liger_glu_activation=true --set tiled_mlp=true --set tiled_mlp_num_shards=16
     --set hookstream.tiled_mlp_backward=grad_then_backward --set hookstream.pinned_slots=exact)
rm -rf /tmp/jitcache
for r in cold warm; do
  CUDA_CACHE_PATH=/tmp/jitcache $hs run bench/plans/llama8b-lora-long.yaml "${f32[@]}" --device cuda --nproc 1 --steps 2 > $out/jit-$r.log 2>&1
  echo "jit-$r exit $? $(du -sh /tmp/jitcache 2>/dev/null)" >> $out/stdout.txt
done
CUDA_CACHE_DISABLE=1 $hs run bench/plans/llama8b-lora-long.yaml "${f32[@]}" --device cuda --nproc 1 --steps 2 > $out/jit-disabled.log 2>&1
echo "jit-disabled exit $? $(date -u)" >> $out/stdout.txt
python3 bench/long_context.py --hookstream $hs --plan bench/plans/llama8b-lora-long.yaml --gpu H200 --budget-gib 134 \
  --host-gib 110 --lengths 524288 --steps 1 --deadline 60 --run-timeout 1100 --out $out/long.jsonl --logdir $out \
  --settings "plugins=[axolotl.integrations.liger.LigerPlugin],liger_rms_norm=true,liger_glu_activation=true,tiled_mlp=true,tiled_mlp_num_shards=128,hookstream.tiled_mlp_backward=grad_then_backward,hookstream.offload_layers=[0-26]" >> $out/stdout.txt 2>&1
echo "done $(date -u)" >> $out/stdout.txt
kill %1
