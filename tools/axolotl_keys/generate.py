#!/usr/bin/env python3
"""Writes axolotl/keys.json: every top-level key of an axolotl config, read from axolotl's source.

Usage: generate.py AXOLOTL_PACKAGE_DIR VERSION NOTE > axolotl/keys.json

AXOLOTL_PACKAGE_DIR is the `axolotl/` package folder of an unpacked axolotl wheel or checkout
(`pip download axolotl==0.18.0 --no-deps --only-binary :all:` then unzip). Nothing is imported:
the pydantic models are read with `ast`, so neither axolotl nor its dependencies are needed.

Keys are the annotated fields of `AxolotlInputConfig` and every class it inherits from
(src/axolotl/utils/schemas/), their pydantic aliases (axolotl sets populate_by_name, so both names
load), and the fields of every plugin's args class (the class its `get_input_args()` names, under
src/axolotl/integrations/). Nested schemas hookstream reads are listed under "nested".

Each key gets a `hookstream` class:
  modelled      hookstream reads it and it takes part in the answer (the C++ loader's keys;
                tests/sim/axolotl_keys_test.cc checks the two lists agree),
  no_effect     logging, datasets, tokenizer, evaluation, saving, hub: its value cannot change the
                hook schedule, memory or step time of a training step,
  not_modelled  anything else: it may change the answer and hookstream does not model it, so the
                report lists it when a config sets it.
"""
import ast
import json
import pathlib
import re
import sys

# Keys hookstream's plan loader reads (sim/inputs/plan.cc: schedule_keys() and engine_keys()).
MODELLED = {
    "base_model", "base_model_config", "sequence_len", "micro_batch_size",
    "gradient_accumulation_steps", "adapter", "lora_r", "lora_alpha", "lora_dropout",
    "lora_target_modules", "lora_target_linear", "lora_target_parameters", "revision_of_model", "load_in_4bit", "load_in_8bit",
    "gradient_checkpointing", "gradient_checkpointing_kwargs", "activation_offloading",
    "tiled_mlp", "tiled_mlp_num_shards", "ddp_find_unused_parameters", "ddp_bucket_cap_mb",
    "device_map", "unfrozen_parameters", "chunked_cross_entropy",
    "chunked_cross_entropy_num_chunks", "learning_rate", "weight_decay", "seed", "bf16",
    "max_steps", "optimizer", "torch_compile", "torch_compile_backend", "torch_compile_mode",
    "trust_remote_code", "sample_packing", "attn_implementation", "flex_attention", "flash_attention",
    "sdp_attention", "eager_attention", "rl", "plugins", "liger_rms_norm", "liger_glu_activation", "liger_swiglu",
    # the engine: which gradient-sync strategy a config runs on
    "deepspeed", "fsdp", "fsdp_config", "fsdp_version", "context_parallel_size",
    "tensor_parallel_size", "expert_parallel_size", "expert_parallel_backend", "dp_shard_size", "dp_replicate_size",
    "sequence_parallel_degree",
}

# Whole keys whose value cannot change a training step's hook schedule, memory or time.
NO_EFFECT = {
    "datasets", "test_datasets", "dataset_prepared_path", "dataset_processes", "dataset_num_proc",
    "dataset_shard_num", "dataset_shard_idx", "skip_prepare_dataset", "shuffle_merged_datasets",
    "shuffle_before_merging_datasets", "push_dataset_to_hub", "hf_use_auth_token",
    "output_dir", "num_epochs", "lr_scheduler", "lr_scheduler_kwargs", "warmup_steps",
    "warmup_ratio", "cosine_min_lr_ratio", "cosine_constant_lr_ratio", "lr_div_factor",
    "logging_steps", "save_steps", "saves_per_epoch", "save_strategy", "save_total_limit",
    "save_first_step", "save_only_model", "save_safetensors", "eval_steps", "evals_per_epoch",
    "eval_strategy", "val_set_size", "eval_batch_size", "eval_table_size",
    "eval_max_new_tokens", "do_causal_lm_eval", "eval_causal_lm_metrics", "do_bench_eval",
    "bench_dataset", "bench_split", "metric_for_best_model", "greater_is_better",
    "load_best_model_at_end", "early_stopping_patience", "special_tokens", "tokens",
    "added_tokens_overrides", "chat_template", "chat_template_jinja", "chat_template_kwargs",
    "eot_tokens", "default_system_message", "tokenizer_type", "tokenizer_config",
    "tokenizer_use_fast", "tokenizer_legacy", "tokenizer_use_mistral_common",
    "tokenizer_save_jinja_files", "processor_type", "processor_config", "strict",
    "model_type", "type_of_model", "model_revision", "revision_of_model",
    "hub_model_id", "hub_strategy", "hub_revision", "hub_private_repo", "resume_from_checkpoint",
    "auto_resume_from_checkpoints", "use_tensorboard", "include_tokens_per_second",
    "include_tkps", "train_on_inputs", "group_by_length", "is_preprocess",
    "preprocess_iterable", "axolotl_config_path", "debug", "loss_watchdog_threshold",
    "loss_watchdog_patience", "max_grad_norm", "adam_beta1", "adam_beta2",
    "adam_beta3", "adam_epsilon", "adam_epsilon2", "lr_quadratic_warmup", "seed",
    "dataloader_pin_memory", "dataloader_num_workers", "dataloader_prefetch_factor",
    "dataloader_drop_last", "remove_unused_columns", "ddp_timeout", "profiler_steps",
    "profiler_steps_start", "gc_steps", "dataset_exact_deduplication", "dataset_keep_in_memory",
    "is_falcon_derived_model", "is_llama_derived_model", "is_mistral_derived_model",
    "is_qwen_derived_model", "chat_template_kwargs", "field_messages", "min_sample_len",
    "max_prompt_len", "curriculum_sampling", "sample_packing_group_size",
    "sample_packing_bin_size", "sample_packing_mp_start_method", "eval_sample_packing",
    "dataset_use_cache", "streaming", "shuffle_dataset", "total_num_tokens",
    "total_supervised_tokens", "sample_packing_eff_est", "mean_resizing_embeddings",
    "fix_untrained_tokens", "neftune_noise_alpha", "local_rank", "use_ray", "ray_run_name",
    "ray_num_workers", "resources_per_worker", "num_labels", "cosine_min_lr",
    "dataset_processes", "datasets_num_proc", "val_set_seed", "eval_steps_ratio",
    "pretrain_multipack_buffer_size", "lr_groups", "embedding_lr", "embedding_lr_scale",
    "loraplus_lr_ratio", "loraplus_lr_embedding", "dpo_generate_during_eval",
    "deduplicate", "dataset_exact_deduplication",
    # axolotl's normalize_config overwrites it with the launcher's WORLD_SIZE
    # (src/axolotl/utils/config/__init__.py), so the value a config carries is never used.
    "world_size",
}
# Prefixes of logging/tracking integrations and evaluation harnesses.
NO_EFFECT_PREFIXES = (
    "wandb_", "mlflow_", "comet_", "swanlab_", "trackio_", "otel_", "opentelemetry_",
    "gradio_", "hub_", "lm_eval_", "use_wandb", "use_mlflow", "use_comet", "use_swanlab",
    "use_trackio", "use_otel", "use_opentelemetry", "use_lm_eval", "bench_", "eval_",
    "dataset_", "tokenizer_", "chat_template", "save_", "logging_", "hf_mlflow",
)


def classify(key):
    if key in MODELLED:
        return "modelled"
    if key in NO_EFFECT or key.startswith(NO_EFFECT_PREFIXES):
        return "no_effect"
    return "not_modelled"


def classes_in(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def base_names(node):
    names = []
    for base in node.bases:
        if isinstance(base, ast.Name):
            names.append(base.id)
        elif isinstance(base, ast.Attribute):
            names.append(base.attr)
    return names


def field_aliases(value):
    """alias= / validation_alias=AliasChoices(...) of a pydantic Field(...) call."""
    aliases = []
    if isinstance(value, ast.Call):
        for keyword in value.keywords:
            if keyword.arg == "alias" and isinstance(keyword.value, ast.Constant):
                aliases.append(keyword.value.value)
            if keyword.arg == "validation_alias" and isinstance(keyword.value, ast.Call):
                aliases += [a.value for a in keyword.value.args if isinstance(a, ast.Constant)]
    return aliases


def fields_of(node):
    """(name, aliases) of each annotated field of a class body, in source order."""
    for statement in node.body:
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            name = statement.target.id
            if name == "model_config":
                continue  # pydantic's own settings, not a field
            yield name, field_aliases(statement.value)


def collect(class_name, classes, seen, out, where):
    if class_name in seen or class_name not in classes:
        return
    seen.add(class_name)
    path, node = classes[class_name]
    # pydantic takes fields from the bases first (MRO from the end), then the class itself.
    for base in reversed(base_names(node)):
        collect(base, classes, seen, out, where)
    for name, aliases in fields_of(node):
        # A field whose alias is the only name that loads (no populate_by_name would need the
        # alias); axolotl sets populate_by_name, so both the field name and the alias load.
        for key in [name] + aliases:
            out.setdefault(key, f"{path}:{class_name}")


def main():
    root = pathlib.Path(sys.argv[1])
    version, note = sys.argv[2], sys.argv[3]
    schema_classes = {}
    for path in sorted((root / "utils" / "schemas").rglob("*.py")):
        relative = "src/axolotl/" + str(path.relative_to(root))
        for name, node in classes_in(path).items():
            schema_classes.setdefault(name, (relative, node))
    keys = {}
    collect("AxolotlInputConfig", schema_classes, set(), keys, "config")

    plugin_keys = {}
    plugins = []
    for init in sorted((root / "integrations").glob("*/*.py")):
        text = init.read_text(encoding="utf-8")
        for target in re.findall(r'return "axolotl\.integrations\.([\w.]+)"', text):
            parts = target.split(".")
            plugin, class_name = parts[0], parts[-1]
            folder = root / "integrations" / plugin
            classes = {}
            for path in sorted(folder.rglob("*.py")):
                relative = "src/axolotl/" + str(path.relative_to(root))
                for name, node in classes_in(path).items():
                    classes.setdefault(name, (relative, node))
            collected = {}
            collect(class_name, classes, set(), collected, plugin)
            plugins.append({"plugin": plugin, "args": class_name, "keys": sorted(collected)})
            for key, where in collected.items():
                plugin_keys.setdefault(key, where)

    entries = []
    for key in sorted(set(keys) | set(plugin_keys)):
        where = keys.get(key) or plugin_keys[key]
        entries.append({"key": key, "schema": where, "hookstream": classify(key)})

    fsdp = {}
    collect("FSDPConfig", schema_classes, set(), fsdp, "fsdp")
    document = {
        "axolotl": {"version": version, "source": note,
                    "generator": "tools/axolotl_keys/generate.py"},
        "keys": entries,
        "plugins": sorted(plugins, key=lambda p: p["plugin"]),
        "nested": {
            # axolotl strips a `fsdp_` prefix from these keys (validation.py,
            # check_fsdp_config_kwargs_prefix) before FSDPConfig reads them.
            "fsdp_config": sorted(fsdp),
        },
    }
    json.dump(document, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
