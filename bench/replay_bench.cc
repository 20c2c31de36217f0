// Import + analysis speed of `hookstream replay`. Three tables:
// 1. The real traces in ../shared/traces: each file is loaded and analysed repeatedly (at least 5
//    runs and 1 s) and the median run is reported: import alone, then import + every analysis
//    `hookstream replay` runs by default (the whole-trace analyses and the step analysis:
//    attribution, replay schedule, critical path, races). These files are small (1.6 k GPU ops at
//    most), so opening them and reading their schema dominates.
// 2. Scaled traces made from the real ones (bench/scaled_traces.h): the activity rows repeated N
//    times with shifted times and offset ids, written to temporary files by this program and
//    removed after. These measure throughput per op and the peak memory a trace of that size needs
//    (issue 4: memory proportional to ops, not to file size). One row is the PyTorch 2.11 trace in
//    bench/traces inflated as it is (x1).
// 3. Two-core floors for every row of both: the time issue 4's target allows, what reading the
//    file costs on both cores before anything is built (sqlite_two_core_floor_s,
//    kineto_two_core_floor), what that leaves, and what one copy of the ops costs to first touch.
// CPU time of the process is reported next to wall time: on a shared 2-core machine it is the
// steadier of the two; wall time is what a user waits (the nsys importer reads on two threads, the
// Kineto importer inflates on a second one). The reading floor is what the file costs before any
// hookstream work, single-threaded: SQLite stepping through every row of the tables the importer
// reads (SELECT *, no column asked for), or inflating the .json.gz (ISA-L when built with it).
// Throughput above ~GPU ops / floor is out of reach whatever hookstream does on one core.
//
// Usage: replay_bench [TRACES_DIR] [--real-only | --scaled-only] [--large] [--only TEXT]
//   --large adds the ~1 M GPU op rows (minutes and several GiB of memory and /tmp);
//   --only runs the scaled rows whose label contains TEXT.
//        replay_bench --write SOURCE COPIES TARGET
//   writes one scaled trace and keeps it (for perf record, or `hookstream replay TARGET`).
//        replay_bench --floor TRACE
//   prints the two-core reading floor of one trace as one line of JSON (seconds): the floor of
//   table 3 (sqlite_two_core_floor_s, kineto_two_core_floor), for bench/replay_vs_hta.py, which
//   sets it against whole `hookstream replay` processes.
//        replay_bench --phases TRACE [RUNS]
//   times each phase of `hookstream replay TRACE` on its own (import, each analysis, rendering) and
//   prints a markdown table (see phases()); HOOKSTREAM_BENCH_TIMELINE=1 adds the --timeline output.
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <sqlite3.h>
#if HOOKSTREAM_BENCH_WITH_SIMDJSON
#include <simdjson.h>
#endif

#include "bench/scaled_traces.h"
#include "sim/events/event_model.h"
#include "sim/streams/dependency_graph.h"
#include "sim/verify/json_text.h"
#include "traces/importers/gzip_reader.h"
#include "traces/importers/nsys/nsys_importer.h"
#include "traces/replay_report.h"
#include "traces/step_analysis.h"
#include "traces/trace_loader.h"

#ifndef HOOKSTREAM_SOURCE_DIR
#define HOOKSTREAM_SOURCE_DIR "."
#endif

using namespace hookstream;

namespace {

double cpu_now() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + t.tv_nsec * 1e-9;
}

double wall_now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// kB from /proc/self/status (VmRSS: now, VmHWM: peak since start or the last reset).
long status_kb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const size_t length = std::strlen(key);
  while (std::getline(in, line)) {
    if (line.compare(0, length, key) == 0 && line.size() > length && line[length] == ':') return std::stol(line.substr(length + 1));
  }
  return -1;
}

// Writing 5 to clear_refs resets VmHWM to the current RSS (Linux 4.0+, proc(5)).
bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  return static_cast<bool>(out.flush());
}

// The heap settings glibc was started with (GLIBC_TUNABLES; it cannot change afterwards):
// `hookstream replay` runs with huge pages and large blocks kept in the heap (tools/cli/main.cc).
std::string heap_settings() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables == nullptr || *tunables == 0) {
    return "glibc defaults, 4 KiB pages (`hookstream replay` sets GLIBC_TUNABLES: see tools/cli/main.cc; on this VM "
           "page faults are most of the cost of the large rows)";
  }
  return std::string("GLIBC_TUNABLES=") + tunables + " (as `hookstream replay` runs)";
}

// Seconds to read `path` with nothing done with what is read (see the header comment); the best of
// three. `best_cpu_s`, when given: the least CPU time of the three (one thread: on an idle core the
// same as the wall time; on a loaded machine the part of it that was this work).
double reading_floor_s(const std::string& path, double* best_cpu_s = nullptr) {
  double best = 1e300, best_cpu = 1e300;
  for (int run = 0; run < 3; ++run) {
    const double start = wall_now(), cpu_start = cpu_now();
    if (detect_trace_format(path) == TraceFormat::NsysSqlite) {
      sqlite3* db = nullptr;
      if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) return -1;
      sqlite3_exec(db, "PRAGMA mmap_size = 1073741824", nullptr, nullptr, nullptr);  // as the importer
      for (const char* table : {"CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                                "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_CUDA_EVENT",
                                "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS"}) {
        sqlite3_stmt* query = nullptr;
        if (sqlite3_prepare_v2(db, (std::string("SELECT * FROM ") + table).c_str(), -1, &query, nullptr) != SQLITE_OK) {
          continue;  // absent in this export
        }
        while (sqlite3_step(query) == SQLITE_ROW) {
        }
        sqlite3_finalize(query);
      }
      sqlite3_close(db);
    } else {
      GzipReader reader(path);
      while (!reader.next_block().empty()) {
      }
    }
    best = std::min(best, wall_now() - start);
    best_cpu = std::min(best_cpu, cpu_now() - cpu_start);
  }
  if (best_cpu_s) *best_cpu_s = best_cpu;
  return best;
}

// Two-core floor of an nsys export: the importer's own queries (nsys_activity_queries: the same
// columns, chosen from the schema as the importer chooses them), every column of every row read by
// libsqlite3 (sqlite3_column_int64, or the text pointer of a text column), each table split at its
// middle rowid between two connections on two threads, so both halves take as long. Nothing is
// built from the rows: this is less than any importer that reads those columns does, so
// GPU ops / this time bounds what it can reach on this machine. Best of `runs`. `best_cpu_s`, when
// given: the least CPU time (both threads) of the runs.
double sqlite_two_core_floor_s(const std::string& path, int runs = 5, double* best_cpu_s = nullptr) {
  struct Range {
    std::string select;
    int64_t mid;
  };
  std::vector<Range> ranges;
  {
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) return -1;
    for (const NsysQuery& query : nsys_activity_queries(path)) {
      sqlite3_stmt* bounds = nullptr;
      if (sqlite3_prepare_v2(db, ("SELECT min(rowid), max(rowid) FROM " + query.table).c_str(), -1, &bounds, nullptr) == SQLITE_OK &&
          sqlite3_step(bounds) == SQLITE_ROW) {
        ranges.push_back({query.select, (sqlite3_column_int64(bounds, 0) + sqlite3_column_int64(bounds, 1)) / 2});
      }
      sqlite3_finalize(bounds);
    }
    sqlite3_close(db);
  }
  std::atomic<int64_t> sink{0};  // keeps the reads from being optimised away
  auto read_half = [&](bool upper) {
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK) return;
    sqlite3_exec(db, "PRAGMA mmap_size = 1073741824", nullptr, nullptr, nullptr);  // as the importer
    int64_t sum = 0;
    for (const Range& range : ranges) {
      const std::string sql = range.select + " WHERE rowid " + (upper ? ">" : "<=") + " " + std::to_string(range.mid);
      sqlite3_stmt* query = nullptr;
      if (sqlite3_prepare_v2(db, sql.c_str(), -1, &query, nullptr) == SQLITE_OK) {
        // Text columns (StringIds.value, NVTX_EVENTS.text) by their declared type, once per query.
        std::vector<bool> text;
        for (int column = 0; column < sqlite3_column_count(query); ++column) {
          const char* declared = sqlite3_column_decltype(query, column);
          text.push_back(declared != nullptr && std::strcmp(declared, "TEXT") == 0);
        }
        while (sqlite3_step(query) == SQLITE_ROW) {
          for (size_t column = 0; column < text.size(); ++column) {
            const int c = static_cast<int>(column);
            sum += text[column] ? sqlite3_column_bytes(query, c) : sqlite3_column_int64(query, c);
          }
        }
      }
      sqlite3_finalize(query);
    }
    sqlite3_close(db);
    sink += sum;
  };
  double best = 1e300, best_cpu = 1e300;
  for (int run = 0; run < runs; ++run) {
    const double start = wall_now(), cpu_start = cpu_now();
    std::thread other(read_half, true);
    read_half(false);
    other.join();
    best = std::min(best, wall_now() - start);
    best_cpu = std::min(best_cpu, cpu_now() - cpu_start);
  }
  if (best_cpu_s) *best_cpu_s = best_cpu;
  return best;
}

// Two-core floor of a Kineto trace: the serial part (reading the file and, for .json.gz, inflating
// it: one stream, one core) and simdjson's DOM parse of the events (the fastest JSON parser in
// Debian; the importer's fast path), cut into ~1 MiB pieces at Kineto's event separator "},\n  {"
// as the importer cuts them, counted as if the two cores shared it perfectly. The floor is
// max(serial, (serial + parse) / 2): nothing built, nothing analysed. The serial part is
// reading_floor_s's, measured by the caller; the parse is the best of `runs`, -1 without simdjson.
struct KinetoFloor {
  double read_s = -1, parse_s = -1, floor_s = -1;
  double parse_cpu_s = -1;  // the least CPU time of the parse runs
};

KinetoFloor kineto_two_core_floor(const std::string& path, double read_s, int runs = 3) {
  KinetoFloor floor;
  floor.read_s = read_s;
  std::string text;  // the whole text, for the parse below (not timed)
  {
    GzipReader reader(path);
    for (std::string_view block = reader.next_block(); !block.empty(); block = reader.next_block()) text.append(block);
  }
#if HOOKSTREAM_BENCH_WITH_SIMDJSON
  // Pieces of ~1 MiB, each a JSON array of whole events: "[" + from one event's "{" to the "}"
  // before the next cut + "]". The head (the header and the first event) and the tail are parsed
  // as pieces too: cut at the first and the last separator.
  static constexpr std::string_view kSeparator = "},\n  {";
  std::vector<simdjson::padded_string> pieces;
  const size_t last = text.rfind(kSeparator);
  size_t begin = text.find(kSeparator);
  while (begin != std::string::npos && begin < last) {
    size_t end = text.find(kSeparator, std::min(text.size(), begin + (size_t{1} << 20)));
    if (end == std::string::npos) end = last;
    std::string piece = "[";
    piece.append(text, begin + 3, end + 1 - (begin + 3));  // from the "{" after the separator to the "}"
    piece += "]";
    pieces.emplace_back(piece);
    begin = end;
  }
  if (pieces.empty()) return floor;
  simdjson::dom::parser parser;
  double best = 1e300, best_cpu = 1e300;
  for (int run = 0; run < runs; ++run) {
    const double start = wall_now(), cpu_start = cpu_now();
    for (const simdjson::padded_string& piece : pieces) {
      simdjson::dom::element root;
      if (parser.parse(piece).get(root) != simdjson::SUCCESS) return floor;  // not Kineto's layout: no floor claimed
    }
    best = std::min(best, wall_now() - start);
    best_cpu = std::min(best_cpu, cpu_now() - cpu_start);
  }
  floor.parse_s = best;
  floor.parse_cpu_s = best_cpu;
  floor.floor_s = std::max(floor.read_s, (floor.read_s + floor.parse_s) / 2);
#endif
  return floor;
}

// Milliseconds to first touch `bytes` of fresh anonymous memory on huge pages (as `hookstream replay`
// asks glibc for them), the median of 5 fresh mappings: what a new process pays to hold that much.
double first_touch_ms(size_t bytes) {
  std::vector<double> times;
  for (int run = 0; run < 5; ++run) {
    void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) return -1;
    madvise(memory, bytes, MADV_HUGEPAGE);
    const double start = wall_now();
    for (size_t offset = 0; offset < bytes; offset += 4096) static_cast<volatile char*>(memory)[offset] = 1;
    times.push_back((wall_now() - start) * 1e3);
    munmap(memory, bytes);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

struct Measurement {
  int64_t gpu_ops = 0, all_ops = 0;
  std::vector<double> wall, cpu, import_cpu, import_wall;
  double median(std::vector<double> v) const {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
  }
};

// One load + all default analyses; returns what `hookstream replay` would count.
void run_once(const std::string& path, Measurement& m) {
  const double wall_start = wall_now();
  const double cpu_start = cpu_now();
  EventModel model = load_trace(path);
  m.import_cpu.push_back(cpu_now() - cpu_start);
  m.import_wall.push_back(wall_now() - wall_start);
  m.all_ops = static_cast<int64_t>(model.ops.size());
  const TraceAnalysis analysis = analyse_trace(std::move(model));  // as `hookstream replay` runs them
  const ReplayReport& report = analysis.report;
  m.cpu.push_back(cpu_now() - cpu_start);
  m.wall.push_back(wall_now() - wall_start);
  m.gpu_ops = report.gpu_ops;
}

// One row of the floors table: what the issue's target allows for a trace, and what reading it
// costs before hookstream does anything (see sqlite_two_core_floor_s, kineto_two_core_floor).
struct FloorRow {
  std::string label;
  int64_t gpu_ops = 0, all_ops = 0;
  double measured_wall_s = 0;  // import + all analyses, in process (the median run; warm for the scaled rows)
};

std::string fmt_ms(double ms) {
  char text[32];
  std::snprintf(text, sizeof text, ms < 10 && ms > -10 ? "%.2f" : "%.1f", ms);
  return text;
}

// The row as markdown, measured now (the scaled files are removed right after their run);
// `reading_floor` is reading_floor_s(path), which the caller has measured for its own table.
std::string floor_row(const std::string& path, const FloorRow& row, double reading_floor) {
  const bool nsys = detect_trace_format(path) == TraceFormat::NsysSqlite;
  const double target = nsys ? 2e6 : 1e6;  // issue 4: GPU ops per second, import + all analyses
  const double allowed_ms = row.gpu_ops / target * 1e3;
  std::string reading;
  double floor_ms = -1;
  if (nsys) {
    floor_ms = sqlite_two_core_floor_s(path) * 1e3;
    reading = fmt_ms(floor_ms) + " (SQLite, 2 connections)";
  } else {
    const KinetoFloor kineto = kineto_two_core_floor(path, reading_floor);
    floor_ms = kineto.floor_s * 1e3;
    reading = kineto.parse_s < 0 ? "n/a (read " + fmt_ms(kineto.read_s * 1e3) + ")"
                                 : fmt_ms(floor_ms) + " (read " + fmt_ms(kineto.read_s * 1e3) + ", parse " +
                                       fmt_ms(kineto.parse_s * 1e3) + " on one core)";
  }
  const double touch_ms = first_touch_ms(static_cast<size_t>(row.all_ops) * sizeof(Op));
  char line[1024];
  std::snprintf(line, sizeof line, "| %s | %lld | %.0fM | %s | %s | %s | %s | %s |\n", row.label.c_str(),
                static_cast<long long>(row.gpu_ops), target / 1e6, fmt_ms(allowed_ms).c_str(), reading.c_str(),
                floor_ms < 0 ? "n/a" : fmt_ms(allowed_ms - floor_ms).c_str(), fmt_ms(touch_ms).c_str(),
                fmt_ms(row.measured_wall_s * 1e3).c_str());
  return line;
}

void print_floors(const std::vector<std::string>& rows) {
  if (rows.empty()) return;
  std::printf("\nTwo-core floors: what the targets leave. \"Allowed\" is the time import + all analyses may take at the "
              "issue's target (2 M GPU ops/s from SQLite, 1 M from Kineto JSON). The reading floor is a lower bound of "
              "what any importer built on this machine's libraries pays before it builds an op, with both cores used "
              "perfectly: for nsys, libsqlite3 reading the importer's own queries (the same columns of every row of the "
              "same tables, nothing built from them), each table split at its middle rowid over two connections on two "
              "threads (best of 5); for Kineto, "
              "max(read, (read + parse) / 2), where read is reading (and inflating) the file, serial (the reading floor above), and parse is "
              "simdjson's DOM parse of the events in ~1 MiB pieces on one core (best of 3). \"Left\" is allowed minus "
              "the floor: the time for building every op and running every analysis. First touch: fresh huge-page memory "
              "for one copy of the ops (all ops x %zu bytes, the size of an `Op`), median of 5, on top of the floor in a "
              "new process. Measured: import + all analyses in this process (median; warm for the scaled rows).\n\n",
              sizeof(Op));
  std::printf("| trace | GPU ops | target GPU ops/s | allowed ms | two-core reading floor ms | left ms | first touch of the "
              "ops ms | measured wall ms |\n");
  std::printf("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |\n");
  for (const std::string& row : rows) std::fputs(row.c_str(), stdout);
  std::fflush(stdout);
}

// A trace named relative to the shared traces folder, or "@" and a path in this repository.
std::string trace_path(const std::string& shared, const std::string& name) {
  return name[0] == '@' ? std::string(HOOKSTREAM_SOURCE_DIR) + "/" + name.substr(1) : shared + "/" + name;
}
std::string trace_label(const std::string& name) { return name[0] == '@' ? name.substr(1) : name; }

void real_traces(const std::string& shared, std::vector<std::string>& floors) {
  const std::vector<std::string> files = {
      "nsys/cloverleaf-nsys2024.5.sqlite",         "nsys/fuser-report1-nsys2024.6.sqlite",
      "kineto/a100-rank3-of-8-control.json.gz",    "kineto/alexnet-a100-syncevents.json.gz",
      "kineto/event-sync-multistream.json.gz",     "kineto/event-sync.json.gz",
      // Recorded for hookstream (bench/traces/README.md): PyTorch 2.11, 300 MLP training steps.
      "@bench/traces/torch2.11-mlp-train-300steps.json.gz",
  };
  std::printf("| trace | GPU ops | all ops | median wall ms (runs) | import CPU ms | import + all analyses CPU ms | "
              "GPU ops/s (import, CPU) | GPU ops/s (all, CPU) | GPU ops/s (all, wall) | all ops/s (all, CPU) | reading floor ms "
              "| GPU ops / floor |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const std::string& file : files) {
    Measurement m;
    double total = 0;
    const std::string path = trace_path(shared, file);
    while (m.wall.size() < 5 || total < 1.0) {
      run_once(path, m);
      total += m.wall.back();
    }
    const double cpu = m.median(m.cpu), import_cpu = m.median(m.import_cpu), wall = m.median(m.wall);
    const double floor = reading_floor_s(path);
    std::printf("| %s | %lld | %lld | %.3f (%zu) | %.3f | %.3f | %.2fM | %.2fM | %.2fM | %.2fM | %.3f | %.2fM |\n",
                trace_label(file).c_str(),
                static_cast<long long>(m.gpu_ops), static_cast<long long>(m.all_ops), wall * 1e3, m.wall.size(),
                import_cpu * 1e3, cpu * 1e3, m.gpu_ops / import_cpu / 1e6, m.gpu_ops / cpu / 1e6, m.gpu_ops / wall / 1e6,
                m.all_ops / cpu / 1e6, floor * 1e3, m.gpu_ops / floor / 1e6);
    floors.push_back(floor_row(path, {trace_label(file), m.gpu_ops, m.all_ops, wall}, floor));
  }
  std::fflush(stdout);
}

struct ScaledCase {
  std::string label;   // what the row is, honestly
  std::string source;  // relative to the traces folder, or "@" and a path in this repository
  std::string suffix;  // of the temporary file: the format and whether it is compressed
  int copies;
  bool large;
};

void scaled_traces(const std::string& shared, bool include_large, const std::string& only, std::vector<std::string>& floors) {
  const std::vector<ScaledCase> cases = {
      {"nsys cloverleaf x64", "nsys/cloverleaf-nsys2024.5.sqlite", ".sqlite", 64, false},
      {"nsys cloverleaf x640", "nsys/cloverleaf-nsys2024.5.sqlite", ".sqlite", 640, true},
      {"Kineto alexnet x1024 (.json.gz)", "kineto/alexnet-a100-syncevents.json.gz", ".json.gz", 1024, false},
      {"Kineto alexnet x1024 (.json)", "kineto/alexnet-a100-syncevents.json.gz", ".json", 1024, false},
      {"Kineto alexnet x10240 (.json)", "kineto/alexnet-a100-syncevents.json.gz", ".json", 10240, true},
      // The PyTorch 2.11 trace inflated, unscaled: the Kineto shape with the least JSON per GPU op.
      {"Kineto PyTorch 2.11 MLP, x1 (.json, inflated)", "@bench/traces/torch2.11-mlp-train-300steps.json.gz", ".json", 1, false},
  };
  std::printf("\nScaled traces: the real trace's activity rows (nsys: CUPTI_ACTIVITY_KIND_* and NVTX_EVENTS; Kineto: "
              "traceEvents) repeated N times, each copy shifted by the trace's span with its correlation/event ids offset "
              "(bench/scaled_traces.h). First run: one import + all analyses from a trimmed heap, as one `hookstream replay` "
              "process; warm: the median of later runs in the same process (at least 3 and 1 s, at most ~20 s). The MLP row is "
              "the PyTorch 2.11 trace inflated byte for byte (x1), as the profiler wrote it. Peak RSS growth: VmHWM after the first run minus VmRSS before it. Heap: %s.\n\n",
              heap_settings().c_str());
  std::printf("| trace (rows repeated with shifted times) | file MB | GPU ops | all ops | first run: import CPU s | "
              "first run: import + all analyses CPU s (wall s) | first run GPU ops/s (import, CPU) | first run GPU ops/s "
              "(all, CPU) | warm runs | warm: import CPU s | warm: import + all CPU s (wall s) | warm GPU ops/s (import, CPU) | "
              "warm GPU ops/s (all, CPU) | GPU ops/s (all, wall): first / warm | peak RSS growth MB | RSS bytes per op | "
              "reading floor s | GPU ops / floor |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const ScaledCase& c : cases) {
    if ((c.large && !include_large) || c.label.find(only) == std::string::npos) continue;
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("hookstream-replay-bench-" + std::to_string(getpid()) + "-x" + std::to_string(c.copies) + c.suffix))
                                 .string();
    const double made = wall_now();
    const std::string source = trace_path(shared, c.source);
    if (c.suffix == ".sqlite") {
      bench::write_scaled_nsys(source, path, c.copies);
    } else if (c.copies == 1) {  // the file as the profiler wrote it, inflated byte for byte
      GzipReader reader(source);
      std::ofstream out(path, std::ios::binary);
      for (std::string_view block = reader.next_block(); !block.empty(); block = reader.next_block()) {
        out.write(block.data(), static_cast<std::streamsize>(block.size()));
      }
    } else {
      bench::write_scaled_kineto(source, path, c.copies);
    }
    const double file_mb = static_cast<double>(std::filesystem::file_size(path)) / (1 << 20);
    std::fprintf(stderr, "replay_bench: wrote %s (%.1f MB) in %.1f s\n", path.c_str(), file_mb, wall_now() - made);

    // The first run starts from a trimmed heap, as a `hookstream replay` process does: every page it
    // touches is new (page faults are much of its cost on this VM), and its peak RSS growth is the
    // memory the trace needs. Later runs reuse the heap the earlier ones freed ("warm").
    Measurement first, warm;
    malloc_trim(0);
    const long rss_before = status_kb("VmRSS");
    const bool reset = reset_peak_rss();
    run_once(path, first);
    const long peak = status_kb("VmHWM");
    const double growth_mb = reset && rss_before >= 0 && peak >= 0 ? (peak - rss_before) / 1024.0 : -1;
    double total = 0;
    while ((warm.wall.size() < 3 || total < 1.0) && (warm.wall.empty() || total < 20.0)) {
      run_once(path, warm);
      total += warm.wall.back();
    }
    const double floor = reading_floor_s(path);
    floors.push_back(floor_row(path, {c.label, first.gpu_ops, first.all_ops, warm.median(warm.wall)}, floor));
    std::filesystem::remove(path);
    const double cold_all = first.cpu[0], cpu = warm.median(warm.cpu), import_cpu = warm.median(warm.import_cpu);
    const double warm_wall = warm.median(warm.wall);
    std::printf("| %s | %.1f | %lld | %lld | %.3f | %.3f (%.3f) | %.2fM | %.2fM | %zu | %.3f | %.3f (%.3f) | %.2fM | %.2fM | "
                "%.2fM / %.2fM | %.0f | %.0f | %.3f | %.2fM |\n",
                c.label.c_str(), file_mb, static_cast<long long>(first.gpu_ops), static_cast<long long>(first.all_ops),
                first.import_cpu[0], cold_all, first.wall[0], first.gpu_ops / first.import_cpu[0] / 1e6, first.gpu_ops / cold_all / 1e6,
                warm.wall.size(), import_cpu, cpu, warm_wall, warm.gpu_ops / import_cpu / 1e6, warm.gpu_ops / cpu / 1e6,
                first.gpu_ops / first.wall[0] / 1e6, warm.gpu_ops / warm_wall / 1e6, growth_mb,
                growth_mb * (1 << 20) / std::max<int64_t>(1, first.all_ops), floor, first.gpu_ops / floor / 1e6);
    std::fflush(stdout);
  }
}

// --phases TRACE [RUNS]: where the time of one `hookstream replay TRACE` goes, phase by phase, each
// run on its own (no phase beside another, unlike analyse_trace), so that every phase's CPU time is
// its own. The first run comes from a trimmed heap (as a fresh process, bar its start); the others
// are warm. Per phase: wall ms and CPU ms (the process's: the importers and the scheduler use a
// second thread). The DAG is built once on its own and then again inside the schedule (as
// schedule_replay_in_place builds it, beside the schedule times on >= 20 k ops), so "schedule +
// critical path" is the schedule's CPU less the DAG's. Last, the import + analyse_trace as the CLI
// runs them (both cores), for the total a user waits.
void phases(const std::string& path, int runs, bool with_timeline) {
  struct Timed {
    std::string phase;
    std::vector<double> wall_ms, cpu_ms;
  };
  std::vector<Timed> rows;
  const auto timed = [&rows](size_t index, const char* name, auto&& work) {
    if (rows.size() <= index) rows.push_back(Timed{name, {}, {}});
    const double wall = wall_now(), cpu = cpu_now();
    work();
    rows[index].wall_ms.push_back((wall_now() - wall) * 1e3);
    rows[index].cpu_ms.push_back((cpu_now() - cpu) * 1e3);
  };
  int64_t gpu_ops = 0, all_ops = 0, step_ops = 0;
  volatile double elementary_sink = 0;  // keeps the elementary passes from being optimised away
  for (int run = 0; run < runs; ++run) {
    malloc_trim(0);
    size_t k = 0;
    EventModel model;
    timed(k++, "import (load_trace)", [&] { model = load_trace(path); });
    ReplayReport report;
    timed(k++, "whole-trace analyses (analyse_replay)", [&] { report = analyse_replay(model); });
    StepAnalysis step;
    timed(k++, "step cut (extract_step)", [&] { step.step = extract_step(model, {}); });
    timed(k++, "divergence (explain_step_divergence)", [&] { step.divergence = explain_step_divergence(model, step.step); });
    timed(k++, "free the trace's ops", [&] { model = EventModel{}; });
    timed(k++, "race check (check_step_races)", [&] { step.races = check_step_races(step.step); });
    timed(k++, "replay build (build_step_replay)", [&] { step.replay = build_step_replay(step.step); });
    // Elementary costs, for what a shared op table could save (bench/RESULTS.md, issue 23 item 4):
    // a pass that reads what a scheduling pass reads of each op, and one copy of the step's ops (a
    // stage's copy, as the replay build makes of the step and the step cut of the trace).
    timed(k++, "(elementary) one read pass over the replay's ops", [&] {
      double sum = 0;
      for (const Op& op : step.replay.model.ops) sum += op.start_ns + op.duration_ns + op.stream + static_cast<int>(op.kind);
      elementary_sink = elementary_sink + sum;
    });
    timed(k++, "(elementary) one copy of the step's ops, then freed", [&] {
      const EventModel copy = step.step.model;
      elementary_sink = elementary_sink + static_cast<double>(copy.ops.size());
    });
    size_t edges = 0;
    timed(k++, "dependency DAG alone (dependency_edges)", [&] {
      try {
        edges = dependency_edges(step.replay.model).edges.size();
      } catch (const std::runtime_error&) {
      }
    });
    step_ops = static_cast<int64_t>(step.replay.model.ops.size());
    timed(k++, "schedule + DAG + critical path (schedule_replay_in_place)", [&] {
      ScheduledReplay scheduled = schedule_replay_in_place(step.replay, 20);
      step.schedule = std::move(scheduled.schedule);
      step.critical = std::move(scheduled.critical);
    });
    std::string text;
    timed(k++, "render text", [&] { text = render_replay_text(report) + render_step_text(step); });
    timed(k++, "render json", [&] {
      nlohmann::json j = render_replay_json(report);
      j["step"] = render_step_json(step);
      text = json_text(j, 2);
    });
    // Only on request (`hookstream replay --timeline`): on a long step it outweighs the rest by far.
    if (with_timeline) timed(k++, "timeline (recorded_step_timeline)", [&] { text = recorded_step_timeline(step.step, step.races); });
    timed(k++, "free everything", [&] { step = StepAnalysis{}; report = ReplayReport{}; });
    timed(k++, "CLI path: import + analyse_trace (both cores)", [&] {
      EventModel again = load_trace(path);
      all_ops = static_cast<int64_t>(again.ops.size());
      TraceAnalysis analysis = analyse_trace(std::move(again));
      gpu_ops = analysis.report.gpu_ops;
      text = render_replay_text(analysis.report) + render_step_text(analysis.step);
    });
    (void)edges;
  }
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("%s: %lld GPU ops, %lld ops, %lld ops in the replayed step; %d runs (first from a trimmed heap, "
              "then warm). %s\n\n",
              path.c_str(), static_cast<long long>(gpu_ops), static_cast<long long>(all_ops),
              static_cast<long long>(step_ops), runs, heap_settings().c_str());
  std::printf("| phase | first run: wall ms (CPU ms) | warm median: wall ms (CPU ms) |\n| --- | ---: | ---: |\n");
  double first_cpu = 0, warm_cpu = 0;
  for (const Timed& row : rows) {
    std::vector<double> warm_wall(row.wall_ms.begin() + (runs > 1), row.wall_ms.end());
    std::vector<double> warm(row.cpu_ms.begin() + (runs > 1), row.cpu_ms.end());
    std::printf("| %s | %.1f (%.1f) | %.1f (%.1f) |\n", row.phase.c_str(), row.wall_ms[0], row.cpu_ms[0],
                median(warm_wall), median(warm));
    const bool counted = row.phase.rfind("CLI path", 0) != 0 && row.phase.rfind("dependency DAG alone", 0) != 0 &&
                         row.phase.rfind("render json", 0) != 0 && row.phase.rfind("timeline", 0) != 0 &&
                         row.phase.rfind("free everything", 0) != 0 && row.phase.rfind("(elementary)", 0) != 0;
    if (counted) first_cpu += row.cpu_ms[0], warm_cpu += median(warm);
  }
  std::printf("| sum of the phases of a default text run (import to render text) | (%.1f) | (%.1f) |\n", first_cpu, warm_cpu);
}

}  // namespace

int main(int argc, char** argv) {
  std::string shared = std::string(HOOKSTREAM_SOURCE_DIR) + "/../shared/traces";
  bool real = true, scaled = true, large = false;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--write" && i + 3 < argc) {
      const std::string source = argv[i + 1], target = argv[i + 3];
      const int copies = std::stoi(argv[i + 2]);
      if (source.size() > 7 && source.compare(source.size() - 7, 7, ".sqlite") == 0) bench::write_scaled_nsys(source, target, copies);
      else bench::write_scaled_kineto(source, target, copies);
      return 0;
    }
    if (arg == "--floor" && i + 1 < argc) {
      const std::string path = argv[i + 1];
      if (!std::filesystem::is_regular_file(path)) {
        std::fprintf(stderr, "replay_bench: --floor %s: no such file\n", path.c_str());
        return 2;
      }
      // floor_cpu_s: the floor's work in CPU seconds (both cores' worth), which a loaded machine
      // inflates far less than the wall time: `hookstream replay`'s CPU over it is the floor ratio
      // two perfectly shared idle cores would give at best (bench/RESULTS.md, issue 23 item 4).
      double read_cpu_s = -1;
      const double read_s = reading_floor_s(path, &read_cpu_s);
      if (detect_trace_format(path) == TraceFormat::NsysSqlite) {
        double floor_cpu_s = -1;
        const double floor_s = sqlite_two_core_floor_s(path, 5, &floor_cpu_s);
        std::printf("{\"format\": \"nsys\", \"read_one_core_s\": %.6f, \"floor_s\": %.6f, \"floor_cpu_s\": %.6f}\n",
                    read_s, floor_s, floor_cpu_s);
      } else {
        const KinetoFloor kineto = kineto_two_core_floor(path, read_s);
        const double floor_cpu_s = kineto.parse_cpu_s < 0 ? -1 : read_cpu_s + kineto.parse_cpu_s;
        std::printf("{\"format\": \"kineto\", \"read_one_core_s\": %.6f, \"parse_one_core_s\": %.6f, \"floor_s\": %.6f, "
                    "\"floor_cpu_s\": %.6f}\n",
                    kineto.read_s, kineto.parse_s, kineto.floor_s, floor_cpu_s);
      }
      return 0;
    }
    if (arg == "--phases" && i + 1 < argc) {
      const bool with_timeline = std::getenv("HOOKSTREAM_BENCH_TIMELINE") != nullptr;
      phases(argv[i + 1], i + 2 < argc ? std::max(1, std::stoi(argv[i + 2])) : 5, with_timeline);
      return 0;
    }
    if (arg == "--real-only") scaled = false;
    else if (arg == "--scaled-only") real = false;
    else if (arg == "--large") large = true;
    else if (arg == "--only" && i + 1 < argc) only = argv[++i];
    else if (arg.rfind("--", 0) == 0) {
      std::fprintf(stderr, "replay_bench: unknown option %s (expected --real-only, --scaled-only, --large, --only TEXT, --write, --floor, --phases)\n", arg.c_str());
      return 2;
    } else {
      shared = arg;
    }
  }
  std::vector<std::string> floors;
  if (real) real_traces(shared, floors);
  if (scaled) scaled_traces(shared, large, only, floors);
  print_floors(floors);
  return 0;
}
