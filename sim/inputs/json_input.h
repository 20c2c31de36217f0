// JSON text from a file a user wrote (a Hugging Face config.json, a calibration file): parsed, or
// one InputError line that names the file and line.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <yaml-cpp/yaml.h>

namespace hookstream {

// The line (1-based) of byte `byte` of `text`.
int line_of_byte(const std::string& text, size_t byte);

// nlohmann::json::parse(text), with both of its bad-input exceptions as InputError
// "SOURCE:LINE: malformed JSON: WHAT": parse_error for malformed text, and out_of_range 406 for a
// number that is valid JSON but beyond a double (1e400), which nlohmann reports without a
// position: its line is the first place the number's text occurs.
nlohmann::json parse_input_json(const std::string& text, const std::string& source);

// A YAML node as the JSON value PyYAML's safe_load would give (axolotl's `deepspeed:` may be the
// DeepSpeed config itself, a mapping): plain scalars typed (integer, float, bool, null), quoted
// ones strings.
nlohmann::json yaml_to_json(const YAML::Node& node);

}  // namespace hookstream
