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

// use_reentrant=False. LibTorch has no saved-tensor-hook checkpoint; this Function is
// hook-equivalent to it: torch.utils.checkpoint's non-reentrant mode records the real autograd
// graph in forward (parameters reachable from the outputs) and only refills saved activations by
// recomputation during backward; gradients then flow through the original nodes, so each
// parameter's AccumulateGrad runs exactly once, in the OUTER graph task. Here the layer's
// trainable parameters (`graph_params`, indices into `params`) are explicit inputs of the node
// (reachable, like the real graph); backward recomputes on detached leaf copies and uses
// torch::autograd::grad (which runs no AccumulateGrad) to get input and parameter gradients, and
// returns them, so the outer task runs each parameter's accumulator once. Difference: within the
// layer, the order in which its parameters' hooks fire follows the engine's ready queue for this
// one node's outputs, not the real graph's interleaving. Bucket completion can only differ when a
// bucket boundary falls inside one layer.
at::Tensor checkpoint_non_reentrant(const at::Tensor& hidden, LayerFunction layer, const ParameterTable& params,
                                    const std::vector<int>& graph_params, HookRecorder* recorder,
                                    std::string label);

}  // namespace hookstream
