// One rank of `hookstream run`: the plan's model (runtime/train_model.h) under DDP's real
// c10d::Reducer (runtime/ddp_wrapper.h; with world size 1 too, so its per-iteration checks apply),
// AdamW over DDP's parameter list, gradient accumulation with no_sync() for all but the last
// micro-step (as HF Trainer / accelerate do), synthetic or file tokens (runtime/token_data.h),
// checkpoints (runtime/training_checkpoint.h), and per-step metrics.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>

#include "sim/inputs/plan.h"

namespace hookstream {

// Test hooks (`hookstream run --inject-fault`, docs/run.md): make one rank fail on purpose.
struct FaultInjection {
  enum class Kind { None, ExitRank, KillRank, ReloadOom, OomRank };
  Kind kind = Kind::None;
  int rank = -1;  // ExitRank/KillRank: the rank that fails
  int step = 0;   // ... at the start of this optimizer step (0-based)
};
// "exit-rank=R@step=S" (the rank exits with status 1), "kill-rank=R@step=S" (SIGKILL, a crash),
// "reload-oom" (TrainModelOptions::inject_reload_oom), "oom-rank=R@step=S" (rank R's first layer
// backward in step S throws c10::OutOfMemoryError, TrainModel::inject_out_of_memory_in_next_backward).
// Throws InputError for anything else.
FaultInjection parse_fault_injection(const std::string& text);

struct StepMetrics {
  int step = 0;                 // 1-based: optimizer steps completed
  double loss = 0;              // mean over micro-steps, averaged over ranks
  double step_seconds = 0;      // this rank's wall time for the step (device synchronised)
  double tokens_per_second = 0; // tokens of all ranks / step_seconds
  int64_t tokens = 0;           // tokens of all ranks in this step
  // CUDA: the caching allocator's peak in this step; CPU: the process's max RSS so far.
  std::optional<int64_t> peak_memory_bytes;
  bool peak_is_rss = false;
  // CUDA: the allocator's peak within each part of the step (TrainModel::position_text()'s labels,
  // "optimizer" for the rest), in the order first reached; the largest over micro-steps. Their
  // maximum is peak_memory_bytes. Empty on the CPU.
  std::vector<std::pair<std::string, int64_t>> phase_peaks;
  double copy_ms = 0;           // offload copies' GPU time (TrainModel::take_offload_stats)
  double exposed_copy_ms = 0;   // ... of which the compute stream waited for
  int64_t copy_bytes = 0;       // bytes the offload copies moved (D2H + H2D), for their bandwidth
  double hidden_copy_ms() const { return copy_ms > exposed_copy_ms ? copy_ms - exposed_copy_ms : 0; }
};

struct TrainerOptions {
  int rank = 0;
  int world_size = 1;
  c10::Device device = c10::kCPU;
  int steps = 1;  // optimizer steps in total; a resumed run continues up to it
  std::string checkpoint_dir;  // empty: no checkpoints
  int checkpoint_every = 0;    // 0: only at the end (and when stopped by a signal)
  bool resume = false;
  std::string trace_path;      // --trace; empty: no trace
  FaultInjection fault;
  // Polled at every step boundary; true on any rank stops all of them after that step.
  std::function<bool()> stop_requested;
  // Called on rank 0 after each step.
  std::function<void(const StepMetrics&)> on_step;
  // Called once on rank 0 with a line worth showing (resumed from..., the offload OOM fallback).
  std::function<void(const std::string&)> on_note;
};

struct TrainResult {
  int first_step = 0;  // steps already done when this run started (resume)
  int last_step = 0;   // steps done when it ended
  bool interrupted = false;
  std::vector<StepMetrics> steps;
  std::optional<std::string> resumed_from;    // checkpoint directory
  std::optional<std::string> last_checkpoint; // written by this run
  std::vector<std::string> warnings;
  // Pinned host slots of the offloaded layers, allocated before the first step
  // (TrainModel::prepare_offload), and how long that took.
  int64_t pinned_bytes = 0;
  double pin_seconds = 0;
  // After the last step: a digest of this rank's trainable parameters (FNV-1a over their bytes)
  // and whether every rank's is the same, as DDP promises (a Reducer that averaged the wrong
  // gradients shows up here as diverged replicas).
  std::string parameter_digest;
  bool replicas_identical = false;
};

// What a rank knew when the device ran out of memory (c10::OutOfMemoryError, raised by the caching
// allocator), for the report and for `hookstream run`'s fallback to a plan that needs less.
struct OutOfMemoryReport {
  std::string position;             // TrainModel::position_text() in forward/backward, else empty
  int64_t requested_bytes = 0;      // the allocation that failed ("Tried to allocate X"); 0: not said
  int64_t peak_allocated_bytes = 0; // CUDA: the allocator's peak in this step before the failure
  int64_t device_total_bytes = 0;   // CUDA: the device's memory
};

// Bytes of the caching allocator's "Tried to allocate 1.95 GiB" (format_size in
// c10/cuda/CUDACachingAllocator.cpp: bytes, KiB, MiB, GiB); 0 when the text has none.
int64_t requested_bytes_in(const std::string& out_of_memory_text);

// Where a failure happened, for the one-line report naming the rank.
struct TrainingFailure : std::runtime_error {
  TrainingFailure(const std::string& what, int step, int micro_step, std::string phase)
      : std::runtime_error(what), step(step), micro_step(micro_step), phase(std::move(phase)) {}
  int step;
  int micro_step;
  std::string phase;  // "forward", "backward", "optimizer", "collective", "checkpoint"
  std::optional<OutOfMemoryReport> out_of_memory;  // set when the error was c10::OutOfMemoryError
};

// Trains. Errors from the model, the Reducer or a collective are rethrown as TrainingFailure;
// InputError (data file, checkpoint) passes through.
TrainResult train(const Plan& plan, const TrainerOptions& options, const c10::intrusive_ptr<c10d::ProcessGroup>& group);

// A plan's `hookstream.weights` / `hookstream.data`: relative to the plan's folder when a file is
// there, else to the working directory.
std::string plan_relative_path(const Plan& plan, const std::string& path);

// c10::Error::what() appends a C++ backtrace; Python shows what_without_backtrace().
std::string exception_text(const std::exception& e);

}  // namespace hookstream
