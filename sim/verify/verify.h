// `hookstream verify`: load a plan, simulate DDP for every rank and iteration, and for a failing
// plan try the changes users actually make, keeping only those the simulator proves clean.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sim/sync/ddp/ddp_simulation.h"
#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"
#include "sim/verify/moe_routing_check.h"

namespace hookstream {

struct PlanSource {
  std::string yaml_text;
  std::string source;  // file name for messages
  LoadOptions options;
};

PlanSource read_plan_source(const std::string& path, const LoadOptions& options);

struct FixChange {
  FixChange() = default;
  // Most changes edit the plan: {key, value} leaves `file` empty (a constructor, so the two-value
  // braces every fix list uses stay free of -Wmissing-field-initializers).
  FixChange(std::string key_, std::string value_, std::string file_ = "")
      : key(std::move(key_)), value(std::move(value_)), file(std::move(file_)) {}
  std::string key;    // dotted plan key
  std::string value;  // YAML value
  // The file the change edits: "" for the plan; the DeepSpeed JSON the plan's `deepspeed:` names,
  // or the --accelerate-config file that sets the engine (setting_as_written in sim/inputs/plan.h).
  std::string file;
};

// What a plan costs on its GPU (plan.gpu), by the memory and time models.
struct PlanCost {
  std::string device;
  double step_seconds = 0;
  int64_t peak_device_bytes = 0;
  int64_t peak_host_bytes = 0;  // pinned host memory per rank (offloaded checkpoints' slots)
  std::string peak_at;          // where the device peak is: "backward layer 0 attention backward"
  // Every moment the memory model evaluated, in step order (MemoryEstimate::device_points): label
  // (phase and place, as peak_at) and device bytes; `hookstream run` puts them beside its measured
  // per-part peaks.
  std::vector<std::pair<std::string, int64_t>> device_points;
};

struct VerifiedFix {
  std::vector<FixChange> changes;
  std::string rationale;
  std::optional<PlanCost> cost;  // predicted cost of the plan with this change
};

struct RejectedFix {
  std::vector<FixChange> changes;
  std::string outcome;  // what still fails, e.g. "marked_ready_twice at ...lora_B.default.weight"
};

struct VerifyResult {
  Plan plan;
  std::string source_text;             // the plan file's text: fixes are shown as patches to it
  ModelStructure structure;
  SyncSimulation simulation;
  std::vector<VerifiedFix> fixes;      // only when the plan fails
  std::vector<RejectedFix> rejected;   // tried, and the simulator showed they do not fix it
  std::optional<PlanCost> cost;        // predicted cost of the plan as given (when fixes are searched)
  // MoE models: the routing check (its failing adverse step's findings are in `simulation`).
  std::optional<RoutingCheck> routing;
  bool ok() const { return simulation.ok(); }
};

struct VerifyOptions {
  bool search_fixes = true;
  bool cost_fixes = true;  // predict step time and peak memory of the plan and of each fix
  bool record_steps = false;
  bool deduplicate_ranks = true;  // see SyncSimulationOptions
  // More checks a candidate fix must pass once its DDP schedule is clean (simulate_plan passes the
  // stream and memory checks): "" when it passes, otherwise what still fails.
  std::function<std::string(const Plan&, const ModelStructure&)> also_check;
};

VerifyResult verify_plan(const PlanSource& source, const VerifyOptions& options = {});

// `fixes` with every key spelled as the plan text spells that setting (key_as_written in
// sim/inputs/plan.h), so a fix is verified, printed and patched in the user's own keys.
void spell_as_written(std::vector<VerifiedFix>& fixes, const PlanSource& source);

// The plan's predicted step time and peak device memory; nullopt when the models cannot run for it
// (an unknown GPU name, a protocol file that cannot be read: verify itself does not need them).
// `ddp`: the plan's DDP simulation when the caller has it (not simulated again).
std::optional<PlanCost> predict_cost(const Plan& plan, const ModelStructure& structure, const SyncSimulation* ddp = nullptr);

// The candidate changes for a plan, in the order users reach for them.
std::vector<VerifiedFix> candidate_fixes(const Plan& plan);

}  // namespace hookstream
