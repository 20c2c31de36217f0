#include "runtime/launcher.h"

#include <signal.h>
#include <string.h>

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/debug.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "runtime/cuda_device.h"
#include "runtime/process_runner.h"
#include "runtime/rank_liveness.h"
#include "runtime/reducer_factory.h"
#include "runtime/stop_signal.h"
#include "sim/inputs/input_error.h"

namespace hookstream {

namespace {

std::optional<std::string> variable(const char* name) {
  const char* value = std::getenv(name);
  if (!value) return std::nullopt;
  return std::string(value);
}

int integer_variable(const char* name, int minimum) {
  const auto text = variable(name);
  if (!text) throw InputError(name, "expected an integer environment variable (torchrun sets it)");
  try {
    size_t used = 0;
    const int value = std::stoi(*text, &used);
    if (used == text->size() && value >= minimum) return value;
  } catch (const std::exception&) {
  }
  throw InputError(name, fmt::format("expected an integer >= {}, got \"{}\"", minimum, *text));
}

std::string one_line(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

// Failures that mean "a peer is gone" rather than "this rank's computation failed".
bool looks_like_lost_peer(const std::string& text) {
  for (const char* marker : {"Connection closed", "Connection reset", "connection", "Socket", "Timed out", "timed out",
                             "Timeout", "timeout", "NCCL", "Broken pipe", "peer"}) {
    if (text.find(marker) != std::string::npos) return true;
  }
  return false;
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
}

std::string outcome_text(const ProcessOutcome& outcome) {
  if (outcome.exited) return fmt::format("exited with status {}", outcome.exit_code);
  if (outcome.signal != 0) return fmt::format("was killed by signal {} ({})", outcome.signal, strsignal(outcome.signal));
  return "ended (status unknown)";
}

}  // namespace

std::optional<RankEnvironment> rank_environment() {
  if (!variable("RANK") && !variable("WORLD_SIZE")) return std::nullopt;
  RankEnvironment env;
  env.world_size = integer_variable("WORLD_SIZE", 1);
  env.rank = integer_variable("RANK", 0);
  if (env.rank >= env.world_size) {
    throw InputError("RANK", fmt::format("expected a rank below WORLD_SIZE {}, got {}", env.world_size, env.rank));
  }
  env.local_rank = variable("LOCAL_RANK") ? integer_variable("LOCAL_RANK", 0) : env.rank;
  env.local_world_size = variable("LOCAL_WORLD_SIZE") ? integer_variable("LOCAL_WORLD_SIZE", 1) : env.world_size;
  env.master_addr = variable("MASTER_ADDR").value_or("127.0.0.1");
  env.master_port = integer_variable("MASTER_PORT", 1);
  return env;
}

TrainResult run_rank(const Plan& plan, const RankEnvironment& environment, TrainerOptions options,
                     std::chrono::milliseconds timeout) {
  options.rank = environment.rank;
  options.world_size = environment.world_size;
  c10d::setDebugLevelFromEnvironment();
  if (options.device.is_cuda()) {
    set_nccl_multicast_off();
    options.device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(environment.local_rank));
  } else {
    // One intra-op thread per rank: ranks share the machine's cores, and a fixed thread count
    // keeps CPU runs bit-for-bit repeatable (resume is compared exactly).
    torch::set_num_threads(1);
  }

  const c10d::TCPStoreOptions store_options =
      rendezvous_store_options(environment.master_port, environment.rank, environment.world_size, timeout);
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(environment.master_addr, store_options);
  } catch (const std::exception& e) {
    throw RankFailure(fmt::format("rank {}: rendezvous at {}:{} failed: {}", environment.rank, environment.master_addr,
                                  environment.master_port, one_line(exception_text(e))));
  }
  c10d::TCPStoreOptions monitor_options = store_options;
  monitor_options.isServer = false;
  monitor_options.waitWorkers = false;
  LivenessOptions liveness_options;
  liveness_options.abort_after = timeout;
  RankLiveness liveness(c10::make_intrusive<c10d::TCPStore>(environment.master_addr, monitor_options),
                        environment.rank, environment.world_size, liveness_options);

  auto group = options.device.is_cuda()
                   ? make_nccl_process_group(store, environment.rank, environment.world_size, timeout)
                   : make_gloo_process_group(store, environment.rank, environment.world_size, timeout);
  try {
    TrainResult result = train(plan, options, group);
    liveness.finish();
    if (options.device.is_cuda()) {
      try {
        shutdown_nccl_process_group(group);
      } catch (const std::exception& e) {  // the run is done: a failed shutdown is worth a line, not a failure
        fmt::print(stderr, "hookstream: rank {}: NCCL shutdown: {}\n", environment.rank, one_line(exception_text(e)));
      }
    }
    return result;
  } catch (const TrainingFailure& failure) {
    const std::string text = one_line(failure.what());
    std::vector<int> vanished = liveness.vanished_ranks();
    if (vanished.empty() && looks_like_lost_peer(text)) {
      // The collective noticed first; the heartbeat needs stale_after to agree.
      vanished = liveness.wait_for_vanished(liveness_options.stale_after + std::chrono::milliseconds(1500));
    }
    const std::string where = fmt::format("step {}", failure.step + 1);
    if (!vanished.empty()) {
      throw RankFailure(fmt::format("rank {}: stopping at {}: rank {} vanished ({} failed: {})", environment.rank,
                                    where, ranks_text(vanished), failure.phase, text));
    }
    if (failure.out_of_memory) {
      const std::string position = failure.out_of_memory->position.empty() ? "" : ", " + failure.out_of_memory->position;
      RankFailure oom(fmt::format("rank {}: out of device memory at {}, micro-step {} ({}{}): {}", environment.rank, where,
                                  failure.micro_step, failure.phase, position, text));
      oom.out_of_memory = failure.out_of_memory;
      throw oom;
    }
    throw RankFailure(fmt::format("rank {}: error at {}, micro-step {} ({}): {}", environment.rank, where,
                                  failure.micro_step, failure.phase, text));
  }
}

int launch_ranks(const LaunchOptions& options) {
  using Clock = std::chrono::steady_clock;
  ProcessGroupRunner runner;
  const int port = free_local_port();
  for (int rank = 0; rank < options.nproc; ++rank) {
    std::map<std::string, std::string> environment = options.environment;
    environment["RANK"] = std::to_string(rank);
    environment["LOCAL_RANK"] = std::to_string(rank);
    environment["WORLD_SIZE"] = std::to_string(options.nproc);
    environment["LOCAL_WORLD_SIZE"] = std::to_string(options.nproc);
    environment["MASTER_ADDR"] = "127.0.0.1";
    environment["MASTER_PORT"] = std::to_string(port);
    environment[kLaunchedVariable] = "1";
    runner.start(options.executable, options.args, environment, "");
  }
  int signals_seen = 0;
  bool interrupted = false;
  std::optional<int> failure_status;
  // When to escalate; max(): not scheduled. (Plain time points: GCC 12 misreads std::optional of
  // them as maybe-uninitialized here.)
  constexpr Clock::time_point kNever = Clock::time_point::max();
  Clock::time_point terminate_at = kNever, kill_at = kNever;
  while (!runner.all_finished()) {
    const int signals = stop_signals_received();
    if (signals > signals_seen) {
      signals_seen = signals;
      interrupted = true;
      // First signal: the ranks stop after the current step. Second: now.
      runner.signal_running(signals == 1 ? SIGINT : SIGKILL);
    }
    for (const auto& [rank, outcome] : runner.reap_finished()) {
      const bool clean = outcome.exited && (outcome.exit_code == 0 || (interrupted && outcome.exit_code == 130));
      if (clean || failure_status || (interrupted && !outcome.exited)) continue;
      std::cerr << fmt::format("hookstream: rank {} {}; stopping the other ranks\n", rank, outcome_text(outcome));
      failure_status = outcome.exited ? outcome.exit_code : 1;
      terminate_at = Clock::now() + options.grace;
    }
    if (Clock::now() >= terminate_at) {
      runner.signal_running(SIGTERM);
      terminate_at = kNever;
      kill_at = Clock::now() + std::chrono::seconds(3);
    }
    if (Clock::now() >= kill_at) {
      runner.signal_running(SIGKILL);
      kill_at = kNever;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (interrupted) return kInterruptedExitCode;
  return failure_status.value_or(0);
}

}  // namespace hookstream
