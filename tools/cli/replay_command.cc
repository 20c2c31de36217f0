// `hookstream replay TRACE...`: import real GPU traces (nsys SQLite, Kineto JSON) and report GPU
// utilisation, copy/compute and NCCL/compute overlap, pageable async copies and synchronising
// calls; then one step of the trace: its critical path, races between annotated buffer accesses,
// and on request the plan comparison (--plan, --calibrate), what-if predictions (--what-if) and a
// Perfetto timeline with the findings (--timeline). Findings are reported, not failures: exit 0
// when the analysis ran, 2 on bad input.
#include <CLI/CLI.hpp>
#include <limits>
#include <memory>
#include <optional>

#include "sim/inputs/input_error.h"
#include "sim/verify/json_text.h"
#include "sim/inputs/plan.h"
#include "tools/cli/commands.h"
#include "traces/replay_report.h"
#include "traces/step_analysis.h"
#include "traces/trace_loader.h"

namespace hookstream {

namespace {
struct ReplayArgs {
  std::vector<std::string> traces;
  std::string format = "text";
  std::string output;
  std::string plan;
  std::vector<std::string> set;
  std::string calibrate;
  int step = -1;
  std::vector<std::string> what_if;
  std::string timeline;
  int critical_segments = 20;
};

int run_replay(const ReplayArgs& args) {
  // Every input is read and checked before anything is written.
  std::optional<Plan> plan;
  if (!args.plan.empty()) {
    LoadOptions load;
    load.set = args.set;
    plan = load_plan(args.plan, load);
  }
  if (!args.calibrate.empty() && !plan) throw InputError("--calibrate", "needs --plan PLAN.yaml (the ops to calibrate)");
  StepAnalysisOptions options;
  options.selection.step = args.step;
  options.critical_segments_shown = static_cast<size_t>(args.critical_segments);
  options.plan = plan ? &*plan : nullptr;
  for (const std::string& spec : args.what_if) options.what_if.push_back(parse_what_if(spec));
  // Not freed: the process exits after the report is written, and taking apart a long trace's
  // ~10^5-10^6 ops one by one would add ~5% to the command's time for nothing (clang's -disable-free
  // does the same for its ASTs). The pointer is released only once the report is out.
  std::vector<TraceContents> contents;  // what the files held besides their ops
  auto owned = std::make_unique<TraceAnalysis>(analyse_trace(load_traces(args.traces, &contents), options));
  owned->report.contents = std::move(contents);
  const TraceAnalysis& analysis = *owned;
  const ReplayReport& report = analysis.report;
  const StepAnalysis& step = analysis.step;
  if (!args.calibrate.empty()) emit(json_text(step.plan->calibration, 2) + "\n", args.calibrate);
  if (!args.timeline.empty()) emit(recorded_step_timeline(step.step, step.races), args.timeline);
  if (args.format == "json") {
    nlohmann::json j = render_replay_json(report);
    j["step"] = render_step_json(step, options);
    emit(json_text(j, 2) + "\n", args.output);
  } else {
    emit(render_replay_text(report) + render_step_text(step, options), args.output);
  }
  (void)owned.release();
  return 0;
}
}  // namespace

Command register_replay_command(CLI::App& app) {
  auto args = std::make_shared<ReplayArgs>();
  CLI::App* cmd = app.add_subcommand("replay", "analyse recorded GPU traces (nsys SQLite export, Kineto JSON)");
  cmd->add_option("traces", args->traces, "trace files, one per rank (.sqlite, .json, .json.gz)")->required();
  cmd->add_option("--format", args->format, "text or json")->check(CLI::IsMember({"text", "json"}));
  cmd->add_option("-o,--output", args->output, "write the report to FILE instead of stdout");
  cmd->add_option("--plan", args->plan, "compare the step with this plan's simulated step (op classes, layers)");
  cmd->add_option("--set", args->set, "override a key of --plan: key=value (dotted keys, YAML values)")
      ->allow_extra_args(false);
  cmd->add_option("--calibrate", args->calibrate, "write the measured durations as a calibration file (needs --plan)");
  cmd->add_option("--step", args->step, "the step to analyse (hookstream:step:N or ProfilerStep#N; default: the last)")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()));
  cmd->add_option("--what-if", args->what_if,
                  "predict the step time after a change: second_reload_buffer, copy_to_side_stream, bucket_cap_mb=N, "
                  "remove_host_sync[=API] (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--timeline", args->timeline, "write the step as a Chrome trace JSON with the findings marked (Perfetto)");
  cmd->add_option("--critical-segments", args->critical_segments,
                  "critical-path segments to list in the report, first to last (default 20; 0: all)")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()));
  return Command{cmd, [args] { return run_replay(*args); }};
}

}  // namespace hookstream
