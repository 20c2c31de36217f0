// The differential test of DDP under torch.compile (docs/ddp-compile.md): plans of the shared
// matrix (tests/plans/ddp), set to compile, run through the simulator and through real PyTorch 2.11
// DistributedDataParallel wrapped in torch.compile (oracles/ddp_worker.py with the structure's
// "compile" fields: backend aot_eager, torch._dynamo.config.optimize_ddp, compiled autograd; Gloo,
// one process per rank). Per rank: the same first verdict, the same parameter, PyTorch's exact text.
// The collective timeout is 30 s, not the eager test's 4 s: ranks compile at different speeds on a
// loaded machine, and the first all-reduce must not time out while the other rank still compiles.
//
// CI runs a subset chosen to cover each rule (Dynamo compiles once per rank and distinct schedule,
// 10-30 s per plan on CI's CPUs); the hidden test case "[.compile-matrix]" runs every plan of the
// matrix in each mode: `build/tests/hookstream_runtime_tests "[.compile-matrix]"`, results in
// docs/ddp-compile.md.

#include <filesystem>

#include "runtime/differential.h"
#include "runtime/oracle.h"
#include "sim/inputs/input_error.h"
#include "sim/verify/verify.h"
#include "tests/runtime/plan_matrix.h"

// Last: glog (pulled in by LibTorch) defines its own CHECK, which Catch's must replace.
#undef CHECK
#include <catch2/catch.hpp>

using namespace hookstream;

namespace {

OracleOptions compiled_oracle() {
  OracleOptions options;
  options.worker_path = std::string(HOOKSTREAM_SOURCE_DIR) + "/oracles/run.sh";
  options.worker_prefix_args = {HOOKSTREAM_ORACLE_PYTHON, std::string(HOOKSTREAM_SOURCE_DIR) + "/oracles/ddp_worker.py"};
  options.timeout = std::chrono::milliseconds(240000);
  options.ranks_write_reference = true;
  options.collective_timeout = std::chrono::milliseconds(30000);
  return options;
}

struct Mode {
  const char* name;
  std::vector<std::string> set;
};

const std::vector<Mode>& modes() {
  static const std::vector<Mode> all = {
      {"compiled, ddp_optimizer (the default)", {"torch_compile=true"}},
      {"compiled, python_reducer", {"torch_compile=true", "hookstream.optimize_ddp=python_reducer"}},
      {"compiled, python_reducer, compiled autograd",
       {"torch_compile=true", "hookstream.optimize_ddp=python_reducer", "hookstream.compiled_autograd=true"}},
      {"compiled, ddp_optimizer, compiled autograd", {"torch_compile=true", "hookstream.compiled_autograd=true"}},
      {"eager, python_reducer", {"hookstream.optimize_ddp=python_reducer"}},
  };
  return all;
}

// Returns whether the plan was compared (plans with a vision tower are not built by the worker).
bool compare(const std::string& file, const Mode& mode) {
  LoadOptions load;
  load.torch_version = "2.11";
  load.set = mode.set;
  VerifyOptions options;
  options.search_fixes = false;
  options.cost_fixes = false;
  const VerifyResult predicted = verify_plan(read_plan_source(file, load), options);
  if (!predicted.structure.vision_blocks.empty()) return false;
  const OracleResult observed = run_oracle(predicted.plan, compiled_oracle());
  const DifferentialReport report = compare_with_oracle(predicted.plan, predicted.simulation, observed);
  INFO(std::filesystem::path(file).filename().string() << " / " << mode.name << "\n" << report.describe());
  REQUIRE_FALSE(observed.ranks.empty());
  // A rank whose process Gloo aborted (a collective mismatch) leaves no report: check the others.
  bool torch211 = false;
  for (const RankObservation& rank : observed.ranks) torch211 |= rank.has_report && rank.report.torch_version.rfind("2.11", 0) == 0;
  CHECK(torch211);
  CHECK(report.agree());
  return true;
}

std::string plan_file(const char* name) { return std::string(HOOKSTREAM_SOURCE_DIR) + "/tests/plans/ddp/" + name; }

}  // namespace

TEST_CASE("torch.compile: the simulator agrees with real compiled DDP 2.11 on the CI subset", "[differential][compile]") {
  // (plan, mode index): each rule once. Mode 0: eager rules under the compiled forward; 1: Python
  // reducer (double firing, rank-divergent firing, no_sync-only module); 3: the C++ Reducer refused
  // by compiled autograd. Mode 2 (Python reducer under compiled autograd) is left to the hidden
  // matrix: 269 s for one plan on the loaded development machine (docs/ddp-compile.md).
  const std::vector<std::pair<const char*, int>> cases = {
      {"reentrant_all_layers.yaml", 0}, {"tiled_per_chunk.yaml", 1}, {"rank_unused_module.yaml", 1},
      {"no_sync_only_module.yaml", 1},  {"plain.yaml", 3},
  };
  for (const auto& [name, mode] : cases) {
    DYNAMIC_SECTION(name << " / " << modes()[mode].name) { CHECK(compare(plan_file(name), modes()[mode])); }
  }
}

TEST_CASE("torch.compile: every plan of the matrix in every mode", "[.compile-matrix]") {
  for (const std::string& file : test::matrix_plan_files()) {
    for (const Mode& mode : modes()) {
      DYNAMIC_SECTION(std::filesystem::path(file).filename().string() << " / " << mode.name) { compare(file, mode); }
    }
  }
}
