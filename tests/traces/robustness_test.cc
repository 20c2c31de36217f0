// Bad input: truncated and corrupt copies of the real traces, malformed JSON, traces without GPU
// activity. Every failure is an InputError whose one-line message names the file; nothing crashes.
#include <catch2/catch.hpp>

#include <sqlite3.h>

#include <fstream>
#include <iterator>

#include "sim/input_error.h"
#include "traces/replay_report.h"
#include "traces/trace_loader.h"
#include "trace_test_files.h"

using namespace hookstream;

namespace {
std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}
// The InputError message of loading `path`, or "" if it loaded.
std::string load_error(const std::string& path) {
  try {
    load_trace(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}
bool one_line(const std::string& s) { return s.find('\n') == std::string::npos; }
}  // namespace

TEST_CASE("truncated and corrupt SQLite exports are InputErrors naming the file", "[traces][robustness]") {
  const auto dir = test::temp_dir("sqlite");
  const std::string original = read_all(test::shared_trace("nsys/cloverleaf-nsys2024.5.sqlite"));
  REQUIRE(original.size() == 2154496);

  const std::string half = (dir / "half.sqlite").string();
  write_all(half, original.substr(0, original.size() / 2));
  const std::string truncated = load_error(half);
  CHECK(truncated.find(half) == 0);
  CHECK(truncated.find("truncated SQLite database") != std::string::npos);
  CHECK(one_line(truncated));

  // Same size, but the second half overwritten: SQLite itself finds the damage.
  const std::string garbage = (dir / "garbage.sqlite").string();
  std::string damaged = original;
  for (size_t i = damaged.size() / 2; i < damaged.size(); ++i) damaged[i] = static_cast<char>(i * 131 % 251);
  write_all(garbage, damaged);
  const std::string corrupt = load_error(garbage);
  CHECK(corrupt.find(garbage) == 0);
  CHECK(corrupt.find("corrupt") != std::string::npos);
  CHECK(one_line(corrupt));

  const std::string tiny = (dir / "tiny.sqlite").string();
  write_all(tiny, original.substr(0, 40));
  CHECK(load_error(tiny).find("not an SQLite database") != std::string::npos);
}

TEST_CASE("truncated .json.gz and malformed JSON name the file and byte offset", "[traces][robustness]") {
  const auto dir = test::temp_dir("json");
  const std::string original = read_all(test::shared_trace("kineto/a100-rank3-of-8-control.json.gz"));
  const std::string cut = (dir / "cut.json.gz").string();
  write_all(cut, original.substr(0, original.size() / 3));
  const std::string gz = load_error(cut);
  CHECK(gz.find(cut) == 0);
  CHECK(gz.find("corrupt or truncated gzip data at decompressed byte") != std::string::npos);
  CHECK(gz.find("unexpected end of file") != std::string::npos);
  CHECK(one_line(gz));

  const std::string bad = (dir / "bad.json").string();
  write_all(bad, "{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"kernel\",, \"ts\": 1}]}");
  const std::string malformed = load_error(bad);
  CHECK(malformed.find(bad + ": malformed JSON at byte 45: ") == 0);  // the second ','
  CHECK(one_line(malformed));

  // Cut mid-document (valid gzip, truncated JSON).
  const std::string half = (dir / "half.json").string();
  write_all(half, "{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"kernel\", \"ts\": 1");
  CHECK(load_error(half).find("malformed JSON at byte") != std::string::npos);

  const std::string other = (dir / "other.json").string();
  write_all(other, "{\"hello\": [1, 2, 3]}");
  CHECK(load_error(other).find("no \"traceEvents\" array") != std::string::npos);

  const std::string text = (dir / "notes.txt").string();
  write_all(text, "hello");
  CHECK(load_error(text).find("unknown trace format") != std::string::npos);
  CHECK(load_error((dir / "missing.json").string()).find("cannot open") != std::string::npos);
}

TEST_CASE("traces without GPU activity give a clean empty report", "[traces][robustness]") {
  const auto dir = test::temp_dir("empty");
  const std::string json = (dir / "empty.json").string();
  write_all(json, "{\"traceEvents\": [], \"baseTimeNanoseconds\": 1700000000000000000}");
  const EventModel from_json = load_trace(json);
  CHECK(from_json.ops.empty());
  CHECK(from_json.streams.empty());
  const ReplayReport report = analyse_replay(from_json);
  CHECK(report.gpu_ops == 0);
  CHECK(report.devices.empty());
  CHECK(render_replay_text(report).find("No GPU activity") != std::string::npos);
  CHECK(render_replay_json(report)["summary"]["gpu_ops"] == 0);

  // An nsys export has tables only when they have rows: one with only metadata is valid.
  const std::string db_path = (dir / "empty.sqlite").string();
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(db_path.c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, "CREATE TABLE META_DATA_EXPORT(name TEXT, value TEXT);"
                           "INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.13.2');"
                           "CREATE TABLE StringIds(id INTEGER PRIMARY KEY, value TEXT);",
                       nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  const EventModel from_sqlite = load_trace(db_path);
  CHECK(from_sqlite.ops.empty());
  CHECK(analyse_replay(from_sqlite).devices.empty());

  // SQLite, but not from nsys.
  const std::string foreign = (dir / "foreign.sqlite").string();
  REQUIRE(sqlite3_open(foreign.c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, "CREATE TABLE t(x);", nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  CHECK(load_error(foreign).find("not an Nsight Systems export") != std::string::npos);
}

TEST_CASE("trace format is detected from content, not the file name", "[traces][robustness]") {
  const auto dir = test::temp_dir("detect");
  const std::string renamed = (dir / "trace.bin").string();
  write_all(renamed, read_all(test::shared_trace("kineto/event-sync.json.gz")));
  CHECK(detect_trace_format(renamed) == TraceFormat::KinetoJson);
  CHECK(detect_trace_format(test::shared_trace("nsys/fuser-report1-nsys2024.6.sqlite")) == TraceFormat::NsysSqlite);
  // Plain (uncompressed) JSON goes through the same reader.
  const std::string plain = (dir / "plain.json").string();
  write_all(plain, "[{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"pid\": 0, \"tid\": 7, \"ts\": 10, \"dur\": 5}]");
  const EventModel m = load_trace(plain);
  REQUIRE(m.ops.size() == 1);
  CHECK(m.ops[0].kind == OpKind::Kernel);
  CHECK(m.ops[0].duration_ns == 5000);
  CHECK(m.streams[m.ops[0].stream].id == 7);
}

TEST_CASE("several files are ranks in order, and the report is deterministic", "[traces][robustness]") {
  const EventModel m = load_traces({test::shared_trace("kineto/event-sync.json.gz"),
                                    test::shared_trace("nsys/fuser-report1-nsys2024.6.sqlite")});
  const ReplayReport report = analyse_replay(m);
  CHECK(report.ranks == 2);
  REQUIRE(report.devices.size() == 2);
  CHECK(report.devices[0].rank == 0);
  CHECK(report.devices[1].rank == 1);
  CHECK(m.streams.size() == 1 + 14);
  const EventModel again = load_traces({test::shared_trace("kineto/event-sync.json.gz"),
                                        test::shared_trace("nsys/fuser-report1-nsys2024.6.sqlite")});
  CHECK(render_replay_json(analyse_replay(again)).dump() == render_replay_json(report).dump());
  CHECK(render_replay_text(analyse_replay(again)) == render_replay_text(report));
}
