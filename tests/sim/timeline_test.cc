// The Chrome trace writer: parse the JSON back and check tracks, slices, flows and counters.
#include "sim/events/timeline.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "sim/cost/time_model.h"

using namespace hookstream;

namespace {

EventModel two_stream_step() {
  EventModel m;
  m.source = "hand-built";
  Stream compute;
  compute.name = "compute";
  const int s_compute = m.add_stream(compute);
  Stream copy;
  copy.name = "copy";
  copy.id = 1;
  const int s_copy = m.add_stream(copy);
  const int event = m.add_event(Event{"E[0]", 0});
  const int buffer = m.add_buffer(Buffer{"reload_buffer[0]", MemoryKind::Device, 0, 0, 4096});
  auto add = [&](OpKind kind, int stream, const std::string& name, double duration) {
    Op op;
    op.kind = kind;
    op.stream = stream;
    op.name = name;
    op.phase = "backward";
    op.duration_ns = duration;
    op.event = (kind == OpKind::EventRecord || kind == OpKind::StreamWait) ? event : -1;
    if (kind == OpKind::Alloc) op.accesses.push_back(BufferAccess{buffer, 0, -1, true});
    m.ops.push_back(op);
  };
  add(OpKind::Alloc, -1, "alloc reload_buffer[0]", -1);
  add(OpKind::Kernel, s_compute, "layer 1 backward", 3000);
  add(OpKind::EventRecord, s_compute, "record E[0]", -1);
  add(OpKind::StreamWait, s_copy, "wait E[0]", -1);
  add(OpKind::Copy, s_copy, "H2D layer 0", 1500);
  return m;
}

}  // namespace

TEST_CASE("a scheduled step becomes Chrome trace JSON with tracks, slices, a flow and a counter", "[time]") {
  DeviceSpec device;
  device.matrix_tflops = 1;
  device.hbm_gbps = 1;
  const Schedule schedule = schedule_step(two_stream_step(), device);
  TimelineOptions options;
  options.memory = memory_over_ops(schedule.model);
  options.memory_baseline_bytes = 1000;
  const std::string text = chrome_trace_json(schedule.model, options);
  CHECK(text == chrome_trace_json(schedule.model, options));  // deterministic

  const nlohmann::json trace = nlohmann::json::parse(text);
  std::map<std::pair<int, int>, std::string> threads;
  std::vector<nlohmann::json> slices, starts, finishes, counters;
  for (const auto& e : trace["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "M" && e["name"] == "thread_name") threads[{e["pid"], e["tid"]}] = e["args"]["name"];
    if (ph == "X") slices.push_back(e);
    if (ph == "s") starts.push_back(e);
    if (ph == "f") finishes.push_back(e);
    if (ph == "C") counters.push_back(e);
  }
  CHECK(threads.size() == 3);
  CHECK(threads[{0, 0}] == "host");
  CHECK(threads[{0, 1}].rfind("compute", 0) == 0);
  CHECK(threads[{0, 2}].rfind("copy", 0) == 0);
  REQUIRE(slices.size() == 5);
  CHECK(slices[1]["name"] == "layer 1 backward");
  CHECK(slices[1]["tid"] == 1);
  CHECK(slices[1]["dur"] == 3.0);  // microseconds
  CHECK(slices[4]["name"] == "H2D layer 0");
  CHECK(slices[4]["tid"] == 2);
  CHECK(slices[4]["ts"] == 3.0);  // after the record it waited on
  REQUIRE(starts.size() == 1);
  REQUIRE(finishes.size() == 1);
  CHECK(starts[0]["id"] == finishes[0]["id"]);
  CHECK(starts[0]["tid"] == 1);
  CHECK(finishes[0]["tid"] == 2);
  CHECK(starts[0]["ts"] == 3.0);
  CHECK(finishes[0]["name"] == "E[0]");
  REQUIRE(counters.size() == 1);
  CHECK(counters[0]["args"]["bytes"] == 4096 + 1000);
}

TEST_CASE("ops that were never scheduled are left out of the trace", "[time]") {
  EventModel m = two_stream_step();
  const nlohmann::json trace = nlohmann::json::parse(chrome_trace_json(m));
  for (const auto& e : trace["traceEvents"]) CHECK(e["ph"] == "M");
}

TEST_CASE("wait_stream draws an arrow from the other stream's last op", "[time]") {
  EventModel m;
  Stream compute;
  compute.name = "compute";
  m.add_stream(compute);
  Stream copy;
  copy.name = "copy";
  copy.id = 1;
  m.add_stream(copy);
  Op kernel;
  kernel.name = "layer 0 forward";
  kernel.stream = 0;
  kernel.duration_ns = 2000;
  m.ops.push_back(kernel);
  Op wait;
  wait.kind = OpKind::StreamWait;
  wait.name = "copy waits compute";
  wait.stream = 1;
  wait.sync_stream = 0;
  m.ops.push_back(wait);
  DeviceSpec device;
  const Schedule schedule = schedule_step(m, device);
  const nlohmann::json trace = nlohmann::json::parse(chrome_trace_json(schedule.model));
  int flows = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "s") CHECK(e["tid"] == 1);
    if (e["ph"] == "f") {
      CHECK(e["tid"] == 2);
      CHECK(e["ts"] == 2.0);
      ++flows;
    }
  }
  CHECK(flows == 1);
}
