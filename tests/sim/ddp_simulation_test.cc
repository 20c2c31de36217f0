// Expected verdicts here are PyTorch's own (test_ddp_checkpointing_* in
// torch/testing/_internal/distributed/distributed_test.py, and the cases in
// ../shared/docs/ddp-reducer-model.md); the differential test checks every plan against the real
// Reducer as well.
#include <catch2/catch.hpp>

#include "sim/verify.h"

using namespace hookstream;

namespace {
VerifyResult verify_file(const std::string& relative, std::vector<std::string> set = {}) {
  LoadOptions options;
  options.set = std::move(set);
  return verify_plan(read_plan_source(std::string(HOOKSTREAM_SOURCE_DIR) + "/" + relative, options));
}
VerdictKind first_kind(const VerifyResult& r) { return r.ok() ? VerdictKind::Ok : r.simulation.findings.front().kind; }
}  // namespace

TEST_CASE("PyTorch's checkpoint matrix: once is fine, unused-params and twice need static graph", "[ddp]") {
  CHECK(first_kind(verify_file("tests/plans/ddp/pt_checkpoint_once_reentrant.yaml")) == VerdictKind::Ok);
  CHECK(first_kind(verify_file("tests/plans/ddp/pt_checkpoint_once_non_reentrant.yaml")) == VerdictKind::Ok);
  CHECK(first_kind(verify_file("tests/plans/ddp/pt_unused_params_reentrant.yaml")) == VerdictKind::MarkedReadyTwice);
  CHECK(first_kind(verify_file("tests/plans/ddp/pt_unused_params_reentrant_static.yaml")) == VerdictKind::Ok);
  CHECK(first_kind(verify_file("tests/plans/ddp/pt_unused_params_non_reentrant.yaml")) == VerdictKind::Ok);
  CHECK(first_kind(verify_file("tests/plans/ddp/pt_checkpoint_twice_reentrant.yaml")) == VerdictKind::MarkedReadyTwice);
  CHECK(first_kind(verify_file("tests/plans/ddp/pt_checkpoint_twice_reentrant_static.yaml")) == VerdictKind::Ok);
  CHECK(first_kind(verify_file("tests/plans/ddp/pt_dynamic_module_static.yaml")) == VerdictKind::StaticGraphChanged);
}

TEST_CASE("reentrant + find_unused names the first hook of the nested backward and both causes", "[ddp]") {
  const VerifyResult r = verify_file("tests/plans/ddp/pt_unused_params_reentrant.yaml");
  REQUIRE_FALSE(r.ok());
  const Finding& f = r.simulation.findings.front();
  CHECK(f.parameter == "model.layers.1.mlp.down_proj.weight");
  CHECK(f.layer == 1);
  CHECK(f.ranks == std::vector<int>{0, 1});
  REQUIRE(f.graph_tasks.size() == 2);
  CHECK(f.graph_tasks[0].find("marked as unused") != std::string::npos);
  CHECK(f.graph_tasks[1].find("checkpoint(layer 1)") != std::string::npos);
  CHECK(f.error_text.rfind("Expected to mark a variable ready only once", 0) == 0);
}

TEST_CASE("one trainable tensor and a per-chunk tiled backward diverge silently", "[ddp]") {
  // runtime-notes.md: its one parameter completed the only bucket inside the first chunk's nested
  // backward, so finalize ran there and chunk 2's gradient stayed local.
  const VerifyResult r = verify_file("tests/plans/ddp/tiled_single_param_divergence.yaml");
  REQUIRE_FALSE(r.ok());
  CHECK(r.simulation.findings.front().kind == VerdictKind::SilentDivergence);
  CHECK(r.simulation.findings.front().error_text.rfind("no error", 0) == 0);
  CHECK(first_kind(verify_file("tests/plans/ddp/tiled_single_param_grad_then_backward.yaml")) == VerdictKind::Ok);
  // With one rank the late chunk is added locally and nothing diverges.
  CHECK(first_kind(verify_file("tests/plans/ddp/tiled_single_param_divergence.yaml", {"hookstream.world_size=1"})) ==
        VerdictKind::Ok);
}

TEST_CASE("the bundled default fails at the last layer's MLP and its printed fixes pass", "[ddp]") {
  const VerifyResult r = verify_file("plans/default.yaml");
  REQUIRE_FALSE(r.ok());
  const Finding& f = r.simulation.findings.front();
  CHECK(f.kind == VerdictKind::MarkedReadyTwice);
  CHECK(f.parameter == "base_model.model.model.language_model.layers.35.mlp.down_proj.lora_B.default.weight");
  CHECK(f.ranks.size() == 8);
  REQUIRE_FALSE(r.fixes.empty());
  for (const VerifiedFix& fix : r.fixes) {
    std::vector<std::string> set;
    for (const auto& c : fix.changes) set.push_back(c.key + "=" + c.value);
    CHECK(verify_file("plans/default.yaml", set).ok());
  }
  bool use_reentrant_rejected = false;
  for (const auto& rej : r.rejected) {
    use_reentrant_rejected = use_reentrant_rejected || rej.changes.front().key == "gradient_checkpointing_kwargs.use_reentrant";
  }
  CHECK(use_reentrant_rejected);  // the tiled MLP's per-chunk backward still fires twice
}

TEST_CASE("a rank that skips a module leaves the others waiting in a collective", "[ddp]") {
  const VerifyResult r = verify_file("tests/plans/ddp/rank_unused_module.yaml");
  REQUIRE(r.simulation.findings.size() >= 2);
  bool rank1_unfinished = false, rank0_waits = false;
  for (const auto& f : r.simulation.findings) {
    rank1_unfinished = rank1_unfinished || (f.rank == 1 && f.kind == VerdictKind::UnfinishedReduction);
    rank0_waits = rank0_waits || (f.rank == 0 && f.kind == VerdictKind::CollectiveMismatch);
  }
  CHECK(rank1_unfinished);
  CHECK(rank0_waits);
}

TEST_CASE("device_map auto across ranks is a split replica", "[ddp]") {
  const VerifyResult r = verify_file("tests/plans/ddp/plain.yaml", {"device_map=auto"});
  REQUIRE_FALSE(r.ok());
  CHECK(r.simulation.findings.front().kind == VerdictKind::ReplicaSplit);
  REQUIRE_FALSE(r.fixes.empty());
  CHECK(r.fixes.front().changes.front().key == "device_map");
}

TEST_CASE("ranks with identical plans are simulated once, overrides split them", "[ddp]") {
  const VerifyResult same = verify_file("plans/default.yaml", {"hookstream.world_size=64"});
  CHECK(same.simulation.rank_classes.size() == 1);
  const VerifyResult split = verify_file("tests/plans/ddp/rank_unused_module.yaml");
  CHECK(split.simulation.rank_classes.size() == 2);
}

TEST_CASE("each verified fix carries its predicted cost next to the plan's own", "[ddp]") {
  const VerifyResult r = verify_file("plans/default.yaml");
  REQUIRE(r.cost.has_value());
  CHECK(r.cost->device == "H100-SXM");
  CHECK(r.cost->step_seconds > 0);
  CHECK(r.cost->peak_device_bytes > 0);
  REQUIRE_FALSE(r.fixes.empty());
  for (const VerifiedFix& fix : r.fixes) {
    REQUIRE(fix.cost.has_value());
    CHECK(fix.cost->step_seconds > 0);
  }
  // A passing plan needs no fixes and pays for no predictions.
  const VerifyResult clean = verify_file("tests/plans/ddp/plain.yaml");
  CHECK_FALSE(clean.cost.has_value());
}
