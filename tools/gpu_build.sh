#!/usr/bin/env bash
# Builds hookstream on a GPU machine against the LibTorch inside the installed PyTorch wheel
# (../shared/docs/runtime-notes.md). Such machines have no package registry: the C++ libraries
# hookstream uses (fmt, yaml-cpp, nlohmann-json, CLI11, Catch2, Boost headers, SQLite, zlib, simdjson,
# ISA-L) come as Debian 12 packages in $HOOKSTREAM_DEBS (default: .debs/ in the checkout, filled on
# a Debian machine by `tools/gpu_build.sh --fetch`), unpacked into a private prefix, never into /.
#
#   tools/gpu_build.sh --fetch        # on the Debian dev machine: download the .debs into .debs/ and
#                                     # the anchor wheels of bench/anchor-wheels.txt into .wheels/
#   tools/gpu_build.sh [BUILD_DIR]    # on the GPU machine: unpack, configure, build (default build-gpu)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
debs=${HOOKSTREAM_DEBS:-$here/.debs}
packages=(libyaml-cpp-dev libyaml-cpp0.7 libfmt-dev libfmt9 nlohmann-json3-dev libcli11-dev catch2
          libboost1.74-dev libsqlite3-dev libsqlite3-0 zlib1g-dev zlib1g libsimdjson-dev libsimdjson14
          libisal-dev libisal2)

if [[ "${1:-}" == "--fetch" ]]; then
  mkdir -p "$debs"
  (cd "$debs" && apt-get download "${packages[@]}")
  echo "hookstream: ${#packages[@]} packages in $debs"
  # The benchmark anchors' wheels (torchtune's OffloadActivations), with the oracle venv's pip when
  # the set-up made one (tools/setup.sh --oracles), else the system's.
  pip=("$here/build/oracle-venv/bin/python" -m pip)
  [[ -x "$here/build/oracle-venv/bin/python" ]] || pip=(python3 -m pip)
  "${pip[@]}" download --no-deps --quiet -r "$here/bench/anchor-wheels.txt" -d "$here/.wheels"
  echo "hookstream: anchor wheels in $here/.wheels: $(ls "$here/.wheels" | tr '\n' ' ')"
  exit 0
fi

build=${1:-$here/build-gpu}
prefix=${HOOKSTREAM_DEPS_PREFIX:-/tmp/hookstream-deps}
if [[ ! -f "$prefix/usr/include/yaml-cpp/yaml.h" ]]; then
  shopt -s nullglob
  files=("$debs"/*.deb)
  if [[ ${#files[@]} -eq 0 ]]; then
    echo "hookstream: no .deb files in $debs (run tools/gpu_build.sh --fetch on a Debian 12 machine)" >&2
    exit 2
  fi
  for f in "${files[@]}"; do dpkg-deb -x "$f" "$prefix"; done
fi
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# The wheel is built with the C++11 ABI like Debian's packages; Caffe2's CMake config wants the CUDA
# toolkit, which lives in /usr/local/cuda there.
cmake -S "$here" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DHOOKSTREAM_WITH_TORCH=ON \
  -DCMAKE_PREFIX_PATH="$prefix/usr;$prefix/usr/lib/x86_64-linux-gnu/cmake;$torch_prefix" \
  -DCUDAToolkit_ROOT=/usr/local/cuda -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
  -DCMAKE_BUILD_RPATH="$prefix/usr/lib/x86_64-linux-gnu"
# HOOKSTREAM_GPU_TARGETS (space-separated) builds only those targets, e.g. "hookstream" for a
# benchmark-only call.
cmake --build "$build" -j "$(nproc)" ${HOOKSTREAM_GPU_TARGETS:+--target $HOOKSTREAM_GPU_TARGETS}
