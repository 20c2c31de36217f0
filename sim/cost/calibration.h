// Measured per-op durations used in place of the time model's estimates: a JSON file (as
// `hookstream replay --calibrate` writes it, or by hand) of entries matched against each op.
//
//   {"schema": "hookstream.calibration/1", "device": "H100-SXM",
//    "entries": [{"name": "D2H activation.*", "ns": 14900000},
//                {"phase": "backward", "layer_kind": "decoder", "kind": "kernel", "ns": 61000000}]}
//
// An entry matches when every field it names matches: `name` (ECMAScript regex, searched in the op
// name), `phase` (calibration_phases()), `kind` (to_string(OpKind)), `layer` (decoder layer index)
// and `layer_kind` ("decoder" for ops of a decoder layer, "none" otherwise); a value no op can have
// is refused, since it would match nothing. The first matching entry wins, so put
// specific entries before general ones.
#pragma once

#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "sim/events/event_model.h"

namespace hookstream {

struct CalibrationEntry {
  std::string name_pattern;  // empty: any name
  std::regex name;
  std::optional<std::string> phase;
  std::optional<std::string> kind;
  std::optional<int> layer;
  std::optional<std::string> layer_kind;
  double ns = 0;
};

struct Calibration {
  std::string source;
  std::string device;  // the device it was measured on, if the file says
  std::vector<CalibrationEntry> entries;
  // The measured duration of `op`, or nullopt when no entry matches.
  std::optional<double> lookup(const Op& op) const;
};

// The values an entry's `phase` may name: the phases of a simulated step's ops.
const std::vector<std::string>& calibration_phases();

// Throws InputError "FILE:LINE: what was expected".
Calibration load_calibration(const std::string& path);
Calibration parse_calibration(const std::string& json_text, const std::string& source);

}  // namespace hookstream
