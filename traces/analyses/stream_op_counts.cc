#include "traces/analyses/stream_op_counts.h"

#include <array>

#include "traces/analyses/gpu_intervals.h"

namespace hookstream {

std::vector<StreamOpCounts> analyse_stream_op_counts(const EventModel& model) {
  std::vector<StreamOpCounts> result(model.streams.size());
  for (size_t s = 0; s < result.size(); ++s) result[s].stream = static_cast<int>(s);
  // Kinds are counted in a plain array per stream and become the map at the end, instead of a map
  // look-up per op of a long trace.
  constexpr size_t kKinds = static_cast<size_t>(OpKind::Marker) + 1;
  std::vector<std::array<int64_t, kKinds>> by_kind(result.size(), std::array<int64_t, kKinds>{});
  for (const Op& op : model.ops) {
    if (op.stream < 0 || op.stream >= static_cast<int>(result.size())) continue;
    StreamOpCounts& counts = result[op.stream];
    const size_t kind = static_cast<size_t>(op.kind);
    if (kind < kKinds) ++by_kind[op.stream][kind];
    else ++counts.by_kind[op.kind];  // past the last enumerator (only a cast can make one): the map, as before
    ++counts.total;
    if (is_gpu_work(op)) counts.busy_ns += op.duration_ns;
  }
  for (size_t s = 0; s < result.size(); ++s) {
    for (size_t k = 0; k < kKinds; ++k) {
      if (by_kind[s][k] > 0) result[s].by_kind[static_cast<OpKind>(k)] = by_kind[s][k];
    }
  }
  return result;
}

}  // namespace hookstream
