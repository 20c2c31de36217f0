"""The ZeRO-3 parameter-fetch oracle: real DeepSpeed (the pinned 0.19.8 of oracles/requirements.txt)
running a real transformers model (the plan's config.json through AutoConfig and
AutoModelForCausalLM, random weights), with the plan's PEFT LoRA (peft.get_peft_model) and the
plan's gradient checkpointing (transformers' gradient_checkpointing_enable, as axolotl calls it), on
CPU over Gloo on 127.0.0.1, one process per rank.

Usage: zero3_fetch_worker.py DIR [DIR ...]
Each DIR holds a spec.json (written by tests/oracles/zero3_fetch_oracle_test.cc):
  config            path of the model's config.json
  world_size, micro_batch_size, sequence_len, steps
  zero              the zero_optimization section (stage 3)
  checkpointing     "none", "reentrant" or "non_reentrant"
  lora              null or {"r": R, "target_modules": [...]}
  input_require_grads  PEFT's enable_input_require_grads() (as axolotl calls it with an adapter)
For each, this process forks world_size ranks (a zygote: importing torch + transformers + deepspeed
costs ~20 s on 2 cores); each rank writes DIR/fetch-rank-R.json with, for the last step (the
coordinator's trace is complete from the second forward on), the elements
PartitionedParameterCoordinator all-gathers with its forward flag and with its backward flag, the
most elements it holds at once (its __n_available_params after each fetch), the gathers in order,
and its recorded module trace (__submodule_order) by module name.

What runs is DeepSpeed's own: deepspeed.initialize, DeepSpeedZeroOptimizer_Stage3, its module hooks
(parameter_offload.py) and coordinator (partitioned_param_coordinator.py); the worker only wraps
__all_gather_params and _fetch_sub_module_impl to observe them (the real methods still run). As in
oracles/zero_worker.py, deepspeed.comm.torch.build_shm_op is replaced by `return None` (the CPU
accelerator's JIT-built shared-memory all-reduce; the collectives go through Gloo) and the optimizer
is torch.optim.SGD (DeepSpeed's CPUAdam is another JIT-built extension).
"""
import datetime
import json
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rank_processes import free_port, run_ranks  # noqa: E402
from zero_worker import import_deepspeed  # noqa: E402


def build_model(spec):
    import transformers
    config = transformers.AutoConfig.from_pretrained(spec["config"])
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    if spec["checkpointing"] != "none":
        model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": spec["checkpointing"] == "reentrant"})
    if spec.get("lora"):
        import peft
        if spec.get("input_require_grads"):
            model.enable_input_require_grads()
        model = peft.get_peft_model(model, peft.LoraConfig(r=spec["lora"]["r"],
                                                           target_modules=spec["lora"]["target_modules"]))
    model.train()
    return model


def run_rank(deepspeed, spec, rank, port, out):
    world = spec["world_size"]
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    report = {"rank": rank, "deepspeed_version": deepspeed.__version__, "error": None}
    model = build_model(spec)
    deepspeed.init_distributed(dist_backend="gloo", timeout=datetime.timedelta(seconds=60), verbose=False)
    config = {"train_micro_batch_size_per_gpu": spec["micro_batch_size"], "gradient_accumulation_steps": 1,
              "zero_optimization": spec["zero"], "zero_allow_untested_optimizer": True,
              "zero_force_ds_cpu_optimizer": False, "steps_per_print": 1 << 30}
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    engine, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    coordinator = optimizer.parameter_offload.get_param_coordinator()
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus
    param_names = {id(p): n for n, p in model.named_parameters()}
    module_names = {id(m): n for n, m in model.named_modules()}
    fetches = {}
    gather_name = "_PartitionedParameterCoordinator__all_gather_params"
    original_gather = getattr(coordinator, gather_name)
    original_fetch = coordinator._fetch_sub_module_impl

    def observed_gather(params, forward):
        gathered = [p for p in params if p.ds_status == ZeroParamStatus.NOT_AVAILABLE]
        numel = sum(p.ds_numel for p in gathered)
        if numel:
            fetches["forward" if forward else "backward"] += numel
            fetches["order"].append(("F " if forward else "B ") + " ".join(
                sorted(param_names.get(id(p), "?").replace(".weight", "") for p in gathered)))
        return original_gather(params, forward)

    def observed_fetch(*args, **kwargs):
        result = original_fetch(*args, **kwargs)
        fetches["peak_available"] = max(fetches["peak_available"],
                                        getattr(coordinator, "_PartitionedParameterCoordinator__n_available_params"))
        return result

    setattr(coordinator, gather_name, observed_gather)
    coordinator._fetch_sub_module_impl = observed_fetch
    generator = torch.Generator().manual_seed(1234 + rank)
    for _ in range(spec["steps"]):
        fetches.update(forward=0, backward=0, peak_available=0, order=[])
        ids = torch.randint(model.config.vocab_size, (spec["micro_batch_size"], spec["sequence_len"]), generator=generator)
        loss = engine(input_ids=ids, labels=ids).loss
        engine.backward(loss)
        engine.step()
    report["fetches"] = fetches
    report["trace"] = [module_names.get(id(m), "?") for m in
                       getattr(coordinator, "_PartitionedParameterCoordinator__submodule_order")]
    with open(os.path.join(out, f"fetch-rank-{rank}.json"), "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")


def main(dirs):
    deepspeed = import_deepspeed()
    import transformers  # noqa: F401 - imported once in the zygote
    for out in dirs:
        with open(os.path.join(out, "spec.json")) as f:
            spec = json.load(f)
        if spec.get("lora"):
            import peft  # noqa: F401
        port = free_port()
        run_ranks(spec["world_size"], lambda rank: os.path.join(out, f"fetch-rank-{rank}.log"),
                  lambda rank: run_rank(deepspeed, spec, rank, port, out), 300)
        for rank in range(spec["world_size"]):
            path = os.path.join(out, f"fetch-rank-{rank}.json")
            if not os.path.exists(path):
                with open(os.path.join(out, f"fetch-rank-{rank}.log"), errors="replace") as log:
                    lines = [line.strip() for line in log if line.strip()]
                with open(path, "w") as f:
                    json.dump({"rank": rank, "error": lines[-1] if lines else "no result before the deadline"}, f)
        print(f"{out}: done", flush=True)
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    os._exit(code)
