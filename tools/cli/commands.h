// The CLI's subcommands. Each lives in its own file and registers itself on the app; `run` is called
// when that subcommand was parsed and returns the exit code (0 clear, 1 a check failed, 2 bad input).
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "sim/inputs/plan.h"
#include "sim/verify/verify.h"

namespace CLI {
class App;
}

namespace hookstream {

struct Command {
  CLI::App* app = nullptr;   // nullptr: not available in this build
  std::function<int()> run;
};

Command register_verify_command(CLI::App& app);
Command register_oracle_command(CLI::App& app);    // needs LibTorch
Command register_simulate_command(CLI::App& app);  // streams, races, memory, time (issue 3)
Command register_plan_command(CLI::App& app);      // plan search (issue 3)
Command register_replay_command(CLI::App& app);    // trace import and analysis (issue 4)
Command register_run_command(CLI::App& app);       // training (issue 5), needs LibTorch
Command register_inspect_command(CLI::App& app);   // parameters as DDP sees them (issue 19)

// Writes `text` to stdout, or atomically to `path` (temporary file + rename: a failed run never
// leaves a partial file).
void emit(const std::string& text, const std::string& path);

// Where the world size and engine come from, on every plan-taking command: --world-size, torchrun's
// --nnodes/--nproc-per-node, --accelerate-config FILE.
struct DistributedFlags {
  int world_size = -1;  // -1: not given
  int nnodes = -1;
  int nproc_per_node = -1;
  std::string accelerate_config;
  void add_to(CLI::App* cmd);
  void apply(LoadOptions& load) const;
};

// A plan that would run on an engine hookstream does not model (FSDP, DeepSpeed, tensor/context
// parallelism) gets the engine_not_modelled report (docs/verify-json.md) and exit status 1;
// nullopt for a DDP plan, which the command then checks.
std::optional<int> report_engine_not_modelled(const PlanSource& source, const std::string& format, const std::string& output);
// When the run would stop before its first step with the library's own error (StartupError, e.g.
// PEFT's "Target modules ... not found in the base model"), prints that verdict and returns 1.
std::optional<int> report_startup_failure(const PlanSource& source, const std::string& format, const std::string& output);

// Runs a subcommand: InputError and filesystem errors print one line and return 2, any other
// exception "internal error" and 3.
int run_reporting_errors(const std::function<int()>& body);

}  // namespace hookstream
