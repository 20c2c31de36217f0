#include "sim/inputs/axolotl_config/distributed_config.h"
#include "sim/sync/sync_simulation.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "sim/inputs/closest_name.h"
#include "sim/inputs/input_error.h"
#include "sim/inputs/json_input.h"
#include "sim/inputs/yaml_input.h"

namespace hookstream {
namespace {

std::string read_text(const std::string& path, const std::string& where, const std::string& what) {
  std::error_code ignored;
  if (std::filesystem::is_directory(path, ignored)) throw InputError(where, "cannot read " + what + " " + path + ": Is a directory");
  std::ifstream file(path, std::ios::binary);
  if (!file) throw InputError(where, "cannot read " + what + " " + path + ": " + std::strerror(errno));
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

// An integer, or unset for "auto" (transformers' HfTrainerDeepSpeedConfig fills "auto" from the
// TrainingArguments, integrations/deepspeed.py trainer_config_process).
std::optional<long long> auto_or_integer(const nlohmann::json& config, const char* key, const std::string& where) {
  if (!config.contains(key)) return std::nullopt;
  const nlohmann::json& value = config.at(key);
  if (value.is_string() && value.get<std::string>() == "auto") return std::nullopt;
  if (!value.is_number_integer() || value.get<long long>() < 1) {
    throw InputError(where, std::string("key \"") + key + "\": expected a positive integer or \"auto\", got " + value.dump());
  }
  return value.get<long long>();
}

std::string offload_device(const nlohmann::json& zero, const char* key, const std::string& where) {
  if (!zero.contains(key) || zero.at(key).is_null()) return "";
  const nlohmann::json& offload = zero.at(key);
  if (!offload.is_object()) throw InputError(where, std::string("key \"zero_optimization.") + key + "\": expected an object with \"device\", got " + offload.dump());
  if (!offload.contains("device")) return "";
  if (!offload.at("device").is_string()) throw InputError(where, std::string("key \"zero_optimization.") + key + ".device\": expected \"none\", \"cpu\", \"nvme\" or \"auto\"");
  const std::string device = offload.at("device").get<std::string>();
  if (device != "none" && device != "cpu" && device != "nvme" && device != "auto") {
    throw InputError(where, std::string("key \"zero_optimization.") + key + ".device\": expected \"none\", \"cpu\", \"nvme\" or \"auto\", got \"" + device + "\"");
  }
  // "auto": accelerate's DeepSpeedPlugin fills it with its offload_*_device, "none" unless
  // ACCELERATE_DEEPSPEED_OFFLOAD_*_DEVICE is set (accelerate 1.15 utils/dataclasses.py
  // __post_init__, fill_match); axolotl never sets those, and accelerate refuses the accelerate
  // config's fields beside a JSON. Checked against the real plugin (tests/oracles).
  return device == "none" || device == "auto" ? "" : device;
}

// accelerate 1.15.0's ClusterConfig fields (accelerate/commands/config/config_args.py, BaseConfig +
// ClusterConfig), plus the legacy keys its process_config converts (fp16, dynamo_backend).
const std::vector<std::string>& accelerate_keys() {
  static const std::vector<std::string> keys = {
      "compute_environment", "distributed_type", "mixed_precision", "use_cpu", "debug", "num_processes",
      "machine_rank", "num_machines", "gpu_ids", "main_process_ip", "main_process_port", "rdzv_backend",
      "same_network", "main_training_function", "enable_cpu_affinity", "fp8_config", "deepspeed_config",
      "fsdp_config", "parallelism_config", "megatron_lm_config", "mpirun_config", "downcast_bf16", "tpu_name",
      "tpu_zone", "tpu_use_cluster", "tpu_use_sudo", "command_file", "commands", "tpu_vm", "tpu_env",
      "dynamo_config", "fp16", "dynamo_backend"};
  return keys;
}

// accelerate's DistributedType values (accelerate/utils/dataclasses.py).
const std::vector<std::string>& distributed_types() {
  static const std::vector<std::string> types = {"NO", "MULTI_CPU", "MULTI_GPU", "MULTI_NPU", "MULTI_MLU", "MULTI_SDAA",
                                                 "MULTI_MUSA", "MULTI_XPU", "MULTI_HPU", "DEEPSPEED", "FSDP", "XLA",
                                                 "MEGATRON_LM"};
  return types;
}

std::string at_line(const std::string& file, const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.is_null() || mark.line < 0) return file;
  return file + ":" + std::to_string(mark.line + 1);
}

int yaml_int(const std::string& file, const YAML::Node& node, const std::string& key, int min) {
  long long value = 0;
  if (!node.IsScalar() || !YAML::convert<long long>::decode(node, value) || value < min || value > 1 << 20) {
    throw InputError(at_line(file, node), "key \"" + key + "\": expected an integer >= " + std::to_string(min) + ", got " +
                                              (node.IsScalar() ? "\"" + node.Scalar() + "\"" : std::string("a mapping or list")));
  }
  return static_cast<int>(value);
}

}  // namespace

DeepSpeedConfig parse_deepspeed_config(const nlohmann::json& config, const std::string& where) {
  if (!config.is_object()) throw InputError(where, "expected a DeepSpeed config object, got " + std::string(config.type_name()));
  DeepSpeedConfig result;
  result.gradient_accumulation_steps = auto_or_integer(config, "gradient_accumulation_steps", where);
  result.train_micro_batch_size_per_gpu = auto_or_integer(config, "train_micro_batch_size_per_gpu", where);
  result.train_batch_size = auto_or_integer(config, "train_batch_size", where);
  if (config.contains("zero_optimization") && !config.at("zero_optimization").is_null()) {
    const nlohmann::json& zero = config.at("zero_optimization");
    if (!zero.is_object()) throw InputError(where, "key \"zero_optimization\": expected an object, got " + zero.dump());
    result.zero_optimization_present = true;
    if (zero.contains("stage")) {
      const nlohmann::json& stage = zero.at("stage");
      if (stage.is_string() && stage.get<std::string>() == "auto") {
        // Resolved by whoever builds accelerate's DeepSpeedPlugin (plan.cc: deepspeed_engine);
        // zero_stage stays 0 until then.
        result.stage_auto = true;
      } else if (!stage.is_number_integer() || stage.get<long long>() < 0 || stage.get<long long>() > 3) {
        // deepspeed/runtime/zero/config.py: ZeroStageEnum 0..3.
        throw InputError(where, "key \"zero_optimization.stage\": expected 0, 1, 2, 3 or \"auto\", got " + stage.dump());
      } else {
        result.zero_stage = stage.get<int>();
      }
    }
    result.offload_optimizer = offload_device(zero, "offload_optimizer", where);
    result.offload_param = offload_device(zero, "offload_param", where);
    for (const char* key : {"overlap_comm", "contiguous_gradients"}) {
      if (!zero.contains(key) || zero.at(key).is_null()) continue;
      // Nobody fills these "auto"s (neither HF's trainer_config_process/finalize nor accelerate's
      // plugin): DeepSpeedConfigModel (deepspeed/runtime/config_utils.py) drops every "auto"
      // value, so DeepSpeed's default applies (overlap_comm: true only at stage 3).
      if (zero.at(key).is_string() && zero.at(key).get<std::string>() == "auto") continue;
      if (!zero.at(key).is_boolean()) {
        throw InputError(where, std::string("key \"zero_optimization.") + key + "\": expected true, false or \"auto\", got " + zero.at(key).dump());
      }
      (std::string(key) == "overlap_comm" ? result.overlap_comm : result.contiguous_gradients) = zero.at(key).get<bool>();
    }
    // Sizes in elements (DeepSpeedZeroConfig, deepspeed/runtime/zero/config.py: pp_int fields, ge=0
    // or gt=0; HF writes 5e8 as a float). "auto": reduce_bucket_size and stage3_prefetch_bucket_size
    // are filled by HF's Trainer from the model (reduce_bucket_size_auto,
    // stage3_prefetch_bucket_size_auto); for the others DeepSpeed drops it and keeps its default. The
    // persistence threshold, read under both its names, follows below.
    // The stage-3 sizes load under DeepSpeedZeroConfig's field name or its `stage3_` alias (the
    // alias first, as HF's Trainer fills "auto" only there).
    const std::vector<std::pair<const char*, std::optional<long long>*>> sizes = {
        {"reduce_bucket_size", &result.reduce_bucket_size},
        {"allgather_bucket_size", &result.allgather_bucket_size},
        {"stage3_prefetch_bucket_size", &result.stage3_prefetch_bucket_size},
        {"prefetch_bucket_size", &result.stage3_prefetch_bucket_size},
        {"stage3_max_live_parameters", &result.stage3_max_live_parameters},
        {"max_live_parameters", &result.stage3_max_live_parameters},
        {"stage3_max_reuse_distance", &result.stage3_max_reuse_distance},
        {"max_reuse_distance", &result.stage3_max_reuse_distance},
        {"sub_group_size", &result.sub_group_size}};
    for (const auto& [key, field] : sizes) {
      if (!zero.contains(key)) continue;
      if (*field || (std::string(key) == "prefetch_bucket_size" && result.stage3_prefetch_bucket_size_auto)) continue;
      const nlohmann::json& size = zero.at(key);
      const bool bucket = std::string(key) == "reduce_bucket_size";
      // reduce_bucket_size must be > 0 (gt=0); the others may be 0 (ge=0).
      const double least = bucket ? 1 : 0;
      if (size.is_number() && size.get<double>() >= least) {
        *field = static_cast<long long>(size.get<double>());
      } else if (size.is_string() && size.get<std::string>() == "auto") {
        if (bucket) result.reduce_bucket_size_auto = true;
        if (std::string(key) == "stage3_prefetch_bucket_size") result.stage3_prefetch_bucket_size_auto = true;
      } else {
        throw InputError(where, std::string("key \"zero_optimization.") + key + "\": expected a number " + (least > 0 ? "> 0" : ">= 0") +
                                    " or \"auto\", got " + size.dump());
      }
    }
    // DeepSpeedZeroConfig.param_persistence_threshold: Field(pp_int(1e5), ge=0,
    // alias="stage3_param_persistence_threshold"); HF fills "auto" only under the stage3_ name.
    for (const char* key : {"stage3_param_persistence_threshold", "param_persistence_threshold"}) {
      if (!zero.contains(key) || zero.at(key).is_null()) continue;
      const nlohmann::json& value = zero.at(key);
      if (value.is_number() && value.get<double>() >= 0) {
        result.param_persistence_threshold = static_cast<long long>(value.get<double>());
      } else if (value.is_string() && value.get<std::string>() == "auto") {
        result.param_persistence_threshold_auto = std::string(key) == "stage3_param_persistence_threshold";
      } else {
        throw InputError(where, std::string("key \"zero_optimization.") + key + "\": expected a number >= 0 or \"auto\", got " + value.dump());
      }
      break;
    }
  }
  return result;
}

DeepSpeedConfig read_deepspeed_config(const std::string& path, const std::string& key_where) {
  const std::string text = read_text(path, key_where, "the DeepSpeed config");
  DeepSpeedConfig result = parse_deepspeed_config(parse_input_json(text, path), path);
  result.file = path;
  return result;
}

AccelerateConfig read_accelerate_config(const std::string& path) {
  const std::string text = read_text(path, "--accelerate-config", "the accelerate config");
  YAML::Node root;
  try {
    // accelerate reads .json with json.load and anything else with yaml.safe_load; YAML is a
    // superset of JSON for these files, so one parser reads both.
    root = YAML::Load(text);
  } catch (const YAML::ParserException& error) {
    throw InputError(path + ":" + std::to_string(error.mark.line + 1), "malformed YAML: " + yaml_parse_message(error));
  }
  return parse_accelerate_config(root, path, path);
}

AccelerateConfig parse_accelerate_config(const YAML::Node& root, const std::string& path, const std::string& where) {
  if (!root.IsMap()) throw InputError(where, "expected a mapping of accelerate config keys");
  AccelerateConfig result;
  result.file = path;
  std::set<std::string> seen;
  for (const auto& entry : root) {
    const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : "";
    if (std::find(accelerate_keys().begin(), accelerate_keys().end(), key) == accelerate_keys().end()) {
      std::string message = "unknown key \"" + key + "\": not a key of accelerate 1.15's config (ClusterConfig), so another accelerate version wrote this file";
      const std::string close = closest_name(key, accelerate_keys());
      if (!close.empty()) message += "; did you mean `" + close + "`?";
      throw InputError(at_line(path, entry.first), message);
    }
    if (!seen.insert(key).second) throw InputError(at_line(path, entry.first), "duplicate key \"" + key + "\"");
  }
  const YAML::Node environment = root["compute_environment"];
  if (environment && environment.IsScalar() && environment.Scalar() != "LOCAL_MACHINE") {
    throw InputError(at_line(path, environment), "key \"compute_environment\": only LOCAL_MACHINE configs are read (got \"" + environment.Scalar() + "\")");
  }
  const YAML::Node type = root["distributed_type"];
  // accelerate's process_config: "A `distributed_type` must be specified in the config file."
  if (!type || !type.IsScalar()) throw InputError(path, "key \"distributed_type\": missing; accelerate requires it (" + std::string("NO, MULTI_GPU, FSDP, DEEPSPEED, ...)"));
  result.distributed_type = type.Scalar();
  if (std::find(distributed_types().begin(), distributed_types().end(), result.distributed_type) == distributed_types().end()) {
    throw InputError(at_line(path, type), "key \"distributed_type\": expected one of NO, MULTI_GPU, FSDP, DEEPSPEED, MULTI_CPU, ..., got \"" + result.distributed_type + "\"");
  }
  if (const YAML::Node processes = root["num_processes"]) {
    // accelerate writes -1 for "take it from the launcher" (SLURM); that is no world size.
    const int value = yaml_int(path, processes, "num_processes", -1);
    if (value == 0) throw InputError(at_line(path, processes), "key \"num_processes\": expected an integer >= 1 (or -1), got 0");
    if (value > 0) result.num_processes = value;
  } else if (result.distributed_type == "NO") {
    result.num_processes = 1;
  }
  if (const YAML::Node machines = root["num_machines"]) result.num_machines = yaml_int(path, machines, "num_machines", 1);
  if (const YAML::Node fsdp = root["fsdp_config"]; fsdp && fsdp.IsMap()) {
    for (const auto& entry : fsdp) {
      const std::string key = entry.first.Scalar();
      if (key == "fsdp_version") {
        result.fsdp_version = yaml_int(path, entry.second, "fsdp_config.fsdp_version", 1);
        if (*result.fsdp_version > 2) throw InputError(at_line(path, entry.second), "key \"fsdp_config.fsdp_version\": expected 1 or 2");
      } else if (entry.second.IsScalar()) {
        result.fsdp_settings.push_back(key + ": " + entry.second.Scalar());
      }
    }
  }
  if (const YAML::Node deepspeed = root["deepspeed_config"]; deepspeed && deepspeed.IsMap()) {
    for (const auto& entry : deepspeed) {
      result.deepspeed_fields.emplace_back(entry.first.Scalar(), at_line(path, entry.first));
    }
    // accelerate's DeepSpeedPlugin takes deepspeed_config_file only when it is not "none" (the
    // questionnaire's default).
    if (const YAML::Node file = deepspeed["deepspeed_config_file"]; file && file.IsScalar() && file.Scalar() != "none" && !file.Scalar().empty()) {
      result.deepspeed_config_file = file.Scalar();
    }
    if (const YAML::Node stage = deepspeed["zero_stage"]; stage && !stage.IsNull()) {
      // DeepSpeed's ZeroStageEnum has 0..3 (deepspeed/runtime/zero/config.py).
      result.zero_stage = yaml_int(path, stage, "deepspeed_config.zero_stage", 0);
      if (*result.zero_stage > 3) throw InputError(at_line(path, stage), "key \"deepspeed_config.zero_stage\": expected 0, 1, 2 or 3, got " + stage.Scalar());
    }
    for (const char* key : {"offload_optimizer_device", "offload_param_device"}) {
      const YAML::Node device = deepspeed[key];
      if (!device || device.IsNull()) continue;
      // DeepSpeed's OffloadDeviceEnum (deepspeed/runtime/zero/offload_config.py): none, cpu, nvme.
      const std::string value = device.IsScalar() ? device.Scalar() : "";
      if (value != "none" && value != "cpu" && value != "nvme") {
        throw InputError(at_line(path, device), std::string("key \"deepspeed_config.") + key + "\": expected none, cpu or nvme, got " +
                                                    (device.IsScalar() ? "\"" + value + "\"" : std::string("a mapping or list")));
      }
      (std::string(key) == "offload_param_device" ? result.offload_param_device : result.offload_optimizer_device) = value == "none" ? "" : value;
    }
    if (const YAML::Node steps = deepspeed["gradient_accumulation_steps"]; steps && !steps.IsNull()) {
      result.gradient_accumulation_steps = yaml_int(path, steps, "deepspeed_config.gradient_accumulation_steps", 1);
    }
    if (const YAML::Node flag = deepspeed["zero3_init_flag"]; flag && flag.IsScalar()) {
      bool value = false;
      if (!YAML::convert<bool>::decode(flag, value)) {
        throw InputError(at_line(path, flag), "key \"deepspeed_config.zero3_init_flag\": expected true or false, got \"" + flag.Scalar() + "\"");
      }
      result.zero3_init_flag = value;
    }
  }
  // config_args.py BaseConfig.from_yaml_file: a missing mixed_precision is "fp16" when the legacy
  // `fp16: true` is set, else None; launch.py then adds "mixed_precision" to the DeepSpeed fields.
  if (const YAML::Node precision = root["mixed_precision"]; precision && !precision.IsNull()) {
    result.mixed_precision = precision.IsScalar() ? precision.Scalar() : "";
    result.mixed_precision_where = at_line(path, root["mixed_precision"]);
  } else if (const YAML::Node fp16 = root["fp16"]; !precision && fp16 && fp16.IsScalar()) {
    bool value = false;
    if (YAML::convert<bool>::decode(fp16, value) && value) {
      result.mixed_precision = "fp16";
      result.mixed_precision_where = at_line(path, fp16);
    }
  }
  return result;
}

void refuse_accelerate_fields_beside_json(const AccelerateConfig& config, const std::string& json) {
  // accelerate/utils/dataclasses.py DeepSpeedPlugin._deepspeed_config_checks: the ACCELERATE_*
  // variables a DeepSpeed JSON makes meaningless, by the accelerate config field that sets each.
  static const std::vector<std::string> ignored = {"gradient_accumulation_steps", "gradient_clipping", "zero_stage",
                                                   "offload_optimizer_device", "offload_param_device", "offload_param_nvme_path",
                                                   "offload_optimizer_nvme_path", "zero3_save_16bit_model", "mixed_precision"};
  auto refuse = [&](const std::string& key, const std::string& where) {
    throw InputError(where, "key \"" + key + "\": accelerate refuses it beside the DeepSpeed config " + json +
                                " (DeepSpeedPlugin: \"When using `deepspeed_config_file`, the following accelerate config variables will be "
                                "ignored: ['gradient_accumulation_steps', 'gradient_clipping', 'zero_stage', 'offload_optimizer_device', "
                                "'offload_param_device', 'offload_param_nvme_path', 'offload_optimizer_nvme_path', 'zero3_save_16bit_model', "
                                "'mixed_precision']\"); remove it here and set it in the JSON");
  };
  for (const auto& [key, where] : config.deepspeed_fields) {
    std::string lower = key;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (std::find(ignored.begin(), ignored.end(), lower) != ignored.end()) refuse("deepspeed_config." + key, where);
  }
  if (config.mixed_precision) refuse("mixed_precision", config.mixed_precision_where);
}

std::string engine_kind_name(EngineKind kind) {
  switch (kind) {
    case EngineKind::Ddp: return "DDP";
    case EngineKind::Fsdp1: return "FSDP1";
    case EngineKind::Fsdp2: return "FSDP2";
    case EngineKind::DeepSpeed: return "DeepSpeed";
  }
  return "";
}

std::string Engine::name() const {
  std::string text = engine_kind_name(kind);
  if (kind == EngineKind::DeepSpeed && deepspeed) text += " ZeRO-" + std::to_string(deepspeed->zero_stage);
  if (expert_parallel > 1) text += " with pure expert parallelism (expert_parallel_size: " + std::to_string(expert_parallel) + ")";
  for (size_t i = 0; i < other_parallelism.size(); ++i) text += (i == 0 ? " with " : ", ") + other_parallelism[i];
  return text;
}

bool Engine::modelled() const { return gradient_sync_modelled(*this); }

}  // namespace hookstream
