#include "traces/importers/kineto/kineto_event_scanner.h"

#include <cmath>
#include <cstring>

#include "traces/importers/json_cursor.h"

namespace hookstream {

void KinetoEvent::clear() {
  ph.clear();
  cat.clear();
  name.clear();
  sync_kind.clear();
  pid = tid = device = context = stream = correlation = bytes = wait_on_stream = wait_record = wait_event = kKinetoAbsent;
  ts = dur = KinetoMicros{};
  has_ts = has_dur = false;
}

namespace {

template <size_t N>
bool is(const std::string& s, const char (&literal)[N]) {
  return s.size() == N - 1 && std::memcmp(s.data(), literal, N - 1) == 0;
}

bool starts_number(int c) { return c == '-' || (c >= '0' && c <= '9'); }

enum class EventKey { Other, Ph, Cat, Name, Pid, Tid, Ts, Dur, Args };

EventKey event_key(const std::string& key) {
  switch (key.size()) {
    case 2:
      if (is(key, "ph")) return EventKey::Ph;
      if (is(key, "ts")) return EventKey::Ts;
      break;
    case 3:
      if (is(key, "cat")) return EventKey::Cat;
      if (is(key, "pid")) return EventKey::Pid;
      if (is(key, "tid")) return EventKey::Tid;
      if (is(key, "dur")) return EventKey::Dur;
      break;
    case 4:
      if (is(key, "name")) return EventKey::Name;
      if (is(key, "args")) return EventKey::Args;
      break;
    default: break;
  }
  return EventKey::Other;
}

// The integer fields of "args"; nullptr for every other key.
int64_t* args_field(const std::string& key, KinetoEvent& e) {
  if (is(key, "stream")) return &e.stream;
  if (is(key, "correlation")) return &e.correlation;
  if (is(key, "device")) return &e.device;
  if (is(key, "context")) return &e.context;
  if (is(key, "bytes")) return &e.bytes;
  if (is(key, "wait_on_stream")) return &e.wait_on_stream;
  if (is(key, "wait_on_cuda_event_record_corr_id")) return &e.wait_record;
  if (is(key, "wait_on_cuda_event_id")) return &e.wait_event;
  return nullptr;
}

// Integers set the field (above INT64_MAX: absent); floats leave it as it was, as the
// nlohmann::json SAX handler this scanner replaced did.
void set_integer(const JsonNumber& n, int64_t& field) {
  if (n.kind == JsonNumber::Kind::Integer) field = n.integer;
  else if (n.kind == JsonNumber::Kind::Unsigned) field = kKinetoAbsent;
}

KinetoMicros to_micros(const JsonNumber& n) {
  switch (n.kind) {
    case JsonNumber::Kind::Integer: return KinetoMicros{n.integer, 0};
    case JsonNumber::Kind::Unsigned: return KinetoMicros{kKinetoAbsent, 0};
    case JsonNumber::Kind::Float: break;
  }
  const double whole = std::floor(n.floating);
  // Outside int64 (or infinite) the whole part has no integer to be: treat it like an integer
  // above INT64_MAX.
  if (!(whole >= -9.2e18 && whole <= 9.2e18)) return KinetoMicros{kKinetoAbsent, 0};
  return KinetoMicros{static_cast<int64_t>(whole), n.floating - whole};
}

class KinetoScanner {
 public:
  KinetoScanner(GzipReader& reader, KinetoEventSink& sink) : reader_(reader), cursor_(reader), sink_(sink) {}

  KinetoTraceInfo run() {
    cursor_.skip_byte_order_mark();
    const int c = cursor_.peek();
    if (c == '[') {
      info_.saw_events = true;  // a bare array of events is also a Chrome trace
      scan_events();
    } else if (c == '{') {
      scan_top_object();
    } else {
      cursor_.skip_value();  // valid JSON perhaps, but not a trace: the caller says so
    }
    cursor_.expect_end();
    info_.bytes = reader_.offset();
    return info_;
  }

 private:
  void read_key() {
    if (cursor_.peek() != '"') cursor_.fail("a string as object key");
    cursor_.read_string(key_);
    cursor_.expect(':', "':' after an object key");
  }

  void scan_top_object() {
    if (!cursor_.enter('}')) return;
    do {
      read_key();
      const int c = cursor_.peek();
      if (c == '[' && is(key_, "traceEvents")) {
        info_.saw_events = true;
        scan_events();
      } else if (starts_number(c) && is(key_, "baseTimeNanoseconds")) {
        const JsonNumber n = cursor_.read_number();
        if (n.kind != JsonNumber::Kind::Float) {
          info_.has_base_time = true;
          set_integer(n, info_.base_time_ns);
        }
      } else {
        cursor_.skip_value();
      }
    } while (cursor_.next_member('}'));
  }

  void scan_events() {
    if (!cursor_.enter(']')) return;
    do {
      if (cursor_.peek() == '{') scan_event();
      else cursor_.skip_value();
    } while (cursor_.next_member(']'));
  }

  void scan_event() {
    KinetoEvent& e = event_;
    e.clear();
    if (!cursor_.enter('}')) {
      sink_.event(e);
      return;
    }
    do {
      read_key();
      const EventKey key = event_key(key_);
      const int c = cursor_.peek();
      switch (key) {
        case EventKey::Ph:
          if (c != '"') break;
          cursor_.read_string(e.ph);
          if (e.ph.size() != 1 || e.ph[0] != 'X') {  // only complete events carry GPU work and API calls
            cursor_.skip_rest_of_object();
            return;
          }
          continue;
        case EventKey::Cat:
          if (c != '"') break;
          cursor_.read_string(e.cat);
          if (!e.cat.empty() && !sink_.wants_category(e.cat)) {
            cursor_.skip_rest_of_object();
            return;
          }
          continue;
        case EventKey::Name:
          if (c != '"') break;
          cursor_.read_string(e.name);
          continue;
        case EventKey::Pid:
        case EventKey::Tid:
          if (!starts_number(c)) break;
          set_integer(cursor_.read_number(), key == EventKey::Pid ? e.pid : e.tid);
          continue;
        case EventKey::Ts:
        case EventKey::Dur: {
          if (!starts_number(c)) break;
          const JsonNumber n = cursor_.read_number();
          (key == EventKey::Ts ? e.ts : e.dur) = to_micros(n);
          (key == EventKey::Ts ? e.has_ts : e.has_dur) = true;
          continue;
        }
        case EventKey::Args:
          if (c != '{') break;
          scan_args(e);
          continue;
        case EventKey::Other: break;
      }
      cursor_.skip_value();  // an unused key, or a used one with a value of another type
    } while (cursor_.next_member('}'));
    sink_.event(e);
  }

  void scan_args(KinetoEvent& e) {
    if (!cursor_.enter('}')) return;
    do {
      read_key();
      const int c = cursor_.peek();
      if (starts_number(c)) {
        if (int64_t* field = args_field(key_, e)) {
          set_integer(cursor_.read_number(), *field);
          continue;
        }
      } else if (c == '"' && is(key_, "cuda_sync_kind")) {
        cursor_.read_string(e.sync_kind);
        continue;
      }
      cursor_.skip_value();
    } while (cursor_.next_member('}'));
  }

  GzipReader& reader_;
  JsonCursor cursor_;
  KinetoEventSink& sink_;
  KinetoTraceInfo info_;
  KinetoEvent event_;  // reused: its strings keep their capacity from event to event
  std::string key_;
};

}  // namespace

KinetoTraceInfo scan_kineto_trace(GzipReader& reader, KinetoEventSink& sink) {
  return KinetoScanner(reader, sink).run();
}

}  // namespace hookstream
