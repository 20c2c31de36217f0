// axolotl's dp_shard_size / dp_replicate_size (accelerate's ParallelismConfig mesh): which plans
// are FSDP2 or HSDP and modelled, the world size they imply, accelerate's checks as one-line bad
// input, the HSDP collectives (reduce-scatter in the shard group, all-reduce of the shard across
// the replicas, on synced steps only) and the cost settings. tests/runtime/fsdp2_differential_test.cc
// holds the HSDP plans against real fully_shard on a 2 x 2 mesh.
#include <catch2/catch.hpp>
#include <map>

#include "sim/cost/engine_cost.h"
#include "sim/inputs/input_error.h"
#include "sim/inputs/plan.h"
#include "sim/verify/verify.h"

namespace hookstream {
namespace {

const std::string kFsdp2 =
    "base_model: tiny-llama\nsequence_len: 8\nmicro_batch_size: 1\nfsdp_version: 2\nfsdp_config:\n"
    "  transformer_layer_cls_to_wrap: LlamaDecoderLayer\n  reshard_after_forward: true\n";
const std::string kDdp = "base_model: tiny-llama\nsequence_len: 8\nmicro_batch_size: 1\n";

Plan load(const std::string& text, std::optional<int> world) {
  LoadOptions options;
  options.world_size = world;
  options.torch_version = "2.11";
  return parse_plan(text, "plan.yaml", options);
}

VerifyResult verify(const std::string& text, int world) {
  VerifyOptions options;
  options.search_fixes = false;
  options.cost_fixes = false;
  options.record_steps = true;
  LoadOptions load;
  load.torch_version = "2.11";
  load.world_size = world;
  return verify_plan(PlanSource{text, "plan.yaml", load}, options);
}

// Per collective kind ("reduce_scatter", "all_reduce", "all_gather"): how many rank 0 issued in
// iteration `it`, micro-step `micro`.
std::map<std::string, int> collectives(const VerifyResult& r, int it, int micro) {
  std::map<std::string, int> n;
  for (const StepTrace& step : r.simulation.steps) {
    if (step.rank != 0 || step.iteration != it || step.micro_step != micro) continue;
    for (const Collective& c : step.collectives) ++n[c.what.substr(0, c.what.find(' '))];
  }
  return n;
}

}  // namespace

TEST_CASE("mesh: dp_shard_size equal to the world size is plain FSDP2, modelled", "[fsdp2][mesh]") {
  const Plan plan = load(kFsdp2 + "dp_shard_size: 4\n", 4);
  CHECK(plan.engine.kind == EngineKind::Fsdp2);
  CHECK(plan.engine.modelled());
  CHECK(plan.engine.other_parallelism.empty());
  CHECK(plan.engine.dp_shard == 4);
  CHECK(plan.engine.dp_replicate == 1);
  CHECK(engine_cost_settings(plan).shard_ranks == 4);
  // Without a world size the plan's sizes give it.
  const Plan implied = load(kFsdp2 + "dp_shard_size: 16\n", std::nullopt);
  CHECK(implied.world_size == 16);
  CHECK(implied.world_size_from == "dp_shard_size 16 (plan.yaml:8)");
}

TEST_CASE("mesh: dp_replicate_size x dp_shard_size is HSDP, modelled, sharded over dp_shard", "[fsdp2][mesh]") {
  const Plan plan = load(kFsdp2 + "dp_shard_size: 2\ndp_replicate_size: 4\n", 8);
  CHECK(plan.engine.modelled());
  CHECK(plan.engine.shard_ranks(plan.world_size) == 2);
  CHECK(plan.engine.dp_replicate == 4);
  const EngineCostSettings cost = engine_cost_settings(plan);
  CHECK(cost.shard_ranks == 2);
  CHECK(cost.world == 8);
  CHECK(cost.name == "FSDP2 HSDP 4x2");
}

TEST_CASE("mesh: accelerate's checks are one line of bad input", "[fsdp2][mesh]") {
  CHECK_THROWS_WITH(load(kFsdp2 + "dp_shard_size: 2\ndp_replicate_size: 2\n", 8),
                    Catch::StartsWith("plan.yaml:8: key \"dp_shard_size\": ParallelismConfig total_size (4) does not match "
                                      "num_processes (8, --world-size). Please adjust dp_replicate_size/ dp_shard_size/"));
  CHECK_THROWS_WITH(load(kFsdp2 + "dp_replicate_size: 4\n", 4),
                    Catch::Contains("FSDP is enabled but the parallelism config has no dimension for FSDP to shard across"));
  CHECK_THROWS_WITH(load("base_model: tiny-llama\nfsdp_config:\n  transformer_layer_cls_to_wrap: LlamaDecoderLayer\ndp_shard_size: 2\n", 2),
                    Catch::Contains("ParallelismConfig is only compatible DistributedType.FSDP (version 2)"));
  CHECK_THROWS_WITH(load(kDdp + "expert_parallel_size: 2\ndp_shard_size: 2\n", 8),
                    Catch::Contains("expert_parallel_size (2) * dp_shard_size (2) * tensor_parallel_size (1) * context_parallel_size (1) = 4, "
                                    "but world_size = 8"));
}

TEST_CASE("mesh: DDP over dp_replicate_size = world is plain DDP (a dp_shard mesh or experts are not modelled)", "[fsdp2][mesh]") {
  const Plan ddp = load(kDdp + "dp_replicate_size: 4\n", 4);
  CHECK(ddp.engine.kind == EngineKind::Ddp);
  CHECK(ddp.engine.modelled());
  CHECK(ddp.engine.other_parallelism.empty());
  const Plan sharded_ddp = load(kDdp + "dp_shard_size: 4\n", 4);
  CHECK_FALSE(sharded_ddp.engine.modelled());
  CHECK(sharded_ddp.engine.other_parallelism == std::vector<std::string>{"dp_shard_size: 4"});
  const Plan ep = load(kFsdp2 + "expert_parallel_size: 2\ndp_shard_size: 2\n", std::nullopt);
  CHECK(ep.world_size == 4);
  CHECK_FALSE(ep.engine.modelled());
  CHECK(ep.engine.other_parallelism == std::vector<std::string>{"expert_parallel_size: 2", "dp_shard_size: 2"});
}

TEST_CASE("mesh: HSDP all-reduces each unit's shard after its reduce-scatter, on synced steps only", "[fsdp2][mesh]") {
  const VerifyResult r = verify(kFsdp2 + "dp_shard_size: 2\ndp_replicate_size: 2\ngradient_accumulation_steps: 2\n"
                                         "hookstream:\n  iterations: 1\n", 4);
  REQUIRE(r.ok());
  // no_sync micro-step: set_requires_gradient_sync(False) clears reduce_grads and all_reduce_grads.
  CHECK(collectives(r, 0, 0)["reduce_scatter"] == 0);
  CHECK(collectives(r, 0, 0)["all_reduce"] == 0);
  // Synced: the root and 4 layers (tiny-llama), one reduce-scatter and one all-reduce each.
  CHECK(collectives(r, 0, 1)["reduce_scatter"] == 5);
  CHECK(collectives(r, 0, 1)["all_reduce"] == 5);
  // Plain FSDP2 over the same 4 ranks: no all-reduce.
  const VerifyResult plain = verify(kFsdp2 + "hookstream:\n  iterations: 1\n", 4);
  CHECK(collectives(plain, 0, 0)["reduce_scatter"] == 5);
  CHECK(collectives(plain, 0, 0).count("all_reduce") == 0);
  // The reduce-scatter pads dim 0 to a multiple of the shard group (2), not of the world (4): its
  // DETAIL TensorShape, and the all-reduce carries half of it.
  for (const StepTrace& step : r.simulation.steps) {
    if (step.rank != 0 || step.micro_step != 1) continue;
    for (size_t i = 0; i + 1 < step.collectives.size(); ++i) {
      const std::string& rs = step.collectives[i].what;
      if (rs.rfind("reduce_scatter ", 0) != 0) continue;
      const std::string& ar = step.collectives[i + 1].what;
      REQUIRE(ar.rfind("all_reduce ", 0) == 0);
      const long long rs_elements = std::stoll(rs.substr(rs.rfind(", ") + 2));
      const long long ar_elements = std::stoll(ar.substr(ar.rfind('(') + 1));
      CHECK(rs_elements == 2 * ar_elements);
    }
  }
}

}  // namespace hookstream
