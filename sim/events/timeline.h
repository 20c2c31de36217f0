// A scheduled EventModel as Chrome trace JSON (the Trace Event Format that Perfetto and
// chrome://tracing open): one process per rank (pid = rank), one thread per stream (tid = stream
// index + 1; tid 0 is the rank's host thread), "X" slices for ops, flow arrows ("s" -> "f") from each
// event record to the waits it satisfies, and "C" counters for memory. Same input, same bytes out.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim/events/event_model.h"
#include "sim/cost/memory_model.h"

namespace hookstream {

struct TimelineOptions {
  // Device bytes after ops, drawn as a "device memory" counter per rank: the memory model's per-op
  // points (memory_samples) for a simulated step, or memory_over_ops for a trace's Alloc/Free ops.
  std::vector<MemorySample> memory;
  int64_t memory_baseline_bytes = 0;  // persistent memory added to every sample
};

// Ops without a start time (start_ns < 0) are left out: schedule the model first (schedule_step).
std::string chrome_trace_json(const EventModel& model, const TimelineOptions& options = {});
// The same trace as a document, for a caller that adds events of its own before writing it
// (`hookstream replay --timeline`): chrome_trace_json is json_text(chrome_trace_document(...), 1).
// Writing it and parsing it back instead cost ~40% of a long step's timeline (bench/RESULTS.md,
// session 15: nsys cloverleaf x64, 10.8 -> 6.4 s CPU).
nlohmann::json chrome_trace_document(const EventModel& model, const TimelineOptions& options = {});

}  // namespace hookstream
