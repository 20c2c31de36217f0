// The hookstream command line: a thin driver over the sim/, traces/ and runtime/ libraries.
// Exit codes: 0 all clear, 1 a check failed, 2 bad input, 3 an internal error.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <vector>

#include "sim/inputs/input_error.h"
#include "tools/cli/commands.h"


namespace {

// `replay` builds op vectors of hundreds of MB from large traces; on 4 KiB pages their first-touch
// page faults were most of its time (a 102 k GPU-op nsys trace: 2.3 s CPU, 0.55 s with huge pages,
// bench/RESULTS.md). glibc (>= 2.35) backs malloc with transparent huge pages only when the tunable
// is set before the process starts, so `replay` re-executes itself once with glibc.malloc.hugetlb=1
// added. It also keeps large blocks in the heap (mmap_threshold) and freed memory in the process
// (trim_threshold): the analysis stages free and allocate op vectors of tens of MB in turn, and
// with glibc's defaults each was a fresh mmap whose pages the kernel zeroed again (the same trace:
// 0.45 s -> 0.29 s wall). And it keeps every thread on the one (huge-page) heap (arena_max=1): a
// worker thread's own arena is a fresh mmap on small pages, so a stage moved to a second thread
// paid its page faults again (the same trace: 0.40 s -> 0.27 s wall with the dependency DAG built
// beside the schedule); the threads allocate a few large blocks, so sharing the arena's lock costs
// nothing measurable. tools/bench.sh runs the benchmark with the same four settings. A user's
// own GLIBC_TUNABLES setting of any of them wins. The other commands allocate little and are not
// worth the second exec; `run` and `oracle`'s memory is LibTorch's.
void reexec_with_huge_pages(char** argv) {
  if (argv[1] == nullptr || std::strcmp(argv[1], "replay") != 0) return;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  const std::string current = tunables != nullptr ? tunables : "";
  std::string value = current;
  for (const char* setting : {"glibc.malloc.hugetlb=1", "glibc.malloc.mmap_threshold=4294967295",
                              "glibc.malloc.trim_threshold=4294967295", "glibc.malloc.arena_max=1"}) {
    const std::string key(setting, std::strchr(setting, '=') + 1);  // "glibc.malloc.x="
    if (current.find(key) != std::string::npos) continue;
    value += (value.empty() ? "" : ":") + std::string(setting);
  }
  if (value == current) return;  // all set: this is the re-executed process (or the user's choice)
  if (setenv("GLIBC_TUNABLES", value.c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);  // returns only on failure: then carry on as we are
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hookstream;
  reexec_with_huge_pages(argv);
  CLI::App app{"hookstream: verify DDP gradient-hook and CUDA-stream schedules before spending GPU time"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "hookstream 0.1.0");
  const std::vector<Command> commands = {register_verify_command(app), register_simulate_command(app),
                                         register_plan_command(app), register_replay_command(app),
                                         register_oracle_command(app), register_run_command(app),
                                         register_inspect_command(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "hookstream: error: " << e.what() << "\n";
    return 2;
  }
  for (const Command& command : commands) {
    if (command.app && command.app->parsed()) return run_reporting_errors(command.run);
  }
  return 2;
}
