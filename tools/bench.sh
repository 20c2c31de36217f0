#!/usr/bin/env bash
# Builds hookstream and runs the CPU benchmarks in bench/, writing bench/RESULTS.md: one section per
# benchmark, each stamped with the machine and the date. Run it on an otherwise idle machine.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/tools/build.sh" >/dev/null
machine="$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores, $(free -g | awk '/^Mem:/{print $2}') GiB"
stamp="$(date -u +%Y-%m-%d)"
out="$here/bench/RESULTS.md.tmp"
{
  echo "# Benchmark results"
  echo
  echo "Written by \`tools/bench.sh\`. Targets come from the issues; every figure below was measured, not estimated."
  for bench in "$here"/build/bench/*_bench; do
    name=$(basename "$bench")
    echo
    echo "## $name"
    echo
    echo "Machine: $machine. Date: $stamp. Build: Release (-O3), g++ $(g++ -dumpfullversion)."
    echo
    if [[ $name == replay_bench ]]; then
      # As `hookstream replay` runs (tools/cli/main.cc re-executes with them): huge pages for the heap,
      # large blocks kept in it, freed memory kept in the process, one heap for every thread.
      GLIBC_TUNABLES=glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=4294967295:glibc.malloc.trim_threshold=4294967295:glibc.malloc.arena_max=1 "$bench"
    else
      "$bench"
    fi
  done
} > "$out"
mv "$out" "$here/bench/RESULTS.md"
echo "wrote bench/RESULTS.md"
