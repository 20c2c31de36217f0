// Walks a Kineto Chrome trace ({"traceEvents": [...], "baseTimeNanoseconds": ...}, or the bare
// array of events LibTorch 1.13's legacy profiler writes) as a stream, and hands each complete
// ("ph": "X") event of a wanted category to a sink with only the fields the Kineto importer uses.
// Events are dropped as soon as their "ph" or "cat" says so (cpu_op, python_function, flow and
// metadata events are most of a trace): the rest of a dropped event is validated but not copied.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "traces/importers/gzip_reader.h"

namespace hookstream {

constexpr int64_t kKinetoAbsent = std::numeric_limits<int64_t>::min();

// A timestamp as written: whole microseconds plus a fraction, so integer traces stay exact.
struct KinetoMicros {
  int64_t whole = 0;
  double fraction = 0;
};

// The fields of one trace event the importer uses. Integers that are absent, not integers (pid
// "Spans"), or above INT64_MAX are kKinetoAbsent.
struct KinetoEvent {
  std::string ph, cat, name, sync_kind;
  int64_t pid = kKinetoAbsent, tid = kKinetoAbsent;
  KinetoMicros ts, dur;
  bool has_ts = false, has_dur = false;
  int64_t device = kKinetoAbsent, context = kKinetoAbsent, stream = kKinetoAbsent, correlation = kKinetoAbsent,
          bytes = kKinetoAbsent;
  int64_t wait_on_stream = kKinetoAbsent, wait_record = kKinetoAbsent, wait_event = kKinetoAbsent;
  void clear();
};

class KinetoEventSink {
 public:
  virtual ~KinetoEventSink() = default;
  // Whether events of a non-empty category `cat` can be wanted; false drops them unread.
  virtual bool wants_category(const std::string& cat) const = 0;
  // A complete event that was not dropped; the sink may take its strings.
  virtual void event(KinetoEvent& event) = 0;
};

struct KinetoTraceInfo {
  bool saw_events = false;  // a "traceEvents" array (or a top-level array) was found
  bool has_base_time = false;
  int64_t base_time_ns = 0;
  uint64_t bytes = 0;  // decompressed bytes read
};

// Throws InputError "malformed JSON at byte N: ..." (see json_cursor.h) or the reader's errors.
// Duplicate keys in one event: the last value wins, as with nlohmann::json, except that an event
// is dropped by the first "ph" other than "X" or unwanted "cat" (Kineto never repeats keys).
KinetoTraceInfo scan_kineto_trace(GzipReader& reader, KinetoEventSink& sink);

}  // namespace hookstream
