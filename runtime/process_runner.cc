#include "runtime/process_runner.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>
#include <thread>
#include <utility>

extern char** environ;

namespace hookstream {

namespace {

ProcessOutcome outcome_of(int status) {
  ProcessOutcome outcome;
  if (WIFEXITED(status)) {
    outcome.exited = true;
    outcome.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    outcome.signal = WTERMSIG(status);
  }
  return outcome;
}

}  // namespace

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
  if (!log_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  }
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, path.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("cannot start " + path + ": " + std::strerror(rc));
  children_.push_back(Child{pid, false});
}

std::vector<ProcessOutcome> ProcessGroupRunner::wait_all(std::chrono::steady_clock::time_point deadline) {
  std::vector<ProcessOutcome> outcomes(children_.size());
  for (;;) {
    for (auto& [index, outcome] : reap_finished()) outcomes[index] = outcome;
    if (all_finished()) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      for (size_t i = 0; i < children_.size(); ++i) {
        if (children_[i].reaped) continue;
        kill(children_[i].pid, SIGKILL);
        int status = 0;
        while (waitpid(children_[i].pid, &status, 0) < 0 && errno == EINTR) {
        }
        children_[i].reaped = true;
        outcomes[i] = outcome_of(status);
        outcomes[i].killed_at_deadline = true;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  children_.clear();
  return outcomes;
}

std::vector<std::pair<size_t, ProcessOutcome>> ProcessGroupRunner::reap_finished() {
  std::vector<std::pair<size_t, ProcessOutcome>> finished;
  for (size_t i = 0; i < children_.size(); ++i) {
    if (children_[i].reaped) continue;
    int status = 0;
    const pid_t r = waitpid(children_[i].pid, &status, WNOHANG);
    if (r == children_[i].pid) {
      children_[i].reaped = true;
      finished.emplace_back(i, outcome_of(status));
    } else if (r < 0 && errno != EINTR) {
      children_[i].reaped = true;  // not our child any more: nothing to wait for
      finished.emplace_back(i, ProcessOutcome{});
    }
  }
  return finished;
}

bool ProcessGroupRunner::all_finished() const {
  for (const Child& child : children_) {
    if (!child.reaped) return false;
  }
  return true;
}

void ProcessGroupRunner::signal_running(int signal) {
  for (const Child& child : children_) {
    if (!child.reaped) kill(child.pid, signal);
  }
}

void ProcessGroupRunner::kill_and_reap_all() {
  for (Child& child : children_) {
    if (child.reaped) continue;
    kill(child.pid, SIGKILL);
    int status = 0;
    while (waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
    }
    child.reaped = true;
  }
  children_.clear();
}

namespace {

// Whether `port` on 127.0.0.1 can be bound now (0: any; the bound port is returned).
int try_bind_local(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket() failed");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t length = sizeof(address);
  const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
                     getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  close(fd);
  return bound ? ntohs(address.sin_port) : -1;
}

// The kernel's ephemeral range (net.ipv4.ip_local_port_range), Linux's default when unreadable.
std::pair<int, int> ephemeral_ports() {
  std::ifstream file("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 32768, high = 60999;
  if (!(file >> low >> high) || low < 1 || high < low) return {32768, 60999};
  return {low, high};
}

}  // namespace

int free_local_port() {
  // A port found free is released before the store binds it. The kernel hands out ephemeral
  // ports (bind to port 0, outgoing connections: Gloo's pair sockets, other tests' stores) only
  // inside ip_local_port_range, so a port below it cannot be taken in between by those; only a
  // process naming that very port could. torchrun (torch/distributed/elastic/utils/
  // distributed.py, get_free_port) binds port 0 and has that race with every ephemeral socket.
  constexpr int kLowest = 10000;
  const int below = ephemeral_ports().first;
  if (below - kLowest >= 1000) {
    std::random_device entropy;
    std::uniform_int_distribution<int> pick(kLowest, below - 1);
    for (int attempt = 0; attempt < 64; ++attempt) {
      const int port = try_bind_local(pick(entropy));
      if (port > 0) return port;
    }
  }
  const int port = try_bind_local(0);
  if (port <= 0) throw std::runtime_error("cannot find a free port on 127.0.0.1");
  return port;
}

}  // namespace hookstream
