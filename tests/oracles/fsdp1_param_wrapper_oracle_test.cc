// FSDP1 + LoRA on expert tensors (lora_target_parameters: PEFT's ParamWrapper) against the real
// engine: oracles/fsdp1_param_wrapper_worker.py runs each plan of tests/plans/fsdp1_param_wrapper
// on a real transformers model (the plan's config.json) with real PEFT 0.21 LoRA under real FSDP1
// (torch 2.11, PEFT's fsdp_auto_wrap_policy as the HF Trainer sets it, CPU, Gloo, world 2). The
// simulation must give every rank the verdict the real rank shows: the first forward raises, with
// the same text (sim/sync/fsdp1/fsdp1_model.cc check_param_wrapper_reads).

#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>

#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"
#include "sim/sync/sync_simulation.h"
#include "tests/read_text.h"
#include "tests/temp_dir.h"

#undef CHECK
#include <catch2/catch.hpp>

using namespace hookstream;
namespace fs = std::filesystem;
using hookstream::test::read_text;

TEST_CASE("FSDP1 ParamWrapper on expert tensors: every rank's first-forward error equals real FSDP1 + PEFT's",
          "[oracle][fsdp1][param_wrapper]") {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(std::string(HOOKSTREAM_SOURCE_DIR) + "/tests/plans/fsdp1_param_wrapper")) {
    if (entry.path().extension() == ".yaml") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() >= 3);
  hookstream::test::TempDir dir(fmt::format("fsdp1-param-wrapper-oracle-{}", ::getpid()));
  std::string command = fmt::format("{}/oracles/run.sh {} {}/oracles/fsdp1_param_wrapper_worker.py", HOOKSTREAM_SOURCE_DIR,
                                    HOOKSTREAM_ORACLE_PYTHON, HOOKSTREAM_SOURCE_DIR);
  std::vector<Plan> plans;
  for (size_t i = 0; i < files.size(); ++i) {
    plans.push_back(load_plan(files[i].string()));
    const Plan& plan = plans.back();
    REQUIRE(plan.engine.kind == EngineKind::Fsdp1);
    REQUIRE(gradient_sync_modelled(plan.engine));
    const nlohmann::json spec = {{"config", plan.model.source},
                                 {"world_size", plan.world_size},
                                 {"sequence_len", plan.sequence_len},
                                 {"use_orig_params", plan.engine.fsdp.use_orig_params.value_or(false)},
                                 {"lora",
                                  {{"r", plan.lora_r},
                                   {"target_modules", plan.lora_target_modules},
                                   {"target_parameters", plan.lora_target_parameters}}}};
    const fs::path out = dir.path() / fmt::format("{:02}", i);
    fs::create_directories(out);
    std::ofstream(out / "spec.json") << spec.dump(1);
    command += " " + out.string();
  }
  command += " > " + (dir.path() / "worker.log").string() + " 2>&1";
  const int status = std::system(command.c_str());
  INFO(read_text(dir.path() / "worker.log").substr(0, 4000));
  REQUIRE(status == 0);
  for (size_t i = 0; i < files.size(); ++i) {
    const Plan& plan = plans[i];
    const SyncSimulation predicted = simulate_gradient_sync(plan, build_model_structure(plan));
    for (int rank = 0; rank < plan.world_size; ++rank) {
      const nlohmann::json real = nlohmann::json::parse(read_text(dir.path() / fmt::format("{:02}", i) / fmt::format("fsdp1-pw-rank-{}.json", rank)));
      INFO(files[i].filename().string() << " rank " << rank << "\nreal: " << real.dump());
      REQUIRE(real["error"].is_object());
      const Finding* found = nullptr;
      for (const Finding& f : predicted.findings) {
        if (std::find(f.ranks.begin(), f.ranks.end(), rank) != f.ranks.end() || f.rank == rank) {
          found = &f;
          break;
        }
      }
      REQUIRE(found != nullptr);
      INFO("predicted: " << to_string(found->kind) << " '" << found->error_text << "' iteration " << found->iteration << " "
                         << to_string(found->phase));
      CHECK(found->kind == VerdictKind::ShardedParameterUse);
      CHECK(real["error"]["phase"] == "forward");
      CHECK(found->phase == Phase::Forward);
      CHECK(found->iteration == 0);
      CHECK(found->micro_step == 0);
      CHECK(real["error"]["text"].get<std::string>() == found->error_text);
    }
  }
}
