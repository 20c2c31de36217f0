// The named plans of the differential matrix (tests/plans/ddp/*.yaml), sorted: the one list both
// differential tests (1.13 Reducer, real PyTorch 2.11 DDP) run.
#pragma once

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace hookstream::test {

inline std::vector<std::string> matrix_plan_files() {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(HOOKSTREAM_SOURCE_DIR) + "/tests/plans/ddp")) {
    if (entry.path().extension() == ".yaml") files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace hookstream::test
