// hookstream-oracle-worker: a thin driver over run_worker (runtime/worker.h); the parent
// (run_oracle, runtime/oracle.h) spawns one per rank plus one --reference.
#include <sys/prctl.h>

#include <csignal>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

#include "runtime/worker.h"

int main(int argc, char** argv) {
  // Die with the parent: no orphaned ranks waiting in a collective.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  int code = 0;
  try {
    const std::vector<std::string> args(argv + 1, argv + argc);
    code = hookstream::run_worker(hookstream::parse_worker_arguments(args));
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "hookstream-oracle-worker: %s\n", e.what());
    code = 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hookstream-oracle-worker: %s\n", e.what());
    code = 3;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  // Skip destructors: after a Reducer error, ProcessGroupGloo's destructor waits for collectives
  // the other ranks will never join. The report is already on disk.
  _exit(code);
}
