// `hookstream verify PLAN.yaml`: every check of a plan: the DDP hook schedule, races in its offload
// stream protocol, `oom` against its GPU (sim/simulation_report.h), with verified fixes.
#include <CLI/CLI.hpp>
#include <memory>
#include <unistd.h>

#include "sim/json_text.h"
#include "sim/simulation_report.h"
#include "tools/cli/commands.h"

namespace hookstream {

namespace {
struct VerifyArgs {
  std::string plan;
  std::string model;
  int world_size = -1;  // -1: not given
  std::string torch_version;
  std::vector<std::string> set;
  std::string format = "text";
  std::string output;
  bool no_colour = false;
};

int run_verify(const VerifyArgs& args) {
  LoadOptions load;
  if (!args.model.empty()) load.model_path = args.model;
  if (args.world_size != -1) load.world_size = args.world_size;
  if (!args.torch_version.empty()) load.torch_version = args.torch_version;
  load.set = args.set;
  SimulateOptions options;
  options.races_shown = 3;
  const SimulationReport report = simulate_plan(read_plan_source(args.plan, load), args.plan, options);
  if (args.format == "json") {
    emit(json_text(render_verify_json(report), 2) + "\n", args.output);
  } else {
    const bool colour = args.output.empty() && !args.no_colour && isatty(STDOUT_FILENO) != 0;
    emit(render_simulation_text(report, options, colour), args.output);
  }
  return report.ok() ? 0 : 1;
}
}  // namespace

Command register_verify_command(CLI::App& app) {
  auto args = std::make_shared<VerifyArgs>();
  CLI::App* cmd = app.add_subcommand("verify", "check a plan: DDP's Reducer for every rank and iteration, stream races, memory against its GPU");
  cmd->add_option("plan", args->plan, "training plan (axolotl-style YAML)")->required();
  cmd->add_option("--model", args->model, "HF config.json (overrides base_model)");
  cmd->add_option("--world-size", args->world_size, "number of ranks (overrides hookstream.world_size)");
  cmd->add_option("--torch-version", args->torch_version,
                  "PyTorch whose DDP is modelled: 1.13 or 2.0 to 2.11 (overrides hookstream.torch_version; default 2.11)");
  cmd->add_option("--set", args->set, "override a plan key: key=value (dotted keys, YAML values)");
  cmd->add_option("--format", args->format, "text or json")->check(CLI::IsMember({"text", "json"}));
  cmd->add_option("-o,--output", args->output, "write the report to FILE instead of stdout");
  cmd->add_flag("--no-colour,--no-color", args->no_colour, "never colour the text report");
  return Command{cmd, [args] { return run_verify(*args); }};
}

}  // namespace hookstream
