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

#include "sim/input_error.h"
#include "tools/cli/commands.h"


namespace {

// `replay` builds op vectors of hundreds of MB from large traces; on 4 KiB pages their first-touch
// page faults were most of its time (a 102 k GPU-op nsys trace: 2.3 s CPU, 0.55 s with huge pages,
// bench/RESULTS.md). glibc (>= 2.35) backs malloc with transparent huge pages only when the tunable
// is set before the process starts, so `replay` re-executes itself once with glibc.malloc.hugetlb=1
// added (a user's own GLIBC_TUNABLES setting of it wins). The other commands allocate little and
// are not worth the second exec; `run` and `oracle`'s memory is LibTorch's.
void reexec_with_huge_pages(char** argv) {
  if (argv[1] == nullptr || std::strcmp(argv[1], "replay") != 0) return;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.hugetlb") != nullptr) return;
  const std::string value =
      tunables != nullptr && *tunables != 0 ? std::string(tunables) + ":glibc.malloc.hugetlb=1" : "glibc.malloc.hugetlb=1";
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
                                         register_oracle_command(app), register_run_command(app)};
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
