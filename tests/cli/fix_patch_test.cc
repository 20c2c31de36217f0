// Fixes in the user's own words, end to end: verify's JSON gives each fix as a patch to the plan
// file, `patch` applies it, --write-fixed writes the same file, and that file verifies clean.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <unistd.h>

#include "tests/cli/run_binary.h"
#include "tests/temp_dir.h"

namespace {
namespace fs = std::filesystem;
using hookstream::testing::run_command;

std::string read(const fs::path& path) {
  std::ifstream file(path);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

std::string in(const fs::path& dir, const std::string& args) {
  return "cd '" + dir.string() + "' && " + std::string(HOOKSTREAM_BINARY) + " " + args;
}
}  // namespace

TEST_CASE("verify prints each fix as a patch to the plan file, and --write-fixed writes it", "[cli][patch]") {
  hookstream::test::TempDir dir("hookstream-fix-patch-" + std::to_string(getpid()));
  const std::string original = read(std::string(HOOKSTREAM_SOURCE_DIR) + "/plans/default.yaml");
  std::ofstream(dir / "plan.yaml") << original;
  const auto json = run_command(in(dir, "verify plan.yaml --format json"));
  REQUIRE(json.exit_code == 1);
  const auto report = nlohmann::json::parse(json.out);
  REQUIRE(report["fixes"].size() >= 2);
  const nlohmann::json& fix = report["fixes"][1];
  const std::string patch = fix["patch"];
  CHECK(patch.rfind("--- plan.yaml\n+++ plan.yaml\n@@ ", 0) == 0);
  CHECK(fix["code_changes"].size() >= 1);  // a tiled-MLP backward strategy is training code

  // `patch` applies it to a copy; --write-fixed --fix 2 writes the same text.
  fs::create_directories(dir / "patched");
  std::ofstream(dir / "patched/plan.yaml") << original;
  std::ofstream(dir / "fix.diff") << patch;
  const auto applied = run_command("cd '" + (dir / "patched").string() + "' && patch -p0 < ../fix.diff");
  INFO(applied.out);
  REQUIRE(applied.exit_code == 0);
  const auto written = run_command(in(dir, "verify plan.yaml --write-fixed fixed.yaml --fix 2"));
  CHECK(written.exit_code == 1);
  CHECK(read(dir / "fixed.yaml") == read(dir / "patched/plan.yaml"));
  CHECK(read(dir / "plan.yaml") == original);
  // Only the fix's lines differ, and the fixed plan passes.
  CHECK(run_command(in(dir, "verify fixed.yaml")).exit_code == 0);

  // The text report shows the same diff lines.
  const auto text = run_command(in(dir, "verify plan.yaml --no-colour"));
  CHECK(text.out.find("       --- plan.yaml\n       +++ plan.yaml\n") != std::string::npos);
  CHECK(text.out.find("unslothai/unsloth PR #4077") != std::string::npos);

  // A fix number out of range is bad input and writes nothing; a passing plan writes nothing.
  const auto bad = run_command(in(dir, "verify plan.yaml --write-fixed other.yaml --fix 99"));
  CHECK(bad.exit_code == 2);
  CHECK(bad.out.rfind("hookstream: error: --fix: expected a fix number in [1, ", 0) == 0);
  CHECK_FALSE(fs::exists(dir / "other.yaml"));
  const auto clean = run_command(in(dir, "verify fixed.yaml --write-fixed again.yaml"));
  CHECK(clean.exit_code == 0);
  CHECK_FALSE(fs::exists(dir / "again.yaml"));
}

namespace {

// Runs `verify` (memory fixes) and `plan` (the plan search) on a plan written with one spelling of
// its fsdp_config keys. Every fix touching fsdp_config must use that spelling (`prefix`), its patch
// must apply to the file with `patch`, and the patched file must load (verify exits 0 or 1, never
// 2) and equal --write-fixed's output. No change may be rejected as a duplicate key.
void check_fixes_keep_spelling(const std::string& plan_text, const std::string& prefix, const std::string& name, bool searches_reshard) {
  hookstream::test::TempDir dir("hookstream-fix-spelling-" + name + "-" + std::to_string(getpid()));
  std::ofstream(dir / "plan.yaml") << plan_text;
  const auto json = run_command(in(dir, "verify plan.yaml --format json"));
  INFO(json.out.substr(0, 4000));
  REQUIRE(json.exit_code == 1);
  CHECK(json.out.find("duplicate key") == std::string::npos);
  const auto report = nlohmann::json::parse(json.out);
  REQUIRE(report["fixes"].size() >= 1);
  int fsdp_fixes = 0;
  for (size_t i = 0; i < report["fixes"].size(); ++i) {
    const nlohmann::json& fix = report["fixes"][i];
    bool touches_fsdp = false;
    for (const auto& change : fix["changes"]) {
      const std::string key = change["key"];
      if (key.rfind("fsdp_config.", 0) != 0) continue;
      touches_fsdp = true;
      INFO(key);
      CHECK(key.rfind("fsdp_config." + prefix, 0) == 0);
      if (!prefix.empty()) CHECK(key.rfind("fsdp_config." + prefix + prefix, 0) != 0);
    }
    if (!touches_fsdp) continue;
    ++fsdp_fixes;
    const fs::path copy = dir / ("patched-" + std::to_string(i));
    fs::create_directories(copy);
    std::ofstream(copy / "plan.yaml") << plan_text;
    std::ofstream(dir / "fix.diff") << fix["patch"].get<std::string>();
    const auto applied = run_command("cd '" + copy.string() + "' && patch -p0 < ../fix.diff");
    INFO(fix["patch"].get<std::string>());
    REQUIRE(applied.exit_code == 0);
    const auto patched = run_command(in(copy, "verify plan.yaml"));
    INFO(patched.out.substr(0, 2000));
    CHECK(patched.exit_code != 2);
    CHECK(patched.out.find("duplicate key") == std::string::npos);
    const auto written = run_command(in(dir, "verify plan.yaml --write-fixed fixed.yaml --fix " + std::to_string(i + 1)));
    CHECK(written.exit_code == 1);
    CHECK(read(dir / "fixed.yaml") == read(copy / "plan.yaml"));
  }
  CHECK(fsdp_fixes >= 1);
  // The plan search explores fsdp_config.reshard_after_forward: its changes are in the file's spelling.
  // 85 GiB: the plan's own reshard_after_forward: false does not fit (92.6 GiB), true does (80.4).
  const auto plan = run_command(in(dir, "plan plan.yaml --gpu H200 --budget-gib 85 --top 5 --format json"));
  INFO(plan.out.substr(0, 2000));
  CHECK(plan.out.find("duplicate key") == std::string::npos);
  REQUIRE((plan.exit_code == 0 || plan.exit_code == 1));
  const auto searched = nlohmann::json::parse(plan.out);
  int reshards = 0;
  for (const auto& candidate : searched["best"]) {
    for (const auto& change : candidate["changes"]) {
      const std::string key = change["key"];
      if (key.rfind("fsdp_config.", 0) != 0) continue;
      ++reshards;
      CHECK(key == "fsdp_config." + prefix + "reshard_after_forward");
    }
  }
  if (searches_reshard) CHECK(reshards >= 1);
}

const char* kFsdpPlanHead =
    "base_model: meta-llama/Llama-3.1-8B\nsequence_len: 16384\nmicro_batch_size: 1\ngradient_checkpointing: true\n"
    "hookstream:\n  world_size: 2\n  gpu: H100-SXM\n";

}  // namespace

TEST_CASE("FSDP fixes are written in the fsdp_config spelling the plan uses, and their patches apply", "[cli][patch][fsdp]") {
  // axolotl's check_fsdp_config_kwargs_prefix drops a `fsdp_` prefix (the accelerate-era flat keys):
  // a fix for offload_params or reshard_after_forward edits `fsdp_offload_params` in such a file
  // instead of adding `offload_params` beside it (a duplicate the loader rejects).
  SECTION("fsdp_ prefixed keys, FSDP2") {
    check_fixes_keep_spelling(std::string(kFsdpPlanHead) +
                                  "fsdp_version: 2\nfsdp_config:\n  fsdp_offload_params: false\n  fsdp_reshard_after_forward: false\n"
                                  "  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer\n",
                              "fsdp_", "prefixed2", true);
  }
  SECTION("fsdp_ prefixed keys and fsdp_version inside fsdp_config, FSDP1") {
    check_fixes_keep_spelling(std::string(kFsdpPlanHead) +
                                  "fsdp_config:\n  fsdp_version: 1\n  fsdp_offload_params: false\n  fsdp_reshard_after_forward: false\n"
                                  "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n",
                              "fsdp_", "prefixed1", true);
  }
  SECTION("plain keys, `version` alias") {
    check_fixes_keep_spelling(std::string(kFsdpPlanHead) +
                                  "fsdp_config:\n  version: 2\n  offload_params: false\n  reshard_after_forward: false\n",
                              "", "plain", true);
  }
  SECTION("prefixed keys the plan leaves out are added in the canonical spelling") {
    check_fixes_keep_spelling(std::string(kFsdpPlanHead) + "fsdp_version: 2\nfsdp_config:\n  fsdp_state_dict_type: FULL_STATE_DICT\n",
                              "", "absent", false);
  }
}

namespace {

// The fixes of `verify --format json` whose changes include a key under `deepspeed.`.
std::vector<nlohmann::json> deepspeed_fixes(const nlohmann::json& report) {
  std::vector<nlohmann::json> out;
  for (const auto& fix : report["fixes"]) {
    for (const auto& change : fix["changes"]) {
      if (change["key"].get<std::string>().rfind("deepspeed.", 0) == 0) {
        out.push_back(fix);
        break;
      }
    }
  }
  return out;
}

// Applies `patch` with `patch -p0` in a fresh copy of `plan` and `json_path`, and returns the copy.
fs::path patched_copy(const fs::path& dir, const std::string& name, const std::string& plan, const std::string& json_path,
                      const std::string& json, const std::string& patch) {
  const fs::path copy = dir / name;
  fs::create_directories(copy / fs::path(json_path).parent_path());
  std::ofstream(copy / "plan.yaml") << plan;
  std::ofstream(copy / json_path) << json;
  std::ofstream(dir / (name + ".diff")) << patch;
  const auto applied = run_command("cd '" + copy.string() + "' && patch -p0 < ../" + name + ".diff");
  INFO(patch);
  INFO(applied.out);
  REQUIRE(applied.exit_code == 0);
  return copy;
}

}  // namespace

TEST_CASE("DeepSpeed fixes are patches to the JSON file the plan's deepspeed key names", "[cli][patch][zero]") {
  hookstream::test::TempDir dir("hookstream-fix-deepspeed-" + std::to_string(getpid()));
  // axolotl's deepspeed_configs layout; the stage-3 setting under its bare alias.
  const std::string json =
      "{\n  \"zero_optimization\": {\n    \"stage\": 2,\n    \"overlap_comm\": true,\n    \"max_live_parameters\": 1e9\n  },\n"
      "  \"bf16\": {\n    \"enabled\": \"auto\"\n  },\n  \"train_micro_batch_size_per_gpu\": \"auto\"\n}\n";
  fs::create_directories(dir / "ds");
  std::ofstream(dir / "ds/zero2.json") << json;

  SECTION("a hook-schedule fix: ZeRO-1 without overlap_comm, re-verified, in the file") {
    // ZeRO-2 asserts on a tiled MLP whose shards each run AccumulateGrad (docs/engines/deepspeed-zero.md).
    const std::string plan =
        "base_model: tiny-llama\nsequence_len: 8\nmicro_batch_size: 1\ntiled_mlp: true\ntiled_mlp_num_shards: 2\n"
        "deepspeed: ds/zero2.json\nhookstream:\n  world_size: 2\n  iterations: 2\n  tiled_mlp_backward: per_chunk_backward\n"
        "  tiled_mlp_ds_grad_is_ready: false\n";
    std::ofstream(dir / "plan.yaml") << plan;
    const auto json_out = run_command(in(dir, "verify plan.yaml --format json"));
    INFO(json_out.out.substr(0, 4000));
    REQUIRE(json_out.exit_code == 1);
    const auto report = nlohmann::json::parse(json_out.out);
    const auto fixes = deepspeed_fixes(report);
    REQUIRE(fixes.size() == 1);
    const std::string patch = fixes[0]["patch"];
    CHECK(patch ==
          "--- ds/zero2.json\n+++ ds/zero2.json\n@@ -1,7 +1,7 @@\n {\n   \"zero_optimization\": {\n-    \"stage\": 2,\n"
          "-    \"overlap_comm\": true,\n+    \"stage\": 1,\n+    \"overlap_comm\": false,\n     \"max_live_parameters\": 1e9\n   },\n"
          "   \"bf16\": {\n");
    const fs::path copy = patched_copy(dir, "ds-fixed", plan, "ds/zero2.json", json, patch);
    const auto fixed = run_command(in(copy, "verify plan.yaml"));
    INFO(fixed.out.substr(0, 2000));
    CHECK(fixed.exit_code == 0);
    CHECK(read(copy / "plan.yaml") == plan);
    // --write-fixed writes one file: a fix that edits the JSON says to apply its patch, writes nothing.
    int number = 0;
    for (size_t i = 0; i < report["fixes"].size(); ++i) {
      if (report["fixes"][i]["patch"] == patch) number = static_cast<int>(i) + 1;
    }
    const auto refused = run_command(in(dir, "verify plan.yaml --write-fixed out.yaml --fix " + std::to_string(number)));
    CHECK(refused.exit_code == 2);
    CHECK(refused.out.find("edits ds/zero2.json, the DeepSpeed config the plan names") != std::string::npos);
    CHECK_FALSE(fs::exists(dir / "out.yaml"));
    CHECK(read(dir / "ds/zero2.json") == json);
  }

  SECTION("memory fixes: ZeRO-3 and offload in the file; --set edits the file's own spelling") {
    const std::string plan =
        "base_model: meta-llama/Llama-3.1-8B\nsequence_len: 4096\nmicro_batch_size: 1\ngradient_checkpointing: true\n"
        "deepspeed: ds/zero2.json\nhookstream:\n  world_size: 2\n  gpu: H100-SXM\n";
    std::ofstream(dir / "plan.yaml") << plan;
    const auto json_out = run_command(in(dir, "verify plan.yaml --format json"));
    INFO(json_out.out.substr(0, 4000));
    REQUIRE(json_out.exit_code == 1);
    const auto fixes = deepspeed_fixes(nlohmann::json::parse(json_out.out));
    REQUIRE(fixes.size() >= 1);
    for (size_t i = 0; i < fixes.size(); ++i) {
      const std::string patch = fixes[i]["patch"];
      CHECK(patch.rfind("--- ds/zero2.json\n+++ ds/zero2.json\n", 0) == 0);
      CHECK(patch.find("plan.yaml") == std::string::npos);
      const fs::path copy = patched_copy(dir, "mem-" + std::to_string(i), plan, "ds/zero2.json", json, patch);
      // The patched file loads and its memory fits (the fix was re-verified before it was printed).
      const auto fixed = run_command(in(copy, "verify plan.yaml"));
      INFO(fixed.out.substr(0, 3000));
      CHECK(fixed.exit_code == 0);
    }
    // --set of an aliased stage-3 key sets the spelling the file uses, not a second key beside it.
    const auto set = run_command(in(dir, "verify plan.yaml --set deepspeed.zero_optimization.stage=3 "
                                         "--set deepspeed.zero_optimization.stage3_max_live_parameters=1000 --format json"));
    INFO(set.out.substr(0, 2000));
    CHECK(set.exit_code != 2);
    CHECK(set.out.find("zero_optimization.stage: 3 (ds/zero2.json)") != std::string::npos);
    CHECK(read(dir / "ds/zero2.json") == json);
  }
}

TEST_CASE("FSDP fixes of a plan whose engine comes from --accelerate-config are patches to that file", "[cli][patch][fsdp]") {
  hookstream::test::TempDir dir("hookstream-fix-accelerate-" + std::to_string(getpid()));
  // accelerate's own spelling (fsdp_-prefixed keys); the plan sets no engine, so this file's
  // fsdp_config is the one that runs. 16k tokens of Llama-3.1-8B over 2 ranks does not fit with
  // reshard_after_forward false (the FSDP spelling test above: 92.6 GiB on an H100's 79).
  const std::string accelerate =
      "compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_version: 2\n"
      "  fsdp_offload_params: false\n  fsdp_reshard_after_forward: false   # keep layers gathered\nmixed_precision: bf16\n";
  const std::string plan = std::string(kFsdpPlanHead);
  std::ofstream(dir / "plan.yaml") << plan;
  std::ofstream(dir / "acc.yaml") << accelerate;
  const auto json_out = run_command(in(dir, "verify plan.yaml --accelerate-config acc.yaml --format json"));
  INFO(json_out.out.substr(0, 4000));
  REQUIRE(json_out.exit_code == 1);
  const auto report = nlohmann::json::parse(json_out.out);
  int accelerate_fixes = 0;
  for (const auto& fix : report["fixes"]) {
    bool touches = false;
    for (const auto& change : fix["changes"]) {
      const std::string key = change["key"];
      if (key.rfind("fsdp_config.", 0) != 0) continue;
      touches = true;
      CHECK(key.rfind("fsdp_config.fsdp_", 0) == 0);
      CHECK(change["file"] == "acc.yaml");
    }
    if (!touches) continue;
    const std::string patch = fix["patch"];
    CHECK(patch.find("--- acc.yaml\n+++ acc.yaml\n") != std::string::npos);
    CHECK(patch.find("+fsdp_config:") == std::string::npos);  // no second fsdp_config in the plan
    const fs::path copy = dir / ("patched-" + std::to_string(accelerate_fixes++));
    fs::create_directories(copy);
    std::ofstream(copy / "plan.yaml") << plan;
    std::ofstream(copy / "acc.yaml") << accelerate;
    std::ofstream(dir / "fix.diff") << patch;
    const auto applied = run_command("cd '" + copy.string() + "' && patch -p0 < ../fix.diff");
    INFO(patch);
    REQUIRE(applied.exit_code == 0);
    const auto fixed = run_command(in(copy, "verify plan.yaml --accelerate-config acc.yaml"));
    INFO(fixed.out.substr(0, 3000));
    CHECK(fixed.exit_code == 0);
  }
  CHECK(accelerate_fixes >= 1);
  CHECK(read(dir / "acc.yaml") == accelerate);
}

TEST_CASE("DeepSpeed fixes of a plan whose engine comes from an accelerate DEEPSPEED config patch the file holding the setting", "[cli][patch][zero]") {
  hookstream::test::TempDir dir("hookstream-fix-accelerate-ds-" + std::to_string(getpid()));
  // ZeRO-2 asserts on a tiled MLP whose shards each run AccumulateGrad (docs/engines/deepspeed-zero.md);
  // the plan names no engine: the accelerate config does.
  const std::string plan =
      "base_model: tiny-llama\nsequence_len: 8\nmicro_batch_size: 1\ntiled_mlp: true\ntiled_mlp_num_shards: 2\n"
      "hookstream:\n  iterations: 2\n  tiled_mlp_backward: per_chunk_backward\n  tiled_mlp_ds_grad_is_ready: false\n";
  const std::string head = "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\nnum_processes: 2\n";
  std::ofstream(dir / "plan.yaml") << plan;
  // Collects the fixes that edit `file`, applies each with patch -p0 in a copy and verifies the copy.
  auto check_fixes = [&](const std::string& name, const std::string& accelerate, const std::string& file, const std::string& json,
                         const std::string& expected_line) {
    int first = 0;  // the first such fix's number, as --fix takes it
    std::ofstream(dir / "acc.yaml") << accelerate;
    const auto out = run_command(in(dir, "verify plan.yaml --accelerate-config acc.yaml --format json"));
    INFO(out.out.substr(0, 4000));
    REQUIRE(out.exit_code == 1);
    const auto report = nlohmann::json::parse(out.out);
    int count = 0;
    for (size_t number = 1; number <= report["fixes"].size(); ++number) {
      const std::string patch = report["fixes"][number - 1]["patch"];
      if (patch.find("--- " + file + "\n") == std::string::npos) continue;
      if (first == 0) first = static_cast<int>(number);
      INFO(patch);
      CHECK(patch.find("plan.yaml") == std::string::npos);
      CHECK(patch.find(expected_line) != std::string::npos);
      const fs::path copy = dir / (name + "-" + std::to_string(count++));
      fs::create_directories(copy / "ds");
      std::ofstream(copy / "plan.yaml") << plan;
      std::ofstream(copy / "acc.yaml") << accelerate;
      if (!json.empty()) std::ofstream(copy / "ds/zero2.json") << json;
      std::ofstream(dir / "fix.diff") << patch;
      const auto applied = run_command("cd '" + copy.string() + "' && patch -p0 < ../fix.diff");
      REQUIRE(applied.exit_code == 0);
      const auto fixed = run_command(in(copy, "verify plan.yaml --accelerate-config acc.yaml"));
      INFO(fixed.out.substr(0, 3000));
      CHECK(fixed.exit_code == 0);
      CHECK(read(copy / "plan.yaml") == plan);
    }
    CHECK(count >= 1);
    CHECK(read(dir / "acc.yaml") == accelerate);
    return first;
  };

  SECTION("deepspeed_config_file: the JSON it names, relative to the working directory as accelerate opens it") {
    const std::string json = "{\n  \"zero_optimization\": {\n    \"stage\": 2,\n    \"overlap_comm\": true\n  },\n  \"gradient_accumulation_steps\": \"auto\"\n}\n";
    fs::create_directories(dir / "ds");
    std::ofstream(dir / "ds/zero2.json") << json;
    check_fixes("file", head + "deepspeed_config:\n  deepspeed_config_file: ds/zero2.json\n  zero3_init_flag: false\nmixed_precision: null\n",
                "ds/zero2.json", json, "+    \"stage\": 1,\n");
    CHECK(read(dir / "ds/zero2.json") == json);
    // From another directory the relative path does not resolve: one line, exit 2.
    const auto elsewhere = run_command("cd / && " + std::string(HOOKSTREAM_BINARY) + " verify '" + (dir / "plan.yaml").string() +
                                       "' --accelerate-config '" + (dir / "acc.yaml").string() + "'");
    CHECK(elsewhere.exit_code == 2);
    CHECK(elsewhere.out.find("key \"deepspeed_config.deepspeed_config_file\": DeepSpeed config \"ds/zero2.json\" not found; accelerate opens it "
                             "relative to the working directory (/)") != std::string::npos);
  }
  SECTION("inline deepspeed_config fields: the accelerate config's own zero_stage") {
    const int number = check_fixes("inline", head + "deepspeed_config:\n  zero_stage: 2\n  offload_optimizer_device: none\n  zero3_init_flag: false\n",
                                   "acc.yaml", "", "+  zero_stage: 1\n");
    // --write-fixed writes only the plan: it refuses a fix that edits the accelerate config.
    const auto refused = run_command(in(dir, "verify plan.yaml --accelerate-config acc.yaml --write-fixed out.yaml --fix " + std::to_string(number)));
    CHECK(refused.exit_code == 2);
    CHECK(refused.out.find("edits acc.yaml, the accelerate config, which --write-fixed does not write") != std::string::npos);
    CHECK_FALSE(fs::exists(dir / "out.yaml"));
  }
  SECTION("memory fixes of inline fields: zero_stage 3 and offload_optimizer_device, each re-verified in a patched copy") {
    // Llama-3.1-8B at 4K tokens does not fit ZeRO-2 over 2 ranks of an H100 (the JSON case above).
    const std::string big = "base_model: meta-llama/Llama-3.1-8B\nsequence_len: 4096\nmicro_batch_size: 1\ngradient_checkpointing: true\n"
                            "hookstream:\n  gpu: H100-SXM\n";
    const std::string accelerate = head + "deepspeed_config:\n  zero_stage: 2\n  zero3_init_flag: false\nmixed_precision: bf16\n";
    std::ofstream(dir / "big.yaml") << big;
    std::ofstream(dir / "acc.yaml") << accelerate;
    const auto out = run_command(in(dir, "verify big.yaml --accelerate-config acc.yaml --format json"));
    INFO(out.out.substr(0, 4000));
    REQUIRE(out.exit_code == 1);
    std::set<std::string> fields;
    const auto report = nlohmann::json::parse(out.out);
    for (const auto& fix : report["fixes"]) {
      const std::string patch = fix["patch"];
      if (patch.find("--- acc.yaml\n") == std::string::npos) continue;
      for (const auto& change : fix["changes"]) fields.insert(change["key"].get<std::string>());
      const fs::path copy = dir / ("mem-" + std::to_string(fields.size()));
      fs::create_directories(copy);
      std::ofstream(copy / "big.yaml") << big;
      std::ofstream(copy / "acc.yaml") << accelerate;
      std::ofstream(dir / "fix.diff") << patch;
      INFO(patch);
      REQUIRE(run_command("cd '" + copy.string() + "' && patch -p0 < ../fix.diff").exit_code == 0);
      const auto fixed = run_command(in(copy, "verify big.yaml --accelerate-config acc.yaml"));
      INFO(fixed.out.substr(0, 3000));
      CHECK(fixed.exit_code == 0);
    }
    CHECK(fields == std::set<std::string>{"deepspeed_config.zero_stage", "deepspeed_config.offload_optimizer_device"});
  }
  SECTION("both: accelerate refuses the inline field beside the JSON, one line, exit 2") {
    const std::string json = "{\"zero_optimization\": {\"stage\": 2}}\n";
    fs::create_directories(dir / "ds");
    std::ofstream(dir / "ds/zero2.json") << json;
    std::ofstream(dir / "acc.yaml") << head + "deepspeed_config:\n  deepspeed_config_file: ds/zero2.json\n  zero_stage: 2\n";
    const auto refused = run_command(in(dir, "verify plan.yaml --accelerate-config acc.yaml"));
    CHECK(refused.exit_code == 2);
    CHECK(refused.out.find("acc.yaml:6: key \"deepspeed_config.zero_stage\": accelerate refuses it beside the DeepSpeed config ds/zero2.json") !=
          std::string::npos);
    CHECK(std::count(refused.out.begin(), refused.out.end(), '\n') <= 1);
  }
}
