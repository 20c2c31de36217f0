// A digest of everything the oracle's run depends on in a plan: the parameter list (names, shapes,
// trainable) and the per-rank, per-iteration schedule (sequence length, checkpoint counts, tiled
// shards, unused modules) plus the DDP and tiling switches. The parent computes it on the Plan it
// was given, the worker on the Plan it parsed back from YAML: a mismatch means the plan did not
// survive to_yaml/parse_plan, and the worker refuses to run rather than observe another plan.
#pragma once

#include <string>

#include "sim/inputs/plan.h"

namespace hookstream {

std::string plan_fingerprint(const Plan& plan);

}  // namespace hookstream
