// GCC 12 reports a false -Wmaybe-uninitialized inside Boost.Graph (see sim/streams/dependency_graph.cc).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "traces/step_replay.h"

#include <algorithm>
#include <cmath>
#include <future>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "sim/cost/device_spec.h"
#include "sim/inputs/input_error.h"
#include "traces/cuda_api.h"

namespace hookstream {

namespace {

bool is_gpu_kind(OpKind kind) {
  return kind == OpKind::Kernel || kind == OpKind::Copy || kind == OpKind::Memset || kind == OpKind::Collective;
}
bool is_host_sync(OpKind kind) {
  return kind == OpKind::EventSync || kind == OpKind::StreamSync || kind == OpKind::DeviceSync;
}

// Ops are edited by rebuilding the list: insertions before/after an op index.
struct Edit {
  std::map<int, std::vector<std::pair<Op, OpGroup>>> before, after;
  std::set<int> removed;
  StepReplay apply(const StepReplay& in) const {
    StepReplay out;
    out.model.streams = in.model.streams;
    out.model.events = in.model.events;
    out.model.buffers = in.model.buffers;
    out.model.source = in.model.source;
    const auto add = [&](const Op& op, const OpGroup& group, int step_op) {
      out.model.ops.push_back(op);
      out.groups.push_back(group);
      out.step_op.push_back(step_op);
    };
    size_t inserted = 0;
    for (const auto& [index, ops] : before) inserted += ops.size();
    for (const auto& [index, ops] : after) inserted += ops.size();
    out.model.ops.reserve(in.model.ops.size() + inserted);
    out.groups.reserve(in.model.ops.size() + inserted);
    out.step_op.reserve(in.model.ops.size() + inserted);
    // The edits are few and sorted by op: walked beside the ops, not looked up per op.
    auto b = before.lower_bound(0), a = after.lower_bound(0);
    auto r = removed.lower_bound(0);
    for (int i = 0; i < static_cast<int>(in.model.ops.size()); ++i) {
      if (b != before.end() && b->first == i) for (const auto& [op, group] : (b++)->second) add(op, group, -1);
      if (r != removed.end() && *r == i) ++r;
      else add(in.model.ops[i], in.groups[i], in.step_op[i]);
      if (a != after.end() && a->first == i) for (const auto& [op, group] : (a++)->second) add(op, group, -1);
    }
    return out;
  }
};

Op sync_op(OpKind kind, int rank, int stream, const Text& name) {
  Op op;
  op.kind = kind;
  op.rank = rank;
  op.stream = stream;
  op.name = name;
  op.duration_ns = 0;
  op.start_ns = 0;
  return op;
}

// The times the simulator's scheduler gives a replay's ops: every op carries its recorded
// duration, which estimate_op_ns uses before any device figure, so no device is needed.
OpTimes replay_times(const EventModel& model) { return schedule_times(model, DeviceSpec{}, TimeModelOptions{}); }

// What a what-if compares between two schedules of a replay, computed from the scheduled times
// without copying the replay's ops into a Schedule.
struct ReplayFigures {
  Schedule figures;  // model left empty (sim/cost/time_model.h schedule_figures)
  double host_blocked_ns = 0;
};

ReplayFigures replay_figures(const StepReplay& replay) {
  const OpTimes times = replay_times(replay.model);
  ReplayFigures out;
  out.figures = schedule_figures(replay.model, times);
  for (size_t i = 0; i < replay.model.ops.size(); ++i) {
    if (is_host_sync(replay.model.ops[i].kind)) out.host_blocked_ns += std::max(0.0, times.duration_ns[i]);
  }
  return out;
}

}  // namespace

std::string ms_text(double ns) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(3);
  out << ns * 1e-6 << " ms";
  return out.str();
}

StepReplay build_step_replay(const RecordedStep& step) {
  StepReplay replay;
  replay.model.streams = step.model.streams;
  replay.model.events = step.model.events;
  replay.model.buffers = step.model.buffers;
  replay.model.source = step.model.source;
  // Calls whose GPU work blocks the host (cudaMemcpy, pageable cudaMemcpyAsync): the recorded call
  // duration includes the wait the scheduler recomputes, so the call itself takes no host time.
  // (rank, correlation) keys, sorted: a binary search over a few hundred KB that stay in cache,
  // where a node-based hash set cost a cache miss per host call (most of this function's own time
  // on a long nsys trace: 111 k calls against 18 k blocking copies).
  std::vector<std::pair<int, int64_t>> blocking_calls;
  for (const Op& op : step.model.ops) {
    if (is_gpu_kind(op.kind) && op.blocks_host && op.correlation >= 0) blocking_calls.emplace_back(op.rank, op.correlation);
  }
  std::sort(blocking_calls.begin(), blocking_calls.end());
  blocking_calls.erase(std::unique(blocking_calls.begin(), blocking_calls.end()), blocking_calls.end());
  // Every host-side op may get a host-time op before it: at most twice the step's ops.
  replay.model.ops.reserve(2 * step.model.ops.size());
  replay.groups.reserve(2 * step.model.ops.size());
  replay.step_op.reserve(2 * step.model.ops.size());
  // rank -> when the host finished its previous host-side op (recorded).
  std::unordered_map<int, double> host_end;
  const Text host_name("host");  // one shared name for every host-time op
  for (int i = 0; i < static_cast<int>(step.model.ops.size()); ++i) {
    const Op& recorded = step.model.ops[i];
    if (!is_gpu_kind(recorded.kind)) {
      const auto previous = host_end.find(recorded.rank);
      if (previous != host_end.end() && recorded.start_ns > previous->second) {
        Op host = sync_op(OpKind::HostCompute, recorded.rank, -1, host_name);
        host.duration_ns = recorded.start_ns - previous->second;
        host.phase = recorded.phase;
        replay.model.ops.push_back(std::move(host));
        replay.groups.push_back(OpGroup{});
        replay.step_op.push_back(-1);
      }
      const double recorded_end = recorded.start_ns + std::max(0.0, recorded.duration_ns);
      if (previous == host_end.end()) host_end.emplace(recorded.rank, recorded_end);
      else previous->second = std::max(previous->second, recorded_end);
    }
    replay.model.ops.push_back(recorded);
    Op& op = replay.model.ops.back();
    if (op.kind == OpKind::HostCompute && !blocking_calls.empty() &&
        std::binary_search(blocking_calls.begin(), blocking_calls.end(), std::make_pair(op.rank, op.correlation))) {
      op.duration_ns = 0;
    }
    op.duration_ns = std::max(0.0, op.duration_ns);
    replay.groups.push_back(step.groups[i]);
    replay.step_op.push_back(i);
  }
  return replay;
}

Schedule schedule_replay(const StepReplay& replay) {
  return schedule_from_times(EventModel(replay.model), replay_times(replay.model));
}

namespace {

// The report on a path found over the schedule's DAG (`edges`, or why it could not be built).
CriticalPathReport critical_path_report(const Schedule& schedule, const StepReplay& replay, const DependencyEdges* edges,
                                        const std::string& unavailable, size_t keep) {
  CriticalPathReport report;
  report.step_ns = schedule.step_ns;
  if (edges == nullptr) {
    report.unavailable = unavailable;
    return report;
  }
  const EventModel& model = schedule.model;
  std::vector<double> durations(model.ops.size(), 0);
  for (size_t i = 0; i < model.ops.size(); ++i) durations[i] = std::max(0.0, model.ops[i].duration_ns);
  CriticalPath path;
  try {
    path = critical_path(*edges, durations);  // only the path is needed: no Boost graph is built
  } catch (const std::runtime_error& error) {
    report.unavailable = error.what();
    return report;
  }
  report.length_ns = path.length;
  // Each op on the path is named by its group's label ("backward L3", "host work"): labels are built
  // once per distinct group and compared as ids, and a segment's last op name is filled in once it
  // is complete, so a long path costs no string work per op.
  std::vector<Text> labels;
  std::map<std::string, int> label_id;
  std::map<OpGroup, int> group_label;
  std::vector<int> kind_label;
  OpGroup last_group;
  int last_group_label = -1;
  const auto intern = [&](std::string label) {
    const auto [it, added] = label_id.emplace(std::move(label), static_cast<int>(labels.size()));
    if (added) labels.push_back(it->first);
    return it->second;
  };
  const auto what_of = [&](int index) {
    const OpGroup& group = replay.groups[index];
    if (group.op_class == OpClass::None) {
      const OpKind kind = model.ops[index].kind;
      const size_t k = static_cast<size_t>(kind);
      if (k >= kind_label.size()) kind_label.resize(k + 1, -1);
      if (kind_label[k] < 0) kind_label[k] = intern(kind == OpKind::HostCompute ? "host work" : to_string(kind));
      return kind_label[k];
    }
    // Consecutive path ops mostly share a group (a run of kernels): the last one is checked first.
    if (last_group_label >= 0 && group == last_group) return last_group_label;
    const auto found = group_label.find(group);
    const int label = found != group_label.end() ? found->second : group_label[group] = intern(group.label());
    last_group = group;
    last_group_label = label;
    return label;
  };
  std::vector<Text> stream_names(model.streams.size());
  for (size_t s = 0; s < model.streams.size(); ++s) stream_names[s] = Text(model.streams[s].name);
  const Text host("host");
  // Segments past `keep` are counted, not built: a long trace's path has ~10^5 of them and a
  // report lists the first few (x64 nsys: 203 k segments, tens of MB). Reserved once up to that.
  report.segments.reserve(std::min(path.ops.size(), keep));
  std::vector<double> by_what;  // per label id, summed in path order
  std::vector<bool> on_path;
  // The segment being extended: its rank, stream and label id; `open` when it is kept.
  int last_rank = 0, last_stream = 0, last_what = -1, last_index = -1;
  CriticalSegment* open = nullptr;
  const auto close_segment = [&] {
    if (open != nullptr) open->last_op = model.ops[last_index].name;
  };
  for (int index : path.ops) {
    const Op& op = model.ops[index];
    const int what = what_of(index);
    if (durations[index] <= 0) continue;  // frees and other bookkeeping on the path take no time
    if (static_cast<size_t>(what) >= by_what.size()) {
      by_what.resize(what + 1, 0.0);
      on_path.resize(what + 1, false);
    }
    by_what[what] += durations[index];
    on_path[what] = true;
    if (report.segments_total > 0 && last_rank == op.rank && last_stream == op.stream && last_what == what) {
      if (open != nullptr) {
        open->ops++;
        open->duration_ns = op.start_ns + durations[index] - open->start_ns;
      }
      last_index = index;
      continue;
    }
    close_segment();
    ++report.segments_total;
    last_rank = op.rank;
    last_stream = op.stream;
    last_what = what;
    last_index = index;
    open = nullptr;
    if (report.segments.size() >= keep) continue;
    CriticalSegment segment;
    segment.rank = op.rank;
    segment.stream = op.stream;
    segment.where = op.stream >= 0 ? stream_names[op.stream] : host;
    segment.what = labels[what];
    segment.ops = 1;
    segment.start_ns = op.start_ns;
    segment.duration_ns = durations[index];
    segment.first_op = op.name;
    report.segments.push_back(std::move(segment));
    open = &report.segments.back();  // reserved: stays put
  }
  close_segment();
  std::map<std::string, double> by_label;
  for (size_t id = 0; id < by_what.size(); ++id) if (on_path[id]) by_label[labels[id].str()] = by_what[id];
  report.by_what.assign(by_label.begin(), by_label.end());
  std::stable_sort(report.by_what.begin(), report.by_what.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return report;
}

}  // namespace

CriticalPathReport replay_critical_path(const Schedule& schedule, const StepReplay& replay, size_t keep_segments) {
  try {
    const DependencyEdges edges = dependency_edges(schedule.model);
    return critical_path_report(schedule, replay, &edges, "", keep_segments);
  } catch (const std::runtime_error& error) {  // e.g. more streams than the race checker's clock holds
    return critical_path_report(schedule, replay, nullptr, error.what(), keep_segments);
  }
}

ScheduledReplay schedule_replay_in_place(StepReplay& replay, size_t keep_segments) {
  // The DAG reads only the ops' order and ordering (kind, stream, event, rank), and schedule_times
  // writes nothing into the model, so the two share it on two threads; the ops are then moved into
  // the schedule with their times, not copied (a long trace's step is hundreds of MB of ops).
  // A thread costs ~0.1 ms to start: a small step builds its DAG on this one, when asked for it.
  constexpr size_t kSecondThreadOps = 20000;
  const auto policy = replay.model.ops.size() >= kSecondThreadOps ? std::launch::async : std::launch::deferred;
  std::future<DependencyEdges> edges_later =
      std::async(policy, [&model = std::as_const(replay.model)] { return dependency_edges(model); });
  ScheduledReplay out;
  std::optional<DependencyEdges> edges;
  std::string unavailable;
  {
    // The times live only until they are written into the ops: freed before the critical path,
    // whose arrays come at the analysis's peak of memory (fresh pages are zeroed by the kernel).
    // The figures only read the model, so they are worked out while the DAG (the longer of the
    // two on a long step) is still being built; the times go into the ops once it is done.
    OpTimes times;
    Schedule figures;
    try {
      times = replay_times(replay.model);
      figures = schedule_figures(replay.model, times);
    } catch (...) {
      edges_later.wait();  // the other thread still reads replay.model
      throw;
    }
    try {
      edges = edges_later.get();
    } catch (const std::runtime_error& error) {
      unavailable = error.what();
    }
    out.schedule = schedule_from_times(std::move(replay.model), times, std::move(figures));
  }
  replay.model = EventModel{};
  out.critical = critical_path_report(out.schedule, replay, edges ? &*edges : nullptr, unavailable, keep_segments);
  return out;
}

WhatIfChange parse_what_if(const std::string& spec) {
  WhatIfChange change;
  change.spec = spec;
  const size_t eq = spec.find('=');
  const std::string name = spec.substr(0, eq);
  const std::string value = eq == std::string::npos ? "" : spec.substr(eq + 1);
  if (name == "second_reload_buffer" && eq == std::string::npos) {
    change.kind = WhatIfChange::Kind::SecondReloadBuffer;
  } else if (name == "copy_to_side_stream" && eq == std::string::npos) {
    change.kind = WhatIfChange::Kind::CopyToSideStream;
  } else if (name == "bucket_cap_mb") {
    change.kind = WhatIfChange::Kind::BucketCapMb;
    char* end = nullptr;
    change.bucket_cap_mb = value.empty() ? -1 : std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !(change.bucket_cap_mb > 0) || !std::isfinite(change.bucket_cap_mb)) {
      throw InputError("--what-if " + spec, "expected bucket_cap_mb=N with N a positive number of MiB");
    }
  } else if (name == "remove_host_sync") {
    change.kind = WhatIfChange::Kind::RemoveHostSync;
    change.sync_api = value;
  } else {
    throw InputError("--what-if " + spec, "unknown change: expected second_reload_buffer, copy_to_side_stream, "
                                          "bucket_cap_mb=N or remove_host_sync[=API]");
  }
  return change;
}

namespace {

// second_reload_buffer: with two reload buffers, layer L's reload only has to wait until the buffer
// it overwrites was last read, by layer L+2's backward (the double_buffer_events protocol), not for
// layer L+1's recompute as one buffer requires (protocols/single_buffer.yaml).
StepReplay second_reload_buffer(const StepReplay& in, int& changed, std::string& why) {
  Edit edit;
  StepReplay out = in;
  const auto& ops = in.model.ops;
  int unguarded = 0;
  for (int c = 0; c < static_cast<int>(ops.size()); ++c) {
    const Op& copy = ops[c];
    if (copy.kind != OpKind::Copy || in.groups[c].op_class != OpClass::CopyH2D || in.groups[c].layer < 0 || copy.stream < 0) continue;
    std::vector<int> waits;
    for (int j = c - 1; j >= 0; --j) {
      const Op& op = ops[j];
      if (op.rank != copy.rank) continue;
      if (op.stream == copy.stream && is_gpu_kind(op.kind)) break;
      if (op.kind == OpKind::StreamWait && op.stream == copy.stream) waits.push_back(j);
    }
    if (waits.empty()) {
      ++unguarded;
      continue;
    }
    int anchor = -1;
    for (int k = c - 1; k >= 0; --k) {
      const OpGroup& g = in.groups[k];
      if (ops[k].rank == copy.rank && is_gpu_kind(ops[k].kind) && g.layer == in.groups[c].layer + 2 &&
          (g.op_class == OpClass::Backward || g.op_class == OpClass::Recompute)) {
        anchor = k;
        break;
      }
    }
    const int event = out.model.add_event(Event{"reload buffer free (layer " + std::to_string(in.groups[c].layer) + ")", copy.rank});
    for (int w : waits) {
      out.model.ops[w].event = event;  // never recorded when no layer L+2 exists: a no-op wait
      out.model.ops[w].sync_stream = -1;
    }
    if (anchor >= 0) {
      Op record = sync_op(OpKind::EventRecord, copy.rank, ops[anchor].stream, "record reload buffer free (what-if)");
      record.event = event;
      edit.after[anchor].push_back({record, OpGroup{}});
    }
    ++changed;
  }
  StepReplay result = edit.apply(out);
  why = std::to_string(changed) + " H2D reloads now wait only for the backward of layer L+2 (the last reader of their buffer)";
  if (changed == 0) why = "no annotated H2D reload with a stream wait before it: nothing to change";
  if (unguarded > 0) why += "; " + std::to_string(unguarded) + " reloads had no wait before them";
  return result;
}

// copy_to_side_stream: copies issued on the compute stream move to a stream of their own. A D2H copy
// still waits for the compute work issued before it (it reads what compute produced); an H2D copy
// reads host memory and starts at once, and compute waits for it before its next kernel (the
// consumer). Host syncs on the compute stream also synchronise the new stream.
StepReplay copy_to_side_stream(const StepReplay& in, int& changed, std::string& why) {
  StepReplay out = in;
  Edit edit;
  const auto& ops = in.model.ops;
  std::map<int, std::map<int, double>> kernel_time;  // rank -> stream -> kernel ns
  for (const Op& op : ops) if (op.kind == OpKind::Kernel && op.stream >= 0) kernel_time[op.rank][op.stream] += op.duration_ns;
  std::map<int, int> compute, side;
  for (const auto& [rank, streams] : kernel_time) {
    compute[rank] = std::max_element(streams.begin(), streams.end(), [](const auto& a, const auto& b) { return a.second < b.second; })->first;
  }
  for (int c = 0; c < static_cast<int>(ops.size()); ++c) {
    const Op& copy = ops[c];
    if (copy.kind != OpKind::Copy || !compute.count(copy.rank) || copy.stream != compute[copy.rank]) continue;
    if (copy.copy != CopyKind::HostToDevice && copy.copy != CopyKind::DeviceToHost) continue;
    const int main = compute[copy.rank];
    if (!side.count(copy.rank)) {
      Stream stream = in.model.streams[main];
      stream.name = "side copy stream (what-if)";
      stream.id = 3000000 + copy.rank;
      stream.legacy_default = false;
      stream.non_blocking = true;
      side[copy.rank] = out.model.add_stream(stream);
    }
    const int s = side[copy.rank];
    out.model.ops[c].stream = s;
    if (copy.copy == CopyKind::DeviceToHost) {
      Op wait = sync_op(OpKind::StreamWait, copy.rank, s, "side stream waits compute (what-if)");
      wait.sync_stream = main;
      edit.before[c].push_back({wait, OpGroup{}});
    } else {
      const int event = out.model.add_event(Event{"side copy done (what-if)", copy.rank});
      Op record = sync_op(OpKind::EventRecord, copy.rank, s, "record side copy done (what-if)");
      record.event = event;
      edit.after[c].push_back({record, OpGroup{}});
      for (int k = c + 1; k < static_cast<int>(ops.size()); ++k) {
        if (ops[k].rank == copy.rank && ops[k].stream == main && ops[k].kind == OpKind::Kernel) {
          Op wait = sync_op(OpKind::StreamWait, copy.rank, main, "compute waits side copy (what-if)");
          wait.event = event;
          edit.before[k].push_back({wait, OpGroup{}});
          break;
        }
      }
    }
    ++changed;
  }
  for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
    const Op& op = ops[i];
    if (op.kind == OpKind::StreamSync && side.count(op.rank) && op.sync_stream == compute[op.rank]) {
      Op sync = sync_op(OpKind::StreamSync, op.rank, -1, "host synchronizes side copy stream (what-if)");
      sync.sync_stream = side[op.rank];
      sync.blocks_host = true;
      edit.after[i].push_back({sync, OpGroup{}});
    }
  }
  why = changed > 0 ? std::to_string(changed) + " H2D/D2H copies moved off the compute stream"
                    : "no H2D/D2H copy runs on the compute stream: nothing to move";
  return edit.apply(out);
}

// bucket_cap_mb=N: DDP fills buckets up to the cap, except the first, which stays at
// dist._DEFAULT_FIRST_BUCKET_BYTES (1 MiB; torch/nn/parallel/distributed.py). Recorded all-reduces
// after the first are merged in launch order until a bucket reaches the cap, or split evenly when one
// is larger; a merged bucket launches where its last member launched. Durations follow a fit of the
// recorded ones, latency + bytes / bandwidth.
StepReplay regroup_buckets(const StepReplay& in, double cap_mb, const std::vector<int64_t>& plan_bytes, int& changed,
                           std::string& why) {
  const auto& ops = in.model.ops;
  std::map<int, std::vector<int>> collectives;
  for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
    if (ops[i].kind == OpKind::Collective && in.groups[i].op_class == OpClass::AllReduce) collectives[ops[i].rank].push_back(i);
  }
  if (collectives.empty()) {
    why = "no all-reduce in the step: nothing to regroup";
    return in;
  }
  const std::vector<int>& first_rank = collectives.begin()->second;
  std::vector<double> bytes;
  std::string source = "the trace";
  const bool traced = std::all_of(first_rank.begin(), first_rank.end(), [&](int i) { return ops[i].bytes > 0; });
  if (!traced) {
    if (plan_bytes.size() != first_rank.size()) {
      why = "not applicable: the trace gives no all-reduce sizes and no plan with " + std::to_string(first_rank.size()) +
            " buckets was given (--plan) to take them from";
      return in;
    }
    source = "the plan's buckets";
  }
  for (size_t k = 0; k < first_rank.size(); ++k) bytes.push_back(traced ? static_cast<double>(ops[first_rank[k]].bytes) : plan_bytes[k]);
  // Least-squares fit of duration = latency + bytes * seconds_per_byte over rank 0's all-reduces.
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const double n = static_cast<double>(bytes.size());
  for (size_t k = 0; k < bytes.size(); ++k) {
    const double x = bytes[k], y = ops[first_rank[k]].duration_ns;
    sx += x; sy += y; sxx += x * x; sxy += x * y;
  }
  double slope = sx > 0 ? sy / sx : 0, latency = 0;
  const double variance = n * sxx - sx * sx;
  if (bytes.size() >= 2 && variance > 1e-9 * sxx * n) {
    const double fitted = (n * sxy - sx * sy) / variance;
    const double intercept = (sy - fitted * sx) / n;
    if (fitted > 0 && intercept >= 0) {
      slope = fitted;
      latency = intercept;
    }
  }
  const double cap = cap_mb * 1024 * 1024;
  // Group rank 0's list; every rank regroups the same way (their collectives pair up by ordinal).
  struct Bucket {
    std::vector<size_t> members;  // ordinals
    double bytes = 0;
    int pieces = 1;
  };
  std::vector<Bucket> buckets;
  for (size_t k = 0; k < bytes.size(); ++k) {
    if (k == 0) {
      buckets.push_back({{k}, bytes[k], 1});
      continue;
    }
    if (bytes[k] > cap) {
      buckets.push_back({{k}, bytes[k], static_cast<int>(std::ceil(bytes[k] / cap))});
      continue;
    }
    if (buckets.size() < 2 || buckets.back().bytes >= cap || buckets.back().pieces > 1 || buckets.back().bytes + bytes[k] > cap) {
      buckets.push_back({{k}, bytes[k], 1});
    } else {
      buckets.back().members.push_back(k);
      buckets.back().bytes += bytes[k];
    }
  }
  Edit edit;
  int launched = 0;
  for (const auto& [rank, list] : collectives) {
    if (list.size() != bytes.size()) continue;
    for (const Bucket& bucket : buckets) {
      const int last = list[bucket.members.back()];
      for (size_t m = 0; m + 1 < bucket.members.size(); ++m) edit.removed.insert(list[bucket.members[m]]);
      edit.removed.insert(last);
      for (int piece = 0; piece < bucket.pieces; ++piece) {
        Op op = ops[last];
        op.bytes = static_cast<int64_t>(bucket.bytes / bucket.pieces);
        op.duration_ns = latency + slope * bucket.bytes / bucket.pieces;
        op.name = "all-reduce of recorded #" + std::to_string(bucket.members.front()) +
                  (bucket.members.size() > 1 ? ".." + std::to_string(bucket.members.back()) : "") +
                  (bucket.pieces > 1 ? " piece " + std::to_string(piece + 1) + "/" + std::to_string(bucket.pieces) : "") +
                  " (what-if)";
        OpGroup group{OpClass::AllReduce, -1, launched++};
        edit.after[last].push_back({op, group});
      }
    }
    launched = 0;
  }
  int new_count = 0;
  for (const Bucket& bucket : buckets) new_count += bucket.pieces;
  changed = static_cast<int>(bytes.size());
  std::ostringstream text;
  text.precision(3);
  text << bytes.size() << " all-reduces regrouped into " << new_count << " (cap " << cap_mb << " MiB, first bucket kept; sizes from "
       << source << "; fitted " << latency * 1e-3 << " us latency + " << (slope > 0 ? 1.0 / slope : 0) << " GB/s)";
  why = text.str();
  return edit.apply(in);
}

StepReplay remove_host_sync(const StepReplay& in, const std::string& api, int& changed, std::string& why) {
  StepReplay out = in;
  for (Op& op : out.model.ops) {
    // A synchronize call the trace could not tie to a stream or event replays as host time.
    const ApiRole role = classify_api(op.source_api.empty() ? op.name : op.source_api);
    const bool unresolved_sync = op.kind == OpKind::HostCompute &&
                                 (role == ApiRole::StreamSync || role == ApiRole::EventSync || role == ApiRole::DeviceSync);
    if (!is_host_sync(op.kind) && !unresolved_sync) continue;
    if (!api.empty() && op.name.find(api) == std::string::npos && op.source_api.find(api) == std::string::npos) continue;
    op.kind = OpKind::HostCompute;
    op.duration_ns = 0;
    op.event = -1;
    op.sync_stream = -1;
    op.blocks_host = false;
    op.name = op.name + " (removed)";
    ++changed;
  }
  why = std::to_string(changed) + " host synchronisation" + (changed == 1 ? "" : "s") + (api.empty() ? "" : " (" + api + ")") +
        " removed: the host no longer waits there";
  return out;
}

StepReplay apply_change(const StepReplay& in, const WhatIfChange& change, const std::vector<int64_t>& bucket_bytes,
                        int& changed, std::string& why) {
  switch (change.kind) {
    case WhatIfChange::Kind::SecondReloadBuffer: return second_reload_buffer(in, changed, why);
    case WhatIfChange::Kind::CopyToSideStream: return copy_to_side_stream(in, changed, why);
    case WhatIfChange::Kind::BucketCapMb: return regroup_buckets(in, change.bucket_cap_mb, bucket_bytes, changed, why);
    case WhatIfChange::Kind::RemoveHostSync: return remove_host_sync(in, change.sync_api, changed, why);
  }
  return in;
}

// What moved: the schedule figures a change acts on.
std::string effect(const ReplayFigures& before, const ReplayFigures& after) {
  std::ostringstream text;
  text.setf(std::ios::fixed);
  text.precision(1);
  text << "copies hidden behind compute " << before.figures.copy_hidden_fraction * 100 << "% -> "
       << after.figures.copy_hidden_fraction * 100 << "%, host blocked " << ms_text(before.host_blocked_ns) << " -> "
       << ms_text(after.host_blocked_ns);
  return text.str();
}

}  // namespace

WhatIfReport run_what_if(const RecordedStep& step, const StepReplay& replay, const std::vector<WhatIfChange>& changes,
                         const std::vector<int64_t>& bucket_bytes) {
  WhatIfReport report;
  report.measured_ns = step.measured_ns();
  const ReplayFigures base = replay_figures(replay);
  report.replayed_ns = base.figures.step_ns;
  std::optional<StepReplay> combined;  // the changes so far, applied one after another
  for (const WhatIfChange& change : changes) {
    WhatIfOutcome outcome;
    outcome.change = change.spec;
    outcome.old_step_ns = base.figures.step_ns;
    const ReplayFigures after = replay_figures(apply_change(replay, change, bucket_bytes, outcome.ops_changed, outcome.why));
    outcome.new_step_ns = after.figures.step_ns;
    outcome.why += "; " + effect(base, after);
    report.outcomes.push_back(std::move(outcome));
    if (changes.size() > 1) {
      int ignored = 0;
      std::string unused;
      combined = apply_change(combined ? *combined : replay, change, bucket_bytes, ignored, unused);
    }
  }
  if (changes.size() > 1) {
    WhatIfOutcome all;
    for (const WhatIfChange& change : changes) all.change += (all.change.empty() ? "" : " + ") + change.spec;
    all.old_step_ns = base.figures.step_ns;
    const ReplayFigures after = replay_figures(*combined);
    all.new_step_ns = after.figures.step_ns;
    for (const WhatIfOutcome& o : report.outcomes) all.ops_changed += o.ops_changed;
    all.why = "all changes applied together; " + effect(base, after);
    report.outcomes.push_back(std::move(all));
  }
  return report;
}

}  // namespace hookstream
