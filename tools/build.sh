#!/usr/bin/env bash
# Configures and builds hookstream into ./build (Release). Used by the README's two commands.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S "$here" -B "$here/build" -DCMAKE_BUILD_TYPE=Release -DHOOKSTREAM_WITH_TORCH=ON "$@" >/dev/null
cmake --build "$here/build" -j "$jobs"
