// Import + analysis speed of `hookstream replay` on the real traces in ../shared/traces: each file
// is loaded and analysed repeatedly (at least 5 runs and 1 s), and the median run is reported as a
// Markdown row: import alone, then import + every analysis `hookstream replay` runs by default (the
// whole-trace analyses and the step analysis: attribution, replay schedule, critical path, races).
// CPU time of the process is reported next to wall time: on a shared 2-core machine it is the
// steadier of the two. Needs hookstream_traces linked (bench/CMakeLists.txt links hookstream_sim only).
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <string>
#include <vector>

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
}  // namespace

int main(int argc, char** argv) {
  const std::string shared = argc > 1 ? argv[1] : std::string(HOOKSTREAM_SOURCE_DIR) + "/../shared/traces";
  const std::vector<std::string> files = {
      "nsys/cloverleaf-nsys2024.5.sqlite",         "nsys/fuser-report1-nsys2024.6.sqlite",
      "kineto/a100-rank3-of-8-control.json.gz",    "kineto/alexnet-a100-syncevents.json.gz",
      "kineto/event-sync-multistream.json.gz",     "kineto/event-sync.json.gz",
  };
  std::printf("| trace | GPU ops | all ops | median wall ms (runs) | import CPU ms | import + all analyses CPU ms | "
              "GPU ops/s (import, CPU) | GPU ops/s (all, CPU) | all ops/s (all, CPU) |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const std::string& file : files) {
    const std::string path = shared + "/" + file;
    std::vector<double> seconds, cpu_seconds, import_seconds;
    int64_t gpu_ops = 0, all_ops = 0;
    double total = 0;
    while (seconds.size() < 5 || total < 1.0) {
      const auto start = std::chrono::steady_clock::now();
      const double cpu_start = cpu_now();
      const EventModel model = load_trace(path);
      import_seconds.push_back(cpu_now() - cpu_start);
      const ReplayReport report = analyse_replay(model);
      const StepAnalysis step = analyse_step(model);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      gpu_ops = report.gpu_ops;
      all_ops = static_cast<int64_t>(model.ops.size());
      seconds.push_back(s);
      cpu_seconds.push_back(cpu_now() - cpu_start);
      total += s;
    }
    std::sort(seconds.begin(), seconds.end());
    std::sort(cpu_seconds.begin(), cpu_seconds.end());
    std::sort(import_seconds.begin(), import_seconds.end());
    const double median = seconds[seconds.size() / 2];
    const double cpu = cpu_seconds[cpu_seconds.size() / 2];
    const double import_cpu = import_seconds[import_seconds.size() / 2];
    std::printf("| %s | %lld | %lld | %.3f (%zu) | %.3f | %.3f | %.2fM | %.2fM | %.2fM |\n", file.c_str(),
                static_cast<long long>(gpu_ops), static_cast<long long>(all_ops), median * 1e3, seconds.size(),
                import_cpu * 1e3, cpu * 1e3, gpu_ops / import_cpu / 1e6, gpu_ops / cpu / 1e6, all_ops / cpu / 1e6);
  }
  return 0;
}
