// Time intervals of GPU work per device, the common ground of the utilisation and overlap
// analyses. Works on the EventModel only: an op is GPU work when it sits on a stream and has a
// measured start and duration.
#pragma once

#include <map>
#include <utility>
#include <vector>

#include "sim/events/event_model.h"

namespace hookstream {

struct GpuInterval {
  double start = 0, end = 0;
  int first_op = -1;  // the op starting the interval (after merging: the earliest)
  int last_op = -1;   // the op ending it (after merging: the one that ends last)
};

// Kernel, collective, copy or memset with a measured time. Inline: every whole-trace analysis
// asks it of every op (1-2% of a long trace's `hookstream replay` CPU as a call).
inline bool is_gpu_work(const Op& op) {
  if (op.stream < 0 || op.start_ns < 0 || op.duration_ns < 0) return false;
  return op.kind == OpKind::Kernel || op.kind == OpKind::Collective || op.kind == OpKind::Copy ||
         op.kind == OpKind::Memset;
}
// Kernel (not collective) with a measured time.
inline bool is_compute(const Op& op) { return op.kind == OpKind::Kernel && is_gpu_work(op); }

// Indices of GPU-work ops per (rank, device), each list sorted by start then index.
using GpuOpsByDevice = std::map<std::pair<int, int>, std::vector<int>>;
GpuOpsByDevice gpu_ops_by_device(const EventModel& model);

// Union of intervals: sorted, disjoint, touching intervals joined.
std::vector<GpuInterval> merge_intervals(std::vector<GpuInterval> intervals);

// Length of [start, end) covered by `merged` (the output of merge_intervals).
double covered_length(const std::vector<GpuInterval>& merged, double start, double end);

}  // namespace hookstream
