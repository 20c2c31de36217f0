#include "traces/analyses/copy_compute_overlap.h"

#include <map>

#include "traces/analyses/gpu_intervals.h"

namespace hookstream {

std::vector<CopyOverlap> analyse_copy_compute_overlap(const EventModel& model) {
  return analyse_copy_compute_overlap(model, gpu_ops_by_device(model));
}

std::vector<CopyOverlap> analyse_copy_compute_overlap(const EventModel& model, const GpuOpsByDevice& by_device) {
  std::vector<CopyOverlap> result;
  for (const auto& [key, ops] : by_device) {
    // Kernel time of every stream except the copy's own, built once per copy stream.
    std::map<int, std::vector<GpuInterval>> compute_elsewhere;
    std::map<CopyKind, CopyOverlap> per_direction;
    for (int i : ops) {
      const Op& copy = model.ops[i];
      if (copy.kind != OpKind::Copy) continue;
      if (copy.copy != CopyKind::HostToDevice && copy.copy != CopyKind::DeviceToHost) continue;
      auto found = compute_elsewhere.find(copy.stream);
      if (found == compute_elsewhere.end()) {
        std::vector<GpuInterval> kernels;
        for (int k : ops) {
          const Op& op = model.ops[k];
          if (is_compute(op) && op.stream != copy.stream) kernels.push_back({op.start_ns, op.start_ns + op.duration_ns, k, k});
        }
        found = compute_elsewhere.emplace(copy.stream, merge_intervals(std::move(kernels))).first;
      }
      CopyOverlap& o = per_direction[copy.copy];
      o.rank = key.first;
      o.device = key.second;
      o.direction = copy.copy;
      ++o.copies;
      o.bytes += copy.bytes;
      o.copy_ns += copy.duration_ns;
      o.overlapped_ns += covered_length(found->second, copy.start_ns, copy.start_ns + copy.duration_ns);
    }
    for (auto& [direction, o] : per_direction) {
      o.share = o.copy_ns > 0 ? o.overlapped_ns / o.copy_ns : 0;
      result.push_back(o);
    }
  }
  return result;
}

}  // namespace hookstream
