// The differential test: every plan in tests/plans/ddp runs through the simulator and through the
// real c10d Reducer (the oracle: one process per rank over Gloo); per rank, the first verdict and
// the parameter it names must be the same.

#include <algorithm>
#include <filesystem>

#include "runtime/differential.h"
#include "tests/runtime/plan_matrix.h"
#include "runtime/oracle.h"
#include "runtime/reducer_factory.h"
#include "sim/verify/verify.h"

// Last: glog (pulled in by LibTorch) defines its own CHECK, which Catch's must replace.
#undef CHECK
#include <catch2/catch.hpp>

using namespace hookstream;

TEST_CASE("the simulator agrees with the real Reducer on every plan of the matrix", "[differential]") {
  const std::vector<std::string> files = hookstream::test::matrix_plan_files();
  REQUIRE(files.size() >= 40);
  for (const std::string& file : files) {
    DYNAMIC_SECTION(std::filesystem::path(file).filename().string()) {
      VerifyOptions options;
      options.search_fixes = false;
      // Predicted for the PyTorch the oracle runs (Debian's LibTorch 1.13).
      LoadOptions load;
      load.torch_version = torch_version();
      const VerifyResult predicted = verify_plan(read_plan_source(file, load), options);
      OracleOptions oracle_options;
      oracle_options.worker_path = HOOKSTREAM_ORACLE_WORKER;
      const OracleResult observed = run_oracle(predicted.plan, oracle_options);
      const DifferentialReport report = compare_with_oracle(predicted.plan, predicted.simulation, observed);
      INFO(file << "\n" << report.describe());
      CHECK(report.agree());
    }
  }
}
