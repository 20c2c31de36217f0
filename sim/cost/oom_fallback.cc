#include "sim/cost/oom_fallback.h"

#include <algorithm>

namespace hookstream {

namespace {
// The caching allocator cannot get all of a device's memory: the CUDA context, cuBLAS/cuDNN
// workspaces and fragmentation take some (about 0.5-1.5 GiB of an 80 GiB H100). A rank that ran
// out had its real need above this share of the device at least.
constexpr double kUsableShare = 0.97;
constexpr double kMargin = 0.95;
}  // namespace

FallbackBudget oom_fallback_budget(int64_t predicted_peak_bytes, int64_t capacity_bytes,
                                   const std::vector<OutOfMemoryEvidence>& evidence) {
  FallbackBudget result;
  if (predicted_peak_bytes > 0) {
    for (const OutOfMemoryEvidence& e : evidence) {
      const double needed = std::max(static_cast<double>(e.peak_allocated_bytes) + static_cast<double>(e.requested_bytes),
                                     kUsableShare * static_cast<double>(e.device_total_bytes));
      result.shortfall_ratio = std::max(result.shortfall_ratio, needed / static_cast<double>(predicted_peak_bytes));
    }
  }
  const int64_t base = predicted_peak_bytes > 0 && capacity_bytes > 0 ? std::min(capacity_bytes, predicted_peak_bytes)
                                                                      : std::max(capacity_bytes, predicted_peak_bytes);
  result.budget_bytes = static_cast<int64_t>(kMargin * static_cast<double>(base) / result.shortfall_ratio);
  return result;
}

}  // namespace hookstream
