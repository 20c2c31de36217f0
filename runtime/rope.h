// Rotary position embedding frequencies as transformers computes them for the RoPE variants of
// sim/inputs/model_config.h (modeling_rope_utils.py: _compute_default_rope_parameters,
// _compute_linear_scaling_rope_parameters, _compute_llama3_parameters). Llama 3.1's "llama3" rule
// keeps the high frequencies, divides the low ones (wavelength > original context / low_freq_factor)
// by `factor`, and blends in between; without it a Llama-3.1 checkpoint computes different logits.
#pragma once

#include <torch/torch.h>

#include "sim/inputs/model_config.h"

namespace hookstream {

// The variants rope_inv_freq computes: default, linear, llama3.
bool rope_supported(const ModelConfig& config);

// inv_freq[j] for j < head_dim / 2, in `options`' dtype and device.
at::Tensor rope_inv_freq(const ModelConfig& config, const at::TensorOptions& options);

}  // namespace hookstream
