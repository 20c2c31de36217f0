#include "traces/importers/kineto/kineto_event_scanner.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "traces/importers/json_cursor.h"

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

// The first cut at or after `from`: the '{' of a line that starts an element after a ',' (only
// whitespace, a newline among it, between the two). npos when there is none yet; `resume` is then
// where to look again once more bytes are in (a cut may straddle the end of the data).
size_t find_cut(const std::string& data, size_t from, size_t& resume) {
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

// The fast path for a chunk in the middle of the event array: simdjson's DOM parser, which validates
// all it reads (grammar, strings and escapes, UTF-8, numbers), then the walk below, which mirrors
// KinetoScanner::scan_event member by member. Where simdjson accepts, the strict scanner accepts
// too and reads the same values: integers that fit int64 are int64 in both, larger ones that fit
// uint64 are uint64, numbers with a fraction or exponent are correctly rounded doubles ("-0" is
// the integer 0 in both). What simdjson rejects (integers beyond uint64, depth over 1024, any
// malformed byte) is left to the strict scanner, which then accepts or gives its own error.
bool json_number(const simdjson::dom::element& value, JsonNumber& n) {
  switch (value.type()) {
    case simdjson::dom::element_type::INT64:
      n.kind = JsonNumber::Kind::Integer;
      n.integer = value.get_int64().value_unsafe();
      return true;
    case simdjson::dom::element_type::UINT64:
      n.kind = JsonNumber::Kind::Unsigned;
      n.unsigned_integer = value.get_uint64().value_unsafe();
      return true;
    case simdjson::dom::element_type::DOUBLE:
      n.kind = JsonNumber::Kind::Float;
      n.floating = value.get_double().value_unsafe();
      return true;
    default: return false;
  }
}

void fast_args(const simdjson::dom::object args, KinetoEvent& e) {
  for (const simdjson::dom::key_value_pair member : args) {
    JsonNumber n;
    if (json_number(member.value, n)) {
      if (int64_t* field = args_field(member.key, e)) set_integer(n, *field);
    } else if (member.value.is_string() && is(member.key, "cuda_sync_kind")) {
      e.sync_kind.assign(member.value.get_string().value_unsafe());
    }
  }
}

// KinetoScanner::scan_event over a parsed object: the same members, in the same order, with the
// same early drops.
void fast_event(const simdjson::dom::object event, KinetoEventSink& sink, KinetoEvent& e) {
  e.clear();
  for (const simdjson::dom::key_value_pair member : event) {
    const simdjson::dom::element& value = member.value;
    const EventKey key = event_key(member.key);
    JsonNumber n;
    switch (key) {
      case EventKey::Ph:
        if (!value.is_string()) break;
        e.ph.assign(value.get_string().value_unsafe());
        if (e.ph.size() != 1 || e.ph[0] != 'X') {
          sink.dropped_phase(e.ph);
          return;
        }
        break;
      case EventKey::Cat:
        if (!value.is_string()) break;
        e.cat.assign(value.get_string().value_unsafe());
        if (!e.cat.empty() && !sink.wants_category(e.cat)) return;
        break;
      case EventKey::Name:
        if (value.is_string()) e.name.assign(value.get_string().value_unsafe());
        break;
      case EventKey::Pid:
      case EventKey::Tid:
        if (json_number(value, n)) set_integer(n, key == EventKey::Pid ? e.pid : e.tid);
        break;
      case EventKey::Ts:
      case EventKey::Dur:
        if (!json_number(value, n)) break;
        (key == EventKey::Ts ? e.ts : e.dur) = to_micros(n);
        (key == EventKey::Ts ? e.has_ts : e.has_dur) = true;
        break;
      case EventKey::Args:
        if (value.is_object()) fast_args(value.get_object().value_unsafe(), e);
        break;
      case EventKey::Other: break;
    }
  }
  sink.event(e);
}

// `bytes` is one spare byte, then a middle chunk: elements of the event array, each followed by
// ',' (the strict scanner's proof that the chunk ends at a cut). True when simdjson parsed it as
// the array '[' elements ']' and its events went to the sink; false (the sink untouched, `bytes`
// as it was) leaves the chunk to the strict scanner.
bool parse_middle_chunk_fast(std::string& bytes, simdjson::dom::parser& parser, KinetoEventSink& sink, KinetoEvent& e) {
  size_t comma = bytes.size();
  while (comma > 1 && is_blank(bytes[comma - 1])) --comma;
  if (comma <= 1 || bytes[--comma] != ',') return false;
  const size_t size = bytes.size();
  const size_t length = comma + 1;
  // simdjson reads up to SIMDJSON_PADDING bytes past the document (initialised here: blanks).
  if (bytes.size() < length + simdjson::SIMDJSON_PADDING) bytes.resize(length + simdjson::SIMDJSON_PADDING, ' ');
  bytes[0] = '[';
  bytes[comma] = ']';
  simdjson::dom::array elements;
  const bool parsed = parser.parse(bytes.data(), length, /*realloc_if_needed=*/false).get(elements) == simdjson::SUCCESS;
  if (parsed) {
    for (const simdjson::dom::element element : elements) {
      simdjson::dom::object event;
      if (element.get(event) == simdjson::SUCCESS) fast_event(event, sink, e);
    }
  }
  bytes[0] = ' ';
  bytes[comma] = ',';
  bytes.resize(size);
  return parsed;
}

#endif  // HOOKSTREAM_WITH_SIMDJSON

struct ChunkJob {
  // One spare byte (a blank, where the fast path puts the '[' of the array it parses), then the
  // chunk's bytes.
  std::string bytes;
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
      : path_(path), make_sink_(make_sink), options_(options),
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
    GzipReader reader(path_);
    std::string data = spare();  // ChunkJob::bytes: a spare byte, then the chunk
    uint64_t start = 0;
    size_t resume = 0;  // where to look for the next cut
    // An object's header (deviceProperties: one object per GPU, each on its own lines) has lines
    // that look like cuts; the first cut comes after the "traceEvents" key. (A cut anywhere else
    // is disproven and costs a second scan, never a wrong result.)
    bool header = true;
    size_t key_from = 0;
    for (;;) {
      const std::string_view block = reader.next_block();
      if (block.empty()) break;
      data.append(block);
      if (header) {
        const size_t first = data.find_first_not_of(" \t\r\n\xEF\xBB\xBF");
        const size_t key = data.find("\"traceEvents\"", key_from);
        if (first != std::string::npos && data[first] != '{') {
          header = false;  // a bare array: events from the start
        } else if (key != std::string::npos) {
          header = false;
          resume = key;
        } else {
          key_from = data.size() < 13 ? 0 : data.size() - 13;
        }
      }
      while (!header && data.size() >= chunk_bytes_) {
        const size_t cut = find_cut(data, std::max(resume, chunk_bytes_), resume);
        if (cut == std::string::npos) break;
        std::string rest = spare();
        rest.append(data, cut, std::string::npos);
        data.resize(cut);
        if (!emit(std::move(data), start, /*last=*/false)) {
          why = failure_;
          return false;
        }
        start += cut - 1;
        data = std::move(rest);
        resume = 0;
      }
      if (data.size() - 1 > 8 * chunk_bytes_ + GzipReader::kDefaultBlockBytes) {
        why = "no place to cut between events in " + std::to_string(data.size() - 1) + " bytes from byte " +
              std::to_string(start);
        return false;
      }
    }
    emit(std::move(data), start, /*last=*/true);
    return true;
  }

  std::string spare() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string bytes;
    if (!spares_.empty()) {
      bytes = std::move(spares_.back());
      spares_.pop_back();
    }
    bytes.reserve(1 + chunk_bytes_ + GzipReader::kDefaultBlockBytes + kPadding);
    bytes.assign(1, ' ');
    return bytes;
  }

  bool emit(std::string&& bytes, uint64_t start, bool last) {
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
    job.start = start;
    job.span = index == 0 ? (last ? Span::Whole : Span::First) : (last ? Span::Last : Span::Middle);
    lock.unlock();
    ready_.notify_one();
    return true;
  }

  void work() {
#ifdef HOOKSTREAM_WITH_SIMDJSON
    // One parser per thread, its buffers sized for a chunk once (a longer chunk grows them).
    simdjson::dom::parser parser;
    const bool fast = fast_path_ && parser.allocate(chunk_bytes_ + GzipReader::kDefaultBlockBytes + 1) == simdjson::SUCCESS;
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
        spares_.push_back(std::move(job->bytes));
        job->bytes = std::string();
      }
      space_.notify_one();
      ready_.notify_all();
    }
  }

#ifdef HOOKSTREAM_WITH_SIMDJSON
  bool parse_fast(ChunkJob& job, simdjson::dom::parser& parser) {
    try {
      job.sink = make_sink_();
      KinetoEvent event;
      if (!parse_middle_chunk_fast(job.bytes, parser, *job.sink, event)) return false;
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
      ChunkSource source(path_, std::string_view(job.bytes).substr(1));
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
  std::vector<std::string> spares_;  // chunk buffers to reuse (their pages are already the process's)
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
