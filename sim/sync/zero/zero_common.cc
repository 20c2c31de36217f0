#include "sim/sync/zero/zero_common.h"

namespace hookstream {

int64_t zero_reduce_bucket_size(const Plan& plan) {
  const DeepSpeedConfig& ds = *plan.engine.deepspeed;
  if (ds.reduce_bucket_size) return *ds.reduce_bucket_size;
  if (ds.reduce_bucket_size_auto && plan.model.hidden_size > 0) {
    return static_cast<int64_t>(plan.model.hidden_size) * plan.model.hidden_size;
  }
  return 500000000;  // deepspeed/runtime/zero/config.py: reduce_bucket_size = pp_int(5e8)
}

int64_t zero_persistence_threshold(const Plan& plan) {
  const DeepSpeedConfig& ds = *plan.engine.deepspeed;
  if (ds.param_persistence_threshold) return *ds.param_persistence_threshold;
  if (ds.param_persistence_threshold_auto && plan.model.hidden_size > 0) return 10LL * plan.model.hidden_size;
  return 100000;  // deepspeed/runtime/zero/config.py: param_persistence_threshold = pp_int(1e5)
}

std::vector<int> mlp_parameters(const ModelStructure& structure, int layer) {
  std::vector<int> out;
  for (const DecoderLayerUse& use : structure.layers) {
    if (use.index != layer) continue;
    for (const LinearUse* linear : {&use.gate, &use.up, &use.down}) {
      for (int p : {linear->weight, linear->bias, linear->lora_a, linear->lora_b}) {
        if (p >= 0) out.push_back(p);
      }
    }
  }
  return out;
}

}  // namespace hookstream
