// `hookstream simulate`: the DDP verdicts of verify_plan plus the stream section (the step expanded
// with the plan's offload protocol, and its races with evidence). One struct, one section per
// concern, so the memory and time sections are added beside `streams` without touching the others.
// Output is deterministic.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "sim/event_model.h"
#include "sim/race_checker.h"
#include "sim/stream_expansion.h"
#include "sim/stream_protocol.h"
#include "sim/verify.h"

namespace hookstream {

struct SimulateOptions {
  std::string protocol;          // name or path; empty: the plan's offload_protocol_name()
  ExpansionOptions expansion;
  RaceCheckOptions races;
  size_t races_shown = 10;       // text report: the first N races in full, then a count
};

struct StreamSection {
  StreamProtocol protocol;
  std::string protocol_file;
  EventModel step;
  RaceReport races;
  bool ok() const { return races.ok(); }
};

struct SimulationReport {
  VerifyResult ddp;
  StreamSection streams;
  bool ok() const { return ddp.ok() && streams.ok(); }
};

// `plan_path` locates protocol files named relative to the plan. Throws InputError on bad input.
SimulationReport simulate_plan(const PlanSource& source, const std::string& plan_path, const SimulateOptions& options = {});

std::string render_simulation_text(const SimulationReport& report, const SimulateOptions& options = {});
nlohmann::json render_simulation_json(const SimulationReport& report);
nlohmann::json stream_section_json(const StreamSection& section);

}  // namespace hookstream
