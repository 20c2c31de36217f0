"""DeepSpeed's own ZeRO model-state memory estimates, for the memory model's oracle test.

Usage: zero_memory_estimates.py CASES.json OUT.json (DeepSpeed logs to stdout, so the answer goes to a file)
CASES.json: a list of {"config": path to an HF config.json, "stage": 2 or 3, "gpus": N,
"offload_optimizer": bool, "offload_param": bool}. Writes one JSON list with, per case, the model's
parameter count and largest module as transformers builds it (on the meta device), and the
(cpu_mem, gpu_mem) that DeepSpeed 0.19.8's estimate_zero2_model_states_mem_needs /
estimate_zero3_model_states_mem_needs return (deepspeed/runtime/zero/stage_1_and_2.py, stage3.py),
with additional_buffer_factor=1 (the factor is a safety margin, not memory the engine allocates).
"""
import json
import sys

import torch
import transformers
from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs


def model_params(config_path):
    config = transformers.AutoConfig.from_pretrained(config_path)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    # deepspeed's model_to_params (stage3.py) de-duplicates shared parameters by data_ptr(), which
    # is 0 for every meta tensor; the same rule by identity.
    total = sum({id(p): p.numel() for p in model.parameters()}.values())
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    return total, largest


def main():
    cases = json.load(open(sys.argv[1]))
    cache = {}
    out = []
    for case in cases:
        if case["config"] not in cache:
            cache[case["config"]] = model_params(case["config"])
        total, largest = cache[case["config"]]
        if case["stage"] == 3:
            cpu, gpu, _largest_layer_memory = estimate_zero3_model_states_mem_needs(total, largest, num_gpus_per_node=case["gpus"], num_nodes=1,
                                                                                   cpu_offload=case["offload_optimizer"],
                                                                                   cpu_offload_params=case["offload_param"], zero_init=True,
                                                                                   additional_buffer_factor=1)
        else:
            cpu, gpu = estimate_zero2_model_states_mem_needs(total, num_gpus_per_node=case["gpus"], num_nodes=1,
                                                             cpu_offload=case["offload_optimizer"], additional_buffer_factor=1)
        out.append({"total_params": total, "largest_layer_params": largest, "cpu_mem": int(cpu), "gpu_mem": int(gpu)})
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
