// Everything `hookstream replay` says about one recorded step: the step cut out and attributed
// (recorded_step.h), replayed by the simulator's scheduler with its critical path (step_replay.h),
// its races (step_findings.h), and, when asked, the plan comparison and calibration
// (plan_comparison.h) and what-if predictions. Text and the "step" object of the JSON report.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "sim/inputs/plan.h"
#include "traces/plan_comparison.h"
#include "traces/recorded_step.h"
#include "traces/replay_report.h"
#include "traces/step_divergence.h"
#include "traces/step_findings.h"
#include "traces/step_replay.h"

namespace hookstream {

struct StepAnalysisOptions {
  StepSelection selection;
  const Plan* plan = nullptr;          // compare with this plan's simulated step
  std::vector<WhatIfChange> what_if;
  // Critical-path segments the text and JSON reports list, first to last; 0: all. A long trace's
  // path has ~10^5 segments (102 k GPU ops: 203 k, 85 MB of JSON); by_what sums them all.
  size_t critical_segments_shown = 20;
};

struct StepAnalysis {
  RecordedStep step;
  StepReplay replay;                   // groups and step_op per op of schedule.model; replay.model is
                                       // empty: its ops were moved into schedule.model
  Schedule schedule;                   // the replay without changes
  CriticalPathReport critical;
  StepRaceReport races;
  std::optional<PlanComparison> plan;
  std::optional<WhatIfReport> what_if;
  StepDivergence divergence;           // what the recording shows that the replay does not know
};

StepAnalysis analyse_step(const EventModel& trace, const StepAnalysisOptions& options = {});

// What `hookstream replay` computes: the whole-trace analyses (replay_report.h) and the step
// analysis. Both only read the trace, so the whole-trace analyses run on a second thread; the
// results do not depend on the threads' timing.
struct TraceAnalysis {
  ReplayReport report;
  StepAnalysis step;
};
TraceAnalysis analyse_trace(const EventModel& trace, const StepAnalysisOptions& options = {});
// The same for a caller done with the trace: it is emptied as soon as both analyses have read it
// (its memory then serves the step replay).
TraceAnalysis analyse_trace(EventModel&& trace, const StepAnalysisOptions& options = {});

std::string render_step_text(const StepAnalysis& analysis, const StepAnalysisOptions& options = {});
nlohmann::json render_step_json(const StepAnalysis& analysis, const StepAnalysisOptions& options = {});

}  // namespace hookstream
