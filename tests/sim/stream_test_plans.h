// Plans shared by the stream tests: tiny-llama (4 layers) with offloaded reentrant checkpointing.
#pragma once

#include <string>

#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"

namespace hookstream::testing {

inline Plan offload_plan(const std::string& extra = "") {
  return parse_plan(std::string("base_model: tiny-llama\nsequence_len: 8\nmicro_batch_size: 1\n"
                                "gradient_checkpointing: true\nactivation_offloading: true\n"
                                "ddp_find_unused_parameters: false\nhookstream:\n  world_size: 2\n  iterations: 1\n") + extra,
                    "offload.yaml");
}

}  // namespace hookstream::testing
