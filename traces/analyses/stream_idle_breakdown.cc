#include "traces/analyses/stream_idle_breakdown.h"

#include <algorithm>
#include <map>

#include "traces/analyses/gpu_intervals.h"

namespace hookstream {

const char* to_string(IdleCategory category) {
  switch (category) {
    case IdleCategory::HostWait: return "host wait";
    case IdleCategory::KernelWait: return "kernel wait";
    case IdleCategory::Other: return "other";
  }
  return "other";
}

std::vector<StreamIdleGap> stream_idle_gaps(const EventModel& model, double consecutive_kernel_delay_ns) {
  // Each GPU op's launching call: ops are in host issue order per rank and a GPU op comes right
  // after the call that issued it (trace_builder.h), so it is the rank's last host call before it.
  // Markers (NVTX / user annotations) are ranges, not calls.
  struct Launched {
    int op;
    double start;   // the op's own start, held here so the sort reads no op (a cache miss per compare)
    double launch;  // the call's start; < 0: no call (HTA: ts_runtime missing)
  };
  // Per stream index (GPU work has a stream of the model), taken in stream order below, instead
  // of a map look-up per op of a long trace.
  std::vector<std::vector<Launched>> by_stream(model.streams.size());
  std::map<int, double> last_call;  // rank -> start of its last host call
  for (int i = 0; i < static_cast<int>(model.ops.size()); ++i) {
    const Op& op = model.ops[i];
    if (is_gpu_work(op)) {
      const auto call = last_call.find(op.rank);
      if (static_cast<size_t>(op.stream) >= by_stream.size()) by_stream.resize(op.stream + 1);
      by_stream[op.stream].push_back({i, op.start_ns, op.correlation >= 0 && call != last_call.end() ? call->second : -1.0});
    } else if (op.kind != OpKind::Marker) {
      last_call[op.rank] = op.start_ns;  // event records and stream waits are calls too
    }
  }
  std::vector<StreamIdleGap> gaps;
  for (int stream = 0; stream < static_cast<int>(by_stream.size()); ++stream) {
    std::vector<Launched>& ops = by_stream[stream];
    if (ops.empty()) continue;
    std::stable_sort(ops.begin(), ops.end(), [](const Launched& a, const Launched& b) { return a.start < b.start; });
    double previous_end = model.ops[ops[0].op].start_ns + std::max(0.0, model.ops[ops[0].op].duration_ns);
    for (size_t k = 1; k < ops.size(); ++k) {
      const Op& op = model.ops[ops[k].op];
      const double idle_from = previous_end, gap = op.start_ns - idle_from;
      previous_end = std::max(previous_end, op.start_ns + std::max(0.0, op.duration_ns));
      if (gap <= 0) continue;
      IdleCategory category = IdleCategory::Other;
      if (ops[k].launch >= 0 && ops[k].launch > idle_from) category = IdleCategory::HostWait;
      else if (gap < consecutive_kernel_delay_ns) category = IdleCategory::KernelWait;
      gaps.push_back({stream, idle_from, gap, category, ops[k].op});
    }
  }
  return gaps;
}

std::vector<StreamIdleBreakdown> analyse_stream_idle_breakdown(const EventModel& model,
                                                               double consecutive_kernel_delay_ns) {
  std::vector<int64_t> gpu_ops(model.streams.size(), 0);  // per stream index
  for (const Op& op : model.ops) {
    if (!is_gpu_work(op)) continue;
    if (static_cast<size_t>(op.stream) >= gpu_ops.size()) gpu_ops.resize(op.stream + 1, 0);
    ++gpu_ops[op.stream];
  }
  std::map<int, StreamIdleBreakdown> by_stream;
  for (int stream = 0; stream < static_cast<int>(gpu_ops.size()); ++stream) {
    if (gpu_ops[stream] >= 2) by_stream[stream].stream = stream;
  }
  for (const StreamIdleGap& gap : stream_idle_gaps(model, consecutive_kernel_delay_ns)) {
    StreamIdleBreakdown& s = by_stream[gap.stream];
    ++s.gaps;
    (gap.category == IdleCategory::HostWait ? s.host_wait_ns
     : gap.category == IdleCategory::KernelWait ? s.kernel_wait_ns
                                                : s.other_ns) += gap.duration_ns;
  }
  std::vector<StreamIdleBreakdown> out;
  for (const auto& [stream, s] : by_stream) out.push_back(s);
  return out;
}

std::vector<KernelTypeBreakdown> analyse_kernel_type_breakdown(const EventModel& model) {
  std::map<int, KernelTypeBreakdown> by_rank;
  for (const Op& op : model.ops) {
    if (!is_gpu_work(op)) continue;
    KernelTypeBreakdown& b = by_rank[op.rank];
    b.rank = op.rank;
    const double d = std::max(0.0, op.duration_ns);
    if (op.kind == OpKind::Collective) {
      ++b.communication_ops;
      b.communication_ns += d;
    } else if (op.kind == OpKind::Copy || op.kind == OpKind::Memset) {
      ++b.memory_ops;
      b.memory_ns += d;
    } else {
      ++b.computation_ops;
      b.computation_ns += d;
    }
  }
  std::vector<KernelTypeBreakdown> out;
  for (const auto& [rank, b] : by_rank) out.push_back(b);
  return out;
}

}  // namespace hookstream
