"""Dumps what transformers (and PEFT) build for a list of cases: the config used and
named_parameters() (name, shape, dtype, requires_grad) in registration order, built on the meta
device (no weights, no downloads).

    python dump_structures.py CASES.json OUT_DIR [NAME ...]
    python dump_structures.py --check CASES.json OUT_DIR   (ctest: the committed fixtures are still
                                                           what the pinned versions build; exit 1 if not)
    python dump_structures.py --check --expect-transformers 4.57.1 CASES.json OUT_DIR
        (the 4.57.1 ctest entry: exit 1 unless that transformers is the one imported, and unless at
        least one fixture of its MAJOR.MINOR was checked)

CASES.json is a list of {"name", "model_type", "overrides": {...}, "lora": null or LoraConfig
kwargs}, and for vision-language types "vision_config" / "vision_overrides" / "model_overrides"
(see make_config). Each model is built from transformers' own defaults (AutoConfig.for_model(model_type))
with the overrides set on its text config (small layer counts keep the fixtures short), in the
dtype the overrides name, as from_pretrained(dtype="auto") loads a checkpoint. With "lora", the
model is wrapped by peft.get_peft_model(model, LoraConfig(**lora)). Writes OUT_DIR/<name>.json =
{"transformers", "peft", "case", "class", "config" (config.json as save_pretrained writes it),
"parameters": [[name, [shape], dtype, requires_grad], ...], "full": {"num_hidden_layers", "numel",
"bytes"} of the model at its default depth (cases without LoRA)}, or {"error": "..."} when transformers
or PEFT refuses the case. The fixtures in tests/sim/architectures/ were produced by this script with
transformers 5.17.0 and peft 0.21.2 (oracles/requirements.txt), except the cases that name
"transformers": "4.57" (MoE experts as transformers 4.x builds them, sim/inputs/architectures/
per_expert_layout.h): those were dumped with transformers 4.57.1 (its wheel unpacked on
PYTHONPATH beside the oracle venv's torch and peft, docs/architectures.md) and are skipped, and
counted as skipped, by a run under another MAJOR.MINOR.
"""
import json
import sys

import peft
import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText
from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES


def make_config(case):
    if "constructor" in case:
        # The config class built from these keys, as from a config.json that holds them: its
        # __post_init__ runs (Gemma4TextConfig derives per_layer_config from global_head_dim and
        # num_global_key_value_heads), and the fixture's config is the keys themselves.
        return AutoConfig.for_model(case["model_type"], **case["constructor"])
    config = AutoConfig.for_model(case["model_type"])
    # Vision-language cases: "vision_config" replaces the tower's config (Pixtral under LLaVA),
    # "vision_overrides" are set on it, "model_overrides" on the composite config
    # (vision_feature_layer, multimodal_projector_bias).
    if "vision_config" in case:
        vision = dict(case["vision_config"])
        config.vision_config = transformers.CONFIG_MAPPING[vision.pop("model_type")](**vision)
    for key, value in case.get("vision_overrides", {}).items():
        setattr(config.vision_config, key, value)
    for key, value in case.get("model_overrides", {}).items():
        setattr(config, key, value)
    # "sub_overrides": {sub-config: {key: value}} for a third sub-config (Idefics2's perceiver_config).
    for sub, overrides in case.get("sub_overrides", {}).items():
        for key, value in overrides.items():
            setattr(getattr(config, sub), key, value)
    text = config.get_text_config()
    for key, value in case.get("overrides", {}).items():
        setattr(text, key, value)
    # BambaConfig's layer_types is a read-only property derived from attn_layer_indices (it follows
    # the layer count by itself); so is Mamba2Config's (every layer "mamba").
    if (getattr(text, "layer_types", None) is not None
            and not isinstance(getattr(type(text), "layers_block_type", None), property)
            and not (isinstance(getattr(type(text), "layer_types", None), property)
                     and getattr(type(text), "layer_types").fset is None)):
        text.layer_types = text.layer_types[: text.num_hidden_layers]
    # mlp_layer_types too (ExaoneMoeConfig): validate_layer_type refuses a config.json whose list is
    # not one entry per layer.
    if isinstance(getattr(text, "mlp_layer_types", None), list) and len(text.mlp_layer_types) > text.num_hidden_layers:
        text.mlp_layer_types = text.mlp_layer_types[: text.num_hidden_layers]
    return config


# The config key that is a type's depth when it is not num_hidden_layers: LongcatFlashModel builds
# num_layers decoder layers and then sets num_hidden_layers to 2 * num_layers (its attention sub-blocks).
DEPTH_KEYS = {"longcat_flash": "num_layers"}


def full_size(case):
    """Parameter count and bytes of the model at transformers' default depth (the case's other
    overrides kept): checks the per-layer rules (MoE layer selection) over a whole real-size model."""
    if "constructor" in case:
        # The same keys at the class's default depth (its own layer_types for it).
        def default_depth(keys):
            # Per-layer keys (lists, GLM-MoE-DSA's index_topk_pattern) belong to the cut depth.
            keys = {k: v for k, v in keys.items()
                    if k not in ("num_hidden_layers", "layer_types", "index_topk_pattern", DEPTH_KEYS.get(case["model_type"]))
                    and not isinstance(v, list)}
            if isinstance(keys.get("text_config"), dict):
                keys["text_config"] = default_depth(keys["text_config"])
            return keys
        keys = default_depth(case["constructor"])
        config = make_config({**case, "constructor": keys})
        model = build({**case, "lora": None}, config)
        params = list(model.parameters())
        depth = DEPTH_KEYS.get(case["model_type"], "num_hidden_layers")
        layers = getattr(config.get_text_config(), depth)
        written = {"model_type": case["model_type"], **keys}
        (written["text_config"] if "text_config" in written else written)[depth] = layers
        return {
            "num_hidden_layers": layers,
            "numel": sum(p.numel() for p in params),
            "bytes": sum(p.numel() * p.element_size() for p in params),
            "config": written,
        }
    overrides = {k: v for k, v in case.get("overrides", {}).items() if k != "num_hidden_layers"}
    config = make_config({**case, "overrides": {k: v for k, v in overrides.items() if not isinstance(v, list)}})
    # A per-layer list (mlp_layer_types) written for the reduced depth goes on with its last entry
    # (["dense", "sparse"] -> dense, then sparse): what hookstream reads past the end of the list.
    text = config.get_text_config()
    for key, value in overrides.items():
        if isinstance(value, list):
            setattr(text, key, value + value[-1:] * (text.num_hidden_layers - len(value)))
    model = build({**case, "lora": None}, config)
    params = list(model.parameters())
    full = {
        "num_hidden_layers": config.get_text_config().num_hidden_layers,
        "numel": sum(p.numel() for p in params),
        "bytes": sum(p.numel() * p.element_size() for p in params),
    }
    if case.get("full_config"):
        # Per-layer keys a cut config cannot extend (Gemma 4's layer_types and per_layer_config at
        # the default depth): the full-depth config.json, which the size check reads instead.
        full["config"] = json.loads(config.to_json_string(use_diff=False))
    return full


def build(case, config):
    text = config.get_text_config()
    dtype = getattr(text, "dtype", None) or torch.float32
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    # A vision-language type is built with its image-text-to-text class (the full model, as the
    # structure oracle builds it).
    auto = (AutoModelForImageTextToText if config.model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES
            else AutoModelForCausalLM)
    with torch.device("meta"):
        model = auto.from_config(config, dtype=dtype)
    if case.get("lora"):
        model = peft.get_peft_model(model, peft.LoraConfig(**case["lora"]))
    return model


def dump(case):
    result = {
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "case": case,
    }
    config = make_config(case)
    result["config"] = ({"model_type": case["model_type"], **case["constructor"]} if "constructor" in case
                        else json.loads(config.to_json_string(use_diff=False)))
    try:
        model = build(case, config)
    except Exception as error:  # the refusal is the expectation
        result["error"] = f"{type(error).__name__}: {error}"
        return result
    result["class"] = type(model).__name__
    if not case.get("lora"):
        result["full"] = full_size(case)
    result["parameters"] = [
        [n, list(p.shape), str(p.dtype).replace("torch.", ""), p.requires_grad] for n, p in model.named_parameters()
    ]
    return result


def render(result):
    return json.dumps(result, indent=None, separators=(",", ":"), sort_keys=False) + "\n"


def main():
    args = sys.argv[1:]
    check = args[:1] == ["--check"]
    if check:
        args = args[1:]
    expect = None
    if args[:1] == ["--expect-transformers"]:
        expect, args = args[1], args[2:]
        if transformers.__version__ != expect:
            print(f"transformers {transformers.__version__} imported from {transformers.__file__}, expected {expect} "
                  "(run tools/setup.sh --oracles: oracles/requirements.txt, docs/oracles.md)")
            sys.exit(1)
    with open(args[0]) as f:
        cases = json.load(f)
    out_dir = args[1]
    wanted = set(args[2:])
    stale = []
    running = ".".join(transformers.__version__.split(".")[:2])
    other_version = [case for case in cases if case.get("transformers", "5.17") != running]
    for case in cases:
        if wanted and case["name"] not in wanted:
            continue
        if case in other_version:
            continue
        result = dump(case)
        path = f"{out_dir}/{case['name']}.json"
        if check:
            try:
                with open(path) as f:
                    same = f.read() == render(result)
            except FileNotFoundError:
                same = False
            if not same:
                stale.append(path)
            continue
        with open(path, "w") as f:
            f.write(render(result))
        print(case["name"], result.get("class", result.get("error")), len(result.get("parameters", [])))
    if check:
        if stale:
            print("fixtures differ from what transformers/peft build now (regenerate them, see docs/architectures.md):")
            for path in stale:
                print("  " + path)
            sys.exit(1)
        if expect and len(cases) == len(other_version):
            print(f"no fixture of transformers {running} in {args[0]}: nothing was checked")
            sys.exit(1)
        print(f"{len(cases) - len(other_version)} fixtures match transformers {transformers.__version__} + peft "
              f"{peft.__version__}; {len(other_version)} of another transformers not re-checked here")


if __name__ == "__main__":
    main()
