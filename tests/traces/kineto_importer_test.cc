// The Kineto importer on the real traces in ../shared/traces/kineto. Expected values were counted
// by hand with a Python one-off (json.load(gzip.open(f)), filtering traceEvents by cat/args).
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>

#include "traces/importers/kineto/kineto_importer.h"
#include "trace_test_files.h"

using namespace hookstream;

namespace {
int64_t count(const EventModel& m, OpKind kind) {
  return std::count_if(m.ops.begin(), m.ops.end(), [&](const Op& op) { return op.kind == kind; });
}
}  // namespace

TEST_CASE("kineto rank 3 of 8: GPU work, NCCL kernels, four streams", "[traces][kineto]") {
  const EventModel m = import_kineto_json(test::shared_trace("kineto/a100-rank3-of-8-control.json.gz"), 3);
  // cat kernel: 8568, of which 60 have "nccl" in the name; gpu_memcpy 228; gpu_memset 654.
  CHECK(count(m, OpKind::Kernel) == 8508);
  CHECK(count(m, OpKind::Collective) == 60);
  CHECK(count(m, OpKind::Copy) == 228);
  CHECK(count(m, OpKind::Memset) == 654);
  // cuda_runtime: 24692 calls; cudaStreamSynchronize 60 and cudaDeviceSynchronize 1 among them.
  CHECK(count(m, OpKind::StreamSync) == 60);
  CHECK(count(m, OpKind::DeviceSync) == 1);
  CHECK(count(m, OpKind::HostCompute) == 24692 - 61);
  // tid (= args.stream) of GPU work: 7, 20, 21, 22 on device 3 (pid 3).
  REQUIRE(m.streams.size() == 4);
  for (int64_t id : {7, 20, 21, 22}) CHECK(m.find_stream(3, 3, id) >= 0);
  for (const Op& op : m.ops) {
    if (op.kind == OpKind::Collective) CHECK(m.streams[op.stream].id == 21);
  }
  // Integer microseconds stay exact: the cutlass kernel of correlation 1869557 is at ts
  // 1661203463029566 us, dur 7; start_ns counts
  // from the last multiple of 10^15 ns before the trace (1661000000000000 us).
  const auto kernel = std::find_if(m.ops.begin(), m.ops.end(),
                                   [](const Op& op) { return op.kind == OpKind::Kernel && op.correlation == 1869557; });
  REQUIRE(kernel != m.ops.end());
  CHECK(kernel->start_ns == (1661203463029566.0 - 1661000000000000.0) * 1000);
  CHECK(kernel->duration_ns == 7000);
}

TEST_CASE("kineto alexnet: pageable HtoD, stream waits matched to event records", "[traces][kineto]") {
  const EventModel m = import_kineto_json(test::shared_trace("kineto/alexnet-a100-syncevents.json.gz"));
  CHECK(count(m, OpKind::Kernel) == 79);
  CHECK(count(m, OpKind::Copy) == 16);
  CHECK(count(m, OpKind::Memset) == 3);
  // cuda_sync: 20 Stream Wait Event (of 34 cudaStreamWaitEvent calls: Kineto drops waits on streams
  // without GPU work in the window), 16 Stream Sync, 5 Context Sync.
  CHECK(count(m, OpKind::StreamWait) == 20);
  CHECK(count(m, OpKind::StreamSync) == 16);
  CHECK(count(m, OpKind::DeviceSync) == 5);
  // Each wait names its record by correlation (wait_on_cuda_event_record_corr_id); the record's
  // stream is wait_on_stream. 20 distinct records: 5169, 5180, 5193..5207, 5585, 5596, 5609..5623.
  CHECK(count(m, OpKind::EventRecord) == 20);
  int matched = 0;
  for (const Op& wait : m.ops) {
    if (wait.kind != OpKind::StreamWait) continue;
    REQUIRE(wait.event >= 0);
    const auto record = std::find_if(m.ops.begin(), m.ops.end(), [&](const Op& op) {
      return op.kind == OpKind::EventRecord && op.event == wait.event;
    });
    REQUIRE(record != m.ops.end());
    CHECK(record < m.ops.begin() + (&wait - m.ops.data()));  // recorded before the wait was issued
    CHECK(record->stream != wait.stream);
    ++matched;
  }
  CHECK(matched == 20);
  // The record with correlation 5195 recorded on stream 21; its wait is on stream 7.
  const auto r5195 = std::find_if(m.ops.begin(), m.ops.end(), [](const Op& op) { return op.correlation == 5195; });
  REQUIRE(r5195 != m.ops.end());
  CHECK(r5195->kind == OpKind::EventRecord);
  CHECK(m.streams[r5195->stream].id == 21);
  // "Memcpy HtoD (Pageable -> Device)" by cudaMemcpyAsync: direction and kinds from the name.
  for (const Op& op : m.ops) {
    if (op.kind != OpKind::Copy) continue;
    CHECK(op.copy == CopyKind::HostToDevice);
    CHECK(op.source == MemoryKind::PageableHost);
    CHECK(op.destination == MemoryKind::Device);
    CHECK(op.source_api == "cudaMemcpyAsync");
    CHECK(op.blocks_host);
  }
}

TEST_CASE("kineto event sync: cudaEventQuery's Event Sync record is not a host sync", "[traces][kineto]") {
  const EventModel m = import_kineto_json(test::shared_trace("kineto/event-sync.json.gz"));
  // Two "Event Sync" cuda_sync records: correlation 1536 is cudaEventSynchronize, 1537 is
  // cudaEventQuery (which returns at once). Both name record 1533 on stream 7.
  CHECK(count(m, OpKind::EventSync) == 1);
  const auto query = std::find_if(m.ops.begin(), m.ops.end(), [](const Op& op) { return op.correlation == 1537; });
  REQUIRE(query != m.ops.end());
  CHECK(query->kind == OpKind::HostCompute);
  CHECK_FALSE(query->blocks_host);
  const auto sync = std::find_if(m.ops.begin(), m.ops.end(), [](const Op& op) { return op.correlation == 1536; });
  CHECK(sync->kind == OpKind::EventSync);
  CHECK(sync->duration_ns == 34000);  // the cudaEventSynchronize call (the cuda_sync record says 33)
  const auto record = std::find_if(m.ops.begin(), m.ops.end(), [](const Op& op) { return op.correlation == 1533; });
  CHECK(record->kind == OpKind::EventRecord);
  CHECK(record->event == sync->event);
  CHECK(m.streams[record->stream].id == 7);
  CHECK(count(m, OpKind::StreamSync) == 1);
  CHECK(count(m, OpKind::DeviceSync) == 1);
}

TEST_CASE("kineto multistream: wait on stream 24 for the record on stream 20", "[traces][kineto]") {
  const EventModel m = import_kineto_json(test::shared_trace("kineto/event-sync-multistream.json.gz"));
  REQUIRE(m.streams.size() == 3);
  REQUIRE(count(m, OpKind::StreamWait) == 1);
  const auto wait = std::find_if(m.ops.begin(), m.ops.end(), [](const Op& op) { return op.kind == OpKind::StreamWait; });
  CHECK(m.streams[wait->stream].id == 24);
  const auto record = std::find_if(m.ops.begin(), m.ops.end(), [](const Op& op) { return op.correlation == 1385; });
  CHECK(record->kind == OpKind::EventRecord);
  CHECK(record->event == wait->event);
  CHECK(m.streams[record->stream].id == 20);
  // Three Event Sync records, all from cudaEventQuery calls (correlations 24, 54, 1410): no host sync.
  CHECK(count(m, OpKind::EventSync) == 0);
}

TEST_CASE("kineto newer format: float microseconds after baseTimeNanoseconds", "[traces][kineto]") {
  const auto dir = test::temp_dir("base-time");
  const std::string path = (dir / "new.json").string();
  // Newer Kineto writes ts relative to baseTimeNanoseconds, with a fraction, and may write the base
  // after traceEvents; old capitalised categories are accepted too.
  std::ofstream(path) << R"({"traceEvents": [
    {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1.25, "dur": 3,
     "args": {"correlation": 9}},
    {"ph": "X", "cat": "Kernel", "name": "ncclDevKernel_AllReduce", "pid": 0, "tid": 13, "ts": 5.5, "dur": 2.25,
     "args": {"device": 0, "stream": 13, "correlation": 9}}],
    "baseTimeNanoseconds": 1700000000000123456})";
  const EventModel m = import_kineto_json(path);
  REQUIRE(m.ops.size() == 2);
  CHECK(m.ops[0].kind == OpKind::HostCompute);
  CHECK(m.ops[0].start_ns == 123456 + 1250);  // origin 1700 * 10^15 ns
  CHECK(m.ops[1].kind == OpKind::Collective);
  CHECK(m.ops[1].start_ns == 123456 + 5500);
  CHECK(m.ops[1].duration_ns == 2250);
  CHECK(m.ops[1].source_api == "cudaLaunchKernel");
  CHECK(m.streams[m.ops[1].stream].id == 13);
}
