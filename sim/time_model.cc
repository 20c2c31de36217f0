#include "sim/time_model.h"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

namespace hookstream {

namespace {

double seconds_to_ns(double seconds) { return seconds * 1e9; }

double bandwidth_ns(double bytes, double gbps) { return gbps > 0 ? seconds_to_ns(bytes / (gbps * 1e9)) : 0; }

bool pageable(const Op& op) {
  return op.source == MemoryKind::PageableHost || op.destination == MemoryKind::PageableHost;
}

int distinct_ranks(const EventModel& model) {
  std::set<int> ranks;
  for (const Op& op : model.ops) ranks.insert(op.rank);
  return std::max<int>(1, static_cast<int>(ranks.size()));
}

// Total length of the overlap of [start, end) with a sorted, disjoint interval list.
double overlap(const std::vector<IdleGap>& intervals, double start, double end) {
  double sum = 0;
  for (const IdleGap& interval : intervals) {
    if (interval.start_ns >= end) break;
    sum += std::max(0.0, std::min(end, interval.end_ns) - std::max(start, interval.start_ns));
  }
  return sum;
}

std::vector<IdleGap> merge(std::vector<IdleGap> intervals) {
  std::sort(intervals.begin(), intervals.end(),
            [](const IdleGap& a, const IdleGap& b) { return a.start_ns < b.start_ns; });
  std::vector<IdleGap> merged;
  for (const IdleGap& interval : intervals) {
    if (!merged.empty() && interval.start_ns <= merged.back().end_ns) {
      merged.back().end_ns = std::max(merged.back().end_ns, interval.end_ns);
    } else {
      merged.push_back(interval);
    }
  }
  return merged;
}

}  // namespace

double ring_allreduce_ns(int64_t bytes, int ranks, const DeviceSpec& device, int gpus_per_node) {
  if (ranks <= 1 || bytes <= 0) return 0;
  // Within a node NCCL rings over NVLink; without NVLink (L40S, RTX 4090) over PCIe through the host.
  // Across nodes the slowest link of the ring is the network.
  double gbps = ranks <= gpus_per_node ? device.nvlink_gbps : device.network_gbps;
  if (gbps <= 0) gbps = std::min(device.host_link.pinned_h2d_gbps, device.host_link.pinned_d2h_gbps);
  const double moved = 2.0 * (ranks - 1) / ranks * static_cast<double>(bytes);
  return bandwidth_ns(moved, gbps);
}

double estimate_op_ns(const Op& op, const DeviceSpec& device, int collective_ranks, const TimeModelOptions& options) {
  if (options.calibration != nullptr) {
    if (auto measured = options.calibration->lookup(op)) return *measured;
  }
  if (op.duration_ns >= 0) return op.duration_ns;
  const double bytes = static_cast<double>(op.bytes);
  switch (op.kind) {
    case OpKind::Kernel: {
      const double compute = op.flops > 0 ? seconds_to_ns(op.flops / (device.matrix_tflops * 1e12 * device.matrix_efficiency)) : 0;
      const double memory = bandwidth_ns(bytes, device.hbm_gbps * device.hbm_efficiency);
      return std::max(compute, memory);
    }
    case OpKind::Memset:
      return bandwidth_ns(bytes, device.hbm_gbps * device.hbm_efficiency);
    case OpKind::Copy:
      if (pageable(op)) return bandwidth_ns(bytes, device.host_link.pageable_gbps);
      switch (op.copy) {
        case CopyKind::HostToDevice: return bandwidth_ns(bytes, device.host_link.pinned_h2d_gbps);
        case CopyKind::DeviceToHost: return bandwidth_ns(bytes, device.host_link.pinned_d2h_gbps);
        case CopyKind::DeviceToDevice: return bandwidth_ns(2 * bytes, device.hbm_gbps * device.hbm_efficiency);
        case CopyKind::PeerToPeer:
          return bandwidth_ns(bytes, device.nvlink_gbps > 0 ? device.nvlink_gbps : device.host_link.pinned_h2d_gbps);
        case CopyKind::Unknown: return bandwidth_ns(bytes, device.host_link.pinned_h2d_gbps);
      }
      return 0;
    case OpKind::Collective:
      return ring_allreduce_ns(op.bytes, collective_ranks, device, options.gpus_per_node);
    default:
      return 0;
  }
}

namespace {

// The scheduler's state: per stream the time its last op completes, per event its last record's
// completion time (-1: never recorded), per rank the host's clock.
class Scheduler {
 public:
  Scheduler(const EventModel& input, const DeviceSpec& device, const TimeModelOptions& options)
      : model_(input), device_(device), options_(options),
        stream_free_(input.streams.size(), 0.0), event_done_(input.events.size(), -1.0) {
    ranks_ = options.collective_ranks > 0 ? options.collective_ranks : distinct_ranks(input);
    for (int i = 0; i < static_cast<int>(input.ops.size()); ++i) ops_by_rank_[input.ops[i].rank].push_back(i);
    for (const auto& [rank, ops] : ops_by_rank_) {
      host_[rank] = 0;
      cursor_[rank] = 0;
    }
  }

  EventModel run() {
    // Ranks advance independently except at collectives: the k-th collective of every rank that has
    // one is the same NCCL call and starts when all of them are ready.
    std::map<int, int> collectives_seen;
    for (;;) {
      bool progressed = false;
      std::map<int, std::pair<int, double>> waiting;  // rank -> (op, ready time)
      for (auto& [rank, position] : cursor_) {
        const std::vector<int>& ops = ops_by_rank_[rank];
        while (position < ops.size()) {
          Op& op = model_.ops[ops[position]];
          if (op.kind == OpKind::Collective && op.stream >= 0) {
            waiting[rank] = {ops[position], ready_time(op)};
            break;
          }
          execute(op);
          ++position;
          progressed = true;
        }
      }
      if (waiting.empty()) break;
      // Resolve the earliest pending collective ordinal among the waiting ranks; ranks that are
      // finished or have fewer collectives do not take part (the verifier reports that mismatch).
      int ordinal = -1;
      for (const auto& [rank, pending] : waiting) {
        if (ordinal < 0 || collectives_seen[rank] < ordinal) ordinal = collectives_seen[rank];
      }
      std::vector<int> members;
      bool all_arrived = true;
      for (const auto& [rank, ops] : ops_by_rank_) {
        if (collectives_seen[rank] != ordinal) continue;
        if (waiting.count(rank)) members.push_back(rank);
        else if (cursor_[rank] < ops.size()) all_arrived = false;
      }
      if (!all_arrived && progressed) continue;
      double start = 0;
      for (int rank : members) start = std::max(start, waiting[rank].second);
      for (int rank : members) {
        Op& op = model_.ops[waiting[rank].first];
        place(op, start);
        host_[rank] += options_.host_issue_ns;
        ++collectives_seen[rank];
        ++cursor_[rank];
      }
    }
    return model_;
  }

 private:
  const Stream& stream_of(const Op& op) const { return model_.streams.at(op.stream); }

  // Earliest start on the op's stream: stream free, host issued, and CUDA's legacy default stream
  // rule (the legacy stream waits for blocking streams of its device and they wait for it).
  double ready_time(const Op& op) const {
    double ready = std::max(stream_free_[op.stream], host_.at(op.rank));
    const Stream& own = stream_of(op);
    for (size_t s = 0; s < model_.streams.size(); ++s) {
      const Stream& other = model_.streams[s];
      if (static_cast<int>(s) == op.stream || other.rank != own.rank || other.device != own.device) continue;
      const bool couples = (own.legacy_default && !other.non_blocking) || (other.legacy_default && !own.non_blocking);
      if (couples) ready = std::max(ready, stream_free_[s]);
    }
    return ready;
  }

  void place(Op& op, double start) {
    op.start_ns = start;
    op.duration_ns = estimate_op_ns(op, device_, ranks_, options_);
    stream_free_[op.stream] = start + op.duration_ns;
  }

  void execute(Op& op) {
    double& host = host_[op.rank];
    switch (op.kind) {
      case OpKind::Kernel:
      case OpKind::Copy:
      case OpKind::Memset:
      case OpKind::Collective: {
        if (op.stream < 0) throw std::invalid_argument("op \"" + op.name + "\" runs on a stream but names none");
        place(op, ready_time(op));
        // Pageable copies are synchronous for the host (cudaMemcpyAsync stages through a pinned
        // buffer and returns only when done); so is anything the trace marks as blocking.
        if (op.blocks_host || (op.kind == OpKind::Copy && pageable(op))) host = op.start_ns + op.duration_ns;
        break;
      }
      case OpKind::EventRecord: {
        // The event completes when the stream reaches it; on an idle stream, when it is issued.
        const double done = op.stream >= 0 ? ready_time(op) : host;
        op.start_ns = done;
        op.duration_ns = 0;
        if (op.stream >= 0) stream_free_[op.stream] = done;
        if (op.event >= 0) event_done_.at(op.event) = done;
        break;
      }
      case OpKind::StreamWait: {
        // Waiting on an event never recorded is a no-op (CUDA semantics). The op lasts from its
        // issue until the stream may go on: the stall a timeline shows.
        op.start_ns = op.stream >= 0 ? ready_time(op) : host;
        if (op.stream >= 0 && op.event >= 0 && event_done_.at(op.event) >= 0) {
          stream_free_[op.stream] = std::max(stream_free_[op.stream], event_done_[op.event]);
        }
        // Stream.wait_stream(other) (event -1, sync_stream set): a record on `other` and a wait in one.
        if (op.stream >= 0 && op.event < 0 && op.sync_stream >= 0) {
          stream_free_[op.stream] = std::max(stream_free_[op.stream], stream_free_.at(op.sync_stream));
        }
        op.duration_ns = op.stream >= 0 ? std::max(0.0, stream_free_[op.stream] - op.start_ns) : 0;
        break;
      }
      case OpKind::EventSync:
        op.start_ns = host;
        if (op.event >= 0 && event_done_.at(op.event) >= 0) host = std::max(host, event_done_[op.event]);
        op.duration_ns = host - op.start_ns;
        break;
      case OpKind::StreamSync:
        op.start_ns = host;
        if (op.sync_stream >= 0) host = std::max(host, stream_free_.at(op.sync_stream));
        op.duration_ns = host - op.start_ns;
        break;
      case OpKind::DeviceSync: {
        op.start_ns = host;
        const int device = op.stream >= 0 ? stream_of(op).device : -1;
        for (size_t s = 0; s < model_.streams.size(); ++s) {
          const Stream& stream = model_.streams[s];
          if (stream.rank == op.rank && (device < 0 || stream.device == device)) host = std::max(host, stream_free_[s]);
        }
        op.duration_ns = host - op.start_ns;
        break;
      }
      case OpKind::HostCompute:
        op.start_ns = host;
        op.duration_ns = estimate_op_ns(op, device_, ranks_, options_);
        host += op.duration_ns;
        break;
      default:  // Alloc, Free, RecordStream, Marker: host bookkeeping, no time
        op.start_ns = host;
        op.duration_ns = 0;
        break;
    }
    host += options_.host_issue_ns;
  }

  EventModel model_;
  const DeviceSpec& device_;
  const TimeModelOptions& options_;
  int ranks_ = 1;
  std::vector<double> stream_free_;
  std::vector<double> event_done_;
  std::map<int, double> host_;
  std::map<int, size_t> cursor_;
  std::map<int, std::vector<int>> ops_by_rank_;
};

}  // namespace

Schedule schedule_step(const EventModel& model, const DeviceSpec& device, const TimeModelOptions& options) {
  Schedule schedule;
  schedule.model = Scheduler(model, device, options).run();
  const EventModel& timed = schedule.model;
  std::map<int, std::vector<IdleGap>> compute_by_rank;
  std::vector<std::vector<IdleGap>> busy(timed.streams.size());
  for (const Op& op : timed.ops) {
    schedule.step_ns = std::max(schedule.step_ns, op.start_ns + std::max(0.0, op.duration_ns));
    if (op.stream < 0 || op.duration_ns <= 0) continue;
    if (op.kind == OpKind::Kernel || op.kind == OpKind::Copy || op.kind == OpKind::Memset || op.kind == OpKind::Collective) {
      busy[op.stream].push_back({op.start_ns, op.start_ns + op.duration_ns});
    }
    if (op.kind == OpKind::Kernel) compute_by_rank[op.rank].push_back({op.start_ns, op.start_ns + op.duration_ns});
  }
  for (auto& [rank, intervals] : compute_by_rank) intervals = merge(intervals);
  for (const Op& op : timed.ops) {
    if (op.kind != OpKind::Copy || op.duration_ns <= 0) continue;
    if (op.copy != CopyKind::HostToDevice && op.copy != CopyKind::DeviceToHost) continue;
    schedule.copy_ns += op.duration_ns;
    schedule.hidden_copy_ns += overlap(compute_by_rank[op.rank], op.start_ns, op.start_ns + op.duration_ns);
  }
  schedule.copy_hidden_fraction = schedule.copy_ns > 0 ? schedule.hidden_copy_ns / schedule.copy_ns : 1.0;
  for (size_t s = 0; s < timed.streams.size(); ++s) {
    StreamUsage usage;
    usage.stream = static_cast<int>(s);
    std::vector<IdleGap> intervals = busy[s];
    std::sort(intervals.begin(), intervals.end(), [](const IdleGap& a, const IdleGap& b) { return a.start_ns < b.start_ns; });
    for (const IdleGap& interval : intervals) usage.busy_ns += interval.end_ns - interval.start_ns;
    const std::vector<IdleGap> merged = merge(intervals);
    for (size_t i = 1; i < merged.size(); ++i) {
      if (merged[i].start_ns > merged[i - 1].end_ns) usage.gaps.push_back({merged[i - 1].end_ns, merged[i].start_ns});
    }
    usage.idle_ns = std::max(0.0, schedule.step_ns - usage.busy_ns);
    schedule.streams.push_back(std::move(usage));
  }
  return schedule;
}

}  // namespace hookstream
