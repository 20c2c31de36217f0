// Activation checkpointing of one decoder layer, in the two flavours of torch.utils.checkpoint
// (torch/utils/checkpoint.py), as seen by DDP's hooks; optionally with the layer's input offloaded
// to the CPU by a stream protocol (runtime/activation_offload.h) instead of kept on the device.
#pragma once

#include <string>
#include <vector>

#include "runtime/hook_recorder.h"
#include "runtime/layer_function.h"

namespace hookstream {

class ActivationOffload;

// CheckpointFunction (use_reentrant=True): the layer runs under no_grad in forward; backward
// recomputes it on a detached copy of the input and calls torch::autograd::backward on the
// recomputed graph: a nested graph task in which the layer's parameters' AccumulateGrad nodes (and
// so DDP's hooks) run. The parameters are not inputs of the node, so they are unreachable from the
// outputs (find_unused_parameters marks them unused). If `hidden` does not require grad the output
// does not either (the Function gets no backward, as in PyTorch: its parameters get no gradient).
at::Tensor checkpoint_reentrant(const at::Tensor& hidden, LayerFunction layer, const ParameterTable& params,
                                HookRecorder* recorder, std::string label);

// The layer's output as terms whose sum it is, for a non-reentrant recompute that need not form the
// output (see checkpoint.cc): e.g. the residual stream and a deferred last projection
// (runtime/deferred_linear.h).
using LayerTermsFunction = std::function<std::vector<at::Tensor>(const at::Tensor& hidden, const ParameterTable& params)>;

struct CheckpointSpec {
  LayerFunction layer;
  // Non-reentrant only, optional: what the recompute runs instead of `layer`; each term gets the
  // output's gradient.
  LayerTermsFunction recompute_terms;
  ParameterTable params;
  bool reentrant = true;
  // Non-reentrant only: the trainable parameters (indices into `params`) the layer reads. They are
  // inputs of the checkpoint node, which returns their gradients (see checkpoint.cc for why).
  std::vector<int> weights;
  // Offloaded: the protocol's forward/backward steps move the input; null: it is saved as is.
  ActivationOffload* offload = nullptr;
  int layer_index = -1;  // the decoder layer (slot selection of the protocol)
  HookRecorder* recorder = nullptr;
  std::string label;
};

// One checkpointed application of `spec.layer` to `hidden`: reentrant or non-reentrant, offloaded
// or not.
at::Tensor checkpoint_layer(const at::Tensor& hidden, CheckpointSpec spec);

}  // namespace hookstream
