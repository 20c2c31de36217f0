// Import + analysis speed of `hookstream replay`. Two tables:
// 1. The real traces in ../shared/traces: each file is loaded and analysed repeatedly (at least 5
//    runs and 1 s) and the median run is reported: import alone, then import + every analysis
//    `hookstream replay` runs by default (the whole-trace analyses and the step analysis:
//    attribution, replay schedule, critical path, races). These files are small (1.6 k GPU ops at
//    most), so opening them and reading their schema dominates.
// 2. Scaled traces made from the real ones (bench/scaled_traces.h): the activity rows repeated N
//    times with shifted times and offset ids, written to temporary files by this program and
//    removed after. These measure throughput per op and the peak memory a trace of that size needs
//    (issue 4: memory proportional to ops, not to file size).
// CPU time of the process is reported next to wall time: on a shared 2-core machine it is the
// steadier of the two; wall time is what a user waits (the nsys importer reads on two threads, the
// Kineto importer inflates on a second one). The reading floor is what the file costs before any
// hookstream work, single-threaded: SQLite stepping through every row of the tables the importer
// reads (no column decoded), or inflating the .json.gz (ISA-L when built with it). Throughput
// above ~GPU ops / floor is out of reach whatever hookstream does.
//
// Usage: replay_bench [TRACES_DIR] [--real-only | --scaled-only] [--large] [--only TEXT]
//   --large adds the ~1 M GPU op rows (minutes and several GiB of memory and /tmp);
//   --only runs the scaled rows whose label contains TEXT.
//        replay_bench --write SOURCE COPIES TARGET
//   writes one scaled trace and keeps it (for perf record, or `hookstream replay TARGET`).
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <sqlite3.h>

#include "bench/scaled_traces.h"
#include "traces/importers/gzip_reader.h"
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
// three.
double reading_floor_s(const std::string& path) {
  double best = 1e300;
  for (int run = 0; run < 3; ++run) {
    const double start = wall_now();
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
  }
  return best;
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

void real_traces(const std::string& shared) {
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
    const std::string path = file[0] == '@' ? std::string(HOOKSTREAM_SOURCE_DIR) + "/" + file.substr(1) : shared + "/" + file;
    while (m.wall.size() < 5 || total < 1.0) {
      run_once(path, m);
      total += m.wall.back();
    }
    const double cpu = m.median(m.cpu), import_cpu = m.median(m.import_cpu), wall = m.median(m.wall);
    const double floor = reading_floor_s(path);
    std::printf("| %s | %lld | %lld | %.3f (%zu) | %.3f | %.3f | %.2fM | %.2fM | %.2fM | %.2fM | %.3f | %.2fM |\n",
                (file[0] == '@' ? file.substr(1) : file).c_str(),
                static_cast<long long>(m.gpu_ops), static_cast<long long>(m.all_ops), wall * 1e3, m.wall.size(),
                import_cpu * 1e3, cpu * 1e3, m.gpu_ops / import_cpu / 1e6, m.gpu_ops / cpu / 1e6, m.gpu_ops / wall / 1e6,
                m.all_ops / cpu / 1e6, floor * 1e3, m.gpu_ops / floor / 1e6);
  }
  std::fflush(stdout);
}

struct ScaledCase {
  std::string label;   // what the row is, honestly
  std::string source;  // relative to the traces folder
  std::string suffix;  // of the temporary file: the format and whether it is compressed
  int copies;
  bool large;
};

void scaled_traces(const std::string& shared, bool include_large, const std::string& only) {
  const std::vector<ScaledCase> cases = {
      {"nsys cloverleaf x64", "nsys/cloverleaf-nsys2024.5.sqlite", ".sqlite", 64, false},
      {"nsys cloverleaf x640", "nsys/cloverleaf-nsys2024.5.sqlite", ".sqlite", 640, true},
      {"Kineto alexnet x1024 (.json.gz)", "kineto/alexnet-a100-syncevents.json.gz", ".json.gz", 1024, false},
      {"Kineto alexnet x1024 (.json)", "kineto/alexnet-a100-syncevents.json.gz", ".json", 1024, false},
      {"Kineto alexnet x10240 (.json)", "kineto/alexnet-a100-syncevents.json.gz", ".json", 10240, true},
  };
  std::printf("\nScaled traces: the real trace's activity rows (nsys: CUPTI_ACTIVITY_KIND_* and NVTX_EVENTS; Kineto: "
              "traceEvents) repeated N times, each copy shifted by the trace's span with its correlation/event ids offset "
              "(bench/scaled_traces.h). First run: one import + all analyses from a trimmed heap, as one `hookstream replay` "
              "process; warm: the median of later runs in the same process (at least 3 and 1 s, at most ~20 s). Peak RSS "
              "growth: VmHWM after the first run minus VmRSS before it. Heap: %s.\n\n",
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
    if (c.suffix == ".sqlite") bench::write_scaled_nsys(shared + "/" + c.source, path, c.copies);
    else bench::write_scaled_kineto(shared + "/" + c.source, path, c.copies);
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
    if (arg == "--real-only") scaled = false;
    else if (arg == "--scaled-only") real = false;
    else if (arg == "--large") large = true;
    else if (arg == "--only" && i + 1 < argc) only = argv[++i];
    else if (arg.rfind("--", 0) == 0) {
      std::fprintf(stderr, "replay_bench: unknown option %s (expected --real-only, --scaled-only, --large, --only TEXT, --write)\n", arg.c_str());
      return 2;
    } else {
      shared = arg;
    }
  }
  if (real) real_traces(shared);
  if (scaled) scaled_traces(shared, large, only);
  return 0;
}
