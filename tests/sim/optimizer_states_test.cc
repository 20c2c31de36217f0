// What each optimizer keeps per parameter, and what that does to the memory model's
// optimizer_states on a real plan.
#include "sim/cost/optimizer_states.h"

#include <catch2/catch.hpp>

#include "sim/cost/device_spec.h"
#include "sim/cost/memory_model.h"
#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"

namespace hookstream {

TEST_CASE("optimizer states by name, as torch, bitsandbytes and torchao allocate them", "[optimizer]") {
  const int64_t n = 4096 * 4096;
  // torch.optim.AdamW: two zeros_like(param) states (bf16 parameter: 2 bytes each).
  const OptimizerStates torch_adam = optimizer_states("adamw_torch_fused");
  CHECK(torch_adam.states == 2);
  CHECK(torch_adam.state_allocations(n, 2) == std::vector<int64_t>{2 * n});
  CHECK(optimizer_states("").name == "adamw_torch");
  // bitsandbytes 8-bit: a uint8 state and one fp32 absmax per 256 elements; small tensors fp32.
  const OptimizerStates bnb = optimizer_states("paged_adamw_8bit");
  CHECK(bnb.paged);
  CHECK(bnb.state_allocations(n, 2) == std::vector<int64_t>{n, n / 256 * 4});
  CHECK(bnb.state_allocations(1000, 2) == std::vector<int64_t>{4000});
  CHECK(optimizer_states("adamw_bnb_8bit").state_allocations(n, 4) == std::vector<int64_t>{n, n / 256 * 4});
  // bitsandbytes 32-bit: float32 whatever the parameter's dtype.
  CHECK(optimizer_states("paged_adamw_32bit").state_allocations(n, 2) == std::vector<int64_t>{4 * n});
  // torchao: 4-bit states in blocks of 128.
  CHECK(optimizer_states("adamw_torch_4bit").state_allocations(n, 2) == std::vector<int64_t>{n / 2, n / 128 * 4});
  CHECK(optimizer_states("sgd").states == 0);
  CHECK(optimizer_states("lion_8bit").states == 1);
  CHECK_FALSE(optimizer_states("adafactor").known);
  // Step traffic: each state read and written, the parameter read and written, the grad read.
  CHECK(torch_adam.step_traffic(n, 2) == 7 * 2 * n);
}

TEST_CASE("the memory model sizes optimizer_states with the plan's optimizer", "[optimizer][memory]") {
  // A bf16 model, fully fine-tuned: torch's AdamW keeps bf16 states, bitsandbytes 32-bit fp32.
  const DeviceSpec device = find_device_spec("H100-SXM");
  auto states = [&](const std::string& optimizer) {
    const Plan plan = parse_plan("base_model: Llama-3.1-8B\nsequence_len: 512\noptimizer: " + optimizer + "\n", "plan.yaml");
    const ModelStructure structure = build_model_structure(plan);
    const auto& bytes = estimate_memory(plan, structure, device).device_peak.bytes;
    return bytes.count(MemoryCategory::OptimizerStates) ? bytes.at(MemoryCategory::OptimizerStates) : int64_t{0};
  };
  const int64_t adamw = states("adamw_torch");
  const int64_t eight_bit = states("adamw_bnb_8bit");
  const int64_t fp32 = states("paged_adamw_32bit");
  // 8.03 B trainable parameters: 2 x 2 bytes (AdamW, bf16), 2 x (1 + 4/256) bytes (8-bit), 2 x 4 bytes (fp32).
  CHECK(adamw / 1e9 == Approx(32.1).epsilon(0.01));
  CHECK(eight_bit / 1e9 == Approx(16.3).epsilon(0.01));
  CHECK(fp32 / 1e9 == Approx(64.2).epsilon(0.01));
  CHECK(states("sgd") == 0);
  // An optimizer hookstream does not know is sized as AdamW and listed as not modelled.
  const Plan unknown = parse_plan("base_model: tiny-llama\noptimizer: adafactor\n", "plan.yaml");
  CHECK(unknown.not_modelled_keys.at(0).key == "optimizer");
  CHECK(states("adafactor") == adamw);
}

}  // namespace hookstream
