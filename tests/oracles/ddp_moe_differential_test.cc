// Per-expert MoE routing against real DDP (PyTorch 2.11 of the oracle venv, Gloo on 127.0.0.1, one
// process per rank: oracles/ddp_worker.py, which builds the per-expert MoE block from the same
// structure.json and runs only the experts routing gave a token). For every named plan of
// tests/plans/ddp_moe: the plan itself, and each adverse step of the routing check (an expert
// without tokens on one rank, then on every rank, in one step: sim/verify/moe_routing_check.h).
// Per rank: the same first verdict kind, and for DDP's own errors the same text.
//
// Built into the LibTorch-free oracle test binary (with the ZeRO differential test), so it runs
// on machines without LibTorch too.

#include <unistd.h>

#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/ddp_structure_json.h"
#include "sim/inputs/model_structure.h"
#include "sim/sync/sync_simulation.h"
#include "sim/verify/moe_routing_check.h"
#include "tests/read_text.h"
#include "tests/temp_dir.h"

#undef CHECK
#include <catch2/catch.hpp>

using namespace hookstream;
namespace fs = std::filesystem;

namespace {

using hookstream::test::read_text;

// What real DDP raised, as the verdict kind it amounts to (reducer.cpp's texts).
VerdictKind observed_kind(const nlohmann::json& error) {
  if (error.is_null()) return VerdictKind::Ok;
  const std::string text = error.value("text", "");
  if (text.find("Expected to have finished reduction in the prior iteration") != std::string::npos) {
    return VerdictKind::UnfinishedReduction;
  }
  if (text.find("Your training graph has changed in this iteration") != std::string::npos) return VerdictKind::StaticGraphChanged;
  if (text.find("Expected to mark a variable ready only once") != std::string::npos) return VerdictKind::MarkedReadyTwice;
  if (text.find("Gloo") != std::string::npos || text.find("gloo") != std::string::npos ||
      text.find("Timed out") != std::string::npos || text.find("timed out") != std::string::npos) {
    return VerdictKind::CollectiveMismatch;
  }
  return VerdictKind::EngineError;
}

Finding first_for_rank(const SyncSimulation& sim, int rank) {
  for (const Finding& f : sim.findings) {
    if (f.rank == rank || std::find(f.ranks.begin(), f.ranks.end(), rank) != f.ranks.end()) return f;
  }
  return Finding{};
}

// Runs every rank of `plan` through the real DDP worker; returns each rank's report.
std::vector<nlohmann::json> run_real_ddp(const Plan& plan, const ModelStructure& structure, const fs::path& dir, int port) {
  fs::create_directories(dir);
  std::ofstream(dir / "structure.json") << ddp_structure_json(plan, structure);
  std::string command = "(";
  for (int rank = 0; rank < plan.world_size; ++rank) {
    command += fmt::format(
        "OMP_NUM_THREADS=1 {0}/oracles/run.sh {1} {0}/oracles/ddp_worker.py --plan unused --out {2} --world-size {3} "
        "--rank {4} --store-port {5} --collective-timeout-ms 4000 > {2}/rank-{4}.log 2>&1 & ",
        HOOKSTREAM_SOURCE_DIR, HOOKSTREAM_ORACLE_PYTHON, dir.string(), plan.world_size, rank, port);
  }
  command += "wait)";
  const int status = std::system(command.c_str());
  INFO(read_text(dir / "rank-0.log").substr(0, 3000));
  REQUIRE(status == 0);
  std::vector<nlohmann::json> reports;
  for (int rank = 0; rank < plan.world_size; ++rank) {
    const fs::path report = dir / fmt::format("rank-{}.json", rank);
    if (!fs::exists(report)) {
      WARN("no report from rank " << rank << " (retried on another port):\n" << read_text(dir / fmt::format("rank-{}.log", rank)).substr(0, 1500));
      return {};
    }
    reports.push_back(nlohmann::json::parse(read_text(report)));
  }
  return reports;
}

}  // namespace

TEST_CASE("MoE per-expert routing: the simulator agrees with real DDP 2.11 on the adverse steps", "[differential][moe]") {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(std::string(HOOKSTREAM_SOURCE_DIR) + "/tests/plans/ddp_moe")) {
    if (entry.path().extension() == ".yaml") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() >= 5);
  hookstream::test::TempDir dir(fmt::format("ddp-moe-differential-{}", ::getpid()));
  int run = 0, agree = 0, compared = 0, failing = 0;
  for (const fs::path& file : files) {
    const Plan plan = parse_plan(read_text(file), file.string());
    const ModelStructure structure = build_model_structure(plan);
    REQUIRE(structure.expert_layout == "per_expert");
    const auto routing = check_moe_routing(plan, structure);
    REQUIRE(routing);
    REQUIRE(routing->simulated);
    // The plan as written, then each adverse step.
    std::vector<std::pair<std::string, Plan>> variants{{"as written", plan}};
    for (const RoutingCase& c : routing->cases) {
      Plan adverse = plan;
      adverse.routed_idle.push_back(c.idle);
      variants.emplace_back("adverse step, " + c.name, adverse);
    }
    for (const auto& [label, variant] : variants) {
      const SyncSimulation predicted = simulate_gradient_sync(variant, structure);
      // A store port another process took makes the ranks' rendezvous fail before DDP exists (no
      // report): such a run is retried on another port, never counted.
      std::vector<nlohmann::json> reports;
      for (int attempt = 0; attempt < 3 && reports.empty(); ++attempt) {
        const int port = 20000 + static_cast<int>((::getpid() * 31 + run * 7 + attempt * 4099) % 30000);
        reports = run_real_ddp(variant, structure, dir.path() / fmt::format("{}-{}", run, attempt), port);
      }
      ++run;
      REQUIRE(reports.size() == size_t(variant.world_size));
      bool any = false;
      for (int rank = 0; rank < variant.world_size; ++rank) {
        const nlohmann::json& error = reports[size_t(rank)]["error"];
        const Finding f = first_for_rank(predicted, rank);
        const VerdictKind observed = observed_kind(error);
        INFO(file.filename().string() << " (" << label << ") rank " << rank << "\nobserved: " << error.dump()
                                      << "\npredicted: " << to_string(f.kind) << " " << f.parameter << "\n" << f.error_text);
        CHECK(std::string(to_string(f.kind)) == to_string(observed));
        if (observed == VerdictKind::UnfinishedReduction && f.kind == observed) {
          CHECK(error_text_for_rank(f, rank) == error.value("text", ""));
        }
        ++compared;
        if (f.kind == observed) ++agree;
        any = any || observed != VerdictKind::Ok;
      }
      if (any) ++failing;
    }
  }
  WARN("DDP MoE differential: " << run << " runs, rank verdicts agreeing " << agree << " of " << compared << ", "
                                << failing << " runs where real DDP failed");
  CHECK(failing >= 4);
}
