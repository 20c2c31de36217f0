// DeepSpeed with `zero_optimization.stage: 0` (DeepSpeed 0.19.8): no ZeRO optimizer, so no gradient
// hook on any parameter. AccumulateGrad sums every graph task's gradient into .grad as plain
// autograd does, and engine.backward's epilogue (deepspeed/runtime/engine.py _backward_epilogue ->
// allreduce_gradients) all-reduces the gradients at the gradient-accumulation boundary only:
// buffered_allreduce_fallback over every trainable parameter, a zero gradient for one without
// (_get_gradients_for_reduction: "this will ensure that every rank is reducing the same size"),
// grouped by dtype and flattened into buckets of MEMORY_OPT_ALLREDUCE_SIZE elements
// (allreduce_no_retain). What real DeepSpeed did is in docs/engines/deepspeed-zero.md.
#pragma once

#include <memory>

#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"
#include "sim/sync/sync_model.h"

namespace hookstream {

std::unique_ptr<SyncModel> make_zero0_model(const Plan& plan, const ModelStructure& structure);

}  // namespace hookstream
