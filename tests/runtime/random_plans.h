// The random plan generator of the differential tests (random_plans_test.cc: the 1.13 Reducer;
// torch2_differential_test.cc: real PyTorch 2.11 DDP): the same seed gives the same plans.
#pragma once

#include <cstdint>
#include <fmt/format.h>
#include <string>
#include <vector>

namespace random_plans {

// splitmix64: the same stream on every platform (std:: distributions are implementation-defined).
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  int below(int n) { return static_cast<int>(next() % static_cast<uint64_t>(n)); }
  bool chance(double p) { return static_cast<double>(next() % 1000000) < p * 1000000.0; }
  template <typename T>
  const T& pick(const std::vector<T>& items) { return items[static_cast<size_t>(below(static_cast<int>(items.size())))]; }

 private:
  uint64_t state_;
};

inline std::string random_plan(Random& rng) {
  const std::string tied = std::string(HOOKSTREAM_SOURCE_DIR) + "/tests/plans/models/tiny-llama-tied.json";
  const std::string model = rng.pick(std::vector<std::string>{"tiny-llama", "tiny-llama", tied, "tiny-vl"});
  const int layers = model == "tiny-vl" ? 2 : 4;
  const std::string prefix = model == "tiny-vl" ? "model.language_model" : "model";
  std::string y = fmt::format("base_model: {}\nsequence_len: {}\nmicro_batch_size: 1\n", model,
                              rng.pick(std::vector<int>{8, 16, 40}));
  std::string hs = fmt::format("  world_size: {}\n  iterations: {}\n", rng.pick(std::vector<int>{2, 2, 3}),
                               rng.pick(std::vector<int>{2, 3}));
  const std::string adapter = rng.pick(std::vector<std::string>{"", "", "lora", "qlora"});
  if (!adapter.empty()) {
    std::vector<std::string> all{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
    std::vector<std::string> targets;
    for (const auto& t : all) {
      if (rng.chance(0.6)) targets.push_back(t);
    }
    if (targets.empty()) targets.push_back("down_proj");
    y += fmt::format("adapter: {}\nlora_r: 2\nlora_target_modules: [{}]\n", adapter, fmt::join(targets, ", "));
  } else if (rng.chance(0.2)) {
    y += fmt::format("unfrozen_parameters:\n  - layers\\.{}\\.mlp\\.\n", rng.below(layers));
  }
  const std::string checkpoint = rng.pick(std::vector<std::string>{"off", "reentrant", "non_reentrant", "unsloth"});
  std::vector<int> checkpointed;
  if (checkpoint != "off") {
    y += checkpoint == "unsloth" ? "gradient_checkpointing: unsloth\n"
                                 : fmt::format("gradient_checkpointing: true\ngradient_checkpointing_kwargs:\n  use_reentrant: {}\n",
                                               checkpoint == "reentrant" ? "true" : "false");
    for (int l = 0; l < layers; ++l) {
      if (rng.chance(0.7)) checkpointed.push_back(l);
    }
    if (checkpointed.empty()) checkpointed.push_back(layers - 1);
    hs += fmt::format("  checkpoint_layers: [{}]\n", fmt::join(checkpointed, ", "));
    if (rng.chance(0.25)) hs += fmt::format("  checkpoint_twice_layers: [{}]\n", rng.pick(checkpointed));
  }
  if (rng.chance(0.5)) {
    y += "tiled_mlp: true\n";
    if (rng.chance(0.7)) y += fmt::format("tiled_mlp_num_shards: {}\n", 1 + rng.below(3));
    const std::string strategy =
        rng.pick(std::vector<std::string>{"per_chunk_backward", "grad_then_backward", "function_returns_grads"});
    hs += "  tiled_mlp_backward: " + strategy + "\n";
    if (strategy == "function_returns_grads" || rng.chance(0.3)) hs += "  tiled_mlp_weights_as_inputs: true\n";
  }
  if (rng.chance(0.7)) y += fmt::format("ddp_find_unused_parameters: {}\n", rng.chance(0.5) ? "true" : "false");
  if (rng.chance(0.4)) y += fmt::format("ddp_bucket_cap_mb: {}\n", rng.pick(std::vector<std::string>{"0.0005", "0.002", "0.01"}));
  if (rng.chance(0.3)) hs += "  static_graph: true\n";
  if (rng.chance(0.2)) hs += "  gradient_as_bucket_view: true\n";
  if (rng.chance(0.3)) y += "gradient_accumulation_steps: 2\n";
  if (rng.chance(0.3)) hs += fmt::format("  enable_input_require_grads: {}\n", rng.chance(0.5) ? "true" : "false");
  if (rng.chance(0.15)) hs += fmt::format("  unused_modules: [{}.layers.{}.mlp]\n", prefix, rng.below(layers));
  if (rng.chance(0.15)) {
    hs += fmt::format("  rank_overrides:\n    1:\n      sequence_len: {}\n", rng.pick(std::vector<int>{8, 24, 40}));
  } else if (rng.chance(0.1)) {
    hs += fmt::format("  rank_overrides:\n    1:\n      unused_modules: [{}.layers.{}.mlp]\n", prefix, rng.below(layers));
  }
  if (rng.chance(0.1) && !checkpointed.empty() && checkpoint != "non_reentrant") {
    hs += fmt::format("  iteration_overrides:\n    1:\n      checkpoint_twice_layers: [{}]\n", rng.pick(checkpointed));
  }
  return y + "hookstream:\n" + hs;
}

}  // namespace random_plans
