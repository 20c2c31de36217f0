// Reads a training plan: axolotl-style YAML plus a `hookstream:` section (docs/plan-format.md).
// Three passes: --set edits are applied to the YAML tree, the tree is converted key by key into a
// Plan (unknown keys and wrong types fail here, with the line they are on), then cross-key rules are
// checked against the resolved model. Every failure is one InputError line.
#include "sim/inputs/plan.h"

#include "sim/inputs/axolotl_config/axolotl_schema.h"
#include "sim/inputs/data_files.h"
#include "sim/inputs/json_input.h"
#include "sim/cost/optimizer_states.h"

#include "sim/inputs/closest_name.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "sim/inputs/input_error.h"
#include "sim/inputs/model_source/hf_hub.h"
#include "sim/inputs/model_source/model_types.h"
#include "sim/inputs/yaml_input.h"

namespace hookstream {
namespace {

namespace fs = std::filesystem;

// ----------------------------------------------------------------------------------------------
// Keys
// ----------------------------------------------------------------------------------------------

// Top-level axolotl keys that shape the hook schedule.
const std::vector<std::string>& schedule_keys() {
  static const std::vector<std::string> keys = {
      "base_model", "sequence_len", "micro_batch_size", "gradient_accumulation_steps", "adapter",
      "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "lora_target_linear", "lora_target_parameters",
      "load_in_4bit", "load_in_8bit", "gradient_checkpointing", "gradient_checkpointing_kwargs",
      "activation_offloading", "tiled_mlp", "tiled_mlp_num_shards", "ddp_find_unused_parameters",
      "ddp_bucket_cap_mb", "device_map", "unfrozen_parameters", "base_model_config",
      "revision_of_model",
      "chunked_cross_entropy", "chunked_cross_entropy_num_chunks", "learning_rate", "weight_decay",
      "seed", "bf16", "max_steps", "optimizer", "torch_compile", "torch_compile_backend", "torch_compile_mode",
      "trust_remote_code", "sample_packing", "attn_implementation", "flex_attention", "flash_attention",
      "sdp_attention", "eager_attention", "rl", "plugins", "liger_rms_norm", "liger_glu_activation", "liger_swiglu"};
  return keys;
}

// Top-level axolotl keys that decide the engine a plan runs on (DDP, FSDP1/2, DeepSpeed ZeRO) and
// parallelism beside data parallelism; read by engine_rules() below.
const std::vector<std::string>& engine_keys() {
  static const std::vector<std::string> keys = {
      "deepspeed", "fsdp", "fsdp_config", "fsdp_version", "context_parallel_size", "tensor_parallel_size",
      "expert_parallel_size", "expert_parallel_backend", "dp_shard_size", "dp_replicate_size", "sequence_parallel_degree"};
  return keys;
}

const std::vector<std::string>& hookstream_keys() {
  static const std::vector<std::string> keys = {
      "world_size", "iterations", "static_graph", "gradient_as_bucket_view", "checkpoint_layers",
      "checkpoint_twice_layers", "tiled_mlp_backward", "tiled_mlp_weights_as_inputs", "tiled_mlp_ds_grad_is_ready",
      "z3_leaf_mlp",
      "enable_input_require_grads", "train_vision_tower", "vision_inputs", "unused_modules",
      "rank_overrides", "iteration_overrides", "offload_protocol", "pinned_slots", "offload_layers", "gpu", "calibration", "weights",
      "data", "vision_tokens", "tiled_mlp_layers", "micro_step_overrides", "torch_version",
      "optimize_ddp", "compiled_autograd", "transformers_version", "torch_distributed_debug",
      "chunked_loss"};
  return keys;
}

const std::vector<std::string>& override_keys() {
  static const std::vector<std::string> keys = {"sequence_len", "tiled_mlp_num_shards",
                                                "checkpoint_twice_layers", "unused_modules"};
  return keys;
}

// axolotl passes gradient_checkpointing_kwargs to transformers' gradient_checkpointing_enable,
// which passes them to torch.utils.checkpoint.checkpoint: these are the keyword arguments it takes
// (torch/utils/checkpoint.py; preserve_rng_state arrives through **kwargs). Any other key is a
// TypeError/ValueError in torch, so it is an error here too.
const std::vector<std::string>& checkpointing_kwargs_keys() {
  static const std::vector<std::string> keys = {"use_reentrant", "preserve_rng_state", "context_fn",
                                                "determinism_check", "debug", "early_stop"};
  return keys;
}

// Every top-level key a plan accepts: axolotl's schema (axolotl/keys.json), the keys the loader
// reads, and the hookstream: section.
std::vector<std::string> top_level_keys() {
  std::vector<std::string> keys;
  // world_size is in axolotl's schema, but axolotl overwrites it (see Converter::top_level).
  for (const std::string& key : axolotl_schema().names) {
    if (key != "world_size") keys.push_back(key);
  }
  for (const auto* list : {&schedule_keys(), &engine_keys()}) {
    for (const std::string& key : *list) {
      if (!std::binary_search(axolotl_schema().names.begin(), axolotl_schema().names.end(), key)) keys.push_back(key);
    }
  }
  keys.push_back("hookstream");
  return keys;
}

bool is_read_key(const std::string& key) {
  return std::find(schedule_keys().begin(), schedule_keys().end(), key) != schedule_keys().end() ||
         std::find(engine_keys().begin(), engine_keys().end(), key) != engine_keys().end();
}

bool contains(const std::vector<std::string>& keys, const std::string& key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

// ----------------------------------------------------------------------------------------------
// "did you mean"
// ----------------------------------------------------------------------------------------------


// `level` is "" for the top level, else the dotted section ("hookstream", ...).
std::string unknown_key_message(const std::string& key, const std::string& level,
                                const std::vector<std::string>& known) {
  std::string message = "unknown key \"" + key + "\"";
  if (!level.empty()) message += " in " + level;
  if (level.empty() && contains(hookstream_keys(), key)) {
    return message + "; did you mean `hookstream." + key + "`? (it belongs in the hookstream: section)";
  }
  if (level == "hookstream" && contains(top_level_keys(), key)) {
    return message + "; did you mean the top-level `" + key + "`? (it is an axolotl key)";
  }
  const std::string suggestion = closest_name(key, known);
  if (!suggestion.empty()) message += "; did you mean `" + suggestion + "`?";
  return message;
}

// ----------------------------------------------------------------------------------------------
// Locations and typed reads
// ----------------------------------------------------------------------------------------------

std::string join(const std::vector<std::string>& parts, const std::string& separator) {
  std::string text;
  for (size_t i = 0; i < parts.size(); ++i) text += (i ? separator : "") + parts[i];
  return text;
}

// Where a value came from: the plan file (with the line yaml-cpp recorded) or a --set option.
class Origin {
 public:
  Origin(std::string source, std::vector<std::string> set_paths)
      : source_(std::move(source)), set_paths_(std::move(set_paths)) {}

  const std::string& source() const { return source_; }

  bool from_set(const std::string& path) const {
    for (const std::string& set : set_paths_) {
      if (path == set || path.rfind(set + ".", 0) == 0) return true;
    }
    return false;
  }

  // A mapping that --set had to create (hookstream.rank_overrides.3 for
  // hookstream.rank_overrides.3.sequence_len) has no position in the file.
  bool created_by_set(const std::string& path) const {
    for (const std::string& set : set_paths_) {
      if (set.rfind(path + ".", 0) == 0) return true;
    }
    return false;
  }

  std::string at(const YAML::Node& node, const std::string& path) const {
    if (from_set(path)) return "--set";
    const YAML::Mark mark = node.Mark();
    if (mark.is_null() || mark.line < 0) return created_by_set(path) ? "--set" : source_;
    return source_ + ":" + std::to_string(mark.line + 1);
  }

 private:
  std::string source_;
  std::vector<std::string> set_paths_;
};

std::string shown(const YAML::Node& node) {
  if (node.IsNull()) return "null";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  std::string text = node.Scalar();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return "\"" + text + "\"";
}

[[noreturn]] void fail_type(const Origin& origin, const YAML::Node& node, const std::string& path,
                            const std::string& expected) {
  throw InputError(origin.at(node, path),
                   "key \"" + path + "\": expected " + expected + ", got " + shown(node));
}

long long read_integer(const Origin& origin, const YAML::Node& node, const std::string& path,
                       const std::string& expected) {
  long long value = 0;
  if (!node.IsScalar() || !YAML::convert<long long>::decode(node, value)) {
    fail_type(origin, node, path, expected);
  }
  return value;
}

int read_int(const Origin& origin, const YAML::Node& node, const std::string& path, int min, int max) {
  const std::string expected = max == std::numeric_limits<int>::max()
                                   ? "an integer >= " + std::to_string(min)
                                   : "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  const long long value = read_integer(origin, node, path, expected);
  if (value < min || value > max) fail_type(origin, node, path, expected);
  return static_cast<int>(value);
}

int read_positive(const Origin& origin, const YAML::Node& node, const std::string& path) {
  return read_int(origin, node, path, 1, std::numeric_limits<int>::max());
}

bool read_bool(const Origin& origin, const YAML::Node& node, const std::string& path) {
  bool value = false;
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, value)) {
    fail_type(origin, node, path, "true or false");
  }
  return value;
}

double read_positive_number(const Origin& origin, const YAML::Node& node, const std::string& path) {
  double value = 0;
  if (!node.IsScalar() || !YAML::convert<double>::decode(node, value) || !std::isfinite(value) ||
      value <= 0) {
    fail_type(origin, node, path, "a number > 0");
  }
  return value;
}

double read_non_negative_number(const Origin& origin, const YAML::Node& node, const std::string& path) {
  double value = 0;
  if (!node.IsScalar() || !YAML::convert<double>::decode(node, value) || !std::isfinite(value) ||
      value < 0) {
    fail_type(origin, node, path, "a number >= 0");
  }
  return value;
}

std::string read_string(const Origin& origin, const YAML::Node& node, const std::string& path) {
  if (!node.IsScalar()) fail_type(origin, node, path, "a string");
  return node.Scalar();
}

std::vector<std::string> read_string_list(const Origin& origin, const YAML::Node& node,
                                          const std::string& path) {
  if (!node.IsSequence()) fail_type(origin, node, path, "a list of strings");
  std::vector<std::string> values;
  for (const YAML::Node& item : node) {
    if (!item.IsScalar() || item.Scalar().empty()) fail_type(origin, item, path, "a list of non-empty strings");
    values.push_back(item.Scalar());
  }
  return values;
}

std::vector<int> read_layer_list(const Origin& origin, const YAML::Node& node, const std::string& path) {
  if (!node.IsSequence()) fail_type(origin, node, path, "a list of layer indices");
  std::vector<int> layers;
  for (const YAML::Node& item : node) {
    layers.push_back(read_int(origin, item, path, 0, std::numeric_limits<int>::max()));
  }
  std::sort(layers.begin(), layers.end());
  layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
  return layers;
}

// Calls `visit(key, key_node, value)` for each entry of a mapping, rejecting non-string keys,
// duplicates and keys not in `known` (`level` names the section in messages).
void for_each_entry(const Origin& origin, const YAML::Node& map, const std::string& prefix,
                    const std::vector<std::string>& known, const std::string& level,
                    const std::function<void(const std::string&, const YAML::Node&)>& visit) {
  std::set<std::string> seen;
  for (const auto& entry : map) {
    const YAML::Node& key_node = entry.first;
    if (!key_node.IsScalar()) throw InputError(origin.at(key_node, prefix), "expected a string key in " + (level.empty() ? std::string("the plan") : level));
    const std::string key = key_node.Scalar();
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    if (!known.empty() && !contains(known, key)) {
      throw InputError(origin.at(key_node, path), unknown_key_message(key, level, known));
    }
    if (!seen.insert(key).second) throw InputError(origin.at(key_node, path), "duplicate key \"" + path + "\"");
    if (entry.second.IsNull()) continue;  // `key:` with no value means unset, as in axolotl
    visit(key, entry.second);
  }
}

// The FSDPConfig field an fsdp_config key names: axolotl's check_fsdp_config_kwargs_prefix
// (src/axolotl/utils/schemas/validation.py) drops a `fsdp_` prefix from every key but fsdp_version,
// and `version` is fsdp_version (FSDPConfig's AliasChoices).
std::string fsdp_config_field(const std::string& written) {
  std::string name = written;
  if (name.rfind("fsdp_", 0) == 0 && name != "fsdp_version") name = name.substr(5);
  if (name == "version") name = "fsdp_version";
  return name;
}

// DeepSpeed 0.19's DeepSpeedZeroConfig fields that also load under a `stage3_` alias
// (deepspeed/runtime/zero/config.py: Field(..., alias="stage3_..."), populate_by_name).
const std::vector<std::string>& zero_config_aliased_fields() {
  static const std::vector<std::string> fields = {
      "prefetch_bucket_size", "param_persistence_threshold", "model_persistence_threshold", "max_live_parameters",
      "max_reuse_distance", "gather_16bit_weights_on_model_save", "module_granularity_threshold",
      "use_all_reduce_for_fetch_params", "allgather_sequential"};
  return fields;
}

// Every dotted spelling the loader reads as the same setting as `parts` (itself first): an
// fsdp_config key with or without axolotl's `fsdp_` prefix, an inline DeepSpeed mapping's
// zero_optimization field under its name or its `stage3_` alias.
std::vector<std::vector<std::string>> key_spellings(const std::vector<std::string>& parts) {
  std::vector<std::vector<std::string>> out = {parts};
  auto with_last = [&](const std::string& last) {
    std::vector<std::string> other = parts;
    other.back() = last;
    if (other != parts) out.push_back(other);
  };
  if (parts.size() == 2 && parts[0] == "fsdp_config") {
    const std::string field = fsdp_config_field(parts[1]);
    if (field == "fsdp_version") {
      with_last("fsdp_version");
      with_last("version");
    } else {
      with_last(field);
      with_last("fsdp_" + field);
    }
  } else if (parts.size() == 3 && parts[0] == "deepspeed" && parts[1] == "zero_optimization") {
    const std::string& name = parts[2];
    const std::string field = name.rfind("stage3_", 0) == 0 ? name.substr(7) : name;
    if (contains(zero_config_aliased_fields(), field)) {
      with_last(field);
      with_last("stage3_" + field);
    }
  }
  return out;
}

// The node at `parts` under `root`, or an undefined node.
YAML::Node node_at(const YAML::Node& root, const std::vector<std::string>& parts) {
  YAML::Node current = root;
  for (const std::string& part : parts) {
    if (!current.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    const YAML::Node child = current[part];
    if (!child.IsDefined()) return YAML::Node(YAML::NodeType::Undefined);
    current.reset(child);
  }
  return current;
}

// The spelling of `parts` that `root` already holds (the first found among key_spellings), else
// `parts` itself: a change to a setting edits the key the user wrote instead of adding a second
// spelling of it, which the loader would reject as a duplicate.
std::vector<std::string> spelling_in(const YAML::Node& root, const std::vector<std::string>& parts) {
  for (const std::vector<std::string>& spelling : key_spellings(parts)) {
    if (node_at(root, spelling).IsDefined()) return spelling;
  }
  return parts;
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, separator)) parts.push_back(part);
  if (!text.empty() && text.back() == separator) parts.push_back("");
  return parts;
}

// The DeepSpeed JSON file at `path` as a plan tree `{deepspeed: <its contents>}` (JSON is YAML),
// so the plan's key rules (key_spellings, apply_set) address its settings as `deepspeed.*`.
// Throws InputError when the file cannot be read or parsed.
YAML::Node deepspeed_file_tree(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw InputError(path, std::string("cannot read the DeepSpeed config: ") + std::strerror(errno));
  std::ostringstream text;
  text << file.rdbuf();
  YAML::Node tree(YAML::NodeType::Map);
  try {
    tree["deepspeed"] = YAML::Load(text.str());
  } catch (const YAML::Exception& error) {
    throw InputError(path, "malformed JSON: " + yaml_parse_message(error));
  }
  if (!tree["deepspeed"].IsMap()) throw InputError(path, "expected a JSON object of DeepSpeed settings");
  return tree;
}

// The accelerate config at `path` as a YAML tree (accelerate reads YAML or JSON). Throws InputError.
YAML::Node accelerate_file_tree(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw InputError("--accelerate-config", "cannot read " + path + ": " + std::strerror(errno));
  std::ostringstream text;
  text << file.rdbuf();
  try {
    YAML::Node tree = YAML::Load(text.str());
    if (!tree.IsMap()) throw InputError(path, "expected a mapping of accelerate config keys");
    return tree;
  } catch (const YAML::Exception& error) {
    throw InputError(path, "malformed YAML: " + yaml_parse_message(error));
  }
}

// Which file holds the setting `key` (dotted, as --set and fixes write it) for the plan `root`:
// the DeepSpeed JSON `deepspeed:` names for a `deepspeed.*` key; the --accelerate-config file
// for an `fsdp_config.*` key when the plan itself sets no engine (no fsdp_config, fsdp or
// deepspeed: the accelerate config's fsdp_config is the one that runs); else "" (the plan).
std::string file_holding(const YAML::Node& root, const LoadOptions& options, const std::string& key) {
  if (key.rfind("deepspeed.", 0) == 0 && node_at(root, {"deepspeed"}).IsScalar()) return root["deepspeed"].Scalar();
  // A plan without `deepspeed:` under an accelerate config of distributed_type DEEPSPEED: the
  // JSON its deepspeed_config_file names holds the DeepSpeed settings, else the accelerate config
  // itself (its inline deepspeed_config fields, inline_deepspeed_field).
  if (key.rfind("deepspeed.", 0) == 0 && options.accelerate_config && !node_at(root, {"deepspeed"}).IsDefined()) {
    const AccelerateConfig accelerate = read_accelerate_config(*options.accelerate_config);
    if (accelerate.distributed_type == "DEEPSPEED") return accelerate.deepspeed_config_file.value_or(*options.accelerate_config);
  }
  // accelerate's own inline field, as a fix spells it once written (inline_deepspeed_field).
  if (key.rfind("deepspeed_config.", 0) == 0 && options.accelerate_config) return *options.accelerate_config;
  if (key.rfind("fsdp_config.", 0) == 0 && options.accelerate_config && !node_at(root, {"fsdp_config"}).IsDefined() &&
      !node_at(root, {"fsdp"}).IsDefined() && !node_at(root, {"deepspeed"}).IsDefined()) {
    return *options.accelerate_config;
  }
  return "";
}

// `key` as the file holding it spells it. accelerate's own fsdp_config keys carry the `fsdp_`
// prefix (accelerate/commands/config/cluster.py writes fsdp_offload_params, ...): a key the
// accelerate file lacks is written that way.
// The accelerate config field that sets a DeepSpeed setting inline (accelerate 1.15
// DeepSpeedPlugin.__post_init__'s plugin_to_config_mapping); a setting without one cannot be
// written there (InputError naming deepspeed_config_file, where a JSON can hold it).
std::vector<std::string> inline_deepspeed_field(const std::string& file, const std::string& key) {
  static const std::map<std::string, std::string> fields = {
      {"deepspeed.zero_optimization.stage", "zero_stage"},
      {"deepspeed.zero_optimization.offload_optimizer.device", "offload_optimizer_device"},
      {"deepspeed.zero_optimization.offload_param.device", "offload_param_device"},
      {"deepspeed.gradient_accumulation_steps", "gradient_accumulation_steps"},
      {"deepspeed.gradient_clipping", "gradient_clipping"}};
  const auto found = fields.find(key);
  if (found == fields.end()) {
    throw InputError(file, "key \"" + key.substr(10) + "\": accelerate's inline deepspeed_config has no field for it; it needs a DeepSpeed JSON "
                                                        "named by deepspeed_config.deepspeed_config_file");
  }
  return {"deepspeed_config", found->second};
}

std::vector<std::string> spelling_in_file(const YAML::Node& root, const LoadOptions& options, const std::string& key) {
  const std::string file = file_holding(root, options, key);
  const std::vector<std::string> parts = split(key, '.');
  if (file.empty()) return spelling_in(root, parts);
  if (parts[0] == "deepspeed" && options.accelerate_config && file == *options.accelerate_config) return inline_deepspeed_field(file, key);
  if (parts[0] == "deepspeed_config") return parts;
  if (parts[0] == "deepspeed") return spelling_in(deepspeed_file_tree(file), parts);
  const YAML::Node tree = accelerate_file_tree(file);
  for (const std::vector<std::string>& spelling : key_spellings(parts)) {
    if (node_at(tree, spelling).IsDefined()) return spelling;
  }
  std::vector<std::string> prefixed = parts;
  if (parts.size() == 2) prefixed[1] = "fsdp_" + fsdp_config_field(parts[1]);
  if (prefixed[1] == "fsdp_fsdp_version") prefixed[1] = "fsdp_version";
  return prefixed;
}

// ----------------------------------------------------------------------------------------------
// Conversion: YAML tree -> Plan
// ----------------------------------------------------------------------------------------------

// What the conversion learned beyond the Plan fields: which keys were explicit (several rules
// depend on "unset" vs "false") and where each key was, for cross-key messages.
struct Draft {
  Plan plan;
  std::optional<bool> gradient_checkpointing;
  std::optional<bool> load_in_4bit;
  std::optional<bool> use_reentrant;
  bool checkpointing_forces_reentrant = false;
  // axolotl's expert_parallel_backend (integrations/expert_parallel/args.py): auto, deep_ep, torch.
  std::optional<std::string> expert_parallel_backend;
  std::string base_model_config;
  std::string revision_of_model;  // axolotl: the hub revision of base_model (branch, tag or commit)
  std::map<std::string, std::string> where;  // dotted key -> "FILE:LINE" or "--set"
  // The engine keys as written (engine_rules() decides the engine from them).
  std::optional<YAML::Node> deepspeed;
  // --set assignments of `deepspeed.*` keys while `deepspeed:` names a JSON file: they edit that
  // file's settings (what a fix's patch to the file does), applied when it is read.
  std::vector<std::string> deepspeed_file_sets;
  bool fsdp_list = false;                    // the deprecated `fsdp:` list is non-empty
  std::optional<YAML::Node> fsdp_config;     // the mapping, `fsdp_` prefixes already stripped
  FsdpSettings fsdp_settings;                // its typed fields
  std::optional<int> fsdp_version;           // top-level fsdp_version
  std::optional<int> fsdp_config_version;    // fsdp_config.fsdp_version / fsdp_config.version
  std::vector<std::pair<std::string, int>> parallel_sizes;  // {"tensor_parallel_size", 2}, ...
  std::map<std::string, std::string> attention;  // the attention keys set (resolve_attention)
};

// axolotl's ModelLoader._set_attention_config (src/axolotl/loaders/model.py): attn_implementation,
// else flex_attention, flash_attention, sdp_attention, eager_attention, in that order; none: the
// model class's default, which is SDPA in transformers 5 (PreTrainedModel._check_and_adjust_attn_implementation).
void resolve_attention(Draft& draft) {
  const auto& a = draft.attention;
  std::string& out = draft.plan.attn_implementation;
  if (auto it = a.find("attn_implementation"); it != a.end()) out = it->second;
  else if (a.count("flex_attention")) out = "flex_attention";
  else if (a.count("flash_attention")) out = "flash_attention_2";
  else if (a.count("sdp_attention")) out = "sdpa";
  else if (a.count("eager_attention")) out = "eager";
}

class Converter {
 public:
  Converter(const Origin& origin, Draft& draft) : origin_(origin), draft_(draft), plan_(draft.plan) {}

  // Every key of axolotl's schema loads. A key hookstream reads is converted; any other axolotl key
  // is listed in the report (not modelled, or of no effect on a training step). A key outside the
  // schema close to a known one is a typo and an error; one close to none is what axolotl itself
  // does with it, dropped (pydantic's default extra="ignore" on AxolotlInputConfig), and the report
  // lists it as ignored.
  void top_level(const YAML::Node& root) {
    const AxolotlSchema& schema = axolotl_schema();
    std::set<std::string> seen;
    for (const auto& entry : root) {
      const YAML::Node& key_node = entry.first;
      const YAML::Node& value = entry.second;
      if (!key_node.IsScalar()) throw InputError(origin_.at(key_node, ""), "expected a string key in the plan");
      const std::string key = key_node.Scalar();
      if (!seen.insert(key).second) throw InputError(origin_.at(key_node, key), "duplicate key \"" + key + "\"");
      if (key == "world_size") {
        // In axolotl's schema, but normalize_config overwrites it with the launcher's WORLD_SIZE
        // (src/axolotl/utils/config/__init__.py): the value written here never reaches training.
        throw InputError(origin_.at(key_node, key), "key \"world_size\": axolotl replaces it with the launcher's WORLD_SIZE, so it "
                                                    "does not set the world size; pass --world-size N (or --nnodes/--nproc-per-node), "
                                                    "or set `hookstream.world_size`");
      }
      // A block mapping or list starts on the line after its key: name the key's line.
      draft_.where[key] = origin_.at(value.IsScalar() ? value : key_node, key);
      if (value.IsNull()) continue;  // `key:` with no value means unset, as in axolotl
      if (key == "hookstream") {
        hookstream_section(value);
      } else if (is_read_key(key)) {
        if (key != "lora_dropout") axolotl_key(key, value);
      } else if (auto known = schema.keys.find(key); known != schema.keys.end()) {
        ConfigKeyNote note{key, origin_.at(value, key), schema.schema_class.at(key)};
        (known->second == KeyEffect::NoEffect ? plan_.no_effect_keys : plan_.not_modelled_keys).push_back(note);
      } else {
        const std::string close = closest_name(key, top_level_keys());
        if (!close.empty() || contains(hookstream_keys(), key)) {
          throw InputError(origin_.at(key_node, key), unknown_key_message(key, "", top_level_keys()));
        }
        plan_.ignored_keys.push_back({key, origin_.at(value, key), "not a key of axolotl " + schema.version + "'s schema; axolotl drops it"});
      }
    }
  }

 private:
  void axolotl_key(const std::string& key, const YAML::Node& value) {
    if (key == "base_model") plan_.base_model = read_string(origin_, value, key);
    else if (key == "base_model_config") draft_.base_model_config = read_string(origin_, value, key);
    else if (key == "revision_of_model") draft_.revision_of_model = read_string(origin_, value, key);
    else if (key == "sequence_len") plan_.sequence_len = read_positive(origin_, value, key);
    else if (key == "micro_batch_size") plan_.micro_batch_size = read_positive(origin_, value, key);
    else if (key == "gradient_accumulation_steps") plan_.gradient_accumulation_steps = read_positive(origin_, value, key);
    else if (key == "adapter") plan_.adapter = adapter(value, key);
    else if (key == "lora_r") plan_.lora_r = read_positive(origin_, value, key);
    else if (key == "lora_alpha") plan_.lora_alpha = read_positive_number(origin_, value, key);
    else if (key == "lora_target_modules") plan_.lora_target_modules = target_modules(value, key);
    else if (key == "lora_target_linear") plan_.lora_target_linear = read_bool(origin_, value, key);
    else if (key == "lora_target_parameters") plan_.lora_target_parameters = read_string_list(origin_, value, key);
    else if (key == "load_in_4bit") draft_.load_in_4bit = plan_.load_in_4bit = read_bool(origin_, value, key);
    else if (key == "load_in_8bit") plan_.load_in_8bit = read_bool(origin_, value, key);
    else if (key == "gradient_checkpointing") gradient_checkpointing(value, key);
    else if (key == "gradient_checkpointing_kwargs") checkpointing_kwargs(value, key);
    else if (key == "activation_offloading") activation_offloading(value, key);
    else if (key == "tiled_mlp") plan_.tiled_mlp = read_bool(origin_, value, key);
    else if (key == "tiled_mlp_num_shards") plan_.tiled_mlp_num_shards = read_positive(origin_, value, key);
    else if (key == "torch_compile") {
      // axolotl's schema: bool | "auto"; "auto" is taken as on (it is a request to compile).
      plan_.torch_compile.enabled = value.IsScalar() && lowercase(value.Scalar()) == "auto" ? true : read_bool(origin_, value, key);
    } else if (key == "torch_compile_backend" || key == "torch_compile_mode") {
      // TrainingArguments.__post_init__: a backend or a mode implies torch_compile.
      (key == "torch_compile_backend" ? plan_.torch_compile.backend : plan_.torch_compile.mode) = read_string(origin_, value, key);
      plan_.torch_compile.enabled = true;
    }
    else if (key == "ddp_find_unused_parameters") plan_.ddp_find_unused_parameters = read_bool(origin_, value, key);
    else if (key == "ddp_bucket_cap_mb") plan_.ddp_bucket_cap_mb = read_positive_number(origin_, value, key);
    else if (key == "device_map") plan_.device_map = device_map(value, key);
    else if (key == "unfrozen_parameters") plan_.unfrozen_parameters = regex_list(value, key);
    else if (key == "chunked_cross_entropy") plan_.chunked_cross_entropy = read_bool(origin_, value, key);
    else if (key == "chunked_cross_entropy_num_chunks") plan_.chunked_cross_entropy_num_chunks = read_int(origin_, value, key, 1, 1 << 20);
    else if (key == "learning_rate") plan_.learning_rate = read_positive_number(origin_, value, key);
    else if (key == "weight_decay") plan_.weight_decay = read_non_negative_number(origin_, value, key);
    else if (key == "seed") plan_.seed = read_int(origin_, value, key, 0, 2147483647);
    else if (key == "bf16") plan_.bf16 = bf16(value, key);
    else if (key == "max_steps") plan_.max_steps = read_positive(origin_, value, key);
    else if (key == "trust_remote_code") plan_.trust_remote_code = read_bool(origin_, value, key);
    else if (key == "sample_packing") plan_.sample_packing = read_bool(origin_, value, key);
    else if (key == "plugins") plan_.plugins = read_string_list(origin_, value, key);
    else if (key == "liger_rms_norm") plan_.liger_rms_norm = read_bool(origin_, value, key);
    // LigerArgs: liger_swiglu is the deprecated name of liger_glu_activation (integrations/liger/args.py).
    else if (key == "liger_glu_activation" || key == "liger_swiglu") plan_.liger_glu_activation = plan_.liger_glu_activation || read_bool(origin_, value, key);
    else if (key == "attn_implementation") draft_.attention["attn_implementation"] = read_string(origin_, value, key);
    else if (key == "rl") rl(value, key);
    else if (key == "flex_attention" || key == "flash_attention" || key == "sdp_attention" || key == "eager_attention") {
      if (read_bool(origin_, value, key)) draft_.attention[key] = "1";
    }
    else if (key == "optimizer") optimizer(value, key);
    else if (key == "deepspeed") deepspeed(value, key);
    else if (key == "fsdp") draft_.fsdp_list = fsdp_list(value, key);
    else if (key == "fsdp_config") fsdp_config(value, key);
    else if (key == "fsdp_version") draft_.fsdp_version = read_int(origin_, value, key, 1, 2);
    else if (key == "expert_parallel_backend") {
      const std::string backend = read_string(origin_, value, key);
      if (backend != "auto" && backend != "deep_ep" && backend != "torch") fail_type(origin_, value, key, "auto, deep_ep or torch");
      draft_.expert_parallel_backend = backend;
    }
    else if (key == "context_parallel_size" || key == "tensor_parallel_size" || key == "expert_parallel_size" ||
             key == "dp_shard_size" || key == "dp_replicate_size" || key == "sequence_parallel_degree") {
      draft_.parallel_sizes.emplace_back(key, read_int(origin_, value, key, 1, 65536));
    }
  }

  // axolotl's rl: true means dpo (RLType, src/axolotl/utils/schemas/enums.py; the schema's
  // validator maps a bare `rl: true`). Types whose step hookstream does not model (kto: a KL batch;
  // grpo/gdpo: generation with num_generations completions per prompt) load and are listed as not
  // modelled.
  void rl(const YAML::Node& value, const std::string& key) {
    bool flag = false;
    if (value.IsScalar() && YAML::convert<bool>::decode(value, flag)) {
      plan_.rl = flag ? "dpo" : "";
    } else {
      plan_.rl = lowercase(read_string(origin_, value, key));
    }
    if (!plan_.rl_modelled()) {
      plan_.not_modelled_keys.push_back(
          {key, origin_.at(value, key),
           "rl: " + plan_.rl + " (TRL's per-step work for it - KL batch, generation, num_generations - is not modelled; "
           "costed as supervised fine-tuning)"});
    }
  }

  // Any name loads (axolotl and transformers check it); one whose states hookstream does not know
  // is sized as AdamW and listed as not modelled.
  void optimizer(const YAML::Node& value, const std::string& key) {
    plan_.optimizer = read_string(origin_, value, key);
    if (!optimizer_states(plan_.optimizer).known) {
      plan_.not_modelled_keys.push_back({key, origin_.at(value, key), "optimizer \"" + plan_.optimizer +
                                                                          "\": its states are sized as torch's AdamW (sim/cost/optimizer_states.cc knows "
                                                                          "torch AdamW, bitsandbytes 8/32-bit, torchao 8/4-bit, SGD)"});
    }
  }

  // axolotl: a path to a DeepSpeed JSON, or the JSON itself as a mapping (config.py: str | dict).
  void deepspeed(const YAML::Node& value, const std::string& key) {
    if (!value.IsScalar() && !value.IsMap()) fail_type(origin_, value, key, "a path to a DeepSpeed JSON or a mapping");
    draft_.deepspeed = value;
  }

  // The deprecated `fsdp:` list of accelerate options (["full_shard", "auto_wrap"]): FSDP1 when
  // non-empty (axolotl turns it into fsdp_config, FSDP version 1).
  bool fsdp_list(const YAML::Node& value, const std::string& key) {
    if (value.IsScalar()) return !value.Scalar().empty();
    return !read_string_list(origin_, value, key).empty();
  }

  // axolotl's FSDPConfig (src/axolotl/utils/schemas/fsdp.py). A `fsdp_` prefix is dropped first, as
  // axolotl's check_fsdp_config_kwargs_prefix does; `version` is fsdp_version (its AliasChoices).
  void fsdp_config(const YAML::Node& value, const std::string& key) {
    if (!value.IsMap()) fail_type(origin_, value, key, "a mapping of FSDP settings");
    const std::vector<std::string>& known = axolotl_schema().fsdp_config_keys;
    YAML::Node stripped(YAML::NodeType::Map);
    for (const auto& entry : value) {
      const std::string written = entry.first.IsScalar() ? entry.first.Scalar() : "";
      const std::string path = key + "." + written;
      const std::string name = fsdp_config_field(written);
      if (stripped[name]) throw InputError(origin_.at(entry.first, path), "duplicate key \"" + path + "\" (axolotl drops the fsdp_ prefix)");
      if (!contains(known, name)) {
        const std::string close = closest_name(name, known);
        if (!close.empty()) {
          throw InputError(origin_.at(entry.first, path), "unknown key \"" + written + "\" in fsdp_config; did you mean `" + close + "`?");
        }
        // FSDPConfig has pydantic's default extra="ignore": axolotl drops the key (accelerate's own
        // FSDP options such as sharding_strategy or limit_all_gathers never reach it from here).
        plan_.ignored_keys.push_back({path, origin_.at(entry.second, path), "not a field of axolotl " + axolotl_schema().version +
                                                                               "'s FSDPConfig; axolotl drops it"});
        continue;
      }
      if (name == "fsdp_version") {
        if (!entry.second.IsNull()) draft_.fsdp_config_version = read_int(origin_, entry.second, path, 1, 2);
        continue;
      }
      stripped[name] = entry.second;
      if (!entry.second.IsNull()) fsdp_setting(name, entry.first, entry.second, path);
      if (!entry.second.IsNull()) {
        plan_.not_modelled_keys.push_back({path, origin_.at(entry.second, path), "FSDP setting (src/axolotl/utils/schemas/fsdp.py:FSDPConfig)"});
      }
    }
    draft_.fsdp_config = stripped;
  }

  void fsdp_setting(const std::string& name, const YAML::Node& key_node, const YAML::Node& value, const std::string& key) {
    FsdpSettings& fsdp = draft_.fsdp_settings;
    fsdp.where[name] = origin_.at(key_node, key);
    auto flag = [&] { return read_bool(origin_, value, key); };
    if (name == "reshard_after_forward") fsdp.reshard_after_forward = flag();
    else if (name == "offload_params") fsdp.offload_params = flag();
    else if (name == "activation_checkpointing") fsdp.activation_checkpointing = flag();
    else if (name == "use_orig_params") fsdp.use_orig_params = flag();
    else if (name == "cpu_ram_efficient_loading") fsdp.cpu_ram_efficient_loading = flag();
    else if (name == "auto_wrap_policy") fsdp.auto_wrap_policy = read_string(origin_, value, key);
    else if (name == "state_dict_type") fsdp.state_dict_type = read_string(origin_, value, key);
    else if (name == "transformer_layer_cls_to_wrap") {
      // accelerate splits a string on commas (FullyShardedDataParallelPlugin.__post_init__).
      if (value.IsSequence()) {
        fsdp.transformer_layer_cls_to_wrap = read_string_list(origin_, value, key);
      } else {
        std::stringstream in(read_string(origin_, value, key));
        for (std::string part; std::getline(in, part, ',');) {
          part.erase(0, part.find_first_not_of(' '));
          part.erase(part.find_last_not_of(' ') + 1);
          if (!part.empty()) fsdp.transformer_layer_cls_to_wrap.push_back(part);
        }
      }
    }
  }

  // axolotl: true, false or "auto" (bf16 where the GPU supports it).
  std::optional<bool> bf16(const YAML::Node& value, const std::string& key) {
    if (value.IsScalar() && lowercase(value.Scalar()) == "auto") return std::nullopt;
    return read_bool(origin_, value, key);
  }

  Adapter adapter(const YAML::Node& value, const std::string& key) {
    const std::string name = lowercase(read_string(origin_, value, key));
    if (name == "lora") return Adapter::Lora;
    if (name == "qlora") return Adapter::Qlora;
    if (name.empty() || name == "none") return Adapter::None;
    fail_type(origin_, value, key, "\"lora\", \"qlora\" or empty");
  }

  // PEFT also takes a single string (matched as a regex against module names); a plain name is
  // the common case and the only one hookstream models.
  // PEFT's LoraConfig.target_modules: a string is one regular expression (re.fullmatch on each
  // module name, peft/tuners/tuners_utils.py check_target_module_exists), a list holds names.
  std::vector<std::string> target_modules(const YAML::Node& value, const std::string& key) {
    plan_.lora_target_modules_regex = value.IsScalar();
    if (value.IsScalar()) return {read_string(origin_, value, key)};
    return read_string_list(origin_, value, key);
  }

  // axolotl: true/false, or the legacy spellings "offload" / "offload_disk", which its validator
  // rewrites to gradient_checkpointing: true + activation_offloading. "unsloth" is the older
  // axolotl spelling that swapped in Unsloth_Offloaded_Gradient_Checkpointer: a custom
  // autograd.Function that recomputes the layer under no_grad and calls backward() inside its own
  // backward, i.e. reentrant checkpointing whatever use_reentrant says.
  void gradient_checkpointing(const YAML::Node& value, const std::string& key) {
    if (value.IsScalar()) {
      const std::string text = lowercase(value.Scalar());
      if (text == "unsloth") {
        draft_.gradient_checkpointing = true;
        plan_.activation_offloading = true;
        draft_.checkpointing_forces_reentrant = true;
        return;
      }
      if (text == "offload" || text == "offload_disk") {
        draft_.gradient_checkpointing = true;
        plan_.activation_offloading = true;
        return;
      }
    }
    bool enabled = false;
    if (!value.IsScalar() || !YAML::convert<bool>::decode(value, enabled)) {
      fail_type(origin_, value, key, "true, false, \"offload\", \"offload_disk\" or \"unsloth\"");
    }
    draft_.gradient_checkpointing = enabled;
  }

  void checkpointing_kwargs(const YAML::Node& value, const std::string& key) {
    if (!value.IsMap()) fail_type(origin_, value, key, "a mapping (use_reentrant: true|false)");
    for_each_entry(origin_, value, key, checkpointing_kwargs_keys(), key,
                   [&](const std::string& name, const YAML::Node& item) {
                     const std::string path = key + "." + name;
                     draft_.where[path] = origin_.at(item, path);
                     if (name == "use_reentrant") {
                       draft_.use_reentrant = read_bool(origin_, item, path);
                     } else {
                       plan_.not_modelled_keys.push_back({path, origin_.at(item, path), "torch.utils.checkpoint.checkpoint keyword argument"});
                     }
                   });
  }

  // axolotl: true (TRL's saved-tensor offloading), "legacy" (CPU_Offloaded_Gradient_Checkpointer,
  // a custom Function that runs a nested backward, i.e. reentrant) or "disk".
  void activation_offloading(const YAML::Node& value, const std::string& key) {
    if (value.IsScalar()) {
      const std::string text = lowercase(value.Scalar());
      if (text == "legacy") {
        plan_.activation_offloading = true;
        draft_.checkpointing_forces_reentrant = true;
        return;
      }
      if (text == "disk") {
        plan_.activation_offloading = true;
        return;
      }
    }
    bool enabled = false;
    if (!value.IsScalar() || !YAML::convert<bool>::decode(value, enabled)) {
      fail_type(origin_, value, key, "true, false, \"legacy\" or \"disk\"");
    }
    plan_.activation_offloading = enabled;
  }

  // A mapping (e.g. axolotl's own {"": LOCAL_RANK}) or "ddp" places the whole model on this
  // rank's GPU; accelerate's strategies spread one replica over several GPUs.
  DeviceMap device_map(const YAML::Node& value, const std::string& key) {
    if (value.IsMap()) return DeviceMap::PerRank;
    const std::string expected = "\"auto\", \"balanced\", \"sequential\", \"ddp\" or a mapping";
    if (!value.IsScalar()) fail_type(origin_, value, key, expected);
    const std::string name = lowercase(value.Scalar());
    if (name == "auto") return DeviceMap::Auto;
    if (name == "balanced") return DeviceMap::Balanced;
    if (name == "sequential") return DeviceMap::Sequential;
    if (name == "ddp") return DeviceMap::PerRank;
    fail_type(origin_, value, key, expected);
  }

  // Checked with std::regex (ECMAScript), close to but not identical to Python's `re`.
  std::vector<std::string> regex_list(const YAML::Node& value, const std::string& key) {
    std::vector<std::string> patterns = read_string_list(origin_, value, key);
    size_t index = 0;
    for (const YAML::Node& item : value) {
      try {
        std::regex compiled(patterns[index]);
      } catch (const std::regex_error& error) {
        fail_type(origin_, item, key, "a list of regular expressions (" + std::string(error.what()) + ")");
      }
      ++index;
    }
    return patterns;
  }

  void hookstream_section(const YAML::Node& section) {
    const std::string prefix = "hookstream";
    if (!section.IsMap()) fail_type(origin_, section, prefix, "a mapping");
    for_each_entry(origin_, section, prefix, hookstream_keys(), prefix,
                   [&](const std::string& key, const YAML::Node& value) {
                     const std::string path = prefix + "." + key;
                     draft_.where[path] = origin_.at(value, path);
                     hookstream_key(key, value, path);
                   });
  }

  void hookstream_key(const std::string& key, const YAML::Node& value, const std::string& path) {
    if (key == "world_size") plan_.world_size = read_int(origin_, value, path, 1, 65536);
    else if (key == "iterations") plan_.iterations = read_int(origin_, value, path, 1, 1000);
    else if (key == "static_graph") plan_.static_graph = read_bool(origin_, value, path);
    else if (key == "gradient_as_bucket_view") plan_.gradient_as_bucket_view = read_bool(origin_, value, path);
    else if (key == "checkpoint_layers") plan_.checkpoint_layers = checkpoint_layers(value, path);
    else if (key == "checkpoint_twice_layers") plan_.checkpoint_twice_layers = read_layer_list(origin_, value, path);
    else if (key == "tiled_mlp_backward") plan_.tiled_mlp_backward = tiled_backward(value, path);
    else if (key == "tiled_mlp_weights_as_inputs") plan_.tiled_mlp_weights_as_inputs = read_bool(origin_, value, path);
    else if (key == "tiled_mlp_ds_grad_is_ready") plan_.tiled_mlp_ds_grad_is_ready = read_bool(origin_, value, path);
    else if (key == "z3_leaf_mlp") plan_.z3_leaf_mlp = read_bool(origin_, value, path);
    else if (key == "chunked_loss") {
      const std::string text = read_string(origin_, value, path);
      if (text != "logits" && text != "recompute_lm_head") {
        throw InputError(origin_.at(value, path) + ": key \"" + path + "\"",
                         "expected logits (axolotl's chunked_cross_entropy) or recompute_lm_head, got \"" + text + "\"");
      }
      plan_.chunked_loss_recomputes_lm_head = text == "recompute_lm_head";
    }
    else if (key == "torch_distributed_debug") plan_.torch_distributed_debug = distributed_debug(value, path);
    else if (key == "enable_input_require_grads") plan_.enable_input_require_grads = read_bool(origin_, value, path);
    else if (key == "train_vision_tower") plan_.train_vision_tower = read_bool(origin_, value, path);
    else if (key == "vision_inputs") plan_.vision_inputs = read_bool(origin_, value, path);
    else if (key == "vision_tokens") plan_.vision_tokens = read_int(origin_, value, path, 0, 1 << 24);
    else if (key == "unused_modules") plan_.unused_modules = read_string_list(origin_, value, path);
    else if (key == "rank_overrides") plan_.rank_overrides = overrides(value, path);
    else if (key == "iteration_overrides") plan_.iteration_overrides = overrides(value, path);
    else if (key == "micro_step_overrides") plan_.micro_step_overrides = overrides(value, path);
    else if (key == "tiled_mlp_layers") plan_.tiled_mlp_layers = layer_ranges(value, path);
    else if (key == "torch_version") plan_.torch_version = parse_torch_version(read_string(origin_, value, path), origin_.at(value, path) + ": key \"" + path + "\"");
    else if (key == "transformers_version") plan_.transformers_version = parse_transformers_version(read_string(origin_, value, path), origin_.at(value, path) + ": key \"" + path + "\"");
    else if (key == "optimize_ddp") {
      // torch._dynamo.config.optimize_ddp: a bool or one of get_optimize_ddp_mode's names.
      const std::string text = value.IsScalar() ? value.Scalar() : "";
      bool flag = false;
      if (value.IsScalar() && YAML::convert<bool>::decode(value, flag)) {
        plan_.torch_compile.optimize_ddp = flag ? OptimizeDdp::DdpOptimizer : OptimizeDdp::NoOptimization;
      } else if (!parse_optimize_ddp(text, plan_.torch_compile.optimize_ddp)) {
        fail_type(origin_, value, path, "true, false, ddp_optimizer, python_reducer, python_reducer_without_compiled_forward or no_optimization");
      }
    } else if (key == "compiled_autograd") plan_.torch_compile.compiled_autograd = read_bool(origin_, value, path);
    else if (key == "offload_protocol") plan_.offload_protocol = read_string(origin_, value, path);
    else if (key == "pinned_slots") plan_.pinned_slots_exact = pinned_slots(value, path);
    else if (key == "offload_layers") plan_.offload_layers = layer_ranges(value, path);
    else if (key == "gpu") plan_.gpu = read_string(origin_, value, path);
    else if (key == "calibration") plan_.calibration = read_string(origin_, value, path);
    else if (key == "weights") plan_.weights = read_string(origin_, value, path);
    else if (key == "data") plan_.data = read_string(origin_, value, path);
  }

  // "all" means every decoder layer (the same as leaving the key out with checkpointing on).
  std::optional<std::vector<int>> checkpoint_layers(const YAML::Node& value, const std::string& path) {
    if (value.IsScalar() && lowercase(value.Scalar()) == "all") return std::nullopt;
    if (!value.IsSequence() || value.size() == 0) fail_type(origin_, value, path, "\"all\" or a non-empty list of layer indices");
    return read_layer_list(origin_, value, path);
  }

  // "all" (nullopt), or a non-empty list whose items are layer indices or "FIRST-LAST" ranges
  // (inclusive): [0, 2, "4-7"]. Sorted and de-duplicated.
  std::optional<std::vector<int>> layer_ranges(const YAML::Node& value, const std::string& path) {
    const std::string expected = "\"all\" or a non-empty list of layer indices and \"FIRST-LAST\" ranges";
    if (value.IsScalar() && lowercase(value.Scalar()) == "all") return std::nullopt;
    if (!value.IsSequence() || value.size() == 0) fail_type(origin_, value, path, expected);
    std::vector<int> layers;
    for (const auto& item : value) {
      if (!item.IsScalar()) fail_type(origin_, item, path, expected);
      static const std::regex range(R"(^\s*(\d{1,6})\s*-\s*(\d{1,6})\s*$)");
      std::smatch match;
      const std::string text = item.Scalar();
      if (std::regex_match(text, match, range)) {
        const int first = std::stoi(match[1].str());
        const int last = std::stoi(match[2].str());
        if (first > last) fail_type(origin_, item, path, "a range FIRST-LAST with FIRST <= LAST");
        for (int layer = first; layer <= last; ++layer) layers.push_back(layer);
      } else {
        layers.push_back(read_int(origin_, item, path, 0, std::numeric_limits<int>::max()));
      }
    }
    std::sort(layers.begin(), layers.end());
    layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
    return layers;
  }

  TiledBackward tiled_backward(const YAML::Node& value, const std::string& path) {
    const std::string expected = "per_chunk_backward, grad_then_backward or function_returns_grads";
    if (!value.IsScalar()) fail_type(origin_, value, path, expected);
    const std::string name = lowercase(value.Scalar());
    if (name == "per_chunk_backward") return TiledBackward::BackwardPerChunk;
    if (name == "grad_then_backward") return TiledBackward::GradThenBackward;
    if (name == "function_returns_grads") return TiledBackward::FunctionReturnsGrads;
    fail_type(origin_, value, path, expected);
  }

  bool pinned_slots(const YAML::Node& value, const std::string& path) {
    const std::string expected = "caching (PyTorch's pinned allocator) or exact (one allocation per slot)";
    if (!value.IsScalar()) fail_type(origin_, value, path, expected);
    const std::string name = lowercase(value.Scalar());
    if (name == "caching") return false;
    if (name == "exact") return true;
    fail_type(origin_, value, path, expected);
  }

  // c10d debug.cpp loadDebugLevelFromEnvironment: the value upper-cased, one of OFF, INFO, DETAIL.
  std::string distributed_debug(const YAML::Node& value, const std::string& path) {
    const std::string expected = "OFF, INFO or DETAIL (the environment variable TORCH_DISTRIBUTED_DEBUG)";
    if (!value.IsScalar()) fail_type(origin_, value, path, expected);
    std::string name = value.Scalar();
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    if (name == "OFF" || name == "INFO" || name == "DETAIL") return name;
    fail_type(origin_, value, path, expected);
  }

  std::map<int, PlanOverride> overrides(const YAML::Node& value, const std::string& path) {
    if (!value.IsMap()) fail_type(origin_, value, path, "a mapping from index to overrides");
    std::map<int, PlanOverride> result;
    for (const auto& entry : value) {
      const YAML::Node& key_node = entry.first;
      const std::string key_text = key_node.IsScalar() ? key_node.Scalar() : "";
      const std::string entry_path = path + "." + key_text;
      const int index = read_int(origin_, key_node, entry_path, 0, std::numeric_limits<int>::max());
      if (result.count(index)) throw InputError(origin_.at(key_node, entry_path), "duplicate key \"" + entry_path + "\"");
      draft_.where[path + "." + std::to_string(index)] = origin_.at(key_node, entry_path);
      result[index] = override_entry(entry.second, entry_path, path + "." + std::to_string(index));
    }
    return result;
  }

  PlanOverride override_entry(const YAML::Node& value, const std::string& path, const std::string& canonical) {
    PlanOverride result;
    if (value.IsNull()) return result;
    if (!value.IsMap()) fail_type(origin_, value, path, "a mapping of " + join(override_keys(), ", "));
    for_each_entry(origin_, value, path, override_keys(), path, [&](const std::string& key, const YAML::Node& item) {
      const std::string item_path = path + "." + key;
      draft_.where[canonical + "." + key] = origin_.at(item, item_path);
      if (key == "sequence_len") result.sequence_len = read_positive(origin_, item, item_path);
      else if (key == "tiled_mlp_num_shards") result.tiled_mlp_num_shards = read_positive(origin_, item, item_path);
      else if (key == "checkpoint_twice_layers") result.checkpoint_twice_layers = read_layer_list(origin_, item, item_path);
      else if (key == "unused_modules") result.unused_modules = read_string_list(origin_, item, item_path);
    });
    return result;
  }

  const Origin& origin_;
  Draft& draft_;
  Plan& plan_;
};

// ----------------------------------------------------------------------------------------------
// --set
// ----------------------------------------------------------------------------------------------


bool is_index(const std::string& text) {
  return !text.empty() && text.size() < 10 && std::all_of(text.begin(), text.end(), ::isdigit);
}

// Checks a dotted --set key against the same key tables the file is checked against.
void check_set_key(const std::vector<std::string>& parts, const std::string& key) {
  auto unknown = [&](size_t depth, const std::string& level, const std::vector<std::string>& known) {
    throw InputError("--set", unknown_key_message(parts[depth], level, known) + " (in \"" + key + "\")");
  };
  auto leaf_at = [&](size_t depth) {
    if (parts.size() > depth + 1) {
      throw InputError("--set", "key \"" + join({parts.begin(), parts.begin() + depth + 1}, ".") + "\" has no sub-keys (in \"" + key + "\")");
    }
  };
  for (const std::string& part : parts) {
    if (part.empty()) throw InputError("--set", "empty key component in \"" + key + "\"");
  }
  const std::string& top = parts[0];
  if (!contains(top_level_keys(), top)) unknown(0, "", top_level_keys());
  // Keys the loader does not read take any value, nested or not, as in axolotl; fsdp_config's
  // and deepspeed's contents are checked when the plan is read.
  if (!is_read_key(top) && top != "hookstream") return;
  if (top == "fsdp_config" || top == "deepspeed") return;
  if (top == "gradient_checkpointing_kwargs") {
    if (parts.size() > 1 && !contains(checkpointing_kwargs_keys(), parts[1])) unknown(1, top, checkpointing_kwargs_keys());
    return leaf_at(1);
  }
  if (top != "hookstream") return leaf_at(0);
  if (parts.size() == 1) return;
  if (!contains(hookstream_keys(), parts[1])) unknown(1, top, hookstream_keys());
  if (parts[1] != "rank_overrides" && parts[1] != "iteration_overrides" && parts[1] != "micro_step_overrides") {
    return leaf_at(1);
  }
  if (parts.size() == 2) return;
  if (!is_index(parts[2])) {
    throw InputError("--set", "key \"" + join({parts.begin(), parts.begin() + 3}, ".") + "\": expected a non-negative integer index");
  }
  if (parts.size() > 3 && !contains(override_keys(), parts[3])) unknown(3, "hookstream." + parts[1] + "." + parts[2], override_keys());
  leaf_at(3);
}

// Applies one "key=value" to the tree; returns the dotted key.
std::string apply_set(YAML::Node& root, const std::string& assignment) {
  const auto equals = assignment.find('=');
  if (equals == std::string::npos || equals == 0) {
    throw InputError("--set", "expected KEY=VALUE, got \"" + assignment + "\"");
  }
  const std::string requested = assignment.substr(0, equals);
  check_set_key(split(requested, '.'), requested);
  // Another spelling of the same setting already in the plan is the one that gets the value.
  const std::vector<std::string> parts = spelling_in(root, split(requested, '.'));
  const std::string key = join(parts, ".");
  YAML::Node value;
  try {
    value = YAML::Load(assignment.substr(equals + 1));
  } catch (const YAML::Exception& error) {
    throw InputError("--set", "key \"" + key + "\": malformed YAML value: " + yaml_parse_message(error));
  }
  YAML::Node current = root;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node child = current[parts[i]];
    if (!child.IsDefined() || child.IsNull()) {
      current[parts[i]] = YAML::Node(YAML::NodeType::Map);
      child.reset(current[parts[i]]);
    } else if (!child.IsMap()) {
      throw InputError("--set", "key \"" + join({parts.begin(), parts.begin() + i + 1}, ".") +
                                    "\" is not a mapping in the plan, cannot set \"" + key + "\"");
    }
    current.reset(child);
  }
  current[parts.back()] = value;
  return key;
}

// ----------------------------------------------------------------------------------------------
// Model resolution
// ----------------------------------------------------------------------------------------------

std::string plan_directory(const std::string& source) {
  const fs::path parent = fs::path(source).parent_path();
  return parent.empty() ? "." : parent.string();
}


void resolve_model(Draft& draft, const LoadOptions& options) {
  Plan& plan = draft.plan;
  std::string key = "base_model";
  std::string value = plan.base_model;
  std::string where = draft.where.count(key) ? draft.where[key] : plan.source;
  if (options.model_path) {
    key = "--model";
    value = *options.model_path;
    where = "--model";
  } else if (!draft.base_model_config.empty()) {
    // axolotl loads the config from base_model_config when it is given (weights from base_model).
    key = "base_model_config";
    value = draft.base_model_config;
    where = draft.where[key];
  }
  if (value.empty()) {
    throw InputError(plan.source, "key \"base_model\": missing; expected a preset name, a Hugging Face id "
                                  "of a preset, or a path to a config.json (presets: " + join(list_presets(), ", ") + ")");
  }
  ModelLookup lookup;
  lookup.plan_dir = options.model_path ? "." : plan_directory(plan.source);
  lookup.revision = draft.revision_of_model;
  lookup.environment = HubEnvironment::from_process();
  const ModelLocation location = locate_model(value, lookup, where, key);
  try {
    plan.model = load_model_config(location.config_path);
  } catch (const InputError&) {
    // A type hookstream does not model is reported as such, not as the first key it lacks.
    if (auto type = peek_model_type(location.config_path)) require_modelled_model_type(*type, location.config_path);
    throw;
  }
  if (location.kind == ModelSourceKind::Preset) {
    plan.model.source = "preset:" + fs::path(location.config_path).stem().string();
    plan.base_model = value;
  } else {
    plan.base_model = location.config_path;
  }
  // A type hookstream does not model is refused, never built as a dense Llama (sim/inputs/model_source/model_types.h).
  require_modelled_model_type(plan.model);
}

// ----------------------------------------------------------------------------------------------
// World size and engine: from the plan, the command line and an accelerate config
// ----------------------------------------------------------------------------------------------

int check_world_size(int value, const std::string& flag) {
  if (value < 1 || value > 65536) throw InputError(flag, "expected an integer in [1, 65536], got " + std::to_string(value));
  return value;
}

// The world size, from the most explicit place that gives one: --world-size or torchrun's
// --nnodes x --nproc-per-node (which must agree), then the accelerate config's num_processes
// (accelerate's total over all machines), then hookstream.world_size. Places that disagree are an
// error naming both.
void resolve_world_size(Draft& draft, const LoadOptions& options, const std::optional<AccelerateConfig>& accelerate) {
  Plan& plan = draft.plan;
  if (draft.where.count("hookstream.world_size")) plan.world_size_from = draft.where["hookstream.world_size"];
  std::optional<int> flag;
  std::string flag_name;
  if (options.nnodes || options.nproc_per_node) {
    if (!options.nnodes || !options.nproc_per_node) {
      throw InputError(options.nnodes ? "--nnodes" : "--nproc-per-node",
                       "expected both --nnodes and --nproc-per-node (torchrun's world size is their product)");
    }
    const long long product = static_cast<long long>(check_world_size(*options.nnodes, "--nnodes")) *
                              check_world_size(*options.nproc_per_node, "--nproc-per-node");
    flag_name = "--nnodes " + std::to_string(*options.nnodes) + " x --nproc-per-node " + std::to_string(*options.nproc_per_node);
    flag = check_world_size(static_cast<int>(std::min<long long>(product, 1 << 30)), flag_name);
  }
  if (options.world_size) {
    check_world_size(*options.world_size, "--world-size");
    if (flag && *flag != *options.world_size) {
      throw InputError("--world-size", std::to_string(*options.world_size) + " contradicts " + flag_name + " = " + std::to_string(*flag));
    }
    flag = options.world_size;
    flag_name = "--world-size";
  }
  if (accelerate && accelerate->num_processes && flag && *flag != *accelerate->num_processes) {
    throw InputError(accelerate->file, "key \"num_processes\": " + std::to_string(*accelerate->num_processes) + " contradicts " +
                                           flag_name + " = " + std::to_string(*flag));
  }
  if (flag) {
    plan.world_size = *flag;
    plan.world_size_from = flag_name;
  } else if (accelerate && accelerate->num_processes) {
    plan.world_size = check_world_size(*accelerate->num_processes, accelerate->file + ": num_processes");
    plan.world_size_from = accelerate->file + ": num_processes";
  }
  if (!plan.world_size_from.empty()) draft.where["hookstream.world_size"] = plan.world_size_from;
}

// axolotl opens a `deepspeed:` path as given, i.e. relative to the working directory
// (src/axolotl/utils/config/__init__.py: os.path.exists(cfg.deepspeed), then json.load); when it
// does not exist transformers' HfDeepSpeedConfig raises. Same here.
// accelerate's deepspeed_config.deepspeed_config_file is opened the same way: `accelerate launch`
// passes it as ACCELERATE_DEEPSPEED_CONFIG_FILE and HfDeepSpeedConfig (accelerate/utils/deepspeed.py)
// tests os.path.exists in the launched process, whose working directory is the launcher's.
// `accelerate_key` names that key instead of axolotl's `deepspeed`.
DeepSpeedConfig plan_deepspeed(const YAML::Node& value, const std::string& where, const std::vector<std::string>& file_sets = {},
                               const std::string& accelerate_key = "") {
  if (value.IsMap()) {
    DeepSpeedConfig config = parse_deepspeed_config(yaml_to_json(value), where + ": key \"deepspeed\"");
    config.file = "inline";
    return config;
  }
  const std::string path = value.Scalar();
  std::error_code error;
  if (!fs::is_regular_file(path, error)) {
    if (!accelerate_key.empty()) {
      throw InputError(where, "key \"" + accelerate_key + "\": DeepSpeed config \"" + path +
                                  "\" not found; accelerate opens it relative to the working directory (" + fs::current_path(error).string() + ")");
    }
    throw InputError(where, "key \"deepspeed\": DeepSpeed config \"" + path + "\" not found; axolotl opens it relative to the working directory (" +
                                fs::current_path(error).string() + "), where `axolotl fetch deepspeed_configs` puts axolotl's own");
  }
  DeepSpeedConfig config = read_deepspeed_config(path, where);
  if (file_sets.empty()) return config;
  // The file as read (its own errors first), then the --set edits on its tree, in the spelling
  // the file uses (apply_set's rule), parsed as the edited file would be.
  YAML::Node edited = deepspeed_file_tree(path);
  std::vector<std::string> keys;
  for (const std::string& assignment : file_sets) keys.push_back(apply_set(edited, assignment));
  config = parse_deepspeed_config(yaml_to_json(edited["deepspeed"]), path + " with --set " + join(keys, ", "));
  config.file = path;
  return config;
}

// What accelerate 1.15's DeepSpeedPlugin (utils/dataclasses.py __post_init__) makes of a DeepSpeed
// JSON before DeepSpeed sees it; both axolotl's `deepspeed:` (transformers 5.17's
// TrainingArguments.__post_init__ builds DeepSpeedPlugin(hf_ds_config=...)) and accelerate's
// deepspeed_config_file go through it. `where` names the JSON (a file, or the plan's line for an
// inline mapping); `via_axolotl`: the plan's own `deepspeed:`, for which axolotl's
// prepare_optim_env / setup_deepspeed_env (src/axolotl/utils/trainer.py) export the JSON's
// zero_optimization.stage as ACCELERATE_DEEPSPEED_ZERO_STAGE when it is truthy. Each rule was
// checked against the real plugin (tests/oracles/deepspeed_resolve_oracle_test.cc).
void resolve_through_plugin(DeepSpeedConfig& config, const std::string& where, bool via_axolotl) {
  if (!config.zero_optimization_present) {
    throw InputError(where, std::string("no \"zero_optimization\": accelerate's DeepSpeedPlugin refuses a DeepSpeed config without it ") +
                                (via_axolotl ? "(axolotl's `deepspeed:` reaches it through transformers' TrainingArguments) " : "") +
                                "(\"Please specify the ZeRO optimization config in the DeepSpeed config.\")");
  }
  if (!config.stage_auto) return;
  if (via_axolotl) {
    throw InputError(where, "key \"zero_optimization.stage\": \"auto\" does not resolve under axolotl: its setup_deepspeed_env exports it as "
                            "ACCELERATE_DEEPSPEED_ZERO_STAGE=auto and accelerate's DeepSpeedPlugin fails on int('auto') (\"ValueError: invalid "
                            "literal for int() with base 10: 'auto'\"); set 0, 1, 2 or 3");
  }
  // fill_match: "auto" takes the plugin's zero_stage, int(ACCELERATE_DEEPSPEED_ZERO_STAGE or 2);
  // accelerate refuses the accelerate config's zero_stage beside a JSON, so nothing sets it.
  config.zero_stage = 2;
}

void deepspeed_engine(Draft& draft, const DeepSpeedConfig& config, const std::string& decided_by) {
  Plan& plan = draft.plan;
  Engine& engine = plan.engine;
  engine.kind = EngineKind::DeepSpeed;
  engine.deepspeed = config;
  engine.decided_by.push_back(decided_by);
  engine.settings.push_back("zero_optimization.stage: " + std::to_string(config.zero_stage) +
                            (config.stage_auto ? " (\"auto\": accelerate's DeepSpeedPlugin default)" : "") + " (" + config.file + ")");
  if (!config.offload_optimizer.empty()) engine.settings.push_back("offload_optimizer: " + config.offload_optimizer);
  if (!config.offload_param.empty()) engine.settings.push_back("offload_param: " + config.offload_param);
  // transformers' HfTrainerDeepSpeedConfig.trainer_config_process fills "auto" from the
  // TrainingArguments and refuses a number that differs from them ("Please correct the following
  // DeepSpeed config values that mismatch TrainingArguments values").
  auto must_match = [&](const std::optional<long long>& in_json, long long from_plan, const std::string& json_key, const std::string& plan_key) {
    if (in_json && *in_json != from_plan) {
      throw InputError(config.file, "key \"" + json_key + "\": " + std::to_string(*in_json) + " contradicts " + plan_key + " " +
                                        std::to_string(from_plan) + " (" + (draft.where.count(plan_key) ? draft.where[plan_key] : plan.source) +
                                        "); transformers refuses a mismatch: set it to \"auto\" or to the same value");
    }
  };
  must_match(config.gradient_accumulation_steps, plan.gradient_accumulation_steps, "gradient_accumulation_steps", "gradient_accumulation_steps");
  must_match(config.train_micro_batch_size_per_gpu, plan.micro_batch_size, "train_micro_batch_size_per_gpu", "micro_batch_size");
  if (config.train_batch_size && !plan.world_size_from.empty()) {
    must_match(config.train_batch_size, static_cast<long long>(plan.micro_batch_size) * plan.gradient_accumulation_steps * plan.world_size,
               "train_batch_size", "micro_batch_size x gradient_accumulation_steps x world size");
  }
}

void fsdp_engine(Draft& draft, int version, const std::string& decided_by) {
  Engine& engine = draft.plan.engine;
  engine.kind = version == 2 ? EngineKind::Fsdp2 : EngineKind::Fsdp1;
  engine.decided_by.push_back(decided_by);
  if (draft.fsdp_config) {
    engine.fsdp = draft.fsdp_settings;
    for (const auto& entry : *draft.fsdp_config) {
      if (entry.second.IsScalar()) engine.settings.push_back("fsdp_config." + entry.first.Scalar() + ": " + entry.second.Scalar());
    }
  }
  if (engine.kind == EngineKind::Fsdp2) {
    // sim/sync/fsdp2 models the wrapping and resharding keys (docs/engines/fsdp2.md).
    auto& keys = draft.plan.not_modelled_keys;
    keys.erase(std::remove_if(keys.begin(), keys.end(),
                              [](const auto& k) {
                                for (const char* name : {"transformer_layer_cls_to_wrap", "reshard_after_forward",
                                                         "auto_wrap_policy", "fsdp_version", "version"}) {
                                  const std::string key = k.key;
                                  const std::string leaf = key.substr(key.rfind('.') + 1);
                                  if (leaf == name || leaf == std::string("fsdp_") + name) return true;
                                }
                                return false;
                              }),
               keys.end());
  }
}

// A parallelism size as written (0: the key is not set).
int parallel_size(const Draft& draft, const std::string& key) {
  for (const auto& [name, size] : draft.parallel_sizes) {
    if (name == key) return size;
  }
  return 0;
}

// Without --world-size (or torchrun's flags, an accelerate config, hookstream.world_size), a plan
// that sets axolotl's N-D parallelism sizes names its world size: their product (axolotl's own
// examples say so: "dp_shard_size: 16  # requires 2x8xH100 nodes"; the expert-parallel plugin
// requires expert_parallel_size x dp_shard_size x tensor_parallel_size x context_parallel_size =
// world size, integrations/expert_parallel/plugin.py _resolve_ep_group).
void world_size_from_parallel_sizes(Draft& draft) {
  Plan& plan = draft.plan;
  if (!plan.world_size_from.empty()) return;
  long long product = 1;
  std::string from;
  for (const auto& [key, size] : draft.parallel_sizes) {
    if (key == "sequence_parallel_degree" || size <= 1) continue;
    product *= size;
    const auto at = draft.where.find(key);
    from += (from.empty() ? "" : " x ") + key + " " + std::to_string(size) + (at != draft.where.end() ? " (" + at->second + ")" : "");
  }
  if (from.empty()) return;
  plan.world_size = check_world_size(static_cast<int>(std::min<long long>(product, 1 << 30)), from);
  plan.world_size_from = from;
  draft.where["hookstream.world_size"] = from;
}

// dp_shard_size / dp_replicate_size: axolotl's setup_parallelism_envs (utils/trainer.py) exports
// the sizes above 1 as PARALLELISM_CONFIG_DP_SHARD_SIZE / _DP_REPLICATE_SIZE with
// ACCELERATE_USE_PARALLELISM_CONFIG=true, and accelerate 1.15's Accelerator builds its
// ParallelismConfig from them (accelerator.py; parallelism_config.py _validate_accelerator checks it
// against the world size); for FSDP2 axolotl's ModelLoader builds the same mesh
// (utils/distributed.py build_parallelism_config) and accelerate's fsdp2_prepare_model calls
// fully_shard(mesh=mesh[fsdp_dim_names]): ("dp_replicate", "dp_shard_cp") when dp_replicate > 1
// (HSDP: reduce-scatter in the shard group, all-reduce of the shard across replicas, torch
// _fsdp_collectives.py foreach_reduce), else the 1-D dp_shard mesh (plain FSDP2).
// Modelled: FSDP2 with dp_replicate x dp_shard = world size; DDP and DeepSpeed with
// dp_replicate_size = world size alone (accelerate's own default mesh: plain data parallelism).
// Tensor, context and expert parallelism stay listed in other_parallelism (not modelled).
void data_parallel_mesh(Draft& draft) {
  Plan& plan = draft.plan;
  Engine& engine = plan.engine;
  auto where = [&](const std::string& key) { return draft.where.count(key) ? draft.where[key] : plan.source; };
  const int shard = parallel_size(draft, "dp_shard_size");
  const int replicate = parallel_size(draft, "dp_replicate_size");
  const int tp = parallel_size(draft, "tensor_parallel_size");
  const int cp = parallel_size(draft, "context_parallel_size");
  const int ep = parallel_size(draft, "expert_parallel_size");
  auto list_all = [&] {
    for (const auto& [key, size] : draft.parallel_sizes) {
      if (size > 1) engine.other_parallelism.push_back(key + ": " + std::to_string(size));
    }
  };
  const bool known_world = !plan.world_size_from.empty();
  if (ep > 1) {
    // ExpertParallelPlugin._resolve_ep_group's check, its own message.
    const long long product = static_cast<long long>(ep) * std::max(shard, 1) * std::max(tp, 1) * std::max(cp, 1);
    if (known_world && product != plan.world_size) {
      throw InputError(where("expert_parallel_size"),
                       fmt::format("key \"expert_parallel_size\": expert_parallel_size ({}) * dp_shard_size ({}) * tensor_parallel_size ({}) * "
                                   "context_parallel_size ({}) = {}, but world_size = {} ({}). The product must equal the world size for "
                                   "orthogonal mesh axes to be valid (axolotl's expert_parallel plugin)",
                                   ep, std::max(shard, 1), std::max(tp, 1), std::max(cp, 1), product, plan.world_size, plan.world_size_from));
    }
    // Pure EP (ExpertParallelPlugin._resolve_ep_group: expert_parallel_size = world size, the ep
    // group is WORLD) under DDP: axolotl's patched ParallelismConfig accepts it without FSDP
    // (monkeypatch/accelerate/parallelism_config.py _validate_accelerator: "Pure EP (no
    // FSDP/TP/CP) is valid") and every rank reads its own batch (the ep axis is a data axis there).
    // Modelled: docs/engines/expert-parallel.md. EP beside dp_shard (FSDP2's fully_shard_experts),
    // tensor or context parallelism stay not modelled.
    if (engine.kind == EngineKind::Ddp && shard <= 1 && replicate <= 1 && tp <= 1 && cp <= 1 && known_world &&
        ep == plan.world_size) {
      engine.expert_parallel = ep;
      engine.settings.push_back(fmt::format("expert parallelism: expert_parallel_size {} ({}) = world size, pure EP under DDP "
                                            "(axolotl's ExpertParallelPlugin, torch all-to-all dispatch)",
                                            ep, where("expert_parallel_size")));
      return;
    }
    list_all();
    return;
  }
  if (shard <= 1 && replicate <= 1 && tp <= 1 && cp <= 1) {
    list_all();  // sequence_parallel_degree, or nothing
    return;
  }
  // accelerate's ParallelismConfig from the exported sizes (unset ones are 1), checked against
  // the number of processes: total_size = dp_replicate x dp_shard x tp x cp.
  const long long total = static_cast<long long>(std::max(replicate, 1)) * std::max(shard, 1) * std::max(tp, 1) * std::max(cp, 1);
  const std::string key = shard > 1 ? "dp_shard_size" : replicate > 1 ? "dp_replicate_size" : tp > 1 ? "tensor_parallel_size" : "context_parallel_size";
  if (known_world && total != plan.world_size) {
    throw InputError(where(key), fmt::format("key \"{}\": ParallelismConfig total_size ({}) does not match num_processes ({}, {}). Please adjust "
                                             "dp_replicate_size/ dp_shard_size/tp_size/cp_size/sp_size (accelerate's check)",
                                             key, total, plan.world_size, plan.world_size_from));
  }
  if (engine.kind == EngineKind::Fsdp1) {
    throw InputError(where(key), fmt::format("key \"{}\": ParallelismConfig is only compatible DistributedType.FSDP (version 2) or "
                                             "DistributedType.Multi{{Device}} or DistributedType.DEEPSPEED, but got DistributedType.FSDP "
                                             "(FSDP version 1, {}; accelerate's check: set fsdp_version: 2)",
                                             key, engine.decided_by.empty() ? std::string("fsdp_config") : engine.decided_by.front()));
  }
  if (engine.kind == EngineKind::Fsdp2 && shard <= 1 && cp <= 1) {
    throw InputError(where(key), "key \"" + key + "\": FSDP is enabled but the parallelism config has no dimension for FSDP to shard across "
                                 "(both `dp_shard_size` and `cp_size` are 1), as accelerate says: set dp_shard_size");
  }
  if (tp > 1 || cp > 1) {
    list_all();
    return;
  }
  if (engine.kind == EngineKind::Fsdp2) {
    engine.dp_shard = shard;
    engine.dp_replicate = std::max(replicate, 1);
    engine.settings.push_back(replicate > 1 ? fmt::format("HSDP mesh (dp_replicate {}, dp_shard {}): dp_replicate_size ({}), dp_shard_size ({})",
                                                          replicate, shard, where("dp_replicate_size"), where("dp_shard_size"))
                                            : fmt::format("FSDP2 mesh dp_shard {} (dp_shard_size, {})", shard, where("dp_shard_size")));
    return;
  }
  if (shard <= 1) {
    // DDP / DeepSpeed with dp_replicate_size = world size: accelerate's default mesh, plain data parallelism.
    engine.settings.push_back(fmt::format("dp_replicate_size: {} ({}): the whole world, plain data parallelism", replicate, where("dp_replicate_size")));
    return;
  }
  list_all();  // DDP or DeepSpeed over a dp_shard mesh: not modelled
}

// The engine: DeepSpeed when `deepspeed:` is set, FSDP when fsdp_config (or the old `fsdp:` list)
// is, with axolotl's version rule (validation.py _resolve_fsdp_version: top-level fsdp_version,
// else fsdp_config.fsdp_version, else 1); an accelerate config's distributed_type says the same
// or contradicts it (an error). Tensor, context, expert and sharded-data parallel sizes above 1
// are parallelism the DDP model does not cover.
void engine_rules(Draft& draft, const std::optional<AccelerateConfig>& accelerate) {
  Plan& plan = draft.plan;
  auto where = [&](const std::string& key) { return draft.where.count(key) ? draft.where[key] : plan.source; };
  const bool fsdp = draft.fsdp_list || draft.fsdp_config.has_value();
  world_size_from_parallel_sizes(draft);
  if (draft.deepspeed && fsdp) {
    // axolotl's check_fsdp_deepspeed: "deepspeed and fsdp cannot be used together."
    throw InputError(where("deepspeed"), std::string("key \"deepspeed\": deepspeed and ") + (draft.fsdp_config ? "fsdp_config" : "fsdp") + " (" +
                                             where(draft.fsdp_config ? "fsdp_config" : "fsdp") + ") cannot be used together, as axolotl says");
  }
  const int fsdp_version = draft.fsdp_version.value_or(draft.fsdp_config_version.value_or(1));
  if (draft.deepspeed) {
    const std::string text = draft.deepspeed->IsScalar() ? draft.deepspeed->Scalar() : "(inline mapping)";
    DeepSpeedConfig config = plan_deepspeed(*draft.deepspeed, where("deepspeed"), draft.deepspeed_file_sets);
    resolve_through_plugin(config, config.file == "inline" ? where("deepspeed") + ": key \"deepspeed\"" : config.file, true);
    deepspeed_engine(draft, config, "deepspeed: " + text + " (" + where("deepspeed") + ")");
  } else if (fsdp) {
    std::string decided = draft.fsdp_version ? "fsdp_version: " + std::to_string(fsdp_version) + " (" + where("fsdp_version") + ")"
                          : draft.fsdp_config_version ? "fsdp_config.fsdp_version: " + std::to_string(fsdp_version) + " (" + where("fsdp_config") + ")"
                          : std::string(draft.fsdp_config ? "fsdp_config" : "fsdp") + " (" + where(draft.fsdp_config ? "fsdp_config" : "fsdp") +
                                "), FSDP version 1 by axolotl's default";
    fsdp_engine(draft, fsdp_version, decided);
  }
  if (accelerate) {
    const std::string& type = accelerate->distributed_type;
    const std::string decided = "distributed_type: " + type + " (" + accelerate->file + ")";
    const int accelerate_fsdp = accelerate->fsdp_version.value_or(1);
    if (type == "FSDP") {
      if (plan.engine.kind == EngineKind::DeepSpeed) {
        throw InputError(accelerate->file, "key \"distributed_type\": FSDP contradicts the plan's deepspeed (" + where("deepspeed") + ")");
      }
      if (plan.engine.kind == EngineKind::Ddp) {
        fsdp_engine(draft, accelerate_fsdp, decided);
        for (const std::string& setting : accelerate->fsdp_settings) plan.engine.settings.push_back("fsdp_config." + setting);
      } else if (accelerate->fsdp_version && *accelerate->fsdp_version != fsdp_version) {
        throw InputError(accelerate->file, "key \"fsdp_config.fsdp_version\": " + std::to_string(*accelerate->fsdp_version) +
                                               " contradicts the plan's FSDP version " + std::to_string(fsdp_version));
      } else {
        plan.engine.decided_by.push_back(decided);
      }
    } else if (type == "DEEPSPEED") {
      if (plan.engine.kind == EngineKind::Fsdp1 || plan.engine.kind == EngineKind::Fsdp2) {
        throw InputError(accelerate->file, "key \"distributed_type\": DEEPSPEED contradicts the plan's fsdp_config (" + where("fsdp_config") + ")");
      }
      // The DeepSpeed config accelerate's DeepSpeedPlugin (accelerate 1.15 utils/dataclasses.py
      // __post_init__) builds: from the plan's `deepspeed:` (transformers' TrainingArguments hands
      // it to the plugin) or deepspeed_config_file, refusing the accelerate fields it would
      // ignore; else from the inline fields, with the plugin's defaults (zero_stage 2, no offload,
      // every batch size "auto").
      const auto field_where = [&](const std::string& key) {
        for (const auto& [name, at] : accelerate->deepspeed_fields) {
          if (name == key) return at;
        }
        return accelerate->file;
      };
      if (plan.engine.kind == EngineKind::DeepSpeed) {
        refuse_accelerate_fields_beside_json(*accelerate, plan.engine.deepspeed->file == "inline" ? "the plan's deepspeed mapping (" + where("deepspeed") + ")"
                                                                                                  : plan.engine.deepspeed->file);
        plan.engine.decided_by.push_back(decided);
      } else if (accelerate->deepspeed_config_file) {
        refuse_accelerate_fields_beside_json(*accelerate, *accelerate->deepspeed_config_file);
        DeepSpeedConfig config = plan_deepspeed(YAML::Node(*accelerate->deepspeed_config_file), field_where("deepspeed_config_file"),
                                                draft.deepspeed_file_sets, "deepspeed_config.deepspeed_config_file");
        resolve_through_plugin(config, config.file, false);
        deepspeed_engine(draft, config, decided + ", deepspeed_config_file: " + config.file);
      } else {
        DeepSpeedConfig config;
        config.file = accelerate->file;
        config.zero_stage = accelerate->zero_stage.value_or(2);
        config.offload_optimizer = accelerate->offload_optimizer_device;
        config.offload_param = accelerate->offload_param_device;
        // The plugin writes the field into the config it builds; transformers'
        // trainer_config_process refuses one that differs from the TrainingArguments.
        if (accelerate->gradient_accumulation_steps && *accelerate->gradient_accumulation_steps != plan.gradient_accumulation_steps) {
          throw InputError(field_where("gradient_accumulation_steps"),
                           "key \"deepspeed_config.gradient_accumulation_steps\": " + std::to_string(*accelerate->gradient_accumulation_steps) +
                               " contradicts gradient_accumulation_steps " + std::to_string(plan.gradient_accumulation_steps) + " (" +
                               where("gradient_accumulation_steps") + "); transformers refuses a mismatch: set the same value");
        }
        deepspeed_engine(draft, config, decided + (accelerate->zero_stage ? "" : ", zero_stage 2 by accelerate's default"));
      }
      if (accelerate->zero3_init_flag && *accelerate->zero3_init_flag && plan.engine.deepspeed && plan.engine.deepspeed->zero_stage == 3) {
        // deepspeed.zero.Init partitions parameters while the model loads; training's hooks and
        // partitions are the same (accelerate ignores the flag below stage 3, with a warning).
        plan.engine.settings.push_back("zero3_init_flag: true (" + field_where("zero3_init_flag") + ")");
      }
    } else if (type == "NO" || type == "MULTI_GPU" || type == "MULTI_CPU") {
      if (plan.engine.kind != EngineKind::Ddp) {
        throw InputError(accelerate->file, "key \"distributed_type\": " + type + " contradicts the plan's " +
                                               engine_kind_name(plan.engine.kind) + " (" + plan.engine.decided_by.front() + ")");
      }
      plan.engine.decided_by.push_back(decided);
    } else {
      plan.engine.other_parallelism.push_back("distributed_type: " + type);
    }
  }
  data_parallel_mesh(draft);
  if (plan.engine.decided_by.empty()) plan.engine.decided_by.push_back("no deepspeed, fsdp_config or --accelerate-config: DDP (axolotl's default with several ranks)");
}

// ----------------------------------------------------------------------------------------------
// Cross-key rules
// ----------------------------------------------------------------------------------------------

// `plugins` and the Liger keys, once the model type is known: a plugin other than Liger's, Liger
// keys without the plugin (axolotl reads them only through it), and Liger on a model type whose
// patch hookstream does not model are listed in the report.
void liger_notes(Draft& draft) {
  Plan& plan = draft.plan;
  auto where = [&](const std::string& key) {
    auto it = draft.where.find(key);
    return it != draft.where.end() ? it->second : plan.source;
  };
  for (const std::string& plugin : plan.plugins) {
    if (plugin.find("integrations.liger") == std::string::npos) {
      plan.not_modelled_keys.push_back({"plugins", where("plugins"), "plugin " + plugin + " (what it patches is not modelled)"});
    }
  }
  const bool asked = plan.liger_rms_norm || plan.liger_glu_activation;
  const std::string key = plan.liger_rms_norm ? "liger_rms_norm" : draft.where.count("liger_glu_activation") ? "liger_glu_activation" : "liger_swiglu";
  if (asked && !plan.liger_plugin()) {
    plan.no_effect_keys.push_back({key, where(key), "axolotl applies Liger's kernels only through axolotl.integrations.liger.LigerPlugin in `plugins`"});
  } else if (asked && !plan.liger_applies()) {
    plan.not_modelled_keys.push_back({key, where(key), "Liger's kernels for model type " + plan.model.model_type + " are not modelled (hookstream models them for llama, mistral, qwen2 and qwen3)"});
  }
}

class Validator {
 public:
  explicit Validator(Draft& draft) : draft_(draft), plan_(draft.plan) {}

  void run() {
    adapter_rules();
    checkpointing_rules();
    layer_rules("hookstream.checkpoint_twice_layers", plan_.checkpoint_twice_layers);
    override_rules("hookstream.rank_overrides", plan_.rank_overrides, plan_.world_size, "world_size");
    override_rules("hookstream.iteration_overrides", plan_.iteration_overrides, plan_.iterations, "iterations");
    override_rules("hookstream.micro_step_overrides", plan_.micro_step_overrides, plan_.gradient_accumulation_steps,
                   "gradient_accumulation_steps");
    tiled_rules();
  }

 private:
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    auto it = draft_.where.find(key);
    throw InputError(it != draft_.where.end() ? it->second : plan_.source, "key \"" + key + "\": " + what);
  }

  void adapter_rules() {
    if (plan_.adapter == Adapter::Qlora) {
      // axolotl refuses qlora without load_in_4bit; an unset load_in_4bit is taken as implied.
      if (draft_.load_in_4bit == false) fail("load_in_4bit", "adapter: qlora requires load_in_4bit: true, got false");
      if (plan_.load_in_8bit) fail("load_in_8bit", "adapter: qlora loads the base model in 4 bit; load_in_8bit must be false");
      plan_.load_in_4bit = true;
    }
    if (plan_.load_in_4bit && plan_.load_in_8bit) fail("load_in_8bit", "load_in_4bit and load_in_8bit are exclusive");
    if (plan_.torch_compile.optimize_ddp == OptimizeDdp::PythonReducer && !plan_.torch_version.at_least(2, 2)) {
      // PR #110662 (2023-10, 2.2) added the mode; get_optimize_ddp_mode asserts on unknown names.
      fail("hookstream.optimize_ddp", "python_reducer needs PyTorch 2.2 or later (PR #110662), the plan models " +
                                          plan_.torch_version.text());
    }
    if (plan_.torch_compile.compiled_autograd && !plan_.torch_compile.enabled) {
      fail("hookstream.compiled_autograd", "is true but torch_compile is not set (compiled autograd runs the backward of a "
                                           "torch.compile'd model); set torch_compile: true");
    }
    // lora_target_linear is expanded against the model (build_model_structure): its Linear modules.
    if (plan_.adapter != Adapter::None && plan_.lora_target_modules.empty() && !plan_.lora_target_linear &&
        plan_.lora_target_parameters.empty()) {
      fail("adapter", std::string(plan_.adapter == Adapter::Lora ? "lora" : "qlora") +
                          " needs lora_target_modules (or lora_target_linear: true)");
    }
  }

  void checkpointing_rules() {
    // checkpoint_layers says which layers are checkpointed, so it implies checkpointing; an
    // explicit `gradient_checkpointing: false` next to it is a contradiction.
    if (plan_.checkpoint_layers || draft_.where.count("hookstream.checkpoint_layers")) {
      if (draft_.gradient_checkpointing == false) {
        fail("hookstream.checkpoint_layers", "is set but gradient_checkpointing is false (checkpoint_layers implies gradient checkpointing)");
      }
      draft_.gradient_checkpointing = true;
    }
    plan_.gradient_checkpointing = draft_.gradient_checkpointing.value_or(false);
    // axolotl's normalize_config fills use_reentrant: true only when unfrozen_parameters is unset;
    // otherwise its trainer builder falls back to use_reentrant: false.
    plan_.use_reentrant = draft_.use_reentrant.value_or(plan_.unfrozen_parameters.empty());
    if (draft_.checkpointing_forces_reentrant) plan_.use_reentrant = true;
    // ExpertParallelPlugin.post_model_load with the torch backend (plugin.py
    // _install_required_checkpoint_policy, commit 060b4aec63d4): gradient checkpointing without
    // selective_checkpointing goes through apply_selective_checkpointing(base, save=[]), whose
    // gradient_checkpointing_enable sets use_reentrant=False and a SAC context_fn that saves the
    // routing (aten::topk) and the ep all-to-alls (monkeypatch/selective_checkpointing.py): the
    // recompute re-runs no all-to-all. "auto" is torch unless deep_ep imports (DeepEP is a separate
    // GPU build): hookstream takes torch for it, and says so in the engine settings.
    const std::string backend = draft_.expert_parallel_backend.value_or("auto");
    if (plan_.engine.expert_parallel > 1 && plan_.gradient_checkpointing && backend != "deep_ep") {
      plan_.use_reentrant = false;
      plan_.engine.settings.push_back(
          "checkpointing: non-reentrant with selective saves of the routing and the ep all-to-alls (the plugin's torch backend"
          " forces use_reentrant: false" + std::string(backend == "auto" ? "; expert_parallel_backend auto taken as torch, as"
          " without DeepEP installed" : "") + ")");
    }
    if (plan_.activation_offloading && !plan_.gradient_checkpointing) {
      fail("activation_offloading", "requires gradient_checkpointing (axolotl refuses activation offloading without it)");
    }
    if (plan_.checkpoint_layers) layer_rules("hookstream.checkpoint_layers", *plan_.checkpoint_layers);
    // offload_layers narrows activation_offloading to some checkpointed layers; without offloading
    // it would say nothing, and a layer that is not checkpointed has no input to move.
    if (plan_.offload_layers) {
      if (!plan_.activation_offloading) {
        fail("hookstream.offload_layers", "is set but activation_offloading is off (offload_layers picks which checkpointed "
                                          "layers activation_offloading moves to the CPU)");
      }
      layer_rules("hookstream.offload_layers", *plan_.offload_layers);
      for (int layer : *plan_.offload_layers) {
        if (!plan_.layer_checkpointed(layer)) {
          fail("hookstream.offload_layers",
               "layer " + std::to_string(layer) + " is not checkpointed (gradient_checkpointing / checkpoint_layers): only a "
               "checkpointed layer's input can be offloaded");
        }
      }
    }
  }

  void layer_rules(const std::string& key, const std::vector<int>& layers) {
    const int count = plan_.model.num_hidden_layers;
    for (int layer : layers) {
      if (layer >= count) {
        fail(key, "layer " + std::to_string(layer) + " is out of range: the model has " + std::to_string(count) +
                      " decoder layers (0.." + std::to_string(count - 1) + ")");
      }
      if (key.find("checkpoint_twice_layers") != std::string::npos && !plan_.layer_checkpointed(layer)) {
        fail(key, "layer " + std::to_string(layer) + " is not checkpointed (gradient_checkpointing / checkpoint_layers)");
      }
    }
  }

  void override_rules(const std::string& key, const std::map<int, PlanOverride>& overrides, int limit,
                      const std::string& limit_name) {
    for (const auto& [index, entry] : overrides) {
      const std::string entry_key = key + "." + std::to_string(index);
      if (index >= limit) {
        fail(entry_key, "index " + std::to_string(index) + " is out of range: " + limit_name + " is " + std::to_string(limit));
      }
      if (entry.checkpoint_twice_layers) layer_rules(entry_key + ".checkpoint_twice_layers", *entry.checkpoint_twice_layers);
    }
  }

  // Shards split the sequence, so there can't be more shards than tokens. Checked for every
  // distinct (rank, iteration) combination the overrides produce, plus one with no override.
  void tiled_rules() {
    if (plan_.tiled_mlp_backward == TiledBackward::FunctionReturnsGrads && !plan_.tiled_mlp_weights_as_inputs) {
      fail("hookstream.tiled_mlp_backward", "function_returns_grads requires hookstream.tiled_mlp_weights_as_inputs: true "
                                            "(a Function can only return gradients for its inputs)");
    }
    // tiled_mlp_layers says which layers are tiled, so it implies tiled_mlp (as checkpoint_layers
    // implies gradient checkpointing); an explicit `tiled_mlp: false` next to it contradicts it.
    if (plan_.tiled_mlp_layers || draft_.where.count("hookstream.tiled_mlp_layers")) {
      if (draft_.where.count("tiled_mlp") && !plan_.tiled_mlp) {
        fail("hookstream.tiled_mlp_layers", "is set but tiled_mlp is false (tiled_mlp_layers implies tiled_mlp)");
      }
      plan_.tiled_mlp = true;
      if (plan_.tiled_mlp_layers) layer_rules("hookstream.tiled_mlp_layers", *plan_.tiled_mlp_layers);
    }
    if (!plan_.tiled_mlp) return;
    for (int rank : sample_indices(plan_.rank_overrides, plan_.world_size)) {
      for (int iteration : sample_indices(plan_.iteration_overrides, plan_.iterations)) {
        for (int micro : sample_indices(plan_.micro_step_overrides, plan_.gradient_accumulation_steps)) {
          const int shards = plan_.tiled_shards_for(rank, iteration, micro);
          const int sequence = plan_.sequence_len_for(rank, iteration, micro);
          if (shards > sequence) {
            fail(shard_key(rank, iteration, micro), "tiled_mlp_num_shards " + std::to_string(shards) +
                                                        " exceeds sequence_len " + std::to_string(sequence) + " (rank " +
                                                        std::to_string(rank) + ", iteration " + std::to_string(iteration) +
                                                        (plan_.micro_step_overrides.empty()
                                                             ? std::string()
                                                             : ", micro-step " + std::to_string(micro)) +
                                                        ")");
          }
        }
      }
    }
  }

  static std::vector<int> sample_indices(const std::map<int, PlanOverride>& overrides, int limit) {
    std::vector<int> indices;
    for (const auto& entry : overrides) indices.push_back(entry.first);
    for (int index = 0; index < limit; ++index) {
      if (!overrides.count(index)) {
        indices.push_back(index);
        break;
      }
    }
    return indices;
  }

  std::string shard_key(int rank, int iteration, int micro) const {
    const std::string by_micro = "hookstream.micro_step_overrides." + std::to_string(micro) + ".tiled_mlp_num_shards";
    if (draft_.where.count(by_micro)) return by_micro;
    const std::string by_iteration = "hookstream.iteration_overrides." + std::to_string(iteration) + ".tiled_mlp_num_shards";
    const std::string by_rank = "hookstream.rank_overrides." + std::to_string(rank) + ".tiled_mlp_num_shards";
    if (draft_.where.count(by_iteration)) return by_iteration;
    if (draft_.where.count(by_rank)) return by_rank;
    return "tiled_mlp_num_shards";
  }

  Draft& draft_;
  Plan& plan_;
};

// ----------------------------------------------------------------------------------------------
// Override precedence: micro-step override, then iteration override, then rank override, then
// the plan.
// ----------------------------------------------------------------------------------------------

template <typename T>
std::optional<T> overridden(const Plan& plan, int rank, int iteration, int micro_step,
                            std::optional<T> PlanOverride::*field) {
  auto by_micro = plan.micro_step_overrides.find(micro_step);
  if (micro_step >= 0 && by_micro != plan.micro_step_overrides.end() && by_micro->second.*field) return by_micro->second.*field;
  auto by_iteration = plan.iteration_overrides.find(iteration);
  if (by_iteration != plan.iteration_overrides.end() && by_iteration->second.*field) return by_iteration->second.*field;
  auto by_rank = plan.rank_overrides.find(rank);
  if (by_rank != plan.rank_overrides.end() && by_rank->second.*field) return by_rank->second.*field;
  return std::nullopt;
}

// ----------------------------------------------------------------------------------------------
// YAML output
// ----------------------------------------------------------------------------------------------

std::string to_string(TiledBackward mode) {
  switch (mode) {
    case TiledBackward::BackwardPerChunk: return "per_chunk_backward";
    case TiledBackward::GradThenBackward: return "grad_then_backward";
    case TiledBackward::FunctionReturnsGrads: return "function_returns_grads";
  }
  return "";
}

std::string to_string(DeviceMap map) {
  switch (map) {
    case DeviceMap::PerRank: return "ddp";
    case DeviceMap::Auto: return "auto";
    case DeviceMap::Balanced: return "balanced";
    case DeviceMap::Sequential: return "sequential";
  }
  return "";
}

void emit_string(YAML::Emitter& out, const std::string& key, const std::string& value) {
  out << YAML::Key << key << YAML::Value << YAML::DoubleQuoted << value;
}

void emit_strings(YAML::Emitter& out, const std::string& key, const std::vector<std::string>& values) {
  out << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (const std::string& value : values) out << YAML::DoubleQuoted << value;
  out << YAML::EndSeq;
}

// lora_target_modules as written: one string (a regular expression for PEFT) or a list.
void emit_targets(YAML::Emitter& out, const Plan& plan) {
  if (plan.lora_target_modules.empty()) return;
  if (plan.lora_target_modules_regex) {
    out << YAML::Key << "lora_target_modules" << YAML::Value << YAML::DoubleQuoted << plan.lora_target_modules[0];
  } else {
    emit_strings(out, "lora_target_modules", plan.lora_target_modules);
  }
}

void emit_ints(YAML::Emitter& out, const std::string& key, const std::vector<int>& values) {
  out << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (int value : values) out << value;
  out << YAML::EndSeq;
}

// Shortest text that reads back as the same double.
void emit_number(YAML::Emitter& out, const std::string& key, double value) {
  out << YAML::Key << key << YAML::Value << fmt::format("{}", value);
}

template <typename T>
void emit(YAML::Emitter& out, const std::string& key, const T& value) {
  out << YAML::Key << key << YAML::Value << value;
}

void emit_overrides(YAML::Emitter& out, const std::string& key, const std::map<int, PlanOverride>& overrides) {
  if (overrides.empty()) return;
  out << YAML::Key << key << YAML::Value << YAML::BeginMap;
  for (const auto& [index, entry] : overrides) {
    out << YAML::Key << index << YAML::Value << YAML::BeginMap;
    if (entry.sequence_len) emit(out, "sequence_len", *entry.sequence_len);
    if (entry.tiled_mlp_num_shards) emit(out, "tiled_mlp_num_shards", *entry.tiled_mlp_num_shards);
    if (entry.checkpoint_twice_layers) emit_ints(out, "checkpoint_twice_layers", *entry.checkpoint_twice_layers);
    if (entry.unused_modules) emit_strings(out, "unused_modules", *entry.unused_modules);
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
}

void emit_axolotl_keys(YAML::Emitter& out, const Plan& plan) {
  const Plan defaults;
  emit_string(out, "base_model", plan.base_model);
  emit(out, "sequence_len", plan.sequence_len);
  emit(out, "micro_batch_size", plan.micro_batch_size);
  emit(out, "gradient_accumulation_steps", plan.gradient_accumulation_steps);
  if (plan.adapter != Adapter::None) {
    emit(out, "adapter", std::string(plan.adapter == Adapter::Lora ? "lora" : "qlora"));
    emit(out, "lora_r", plan.lora_r);
    emit_number(out, "lora_alpha", plan.lora_alpha);
    emit_targets(out, plan);
    if (plan.lora_target_linear) emit(out, "lora_target_linear", true);
    if (!plan.lora_target_parameters.empty()) emit_strings(out, "lora_target_parameters", plan.lora_target_parameters);
  } else {
    if (plan.lora_r != defaults.lora_r) emit(out, "lora_r", plan.lora_r);
    if (plan.lora_alpha != defaults.lora_alpha) emit_number(out, "lora_alpha", plan.lora_alpha);
    if (!plan.lora_target_modules.empty()) emit_targets(out, plan);
  }
  if (plan.load_in_4bit) emit(out, "load_in_4bit", true);
  if (plan.load_in_8bit) emit(out, "load_in_8bit", true);
  if (plan.gradient_checkpointing) emit(out, "gradient_checkpointing", true);
  if (plan.use_reentrant != plan.unfrozen_parameters.empty()) {
    out << YAML::Key << "gradient_checkpointing_kwargs" << YAML::Value << YAML::BeginMap;
    emit(out, "use_reentrant", plan.use_reentrant);
    out << YAML::EndMap;
  }
  if (plan.activation_offloading) emit(out, "activation_offloading", true);
  if (plan.tiled_mlp) emit(out, "tiled_mlp", true);
  if (plan.tiled_mlp_num_shards) emit(out, "tiled_mlp_num_shards", *plan.tiled_mlp_num_shards);
  if (plan.ddp_find_unused_parameters) emit(out, "ddp_find_unused_parameters", *plan.ddp_find_unused_parameters);
  if (plan.ddp_bucket_cap_mb) emit_number(out, "ddp_bucket_cap_mb", *plan.ddp_bucket_cap_mb);
  if (plan.device_map != DeviceMap::PerRank) emit(out, "device_map", to_string(plan.device_map));
  if (!plan.unfrozen_parameters.empty()) emit_strings(out, "unfrozen_parameters", plan.unfrozen_parameters);
  if (plan.chunked_cross_entropy) emit(out, "chunked_cross_entropy", true);
  if (plan.sample_packing) emit(out, "sample_packing", true);
  if (!plan.plugins.empty()) emit_strings(out, "plugins", plan.plugins);
  if (plan.liger_rms_norm) emit(out, "liger_rms_norm", true);
  if (plan.liger_glu_activation) emit(out, "liger_glu_activation", true);
  if (plan.trust_remote_code) emit(out, "trust_remote_code", true);
  if (plan.attn_implementation != Plan{}.attn_implementation) emit(out, "attn_implementation", plan.attn_implementation);
  if (!plan.rl.empty()) emit(out, "rl", plan.rl);
  if (plan.chunked_cross_entropy_num_chunks != defaults.chunked_cross_entropy_num_chunks) {
    emit(out, "chunked_cross_entropy_num_chunks", plan.chunked_cross_entropy_num_chunks);
  }
  if (plan.learning_rate != defaults.learning_rate) emit_number(out, "learning_rate", plan.learning_rate);
  if (plan.weight_decay != defaults.weight_decay) emit_number(out, "weight_decay", plan.weight_decay);
  if (plan.seed != defaults.seed) emit(out, "seed", plan.seed);
  if (plan.bf16) emit(out, "bf16", *plan.bf16);
  if (plan.max_steps) emit(out, "max_steps", *plan.max_steps);
  if (plan.optimizer != defaults.optimizer) emit_string(out, "optimizer", plan.optimizer);
  if (plan.torch_compile.enabled) {
    emit(out, "torch_compile", true);
    if (plan.torch_compile.backend != defaults.torch_compile.backend) emit_string(out, "torch_compile_backend", plan.torch_compile.backend);
    if (!plan.torch_compile.mode.empty()) emit_string(out, "torch_compile_mode", plan.torch_compile.mode);
  }
}

void emit_hookstream_keys(YAML::Emitter& out, const Plan& plan) {
  const Plan defaults;
  out << YAML::Key << "hookstream" << YAML::Value << YAML::BeginMap;
  emit(out, "world_size", plan.world_size);
  emit(out, "iterations", plan.iterations);
  if (plan.static_graph) emit(out, "static_graph", true);
  if (plan.gradient_as_bucket_view) emit(out, "gradient_as_bucket_view", true);
  if (plan.checkpoint_layers) emit_ints(out, "checkpoint_layers", *plan.checkpoint_layers);
  if (!plan.checkpoint_twice_layers.empty()) emit_ints(out, "checkpoint_twice_layers", plan.checkpoint_twice_layers);
  if (plan.tiled_mlp_backward != defaults.tiled_mlp_backward) emit(out, "tiled_mlp_backward", to_string(plan.tiled_mlp_backward));
  if (plan.tiled_mlp_weights_as_inputs) emit(out, "tiled_mlp_weights_as_inputs", true);
  if (plan.tiled_mlp_ds_grad_is_ready) emit(out, "tiled_mlp_ds_grad_is_ready", *plan.tiled_mlp_ds_grad_is_ready);
  if (plan.z3_leaf_mlp) emit(out, "z3_leaf_mlp", true);
  if (plan.chunked_loss_recomputes_lm_head) emit(out, "chunked_loss", std::string("recompute_lm_head"));
  if (plan.torch_distributed_debug != defaults.torch_distributed_debug) {
    emit(out, "torch_distributed_debug", plan.torch_distributed_debug);
  }
  if (plan.enable_input_require_grads) emit(out, "enable_input_require_grads", *plan.enable_input_require_grads);
  if (plan.train_vision_tower) emit(out, "train_vision_tower", *plan.train_vision_tower);
  if (plan.vision_inputs != defaults.vision_inputs) emit(out, "vision_inputs", plan.vision_inputs);
  if (plan.vision_tokens != defaults.vision_tokens) emit(out, "vision_tokens", plan.vision_tokens);
  if (!plan.unused_modules.empty()) emit_strings(out, "unused_modules", plan.unused_modules);
  if (plan.offload_protocol) emit(out, "offload_protocol", *plan.offload_protocol);
  if (plan.pinned_slots_exact) emit(out, "pinned_slots", std::string("exact"));
  if (plan.offload_layers) emit_ints(out, "offload_layers", *plan.offload_layers);
  if (plan.gpu != defaults.gpu) emit(out, "gpu", plan.gpu);
  if (plan.calibration) emit(out, "calibration", *plan.calibration);
  if (plan.weights) emit(out, "weights", *plan.weights);
  if (plan.data) emit(out, "data", *plan.data);
  emit_overrides(out, "rank_overrides", plan.rank_overrides);
  emit_overrides(out, "iteration_overrides", plan.iteration_overrides);
  emit_overrides(out, "micro_step_overrides", plan.micro_step_overrides);
  if (plan.tiled_mlp_layers) emit_ints(out, "tiled_mlp_layers", *plan.tiled_mlp_layers);
  if (plan.torch_version != newest_torch_version()) emit(out, "torch_version", plan.torch_version.text());
  if (plan.transformers_version != Plan{}.transformers_version) emit(out, "transformers_version", plan.transformers_version);
  if (plan.torch_compile.optimize_ddp != defaults.torch_compile.optimize_ddp) emit(out, "optimize_ddp", to_string(plan.torch_compile.optimize_ddp));
  if (plan.torch_compile.compiled_autograd) emit(out, "compiled_autograd", true);
  out << YAML::EndMap;
}

std::vector<std::string> build_known_keys() {
  std::vector<std::string> keys;
  for (const std::string& key : schedule_keys()) {
    if (key == "gradient_checkpointing_kwargs") {
      for (const std::string& sub : checkpointing_kwargs_keys()) keys.push_back(key + "." + sub);
    } else {
      keys.push_back(key);
    }
  }
  for (const std::string& key : top_level_keys()) {
    if (key != "hookstream" && key != "gradient_checkpointing_kwargs" && !contains(keys, key)) keys.push_back(key);
  }
  for (const std::string& key : hookstream_keys()) {
    if (key == "rank_overrides" || key == "iteration_overrides" || key == "micro_step_overrides") {
      const std::string index = key == "rank_overrides" ? "RANK" : key == "iteration_overrides" ? "ITER" : "MICRO";
      for (const std::string& sub : override_keys()) keys.push_back("hookstream." + key + "." + index + "." + sub);
    } else {
      keys.push_back("hookstream." + key);
    }
  }
  return keys;
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// Plan helpers
// ------------------------------------------------------------------------------------------------

bool Plan::layer_checkpointed(int layer) const {
  if (!gradient_checkpointing) return false;
  if (!checkpoint_layers) return true;
  return std::binary_search(checkpoint_layers->begin(), checkpoint_layers->end(), layer);
}

bool Plan::layer_offloaded(int layer) const {
  if (!activation_offloading || !layer_checkpointed(layer)) return false;
  if (!offload_layers) return true;
  return std::binary_search(offload_layers->begin(), offload_layers->end(), layer);
}

bool Plan::layer_tiled(int layer) const {
  if (!tiled_mlp) return false;
  if (!tiled_mlp_layers) return true;
  return std::binary_search(tiled_mlp_layers->begin(), tiled_mlp_layers->end(), layer);
}

int Plan::checkpoint_count(int layer, int rank, int iteration, int micro_step) const {
  if (!layer_checkpointed(layer)) return 0;
  const std::vector<int> twice = overridden(*this, rank, iteration, micro_step, &PlanOverride::checkpoint_twice_layers)
                                     .value_or(checkpoint_twice_layers);
  return std::find(twice.begin(), twice.end(), layer) != twice.end() ? 2 : 1;
}

int Plan::sequence_len_for(int rank, int iteration, int micro_step) const {
  return overridden(*this, rank, iteration, micro_step, &PlanOverride::sequence_len).value_or(sequence_len);
}

// DeepSpeed ALST's TiledMLP picks ceil(seqlen / hidden_size) shards when none is given.
int Plan::tiled_shards_for(int rank, int iteration, int micro_step) const {
  if (!tiled_mlp) return 1;
  if (auto shards = overridden(*this, rank, iteration, micro_step, &PlanOverride::tiled_mlp_num_shards)) return *shards;
  if (tiled_mlp_num_shards) return *tiled_mlp_num_shards;
  const int sequence = sequence_len_for(rank, iteration, micro_step);
  if (model.hidden_size <= 0) return 1;
  return std::max(1, (sequence + model.hidden_size - 1) / model.hidden_size);
}

std::vector<std::string> Plan::unused_modules_for(int rank, int iteration, int micro_step) const {
  std::vector<std::string> out = overridden(*this, rank, iteration, micro_step, &PlanOverride::unused_modules).value_or(unused_modules);
  for (const RoutedIdle& idle : routed_idle) {
    if ((idle.rank < 0 || idle.rank == rank) && idle.iteration == iteration) out.insert(out.end(), idle.modules.begin(), idle.modules.end());
  }
  return out;
}

int Plan::transformers_major() const { return std::stoi(transformers_version.substr(0, transformers_version.find('.'))); }

std::string parse_transformers_version(const std::string& text, const std::string& where) {
  // MAJOR.MINOR[.PATCH...]: what `transformers.__version__` prints. 4.x and 5.x build MoE experts
  // differently (per-expert modules vs fused tensors); older majors are not modelled.
  static const std::regex version(R"(([45])\.(\d+)(\.\d+)?(\.?(dev|rc)\d*)?)");
  std::smatch m;
  if (!std::regex_match(text, m, version)) {
    throw InputError(where, "expected a transformers version 4.x or 5.x such as 4.57 or 5.17, got \"" + text + "\"");
  }
  return m[1].str() + "." + m[2].str();
}

// ------------------------------------------------------------------------------------------------
// Loading
// ------------------------------------------------------------------------------------------------

Plan parse_plan(const std::string& yaml_text, const std::string& source, const LoadOptions& options) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& error) {
    throw InputError(source + ":" + std::to_string(error.mark.line + 1) + ":" + std::to_string(error.mark.column + 1),
                     "malformed YAML: " + yaml_parse_message(error));
  }
  if (!root.IsDefined() || root.IsNull()) throw InputError(source, "the plan is empty; expected a mapping with at least base_model");
  if (!root.IsMap()) throw InputError(source + ":1", "expected a mapping of plan keys at the top level, got " + shown(root));

  std::vector<std::string> set_paths;
  std::vector<std::string> deepspeed_file_sets, accelerate_sets;
  for (const std::string& assignment : options.set) {
    // A setting inside the DeepSpeed JSON or accelerate config that runs (file_holding) is set
    // there, as a fix's patch to that file does.
    const std::string file = file_holding(root, options, assignment.substr(0, assignment.find('=')));
    if (file.empty()) set_paths.push_back(apply_set(root, assignment));
    else if (assignment.rfind("deepspeed.", 0) == 0 && file != options.accelerate_config) deepspeed_file_sets.push_back(assignment);
    else accelerate_sets.push_back(assignment);
  }

  const Origin origin(source, set_paths);
  Draft draft;
  draft.deepspeed_file_sets = std::move(deepspeed_file_sets);
  draft.plan.source = source;
  Converter(origin, draft).top_level(root);
  std::optional<AccelerateConfig> accelerate;
  if (options.accelerate_config) {
    accelerate = read_accelerate_config(*options.accelerate_config);
    if (!accelerate_sets.empty()) {
      YAML::Node tree = accelerate_file_tree(*options.accelerate_config);
      std::vector<std::string> keys;
      for (const std::string& assignment : accelerate_sets) {
        const size_t equals = assignment.find('=');
        const std::vector<std::string> spelling = spelling_in_file(root, options, assignment.substr(0, equals));
        const std::string key = join(spelling, ".");
        if (spelling[0] == "deepspeed_config") {
          // An inline DeepSpeed field (inline_deepspeed_field): accelerate's own key, not a plan key.
          YAML::Node value;
          try {
            value = YAML::Load(assignment.substr(equals + 1));
          } catch (const YAML::Exception& error) {
            throw InputError("--set", "key \"" + key + "\": malformed YAML value: " + yaml_parse_message(error));
          }
          if (!tree["deepspeed_config"].IsMap()) tree["deepspeed_config"] = YAML::Node(YAML::NodeType::Map);
          tree["deepspeed_config"][spelling[1]] = value;
          keys.push_back(key);
          continue;
        }
        keys.push_back(apply_set(tree, key + assignment.substr(equals)));
      }
      accelerate = parse_accelerate_config(tree, *options.accelerate_config, *options.accelerate_config + " with --set " + join(keys, ", "));
    }
  }
  resolve_world_size(draft, options, accelerate);
  resolve_attention(draft);
  engine_rules(draft, accelerate);
  if (draft.plan.engine.kind == EngineKind::Fsdp1 && draft.plan.adapter != Adapter::None) {
    FsdpSettings& fsdp = draft.plan.engine.fsdp;
    fsdp.peft_wrap_policy = true;
    fsdp.peft_quantized_base = draft.plan.adapter == Adapter::Qlora || draft.plan.load_in_4bit || draft.plan.load_in_8bit;
    // unfrozen_parameters' leaves are modelled (their calls: sim/engine/forward_graph.h ModuleKind::Leaf).
    // lora_target_parameters: one entry naming experts' [E, ...] tensors is modelled (Fsdp1Model's
    // check_param_wrapper_reads, measured on real FSDP1); several (nested ParamWrappers on one
    // module) or a 2-D target (a Linear's weight) are not.
    const std::vector<std::string>& targets = draft.plan.lora_target_parameters;
    fsdp.peft_other_trainable_leaves = !targets.empty() && !(targets.size() == 1 && targets[0].find("experts.") != std::string::npos);
  }
  if (options.torch_version) draft.plan.torch_version = parse_torch_version(*options.torch_version, "--torch-version");
  if (options.transformers_version) {
    draft.plan.transformers_version = parse_transformers_version(*options.transformers_version, "--transformers-version");
  }
  resolve_model(draft, options);
  liger_notes(draft);
  Validator(draft).run();
  return draft.plan;
}

Plan load_plan(const std::string& path, const LoadOptions& options) {
  std::error_code ignored;
  if (fs::is_directory(path, ignored)) throw InputError("", "cannot read " + path + ": Is a directory");
  std::ifstream file(path, std::ios::binary);
  if (!file) throw InputError("", "cannot read " + path + ": " + std::strerror(errno));
  std::ostringstream text;
  text << file.rdbuf();
  return parse_plan(text.str(), path, options);
}

std::string to_yaml(const Plan& plan) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  emit_axolotl_keys(out, plan);
  emit_hookstream_keys(out, plan);
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

bool Plan::liger_plugin() const {
  // axolotl.integrations.liger.LigerPlugin (older configs: axolotl.integrations.liger.plugin.LigerPlugin).
  return std::any_of(plugins.begin(), plugins.end(),
                     [](const std::string& p) { return p.find("integrations.liger") != std::string::npos && p.find("LigerPlugin") != std::string::npos; });
}

bool Plan::liger_applies() const {
  // Model types whose Liger patch (liger_kernel/transformers/monkey_patch.py apply_liger_kernel_to_llama,
  // _mistral, _qwen2, _qwen3) swaps every {Model}RMSNorm for LigerRMSNorm and the {Model}MLP for
  // LigerSwiGLUMLP, on the decoder layers hookstream builds for them.
  static const std::vector<std::string> types = {"llama", "mistral", "qwen2", "qwen3"};
  return std::find(types.begin(), types.end(), model.model_type) != types.end();
}

const std::vector<std::string>& known_plan_keys() {
  static const std::vector<std::string> keys = build_known_keys();
  return keys;
}

std::vector<std::string> modelled_axolotl_keys() {
  std::vector<std::string> keys = schedule_keys();
  keys.insert(keys.end(), engine_keys().begin(), engine_keys().end());
  std::sort(keys.begin(), keys.end());
  return keys;
}

SettingLocation setting_as_written(const std::string& yaml_text, const std::string& key, const LoadOptions& options) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception&) {
    return {key, ""};
  }
  if (!root.IsMap()) return {key, ""};
  try {
    return {join(spelling_in_file(root, options, key), "."), file_holding(root, options, key)};
  } catch (const InputError&) {
    return {key, ""};  // an unreadable file is reported when the plan loads
  }
}

std::string key_as_written(const std::string& yaml_text, const std::string& key, const LoadOptions& options) {
  return setting_as_written(yaml_text, key, options).key;
}

}  // namespace hookstream
