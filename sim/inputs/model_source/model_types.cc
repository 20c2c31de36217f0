#include "sim/inputs/model_source/model_types.h"

#include <algorithm>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

#include "sim/inputs/architectures/architecture.h"
#include "sim/inputs/closest_name.h"
#include "sim/inputs/architectures/vision_tower.h"
#include "sim/inputs/data_files.h"
#include "sim/inputs/input_error.h"

namespace hookstream {

bool is_modelled_model_type(const std::string& model_type) {
  // The architecture table (and the vision-language table beside it) is the one list of modelled types.
  return find_architecture(model_type) != nullptr || find_vision_language(model_type) != nullptr ||
         find_composite_decoder(model_type) != nullptr;
}

KnownModelTypes transformers_model_types() {
  const std::string path = data_dir() + "/model-types/transformers.txt";
  KnownModelTypes known;
  std::ifstream file(path);
  std::string line;
  while (std::getline(file, line)) {
    if (line.empty()) continue;
    if (line[0] == '#') {
      // "# transformers 5.17.0: ..." names the version the list was written from.
      if (known.version.empty() && line.rfind("# transformers ", 0) == 0) {
        known.version = line.substr(2, line.find(':') == std::string::npos ? std::string::npos : line.find(':') - 2);
      }
      continue;
    }
    known.types.push_back(line);
  }
  std::sort(known.types.begin(), known.types.end());
  return known;
}

void require_modelled_model_type(const ModelConfig& config) {
  require_modelled_model_type(config.model_type, config.source);
}

std::optional<std::string> peek_model_type(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return std::nullopt;
  const nlohmann::json root = nlohmann::json::parse(file, nullptr, /*allow_exceptions=*/false);
  if (!root.is_object()) return std::nullopt;
  auto it = root.find("model_type");
  if (it == root.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

namespace {
// "AutoModelForCausalLM: module.Class" from the auto_map of the config.json at `path` (the first Auto
// class a model is built with), nullopt without one.
std::optional<std::string> remote_code_class(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return std::nullopt;
  const nlohmann::json root = nlohmann::json::parse(file, nullptr, /*allow_exceptions=*/false);
  if (!root.is_object()) return std::nullopt;
  auto map = root.find("auto_map");
  if (map == root.end() || !map->is_object()) return std::nullopt;
  for (const char* auto_class : {"AutoModelForCausalLM", "AutoModelForImageTextToText", "AutoModel", "AutoConfig"}) {
    auto entry = map->find(auto_class);
    if (entry != map->end() && entry->is_string()) return std::string(auto_class) + ": " + entry->get<std::string>();
  }
  return std::nullopt;
}
}  // namespace

void require_modelled_model_type(const std::string& model_type, const std::string& source) {
  if (is_modelled_model_type(model_type)) return;
  std::string modelled;
  for (const std::string& type : modelled_model_types()) modelled += (modelled.empty() ? "" : ", ") + type;
  if (model_type.empty()) {
    // transformers' AutoConfig.from_pretrained raises for a config.json without model_type too
    // ("Unrecognized model ... Should have a `model_type` key in its config.json").
    throw InputError(source, "key \"model_type\": missing; expected the model type transformers "
                                    "names the architecture by (hookstream models: " + modelled + ")");
  }
  const KnownModelTypes known = transformers_model_types();
  if (std::binary_search(known.types.begin(), known.types.end(), model_type)) {
    const std::string who = known.version.empty() ? "transformers" : known.version;
    throw InputError(source, "key \"model_type\": " + who + " knows \"" + model_type +
                                        "\"; hookstream cannot model it yet (it models: " + modelled + ")");
  }
  // A type transformers does not ship whose config.json maps Auto classes to the repository's own
  // modules (Qwen-7B: "qwen", auto_map AutoModelForCausalLM -> modeling_qwen.QWenLMHeadModel) is
  // custom code, which transformers runs only with trust_remote_code (models/auto/auto_factory.py):
  // named as such, not as a misspelling.
  if (const std::optional<std::string> custom = remote_code_class(source)) {
    const std::string who = known.version.empty() ? "transformers" : known.version;
    throw InputError(source, "key \"model_type\": \"" + model_type + "\" is the model repository's own code (auto_map " + *custom +
                                 ", run by transformers only with trust_remote_code), not a type " + who +
                                 " ships; hookstream models these types: " + modelled);
  }
  std::string closest = closest_name(model_type, known.types);
  throw InputError(source, "key \"model_type\": unknown model type \"" + model_type + "\"" +
                                      (closest.empty() ? "" : " (closest known: \"" + closest + "\")") +
                                      "; expected one transformers knows (hookstream models: " + modelled + ")");
}

}  // namespace hookstream
