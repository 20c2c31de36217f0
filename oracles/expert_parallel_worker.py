"""Oracle for axolotl's expert parallelism (ExpertParallelPlugin, torch backend): real DDP and
real FSDP2 (torch 2.11) over Gloo on CPU, one process per rank, with the plugin's structure
rebuilt on a tiny MoE model, and the gradients compared with a single-process reference.

What is the plugin's and what is mirrored (axolotl-ai-cloud/axolotl, commit 060b4aec63d4 for
plugin.py / shard.py, 3d713cc34eff for torch_dispatch.py; axolotl is not installed here, so its
code is mirrored, not imported):

- shard.py shard_expert_weights: each MoE layer's 3-D gate_up_proj / down_proj keep the experts
  [ep_rank * E_local, (ep_rank + 1) * E_local) on every rank (here: sliced from the same seeded
  full tensors, as the plugin's own CPU tests do in place of the CUDA scatter); under pure EP their
  names go into model._ddp_params_and_buffers_to_ignore, which torch's DistributedDataParallel
  reads in __init__ (nn/parallel/distributed.py: parameters_to_ignore), so its Reducer never sees
  them.
- plugin.py _register_expert_grad_scale: register_post_accumulate_grad_hook(p.grad.mul_(1/ep)) on
  every trainable expert parameter; pure EP registers it in post_model_build, EP x dp_shard in
  fully_shard_experts (on the sharded DTensor parameters, whose hooks FSDP2's foreach_reduce calls
  after each reduce-scatter: fsdp/_fully_shard/_fsdp_collectives.py).
- torch_dispatch.py dispatch/combine: an equal all_to_all_single of the per-destination counts,
  then uneven all_to_all_single of the tokens (each token once per rank owning one of its top-k
  experts, with local expert ids, -1 elsewhere, and weights), a local expert kernel, and the
  combine all-to-all back with index_add_ onto the source tokens; backward of each all-to-all is
  the all-to-all with the splits swapped (its _A2AFallback). Run for real over Gloo here.
- EP x dp_shard (the patched accelerate ParallelismConfig, monkeypatch/accelerate/
  parallelism_config.py: mesh order (ep, dp_shard), dp_shard_cp_dim_names = (ep, dp_shard)):
  non-expert parameters fully_shard over the flattened (ep, dp_shard) mesh = the whole world;
  plugin.py fully_shard_experts: each experts module fully_shard on mesh["dp_shard"] first.

Local expert kernels: "eager" mirrors transformers' eager experts loop (only experts that got a
token run, so a rank whose local experts get no token leaves gate_up_proj / down_proj without a
gradient); "grouped" mirrors grouped_mm (every local expert's weight takes part, with zero rows).

Usage: expert_parallel_worker.py CASES.json OUT.json
CASES: [{"name", "engine": "ddp"|"fsdp2", "ep", "dp_shard", "grad_accum", "steps", "kernel",
         "idle_ranks": [ranks whose local experts get no token in step 0's first micro-step],
         optional model shape: "hidden", "expert_intermediate", "experts", "top_k", "moe_layers", "tokens"}]
OUT: {name: {"outcome": "ok"|"error"|"hang", "error": first error line, "ranks": {rank: {...}}}}
"""
import json
import os
import sys
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rank_processes import free_port, run_ranks  # noqa: E402

HIDDEN, INTER, EXPERTS, TOP_K, LAYERS, TOKENS = 8, 6, 4, 2, 2, 6
COLLECTIVE_TIMEOUT_S = 5


class Experts(nn.Module):
    """transformers 5's fused experts: gate_up_proj [E, 2I, H], down_proj [E, H, I]."""

    def __init__(self, experts):
        super().__init__()
        self.gate_up_proj = nn.Parameter(torch.randn(experts, 2 * INTER, HIDDEN) * 0.3)
        self.down_proj = nn.Parameter(torch.randn(experts, HIDDEN, INTER) * 0.3)
        self.offset, self.local = 0, experts
        self.ep_group = None
        self.kernel = "grouped"
        self.a2a_calls = 0

    def local_experts(self, x, idx, w):
        """x [N, H], idx [N, K] local ids (-1: not here), w [N, K]; weighted sum over K."""
        out = x.new_zeros(x.shape)
        for e in range(self.local):
            hit = (idx == e)
            rows = hit.any(dim=1).nonzero().flatten()
            if self.kernel == "eager" and rows.numel() == 0:
                continue  # transformers' eager loop runs only the experts that were hit
            gate, up = F.linear(x[rows], self.gate_up_proj[e]).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, self.down_proj[e])
            weight = (w[rows] * hit[rows].to(w.dtype)).sum(dim=1, keepdim=True)
            out = out.index_add(0, rows, y * weight)
        return out

    def forward(self, x, topk_idx, topk_w):
        if self.ep_group is None:  # reference: every expert here
            return self.local_experts(x, topk_idx, topk_w)
        return dispatch_combine(self, x, topk_idx, topk_w)


class AllToAll(torch.autograd.Function):
    """Uneven all_to_all_single along dim 0; backward is the same with the splits swapped."""

    @staticmethod
    def forward(ctx, x, out_splits, in_splits, group, counter):
        ctx.splits, ctx.group, ctx.counter = (out_splits, in_splits), group, counter
        return all_to_all(x, out_splits, in_splits, group, counter)

    @staticmethod
    def backward(ctx, grad):
        out_splits, in_splits = ctx.splits
        return all_to_all(grad.contiguous(), in_splits, out_splits, ctx.group, ctx.counter), None, None, None, None


def all_to_all(x, out_splits, in_splits, group, counter):
    counter.a2a_calls += 1
    out = x.new_empty((sum(out_splits), *x.shape[1:]))
    dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
    return out


def dispatch_combine(m, x, topk_idx, topk_w):
    group = m.ep_group
    ranks = dist.get_world_size(group)
    dest = topk_idx // m.local
    with torch.no_grad():
        in_rank = torch.stack([(dest == r).any(dim=1) for r in range(ranks)], dim=1)  # [T, P]
        send_counts = in_rank.sum(dim=0)
        recv_counts = torch.empty_like(send_counts)
        m.a2a_calls += 1
        dist.all_to_all_single(recv_counts, send_counts, group=group)
    send, recv = send_counts.tolist(), recv_counts.tolist()
    token_idx = torch.cat([in_rank[:, r].nonzero().flatten() for r in range(ranks)])
    send_rank = torch.cat([torch.full((send[r],), r, dtype=torch.long) for r in range(ranks)])
    local_idx = torch.where(dest[token_idx] == send_rank[:, None], topk_idx[token_idx] - send_rank[:, None] * m.local,
                            torch.full_like(topk_idx[token_idx], -1))
    send_w = torch.where(local_idx >= 0, topk_w[token_idx], torch.zeros_like(topk_w[token_idx]))
    recv_x = AllToAll.apply(x[token_idx], recv, send, group, m)
    recv_w = AllToAll.apply(send_w, recv, send, group, m)
    with torch.no_grad():
        recv_idx = all_to_all(local_idx, recv, send, group, m)
    local_out = m.local_experts(recv_x, recv_idx, recv_w)
    back = AllToAll.apply(local_out, send, recv, group, m)
    return x.new_zeros(x.shape).index_add(0, token_idx, back)


class MoeLayer(nn.Module):
    def __init__(self, experts):
        super().__init__()
        self.norm = nn.LayerNorm(HIDDEN)
        self.attn = nn.Linear(HIDDEN, HIDDEN)
        self.gate = nn.Linear(HIDDEN, EXPERTS, bias=False)  # the router: a dense (non-expert) parameter
        self.experts = Experts(experts)
        self.mask = None  # experts no token may pick this micro-step (the adverse routing case)

    def forward(self, h):
        h = h + self.attn(self.norm(h))
        logits = self.gate(h)
        if self.mask is not None:
            logits = logits.masked_fill(self.mask, float("-inf"))
        probs = logits.softmax(dim=-1)
        topk_w, topk_idx = probs.topk(TOP_K, dim=-1)
        return h + self.experts(h, topk_idx, topk_w)


class TinyMoe(nn.Module):
    def __init__(self, experts):
        super().__init__()
        self.embed = nn.Linear(HIDDEN, HIDDEN)
        self.layers = nn.ModuleList(MoeLayer(experts) for _ in range(LAYERS))
        self.head = nn.Linear(HIDDEN, 1)

    def forward(self, x):
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h)
        return self.head(h).pow(2).mean()


def batch(rank, step, micro):
    g = torch.Generator().manual_seed(1000 * step + 100 * micro + rank)
    return torch.randn(TOKENS, HIDDEN, generator=g)


def masks_for(case, rank, step, micro, ep_rank_of, ep_groups):
    """Expert masks of this rank's senders: the idle ranks' slices, for ranks in their ep group."""
    if step != 0 or micro != 0:
        return None
    e_local = EXPERTS // case["ep"]
    mask = torch.zeros(EXPERTS, dtype=torch.bool)
    for idle in case["idle_ranks"]:
        if any(rank in g and idle in g for g in ep_groups):
            s = ep_rank_of[idle] * e_local
            mask[s:s + e_local] = True
    return mask if mask.any() else None


def mesh_layout(case, world):
    """Rank r: ep coordinate r // dp_shard, dp coordinate r % dp_shard (mesh order (ep, dp_shard));
    ep groups vary ep at fixed dp: {d, d + dp_shard, ...}."""
    dp = case["dp_shard"]
    ep_rank_of = {r: r // dp for r in range(world)}
    ep_groups = [[d + dp * e for e in range(case["ep"])] for d in range(dp)]
    return ep_rank_of, ep_groups


def run_case_rank(case, rank, world, port, out_path):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import datetime
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    ep, dp = case["ep"], case["dp_shard"]
    ep_rank_of, ep_groups = mesh_layout(case, world)
    torch.manual_seed(0)
    model = TinyMoe(EXPERTS)
    e_local = EXPERTS // ep
    start = ep_rank_of[rank] * e_local
    result = {"a2a_calls": 0}
    if case["engine"] == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (ep, dp), mesh_dim_names=("ep", "dp_shard"))
        ep_group = mesh["ep"].get_group()
        dense_mesh = mesh[("ep", "dp_shard")]._flatten("dp_shard_cp")
    else:
        ep_group = dist.group.WORLD
    ignore = []
    for i, layer in enumerate(model.layers):
        ex = layer.experts
        with torch.no_grad():  # shard.py: keep this ep rank's [E_local] slice as a fresh parameter
            ex.gate_up_proj = nn.Parameter(ex.gate_up_proj[start:start + e_local].clone())
            ex.down_proj = nn.Parameter(ex.down_proj[start:start + e_local].clone())
        ex.offset, ex.local, ex.ep_group, ex.kernel = start, e_local, ep_group, case["kernel"]
        ignore += [f"layers.{i}.experts.gate_up_proj", f"layers.{i}.experts.down_proj"]

    def scale_hook(p):  # plugin.py _register_expert_grad_scale
        if p.grad is not None:
            p.grad.mul_(1.0 / ep)

    if case["engine"] == "fsdp2":
        for layer in model.layers:
            fully_shard(layer.experts, mesh=mesh["dp_shard"])  # fully_shard_experts
        for layer in model.layers:
            for p in layer.experts.parameters():
                p.register_post_accumulate_grad_hook(scale_hook)
        for layer in model.layers:
            fully_shard(layer, mesh=dense_mesh)
        fully_shard(model, mesh=dense_mesh)
        wrapped = model
    else:
        for layer in model.layers:
            for p in layer.experts.parameters():
                p.register_post_accumulate_grad_hook(scale_hook)
        model._ddp_params_and_buffers_to_ignore = ignore
        wrapped = nn.parallel.DistributedDataParallel(model, find_unused_parameters=case.get("find_unused", False))
        result["ddp_ignored"] = sorted(wrapped.parameters_to_ignore)
        result["ddp_reducer_params"] = len([p for p in model.parameters() if p.requires_grad]) - len(ignore)
    ga = case["grad_accum"]
    grads = []
    try:
        for step in range(case["steps"]):
            for micro in range(ga):
                mask = masks_for(case, rank, step, micro, ep_rank_of, ep_groups)
                for layer in model.layers:
                    layer.mask = mask
                synced = micro == ga - 1
                if case["engine"] == "fsdp2":
                    wrapped.set_requires_gradient_sync(synced)  # accelerate's no_sync for FSDP2
                    (wrapped(batch(rank, step, micro)) / ga).backward()
                else:
                    import contextlib
                    ctx = contextlib.nullcontext() if synced else wrapped.no_sync()
                    with ctx:
                        (wrapped(batch(rank, step, micro)) / ga).backward()
            grads.append({n: local_grad(p) for n, p in model.named_parameters()})
            for p in model.parameters():
                p.grad = None  # the optimizer step is left out: each step's gradients from the same weights
        result["outcome"] = "ok"
    except Exception as e:  # noqa: BLE001 - what the real engine raised is the observation
        result["outcome"] = "error"
        result["error"] = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        traceback.print_exc()
    result["a2a_calls"] = sum(layer.experts.a2a_calls for layer in model.layers)
    result["grads"] = grads
    result["expert_offset"] = start
    result["fsdp_dp_rank"] = rank % dp
    with open(out_path, "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


def local_grad(p):
    g = p.grad
    if g is None:
        return None
    if hasattr(g, "to_local"):  # FSDP2: this rank's dim-0 shard
        g = g.to_local()
    return g.detach().flatten().tolist()


def reference(case):
    """Single process, every expert: the gradient of the mean over ranks of each rank's loss
    (summed over micro-steps / grad_accum), the step's masks applied to the ranks they apply to."""
    world = case["ep"] * case["dp_shard"]
    ep_rank_of, ep_groups = mesh_layout(case, world)
    torch.manual_seed(0)
    model = TinyMoe(EXPERTS)
    out, compounded = [], []
    scale = 1.0 / case["ep"]
    for step in range(case["steps"]):
        total, chained = {}, {}
        for micro in range(case["grad_accum"]):
            for r in range(world):
                mask = masks_for(case, r, step, micro, ep_rank_of, ep_groups)
                for layer in model.layers:
                    layer.mask = mask
                (model(batch(r, step, micro)) / case["grad_accum"] / world).backward()
            for n, p in model.named_parameters():
                g = p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
                total[n] = total.get(n, 0) + g
                # The expert grad-scale hook multiplies .grad after every backward
                # (register_post_accumulate_grad_hook): micro-step i's unscaled owner gradient
                # (world * g here) ends up scaled by (1/ep)^(k - i + 1), not 1/ep.
                chained[n] = (chained.get(n, 0) + g * world) * scale
                p.grad = None
        out.append(total)
        compounded.append(chained)
    return out, compounded


def compare(case, ranks, ref, field="expert_error"):
    """Per rank: the largest error of the dense and of the expert gradients against the reference
    (expert grads: this rank's slice; FSDP2: this rank's dim-0 shard of its slice / of the dense
    parameter, as fully_shard chunks dim 0)."""
    ep, dp = case["ep"], case["dp_shard"]
    world = ep * dp
    e_local = EXPERTS // ep
    report = {}
    for rank, res in ranks.items():
        worst = {"dense": 0.0, "expert": 0.0}
        missing = []
        for step, grads in enumerate(res.get("grads", [])):
            for name, g in grads.items():
                expert = ".experts." in name
                want = ref[step][name]
                if want is None:
                    want_t = None
                else:
                    if expert:
                        s = res["expert_offset"]
                        want = want[s:s + e_local]
                    shards = dp if (case["engine"] == "fsdp2" and expert) else world if case["engine"] == "fsdp2" else 1
                    index = res["fsdp_dp_rank"] if expert else rank
                    if shards > 1:
                        chunks = want.chunk(shards, dim=0)
                        want = chunks[index] if index < len(chunks) else want.new_zeros((0,))
                    want_t = want.flatten()
                if g is None:
                    if want_t is not None and want_t.abs().max().item() > 1e-6:
                        missing.append(name)
                    continue
                got = torch.tensor(g)
                if want_t is None:
                    want_t = torch.zeros_like(got)
                n = min(got.numel(), want_t.numel())
                err = (got[:n] - want_t[:n]).abs().max().item() if n else 0.0
                worst["expert" if expert else "dense"] = max(worst["expert" if expert else "dense"], err)
        report[rank] = {"dense_error": worst["dense"], "expert_error": worst["expert"], "missing_grads": sorted(set(missing)),
                        "a2a_calls": res.get("a2a_calls"), "outcome": res.get("outcome"), "error": res.get("error")}
    return report


def main(argv):
    # The parent computes the references between forks: one intra-op thread, so no OpenMP pool
    # exists in the parent when it forks the next case's ranks (a forked pool deadlocks them).
    torch.set_num_threads(1)
    cases = json.load(open(argv[1]))
    out_dir = os.path.dirname(os.path.abspath(argv[2]))
    results = {}
    global HIDDEN, INTER, EXPERTS, TOP_K, LAYERS, TOKENS
    for case in cases:
        # The plan's model shape where the case names it (the differential test passes the
        # structure's); the forked ranks inherit these.
        HIDDEN = case.get("hidden", 8)
        INTER = case.get("expert_intermediate", 6)
        EXPERTS = case.get("experts", 4)
        TOP_K = case.get("top_k", 2)
        LAYERS = case.get("moe_layers", 2)
        TOKENS = case.get("tokens", 6)
        world = case["ep"] * case["dp_shard"]
        port = free_port()
        paths = [os.path.join(out_dir, f"{case['name']}.rank{r}.json") for r in range(world)]
        logs = [os.path.join(out_dir, f"{case['name']}.rank{r}.log") for r in range(world)]
        killed = run_ranks(world, lambda r: logs[r], lambda r: run_case_rank(case, r, world, port, paths[r]), case.get("deadline_s", 30))
        ranks = {}
        for r in range(world):
            if os.path.exists(paths[r]):
                ranks[r] = json.load(open(paths[r]))
        ref, compounded = reference(case)
        report = compare(case, ranks, ref)
        chained = compare(case, ranks, compounded)
        for r in report:
            report[r]["expert_error_if_scale_per_backward"] = chained[r]["expert_error"]
        outcome = "hang" if killed else ("error" if any(v["outcome"] == "error" for v in report.values()) or len(ranks) < world else "ok")
        errors = [v["error"] for v in report.values() if v.get("error")]
        if not errors and len(ranks) < world:
            for r in range(world):
                if r not in ranks and os.path.exists(logs[r]):
                    lines = [l for l in open(logs[r]).read().splitlines() if "Error" in l or "error" in l]
                    if lines:
                        errors.append(lines[-1])
        results[case["name"]] = {"outcome": outcome, "killed": killed, "error": errors[0] if errors else "", "ranks": report,
                                 "ddp_ignored": next((v.get("ddp_ignored") for v in ranks.values() if v.get("ddp_ignored")), None)}
        print(case["name"], outcome, json.dumps(report), flush=True)
    with open(argv[2], "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main(sys.argv)
