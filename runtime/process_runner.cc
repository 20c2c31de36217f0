#include "runtime/process_runner.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace hookstream {

ProcessGroupRunner::~ProcessGroupRunner() { kill_and_reap_all(); }

void ProcessGroupRunner::start(const std::string& path, const std::vector<std::string>& args,
                               const std::map<std::string, std::string>& environment, const std::string& log_path) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    const std::string key = entry.substr(0, entry.find('='));
    if (!environment.count(key)) env_strings.push_back(entry);
  }
  for (const auto& [key, value] : environment) env_strings.push_back(key + "=" + value);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  std::vector<std::string> argv_strings = {path};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, path.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("cannot start " + path + ": " + std::strerror(rc));
  children_.push_back(pid);
}

std::vector<ProcessOutcome> ProcessGroupRunner::wait_all(std::chrono::steady_clock::time_point deadline) {
  std::vector<ProcessOutcome> outcomes(children_.size());
  std::vector<bool> done(children_.size(), false);
  size_t remaining = children_.size();
  auto record = [&](size_t i, int status) {
    done[i] = true;
    --remaining;
    if (WIFEXITED(status)) {
      outcomes[i].exited = true;
      outcomes[i].exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      outcomes[i].signal = WTERMSIG(status);
    }
  };
  while (remaining > 0) {
    for (size_t i = 0; i < children_.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      const pid_t r = waitpid(children_[i], &status, WNOHANG);
      if (r == children_[i]) record(i, status);
      else if (r < 0 && errno != EINTR) {
        done[i] = true;
        --remaining;
      }
    }
    if (remaining == 0) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      for (size_t i = 0; i < children_.size(); ++i) {
        if (done[i]) continue;
        kill(children_[i], SIGKILL);
        int status = 0;
        while (waitpid(children_[i], &status, 0) < 0 && errno == EINTR) {
        }
        outcomes[i].killed_at_deadline = true;
        record(i, status);
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  children_.clear();
  return outcomes;
}

void ProcessGroupRunner::kill_and_reap_all() {
  for (pid_t pid : children_) {
    kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  children_.clear();
}

}  // namespace hookstream
