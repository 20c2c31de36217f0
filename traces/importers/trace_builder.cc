#include "traces/importers/trace_builder.h"

#include <algorithm>
#include <numeric>
#include <tuple>

namespace hookstream {

int TraceBuilder::process_slot(int64_t process) {
  const auto found = process_index_.find(process);
  if (found != process_index_.end()) return found->second;
  processes_.push_back(process);
  return process_index_[process] = static_cast<int>(processes_.size()) - 1;
}

int TraceBuilder::stream_slot(const StreamKey& key) {
  const auto found = stream_index_.find(key);
  if (found != stream_index_.end()) return found->second;
  process_slot(key.process);
  stream_keys_.push_back(key);
  stream_flags_.push_back(StreamFlags{});
  stream_declared_.push_back(false);
  return stream_index_[key] = static_cast<int>(stream_keys_.size()) - 1;
}

void TraceBuilder::declare_stream(const StreamKey& key, const StreamFlags& flags) {
  const int slot = stream_slot(key);
  const bool was_legacy = stream_flags_[slot].legacy_default;
  stream_flags_[slot] = flags;
  stream_flags_[slot].legacy_default = flags.legacy_default || was_legacy;
  if (stream_flags_[slot].legacy_default) stream_flags_[slot].non_blocking = false;
  stream_declared_[slot] = true;
}

void TraceBuilder::declare_null_stream(const StreamKey& key) {
  const int slot = stream_slot(key);
  stream_flags_[slot].legacy_default = true;
  stream_flags_[slot].non_blocking = false;
}

size_t TraceBuilder::add_op(Op op, int64_t process, double issue_ns) {
  ops_.push_back(std::move(op));
  op_process_.push_back(process_slot(process));
  issue_ns_.push_back(issue_ns);
  return ops_.size() - 1;
}

void TraceBuilder::set_event(size_t handle, int64_t process, int64_t key_a, int64_t key_b, const std::string& name) {
  const EventKey key{process, key_a, key_b};
  auto found = event_index_.find(key);
  if (found == event_index_.end()) {
    event_keys_.push_back(key);
    event_names_.push_back(name);
    found = event_index_.emplace(key, static_cast<int>(event_keys_.size()) - 1).first;
  }
  ops_[handle].event = found->second;
}

EventModel TraceBuilder::finish(int first_rank) {
  EventModel model;
  model.source = source_;

  std::vector<int64_t> sorted_processes = processes_;
  std::sort(sorted_processes.begin(), sorted_processes.end());
  std::unordered_map<int64_t, int> rank_of;
  for (size_t i = 0; i < sorted_processes.size(); ++i) rank_of[sorted_processes[i]] = first_rank + static_cast<int>(i);

  // Streams in (rank, device, stream id, context) order.
  std::vector<int> stream_order(stream_keys_.size());
  std::iota(stream_order.begin(), stream_order.end(), 0);
  std::sort(stream_order.begin(), stream_order.end(), [&](int a, int b) {
    const StreamKey& x = stream_keys_[a];
    const StreamKey& y = stream_keys_[b];
    return std::make_tuple(rank_of[x.process], x.device, x.stream, x.context) <
           std::make_tuple(rank_of[y.process], y.device, y.stream, y.context);
  });
  std::vector<int> stream_remap(stream_keys_.size());
  for (int slot : stream_order) {
    const StreamKey& key = stream_keys_[slot];
    const StreamFlags& flags = stream_flags_[slot];
    Stream stream;
    stream.rank = rank_of[key.process];
    stream.device = static_cast<int>(key.device);
    stream.id = key.stream;
    stream.legacy_default = flags.legacy_default;
    stream.non_blocking = flags.non_blocking;
    stream.priority = flags.priority;
    stream.name = flags.legacy_default ? "default" : "stream " + std::to_string(key.stream);
    stream_remap[slot] = model.add_stream(std::move(stream));
  }

  std::vector<int> event_order(event_keys_.size());
  std::iota(event_order.begin(), event_order.end(), 0);
  std::sort(event_order.begin(), event_order.end(), [&](int a, int b) {
    const EventKey& x = event_keys_[a];
    const EventKey& y = event_keys_[b];
    return std::make_tuple(rank_of[x.process], x.a, x.b) < std::make_tuple(rank_of[y.process], y.a, y.b);
  });
  std::vector<int> event_remap(event_keys_.size());
  for (int slot : event_order) {
    event_remap[slot] = model.add_event(Event{event_names_[slot], rank_of[event_keys_[slot].process]});
  }

  // Host issue order per rank; ties (a launch call and its kernel share the call's start) keep the
  // order the importer added them in, which puts the call first. Sorting compact keys (rank, issue
  // time, position) instead of indices into three arrays keeps the sort in cache; the position
  // breaks ties, so this is the stable order.
  struct IssueKey {
    int rank;
    double issue_ns;
    size_t index;
    bool operator<(const IssueKey& o) const {
      if (rank != o.rank) return rank < o.rank;
      if (issue_ns < o.issue_ns) return true;
      if (o.issue_ns < issue_ns) return false;
      return index < o.index;
    }
  };
  std::vector<int> rank_of_slot(processes_.size());
  for (size_t slot = 0; slot < processes_.size(); ++slot) rank_of_slot[slot] = rank_of[processes_[slot]];
  std::vector<IssueKey> order(ops_.size());
  for (size_t i = 0; i < ops_.size(); ++i) order[i] = {rank_of_slot[op_process_[i]], issue_ns_[i], i};
  // The importers add ops as a few runs each already in issue order (the host calls, then each GPU
  // activity table: 3 to 5 runs on the real and scaled traces), so the runs are merged, pairwise
  // until one is left: linear per pass where a sort is n log n (x64 nsys trace: ~10 ms -> ~2 ms).
  // Keys are distinct (the position breaks ties), so the order is the sort's.
  std::vector<size_t> runs = {0};
  for (size_t i = 1; i < order.size(); ++i) {
    if (order[i] < order[i - 1]) runs.push_back(i);
  }
  runs.push_back(order.size());
  while (runs.size() > 2) {
    std::vector<size_t> merged = {0};
    for (size_t r = 0; r + 1 < runs.size(); r += 2) {
      if (r + 2 < runs.size()) {
        std::inplace_merge(order.begin() + runs[r], order.begin() + runs[r + 1], order.begin() + runs[r + 2]);
        merged.push_back(runs[r + 2]);
      } else {
        merged.push_back(runs[r + 1]);  // an odd run out waits for the next pass
      }
    }
    runs = std::move(merged);
  }
  model.ops.reserve(ops_.size());
  for (const IssueKey& key : order) {
    Op& op = ops_[key.index];
    op.rank = key.rank;
    if (op.stream >= 0) op.stream = stream_remap[op.stream];
    if (op.sync_stream >= 0) op.sync_stream = stream_remap[op.sync_stream];
    if (op.event >= 0) op.event = event_remap[op.event];
    model.ops.push_back(std::move(op));
  }
  ops_.clear();
  return model;
}

}  // namespace hookstream
