#!/usr/bin/env python3
"""Benchmark (e) of issue 5: PyTorch's own Python path for offloaded checkpointing.

The same Llama-style decoder that `hookstream run` trains (RMSNorm, RoPE, grouped-query attention
through F.scaled_dot_product_attention, SwiGLU MLP, LoRA on all seven projections over a frozen bf16
base, chunked cross-entropy), built from the same HF config.json, trained with AdamW on synthetic
tokens, in one of three modes:

  none          no checkpointing                                   (reference for (a))
  checkpoint    torch.utils.checkpoint(use_reentrant=False)/layer  (reference for (b))
  save_on_cpu   the same inside torch.autograd.graph.save_on_cpu(pin_memory=True)   -> (e)
  torchtune_offload  the same checkpointing inside torchtune's OffloadActivations (its defaults:
                pinned memory, a second CUDA stream, max_fwd_stash_size 5, min_offload_size 1024),
                as torchtune's LoRA recipes run it: the decoder's forward under the context, the
                output head and loss outside it (get_act_offloading_ctx_manager wraps the head in
                a NoOpManager). axolotl's `activation_offloading: true` runs TRL's copy of this class.

Prints one JSON object: median step time, tokens/s and peak allocated memory. Used by
tools/gpu_check.sh and tools/gpu_runtime.sh; nothing is downloaded (torchtune_offload needs the
wheels of bench/anchor-wheels.txt in --wheels, fetched by `tools/gpu_build.sh --fetch`).
"""
import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import tempfile
import time
import types
import zipfile

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Lora(torch.nn.Module):
    """PEFT's LoRA Linear: y = base(x) + (alpha / r) * B(A(x)); A kaiming-uniform, B zeros, fp32 master
    weights. The adapter GEMMs run in the activations' dtype with the weights cast to it, as they do
    under HF Trainer's bf16 autocast (and as hookstream's runtime does), not on an fp32 copy of x."""

    def __init__(self, d_in, d_out, r, alpha, dtype):
        super().__init__()
        self.base = torch.nn.Linear(d_in, d_out, bias=False, dtype=dtype)
        self.base.weight.requires_grad_(False)
        self.lora_A = torch.nn.Linear(d_in, r, bias=False, dtype=torch.float32)
        self.lora_B = torch.nn.Linear(r, d_out, bias=False, dtype=torch.float32)
        torch.nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        torch.nn.init.zeros_(self.lora_B.weight)
        self.scale = alpha / r

    def forward(self, x):
        a = F.linear(x, self.lora_A.weight.to(x.dtype))
        return self.base(x) + F.linear(a, self.lora_B.weight.to(x.dtype)) * self.scale


class RMSNorm(torch.nn.Module):
    def __init__(self, d, eps, dtype):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d, dtype=dtype), requires_grad=False)
        self.eps = eps

    def forward(self, x):
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Layer(torch.nn.Module):
    def __init__(self, cfg, r, alpha, dtype):
        super().__init__()
        h, i = cfg["hidden_size"], cfg["intermediate_size"]
        self.heads = cfg["num_attention_heads"]
        self.kv_heads = cfg.get("num_key_value_heads", self.heads)
        self.head_dim = cfg.get("head_dim", h // self.heads)
        eps = cfg.get("rms_norm_eps", 1e-6)
        self.input_norm = RMSNorm(h, eps, dtype)
        self.q = Lora(h, self.heads * self.head_dim, r, alpha, dtype)
        self.k = Lora(h, self.kv_heads * self.head_dim, r, alpha, dtype)
        self.v = Lora(h, self.kv_heads * self.head_dim, r, alpha, dtype)
        self.o = Lora(self.heads * self.head_dim, h, r, alpha, dtype)
        self.post_norm = RMSNorm(h, eps, dtype)
        self.gate = Lora(h, i, r, alpha, dtype)
        self.up = Lora(h, i, r, alpha, dtype)
        self.down = Lora(i, h, r, alpha, dtype)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        n = self.input_norm(x)
        q = self.q(n).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(n).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v(n).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.heads)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, -1))
        n = self.post_norm(x)
        return x + self.down(F.silu(self.gate(n)) * self.up(n))


class Model(torch.nn.Module):
    def __init__(self, cfg, r, alpha, dtype):
        super().__init__()
        self.cfg = cfg
        self.embed = torch.nn.Embedding(cfg["vocab_size"], cfg["hidden_size"], dtype=dtype)
        self.embed.weight.requires_grad_(False)
        self.layers = torch.nn.ModuleList(Layer(cfg, r, alpha, dtype) for _ in range(cfg["num_hidden_layers"]))
        self.norm = RMSNorm(cfg["hidden_size"], cfg.get("rms_norm_eps", 1e-6), dtype)
        self.lm_head = torch.nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False, dtype=dtype)
        self.lm_head.weight.requires_grad_(False)

    def rope(self, s, device, dtype):
        d = self.layers[0].head_dim
        theta = self.cfg.get("rope_theta", 10000.0)
        inv = 1.0 / (theta ** (torch.arange(0, d, 2, device=device, dtype=torch.float32) / d))
        freqs = torch.outer(torch.arange(s, device=device, dtype=torch.float32), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def forward(self, ids, labels, mode, chunks, decoder_context=contextlib.nullcontext):
        with decoder_context():
            x = self.decoder(ids, mode)
        return self.loss(x, labels, chunks)

    def decoder(self, ids, mode):
        x = self.embed(ids)
        if mode != "none":
            x.requires_grad_(True)  # PEFT's enable_input_require_grads
        cos, sin = self.rope(ids.shape[1], ids.device, x.dtype)
        for layer in self.layers:
            if mode == "none":
                x = layer(x, cos, sin)
            else:
                x = checkpoint(layer, x, cos, sin, use_reentrant=False)
        return x

    def loss(self, x, labels, chunks):
        x = self.norm(x)
        # Chunked cross-entropy: each chunk's logits recomputed in backward (checkpointed), so the
        # full-vocabulary logits exist for one chunk at a time.
        flat, target = x.flatten(0, 1), labels.flatten()
        total = torch.zeros((), device=x.device, dtype=torch.float32)
        for part, t in zip(flat.chunk(chunks), target.chunk(chunks)):
            total = total + checkpoint(
                lambda p, tt: F.cross_entropy(self.lm_head(p).float(), tt, ignore_index=-100, reduction="sum"),
                part, t, use_reentrant=False)
        return total / (target != -100).sum()


def torchtune_offload_activations(wheels):
    """torchtune's OffloadActivations class, imported from its wheel (bench/anchor-wheels.txt).

    The wheels are unpacked into a temporary directory and only torchtune/training/
    _activation_offloading.py and what it imports (torchao's NF4Tensor, torchtune.modules,
    torchtune.utils) are loaded: the packages `torchtune` and `torchtune.training` are entered as
    bare namespaces, because their __init__ files import the dataset and config stack (datasets,
    omegaconf, tokenizers) that the GPU machines lack and that activation offloading never uses.
    The class itself is torchtune's code, unchanged."""
    files = sorted(f for f in os.listdir(wheels) if f.endswith(".whl") and f.split("-")[0] in ("torchtune", "torchao"))
    if len({f.split("-")[0] for f in files}) != 2:
        raise SystemExit(f"python_offload_baseline: torchtune and torchao wheels expected in {wheels}, found {files}")
    site = tempfile.mkdtemp(prefix="hookstream-anchor-")
    for f in files:
        with zipfile.ZipFile(os.path.join(wheels, f)) as z:
            z.extractall(site)
    sys.path.insert(0, site)
    for name in ("torchtune", "torchtune.training"):
        package = types.ModuleType(name)
        package.__path__ = [os.path.join(site, *name.split("."))]
        sys.modules[name] = package
    from torchtune.training._activation_offloading import OffloadActivations
    return OffloadActivations, files


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--mode", choices=["none", "checkpoint", "save_on_cpu", "torchtune_offload"], required=True)
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--lora-alpha", type=float, default=32)
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--trace", help="after the timed steps, one more step under torch.profiler (CPU and CUDA "
                    "activities), written as a Chrome trace to this file (for `hookstream replay`)")
    ap.add_argument("--wheels", default=".wheels", help="directory with the torchtune and torchao wheels (torchtune_offload)")
    args = ap.parse_args()
    anchor = {}
    if args.mode == "torchtune_offload":
        OffloadActivations, wheel_files = torchtune_offload_activations(args.wheels)
        anchor = {"wheels": wheel_files}
    with open(args.config) as f:
        cfg = json.load(f)
    cfg = cfg.get("text_config", cfg)
    torch.manual_seed(42)
    device = torch.device("cuda")
    with torch.device(device):
        model = Model(cfg, args.lora_r, args.lora_alpha, torch.bfloat16)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=5e-5, fused=True)
    times, peaks, losses, parts = [], [], [], []
    total = args.warmup + args.steps + (1 if args.trace else 0)
    profiler = None
    for step in range(total):
        if args.trace and step == total - 1:
            profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                          torch.profiler.ProfilerActivity.CUDA],
                                              profile_memory=True)
            profiler.__enter__()
        g = torch.Generator(device="cpu").manual_seed(1000 + step)
        ids = torch.randint(0, cfg["vocab_size"], (1, args.seq + 1), generator=g).to(device)
        inputs, labels = ids[:, :-1], ids[:, 1:]
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        # What the step starts with (weights, adapter, optimizer states, the allocator's and
        # cuBLAS's persistent blocks), to set against `hookstream run`'s "step start" part: the
        # difference of two peaks is then split into persistent memory and the step's own.
        start_bytes = torch.cuda.memory_allocated()
        start = time.perf_counter()
        step_range = torch.profiler.record_function(f"hookstream:step:{step + 1}") if profiler else None
        if step_range is not None:
            step_range.__enter__()
        if args.mode == "save_on_cpu":
            with torch.autograd.graph.save_on_cpu(pin_memory=True):
                loss = model(inputs, labels, args.mode, args.chunks)
        elif args.mode == "torchtune_offload":
            # One context per step, as the recipe holds one (it is re-entered each step; its
            # tracker is empty after every backward).
            if step == 0:
                offload = OffloadActivations()
            loss = model(inputs, labels, args.mode, args.chunks, decoder_context=lambda: offload)
        else:
            loss = model(inputs, labels, args.mode, args.chunks)
        forward_peak = torch.cuda.max_memory_allocated()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step_range is not None:
            step_range.__exit__(None, None, None)
        torch.cuda.synchronize()
        if profiler is not None:
            profiler.__exit__(None, None, None)
            profiler.export_chrome_trace(args.trace)
            break
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
            peaks.append(torch.cuda.max_memory_allocated())
            parts.append({"start_gib": start_bytes / 2**30, "forward_peak_gib": forward_peak / 2**30,
                          "step_peak_gib": peaks[-1] / 2**30})
            losses.append(loss.item())
    step_s = statistics.median(times)
    print(json.dumps({
        "mode": args.mode, "seq": args.seq, "steps": args.steps, "step_s": step_s,
        "step_s_all": times, "tokens_per_s": args.seq / step_s, "peak_gib": max(peaks) / 2**30,
        "memory_parts": parts[-1],
        "loss": losses, "torch": torch.__version__, "gpu": torch.cuda.get_device_name(), **anchor,
    }))


if __name__ == "__main__":
    sys.exit(main())
