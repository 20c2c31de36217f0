// Runs `hookstream replay` on the real traces: exit codes (0 analysed, 2 bad input), one-line
// errors, the JSON schema of docs/replay.md, several files as ranks, no partial output file.
#include <catch2/catch.hpp>

#include "tests/cli/run_binary.h"
#include "tests/temp_dir.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {
using ReplayRun = hookstream::testing::BinaryRun;
ReplayRun replay(const std::string& args) { return hookstream::testing::run_binary("replay " + args); }
std::string trace(const std::string& relative) {
  return std::string(HOOKSTREAM_SOURCE_DIR) + "/../shared/traces/" + relative;
}
// A file in this process's scratch directory, removed when the test program exits.
std::string temp(const std::string& name) {
  static const hookstream::test::TempDir dir("hookstream-replay-test-" + std::to_string(getpid()));
  return (dir / name).string();
}
}  // namespace

TEST_CASE("replay: text report on an nsys export, exit 0", "[cli][replay]") {
  const ReplayRun r = replay(trace("nsys/cloverleaf-nsys2024.5.sqlite"));
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("1591 GPU ops (1312 kernels, 0 NCCL kernels, 279 copies, 0 memsets)") != std::string::npos);
  CHECK(r.out.find("rank 0 device 0: 88.7% busy") != std::string::npos);
  CHECK(r.out.find("cudaDeviceSynchronize: 1312 calls") != std::string::npos);
}

TEST_CASE("replay --format json follows hookstream.replay/1", "[cli][replay]") {
  const ReplayRun r = replay(trace("kineto/a100-rank3-of-8-control.json.gz") + " --format json");
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["schema"] == "hookstream.replay/1");
  CHECK(j["summary"]["gpu_ops"] == 9450);
  CHECK(j["summary"]["ops_by_kind"]["collective"] == 60);
  REQUIRE(j["devices"].size() == 1);
  CHECK(j["devices"][0]["device"] == 3);
  CHECK(j["devices"][0]["largest_gaps"][0]["duration_ns"] == 2443000.0);
  CHECK(j["copy_compute_overlap"][0]["direction"] == "HtoD");
  CHECK(j["copy_compute_overlap"][0]["overlapped_ns"] == 33887000.0);
  CHECK(j["collective_compute_overlap"][0]["collectives"] == 60);
  CHECK(j["pageable_async_copies"]["copies"] == 60);
  CHECK(j["synchronising_calls"]["by_api"][0]["api"] == "cudaStreamSynchronize");
  CHECK(j["streams"].size() == 4);
}

TEST_CASE("replay: one file per rank", "[cli][replay]") {
  const ReplayRun r = replay(trace("kineto/event-sync.json.gz") + " " + trace("kineto/event-sync-multistream.json.gz") +
                             " --format json");
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["summary"]["ranks"] == 2);
  REQUIRE(j["devices"].size() == 2);
  CHECK(j["devices"][1]["rank"] == 1);
  CHECK(j["synchronising_calls"]["waits_matched"] == 2);  // one event sync + one stream wait
}

TEST_CASE("replay: bad input exits 2 with one line and no output file", "[cli][replay]") {
  const std::string output = temp("out.json");
  const ReplayRun missing = replay("/nonexistent/trace.sqlite -o " + output);
  CHECK(missing.exit_code == 2);
  CHECK(std::count(missing.out.begin(), missing.out.end(), '\n') == 1);
  CHECK(missing.out.find("/nonexistent/trace.sqlite") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(output));

  const std::string truncated = temp("truncated.sqlite");
  {
    std::ifstream in(trace("nsys/fuser-report1-nsys2024.6.sqlite"), std::ios::binary);
    std::string bytes(100000, '\0');
    in.read(&bytes[0], bytes.size());
    std::ofstream(truncated, std::ios::binary | std::ios::trunc) << bytes;
  }
  // A good file first: nothing is written when a later file is bad.
  const ReplayRun bad = replay(trace("kineto/event-sync.json.gz") + " " + truncated + " -o " + output);
  CHECK(bad.exit_code == 2);
  CHECK(std::count(bad.out.begin(), bad.out.end(), '\n') == 1);
  CHECK(bad.out.find(truncated + ": truncated SQLite database") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(output));

  // A directory of rank traces (tensorboard_trace_handler's output) is named as one.
  const ReplayRun directory = replay(trace("kineto"));
  CHECK(directory.exit_code == 2);
  CHECK(std::count(directory.out.begin(), directory.out.end(), '\n') == 1);
  CHECK(directory.out.find("kineto: is a directory: expected trace files (one per rank") != std::string::npos);

  CHECK(replay("").exit_code == 2);  // no trace given
  CHECK(replay(trace("kineto/event-sync.json.gz") + " --format yaml").exit_code == 2);
}

TEST_CASE("replay -o writes the report", "[cli][replay]") {
  const std::string output = temp("report.txt");
  std::filesystem::remove(output);
  const ReplayRun r = replay(trace("kineto/alexnet-a100-syncevents.json.gz") + " -o " + output);
  CHECK(r.exit_code == 0);
  CHECK(r.out.empty());
  std::ifstream in(output);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  CHECK(text.find("Async copies from pageable memory: 16") != std::string::npos);
  CHECK(text.find("20 stream waits, 0 event syncs, 20 matched") != std::string::npos);
}

TEST_CASE("replay --critical-segments: 20 listed by default with the total, 0 lists all, -1 is an input error",
          "[cli][replay]") {
  const std::string file = trace("nsys/cloverleaf-nsys2024.5.sqlite");
  const auto parse = [](const ReplayRun& r) {
    INFO(r.out);
    REQUIRE(r.exit_code == 0);
    return nlohmann::json::parse(r.out)["step"]["critical_path"];
  };
  const nlohmann::json shown = parse(replay(file + " --format json"));
  const nlohmann::json all = parse(replay(file + " --format json --critical-segments 0"));
  const nlohmann::json five = parse(replay(file + " --format json --critical-segments 5"));
  const size_t total = all["segments_total"].get<size_t>();
  REQUIRE(total > 20);  // cloverleaf alternates host work and kernels: a long path
  CHECK(all["segments"].size() == total);
  CHECK(shown["segments_total"] == total);
  CHECK(shown["segments"].size() == 20);
  REQUIRE(five["segments"].size() == 5);
  for (size_t k = 0; k < 5; ++k) CHECK(five["segments"][k] == all["segments"][k]);  // the first ones, in path order
  CHECK(shown["by_what"] == all["by_what"]);  // the time per group covers the whole path either way
  const auto text = replay(file + " --critical-segments 3");
  CHECK(text.exit_code == 0);
  CHECK(text.out.find("... " + std::to_string(total - 3) + " more segments (--critical-segments N lists more, 0 all)") !=
        std::string::npos);
  const auto bad = replay(file + " --critical-segments -1");
  CHECK(bad.exit_code == 2);
  CHECK(bad.out.find("--critical-segments") != std::string::npos);
  CHECK(std::count(bad.out.begin(), bad.out.end(), '\n') == 1);
}

TEST_CASE("replay: names that are not UTF-8 come out as U+FFFD in JSON and the timeline, exit 0", "[cli][replay]") {
  // An nsys export's strings are SQLite TEXT and may hold any bytes: a flipped byte in a damaged
  // copy of the fuser export did this. The JSON writer threw on such a name (nlohmann::json's
  // type_error 316): an internal error, exit 3, and no report.
  const std::string export_path = temp("latin1-kernel.sqlite");
  const std::string timeline = temp("latin1-kernel.timeline.json");
  std::filesystem::remove(export_path);
  std::filesystem::remove(timeline);
  std::filesystem::copy_file(trace("nsys/fuser-report1-nsys2024.6.sqlite"), export_path);
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(export_path.c_str(), &db) == SQLITE_OK);
  // The fuser kernel's demangled name gets a Latin-1 byte and a stray 0xFF.
  REQUIRE(sqlite3_exec(db,
                       "UPDATE StringIds SET value = replace(value, 'nvfuser_none_f0_c0_r0_g0', 'nvf' || CAST(X'E9' AS TEXT) "
                       "|| 'user_none_f0_c0_r0_g0' || CAST(X'FF' AS TEXT)) "
                       "WHERE value LIKE '<unnamed>::nvfuser_none_f0_c0_r0_g0(%'",
                       nullptr, nullptr, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_changes(db) == 1);
  sqlite3_close(db);

  const ReplayRun r = replay(export_path + " --format json --timeline " + timeline);
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);  // throws on invalid UTF-8
  CHECK(j["summary"]["gpu_ops"] == 21);
  const std::string replaced = "nvf\xEF\xBF\xBDuser_none_f0_c0_r0_g0\xEF\xBF\xBD(";  // U+FFFD for each bad byte
  CHECK(r.out.find(replaced) != std::string::npos);
  std::ifstream in(timeline);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  CHECK_FALSE(nlohmann::json::parse(text)["traceEvents"].empty());
  CHECK(text.find(replaced) != std::string::npos);
  CHECK(replay(export_path).exit_code == 0);  // the text report prints the bytes as they are
  std::filesystem::remove(export_path);
  std::filesystem::remove(timeline);
}
