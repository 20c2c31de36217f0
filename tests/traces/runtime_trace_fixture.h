// Test fixture generator: the Chrome trace `hookstream run --trace` records for a plan's step, built
// from the simulator's expansion of that step (sim/streams/stream_expansion.h) the way the runtime emits it:
// - GPU (LibTorch's Kineto profiler): {"baseTimeNanoseconds", "traceEvents"}; every protocol step in
//   a user_annotation range named as in traces/runtime_annotations.h, each decoder layer in
//   hookstream:{phase}:L{layer}:layer, the optimizer in hookstream:optimizer, each step in
//   hookstream:step:N; every simulated work op launched as 1-3 kernels (cuda_runtime call + kernel
//   linked by correlation) on the protocol stream's CUDA stream, with pseudo-random durations around
//   the simulator's prediction; DDP's record/wait pairs as cudaEventRecord / cudaStreamWaitEvent
//   calls with cuda_sync records; a cudaStreamSynchronize ends each step. Sync steps of the
//   protocol carry no cuda_sync record (Kineto reports a record only for waits), so replay must
//   take them from the annotations. GPU start times follow the stream order and the waits.
// - CPU (LibTorch 1.13's legacy profiler): a bare JSON array of "X" events without "cat", pid
//   "CPU Functions": the same annotation ranges, timed by the work they wrap, plus aten ops.
// The ground truth (per step: GPU ops and time per op group, the step's span) is what the generator
// wrote, so tests derive their expectations from the fixture, not from replay's own code.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "sim/events/event_model.h"

namespace hookstream::test {

struct RuntimeTraceOptions {
  int steps = 2;
  bool legacy_cpu = false;
  uint32_t seed = 7;
  // The kernels (name, ns) a work op launches instead of 1-3 random ones around its prediction,
  // where this gives any: e.g. real kernel names per cost part, for the calibration by part.
  std::function<std::vector<std::pair<std::string, double>>(const Op&)> kernels;
};

struct RuntimeTraceTruth {
  std::map<std::string, std::pair<int, double>> groups;  // op group label -> (ops, ns)
  double start_ns = 0, end_ns = 0;                       // first recorded op .. last completion
};

struct RuntimeTrace {
  std::string json;
  std::vector<RuntimeTraceTruth> steps;
};

namespace detail {

inline std::string phase_of(const Op& op) { return op.phase == "forward" ? "forward" : "backward"; }

inline std::string buffer_list(const EventModel& m, const Op& op, bool write) {
  std::string text;
  for (const BufferAccess& a : op.accesses) {
    if (a.write != write) continue;
    text += (text.empty() ? "" : ",") + m.buffers[a.buffer].name;
  }
  return text;
}

// The annotation the runtime wraps a protocol step in (docs/stream-protocols.md, "Runtime annotations").
inline std::string protocol_annotation(const EventModel& m, const Op& op, const std::string& kind, const std::string& what) {
  std::string name = "hookstream:" + phase_of(op) + ":L" + std::to_string(op.layer) + ":" + kind + ":" + m.streams[op.stream].name;
  const std::string reads = buffer_list(m, op, false), writes = buffer_list(m, op, true);
  if (kind == "free") {
    name += ":w=" + writes;
  } else if (kind == "record_stream") {
    name += ":r=" + reads;
  } else {
    if (!reads.empty()) name += ":r=" + reads;
    if (!writes.empty()) name += ":w=" + writes;
  }
  if (op.event >= 0) name += ":e=" + m.events[op.event].name;
  if (kind == "wait_stream") name += ":s=" + m.streams[op.sync_stream].name;
  if (!what.empty()) name += ":what=" + what;
  return name;
}

}  // namespace detail

// `simulated`: expand_step's rank-0 ops with predicted durations (schedule_step(...).model).
inline RuntimeTrace make_runtime_trace(const EventModel& simulated, const RuntimeTraceOptions& options = {}) {
  using nlohmann::json;
  RuntimeTrace trace;
  json events = json::array();
  std::mt19937 random(options.seed);
  const auto pick = [&](uint32_t n) { return static_cast<uint32_t>(random() % n); };
  const int64_t pid = 4242, tid = 4242;
  std::vector<int64_t> stream_id(simulated.streams.size());
  for (size_t s = 0; s < stream_id.size(); ++s) stream_id[s] = 7 + 13 * static_cast<int64_t>(s);
  int compute = 0;
  for (const Op& op : simulated.ops) if (op.kind == OpKind::Kernel && op.rank == 0) { compute = op.stream; break; }

  double host = 1000000;  // ns
  std::vector<double> stream_ready(simulated.streams.size(), 0);
  std::map<int, double> event_done;
  std::map<int, int64_t> record_corr;  // event -> correlation of its latest cudaEventRecord
  int64_t correlation = 100;
  const auto us = [](double ns) { return ns / 1000.0; };
  const auto range = [&](const std::string& name, double start, double end) {
    if (options.legacy_cpu) {
      events.push_back({{"name", name}, {"ph", "X"}, {"ts", us(start)}, {"dur", us(end - start)}, {"tid", 1},
                        {"pid", "CPU Functions"}, {"args", json::object()}});
    } else {
      events.push_back({{"ph", "X"}, {"cat", "user_annotation"}, {"name", name}, {"pid", pid}, {"tid", tid},
                        {"ts", us(start)}, {"dur", us(end - start)}, {"args", {{"External id", correlation}}}});
    }
  };
  const auto call = [&](const std::string& name, double duration) {
    const int64_t c = correlation++;
    if (!options.legacy_cpu) {
      events.push_back({{"ph", "X"}, {"cat", "cuda_runtime"}, {"name", name}, {"pid", pid}, {"tid", tid}, {"ts", us(host)},
                        {"dur", us(duration)}, {"args", {{"correlation", c}, {"external id", c}}}});
    }
    return c;
  };

  for (int n = 0; n < options.steps; ++n) {
    RuntimeTraceTruth truth;
    truth.start_ns = 1e300;
    truth.end_ns = 0;
    const double step_start = host;
    host += 2000;
    int position = 0, collectives = 0;
    int open_layer = -1;
    std::string open_phase;
    double layer_start = 0;
    const auto close_layer = [&] {
      if (open_layer < 0) return;
      range("hookstream:" + open_phase + ":L" + std::to_string(open_layer) + ":layer", layer_start, host);
      host += 1000;
      open_layer = -1;
    };
    // One simulated work op: 1-3 kernels (GPU) or its time on the host (CPU).
    const auto work = [&](const Op& op, const std::string& label) {
      const double predicted = std::max(20000.0, op.duration_ns);
      double total = predicted * (0.7 + pick(800) / 1000.0);
      int parts = op.kind == OpKind::Kernel ? 1 + static_cast<int>(pick(3)) : 1;
      std::vector<double> weights;
      double weight_sum = 0;
      for (int p = 0; p < parts; ++p) weights.push_back(1 + pick(4)), weight_sum += weights.back();
      std::vector<std::pair<std::string, double>> given;
      if (options.kernels && op.kind == OpKind::Kernel) given = options.kernels(op);
      if (!given.empty()) {
        parts = static_cast<int>(given.size());
        total = weight_sum = 0;
        weights.clear();
        for (const auto& kernel : given) weights.push_back(kernel.second), total += kernel.second, weight_sum += kernel.second;
      }
      auto& group = truth.groups[label];
      if (options.legacy_cpu) {
        events.push_back({{"name", "aten::mm"}, {"ph", "X"}, {"ts", us(host)}, {"dur", us(total)}, {"tid", 1},
                          {"pid", "CPU Functions"}, {"args", json::object()}});
        host += total;
        group.first += 1;
        group.second += total;
        return;
      }
      for (int p = 0; p < parts; ++p) {
        const double duration = std::floor(total * weights[p] / weight_sum);
        const bool copy = op.kind == OpKind::Copy;
        const int64_t c = call(copy ? "cudaMemcpyAsync" : "cudaLaunchKernel", 3000);
        truth.start_ns = std::min(truth.start_ns, host);
        const double start = std::max(host + 2000, stream_ready[op.stream]);
        stream_ready[op.stream] = start + duration;
        json args = {{"device", 0}, {"context", 1}, {"stream", stream_id[op.stream]}, {"correlation", c}};
        std::string name = op.kind == OpKind::Collective ? "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*)"
                           : !given.empty()             ? given[p].first
                                                        : "ampere_bf16_gemm_" + std::to_string(p) + "_" + op.name;
        std::string category = "kernel";
        if (copy) {
          category = "gpu_memcpy";
          name = op.copy == CopyKind::DeviceToHost ? "Memcpy DtoH (Device -> Pinned)" : "Memcpy HtoD (Pinned -> Device)";
          args["bytes"] = op.bytes;
        }
        events.push_back({{"ph", "X"}, {"cat", category}, {"name", name}, {"pid", 0}, {"tid", stream_id[op.stream]},
                          {"ts", us(start)}, {"dur", us(duration)}, {"args", args}});
        group.first += 1;
        group.second += duration;
        host += 4000;
      }
    };
    const std::vector<Op>& ops = simulated.ops;
    for (size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      if (op.rank != 0) continue;
      if (op.layer >= 0) {
        const std::string phase = detail::phase_of(op);
        if (open_layer != op.layer || open_phase != phase) {
          close_layer();
          open_layer = op.layer;
          open_phase = phase;
          layer_start = host;
          host += 500;
        }
      } else {
        close_layer();
      }
      const std::string L = " L" + std::to_string(op.layer);
      if (op.layer >= 0) {
        // A protocol step: its annotation range around its work.
        std::string kind, what, label;
        size_t last = i;
        switch (op.kind) {
          case OpKind::Kernel:
            kind = "compute";
            what = op.phase == "recompute" ? "recompute" : op.phase == "forward" ? "layer" : "backward";
            label = (what == "layer" ? "forward" : what) + L;
            // The backward of one compute step is several simulated ops (attention, MLP chunks).
            while (what == "backward" && last + 1 < ops.size() && ops[last + 1].kind == OpKind::Kernel &&
                   ops[last + 1].layer == op.layer && ops[last + 1].phase == "backward") {
              ++last;
            }
            break;
          case OpKind::Copy:
            kind = "copy";
            label = std::string(op.copy == CopyKind::DeviceToHost ? "copy D2H" : "copy H2D") + L;
            break;
          case OpKind::StreamWait: kind = op.event >= 0 ? "wait_event" : "wait_stream"; break;
          case OpKind::EventRecord: kind = "record"; break;
          case OpKind::Free: kind = "free"; break;
          case OpKind::RecordStream: kind = "record_stream"; break;
          default: kind = "host_sync"; break;
        }
        if (options.legacy_cpu) host += 500;  // the legacy range is exactly the work it wraps
        const double start = host;
        if (!options.legacy_cpu) host += 500;
        for (size_t k = i; k <= last; ++k) {
          const Op& step_op = ops[k];
          if (kind == "compute" || kind == "copy") {
            work(step_op, label);
          } else if (!options.legacy_cpu) {
            // The CUDA call the step makes; no cuda_sync record (replay relies on the annotation).
            if (step_op.kind == OpKind::StreamWait) {
              call("cudaStreamWaitEvent", 2000);
              const int s = step_op.stream;
              if (step_op.event >= 0 && event_done.count(step_op.event)) stream_ready[s] = std::max(stream_ready[s], event_done[step_op.event]);
              if (step_op.event < 0 && step_op.sync_stream >= 0) stream_ready[s] = std::max(stream_ready[s], stream_ready[step_op.sync_stream]);
              host += 3000;
            } else if (step_op.kind == OpKind::EventRecord) {
              call("cudaEventRecord", 2000);
              event_done[step_op.event] = stream_ready[step_op.stream];
              host += 3000;
            }
          }
        }
        // On the CPU one range is one op, however many simulated ops it wraps.
        if (options.legacy_cpu && (kind == "compute" || kind == "copy")) truth.groups[label].first -= static_cast<int>(last - i);
        const std::string name = detail::protocol_annotation(simulated, op, kind, kind == "compute" ? what : "");
        range(name, start, host);
        if (options.legacy_cpu) {
          // Every protocol range becomes an op of the replayed step (sync ranges last no time).
          truth.start_ns = std::min(truth.start_ns, start);
          truth.end_ns = std::max(truth.end_ns, kind == "compute" || kind == "copy" ? host : start);
        }
        host += 500;
        i = last;
        if (label.rfind("forward", 0) == 0) position = std::max(position, 1);
        if (label.rfind("backward", 0) == 0 || label.rfind("recompute", 0) == 0) position = 2;
        continue;
      }
      // Outside the decoder layers: DDP's reduction, the head, the optimizer.
      if (op.kind == OpKind::EventRecord) {
        if (!options.legacy_cpu) {
          record_corr[op.event] = call("cudaEventRecord", 2000);
          event_done[op.event] = stream_ready[op.stream];
          host += 3000;
        }
        continue;
      }
      if (op.kind == OpKind::StreamWait) {
        if (!options.legacy_cpu) {
          const int64_t c = call("cudaStreamWaitEvent", 2000);
          if (op.event >= 0 && record_corr.count(op.event)) {
            int record_stream = compute;
            for (size_t k = 0; k < i; ++k) if (ops[k].kind == OpKind::EventRecord && ops[k].event == op.event) record_stream = ops[k].stream;
            events.push_back({{"ph", "X"}, {"cat", "cuda_sync"}, {"name", "Stream Wait Event"}, {"pid", 0},
                              {"tid", stream_id[op.stream]}, {"ts", us(host)}, {"dur", 0},
                              {"args", {{"cuda_sync_kind", "Stream Wait Event"}, {"device", 0}, {"context", 1},
                                        {"stream", stream_id[op.stream]}, {"correlation", c},
                                        {"wait_on_stream", stream_id[record_stream]},
                                        {"wait_on_cuda_event_record_corr_id", record_corr[op.event]},
                                        {"wait_on_cuda_event_id", op.event}}}});
            stream_ready[op.stream] = std::max(stream_ready[op.stream], event_done[op.event]);
          }
          host += 3000;
        }
        continue;
      }
      if (op.kind != OpKind::Kernel && op.kind != OpKind::Collective && op.kind != OpKind::Copy) continue;
      if (op.kind == OpKind::Collective) {
        if (!options.legacy_cpu) work(op, "all-reduce #" + std::to_string(collectives++));
        continue;
      }
      if (op.phase == "optimizer") {
        if (options.legacy_cpu) host += 500;
        const double start = host;
        if (!options.legacy_cpu) host += 500;
        work(op, "optimizer");
        range("hookstream:optimizer", start, host);
        if (options.legacy_cpu) {
          truth.start_ns = std::min(truth.start_ns, start);
          truth.end_ns = std::max(truth.end_ns, host);
        }
        host += 500;
        continue;
      }
      static const char* where[] = {"outside layers (before the layers)", "outside layers (between forward and backward layers)",
                                    "outside layers (after the layers)"};
      if (options.legacy_cpu) {
        host += std::max(20000.0, op.duration_ns);  // unannotated host work: not in the trace's ops
      } else {
        work(op, where[position]);
      }
    }
    close_layer();
    if (!options.legacy_cpu) {
      // loss.item(): the host waits for the compute stream.
      const double wait = std::max(0.0, stream_ready[compute] - host) + 5000;
      const int64_t c = call("cudaStreamSynchronize", wait);
      events.push_back({{"ph", "X"}, {"cat", "cuda_sync"}, {"name", "Stream Sync"}, {"pid", 0}, {"tid", stream_id[compute]},
                        {"ts", us(host)}, {"dur", us(wait)},
                        {"args", {{"cuda_sync_kind", "Stream Sync"}, {"device", 0}, {"context", 1}, {"stream", stream_id[compute]},
                                  {"correlation", c}}}});
      host += wait;
      truth.end_ns = host;
      for (double ready : stream_ready) truth.end_ns = std::max(truth.end_ns, ready);
    }
    host += 1000;
    range("hookstream:step:" + std::to_string(n), step_start, host);
    host += 50000;
    trace.steps.push_back(truth);
  }
  // Kineto orders events by time within a thread; the importers must not depend on file order.
  std::stable_sort(events.begin(), events.end(), [](const json& a, const json& b) { return a["ts"].get<double>() < b["ts"].get<double>(); });
  if (options.legacy_cpu) {
    trace.json = events.dump();
  } else {
    json root = {{"schemaVersion", 1}, {"baseTimeNanoseconds", 1700000000000000000LL}, {"traceEvents", events}};
    trace.json = root.dump();
  }
  return trace;
}

}  // namespace hookstream::test
