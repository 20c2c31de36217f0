// ZeRO-3's parameter fetches against real DeepSpeed 0.19.8 (CPU accelerator, Gloo, world 2;
// oracles/zero_worker.py observes PartitionedParameterCoordinator's all-gathers and its
// __n_available_params): the memory and time models' fetch trace (sim/cost/engine_cost.h
// zero3_fetches: stage3_max_reuse_distance, re-gathers in reentrant and non-reentrant recompute,
// frozen parameters held through a recompute, prefetch, max_live_parameters) must hold the same
// most elements at once as the real coordinator, and all-gather the same elements in forward and
// in backward, in a step after the first (the coordinator's trace is complete from the second
// forward on). With a prefetch bucket smaller than the model the real coordinator keeps more
// modules from forward to backward than the model predicts: there only the peak is checked, and
// that the model does not predict fewer all-gathers (docs/engines/deepspeed-zero.md). Every
// parameter is partitioned (persistence threshold 0), each parameter's module called as a module,
// as in a transformers model.

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
#include "tests/temp_dir.h"

#undef CHECK
#include <catch2/catch.hpp>

using namespace hookstream;
namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct FetchCase {
  std::string name;
  std::string zero;      // extra zero_optimization lines
  std::string training;  // extra top-level lines
  bool volume_unconfirmed = false;  // prefetch mid-way through the trace: only the peak is confirmed
};

std::string plan_yaml(const FetchCase& c) {
  return "base_model: tiny-llama\nsequence_len: 8\nmicro_batch_size: 1\n" + c.training +
         "deepspeed:\n  zero_optimization:\n    stage: 3\n    stage3_param_persistence_threshold: 0\n" + c.zero +
         "hookstream:\n  world_size: 2\n  iterations: 2\n";
}

}  // namespace

TEST_CASE("ZeRO-3 fetch trace: all-gathered elements and the most gathered at once equal real DeepSpeed's coordinator",
          "[oracle][zero][memory]") {
  const std::string reentrant = "gradient_checkpointing: true\ngradient_checkpointing_kwargs:\n  use_reentrant: true\n";
  const std::string non_reentrant = "gradient_checkpointing: true\ngradient_checkpointing_kwargs:\n  use_reentrant: false\n";
  const std::string lora = "adapter: lora\nlora_r: 2\nlora_target_modules: [q_proj, v_proj, up_proj, down_proj]\n";
  const std::string no_prefetch = "    stage3_prefetch_bucket_size: 0\n";
  const std::vector<FetchCase> cases = {
      {"no prefetch, no reuse", no_prefetch + "    stage3_max_reuse_distance: 0\n", ""},
      {"no prefetch, default reuse distance", no_prefetch, ""},
      {"no prefetch, reuse distance 3000", no_prefetch + "    stage3_max_reuse_distance: 3000\n", ""},
      {"reentrant checkpointing, no reuse", no_prefetch + "    stage3_max_reuse_distance: 0\n", reentrant},
      {"reentrant checkpointing, default reuse distance", no_prefetch, reentrant},
      {"non-reentrant checkpointing, no reuse", no_prefetch + "    stage3_max_reuse_distance: 0\n", non_reentrant},
      {"prefetch 1000, no reuse", "    stage3_prefetch_bucket_size: 1000\n    stage3_max_reuse_distance: 0\n", "", true},
      {"prefetch 1000 under max_live 1500, reentrant, no reuse",
       "    stage3_prefetch_bucket_size: 1000\n    stage3_max_live_parameters: 1500\n    stage3_max_reuse_distance: 0\n", reentrant, true},
      {"DeepSpeed's defaults (prefetch 5e7, reuse 1e9)", "", ""},
      {"LoRA, reentrant checkpointing, no reuse", no_prefetch + "    max_reuse_distance: 0\n", lora + reentrant},
  };
  hookstream::test::TempDir dir(fmt::format("zero3-fetch-oracle-{}", ::getpid()));
  std::string command = fmt::format("{}/oracles/run.sh {} {}/oracles/zero_worker.py --collective-timeout-ms 3000", HOOKSTREAM_SOURCE_DIR,
                                    HOOKSTREAM_ORACLE_PYTHON, HOOKSTREAM_SOURCE_DIR);
  std::vector<Plan> plans;
  std::vector<ModelStructure> structures;
  for (size_t i = 0; i < cases.size(); ++i) {
    plans.push_back(parse_plan(plan_yaml(cases[i]), cases[i].name + ".yaml"));
    structures.push_back(build_model_structure(plans.back()));
    const fs::path out = dir.path() / fmt::format("{:02}", i);
    fs::create_directories(out);
    std::ofstream(out / "structure.json") << ddp_structure_json(plans.back(), structures.back());
    command += " " + out.string();
  }
  command += " > " + (dir.path() / "worker.log").string() + " 2>&1";
  const int status = std::system(command.c_str());
  INFO(read_text(dir.path() / "worker.log").substr(0, 4000));
  REQUIRE(status == 0);
  for (size_t i = 0; i < cases.size(); ++i) {
    const EngineCostSettings settings = engine_cost_settings(plans[i]);
    const Zero3Fetches predicted = zero3_fetches(plans[i], structures[i], settings);
    int64_t forward = 0, backward = 0;
    for (int64_t e : predicted.forward_elements) forward += e;
    for (int64_t e : predicted.backward_elements) backward += e;
    for (int rank = 0; rank < 2; ++rank) {
      const nlohmann::json report = nlohmann::json::parse(read_text(dir.path() / fmt::format("{:02}", i) / fmt::format("zero-rank-{}.json", rank)));
      INFO(report["error"].dump());
      REQUIRE(report["error"].is_null());
      const nlohmann::json real = report["iterations"].back()["micro_steps"].back()["fetches"];
      INFO(cases[i].name << " rank " << rank << "\n" << plan_yaml(cases[i]) << "\nreal: " << real.dump()
                         << "\npredicted: forward " << forward << " backward " << backward << " (recompute " << predicted.recompute_elements
                         << ", kept " << predicted.kept_elements << ") peak " << predicted.peak_available);
      // DeepSpeed flags a fetch by the hook that issued it: a recompute's fetches come from forward
      // hooks, a prefetch carries the flag of the fetch that issued it.
      if (!cases[i].volume_unconfirmed) {
        CHECK(real["forward"].get<int64_t>() == forward + predicted.recompute_elements);
        CHECK(real["backward"].get<int64_t>() == backward - predicted.recompute_elements);
      } else {
        // Not confirmed with prefetch on: the real coordinator keeps more modules from forward to
        // backward than the model, so it gathers less. Why: parameter-less container modules are
        // trace steps whose fetch runs a prefetch round, so the real prefetcher runs further ahead
        // and skips (protects) more still-gathered backward uses; the model's trace has no
        // containers (docs/engines/deepspeed-zero.md, "Not confirmed, mechanism found").
        CHECK(real["forward"].get<int64_t>() + real["backward"].get<int64_t>() <= forward + backward);
      }
      CHECK(real["peak_available"].get<int64_t>() == predicted.peak_available);
    }
  }
}
