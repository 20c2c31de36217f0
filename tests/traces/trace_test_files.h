// Paths of the real traces in ../shared/traces and a per-test temporary directory.
#pragma once

#include <filesystem>
#include <string>
#include <unistd.h>
#include <zlib.h>

#include <catch2/catch.hpp>

#include "tests/temp_dir.h"

namespace hookstream::test {

inline std::string shared_trace(const std::string& relative) {
  return std::string(HOOKSTREAM_SHARED_DIR) + "/traces/" + relative;
}

// A fresh directory for one test, unique per process and name, removed when it goes.
inline TempDir temp_dir(const std::string& name) {
  return TempDir("hookstream-traces-test-" + std::to_string(getpid()) + "-" + name);
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
