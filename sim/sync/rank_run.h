// The per-rank driver every engine on the SyncModel interface shares: one AutogradEngine for the
// rank; per iteration and micro-step, the forward recorded with the engine's module hooks,
// loss.backward(), every AccumulateGrad execution handed to the engine with its graph task, and the
// first SyncError turned into a finding with its evidence (parameter, module, graph tasks, rank,
// iteration, micro-step). Then, across rank classes, the collective logs are compared
// (collective_mismatch) and the findings merged.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"
#include "sim/sync/sync_model.h"
#include "sim/sync/sync_simulation.h"

namespace hookstream {

struct RankRun {
  std::vector<Finding> findings;
  std::vector<Finding> warnings;
  CollectiveLog log;
  StepKey stopped_at;
  std::vector<StepTrace> steps;
};

// Runs `model` for `rank` over the plan's iterations and micro-steps.
RankRun run_rank(const Plan& plan, const ModelStructure& structure, int rank, SyncModel& model, bool record);

// "checkpoint(layer 3) (nested, depth 1)": a graph task as findings name it.
std::string task_text(const GraphTaskInfo& task);

using SyncModelFactory = std::function<std::unique_ptr<SyncModel>(int rank)>;

// How the ranks' collective logs meet: per class, the finding that stops it there (kind Ok: none).
// May add silent findings to `per_class`. The default, collective_mismatch_findings, takes the first
// difference of `Collective::what` as a hang; FSDP1 pairs collective by collective as the process
// group does (sim/sync/fsdp1/fsdp1_pairing.h).
using CollectivePairing = std::function<std::vector<Finding>(
    const std::vector<std::vector<int>>& classes, const std::vector<CollectiveLog>& logs,
    std::vector<std::vector<Finding>>& per_class)>;

// Runs one model per rank class, compares collectives across classes and merges the findings.
SyncSimulation simulate_with_model(const Plan& plan, const ModelStructure& structure, const SyncModelFactory& make,
                                   const SyncSimulationOptions& options, const CollectivePairing& pairing = {});

}  // namespace hookstream
