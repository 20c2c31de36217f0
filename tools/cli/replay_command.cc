// `hookstream replay TRACE...`: import real GPU traces (nsys SQLite, Kineto JSON) and report GPU
// utilisation, copy/compute and NCCL/compute overlap, pageable async copies and synchronising
// calls. Findings are reported, not failures: exit 0 when the analysis ran, 2 on bad input.
#include <CLI/CLI.hpp>
#include <memory>

#include "tools/cli/commands.h"
#include "traces/replay_report.h"
#include "traces/trace_loader.h"

namespace hookstream {

namespace {
struct ReplayArgs {
  std::vector<std::string> traces;
  std::string format = "text";
  std::string output;
};

int run_replay(const ReplayArgs& args) {
  const EventModel model = load_traces(args.traces);
  const ReplayReport report = analyse_replay(model);
  if (args.format == "json") {
    emit(render_replay_json(report).dump(2) + "\n", args.output);
  } else {
    emit(render_replay_text(report), args.output);
  }
  return 0;
}
}  // namespace

Command register_replay_command(CLI::App& app) {
  auto args = std::make_shared<ReplayArgs>();
  CLI::App* cmd = app.add_subcommand("replay", "analyse recorded GPU traces (nsys SQLite export, Kineto JSON)");
  cmd->add_option("traces", args->traces, "trace files, one per rank (.sqlite, .json, .json.gz)")->required();
  cmd->add_option("--format", args->format, "text or json")->check(CLI::IsMember({"text", "json"}));
  cmd->add_option("-o,--output", args->output, "write the report to FILE instead of stdout");
  return Command{cmd, [args] { return run_replay(*args); }};
}

}  // namespace hookstream
