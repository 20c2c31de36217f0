#include "traces/analyses/stream_op_counts.h"

#include "traces/analyses/gpu_intervals.h"

namespace hookstream {

std::vector<StreamOpCounts> analyse_stream_op_counts(const EventModel& model) {
  std::vector<StreamOpCounts> result(model.streams.size());
  for (size_t s = 0; s < result.size(); ++s) result[s].stream = static_cast<int>(s);
  for (const Op& op : model.ops) {
    if (op.stream < 0 || op.stream >= static_cast<int>(result.size())) continue;
    StreamOpCounts& counts = result[op.stream];
    ++counts.by_kind[op.kind];
    ++counts.total;
    if (is_gpu_work(op)) counts.busy_ns += op.duration_ns;
  }
  return result;
}

}  // namespace hookstream
