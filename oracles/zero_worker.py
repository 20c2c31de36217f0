"""The DeepSpeed ZeRO oracle: real DeepSpeed (the pinned 0.19.8 of oracles/requirements.txt) on CPU,
Gloo on 127.0.0.1, one process per rank, running the plan's tiny model (TinyModel from
oracles/ddp_worker.py, built from the structure.json the C++ side writes,
runtime/ddp_structure_json.cc) under deepspeed.initialize with the plan's zero_optimization.

Usage: zero_worker.py [--collective-timeout-ms N] DIR [DIR ...]
Each DIR holds a structure.json; for each, this process forks world_size ranks (a zygote: importing
torch + deepspeed costs ~10-30 s on the CI's 2 cores, a fork costs nothing) and each rank writes
DIR/zero-rank-R.json: the first error (type, exact text, iteration, micro-step) or none, the
reductions per bucket (which parameters each reduce_ipg_grads call reduced), the hook firings
with their graph tasks, and per iteration the parameters whose reduced gradient differs from the
single-process reference (the mean over ranks of each rank's local gradient).

What runs is DeepSpeed's own: deepspeed.initialize, DeepSpeedZeroOptimizer (stage 1/2) with its
gradient hooks, ipg buckets, params_already_reduced, ds_grad_is_ready gate, the
BackwardHookStateManager epilogue, engine.backward / engine.step. One thing is changed, outside
the gradient path, because of the CPU accelerator (docs/engines/deepspeed-zero.md):
deepspeed.comm.torch.build_shm_op is replaced by `return None`. The CPU accelerator JIT-compiles a
shared-memory all-reduce (deepspeed/ops/csrc/cpu/comm/shm.cpp) in init_distributed, which takes
minutes on 2 cores and waits forever on the file lock a killed build leaves behind; without it the
collectives go through torch.distributed over Gloo. The optimizer is torch.optim.SGD with
zero_allow_untested_optimizer and zero_force_ds_cpu_optimizer: false (DeepSpeed's CPUAdam is another
C++ extension to JIT-build).
"""
import datetime
import json
import os
import sys
import traceback

os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_worker import Recorder, TinyModel, error_text, make_batch  # noqa: E402
from rank_processes import free_port, run_ranks  # noqa: E402


def import_deepspeed():
    import deepspeed  # noqa: F401
    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None
    # Imported once here, in the zygote: stage_1_and_2.average_tensor and is_zero_supported_optimizer
    # import it on every call, and the first import takes ~20 s on 2 cores.
    import deepspeed.runtime.zero.muon.muon_optimizer  # noqa: F401
    return deepspeed


def ds_config(s):
    d = s["deepspeed"]
    zero = {"stage": d["stage"]}
    for key in ("overlap_comm", "contiguous_gradients", "reduce_bucket_size"):
        if d.get(key) is not None:
            zero[key] = d[key]
    if d["stage"] == 3:
        zero["stage3_param_persistence_threshold"] = d["param_persistence_threshold"]
        # The fetch coordinator's sizes (absent from older specs: DeepSpeed's defaults).
        for key in ("prefetch_bucket_size", "max_live_parameters", "max_reuse_distance"):
            if d.get(key) is not None:
                zero["stage3_" + key] = d[key]
    return {
        "train_micro_batch_size_per_gpu": s["micro_batch_size"],
        "gradient_accumulation_steps": s["gradient_accumulation_steps"],
        "zero_optimization": zero,
        "zero_allow_untested_optimizer": True,
        "zero_force_ds_cpu_optimizer": False,
        "steps_per_print": 1 << 30,
    }


def reference_grads(s, seed):
    """Mean over ranks of each rank's local gradient of every iteration (plain autograd, no
    DeepSpeed): what a correct data-parallel engine hands the optimizer. Parameters are not updated
    between iterations here, so only iteration 0 is compared (later ones depend on the optimizer)."""
    model = TinyModel(s, seed)
    model.recorder = Recorder([])
    params = model.ddp_parameters()
    positions = {(q["rank"], q["iteration"], q["micro_step"]): q for q in s["positions"]}
    total = [torch.zeros_like(p) for p in params]
    for rank in range(s["world_size"]):
        for p in params:
            p.grad = None
        for micro in range(s["gradient_accumulation_steps"]):
            step = positions[(rank, 0, micro)]
            input_ids, labels = make_batch(s, step, seed)
            model(input_ids, labels, step).backward()
        for t, p in zip(total, params):
            if p.grad is not None:
                t += p.grad
    return [t / s["world_size"] for t in total]


class Z3Module(nn.Module):
    """A module that owns parameters (a Linear, an RMSNorm, the embedding, a LoRA A/B) or the MLP
    block, called as transformers calls it: `module(x)` runs its forward hooks, which under ZeRO-3
    are DeepSpeed's fetch before and release after (deepspeed/runtime/zero/parameter_offload.py
    DeepSpeedZeRoOffload._register_deepspeed_module: _pre_forward_module_hook ->
    pre_sub_module_forward_function -> fetch_sub_module; _post_forward_module_hook ->
    release_sub_module; the pre/post backward Functions around its outputs/inputs). What it computes
    is TinyModel's own code (fn), so there is one forward for every oracle."""

    def forward(self, x, fn):
        return fn(x)


class Z3Mlp(Z3Module):
    """The MLP block's class: what set_z3_leaf_modules names when the plan makes MLPs ZeRO-3 leaf
    modules (as Mixtral/Qwen-MoE trainers do with their sparse MoE block class)."""


class Zero3Model(TinyModel):
    """TinyModel whose parameter uses run inside their module's call (TinyModel.apply_module), so
    ZeRO-3's per-module gather/partition happens exactly where a transformers model's would."""

    def __init__(self, s, seed):
        super().__init__(s, seed)
        owners = {self.owner(i) for i in range(len(s["parameters"]))}
        for path in sorted(owners):
            self.get_submodule(path).__class__ = Z3Module
        for layer in s["layers"]:
            self.get_submodule(layer["path"] + ".mlp").__class__ = Z3Mlp

    def apply_module(self, path, x, fn):
        return self.get_submodule(path)(x, fn)


def run_rank(deepspeed, s, rank, port, timeout_ms, seed, out):
    world = s["world_size"]
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    report = {"rank": rank, "world_size": world, "deepspeed_version": deepspeed.__version__,
              "torch_version": torch.__version__, "error": None, "iterations": [], "ran": "deepspeed.initialize"}
    for q in s["positions"]:
        q["skipped_set"] = set(q["skipped"])
    stage = s["deepspeed"]["stage"]
    reference = reference_grads(s, seed)
    model = Zero3Model(s, seed) if stage == 3 else TinyModel(s, seed)
    if stage == 3 and s["deepspeed"].get("leaf_modules"):
        from deepspeed.utils import set_z3_leaf_modules
        set_z3_leaf_modules(model, [Z3Mlp])
    recorder = Recorder(model.ddp_parameters())
    model.recorder = recorder
    names = [s["parameters"][i]["name"] for i in s["ddp_parameters"]]
    deepspeed.init_distributed(dist_backend="gloo", timeout=datetime.timedelta(milliseconds=timeout_ms),
                               verbose=False)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(trainable, lr=1e-3)
    engine, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=ds_config(s))
    report["optimizer"] = type(optimizer).__name__
    reductions = []
    name_of = {id(p): n for p, n in zip(model.ddp_parameters(), names)}
    if hasattr(optimizer, "reduce_ipg_grads"):
        # Observation only: which parameters each bucket reduction carries (stage 1/2).
        original = optimizer.reduce_ipg_grads

        def observed(*args, **kwargs):
            for bucket in optimizer.ipg_buckets.values():
                if bucket.params:
                    reductions.append([name_of.get(id(optimizer.bit16_groups[g][i]), "?") for g, i, _ in bucket.params])
            return original(*args, **kwargs)

        optimizer.reduce_ipg_grads = observed
    z3_reduce = "_DeepSpeedZeroOptimizer_Stage3__reduce_and_partition_ipg_grads"
    if hasattr(optimizer, z3_reduce):
        # Observation only (stage 3): the parameters of each bucket reduce-scatter.
        original_z3 = getattr(optimizer, z3_reduce)

        def observed_z3(dtype):
            bucket = optimizer.ipg_buckets[dtype]
            if bucket.params:
                reductions.append([name_of.get(id(p), "?") for p in bucket.params])
            return original_z3(dtype)

        setattr(optimizer, z3_reduce, observed_z3)
    positions = {(q["rank"], q["iteration"], q["micro_step"]): q for q in s["positions"]}
    steps = s["gradient_accumulation_steps"]
    for it in range(s["iterations"]):
        record = {"iteration": it, "completed": False, "micro_steps": []}
        report["iterations"].append(record)
        phase, micro = "forward", 0
        try:
            for micro in range(steps):
                step = positions[(rank, it, micro)]
                recorder.micro_step = micro
                phase = "forward"
                input_ids, labels = make_batch(s, step, seed)
                loss = engine(input_ids, labels, step)
                phase = "backward"
                del reductions[:]
                # TinyModel already divides by gradient_accumulation_steps.
                engine.backward(recorder.outer(loss), scale_wrt_gas=False)
                record["micro_steps"].append({"micro_step": micro, "hooks": recorder.take(),
                                              "reductions": list(reductions)})
                if micro == steps - 1 and it == 0 and reference is not None:
                    from deepspeed.utils import safe_get_full_grad
                    wrong = []
                    for n, p, r in zip(names, model.ddp_parameters(), reference):
                        if not p.requires_grad:
                            continue
                        g = safe_get_full_grad(p)
                        got = torch.zeros_like(r) if g is None else g.detach().to(r.dtype).view_as(r)
                        if not torch.allclose(got, r, rtol=1e-3, atol=1e-5):
                            ratio = (got.norm() / r.norm()).item() if r.norm() > 0 else float("inf")
                            wrong.append({"parameter": n, "norm_ratio": round(ratio, 4)})
                    record["wrong_gradients"] = wrong
                phase = "step"
                engine.step()
            record["completed"] = True
        except BaseException as e:  # noqa: BLE001 - every error the plan provokes is an observation
            report["error"] = {"type": type(e).__name__, "text": error_text(e), "phase": phase, "iteration": it,
                               "micro_step": micro, "traceback_tail": traceback.format_exc().splitlines()[-40:]}
            record["micro_steps"].append({"micro_step": micro, "hooks": recorder.take(),
                                          "reductions": list(reductions)})
            break
    with open(os.path.join(out, f"zero-rank-{rank}.json"), "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")


def main(argv):
    timeout_ms = 4000
    seed = 1234
    dirs = []
    i = 0
    while i < len(argv):
        if argv[i] == "--collective-timeout-ms":
            timeout_ms = int(argv[i + 1])
            i += 2
        else:
            dirs.append(argv[i])
            i += 1
    deepspeed = import_deepspeed()
    for out in dirs:
        with open(os.path.join(out, "structure.json")) as f:
            s = json.load(f)
        port = free_port()
        killed = run_ranks(s["world_size"], lambda rank: os.path.join(out, f"zero-rank-{rank}.log"),
                           lambda rank: run_rank(deepspeed, s, rank, port, timeout_ms, seed, out),
                           timeout_ms / 1000 * 4 + 120)
        for rank in range(s["world_size"]):
            path = os.path.join(out, f"zero-rank-{rank}.json")
            if os.path.exists(path):
                continue
            # Gloo aborts the process (std::terminate, no Python exception) when a peer sends a
            # buffer of another size: "Received data size doesn't match expected size. Is there a
            # distributed collective mismatch in your code?". Its text is the log's what() line.
            text = "no result before the oracle's deadline"
            kind = "killed"
            with open(os.path.join(out, f"zero-rank-{rank}.log"), errors="replace") as log:
                lines = [line.strip() for line in log if line.strip()]
            for line in lines:
                if "what():" in line:
                    text, kind = line.split("what():", 1)[1].strip(), "terminated"
            if kind == "killed" and rank not in killed and lines:
                text, kind = lines[-1], "worker_failed"  # the worker's own bug, not an observation
            with open(path, "w") as f:
                json.dump({"rank": rank, "error": {"type": kind, "text": text}, "iterations": []}, f)
        print(f"{out}: done", flush=True)
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    # Skip interpreter shutdown: DeepSpeed/inductor helpers started at import can keep it waiting.
    os._exit(code)
