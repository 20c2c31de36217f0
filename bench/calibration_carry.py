#!/usr/bin/env python3
"""Issue 22, item 5: does a calibration from one traced run carry to the other rows of a GPU run?

For every row of a tools/gpu_runtime.sh result directory (the 8K runs run-*.json, the long-context
rows of long.jsonl), predicts the step with `hookstream simulate ... --format json` (time.step_seconds, the
plan as it ran) without and with `--set hookstream.calibration=FILE`, and prints both against the
measured step (the median of the steps after the first; the first includes warm-up). The prediction
is CPU work: run it where hookstream is built, with the calibration file the GPU run wrote.

  python3 bench/calibration_carry.py --hookstream build/tools/hookstream --calibration DIR/calibration-offload_double.json DIR...
"""
import argparse
import json
import os
import statistics
import subprocess


def predicted_s(hookstream, plan, flags, calibration=None):
    extra = ["--set", f"hookstream.calibration={calibration}"] if calibration else []
    # simulate exits 1 when the plan's verdict is a failure; its prediction is printed all the same.
    r = subprocess.run([hookstream, "simulate", plan, *flags, *extra, "--format", "json"], capture_output=True, text=True)
    if r.returncode not in (0, 1):
        raise SystemExit(f"hookstream simulate {plan} {' '.join(flags)}: {r.stdout[-300:]} {r.stderr[-300:]}")
    return json.loads(r.stdout)["time"]["step_seconds"]


def rows(directory):
    """(name, plan, --set flags, measured steady-state step s) of each hookstream run in a result dir."""
    for name in sorted(os.listdir(directory)):
        if name.startswith("run-") and name.endswith(".json") and "traced" not in name and "oom" not in name:
            run = json.load(open(os.path.join(directory, name)))
            steps = [s["step_seconds"] for s in run["steps"][1:]] or [run["steps"][0]["step_seconds"]]
            mode = name[len("run-"):-len(".json")]
            yield (f"8K {mode}", f"bench/plans/llama8b-lora-8k-{mode}.yaml",
                   ["--set", f"hookstream.gpu={run['predicted']['device']}"], statistics.median(steps))
    long_rows = os.path.join(directory, "long.jsonl")
    if os.path.exists(long_rows):
        for line in open(long_rows):
            r = json.loads(line)
            if r.get("status") != "ok":
                continue
            steps = r.get("step_seconds") or [r["step_s"]]
            measured = statistics.median(steps[1:] or steps)
            yield f"{r['seq'] // 1024}K", "bench/plans/llama8b-lora-long.yaml", r["plan"], measured


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hookstream", required=True)
    ap.add_argument("--calibration", required=True)
    ap.add_argument("dirs", nargs="+")
    args = ap.parse_args()
    print(f"calibration: {args.calibration}")
    print(f"{'row':<22} {'measured s':>11} {'predicted s':>12} {'error':>7} {'calibrated s':>13} {'error':>7}")
    for directory in args.dirs:
        for name, plan, flags, measured in rows(directory):
            plain = predicted_s(args.hookstream, plan, flags)
            calibrated = predicted_s(args.hookstream, plan, flags, args.calibration)
            print(f"{name:<22} {measured:>11.4f} {plain:>12.4f} {100 * (plain / measured - 1):>+6.1f}% "
                  f"{calibrated:>13.4f} {100 * (calibrated / measured - 1):>+6.1f}%")


if __name__ == "__main__":
    main()
