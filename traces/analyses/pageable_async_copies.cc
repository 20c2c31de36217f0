#include "traces/analyses/pageable_async_copies.h"

#include "traces/cuda_api.h"

namespace hookstream {

PageableCopies analyse_pageable_async_copies(const EventModel& model, int max_examples) {
  PageableCopies result;
  for (size_t i = 0; i < model.ops.size(); ++i) {
    const Op& op = model.ops[i];
    if (op.kind != OpKind::Copy && op.kind != OpKind::Memset) continue;
    if (op.source != MemoryKind::PageableHost && op.destination != MemoryKind::PageableHost) continue;
    const ApiRole role = classify_api(op.source_api);
    if (role != ApiRole::AsyncCopy && role != ApiRole::AsyncMemset) continue;
    ++result.copies;
    result.bytes += op.bytes;
    if (op.duration_ns > 0) result.copy_ns += op.duration_ns;
    if (static_cast<int>(result.examples.size()) < max_examples) result.examples.push_back(static_cast<int>(i));
  }
  return result;
}

}  // namespace hookstream
