// Tests for sim/model_source: base_model found where transformers/huggingface_hub find it (local
// path, the HF cache with refs and revisions, presets), the one-line not-found message, safetensors
// headers, the checkpoint compared with hookstream's structure, and the modelled-type refusal.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "sim/inputs/input_error.h"
#include "sim/inputs/model_source/checkpoint_layout.h"
#include "sim/inputs/model_source/hf_hub.h"
#include "sim/inputs/model_source/model_types.h"
#include "sim/inputs/model_source/safetensors_header.h"
#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"
#include "tests/temp_dir.h"

namespace hookstream {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const InputError& error) {
    return error.what();
  }
  FAIL("no InputError");
  return "";
}

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

std::string tiny_llama() {
  std::ifstream file(std::string(HOOKSTREAM_SOURCE_DIR) + "/presets/tiny-llama.json");
  return std::string(std::istreambuf_iterator<char>(file), {});
}

// A safetensors file whose data section is zeros: `tensors` is {name: {dtype, shape}}.
void write_safetensors(const fs::path& path, const nlohmann::json& tensors) {
  nlohmann::json header = nlohmann::json::object();
  int64_t offset = 0;
  for (auto it = tensors.begin(); it != tensors.end(); ++it) {
    int64_t numel = 1;
    for (int64_t d : it.value()["shape"]) numel *= d;
    const int64_t bytes = numel * safetensors_dtype_bits(it.value()["dtype"]) / 8;
    header[it.key()] = {{"dtype", it.value()["dtype"]}, {"shape", it.value()["shape"]}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  const std::string text = header.dump();
  std::string out(8, '\0');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i, n >>= 8) out[static_cast<size_t>(i)] = static_cast<char>(n & 0xff);
  out += text + std::string(static_cast<size_t>(offset), '\0');
  write(path, out);
}

HubEnvironment cache_at(const fs::path& cache) {
  HubEnvironment environment;
  environment.hf_hub_cache = cache.string();
  return environment;
}

TEST_CASE("the hub cache directory follows huggingface_hub's constants", "[model_source]") {
  HubEnvironment environment;
  environment.home = "/home/u";
  CHECK(hub_cache_dir(environment) == "/home/u/.cache/huggingface/hub");
  environment.xdg_cache_home = "/xdg";
  CHECK(hub_cache_dir(environment) == "/xdg/huggingface/hub");
  environment.hf_home = "~/hf";
  CHECK(hub_cache_dir(environment) == "/home/u/hf/hub");
  environment.huggingface_hub_cache = "/legacy";
  CHECK(hub_cache_dir(environment) == "/legacy");
  environment.hf_hub_cache = "/new";
  CHECK(hub_cache_dir(environment) == "/new");
}

TEST_CASE("repo ids are validated as huggingface_hub does", "[model_source]") {
  CHECK(is_hub_repo_id("Qwen/Qwen3-8B"));
  CHECK(is_hub_repo_id("gpt2"));
  CHECK_FALSE(is_hub_repo_id("a/b/c"));
  CHECK_FALSE(is_hub_repo_id("foo--bar"));
  CHECK_FALSE(is_hub_repo_id("org/.name"));
  CHECK_FALSE(is_hub_repo_id("org/name.git"));
  CHECK_FALSE(is_hub_repo_id("./config.json"));
}

TEST_CASE("base_model resolves through the HF cache: refs/main, a branch, a commit", "[model_source]") {
  TempDir dir("hookstream-hub-" + std::to_string(::getpid()));
  const fs::path repo = dir / "hub/models--acme--Small-Model";
  write(repo / "refs/main", "abc123");  // no newline, as huggingface_hub writes it
  write(repo / "refs/dev", "def456");
  write(repo / "snapshots/abc123/config.json", tiny_llama());
  write(repo / "snapshots/def456/config.json", tiny_llama());
  ModelLookup lookup;
  lookup.plan_dir = dir.string();
  lookup.environment = cache_at(dir / "hub");
  ModelLocation main = locate_model("acme/Small-Model", lookup, "plan.yaml", "base_model");
  CHECK(main.kind == ModelSourceKind::HubCache);
  CHECK(main.revision == "abc123");
  CHECK(main.config_path == (repo / "snapshots/abc123/config.json").string());
  CHECK(main.model_dir == (repo / "snapshots/abc123").string());
  lookup.revision = "dev";
  CHECK(locate_model("acme/Small-Model", lookup, "p", "base_model").revision == "def456");
  lookup.revision = "abc123";  // a commit: no ref of that name, the snapshot directly
  CHECK(locate_model("acme/Small-Model", lookup, "p", "base_model").revision == "abc123");
  lookup.revision = "v2";
  const std::string missing = error_of([&] { locate_model("acme/Small-Model", lookup, "plan.yaml:1", "base_model"); });
  CHECK(missing.find("plan.yaml:1: key \"base_model\": cannot find model \"acme/Small-Model\"") == 0);
  CHECK(missing.find((repo / "refs/v2").string()) != std::string::npos);
  CHECK(missing.find("--model") != std::string::npos);
  CHECK(missing.find('\n') == std::string::npos);
}

TEST_CASE("a model not found names every place looked and how to pass --model", "[model_source]") {
  TempDir dir("hookstream-hub-missing-" + std::to_string(::getpid()));
  ModelLookup lookup;
  lookup.plan_dir = dir.string();
  lookup.environment = cache_at(dir / "hub");
  const std::string message = error_of([&] { locate_model("acme/Nope-7B", lookup, "plan.yaml:2", "base_model"); });
  CHECK(message.find((dir / "acme/Nope-7B").string()) != std::string::npos);                       // the plan's folder
  CHECK(message.find("Hugging Face cache " + (dir / "hub").string()) != std::string::npos);       // the cache
  CHECK(message.find((dir / "hub/models--acme--Nope-7B").string()) != std::string::npos);         // the repo folder
  CHECK(message.find("no preset (") != std::string::npos);                                       // the presets
  CHECK(message.find("pass --model PATH/config.json") != std::string::npos);
}

TEST_CASE("a local model folder wins over the cache, and presets are the fallback", "[model_source]") {
  TempDir dir("hookstream-hub-local-" + std::to_string(::getpid()));
  write(dir / "acme/Tiny-Llama/config.json", tiny_llama());
  write(dir / "hub/models--acme--Tiny-Llama/snapshots/abc/config.json", tiny_llama());
  write(dir / "hub/models--acme--Tiny-Llama/refs/main", "abc");
  ModelLookup lookup;
  lookup.plan_dir = dir.string();
  lookup.environment = cache_at(dir / "hub");
  ModelLocation local = locate_model("acme/Tiny-Llama", lookup, "p", "base_model");
  CHECK(local.kind == ModelSourceKind::Path);
  CHECK(local.model_dir == (dir / "acme/Tiny-Llama").string());
  CHECK(locate_model("meta-llama/Llama-3.1-8B", lookup, "p", "base_model").kind == ModelSourceKind::Preset);
}

TEST_CASE("safetensors headers: names, shapes, dtypes, and damaged headers as one-line errors", "[model_source]") {
  TempDir dir("hookstream-safetensors-" + std::to_string(::getpid()));
  write_safetensors(dir / "a.safetensors", {{"w", {{"dtype", "BF16"}, {"shape", {2, 3}}}},
                                            {"f8", {{"dtype", "F8_E4M3"}, {"shape", {4}}}}});
  const SafetensorsHeader header = read_safetensors_header((dir / "a.safetensors").string());
  REQUIRE(header.entries.size() == 2);
  CHECK(header.entries.at("w").shape == std::vector<int64_t>{2, 3});
  CHECK(header.entries.at("f8").dtype == "F8_E4M3");
  write(dir / "short.safetensors", "abc");
  CHECK(error_of([&] { read_safetensors_header((dir / "short.safetensors").string()); }).find("truncated") != std::string::npos);
  write_safetensors(dir / "bad.safetensors", {{"w", {{"dtype", "Q4"}, {"shape", {2}}}}});
  CHECK(error_of([&] { read_safetensors_header((dir / "bad.safetensors").string()); }) ==
        (dir / "bad.safetensors").string() + ": tensor w: unsupported dtype Q4");
}

TEST_CASE("the checkpoint in a model folder is compared with hookstream's structure", "[model_source]") {
  TempDir dir("hookstream-checkpoint-" + std::to_string(::getpid()));
  const std::string config = (dir / "model/config.json").string();
  write(config, tiny_llama());
  Plan plan = parse_plan("base_model: " + config + "\nadapter: lora\nlora_target_modules: [q_proj]\n", "plan.yaml");
  CHECK(model_dir_of(plan.model.source) == (dir / "model").string());
  const ModelStructure structure = build_model_structure(plan);
  // The checkpoint as save_pretrained writes it: every base tensor, under its module name.
  nlohmann::json tensors = nlohmann::json::object();
  for (const Parameter& p : structure.parameters) {
    const std::string name = checkpoint_name(p);
    if (!name.empty()) tensors[name] = {{"dtype", "BF16"}, {"shape", p.shape}};
  }
  CHECK(tensors.contains("model.layers.0.self_attn.q_proj.weight"));  // base_layer and the PEFT prefix gone
  write_safetensors(dir / "model/model.safetensors", tensors);
  auto layout = read_checkpoint_layout(model_dir_of(plan.model.source));
  REQUIRE(layout);
  CHECK(compare_with_checkpoint(structure, plan.model, *layout).matches());

  // One tensor missing, one extra, one shape off: all three named.
  nlohmann::json changed = tensors;
  changed.erase("model.norm.weight");
  changed["model.layers.0.mlp.experts.0.weight"] = {{"dtype", "BF16"}, {"shape", {4}}};
  changed["model.layers.0.self_attn.k_proj.weight"]["shape"] = {1, 1};
  write_safetensors(dir / "model/model.safetensors", changed);
  const CheckpointComparison c = compare_with_checkpoint(structure, plan.model, *read_checkpoint_layout(model_dir_of(plan.model.source)));
  REQUIRE(c.differences.size() == 3);
  CHECK(c.differences[0].name == "model.norm.weight");
  CHECK(c.differences[0].what == "missing from the checkpoint");
  CHECK(c.differences[1].name == "model.layers.0.mlp.experts.0.weight");
  CHECK(c.differences[1].what == "not built by hookstream");
  CHECK(c.differences[2].what == "shape");
  CHECK(c.differences[2].checkpoint == "[1, 1] in model.safetensors");
}

TEST_CASE("a sharded checkpoint is read through its index, and shards not downloaded are listed", "[model_source]") {
  TempDir dir("hookstream-sharded-" + std::to_string(::getpid()));
  write_safetensors(dir / "model-00001-of-00002.safetensors", {{"a", {{"dtype", "F32"}, {"shape", {2}}}}});
  write(dir / "model.safetensors.index.json",
        R"({"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})");
  auto layout = read_checkpoint_layout(dir.string());
  REQUIRE(layout);
  CHECK(layout->tensors.at("a").has_header);
  CHECK_FALSE(layout->tensors.at("b").has_header);
  CHECK(layout->missing_shards == std::vector<std::string>{"model-00002-of-00002.safetensors"});
  write(dir / "model.safetensors.index.json", R"({"weight_map": [1]})");
  CHECK(error_of([&] { read_checkpoint_layout(dir.string()); }).find("weight_map") != std::string::npos);
}

TEST_CASE("a model type hookstream does not model is refused, never built as a Llama", "[model_source]") {
  TempDir dir("hookstream-types-" + std::to_string(::getpid()));
  std::string hy_v4 = tiny_llama();
  hy_v4.replace(hy_v4.find("\"llama\""), 7, "\"hy_v4\"");
  write(dir / "hy_v4/config.json", hy_v4);
  const std::string refused = error_of([&] { parse_plan("base_model: " + (dir / "hy_v4").string() + "\n", "plan.yaml"); });
  CHECK(refused.find("transformers 5.17.0 knows \"hy_v4\"; hookstream cannot model it yet") != std::string::npos);
  CHECK(refused.find((dir / "hy_v4/config.json").string()) == 0);
  std::string typo = tiny_llama();
  typo.replace(typo.find("\"llama\""), 7, "\"lama\"");
  write(dir / "typo/config.json", typo);
  const std::string unknown = error_of([&] { parse_plan("base_model: " + (dir / "typo").string() + "\n", "plan.yaml"); });
  CHECK(unknown.find("unknown model type \"lama\" (closest known: \"llama\")") != std::string::npos);
  // Custom code (Qwen-7B's config.json: model_type "qwen" with an auto_map) is named as such, not as
  // a misspelling of qwen2.
  write(dir / "qwen/config.json", R"({"model_type": "qwen", "hidden_size": 8, "auto_map": {"AutoConfig": "configuration_qwen.QWenConfig",
      "AutoModelForCausalLM": "modeling_qwen.QWenLMHeadModel"}})");
  const std::string custom = error_of([&] { parse_plan("base_model: " + (dir / "qwen").string() + "\n", "plan.yaml"); });
  CHECK(custom.find("key \"model_type\": \"qwen\" is the model repository's own code (auto_map AutoModelForCausalLM: "
                    "modeling_qwen.QWenLMHeadModel, run by transformers only with trust_remote_code)") != std::string::npos);
  CHECK(custom.find("closest known") == std::string::npos);
  // A type it does not model is reported as such even when the config lacks keys a Llama needs.
  // (RWKV: Mamba was the example until session 20 modelled it.)
  write(dir / "rwkv/config.json", R"({"model_type": "rwkv", "hidden_size": 8})");
  CHECK(error_of([&] { parse_plan("base_model: " + (dir / "rwkv").string() + "\n", "plan.yaml"); })
            .find("knows \"rwkv\"; hookstream cannot model it yet") != std::string::npos);
  // A structural key is modelled by the architecture table, not ignored: LlamaMLP's mlp_bias gives
  // gate/up/down_proj biases (modeling_llama.py).
  std::string biased = tiny_llama();
  biased.replace(biased.find("\"mlp_bias\": false"), 17, "\"mlp_bias\": true");
  write(dir / "biased/config.json", biased);
  const Plan with_bias = parse_plan("base_model: " + (dir / "biased").string() + "\n", "plan.yaml");
  const ModelStructure structure = build_model_structure(with_bias);
  CHECK(std::any_of(structure.parameters.begin(), structure.parameters.end(),
                    [](const Parameter& p) { return p.name == "model.layers.0.mlp.gate_proj.bias"; }));
  for (const std::string& type : modelled_model_types()) {
    const auto known = transformers_model_types().types;
    CHECK(std::binary_search(known.begin(), known.end(), type));
  }
}

}  // namespace
}  // namespace hookstream
