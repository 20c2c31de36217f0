// Tests for sim/plan: axolotl keys and the hookstream: section are read into Plan, every mistake is
// one line with file:line and a suggestion, --set edits the tree, and to_yaml round-trips.
#include "sim/inputs/plan.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "sim/inputs/input_error.h"
#include "tests/temp_dir.h"

namespace hookstream {
namespace {

namespace fs = std::filesystem;

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const InputError& error) {
    return error.what();
  }
  FAIL("expected an InputError");
  return "";
}

Plan parse(const std::string& yaml, const LoadOptions& options = {}) {
  return parse_plan(yaml, "plan.yaml", options);
}

std::string parse_error(const std::string& yaml, const LoadOptions& options = {}) {
  return error_of([&] { parse(yaml, options); });
}

LoadOptions with_set(std::vector<std::string> set) {
  LoadOptions options;
  options.set = std::move(set);
  return options;
}

// Writes `text` to `relative` under `dir`, creating its directories.
fs::path write_file(const test::TempDir& dir, const std::string& relative, const std::string& text) {
  const fs::path file = dir / relative;
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text;
  return file;
}

void check_same_override(const PlanOverride& a, const PlanOverride& b) {
  CHECK(a.sequence_len == b.sequence_len);
  CHECK(a.tiled_mlp_num_shards == b.tiled_mlp_num_shards);
  CHECK(a.checkpoint_twice_layers == b.checkpoint_twice_layers);
  CHECK(a.unused_modules == b.unused_modules);
}

void check_same_overrides(const std::map<int, PlanOverride>& a, const std::map<int, PlanOverride>& b) {
  REQUIRE(a.size() == b.size());
  for (const auto& [index, entry] : a) {
    REQUIRE(b.count(index) == 1);
    check_same_override(entry, b.at(index));
  }
}

// Every Plan field, the model included.
void check_same_plan(const Plan& a, const Plan& b) {
  CHECK(a.base_model == b.base_model);
  CHECK(a.model.source == b.model.source);
  CHECK(a.model.hidden_size == b.model.hidden_size);
  CHECK(a.model.num_hidden_layers == b.model.num_hidden_layers);
  CHECK(a.sequence_len == b.sequence_len);
  CHECK(a.micro_batch_size == b.micro_batch_size);
  CHECK(a.gradient_accumulation_steps == b.gradient_accumulation_steps);
  CHECK(a.adapter == b.adapter);
  CHECK(a.lora_r == b.lora_r);
  CHECK(a.lora_alpha == b.lora_alpha);
  CHECK(a.lora_target_modules == b.lora_target_modules);
  CHECK(a.load_in_4bit == b.load_in_4bit);
  CHECK(a.load_in_8bit == b.load_in_8bit);
  CHECK(a.gradient_checkpointing == b.gradient_checkpointing);
  CHECK(a.use_reentrant == b.use_reentrant);
  CHECK(a.activation_offloading == b.activation_offloading);
  CHECK(a.tiled_mlp == b.tiled_mlp);
  CHECK(a.tiled_mlp_num_shards == b.tiled_mlp_num_shards);
  CHECK(a.ddp_find_unused_parameters == b.ddp_find_unused_parameters);
  CHECK(a.ddp_bucket_cap_mb == b.ddp_bucket_cap_mb);
  CHECK(a.device_map == b.device_map);
  CHECK(a.unfrozen_parameters == b.unfrozen_parameters);
  CHECK(a.world_size == b.world_size);
  CHECK(a.iterations == b.iterations);
  CHECK(a.static_graph == b.static_graph);
  CHECK(a.gradient_as_bucket_view == b.gradient_as_bucket_view);
  CHECK(a.checkpoint_layers == b.checkpoint_layers);
  CHECK(a.checkpoint_twice_layers == b.checkpoint_twice_layers);
  CHECK(a.tiled_mlp_backward == b.tiled_mlp_backward);
  CHECK(a.tiled_mlp_weights_as_inputs == b.tiled_mlp_weights_as_inputs);
  CHECK(a.enable_input_require_grads == b.enable_input_require_grads);
  CHECK(a.train_vision_tower == b.train_vision_tower);
  CHECK(a.vision_inputs == b.vision_inputs);
  CHECK(a.unused_modules == b.unused_modules);
  check_same_overrides(a.rank_overrides, b.rank_overrides);
  check_same_overrides(a.iteration_overrides, b.iteration_overrides);
}

const char* kFullPlan = R"(
base_model: meta-llama/Meta-Llama-3.1-8B-Instruct
model_type: AutoModelForCausalLM
tokenizer_type: AutoTokenizer
datasets:
  - path: tatsu-lab/alpaca
    type: alpaca
output_dir: ./out
sequence_len: 4096
micro_batch_size: 2
gradient_accumulation_steps: 4
adapter: lora
lora_r: 16
lora_alpha: 32
lora_dropout: 0.05
lora_target_modules: [q_proj, v_proj]
load_in_8bit: true
gradient_checkpointing: true
gradient_checkpointing_kwargs:
  use_reentrant: false
tiled_mlp: true
tiled_mlp_num_shards: 4
ddp_find_unused_parameters: false
ddp_bucket_cap_mb: 12.5
device_map: ddp
unfrozen_parameters: ["^lm_head.weight$", "model.layers.[0-3].mlp.*"]
learning_rate: 2.0e-4
num_epochs: 1
optimizer: adamw_torch_fused
lr_scheduler: cosine
warmup_steps: 10
bf16: auto
tf32: true
flash_attention: true
sample_packing: true
seed: 42
special_tokens:
  pad_token: "<|end_of_text|>"
strict: false
hookstream:
  world_size: 8
  iterations: 5
  static_graph: true
  gradient_as_bucket_view: true
  checkpoint_layers: [0, 1, 2, 3]
  checkpoint_twice_layers: [2]
  tiled_mlp_backward: grad_then_backward
  tiled_mlp_weights_as_inputs: true
  enable_input_require_grads: false
  train_vision_tower: true
  vision_inputs: false
  unused_modules: [lm_head]
  rank_overrides:
    3: {sequence_len: 1000, tiled_mlp_num_shards: 2}
  iteration_overrides:
    1:
      checkpoint_twice_layers: [1, 3]
      unused_modules: [model.layers.3.mlp]
)";

}  // namespace

TEST_CASE("a minimal plan gets the documented defaults", "[plan]") {
  const Plan plan = parse("base_model: tiny-llama\n");
  CHECK(plan.source == "plan.yaml");
  CHECK(plan.base_model == "tiny-llama");
  CHECK(plan.model.source == "preset:tiny-llama");
  CHECK(plan.model.hidden_size == 16);
  CHECK(plan.sequence_len == 2048);
  CHECK(plan.micro_batch_size == 1);
  CHECK(plan.gradient_accumulation_steps == 1);
  CHECK(plan.adapter == Adapter::None);
  CHECK_FALSE(plan.gradient_checkpointing);
  CHECK(plan.use_reentrant);
  CHECK_FALSE(plan.activation_offloading);
  CHECK_FALSE(plan.tiled_mlp);
  CHECK(plan.device_map == DeviceMap::PerRank);
  CHECK(plan.world_size == 1);
  CHECK(plan.iterations == 3);
  CHECK_FALSE(plan.static_graph);
  CHECK_FALSE(plan.checkpoint_layers.has_value());
  CHECK(plan.tiled_mlp_backward == TiledBackward::BackwardPerChunk);
  CHECK(plan.vision_inputs);
  CHECK(plan.find_unused_parameters());  // HF Trainer: no checkpointing -> true
  CHECK_FALSE(plan.input_require_grads());
  CHECK(plan.vision_tower_trainable());
}

TEST_CASE("every axolotl and hookstream key is read", "[plan]") {
  const Plan plan = parse(kFullPlan);
  CHECK(plan.model.source == "preset:Llama-3.1-8B");
  CHECK(plan.base_model == "meta-llama/Meta-Llama-3.1-8B-Instruct");
  CHECK(plan.sequence_len == 4096);
  CHECK(plan.micro_batch_size == 2);
  CHECK(plan.gradient_accumulation_steps == 4);
  CHECK(plan.adapter == Adapter::Lora);
  CHECK(plan.lora_r == 16);
  CHECK(plan.lora_alpha == 32);
  CHECK(plan.lora_target_modules == std::vector<std::string>{"q_proj", "v_proj"});
  CHECK(plan.load_in_8bit);
  CHECK_FALSE(plan.load_in_4bit);
  CHECK(plan.gradient_checkpointing);
  CHECK_FALSE(plan.use_reentrant);
  CHECK(plan.tiled_mlp);
  CHECK(plan.tiled_mlp_num_shards == 4);
  CHECK(plan.ddp_find_unused_parameters == false);
  CHECK(plan.ddp_bucket_cap_mb == 12.5);
  CHECK(plan.device_map == DeviceMap::PerRank);
  CHECK(plan.unfrozen_parameters == std::vector<std::string>{"^lm_head.weight$", "model.layers.[0-3].mlp.*"});
  CHECK(plan.world_size == 8);
  CHECK(plan.iterations == 5);
  CHECK(plan.static_graph);
  CHECK(plan.gradient_as_bucket_view);
  CHECK(plan.checkpoint_layers == std::vector<int>{0, 1, 2, 3});
  CHECK(plan.checkpoint_twice_layers == std::vector<int>{2});
  CHECK(plan.tiled_mlp_backward == TiledBackward::GradThenBackward);
  CHECK(plan.tiled_mlp_weights_as_inputs);
  CHECK(plan.enable_input_require_grads == false);
  CHECK(plan.train_vision_tower == true);
  CHECK_FALSE(plan.vision_inputs);
  CHECK(plan.unused_modules == std::vector<std::string>{"lm_head"});
  REQUIRE(plan.rank_overrides.count(3) == 1);
  CHECK(plan.rank_overrides.at(3).sequence_len == 1000);
  CHECK(plan.rank_overrides.at(3).tiled_mlp_num_shards == 2);
  CHECK_FALSE(plan.rank_overrides.at(3).unused_modules.has_value());
  REQUIRE(plan.iteration_overrides.count(1) == 1);
  CHECK(plan.iteration_overrides.at(1).checkpoint_twice_layers == std::vector<int>{1, 3});
}

TEST_CASE("lora_target_linear is kept as a flag, to be expanded against the model's Linear modules", "[plan]") {
  const Plan plan = parse("base_model: tiny-llama\nadapter: lora\nlora_target_linear: true\nlora_target_modules: [lm_head]\n");
  CHECK(plan.lora_target_modules == std::vector<std::string>{"lm_head"});
  CHECK(plan.lora_target_linear);
  CHECK_FALSE(plan.lora_target_modules_regex);
  CHECK(parse("base_model: tiny-llama\nadapter: lora\nlora_target_modules: \".*q_proj\"\n").lora_target_modules_regex);
  CHECK(parse("base_model: tiny-llama\nadapter: lora\nlora_target_parameters: [experts.down_proj]\n").lora_target_parameters ==
        std::vector<std::string>{"experts.down_proj"});
  CHECK(plan.input_require_grads());     // PEFT default with an adapter
  CHECK_FALSE(plan.vision_tower_trainable());
}

TEST_CASE("gradient_checkpointing spellings", "[plan]") {
  SECTION("unsloth: reentrant and offloaded whatever use_reentrant says") {
    const Plan plan = parse("base_model: tiny-llama\ngradient_checkpointing: unsloth\n"
                            "gradient_checkpointing_kwargs: {use_reentrant: false}\n");
    CHECK(plan.gradient_checkpointing);
    CHECK(plan.use_reentrant);
    CHECK(plan.activation_offloading);
  }
  SECTION("offload: axolotl's rewrite to checkpointing + activation offloading") {
    const Plan plan = parse("base_model: tiny-llama\ngradient_checkpointing: offload\n"
                            "gradient_checkpointing_kwargs: {use_reentrant: false}\n");
    CHECK(plan.gradient_checkpointing);
    CHECK(plan.activation_offloading);
    CHECK_FALSE(plan.use_reentrant);
  }
  SECTION("plain bool with kwargs") {
    const Plan plan = parse("base_model: tiny-llama\ngradient_checkpointing: true\n"
                            "gradient_checkpointing_kwargs:\n  use_reentrant: false\n");
    CHECK(plan.gradient_checkpointing);
    CHECK_FALSE(plan.use_reentrant);
    CHECK_FALSE(plan.activation_offloading);
    CHECK_FALSE(plan.find_unused_parameters());  // HF Trainer: checkpointing -> false
  }
  SECTION("unfrozen_parameters changes axolotl's use_reentrant default to false") {
    const Plan plan = parse("base_model: tiny-llama\ngradient_checkpointing: true\nunfrozen_parameters: [lm_head]\n");
    CHECK_FALSE(plan.use_reentrant);
  }
  SECTION("activation_offloading: legacy forces reentrant, disk does not") {
    const Plan legacy = parse("base_model: tiny-llama\ngradient_checkpointing: true\nactivation_offloading: legacy\n"
                              "gradient_checkpointing_kwargs: {use_reentrant: false}\n");
    CHECK(legacy.activation_offloading);
    CHECK(legacy.use_reentrant);
    const Plan disk = parse("base_model: tiny-llama\ngradient_checkpointing: true\nactivation_offloading: disk\n"
                            "gradient_checkpointing_kwargs: {use_reentrant: false}\n");
    CHECK(disk.activation_offloading);
    CHECK_FALSE(disk.use_reentrant);
  }
  SECTION("wrong value") {
    CHECK(parse_error("base_model: tiny-llama\ngradient_checkpointing: sometimes\n") ==
          "plan.yaml:2: key \"gradient_checkpointing\": expected true, false, \"offload\", \"offload_disk\" or "
          "\"unsloth\", got \"sometimes\"");
  }
}

TEST_CASE("checkpoint_layers implies checkpointing", "[plan]") {
  const Plan listed = parse("base_model: tiny-llama\nhookstream:\n  checkpoint_layers: [3, 1, 1]\n");
  CHECK(listed.gradient_checkpointing);
  CHECK(listed.checkpoint_layers == std::vector<int>{1, 3});  // sorted, de-duplicated
  CHECK_FALSE(listed.layer_checkpointed(0));
  CHECK(listed.layer_checkpointed(1));
  CHECK(listed.layer_checkpointed(3));

  const Plan all = parse("base_model: tiny-llama\nhookstream:\n  checkpoint_layers: all\n");
  CHECK(all.gradient_checkpointing);
  CHECK_FALSE(all.checkpoint_layers.has_value());
  CHECK(all.layer_checkpointed(0));

  CHECK(parse_error("base_model: tiny-llama\ngradient_checkpointing: false\nhookstream:\n  checkpoint_layers: [1]\n") ==
        "plan.yaml:4: key \"hookstream.checkpoint_layers\": is set but gradient_checkpointing is false "
        "(checkpoint_layers implies gradient checkpointing)");
  CHECK(parse_error("base_model: tiny-llama\nhookstream:\n  checkpoint_layers: []\n") ==
        "plan.yaml:3: key \"hookstream.checkpoint_layers\": expected \"all\" or a non-empty list of layer indices, got a list");
  CHECK_FALSE(parse("base_model: tiny-llama\n").layer_checkpointed(0));
}

TEST_CASE("device_map", "[plan]") {
  CHECK(parse("base_model: tiny-llama\ndevice_map: auto\n").device_map == DeviceMap::Auto);
  CHECK(parse("base_model: tiny-llama\ndevice_map: balanced\n").device_map == DeviceMap::Balanced);
  CHECK(parse("base_model: tiny-llama\ndevice_map: sequential\n").device_map == DeviceMap::Sequential);
  CHECK(parse("base_model: tiny-llama\ndevice_map: {\"\": 0}\n").device_map == DeviceMap::PerRank);
  CHECK(parse_error("base_model: tiny-llama\ndevice_map: everywhere\n") ==
        "plan.yaml:2: key \"device_map\": expected \"auto\", \"balanced\", \"sequential\", \"ddp\" or a mapping, "
        "got \"everywhere\"");
}

TEST_CASE("unknown keys name the line and suggest the closest key", "[plan]") {
  CHECK(parse_error("base_model: tiny-llama\n\nsequence_length: 4096\n") ==
        "plan.yaml:3: unknown key \"sequence_length\"; did you mean `sequence_len`?");
  CHECK(parse_error("base_model: tiny-llama\nhookstream:\n  world_size: 2\n  static_grph: true\n") ==
        "plan.yaml:4: unknown key \"static_grph\" in hookstream; did you mean `static_graph`?");
  CHECK(parse_error("base_model: tiny-llama\ngradient_checkpointing_kwargs:\n  use_reentrnat: true\n") ==
        "plan.yaml:3: unknown key \"use_reentrnat\" in gradient_checkpointing_kwargs; did you mean `use_reentrant`?");
  CHECK(parse_error("base_model: tiny-llama\nhookstream:\n  world_size: 4\n  rank_overrides:\n    1:\n"
                    "      sequence_lne: 10\n") ==
        "plan.yaml:6: unknown key \"sequence_lne\" in hookstream.rank_overrides.1; did you mean `sequence_len`?");
  // A key close to none of axolotl's is not a typo: axolotl drops it (pydantic's extra="ignore"),
  // and so does hookstream, listing it in the report (tests/sim/axolotl_keys_test.cc).
  CHECK(parse("base_model: tiny-llama\nfrobnicate: 1\n").ignored_keys.at(0).key == "frobnicate");
  CHECK(parse_error("base_model: tiny-llama\niterations: 8\n") ==
        "plan.yaml:2: unknown key \"iterations\"; did you mean `hookstream.iterations`? "
        "(it belongs in the hookstream: section)");
  CHECK(parse_error("base_model: tiny-llama\nworld_size: 8\n") ==
        "plan.yaml:2: key \"world_size\": axolotl replaces it with the launcher's WORLD_SIZE, so it does not set the world "
        "size; pass --world-size N (or --nnodes/--nproc-per-node), or set `hookstream.world_size`");
  CHECK(parse_error("base_model: tiny-llama\nhookstream:\n  sequence_len: 8\n") ==
        "plan.yaml:3: unknown key \"sequence_len\" in hookstream; did you mean the top-level `sequence_len`? "
        "(it is an axolotl key)");
  CHECK(parse_error("base_model: tiny-llama\nseed: 1\nseed: 2\n") == "plan.yaml:3: duplicate key \"seed\"");
}

TEST_CASE("wrong types name file:line, key, expected and got", "[plan]") {
  CHECK(parse_error("base_model: tiny-llama\nsequence_len: abc\n") ==
        "plan.yaml:2: key \"sequence_len\": expected an integer >= 1, got \"abc\"");
  CHECK(parse_error("base_model: tiny-llama\nsequence_len: 2.5\n") ==
        "plan.yaml:2: key \"sequence_len\": expected an integer >= 1, got \"2.5\"");
  CHECK(parse_error("base_model: tiny-llama\ntiled_mlp: maybe\n") ==
        "plan.yaml:2: key \"tiled_mlp\": expected true or false, got \"maybe\"");
  CHECK(parse_error("base_model: tiny-llama\nlora_target_modules: {q: 1}\n") ==
        "plan.yaml:2: key \"lora_target_modules\": expected a list of strings, got a mapping");
  CHECK(parse_error("base_model: tiny-llama\nddp_bucket_cap_mb: 0\n") ==
        "plan.yaml:2: key \"ddp_bucket_cap_mb\": expected a number > 0, got \"0\"");
  CHECK(parse_error("base_model: tiny-llama\nadapter: prefix\n") ==
        "plan.yaml:2: key \"adapter\": expected \"lora\", \"qlora\" or empty, got \"prefix\"");
  CHECK(parse_error("base_model: tiny-llama\nhookstream:\n  tiled_mlp_backward: magic\n") ==
        "plan.yaml:3: key \"hookstream.tiled_mlp_backward\": expected per_chunk_backward, grad_then_backward or "
        "function_returns_grads, got \"magic\"");
  CHECK(parse_error("base_model: tiny-llama\nhookstream:\n  checkpoint_twice_layers:\n    - 1\n    - x\n") ==
        "plan.yaml:5: key \"hookstream.checkpoint_twice_layers\": expected an integer >= 0, got \"x\"");
  CHECK(parse_error("base_model: tiny-llama\nhookstream:\n  rank_overrides:\n    first: {sequence_len: 1}\n") ==
        "plan.yaml:4: key \"hookstream.rank_overrides.first\": expected an integer >= 0, got \"first\"");
  CHECK(parse_error("base_model: tiny-llama\nunfrozen_parameters: [\"(unclosed\"]\n")
            .rfind("plan.yaml:2: key \"unfrozen_parameters\": expected a list of regular expressions", 0) == 0);
}

TEST_CASE("empty keys mean unset, as in axolotl", "[plan]") {
  const Plan plan = parse("base_model: tiny-llama\nadapter:\nlora_target_modules:\nhookstream:\n");
  CHECK(plan.adapter == Adapter::None);
  CHECK(plan.lora_target_modules.empty());
}

TEST_CASE("malformed, empty and non-mapping plans", "[plan]") {
  const std::string message = parse_error("base_model: tiny-llama\nsequence_len: [1, 2\n");
  CHECK(message.rfind("plan.yaml:3:1: malformed YAML: ", 0) == 0);
  CHECK(message.find('\n') == std::string::npos);
  CHECK(parse_error("") == "plan.yaml: the plan is empty; expected a mapping with at least base_model");
  CHECK(parse_error("# only a comment\n") == "plan.yaml: the plan is empty; expected a mapping with at least base_model");
  CHECK(parse_error("- base_model\n") == "plan.yaml:1: expected a mapping of plan keys at the top level, got a list");
  // yaml-cpp stops nesting at a fixed depth with the message "bad file": the error says what.
  const std::string deep = parse_error("base_model: " + std::string(5000, '['));
  CHECK(deep.rfind("plan.yaml:1:", 0) == 0);
  CHECK(deep.find("malformed YAML: nested ") != std::string::npos);
  CHECK(deep.find("levels deep, more than yaml-cpp reads") != std::string::npos);
  CHECK(error_of([] { load_plan("/nonexistent/plan.yaml"); }) ==
        "cannot read /nonexistent/plan.yaml: No such file or directory");
}

TEST_CASE("base_model resolves paths (plan directory first), directories and presets", "[plan]") {
  const test::TempDir dir("hookstream_plan_test_resolve_" + std::to_string(getpid()));
  const std::string config = R"({"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 3,
                                 "num_attention_heads": 2, "vocab_size": 10})";
  write_file(dir, "plans/models/small/config.json", config);
  write_file(dir, "plans/file.yaml", "base_model: models/small/config.json\n");
  write_file(dir, "plans/dir.yaml", "base_model: models/small\n");

  const Plan by_file = load_plan((dir.path() / "plans/file.yaml").string());
  CHECK(by_file.model.num_hidden_layers == 3);
  CHECK(by_file.base_model == (dir.path() / "plans/models/small/config.json").string());
  CHECK(by_file.model.source == by_file.base_model);

  const Plan by_dir = load_plan((dir.path() / "plans/dir.yaml").string());
  CHECK(by_dir.model.hidden_size == 32);
  CHECK(by_dir.base_model == (dir.path() / "plans/models/small/config.json").string());

  LoadOptions options;
  options.model_path = (dir.path() / "plans/models/small").string();
  const Plan overridden = parse("base_model: tiny-llama\n", options);
  CHECK(overridden.model.num_hidden_layers == 3);
  CHECK(overridden.base_model == (dir.path() / "plans/models/small/config.json").string());

  const std::string missing = parse_error("base_model: org/no-such-model\n");
  // Every place looked (tests/sim/model_source_test.cc checks the HF cache part).
  CHECK(missing.rfind("plan.yaml:1: key \"base_model\": cannot find model \"org/no-such-model\": no file or "
                      "directory with a config.json at ", 0) == 0);
  CHECK(missing.find("not in the Hugging Face cache") != std::string::npos);
  CHECK(missing.find("pass --model PATH/config.json") != std::string::npos);
  CHECK(missing.find("tiny-llama") != std::string::npos);
  CHECK(parse_error("sequence_len: 10\n").rfind("plan.yaml: key \"base_model\": missing", 0) == 0);
  CHECK(parse_error("base_model: tiny-llama\n", [] {
          LoadOptions bad;
          bad.model_path = "/nonexistent/model";
          return bad;
        }()).rfind("--model: key \"--model\": cannot find model \"/nonexistent/model\"", 0) == 0);
}

TEST_CASE("base_model_config is where axolotl reads the config from", "[plan]") {
  const Plan plan = parse("base_model: some/weights-only-repo\nbase_model_config: tiny-vl\n");
  CHECK(plan.model.source == "preset:tiny-vl");
  REQUIRE(plan.model.vision.has_value());
}

TEST_CASE("the set option edits the tree before conversion", "[plan]") {
  const std::string yaml = "base_model: tiny-llama\ngradient_checkpointing: true\nhookstream:\n  world_size: 4\n";
  const Plan plan = parse(yaml, with_set({"sequence_len=4096", "gradient_checkpointing_kwargs.use_reentrant=false",
                                          "hookstream.static_graph=true", "hookstream.rank_overrides.3.sequence_len=1000",
                                          "unfrozen_parameters=[lm_head, embed_tokens]"}));
  CHECK(plan.sequence_len == 4096);
  CHECK_FALSE(plan.use_reentrant);
  CHECK(plan.static_graph);
  CHECK(plan.rank_overrides.at(3).sequence_len == 1000);
  CHECK(plan.sequence_len_for(3, 0) == 1000);
  CHECK(plan.unfrozen_parameters == std::vector<std::string>{"lm_head", "embed_tokens"});
  CHECK(parse(yaml, with_set({"hookstream.world_size=2"})).world_size == 2);
  // Edits merge into mappings the file already has.
  const Plan merged = parse(yaml + "  rank_overrides:\n    3: {sequence_len: 5}\n",
                            with_set({"hookstream.rank_overrides.3.tiled_mlp_num_shards=2",
                                      "hookstream.rank_overrides.1={unused_modules: [lm_head]}"}));
  CHECK(merged.rank_overrides.at(3).sequence_len == 5);
  CHECK(merged.rank_overrides.at(3).tiled_mlp_num_shards == 2);
  CHECK(merged.rank_overrides.at(1).unused_modules == std::vector<std::string>{"lm_head"});
  CHECK(parse_error(yaml, with_set({"hookstream.world_size.x=2"})) ==
        "--set: key \"hookstream.world_size\" has no sub-keys (in \"hookstream.world_size.x\")");
  CHECK(parse_error("base_model: tiny-llama\nhookstream: 5\n", with_set({"hookstream.static_graph=true"})) ==
        "--set: key \"hookstream\" is not a mapping in the plan, cannot set \"hookstream.static_graph\"");

  CHECK(parse_error(yaml, with_set({"sequnce_len=1"})) ==
        "--set: unknown key \"sequnce_len\"; did you mean `sequence_len`? (in \"sequnce_len\")");
  CHECK(parse_error(yaml, with_set({"hookstream.static_grap=true"})) ==
        "--set: unknown key \"static_grap\" in hookstream; did you mean `static_graph`? (in \"hookstream.static_grap\")");
  CHECK(parse_error(yaml, with_set({"hookstream.rank_overrides.x.sequence_len=1"})) ==
        "--set: key \"hookstream.rank_overrides.x\": expected a non-negative integer index");
  CHECK(parse_error(yaml, with_set({"sequence_len.x=1"})) ==
        "--set: key \"sequence_len\" has no sub-keys (in \"sequence_len.x\")");
  CHECK(parse_error(yaml, with_set({"sequence_len"})) == "--set: expected KEY=VALUE, got \"sequence_len\"");
  CHECK(parse_error(yaml, with_set({"sequence_len=abc"})) ==
        "--set: key \"sequence_len\": expected an integer >= 1, got \"abc\"");
  CHECK(parse_error(yaml, with_set({"hookstream.rank_overrides.9.sequence_len=5"})) ==
        "--set: key \"hookstream.rank_overrides.9\": index 9 is out of range: world_size is 4");
}

TEST_CASE("the world-size option overrides hookstream.world_size", "[plan]") {
  LoadOptions options;
  options.world_size = 16;
  CHECK(parse("base_model: tiny-llama\nhookstream: {world_size: 2}\n", options).world_size == 16);
  options.world_size = 0;
  CHECK(parse_error("base_model: tiny-llama\n", options) == "--world-size: expected an integer in [1, 65536], got 0");
}

TEST_CASE("value ranges", "[plan]") {
  CHECK(parse_error("base_model: tiny-llama\nsequence_len: 0\n") ==
        "plan.yaml:2: key \"sequence_len\": expected an integer >= 1, got \"0\"");
  CHECK(parse_error("base_model: tiny-llama\nmicro_batch_size: 0\n") ==
        "plan.yaml:2: key \"micro_batch_size\": expected an integer >= 1, got \"0\"");
  CHECK(parse_error("base_model: tiny-llama\ngradient_accumulation_steps: -1\n") ==
        "plan.yaml:2: key \"gradient_accumulation_steps\": expected an integer >= 1, got \"-1\"");
  CHECK(parse_error("base_model: tiny-llama\nlora_r: 0\n") ==
        "plan.yaml:2: key \"lora_r\": expected an integer >= 1, got \"0\"");
  CHECK(parse_error("base_model: tiny-llama\nhookstream:\n  world_size: 70000\n") ==
        "plan.yaml:3: key \"hookstream.world_size\": expected an integer in [1, 65536], got \"70000\"");
  CHECK(parse_error("base_model: tiny-llama\nhookstream:\n  iterations: 0\n") ==
        "plan.yaml:3: key \"hookstream.iterations\": expected an integer in [1, 1000], got \"0\"");
  CHECK(parse_error("base_model: tiny-llama\nhookstream:\n  iterations: 1001\n") ==
        "plan.yaml:3: key \"hookstream.iterations\": expected an integer in [1, 1000], got \"1001\"");
  CHECK(parse_error("base_model: tiny-llama\ntiled_mlp_num_shards: 0\n") ==
        "plan.yaml:2: key \"tiled_mlp_num_shards\": expected an integer >= 1, got \"0\"");
}

TEST_CASE("cross-key rules", "[plan]") {
  CHECK(parse_error("base_model: tiny-llama\nsequence_len: 8\ntiled_mlp: true\ntiled_mlp_num_shards: 9\n") ==
        "plan.yaml:4: key \"tiled_mlp_num_shards\": tiled_mlp_num_shards 9 exceeds sequence_len 8 (rank 0, iteration 0)");
  CHECK(parse_error("base_model: tiny-llama\ntiled_mlp: true\nhookstream:\n  world_size: 2\n  rank_overrides:\n"
                    "    1: {sequence_len: 3, tiled_mlp_num_shards: 4}\n") ==
        "plan.yaml:6: key \"hookstream.rank_overrides.1.tiled_mlp_num_shards\": tiled_mlp_num_shards 4 exceeds "
        "sequence_len 3 (rank 1, iteration 0)");
  // An iteration override of the sequence length can push a plan-level shard count past it.
  CHECK(parse_error("base_model: tiny-llama\ntiled_mlp: true\ntiled_mlp_num_shards: 4\nhookstream:\n"
                    "  iteration_overrides:\n    2: {sequence_len: 2}\n") ==
        "plan.yaml:3: key \"tiled_mlp_num_shards\": tiled_mlp_num_shards 4 exceeds sequence_len 2 (rank 0, iteration 2)");
  CHECK(parse_error("base_model: tiny-llama\nhookstream:\n  checkpoint_layers: [1, 4]\n") ==
        "plan.yaml:3: key \"hookstream.checkpoint_layers\": layer 4 is out of range: the model has 4 decoder layers (0..3)");
  CHECK(parse_error("base_model: tiny-llama\ngradient_checkpointing: true\nhookstream:\n  checkpoint_twice_layers: [7]\n") ==
        "plan.yaml:4: key \"hookstream.checkpoint_twice_layers\": layer 7 is out of range: the model has 4 decoder "
        "layers (0..3)");
  CHECK(parse_error("base_model: tiny-llama\nhookstream:\n  checkpoint_layers: [0]\n  checkpoint_twice_layers: [1]\n") ==
        "plan.yaml:4: key \"hookstream.checkpoint_twice_layers\": layer 1 is not checkpointed "
        "(gradient_checkpointing / checkpoint_layers)");
  CHECK(parse_error("base_model: tiny-llama\nhookstream:\n  checkpoint_layers: [0]\n  iteration_overrides:\n"
                    "    0: {checkpoint_twice_layers: [2]}\n") ==
        "plan.yaml:5: key \"hookstream.iteration_overrides.0.checkpoint_twice_layers\": layer 2 is not checkpointed "
        "(gradient_checkpointing / checkpoint_layers)");
  CHECK(parse_error("base_model: tiny-llama\nhookstream:\n  world_size: 4\n  rank_overrides:\n    4: {sequence_len: 5}\n") ==
        "plan.yaml:5: key \"hookstream.rank_overrides.4\": index 4 is out of range: world_size is 4");
  CHECK(parse_error("base_model: tiny-llama\nhookstream:\n  iteration_overrides:\n    3: {sequence_len: 5}\n") ==
        "plan.yaml:4: key \"hookstream.iteration_overrides.3\": index 3 is out of range: iterations is 3");
  CHECK(parse_error("base_model: tiny-llama\nadapter: lora\n") ==
        "plan.yaml:2: key \"adapter\": lora needs lora_target_modules (or lora_target_linear: true)");
  CHECK(parse_error("base_model: tiny-llama\nadapter: qlora\nlora_target_linear: true\nload_in_4bit: false\n") ==
        "plan.yaml:4: key \"load_in_4bit\": adapter: qlora requires load_in_4bit: true, got false");
  CHECK(parse_error("base_model: tiny-llama\nload_in_4bit: true\nload_in_8bit: true\n") ==
        "plan.yaml:3: key \"load_in_8bit\": load_in_4bit and load_in_8bit are exclusive");
  CHECK(parse_error("base_model: tiny-llama\nhookstream:\n  tiled_mlp_backward: function_returns_grads\n") ==
        "plan.yaml:3: key \"hookstream.tiled_mlp_backward\": function_returns_grads requires "
        "hookstream.tiled_mlp_weights_as_inputs: true (a Function can only return gradients for its inputs)");
  CHECK(parse_error("base_model: tiny-llama\nactivation_offloading: true\n") ==
        "plan.yaml:2: key \"activation_offloading\": requires gradient_checkpointing (axolotl refuses activation "
        "offloading without it)");
  const Plan qlora = parse("base_model: tiny-llama\nadapter: qlora\nlora_target_modules: [q_proj]\n");
  CHECK(qlora.load_in_4bit);  // implied
  CHECK(qlora.adapter == Adapter::Qlora);
}

TEST_CASE("per rank and per iteration values: iteration beats rank beats plan", "[plan]") {
  const Plan plan = parse(R"(
base_model: tiny-llama
sequence_len: 40
gradient_checkpointing: true
tiled_mlp: true
hookstream:
  world_size: 4
  checkpoint_layers: [0, 1, 2]
  checkpoint_twice_layers: [0]
  unused_modules: [lm_head]
  rank_overrides:
    1: {sequence_len: 100, checkpoint_twice_layers: [1], unused_modules: []}
    2: {tiled_mlp_num_shards: 5}
  iteration_overrides:
    2: {sequence_len: 7, checkpoint_twice_layers: [2], tiled_mlp_num_shards: 3}
)");
  CHECK(plan.sequence_len_for(0, 0) == 40);
  CHECK(plan.sequence_len_for(1, 0) == 100);
  CHECK(plan.sequence_len_for(1, 2) == 7);
  CHECK(plan.checkpoint_count(0, 0, 0) == 2);
  CHECK(plan.checkpoint_count(1, 0, 0) == 1);
  CHECK(plan.checkpoint_count(3, 0, 0) == 0);  // not in checkpoint_layers
  CHECK(plan.checkpoint_count(0, 1, 0) == 1);
  CHECK(plan.checkpoint_count(1, 1, 0) == 2);
  CHECK(plan.checkpoint_count(2, 1, 2) == 2);
  CHECK(plan.checkpoint_count(1, 1, 2) == 1);
  // Default shard count: ceil(sequence / hidden_size), hidden_size 16.
  CHECK(plan.tiled_shards_for(0, 0) == 3);   // ceil(40 / 16)
  CHECK(plan.tiled_shards_for(1, 0) == 7);   // ceil(100 / 16)
  CHECK(plan.tiled_shards_for(2, 0) == 5);   // rank override
  CHECK(plan.tiled_shards_for(2, 2) == 3);   // iteration override wins
  CHECK(plan.unused_modules_for(0, 0) == std::vector<std::string>{"lm_head"});
  CHECK(plan.unused_modules_for(1, 0).empty());
  CHECK(parse("base_model: tiny-llama\nsequence_len: 1\ntiled_mlp: true\n").tiled_shards_for(0, 0) == 1);
  CHECK(parse("base_model: tiny-llama\nsequence_len: 4096\n").tiled_shards_for(0, 0) == 1);  // tiled_mlp off
}

TEST_CASE("to_yaml round-trips", "[plan]") {
  const test::TempDir dir("hookstream_plan_test_roundtrip_" + std::to_string(getpid()));
  write_file(dir, "m/config.json", R"({"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 6,
                                 "num_attention_heads": 2, "vocab_size": 10})");
  const std::vector<std::string> plans = {
      "base_model: tiny-llama\n",
      kFullPlan,
      "base_model: Qwen/Qwen3-VL-4B-Instruct\nadapter: qlora\nlora_target_linear: true\nlora_alpha: 0.5\n"
      "gradient_checkpointing: unsloth\ndevice_map: auto\nhookstream:\n  checkpoint_layers: all\n"
      "  train_vision_tower: false\n  tiled_mlp_backward: function_returns_grads\n  tiled_mlp_weights_as_inputs: true\n",
      "base_model: " + (dir.path() / "m").string() + "\ngradient_checkpointing: true\nunfrozen_parameters: [\"a|b\"]\n"
      "ddp_find_unused_parameters: true\nhookstream:\n  world_size: 3\n  iterations: 4\n"
      "  rank_overrides: {0: {unused_modules: []}, 2: {sequence_len: 9, checkpoint_twice_layers: [5]}}\n"
      "  iteration_overrides: {3: {tiled_mlp_num_shards: 2, unused_modules: [\"model.layers.1.mlp\", lm_head]}}\n",
  };
  for (const std::string& yaml : plans) {
    INFO(yaml);
    const Plan original = parse(yaml);
    const std::string emitted = to_yaml(original);
    INFO(emitted);
    const Plan reread = parse(emitted);
    check_same_plan(original, reread);
    CHECK(to_yaml(reread) == emitted);  // deterministic
  }
}

TEST_CASE("to_yaml output is readable YAML with the documented sections", "[plan]") {
  const std::string emitted = to_yaml(parse("base_model: tiny-llama\nhookstream: {static_graph: true}\n"));
  CHECK(emitted ==
        "base_model: \"tiny-llama\"\nsequence_len: 2048\nmicro_batch_size: 1\ngradient_accumulation_steps: 1\n"
        "hookstream:\n  world_size: 1\n  iterations: 3\n  static_graph: true\n");
}

TEST_CASE("known_plan_keys lists every accepted dotted key", "[plan]") {
  const std::vector<std::string>& keys = known_plan_keys();
  auto has = [&](const std::string& key) { return std::find(keys.begin(), keys.end(), key) != keys.end(); };
  CHECK(has("sequence_len"));
  CHECK(has("gradient_checkpointing_kwargs.use_reentrant"));
  CHECK(has("hookstream.static_graph"));
  CHECK(has("hookstream.rank_overrides.RANK.sequence_len"));
  CHECK(has("hookstream.iteration_overrides.ITER.unused_modules"));
  CHECK(has("datasets"));
  CHECK_FALSE(has("hookstream"));
  CHECK_FALSE(has("gradient_checkpointing_kwargs"));
  CHECK(has("hookstream.offload_protocol"));
  CHECK(has("hookstream.gpu"));
  CHECK(has("chunked_cross_entropy_num_chunks"));
  CHECK(has("hookstream.weights"));
  CHECK(has("hookstream.vision_tokens"));
  CHECK(has("hookstream.micro_step_overrides.MICRO.unused_modules"));
  CHECK(has("hookstream.tiled_mlp_layers"));
  CHECK(has("hookstream.torch_version"));
  CHECK(has("revision_of_model"));
  CHECK(has("optimizer"));
  CHECK(has("rl"));
  CHECK(has("fsdp_config"));
  CHECK(has("liger_rms_norm"));  // a plugin's key
  CHECK(has("gradient_checkpointing_kwargs.preserve_rng_state"));
  CHECK_FALSE(has("world_size"));
  // axolotl 0.18.0's 478 keys but world_size and gradient_checkpointing_kwargs (6 dotted
  // torch.utils.checkpoint arguments instead), 29 hookstream keys, 3 x 4 overrides.
  CHECK(has("hookstream.tiled_mlp_ds_grad_is_ready"));
  CHECK(has("hookstream.z3_leaf_mlp"));
  CHECK(has("hookstream.transformers_version"));
  CHECK(has("hookstream.chunked_loss"));
  CHECK(has("hookstream.torch_distributed_debug"));
  CHECK(has("hookstream.pinned_slots"));
  CHECK(has("hookstream.offload_layers"));
  CHECK(keys.size() == 478 - 2 + 6 + 29 + 12);
}

TEST_CASE("training keys are read, validated and written back", "[plan]") {
  const std::string text =
      "base_model: tiny-llama\nchunked_cross_entropy: true\nchunked_cross_entropy_num_chunks: 4\n"
      "learning_rate: 0.001\nweight_decay: 0.01\nseed: 7\nbf16: auto\nmax_steps: 5\n"
      "hookstream:\n  weights: w.safetensors\n  data: ids.bin\n";
  const Plan plan = parse_plan(text, "train.yaml");
  CHECK(plan.chunked_cross_entropy);
  CHECK(plan.chunked_cross_entropy_num_chunks == 4);
  CHECK(plan.learning_rate == 0.001);
  CHECK(plan.weight_decay == 0.01);
  CHECK(plan.seed == 7);
  CHECK_FALSE(plan.bf16.has_value());
  CHECK(plan.max_steps == 5);
  CHECK(plan.weights == std::optional<std::string>("w.safetensors"));
  CHECK(plan.data == std::optional<std::string>("ids.bin"));
  const Plan again = parse_plan(to_yaml(plan), "again.yaml");
  CHECK(to_yaml(again) == to_yaml(plan));
  CHECK(again.learning_rate == 0.001);
  CHECK(parse_plan("base_model: tiny-llama\nbf16: false\n", "b.yaml").bf16 == std::optional<bool>(false));
  CHECK_THROWS_WITH(parse_plan("base_model: tiny-llama\nweight_decay: -1\n", "b.yaml"),
                    Catch::Contains("weight_decay") && Catch::Contains(">= 0"));
  CHECK_THROWS_WITH(parse_plan("base_model: tiny-llama\nchunked_cross_entropy_num_chunks: 0\n", "b.yaml"),
                    Catch::Contains("chunked_cross_entropy_num_chunks"));
}

}  // namespace hookstream

namespace hookstream {

// The complete plans shown in docs/plan-format.md must load.
TEST_CASE("the examples in docs/plan-format.md load", "[plan]") {
  std::ifstream file(std::string(HOOKSTREAM_SOURCE_DIR) + "/docs/plan-format.md");
  REQUIRE(file);
  std::vector<std::string> blocks;
  std::string line, block;
  bool inside = false;
  while (std::getline(file, line)) {
    if (line == "```yaml") {
      inside = true;
      block.clear();
    } else if (inside && line == "```") {
      inside = false;
      if (block.find("base_model:") != std::string::npos) blocks.push_back(block);
    } else if (inside) {
      block += line + "\n";
    }
  }
  CHECK(blocks.size() == 5);
  for (const std::string& yaml : blocks) {
    INFO(yaml);
    CHECK_NOTHROW(parse_plan(yaml, "docs/plan-format.md"));
  }
}


TEST_CASE("tiled_mlp_layers: lists and FIRST-LAST ranges, implies tiled_mlp", "[plan]") {
  const Plan plan = parse("base_model: tiny-llama\nhookstream:\n  tiled_mlp_layers: [0, \"2-3\", 2]\n");
  CHECK(plan.tiled_mlp);
  REQUIRE(plan.tiled_mlp_layers);
  CHECK(*plan.tiled_mlp_layers == std::vector<int>{0, 2, 3});
  CHECK(plan.layer_tiled(0));
  CHECK_FALSE(plan.layer_tiled(1));
  CHECK(plan.layer_tiled(3));
  CHECK(parse("base_model: tiny-llama\ntiled_mlp: true\n").layer_tiled(1));
  CHECK_FALSE(parse("base_model: tiny-llama\n").layer_tiled(1));
  CHECK(parse_error("base_model: tiny-llama\ntiled_mlp: false\nhookstream:\n  tiled_mlp_layers: [1]\n") ==
        "plan.yaml:4: key \"hookstream.tiled_mlp_layers\": is set but tiled_mlp is false (tiled_mlp_layers implies tiled_mlp)");
  CHECK(parse_error("base_model: tiny-llama\nhookstream:\n  tiled_mlp_layers: [\"3-1\"]\n").find(
            "FIRST-LAST with FIRST <= LAST") != std::string::npos);
  CHECK(parse_error("base_model: tiny-llama\nhookstream:\n  tiled_mlp_layers: [9]\n").find("out of range") !=
        std::string::npos);
  CHECK(parse_error("base_model: tiny-llama\nhookstream:\n  tiled_mlp_layers: []\n").find("FIRST-LAST") !=
        std::string::npos);
  // Round trip.
  CHECK(parse(to_yaml(plan)).tiled_mlp_layers == plan.tiled_mlp_layers);
}

TEST_CASE("micro_step_overrides: beside rank and iteration overrides, micro-step first", "[plan]") {
  const Plan plan = parse(
      "base_model: tiny-llama\ngradient_accumulation_steps: 3\nhookstream:\n  world_size: 2\n"
      "  unused_modules: [lm_head]\n  rank_overrides:\n    1: {unused_modules: []}\n"
      "  micro_step_overrides:\n    0: {unused_modules: [model.layers.1.mlp], sequence_len: 40}\n");
  CHECK(plan.unused_modules_for(0, 0, 0) == std::vector<std::string>{"model.layers.1.mlp"});
  CHECK(plan.unused_modules_for(1, 0, 0) == std::vector<std::string>{"model.layers.1.mlp"});
  CHECK(plan.unused_modules_for(0, 0, 1) == std::vector<std::string>{"lm_head"});
  CHECK(plan.unused_modules_for(1, 0, 2).empty());
  CHECK(plan.unused_modules_for(0, 0) == std::vector<std::string>{"lm_head"});  // -1: no micro-step override
  CHECK(plan.sequence_len_for(0, 0, 0) == 40);
  CHECK(plan.sequence_len_for(0, 0, 1) == 2048);
  CHECK(parse_error("base_model: tiny-llama\ngradient_accumulation_steps: 2\nhookstream:\n  micro_step_overrides:\n"
                    "    2: {sequence_len: 4}\n") ==
        "plan.yaml:5: key \"hookstream.micro_step_overrides.2\": index 2 is out of range: gradient_accumulation_steps is 2");
  CHECK(parse(to_yaml(plan)).micro_step_overrides.size() == 1);
  CHECK(parse("base_model: tiny-llama\ngradient_accumulation_steps: 2\n",
              with_set({"hookstream.micro_step_overrides.1.sequence_len=5"})).sequence_len_for(0, 0, 1) == 5);
}

TEST_CASE("hookstream.torch_version: a supported PyTorch version, written back when not the default", "[plan]") {
  CHECK(parse("base_model: tiny-llama\n").torch_version == newest_torch_version());
  const Plan old = parse("base_model: tiny-llama\nhookstream:\n  torch_version: 1.13\n");
  CHECK(old.torch_version == (TorchVersion{1, 13}));
  CHECK(parse(to_yaml(old)).torch_version == (TorchVersion{1, 13}));
  CHECK(parse_error("base_model: tiny-llama\nhookstream:\n  torch_version: 2.12\n") ==
        "plan.yaml:3: key \"hookstream.torch_version\": PyTorch 2.12 is not supported: hookstream models DDP of "
        "PyTorch 1.13 or 2.0 to 2.11, got \"2.12\"");
  CHECK(parse_error("base_model: tiny-llama\nhookstream:\n  torch_version: latest\n") ==
        "plan.yaml:3: key \"hookstream.torch_version\": expected a PyTorch version MAJOR.MINOR[.PATCH] in 1.13 or "
        "2.0 to 2.11, got \"latest\"");
  LoadOptions cli;
  cli.torch_version = "1.13";
  CHECK(parse("base_model: tiny-llama\nhookstream:\n  torch_version: 2.4\n", cli).torch_version == (TorchVersion{1, 13}));
}

}  // namespace hookstream
