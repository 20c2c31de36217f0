#include "fuzz/fuzz_targets.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>
#include <optional>
#include <vector>

#include "sim/cost/calibration.h"
#include "sim/inputs/data_files.h"
#include "sim/inputs/input_error.h"
#include "sim/verify/json_text.h"
#include "sim/cost/memory_model.h"
#include "sim/inputs/plan.h"
#include "sim/verify/simulation_report.h"
#include "sim/events/timeline.h"
#include "sim/verify/verify.h"
#include "traces/importers/gzip_reader.h"
#include "traces/importers/kineto/kineto_event_scanner.h"
#include "traces/importers/nsys/nsys_importer.h"
#include "traces/replay_report.h"
#include "traces/step_analysis.h"
#include "traces/step_findings.h"
#include "traces/trace_loader.h"

namespace hookstream::fuzz {

namespace {

void write_file(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

// Every field a sink is handed, one line per event; doubles in hex so that "the same numbers"
// means the same bits.
class RecordingSink final : public KinetoEventSink {
 public:
  // The Kineto importer's categories (kineto_importer.cc, category_of) and gpu_user_annotation,
  // which it drops: any set serves, as long as every reader keeps the same events by it; every
  // other category takes the parsers' dropping path.
  bool wants_category(const std::string& cat) const override {
    static constexpr const char* kWanted[] = {"kernel",  "Kernel",      "Memcpy",     "Memset",
                                              "Driver",  "Runtime",     "cuda_sync",  "gpu_memcpy",
                                              "gpu_memset", "cuda_driver", "cuda_runtime", "user_annotation",
                                              "gpu_user_annotation"};
    for (const char* word : kWanted)
      if (cat == word) return true;
    return false;
  }
  void event(KinetoEvent& e) override {
    text += fmt::format("{}|{}|{}|{}|{}|{}|{}:{:a}|{}:{:a}|{}{}|{}|{}|{}|{}|{}|{}|{}|{}\n", e.ph, e.cat, e.name,
                        e.sync_kind, e.pid, e.tid, e.ts.whole, e.ts.fraction, e.dur.whole, e.dur.fraction,
                        e.has_ts, e.has_dur, e.device, e.context, e.stream, e.correlation, e.bytes,
                        e.wait_on_stream, e.wait_record, e.wait_event);
  }
  std::string text;
};

std::string info_text(const KinetoTraceInfo& info) {
  return fmt::format("saw_events={} has_base_time={} base_time_ns={} bytes={}", info.saw_events,
                     info.has_base_time, info.base_time_ns, info.bytes);
}

// What one way of reading produced: the events and info, or the error's message.
template <typename Read>
std::string outcome_of(Read&& read, bool& internal) {
  try {
    return read();
  } catch (const InputError& e) {
    return std::string("InputError: ") + e.what();
  } catch (const std::exception& e) {
    internal = true;
    return std::string("internal error: ") + e.what();
  }
}

std::string shorten(const std::string& s) { return s.size() <= 2000 ? s : s.substr(0, 2000) + "..."; }

}  // namespace

std::string kineto_scan(const uint8_t* data, size_t size, const std::string& dir) {
  if (size == 0) return "";
  const uint8_t knob = data[0];
  const std::string path = dir + "/kineto_scan.json";
  write_file(path, data + 1, size - 1);

  bool internal = false;
  std::vector<std::pair<std::string, std::string>> outcomes;
  const auto single = [&](size_t block_bytes, InflateEngine engine) {
    return [&path, block_bytes, engine] {
      GzipReader reader(path, block_bytes, engine);
      RecordingSink sink;
      const KinetoTraceInfo info = scan_kineto_trace(reader, sink);
      return info_text(info) + "\n" + sink.text;
    };
  };
  outcomes.emplace_back("single-threaded, default blocks",
                        outcome_of(single(GzipReader::kDefaultBlockBytes, InflateEngine::Fastest), internal));
  const size_t tiny_block = 1 + (knob & 7);
  outcomes.emplace_back(fmt::format("single-threaded, {}-byte blocks", tiny_block),
                        outcome_of(single(tiny_block, InflateEngine::Fastest), internal));
  outcomes.emplace_back("single-threaded, zlib",
                        outcome_of(single(GzipReader::kDefaultBlockBytes, InflateEngine::Zlib), internal));
  for (const bool fast : {false, true}) {
    KinetoParallelScan scan;
    scan.chunk_bytes = 8 + (knob >> 3) * 4;
    scan.threads = 2;
    scan.fast_path = fast;
    std::string how = fmt::format("parallel, {}-byte chunks, fast path {}", scan.chunk_bytes, fast ? "on" : "off");
    outcomes.emplace_back(how, outcome_of(
                                   [&] {
                                     std::vector<std::unique_ptr<KinetoEventSink>> sinks;
                                     const KinetoTraceInfo info = scan_kineto_trace_parallel(
                                         path, [] { return std::make_unique<RecordingSink>(); }, sinks, scan);
                                     std::string text = info_text(info) + "\n";
                                     for (const auto& sink : sinks) text += static_cast<RecordingSink&>(*sink).text;
                                     return text;
                                   },
                                   internal));
  }
  // Corrupt gzip is an error from every reader, but not always the same one: the inflater reports
  // where its good output ended, which depends on the engine (zlib, ISA-L) and its output blocks,
  // and the JSON scanner may meet an error in that output first. Any input error will do there.
  const auto same = [](const std::string& a, const std::string& b) {
    const auto input_error = [](const std::string& s) { return s.rfind("InputError: ", 0) == 0; };
    const auto gzip = [](const std::string& s) { return s.find("gzip data") != std::string::npos; };
    return a == b || (input_error(a) && input_error(b) && (gzip(a) || gzip(b)));
  };
  std::string report;
  for (size_t k = 1; k < outcomes.size(); ++k)
    if (!same(outcomes[k].second, outcomes[0].second))
      report += fmt::format("{} differs from {}:\n--- {}\n+++ {}\n", outcomes[k].first, outcomes[0].first,
                            shorten(outcomes[0].second), shorten(outcomes[k].second));
  if (internal) {
    // All alike but one threw something other than InputError: show what each reader said.
    if (report.empty())
      for (const auto& [how, result] : outcomes) report += how + ": " + shorten(result) + "\n";
    report = "an internal error (not InputError)\n" + report;
  }
  return report;
}

namespace {

std::string bundled(const std::string& relative) { return data_dir() + "/" + relative; }

// What the simulator would do with `plan`, measured in layer passes of one rank: (decoder + vision
// layers) x iterations x micro-steps x the most shards of any rank or iteration.
bool small_enough(const Plan& plan) {
  if (plan.world_size > 64) return false;
  int shards = 1;
  std::vector<int> ranks{0};
  for (const auto& [rank, unused] : plan.rank_overrides) ranks.push_back(rank);
  for (const int rank : ranks)
    for (int iteration = 0; iteration < plan.iterations; ++iteration)
      shards = std::max(shards, plan.tiled_shards_for(rank, iteration));
  const double passes = (4.0 + plan.model.num_hidden_layers +
                         (plan.model.vision ? plan.model.vision->depth : 0)) * plan.iterations *
                        plan.gradient_accumulation_steps * shards;
  return passes <= 3000;
}

std::string internal_error(const std::exception& e) {
  return std::string("internal error (the CLI's exit 3): ") + e.what() + "\n";
}

// tools/cli/simulate_command.cc: `hookstream simulate PLAN --timeline T` in both formats, and the
// verify JSON (tools/cli/verify_command.cc) of the same report.
std::string run_simulate(const std::string& plan_path, const LoadOptions& load) {
  try {
    const PlanSource source = read_plan_source(plan_path, load);
    if (!small_enough(parse_plan(source.yaml_text, source.source, source.options))) return "";
    const SimulateOptions options;
    const SimulationReport report = simulate_plan(source, plan_path, options);
    TimelineOptions timeline;
    timeline.memory = memory_samples(report.memory.estimate);
    (void)chrome_trace_json(report.time.schedule.model, timeline);
    (void)json_text(render_simulation_json(report, options), 2);
    (void)json_text(render_verify_json(report), 2);
    (void)render_simulation_text(report, options, true);
  } catch (const InputError&) {
    return "";  // the CLI's exit 2
  } catch (const std::exception& e) {
    return internal_error(e);
  }
  return "";
}

// The CLI's replay (tools/cli/replay_command.cc) on the file at `path`, every output rendered; the
// knob's bit 0 gives it as two ranks, bit 1 asks for every what-if change, bit 2 compares the step
// with plans/tiny-run.yaml and checks that the calibration it writes loads and simulates.
std::string run_replay(const std::string& path, uint8_t knob) {
  std::vector<std::string> paths{path};
  if (knob & 1) paths.push_back(path);
  StepAnalysisOptions options;
  if (knob & 2)
    for (const char* spec : {"second_reload_buffer", "copy_to_side_stream", "bucket_cap_mb=1", "remove_host_sync"})
      options.what_if.push_back(parse_what_if(spec));
  options.critical_segments_shown = 0;
  const std::string plan_path = bundled("plans/tiny-run.yaml");
  std::optional<Plan> plan;
  std::string calibration;
  try {
    if (knob & 4) {
      plan = load_plan(plan_path);
      options.plan = &*plan;
    }
    const TraceAnalysis analysis = analyse_trace(load_traces(paths), options);
    if (analysis.step.plan) calibration = json_text(analysis.step.plan->calibration, 2) + "\n";
    (void)recorded_step_timeline(analysis.step.step, analysis.step.races);
    nlohmann::json j = render_replay_json(analysis.report);
    j["step"] = render_step_json(analysis.step, options);
    (void)json_text(j, 2);
    (void)(render_replay_text(analysis.report) + render_step_text(analysis.step, options));
  } catch (const InputError&) {
    return "";  // the CLI's exit 2
  } catch (const std::exception& e) {
    return internal_error(e);
  }
  if (calibration.empty()) return "";
  // `replay --calibrate FILE` wrote `calibration`: the simulator must accept it as the plan's.
  const std::string calibration_path = path + ".calibration.json";
  write_file(calibration_path, reinterpret_cast<const uint8_t*>(calibration.data()), calibration.size());
  try {
    (void)parse_calibration(calibration, calibration_path);
  } catch (const InputError& e) {
    return std::string("the calibration replay --calibrate wrote does not load: ") + e.what() + "\n" + shorten(calibration);
  }
  LoadOptions load;
  load.set = {"hookstream.calibration=" + calibration_path};
  return run_simulate(plan_path, load);
}

}  // namespace

std::string replay(const uint8_t* data, size_t size, const std::string& dir) {
  if (size == 0) return "";
  const uint8_t knob = data[0];
  const std::string path = dir + "/replay.trace";
  write_file(path, data + 1, size - 1);
  return run_replay(path, knob);
}

std::string nsys_sql(const uint8_t* data, size_t size, const std::string& dir) {
  if (size == 0) return "";
  const uint8_t knob = data[0];
  const std::string path = dir + "/nsys_sql.sqlite";
  std::remove(path.c_str());
  const std::string sql(reinterpret_cast<const char*>(data + 1), size - 1);
  {
    sqlite3* db = nullptr;
    if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
      sqlite3_close(db);
      return "";
    }
    // The input is SQL the fuzzer wrote: keep it inside this one file and bounded in time.
    sqlite3_limit(db, SQLITE_LIMIT_ATTACHED, 0);
    sqlite3_limit(db, SQLITE_LIMIT_LENGTH, 1 << 20);
    int budget = 20000;
    sqlite3_progress_handler(db, 100, [](void* left) { return --*static_cast<int*>(left) < 0 ? 1 : 0; }, &budget);
    sqlite3_exec(db, "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF", nullptr, nullptr, nullptr);
    const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
    sqlite3_close(db);
    if (rc != SQLITE_OK) return "";
  }
  return run_replay(path, knob);
}

std::string plan(const uint8_t* data, size_t size, const std::string& dir) {
  const std::string path = dir + "/plan.yaml";
  write_file(path, data, size);
  return run_simulate(path, {});
}

std::string model_config(const uint8_t* data, size_t size, const std::string& dir) {
  const std::string path = dir + "/config.json";
  write_file(path, data, size);
  LoadOptions load;
  load.model_path = path;
  return run_simulate(bundled("plans/tiny-run.yaml"), load);
}

std::string calibration(const uint8_t* data, size_t size, const std::string& dir) {
  const std::string path = dir + "/calibration.json";
  write_file(path, data, size);
  LoadOptions load;
  load.set = {"hookstream.calibration=" + path};
  return run_simulate(bundled("plans/tiny-run.yaml"), load);
}

}  // namespace hookstream::fuzz
