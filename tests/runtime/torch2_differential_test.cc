// The differential test against real PyTorch 2.11 DDP: the named plans of tests/plans/ddp and the
// random plans of random_plans.h (same seed as the 1.13 test) run through the simulator, modelling
// PyTorch 2.11, and through torch.nn.parallel.DistributedDataParallel of the pinned oracle venv
// (oracles/ddp_worker.py, started through oracles/run.sh: Gloo on 127.0.0.1, one process per rank,
// a 4 s collective timeout so a hang is a result). Per rank: the same first verdict, the same
// parameter, and PyTorch 2.11's exact error text.
//
// The worker builds its model from the structure the simulator sees (runtime/ddp_structure_json.h).
// Plans with a vision tower are not run: the Python worker does not build vision towers yet, and
// the test says which were left out.

#include <algorithm>
#include <filesystem>

#include "runtime/differential.h"
#include "tests/runtime/plan_matrix.h"
#include "runtime/oracle.h"
#include "sim/inputs/input_error.h"
#include "sim/verify/verify.h"
#include "tests/runtime/random_plans.h"

// Last: glog (pulled in by LibTorch) defines its own CHECK, which Catch's must replace.
#undef CHECK
#include <catch2/catch.hpp>

using namespace hookstream;

namespace {

OracleOptions torch2_oracle() {
  OracleOptions options;
  options.worker_path = std::string(HOOKSTREAM_SOURCE_DIR) + "/oracles/run.sh";
  options.worker_prefix_args = {HOOKSTREAM_ORACLE_PYTHON, std::string(HOOKSTREAM_SOURCE_DIR) + "/oracles/ddp_worker.py"};
  options.timeout = std::chrono::milliseconds(90000);
  options.ranks_write_reference = true;
  return options;
}

LoadOptions torch211() {
  LoadOptions load;
  load.torch_version = "2.11";
  return load;
}

bool has_vision(const VerifyResult& r) { return !r.structure.vision_blocks.empty(); }

}  // namespace

TEST_CASE("PyTorch 2.11: the simulator agrees with real DDP on every plan of the matrix", "[differential][torch211]") {
  const std::vector<std::string> files = hookstream::test::matrix_plan_files();
  REQUIRE(files.size() >= 40);
  int compared = 0;
  std::vector<std::string> left_out;
  for (const std::string& file : files) {
    VerifyOptions options;
    options.search_fixes = false;
    options.cost_fixes = false;
    const VerifyResult predicted = verify_plan(read_plan_source(file, torch211()), options);
    if (has_vision(predicted)) {
      left_out.push_back(std::filesystem::path(file).filename().string());
      continue;
    }
    DYNAMIC_SECTION(std::filesystem::path(file).filename().string()) {
      const OracleResult observed = run_oracle(predicted.plan, torch2_oracle());
      const DifferentialReport report = compare_with_oracle(predicted.plan, predicted.simulation, observed);
      INFO(file << "\n" << report.describe());
      REQUIRE_FALSE(observed.ranks.empty());
      CHECK(observed.ranks.front().report.torch_version.rfind("2.11", 0) == 0);
      CHECK(report.agree());
    }
    ++compared;
  }
  WARN("left out (vision tower): " << left_out.size());
  CHECK(left_out.size() <= 3);
}

TEST_CASE("PyTorch 2.11: random plans agree with real DDP", "[differential][torch211][random]") {
  random_plans::Random rng(20261122);
  int compared = 0, failing = 0;
  for (int i = 0; compared < 12 && i < 200; ++i) {
    const std::string yaml = random_plans::random_plan(rng);
    VerifyOptions options;
    options.search_fixes = false;
    options.cost_fixes = false;
    VerifyResult predicted;
    try {
      predicted = verify_plan(PlanSource{yaml, fmt::format("random-{}.yaml", i), torch211()}, options);
    } catch (const InputError&) {
      continue;  // a combination the plan validator rejects (and names)
    }
    if (has_vision(predicted)) continue;
    const OracleResult observed = run_oracle(predicted.plan, torch2_oracle());
    const DifferentialReport report = compare_with_oracle(predicted.plan, predicted.simulation, observed);
    INFO("plan " << i << ":\n" << yaml << "\n" << report.describe());
    CHECK(report.agree());
    ++compared;
    if (!predicted.ok()) ++failing;
  }
  CHECK(compared == 12);
  CHECK(failing >= 3);
}
