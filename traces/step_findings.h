// Findings on a recorded step: races between the buffer accesses the runtime annotations announce,
// checked by the simulator's happens-before checker (sim/streams/race_checker.h) over the recorded order
// (stream order, the event records and waits and host syncs the trace or the annotations show), and
// a Perfetto-ready timeline of the step with the findings marked.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim/streams/race_checker.h"
#include "traces/recorded_step.h"
#include "traces/step_replay.h"

namespace hookstream {

struct RecordedRace {
  Race race;
  std::string kind;                 // "write after read", ...
  bool unordered_producer_consumer = false;  // a write on one stream, a read on another, no ordering
  bool overlapped = false;          // the two ops' recorded GPU intervals overlap: the race happened
  double gap_ns = 0;                // otherwise: time between the first's end and the second's start
  std::string earlier, later;       // describe_op, with the annotation
  std::string buffer;
};

struct StepRaceReport {
  bool checked = false;
  std::string not_checked;          // why not (no annotations: no buffer accesses)
  size_t accesses = 0;              // buffer accesses checked
  size_t race_count = 0;
  std::vector<RecordedRace> races;  // the first ones
};

StepRaceReport check_step_races(const RecordedStep& step, size_t max_races = 50);

// Chrome trace JSON of the recorded step (times from the step's start), via sim/events/timeline.h, plus:
// instant events at the largest GPU gaps, exposed copies (less than half hidden by compute), host
// syncs inside the step, and flow arrows between the two ops of each race.
std::string recorded_step_timeline(const RecordedStep& step, const StepRaceReport& races);

}  // namespace hookstream
