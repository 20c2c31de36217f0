#!/usr/bin/env python3
"""Turns the files tools/gpu_check.sh writes (run-*.json from `hookstream run --json`,
python-*.json from bench/python_offload_baseline.py, machine.txt) into the Markdown table committed in
bench/RESULTS.md, with issue 5's targets checked against the measured numbers.

    python3 bench/gpu_results.py DIR [--date YYYY-MM-DD]
"""
import argparse
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def run_numbers(doc):
    """step seconds, peak GiB, copy fraction hidden, H2D/D2H GB/s from a `hookstream run --json` summary."""
    if not doc or not doc.get("steps"):
        return None
    steps = doc["steps"][1:] or doc["steps"]  # the first step warms up allocator and bucket rebuild
    times = sorted(s["step_seconds"] for s in steps)
    median = times[len(times) // 2] if len(times) % 2 else (times[len(times) // 2 - 1] + times[len(times) // 2]) / 2
    copy_ms = sum(s.get("copy_ms", 0) for s in steps)
    hidden_ms = sum(s.get("hidden_copy_ms", 0) for s in steps)
    copy_bytes = sum(s.get("copy_bytes", 0) for s in steps)
    peaks = [s["peak_memory_bytes"] for s in steps if s.get("peak_memory_bytes") is not None]
    predicted = doc.get("predicted") or {}
    return {
        "step_s": median,
        "tokens_per_s": steps[0]["tokens"] / median if median else None,
        "peak_gib": max(peaks) / 2**30 if peaks else None,
        "copy_hidden": hidden_ms / copy_ms if copy_ms > 0 else None,
        "copy_gbps": copy_bytes / (copy_ms / 1e3) / 1e9 if copy_ms > 0 and copy_bytes > 0 else None,
        "predicted_step_s": predicted.get("step_seconds"),
        "predicted_peak_gib": predicted["peak_memory_bytes"] / 2**30 if predicted.get("peak_memory_bytes") else None,
    }


def fmt(value, spec="{:.3f}"):
    return "n/a" if value is None else spec.format(value)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--date", default="")
    args = ap.parse_args()
    d = args.dir
    machine = open(os.path.join(d, "machine.txt")).read().strip().replace("\n", "; ") if os.path.exists(
        os.path.join(d, "machine.txt")) else "unknown"
    runs, run_rows = {}, []
    for key, label in [("none", "(a) no checkpointing"), ("checkpoint", "(b) non-reentrant checkpointing"),
                       ("offload_single", "(c) offload, one reload buffer"),
                       ("offload_double", "(d) offload, two buffers + events"),
                       ("ddp1", "DDP, 1 GPU (offload, two buffers)"),
                       ("ddp2", "DDP, 2 GPUs, NCCL (same per-GPU batch)")]:
        n = run_numbers(load(os.path.join(d, f"run-{key}.json")))
        runs[key] = n
        if n:
            run_rows.append((key, f"| {label} | hookstream run | {fmt(n['step_s'])} | {fmt(n['tokens_per_s'], '{:.0f}')} | "
                                  f"{fmt(n['peak_gib'], '{:.2f}')} | {fmt(n['copy_hidden'], '{:.0%}')} | "
                                  f"{fmt(n['predicted_step_s'])} | {fmt(n['predicted_peak_gib'], '{:.2f}')} |"))
    # Row order: the single-GPU runs, PyTorch's, then the DDP runs.
    rows = [row for key, row in run_rows if not key.startswith("ddp")]
    py = {}
    for key, label in [("none", "Python, no checkpointing"), ("checkpoint", "Python, torch.utils.checkpoint"),
                       ("save_on_cpu", "(e) Python, checkpoint + save_on_cpu(pin_memory=True)")]:
        doc = load(os.path.join(d, f"python-{key}.json"))
        py[key] = doc
        if doc:
            rows.append(f"| {label} | PyTorch {doc.get('torch', '')} | {doc['step_s']:.3f} | {doc['tokens_per_s']:.0f} | "
                        f"{doc['peak_gib']:.2f} | | | |")
    rows += [row for key, row in run_rows if key.startswith("ddp")]

    out = [f"Machine: {machine}. Date: {args.date}.", "",
           "| configuration | stack | step s (median) | tokens/s | peak GiB | copies hidden | predicted step s | predicted peak GiB |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"] + rows + ["", "Targets:"]
    b, dd = runs.get("checkpoint"), runs.get("offload_double")
    if b and dd and b["step_s"] and dd["step_s"]:
        slow_d = dd["step_s"] / b["step_s"] - 1
        out.append(f"- (d) within 3% of (b): {slow_d:+.1%} -> {'met' if slow_d <= 0.03 else 'NOT met'}")
        if b["peak_gib"] is not None and dd["peak_gib"] is not None:
            out.append(f"- (d) peak = (b) peak minus the offloaded activations: (b) {b['peak_gib']:.2f} GiB, (d) {dd['peak_gib']:.2f} GiB, "
                       f"difference {b['peak_gib'] - dd['peak_gib']:.2f} GiB")
        if py.get("checkpoint") and py.get("save_on_cpu"):
            slow_e = py["save_on_cpu"]["step_s"] / py["checkpoint"]["step_s"] - 1
            ok = slow_e > 0 and slow_d <= slow_e / 5
            out.append(f"- (d)'s slowdown over (b) at most a fifth of (e)'s over PyTorch's checkpoint-only run: "
                       f"{slow_d:+.1%} vs {slow_e:+.1%} / 5 = {slow_e / 5:+.1%} -> {'met' if ok else 'NOT met'}")
        if dd.get("copy_gbps") is not None:
            out.append(f"- host<->device copy bandwidth of (d)'s copies: {dd['copy_gbps']:.1f} GB/s against the 55 GB/s measured limit")
    d1, d2 = runs.get("ddp1"), runs.get("ddp2")
    if d1 and d2 and d1["step_s"] and d2["step_s"]:
        r = d2["step_s"] / d1["step_s"] - 1
        out.append(f"- DDP on 2 GPUs within 10% of 1 GPU: {r:+.1%} -> {'met' if r <= 0.10 else 'NOT met'}")
    print("\n".join(out))


if __name__ == "__main__":
    sys.exit(main())
