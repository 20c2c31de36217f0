#!/usr/bin/env python3
"""The 8K table of tools/gpu_runtime.sh: eager anchors and `hookstream run`, per repeat and over repeats.

Reads OUT/python-MODE[-rN].json (bench/python_offload_baseline.py) and OUT/run-NAME[-rN].json
(`hookstream run --json`). A run's step time is the median of its steps after the first (the first
holds the caching allocator's cudaMallocs). Each hookstream run is compared with the eager run of
the same repeat (run back to back, bench order alternating), so drift of the machine between repeats
cancels in the ratio; the spread of those ratios over repeats is the noise the verdict must beat:
"no slower" holds only when the largest ratio is <= 1 (and "within 1%" only when it is <= 1.01).

    bench/gpu_8k_summary.py OUT [--json FILE]
"""
import argparse
import glob
import json
import os
import re
import statistics

# hookstream run -> the eager run its time is compared with (issue 22: (a) vs eager none, (b) and
# the offloaded (d) vs eager checkpoint) and the eager runs its peak is compared with.
TIME_REF = {"none": "none", "checkpoint": "checkpoint"}
OFFLOAD_PEAK_REFS = ["save_on_cpu", "torchtune_offload"]  # for every offloading run (all but none, checkpoint)


def repeat_of(stem):
    m = re.match(r"(.*?)(?:-r(\d+))?$", stem)
    return m.group(1), int(m.group(2) or 1)


def load(out):
    eager, runs = {}, {}
    for f in sorted(glob.glob(os.path.join(out, "python-*.json"))):
        name, r = repeat_of(os.path.basename(f)[len("python-"):-len(".json")])
        if name.startswith("traced"):
            continue
        try:
            p = json.load(open(f))
        except (OSError, ValueError):
            continue
        if len(p.get("step_s_all", [])) > 1:
            eager[(p["mode"], r)] = {"s": p["step_s"], "peak": p["peak_gib"]}
    for f in sorted(glob.glob(os.path.join(out, "run-*.json"))):
        name, r = repeat_of(os.path.basename(f)[len("run-"):-len(".json")])
        if name.startswith("traced") or name.startswith("oom"):
            continue
        try:
            h = json.load(open(f))
        except (OSError, ValueError):
            continue
        steps = h.get("steps", [])[1:]
        if not steps:
            continue
        runs[(name, r)] = {
            "s": statistics.median(s["step_seconds"] for s in steps),
            "peak": max(s["peak_memory_bytes"] for s in steps) / 2**30,
            "pred_s": h["predicted"]["step_seconds"],
            "pred_peak": h["predicted"]["peak_memory_bytes"] / 2**30,
        }
    return eager, runs


def spread(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--json")
    args = ap.parse_args()
    eager, runs = load(args.out)
    repeats = sorted({r for _, r in list(eager) + list(runs)})
    summary = {"eager": {}, "hookstream": {}}
    for mode in sorted({m for m, _ in eager}):
        xs = [eager[(mode, r)] for r in repeats if (mode, r) in eager]
        summary["eager"][mode] = {"s": spread([x["s"] for x in xs]), "peak": spread([x["peak"] for x in xs])}
        times = " ".join("%.4f" % x["s"] for x in xs)
        print(f"eager {mode:18s} step s {times}  peak GiB {max(x['peak'] for x in xs):.2f}")
    for name in sorted({n for n, _ in runs}):
        xs = [(r, runs[(name, r)]) for r in repeats if (name, r) in runs]
        entry = {"s": spread([x["s"] for _, x in xs]), "peak": spread([x["peak"] for _, x in xs]),
                 "predicted_s": xs[0][1]["pred_s"], "predicted_peak": xs[0][1]["pred_peak"]}
        times = " ".join("%.4f" % x["s"] for _, x in xs)
        line = (f"hookstream {name:14s} step s {times}  peak GiB "
                f"{max(x['peak'] for _, x in xs):.2f}  predicted {entry['predicted_s']:.3f} s "
                f"{entry['predicted_peak']:.2f} GiB")
        ref = TIME_REF.get(name, "checkpoint")
        ratios = [x["s"] / eager[(ref, r)]["s"] for r, x in xs if (ref, r) in eager]
        if ratios:
            entry["vs_eager"] = {"mode": ref, **spread(ratios)}
            line += (f"\n    vs eager {ref} in the same repeat: median {100 * (entry['vs_eager']['median'] - 1):+.2f}%, "
                     f"range {100 * (min(ratios) - 1):+.2f}% .. {100 * (max(ratios) - 1):+.2f}% over {len(ratios)}")
        for peer in ([] if name in TIME_REF else OFFLOAD_PEAK_REFS):
            peaks = [eager[(peer, r)]["peak"] for r in repeats if (peer, r) in eager]
            if peaks:
                delta = max(x["peak"] for _, x in xs) - max(peaks)
                entry.setdefault("peak_vs", {})[peer] = delta
                line += f"\n    peak vs eager {peer}: {delta:+.3f} GiB"
        summary["hookstream"][name] = entry
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
