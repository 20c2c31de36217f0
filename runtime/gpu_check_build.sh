#!/usr/bin/env bash
# Builds hookstream-runtime-gpu-check with g++ alone, against the LibTorch inside the installed
# PyTorch wheel, on a GPU machine that lacks some of the full project's build dependencies (the
# trace importers' SQLite, CLI11). Needs yaml-cpp, fmt, nlohmann_json and Boost headers.
#   runtime/gpu_check_build.sh OUT_DIR   -> OUT_DIR/hookstream-runtime-gpu-check
set -euo pipefail
out=${1:?usage: $0 OUT_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out/obj"
torch=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
cuda=${CUDA_HOME:-/usr/local/cuda}
abi=$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
flags=(-std=c++17 -O2 -fPIC -D_GLIBCXX_USE_CXX11_ABI=$abi -DHOOKSTREAM_HAVE_CUDA=1
       -DHOOKSTREAM_DATA_DIR="\"$root\"" -I"$root" -I"$torch/include" -I"$torch/include/torch/csrc/api/include"
       -I"$cuda/include")
sources=("$root"/sim/*.cc "$root"/runtime/{train_model,activation_offload,cuda_stream_backend,annotation,checkpoint,tiled_mlp,safetensors,hook_recorder,gpu_check_main}.cc)
objects=()
for s in "${sources[@]}"; do
  o="$out/obj/$(basename "$(dirname "$s")")_$(basename "$s" .cc).o"
  objects+=("$o")
  g++ "${flags[@]}" -c "$s" -o "$o" &
  while (( $(jobs -rp | wc -l) >= $(nproc) )); do wait -n; done
done
wait
g++ -o "$out/hookstream-runtime-gpu-check" "${objects[@]}" -L"$torch/lib" -Wl,-rpath,"$torch/lib" \
  -ltorch -ltorch_cuda -ltorch_cpu -lc10_cuda -lc10 -L"$cuda/lib64" -Wl,-rpath,"$cuda/lib64" -lcudart \
  -lyaml-cpp -lfmt -lpthread
echo "built $out/hookstream-runtime-gpu-check"
