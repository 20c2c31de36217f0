"""pad_token_id outside the vocabulary: hookstream's refusal against what transformers builds.

For every causal-LM and image-text-to-text type the pinned transformers registers, its default
config (cut to 2 decoder layers) with the decoder's pad_token_id set to vocab_size is built on the
meta device: nn.Embedding(vocab_size, H, padding_idx=pad_token_id) asserts "Padding_idx must be
within num_embeddings" for the decoders that pass padding_idx, the others build. `hookstream
inspect` on the same config.json must refuse exactly the ones that assert, naming pad_token_id
(sim/inputs/model_config.cc, ArchitectureSpec::embedding_padding_idx). Types hookstream refuses for
another reason (not modelled) are counted as skipped. Exit 1 on any disagreement.

    pad_token_oracle.py --hookstream build/tools/hookstream
"""
import argparse
import contextlib
import io
import os
import pathlib
import subprocess
import sys
import tempfile
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ["HF_HUB_OFFLINE"] = "1"

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoConfig  # noqa: E402
from transformers.models.auto import modeling_auto  # noqa: E402


def cut(config, layers=2):
    text = config.get_text_config(decoder=True)
    for c in {id(config): config, id(text): text}.values():
        n = getattr(c, "num_hidden_layers", None)
        if isinstance(n, int) and n > layers:
            for key, value in list(vars(c).items()):
                if isinstance(value, list) and len(value) == n:
                    setattr(c, key, value[:layers])
            c.num_hidden_layers = layers
    return text


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--hookstream", required=True)
    args = parser.parse_args()
    classes = dict(modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    classes.update(modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES)
    agree, disagree, skipped = 0, [], 0
    with tempfile.TemporaryDirectory(prefix="pad-token-oracle-") as tmp:
        for model_type in sorted(classes):
            try:
                config = AutoConfig.for_model(model_type)
                text = cut(config)
                text.pad_token_id = text.vocab_size
                with torch.device("meta"), contextlib.redirect_stdout(io.StringIO()), \
                        contextlib.redirect_stderr(io.StringIO()):
                    getattr(transformers, classes[model_type])._from_config(config)
                asserts = False
            except AssertionError as e:
                asserts = "padding_idx" in str(e).lower()
                if not asserts:
                    continue
            except Exception:
                continue  # transformers cannot build it for another reason
            workdir = pathlib.Path(tmp) / model_type
            workdir.mkdir()
            config.to_json_file(workdir / "config.json", use_diff=False)
            (workdir / "plan.yaml").write_text(f"base_model: {workdir / 'config.json'}\n")
            proc = subprocess.run([args.hookstream, "inspect", str(workdir / "plan.yaml"), "--format", "json"],
                                  capture_output=True, text=True)
            err = proc.stderr + proc.stdout
            refuses = proc.returncode == 2 and "pad_token_id" in err
            if proc.returncode == 2 and not refuses:
                skipped += 1
                continue
            if refuses == asserts:
                agree += 1
            else:
                disagree.append(f"{model_type}: transformers {'asserts' if asserts else 'builds'}, "
                                f"hookstream exit {proc.returncode} {err.strip()[:200]}")
    print(f"pad_token_id = vocab_size: {agree} types agree, {len(disagree)} disagree, "
          f"{skipped} refused by hookstream for another reason (transformers {transformers.__version__})")
    for line in disagree:
        print("DISAGREE " + line)
    return 1 if disagree else 0


if __name__ == "__main__":
    sys.exit(main())
