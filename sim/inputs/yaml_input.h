// YAML text from a file a user wrote (a plan, a stream protocol, a device spec): the message for a
// parse failure.
#pragma once

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/exceptions.h>

#include <string>

namespace hookstream {

// yaml-cpp's message, except for its nesting guard (yaml-cpp/depthguard.h: DeepRecursion, thrown
// by the node builder past a fixed depth), whose message is only "bad file".
inline std::string yaml_parse_message(const YAML::Exception& error) {
  if (const auto* deep = dynamic_cast<const YAML::DeepRecursion*>(&error))
    return "nested " + std::to_string(deep->depth()) + " levels deep, more than yaml-cpp reads";
  return error.msg;
}

}  // namespace hookstream
