// A plan simulated under the gradient-sync engine it runs on (plan.engine): the findings every
// engine reports in the same shape, the rank classes, and per-step evidence. DDP's Reducer
// (sim/sync/ddp/ddp_simulation.h) and the engines on the shared driver (sim/sync/rank_run.h) all produce it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sim/engine/autograd_engine.h"
#include "sim/engine/hook_firing.h"
#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"
#include "sim/sync/sync_model.h"
#include "sim/verify/verdict.h"

namespace hookstream {

// Buckets as lists of DDP parameter indices, plus the size limit each bucket was built with.
struct BucketAssignment {
  std::vector<std::vector<int>> buckets;
  std::vector<int64_t> limits;
};

struct StepTrace {
  int rank = 0;  // representative rank of its class
  int iteration = 0;
  int micro_step = 0;
  bool synced = true;
  std::vector<HookFiring> firings;
  std::vector<Collective> collectives;
  std::vector<GraphTaskInfo> tasks;
};

struct SyncSimulationOptions {
  bool record_steps = false;  // keep per-step hook firings (for reports, timelines and tests)
  // Ranks with identical per-rank plans behave identically and are simulated once. Off: every rank
  // is simulated (benchmarks use it to measure the per-rank cost).
  bool deduplicate_ranks = true;
};

struct SyncSimulation {
  std::string engine = "DDP";                  // the engine simulated (SyncModel::name())
  std::vector<Finding> findings;               // sorted by rank, iteration, micro-step
  // Findings that do not fail the run but cost memory or time (extra all-gathers, leaks): warnings.
  std::vector<Finding> warnings;
  std::vector<std::vector<int>> rank_classes;  // ranks that behave identically (same per-rank plan)
  BucketAssignment initial_buckets;            // DDP only
  std::optional<BucketAssignment> rebuilt_buckets;
  std::vector<StepTrace> steps;                // when record_steps
  // Per iteration, by DDP index: whether the parameter's value fed the loss (forward data flow) on
  // some rank in some micro-step. One that never did is unused as DDP sees it, not `no_gradient`.
  std::map<int, std::vector<bool>> fed_loss;
  bool ok() const { return findings.empty(); }
};

// Everything about a rank's plan that shapes its hook schedule; ranks with equal keys behave
// identically and are simulated once.
std::string rank_schedule_key(const Plan& plan, int rank);
// Groups the plan's ranks into classes of identical schedules (or one class per rank).
std::vector<std::vector<int>> rank_classes(const Plan& plan, bool deduplicate);

// One rank class's collective log and whether it stopped with an error.
struct CollectiveLog {
  std::vector<std::pair<StepKey, Collective>> collectives;
  bool stopped = false;
};

// Ranks must issue the same collectives in the same order; the first difference leaves a rank
// blocked until the timeout. Returns, per class, the collective_mismatch finding (kind Ok: none).
std::vector<Finding> collective_mismatch_findings(const std::vector<std::vector<int>>& classes,
                                                  const std::vector<CollectiveLog>& logs);
// Adds each class's findings to `out` with the class's ranks, the hang first: a class with a
// mismatch keeps only what happens before it.
void merge_class_findings(const std::vector<std::vector<int>>& classes, std::vector<std::vector<Finding>> per_class,
                          const std::vector<Finding>& mismatches, std::vector<Finding>& out);
void sort_findings(std::vector<Finding>& findings);

// Whether hookstream models the engine's hook schedule (false: the engine_not_modelled result).
bool gradient_sync_modelled(const Engine& engine);
// Simulates the plan under plan.engine. Precondition: gradient_sync_modelled(plan.engine).
SyncSimulation simulate_gradient_sync(const Plan& plan, const ModelStructure& structure,
                                      const SyncSimulationOptions& options = {});

}  // namespace hookstream
