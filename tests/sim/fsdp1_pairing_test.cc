// sim/sync/fsdp1/fsdp1_pairing.cc: how the ranks' FSDP1 collectives meet when one rank skips a
// unit. The outcomes and texts pinned here are what real FSDP1 (torch 2.11, Gloo, CPU) produced for
// the same plans (tests/plans/fsdp1/rank_skips_*.yaml through tests/runtime/fsdp1_differential_test.cc,
// docs/engines/fsdp1.md); this test pins them without the Python oracle.

#include <catch2/catch.hpp>
#include <string>

#include "sim/inputs/input_error.h"
#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"
#include "sim/sync/sync_simulation.h"

using namespace hookstream;

namespace {

SyncSimulation simulate(const std::string& use_orig_params, const std::string& debug, const std::string& overrides,
                        int world = 2) {
  std::string yaml =
      "base_model: tiny-llama\nsequence_len: 8\nmicro_batch_size: 1\nfsdp_config:\n  auto_wrap_policy: "
      "TRANSFORMER_BASED_WRAP\n  transformer_layer_cls_to_wrap: LlamaDecoderLayer\n  use_orig_params: " +
      use_orig_params + "\nhookstream:\n  world_size: " + std::to_string(world) + "\n  iterations: 2\n";
  if (!debug.empty()) yaml += "  torch_distributed_debug: " + debug + "\n";
  const Plan plan = parse_plan(yaml + overrides, "fsdp1.yaml");
  REQUIRE(gradient_sync_modelled(plan.engine));
  return simulate_gradient_sync(plan, build_model_structure(plan));
}

const Finding& first_of(const SyncSimulation& sim, int rank) {
  for (const Finding& f : sim.findings) {
    if (f.rank == rank) return f;
  }
  FAIL("no finding for rank " << rank);
  return sim.findings.front();
}

const std::string kRank1Skips2 = "  rank_overrides:\n    1:\n      unused_modules: [model.layers.2]\n";
const std::string kRank1Skips3 = "  rank_overrides:\n    1:\n      unused_modules: [model.layers.3]\n";

}  // namespace

TEST_CASE("FSDP1 under DETAIL: a skipped unit fails the forward-order check on every rank", "[fsdp1]") {
  // use_orig_params: the check's own lookup raises a KeyError naming the FlatParameter.
  const SyncSimulation sim = simulate("true", "DETAIL", kRank1Skips2);
  for (int rank : {0, 1}) {
    const Finding& f = first_of(sim, rank);
    CHECK(f.kind == VerdictKind::EngineError);
    CHECK(f.phase == Phase::Forward);
    CHECK(f.iteration == 0);
    CHECK(f.error_text == "Parameter containing:\ntensor([...], requires_grad=True)");
    CHECK(f.parameter == "model.layers.2._flat_param");
  }
  // use_orig_params false: the RuntimeError names both units' parameters.
  const SyncSimulation flat = simulate("false", "DETAIL", kRank1Skips2);
  const Finding& f = first_of(flat, 1);
  CHECK(f.kind == VerdictKind::EngineError);
  CHECK(f.error_text.rfind("Forward order differs across ranks: rank 0 is all-gathering parameters for "
                           "[['model.layers.2.self_attn.q_proj.weight', ",
                           0) == 0);
  CHECK(f.error_text.find("'model.layers.2.post_attention_layernorm.weight']] while rank 1 is all-gathering parameters "
                          "for [['model.layers.3.self_attn.q_proj.weight'") != std::string::npos);
}

TEST_CASE("FSDP1 under DETAIL: the last unit skipped meets the first backward all-gather: ProcessGroupWrapper's text",
          "[fsdp1]") {
  const SyncSimulation sim = simulate("true", "DETAIL", kRank1Skips3);
  const std::string device =
      "TensorOptions(dtype=float (default), device=cpu, layout=Strided (default), requires_grad=false (default), "
      "pinned_memory=false (default), memory_format=(nullopt))";
  const std::string check = "CollectiveFingerPrint(SequenceNumber=12, OpType=_ALLGATHER_BASE, TensorShape=[1], TensorDtypes=Int, "
                            "TensorDeviceTypes=" + device + ")";
  const std::string gather = "CollectiveFingerPrint(SequenceNumber=12, OpType=ALLGATHER, TensorShape=[1168], "
                             "TensorDtypes=Float, TensorDeviceTypes=" + device + ")";
  const Finding& r0 = first_of(sim, 0);
  CHECK(r0.kind == VerdictKind::CollectiveMismatch);
  CHECK(r0.phase == Phase::Forward);
  CHECK(r0.error_text == "Detected mismatch between collectives on ranks. Rank 0 is running collective: " + check +
                             ", but Rank 1 is running collective: " + gather +
                             ".Collectives differ in the following aspects:   Op type: _ALLGATHER_BASEvs ALLGATHER  "
                             "Tensor Tensor shapes: 1vs 1168  Tensor Tensor dtypes: Intvs Float");
  const Finding& r1 = first_of(sim, 1);
  CHECK(r1.phase == Phase::Backward);
  CHECK(r1.error_text.rfind("Detected mismatch between collectives on ranks. Rank 1 is running collective: " + gather, 0) == 0);
}

TEST_CASE("FSDP1 without DETAIL: equal-sized units pair silently in Gloo until kinds differ", "[fsdp1]") {
  // The all-gathers of layers 2 and 3 exchange data without an error; an all-gather then meets a
  // reduce-scatter: Gloo times out (observed) - a collective mismatch on both ranks, in backward.
  const SyncSimulation sim = simulate("true", "", kRank1Skips2);
  for (int rank : {0, 1}) {
    const Finding& f = first_of(sim, rank);
    CHECK(f.kind == VerdictKind::CollectiveMismatch);
    CHECK(f.phase == Phase::Backward);
    CHECK(f.explanation.find("before that, collective #3") != std::string::npos);
  }
  // Both ranks skip a different unit of the same size: every collective pairs, none raises.
  const SyncSimulation different =
      simulate("true", "OFF",
               "  rank_overrides:\n    0:\n      unused_modules: [model.layers.1]\n    1:\n      unused_modules: [model.layers.2]\n");
  for (int rank : {0, 1}) CHECK(first_of(different, rank).kind == VerdictKind::WrongGradient);
  // The same plan under DETAIL: the forward-order check raises instead.
  const SyncSimulation detail =
      simulate("true", "DETAIL",
               "  rank_overrides:\n    0:\n      unused_modules: [model.layers.1]\n    1:\n      unused_modules: [model.layers.2]\n");
  CHECK(first_of(detail, 0).kind == VerdictKind::EngineError);
}

TEST_CASE("FSDP1: the forward-order check runs in the first iteration only", "[fsdp1]") {
  // Rank 1 skips layer 1 in iteration 1 only: no order check there; the silent pairing ends where
  // an all-gather meets a reduce-scatter and ProcessGroupWrapper raises.
  const SyncSimulation sim = simulate("true", "DETAIL",
                                      "  iteration_overrides:\n    0:\n      unused_modules: []\n"
                                      "  rank_overrides:\n    1:\n      unused_modules: [model.layers.1]\n");
  const Finding& f = first_of(sim, 0);
  CHECK(f.kind == VerdictKind::CollectiveMismatch);
  CHECK(f.iteration == 1);
  CHECK(f.error_text.find("Op type: ALLGATHERvs _REDUCE_SCATTER_BASE") != std::string::npos);
}

TEST_CASE("hookstream.torch_distributed_debug: OFF, INFO or DETAIL, anything else is bad input", "[fsdp1][plan]") {
  CHECK(parse_plan("base_model: tiny-llama\nhookstream:\n  torch_distributed_debug: detail\n", "p.yaml").torch_distributed_debug ==
        "DETAIL");
  CHECK(parse_plan("base_model: tiny-llama\n", "p.yaml").torch_distributed_debug == "OFF");
  CHECK_THROWS_AS(parse_plan("base_model: tiny-llama\nhookstream:\n  torch_distributed_debug: verbose\n", "p.yaml"), InputError);
}
