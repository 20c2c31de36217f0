// Async copies from or to pageable host memory. cudaMemcpyAsync with pageable memory is staged by
// the driver through a pinned buffer and does not overlap with the host (nor, for DtoH, with
// anything), so the "Async" buys nothing; pin the buffer. Same rule as nsys's
// cuda_memcpy_async (async memcpy with pageable memory).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/events/event_model.h"

namespace hookstream {

struct PageableCopies {
  int64_t copies = 0;
  int64_t bytes = 0;
  double copy_ns = 0;
  std::vector<int> examples;  // op indices, the first few in model order
};

// Copies and memsets whose issuing API is an async one (name contains "Async": cudaMemcpyAsync,
// cuMemcpyHtoDAsync_v2, ...) and whose source or destination is pageable host memory.
PageableCopies analyse_pageable_async_copies(const EventModel& model, int max_examples = 5);

}  // namespace hookstream
