// DeepSpeed ZeRO stage 3 (DeepSpeedZeroOptimizer_Stage3, deepspeed/runtime/zero/stage3.py, and
// DeepSpeedZeRoOffload, parameter_offload.py; DeepSpeed 0.19.8) as a SyncModel, beside the ZeRO-1/2
// model (zero_model.h) with which it shares zero_common.h. What real DeepSpeed 0.19.8 did on CPU for
// these rules is in docs/engines/deepspeed-zero.md (oracles/zero_worker.py, Zero3Model).
#pragma once

#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"
#include "sim/sync/sync_simulation.h"

namespace hookstream {

SyncSimulation simulate_zero3(const Plan& plan, const ModelStructure& structure, const SyncSimulationOptions& options);

}  // namespace hookstream
