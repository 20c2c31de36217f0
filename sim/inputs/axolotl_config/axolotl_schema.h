// axolotl's config schema as a data file (axolotl/keys.json, written by tools/axolotl_keys/
// generate.py from axolotl's pydantic models): every top-level key an axolotl config may carry,
// and for each whether hookstream models it. The plan loader accepts every listed key.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace hookstream {

// What a key's value does to hookstream's answer.
enum class KeyEffect {
  Modelled,     // read by the plan loader; it takes part in the verdict, memory or time
  NotModelled,  // may change the hook schedule, memory or step time; hookstream does not model it
  NoEffect,     // logging, datasets, tokenizer, evaluation, saving: cannot change a training step
};

struct AxolotlSchema {
  std::string version;  // the axolotl release it mirrors
  std::string source;   // where the list was read from
  std::map<std::string, KeyEffect> keys;                  // top-level keys (plugin keys included)
  std::map<std::string, std::string> schema_class;        // key -> "src/axolotl/...py:Class"
  std::vector<std::string> names;                         // keys, sorted (for "did you mean")
  std::vector<std::string> fsdp_config_keys;              // axolotl's FSDPConfig fields and aliases
};

// Reads `path` (axolotl/keys.json format). Throws InputError naming the file on a malformed list.
AxolotlSchema load_axolotl_schema(const std::string& path);

// data_dir()/axolotl/keys.json, read on first use and never changed afterwards.
const AxolotlSchema& axolotl_schema();

std::string key_effect_name(KeyEffect effect);

}  // namespace hookstream
