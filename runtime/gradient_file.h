// Gradients of the DDP parameters after one iteration, as raw float32 in DDP index order,
// concatenated; an undefined gradient is written as zeros (the report's grad_defined says which).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace hookstream {

void write_gradients(const std::string& path, const std::vector<at::Tensor>& grads,
                     const std::vector<int64_t>& numels);
// One flattened tensor per DDP parameter.
std::vector<at::Tensor> read_gradients(const std::string& path, const std::vector<int64_t>& numels);

}  // namespace hookstream
