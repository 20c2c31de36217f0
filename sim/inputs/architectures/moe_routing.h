// Which experts a step can leave without tokens. A token routed top-k of E experts sends work to k
// of them; with T tokens on a rank in one micro-step, an expert can get none. With transformers 5's
// fused [E, ...] expert tensors that changes nothing for DDP (one parameter per projection holds
// every expert, and it is used every step). With per-expert modules (transformers 4, remote code)
// the idle expert's parameters get no gradient: an unused parameter, which DDP without
// find_unused_parameters never marks ready (the reduction stays unfinished), and which differs
// between ranks.
#pragma once

#include <cstdint>
#include <string>

namespace hookstream {

struct ExpertIdleEstimate {
  int experts = 0;            // routed experts per MoE layer (E)
  int top_k = 0;              // experts per token (k)
  int64_t tokens = 0;         // tokens routed per layer on one rank in one micro-step (T)
  // Under uniform routing (each token picks k distinct experts, all subsets equally likely):
  double p_expert_idle = 0;   // a given expert gets no token: ((E - k) / E)^T
  double expected_idle = 0;   // expected number of idle experts: E * p_expert_idle
  double p_any_idle = 0;      // some expert gets no token (inclusion-exclusion)
  int min_idle = 0;           // experts that must be idle: max(0, E - k * T)
};

// Throws std::invalid_argument unless 0 < top_k <= experts and tokens >= 0.
ExpertIdleEstimate estimate_idle_experts(int experts, int top_k, int64_t tokens);

// One line for reports, e.g. "128 experts, top-8, 4096 tokens/rank/micro-step: P(some expert gets
// no token) = 3.1e-11 per layer ...".
std::string describe_idle_experts(const ExpertIdleEstimate& estimate);

}  // namespace hookstream
