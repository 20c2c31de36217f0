// One recorded step: attribution by runtime annotations (fixture traces generated from the
// simulator's expansion of a plan, expectations from the fixture's own ground truth) and by
// heuristics (the real traces), the replay by the simulator's scheduler, its critical path, races,
// what-if changes, the plan comparison and its calibration round trip, the timeline.
#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <optional>
#include <set>

#include "sim/cost/calibration.h"
#include "sim/cost/profiled_costs.h"
#include "sim/cost/device_spec.h"
#include "sim/inputs/input_error.h"
#include "sim/inputs/model_structure.h"
#include "sim/streams/race_checker.h"
#include "sim/cost/step_prediction.h"
#include "sim/streams/stream_expansion.h"
#include "sim/streams/stream_protocol.h"
#include "tests/traces/runtime_trace_fixture.h"
#include "tests/traces/trace_test_files.h"
#include "traces/analyses/memory_bandwidth.h"
#include "traces/analyses/stream_idle_breakdown.h"
#include "traces/plan_comparison.h"
#include "traces/replay_report.h"
#include "traces/recorded_step.h"
#include "traces/runtime_annotations.h"
#include "traces/step_analysis.h"
#include "traces/trace_loader.h"

using namespace hookstream;

namespace {

Plan fixture_plan(const std::string& protocol) {
  return parse_plan("base_model: Llama-3.1-8B\nsequence_len: 4096\nmicro_batch_size: 1\nadapter: lora\nlora_r: 16\n"
                    "lora_target_linear: true\ngradient_checkpointing: true\nactivation_offloading: true\n"
                    "ddp_find_unused_parameters: false\nhookstream:\n  world_size: 2\n  offload_protocol: " + protocol + "\n",
                    "fixture-" + protocol + ".yaml");
}

struct Fixture {
  Plan plan;
  test::RuntimeTrace trace;
  EventModel model;
};

Fixture make_fixture(const std::string& protocol, bool legacy_cpu = false) {
  Fixture f{fixture_plan(protocol), {}, {}};
  const StepPrediction prediction = predict_step(f.plan, build_model_structure(f.plan), find_device_spec(f.plan.gpu));
  test::RuntimeTraceOptions options;
  options.legacy_cpu = legacy_cpu;
  f.trace = test::make_runtime_trace(prediction.schedule.model, options);
  const auto dir = test::temp_dir("step-" + protocol + (legacy_cpu ? "-cpu" : "-gpu"));
  const std::string path = (dir / "trace.json").string();
  std::ofstream(path) << f.trace.json;
  f.model = load_trace(path);
  return f;
}

// Measured GPU time and ops per op-group label of a recorded step.
std::map<std::string, std::pair<int, double>> measured_groups(const RecordedStep& step) {
  std::map<std::string, std::pair<int, double>> groups;
  for (size_t i = 0; i < step.model.ops.size(); ++i) {
    if (step.groups[i].op_class == OpClass::None) continue;
    auto& g = groups[step.groups[i].label()];
    g.first++;
    g.second += step.model.ops[i].duration_ns;
  }
  return groups;
}

void check_groups_match_truth(const RecordedStep& step, const test::RuntimeTraceTruth& truth) {
  const auto measured = measured_groups(step);
  REQUIRE(measured.size() == truth.groups.size());
  for (const auto& [label, expected] : truth.groups) {
    INFO(label);
    REQUIRE(measured.count(label) == 1);
    CHECK(measured.at(label).first == expected.first);
    CHECK(measured.at(label).second == Approx(expected.second).epsilon(1e-9));
  }
  CHECK(step.start_ns == Approx(truth.start_ns).epsilon(1e-12));
  CHECK(step.end_ns == Approx(truth.end_ns).epsilon(1e-12));
}

std::set<std::string> raced_buffers(const EventModel& model, const RaceReport& report) {
  std::set<std::string> names;
  for (const Race& race : report.races) names.insert(model.buffers[race.buffer].name);
  return names;
}

}  // namespace

TEST_CASE("runtime annotations parse and format back", "[traces][replay-step]") {
  const std::string name = "hookstream:backward:L3:copy:copy:r=cpu[3]:w=reload[1]";
  const auto a = parse_runtime_annotation(name, "t.json");
  REQUIRE(a);
  CHECK(a->type == RuntimeAnnotation::Type::ProtocolStep);
  CHECK(a->layer == 3);
  CHECK(a->kind == "copy");
  CHECK(a->reads == std::vector<std::string>{"cpu[3]"});
  CHECK(a->writes == std::vector<std::string>{"reload[1]"});
  CHECK(format_runtime_annotation(*a) == name);
  CHECK(parse_runtime_annotation("hookstream:step:12", "t")->step == 12);
  CHECK(parse_runtime_annotation("hookstream:optimizer", "t")->type == RuntimeAnnotation::Type::Optimizer);
  CHECK(parse_runtime_annotation("hookstream:forward:L0:layer", "t")->type == RuntimeAnnotation::Type::Layer);
  CHECK_FALSE(parse_runtime_annotation("aten::mm", "t"));
  CHECK_THROWS_WITH(parse_runtime_annotation("hookstream:backward:L3:teleport:copy", "t.json"),
                    Catch::Contains("t.json: annotation \"hookstream:backward:L3:teleport:copy\": expected a protocol step kind"));
  CHECK_THROWS_WITH(parse_runtime_annotation("hookstream:forward:Lx:layer", "t"), Catch::Contains("L{layer}"));
  CHECK_THROWS_WITH(parse_runtime_annotation("hookstream:backward:L1:wait_event:copy", "t"), Catch::Contains("e={event}"));
}

TEST_CASE("annotated Kineto trace: every GPU op lands in its plan op group", "[traces][replay-step]") {
  const Fixture f = make_fixture("double_buffer_events");
  const RecordedStep last = extract_step(f.model);
  CHECK(last.annotated);
  CHECK(last.step_label == "hookstream:step:1");
  check_groups_match_truth(last, f.trace.steps[1]);
  StepSelection first;
  first.step = 0;
  check_groups_match_truth(extract_step(f.model, first), f.trace.steps[0]);
  first.step = 5;
  CHECK_THROWS_WITH(extract_step(f.model, first), Catch::Contains("--step 5: rank 0 recorded steps 0..1"));
  // The logical streams of the annotations name the CUDA streams their work ran on.
  std::set<std::string> names;
  for (const Stream& s : last.model.streams) names.insert(s.name);
  CHECK(names.count("stream 7 (compute)") == 1);
  CHECK(names.count("stream 20 (copy)") == 1);
}

TEST_CASE("annotated step replays close to its measured time, the critical path is a chain of it", "[traces][replay-step]") {
  const Fixture f = make_fixture("single_buffer");
  const StepAnalysis a = analyse_step(f.model);
  // The fixture's GPU timing follows stream order and the recorded waits: the replay reproduces it
  // up to the launch latency the trace does not show.
  CHECK(a.schedule.step_ns == Approx(a.step.measured_ns()).epsilon(0.02));
  REQUIRE(a.critical.unavailable.empty());
  CHECK(a.critical.length_ns <= a.schedule.step_ns * (1 + 1e-9));
  double compute_busy = 0;
  for (const StreamUsage& usage : a.schedule.streams) compute_busy = std::max(compute_busy, usage.busy_ns);
  CHECK(a.critical.length_ns >= compute_busy * (1 - 1e-9));
  CHECK_FALSE(a.critical.segments.empty());
}

TEST_CASE("races from annotations: the shipped double buffer without events races, the fixed one does not", "[traces][replay-step]") {
  for (const bool cpu : {false, true}) {
    INFO((cpu ? "legacy CPU trace" : "Kineto GPU trace"));
    const Fixture bad = make_fixture("double_buffer_no_events", cpu);
    const RecordedStep step = extract_step(bad.model);
    const StepRaceReport races = check_step_races(step);
    REQUIRE(races.checked);
    // The same buffers race as in the simulator's own check of the plan's expansion.
    const Plan plan = fixture_plan("double_buffer_no_events");
    const EventModel simulated = expand_step(plan, build_model_structure(plan), load_stream_protocol("double_buffer_no_events"));
    const RaceReport expected = check_races(simulated);
    REQUIRE(expected.race_count > 0);
    RaceCheckOptions options;
    const RaceReport recorded = check_races(step.model, options);
    CHECK(raced_buffers(step.model, recorded) == raced_buffers(simulated, expected));
    CHECK(races.race_count == recorded.race_count);
    REQUIRE_FALSE(races.races.empty());
    CHECK(races.races[0].kind == "write after read");
    CHECK(races.races[0].earlier.find("hookstream:backward:") != std::string::npos);

    const Fixture good = make_fixture("double_buffer_events", cpu);
    const StepRaceReport clean = check_step_races(extract_step(good.model));
    CHECK(clean.checked);
    CHECK(clean.race_count == 0);
  }
}

TEST_CASE("legacy-profiler array: annotation ranges become the step's ops on their logical streams", "[traces][replay-step]") {
  const Fixture f = make_fixture("double_buffer_events", true);
  const RecordedStep step = extract_step(f.model);
  CHECK(step.annotated);
  check_groups_match_truth(step, f.trace.steps[1]);
  std::set<std::string> streams;
  for (const Stream& s : step.model.streams) streams.insert(s.name);
  CHECK(streams == std::set<std::string>{"compute", "copy"});
}

TEST_CASE("plan comparison: calibration makes the simulator reproduce every matched group", "[traces][replay-step]") {
  const Fixture f = make_fixture("double_buffer_events");
  const RecordedStep step = extract_step(f.model);
  const PlanComparison before = compare_with_plan(step, f.plan);
  CHECK(before.recorded_only == 0);
  CHECK(before.simulated_only == 0);
  CHECK(before.matched == static_cast<int>(f.trace.steps[1].groups.size()));
  for (const GroupComparison& g : before.groups) {
    INFO(g.group.label());
    CHECK(g.measured_ns == Approx(f.trace.steps[1].groups.at(g.group.label()).second).epsilon(1e-9));
    CHECK(g.simulated_ops > 0);
  }
  const auto dir = test::temp_dir("calibration");
  const std::string path = (dir / "calibration.json").string();
  std::ofstream(path) << before.calibration.dump(2);
  Plan calibrated = f.plan;
  calibrated.calibration = path;
  const PlanComparison after = compare_with_plan(step, calibrated);
  for (const GroupComparison& g : after.groups) {
    INFO(g.group.label());
    CHECK(g.predicted_ns == Approx(g.measured_ns).epsilon(1e-9));
  }
  CHECK(load_calibration(path).entries.size() > before.groups.size());
}

TEST_CASE("plan comparison: the calibration's part scales carry to another sequence length", "[traces][replay-step]") {
  // A trace whose kernels are named as on an H100 (cuBLAS's nvjet GEMMs, cuDNN's SDPA, ATen's
  // elementwise kernels) and take, part by part, a fixed multiple of the profile's estimate. The
  // calibration from it must predict the same plan at 4x the length by those multiples: exact
  // entries (estimate_ns) cannot hold there, the part scales must.
  const Plan plan = fixture_plan("double_buffer_events");
  const ModelStructure structure = build_model_structure(plan);
  const DeviceSpec device = find_device_spec(plan.gpu);
  REQUIRE(device.profile);
  const StepPrediction prediction = predict_step(plan, structure, device);
  const std::vector<CostParts> parts = profiled_cost_parts(prediction.schedule.model, plan, structure, device, *device.profile);
  std::map<std::string, CostParts> by_name;
  for (size_t i = 0; i < parts.size(); ++i) by_name[prediction.schedule.model.ops[i].name.str()] = parts[i];
  const double factor[3] = {1.3, 1.6, 1.2};  // gemm, attention, elementwise
  test::RuntimeTraceOptions options;
  options.kernels = [&](const Op& op) {
    std::vector<std::pair<std::string, double>> kernels;
    const auto it = by_name.find(op.name.str());
    if (it == by_name.end()) return kernels;
    const char* names[3] = {"nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16",
                            "void at::native::vectorized_elementwise_kernel<4>"};
    for (CostPart part : kCostParts) {
      const int k = static_cast<int>(part);
      if (it->second[part] > 0) kernels.emplace_back(names[k], std::round(it->second[part] * factor[k]));
    }
    if (kernels.empty()) kernels.emplace_back(names[2], 0);  // a kernel the model costs at 0 (a frozen embedding's backward)
    return kernels;
  };
  const test::RuntimeTrace trace = test::make_runtime_trace(prediction.schedule.model, options);
  const auto dir = test::temp_dir("calibration-parts");
  std::ofstream(dir / "trace.json") << trace.json;
  const PlanComparison comparison = compare_with_plan(extract_step(load_trace((dir / "trace.json").string())), plan);
  const std::string path = (dir / "calibration.json").string();
  std::ofstream(path) << comparison.calibration.dump(2);
  const Calibration calibration = load_calibration(path);
  double copy_scale[2] = {0, 0};  // DtoH, HtoD
  int part_entries = 0;
  for (const CalibrationEntry& entry : calibration.entries) {
    part_entries += entry.part.has_value();
    if (entry.part) CHECK(entry.scale == Approx(factor[static_cast<int>(*entry.part)]).epsilon(1e-4));
    if (entry.copy == std::string("DtoH")) copy_scale[0] = entry.scale;
    if (entry.copy == std::string("HtoD")) copy_scale[1] = entry.scale;
  }
  CHECK(part_entries >= 7);  // gemm, attention, elementwise of forward, recompute, backward; the head's; the optimizer's
  REQUIRE(copy_scale[0] > 0);
  REQUIRE(copy_scale[1] > 0);

  Plan longer = plan;
  longer.sequence_len = 4 * plan.sequence_len;
  const StepPrediction estimate = predict_step(longer, structure, device);
  longer.calibration = path;
  const StepPrediction calibrated = predict_step(longer, structure, device, &calibration);
  const std::vector<CostParts> longer_parts = profiled_cost_parts(estimate.schedule.model, longer, structure, device, *device.profile);
  int kernels = 0, copies = 0;
  for (size_t i = 0; i < estimate.schedule.model.ops.size(); ++i) {
    const Op& op = estimate.schedule.model.ops[i];
    const double got = calibrated.schedule.model.ops[i].duration_ns;
    INFO(op.name.str());
    if (op.kind == OpKind::Kernel && longer_parts[i].total() > 0) {
      double expected = 0;
      for (CostPart part : kCostParts) expected += longer_parts[i][part] * factor[static_cast<int>(part)];
      CHECK(got == Approx(expected).epsilon(1e-3));
      CHECK(std::abs(op.duration_ns - expected) > 0.05 * expected);  // the estimate alone is off
      ++kernels;
    } else if (op.kind == OpKind::Copy && (op.copy == CopyKind::DeviceToHost || op.copy == CopyKind::HostToDevice)) {
      CHECK(got == Approx(op.duration_ns * copy_scale[op.copy == CopyKind::DeviceToHost ? 0 : 1]).epsilon(1e-9));
      ++copies;
    }
  }
  CHECK(kernels > 100);
  CHECK(copies > 10);
}

TEST_CASE("what-if changes on an annotated step", "[traces][replay-step]") {
  const Fixture f = make_fixture("single_buffer");
  const RecordedStep step = extract_step(f.model);
  const StepReplay replay = build_step_replay(step);
  const PlanComparison plan = compare_with_plan(step, f.plan);
  const WhatIfReport report =
      run_what_if(step, replay,
                  {parse_what_if("second_reload_buffer"), parse_what_if("remove_host_sync"), parse_what_if("bucket_cap_mb=1000")},
                  plan.bucket_bytes);
  REQUIRE(report.outcomes.size() == 4);
  int reloads = 0;
  for (size_t i = 0; i < step.model.ops.size(); ++i) reloads += step.groups[i].op_class == OpClass::CopyH2D;
  CHECK(report.outcomes[0].ops_changed == reloads);
  CHECK(report.outcomes[0].new_step_ns < report.outcomes[0].old_step_ns);  // reloads no longer serialise behind recompute
  CHECK(report.outcomes[1].ops_changed == 1);                               // the step's closing cudaStreamSynchronize
  CHECK(report.outcomes[2].ops_changed == static_cast<int>(plan.bucket_bytes.size()));
  CHECK(report.outcomes[2].why.find("the plan's buckets") != std::string::npos);
  CHECK_THROWS_WITH(parse_what_if("bucket_cap_mb=-3"), Catch::Contains("positive number of MiB"));
  CHECK_THROWS_WITH(parse_what_if("more_gpus"), Catch::Contains("unknown change"));
}

TEST_CASE("real traces: heuristic attribution, a replay whose critical path never exceeds it", "[traces][replay-step]") {
  for (const char* name : {"nsys/cloverleaf-nsys2024.5.sqlite", "nsys/fuser-report1-nsys2024.6.sqlite",
                           "kineto/a100-rank3-of-8-control.json.gz", "kineto/alexnet-a100-syncevents.json.gz",
                           "kineto/event-sync-multistream.json.gz", "kineto/event-sync.json.gz"}) {
    INFO(name);
    const EventModel model = load_trace(test::shared_trace(name));
    const StepAnalysis a = analyse_step(model);
    CHECK_FALSE(a.step.annotated);
    CHECK_FALSE(a.races.checked);
    REQUIRE(a.critical.unavailable.empty());
    CHECK(a.critical.length_ns <= a.schedule.step_ns * (1 + 1e-9) + 1);
    CHECK(a.critical.length_ns > 0);
  }
  // a100: the last ProfilerStep, its NCCL kernels are the all-reduces.
  const EventModel a100 = load_trace(test::shared_trace("kineto/a100-rank3-of-8-control.json.gz"));
  const RecordedStep step = extract_step(a100);
  CHECK(step.step_label == "ProfilerStep#1014");
  int nccl = 0, allreduces = 0;
  for (size_t i = 0; i < step.model.ops.size(); ++i) {
    nccl += step.model.ops[i].kind == OpKind::Collective;
    allreduces += step.groups[i].op_class == OpClass::AllReduce;
  }
  CHECK(nccl > 0);
  CHECK(allreduces == nccl);
  // Its own "## forward ##", "## backward ##" and "Optimizer.step#..." ranges give the phases.
  std::set<OpClass> classes;
  for (const OpGroup& g : step.groups) classes.insert(g.op_class);
  for (OpClass c : {OpClass::Forward, OpClass::Backward, OpClass::Optimizer}) CHECK(classes.count(c) == 1);
  for (const OpGroup& g : step.groups) CHECK(g.layer == -1);
  // cloverleaf synchronises the device after every kernel; without those waits the host runs ahead.
  const EventModel clover = load_trace(test::shared_trace("nsys/cloverleaf-nsys2024.5.sqlite"));
  const RecordedStep whole = extract_step(clover);
  const WhatIfReport what_if = run_what_if(whole, build_step_replay(whole), {parse_what_if("remove_host_sync=cudaDeviceSynchronize")});
  int device_syncs = 0;
  for (const Op& op : whole.model.ops) device_syncs += op.kind == OpKind::DeviceSync;
  CHECK(what_if.outcomes[0].ops_changed == device_syncs);
  CHECK(what_if.outcomes[0].new_step_ns < what_if.outcomes[0].old_step_ns);
}

TEST_CASE("real traces: a trace handed over is analysed as one kept, the report outlives its model", "[traces][replay-step]") {
  for (const char* name : {"nsys/cloverleaf-nsys2024.5.sqlite", "kineto/a100-rank3-of-8-control.json.gz",
                           "kineto/event-sync-multistream.json.gz"}) {
    INFO(name);
    const EventModel kept = load_trace(test::shared_trace(name));
    const TraceAnalysis reference = analyse_trace(kept);
    const std::string text = render_replay_text(reference.report) + render_step_text(reference.step);
    const nlohmann::json json = render_replay_json(reference.report);
    // Handed over: the trace is emptied during the analysis (the CLI's way); the same report.
    EventModel handed = kept;
    const TraceAnalysis moved = analyse_trace(std::move(handed));
    CHECK(handed.ops.empty());
    CHECK(render_replay_text(moved.report) + render_step_text(moved.step) == text);
    CHECK(render_replay_json(moved.report) == json);
    CHECK(render_step_json(moved.step) == render_step_json(reference.step));
    // The report renders from what it copied: the model it came from may be gone.
    std::optional<ReplayReport> report;
    {
      const EventModel scoped = kept;
      report = analyse_replay(scoped);
    }
    CHECK(render_replay_json(*report) == json);
    CHECK_FALSE(report->cited_ops.empty());  // every real trace here has an idle gap to name
    // The critical path found beside the schedule is the one found after it.
    StepReplay replay = build_step_replay(reference.step.step);
    const Schedule schedule = schedule_replay(replay);
    const CriticalPathReport after = replay_critical_path(schedule, replay);
    CHECK(after.length_ns == reference.step.critical.length_ns);
    // The analysis builds the first 20 segments (what the report lists) and counts the rest; they
    // are the whole path's first 20, and the totals are the whole path's.
    const CriticalPathReport& listed = reference.step.critical;
    CHECK(after.segments.size() == after.segments_total);
    CHECK(listed.segments_total == after.segments_total);
    CHECK(listed.segments.size() == std::min<size_t>(20, after.segments_total));
    CHECK(listed.by_what == after.by_what);
    for (size_t k = 0; k < listed.segments.size(); ++k) {
      const CriticalSegment &a = after.segments[k], &b = listed.segments[k];
      CHECK(a.first_op == b.first_op);
      CHECK(a.last_op == b.last_op);
      CHECK(a.ops == b.ops);
      CHECK(a.start_ns == b.start_ns);
      CHECK(a.duration_ns == b.duration_ns);
      CHECK(a.what == b.what);
      CHECK(a.where == b.where);
    }
  }
}

TEST_CASE("timeline of a recorded step marks races, syncs and gaps", "[traces][replay-step]") {
  const Fixture f = make_fixture("double_buffer_no_events");
  const RecordedStep step = extract_step(f.model);
  const StepRaceReport races = check_step_races(step);
  const nlohmann::json trace = nlohmann::json::parse(recorded_step_timeline(step, races));
  const nlohmann::json& events = trace.is_object() ? trace["traceEvents"] : trace;
  int slices = 0, race_flows = 0, syncs = 0, idle = 0;
  double idle_ns = 0;
  for (const auto& e : events) {
    if (e["ph"] == "X" && e["cat"] == "hta: idle") {
      ++idle;
      idle_ns += e["dur"].get<double>() * 1000;
      continue;
    }
    if (e["ph"] == "X") ++slices;
    if (e["ph"] == "s" && e["cat"] == "finding: race") ++race_flows;
    if (e["ph"] == "i" && e["cat"] == "finding: sync") ++syncs;
  }
  int host_syncs = 0;
  for (const Op& op : step.model.ops) host_syncs += op.kind == OpKind::StreamSync || op.kind == OpKind::EventSync || op.kind == OpKind::DeviceSync;
  CHECK(slices == static_cast<int>(step.model.ops.size()));
  // HTA's idle-time breakdown: every gap of every stream, as the report sums them.
  double expected_idle = 0;
  int64_t expected_gaps = 0;
  for (const StreamIdleBreakdown& s : analyse_stream_idle_breakdown(step.model)) {
    expected_idle += s.idle_ns();
    expected_gaps += s.gaps;
  }
  CHECK(expected_gaps > 0);
  CHECK(idle == expected_gaps);
  CHECK(idle_ns == Approx(expected_idle));
  // HTA's memory-bandwidth series as counter tracks: one point per change, back to 0 at the end.
  size_t counter_points = 0, series_points = 0;
  double last_value = -1;
  for (const auto& e : events) {
    if (e["ph"] != "C") continue;
    ++counter_points;
    last_value = e["args"]["GB/s"].get<double>();
  }
  for (const MemoryBandwidthSeries& series : memory_bandwidth_series(step.model)) series_points += series.points.size();
  CHECK(series_points > 0);
  CHECK(counter_points == series_points);
  CHECK(last_value == 0);
  CHECK(race_flows == static_cast<int>(races.races.size()));
  CHECK(syncs == host_syncs);
  CHECK(recorded_step_timeline(step, races) == recorded_step_timeline(step, races));
}

TEST_CASE("malformed runtime annotation in a trace is an input error naming the file", "[traces][replay-step]") {
  const auto dir = test::temp_dir("bad-annotation");
  const std::string path = (dir / "bad.json").string();
  std::ofstream(path) << R"([{"name": "hookstream:forward:L1:compute:compute:what=sideways", "ph": "X", "ts": 1.0, "dur": 2.0, "tid": 1, "pid": "CPU Functions", "args": {}}])";
  const EventModel model = load_trace(path);
  CHECK_THROWS_WITH(extract_step(model), Catch::Contains(path) && Catch::Contains("what=sideways"));
}

// A PyTorch-profiler step with no phase ranges: the forward launched from the main thread, the
// backward from the autograd engine's device thread, the optimizer inside its Optimizer.step range.
// Expectations come from how the fixture below is written.
TEST_CASE("foreign Kineto step: backward from the autograd thread, forward before it, optimizer by its range",
          "[traces][replay-step]") {
  std::string events;
  int correlation = 100;
  double ts = 1000;
  auto launch = [&](int tid, const std::string& kernel) {
    const int c = correlation++;
    events += R"({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": )" + std::to_string(tid) +
              R"(, "ts": )" + std::to_string(ts) + R"(, "dur": 2, "args": {"correlation": )" + std::to_string(c) + "}},\n";
    events += R"({"ph": "X", "cat": "kernel", "name": ")" + kernel + R"(", "pid": 0, "tid": 7, "ts": )" +
              std::to_string(ts + 5) + R"(, "dur": 3, "args": {"device": 0, "stream": 7, "correlation": )" +
              std::to_string(c) + "}},\n";
    ts += 10;
  };
  const double step_start = ts - 1;
  for (int i = 0; i < 3; ++i) launch(11, "volta_sgemm_128x64_nn");         // forward GEMMs (main thread)
  launch(11, "vectorized_elementwise_kernel");                             // forward, unattributed name
  for (int i = 0; i < 2; ++i) launch(22, "volta_sgemm_128x64_tn");         // backward on thread 22
  const double optimizer_start = ts - 1;
  launch(11, "vectorized_elementwise_kernel");                             // the optimizer's kernel
  const double end = ts;
  events += R"({"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#AdamW.step", "pid": 1, "tid": 11, "ts": )" +
            std::to_string(optimizer_start) + R"(, "dur": )" + std::to_string(end - optimizer_start) + "},\n";
  events += R"({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#5", "pid": 1, "tid": 11, "ts": )" +
            std::to_string(step_start) + R"(, "dur": )" + std::to_string(end - step_start) + "}\n";
  const auto dir = test::temp_dir("foreign-threads");
  const std::string path = (dir / "trace.json").string();
  std::ofstream(path) << "{\"traceEvents\": [\n" << events << "]}\n";

  const RecordedStep step = extract_step(load_trace(path));
  CHECK(step.step_label == "ProfilerStep#5");
  std::map<OpClass, int> kernels;
  for (size_t i = 0; i < step.model.ops.size(); ++i) {
    if (step.model.ops[i].kind == OpKind::Kernel) kernels[step.groups[i].op_class]++;
  }
  CHECK(kernels[OpClass::Forward] == 4);
  CHECK(kernels[OpClass::Backward] == 2);
  CHECK(kernels[OpClass::Optimizer] == 1);
  CHECK(kernels[OpClass::Other] == 0);
}

// The PyTorch profiler leaves its last step range open until it stops (ProfilerStep#N+1 opened by
// profile.step()): a trailing step that launched nothing. The default step is the last complete
// one, said in the notes; --step still picks any, and a trace whose steps are all complete keeps
// the last.
TEST_CASE("default step: the last complete one, a trailing partial step is left out", "[traces][replay-step]") {
  const auto dir = test::temp_dir("default-step");
  std::string events;
  int correlation = 100;
  double ts = 1000;
  const auto step = [&](int n, int kernels, double length) {
    events += R"({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#)" + std::to_string(n) +
              R"(", "pid": 1, "tid": 11, "ts": )" + std::to_string(ts) + R"(, "dur": )" + std::to_string(length) + "},\n";
    for (int k = 0; k < kernels; ++k) {
      const int c = correlation++;
      events += R"({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 11, "ts": )" +
                std::to_string(ts + 1 + 10 * k) + R"(, "dur": 2, "args": {"correlation": )" + std::to_string(c) + "}},\n";
      events += R"({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": )" + std::to_string(ts + 4 + 10 * k) +
                R"(, "dur": 5, "args": {"device": 0, "stream": 7, "correlation": )" + std::to_string(c) + "}},\n";
    }
    ts += std::max(length, 1.0) + 10;
  };
  const auto write = [&](const std::string& name) {
    const std::string path = (dir / name).string();
    std::ofstream(path) << "{\"traceEvents\": [\n" << events.substr(0, events.size() - 2) << "\n]}\n";
    return path;
  };
  step(3, 2, 40);
  step(4, 3, 40);
  const std::string complete = write("complete.json");
  step(5, 0, 6);  // opened by profile.step(), closed when the profiler stopped: nothing launched
  const std::string no_work = write("no-work.json");
  step(6, 0, 0);  // and one with no length at all
  const std::string no_length = write("no-length.json");

  const RecordedStep all_complete = extract_step(load_trace(complete));
  CHECK(all_complete.step_label == "ProfilerStep#4");
  for (const std::string& note : all_complete.notes) CHECK(note.find("default step") == std::string::npos);
  for (const std::string& path : {no_work, no_length}) {
    INFO(path);
    const RecordedStep chosen = extract_step(load_trace(path));
    CHECK(chosen.step_label == "ProfilerStep#4");
    CHECK(chosen.measured_ns() > 0);
    bool said = false;
    for (const std::string& note : chosen.notes) {
      if (note.find("default step: 4, the last complete one") != std::string::npos &&
          note.find("step 5: no GPU work was launched in it") != std::string::npos) {
        said = true;
      }
    }
    CHECK(said);
  }
  StepSelection last;
  last.step = 5;
  CHECK(extract_step(load_trace(no_work), last).step_label == "ProfilerStep#5");
}

// When replay and measurement differ by more than 10%, the report says what the recording shows
// that the replay does not know. Here: a 40 ms kernel launched before ProfilerStep#2 still runs when
// the step starts, so the step's kernel on the same stream waits for it (measured ~40 ms, replayed
// on an idle GPU ~0.1 ms); and a kernel on stream 20 after a cudaStreamWaitEvent the trace has no
// sync event for starts 3 ms after its launch with its stream idle.
TEST_CASE("step divergence: work queued before the step and waits the trace does not record", "[traces][replay-step]") {
  const auto dir = test::temp_dir("divergence");
  std::string events;
  int correlation = 100;
  const auto launch = [&](double ts, double gpu_start, double gpu_dur, int stream, const std::string& call) {
    const int c = correlation++;
    events += R"({"ph": "X", "cat": "cuda_runtime", "name": ")" + call + R"(", "pid": 1, "tid": 11, "ts": )" +
              std::to_string(ts) + R"(, "dur": 5, "args": {"correlation": )" + std::to_string(c) + "}},\n";
    if (gpu_dur < 0) return;
    events += R"({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": )" + std::to_string(stream) + R"(, "ts": )" +
              std::to_string(gpu_start) + R"(, "dur": )" + std::to_string(gpu_dur) + R"(, "args": {"device": 0, "stream": )" +
              std::to_string(stream) + R"(, "correlation": )" + std::to_string(c) + "}},\n";
  };
  const auto step_range = [&](int n, double ts, double dur) {
    events += R"({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#)" + std::to_string(n) +
              R"(", "pid": 1, "tid": 11, "ts": )" + std::to_string(ts) + R"(, "dur": )" + std::to_string(dur) + "},\n";
  };
  step_range(1, 0, 900);
  launch(10, 20, 40000, 7, "cudaLaunchKernel");              // 40 ms, issued in step 1
  step_range(2, 1000, 50000);
  launch(1010, 40020, 100, 7, "cudaLaunchKernel");           // queued behind it
  launch(1100, -1, -1, 20, "cudaStreamWaitEvent");           // no cuda_sync record: untied
  launch(1200, 4210, 50, 20, "cudaLaunchKernel");            // starts 3 ms after its launch
  const std::string path = (dir / "queued.json").string();
  std::ofstream(path) << "{\"traceEvents\": [\n" << events.substr(0, events.size() - 2) << "\n]}\n";

  const EventModel trace = load_trace(path);
  const StepAnalysis a = analyse_step(trace);
  REQUIRE(a.step.step_label == "ProfilerStep#2");
  // The step starts at its first call (1010 us); the 40 ms kernel ends at 40020 us.
  CHECK(a.divergence.gpu_behind_ns == Approx((40020 - 1010) * 1e3));
  CHECK(a.divergence.queued_ops == 1);
  CHECK(a.divergence.untied_waits == 1);
  CHECK(a.divergence.late_ops >= 1);
  const auto lines = divergence_lines(a.divergence, a.step.measured_ns(), a.schedule.step_ns);
  REQUIRE(lines.size() >= 3);
  CHECK(lines[0].find("replay and measurement differ by") == 0);
  CHECK(lines[1].find("work queued before the step: the GPU was 39.010 ms behind the host at the step's start (1 GPU ops") ==
        0);
  CHECK(lines[2].find("waits the trace does not record: 1 synchronising call(s) or stream wait(s) tied to no stream") == 0);
  const std::string text = render_step_text(a);
  CHECK(text.find("work queued before the step") != std::string::npos);
  CHECK(render_step_json(a)["divergence"]["differs"] == true);

  // Step 1 replays as measured (its kernel ran at once): nothing to explain.
  StepAnalysisOptions first;
  first.selection.step = 1;
  const StepAnalysis one = analyse_step(trace, first);
  CHECK(divergence_lines(one.divergence, one.step.measured_ns(), one.schedule.step_ns).empty());
  CHECK(render_step_json(one)["divergence"]["why"].empty());
}
