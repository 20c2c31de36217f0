// Kernel durations of a simulated step from a device profile (sim/cost/device_profile.h): each
// kernel op of the stream expansion (sim/streams/stream_expansion.cc: a decoder layer's forward,
// recompute, attention and MLP backward, its elementwise kernels, the head, the loss, the
// optimizer) gets the sum of the measured costs of the kernels eager PyTorch (and `hookstream run`,
// runtime/train_model.cc, which issues the same ATen ops) launches for it. Compute only: copies and
// collectives keep the device spec's rates.
#pragma once

#include <string>

#include "sim/cost/device_profile.h"
#include "sim/cost/device_spec.h"
#include "sim/events/event_model.h"
#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"

namespace hookstream {

struct ProfiledCosts {
  int costed = 0;      // kernel ops given a duration from the profile
  int roofline = 0;    // kernel ops left to the roofline (names the profile does not know: vision tower)
};

// Sets duration_ns of every kernel op of `step` that has none (-1) and whose name the expansion
// gives it. A calibration still wins (estimate_op_ns looks it up before duration_ns).
ProfiledCosts apply_device_profile(EventModel& step, const Plan& plan, const ModelStructure& structure, const DeviceSpec& spec,
                                   const DeviceProfile& profile);

}  // namespace hookstream
