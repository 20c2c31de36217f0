#include "sim/cost/host_memory.h"

#include <cstdio>
#include <fstream>
#include <sstream>

namespace hookstream {

std::optional<int64_t> read_mem_available(const std::string& meminfo_path) {
  std::ifstream in(meminfo_path);
  std::string line;
  while (std::getline(in, line)) {
    // "MemAvailable:   131072000 kB" (proc(5): the kernel's estimate of memory available for
    // new allocations without swapping).
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    long long kib = -1;
    std::string unit;
    if (fields >> kib >> unit && kib >= 0 && unit == "kB") return static_cast<int64_t>(kib) * 1024;
    return std::nullopt;
  }
  return std::nullopt;
}

std::string pinned_host_shortfall(int64_t per_rank_bytes, int ranks, int64_t available_bytes) {
  const int64_t needed = per_rank_bytes * ranks;
  if (needed <= available_bytes) return "";
  const double gib = 1024.0 * 1024 * 1024;
  char text[320];
  std::snprintf(text, sizeof text,
                "the offloaded checkpoints need %.2f GiB of pinned host memory (%.2f GiB per rank x %d rank%s) and this "
                "machine has %.2f GiB available (MemAvailable)",
                needed / gib, per_rank_bytes / gib, ranks, ranks == 1 ? "" : "s", available_bytes / gib);
  return text;
}

}  // namespace hookstream
