// The real-DDP oracle: runs a plan's model structure on CPU with one worker process per rank
// (real c10d::Reducer over ProcessGroupGloo on 127.0.0.1) plus one reference worker (no DDP),
// and reports what really happened: per-rank hook logs, errors, gradient agreement, and the
// verdicts (sim/verify/verdict.h) that follow from them, for comparison with the simulator's.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/process_runner.h"
#include "runtime/worker_report.h"
#include "sim/inputs/plan.h"
#include "sim/verify/verdict.h"

namespace hookstream {

struct OracleOptions {
  std::string worker_path;  // the hookstream-oracle-worker binary
  // Arguments before the worker's own: {PYTHON, oracles/ddp_worker.py} with worker_path
  // oracles/run.sh runs real PyTorch 2.x DDP from the oracle venv instead of the C++ worker. Both
  // read the run directory's files (plan.yaml, config.json, structure.json) and write the same
  // reports.
  std::vector<std::string> worker_prefix_args;
  // Each rank's worker also writes its reference report (the Python worker's --with-reference):
  // no separate reference process, one interpreter start less per plan.
  bool ranks_write_reference = false;
  std::chrono::milliseconds timeout{60000};             // hard deadline for all workers together
  std::chrono::milliseconds collective_timeout{4000};   // Gloo/store: a rank left alone fails this fast
  std::string temp_dir;     // where the run directory is created; empty: $TMPDIR or /tmp
  bool keep_run_dir = false;
  // TORCH_DISTRIBUTED_DEBUG for the workers. INFO (default) makes DDP pass parameter names to the
  // Reducer, whose errors then name the parameter; "OFF" reproduces a user's default run, whose
  // texts carry the index only. Nothing else in the Reducer's behaviour depends on it.
  std::string distributed_debug = "OFF";
  uint64_t seed = 1234;
};

struct RankObservation {
  int rank = 0;
  bool has_report = false;
  WorkerReport report;
  ProcessOutcome process;
  std::string log_tail;  // last lines of the worker's stdout/stderr
};

// Gradient agreement after one iteration, per DDP index. Only filled when every rank completed it.
struct IterationObservation {
  int iteration = 0;
  bool compared = false;
  std::vector<bool> equal_across_ranks;
  std::vector<bool> equal_to_reference;  // every rank's gradient equals the average of local ones
  std::vector<bool> grad_on_no_rank;     // undefined on every rank
};

struct OracleResult {
  std::vector<RankObservation> ranks;
  std::vector<WorkerReport> reference;  // per rank, no DDP
  std::vector<IterationObservation> iterations;
  std::vector<Finding> findings;        // empty or only Ok-free findings: no finding means ok
  std::vector<std::string> unclassified_errors;
  std::string run_dir;                  // only kept with keep_run_dir
  bool ok() const { return findings.empty() && unclassified_errors.empty(); }
};

// Throws std::runtime_error when the oracle itself cannot run (worker missing, plan rejected by
// the worker, reference run failed to report).
OracleResult run_oracle(const Plan& plan, const OracleOptions& options);

}  // namespace hookstream
