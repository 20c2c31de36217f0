// `hookstream verify`: load a plan, simulate DDP for every rank and iteration, and for a failing
// plan try the changes users actually make, keeping only those the simulator proves clean.
#pragma once

#include <string>
#include <vector>

#include "sim/ddp_simulation.h"
#include "sim/model_structure.h"
#include "sim/plan.h"

namespace hookstream {

struct PlanSource {
  std::string yaml_text;
  std::string source;  // file name for messages
  LoadOptions options;
};

PlanSource read_plan_source(const std::string& path, const LoadOptions& options);

struct FixChange {
  std::string key;    // dotted plan key
  std::string value;  // YAML value
};

struct VerifiedFix {
  std::vector<FixChange> changes;
  std::string rationale;
};

struct RejectedFix {
  std::vector<FixChange> changes;
  std::string outcome;  // what still fails, e.g. "marked_ready_twice at ...lora_B.default.weight"
};

struct VerifyResult {
  Plan plan;
  ModelStructure structure;
  DdpSimulation simulation;
  std::vector<VerifiedFix> fixes;      // only when the plan fails
  std::vector<RejectedFix> rejected;   // tried, and the simulator showed they do not fix it
  bool ok() const { return simulation.ok(); }
};

struct VerifyOptions {
  bool search_fixes = true;
  bool record_steps = false;
  bool deduplicate_ranks = true;  // see DdpSimulationOptions
};

VerifyResult verify_plan(const PlanSource& source, const VerifyOptions& options = {});

// The candidate changes for a plan, in the order users reach for them.
std::vector<VerifiedFix> candidate_fixes(const Plan& plan);

}  // namespace hookstream
