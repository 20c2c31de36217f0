#!/usr/bin/env bash
# Installs the Debian 12 packages hookstream builds against. Idempotent: when everything is present
# it only checks (dpkg-query) and returns in well under a second.
#   tools/setup.sh          what the build and the tests need
#   tools/setup.sh --fuzz   also clang and its sanitizer/libFuzzer runtimes, for fuzz/run.sh
#   tools/setup.sh --oracles  also the test-only Python oracles (oracles/requirements.txt: real
#                           PyTorch 2.11, transformers, PEFT, accelerate, DeepSpeed) in build/oracle-venv;
#                           the test command needs them, the main job does not (docs/oracles.md)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

packages=(
  cmake g++ make pkg-config
  libboost-graph-dev libfmt-dev libcli11-dev catch2 nlohmann-json3-dev libyaml-cpp-dev
  libsqlite3-dev zlib1g-dev
  libisal-dev  # ISA-L: inflates gzipped Kineto traces ~3x faster than zlib (traces/importers/gzip_reader.cc)
  libsimdjson-dev  # parses Kineto trace chunks ~2x faster than the strict scanner (kineto_event_scanner.cc)
  libtorch-dev libgloo-dev
)
oracles=0
for arg in "$@"; do
  case "$arg" in
    --fuzz) packages+=(clang-14 libclang-rt-14-dev) ;;  # libFuzzer, AddressSanitizer, UBSan (fuzz/CMakeLists.txt)
    --oracles) oracles=1 ;;
    *) echo "hookstream setup: unknown option $arg (expected --fuzz or --oracles)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "hookstream setup: installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "hookstream setup: need root to install packages (run as root or with sudo)" >&2
    exit 2
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ "$oracles" -eq 1 ]; then
  "$here/tools/setup_oracles.sh"
fi
