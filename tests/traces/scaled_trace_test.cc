// The scaled traces of bench/replay_bench (bench/scaled_traces.h) and the analyses' linearity: a
// trace repeated N times imports as N shifted copies of the original, and its last step is analysed
// exactly as the original's; the critical path over plain arrays equals the Boost graph's.
#include <catch2/catch.hpp>

#include "bench/scaled_traces.h"
#include "sim/streams/dependency_graph.h"
#include "tests/traces/trace_test_files.h"
#include "traces/step_analysis.h"
#include "traces/trace_loader.h"

using namespace hookstream;

namespace {

// Every op of copy k is op i of the original, later by k spans, on the same stream (the trace has at
// most one step range, so renumbered steps go up by one per copy).
void check_copies(const EventModel& original, const EventModel& scaled, int copies) {
  const size_t n = original.ops.size();
  REQUIRE(n > 0);
  REQUIRE(scaled.ops.size() == copies * n);
  CHECK(scaled.streams.size() == original.streams.size());
  const double span = scaled.ops[n].start_ns - original.ops[0].start_ns;
  CHECK(span > 0);
  for (int k = 0; k < copies; ++k) {
    for (size_t i = 0; i < n; ++i) {
      const Op& a = original.ops[i];
      const Op& b = scaled.ops[k * n + i];
      INFO("copy " << k << " op " << i << " " << a.name);
      // Step ranges are renumbered per copy (ProfilerStep#100 -> #101 ...); every other name is kept.
      if (a.name.rfind("ProfilerStep#", 0) == 0) REQUIRE(b.name == "ProfilerStep#" + std::to_string(std::stoi(a.name.substr(13)) + k));
      else REQUIRE(b.name == a.name);
      REQUIRE(b.kind == a.kind);
      REQUIRE(b.stream == a.stream);
      REQUIRE(b.duration_ns == a.duration_ns);
      REQUIRE(b.start_ns == (a.start_ns < 0 ? a.start_ns : a.start_ns + k * span));
      REQUIRE((b.event < 0) == (a.event < 0));
    }
  }
}

}  // namespace

TEST_CASE("scaled nsys trace imports as shifted copies of the original", "[traces][scaled]") {
  const std::string source = test::shared_trace("nsys/cloverleaf-nsys2024.5.sqlite");
  // 8 copies have ~23 k GPU-table rows, past the importer's threshold for reading them on a second
  // connection (nsys_importer.cc); the original's ~2.9 k are read on one. Both paths must give
  // the same ops.
  constexpr int kCopies = 8;
  const auto dir = test::temp_dir("scaled-nsys");
  const std::string path = (dir / "x8.sqlite").string();
  bench::write_scaled_nsys(source, path, kCopies);
  const EventModel original = load_trace(source);
  const EventModel scaled = load_trace(path);
  check_copies(original, scaled, kCopies);
  // No step ranges: the step is the whole trace, kCopies times the original's GPU work per class.
  const StepAnalysis one = analyse_step(original), many = analyse_step(scaled);
  REQUIRE(many.step.model.ops.size() == kCopies * one.step.model.ops.size());
  std::map<OpClass, std::pair<int, double>> a, b;
  for (size_t i = 0; i < one.step.model.ops.size(); ++i) {
    a[one.step.groups[i].op_class].first += 1;
    a[one.step.groups[i].op_class].second += std::max(0.0, one.step.model.ops[i].duration_ns);
  }
  for (size_t i = 0; i < many.step.model.ops.size(); ++i) {
    b[many.step.groups[i].op_class].first += 1;
    b[many.step.groups[i].op_class].second += std::max(0.0, many.step.model.ops[i].duration_ns);
  }
  REQUIRE(a.size() == b.size());
  for (const auto& [op_class, figures] : a) {
    INFO(to_string(op_class));
    CHECK(b[op_class].first == kCopies * figures.first);
    CHECK(b[op_class].second == kCopies * figures.second);  // integer nanoseconds: exact
  }
  // Each copy replays as the original does, so the step takes at least kCopies of the original's.
  CHECK(many.schedule.step_ns >= kCopies * one.schedule.step_ns);
}

TEST_CASE("scaled Kineto trace: its last step is analysed exactly as the original's", "[traces][scaled]") {
  const std::string source = test::shared_trace("kineto/event-sync.json.gz");  // one ProfilerStep#100
  const auto dir = test::temp_dir("scaled-kineto");
  for (const std::string name : {"x4.json", "x4.json.gz"}) {
    const std::string path = (dir / name).string();
    bench::write_scaled_kineto(source, path, 4);
    const EventModel original = load_trace(source);
    const EventModel scaled = load_trace(path);
    check_copies(original, scaled, 4);
    const StepAnalysis one = analyse_step(original), last = analyse_step(scaled);
    CHECK(one.step.step_label == "ProfilerStep#100");
    CHECK(last.step.step_label == "ProfilerStep#103");
    REQUIRE(last.step.model.ops.size() == one.step.model.ops.size());
    CHECK(last.step.measured_ns() == one.step.measured_ns());
    CHECK(last.schedule.step_ns == Approx(one.schedule.step_ns).epsilon(1e-12));
    CHECK(last.critical.length_ns == Approx(one.critical.length_ns).epsilon(1e-12));
    CHECK(last.critical.segments_total == one.critical.segments_total);
    REQUIRE(last.critical.segments.size() == one.critical.segments.size());
    for (size_t k = 0; k < one.critical.segments.size(); ++k) {
      CHECK(last.critical.segments[k].what == one.critical.segments[k].what);
      CHECK(last.critical.segments[k].first_op == one.critical.segments[k].first_op);
      CHECK(last.critical.segments[k].ops == one.critical.segments[k].ops);
    }
  }
}

TEST_CASE("critical path over plain arrays equals the Boost graph's", "[traces][scaled]") {
  for (const std::string file : {"nsys/cloverleaf-nsys2024.5.sqlite", "kineto/a100-rank3-of-8-control.json.gz",
                                 "kineto/alexnet-a100-syncevents.json.gz", "kineto/event-sync-multistream.json.gz"}) {
    INFO(file);
    const StepAnalysis analysis = analyse_step(load_trace(test::shared_trace(file)));
    const EventModel& model = analysis.schedule.model;
    std::vector<double> durations(model.ops.size());
    for (size_t i = 0; i < model.ops.size(); ++i) durations[i] = std::max(0.0, model.ops[i].duration_ns);
    const CriticalPath boost_path = critical_path(build_dependency_graph(model), durations);
    const CriticalPath array_path = critical_path(model, durations);
    REQUIRE(!boost_path.ops.empty());
    CHECK(array_path.ops == boost_path.ops);
    CHECK(array_path.length == boost_path.length);
  }
}
