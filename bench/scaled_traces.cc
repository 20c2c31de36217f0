#include "bench/scaled_traces.h"

#include <sqlite3.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

namespace hookstream::bench {

namespace {

// ---- nsys ----------------------------------------------------------------------------------------

// CUPTI's "not applicable" id (trace-formats.md): kept as it is in every copy.
constexpr int64_t kNotApplicable = 4294967295LL;

struct Database {
  sqlite3* handle = nullptr;
  explicit Database(const std::string& path) {
    if (sqlite3_open_v2(path.c_str(), &handle, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
      const std::string message = handle ? sqlite3_errmsg(handle) : "out of memory";
      sqlite3_close(handle);
      throw std::runtime_error(path + ": " + message);
    }
  }
  ~Database() { sqlite3_close(handle); }
  void exec(const std::string& sql) const {
    char* error = nullptr;
    if (sqlite3_exec(handle, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
      const std::string message = error ? error : "?";
      sqlite3_free(error);
      throw std::runtime_error(sql.substr(0, 200) + ": " + message);
    }
  }
  std::vector<std::vector<std::string>> rows(const std::string& sql) const {
    sqlite3_stmt* statement = nullptr;
    if (sqlite3_prepare_v2(handle, sql.c_str(), -1, &statement, nullptr) != SQLITE_OK) {
      throw std::runtime_error(sql.substr(0, 200) + ": " + sqlite3_errmsg(handle));
    }
    std::vector<std::vector<std::string>> out;
    while (sqlite3_step(statement) == SQLITE_ROW) {
      std::vector<std::string> row;
      for (int c = 0; c < sqlite3_column_count(statement); ++c) {
        const unsigned char* text = sqlite3_column_text(statement, c);
        row.emplace_back(text ? reinterpret_cast<const char*>(text) : "");
      }
      out.push_back(std::move(row));
    }
    sqlite3_finalize(statement);
    return out;
  }
  int64_t integer(const std::string& sql) const {
    const auto result = rows(sql);
    return result.empty() || result[0].empty() || result[0][0].empty() ? 0 : int64_t(std::stoll(result[0][0]));
  }
};

std::string sql_name(const std::string& name) { return "\"" + name + "\""; }

}  // namespace

void write_scaled_nsys(const std::string& source, const std::string& target, int copies) {
  namespace fs = std::filesystem;
  fs::copy_file(source, target, fs::copy_options::overwrite_existing);
  // The shared traces are read-only; the copy must be writable.
  fs::permissions(target, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::replace);
  if (copies <= 1) return;
  Database db(target);
  db.exec("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA cache_size = -262144;");
  std::string literal;  // the path as an SQL string literal
  for (char c : source) literal += c == '\'' ? std::string("''") : std::string(1, c);
  db.exec("ATTACH DATABASE '" + literal + "' AS src");

  struct Table {
    std::string name;
    std::vector<std::string> columns;
    bool has(const std::string& column) const { return std::find(columns.begin(), columns.end(), column) != columns.end(); }
  };
  std::vector<Table> tables;
  for (const auto& row : db.rows("SELECT name FROM src.sqlite_master WHERE type = 'table' AND "
                                 "(name LIKE 'CUPTI_ACTIVITY_KIND_%' OR name = 'NVTX_EVENTS') ORDER BY name")) {
    Table table{row[0], {}};
    for (const auto& column : db.rows("PRAGMA src.table_info(" + sql_name(table.name) + ")")) table.columns.push_back(column[1]);
    tables.push_back(std::move(table));
  }

  // The span every copy is shifted by, and the id ranges every copy's ids are offset by.
  int64_t first = std::numeric_limits<int64_t>::max(), last = std::numeric_limits<int64_t>::min();
  int64_t max_id[3] = {0, 0, 0};  // correlationId, eventId, rangeId
  const char* id_columns[3] = {"correlationId", "eventId", "rangeId"};
  for (const Table& t : tables) {
    if (t.has("start")) {
      const std::string end = t.has("end") ? "coalesce(\"end\", start)" : "start";
      const auto r = db.rows("SELECT min(start), max(" + end + ") FROM src." + sql_name(t.name));
      if (!r.empty() && !r[0][0].empty()) {
        first = std::min(first, int64_t(std::stoll(r[0][0])));
        last = std::max(last, int64_t(std::stoll(r[0][1])));
      }
    }
    for (int i = 0; i < 3; ++i) {
      if (!t.has(id_columns[i])) continue;
      max_id[i] = std::max(max_id[i], db.integer("SELECT max(" + sql_name(id_columns[i]) + ") FROM src." + sql_name(t.name) +
                                                 " WHERE " + sql_name(id_columns[i]) + " < " + std::to_string(kNotApplicable)));
    }
  }
  if (first > last) return;  // no timed activity: nothing to repeat
  const int64_t span = last - first + 1000;  // 1 us between copies

  for (const Table& t : tables) {
    std::string names, values;
    for (const std::string& column : t.columns) {
      std::string value = "src." + sql_name(t.name) + "." + sql_name(column);
      if (column == "start" || column == "end") {
        value += " + copies.k * " + std::to_string(span);
      } else {
        for (int i = 0; i < 3; ++i) {
          if (column != id_columns[i]) continue;
          value = "CASE WHEN " + value + " IS NULL OR " + value + " = " + std::to_string(kNotApplicable) + " THEN " + value +
                  " ELSE " + value + " + copies.k * " + std::to_string(max_id[i] + 1) + " END";
        }
      }
      names += (names.empty() ? "" : ", ") + sql_name(column);
      values += (values.empty() ? "" : ", ") + value;
    }
    // CROSS JOIN keeps `copies` the outer loop: rows come out copy by copy, each in the source's order.
    db.exec("WITH RECURSIVE copies(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM copies WHERE k < " +
            std::to_string(copies - 1) + ") INSERT INTO main." + sql_name(t.name) + " (" + names + ") SELECT " + values +
            " FROM copies CROSS JOIN src." + sql_name(t.name));
  }
  db.exec("DETACH DATABASE src");
}

// ---- Kineto --------------------------------------------------------------------------------------

namespace {

using ordered_json = nlohmann::ordered_json;

std::string read_all(const std::string& path) {
  gzFile in = gzopen(path.c_str(), "rb");  // reads plain files as they are
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::string text;
  std::vector<char> block(1 << 18);
  for (;;) {
    const int n = gzread(in, block.data(), static_cast<unsigned>(block.size()));
    if (n < 0) {
      gzclose(in);
      throw std::runtime_error(path + ": cannot inflate");
    }
    if (n == 0) break;
    text.append(block.data(), static_cast<size_t>(n));
  }
  gzclose(in);
  return text;
}

// Buffered output to a plain or gzip file.
class Output {
 public:
  explicit Output(const std::string& path) : gz_(path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0) {
    if (gz_) {
      gz_file_ = gzopen(path.c_str(), "wb1");  // level 1: the bench measures reading, not writing
      if (!gz_file_) throw std::runtime_error(path + ": cannot create");
    } else {
      file_ = std::fopen(path.c_str(), "wb");
      if (!file_) throw std::runtime_error(path + ": cannot create");
    }
    buffer_.reserve(kFlush + 4096);
  }
  ~Output() { close(); }
  void write(const std::string& text) {
    buffer_ += text;
    if (buffer_.size() >= kFlush) flush();
  }
  void close() {
    flush();
    if (gz_file_) gzclose(gz_file_);
    if (file_) std::fclose(file_);
    gz_file_ = nullptr;
    file_ = nullptr;
  }

 private:
  static constexpr size_t kFlush = 1 << 20;
  void flush() {
    if (buffer_.empty()) return;
    const bool ok = gz_ ? gz_file_ && gzwrite(gz_file_, buffer_.data(), static_cast<unsigned>(buffer_.size())) ==
                                          static_cast<int>(buffer_.size())
                        : file_ && std::fwrite(buffer_.data(), 1, buffer_.size(), file_) == buffer_.size();
    if (!ok) throw std::runtime_error("cannot write the scaled trace");
    buffer_.clear();
  }
  bool gz_;
  gzFile gz_file_ = nullptr;
  std::FILE* file_ = nullptr;
  std::string buffer_;
};

// One event as text with holes for the values that change between copies.
struct EventTemplate {
  enum class Kind { Time, Id, Step };
  struct Slot {
    Kind kind;
    bool is_float = false;
    int64_t integer = 0;
    double real = 0;
  };
  std::vector<std::string> pieces;  // pieces.size() == slots.size() + 1
  std::vector<Slot> slots;
};

constexpr const char* kStepPrefix = "ProfilerStep#";

bool step_name(const ordered_json& name, int64_t& number) {
  if (!name.is_string()) return false;
  const std::string& text = name.get_ref<const std::string&>();
  if (text.rfind(kStepPrefix, 0) != 0 || text.size() == 13 || text.size() > 22) return false;
  if (!std::all_of(text.begin() + 13, text.end(), [](char c) { return c >= '0' && c <= '9'; })) return false;
  number = std::stoll(text.substr(13));
  return true;
}

EventTemplate make_template(ordered_json event) {
  struct Hole {
    ordered_json* field;
    EventTemplate::Slot slot;
    size_t position = 0;
  };
  std::vector<Hole> holes;
  const auto hole = [&](ordered_json& value, EventTemplate::Kind kind) {
    EventTemplate::Slot slot{kind};
    slot.is_float = value.is_number_float();
    if (slot.is_float) slot.real = value.get<double>();
    else slot.integer = value.get<int64_t>();
    holes.push_back({&value, slot});
  };
  if (event.contains("ts") && event["ts"].is_number()) hole(event["ts"], EventTemplate::Kind::Time);
  if (event.contains("args") && event["args"].is_object()) {
    ordered_json& args = event["args"];
    for (const char* key : {"correlation", "External id", "wait_on_cuda_event_record_corr_id"}) {
      if (args.contains(key) && args[key].is_number_integer() && args[key].get<int64_t>() >= 0) hole(args[key], EventTemplate::Kind::Id);
    }
  }
  const std::string ph = event.value("ph", "");
  if ((ph == "s" || ph == "f") && event.contains("id") && event["id"].is_number_integer()) hole(event["id"], EventTemplate::Kind::Id);
  int64_t step = 0;
  if (event.contains("name") && step_name(event["name"], step)) {
    holes.push_back({&event["name"], {EventTemplate::Kind::Step, false, step, 0}});
  }
  // The dump follows the event's own key order: find where each hole lands, one at a time.
  const std::string marker = "\"@@hookstream-slot@@\"";
  for (Hole& h : holes) {
    const ordered_json saved = *h.field;
    *h.field = "@@hookstream-slot@@";
    h.position = event.dump().find(marker);
    *h.field = saved;
  }
  std::sort(holes.begin(), holes.end(), [](const Hole& a, const Hole& b) { return a.position < b.position; });
  for (Hole& h : holes) *h.field = "@@hookstream-slot@@";
  const std::string text = event.dump();
  EventTemplate t;
  size_t from = 0;
  for (const Hole& h : holes) {
    const size_t p = text.find(marker, from);
    if (p == std::string::npos) throw std::runtime_error("scaled Kineto trace: lost a value to shift");
    t.pieces.push_back(text.substr(from, p - from));
    t.slots.push_back(h.slot);
    from = p + marker.size();
  }
  t.pieces.push_back(text.substr(from));
  return t;
}

std::string number_text(double value) { return ordered_json(value).dump(); }

}  // namespace

void write_scaled_kineto(const std::string& source, const std::string& target, int copies) {
  const ordered_json trace = ordered_json::parse(read_all(source));
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array()) {
    throw std::runtime_error(source + ": no traceEvents array");
  }
  std::vector<EventTemplate> events;
  double first = std::numeric_limits<double>::max(), last = std::numeric_limits<double>::lowest();
  int64_t max_id = 0, first_step = std::numeric_limits<int64_t>::max(), last_step = std::numeric_limits<int64_t>::min();
  for (const ordered_json& event : trace["traceEvents"]) {
    events.push_back(make_template(event));
    if (event.contains("ts") && event["ts"].is_number()) {
      const double ts = event["ts"].get<double>();
      first = std::min(first, ts);
      last = std::max(last, ts + (event.contains("dur") && event["dur"].is_number() ? event["dur"].get<double>() : 0.0));
    }
    for (const EventTemplate::Slot& slot : events.back().slots) {
      if (slot.kind == EventTemplate::Kind::Id) max_id = std::max(max_id, slot.integer);
      if (slot.kind == EventTemplate::Kind::Step) {
        first_step = std::min(first_step, slot.integer);
        last_step = std::max(last_step, slot.integer);
      }
    }
  }
  // Whole microseconds keep integer timestamps integers; 1 us between copies.
  const int64_t span = first <= last ? static_cast<int64_t>(std::ceil(last - first)) + 1 : 0;
  const int64_t id_span = max_id + 1;
  const int64_t step_span = first_step <= last_step ? last_step - first_step + 1 : 0;

  Output out(target);
  out.write("{");
  bool first_key = true;
  for (const auto& [key, value] : trace.items()) {
    out.write(std::string(first_key ? "\n  " : ",\n  ") + ordered_json(key).dump() + ": ");
    first_key = false;
    if (key != "traceEvents") {
      out.write(value.dump());
      continue;
    }
    out.write("[\n");
    std::string line;
    bool first_event = true;
    for (int k = 0; k < copies; ++k) {
      for (const EventTemplate& t : events) {
        line.assign(first_event ? "  " : ",\n  ");
        first_event = false;
        for (size_t s = 0; s < t.slots.size(); ++s) {
          line += t.pieces[s];
          const EventTemplate::Slot& slot = t.slots[s];
          switch (slot.kind) {
            case EventTemplate::Kind::Time:
              line += slot.is_float ? number_text(slot.real + static_cast<double>(k) * span) : std::to_string(slot.integer + k * span);
              break;
            case EventTemplate::Kind::Id:
              line += std::to_string(slot.integer + k * id_span);
              break;
            case EventTemplate::Kind::Step:
              line += "\"" + std::string(kStepPrefix) + std::to_string(slot.integer + k * step_span) + "\"";
              break;
          }
        }
        line += t.pieces.back();
        out.write(line);
      }
    }
    out.write("\n  ]");
  }
  out.write("\n}\n");
  out.close();
}

}  // namespace hookstream::bench
