#include "runtime/stop_signal.h"

#include <csignal>

namespace hookstream {

namespace {
// The one piece of process-wide mutable state in the runtime: a signal handler can only talk to
// the rest of the program through a lock-free object with static storage (POSIX
// async-signal-safety), so the handler counts and the loops poll.
volatile std::sig_atomic_t stop_signals = 0;

extern "C" void on_stop_signal(int) { stop_signals = stop_signals + 1; }
}  // namespace

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

int stop_signals_received() { return static_cast<int>(stop_signals); }

}  // namespace hookstream
