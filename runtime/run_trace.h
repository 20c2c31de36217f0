// `hookstream run --trace FILE`: the run recorded by LibTorch's profiler as a Chrome trace, with the
// record_function ranges the runtime emits ("hookstream:{phase}:L{layer}:...", one
// "hookstream:step:{n}" per optimizer step, "hookstream:optimizer"), for replay and race checking
// (`hookstream replay` reads Kineto JSON, docs/replay.md).
//
// CUDA builds (the PyTorch wheel's LibTorch) use the Kineto profiler with CPU and CUDA activities
// (torch/csrc/autograd/profiler_kineto.h: prepareProfiler, enableProfiler, disableProfiler ->
// ProfilerResult::save). Debian's CPU LibTorch 1.13 has no Kineto: there the legacy profiler's
// RecordProfile (torch/csrc/autograd/profiler_legacy.h) writes the Chrome trace. The file appears
// only when the run completes (written to a temporary name, then renamed).
#pragma once

#include <memory>
#include <string>

#include <torch/torch.h>

namespace hookstream {

// Where rank `rank` of `world_size` writes `--trace PATH`: PATH itself for one rank; otherwise
// ".rank{r}" before the extension ("step.json" -> "step.rank1.json", "trace" -> "trace.rank1"), one
// file per rank, which `hookstream replay` takes together (the torchrun habit of one profiler
// trace per rank, as torch.profiler.tensorboard_trace_handler names them per worker).
std::string rank_trace_path(const std::string& path, int rank, int world_size);

class RunTrace {
 public:
  RunTrace(std::string path, c10::Device device);
  ~RunTrace();  // without finish(): nothing is written
  RunTrace(const RunTrace&) = delete;
  RunTrace& operator=(const RunTrace&) = delete;

  // Stops the profiler and writes the trace.
  void finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A record_function range ("hookstream:step:3") visible to both profilers, for the current scope.
class TraceRange {
 public:
  explicit TraceRange(const std::string& name);
  ~TraceRange();
  TraceRange(const TraceRange&) = delete;
  TraceRange& operator=(const TraceRange&) = delete;

 private:
  std::unique_ptr<at::RecordFunction> guard_;
};

}  // namespace hookstream
