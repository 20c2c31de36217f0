#include "traces/analyses/collective_compute_overlap.h"

#include <map>

#include "traces/analyses/gpu_intervals.h"

namespace hookstream {

std::vector<CollectiveOverlap> analyse_collective_compute_overlap(const EventModel& model) {
  return analyse_collective_compute_overlap(model, gpu_ops_by_device(model));
}

std::vector<CollectiveOverlap> analyse_collective_compute_overlap(const EventModel& model, const GpuOpsByDevice& by_device) {
  std::vector<CollectiveOverlap> result;
  for (const auto& [key, ops] : by_device) {
    std::map<int, std::vector<GpuInterval>> compute_elsewhere;
    CollectiveOverlap o;
    o.rank = key.first;
    o.device = key.second;
    for (int i : ops) {
      const Op& collective = model.ops[i];
      if (collective.kind != OpKind::Collective) continue;
      auto found = compute_elsewhere.find(collective.stream);
      if (found == compute_elsewhere.end()) {
        std::vector<GpuInterval> kernels;
        for (int k : ops) {
          const Op& op = model.ops[k];
          if (is_compute(op) && op.stream != collective.stream) {
            kernels.push_back({op.start_ns, op.start_ns + op.duration_ns, k, k});
          }
        }
        found = compute_elsewhere.emplace(collective.stream, merge_intervals(std::move(kernels))).first;
      }
      ++o.collectives;
      o.collective_ns += collective.duration_ns;
      o.overlapped_ns +=
          covered_length(found->second, collective.start_ns, collective.start_ns + collective.duration_ns);
    }
    if (o.collectives == 0) continue;
    o.share = o.collective_ns > 0 ? o.overlapped_ns / o.collective_ns : 0;
    result.push_back(o);
  }
  return result;
}

}  // namespace hookstream
