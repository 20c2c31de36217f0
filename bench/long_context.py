#!/usr/bin/env python3
"""Issue 22, item 3: how far `hookstream run` gets in sequence length on one GPU.

For each length: `hookstream plan BASE --set sequence_len=N --format json` (the fastest verified
candidate under --budget-gib), then `hookstream run` with that candidate's --set flags for --steps
steps. Host memory is sampled from /proc/meminfo (MemTotal - MemAvailable, minus the value before
the run) every 0.2 s while the run lasts: pinned offload slots and the process itself. Stops at the
first length that fails (its log is kept) or when --deadline seconds have passed. Writes one JSON
object per length to --out (JSON lines) and prints a table.
"""
import argparse
import json
import os
import signal
import subprocess
import threading
import time


def host_used_bytes():
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            info[k] = int(v.split()[0]) * 1024
    return info["MemTotal"] - info["MemAvailable"]


def search(args, base, row):
    """The fastest candidate of `hookstream plan` for this length (its --set flags), or None (row says why)."""
    plan = subprocess.run([args.hookstream, "plan", args.plan, *base, "--gpu", args.gpu,
                           "--budget-gib", str(args.budget_gib), "--host-budget-gib", str(args.host_gib),
                           "--top", "20", "--format", "json"],
                          capture_output=True, text=True)
    try:
        found = json.loads(plan.stdout)
    except json.JSONDecodeError:
        row.update(status="plan failed", error=(plan.stderr or plan.stdout)[-400:])
        return None
    # The workload is one sequence of N tokens per step: candidates that change the micro-batch
    # size train another workload (and win on tokens/s). Candidates whose pinned host memory would
    # not fit --host-gib were dropped by the plan search itself (--host-budget-gib).
    usable = [c for c in found.get("best", [])
              if not any(ch["key"] == "micro_batch_size" for ch in c["changes"])]
    if not usable:
        row.update(status="no plan fits", smallest=found.get("smallest"), candidates=found.get("best"))
        return None
    best = usable[0]
    flags = list(base)
    for c in best["changes"]:
        flags += ["--set", f"{c['key']}={c['value']}"]
    row.update(plan=flags, predicted_step_s=best["step_ns"] * 1e-9, predicted_peak_gib=best["peak_bytes"] / 2**30,
               predicted_host_gib=best["host_bytes"] / 2**30)
    return flags


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hookstream", required=True)
    ap.add_argument("--plan", required=True)
    ap.add_argument("--gpu", default="H100-SXM")
    ap.add_argument("--budget-gib", type=float, default=76)
    ap.add_argument("--lengths", default="16384,32768,65536,131072")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--host-gib", type=float, default=100, help="pinned host memory a plan may use")
    ap.add_argument("--settings", help="run these --set flags (comma-separated k=v) with --force instead of the "
                    "plan search's choice, to measure where the next limit is when the search finds none")
    ap.add_argument("--deadline", type=float, default=300, help="seconds; no new length starts after it")
    ap.add_argument("--run-timeout", type=float, default=240, help="seconds one run may take; then it is stopped")
    ap.add_argument("--trace", action="store_true", help="trace each run (hookstream run --trace) and replay its last "
                    "step against the plan it ran (hookstream replay --plan --calibrate): where measured and predicted differ")
    ap.add_argument("--out", required=True)
    ap.add_argument("--logdir", required=True)
    args = ap.parse_args()
    t0 = time.time()
    rows = []
    for n in [int(x) for x in args.lengths.split(",")]:
        if time.time() - t0 > args.deadline:
            rows.append({"seq": n, "status": "not run (deadline)"})
            break
        # One loss chunk per ~1024 tokens, as at 8K (8 chunks): hookstream run computes each chunk's
        # logits on their own and recomputes them in backward, so the chunk count bounds the logits.
        # hookstream.gpu: the run's own predicted-vs-measured lines are then for the device searched.
        base = ["--set", f"sequence_len={n}", "--set", f"chunked_cross_entropy_num_chunks={max(8, n // 1024)}",
                "--set", f"hookstream.gpu={args.gpu}"]
        row = {"seq": n}
        if args.settings:
            flags = list(base)
            for kv in args.settings.split(","):
                flags += ["--set", kv]
            row.update(plan=flags, forced=True, predicted_step_s=float("nan"), predicted_peak_gib=float("nan"),
                       predicted_host_gib=float("nan"))
            found = None
        else:
            found = search(args, base, row)
            if found is None:
                rows.append(row)
                break
            flags = found
        before = host_used_bytes()
        peak = [before]
        done = threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], host_used_bytes())
                time.sleep(0.2)

        sampler = threading.Thread(target=sample)
        sampler.start()
        start = time.time()
        summary_path = f"{args.logdir}/long-{n}.json"
        with open(f"{args.logdir}/long-{n}.log", "w") as log:
            # A process group of its own, so that a run past --run-timeout is stopped with its rank.
            trace = f"{args.logdir}/trace-long-{n}.json"
            # Expandable segments for the caching allocator (unless the caller chose a setting): the
            # plan's peak is allocated bytes, and at 320K tokens the classic allocator's segments left
            # 8 GiB reserved but unallocated, so a 5 GiB request failed 3.5 GiB short (2026-11-27,
            # bench/gpu-results/2026-11-27-h100-s20); with expandable segments the step ran.
            env = dict(os.environ)
            env.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
            row["allocator"] = env["PYTORCH_CUDA_ALLOC_CONF"]
            proc = subprocess.Popen([args.hookstream, "run", args.plan, *flags, "--device", "cuda", "--nproc", "1",
                                     "--steps", str(args.steps), "--json", summary_path] + (["--force"] if args.settings else []) +
                                    (["--trace", trace] if args.trace else []),
                                    stdout=log, stderr=log, env=env,
                                    start_new_session=True)
            try:
                rc = proc.wait(timeout=args.run_timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                rc = "timeout"
        done.set()
        sampler.join()
        row.update(wall_s=time.time() - start, host_peak_gib=(peak[0] - before) / 2**30, rc=rc)
        if rc != 0:
            with open(f"{args.logdir}/long-{n}.log") as f:
                row.update(status="run failed", tail=f.read()[-1500:])
            rows.append(row)
            break
        with open(summary_path) as f:
            s = json.load(f)
        steps = s.get("steps", [])
        timed = steps[1:] or steps
        step_s = sorted(x["step_seconds"] for x in timed)[len(timed) // 2]
        if args.trace and os.path.exists(trace):
            # The last traced step against the plan with the flags it ran with: per op group measured
            # vs predicted, and a calibration from it.
            replay = [args.hookstream, "replay", trace, "--plan", args.plan, *flags]
            with open(f"{args.logdir}/replay-long-{n}.txt", "w") as out:
                subprocess.run(replay, stdout=out, stderr=subprocess.STDOUT)
            subprocess.run(replay + ["--format", "json", "-o", f"{args.logdir}/replay-long-{n}.json",
                                     "--calibrate", f"{args.logdir}/calibration-long-{n}.json"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            subprocess.run(["gzip", "-f", trace])
        row.update(status="ok", step_s=step_s, tokens_per_s=n / step_s, step_seconds=[x["step_seconds"] for x in steps],
                   peak_gib=max(x.get("peak_memory_bytes", 0) for x in steps) / 2**30, measured=s.get("measured"),
                   predicted=s.get("predicted"))
        rows.append(row)
    with open(args.out, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    for r in rows:
        if r.get("status") == "ok":
            print(f"{r['seq']:>7}  {r['step_s']:.3f} s  {r['tokens_per_s']:.0f} tok/s  GPU peak {r['peak_gib']:.2f} GiB "
                  f"(pred {r['predicted_peak_gib']:.2f})  host +{r['host_peak_gib']:.1f} GiB  pred step "
                  f"{r['predicted_step_s']:.3f} s  {' '.join(r['plan'][4:])}")
        else:
            print(r["seq"], r.get("status"), str(r.get("tail") or r.get("error") or r.get("smallest") or "")[-600:])


if __name__ == "__main__":
    main()
