"""The structure oracle: hookstream's model structures against what transformers + PEFT build.

For every model type the pinned transformers registers for causal LM and image-text-to-text
(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES, built with the
class those mappings name) with its own default config (AutoConfig.for_model), and for every real
config.json under --configs, it
  1. reduces the decoder to --layers layers (num_hidden_layers of the config and its text config,
     and their per-layer lists), the same file on both sides, and sets dtype bfloat16;
  2. builds the model on the meta device (no weights, no downloads) and, per variant, wraps it with
     PEFT LoRA (r=8): none (full fine-tune), a fixed target list (q/k/v/o/gate/up/down_proj), and
     "all-linear";
  3. runs `hookstream inspect --format json` on the same config.json with the same plan, and
     compares parameter names, order, shapes, dtypes, trainable and tied flags field by field.

A type whose default config transformers cannot build for want of a key every real config.json of
the type has (oracles/supplied_keys.py: DBRX's attn_config.rope_theta, LFM2-MoE's layer_types) is
also run as "TYPE + KEY": the default config with that key, its value taken from transformers.

The invariant (exit 1 otherwise): every type is matched exactly in every variant, or refused by
hookstream with exit 2 "transformers ... knows <type>; hookstream cannot model it yet". For a
refused type the oracle also reports the first difference hookstream would have had if it accepted
it (the config with model_type "llama", which hookstream models): the work list for new types.

  structure_oracle.py --hookstream build/tools/hookstream [--configs DIR] [--summary FILE]
                      [--markdown FILE] [--types a,b] [--layers 2]
  structure_oracle.py --write-known-types model-types/transformers.txt
"""
import argparse
import contextlib
import io
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ["HF_HUB_OFFLINE"] = "1"

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoConfig  # noqa: E402
from transformers.models.auto import configuration_auto, modeling_auto  # noqa: E402
import peft  # noqa: E402
from peft import LoraConfig, get_peft_model  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import supplied_keys  # noqa: E402  (oracles/supplied_keys.py)

VARIANTS = {
    "full": None,
    "lora": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "all-linear": "all-linear",
}
DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


# Why a type is not a decoder-only / vision-language causal LM (the oracle's target), or which kind
# of layer keeps hookstream from modelling it: families named by model_type, as transformers registers
# them. A type in none of these and left out is reported as "decoder-only, not described yet" or
# "vision tower not described yet" (image-text-to-text), with its first difference.
NON_TARGET_FAMILIES = {
    "encoder (BERT-style, a *ForCausalLM head on an encoder; not a target)": {
        "bert", "bert-generation", "big_bird", "camembert", "data2vec-text", "electra", "ernie",
        "megatron-bert", "rembert", "roberta", "roberta-prelayernorm", "roc_bert", "roformer", "xlm",
        "xlm-roberta", "xlm-roberta-xl", "xlnet", "xmod"},
    "encoder-decoder or the decoder half of one (not a target)": {
        "bart", "bigbird_pegasus", "blenderbot", "blenderbot-small", "blip", "florence2", "marian",
        "mbart", "mvp", "pegasus", "pix2struct", "plbart", "pp_formulanet", "prophetnet", "t5gemma2",
        "trocr", "udop", "vision-encoder-decoder", "whisper"},
    "audio / speech / music, omni or protein inputs (not a target)": {
        "moshi", "musicgen", "musicgen_melody", "qwen2_5_omni_thinker", "qwen3_omni_moe_thinker",
        "evolla"},
    # Token mixers hookstream describes: attention, the gated DeltaNet (qwen3_next, qwen3_5*,
    # olmo_hybrid), Mamba2 (bamba, granitemoehybrid, nemotron_h, falcon_h1, mamba2), Mamba1
    # (mamba, falcon_mamba, jamba), LFM2's short convolution (lfm2, lfm2_moe), MiniMax's
    # lightning attention (minimax) and Kimi delta attention (kimi_linear, costed as the DeltaNet).
    "state-space, recurrent or linear-attention layers whose mixer is not described yet (shared attention blocks, RWKV, xLSTM)": {
        "recurrent_gemma", "rwkv", "xlstm", "zamba", "zamba2", "hrm_text", "blt"},
}

# What keeps each remaining recurrent / state-space type from the table (the per-case column of the
# markdown names it; the counts table groups them under the family above).
MIXER_REASONS = {
    "zamba": "a shared attention block reused across layers (Zamba's hybrid layers)",
    "zamba2": "shared attention blocks with per-layer LoRA adapters reused across Mamba2 layers",
    "recurrent_gemma": "RG-LRU recurrent blocks",
    "rwkv": "RWKV time-mix / channel-mix blocks",
    "xlstm": "mLSTM / sLSTM blocks",
    "hrm_text": "hierarchical recurrent modules (z_L / z_H state parameters)",
    "blt": "byte-level patches with local encoder/decoder models",
}

# What keeps each remaining vision-language type from the tower/projector tables (branch arch13
# examined each; the per-case column of the markdown names it).
VLM_REASONS = {
    "blip-2": "Q-Former (a BERT-style encoder with cross-attention layers and query_tokens) between the tower and an OPT decoder at the top level",
    "instructblip": "Q-Former with its own embeddings between the tower and the decoder (as BLIP-2)",
    "instructblipvideo": "Q-Former with its own embeddings between the tower and the decoder (as BLIP-2)",
    "deepseek_vl_hybrid": "two towers: a SAM-style high-resolution ViT with neck convolutions beside SigLIP, mixed by high_res_vision_alpha",
    "ernie4_5_vl_moe": "decoder ernie4_5_vl_moe_text (modality-split experts) not described; resampler_model with spatial/temporal linears",
    "fuyu": "no tower: vision_embed_tokens, a Linear over raw patches registered after the language model",
    "git": "GIT's BERT-style text decoder with the image encoder's tokens prepended (git.encoder), not a causal-LM decoder of the table",
    "glm5_next": "decoder glm5_next_text not described (its tower is GLM-OCR's with a projection_intermediate_size merger)",
    "got_ocr2": "SAM ViTDet tower (windowed attention with rel_pos_h/rel_pos_w, neck convolutions) and a convolutional projector",
    "pp_chart2table": "GOT-OCR2's SAM ViTDet tower and convolutional projector (built with GotOcr2ForConditionalGeneration)",
    "idefics": "gated cross-attention layers interleaved with IDEFICS's own decoder layers (model.gated_cross_attn_layers)",
    "inkling_mm_model": "decoder inkling_text not described; an audio tower beside the vision encoder",
    "janus": "image generation parts (VQ-VAE vqmodel, generation_embeddings, generation_aligner, generation_head) beside the understanding tower",
    "kosmos-2": "its own text decoder (kosmos_2_text_model) and a latent-query cross-attention projector, at the top level",
    "kosmos-2.5": "its own text decoder (kosmos_2_5_text_model), a Pix2Struct-style tower and a latent-query projector",
    "muse_glimmer": "decoder muse_glimmer_text not described (tower: MoonViT-style with window/full layer_types and a linear patch embedder)",
    "pi0": "a robot action model (PaliGemma plus a DiT action expert and action heads), not a causal LM",
    "qwen4_exp": "decoder qwen4_exp_text (hyper-connections) not described; tower Qwen3-VL-like",
    "step3p7": "decoder step3p5 not described (tower: InternViT-like layers with two 3x3 downsampler convolutions)",
    "video_llava": "two CLIP towers (video_tower, image_tower) of which a batch runs one: the other's parameters get no gradient, which the single-tower description cannot express",
    "minicpmv4_6": "a merger (vit_merger: attention and MLP) inserted inside the SigLIP tower after insert_layer_id, changing the token count of the later layers",
}


# What keeps each remaining decoder-only type from the table, from its named_parameters() under
# transformers 5.17 (examined on branch arch14; the counts table keeps them under "decoder-only").
DECODER_REASONS = {
    "hy_v4": "DeepSeek sparse attention with attention sinks and an output gate_proj, and DeepSeek-V4's hyper-connections (attn_hc / ffn_hc / hc_head)",
    "axk2": "an indexer beside MLA with q_gate_proj, and input_layernorm as a norm with its own MLP (fc1 / fc2)",
    "cpmant": "its own layout (cpmant.encoder.layers.N.self_att / ffn, a segment embedding, a relative position bias table, lm_head narrower than the input embedding)",
    "zaya": "convolutional q/k with a delayed value projection, an MLP router, residual-scale modules and an input scale before the embedding",
    "qwen4_exp_text": "per-sublayer hyper-connections (hc_norm, input_mix_weight_down/up, block_inject_weight) and a model-level hyper_connection_mixer over gated-DeltaNet + MoE layers",
    "inkling_text": "r_proj and short convolutions on k, v and both residual branches, a relative-logits table, stacked shared experts and a router global_scale",
    "modernbert-decoder": "ModernBERT's layout (embeddings.norm, no attn_norm in layer 0, fused Wi, a dense + norm prediction head and a biased `decoder`)",
    "phi4_multimodal": "Phi-3's decoder with a SigLIP image tower and a Conformer audio encoder under embed_tokens_extend (audio inputs)",
}


NO_ORACLE = "transformers cannot build its default config, or leaves a key it needs at None (hookstream refuses it too)"


def left_out_reason(model_type, mapping):
    for reason, types in NON_TARGET_FAMILIES.items():
        if model_type in types:
            return reason
    if mapping == "image_text_to_text":
        return "vision-language: its vision tower (or projector) is not described yet"
    return "decoder-only: not described in the architecture table yet"


def write_known_types(path):
    types = sorted(configuration_auto.CONFIG_MAPPING_NAMES)
    with open(path, "w") as f:
        f.write(f"# transformers {transformers.__version__}: the model types of CONFIG_MAPPING_NAMES, one a line.\n")
        f.write("# Written by oracles/structure_oracle.py --write-known-types; read by sim/inputs/model_source/model_types.cc to tell\n")
        f.write("# a type transformers knows (and hookstream cannot model yet) from a misspelled one.\n")
        for t in types:
            f.write(t + "\n")


def model_classes():
    """type -> (mapping, class name); image-text-to-text wins for a type in both (the full VL model)."""
    classes = {}
    for t, name in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items():
        classes[t] = ("causal_lm", name)
    for t, name in modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.items():
        classes[t] = ("image_text_to_text", name)
    return classes


def reduce_layers(config, layers):
    """num_hidden_layers of the config and its text config cut to `layers`, with the per-layer
    lists transformers validates against it (layer_types, mlp_layer_types, ...)."""
    targets = [config]
    text = config.get_text_config()
    if text is not config:
        targets.append(text)
    for c in targets:
        # LongcatFlashModel builds num_layers decoder layers (each two attention sub-blocks) and sets
        # num_hidden_layers to twice that itself: num_layers is its depth.
        if c.model_type == "longcat_flash" and isinstance(getattr(c, "num_layers", None), int) and c.num_layers > layers:
            c.num_layers = layers
        n = getattr(c, "num_hidden_layers", None)
        if not isinstance(n, int) or n <= layers:
            continue
        c.num_hidden_layers = layers
        for key, value in list(vars(c).items()):
            if isinstance(value, list) and len(value) == n:
                setattr(c, key, value[:layers])


def build_config(model_type, arch, layers):
    config = AutoConfig.for_model(model_type)
    reduce_layers(config, layers)
    config.architectures = [arch]
    config.dtype = torch.bfloat16
    return config


def config_from_file(path, layers):
    data = json.loads(pathlib.Path(path).read_text())
    config = AutoConfig.for_model(**data)
    reduce_layers(config, layers)
    config.dtype = torch.bfloat16
    return config


def transformers_parameters(config, cls_name, variant):
    """[(name, shape, dtype, trainable, tied names)] of the model as PEFT wraps it, in
    named_parameters() order (tied tensors once, as DDP sees them)."""
    cls = getattr(transformers, cls_name)
    with torch.device("meta"), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        model = cls._from_config(config, dtype=torch.bfloat16)
        target = VARIANTS[variant]
        if target is not None:
            model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=target))
    names_of = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names_of.setdefault(id(p), []).append(name)
    rows = []
    for name, p in model.named_parameters():
        rows.append({
            "name": name,
            "shape": list(p.shape),
            "dtype": DTYPE_NAMES.get(p.dtype, str(p.dtype)),
            "trainable": bool(p.requires_grad),
            "tied": sorted(n for n in names_of[id(p)] if n != name),
        })
    return rows


def transformers_major_minor():
    """"4.57.1" -> "4.57": the version hookstream's plan pins, so that a run of this oracle under
    transformers 4.x (PYTHONPATH to an unpacked 4.x wheel) checks the per-expert MoE modules 4.x
    builds (sim/inputs/architectures/per_expert_layout.h) and one under 5.x the fused tensors."""
    return ".".join(transformers.__version__.split(".")[:2])


def plan_text(config_path, variant):
    lines = [f"base_model: {config_path}"]
    target = VARIANTS[variant]
    if target is not None:
        lines += ["adapter: lora", "lora_r: 8", "lora_alpha: 16"]
        lines.append(f"lora_target_modules: {target}" if isinstance(target, str) else
                     "lora_target_modules: [" + ", ".join(target) + "]")
    lines += ["hookstream:", f'  transformers_version: "{transformers_major_minor()}"']
    return "\n".join(lines) + "\n"


def run_hookstream(binary, workdir, config_path, variant):
    plan = pathlib.Path(workdir) / f"plan-{variant}.yaml"
    plan.write_text(plan_text(config_path, variant))
    proc = subprocess.run([binary, "inspect", str(plan), "--format", "json"], capture_output=True, text=True)
    if proc.returncode == 0:
        return 0, json.loads(proc.stdout)["parameters"], ""
    return proc.returncode, None, (proc.stderr or proc.stdout).strip()


def null_key_needed(config, err):
    """hookstream's exit 2 names a key ("key \"K\": missing") that the config has as None."""
    import re
    m = re.search(r'key "(?:text_config\.)?([A-Za-z_0-9]+)": missing', err)
    if not m:
        return False
    text = config.get_text_config()
    return any(hasattr(c, m.group(1)) and getattr(c, m.group(1)) is None for c in (config, text))


def first_difference(expected, got):
    """The first field that differs, in parameter order, or None."""
    for i in range(min(len(expected), len(got))):
        e, g = expected[i], got[i]
        tied = sorted(g.get("tied") or [])
        pairs = [("name", e["name"], g["name"]), ("shape", e["shape"], g["shape"]),
                 ("dtype", e["dtype"], g["dtype"]), ("trainable", e["trainable"], g["trainable"]),
                 ("tied", e["tied"], tied)]
        for field, want, have in pairs:
            if want != have:
                return f"parameter {i} ({e['name']}): {field}: transformers {want}, hookstream {have}"
    if len(expected) != len(got):
        extra = (expected[len(got)]["name"] if len(expected) > len(got) else got[len(expected)]["name"])
        return (f"parameter count: transformers {len(expected)}, hookstream {len(got)} "
                f"(first unmatched: {extra})")
    return None


# PEFT errors hookstream reproduces word for word (sim/inputs/model_structure.cc TargetMatcher).
PEFT_REFUSALS = ("not found in the base model", "is incompatible with Mamba-based models")


def same_refusal(python_error, hookstream_error):
    return any(text in python_error and text in hookstream_error for text in PEFT_REFUSALS)


def self_check():
    """The comparison must see each kind of difference it claims to check (a test that cannot fail
    is no test): a dropped, renamed, reshaped, retyped, frozen, untied and reordered parameter."""
    rows = [{"name": "a", "shape": [2, 3], "dtype": "bfloat16", "trainable": True, "tied": ["t"]},
            {"name": "b", "shape": [3], "dtype": "float32", "trainable": False, "tied": []}]
    assert first_difference(rows, [dict(r) for r in rows]) is None
    mutations = [lambda r: r.pop(),
                 lambda r: r[0].update(name="x"), lambda r: r[0].update(shape=[3, 2]),
                 lambda r: r[1].update(dtype="bfloat16"), lambda r: r[0].update(trainable=False),
                 lambda r: r[0].update(tied=[]), lambda r: r.reverse()]
    for mutate in mutations:
        changed = [dict(r) for r in rows]
        mutate(changed)
        assert first_difference(rows, changed) is not None, "first_difference missed a mutation"


def check_case(binary, workdir, label, config, cls_name):
    """One model: 'matched', 'refused' or 'wrong', with details."""
    config_path = pathlib.Path(workdir) / "config.json"
    config.to_json_file(config_path, use_diff=False)
    result = {"case": label, "class": cls_name, "variants": {}}
    for variant in VARIANTS:
        try:
            expected = transformers_parameters(config, cls_name, variant)
        except Exception as e:  # transformers or PEFT cannot build it: nothing to compare against
            why = f"transformers cannot build it: {type(e).__name__}: {e}".replace("\n", " ")[:300]
            code, _, err = run_hookstream(binary, workdir, config_path, variant)
            if code == 2 and same_refusal(str(e), err):
                # PEFT refuses the variant (GPT-2 has no q_proj for the fixed target list) and
                # hookstream refuses it with PEFT's own message: the same outcome, compared.
                result["variants"][variant] = {"status": "matched", "detail": f"both refuse: {why}"}
                continue
            # hookstream must not accept what cannot be checked.
            result["variants"][variant] = (
                {"status": "oracle_error", "detail": why} if code == 2 else
                {"status": "wrong", "detail": f"hookstream accepts it (exit {code}) but {why}"})
            continue
        code, got, err = run_hookstream(binary, workdir, config_path, variant)
        if code == 2 and "cannot model it yet" in err and "knows" in err:
            entry = {"status": "refused", "detail": err[:300]}
            # What hookstream would get wrong if it accepted the type: the same file as a llama.
            data = json.loads(config_path.read_text())
            data["model_type"] = "llama"
            as_llama = pathlib.Path(workdir) / "as-llama" / "config.json"
            as_llama.parent.mkdir(exist_ok=True)
            as_llama.write_text(json.dumps(data))
            code2, got2, err2 = run_hookstream(binary, workdir, as_llama, variant)
            entry["if_accepted"] = (first_difference(expected, got2) or "no difference") if code2 == 0 else \
                f"exit {code2}: {err2[:200]}"
            result["variants"][variant] = entry
        elif code == 2 and null_key_needed(config, err):
            # transformers builds a model its own default config cannot train (DeepseekV2Config:
            # num_experts_per_tok None, so the router's topk cannot run); hookstream refuses it naming
            # the key. Nothing to compare, as for a config transformers cannot build.
            result["variants"][variant] = {"status": "oracle_error", "detail": f"the default config leaves a key at None: {err[:200]}"}
        elif code == 0:
            diff = first_difference(expected, got)
            result["variants"][variant] = {"status": "matched"} if diff is None else {"status": "wrong", "detail": diff}
        else:
            result["variants"][variant] = {"status": "wrong", "detail": f"exit {code}: {err[:300]}"}
    statuses = {v["status"] for v in result["variants"].values()}
    if "wrong" in statuses:
        result["status"] = "wrong"
    elif statuses == {"matched"}:
        result["status"] = "matched"
    elif statuses <= {"refused", "oracle_error"} and "refused" in statuses:
        result["status"] = "refused"
    elif statuses == {"oracle_error"}:
        result["status"] = "oracle_error"
    else:  # matched in some variants, transformers failed in others: not fully checked
        result["status"] = "wrong"
        result["variants"]["_"] = {"status": "wrong", "detail": "accepted, but not every variant could be checked"}
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--hookstream")
    parser.add_argument("--configs", help="folder of real config.json files")
    parser.add_argument("--summary", help="write the summary JSON here")
    parser.add_argument("--markdown", help="write the per-type table (Markdown) here")
    parser.add_argument("--types", help="comma-separated model types (default: all registered)")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--write-known-types")
    parser.add_argument("--expect-transformers",
                        help="fail unless this transformers version is the one imported (the 4.57.1 "
                             "ctest entry: a missing PYTHONPATH folder would silently run 5.17)")
    parser.add_argument("--min-matched", type=int, default=0,
                        help="fail when fewer cases are matched (a run that refuses everything is no check)")
    args = parser.parse_args()
    if args.write_known_types:
        write_known_types(args.write_known_types)
        return 0
    if args.expect_transformers and transformers.__version__ != args.expect_transformers:
        print(f"structure oracle: transformers {transformers.__version__} imported from "
              f"{pathlib.Path(transformers.__file__).parent}, expected {args.expect_transformers} "
              f"(run tools/setup.sh --oracles: oracles/requirements.txt, docs/oracles.md)")
        return 1
    self_check()
    started = time.time()
    classes = model_classes()
    types = sorted(classes) if not args.types else args.types.split(",")
    cases = []
    with tempfile.TemporaryDirectory(prefix="structure-oracle-") as tmp:
        for model_type in types:
            mapping, cls_name = classes[model_type]
            workdir = pathlib.Path(tmp) / model_type
            workdir.mkdir()
            try:
                config = build_config(model_type, cls_name, args.layers)
            except Exception as e:
                cases.append({"case": model_type, "class": cls_name, "status": "oracle_error",
                              "variants": {"config": {"status": "oracle_error", "detail": f"{type(e).__name__}: {e}"[:300]}}})
                continue
            case = check_case(args.hookstream, workdir, model_type, config, cls_name)
            if case["status"] == "oracle_error":
                # Some configs validate per-layer patterns that a cut breaks (layer_types that
                # must contain both attention kinds, encoder/decoder layer counts): the full
                # depth on both sides, which the meta device makes cheap.
                try:
                    full = build_config(model_type, cls_name, 10**9)
                    retry = check_case(args.hookstream, workdir, model_type, full, cls_name)
                    if retry["status"] != "oracle_error":
                        case = retry
                        case["layers"] = "not reduced"
                except Exception:
                    pass
            case["mapping"] = mapping
            cases.append(case)
            print(f"{model_type:32s} {case['status']}", flush=True)
            if case["status"] == "oracle_error" and model_type in supplied_keys.SUPPLIED:
                # The default config plus the keys every real config of the type has and the
                # default lacks (oracles/supplied_keys.py): a case of its own, named so.
                config = build_config(model_type, cls_name, args.layers)
                label = f"{model_type} + " + ", ".join(supplied_keys.supply(config, model_type))
                (pathlib.Path(tmp) / (model_type + "+supplied")).mkdir()
                case = check_case(args.hookstream, pathlib.Path(tmp) / (model_type + "+supplied"), label, config, cls_name)
                case["mapping"] = "default config + supplied keys"
                cases.append(case)
                print(f"{label:32s} {case['status']}", flush=True)
        for path in sorted(pathlib.Path(args.configs).glob("*.json")) if args.configs else []:
            workdir = pathlib.Path(tmp) / ("file-" + path.stem)
            workdir.mkdir()
            config = config_from_file(path, args.layers)
            model_type = config.model_type
            cls_name = (config.architectures or [classes[model_type][1]])[0]
            case = check_case(args.hookstream, workdir, f"{path.name} ({model_type})", config, cls_name)
            case["mapping"] = "config file"
            cases.append(case)
            print(f"{path.name:32s} {case['status']}", flush=True)
    counts = {}
    for c in cases:
        counts[c["status"]] = counts.get(c["status"], 0) + 1
    summary = {
        "transformers": transformers.__version__, "peft": peft.__version__, "torch": torch.__version__,
        "layers": args.layers, "variants": list(VARIANTS), "seconds": round(time.time() - started, 1),
        "total": len(cases), "counts": counts, "cases": cases,
    }
    if args.summary:
        pathlib.Path(args.summary).write_text(json.dumps(summary, indent=1) + "\n")
    if args.markdown:
        pathlib.Path(args.markdown).write_text(markdown(summary))
    print(f"structure oracle: {len(cases)} cases, " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) +
          f" ({summary['seconds']} s)")
    wrong = [c for c in cases if c["status"] == "wrong"]
    for c in wrong:
        for variant, v in c["variants"].items():
            if v["status"] == "wrong":
                print(f"WRONG {c['case']} [{variant}]: {v['detail']}")
    too_few = counts.get("matched", 0) < args.min_matched
    if too_few:
        print(f"structure oracle: {counts.get('matched', 0)} cases matched, fewer than --min-matched {args.min_matched}")
    return 1 if wrong or too_few else 0


def markdown(summary):
    counts = {}
    for c in summary["cases"]:
        if c["status"] in ("refused", "oracle_error"):
            reason = left_out_reason(c["case"], c.get("mapping")) if c["status"] == "refused" else NO_ORACLE
            counts[reason] = counts.get(reason, 0) + 1
    out = ["| left out because | types |", "|---|---|"]
    out += [f"| {reason} | {n} |" for reason, n in sorted(counts.items())]
    out += ["", "| case | class | status | why left out | first difference (refused: if hookstream accepted it as a llama) |",
            "|---|---|---|---|---|"]
    for c in summary["cases"]:
        detail = ""
        for variant, v in c["variants"].items():
            text = v.get("if_accepted") if v["status"] == "refused" else v.get("detail")
            if text and text != "no difference":
                detail = f"[{variant}] {text}"
                break
        detail = detail.replace("|", "\\|")
        why = left_out_reason(c["case"], c.get("mapping")) if c["status"] in ("refused", "oracle_error") else ""
        if c["status"] == "refused" and c["case"] in MIXER_REASONS:
            why = "not described yet: " + MIXER_REASONS[c["case"]]
        if c["status"] == "refused" and VLM_REASONS.get(c["case"]):
            why = "vision-language, not described yet: " + VLM_REASONS[c["case"]]
        if c["status"] == "refused" and c["case"] in DECODER_REASONS:
            why = "decoder-only, not described yet: " + DECODER_REASONS[c["case"]]
        if c["status"] == "oracle_error":
            why = NO_ORACLE
        out.append(f"| {c['case']} | {c.get('class', '')} | {c['status']} | {why} | {detail} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
