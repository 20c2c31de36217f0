// `hookstream inspect`: the parameters of a plan's model as DDP sees them, each with the keys of the
// user's files that decided it, and the model checked against the checkpoint in its Hugging Face
// folder when there is one. JSON schema: docs/inspect-json.md.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/inputs/model_source/checkpoint_layout.h"
#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"

namespace hookstream {

struct InspectedParameter {
  int index = 0;            // position in named_parameters() (tied tensors listed once)
  int ddp_index = -1;       // PyTorch's index in DDP's parameter list; -1 when frozen
  const Parameter* parameter = nullptr;
  std::vector<std::string> tied_names;  // other names of the same tensor (lm_head.weight when tied)
  int initial_bucket = -1;  // bucket of DDP.__init__'s assignment (reducer.cpp compute_bucket_assignment_by_size)
  int bucket = -1;          // bucket after the Reducer's one rebuild, the one every later iteration uses
  std::vector<std::string> decided_by;  // "key: value -> effect", from the user's plan and config.json
};

struct DtypeTotal {
  int64_t tensors = 0;
  int64_t elements = 0;
  int64_t bytes = 0;
};

struct InspectReport {
  const Plan* plan = nullptr;
  ModelStructure structure;
  std::vector<InspectedParameter> parameters;
  // Totals: all tensors, and by stored dtype ("bfloat16", "float32", "nf4/int8" for quantized).
  std::map<std::string, DtypeTotal> by_dtype;
  DtypeTotal all, trainable;
  int initial_buckets = 0, buckets = 0;
  std::optional<CheckpointLayout> checkpoint;
  std::optional<CheckpointComparison> comparison;
  bool ok() const { return !comparison || comparison->matches(); }
};

// Builds the report for a loaded plan (the caller keeps `plan` alive).
InspectReport inspect_plan(const Plan& plan);

nlohmann::ordered_json render_inspect_json(const InspectReport& report);
std::string render_inspect_text(const InspectReport& report);

}  // namespace hookstream
