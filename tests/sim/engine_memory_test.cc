// The sharded engines' memory per rank (sim/cost/engine_cost.h engine_memory) where it follows a
// rule of the engine's own code rather than a sum of parameter sizes.

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <string>

#include "sim/cost/engine_cost.h"
#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"

using namespace hookstream;

namespace {

std::string read_plan(const std::string& relative) {
  std::ifstream in(std::string(HOOKSTREAM_SOURCE_DIR) + "/" + relative);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("FSDP1 use_orig_params: a unit mixing frozen and trainable parameters keeps a whole flat gradient shard",
          "[memory][fsdp1]") {
  // tests/plans/fsdp1/unfrozen_mlp.yaml: tiny-llama (fp32), only layer 1's MLP trainable, world 2.
  // Layer 1's FlatParameter holds 2336 elements (norms 2 x 16, q 256, k 128, v 128, o 256, gate/up/
  // down 3 x 512; every size a multiple of use_orig_params' 4-element fp32 alignment, so no
  // padding): each rank's sharded gradient is 1168 fp32 elements whatever part of it is frozen
  // (torch/distributed/fsdp/_runtime_utils.py _get_reduce_scatter_tensors: the reduce-scatter output
  // is `torch.empty_like(chunks[0])`, kept as flat_param.grad). Measured on real FSDP1 (torch 2.11,
  // Gloo, world 2, 2026-11-28): a unit of two frozen 512-element Linears and a trainable 128-element
  // one has flat_param.grad of 576 elements on both ranks, the trainable weight's view only on rank 1.
  const std::string yaml = read_plan("tests/plans/fsdp1/unfrozen_mlp.yaml");
  const Plan plan = parse_plan(yaml, "unfrozen_mlp.yaml");
  const ModelStructure structure = build_model_structure(plan);
  const EngineCostSettings settings = engine_cost_settings(plan);
  const EngineMemory memory = engine_memory(plan, structure, settings, false);
  REQUIRE(memory.grads_by_layer.size() == 5);
  CHECK(memory.grads_by_layer[1] == 1168 * 4);
  // The frozen layers' FlatParameters do not require grad: no gradient at all.
  CHECK(memory.grads_by_layer[0] == 0);
  CHECK(memory.grads_by_layer[2] == 0);
  CHECK(memory.grads_by_layer[3] == 0);
}
