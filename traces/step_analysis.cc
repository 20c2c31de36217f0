#include "traces/step_analysis.h"

#include <future>
#include <limits>
#include <map>
#include <sstream>

#include "traces/cuda_api.h"

namespace hookstream {

namespace {

std::string percent(double part, double whole) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(1);
  out << (whole > 0 ? 100.0 * part / whole : 0.0) << "%";
  return out.str();
}

}  // namespace

namespace {

// How many critical-path segments are built and listed: critical_segments_shown, 0 meaning all.
size_t critical_segments_limit(const StepAnalysisOptions& options) {
  return options.critical_segments_shown == 0 ? std::numeric_limits<size_t>::max() : options.critical_segments_shown;
}

// Everything after the step cut: the race check beside the replay chain.
void analyse_cut_step(StepAnalysis& analysis, const StepAnalysisOptions& options) {
  // The race check reads only the step; the replay chain below never changes it.
  auto races = std::async(std::launch::async, [&step = analysis.step] { return check_step_races(step); });
  analysis.replay = build_step_replay(analysis.step);
  if (options.plan) analysis.plan = compare_with_plan(analysis.step, *options.plan);
  if (!options.what_if.empty()) {
    analysis.what_if = run_what_if(analysis.step, analysis.replay, options.what_if,
                                   analysis.plan ? analysis.plan->bucket_bytes : std::vector<int64_t>{});
  }
  // Last use of the replay's ops: they are scheduled in place rather than copied (a long trace's
  // step is hundreds of MB of ops); schedule.model is the replay op for op, with scheduled times.
  ScheduledReplay scheduled = schedule_replay_in_place(analysis.replay, critical_segments_limit(options));
  analysis.schedule = std::move(scheduled.schedule);
  analysis.critical = std::move(scheduled.critical);
  analysis.races = races.get();
}

}  // namespace

StepAnalysis analyse_step(const EventModel& trace, const StepAnalysisOptions& options) {
  StepAnalysis analysis;
  analysis.step = extract_step(trace, options.selection);
  analysis.divergence = explain_step_divergence(trace, analysis.step);
  analyse_cut_step(analysis, options);
  return analysis;
}

TraceAnalysis analyse_trace(const EventModel& trace, const StepAnalysisOptions& options) {
  auto report = std::async(std::launch::async, [&trace] { return analyse_replay(trace); });
  TraceAnalysis analysis;
  analysis.step = analyse_step(trace, options);
  analysis.report = report.get();
  return analysis;
}

TraceAnalysis analyse_trace(EventModel&& trace, const StepAnalysisOptions& options) {
  auto report = std::async(std::launch::async, [&trace] { return analyse_replay(trace); });
  TraceAnalysis analysis;
  analysis.step.step = extract_step(trace, options.selection);  // on a throw, `report` waits in its destructor
  analysis.step.divergence = explain_step_divergence(trace, analysis.step.step);
  analysis.report = report.get();
  // Nothing reads the trace any more: its ops' memory goes back to the heap, where the replay's ops
  // reuse it instead of new pages the kernel must zero (the trace is a third of the peak).
  trace = EventModel{};
  analyse_cut_step(analysis.step, options);
  return analysis;
}

namespace {

size_t segments_listed(const StepAnalysis& a, const StepAnalysisOptions& options) {
  return std::min(a.critical.segments.size(), critical_segments_limit(options));
}

}  // namespace

std::string render_step_text(const StepAnalysis& a, const StepAnalysisOptions& options) {
  std::ostringstream out;
  const RecordedStep& step = a.step;
  std::map<OpClass, std::pair<int, double>> classes;
  for (size_t i = 0; i < step.model.ops.size(); ++i) {
    if (step.groups[i].op_class == OpClass::None) continue;
    auto& c = classes[step.groups[i].op_class];
    c.first++;
    c.second += std::max(0.0, step.model.ops[i].duration_ns);
  }
  out << "\nStep " << step.step_label << ": " << ms_text(step.measured_ns()) << " measured, " << ms_text(a.schedule.step_ns)
      << " replayed by the simulator's scheduler over the recorded durations\n";
  for (const std::string& note : step.notes) out << "  " << note << "\n";
  const std::vector<std::string> why = divergence_lines(a.divergence, step.measured_ns(), a.schedule.step_ns);
  for (size_t k = 0; k < why.size(); ++k) out << (k == 0 ? "  " : "    - ") << why[k] << "\n";
  out << "  GPU time by op class:";
  for (const auto& [op_class, c] : classes) out << " " << to_string(op_class) << " " << ms_text(c.second) << " (" << c.first << " ops);";
  out << "\n";

  out << "\nCritical path of the replayed step: " << ms_text(a.critical.length_ns) << " of " << ms_text(a.critical.step_ns) << "\n";
  if (!a.critical.unavailable.empty()) {
    out << "  not computed: " << a.critical.unavailable << "\n";
  } else {
    for (size_t k = 0; k < a.critical.by_what.size() && k < 6; ++k) {
      out << "  " << a.critical.by_what[k].first << ": " << ms_text(a.critical.by_what[k].second) << " ("
          << percent(a.critical.by_what[k].second, a.critical.length_ns) << ")\n";
    }
    const size_t shown = segments_listed(a, options);
    for (size_t k = 0; k < shown; ++k) {
      const CriticalSegment& s = a.critical.segments[k];
      out << "  " << ms_text(s.start_ns) << " +" << ms_text(s.duration_ns) << "  rank " << s.rank << " " << s.where << ": " << s.what << ", "
          << s.ops << " op" << (s.ops == 1 ? "" : "s") << " ("
          << display_op_name(s.first_op, 60) << (s.ops > 1 ? " .. " + display_op_name(s.last_op, 60) : "") << ")\n";
    }
    if (a.critical.segments_total > shown) {
      out << "  ... " << a.critical.segments_total - shown << " more segments (--critical-segments N lists more, 0 all)\n";
    }
  }

  out << "\nRaces between annotated buffer accesses: ";
  if (!a.races.checked) {
    out << "not checked (" << a.races.not_checked << ")\n";
  } else {
    out << a.races.race_count << " over " << a.races.accesses << " accesses\n";
    for (const RecordedRace& r : a.races.races) {
      out << "  " << r.kind << " on " << r.buffer << (r.unordered_producer_consumer ? " (unordered producer/consumer)" : "") << "\n"
          << "    earlier: " << r.earlier << "\n    later:   " << r.later << "\n    evidence: "
          << (r.overlapped ? "the two ran at the same time in this recording"
                           : "no ordering between them; in this recording " + ms_text(r.gap_ns) + " apart")
          << "\n";
      if (!r.race.fix.text.empty()) out << "    fix: " << r.race.fix.text << (r.race.fix.verified ? " (verified)" : "") << "\n";
    }
  }

  if (a.plan) out << "\n" << render_plan_comparison_text(*a.plan);
  if (a.what_if) {
    out << "\nWhat-if (replayed step " << ms_text(a.what_if->replayed_ns) << ", measured " << ms_text(a.what_if->measured_ns) << "):\n";
    for (const WhatIfOutcome& o : a.what_if->outcomes) {
      out << "  " << o.change << ": " << ms_text(o.old_step_ns) << " -> " << ms_text(o.new_step_ns) << " ("
          << (o.new_step_ns <= o.old_step_ns ? "-" : "+") << percent(std::abs(o.old_step_ns - o.new_step_ns), o.old_step_ns) << ")\n"
          << "    why: " << o.why << "\n";
    }
  }
  return out.str();
}

nlohmann::json render_step_json(const StepAnalysis& a, const StepAnalysisOptions& options) {
  const RecordedStep& step = a.step;
  nlohmann::json classes = nlohmann::json::object();
  for (size_t i = 0; i < step.model.ops.size(); ++i) {
    if (step.groups[i].op_class == OpClass::None) continue;
    nlohmann::json& c = classes[to_string(step.groups[i].op_class)];
    if (c.is_null()) c = {{"ops", 0}, {"gpu_ns", 0.0}};
    c["ops"] = c["ops"].get<int>() + 1;
    c["gpu_ns"] = c["gpu_ns"].get<double>() + std::max(0.0, step.model.ops[i].duration_ns);
  }
  nlohmann::json segments = nlohmann::json::array(), by_what = nlohmann::json::array();
  const size_t listed = segments_listed(a, options);
  for (size_t k = 0; k < listed; ++k) {
    const CriticalSegment& s = a.critical.segments[k];
    segments.push_back({{"rank", s.rank}, {"where", s.where}, {"what", s.what}, {"ops", s.ops}, {"start_ns", s.start_ns},
                        {"duration_ns", s.duration_ns}, {"first_op", s.first_op}, {"last_op", s.last_op}});
  }
  for (const auto& [what, ns] : a.critical.by_what) by_what.push_back({{"what", what}, {"ns", ns}});
  nlohmann::json races = nlohmann::json::array();
  for (const RecordedRace& r : a.races.races) {
    races.push_back({{"kind", r.kind}, {"buffer", r.buffer}, {"unordered_producer_consumer", r.unordered_producer_consumer},
                     {"earlier", r.earlier}, {"later", r.later}, {"overlapped", r.overlapped}, {"gap_ns", r.gap_ns},
                     {"fix", r.race.fix.text}, {"fix_verified", r.race.fix.verified}});
  }
  nlohmann::json j = {
      {"label", step.step_label},
      {"annotated", step.annotated},
      {"ops", step.model.ops.size()},
      {"measured_ns", step.measured_ns()},
      {"replayed_ns", a.schedule.step_ns},
      {"divergence", divergence_json(a.divergence, step.measured_ns(), a.schedule.step_ns)},
      {"notes", step.notes},
      {"classes", classes},
      {"critical_path", {{"length_ns", a.critical.length_ns}, {"unavailable", a.critical.unavailable}, {"by_what", by_what},
                         {"segments", segments}, {"segments_total", a.critical.segments_total}}},
      {"races", {{"checked", a.races.checked}, {"not_checked", a.races.not_checked}, {"accesses", a.races.accesses},
                 {"count", a.races.race_count}, {"races", races}}}};
  if (a.plan) j["plan"] = render_plan_comparison_json(*a.plan);
  if (a.what_if) {
    nlohmann::json outcomes = nlohmann::json::array();
    for (const WhatIfOutcome& o : a.what_if->outcomes) {
      outcomes.push_back({{"change", o.change}, {"old_step_ns", o.old_step_ns}, {"new_step_ns", o.new_step_ns},
                          {"ops_changed", o.ops_changed}, {"why", o.why}});
    }
    j["what_if"] = {{"measured_ns", a.what_if->measured_ns}, {"replayed_ns", a.what_if->replayed_ns}, {"outcomes", outcomes}};
  }
  return j;
}

}  // namespace hookstream
