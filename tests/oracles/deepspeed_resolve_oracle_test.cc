// A DeepSpeed JSON as the real stack resolves it before DeepSpeed trains: transformers 5.17's
// TrainingArguments + accelerate 1.15's DeepSpeedPlugin + DeepSpeed 0.19.8's DeepSpeedZeroConfig
// (oracles/deepspeed_resolve.py, the oracle venv), for axolotl's own deepspeed_configs/ and for
// "auto" / missing values, reached as the plan's `deepspeed:` (axolotl's environment) and as an
// accelerate config's deepspeed_config_file. hookstream must load the plan with the same stage,
// overlap_comm, contiguous_gradients and offload devices, or refuse it where the stack fails,
// quoting the same error.
#include <unistd.h>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "sim/inputs/input_error.h"
#include "sim/inputs/plan.h"
#include "tests/temp_dir.h"

#include <catch2/catch.hpp>

using namespace hookstream;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// axolotl's deepspeed_configs/ (axolotl-ai-cloud/axolotl, the files `axolotl fetch
// deepspeed_configs` writes), byte for byte, and the "auto" / missing cases.
const std::vector<std::pair<std::string, std::string>>& jsons() {
  static const std::vector<std::pair<std::string, std::string>> files = {
      {"zero1.json",
       "{\n  \"zero_optimization\": {\n    \"stage\": 1,\n    \"overlap_comm\": true\n  },\n  \"bf16\": {\n    \"enabled\": \"auto\"\n  },\n"
       "  \"fp16\": {\n    \"enabled\": \"auto\",\n    \"auto_cast\": false,\n    \"loss_scale\": 0,\n    \"initial_scale_power\": 32,\n"
       "    \"loss_scale_window\": 1000,\n    \"hysteresis\": 2,\n    \"min_loss_scale\": 1\n  },\n  \"gradient_accumulation_steps\": \"auto\",\n"
       "  \"gradient_clipping\": \"auto\",\n  \"train_batch_size\": \"auto\",\n  \"train_micro_batch_size_per_gpu\": \"auto\",\n"
       "  \"wall_clock_breakdown\": false\n}\n"},
      {"zero2.json",
       "{\n  \"zero_optimization\": {\n    \"stage\": 2,\n    \"offload_optimizer\": {\n      \"device\": \"cpu\"\n    },\n"
       "    \"contiguous_gradients\": true,\n    \"overlap_comm\": true\n  },\n  \"bf16\": {\n    \"enabled\": \"auto\"\n  },\n"
       "  \"fp16\": {\n    \"enabled\": \"auto\",\n    \"auto_cast\": false,\n    \"loss_scale\": 0,\n    \"initial_scale_power\": 32,\n"
       "    \"loss_scale_window\": 1000,\n    \"hysteresis\": 2,\n    \"min_loss_scale\": 1\n  },\n  \"gradient_accumulation_steps\": \"auto\",\n"
       "  \"gradient_clipping\": \"auto\",\n  \"train_batch_size\": \"auto\",\n  \"train_micro_batch_size_per_gpu\": \"auto\",\n"
       "  \"wall_clock_breakdown\": false\n}\n"},
      {"zero3_bf16.json",
       "{\n  \"zero_optimization\": {\n    \"stage\": 3,\n    \"overlap_comm\": true,\n    \"contiguous_gradients\": true,\n"
       "    \"sub_group_size\": 0,\n    \"reduce_bucket_size\": \"auto\",\n    \"stage3_prefetch_bucket_size\": \"auto\",\n"
       "    \"stage3_param_persistence_threshold\": \"auto\",\n    \"stage3_max_live_parameters\": 0,\n    \"stage3_max_reuse_distance\": 0,\n"
       "    \"stage3_gather_16bit_weights_on_model_save\": true\n  },\n  \"bf16\": {\n    \"enabled\": true\n  },\n"
       "  \"gradient_accumulation_steps\": \"auto\",\n  \"gradient_clipping\": \"auto\",\n  \"train_batch_size\": \"auto\",\n"
       "  \"train_micro_batch_size_per_gpu\": \"auto\",\n  \"wall_clock_breakdown\": false\n}\n"},
      {"zero3_bf16_cpuoffload_all.json",
       "{\n  \"zero_force_ds_cpu_optimizer\": false,\n  \"zero_allow_untested_optimizer\": true,\n  \"zero_optimization\": {\n"
       "    \"stage\": 3,\n    \"offload_optimizer\": {\n      \"device\": \"cpu\",\n      \"pin_memory\": true\n    },\n"
       "    \"offload_param\": {\n      \"device\": \"cpu\",\n      \"pin_memory\": true\n    },\n    \"overlap_comm\": true,\n"
       "    \"contiguous_gradients\": true,\n    \"sub_group_size\": 0,\n    \"reduce_bucket_size\": \"auto\",\n"
       "    \"stage3_prefetch_bucket_size\": \"auto\",\n    \"stage3_param_persistence_threshold\": \"auto\",\n"
       "    \"stage3_max_live_parameters\": 0,\n    \"stage3_max_reuse_distance\": 0,\n    \"stage3_gather_16bit_weights_on_model_save\": true\n"
       "  },\n  \"bf16\": {\n    \"enabled\": true\n  },\n  \"gradient_accumulation_steps\": \"auto\",\n  \"gradient_clipping\": \"auto\",\n"
       "  \"train_batch_size\": \"auto\",\n  \"train_micro_batch_size_per_gpu\": \"auto\",\n  \"wall_clock_breakdown\": false\n}\n"},
      // Every value a user may leave to "auto", at stage "auto".
      {"stage_auto.json",
       "{\"zero_optimization\": {\"stage\": \"auto\", \"overlap_comm\": \"auto\", \"contiguous_gradients\": \"auto\",\n"
       "  \"offload_optimizer\": {\"device\": \"auto\"}, \"offload_param\": {\"device\": \"auto\"}, \"reduce_bucket_size\": \"auto\"},\n"
       " \"train_micro_batch_size_per_gpu\": \"auto\", \"gradient_accumulation_steps\": \"auto\"}\n"},
      // Stage 3 with "auto" flags and devices: DeepSpeed's stage-3 default overlap_comm.
      {"zero3_auto_flags.json",
       "{\"zero_optimization\": {\"stage\": 3, \"overlap_comm\": \"auto\", \"offload_param\": {\"device\": \"auto\"}}}\n"},
      // zero_optimization without a stage: DeepSpeed's default 0 (accelerate's plugin keeps its own 2 unused).
      {"no_stage.json", "{\"zero_optimization\": {\"overlap_comm\": true}, \"bf16\": {\"enabled\": true}}\n"},
      // No zero_optimization at all.
      {"no_zero.json", "{\"bf16\": {\"enabled\": true}, \"train_micro_batch_size_per_gpu\": \"auto\"}\n"},
  };
  return files;
}

}  // namespace

TEST_CASE("DeepSpeed JSONs resolve as transformers, accelerate and DeepSpeed resolve them", "[oracle][deepspeed][resolve]") {
  hookstream::test::TempDir dir(fmt::format("deepspeed-resolve-oracle-{}", ::getpid()));
  const int micro_batch = 2, accumulation = 4;
  nlohmann::json cases = nlohmann::json::array();
  struct Row {
    std::string file;
    std::string via;
  };
  std::vector<Row> rows;
  for (const auto& [name, text] : jsons()) {
    std::ofstream(dir / name) << text;
    for (const char* via : {"axolotl", "accelerate"}) {
      rows.push_back({(dir / name).string(), via});
      cases.push_back({{"json", (dir / name).string()}, {"via", via}, {"micro_batch_size", micro_batch}, {"gradient_accumulation_steps", accumulation}});
    }
  }
  std::ofstream(dir / "cases.json") << cases.dump();
  const std::string command = fmt::format("{}/oracles/run.sh {} {}/oracles/deepspeed_resolve.py {} {} > {} 2>&1", HOOKSTREAM_SOURCE_DIR,
                                          HOOKSTREAM_ORACLE_PYTHON, HOOKSTREAM_SOURCE_DIR, (dir / "cases.json").string(),
                                          (dir / "out.json").string(), (dir / "err.log").string());
  const int status = std::system(command.c_str());
  INFO(slurp(dir / "err.log").substr(0, 4000));
  REQUIRE(status == 0);
  const nlohmann::json out = nlohmann::json::parse(slurp(dir / "out.json"));
  REQUIRE(out.size() == rows.size());

  const std::string plan_head = fmt::format("base_model: tiny-llama\nmicro_batch_size: {}\ngradient_accumulation_steps: {}\n", micro_batch, accumulation);
  int failures = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& row = rows[i];
    const nlohmann::json& real = out[i];
    LoadOptions options;
    std::string yaml = plan_head;
    if (row.via == "axolotl") {
      yaml += "deepspeed: " + row.file + "\n";
    } else {
      const fs::path accelerate = dir / fmt::format("accelerate-{}.yaml", i);
      std::ofstream(accelerate) << "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\nnum_processes: 2\n"
                                << "deepspeed_config:\n  deepspeed_config_file: " << row.file << "\n";
      options.accelerate_config = accelerate.string();
    }
    INFO(row.via << " " << row.file << "\nreal: " << real.dump());
    std::optional<Plan> plan;
    std::string refused;
    try {
      plan = parse_plan(yaml, "plan.yaml", options);
    } catch (const InputError& error) {
      refused = error.what();
    }
    INFO("hookstream: " << (plan ? plan->engine.name() : refused));
    if (!real["ok"].get<bool>()) {
      ++failures;
      REQUIRE_FALSE(plan);
      // The stack's own text, without its exception type, is quoted in the refusal.
      std::string text = real["error"].get<std::string>();
      text = text.substr(text.find(": ") + 2);
      CHECK(refused.find(text) != std::string::npos);
      continue;
    }
    REQUIRE(plan);
    REQUIRE(plan->engine.deepspeed);
    const DeepSpeedConfig& ds = *plan->engine.deepspeed;
    CHECK(ds.zero_stage == real["stage"].get<int>());
    CHECK(ds.overlap_comm_or_default() == real["overlap_comm"].get<bool>());
    CHECK(ds.contiguous_gradients.value_or(true) == real["contiguous_gradients"].get<bool>());
    CHECK((ds.offload_optimizer.empty() ? "none" : ds.offload_optimizer) == real["offload_optimizer"].get<std::string>());
    CHECK((ds.offload_param.empty() ? "none" : ds.offload_param) == real["offload_param"].get<std::string>());
  }
  // The stack refuses stage "auto" under axolotl and a JSON without zero_optimization both ways.
  CHECK(failures == 3);
}
