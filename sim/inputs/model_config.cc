// Reads a Hugging Face config.json into ModelConfig. Only the fields that decide which parameters
// exist (and therefore which gradient hooks DDP registers) are read; everything else in the file is
// ignored, as transformers' PretrainedConfig keeps unknown keys without using them.
#include "sim/inputs/model_config.h"

#include "sim/inputs/architectures/architecture.h"
#include "sim/inputs/architectures/vision_tower.h"
#include "sim/inputs/data_files.h"

#include <algorithm>
#include <cmath>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>

#include <nlohmann/json.hpp>

#include "sim/inputs/input_error.h"
#include "sim/inputs/json_input.h"

namespace hookstream {
namespace {

using nlohmann::json;


bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

// A value as the user wrote it, for "got ..." in messages. Strings keep their quotes.
std::string shown(const json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

// Where decoder fields are looked up: `text_config` first (multimodal configs nest the decoder
// there), then the top level. transformers' composite configs do the same via get_text_config().
class ConfigReader {
 public:
  ConfigReader(const json& root, std::string source) : root_(root), source_(std::move(source)) {
    auto it = root_.find("text_config");
    if (it != root_.end() && !it->is_null()) {
      if (!it->is_object()) fail("text_config", "expected an object", shown(*it));
      text_ = &*it;
    }
  }

  bool has_text_config() const { return text_ != nullptr; }
  const std::string& source() const { return source_; }

  // Finds `key` in text_config, then at the top level; null values count as absent (HF writes
  // `"head_dim": null` to mean "derive it"). Returns the dotted name used in messages.
  const json* find(const std::string& key, std::string* dotted) const {
    if (text_ != nullptr) {
      if (const json* value = find_in(*text_, key)) {
        *dotted = "text_config." + key;
        return value;
      }
    }
    *dotted = key;
    return find_in(root_, key);
  }

  int positive_int(const std::string& key) const {
    std::string dotted;
    const json* value = find(key, &dotted);
    if (value == nullptr) fail(key, "missing; expected a positive integer");
    return to_positive_int(*value, dotted);
  }

  std::optional<int> optional_positive_int(const std::string& key) const {
    std::string dotted;
    const json* value = find(key, &dotted);
    if (value == nullptr) return std::nullopt;
    return to_positive_int(*value, dotted);
  }

  // A positive number (integer or float); absent: nullopt.
  std::optional<double> optional_positive_number(const std::string& key) const {
    std::string dotted;
    const json* value = find(key, &dotted);
    if (value == nullptr) return std::nullopt;
    if (!value->is_number() || !(value->get<double>() > 0)) fail(dotted, "expected a positive number", shown(*value));
    return value->get<double>();
  }

  std::optional<bool> optional_bool(const std::string& key) const {
    std::string dotted;
    const json* value = find(key, &dotted);
    if (value == nullptr) return std::nullopt;
    if (!value->is_boolean()) fail(dotted, "expected true or false", shown(*value));
    return value->get<bool>();
  }

  std::string optional_string(const json& object, const std::string& key,
                              const std::string& dotted) const {
    const json* value = find_in(object, key);
    if (value == nullptr) return "";
    if (!value->is_string()) fail(dotted, "expected a string", shown(*value));
    return value->get<std::string>();
  }

  int to_positive_int(const json& value, const std::string& dotted) const {
    if (!value.is_number_integer()) fail(dotted, "expected a positive integer", shown(value));
    const auto number = value.get<std::int64_t>();
    if (number <= 0 || number > std::numeric_limits<int>::max()) {
      fail(dotted, "expected a positive integer", shown(value));
    }
    return static_cast<int>(number);
  }

  [[noreturn]] void fail(const std::string& key, const std::string& expected,
                         const std::string& got = "") const {
    std::string what = "key \"" + key + "\": " + expected;
    if (!got.empty()) what += ", got " + got;
    throw InputError(source_, what);
  }

  static const json* find_in(const json& object, const std::string& key) {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return nullptr;
    return &*it;
  }

  const json& root() const { return root_; }

 private:
  const json& root_;
  const json* text_ = nullptr;
  std::string source_;
};

DType parse_dtype(const ConfigReader& reader) {
  // transformers >= 4.56 writes `dtype`; older files write `torch_dtype`. Prefer the newer key.
  for (const char* key : {"dtype", "torch_dtype"}) {
    std::string dotted;
    const json* value = reader.find(key, &dotted);
    if (value == nullptr) continue;
    if (value->is_string()) {
      const std::string name = lowercase(value->get<std::string>());
      if (name == "bfloat16" || name == "torch.bfloat16") return DType::BFloat16;
      if (name == "float16" || name == "torch.float16") return DType::Float16;
      if (name == "float32" || name == "torch.float32") return DType::Float32;
    }
    reader.fail(dotted, "expected \"bfloat16\", \"float16\" or \"float32\"", shown(*value));
  }
  return DType::BFloat16;  // the dtype every bundled model ships in; HF loads float32 if absent
}

// Qwen2-family decoders hard-code bias=True on q/k/v (transformers' Qwen2Attention ignores
// `attention_bias`); Qwen3-family decoders add a per-head RMSNorm on q and k (Qwen3Attention).
bool has_qkv_bias_by_type(const std::string& decoder_type) { return starts_with(decoder_type, "qwen2"); }
bool has_qk_norm_by_type(const std::string& decoder_type) { return starts_with(decoder_type, "qwen3"); }

// per_layer_config as HeterogeneousConfigMixin reads it (transformers
// integrations/heterogeneity/configuration_utils.py _apply_heterogeneous_config): keys are layer
// indices (int("05") == 5), values the keys that layer overrides. Only the config classes that read
// it accept it; an override hookstream cannot hold as a number (`skip`, a list) is refused rather
// than ignored. An index at or past num_hidden_layers names a layer that is not built (transformers
// rejects it on load; a config cut to fewer layers keeps the original's), so it changes nothing.
void read_per_layer_config(const ConfigReader& reader, const ArchitectureSpec& spec, const json& per_layer,
                           std::map<std::string, double>& values) {
  if (per_layer.empty()) return;
  if (!spec.reads_per_layer_config) {
    reader.fail("per_layer_config", "set, but transformers' " + spec.model_type +
                                        " modelling code reads every layer from the global config (its config class "
                                        "raises AmbiguousGlobalPerLayerAttributeError); expected it absent");
  }
  values["per_layer_config"] = 1;
  for (auto layer = per_layer.begin(); layer != per_layer.end(); ++layer) {
    const std::string& index = layer.key();
    const bool digits = !index.empty() && std::all_of(index.begin(), index.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    if (!digits || index.size() > 6) reader.fail("per_layer_config", "expected layer indices as keys", shown(json(index)));
    if (!layer->is_object()) reader.fail("per_layer_config." + index, "expected an object of overrides", shown(*layer));
    const int i = std::stoi(index);
    for (auto it = layer->begin(); it != layer->end(); ++it) {
      if (it->is_boolean()) values[per_layer_key(i, it.key())] = it->get<bool>() ? 1 : 0;
      else if (it->is_number()) values[per_layer_key(i, it.key())] = it->get<double>();
      else reader.fail("per_layer_config." + index + "." + it.key(), "not modelled by hookstream; expected a number", shown(*it));
    }
  }
}

// The composite types whose vision tower hookstream builds, and which tower it is.
std::optional<VisionLayout> vision_layout_of(const std::string& model_type) {
  if (model_type == "qwen3_vl" || model_type == "qwen3_vl_moe") return VisionLayout::Qwen3VL;
  // Cosmos3OmniForConditionalGeneration is Qwen3VLForConditionalGeneration under its own config
  // class (transformers/models/cosmos3_omni/modular_cosmos3_omni.py: "Model arch is identical to
  // Qwen3-VL"; Cosmos3OmniConfig(Qwen3VLConfig) with qwen3_vl_vision / qwen3_vl_text sub-configs).
  if (model_type == "cosmos3_omni") return VisionLayout::Qwen3VL;
  // Qwen3_5VisionModel: Qwen3-VL's tower without DeepStack mergers (no deepstack_visual_indexes).
  if (model_type == "qwen3_5" || model_type == "qwen3_5_moe") return VisionLayout::Qwen3VL;
  if (model_type == "qwen2_vl") return VisionLayout::Qwen2VL;
  if (model_type == "qwen2_5_vl") return VisionLayout::Qwen25VL;
  return std::nullopt;
}

bool is_vision_language_type(const std::string& model_type) {
  return vision_layout_of(model_type).has_value() || find_vision_language(model_type) != nullptr;
}

// A tower of the vision-tower table (CLIP, SigLIP, Pixtral) under a vision-language model of the
// table (LLaVA, Gemma 3, ...). The composite config class fills in vision_config.model_type when a
// config omits it (LlavaConfig: "clip_vision_model"), which is the spec's first tower. The vision
// config's keys go into the tower's own values; "vision_<key>" copies, the number of feature layers
// and the composite class's defaults go into the model's values, which the projector reads.
VisionTowerConfig parse_described_vision(const ConfigReader& reader, const json& root, const VisionLanguageSpec& model,
                                         const json& vision, ModelConfig& config) {
  std::string tower_type = reader.optional_string(vision, "model_type", "vision_config.model_type");
  if (tower_type.empty()) tower_type = model.towers.front();
  const VisionTowerSpec* spec = find_vision_tower(tower_type);
  if (spec == nullptr || std::find(model.towers.begin(), model.towers.end(), tower_type) == model.towers.end()) {
    std::string known;
    for (const std::string& t : model.towers) known += (known.empty() ? "" : ", ") + t;
    reader.fail("vision_config.model_type",
                "hookstream models the " + known + " tower" + (model.towers.size() > 1 ? "s" : "") + " for model_type \"" +
                    config.model_type + "\"",
                shown(json(tower_type)));
  }
  VisionTowerConfig tower;
  tower.layout = spec->layout;
  tower.model_type = tower_type;
  std::set<std::string> strings;
  for (auto it = vision.begin(); it != vision.end(); ++it) {
    if (it->is_boolean()) tower.values[it.key()] = it->get<bool>() ? 1 : 0;
    else if (it->is_number()) tower.values[it.key()] = it->get<double>();
    // A string key is the flag "key=value" (InternVL's norm_type: layer_norm or rms_norm).
    else if (it->is_string()) {
      tower.values[it.key() + "=" + it->get<std::string>()] = 1;
      strings.insert(it.key());
    }
    // [height, width] (InternVL's image_size and patch_size): "key" is the first, "key_1" the second.
    else if (it->is_array() && it->size() == 2 && (*it)[0].is_number() && (*it)[1].is_number()) {
      tower.values[it.key()] = (*it)[0].get<double>();
      tower.values[it.key() + "_1"] = (*it)[1].get<double>();
    }
  }
  for (const auto& [alias, key] : spec->attribute_map) {
    if (auto it = tower.values.find(alias); it != tower.values.end()) tower.values.emplace(key, it->second);
  }
  // MllamaVisionConfig.max_aspect_ratio_id: len(supported_aspect_ratios).
  for (const auto& [key, list] : spec->list_lengths) {
    const json* listed = ConfigReader::find_in(vision, list);
    if (listed == nullptr || listed->is_null()) continue;
    if (!listed->is_array() || listed->empty()) reader.fail("vision_config." + list, "expected a non-empty list", shown(*listed));
    tower.values[key] = static_cast<double>(listed->size());
  }
  for (const auto& [key, value] : spec->defaults) {
    const size_t eq = key.find('=');
    if (eq == std::string::npos) tower.values.emplace(key, value);
    else if (strings.count(key.substr(0, eq)) == 0) tower.values.emplace(key, value);
  }
  for (const char* key : {"image_size", "patch_size"}) {
    auto it = tower.values.find(key);
    if (it != tower.values.end()) tower.values.emplace(std::string(key) + "_1", it->second);
  }
  // MllamaVisionConfig.validate_architecture (a @strict validator): "max_num_tiles must be 4 for
  // default supported aspect ratios".
  if (tower_type == "mllama_vision_model" && ConfigReader::find_in(vision, "supported_aspect_ratios") == nullptr &&
      tower.values["max_num_tiles"] != 4) {
    reader.fail("vision_config.max_num_tiles", "expected 4 with the default supported_aspect_ratios (MllamaVisionConfig)",
                shown(json(tower.values["max_num_tiles"])));
  }
  auto required = [&](const char* key) {
    auto it = tower.values.find(key);
    const std::string name = std::string("vision_config.") + key;
    if (it == tower.values.end()) reader.fail(name, "missing; expected a positive integer");
    if (!(it->second > 0) || it->second != static_cast<double>(static_cast<int64_t>(it->second))) {
      reader.fail(name, "expected a positive integer", shown(json(it->second)));
    }
    return static_cast<int>(it->second);
  };
  tower.depth = required("num_hidden_layers");
  if (!spec->global_depth_key.empty()) required(spec->global_depth_key.c_str());
  for (const auto& [key, list] : spec->list_lengths) required(key.c_str());
  tower.hidden_size = required("hidden_size");
  tower.intermediate_size = required("intermediate_size");
  tower.num_heads = required("num_attention_heads");
  tower.in_channels = required("num_channels");
  tower.patch_size = required("patch_size");
  // CLIPVisionEmbeddings / SiglipVisionEmbeddings: num_patches = (image_size // patch_size) ** 2;
  // InternVLVisionPatchEmbeddings: (image_size[1] // patch_size[1]) * (image_size[0] // patch_size[0]).
  if (spec->num_patches_from_config) {
    required("num_patches");
  } else if (tower.values.count("image_size") != 0 ||
             (spec->layout != VisionLayout::Qwen25VL && spec->layout != VisionLayout::Qwen2VL)) {
    // (A tower of a Qwen-VL layout without image_size, EXAONE 4.5's or Kimi-K2.5's, reads images of
    // any size: no table of (image_size // patch_size)^2 positions, nothing reads num_patches.)
    const int64_t rows = required("image_size") / tower.patch_size;
    const int64_t columns = required("image_size_1") / required("patch_size_1");
    tower.values["num_patches"] = static_cast<double>(rows * columns);
  }
  if (tower.hidden_size % tower.num_heads != 0) {
    reader.fail("vision_config.num_attention_heads",
                "expected a divisor of vision_config.hidden_size " + std::to_string(tower.hidden_size),
                std::to_string(tower.num_heads));
  }
  // Every tower's attention splits hidden_size into num_heads heads (GlmOcrVisionAttention's q_norm /
  // k_norm are RMSNorms over that head_dim).
  tower.values.emplace("head_dim", static_cast<double>(tower.hidden_size / tower.num_heads));
  // Idefics2Config.perceiver_config: its numeric keys as "perceiver_<key>", over the defaults below.
  if (!model.sub_config.empty()) {
    const std::string prefix = model.sub_config.substr(0, model.sub_config.find("_config")) + "_";
    const json* sub = ConfigReader::find_in(root, model.sub_config);
    if (sub != nullptr && !sub->is_null() && !sub->is_object()) reader.fail(model.sub_config, "expected an object", shown(*sub));
    if (sub != nullptr && sub->is_object()) {
      for (auto it = sub->begin(); it != sub->end(); ++it) {
        if (it->is_number()) config.values[prefix + it.key()] = it->get<double>();
      }
    }
  }
  // AriaConfig.__post_init__: max_value_projector_patch_to_query_dict = max(projector_patch_to_query_dict
  // .values()), recomputed from the dict (the default {1225: 128, 4900: 256} without one) whatever a
  // saved config.json says; it sizes AriaProjector.query.
  if (model.model_type == "aria") {
    const std::string key = "projector_patch_to_query_dict";
    double most = 256;
    if (const json* dict = ConfigReader::find_in(root, key); dict != nullptr && !dict->is_null()) {
      if (!dict->is_object() || dict->empty()) reader.fail(key, "expected an object of patch count -> query count", shown(*dict));
      most = 0;
      for (auto it = dict->begin(); it != dict->end(); ++it) {
        if (!it->is_number_integer() || it->get<int64_t>() < 1) reader.fail(key + "." + it.key(), "expected a positive integer", shown(*it));
        most = std::max(most, it->get<double>());
      }
    }
    config.values["max_value_" + key] = most;
  }
  for (const auto& [key, value] : model.defaults) config.values.emplace(key, value);
  for (const auto& [key, value] : tower.values) config.values["vision_" + key] = value;
  // The composite config's own numeric keys as "model_<key>", where the text config's shadow them in
  // the values (Ovis2Config.hidden_size sizes visual_embeddings_table whatever the text config says).
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it->is_number()) config.values["model_" + it.key()] = it->get<double>();
  }
  // Idefics2PerceiverConfig.validate_architecture (a @strict validator).
  if (model.sub_config == "perceiver_config" &&
      config.values["perceiver_num_key_value_heads"] > config.values["perceiver_resampler_n_heads"]) {
    reader.fail("perceiver_config.num_key_value_heads", "expected at most perceiver_config.resampler_n_heads (Idefics2PerceiverConfig)",
                shown(json(config.values["perceiver_num_key_value_heads"])));
  }
  for (const VisionLanguageSpec::DerivedKey& derived : model.derived) {
    // int(1 / downsample_ratio) (InternVLMultiModalProjector), alignment_intermediate_size // 2
    // (Cohere2VisionMultiModalProjector), Gemma3MultiModalProjector's pooling kernel.
    const auto it = config.values.find(derived.from);
    const double base = it == config.values.end() ? 0 : std::pow(it->second, derived.exponent);
    double value = it == config.values.end() ? 0 : (derived.invert ? derived.factor / base : base * derived.factor);
    if (it == config.values.end() || !(it->second > 0) || !(value >= 1)) {
      reader.fail(derived.from, derived.invert ? "expected a number in (0, 1]" : "expected a positive number",
                  it == config.values.end() ? "" : shown(json(it->second)));
    }
    value = static_cast<double>(static_cast<int64_t>(value));
    if (!derived.divide_by.empty()) {
      // A quotient of 0 is what the class computes too (Gemma3Config's defaults: SigLIP's 224 / 16 =
      // 14 patches per side, 16 tokens per side): it builds, only its forward cannot pool.
      const auto by = config.values.find(derived.divide_by);
      if (by == config.values.end() || !(by->second >= 1)) {
        reader.fail(derived.divide_by, "expected a positive integer", by == config.values.end() ? "" : shown(json(by->second)));
      }
      value = static_cast<double>(static_cast<int64_t>(value) / static_cast<int64_t>(by->second));
    }
    config.values[derived.key] = value;
  }
  // PreTrainedModel.tie_weights reads the composite model's own config (modeling_utils.py:
  // getattr(self.config, "tie_word_embeddings")), not its text config: LlavaConfig's default False,
  // Gemma3Config's, Mistral3Config's and InternVLConfig's True.
  const json* popped_tie = model.popped_tie_key.empty() ? nullptr : ConfigReader::find_in(root, model.popped_tie_key);
  if (popped_tie != nullptr && !popped_tie->is_boolean()) reader.fail(model.popped_tie_key, "expected true or false", shown(*popped_tie));
  const json* top_tie = popped_tie != nullptr ? popped_tie : ConfigReader::find_in(root, "tie_word_embeddings");
  const bool has_top_tie = top_tie != nullptr && top_tie->is_boolean();
  if (has_top_tie) {
    config.tie_word_embeddings = top_tie->get<bool>();
  } else if (auto it = model.defaults.find("tie_word_embeddings"); it != model.defaults.end()) {
    config.tie_word_embeddings = it->second != 0;
  }
  if ((model.tie_from_text && !config.tie_word_embeddings) || (model.tie_default_from_text && !has_top_tie)) {
    // The text config's own value, or its class's default.
    bool text_tie = false;
    const json* text_tie_key = reader.has_text_config() ? ConfigReader::find_in(root["text_config"], "tie_word_embeddings") : nullptr;
    if (text_tie_key != nullptr && text_tie_key->is_boolean()) {
      text_tie = text_tie_key->get<bool>();
    } else if (const ArchitectureSpec* decoder = find_architecture(config.decoder_type)) {
      auto it = decoder->defaults.find("tie_word_embeddings");
      text_tie = it != decoder->defaults.end() && it->second != 0;
    }
    config.tie_word_embeddings = text_tie;
  }
  if (model.never_tied) config.tie_word_embeddings = false;
  // Ovis2ForConditionalGeneration.lm_head is nn.Linear(Ovis2Config.hidden_size, Ovis2Config.vocab_size):
  // the text embeddings' shape only when tied; hookstream builds the head from the text config.
  if (model.model_type == "ovis2" && !config.tie_word_embeddings) {
    for (const char* key : {"hidden_size", "vocab_size"}) {
      const json* top = ConfigReader::find_in(root, key);
      if (top != nullptr && top->is_number() && top->get<double>() != config.values[key]) {
        reader.fail(key, std::string("expected the text config's ") + key + " " + std::to_string(static_cast<int64_t>(config.values[key])) +
                             " when tie_word_embeddings is false (Ovis2ForConditionalGeneration.lm_head reads the top-level key)",
                    shown(*top));
      }
    }
  }
  tower.out_hidden_size = config.hidden_size;
  // At least 1: a pooling kernel of 0 (a config whose forward cannot pool, see above) is costed
  // as one patch per token; the structure is what such a config is good for.
  const auto merge_key = config.values.find(model.merge);
  tower.spatial_merge_size = model.merge.empty() || (merge_key != config.values.end() && merge_key->second < 1)
                                 ? 1
                                 : static_cast<int>(evaluate_shape(model.merge, config.values, config.source).at(0));
  int feature_layers = 1;
  bool last_hidden_state = model.features == VisionFeatures::LastHiddenState;
  if (model.features == VisionFeatures::LastOrHiddenStates) {
    const json* layer = ConfigReader::find_in(root, model.feature_layer_key);
    const double fallback = config.values.count(model.feature_layer_key) ? config.values[model.feature_layer_key] : -1;
    last_hidden_state = layer == nullptr || layer->is_null() ? fallback == -1 : (layer->is_number() && layer->get<double>() == -1);
  }
  if (!last_hidden_state) {
    // get_image_features: hidden_states[vision_feature_layer], an int or a list (concatenated).
    const std::string key = model.feature_layer_key;
    const json* layer = ConfigReader::find_in(root, key);
    std::vector<json> indices;
    if (layer == nullptr || layer->is_null()) {
      if (!model.default_feature_layers.empty()) indices.assign(model.default_feature_layers.begin(), model.default_feature_layers.end());
      else indices.push_back(json(config.values.count(key) ? config.values[key] : -1));
    }
    else if (layer->is_array()) indices.assign(layer->begin(), layer->end());
    else indices.push_back(*layer);
    const std::string expected = "expected a hidden_states index in [-" + std::to_string(tower.depth + 1) + ", " +
                                 std::to_string(tower.depth) + "] or a list of them";
    if (indices.empty()) reader.fail(key, expected, shown(*layer));
    for (const json& index : indices) {
      if (!index.is_number() || index.get<double>() != static_cast<double>(static_cast<int64_t>(index.get<double>()))) {
        reader.fail(key, expected, shown(index));
      }
      int64_t at = static_cast<int64_t>(index.get<double>());
      if (at < 0) at += tower.depth + 1;
      if (at < 0 || at > tower.depth) reader.fail(key, expected, shown(index));
      tower.feature_layers.push_back(static_cast<int>(at));
    }
    feature_layers = static_cast<int>(indices.size());
  }
  config.values["num_feature_layers"] = feature_layers;
  return tower;
}

// A hybrid decoder's per-layer types (token_mixer.h LayerTypesRule), as "layer_types.<i>=<type>"
// values the structure builder reads per layer: the config's list with legacy names remapped, or the
// config class's interval pattern when the list is absent.
// The layer types a NemotronH-style config spells as a list (layer_types / layers_block_type), as
// its hybrid_override_pattern string, or not at all (LayerTypesRule::default_types); empty when none
// of the three applies. NemotronHConfig.__post_init__: the list wins, then the pattern.
std::vector<std::string> listed_or_pattern_types(const ConfigReader& reader, const LayerTypesRule& rule) {
  std::vector<std::string> types;
  for (const char* key : {"layer_types", "layers_block_type"}) {
    std::string dotted;
    const json* list = reader.find(key, &dotted);
    if (list == nullptr || list->is_null()) continue;
    if (!list->is_array()) reader.fail(dotted, "expected a list of layer types", shown(*list));
    for (const json& type : *list) {
      if (!type.is_string()) reader.fail(dotted, "expected a list of layer types", shown(type));
      types.push_back(type.get<std::string>());
    }
    return types;
  }
  if (rule.pattern_key.empty()) return types;
  std::string dotted;
  if (const json* pattern = reader.find(rule.pattern_key, &dotted); pattern != nullptr && !pattern->is_null()) {
    std::string chars;
    for (const auto& [c, type] : rule.pattern) chars += c;
    if (!pattern->is_string()) reader.fail(dotted, "expected a string of " + chars + " (one per layer)", shown(*pattern));
    for (const char c : pattern->get<std::string>()) {
      auto it = std::find_if(rule.pattern.begin(), rule.pattern.end(), [&](const auto& entry) { return entry.first == c; });
      if (it == rule.pattern.end()) reader.fail(dotted, "expected a string of " + chars + " (one per layer)", shown(*pattern));
      types.push_back(it->second);
    }
    return types;
  }
  return rule.default_types;
}

// num_hidden_layers of a config whose class counts its layers from the layer types
// (LayerTypesRule::count_layers; NemotronHConfig.num_hidden_layers ignores the file's value).
int hybrid_layer_count(const ConfigReader& reader, const LayerTypesRule& rule) {
  const std::vector<std::string> types = listed_or_pattern_types(reader, rule);
  if (types.empty()) reader.fail("layers_block_type", "expected a non-empty list of layer types (its length is num_hidden_layers)");
  return static_cast<int>(types.size());
}

// PreTrainedConfig.validate_layer_type (transformers 5.17 configuration_utils.py, a @strict
// validator every config class runs after __post_init__; NemotronHConfig has its own, hence
// `count_layers` types are left to read_hybrid_layer_types): `layer_types` entries must be in
// ALLOWED_ATTN_LAYER_TYPES and number num_hidden_layers; then `mlp_layer_types` the same with
// ALLOWED_MLP_LAYER_TYPES. Without layer_types the validator returns before mlp_layer_types.
// Custom code (a config.json with auto_map AutoConfig) gets its legacy names remapped first
// (remap_legacy_layer_types) and may define its own: entries are not checked there. Classes that
// remap in their own __post_init__ (ArchitectureSpec::remaps_legacy_layer_types) get the remap.
void validate_layer_types(const ConfigReader& reader, const json& root, const ArchitectureSpec& spec, const ModelConfig& config) {
  if (spec.layer_types.count_layers) return;
  static const char* const kAttention[] = {"full_attention", "sliding_attention", "chunked_attention", "window_attention",
                                           "compressed_sparse_attention", "heavily_compressed_attention",
                                           "minimax_m3_sparse", "conv", "moe", "hybrid", "hybrid_sliding",
                                           "deepseek_sparse_attention", "qwen_sparse_attention", "linear_attention"};
  static const char* const kDefaultMlp[] = {"sparse", "dense"};
  std::vector<const char*> own_mlp;
  for (const std::string& name : spec.mlp_layer_types_allowed) own_mlp.push_back(name.c_str());
  const char* const* kMlp = own_mlp.empty() ? kDefaultMlp : own_mlp.data();
  const size_t mlp_count = own_mlp.empty() ? std::size(kDefaultMlp) : own_mlp.size();
  // DeepseekV4Config.__post_init__ cuts layer_types / mlp_layer_types to num_hidden_layers before
  // its validate_layer_type compares their lengths: only a shorter list fails there.
  const bool cuts_lists = !own_mlp.empty();
  const json* auto_map = ConfigReader::find_in(root, "auto_map");
  const bool custom_config = auto_map != nullptr && auto_map->is_object() && auto_map->contains("AutoConfig");
  auto check = [&](const char* key, const char* const* allowed, size_t count) {
    std::string dotted;
    const json* list = reader.find(key, &dotted);
    if (list == nullptr) return false;
    if (!list->is_array()) reader.fail(dotted, "expected a list with one entry per layer", shown(*list));
    std::string names;
    for (size_t k = 0; k < count; ++k) names += std::string(k ? ", " : "") + "\"" + allowed[k] + "\"";
    for (size_t i = 0; i < list->size() && !custom_config; ++i) {
      const json& entry = (*list)[i];
      std::string name = entry.is_string() ? entry.get<std::string>() : "";
      if (spec.remaps_legacy_layer_types && allowed == kAttention) {
        if (name == "mamba" || name == "conv") name = "linear_attention";
        else if (name == "attention") name = "full_attention";
      }
      const bool ok = entry.is_string() && std::find(allowed, allowed + count, name) != allowed + count;
      if (!ok) reader.fail(dotted + "." + std::to_string(i), "expected one of " + names + " (transformers' validate_layer_type)", shown(entry));
    }
    if (static_cast<int>(list->size()) != config.num_hidden_layers &&
        !(cuts_lists && static_cast<int>(list->size()) > config.num_hidden_layers)) {
      reader.fail(dotted, "expected one entry per layer (num_hidden_layers " + std::to_string(config.num_hidden_layers) +
                              "; transformers' validate_layer_type)",
                  std::to_string(list->size()) + " entries");
    }
    return true;
  };
  if (check("layer_types", kAttention, std::size(kAttention))) check("mlp_layer_types", kMlp, mlp_count);
}

void read_hybrid_layer_types(const ConfigReader& reader, const ArchitectureSpec& spec, ModelConfig& config) {
  const LayerTypesRule& rule = spec.layer_types;
  std::vector<std::string> types;
  for (auto v = config.values.lower_bound("layer_types."); v != config.values.end() && v->first.rfind("layer_types.", 0) == 0;) {
    const std::string entry = v->first.substr(12);
    const size_t eq = entry.find('=');
    const size_t index = static_cast<size_t>(std::stoul(entry.substr(0, eq)));
    if (types.size() <= index) types.resize(index + 1);
    types[index] = entry.substr(eq + 1);
    v = config.values.erase(v);
  }
  // GraniteMoeHybridConfig.attribute_map: a config.json may spell the list layers_block_type.
  if (types.empty()) {
    std::string dotted;
    if (const json* list = reader.find("layers_block_type", &dotted); list != nullptr && !list->is_null()) {
      if (!list->is_array()) reader.fail(dotted, "expected a list of layer types", shown(*list));
      for (const json& type : *list) {
        if (!type.is_string()) reader.fail(dotted, "expected a list of layer types", shown(type));
        types.push_back(type.get<std::string>());
      }
    }
  }
  if (types.empty() && rule.count_layers) types = listed_or_pattern_types(reader, rule);
  // KimiLinearConfig.__post_init__: without layer_types, linear_attn_config's 1-indexed
  // full_attn_layers and kda_layers (both present) name each layer's type; without them, layer i is
  // full attention when i is non-zero and a multiple of 4.
  if (types.empty() && spec.model_type == "kimi_linear") {
    std::string dotted;
    const json* nested = reader.find("linear_attn_config", &dotted);
    const bool listed = nested != nullptr && nested->is_object() && nested->contains("full_attn_layers") && nested->contains("kda_layers");
    if (listed) {
      std::vector<std::string> by_layer(static_cast<size_t>(config.num_hidden_layers));
      for (const auto& [list_key, type] : {std::pair<std::string, std::string>{"full_attn_layers", "full_attention"},
                                           std::pair<std::string, std::string>{"kda_layers", "linear_attention"}}) {
        const json& list = (*nested)[list_key];
        const std::string where = dotted + "." + list_key;
        if (!list.is_array()) reader.fail(where, "expected a list of 1-indexed layer numbers", shown(list));
        for (const json& layer : list) {
          if (!layer.is_number_integer() || layer.get<int>() < 1 || layer.get<int>() > config.num_hidden_layers) {
            reader.fail(where, "expected 1-indexed layer numbers from 1 to num_hidden_layers " + std::to_string(config.num_hidden_layers),
                        shown(layer));
          }
          by_layer[static_cast<size_t>(layer.get<int>() - 1)] = type;
        }
      }
      for (size_t i = 0; i < by_layer.size(); ++i) {
        // transformers leaves such a layer's type None: built as KDA, then no attention mask for it.
        if (by_layer[i].empty()) {
          reader.fail(dotted, "expected layer " + std::to_string(i + 1) + " in full_attn_layers or kda_layers (1-indexed)");
        }
      }
      types = by_layer;
    } else {
      for (int i = 0; i < config.num_hidden_layers; ++i) types.push_back(i != 0 && i % 4 == 0 ? rule.every : rule.other);
    }
  }
  if (types.empty() && rule.required) {
    reader.fail("layer_types", "missing; expected one entry per layer (num_hidden_layers " + std::to_string(config.num_hidden_layers) +
                                   "): " + spec.model_type + "'s config class has no default, and its decoder layers index it "
                                   "(transformers: TypeError: 'NoneType' object is not subscriptable)");
  }
  if (types.empty() && !rule.indices_key.empty()) {
    std::string dotted;
    std::set<int> every;
    const json* listed = reader.find(rule.indices_key, &dotted);
    if (listed != nullptr && listed->is_null()) listed = nullptr;
    if (listed == nullptr) every.insert(rule.default_indices.begin(), rule.default_indices.end());
    if (const json* list = listed) {
      if (!list->is_array()) reader.fail(dotted, "expected a list of layer indices", shown(*list));
      for (const json& index : *list) {
        if (!index.is_number_integer()) reader.fail(dotted, "expected a list of layer indices", shown(index));
        every.insert(index.get<int>());
      }
    }
    for (int i = 0; i < config.num_hidden_layers; ++i) {
      types.push_back(every.count(i) || (listed == nullptr && rule.every_without_indices) ? rule.every : rule.other);
    }
  }
  if (types.empty() && rule.interval_key.empty() && rule.interval_default == 0) {
    types.assign(static_cast<size_t>(config.num_hidden_layers), rule.other);
  }
  if (types.empty()) {
    // No interval key: the class's fixed interval (MiniMaxConfig: every second layer).
    auto it = rule.interval_key.empty() ? config.values.end() : config.values.find(rule.interval_key);
    const double interval = it == config.values.end() ? rule.interval_default : it->second;
    if (!(interval >= 1) || interval != static_cast<int>(interval)) {
      reader.fail(rule.interval_key, "expected a positive integer", std::to_string(interval));
    }
    for (int i = 0; i < config.num_hidden_layers; ++i) {
      types.push_back((i + 1) % static_cast<int>(interval) != 0 ? rule.other : rule.every);
    }
    // OlmoHybridConfig.__post_init__: "Ensure at least one full attention layer for small
    // num_hidden_layers": the last layer when the pattern gave none.
    if (spec.model_type == "olmo_hybrid" && !types.empty() && std::find(types.begin(), types.end(), rule.every) == types.end()) {
      types.back() = rule.every;
    }
  }
  static const std::map<std::string, std::string> legacy = {
      {"conv", "linear_attention"}, {"mamba", "linear_attention"}, {"attention", "full_attention"}};
  std::string known;
  for (const std::string& type : rule.known) known += (known.empty() ? "\"" : ", \"") + type + "\"";
  if (static_cast<int>(types.size()) < config.num_hidden_layers) {
    reader.fail("layer_types", "expected one entry per layer (num_hidden_layers " + std::to_string(config.num_hidden_layers) +
                                   "), each one of " + known,
                std::to_string(types.size()) + " entries");
  }
  for (size_t i = 0; i < types.size(); ++i) {
    if (auto l = legacy.find(types[i]); l != legacy.end()) types[i] = l->second;
    if (static_cast<int>(i) < config.num_hidden_layers &&
        std::find(rule.known.begin(), rule.known.end(), types[i]) == rule.known.end()) {
      reader.fail("layer_types." + std::to_string(i), "expected one of " + known + " (the layer types " + spec.model_type +
                                                          " builds)", shown(json(types[i])));
    }
    config.values["layer_types." + std::to_string(i) + "=" + types[i]] = 1;
  }
}

VisionTowerConfig parse_vision(const ConfigReader& reader, const json& vision, int text_hidden) {
  auto fail = [&](const std::string& key, const std::string& expected, const json* got) {
    reader.fail("vision_config." + key, expected, got ? shown(*got) : "");
  };
  auto get_int = [&](std::initializer_list<const char*> keys, std::optional<int> fallback) -> int {
    for (const char* key : keys) {
      if (const json* value = ConfigReader::find_in(vision, key)) {
        return reader.to_positive_int(*value, std::string("vision_config.") + key);
      }
    }
    if (!fallback) fail(*keys.begin(), "missing; expected a positive integer", nullptr);
    return *fallback;
  };

  VisionTowerConfig tower;
  tower.depth = get_int({"depth", "num_hidden_layers"}, std::nullopt);
  // Qwen2-VL spells the ViT width `embed_dim` and uses `hidden_size` for the merger's output
  // (the text width); Qwen2.5-VL / Qwen3-VL spell the width `hidden_size` and the output
  // `out_hidden_size`.
  const bool has_embed_dim = ConfigReader::find_in(vision, "embed_dim") != nullptr;
  if (has_embed_dim) {
    tower.hidden_size = get_int({"embed_dim"}, std::nullopt);
    tower.out_hidden_size = get_int({"out_hidden_size", "hidden_size"}, text_hidden);
  } else {
    tower.hidden_size = get_int({"hidden_size"}, std::nullopt);
    tower.out_hidden_size = get_int({"out_hidden_size"}, text_hidden);
  }
  if (ConfigReader::find_in(vision, "intermediate_size") == nullptr &&
      ConfigReader::find_in(vision, "mlp_ratio") != nullptr) {
    const json& ratio = vision["mlp_ratio"];
    if (!ratio.is_number() || ratio.get<double>() <= 0) fail("mlp_ratio", "expected a positive number", &ratio);
    tower.intermediate_size = static_cast<int>(tower.hidden_size * ratio.get<double>());
  } else {
    tower.intermediate_size = get_int({"intermediate_size"}, std::nullopt);
  }
  tower.num_heads = get_int({"num_heads", "num_attention_heads"}, std::nullopt);
  tower.in_channels = get_int({"in_channels", "in_chans"}, 3);
  tower.patch_size = get_int({"patch_size"}, 14);
  tower.temporal_patch_size = get_int({"temporal_patch_size"}, 1);
  tower.spatial_merge_size = get_int({"spatial_merge_size"}, 1);
  if (ConfigReader::find_in(vision, "num_position_embeddings") != nullptr) {
    tower.num_position_embeddings = get_int({"num_position_embeddings"}, std::nullopt);
  }
  if (const json* indexes = ConfigReader::find_in(vision, "deepstack_visual_indexes")) {
    const std::string expected = "expected a list of block indices in [0, " + std::to_string(tower.depth) + ")";
    if (!indexes->is_array()) fail("deepstack_visual_indexes", expected, indexes);
    for (const json& index : *indexes) {
      if (!index.is_number_integer() || index.get<std::int64_t>() < 0 || index.get<std::int64_t>() >= tower.depth) {
        fail("deepstack_visual_indexes", expected, &index);
      }
      tower.deepstack_visual_indexes.push_back(index.get<int>());
    }
  }
  if (tower.hidden_size % tower.num_heads != 0) {
    reader.fail("vision_config.num_heads",
                "expected a divisor of vision_config hidden size " + std::to_string(tower.hidden_size),
                std::to_string(tower.num_heads));
  }
  return tower;
}


// Hugging Face ids and spellings that name a bundled preset under a different file name.
// Keys are lower case, after the organisation prefix and ".json" were removed.
const std::vector<std::pair<std::string, std::string>>& preset_aliases() {
  static const std::vector<std::pair<std::string, std::string>> aliases = {
      {"llama3.1-8b", "Llama-3.1-8B"},
      {"llama-3-1-8b", "Llama-3.1-8B"},
      {"llama3.1-70b", "Llama-3.1-70B"},
      {"llama-3-1-70b", "Llama-3.1-70B"},
      {"qwen2.5-7b", "Qwen2.5-7B"},
      {"qwen2-5-7b", "Qwen2.5-7B"},
      {"qwen3-vl-4b", "Qwen3-VL-4B"},
      {"qwen3vl-4b", "Qwen3-VL-4B"},
  };
  return aliases;
}

// The spellings to try for `name`, most literal first: as given, without the HF organisation,
// without "Meta-" (Meta-Llama-3.1-8B is the old repo name of Llama-3.1-8B) and without
// "-Instruct" (instruction-tuned checkpoints share the base model's architecture).
std::vector<std::string> preset_candidates(std::string name) {
  if (ends_with(lowercase(name), ".json")) name.resize(name.size() - 5);
  std::vector<std::string> candidates = {name};
  const auto slash = name.rfind('/');
  if (slash != std::string::npos && name.find('/') == slash) name = name.substr(slash + 1);
  candidates.push_back(name);
  if (starts_with(lowercase(name), "meta-")) name = name.substr(5);
  candidates.push_back(name);
  if (ends_with(lowercase(name), "-instruct")) name.resize(name.size() - 9);
  candidates.push_back(name);
  for (const auto& [alias, preset] : preset_aliases()) {
    if (alias == lowercase(name)) candidates.push_back(preset);
  }
  return candidates;
}

// transformers' rope_config_validation (modeling_rope_utils.py): "rope_type", or the older "type";
// the keys each type it computes needs (hookstream run computes default, linear and llama3).
void read_rope_scaling(const ConfigReader& reader, ModelConfig& config) {
  std::string dotted;
  const json* scaling = reader.find("rope_scaling", &dotted);
  if (scaling == nullptr) return;
  if (!scaling->is_object()) reader.fail(dotted, "expected an object or null", shown(*scaling));
  std::string type = reader.optional_string(*scaling, "rope_type", dotted + ".rope_type");
  if (type.empty()) type = reader.optional_string(*scaling, "type", dotted + ".type");
  if (type.empty() || type == "mrope") type = "default";  // Qwen2-VL wrote "type": "mrope"
  auto number = [&](const char* key, bool required, double fallback) {
    const json* value = ConfigReader::find_in(*scaling, key);
    const std::string name = dotted + "." + key;
    if (value == nullptr) {
      if (required) reader.fail(name, "missing; rope_type " + type + " needs it");
      return fallback;
    }
    if (!value->is_number() || !(value->get<double>() > 0)) reader.fail(name, "expected a positive number", shown(*value));
    return value->get<double>();
  };
  if (type == "default") {
  } else if (type == "linear") {
    config.rope_factor = number("factor", true, 1.0);
  } else if (type == "llama3") {
    config.rope_factor = number("factor", true, 1.0);
    config.rope_low_freq_factor = number("low_freq_factor", true, 1.0);
    config.rope_high_freq_factor = number("high_freq_factor", true, 4.0);
    config.rope_original_max_position_embeddings = number("original_max_position_embeddings", true, 8192);
    if (!(config.rope_high_freq_factor > config.rope_low_freq_factor)) {
      reader.fail(dotted + ".high_freq_factor", "expected more than low_freq_factor " + shown(json(config.rope_low_freq_factor)));
    }
  }
  // Other types (yarn, dynamic, longrope, ...) change no shape: the verifier takes them, and
  // hookstream run refuses them (runtime/train_model.cc check_runnable).
  config.rope_type = type;
}

}  // namespace

std::string to_string(DType dtype) {
  switch (dtype) {
    case DType::Float32: return "float32";
    case DType::BFloat16: return "bfloat16";
    case DType::Float16: return "float16";
  }
  return "unknown";
}

int dtype_bytes(DType dtype) { return dtype == DType::Float32 ? 4 : 2; }

const char* c10_scalar_type_name(DType dtype) {
  switch (dtype) {
    case DType::Float32: return "Float";
    case DType::Float16: return "Half";
    case DType::BFloat16: return "BFloat16";
  }
  return "Float";
}

ModelConfig parse_model_config(const std::string& json_text, const std::string& source) {
  json root = parse_input_json(json_text, source);
  if (!root.is_object()) throw InputError(source, "expected a JSON object (a Hugging Face config.json), got " + shown(root));

  const ConfigReader reader(root, source);
  ModelConfig config;
  config.source = source;
  config.model_type = reader.optional_string(root, "model_type", "model_type");
  if (const json* topk = ConfigReader::find_in(root, "topk_method"); topk != nullptr && topk->is_string()) {
    config.topk_method = topk->get<std::string>();
  }
  if (const json* architectures = ConfigReader::find_in(root, "architectures")) {
    if (!architectures->is_array() || (!architectures->empty() && !(*architectures)[0].is_string())) {
      reader.fail("architectures", "expected a list of class names", shown(*architectures));
    }
    if (!architectures->empty()) config.architecture = (*architectures)[0].get<std::string>();
  }
  // auto_map: the custom modelling code trust_remote_code loads (transformers
  // models/auto/auto_factory.py _BaseAutoModelClass.from_config: has_remote_code and
  // trust_remote_code -> get_class_from_dynamic_module). Its MoE experts are per-expert modules.
  if (const json* auto_map = ConfigReader::find_in(root, "auto_map")) {
    if (!auto_map->is_object()) reader.fail("auto_map", "expected an object of Auto class -> module.Class", shown(*auto_map));
    if (auto it = auto_map->find("AutoModelForCausalLM"); it != auto_map->end()) {
      // A string, or a [slow, fast] list in older configs; "repo--module.Class" names another repo.
      const json& entry = it->is_array() && !it->empty() ? (*it)[0] : *it;
      if (!entry.is_string()) reader.fail("auto_map", "expected AutoModelForCausalLM to name module.Class", shown(*it));
      config.remote_code_class = entry.get<std::string>();
    }
  }

  std::string decoder_type = config.model_type;
  if (reader.has_text_config()) {
    std::string nested = reader.optional_string(root["text_config"], "model_type", "text_config.model_type");
    if (!nested.empty()) decoder_type = nested;
    // transformers 4.5x's Glm4vMoeTextConfig.model_type was "Glm4vMoe_text" (v4.57.1
    // configuration_glm4v_moe.py), so GLM-4.5V config.json files it saved say so; Glm4vMoeConfig
    // builds its text_config with its own sub-config class whatever the name (5.17 too).
    if (config.model_type == "glm4v_moe" && decoder_type == "Glm4vMoe_text") decoder_type = "glm4v_moe_text";
    // Exaone4_5_Config.__post_init__: "EXAONE 4.5 first released with the text model type as
    // `exaone4_5_text`, now changed to `exaone4`" (its text config is built as exaone4).
    if (config.model_type == "exaone4_5" && decoder_type == "exaone4_5_text") decoder_type = "exaone4";
    // Kimi_K25Config.__post_init__: a remote config's text model_type "kimi_k2" is built as deepseek_v3.
    if (config.model_type == "kimi_k25" && decoder_type == "kimi_k2") decoder_type = "deepseek_v3";
  }
  // The architecture table is the list of model types hookstream models; anything else is refused
  // rather than modelled as a dense Llama. A config without model_type (hand-written) is a Llama.
  const ArchitectureSpec* spec = find_architecture(decoder_type.empty() ? "llama" : decoder_type);
  if (spec == nullptr) spec = find_architecture(config.model_type);
  if (spec == nullptr) spec = find_composite_decoder(config.model_type);
  if (spec == nullptr) {
    std::string known;
    for (const std::string& type : modelled_model_types()) known += (known.empty() ? "" : ", ") + type;
    reader.fail(decoder_type == config.model_type ? "model_type" : "text_config.model_type",
                "hookstream cannot model this architecture yet (it models " + known + ")", shown(json(decoder_type)));
  }
  // Keys the config class pops into others (ArchitectureSpec::popped_keys): the old key's value
  // replaces the key's in the object that holds it (text_config's, else the top level's), before
  // anything is read. Neither the reader's root nor its text_config pointer moves: an object's
  // members are nodes of a map.
  // An old key "object.key" is read inside a nested object (KimiLinearConfig:
  // linear_attn_config.get("head_dim", linear_head_dim)).
  for (const auto& [old_key, key] : spec->popped_keys) {
    const size_t dot = old_key.find('.');
    const std::string outer = old_key.substr(0, dot);
    json& holder = reader.has_text_config() && root["text_config"].contains(outer) ? root["text_config"] : root;
    auto it = holder.find(outer);
    if (it == holder.end()) continue;
    if (dot == std::string::npos) {
      holder[key] = *it;
    } else if (it->is_object()) {
      if (auto inner = it->find(old_key.substr(dot + 1)); inner != it->end()) holder[key] = *inner;
    }
  }
  // transformers' attribute_map: GPT-2 writes n_embd / n_layer / n_head for hidden_size /
  // num_hidden_layers / num_attention_heads (GPT2Config.attribute_map); the standard key wins.
  auto aliased_int = [&](const std::string& key) -> std::optional<int> {
    if (std::optional<int> value = reader.optional_positive_int(key)) return value;
    for (const auto& [alias, target] : spec->attribute_map) {
      if (target != key) continue;
      if (std::optional<int> value = reader.optional_positive_int(alias)) return value;
    }
    return std::nullopt;
  };
  auto required_int = [&](const std::string& key) {
    if (std::optional<int> value = aliased_int(key)) return *value;
    return reader.positive_int(key);  // throws, naming the standard key
  };
  config.hidden_size = required_int("hidden_size");
  if (spec->layer_types.count_layers) {
    config.num_hidden_layers = hybrid_layer_count(reader, spec->layer_types);
  } else if (!spec->layers_key.empty()) {
    // LongcatFlashModel: range(config.num_layers) layers, whatever num_hidden_layers says (it sets
    // that to 2 * num_layers itself).
    config.num_hidden_layers = reader.positive_int(spec->layers_key);
  } else {
    config.num_hidden_layers = required_int("num_hidden_layers");
  }
  // Keys given per layer as a list (Gemma3nTextConfig.__post_init__: intermediate_size is one
  // number, or a list of exactly num_hidden_layers): each entry held as per_layer_key(i, key), the
  // first as the key's value.
  std::map<std::string, double> per_layer_lists;
  for (const std::string& key : spec->per_layer_lists) {
    std::string dotted;
    const json* list = reader.find(key, &dotted);
    if (list == nullptr || !list->is_array()) continue;
    if (static_cast<int>(list->size()) != config.num_hidden_layers) {
      reader.fail(dotted, "expected one number, or one per layer (num_hidden_layers " + std::to_string(config.num_hidden_layers) + ")",
                  std::to_string(list->size()) + " entries");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      per_layer_lists[per_layer_key(static_cast<int>(i), key)] = reader.to_positive_int((*list)[i], dotted + "[" + std::to_string(i) + "]");
    }
    per_layer_lists[key] = per_layer_lists[per_layer_key(0, key)];
  }
  // Required unless every layer is MoE (below): SolarOpenConfig has no intermediate_size at all.
  const std::optional<int> intermediate_size =
      per_layer_lists.count("intermediate_size") ? std::optional<int>(static_cast<int>(per_layer_lists["intermediate_size"]))
                                                 : aliased_int("intermediate_size");
  if (!spec->num_attention_heads_from.empty()) {
    std::map<std::string, double> keys(spec->defaults.begin(), spec->defaults.end());
    for (const std::string& factor : {std::string("num_key_value_heads"), std::string("num_experts_per_tok")}) {
      if (std::optional<int> value = aliased_int(factor)) keys[factor] = *value;
    }
    config.num_attention_heads = static_cast<int>(evaluate_shape(spec->num_attention_heads_from, keys, source).at(0));
  } else {
    config.num_attention_heads = required_int("num_attention_heads");
  }
  // The class default where the table has one (JetMoeConfig: 16), else num_attention_heads (MHA).
  auto kv_default = spec->defaults.find("num_key_value_heads");
  config.num_key_value_heads = aliased_int("num_key_value_heads")
                                   .value_or(kv_default != spec->defaults.end() ? static_cast<int>(kv_default->second)
                                                                                : config.num_attention_heads);
  config.vocab_size = required_int("vocab_size");
  // nn.Embedding(vocab_size, H, padding_idx=pad_token_id) asserts unless -vocab_size <= pad_token_id
  // < vocab_size (torch/nn/modules/sparse.py; a negative index counts from the end), so transformers
  // cannot build such a model; its own validate_token_ids only warns. The decoder reads its own
  // config's pad_token_id: text_config's in a composite, never the outer one.
  if (spec->embedding_padding_idx) {
    const json* pad = ConfigReader::find_in(reader.has_text_config() ? root["text_config"] : root, "pad_token_id");
    if (pad != nullptr && pad->is_number_integer()) {
      const std::int64_t value = pad->get<std::int64_t>();
      // The embedding's rows: vocab_size, plus Mllama's 8 image-token rows (ArchitectureSpec::embed_extra_rows).
      const std::int64_t rows = config.vocab_size + spec->embed_extra_rows;
      if (value >= rows || value < -rows) {
        reader.fail(std::string(reader.has_text_config() ? "text_config." : "") + "pad_token_id",
                    "expected null or an index into the vocabulary (vocab_size " + std::to_string(config.vocab_size) +
                        (spec->embed_extra_rows ? " + " + std::to_string(spec->embed_extra_rows) + " embedding rows" : std::string()) +
                        "): " + spec->model_type + "'s nn.Embedding(padding_idx=pad_token_id) asserts \"Padding_idx must be within num_embeddings\"",
                    shown(*pad));
      }
    }
  }
  // transformers floors: LlamaAttention (and every decoder modelled after it) takes
  // getattr(config, "head_dim", hidden_size // num_attention_heads), so GLM-4-MoE's 4096 / 96 heads
  // is 96 heads of 42 (q_proj [4032, 4096]), not an error.
  // A config class with its own head_dim default (NemotronHConfig, LagunaConfig: 128) uses it when
  // the file has none.
  const auto head_dim_default = spec->defaults.find("head_dim");
  config.head_dim = aliased_int("head_dim").value_or(head_dim_default != spec->defaults.end()
                                                         ? static_cast<int>(head_dim_default->second)
                                                         : config.hidden_size / config.num_attention_heads);
  // The config classes whose validate_architecture (a @strict validator, transformers 5.17) raises
  // "The hidden size (H) is not a multiple of the number of attention heads (N)", even with an
  // explicit head_dim (LlamaConfig, Gemma2Config, Gemma3TextConfig, GPTNeoXConfig, ...: found by
  // reading validate_architecture of every class in CONFIG_MAPPING). Others (Mistral, Qwen3,
  // GLM-4-MoE, ...) floor or take head_dim, as the attention below does.
  static const std::set<std::string> kHeadsDivideHidden = {
      "arcee", "aria_text", "cwm", "deepseek_v2", "gemma2", "gemma3_text", "gemma3n_text", "gpt_neox",
      "hrm_text", "hyperclovax", "jais2", "llama", "minicpm3", "vaultgemma"};
  if (kHeadsDivideHidden.count(decoder_type) != 0 && config.hidden_size % config.num_attention_heads != 0) {
    reader.fail("num_attention_heads",
                "expected a divisor of hidden_size " + std::to_string(config.hidden_size) + " (" + decoder_type +
                    "'s config class refuses it in validate_architecture, head_dim or not)",
                std::to_string(config.num_attention_heads));
  }
  if (config.head_dim <= 0) {
    reader.fail("num_attention_heads",
                "expected at most hidden_size " + std::to_string(config.hidden_size) + " (or an explicit head_dim)",
                std::to_string(config.num_attention_heads));
  }
  if (config.num_attention_heads % config.num_key_value_heads != 0) {
    reader.fail("num_key_value_heads",
                "expected a divisor of num_attention_heads " + std::to_string(config.num_attention_heads),
                std::to_string(config.num_key_value_heads));
  }
  config.decoder_type = spec->model_type;
  // Numeric and boolean keys: top level first, text_config over it (get_text_config()). A key
  // written null is None in the config class (DeepseekV3Config q_lora_rank: null -> a plain q_proj),
  // so the class default must not fill it in.
  std::set<std::string> nulls;
  auto collect = [&](const json& object) {
    for (auto it = object.begin(); it != object.end(); ++it) {
      if (it->is_boolean()) config.values[it.key()] = it->get<bool>() ? 1 : 0;
      else if (it->is_number()) config.values[it.key()] = it->get<double>();
      // A string key becomes the flag "key=value" (the table's condition for Apertus's
      // `hidden_act: xielu`, whose activation has parameters).
      else if (it->is_string()) {
        // text_config's value replaces the top level's (get_text_config()).
        const std::string prefix = it.key() + "=";
        for (auto v = config.values.lower_bound(prefix); v != config.values.end() && v->first.rfind(prefix, 0) == 0;) {
          v = config.values.erase(v);
        }
        config.values[prefix + it->get<std::string>()] = 1;
      }
      // layer_types (a list of strings, one per layer): "layer_types.<i>=<type>", which the structure
      // builder turns into the layer's "layer_type=<type>" condition (MiMo-V2-Flash's sliding layers
      // have their own key/value widths and attention sinks).
      // indexer_types (GLM-MoE-DSA: which layers build a sparse-attention indexer) the same way.
      else if (it->is_array() && (it.key() == "layer_types" || it.key() == "indexer_types")) {
        const std::string prefix = it.key() + ".";
        for (auto v = config.values.lower_bound(prefix); v != config.values.end() && v->first.rfind(prefix, 0) == 0;) {
          v = config.values.erase(v);
        }
        for (size_t i = 0; i < it->size(); ++i) {
          if ((*it)[i].is_string()) config.values[prefix + std::to_string(i) + "=" + (*it)[i].get<std::string>()] = 1;
        }
      }
      // DeepseekV4Config's compress_rates ({layer type: rate}) as "compress_rates.<type>", and its
      // legacy compress_ratios (one rate per layer) as "compress_ratios.<i>", which its config rules read.
      else if (it->is_object() && it.key() == "compress_rates") {
        for (auto rate = it->begin(); rate != it->end(); ++rate) {
          if (!rate->is_number_integer()) reader.fail("compress_rates." + rate.key(), "expected an integer", shown(*rate));
          config.values["compress_rates." + rate.key()] = rate->get<double>();
        }
      } else if (it->is_array() && it.key() == "compress_ratios") {
        for (size_t i = 0; i < it->size(); ++i) {
          if (!(*it)[i].is_number_integer()) reader.fail("compress_ratios." + std::to_string(i), "expected an integer", shown((*it)[i]));
          config.values["compress_ratios." + std::to_string(i)] = (*it)[i].get<double>();
        }
      }
      // GlmMoeDsaConfig's index_topk_pattern as a list ("full"/"shared" per layer): read as its
      // string form ("F"/"S" per layer), which the config rules expand.
      else if (it->is_array() && it.key() == "index_topk_pattern") {
        std::string pattern;
        for (const json& entry : *it) {
          if (entry == "full" || entry == "F") pattern += 'F';
          else if (entry == "shared" || entry == "S") pattern += 'S';
          else reader.fail("index_topk_pattern", "expected \"full\" / \"shared\" per layer", shown(entry));
        }
        config.values["index_topk_pattern=" + pattern] = 1;
      }
      // per_layer_config ({layer index: {key: value}}, HeterogeneousConfigMixin): numeric overrides
      // held as per_layer_key(layer, key); the structure builder sets them in that layer's values.
      else if (it.key() == "per_layer_config" && it->is_object()) {
        read_per_layer_config(reader, *spec, *it, config.values);
      }
      if (it->is_null()) nulls.insert(it.key());
      else nulls.erase(it.key());
      if (it->is_null()) config.values.erase(it.key());
    }
  };
  collect(root);
  if (reader.has_text_config()) collect(root["text_config"]);
  for (const auto& [key, value] : per_layer_lists) config.values[key] = value;
  for (const auto& [alias, key] : spec->attribute_map) {
    auto it = config.values.find(alias);
    if (it != config.values.end()) config.values.emplace(key, it->second);
  }
  for (const auto& [key, value] : spec->defaults) {
    if (nulls.count(key) == 0) config.values.emplace(key, value);
  }
  validate_layer_types(reader, root, *spec, config);
  if (!spec->layer_types.known.empty()) read_hybrid_layer_types(reader, *spec, config);
  // Keys derived when absent or null (GPT2Block: inner_dim = n_inner or 4 * hidden_size). The
  // required keys read above go in first, under their standard names.
  config.values.emplace("hidden_size", config.hidden_size);
  config.values.emplace("num_attention_heads", config.num_attention_heads);
  for (const auto& [key, expression] : spec->derived) {
    if (config.values.count(key) == 0) config.values[key] = static_cast<double>(evaluate_shape(expression, config.values, source).at(0));
  }
  if (spec->config_rules != nullptr) spec->config_rules(config.values, config.num_hidden_layers, source);
  {
    std::string dotted;
    if (const json* only = reader.find("mlp_only_layers", &dotted)) {
      if (!only->is_array()) reader.fail(dotted, "expected a list of layer indices", shown(*only));
      for (const json& index : *only) {
        if (!index.is_number_integer()) reader.fail(dotted, "expected a list of layer indices", shown(index));
        config.mlp_only_layers.push_back(index.get<int>());
      }
    }
    if (const json* list = reader.find("moe_layers", &dotted); list != nullptr && !list->is_null()) {
      if (!list->is_array()) reader.fail(dotted, "expected a list of layer indices", shown(*list));
      config.moe_layers.emplace();
      for (const json& index : *list) {
        if (!index.is_number_integer()) reader.fail(dotted, "expected a list of layer indices", shown(index));
        config.moe_layers->push_back(index.get<int>());
      }
    }
    if (const json* types = reader.find("mlp_layer_types", &dotted)) {
      std::vector<std::string> allowed = spec->mlp_layer_types_allowed;
      if (allowed.empty()) allowed = {"dense", "sparse"};
      std::string names;
      for (const std::string& name : allowed) names += (names.empty() ? "\"" : " / \"") + name + "\"";
      if (!types->is_array()) reader.fail(dotted, "expected a list of " + names, shown(*types));
      for (const json& type : *types) {
        if (!type.is_string() || std::find(allowed.begin(), allowed.end(), type.get<std::string>()) == allowed.end()) {
          reader.fail(dotted, "expected a list of " + names, shown(type));
        }
        config.mlp_layer_types.push_back(type.get<std::string>());
      }
    }
  }
  if (intermediate_size) {
    config.intermediate_size = *intermediate_size;
  } else if (auto derived = config.values.find("intermediate_size"); derived != config.values.end() && derived->second > 0) {
    config.intermediate_size = static_cast<int>(derived->second);
  } else if (spec->moe == MoeLayers::All) {
    // No dense MLP anywhere: the width a token's MLP is costed at is one routed expert's.
    config.intermediate_size = static_cast<int>(evaluate_shape(spec->expert_width, config.values, source).at(0));
  } else {
    reader.fail("intermediate_size", "missing; expected a positive integer");
  }
  config.values["head_dim"] = config.head_dim;
  config.values["num_key_value_heads"] = config.num_key_value_heads;
  for (const std::string& flag : spec->unmodelled_flags) {
    if (evaluate_flag(flag, config.values)) {
      reader.fail(flag, "true adds modules hookstream does not model yet for " + spec->model_type + "; expected false");
    }
  }
  for (const std::string& key : spec->unread_keys) {
    std::string dotted;
    if (const json* found = reader.find(key, &dotted); found != nullptr && !found->is_null()) {
      reader.fail(dotted, "not read by hookstream yet for " + spec->model_type +
                              "; expected the per-layer lists the config class derives from it (layer_types, mlp_layer_types)",
                  shown(*found));
    }
  }
  config.tie_word_embeddings =
      reader.optional_bool("tie_word_embeddings").value_or(evaluate_flag("tie_word_embeddings", config.values));
  // A model class with no tied weights (_tied_weights_keys = {}) keeps lm_head apart whatever the key says.
  if (spec->never_tied) config.tie_word_embeddings = false;
  // The Qwen-VL composites tie by their own config (PreTrainedModel.tie_weights reads self.config):
  // Qwen3VLConfig, Qwen3VLMoeConfig, Qwen3_5Config and Qwen3_5MoeConfig default to False and ignore
  // the text config's value; Qwen2VLConfig and Qwen2_5_VLConfig forward a text config's true to it
  // (their __post_init__, "pre-v5 saves placed tie_word_embeddings inside text_config").
  if (vision_layout_of(config.model_type) && reader.has_text_config()) {
    const json* top = ConfigReader::find_in(root, "tie_word_embeddings");
    if (top != nullptr && !top->is_boolean()) reader.fail("tie_word_embeddings", "expected true or false", shown(*top));
    const bool forwards = config.model_type == "qwen2_vl" || config.model_type == "qwen2_5_vl";
    config.tie_word_embeddings = (top != nullptr && top->get<bool>()) || (forwards && config.tie_word_embeddings);
  }
  config.torch_dtype = parse_dtype(reader);
  config.rms_norm_eps = reader.optional_positive_number("rms_norm_eps").value_or(config.rms_norm_eps);
  config.rope_theta = reader.optional_positive_number("rope_theta").value_or(config.rope_theta);
  read_rope_scaling(reader, config);
  config.initializer_range = reader.optional_positive_number("initializer_range").value_or(config.initializer_range);

  config.attention_bias =
      has_qkv_bias_by_type(decoder_type) || reader.optional_bool("attention_bias").value_or(false);
  config.qk_norm = has_qk_norm_by_type(decoder_type) || has_qk_norm_by_type(config.model_type);

  // transformers >= 4.52 nests the decoder of *ForConditionalGeneration models under
  // `model.language_model` (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Llava...); a Qwen2-VL / Qwen2.5-VL
  // config.json from before text_config existed (decoder keys at the top level) is read into one by
  // Qwen2VLConfig / Qwen2_5_VLConfig and built the same way.
  if ((reader.has_text_config() && ends_with(config.architecture, "ForConditionalGeneration")) ||
      is_vision_language_type(config.model_type)) {
    config.text_prefix = "model.language_model";
  }
  // A composite type of the decoder (Gemma 4): Gemma4Model nests the decoder under
  // model.language_model and builds a tower only for a sub-config that is not null.
  if (std::find(spec->composite_types.begin(), spec->composite_types.end(), config.model_type) != spec->composite_types.end()) {
    config.text_prefix = "model.language_model";
    for (const std::string& key : spec->absent_sub_configs) {
      if (const json* sub = ConfigReader::find_in(root, key)) {
        reader.fail(key, "the " + key.substr(0, key.find('_')) + " tower of model_type \"" + config.model_type +
                             "\" is not modelled yet; expected null (hookstream models its text decoder " + spec->model_type + ")",
                    shown(*sub));
      }
    }
  }
  const VisionLanguageSpec* described = find_vision_language(config.model_type);
  if (described != nullptr && !described->text_prefix.empty()) config.text_prefix = described->text_prefix;
  const json* vision = ConfigReader::find_in(root, "vision_config");
  if (described != nullptr && (vision == nullptr || !vision->is_object())) {
    reader.fail("vision_config", "expected an object (the vision tower of model_type \"" + config.model_type + "\")",
                vision != nullptr ? shown(*vision) : "");
  }
  if (described != nullptr) {
    config.vision = parse_described_vision(reader, root, *described, *vision, config);
  } else if (vision != nullptr) {
    if (!vision->is_object()) reader.fail("vision_config", "expected an object", shown(*vision));
    // The vision tower modelled is Qwen-VL's (patch embedding, fused-qkv blocks, patch merger). A
    // composite type with another tower (Gemma 3's SigLIP, Llava's CLIP, ...) is refused rather than
    // given Qwen's tower.
    if (!config.model_type.empty() && !is_vision_language_type(config.model_type) &&
        find_architecture(config.model_type) == nullptr) {
      std::string known;
      for (const std::string& type : vision_language_model_types()) known += ", " + type;
      reader.fail("vision_config", "the vision tower of model_type \"" + config.model_type +
                                       "\" is not modelled yet (hookstream models the vision towers of qwen2_vl, qwen2_5_vl, qwen3_vl" +
                                       known + ")");
    }
    config.vision = parse_vision(reader, *vision, config.hidden_size);
    config.vision->layout = vision_layout_of(config.model_type).value_or(VisionLayout::Qwen3VL);
  }
  return config;
}

ModelConfig load_model_config(const std::string& path) {
  std::error_code ignored;
  if (std::filesystem::is_directory(path, ignored)) {
    throw InputError("", "cannot read " + path + ": " + std::strerror(EISDIR));
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) throw InputError("", "cannot read " + path + ": " + std::strerror(errno));
  std::ostringstream text;
  text << file.rdbuf();
  return parse_model_config(text.str(), path);
}

std::string preset_dir() { return data_dir() + "/presets"; }

std::vector<std::string> list_presets() { return list_data_files("presets", ".json"); }

std::optional<std::string> find_preset(const std::string& name) {
  if (name.empty()) return std::nullopt;
  const std::vector<std::string> presets = list_presets();
  for (const std::string& candidate : preset_candidates(name)) {
    for (const std::string& preset : presets) {
      if (lowercase(preset) == lowercase(candidate)) return preset_dir() + "/" + preset + ".json";
    }
  }
  return std::nullopt;
}

}  // namespace hookstream
