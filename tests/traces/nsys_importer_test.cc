// The nsys SQLite importer on the real exports in ../shared/traces/nsys. Expected counts come from
// SQL run by hand with the sqlite3 CLI on the same files (quoted next to each check).
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>
#include <sqlite3.h>
#include <string>
#include <vector>

#include "traces/analyses/synchronising_calls.h"
#include "traces/importers/nsys/nsys_importer.h"
#include "trace_test_files.h"

using namespace hookstream;

namespace {
int64_t count(const EventModel& m, OpKind kind) {
  return std::count_if(m.ops.begin(), m.ops.end(), [&](const Op& op) { return op.kind == kind; });
}
// A copy of the real cloverleaf export, `name` in `dir`, changed through the sqlite3 API by `edit`.
std::string edited_cloverleaf(const test::TempDir& dir, const std::string& name, const std::function<void(sqlite3*)>& edit) {
  const std::string path = (dir / name).string();
  std::filesystem::copy_file(test::shared_trace("nsys/cloverleaf-nsys2024.5.sqlite"), path);
  sqlite3* raw = nullptr;
  const int opened = sqlite3_open(path.c_str(), &raw);
  const std::unique_ptr<sqlite3, int (*)(sqlite3*)> db(raw, sqlite3_close);
  REQUIRE(opened == SQLITE_OK);
  edit(db.get());
  return path;
}
}  // namespace

TEST_CASE("nsys cloverleaf: kernels, copies, syncs and streams", "[traces][nsys]") {
  const EventModel m = import_nsys_sqlite(test::shared_trace("nsys/cloverleaf-nsys2024.5.sqlite"));
  // select count(*) from CUPTI_ACTIVITY_KIND_KERNEL -> 1312; ..._MEMCPY -> 279.
  CHECK(count(m, OpKind::Kernel) == 1312);
  CHECK(count(m, OpKind::Collective) == 0);
  CHECK(count(m, OpKind::Copy) == 279);
  CHECK(count(m, OpKind::Memset) == 0);  // no CUPTI_ACTIVITY_KIND_MEMSET table: not an error
  // All 1312 SYNCHRONIZATION rows join (correlationId) to cudaDeviceSynchronize_v3020; syncType is 1
  // ("Event sync") on every one of them -- the trap that makes us classify by name.
  CHECK(count(m, OpKind::DeviceSync) == 1312);
  CHECK(count(m, OpKind::EventSync) == 0);
  // 3048 runtime rows = 1312 sync calls + 1736 others.
  CHECK(count(m, OpKind::HostCompute) == 1736);
  CHECK(m.ops.size() == 3048 + 1312 + 279);

  // select copyKind, srcKind, dstKind, count(*) ... group by 1,2,3: (1,0,2) 254, (2,2,0) 25.
  int htod_pageable = 0, dtoh_pageable = 0, blocking = 0;
  for (const Op& op : m.ops) {
    if (op.kind != OpKind::Copy) continue;
    if (op.copy == CopyKind::HostToDevice && op.source == MemoryKind::PageableHost &&
        op.destination == MemoryKind::Device) ++htod_pageable;
    if (op.copy == CopyKind::DeviceToHost && op.source == MemoryKind::Device &&
        op.destination == MemoryKind::PageableHost) ++dtoh_pageable;
    if (op.blocks_host) ++blocking;
    CHECK(op.source_api == "cudaMemcpy_v3020");
  }
  CHECK(htod_pageable == 254);
  CHECK(dtoh_pageable == 25);
  CHECK(blocking == 279);  // cudaMemcpy is synchronous

  // TARGET_INFO_CUDA_STREAM: 10 streams of pid 1701896; 7 is the null stream (flag 3, and
  // TARGET_INFO_CUDA_CONTEXT_INFO.nullStreamId 7), 6 and 15 default-blocking (flag 1), 15 has
  // priority 4294967291 = -5; every kernel ran on stream 7.
  REQUIRE(m.streams.size() == 10);
  const int s7 = m.find_stream(0, 0, 7);
  REQUIRE(s7 >= 0);
  CHECK(m.streams[s7].legacy_default);
  CHECK_FALSE(m.streams[s7].non_blocking);
  const int s15 = m.find_stream(0, 0, 15);
  REQUIRE(s15 >= 0);
  CHECK(m.streams[s15].priority == -5);
  CHECK_FALSE(m.streams[s15].non_blocking);
  CHECK(m.streams[m.find_stream(0, 0, 8)].non_blocking);
  for (const Op& op : m.ops) {
    if (op.kind == OpKind::Kernel) CHECK(op.stream == s7);
  }

  // Ops are in host issue order: a kernel follows its cudaLaunchKernel call.
  for (size_t i = 1; i < m.ops.size(); ++i) {
    if (m.ops[i].kind == OpKind::Kernel) {
      CHECK(m.ops[i - 1].correlation == m.ops[i].correlation);
      CHECK(m.ops[i - 1].source_api == "cudaLaunchKernel_v7000");
      break;
    }
  }
}

TEST_CASE("nsys fuser (schema 3.16): memset, stream sync, NVTX, pinned DtoH", "[traces][nsys]") {
  const EventModel m = import_nsys_sqlite(test::shared_trace("nsys/fuser-report1-nsys2024.6.sqlite"));
  CHECK(count(m, OpKind::Kernel) == 19);
  CHECK(count(m, OpKind::Copy) == 1);
  CHECK(count(m, OpKind::Memset) == 1);
  // select count(*) from NVTX_EVENTS where eventType in (34,59,60) -> 639 (all push/pop ranges).
  CHECK(count(m, OpKind::Marker) == 639);
  // The one SYNCHRONIZATION row joins to cudaStreamSynchronize_v3020 on stream 7.
  REQUIRE(count(m, OpKind::StreamSync) == 1);
  const auto sync = std::find_if(m.ops.begin(), m.ops.end(), [](const Op& op) { return op.kind == OpKind::StreamSync; });
  REQUIRE(sync->sync_stream >= 0);
  CHECK(m.streams[sync->sync_stream].id == 7);
  CHECK(sync->blocks_host);
  CHECK(sync->duration_ns == 8862);  // runtime call end - start
  // copyKind 2, srcKind 2, dstKind 1: DtoH into pinned memory by cudaMemcpyAsync, not blocking.
  const auto copy = std::find_if(m.ops.begin(), m.ops.end(), [](const Op& op) { return op.kind == OpKind::Copy; });
  CHECK(copy->copy == CopyKind::DeviceToHost);
  CHECK(copy->destination == MemoryKind::PinnedHost);
  CHECK(copy->source_api == "cudaMemcpyAsync_v3020");
  CHECK_FALSE(copy->blocks_host);
  CHECK(m.streams.size() == 14);
  const auto nvtx = std::find_if(m.ops.begin(), m.ops.end(), [](const Op& op) { return op.kind == OpKind::Marker; });
  CHECK(nvtx->name == "Fusion::resetTvUses");
  CHECK(nvtx->duration_ns == 1192017354.0 - 1192009629.0);
}

TEST_CASE("nsys first_rank numbers the file's process", "[traces][nsys]") {
  const EventModel m = import_nsys_sqlite(test::shared_trace("nsys/fuser-report1-nsys2024.6.sqlite"), 5);
  for (const Stream& s : m.streams) CHECK(s.rank == 5);
  for (const Op& op : m.ops) CHECK(op.rank == 5);
}

TEST_CASE("nsys: a stream's device comes from its own (process, context), whatever the ids' sizes", "[traces][nsys]") {
  // fuzz/nsys_sql found the key process << 20 | context overflowing (UBSan) for a large id. It also
  // made contexts collide: process 0's context 1701896 * 2^20 + 1 had the key of cloverleaf's real
  // context (process 1701896, context 1), so its device (5) was given to all of cloverleaf's streams.
  const auto dir = test::temp_dir("nsys-context-keys");
  const std::string path = edited_cloverleaf(dir, "cloverleaf-context-keys.sqlite", [](sqlite3* db) {
    REQUIRE(sqlite3_exec(db,
                         "INSERT INTO TARGET_INFO_CUDA_CONTEXT_INFO (nullStreamId, hwId, vmId, processId, deviceId, contextId) "
                         "VALUES (7, 0, 0, 0, 5, 1784567300097), (7, 0, 0, 9223372036854775807, 6, 1)",
                         nullptr, nullptr, nullptr) == SQLITE_OK);
  });
  const EventModel m = import_nsys_sqlite(path);
  // Cloverleaf's 10 streams (TARGET_INFO_CUDA_STREAM, all on its context 1) are on device 0; the two
  // made-up contexts declare only their null streams (7), each on its own device and process.
  size_t on_device_0 = 0, made_up = 0;
  for (const Stream& s : m.streams) {
    INFO("rank " << s.rank << " stream " << s.id << " device " << s.device);
    if (s.device == 0) {
      ++on_device_0;
    } else {
      CHECK(s.id == 7);
      CHECK((s.device == 5 || s.device == 6));
      ++made_up;
    }
  }
  CHECK(on_device_0 == 10);
  CHECK(made_up == 2);
}

// 2022-era exports name the metadata table EXPORT_META_DATA and have no ENUM_* tables
// (trace-formats.md). None of the shared traces is that old, so one is derived from the real
// cloverleaf export with the sqlite3 API, and must import to exactly the same model.
TEST_CASE("a 2022-style export (EXPORT_META_DATA, no ENUM tables) imports like the original", "[traces][nsys]") {
  const auto dir = test::temp_dir("nsys2022");
  const std::string original = test::shared_trace("nsys/cloverleaf-nsys2024.5.sqlite");
  const std::string old_style = edited_cloverleaf(dir, "cloverleaf-2022-style.sqlite", [](sqlite3* db) {
    std::vector<std::string> enums;
    sqlite3_exec(
        db, "SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'ENUM_%'",
        [](void* out, int, char** values, char**) {
          static_cast<std::vector<std::string>*>(out)->push_back(values[0]);
          return 0;
        },
        &enums, nullptr);
    REQUIRE_FALSE(enums.empty());
    for (const std::string& table : enums) {
      REQUIRE(sqlite3_exec(db, ("DROP TABLE " + table).c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
    }
    REQUIRE(sqlite3_exec(db, "ALTER TABLE META_DATA_EXPORT RENAME TO EXPORT_META_DATA", nullptr, nullptr, nullptr) ==
            SQLITE_OK);
  });

  const EventModel fresh = import_nsys_sqlite(original);
  const EventModel old = import_nsys_sqlite(old_style);
  CHECK(old.ops.size() == fresh.ops.size());
  CHECK(count(old, OpKind::Kernel) == 1312);
  CHECK(count(old, OpKind::Copy) == 279);
  CHECK(count(old, OpKind::DeviceSync) == 1312);
  CHECK(old.streams.size() == fresh.streams.size());
}

// GPU rows join their API call by (process, correlation id). CUPTI's ids are consecutive, which the
// importer's index relies on for speed; ids spread far apart (here x1000 + 7 in every table) must
// join exactly the same calls through its other path.
TEST_CASE("nsys: GPU ops join their API calls whether correlation ids are dense or spread out", "[traces][nsys]") {
  const auto dir = test::temp_dir("nsys-sparse-ids");
  const std::string original = test::shared_trace("nsys/cloverleaf-nsys2024.5.sqlite");
  const std::string spread = edited_cloverleaf(dir, "cloverleaf-spread-ids.sqlite", [](sqlite3* db) {
    for (const char* table : {"CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                              "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"}) {
      const std::string sql = std::string("UPDATE ") + table + " SET correlationId = correlationId * 1000 + 7";
      REQUIRE(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
    }
  });
  const EventModel dense = import_nsys_sqlite(original);
  const EventModel sparse = import_nsys_sqlite(spread);
  REQUIRE(sparse.ops.size() == dense.ops.size());
  int joined = 0;
  for (size_t i = 0; i < dense.ops.size(); ++i) {
    const Op& a = dense.ops[i];
    const Op& b = sparse.ops[i];
    INFO("op " << i << ": " << a.name);
    CHECK(b.name == a.name);
    CHECK(b.kind == a.kind);
    CHECK(b.stream == a.stream);
    CHECK(b.start_ns == a.start_ns);
    CHECK(b.source_api == a.source_api);
    CHECK(b.correlation == (a.correlation < 0 ? a.correlation : a.correlation * 1000 + 7));
    joined += a.kind == OpKind::Kernel && !a.source_api.empty();
  }
  CHECK(joined == 1312);  // every kernel found its launch
}

TEST_CASE("nsys: sync records whose API call is missing become host time or are skipped, never kernels",
          "[traces][nsys]") {
  // A byte flipped in an export (found by fuzzing the real exports) left SYNCHRONIZATION records
  // that join no runtime call. Without the call, the record's syncType decides: a known sync is
  // that sync on its own op; a wait that names no stream is host time; an unknown type is skipped.
  // An op made for such a record once kept the Op default kind (a kernel, on no stream), and the
  // replay stopped with an internal error.
  const auto dir = test::temp_dir("nsys-orphan-syncs");
  const std::string original = test::shared_trace("nsys/cloverleaf-nsys2024.5.sqlite");
  // rowids 1-3 (syncType 1, stream and event 0xFFFFFFFF in this export): now joined to no call,
  // as an unknown syncType, a wait on no stream, and a device sync.
  const std::string orphans = edited_cloverleaf(dir, "cloverleaf-orphan-syncs.sqlite", [](sqlite3* db) {
    REQUIRE(sqlite3_exec(db,
                         "UPDATE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION SET correlationId = NULL, syncType = 99 WHERE rowid = 1;"
                         "UPDATE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION SET correlationId = NULL, syncType = 2 WHERE rowid = 2;"
                         "UPDATE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION SET correlationId = NULL, syncType = 4 WHERE rowid = 3;",
                         nullptr, nullptr, nullptr) == SQLITE_OK);
  });

  const EventModel before = import_nsys_sqlite(original);
  const EventModel after = import_nsys_sqlite(orphans);
  // Two ops more: the wait's host time and the device sync. The three calls that lost their
  // record stay device syncs: a call is classified by its name (sqlite3: the syncType 1 rows are
  // cudaDeviceSynchronize's, 1312 of them).
  CHECK(after.ops.size() == before.ops.size() + 2);
  CHECK(count(before, OpKind::DeviceSync) == 1312);
  CHECK(count(after, OpKind::DeviceSync) == 1312 + 1);
  CHECK(count(after, OpKind::HostCompute) == count(before, OpKind::HostCompute) + 1);
  CHECK(count(after, OpKind::Kernel) == count(before, OpKind::Kernel));
  for (const Op& op : after.ops) {
    const bool on_device = op.kind == OpKind::Kernel || op.kind == OpKind::Copy || op.kind == OpKind::Memset ||
                           op.kind == OpKind::Collective || op.kind == OpKind::StreamWait || op.kind == OpKind::EventRecord;
    INFO(op.name);
    if (on_device) CHECK(op.stream >= 0);
  }
}

TEST_CASE("nsys_activity_queries are the importer's queries for the tables an export has", "[traces][nsys]") {
  // replay_bench times these as the reading floor, so they must be what the importer selects:
  // the tables present, with the columns present, in the order the importer reads them.
  auto tables = [](const std::vector<NsysQuery>& queries) {
    std::vector<std::string> names;
    for (const NsysQuery& query : queries) names.push_back(query.table);
    return names;
  };
  const std::vector<NsysQuery> clover = nsys_activity_queries(test::shared_trace("nsys/cloverleaf-nsys2024.5.sqlite"));
  // No MEMSET, CUDA_EVENT or NVTX_EVENTS table in this export (sqlite_master).
  CHECK(tables(clover) == std::vector<std::string>{"StringIds", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL",
                                                   "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"});
  REQUIRE(clover.size() == 5);
  // eventClass: which rows are calls (runtime 0, driver 1) and which are not (backtraces, 67).
  CHECK(clover[1].select ==
        "SELECT start, end, globalTid, correlationId, nameId, eventClass FROM CUPTI_ACTIVITY_KIND_RUNTIME");
  // demangledName and shortName both exist in 2024.5; mangledName is not read.
  CHECK(clover[2].select ==
        "SELECT start, end, deviceId, contextId, streamId, correlationId, globalPid, demangledName, shortName FROM "
        "CUPTI_ACTIVITY_KIND_KERNEL");
  CHECK(clover[4].select ==
        "SELECT start, end, deviceId, contextId, streamId, correlationId, globalPid, eventId, syncType FROM "
        "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION");
  const std::vector<NsysQuery> fuser = nsys_activity_queries(test::shared_trace("nsys/fuser-report1-nsys2024.6.sqlite"));
  CHECK(tables(fuser) == std::vector<std::string>{"StringIds", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL",
                                                  "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                                                  "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS"});
  // A column the schema lacks is left out, as the importer leaves it out.
  const auto dir = test::temp_dir("nsys-activity-queries");
  const std::string no_short = edited_cloverleaf(dir, "no-short.sqlite", [](sqlite3* db) {
    REQUIRE(sqlite3_exec(db, "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN shortName", nullptr, nullptr, nullptr) == SQLITE_OK);
  });
  const std::vector<NsysQuery> edited = nsys_activity_queries(no_short);
  REQUIRE(edited.size() == 5);
  CHECK(edited[2].select.find("shortName") == std::string::npos);
  CHECK(edited[2].select.find("demangledName") != std::string::npos);
}

// An nsys export taken with --cudabacktrace holds, in CUPTI_ACTIVITY_KIND_RUNTIME itself, one
// TRACE_PROCESS_EVENT_CUDABACKTRACE row (eventClass 67) per call whose stack was taken: the call's
// interval, thread and correlationId again, with the stack in callchainId (CUDA_CALLCHAINS). A
// 2022 export laid out this way was counted as 30 synchronous cudaMemcpy calls for 15. None of the
// shared traces was taken with backtraces, so one is derived from the real cloverleaf export as
// the 2022 schema lays it out (EXPORT_META_DATA, no ENUM_* tables): a backtrace row for every
// cudaMemcpy call (279) and every cudaDeviceSynchronize (1312), and two rows of other classes (a
// cuBLAS range, 29, and a graph node creation, 77). The counts must be the original's.
TEST_CASE("nsys: runtime rows that are call stacks or other event classes are not calls", "[traces][nsys]") {
  const auto dir = test::temp_dir("nsys-backtraces");
  const std::string original = test::shared_trace("nsys/cloverleaf-nsys2024.5.sqlite");
  const auto with_backtraces = [](bool drop_enums) {
    return [drop_enums](sqlite3* db) {
      const auto exec = [db](const std::string& sql) { REQUIRE(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK); };
      exec("CREATE TABLE CUDA_CALLCHAINS (id INTEGER NOT NULL, symbol INTEGER NOT NULL, module INTEGER NOT NULL, "
           "unresolved INTEGER, originalIP INTEGER, stackDepth INTEGER NOT NULL, PRIMARY KEY (id, stackDepth))");
      exec("INSERT INTO CUDA_CALLCHAINS SELECT rowid, nameId, nameId, 0, 4198400 + rowid, 0 FROM CUPTI_ACTIVITY_KIND_RUNTIME");
      exec("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId, returnValue, "
           "callchainId) SELECT r.start, r.end, 67, r.globalTid, r.correlationId, r.nameId, 0, r.rowid "
           "FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
           "WHERE s.value IN ('cudaMemcpy_v3020', 'cudaDeviceSynchronize_v3020') ORDER BY r.start");
      exec("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId, returnValue) "
           "SELECT start, end, 29, globalTid, 0, nameId, 0 FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE rowid = 1 UNION ALL "
           "SELECT start, end, 77, globalTid, 0, nameId, 0 FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE rowid = 2");
      if (!drop_enums) return;
      std::vector<std::string> enums;
      sqlite3_exec(
          db, "SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'ENUM_%'",
          [](void* out, int, char** values, char**) {
            static_cast<std::vector<std::string>*>(out)->push_back(values[0]);
            return 0;
          },
          &enums, nullptr);
      for (const std::string& table : enums) exec("DROP TABLE " + table);
      exec("ALTER TABLE META_DATA_EXPORT RENAME TO EXPORT_META_DATA");
    };
  };
  const std::string old_style = edited_cloverleaf(dir, "cloverleaf-2022-backtraces.sqlite", with_backtraces(true));
  const std::string new_style = edited_cloverleaf(dir, "cloverleaf-backtraces.sqlite", with_backtraces(false));

  const EventModel fresh = import_nsys_sqlite(original);
  const SynchronisingCalls fresh_sync = analyse_synchronising_calls(fresh);
  // select count(*) from CUPTI_ACTIVITY_KIND_RUNTIME r join StringIds s on s.id = r.nameId
  //   where s.value = 'cudaMemcpy_v3020' -> 279 (1312 for cudaDeviceSynchronize_v3020).
  for (const std::string& path : {old_style, new_style}) {
    INFO(path);
    TraceContents contents;
    const EventModel m = import_nsys_sqlite(path, 0, &contents);
    CHECK(m.ops.size() == fresh.ops.size());
    CHECK(count(m, OpKind::DeviceSync) == 1312);
    CHECK(count(m, OpKind::HostCompute) == 1736);
    const SynchronisingCalls sync = analyse_synchronising_calls(m);
    CHECK(sync.calls == fresh_sync.calls);
    CHECK(sync.blocked_ns == fresh_sync.blocked_ns);
    int64_t memcpy_calls = 0;
    for (const SyncCallSite& site : sync.by_api) {
      if (site.api == "cudaMemcpy") memcpy_calls = site.calls;
    }
    CHECK(memcpy_calls == 279);
    // What was read past is counted by class, with the export's name for it or the documented one.
    REQUIRE(contents.rows_not_ops.size() == 3);
    int64_t backtraces = 0, others = 0;
    for (const auto& [what, rows] : contents.rows_not_ops) {
      if (what.find("eventClass 67 (TRACE_PROCESS_EVENT_CUDABACKTRACE)") != std::string::npos) backtraces += rows;
      else others += rows;
    }
    CHECK(backtraces == 279 + 1312);
    CHECK(others == 2);
  }
  // The real exports hold calls only (eventClass 0 and 1): nothing is read past.
  TraceContents real;
  (void)import_nsys_sqlite(test::shared_trace("nsys/fuser-report1-nsys2024.6.sqlite"), 0, &real);
  CHECK(real.rows_not_ops.empty());
}
