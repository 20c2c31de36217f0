// Per-device GPU utilisation and idle gaps: the share of the device's active span (first GPU op
// start to last GPU op end) during which some stream ran work, and the largest idle stretches
// with the ops on either side, which is where a step stalls (nsys's "GPU gaps" and "GPU
// utilization" rules ask the same question).
#pragma once

#include <cstdint>
#include <vector>

#include "sim/events/event_model.h"
#include "traces/analyses/gpu_intervals.h"

namespace hookstream {

struct DeviceIdleGap {
  double start_ns = 0;
  double duration_ns = 0;
  int op_before = -1;  // the op whose end starts the gap
  int op_after = -1;   // the op whose start ends it
};

struct DeviceUtilisation {
  int rank = 0;
  int device = 0;
  int64_t gpu_ops = 0;
  double first_ns = 0, last_ns = 0;  // active span
  double busy_ns = 0;                // union of GPU-work intervals
  double utilisation = 0;            // busy / span, 0 when the span is empty
  std::vector<DeviceIdleGap> largest_gaps; // longest first; ties by start
};

std::vector<DeviceUtilisation> analyse_device_utilisation(const EventModel& model, int max_gaps = 5);
// The same over GPU ops already grouped by gpu_ops_by_device (analyses of one model share them).
std::vector<DeviceUtilisation> analyse_device_utilisation(const EventModel& model, const GpuOpsByDevice& by_device, int max_gaps = 5);

}  // namespace hookstream
