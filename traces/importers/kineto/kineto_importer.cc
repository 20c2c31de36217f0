#include "traces/importers/kineto/kineto_importer.h"

#include <cmath>
#include <cstring>
#include <istream>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <vector>

#include "sim/input_error.h"
#include "traces/cuda_api.h"
#include "traces/importers/gzip_reader.h"
#include "traces/importers/trace_builder.h"
#include "traces/runtime_annotations.h"

namespace hookstream {

namespace {

constexpr int64_t kAbsent = std::numeric_limits<int64_t>::min();
constexpr int64_t kOriginStepNs = 1000000000000000LL;  // 10^15 ns

// A timestamp as written: whole microseconds plus a fraction, so integer traces stay exact.
struct Micros {
  int64_t whole = 0;
  double fraction = 0;
};

enum class Category { Other, Kernel, Copy, Memset, Runtime, Sync, Annotation };

// Kineto's categories; traces before 2022 capitalised them (Kernel, Memcpy, Memset, Runtime).
Category category_of(const std::string& cat) {
  if (cat == "kernel" || cat == "Kernel") return Category::Kernel;
  if (cat == "gpu_memcpy" || cat == "Memcpy") return Category::Copy;
  if (cat == "gpu_memset" || cat == "Memset") return Category::Memset;
  if (cat == "cuda_runtime" || cat == "cuda_driver" || cat == "Runtime" || cat == "Driver") return Category::Runtime;
  if (cat == "cuda_sync") return Category::Sync;
  if (cat == "user_annotation") return Category::Annotation;
  return Category::Other;
}

// The fields of one trace event we use; everything else is skipped while parsing.
struct RawEvent {
  std::string ph, cat, name, sync_kind;
  int64_t pid = kAbsent, tid = kAbsent;
  Micros ts, dur;
  bool has_ts = false, has_dur = false;
  int64_t device = kAbsent, context = kAbsent, stream = kAbsent, correlation = kAbsent, bytes = kAbsent;
  int64_t wait_on_stream = kAbsent, wait_record = kAbsent, wait_event = kAbsent;
  void clear() {
    ph.clear(); cat.clear(); name.clear(); sync_kind.clear();
    pid = tid = device = context = stream = correlation = bytes = wait_on_stream = wait_record = wait_event = kAbsent;
    ts = dur = Micros{};
    has_ts = has_dur = false;
  }
};

struct GpuRecord {
  Op op;
  int64_t device, context, stream;
  Micros ts, dur;
};
struct CallRecord {
  std::string name;
  int64_t correlation;
  Micros ts, dur;
};
struct SyncRecord {
  std::string kind;
  int64_t device, context, stream, correlation, wait_on_stream, wait_record, wait_event;
  Micros ts, dur;
};
struct AnnotationRecord {
  std::string name;
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
void parse_copy_name(const std::string& name, Op& op) {
  if (name.find("HtoD") != std::string::npos) op.copy = CopyKind::HostToDevice;
  else if (name.find("DtoH") != std::string::npos) op.copy = CopyKind::DeviceToHost;
  else if (name.find("DtoD") != std::string::npos) op.copy = CopyKind::DeviceToDevice;
  else if (name.find("PtoP") != std::string::npos) op.copy = CopyKind::PeerToPeer;
  const size_t open = name.find('('), arrow = name.find(" -> "), close = name.rfind(')');
  if (open != std::string::npos && arrow != std::string::npos && close != std::string::npos && open < arrow &&
      arrow < close) {
    op.source = memory_from_word(name.substr(open + 1, arrow - open - 1));
    op.destination = memory_from_word(name.substr(arrow + 4, close - arrow - 4));
  }
}
void parse_memset_name(const std::string& name, Op& op) {
  const size_t open = name.find('('), close = name.rfind(')');
  if (open != std::string::npos && close != std::string::npos && open < close) {
    op.destination = memory_from_word(name.substr(open + 1, close - open - 1));
  }
}

// SAX handler: keeps a RawEvent for the trace event being parsed and hands it on when it closes.
class ChromeTraceHandler : public nlohmann::json::json_sax_t {
 public:
  explicit ChromeTraceHandler(const std::string& path) : path_(path) {}

  std::vector<GpuRecord> gpu;
  std::vector<CallRecord> calls;
  std::vector<SyncRecord> syncs;
  std::vector<AnnotationRecord> annotations;
  bool saw_events = false;
  bool has_base_time = false;
  int64_t base_time_ns = 0;
  int64_t min_whole_us = std::numeric_limits<int64_t>::max();

  bool null() override { return value_skipped(); }
  bool boolean(bool) override { return value_skipped(); }
  bool number_integer(number_integer_t v) override { return integer(v); }
  bool number_unsigned(number_unsigned_t v) override {
    return integer(v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? kAbsent : static_cast<int64_t>(v));
  }
  bool number_float(number_float_t v, const string_t&) override {
    if (depth_ == event_depth_ && events_open_ && (key_ == Key::Ts || key_ == Key::Dur)) {
      const double whole = std::floor(v);
      Micros m{static_cast<int64_t>(whole), v - whole};
      set_time(m);
    }
    return true;
  }
  bool string(string_t& v) override {
    if (depth_ == event_depth_ && events_open_) {
      switch (key_) {
        case Key::Ph: event_.ph = std::move(v); break;
        case Key::Cat: event_.cat = std::move(v); break;
        case Key::Name: event_.name = std::move(v); break;
        default: break;
      }
    } else if (depth_ == event_depth_ + 1 && in_args_ && key_ == Key::SyncKind) {
      event_.sync_kind = std::move(v);
    }
    return true;
  }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    ++depth_;
    if (depth_ == 1) top_is_object_ = true;
    if (depth_ == event_depth_ && in_events_array()) event_.clear();
    if (depth_ == event_depth_ + 1) in_args_ = events_open_ && key_ == Key::Args;
    key_ = Key::Other;
    return true;
  }
  bool end_object() override {
    if (depth_ == event_depth_ && in_events_array()) take_event();
    if (depth_ == event_depth_ + 1) in_args_ = false;
    --depth_;
    key_ = Key::Other;
    return true;
  }
  bool start_array(std::size_t) override {
    ++depth_;
    if (depth_ == 1) {
      event_depth_ = 2;  // a bare array of events is also a Chrome trace
      events_array_depth_ = 1;
      events_open_ = true;
      saw_events = true;
    } else if (depth_ == 2 && top_is_object_ && key_ == Key::TraceEvents) {
      event_depth_ = 3;
      events_array_depth_ = 2;
      events_open_ = true;
      saw_events = true;
    }
    key_ = Key::Other;
    return true;
  }
  bool end_array() override {
    if (depth_ == events_array_depth_) events_open_ = false;
    --depth_;
    key_ = Key::Other;
    return true;
  }
  bool key(string_t& k) override {
    key_ = Key::Other;
    if (depth_ == event_depth_ && in_events_array()) {
      if (k == "ph") key_ = Key::Ph;
      else if (k == "cat") key_ = Key::Cat;
      else if (k == "name") key_ = Key::Name;
      else if (k == "pid") key_ = Key::Pid;
      else if (k == "tid") key_ = Key::Tid;
      else if (k == "ts") key_ = Key::Ts;
      else if (k == "dur") key_ = Key::Dur;
      else if (k == "args") key_ = Key::Args;
    } else if (depth_ == event_depth_ + 1 && in_args_) {
      if (k == "stream") key_ = Key::Stream;
      else if (k == "correlation") key_ = Key::Correlation;
      else if (k == "device") key_ = Key::Device;
      else if (k == "context") key_ = Key::Context;
      else if (k == "bytes") key_ = Key::Bytes;
      else if (k == "cuda_sync_kind") key_ = Key::SyncKind;
      else if (k == "wait_on_stream") key_ = Key::WaitOnStream;
      else if (k == "wait_on_cuda_event_record_corr_id") key_ = Key::WaitRecord;
      else if (k == "wait_on_cuda_event_id") key_ = Key::WaitEvent;
    } else if (depth_ == 1 && top_is_object_) {
      if (k == "traceEvents") key_ = Key::TraceEvents;
      else if (k == "baseTimeNanoseconds") key_ = Key::BaseTime;
    }
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::json::exception& e) override {
    // e.what() repeats the position in its own words; keep the reason after "parse error".
    std::string what = e.what();
    const size_t colon = what.rfind(": ");
    if (colon != std::string::npos) what = what.substr(colon + 2);
    // nlohmann counts the bytes read, the offending one included; report its 0-based offset.
    const std::size_t offset = position > 0 ? position - 1 : 0;
    throw InputError(path_, "malformed JSON at byte " + std::to_string(offset) + ": " + what);
  }

 private:
  enum class Key {
    Other, Ph, Cat, Name, Pid, Tid, Ts, Dur, Args, Stream, Correlation, Device, Context, Bytes, SyncKind,
    WaitOnStream, WaitRecord, WaitEvent, TraceEvents, BaseTime
  };

  bool in_events_array() const { return events_open_; }
  bool value_skipped() {
    key_ = Key::Other;
    return true;
  }
  void set_time(Micros m) {
    if (key_ == Key::Ts) {
      event_.ts = m;
      event_.has_ts = true;
    } else {
      event_.dur = m;
      event_.has_dur = true;
    }
  }
  bool integer(int64_t v) {
    if (depth_ == event_depth_ && in_events_array()) {
      switch (key_) {
        case Key::Pid: event_.pid = v; break;
        case Key::Tid: event_.tid = v; break;
        case Key::Ts: case Key::Dur: set_time(Micros{v, 0}); break;
        default: break;
      }
    } else if (depth_ == event_depth_ + 1 && in_args_) {
      switch (key_) {
        case Key::Stream: event_.stream = v; break;
        case Key::Correlation: event_.correlation = v; break;
        case Key::Device: event_.device = v; break;
        case Key::Context: event_.context = v; break;
        case Key::Bytes: event_.bytes = v; break;
        case Key::WaitOnStream: event_.wait_on_stream = v; break;
        case Key::WaitRecord: event_.wait_record = v; break;
        case Key::WaitEvent: event_.wait_event = v; break;
        default: break;
      }
    } else if (depth_ == 1 && top_is_object_ && key_ == Key::BaseTime) {
      has_base_time = true;
      base_time_ns = v;
    }
    key_ = Key::Other;
    return true;
  }

  void take_event() {
    if (event_.ph != "X" || !event_.has_ts) return;
    Category category = category_of(event_.cat);
    // LibTorch 1.13's legacy profiler (RecordProfile, profiler_legacy.cpp writeProfilerEventsToStream)
    // writes a bare array of "X" events with no "cat" and pid "CPU Functions": its record_function
    // ranges are the hookstream runtime's annotations.
    if (category == Category::Other && event_.cat.empty() && is_runtime_annotation(event_.name)) {
      category = Category::Annotation;
    }
    if (category == Category::Other) return;
    min_whole_us = std::min(min_whole_us, event_.ts.whole);
    const auto or_else = [](int64_t v, int64_t fallback) { return v == kAbsent ? fallback : v; };
    switch (category) {
      case Category::Kernel: case Category::Copy: case Category::Memset: {
        GpuRecord r;
        r.op.name = std::move(event_.name);
        r.op.correlation = or_else(event_.correlation, -1);
        r.op.bytes = or_else(event_.bytes, 0);
        if (category == Category::Kernel) {
          r.op.kind = is_collective_kernel(r.op.name) ? OpKind::Collective : OpKind::Kernel;
        } else if (category == Category::Copy) {
          r.op.kind = OpKind::Copy;
          parse_copy_name(r.op.name, r.op);
        } else {
          r.op.kind = OpKind::Memset;
          parse_memset_name(r.op.name, r.op);
        }
        // pid is the device and tid the stream; args say the same in traces since 2021.
        r.device = or_else(event_.device, or_else(event_.pid, 0));
        r.context = or_else(event_.context, 0);
        r.stream = or_else(event_.stream, or_else(event_.tid, 0));
        r.ts = event_.ts;
        r.dur = event_.dur;
        gpu.push_back(std::move(r));
        break;
      }
      case Category::Runtime:
        calls.push_back(CallRecord{std::move(event_.name), or_else(event_.correlation, -1), event_.ts, event_.dur});
        break;
      case Category::Sync:
        syncs.push_back(SyncRecord{event_.sync_kind.empty() ? event_.name : event_.sync_kind,
                                   or_else(event_.device, or_else(event_.pid, 0)), or_else(event_.context, 0),
                                   or_else(event_.stream, or_else(event_.tid, -1)), or_else(event_.correlation, -1),
                                   or_else(event_.wait_on_stream, -1), or_else(event_.wait_record, -1),
                                   or_else(event_.wait_event, -1), event_.ts, event_.dur});
        break;
      case Category::Annotation:
        annotations.push_back(AnnotationRecord{std::move(event_.name), event_.ts, event_.dur});
        break;
      default:
        break;
    }
  }

  std::string path_;
  RawEvent event_;
  int depth_ = 0;
  int event_depth_ = 0;
  int events_array_depth_ = -1;
  bool top_is_object_ = false;
  bool events_open_ = false;
  bool in_args_ = false;
  Key key_ = Key::Other;
};

// Builds the model from the parsed records: host calls, GPU work, and the sync reconstruction
// (waits -> the cudaEventRecord call they name -> the stream it recorded on).
class KinetoAssembler {
 public:
  KinetoAssembler(ChromeTraceHandler& parsed, const std::string& path)
      : parsed_(parsed), builder_("kineto: " + path) {
    // Newer traces: ts relative to baseTimeNanoseconds. Older: absolute microseconds.
    if (parsed.has_base_time) {
      const int64_t origin_ns = parsed.base_time_ns / kOriginStepNs * kOriginStepNs;
      offset_ns_ = static_cast<double>(parsed.base_time_ns - origin_ns);
      origin_us_ = 0;
    } else if (parsed.min_whole_us != std::numeric_limits<int64_t>::max()) {
      origin_us_ = parsed.min_whole_us / (kOriginStepNs / 1000) * (kOriginStepNs / 1000);
    }
  }

  EventModel build(int rank) {
    constexpr int64_t process = 0;  // one file is one rank
    std::unordered_map<int64_t, size_t>& call_op = call_op_;  // correlation -> builder handle
    std::unordered_map<int64_t, double> call_start;    // correlation -> issue time
    std::unordered_map<int64_t, ApiRole> call_role;
    for (CallRecord& c : parsed_.calls) {
      const ApiRole role = classify_api(c.name);
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
        call_op[c.correlation] = handle;
        call_start[c.correlation] = start;
        call_role[c.correlation] = role;
      }
    }
    for (GpuRecord& g : parsed_.gpu) {
      g.op.start_ns = ns(g.ts);
      g.op.duration_ns = duration(g.dur);
      const auto call = call_start.find(g.op.correlation);
      double issue = g.op.start_ns;
      ApiRole role = ApiRole::Other;
      if (call != call_start.end()) {
        issue = call->second;
        role = call_role[g.op.correlation];
        g.op.source_api = builder_.op(call_op[g.op.correlation]).name;
      }
      // Same rule as nsys: cudaMemcpy/cudaMemset return when done; pageable copies are staged.
      if (g.op.kind == OpKind::Copy || g.op.kind == OpKind::Memset) {
        g.op.blocks_host = role == ApiRole::SyncCopy || role == ApiRole::SyncMemset ||
                           g.op.source == MemoryKind::PageableHost || g.op.destination == MemoryKind::PageableHost;
      }
      const size_t handle = builder_.add_op(std::move(g.op), process, issue);
      builder_.set_stream(handle, {process, g.device, g.context, g.stream});
    }
    for (const SyncRecord& s : parsed_.syncs) {
      const auto call = call_op.find(s.correlation);
      // Classify by the API call's name when the call is in the trace: CUPTI emits "Event Sync"
      // records for cudaEventQuery too, which does not block (event-sync.json.gz has one).
      const ApiRole role = call != call_op.end() ? call_role[s.correlation] : role_from_sync_kind(s.kind);
      const bool is_sync = role == ApiRole::StreamWait || role == ApiRole::EventSync ||
                           role == ApiRole::StreamSync || role == ApiRole::DeviceSync;
      size_t handle;
      if (call != call_op.end()) {
        handle = call->second;
      } else {
        Op op;
        op.name = s.kind;
        op.start_ns = ns(s.ts);
        op.duration_ns = duration(s.dur);
        op.correlation = s.correlation;
        const double start = op.start_ns;
        handle = builder_.add_op(std::move(op), process, start);
      }
      if (!is_sync) {
        mark_record(s);
        continue;
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
    const auto record = call_op_.find(s.wait_record);
    if (record == call_op_.end()) return;
    builder_.op(record->second).kind = OpKind::EventRecord;
    builder_.set_stream(record->second, {0, s.device, s.context, s.wait_on_stream});
    builder_.set_event(record->second, 0, s.wait_record, s.wait_event, event_name(s));
  }

  static ApiRole role_from_sync_kind(const std::string& kind) {
    if (kind == "Stream Wait Event") return ApiRole::StreamWait;
    if (kind == "Event Sync") return ApiRole::EventSync;
    if (kind == "Stream Sync") return ApiRole::StreamSync;
    if (kind == "Context Sync") return ApiRole::DeviceSync;
    return ApiRole::Other;
  }

  double ns(const Micros& m) const {
    return static_cast<double>(m.whole - origin_us_) * 1000.0 + m.fraction * 1000.0 + offset_ns_;
  }
  static double duration(const Micros& m) { return static_cast<double>(m.whole) * 1000.0 + m.fraction * 1000.0; }

  ChromeTraceHandler& parsed_;
  TraceBuilder builder_;
  int64_t origin_us_ = 0;
  double offset_ns_ = 0;
  std::unordered_map<int64_t, size_t> call_op_;
};

}  // namespace

EventModel import_kineto_json(const std::string& path, int rank) {
  GzipReader reader(path);
  std::istream in(&reader);
  ChromeTraceHandler handler(path);
  nlohmann::json::sax_parse(in, &handler);
  if (!handler.saw_events) {
    throw InputError(path, "not a Chrome trace: no \"traceEvents\" array (read " + std::to_string(reader.offset()) +
                               " bytes)");
  }
  return KinetoAssembler(handler, path).build(rank);
}

}  // namespace hookstream
