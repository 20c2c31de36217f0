// `hookstream inspect`: parameters as DDP orders them with the keys that decided each, JSON per
// docs/inspect-json.md, byte-identical output, models from the HF cache checked against their
// safetensors headers, and the one-line refusals.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "tests/cli/run_binary.h"
#include "tests/temp_dir.h"

namespace {
namespace fs = std::filesystem;
using Run = hookstream::testing::BinaryRun;
Run run(const std::string& args) { return hookstream::testing::run_binary(args); }
std::string src(const std::string& relative) { return std::string(HOOKSTREAM_SOURCE_DIR) + "/" + relative; }

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}
}  // namespace

TEST_CASE("inspect lists the default plan's parameters in DDP order with what decided each", "[cli][inspect]") {
  const Run r = run("inspect " + src("plans/default.yaml") + " --format json");
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  const auto& parameters = j["parameters"];
  REQUIRE(parameters.size() > 500);
  int ddp = 0, trainable = 0;
  for (const auto& p : parameters) {
    if (p["trainable"] == true) {
      CHECK(p["ddp_index"] == ddp++);  // DDP indexes the trainable parameters in named_parameters() order
      CHECK(p["bucket"].is_number());
      ++trainable;
    } else {
      CHECK(p["ddp_index"].is_null());
    }
  }
  CHECK(j["totals"]["trainable"]["tensors"] == trainable);
  // The README's example parameter: #713, the last layer's down_proj LoRA B (lora_target_linear
  // adapts the vision tower's Linears too, as axolotl does, so they come first).
  const std::string name = "base_model.model.model.language_model.layers.35.mlp.down_proj.lora_B.default.weight";
  const auto it = std::find_if(parameters.begin(), parameters.end(), [&](const auto& p) { return p["name"] == name; });
  REQUIRE(it != parameters.end());
  CHECK((*it)["ddp_index"] == 713);
  CHECK((*it)["dtype"] == "float32");
  CHECK((*it)["decided_by"][0].get<std::string>().find("lora_target_linear: true (every Linear but the head) matched") != std::string::npos);
  CHECK(j["model"]["model_type"] == "qwen3_vl");
  CHECK(j["checkpoint"].is_null());  // a preset has no checkpoint beside it
  // Deterministic: the same bytes twice; text as well.
  CHECK(run("inspect " + src("plans/default.yaml") + " --format json").out == r.out);
  const Run text = run("inspect " + src("plans/default.yaml"));
  CHECK(text.exit_code == 0);
  CHECK(text.out.find("frozen") != std::string::npos);
  CHECK(text.out == run("inspect " + src("plans/default.yaml")).out);
}

TEST_CASE("inspect names unfrozen_parameters, 4-bit and tied decisions", "[cli][inspect]") {
  hookstream::test::TempDir dir("hookstream-inspect-" + std::to_string(::getpid()));
  write(dir / "plan.yaml", "base_model: " + src("tests/plans/models/tiny-llama-tied.json") +
                               "\nadapter: qlora\nload_in_4bit: true\nlora_target_modules: [q_proj]\n"
                               "unfrozen_parameters: ['model\\.norm\\.']\n");
  const Run r = run("inspect " + (dir / "plan.yaml").string() + " --format json");
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  bool saw_quantized = false, saw_unfrozen = false, saw_tied = false;
  for (const auto& p : j["parameters"]) {
    const std::string all = p["decided_by"].dump();
    if (p["quantized"] == "nf4") saw_quantized = all.find("4-bit nf4") != std::string::npos;
    if (p["name"] == "base_model.model.model.norm.weight") {
      saw_unfrozen = p["trainable"] == true && all.find("unfrozen_parameters: \\\"model\\\\.norm\\\\.\\\" matched") != std::string::npos;
    }
    if (!p["tied"].empty()) saw_tied = p["tied"][0] == "base_model.model.lm_head.weight" && all.find("tie_word_embeddings") != std::string::npos;
  }
  CHECK(saw_quantized);
  CHECK(saw_unfrozen);
  CHECK(saw_tied);
}

TEST_CASE("inspect reads a model from the HF cache and checks it against its safetensors", "[cli][inspect]") {
  hookstream::test::TempDir dir("hookstream-inspect-hub-" + std::to_string(::getpid()));
  std::ifstream preset(src("presets/tiny-llama.json"));
  const std::string config((std::istreambuf_iterator<char>(preset)), {});
  const fs::path snapshot = dir / "hub/models--acme--tiny/snapshots/c0ffee";
  write(dir / "hub/models--acme--tiny/refs/main", "c0ffee");
  write(snapshot / "config.json", config);
  // An index naming a tensor hookstream does not build, its shard not downloaded.
  write(snapshot / "model.safetensors.index.json",
        R"({"weight_map": {"model.embed_tokens.weight": "model-1.safetensors", "model.extra.weight": "model-1.safetensors"}})");
  write(dir / "plan.yaml", "base_model: acme/tiny\n");
  const std::string env = "HF_HUB_CACHE=" + (dir / "hub").string() + " ";
  const Run r = hookstream::testing::run_command(env + HOOKSTREAM_BINARY + " inspect " + (dir / "plan.yaml").string() + " --format json");
  REQUIRE(r.exit_code == 1);  // the structure differs from the checkpoint
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["model"]["from"] == "hf_cache");
  CHECK(j["checkpoint"]["missing_shards"][0] == "model-1.safetensors");
  CHECK(j["checkpoint"]["matches"] == false);
  bool extra = false;
  for (const auto& d : j["checkpoint"]["differences"]) extra = extra || (d["name"] == "model.extra.weight" && d["what"] == "not built by hookstream");
  CHECK(extra);
  const Run text = hookstream::testing::run_command(env + HOOKSTREAM_BINARY + " inspect " + (dir / "plan.yaml").string());
  CHECK(text.out.find("MISMATCH") != std::string::npos);
  // verify's verdict rests on the same structure: the mismatch is said there too.
  const Run verify = hookstream::testing::run_command(env + HOOKSTREAM_BINARY + " verify " + (dir / "plan.yaml").string());
  CHECK(verify.out.find("warning: hookstream's structure of " + (snapshot / "config.json").string() +
                        " differs from the checkpoint") != std::string::npos);

  write(dir / "missing.yaml", "base_model: acme/absent\n");
  const Run missing = hookstream::testing::run_command(env + HOOKSTREAM_BINARY + " inspect " + (dir / "missing.yaml").string());
  CHECK(missing.exit_code == 2);
  CHECK(std::count(missing.out.begin(), missing.out.end(), '\n') == 1);
  CHECK(missing.out.find("models--acme--absent") != std::string::npos);
  CHECK(missing.out.find("--model") != std::string::npos);
}

TEST_CASE("inspect refuses a model type it cannot model, with exit 2 and one line", "[cli][inspect]") {
  hookstream::test::TempDir dir("hookstream-inspect-type-" + std::to_string(::getpid()));
  write(dir / "hy_v4/config.json", R"({"model_type": "hy_v4", "hidden_size": 64})");
  write(dir / "plan.yaml", "base_model: hy_v4\n");
  const Run r = run("inspect " + (dir / "plan.yaml").string() + " -o " + (dir / "out.json").string());
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("knows \"hy_v4\"; hookstream cannot model it yet") != std::string::npos);
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 1);
  CHECK_FALSE(fs::exists(dir / "out.json"));
}
