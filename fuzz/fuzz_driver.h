// The libFuzzer entry point for one target of fuzz_targets.h. The input is written to a scratch
// directory of this process (tests/temp_dir.h's TempDir, removed at a normal exit; fuzz/run.sh
// puts it under its own work directory, which it removes also after an abort), since the
// importers read files.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz/fuzz_targets.h"
#include "tests/temp_dir.h"

#define HOOKSTREAM_FUZZ_DRIVER(target)                                                                    \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {                               \
    /* one per fuzzing process */                                                                         \
    static const hookstream::test::TempDir dir("hookstream-fuzz-" + std::to_string(::getpid()));          \
    const std::string report = hookstream::fuzz::target(data, size, dir.string());                        \
    if (!report.empty()) {                                                                                \
      std::fprintf(stderr, "hookstream fuzz target " #target ":\n%s\n", report.c_str());                 \
      std::abort();                                                                                       \
    }                                                                                                     \
    return 0;                                                                                             \
  }
