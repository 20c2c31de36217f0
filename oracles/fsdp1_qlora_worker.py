"""FSDP1 over a bitsandbytes-quantized base with a PEFT LoRA adapter (axolotl's QLoRA-FSDP examples):
real torch.distributed.fsdp.FullyShardedDataParallel (torch 2.11, CPU, Gloo on 127.0.0.1, one process
per rank), real bitsandbytes 0.50.2 (Linear4bit / Linear8bitLt run on the CPU), real transformers 5.17
and PEFT 0.21, loaded and wrapped the way axolotl and the HF Trainer do it:

* axolotl (src/axolotl/loaders/model.py ModelLoader._set_quantization_config): adapter qlora ->
  BitsAndBytesConfig(load_in_4bit, llm_int8_threshold 6.0, llm_int8_has_fp16_weight False,
  bnb_4bit_compute_dtype = torch_dtype, bnb_4bit_use_double_quant True, bnb_4bit_quant_type nf4,
  bnb_4bit_quant_storage bfloat16); adapter lora + load_in_8bit -> BitsAndBytesConfig(load_in_8bit).
  from_pretrained(dtype=bf16) of a checkpoint saved from the plan's config.json (random weights: bnb
  quantizes real tensors, the meta device is not enough).
* _configure_embedding_dtypes: gradient_checkpointing_enable(gradient_checkpointing_kwargs) on the base
  model; _prepare_model_for_quantization skips prepare_model_for_kbit_training under FSDP + qlora
  (qlora_fsdp) and under fsdp_cpu_ram_efficient_loading; get_peft_model(LoraConfig(r, target_modules,
  bias none, CAUSAL_LM)); the Trainer calls gradient_checkpointing_enable again on the PeftModel.
* transformers' Trainer replaces the wrap policy by PEFT's fsdp_auto_wrap_policy(model) for a PEFT
  model (distributed/fsdp.py update_fsdp_plugin_peft); accelerate builds FSDP(FULL_SHARD,
  use_orig_params, CPUOffload(offload_params), sync_module_states).

Usage: fsdp1_qlora_worker.py DIR [DIR ...]
Each DIR holds spec.json (tests/oracles/fsdp1_qlora_oracle_test.cc): config, world_size, sequence_len,
iterations, use_orig_params, offload_params, sync_module_states, gradient_checkpointing (null,
"reentrant", "non_reentrant"), quantization ("4bit" / "8bit"), lora {r, target_modules}.
Each rank writes DIR/fsdp1-qlora-rank-R.json: the first error (type, text, phase), the FlatParameters
(unit, fqns, numel, padded numel, shard numel, dtype, requires_grad, class names of the original
parameters), the reduce-scatters per iteration, the sharded gradients, and whether bitsandbytes'
quant_state is a parameter or buffer anywhere.
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


def quantization_config(spec):
    import transformers
    if spec["quantization"] == "4bit":
        return transformers.BitsAndBytesConfig(
            load_in_4bit=True, llm_int8_threshold=6.0, llm_int8_has_fp16_weight=False,
            bnb_4bit_compute_dtype=torch.bfloat16, bnb_4bit_use_double_quant=True, bnb_4bit_quant_type="nf4",
            bnb_4bit_quant_storage=torch.bfloat16)
    return transformers.BitsAndBytesConfig(load_in_8bit=True)


def checkpoint_dir(spec, root):
    """Random bf16 weights of the plan's config, saved once per config (from_pretrained quantizes them)."""
    import transformers
    path = os.path.join(root, "checkpoint-" + os.path.basename(spec["config"]).replace(".json", ""))
    if not os.path.isdir(path):
        config = transformers.AutoConfig.from_pretrained(spec["config"])
        torch.manual_seed(0)
        transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).save_pretrained(path)
    return path


def clean(name):
    from torch.distributed.fsdp._common_utils import clean_tensor_name
    return clean_tensor_name(name).replace("._checkpoint_wrapped_module", "")


def build_model(spec, path, report):
    import peft
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(path, quantization_config=quantization_config(spec),
                                                               dtype=torch.bfloat16)
    gc = spec["gradient_checkpointing"]
    gc_kwargs = {"use_reentrant": gc == "reentrant"}
    if gc:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=gc_kwargs)
    lora = spec["lora"]
    model = peft.get_peft_model(model, peft.LoraConfig(r=lora["r"], lora_alpha=2 * lora["r"], lora_dropout=0.0,
                                                      target_modules=lora["target_modules"], bias="none",
                                                      task_type="CAUSAL_LM"))
    if gc:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=gc_kwargs)
    report["parameters"] = [{"name": n, "class": type(p).__name__, "dtype": str(p.dtype).replace("torch.", ""),
                             "shape": list(p.shape), "requires_grad": p.requires_grad}
                            for n, p in model.named_parameters()]
    report["quant_state_in_buffers"] = any("absmax" in n or "quant_map" in n for n, _ in model.named_buffers())
    return model


def flat_parameters(fsdp):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    out = []
    for name, module in fsdp.named_modules():
        if not isinstance(module, FSDP) or module._handle is None:
            continue
        fp = module._handle.flat_param
        out.append({"unit": clean(name), "fqns": [clean(f) for f in fp._fqns],
                    "numel": int(fp._unpadded_unsharded_size.numel()), "shard_numel": int(fp._sharded_size.numel()), "dtype": str(fp.dtype).replace("torch.", ""),
                    "requires_grad": bool(fp.requires_grad)})
    return out


def run_rank(spec, path, rank, port, out):
    from peft.utils.other import fsdp_auto_wrap_policy
    from torch.distributed.fsdp import CPUOffload, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(spec["world_size"]), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=spec["world_size"])
    torch.set_num_threads(1)
    report = {"rank": rank, "error": None, "reduce_scatters": [], "all_gathers": 0}
    phase = "load"
    if spec["sync_module_states"]:
        # FSDP1 refuses CPU module states with sync_module_states (NCCL cannot broadcast host tensors):
        # on the GPU the states are on device_id. The oracle lifts that device check only; the real
        # broadcast (_sync_module_params_and_buffers -> _sync_params_and_buffers) runs over Gloo.
        from torch.distributed.fsdp import _init_utils
        _init_utils._check_module_states_for_sync_module_states = lambda module_states: None
    if spec["offload_params"]:
        # CPUOffload pins the sharded FlatParameter (_flat_param.py init_flat_param_attributes:
        # `_local_shard.pin_memory()`), which needs a CUDA driver. Pinning changes where the shard
        # lives, not which FlatParameters exist or when hooks run; the oracle makes pin_memory the
        # identity so that FSDP1's offload path (the CPU shard, the CPU gradient) runs on the CPU.
        torch.Tensor.pin_memory = lambda self, *args, **kwargs: self
        # With offload, the final callback waits for the device stream
        # (_runtime_utils.py _post_backward_final_callback: current_stream().synchronize()); CPU
        # work is synchronous and torch.cpu.Stream has no synchronize: a no-op stands in.
        if not hasattr(torch.cpu.Stream, "synchronize"):
            torch.cpu.Stream.synchronize = lambda self: None
    try:
        model = build_model(spec, path, report)
        phase = "wrap"
        fsdp = FSDP(model, auto_wrap_policy=fsdp_auto_wrap_policy(model), sharding_strategy=ShardingStrategy.FULL_SHARD,
                    use_orig_params=spec["use_orig_params"], cpu_offload=CPUOffload(offload_params=spec["offload_params"]),
                    sync_module_states=spec["sync_module_states"], device_id=torch.device("cpu"))
        report["flat_parameters"] = flat_parameters(fsdp)
        # bitsandbytes keeps the QuantState on the Params4bit and on the Linear4bit
        # (fix_4bit_weight_quant_state_from_module): after FSDP's views replace the Params4bit, only
        # the module's copy is left.
        report["linear4bit_quant_state_on_module"] = sorted({type(m).__name__ for m in fsdp.modules()
                                                            if getattr(m, "quant_state", None) is not None})
        reduce_scatter = dist.reduce_scatter_tensor

        def counted(output, input, *args, **kwargs):
            report["reduce_scatters"][-1].append([int(input.numel()), str(input.dtype).replace("torch.", "")])
            return reduce_scatter(output, input, *args, **kwargs)
        dist.reduce_scatter_tensor = counted
        vocab = model.config.vocab_size
        for iteration in range(spec["iterations"]):
            report["reduce_scatters"].append([])
            ids = torch.randint(vocab, (1, spec["sequence_len"]), generator=torch.Generator().manual_seed(rank + 7 * iteration))
            phase = "forward"
            loss = fsdp(input_ids=ids, labels=ids).loss
            if iteration == 0:
                report["loss_requires_grad"] = bool(loss.requires_grad)
            phase = "backward"
            loss.backward()
        phase = "after"
        report["sharded_grads"] = [{"unit": clean(n), "numel": None if m._handle.flat_param.grad is None
                                    else int(m._handle.flat_param.grad.numel())}
                                   for n, m in fsdp.named_modules() if isinstance(m, FSDP) and m._handle is not None]
    except BaseException as e:  # noqa: BLE001 - the error is the observation
        report["error"] = {"type": type(e).__name__, "text": str(e).split("\nException raised from ")[0], "phase": phase,
                           "traceback_tail": traceback.format_exc().splitlines()[-8:]}
    with open(os.path.join(out, f"fsdp1-qlora-rank-{rank}.json"), "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")


def main(dirs):
    import bitsandbytes  # noqa: F401 - imported once, before forking
    import peft.utils.other  # noqa: F401
    import transformers  # noqa: F401
    root = os.path.dirname(os.path.abspath(dirs[0]))
    for out in dirs:
        with open(os.path.join(out, "spec.json")) as f:
            spec = json.load(f)
        path = checkpoint_dir(spec, root)
        port = free_port()
        killed = run_ranks(spec["world_size"], lambda rank: os.path.join(out, f"fsdp1-qlora-rank-{rank}.log"),
                           lambda rank: run_rank(spec, path, rank, port, out), 120)
        for rank in range(spec["world_size"]):
            report_path = os.path.join(out, f"fsdp1-qlora-rank-{rank}.json")
            if rank in killed or not os.path.exists(report_path):
                with open(report_path, "w") as f:
                    json.dump({"rank": rank, "error": {"type": "hang" if rank in killed else "crash", "text": "", "phase": ""}}, f)
        print(out, "done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
