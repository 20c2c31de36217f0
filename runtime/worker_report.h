// What one oracle worker process observed, as written to DIR/rank-R.json (DDP run) or
// DIR/reference-rank-R.json (--reference). Gradients go to files beside it
// (runtime/gradient_file.h). No LibTorch types here (see hook_firing.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "sim/engine/hook_firing.h"
#include "sim/verify/verdict.h"

namespace hookstream {

struct WorkerIteration {
  int iteration = 0;
  bool completed = false;             // every micro-step's forward and backward returned
  std::vector<HookFiring> firings;    // in firing order, all micro-steps
  std::vector<bool> grad_defined;     // per DDP index, after the iteration
  std::string grads_file;             // relative to the run directory; empty if not written
};

struct WorkerError {
  std::string text;  // the exception's message (c10::Error without its C++ backtrace)
  Phase phase = Phase::Forward;
  int iteration = 0;
  int micro_step = 0;
};

struct WorkerReport {
  int rank = 0;
  int world_size = 1;
  bool reference = false;
  std::string torch_version;
  std::string distributed_debug;  // TORCH_DISTRIBUTED_DEBUG as the worker saw it
  std::vector<std::string> ddp_parameter_names;
  std::vector<int64_t> ddp_parameter_numels;
  std::vector<std::vector<size_t>> initial_buckets;  // empty for --reference
  std::vector<WorkerIteration> iterations;
  std::optional<WorkerError> error;
};

std::string to_json_text(const WorkerReport& report);
// Throws std::runtime_error naming `source` when the text is not a worker report.
WorkerReport parse_worker_report(const std::string& text, const std::string& source);

}  // namespace hookstream
