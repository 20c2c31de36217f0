"""The PyTorch 2.x DDP oracle worker: one rank of a real torch.nn.parallel.DistributedDataParallel job
(Gloo on 127.0.0.1), or with --reference every rank's local gradients without DDP.

A drop-in for the C++ worker (runtime/worker.cc): the parent (runtime/oracle.cc run_oracle) starts it
through oracles/run.sh with the same flags and reads the same files back (DIR/rank-R.json,
DIR/reference-rank-R.json, raw float32 gradient files), so the verdicts come from the same
classification (runtime/oracle_findings.cc). The model is not re-derived from the plan: the parent
writes DIR/structure.json (runtime/ddp_structure_json.cc), the structure and per-position schedule
the simulator sees, and this file builds the same tiny model as runtime/oracle_model.cc from it.

What runs is PyTorch's own: DistributedDataParallel (its Reducer, _DDPSink, no_sync), the reentrant
and non-reentrant torch.utils.checkpoint, autograd. Only the tiled MLP is a custom Function, as it is
in the codes that use it (DeepSpeed ALST / axolotl TiledMLP), with the plan's backward strategy.
"""

import argparse
import contextlib
import datetime
import importlib
import json
import math
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint as checkpoint


def parse_args(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--plan", required=True)
    p.add_argument("--model")
    p.add_argument("--out", required=True)
    p.add_argument("--world-size", type=int, default=1)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--collective-timeout-ms", type=int, default=5000)
    p.add_argument("--expect-fingerprint")
    p.add_argument("--reference", action="store_true")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--store-port", type=int, default=0)
    p.add_argument("--with-reference", action="store_true",
                   help="a DDP rank also writes its reference report (no separate --reference process)")
    return p.parse_args(argv)


class Recorder:
    """Hook firings as runtime/hook_recorder.cc records them: after the accumulation, before DDP's
    own hook on the same accumulator (AccumulateGrad's tensor post-accumulate hooks run inside its
    apply, node post hooks after it), with the innermost graph task's label."""

    def __init__(self, params):
        self.firings = []
        self.micro_step = 0
        self.labels = {}      # graph task id -> label
        self.pending = []     # labels of nested tasks about to start (reentrant recompute)
        self.stack = []       # labels pushed by this file's own Functions around nested backward
        for index, p in enumerate(params):
            p.register_post_accumulate_grad_hook(self._hook(index))

    def _label(self):
        if self.stack:
            return self.stack[-1], len(self.stack)
        task = torch._C._current_graph_task_id()
        if task not in self.labels:
            self.labels[task] = self.pending.pop(0) if self.pending else "nested"
        label = self.labels[task]
        return label, 0 if label == "outer" else 1

    def _hook(self, index):
        def hook(param):
            label, depth = self._label()
            self.firings.append({"micro_step": self.micro_step, "ddp_index": index, "depth": depth,
                                 "graph_task": label, "grad_defined": param.grad is not None})
        return hook

    def outer(self, loss):
        """Labels the graph task that loss.backward() starts."""
        recorder = self

        class Outer(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x.view_as(x)

            @staticmethod
            def backward(ctx, g):
                recorder.labels[torch._C._current_graph_task_id()] = "outer"
                return g

        return Outer.apply(loss)

    def take(self):
        firings, self.firings = self.firings, []
        self.labels = {}
        self.pending = []
        return firings


class TinyModel(nn.Module):
    """runtime/oracle_model.cc in Python: the plan's parameters under their own names (so
    named_parameters(), and with it DDP's parameter order, is the structure's), run the way the
    schedule says."""

    def __init__(self, s, seed):
        super().__init__()
        self.s = s
        gen = torch.Generator().manual_seed(seed)
        self.table = []
        for entry in s["parameters"]:
            *path, leaf = entry["name"].split(".")
            module = self
            for part in path:
                if not hasattr(module, part):
                    module.add_module(part, nn.Module())
                module = getattr(module, part)
            shape = entry["shape"]
            if leaf == "weight" and len(shape) == 1 and "norm" in entry["module"]:
                value = torch.ones(shape) + 0.1 * torch.randn(shape, generator=gen)
            else:
                fan_in = shape[-1] if len(shape) > 1 else shape[0]
                value = torch.randn(shape, generator=gen) / math.sqrt(max(1, fan_in))
            param = nn.Parameter(value, requires_grad=entry["trainable"])
            module.register_parameter(leaf, param)
            self.table.append(param)
        self.recorder = None

    def ddp_parameters(self):
        return [self.table[i] for i in self.s["ddp_parameters"]]

    # --- what one position skips ---------------------------------------------------------------
    def skipped(self, step, path):
        return path in step["skipped_set"]

    def lora_active(self, use, step):
        return (use["lora_a"] >= 0 and use["lora_b"] >= 0
                and not self.skipped(step, self.s["parameters"][use["lora_a"]]["module"])
                and not self.skipped(step, self.s["parameters"][use["lora_b"]]["module"]))

    def mlp_trainable_weights(self, layer, step):
        out = []
        for name in ("gate", "up", "down"):
            use = layer[name]
            if self.skipped(step, use["path"]):
                continue
            for i in (use["weight"], use["bias"]):
                if i >= 0 and self.s["parameters"][i]["trainable"]:
                    out.append(i)
            if self.lora_active(use, step):
                for i in (use["lora_a"], use["lora_b"]):
                    if self.s["parameters"][i]["trainable"]:
                        out.append(i)
        return out

    # --- the model ---------------------------------------------------------------------------
    def linear(self, x, use, p, step):
        weight = self.s["parameters"][use["weight"]]
        if self.skipped(step, use["path"]):
            return torch.zeros(*x.shape[:-1], weight["shape"][0])
        y = self.apply_module(self.owner(use["weight"]), x,
                              lambda h: F.linear(h, p[use["weight"]], p[use["bias"]] if use["bias"] >= 0 else None))
        if self.lora_active(use, step):
            a = self.apply_module(self.owner(use["lora_a"]), x,
                                  lambda h: F.linear(h, p[use["lora_a"]]))
            y = y + self.s["lora_scale"] * self.apply_module(self.owner(use["lora_b"]), a,
                                                             lambda h: F.linear(h, p[use["lora_b"]]))
        return y

    @staticmethod
    def rms_norm(x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight

    def norm(self, x, index, p):
        """The RMS norm whose weight is parameter `index`, run as its module."""
        return self.apply_module(self.owner(index), x, lambda h: self.rms_norm(h, p[index]))

    def owner(self, index):
        """The module parameter `index` is registered on (its name without the leaf)."""
        return self.s["parameters"][index]["name"].rsplit(".", 1)[0]

    def apply_module(self, path, x, fn):
        """fn(x): what the module at `path` computes from its own parameters. Here a plain call; the
        ZeRO-3 worker (oracles/zero_worker.py Zero3Model) calls the module itself, so that its
        forward hooks (DeepSpeed's parameter fetch/release) run around it as in a transformers model."""
        return fn(x)

    def attention(self, x, layer, p, step):
        m = self.s["model"]
        heads, kv, hd = m["num_attention_heads"], m["num_key_value_heads"], m["head_dim"]
        b, t = x.shape[0], x.shape[1]
        norm_module = self.s["parameters"][layer["input_norm"]]["module"]
        normed = x if self.skipped(step, norm_module) else self.norm(x, layer["input_norm"], p)
        q = self.linear(normed, layer["q"], p, step).view(b, t, heads, hd)
        k = self.linear(normed, layer["k"], p, step).view(b, t, kv, hd)
        v = self.linear(normed, layer["v"], p, step).view(b, t, kv, hd)
        if layer["q_norm"] >= 0 and not self.skipped(step, self.s["parameters"][layer["q_norm"]]["module"]):
            q = self.norm(q, layer["q_norm"], p)
        if layer["k_norm"] >= 0 and not self.skipped(step, self.s["parameters"][layer["k_norm"]]["module"]):
            k = self.norm(k, layer["k_norm"], p)
        q = q.transpose(1, 2)
        k = k.transpose(1, 2).repeat_interleave(heads // kv, 1)
        v = v.transpose(1, 2).repeat_interleave(heads // kv, 1)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(hd)
        causal = torch.ones(t, t, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(causal, float("-inf"))
        context = torch.matmul(torch.softmax(scores, -1), v).transpose(1, 2).reshape(b, t, heads * hd)
        return self.linear(context, layer["o"], p, step)

    def mlp(self, x, layer, p, step):
        if layer.get("experts"):
            return self.per_expert_moe(x, layer, p, step)
        gate = F.silu(self.linear(x, layer["gate"], p, step))
        up = self.linear(x, layer["up"], p, step)
        return self.linear(gate * up, layer["down"], p, step)

    def per_expert_moe(self, x, layer, p, step):
        """A sparse MoE block with one module per expert (transformers v4.57 MixtralSparseMoeBlock /
        Qwen2MoeSparseMoeBlock): router softmax, then only the experts that got a token run
        (`expert_hit`). The schedule's skipped experts are the ones routing left without a token on
        this rank in this step; the others run on every token, weighted by their routing
        probability (which experts run, not which tokens they see, decides the hooks)."""
        weights = torch.softmax(self.linear(x, layer["gate"], p, step), dim=-1)
        out = torch.zeros_like(x)
        for expert in layer["experts"]:
            if self.skipped(step, expert["path"]):
                continue
            gate = F.silu(self.linear(x, expert["gate"], p, step))
            up = self.linear(x, expert["up"], p, step)
            y = self.linear(gate * up, expert["down"], p, step)
            out = out + y * weights[..., expert["index"]:expert["index"] + 1]
        return out

    def tiled_mlp(self, x, layer, step):
        """DeepSpeed ALST / axolotl TiledMLP: forward over sequence shards under no_grad; backward
        recomputes each shard and produces the weights' gradients by the plan's strategy."""
        model, recorder = self, self.recorder
        weights = self.mlp_trainable_weights(layer, step)
        strategy = self.s["tiled_mlp_backward"]
        as_inputs = self.s["tiled_mlp_weights_as_inputs"]
        shards = step["shards"]
        # DeepSpeed's TiledMLP (the one axolotl uses under ZeRO) marks its compute params
        # ds_grad_is_ready; DDP and FSDP ignore the attribute (oracles/zero_worker.py sets the key).
        ds_grad_is_ready = self.s.get("tiled_mlp_ds_grad_is_ready", False)

        class TiledMLP(torch.autograd.Function):
            @staticmethod
            def forward(ctx, hidden, *weight_inputs):
                ctx.save_for_backward(hidden)
                ctx.input_requires_grad = hidden.requires_grad
                with torch.no_grad():
                    return torch.cat([model.mlp(s, layer, model.table, step) for s in hidden.chunk(shards, 1)], 1)

            @staticmethod
            def backward(ctx, grad_output):
                (hidden,) = ctx.saved_tensors
                params = [model.table[i] for i in weights]
                input_grads, weight_grads = [], [None] * len(params)
                hidden_shards = hidden.chunk(shards, 1)
                grad_shards = grad_output.chunk(shards, 1)
                for i, (h, g) in enumerate(zip(hidden_shards, grad_shards)):
                    if ds_grad_is_ready:
                        # deepspeed/runtime/sequence_parallel/ulysses_sp.py TiledMLP.backward: "Tell
                        # deepspeed not to add a new grad to its ipg bucket until the last shard is run"
                        for q in params:
                            q.ds_grad_is_ready = i + 1 >= len(hidden_shards)
                    shard = h.detach().requires_grad_(ctx.input_requires_grad)
                    with torch.enable_grad():
                        out = model.mlp(shard, layer, model.table, step)
                    last = i == len(hidden_shards) - 1
                    if not out.requires_grad:
                        input_grads.append(torch.zeros_like(shard))
                        continue
                    recorder.stack.append(f"tiled_mlp chunk {i} (layer {layer['index']})")
                    try:
                        if strategy == "per_chunk_backward" or (strategy == "grad_then_backward" and last):
                            torch.autograd.backward(out, g)
                            input_grads.append(shard.grad if shard.requires_grad and shard.grad is not None
                                               else torch.zeros_like(shard))
                            continue
                        wrt = ([shard] if shard.requires_grad else []) + params
                        grads = torch.autograd.grad(out, wrt, g, allow_unused=True)
                    finally:
                        recorder.stack.pop()
                    n = 0
                    if shard.requires_grad:
                        input_grads.append(grads[0] if grads[0] is not None else torch.zeros_like(shard))
                        n = 1
                    else:
                        input_grads.append(torch.zeros_like(shard))
                    for w, grad in enumerate(grads[n:]):
                        if grad is None:
                            continue
                        if strategy == "grad_then_backward":
                            # param.grad += chunk grad, written by the Function itself
                            params[w].grad = grad.clone() if params[w].grad is None else params[w].grad + grad
                        else:
                            weight_grads[w] = grad if weight_grads[w] is None else weight_grads[w] + grad
                result = [torch.cat(input_grads, 1) if ctx.input_requires_grad else None]
                if as_inputs:
                    result += [weight_grads[w] if strategy == "function_returns_grads" else None
                               for w in range(len(params))]
                return tuple(result)

        inputs = [self.table[i] for i in weights] if as_inputs else []
        return TiledMLP.apply(x, *inputs)

    def decoder_layer(self, x, layer, step):
        p = self.table
        h = x
        if not self.skipped(step, layer["path"] + ".self_attn"):
            h = h + self.attention(x, layer, p, step)
        if not self.skipped(step, layer["path"] + "." + layer.get("mlp_module", "mlp")):
            norm_module = self.s["parameters"][layer["post_attention_norm"]]["module"]
            normed = h if self.skipped(step, norm_module) else self.norm(h, layer["post_attention_norm"], p)
            # The MLP block as its module (DeepSpeed's TiledMLP runs inside the MLP's forward).
            block = (lambda n: self.tiled_mlp(n, layer, step)) if layer["tiled"] else (lambda n: self.mlp(n, layer, p, step))
            h = h + self.apply_module(layer["path"] + ".mlp", normed, block)
        return h

    def forward(self, input_ids, labels, step):
        s, p = self.s, self.table
        m = s["model"]
        b, t = input_ids.shape
        embed_module = s["parameters"][s["embed"]]["module"]
        if self.skipped(step, embed_module):
            hidden = torch.randn(b, t, m["hidden_size"], generator=torch.Generator().manual_seed(17))
        else:
            hidden = self.apply_module(self.owner(s["embed"]), input_ids, lambda ids: F.embedding(ids, p[s["embed"]]))
        if s["input_require_grads"] and not hidden.requires_grad:
            hidden.requires_grad_(True)  # PEFT's enable_input_require_grads() forward hook
        for layer, count in zip(s["layers"], step["checkpoint_count"]):
            if self.skipped(step, layer["path"]):
                continue
            hidden = self.run_layer(hidden, layer, count, step)
        if not self.skipped(step, s["parameters"][s["final_norm"]]["module"]):
            hidden = self.norm(hidden, s["final_norm"], p)
        head_path = "lm_head" if m["tie_word_embeddings"] else s["parameters"][s["lm_head"]]["module"]
        if self.skipped(step, head_path):
            loss = hidden.pow(2).mean()
        else:
            logits = self.apply_module(self.owner(s["lm_head"]), hidden,
                                        lambda h: F.linear(h, p[s["lm_head"]]))
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        return loss / s["gradient_accumulation_steps"]

    def run_layer(self, hidden, layer, count, step):
        """One decoder layer of the stack, `count` checkpointed passes (0: no checkpoint). The FSDP1
        worker overrides it to call the layer as its own (wrapped) module."""
        if count == 0:
            return self.decoder_layer(hidden, layer, step)
        for _ in range(count):
            fn = self._checkpointed(layer, step)
            hidden = checkpoint.checkpoint(fn, hidden, use_reentrant=self.s["use_reentrant"])
        return hidden

    def _checkpointed(self, layer, step):
        model = self

        def fn(x):
            # Called in forward and, for a reentrant checkpoint, again when its backward recomputes
            # (under enable_grad, inside the outer task): the nested task it starts next is this one.
            if torch.is_grad_enabled() and torch._C._current_graph_task_id() != -1 and model.recorder:
                model.recorder.pending.append(f"checkpoint(layer {layer['index']})")
            return model.decoder_layer(x, layer, step)

        return fn


def make_batch(s, step, seed):
    gen = torch.Generator().manual_seed(
        (seed * 1000003 + step["rank"] * 10007 + step["iteration"] * 101 + step["micro_step"]) % (2**63))
    shape = (s["micro_batch_size"], step["sequence_len"])
    vocab = s["model"]["vocab_size"]
    return torch.randint(vocab, shape, generator=gen), torch.randint(vocab, shape, generator=gen)


def error_text(e):
    text = str(e)
    # c10::Error's what() carries a C++ backtrace only with TORCH_SHOW_CPP_STACKTRACES.
    marker = "\nException raised from "
    return text.split(marker)[0]


def compiled_autograd_backward():
    """loss.backward() under compiled autograd (torch._dynamo.compiled_autograd._enable, what
    torch._dynamo.config.compiled_autograd=True turns on around a compiled region's backward)."""
    from torch._dynamo import compiled_autograd

    compiler = torch.compile(backend="aot_eager")

    def backward(loss):
        with compiled_autograd._enable(compiler):
            loss.backward()

    return backward


def run_iterations(s, model, rank, ddp, recorder, out_dir, prefix, report, seed, backward=None):
    params = model.ddp_parameters()
    steps = s["gradient_accumulation_steps"]
    positions = {(q["rank"], q["iteration"], q["micro_step"]): q for q in s["positions"]}
    for it in range(s["iterations"]):
        if report["error"] is not None:
            break
        for q in params:
            q.grad = None  # optimizer.zero_grad(set_to_none=True)
        record = {"iteration": it, "completed": False}
        phase, micro = "forward", 0
        try:
            for micro in range(steps):
                sync = micro == steps - 1
                step = positions[(rank, it, micro)]
                recorder.micro_step = micro
                phase = "forward"
                input_ids, labels = make_batch(s, step, seed)
                context = ddp.no_sync() if ddp is not None and not sync else contextlib.nullcontext()
                with context:
                    if ddp is not None:
                        loss = ddp(input_ids, labels, step)
                    else:
                        loss = model(input_ids, labels, step)
                    phase = "backward"
                    if backward is not None:
                        backward(recorder.outer(loss))
                    else:
                        recorder.outer(loss).backward()
            record["completed"] = True
        except Exception as e:  # noqa: BLE001 - every error the plan provokes is an observation
            report["error"] = {"text": error_text(e), "phase": phase, "iteration": it, "micro_step": micro}
        record["hooks"] = recorder.take()
        record["grad_defined"] = [q.grad is not None for q in params]
        record["grads_file"] = f"{prefix}-iter-{it}.bin"
        with open(os.path.join(out_dir, record["grads_file"]), "wb") as f:
            for q in params:
                g = q.grad.detach() if q.grad is not None else torch.zeros_like(q)
                f.write(g.to(torch.float32).contiguous().view(-1).numpy().tobytes())
        report["iterations"].append(record)
    if ddp is not None and report["error"] is None:
        # The next synced forward is where an unfinished reduction is raised (rebuild_buckets).
        try:
            step = dict(positions[(rank, s["iterations"] - 1, steps - 1)])
            input_ids, labels = make_batch(s, step, seed + 1)
            ddp(input_ids, labels, step)
        except Exception as e:  # noqa: BLE001
            report["error"] = {"text": error_text(e), "phase": "forward", "iteration": s["iterations"],
                               "micro_step": 0}


def new_report(model, rank, world, reference):
    return {
        "rank": rank, "world_size": world, "reference": reference, "torch_version": torch.__version__,
        "distributed_debug": os.environ.get("TORCH_DISTRIBUTED_DEBUG", "OFF"),
        "ddp_parameter_names": [model.s["parameters"][i]["name"] for i in model.s["ddp_parameters"]],
        "ddp_parameter_numels": [q.numel() for q in model.ddp_parameters()],
        "initial_buckets": [], "iterations": [], "error": None,
    }


def write_report(path, report):
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")


def main(argv):
    args = parse_args(argv)
    with open(os.path.join(args.out, "structure.json")) as f:
        s = json.load(f)
    if s["vision"]:
        raise SystemExit("oracles/ddp_worker.py: vision towers are not built by the PyTorch 2.x worker yet")
    torch.set_num_threads(1)
    for q in s["positions"]:
        q["skipped_set"] = set(q["skipped"])
    model = TinyModel(s, args.seed)
    if args.reference:
        for rank in range(args.world_size):
            recorder = Recorder(model.ddp_parameters()) if rank == 0 else model.recorder
            model.recorder = recorder
            report = new_report(model, rank, args.world_size, True)
            prefix = f"reference-rank-{rank}"
            run_iterations(s, model, rank, None, recorder, args.out, prefix, report, args.seed)
            write_report(os.path.join(args.out, prefix + ".json"), report)
        return 0
    if args.with_reference:
        # This rank's local gradients without DDP, from a fresh model of the same seed (what the
        # separate --reference process computes; done here to start one Python process less).
        reference = TinyModel(s, args.seed)
        reference.recorder = Recorder(reference.ddp_parameters())
        report = new_report(reference, args.rank, args.world_size, True)
        prefix = f"reference-rank-{args.rank}"
        run_iterations(s, reference, args.rank, None, reference.recorder, args.out, prefix, report, args.seed)
        write_report(os.path.join(args.out, prefix + ".json"), report)
    timeout = datetime.timedelta(milliseconds=args.collective_timeout_ms)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.store_port}", rank=args.rank,
                            world_size=args.world_size, timeout=timeout)
    recorder = Recorder(model.ddp_parameters())
    model.recorder = recorder
    ddp_flags = s["ddp"]
    compile_flags = s.get("compile") or {"torch_compile": False}
    if compile_flags["torch_compile"] or compile_flags["optimize_ddp"] != "ddp_optimizer":
        # Read by DistributedDataParallel.__init__ (torch/nn/parallel/distributed.py:
        # `_use_python_reducer = get_optimize_ddp_mode() == "python_reducer"`), so set before it.
        importlib.import_module("torch._dynamo")  # a plain `import torch._dynamo` would make torch local here
        mode = compile_flags["optimize_ddp"]
        torch._dynamo.config.optimize_ddp = {"ddp_optimizer": True, "no_optimization": False}.get(mode, mode)
    kwargs = {}
    if ddp_flags["bucket_cap_mb"] is not None:
        kwargs["bucket_cap_mb"] = ddp_flags["bucket_cap_mb"]
    ddp = nn.parallel.DistributedDataParallel(
        model, find_unused_parameters=ddp_flags["find_unused_parameters"], static_graph=ddp_flags["static_graph"],
        gradient_as_bucket_view=ddp_flags["gradient_as_bucket_view"], broadcast_buffers=False, **kwargs)
    report = new_report(model, args.rank, args.world_size, False)
    prefix = f"rank-{args.rank}"
    backward = None
    if compile_flags["torch_compile"]:
        # torch.compile(DDP(model)), the order accelerate's prepare_model uses (accelerator.py:
        # DistributedDataParallel(...) then torch.compile(model, **dynamo_plugin.to_kwargs())).
        # The oracle compiles with aot_eager whatever the plan's backend: inductor's C++ codegen
        # costs minutes per graph on CI's CPUs, and the reducer/hook rules are above the backend.
        ddp = torch.compile(ddp, backend="aot_eager")
        if compile_flags["compiled_autograd"]:
            backward = compiled_autograd_backward()
    run_iterations(s, model, args.rank, ddp, recorder, args.out, prefix, report, args.seed, backward)
    write_report(os.path.join(args.out, prefix + ".json"), report)
    # A rank that raised leaves the others in a collective; don't wait for them in shutdown.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
