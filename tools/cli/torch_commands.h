// The subcommands that need LibTorch (`run`, `oracle`) live in a module of their own,
// libhookstream_torch_commands.so (tools/cli/torch/), which the CLI loads only when one of them
// runs: linking LibTorch into the CLI cost every other command ~0.5 s of dynamic linking and
// operator registration at start-up (do_lookup_x, OperatorEntry::updateDispatchTableEntry_), 100x
// the work of `hookstream verify` on a 70B plan. Their options are parsed here, torch-free, into
// the structs below and handed over.
#pragma once

#include <string>
#include <vector>

namespace hookstream {

struct RunArgs {
  std::string plan;
  int nproc = 0;  // 0: the plan's world size
  int steps = 0;  // 0: max_steps, else hookstream.iterations
  bool force = false;
  bool apply_fix = false;
  std::string model;
  std::vector<std::string> set;
  std::string device;  // empty: cuda when a GPU is visible, else cpu
  std::string checkpoint_dir;
  int checkpoint_every = 0;
  bool resume = false;
  std::string trace;
  std::string json;
  std::string inject_fault;
  int timeout_seconds = 300;
  // From the launcher to its ranks: the fix it verified and applied (already in --set), for the summary.
  std::vector<std::string> applied_fix;
  bool no_oom_fallback = false;
  // From the launcher to its ranks: where a rank that runs out of device memory writes what it saw
  // (PATH.rank{r}.json), for the fallback.
  std::string oom_report;
};

struct OracleArgs {
  std::string plan;
  std::string model;
  int world_size = -1;  // -1: not given
  std::vector<std::string> set;
  std::string format = "text";
  int timeout_seconds = 120;
};

// The module's entry points (extern "C": looked up by name). Each reports its own errors the way
// main() does (run_reporting_errors) and returns the exit code.
extern "C" int hookstream_run_main(const void* run_args);        // a RunArgs
extern "C" int hookstream_oracle_main(const void* oracle_args);  // an OracleArgs

// Loads the module (HOOKSTREAM_TORCH_COMMANDS, else the one beside the executable, else
// ../lib/hookstream/ from it: the build tree and an installed prefix) and calls `entry`.
// A module that cannot be loaded is an error naming it (exit 2).
int call_torch_command(const char* entry, const void* args);

}  // namespace hookstream
