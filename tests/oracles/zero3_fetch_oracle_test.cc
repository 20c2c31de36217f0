// ZeRO-3's parameter fetches against real DeepSpeed 0.19.8 running a real transformers model
// (oracles/zero3_fetch_worker.py: the plan's config.json through AutoModelForCausalLM, PEFT LoRA and
// transformers' gradient checkpointing as axolotl sets them, CPU accelerator, Gloo, world 2; the
// worker observes PartitionedParameterCoordinator's all-gathers and its __n_available_params): the
// memory and time models' fetch trace (sim/cost/engine_cost.h zero3_fetches: every module call a
// step, parameter-less containers included, stage3_max_reuse_distance, prefetch,
// max_live_parameters, re-gathers in reentrant and non-reentrant recompute, frozen parameters held
// through a recompute) must take as many steps as the real coordinator's recorded trace, hold the
// same most elements at once, and all-gather the same elements under each of DeepSpeed's
// forward/backward flags, in a step after the first (the coordinator's trace is complete from the
// second forward on). Every parameter is partitioned (persistence threshold 0).

#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>

#include "runtime/ddp_structure_json.h"
#include "sim/cost/engine_cost.h"
#include "sim/inputs/model_structure.h"
#include "tests/read_text.h"
#include "tests/temp_dir.h"

#undef CHECK
#include <catch2/catch.hpp>

using namespace hookstream;
namespace fs = std::filesystem;
using hookstream::test::read_text;

namespace {

struct FetchCase {
  std::string name;
  std::string zero;      // extra zero_optimization lines
  std::string training;  // extra top-level lines
  std::string checkpointing = "none";  // what the worker enables: none, reentrant, non_reentrant
  std::string model = std::string(HOOKSTREAM_SOURCE_DIR) + "/presets/tiny-llama.json";  // the config.json
};

// The worker's spec: the plan's model, its zero_optimization section as DeepSpeed reads it, its
// checkpointing and LoRA.
std::string worker_spec(const FetchCase& c, const Plan& plan) {
  nlohmann::json zero = {{"stage", 3}, {"stage3_param_persistence_threshold", 0}};
  std::istringstream lines(c.zero);
  for (std::string line; std::getline(lines, line);) {
    const size_t colon = line.find(':');
    std::string key = line.substr(line.find_first_not_of(' '), colon - line.find_first_not_of(' '));
    if (key.rfind("stage3_", 0) != 0) key = "stage3_" + key;
    zero[key] = std::stoll(line.substr(colon + 1));
  }
  nlohmann::json spec = {{"config", c.model},
                         {"world_size", 2},
                         {"micro_batch_size", 1},
                         {"sequence_len", 8},
                         {"steps", 2},
                         {"zero", zero},
                         {"checkpointing", c.checkpointing},
                         {"input_require_grads", plan.input_require_grads()},
                         {"lora", nullptr}};
  if (plan.adapter != Adapter::None) spec["lora"] = {{"r", plan.lora_r}, {"target_modules", plan.lora_target_modules}};
  return spec.dump(1);
}

std::string plan_yaml(const FetchCase& c) {
  return "base_model: " + c.model + "\nsequence_len: 8\nmicro_batch_size: 1\n" + c.training +
         "deepspeed:\n  zero_optimization:\n    stage: 3\n    stage3_param_persistence_threshold: 0\n" + c.zero +
         "hookstream:\n  world_size: 2\n  iterations: 2\n";
}

}  // namespace

TEST_CASE("ZeRO-3 fetch trace: steps, all-gathered elements by flag and the most gathered at once equal real DeepSpeed's coordinator",
          "[oracle][zero][memory]") {
  const std::string reentrant = "gradient_checkpointing: true\ngradient_checkpointing_kwargs:\n  use_reentrant: true\n";
  const std::string non_reentrant = "gradient_checkpointing: true\ngradient_checkpointing_kwargs:\n  use_reentrant: false\n";
  const std::string lora = "adapter: lora\nlora_r: 2\nlora_target_modules: [q_proj, v_proj, up_proj, down_proj]\n";
  const std::string no_prefetch = "    stage3_prefetch_bucket_size: 0\n";
  const std::string prefetch_1000 = "    stage3_prefetch_bucket_size: 1000\n";
  const std::string no_reuse = "    stage3_max_reuse_distance: 0\n";
  const std::string tied = std::string(HOOKSTREAM_SOURCE_DIR) + "/tests/plans/models/tiny-llama-tied.json";
  const std::vector<FetchCase> cases = {
      {"no prefetch, no reuse", no_prefetch + no_reuse, ""},
      {"no prefetch, default reuse distance", no_prefetch, ""},
      {"no prefetch, reuse distance 3000", no_prefetch + "    stage3_max_reuse_distance: 3000\n", ""},
      {"reentrant checkpointing, no reuse", no_prefetch + no_reuse, reentrant, "reentrant"},
      {"reentrant checkpointing, default reuse distance", no_prefetch, reentrant, "reentrant"},
      {"non-reentrant checkpointing, no reuse", no_prefetch + no_reuse, non_reentrant, "non_reentrant"},
      {"prefetch 1000, no reuse", prefetch_1000 + no_reuse, ""},
      {"prefetch 1000 under max_live 1500, reentrant, no reuse", prefetch_1000 + "    stage3_max_live_parameters: 1500\n" + no_reuse,
       reentrant, "reentrant"},
      {"prefetch 1000, non-reentrant, no reuse", prefetch_1000 + no_reuse, non_reentrant, "non_reentrant"},
      {"prefetch 3000, reuse distance 3000", "    stage3_prefetch_bucket_size: 3000\n    stage3_max_reuse_distance: 3000\n", ""},
      {"DeepSpeed's defaults (prefetch 5e7, reuse 1e9)", "", ""},
      {"LoRA, reentrant checkpointing, no reuse", no_prefetch + "    max_reuse_distance: 0\n", lora + reentrant, "reentrant"},
      {"LoRA, prefetch 1000, non-reentrant, no reuse", prefetch_1000 + no_reuse, lora + non_reentrant, "non_reentrant"},
      {"LoRA, prefetch 1000, no checkpointing, no reuse", prefetch_1000 + no_reuse, lora},
      // Tied embeddings: the head module fetches the embedding's weight again.
      {"tied embeddings, no prefetch, no reuse", no_prefetch + no_reuse, "", "none", tied},
      {"tied embeddings, prefetch 1000, reentrant, no reuse", prefetch_1000 + no_reuse, reentrant, "reentrant", tied},
  };
  hookstream::test::TempDir dir(fmt::format("zero3-fetch-oracle-{}", ::getpid()));
  std::string command = fmt::format("{}/oracles/run.sh {} {}/oracles/zero3_fetch_worker.py", HOOKSTREAM_SOURCE_DIR,
                                    HOOKSTREAM_ORACLE_PYTHON, HOOKSTREAM_SOURCE_DIR);
  std::vector<Plan> plans;
  std::vector<ModelStructure> structures;
  for (size_t i = 0; i < cases.size(); ++i) {
    plans.push_back(parse_plan(plan_yaml(cases[i]), cases[i].name + ".yaml"));
    structures.push_back(build_model_structure(plans.back()));
    const fs::path out = dir.path() / fmt::format("{:02}", i);
    fs::create_directories(out);
    std::ofstream(out / "spec.json") << worker_spec(cases[i], plans.back());
    command += " " + out.string();
  }
  command += " > " + (dir.path() / "worker.log").string() + " 2>&1";
  const int status = std::system(command.c_str());
  INFO(read_text(dir.path() / "worker.log").substr(0, 4000));
  REQUIRE(status == 0);
  for (size_t i = 0; i < cases.size(); ++i) {
    const EngineCostSettings settings = engine_cost_settings(plans[i]);
    const Zero3Fetches predicted = zero3_fetches(plans[i], structures[i], settings);
    for (int rank = 0; rank < 2; ++rank) {
      const nlohmann::json report = nlohmann::json::parse(read_text(dir.path() / fmt::format("{:02}", i) / fmt::format("fetch-rank-{}.json", rank)));
      INFO(report["error"].dump());
      REQUIRE(report["error"].is_null());
      const nlohmann::json& real = report["fetches"];
      INFO(cases[i].name << " rank " << rank << "\n" << plan_yaml(cases[i]) << "\nreal: " << real.dump() << "\nreal trace: "
                         << report["trace"].dump() << "\npredicted: forward-flagged " << predicted.forward_flagged
                         << " backward-flagged " << predicted.backward_flagged << " (recompute " << predicted.recompute_elements
                         << ", kept " << predicted.kept_elements << ") peak " << predicted.peak_available << ", " << predicted.steps
                         << " steps");
      CHECK(static_cast<int>(report["trace"].size()) == predicted.steps);
      CHECK(real["forward"].get<int64_t>() == predicted.forward_flagged);
      CHECK(real["backward"].get<int64_t>() == predicted.backward_flagged);
      CHECK(real["peak_available"].get<int64_t>() == predicted.peak_available);
      // The per-phase sums the time model prices are the same elements, split by use.
      int64_t by_use = 0;
      for (int64_t e : predicted.forward_elements) by_use += e;
      for (int64_t e : predicted.backward_elements) by_use += e;
      CHECK(by_use == predicted.forward_flagged + predicted.backward_flagged);
    }
  }
}
