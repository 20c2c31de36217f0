// `hookstream simulate` and `hookstream verify`: every check of a plan in one report. The DDP
// verdicts of verify_plan; the stream section (the step expanded with the plan's offload protocol,
// and its races with evidence); the memory section (the memory model over that step, op by op,
// against the plan's GPU: `oom`); the time section (the step scheduled by the time model, and its
// critical path). Fixes for races and oom are plan changes re-verified by running every check
// again, each with its predicted step time and peak memory. Output is deterministic.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "sim/streams/dependency_graph.h"
#include "sim/events/event_model.h"
#include "sim/cost/memory_model.h"
#include "sim/streams/race_checker.h"
#include "sim/cost/step_prediction.h"
#include "sim/streams/stream_expansion.h"
#include "sim/streams/stream_protocol.h"
#include "sim/verify/verify.h"

namespace hookstream {

struct SimulateOptions {
  std::string protocol;          // name or path; empty: the plan's offload_protocol_name()
  ExpansionOptions expansion;
  RaceCheckOptions races;
  size_t races_shown = 10;       // text report: the first N race patterns in full, then a count
  bool search_fixes = true;      // look for plan changes that fix races / oom (and re-check DDP fixes)
  bool per_op_memory = true;     // JSON: memory.per_op, the memory model at every op of rank 0
};

struct StreamSection {
  StreamProtocol protocol;
  std::string protocol_file;
  EventModel step;
  RaceReport races;
  // Per race (same index as races.races): the step time with its suggested sync inserted, for the
  // races whose fix was verified and that are shown (the first of each pattern).
  std::vector<std::optional<PlanCost>> fix_costs;
  bool ok() const { return races.ok(); }
};

struct MemorySection {
  MemoryEstimate estimate;       // device_points: one per op of rank 0's step
  bool ok() const { return !estimate.oom.has_value(); }
};

struct TimeSection {
  std::string device;
  Schedule schedule;             // rank 0's step, every op timed
  int64_t tokens_per_step = 0;
  double tokens_per_second = 0;
  CriticalPath critical_path;    // op indices into schedule.model
  EngineStepCost engine;         // FSDP1/FSDP2/ZeRO: the engine's transfers (empty for DDP)
};

struct SimulationReport {
  VerifyResult ddp;              // its fixes were re-checked against the stream and memory checks too
  StreamSection streams;
  MemorySection memory;
  TimeSection time;
  std::vector<VerifiedFix> stream_fixes;   // plan changes after which every check passes
  std::vector<VerifiedFix> memory_fixes;
  std::vector<RejectedFix> rejected;       // stream/memory candidates that did not pass
  PlanCost cost() const;                   // the plan as given
  bool ok() const { return ddp.ok() && streams.ok() && memory.ok(); }
};

// `plan_path` locates protocol files named relative to the plan. Throws InputError on bad input
// (plan, protocol, GPU or calibration file).
SimulationReport simulate_plan(const PlanSource& source, const std::string& plan_path, const SimulateOptions& options = {});

// simulate's text: verify's DDP report, then streams (races shown per pattern), memory, time and the
// critical path, and the stream/memory fixes. `colour`: ANSI colour in the DDP part.
std::string render_simulation_text(const SimulationReport& report, const SimulateOptions& options = {}, bool colour = false);
// `hookstream.simulate/2`: {schema, ok, ddp (verify JSON of the DDP part), streams, memory, time, fixes}.
nlohmann::json render_simulation_json(const SimulationReport& report, const SimulateOptions& options = {});
// `hookstream.verify/2` (docs/verify-json.md): every key of verify/1, plus checks, streams, memory,
// time; fixes for every check.
nlohmann::json render_verify_json(const SimulationReport& report);
nlohmann::json stream_section_json(const StreamSection& section);
nlohmann::json memory_section_json(const MemorySection& section, const EventModel* step, bool per_op);
nlohmann::json time_section_json(const TimeSection& section);

}  // namespace hookstream
