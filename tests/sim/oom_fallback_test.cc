#include <catch2/catch.hpp>

#include "sim/cost/oom_fallback.h"

using namespace hookstream;

namespace {
constexpr int64_t kGiB = int64_t(1) << 30;
}

TEST_CASE("oom fallback budget: an under-predicted plan scales the budget down by the shortfall", "[oom_fallback]") {
  // Predicted 60 GiB, failed on an 80 GiB device asking for 2 GiB at 70 GiB allocated: the real need
  // is at least 0.97 * 80 = 77.6 GiB, 1.293x the prediction.
  const FallbackBudget b = oom_fallback_budget(60 * kGiB, 80 * kGiB, {{2 * kGiB, 70 * kGiB, 80 * kGiB}});
  CHECK(b.shortfall_ratio == Approx(77.6 / 60.0));
  CHECK(static_cast<double>(b.budget_bytes) / kGiB == Approx(0.95 * 60.0 / (77.6 / 60.0)).epsilon(1e-6));
}

TEST_CASE("oom fallback budget: the largest rank's shortfall counts, requested bytes included", "[oom_fallback]") {
  const FallbackBudget b = oom_fallback_budget(
      50 * kGiB, 80 * kGiB, {{1 * kGiB, 40 * kGiB, 80 * kGiB}, {10 * kGiB, 75 * kGiB, 80 * kGiB}});
  CHECK(b.shortfall_ratio == Approx(85.0 / 50.0));
  CHECK(b.budget_bytes < 50 * kGiB * 50 / 85);
}

TEST_CASE("oom fallback budget: without evidence the fallback is still predicted below the failed plan", "[oom_fallback]") {
  // An injected fault on a CPU rank: no allocator figures, no device size.
  const FallbackBudget b = oom_fallback_budget(100 * kGiB, 80 * kGiB, {{0, 0, 0}});
  CHECK(b.shortfall_ratio == 1.0);
  CHECK(b.budget_bytes == static_cast<int64_t>(0.95 * 80 * kGiB));
  const FallbackBudget small = oom_fallback_budget(10 * kGiB, 80 * kGiB, {{0, 0, 0}});
  CHECK(small.budget_bytes == static_cast<int64_t>(0.95 * 10 * kGiB));
}
