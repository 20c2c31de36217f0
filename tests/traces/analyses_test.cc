// The analyses on models imported from the real traces. Every figure was cross-checked by an
// independent Python one-off run by hand: interval union of (ts, ts+dur) of kernel / gpu_memcpy /
// gpu_memset events (Kineto, json.load) or of start/end rows (nsys, sqlite3 module), then
// sum(max(0, min(e1,e2) - max(s1,s2))) for overlaps. The values it printed are quoted below.
#include <catch2/catch.hpp>

#include <array>

#include "traces/analyses/collective_compute_overlap.h"
#include "traces/analyses/copy_compute_overlap.h"
#include "traces/analyses/device_utilisation.h"
#include "traces/analyses/gpu_intervals.h"
#include "traces/analyses/memory_bandwidth.h"
#include "traces/analyses/pageable_async_copies.h"
#include "traces/analyses/stream_idle_breakdown.h"
#include "traces/analyses/stream_op_counts.h"
#include "traces/analyses/synchronising_calls.h"
#include "traces/importers/kineto/kineto_importer.h"
#include "traces/importers/nsys/nsys_importer.h"
#include "trace_test_files.h"

using namespace hookstream;

TEST_CASE("interval union and coverage", "[traces][analyses]") {
  const auto merged = merge_intervals({{10, 20, 1, 1}, {0, 5, 0, 0}, {15, 30, 2, 2}, {30, 31, 3, 3}});
  REQUIRE(merged.size() == 2);
  CHECK(merged[0].start == 0);
  CHECK(merged[0].end == 5);
  CHECK(merged[1].start == 10);
  CHECK(merged[1].end == 31);
  CHECK(merged[1].first_op == 1);
  CHECK(merged[1].last_op == 3);
  CHECK(covered_length(merged, 3, 12) == 4);  // [3,5) and [10,12)
  CHECK(covered_length(merged, 40, 50) == 0);
}

TEST_CASE("rank 3 of 8: utilisation, copy/compute and NCCL/compute overlap", "[traces][analyses]") {
  const EventModel m = import_kineto_json(test::shared_trace("kineto/a100-rank3-of-8-control.json.gz"));
  const auto devices = analyse_device_utilisation(m);
  REQUIRE(devices.size() == 1);
  CHECK(devices[0].device == 3);
  CHECK(devices[0].gpu_ops == 9450);
  // Python: busy 388587 us of span 464594 us; largest gaps 2443, 2331, 2314 us.
  CHECK(devices[0].busy_ns == Approx(388587e3));
  CHECK(devices[0].last_ns - devices[0].first_ns == Approx(464594e3));
  REQUIRE(devices[0].largest_gaps.size() == 5);
  CHECK(devices[0].largest_gaps[0].duration_ns == Approx(2443e3));
  CHECK(devices[0].largest_gaps[1].duration_ns == Approx(2331e3));
  CHECK(devices[0].largest_gaps[2].duration_ns == Approx(2314e3));

  const auto copies = analyse_copy_compute_overlap(m);
  REQUIRE(copies.size() == 2);
  // Python: HtoD 150 copies, 50656 us, 33887 us under non-NCCL kernels of other streams.
  CHECK(copies[0].direction == CopyKind::HostToDevice);
  CHECK(copies[0].copies == 150);
  CHECK(copies[0].copy_ns == Approx(50656e3));
  CHECK(copies[0].overlapped_ns == Approx(33887e3));
  // Python: DtoH 60 copies, 107 us, 44 us overlapped.
  CHECK(copies[1].direction == CopyKind::DeviceToHost);
  CHECK(copies[1].copies == 60);
  CHECK(copies[1].copy_ns == Approx(107e3));
  CHECK(copies[1].overlapped_ns == Approx(44e3));

  const auto nccl = analyse_collective_compute_overlap(m);
  REQUIRE(nccl.size() == 1);
  // Python: 60 NCCL kernels, 163535 us, 75614 us overlapped (46.2%).
  CHECK(nccl[0].collectives == 60);
  CHECK(nccl[0].collective_ns == Approx(163535e3));
  CHECK(nccl[0].overlapped_ns == Approx(75614e3));
  CHECK(nccl[0].share == Approx(75614.0 / 163535.0));

  // 60 DtoH copies into pageable memory by cudaMemcpyAsync (all on stream 20).
  const PageableCopies pageable = analyse_pageable_async_copies(m);
  CHECK(pageable.copies == 60);
  CHECK(pageable.copy_ns == Approx(107e3));

  const auto streams = analyse_stream_op_counts(m);
  REQUIRE(streams.size() == 4);
  // Stream 7: 8298 kernels, 24 copies, 642 memsets (Python: group by args.stream and cat).
  CHECK(m.streams[streams[0].stream].id == 7);
  CHECK(streams[0].by_kind.at(OpKind::Kernel) == 8298);
  CHECK(streams[0].by_kind.at(OpKind::Copy) == 24);
  CHECK(streams[0].by_kind.at(OpKind::Memset) == 642);
  CHECK(streams[2].by_kind.at(OpKind::Collective) == 60);
  CHECK(streams[3].by_kind.at(OpKind::Copy) == 144);
}

TEST_CASE("cloverleaf: utilisation and synchronising calls", "[traces][analyses]") {
  const EventModel m = import_nsys_sqlite(test::shared_trace("nsys/cloverleaf-nsys2024.5.sqlite"));
  const auto devices = analyse_device_utilisation(m);
  REQUIRE(devices.size() == 1);
  // Python over kernel + memcpy start/end: busy 303795463 ns, span 342407810 ns, largest gap
  // 2559289 ns.
  CHECK(devices[0].busy_ns == 303795463.0);
  CHECK(devices[0].last_ns - devices[0].first_ns == 342407810.0);
  CHECK(devices[0].largest_gaps[0].duration_ns == 2559289.0);
  CHECK(m.ops[devices[0].largest_gaps[0].op_after].kind == OpKind::Copy);

  // One stream: nothing can overlap.
  const auto copies = analyse_copy_compute_overlap(m);
  REQUIRE(copies.size() == 2);
  CHECK(copies[0].overlapped_ns == 0);
  CHECK(copies[0].copies == 254);

  // sqlite3: sum(end-start) of runtime calls cudaDeviceSynchronize_v3020 (1312 calls, 301652956
  // ns) and cudaMemcpy_v3020 (279 calls, 17670674 ns).
  const SynchronisingCalls sync = analyse_synchronising_calls(m);
  CHECK(sync.calls == 1591);
  CHECK(sync.blocked_ns == 301652956.0 + 17670674.0);
  REQUIRE(sync.by_api.size() == 2);
  CHECK(sync.by_api[0].api == "cudaDeviceSynchronize");
  CHECK(sync.by_api[0].calls == 1312);
  CHECK(sync.by_api[0].blocked_ns == 301652956.0);
  CHECK(sync.by_api[1].api == "cudaMemcpy");
  CHECK(sync.by_api[1].calls == 279);
  // cudaMemcpy is synchronous by API, so its pageable copies are not "async from pageable".
  CHECK(analyse_pageable_async_copies(m).copies == 0);
}

TEST_CASE("alexnet: waits matched, pageable async HtoD", "[traces][analyses]") {
  const EventModel m = import_kineto_json(test::shared_trace("kineto/alexnet-a100-syncevents.json.gz"));
  const SynchronisingCalls sync = analyse_synchronising_calls(m);
  CHECK(sync.stream_waits == 20);
  CHECK(sync.waits_matched == 20);
  CHECK(sync.calls == 21);  // 16 cudaStreamSynchronize + 5 cudaDeviceSynchronize
  const PageableCopies pageable = analyse_pageable_async_copies(m);
  CHECK(pageable.copies == 16);
  // Python: sum(args.bytes) of the 16 gpu_memcpy events.
  CHECK(pageable.bytes == 244403360);
}

// HTA's idle-time breakdown (hta/analyzers/breakdown_analysis.py, _analyze_idle_time_for_stream):
// a gap is host wait when the next op's launching call came after the stream ran dry, kernel wait
// when shorter than 30 ns, other otherwise.
TEST_CASE("idle time per stream, HTA's categories, on a hand-made stream", "[traces][analyses][hta]") {
  EventModel m;
  Stream stream;
  stream.id = 7;
  m.add_stream(stream);
  int correlation = 1;
  const auto launch = [&](double call, double start, double end) {
    Op host;
    host.kind = OpKind::HostCompute;
    host.name = "cudaLaunchKernel";
    host.start_ns = call;
    host.duration_ns = 2;
    host.correlation = correlation;
    m.ops.push_back(host);
    Op kernel;
    kernel.kind = OpKind::Kernel;
    kernel.name = "k";
    kernel.stream = 0;
    kernel.start_ns = start;
    kernel.duration_ns = end - start;
    kernel.correlation = correlation++;
    m.ops.push_back(kernel);
  };
  launch(0, 5, 105);
  launch(10, 120, 200);   // 15 ns after the previous one, launched long before: kernel wait
  launch(300, 305, 400);  // launched after the stream ran dry at 200: host wait 105
  launch(310, 500, 600);  // launched at 310, the stream free at 400, started at 500: other 100
  const auto idle = analyse_stream_idle_breakdown(m);
  REQUIRE(idle.size() == 1);
  CHECK(idle[0].gaps == 3);
  CHECK(idle[0].kernel_wait_ns == 15);
  CHECK(idle[0].host_wait_ns == 105);
  CHECK(idle[0].other_ns == 100);
  const auto types = analyse_kernel_type_breakdown(m);
  REQUIRE(types.size() == 1);
  CHECK(types[0].computation_ops == 4);
  CHECK(types[0].computation_ns == 100 + 80 + 95 + 100);
}

TEST_CASE("rank 3 of 8: HTA's idle-time and kernel-type breakdowns", "[traces][analyses][hta]") {
  const EventModel m = import_kineto_json(test::shared_trace("kineto/a100-rank3-of-8-control.json.gz"));
  // Python (HTA's rule over kernel / gpu_memcpy / gpu_memset events sorted by ts per args.stream,
  // the launch's ts joined by args.correlation from cuda_runtime): gaps, host wait, kernel wait,
  // other in us: stream 7: 8963, 133311, 0, 49903; 20: 280, 424456, 0, 10423; 21: 59, 285806, 0, 78;
  // 22: 143, 340772, 0, 1515.
  const auto idle = analyse_stream_idle_breakdown(m);
  REQUIRE(idle.size() == 4);
  const std::vector<std::array<double, 4>> expected = {
      {8963, 133311, 0, 49903}, {280, 424456, 0, 10423}, {59, 285806, 0, 78}, {143, 340772, 0, 1515}};
  for (size_t i = 0; i < idle.size(); ++i) {
    INFO("stream " << m.streams[idle[i].stream].id);
    CHECK(idle[i].gaps == expected[i][0]);
    CHECK(idle[i].host_wait_ns == Approx(expected[i][1] * 1e3));
    CHECK(idle[i].kernel_wait_ns == Approx(expected[i][2] * 1e3));
    CHECK(idle[i].other_ns == Approx(expected[i][3] * 1e3));
  }
  // cat kernel 8568 (60 NCCL), gpu_memcpy 228 + gpu_memset 654 = 882 memory ops.
  const auto types = analyse_kernel_type_breakdown(m);
  REQUIRE(types.size() == 1);
  CHECK(types[0].communication_ops == 60);
  CHECK(types[0].memory_ops == 882);
  CHECK(types[0].computation_ops == 8508);
}

// HTA's memory-bandwidth summary (hta/analyzers/trace_counters.py). Python (gpu_memcpy /
// gpu_memset events by the first 11 characters of the name, bytes from args.bytes, bandwidth
// bytes/dur as a step series added up over concurrent ops): ops, bytes, us, achieved and peak GB/s
// (printed to 2 decimals):
// HtoD 150, 423923260, 50656, 8.37, 11.70; DtoH 60, 100896, 107, 0.94, 3.92;
// DtoD 18, 1821299360, 2735, 665.92, 990.92; Memset 654, 76353248, 1256, 60.79, 704.68.
TEST_CASE("rank 3 of 8: HTA's memory-bandwidth summary", "[traces][analyses][hta]") {
  const EventModel m = import_kineto_json(test::shared_trace("kineto/a100-rank3-of-8-control.json.gz"));
  const auto bw = analyse_memory_bandwidth(m);
  REQUIRE(bw.size() == 4);
  struct Expected {
    const char* type;
    int64_t ops, bytes;
    double us, achieved, peak;
  };
  const Expected expected[] = {{"Memcpy HtoD", 150, 423923260, 50656, 8.37, 11.70},
                               {"Memcpy DtoH", 60, 100896, 107, 0.94, 3.92},
                               {"Memcpy DtoD", 18, 1821299360, 2735, 665.92, 990.92},
                               {"Memset", 654, 76353248, 1256, 60.79, 704.68}};
  for (size_t i = 0; i < bw.size(); ++i) {
    INFO(bw[i].type);
    CHECK(bw[i].type == expected[i].type);
    CHECK(bw[i].ops == expected[i].ops);
    CHECK(bw[i].bytes == expected[i].bytes);
    CHECK(bw[i].time_ns == Approx(expected[i].us * 1e3));
    CHECK(bw[i].achieved_gbps == Approx(expected[i].achieved).margin(0.005));
    CHECK(bw[i].peak_gbps == Approx(expected[i].peak).margin(0.005));
  }
}
