#include "traces/replay_report.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <vector>

#include "traces/analyses/gpu_intervals.h"
#include "traces/cuda_api.h"

namespace hookstream {

ReplayReport analyse_replay(const EventModel& model) {
  ReplayReport r;
  r.source = model.source;
  r.trace_streams = model.streams;
  r.trace_events = static_cast<int64_t>(model.events.size());
  r.trace_ops = static_cast<int64_t>(model.ops.size());
  // One sweep with plain counters: ops come rank by rank, so the rank set is touched only when the
  // rank changes, and kinds are counted in an array before they become the report's map.
  std::set<int> ranks;
  for (const Stream& s : model.streams) ranks.insert(s.rank);
  std::vector<int64_t> by_kind(static_cast<size_t>(OpKind::Marker) + 1, 0);
  bool any = false;
  int last_rank = 0;
  for (const Op& op : model.ops) {
    if (!any || op.rank != last_rank) ranks.insert(op.rank);
    any = true;
    last_rank = op.rank;
    const size_t kind = static_cast<size_t>(op.kind);
    if (kind >= by_kind.size()) by_kind.resize(kind + 1, 0);
    ++by_kind[kind];
    if (is_gpu_work(op)) ++r.gpu_ops;
  }
  for (size_t k = 0; k < by_kind.size(); ++k) {
    if (by_kind[k] > 0) r.ops_by_kind[static_cast<OpKind>(k)] = by_kind[k];
  }
  r.ranks = static_cast<int>(ranks.size());
  const GpuOpsByDevice by_device = gpu_ops_by_device(model);  // grouped and sorted once for all three
  r.devices = analyse_device_utilisation(model, by_device);
  r.copy_overlap = analyse_copy_compute_overlap(model, by_device);
  r.collective_overlap = analyse_collective_compute_overlap(model, by_device);
  r.pageable = analyse_pageable_async_copies(model);
  r.sync = analyse_synchronising_calls(model);
  r.streams = analyse_stream_op_counts(model);
  for (const StreamOpCounts& s : r.streams) r.streams_used += s.total > 0 ? 1 : 0;
  r.kernel_types = analyse_kernel_type_breakdown(model);
  r.idle = analyse_stream_idle_breakdown(model);
  r.memory_bandwidth = analyse_memory_bandwidth(model);
  const auto cite = [&](int index) {
    if (index >= 0) r.cited_ops.emplace(index, model.ops.at(index));
  };
  for (const DeviceUtilisation& d : r.devices) {
    for (const DeviceIdleGap& g : d.largest_gaps) {
      cite(g.op_before);
      cite(g.op_after);
    }
  }
  for (int i : r.pageable.examples) cite(i);
  return r;
}

namespace {

std::string format(const char* fmt, double a) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, fmt, a);
  return buffer;
}

// Durations in the unit that keeps 3-4 significant digits.
std::string duration(double ns) {
  if (ns >= 1e9) return format("%.3f s", ns / 1e9);
  if (ns >= 1e6) return format("%.3f ms", ns / 1e6);
  if (ns >= 1e3) return format("%.1f us", ns / 1e3);
  return format("%.0f ns", ns);
}

std::string bytes(int64_t b) {
  if (b >= (int64_t{1} << 30)) return format("%.2f GiB", b / double(int64_t{1} << 30));
  if (b >= (int64_t{1} << 20)) return format("%.2f MiB", b / double(int64_t{1} << 20));
  if (b >= 1024) return format("%.1f KiB", b / 1024.0);
  return std::to_string(b) + " B";
}

std::string percent(double share) { return format("%.1f%%", share * 100); }

const Op& cited(const ReplayReport& r, int index) { return r.cited_ops.at(index); }

std::string stream_label(const ReplayReport& r, int stream) {
  if (stream < 0) return "host";
  const Stream& s = r.trace_streams[stream];
  return "stream " + std::to_string(s.id) + (s.legacy_default ? " (legacy default)" : "");
}

nlohmann::json op_json(const ReplayReport& r, int index) {
  if (index < 0) return nullptr;
  const Op& op = cited(r, index);
  nlohmann::json j = {{"index", index}, {"kind", to_string(op.kind)}, {"name", op.name}, {"rank", op.rank},
                      {"start_ns", op.start_ns}, {"duration_ns", op.duration_ns}};
  j["stream"] = op.stream >= 0 ? nlohmann::json(r.trace_streams[op.stream].id) : nlohmann::json(nullptr);
  if (!op.source_api.empty()) j["source_api"] = op.source_api;
  if (op.bytes > 0) j["bytes"] = op.bytes;
  return j;
}

}  // namespace

std::string render_replay_text(const ReplayReport& r) {
  std::string out;
  const auto count = [&](OpKind k) {
    const auto found = r.ops_by_kind.find(k);
    return found == r.ops_by_kind.end() ? int64_t{0} : found->second;
  };
  // nsys declares every stream the process created (TARGET_INFO_CUDA_STREAM): "77 stream(s)" for
  // one that ran work said the wrong thing, so both counts are given when they differ.
  const std::string streams = static_cast<int64_t>(r.trace_streams.size()) == r.streams_used
                                  ? std::to_string(r.streams_used) + " stream(s)"
                                  : std::to_string(r.trace_streams.size()) + " stream(s) declared, " +
                                        std::to_string(r.streams_used) + " used";
  out += "hookstream replay: " + std::to_string(r.ranks) + " rank(s), " + streams + ", " + std::to_string(r.gpu_ops) + " GPU ops (" + std::to_string(count(OpKind::Kernel)) +
         " kernels, " + std::to_string(count(OpKind::Collective)) + " NCCL kernels, " +
         std::to_string(count(OpKind::Copy)) + " copies, " + std::to_string(count(OpKind::Memset)) + " memsets), " +
         std::to_string(count(OpKind::HostCompute)) + " other host calls\n";
  out += "  from " + r.source + "\n";
  for (const TraceContents& c : r.contents) {
    for (const auto& [what, n] : c.rows_not_ops) out += "  read past in " + c.file + ": " + std::to_string(n) + " " + what + "\n";
  }
  if (r.gpu_ops == 0) {
    out += "\nNo GPU activity in the trace (no kernel, copy or memset).";
    // Say what it did hold: the ops it became (host calls, markers) and what was read past.
    std::string held;
    for (const auto& [kind, n] : r.ops_by_kind) held += (held.empty() ? "" : ", ") + std::to_string(n) + " " + to_string(kind);
    out += held.empty() ? " No host calls or annotations either.\n" : " It holds " + held + ".\n";
    bool other = false;
    for (const TraceContents& c : r.contents) {
      if (c.other_events.empty()) continue;
      if (!other) out += "Not imported (not GPU work on CUDA streams):\n";
      other = true;
      std::vector<std::pair<int64_t, std::string>> by_count;
      for (const auto& [what, n] : c.other_events) by_count.emplace_back(-n, what);
      std::sort(by_count.begin(), by_count.end());
      out += "  " + c.file + ":";
      bool first = true;
      for (const auto& [minus_n, what] : by_count) {
        out += (first ? " " : ", ") + std::to_string(-minus_n) + " " + what;
        first = false;
      }
      out += "\n";
    }
  }

  if (!r.devices.empty()) out += "\nGPU utilisation (busy share of the span from first to last GPU op)\n";
  for (const DeviceUtilisation& d : r.devices) {
    out += "  rank " + std::to_string(d.rank) + " device " + std::to_string(d.device) + ": " +
           percent(d.utilisation) + " busy over " + duration(d.last_ns - d.first_ns) + ", " +
           std::to_string(d.gpu_ops) + " ops\n";
    for (const DeviceIdleGap& g : d.largest_gaps) {
      out += "    idle " + duration(g.duration_ns) + " at +" + duration(g.start_ns - d.first_ns) + ": after " +
             display_op_name(cited(r, g.op_before).name, 50) + ", before " + display_op_name(cited(r, g.op_after).name, 50) +
             "\n";
    }
  }

  if (!r.copy_overlap.empty()) out += "\nCopy/compute overlap (copy time with a kernel running on another stream)\n";
  for (const CopyOverlap& c : r.copy_overlap) {
    out += "  rank " + std::to_string(c.rank) + " device " + std::to_string(c.device) + " " + to_string(c.direction) +
           ": " + percent(c.share) + " of " + duration(c.copy_ns) + " (" + std::to_string(c.copies) + " copies, " +
           bytes(c.bytes) + ")\n";
  }
  if (!r.collective_overlap.empty()) out += "\nNCCL/compute overlap (NCCL kernel time with compute on another stream)\n";
  for (const CollectiveOverlap& c : r.collective_overlap) {
    out += "  rank " + std::to_string(c.rank) + " device " + std::to_string(c.device) + ": " + percent(c.share) +
           " of " + duration(c.collective_ns) + " (" + std::to_string(c.collectives) + " NCCL kernels)\n";
  }

  if (!r.kernel_types.empty()) {
    out += "\nGPU time by kernel type (HTA's breakdown: communication = NCCL kernels, memory = copies and memsets)\n";
  }
  for (const KernelTypeBreakdown& k : r.kernel_types) {
    const double total = k.communication_ns + k.memory_ns + k.computation_ns;
    const auto part = [&](const char* what, double ns, int64_t ops) {
      return std::string(what) + " " + duration(ns) + " (" + percent(total > 0 ? ns / total : 0) + ", " +
             std::to_string(ops) + " ops)";
    };
    out += "  rank " + std::to_string(k.rank) + ": " + part("computation", k.computation_ns, k.computation_ops) + ", " +
           part("communication", k.communication_ns, k.communication_ops) + ", " +
           part("memory", k.memory_ns, k.memory_ops) + "\n";
  }
  if (!r.idle.empty()) {
    out += "\nIdle time per stream (HTA's breakdown: host wait = the next op's launch came after the stream ran dry; "
           "kernel wait = a gap under 30 ns; other = waits on other streams, events or syncs)\n";
  }
  for (const StreamIdleBreakdown& s : r.idle) {
    const Stream& stream = r.trace_streams[s.stream];
    const double idle = s.idle_ns();
    out += "  rank " + std::to_string(stream.rank) + " device " + std::to_string(stream.device) + " " +
           stream_label(r, s.stream) + ": idle " + duration(idle) + " in " + std::to_string(s.gaps) + " gaps: host wait " +
           duration(s.host_wait_ns) + " (" + percent(idle > 0 ? s.host_wait_ns / idle : 0) + "), kernel wait " +
           duration(s.kernel_wait_ns) + ", other " + duration(s.other_ns) + " (" + percent(idle > 0 ? s.other_ns / idle : 0) +
           ")\n";
  }

  if (!r.memory_bandwidth.empty()) {
    out += "\nMemory bandwidth (HTA's summary: achieved = bytes over copy time; peak = ops of a type running at once)\n";
  }
  for (const MemoryBandwidth& m : r.memory_bandwidth) {
    out += "  rank " + std::to_string(m.rank) + " " + m.type + ": " + std::to_string(m.ops) + " ops, " + bytes(m.bytes) +
           " in " + duration(m.time_ns) + ", achieved " + format("%.2f GB/s", m.achieved_gbps) + ", peak " +
           format("%.2f GB/s", m.peak_gbps) + "\n";
  }

  out += "\nAsync copies from pageable memory: " + std::to_string(r.pageable.copies);
  if (r.pageable.copies > 0) {
    out += " (" + bytes(r.pageable.bytes) + ", " + duration(r.pageable.copy_ns) +
           ") - synchronous in effect; pin the host buffers\n";
    for (int i : r.pageable.examples) {
      const Op& op = cited(r, i);
      out += "    " + display_op_name(op.name, 60) + " via " + op.source_api + ", rank " + std::to_string(op.rank) + " " +
             stream_label(r, op.stream) + ", " + bytes(op.bytes) + "\n";
    }
  } else {
    out += "\n";
  }

  out += "\nSynchronising calls: " + std::to_string(r.sync.calls) + ", host blocked " + duration(r.sync.blocked_ns) +
         "\n";
  for (size_t i = 0; i < r.sync.by_api.size() && i < 8; ++i) {
    const SyncCallSite& s = r.sync.by_api[i];
    out += "  " + s.api + ": " + std::to_string(s.calls) + " calls, " + duration(s.blocked_ns) + "\n";
  }
  out += "  waits: " + std::to_string(r.sync.stream_waits) + " stream waits, " + std::to_string(r.sync.event_syncs) +
         " event syncs, " + std::to_string(r.sync.waits_matched) + " matched to their event record\n";
  const int64_t unmatched = r.sync.stream_waits + r.sync.event_syncs - r.sync.waits_matched;
  if (unmatched > 0) {
    // Kineto names a wait's record only when CUPTI reported the cudaEventRecord (PyTorch 2.11 with
    // CUDA 13 writes wait_on_cuda_event_record_corr_id -1 throughout); nsys when the record fell in
    // the capture window. Without it the wait orders nothing in the analyses below.
    out += "    " + std::to_string(unmatched) +
           " wait(s) name no event record in the trace (recorded before the window, or a profiler that "
           "does not report records): the order they give is unknown here, not assumed\n";
  }

  out += "\nStreams\n";
  // Streams a trace declares but never used (nsys lists every stream the process created) go on
  // one line per device so the used ones stand out.
  std::map<std::pair<int, int>, std::string> unused;
  for (const StreamOpCounts& s : r.streams) {
    const Stream& stream = r.trace_streams[s.stream];
    if (s.total != 0) continue;
    std::string& ids = unused[{stream.rank, stream.device}];
    ids += (ids.empty() ? "" : ", ") + std::to_string(stream.id);
  }
  for (const StreamOpCounts& s : r.streams) {
    const Stream& stream = r.trace_streams[s.stream];
    if (s.total == 0) continue;
    out += "  rank " + std::to_string(stream.rank) + " device " + std::to_string(stream.device) + " " +
           stream_label(r, s.stream) + ": ";
    bool first = true;
    for (const auto& [kind, n] : s.by_kind) {
      out += (first ? "" : ", ") + std::to_string(n) + " " + to_string(kind);
      first = false;
    }
    if (s.busy_ns > 0) out += "; busy " + duration(s.busy_ns);
    out += "\n";
  }
  for (const auto& [device, ids] : unused) {
    out += "  rank " + std::to_string(device.first) + " device " + std::to_string(device.second) +
           ": no ops on stream(s) " + ids + "\n";
  }
  return out;
}

nlohmann::json render_replay_json(const ReplayReport& r) {
  nlohmann::json j;
  j["schema"] = "hookstream.replay/1";
  j["source"] = r.source;
  nlohmann::json by_kind = nlohmann::json::object();
  for (const auto& [kind, n] : r.ops_by_kind) by_kind[to_string(kind)] = n;
  j["summary"] = {{"ranks", r.ranks}, {"streams", r.trace_streams.size()}, {"streams_used", r.streams_used},
                  {"events", r.trace_events}, {"ops", r.trace_ops}, {"gpu_ops", r.gpu_ops}, {"ops_by_kind", by_kind}};
  // What the files held besides their ops: rows that are not ops always, other events when there
  // is no GPU work (what such a trace holds instead). Absent when there is nothing to list.
  nlohmann::json not_imported = nlohmann::json::array();
  for (const TraceContents& c : r.contents) {
    for (const auto& [what, n] : c.rows_not_ops) not_imported.push_back({{"file", c.file}, {"what", what}, {"count", n}});
    if (r.gpu_ops != 0) continue;
    for (const auto& [what, n] : c.other_events) not_imported.push_back({{"file", c.file}, {"what", what}, {"count", n}});
  }
  if (!not_imported.empty()) j["summary"]["not_imported"] = not_imported;
  j["devices"] = nlohmann::json::array();
  for (const DeviceUtilisation& d : r.devices) {
    nlohmann::json gaps = nlohmann::json::array();
    for (const DeviceIdleGap& g : d.largest_gaps) {
      gaps.push_back({{"start_ns", g.start_ns}, {"duration_ns", g.duration_ns}, {"before", op_json(r, g.op_before)},
                      {"after", op_json(r, g.op_after)}});
    }
    j["devices"].push_back({{"rank", d.rank}, {"device", d.device}, {"gpu_ops", d.gpu_ops}, {"first_ns", d.first_ns},
                            {"last_ns", d.last_ns}, {"busy_ns", d.busy_ns}, {"utilisation", d.utilisation},
                            {"largest_gaps", gaps}});
  }
  j["copy_compute_overlap"] = nlohmann::json::array();
  for (const CopyOverlap& c : r.copy_overlap) {
    j["copy_compute_overlap"].push_back({{"rank", c.rank}, {"device", c.device}, {"direction", to_string(c.direction)},
                                         {"copies", c.copies}, {"bytes", c.bytes}, {"copy_ns", c.copy_ns},
                                         {"overlapped_ns", c.overlapped_ns}, {"share", c.share}});
  }
  j["collective_compute_overlap"] = nlohmann::json::array();
  for (const CollectiveOverlap& c : r.collective_overlap) {
    j["collective_compute_overlap"].push_back({{"rank", c.rank}, {"device", c.device}, {"collectives", c.collectives},
                                               {"collective_ns", c.collective_ns},
                                               {"overlapped_ns", c.overlapped_ns}, {"share", c.share}});
  }
  nlohmann::json examples = nlohmann::json::array();
  for (int i : r.pageable.examples) examples.push_back(op_json(r, i));
  j["pageable_async_copies"] = {{"copies", r.pageable.copies}, {"bytes", r.pageable.bytes},
                                {"copy_ns", r.pageable.copy_ns}, {"examples", examples}};
  nlohmann::json sites = nlohmann::json::array();
  for (const SyncCallSite& s : r.sync.by_api) sites.push_back({{"api", s.api}, {"calls", s.calls}, {"blocked_ns", s.blocked_ns}});
  j["synchronising_calls"] = {{"calls", r.sync.calls}, {"blocked_ns", r.sync.blocked_ns}, {"by_api", sites},
                              {"stream_waits", r.sync.stream_waits}, {"event_syncs", r.sync.event_syncs},
                              {"waits_matched", r.sync.waits_matched}};
  j["kernel_type_breakdown"] = nlohmann::json::array();
  for (const KernelTypeBreakdown& k : r.kernel_types) {
    j["kernel_type_breakdown"].push_back({{"rank", k.rank},
                                          {"computation", {{"ops", k.computation_ops}, {"ns", k.computation_ns}}},
                                          {"communication", {{"ops", k.communication_ops}, {"ns", k.communication_ns}}},
                                          {"memory", {{"ops", k.memory_ops}, {"ns", k.memory_ns}}}});
  }
  j["memory_bandwidth"] = nlohmann::json::array();
  for (const MemoryBandwidth& m : r.memory_bandwidth) {
    j["memory_bandwidth"].push_back({{"rank", m.rank}, {"type", m.type}, {"ops", m.ops}, {"bytes", m.bytes},
                                     {"time_ns", m.time_ns}, {"achieved_gbps", m.achieved_gbps}, {"peak_gbps", m.peak_gbps}});
  }
  j["stream_idle_breakdown"] = nlohmann::json::array();
  for (const StreamIdleBreakdown& s : r.idle) {
    const Stream& stream = r.trace_streams[s.stream];
    j["stream_idle_breakdown"].push_back({{"rank", stream.rank}, {"device", stream.device}, {"stream", stream.id},
                                          {"gaps", s.gaps}, {"idle_ns", s.idle_ns()}, {"host_wait_ns", s.host_wait_ns},
                                          {"kernel_wait_ns", s.kernel_wait_ns}, {"other_ns", s.other_ns}});
  }
  j["streams"] = nlohmann::json::array();
  for (const StreamOpCounts& s : r.streams) {
    const Stream& stream = r.trace_streams[s.stream];
    nlohmann::json kinds = nlohmann::json::object();
    for (const auto& [kind, n] : s.by_kind) kinds[to_string(kind)] = n;
    j["streams"].push_back({{"rank", stream.rank}, {"device", stream.device}, {"id", stream.id},
                            {"name", stream.name}, {"legacy_default", stream.legacy_default},
                            {"non_blocking", stream.non_blocking}, {"priority", stream.priority},
                            {"ops", s.total}, {"busy_ns", s.busy_ns}, {"ops_by_kind", kinds}});
  }
  return j;
}

}  // namespace hookstream
