// What an optimizer keeps per trainable parameter, by the name axolotl's `optimizer` key (HF
// TrainingArguments' `optim`) gives it: how many state tensors, in which dtype or quantized format,
// and whether bitsandbytes pages them. The memory model sizes optimizer_states with it and the time
// model the optimizer step's traffic.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hookstream {

enum class StateFormat {
  ParamDtype,  // zeros_like(param): torch.optim.AdamW/Adam (foreach and fused)
  Fp32,        // float32 whatever the parameter's dtype: bitsandbytes 32-bit optimizers
  Blockwise8,  // 1 byte per element + one fp32 scale per block
  Blockwise4,  // half a byte per element + one fp32 scale per block
};

struct OptimizerStates {
  std::string name;           // as written ("adamw_torch" when the key is unset)
  bool known = true;          // false: sized as AdamW, and the report says it is not modelled
  int states = 2;             // state tensors per parameter (Adam: exp_avg, exp_avg_sq)
  StateFormat format = StateFormat::ParamDtype;
  int block = 0;              // elements per quantization block
  // Parameters smaller than this keep unquantized states (bitsandbytes: min_8bit_size 4096, as
  // float32; torchao: numel >= 4096 and a multiple of the block, else zeros_like(param)).
  int64_t min_quantized_numel = 0;
  StateFormat small_format = StateFormat::ParamDtype;
  bool paged = false;         // bitsandbytes paged optimizers: CUDA unified memory
  // The allocations (bytes) of one state tensor of a parameter of `numel` elements stored in
  // `param_dtype_bytes` bytes each: the state itself, then its block scales if quantized.
  std::vector<int64_t> state_allocations(int64_t numel, int param_dtype_bytes) const;
  // Bytes the step reads and writes per parameter (each state read and written, the parameter
  // read and written, the gradient read): one fused pass, a lower bound for foreach.
  int64_t step_traffic(int64_t numel, int param_dtype_bytes) const;
};

// `name` as HF's OptimizerNames / axolotl spell it (transformers/training_args.py,
// src/axolotl/utils/schemas/enums.py CustomSupportedOptimizers).
OptimizerStates optimizer_states(const std::string& name);

}  // namespace hookstream
