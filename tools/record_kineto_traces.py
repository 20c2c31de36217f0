#!/usr/bin/env python3
"""Records real PyTorch-profiler (Kineto) traces on a GPU machine, for hookstream's importer tests
and the replay benchmark.

    python3 tools/record_kineto_traces.py OUTDIR [--bench-steps N]

Writes, with the PyTorch and CUDA versions in the file names' companion OUTDIR/versions.txt:
- offload-small.json.gz: three steps of an offload-like schedule on two streams: a D2H copy of an
  activation on a side stream after an event wait, an H2D reload into one of two device buffers, a
  wait_event back on the compute stream, a pageable (blocking) copy, a .item() host sync, a
  cudaStreamSynchronize and a cudaDeviceSynchronize. Kineto's cuda_sync records are enabled
  (_ExperimentalConfig(enable_cuda_sync_events=True), torch/profiler/profiler.py), so stream waits,
  event syncs and stream/context syncs appear as "cuda_sync" events. The counts hookstream's tests
  expect are derived from this script, not from hookstream's own output.
- mlp-train-large.json.gz: N training steps of an 8-layer MLP with AdamW (foreach=False: one kernel
  per parameter and op, the many-small-kernels shape of real fine-tuning traces), for the benchmark.
"""
import argparse
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile


def offload_small(path):
    dev = "cuda"
    torch.manual_seed(0)
    compute = torch.cuda.current_stream()
    copy = torch.cuda.Stream()
    x = torch.randn(1024, 1024, device=dev)
    pinned = torch.empty(1024, 1024, pin_memory=True)
    pageable = torch.empty(1024, 1024)
    reload = [torch.empty(1024, 1024, device=dev) for _ in range(2)]
    config = torch._C._profiler._ExperimentalConfig(enable_cuda_sync_events=True)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], experimental_config=config) as prof:
        for i in range(3):
            with torch.profiler.record_function(f"step {i}"):
                y = torch.relu(x @ x)                      # 2 kernels on the compute stream
                produced = torch.cuda.Event()
                produced.record(compute)                   # cudaEventRecord
                with torch.cuda.stream(copy):
                    copy.wait_event(produced)              # cudaStreamWaitEvent
                    pinned.copy_(y, non_blocking=True)     # D2H pinned, async
                    reload[i % 2].copy_(pinned, non_blocking=True)  # H2D pinned, async
                    reloaded = torch.cuda.Event()
                    reloaded.record(copy)
                compute.wait_event(reloaded)               # cudaStreamWaitEvent
                z = (reload[i % 2] * 2).sum()              # 2 kernels
                pageable.copy_(y)                          # D2H pageable: blocks the host
                _ = z.item()                               # D2H + stream sync
                copy.synchronize()                         # cudaStreamSynchronize
        torch.cuda.synchronize()                           # cudaDeviceSynchronize
    prof.export_chrome_trace(path)


def mlp_train_large(path, steps):
    dev = "cuda"
    torch.manual_seed(0)
    layers = []
    for _ in range(8):
        layers += [torch.nn.Linear(512, 512), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False, fused=False)
    data = torch.randn(64, 512, device=dev)
    for _ in range(3):  # warm-up outside the trace
        model(data).square().mean().backward()
        opt.step()
        opt.zero_grad()
    torch.cuda.synchronize()
    config = torch._C._profiler._ExperimentalConfig(enable_cuda_sync_events=True)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], experimental_config=config) as prof:
        for step in range(steps):
            with torch.profiler.record_function(f"ProfilerStep#{step}"):
                loss = model(data).square().mean()
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
    prof.export_chrome_trace(path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("outdir")
    parser.add_argument("--bench-steps", type=int, default=300)
    args = parser.parse_args()
    os.makedirs(args.outdir, exist_ok=True)
    with open(os.path.join(args.outdir, "versions.txt"), "w") as f:
        f.write(f"torch {torch.__version__} cuda {torch.version.cuda} device {torch.cuda.get_device_name()}\n")
    offload_small(os.path.join(args.outdir, "offload-small.json.gz"))
    mlp_train_large(os.path.join(args.outdir, "mlp-train-large.json.gz"), args.bench_steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
