#include "runtime/trainer.h"

#include <sys/resource.h>

#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/debug.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <csignal>
#include <filesystem>
#include <optional>
#include <regex>

#include "runtime/cuda_device.h"
#include "runtime/ddp_wrapper.h"
#include "runtime/fused_adamw.h"
#include "runtime/plan_fingerprint.h"
#include "runtime/run_trace.h"
#include "runtime/token_data.h"
#include "runtime/train_model.h"
#include "runtime/training_checkpoint.h"
#include "sim/inputs/input_error.h"
#include "sim/streams/stream_protocol.h"

namespace hookstream {

namespace fs = std::filesystem;

std::string exception_text(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

FaultInjection parse_fault_injection(const std::string& text) {
  FaultInjection fault;
  if (text.empty()) return fault;
  if (text == "reload-oom") {
    fault.kind = FaultInjection::Kind::ReloadOom;
    return fault;
  }
  static const std::regex rank_at_step("(exit|kill|oom)-rank=([0-9]+)@step=([0-9]+)");
  std::smatch match;
  if (!std::regex_match(text, match, rank_at_step)) {
    throw InputError("--inject-fault", "expected exit-rank=R@step=S, kill-rank=R@step=S, oom-rank=R@step=S or reload-oom, got \"" +
                                           text + "\"");
  }
  const std::string kind = match[1].str();
  fault.kind = kind == "exit" ? FaultInjection::Kind::ExitRank
               : kind == "kill" ? FaultInjection::Kind::KillRank
                                : FaultInjection::Kind::OomRank;
  fault.rank = std::stoi(match[2].str());
  fault.step = std::stoi(match[3].str());
  return fault;
}

int64_t requested_bytes_in(const std::string& text) {
  static const std::regex tried("Tried to allocate ([0-9]+(\\.[0-9]+)?) (bytes|KiB|MiB|GiB)");
  std::smatch match;
  if (!std::regex_search(text, match, tried)) return 0;
  const std::string unit = match[3].str();
  const double scale = unit == "GiB" ? 1024.0 * 1024 * 1024 : unit == "MiB" ? 1024.0 * 1024 : unit == "KiB" ? 1024.0 : 1.0;
  return static_cast<int64_t>(std::stod(match[1].str()) * scale);
}

std::string plan_relative_path(const Plan& plan, const std::string& path) {
  if (path.empty() || fs::path(path).is_absolute()) return path;
  const fs::path beside_plan = fs::path(plan.source).parent_path() / path;
  return fs::exists(beside_plan) ? beside_plan.string() : path;
}

namespace {

using Clock = std::chrono::steady_clock;


std::string plan_directory(const Plan& plan) { return fs::path(plan.source).parent_path().string(); }

int64_t max_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

// A collective every rank joins; also the barrier (Gloo and NCCL both reduce a small tensor).
// One rank: a reduction is the identity, and skipping it keeps NCCL from creating its communicator
// on the first collective, which allocates device memory: after a 320K-token step that left the
// H100 full, that first all-reduce failed with "Failed to CUDA calloc async 4 bytes" (2026-11-27).
at::Tensor all_reduce_sum(const c10::intrusive_ptr<c10d::ProcessGroup>& group, at::Tensor values) {
  if (group->getSize() == 1) return values;
  std::vector<at::Tensor> tensors = {values};
  group->allreduce(tensors)->wait();
  return tensors[0];
}

void barrier(const c10::intrusive_ptr<c10d::ProcessGroup>& group, c10::Device device) {
  all_reduce_sum(group, at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(device)));
}

at::Tensor all_reduce(const c10::intrusive_ptr<c10d::ProcessGroup>& group, at::Tensor values, c10d::ReduceOp op) {
  if (group->getSize() == 1) return values;  // as all_reduce_sum
  std::vector<at::Tensor> tensors = {values};
  c10d::AllreduceOptions options;
  options.reduceOp = op;
  group->allreduce(tensors, options)->wait();
  return tensors[0];
}

uint64_t parameter_digest(const std::vector<at::Tensor>& params) {
  uint64_t hash = 1469598103934665603ULL;
  for (const at::Tensor& p : params) {
    const at::Tensor bytes = p.detach().to(at::kCPU).contiguous();
    const auto* data = static_cast<const unsigned char*>(bytes.data_ptr());
    for (size_t i = 0; i < bytes.nbytes(); ++i) {
      hash ^= data[i];
      hash *= 1099511628211ULL;
    }
  }
  return hash;
}

void inject_fault_if_due(const FaultInjection& fault, int rank, int step, TrainModel& model) {
  if (fault.rank != rank || fault.step != step) return;
  if (fault.kind == FaultInjection::Kind::OomRank) model.inject_out_of_memory_in_next_backward();
  if (fault.kind == FaultInjection::Kind::ExitRank) {
    std::fprintf(stderr, "hookstream: rank %d: --inject-fault: exiting with status 1 at step %d\n", rank, step);
    std::fflush(stderr);
    std::_Exit(1);  // no cleanup, no goodbye to the peers: as a crashed process
  }
  if (fault.kind == FaultInjection::Kind::KillRank) {
    std::fprintf(stderr, "hookstream: rank %d: --inject-fault: SIGKILL at step %d\n", rank, step);
    std::fflush(stderr);
    std::raise(SIGKILL);
  }
}

// A batch to the device without making the host wait: a copy from pageable memory first waits for
// the stream to drain (CUDA runtime API, "API synchronization behavior": pageable host-to-device
// transfers are stream-synchronous), which between micro-steps of gradient accumulation would idle
// the GPU while the next forward is issued. From pinned memory the copy is queued; the pinned
// block is held by PyTorch's CachingHostAllocator until the copy's stream event has passed.
at::Tensor to_device(const at::Tensor& host, c10::Device device) {
  if (!device.is_cuda()) return host.to(device);
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

// The caching allocator's peak per part of the step: at each move (TrainModel's position listener)
// the peak since the last move is the previous part's, and the counter restarts from what is live
// (c10::cuda::CUDACachingAllocator::resetPeakStats sets peak = current). The allocator's counters
// follow the host's allocation order, so every byte of the step's peak falls in exactly one part.
class PhasePeaks {
 public:
  explicit PhasePeaks(c10::Device device) : device_(device) {}
  void start() {
    peaks_.clear();
    current_ = "step start";
    cuda_reset_peak_memory(device_);
  }
  void move_to(const std::string& label) {
    close_current();
    current_ = label;
  }
  // The step's peak so far, the running part's included.
  int64_t so_far() const {
    int64_t peak = cuda_peak_memory_bytes(device_);
    for (const auto& [label, bytes] : peaks_) peak = std::max(peak, bytes);
    return peak;
  }
  std::vector<std::pair<std::string, int64_t>> finish() {
    close_current();
    return std::move(peaks_);
  }

 private:
  void close_current() {
    const int64_t peak = cuda_peak_memory_bytes(device_);
    cuda_reset_peak_memory(device_);
    for (auto& [label, bytes] : peaks_) {
      if (label == current_) {
        bytes = std::max(bytes, peak);
        return;
      }
    }
    peaks_.emplace_back(current_, peak);
  }
  c10::Device device_;
  std::string current_;
  std::vector<std::pair<std::string, int64_t>> peaks_;
};

}  // namespace

TrainResult train(const Plan& plan, const TrainerOptions& options, const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  const int rank = options.rank;
  const c10::Device device = options.device;
  const bool cuda = device.is_cuda();
  at::manual_seed(static_cast<uint64_t>(plan.seed));

  TrainModelOptions model_options;
  model_options.device = device;
  model_options.dtype = plan.bf16.value_or(cuda) ? c10::kBFloat16 : c10::kFloat;
  model_options.seed = static_cast<uint64_t>(plan.seed);
  model_options.weights_path = plan_relative_path(plan, plan.weights.value_or(""));
  model_options.protocol = load_stream_protocol(plan.offload_protocol_name(), plan_directory(plan));
  model_options.inject_reload_oom = options.fault.kind == FaultInjection::Kind::ReloadOom;
  TrainModel model(plan, model_options);
  std::optional<PhasePeaks> phase_peaks;
  if (cuda) {
    phase_peaks.emplace(device);
    model.set_position_listener([&phase_peaks](const std::string& label) { phase_peaks->move_to(label); });
  }

  // One process trains without a DDP wrapper, as accelerate does: Accelerator.prepare_model wraps
  // DistributedDataParallel only when `multi_device` (accelerate/state.py: distributed_type != NO and
  // num_processes > 1), so axolotl / the HF Trainer on one GPU run plain autograd with no Reducer,
  // no bucket copies and no all-reduce. The memory model leaves the buckets out at one rank for the
  // same reason (sim/cost/memory_model.cc), and the eager anchors run no DDP either.
  const char* debug = std::getenv("TORCH_DISTRIBUTED_DEBUG");
  std::optional<DdpWrapper> ddp;
  if (options.world_size > 1) {
    ddp.emplace(model.ddp_parameters(), model.ddp_parameter_names(), group,
                ddp_settings_for(plan, debug && std::string(debug) != "OFF"));
  }
  // On CUDA the fused kernel of torch.optim.AdamW(fused=True) (runtime/fused_adamw.h); AdamW::step
  // elsewhere.
  FusedAdamW optimizer(model.ddp_parameters(), torch::optim::AdamWOptions(plan.learning_rate)
                                                   .weight_decay(plan.weight_decay));

  const int64_t vocab = plan.model.vocab_size;
  TokenSource data = plan.data ? TokenSource::from_file(plan_relative_path(plan, *plan.data), vocab, rank,
                                                        options.world_size, plan.sequence_len)
                               : TokenSource::synthetic(static_cast<uint64_t>(plan.seed), vocab);

  TrainResult result;
  const std::string fingerprint = plan_fingerprint(plan);
  if (options.resume) {
    if (const auto checkpoint = latest_checkpoint(options.checkpoint_dir)) {
      validate_checkpoint(*checkpoint, plan, options.world_size, /*read_rank_files=*/false);
      const RankState state = load_rank_state(rank_file(checkpoint->directory, rank), model, optimizer, device);
      data.seek(state.data);
      result.first_step = state.step;
      result.resumed_from = checkpoint->directory;
      if (rank == 0 && options.on_note) {
        options.on_note(fmt::format("resumed from {} (step {})", checkpoint->directory, state.step));
      }
    } else if (rank == 0 && options.on_note) {
      options.on_note("no checkpoint in " + options.checkpoint_dir + ": starting at step 0");
    }
  }

  auto save_checkpoint = [&](int step) {
    const std::string staging = staging_directory(options.checkpoint_dir, step);
    if (rank == 0) {
      fs::remove_all(staging);  // left by a run that died while saving
      fs::create_directories(staging);
    }
    barrier(group, device);
    save_rank_state(rank_file(staging, rank), model, optimizer, RankState{step, data.position()}, device);
    barrier(group, device);
    if (rank == 0) commit_checkpoint(options.checkpoint_dir, step, options.world_size, fingerprint);
    barrier(group, device);
    result.last_checkpoint = checkpoint_directory(options.checkpoint_dir, step);
  };

  std::optional<RunTrace> trace;
  if (!options.trace_path.empty()) trace.emplace(rank_trace_path(options.trace_path, rank, options.world_size), device);

  if (result.first_step < options.steps) {
    // Offloaded layers' pinned slots before step 1, not at their first write inside it: pinning
    // runs at ~2 GiB/s (bench/first_step_costs.py), and a host that issues small kernels (a
    // tiled MLP) stalls the GPU for it; a slot that cannot be pinned then fails here, before
    // training starts. The first step's shape decides the slots; another shape later reallocates.
    const Clock::time_point pin_start = Clock::now();
    result.pinned_bytes = model.prepare_offload(plan.micro_batch_size, plan.sequence_len_for(rank, result.first_step, 0));
    result.pin_seconds = std::chrono::duration<double>(Clock::now() - pin_start).count();
    if (result.pinned_bytes > 0 && rank == 0 && options.on_note) {
      options.on_note(fmt::format("pinned {:.2f} GiB of host memory for the offloaded layers in {:.2f} s before step {}",
                                  static_cast<double>(result.pinned_bytes) / (1 << 30), result.pin_seconds,
                                  result.first_step + 1));
    }
  }

  const std::vector<at::Tensor> params = model.ddp_parameters();
  const int micro_steps = std::max(1, plan.gradient_accumulation_steps);
  const auto tensor_options = at::TensorOptions().dtype(at::kDouble).device(device);
  int step = result.first_step;
  std::string phase = "forward";
  int micro_step = 0;
  try {
    for (; step < options.steps; ++step) {
      inject_fault_if_due(options.fault, rank, step, model);
      const Clock::time_point start = Clock::now();
      if (phase_peaks) phase_peaks->start();
      double loss_sum = 0;
      int64_t tokens = 0;
      // Each micro-step's loss, read after the optimizer step: reading it right after backward
      // would make the host wait for the GPU there and leave the GPU idle while the optimizer's
      // work is issued (PyTorch eager reads it after the step too, bench/python_offload_baseline.py).
      std::vector<at::Tensor> micro_losses;
      {
        TraceRange step_range(fmt::format("hookstream:step:{}", step + 1));
        for (const at::Tensor& p : params) {
          at::Tensor p_mut = p;
          p_mut.mutable_grad() = at::Tensor();  // optimizer.zero_grad(set_to_none=True)
        }
        for (micro_step = 0; micro_step < micro_steps; ++micro_step) {
          // accelerate's accumulate()/HF Trainer: every micro-step but the last under no_sync(),
          // so the Reducer all-reduces once per optimizer step.
          const bool sync = micro_step == micro_steps - 1;
          const int64_t sequence_len = plan.sequence_len_for(rank, step, micro_step);
          const TokenBatch batch = data.next(rank, step, micro_step, plan.micro_batch_size, sequence_len);
          phase = "forward";
          if (ddp) ddp->pre_forward(sync);
          at::Tensor loss = model.loss(to_device(batch.input_ids, device), to_device(batch.labels, device),
                                       TrainPosition{rank, step, micro_step});
          if (ddp) loss = ddp->post_forward(loss, sync);
          phase = "backward";
          loss.backward();
          micro_losses.push_back(loss.detach());
          tokens += batch.input_ids.numel();
        }
        phase = "optimizer";
        if (phase_peaks) phase_peaks->move_to("optimizer");
        TraceRange optimizer_range("hookstream:optimizer");
        optimizer.step();
      }
      for (const at::Tensor& micro_loss : micro_losses) loss_sum += micro_loss.item<double>();
      if (cuda) cuda_synchronize(device);
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();

      // One collective per step: the loss for the log, the tokens, and whether any rank was asked
      // to stop, so that all ranks stop after the same step (a rank that stopped alone would leave
      // the others blocked in the next step's all-reduce).
      phase = "collective";
      const bool stop = options.stop_requested && options.stop_requested();
      const at::Tensor reduced =
          all_reduce_sum(group, at::tensor({loss_sum, stop ? 1.0 : 0.0, static_cast<double>(tokens)}, at::kDouble)
                                    .to(tensor_options))
              .to(at::kCPU);
      const double* values = reduced.data_ptr<double>();

      StepMetrics metrics;
      metrics.step = step + 1;
      metrics.loss = values[0] / options.world_size;
      metrics.step_seconds = seconds;
      metrics.tokens = static_cast<int64_t>(values[2]);
      metrics.tokens_per_second = seconds > 0 ? values[2] / seconds : 0;
      if (phase_peaks) {
        metrics.phase_peaks = phase_peaks->finish();
        int64_t peak = 0;
        for (const auto& [label, bytes] : metrics.phase_peaks) peak = std::max(peak, bytes);
        metrics.peak_memory_bytes = peak;
      } else {
        metrics.peak_memory_bytes = max_rss_bytes();
        metrics.peak_is_rss = true;
      }
      const OffloadStats offload = model.take_offload_stats();
      metrics.copy_ms = offload.copy_ms;
      metrics.exposed_copy_ms = offload.exposed_copy_ms;
      metrics.copy_bytes = offload.offloaded_bytes + offload.reloaded_bytes;
      for (const std::string& warning : offload.warnings) {
        result.warnings.push_back(warning);
        if (rank == 0 && options.on_note) options.on_note(warning);
      }
      result.steps.push_back(metrics);
      if (rank == 0 && options.on_step) options.on_step(metrics);

      phase = "checkpoint";
      const bool last = step + 1 == options.steps;
      const bool interrupted = values[1] > 0;
      const bool due = options.checkpoint_every > 0 && (step + 1) % options.checkpoint_every == 0;
      if (!options.checkpoint_dir.empty() && (due || last || interrupted)) save_checkpoint(step + 1);
      if (interrupted) {
        result.interrupted = true;
        ++step;
        break;
      }
    }
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    TrainingFailure failure(exception_text(e), step, micro_step, phase);
    // The autograd engine rethrows the exception its worker thread caught, type and all
    // (torch/csrc/autograd/engine.cpp, GraphTask::set_exception / std::rethrow_exception).
    if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) {
      OutOfMemoryReport report;
      if (phase == "forward" || phase == "backward") report.position = model.position_text();
      report.requested_bytes = requested_bytes_in(failure.what());
      if (cuda) {
        report.peak_allocated_bytes = phase_peaks ? phase_peaks->so_far() : cuda_peak_memory_bytes(device);
        report.device_total_bytes = cuda_total_memory_bytes(device);
      }
      failure.out_of_memory = report;
    }
    throw failure;
  }
  result.last_step = step;
  if (!result.interrupted) {
    try {
      const uint64_t digest = parameter_digest(params);
      result.parameter_digest = fmt::format("{:016x}", digest);
      // Two 32-bit halves: exact in a double on every backend.
      const at::Tensor halves =
          at::tensor({static_cast<double>(digest >> 32), static_cast<double>(digest & 0xffffffffULL)}, at::kDouble)
              .to(tensor_options);
      const at::Tensor high = all_reduce(group, halves.clone(), c10d::ReduceOp::MAX).to(at::kCPU);
      const at::Tensor low = all_reduce(group, halves.clone(), c10d::ReduceOp::MIN).to(at::kCPU);
      result.replicas_identical = at::equal(high, low);
    } catch (const std::exception& e) {
      throw TrainingFailure(exception_text(e), step, 0, "collective");
    }
  }
  if (trace && !result.interrupted) trace->finish();
  return result;
}

}  // namespace hookstream
