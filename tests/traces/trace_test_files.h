// Paths of the real traces in ../shared/traces and a per-test temporary directory.
#pragma once

#include <filesystem>
#include <string>
#include <unistd.h>

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

}  // namespace hookstream::test
