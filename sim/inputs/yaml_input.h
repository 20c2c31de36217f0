// YAML text from a file a user wrote (a plan, a stream protocol, a device spec): the message for a
// parse failure.
#pragma once

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/node/node.h>
#include <yaml-cpp/node/impl.h>

#include <cmath>
#include <string>

#include "sim/inputs/input_error.h"

namespace hookstream {

// yaml-cpp's message, except for its nesting guard (yaml-cpp/depthguard.h: DeepRecursion, thrown
// by the node builder past a fixed depth), whose message is only "bad file".
inline std::string yaml_parse_message(const YAML::Exception& error) {
  if (const auto* deep = dynamic_cast<const YAML::DeepRecursion*>(&error))
    return "nested " + std::to_string(deep->depth()) + " levels deep, more than yaml-cpp reads";
  return error.msg;
}

// "FILE:LINE" of a node, for bad-input messages; FILE alone where yaml-cpp has no mark.
inline std::string yaml_where(const std::string& source, const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.is_null() || mark.line < 0) return source;
  return source + ":" + std::to_string(mark.line + 1);
}

// A finite number >= 0 (> 0 unless allow_zero) from a scalar node; anything else is one
// InputError naming FILE:LINE and the key (the device files' rule, devices/README.md).
inline double yaml_number(const std::string& source, const YAML::Node& node, const std::string& key, bool allow_zero) {
  double value = 0;
  bool ok = node.IsScalar();
  if (ok) {
    try {
      value = node.as<double>();
    } catch (const YAML::Exception&) {
      ok = false;
    }
  }
  if (!ok || !std::isfinite(value) || value < 0 || (!allow_zero && value == 0)) {
    throw InputError(yaml_where(source, node), std::string("key ") + key + ": expected a " +
                                                   (allow_zero ? "non-negative" : "positive") + " number");
  }
  return value;
}

}  // namespace hookstream
