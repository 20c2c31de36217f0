// Errors in user input (files, keys, values). Every one is reported as a single line that names
// the file, the key or line, and what was expected; the CLI maps it to exit code 2.
#pragma once

#include <stdexcept>
#include <string>

namespace hookstream {

class InputError : public std::runtime_error {
 public:
  // `where` is "FILE", "FILE:LINE" or "FILE: key a.b.c"; `what` says what was expected.
  InputError(const std::string& where, const std::string& what)
      : std::runtime_error(where.empty() ? what : where + ": " + what) {}
};

}  // namespace hookstream
