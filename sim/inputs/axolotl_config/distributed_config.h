// Where users put distributed settings, read as their tools read them: a DeepSpeed JSON (axolotl's
// `deepspeed:` key), an accelerate config file (`accelerate launch --config_file`), and the engine
// a plan would run on (DDP, FSDP1, FSDP2, DeepSpeed ZeRO; what a model does not cover gets the
// `engine_not_modelled` result, docs/verify-json.md).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>
#include <yaml-cpp/yaml.h>

namespace hookstream {

enum class EngineKind { Ddp, Fsdp1, Fsdp2, DeepSpeed };

// The DeepSpeed JSON's settings that decide the engine and the batch.
struct DeepSpeedConfig {
  std::string file;                 // the path read, or "inline" for a mapping in the plan
  int zero_stage = 0;               // zero_optimization.stage (DeepSpeed's default: 0)
  bool zero_optimization_present = false;  // the config has a zero_optimization object
  // zero_optimization.stage is "auto": accelerate's DeepSpeedPlugin fills it from its zero_stage
  // (ACCELERATE_DEEPSPEED_ZERO_STAGE, default 2); under axolotl that variable is "auto" itself and
  // the plugin fails (plan.cc deepspeed_engine resolves or refuses it).
  bool stage_auto = false;
  std::string offload_optimizer;    // zero_optimization.offload_optimizer.device ("" or "none": none)
  std::string offload_param;        // zero_optimization.offload_param.device
  // zero_optimization.overlap_comm / contiguous_gradients / reduce_bucket_size; unset: absent or
  // "auto", DeepSpeed's defaults apply (deepspeed/runtime/zero/config.py: overlap_comm true only for
  // stage 3, contiguous_gradients true, reduce_bucket_size 5e8 elements).
  std::optional<bool> overlap_comm;
  std::optional<bool> contiguous_gradients;
  std::optional<long long> reduce_bucket_size;
  // zero_optimization.allgather_bucket_size and the stage-3 sizes (stage3_prefetch_bucket_size,
  // stage3_max_live_parameters, sub_group_size), in elements; unset: absent or "auto" (DeepSpeed's
  // defaults 5e8, 5e7, 1e9, 1e9). The memory and time models read them.
  std::optional<long long> allgather_bucket_size;
  std::optional<long long> stage3_prefetch_bucket_size;
  std::optional<long long> stage3_max_live_parameters;
  std::optional<long long> sub_group_size;
  // zero_optimization.stage3_max_reuse_distance: a released parameter stays gathered when the
  // fetch trace uses it again within this many elements (DeepSpeed's default 1e9). The three
  // stage-3 fields load under their `stage3_` name or the bare one (DeepSpeedZeroConfig aliases).
  std::optional<long long> stage3_max_reuse_distance;
  // stage3_prefetch_bucket_size: "auto": HF fills int(0.9 * hidden_size^2) (trainer_config_finalize).
  bool stage3_prefetch_bucket_size_auto = false;
  // reduce_bucket_size: "auto": transformers' HfTrainerDeepSpeedConfig.trainer_config_finalize fills
  // it with hidden_size * hidden_size (integrations/deepspeed.py), as the HF Trainer axolotl runs does.
  bool reduce_bucket_size_auto = false;
  // zero_optimization.stage3_param_persistence_threshold (alias param_persistence_threshold):
  // ZeRO-3 keeps parameters of at most this many elements whole on every rank (no gather, no
  // release: parameter_offload.py mark_persistent_parameters). Unset: absent or "auto" dropped by
  // DeepSpeed (config_utils.py DeepSpeedConfigModel drops "auto" values): 1e5. "auto" under the
  // stage3_ name: HF fills 10 * hidden_size (persistence_threshold_auto).
  std::optional<long long> param_persistence_threshold;
  bool param_persistence_threshold_auto = false;
  bool overlap_comm_or_default() const { return overlap_comm.value_or(zero_stage == 3); }
  // Numeric values; unset when absent or "auto" (HF's Trainer fills "auto" from its arguments).
  std::optional<long long> gradient_accumulation_steps;
  std::optional<long long> train_micro_batch_size_per_gpu;
  std::optional<long long> train_batch_size;
};

// Parses a DeepSpeed config; `where` names it in messages ("ds.json" or "plan.yaml:48: key deepspeed").
DeepSpeedConfig parse_deepspeed_config(const nlohmann::json& config, const std::string& where);
// Reads the JSON file at `path` (InputError: missing, malformed, wrong types).
DeepSpeedConfig read_deepspeed_config(const std::string& path, const std::string& key_where);

// An accelerate config file (`accelerate config` writes it), as accelerate 1.15's ClusterConfig
// reads it (accelerate/commands/config/config_args.py): unknown keys mean another accelerate
// version wrote it, and accelerate refuses it too.
struct AccelerateConfig {
  std::string file;
  std::string distributed_type;               // NO, MULTI_GPU, FSDP, DEEPSPEED, ...
  std::optional<int> num_processes;           // all processes over all machines
  int num_machines = 1;
  std::optional<int> fsdp_version;            // fsdp_config.fsdp_version (accelerate's default: 1)
  std::vector<std::string> fsdp_settings;     // "fsdp_offload_params: true", ...
  // deepspeed_config (accelerate/commands/config/cluster.py writes it; `accelerate launch` passes
  // each key to the processes as an ACCELERATE_* variable, and DeepSpeedPlugin.__post_init__ in
  // accelerate/utils/dataclasses.py builds the DeepSpeed config from them).
  std::optional<std::string> deepspeed_config_file;  // deepspeed_config_file ("none": unset, as the plugin reads it)
  std::optional<int> zero_stage;                     // zero_stage (the plugin's default: 2)
  std::string offload_optimizer_device;              // offload_optimizer_device ("" or "none": none)
  std::string offload_param_device;                  // offload_param_device
  std::optional<long long> gradient_accumulation_steps;  // gradient_accumulation_steps
  std::optional<bool> zero3_init_flag;               // zero3_init_flag (deepspeed.zero.Init at model load)
  // Every deepspeed_config key as written, with "FILE:LINE" (launch.py passes the key names as
  // ACCELERATE_CONFIG_DS_FIELDS; the plugin refuses some of them beside a DeepSpeed JSON).
  std::vector<std::pair<std::string, std::string>> deepspeed_fields;
  // The top-level mixed_precision when the file sets one (not null; `fp16: true` is "fp16"), and
  // where: `accelerate launch` then adds "mixed_precision" to ACCELERATE_CONFIG_DS_FIELDS.
  std::optional<std::string> mixed_precision;
  std::string mixed_precision_where;
};

// accelerate 1.15's DeepSpeedPlugin._deepspeed_config_checks: with a DeepSpeed JSON (the plan's
// `deepspeed:` or deepspeed_config.deepspeed_config_file), these accelerate config fields would be
// ignored, and the plugin raises instead. `json` names the DeepSpeed JSON in the message. Throws
// InputError at the first such field ("FILE:LINE: key ...").
void refuse_accelerate_fields_beside_json(const AccelerateConfig& config, const std::string& json);

AccelerateConfig read_accelerate_config(const std::string& path);
// The same from the file's parsed tree (`where` names it in messages, e.g. with --set edits).
AccelerateConfig parse_accelerate_config(const YAML::Node& root, const std::string& path, const std::string& where);

// axolotl's fsdp_config (src/axolotl/utils/schemas/fsdp.py FSDPConfig, `fsdp_` prefixes dropped),
// typed for the FSDP models; unset fields keep the engine's own default. `where` gives "FILE:LINE"
// of each key the plan set (fixes are patches to those lines).
struct FsdpSettings {
  std::optional<bool> reshard_after_forward;  // FSDP2 fully_shard(reshard_after_forward=...)
  bool offload_params = false;                // FSDP2 CPUOffloadPolicy / FSDP1 CPUOffload
  bool activation_checkpointing = false;      // accelerate applies checkpoint_wrapper (non-reentrant)
  std::string auto_wrap_policy;               // TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP, NO_WRAP
  std::vector<std::string> transformer_layer_cls_to_wrap;  // module class names
  std::optional<bool> use_orig_params;        // FSDP1
  std::optional<bool> cpu_ram_efficient_loading;
  std::string state_dict_type;
  // FSDP1 with a PEFT adapter: transformers 5.17's Trainer replaces the wrap policy with PEFT's
  // fsdp_auto_wrap_policy (transformers/distributed/fsdp.py update_fsdp_plugin_peft; peft 0.21
  // utils/other.py): one unit per leaf module whose weight requires grad (each LoRA A and B
  // Linear) nested in the decoder-layer units. Set by the plan loader (sim/sync/fsdp1/fsdp1_model.h).
  bool peft_wrap_policy = false;
  // With the PEFT policy, what the FSDP1 model does not cover (fsdp1_not_modelled_reason): base
  // weights quantized by bitsandbytes (load_in_4bit / load_in_8bit), and trainable leaf modules
  // other than LoRA A/B (unfrozen_parameters, lora_target_parameters' ParamWrapper).
  bool peft_quantized_base = false;
  bool peft_other_trainable_leaves = false;
  std::map<std::string, std::string> where;   // "reshard_after_forward" -> "plan.yaml:61"
};

// The engine a plan runs on, what decided it, and the settings the report names.
struct Engine {
  EngineKind kind = EngineKind::Ddp;
  std::optional<DeepSpeedConfig> deepspeed;
  FsdpSettings fsdp;  // FSDP1 / FSDP2 only
  std::vector<std::string> decided_by;   // "fsdp_version: 2 (plan.yaml:64)"
  std::vector<std::string> settings;     // engine settings worth naming ("offload_param: cpu")
  // accelerate's ParallelismConfig data-parallel mesh (axolotl's dp_shard_size /
  // dp_replicate_size, utils/distributed.py _get_parallel_config_kwargs): FSDP2's
  // fully_shard(mesh=...) shards over `dp_shard` and, with dp_replicate > 1, all-reduces the
  // shards across `dp_replicate` (HSDP). 0 = no mesh key set: FSDP2 over the whole world.
  int dp_shard = 0;
  int dp_replicate = 1;
  // Ranks one FSDP2 unit is sharded over: the dp_shard group, or the whole world.
  int shard_ranks(int world_size) const { return dp_shard > 0 ? dp_shard : world_size; }
  // axolotl's ExpertParallelPlugin (expert_parallel_size > 1, integrations/expert_parallel/) where
  // hookstream models it: pure EP under DDP (expert_parallel_size = world size). 1 = no expert
  // parallelism. Each rank holds 1/expert_parallel of every MoE layer's fused experts, outside
  // DDP's Reducer (shard.py: _ddp_params_and_buffers_to_ignore), scaled by a gradient hook, and
  // the routed tokens move by all-to-all over the ep group (docs/engines/expert-parallel.md).
  int expert_parallel = 1;
  // Parallelism beside data parallelism that the DDP model does not cover
  // ("tensor_parallel_size: 2", "context_parallel_size: 4", "expert_parallel_size: 4").
  std::vector<std::string> other_parallelism;
  // Whether hookstream models this engine's hook schedule (sim/sync/sync_simulation.h).
  bool modelled() const;
  // "DDP", "FSDP1", "FSDP2", "DeepSpeed ZeRO-3" (+ " with tensor_parallel_size: 2" ...).
  std::string name() const;
};

std::string engine_kind_name(EngineKind kind);

}  // namespace hookstream
