# Measures what devices/*.yaml needs on the GPU it runs on (python3 tools/measure_device.py NAME writes $OUT/NAME.json):
# pinned and pageable host<->device copies, bf16 GEMM rates, device copy bandwidth, caching-allocator rounding.
import json, os, torch
torch.backends.cuda.matmul.allow_tf32 = False
dev = torch.device("cuda")
out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
       "total_memory": torch.cuda.get_device_properties(0).total_memory}
def timed(fn, reps):
    fn(); torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps): fn()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / reps / 1e3
n = 256 << 20
g = torch.empty(n, dtype=torch.uint8, device=dev)
pinned = torch.empty(n, dtype=torch.uint8).pin_memory()
pageable = torch.empty(n, dtype=torch.uint8); pageable.fill_(1)
out["pinned_h2d_gbps"] = n / timed(lambda: g.copy_(pinned, non_blocking=True), 20) / 1e9
out["pinned_d2h_gbps"] = n / timed(lambda: pinned.copy_(g, non_blocking=True), 20) / 1e9
out["pageable_h2d_gbps"] = n / timed(lambda: g.copy_(pageable), 10) / 1e9
out["pageable_d2h_gbps"] = n / timed(lambda: pageable.copy_(g), 10) / 1e9
big = torch.empty(1 << 30, dtype=torch.uint8, device=dev); big2 = torch.empty_like(big)
out["d2d_copy_gbps_read_plus_write"] = 2 * big.numel() / timed(lambda: big2.copy_(big), 20) / 1e9
for m, k, nn in [(8192, 8192, 8192), (16384, 4096, 14336), (16384, 2560, 9728)]:
    a = torch.randn(m, k, dtype=torch.bfloat16, device=dev); b = torch.randn(k, nn, dtype=torch.bfloat16, device=dev)
    t = timed(lambda: a @ b, 20)
    out[f"bf16_gemm_{m}x{k}x{nn}_tflops"] = 2 * m * k * nn / t / 1e12
# Caching allocator rounding, as the memory model assumes: 1 MiB + 1 byte reserves a 2 MiB-rounded block.
torch.cuda.empty_cache(); before = torch.cuda.memory_allocated()
x = torch.empty((1 << 20) + 1, dtype=torch.uint8, device=dev)
out["allocated_for_1MiB_plus_1"] = torch.cuda.memory_allocated() - before
y = torch.empty(513, dtype=torch.uint8, device=dev)
out["allocated_for_513B"] = torch.cuda.memory_allocated() - before - out["allocated_for_1MiB_plus_1"]
print(json.dumps(out, indent=1))
import sys
open(os.path.join(os.environ.get("OUT", "."), (sys.argv[1] if len(sys.argv) > 1 else "device") + ".json"), "w").write(json.dumps(out, indent=1))
