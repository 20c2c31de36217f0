"""axolotl's example configs, each with its OWN base_model, as a user with a Hugging Face cache runs them.

tests/cli/axolotl_examples_test.cc runs the 70 examples against one Llama config (--model); this
oracle gives each example the architecture its base_model really has. base-model-types.json names
the model_type of every base_model; the script lays a Hugging Face cache out the way
huggingface_hub leaves it after a download (models--ORG--NAME/refs/main and, for axolotl's
`revision_of_model`, refs/<revision> holding the commit: file_download.py
_cache_commit_hash_for_specific_revision; snapshots/<commit>/config.json), each config.json the real
one where ../shared/corpora/hf-configs or bench/hf-configs has it, else transformers' own default
config of the type (AutoConfig.for_model: the example's architecture at transformers' default sizes;
no download). Then `hookstream verify EXAMPLE --world-size 2` (no --world-size for an example that sizes
its own mesh: dp_shard_size, expert_parallel_size, ...) runs from a folder holding axolotl's
deepspeed_configs/, with HF_HUB_CACHE pointing at the cache and no --model.

Every example must end in one of:
  verdict        exit 0 or 1 with a report (DDP, FSDP, ZeRO, or the explicit engine_not_modelled);
  refused        exit 2, one line: transformers knows the type and hookstream cannot model it yet,
                 or the type is the repository's custom code (auto_map), not one transformers ships,
                 or the config.json is transformers' default of a type whose default transformers
                 itself cannot build: both refuse it;
A type whose default transformers cannot build for want of a key every real config.json has gets that
key supplied (oracles/supplied_keys.py, the value taken from transformers itself): DBRX's
attn_config.rope_theta, LFM2-MoE's layer_types; the cache then holds "the default config + KEY".
anything else (a crash, a multi-line error, a lookup failure) fails. --min-verdicts N fails the run
when fewer than N examples get a verdict (the count this branch reached: it may only go up).

  axolotl_example_models.py --hookstream build/tools/hookstream [--min-verdicts N] [--markdown FILE]
"""
import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ["HF_HUB_OFFLINE"] = "1"

from transformers import AutoConfig  # noqa: E402
from transformers.models.auto import modeling_auto  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
import supplied_keys  # noqa: E402  (oracles/supplied_keys.py)

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
CORPUS = REPO.parent / "shared" / "corpora"
COMMIT = "0123456789abcdef0123456789abcdef01234567"

# The DeepSpeed JSON axolotl's mixtral_22.yml names (axolotl's deepspeed_configs/, as its file name
# says: ZeRO-3, parameters and optimizer state offloaded to the CPU); the same file the C++ test writes.
ZERO3_OFFLOAD = {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True},
                                       "offload_param": {"device": "cpu", "pin_memory": True}},
                 "bf16": {"enabled": True}, "gradient_accumulation_steps": "auto",
                 "train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto"}


def model_class(model_type):
    classes = dict(modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    classes.update(modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES)
    return classes.get(model_type)


def write_config(snapshot, repo, entry):
    # An entry is the model_type, or {"model_type", "auto_map"} for a repository's custom code.
    model_type = entry if isinstance(entry, str) else entry["model_type"]
    real = {p.stem: p for folder in (CORPUS / "hf-configs", REPO / "bench" / "hf-configs") for p in folder.glob("*.json")}
    name = repo.split("/")[-1]
    if name in real:
        shutil.copyfile(real[name], snapshot / "config.json")
        return "real config.json"
    try:
        config = AutoConfig.for_model(model_type)
    except ValueError:  # not a transformers type (custom code): the keys that say so, as the file has them
        (snapshot / "config.json").write_text(json.dumps(entry if isinstance(entry, dict) else {"model_type": model_type}) + "\n")
        return "not a transformers type"
    config.architectures = [model_class(model_type) or ""]
    added = supplied_keys.supply(config, model_type)
    if not added:
        config.to_json_file(snapshot / "config.json", use_diff=False)
        return "transformers default config"
    (snapshot / "config.json").write_text(json.dumps(supplied_keys.config_dict(config, model_type), indent=2, sort_keys=True) + "\n")
    # The supplied config must be one transformers builds, or the verdict would hold hookstream to
    # nothing.
    if why := transformers_cannot_build(snapshot / "config.json"):
        sys.exit(f"{repo}: transformers cannot build the default config with {', '.join(added)} supplied: {why}")
    return "transformers default config + " + ", ".join(added)


def lay_out_cache(cache, examples, types):
    sources = {}
    for example in examples:
        text = example.read_text()
        repo = re.search(r"^base_model:\s*(\S+)", text, re.M).group(1)
        revision = re.search(r"^revision_of_model:\s*(\S+)", text, re.M)
        folder = cache / ("models--" + repo.replace("/", "--"))
        (folder / "refs").mkdir(parents=True, exist_ok=True)
        (folder / "refs" / "main").write_text(COMMIT)
        if revision:
            (folder / "refs" / revision.group(1)).write_text(COMMIT)
        snapshot = folder / "snapshots" / COMMIT
        if not snapshot.exists():
            snapshot.mkdir(parents=True)
            if repo not in types:
                sys.exit(f"{example.name}: base_model {repo} is not in base-model-types.json")
            sources[repo] = write_config(snapshot, repo, types[repo])
    return sources


def transformers_cannot_build(config_path):
    """Why transformers cannot build the model of this config.json on the meta device, or ""."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText
    try:
        config = AutoConfig.from_pretrained(str(config_path.parent))
        auto = (AutoModelForImageTextToText if config.model_type in modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES
                else AutoModelForCausalLM)
        with torch.device("meta"):
            auto.from_config(config)
    except Exception as error:  # the refusal is what is checked
        return f"{type(error).__name__}: {error}"
    return ""


def classify(code, out):
    lines = [line for line in out.strip().splitlines() if line.strip()]
    if code in (0, 1) and lines:
        return "verdict"
    if code == 2 and len(lines) == 1 and ("cannot model it yet" in lines[0] or "the model repository's own code" in lines[0]):
        return "refused"
    return "error"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--hookstream", required=True)
    parser.add_argument("--min-verdicts", type=int, default=0)
    parser.add_argument("--markdown")
    args = parser.parse_args()
    hookstream = str(pathlib.Path(args.hookstream).resolve())  # verify runs from another folder
    types = json.loads((HERE / "base-model-types.json").read_text())["models"]
    examples = sorted(p for p in (CORPUS / "axolotl-examples").iterdir() if p.suffix in (".yml", ".yaml"))
    rows = []
    with tempfile.TemporaryDirectory(prefix="axolotl-example-models-") as tmp:
        cache, root = pathlib.Path(tmp) / "hub", pathlib.Path(tmp) / "axolotl"
        (root / "deepspeed_configs").mkdir(parents=True)
        (root / "deepspeed_configs" / "zero3_bf16_cpuoffload_all.json").write_text(json.dumps(ZERO3_OFFLOAD))
        sources = lay_out_cache(cache, examples, types)
        env = dict(os.environ, HF_HUB_CACHE=str(cache))
        for example in examples:
            repo = re.search(r"^base_model:\s*(\S+)", example.read_text(), re.M).group(1)
            # An example that sizes its own mesh (dp_shard_size: 16 "requires 2x8xH100 nodes",
            # expert_parallel_size x dp_shard_size = world) names its world size: hookstream takes
            # the product, as accelerate and axolotl's plugins check it; the others run on 2 ranks.
            sized = re.search(r"^(dp_shard_size|dp_replicate_size|expert_parallel_size|tensor_parallel_size|"
                              r"context_parallel_size):\s*([2-9]|[1-9][0-9]+)\b", example.read_text(), re.M)
            world = [] if sized else ["--world-size", "2"]
            proc = subprocess.run([hookstream, "verify", str(example), *world], cwd=root, env=env,
                                  capture_output=True, text=True)
            out = proc.stdout + proc.stderr
            status = classify(proc.returncode, out)
            lines = [line for line in out.strip().splitlines() if line.strip()]
            why_not_built = ""
            if status == "error" and proc.returncode == 2 and len(lines) == 1 and sources.get(repo) == "transformers default config":
                why_not_built = transformers_cannot_build(cache / ("models--" + repo.replace("/", "--")) / "snapshots" / COMMIT / "config.json")
                if why_not_built:
                    status = "refused"
            first = out.strip().splitlines()[0] if out.strip() else ""
            detail = first.replace(str(cache), "HF_HUB_CACHE") if status != "verdict" else ""
            if why_not_built:
                detail += f" (transformers cannot build this default config either: {why_not_built[:80]})"
            model_type = types[repo] if isinstance(types[repo], str) else types[repo]["model_type"]
            rows.append({"example": example.name, "base_model": repo, "model_type": model_type, "exit": proc.returncode,
                         "status": status, "detail": detail})
            print(f"{status:8s} exit {proc.returncode}  {example.name:55s} {model_type:18s} {detail[:160]}", flush=True)
    counts = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    print(f"axolotl examples with their own base_model: {len(rows)}, " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) +
          f" (configs: {sum(1 for s in sources.values() if s == 'real config.json')} real, "
          f"{sum(1 for s in sources.values() if s == 'transformers default config')} transformers defaults, "
          f"{sum(1 for s in sources.values() if s.startswith('transformers default config + '))} transformers defaults "
          f"with a supplied key)")
    if args.markdown:
        lines = ["| example | base_model | model_type | exit | result |", "|---|---|---|---|---|"]
        for r in rows:
            result = r["status"] + (": " + r["detail"].split(": ", 2)[-1][:140] if r["detail"] else "")
            lines.append(f"| {r['example']} | {r['base_model']} | {r['model_type']} | {r['exit']} | {result.replace('|', '/')} |")
        pathlib.Path(args.markdown).write_text("\n".join(lines) + "\n")
    failed = counts.get("error", 0) > 0 or counts.get("verdict", 0) < args.min_verdicts
    for r in rows:
        if r["status"] == "error":
            print(f"ERROR {r['example']}: exit {r['exit']}: {r['detail']}")
    if counts.get("verdict", 0) < args.min_verdicts:
        print(f"FAIL: {counts.get('verdict', 0)} verdicts, expected at least {args.min_verdicts}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
