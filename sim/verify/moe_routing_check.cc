#include "sim/verify/moe_routing_check.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace hookstream {

namespace {

// Optimizer steps the run takes: axolotl's max_steps, else a nominal 1000 (the real count comes from
// num_epochs and the dataset size, which hookstream does not read).
int64_t planned_steps(const Plan& plan, std::string& from) {
  if (plan.max_steps) {
    from = "max_steps";
    return *plan.max_steps;
  }
  from = "max_steps not set (the run's length follows num_epochs and the dataset): 1000 steps assumed";
  return 1000;
}

}  // namespace

int64_t routed_tokens(const Plan& plan, std::string* from) {
  // Every token of the micro-batch goes through every MoE layer's router, padding included
  // (MixtralSparseMoeBlock.forward flattens [B, S, H] and routes all B * S rows; the attention mask
  // does not reach it). The shortest sequence any rank or step is given is the adverse one.
  int shortest = plan.sequence_len;
  for (int r = 0; r < plan.world_size; ++r) {
    for (int it = 0; it < plan.iterations; ++it) shortest = std::min(shortest, plan.sequence_len_for(r, it));
  }
  const int64_t tokens = int64_t(plan.micro_batch_size) * shortest;
  if (from != nullptr) {
    *from = plan.sample_packing
                ? fmt::format("micro_batch_size {} x sequence_len {} (sample_packing: every row packed to sequence_len)",
                              plan.micro_batch_size, shortest)
                : fmt::format("at most micro_batch_size {} x sequence_len {} (no sample_packing: rows are padded to the "
                              "batch's longest sample, so a batch of short samples routes fewer tokens and the "
                              "probability is a lower bound)",
                              plan.micro_batch_size, shortest);
  }
  return tokens;
}

bool RoutingCheck::ok() const {
  return std::all_of(cases.begin(), cases.end(), [](const RoutingCase& c) { return c.simulation.ok(); });
}

std::string RoutingCheck::summary() const {
  std::string text = fmt::format(
      "{}; {} MoE layers x {} draws per layer over {} steps ({}): P(some expert gets no token on some rank in some "
      "micro-step) = {:.3g}",
      describe_idle_experts(estimate), moe_layers, draws / std::max(1, moe_layers), steps, steps_from, p_run);
  if (layout != "per_expert") {
    return text + "; the experts are fused [E, ...] tensors (" + decided_by +
           "), one parameter used every step, so an idle expert is never an unused parameter";
  }
  text += "; experts are per-expert modules (" + decided_by + "), so an idle expert's parameters get no gradient";
  if (!simulated) {
    return text + fmt::format("; below the {:g} threshold, the adverse step is not simulated (uniform routing is the "
                              "best case: a skewed router makes idle experts likelier)",
                              kRoutingThreshold);
  }
  return text + fmt::format("; at or above the {:g} threshold: the adverse step is simulated", kRoutingThreshold);
}

std::optional<RoutingCheck> check_moe_routing(const Plan& plan, const ModelStructure& structure,
                                              const SyncSimulationOptions& options) {
  if (structure.num_experts <= 0 || structure.experts_per_token <= 0 ||
      structure.experts_per_token > structure.num_experts) {
    return std::nullopt;
  }
  RoutingCheck check;
  check.layout = structure.expert_layout;
  check.decided_by = structure.expert_layout_decided_by;
  check.estimate = estimate_idle_experts(structure.num_experts, structure.experts_per_token,
                                         routed_tokens(plan, &check.tokens_from));
  // LongCat-Flash's MoE block is its layer's shortcut (DecoderLayerUse::shortcut), beside dense MLPs.
  for (const DecoderLayerUse& layer : structure.layers) check.moe_layers += layer.moe || !layer.shortcut.empty() ? 1 : 0;
  check.steps = planned_steps(plan, check.steps_from);
  check.draws = int64_t(check.moe_layers) * plan.world_size * plan.gradient_accumulation_steps * check.steps;
  // Independent draws (each layer, rank and micro-step routes its own tokens):
  // P = 1 - (1 - p)^draws, computed as -expm1(draws * log1p(-p)) to keep tiny p exact.
  const double p = check.estimate.p_any_idle;
  check.p_run = p >= 1 ? 1.0 : -std::expm1(double(check.draws) * std::log1p(-p));
  check.simulated = check.layout == "per_expert" && check.p_run >= kRoutingThreshold && gradient_sync_modelled(plan.engine);
  if (!check.simulated) return check;

  const auto first = std::find_if(structure.layers.begin(), structure.layers.end(),
                                  [](const DecoderLayerUse& l) { return !l.experts.empty(); });
  if (first == structure.layers.end()) return check;
  const ExpertUse& expert = first->experts.back();
  // A middle step when there are three: DDP's next forward then sees the unfinished reduction, and
  // static_graph a parameter used in the first step and unused in this one.
  const int iteration = plan.iterations >= 3 ? 1 : 0;
  std::vector<std::string> parameters;
  for (int index : parameters_under(structure, expert.path)) {
    const Parameter& param = structure.parameters[static_cast<size_t>(index)];
    if (param.trainable) parameters.push_back(param.name);
  }
  auto add_case = [&](const std::string& name, int rank) {
    RoutingCase c;
    c.name = name;
    c.iteration = iteration;
    c.layer = first->index;
    c.expert = expert.index;
    c.module = expert.path;
    c.parameters = parameters;
    if (rank < 0) {
      for (int r = 0; r < plan.world_size; ++r) c.ranks.push_back(r);
    } else {
      c.ranks.push_back(rank);
    }
    c.idle = RoutedIdle{rank, iteration, {expert.path}};
    Plan adverse = plan;
    adverse.routed_idle.push_back(c.idle);
    c.simulation = simulate_gradient_sync(adverse, structure, options);
    check.cases.push_back(std::move(c));
  };
  if (plan.world_size > 1) add_case("one rank", plan.world_size - 1);
  add_case("every rank", -1);
  return check;
}

void merge_routing_findings(const RoutingCheck& check, SyncSimulation& simulation) {
  if (!simulation.findings.empty()) return;
  for (const RoutingCase& c : check.cases) {
    if (c.simulation.ok()) continue;
    const std::string ranks = c.ranks.size() == 1 ? fmt::format("rank {}", c.ranks.front())
                                                  : fmt::format("every rank ({})", c.ranks.size());
    for (Finding f : c.simulation.findings) {
      f.explanation = fmt::format(
          "MoE routing, adverse step (P = {:.3g} over the planned steps under uniform routing): expert {} of layer {} "
          "({}) gets no token on {} in iteration {}, so {} get no gradient there. {}",
          check.p_run, c.expert, c.layer, c.module, ranks, c.iteration,
          c.parameters.empty() ? std::string("none of its parameters (all frozen)") : fmt::format("{} parameters", c.parameters.size()),
          f.explanation);
      simulation.findings.push_back(std::move(f));
    }
    return;
  }
}

}  // namespace hookstream
