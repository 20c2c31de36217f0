"""What the real stack makes of a DeepSpeed JSON before DeepSpeed trains with it.

Usage: deepspeed_resolve.py CASES.json OUT.json

Each case: {"json": path, "via": "axolotl" | "accelerate", "micro_batch_size": n,
"gradient_accumulation_steps": n}. For "axolotl" (the plan's own `deepspeed:`) the environment is
what axolotl's prepare_optim_env / setup_deepspeed_env (src/axolotl/utils/trainer.py) exports
(axolotl is not in the oracle venv, so these four lines restate it), and transformers 5.17's
TrainingArguments(deepspeed=path) runs HfTrainerDeepSpeedConfig.trainer_config_process and
accelerate 1.15's DeepSpeedPlugin(hf_ds_config=...) for real. For "accelerate"
(deepspeed_config.deepspeed_config_file of an accelerate config) `accelerate launch` exports
ACCELERATE_USE_DEEPSPEED and ACCELERATE_DEEPSPEED_CONFIG_FILE, and TrainingArguments builds
DeepSpeedPlugin() from them. The resolved zero_optimization then goes through DeepSpeed 0.19.8's
own DeepSpeedZeroConfig (which drops the "auto" values nobody filled). Each case runs in a forked
child, so no environment or accelerate singleton leaks between cases.
"""
import json
import os
import sys
import tempfile


def device(offload):
    if offload is None:
        return "none"
    return str(getattr(offload.device, "value", offload.device))


def resolve(case, out_path):
    for key in list(os.environ):
        if key.startswith("ACCELERATE_"):
            del os.environ[key]
    from transformers import TrainingArguments
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    path = case["json"]
    os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"
    os.environ["ACCELERATE_DEEPSPEED_CONFIG_FILE"] = path
    kwargs = dict(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=case["micro_batch_size"],
                  gradient_accumulation_steps=case["gradient_accumulation_steps"], report_to=[])
    if case["via"] == "axolotl":
        # axolotl's prepare_optim_env + setup_deepspeed_env, restated.
        with open(path, encoding="utf-8") as fin:
            config = json.load(fin)
        os.environ["ACCELERATE_GRADIENT_ACCUMULATION_STEPS"] = str(case["gradient_accumulation_steps"])
        stage = config.get("zero_optimization", {}).get("stage", None)
        if stage:
            os.environ["ACCELERATE_DEEPSPEED_ZERO_STAGE"] = str(stage)
            if stage == 3:
                os.environ["ACCELERATE_DEEPSPEED_ZERO3_INIT"] = "true"
        kwargs["deepspeed"] = path
    try:
        args = TrainingArguments(**kwargs)
        zero_dict = dict(args.deepspeed_plugin.deepspeed_config.get("zero_optimization", {}))
        zero = DeepSpeedZeroConfig(**zero_dict)
        result = {
            "ok": True,
            "stage": int(zero.stage),
            "overlap_comm": bool(zero.overlap_comm),
            "contiguous_gradients": bool(zero.contiguous_gradients),
            "offload_optimizer": device(zero.offload_optimizer),
            "offload_param": device(zero.offload_param),
        }
    except Exception as error:  # the failure is the result
        result = {"ok": False, "error": f"{type(error).__name__}: {error}"}
    with open(out_path, "w", encoding="utf-8") as out:
        json.dump(result, out)


def main():
    cases = json.load(open(sys.argv[1], encoding="utf-8"))
    import transformers  # noqa: F401  (imported once, before the forks)
    import deepspeed.runtime.zero.config  # noqa: F401
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(cases):
            out_path = os.path.join(tmp, f"{i}.json")
            pid = os.fork()
            if pid == 0:
                try:
                    resolve(case, out_path)
                finally:
                    os._exit(0)
            os.waitpid(pid, 0)
            with open(out_path, encoding="utf-8") as fin:
                results.append(json.load(fin))
    with open(sys.argv[2], "w", encoding="utf-8") as out:
        json.dump(results, out, indent=1)


if __name__ == "__main__":
    main()
