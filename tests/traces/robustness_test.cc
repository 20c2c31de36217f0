// Bad input: truncated and corrupt copies of the real traces, malformed JSON, traces without GPU
// activity. Every failure is an InputError whose one-line message names the file; nothing crashes.
#include <catch2/catch.hpp>

#include <sqlite3.h>
#include <zlib.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "bench/scaled_traces.h"
#include "sim/inputs/input_error.h"
#include "traces/importers/gzip_reader.h"
#include "traces/importers/kineto/kineto_importer.h"
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
void write_gzip(const std::string& path, const std::string& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  REQUIRE(file != nullptr);
  REQUIRE(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  gzclose(file);
}
// The InputError message of importing `path` as a Kineto trace, or "" if it imported.
std::string kineto_error(const std::string& path) {
  try {
    import_kineto_json(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}
// The same for a file with `bytes`, removed afterwards: rewriting one file in place thousands of
// times is slow where truncating a file makes the filesystem flush it (ext4's auto_da_alloc).
std::string kineto_error_of(const std::string& path, const std::string& bytes) {
  write_all(path, bytes);
  const std::string error = kineto_error(path);
  std::filesystem::remove(path);
  return error;
}
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

TEST_CASE("a damaged GPU activity table is the same one-line error on one connection or two",
          "[traces][robustness]") {
  // The GPU activity tables of a large export are read through a second connection on another
  // thread (nsys_importer.cc; the 8-copy scaled trace is past that threshold, the original is not).
  // Damage in one of the kernel table's leaf pages (found with SQLite's dbstat table) must come
  // back as the InputError either way, not as a crash or a silently short table.
  const auto dir = test::temp_dir("sqlite-kernels");
  const std::string scaled = (dir / "x8.sqlite").string();
  bench::write_scaled_nsys(test::shared_trace("nsys/cloverleaf-nsys2024.5.sqlite"), scaled, 8);
  for (const std::string& source : {test::shared_trace("nsys/cloverleaf-nsys2024.5.sqlite"), scaled}) {
    INFO(source);
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open_v2(source.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
    sqlite3_stmt* query = nullptr;
    REQUIRE(sqlite3_prepare_v2(db,
                               "SELECT pageno, (SELECT page_size FROM pragma_page_size) FROM dbstat "
                               "WHERE name = 'CUPTI_ACTIVITY_KIND_KERNEL' AND pagetype = 'leaf' ORDER BY pageno LIMIT 1 OFFSET 1",
                               -1, &query, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_step(query) == SQLITE_ROW);
    const int64_t page = sqlite3_column_int64(query, 0), page_bytes = sqlite3_column_int64(query, 1);
    sqlite3_finalize(query);
    sqlite3_close(db);

    std::string damaged = read_all(source);
    REQUIRE(static_cast<size_t>(page * page_bytes) <= damaged.size());
    for (int64_t i = (page - 1) * page_bytes; i < page * page_bytes; ++i) damaged[i] = static_cast<char>(0xA5);
    const std::string path = (dir / "kernel-page.sqlite").string();
    write_all(path, damaged);
    const std::string error = load_error(path);
    INFO(error);
    CHECK(error.find(path) == 0);
    CHECK(error.find("corrupt") != std::string::npos);
    CHECK(error.find("CUPTI_ACTIVITY_KIND_KERNEL") != std::string::npos);
    CHECK(one_line(error));
  }
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

  // An Nsight Systems report is not its export: the error says the command that makes the export.
  const std::string report = (dir / "run.nsys-rep").string();
  write_all(report, std::string("\x01\x00\x00\x00nsys report body\x00\xff", 22));
  const std::string rep_error = load_error(report);
  CHECK(rep_error.find(report + ": is an Nsight Systems report") == 0);
  CHECK(rep_error.find("nsys export --type sqlite --output " + (dir / "run.sqlite").string() + " " + report) !=
        std::string::npos);
  CHECK(one_line(rep_error));
  const std::string old_report = (dir / "run.qdrep").string();
  write_all(old_report, "QDREP");
  CHECK(load_error(old_report).find("nsys export --type sqlite") != std::string::npos);
  // The content decides: an export that was only named .nsys-rep is read.
  const std::string misnamed = (dir / "export.nsys-rep").string();
  write_all(misnamed, read_all(test::shared_trace("nsys/fuser-report1-nsys2024.6.sqlite")));
  CHECK(detect_trace_format(misnamed) == TraceFormat::NsysSqlite);
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

  // A trace without CUDA work says what it does hold: here an MTIA trace's runtime calls, CPU ops,
  // Python frames and counter samples (Kineto's category names, libkineto ActivityType.cpp).
  const std::string mtia = (dir / "mtia.json").string();
  write_all(mtia, R"({"traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
    {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 20, "dur": 5},
    {"ph": "X", "cat": "python_function", "name": "train.py(10): step", "pid": 1, "tid": 1, "ts": 5, "dur": 50},
    {"ph": "X", "cat": "mtia_runtime", "name": "mtiaLaunchKernel", "pid": 1, "tid": 1, "ts": 12, "dur": 2},
    {"ph": "X", "cat": "mtia_ccp_events", "name": "mm_kernel", "pid": 7, "tid": 3, "ts": 14, "dur": 9},
    {"ph": "C", "cat": "mtia_counters", "name": "util", "pid": 7, "tid": 3, "ts": 14, "args": {"v": 3}},
    {"ph": "C", "name": "util", "pid": 7, "tid": 3, "ts": 24, "args": {"v": 1}},
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 1, "dur": 60}
  ]})");
  std::vector<TraceContents> contents;
  const EventModel from_mtia = load_traces({mtia}, &contents);
  REQUIRE(contents.size() == 1);
  CHECK(contents[0].other_events.at("cpu_op events") == 2);
  CHECK(contents[0].other_events.at("python_function events") == 1);
  CHECK(contents[0].other_events.at("mtia_runtime events") == 1);
  CHECK(contents[0].other_events.at("mtia_ccp_events events") == 1);
  CHECK(contents[0].other_events.at("counter samples (ph C)") == 2);
  ReplayReport mtia_report = analyse_replay(from_mtia);
  mtia_report.contents = contents;
  const std::string mtia_text = render_replay_text(mtia_report);
  CHECK(mtia_text.find("It holds 1 marker.") != std::string::npos);
  CHECK(mtia_text.find(mtia + ": 2 counter samples (ph C), 2 cpu_op events, 1 mtia_ccp_events events") !=
        std::string::npos);
  const nlohmann::json mtia_json = render_replay_json(mtia_report);
  CHECK(mtia_json["summary"]["not_imported"].size() == 5);

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

TEST_CASE("a Kineto trace cut at any byte is a one-line error at that byte", "[traces][robustness][kineto]") {
  const auto dir = test::temp_dir("kineto-cut");
  const std::string text = test::inflate_all(test::shared_trace("kineto/alexnet-a100-syncevents.json.gz"));
  REQUIRE(text.size() > 100000);
  const size_t last = text.find_last_not_of(" \t\r\n");
  const std::string path = (dir / "cut.json").string();
  int cuts = 0;
  for (size_t cut = 0; cut < text.size(); cut += 997) {
    INFO("cut at " << cut);
    const std::string error = kineto_error_of(path, text.substr(0, cut));
    CHECK(one_line(error));
    if (cut > last) {  // only trailing whitespace cut off
      CHECK(error.empty());
      continue;
    }
    // Every byte before the cut is a valid prefix: the error is the missing byte.
    CHECK(error.find(path + ": malformed JSON at byte " + std::to_string(cut) + ": unexpected end of input; expected ") == 0);
    ++cuts;
  }
  CHECK(cuts > 100);

  // The compressed file cut anywhere: the data inflated so far parses, then the gzip error.
  const std::string gz = read_all(test::shared_trace("kineto/alexnet-a100-syncevents.json.gz"));
  const std::string gz_path = (dir / "cut.json.gz").string();
  for (size_t cut = 2; cut < gz.size(); cut += 997) {
    INFO("gzip cut at " << cut);
    const std::string error = kineto_error_of(gz_path, gz.substr(0, cut));
    CHECK(error.find(gz_path + ": corrupt or truncated gzip data at decompressed byte ") == 0);
    CHECK(error.find("(unexpected end of file)") != std::string::npos);
    CHECK(one_line(error));
  }
}

TEST_CASE("a Kineto trace with a bad byte anywhere is rejected exactly when nlohmann::json rejects it",
          "[traces][robustness][kineto]") {
  const auto dir = test::temp_dir("kineto-bytes");
  const std::string text = test::inflate_all(test::shared_trace("kineto/event-sync.json.gz"));
  const std::string path = (dir / "mutated.json").string();
  int rejected = 0, accepted = 0;
  for (size_t at = 0; at < text.size(); at += 29) {
    for (const char bad : {'\0', '"', '}', ']', ',', '1', 'x', '\\', '\xC3', '\xFF'}) {
      std::string mutated = text;
      mutated[at] = bad;
      INFO("byte " << at << " set to " << static_cast<int>(static_cast<unsigned char>(bad)));
      const std::string error = kineto_error_of(path, mutated);
      CHECK(one_line(error));
      if (!error.empty()) CHECK(error.find(path + ": ") == 0);
      const bool valid = nlohmann::json::accept(mutated);
      CHECK((error.find("malformed JSON at byte ") != std::string::npos) == !valid);
      (valid ? accepted : rejected) += 1;
    }
  }
  CHECK(rejected > 1000);
  CHECK(accepted > 100);
}

TEST_CASE("corrupt gzip, empty and non-trace JSON are one-line errors, an early error stops the inflater",
          "[traces][robustness][kineto]") {
  const auto dir = test::temp_dir("kineto-bad");
  const std::string gz = read_all(test::shared_trace("kineto/alexnet-a100-syncevents.json.gz"));
  const std::string flipped = (dir / "flipped.json.gz").string();
  for (size_t at = 64; at < gz.size(); at += 1201) {  // past the header (with its file name)
    std::string damaged = gz;
    damaged[at] = static_cast<char>(damaged[at] ^ 0x55);
    const std::string error = kineto_error_of(flipped, damaged);
    INFO("flipped byte " << at << ": " << error);
    CHECK_FALSE(error.empty());  // deflate data or its CRC-32 catches every flip
    CHECK(error.find(flipped + ": ") == 0);
    CHECK(one_line(error));
  }

  const std::string empty = (dir / "empty.json").string();
  write_all(empty, "");
  CHECK(kineto_error(empty) == empty + ": malformed JSON at byte 0: unexpected end of input; expected a value");
  const std::string empty_gz = (dir / "empty.json.gz").string();
  write_gzip(empty_gz, "");
  CHECK(kineto_error(empty_gz) == empty_gz + ": malformed JSON at byte 0: unexpected end of input; expected a value");
  const std::string scalar = (dir / "scalar.json").string();
  write_all(scalar, " 42 ");
  CHECK(kineto_error(scalar).find("not a Chrome trace: no \"traceEvents\" array") != std::string::npos);
  const std::string trailing = (dir / "trailing.json").string();
  write_all(trailing, "{\"traceEvents\": []} x");
  CHECK(kineto_error(trailing) == trailing + ": malformed JSON at byte 20: unexpected 'x'; expected end of input after "
                                             "the document");

  // Beyond double's range anywhere, skipped values included, as nlohmann::json says.
  const std::string huge = (dir / "huge.json").string();
  write_all(huge, "{\"traceEvents\": [{\"x\": 1e400}]}");
  CHECK(kineto_error(huge) == huge + ": malformed JSON at byte 23: number overflow parsing '1e400'");

  // Malformed at byte 17 of 8 MiB that do not compress (so the gzip file is large enough to be
  // inflated on the other thread): the error comes at once and the inflater, blocked on a full
  // ring, is stopped and joined.
  const std::string early = (dir / "early.json.gz").string();
  std::string noise(8 << 20, '\0');
  uint32_t state = 12345;
  for (char& c : noise) c = static_cast<char>((state = state * 1103515245 + 12345) >> 24);
  write_gzip(early, "{\"traceEvents\": [!" + noise);
  REQUIRE(std::filesystem::file_size(early) > 4 * GzipReader::kDefaultBlockBytes);
  CHECK(kineto_error(early) == early + ": malformed JSON at byte 17: unexpected '!'; expected a value");
}

TEST_CASE("zlib and ISA-L read the same bytes and fail alike on cut or damaged gzip", "[traces][robustness][kineto]") {
  const auto dir = test::temp_dir("gzip-engines");
  // Everything a reader hands out, then its error ("" at a clean end).
  const auto read_all_blocks = [](const std::string& path, InflateEngine engine, size_t block) {
    std::string bytes, error;
    try {
      GzipReader reader(path, block, engine);
      for (std::string_view b = reader.next_block(); !b.empty(); b = reader.next_block()) bytes.append(b);
    } catch (const InputError& e) {
      error = e.what();
    }
    return std::make_pair(bytes, error);
  };
  std::vector<InflateEngine> engines = {InflateEngine::Zlib};
  if (GzipReader::engine_available(InflateEngine::Fastest)) engines.push_back(InflateEngine::Fastest);
  INFO("fastest engine: " << GzipReader::engine_name(InflateEngine::Fastest));
  for (const std::string trace : {"kineto/a100-rank3-of-8-control.json.gz", "kineto/alexnet-a100-syncevents.json.gz"}) {
    const std::string path = test::shared_trace(trace);
    const std::string expected = test::inflate_all(path);
    for (const InflateEngine engine : engines) {
      INFO(trace << " with " << (engine == InflateEngine::Zlib ? "zlib" : "fastest"));
      const auto [bytes, error] = read_all_blocks(path, engine, GzipReader::kDefaultBlockBytes);
      CHECK(error.empty());
      CHECK(bytes == expected);  // std::string == : no 35 MB diff printed unless it fails
    }
  }

  // Two members (gzip a; gzip b; cat) are one stream, as for gunzip; trailing junk is ignored.
  const std::string two = (dir / "two.json.gz").string();
  write_gzip((dir / "a.gz").string(), "{\"traceEvents\": ");
  write_gzip((dir / "b.gz").string(), "[]}");
  write_all(two, read_all((dir / "a.gz").string()) + read_all((dir / "b.gz").string()) + "junk");
  for (const InflateEngine engine : engines) {
    CHECK(read_all_blocks(two, engine, 3).first == "{\"traceEvents\": []}");
    CHECK(read_all_blocks(two, engine, 3).second.empty());
  }

  const std::string gz = read_all(test::shared_trace("kineto/alexnet-a100-syncevents.json.gz"));
  const std::string damaged_path = (dir / "damaged.json.gz").string();
  for (size_t at = 2; at < gz.size(); at += 499) {
    for (const bool cut : {true, false}) {
      std::string damaged = gz;
      if (cut) damaged.resize(at);
      else damaged[at] = static_cast<char>(damaged[at] ^ 0x55);
      write_all(damaged_path, damaged);
      for (const InflateEngine engine : engines) {
        const auto [bytes, error] = read_all_blocks(damaged_path, engine, 4093);
        INFO((cut ? "cut at " : "flipped ") << at << ", " << (engine == InflateEngine::Zlib ? "zlib" : "fastest")
                                            << ": " << error);
        CHECK(one_line(error));
        if (cut) {
          CHECK(error == damaged_path + ": corrupt or truncated gzip data at decompressed byte " +
                             std::to_string(bytes.size()) + " (unexpected end of file)");
        } else if (at >= 64) {  // past the header's file name: the data or its CRC-32 is hit
          CHECK(error.find(damaged_path + ": corrupt or truncated gzip data at decompressed byte " +
                           std::to_string(bytes.size()) + " (") == 0);
        }
      }
      std::filesystem::remove(damaged_path);
    }
  }
}
