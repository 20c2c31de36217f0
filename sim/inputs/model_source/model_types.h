// Which Hugging Face `model_type`s hookstream models, and which ones transformers knows.
//
// A config.json names its architecture by `model_type` (transformers' CONFIG_MAPPING_NAMES keys).
// hookstream builds parameter structures only for the types in modelled_model_types(), each checked
// parameter by parameter against transformers + PEFT on the meta device by the structure oracle
// (oracles/structure_oracle.py, docs/structure-oracle.md). Any other type is refused (exit 2), never
// modelled as a dense Llama: "transformers knows <type>; hookstream cannot model it yet" when the
// type is in the transformers list (model-types/transformers.txt, written by the oracle from the
// pinned transformers), "unknown model_type" otherwise.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "sim/inputs/architectures/architecture.h"
#include "sim/inputs/model_config.h"

namespace hookstream {

// Whether hookstream builds structures for `model_type`: the architecture table
// (sim/inputs/architectures/architecture.h, modelled_model_types()) is the one list. Adding a type there is
// the claim that sim/inputs/model_structure.cc builds it exactly as transformers does, and the structure
// oracle test holds the claim.
bool is_modelled_model_type(const std::string& model_type);

// The model types of the pinned transformers (model-types/transformers.txt under the data
// directory), sorted; and the version line of that file ("transformers 5.17.0").
struct KnownModelTypes {
  std::string version;
  std::vector<std::string> types;
};
KnownModelTypes transformers_model_types();

// Throws InputError (naming `config.source` and the key) unless `config` is of a modelled type.
void require_modelled_model_type(const ModelConfig& config);
void require_modelled_model_type(const std::string& model_type, const std::string& source);

// The "model_type" string of the config.json at `path`, read without the rest of the config, or
// nullopt when the file is unreadable, malformed or has none. A config of a type hookstream does
// not model may lack keys the modelled ones need: the type is what to report first.
std::optional<std::string> peek_model_type(const std::string& path);

}  // namespace hookstream
