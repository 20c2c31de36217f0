"""FSDP1 with PEFT's wrap policy and LoRA on expert tensors (lora_target_parameters, PEFT's
ParamWrapper): real torch.distributed.fsdp.FullyShardedDataParallel (torch 2.11, CPU, Gloo on
127.0.0.1, one process per rank) around a real transformers model built from the plan's config.json
(AutoModelForCausalLM.from_config, random weights) with real PEFT 0.21 LoRA, wrapped as the HF
Trainer wraps a PEFT model for FSDP1: PEFT's own fsdp_auto_wrap_policy (transformers
update_fsdp_plugin_peft; peft/utils/other.py), FULL_SHARD, the plan's use_orig_params.

oracles/fsdp1_worker.py's TinyModel has no ParamWrapper (it calls every module it reads), so this
case runs the real model instead.

Usage: fsdp1_param_wrapper_worker.py DIR [DIR ...]
Each DIR holds a spec.json (written by tests/oracles/fsdp1_param_wrapper_oracle_test.cc): config,
world_size, sequence_len, use_orig_params, lora {r, target_modules, target_parameters}. Each rank
writes DIR/fsdp1-pw-rank-R.json: the first error (type, text, phase "forward"/"backward") of one
forward and backward, or none, and the number of FSDP units.
"""
import json
import os
import sys
import traceback

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rank_processes import free_port, run_ranks  # noqa: E402


def build_model(spec):
    import peft
    import transformers
    config = transformers.AutoConfig.from_pretrained(spec["config"])
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    lora = spec["lora"]
    return peft.get_peft_model(model, peft.LoraConfig(r=lora["r"], target_modules=lora["target_modules"],
                                                      target_parameters=lora["target_parameters"]))


def run_rank(spec, rank, port, out):
    from peft.utils.other import fsdp_auto_wrap_policy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardingStrategy
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(spec["world_size"]), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=spec["world_size"])
    torch.set_num_threads(1)
    report = {"rank": rank, "error": None}
    model = build_model(spec)
    phase = "wrap"
    try:
        fsdp = FSDP(model, auto_wrap_policy=fsdp_auto_wrap_policy(model), sharding_strategy=ShardingStrategy.FULL_SHARD,
                    use_orig_params=spec["use_orig_params"], device_id=torch.device("cpu"), sync_module_states=False)
        report["units"] = sum(1 for m in fsdp.modules() if isinstance(m, FSDP))
        vocab = model.config.vocab_size
        ids = torch.randint(vocab, (1, spec["sequence_len"]), generator=torch.Generator().manual_seed(rank))
        phase = "forward"
        loss = fsdp(input_ids=ids, labels=ids).loss
        phase = "backward"
        loss.backward()
    except BaseException as e:  # noqa: BLE001 - the error is the observation
        report["error"] = {"type": type(e).__name__, "text": str(e).split("\nException raised from ")[0], "phase": phase,
                           "traceback_tail": traceback.format_exc().splitlines()[-6:]}
    with open(os.path.join(out, f"fsdp1-pw-rank-{rank}.json"), "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")


def main(dirs):
    import peft.utils.other  # noqa: F401 - imported once, before forking
    import transformers  # noqa: F401
    for out in dirs:
        with open(os.path.join(out, "spec.json")) as f:
            spec = json.load(f)
        port = free_port()
        run_ranks(spec["world_size"], lambda rank: os.path.join(out, f"fsdp1-pw-rank-{rank}.log"),
                  lambda rank: run_rank(spec, rank, port, out), 180)
        for rank in range(spec["world_size"]):
            path = os.path.join(out, f"fsdp1-pw-rank-{rank}.json")
            if not os.path.exists(path):
                with open(path, "w") as f:
                    json.dump({"rank": rank, "error": {"type": "worker_failed", "text": "no result", "phase": "?"}}, f)
        print(f"{out}: done", flush=True)
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    os._exit(code)
