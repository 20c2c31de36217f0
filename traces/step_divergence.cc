#include "traces/step_divergence.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "traces/cuda_api.h"
#include "traces/step_replay.h"

namespace hookstream {

namespace {

bool is_gpu_kind(OpKind kind) {
  return kind == OpKind::Kernel || kind == OpKind::Collective || kind == OpKind::Copy || kind == OpKind::Memset;
}

// A launch reaches the GPU a few microseconds after its call starts (driver latency): delays below
// this are the launch itself, not a wait.
constexpr double kLaunchSlackNs = 1000;

}  // namespace

StepDivergence explain_step_divergence(const EventModel& trace, const RecordedStep& step) {
  StepDivergence d;
  // The step's first op in the trace's issue order, and its start, per rank.
  std::map<int, std::pair<int, double>> first_of_rank;  // rank -> (trace index, start)
  std::pair<int, double>* current = nullptr;  // the entry of the op before's rank (ops come rank by rank)
  int current_rank = 0;
  for (size_t i = 0; i < step.model.ops.size(); ++i) {
    const int origin = i < step.origin.size() ? step.origin[i] : -1;
    if (origin < 0) continue;
    const Op& op = step.model.ops[i];
    if (current == nullptr || op.rank != current_rank) {
      current = &first_of_rank.try_emplace(op.rank, origin, op.start_ns).first->second;
      current_rank = op.rank;
    }
    current->first = std::min(current->first, origin);
    current->second = std::min(current->second, op.start_ns);
  }
  // Work queued before the step, per (rank, device).
  std::map<std::pair<int, int>, std::pair<double, int64_t>> behind;  // -> (ns, ops)
  for (const auto& [rank, first] : first_of_rank) {
    const auto [first_index, step_start] = first;
    for (int i = 0; i < first_index && i < static_cast<int>(trace.ops.size()); ++i) {
      const Op& op = trace.ops[i];
      if (op.rank != rank || !is_gpu_kind(op.kind) || op.stream < 0) continue;
      const double end = op.start_ns + std::max(0.0, op.duration_ns);
      if (end <= step_start) continue;
      auto& b = behind[{rank, trace.streams[op.stream].device}];
      b.first = std::max(b.first, end - step_start);
      ++b.second;
    }
  }
  for (const auto& [device, b] : behind) {
    if (b.first > d.gpu_behind_ns) {
      d.gpu_behind_ns = b.first;
      d.queued_ops = b.second;
    }
  }
  // Waits the trace does not tie to a stream or event, late GPU starts and launch-bound idle time,
  // walking the step in issue order (a GPU op follows the call that launched it). Streams and
  // events are the model's indices, so their figures sit in vectors rather than maps looked up per
  // op (x64 nsys: 297 k ops; the walk took 14 -> 12 ms CPU).
  struct Latest {
    bool seen = false;
    double ns = 0;
  };
  const auto slot = [](std::vector<Latest>& v, int index) -> Latest& {
    if (static_cast<size_t>(index) >= v.size()) v.resize(index + 1);
    return v[index];
  };
  std::vector<Latest> stream_end(step.model.streams.size());    // stream -> end of its last GPU op
  std::vector<Latest> event_ready(step.model.events.size());    // event -> end of the work recorded before it
  std::vector<Latest> stream_waits(step.model.streams.size());  // stream -> the latest ready time it waits for
  std::map<std::pair<int, int>, Latest> device_busy_until;      // (rank, device) -> last GPU end
  std::map<int, double> launched_at;                            // rank -> start of the last host op
  // The waits the trace does record: an event is ready when the GPU work before its record on the
  // recording stream is done; a stream that waits for it may start nothing before.
  for (const Op& op : step.model.ops) {
    if (op.kind == OpKind::EventRecord && op.event >= 0 && op.stream >= 0) {
      const Latest& end = slot(stream_end, op.stream);
      slot(event_ready, op.event) = {true, end.seen ? end.ns : 0};
    } else if (op.kind == OpKind::StreamWait && op.event >= 0 && op.stream >= 0) {
      const Latest& ready = slot(event_ready, op.event);
      if (ready.seen) {
        Latest& waits = slot(stream_waits, op.stream);
        waits = {true, std::max(waits.seen ? waits.ns : 0, ready.ns)};
      }
    }
    if (!is_gpu_kind(op.kind)) {
      if (op.kind == OpKind::Marker) continue;
      launched_at[op.rank] = op.start_ns;
      // A call the name says synchronises or waits, that the trace did not tie to what it waited for.
      const bool untied = (op.kind == OpKind::HostCompute &&
                           is_sync_role(classify_api(op.source_api.empty() ? op.name.str() : op.source_api.str()))) ||
                          (op.kind == OpKind::StreamWait && op.event < 0) ||
                          (op.kind == OpKind::StreamSync && op.sync_stream < 0) ||
                          (op.kind == OpKind::EventSync && op.event < 0);
      if (untied) {
        ++d.untied_waits;
        d.untied_wait_host_ns += std::max(0.0, op.duration_ns);
      }
      continue;
    }
    if (op.stream < 0) continue;
    const auto launched = launched_at.find(op.rank);
    const double issue = launched != launched_at.end() ? launched->second : op.start_ns;
    Latest& previous = slot(stream_end, op.stream);
    double allowed = std::max(issue, previous.seen ? previous.ns : issue);
    const Latest& waits = slot(stream_waits, op.stream);
    if (waits.seen) allowed = std::max(allowed, waits.ns);
    if (op.start_ns - allowed > kLaunchSlackNs) {
      ++d.late_ops;
      d.late_ns += op.start_ns - allowed;
    }
    const double end = op.start_ns + std::max(0.0, op.duration_ns);
    previous = {true, std::max(previous.seen ? previous.ns : 0, end)};
    Latest& busy = device_busy_until[{op.rank, step.model.streams[op.stream].device}];
    // The device ran dry before this op's launch call: the GPU waited for the host.
    if (busy.seen && issue > busy.ns && op.start_ns > busy.ns) {
      d.launch_bound_idle_ns += std::min(issue, op.start_ns) - busy.ns;
      ++d.launch_bound_gaps;
    }
    busy = {true, busy.seen ? std::max(busy.ns, end) : end};
  }
  return d;
}

namespace {
bool diverges(double measured_ns, double replayed_ns) {
  return measured_ns > 0 && std::abs(replayed_ns - measured_ns) > 0.10 * measured_ns;
}
}  // namespace

std::vector<std::string> divergence_lines(const StepDivergence& d, double measured_ns, double replayed_ns) {
  std::vector<std::string> lines;
  if (!diverges(measured_ns, replayed_ns)) return lines;
  const double difference = replayed_ns - measured_ns;
  lines.push_back("replay and measurement differ by " + ms_text(std::abs(difference)) + " (" +
                  std::to_string(static_cast<int>(std::lround(100.0 * std::abs(difference) / measured_ns))) +
                  "% of the measurement); what the recording shows that the replay does not know:");
  if (d.gpu_behind_ns > 0) {
    lines.push_back("work queued before the step: the GPU was " + ms_text(d.gpu_behind_ns) +
                    " behind the host at the step's start (" + std::to_string(d.queued_ops) +
                    " GPU ops issued before the step still queued or running); the replay starts the step on an idle "
                    "GPU");
  }
  if (d.untied_waits > 0 || d.late_ops > 0) {
    std::string line = "waits the trace does not record:";
    if (d.untied_waits > 0) {
      line += " " + std::to_string(d.untied_waits) + " synchronising call(s) or stream wait(s) tied to no stream or event (" +
              ms_text(d.untied_wait_host_ns) + " of host time), which order nothing in the replay;";
    }
    if (d.late_ops > 0) {
      line += " " + std::to_string(d.late_ops) + " GPU op(s) started " + ms_text(d.late_ns) +
              " in all later than their launch, their stream's previous op and the waits the trace records allowed;";
    }
    line.pop_back();
    lines.push_back(line);
  }
  if (d.launch_bound_gaps > 0) {
    lines.push_back("host-bound launches: the GPU ran dry " + std::to_string(d.launch_bound_gaps) + " time(s) for " +
                    ms_text(d.launch_bound_idle_ns) +
                    " in all until the host launched the next op (the replay keeps the host's recorded time)");
  }
  if (lines.size() == 1) lines.push_back("no cause found in the recording: the difference is unexplained");
  return lines;
}

nlohmann::json divergence_json(const StepDivergence& d, double measured_ns, double replayed_ns) {
  return {{"differs", diverges(measured_ns, replayed_ns)},
          {"gpu_behind_at_start_ns", d.gpu_behind_ns},
          {"queued_ops_at_start", d.queued_ops},
          {"untied_waits", d.untied_waits},
          {"untied_wait_host_ns", d.untied_wait_host_ns},
          {"late_gpu_ops", d.late_ops},
          {"late_ns", d.late_ns},
          {"launch_bound_gaps", d.launch_bound_gaps},
          {"launch_bound_idle_ns", d.launch_bound_idle_ns},
          {"why", divergence_lines(d, measured_ns, replayed_ns)}};
}

}  // namespace hookstream
