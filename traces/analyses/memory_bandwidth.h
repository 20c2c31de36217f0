// HTA's memory-bandwidth summary (HolisticTraceAnalysis hta/analyzers/trace_counters.py,
// get_memory_bw_summary) on the EventModel: per rank and memory op type (Memcpy HtoD, Memcpy DtoH,
// Memcpy DtoD, Memcpy PtoP, Memset), the ops, bytes and time, the achieved bandwidth (bytes over the
// summed durations) and the peak of the concurrent bandwidth (HTA's time series: each op adds its
// bytes/duration while it runs, ops of a type running at once add up).
// HTA summarises that series with pandas' describe() over its change points (count, mean, std,
// percentiles: an average over points, not over time) and takes each op's bandwidth from Kineto's
// "memory bandwidth (GB/s)" argument; here it comes from bytes and duration, which nsys exports
// have too. GB/s is 10^9 bytes per second, as Kineto writes it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sim/events/event_model.h"

namespace hookstream {

struct MemoryBandwidth {
  int rank = 0;
  std::string type;  // "Memcpy HtoD", "Memcpy DtoH", "Memcpy DtoD", "Memcpy PtoP", "Memcpy other", "Memset"
  int64_t ops = 0, bytes = 0;
  double time_ns = 0;          // summed durations
  double achieved_gbps = 0;    // bytes / time
  double peak_gbps = 0;        // the highest concurrent bandwidth of this type
};

// By rank, then type in the order above; ops without bytes or duration are counted but carry no
// bandwidth (HTA rounds a 0 us duration up to 1 us; here it is left out of the bandwidth).
std::vector<MemoryBandwidth> analyse_memory_bandwidth(const EventModel& model);

// The concurrent bandwidth of each (rank, type) as a step function, for the timeline's counter
// tracks: (time, GB/s from then on), one point per change, in time order.
struct MemoryBandwidthSeries {
  int rank = 0;
  std::string type;
  std::vector<std::pair<double, double>> points;
};
std::vector<MemoryBandwidthSeries> memory_bandwidth_series(const EventModel& model);

}  // namespace hookstream
