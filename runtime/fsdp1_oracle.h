// Real FSDP1 (torch 2.11 FullyShardedDataParallel over Gloo, CPU) as the oracle of the FSDP1 model
// (sim/sync/fsdp1/): each plan's structure (runtime/ddp_structure_json.h) is run by
// oracles/fsdp1_worker.py, one launcher process that imports torch once and forks one process per
// rank for each plan (a fresh process group per plan; a crash ends only its plan). What each rank
// did is classified into the verdicts the simulator gives (docs/engines/fsdp1.md).
#pragma once

#include <string>
#include <vector>

#include "sim/inputs/plan.h"

namespace hookstream {

struct Fsdp1RankObservation {
  int rank = 0;
  // "ok", "sharded_parameter_use", "engine_error", "collective_mismatch", "wrong_gradient",
  // "no_report" (the rank died of something other than the engine, or was killed at the plan's
  // deadline: see `text`).
  std::string verdict = "no_report";
  std::string text;            // the error text (or "Fatal Python error: Segmentation fault")
  std::string unit;            // the FSDP unit whose post-backward hook ran last before the error
  std::string graph_task;      // the graph task of that post-backward hook
  int iteration = -1;
  int post_backward_calls = 0;  // over the whole run
  int reduce_scatters = 0;
  std::vector<std::string> wrong_gradients;  // parameters whose reduced gradient differs
};

struct Fsdp1OracleOptions {
  std::string python;       // the oracle venv's python
  std::string source_dir;   // the repository (oracles/run.sh, oracles/fsdp1_worker.py)
  int collective_timeout_ms = 4000;
  int plan_timeout_s = 120;  // a plan's ranks still running after this long are killed (no verdict)
};

// Runs every plan (all of one world size) and returns, per plan, one observation per rank.
std::vector<std::vector<Fsdp1RankObservation>> run_fsdp1_oracle(const std::vector<Plan>& plans,
                                                                const Fsdp1OracleOptions& options);

}  // namespace hookstream
