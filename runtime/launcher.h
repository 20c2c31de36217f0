// `hookstream run`'s processes. As torchrun does, the launcher starts one process per rank (the
// same binary, /proc/self/exe) with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT set, and supervises them; a process that finds those variables runs as that rank,
// so torchrun or a cluster scheduler can start the ranks instead (docs/run.md).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/trainer.h"
#include "sim/inputs/plan.h"

namespace hookstream {

// torchrun's variables (torch/distributed/run.py, elastic agent).
struct RankEnvironment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
};

// nullopt when neither RANK nor WORLD_SIZE is set. Throws InputError naming the variable for a
// malformed or inconsistent value (RANK without WORLD_SIZE, RANK >= WORLD_SIZE, no MASTER_PORT).
std::optional<RankEnvironment> rank_environment();

// Set by the launcher in its ranks' environment: the launcher verified the plan already.
constexpr const char* kLaunchedVariable = "HOOKSTREAM_RUN_LAUNCHED";

// A rank's failure, as the one line to print ("rank 0: rank 1 vanished at step 2 (...)").
struct RankFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
  std::optional<OutOfMemoryReport> out_of_memory;  // the device ran out of memory (the rank's own failure)
};

// A rank's exit status when it failed because the device ran out of memory (docs/run.md): the
// launcher then falls back to a plan predicted to need less.
constexpr int kOutOfMemoryExitCode = 3;

// Runs this process as `environment.rank`: TCPStore rendezvous at MASTER_ADDR:MASTER_PORT (rank 0
// hosts it), liveness monitor (runtime/rank_liveness.h), Gloo (CPU) or NCCL (CUDA, multicast off)
// process group, then train(). `timeout`: store, collective and dead-peer limit. Training
// failures are rethrown as RankFailure naming this rank, and the rank that vanished when the
// liveness monitor saw one. InputError passes through.
TrainResult run_rank(const Plan& plan, const RankEnvironment& environment, TrainerOptions options,
                     std::chrono::milliseconds timeout);

struct LaunchOptions {
  std::string executable;          // /proc/self/exe
  std::vector<std::string> args;   // the ranks' command line (without the executable)
  int nproc = 1;
  std::map<std::string, std::string> environment;  // added to every rank's
  // After a rank fails: how long the others get to notice and report before SIGTERM (then SIGKILL
  // 3 s later).
  std::chrono::milliseconds grace{10000};
};

// Starts the ranks on 127.0.0.1 (a free port) and supervises them: the first rank that exits
// non-zero or dies by a signal is reported in one line, the others are stopped after the grace
// period. SIGINT/SIGTERM (install_stop_handlers() first) are forwarded; a second one kills the
// ranks. Returns the exit status: 0, 130 when interrupted, else the first failed rank's status
// (1 for a signal).
int launch_ranks(const LaunchOptions& options);

}  // namespace hookstream
