#!/usr/bin/env python3
"""Issue 22, item 5: two costs a long-context first step pays that a device profile's short
microbenchmarks do not show.

1. Pinning host memory. `hookstream run` allocates each pinned offload slot at its first write, in
   the first step (runtime/activation_offload.cc), with cudaHostAlloc (exact slots,
   runtime/cuda_stream_backend.cc) or PyTorch's pinned allocator (which also calls cudaHostAlloc).
   Timed here for sizes from 256 MiB to 8 GiB, a fresh allocation each (as the first step does).
2. Sustained power. Under long-context load the SM clock falls below the 1980 MHz at which the
   profile's bursts ran (bench/RESULTS.md, sessions 23-24: software power cap, 1515-1554 MHz). Here a
   causal flash attention of one long-context layer shape (32 query heads, 8 KV heads, head dim 128)
   and an 8192^3 bf16 GEMM each run back to back for --seconds; TFLOP/s per second of wall time with
   the SM clock, power and throttle reasons sampled through NVML.

Writes one JSON object to --out.
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F

try:
    import pynvml
except ImportError:  # nvidia-ml-py is in the GPU machines' image; the series then lacks clocks
    pynvml = None


def pin_rates():
    rows = []
    for mib in (256, 1024, 4096, 8192):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        x = torch.empty(mib << 20, dtype=torch.uint8, pin_memory=True)
        dt = time.perf_counter() - t0
        rows.append({"mib": mib, "seconds": dt, "gib_per_s": mib / 1024 / dt})
        del x
        torch.cuda.empty_cache()
    return rows


def sustained(name, fn, flops, seconds, handle):
    series = []
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        n = 0
        while time.perf_counter() - t0 < 1.0:
            fn()
            n += 1
            if n % 4 == 0:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        row = {"t": round(time.perf_counter() - start, 2), "tflops": n * flops / dt / 1e12}
        if handle is not None:
            row["sm_mhz"] = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
            row["watts"] = pynvml.nvmlDeviceGetPowerUsage(handle) / 1000
            row["throttle"] = hex(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))
        series.append(row)
    first = series[0]["tflops"]
    tail = [r["tflops"] for r in series[len(series) // 2:]]
    return {"name": name, "first_second_tflops": first, "second_half_tflops": sum(tail) / len(tail),
            "ratio": sum(tail) / len(tail) / first, "series": series}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--seq", type=int, default=65536)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    handle = None
    if pynvml is not None:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "pin": pin_rates()}
    s = args.seq
    q = torch.randn(1, 32, s, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 8, s, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, 8, s, 128, device="cuda", dtype=torch.bfloat16)
    # Causal attention: half of the 4 * s^2 * d multiply-adds per head.
    attn_flops = 4 * s * s * 128 * 32 / 2
    out["attention"] = sustained(
        f"sdpa causal flash s={s}", lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
        attn_flops, args.seconds, handle)
    del q, k, v
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    out["gemm"] = sustained("bf16 gemm 8192^3", lambda: a @ b, 2 * 8192 ** 3, args.seconds, handle)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    for key in ("attention", "gemm"):
        r = out[key]
        print(f"{r['name']}: first second {r['first_second_tflops']:.0f} TFLOP/s, second half "
              f"{r['second_half_tflops']:.0f} ({r['ratio']:.3f}x); clocks {[x.get('sm_mhz') for x in r['series']][::5]}")
    for r in out["pin"]:
        print(f"pin {r['mib']} MiB: {r['seconds']:.3f} s, {r['gib_per_s']:.2f} GiB/s")


if __name__ == "__main__":
    main()
