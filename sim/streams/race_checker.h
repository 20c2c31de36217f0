// Happens-before race checker over the event model, with the semantics of PyTorch's CUDA sanitizer
// (torch/cuda/_sanitizer.py, StreamSynchronizations / EventHandler) plus the caching allocator's
// stream-ordered reuse (c10/cuda/CUDACachingAllocator.cpp):
// - every stream and every rank's host thread has a vector clock; a work op (kernel, copy, memset,
//   collective, free) on a stream ticks that stream and is ordered after its earlier work;
// - the host issues ops in program order: an op is ordered after everything the host has waited for;
// - event record snapshots the stream's clock; a wait merges the snapshot (never recorded: no-op);
//   Stream.wait_stream merges the other stream's current clock;
// - stream/event/device synchronize and blocking copies merge into the host's clock;
// - the legacy default stream and blocking streams of a device order each other (CUDA's implicit
//   legacy-stream synchronization); PyTorch's own streams are non-blocking and do not;
// - two accesses to overlapping bytes of one buffer, at least one a write, neither ordered before
//   the other: a race. A Free is a write by the block's next owner on the freeing stream; streams
//   named by record_stream() are merged into it (the allocator waits for them before reuse).
// - collectives: the k-th collective of every rank (on its communication stream) is one NCCL call,
//   a synchronization point between the ranks: every rank's op after it on that stream happens after
//   every rank's op before it there (an all-reduce cannot finish on one rank before every rank has
//   contributed; ProcessGroupNCCL enqueues the call on each rank's NCCL stream). Clocks therefore
//   have one slot per stream of every rank, plus one per rank's host thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/events/event_model.h"

namespace hookstream {

// One counter per stream (EventModel::streams, every rank) plus one per rank's host thread.
using VectorClock = std::vector<uint32_t>;

// Every work op's clock in one array (`slots` counters each): a long trace's step has ~10^5 work
// ops, and one vector per op was an allocation each.
class ClockTable {
 public:
  void set_slots(size_t slots) { slots_ = slots; }
  void reserve(size_t clocks) { values_.reserve(clocks * slots_); }
  void push_back(const VectorClock& clock) { values_.insert(values_.end(), clock.begin(), clock.end()); }
  const uint32_t* operator[](size_t clock) const { return values_.data() + clock * slots_; }
  bool same(size_t a, const ClockTable& other, size_t b) const {
    return slots_ == other.slots_ && std::equal((*this)[a], (*this)[a] + slots_, other[b]);
  }

 private:
  size_t slots_ = 0;
  std::vector<uint32_t> values_;
};

// The smallest sync that orders a racing pair, as ops to insert.
struct SyncSuggestion {
  // CrossRank: the pair is on two ranks; only a collective can order it (not inserted or verified).
  enum class Kind { EventRecordAndWait, EventRecordAndHostSync, RecordStream, CrossRank } kind = Kind::EventRecordAndWait;
  int after_op = -1;       // the record goes right after this op (the earlier access)
  int before_op = -1;      // the wait (or record_stream) goes right before this op (the later access)
  int record_stream = -1;  // stream the event is recorded on / named by record_stream
  int wait_stream = -1;    // stream that waits (-1: the host)
  int buffer = -1;         // RecordStream: the buffer
  std::string text;        // "record event E after op X on stream compute; wait on it in stream copy before op Y"
  bool verified = false;   // inserted and re-checked: the pair no longer races
  bool checked = false;    // whether verification ran (it is capped per report)
};

struct Race {
  int earlier_op = -1, later_op = -1;  // indices into EventModel::ops (earlier in issue order)
  int buffer = -1;
  int64_t offset = 0, bytes = 0;       // the overlapping byte range
  bool earlier_write = false, later_write = false;
  SyncSuggestion fix;
  std::string kind() const;            // "write after read", "read after write", "write after write"
};

struct RaceCheckOptions {
  size_t max_races = 1000;        // stop recording after this many (counting continues)
  size_t max_verified_fixes = 64; // suggestions re-verified by re-running the checker
  bool suggest_fixes = true;
  bool record_clocks = false;     // keep the clock of every work op (for happens-before comparisons)
  // Order ranks at collectives (see above). Off: ranks never order each other (the pre-2026-11
  // semantics, kept for tests that show what the collective ordering adds).
  bool collectives_order_ranks = true;
};

struct RaceReport {
  std::vector<Race> races;
  size_t race_count = 0;            // including those beyond max_races
  size_t ops_checked = 0;
  std::vector<int> work_ops;        // record_clocks: the work ops, in check order (host order per
                                    // rank; ranks interleaved at collectives)
  ClockTable work_clocks;           // record_clocks: per work op, its clock
  std::vector<int> clock_slot_stream;  // record_clocks: clock slot -> stream index (-1: a host slot)
  std::vector<int> clock_slot_rank;    // record_clocks: clock slot -> rank
  bool ok() const { return race_count == 0; }
};

RaceReport check_races(const EventModel& model, const RaceCheckOptions& options = {});

// The model with a suggestion's ops inserted (for verification and for users who want to see it).
EventModel with_sync(const EventModel& model, const SyncSuggestion& fix);

// True when both models have the same work ops (kinds, streams, names, in order) and every work op
// has the same vector clock: then every happens-before relation between them is the same, so the
// sync ops that differ are redundant.
bool same_happens_before(const EventModel& a, const EventModel& b);

// "layer 3 recompute (rank 0, device 0, stream compute, iteration 0, backward)".
std::string describe_op(const EventModel& model, int op);
// Two lines: the pair and buffer; the suggested sync and whether it was verified.
std::string describe_race(const EventModel& model, const Race& race);

}  // namespace hookstream
