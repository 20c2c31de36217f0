// `hookstream plan PLAN.yaml --gpu H100 --budget-gib 24`: the fastest verified settings that fit.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "sim/verify/json_text.h"
#include "sim/cost/plan_search.h"
#include "sim/verify/report.h"
#include "sim/events/timeline.h"
#include "tools/cli/commands.h"

namespace hookstream {

namespace {

struct PlanArgs {
  std::string plan;
  std::string model;
  DistributedFlags distributed;
  std::string torch_version;
  std::string transformers_version;
  std::vector<std::string> set;
  std::string gpu;
  double budget_gib = -1;
  double host_budget_gib = -1;
  int top = 5;
  std::string format = "text";
  std::string output;
  std::string timeline;
};

std::string seconds(double ns) {
  char text[32];
  if (ns >= 1e9) std::snprintf(text, sizeof text, "%.3f s", ns * 1e-9);
  else if (ns >= 1e6) std::snprintf(text, sizeof text, "%.2f ms", ns * 1e-6);
  else std::snprintf(text, sizeof text, "%.2f us", ns * 1e-3);
  return text;
}

std::string describe(const PlanCandidate& c) {
  char text[256];
  std::snprintf(text, sizeof text, "step %s  %.0f tokens/s  peak %s at %s  host %s  copies hidden %.0f%%",
                seconds(c.step_ns).c_str(), c.tokens_per_second, format_bytes(c.peak_bytes).c_str(), c.peak_at.c_str(),
                format_bytes(c.host_bytes).c_str(), 100 * c.copy_hidden_fraction);
  return text;
}

std::string breakdown(const PlanCandidate& c) {
  std::string text;
  for (const auto& [category, bytes] : c.peak_breakdown) {
    if (bytes > 0) text += (text.empty() ? "" : ", ") + std::string(to_string(category)) + " " + format_bytes(bytes);
  }
  return text;
}

std::string set_flags(const std::vector<FixChange>& changes) {
  if (changes.empty()) return "(the plan as given)";
  std::string flags;
  for (const FixChange& change : changes) flags += (flags.empty() ? "" : " ") + std::string("--set ") + change.key + "=" + change.value;
  return flags;
}
std::string set_flags(const PlanCandidate& c) { return set_flags(c.changes); }

nlohmann::json changes_json(const std::vector<FixChange>& changes) {
  nlohmann::json list = nlohmann::json::array();
  for (const FixChange& change : changes) list.push_back(change_json(change));
  return list;
}

constexpr const char* kRanking =
    "ranked by predicted tokens/s (highest first), then lower device peak, then less pinned host memory, then fewer "
    "changes; only candidates within the budget that the verifier passes are listed";

nlohmann::json to_json(const PlanCandidate& c) {
  const nlohmann::json changes = changes_json(c.changes);
  nlohmann::json equivalents = nlohmann::json::array();
  for (const auto& other : c.equivalents) equivalents.push_back(changes_json(other));
  nlohmann::json peak = nlohmann::json::object();
  for (const auto& [category, bytes] : c.peak_breakdown) peak[to_string(category)] = bytes;
  return {{"changes", changes},        {"peak_breakdown", peak},        {"step_ns", c.step_ns},       {"tokens_per_second", c.tokens_per_second},
          {"peak_bytes", c.peak_bytes}, {"peak_at", c.peak_at},       {"host_bytes", c.host_bytes},
          {"copy_hidden_fraction", c.copy_hidden_fraction}, {"verdict", c.verdict}, {"equivalents", equivalents}};
}

std::string render_text(const PlanArgs& args, const PlanSearchResult& r) {
  std::string out = "plan     " + args.plan + " on " + r.device.name + " (" + format_gib(r.device.memory_bytes) +
                    "), budget " + format_gib(r.budget_bytes) +
                    (r.host_budget_bytes ? ", pinned host budget " + format_gib(*r.host_budget_bytes) : "") + "\n";
  out += "input    " + describe(r.input) + "\n         peak: " + breakdown(r.input) + "\n         verify: " + r.input.verdict + "\n";
  out += "explored " + std::to_string(r.explored) + " candidates: " + std::to_string(r.over_budget) + " over budget, " +
         (r.host_budget_bytes ? std::to_string(r.over_host_budget) + " over the host budget, " : "") +
         std::to_string(r.failed_verification) + " failed verification" +
         (r.equivalent ? ", " + std::to_string(r.equivalent) + " with the same figures as a listed one" : "") +
         (r.explored_chunked_loss ? " (logits dominate the peak: chunked cross-entropy explored)" : "") + "\n";
  if (r.best.empty()) {
    out += "none     no candidate fits the budget and passes verification\n";
    if (r.smallest) {
      out += "smallest " + describe(*r.smallest) + "\n         peak: " + breakdown(*r.smallest) + "\n         " +
             set_flags(*r.smallest) + "\n";
    }
    return out;
  }
  for (size_t i = 0; i < r.best.size(); ++i) {
    out += std::to_string(i + 1) + ". " + describe(r.best[i]) + "\n   " + set_flags(r.best[i]) + "\n";
    for (const auto& other : r.best[i].equivalents) {
      out += "   same figures (settings with no predicted effect): " + set_flags(other) + "\n";
    }
  }
  out += "(" + std::string(kRanking) + ".\n estimates: " + r.cost_source +
         ", copies at the link's bandwidth, scheduled over the stream protocol; see docs/memory-and-time.md)\n";
  return out;
}

int run_plan(const PlanArgs& args) {
  LoadOptions load;
  if (!args.model.empty()) load.model_path = args.model;
  args.distributed.apply(load);
  if (!args.torch_version.empty()) load.torch_version = args.torch_version;
  if (!args.transformers_version.empty()) load.transformers_version = args.transformers_version;
  load.set = args.set;
  PlanSearchOptions options;
  if (!args.gpu.empty()) options.gpu = args.gpu;
  if (args.budget_gib > 0) options.budget_gib = args.budget_gib;
  if (args.host_budget_gib >= 0) options.host_budget_gib = args.host_budget_gib;
  options.top = args.top;
  const PlanSource source = read_plan_source(args.plan, load);
  if (auto status = report_engine_not_modelled(source, args.format, "")) return *status;
  if (auto status = report_startup_failure(source, args.format, "")) return *status;
  const PlanSearchResult result = search_plans(source, options);
  if (!args.timeline.empty()) {
    // The input plan's step as a Chrome trace, with the memory model's device memory after each op.
    const Plan plan = parse_plan(source.yaml_text, source.source, source.options);
    const ModelStructure structure = build_model_structure(plan);
    const StepPrediction step = predict_step(plan, structure, result.device);
    TimelineOptions timeline;
    timeline.memory = memory_samples(step.memory);
    emit(chrome_trace_json(step.schedule.model, timeline), args.timeline);
  }
  if (args.format == "json") {
    nlohmann::json j = {{"schema", "hookstream.plan/1"}, {"device", result.device.name},
                        {"budget_bytes", result.budget_bytes}, {"input", to_json(result.input)},
                        {"explored", result.explored}, {"over_budget", result.over_budget},
                        {"failed_verification", result.failed_verification},
                        {"explored_chunked_loss", result.explored_chunked_loss}, {"equivalent", result.equivalent},
                        {"ranking", kRanking}, {"costs", result.cost_source}, {"best", nlohmann::json::array()}};
    if (result.host_budget_bytes) {
      j["host_budget_bytes"] = *result.host_budget_bytes;
      j["over_host_budget"] = result.over_host_budget;
    }
    for (const PlanCandidate& c : result.best) j["best"].push_back(to_json(c));
    if (result.smallest) j["smallest"] = to_json(*result.smallest);
    emit(json_text(j, 2) + "\n", args.output);
  } else {
    emit(render_text(args, result), args.output);
  }
  return result.best.empty() ? 1 : 0;
}

}  // namespace

Command register_plan_command(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand("plan", "search checkpointing, offloading, tiled-MLP, bucket and batch settings "
                                             "for the fastest verified plan that fits a memory budget");
  cmd->add_option("plan", args->plan, "training plan (axolotl-style YAML)")->required();
  cmd->add_option("--model", args->model, "HF config.json (overrides base_model)");
  args->distributed.add_to(cmd);
  cmd->add_option("--torch-version", args->torch_version,
                  "PyTorch whose DDP is modelled: 1.13 or 2.0 to 2.11 (overrides hookstream.torch_version; default 2.11)");
  cmd->add_option("--transformers-version", args->transformers_version,
                  "transformers that builds the model: 4.x builds MoE experts as one module each, 5.x as fused tensors "
                  "(overrides hookstream.transformers_version; default 5.17)");
  cmd->add_option("--set", args->set, "override a plan key: key=value (dotted keys, YAML values)");
  cmd->add_option("--gpu", args->gpu, "device name (devices/NAME.yaml, aliases such as H100) or spec file");
  cmd->add_option("--budget-gib", args->budget_gib, "device memory budget in GiB (default: the device's capacity)")
      ->check(CLI::Range(0.001, 1e6));
  cmd->add_option("--host-budget-gib", args->host_budget_gib,
                  "pinned host memory the offload slots may take, in GiB (default: no limit; e.g. the machine's free memory)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--top", args->top, "how many candidates to print")->check(CLI::Range(1, 100));
  cmd->add_option("--format", args->format, "text or json")->check(CLI::IsMember({"text", "json"}));
  cmd->add_option("-o,--output", args->output, "write the report to FILE instead of stdout");
  cmd->add_option("--timeline", args->timeline, "write the input plan's predicted step as Chrome trace JSON (Perfetto)");
  return Command{cmd, [args] { return run_plan(*args); }};
}

}  // namespace hookstream
