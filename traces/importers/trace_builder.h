// Collects what an importer reads (ops keyed by the trace's own process, stream and event ids) and
// turns it into an EventModel: ranks, streams and events numbered deterministically (sorted by
// their trace ids, not by the order rows happened to come in), ops sorted into host issue order.
// Both importers share it, so a model's shape does not depend on which format it came from.
#pragma once

#include <boost/container_hash/hash.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "sim/events/event_model.h"

namespace hookstream {

// How a trace names a stream. nsys stream ids are unique per (process, context); Kineto reports
// device, context and stream of one process.
struct StreamKey {
  int64_t process = 0;
  int64_t device = 0;
  int64_t context = 0;
  int64_t stream = 0;
  bool operator==(const StreamKey& o) const {
    return process == o.process && device == o.device && context == o.context && stream == o.stream;
  }
};

struct StreamFlags {
  bool legacy_default = false;
  bool non_blocking = true;
  int priority = 0;
};

// Ops in chunks that are reserved once and never regrow: ops never move while the trace is read
// (handles and references stay valid, as in a deque), and a chunk holds 256 ops where
// libstdc++'s deque holds two (512-byte blocks), so reading costs one allocation per chunk.
class OpStore {
 public:
  size_t size() const { return size_; }
  Op& operator[](size_t i) { return chunks_[i / kChunk][i % kChunk]; }
  void push_back(Op&& op) {
    if (size_ == chunks_.size() * kChunk) {
      chunks_.emplace_back();
      chunks_.back().reserve(kChunk);
    }
    chunks_.back().push_back(std::move(op));
    ++size_;
  }
  void clear() {
    chunks_.clear();
    size_ = 0;
  }

 private:
  // 256 ops (~57 KB) stay below glibc's 128 KiB mmap threshold: chunks come from the heap and are
  // reused by the next allocations. 1024-op chunks were mapped and unmapped each time, and the
  // fresh pages' faults tripled the time to read the small real traces.
  static constexpr size_t kChunk = 256;
  std::vector<std::vector<Op>> chunks_;
  size_t size_ = 0;
};

class TraceBuilder {
 public:
  explicit TraceBuilder(std::string source) : source_(std::move(source)) {}

  // A stream the trace declares (nsys TARGET_INFO_CUDA_STREAM) even if no op ran on it.
  void declare_stream(const StreamKey& key, const StreamFlags& flags);
  // Marks (process, context)'s null stream as the legacy default (TARGET_INFO_CUDA_CONTEXT_INFO).
  void declare_null_stream(const StreamKey& key);

  // Adds an op of `process`; `issue_ns` is when the host issued it (the API call's start), which
  // orders the model's ops. Returns a handle for the setters below.
  size_t add_op(Op op, int64_t process, double issue_ns);
  Op& op(size_t handle) { return ops_[handle]; }
  void set_stream(size_t handle, const StreamKey& key) { ops_[handle].stream = stream_slot(key); }
  void set_sync_stream(size_t handle, const StreamKey& key) { ops_[handle].sync_stream = stream_slot(key); }
  // An event named by the trace: nsys (context, eventId), Kineto (record correlation, event id).
  void set_event(size_t handle, int64_t process, int64_t key_a, int64_t key_b, const std::string& name);
  size_t op_count() const { return ops_.size(); }

  // Ranks are first_rank + the position of the process among the trace's processes sorted by id.
  EventModel finish(int first_rank);

 private:
  // boost::hash_combine: the ids are whatever the trace says (fuzz/nsys_sql found the former
  // k.process * 1000003 overflowing, undefined behaviour, for a process id near INT64_MAX).
  template <typename... Ids>
  static size_t hash_ids(Ids... ids) {
    size_t seed = 0;
    (boost::hash_combine(seed, ids), ...);
    return seed;
  }
  struct KeyHash {
    size_t operator()(const StreamKey& k) const { return hash_ids(k.process, k.device, k.context, k.stream); }
  };
  struct EventKey {
    int64_t process, a, b;
    bool operator==(const EventKey& o) const { return process == o.process && a == o.a && b == o.b; }
  };
  struct EventKeyHash {
    size_t operator()(const EventKey& k) const { return hash_ids(k.process, k.a, k.b); }
  };
  int stream_slot(const StreamKey& key);
  int process_slot(int64_t process);

  std::string source_;
  OpStore ops_;                  // ops never move while the trace is read
  std::vector<int> op_process_;  // process slot
  std::vector<double> issue_ns_;
  std::vector<StreamKey> stream_keys_;
  std::vector<StreamFlags> stream_flags_;
  std::vector<bool> stream_declared_;
  std::unordered_map<StreamKey, int, KeyHash> stream_index_;
  std::vector<EventKey> event_keys_;
  std::vector<std::string> event_names_;
  std::unordered_map<EventKey, int, EventKeyHash> event_index_;
  std::vector<int64_t> processes_;
  std::unordered_map<int64_t, int> process_index_;
};

}  // namespace hookstream
