// Stream protocol files: the built-ins parse, errors name the line and the undefined reference.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "sim/inputs/input_error.h"
#include "sim/streams/stream_protocol.h"
#include "tests/temp_dir.h"

using namespace hookstream;

namespace {
std::string error_of(const std::string& yaml) {
  try {
    parse_stream_protocol(yaml, "p.yaml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}
const char* kValid = R"(name: t
streams:
  compute: {current: true}
  copy: {}
buffers:
  cpu: {memory: pinned, count: layers, slot: i}
  reload: {memory: device, count: 2, slot: i mod 2}
events:
  free: {per_buffer: reload}
forward:
  - wait_stream: {waiter: copy, waitee: compute}
  - copy: {stream: copy, from: hidden, to: cpu, kind: d2h}
backward:
  - wait_event: {stream: copy, event: free}
  - copy: {stream: copy, from: cpu, to: reload, kind: h2d}
  - compute: {stream: compute, reads: [reload], what: recompute}
  - record: {event: free, stream: compute}
)";
}  // namespace

TEST_CASE("every built-in protocol parses and is listed", "[streams]") {
  const std::vector<std::string> names = list_stream_protocols();
  for (const char* expected : {"none", "single_buffer", "double_buffer_events", "double_buffer_no_events",
                               "events_on_default_stream", "pageable", "save_on_cpu", "deepspeed_offload",
                               "global_counter_buffers"}) {
    INFO(expected);
    CHECK(std::find(names.begin(), names.end(), expected) != names.end());
    const StreamProtocol protocol = load_stream_protocol(expected);
    CHECK(protocol.name == expected);
    CHECK(protocol.current_stream() >= 0);
    CHECK_FALSE(protocol.forward.empty());
    CHECK_FALSE(protocol.backward.empty());
  }
}

TEST_CASE("protocol fields parse into the model", "[streams]") {
  const StreamProtocol p = parse_stream_protocol(kValid, "p.yaml");
  REQUIRE(p.streams.size() == 2);
  CHECK(p.streams[0].current);
  CHECK(p.streams[1].non_blocking);
  REQUIRE(p.buffers.size() == 2);
  CHECK(p.buffers[0].count == -1);
  CHECK(p.buffers[0].memory == MemoryKind::PinnedHost);
  CHECK(p.buffers[1].select.modulo == 2);
  CHECK(p.buffers[1].select.slot(5, 0) == 1);
  REQUIRE(p.events.size() == 1);
  CHECK(p.events[0].per_buffer == "reload");
  CHECK(p.events[0].count == 2);
  REQUIRE(p.backward.size() == 4);
  CHECK(p.backward[0].kind == StepKind::WaitEvent);
  CHECK(p.backward[1].copy == CopyKind::HostToDevice);
  CHECK(p.backward[2].what == "recompute");
  CHECK(p.backward[3].line == 17);
  const StreamProtocol g = load_stream_protocol("global_counter_buffers");
  CHECK(g.buffers[1].select.by_counter);
  CHECK(g.buffers[1].select.counter_per_process);
}

TEST_CASE("protocol errors name the line and what is wrong", "[streams]") {
  std::string text = kValid;
  SECTION("undefined stream") {
    text.replace(text.find("waitee: compute"), 15, "waitee: compue");
    const std::string e = error_of(text);
    CHECK(e.find("p.yaml:11") != std::string::npos);
    CHECK(e.find("undefined stream `compue`") != std::string::npos);
    CHECK(e.find("did you mean `compute`") != std::string::npos);
  }
  SECTION("undefined buffer") {
    text.replace(text.find("reads: [reload]"), 15, "reads: [relod]");
    const std::string e = error_of(text);
    CHECK(e.find("p.yaml:16") != std::string::npos);
    CHECK(e.find("undefined buffer `relod`") != std::string::npos);
  }
  SECTION("undefined event") {
    text.replace(text.find("event: free, stream"), 11, "event: fre");
    const std::string e = error_of(text);
    CHECK(e.find("p.yaml:17") != std::string::npos);
    CHECK(e.find("undefined event `fre`") != std::string::npos);
  }
  SECTION("unknown key with did-you-mean") {
    text.replace(text.find("slot: i mod 2"), 4, "slto");
    const std::string e = error_of(text);
    CHECK(e.find("p.yaml:7") != std::string::npos);
    CHECK(e.find("did you mean `slot`") != std::string::npos);
  }
  SECTION("unknown op") {
    text.replace(text.find("- record:"), 9, "- recrod:");
    const std::string e = error_of(text);
    CHECK(e.find("p.yaml:17") != std::string::npos);
    CHECK(e.find("did you mean `record`") != std::string::npos);
  }
  SECTION("malformed YAML") {
    text += "  - copy: {stream: [\n";
    CHECK(error_of(text).find("p.yaml:") != std::string::npos);
  }
  SECTION("copy direction must match the memory") {
    text.replace(text.find("kind: d2h"), 9, "kind: h2d");
    const std::string e = error_of(text);
    CHECK(e.find("p.yaml:12") != std::string::npos);
    CHECK(e.find("h2d copy goes from a host buffer") != std::string::npos);
  }
  SECTION("no current stream") {
    text.replace(text.find("{current: true}"), 15, "{}");
    CHECK(error_of(text).find("current") != std::string::npos);
  }
}

TEST_CASE("protocol lookup: names, paths next to the plan, unknown names", "[streams]") {
  CHECK(resolve_stream_protocol("none").find("protocols/none.yaml") != std::string::npos);
  const hookstream::test::TempDir dir("hookstream-protocol-test-" + std::to_string(getpid()));
  std::ofstream(dir / "mine.yaml") << kValid;
  CHECK(resolve_stream_protocol("mine.yaml", dir.string()) == (dir / "mine.yaml").string());
  try {
    resolve_stream_protocol("double_buffer_event");
    FAIL("expected an InputError");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("did you mean `double_buffer_events`") != std::string::npos);
  }
}
