// The time model: op estimates against a device spec, and exact schedules of hand-built EventModels.
#include "sim/cost/time_model.h"

#include <catch2/catch.hpp>

#include "sim/inputs/input_error.h"
#include "sim/cost/device_spec.h"
#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"
#include "sim/cost/step_prediction.h"

#include <algorithm>
#include <set>

using namespace hookstream;

namespace {

// Round numbers: 1 TFLOP/s and 1 GB/s HBM at full efficiency, so 1e6 FLOPs or 1000 bytes = 1000 ns.
DeviceSpec round_device() {
  DeviceSpec d;
  d.name = "round";
  d.memory_bytes = 1LL << 30;
  d.matrix_tflops = 1;
  d.vector_tflops_fp32 = 0.5;
  d.hbm_gbps = 1;
  d.host_link.pinned_h2d_gbps = 1;
  d.host_link.pinned_d2h_gbps = 1;
  d.host_link.pageable_gbps = 0.5;
  d.nvlink_gbps = 1;
  d.network_gbps = 0.1;
  return d;
}

struct Builder {
  EventModel model;
  int stream(int rank, const std::string& name, bool legacy = false) {
    Stream s;
    s.rank = rank;
    s.id = static_cast<int64_t>(model.streams.size());
    s.name = name;
    s.legacy_default = legacy;
    s.non_blocking = !legacy;
    return model.add_stream(s);
  }
  int event(const std::string& name, int rank = 0) { return model.add_event(Event{name, rank}); }
  int add(Op op) {
    model.ops.push_back(std::move(op));
    return static_cast<int>(model.ops.size()) - 1;
  }
  int kernel(int stream, double flops, const std::string& name = "gemm", int rank = 0) {
    Op op;
    op.kind = OpKind::Kernel;
    op.rank = rank;
    op.stream = stream;
    op.flops = flops;
    op.name = name;
    return add(op);
  }
  int copy(int stream, int64_t bytes, CopyKind kind, MemoryKind host = MemoryKind::PinnedHost) {
    Op op;
    op.kind = OpKind::Copy;
    op.stream = stream;
    op.bytes = bytes;
    op.copy = kind;
    op.name = kind == CopyKind::DeviceToHost ? "D2H" : "H2D";
    (kind == CopyKind::DeviceToHost ? op.destination : op.source) = host;
    (kind == CopyKind::DeviceToHost ? op.source : op.destination) = MemoryKind::Device;
    return add(op);
  }
  int sync(OpKind kind, int stream, int event, int rank = 0) {
    Op op;
    op.kind = kind;
    op.rank = rank;
    op.stream = stream;
    op.event = event;
    op.name = to_string(kind);
    return add(op);
  }
};

}  // namespace

TEST_CASE("op estimates: roofline kernels, pinned vs pageable copies, ring all-reduce", "[time]") {
  const DeviceSpec d = round_device();
  Op gemm;
  gemm.kind = OpKind::Kernel;
  gemm.flops = 3e6;
  gemm.bytes = 1000;
  CHECK(estimate_op_ns(gemm, d, 1) == Approx(3000));  // compute-bound
  gemm.bytes = 5000;
  CHECK(estimate_op_ns(gemm, d, 1) == Approx(5000));  // memory-bound
  Op copy;
  copy.kind = OpKind::Copy;
  copy.copy = CopyKind::HostToDevice;
  copy.bytes = 1000;
  copy.source = MemoryKind::PinnedHost;
  CHECK(estimate_op_ns(copy, d, 1) == Approx(1000));
  copy.source = MemoryKind::PageableHost;
  CHECK(estimate_op_ns(copy, d, 1) == Approx(2000));
  // 8 ranks on one node: 2 x 7/8 x 1e9 bytes over 450 GB/s NVLink.
  DeviceSpec h100 = d;
  h100.nvlink_gbps = 450;
  h100.network_gbps = 50;
  CHECK(ring_allreduce_ns(1000000000, 8, h100) == Approx(2.0 * 7 / 8 * 1e9 / 450e9 * 1e9));
  CHECK(ring_allreduce_ns(1000000000, 16, h100) == Approx(2.0 * 15 / 16 * 1e9 / 50e9 * 1e9));  // two nodes
  CHECK(ring_allreduce_ns(1000000000, 1, h100) == 0);
}

TEST_CASE("compute and copy streams overlap until a wait serializes them", "[time]") {
  // M: K1 (2000 ns), record E; C: wait E, D2H (1000 ns); M: K2 (2000 ns).
  auto build = [](bool compute_waits_for_copy) {
    Builder b;
    const int m = b.stream(0, "compute"), c = b.stream(0, "copy");
    const int produced = b.event("produced"), copied = b.event("copied");
    b.kernel(m, 2e6, "K1");
    b.sync(OpKind::EventRecord, m, produced);
    b.sync(OpKind::StreamWait, c, produced);
    b.copy(c, 1000, CopyKind::DeviceToHost);
    b.sync(OpKind::EventRecord, c, copied);
    if (compute_waits_for_copy) b.sync(OpKind::StreamWait, m, copied);
    b.kernel(m, 2e6, "K2");
    return b.model;
  };
  const Schedule overlapped = schedule_step(build(false), round_device());
  CHECK(overlapped.model.ops[3].start_ns == 2000);  // the copy waited for K1
  CHECK(overlapped.model.ops[5].start_ns == 2000);  // K2 did not wait for the copy
  CHECK(overlapped.step_ns == 4000);
  CHECK(overlapped.copy_hidden_fraction == 1.0);

  const Schedule serialized = schedule_step(build(true), round_device());
  CHECK(serialized.model.ops[3].start_ns == 2000);
  CHECK(serialized.model.ops[6].start_ns == 3000);  // K2 after the copy
  CHECK(serialized.step_ns == 5000);
  CHECK(serialized.copy_hidden_fraction == 0.0);
  REQUIRE(serialized.streams[0].gaps.size() == 1);  // compute idles while the copy runs
  CHECK(serialized.streams[0].gaps[0].start_ns == 2000);
  CHECK(serialized.streams[0].gaps[0].end_ns == 3000);
  CHECK(serialized.streams[0].busy_ns == 4000);
  CHECK(serialized.streams[1].idle_ns == 4000);
  CHECK(serialized.tokens_per_second(1000) == Approx(1000 / 5e-6));
}

TEST_CASE("schedule_times leaves the model as it was, schedule_from_times gives schedule_step's schedule", "[time]") {
  Builder b;
  const int m = b.stream(0, "compute"), c = b.stream(0, "copy");
  const int produced = b.event("produced");
  b.kernel(m, 2e6, "K1");
  b.sync(OpKind::EventRecord, m, produced);
  b.sync(OpKind::StreamWait, c, produced);
  b.copy(c, 1000, CopyKind::DeviceToHost, MemoryKind::PageableHost);  // blocks the host
  b.model.ops[b.sync(OpKind::StreamSync, -1, -1)].sync_stream = c;
  b.kernel(m, 2e6, "K2");
  b.model.ops[5].duration_ns = 700;  // a recorded duration wins over the estimate
  const EventModel before = b.model;
  const OpTimes times = schedule_times(b.model, round_device());
  for (size_t i = 0; i < before.ops.size(); ++i) {
    CHECK(b.model.ops[i].start_ns == before.ops[i].start_ns);
    CHECK(b.model.ops[i].duration_ns == before.ops[i].duration_ns);
  }
  const Schedule whole = schedule_step(before, round_device());
  const Schedule split = schedule_from_times(EventModel(before), times);
  REQUIRE(split.model.ops.size() == whole.model.ops.size());
  for (size_t i = 0; i < whole.model.ops.size(); ++i) {
    CHECK(split.model.ops[i].start_ns == whole.model.ops[i].start_ns);
    CHECK(split.model.ops[i].duration_ns == whole.model.ops[i].duration_ns);
  }
  CHECK(whole.model.ops[3].start_ns == 2000);  // the copy after K1
  CHECK(whole.model.ops[5].start_ns == 4000);  // K2 issued once the pageable copy (2000 ns) is done
  CHECK(whole.model.ops[5].duration_ns == 700);
  CHECK(split.step_ns == whole.step_ns);
  CHECK(split.copy_ns == whole.copy_ns);
  CHECK(split.hidden_copy_ns == whole.hidden_copy_ns);
  REQUIRE(split.streams.size() == whole.streams.size());
  for (size_t s = 0; s < whole.streams.size(); ++s) {
    CHECK(split.streams[s].busy_ns == whole.streams[s].busy_ns);
    CHECK(split.streams[s].gaps.size() == whole.streams[s].gaps.size());
  }
  // The figures alone, for callers that compare schedules: the same numbers, no copy of the ops.
  const Schedule figures = schedule_figures(before, times);
  CHECK(figures.model.ops.empty());
  CHECK(figures.step_ns == whole.step_ns);
  CHECK(figures.copy_hidden_fraction == whole.copy_hidden_fraction);
  REQUIRE(figures.streams.size() == whole.streams.size());
  for (size_t s = 0; s < whole.streams.size(); ++s) CHECK(figures.streams[s].idle_ns == whole.streams[s].idle_ns);
  // Figures worked out first, the times written into the ops after (replay: while its DAG is built).
  const Schedule later = schedule_from_times(EventModel(before), times, schedule_figures(before, times));
  REQUIRE(later.model.ops.size() == whole.model.ops.size());
  for (size_t i = 0; i < whole.model.ops.size(); ++i) {
    CHECK(later.model.ops[i].start_ns == whole.model.ops[i].start_ns);
    CHECK(later.model.ops[i].duration_ns == whole.model.ops[i].duration_ns);
  }
  CHECK(later.step_ns == whole.step_ns);
  CHECK(later.hidden_copy_ns == whole.hidden_copy_ns);
  OpTimes short_times = times;
  short_times.start_ns.pop_back();
  CHECK_THROWS_AS(schedule_from_times(EventModel(before), short_times), std::invalid_argument);
  CHECK_THROWS_AS(schedule_figures(before, short_times), std::invalid_argument);
  CHECK_THROWS_AS(schedule_from_times(EventModel(before), short_times, Schedule{}), std::invalid_argument);
}

TEST_CASE("without the wait the copy starts at once, waiting on a never-recorded event is a no-op", "[time]") {
  Builder b;
  const int m = b.stream(0, "compute"), c = b.stream(0, "copy");
  const int never = b.event("never");
  b.kernel(m, 2e6);
  b.sync(OpKind::StreamWait, c, never);
  b.copy(c, 1000, CopyKind::HostToDevice);
  const Schedule s = schedule_step(b.model, round_device());
  CHECK(s.model.ops[2].start_ns == 0);
  CHECK(s.step_ns == 2000);
}

TEST_CASE("pageable copies and host syncs block the host", "[time]") {
  Builder b;
  const int m = b.stream(0, "compute"), c = b.stream(0, "copy");
  b.copy(c, 1000, CopyKind::DeviceToHost, MemoryKind::PageableHost);  // 2000 ns, host blocked
  b.kernel(m, 1e6);                                                   // issued at 2000
  Op sync;
  sync.kind = OpKind::StreamSync;
  sync.stream = -1;
  sync.sync_stream = m;
  b.add(sync);                                                        // host waits until 3000
  b.kernel(c, 1e6);                                                   // issued at 3000
  const Schedule s = schedule_step(b.model, round_device());
  CHECK(s.model.ops[1].start_ns == 2000);
  CHECK(s.model.ops[2].duration_ns == 1000);
  CHECK(s.model.ops[3].start_ns == 3000);
  CHECK(s.step_ns == 4000);
}

TEST_CASE("the legacy default stream orders blocking streams, non-blocking ones run beside it", "[time]") {
  Builder b;
  const int legacy = b.stream(0, "default", true);
  const int side = b.stream(0, "side");
  Stream blocking;
  blocking.name = "blocking";
  blocking.id = 9;
  blocking.non_blocking = false;
  const int blocked = b.model.add_stream(blocking);
  b.kernel(legacy, 2e6);
  b.kernel(side, 1e6);
  b.kernel(blocked, 1e6);
  const Schedule s = schedule_step(b.model, round_device());
  CHECK(s.model.ops[1].start_ns == 0);
  CHECK(s.model.ops[2].start_ns == 2000);
}

TEST_CASE("an all-reduce starts when every rank reaches it", "[time]") {
  Builder b;
  const int m0 = b.stream(0, "compute"), n0 = b.stream(0, "nccl");
  const int m1 = b.stream(1, "compute"), n1 = b.stream(1, "nccl");
  const int done0 = b.event("grads ready", 0), done1 = b.event("grads ready", 1);
  for (int rank : {0, 1}) {
    b.kernel(rank == 0 ? m0 : m1, rank == 0 ? 1e6 : 3e6, "backward", rank);
    b.sync(OpKind::EventRecord, rank == 0 ? m0 : m1, rank == 0 ? done0 : done1, rank);
    b.sync(OpKind::StreamWait, rank == 0 ? n0 : n1, rank == 0 ? done0 : done1, rank);
    Op allreduce;
    allreduce.kind = OpKind::Collective;
    allreduce.rank = rank;
    allreduce.stream = rank == 0 ? n0 : n1;
    allreduce.bytes = 2000;
    allreduce.name = "allreduce bucket 0";
    b.add(allreduce);
  }
  const Schedule s = schedule_step(b.model, round_device());
  // 2 x 1/2 x 2000 bytes over 1 GB/s = 2000 ns, starting when rank 1's backward ends.
  CHECK(s.model.ops[3].start_ns == 3000);
  CHECK(s.model.ops[7].start_ns == 3000);
  CHECK(s.model.ops[3].duration_ns == 2000);
  CHECK(s.step_ns == 5000);
}

TEST_CASE("calibration entries replace estimates, first match wins", "[time]") {
  const Calibration calibration = parse_calibration(
      "{\"schema\": \"hookstream.calibration/1\", \"device\": \"round\",\n"
      " \"entries\": [\n"
      "  {\"name\": \"^D2H\", \"ns\": 500},\n"
      "  {\"kind\": \"kernel\", \"layer_kind\": \"decoder\", \"ns\": 7000},\n"
      "  {\"kind\": \"kernel\", \"ns\": 100}\n"
      " ]}",
      "cal.json");
  CHECK(calibration.device == "round");
  Builder b;
  const int m = b.stream(0, "compute"), c = b.stream(0, "copy");
  b.copy(c, 1000, CopyKind::DeviceToHost);
  const int layer_kernel = b.kernel(m, 1e6);
  b.model.ops[layer_kernel].layer = 3;
  b.kernel(m, 1e6);
  TimeModelOptions options;
  options.calibration = &calibration;
  const Schedule s = schedule_step(b.model, round_device(), options);
  CHECK(s.model.ops[0].duration_ns == 500);
  CHECK(s.model.ops[1].duration_ns == 7000);
  CHECK(s.model.ops[2].duration_ns == 100);
  CHECK(s.step_ns == 7100);

  CHECK_THROWS_WITH(parse_calibration("{\"entries\": [\n {\"ns\": 1},\n {\"nme\": \"x\", \"ns\": 2}]}", "cal.json"),
                    Catch::StartsWith("cal.json:3: entry 1: unknown key nme"));
  CHECK_THROWS_WITH(parse_calibration("{\"entries\": [\n {\"ns\": -1}]}", "cal.json"), Catch::StartsWith("cal.json:2:"));
  CHECK_THROWS_WITH(parse_calibration("{\"entries\": [\n {\"ns\": 1,}]}", "cal.json"), Catch::StartsWith("cal.json:2: malformed"));
  // Valid JSON, but a number past double (nlohmann throws out_of_range 406, not parse_error): bad
  // input with its line, not an internal error (found by fuzz/ target calibration).
  CHECK_THROWS_WITH(parse_calibration("{\"entries\": [\n {\"ns\": 1e400}]}", "cal.json"),
                    "cal.json:2: malformed JSON: number overflow parsing '1e400'");
  // A value no op has would match nothing and leave the estimate in place without a word.
  CHECK_THROWS_WITH(parse_calibration("{\"entries\": [\n {\"kind\": \"kernal\", \"ns\": 5}]}", "cal.json"),
                    "cal.json:2: entry 0: kind \"kernal\" is none of kernel, copy, memset, collective, event_record, "
                    "stream_wait, event_sync, stream_sync, device_sync, alloc, free, record_stream, host_compute, marker");
  CHECK_THROWS_WITH(parse_calibration("{\"entries\": [{\"phase\": \"fwd\", \"ns\": 5}]}", "cal.json"),
                    "cal.json:1: entry 0: phase \"fwd\" is none of forward, recompute, backward, optimizer, reduction");
  CHECK_THROWS_WITH(parse_calibration("{\"entries\": [{\"layer_kind\": \"mlp\", \"ns\": 5}]}", "cal.json"),
                    "cal.json:1: entry 0: layer_kind \"mlp\" is none of decoder, none");
  for (const char* layer : {"-1", "2.5", "2147483648", "99999999999", "\"3\""}) {
    INFO(layer);
    CHECK_THROWS_WITH(parse_calibration(std::string("{\"entries\": [{\"layer\": ") + layer + ", \"ns\": 5}]}", "cal.json"),
                      "cal.json:1: entry 0: layer must be a decoder layer index (an integer >= 0)");
  }
  CHECK(parse_calibration("{\"entries\": [{\"layer\": 2147483647, \"ns\": 5}]}", "cal.json").entries[0].layer == 2147483647);
}

TEST_CASE("every phase of a simulated step's ops is one a calibration entry may name", "[time]") {
  // calibration_phases() lists sim/streams/stream_expansion.cc's phases; a new one must be added there,
  // or calibration files could not name it.
  std::set<std::string> seen;
  for (const char* extra : {"", "gradient_checkpointing: true\nactivation_offloading: true\ntiled_mlp: true\n",
                            "gradient_checkpointing: unsloth\nadapter: lora\nlora_target_linear: true\nhookstream:\n  world_size: 4\n"}) {
    const Plan plan = parse_plan(std::string("base_model: tiny-llama\nsequence_len: 64\n") + extra, "plan.yaml");
    const StepPrediction prediction = predict_step(plan, build_model_structure(plan), find_device_spec(plan.gpu));
    for (const Op& op : prediction.schedule.model.ops) seen.insert(op.phase.str());
  }
  const std::vector<std::string>& phases = calibration_phases();
  for (const std::string& phase : seen) {
    INFO(phase);
    CHECK(std::find(phases.begin(), phases.end(), phase) != phases.end());
  }
  CHECK(seen.count("recompute") == 1);
  CHECK(seen.count("reduction") == 1);
}

TEST_CASE("wait_stream (a StreamWait without an event) orders the waiting stream after the other", "[time]") {
  Builder b;
  const int m = b.stream(0, "compute"), c = b.stream(0, "copy");
  b.kernel(m, 2e6);
  Op wait;
  wait.kind = OpKind::StreamWait;
  wait.stream = c;
  wait.sync_stream = m;
  b.add(wait);
  b.copy(c, 1000, CopyKind::DeviceToHost);
  const Schedule s = schedule_step(b.model, round_device());
  CHECK(s.model.ops[2].start_ns == 2000);
  CHECK(s.step_ns == 3000);
}

// --- engines' communication (sim/cost/engine_cost.h) -----------------------------------------------

namespace {

StepPrediction predict(const std::string& yaml) {
  const Plan plan = parse_plan(yaml, "plan.yaml");
  const ModelStructure structure = build_model_structure(plan);
  return predict_step(plan, structure, find_device_spec(plan.gpu));
}

const CommTotal* comm(const StepPrediction& p, const std::string& collective, const std::string& phase) {
  for (const CommTotal& c : p.engine.collectives) {
    if (c.collective == collective && c.phase == phase) return &c;
  }
  return nullptr;
}

std::string engine_plan(const std::string& engine, int world, const std::string& more = "") {
  return "base_model: Llama-3.1-8B\nsequence_len: 2048\n" + more + engine + "hookstream:\n  gpu: H100\n  world_size: " + std::to_string(world) + "\n";
}

const std::string kFsdp2Config = "fsdp_version: 2\nfsdp_config:\n  transformer_layer_cls_to_wrap: LlamaDecoderLayer\n";

std::string zero(int stage, const std::string& extra = "") {
  return "deepspeed:\n  zero_optimization:\n    stage: " + std::to_string(stage) + "\n" + extra;
}

}  // namespace

TEST_CASE("ring all-gather and reduce-scatter move (n-1)/n of the full size, all-reduce twice that", "[time][engine]") {
  DeviceSpec d = round_device();  // NVLink 1 GB/s: 1 byte per ns
  d.network_gbps = 0.5;
  CHECK(ring_allgather_ns(8000, 8, d) == Approx(7000));
  CHECK(ring_reduce_scatter_ns(8000, 8, d) == Approx(7000));
  CHECK(ring_allreduce_ns(8000, 8, d) == Approx(14000));
  // Beyond a node the ring runs at the network's bandwidth.
  CHECK(ring_allgather_ns(16000, 16, d) == Approx(15000 / 0.5));
  CHECK(ring_allgather_ns(8000, 1, d) == 0);
}

TEST_CASE("FSDP2 all-gathers every unit forward and re-gathers resharded layers in backward", "[time][engine][fsdp2]") {
  const StepPrediction resharded = predict(engine_plan(kFsdp2Config, 8));
  REQUIRE(comm(resharded, "all_gather", "forward") != nullptr);
  CHECK(comm(resharded, "all_gather", "forward")->count == 33);   // 32 layers + the root
  REQUIRE(comm(resharded, "all_gather", "backward") != nullptr);
  CHECK(comm(resharded, "all_gather", "backward")->count == 32);  // the root stays unsharded
  REQUIRE(comm(resharded, "reduce_scatter", "backward") != nullptr);
  CHECK(comm(resharded, "reduce_scatter", "backward")->count == 33);
  // Forward all-gathers move the whole model in bf16 once.
  const ModelStructure structure = build_model_structure(parse_plan(engine_plan(kFsdp2Config, 8), "plan.yaml"));
  int64_t elements = 0;
  for (const Parameter& p : structure.parameters) elements += p.numel();
  CHECK(comm(resharded, "all_gather", "forward")->bytes == 2 * elements);
  // reshard_after_forward: false trades memory for the backward all-gathers.
  const StepPrediction kept = predict(engine_plan(kFsdp2Config + "  reshard_after_forward: false\n", 8));
  CHECK(comm(kept, "all_gather", "backward") == nullptr);
  CHECK(kept.engine.comm_ns < resharded.engine.comm_ns);
  CHECK(kept.memory.device_peak.total() > resharded.memory.device_peak.total());
  CHECK(kept.schedule.step_ns <= resharded.schedule.step_ns);
  // The sharded optimizer steps on 1/8 of the parameters.
  CHECK(resharded.engine.optimizer_saved_ns > 0);
  // Across nodes (64 ranks on 50 GB/s InfiniBand) the same transfers take longer and show.
  const StepPrediction wide = predict(engine_plan(kFsdp2Config, 64));
  CHECK(wide.engine.comm_ns > 5 * resharded.engine.comm_ns);
  CHECK(wide.engine.exposed_ns > resharded.engine.exposed_ns);
}

TEST_CASE("ZeRO-2 reduces every micro-step, ZeRO-1 at the boundary, overlap_comm hides reductions", "[time][engine][zero]") {
  const std::string accumulate = "gradient_accumulation_steps: 2\n";
  const StepPrediction two = predict(engine_plan(zero(2), 8, accumulate));
  const StepPrediction one = predict(engine_plan(zero(1), 8, accumulate));
  REQUIRE(comm(two, "reduce_scatter", "backward") != nullptr);
  REQUIRE(comm(one, "reduce_scatter", "backward") != nullptr);
  CHECK(comm(two, "reduce_scatter", "backward")->bytes == 2 * comm(one, "reduce_scatter", "backward")->bytes);
  // The updated 16-bit partitions are all-gathered after the step; no all-gathers in forward.
  REQUIRE(comm(two, "all_gather", "optimizer") != nullptr);
  CHECK(comm(two, "all_gather", "forward") == nullptr);
  // Buckets of reduce_bucket_size elements: 16 GB of bf16 grads in 1 GB buckets per micro-step.
  CHECK(comm(two, "reduce_scatter", "backward")->count == 2 * 17);
  // overlap_comm runs the reductions beside backward instead of on the compute stream.
  const StepPrediction overlapped = predict(engine_plan(zero(2, "    overlap_comm: true\n"), 8, accumulate));
  CHECK(overlapped.engine.exposed_ns < two.engine.exposed_ns);
  CHECK(overlapped.engine.comm_ns == Approx(two.engine.comm_ns));
  // ZeRO-Offload: gradients to the host, the CPU step, the 16-bit parameters back.
  const StepPrediction offload = predict(engine_plan(zero(2, "    offload_optimizer:\n      device: cpu\n"), 8));
  REQUIRE(comm(offload, "cpu_optimizer_step", "optimizer") != nullptr);
  REQUIRE(comm(offload, "D2H", "optimizer") != nullptr);
  REQUIRE(comm(offload, "H2D", "optimizer") != nullptr);
  CHECK(offload.schedule.step_ns > predict(engine_plan(zero(2), 8)).schedule.step_ns);
}

TEST_CASE("ZeRO-3 gathers in forward and backward, offload_param adds host copies, no prefetch exposes them", "[time][engine][zero]") {
  const StepPrediction three = predict(engine_plan(zero(3), 8));
  REQUIRE(comm(three, "all_gather", "forward") != nullptr);
  REQUIRE(comm(three, "all_gather", "backward") != nullptr);
  CHECK(comm(three, "all_gather", "optimizer") == nullptr);
  const StepPrediction no_prefetch = predict(engine_plan(zero(3, "    stage3_prefetch_bucket_size: 0\n"), 8));
  CHECK(no_prefetch.engine.exposed_ns > three.engine.exposed_ns);
  const StepPrediction offload = predict(engine_plan(zero(3, "    offload_param:\n      device: cpu\n"), 8));
  REQUIRE(comm(offload, "H2D", "forward") != nullptr);
  // Reentrant checkpointing re-gathers each layer for its recompute; with stage3_max_reuse_distance 0
  // the backward then gathers it once more (released after the recompute's forward), with the
  // default 1e9 the backward finds the recomputed layer still gathered.
  const std::string no_reuse = "    stage3_prefetch_bucket_size: 0\n    stage3_max_reuse_distance: 0\n";
  const std::string checkpointed = "gradient_checkpointing: true\n";
  const StepPrediction plain = predict(engine_plan(zero(3, no_reuse), 8));
  const StepPrediction recompute = predict(engine_plan(zero(3, no_reuse), 8, checkpointed));
  const StepPrediction reused = predict(engine_plan(zero(3, "    stage3_prefetch_bucket_size: 0\n"), 8, checkpointed));
  REQUIRE(comm(plain, "all_gather", "backward") != nullptr);
  REQUIRE(comm(recompute, "all_gather", "backward") != nullptr);
  REQUIRE(comm(reused, "all_gather", "backward") != nullptr);
  CHECK(comm(recompute, "all_gather", "forward")->bytes == comm(plain, "all_gather", "forward")->bytes);
  const ModelStructure llama = build_model_structure(parse_plan(engine_plan(zero(3, no_reuse), 8), "plan.yaml"));
  int64_t layer_elements = 0;
  for (const Parameter& p : llama.parameters) {
    if (p.layer >= 0 && p.numel() > 100000) layer_elements += p.numel();  // above the persistence threshold
  }
  CHECK(comm(recompute, "all_gather", "backward")->bytes == comm(plain, "all_gather", "backward")->bytes + 2 * layer_elements);
  CHECK(comm(reused, "all_gather", "backward")->bytes <= comm(plain, "all_gather", "backward")->bytes);
  CHECK(recompute.engine.comm_ns > plain.engine.comm_ns);
  // DDP plans are not costed here: their all-reduces are ops of the step.
  CHECK(predict(engine_plan("", 8)).engine.collectives.empty());
}
