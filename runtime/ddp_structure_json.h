// The plan's model structure and its per-position schedule, as the simulator sees them, written as
// JSON for the PyTorch 2.x DDP worker (oracles/ddp_worker.py): parameters in DDP order, which
// module every forward skips at each (rank, iteration, micro-step), checkpoint counts, tiled-MLP
// layers and shards, and the DDP flags. The worker builds the same tiny model from it and runs it
// under the real torch.nn.parallel.DistributedDataParallel, so nothing about the plan is re-derived
// in Python. Schema: docs/ddp-versions.md.
#pragma once

#include <string>

#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"

namespace hookstream {

std::string ddp_structure_json(const Plan& plan, const ModelStructure& structure);

}  // namespace hookstream
