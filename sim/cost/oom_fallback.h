// `hookstream run` after a rank ran out of device memory: the budget its fallback plan must be
// predicted to fit. The plan that failed was predicted to fit; the evidence says by how much the
// prediction fell short, and the fallback asks the plan search (sim/cost/plan_search.h) for a plan
// predicted under a budget scaled down by that shortfall, so that its real peak fits where the
// failed plan's did not.
#pragma once

#include <cstdint>
#include <vector>

namespace hookstream {

// What a rank saw when c10::OutOfMemoryError was raised (runtime/trainer.h OutOfMemoryReport).
struct OutOfMemoryEvidence {
  int64_t requested_bytes = 0;       // the allocation that failed; 0: not known
  int64_t peak_allocated_bytes = 0;  // the allocator's peak in the failing step before it; 0: not known
  int64_t device_total_bytes = 0;    // the device's memory; 0: not known (CPU, an injected fault)
};

struct FallbackBudget {
  int64_t budget_bytes = 0;
  // Lower bound of real / predicted peak that the evidence shows (>= 1).
  double shortfall_ratio = 1;
};

// The fallback plan's device budget. The failed plan needed at least
// max(peak allocated + the failed request, ~the device's memory) where it was predicted to need
// `predicted_peak_bytes`; the ratio r of the two (at least 1) is how far the model under-counts
// this plan's peak. The budget is min(`capacity_bytes`, predicted peak) / r, less a 5% margin, so
// the fallback is always predicted strictly below the plan that failed. With several ranks the
// largest ratio counts.
FallbackBudget oom_fallback_budget(int64_t predicted_peak_bytes, int64_t capacity_bytes,
                                   const std::vector<OutOfMemoryEvidence>& evidence);

}  // namespace hookstream
