#include "sim/inputs/axolotl_config/axolotl_schema.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "sim/inputs/data_files.h"
#include "sim/inputs/input_error.h"
#include "sim/inputs/json_input.h"

namespace hookstream {

AxolotlSchema load_axolotl_schema(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw InputError(path, "cannot read axolotl's key list (set HOOKSTREAM_DATA_DIR to hookstream's data folder)");
  std::ostringstream text;
  text << file.rdbuf();
  const nlohmann::json document = parse_input_json(text.str(), path);
  AxolotlSchema schema;
  try {
    schema.version = document.at("axolotl").at("version").get<std::string>();
    schema.source = document.at("axolotl").at("source").get<std::string>();
    for (const nlohmann::json& entry : document.at("keys")) {
      const std::string key = entry.at("key").get<std::string>();
      const std::string effect = entry.at("hookstream").get<std::string>();
      if (effect == "modelled") schema.keys[key] = KeyEffect::Modelled;
      else if (effect == "not_modelled") schema.keys[key] = KeyEffect::NotModelled;
      else if (effect == "no_effect") schema.keys[key] = KeyEffect::NoEffect;
      else throw InputError(path, "key \"" + key + "\": expected hookstream to be modelled, not_modelled or no_effect, got \"" + effect + "\"");
      schema.schema_class[key] = entry.at("schema").get<std::string>();
      schema.names.push_back(key);
    }
    for (const nlohmann::json& key : document.at("nested").at("fsdp_config")) schema.fsdp_config_keys.push_back(key.get<std::string>());
  } catch (const nlohmann::json::exception& error) {
    throw InputError(path, std::string("malformed axolotl key list: ") + error.what());
  }
  std::sort(schema.names.begin(), schema.names.end());
  return schema;
}

const AxolotlSchema& axolotl_schema() {
  static const AxolotlSchema schema = load_axolotl_schema(data_dir() + "/axolotl/keys.json");
  return schema;
}

std::string key_effect_name(KeyEffect effect) {
  switch (effect) {
    case KeyEffect::Modelled: return "modelled";
    case KeyEffect::NotModelled: return "not_modelled";
    case KeyEffect::NoEffect: return "no_effect";
  }
  return "";
}

}  // namespace hookstream
