// Large traces for replay_bench, made from the real ones in ../shared/traces: the real files are
// small (1.6 k GPU ops), so opening them and reading their schema dominates, and a throughput
// measured on them says little about a long recording. A scaled trace repeats the real trace's
// activity N times, each copy shifted by the trace's span in time and with its correlation / event /
// range ids offset, so every copy is a distinct, consistent piece of the same program (its calls
// join to its own GPU work, its syncs to its own events). Written to temporary files by the bench
// itself, never committed.
#pragma once

#include <cstdint>
#include <string>

namespace hookstream::bench {

// Copies the nsys export `source` to `target` (overwritten), then appends copies 1..copies-1 of every
// CUPTI_ACTIVITY_KIND_* and NVTX_EVENTS row with ATTACH + INSERT ... SELECT: start/end shifted by
// k x span, correlationId / eventId / rangeId offset by k x (their largest value + 1). Tables without
// per-op rows (strings, streams, contexts, metadata) stay as they are: the copies run on the same
// streams of the same process. Throws std::runtime_error on an SQLite failure.
void write_scaled_nsys(const std::string& source, const std::string& target, int copies);

// Streams `copies` repetitions of the traceEvents of the Kineto trace `source` (.json or .json.gz)
// to `target` (.json.gz when it ends so, plain JSON otherwise), other top-level keys kept once in
// their order: ts shifted by k x span (whole microseconds), correlation, "External id",
// wait_on_cuda_event_record_corr_id and flow ids offset by k x (largest + 1), ProfilerStep#N
// renumbered. Only the source is held in memory, never the output. Throws std::runtime_error.
void write_scaled_kineto(const std::string& source, const std::string& target, int copies);

}  // namespace hookstream::bench
