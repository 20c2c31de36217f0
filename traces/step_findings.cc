#include "traces/step_findings.h"

#include <algorithm>
#include <map>

#include "sim/verify/json_text.h"
#include "sim/events/timeline.h"
#include "traces/analyses/device_utilisation.h"
#include "traces/analyses/gpu_intervals.h"
#include "traces/analyses/memory_bandwidth.h"
#include "traces/analyses/stream_idle_breakdown.h"

namespace hookstream {

StepRaceReport check_step_races(const RecordedStep& step, size_t max_races) {
  StepRaceReport report;
  for (const Op& op : step.model.ops) report.accesses += op.accesses.size();
  if (report.accesses == 0) {
    report.not_checked = step.annotated ? "the annotations name no buffer accesses in this step"
                                        : "the trace has no hookstream annotations: traces say which stream ran what, "
                                          "not which memory it touched";
    return report;
  }
  RaceCheckOptions options;
  options.max_races = max_races;
  RaceReport races;
  try {
    races = check_races(step.model, options);
  } catch (const std::runtime_error& error) {
    report.not_checked = error.what();
    return report;
  }
  report.checked = true;
  report.race_count = races.race_count;
  for (const Race& race : races.races) {
    RecordedRace r;
    r.race = race;
    r.kind = race.kind();
    const Op& a = step.model.ops[race.earlier_op];
    const Op& b = step.model.ops[race.later_op];
    r.unordered_producer_consumer = race.earlier_write && !race.later_write && a.stream != b.stream;
    const double a_end = a.start_ns + std::max(0.0, a.duration_ns), b_end = b.start_ns + std::max(0.0, b.duration_ns);
    r.overlapped = a.start_ns < b_end && b.start_ns < a_end;
    r.gap_ns = r.overlapped ? 0 : std::max(b.start_ns - a_end, a.start_ns - b_end);
    r.earlier = describe_op(step.model, race.earlier_op) + " [" + step.annotation[race.earlier_op] + "]";
    r.later = describe_op(step.model, race.later_op) + " [" + step.annotation[race.later_op] + "]";
    r.buffer = step.model.buffers[race.buffer].name;
    report.races.push_back(std::move(r));
  }
  return report;
}

std::string recorded_step_timeline(const RecordedStep& step, const StepRaceReport& races) {
  EventModel model = step.model;
  for (Op& op : model.ops) if (op.start_ns >= 0) op.start_ns -= step.start_ns;
  nlohmann::json trace = chrome_trace_document(model);
  nlohmann::json& events = trace.is_object() && trace.contains("traceEvents") ? trace["traceEvents"] : trace;
  const auto us = [](double ns) { return ns / 1000.0; };
  const auto thread = [](const Op& op) { return op.stream >= 0 ? op.stream + 1 : 0; };
  const auto instant = [&](const Op& at, double ns, const std::string& name, const std::string& category, nlohmann::json args) {
    events.push_back({{"ph", "i"}, {"s", "t"}, {"name", name}, {"cat", category}, {"pid", at.rank}, {"tid", thread(at)},
                      {"ts", us(ns)}, {"args", std::move(args)}});
  };
  // Gaps: the largest idle stretches of each device.
  for (const DeviceUtilisation& device : analyse_device_utilisation(model, 5)) {
    for (const DeviceIdleGap& gap : device.largest_gaps) {
      if (gap.op_after < 0) continue;
      instant(model.ops[gap.op_after], gap.start_ns, "GPU idle " + std::to_string(static_cast<int64_t>(gap.duration_ns / 1000)) + " us",
              "finding: gap", {{"duration_ns", gap.duration_ns}, {"before", gap.op_before >= 0 ? model.ops[gap.op_before].name : ""}});
    }
  }
  // HTA's idle-time breakdown (analyses/stream_idle_breakdown.h): every gap of a stream as a slice
  // on that stream's track, named by its category, so Perfetto shows where each stream waited for
  // the host, for its own launches, or for something else.
  for (const StreamIdleGap& gap : stream_idle_gaps(model)) {
    const Op& after = model.ops[gap.op_after];
    events.push_back({{"ph", "X"}, {"name", std::string("idle: ") + to_string(gap.category)}, {"cat", "hta: idle"},
                      {"pid", after.rank}, {"tid", thread(after)}, {"ts", us(gap.start_ns)}, {"dur", us(gap.duration_ns)},
                      {"args", {{"category", to_string(gap.category)}, {"next_op", after.name}}}});
  }
  // HTA's memory-bandwidth series (analyses/memory_bandwidth.h) as one counter track per rank and
  // memory op type.
  for (const MemoryBandwidthSeries& series : memory_bandwidth_series(model)) {
    for (const auto& [time, gbps] : series.points) {
      events.push_back({{"ph", "C"}, {"name", "memory bandwidth: " + series.type}, {"cat", "hta: memory bandwidth"},
                        {"pid", series.rank}, {"ts", us(time)}, {"args", {{"GB/s", gbps}}}});
    }
  }
  // Exposed copies: host<->device copies that compute on another stream of the device hides for
  // less than half of their time.
  for (const auto& [device, ops] : gpu_ops_by_device(model)) {
    std::vector<GpuInterval> compute;
    for (int i : ops) {
      if (is_compute(model.ops[i])) compute.push_back({model.ops[i].start_ns, model.ops[i].start_ns + model.ops[i].duration_ns, i, i});
    }
    const std::vector<GpuInterval> merged = merge_intervals(compute);
    for (int i : ops) {
      const Op& op = model.ops[i];
      if (op.kind != OpKind::Copy || (op.copy != CopyKind::HostToDevice && op.copy != CopyKind::DeviceToHost) || op.duration_ns <= 0) continue;
      const double hidden = covered_length(merged, op.start_ns, op.start_ns + op.duration_ns);
      if (hidden < 0.5 * op.duration_ns) {
        instant(op, op.start_ns, "exposed copy", "finding: exposed copy",
                {{"op", op.name}, {"duration_ns", op.duration_ns}, {"hidden_ns", hidden}});
      }
    }
  }
  for (const Op& op : model.ops) {
    if (op.kind == OpKind::EventSync || op.kind == OpKind::StreamSync || op.kind == OpKind::DeviceSync) {
      Op host = op;
      host.stream = -1;
      instant(host, op.start_ns, "host sync in the step", "finding: sync", {{"op", op.name}, {"blocked_ns", op.duration_ns}});
    }
  }
  int flow = 1000000;  // above the ids chrome_trace_json uses for its own flows
  for (const RecordedRace& race : races.races) {
    const Op& a = model.ops[race.race.earlier_op];
    const Op& b = model.ops[race.race.later_op];
    ++flow;
    events.push_back({{"ph", "s"}, {"id", flow}, {"name", "race: " + race.kind + " on " + race.buffer}, {"cat", "finding: race"},
                      {"pid", a.rank}, {"tid", thread(a)}, {"ts", us(a.start_ns)}});
    events.push_back({{"ph", "f"}, {"bp", "e"}, {"id", flow}, {"name", "race: " + race.kind + " on " + race.buffer},
                      {"cat", "finding: race"}, {"pid", b.rank}, {"tid", thread(b)}, {"ts", us(b.start_ns)}});
    instant(b, b.start_ns, "race: " + race.kind + " on " + race.buffer, "finding: race",
            {{"earlier", race.earlier}, {"later", race.later}, {"overlapped", race.overlapped}});
  }
  return json_text(trace) + "\n";
}

}  // namespace hookstream
