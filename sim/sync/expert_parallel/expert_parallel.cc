#include "sim/sync/expert_parallel/expert_parallel.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "sim/inputs/model_config.h"
#include "sim/verify/moe_routing_check.h"

namespace hookstream {

namespace {

// P(a token's top_k distinct experts, drawn uniformly from E, miss a given block of E/ep experts):
// C(E - E/ep, k) / C(E, k), as a product to stay finite for E = 128, k = 8.
double p_misses_block(int experts, int top_k, int ep) {
  const int local = experts / std::max(ep, 1);
  double p = 1;
  for (int i = 0; i < top_k; ++i) p *= static_cast<double>(experts - local - i) / static_cast<double>(experts - i);
  return std::max(p, 0.0);
}

int moe_layer_count(const ModelStructure& structure) {
  return static_cast<int>(std::count_if(structure.layers.begin(), structure.layers.end(), [](const DecoderLayerUse& l) { return l.moe; }));
}

}  // namespace

ExpertParallelTraffic expert_parallel_traffic(const Plan& plan, const ModelStructure& structure) {
  ExpertParallelTraffic t;
  t.ep = plan.engine.expert_parallel;
  if (t.ep <= 1) return t;
  t.moe_layers = moe_layer_count(structure);
  t.experts = structure.num_experts;
  t.top_k = structure.experts_per_token;
  t.tokens = routed_tokens(plan, &t.tokens_from);
  if (t.experts <= 0 || t.top_k <= 0) return t;
  // dispatch: a token goes once to every rank owning one of its top-k experts
  // (torch_dispatch.py compute_send_counts: is_in_rank = any over the k slots), its own rank included.
  const double hit = 1 - p_misses_block(t.experts, t.top_k, t.ep);
  t.ranks_per_token = t.ep * hit;
  t.remote_per_token = (t.ep - 1) * hit;
  const int act_bytes = plan.bf16.value_or(true) ? 2 : dtype_bytes(plan.model.torch_dtype);
  const int64_t hidden = plan.model.hidden_size;
  t.hidden_bytes = hidden * act_bytes;
  // What leaves the rank (the slice it sends to itself is a local copy): per sent row the hidden
  // state, top_k fp32 weights and top_k int64 local ids; the combine returns one hidden row per
  // received row (balanced routing: as many received as sent). Plus the equal all-to-all of the counts.
  const double rows = static_cast<double>(t.tokens) * t.remote_per_token;
  const int64_t counts = int64_t(8) * t.ep;
  t.forward_bytes_per_layer =
      counts + static_cast<int64_t>(std::llround(rows * (2.0 * static_cast<double>(t.hidden_bytes) + t.top_k * (4 + 8))));
  // backward: the combine's gradient (hidden rows), the tokens' gradient (hidden rows), the weights' gradient (fp32).
  t.backward_bytes_per_layer = static_cast<int64_t>(std::llround(rows * (2.0 * static_cast<double>(t.hidden_bytes) + t.top_k * 4)));
  return t;
}

std::vector<Finding> expert_parallel_findings(const Plan& plan, const ModelStructure& structure) {
  std::vector<Finding> out;
  const int ep = plan.engine.expert_parallel;
  const int k = std::max(1, plan.gradient_accumulation_steps);
  if (ep <= 1 || k <= 1) return out;
  int first = -1;
  for (int index : structure.expert_parallel_shards) {
    if (structure.parameters[static_cast<size_t>(index)].trainable) {
      first = index;
      break;
    }
  }
  if (first < 0) return out;  // frozen experts (LoRA): no hook was registered on them
  const Parameter& p = structure.parameters[static_cast<size_t>(first)];
  Finding f;
  f.kind = VerdictKind::WrongGradient;
  f.rank = 0;
  for (int r = 0; r < plan.world_size; ++r) f.ranks.push_back(r);
  f.iteration = 0;
  f.micro_step = k - 1;
  f.phase = Phase::AfterBackward;
  f.parameter = p.name;
  f.layer = p.layer;
  f.error_text = fmt::format("no error: every expert shard's gradient is scaled by 1/{} after each of the {} micro-steps' backward, "
                             "so micro-step i of {} counts (1/{})^({} - i + 1) instead of 1/{}",
                             ep, k, k, ep, k, ep);
  f.explanation = fmt::format(
      "axolotl's ExpertParallelPlugin registers p.register_post_accumulate_grad_hook(lambda p: p.grad.mul_(1/{})) on the "
      "expert shards (plugin.py _register_expert_grad_scale, pure EP: in post_model_build); autograd runs it after every "
      "backward that accumulates into .grad, and gradient_accumulation_steps {} keeps .grad across micro-steps (DDP's no_sync "
      "does not touch the shards: they are in _ddp_params_and_buffers_to_ignore). The first micro-step's expert gradient "
      "reaches the optimizer scaled by 1/{:g}, the last by 1/{}: the experts train on a reweighted batch while the dense "
      "weights see the plain mean. Observed on real DDP over Gloo with the plugin's structure (oracles/expert_parallel_worker.py). "
      "Fix: gradient_accumulation_steps: 1 (raise micro_batch_size instead); under FSDP2 (EP x dp_shard) the hook sits on the "
      "sharded parameters and runs once per reduce-scatter, which accelerate issues once per step.",
      ep, k, std::pow(static_cast<double>(ep), k), ep);
  out.push_back(std::move(f));
  return out;
}

std::string expert_parallel_summary(const Plan& plan, const ModelStructure& structure) {
  const ExpertParallelTraffic t = expert_parallel_traffic(plan, structure);
  if (t.ep <= 1) return "";
  int64_t shard_elements = 0;
  for (int index : structure.expert_parallel_shards) shard_elements += structure.parameters[static_cast<size_t>(index)].numel();
  return fmt::format(
      "expert parallelism (axolotl ExpertParallelPlugin, pure EP over {} ranks): {} expert tensors of {} MoE layers hold {}/{} "
      "experts per rank ({:.3g} M elements per rank), outside DDP's Reducer (_ddp_params_and_buffers_to_ignore: no all-reduce, "
      "no unused-parameter error from them), gradient-scale hook 1/{}; per MoE layer and micro-step {} all-to-alls in forward "
      "and {} in backward over the ep group; {} tokens per rank per layer ({}), each sent under uniform routing to {:.2f} "
      "ranks ({:.2f} remote): {:.3g} MB sent per rank per layer forward, {:.3g} MB backward",
      t.ep, structure.expert_parallel_shards.size(), t.moe_layers, t.experts / std::max(t.ep, 1), t.experts,
      static_cast<double>(shard_elements) / 1e6, t.ep, kForwardAllToAllsPerMoeLayer, kBackwardAllToAllsPerMoeLayer, t.tokens,
      t.tokens_from, t.ranks_per_token, t.remote_per_token, static_cast<double>(t.forward_bytes_per_layer) / 1e6,
      static_cast<double>(t.backward_bytes_per_layer) / 1e6);
}

}  // namespace hookstream
