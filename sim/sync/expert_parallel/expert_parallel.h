// axolotl's expert parallelism (ExpertParallelPlugin, src/axolotl/integrations/expert_parallel/,
// read at commit 060b4aec63d4 for plugin.py / shard.py and 3d713cc34eff for torch_dispatch.py) as
// far as the hook schedule goes, beside the DDP model that runs the rest of the step.
//
// Pure EP under DDP (Engine::expert_parallel = world size): each rank keeps 1/ep of every MoE
// layer's fused experts, outside DDP's Reducer (model_structure.cc shard_experts_for_expert_parallelism:
// the DDP simulation never sees them, so an expert slice that gets no token is no unused-parameter
// error and no all-reduce covers them); the plugin's gradient-scale hook
// (plugin.py _register_expert_grad_scale: register_post_accumulate_grad_hook(p.grad.mul_(1/ep)))
// runs after every backward that accumulates into them; and every MoE layer's forward and backward
// move the routed tokens by all-to-all over the ep group (torch_dispatch.py dispatch / combine).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"
#include "sim/verify/verdict.h"

namespace hookstream {

// The all-to-alls one MoE layer issues per micro-step on every rank of the ep group
// (torch_dispatch.py): forward, the equal all-to-all of the per-destination counts, the uneven
// ones of the tokens, their top-k weights and their local expert ids (dispatch), and the combine;
// backward, the combine's, the tokens' and the weights' (each all-to-all's backward is the
// all-to-all with the splits swapped; the ids and counts run under no_grad). The oracle counts
// the same: oracles/expert_parallel_worker.py, 8 per layer per micro-step.
inline constexpr int kForwardAllToAllsPerMoeLayer = 5;
inline constexpr int kBackwardAllToAllsPerMoeLayer = 3;

// Per rank and micro-step, under uniform routing (each token picks top_k distinct experts of E,
// all subsets equally likely: the load-balancing loss pulls toward it; a trained router that
// concentrates tokens moves more of them to fewer ranks, so this is the balanced case).
struct ExpertParallelTraffic {
  int ep = 1;
  int moe_layers = 0;
  int experts = 0, top_k = 0;
  int64_t tokens = 0;          // tokens one rank routes per MoE layer per micro-step
  std::string tokens_from;
  double ranks_per_token = 0;  // expected ranks a token is sent to (it goes once to each rank owning one of its experts)
  double remote_per_token = 0; // of them, ranks other than its own
  int64_t hidden_bytes = 0;    // one token's hidden state in the compute dtype
  int64_t forward_bytes_per_layer = 0;   // sent by one rank: tokens + weights + ids, then the combine
  int64_t backward_bytes_per_layer = 0;  // the combine's gradient, the tokens' and the weights'
};

ExpertParallelTraffic expert_parallel_traffic(const Plan& plan, const ModelStructure& structure);

// The findings expert parallelism adds to the DDP simulation's (all ranks alike):
// gradient accumulation > 1 with trainable expert shards: the scale hook runs after every
// micro-step's backward, so micro-step i of k is scaled by (1/ep)^(k-i+1) instead of 1/ep: a
// wrong expert gradient with no error (real DDP over Gloo: oracles/expert_parallel_worker.py).
std::vector<Finding> expert_parallel_findings(const Plan& plan, const ModelStructure& structure);

// One line for the report's engine notes: the layout, what DDP ignores, the all-to-alls.
std::string expert_parallel_summary(const Plan& plan, const ModelStructure& structure);

}  // namespace hookstream
