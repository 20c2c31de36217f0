// Starts worker processes with posix_spawn (no fork of a parent whose LibTorch threads may already
// run) and waits for them with a hard deadline: whatever is still running then is killed with
// SIGKILL, and every child is reaped on every path (no zombies).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace hookstream {

struct ProcessOutcome {
  bool killed_at_deadline = false;
  bool exited = false;  // exited normally (exit_code valid)
  int exit_code = -1;
  int signal = 0;       // terminating signal when !exited
};

class ProcessGroupRunner {
 public:
  ProcessGroupRunner() = default;
  ProcessGroupRunner(const ProcessGroupRunner&) = delete;
  ProcessGroupRunner& operator=(const ProcessGroupRunner&) = delete;
  // Kills and reaps any child not yet waited for.
  ~ProcessGroupRunner();

  // Runs `path args...` with the parent's environment plus `environment` (overriding), stdout and
  // stderr appended to `log_path` (empty: the parent's stdout and stderr). Throws
  // std::runtime_error when the spawn fails.
  void start(const std::string& path, const std::vector<std::string>& args,
             const std::map<std::string, std::string>& environment, const std::string& log_path);

  // Waits for all children until `deadline`; outcomes in start() order.
  std::vector<ProcessOutcome> wait_all(std::chrono::steady_clock::time_point deadline);

  // Supervision without blocking (hookstream run's launcher): the children (start() order) that
  // ended since the last call, reaped, with their outcomes.
  std::vector<std::pair<size_t, ProcessOutcome>> reap_finished();
  bool all_finished() const;
  // Sends `signal` to every child not yet reaped (a reaped pid may already belong to another process).
  void signal_running(int signal);

 private:
  struct Child {
    pid_t pid = 0;
    bool reaped = false;
  };
  void kill_and_reap_all();
  std::vector<Child> children_;
};

// A TCP port on 127.0.0.1 that was free just now, below the kernel's ephemeral range where there is
// room (so no ephemeral socket can take it before the store binds it a few milliseconds later).
int free_local_port();

}  // namespace hookstream
