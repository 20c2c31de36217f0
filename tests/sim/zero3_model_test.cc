// sim/sync/zero/zero3_model.cc: DeepSpeed ZeRO-3 rules on small plans. Each outcome asserted here is
// what real DeepSpeed 0.19.8 produced for the same plan (oracles/zero_worker.py, the plans of
// tests/plans/zero/zero3_*.yaml, docs/engines/deepspeed-zero.md); this test pins them without the
// Python oracle.

#include <algorithm>
#include <catch2/catch.hpp>
#include <string>

#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"
#include "sim/sync/sync_simulation.h"
#include "sim/verify/verify.h"

using namespace hookstream;

namespace {

std::string plan_text(const std::string& zero, const std::string& top, const std::string& hs) {
  return "base_model: tiny-llama\nsequence_len: 8\nmicro_batch_size: 1\n" + top +
         "deepspeed:\n  zero_optimization:\n    stage: 3\n" + zero + "hookstream:\n  world_size: 2\n  iterations: 2\n" + hs;
}

SyncSimulation simulate(const std::string& zero, const std::string& top = "", const std::string& hs = "") {
  const Plan plan = parse_plan(plan_text(zero, top, hs), "zero3.yaml");
  REQUIRE(gradient_sync_modelled(plan.engine));
  return simulate_gradient_sync(plan, build_model_structure(plan));
}

const std::string kTiled = "tiled_mlp: true\ntiled_mlp_num_shards: 2\n";
const std::string kNotReady = "  tiled_mlp_ds_grad_is_ready: false\n";

}  // namespace

TEST_CASE("ZeRO-3: a tiled MLP without ds_grad_is_ready fails the bucket's bare ds_id assert", "[zero3]") {
  const SyncSimulation sim = simulate("", kTiled, kNotReady);
  REQUIRE(sim.findings.size() == 1);
  const Finding& f = sim.findings.front();
  CHECK(sim.engine == "DeepSpeed ZeRO-3");
  CHECK(f.kind == VerdictKind::GradientReducedTwice);
  CHECK(f.ranks == std::vector<int>{0, 1});
  CHECK(f.error_text == "AssertionError");  // `assert len(set(ds_ids)) == len(params_in_bucket)`, no message
  CHECK(f.iteration == 0);
  CHECK(f.micro_step == 0);
}

TEST_CASE("ZeRO-3: a bucket that flushes between shards overwrites the first shard's gradient", "[zero3]") {
  // reduce_bucket_size 1000 < two MLP weights (512 elements each); "auto" is hidden_size^2 = 256.
  for (const std::string size : {"1000", "auto"}) {
    const SyncSimulation sim = simulate("    reduce_bucket_size: " + size + "\n", kTiled, kNotReady);
    INFO(size);
    REQUIRE(sim.findings.size() == 1);
    CHECK(sim.findings.front().kind == VerdictKind::WrongGradient);
    CHECK(sim.findings.front().micro_step == 0);  // partition_grads copies at micro_step_id 0
  }
}

TEST_CASE("ZeRO-3: a bucket that flushes itself while holding the parameter hands None to the bucket", "[zero3]") {
  const SyncSimulation sim = simulate("    reduce_bucket_size: 3000\n", kTiled, kNotReady);
  REQUIRE(sim.findings.size() == 1);
  CHECK(sim.findings.front().kind == VerdictKind::EngineError);
  CHECK(sim.findings.front().error_text == "'NoneType' object has no attribute 'numel'");
  CHECK(sim.findings.front().parameter == "model.layers.3.mlp.down_proj.weight");
}

TEST_CASE("ZeRO-3: DeepSpeed's TiledMLP (ds_grad_is_ready) or an MLP leaf module reduces each weight once", "[zero3]") {
  CHECK(simulate("", kTiled).ok());
  CHECK(simulate("    reduce_bucket_size: 1000\n", kTiled).ok());
  CHECK(simulate("", kTiled, kNotReady + "  z3_leaf_mlp: true\n").ok());
}

TEST_CASE("ZeRO-3: checkpointing, LoRA with frozen weights, leaf modules: no error", "[zero3]") {
  const std::string lora = "adapter: lora\nlora_r: 2\nlora_target_modules: [q_proj, up_proj, down_proj]\n";
  const std::string non_reentrant = "gradient_checkpointing: true\ngradient_checkpointing_kwargs:\n  use_reentrant: false\n";
  CHECK(simulate("").ok());
  // transformers#47254's CheckpointError is gone in DeepSpeed 0.19.8 (release_sub_module keeps
  // frozen parameters gathered during a recompute); the oracle observed no error.
  CHECK(simulate("", lora + non_reentrant).ok());
  CHECK(simulate("    stage3_param_persistence_threshold: 0\n", lora + non_reentrant).ok());
  CHECK(simulate("", lora + non_reentrant, "  z3_leaf_mlp: true\n").ok());
}

TEST_CASE("ZeRO-3: a reentrant checkpoint run twice puts its parameters in one bucket twice", "[zero3]") {
  const std::string checkpoint = "gradient_checkpointing: true\ngradient_checkpointing_kwargs:\n  use_reentrant: true\n";
  CHECK(simulate("", checkpoint).ok());
  const SyncSimulation twice = simulate("", checkpoint, "  checkpoint_twice_layers: [1]\n");
  REQUIRE_FALSE(twice.ok());
  CHECK(twice.findings.front().kind == VerdictKind::GradientReducedTwice);
  CHECK(twice.findings.front().layer == 1);
}

TEST_CASE("ZeRO-3: a module one rank skips desynchronises the forward all-gathers, unless a leaf block zero-fills", "[zero3]") {
  const auto rank1_skips = [](const std::string& module) {
    return "  rank_overrides:\n    1:\n      unused_modules: [" + module + "]\n";
  };
  for (const std::string module : {"model.layers.2.mlp", "model.layers.2.mlp.gate_proj"}) {
    const SyncSimulation sim = simulate("", "", rank1_skips(module));
    INFO(module);
    REQUIRE(sim.findings.size() == 2);
    CHECK(sim.findings[0].kind == VerdictKind::CollectiveMismatch);
  }
  // An idle expert inside a leaf block: the block is called, fetches all its parameters and its
  // backward hook reduces them all, zero-filled: the ranks agree.
  CHECK(simulate("", "", "  z3_leaf_mlp: true\n" + rank1_skips("model.layers.2.mlp.gate_proj")).ok());
  // The whole block skipped: the leaf module is never called.
  CHECK_FALSE(simulate("", "", "  z3_leaf_mlp: true\n" + rank1_skips("model.layers.2.mlp")).ok());
  CHECK(simulate("", "", "  unused_modules: [model.layers.1.mlp]\n").ok());
}

TEST_CASE("ZeRO-3: the fixes offered are re-verified in the plan's own keys", "[zero3]") {
  VerifyOptions options;
  const VerifyResult tiled = verify_plan(PlanSource{plan_text("", kTiled, kNotReady), "zero3.yaml", LoadOptions{}}, options);
  REQUIRE_FALSE(tiled.ok());
  std::vector<std::string> keys;
  for (const VerifiedFix& fix : tiled.fixes) keys.push_back(fix.changes.front().key);  // fixes: re-verified ok
  CHECK(std::find(keys.begin(), keys.end(), "hookstream.tiled_mlp_ds_grad_is_ready") != keys.end());
  CHECK(std::find(keys.begin(), keys.end(), "hookstream.z3_leaf_mlp") != keys.end());
}
