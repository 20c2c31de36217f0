// HTA's idle-time breakdown per stream (HolisticTraceAnalysis hta/analyzers/breakdown_analysis.py,
// _analyze_idle_time_for_stream) and its kernel breakdown by type (hta/utils/utils.py,
// get_kernel_type), computed on the EventModel so that both importers get them.
//
// Idle time of a stream: each gap between consecutive GPU ops on it (sorted by start) is
//   - host wait: the next op's launching call started after the previous op ended (the host did not
//     enqueue work fast enough);
//   - kernel wait: otherwise, when the gap is below `consecutive_kernel_delay_ns` (HTA's default 30
//     ns: the GPU's own back-to-back launch delay);
//   - other: the rest (waits on other streams, events, the host's syncs).
// Where we differ from HTA (docs/replay.md says so side by side): HTA drops GPU ops whose launching
// call is missing and, by default, the profiler's last step; here every GPU op of the whole trace
// counts, and an op without its call is never a host wait (HTA's comparison with a missing launch
// is false too).
//
// Kernel breakdown by type: communication (HTA: "ncclKernel" in the name; here the importers'
// collective ops, any "nccl" in any case, which also counts NCCL >= 2.19's "ncclDevKernel_"
// kernels HTA's test misses), memory (copies and memsets), computation (the other kernels).
#pragma once

#include <cstdint>
#include <vector>

#include "sim/events/event_model.h"

namespace hookstream {

struct StreamIdleBreakdown {
  int stream = -1;  // index into EventModel::streams
  int64_t gaps = 0;
  double host_wait_ns = 0, kernel_wait_ns = 0, other_ns = 0;
  double idle_ns() const { return host_wait_ns + kernel_wait_ns + other_ns; }
};

enum class IdleCategory { HostWait, KernelWait, Other };
const char* to_string(IdleCategory category);  // "host wait", "kernel wait", "other"

// One gap between consecutive GPU ops of a stream (the timeline draws them).
struct StreamIdleGap {
  int stream = -1;
  double start_ns = 0, duration_ns = 0;
  IdleCategory category = IdleCategory::Other;
  int op_after = -1;  // the op that ended the gap
};
std::vector<StreamIdleGap> stream_idle_gaps(const EventModel& model, double consecutive_kernel_delay_ns = 30);

// Streams with at least two GPU ops, in model order.
std::vector<StreamIdleBreakdown> analyse_stream_idle_breakdown(const EventModel& model,
                                                               double consecutive_kernel_delay_ns = 30);

struct KernelTypeBreakdown {
  int rank = 0;
  int64_t communication_ops = 0, memory_ops = 0, computation_ops = 0;
  double communication_ns = 0, memory_ns = 0, computation_ns = 0;  // summed durations, as HTA sums them
};

// One entry per rank with GPU work, by rank.
std::vector<KernelTypeBreakdown> analyse_kernel_type_breakdown(const EventModel& model);

}  // namespace hookstream
