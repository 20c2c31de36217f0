#include "traces/importers/kineto/kineto_event_scanner.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>

#include "traces/importers/json_cursor.h"
#include "traces/importers/mapped_input.h"

#ifdef HOOKSTREAM_WITH_SIMDJSON
#include <simdjson.h>
#endif

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
bool is(std::string_view s, const char (&literal)[N]) {
  return s.size() == N - 1 && std::memcmp(s.data(), literal, N - 1) == 0;
}

bool starts_number(int c) { return c == '-' || (c >= '0' && c <= '9'); }

enum class EventKey { Other, Ph, Cat, Name, Pid, Tid, Ts, Dur, Args };

EventKey event_key(std::string_view key) {
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
int64_t* args_field(std::string_view key, KinetoEvent& e) {
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

// Which bytes of the file a scanner reads: all of them, the first chunk, or a chunk that starts at
// an element of the event array (one in the middle, or the last).
enum class Span { Whole, First, Middle, Last };

// How a chunk's parse ended, for the proof that the cuts are where the chunks assumed.
struct ChunkEnd {
  bool at_cut = false;        // stopped at the chunk's end, between two elements of the event array
  bool top_is_array = false;  // Whole/First: the document is a bare array of events
  // Middle/Last: what followed the event array's ']' (None: the chunk ended inside the array).
  enum class Tail { None, Bare, Object } tail = Tail::None;
};

class KinetoScanner {
 public:
  KinetoScanner(BlockSource& reader, KinetoEventSink& sink, Span span = Span::Whole, uint64_t first_offset = 0)
      : cursor_(reader, first_offset), sink_(sink), span_(span), stops_at_cut_(span == Span::First || span == Span::Middle) {}

  KinetoTraceInfo run() {
    if (span_ == Span::Middle || span_ == Span::Last) {
      if (!scan_from_element()) return info_;
    } else {
      cursor_.skip_byte_order_mark();
      const int c = cursor_.peek();
      if (c == '[') {
        info_.saw_events = true;  // a bare array of events is also a Chrome trace
        end_.top_is_array = true;
        if (!scan_events(/*entered=*/false)) return at_cut();
      } else if (c == '{') {
        if (!scan_top_object()) return at_cut();
      } else {
        cursor_.skip_value();  // valid JSON perhaps, but not a trace: the caller says so
      }
    }
    cursor_.expect_end();
    info_.bytes = cursor_.offset();
    return info_;
  }

  const ChunkEnd& end() const { return end_; }

 private:
  KinetoTraceInfo at_cut() {
    end_.at_cut = true;
    return info_;
  }

  void read_key() {
    if (cursor_.peek() != '"') cursor_.fail("a string as object key");
    cursor_.read_string(key_);
    cursor_.expect(':', "':' after an object key");
  }

  // False: stopped at the chunk's cut inside "traceEvents".
  bool scan_top_object() {
    if (!cursor_.enter('}')) return true;
    do {
      if (!scan_top_member()) return false;
    } while (cursor_.next_member('}'));
    return true;
  }

  bool scan_top_member() {
    read_key();
    const int c = cursor_.peek();
    if (c == '[' && is(key_, "traceEvents")) {
      info_.saw_events = true;
      return scan_events(/*entered=*/false);
    }
    if (starts_number(c) && is(key_, "baseTimeNanoseconds")) {
      const JsonNumber n = cursor_.read_number();
      if (n.kind != JsonNumber::Kind::Float) {
        info_.has_base_time = true;
        set_integer(n, info_.base_time_ns);
      }
    } else {
      cursor_.skip_value();
    }
    return true;
  }

  // At the array's '[' (entered: false), or at one of its elements (a chunk's first byte). False:
  // the chunk ended after a ',' of this array; its next element is the next chunk's first byte.
  bool scan_events(bool entered) {
    if (!entered && !cursor_.enter(']')) return true;
    for (;;) {
      if (cursor_.peek() == '{') scan_event();
      else cursor_.skip_value();
      if (!cursor_.next_member(']')) return true;
      if (stops_at_cut_ && cursor_.peek() == -1) return false;
    }
  }

  // A chunk after the first: elements of the event array, then what follows it.
  bool scan_from_element() {
    if (!scan_events(/*entered=*/true)) {
      at_cut();
      return false;
    }
    if (cursor_.peek() == -1) {
      end_.tail = ChunkEnd::Tail::Bare;
      return true;
    }
    end_.tail = ChunkEnd::Tail::Object;
    while (cursor_.next_member('}')) {
      if (!scan_top_member()) {
        at_cut();
        return false;
      }
    }
    return true;
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
            sink_.dropped_phase(e.ph);
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

  JsonCursor cursor_;
  KinetoEventSink& sink_;
  const Span span_;
  const bool stops_at_cut_;
  KinetoTraceInfo info_;
  ChunkEnd end_;
  KinetoEvent event_;  // reused: its strings keep their capacity from event to event
  std::string key_;
};

}  // namespace

KinetoTraceInfo scan_kineto_trace(GzipReader& reader, KinetoEventSink& sink) {
  return KinetoScanner(reader, sink).run();
}

namespace {

// One chunk's bytes as a block source: its parse ends where the chunk does.
class ChunkSource final : public BlockSource {
 public:
  ChunkSource(const std::string& path, std::string_view bytes) : path_(path), bytes_(bytes) {}
  const std::string& path() const override { return path_; }
  std::string_view next_block() override {
    const std::string_view block = bytes_;
    bytes_ = {};
    return block;
  }

 private:
  const std::string& path_;
  std::string_view bytes_;
};

bool is_blank(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// A chunk's bytes: a buffer the reader fills in place (GzipReader::read), where a std::string
// would have to be zero-filled first or take a copy of each block.
class ChunkBytes {
 public:
  const char* data() const { return data_.get(); }
  char* data() { return data_.get(); }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  std::string_view view() const { return std::string_view(data_.get(), size_); }
  char& operator[](size_t i) { return data_[i]; }
  // Room for `n` bytes, the first size() kept.
  void reserve(size_t n) {
    if (n <= capacity_) return;
    std::unique_ptr<char[]> bigger(new char[n]);  // not zero-filled: the caller fills it
    if (size_ > 0) std::memcpy(bigger.get(), data_.get(), size_);
    data_ = std::move(bigger);
    capacity_ = n;
  }
  // Bytes from size() to n (n <= capacity()) are as the buffer holds them: the caller fills them.
  void resize(size_t n) { size_ = n; }
  void append(const char* bytes, size_t n) {
    if (size_ + n > capacity_) reserve(std::max(size_ + n, capacity_ + capacity_ / 2));
    std::memcpy(data_.get() + size_, bytes, n);
    size_ += n;
  }

 private:
  std::unique_ptr<char[]> data_;
  size_t size_ = 0, capacity_ = 0;
};

// The first cut at or after `from`: the '{' of a line that starts an element after a ',' (only
// whitespace, a newline among it, between the two). npos when there is none yet; `resume` is then
// where to look again once more bytes are in (a cut may straddle the end of the data).
size_t find_cut(std::string_view data, size_t from, size_t& resume) {
  size_t newline = from;
  for (;;) {
    const void* found = std::memchr(data.data() + newline, '\n', data.size() - newline);
    if (found == nullptr) {
      resume = data.size();
      return std::string::npos;
    }
    newline = static_cast<size_t>(static_cast<const char*>(found) - data.data());
    size_t after = newline + 1;
    while (after < data.size() && is_blank(data[after])) ++after;
    if (after == data.size()) {
      resume = newline;
      return std::string::npos;
    }
    size_t before = newline;
    while (before > 0 && is_blank(data[before - 1])) --before;
    if (data[after] == '{' && before > 0 && data[before - 1] == ',') return after;
    newline = after;
  }
}

#ifdef HOOKSTREAM_WITH_SIMDJSON

// The fast path for a chunk in the middle of the event array. simdjson's stage 1 (its SIMD
// structural indexer, the first half of its DOM parse) finds every token of the chunk and
// validates what it reads: UTF-8, control characters inside strings, unclosed strings. The walk
// below then validates the rest as strictly as the strict scanner (JsonCursor) does: the grammar
// token by token, number syntax and range, literals, escapes (a string with a backslash is read
// by JsonCursor itself), while it picks the members KinetoScanner::scan_event picks, in the same
// order, with the same early drops. It builds no DOM: simdjson's stage 2 (its tape, every string
// copied and every number converted) was half the CPU of a Kineto import, for events that are
// mostly dropped unread (cpu_op, flows). Where the walk rejects anything (a fault, nesting over
// kMaxDepth, a number it does not convert), it gives up on the chunk and the strict scanner parses
// it, which accepts or gives its own error: so where this path accepts, the strict scanner
// accepts too and reads the same values (the number conversion is json_number_from_text, the
// strict scanner's own).
class Stage1Walk {
 public:
  Stage1Walk(const std::string& path, const char* bytes, const uint32_t* tokens, uint32_t count, bool has_backslash)
      : path_(path), bytes_(bytes), tokens_(tokens), count_(count), has_backslash_(has_backslash) {}

  // Elements of the event array, each followed by ',' (tokens [0, count)): true when all of it
  // is valid JSON and its events went to the sink (then the sink's events are the strict
  // scanner's); false: the caller discards the sink.
  bool events(KinetoEventSink& sink, KinetoEvent& e) {
    uint32_t i = 0;
    while (i < count_) {
      if (at(i) == '{') {
        if (!event(i, sink, e)) return false;
      } else if (!skip_value(i)) {
        return false;
      }
      if (at(i) != ',') return false;
      ++i;
    }
    return count_ > 0;
  }

 private:
  static constexpr size_t kMaxDepth = 1024;  // deeper: the strict scanner's business

  // The first byte of token i. Past the last token (the chunk's last ','), stage 1's index says
  // the chunk's end, where a blank lies (parse_middle_chunk_fast checks): no token starts so, and
  // every step of the walk rejects it before it could read further.
  char at(uint32_t i) const { return bytes_[tokens_[i]]; }

  static bool is_blank(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
  // What may follow a scalar: whitespace, or a byte that starts a token of its own (the walk
  // then meets it as the next token).
  static bool ends_scalar(char c) {
    return is_blank(c) || c == ',' || c == ']' || c == '}' || c == ':' || c == '[' || c == '{' || c == '"';
  }

  // The string token i (at its '"'): its content, unescaped. Stage 1 put no token inside it and
  // proved it closed, so its closing quote is the last non-blank byte before token i + 1.
  bool string(uint32_t i, std::string_view& out) {
    const char* open = bytes_ + tokens_[i];
    const char* close = bytes_ + tokens_[i + 1] - 1;
    while (close > open && is_blank(*close)) --close;
    if (close == open || *close != '"') return false;
    out = std::string_view(open + 1, static_cast<size_t>(close - open - 1));
    if (!has_backslash_ || std::memchr(out.data(), '\\', out.size()) == nullptr) return true;
    // Escapes: read by the strict scanner, which must end exactly at the closing quote.
    try {
      ChunkSource source(path_, std::string_view(open, static_cast<size_t>(close - open + 1)));
      JsonCursor cursor(source);
      if (cursor.peek() != '"') return false;
      cursor.read_string(unescaped_);
      if (cursor.offset() != static_cast<uint64_t>(close - open + 1)) return false;
    } catch (const std::exception&) {
      return false;
    }
    out = unescaped_;
    return true;
  }

  // The number token i: its text (the strict scanner's grammar, within double's range) and
  // whether it has a fraction or an exponent.
  bool number(uint32_t i, std::string_view& text, bool& is_float) const {
    const char* const first = bytes_ + tokens_[i];
    const char* p = first;
    if (*p == '-') ++p;
    if (*p == '0') {
      ++p;
    } else if (*p >= '1' && *p <= '9') {
      while (*p >= '0' && *p <= '9') ++p;
    } else {
      return false;
    }
    is_float = false;
    bool exponent = false;
    if (*p == '.') {
      ++p;
      if (!(*p >= '0' && *p <= '9')) return false;
      while (*p >= '0' && *p <= '9') ++p;
      is_float = true;
    }
    if (*p == 'e' || *p == 'E') {
      ++p;
      if (*p == '+' || *p == '-') ++p;
      if (!(*p >= '0' && *p <= '9')) return false;
      while (*p >= '0' && *p <= '9') ++p;
      is_float = exponent = true;
    }
    if (!ends_scalar(*p)) return false;
    text = std::string_view(first, static_cast<size_t>(p - first));
    // The strict scanner rejects a number beyond double's range; only these can be.
    if (exponent || text.size() > 300) {
      const std::string terminated(text);
      if (!std::isfinite(std::strtod(terminated.c_str(), nullptr))) return false;
    }
    return true;
  }

  bool literal(uint32_t i) const {
    const char* p = bytes_ + tokens_[i];
    size_t n;
    if (std::memcmp(p, "true", 4) == 0 || std::memcmp(p, "null", 4) == 0) n = 4;
    else if (std::memcmp(p, "false", 5) == 0) n = 5;
    else return false;
    return ends_scalar(p[n]);
  }

  // A scalar token i (a string, number or literal): validated, i moves past it.
  bool scalar(uint32_t& i) {
    const char c = at(i);
    if (c == '"') {
      // Stage 1 validated its bytes and found it closed: only escapes are left to check.
      std::string_view unused;
      if (has_backslash_ && !string(i, unused)) return false;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      std::string_view text;
      bool is_float;
      if (!number(i, text, is_float)) return false;
      // A number skipped by the strict scanner is validated, not converted: nothing else fails.
    } else if (!literal(i)) {
      return false;
    }
    ++i;
    return true;
  }

  // One value from token i, validated; i moves past it. Containers with an explicit stack.
  // `rest_of_object`: token i follows a member's value inside an object; the rest of that object
  // (its ',' and members, its '}') is skipped instead.
  bool skip_value(uint32_t& i, bool rest_of_object = false) {
    char open[kMaxDepth];
    size_t depth = 0;
    bool at_value = true;  // false: after a value
    if (rest_of_object) {
      open[depth++] = '{';
      at_value = false;
    }
    for (;;) {
      if (at_value) {
        // A value at token i.
        const char c = at(i);
        if (c == '{' || c == '[') {
          const char close = c == '{' ? '}' : ']';
          ++i;
          if (at(i) != close) {
            if (depth == kMaxDepth) return false;
            open[depth++] = c;
            if (c == '{' && !key(i)) return false;
            continue;  // at its first value
          }
          ++i;
        } else if (i + 1 >= count_ || !scalar(i)) {
          return false;
        }
      }
      // After a value: ',' and the next member or element, or the container's close.
      at_value = true;
      if (depth == 0) return true;
      const char after = at(i);
      ++i;
      if (after == ',') {
        if (open[depth - 1] == '{' && !key(i)) return false;
      } else if (after == (open[depth - 1] == '{' ? '}' : ']')) {
        --depth;
        at_value = false;
      } else {
        return false;
      }
    }
  }

  // A member's key and ':' at token i; i moves to its value.
  bool key(uint32_t& i) {
    std::string_view unused;
    if (i + 1 >= count_ || at(i) != '"' || (has_backslash_ && !string(i, unused)) || at(i + 1) != ':') return false;
    i += 2;
    return true;
  }
  bool key(uint32_t& i, std::string_view& name) {
    if (i + 1 >= count_ || at(i) != '"' || !string(i, name) || at(i + 1) != ':') return false;
    i += 2;
    return true;
  }

  // A string value at token i into `out`; false (i unmoved) when the value is not a string.
  bool string_value(uint32_t& i, std::string& out, bool& ok) {
    if (at(i) != '"' || i + 1 >= count_) return false;
    std::string_view text;
    ok = string(i, text);
    if (ok) out.assign(text);
    ++i;
    return true;
  }
  // A number value at token i; false (i unmoved) when the value is not a number.
  bool number_value(uint32_t& i, JsonNumber& n, bool& ok) {
    const char c = at(i);
    if (!(c == '-' || (c >= '0' && c <= '9')) || i + 1 >= count_) return false;
    std::string_view text;
    bool is_float;
    ok = number(i, text, is_float);
    if (ok) n = json_number_from_text(text, is_float);
    ++i;
    return true;
  }

  // KinetoScanner::scan_event over the tokens from the event's '{': the same members, in the
  // same order, with the same early drops (after a drop the rest is validated, not read).
  bool event(uint32_t& i, KinetoEventSink& sink, KinetoEvent& e) {
    e.clear();
    ++i;
    bool dropped = false;
    if (at(i) == '}') {
      ++i;
      sink.event(e);
      return true;
    }
    for (;;) {
      std::string_view name;
      if (!key(i, name)) return false;
      bool ok = true, read = false;
      {
        const EventKey k = event_key(name);
        JsonNumber n;
        switch (k) {
          case EventKey::Ph:
            if ((read = string_value(i, e.ph, ok)) && ok && (e.ph.size() != 1 || e.ph[0] != 'X')) {
              sink.dropped_phase(e.ph);
              dropped = true;
            }
            break;
          case EventKey::Cat:
            if ((read = string_value(i, e.cat, ok)) && ok && !e.cat.empty() && !sink.wants_category(e.cat)) {
              dropped = true;
            }
            break;
          case EventKey::Name: read = string_value(i, e.name, ok); break;
          case EventKey::Pid:
          case EventKey::Tid:
            if ((read = number_value(i, n, ok)) && ok) set_integer(n, k == EventKey::Pid ? e.pid : e.tid);
            break;
          case EventKey::Ts:
          case EventKey::Dur:
            if ((read = number_value(i, n, ok)) && ok) {
              (k == EventKey::Ts ? e.ts : e.dur) = to_micros(n);
              (k == EventKey::Ts ? e.has_ts : e.has_dur) = true;
            }
            break;
          case EventKey::Args:
            if (at(i) == '{') {
              read = true;
              ok = args(i, e);
            }
            break;
          case EventKey::Other: break;
        }
      }
      if (!ok || (!read && !skip_value(i))) return false;
      if (dropped) return skip_value(i, /*rest_of_object=*/true);  // validated, not read
      const char after = at(i);
      ++i;
      if (after == '}') break;
      if (after != ',') return false;
    }
    sink.event(e);
    return true;
  }

  // KinetoScanner::scan_args from the '{' at token i.
  bool args(uint32_t& i, KinetoEvent& e) {
    ++i;
    if (at(i) == '}') {
      ++i;
      return true;
    }
    for (;;) {
      std::string_view name;
      if (!key(i, name)) return false;
      bool ok = true, read = false;
      JsonNumber n;
      if (int64_t* field = args_field(name, e)) {
        if ((read = number_value(i, n, ok)) && ok) set_integer(n, *field);
      } else if (name == "cuda_sync_kind") {
        read = string_value(i, e.sync_kind, ok);
      }
      if (!ok || (!read && !skip_value(i))) return false;
      const char after = at(i);
      ++i;
      if (after == '}') return true;
      if (after != ',') return false;
    }
  }

  const std::string& path_;
  const char* const bytes_;
  const uint32_t* const tokens_;
  const uint32_t count_;
  const bool has_backslash_;
  std::string unescaped_;
};

// simdjson's stage 1 for one thread, its buffers sized for a chunk once (a longer chunk grows them):
// ~4 bytes per chunk byte, where the DOM parser took ~14.
struct Stage1Parser {
  std::unique_ptr<simdjson::internal::dom_parser_implementation> impl;
  bool ready(size_t capacity) {
    if (!impl) {
      return simdjson::get_active_implementation()->create_dom_parser_implementation(
                 capacity, simdjson::DEFAULT_MAX_DEPTH, impl) == simdjson::SUCCESS;
    }
    return capacity <= impl->capacity() || impl->set_capacity(capacity) == simdjson::SUCCESS;
  }
};

// `text` is a middle chunk: elements of the event array, each followed by ',' (the strict scanner's
// proof that the chunk ends at a cut), then blanks. True when it is valid JSON and its events went
// to the sink; false (the sink then holds a partial result to discard) leaves the chunk to the
// strict scanner. Nothing is written to `text` (it may be the file's read-only mapping), and
// nothing past its last ',' is read: stage 1 copies the last partial block of 64 bytes to a
// padded buffer of its own, and the walk stops at the last token.
bool parse_middle_chunk_fast(const std::string& path, std::string_view text, Stage1Parser& parser,
                             KinetoEventSink& sink, KinetoEvent& e) {
  size_t length = text.size();
  while (length > 0 && is_blank(text[length - 1])) --length;
  // A cut follows a newline, so a blank follows the last ',': the walk's end mark (Stage1Walk::at).
  if (length == 0 || length == text.size() || text[length - 1] != ',') return false;
  if (length > std::numeric_limits<uint32_t>::max() / 2 || !parser.ready(length)) return false;
  const auto* data = reinterpret_cast<const uint8_t*>(text.data());
  if (parser.impl->stage1(data, length, simdjson::stage1_mode::regular) != simdjson::SUCCESS) return false;
  const bool has_backslash = std::memchr(text.data(), '\\', length) != nullptr;
  Stage1Walk walk(path, text.data(), parser.impl->structural_indexes.get(), parser.impl->n_structural_indexes,
                  has_backslash);
  return walk.events(sink, e);
}

#endif  // HOOKSTREAM_WITH_SIMDJSON

// A plain (not gzip) trace file mapped read-only, so its chunks are parsed where the page cache
// holds them instead of being copied by read(). Empty (false) for a gzip file, an empty one, or
// one that cannot be mapped (a pipe): those are read. The file cut shorter by another process
// while it is mapped is reported as bad input (MappedInputScope), where it used to end the process
// with SIGBUS.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st {};
    unsigned char magic[2] = {0, 0};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= 2 && ::pread(fd, magic, 2, 0) == 2 &&
        !(magic[0] == 0x1f && magic[1] == 0x8b)) {
      void* data = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
      if (data != MAP_FAILED) {
        data_ = static_cast<const char*>(data);
        size_ = static_cast<size_t>(st.st_size);
        // Truncated by another process while mapped: one line and exit 2, not a SIGBUS.
        scope_ = std::make_unique<MappedInputScope>(path, data_, size_);
      }
    }
    ::close(fd);
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<char*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  explicit operator bool() const { return data_ != nullptr; }
  std::string_view view() const { return std::string_view(data_, size_); }
  // The pages wholly inside `part` are dropped from this process (they stay in the page cache):
  // a parsed chunk's bytes do not count in the process's memory.
  void release(std::string_view part) const {
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto first = (reinterpret_cast<uintptr_t>(part.data()) + page - 1) / page * page;
    const auto last = (reinterpret_cast<uintptr_t>(part.data()) + part.size()) / page * page;
    if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
  }

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
  std::unique_ptr<MappedInputScope> scope_;  // ends after the unmapping (the destructor's body)
};

struct ChunkJob {
  std::string_view text;  // the chunk's bytes: in `bytes`, or in the file's mapping
  // Read or inflated chunks: one spare byte, then the chunk's bytes.
  ChunkBytes bytes;
  uint64_t start = 0;
  Span span = Span::Whole;
  std::unique_ptr<KinetoEventSink> sink;
  KinetoTraceInfo info;
  ChunkEnd end;
  bool failed = false;
  bool fast = false;  // parsed by simdjson
};

class ParallelScan {
 public:
  ParallelScan(const std::string& path, const KinetoSinkFactory& make_sink, KinetoParallelScan& options)
      : path_(path), mapped_(path), make_sink_(make_sink), options_(options),
        chunk_bytes_(std::max<size_t>(options.chunk_bytes, 1)), threads_(std::max(1, options.threads)),
        fast_path_(options.fast_path) {}

  ~ParallelScan() { stop_workers(); }

  // True with the sinks in file order and the trace's info; false (with `why`) when the file must
  // be scanned again single-threaded. A parse error of a file that fits one chunk is thrown as is.
  bool run(std::vector<std::unique_ptr<KinetoEventSink>>& sinks, KinetoTraceInfo& info, std::string& why) {
    try {
      if (!produce(why)) return abandon();
    } catch (const std::exception& e) {
      why = std::string("reading failed: ") + e.what();  // the single-threaded scan reports it where it lies
      return abandon();
    }
    stop_workers();
    if (jobs_.size() == 1) {
      ChunkJob& job = jobs_.front();
      parse(job, /*rethrow=*/true);
      info = job.info;
      sinks.push_back(std::move(job.sink));
      return true;
    }
    return proven(why) && collect(sinks, info);
  }

 private:
  // Reads the file into chunks cut between elements and hands them to the workers; false when no
  // cut is found in 8 chunks' worth of bytes (no newlines between events) or a worker failed.
  bool produce(std::string& why) {
    if (mapped_) return produce_mapped(why);
    // No inflate thread: the workers parse on the other cores while this thread inflates (or
    // reads) straight into the chunk buffers.
    GzipReader reader(path_, GzipReader::kDefaultBlockBytes, InflateEngine::Fastest, /*inflate_thread=*/false);
    constexpr size_t kBlock = GzipReader::kDefaultBlockBytes;
    ChunkBytes data = spare();  // ChunkJob::bytes: a spare byte, then the chunk
    uint64_t start = 0;
    size_t resume = 0;  // where to look for the next cut
    // An object's header (deviceProperties: one object per GPU, each on its own lines) has lines
    // that look like cuts; the first cut comes after the "traceEvents" key. (A cut anywhere else
    // is disproven and costs a second scan, never a wrong result.)
    bool header = true;
    size_t key_from = 0;
    for (;;) {
      const size_t before = data.size();
      if (before + kBlock > data.capacity()) {
        data.reserve(std::max(before + kBlock, data.capacity() + data.capacity() / 2));
      }
      const size_t n = reader.read(data.data() + before, kBlock);
      data.resize(before + n);
      if (n == 0) break;
      if (header) {
        const std::string_view text = data.view();
        const size_t first = text.find_first_not_of(" \t\r\n\xEF\xBB\xBF", 1);
        const size_t key = text.find("\"traceEvents\"", key_from);
        if (first != std::string::npos && text[first] != '{') {
          header = false;  // a bare array: events from the start
        } else if (key != std::string::npos) {
          header = false;
          resume = key;
        } else {
          key_from = text.size() < 13 ? 0 : text.size() - 13;
        }
      }
      while (!header && data.size() >= chunk_bytes_) {
        const size_t cut = find_cut(data.view(), std::max(resume, chunk_bytes_), resume);
        if (cut == std::string::npos) break;
        ChunkBytes rest = spare();
        rest.append(data.data() + cut, data.size() - cut);
        data.resize(cut);
        if (!emit(std::move(data), {}, start, /*last=*/false)) {
          why = failure_;
          return false;
        }
        start += cut - 1;
        data = std::move(rest);
        resume = 0;
      }
      if (data.size() - 1 > 8 * chunk_bytes_ + kBlock) {
        why = "no place to cut between events in " + std::to_string(data.size() - 1) + " bytes from byte " +
              std::to_string(start);
        return false;
      }
    }
    emit(std::move(data), {}, start, /*last=*/true);
    return true;
  }

  // produce() for a mapped file: the same cuts, found in the mapping, the chunks left where they are.
  bool produce_mapped(std::string& why) {
    const std::string_view all = mapped_.view();
    constexpr size_t kBlock = GzipReader::kDefaultBlockBytes;
    const size_t first = all.find_first_not_of(" \t\r\n\xEF\xBB\xBF");
    size_t resume = 0;  // where to look for the next cut
    if (first == std::string::npos || all[first] == '{') {
      // The first cut comes after the "traceEvents" key (see produce()); without one, one chunk.
      resume = first == std::string::npos ? std::string::npos : all.find("\"traceEvents\"");
      if (resume == std::string::npos) return emit({}, all, 0, /*last=*/true);
    }
    size_t start = 0;
    for (;;) {
      const size_t from = std::max(resume, start + chunk_bytes_);
      if (from >= all.size()) break;
      // No cut within eight chunks' worth: the read path gives up there too.
      const size_t window = std::min(all.size(), start + 8 * chunk_bytes_ + kBlock);
      size_t unused;
      const size_t cut = find_cut(all.substr(0, window), from, unused);
      if (cut == std::string::npos) {
        if (window == all.size()) break;
        why = "no place to cut between events in " + std::to_string(window - start) + " bytes from byte " +
              std::to_string(start);
        return false;
      }
      if (!emit({}, all.substr(start, cut - start), start, /*last=*/false)) {
        why = failure_;
        return false;
      }
      start = cut;
      resume = 0;
    }
    return emit({}, all.substr(start), start, /*last=*/true);
  }

  ChunkBytes spare() {
    ChunkBytes bytes;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!spares_.empty()) {
        bytes = std::move(spares_.back());
        spares_.pop_back();
      }
    }
    bytes.resize(0);
    bytes.reserve(1 + chunk_bytes_ + 2 * GzipReader::kDefaultBlockBytes + kPadding);
    bytes.append(" ", 1);
    return bytes;
  }

  // A chunk: read into `bytes` (a spare byte, then the chunk), or `mapped` (bytes empty).
  bool emit(ChunkBytes&& bytes, std::string_view mapped, uint64_t start, bool last) {
    std::unique_lock<std::mutex> lock(mutex_);
    const size_t index = jobs_.size();
    options_.chunks = static_cast<int>(index + 1);
    if (index == 1 && workers_.empty()) {
      // A second chunk: the file is worth the threads.
      for (int t = 0; t < threads_; ++t) workers_.emplace_back([this] { work(); });
    }
    // Read ahead by at most two chunks beyond those being parsed.
    space_.wait(lock, [&] { return failed_ || index - done_ < static_cast<size_t>(threads_) + 2; });
    if (failed_) return false;
    ChunkJob& job = jobs_.emplace_back();
    job.bytes = std::move(bytes);
    job.text = job.bytes.size() > 0 ? job.bytes.view().substr(1) : mapped;
    job.start = start;
    job.span = index == 0 ? (last ? Span::Whole : Span::First) : (last ? Span::Last : Span::Middle);
    lock.unlock();
    ready_.notify_one();
    return true;
  }

  void work() {
#ifdef HOOKSTREAM_WITH_SIMDJSON
    // One stage-1 parser per thread, its buffers sized for a chunk once (a longer chunk grows them).
    Stage1Parser parser;
    const bool fast = fast_path_ && parser.ready(chunk_bytes_ + GzipReader::kDefaultBlockBytes + 1);
#endif
    for (;;) {
      ChunkJob* job = nullptr;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [&] { return stop_ || failed_ || next_ < jobs_.size(); });
        if (failed_ || next_ >= jobs_.size()) return;
        job = &jobs_[next_++];  // a deque: elements stay where they are while others are added
      }
#ifdef HOOKSTREAM_WITH_SIMDJSON
      if (!(fast && job->span == Span::Middle && parse_fast(*job, parser)))
#endif
        parse(*job, /*rethrow=*/false);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++done_;
        if (job->failed && !failed_) {
          failed_ = true;
          failure_ = "chunk at byte " + std::to_string(job->start) + " did not parse on its own";
        }
        if (job->bytes.capacity() > 0) spares_.push_back(std::move(job->bytes));
        job->bytes = ChunkBytes();
        if (mapped_) mapped_.release(job->text);
      }
      space_.notify_one();
      ready_.notify_all();
    }
  }

#ifdef HOOKSTREAM_WITH_SIMDJSON
  bool parse_fast(ChunkJob& job, Stage1Parser& parser) {
    try {
      job.sink = make_sink_();
      KinetoEvent event;
      // False: parse() makes a new sink for the strict scanner.
      if (!parse_middle_chunk_fast(path_, job.text, parser, *job.sink, event)) return false;
    } catch (...) {
      job.failed = true;  // the sink's own failure: the single-threaded scan meets it again
      return true;
    }
    job.end.at_cut = true;
    job.fast = true;
    return true;
  }
#endif

  void parse(ChunkJob& job, bool rethrow) {
    try {
      job.sink = make_sink_();
      ChunkSource source(path_, job.text);
      KinetoScanner scanner(source, *job.sink, job.span, job.start);
      job.info = scanner.run();
      job.end = scanner.end();
    } catch (...) {
      if (rethrow) throw;
      job.failed = true;
    }
  }

  // The workers stop at their current chunk; nothing parsed is used.
  bool abandon() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      failed_ = true;
    }
    stop_workers();
    return false;
  }

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    ready_.notify_all();
    space_.notify_all();
    for (std::thread& worker : workers_) worker.join();
    workers_.clear();
  }

  // Every chunk parsed, and each one's parse ended at the next one's first byte between two
  // elements of the event array: then each chunk's guess about where it starts was right.
  bool proven(std::string& why) const {
    const ChunkEnd::Tail document = jobs_.front().end.top_is_array ? ChunkEnd::Tail::Bare : ChunkEnd::Tail::Object;
    for (size_t k = 0; k < jobs_.size(); ++k) {
      const ChunkJob& job = jobs_[k];
      const bool last = k + 1 == jobs_.size();
      if (job.failed) {
        why = "chunk at byte " + std::to_string(job.start) + " did not parse on its own";
        return false;
      }
      if (job.end.at_cut == last || (job.end.tail != ChunkEnd::Tail::None && job.end.tail != document)) {
        why = "chunk at byte " + std::to_string(job.start) + " did not end between two events";
        return false;
      }
    }
    return true;
  }

  bool collect(std::vector<std::unique_ptr<KinetoEventSink>>& sinks, KinetoTraceInfo& info) {
    info = jobs_.front().info;
    for (ChunkJob& job : jobs_) {
      options_.fast_chunks += job.fast ? 1 : 0;
      info.saw_events = info.saw_events || job.info.saw_events;
      if (job.info.has_base_time) {  // a later "baseTimeNanoseconds" wins, as it does in one scan
        info.has_base_time = true;
        info.base_time_ns = job.info.base_time_ns;
      }
      sinks.push_back(std::move(job.sink));
    }
    info.bytes = jobs_.back().info.bytes;
    return true;
  }

  const std::string& path_;
  const MappedFile mapped_;  // a plain file's bytes; the chunks of a gzip file are inflated into buffers
  const KinetoSinkFactory& make_sink_;
  KinetoParallelScan& options_;
  const size_t chunk_bytes_;
  const int threads_;
  const bool fast_path_;
#ifdef HOOKSTREAM_WITH_SIMDJSON
  static constexpr size_t kPadding = simdjson::SIMDJSON_PADDING;
#else
  static constexpr size_t kPadding = 0;
#endif

  std::mutex mutex_;
  std::condition_variable ready_, space_;
  std::deque<ChunkJob> jobs_;
  std::vector<ChunkBytes> spares_;  // chunk buffers to reuse (their pages are already the process's)
  size_t next_ = 0, done_ = 0;
  bool stop_ = false, failed_ = false;
  std::string failure_;
  std::vector<std::thread> workers_;  // last: joined before the members above go
};

}  // namespace

bool kineto_simdjson_available() {
#ifdef HOOKSTREAM_WITH_SIMDJSON
  return true;
#else
  return false;
#endif
}

KinetoTraceInfo scan_kineto_trace_parallel(const std::string& path, const KinetoSinkFactory& make_sink,
                                           std::vector<std::unique_ptr<KinetoEventSink>>& sinks,
                                           KinetoParallelScan& scan) {
  sinks.clear();
  scan.chunks = 0;
  scan.fast_chunks = 0;
  scan.fell_back = false;
  scan.fallback_why.clear();
  KinetoTraceInfo info;
  std::string why;
  bool done;
  {
    ParallelScan parallel(path, make_sink, scan);
    done = parallel.run(sinks, info, why);
  }
  if (done) return info;
  sinks.clear();
  scan.fell_back = true;
  scan.fallback_why = why;
  GzipReader reader(path);
  sinks.push_back(make_sink());
  return scan_kineto_trace(reader, *sinks.back());
}

}  // namespace hookstream
