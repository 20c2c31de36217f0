#include "sim/simulation_report.h"

#include <filesystem>
#include <map>

#include "sim/report.h"

namespace hookstream {

SimulationReport simulate_plan(const PlanSource& source, const std::string& plan_path, const SimulateOptions& options) {
  SimulationReport report;
  report.ddp = verify_plan(source);
  const std::string name = options.protocol.empty() ? report.ddp.plan.offload_protocol_name() : options.protocol;
  const std::string plan_dir = std::filesystem::path(plan_path).parent_path().string();
  StreamSection& streams = report.streams;
  streams.protocol_file = resolve_stream_protocol(name, plan_dir);
  streams.protocol = load_stream_protocol_file(streams.protocol_file);
  ExpansionOptions expansion = options.expansion;
  // The Reducer's buckets as the DDP simulation saw them: rebuilt after the first iteration.
  const DdpSimulation& ddp = report.ddp.simulation;
  const bool rebuilt = expansion.iteration > 0 && ddp.rebuilt_buckets.has_value();
  if (!expansion.buckets && (rebuilt || !ddp.initial_buckets.buckets.empty())) {
    expansion.buckets = rebuilt ? &*ddp.rebuilt_buckets : &ddp.initial_buckets;
  }
  // One representative per rank class: ranks with the same per-rank plan issue the same ops.
  if (expansion.ranks.empty() && !expansion.all_ranks) {
    for (const std::vector<int>& members : ddp.rank_classes) expansion.ranks.push_back(members.front());
  }
  streams.step = expand_step(report.ddp.plan, report.ddp.structure, streams.protocol, expansion);
  streams.races = check_races(streams.step, options.races);
  return report;
}

namespace {

nlohmann::json op_json(const EventModel& model, int index) {
  const Op& op = model.ops[index];
  nlohmann::json j = {{"index", index},
                      {"name", op.name},
                      {"kind", to_string(op.kind)},
                      {"rank", op.rank},
                      {"stream", op.stream >= 0 ? model.streams[op.stream].name : "host"},
                      {"device", op.stream >= 0 ? model.streams[op.stream].device : -1},
                      {"iteration", op.iteration},
                      {"micro_step", op.micro_step},
                      {"phase", op.phase}};
  j["layer"] = op.layer >= 0 ? nlohmann::json(op.layer) : nlohmann::json(nullptr);
  return j;
}

// Two races share a pattern when they differ only in layer, micro-step, rank and slot: the same kind,
// buffer family, op kinds, streams and phases, and the same layer distance.
std::string race_pattern(const EventModel& model, const Race& race) {
  const Op& a = model.ops[race.earlier_op];
  const Op& b = model.ops[race.later_op];
  const std::string& buffer = model.buffers[race.buffer].name;
  auto side = [&](const Op& op) {
    return std::string(to_string(op.kind)) + "/" + (op.stream >= 0 ? model.streams[op.stream].name : "host") + "/" + op.phase;
  };
  return race.kind() + "|" + buffer.substr(0, buffer.find('[')) + "|" + side(a) + "|" + side(b) + "|" +
         std::to_string(a.layer - b.layer);
}

}  // namespace

nlohmann::json stream_section_json(const StreamSection& section) {
  const EventModel& model = section.step;
  nlohmann::json races = nlohmann::json::array();
  for (const Race& race : section.races.races) {
    const Buffer& buffer = model.buffers[race.buffer];
    races.push_back({{"kind", race.kind()},
                     {"buffer", {{"name", buffer.name}, {"memory", to_string(buffer.memory)}, {"rank", buffer.rank}, {"device", buffer.device}}},
                     {"bytes", {race.offset, race.offset + race.bytes}},
                     {"first", op_json(model, race.earlier_op)},
                     {"second", op_json(model, race.later_op)},
                     {"fix", {{"text", race.fix.text}, {"checked", race.fix.checked}, {"verified", race.fix.verified}}}});
  }
  return {{"ok", section.ok()},
          {"protocol", {{"name", section.protocol.name}, {"file", section.protocol_file}, {"description", section.protocol.description}}},
          {"ops", model.ops.size()},
          {"race_count", section.races.race_count},
          {"races", races}};
}

nlohmann::json render_simulation_json(const SimulationReport& report) {
  return {{"schema", "hookstream.simulate/1"},
          {"ok", report.ok()},
          {"ddp", render_json(report.ddp)},
          {"streams", stream_section_json(report.streams)}};
}

std::string render_simulation_text(const SimulationReport& report, const SimulateOptions& options) {
  std::string text = render_text(report.ddp, false);
  const StreamSection& streams = report.streams;
  text += "\nstreams  protocol " + streams.protocol.name + " (" + streams.protocol_file + "): " +
          std::to_string(streams.step.ops.size()) + " ops in one step\n";
  if (streams.ok()) {
    text += "OK       no race: every conflicting access pair is ordered by happens-before\n";
    return text;
  }
  text += "FAIL     " + std::to_string(streams.races.race_count) + " race" + (streams.races.race_count == 1 ? "" : "s") + "\n";
  // The same protocol mistake races at every layer, micro-step and rank: show each pattern once.
  std::map<std::string, size_t> repeats;
  std::vector<const Race*> firsts;
  for (const Race& race : streams.races.races) {
    if (repeats[race_pattern(streams.step, race)]++ == 0) firsts.push_back(&race);
  }
  const size_t shown = std::min(options.races_shown, firsts.size());
  size_t listed = 0;
  for (size_t i = 0; i < shown; ++i) {
    const size_t same = repeats[race_pattern(streams.step, *firsts[i])];
    listed += same;
    text += "  " + describe_race(streams.step, *firsts[i]);
    if (same > 1) text += "  the same pattern races " + std::to_string(same - 1) + " more time" + (same == 2 ? "" : "s") + " (other layers, micro-steps or ranks)\n";
  }
  if (streams.races.race_count > listed) {
    text += "  ... and " + std::to_string(streams.races.race_count - listed) + " more (--format json lists them)\n";
  }
  return text;
}

}  // namespace hookstream
