#include "sim/cost/time_model.h"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace hookstream {

namespace {

double seconds_to_ns(double seconds) { return seconds * 1e9; }

double bandwidth_ns(double bytes, double gbps) { return gbps > 0 ? seconds_to_ns(bytes / (gbps * 1e9)) : 0; }

bool pageable(const Op& op) {
  return op.source == MemoryKind::PageableHost || op.destination == MemoryKind::PageableHost;
}

// Total length of the overlap of [start, end) with a sorted, disjoint interval list.
// Intervals ending at or before `start` add exactly 0, so the scan starts at the first one that ends
// after it (ends are ascending in a merged list): a copy costs log n, not n.
double overlap(const std::vector<IdleGap>& intervals, double start, double end) {
  double sum = 0;
  const auto first = std::upper_bound(intervals.begin(), intervals.end(), start,
                                      [](double at, const IdleGap& interval) { return at < interval.end_ns; });
  for (auto it = first; it != intervals.end(); ++it) {
    const IdleGap& interval = *it;
    if (interval.start_ns >= end) break;
    sum += std::max(0.0, std::min(end, interval.end_ns) - std::max(start, interval.start_ns));
  }
  return sum;
}

bool by_start(const IdleGap& a, const IdleGap& b) { return a.start_ns < b.start_ns; }

// Sorted by start. A stream's or a rank's ops mostly come in start order already (always, for a
// replayed trace): checking is one pass, sorting is n log n.
void sort_by_start(std::vector<IdleGap>& intervals) {
  if (!std::is_sorted(intervals.begin(), intervals.end(), by_start)) std::sort(intervals.begin(), intervals.end(), by_start);
}

std::vector<IdleGap> merge(std::vector<IdleGap> intervals) {
  sort_by_start(intervals);
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

double collective_link_gbps(int ranks, const DeviceSpec& device, int gpus_per_node) {
  // Within a node NCCL rings over NVLink; without NVLink (L40S, RTX 4090) over PCIe through the host.
  // Across nodes the slowest link of the ring is the network.
  double gbps = ranks <= gpus_per_node ? device.nvlink_gbps : device.network_gbps;
  if (gbps <= 0) gbps = std::min(device.host_link.pinned_h2d_gbps, device.host_link.pinned_d2h_gbps);
  return gbps;
}

double ring_allreduce_ns(int64_t bytes, int ranks, const DeviceSpec& device, int gpus_per_node) {
  if (ranks <= 1 || bytes <= 0) return 0;
  const double moved = 2.0 * (ranks - 1) / ranks * static_cast<double>(bytes);
  return bandwidth_ns(moved, collective_link_gbps(ranks, device, gpus_per_node));
}

namespace {

double uncalibrated_op_ns(const Op& op, const DeviceSpec& device, int collective_ranks, const TimeModelOptions& options) {
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

}  // namespace

double estimate_op_ns(const Op& op, const DeviceSpec& device, int collective_ranks, const TimeModelOptions& options) {
  const double estimate = uncalibrated_op_ns(op, device, collective_ranks, options);
  return options.calibration != nullptr ? options.calibration->apply(op, estimate) : estimate;
}

namespace {

// The scheduler's state: per stream the time its last op completes, per event its last record's
// completion time (-1: never recorded), per rank the host's clock. Ranks are kept in ascending
// order (they are visited in that order, which decides nothing but keeps runs deterministic) and
// looked up through a per-op rank slot, so the per-op work is array indexing.
class Scheduler {
 public:
  Scheduler(const EventModel& model, const DeviceSpec& device, const TimeModelOptions& options)
      : model_(model), device_(device), options_(options), stream_free_(model_.streams.size(), 0.0),
        event_done_(model_.events.size(), -1.0) {
    const std::vector<Op>& ops = model_.ops;
    // An op the schedule never reaches keeps the times it came with.
    times_.start_ns.reserve(ops.size());
    times_.duration_ns.reserve(ops.size());
    for (const Op& op : ops) {
      times_.start_ns.push_back(op.start_ns);
      times_.duration_ns.push_back(op.duration_ns);
    }
    // Distinct ranks: ops of one rank come in long runs, so only a change of rank is looked up.
    for (size_t i = 0; i < ops.size(); ++i) {
      if (i > 0 && ops[i].rank == ops[i - 1].rank) continue;
      if (!std::binary_search(ranks_seen_.begin(), ranks_seen_.end(), ops[i].rank)) {
        ranks_seen_.insert(std::lower_bound(ranks_seen_.begin(), ranks_seen_.end(), ops[i].rank), ops[i].rank);
      }
    }
    ranks_ = options.collective_ranks > 0 ? options.collective_ranks : std::max<int>(1, static_cast<int>(ranks_seen_.size()));
    slot_of_op_.resize(ops.size());
    ops_by_rank_.resize(ranks_seen_.size());
    for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
      // Ops of one rank are usually contiguous: try the previous op's slot before searching.
      const int previous = i > 0 ? slot_of_op_[i - 1] : 0;
      const int slot = !ranks_seen_.empty() && ranks_seen_[previous] == ops[i].rank
                           ? previous
                           : static_cast<int>(std::lower_bound(ranks_seen_.begin(), ranks_seen_.end(), ops[i].rank) - ranks_seen_.begin());
      slot_of_op_[i] = slot;
      ops_by_rank_[slot].push_back(i);
    }
    host_.assign(ranks_seen_.size(), 0.0);
    cursor_.assign(ranks_seen_.size(), 0);
    // The streams each stream is coupled with by CUDA's legacy default stream rule, once, instead
    // of a scan over every stream per op.
    coupled_.resize(model_.streams.size());
    for (size_t a = 0; a < model_.streams.size(); ++a) {
      const Stream& own = model_.streams[a];
      for (size_t b = 0; b < model_.streams.size(); ++b) {
        const Stream& other = model_.streams[b];
        if (a == b || other.rank != own.rank || other.device != own.device) continue;
        if ((own.legacy_default && !other.non_blocking) || (other.legacy_default && !own.non_blocking)) {
          coupled_[a].push_back(static_cast<int>(b));
        }
      }
    }
  }

  // Moves the times out: the scheduler is done with them.
  OpTimes run() && {
    // Ranks advance independently except at collectives: the k-th collective of every rank that has
    // one is the same NCCL call and starts when all of them are ready.
    const size_t rank_count = ranks_seen_.size();
    std::vector<int> collectives_seen(rank_count, 0);
    std::vector<std::pair<int, double>> waiting(rank_count);  // per rank slot: (op, ready time); op -1: not waiting
    for (;;) {
      bool progressed = false;
      bool any_waiting = false;
      for (size_t slot = 0; slot < rank_count; ++slot) {
        waiting[slot].first = -1;
        const std::vector<int>& ops = ops_by_rank_[slot];
        size_t& position = cursor_[slot];
        while (position < ops.size()) {
          const int index = ops[position];
          const Op& op = model_.ops[index];
          if (op.kind == OpKind::Collective && op.stream >= 0) {
            waiting[slot] = {index, ready_time(op, static_cast<int>(slot))};
            any_waiting = true;
            break;
          }
          execute(index, static_cast<int>(slot));
          ++position;
          progressed = true;
        }
      }
      if (!any_waiting) break;
      // Resolve the earliest pending collective ordinal among the waiting ranks; ranks that are
      // finished or have fewer collectives do not take part (the verifier reports that mismatch).
      int ordinal = -1;
      for (size_t slot = 0; slot < rank_count; ++slot) {
        if (waiting[slot].first < 0) continue;
        if (ordinal < 0 || collectives_seen[slot] < ordinal) ordinal = collectives_seen[slot];
      }
      std::vector<int> members;
      bool all_arrived = true;
      for (size_t slot = 0; slot < rank_count; ++slot) {
        if (collectives_seen[slot] != ordinal) continue;
        if (waiting[slot].first >= 0) members.push_back(static_cast<int>(slot));
        else if (cursor_[slot] < ops_by_rank_[slot].size()) all_arrived = false;
      }
      if (!all_arrived && progressed) continue;
      double start = 0;
      for (int slot : members) start = std::max(start, waiting[slot].second);
      for (int slot : members) {
        place(waiting[slot].first, start);
        host_[slot] += options_.host_issue_ns;
        ++collectives_seen[slot];
        ++cursor_[slot];
      }
    }
    return std::move(times_);
  }

 private:
  const Stream& stream_of(const Op& op) const { return model_.streams.at(op.stream); }

  // Earliest start on the op's stream: stream free, host issued, and CUDA's legacy default stream
  // rule (the legacy stream waits for blocking streams of its device and they wait for it).
  double ready_time(const Op& op, int rank_slot) const {
    double ready = std::max(stream_free_.at(op.stream), host_[rank_slot]);
    for (int s : coupled_[op.stream]) ready = std::max(ready, stream_free_[s]);
    return ready;
  }

  void place(int index, double start) {
    const Op& op = model_.ops[index];
    times_.start_ns[index] = start;
    times_.duration_ns[index] = estimate_op_ns(op, device_, ranks_, options_);
    stream_free_[op.stream] = start + times_.duration_ns[index];
  }

  // The op's times are written to times_, never to the op: estimate_op_ns reads its recorded
  // duration, and other threads may read the model while it is scheduled.
  void execute(int index, int rank_slot) {
    const Op& op = model_.ops[index];
    double& start = times_.start_ns[index];
    double& duration = times_.duration_ns[index];
    double& host = host_[rank_slot];
    switch (op.kind) {
      case OpKind::Kernel:
      case OpKind::Copy:
      case OpKind::Memset:
      case OpKind::Collective: {
        if (op.stream < 0) throw std::invalid_argument("op \"" + op.name + "\" runs on a stream but names none");
        place(index, ready_time(op, rank_slot));
        // Pageable copies are synchronous for the host (cudaMemcpyAsync stages through a pinned
        // buffer and returns only when done); so is anything the trace marks as blocking.
        if (op.blocks_host || (op.kind == OpKind::Copy && pageable(op))) host = start + duration;
        break;
      }
      case OpKind::EventRecord: {
        // The event completes when the stream reaches it; on an idle stream, when it is issued.
        const double done = op.stream >= 0 ? ready_time(op, rank_slot) : host;
        start = done;
        duration = 0;
        if (op.stream >= 0) stream_free_[op.stream] = done;
        if (op.event >= 0) event_done_.at(op.event) = done;
        break;
      }
      case OpKind::StreamWait: {
        // Waiting on an event never recorded is a no-op (CUDA semantics). The op lasts from its
        // issue until the stream may go on: the stall a timeline shows.
        start = op.stream >= 0 ? ready_time(op, rank_slot) : host;
        if (op.stream >= 0 && op.event >= 0 && event_done_.at(op.event) >= 0) {
          stream_free_[op.stream] = std::max(stream_free_[op.stream], event_done_[op.event]);
        }
        // Stream.wait_stream(other) (event -1, sync_stream set): a record on `other` and a wait in one.
        if (op.stream >= 0 && op.event < 0 && op.sync_stream >= 0) {
          stream_free_[op.stream] = std::max(stream_free_[op.stream], stream_free_.at(op.sync_stream));
        }
        duration = op.stream >= 0 ? std::max(0.0, stream_free_[op.stream] - start) : 0;
        break;
      }
      case OpKind::EventSync:
        start = host;
        if (op.event >= 0 && event_done_.at(op.event) >= 0) host = std::max(host, event_done_[op.event]);
        duration = host - start;
        break;
      case OpKind::StreamSync:
        start = host;
        if (op.sync_stream >= 0) host = std::max(host, stream_free_.at(op.sync_stream));
        duration = host - start;
        break;
      case OpKind::DeviceSync: {
        start = host;
        const int device = op.stream >= 0 ? stream_of(op).device : -1;
        for (size_t s = 0; s < model_.streams.size(); ++s) {
          const Stream& stream = model_.streams[s];
          if (stream.rank == op.rank && (device < 0 || stream.device == device)) host = std::max(host, stream_free_[s]);
        }
        duration = host - start;
        break;
      }
      case OpKind::HostCompute:
        start = host;
        duration = estimate_op_ns(op, device_, ranks_, options_);
        host += duration;
        break;
      default:  // Alloc, Free, RecordStream, Marker: host bookkeeping, no time
        start = host;
        duration = 0;
        break;
    }
    host += options_.host_issue_ns;
  }

  const EventModel& model_;
  const DeviceSpec& device_;
  const TimeModelOptions& options_;
  int ranks_ = 1;
  std::vector<double> stream_free_;
  std::vector<double> event_done_;
  std::vector<int> ranks_seen_;               // distinct ranks of the ops, ascending
  std::vector<int> slot_of_op_;               // op -> index into ranks_seen_
  std::vector<std::vector<int>> ops_by_rank_; // per rank slot, in issue order
  std::vector<double> host_;                  // per rank slot
  std::vector<size_t> cursor_;                // per rank slot
  std::vector<std::vector<int>> coupled_;     // per stream: streams the legacy default rule couples it with
  OpTimes times_;                             // per op: what the schedule gives it
};

}  // namespace

Schedule schedule_step(const EventModel& model, const DeviceSpec& device, const TimeModelOptions& options) {
  return schedule_step(EventModel(model), device, options);
}

OpTimes schedule_times(const EventModel& model, const DeviceSpec& device, const TimeModelOptions& options) {
  return Scheduler(model, device, options).run();
}

Schedule schedule_step(EventModel&& model, const DeviceSpec& device, const TimeModelOptions& options) {
  const OpTimes times = schedule_times(model, device, options);
  return schedule_from_times(std::move(model), times);
}

namespace {

void check_times(const EventModel& model, const OpTimes& times) {
  if (times.start_ns.size() != model.ops.size() || times.duration_ns.size() != model.ops.size()) {
    throw std::invalid_argument("schedule times for " + std::to_string(times.start_ns.size()) + " ops, the model has " +
                                std::to_string(model.ops.size()));
  }
}

}  // namespace

Schedule schedule_figures(const EventModel& model, const OpTimes& times) {
  check_times(model, times);
  Schedule schedule;
  std::map<int, std::vector<IdleGap>> compute_by_rank;
  std::vector<std::vector<IdleGap>> busy(model.streams.size());
  for (size_t i = 0; i < model.ops.size(); ++i) {
    const Op& op = model.ops[i];
    const double start = times.start_ns[i], duration = times.duration_ns[i];
    schedule.step_ns = std::max(schedule.step_ns, start + std::max(0.0, duration));
    if (op.stream < 0 || duration <= 0) continue;
    if (op.kind == OpKind::Kernel || op.kind == OpKind::Copy || op.kind == OpKind::Memset || op.kind == OpKind::Collective) {
      busy[op.stream].push_back({start, start + duration});
    }
    if (op.kind == OpKind::Kernel) compute_by_rank[op.rank].push_back({start, start + duration});
  }
  for (auto& [rank, intervals] : compute_by_rank) intervals = merge(std::move(intervals));
  for (size_t i = 0; i < model.ops.size(); ++i) {
    const Op& op = model.ops[i];
    const double start = times.start_ns[i], duration = times.duration_ns[i];
    if (op.kind != OpKind::Copy || duration <= 0) continue;
    if (op.copy != CopyKind::HostToDevice && op.copy != CopyKind::DeviceToHost) continue;
    schedule.copy_ns += duration;
    schedule.hidden_copy_ns += overlap(compute_by_rank[op.rank], start, start + duration);
  }
  schedule.copy_hidden_fraction = schedule.copy_ns > 0 ? schedule.hidden_copy_ns / schedule.copy_ns : 1.0;
  schedule.streams.reserve(model.streams.size());
  for (size_t s = 0; s < model.streams.size(); ++s) {
    StreamUsage usage;
    usage.stream = static_cast<int>(s);
    std::vector<IdleGap>& intervals = busy[s];
    sort_by_start(intervals);
    for (const IdleGap& interval : intervals) usage.busy_ns += interval.end_ns - interval.start_ns;
    const std::vector<IdleGap> merged = merge(std::move(intervals));
    for (size_t i = 1; i < merged.size(); ++i) {
      if (merged[i].start_ns > merged[i - 1].end_ns) usage.gaps.push_back({merged[i - 1].end_ns, merged[i].start_ns});
    }
    usage.idle_ns = std::max(0.0, schedule.step_ns - usage.busy_ns);
    schedule.streams.push_back(std::move(usage));
  }
  return schedule;
}

Schedule schedule_from_times(EventModel&& model, const OpTimes& times) {
  Schedule figures = schedule_figures(model, times);
  return schedule_from_times(std::move(model), times, std::move(figures));
}

Schedule schedule_from_times(EventModel&& model, const OpTimes& times, Schedule figures) {
  check_times(model, times);
  Schedule schedule = std::move(figures);
  for (size_t i = 0; i < model.ops.size(); ++i) {
    model.ops[i].start_ns = times.start_ns[i];
    model.ops[i].duration_ns = times.duration_ns[i];
  }
  schedule.model = std::move(model);
  return schedule;
}

}  // namespace hookstream
