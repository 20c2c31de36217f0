// Ops per stream by kind, and each stream's busy time: which streams a trace used and for what.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "sim/events/event_model.h"

namespace hookstream {

struct StreamOpCounts {
  int stream = -1;                          // index into EventModel::streams
  std::map<OpKind, int64_t> by_kind;        // kinds with at least one op
  int64_t total = 0;
  double busy_ns = 0;                       // sum of GPU-work durations
};

// Every stream of the model (also those without ops), in model order.
std::vector<StreamOpCounts> analyse_stream_op_counts(const EventModel& model);

}  // namespace hookstream
