// The differential tests against real DeepSpeed ZeRO-0/1/2/3 (0.19.8, CPU accelerator, Gloo, one
// process per rank; oracles/zero_worker.py): the named plans of tests/plans/zero and random plans
// from fixed seeds run through the simulator (sim/sync/zero/) and through deepspeed.initialize on
// the same tiny model (under ZeRO-3 with every parameter used inside its module's call). Per rank:
// the same first verdict (none; gradient_reduced_twice with DeepSpeed's exact assert text, at the
// same iteration and micro-step, naming the parameter the bucket held twice; wrong_gradient naming
// a parameter whose reduced gradient differs from the reference; collective_mismatch where the
// real ranks abort or time out in Gloo; engine_error with the exact text).
//
// All plans go to one worker process that forks the ranks of each plan, so DeepSpeed is imported
// once (~30-50 s on 2 cores) and each plan costs a few seconds.

#include <cstdlib>
#include <unistd.h>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/ddp_structure_json.h"
#include "sim/inputs/input_error.h"
#include "sim/inputs/model_structure.h"
#include "sim/sync/sync_simulation.h"
#include "tests/runtime/random_plans.h"  // the shared Random (fixed seeds)
#include "tests/read_text.h"
#include "tests/temp_dir.h"

#undef CHECK
#include <catch2/catch.hpp>

using namespace hookstream;
namespace fs = std::filesystem;
using hookstream::test::read_text;

namespace {

struct Case {
  std::string name;
  std::string yaml;
  Plan plan;
  ModelStructure structure;
  SyncSimulation simulation;
};

// ZeRO-0/1/2: the knobs that break ZeRO (tiled MLP without ds_grad_is_ready, reentrant checkpoint
// twice, idle MLPs or layers on one rank, accumulation, LoRA); stages 1-2 add DeepSpeed's
// bucketing and overlap settings. Each stage family draws as it did before the two generators were
// one (`stage0` picks the probabilities and draws of the ZeRO-0 test), so the seeds give the same plans.
std::string random_zero_plan(random_plans::Random& rng, bool stage0) {
  std::string y = fmt::format("base_model: tiny-llama\nsequence_len: {}\nmicro_batch_size: 1\n", rng.pick(std::vector<int>{8, 16}));
  std::string hs = fmt::format("  world_size: {}\n  iterations: 2\n", rng.pick(std::vector<int>{2, 2, 3}));
  const bool lora = stage0 ? rng.chance(0.3) : rng.below(3) == 2;
  if (lora) y += "adapter: lora\nlora_r: 2\nlora_target_modules: [q_proj, up_proj, down_proj]\n";
  const std::string checkpoint = rng.pick(std::vector<std::string>{"off", "reentrant", "non_reentrant"});
  if (checkpoint != "off") {
    y += fmt::format("gradient_checkpointing: true\ngradient_checkpointing_kwargs:\n  use_reentrant: {}\n",
                     checkpoint == "reentrant" ? "true" : "false");
    if (rng.chance(stage0 ? 0.3 : 0.25)) hs += fmt::format("  checkpoint_twice_layers: [{}]\n", rng.below(4));
  }
  if (rng.chance(0.5)) {
    y += fmt::format("tiled_mlp: true\ntiled_mlp_num_shards: {}\n", 1 + rng.below(3));
    hs += fmt::format("  tiled_mlp_ds_grad_is_ready: {}\n", rng.chance(0.5) ? "true" : "false");
  }
  if (rng.chance(stage0 ? 0.4 : 0.3)) y += "gradient_accumulation_steps: 2\n";
  if (stage0) {
    y += "deepspeed:\n  zero_optimization:\n    stage: 0\n";
    if (rng.chance(0.4)) {
      hs += fmt::format("  rank_overrides:\n    1:\n      unused_modules: [model.layers.{}{}]\n", rng.below(4),
                        rng.pick(std::vector<std::string>{"", ".mlp", ".mlp.gate_proj"}));
    }
    return y + "hookstream:\n" + hs;
  }
  y += fmt::format("deepspeed:\n  zero_optimization:\n    stage: {}\n", 1 + rng.below(2));
  if (rng.chance(0.4)) y += fmt::format("    overlap_comm: {}\n", rng.chance(0.5) ? "true" : "false");
  if (rng.chance(0.3)) y += "    contiguous_gradients: false\n";
  if (rng.chance(0.4)) y += fmt::format("    reduce_bucket_size: {}\n", rng.pick(std::vector<int>{1000, 3000, 20000}));
  if (rng.chance(0.2)) hs += "  rank_overrides:\n    1:\n      unused_modules: [model.layers.1.mlp]\n";
  return y + "hookstream:\n" + hs;
}

// ZeRO-3: the same knobs plus stage 3's own (persistence threshold, leaf MLP blocks, idle experts).
std::string random_zero3_plan(random_plans::Random& rng) {
  std::string y = fmt::format("base_model: tiny-llama\nsequence_len: {}\nmicro_batch_size: 1\n", rng.pick(std::vector<int>{8, 16}));
  std::string hs = fmt::format("  world_size: {}\n  iterations: 2\n", rng.pick(std::vector<int>{2, 2, 3}));
  if (rng.chance(0.35)) y += "adapter: lora\nlora_r: 2\nlora_target_modules: [q_proj, up_proj, down_proj]\n";
  const std::string checkpoint = rng.pick(std::vector<std::string>{"off", "reentrant", "non_reentrant"});
  if (checkpoint != "off") {
    y += fmt::format("gradient_checkpointing: true\ngradient_checkpointing_kwargs:\n  use_reentrant: {}\n",
                     checkpoint == "reentrant" ? "true" : "false");
    if (checkpoint == "reentrant" && rng.chance(0.2)) hs += fmt::format("  checkpoint_twice_layers: [{}]\n", rng.below(4));
  }
  if (rng.chance(0.5)) {
    y += fmt::format("tiled_mlp: true\ntiled_mlp_num_shards: {}\n", 1 + rng.below(3));
    hs += fmt::format("  tiled_mlp_ds_grad_is_ready: {}\n", rng.chance(0.5) ? "true" : "false");
  }
  if (rng.chance(0.3)) y += "gradient_accumulation_steps: 2\n";
  y += "deepspeed:\n  zero_optimization:\n    stage: 3\n";
  if (rng.chance(0.5)) y += fmt::format("    reduce_bucket_size: {}\n", rng.pick(std::vector<std::string>{"600", "1000", "3000", "auto"}));
  if (rng.chance(0.3)) y += "    stage3_param_persistence_threshold: 0\n";
  if (rng.chance(0.3)) hs += "  z3_leaf_mlp: true\n";
  if (rng.chance(0.3)) {
    hs += fmt::format("  rank_overrides:\n    1:\n      unused_modules: [model.layers.{}.mlp{}]\n", rng.below(4),
                      rng.pick(std::vector<std::string>{"", ".gate_proj", ".up_proj"}));
  }
  return y + "hookstream:\n" + hs;
}

Case make_case(const std::string& name, const std::string& yaml) {
  Case c;
  c.name = name;
  c.yaml = yaml;
  // Relative paths (base_model presets) resolve as for the other plan tests.
  c.plan = parse_plan(yaml, name, LoadOptions{});
  c.structure = build_model_structure(c.plan);
  c.simulation = simulate_gradient_sync(c.plan, c.structure);
  return c;
}

// The first finding the simulator predicts for `rank` (kind Ok: none).
Finding first_for_rank(const SyncSimulation& sim, int rank) {
  for (const Finding& f : sim.findings) {
    if (std::find(f.ranks.begin(), f.ranks.end(), rank) != f.ranks.end() || f.rank == rank) return f;
  }
  return Finding{};
}

// The parameters real DeepSpeed's reduced gradient got wrong in iteration 0 (against the mean of
// every rank's local reference gradient).
std::vector<std::string> wrong_gradients(const nlohmann::json& report) {
  std::vector<std::string> out;
  if (!report.contains("iterations")) return out;
  for (const nlohmann::json& it : report["iterations"]) {
    if (!it.contains("wrong_gradients")) continue;
    for (const nlohmann::json& w : it["wrong_gradients"]) out.push_back(w.value("parameter", ""));
  }
  return out;
}

// The first parameter the failing bucket held twice: the last bucket the oracle saw reduced
// (stage 3's assert names none).
std::string duplicated_in_last_bucket(const nlohmann::json& report) {
  if (!report.contains("iterations") || report["iterations"].empty()) return "";
  const nlohmann::json& steps = report["iterations"].back()["micro_steps"];
  if (steps.empty() || steps.back()["reductions"].empty()) return "";
  std::set<std::string> seen;
  for (const nlohmann::json& name : steps.back()["reductions"].back()) {
    if (!seen.insert(name.get<std::string>()).second) return name.get<std::string>();
  }
  return "";
}

// What the error prints as its last traceback line's message: the text, or for a bare assert the
// exception's name alone.
std::string observed_text(const nlohmann::json& error) {
  const std::string text = error.value("text", "");
  return text.empty() ? error.value("type", "") : text;
}

// What real DeepSpeed did, as the verdict kind it amounts to.
VerdictKind observed_kind(const nlohmann::json& report) {
  const nlohmann::json error = report.contains("error") ? report["error"] : nlohmann::json();
  if (error.is_null()) return wrong_gradients(report).empty() ? VerdictKind::Ok : VerdictKind::WrongGradient;
  const std::string type = error.value("type", "");
  const std::string text = error.value("text", "");
  if (type == "AssertionError" && (text.find("has already been reduced") != std::string::npos || text.empty())) {
    return VerdictKind::GradientReducedTwice;
  }
  // Gloo: the rank whose peer sent another size aborts ("Received data size doesn't match expected
  // size. Is there a distributed collective mismatch in your code?"), its peer reads a reset
  // connection; a rank left waiting times out.
  if (type == "terminated" || text.find("gloo") != std::string::npos || text.find("Timed out") != std::string::npos) {
    return VerdictKind::CollectiveMismatch;
  }
  return VerdictKind::EngineError;
}

// Runs every case through real DeepSpeed (one worker process) and compares per rank; returns
// {plans where real DeepSpeed failed, rank verdicts agreeing, ranks}.
struct Tally {
  int failing = 0;
  int agree = 0;
  int ranks = 0;
};

Tally run_and_compare(const std::vector<Case>& cases) {
  hookstream::test::TempDir dir(fmt::format("zero-differential-{}", ::getpid()));
  std::string command = fmt::format("{}/oracles/run.sh {} {}/oracles/zero_worker.py --collective-timeout-ms 3000",
                                    HOOKSTREAM_SOURCE_DIR, HOOKSTREAM_ORACLE_PYTHON, HOOKSTREAM_SOURCE_DIR);
  for (size_t i = 0; i < cases.size(); ++i) {
    const fs::path out = dir.path() / fmt::format("{:02}", i);
    fs::create_directories(out);
    std::ofstream(out / "structure.json") << ddp_structure_json(cases[i].plan, cases[i].structure);
    command += " " + out.string();
  }
  command += " > " + (dir.path() / "worker.log").string() + " 2>&1";
  const int status = std::system(command.c_str());
  INFO(read_text(dir.path() / "worker.log").substr(0, 4000));
  REQUIRE(status == 0);

  Tally tally;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    bool any_finding = false;
    for (int rank = 0; rank < c.plan.world_size; ++rank) {
      const fs::path report_path = dir.path() / fmt::format("{:02}", i) / fmt::format("zero-rank-{}.json", rank);
      const nlohmann::json report = nlohmann::json::parse(read_text(report_path));
      const nlohmann::json error = report.contains("error") ? report["error"] : nlohmann::json();
      const Finding predicted = first_for_rank(c.simulation, rank);
      ++tally.ranks;
      const VerdictKind observed = observed_kind(report);
      // No DYNAMIC_SECTION: Catch2 re-runs the whole test case (and so the oracle) per section.
      INFO(c.name << " rank " << rank << "\n" << c.yaml << "\nobserved: " << error.dump() << "\npredicted: "
                  << to_string(predicted.kind) << " " << predicted.parameter << " it " << predicted.iteration << " micro "
                  << predicted.micro_step << "\n" << predicted.error_text);
      CHECK(to_string(predicted.kind) == std::string(to_string(observed)));
      if ((observed == VerdictKind::GradientReducedTwice || observed == VerdictKind::EngineError) &&
          predicted.kind == observed) {
        CHECK(predicted.error_text == observed_text(error));  // ZeRO-1/2: names the parameter, exact wording
        CHECK(predicted.iteration == error.value("iteration", -1));
        CHECK(predicted.micro_step == error.value("micro_step", -1));
        if (observed == VerdictKind::GradientReducedTwice && c.plan.engine.deepspeed->zero_stage == 3) {
          CHECK(predicted.parameter == duplicated_in_last_bucket(report));
        }
      }
      if (observed == VerdictKind::WrongGradient && predicted.kind == observed) {
        const std::vector<std::string> wrong = wrong_gradients(report);
        CHECK(std::find(wrong.begin(), wrong.end(), predicted.parameter) != wrong.end());
      }
      if (predicted.kind == observed) ++tally.agree;
      any_finding = any_finding || observed != VerdictKind::Ok;
    }
    if (any_finding) ++tally.failing;
  }
  return tally;
}

std::vector<Case> named_cases(bool stage0) {
  std::vector<Case> cases;
  for (const auto& entry : fs::directory_iterator(std::string(HOOKSTREAM_SOURCE_DIR) + "/tests/plans/zero")) {
    if (entry.path().extension() != ".yaml") continue;
    Case c = make_case(entry.path().filename().string(), read_text(entry.path()));
    if ((c.plan.engine.deepspeed->zero_stage == 0) == stage0) cases.push_back(std::move(c));
  }
  std::sort(cases.begin(), cases.end(), [](const Case& a, const Case& b) { return a.name < b.name; });
  return cases;
}

}  // namespace

TEST_CASE("DeepSpeed ZeRO-1/2/3: the simulator agrees with real DeepSpeed 0.19.8 per rank", "[differential][zero]") {
  std::vector<Case> cases = named_cases(false);
  const size_t named = cases.size();
  random_plans::Random rng(20261125);
  for (int i = 0; cases.size() < named + 20 && i < 200; ++i) {
    const std::string yaml = random_zero_plan(rng, false);
    try {
      cases.push_back(make_case(fmt::format("random-{}.yaml", i), yaml));
    } catch (const InputError&) {
      continue;  // a combination the plan validator rejects (and names)
    }
  }
  const size_t zero12 = cases.size();
  random_plans::Random rng3(20261127);
  for (int i = 0; cases.size() < zero12 + 12 && i < 200; ++i) {
    const std::string yaml = random_zero3_plan(rng3);
    try {
      cases.push_back(make_case(fmt::format("random-zero3-{}.yaml", i), yaml));
    } catch (const InputError&) {
      continue;
    }
  }
  size_t zero3 = 0;
  for (const Case& c : cases) zero3 += c.plan.engine.deepspeed->zero_stage == 3 ? 1 : 0;
  REQUIRE(named >= 40);
  REQUIRE(zero3 >= 40);
  REQUIRE(cases.size() >= 80);

  const Tally tally = run_and_compare(cases);
  WARN("ZeRO differential: " << cases.size() << " plans (" << named << " named), " << tally.failing
                            << " where real DeepSpeed failed; rank verdicts agreeing: " << tally.agree << " of " << tally.ranks);
  CHECK(tally.failing >= 8);
}

TEST_CASE("DeepSpeed ZeRO-0: the simulator agrees with real DeepSpeed 0.19.8 per rank", "[differential][zero]") {
  // Stage 0 has no gradient hook; the named plans are the positions that fail ZeRO-1/2/3.
  std::vector<Case> cases = named_cases(true);
  const size_t named = cases.size();
  random_plans::Random rng(20261128);
  for (int i = 0; cases.size() < named + 12 && i < 200; ++i) {
    try {
      cases.push_back(make_case(fmt::format("random-zero0-{}.yaml", i), random_zero_plan(rng, true)));
    } catch (const InputError&) {
      continue;
    }
  }
  REQUIRE(named >= 8);
  for (const Case& c : cases) REQUIRE(c.simulation.engine == "DeepSpeed ZeRO-0");
  const Tally tally = run_and_compare(cases);
  WARN("ZeRO-0 differential: " << cases.size() << " plans (" << named << " named), " << tally.failing
                              << " where real DeepSpeed failed; rank verdicts agreeing: " << tally.agree << " of " << tally.ranks);
  CHECK(tally.agree == tally.ranks);
}
