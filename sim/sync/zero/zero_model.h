// DeepSpeed ZeRO stages 1 and 2 (DeepSpeedZeroOptimizer, deepspeed/runtime/zero/stage_1_and_2.py,
// DeepSpeed 0.19.8) as a SyncModel: a gradient hook per trainable parameter that runs after every
// AccumulateGrad execution (deepspeed/utils/torch.py register_grad_hook ->
// register_post_accumulate_grad_hook), the ipg bucket with its size limit, params_already_reduced
// with both of its assert texts, the ds_grad_is_ready gate DeepSpeed's TiledMLP sets, and the
// epilogue that flushes the bucket, queued on the graph task of the first hook
// (deepspeed/runtime/base_optimizer.py BackwardHookStateManager.queue_post_backward_callback).
// What real DeepSpeed 0.19.8 did on CPU for these rules is in docs/engines/deepspeed-zero.md
// (oracles/zero_worker.py). Stage 3 is its own model (zero3_model.h), and so is stage 0, the engine
// without a ZeRO optimizer (zero0_model.h); simulate_zero routes to them.
#pragma once

#include <memory>

#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"
#include "sim/sync/sync_model.h"
#include "sim/sync/sync_simulation.h"

namespace hookstream {

// Whether the plan's DeepSpeed stage is modelled (1 and 2 here, 3 in zero3_model.h, 0 in zero0_model.h).
bool zero_stage_modelled(const Engine& engine);

std::unique_ptr<SyncModel> make_zero_model(const Plan& plan, const ModelStructure& structure, int rank);

SyncSimulation simulate_zero(const Plan& plan, const ModelStructure& structure, const SyncSimulationOptions& options);

}  // namespace hookstream
