#include "traces/analyses/device_utilisation.h"

#include <algorithm>

#include "traces/analyses/gpu_intervals.h"

namespace hookstream {

std::vector<DeviceUtilisation> analyse_device_utilisation(const EventModel& model, int max_gaps) {
  return analyse_device_utilisation(model, gpu_ops_by_device(model), max_gaps);
}

std::vector<DeviceUtilisation> analyse_device_utilisation(const EventModel& model, const GpuOpsByDevice& by_device, int max_gaps) {
  std::vector<DeviceUtilisation> result;
  for (const auto& [key, ops] : by_device) {
    DeviceUtilisation u;
    u.rank = key.first;
    u.device = key.second;
    u.gpu_ops = static_cast<int64_t>(ops.size());
    std::vector<GpuInterval> intervals;
    intervals.reserve(ops.size());
    for (int i : ops) {
      const Op& op = model.ops[i];
      intervals.push_back(GpuInterval{op.start_ns, op.start_ns + op.duration_ns, i, i});
    }
    const std::vector<GpuInterval> merged = merge_intervals(std::move(intervals));
    u.first_ns = merged.front().start;
    u.last_ns = merged.front().end;
    std::vector<DeviceIdleGap> gaps;
    for (size_t i = 0; i < merged.size(); ++i) {
      u.busy_ns += merged[i].end - merged[i].start;
      u.last_ns = std::max(u.last_ns, merged[i].end);
      if (i > 0) {
        gaps.push_back(DeviceIdleGap{merged[i - 1].end, merged[i].start - merged[i - 1].end, merged[i - 1].last_op,
                               merged[i].first_op});
      }
    }
    const double span = u.last_ns - u.first_ns;
    u.utilisation = span > 0 ? u.busy_ns / span : 0;
    // Only the longest max_gaps are kept: a partial sort, longest first and ties by start (the gaps
    // lie between disjoint intervals, so no two start together and the order is total).
    const size_t kept = std::min(gaps.size(), static_cast<size_t>(std::max(max_gaps, 0)));
    std::partial_sort(gaps.begin(), gaps.begin() + static_cast<std::ptrdiff_t>(kept), gaps.end(),
                      [](const DeviceIdleGap& a, const DeviceIdleGap& b) {
                        return a.duration_ns != b.duration_ns ? a.duration_ns > b.duration_ns : a.start_ns < b.start_ns;
                      });
    gaps.resize(kept);
    u.largest_gaps = std::move(gaps);
    result.push_back(std::move(u));
  }
  return result;
}

}  // namespace hookstream
