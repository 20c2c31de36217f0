// `hookstream simulate PLAN.yaml`: DDP verdicts plus the CUDA-stream schedule of one step checked for
// races (sim/verify/simulation_report.h). Exit codes: 0 clean, 1 a finding, 2 bad input.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>

#include "sim/verify/json_text.h"
#include "sim/inputs/model_source/checkpoint_layout.h"
#include "sim/inputs/model_source/hf_hub.h"
#include "sim/cost/memory_model.h"
#include "sim/verify/simulation_report.h"
#include "sim/events/timeline.h"
#include "tools/cli/commands.h"

namespace hookstream {

namespace {
struct SimulateArgs {
  std::string plan;
  std::string model;
  DistributedFlags distributed;
  std::string torch_version;
  std::string transformers_version;
  std::vector<std::string> set;
  std::string protocol;
  bool all_ranks = false;
  int devices_per_process = 1;
  std::string format = "text";
  std::string output;
  std::string timeline;
};

int run_simulate(const SimulateArgs& args) {
  LoadOptions load;
  if (!args.model.empty()) load.model_path = args.model;
  args.distributed.apply(load);
  if (!args.torch_version.empty()) load.torch_version = args.torch_version;
  if (!args.transformers_version.empty()) load.transformers_version = args.transformers_version;
  load.set = args.set;
  SimulateOptions options;
  options.protocol = args.protocol;
  options.expansion.all_ranks = args.all_ranks;
  options.expansion.devices_per_process = args.devices_per_process;
  const PlanSource source = read_plan_source(args.plan, load);
  if (auto status = report_engine_not_modelled(source, args.format, args.output)) return *status;
  if (auto status = report_startup_failure(source, args.format, args.output)) return *status;
  const SimulationReport report = simulate_plan(source, args.plan, options);
  const std::string mismatch =
      checkpoint_mismatch_warning(report.ddp.structure, report.ddp.plan.model, model_dir_of(report.ddp.plan.model.source));
  if (!mismatch.empty()) std::cerr << mismatch << "\n";
  if (!args.timeline.empty()) {
    // Rank 0's step as the time model scheduled it on the plan's GPU (the protocol and buckets of
    // the race check): one track per stream, flows for event waits, and the memory model's device
    // memory after every op as a counter (open in Perfetto).
    TimelineOptions timeline;
    timeline.memory = memory_samples(report.memory.estimate);
    emit(chrome_trace_json(report.time.schedule.model, timeline), args.timeline);
  }
  if (args.format == "json") {
    emit(json_text(render_simulation_json(report, options), 2) + "\n", args.output);
  } else {
    emit(render_simulation_text(report, options), args.output);
  }
  return report.ok() ? 0 : 1;
}
}  // namespace

Command register_simulate_command(CLI::App& app) {
  auto args = std::make_shared<SimulateArgs>();
  CLI::App* cmd = app.add_subcommand("simulate", "simulate a plan: DDP hook verdicts, CUDA-stream races, memory per op, step time and critical path");
  cmd->add_option("plan", args->plan, "training plan (axolotl-style YAML)")->required();
  cmd->add_option("--protocol", args->protocol, "offload stream protocol: a name in protocols/ or a .yaml path (overrides hookstream.offload_protocol)");
  cmd->add_option("--model", args->model, "HF config.json (overrides base_model)");
  args->distributed.add_to(cmd);
  cmd->add_option("--torch-version", args->torch_version,
                  "PyTorch whose DDP is modelled: 1.13 or 2.0 to 2.11 (overrides hookstream.torch_version; default 2.11)");
  cmd->add_option("--transformers-version", args->transformers_version,
                  "transformers that builds the model: 4.x builds MoE experts as one module each, 5.x as fused tensors "
                  "(overrides hookstream.transformers_version; default 5.17)");
  cmd->add_option("--set", args->set, "override a plan key: key=value (dotted keys, YAML values)");
  cmd->add_flag("--all-ranks", args->all_ranks, "expand every rank, not only rank 0");
  cmd->add_option("--devices-per-process", args->devices_per_process, "devices one process drives (default 1)")->check(CLI::Range(1, 8));
  cmd->add_option("--format", args->format, "text or json")->check(CLI::IsMember({"text", "json"}));
  cmd->add_option("-o,--output", args->output, "write the report to FILE instead of stdout");
  cmd->add_option("--timeline", args->timeline, "write the simulated step as a Chrome trace JSON (opens in Perfetto)");
  return Command{cmd, [args] { return run_simulate(*args); }};
}

}  // namespace hookstream
