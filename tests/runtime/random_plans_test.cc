// Plans a new user might write, drawn at random (fixed seeds, so CI is reproducible) from the
// features the verifier models, run through the simulator and the real c10d Reducer. The seeds
// differ from those of the exploratory runs that found the bugs now pinned in tests/plans/ddp.

#include <cstdint>
#include <fmt/format.h>
#include <string>
#include <vector>

#include "runtime/differential.h"
#include "tests/runtime/random_plans.h"
#include "runtime/oracle.h"
#include "runtime/reducer_factory.h"
#include "sim/inputs/input_error.h"
#include "sim/verify/verify.h"

// Last: glog (pulled in by LibTorch) defines its own CHECK, which Catch's must replace.
#undef CHECK
#include <catch2/catch.hpp>

using namespace hookstream;

using namespace random_plans;

TEST_CASE("random plans: the simulator agrees with the real Reducer", "[differential][random]") {
  Random rng(20261122);
  int compared = 0, failing = 0;
  for (int i = 0; compared < 24 && i < 200; ++i) {
    const std::string yaml = random_plan(rng);
    VerifyOptions options;
    options.search_fixes = false;
    VerifyResult predicted;
    try {
      LoadOptions load;
      load.torch_version = torch_version();  // the oracle's LibTorch
      predicted = verify_plan(PlanSource{yaml, fmt::format("random-{}.yaml", i), load}, options);
    } catch (const InputError&) {
      continue;  // a combination the plan validator rejects (and names): not a plan a user can run
    }
    OracleOptions oracle_options;
    oracle_options.worker_path = HOOKSTREAM_ORACLE_WORKER;
    const OracleResult observed = run_oracle(predicted.plan, oracle_options);
    const DifferentialReport report = compare_with_oracle(predicted.plan, predicted.simulation, observed);
    INFO("plan " << i << ":\n" << yaml << "\n" << report.describe());
    CHECK(report.agree());
    ++compared;
    if (!predicted.ok()) ++failing;
  }
  CHECK(compared == 24);
  // The draw must exercise failures too, or agreement would say little.
  CHECK(failing >= 6);
}
