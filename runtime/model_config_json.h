// Writes a ModelConfig as a Hugging Face config.json, so that a plan whose model was built in
// code (tests, tools) reaches the worker processes through the same path as a user's model:
// LoadOptions::model_path -> load_model_config. The worker checks the round trip
// (runtime/plan_fingerprint.h).
#pragma once

#include <string>

#include "sim/inputs/model_config.h"

namespace hookstream {

std::string model_config_json(const ModelConfig& config);

}  // namespace hookstream
