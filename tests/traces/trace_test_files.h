// Paths of the real traces in ../shared/traces and a per-test temporary directory.
#pragma once

#include <filesystem>
#include <string>
#include <unistd.h>
#include <zlib.h>

#include <catch2/catch.hpp>

namespace hookstream::test {

inline std::string shared_trace(const std::string& relative) {
  return std::string(HOOKSTREAM_SHARED_DIR) + "/traces/" + relative;
}

// A fresh directory under the system temp dir, unique per process and name.
inline std::filesystem::path temp_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("hookstream-traces-test-" + std::to_string(getpid()) + "-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// The whole inflated content of a gzip file, read with zlib (independently of the importers).
inline std::string inflate_all(const std::string& gz) {
  gzFile file = gzopen(gz.c_str(), "rb");
  REQUIRE(file != nullptr);
  std::string text;
  char buffer[1 << 16];
  int n;
  while ((n = gzread(file, buffer, sizeof buffer)) > 0) text.append(buffer, static_cast<size_t>(n));
  gzclose(file);
  return text;
}

}  // namespace hookstream::test
