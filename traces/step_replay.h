// A recorded step replayed by the simulator's own scheduler (sim/cost/time_model.h schedule_step) over
// the recorded durations, so that a change to its dependency graph (what-if) predicts a new step
// time with the same rules the simulator uses for plans, and the critical path (sim/streams/dependency_graph.h)
// says which chain of recorded ops bounds the step.
//
// The replay keeps the host's own time: between two host-side ops the host is busy for the time the
// trace shows between them (Python, the dispatcher, launch overhead), except while it is blocked in
// a synchronising call or a blocking copy, which the scheduler recomputes from the GPU side. Without
// changes, the replayed step time should be close to the measured one; the difference is reported
// as the replay's error.
#pragma once

#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "sim/streams/dependency_graph.h"
#include "sim/events/event_model.h"
#include "sim/cost/time_model.h"
#include "traces/recorded_step.h"

namespace hookstream {

struct StepReplay {
  EventModel model;             // the step with host-time ops inserted, durations as recorded
  std::vector<OpGroup> groups;  // per op of `model`
  std::vector<int> step_op;     // per op: index in RecordedStep::model, -1 for inserted ops
};

StepReplay build_step_replay(const RecordedStep& step);

// schedule_step over the recorded durations (every op carries one; no device estimate is used).
Schedule schedule_replay(const StepReplay& replay);

// The critical path of a scheduled replay, grouped into runs of consecutive ops on the same stream
// (or the host) and op group.
struct CriticalSegment {
  int rank = 0;
  int stream = -1;          // -1: the host
  // Shared strings (sim/events/text.h): a long trace's path has ~10^5 segments naming few distinct things.
  Text where;               // "host" or the stream's name
  Text what;                // the op group's label, or "host work"
  int ops = 0;
  double start_ns = 0, duration_ns = 0;  // scheduled, relative to the step's start
  Text first_op, last_op;                // names
};
struct CriticalPathReport {
  double length_ns = 0;     // sum of the durations on the path
  double step_ns = 0;       // the scheduled step time
  std::vector<CriticalSegment> segments;  // the first ones, up to the number asked for
  size_t segments_total = 0;              // on the whole path
  std::vector<std::pair<std::string, double>> by_what;  // time on the path per op group label / host, largest first
  std::string unavailable;  // why no path was computed (e.g. more streams than the clock holds)
};
// `keep_segments`: how many segments to build, first to last (by_what and segments_total cover all).
CriticalPathReport replay_critical_path(const Schedule& schedule, const StepReplay& replay,
                                        size_t keep_segments = std::numeric_limits<size_t>::max());

// schedule_replay and replay_critical_path without copying the ops, the dependency DAG built on a
// second thread while the schedule runs: `replay.model` is moved into the schedule (Schedule::model
// is the replay op for op, with scheduled times); `replay.groups` and `replay.step_op` stay and
// still describe those ops.
struct ScheduledReplay {
  Schedule schedule;
  CriticalPathReport critical;
};
ScheduledReplay schedule_replay_in_place(StepReplay& replay,
                                         size_t keep_segments = std::numeric_limits<size_t>::max());

// What-if changes to the recorded dependency graph (docs/replay.md).
struct WhatIfChange {
  enum class Kind { SecondReloadBuffer, CopyToSideStream, BucketCapMb, RemoveHostSync } kind = Kind::SecondReloadBuffer;
  double bucket_cap_mb = 0;
  std::string sync_api;     // remove_host_sync=NAME: only calls whose name contains NAME
  std::string spec;         // as given
};
// Throws InputError("--what-if", ...) for an unknown change or a bad value.
WhatIfChange parse_what_if(const std::string& spec);

struct WhatIfOutcome {
  std::string change;
  double old_step_ns = 0, new_step_ns = 0;
  int ops_changed = 0;
  std::string why;
};
struct WhatIfReport {
  double measured_ns = 0;    // the recorded step
  double replayed_ns = 0;    // the replay without changes (the baseline the changes are applied to)
  std::vector<WhatIfOutcome> outcomes;  // each change alone, then all together when more than one
};

// `bucket_bytes`: the bytes of each all-reduce in launch order when the trace does not say (a
// plan's simulated buckets); empty: taken from the trace, else proportional to duration.
WhatIfReport run_what_if(const RecordedStep& step, const StepReplay& replay, const std::vector<WhatIfChange>& changes,
                         const std::vector<int64_t>& bucket_bytes = {});

// "12.345 ms": how the step reports (replay, what-if, critical path) print a duration.
std::string ms_text(double ns);

}  // namespace hookstream
