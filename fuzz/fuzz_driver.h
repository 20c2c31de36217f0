// The libFuzzer entry point for one target of fuzz_targets.h. The input is written to a scratch
// directory of this process (removed at exit), since the importers read files.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include "fuzz/fuzz_targets.h"

namespace hookstream::fuzz {
class ScratchDir {
 public:
  ScratchDir()
      : path_(std::filesystem::temp_directory_path() / ("hookstream-fuzz-" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string string() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};
}  // namespace hookstream::fuzz

#define HOOKSTREAM_FUZZ_DRIVER(target)                                                      \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {                 \
    static const hookstream::fuzz::ScratchDir dir; /* one per fuzzing process */            \
    const std::string report = hookstream::fuzz::target(data, size, dir.string());          \
    if (!report.empty()) {                                                                  \
      std::fprintf(stderr, "hookstream fuzz target " #target ":\n%s\n", report.c_str());   \
      std::abort();                                                                         \
    }                                                                                       \
    return 0;                                                                               \
  }
