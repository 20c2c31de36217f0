// `hookstream simulate`: exit codes, races with evidence, JSON shape, bad protocol input.
#include <catch2/catch.hpp>

#include "tests/cli/run_binary.h"
#include "tests/temp_dir.h"

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sys/wait.h>
#include <unistd.h>

namespace {
using Run = hookstream::testing::BinaryRun;
Run run(const std::string& args) { return hookstream::testing::run_binary(args); }
// This process's scratch directory, removed when the test program exits.
const std::filesystem::path& temp_dir() {
  static const hookstream::test::TempDir dir("hookstream-simulate-test-" + std::to_string(getpid()));
  return dir.path();
}
// A plan whose DDP schedule is clean (tiny-llama, reentrant checkpointing, find_unused off).
// ctest runs test cases as parallel processes: each plan file is named by process and content.
std::string offload_plan(const std::string& extra = "") {
  const std::string text =
      "base_model: tiny-llama\nsequence_len: 8\nmicro_batch_size: 1\ngradient_checkpointing: true\n"
      "activation_offloading: true\nddp_find_unused_parameters: false\nhookstream:\n  world_size: 2\n"
      "  iterations: 2\n" + extra;
  const std::string path =
      (temp_dir() / ("plan-" + std::to_string(getpid()) + "-" + std::to_string(std::hash<std::string>{}(text)) + ".yaml"))
          .string();
  std::ofstream(path) << text;
  return path;
}
int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }
}  // namespace

TEST_CASE("simulate: a correct protocol exits 0, a racy one exits 1 with evidence", "[cli][streams]") {
  const Run clean = run("simulate " + offload_plan());
  CHECK(clean.exit_code == 0);
  CHECK(clean.out.find("protocol double_buffer_events") != std::string::npos);
  CHECK(clean.out.find("no race") != std::string::npos);

  const Run racy = run("simulate " + offload_plan() + " --protocol double_buffer_no_events");
  CHECK(racy.exit_code == 1);
  CHECK(racy.out.find("write after read on reload[") != std::string::npos);
  CHECK(racy.out.find("stream copy") != std::string::npos);
  CHECK(racy.out.find("record an event after") != std::string::npos);
  CHECK(racy.out.find("verified") != std::string::npos);

  // The plan key names the protocol too.
  const Run from_plan = run("simulate " + offload_plan("  offload_protocol: events_on_default_stream\n"));
  CHECK(from_plan.exit_code == 1);
  CHECK(from_plan.out.find("hidden[") != std::string::npos);
}

TEST_CASE("simulate: global counter buffers race with two devices per process", "[cli][streams]") {
  CHECK(run("simulate " + offload_plan() + " --protocol global_counter_buffers").exit_code == 0);
  const Run two = run("simulate " + offload_plan() + " --protocol global_counter_buffers --devices-per-process 2");
  CHECK(two.exit_code == 1);
  CHECK(two.out.find("reload[0]") != std::string::npos);
}

TEST_CASE("simulate --format json: ddp, streams, memory and time sections, deterministic", "[cli][streams]") {
  const Run r = run("simulate " + offload_plan() + " --protocol double_buffer_no_events --format json");
  REQUIRE(r.exit_code == 1);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["schema"] == "hookstream.simulate/2");
  CHECK(j["ok"] == false);
  CHECK(j["ddp"]["ok"] == true);
  CHECK(j["streams"]["protocol"]["name"] == "double_buffer_no_events");
  REQUIRE(j["streams"]["races"].size() >= 1);
  const auto& race = j["streams"]["races"][0];
  CHECK(race["kind"] == "write after read");
  CHECK(race["first"]["stream"] == "compute");
  CHECK(race["second"]["stream"] == "copy");
  CHECK(race["fix"]["verified"] == true);
  CHECK(race["fix"]["predicted"]["step_seconds"].get<double>() > 0);
  // Per-op memory: every op of rank 0, the peak among them.
  const auto& per_op = j["memory"]["per_op"];
  REQUIRE(per_op.size() > 10);
  int64_t largest = 0;
  for (const auto& point : per_op) largest = std::max(largest, point["bytes"].get<int64_t>());
  CHECK(j["memory"]["peak"]["bytes"].get<int64_t>() == largest);
  CHECK(j["memory"]["peak"]["op"].is_number());
  CHECK(j["memory"]["oom"].is_null());
  // The critical path spans the step.
  const auto& path = j["time"]["critical_path"];
  CHECK(path["ns"].get<double>() == Approx(j["time"]["step_seconds"].get<double>() * 1e9));
  CHECK(path["ops"].size() > 0);
  CHECK(path["groups"][0]["what"][0]["what"] == "embedding forward");
  // The race fix: a protocol, re-verified.
  REQUIRE(j["fixes"].size() >= 1);
  CHECK(j["fixes"][0]["check"] == "streams");
  CHECK(j["fixes"][0]["changes"][0]["key"] == "hookstream.offload_protocol");
  CHECK(run("simulate " + offload_plan() + " --protocol double_buffer_no_events --format json").out == r.out);
}

TEST_CASE("simulate: bad protocol input is one line and exit 2", "[cli][streams]") {
  const Run unknown = run("simulate " + offload_plan() + " --protocol double_buffer_event");
  CHECK(unknown.exit_code == 2);
  CHECK(lines(unknown.out) == 1);
  CHECK(unknown.out.find("did you mean `double_buffer_events`") != std::string::npos);

  const std::string bad = (temp_dir() / "bad_protocol.yaml").string();
  std::ofstream(bad) << "streams:\n  compute: {current: true}\nforward:\n  - wait_stream: {waiter: compute, waitee: copy}\n";
  // A path relative to the plan's directory.
  const Run undefined = run("simulate " + offload_plan() + " --protocol bad_protocol.yaml");
  CHECK(undefined.exit_code == 2);
  CHECK(lines(undefined.out) == 1);
  CHECK(undefined.out.find("bad_protocol.yaml:4") != std::string::npos);
  CHECK(undefined.out.find("undefined stream `copy`") != std::string::npos);
}

TEST_CASE("simulate --timeline writes the race-checked step as a Chrome trace", "[cli][streams]") {
  const std::string timeline = (temp_dir() / ("timeline-" + std::to_string(getpid()) + ".json")).string();
  std::filesystem::remove(timeline);
  const Run r = run("simulate " + offload_plan() + " --timeline " + timeline);
  CHECK(r.exit_code == 0);
  std::ifstream in(timeline);
  REQUIRE(in.good());
  const auto trace = nlohmann::json::parse(in);
  std::set<std::string> tracks;
  bool flow = false;
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("ph", "") == "X") tracks.insert(std::to_string(e.value("pid", -1)) + "/" + std::to_string(e.value("tid", -1)));
    flow = flow || e.value("ph", "") == "s";
  }
  CHECK(tracks.size() >= 2);  // compute and copy streams at least
  CHECK(flow);                // event record -> wait arrows
  // The memory counter follows the memory model: a sample per op, its largest the reported peak.
  const Run json = run("simulate " + offload_plan() + " --format json");
  const int64_t peak = nlohmann::json::parse(json.out)["memory"]["peak"]["bytes"].get<int64_t>();
  int64_t largest = 0;
  int samples = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("ph", "") != "C") continue;
    ++samples;
    largest = std::max(largest, e["args"]["bytes"].get<int64_t>());
  }
  CHECK(samples > 10);
  CHECK(largest == peak);
  std::filesystem::remove(timeline);
}

TEST_CASE("verify runs the stream and memory checks: races and oom fail with verified fixes", "[cli][streams][memory]") {
  // A racy protocol named in the plan: verify exits 1, names the race, and fixes it with a protocol.
  const Run racy = run("verify " + offload_plan("  offload_protocol: double_buffer_no_events\n"));
  CHECK(racy.exit_code == 1);
  CHECK(racy.out.find("write after read on reload[") != std::string::npos);
  CHECK(racy.out.find("fixes    for the races") != std::string::npos);
  CHECK(racy.out.find("offload_protocol: double_buffer_events") != std::string::npos);
  CHECK(racy.out.find("critical path") != std::string::npos);
  const Run racy_json = run("verify " + offload_plan("  offload_protocol: double_buffer_no_events\n") + " --format json");
  CHECK(racy_json.exit_code == 1);
  const auto j = nlohmann::json::parse(racy_json.out);
  CHECK(j["ok"] == false);
  CHECK(j["checks"]["ddp"] == true);
  CHECK(j["checks"]["streams"] == false);
  CHECK(j["findings"].empty());
  CHECK(j["streams"]["race_count"].get<int>() >= 1);
  REQUIRE(j["fixes"].size() >= 1);
  CHECK(j["fixes"][0]["check"] == "streams");
  CHECK(j["fixes"][0]["predicted"]["step_seconds"].get<double>() > 0);
  CHECK(j["fixes"][0]["predicted"]["peak_device_bytes"].get<int64_t>() > 0);
  // The fix applied: clean.
  CHECK(run("verify " + offload_plan("  offload_protocol: double_buffer_no_events\n") +
            " --set hookstream.offload_protocol=double_buffer_events").exit_code == 0);

  // Llama-3.1-8B LoRA at 32K tokens without checkpointing does not fit an H100.
  const std::string oom = (temp_dir() / ("oom-" + std::to_string(getpid()) + ".yaml")).string();
  std::ofstream(oom) << "base_model: meta-llama/Llama-3.1-8B\nsequence_len: 32768\nadapter: lora\nlora_target_linear: true\n"
                        "hookstream:\n  world_size: 1\n  iterations: 1\n";
  const Run big = run("verify " + oom);
  CHECK(big.exit_code == 1);
  CHECK(big.out.find("FAIL     oom") != std::string::npos);
  CHECK(big.out.find("fixes    for oom") != std::string::npos);
  CHECK(big.out.find("gradient_checkpointing: true") != std::string::npos);
  const auto m = nlohmann::json::parse(run("verify " + oom + " --format json").out);
  CHECK(m["checks"]["memory"] == false);
  CHECK(m["memory"]["oom"]["required_bytes"].get<int64_t>() > m["memory"]["capacity_bytes"].get<int64_t>());
  REQUIRE(m["fixes"].size() >= 1);
  CHECK(m["fixes"][0]["check"] == "memory");
  CHECK(m["fixes"][0]["predicted"]["peak_device_bytes"].get<int64_t>() <= m["memory"]["capacity_bytes"].get<int64_t>());
  CHECK(run("verify " + oom + " --set gradient_checkpointing=true").exit_code == 0);
  // An unknown GPU is bad input now that verify checks memory against it.
  const Run gpu = run("verify " + oom + " --set hookstream.gpu=H1000");
  CHECK(gpu.exit_code == 2);
  CHECK(lines(gpu.out) == 1);
  std::filesystem::remove(oom);
}
