// Expected verdicts here are PyTorch's own (test_ddp_checkpointing_* in
// torch/testing/_internal/distributed/distributed_test.py, and the cases in
// ../shared/docs/ddp-reducer-model.md); the differential test checks every plan against the real
// Reducer as well.
#include <map>

#include <catch2/catch.hpp>

#include "sim/inputs/input_error.h"
#include "sim/verify/verify.h"

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

namespace {
VerifyResult verify_version(const std::string& relative, const std::string& version, std::vector<std::string> set = {}) {
  LoadOptions options;
  options.set = std::move(set);
  options.torch_version = version;
  return verify_plan(read_plan_source(std::string(HOOKSTREAM_SOURCE_DIR) + "/" + relative, options));
}
}  // namespace

TEST_CASE("a norm whose output feeds nothing is unused as DDP sees it, not missing a gradient", "[ddp]") {
  // Layer 3's MLP is skipped: its post_attention_layernorm still runs, but its output feeds
  // nothing. find_unused_parameters marks it unused and the run trains; without it the bucket
  // never completes.
  CHECK(first_kind(verify_file("tests/plans/ddp/unused_module_find_unused.yaml")) == VerdictKind::Ok);
  CHECK(first_kind(verify_file("tests/plans/ddp/unused_module.yaml")) == VerdictKind::UnfinishedReduction);
  const VerifyResult r = verify_file("tests/plans/ddp/unused_module_find_unused.yaml");
  const std::vector<bool>& fed = r.simulation.fed_loss.at(0);
  bool norm_fed = true, down_fed = true, attention_fed = false;
  for (size_t i = 0; i < fed.size(); ++i) {
    const std::string& name = r.structure.ddp_parameter(static_cast<int>(i)).name;
    if (name == "model.layers.3.post_attention_layernorm.weight") norm_fed = fed[i];
    if (name == "model.layers.3.mlp.down_proj.weight") down_fed = fed[i];
    if (name == "model.layers.3.self_attn.q_proj.weight") attention_fed = fed[i];
  }
  CHECK_FALSE(norm_fed);
  CHECK_FALSE(down_fed);
  CHECK(attention_fed);
  // A parameter that feeds the loss without a grad_fn (a reentrant checkpoint over frozen inputs) is
  // still a missing gradient.
  CHECK(first_kind(verify_file("tests/plans/ddp/lora_reentrant_frozen_inputs.yaml",
                               {"ddp_find_unused_parameters=true"})) == VerdictKind::NoGradient);
}

TEST_CASE("tiled_mlp_layers tiles only the listed layers", "[ddp][tiled]") {
  // LoRA with a per-chunk tiled MLP on layer 0 only: layer 0's adapters are the backward's last
  // gradients, so chunk 1's nested backward completes the last bucket, finalize runs at its end and
  // chunk 2's gradients stay local (real DDP 2.11 and the 1.13 Reducer agree: the differential
  // tests). Tiling every layer, layer 3's chunks mark its adapters twice first.
  const VerifyResult first = verify_file("tests/plans/ddp/lora_tiled_first_layer_per_chunk.yaml");
  REQUIRE_FALSE(first.ok());
  CHECK(first.plan.layer_tiled(0));
  CHECK_FALSE(first.plan.layer_tiled(1));
  CHECK(first.simulation.findings.front().kind == VerdictKind::SilentDivergence);
  CHECK(first.simulation.findings.front().parameter ==
        "base_model.model.model.layers.0.mlp.gate_proj.lora_A.default.weight");
  const VerifyResult all = verify_file("tests/plans/ddp/lora_tiled_first_layer_per_chunk.yaml",
                                       {"hookstream.tiled_mlp_layers=all"});
  REQUIRE_FALSE(all.ok());
  CHECK(all.simulation.findings.front().kind == VerdictKind::MarkedReadyTwice);
  CHECK(all.simulation.findings.front().layer == 3);
  // Ranges: layers 1-2 tiled, the findings name only those layers.
  const VerifyResult some = verify_file("tests/plans/ddp/tiled_some_layers_per_chunk.yaml");
  REQUIRE_FALSE(some.ok());
  CHECK(some.plan.layer_tiled(1));
  CHECK(some.plan.layer_tiled(2));
  CHECK_FALSE(some.plan.layer_tiled(0));
  CHECK_FALSE(some.plan.layer_tiled(3));
  CHECK(some.simulation.findings.front().layer == 2);
}

TEST_CASE("micro_step_overrides: a module used only inside no_sync, per PyTorch version", "[ddp][versions]") {
  // 1.13 to 2.3 mark local_used_map_ only when hooks are expected: the module's gradient (from the
  // no_sync micro-step) is left local at finalize. 2.4+ (PR #124193) counts the use and reduces it.
  const VerifyResult old = verify_version("tests/plans/ddp/no_sync_only_module_find_unused.yaml", "1.13");
  REQUIRE_FALSE(old.ok());
  CHECK(old.simulation.findings.front().kind == VerdictKind::SilentDivergence);
  CHECK(old.simulation.findings.front().parameter.find("model.layers.2.mlp.") == 0);
  CHECK(first_kind(verify_version("tests/plans/ddp/no_sync_only_module_find_unused.yaml", "2.3")) ==
        VerdictKind::SilentDivergence);
  CHECK(first_kind(verify_version("tests/plans/ddp/no_sync_only_module_find_unused.yaml", "2.4")) == VerdictKind::Ok);
  CHECK(first_kind(verify_version("tests/plans/ddp/no_sync_only_module_find_unused.yaml", "2.11")) == VerdictKind::Ok);
  // Used only in the synced micro-step: fine everywhere. Without find_unused: unfinished everywhere.
  CHECK(first_kind(verify_version("tests/plans/ddp/synced_only_module_find_unused.yaml", "1.13")) == VerdictKind::Ok);
  CHECK(first_kind(verify_version("tests/plans/ddp/no_sync_only_module.yaml", "1.13")) == VerdictKind::UnfinishedReduction);
  CHECK(first_kind(verify_version("tests/plans/ddp/no_sync_only_module.yaml", "2.11")) == VerdictKind::UnfinishedReduction);
}

TEST_CASE("static graph + gradient accumulation asserts in both versions, where and with what text", "[ddp][versions]") {
  const VerifyResult old = verify_version("tests/plans/ddp/static_graph_accumulation_assert.yaml", "1.13");
  REQUIRE_FALSE(old.ok());
  const Finding& a = old.simulation.findings.front();
  CHECK(a.kind == VerdictKind::ReducerAssert);
  CHECK(a.iteration == 1);
  CHECK(a.micro_step == 0);
  CHECK(a.error_text.find("reducer.cpp\":1490") != std::string::npos);
  const VerifyResult now = verify_version("tests/plans/ddp/static_graph_accumulation_assert.yaml", "2.11");
  REQUIRE_FALSE(now.ok());
  const Finding& b = now.simulation.findings.front();
  CHECK(b.kind == VerdictKind::ReducerAssert);
  CHECK(b.iteration == 0);
  CHECK(b.micro_step == 0);
  CHECK(b.error_text ==
        "expect_autograd_hooks_ INTERNAL ASSERT FAILED at \"/pytorch/torch/csrc/distributed/c10d/reducer.cpp\":1705, "
        "please report a bug to PyTorch. ");
  CHECK(b.explanation.find("2.1") != std::string::npos);
}

TEST_CASE("the default PyTorch version is 2.11, 1.13 and 2.0-2.11 are accepted, others refused", "[ddp][versions]") {
  CHECK(verify_file("tests/plans/ddp/plain.yaml").plan.torch_version == (TorchVersion{2, 11}));
  CHECK(verify_version("tests/plans/ddp/plain.yaml", "1.13.1").plan.torch_version == (TorchVersion{1, 13}));
  CHECK(verify_version("tests/plans/ddp/plain.yaml", "2.4.0+cu121").plan.torch_version == (TorchVersion{2, 4}));
  CHECK(verify_file("tests/plans/ddp/plain.yaml", {"hookstream.torch_version=\"2.1\""}).plan.torch_version ==
        (TorchVersion{2, 1}));
  for (const std::string bad : {"1.12", "2.12", "3.0", "two", "2", "2.11.0.1", ""}) {
    INFO(bad);
    try {
      verify_version("tests/plans/ddp/plain.yaml", bad);
      FAIL("accepted");
    } catch (const InputError& e) {
      const std::string what = e.what();
      CHECK(what.rfind("--torch-version: ", 0) == 0);
      CHECK(what.find("1.13 or 2.0 to 2.11") != std::string::npos);
      CHECK(what.find('\n') == std::string::npos);
    }
  }
  try {
    verify_file("tests/plans/ddp/plain.yaml", {"hookstream.torch_version=\"2.12\""});
    FAIL("accepted");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("hookstream.torch_version") != std::string::npos);
  }
}

TEST_CASE("GLM-OCR's tower feeds the loss whole, MiniMax-M3's indexer never gets a gradient", "[ddp][architecture]") {
  // GlmOcrVisionAttention norms q and k of the fused qkv's output: used, like every tower
  // parameter and the merger (the features are the merger's output).
  const VerifyResult glm = verify_file("tests/plans/ddp_vision/glm_ocr_full.yaml");
  CHECK(first_kind(glm) == VerdictKind::Ok);
  const std::vector<bool>& fed = glm.simulation.fed_loss.at(0);
  std::map<std::string, bool> by_name;
  for (size_t i = 0; i < fed.size(); ++i) by_name[glm.structure.ddp_parameter(static_cast<int>(i)).name] = fed[i];
  CHECK(by_name.at("model.visual.blocks.1.attn.q_norm.weight"));
  CHECK(by_name.at("model.visual.blocks.1.attn.k_norm.weight"));
  CHECK(by_name.at("model.visual.merger.down_proj.weight"));
  CHECK(by_name.at("model.visual.downsample.weight"));
  // MiniMaxM3VLIndexer returns integer block indices that build the attention mask.
  const VerifyResult m3 = verify_file("tests/plans/ddp_architectures/minimax_m3_indexer.yaml");
  REQUIRE(first_kind(m3) == VerdictKind::UnfinishedReduction);
  CHECK(m3.simulation.findings.front().parameter == "model.layers.0.self_attn.indexer.q_proj.weight");
  CHECK(first_kind(verify_file("tests/plans/ddp_architectures/minimax_m3_indexer.yaml", {"ddp_find_unused_parameters=true"})) ==
        VerdictKind::Ok);
}

TEST_CASE("LLaVA's CLIP tower: the layers after vision_feature_layer and post_layernorm feed no gradient", "[ddp][architecture]") {
  // LlavaModel.get_image_features reads hidden_states[-2]: the tower's last layer runs, its output
  // (and CLIPVisionTransformer's post_layernorm on the pooled token) never reaches the loss. A full
  // fine-tune without find_unused_parameters never finishes its reduction; with it, it trains.
  CHECK(first_kind(verify_file("tests/plans/ddp_vision/llava_feature_layer.yaml")) == VerdictKind::UnfinishedReduction);
  const VerifyResult r = verify_file("tests/plans/ddp_vision/llava_feature_layer_find_unused.yaml");
  CHECK(first_kind(r) == VerdictKind::Ok);
  const std::vector<bool>& fed = r.simulation.fed_loss.at(0);
  std::map<std::string, bool> by_name;
  for (size_t i = 0; i < fed.size(); ++i) by_name[r.structure.ddp_parameter(static_cast<int>(i)).name] = fed[i];
  CHECK(by_name.at("model.vision_tower.embeddings.patch_embedding.weight"));
  CHECK(by_name.at("model.vision_tower.embeddings.class_embedding"));
  CHECK(by_name.at("model.vision_tower.encoder.layers.1.self_attn.k_proj.weight"));
  CHECK(by_name.at("model.multi_modal_projector.linear_2.bias"));
  CHECK_FALSE(by_name.at("model.vision_tower.encoder.layers.2.self_attn.q_proj.weight"));
  CHECK_FALSE(by_name.at("model.vision_tower.encoder.layers.2.layer_norm2.bias"));
  CHECK_FALSE(by_name.at("model.vision_tower.post_layernorm.weight"));
  CHECK(by_name.at("model.language_model.layers.1.mlp.down_proj.weight"));
}
