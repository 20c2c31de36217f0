// Runs a plan through the autograd-engine model and the Reducer model for every rank, iteration
// and micro-step, and turns what happens into findings with evidence.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sim/autograd_engine.h"
#include "sim/hook_firing.h"
#include "sim/model_structure.h"
#include "sim/plan.h"
#include "sim/reducer_model.h"
#include "sim/verdict.h"

namespace hookstream {


struct StepTrace {
  int rank = 0;  // representative rank of its class
  int iteration = 0;
  int micro_step = 0;
  bool synced = true;
  std::vector<HookFiring> firings;
  std::vector<Collective> collectives;
  std::vector<GraphTaskInfo> tasks;
};

struct DdpSimulationOptions {
  bool record_steps = false;  // keep per-step hook firings (for reports, timelines and tests)
  // Ranks with identical per-rank plans behave identically and are simulated once. Off: every rank
  // is simulated (benchmarks use it to measure the per-rank cost).
  bool deduplicate_ranks = true;
};

struct DdpSimulation {
  std::vector<Finding> findings;            // sorted by rank, iteration, micro-step
  std::vector<std::vector<int>> rank_classes;  // ranks that behave identically (same per-rank plan)
  BucketAssignment initial_buckets;
  std::optional<BucketAssignment> rebuilt_buckets;
  std::vector<StepTrace> steps;              // when record_steps
  // Per iteration, by DDP index: whether the parameter's value fed the loss (forward data flow) on
  // some rank in some micro-step. One that never did is unused as DDP sees it, not `no_gradient`.
  std::map<int, std::vector<bool>> fed_loss;
  bool ok() const { return findings.empty(); }
};

DdpSimulation simulate_ddp(const Plan& plan, const ModelStructure& structure,
                           const DdpSimulationOptions& options = {});

// The buckets every iteration after the first runs with, which is what a step time is measured
// on: reducer.cpp rebuild_buckets reassigns them after the first iteration in the order gradients
// became ready, with {first_bucket_bytes_cap, bucket_bytes_cap} limits, when
// find_unused_parameters is off or static_graph is on (the first iteration then ran with one
// bucket); otherwise the initial assignment stays. `simulated`: this plan's simulation if the
// caller ran it (reused when it covers a second iteration); otherwise one is run, with two
// iterations when the plan has one.
BucketAssignment steady_state_buckets(const Plan& plan, const ModelStructure& structure,
                                      const DdpSimulation* simulated = nullptr);
// The same from a simulation already run (its rebuilt buckets, else its initial ones).
const BucketAssignment& steady_state_buckets(const DdpSimulation& simulation);

// The Reducer's view of a model's DDP parameters.
std::vector<ReducerParameter> reducer_parameters(const ModelStructure& structure);
ReducerOptions reducer_options(const Plan& plan);

}  // namespace hookstream
