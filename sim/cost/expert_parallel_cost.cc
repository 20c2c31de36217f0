#include "sim/cost/expert_parallel_cost.h"

#include <algorithm>

#include <fmt/format.h>

#include "sim/cost/time_model.h"
#include "sim/sync/expert_parallel/expert_parallel.h"

namespace hookstream {

namespace {

// A small all-to-all (the split counts) is latency-bound: a few microseconds per call on NCCL.
constexpr double kAllToAllLatencyNs = 10'000;

}  // namespace

EngineStepCost expert_parallel_step_cost(const Plan& plan, const ModelStructure& structure, const DeviceSpec& device) {
  EngineStepCost cost;
  const ExpertParallelTraffic t = expert_parallel_traffic(plan, structure);
  if (t.ep <= 1 || t.moe_layers == 0) return cost;
  const int gpus_per_node = 8;
  const double gbps = collective_link_gbps(t.ep, device, gpus_per_node);
  cost.link = fmt::format("{} {:g} GB/s per rank, all-to-all over {} ranks",
                          t.ep <= gpus_per_node ? (device.nvlink_gbps > 0 ? "NVLink" : "PCIe") : "network", gbps, t.ep);
  const int micro = std::max(1, plan.gradient_accumulation_steps);
  auto add = [&](const std::string& phase, int per_layer, int64_t bytes_per_layer) {
    CommTotal c;
    c.collective = "all_to_all";
    c.phase = phase;
    c.count = per_layer * t.moe_layers * micro;
    c.bytes = bytes_per_layer * t.moe_layers * micro;
    c.ns = static_cast<double>(c.bytes) / gbps + c.count * kAllToAllLatencyNs;  // bytes / (GB/s) = ns
    cost.comm_ns += c.ns;
    cost.collectives.push_back(c);
  };
  add("forward", kForwardAllToAllsPerMoeLayer, t.forward_bytes_per_layer);
  add("backward", kBackwardAllToAllsPerMoeLayer, t.backward_bytes_per_layer);
  // torch_dispatch.py waits on each all-to-all before its output is used (the counts go to the
  // host, the local kernel reads the tokens, the combine feeds the residual): nothing overlaps.
  cost.exposed_ns = cost.comm_ns;
  cost.notes.push_back(expert_parallel_summary(plan, structure));
  cost.notes.push_back(fmt::format(
      "expert parallelism: {} tokens per rank per MoE layer, top-{} of {} experts, {} per rank; uniform routing (balanced): a "
      "token goes to {:.2f} of {} ranks, {:.2f} of them remote; a router that concentrates tokens sends more to fewer ranks "
      "and the busiest rank sets the time (not modelled)",
      t.tokens, t.top_k, t.experts, t.experts / t.ep, t.ranks_per_token, t.ep, t.remote_per_token));
  cost.notes.push_back("the all-to-alls are not overlapped with compute (axolotl's torch backend waits on each; "
                       "expert_parallel_dispatch_chunks pipelining and DeepEP are not modelled)");
  return cost;
}

}  // namespace hookstream
