// Liger-Kernel's RMSNorm and SwiGLU as axolotl's LigerPlugin puts them into a model (plan keys
// liger_rms_norm / liger_glu_activation, Plan::liger_*_applied): the same maths as transformers'
// LlamaRMSNorm and silu(gate) * up, but what autograd keeps for backward is what Liger's Functions
// save, which is what the memory model counts (docs/memory-and-time.md "Liger kernels"):
//
// - RMSNorm (liger_kernel/ops/rms_norm.py LigerRMSNormFunction, casting_mode "llama"): the input as
//   it is and one float32 rstd per row, instead of the float32 upcast of the input;
// - SiLU * up (liger_kernel/ops/swiglu.py LigerSiLUMulFunction): gate and up, silu(gate) recomputed
//   in backward instead of saved.
//
// Written with ATen operations (no Triton here): the saved sets and the gradients are Liger's, the
// kernels are not all fused. On CUDA with PyTorch 2.8 or later the RMSNorm is PyTorch's fused one
// (at::_fused_rms_norm, which saves the same set); elsewhere it is composed of ATen operations over
// row chunks. SiLU * up goes through the rows in chunks too, and its backward stores the gradients
// into the saved gate and up as Liger's does, so it allocates no intermediate-size tensor. Like
// Liger's row-wise kernels, neither holds a float32 copy of a whole tensor: at most 2^24 elements
// per chunk.
#pragma once

#include <torch/torch.h>

namespace hookstream {

// weight * (x.float() * rsqrt(mean(x.float()^2) + eps)).to(x.dtype()), over the last dimension.
at::Tensor liger_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// silu(gate) * up.
at::Tensor liger_silu_mul(const at::Tensor& gate, const at::Tensor& up);

}  // namespace hookstream
