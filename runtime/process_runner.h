// Starts worker processes with posix_spawn (no fork of a parent whose LibTorch threads may already
// run) and waits for them with a hard deadline: whatever is still running then is killed with
// SIGKILL, and every child is reaped on every path (no zombies).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
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
  // stderr appended to `log_path`. Throws std::runtime_error when the spawn fails.
  void start(const std::string& path, const std::vector<std::string>& args,
             const std::map<std::string, std::string>& environment, const std::string& log_path);

  // Waits for all children until `deadline`; outcomes in start() order.
  std::vector<ProcessOutcome> wait_all(std::chrono::steady_clock::time_point deadline);

 private:
  void kill_and_reap_all();
  std::vector<pid_t> children_;
};

}  // namespace hookstream
