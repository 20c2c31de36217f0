// NCCL/compute overlap: the share of collective (NCCL kernel) time during which a compute kernel
// ran on another stream of the same device. DDP's bucketed all-reduce exists to make this high;
// near zero means communication is exposed.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/events/event_model.h"
#include "traces/analyses/gpu_intervals.h"

namespace hookstream {

struct CollectiveOverlap {
  int rank = 0;
  int device = 0;
  int64_t collectives = 0;
  double collective_ns = 0;
  double overlapped_ns = 0;
  double share = 0;
};

// One entry per (rank, device) with collectives.
std::vector<CollectiveOverlap> analyse_collective_compute_overlap(const EventModel& model);
// The same over GPU ops already grouped by gpu_ops_by_device (analyses of one model share them).
std::vector<CollectiveOverlap> analyse_collective_compute_overlap(const EventModel& model, const GpuOpsByDevice& by_device);

}  // namespace hookstream
