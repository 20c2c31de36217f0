#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, AddressSanitizer and UBSan on everything; build-fuzz/) and
# runs each for SECONDS (default 300) from a copy of its seeds (the copy grows, the seeds do not):
# fuzz/corpus/TARGET/, and for plan and model_config the project's own plans and model configs. An input that makes a target report, crash, leak or hang is
# written to fuzz/findings/TARGET-*: fix the code, then move the input into
# fuzz/regressions/TARGET/ so that the traces tests replay it from then on (docs/fuzzing.md).
#   fuzz/run.sh [SECONDS] [TARGET...]      targets: kineto_scan replay nsys_sql plan model_config calibration
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-300}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(kineto_scan replay nsys_sql plan model_config calibration)
"$here/tools/setup.sh" --fuzz
CXX=clang++-14 cmake -S "$here" -B "$here/build-fuzz" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHOOKSTREAM_WITH_TORCH=OFF \
  -DHOOKSTREAM_BUILD_TESTS=OFF -DHOOKSTREAM_FUZZ=ON >/dev/null
cmake --build "$here/build-fuzz" -j "$(nproc)" $(printf -- '--target hookstream_fuzz_%s ' "${targets[@]}")
mkdir -p "$here/fuzz/findings"
status=0
for target in "${targets[@]}"; do
  work=$(mktemp -d "${TMPDIR:-/tmp}/hookstream-fuzz-corpus.XXXXXX")
  mkdir -p "$work/corpus"
  # The seeds: tests/traces/fuzz_regression_test.cc replays the same files (seed_files there).
  case $target in
    plan) cp "$here"/plans/*.yaml "$here"/bench/plans/*.yaml "$here"/tests/plans/ddp/*.yaml "$work/corpus/" ;;
    model_config) cp "$here"/presets/*.json "$here"/tests/plans/models/*.json "$work/corpus/" ;;
    *) cp "$here/fuzz/corpus/$target/"* "$work/corpus/" ;;
  esac
  dict=()
  [ -f "$here/fuzz/$target.dict" ] && dict=(-dict="$here/fuzz/$target.dict")
  # -max_len: small inputs run fastest (every kineto_scan input is read five ways, the parallel
  # ones in chunks of 8-132 bytes); the SQL seeds need their ~40 KB.
  max_len=16384
  [ "$target" = nsys_sql ] && max_len=65536
  echo "fuzz/run.sh: $target for $seconds s"
  # TMPDIR: the driver's scratch directory goes under $work, removed below even when the driver
  # aborted on a finding (its own cleanup runs only at a normal exit).
  mkdir -p "$work/tmp"
  TMPDIR="$work/tmp" ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$here/build-fuzz/fuzz/hookstream_fuzz_$target" "$work/corpus" "${dict[@]}" -max_total_time="$seconds" \
    -timeout=20 -rss_limit_mb=4096 -max_len=$max_len -print_final_stats=1 \
    -artifact_prefix="$here/fuzz/findings/$target-" || status=$?
  rm -rf "$work"
done
exit $status
