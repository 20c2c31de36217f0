#!/usr/bin/env bash
# Every output `hookstream replay` writes (text, JSON, timeline, calibration-free what-ifs, exit code
# and stderr) on every trace it is given, so that a speed change can be shown not to change a byte.
#
#   tools/replay_outputs.sh record DIR [TRACE...]    write the outputs into DIR (a fresh directory)
#   tools/replay_outputs.sh compare DIR [TRACE...]   write them again and compare with DIR (exit 1 on
#                                                    any difference, naming the file)
#   tools/replay_outputs.sh check MANIFEST           compare with the sha256 manifest (the ctest)
#   tools/replay_outputs.sh manifest MANIFEST        write that manifest
#
# Without TRACE arguments the traces are the real ones: ../shared/traces, bench/traces and
# tests/traces/data, plus two files given together (two ranks). Paths are given relative to the
# repository root (run from there): the reports name their files, so the same path must be given
# each time. HOOKSTREAM (default build/tools/hookstream) is the binary run. The scaled traces of
# bench/RESULTS.md are passed as TRACE arguments (`replay_bench --write` makes them).
set -euo pipefail

usage() { echo "usage: $0 record|compare DIR [TRACE...] | check|manifest MANIFEST" >&2; exit 2; }
[ $# -ge 2 ] || usage
mode=$1 target=$2
shift 2
bin=${HOOKSTREAM:-build/tools/hookstream}
[ -x "$bin" ] || { echo "$0: $bin: not an executable (set HOOKSTREAM)" >&2; exit 2; }

# One entry per case: a label (a file name) and the traces, separated by '|'.
cases=()
if [ $# -gt 0 ]; then
  for t in "$@"; do cases+=("$(basename "$t")|$t"); done
else
  for t in ../shared/traces/nsys/*.sqlite ../shared/traces/kineto/*.json.gz bench/traces/*.json.gz \
           tests/traces/data/*.json.gz; do
    [ -f "$t" ] && cases+=("$(basename "$t")|$t")
  done
  cases+=("two-ranks|../shared/traces/kineto/event-sync.json.gz ../shared/traces/kineto/event-sync-multistream.json.gz")
fi

# The variants: the default report, JSON with every critical segment and every what-if, the
# timeline. A variant that fails (a trace without a step, say) records its exit code and stderr.
run_case() {  # OUT_DIR LABEL TRACES
  local out=$1 label=$2 traces=$3 v rc
  local -a args
  for v in text json timeline; do
    case $v in
      text) args=() ;;
      json) args=(--format json --critical-segments 0 --what-if second_reload_buffer --what-if copy_to_side_stream
                  --what-if bucket_cap_mb=25 --what-if remove_host_sync) ;;
      timeline) args=(--timeline "$out/$label.timeline.json") ;;
    esac
    rc=0
    # shellcheck disable=SC2086  # traces are words
    "$bin" replay $traces "${args[@]}" > "$out/$label.$v.out" 2> "$out/$label.$v.err" || rc=$?
    echo "$rc" > "$out/$label.$v.rc"
  done
}

write_all() {  # OUT_DIR
  local c
  for c in "${cases[@]}"; do run_case "$1" "${c%%|*}" "${c#*|}"; done
}

case $mode in
  record)
    mkdir -p "$target"
    write_all "$target"
    echo "recorded $(ls "$target" | wc -l) files in $target"
    ;;
  compare)
    [ -d "$target" ] || { echo "$0: $target: no recorded outputs" >&2; exit 2; }
    now=$(mktemp -d)
    trap 'rm -rf "$now"' EXIT
    write_all "$now"
    if diff -rq "$target" "$now" >&2; then
      echo "identical: $(ls "$now" | wc -l) files"
    else
      echo "$0: outputs differ from $target" >&2
      exit 1
    fi
    ;;
  manifest|check)
    now=$(mktemp -d)
    trap 'rm -rf "$now"' EXIT
    write_all "$now"
    # The timeline file's name is in no output; the manifest names the files relative to $now.
    if [ "$mode" = manifest ]; then
      (cd "$now" && sha256sum -- *) > "$target"
      echo "wrote $target ($(wc -l < "$target") files)"
    else
      [ -f "$target" ] || { echo "$0: $target: no manifest" >&2; exit 2; }
      manifest_path=$(cd "$(dirname "$target")" && pwd)/$(basename "$target")
      extra=$(cd "$now" && ls | sort | comm -23 - <(awk '{print $2}' "$manifest_path" | sort))
      if [ -n "$extra" ]; then echo "$0: outputs not in $target: $extra" >&2; exit 1; fi
      if ! (cd "$now" && sha256sum --quiet -c "$manifest_path" >&2); then
        echo "$0: outputs differ from $target (if intended, re-record: $0 manifest $target)" >&2
        exit 1
      fi
      echo "identical to $target"
    fi
    ;;
  *) usage ;;
esac
