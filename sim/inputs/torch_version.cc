#include "sim/inputs/torch_version.h"

#include <regex>

#include "sim/inputs/input_error.h"

namespace hookstream {

TorchVersion parse_torch_version(const std::string& text, const std::string& where) {
  static const std::regex pattern(R"(^\s*(\d{1,3})\.(\d{1,3})(\.\d{1,4})?([+][A-Za-z0-9.]+)?\s*$)");
  std::smatch match;
  const std::string range = supported_torch_versions();
  if (!std::regex_match(text, match, pattern)) {
    throw InputError(where, "expected a PyTorch version MAJOR.MINOR[.PATCH] in " + range + ", got \"" + text + "\"");
  }
  TorchVersion version{std::stoi(match[1].str()), std::stoi(match[2].str())};
  const bool supported = (version.major == 1 && version.minor == 13) ||
                         (version.major == 2 && version.minor >= 0 && version.minor <= 11);
  if (!supported) {
    throw InputError(where, "PyTorch " + version.text() + " is not supported: hookstream models DDP of PyTorch " +
                                range + ", got \"" + text + "\"");
  }
  return version;
}

}  // namespace hookstream
