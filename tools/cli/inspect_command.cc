// `hookstream inspect PLAN.yaml`: the model's parameters as DDP orders them, with shape, dtype,
// trainable, tied, quantized, bucket and the keys that decided each; totals; and the structure
// checked against the checkpoint of the model's Hugging Face folder (sim/inspect/inspect_report.h).
// Exit codes: 0, 1 the structure differs from the checkpoint, 2 bad input.
#include <CLI/CLI.hpp>
#include <memory>

#include "sim/inspect/inspect_report.h"
#include "sim/verify/json_text.h"
#include "sim/inputs/plan.h"
#include "tools/cli/commands.h"

namespace hookstream {

namespace {
struct InspectArgs {
  std::string plan;
  std::string model;
  int world_size = -1;
  std::vector<std::string> set;
  std::string format = "text";
  std::string output;
};

int run_inspect(const InspectArgs& args) {
  LoadOptions load;
  if (!args.model.empty()) load.model_path = args.model;
  if (args.world_size != -1) load.world_size = args.world_size;
  load.set = args.set;
  const Plan plan = load_plan(args.plan, load);
  const InspectReport report = inspect_plan(plan);
  if (args.format == "json") {
    emit(render_inspect_json(report).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", args.output);
  } else {
    emit(render_inspect_text(report), args.output);
  }
  return report.ok() ? 0 : 1;
}
}  // namespace

Command register_inspect_command(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* cmd = app.add_subcommand("inspect", "list the model's parameters as DDP sees them: order, shape, dtype, trainable, bucket, and the keys that decided each");
  cmd->add_option("plan", args->plan, "training plan (axolotl-style YAML)")->required();
  cmd->add_option("--model", args->model, "HF config.json, a model folder or a cached repo id (overrides base_model)");
  cmd->add_option("--world-size", args->world_size, "number of ranks (overrides hookstream.world_size)");
  cmd->add_option("--set", args->set, "override a plan key: key=value (dotted keys, YAML values)");
  cmd->add_option("--format", args->format, "text or json")->check(CLI::IsMember({"text", "json"}));
  cmd->add_option("-o,--output", args->output, "write the report to FILE instead of stdout");
  return Command{cmd, [args] { return run_inspect(*args); }};
}

}  // namespace hookstream
