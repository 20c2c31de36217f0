"""The FSDP1 oracle worker: real torch.distributed.fsdp.FullyShardedDataParallel jobs (torch 2.11,
Gloo on 127.0.0.1, CPU, one process per rank), each running a plan's tiny model.

One launcher process imports torch (and peft where a plan uses PEFT's wrap policy) once, then runs
the plans in turn, forking one process per rank for each: a rank that real FSDP1 crashes (SIGSEGV)
or Gloo aborts (SIGABRT on a size mismatch) ends only its plan, and the launcher records what it
died of in that rank's report (no new batch that imports torch and peft again; no rank left waiting
for a dead peer until a deadline).

The model is oracles/ddp_worker.py's TinyModel (imported, not copied), built from DIR/structure.json
(runtime/ddp_structure_json.cc). Two changes make it an FSDP model as accelerate builds one for
axolotl's FSDP1 configs (accelerate 1.15 accelerator.py prepare_model, FullyShardedDataParallelPlugin):
- each decoder layer is a module the forward *calls* (LayerModule), so `transformer_auto_wrap_policy`
  on its class makes it an FSDP unit whose FullyShardedDataParallel.forward unshards it; the root unit
  holds the rest (embed, final norm, lm_head);
- parameters are looked up on their modules at use time (LiveTable), since FSDP1 swaps the
  original parameters for views of the unsharded FlatParameter (_flat_param.py _use_unsharded_views).
Gradient checkpointing sits *inside* the unit, as HF's GradientCheckpointingLayer.__call__ and
accelerate's apply_activation_checkpointing(checkpoint_wrapper) place it: recompute runs the layer's
inner forward, not FullyShardedDataParallel.forward. Gradient accumulation uses FSDP.no_sync().

Recorded per rank (DIR/fsdp1-rank-R.json): the first error's text (or a hang: the collective
timeout), every _post_backward_hook call per flat parameter with its graph task, every
reduce-scatter and all-gather per unit, and the final gradients (full, after summon_full_params)
against this rank's single-process reference: {"ok", "mismatch"} per original parameter.
The hook and collective counters wrap the real functions (they still run); nothing is replaced.
"""

import argparse
import contextlib
import datetime
import faulthandler
import functools
import json
import os
import signal
import socket
import sys
import time
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.utils.checkpoint as checkpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddp_worker  # noqa: E402
from ddp_worker import TinyModel, make_batch, Recorder, error_text  # noqa: E402


class LiveTable:
    """model.table with each parameter fetched from its module now (FSDP1 re-points them)."""

    def __init__(self, root, names):
        self.root = root
        self.paths = [n.split(".") for n in names]

    def __getitem__(self, i):
        obj = self.root
        for part in self.paths[i]:
            obj = getattr(obj, part)
        return obj


class LayerModule(nn.Module):
    """A decoder layer as a module the forward calls: what the FSDP auto-wrap policy wraps."""

    def forward(self, x, step):
        model = self._owner[0]
        layer = self._spec
        count = step["checkpoint_count"][layer["index"]]
        if count == 0:
            return model.decoder_layer(x, layer, step)

        def fn(h):
            if torch.is_grad_enabled() and torch._C._current_graph_task_id() != -1 and model.recorder:
                model.recorder.pending.append(f"checkpoint(layer {layer['index']})")
            return model.decoder_layer(h, layer, step)

        return checkpoint.checkpoint(fn, x, use_reentrant=model.s["use_reentrant"])


class OwnerModule(nn.Module):
    """A module that owns parameters (a Linear, an RMSNorm, the embedding, a LoRA A/B), called as
    transformers and PEFT call it (`module(x)`; peft/tuners/lora/layer.py Linear.forward calls
    base_layer(x) and lora_B(lora_A(dropout(x)))): when FSDP1 wraps it (PEFT's lambda policy), its
    FullyShardedDataParallel.forward unshards it around the call. What it computes is TinyModel's
    own code (fn)."""

    def forward(self, x, fn):
        return fn(x)


class FsdpTinyModel(TinyModel):
    def __init__(self, s, seed, module_calls=False):
        super().__init__(s, seed)
        # With PEFT's wrap policy, every parameter's module is called as a module, as in a
        # transformers + PEFT model (oracles/zero_worker.py Zero3Model does the same for ZeRO-3).
        self.module_calls = module_calls
        if module_calls:
            for path in sorted({self.owner(i) for i in range(len(s["parameters"]))}):
                self.get_submodule(path).__class__ = OwnerModule
        # Re-home each decoder layer's parameters under a LayerModule at the same path.
        for layer in s["layers"]:
            *parent_path, leaf = layer["path"].split(".")
            parent = self
            for part in parent_path:
                parent = getattr(parent, part)
            old = getattr(parent, leaf)
            new = LayerModule()
            for name, child in old.named_children():
                new.add_module(name, child)
            for name, param in old.named_parameters(recurse=False):
                new.register_parameter(name, param)
            new._spec = layer
            new._owner = [self]  # a list: not registered as a submodule
            parent._modules[leaf] = new
        self.table = LiveTable(self, [p["name"] for p in s["parameters"]])

    def apply_module(self, path, x, fn):
        # Only the parameters' own modules are calls (the MLP block and a tied head's path are
        # not modules of this model; no FSDP unit is there under either wrap policy).
        if not self.module_calls:
            return fn(x)
        try:
            module = self.get_submodule(path)
        except AttributeError:
            return fn(x)
        if not isinstance(getattr(module, "_fsdp_wrapped_module", module), OwnerModule):
            return fn(x)
        return module(x, fn)

    def layer_module(self, layer):
        obj = self
        for part in layer["path"].split("."):
            obj = getattr(obj, part)
        return obj

    def run_layer(self, hidden, layer, count, step):
        # Each layer is a module call (its FSDP unit's hooks run); count > 1: the layer applied
        # `count` times (weight sharing), each call a unit forward.
        for _ in range(max(1, count)):
            hidden = self.layer_module(layer)(hidden, step)
        return hidden


class Instruments:
    """Counts what real FSDP1 does by wrapping its functions (the real ones still run)."""

    def __init__(self, recorder):
        self.recorder = recorder
        self.events = []
        self.micro_step = 0
        self.iteration = 0
        self.unit_of = {}  # id(FlatParamHandle) -> unit name

    def install(self):
        from torch.distributed.fsdp import _runtime_utils as ru
        inst = self
        real_post = ru._post_backward_hook

        def post_backward_hook(state, handle, *args, **kwargs):
            label, depth = inst.recorder._label()
            inst.events.append({"event": "post_backward", "unit": inst.unit_of.get(id(handle), "?"),
                                "iteration": inst.iteration, "micro_step": inst.micro_step,
                                "graph_task": label, "depth": depth,
                                "grad_defined": handle.flat_param.grad is not None})
            return real_post(state, handle, *args, **kwargs)

        ru._post_backward_hook = post_backward_hook
        real_rs = dist.reduce_scatter_tensor

        def reduce_scatter_tensor(output, input, *args, **kwargs):
            inst.events.append({"event": "reduce_scatter", "iteration": inst.iteration,
                                "micro_step": inst.micro_step, "numel": input.numel(),
                                "unit": inst.current_unit})
            return real_rs(output, input, *args, **kwargs)

        dist.reduce_scatter_tensor = reduce_scatter_tensor
        real_reduce_grad = ru._reduce_grad

        def reduce_grad(state, handle):
            inst.current_unit = inst.unit_of.get(id(handle), "?")
            return real_reduce_grad(state, handle)

        ru._reduce_grad = reduce_grad
        self.current_unit = "?"
        real_ag = dist.all_gather_into_tensor

        def all_gather_into_tensor(output, input, *args, **kwargs):
            inst.events.append({"event": "all_gather", "iteration": inst.iteration,
                                "micro_step": inst.micro_step, "numel": output.numel(),
                                "in_backward": torch._C._current_graph_task_id() != -1})
            return real_ag(output, input, *args, **kwargs)

        dist.all_gather_into_tensor = all_gather_into_tensor
        self.restore = [(ru, "_post_backward_hook", real_post), (ru, "_reduce_grad", real_reduce_grad),
                        (dist, "reduce_scatter_tensor", real_rs), (dist, "all_gather_into_tensor", real_ag)]

    def uninstall(self):
        for owner, name, real in self.restore:
            setattr(owner, name, real)


def reference_grads(s, seed, rank):
    """This rank's local gradients without FSDP (same seed), summed over the micro-steps."""
    model = TinyModel(s, seed)
    model.recorder = Recorder([])
    positions = {(q["rank"], q["iteration"], q["micro_step"]): q for q in s["positions"]}
    out = []
    for it in range(s["iterations"]):
        for q in model.table:
            q.grad = None
        try:
            for micro in range(s["gradient_accumulation_steps"]):
                step = positions[(rank, it, micro)]
                input_ids, labels = make_batch(s, step, seed)
                model(input_ids, labels, step).backward()
        except Exception as e:  # noqa: BLE001
            out.append({"error": error_text(e)})
            continue
        out.append({"grads": [q.grad.detach().clone() if q.grad is not None else None for q in model.table]})
    return out


def barrier(store, key, world):
    store.add(key, 1)
    while int(store.add(key, 0)) < world:
        time.sleep(0.01)


def run_plan(out_dir, rank, world, seed, timeout, store):
    """One rank of one plan (DIR/structure.json) in a process of its own (forked by launch), its
    process group on `store`; writes DIR/fsdp1-rank-R.json."""
    with open(os.path.join(out_dir, "structure.json")) as f:
        s = json.load(f)
    for q in s["positions"]:
        q["skipped_set"] = set(q["skipped"])
    fsdp_flags = s.get("fsdp1", {})
    # accelerate 1.15 FullyShardedDataParallelPlugin: FSDP_USE_ORIG_PARAMS defaults to false (FSDP1).
    use_orig_params = bool(fsdp_flags.get("use_orig_params", False))
    report = {"rank": rank, "world_size": world, "torch_version": torch.__version__,
              "use_orig_params": use_orig_params, "error": None, "events": [], "iterations": [], "units": []}
    refs = reference_grads(s, seed, rank)
    # The plan's TORCH_DISTRIBUTED_DEBUG (hookstream.torch_distributed_debug), set per plan: the
    # process group reads it when it is created (DETAIL wraps it in ProcessGroupWrapper) and FSDP1
    # when it is constructed (_ExecOrderData._checking_order).
    level = fsdp_flags.get("distributed_debug", "DETAIL")
    dist.set_debug_level(getattr(dist.DebugLevel, level))
    report["distributed_debug"] = level
    barrier(store, "ready", world)  # the process group's short timeout starts when all are here
    dist.init_process_group("gloo", store=dist.PrefixStore("plan", store), rank=rank,
                            world_size=world, timeout=timeout)
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

    peft_policy = bool(fsdp_flags.get("peft_wrap_policy", False))
    report["peft_wrap_policy"] = peft_policy
    model = FsdpTinyModel(s, seed, module_calls=peft_policy)
    recorder = Recorder([])
    model.recorder = recorder
    inst = Instruments(recorder)
    inst.install()
    if peft_policy:
        # transformers 5.17 Trainer._prepare_for_training -> distributed/fsdp.py
        # update_fsdp_plugin_peft: a PEFT model's plugin.auto_wrap_policy becomes PEFT's own
        # fsdp_auto_wrap_policy(model) (peft 0.21 utils/other.py): _or_policy of a lambda policy
        # (every leaf module whose weight requires grad: each LoRA A and B Linear) and the
        # transformer policy on the model's _no_split_modules (the decoder layer class). The real
        # function runs here; _no_split_modules names the tiny model's layer class as
        # LlamaPreTrainedModel._no_split_modules names LlamaDecoderLayer.
        from peft.utils.other import fsdp_auto_wrap_policy
        model._no_split_modules = ["LayerModule"]
        policy = fsdp_auto_wrap_policy(model)
    else:
        # accelerate 1.15 FullyShardedDataParallelPlugin: TRANSFORMER_BASED_WRAP ->
        # functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={layer classes}).
        policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={LayerModule})
    try:
        fsdp = FSDP(model, auto_wrap_policy=policy, sharding_strategy=ShardingStrategy.FULL_SHARD,
                    use_orig_params=use_orig_params, device_id=torch.device("cpu"), sync_module_states=False)
    except Exception as e:  # noqa: BLE001 - a wrap-time error is an observation too
        report["error"] = {"text": error_text(e), "type": type(e).__name__, "phase": "wrap", "iteration": 0,
                           "micro_step": 0, "hang": False}
        fsdp = None
    if fsdp is not None:
        for name, module in fsdp.named_modules():
            if isinstance(module, FSDP):
                unit = name.replace("._fsdp_wrapped_module", "").replace("_fsdp_wrapped_module.", "")
                unit = unit.replace("_fsdp_wrapped_module", "")
                inst.unit_of[id(module._handle)] = unit
                report["units"].append(unit)
    positions = {(q["rank"], q["iteration"], q["micro_step"]): q for q in s["positions"]}
    steps = s["gradient_accumulation_steps"]
    names = [q["name"] for q in s["parameters"]]
    for it in range(s["iterations"]):
        if report["error"] is not None:
            break
        inst.iteration = it
        fsdp.zero_grad(set_to_none=True)
        record = {"iteration": it, "completed": False}
        phase, micro = "forward", 0
        try:
            for micro in range(steps):
                inst.micro_step = micro
                step = positions[(rank, it, micro)]
                input_ids, labels = make_batch(s, step, seed)
                context = fsdp.no_sync() if micro != steps - 1 else contextlib.nullcontext()
                with context:
                    phase = "forward"
                    loss = fsdp(input_ids, labels, step)
                    phase = "backward"
                    recorder.outer(loss).backward()
                    recorder.take()
            record["completed"] = True
        except Exception as e:  # noqa: BLE001 - every error the plan provokes is an observation
            text = error_text(e)
            report["error"] = {"text": text, "type": type(e).__name__, "phase": phase, "iteration": it,
                               "micro_step": micro,
                               # A Gloo collective mismatch: a timeout, ProcessGroupWrapper's check, or the
                               # peer aborting on Gloo's size check, which this rank reads as "Connection
                               # reset by peer" or "Connection closed by peer" depending on where its own
                               # read or write stood (both seen; runtime/oracle_findings.cc lists both).
                               "hang": "timed out" in text.lower() or "mismatch between collectives" in text
                               or "Connection reset by peer" in text or "Connection closed by peer" in text}
        if record["completed"] and "grads" in refs[it] and not use_orig_params:
            # summon_full_params(with_grads=True) needs use_orig_params: not compared here.
            record["gradients_skipped"] = "use_orig_params=False"
        elif record["completed"] and "grads" in refs[it]:
            # The reduced gradient against the mean of every rank's local reference gradient.
            try:
                local = [g if g is not None else torch.zeros(s["parameters"][i]["shape"])
                         for i, g in enumerate(refs[it]["grads"])]
                flat = torch.cat([g.reshape(-1) for g in local])
                dist.all_reduce(flat)
                flat /= world
                verdicts = []
                with FSDP.summon_full_params(fsdp, with_grads=True):
                    offset = 0
                    for i, entry in enumerate(s["parameters"]):
                        n = 1
                        for d in entry["shape"]:
                            n *= d
                        want = flat[offset:offset + n].reshape(entry["shape"])
                        offset += n
                        if not entry["trainable"]:
                            continue
                        got = model.table[i].grad
                        got = torch.zeros_like(want) if got is None else got.reshape(want.shape)
                        ok = torch.allclose(got, want, rtol=1e-4, atol=1e-6)
                        ratio = None
                        if not ok and float((want * want).sum()) > 0:
                            ratio = float((got * want).sum() / (want * want).sum())
                        verdicts.append({"parameter": names[i], "ok": bool(ok), "ratio": ratio})
                record["gradients"] = verdicts
            except Exception as e:  # noqa: BLE001
                record["gradients_error"] = error_text(e)
        report["iterations"].append(record)
    report["events"] = inst.events
    # Written whole or not at all: the launcher writes the report of a rank that left none.
    path = os.path.join(out_dir, f"fsdp1-rank-{rank}.json")
    with open(path + ".part", "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    os.replace(path + ".part", path)
    inst.uninstall()
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - a group left broken by a mismatch
        pass


def gloo_abort_text(log):
    """The line Gloo's enforce printed before the rank aborted on a collective mismatch, or ""."""
    at = log.find("Is there a distributed collective mismatch in your code?")
    if at < 0:
        return ""
    begin = log.rfind("[enforce fail at ", 0, at)
    return log[begin if begin >= 0 else at:at] + "Is there a distributed collective mismatch in your code?"


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rank_process(out_dir, rank, world, seed, timeout, port):
    """The forked child: one rank of one plan; its output goes to DIR/fsdp1-rank-R.log."""
    code = 0
    try:
        log = os.open(os.path.join(out_dir, f"fsdp1-rank-{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(log, 1)
        os.dup2(log, 2)
        faulthandler.enable()  # a segfault in the engine is an observation: say where
        store = dist.TCPStore("127.0.0.1", port, world, rank == 0, timeout=datetime.timedelta(seconds=60))
        run_plan(out_dir, rank, world, seed, timeout, store)
    except BaseException:  # noqa: BLE001 - the worker's own failure: the log says it
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # A rank that raised leaves the others in a collective; don't wait for them in shutdown.
    os._exit(code)


def missing_report(out_dir, rank, status, killed):
    """What a rank that wrote no report shows: real FSDP1 crashing (SIGSEGV is an outcome it gives),
    Gloo's size check aborting it (gloo/transport/tcp/pair.cc: std::terminate, SIGABRT), or neither
    (the worker's own failure, or the plan's deadline: no verdict)."""
    with open(os.path.join(out_dir, f"fsdp1-rank-{rank}.log"), errors="replace") as f:
        log = f.read()
    signalled = status is not None and os.WIFSIGNALED(status)
    signal_number = os.WTERMSIG(status) if signalled else 0
    mismatch = gloo_abort_text(log)
    if signal_number == signal.SIGSEGV and not killed:
        error = {"text": "Fatal Python error: Segmentation fault", "type": "crash", "hang": False}
    elif signal_number == signal.SIGABRT and mismatch and not killed:
        error = {"text": mismatch, "type": "gloo_abort", "hang": True}
    else:
        why = "killed at the plan's deadline" if killed else "exited without a report"
        return {"rank": rank, "missing": f"{why}: {log[-2000:]}", "events": [], "iterations": []}
    return {"rank": rank, "error": error, "events": [], "iterations": []}


def launch(out_dirs, world, seed, timeout, plan_timeout_s):
    """Every plan in turn, each rank a process forked from this one: Python, torch and (for PEFT's wrap
    policy) peft are imported once here, not once per rank and batch, and a rank that crashes ends
    only its own plan (oracles/zero_worker.py runs DeepSpeed the same way)."""
    torch.set_num_threads(1)
    if any(load_flags(d).get("peft_wrap_policy", False) for d in out_dirs):
        import peft.utils.other  # noqa: F401 - imported before forking: each plan's ranks inherit it
    for out_dir in out_dirs:
        for rank in range(world):
            for name in (f"fsdp1-rank-{rank}.json", f"fsdp1-rank-{rank}.log"):
                if os.path.exists(os.path.join(out_dir, name)):
                    os.remove(os.path.join(out_dir, name))
        port = free_port()
        children = {}
        for rank in range(world):
            pid = os.fork()
            if pid == 0:
                rank_process(out_dir, rank, world, seed, timeout, port)
            children[pid] = rank
        statuses = {}
        deadline = time.monotonic() + plan_timeout_s
        while len(statuses) < len(children) and time.monotonic() < deadline:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                time.sleep(0.01)
            elif pid in children:
                statuses[children[pid]] = status
        killed = set()
        for pid, rank in children.items():
            if rank not in statuses:
                os.kill(pid, signal.SIGKILL)
                statuses[rank] = os.waitpid(pid, 0)[1]
                killed.add(rank)
        for rank in range(world):
            path = os.path.join(out_dir, f"fsdp1-rank-{rank}.json")
            if not os.path.exists(path):
                with open(path, "w") as f:
                    json.dump(missing_report(out_dir, rank, statuses.get(rank), rank in killed), f, indent=1)
                    f.write("\n")
        print(f"{out_dir}: done", flush=True)


def load_flags(out_dir):
    with open(os.path.join(out_dir, "structure.json")) as f:
        return json.load(f).get("fsdp1", {})


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True, action="append",
                   help="a plan directory (structure.json); repeat to run several plans in turn")
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--collective-timeout-ms", type=int, default=4000)
    p.add_argument("--plan-timeout-s", type=float, default=120,
                   help="a plan's ranks still running after this long are killed (no verdict)")
    args = p.parse_args(argv)
    launch(args.out, args.world_size, args.seed, datetime.timedelta(milliseconds=args.collective_timeout_ms),
           args.plan_timeout_s)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
