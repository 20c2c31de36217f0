// PyTorch profiler (Kineto) Chrome trace, .json or .json.gz -> EventModel.
// Scanned as a stream (kineto_event_scanner.h over gzip_reader.h, inflating on a second thread), so
// only the fields of the events we use are kept, never the whole document: memory grows with the
// ops kept, not with the file. One file is one process: all its ops get rank `rank`.
#pragma once

#include <string>

#include "sim/events/event_model.h"
#include "traces/importers/trace_contents.h"

namespace hookstream {

// Throws InputError (one line: file, byte offset, what is wrong) for malformed or truncated JSON
// or gzip, and for JSON that is not a Chrome trace (neither {"traceEvents": [...]} nor [...]).
//
// Timestamps: Kineto writes microseconds (integers in older traces; floats relative to
// `baseTimeNanoseconds` in newer ones). Absolute nanoseconds since the epoch do not fit a double
// exactly, so start_ns counts from the last multiple of 10^15 ns (about 11.6 days) before the
// trace: exact, and the same origin for every rank of one job.
// `contents`, when given, receives the events read past, by category (complete events of kinds
// not modelled: cpu_op, python_function, mtia_*...) or by phase (counters, instants, flows).
EventModel import_kineto_json(const std::string& path, int rank = 0, TraceContents* contents = nullptr);

}  // namespace hookstream
