// What a trace file held besides the ops it became, counted by what it is. The importers read past
// much of a trace on purpose (nsys call-stack records, Kineto CPU ops, Python frames, counters,
// MTIA events); counting what they passed over lets the report say what a trace with no GPU work
// did hold, and says why a table's row count is not its call count (an nsys 2022 export's runtime
// table also holds the backtrace records of calls: counting them as calls doubled the calls).
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace hookstream {

struct TraceContents {
  std::string file;
  // Rows of a table the importer reads that are not what the table is read for (nsys
  // CUPTI_ACTIVITY_KIND_RUNTIME rows whose eventClass is not a CUDA call), by what they are.
  // Always reported: they explain the difference between a table's rows and the ops.
  std::map<std::string, int64_t> rows_not_ops;
  // Events of kinds the importer does not model (Kineto categories such as cpu_op, mtia_runtime;
  // counter and instant events by their phase), by kind. Reported when the trace has no GPU work.
  std::map<std::string, int64_t> other_events;

  bool empty() const { return rows_not_ops.empty() && other_events.empty(); }
};

}  // namespace hookstream
