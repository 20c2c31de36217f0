// The Kineto importer on the real traces in ../shared/traces/kineto. Expected values were counted
// by hand with a Python one-off (json.load(gzip.open(f)), filtering traceEvents by cat/args).
#include <catch2/catch.hpp>

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "traces/analyses/synchronising_calls.h"
#include "traces/importers/gzip_reader.h"
#include "traces/importers/kineto/kineto_event_scanner.h"
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

TEST_CASE("kineto: a sync record whose call is missing is that sync on its own op, a non-blocking one adds nothing",
          "[traces][kineto]") {
  // Found by fuzzing the real traces: the multistream trace with its cudaStreamWaitEvent call
  // recategorised as "cuda_sync". The call is then a sync record of no known kind, and the "Stream
  // Wait Event" record (correlation 1389) joins no call. The first once became an op of the Op
  // default kind (a kernel, on no stream) and the replay stopped with an internal error.
  const auto dir = test::temp_dir("kineto-orphan-sync");
  nlohmann::json doc = nlohmann::json::parse(test::inflate_all(test::shared_trace("kineto/event-sync-multistream.json.gz")));
  int changed = 0;
  for (auto& e : doc["traceEvents"]) {
    if (e.value("name", "") == "cudaStreamWaitEvent" && e.value("cat", "") == "cuda_runtime") {
      e["cat"] = "cuda_sync";
      ++changed;
    }
  }
  REQUIRE(changed == 1);
  const std::string path = (dir / "orphan-sync.json").string();
  std::ofstream(path) << doc.dump();
  const EventModel before = import_kineto_json(test::shared_trace("kineto/event-sync-multistream.json.gz"));
  const EventModel after = import_kineto_json(path);
  // The wait is now an op of its own, in place of the call's: the same count of each kind.
  CHECK(after.ops.size() == before.ops.size());
  for (OpKind kind : {OpKind::Kernel, OpKind::Copy, OpKind::HostCompute, OpKind::StreamWait, OpKind::EventRecord}) {
    CHECK(count(after, kind) == count(before, kind));
  }
  const auto wait = std::find_if(after.ops.begin(), after.ops.end(), [](const Op& op) { return op.kind == OpKind::StreamWait; });
  REQUIRE(wait != after.ops.end());
  CHECK(wait->name == "Stream Wait Event");
  CHECK(after.streams[wait->stream].id == 24);
  for (const Op& op : after.ops) {
    INFO(op.name);
    if (op.kind == OpKind::Kernel) CHECK(op.stream >= 0);
  }
}

TEST_CASE("kineto: a ts outside int64 microseconds drops its event, such a dur counts as absent", "[traces][kineto]") {
  // fuzz/replay: a digit added to a kernel's ts (1.7e22 us) made it the scanner's "absent"
  // (INT64_MIN), which the importer took for a time: the trace's origin went to -9.2e18 us and
  // every other op's start overflowed (undefined behaviour) into nonsense.
  const auto dir = test::temp_dir("kineto-ts-range");
  nlohmann::json doc = nlohmann::json::parse(test::inflate_all(test::shared_trace("kineto/event-sync.json.gz")));
  int kernels = 0;
  for (auto& e : doc["traceEvents"]) {
    if (e.value("cat", "") != "kernel") continue;
    if (kernels == 0) e["ts"] = 1.7e22;
    if (kernels == 1) e["dur"] = 1e30;
    ++kernels;
  }
  REQUIRE(kernels == 4);
  const std::string path = (dir / "ts-range.json").string();
  std::ofstream(path) << doc.dump();
  const EventModel before = import_kineto_json(test::shared_trace("kineto/event-sync.json.gz"));
  const EventModel after = import_kineto_json(path);
  CHECK(count(after, OpKind::Kernel) == count(before, OpKind::Kernel) - 1);
  CHECK(after.ops.size() == before.ops.size() - 1);
  double lo = before.ops.front().start_ns, hi = lo;
  for (const Op& op : before.ops) lo = std::min(lo, op.start_ns), hi = std::max(hi, op.start_ns);
  int zero_kernels = 0;
  for (const Op& op : after.ops) {
    INFO(op.name << " at " << op.start_ns << " for " << op.duration_ns);
    CHECK(op.start_ns >= lo);
    CHECK(op.start_ns <= hi);
    CHECK(op.duration_ns >= 0);
    zero_kernels += op.kind == OpKind::Kernel && op.duration_ns == 0;
  }
  CHECK(zero_kernels == 1);  // the kernel whose dur was 1e30
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

// ---- The streaming scanner (kineto_event_scanner.h over json_cursor.h) ----

namespace {

// One line per event with every field the scanner extracts; doubles printed exactly.
std::string describe(const KinetoEvent& e) {
  char times[128];
  std::snprintf(times, sizeof times, "%lld+%.17g(%d) %lld+%.17g(%d)", static_cast<long long>(e.ts.whole), e.ts.fraction,
                e.has_ts, static_cast<long long>(e.dur.whole), e.dur.fraction, e.has_dur);
  std::string s = e.ph + "|" + e.cat + "|" + e.name + "|" + e.sync_kind + "|" + times;
  for (int64_t v : {e.pid, e.tid, e.device, e.context, e.stream, e.correlation, e.bytes, e.wait_on_stream, e.wait_record,
                    e.wait_event}) {
    s += "|" + (v == kKinetoAbsent ? std::string("-") : std::to_string(v));
  }
  return s;
}

// Keeps every event the scanner hands over (it wants every category).
class RecordingSink : public KinetoEventSink {
 public:
  std::vector<std::string> events;
  bool wants_category(const std::string&) const override { return true; }
  void event(KinetoEvent& e) override { events.push_back(describe(e)); }
};

struct Scanned {
  std::vector<std::string> events;
  KinetoTraceInfo info;
};

Scanned scan(const std::string& path, size_t block_bytes = GzipReader::kDefaultBlockBytes) {
  GzipReader reader(path, block_bytes);
  RecordingSink sink;
  Scanned out;
  out.info = scan_kineto_trace(reader, sink);
  out.events = std::move(sink.events);
  return out;
}

// The same fields read independently from the whole document parsed by nlohmann::json, with the
// rules of the nlohmann SAX handler the scanner replaced: integers (above INT64_MAX: absent) for
// pid, tid and args; ts/dur integer or float; strings for ph/cat/name/cuda_sync_kind.
Scanned scan_with_nlohmann(const std::string& path) {
  std::string text;
  {
    gzFile file = gzopen(path.c_str(), "rb");
    REQUIRE(file != nullptr);
    char buffer[1 << 16];
    int n;
    while ((n = gzread(file, buffer, sizeof buffer)) > 0) text.append(buffer, static_cast<size_t>(n));
    gzclose(file);
  }
  const nlohmann::json doc = nlohmann::json::parse(text);
  const auto integer = [](const nlohmann::json& v, int64_t& out) {
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      out = u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? kKinetoAbsent : static_cast<int64_t>(u);
    } else if (v.is_number_integer()) {
      out = v.get<int64_t>();
    }
  };
  const auto micros = [](const nlohmann::json& v, KinetoMicros& out, bool& has) {
    if (v.is_number_float()) {
      const double d = v.get<double>(), whole = std::floor(d);
      out = KinetoMicros{static_cast<int64_t>(whole), d - whole};
      has = true;
    } else if (v.is_number()) {
      int64_t i = kKinetoAbsent;
      if (v.is_number_unsigned() && v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        i = static_cast<int64_t>(v.get<uint64_t>());
      } else if (!v.is_number_unsigned()) {
        i = v.get<int64_t>();
      }
      out = KinetoMicros{i, 0};
      has = true;
    }
  };
  Scanned out;
  const nlohmann::json* events = doc.is_array() ? &doc : nullptr;
  if (doc.is_object()) {
    if (doc.contains("traceEvents") && doc["traceEvents"].is_array()) events = &doc["traceEvents"];
    if (doc.contains("baseTimeNanoseconds") && doc["baseTimeNanoseconds"].is_number_integer()) {
      out.info.has_base_time = true;
      integer(doc["baseTimeNanoseconds"], out.info.base_time_ns);
    }
  }
  out.info.saw_events = events != nullptr;
  if (!events) return out;
  for (const nlohmann::json& item : *events) {
    if (!item.is_object()) continue;
    if (item.contains("ph") && item["ph"].is_string() && item["ph"] != "X") continue;  // dropped unread
    KinetoEvent e;
    for (const auto& [key, value] : item.items()) {
      if (key == "ph" && value.is_string()) e.ph = value;
      else if (key == "cat" && value.is_string()) e.cat = value;
      else if (key == "name" && value.is_string()) e.name = value;
      else if (key == "pid") integer(value, e.pid);
      else if (key == "tid") integer(value, e.tid);
      else if (key == "ts") micros(value, e.ts, e.has_ts);
      else if (key == "dur") micros(value, e.dur, e.has_dur);
      else if (key == "args" && value.is_object()) {
        for (const auto& [arg, v] : value.items()) {
          if (arg == "stream") integer(v, e.stream);
          else if (arg == "correlation") integer(v, e.correlation);
          else if (arg == "device") integer(v, e.device);
          else if (arg == "context") integer(v, e.context);
          else if (arg == "bytes") integer(v, e.bytes);
          else if (arg == "wait_on_stream") integer(v, e.wait_on_stream);
          else if (arg == "wait_on_cuda_event_record_corr_id") integer(v, e.wait_record);
          else if (arg == "wait_on_cuda_event_id") integer(v, e.wait_event);
          else if (arg == "cuda_sync_kind" && v.is_string()) e.sync_kind = v;
        }
      }
    }
    out.events.push_back(describe(e));
  }
  return out;
}

void check_same(const Scanned& a, const Scanned& b) {
  CHECK(a.info.saw_events == b.info.saw_events);
  CHECK(a.info.has_base_time == b.info.has_base_time);
  CHECK(a.info.base_time_ns == b.info.base_time_ns);
  REQUIRE(a.events.size() == b.events.size());
  for (size_t i = 0; i < a.events.size(); ++i) {
    if (a.events[i] != b.events[i]) {
      INFO("event " << i);
      CHECK(a.events[i] == b.events[i]);
      return;
    }
  }
}

const std::vector<std::string> kKinetoTraces = {"kineto/a100-rank3-of-8-control.json.gz",
                                                "kineto/alexnet-a100-syncevents.json.gz",
                                                "kineto/event-sync-multistream.json.gz", "kineto/event-sync.json.gz"};

// Every field of a model that an importer fills, one line per item.
std::vector<std::string> model_lines(const EventModel& m) {
  std::vector<std::string> lines;
  for (const Stream& s : m.streams) {
    lines.push_back("stream " + std::to_string(s.rank) + " " + std::to_string(s.device) + " " + std::to_string(s.id) +
                    " " + s.name);
  }
  for (const Event& e : m.events) lines.push_back("event " + e.name + " " + std::to_string(e.rank));
  for (const Op& op : m.ops) {
    char times[96];
    std::snprintf(times, sizeof times, "%.17g %.17g", op.start_ns, op.duration_ns);
    lines.push_back(std::string(to_string(op.kind)) + " " + std::to_string(op.rank) + " " + std::to_string(op.stream) +
                    " " + op.name + " " + std::to_string(op.event) + " " + std::to_string(op.sync_stream) + " " +
                    to_string(op.copy) + " " + to_string(op.source) + " " + to_string(op.destination) + " " +
                    std::to_string(op.blocks_host) + " " + std::to_string(op.bytes) + " " + times + " " +
                    std::to_string(op.correlation) + " " + op.source_api);
  }
  return lines;
}

std::string inflate_to(const std::string& gz, const std::string& path) {
  gzFile file = gzopen(gz.c_str(), "rb");
  REQUIRE(file != nullptr);
  std::ofstream out(path, std::ios::binary);
  char buffer[1 << 16];
  int n;
  while ((n = gzread(file, buffer, sizeof buffer)) > 0) out.write(buffer, n);
  gzclose(file);
  return path;
}

}  // namespace

TEST_CASE("kineto scanner: every real trace scans to the fields nlohmann::json reads", "[traces][kineto][scanner]") {
  for (const std::string& trace : kKinetoTraces) {
    INFO(trace);
    const std::string path = test::shared_trace(trace);
    const Scanned ours = scan(path);
    CHECK(ours.events.size() > 0);
    check_same(ours, scan_with_nlohmann(path));
  }
}

TEST_CASE("kineto scanner: block boundaries anywhere give the same events", "[traces][kineto][scanner]") {
  // Tokens, escapes, UTF-8 sequences and numbers split across blocks: blocks of 1, 2, 3 and 7
  // bytes put a boundary everywhere in the small traces; odd sizes in the larger ones.
  for (const std::string& trace : kKinetoTraces) {
    INFO(trace);
    const std::string path = test::shared_trace(trace);
    const Scanned whole = scan(path);
    std::vector<size_t> blocks = {1, 2, 3, 7};  // the event-sync traces: ~30 kB inflated
    if (trace.find("alexnet") != std::string::npos) blocks = {3, 7, 4093};
    if (trace.find("a100-rank3") != std::string::npos) blocks = {4093, 65537};
    for (size_t block : blocks) {
      INFO("block " << block);
      check_same(scan(path, block), whole);
    }
  }
}

TEST_CASE("kineto importer: .json.gz, the inflated .json and a compact rewrite give one model", "[traces][kineto]") {
  const auto dir = test::temp_dir("kineto-forms");
  for (const std::string& trace : kKinetoTraces) {
    INFO(trace);
    const std::string gz = test::shared_trace(trace);
    const std::string plain = inflate_to(gz, (dir / "plain.json").string());
    // nlohmann's dump: no whitespace, every non-ASCII character as \uXXXX (surrogate pairs too).
    const std::string compact = (dir / "compact.json").string();
    {
      std::ifstream in(plain, std::ios::binary);
      std::ofstream(compact, std::ios::binary)
          << nlohmann::json::parse(in).dump(-1, ' ', true, nlohmann::json::error_handler_t::strict);
    }
    const std::vector<std::string> expected = model_lines(import_kineto_json(gz));
    CHECK(model_lines(import_kineto_json(plain)) == expected);
    CHECK(model_lines(import_kineto_json(compact)) == expected);
  }
}

TEST_CASE("kineto scanner: escapes in kept names, numbers in every JSON form", "[traces][kineto][scanner]") {
  const auto dir = test::temp_dir("kineto-escapes");
  const std::string path = (dir / "escapes.json").string();
  // Kernel names with escaped quotes, \u0026 (nlohmann's dump of '&' in some writers), a
  // surrogate pair, raw UTF-8; ts in exponent form; pid as a string; tid above INT64_MAX;
  // a float pid; keys written with escapes; nested values in args that must be skipped.
  std::ofstream(path, std::ios::binary) << "\xEF\xBB\xBF" << R"json({"traceEvents":[
    {"ph":"X","cat":"kernel","name":"void f<\"q\"> \u0026 \ud83d\ude00 caf\u00e9 caf)json" "\xC3\xA9" R"json( \/\\\b\f\n\r\t",
     "pid":"Spans","tid":18446744073709551615,"ts":1.5e1,"dur":2E0,
     "args":{"grid":[1,[2,{"stream":99}]],"stream":7,"device":0.0,"correlation":-0,"bytes":12,"x":{"y":null},"z":true}},
    {"p\u0068":"X","c\u0061t":"gpu_memcpy","name":"Memcpy DtoH (Device -> Pinned)","pid":2,"tid":3,"ts":-4,"dur":0.25,
     "args":{"bytes":1024,"correlation":false,"context":5}},
    {"ph":"X","cat":"cpu_op","name":"aten::mm","ts":1,"args":{"stream":1}},
    {"ph":"i","cat":"kernel","name":"instant","ts":1},
    {"ph":"X","cat":"kernel","name":"no ts","dur":3},
    7, "text", [1, 2], {}
  ], "baseTimeNanoseconds": 1700000000000000000, "other": {"traceEvents": 5}})json";
  const EventModel m = import_kineto_json(path);
  REQUIRE(m.ops.size() == 2);
  REQUIRE(m.ops[0].kind == OpKind::Copy);  // ops are in time order: the copy at -4 us first
  const Op& kernel = m.ops[1];
  CHECK(kernel.kind == OpKind::Kernel);
  CHECK(kernel.name == "void f<\"q\"> & \xF0\x9F\x98\x80 caf\xC3\xA9 caf\xC3\xA9 /\\\b\f\n\r\t");
  CHECK(kernel.start_ns == 15000);
  CHECK(kernel.duration_ns == 2000);
  CHECK(kernel.bytes == 12);
  CHECK(kernel.correlation == 0);
  // pid "Spans" is no device and tid 2^64-1 no stream: args.device (a float) does not count
  // either, so the device falls back to 0; args.stream says 7 (the nested "stream" is not args').
  CHECK(m.streams[kernel.stream].device == 0);
  CHECK(m.streams[kernel.stream].id == 7);
  const Op& copy = m.ops[0];
  CHECK(copy.copy == CopyKind::DeviceToHost);
  CHECK(copy.destination == MemoryKind::PinnedHost);
  CHECK(copy.start_ns == -4000);
  CHECK(copy.duration_ns == 250);
  CHECK(copy.correlation == -1);  // false is no correlation
  CHECK(m.streams[copy.stream].device == 2);
  CHECK(m.streams[copy.stream].id == 3);
}

// ---- The parallel scan (scan_kineto_trace_parallel) against the single-threaded one ----

namespace {

struct ParallelScanned {
  Scanned scanned;
  KinetoParallelScan how;
  std::string error;  // what it threw, if it did
};

ParallelScanned scan_parallel(const std::string& path, size_t chunk_bytes, int threads, bool fast_path) {
  ParallelScanned out;
  out.how.chunk_bytes = chunk_bytes;
  out.how.threads = threads;
  out.how.fast_path = fast_path;
  std::vector<std::unique_ptr<KinetoEventSink>> sinks;
  try {
    out.scanned.info = scan_kineto_trace_parallel(path, [] { return std::make_unique<RecordingSink>(); }, sinks, out.how);
  } catch (const std::exception& e) {
    out.error = e.what();
    return out;
  }
  for (const auto& sink : sinks) {
    const auto& events = static_cast<const RecordingSink&>(*sink).events;
    out.scanned.events.insert(out.scanned.events.end(), events.begin(), events.end());
  }
  return out;
}

// The parallel scan must give what the single-threaded one gives: the same events and info, or
// the same error, for every chunk size and thread count, with simdjson's fast path for the middle
// chunks (1, 2, 3 threads) and without it (2 threads). Returns how the file was read.
std::vector<KinetoParallelScan> check_parallel_same(const std::string& path, const std::vector<size_t>& chunks) {
  std::string expected_error;
  Scanned expected;
  try {
    expected = scan(path);
  } catch (const std::exception& e) {
    expected_error = e.what();
  }
  std::vector<KinetoParallelScan> hows;
  for (size_t chunk : chunks) {
    for (const auto& [threads, fast_path] : std::vector<std::pair<int, bool>>{{1, true}, {2, true}, {3, true}, {2, false}}) {
      INFO("chunk bytes " << chunk << ", threads " << threads << ", fast path " << fast_path);
      const ParallelScanned got = scan_parallel(path, chunk, threads, fast_path);
      INFO("chunks " << got.how.chunks << ", fell back: " << got.how.fell_back << " " << got.how.fallback_why);
      CHECK(got.error == expected_error);
      if (expected_error.empty() && got.error.empty()) {
        check_same(got.scanned, expected);
        CHECK(got.scanned.info.bytes == expected.info.bytes);
      }
      hows.push_back(got.how);
    }
  }
  return hows;
}

}  // namespace

TEST_CASE("kineto parallel scan: every real trace cut into many chunks gives the single-threaded events", "[traces][kineto][scanner]") {
  const auto dir = test::temp_dir("kineto-parallel-real");
  for (const std::string& trace : kKinetoTraces) {
    INFO(trace);
    const std::string gz = test::shared_trace(trace);
    const std::string plain = inflate_to(gz, (dir / "plain.json").string());
    std::vector<size_t> chunks = {64, 4096, KinetoParallelScan{}.chunk_bytes};
    if (trace.find("a100-rank3") != std::string::npos) chunks = {65536, KinetoParallelScan{}.chunk_bytes};
    for (const std::string& path : {gz, plain}) {
      INFO(path);
      for (const KinetoParallelScan& how : check_parallel_same(path, chunks)) {
        // Every cut in a real trace is proven: no second, single-threaded scan.
        CHECK_FALSE(how.fell_back);
        if (how.chunk_bytes * 2 < std::filesystem::file_size(plain)) CHECK(how.chunks > 1);
        // simdjson accepts every middle chunk of a real trace: the events compared above are its.
        if (kineto_simdjson_available() && how.fast_path) CHECK(how.fast_chunks == std::max(0, how.chunks - 2));
        else CHECK(how.fast_chunks == 0);
      }
    }
  }
}

TEST_CASE("kineto parallel scan: cuts it cannot prove, bad input and odd shapes give the single-threaded result", "[traces][kineto][scanner]") {
  const auto dir = test::temp_dir("kineto-parallel-odd");
  const std::string event = R"({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 5, "dur": 2,
  "args": {"correlation": 3}})";
  std::string events;
  for (int i = 0; i < 40; ++i) events += (i ? ",\n  " : "\n  ") + event;
  // Minified: nowhere to cut in more than eight chunks and a read block's worth of bytes.
  std::string compact = "{\"traceEvents\": [";
  for (int i = 0; compact.size() < 300000; ++i) compact += (i ? "," : "") + event;
  compact += "]}";
  compact.erase(std::remove(compact.begin(), compact.end(), '\n'), compact.end());
  struct Case {
    const char* what;
    std::string text;
    bool falls_back;  // with 64-byte chunks
  };
  const std::vector<Case> cases = {
      {"plain object", "{\"traceEvents\": [" + events + "\n], \"baseTimeNanoseconds\": 17}\n", false},
      {"bare array (LibTorch 1.13's legacy profiler)", "[" + events + "\n]\n", false},
      {"base time before and after the array: the last wins",
       "{\"baseTimeNanoseconds\": 5, \"traceEvents\": [" + events + "\n],\n \"baseTimeNanoseconds\": 9}", false},
      {"a second traceEvents array", "{\"traceEvents\": [" + events + "\n], \"traceEvents\": [" + events + "\n]}", false},
      // Lines that look like an event's start inside an event's args: a cut there is disproven.
      {"element-like lines nested in args",
       "{\"traceEvents\": [" + events + ",\n{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"n\", \"ts\": 1, \"args\": {\"l\": [\n{\"a\": 1},\n  {\"b\": [2]},\n{\"c\": 3}]}},\n" + events.substr(2) + "\n]}",
       true},
      {"element-like lines in metadata after the array",
       "{\"traceEvents\": [" + events + "\n], \"meta\": [1,\n {\"x\": 1},\n {\"y\": 2}]}", true},
      {"no newlines at all", compact, true},
      {"malformed in the middle",
       "{\"traceEvents\": [" + events + ",\n{\"ph\": \"X\" \"cat\": \"kernel\"},\n" + events.substr(2) + "\n]}", true},
      {"truncated in the middle of an event", "{\"traceEvents\": [" + events + ",\n{\"ph\": \"X\", \"na", true},
      {"an array that never closes", "{\"traceEvents\": [" + events + ",\n", true},
      {"a comma before the end of the array", "{\"traceEvents\": [" + events + ",\n{}\n,\n]}", true},
      {"trailing bytes after the document", "{\"traceEvents\": [" + events + "\n]}\n,\n{\"x\": 1}", true},
      {"bare array closed as an object", "[" + events + "\n]}", true},
      {"empty file", "", false},
      {"not a trace", "{\"other\": [1,\n {\"a\": 2}]}", false},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const std::string plain = (dir / "trace.json").string();
    std::ofstream(plain, std::ios::binary) << c.text;
    const std::string gz = (dir / "trace.json.gz").string();
    {
      gzFile file = gzopen(gz.c_str(), "wb");
      REQUIRE(file != nullptr);
      gzwrite(file, c.text.data(), static_cast<unsigned>(c.text.size()));
      gzclose(file);
    }
    for (const std::string& path : {plain, gz}) {
      INFO(path);
      const auto hows = check_parallel_same(path, {1, 64, 1000, size_t{1} << 20});
      CHECK(hows[4].fell_back == c.falls_back);  // 64-byte chunks, one thread
    }
  }
  // A gzip file cut short: the reader's error, at the offset the single-threaded scan names.
  const std::string big = "{\"traceEvents\": [" + events + events + "\n]}";
  const std::string gz = (dir / "cut.json.gz").string();
  {
    gzFile file = gzopen(gz.c_str(), "wb");
    gzwrite(file, big.data(), static_cast<unsigned>(big.size()));
    gzclose(file);
  }
  std::filesystem::resize_file(gz, std::filesystem::file_size(gz) - 40);
  check_parallel_same(gz, {64, 4096});
}

TEST_CASE("kineto parallel scan: simdjson's chunks read what the strict scanner reads, and what it rejects is left to the strict scanner", "[traces][kineto][scanner]") {
  const auto dir = test::temp_dir("kineto-parallel-fast");
  const std::string plain_event = R"({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 5, "dur": 2, "args": {"correlation": 3}})";
  // Each case is an event array's middle: with 64-byte chunks every line that starts with '{' after
  // a ',' starts a chunk, so each of these lines is parsed on its own by the fast path.
  enum class Expect { AllFast, SomeStrict, Error };
  struct Case {
    const char* what;
    std::vector<std::string> lines;
    Expect expect;
  };
  const std::string deep = std::string(1100, '[') + std::string(1100, ']');  // past simdjson's 1024 levels
  const std::vector<Case> cases = {
      {"numbers in every form, in every field",
       {R"({"ph": "X", "cat": "kernel", "name": "n", "pid": -0, "tid": 9223372036854775807, "ts": -0.0, "dur": 1e-400, "args": {"stream": 18446744073709551615, "device": 1.5, "correlation": -9223372036854775808, "bytes": 2E3, "context": 0}})",
        R"({"ph": "X", "cat": "kernel", "name": "m", "pid": 1.0, "tid": -1, "ts": 4495527658757.229, "dur": 2.2250738585072011e-308, "args": {"wait_on_stream": 4.9e-324, "wait_on_cuda_event_record_corr_id": 12, "wait_on_cuda_event_id": -3}})",
        R"({"ph": "X", "cat": "gpu_memcpy", "name": "c", "pid": 18446744073709551615, "ts": 1E+2, "dur": 123456789012345678, "args": {"bytes": 9223372036854775808}})"},
       Expect::AllFast},
      {"escapes in names and keys, raw UTF-8, NUL",
       {R"({"p\u0068": "X", "c\u0061t": "kernel", "name": "void f<\"q\"> \u0026 \ud83d\ude00 caf\u00e9 \/\\\b\f\n\r\t \u0000 end", "ts": 1})",
        "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"caf\xC3\xA9 \xF0\x9F\x98\x80\", \"ts\": 2}",
        R"({"ph": "X", "cat": "cuda_sync", "name": "s", "ts": 3, "args": {"cuda_sync_kind": "Event Sync", "cuda_sync_kind": 5}})"},
       Expect::AllFast},
      {"repeated keys, keys in any order, values of other types, elements that are not events",
       {R"({"ph": "X", "ph": "i", "cat": "kernel", "name": "dropped by the second ph", "ts": 1})",
        R"({"ph": "i", "ph": "X", "name": "dropped by the first ph", "ts": 1})",
        R"({"cat": "kernel", "name": "no ph at all", "ts": 1, "name": "the last name wins", "ts": 2.5})",
        R"({"ph": 5, "cat": null, "name": ["n"], "pid": "Spans", "tid": true, "ts": "1", "dur": {}, "args": [1, 2]}, 7, "text", [1, {"ph": "X"}], null, true)",
        R"({"ph": "X", "args": {"grid": [1, [2, {"stream": 99}]], "stream": 7, "x": {"y": null}, "z": false}, "cat": "kernel"}, {})"},
       Expect::AllFast},
      {"nesting past 1,024 levels: the strict scanner takes that chunk",
       {R"({"ph": "X", "cat": "kernel", "name": "deep", "args": {"grid": )" + deep + R"(, "stream": 4}})"},
       Expect::SomeStrict},
      {"integers past uint64 and int64 read as the strict scanner reads them (floats: the field stays absent)",
       {R"({"ph": "X", "cat": "kernel", "name": "big", "args": {"stream": 123456789012345678901234567890, "correlation": 5}})",
        R"({"ph": "X", "cat": "kernel", "name": "small", "pid": -9223372036854775809})"},
       Expect::AllFast},
      {"escapes and odd values inside dropped events and unread members, validated and passed over",
       {R"({"ph": "X", "cat": "cpu_op", "name": "a\"b\\", "args": {"Input Dims": [[], [1, 2]], "s": "\u00e9\t\"", "n": -1.5e-3}})",
        R"({"ph": "f", "name": "\\", "x": "\"", "y": [true, false, null, {"z": "\\\""}], "id": 0})",
        R"({"ph": "X", "cat": "kernel", "name": "trailing blanks   ", "ts": 7, "other": "a \" , \"b\": 1", "args": {"k\u0065y": "v"}})"},
       Expect::AllFast},
      {"an unescaped control character", {"{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"a\x01b\"}"}, Expect::Error},
      {"a lone surrogate", {R"({"ph": "X", "cat": "kernel", "name": "\udc00"})"}, Expect::Error},
      {"ill-formed UTF-8", {"{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"\xC0\xAF\"}"}, Expect::Error},
      {"a number beyond double's range", {R"({"ph": "X", "cat": "kernel", "ts": 1e400})"}, Expect::Error},
      {"a number with a leading zero", {R"({"ph": "X", "cat": "kernel", "ts": 01})"}, Expect::Error},
      {"a trailing comma in an event", {R"({"ph": "X", "cat": "kernel", "ts": 1,})"}, Expect::Error},
      // What simdjson's stage 1 leaves to the walk of the fast path, in read and in skipped values.
      {"an unknown escape in a skipped value", {R"({"ph": "X", "cat": "cpu_op", "name": "a\qb"})"}, Expect::Error},
      {"an unknown escape in a key", {R"({"ph": "X", "cat": "kernel", "n\ame": "a"})"}, Expect::Error},
      {"a misspelt literal", {R"({"ph": "X", "cat": "kernel", "args": {"x": tru}})"}, Expect::Error},
      {"a literal run on", {R"({"ph": "X", "cat": "kernel", "args": {"x": nullx}})"}, Expect::Error},
      {"a number without digits after '.'", {R"({"ph": "i", "x": 1.})"}, Expect::Error},
      {"a number without exponent digits", {R"({"ph": "X", "cat": "cpu_op", "x": [1e]})"}, Expect::Error},
      {"a lone minus", {R"({"ph": "X", "cat": "kernel", "ts": -})"}, Expect::Error},
      {"a plus sign", {R"({"ph": "X", "cat": "kernel", "args": {"a": +1}})"}, Expect::Error},
      {"a number run on into letters", {R"({"ph": "X", "cat": "kernel", "pid": 12ab})"}, Expect::Error},
      {"a skipped number beyond double's range", {R"({"ph": "X", "cat": "cpu_op", "args": {"x": -2e308}})"}, Expect::Error},
      {"a missing ':'", {R"({"ph": "X", "cat" "kernel"})"}, Expect::Error},
      {"a missing ',' between members of a skipped object", {R"({"ph": "s", "args": {"a": 1 "b": 2}})"}, Expect::Error},
      {"a missing ',' between elements", {R"({"ph": "X", "cat": "kernel", "args": {"a": [1 2]}})"}, Expect::Error},
      {"a bracket closed by a brace", {R"({"ph": "X", "cat": "kernel", "args": {"a": [1}})"}, Expect::Error},
      {"a key that is not a string", {R"({"ph": "X", 5: "kernel"})"}, Expect::Error},
      {"a member without a value", {R"({"ph": "X", "cat": "kernel", "args": {"a": }})"}, Expect::Error},
      {"bytes after a string", {R"({"ph": "X", "cat": "kernel", "name": "a"b})"}, Expect::Error},
      {"two values in a member", {R"({"ph": "X", "cat": "kernel", "name": "a" "b"})"}, Expect::Error},
      {"a bare word as an element", {R"({"ph": "X"}, undefined)"}, Expect::Error},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    std::string text = "{\"traceEvents\": [\n  " + plain_event;
    for (int i = 0; i < 3; ++i) {
      // A fault only in the middle repetition: only a middle chunk (the fast path's) holds it,
      // so a fast path that accepted it would give events where the single-threaded scan fails.
      if (c.expect != Expect::Error || i == 1) {
        for (const std::string& line : c.lines) text += ",\n  " + line;
      }
      text += ",\n  " + plain_event;
    }
    text += "\n], \"baseTimeNanoseconds\": 17}\n";
    const std::string path = (dir / "trace.json").string();
    std::ofstream(path, std::ios::binary) << text;
    const auto hows = check_parallel_same(path, {64});
    for (const KinetoParallelScan& how : hows) {
      INFO("threads " << how.threads << ", chunks " << how.chunks << ", of them by simdjson " << how.fast_chunks);
      const int middle = how.chunks - 2;  // the first and the last chunk are the strict scanner's
      if (c.expect != Expect::Error) REQUIRE(middle >= 3);  // short lines share a chunk
      if (!kineto_simdjson_available() || !how.fast_path) {
        CHECK(how.fast_chunks == 0);
        continue;
      }
      switch (c.expect) {
        case Expect::AllFast:
          CHECK_FALSE(how.fell_back);
          CHECK(how.fast_chunks == middle);
          break;
        case Expect::SomeStrict:
          CHECK_FALSE(how.fell_back);
          CHECK(how.fast_chunks > 0);
          CHECK(how.fast_chunks == middle - 3 * static_cast<int>(c.lines.size()));
          break;
        case Expect::Error: CHECK(how.fell_back); break;  // the error is the single-threaded scan's (checked above)
      }
    }
  }
}

// A ROCm build of PyTorch writes the same Kineto layout (kernel, gpu_memcpy, gpu_memset and
// cuda_runtime categories; libkineto RoctracerActivity_inl.h) with HIP calls in place of CUDA's:
// hipLaunchKernel, hipDeviceSynchronize, hipStreamSynchronize, and hipMemcpyWithStream for a
// blocking copy (c10/cuda/CUDAFunctions.h memcpy_and_sync), and names copies "Memcpy DtoH (Device
// -> Host)". The real a100 trace with every CUDA call renamed to its HIP twin must give the same
// ops; a trace in the ROCm layout must count its blocking copy and syncs as synchronising.
TEST_CASE("kineto ROCm: HIP calls synchronise like their CUDA twins", "[traces][kineto][rocm]") {
  const auto dir = test::temp_dir("kineto-rocm");
  const std::string real = test::shared_trace("kineto/a100-rank3-of-8-control.json.gz");
  nlohmann::json doc = nlohmann::json::parse(test::inflate_all(real));
  int renamed = 0;
  for (auto& e : doc["traceEvents"]) {
    const std::string name = e.value("name", "");
    if (e.value("cat", "") == "cuda_runtime" && name.rfind("cuda", 0) == 0) {
      e["name"] = "hip" + name.substr(4);
      ++renamed;
    }
  }
  REQUIRE(renamed == 24692 - 60);  // 60 of its cuda_runtime events are named "INVALID"
  const std::string hipified = (dir / "a100-hip.json").string();
  std::ofstream(hipified) << doc.dump();
  const EventModel cuda = import_kineto_json(real, 3);
  const EventModel hip = import_kineto_json(hipified, 3);
  REQUIRE(hip.ops.size() == cuda.ops.size());
  for (OpKind kind : {OpKind::Kernel, OpKind::Collective, OpKind::Copy, OpKind::Memset, OpKind::StreamSync,
                      OpKind::DeviceSync, OpKind::HostCompute}) {
    CHECK(count(hip, kind) == count(cuda, kind));
  }
  size_t blocking_cuda = 0, blocking_hip = 0;
  for (size_t i = 0; i < cuda.ops.size(); ++i) {
    blocking_cuda += cuda.ops[i].blocks_host;
    blocking_hip += hip.ops[i].blocks_host;
  }
  CHECK(blocking_hip == blocking_cuda);

  // ROCm layout: a kernel, a blocking DtoH copy by hipMemcpyWithStream (2 ms on the host), an async
  // HtoD copy, a memset, hipStreamSynchronize (1 ms) and hipDeviceSynchronize (3 ms).
  nlohmann::json rocm = {{"traceEvents", nlohmann::json::array()}, {"deviceProperties", nlohmann::json::array()}};
  auto& events = rocm["traceEvents"];
  const auto call = [&](const std::string& name, int64_t ts, int64_t dur, int correlation) {
    events.push_back({{"ph", "X"}, {"cat", "cuda_runtime"}, {"name", name}, {"pid", 4242}, {"tid", 4242}, {"ts", ts},
                      {"dur", dur}, {"args", {{"cid", 1}, {"correlation", correlation}}}});
  };
  const auto gpu = [&](const std::string& cat, const std::string& name, int64_t ts, int64_t dur, int correlation) {
    events.push_back({{"ph", "X"}, {"cat", cat}, {"name", name}, {"pid", 2}, {"tid", 1}, {"ts", ts}, {"dur", dur},
                      {"args", {{"device", 2}, {"stream", 1}, {"correlation", correlation}, {"bytes", 4096}}}});
  };
  call("hipLaunchKernel", 1000, 10, 1);
  gpu("kernel", "void at::native::vectorized_elementwise_kernel<4>(int)", 1020, 500, 1);
  call("hipMemcpyWithStream", 1100, 2000, 2);
  gpu("gpu_memcpy", "Memcpy DtoH (Device -> Host)", 1600, 40, 2);
  call("hipMemcpyAsync", 3200, 8, 3);
  gpu("gpu_memcpy", "Memcpy HtoD (Host -> Device)", 3210, 30, 3);
  call("hipMemsetAsync", 3300, 5, 4);
  gpu("gpu_memset", "Memset (Device)", 3310, 4, 4);
  call("hipStreamSynchronize", 3400, 1000, 5);
  call("hipDeviceSynchronize", 4500, 3000, 6);
  const std::string layout = (dir / "rocm-layout.json").string();
  std::ofstream(layout) << rocm.dump();
  const EventModel m = import_kineto_json(layout);
  CHECK(count(m, OpKind::Kernel) == 1);
  CHECK(count(m, OpKind::Copy) == 2);
  CHECK(count(m, OpKind::Memset) == 1);
  CHECK(count(m, OpKind::StreamSync) == 1);
  CHECK(count(m, OpKind::DeviceSync) == 1);
  const SynchronisingCalls sync = analyse_synchronising_calls(m);
  CHECK(sync.calls == 3);  // hipMemcpyWithStream, hipStreamSynchronize, hipDeviceSynchronize
  CHECK(sync.blocked_ns == Approx(6e6));
  for (const Op& op : m.ops) {
    INFO(op.name);
    if (op.kind == OpKind::Copy) CHECK(op.blocks_host == (op.copy == CopyKind::DeviceToHost));
  }
}
