// Walks a Kineto Chrome trace ({"traceEvents": [...], "baseTimeNanoseconds": ...}, or the bare
// array of events LibTorch 1.13's legacy profiler writes) as a stream, and hands each complete
// ("ph": "X") event of a wanted category to a sink with only the fields the Kineto importer uses.
// Events are dropped as soon as their "ph" or "cat" says so (cpu_op, python_function, flow and
// metadata events are most of a trace): the rest of a dropped event is validated but not copied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

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
  // An event dropped by its "ph" (not a complete event: counters, instants, flows, metadata).
  virtual void dropped_phase(const std::string& ph) { (void)ph; }
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

// The same scan on several threads, for large traces. The decompressed stream is cut into chunks
// of about `chunk_bytes` where an element of the event array starts on a new line (',' then
// whitespace with a newline, then '{': a raw newline is never inside a JSON string, so such a
// '{' is always structural). Each chunk is parsed on its own thread into its own sink, as if it
// started at an element of "traceEvents"; the parse of chunk k proves that guess for chunk k+1
// when it reaches chunk k+1's first byte between two elements of that very array. When every cut
// is proven (all real traces), the sinks hold exactly the single-threaded scan's events, in file
// order; otherwise (a cut elsewhere, no newlines to cut at, malformed or truncated input) the
// whole file is scanned again single-threaded, so results, errors and their byte offsets are
// always those of scan_kineto_trace. At most `threads` chunks are parsed and a few more read
// ahead at a time (a plain file is mapped, and each parsed chunk's pages dropped again): memory
// stays proportional to the events kept, not to the file. Chunks in the middle of the array are
// parsed by simdjson's stage 1 (its SIMD structural indexer) and a validating walk over the
// tokens it finds, where the build has simdjson (a100 rank 3: ~25% less CPU than the strict
// scanner, ~40% less than simdjson's whole DOM parse); a chunk the walk rejects is parsed by the
// strict scanner, so nothing else changes.
struct KinetoParallelScan {
  size_t chunk_bytes = size_t{1} << 20;  // 1 MiB: as fast as 128 KiB to 4 MiB; stage 1's index takes ~4x its chunk
  int threads = 2;
  // false: the strict scanner parses every chunk, also where the build has simdjson
  // (kineto_simdjson_available()); the results are the same either way.
  bool fast_path = true;
  // Filled in: how the file was read.
  int chunks = 0;             // chunks cut (1: the file was smaller than a chunk)
  int fast_chunks = 0;        // of them, parsed by simdjson's stage 1 and the walk
  bool fell_back = false;     // scanned again single-threaded
  std::string fallback_why;   // why, when it did
};
bool kineto_simdjson_available();
using KinetoSinkFactory = std::function<std::unique_ptr<KinetoEventSink>()>;
// `sinks` receives one sink per chunk (one in all after a fall-back), in file order.
KinetoTraceInfo scan_kineto_trace_parallel(const std::string& path, const KinetoSinkFactory& make_sink,
                                           std::vector<std::unique_ptr<KinetoEventSink>>& sinks,
                                           KinetoParallelScan& scan);

}  // namespace hookstream
