// Why a replayed step differs from its measurement. The replay (step_replay.h) schedules the step's
// ops on an idle GPU with the waits the trace records; the measurement is what happened. When they
// differ by more than 10% of the measurement, the report says so with what the recording shows that
// the replay does not know:
//   - work queued before the step: GPU work issued before the step's first call still ran after it
//     started (the GPU was behind the host), so the step's own GPU work started late;
//   - waits the trace does not record: synchronising calls and stream waits the trace names no
//     stream or event for (Kineto without sync events) order nothing in the replay; GPU ops that
//     started later than their launch and their stream's previous op allowed waited for something;
//   - host-bound launches: the GPU ran dry inside the step until the host launched the next op.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim/events/event_model.h"
#include "traces/recorded_step.h"

namespace hookstream {

struct StepDivergence {
  // Work queued before the step (the most on any rank's device).
  double gpu_behind_ns = 0;      // last end of GPU work issued before the step, after the step's start
  int64_t queued_ops = 0;        // GPU ops issued before the step still queued or running at its start
  // Waits the trace does not record.
  int64_t untied_waits = 0;      // sync calls and stream waits in the step tied to no stream or event
  double untied_wait_host_ns = 0;  // the host time in them
  int64_t late_ops = 0;          // step GPU ops that started > 1 us after launch, stream order and recorded waits allowed
  double late_ns = 0;            // the sum of those delays
  // Host-bound launches: GPU idle inside the step while the next op's launch was still to come.
  double launch_bound_idle_ns = 0;
  int64_t launch_bound_gaps = 0;
};

// Reads the trace the step was cut from (for the work issued before it) and the step itself.
StepDivergence explain_step_divergence(const EventModel& trace, const RecordedStep& step);

// One line per cause found, empty when |replayed - measured| <= 10% of the measurement.
std::vector<std::string> divergence_lines(const StepDivergence& d, double measured_ns, double replayed_ns);
nlohmann::json divergence_json(const StepDivergence& d, double measured_ns, double replayed_ns);

}  // namespace hookstream
