"""The FSDP1 oracle worker: one rank of a real torch.distributed.fsdp.FullyShardedDataParallel job
(torch 2.11, Gloo on 127.0.0.1, CPU, one process per rank), running the plan's tiny model.

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
import sys
import time

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


def process_alive(pid):
    """Whether process `pid` (a peer rank on this host) still runs: not gone, not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            # /proc/PID/stat: "pid (comm) state ...": comm may hold spaces, the state follows its ')'.
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def barrier(store, key, world, peers, limit_s=120.0):
    """Waits until every rank reached `key`. A peer that died (Gloo's enforce aborts a rank on a size
    mismatch: SIGABRT) never arrives, and the batch it leaves behind would wait for the launcher's
    600 s deadline (runtime/fsdp1_oracle.cc): this rank has written its report, so it ends now and
    the launcher starts the plans after the crash in a new batch. `peers`: {rank: pid}."""
    store.add(key, 1)
    deadline = time.monotonic() + limit_s
    polls = 0
    while int(store.add(key, 0)) < world:
        polls += 1
        if polls % 10 == 0:
            dead = sorted(r for r, pid in peers.items() if not process_alive(pid))
            if dead or time.monotonic() > deadline:
                why = f"rank(s) {dead} ended" if dead else f"no rank came in {limit_s:.0f} s"
                sys.stderr.write(f"fsdp1_worker: leaving at barrier {key}: {why}\n")
                sys.stderr.flush()
                os._exit(3)
        time.sleep(0.01)


def run_plan(out_dir, rank, world, seed, timeout, store, index, peers):
    """One plan (DIR/structure.json) under a fresh process group on `store`; writes DIR/fsdp1-rank-R.json."""
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
    barrier(store, f"ready-{index}", world, peers)  # the process group's short timeout starts when all are here
    dist.init_process_group("gloo", store=dist.PrefixStore(f"plan-{index}", store), rank=rank,
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
    with open(os.path.join(out_dir, f"fsdp1-rank-{rank}.json"), "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    inst.uninstall()
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - a group left broken by a mismatch
        pass


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True, action="append",
                   help="a plan directory (structure.json); repeat to run several plans in this process")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--store-port", type=int, required=True)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--collective-timeout-ms", type=int, default=4000)
    args = p.parse_args(argv)
    faulthandler.enable()  # a segfault in the engine is an observation: say where
    torch.set_num_threads(1)
    timeout = datetime.timedelta(milliseconds=args.collective_timeout_ms)
    store = dist.TCPStore("127.0.0.1", args.store_port, args.world_size, args.rank == 0,
                          timeout=datetime.timedelta(seconds=60))
    # The ranks' process ids (all on this host), so a rank waiting at a barrier sees a peer that died.
    store.set(f"pid-{args.rank}", str(os.getpid()))
    peers = {r: int(store.get(f"pid-{r}")) for r in range(args.world_size) if r != args.rank}
    for index, out_dir in enumerate(args.out):
        run_plan(out_dir, args.rank, args.world_size, args.seed, timeout, store, index, peers)
        # Ranks leave a plan at different times (one raised, one timed out): meet before the next.
        barrier(store, f"done-{index}", args.world_size, peers)
    # A rank that raised leaves the others in a collective; don't wait for them in shutdown.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
