// How much host<->device copy time is hidden behind compute: the share of HtoD and DtoH copy time
// during which a kernel ran on another stream of the same device. Offloading (activations, CPU
// optimizer states) only pays when this is high; a copy on the compute stream never overlaps.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/events/event_model.h"
#include "traces/analyses/gpu_intervals.h"

namespace hookstream {

struct CopyOverlap {
  int rank = 0;
  int device = 0;
  CopyKind direction = CopyKind::HostToDevice;  // HostToDevice or DeviceToHost
  int64_t copies = 0;
  int64_t bytes = 0;
  double copy_ns = 0;        // total copy time
  double overlapped_ns = 0;  // of which a kernel ran on another stream
  double share = 0;          // overlapped / copy, 0 without copy time
};

// One entry per (rank, device, direction) that has copies, in that order.
std::vector<CopyOverlap> analyse_copy_compute_overlap(const EventModel& model);
// The same over GPU ops already grouped by gpu_ops_by_device (analyses of one model share them).
std::vector<CopyOverlap> analyse_copy_compute_overlap(const EventModel& model, const GpuOpsByDevice& by_device);

}  // namespace hookstream
