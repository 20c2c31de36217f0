// What the report says about the user's config beyond the DDP verdicts: the engine the plan runs
// on, and which of its keys hookstream did not model. A plan on an engine other than plain DDP
// (FSDP1, FSDP2, DeepSpeed ZeRO, tensor/context/expert parallelism) gets the `engine_not_modelled`
// result instead of a DDP verdict: its hook schedule is not verified yet (exit status 1).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "sim/inputs/plan.h"

namespace hookstream {

// The `engine_not_modelled` report (text): engine, what decided it, its settings, the world size
// (or that none was given, naming the flags), and the config's keys.
std::string render_engine_not_modelled_text(const Plan& plan);
// The same as `hookstream.verify/2` JSON: {schema, plan, ok: false, verdict: "engine_not_modelled",
// engine, world_size, world_size_from, message, config_keys}.
nlohmann::json render_engine_not_modelled_json(const Plan& plan);

// The engine as JSON: {name, kind, modelled, decided_by, settings, other_parallelism, zero_stage}.
nlohmann::json engine_json(const Engine& engine);
// {axolotl_version, not_modelled, no_effect, ignored}: each a list of {key, where, note}.
nlohmann::json config_keys_json(const Plan& plan);
// The text section listing the keys (empty when the config has none of them).
std::string config_keys_text(const Plan& plan);

}  // namespace hookstream
