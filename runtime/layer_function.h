// The shape of the model pieces that checkpointing and tiling wrap: a function of one hidden-state
// tensor that reads its weights from a parameter table (indexed like ModelStructure::parameters).
// Passing the table explicitly lets a recomputation substitute detached copies for parameters
// (non-reentrant checkpoint) while the original forward uses the real tensors.
#pragma once

#include <functional>
#include <vector>

#include <torch/torch.h>

namespace hookstream {

using ParameterTable = std::vector<at::Tensor>;
using LayerFunction = std::function<at::Tensor(const at::Tensor& hidden, const ParameterTable& params)>;

}  // namespace hookstream
