#include "traces/importers/kineto/kineto_importer.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "sim/inputs/input_error.h"
#include "traces/cuda_api.h"
#include "traces/importers/gzip_reader.h"
#include "traces/importers/kineto/kineto_event_scanner.h"
#include "traces/importers/trace_builder.h"
#include "traces/runtime_annotations.h"

namespace hookstream {

namespace {

constexpr int64_t kOriginStepNs = 1000000000000000LL;  // 10^15 ns

using Micros = KinetoMicros;

enum class Category { Other, Kernel, Copy, Memset, Runtime, Sync, Annotation };

// Kineto's categories; traces before 2022 capitalised them (Kernel, Memcpy, Memset, Runtime).
// Asked once or twice for each of a trace's ~10^5 events: compare lengths first.
Category category_of(const std::string& cat) {
  // Only called on words of cat's length (the switch below).
  const auto is = [&cat](std::string_view word) { return std::memcmp(cat.data(), word.data(), word.size()) == 0; };
  switch (cat.size()) {
    case 6:
      if (is("kernel") || is("Kernel")) return Category::Kernel;
      if (is("Memcpy")) return Category::Copy;
      if (is("Memset")) return Category::Memset;
      if (is("Driver")) return Category::Runtime;
      break;
    case 7:
      if (is("Runtime")) return Category::Runtime;
      break;
    case 9:
      if (is("cuda_sync")) return Category::Sync;
      break;
    case 10:
      if (is("gpu_memcpy")) return Category::Copy;
      if (is("gpu_memset")) return Category::Memset;
      break;
    case 11:
      if (is("cuda_driver")) return Category::Runtime;
      break;
    case 12:
      if (is("cuda_runtime")) return Category::Runtime;
      break;
    case 15:
      if (is("user_annotation")) return Category::Annotation;
      break;
    default: break;
  }
  return Category::Other;
}

// Kept small (no Op yet: that is built once, in the model): a trace has ~10^4 of them.
struct GpuRecord {
  Text name;
  Category category;  // Kernel, Copy or Memset
  int64_t correlation, bytes, device, context, stream;
  Micros ts, dur;
};
struct CallRecord {
  Text name;
  int64_t correlation;
  int64_t tid;  // the host thread that made the call
  Micros ts, dur;
};
struct SyncRecord {
  Text kind;
  int64_t device, context, stream, correlation, wait_on_stream, wait_record, wait_event;
  Micros ts, dur;
};
struct AnnotationRecord {
  Text name;
  Micros ts, dur;
};

// "Memcpy HtoD (Pageable -> Device)": direction and memory kinds exist only in the name.
MemoryKind memory_from_word(const std::string& word) {
  if (word == "Pageable") return MemoryKind::PageableHost;
  if (word == "Pinned") return MemoryKind::PinnedHost;
  if (word == "Device" || word == "Array") return MemoryKind::Device;
  if (word == "Managed") return MemoryKind::Managed;
  return MemoryKind::Unknown;
}
// What a copy's name says: "Memcpy HtoD (Pageable -> Device)".
struct CopyName {
  CopyKind copy = CopyKind::Unknown;
  MemoryKind source = MemoryKind::Unknown, destination = MemoryKind::Unknown;
};
CopyName parse_copy_name(const std::string& name) {
  CopyName out;
  if (name.find("HtoD") != std::string::npos) out.copy = CopyKind::HostToDevice;
  else if (name.find("DtoH") != std::string::npos) out.copy = CopyKind::DeviceToHost;
  else if (name.find("DtoD") != std::string::npos) out.copy = CopyKind::DeviceToDevice;
  else if (name.find("PtoP") != std::string::npos) out.copy = CopyKind::PeerToPeer;
  const size_t open = name.find('('), arrow = name.find(" -> "), close = name.rfind(')');
  if (open != std::string::npos && arrow != std::string::npos && close != std::string::npos && open < arrow &&
      arrow < close) {
    out.source = memory_from_word(name.substr(open + 1, arrow - open - 1));
    out.destination = memory_from_word(name.substr(arrow + 4, close - arrow - 4));
  }
  return out;
}
// "Memset (Device)": the memory it sets.
MemoryKind parse_memset_name(const std::string& name) {
  const size_t open = name.find('('), close = name.rfind(')');
  if (open != std::string::npos && close != std::string::npos && open < close) {
    return memory_from_word(name.substr(open + 1, close - open - 1));
  }
  return MemoryKind::Unknown;
}

template <typename Record, typename Rename>
void move_renamed(std::vector<Record>& from, std::vector<Record>& to, const Rename& rename, Text Record::*field) {
  for (Record& r : from) {
    r.*field = rename(r.*field);
    to.push_back(std::move(r));
  }
  std::vector<Record>().swap(from);  // its memory serves the next chunk's records
}

// Events dropped unread, counted by what they are (a category or a phase). A trace has a few such
// kinds, each dropped many times in a row (cpu_op, python_function), so the kind counted last is
// compared first: counting costs one string compare per dropped event.
class DroppedKinds {
 public:
  void add(const std::string& kind) {
    if (last_ < counts_.size() && counts_[last_].first == kind) {
      ++counts_[last_].second;
      return;
    }
    for (size_t i = 0; i < counts_.size(); ++i) {
      if (counts_[i].first == kind) {
        ++counts_[i].second;
        last_ = i;
        return;
      }
    }
    counts_.emplace_back(kind, 1);
    last_ = counts_.size() - 1;
  }
  void add_all(const DroppedKinds& other) {
    for (const auto& [kind, n] : other.counts_) {
      add(kind);
      counts_[last_].second += n - 1;
    }
  }
  const std::vector<std::pair<std::string, int64_t>>& counts() const { return counts_; }

 private:
  std::vector<std::pair<std::string, int64_t>> counts_;
  size_t last_ = 0;
};

// Keeps the records of the events the scanner hands over, by category.
class KinetoRecords : public KinetoEventSink {
 public:
  std::vector<GpuRecord> gpu;
  std::vector<CallRecord> calls;
  std::vector<SyncRecord> syncs;
  std::vector<AnnotationRecord> annotations;
  int64_t min_whole_us = std::numeric_limits<int64_t>::max();
  TextInterner names;

  // What was dropped, for the report on a trace without GPU work (trace_contents.h): complete
  // events by category, the others by phase.
  mutable DroppedKinds dropped_categories;
  DroppedKinds dropped_phases;

  bool wants_category(const std::string& cat) const override {
    if (category_of(cat) != Category::Other) return true;
    dropped_categories.add(cat);
    return false;
  }
  void dropped_phase(const std::string& ph) override { dropped_phases.add(ph); }

  // The records of every chunk of a file (a KinetoRecords sink each, in file order) as one: room
  // for all of them is taken once, and each chunk's records are appended and then freed.
  static KinetoRecords merged(std::vector<std::unique_ptr<KinetoEventSink>>& chunks) {
    KinetoRecords all = std::move(static_cast<KinetoRecords&>(*chunks.front()));
    if (chunks.size() > 1) {
      size_t gpu_count = 0, call_count = 0, sync_count = 0, annotation_count = 0;
      for (const auto& chunk : chunks) {
        const auto& r = static_cast<const KinetoRecords&>(*chunk);
        gpu_count += r.gpu.size(), call_count += r.calls.size(), sync_count += r.syncs.size();
        annotation_count += r.annotations.size();
      }
      all.gpu.reserve(gpu_count), all.calls.reserve(call_count), all.syncs.reserve(sync_count);
      all.annotations.reserve(annotation_count);
    }
    for (size_t k = 1; k < chunks.size(); ++k) {
      all.append(std::move(static_cast<KinetoRecords&>(*chunks[k])));
      chunks[k].reset();
    }
    return all;
  }

 private:
  // The records of the chunk after this one's (scanned on another thread, with its own interner):
  // appended in order, their names re-interned here so equal names stay one shared string.
  void append(KinetoRecords&& next) {
    std::unordered_map<const void*, Text> same;  // next's name -> this interner's
    const auto name = [&](const Text& t) -> const Text& {
      const auto [it, added] = same.try_emplace(t.id());
      if (added) it->second = names(t.str());
      return it->second;
    };
    move_renamed(next.gpu, gpu, name, &GpuRecord::name);
    move_renamed(next.calls, calls, name, &CallRecord::name);
    move_renamed(next.syncs, syncs, name, &SyncRecord::kind);
    move_renamed(next.annotations, annotations, name, &AnnotationRecord::name);
    min_whole_us = std::min(min_whole_us, next.min_whole_us);
    dropped_categories.add_all(next.dropped_categories);
    dropped_phases.add_all(next.dropped_phases);
  }

 public:
  void event(KinetoEvent& e) override {
    // A ts the scanner could not hold in int64 microseconds (kKinetoAbsent: a damaged number, such
    // as 1.7e22 where fuzz/replay changed a digit) is no time at all: the event is dropped like
    // one without "ts". It used to be taken as INT64_MIN us, which then overflowed the origin.
    if (e.ph.size() != 1 || e.ph[0] != 'X' || !e.has_ts || e.ts.whole == kKinetoAbsent) return;
    if (e.dur.whole == kKinetoAbsent) e.dur = KinetoMicros{};  // the same for "dur": as if absent
    Category category = category_of(e.cat);
    // LibTorch 1.13's legacy profiler (RecordProfile, profiler_legacy.cpp writeProfilerEventsToStream)
    // writes a bare array of "X" events with no "cat" and pid "CPU Functions": its record_function
    // ranges are the hookstream runtime's annotations.
    if (category == Category::Other && e.cat.empty() && is_runtime_annotation(e.name)) {
      category = Category::Annotation;
    }
    if (category == Category::Other) {
      dropped_categories.add(e.cat.empty() ? std::string("(no cat)") : e.cat);
      return;
    }
    min_whole_us = std::min(min_whole_us, e.ts.whole);
    const auto or_else = [](int64_t v, int64_t fallback) { return v == kKinetoAbsent ? fallback : v; };
    // Names are interned, not moved: the scanner's strings keep their capacity for the next event,
    // and a trace's few distinct names are stored once, shared by every op that has them.
    switch (category) {
      case Category::Kernel: case Category::Copy: case Category::Memset: {
        // pid is the device and tid the stream; args say the same in traces since 2021.
        gpu.push_back(GpuRecord{names(e.name), category, or_else(e.correlation, -1), or_else(e.bytes, 0),
                                or_else(e.device, or_else(e.pid, 0)), or_else(e.context, 0),
                                or_else(e.stream, or_else(e.tid, 0)), e.ts, e.dur});
        break;
      }
      case Category::Runtime:
        calls.push_back(CallRecord{names(e.name), or_else(e.correlation, -1), or_else(e.tid, -1), e.ts, e.dur});
        break;
      case Category::Sync:
        syncs.push_back(SyncRecord{names(e.sync_kind.empty() ? e.name : e.sync_kind), or_else(e.device, or_else(e.pid, 0)),
                                   or_else(e.context, 0), or_else(e.stream, or_else(e.tid, -1)),
                                   or_else(e.correlation, -1), or_else(e.wait_on_stream, -1),
                                   or_else(e.wait_record, -1), or_else(e.wait_event, -1), e.ts, e.dur});
        break;
      case Category::Annotation:
        annotations.push_back(AnnotationRecord{names(e.name), e.ts, e.dur});
        break;
      default:
        break;
    }
  }
};

// Builds the model from the parsed records: host calls, GPU work, and the sync reconstruction
// (waits -> the cudaEventRecord call they name -> the stream it recorded on).
class KinetoAssembler {
 public:
  KinetoAssembler(KinetoRecords& parsed, const KinetoTraceInfo& info, const std::string& path)
      : parsed_(parsed), builder_("kineto: " + path) {
    // Newer traces: ts relative to baseTimeNanoseconds. Older: absolute microseconds.
    if (info.has_base_time) {
      const int64_t origin_ns = info.base_time_ns / kOriginStepNs * kOriginStepNs;
      offset_ns_ = static_cast<double>(info.base_time_ns - origin_ns);
      origin_us_ = 0;
    } else if (parsed.min_whole_us != std::numeric_limits<int64_t>::max()) {
      origin_us_ = parsed.min_whole_us / (kOriginStepNs / 1000) * (kOriginStepNs / 1000);
    }
  }

  EventModel build(int rank) {
    constexpr int64_t process = 0;  // one file is one rank
    calls_.reserve(parsed_.calls.size());
    for (CallRecord& c : parsed_.calls) {
      const ApiRole role = roles_(c.name, [](const std::string& name) { return classify_api(name); });
      Op op;
      switch (role) {
        case ApiRole::EventSync: op.kind = OpKind::EventSync; break;
        case ApiRole::StreamSync: op.kind = OpKind::StreamSync; break;
        case ApiRole::DeviceSync: op.kind = OpKind::DeviceSync; break;
        default: op.kind = OpKind::HostCompute; break;
      }
      op.blocks_host = blocks_host(role);
      op.start_ns = ns(c.ts);
      op.duration_ns = duration(c.dur);
      op.correlation = c.correlation;
      op.source_api = c.name;
      op.name = std::move(c.name);
      const double start = op.start_ns;
      const size_t handle = builder_.add_op(std::move(op), process, start);
      if (c.correlation >= 0) {
        calls_.push_back(Call{c.correlation, handle, start, role, c.tid});
      }
    }
    // Calls come in time order, and so, nearly always, in correlation order: then nothing moves.
    const auto by_correlation = [](const Call& a, const Call& b) { return a.correlation < b.correlation; };
    if (!std::is_sorted(calls_.begin(), calls_.end(), by_correlation)) {
      std::stable_sort(calls_.begin(), calls_.end(), by_correlation);
    }
    // PyTorch runs a CUDA backward on the autograd engine's own device thread
    // (torch/csrc/autograd/engine.cpp, Engine::start_device_threads / thread_main), while forward
    // and optimizer run on the thread that called them. So in a trace without phase ranges, GPU
    // work launched from another thread than the one that launched the first GPU op is backward
    // work (the step analysis uses it where no range says otherwise; NCCL kernels stay all-reduces).
    int64_t main_thread = -1;
    double first_launch = std::numeric_limits<double>::infinity();
    std::vector<const Call*> launches(parsed_.gpu.size());  // each GPU record's launching call, or null
    for (size_t i = 0; i < parsed_.gpu.size(); ++i) {
      const Call* call = launches[i] = find_call(parsed_.gpu[i].correlation);
      if (call && call->start < first_launch) {
        first_launch = call->start;
        main_thread = call->tid;
      }
    }
    const Text backward("backward");  // shared by every backward op
    for (size_t i = 0; i < parsed_.gpu.size(); ++i) {
      GpuRecord& g = parsed_.gpu[i];
      Op op;
      op.name = std::move(g.name);
      op.correlation = g.correlation;
      op.bytes = g.bytes;
      if (g.category == Category::Kernel) {
        op.kind = kernel_kinds_(op.name, [](const std::string& name) {
          return is_collective_kernel(name) ? OpKind::Collective : OpKind::Kernel;
        });
      } else if (g.category == Category::Copy) {
        op.kind = OpKind::Copy;
        const CopyName& parsed = copy_names_(op.name, parse_copy_name);
        op.copy = parsed.copy;
        op.source = parsed.source;
        op.destination = parsed.destination;
      } else {
        op.kind = OpKind::Memset;
        op.destination = memset_names_(op.name, parse_memset_name);
      }
      op.start_ns = ns(g.ts);
      op.duration_ns = duration(g.dur);
      const Call* call = launches[i];
      double issue = op.start_ns;
      ApiRole role = ApiRole::Other;
      if (call) {
        issue = call->start;
        role = call->role;
        op.source_api = builder_.op(call->handle).name;
        if (call->tid >= 0 && main_thread >= 0 && call->tid != main_thread) op.phase = backward;
      }
      // Same rule as nsys: cudaMemcpy/cudaMemset return when done; pageable copies are staged.
      if (op.kind == OpKind::Copy || op.kind == OpKind::Memset) {
        op.blocks_host = role == ApiRole::SyncCopy || role == ApiRole::SyncMemset ||
                         op.source == MemoryKind::PageableHost || op.destination == MemoryKind::PageableHost;
      }
      const size_t handle = builder_.add_op(std::move(op), process, issue);
      builder_.set_stream(handle, {process, g.device, g.context, g.stream});
    }
    for (const SyncRecord& s : parsed_.syncs) {
      const Call* call = find_call(s.correlation);
      // Classify by the API call's name when the call is in the trace: CUPTI emits "Event Sync"
      // records for cudaEventQuery too, which does not block (event-sync.json.gz has one).
      const ApiRole role = call ? call->role : role_from_sync_kind(s.kind);
      if (!is_sync_role(role)) {
        mark_record(s);
        continue;  // the call, where the trace has it, stays host time
      }
      size_t handle;
      if (call) {
        handle = call->handle;
      } else {
        // Host time in a sync call the trace lost; the code below makes it the sync it was (not
        // the Op default, a kernel, which would run on no stream).
        Op op;
        op.kind = OpKind::HostCompute;
        op.name = s.kind;
        op.start_ns = ns(s.ts);
        op.duration_ns = duration(s.dur);
        op.correlation = s.correlation;
        const double start = op.start_ns;
        handle = builder_.add_op(std::move(op), process, start);
      }
      Op& op = builder_.op(handle);
      if (role == ApiRole::StreamWait) {
        op.kind = OpKind::StreamWait;
        op.blocks_host = false;
        builder_.set_stream(handle, {process, s.device, s.context, s.stream});
        attach_event(handle, s);
      } else if (role == ApiRole::EventSync) {
        op.kind = OpKind::EventSync;
        op.blocks_host = true;
        attach_event(handle, s);
      } else if (role == ApiRole::StreamSync) {
        op.kind = OpKind::StreamSync;
        op.blocks_host = true;
        if (s.stream >= 0) builder_.set_sync_stream(handle, {process, s.device, s.context, s.stream});
      } else {
        op.kind = OpKind::DeviceSync;
        op.blocks_host = true;
      }
    }
    for (AnnotationRecord& a : parsed_.annotations) {
      Op op;
      op.kind = OpKind::Marker;
      op.name = std::move(a.name);
      op.start_ns = ns(a.ts);
      op.duration_ns = duration(a.dur);
      const double start = op.start_ns;
      builder_.add_op(std::move(op), process, start);
    }
    return builder_.finish(rank);
  }

 private:
  // The event a wait names: one record of it, by the record's correlation (-1 when the record
  // happened before the profiling window).
  void attach_event(size_t handle, const SyncRecord& s) {
    builder_.set_event(handle, 0, s.wait_record, s.wait_event, event_name(s));
    mark_record(s);
  }
  static std::string event_name(const SyncRecord& s) {
    return "event " + std::to_string(s.wait_event) +
           (s.wait_record >= 0 ? " (record " + std::to_string(s.wait_record) + ")" : "");
  }
  // Kineto has no record activity of its own: the wait says on which stream the cudaEventRecord
  // call with that correlation recorded, which makes that call an EventRecord op.
  void mark_record(const SyncRecord& s) {
    if (s.wait_record < 0 || s.wait_on_stream < 0) return;
    const Call* record = find_call(s.wait_record);
    if (!record) return;
    builder_.op(record->handle).kind = OpKind::EventRecord;
    builder_.set_stream(record->handle, {0, s.device, s.context, s.wait_on_stream});
    builder_.set_event(record->handle, 0, s.wait_record, s.wait_event, event_name(s));
  }

  static ApiRole role_from_sync_kind(const std::string& kind) {
    if (kind == "Stream Wait Event") return ApiRole::StreamWait;
    if (kind == "Event Sync") return ApiRole::EventSync;
    if (kind == "Stream Sync") return ApiRole::StreamSync;
    if (kind == "Context Sync") return ApiRole::DeviceSync;
    return ApiRole::Other;
  }

  double ns(const Micros& m) const {
    // Exact in int64 for any real trace; in a damaged one whose ts span more than int64 (-9e18 us
    // beside ordinary ones) the subtraction would overflow, so it is then done in double.
    int64_t whole;
    const double us = __builtin_sub_overflow(m.whole, origin_us_, &whole)
                          ? static_cast<double>(m.whole) - static_cast<double>(origin_us_)
                          : static_cast<double>(whole);
    return us * 1000.0 + m.fraction * 1000.0 + offset_ns_;
  }
  static double duration(const Micros& m) { return static_cast<double>(m.whole) * 1000.0 + m.fraction * 1000.0; }

  KinetoRecords& parsed_;
  // Per interned name (a trace launches few distinct kernels many times): classified once each.
  PerText<ApiRole> roles_;
  PerText<OpKind> kernel_kinds_;
  PerText<CopyName> copy_names_;
  PerText<MemoryKind> memset_names_;
  TraceBuilder builder_;
  int64_t origin_us_ = 0;
  double offset_ns_ = 0;
  // Host API calls, sorted by correlation once all are in: one allocation for ~25k calls (the
  // a100 trace), where a hash map takes one per call.
  struct Call {
    int64_t correlation;
    size_t handle;
    double start;
    ApiRole role;
    int64_t tid;
  };
  // The last call with this correlation (the stable sort keeps calls with equal ones in trace
  // order), or nullptr.
  const Call* find_call(int64_t correlation) const {
    const auto after = std::upper_bound(calls_.begin(), calls_.end(), correlation,
                                        [](int64_t c, const Call& call) { return c < call.correlation; });
    if (after == calls_.begin() || std::prev(after)->correlation != correlation) return nullptr;
    return &*std::prev(after);
  }
  std::vector<Call> calls_;
};

// A phase as the Trace Event Format names it, for the report.
std::string phase_label(const std::string& ph) {
  if (ph == "C") return "counter samples (ph C)";
  if (ph == "i" || ph == "I") return "instant events (ph " + ph + ")";
  if (ph == "M") return "metadata events (ph M)";
  if (ph == "s" || ph == "f" || ph == "t") return "flow events (ph " + ph + ")";
  if (ph == "b" || ph == "e" || ph == "n") return "async events (ph " + ph + ")";
  if (ph == "B" || ph == "E") return "duration begin/end events (ph " + ph + ")";
  return "events of ph " + ph;
}

}  // namespace

EventModel import_kineto_json(const std::string& path, int rank, TraceContents* contents) {
  // Parsed on up to four threads (the JSON scan is most of an import's time); the records are the
  // single-threaded scan's in any case (kineto_event_scanner.h says how that is proven).
  KinetoParallelScan scan;
  scan.threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
  std::vector<std::unique_ptr<KinetoEventSink>> sinks;
  const KinetoTraceInfo info =
      scan_kineto_trace_parallel(path, [] { return std::make_unique<KinetoRecords>(); }, sinks, scan);
  KinetoRecords records = KinetoRecords::merged(sinks);
  if (!info.saw_events) {
    throw InputError(path, "not a Chrome trace: no \"traceEvents\" array (read " + std::to_string(info.bytes) +
                               " bytes)");
  }
  if (contents) {
    contents->file = path;
    for (const auto& [cat, n] : records.dropped_categories.counts()) contents->other_events[cat + " events"] += n;
    for (const auto& [ph, n] : records.dropped_phases.counts()) contents->other_events[phase_label(ph)] += n;
  }
  return KinetoAssembler(records, info, path).build(rank);
}

}  // namespace hookstream
