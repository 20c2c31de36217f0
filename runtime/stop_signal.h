// SIGINT/SIGTERM as a request to stop: `hookstream run`'s launcher forwards them to its ranks, and
// every rank stops at the next step boundary (all ranks agree on which, see trainer.cc).
#pragma once

namespace hookstream {

// Installs handlers for SIGINT and SIGTERM that only record the request (SA_RESTART, so blocking
// reads and collectives carry on).
void install_stop_handlers();
// How many stop signals arrived since install_stop_handlers().
int stop_signals_received();

// The exit status of a run stopped by a signal, as shells report SIGINT (128 + 2).
constexpr int kInterruptedExitCode = 130;

}  // namespace hookstream
