// sim/sync/zero/: DeepSpeed ZeRO-1/2 rules on small plans. The texts and outcomes asserted here are
// what real DeepSpeed 0.19.8 produced for the same plans (tests/oracles/zero_differential_test.cc,
// docs/engines/deepspeed-zero.md); this test pins them without the Python oracle.

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <string>

#include "sim/inputs/input_error.h"
#include "sim/inputs/model_config.h"
#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"
#include "sim/sync/sync_simulation.h"

using namespace hookstream;

namespace {

SyncSimulation simulate(const std::string& zero, const std::string& extra_top = "", const std::string& extra_hs = "") {
  const std::string yaml = "base_model: tiny-llama\nsequence_len: 8\nmicro_batch_size: 1\n" + extra_top +
                           "deepspeed:\n  zero_optimization:\n" + zero + "hookstream:\n  world_size: 2\n  iterations: 2\n" +
                           extra_hs;
  const Plan plan = parse_plan(yaml, "zero.yaml");
  REQUIRE(gradient_sync_modelled(plan.engine));
  return simulate_gradient_sync(plan, build_model_structure(plan));
}

const std::string kTiled = "tiled_mlp: true\ntiled_mlp_num_shards: 2\n";

std::string reduced_twice(const std::string& name, bool in_hook) {
  const std::string gap(in_hook ? 13 : 25, ' ');
  return fmt::format("The parameter {} has already been reduced.{}Gradient computed twice for this partition.{}{}", name, gap,
                     gap, in_hook ? "Multiple gradient reductions are currently not supported"
                                  : "Multiple gradient reduction is currently not supported");
}

}  // namespace

TEST_CASE("ZeRO-2: a tiled MLP without ds_grad_is_ready puts each weight in the bucket twice", "[zero]") {
  const SyncSimulation sim = simulate("    stage: 2\n", kTiled, "  tiled_mlp_ds_grad_is_ready: false\n");
  REQUIRE(sim.findings.size() == 1);
  const Finding& f = sim.findings.front();
  CHECK(sim.engine == "DeepSpeed ZeRO-2");
  CHECK(f.kind == VerdictKind::GradientReducedTwice);
  CHECK(f.ranks == std::vector<int>{0, 1});
  CHECK(f.parameter == "model.layers.3.mlp.down_proj.weight");
  CHECK(f.error_text == reduced_twice("model.layers.3.mlp.down_proj.weight", false));
  CHECK(f.graph_tasks.size() == 2);  // the two shards' nested backward tasks
}

TEST_CASE("ZeRO-2: a bucket that flushes between shards asserts in the hook, other wording", "[zero]") {
  const SyncSimulation sim =
      simulate("    stage: 2\n    reduce_bucket_size: 3000\n", kTiled, "  tiled_mlp_ds_grad_is_ready: false\n");
  REQUIRE(sim.findings.size() == 1);
  CHECK(sim.findings.front().error_text == reduced_twice("model.layers.3.mlp.down_proj.weight", true));
}

TEST_CASE("ZeRO-1/2: DeepSpeed's TiledMLP (ds_grad_is_ready, the default under DeepSpeed) buckets once", "[zero]") {
  CHECK(simulate("    stage: 2\n", kTiled).ok());
  CHECK(simulate("    stage: 1\n    overlap_comm: true\n", kTiled).ok());
}

TEST_CASE("ZeRO-1 reduces at the boundary only: immune to per-shard hooks unless overlap_comm", "[zero]") {
  CHECK(simulate("    stage: 1\n", kTiled, "  tiled_mlp_ds_grad_is_ready: false\n").ok());
  const SyncSimulation overlap = simulate("    stage: 1\n    overlap_comm: true\n", kTiled, "  tiled_mlp_ds_grad_is_ready: false\n");
  REQUIRE(overlap.findings.size() == 1);
  CHECK(overlap.findings.front().kind == VerdictKind::GradientReducedTwice);
}

TEST_CASE("ZeRO-1/2: a module unused on one rank makes the buckets differ: collective mismatch", "[zero]") {
  for (const std::string stage : {"1", "2"}) {
    const SyncSimulation sim = simulate("    stage: " + stage + "\n", "",
                                        "  rank_overrides:\n    1:\n      unused_modules: [model.layers.2.mlp]\n");
    REQUIRE(sim.findings.size() == 2);
    CHECK(sim.findings[0].kind == VerdictKind::CollectiveMismatch);
    CHECK(sim.findings[1].kind == VerdictKind::CollectiveMismatch);
    // The same module unused everywhere: the buckets agree.
    CHECK(simulate("    stage: " + stage + "\n", "", "  unused_modules: [model.layers.2.mlp]\n").ok());
  }
}

TEST_CASE("ZeRO-2: a reentrant checkpoint run twice reduces its parameters twice", "[zero]") {
  const std::string checkpoint = "gradient_checkpointing: true\ngradient_checkpointing_kwargs:\n  use_reentrant: true\n";
  CHECK(simulate("    stage: 2\n", checkpoint).ok());
  const SyncSimulation twice = simulate("    stage: 2\n", checkpoint, "  checkpoint_twice_layers: [1]\n");
  REQUIRE_FALSE(twice.ok());
  CHECK(twice.findings.front().kind == VerdictKind::GradientReducedTwice);
  CHECK(twice.findings.front().layer == 1);
}

TEST_CASE("ZeRO-0 and ZeRO-3 are modelled. A stage outside 0-3 is bad input", "[zero]") {
  const auto engine_of = [](const std::string& stage) {
    return parse_plan("base_model: tiny-llama\ndeepspeed:\n  zero_optimization:\n    stage: " + stage + "\n", "z.yaml").engine;
  };
  CHECK(gradient_sync_modelled(engine_of("0")));
  CHECK(gradient_sync_modelled(engine_of("3")));
  CHECK_THROWS_AS(parse_plan("base_model: tiny-llama\ndeepspeed:\n  zero_optimization:\n    stage: 4\n", "z.yaml"), InputError);
  CHECK_THROWS_AS(parse_plan("base_model: tiny-llama\ndeepspeed:\n  zero_optimization:\n    stage: 2\n    overlap_comm: 3\n", "z.yaml"),
                  InputError);
}

TEST_CASE("ZeRO-0: no gradient hook, one all-reduce of every trainable gradient at the accumulation boundary", "[zero]") {
  // What fails ZeRO-1/2 (a tiled MLP without ds_grad_is_ready, a reentrant checkpoint twice, a
  // rank that skips an MLP) passes: AccumulateGrad sums, and gradients a rank lacks are zero-filled.
  const std::string checkpoint = "gradient_checkpointing: true\ngradient_checkpointing_kwargs:\n  use_reentrant: true\n";
  const SyncSimulation tiled = simulate("    stage: 0\n", kTiled, "  tiled_mlp_ds_grad_is_ready: false\n");
  CHECK(tiled.engine == "DeepSpeed ZeRO-0");
  CHECK(tiled.ok());
  CHECK(simulate("    stage: 0\n", checkpoint, "  checkpoint_twice_layers: [1]\n").ok());
  CHECK(simulate("    stage: 0\n", "", "  rank_overrides:\n    1:\n      unused_modules: [model.layers.2]\n").ok());
  const std::string yaml =
      "base_model: tiny-llama\nsequence_len: 8\nmicro_batch_size: 1\ngradient_accumulation_steps: 2\ndeepspeed:\n  "
      "zero_optimization:\n    stage: 0\nhookstream:\n  world_size: 2\n  iterations: 1\n";
  const Plan plan = parse_plan(yaml, "zero0.yaml");
  const ModelStructure structure = build_model_structure(plan);
  SyncSimulationOptions options;
  options.record_steps = true;
  const SyncSimulation sim = simulate_gradient_sync(plan, structure, options);
  int64_t trainable = 0;
  for (const Parameter& p : structure.parameters) trainable += p.trainable ? p.numel() * dtype_bytes(p.dtype) : 0;
  for (const StepTrace& step : sim.steps) {
    if (step.micro_step == 0) {
      CHECK(step.collectives.empty());  // no communication inside gradient accumulation
    } else {
      REQUIRE(step.collectives.size() == 1);
      CHECK(step.collectives.front().bytes == trainable);
    }
  }
}
