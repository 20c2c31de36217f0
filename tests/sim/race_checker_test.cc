// The happens-before race checker: sanitizer semantics on hand-built models, the built-in protocols,
// mutation testing of the correct ones, the dependency graph, and throughput.
#include <catch2/catch.hpp>

#include <cstdio>

#include "sim/streams/dependency_graph.h"
#include "sim/streams/race_checker.h"
#include "sim/streams/stream_expansion.h"
#include "sim/streams/sync_mutation.h"
#include "tests/sim/stream_test_plans.h"

using namespace hookstream;

namespace {

// A one-rank, one-device model with streams A (compute), B (copy) and one 100-byte buffer.
struct Builder {
  EventModel model;
  int a, b, buffer, event;
  explicit Builder(bool with_default = false) {
    a = model.add_stream(Stream{0, 0, 1, "A", false, true, 0});
    b = model.add_stream(Stream{0, 0, 2, "B", false, true, 0});
    if (with_default) model.add_stream(Stream{0, 0, 0, "default", true, false, 0});
    buffer = model.add_buffer(Buffer{"buf", MemoryKind::Device, 0, 0, 100});
    event = model.add_event(Event{"E", 0});
  }
  int op(OpKind kind, int stream, const std::string& name, std::vector<BufferAccess> accesses = {}) {
    Op o;
    o.kind = kind;
    o.stream = stream;
    o.name = name;
    o.accesses = std::move(accesses);
    if (kind == OpKind::EventRecord || kind == OpKind::StreamWait || kind == OpKind::EventSync) o.event = event;
    model.ops.push_back(o);
    return static_cast<int>(model.ops.size()) - 1;
  }
  int write(int stream, const std::string& name, int64_t offset = 0, int64_t bytes = -1) {
    return op(OpKind::Kernel, stream, name, {{buffer, offset, bytes, true}});
  }
  int read(int stream, const std::string& name, int64_t offset = 0, int64_t bytes = -1) {
    return op(OpKind::Kernel, stream, name, {{buffer, offset, bytes, false}});
  }
};

}  // namespace

TEST_CASE("a host sync whose stream or event is unresolved orders nothing and does not crash", "[streams]") {
  // Imported traces (a Kineto file without sync records) can carry such syncs.
  Builder m;
  m.write(m.a, "producer");
  Op sync;
  sync.kind = OpKind::StreamSync;
  sync.stream = m.a;
  sync.sync_stream = -1;
  sync.name = "cudaStreamSynchronize (stream unknown)";
  m.model.ops.push_back(sync);
  Op event_sync = sync;
  event_sync.kind = OpKind::EventSync;
  event_sync.event = -1;
  m.model.ops.push_back(event_sync);
  m.read(m.b, "consumer");
  CHECK(check_races(m.model).races.size() == 1);
}

TEST_CASE("unordered accesses on two streams race, record + wait orders them", "[streams]") {
  Builder m;
  const int w = m.write(m.a, "producer");
  const int r = m.read(m.b, "consumer");
  RaceReport report = check_races(m.model);
  REQUIRE(report.races.size() == 1);
  CHECK(report.races[0].earlier_op == w);
  CHECK(report.races[0].later_op == r);
  CHECK(report.races[0].kind() == "read after write");
  CHECK(report.races[0].fix.text == "record an event after `producer` on stream A; wait on it in stream B before `consumer`");
  CHECK(report.races[0].fix.verified);

  Builder ordered;
  ordered.write(ordered.a, "producer");
  ordered.op(OpKind::EventRecord, ordered.a, "record");
  ordered.op(OpKind::StreamWait, ordered.b, "wait");
  ordered.read(ordered.b, "consumer");
  CHECK(check_races(ordered.model).ok());
}

TEST_CASE("a wait on a never-recorded event is a no-op", "[streams]") {
  Builder m;
  m.op(OpKind::StreamWait, m.b, "wait too early");
  m.write(m.a, "producer");
  m.op(OpKind::EventRecord, m.a, "record");
  m.read(m.b, "consumer");
  CHECK(check_races(m.model).race_count == 1);
}

TEST_CASE("wait_stream merges the other stream's clock at the time of the wait", "[streams]") {
  Builder m;
  m.write(m.a, "first");
  Op wait;
  wait.kind = OpKind::StreamWait;
  wait.stream = m.b;
  wait.sync_stream = m.a;
  m.model.ops.push_back(wait);
  m.read(m.b, "reads first");
  m.write(m.a, "second");  // after the wait: unordered with the read
  const RaceReport report = check_races(m.model);
  REQUIRE(report.race_count == 1);
  CHECK(report.races[0].kind() == "write after read");
  CHECK(m.model.ops[report.races[0].later_op].name == "second");
}

TEST_CASE("host synchronization orders later issues, blocking copies order the host", "[streams]") {
  Builder sync;
  sync.write(sync.a, "producer");
  Op s;
  s.kind = OpKind::StreamSync;
  s.sync_stream = sync.a;
  sync.model.ops.push_back(s);
  sync.read(sync.b, "consumer");
  CHECK(check_races(sync.model).ok());

  Builder blocking;
  const int copy = blocking.write(blocking.a, "pageable copy");
  blocking.model.ops[copy].kind = OpKind::Copy;
  blocking.model.ops[copy].blocks_host = true;
  blocking.read(blocking.b, "consumer");
  CHECK(check_races(blocking.model).ok());
  blocking.model.ops[copy].blocks_host = false;
  CHECK(check_races(blocking.model).race_count == 1);
}

TEST_CASE("the legacy default stream orders blocking streams only", "[streams]") {
  Builder m(true);
  const int legacy = 2;
  m.write(m.a, "on a non-blocking stream");
  m.read(legacy, "on the default stream");
  CHECK(check_races(m.model).race_count == 1);  // PyTorch's streams are non-blocking
  m.model.streams[m.a].non_blocking = false;
  CHECK(check_races(m.model).ok());
}

TEST_CASE("byte ranges: disjoint ranges never race, overlaps report the overlap", "[streams]") {
  Builder m;
  m.write(m.a, "low half", 0, 50);
  m.write(m.b, "high half", 50, 50);
  CHECK(check_races(m.model).ok());
  m.read(m.b, "middle", 40, 20);
  const RaceReport report = check_races(m.model);
  REQUIRE(report.race_count == 1);
  CHECK(report.races[0].offset == 40);
  CHECK(report.races[0].bytes == 10);
}

TEST_CASE("allocator reuse: a free needs record_stream for side-stream users", "[streams]") {
  Builder m;
  m.read(m.b, "side-stream reader");
  const int free = m.op(OpKind::Free, m.a, "free", {{m.buffer, 0, -1, true}});
  const RaceReport report = check_races(m.model);
  REQUIRE(report.race_count == 1);
  CHECK(report.races[0].later_op == free);
  CHECK(report.races[0].fix.kind == SyncSuggestion::Kind::RecordStream);
  CHECK(report.races[0].fix.text.rfind("call buf.record_stream(B) before `free`", 0) == 0);
  CHECK(report.races[0].fix.verified);
  const EventModel fixed = with_sync(m.model, report.races[0].fix);
  CHECK(check_races(fixed).ok());
}

TEST_CASE("same_happens_before tells redundant syncs from needed ones", "[streams]") {
  Builder m;
  m.write(m.a, "producer");
  m.op(OpKind::EventRecord, m.a, "record");
  m.op(OpKind::StreamWait, m.b, "wait");
  m.read(m.b, "consumer");
  Builder twice = m;
  twice.op(OpKind::StreamWait, twice.b, "wait again");
  twice.read(twice.b, "consumer 2");
  Builder once = m;
  once.read(once.b, "consumer 2");
  CHECK(same_happens_before(twice.model, once.model));
  Builder none;
  none.write(none.a, "producer");
  none.read(none.b, "consumer");
  CHECK_FALSE(same_happens_before(m.model, none.model));
}

// ------------------------------------------------------------------------------------------------
// The built-in protocols on a real plan.
// ------------------------------------------------------------------------------------------------

namespace {
EventModel expand(const StreamProtocol& protocol, int devices = 1) {
  static const Plan plan = testing::offload_plan();
  static const ModelStructure structure = build_model_structure(plan);
  ExpansionOptions options;
  options.devices_per_process = devices;
  return expand_step(plan, structure, protocol, options);
}
const std::vector<std::string> kCorrect = {"none", "single_buffer", "double_buffer_events", "pageable",
                                           "save_on_cpu", "deepspeed_offload", "global_counter_buffers"};
}  // namespace

TEST_CASE("correct protocols report no race", "[streams]") {
  for (const std::string& name : kCorrect) {
    INFO(name);
    const EventModel model = expand(load_stream_protocol(name));
    const RaceReport report = check_races(model);
    for (const Race& race : report.races) UNSCOPED_INFO(describe_race(model, race));
    CHECK(report.ok());
  }
  // Two devices per process: every per-device protocol is still correct.
  CHECK(check_races(expand(load_stream_protocol("double_buffer_events"), 2)).ok());
}

TEST_CASE("double_buffer_no_events: copy overwrites reload[i mod 2] while layer i+2 reads it", "[streams]") {
  const EventModel model = expand(load_stream_protocol("double_buffer_no_events"));
  const RaceReport report = check_races(model);
  REQUIRE_FALSE(report.ok());
  const Race& race = report.races[0];
  const Op& earlier = model.ops[race.earlier_op];
  const Op& later = model.ops[race.later_op];
  CHECK(model.buffers[race.buffer].name.rfind("reload[", 0) == 0);
  CHECK(race.kind() == "write after read");
  CHECK(model.streams[earlier.stream].name == "compute");
  CHECK(earlier.phase == "backward");  // the last reader of the buffer
  CHECK(model.streams[later.stream].name == "copy");
  CHECK(later.kind == OpKind::Copy);
  CHECK(earlier.layer == later.layer + 2);
  CHECK(race.fix.verified);
  CHECK(describe_race(model, race).find("verified") != std::string::npos);
}

TEST_CASE("events_on_default_stream: the copy reads the layer input unordered with compute", "[streams]") {
  const EventModel model = expand(load_stream_protocol("events_on_default_stream"));
  const RaceReport report = check_races(model);
  REQUIRE_FALSE(report.ok());
  const Race& race = report.races[0];
  CHECK(model.buffers[race.buffer].name.rfind("hidden[", 0) == 0);
  CHECK(race.kind() == "read after write");
  CHECK(model.streams[model.ops[race.earlier_op].stream].name == "compute");
  CHECK(model.ops[race.later_op].kind == OpKind::Copy);
  CHECK(race.fix.verified);
}

TEST_CASE("global_counter_buffers races only when one process drives two devices", "[streams]") {
  CHECK(check_races(expand(load_stream_protocol("global_counter_buffers"), 1)).ok());
  const EventModel model = expand(load_stream_protocol("global_counter_buffers"), 2);
  const RaceReport report = check_races(model);
  REQUIRE_FALSE(report.ok());
  const Race& race = report.races[0];
  CHECK(model.buffers[race.buffer].name == "reload[0]");
  CHECK(model.buffers[race.buffer].device == 0);
  CHECK(model.ops[race.earlier_op].layer == model.ops[race.later_op].layer + 1);
  CHECK(race.kind() == "write after read");
}

TEST_CASE("mutation testing: removing any sync from a correct protocol races or is proven redundant", "[streams]") {
  const Plan plan = testing::offload_plan();
  const ModelStructure structure = build_model_structure(plan);
  int needed = 0, redundant = 0;
  for (const std::string& name : kCorrect) {
    for (const SyncStepVerdict& v : mutate_sync_steps(load_stream_protocol(name), plan, structure)) {
      INFO(name << ": without " << v.phase << " " << v.step.describe() << " (line " << v.step.line << "): " << v.verdict());
      CHECK(v.verdict() != "unused");
      // A redundant step is proven so by identical clocks, and then nothing may race.
      if (v.redundant) CHECK(v.races == 0);
      if (v.races > 0) CHECK_FALSE(v.evidence.empty());
      needed += v.races > 0;
      redundant += v.redundant;
    }
  }
  CHECK(needed >= 15);
  CHECK(redundant >= 1);  // pageable's forward wait (see below)
}

TEST_CASE("mutation testing finds the redundant wait in the pageable protocol", "[streams]") {
  // The D2H into pageable memory blocks the host, so everything compute issues later is ordered after
  // it already: "compute waits for copy" in the forward adds no happens-before relation.
  const StreamProtocol protocol = load_stream_protocol("pageable");
  StreamProtocol mutant = protocol;
  mutant.forward.erase(mutant.forward.begin() + 3);
  REQUIRE(protocol.forward[3].kind == StepKind::WaitStream);
  CHECK(same_happens_before(expand(protocol), expand(mutant)));
  // The same step in the pinned single-buffer protocol is needed.
  const StreamProtocol pinned = load_stream_protocol("single_buffer");
  StreamProtocol pinned_mutant = pinned;
  pinned_mutant.forward.erase(pinned_mutant.forward.begin() + 3);
  CHECK_FALSE(same_happens_before(expand(pinned), expand(pinned_mutant)));
  CHECK_FALSE(check_races(expand(pinned_mutant)).ok());
}

TEST_CASE("dependency graph: critical path of a two-stream overlap", "[streams]") {
  Builder m;
  const int p = m.write(m.a, "produce");           // 10
  m.op(OpKind::EventRecord, m.a, "record");
  const int other = m.op(OpKind::Kernel, m.a, "long compute");  // 50, overlaps the copy
  m.op(OpKind::StreamWait, m.b, "wait");
  const int copy = m.read(m.b, "copy");            // 30
  const DependencyGraph dag = build_dependency_graph(m.model);
  CHECK(boost::num_vertices(dag.graph) == 3);
  std::vector<double> durations(m.model.ops.size(), 0);
  durations[p] = 10;
  durations[other] = 50;
  durations[copy] = 30;
  CriticalPath path = critical_path(dag, durations);
  CHECK(path.length == 60);
  CHECK(path.ops == std::vector<int>{p, other});
  durations[copy] = 80;
  path = critical_path(dag, durations);
  CHECK(path.length == 90);
  CHECK(path.ops == std::vector<int>{p, copy});
}

// Throughput (>= 5 million ops/s) is measured by bench/streams_bench.cc, not asserted in a test.

TEST_CASE("dependency graph of an expanded step: slow copies put the reloads on the critical path", "[streams]") {
  const EventModel model = expand(load_stream_protocol("single_buffer"));
  const DependencyGraph dag = build_dependency_graph(model);
  std::vector<double> durations(model.ops.size(), 0);
  int work = 0;
  for (size_t i = 0; i < model.ops.size(); ++i) {
    if (dag.vertex_of_op[i] < 0) continue;
    ++work;
    durations[i] = model.ops[i].kind == OpKind::Copy ? 100 : 1;
  }
  CHECK(static_cast<int>(boost::num_vertices(dag.graph)) == work);
  const CriticalPath path = critical_path(dag, durations);
  int copies = 0;
  for (int op : path.ops) copies += model.ops[op].kind == OpKind::Copy;
  // single_buffer serializes every copy with compute: all 2 * layers copies are on the path.
  CHECK(copies == 2 * 4);
  CHECK(path.length >= 800);
  // Ops on the path are in happens-before order, so in issue order.
  CHECK(std::is_sorted(path.ops.begin(), path.ops.end()));
}

namespace {

// Two ranks, each with a compute and an nccl stream; rank 0 owns `shared`, a buffer that rank 1
// reads after the collective (as a ring all-reduce reads a peer's bucket, or a peer-to-peer copy).
struct TwoRanks {
  EventModel model;
  int compute[2], nccl[2], shared, ready[2];
  TwoRanks() {
    for (int r = 0; r < 2; ++r) {
      compute[r] = model.add_stream(Stream{r, 0, 1, "compute", false, true, 0});
      nccl[r] = model.add_stream(Stream{r, 0, 2, "nccl", false, true, 0});
      ready[r] = model.add_event(Event{"ready", r});
    }
    shared = model.add_buffer(Buffer{"shared", MemoryKind::Device, 0, 0, 64});
  }
  int op(int rank, OpKind kind, int stream, const std::string& name, std::vector<BufferAccess> accesses = {}, int event = -1) {
    Op o;
    o.rank = rank;
    o.kind = kind;
    o.stream = stream;
    o.name = name;
    o.event = event;
    o.accesses = std::move(accesses);
    model.ops.push_back(o);
    return static_cast<int>(model.ops.size()) - 1;
  }
  // Rank r's compute writes (rank 0: `shared`), then its nccl stream waits for compute and runs
  // the all-reduce, as ProcessGroupNCCL does.
  void before_collective(int r) {
    if (r == 0) op(0, OpKind::Kernel, compute[0], "write shared", {{shared, 0, -1, true}});
    op(r, OpKind::EventRecord, compute[r], "record ready", {}, ready[r]);
    op(r, OpKind::StreamWait, nccl[r], "nccl waits ready", {}, ready[r]);
    op(r, OpKind::Collective, nccl[r], "allreduce");
  }
};

}  // namespace

TEST_CASE("collectives order ranks: after the all-reduce a rank sees every rank's earlier work", "[streams]") {
  TwoRanks m;
  m.before_collective(0);
  m.before_collective(1);
  const int read = m.op(1, OpKind::Copy, m.nccl[1], "rank 1 reads rank 0's shared", {{m.shared, 0, -1, false}});
  CHECK(check_races(m.model).ok());
  // Without the collective's cross-rank ordering the read races with rank 0's write: the rule is
  // what makes this pair ordered.
  RaceCheckOptions per_rank;
  per_rank.collectives_order_ranks = false;
  const RaceReport without = check_races(m.model, per_rank);
  REQUIRE(without.race_count == 1);
  CHECK(without.races[0].later_op == read);
  CHECK(without.races[0].fix.kind == SyncSuggestion::Kind::CrossRank);
  CHECK_FALSE(without.races[0].fix.checked);
}

TEST_CASE("collectives order only what is after them on the collective's stream", "[streams]") {
  // Rank 1 reads on its compute stream, which never waited for its nccl stream: a race.
  TwoRanks compute;
  compute.before_collective(0);
  compute.before_collective(1);
  compute.op(1, OpKind::Kernel, compute.compute[1], "rank 1 compute reads shared", {{compute.shared, 0, -1, false}});
  CHECK(check_races(compute.model).race_count == 1);
  // Rank 1 reads on its nccl stream before the collective: a race too.
  TwoRanks early;
  early.before_collective(0);
  early.op(1, OpKind::Copy, early.nccl[1], "rank 1 reads shared early", {{early.shared, 0, -1, false}});
  early.before_collective(1);
  CHECK(check_races(early.model).race_count == 1);
  // Waiting for the nccl stream (work.wait()) after the collective orders the compute read.
  TwoRanks waited;
  waited.before_collective(0);
  waited.before_collective(1);
  Op wait;
  wait.rank = 1;
  wait.kind = OpKind::StreamWait;
  wait.stream = waited.compute[1];
  wait.sync_stream = waited.nccl[1];
  wait.name = "compute waits nccl";
  waited.model.ops.push_back(wait);
  waited.op(1, OpKind::Kernel, waited.compute[1], "rank 1 compute reads shared", {{waited.shared, 0, -1, false}});
  CHECK(check_races(waited.model).ok());
}

TEST_CASE("an all-ranks step: all-reduces read every rank's bucket, ordered by the collective", "[streams]") {
  const Plan plan = hookstream::testing::offload_plan();
  ExpansionOptions options;
  options.all_ranks = true;
  const EventModel model = expand_step(plan, build_model_structure(plan), load_stream_protocol("double_buffer_events"), options);
  int peer_reads = 0;
  for (const Op& op : model.ops) {
    if (op.kind != OpKind::Collective) continue;
    for (const BufferAccess& access : op.accesses) peer_reads += model.buffers[access.buffer].rank != op.rank;
  }
  CHECK(peer_reads > 0);
  CHECK(check_races(model).ok());
  RaceCheckOptions per_rank;
  per_rank.collectives_order_ranks = false;
  CHECK(check_races(model, per_rank).race_count > 0);
  // The dependency graph follows the same clocks, but the two ranks' halves of one call run
  // together: no edge between them.
  const DependencyGraph dag = build_dependency_graph(model);
  std::vector<int> halves;
  for (size_t i = 0; i < model.ops.size(); ++i) {
    if (model.ops[i].name == "allreduce bucket 0") halves.push_back(dag.vertex_of_op[i]);
  }
  REQUIRE(halves.size() == 2);
  CHECK_FALSE(boost::edge(halves[0], halves[1], dag.graph).second);
  CHECK_FALSE(boost::edge(halves[1], halves[0], dag.graph).second);
}
