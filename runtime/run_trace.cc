#include "runtime/run_trace.h"

#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#ifdef HOOKSTREAM_HAVE_CUDA
#include <torch/csrc/autograd/profiler_kineto.h>
#endif

namespace hookstream {

namespace {
void write_atomically(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".tmp-hookstream";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) {
      std::filesystem::remove(temporary);
      throw std::runtime_error(path + ": cannot write the trace");
    }
  }
  std::filesystem::rename(temporary, path);
}
}  // namespace

struct RunTrace::Impl {
  std::string path;
  bool kineto = false;
  bool finished = false;
  std::ostringstream legacy_text;
  std::unique_ptr<torch::autograd::profiler::RecordProfile> legacy;
};

std::string rank_trace_path(const std::string& path, int rank, int world_size) {
  if (world_size <= 1) return path;
  const std::filesystem::path p(path);
  std::filesystem::path name = p.stem();
  name += ".rank" + std::to_string(rank);
  name += p.extension();
  return (p.parent_path() / name).string();
}

RunTrace::RunTrace(std::string path, c10::Device device) : impl_(std::make_unique<Impl>()) {
  impl_->path = std::move(path);
#ifdef HOOKSTREAM_HAVE_CUDA
  if (device.is_cuda()) {
    using torch::profiler::impl::ActivityType;
    // profile_memory: the caching allocator's allocations and frees as "[memory]" events (as
    // torch.profiler.profile(profile_memory=True) records them), so a trace shows at which op the
    // step's peak memory is reached and what is live then.
    const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO,
                                                       /*report_input_shapes=*/false, /*profile_memory=*/true);
    const std::set<ActivityType> activities = {ActivityType::CPU, ActivityType::CUDA};
    torch::autograd::profiler::prepareProfiler(config, activities);
    torch::autograd::profiler::enableProfiler(config, activities);
    impl_->kineto = true;
    return;
  }
#endif
  impl_->legacy = std::make_unique<torch::autograd::profiler::RecordProfile>(impl_->legacy_text);
}

RunTrace::~RunTrace() {
  if (impl_->finished) return;
  try {
#ifdef HOOKSTREAM_HAVE_CUDA
    if (impl_->kineto) torch::autograd::profiler::disableProfiler();
#endif
    impl_->legacy.reset();  // stops the legacy profiler; its text is dropped
  } catch (const std::exception&) {
    // Unwinding from a failed run: the trace is not wanted.
  }
}

void RunTrace::finish() {
  impl_->finished = true;
#ifdef HOOKSTREAM_HAVE_CUDA
  if (impl_->kineto) {
    const std::string temporary = impl_->path + ".tmp-hookstream";
    torch::autograd::profiler::disableProfiler()->save(temporary);
    std::filesystem::rename(temporary, impl_->path);
    return;
  }
#endif
  impl_->legacy.reset();  // RecordProfile writes the Chrome trace in its destructor
  write_atomically(impl_->path, impl_->legacy_text.str());
}

TraceRange::TraceRange(const std::string& name) {
  guard_ = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
  if (guard_->isActive()) guard_->before(name);
}

TraceRange::~TraceRange() = default;

}  // namespace hookstream
