"""The FSDP2 oracle: real torch.distributed.fsdp.fully_shard (PyTorch 2.11) over Gloo on CPU, one
process per rank, building the plan's TinyModel (imported from oracles/ddp_worker.py) from the
DIR/structure.json that runtime/ddp_structure_json.cc writes (its "fsdp2" block says which modules
are FSDP units).

Launcher (no --rank): starts one process per rank of itself, computes the single-process reference
(each rank's local gradients, averaged over ranks: what FSDP2's reduce-scatter with the default
divide factor = world size must produce), and writes DIR/fsdp2-result.json: per rank the first
error (exact text, phase, iteration, micro-step) or a timeout, the FSDP events per unit
(pre_forward/post_forward/pre_backward/post_backward, all-gathers and reduce-scatters issued), and
per iteration and parameter whether the sharded gradient equals the reference ("ok"), differs
("wrong"), or is missing ("none").

Units are wrapped as accelerate/axolotl do for FSDP2 (accelerate/utils/fsdp_utils.py
fsdp2_prepare_model: fully_shard on every module of a transformer_layer_cls_to_wrap class, then on
the root): decoder layers, and MLPs when the plan wraps the MLP class (an FSDP unit inside the tiled
function). Gradient accumulation is accelerate's: model.set_requires_gradient_sync(False) on
non-final micro-steps (accelerate/accelerator.py Accelerator.no_sync for FSDP2).
"""

import argparse
import datetime
import json
import os
import socket
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # importing ddp_worker must not write into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402

import ddp_worker  # noqa: E402
from ddp_worker import TinyModel, make_batch, error_text  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True, action="append",
                   help="directory with structure.json (repeat: the ranks run the plans one after another)")
    p.add_argument("--rank", type=int, default=-1)
    p.add_argument("--store-port", type=int, default=0, help="the launcher's TCPStore (rank processes)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--collective-timeout-ms", type=int, default=3000)
    p.add_argument("--processes", type=int, default=0, help="rank processes the launcher started (rank processes)")
    return p.parse_args(argv)


class LiveTable:
    """TinyModel.table, resolved at each use: fully_shard replaces a module's parameters with
    sharded DTensor parameters, and unshard()/reshard() swap unsharded and sharded ones on the
    module (_fsdp_param.py FSDPParam._setattr_on_modules), so a list captured before wrapping
    would hold stale tensors."""

    def __init__(self, model, names):
        self.model = model
        self.paths = []
        for name in names:
            *path, leaf = name.split(".")
            self.paths.append((path, leaf))

    def __getitem__(self, i):
        path, leaf = self.paths[i]
        module = self.model
        for part in path:
            module = getattr(module, part)
        return getattr(module, leaf)

    def __len__(self):
        return len(self.paths)


class NoRecorder:
    """TinyModel's tiled MLP and checkpoint label graph tasks through a Recorder; this oracle
    records FSDP events instead, so the labels go nowhere."""

    def __init__(self):
        self.stack = []
        self.pending = []

    def __bool__(self):
        return False


class AdapterModule(nn.Module):
    """A LoRA A or B Linear, called as PEFT calls it (`module(x)`); what it computes is TinyModel's
    own code (fn)."""

    def forward(self, x, fn):
        return fn(x)


def adapter_modules(s):
    """The modules of the LoRA A/B weights (a lora.Linear's lora_A.default / lora_B.default)."""
    return sorted({e["name"].rsplit(".", 1)[0] for e in s["parameters"]
                   if e["name"].endswith((".lora_A.default.weight", ".lora_B.default.weight"))})


class Fsdp2Model(TinyModel):
    """TinyModel whose decoder layers (and MLPs, when they are units) are called through their
    nn.Module so that fully_shard's forward hooks run, as in transformers' models."""

    def __init__(self, s, seed, units):
        super().__init__(s, seed)
        self.table = LiveTable(self, [e["name"] for e in s["parameters"]])
        self.recorder = NoRecorder()
        self.step = None
        self.unit_layers, self.unit_mlps = {}, {}
        model = self
        for layer in s["layers"]:
            module = self.get_submodule(layer["path"])
            module.__class__ = type("DecoderLayer", (nn.Module,), {
                "forward": lambda self_, x, layer=layer: TinyModel.decoder_layer(model, x, layer, model.step)})
            self.unit_layers[layer["index"]] = module
            if layer["path"] + ".mlp" in units:
                mlp = self.get_submodule(layer["path"] + ".mlp")
                mlp.__class__ = type("MLP", (nn.Module,), {
                    "forward": lambda self_, x, layer=layer: TinyModel.mlp(model, x, layer, model.table, model.step)})
                self.unit_mlps[layer["index"]] = mlp
        # LoRA: every lora_A / lora_B is called as a module (peft/tuners/lora/layer.py Linear.forward:
        # lora_B(lora_A(dropout(x)))), so that its own fully_shard hooks run where it is a unit.
        self.adapter_modules = adapter_modules(s)
        for path in self.adapter_modules:
            self.get_submodule(path).__class__ = AdapterModule

    def apply_module(self, path, x, fn):
        if path in self.adapter_modules:
            return self.get_submodule(path)(x, fn)
        return fn(x)

    def decoder_layer(self, x, layer, step):
        return self.unit_layers[layer["index"]](x)

    def mlp(self, x, layer, p, step):
        if layer["index"] in self.unit_mlps:
            return self.unit_mlps[layer["index"]](x)
        return TinyModel.mlp(self, x, layer, p, step)

    def forward(self, input_ids, labels, step):
        self.step = step
        return TinyModel.forward(self, input_ids, labels, step)


class EventLog:
    """FSDP2's own events per unit (the DEBUG log lines FSDP::pre_forward ... of
    _fsdp_param_group.py, recorded by wrapping the same methods) and the collectives each issues
    (dist.all_gather_into_tensor / dist.reduce_scatter_tensor as _fsdp_collectives.py calls them)."""

    def __init__(self):
        self.events = []
        self.current = []
        self.key = (0, 0)

    def install(self):
        from torch.distributed.fsdp._fully_shard import _fsdp_param_group as pg
        log = self

        def wrap(name):
            original = getattr(pg.FSDPParamGroup, name)

            def wrapper(group, *args, **kwargs):
                fqn = group._module_fqn or ""
                log.events.append([log.key[0], log.key[1], name, fqn, bool(torch._C._current_graph_task_id() != -1)])
                log.current.append(fqn)
                try:
                    return original(group, *args, **kwargs)
                finally:
                    log.current.pop()
            setattr(pg.FSDPParamGroup, name, wrapper)

        for name in ("pre_forward", "post_forward", "pre_backward", "post_backward", "unshard", "reshard"):
            wrap(name)

        def wrap_collective(name, label):
            original = getattr(dist, name)

            def wrapper(*args, **kwargs):
                fqn = log.current[-1] if log.current else "?"
                log.events.append([log.key[0], log.key[1], label, fqn, bool(torch._C._current_graph_task_id() != -1)])
                return original(*args, **kwargs)
            setattr(dist, name, wrapper)

        wrap_collective("all_gather_into_tensor", "all_gather")
        wrap_collective("reduce_scatter_tensor", "reduce_scatter")
        wrap_collective("all_reduce", "all_reduce")


def local_grad(p):
    g = p.grad
    if g is None:
        return None
    if hasattr(g, "_local_tensor"):
        g = g._local_tensor
    return g.detach().to(torch.float32).clone()


def run_rank(args, s, out_dir, store, index, log):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard, FSDPModule
    rank, world = args.rank, s["world_size"]
    timeout = datetime.timedelta(milliseconds=args.collective_timeout_ms)
    # One store for the whole batch, held by the launcher (no port can be taken by another job
    # between plans); each plan's process group gets its own prefix.
    dist.init_process_group("gloo", store=dist.PrefixStore(f"plan-{index}/", store), rank=rank,
                            world_size=world, timeout=timeout)
    f = s["fsdp2"]
    # accelerate's mesh for fully_shard (parallelism_config.py fsdp_dim_names): 1-D over the world,
    # or 2-D ("dp_replicate", "dp_shard") for HSDP: rank r is in shard group r // shard and replica
    # group r % shard (init_device_mesh lays the ranks out row-major).
    replicate, shard = f.get("mesh", [1, world])
    if replicate > 1:
        mesh = init_device_mesh("cpu", (replicate, shard), mesh_dim_names=("dp_replicate", "dp_shard"))
    else:
        mesh = init_device_mesh("cpu", (world,))
    units = set(f["units"])
    model = Fsdp2Model(s, args.seed, units)
    log.events = []
    log.key = (0, 0)
    reshard = f["reshard_after_forward"]
    # The units include each LoRA A and B where axolotl 0.18's fsdp2_prepare_model
    # (monkeypatch/accelerate/fsdp2.py) shards them (sim/sync/fsdp2/fsdp2_units.cc). Innermost
    # first, as accelerate's fsdp2_prepare_model walks model.modules() in reverse.
    for path in sorted(units, key=lambda p: -p.count(".")):
        fully_shard(model.get_submodule(path), mesh=mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
    # The sharded parameters (FSDPParam.sharded_param): what the optimizer holds and steps on.
    # Module attributes are swapped to the unsharded parameters while a unit is unsharded, and a
    # unit can stay unsharded after backward (an FSDP unit inside a tiled function).
    by_name = dict(model.named_parameters())
    sharded = [by_name.get(e["name"]) for e in s["parameters"]]
    report = {"rank": rank, "torch_version": torch.__version__, "error": None,
              "has_set_reduce_scatter_unused_params": hasattr(FSDPModule, "set_reduce_scatter_unused_params"),
              "iterations": []}
    positions = {(q["rank"], q["iteration"], q["micro_step"]): q for q in s["positions"]}
    steps = s["gradient_accumulation_steps"]
    names = [e["name"] for e in s["parameters"]]
    for it in range(s["iterations"]):
        for q in sharded:
            if q is not None:
                q.grad = None  # optimizer.zero_grad(set_to_none=True) on the sharded parameters
        phase, micro = "forward", 0
        try:
            for micro in range(steps):
                log.key = (it, micro)
                step = positions[(rank, it, micro)]
                model.set_requires_gradient_sync(micro == steps - 1)
                phase = "forward"
                input_ids, labels = make_batch(s, step, args.seed)
                loss = model(input_ids, labels, step)
                phase = "backward"
                loss.backward()
        except Exception as e:  # noqa: BLE001 - every error the plan provokes is an observation
            report["error"] = {"text": error_text(e), "type": type(e).__name__, "phase": phase,
                               "iteration": it, "micro_step": micro}
        if report["error"] is not None:
            break  # a rank stopped mid-backward holds unsharded parameters: no sharded gradients to compare
        grads, left_unsharded = {}, []
        for i, name in enumerate(names):
            g = local_grad(sharded[i]) if sharded[i] is not None else None
            if g is not None:
                grads[name] = g.view(-1).tolist()
            live = model.table[i]
            if live is not sharded[i] and live.grad is not None:
                left_unsharded.append(name)  # an unsharded .grad no reduce-scatter took
        report["iterations"].append({"iteration": it, "grads": grads, "left_unsharded": left_unsharded})
    report["events"] = log.events
    log.current = []
    with open(os.path.join(out_dir, f"fsdp2-rank-{rank}.json"), "w") as fp:
        json.dump(report, fp)
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - a group left broken by the plan's error; the next plan starts a new one
        pass


def rank_main(args):
    torch.set_num_threads(1)
    log = EventLog()
    log.install()
    store = dist.TCPStore("127.0.0.1", args.store_port, is_master=False,
                          timeout=datetime.timedelta(seconds=60))
    for index, out_dir in enumerate(args.out):
        s = load_structure(out_dir)
        # Every rank process starts each plan together, those that sit it out included: a plan of
        # fewer ranks (world 2 beside HSDP's 4) would otherwise let the idle ranks reach the next
        # plan's process group early, and wait past the 3 s timeout for peers still running.
        store.add(f"start-{index}", 1)
        while store.add(f"start-{index}", 0) < args.processes:
            time.sleep(0.005)
        if args.rank >= s["world_size"]:
            continue
        try:
            run_rank(args, s, out_dir, store, index, log)
        except Exception as e:  # noqa: BLE001 - setting up this plan failed: say so, go on with the next
            with open(os.path.join(out_dir, f"fsdp2-rank-{args.rank}.json"), "w") as fp:
                json.dump({"rank": args.rank, "torch_version": torch.__version__, "error":
                           {"text": "worker error: " + error_text(e), "type": type(e).__name__, "phase": "setup",
                            "iteration": 0, "micro_step": 0},
                           "has_set_reduce_scatter_unused_params": False, "iterations": [], "events": []}, fp)
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001
                pass
    os._exit(0)


def reference(s, seed):
    """Per iteration: mean over ranks of each rank's local gradients (single process, no FSDP)."""
    torch.set_num_threads(1)
    world, steps = s["world_size"], s["gradient_accumulation_steps"]
    positions = {(q["rank"], q["iteration"], q["micro_step"]): q for q in s["positions"]}
    out = []
    model = TinyModel(s, seed)
    model.recorder = NoRecorder()
    for it in range(s["iterations"]):
        total = None
        for rank in range(world):
            for p in model.table:
                p.grad = None
            for micro in range(steps):
                step = positions[(rank, it, micro)]
                input_ids, labels = make_batch(s, step, seed)
                model(input_ids, labels, step).backward()
            g = [p.grad.detach().clone() if p.grad is not None else None for p in model.table]
            total = g if total is None else [a if b is None else (b if a is None else a + b) for a, b in zip(total, g)]
        out.append([None if t is None else t / world for t in total])
    return out


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def load_structure(out_dir):
    with open(os.path.join(out_dir, "structure.json")) as fp:
        s = json.load(fp)
    for q in s["positions"]:
        q["skipped_set"] = set(q["skipped"])
    return s


def launch(args):
    """One process per rank runs every plan (a process group per plan): Python and torch start
    once per rank, not once per plan."""
    structures = [load_structure(d) for d in args.out]
    world = max(s["world_size"] for s in structures)
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=60))
    env = dict(os.environ, TORCH_DISTRIBUTED_DEBUG="DETAIL", OMP_NUM_THREADS="1")
    procs = []
    for d in args.out:
        for rank in range(world):
            path = os.path.join(d, f"fsdp2-rank-{rank}.json")
            if os.path.exists(path):
                os.remove(path)
    for rank in range(world):
        cmd = [sys.executable, os.path.abspath(__file__), "--rank", str(rank),
               "--store-port", str(store.port), "--seed", str(args.seed),
               "--collective-timeout-ms", str(args.collective_timeout_ms), "--processes", str(world)]
        for d in args.out:
            cmd += ["--out", d]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    refs = [reference(s, args.seed) for s in structures]
    deadline = time.time() + 60 + 20 * len(args.out)
    logs = []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        logs.append(out.decode(errors="replace")[-4000:])
    for d, s, ref in zip(args.out, structures, refs):
        collect(d, s, ref, logs)
    return 0


def collect(out_dir, s, ref, logs):
    world = s["world_size"]
    names = [e["name"] for e in s["parameters"]]
    shapes = {e["name"]: e["shape"] for e in s["parameters"]}
    result = {"world_size": world, "ranks": [], "gradients": []}
    reports = []
    for rank in range(world):
        path = os.path.join(out_dir, f"fsdp2-rank-{rank}.json")
        if not os.path.exists(path):
            reports.append(None)
            result["ranks"].append({"rank": rank, "error": {"text": "worker died", "log": logs[rank]}})
            continue
        with open(path) as fp:
            r = json.load(fp)
        reports.append(r)
        counts = {}
        for it, micro, what, fqn, in_bw in r["events"]:
            counts.setdefault(fqn, {}).setdefault(what, 0)
            counts[fqn][what] += 1
        result["ranks"].append({"rank": rank, "torch_version": r["torch_version"], "error": r["error"],
                                "has_set_reduce_scatter_unused_params": r["has_set_reduce_scatter_unused_params"],
                                "counts": counts, "events": r["events"]})
    # Sharded gradients reassembled (Shard(0): rank r holds chunk r % shard of torch.chunk(full,
    # shard, 0), shard = the world without HSDP). Under HSDP every replica must hold the same
    # shards (the all-reduce across replicas): replica 0's are reassembled, a replica that differs
    # makes the parameter wrong.
    replicate, shard = s["fsdp2"].get("mesh", [1, world])
    for it in range(s["iterations"]):
        if any(r is None or len(r["iterations"]) <= it for r in reports):
            break
        verdicts = {}
        for i, name in enumerate(names):
            expected = ref[it][i]
            all_pieces = [r["iterations"][it]["grads"].get(name) for r in reports]
            pieces = all_pieces[:shard]
            replicas_differ = False
            for k in range(1, replicate):
                for a, b in zip(pieces, all_pieces[k * shard:(k + 1) * shard]):
                    if (a is None) != (b is None) or (a is not None and (len(a) != len(b) or not torch.allclose(
                            torch.tensor(a), torch.tensor(b), rtol=1e-3, atol=1e-5))):
                        replicas_differ = True
            if all(p is None for p in pieces):
                got = None
            else:
                full = torch.zeros(shapes[name])
                chunks = list(full.chunk(shard, 0))
                # A rank whose sharded parameter holds a whole-tensor .grad (code that wrote .grad by
                # hand after the unit resharded, onto the DTensor shard): no shard to reassemble; the
                # optimizer would step on what is not this rank's shard.
                whole = any(piece is not None and len(piece) != c.numel() for c, piece in zip(chunks, pieces))
                for c, piece in zip(chunks, pieces):
                    if piece is not None and c.numel() > 0 and not whole:
                        c.copy_(torch.tensor(piece).view(c.shape))
                got = None if whole else full
            if replicas_differ or (got is None and any(p is not None for p in pieces)):
                verdict = "wrong"
            elif expected is None or float(expected.abs().max()) == 0.0:
                verdict = "ok" if got is None or float(got.abs().max()) == 0.0 else "wrong"
            elif got is None:
                verdict = "none"
            else:
                verdict = "ok" if torch.allclose(got, expected, rtol=1e-3, atol=1e-5) else "wrong"
            if verdict != "ok":
                verdicts[name] = verdict
        result["gradients"].append({"iteration": it, "not_ok": verdicts,
                                    "left_unsharded": sorted(set().union(*[r["iterations"][it]["left_unsharded"] for r in reports]))})
    with open(os.path.join(out_dir, "fsdp2-result.json"), "w") as fp:
        json.dump(result, fp, indent=1)


def main(argv):
    args = parse_args(argv)
    if args.rank >= 0:
        return rank_main(args)
    return launch(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
