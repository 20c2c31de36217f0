// `hookstream plan`: explore the settings that trade memory for time (checkpoint mode, activation
// offloading with one or two reload buffers (of every checkpointed layer, or of the first layers
// only when a host budget cannot hold them all), tiled-MLP shards, DDP bucket cap (DDP) or
// reshard_after_forward (FSDP1/FSDP2), micro-batch size,
// and chunked cross-entropy when the logits dominate),
// keep the candidates that fit a memory budget and pass the DDP verifier, fastest first.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sim/cost/device_spec.h"
#include "sim/cost/step_prediction.h"
#include "sim/verify/verify.h"

namespace hookstream {

struct PlanSearchOptions {
  std::optional<std::string> gpu;      // overrides the plan's `gpu`
  std::optional<double> budget_gib;    // unset: the device's capacity
  std::optional<double> host_budget_gib;  // pinned host memory (offload slots); unset: no limit
  int top = 5;                         // how many passing candidates to return
  // Only settings that leave what is trained unchanged (the micro-batch size stays): `hookstream
  // run`'s fallback after running out of memory must not change the user's batch.
  bool keep_micro_batch = false;
};

struct PlanCandidate {
  std::vector<FixChange> changes;      // --set keys that differ from the input plan
  double step_ns = 0;
  double tokens_per_second = 0;
  int64_t peak_bytes = 0;
  std::string peak_at;                 // "backward layer 35"
  std::map<MemoryCategory, int64_t> peak_breakdown;
  int64_t host_bytes = 0;              // pinned host memory
  int64_t pinned_slot_bytes = 0;       // of host_bytes: the offloaded checkpoints' pinned slots
  double copy_hidden_fraction = 1;
  std::string verdict = "not verified";  // "ok", or the first DDP finding
  // Other passing candidates whose predicted figures (step time, device and host peak, hidden
  // copies) are exactly this one's: they differ only in settings the models give no effect
  // (e.g. use_reentrant under activation offloading). Printed on this candidate's line, not as
  // repeats; this candidate is the smallest edit among them.
  std::vector<std::vector<FixChange>> equivalents;
};

struct PlanSearchResult {
  DeviceSpec device;
  int64_t budget_bytes = 0;
  PlanCandidate input;                 // the plan as given (verified too)
  // Fit the budget(s) and verified ok. Ranked by predicted tokens/s (highest first), then lower
  // device peak, then lower pinned host memory, then fewer changes.
  std::vector<PlanCandidate> best;
  int explored = 0;
  int over_budget = 0;                 // device peak over the budget
  int over_host_budget = 0;            // fits the device, but its pinned host memory does not fit
  std::optional<int64_t> host_budget_bytes;
  int failed_verification = 0;
  int equivalent = 0;                  // passing candidates folded into an earlier one's equivalents
  bool explored_chunked_loss = false;  // the logits dominated the input's peak: chunked CE was tried
  std::optional<PlanCandidate> smallest;  // the lowest peak, when nothing fits the budget
  // Where the predicted kernel times come from, for the report: the device profile's measured
  // costs or the spec's roofline, and the plan's calibration file when it has one.
  std::string cost_source;
};

PlanSearchResult search_plans(const PlanSource& source, const PlanSearchOptions& options = {});

}  // namespace hookstream
