#include "sim/cost/optimizer_states.h"

#include <algorithm>

namespace hookstream {
namespace {

int64_t blocks(int64_t numel, int block) { return (numel + block - 1) / block; }

int64_t format_bytes(StateFormat format, int64_t numel, int param_dtype_bytes) {
  switch (format) {
    case StateFormat::ParamDtype: return numel * param_dtype_bytes;
    case StateFormat::Fp32: return numel * 4;
    case StateFormat::Blockwise8: return numel;
    case StateFormat::Blockwise4: return (numel + 1) / 2;
  }
  return 0;
}

bool quantized(StateFormat format) { return format == StateFormat::Blockwise8 || format == StateFormat::Blockwise4; }

}  // namespace

std::vector<int64_t> OptimizerStates::state_allocations(int64_t numel, int param_dtype_bytes) const {
  if (quantized(format) && numel >= min_quantized_numel) {
    return {format_bytes(format, numel, param_dtype_bytes), blocks(numel, block) * 4};
  }
  return {format_bytes(quantized(format) ? small_format : format, numel, param_dtype_bytes)};
}

int64_t OptimizerStates::step_traffic(int64_t numel, int param_dtype_bytes) const {
  int64_t state = 0;
  for (int64_t bytes : state_allocations(numel, param_dtype_bytes)) state += bytes;
  return 2 * states * state + 3 * numel * param_dtype_bytes;
}

OptimizerStates optimizer_states(const std::string& written) {
  OptimizerStates spec;
  spec.name = written.empty() ? "adamw_torch" : written;
  const std::string& name = spec.name;
  // torch.optim.AdamW / Adam: exp_avg and exp_avg_sq = zeros_like(param) (torch/optim/adamw.py).
  // HF maps adamw_torch, adamw_torch_fused, adamw_hf and adamw_apex_fused to it (training_args.py).
  static const std::vector<std::string> torch_adam = {"adamw_torch", "adamw_torch_fused", "adamw_hf", "adamw_apex_fused",
                                                      "adamw_torch_xla", "adamw_torch_npu_fused", "adam"};
  if (std::find(torch_adam.begin(), torch_adam.end(), name) != torch_adam.end()) return spec;
  // bitsandbytes 8-bit blockwise optimizers (bitsandbytes/optim/optimizer.py Optimizer8bit):
  // uint8 states with one fp32 absmax per 256-element block; tensors under min_8bit_size = 4096
  // elements keep float32 states. paged_*: the states live in CUDA unified memory.
  static const std::vector<std::string> bnb_adam8 = {"adamw_bnb_8bit", "adamw_8bit", "adam_8bit", "paged_adamw_8bit",
                                                     "paged_adam_8bit", "bnb_8bit", "ademamix_8bit", "paged_ademamix_8bit"};
  static const std::vector<std::string> bnb_lion8 = {"lion_8bit", "paged_lion_8bit"};
  if (std::find(bnb_adam8.begin(), bnb_adam8.end(), name) != bnb_adam8.end() ||
      std::find(bnb_lion8.begin(), bnb_lion8.end(), name) != bnb_lion8.end()) {
    spec.format = StateFormat::Blockwise8;
    spec.block = 256;
    spec.min_quantized_numel = 4096;
    spec.small_format = StateFormat::Fp32;
    spec.states = std::find(bnb_lion8.begin(), bnb_lion8.end(), name) != bnb_lion8.end() ? 1 : 2;
    spec.paged = name.rfind("paged_", 0) == 0;
    return spec;
  }
  // bitsandbytes 32-bit optimizers: float32 states (Optimizer2State with optim_bits=32).
  static const std::vector<std::string> bnb32 = {"paged_adamw_32bit", "paged_adam_32bit", "lion_32bit", "paged_lion_32bit"};
  if (std::find(bnb32.begin(), bnb32.end(), name) != bnb32.end()) {
    spec.format = StateFormat::Fp32;
    spec.states = name.find("lion") != std::string::npos ? 1 : 2;
    spec.paged = name.rfind("paged_", 0) == 0;
    return spec;
  }
  // torchao's low-bit AdamW (HF adamw_torch_8bit / adamw_torch_4bit; axolotl ao_adamw_*):
  // torchao/optim/adam.py quantizes a state when numel >= 4096 and numel % block_size == 0
  // (8-bit: block 256, 4-bit: block 128, fp32 scales), otherwise zeros_like(param).
  if (name == "adamw_torch_8bit" || name == "ao_adamw_8bit") {
    spec.format = StateFormat::Blockwise8;
    spec.block = 256;
    spec.min_quantized_numel = 4096;
    return spec;
  }
  if (name == "adamw_torch_4bit" || name == "ao_adamw_4bit") {
    spec.format = StateFormat::Blockwise4;
    spec.block = 128;
    spec.min_quantized_numel = 4096;
    return spec;
  }
  // torch.optim.SGD as HF builds it (no momentum): no state.
  if (name == "sgd") {
    spec.states = 0;
    return spec;
  }
  spec.known = false;  // sized as AdamW; the report lists `optimizer` as not modelled
  return spec;
}

}  // namespace hookstream
