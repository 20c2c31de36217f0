// Kernel durations of a simulated step from a device profile (sim/cost/device_profile.h): each
// kernel op of the stream expansion (sim/streams/stream_expansion.cc: a decoder layer's forward,
// recompute, attention and MLP backward, its elementwise kernels, the head, the loss, the
// optimizer) gets the sum of the measured costs of the kernels eager PyTorch (and `hookstream run`,
// runtime/train_model.cc, which issues the same ATen ops) launches for it. Compute only: copies and
// collectives keep the device spec's rates.
#pragma once

#include <string>
#include <vector>

#include "sim/cost/calibration.h"

#include "sim/cost/device_profile.h"
#include "sim/cost/device_spec.h"
#include "sim/events/event_model.h"
#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"

namespace hookstream {

struct ProfiledCosts {
  int costed = 0;      // kernel ops given a duration from the profile
  int roofline = 0;    // kernel ops left to the roofline (names the profile does not know: vision tower)
  std::vector<CostParts> parts;  // per op of the step: what its duration is made of (zero: not costed here)
};

// Sets duration_ns of every kernel op of `step` that has none (-1) and whose name the expansion
// gives it. A calibration applies on top (predict_expanded_step: by part where `parts` says).
ProfiledCosts apply_device_profile(EventModel& step, const Plan& plan, const ModelStructure& structure, const DeviceSpec& spec,
                                   const DeviceProfile& profile);

// The parts of every kernel op of `step` the profile costs by name, whatever its duration now
// (zero for the others): what a calibration's part scales apply to (traces/plan_comparison.cc).
std::vector<CostParts> profiled_cost_parts(const EventModel& step, const Plan& plan, const ModelStructure& structure,
                                           const DeviceSpec& spec, const DeviceProfile& profile);

}  // namespace hookstream
