// Nsight Systems SQLite export (`nsys export --type sqlite`) -> EventModel.
// Reads kernels, memcpy, memset, synchronization records, CUDA event records, runtime/driver API
// calls, NVTX ranges and stream/context info. Each process with CUDA activity becomes one rank,
// numbered from `first_rank` in process-id order.
#pragma once

#include <string>

#include "sim/event_model.h"

namespace hookstream {

// Throws InputError (one line, naming the file) for a file that is not SQLite, is truncated or
// corrupt, or is SQLite without any nsys table. A valid export without GPU activity gives a model
// without GPU ops.
EventModel import_nsys_sqlite(const std::string& path, int first_rank = 0);

}  // namespace hookstream
