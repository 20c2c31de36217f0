// Host calls that wait for the GPU (cudaDeviceSynchronize, cudaStreamSynchronize,
// cudaEventSynchronize, synchronous cudaMemcpy/cudaMemset): how many, how long the host was
// blocked in them, grouped by API. Also how many waits (stream waits, event syncs) could be tied
// to the event record they wait for.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/events/event_model.h"

namespace hookstream {

struct SyncCallSite {
  std::string api;       // API name without nsys's version suffix
  int64_t calls = 0;
  double blocked_ns = 0;
};

struct SynchronisingCalls {
  int64_t calls = 0;
  double blocked_ns = 0;
  std::vector<SyncCallSite> by_api;  // most blocked time first; ties by name
  int64_t stream_waits = 0;          // StreamWait ops
  int64_t event_syncs = 0;           // EventSync ops
  int64_t waits_matched = 0;         // of both, those with an EventRecord of the same event issued before
};

SynchronisingCalls analyse_synchronising_calls(const EventModel& model);

}  // namespace hookstream
