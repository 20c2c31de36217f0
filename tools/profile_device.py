#!/usr/bin/env python3
"""Measures a device profile for the time model (sim/cost/device_profile.h, devices/profiles/README.md).

`python3 tools/profile_device.py NAME [--quick]` on the GPU machine writes $OUT/NAME.yaml (the profile,
in the format devices/profiles/*.yaml use) and $OUT/NAME.json (every raw reading). What it times, each
with CUDA events after warm-up, the median of several timed groups (METHOD.md: "Time properly"):

  gemm         bf16 GEMMs of the shapes a training step runs: every projection of the bundled presets
               (q, k/v, o, gate/up, down, lm_head) at token counts 1K..128K, in the three forms autograd
               runs for nn.Linear (forward x W^T, input gradient dY W, weight gradient dY^T X), and LoRA's
               thin GEMMs (rank 16 and 64). Stored as the slowdown against the roofline
               max(2mnk / peak, bytes / HBM): the time model interpolates that factor by shape.
  sdpa         F.scaled_dot_product_attention, causal, forward and backward, by sequence length and
               head layout (GQA through enable_gqa, as hookstream's runtime calls it), with the backend
               torch picks; the kernel names are recorded.
  elementwise  the eager kernels of a decoder layer, per element of the tensor they work on, forward
               and backward: RMSNorm (transformers' LlamaRMSNorm, float32 inside), RoPE (rotate_half),
               SiLU(gate) * up, residual add, LoRA's scale-and-add on a projection output, the chunked
               loss's float32 upcast + cross-entropy per logit, the embedding.
  copies       pinned host<->device and device-to-device copies.
  adamw        torch.optim.AdamW(fused=True) per parameter (float32 master weights).
  layer        one whole decoder layer (bench/python_offload_baseline.py's, LoRA r=16 on all seven
               projections), forward and backward: a check of the sum of the parts.

The model code is bench/python_offload_baseline.py's (the same decoder `hookstream run` mirrors), imported,
not copied.
"""
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from python_offload_baseline import Layer, RMSNorm, rotate_half  # noqa: E402

DEV = torch.device("cuda")
BF16 = torch.bfloat16
QUICK = "--quick" in sys.argv
# The bundled presets' text decoders (presets/*.json): hidden, intermediate, heads, kv heads, head_dim, vocab.
MODELS = {
    "Llama-3.1-8B": (4096, 14336, 32, 8, 128, 128256),
    "Llama-3.1-70B": (8192, 28672, 64, 8, 128, 128256),
    "Qwen2.5-7B": (3584, 18944, 28, 4, 128, 152064),
    "Qwen3-VL-4B": (2560, 9728, 32, 8, 128, 151936),
}
SDPA_SEQS = [1024, 2048, 4096, 8192, 16384, 32768]
ELEMENT_TOKENS = [8192, 32768]  # elementwise kernels: ns per element at the largest
LAYER_TOKENS = [8192, 32768]
EMBED_TOKENS = 16384
DEADLINE = time.time() + float(os.environ.get("PROFILE_SECONDS", "420"))


def timed(fn, target_s=0.03, groups=3, max_reps=50):
    """Seconds per call of fn: 2 warm-up calls, then `groups` groups of reps calls timed with events."""
    fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    fn()
    e.record()
    torch.cuda.synchronize()
    one = max(s.elapsed_time(e) / 1e3, 1e-6)
    reps = max(1, min(max_reps, int(target_s / one)))
    out = []
    for _ in range(groups if one < 0.5 else 1):
        s.record()
        for _ in range(reps):
            fn()
        e.record()
        torch.cuda.synchronize()
        out.append(s.elapsed_time(e) / 1e3 / reps)
    return statistics.median(out)


def timed_backward(forward, leaves, groups=3, reps=3):
    """Seconds of forward() (with grad) and of backward of its output, each timed with events. The
    leaves' .grad is cleared before each backward: accumulating into it would add a kernel that a
    model's activations (non-leaves) never run."""
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
    # forward() returns a tensor or a tuple of them (RoPE: q and k), each backpropagated with ones.
    out = forward()
    outs = out if isinstance(out, tuple) else (out,)
    grad = tuple(torch.ones_like(o) for o in outs)
    torch.autograd.backward(outs, grad)  # warm-up
    torch.cuda.synchronize()
    f, b = [], []
    for _ in range(groups * reps):
        for leaf in leaves:
            leaf.grad = None
        ev[0].record()
        out = forward()
        ev[1].record()
        torch.autograd.backward(out if isinstance(out, tuple) else (out,), grad)
        ev[2].record()
        torch.cuda.synchronize()
        f.append(ev[0].elapsed_time(ev[1]) / 1e3)
        b.append(ev[1].elapsed_time(ev[2]) / 1e3)
    return statistics.median(f), statistics.median(b)


def left():
    return DEADLINE - time.time()


def main():
    name = [a for a in sys.argv[1:] if not a.startswith("--")]
    name = name[0] if name else "device"
    props = torch.cuda.get_device_properties(0)
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    raw = {"device": torch.cuda.get_device_name(0), "nvidia_smi": smi, "torch": torch.__version__,
           "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(), "sms": props.multi_processor_count,
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "gemm": [], "sdpa": [],
           "elementwise": {}, "copies": {}, "adamw": [], "layer": []}
    print(json.dumps({k: raw[k] for k in ("device", "nvidia_smi", "torch", "cuda", "cudnn", "date")}), flush=True)

    # --- GEMMs -------------------------------------------------------------------------------------
    t0 = time.time()
    shapes = {}  # (n, k) -> token counts
    big_m = [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]
    few_m = [1024, 4096, 16384, 65536]
    for model, (h, inter, heads, kv, hd, vocab) in MODELS.items():
        ms = big_m if model == "Llama-3.1-8B" else few_m
        q, kvw = heads * hd, kv * hd
        for nk in [(q, h), (kvw, h), (h, q), (inter, h), (h, inter)]:
            shapes.setdefault(nk, set()).update(ms)
        # lm_head of the chunked loss: one chunk of tokens at a time.
        shapes.setdefault((vocab, h), set()).update([512, 1024, 2048, 4096, 8192])
        for r in (16, 64):
            for width in {h, q, inter}:
                shapes.setdefault((r, width), set()).update(ms)   # LoRA A: [M, width] -> [M, r]
            for width in {h, q, kvw, inter}:
                shapes.setdefault((width, r), set()).update(ms)   # LoRA B: [M, r] -> [M, width]
    if QUICK:
        shapes = {nk: {1024, 8192} for nk in list(shapes)[:6]}
    for (n, k), ms in sorted(shapes.items()):
        for m in sorted(ms):
            if left() < 200:
                break
            x = torch.randn(m, k, dtype=BF16, device=DEV)
            w = torch.randn(n, k, dtype=BF16, device=DEV)
            dy = torch.randn(m, n, dtype=BF16, device=DEV)
            for variant, fn in (("fwd", lambda: F.linear(x, w)), ("dgrad", lambda: torch.mm(dy, w)),
                                ("wgrad", lambda: torch.mm(dy.t(), x))):
                t = timed(fn)
                raw["gemm"].append({"m": m, "n": n, "k": k, "variant": variant, "s": t, "tflops": 2 * m * n * k / t / 1e12})
            del x, w, dy
    torch.cuda.empty_cache()
    print(f"gemm: {len(raw['gemm'])} readings in {time.time() - t0:.1f} s", flush=True)

    # --- SDPA ----------------------------------------------------------------------------------------
    t0 = time.time()
    layouts = sorted({(heads, kv, hd) for (_, _, heads, kv, hd, _) in MODELS.values()})
    for heads, kv, hd in layouts:
        long = (heads, kv, hd) == (32, 8, 128)
        for seq in SDPA_SEQS + ([65536, 131072, 262144] if long else []):
            if QUICK and seq > 8192:
                continue
            if left() < 120 - (seq // 1024):
                break
            qt = torch.randn(1, seq, heads, hd, dtype=BF16, device=DEV).transpose(1, 2).requires_grad_(True)
            kt = torch.randn(1, seq, kv, hd, dtype=BF16, device=DEV).transpose(1, 2).requires_grad_(True)
            vt = torch.randn(1, seq, kv, hd, dtype=BF16, device=DEV).transpose(1, 2).requires_grad_(True)
            fwd = lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=kv != heads)
            # Past 64K one call takes 0.05-2.5 s: 3 timed calls (2 past 128K) after the warm-up.
            f, b = timed_backward(fwd, [qt, kt, vt], groups=1 if seq >= 65536 else 3, reps=(2 if seq > 131072 else 3))
            flops = 4.0 * seq * seq * heads * hd / 2  # QK^T and PV, causal half
            row = {"seq": seq, "heads": heads, "kv_heads": kv, "head_dim": hd, "forward_s": f, "backward_s": b,
                   "forward_tflops": flops / f / 1e12, "backward_tflops": 2.5 * flops / b / 1e12}
            if seq == 8192 and DEV.type == "cuda":  # which backend torch picked: its kernels' names
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                    out = fwd()
                    out.backward(torch.ones_like(out))
                    torch.cuda.synchronize()
                row["kernels"] = sorted({e.name[:90] for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})
            raw["sdpa"].append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "kernels"}), flush=True)
            del qt, kt, vt
    torch.cuda.empty_cache()
    print(f"sdpa: {time.time() - t0:.1f} s", flush=True)

    # --- elementwise -------------------------------------------------------------------------------------
    t0 = time.time()
    ew = raw["elementwise"]
    h, inter, heads, kv, hd, vocab = MODELS["Llama-3.1-8B"]
    for tokens in ELEMENT_TOKENS[:1] if QUICK else ELEMENT_TOKENS:
        x = torch.randn(1, tokens, h, dtype=BF16, device=DEV, requires_grad=True)
        norm = RMSNorm(h, 1e-5, BF16).to(DEV)
        # The norm weight frozen, as under LoRA (a trainable one adds its gradient's reduction).
        f, b = timed_backward(lambda: norm(x), [x])
        ew.setdefault("rmsnorm", []).append({"elements": tokens * h, "forward_s": f, "backward_s": b})
        pos = torch.arange(tokens, device=DEV, dtype=torch.float32)
        inv = 1.0 / (500000.0 ** (torch.arange(0, hd, 2, device=DEV, dtype=torch.float32) / hd))
        emb = torch.cat((torch.outer(pos, inv),) * 2, dim=-1)
        cos, sin = emb.cos().to(BF16), emb.sin().to(BF16)
        qt = torch.randn(1, tokens, heads, hd, dtype=BF16, device=DEV).transpose(1, 2).requires_grad_(True)
        kt = torch.randn(1, tokens, kv, hd, dtype=BF16, device=DEV).transpose(1, 2).requires_grad_(True)
        def rope():
            q2 = qt * cos + rotate_half(qt) * sin
            k2 = kt * cos + rotate_half(kt) * sin
            return q2, k2
        f, b = timed_backward(rope, [qt, kt])
        ew.setdefault("rope", []).append({"elements": tokens * (heads + kv) * hd, "forward_s": f, "backward_s": b})
        g = torch.randn(1, tokens, inter, dtype=BF16, device=DEV, requires_grad=True)
        u = torch.randn(1, tokens, inter, dtype=BF16, device=DEV, requires_grad=True)
        f, b = timed_backward(lambda: F.silu(g) * u, [g, u])
        ew.setdefault("silu_mul", []).append({"elements": tokens * inter, "forward_s": f, "backward_s": b})
        y = torch.randn(1, tokens, h, dtype=BF16, device=DEV, requires_grad=True)
        # A residual add's backward passes the gradient through; the add it costs is where the branch
        # gradients meet, the same kernel as the forward's: [forward, forward].
        with torch.no_grad():
            f = timed(lambda: x + y)
        ew.setdefault("residual", []).append({"elements": tokens * h, "forward_s": f, "backward_s": f})
        # LoRA's base(x) + B(A(x)) * scale on one projection output of width `inter`: a mul and an add.
        f, b = timed_backward(lambda: g + u * 2.0, [g, u])
        ew.setdefault("lora_scale_add", []).append({"elements": tokens * inter, "forward_s": f, "backward_s": b})
        del x, y, g, u, qt, kt
        torch.cuda.empty_cache()
    for vocab in sorted({m[5] for m in MODELS.values()}):
        chunk = 1024
        logits = torch.randn(chunk, vocab, dtype=BF16, device=DEV, requires_grad=True)
        labels = torch.randint(0, vocab, (chunk,), device=DEV)
        f, b = timed_backward(lambda: F.cross_entropy(logits.float(), labels, reduction="sum"), [logits])
        ew.setdefault("cross_entropy", []).append({"elements": chunk * vocab, "forward_s": f, "backward_s": b})
        del logits
    table = torch.randn(vocab, h, dtype=BF16, device=DEV, requires_grad=True)
    ids = torch.randint(0, vocab, (1, EMBED_TOKENS), device=DEV)
    f, b = timed_backward(lambda: F.embedding(ids, table), [table])
    ew["embedding"] = [{"elements": EMBED_TOKENS * h, "forward_s": f, "backward_s": b}]
    del table
    torch.cuda.empty_cache()
    print(f"elementwise: {time.time() - t0:.1f} s " + json.dumps(ew), flush=True)

    # --- copies and AdamW ----------------------------------------------------------------------------------
    n = 256 << 20
    gbuf = torch.empty(n, dtype=torch.uint8, device=DEV)
    pinned = torch.empty(n, dtype=torch.uint8).pin_memory()
    raw["copies"]["pinned_h2d_gbps"] = n / timed(lambda: gbuf.copy_(pinned, non_blocking=True)) / 1e9
    raw["copies"]["pinned_d2h_gbps"] = n / timed(lambda: pinned.copy_(gbuf, non_blocking=True)) / 1e9
    big = torch.empty(1 << 30, dtype=torch.uint8, device=DEV)
    big2 = torch.empty_like(big)
    raw["copies"]["d2d_gbps_read_plus_write"] = 2 * big.numel() / timed(lambda: big2.copy_(big)) / 1e9
    del gbuf, pinned, big, big2
    for count in (42_000_000, 400_000_000):
        params = [torch.nn.Parameter(torch.randn(count // 64, device=DEV)) for _ in range(64)]
        for p in params:
            p.grad = torch.randn_like(p)
        opt = torch.optim.AdamW(params, lr=1e-4, fused=True)
        raw["adamw"].append({"parameters": count, "s": timed(opt.step)})
        del params, opt
    torch.cuda.empty_cache()
    print("copies " + json.dumps(raw["copies"]) + " adamw " + json.dumps(raw["adamw"]), flush=True)

    # --- one whole layer -----------------------------------------------------------------------------------
    cfg = {"hidden_size": h, "intermediate_size": inter, "num_attention_heads": heads, "num_key_value_heads": kv,
           "rms_norm_eps": 1e-5}
    layer = Layer(cfg, 16, 32, BF16).to(DEV)
    for tokens in LAYER_TOKENS[:1] if QUICK else LAYER_TOKENS:
        if left() < 20:
            break
        x = torch.randn(1, tokens, h, dtype=BF16, device=DEV, requires_grad=True)
        pos = torch.arange(tokens, device=DEV, dtype=torch.float32)
        inv = 1.0 / (500000.0 ** (torch.arange(0, hd, 2, device=DEV, dtype=torch.float32) / hd))
        emb = torch.cat((torch.outer(pos, inv),) * 2, dim=-1)
        cos, sin = emb.cos().to(BF16), emb.sin().to(BF16)
        f, b = timed_backward(lambda: layer(x, cos, sin), [x] + [p for p in layer.parameters() if p.requires_grad], groups=1, reps=3)
        raw["layer"].append({"model": "Llama-3.1-8B", "lora_r": 16, "tokens": tokens, "forward_s": f, "backward_s": b})
        print(json.dumps(raw["layer"][-1]), flush=True)

    out_dir = os.environ.get("OUT", ".")
    with open(os.path.join(out_dir, name + ".json"), "w") as fh:
        json.dump(raw, fh, indent=1)
    with open(os.path.join(out_dir, name + ".yaml"), "w") as fh:
        fh.write(profile_yaml(name, raw))
    print("wrote", name, flush=True)


def roofline_s(m, n, k, peak_tflops, hbm_gbps):
    return max(2.0 * m * n * k / (peak_tflops * 1e12), 2.0 * (m * k + n * k + m * n) / (hbm_gbps * 1e9))


def profile_yaml(name, raw):
    """The profile as devices/profiles/*.yaml hold it (devices/profiles/README.md). The GEMM rows keep
    their measured TFLOP/s; the reader computes the slowdown against the device file's roofline."""
    lines = [f"# Device profile of {raw['device']} ({raw['nvidia_smi']}), torch {raw['torch']}, CUDA {raw['cuda']},",
             f"# cuDNN {raw['cudnn']}, measured {raw['date']} by tools/profile_device.py.",
             f"device: {name}", "gemm:  # [m, n, k, variant, TFLOP/s]: y[m,n] = x[m,k] W[n,k]^T (fwd), dY[m,n] W (dgrad), dY^T X (wgrad)"]
    for r in raw["gemm"]:
        lines.append(f"  - [{r['m']}, {r['n']}, {r['k']}, {r['variant']}, {r['tflops']:.5g}]")
    lines.append("sdpa:  # [seq, heads, kv_heads, head_dim, forward TFLOP/s, backward TFLOP/s], causal, batch 1")
    for r in raw["sdpa"]:
        lines.append(f"  - [{r['seq']}, {r['heads']}, {r['kv_heads']}, {r['head_dim']}, {r['forward_tflops']:.5g}, {r['backward_tflops']:.5g}]")
    kernels = next((r.get("kernels") for r in raw["sdpa"] if r.get("kernels")), [])
    lines.append("# sdpa kernels at 8192: " + "; ".join(kernels)[:600])
    lines.append("elementwise:  # ns per element of the tensor the kernel works on, [forward, backward], largest size measured")
    for what, rows in raw["elementwise"].items():
        r = max(rows, key=lambda r: r["elements"])
        lines.append(f"  {what}: [{r['forward_s'] / r['elements'] * 1e9:.6f}, {r['backward_s'] / r['elements'] * 1e9:.6f}]")
    c = raw["copies"]
    lines.append(f"copies: {{pinned_h2d_gbps: {c['pinned_h2d_gbps']:.2f}, pinned_d2h_gbps: {c['pinned_d2h_gbps']:.2f}, "
                 f"d2d_gbps_read_plus_write: {c['d2d_gbps_read_plus_write']:.1f}}}")
    a = max(raw["adamw"], key=lambda r: r["parameters"])
    lines.append(f"adamw_ns_per_parameter: {a['s'] / a['parameters'] * 1e9:.6f}  # fused, float32")
    return "\n".join(lines) + "\n"


def merge_runs(paths):
    """The faster reading of each GEMM and SDPA measurement over several runs of this script (clock dips
    and other work only ever slow a kernel down): the first run's raw JSON with each of those times
    replaced by the minimum. Elementwise readings stay the first run's (give the run of the current
    script first: what its elementwise kernels run changed between runs)."""
    runs = [json.load(open(p)) for p in paths]
    merged = runs[0]
    for other in runs[1:]:
        by_shape = {(r["m"], r["n"], r["k"], r["variant"]): r for r in other["gemm"]}
        for r in merged["gemm"]:
            o = by_shape.get((r["m"], r["n"], r["k"], r["variant"]))
            if o and o["s"] < r["s"]:
                r.update(s=o["s"], tflops=o["tflops"])
        by_layout = {(r["seq"], r["heads"], r["kv_heads"], r["head_dim"]): r for r in other["sdpa"]}
        for r in merged["sdpa"]:
            o = by_layout.get((r["seq"], r["heads"], r["kv_heads"], r["head_dim"]))
            for k in ("forward", "backward"):
                if o and o[k + "_s"] < r[k + "_s"]:
                    r[k + "_s"], r[k + "_tflops"] = o[k + "_s"], o[k + "_tflops"]
    if len(runs) > 1:
        merged["date"] = " and ".join(sorted({r["date"] for r in runs})) + f" ({len(runs)} runs, the faster reading of each)"
    return merged


if __name__ == "__main__":
    if sys.argv[1:2] == ["--merge"]:  # --merge NAME RUN.json RUN.json ...: the profile of several runs
        sys.stdout.write(profile_yaml(sys.argv[2], merge_runs(sys.argv[3:])))
    else:
        main()
