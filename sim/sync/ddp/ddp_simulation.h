// Runs a plan through the autograd-engine model and the Reducer model for every rank, iteration
// and micro-step, and turns what happens into findings with evidence.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sim/engine/autograd_engine.h"
#include "sim/engine/hook_firing.h"
#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"
#include "sim/sync/ddp/reducer_model.h"
#include "sim/sync/sync_simulation.h"
#include "sim/verify/verdict.h"

namespace hookstream {


SyncSimulation simulate_ddp(const Plan& plan, const ModelStructure& structure,
                           const SyncSimulationOptions& options = {});

// The buckets every iteration after the first runs with, which is what a step time is measured
// on: reducer.cpp rebuild_buckets reassigns them after the first iteration in the order gradients
// became ready, with {first_bucket_bytes_cap, bucket_bytes_cap} limits, when
// find_unused_parameters is off or static_graph is on (the first iteration then ran with one
// bucket); otherwise the initial assignment stays. `simulated`: this plan's simulation if the
// caller ran it (reused when it covers a second iteration); otherwise one is run, with two
// iterations when the plan has one.
BucketAssignment steady_state_buckets(const Plan& plan, const ModelStructure& structure,
                                      const SyncSimulation* simulated = nullptr);
// The same from a simulation already run (its rebuilt buckets, else its initial ones).
const BucketAssignment& steady_state_buckets(const SyncSimulation& simulation);

// The Reducer's view of a model's DDP parameters.
std::vector<ReducerParameter> reducer_parameters(const ModelStructure& structure);
ReducerOptions reducer_options(const Plan& plan);

}  // namespace hookstream
