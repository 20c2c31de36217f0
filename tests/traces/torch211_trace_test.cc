// A trace from a newer PyTorch than the ones in ../shared/traces: PyTorch 2.11 (CUDA 13, H100),
// recorded by tools/record_kineto_traces.py (tests/traces/data/README.md). The expected counts come
// from what that script does per step (three steps), cross-checked against the file itself read
// with nlohmann::json here, independently of the importer's scanner.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/traces/trace_test_files.h"
#include "traces/replay_report.h"
#include "traces/trace_loader.h"

using namespace hookstream;

namespace {

std::string fixture() { return std::string(HOOKSTREAM_SOURCE_DIR) + "/tests/traces/data/torch2.11-offload-small.json.gz"; }

nlohmann::json read_gzip_json(const std::string& path) { return nlohmann::json::parse(test::inflate_all(path)); }

int64_t count(const EventModel& m, OpKind kind) {
  return std::count_if(m.ops.begin(), m.ops.end(), [&](const Op& op) { return op.kind == kind; });
}

}  // namespace

TEST_CASE("torch 2.11 trace: copies, waits and syncs of the recorded offload schedule", "[traces][kineto][torch211]") {
  const nlohmann::json file = read_gzip_json(fixture());
  std::map<std::string, int64_t> by_cat, runtime_by_name;
  int64_t waits_without_record = 0, waits = 0;
  for (const auto& e : file["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    const std::string cat = e.value("cat", "");
    ++by_cat[cat];
    if (cat == "cuda_runtime") ++runtime_by_name[e.value("name", "")];
    if (cat == "cuda_sync" && e["args"].value("cuda_sync_kind", "") == "Stream Wait Event") {
      ++waits;
      if (e["args"].value("wait_on_cuda_event_record_corr_id", 0) < 0) ++waits_without_record;
    }
  }
  // The script: per step 4 kernels (GEMM, ReLU, mul, sum) and 4 copies (pinned D2H and H2D on the
  // side stream, pageable D2H, .item()'s 4-byte D2H); 2 wait_event; 3 stream syncs.
  REQUIRE(by_cat["kernel"] == 12);
  REQUIRE(by_cat["gpu_memcpy"] == 12);
  REQUIRE(runtime_by_name["cudaStreamSynchronize"] == 9);
  REQUIRE(runtime_by_name["cudaStreamWaitEvent"] == 6);
  REQUIRE(waits == 6);

  const EventModel m = load_trace(fixture());
  CHECK(m.source.find("kineto") == 0);
  CHECK(count(m, OpKind::Kernel) == by_cat["kernel"]);
  CHECK(count(m, OpKind::Copy) == by_cat["gpu_memcpy"]);
  CHECK(count(m, OpKind::Memset) == by_cat["gpu_memset"]);
  CHECK(count(m, OpKind::StreamSync) == runtime_by_name["cudaStreamSynchronize"]);
  CHECK(count(m, OpKind::DeviceSync) == runtime_by_name["cudaDeviceSynchronize"]);
  CHECK(count(m, OpKind::StreamWait) == waits);

  // Two streams: the compute stream and the side stream, both on device 0.
  REQUIRE(m.streams.size() == 2);
  const int compute = m.find_stream(0, 0, 7), side = m.find_stream(0, 0, 13);
  REQUIRE(compute >= 0);
  REQUIRE(side >= 0);
  std::map<std::pair<int, std::string>, int> copies;  // (stream, name) -> count
  for (const Op& op : m.ops) {
    if (op.kind == OpKind::Copy) ++copies[{op.stream, op.name}];
    if (op.kind == OpKind::Copy && op.source == MemoryKind::Device && op.destination == MemoryKind::PageableHost) {
      CHECK(op.blocks_host);  // staged through a driver buffer: synchronous in effect
      CHECK(op.bytes == 1024 * 1024 * 4);
    }
  }
  CHECK(copies[{side, "Memcpy DtoH (Device -> Pinned)"}] == 3);
  CHECK(copies[{side, "Memcpy HtoD (Pinned -> Device)"}] == 3);
  CHECK(copies[{compute, "Memcpy DtoH (Device -> Pageable)"}] == 3);
  CHECK(copies[{compute, "Memcpy DtoH (Device -> Pinned)"}] == 3);  // .item()

  // Each side-stream round trip is ordered by two waits: the side stream waits for the compute
  // stream's event, then the compute stream waits for the side stream's.
  int waits_on_side = 0, waits_on_compute = 0;
  for (const Op& op : m.ops) {
    if (op.kind != OpKind::StreamWait) continue;
    if (op.stream == side) ++waits_on_side;
    if (op.stream == compute) ++waits_on_compute;
    // The wait names the event id; this PyTorch writes no record correlation, so no EventRecord op
    // in the model carries the wait's event: the order it gives is unknown, not invented.
    REQUIRE(op.event >= 0);
    for (const Op& other : m.ops) {
      if (other.kind == OpKind::EventRecord) CHECK(other.event != op.event);
    }
  }
  CHECK(waits_on_side == 3);
  CHECK(waits_on_compute == 3);
  CHECK(waits_without_record == waits);

  const ReplayReport report = analyse_replay(m);
  CHECK(report.pageable.copies == 3);
  CHECK(report.pageable.bytes == 3 * 4 * 1024 * 1024);
  CHECK(report.sync.stream_waits == 6);
  CHECK(report.sync.waits_matched == 0);
  // The text says why the waits order nothing, rather than staying silent.
  CHECK(render_replay_text(report).find("6 wait(s) name no event record in the trace") != std::string::npos);
}
