#include "traces/analyses/gpu_intervals.h"

#include <algorithm>

namespace hookstream {

GpuOpsByDevice gpu_ops_by_device(const EventModel& model) {
  // Sorted as (start, op) pairs held side by side rather than op indices compared through the
  // model: the same stable order (ops are gathered in index order), without a cache miss per compare.
  std::map<std::pair<int, int>, std::vector<std::pair<double, int>>> timed;
  std::pair<int, int> last_key{-1, -1};
  std::vector<std::pair<double, int>>* last = nullptr;
  for (size_t i = 0; i < model.ops.size(); ++i) {
    const Op& op = model.ops[i];
    if (!is_gpu_work(op)) continue;
    const Stream& s = model.streams[op.stream];
    const std::pair<int, int> key{s.rank, s.device};
    if (!last || key != last_key) {
      last = &timed[key];
      last_key = key;
    }
    last->emplace_back(op.start_ns, static_cast<int>(i));
  }
  GpuOpsByDevice by_device;
  for (auto& [key, ops] : timed) {
    std::stable_sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<int>& indices = by_device[key];
    indices.reserve(ops.size());
    for (const auto& op : ops) indices.push_back(op.second);
  }
  return by_device;
}

std::vector<GpuInterval> merge_intervals(std::vector<GpuInterval> intervals) {
  std::stable_sort(intervals.begin(), intervals.end(),
                   [](const GpuInterval& a, const GpuInterval& b) { return a.start < b.start; });
  std::vector<GpuInterval> merged;
  for (const GpuInterval& i : intervals) {
    if (!merged.empty() && i.start <= merged.back().end) {
      if (i.end > merged.back().end) {
        merged.back().end = i.end;
        merged.back().last_op = i.last_op;
      }
    } else {
      merged.push_back(i);
    }
  }
  return merged;
}

double covered_length(const std::vector<GpuInterval>& merged, double start, double end) {
  if (end <= start || merged.empty()) return 0;
  // First merged interval that ends after `start`.
  auto it = std::upper_bound(merged.begin(), merged.end(), start,
                             [](double value, const GpuInterval& i) { return value < i.end; });
  double covered = 0;
  for (; it != merged.end() && it->start < end; ++it) {
    covered += std::min(end, it->end) - std::max(start, it->start);
  }
  return covered;
}

}  // namespace hookstream
