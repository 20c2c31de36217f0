// Errors in user input (files, keys, values). Every one is reported as a single line that names
// the file, the key or line, and what was expected; the CLI maps it to exit code 2.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace hookstream {

class InputError : public std::runtime_error {
 public:
  // `where` is "FILE", "FILE:LINE" or "FILE: key a.b.c"; `what` says what was expected.
  InputError(const std::string& where, const std::string& what)
      : std::runtime_error(where.empty() ? what : where + ": " + what) {}
};

// The config is well-formed, but the run it describes dies before training starts with the
// library's own error (PEFT's get_peft_model: "Target modules ... not found in the base model").
// verify, simulate and plan report it as a FAIL verdict (exit 1, tools/cli/cli_support.cc), since it
// is a finding about the user's config and model together; the other commands treat it as any
// InputError (exit 2).
class StartupError : public InputError {
 public:
  StartupError(const std::string& where, const std::string& what, std::string verdict, std::string library)
      : InputError(where, what), where_(where), message_(what), verdict_(std::move(verdict)), library_(std::move(library)) {}
  const std::string& where() const { return where_; }
  const std::string& message() const { return message_; }
  const std::string& verdict() const { return verdict_; }    // e.g. "lora_targets_not_found"
  const std::string& library() const { return library_; }    // whose error it is: "PEFT 0.21"

 private:
  std::string where_, message_, verdict_, library_;
};

}  // namespace hookstream
