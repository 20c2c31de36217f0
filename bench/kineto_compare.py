#!/usr/bin/env python3
"""Op-by-op comparison of two Kineto traces of one training step each (issue 22: hookstream run vs
PyTorch eager). Each trace is named as FILE@RANGE, RANGE being the record_function range around
the step (`hookstream:step:N`: `hookstream run --trace` and bench/python_offload_baseline.py --trace
both write one). Three reports:

  kernels A@step B@step   GPU ops launched inside each step, summed per kernel name (count, us),
                          largest differences first; launch API counts; busy time and span
  gaps    A@step B@step   idle time between GPU ops, the largest gaps and the CPU op that launched
                          the op after each
  memory  A@step ...      the caching allocator's peak inside the step ([memory] events: the traces
                          must be recorded with profile_memory), where it is reached, and what is
                          live then, grouped by the CPU op and annotation that allocated it
  api     A@step B@step   host time in CUDA runtime/driver calls inside each step, per API (count,
                          total, longest), largest differences first, and the longest calls of A with
                          the annotation they ran in (a first step's cudaMalloc growth, lazy module
                          loads inside the first launch of a kernel, synchronisations)

Used for bench/gpu-results/2026-11-25-h100-issue22/*.txt.
"""
import bisect
import collections
import gzip
import json
import re
import sys


def read_events(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path) as f:
        return json.load(f)["traceEvents"]


def step_window(ev, step_name):
    s = [e for e in ev if e.get("ph") == "X" and e.get("name") == step_name][0]
    return s["ts"], s["ts"] + s["dur"]


def step_gpu_ops(ev, t0, t1):
    """GPU ops whose launch (runtime/driver call, matched by correlation id) lies inside the step."""
    launches = {e["args"]["correlation"]: e for e in ev
                if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver")
                and t0 <= e["ts"] <= t1 and "correlation" in e.get("args", {})}
    gpu = sorted([e for e in ev if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                  and e.get("args", {}).get("correlation") in launches], key=lambda e: e["ts"])
    return gpu, launches


def split(arg):
    path, step = arg.rsplit("@", 1)
    return path, step


def kernels(a_arg, b_arg, top=40):
    def load(arg):
        path, step = split(arg)
        ev = read_events(path)
        t0, t1 = step_window(ev, step)
        gpu, launches = step_gpu_ops(ev, t0, t1)
        per = collections.defaultdict(lambda: [0, 0.0])
        for e in gpu:
            name = re.sub(r"\(.*", "", e["name"])[:110]
            per[name][0] += 1
            per[name][1] += e["dur"]
        api = collections.Counter(e["name"] for e in launches.values())
        span = max(e["ts"] + e["dur"] for e in gpu) - min(e["ts"] for e in gpu)
        return per, api, t1 - t0, sum(e["dur"] for e in gpu), span
    a, b = load(a_arg), load(b_arg)
    print(f"step range us: A {a[2]:.0f}  B {b[2]:.0f};  GPU busy us: A {a[3]:.0f}  B {b[3]:.0f};  "
          f"GPU span us: A {a[4]:.0f}  B {b[4]:.0f}")
    print("launch APIs A", a[1].most_common(8))
    print("launch APIs B", b[1].most_common(8))
    names = sorted(set(a[0]) | set(b[0]), key=lambda n: -abs(a[0].get(n, [0, 0])[1] - b[0].get(n, [0, 0])[1]))
    print(f"{'A n':>6} {'A us':>10} {'B n':>6} {'B us':>10} {'A-B us':>9}  name")
    for n in names[:top]:
        x, y = a[0].get(n, [0, 0]), b[0].get(n, [0, 0])
        print(f"{x[0]:6d} {x[1]:10.0f} {y[0]:6d} {y[1]:10.0f} {x[1] - y[1]:9.0f}  {n}")
    print("GPU ops", sum(v[0] for v in a[0].values()), sum(v[0] for v in b[0].values()))


def gaps(*args, top=12):
    for arg in args:
        path, step = split(arg)
        ev = read_events(path)
        t0, t1 = step_window(ev, step)
        gpu, launches = step_gpu_ops(ev, t0, t1)
        cpu_ops = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")
                   and t0 <= e["ts"] <= t1]

        def enclosing(ts):
            names = [e["name"] for e in cpu_ops if e["ts"] <= ts <= e["ts"] + e["dur"]]
            return " > ".join(n[:40] for n in names[-4:])
        found = []
        end = gpu[0]["ts"] + gpu[0]["dur"]
        for e in gpu[1:]:
            if e["ts"] > end:
                found.append((e["ts"] - end, e))
            end = max(end, e["ts"] + e["dur"])
        print(f"{path}: idle {sum(g for g, _ in found):.0f} us in the step, {sum(g for g, _ in found if g > 20):.0f} us "
              f"in {sum(1 for g, _ in found if g > 20)} gaps over 20 us; first GPU op {gpu[0]['ts'] - t0:.0f} us after "
              f"the range starts")
        for g, e in sorted(found, key=lambda x: -x[0])[:top]:
            launch = launches[e["args"]["correlation"]]
            print(f"  {g:8.0f} us at +{e['ts'] - t0:9.0f}  before {re.sub(r'[(<].*', '', e['name'])[:50]:50s} "
                  f"launched in: {enclosing(launch['ts'])}")


def memory(*args, top=25):
    for arg in args:
        path, step = split(arg)
        ev = read_events(path)
        t0, t1 = step_window(ev, step)
        t1 += 200000  # the step's last frees land after the range closes (before the synchronise)
        mem = sorted([e for e in ev if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1],
                     key=lambda e: e["ts"])
        ops = sorted([e for e in ev if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")],
                     key=lambda e: e["ts"])
        starts = [o["ts"] for o in ops]

        def where(ts):
            i = bisect.bisect_right(starts, ts)
            inner = ann = None
            for o in reversed(ops[max(0, i - 400):i]):
                if o["ts"] <= ts <= o["ts"] + o["dur"]:
                    if inner is None and o["cat"] == "cpu_op":
                        inner = o["name"]
                    if ann is None and o["cat"] == "user_annotation" and not o["name"].startswith("hookstream:step"):
                        ann = o["name"]
            return inner, ann
        instep = [e for e in mem if t0 <= e["ts"] <= t1]
        peak = max(instep, key=lambda e: e["args"]["Total Allocated"])
        start = instep[0]["args"]["Total Allocated"] - instep[0]["args"]["Bytes"]
        live = {}
        for e in mem:
            if e["ts"] > peak["ts"]:
                break
            if e["args"]["Bytes"] > 0:
                live[e["args"]["Addr"]] = (e["args"]["Bytes"], e["ts"])
            else:
                live.pop(e["args"]["Addr"], None)
        inner, ann = where(peak["ts"])
        print(f"{path}: allocated at the step's start {start / 2**30:.3f} GiB, peak {peak['args']['Total Allocated'] / 2**30:.3f} GiB "
              f"at +{(peak['ts'] - t0) / 1000:.1f} ms in {inner} / {ann}")
        groups = collections.defaultdict(lambda: [0, 0])
        for b, ts in live.values():
            key = ("(earlier in the trace)", "") if ts < t0 else where(ts)
            groups[key][0] += b
            groups[key][1] += 1
        for k, (b, n) in sorted(groups.items(), key=lambda x: -x[1][0])[:top]:
            print(f"   {b / 2**20:9.1f} MiB {n:5d}  {k[0]} / {k[1]}")


def api(a_arg, b_arg, top=25):
    def load(arg):
        path, step = split(arg)
        ev = read_events(path)
        t0, t1 = step_window(ev, step)
        calls = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver")
                 and t0 <= e["ts"] <= t1]
        anns = sorted([e for e in ev if e.get("ph") == "X" and e.get("cat") == "user_annotation"
                       and t0 <= e["ts"] <= t1 and not e["name"].startswith("hookstream:step")],
                      key=lambda e: e["ts"])
        per = collections.defaultdict(lambda: [0, 0.0, 0.0])
        for e in calls:
            v = per[e["name"]]
            v[0] += 1
            v[1] += e["dur"]
            v[2] = max(v[2], e["dur"])
        return per, calls, anns, t0, t1 - t0
    a, b = load(a_arg), load(b_arg)
    print(f"step range us: A {a[4]:.0f}  B {b[4]:.0f};  host us in CUDA API calls: A {sum(v[1] for v in a[0].values()):.0f}"
          f"  B {sum(v[1] for v in b[0].values()):.0f}")
    names = sorted(set(a[0]) | set(b[0]), key=lambda n: -abs(a[0].get(n, [0, 0, 0])[1] - b[0].get(n, [0, 0, 0])[1]))
    print(f"{'A n':>7} {'A us':>10} {'A max':>9} {'B n':>7} {'B us':>10} {'B max':>9} {'A-B us':>9}  API")
    for n in names[:top]:
        x, y = a[0].get(n, [0, 0, 0]), b[0].get(n, [0, 0, 0])
        print(f"{x[0]:7d} {x[1]:10.0f} {x[2]:9.0f} {y[0]:7d} {y[1]:10.0f} {y[2]:9.0f} {x[1] - y[1]:9.0f}  {n}")
    starts = [e["ts"] for e in a[2]]

    def annotation(ts):
        i = bisect.bisect_right(starts, ts)
        for o in reversed(a[2][max(0, i - 200):i]):
            if o["ts"] <= ts <= o["ts"] + o["dur"]:
                return o["name"]
        return ""
    print(f"longest calls in A:")
    for e in sorted(a[1], key=lambda e: -e["dur"])[:top]:
        print(f"  {e['dur']:9.0f} us at +{(e['ts'] - a[3]) / 1000:9.1f} ms  {e['name']:28s} {annotation(e['ts'])[:70]}")


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("kernels", "gaps", "memory", "api"):
        sys.exit(__doc__)
    {"kernels": kernels, "gaps": gaps, "memory": memory, "api": api}[sys.argv[1]](*sys.argv[2:])
