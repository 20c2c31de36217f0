// Nsight Systems SQLite export (`nsys export --type sqlite`) -> EventModel.
// Reads kernels, memcpy, memset, synchronization records, CUDA event records, runtime/driver API
// calls, NVTX ranges and stream/context info. Each process with CUDA activity becomes one rank,
// numbered from `first_rank` in process-id order.
#pragma once

#include <string>
#include <vector>

#include "sim/events/event_model.h"
#include "traces/importers/trace_contents.h"

namespace hookstream {

// Throws InputError (one line, naming the file) for a file that is not SQLite, is truncated or
// corrupt, or is SQLite without any nsys table. A valid export without GPU activity gives a model
// without GPU ops. `contents`, when given, receives the rows read past (runtime-table rows that are
// not CUDA calls, such as the backtrace records of --cudabacktrace).
EventModel import_nsys_sqlite(const std::string& path, int first_rank = 0, TraceContents* contents = nullptr);

// The queries the importer reads the rows of `path` with, for the tables this export has: the
// string table, the API calls, each GPU activity table and NVTX, each as `SELECT columns FROM
// table` with the columns chosen from this schema as the importer chooses them. For
// bench/replay_bench's reading floor: what any import of this file must at least step through.
// Throws InputError like import_nsys_sqlite for a file that is not SQLite.
struct NsysQuery {
  std::string table, select;
};
std::vector<NsysQuery> nsys_activity_queries(const std::string& path);

}  // namespace hookstream
