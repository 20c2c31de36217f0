// A linear map (with PEFT's LoRA branch) whose output nobody reads, only its backward: the last
// projection of a layer that a non-reentrant checkpoint recomputes (runtime/checkpoint.h).
//
// PyTorch's non-reentrant checkpoint stops its recomputation once the last tensor that backward
// needs has been rebuilt (torch/utils/checkpoint.py, _StopRecomputationError with early_stop=True):
// in a decoder layer that is the MLP's down projection's input, packed before that projection's
// GEMM runs, so the recompute skips what follows it (the adapter's B GEMM, the scale, the adds) but
// has already run the base projection's GEMM, whose output backward never reads. A deferred linear
// goes one GEMM further: its forward computes nothing (the output is a one-element placeholder of
// the right shape), and its backward computes the input and weight gradients that at::linear's
// autograd would (mm backward with the same operands), so the gradients are the same.
#pragma once

#include <torch/torch.h>

namespace hookstream {

// y = x W^T + scale * (x A^T) B^T, never materialised. `lora_a`/`lora_b` are undefined without an
// adapter; all operands in x's dtype (the caller casts the adapter as autocast would). Requires a
// weight of rank 2 and no bias (the caller falls back to at::linear otherwise).
at::Tensor deferred_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& lora_a, const at::Tensor& lora_b,
                           double scale);

}  // namespace hookstream
