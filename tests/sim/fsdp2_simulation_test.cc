// The FSDP2 model without the oracle (fast): bad wrapping input, the DETAIL text of a
// rank-divergent reduce-scatter, the silent wrong gradient of an FSDP unit inside a tiled MLP and
// its verified fix in fsdp_config. tests/runtime/fsdp2_differential_test.cc holds these against
// real fully_shard.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "sim/inputs/input_error.h"
#include "sim/verify/verify.h"

namespace hookstream {
namespace {

const std::string kFsdp2 =
    "base_model: tiny-llama\nsequence_len: 8\nmicro_batch_size: 1\nfsdp_version: 2\nfsdp_config:\n"
    "  transformer_layer_cls_to_wrap: {}\n  reshard_after_forward: true\n";

std::string plan(const std::string& classes, const std::string& more, const std::string& hookstream = "") {
  std::string text = kFsdp2;
  text.replace(text.find("{}"), 2, classes);
  return text + more + "hookstream:\n  world_size: 2\n  iterations: 2\n" + hookstream;
}

VerifyResult run(const std::string& text, bool fixes = false) {
  VerifyOptions options;
  options.search_fixes = fixes;
  options.cost_fixes = false;
  LoadOptions load;
  load.torch_version = "2.11";
  return verify_plan(PlanSource{text, "plan.yaml", load}, options);
}

}  // namespace

TEST_CASE("FSDP2: a wrap class the model lacks is one line naming the key's line with exit 2", "[fsdp2]") {
  try {
    run(plan("Qwen3MoeDecoderLayer", ""));
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()) ==
          "plan.yaml:6: transformer_layer_cls_to_wrap names 'Qwen3MoeDecoderLayer', a class llama does not have "
          "(expected its decoder layer LlamaDecoderLayer or its MLP class)");
  }
  CHECK(run(plan("LlamaDecoderLayer", "")).ok());
}

TEST_CASE("FSDP2: a GPT-style decoder is wrapped by its own layer class (GPT2Block)", "[fsdp2]") {
  // GPT2Model's layers are GPT2Block (_no_split_modules), not <Model>DecoderLayer.
  const std::filesystem::path config =
      std::filesystem::temp_directory_path() / ("hookstream-fsdp2-gpt2-" + std::to_string(::getpid()) + ".json");
  std::ofstream(config) << R"({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 64, "n_layer": 2,
      "n_head": 4, "vocab_size": 100, "n_positions": 32, "torch_dtype": "float32"})";
  std::string text = plan("GPT2Block", "");
  text.replace(text.find("tiny-llama"), 10, config.string());
  CHECK(run(text).ok());
  std::string wrong = plan("GPT2DecoderLayer", "");
  wrong.replace(wrong.find("tiny-llama"), 10, config.string());
  CHECK_THROWS_WITH(run(wrong), Catch::Contains("expected its decoder layer GPT2Block or its MLP class"));
  std::filesystem::remove(config);
}

TEST_CASE("FSDP2: a vision-language model wraps its text type's layer class and names its tower's", "[fsdp2]") {
  // LlavaModel builds language_model with AutoModel.from_config(text_config): LlamaDecoderLayer, not
  // LlavaDecoderLayer; the CLIP tower's CLIPEncoderLayer is named but not its own unit.
  const std::string model = std::string(HOOKSTREAM_SOURCE_DIR) + "/tests/plans/models/tiny-llava.json";
  std::string text = plan("[LlamaDecoderLayer, CLIPEncoderLayer]", "");
  text.replace(text.find("tiny-llama"), 10, model);
  const VerifyResult r = run(text);
  CHECK(r.ok());
  std::string wrong = plan("LlavaDecoderLayer", "");
  wrong.replace(wrong.find("tiny-llama"), 10, model);
  CHECK_THROWS_WITH(run(wrong), Catch::Contains("a class llava does not have (expected its decoder layer LlamaDecoderLayer"));
}

TEST_CASE("FSDP2: rank-divergent unused parameters are a reduce-scatter mismatch with DETAIL's text", "[fsdp2]") {
  const VerifyResult r = run(plan("LlamaDecoderLayer", "", "  rank_overrides:\n    1:\n      unused_modules: [model.layers.2.mlp]\n"));
  REQUIRE(r.simulation.findings.size() == 2);
  const Finding& f = r.simulation.findings.front();
  CHECK(f.kind == VerdictKind::CollectiveMismatch);
  CHECK(f.iteration == 0);
  CHECK(f.error_text.rfind("Detected mismatch between collectives on ranks. Rank 0 is running collective: ", 0) == 0);
  CHECK(f.error_text.find("Collectives differ in the following aspects:   Tensor Tensor shapes: 2336vs 784") != std::string::npos);
}

TEST_CASE("FSDP2: an FSDP unit inside the tiled MLP loses tiles 2..N silently and wrapping the layer only is the fix", "[fsdp2]") {
  const std::string text = plan("LlamaDecoderLayer, LlamaMLP", "tiled_mlp: true\ntiled_mlp_num_shards: 2\n",
                                "  tiled_mlp_backward: per_chunk_backward\n");
  const VerifyResult r = run(text, true);
  REQUIRE_FALSE(r.ok());
  const Finding& f = r.simulation.findings.front();
  CHECK(f.kind == VerdictKind::WrongGradient);
  CHECK(f.parameter == "model.layers.0.mlp.gate_proj.weight");
  REQUIRE(f.graph_tasks.size() == 1);
  CHECK(f.graph_tasks[0] == "tiled_mlp chunk 2 of 2 (layer 0) (nested, depth 1)");
  // 3 all-gathers of an MLP unit per tile count of 2 in iteration 0 (2 forward calls, 1 prefetch,
  // 1 re-unshard for tile 2 - one forward call finds it unsharded): an extra one each step.
  CHECK_FALSE(r.simulation.warnings.empty());
  CHECK(r.simulation.warnings.front().kind == VerdictKind::ExtraCollectives);
  REQUIRE_FALSE(r.fixes.empty());
  CHECK(r.fixes.front().changes.front().key == "fsdp_config.transformer_layer_cls_to_wrap");
  CHECK(r.fixes.front().changes.front().value == "LlamaDecoderLayer");
}

}  // namespace hookstream
