// `hookstream verify PLAN.yaml`: every check of a plan: the DDP hook schedule, races in its offload
// stream protocol, `oom` against its GPU (sim/verify/simulation_report.h), with verified fixes.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <unistd.h>

#include <iostream>

#include "sim/inputs/axolotl_config/config_patch.h"
#include "sim/inputs/input_error.h"
#include "sim/verify/json_text.h"
#include "sim/inputs/model_source/checkpoint_layout.h"
#include "sim/inputs/model_source/hf_hub.h"
#include "sim/verify/simulation_report.h"
#include "tools/cli/commands.h"

namespace hookstream {

namespace {
struct VerifyArgs {
  std::string plan;
  std::string model;
  DistributedFlags distributed;
  std::string torch_version;
  std::string transformers_version;
  std::vector<std::string> set;
  std::string format = "text";
  std::string output;
  bool no_colour = false;
  std::string write_fixed;
  int fix_number = 1;
};

// --write-fixed: the user's config with fix N (numbered as the JSON's `fixes`: DDP fixes, then
// stream, then memory) applied to its text, written atomically.
void write_fixed_config(const SimulationReport& report, const VerifyArgs& args) {
  std::vector<const VerifiedFix*> fixes;
  for (const auto* list : {&report.ddp.fixes, &report.stream_fixes, &report.memory_fixes}) {
    for (const VerifiedFix& fix : *list) fixes.push_back(&fix);
  }
  if (fixes.empty()) {
    std::cerr << "hookstream: --write-fixed: " << (report.ok() ? "the plan passes" : "no verified fix")
              << ", nothing written to " << args.write_fixed << "\n";
    return;
  }
  if (args.fix_number < 1 || args.fix_number > static_cast<int>(fixes.size())) {
    throw InputError("--fix", "expected a fix number in [1, " + std::to_string(fixes.size()) + "], got " + std::to_string(args.fix_number));
  }
  // --write-fixed writes one file; a fix that also edits the DeepSpeed JSON or the accelerate
  // config that holds a setting is applied by its patch, which edits both where they are.
  const std::vector<ConfigFileEdit> edits = fix_file_edits(report.ddp.source_text, args.plan, fixes[args.fix_number - 1]->changes);
  for (const ConfigFileEdit& edit : edits) {
    if (edit.path != args.plan) {
      const bool accelerate = !args.distributed.accelerate_config.empty() && edit.path == args.distributed.accelerate_config;
      throw InputError("--fix", "fix " + std::to_string(args.fix_number) + " edits " + edit.path +
                                    (accelerate ? ", the accelerate config" : ", the DeepSpeed config the plan names") +
                                    ", which --write-fixed does not write; apply the fix's patch with `patch -p0` instead");
    }
  }
  emit(apply_changes_to_config(report.ddp.source_text, fixes[args.fix_number - 1]->changes), args.write_fixed);
}

int run_verify(const VerifyArgs& args) {
  LoadOptions load;
  if (!args.model.empty()) load.model_path = args.model;
  args.distributed.apply(load);
  if (!args.torch_version.empty()) load.torch_version = args.torch_version;
  if (!args.transformers_version.empty()) load.transformers_version = args.transformers_version;
  load.set = args.set;
  SimulateOptions options;
  options.races_shown = 3;
  const PlanSource source = read_plan_source(args.plan, load);
  if (auto status = report_engine_not_modelled(source, args.format, args.output)) {
    if (!args.write_fixed.empty()) std::cerr << "hookstream: --write-fixed: the plan was not verified, nothing written to " << args.write_fixed << "\n";
    return *status;
  }
  if (auto status = report_startup_failure(source, args.format, args.output)) {
    if (!args.write_fixed.empty()) std::cerr << "hookstream: --write-fixed: the plan was not verified, nothing written to " << args.write_fixed << "\n";
    return *status;
  }
  const SimulationReport report = simulate_plan(source, args.plan, options);
  const std::string mismatch =
      checkpoint_mismatch_warning(report.ddp.structure, report.ddp.plan.model, model_dir_of(report.ddp.plan.model.source));
  if (!mismatch.empty()) std::cerr << mismatch << "\n";
  // Before the report: a bad --fix is one line and nothing else.
  if (!args.write_fixed.empty()) write_fixed_config(report, args);
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
  args->distributed.add_to(cmd);
  cmd->add_option("--torch-version", args->torch_version,
                  "PyTorch whose DDP is modelled: 1.13 or 2.0 to 2.11 (overrides hookstream.torch_version; default 2.11)");
  cmd->add_option("--transformers-version", args->transformers_version,
                  "transformers that builds the model: 4.x builds MoE experts as one module each, 5.x as fused tensors "
                  "(overrides hookstream.transformers_version; default 5.17)");
  cmd->add_option("--set", args->set, "override a plan key: key=value (dotted keys, YAML values)");
  cmd->add_option("--format", args->format, "text or json")->check(CLI::IsMember({"text", "json"}));
  cmd->add_option("-o,--output", args->output, "write the report to FILE instead of stdout");
  cmd->add_flag("--no-colour,--no-color", args->no_colour, "never colour the text report");
  cmd->add_option("--write-fixed", args->write_fixed, "write the plan file with a verified fix applied to FILE (atomically)");
  cmd->add_option("--fix", args->fix_number, "which fix --write-fixed applies, numbered as the JSON's fixes (default 1)");
  return Command{cmd, [args] { return run_verify(*args); }};
}

}  // namespace hookstream
