#include "sim/inputs/data_files.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>

namespace hookstream {

std::string data_dir() {
  const char* from_env = std::getenv("HOOKSTREAM_DATA_DIR");
  if (from_env != nullptr && *from_env != '\0') return from_env;
  return HOOKSTREAM_DATA_DIR;
}

std::vector<std::string> list_data_files(const std::string& subdir, const std::string& extension) {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(data_dir() + "/" + subdir, error)) {
    if (entry.path().extension() == extension) names.push_back(entry.path().stem().string());
  }
  // Case-insensitive order, with the raw name breaking ties so the order never depends on the
  // directory's iteration order.
  std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
    const std::string la = lowercase(a), lb = lowercase(b);
    return la != lb ? la < lb : a < b;
  });
  return names;
}

std::string lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

}  // namespace hookstream
