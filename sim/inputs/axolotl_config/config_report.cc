#include "sim/inputs/axolotl_config/config_report.h"

#include <fmt/format.h>

#include "sim/inputs/axolotl_config/axolotl_schema.h"
#include "sim/sync/fsdp1/fsdp1_model.h"

namespace hookstream {
namespace {

std::string kind_id(EngineKind kind) {
  switch (kind) {
    case EngineKind::Ddp: return "ddp";
    case EngineKind::Fsdp1: return "fsdp1";
    case EngineKind::Fsdp2: return "fsdp2";
    case EngineKind::DeepSpeed: return "deepspeed";
  }
  return "";
}

nlohmann::json notes_json(const std::vector<ConfigKeyNote>& notes) {
  nlohmann::json list = nlohmann::json::array();
  for (const ConfigKeyNote& note : notes) list.push_back({{"key", note.key}, {"where", note.where}, {"note", note.note}});
  return list;
}

const char* kWorldSizeMissing =
    "not given: pass --world-size N, or torchrun's --nnodes N --nproc-per-node M, or --accelerate-config FILE with "
    "num_processes (hookstream.world_size in the plan also sets it)";

// Expert parallelism (expert_parallel_size > 1) is axolotl's ExpertParallelPlugin
// (src/axolotl/integrations/expert_parallel/plugin.py, 2026): what it would run, and what of it
// hookstream does not model, named rather than approximated by a data-parallel verdict.
std::string expert_parallel_reason(const Engine& engine) {
  bool ep = false;
  for (const std::string& other : engine.other_parallelism) ep = ep || other.rfind("expert_parallel_size: ", 0) == 0;
  if (!ep) return "";
  return "expert_parallel_size runs axolotl's ExpertParallelPlugin (integrations/expert_parallel): shard.py "
         "shard_expert_weights keeps 1/expert_parallel_size of every MoE layer's experts (the 3-D gate_up_proj/down_proj "
         "of transformers' @use_experts_implementation) on each rank of the ep group and experts_fn dispatches and combines "
         "the routed tokens with all-to-alls over that group. hookstream models pure EP under DDP (expert_parallel_size = "
         "world size: the shards in _ddp_params_and_buffers_to_ignore, the plugin's 1/ep gradient hook, the all-to-alls; "
         "docs/engines/expert-parallel.md), not EP composed with dp_shard, tensor or context parallelism or DeepSpeed: "
         "with FSDP2, plugin.py fully_shard_experts shards each experts module over mesh[\"dp_shard\"] while every other "
         "unit shards over the flattened (ep, dp_shard) mesh (axolotl's patched ParallelismConfig, dp_shard_cp_dim_names), "
         "FSDP2 units on two meshes that hookstream's FSDP2 model (one mesh for all units) does not represent";
}

std::string message(const Plan& plan) {
  // FSDP1 is modelled except for the settings fsdp1_not_modelled_reason names: say which.
  std::string reason = plan.engine.kind == EngineKind::Fsdp1 ? fsdp1_not_modelled_reason(plan.engine.fsdp) : "";
  const std::string ep = expert_parallel_reason(plan.engine);
  if (!ep.empty()) reason = reason.empty() ? ep : reason + "; " + ep;
  return "this plan would run on " + plan.engine.name() + "; hookstream verifies the hook schedules of DDP, FSDP2, FSDP1 and DeepSpeed ZeRO 0-3 (data parallel only), "
         "so the hook schedule of " +
         plan.engine.name() + " is not verified yet (no DDP verdict applies to it)" + (reason.empty() ? "" : ": " + reason);
}

}  // namespace

nlohmann::json engine_json(const Engine& engine) {
  nlohmann::json j;
  j["name"] = engine.name();
  j["kind"] = kind_id(engine.kind);
  j["modelled"] = engine.modelled();
  j["decided_by"] = engine.decided_by;
  j["settings"] = engine.settings;
  j["other_parallelism"] = engine.other_parallelism;
  j["zero_stage"] = engine.deepspeed ? nlohmann::json(engine.deepspeed->zero_stage) : nlohmann::json(nullptr);
  j["deepspeed_config"] = engine.deepspeed ? nlohmann::json(engine.deepspeed->file) : nlohmann::json(nullptr);
  return j;
}

nlohmann::json config_keys_json(const Plan& plan) {
  return {{"axolotl_version", axolotl_schema().version},
          {"not_modelled", notes_json(plan.not_modelled_keys)},
          {"no_effect", notes_json(plan.no_effect_keys)},
          {"ignored", notes_json(plan.ignored_keys)}};
}

std::string config_keys_text(const Plan& plan) {
  std::string out;
  if (!plan.not_modelled_keys.empty()) {
    out += fmt::format("not modelled ({} key{} of this config may change the answer; hookstream does not model them)\n",
                       plan.not_modelled_keys.size(), plan.not_modelled_keys.size() == 1 ? "" : "s");
    for (const ConfigKeyNote& note : plan.not_modelled_keys) out += fmt::format("  {:<34} {}\n", note.key, note.where);
  }
  if (!plan.ignored_keys.empty()) {
    out += "ignored  (as axolotl ignores them)\n";
    for (const ConfigKeyNote& note : plan.ignored_keys) out += fmt::format("  {:<34} {}: {}\n", note.key, note.where, note.note);
  }
  if (!plan.no_effect_keys.empty()) {
    std::string keys;
    for (size_t i = 0; i < plan.no_effect_keys.size(); ++i) keys += (i ? ", " : "") + plan.no_effect_keys[i].key;
    out += "no effect on a training step (logging, data, saving): " + keys + "\n";
  }
  return out;
}

std::string render_engine_not_modelled_text(const Plan& plan) {
  const Engine& engine = plan.engine;
  std::string out = "NOT VERIFIED  engine_not_modelled  " + engine.name() + "\n";
  out += "  " + message(plan) + "\n";
  for (const std::string& reason : engine.decided_by) out += "  decided by   " + reason + "\n";
  for (const std::string& setting : engine.settings) out += "  setting      " + setting + "\n";
  for (const std::string& other : engine.other_parallelism) out += "  parallelism  " + other + "\n";
  out += "  world size   " + (plan.world_size_from.empty() ? std::string(kWorldSizeMissing)
                                                            : std::to_string(plan.world_size) + " (" + plan.world_size_from + ")") + "\n";
  out += "  model        " + (plan.base_model.empty() ? plan.model.source : plan.base_model) + "\n";
  out += config_keys_text(plan);
  return out;
}

nlohmann::json render_engine_not_modelled_json(const Plan& plan) {
  nlohmann::json j;
  j["schema"] = "hookstream.verify/2";
  j["plan"] = plan.source;
  j["model"] = plan.base_model.empty() ? plan.model.source : plan.base_model;
  j["ok"] = false;
  j["verdict"] = "engine_not_modelled";
  j["engine"] = engine_json(plan.engine);
  j["world_size"] = plan.world_size_from.empty() ? nlohmann::json(nullptr) : nlohmann::json(plan.world_size);
  j["world_size_from"] = plan.world_size_from.empty() ? nlohmann::json(kWorldSizeMissing) : nlohmann::json(plan.world_size_from);
  j["message"] = message(plan);
  j["config_keys"] = config_keys_json(plan);
  return j;
}

}  // namespace hookstream
