#!/usr/bin/env python3
"""Issue 22 item 5 (peak memory within 3%): what one decoder layer really holds on the GPU, by sequence length.

For the memory model's per-layer terms (sim/cost/memory_model.cc, LayerActivations) this measures with
torch.cuda.memory_allocated / max_memory_allocated, on one Llama-3.1-8B-shaped LoRA layer
(bench/python_offload_baseline.py's Layer, the decoder `hookstream run` mirrors op for op):

  sdpa      F.scaled_dot_product_attention(causal, enable_gqa) alone: what its forward saves beyond its
            output, and the transient peak of its backward above (inputs + saved + grad_out + dq/dk/dv).
  layer     the whole layer without checkpointing: saved bytes after forward; peak of forward and of
            backward above what was live before each.
  ckpt      the layer under non-reentrant checkpointing: the peak of its backward (recompute +
            backward) above what was live before it, as the model's recompute_workspace + transients.

Per-token figures are what the model needs (bytes / tokens). Writes $OUT/layer-memory.json (or
./layer-memory.json) and prints one line per reading.

    python3 tools/measure_layer_memory.py [--seqs 8192,32768,65536,131072]
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from python_offload_baseline import Layer  # noqa: E402

DEV = torch.device("cuda")
BF16 = torch.bfloat16
CFG = {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
       "head_dim": 128, "rms_norm_eps": 1e-5}


def mib(x):
    return x / 2**20


def reset():
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return torch.cuda.memory_allocated()


def rope(s):
    d = CFG["head_dim"]
    inv = 1.0 / (500000.0 ** (torch.arange(0, d, 2, device=DEV, dtype=torch.float32) / d))
    freqs = torch.outer(torch.arange(s, device=DEV, dtype=torch.float32), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(BF16), emb.sin().to(BF16)


def sdpa(seq):
    h, kvh, d = CFG["num_attention_heads"], CFG["num_key_value_heads"], CFG["head_dim"]
    q = torch.randn(1, h, seq, d, device=DEV, dtype=BF16, requires_grad=True)
    k = torch.randn(1, kvh, seq, d, device=DEV, dtype=BF16, requires_grad=True)
    v = torch.randn(1, kvh, seq, d, device=DEV, dtype=BF16, requires_grad=True)
    base = reset()
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    torch.cuda.synchronize()
    fwd_peak = torch.cuda.max_memory_allocated() - base
    after = torch.cuda.memory_allocated() - base  # output + saved (logsumexp, ...)
    g = torch.randn_like(out)
    before_bwd = reset()
    out.backward(g)
    torch.cuda.synchronize()
    bwd_peak = torch.cuda.max_memory_allocated() - before_bwd
    grads = sum(t.grad.numel() * t.grad.element_size() for t in (q, k, v))
    out_bytes = out.numel() * out.element_size()
    return {"seq": seq, "forward_peak": fwd_peak, "forward_kept": after, "output": out_bytes,
            "saved_beyond_output": after - out_bytes, "backward_peak": bwd_peak, "dqdkdv": grads,
            "backward_transient": bwd_peak - grads}


def layer(seq, checkpointed):
    torch.manual_seed(0)
    mod = Layer(CFG, 16, 32, BF16).to(DEV)
    for p in mod.parameters():
        p.requires_grad_(False)
    for name, p in mod.named_parameters():
        if "lora_" in name:
            p.requires_grad_(True)
    cos, sin = rope(seq)
    x = torch.randn(1, seq, CFG["hidden_size"], device=DEV, dtype=BF16, requires_grad=True)
    base = reset()
    y = checkpoint(mod, x, cos, sin, use_reentrant=False) if checkpointed else mod(x, cos, sin)
    torch.cuda.synchronize()
    fwd_peak = torch.cuda.max_memory_allocated() - base
    kept = torch.cuda.memory_allocated() - base
    out_bytes = y.numel() * y.element_size()
    g = torch.randn_like(y)
    before_bwd = reset()
    y.backward(g)
    torch.cuda.synchronize()
    bwd_peak = torch.cuda.max_memory_allocated() - before_bwd
    return {"seq": seq, "checkpointed": checkpointed, "forward_peak": fwd_peak, "kept_after_forward": kept,
            "output": out_bytes, "saved": kept - out_bytes, "backward_peak_above_live": bwd_peak,
            "trainable": [n for n, p in mod.named_parameters() if p.requires_grad][:3]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqs", default="8192,32768,65536,131072")
    args = ap.parse_args()
    seqs = [int(s) for s in args.seqs.split(",")]
    rows = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "sdpa": [], "layer": [], "ckpt": []}
    for s in seqs:
        r = sdpa(s)
        rows["sdpa"].append(r)
        print(f"sdpa {s}: fwd kept beyond output {mib(r['saved_beyond_output']):.1f} MiB, bwd transient "
              f"{mib(r['backward_transient']):.1f} MiB ({r['backward_transient'] / s:.0f} B/token)", flush=True)
    for s in seqs:
        for ck in (False, True):
            if not ck and s > 32768:
                continue  # the unsaved layer at 64K+ is the model's no-checkpoint case; keep the call short
            r = layer(s, ck)
            rows["ckpt" if ck else "layer"].append(r)
            print(f"layer {s} ckpt={ck}: saved {mib(r['saved']):.1f} MiB ({r['saved'] / s:.0f} B/token), fwd peak "
                  f"{mib(r['forward_peak']):.1f}, bwd peak above live {mib(r['backward_peak_above_live']):.1f} MiB "
                  f"({r['backward_peak_above_live'] / s:.0f} B/token)", flush=True)
    out = os.environ.get("OUT", ".")
    with open(os.path.join(out, "layer-memory.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
