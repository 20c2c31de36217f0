#include "sim/streams/race_checker.h"

#include <algorithm>
#include <limits>

namespace hookstream {

std::string Race::kind() const {
  if (earlier_write && later_write) return "write after write";
  if (earlier_write) return "read after write";
  return "write after read";
}

namespace {

constexpr int64_t kWholeBuffer = std::numeric_limits<int64_t>::max();

inline void join(VectorClock& into, const VectorClock& other) {
  for (size_t i = 0; i < into.size(); ++i) into[i] = std::max(into[i], other[i]);
}

bool is_work(OpKind kind) {
  return kind == OpKind::Kernel || kind == OpKind::Copy || kind == OpKind::Memset || kind == OpKind::Collective ||
         kind == OpKind::Free || kind == OpKind::HostCompute;
}

// One access remembered on a buffer: who (slot, seq) and which bytes.
struct AccessRecord {
  int op;
  int slot;
  uint32_t seq;
  int64_t begin, end;
  bool write;
};

// Static facts about streams, computed once per model. Clock slots: stream s is slot s, rank r's
// host thread is slot streams + r, so clocks of different ranks can be joined at collectives.
struct StreamLayout {
  std::vector<int> legacy_default;        // stream -> its device's legacy default stream, or -1
  std::vector<std::vector<int>> blocking; // legacy default stream -> blocking streams of its device
  int ranks = 0;
  int slots = 0;
  int host_slot(int rank) const { return slots - ranks + rank; }
};

StreamLayout layout_of(const EventModel& model) {
  StreamLayout layout;
  for (const Stream& s : model.streams) layout.ranks = std::max(layout.ranks, s.rank + 1);
  for (const Op& op : model.ops) layout.ranks = std::max(layout.ranks, op.rank + 1);
  layout.slots = static_cast<int>(model.streams.size()) + layout.ranks;
  layout.legacy_default.assign(model.streams.size(), -1);
  layout.blocking.resize(model.streams.size());
  for (size_t d = 0; d < model.streams.size(); ++d) {
    if (!model.streams[d].legacy_default) continue;
    for (size_t s = 0; s < model.streams.size(); ++s) {
      const Stream& stream = model.streams[s];
      if (s == d || stream.rank != model.streams[d].rank || stream.device != model.streams[d].device) continue;
      if (!stream.non_blocking) {
        layout.legacy_default[s] = static_cast<int>(d);
        layout.blocking[d].push_back(static_cast<int>(s));
      }
    }
  }
  return layout;
}

class Checker {
 public:
  Checker(const EventModel& model, const RaceCheckOptions& options)
      : model_(model), options_(options), layout_(layout_of(model)) {
    const VectorClock zero(layout_.slots, 0);
    streams_.assign(model.streams.size(), zero);
    hosts_.assign(layout_.ranks, zero);
    events_.assign(model.events.size(), zero);
    recorded_.assign(model.events.size(), 0);
    accesses_.resize(model.buffers.size());
    record_streams_.resize(model.buffers.size());
    scratch_ = zero;
  }

  RaceReport run() {
    RaceReport report;
    if (options_.record_clocks) {
      report.work_clocks.set_slots(layout_.slots);
      report.work_clocks.reserve(model_.ops.size());
      for (int s = 0; s < layout_.slots; ++s) {
        const bool host = s >= static_cast<int>(model_.streams.size());
        report.clock_slot_stream.push_back(host ? -1 : s);
        report.clock_slot_rank.push_back(host ? s - static_cast<int>(model_.streams.size()) : model_.streams[s].rank);
      }
    }
    if (!options_.collectives_order_ranks) {
      for (size_t i = 0; i < model_.ops.size(); ++i) step(static_cast<int>(i), report);
    } else {
      run_with_collectives(report);
    }
    report.ops_checked = model_.ops.size();
    return report;
  }

 private:
  static bool is_collective(const Op& op) { return op.kind == OpKind::Collective && op.stream >= 0; }

  // Each rank runs in host order until its next collective; when every unfinished rank waits at
  // one, the k-th collectives of all ranks are checked as one call (the same grouping as the time
  // model's scheduler). A rank with fewer collectives simply finishes (the DDP verifier reports
  // the mismatch); the others' later collectives then join only the ranks still waiting.
  void run_with_collectives(RaceReport& report) {
    std::vector<std::vector<int>> by_rank(layout_.ranks);
    for (size_t i = 0; i < model_.ops.size(); ++i) by_rank[model_.ops[i].rank].push_back(static_cast<int>(i));
    std::vector<size_t> cursor(layout_.ranks, 0);
    std::vector<int> seen(layout_.ranks, 0);
    for (;;) {
      std::vector<int> waiting;
      for (int rank = 0; rank < layout_.ranks; ++rank) {
        const std::vector<int>& ops = by_rank[rank];
        size_t& at = cursor[rank];
        while (at < ops.size() && !is_collective(model_.ops[ops[at]])) step(ops[at++], report);
        if (at < ops.size()) waiting.push_back(rank);
      }
      if (waiting.empty()) return;
      int ordinal = seen[waiting.front()];
      for (int rank : waiting) ordinal = std::min(ordinal, seen[rank]);
      std::vector<int> members;
      for (int rank : waiting) {
        if (seen[rank] == ordinal) members.push_back(by_rank[rank][cursor[rank]]);
      }
      collective(members, report);
      for (int op : members) {
        const int rank = model_.ops[op].rank;
        ++cursor[rank];
        ++seen[rank];
      }
    }
  }

  // One collective call over `ops` (one per rank): each rank's stream is issued and ticked, then
  // every participating stream takes the join of all of them, and each rank's accesses are checked
  // at that joined clock.
  void collective(const std::vector<int>& ops, RaceReport& report) {
    VectorClock joined(layout_.slots, 0);
    for (int index : ops) {
      const Op& op = model_.ops[index];
      issue(op.stream, op.rank);
      ++streams_[op.stream][op.stream];
      join(joined, streams_[op.stream]);
    }
    for (int index : ops) {
      const Op& op = model_.ops[index];
      streams_[op.stream] = joined;
      for (const BufferAccess& access : op.accesses) check_access(index, op.stream, joined[op.stream], joined, access, report);
      if (options_.record_clocks) {
        report.work_ops.push_back(index);
        report.work_clocks.push_back(joined);
      }
      if (op.blocks_host) join(hosts_[op.rank], joined);
    }
  }

  // The host issues the op: it is ordered after everything the host has waited for, and the legacy
  // default stream's implicit synchronization applies.
  void issue(int stream, int rank) {
    VectorClock& clock = streams_[stream];
    join(clock, hosts_[rank]);
    const int legacy = layout_.legacy_default[stream];
    if (legacy >= 0) join(clock, streams_[legacy]);
    for (int blocking : layout_.blocking[stream]) join(clock, streams_[blocking]);
  }

  void step(int index, RaceReport& report) {
    const Op& op = model_.ops[index];
    VectorClock& host = hosts_[op.rank];
    switch (op.kind) {
      case OpKind::EventRecord:
        issue(op.stream, op.rank);
        events_[op.event] = streams_[op.stream];
        recorded_[op.event] = 1;
        return;
      case OpKind::StreamWait:
        issue(op.stream, op.rank);
        if (op.event >= 0) {
          if (recorded_[op.event]) join(streams_[op.stream], events_[op.event]);  // never recorded: no-op
        } else if (op.sync_stream >= 0) {
          join(streams_[op.stream], streams_[op.sync_stream]);
        }
        return;
      // Imported traces can hold syncs whose event or stream the importer could not resolve: they
      // order nothing we know of, so they add no happens-before edge (a race they might have
      // prevented is still reported, with the unresolved sync in the trace as its evidence).
      case OpKind::EventSync:
        if (op.event >= 0 && recorded_[op.event]) join(host, events_[op.event]);
        return;
      case OpKind::StreamSync:
        if (op.sync_stream >= 0) join(host, streams_[op.sync_stream]);
        return;
      case OpKind::DeviceSync:
        for (size_t s = 0; s < model_.streams.size(); ++s) {
          const Stream& stream = model_.streams[s];
          if (stream.rank == op.rank && (op.stream < 0 || stream.device == model_.streams[op.stream].device)) join(host, streams_[s]);
        }
        return;
      case OpKind::RecordStream:
        for (const BufferAccess& access : op.accesses) {
          std::vector<int>& named = record_streams_[access.buffer];
          if (std::find(named.begin(), named.end(), op.stream) == named.end()) named.push_back(op.stream);
        }
        return;
      case OpKind::Alloc:
      case OpKind::Marker:
        return;
      default:
        break;
    }
    if (!is_work(op.kind)) return;
    int slot;
    VectorClock* clock;
    if (op.stream >= 0) {
      issue(op.stream, op.rank);
      slot = op.stream;
      clock = &streams_[op.stream];
    } else {
      slot = layout_.host_slot(op.rank);
      clock = &host;
    }
    ++(*clock)[slot];
    const VectorClock* at = clock;
    if (op.kind == OpKind::Free) {
      // CUDACachingAllocator::free -> insert_events: the block is reusable only after every stream
      // named by record_stream() reaches its current work.
      scratch_ = *clock;
      if (!op.accesses.empty()) {
        for (int named : record_streams_[op.accesses[0].buffer]) join(scratch_, streams_[named]);
      }
      for (const BufferAccess& access : op.accesses) record_streams_[access.buffer].clear();
      at = &scratch_;
    }
    for (const BufferAccess& access : op.accesses) check_access(index, slot, (*clock)[slot], *at, access, report);
    if (options_.record_clocks) {
      report.work_ops.push_back(index);
      report.work_clocks.push_back(*at);
    }
    if (op.blocks_host && op.stream >= 0) join(host, *clock);
  }

  void check_access(int index, int slot, uint32_t seq, const VectorClock& at, const BufferAccess& access, RaceReport& report) {
    const Buffer& buffer = model_.buffers[access.buffer];
    const int64_t begin = access.offset;
    const int64_t end = access.bytes < 0 ? (buffer.bytes > 0 ? buffer.bytes : kWholeBuffer) : access.offset + access.bytes;
    std::vector<AccessRecord>& records = accesses_[access.buffer];
    for (const AccessRecord& r : records) {
      if (r.op == index || r.end <= begin || end <= r.begin || !(r.write || access.write)) continue;
      if (at[r.slot] >= r.seq) continue;  // r happens before this access
      ++report.race_count;
      if (report.races.size() >= options_.max_races) continue;
      Race race;
      race.earlier_op = r.op;
      race.later_op = index;
      race.buffer = access.buffer;
      race.offset = std::max(begin, r.begin);
      const int64_t overlap_end = std::min(end, r.end);
      race.bytes = overlap_end == kWholeBuffer ? buffer.bytes : overlap_end - race.offset;
      race.earlier_write = r.write;
      race.later_write = access.write;
      report.races.push_back(race);
    }
    // Keep the history small: a write supersedes every access it covers (they are ordered before it
    // or already reported); a read supersedes earlier reads of the same slot that it covers.
    records.erase(std::remove_if(records.begin(), records.end(),
                                 [&](const AccessRecord& r) {
                                   const bool covered = begin <= r.begin && r.end <= end;
                                   return covered && (access.write || (!r.write && r.slot == slot));
                                 }),
                  records.end());
    records.push_back(AccessRecord{index, slot, seq, begin, end, access.write});
  }

  const EventModel& model_;
  RaceCheckOptions options_;
  StreamLayout layout_;
  std::vector<VectorClock> streams_, hosts_, events_;
  std::vector<char> recorded_;
  std::vector<std::vector<AccessRecord>> accesses_;
  std::vector<std::vector<int>> record_streams_;  // buffer -> streams named by record_stream since its last free
  VectorClock scratch_;
};

std::string stream_name(const EventModel& model, int stream) {
  return stream < 0 ? "host" : model.streams[stream].name;
}

SyncSuggestion suggest(const EventModel& model, const Race& race) {
  const Op& earlier = model.ops[race.earlier_op];
  const Op& later = model.ops[race.later_op];
  SyncSuggestion fix;
  fix.after_op = race.earlier_op;
  fix.before_op = race.later_op;
  fix.record_stream = earlier.stream;
  fix.wait_stream = later.stream;
  fix.buffer = race.buffer;
  const std::string x = "`" + earlier.name + "`", y = "`" + later.name + "`";
  if (earlier.rank != later.rank) {
    fix.kind = SyncSuggestion::Kind::CrossRank;
    fix.text = "order " + x + " (rank " + std::to_string(earlier.rank) + ") before " + y + " (rank " +
               std::to_string(later.rank) + ") through a collective both ranks take part in: " + x +
               " before it on the collective's stream, " + y + " after it";
    return fix;
  }
  if (later.kind == OpKind::Free && earlier.stream >= 0) {
    // The PyTorch idiom for a block used on a side stream (torch.Tensor.record_stream).
    fix.kind = SyncSuggestion::Kind::RecordStream;
    fix.text = "call " + model.buffers[race.buffer].name + ".record_stream(" + stream_name(model, earlier.stream) +
               ") before " + y + " (or record an event after " + x + " on stream " + stream_name(model, earlier.stream) +
               " and wait on it in stream " + stream_name(model, later.stream) + " before the free)";
  } else if (later.stream < 0) {
    fix.kind = SyncSuggestion::Kind::EventRecordAndHostSync;
    fix.text = "record an event after " + x + " on stream " + stream_name(model, earlier.stream) +
               "; synchronize the host on it before " + y;
  } else {
    fix.kind = SyncSuggestion::Kind::EventRecordAndWait;
    fix.text = "record an event after " + x + " on stream " + stream_name(model, earlier.stream) + "; wait on it in stream " +
               stream_name(model, later.stream) + " before " + y;
  }
  return fix;
}

}  // namespace

EventModel with_sync(const EventModel& model, const SyncSuggestion& fix) {
  EventModel out;
  out.streams = model.streams;
  out.buffers = model.buffers;
  out.events = model.events;
  out.source = model.source;
  const Op& earlier = model.ops[fix.after_op];
  const int event = out.add_event(Event{"suggested_sync", earlier.rank});
  out.ops.reserve(model.ops.size() + 2);
  for (size_t i = 0; i < model.ops.size(); ++i) {
    const int index = static_cast<int>(i);
    if (index == fix.before_op) {
      Op op;
      op.rank = model.ops[i].rank;
      op.layer = model.ops[i].layer;
      op.phase = model.ops[i].phase;
      op.iteration = model.ops[i].iteration;
      op.micro_step = model.ops[i].micro_step;
      if (fix.kind == SyncSuggestion::Kind::RecordStream) {
        op.kind = OpKind::RecordStream;
        op.stream = fix.record_stream;
        op.accesses = {{fix.buffer, 0, -1, false}};
        op.name = "suggested record_stream";
      } else if (fix.kind == SyncSuggestion::Kind::EventRecordAndHostSync) {
        op.kind = OpKind::EventSync;
        op.event = event;
        op.name = "suggested event synchronize";
      } else {
        op.kind = OpKind::StreamWait;
        op.stream = fix.wait_stream;
        op.event = event;
        op.name = "suggested wait";
      }
      out.ops.push_back(std::move(op));
    }
    out.ops.push_back(model.ops[i]);
    if (index == fix.after_op && fix.kind != SyncSuggestion::Kind::RecordStream) {
      Op op;
      op.kind = OpKind::EventRecord;
      op.rank = earlier.rank;
      op.stream = fix.record_stream;
      op.event = event;
      op.name = "suggested record";
      out.ops.push_back(std::move(op));
    }
  }
  return out;
}

RaceReport check_races(const EventModel& model, const RaceCheckOptions& options) {
  RaceReport report = Checker(model, options).run();
  if (!options.suggest_fixes) return report;
  RaceCheckOptions recheck;
  recheck.suggest_fixes = false;
  size_t verified = 0;
  for (Race& race : report.races) {
    race.fix = suggest(model, race);
    // Events do not cross processes: ops of two ranks are ordered only through a collective both
    // take part in; there is no sync to insert and verify.
    if (model.ops[race.earlier_op].rank != model.ops[race.later_op].rank) continue;
    if (verified >= options.max_verified_fixes) continue;
    ++verified;
    const EventModel fixed = with_sync(model, race.fix);
    // Index shift: the record lands after `after_op`, the wait before `before_op`.
    const int inserted_before_later = race.fix.kind == SyncSuggestion::Kind::RecordStream ? 1 : 2;
    const int later = race.later_op + inserted_before_later;
    const RaceReport again = Checker(fixed, recheck).run();
    race.fix.checked = true;
    race.fix.verified = std::none_of(again.races.begin(), again.races.end(), [&](const Race& r) {
      return r.earlier_op == race.earlier_op && r.later_op == later && r.buffer == race.buffer;
    });
  }
  return report;
}

bool same_happens_before(const EventModel& a, const EventModel& b) {
  RaceCheckOptions options;
  options.record_clocks = true;
  options.suggest_fixes = false;
  options.max_races = 0;
  const RaceReport ra = Checker(a, options).run();
  const RaceReport rb = Checker(b, options).run();
  if (ra.work_ops.size() != rb.work_ops.size()) return false;
  for (size_t i = 0; i < ra.work_ops.size(); ++i) {
    const Op& x = a.ops[ra.work_ops[i]];
    const Op& y = b.ops[rb.work_ops[i]];
    if (x.kind != y.kind || x.stream != y.stream || x.name != y.name) return false;
    if (!ra.work_clocks.same(i, rb.work_clocks, i)) return false;
  }
  return true;
}

std::string describe_op(const EventModel& model, int index) {
  const Op& op = model.ops[index];
  std::string text = "`" + op.name + "` (rank " + std::to_string(op.rank);
  if (op.stream >= 0) text += ", device " + std::to_string(model.streams[op.stream].device);
  text += ", stream " + stream_name(model, op.stream) + ", iteration " + std::to_string(op.iteration);
  if (op.micro_step > 0) text += ", micro-step " + std::to_string(op.micro_step);
  if (op.layer >= 0) text += ", layer " + std::to_string(op.layer);
  return text + ", " + op.phase + ")";
}

std::string describe_race(const EventModel& model, const Race& race) {
  const Buffer& buffer = model.buffers[race.buffer];
  std::string text = race.kind() + " on " + buffer.name + " bytes [" + std::to_string(race.offset) + ", " +
                     std::to_string(race.offset + race.bytes) + ") (" + to_string(buffer.memory) + ", rank " +
                     std::to_string(buffer.rank) + (buffer.device >= 0 ? ", device " + std::to_string(buffer.device) : "") +
                     "): " + describe_op(model, race.earlier_op) + " and " + describe_op(model, race.later_op) +
                     " are not ordered\n";
  if (!race.fix.text.empty()) {
    text += "  fix: " + race.fix.text +
            (race.fix.checked ? (race.fix.verified ? " [verified: re-checked, the pair is ordered]" : " [NOT sufficient when re-checked]")
                              : " [not re-checked: verification limit]") + "\n";
  }
  return text;
}

}  // namespace hookstream
