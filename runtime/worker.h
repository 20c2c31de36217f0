// One oracle worker process: loads the plan, builds the model, and runs the plan's iterations
// either as one rank of a real DDP job (c10d::Reducer over ProcessGroupGloo, TCPStore on
// 127.0.0.1) or, with --reference, without DDP for every rank in turn (the local gradients from
// which the parent forms the true average). Writes DIR/rank-R.json or DIR/reference-rank-R.json
// plus gradient files (runtime/worker_report.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hookstream {

struct WorkerOptions {
  std::string plan_path;
  std::string model_path;  // config.json that overrides the plan's base_model (LoadOptions::model_path)
  int rank = 0;
  int world_size = 1;
  int store_port = 0;
  std::string out_dir;
  bool reference = false;
  int collective_timeout_ms = 5000;
  uint64_t seed = 1234;
  std::string expect_fingerprint;  // runtime/plan_fingerprint.h; empty: not checked
};

// Parses hookstream-oracle-worker's flags. Throws std::invalid_argument with a one-line message.
WorkerOptions parse_worker_arguments(const std::vector<std::string>& args);
std::vector<std::string> worker_arguments(const WorkerOptions& options);

// Runs the worker and writes its report(s). Errors that the plan provokes (Reducer, autograd,
// Gloo) are observations, written to the report: the return value is then 0. Setup failures
// (unreadable plan, fingerprint mismatch, store) throw.
int run_worker(const WorkerOptions& options);

}  // namespace hookstream
