// MoE routing joins the gradient-sync models. With one module per expert (per_expert_layout.h), an
// expert that gets no token on a rank in a step runs no forward and its parameters get no gradient
// on that rank: for DDP an unused parameter (find_unused_parameters=false: the reduction never
// finishes, "Expected to have finished reduction in the prior iteration ..." at the next forward),
// for FSDP/ZeRO a reduce-scatter the other ranks issue alone. Fused [E, ...] experts (transformers 5)
// are used every step, so none of this applies to them.
//
// The check: under uniform top-k routing, how likely some expert of some MoE layer gets no token on
// some rank in some micro-step of the planned steps; when that is not negligible (>= kRoutingThreshold),
// the adverse step is simulated by the plan's own engine: one expert of the first MoE layer gets no
// token (a) on one rank, (b) on every rank, in one step. Its findings join the verdict.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "sim/inputs/architectures/moe_routing.h"
#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"
#include "sim/sync/sync_simulation.h"

namespace hookstream {

// The adverse case is simulated when P(some expert idle in the planned steps) is at least this: one
// run in a million. Uniform routing is the best case for coverage (a trained router concentrates
// tokens, and the load-balancing loss only pulls toward uniform), so the probability is a lower bound.
inline constexpr double kRoutingThreshold = 1e-6;

struct RoutingCase {
  std::string name;       // "one rank" or "every rank"
  std::vector<int> ranks;  // where the expert gets no token
  int iteration = 0;
  int layer = -1;         // decoder layer of the MoE block
  int expert = -1;
  std::string module;     // the expert's module path
  std::vector<std::string> parameters;  // its trainable parameters (what gets no gradient)
  RoutedIdle idle;                      // what the adverse plan adds (Plan::routed_idle)
  SyncSimulation simulation;            // the plan with that step's expert left out
};

struct RoutingCheck {
  std::string layout;       // structure.expert_layout
  std::string decided_by;   // what decided the layout
  ExpertIdleEstimate estimate;  // one MoE layer, one rank, one micro-step
  std::string tokens_from;  // how the token count was derived (which keys)
  int moe_layers = 0;
  int64_t steps = 0;        // optimizer steps planned
  std::string steps_from;   // "max_steps" or why a default was taken
  int64_t draws = 0;        // moe_layers x world_size x micro-steps per step x steps
  double p_run = 0;         // P(some expert idle somewhere in the planned steps)
  bool simulated = false;   // per-expert layout and p_run >= kRoutingThreshold
  std::vector<RoutingCase> cases;
  bool ok() const;
  std::string summary() const;  // one line for reports
};

// Tokens every MoE layer routes on one rank in one micro-step, and which keys decided it.
int64_t routed_tokens(const Plan& plan, std::string* from = nullptr);

// nullopt for a model without MoE layers.
std::optional<RoutingCheck> check_moe_routing(const Plan& plan, const ModelStructure& structure,
                                              const SyncSimulationOptions& options = {});

// Adds the first failing adverse case's findings to `simulation` (when it has none of its own), each
// explanation saying which expert, layer, rank and step and how likely that step is.
void merge_routing_findings(const RoutingCheck& check, SyncSimulation& simulation);

}  // namespace hookstream
