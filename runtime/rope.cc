#include "runtime/rope.h"

#include <cmath>

namespace hookstream {

bool rope_supported(const ModelConfig& config) {
  return config.rope_type == "default" || config.rope_type == "linear" || config.rope_type == "llama3";
}

at::Tensor rope_inv_freq(const ModelConfig& config, const at::TensorOptions& options) {
  const int64_t dim = config.head_dim;
  // theta^(-2j/d) (LlamaRotaryEmbedding / _compute_default_rope_parameters).
  at::Tensor inv_freq = 1.0 / at::pow(config.rope_theta, at::arange(0, dim, 2, options) / static_cast<double>(dim));
  if (config.rope_type == "linear") return inv_freq / config.rope_factor;
  if (config.rope_type != "llama3") {
    TORCH_CHECK(config.rope_type == "default", "rope_type ", config.rope_type, " is not computed (rope_supported)");
    return inv_freq;
  }
  const double factor = config.rope_factor, low = config.rope_low_freq_factor, high = config.rope_high_freq_factor;
  const double old_context = config.rope_original_max_position_embeddings;
  const double low_freq_wavelen = old_context / low, high_freq_wavelen = old_context / high;
  const at::Tensor wavelen = 2 * M_PI / inv_freq;
  at::Tensor scaled = at::where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq);
  const at::Tensor smooth = (old_context / wavelen - low) / (high - low);
  const at::Tensor smoothed = (1 - smooth) * scaled / factor + smooth * scaled;
  const at::Tensor medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
  return at::where(medium, smoothed, scaled);
}

}  // namespace hookstream
