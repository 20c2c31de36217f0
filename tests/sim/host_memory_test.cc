// Pinned host memory checked before a run (sim/cost/host_memory.h).
#include <catch2/catch.hpp>

#include <fstream>
#include <unistd.h>

#include "sim/cost/host_memory.h"
#include "tests/temp_dir.h"

using namespace hookstream;

TEST_CASE("host memory: MemAvailable is read in bytes from a meminfo file", "[host_memory]") {
  const hookstream::test::TempDir dir("hookstream-meminfo-" + std::to_string(getpid()));
  const std::string path = (dir / "meminfo").string();
  std::ofstream(path) << "MemTotal:       131899652 kB\nMemFree:         1000000 kB\nMemAvailable:   120000000 kB\n";
  CHECK(read_mem_available(path) == int64_t{120000000} * 1024);
  std::ofstream(path) << "MemTotal:       131899652 kB\n";  // an old kernel without the line
  CHECK_FALSE(read_mem_available(path).has_value());
  CHECK_FALSE(read_mem_available((dir / "missing").string()).has_value());
}

TEST_CASE("host memory: the ranks' pinned slots must fit what is available", "[host_memory]") {
  const int64_t gib = int64_t{1} << 30;
  CHECK(pinned_host_shortfall(32 * gib, 2, 64 * gib).empty());
  const std::string text = pinned_host_shortfall(64 * gib, 2, 120 * gib);
  CHECK(text.find("128.00 GiB") != std::string::npos);
  CHECK(text.find("64.00 GiB per rank x 2 ranks") != std::string::npos);
  CHECK(text.find("120.00 GiB available") != std::string::npos);
  CHECK(text.find('\n') == std::string::npos);
}
