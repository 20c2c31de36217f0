// `hookstream oracle PLAN.yaml`: its options. The command itself is in the LibTorch commands
// module, tools/cli/torch/oracle_main.cc (why: tools/cli/torch_commands.h).
#include <CLI/CLI.hpp>

#include <memory>

#include "tools/cli/commands.h"
#include "tools/cli/torch_commands.h"

namespace hookstream {

#ifndef HOOKSTREAM_WITH_TORCH
Command register_oracle_command(CLI::App&) { return {}; }
#else
Command register_oracle_command(CLI::App& app) {
  auto args = std::make_shared<OracleArgs>();
  CLI::App* cmd = app.add_subcommand("oracle", "run the plan's structure under the real c10d Reducer (tiny models, CPU)");
  cmd->add_option("plan", args->plan, "training plan (axolotl-style YAML)")->required();
  cmd->add_option("--model", args->model, "HF config.json (overrides base_model)");
  cmd->add_option("--world-size", args->world_size, "number of ranks (overrides hookstream.world_size)");
  cmd->add_option("--set", args->set, "override a plan key: key=value");
  cmd->add_option("--format", args->format, "text or json")->check(CLI::IsMember({"text", "json"}));
  cmd->add_option("--timeout", args->timeout_seconds, "seconds before the workers are stopped");
  return Command{cmd, [args] { return call_torch_command("hookstream_oracle_main", args.get()); }};
}
#endif

}  // namespace hookstream
