// Holds the simulator's prediction against what the real Reducer did (the oracle): per rank, the
// first verdict and the parameter it names must agree.
#pragma once

#include <string>
#include <vector>

#include "runtime/oracle.h"
#include "sim/sync/ddp/ddp_simulation.h"
#include "sim/inputs/plan.h"

namespace hookstream {

struct RankComparison {
  int rank = 0;
  VerdictKind predicted = VerdictKind::Ok;
  std::string predicted_parameter;
  VerdictKind observed = VerdictKind::Ok;
  std::string observed_parameter;
  std::string predicted_text;  // the error text, when both raise one
  std::string observed_text;
  bool agree = false;
};

struct DifferentialReport {
  std::vector<RankComparison> ranks;
  std::vector<std::string> unclassified_errors;  // oracle errors no verdict covers: never agreement
  bool agree() const;
  std::string describe() const;  // one line per rank, for messages
};

// The first finding that concerns `rank` (findings name their ranks, or apply to all when none).
const Finding* first_finding_for_rank(const std::vector<Finding>& findings, int rank);

DifferentialReport compare_with_oracle(const Plan& plan, const SyncSimulation& predicted, const OracleResult& observed);

}  // namespace hookstream
