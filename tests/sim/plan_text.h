// Plans from YAML text in tests: the plan, or the one-line InputError it is refused with.
#pragma once

#include <string>

#include <catch2/catch.hpp>

#include "sim/inputs/input_error.h"
#include "sim/inputs/plan.h"

namespace hookstream::test {

inline Plan parse(const std::string& yaml, const LoadOptions& options = {}) { return parse_plan(yaml, "plan.yaml", options); }

inline std::string parse_error(const std::string& yaml, const LoadOptions& options = {}) {
  try {
    parse(yaml, options);
  } catch (const InputError& error) {
    return error.what();
  }
  FAIL("expected an InputError");
  return "";
}

}  // namespace hookstream::test
