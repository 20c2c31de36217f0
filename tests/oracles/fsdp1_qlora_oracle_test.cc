// FSDP1 over a bitsandbytes-quantized base with a LoRA adapter (axolotl's QLoRA-FSDP examples)
// against the real engines: oracles/fsdp1_qlora_worker.py loads the plan's config with real
// bitsandbytes 0.50.2 (BitsAndBytesConfig as axolotl builds it), real PEFT 0.21 LoRA, and wraps it in
// real FSDP1 (torch 2.11, PEFT's fsdp_auto_wrap_policy as the HF Trainer sets it, CPU, Gloo, world 2)
// for two training iterations. Per named plan of tests/plans/fsdp1_qlora and per rank the simulation
// must give the real verdict (no error, or the same error text), and, where FSDP1 wrapped the model,
// the same FlatParameters (unit, elements with alignment, shard, dtype, requires_grad) and the same
// number of reduce-scatters per iteration (the trainable FlatParameters').

#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"
#include "sim/sync/fsdp1/fsdp1_model.h"
#include "sim/sync/sync_simulation.h"
#include "tests/read_text.h"
#include "tests/temp_dir.h"

#undef CHECK
#include <catch2/catch.hpp>

using namespace hookstream;
namespace fs = std::filesystem;
using hookstream::test::read_text;

TEST_CASE("FSDP1 + QLoRA (bitsandbytes base): every rank's verdict and FlatParameters equal real FSDP1's",
          "[oracle][fsdp1][qlora]") {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(std::string(HOOKSTREAM_SOURCE_DIR) + "/tests/plans/fsdp1_qlora")) {
    if (entry.path().extension() == ".yaml") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() >= 5);
  hookstream::test::TempDir dir(fmt::format("fsdp1-qlora-oracle-{}", ::getpid()));
  std::string command = fmt::format("{}/oracles/run.sh {} {}/oracles/fsdp1_qlora_worker.py", HOOKSTREAM_SOURCE_DIR,
                                    HOOKSTREAM_ORACLE_PYTHON, HOOKSTREAM_SOURCE_DIR);
  std::vector<Plan> plans;
  for (size_t i = 0; i < files.size(); ++i) {
    plans.push_back(load_plan(files[i].string()));
    const Plan& plan = plans.back();
    REQUIRE(plan.engine.kind == EngineKind::Fsdp1);
    REQUIRE(gradient_sync_modelled(plan.engine));
    REQUIRE((plan.load_in_4bit || plan.load_in_8bit));
    // sync_module_states changes no hook (a broadcast at wrap time); the plan keeps it for the oracle.
    const YAML::Node fsdp = YAML::LoadFile(files[i].string())["fsdp_config"];
    const nlohmann::json spec = {
        {"config", plan.model.source},
        {"world_size", plan.world_size},
        {"sequence_len", plan.sequence_len},
        {"iterations", plan.iterations},
        {"use_orig_params", plan.engine.fsdp.use_orig_params.value_or(false)},
        {"offload_params", plan.engine.fsdp.offload_params},
        {"sync_module_states", fsdp["sync_module_states"] ? fsdp["sync_module_states"].as<bool>() : false},
        {"gradient_checkpointing", plan.gradient_checkpointing ? nlohmann::json(plan.use_reentrant ? "reentrant" : "non_reentrant")
                                                               : nlohmann::json()},
        {"quantization", plan.load_in_4bit ? "4bit" : "8bit"},
        {"lora", {{"r", plan.lora_r}, {"target_modules", plan.lora_target_linear ? nlohmann::json("all-linear")
                                                                                  : nlohmann::json(plan.lora_target_modules)}}}};
    const fs::path out = dir.path() / fmt::format("{:02}", i);
    fs::create_directories(out);
    std::ofstream(out / "spec.json") << spec.dump(1);
    command += " " + out.string();
  }
  command += " > " + (dir.path() / "worker.log").string() + " 2>&1";
  const int status = std::system(command.c_str());
  INFO(read_text(dir.path() / "worker.log").substr(0, 4000));
  REQUIRE(status == 0);
  int compared_units = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    const Plan& plan = plans[i];
    const ModelStructure structure = build_model_structure(plan);
    const SyncSimulation predicted = simulate_gradient_sync(plan, structure);
    const std::vector<Fsdp1Unit> units = fsdp1_units(plan, structure);
    for (int rank = 0; rank < plan.world_size; ++rank) {
      const nlohmann::json real =
          nlohmann::json::parse(read_text(dir.path() / fmt::format("{:02}", i) / fmt::format("fsdp1-qlora-rank-{}.json", rank)));
      INFO(files[i].filename().string() << " rank " << rank << "\nreal: " << real.dump().substr(0, 3000));
      const Finding* found = nullptr;
      for (const Finding& f : predicted.findings) {
        if (std::find(f.ranks.begin(), f.ranks.end(), rank) != f.ranks.end() || f.rank == rank) {
          found = &f;
          break;
        }
      }
      if (real["error"].is_null()) {
        CHECK(found == nullptr);
        if (found != nullptr) UNSCOPED_INFO("predicted: " << to_string(found->kind) << " '" << found->error_text << "'");
      } else {
        REQUIRE(found != nullptr);
        CHECK(found->kind == VerdictKind::EngineError);
        CHECK(real["error"]["phase"] == "wrap");
        CHECK(real["error"]["text"].get<std::string>() == found->error_text);
        // The unit FSDP1 was flattening: the first one _recursive_wrap reaches (a layer's).
        CHECK(found->parameter == units[1].name + "._flat_param");
        continue;
      }
      // The FlatParameters, unit by unit, as FSDP1 built them.
      std::map<std::string, const Fsdp1Unit*> by_name;
      for (const Fsdp1Unit& u : units) by_name[u.name] = &u;
      REQUIRE(real["flat_parameters"].size() == units.size());
      int trainable = 0;
      for (const nlohmann::json& flat : real["flat_parameters"]) {
        const std::string name = flat["unit"];
        INFO("unit '" << name << "'");
        REQUIRE(by_name.count(name) == 1);
        const Fsdp1Unit& u = *by_name[name];
        CHECK(flat["numel"].get<int64_t>() == u.numel);
        CHECK(flat["shard_numel"].get<int64_t>() == u.shard_numel);
        CHECK(flat["dtype"].get<std::string>() == to_string(u.dtype));
        CHECK(flat["requires_grad"].get<bool>() == (u.accumulator >= 0));
        trainable += u.accumulator >= 0 ? 1 : 0;
        ++compared_units;
      }
      // One reduce-scatter per trainable FlatParameter per iteration (no gradient accumulation):
      // the frozen layer and root units (packed 4-bit weights, norms, embeddings) reduce nothing.
      for (const nlohmann::json& iteration : real["reduce_scatters"]) CHECK(static_cast<int>(iteration.size()) == trainable);
      CHECK(static_cast<int>(real["reduce_scatters"].size()) == plan.iterations);
      CHECK(real["quant_state_in_buffers"] == false);
    }
  }
  CHECK(compared_units > 0);
}
