#include "traces/analyses/memory_bandwidth.h"

#include <algorithm>
#include <map>
#include <utility>

#include "traces/analyses/gpu_intervals.h"

namespace hookstream {

namespace {

int type_order(const Op& op) {
  if (op.kind == OpKind::Memset) return 5;
  switch (op.copy) {
    case CopyKind::HostToDevice: return 0;
    case CopyKind::DeviceToHost: return 1;
    case CopyKind::DeviceToDevice: return 2;
    case CopyKind::PeerToPeer: return 3;
    default: return 4;
  }
}

const char* type_name(int order) {
  static const char* const names[] = {"Memcpy HtoD", "Memcpy DtoH", "Memcpy DtoD", "Memcpy PtoP", "Memcpy other", "Memset"};
  return names[order];
}

}  // namespace

namespace {

struct Accumulated {
  MemoryBandwidth summary;
  std::vector<std::pair<double, double>> changes;  // (time, +/- GB/s), sorted by finish()
};

std::map<std::pair<int, int>, Accumulated> accumulate(const EventModel& model) {
  std::map<std::pair<int, int>, Accumulated> by_type;
  for (const Op& op : model.ops) {
    if (!is_gpu_work(op) || (op.kind != OpKind::Copy && op.kind != OpKind::Memset)) continue;
    const int order = type_order(op);
    Accumulated& a = by_type[{op.rank, order}];
    a.summary.rank = op.rank;
    a.summary.type = type_name(order);
    ++a.summary.ops;
    if (op.bytes <= 0 || op.duration_ns <= 0) continue;
    a.summary.bytes += op.bytes;
    a.summary.time_ns += op.duration_ns;
    const double gbps = static_cast<double>(op.bytes) / op.duration_ns;  // bytes per ns = GB/s
    a.changes.emplace_back(op.start_ns, gbps);
    a.changes.emplace_back(op.start_ns + op.duration_ns, -gbps);
  }
  // Ends before starts at the same instant: back-to-back ops do not add up.
  for (auto& [key, a] : by_type) std::sort(a.changes.begin(), a.changes.end());
  return by_type;
}

}  // namespace

std::vector<MemoryBandwidth> analyse_memory_bandwidth(const EventModel& model) {
  std::vector<MemoryBandwidth> out;
  for (auto& [key, a] : accumulate(model)) {
    double current = 0;
    for (const auto& [time, delta] : a.changes) {
      current += delta;
      a.summary.peak_gbps = std::max(a.summary.peak_gbps, current);
    }
    if (a.summary.time_ns > 0) a.summary.achieved_gbps = static_cast<double>(a.summary.bytes) / a.summary.time_ns;
    out.push_back(a.summary);
  }
  return out;
}

std::vector<MemoryBandwidthSeries> memory_bandwidth_series(const EventModel& model) {
  std::vector<MemoryBandwidthSeries> out;
  for (auto& [key, a] : accumulate(model)) {
    MemoryBandwidthSeries series{a.summary.rank, a.summary.type, {}};
    double current = 0;
    for (size_t k = 0; k < a.changes.size(); ++k) {
      current += a.changes[k].second;
      // One point per instant: the value after every change at that time; rounding noise is 0.
      if (k + 1 < a.changes.size() && a.changes[k + 1].first == a.changes[k].first) continue;
      series.points.emplace_back(a.changes[k].first, current < 1e-9 ? 0.0 : current);
    }
    out.push_back(std::move(series));
  }
  return out;
}

}  // namespace hookstream
