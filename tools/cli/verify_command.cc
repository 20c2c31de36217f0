// `hookstream verify PLAN.yaml`: the DDP hook-schedule verifier.
#include <CLI/CLI.hpp>
#include <memory>
#include <unistd.h>

#include "sim/report.h"
#include "sim/verify.h"
#include "tools/cli/commands.h"

namespace hookstream {

namespace {
struct VerifyArgs {
  std::string plan;
  std::string model;
  int world_size = -1;  // -1: not given
  std::vector<std::string> set;
  std::string format = "text";
  std::string output;
  bool no_colour = false;
};

int run_verify(const VerifyArgs& args) {
  LoadOptions load;
  if (!args.model.empty()) load.model_path = args.model;
  if (args.world_size != -1) load.world_size = args.world_size;
  load.set = args.set;
  const VerifyResult result = verify_plan(read_plan_source(args.plan, load));
  if (args.format == "json") {
    emit(render_json(result).dump(2) + "\n", args.output);
  } else {
    const bool colour = args.output.empty() && !args.no_colour && isatty(STDOUT_FILENO) != 0;
    emit(render_text(result, colour), args.output);
  }
  return result.ok() ? 0 : 1;
}
}  // namespace

Command register_verify_command(CLI::App& app) {
  auto args = std::make_shared<VerifyArgs>();
  CLI::App* cmd = app.add_subcommand("verify", "simulate DDP's Reducer for every rank and iteration of a plan");
  cmd->add_option("plan", args->plan, "training plan (axolotl-style YAML)")->required();
  cmd->add_option("--model", args->model, "HF config.json (overrides base_model)");
  cmd->add_option("--world-size", args->world_size, "number of ranks (overrides hookstream.world_size)");
  cmd->add_option("--set", args->set, "override a plan key: key=value (dotted keys, YAML values)");
  cmd->add_option("--format", args->format, "text or json")->check(CLI::IsMember({"text", "json"}));
  cmd->add_option("-o,--output", args->output, "write the report to FILE instead of stdout");
  cmd->add_flag("--no-colour,--no-color", args->no_colour, "never colour the text report");
  return Command{cmd, [args] { return run_verify(*args); }};
}

}  // namespace hookstream
