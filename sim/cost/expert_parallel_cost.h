// Time of expert parallelism's all-to-alls (sim/sync/expert_parallel/expert_parallel.h): axolotl's
// torch backend (torch_dispatch.py) waits for each one before its result is used (the split
// counts are copied to the host first, the local kernel reads the dispatched tokens, the combine's
// output feeds the residual add), so nothing hides them behind compute: the whole link time is
// exposed. A DeepEP backend overlaps differently; that is not modelled.
#pragma once

#include "sim/cost/engine_cost.h"
#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"

namespace hookstream {

// Per step on one rank: every MoE layer's all-to-alls in every micro-step, forward and backward
// (a checkpointed layer's recompute re-runs none: the plugin's selective checkpointing saves them,
// plan.cc checkpointing_rules). An all-to-all moving S bytes out of each of n ranks takes S / B on
// a full-bisection link (NVLink within a node), B the per-rank bandwidth of the link the time
// model gives a collective over n ranks; plus a launch latency per call.
EngineStepCost expert_parallel_step_cost(const Plan& plan, const ModelStructure& structure, const DeviceSpec& device);

}  // namespace hookstream
