// Every key of axolotl's schema loads (axolotl/keys.json, mirrored from axolotl's pydantic models);
// the report lists which of a config's keys hookstream does not model; a misspelled key is still
// an error with the closest key; nested sections hookstream reads are checked against their schema.
#include <algorithm>
#include <functional>

#include <catch2/catch.hpp>

#include "sim/inputs/axolotl_config/axolotl_schema.h"
#include "sim/inputs/input_error.h"
#include "sim/inputs/plan.h"
#include "tests/sim/plan_text.h"

namespace hookstream {
namespace {

using test::parse;
using test::parse_error;

bool lists(const std::vector<ConfigKeyNote>& notes, const std::string& key) {
  return std::any_of(notes.begin(), notes.end(), [&](const ConfigKeyNote& note) { return note.key == key; });
}

}  // namespace

TEST_CASE("the key list mirrors axolotl 0.18.0 and marks exactly the keys the loader reads as modelled", "[plan][axolotl]") {
  const AxolotlSchema& schema = axolotl_schema();
  CHECK(schema.version == "0.18.0");
  CHECK(schema.keys.size() == 478);
  // Keys from several of axolotl's schema files and plugins (integrations/*/args.py).
  for (const char* key : {"dataset_prepared_path", "plugins", "processor_type", "rl", "warmup_ratio", "attn_implementation",
                          "context_parallel_size", "liger_rms_norm", "cut_cross_entropy", "expert_parallel_size",
                          "lora_target_parameters", "fsdp_version", "model_config", "overrides_of_model_config"}) {
    INFO(key);
    CHECK(schema.keys.count(key) == 1);
  }
  std::vector<std::string> modelled;
  for (const auto& [key, effect] : schema.keys) {
    if (effect == KeyEffect::Modelled) modelled.push_back(key);
  }
  CHECK(modelled == modelled_axolotl_keys());
  CHECK(schema.keys.at("datasets") == KeyEffect::NoEffect);
  CHECK(schema.keys.at("wandb_project") == KeyEffect::NoEffect);
  CHECK(schema.keys.at("optimizer") == KeyEffect::Modelled);
  // Modelled since the MoE/attention/rl work (docs/plan-format.md); xformers_attention is not.
  CHECK(schema.keys.at("rl") == KeyEffect::Modelled);
  CHECK(schema.keys.at("sample_packing") == KeyEffect::Modelled);
  CHECK(schema.keys.at("flash_attention") == KeyEffect::Modelled);
  CHECK(schema.keys.at("xformers_attention") == KeyEffect::NotModelled);
}

// axolotl reads the Liger keys through its LigerPlugin only (integrations/liger/plugin.py), which
// patches the model types of Plan::liger_applies; any other plugin is listed as not modelled.
TEST_CASE("Liger's RMSNorm and SwiGLU keys take effect with the LigerPlugin on a model type it patches", "[plan][axolotl]") {
  const std::string plugin = "plugins:\n  - axolotl.integrations.liger.LigerPlugin\n";
  const Plan both = parse("base_model: tiny-llama\n" + plugin + "liger_rms_norm: true\nliger_glu_activation: true\n");
  CHECK(both.liger_rms_norm_applied());
  CHECK(both.liger_glu_applied());
  CHECK(both.not_modelled_keys.empty());
  CHECK(both.no_effect_keys.empty());
  // The older name of the SwiGLU key.
  CHECK(parse("base_model: tiny-llama\n" + plugin + "liger_swiglu: true\n").liger_glu_applied());
  // Without the plugin: no effect, and the report says why.
  const Plan alone = parse("base_model: tiny-llama\nliger_rms_norm: true\n");
  CHECK_FALSE(alone.liger_rms_norm_applied());
  REQUIRE(alone.no_effect_keys.size() == 1);
  CHECK(alone.no_effect_keys[0].key == "liger_rms_norm");
  CHECK(alone.no_effect_keys[0].where == "plan.yaml:2");
  CHECK(alone.no_effect_keys[0].note.find("LigerPlugin") != std::string::npos);
  // Another plugin is listed as not modelled; the Liger one is read.
  const Plan other = parse("base_model: tiny-llama\nplugins:\n  - axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin\n"
                           "  - axolotl.integrations.liger.LigerPlugin\nliger_rms_norm: true\n");
  CHECK(other.liger_rms_norm_applied());
  REQUIRE(other.not_modelled_keys.size() == 1);
  CHECK(other.not_modelled_keys[0].key == "plugins");
  CHECK(other.not_modelled_keys[0].note.find("CutCrossEntropyPlugin") != std::string::npos);
  // The keys round-trip through the plan's YAML.
  const Plan again = parse(to_yaml(both));
  CHECK(again.liger_rms_norm_applied());
  CHECK(again.liger_glu_applied());
}

TEST_CASE("every key of axolotl's schema loads and the report lists those not modelled", "[plan][axolotl]") {
  const AxolotlSchema& schema = axolotl_schema();
  int loaded = 0;
  for (const auto& [key, effect] : schema.keys) {
    if (effect == KeyEffect::Modelled || key == "world_size") continue;  // typed keys: see plan_test.cc
    INFO(key);
    // Any value: hookstream reads no value from these keys (axolotl validates them).
    const Plan plan = parse("base_model: tiny-llama\n" + key + ": {some: value}\n");
    CHECK(lists(effect == KeyEffect::NoEffect ? plan.no_effect_keys : plan.not_modelled_keys, key));
    ++loaded;
  }
  CHECK(loaded == 478 - 58 - 1);  // all but the 58 modelled keys and world_size
  // flash_attention, rl: dpo and sample_packing are modelled; xformers_attention, an rl type whose
  // step is not modelled (grpo: generation) and a plugin key are listed.
  const Plan plan = parse("base_model: tiny-llama\nxformers_attention: true\nflash_attention: true\nrl: grpo\n"
                          "datasets:\n  - path: x\nwandb_project: p\nsample_packing: true\ncut_cross_entropy: true\n");
  REQUIRE(plan.not_modelled_keys.size() == 3);
  CHECK(plan.not_modelled_keys[0].key == "xformers_attention");
  CHECK(plan.not_modelled_keys[0].where == "plan.yaml:2");
  CHECK(plan.not_modelled_keys[0].note == "src/axolotl/utils/schemas/config.py:AxolotlInputConfig");
  CHECK(plan.not_modelled_keys[1].key == "rl");
  CHECK(plan.not_modelled_keys[1].note.find("grpo") != std::string::npos);
  CHECK(plan.not_modelled_keys[2].key == "cut_cross_entropy");
  CHECK(parse("base_model: tiny-llama\nrl: dpo\nflash_attention: true\n").not_modelled_keys.empty());
  REQUIRE(plan.no_effect_keys.size() == 2);
  CHECK(plan.no_effect_keys[0].key == "datasets");
  // `key:` with no value is unset, as in axolotl: nothing to list.
  CHECK(parse("base_model: tiny-llama\noptimizer:\n").not_modelled_keys.empty());
}

TEST_CASE("a misspelled axolotl key is an error with the closest key of the whole schema", "[plan][axolotl]") {
  CHECK(parse_error("base_model: tiny-llama\noptimzer: adamw_torch\n") == "plan.yaml:2: unknown key \"optimzer\"; did you mean `optimizer`?");
  CHECK(parse_error("base_model: tiny-llama\nsample_pakcing: true\n") ==
        "plan.yaml:2: unknown key \"sample_pakcing\"; did you mean `sample_packing`?");
  CHECK(parse_error("base_model: tiny-llama\ncontext_paralel_size: 2\n") ==
        "plan.yaml:2: unknown key \"context_paralel_size\"; did you mean `context_parallel_size`?");
  CHECK(parse_error("base_model: tiny-llama\nliger_rms_nrom: true\n") ==
        "plan.yaml:2: unknown key \"liger_rms_nrom\"; did you mean `liger_rms_norm`?");
  // Keys far from every schema key are what axolotl drops: listed as ignored, not an error.
  const Plan plan = parse("base_model: tiny-llama\ngptq_groupsize: 128\neta_min: 7e-7\n");
  REQUIRE(plan.ignored_keys.size() == 2);
  CHECK(plan.ignored_keys[0].key == "gptq_groupsize");
  CHECK(plan.ignored_keys[0].note == "not a key of axolotl 0.18.0's schema; axolotl drops it");
}

TEST_CASE("fsdp_config and gradient_checkpointing_kwargs are checked against their schema", "[plan][axolotl]") {
  // axolotl drops the fsdp_ prefix (check_fsdp_config_kwargs_prefix), then FSDPConfig reads it.
  const Plan plan = parse("base_model: tiny-llama\nfsdp_version: 2\nfsdp_config:\n  fsdp_offload_params: true\n"
                          "  reshard_after_forward: true\n  fsdp_sharding_strategy: FULL_SHARD\n");
  CHECK(lists(plan.not_modelled_keys, "fsdp_config.fsdp_offload_params"));
  CHECK(lists(plan.ignored_keys, "fsdp_config.fsdp_sharding_strategy"));  // not a field of FSDPConfig
  CHECK(parse_error("base_model: tiny-llama\nfsdp_config:\n  ofload_params: true\n") ==
        "plan.yaml:3: unknown key \"ofload_params\" in fsdp_config; did you mean `offload_params`?");
  CHECK(parse_error("base_model: tiny-llama\nfsdp_config:\n  fsdp_offload_params: true\n  offload_params: false\n") ==
        "plan.yaml:4: duplicate key \"fsdp_config.offload_params\" (axolotl drops the fsdp_ prefix)");
  CHECK(parse_error("base_model: tiny-llama\nfsdp_config: [a]\n") ==
        "plan.yaml:2: key \"fsdp_config\": expected a mapping of FSDP settings, got a list");
  // torch.utils.checkpoint's keyword arguments load; use_reentrant is the one modelled.
  const Plan kwargs = parse("base_model: tiny-llama\ngradient_checkpointing: true\ngradient_checkpointing_kwargs:\n"
                            "  use_reentrant: false\n  preserve_rng_state: false\n");
  CHECK_FALSE(kwargs.use_reentrant);
  CHECK(lists(kwargs.not_modelled_keys, "gradient_checkpointing_kwargs.preserve_rng_state"));
}

TEST_CASE("YAML anchors and aliases load as PyYAML loads them, tabs are refused as PyYAML refuses them", "[plan][axolotl]") {
  // axolotl reads configs with yaml.safe_load, which resolves anchors and aliases.
  const Plan plan = parse("base_model: tiny-llama\nsequence_len: &len 1024\nhookstream:\n  rank_overrides:\n    1:\n"
                          "      sequence_len: *len\n  world_size: 2\n");
  CHECK(plan.sequence_len == 1024);
  CHECK(plan.rank_overrides.at(1).sequence_len == 1024);
  // PyYAML: "found character '\t' that cannot start any token" for a tab used as indentation.
  const std::string tab = parse_error("base_model: tiny-llama\nhookstream:\n\tworld_size: 2\n");
  CHECK(tab.rfind("plan.yaml:3", 0) == 0);
  CHECK(tab.find('\n') == std::string::npos);
}

}  // namespace hookstream
