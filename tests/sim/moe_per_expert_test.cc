// MoE experts as one module per expert (transformers 4.x, remote code) and the routing check that
// puts an expert without tokens into the gradient-sync models (sim/inputs/architectures/
// per_expert_layout.h, sim/verify/moe_routing_check.h).

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "sim/inputs/input_error.h"
#include "sim/inputs/model_structure.h"
#include "sim/verify/moe_routing_check.h"
#include "sim/verify/verify.h"
#include "tests/sim/plan_text.h"

using namespace hookstream;

namespace {

std::string model(const std::string& name) { return std::string(HOOKSTREAM_SOURCE_DIR) + "/tests/plans/models/" + name; }

// Tiny Mixtral (4 experts, top-2, 2 layers) on 2 ranks, 8 tokens per micro-step.
std::string mixtral(const std::string& extra, const std::string& hookstream_extra = "") {
  return "base_model: " + model("tiny-mixtral.json") +
         "\nsequence_len: 8\nmicro_batch_size: 1\n" + extra +
         "hookstream:\n  world_size: 2\n  iterations: 3\n" + hookstream_extra;
}

const std::string kV4 = "  transformers_version: \"4.57.1\"\n";

VerifyResult verify_text(const std::string& yaml, const LoadOptions& load = {}) {
  VerifyOptions options;
  options.cost_fixes = false;
  return verify_plan(PlanSource{yaml, "plan.yaml", load}, options);
}

std::vector<std::string> names(const ModelStructure& s) {
  std::vector<std::string> out;
  for (const Parameter& p : s.parameters) out.push_back(p.name);
  return out;
}

bool has_fix(const VerifyResult& r, const std::string& key, const std::string& value) {
  return std::any_of(r.fixes.begin(), r.fixes.end(), [&](const VerifiedFix& f) {
    return std::any_of(f.changes.begin(), f.changes.end(),
                       [&](const FixChange& c) { return c.key == key && c.value == value; });
  });
}

}  // namespace

TEST_CASE("per-expert layout: transformers 4.57 builds Mixtral experts as modules of block_sparse_moe", "[moe][structure]") {
  const Plan plan = test::parse(mixtral("", kV4));
  CHECK(plan.transformers_version == "4.57");
  const ModelStructure s = build_model_structure(plan);
  CHECK(s.expert_layout == "per_expert");
  const std::vector<std::string> n = names(s);
  // transformers v4.57 MixtralDecoderLayer: self_attn, block_sparse_moe (gate, experts[i].w1/w2/w3), norms.
  const std::vector<std::string> layer0(n.begin() + 1, n.begin() + 1 + 4 + 1 + 12 + 2);
  const std::vector<std::string> expected{
      "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
      "model.layers.0.self_attn.v_proj.weight", "model.layers.0.self_attn.o_proj.weight",
      "model.layers.0.block_sparse_moe.gate.weight",
      "model.layers.0.block_sparse_moe.experts.0.w1.weight", "model.layers.0.block_sparse_moe.experts.0.w2.weight",
      "model.layers.0.block_sparse_moe.experts.0.w3.weight",
      "model.layers.0.block_sparse_moe.experts.1.w1.weight", "model.layers.0.block_sparse_moe.experts.1.w2.weight",
      "model.layers.0.block_sparse_moe.experts.1.w3.weight",
      "model.layers.0.block_sparse_moe.experts.2.w1.weight", "model.layers.0.block_sparse_moe.experts.2.w2.weight",
      "model.layers.0.block_sparse_moe.experts.2.w3.weight",
      "model.layers.0.block_sparse_moe.experts.3.w1.weight", "model.layers.0.block_sparse_moe.experts.3.w2.weight",
      "model.layers.0.block_sparse_moe.experts.3.w3.weight",
      "model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight"};
  CHECK(layer0 == expected);
  const auto shape = [&](const std::string& name) {
    return s.parameters[size_t(std::find(n.begin(), n.end(), name) - n.begin())].shape;
  };
  CHECK(shape("model.layers.1.block_sparse_moe.gate.weight") == std::vector<int64_t>{4, 16});
  CHECK(shape("model.layers.1.block_sparse_moe.experts.2.w1.weight") == std::vector<int64_t>{24, 16});
  CHECK(shape("model.layers.1.block_sparse_moe.experts.2.w2.weight") == std::vector<int64_t>{16, 24});
  REQUIRE(s.layers[0].experts.size() == 4);
  CHECK(s.layers[0].mlp_module == "block_sparse_moe");
  CHECK(s.layers[0].experts[3].path == "model.layers.0.block_sparse_moe.experts.3");
  CHECK(s.layers[0].experts[3].gate.name == "w1");
  CHECK(s.layers[0].experts[3].up.name == "w3");

  // The default (transformers 5.17) keeps the fused tensors.
  const ModelStructure fused = build_model_structure(test::parse(mixtral("")));
  CHECK(fused.expert_layout == "fused");
  CHECK(fused.layers[0].experts.empty());
  const std::vector<std::string> fn = names(fused);
  CHECK(std::find(fn.begin(), fn.end(), "model.layers.0.mlp.experts.gate_up_proj") != fn.end());
  // Same weights either way: 4 x (w1 + w3) == gate_up_proj, 4 x w2 == down_proj.
  int64_t per_expert_numel = 0, fused_numel = 0;
  for (const Parameter& p : s.parameters) per_expert_numel += p.numel();
  for (const Parameter& p : fused.parameters) fused_numel += p.numel();
  CHECK(per_expert_numel == fused_numel);
}

TEST_CASE("per-expert layout: transformers 4.57 builds MiniMax's experts as Mixtral's modules and DDP sees an idle one", "[moe][structure][routing][ddp]") {
  // v4.57.1 MiniMaxDecoderLayer.block_sparse_moe = MiniMaxSparseMoeBlock (gate, experts[i].w1/w2/w3),
  // not v5's fused mlp.experts.gate_up_proj (tests/sim/architectures/v4-minimax.json is the dump).
  const std::string plan = "base_model: " + model("tiny-minimax.json") +
                           "\nsequence_len: 8\nmicro_batch_size: 1\nddp_find_unused_parameters: false\n"
                           "hookstream:\n  world_size: 2\n  iterations: 3\n";
  const ModelStructure s = build_model_structure(test::parse(plan + kV4));
  CHECK(s.expert_layout == "per_expert");
  CHECK_THAT(s.expert_layout_decided_by, Catch::Contains("models/minimax/modeling_minimax.py MiniMaxSparseMoeBlock"));
  const std::vector<std::string> n = names(s);
  CHECK(std::find(n.begin(), n.end(), "model.layers.1.block_sparse_moe.experts.3.w2.weight") != n.end());
  CHECK(std::find(n.begin(), n.end(), "model.layers.1.mlp.experts.gate_up_proj") == n.end());
  CHECK(build_model_structure(test::parse(plan)).expert_layout == "fused");
  // 8 tokens, top-2 of 4 experts on 2 ranks: an expert can get no token on a rank, so without
  // find_unused_parameters that rank never finishes the expert's reduction.
  const VerifyResult r = verify_text(plan + kV4);
  REQUIRE(r.routing);
  CHECK_FALSE(r.ok());
  bool unfinished = false;
  for (const Finding& f : r.simulation.findings) {
    if (f.kind == VerdictKind::UnfinishedReduction && f.parameter.find("block_sparse_moe.experts.") != std::string::npos) {
      unfinished = true;
    }
  }
  CHECK(unfinished);
}

TEST_CASE("per-expert layout: an MoE type transformers 4.57.1 cannot build or builds undescribed is refused on 4.x", "[moe][structure]") {
  const auto fixture_plan = [](const std::string& name, const std::string& version) {
    std::ifstream in(std::string(HOOKSTREAM_SOURCE_DIR) + "/tests/sim/architectures/" + name + ".json");
    std::stringstream text;
    text << in.rdbuf();
    Plan plan;
    plan.model = parse_model_config(nlohmann::json::parse(text.str()).at("config").dump(), name + "/config.json");
    plan.transformers_version = version;
    return plan;
  };
  const auto refusal = [&](const std::string& name) {
    try {
      build_model_structure(fixture_plan(name, "4.57"));
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // LFM2-MoE is in transformers 5 only: no v4 file to build it from, so never "fused in 4.x too".
  CHECK_THAT(refusal("lfm2_moe"), Catch::Contains("lfm2_moe/config.json") &&
                                      Catch::Contains("key \"hookstream.transformers_version\"") &&
                                      Catch::Contains("cannot build model_type \"lfm2_moe\" (not in transformers v4.57.1"));
  // ERNIE-4.5-MoE v4.57.1: moe_statics and a float32 gate before the per-expert modules.
  CHECK_THAT(refusal("ernie4_5_moe-interval"), Catch::Contains("moe_statics") && Catch::Contains("knows ernie4_5_moe but hookstream cannot model it yet") && Catch::Contains("pin transformers 5.x"));
  // Fused in v4.57.1 with v5's names: built, and said so.
  const ModelStructure gpt_oss = build_model_structure(fixture_plan("gpt_oss", "4.57"));
  CHECK(gpt_oss.expert_layout == "fused");
  CHECK_THAT(gpt_oss.expert_layout_decided_by, Catch::Contains("as v4.57.1 builds them"));
  // transformers 5 builds all of them.
  CHECK_NOTHROW(build_model_structure(fixture_plan("lfm2_moe", "5.17")));
  CHECK_NOTHROW(build_model_structure(fixture_plan("ernie4_5_moe-interval", "5.17")));
}

TEST_CASE("per-expert layout: --transformers-version and bad versions", "[moe][structure]") {
  LoadOptions load;
  load.transformers_version = "4.46";
  CHECK(test::parse(mixtral(""), load).transformers_version == "4.46");
  CHECK(build_model_structure(test::parse(mixtral(""), load)).expert_layout == "per_expert");
  load.transformers_version = "3.5";
  CHECK_THAT(test::parse_error(mixtral(""), load), Catch::Contains("--transformers-version") && Catch::Contains("4.x or 5.x"));
  CHECK_THAT(test::parse_error(mixtral("", "  transformers_version: latest\n")),
             Catch::Contains("hookstream.transformers_version") && Catch::Contains("\"latest\""));
}

TEST_CASE("per-expert layout: remote DeepSeek code (trust_remote_code with auto_map) registers experts, then MoEGate", "[moe][structure]") {
  const std::string base = "base_model: " + model("tiny-deepseek-v3-remote.json") + "\nsequence_len: 8\nmicro_batch_size: 1\n";
  const ModelStructure remote = build_model_structure(test::parse(base + "trust_remote_code: true\n"));
  CHECK(remote.expert_layout == "per_expert");
  CHECK_THAT(remote.expert_layout_decided_by, Catch::Contains("modeling_deepseek.DeepseekV3ForCausalLM"));
  const std::vector<std::string> n = names(remote);
  const auto at = [&](const std::string& name) { return std::find(n.begin(), n.end(), name) - n.begin(); };
  // Layer 0 is dense (first_k_dense_replace 1); layer 1: experts, gate (weight, e_score_correction_bias
  // for topk_method noaux_tc), shared_experts.
  CHECK(at("model.layers.0.mlp.gate_proj.weight") < static_cast<long>(n.size()));
  CHECK(at("model.layers.1.mlp.experts.3.down_proj.weight") < at("model.layers.1.mlp.gate.weight"));
  CHECK(at("model.layers.1.mlp.gate.weight") + 1 == at("model.layers.1.mlp.gate.e_score_correction_bias"));
  CHECK(at("model.layers.1.mlp.gate.e_score_correction_bias") < at("model.layers.1.mlp.shared_experts.gate_proj.weight"));
  // Without trust_remote_code transformers builds its own (fused) class.
  CHECK(build_model_structure(test::parse(base)).expert_layout == "fused");
}

TEST_CASE("per-expert layout: LoRA target_modules match the experts' Linears by suffix, no v5 conversion", "[moe][structure]") {
  const ModelStructure s = build_model_structure(
      test::parse(mixtral("adapter: lora\nlora_r: 2\nlora_target_modules: [w1, w2, w3]\n", kV4)));
  const std::vector<std::string> n = names(s);
  CHECK(std::find(n.begin(), n.end(), "base_model.model.model.layers.1.block_sparse_moe.experts.3.w2.lora_A.default.weight") != n.end());
  CHECK(std::none_of(n.begin(), n.end(), [](const std::string& x) { return x.find("gate_up_proj") != std::string::npos; }));
  int adapters = 0;
  for (const Parameter& p : s.parameters) adapters += p.adapter ? 1 : 0;
  CHECK(adapters == 2 * 2 * 4 * 3);  // layers x experts x (w1, w2, w3) x (A, B)
}

TEST_CASE("MoE routing: the probability over the planned steps and the threshold", "[moe][routing]") {
  const Plan plan = test::parse(mixtral("max_steps: 10\ngradient_accumulation_steps: 2\nsample_packing: true\n", kV4));
  CHECK(plan.sample_packing);
  const ModelStructure s = build_model_structure(plan);
  const auto check = check_moe_routing(plan, s);
  REQUIRE(check);
  CHECK(check->estimate.tokens == 8);
  CHECK_THAT(check->tokens_from, Catch::Contains("sample_packing"));
  CHECK(check->moe_layers == 2);
  CHECK(check->steps == 10);
  CHECK(check->draws == 2 * 2 * 2 * 10);
  const double p = check->estimate.p_any_idle;
  CHECK(check->p_run == Approx(1 - std::pow(1 - p, 80.0)));
  CHECK(check->simulated);
  CHECK(check->cases.size() == 2);

  // 4096 tokens: P(an expert of 4 gets none of top-2) = 4 * 2^-4096, far below the threshold.
  const Plan long_rows = test::parse("base_model: " + model("tiny-mixtral.json") +
                                     "\nsequence_len: 4096\nmicro_batch_size: 1\nhookstream:\n  world_size: 2\n" + kV4);
  const auto quiet = check_moe_routing(long_rows, build_model_structure(long_rows));
  REQUIRE(quiet);
  CHECK(quiet->p_run < kRoutingThreshold);
  CHECK_FALSE(quiet->simulated);
  CHECK(quiet->cases.empty());
  CHECK_THAT(quiet->steps_from, Catch::Contains("1000 steps assumed"));
}

TEST_CASE("MoE routing: a per-expert expert without tokens is an unfinished reduction for DDP without find_unused", "[moe][routing][ddp]") {
  const VerifyResult r = verify_text(mixtral("ddp_find_unused_parameters: false\n", kV4));
  REQUIRE(r.routing);
  CHECK_FALSE(r.ok());
  REQUIRE_FALSE(r.simulation.findings.empty());
  // Rank 1 (expert idle) never marks the expert's bucket ready: its next forward raises; rank 0
  // all-reduces that bucket alone and blocks until the timeout.
  const auto on_rank = [&](int rank) {
    for (const Finding& x : r.simulation.findings) {
      if (x.rank == rank) return x;
    }
    return Finding{};
  };
  CHECK(on_rank(0).kind == VerdictKind::CollectiveMismatch);
  const Finding f = on_rank(1);
  CHECK(f.kind == VerdictKind::UnfinishedReduction);
  CHECK(f.iteration == 2);
  CHECK_THAT(f.parameter, Catch::Contains("block_sparse_moe.experts.3."));
  CHECK_THAT(f.error_text, Catch::Contains("Expected to have finished reduction in the prior iteration"));
  CHECK_THAT(f.explanation, Catch::Contains("MoE routing") && Catch::Contains("expert 3 of layer 0"));
  REQUIRE(r.routing->cases.size() == 2);
  CHECK(r.routing->cases[0].ranks == std::vector<int>{1});
  CHECK(r.routing->cases[0].parameters.size() == 3);
  // Fixes in the user's keys, re-verified against the adverse step.
  CHECK(has_fix(r, "ddp_find_unused_parameters", "true"));
  CHECK(has_fix(r, "hookstream.transformers_version", "\"5.17\""));
}

TEST_CASE("MoE routing: find_unused_parameters handles an idle expert, fused experts never idle a parameter", "[moe][routing][ddp]") {
  const VerifyResult found = verify_text(mixtral("ddp_find_unused_parameters: true\n", kV4));
  REQUIRE(found.routing);
  CHECK(found.routing->simulated);
  CHECK(found.ok());
  const VerifyResult fused = verify_text(mixtral("ddp_find_unused_parameters: false\n"));
  REQUIRE(fused.routing);
  CHECK(fused.routing->layout == "fused");
  CHECK_FALSE(fused.routing->simulated);
  CHECK(fused.ok());
  CHECK_THAT(fused.routing->summary(), Catch::Contains("never an unused parameter"));
}

TEST_CASE("MoE routing: static_graph sees the graph change when an expert idles in one step", "[moe][routing][ddp]") {
  const VerifyResult r = verify_text(mixtral("ddp_find_unused_parameters: false\n", kV4 + "  static_graph: true\n"));
  REQUIRE(r.routing);
  CHECK_FALSE(r.ok());
  CHECK_FALSE(r.routing->cases.front().simulation.ok());
}

TEST_CASE("MoE routing: FSDP2 ranks diverge when one rank's expert idles", "[moe][routing][fsdp2]") {
  const VerifyResult fsdp2 = verify_text(mixtral("fsdp_version: 2\nfsdp_config:\n  reshard_after_forward: true\n", kV4));
  REQUIRE(fsdp2.routing);
  REQUIRE(fsdp2.routing->simulated);
  CHECK_FALSE(fsdp2.routing->cases.front().simulation.ok());
  CHECK_FALSE(fsdp2.ok());
}
