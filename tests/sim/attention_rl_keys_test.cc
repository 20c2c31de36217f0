// axolotl keys that change memory and time: the attention implementation (flash_attention,
// sdp_attention, eager_attention, flex_attention, attn_implementation), rl (TRL preference
// training), sample_packing. docs/plan-format.md, docs/memory-and-time.md.

#include <algorithm>

#include <catch2/catch.hpp>

#include "sim/cost/device_spec.h"
#include "sim/cost/memory_model.h"
#include "sim/inputs/model_structure.h"
#include "sim/streams/stream_expansion.h"
#include "tests/sim/plan_text.h"

using namespace hookstream;

namespace {

const std::string kBase = "base_model: Llama-3.1-8B\nsequence_len: 4096\nmicro_batch_size: 1\n";

int64_t category_at_peak(const Plan& plan, MemoryCategory c) {
  MemoryModelOptions options;
  options.allocator_rounding = false;
  const MemoryEstimate e = estimate_memory(plan, build_model_structure(plan), find_device_spec(plan.gpu), options);
  const auto it = e.device_peak.bytes.find(c);
  return it == e.device_peak.bytes.end() ? 0 : it->second;
}

// The most activation memory any moment of the step holds (the end of forward, for these plans).
int64_t most_activations(const Plan& plan) {
  MemoryModelOptions options;
  options.allocator_rounding = false;
  const MemoryEstimate e = estimate_memory(plan, build_model_structure(plan), find_device_spec(plan.gpu), options);
  int64_t most = 0;
  for (const MemoryPoint& p : e.device_points) {
    const auto it = p.bytes.find(MemoryCategory::Activations);
    if (it != p.bytes.end()) most = std::max(most, it->second);
  }
  return most;
}

bool listed_not_modelled(const Plan& plan, const std::string& key) {
  for (const ConfigKeyNote& note : plan.not_modelled_keys) {
    if (note.key == key) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("attention keys: axolotl's precedence decides attn_implementation", "[keys][attention]") {
  CHECK(test::parse(kBase).attn_implementation == "sdpa");
  CHECK(test::parse(kBase + "flash_attention: true\n").attn_implementation == "flash_attention_2");
  CHECK(test::parse(kBase + "sdp_attention: true\neager_attention: true\n").attn_implementation == "sdpa");
  CHECK(test::parse(kBase + "eager_attention: true\n").attn_implementation == "eager");
  CHECK(test::parse(kBase + "flash_attention: true\nattn_implementation: eager\n").attn_implementation == "eager");
  CHECK(test::parse(kBase + "flex_attention: true\nflash_attention: true\n").attn_implementation == "flex_attention");
  const Plan flash = test::parse(kBase + "flash_attention: true\nsample_packing: true\n");
  CHECK_FALSE(listed_not_modelled(flash, "flash_attention"));
  CHECK_FALSE(listed_not_modelled(flash, "sample_packing"));
  CHECK(flash.sample_packing);
}

TEST_CASE("attention keys: eager saves the [B, H, S, S] probabilities and moves them through HBM", "[keys][attention][memory]") {
  const Plan sdpa = test::parse(kBase);
  const Plan eager = test::parse(kBase + "eager_attention: true\n");
  const int64_t a_sdpa = most_activations(sdpa);
  const int64_t a_eager = most_activations(eager);
  // Per layer: fp32 + bf16 probabilities of 32 heads x 4096 x 4096, less SDPA's fp32 logsumexp;
  // all 32 layers' saved tensors are held at the end of forward (plus, at most, the running layer's).
  const int64_t per_layer = int64_t(32) * 4096 * 4096 * (4 + 2) - int64_t(32) * 4096 * 4;
  CHECK(a_eager - a_sdpa >= 32 * per_layer);
  CHECK(a_eager - a_sdpa <= 33 * per_layer);
  const LayerCost plain = layer_cost(sdpa.model, 4096, 1);
  const LayerCost scores = layer_cost(sdpa.model, 4096, 1, nullptr, -1, true);
  CHECK(plain.eager_scores_bytes == 0);
  CHECK(scores.eager_scores_bytes == int64_t(16) * 32 * 4096 * 4096);
  CHECK(scores.eager_scores_backward_bytes == int64_t(20) * 32 * 4096 * 4096);
}

TEST_CASE("rl: DPO doubles the rows and, without an adapter, keeps a reference copy of the weights", "[keys][rl][memory]") {
  const Plan sft = test::parse(kBase);
  const Plan dpo = test::parse(kBase + "rl: dpo\n");
  const Plan dpo_lora = test::parse(kBase + "rl: dpo\nadapter: lora\nlora_target_modules: [q_proj]\n");
  const Plan orpo = test::parse(kBase + "rl: orpo\n");
  CHECK(dpo.rows_per_micro_step() == 2);
  CHECK(orpo.rows_per_micro_step() == 2);
  CHECK(dpo.rl_reference_copy());
  CHECK_FALSE(dpo_lora.rl_reference_copy());  // the policy under disable_adapter()
  CHECK_FALSE(orpo.rl_reference_forward());
  CHECK(category_at_peak(dpo, MemoryCategory::Weights) == 2 * category_at_peak(sft, MemoryCategory::Weights));
  CHECK(category_at_peak(orpo, MemoryCategory::Weights) == category_at_peak(sft, MemoryCategory::Weights));
  CHECK(most_activations(orpo) == 2 * most_activations(sft));
  CHECK(test::parse(kBase + "rl: true\n").rl == "dpo");
  CHECK_FALSE(listed_not_modelled(dpo, "rl"));
  // GRPO's generation is not modelled: listed, costed as supervised fine-tuning.
  const Plan grpo = test::parse(kBase + "rl: grpo\n");
  CHECK(listed_not_modelled(grpo, "rl"));
  CHECK(grpo.rows_per_micro_step() == 1);
}
