#include "sim/inputs/architectures/moe_routing.h"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace hookstream {
namespace {

// log C(n, r) for 0 <= r <= n.
long double log_choose(int n, int r) {
  return std::lgamma(static_cast<long double>(n) + 1) - std::lgamma(static_cast<long double>(r) + 1) -
         std::lgamma(static_cast<long double>(n - r) + 1);
}

}  // namespace

ExpertIdleEstimate estimate_idle_experts(int experts, int top_k, int64_t tokens) {
  if (experts <= 0 || top_k <= 0 || top_k > experts || tokens < 0) {
    throw std::invalid_argument(fmt::format("expected 0 < top_k <= experts and tokens >= 0, got E={}, k={}, T={}",
                                            experts, top_k, tokens));
  }
  ExpertIdleEstimate e;
  e.experts = experts;
  e.top_k = top_k;
  e.tokens = tokens;
  const long double t = static_cast<long double>(tokens);
  e.p_expert_idle = static_cast<double>(std::pow(static_cast<long double>(experts - top_k) / experts, t));
  e.expected_idle = experts * e.p_expert_idle;
  const int64_t covered = static_cast<int64_t>(top_k) * tokens;
  e.min_idle = covered >= experts ? 0 : static_cast<int>(experts - covered);
  if (e.min_idle > 0) {
    e.p_any_idle = 1.0;
    return e;
  }
  // P(some expert idle) = sum_{j>=1} (-1)^(j+1) C(E, j) (C(E-j, k) / C(E, k))^T. Its terms fall like
  // mu^j / j! (mu = expected_idle), so the sum is exact to long double precision while mu is small;
  // past mu = 20 the probability is 1 - O(e^-20) and reported as 1.
  if (e.expected_idle > 20) {
    e.p_any_idle = 1.0;
    return e;
  }
  long double sum = 0;
  for (int j = 1; j <= experts - top_k; ++j) {
    const long double log_term = log_choose(experts, j) + t * (log_choose(experts - j, top_k) - log_choose(experts, top_k));
    const long double term = std::exp(log_term);
    sum += (j % 2 == 1) ? term : -term;
    if (term < 1e-30L * (sum > 0 ? sum : 1)) break;
  }
  e.p_any_idle = static_cast<double>(std::fmin(1.0L, std::fmax(0.0L, sum)));
  return e;
}

std::string describe_idle_experts(const ExpertIdleEstimate& e) {
  return fmt::format(
      "{} experts, top-{}, {} tokens/rank/micro-step: under uniform routing P(some expert gets no token) = {:.3g} per "
      "layer ({:.3g} idle expected{})",
      e.experts, e.top_k, e.tokens, e.p_any_idle, e.expected_idle,
      e.min_idle > 0 ? fmt::format(", at least {} always", e.min_idle) : "");
}

}  // namespace hookstream
