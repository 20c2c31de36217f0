#include "runtime/plan_fingerprint.h"

#include <cstdint>
#include <sstream>

#include "sim/inputs/model_structure.h"

namespace hookstream {

std::string plan_fingerprint(const Plan& plan) {
  std::ostringstream text;
  const ModelStructure structure = build_model_structure(plan);
  for (const Parameter& p : structure.parameters) {
    text << p.name << '[';
    for (int64_t d : p.shape) text << d << ',';
    text << ']' << p.trainable << p.ddp_index << ';';
  }
  text << "|ws" << plan.world_size << "it" << plan.iterations << "gas" << plan.gradient_accumulation_steps
       << "mbs" << plan.micro_batch_size << "fu" << plan.find_unused_parameters() << "sg" << plan.static_graph
       << "gbv" << plan.gradient_as_bucket_view << "cap" << plan.ddp_bucket_cap_mb.value_or(-1) << "re"
       << plan.use_reentrant << "tm" << plan.tiled_mlp << "tb" << static_cast<int>(plan.tiled_mlp_backward) << "twi"
       << plan.tiled_mlp_weights_as_inputs << "irg" << plan.input_require_grads() << "vi" << plan.vision_inputs
       << "la" << plan.lora_alpha << "lr" << plan.lora_r << "tv" << plan.torch_version.text() << "tl";
  if (plan.tiled_mlp_layers) {
    for (int layer : *plan.tiled_mlp_layers) text << layer << ',';
  }
  for (int rank = 0; rank < plan.world_size; ++rank) {
    for (int it = 0; it <= plan.iterations; ++it) {
      text << "|r" << rank << "i" << it << "s" << plan.sequence_len_for(rank, it) << "t"
           << plan.tiled_shards_for(rank, it) << "c";
      for (const auto& layer : structure.layers) text << plan.checkpoint_count(layer.index, rank, it);
      text << "u";
      for (const auto& m : plan.unused_modules_for(rank, it)) text << m << ',';
      for (int micro = 0; micro < plan.gradient_accumulation_steps && !plan.micro_step_overrides.empty(); ++micro) {
        text << "m" << micro << "s" << plan.sequence_len_for(rank, it, micro) << "t" << plan.tiled_shards_for(rank, it, micro) << "c";
        for (const auto& layer : structure.layers) text << plan.checkpoint_count(layer.index, rank, it, micro);
        text << "u";
        for (const auto& m : plan.unused_modules_for(rank, it, micro)) text << m << ',';
      }
    }
  }
  // FNV-1a 64: short, stable across processes and builds.
  uint64_t hash = 1469598103934665603ULL;
  for (unsigned char c : text.str()) {
    hash ^= c;
    hash *= 1099511628211ULL;
  }
  std::ostringstream hex;
  hex << std::hex << hash;
  return hex.str();
}

}  // namespace hookstream
