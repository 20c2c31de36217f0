// Activation checkpointing of one decoder layer, in the two flavours of torch.utils.checkpoint
// (torch/utils/checkpoint.py), as seen by DDP's hooks.
#pragma once

#include <string>
#include <vector>

#include "runtime/hook_recorder.h"
#include "runtime/layer_function.h"

namespace hookstream {

// CheckpointFunction (use_reentrant=True): the layer runs under no_grad in forward; backward
// recomputes it on a detached copy of the input and calls torch::autograd::backward on the
// recomputed graph: a nested graph task in which the layer's parameters' AccumulateGrad nodes (and
// so DDP's hooks) run. The parameters are not inputs of the node, so they are unreachable from the
// outputs (find_unused_parameters marks them unused). If `hidden` does not require grad the output
// does not either (the Function gets no backward, as in PyTorch: its parameters get no gradient).
at::Tensor checkpoint_reentrant(const at::Tensor& hidden, LayerFunction layer, const ParameterTable& params,
                                HookRecorder* recorder, std::string label);

// use_reentrant=False needs no Function here: see OracleModel::forward for why the oracle runs
// the ordinary graph, which fires exactly the hooks the real non-reentrant checkpoint fires.

}  // namespace hookstream
