// Measurements that correct the time model's estimates: a JSON file (as `hookstream replay
// --calibrate` writes it, or by hand) of entries matched against each op.
//
//   {"schema": "hookstream.calibration/1", "device": "H100-SXM",
//    "entries": [{"name": "^layer 0 forward$", "estimate_ns": 7100000, "ns": 7350000},
//                {"name": "D2H activation.*", "ns": 14900000},
//                {"part": "attention", "phase": "backward", "layer_kind": "decoder", "scale": 1.07},
//                {"kind": "copy", "copy": "DtoH", "scale": 1.02}]}
//
// An entry matches when every field it names matches: `name` (ECMAScript regex, searched in the op
// name), `phase` (calibration_phases()), `kind` (to_string(OpKind)), `copy` (a copy's direction,
// to_string(CopyKind)), `layer` (decoder layer index) and `layer_kind` ("decoder" for ops of a
// decoder layer, "none" otherwise); a value no op can have is refused, since it would match nothing.
// Each entry gives either `ns` (the op takes that long) or `scale` (the estimate times that):
// - `estimate_ns` makes an entry hold only for an op whose uncalibrated estimate is that value: the
//   same op at the same shape. `replay --calibrate` writes each measured op so, which reproduces the
//   traced plan exactly and falls through to the scales below for any other shape (another sequence
//   length, tiled MLP shards, loss chunks, model), where an absolute duration would be wrong.
// - `part` ("gemm", "attention", "elementwise") scales that part of a kernel the device profile
//   costs (sim/cost/profiled_costs.h): GEMM efficiency, attention and elementwise kernels are off by
//   different factors, and their mix changes with the sequence length (attention grows as its square),
//   so a scale per part carries to other lengths where one per op would not.
// Part entries multiply the parts first (the first matching entry per part); then the first matching
// whole-op entry (no `part`) gives the op's time. Put specific entries before general ones.
#pragma once

#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "sim/events/event_model.h"

namespace hookstream {

// What a kernel's profiled cost is made of (sim/cost/profiled_costs.h): its GEMMs, its attention
// (SDPA) kernels and the rest (elementwise, reductions, layout copies, the optimizer).
enum class CostPart { Gemm = 0, Attention = 1, Elementwise = 2 };
const char* to_string(CostPart part);
struct CostParts {
  double ns[3] = {0, 0, 0};
  double& operator[](CostPart part) { return ns[static_cast<int>(part)]; }
  double operator[](CostPart part) const { return ns[static_cast<int>(part)]; }
  double total() const { return ns[0] + ns[1] + ns[2]; }
  CostParts& operator+=(const CostParts& other) {
    for (int i = 0; i < 3; ++i) ns[i] += other.ns[i];
    return *this;
  }
};
constexpr CostPart kCostParts[] = {CostPart::Gemm, CostPart::Attention, CostPart::Elementwise};

struct CalibrationEntry {
  std::string name_pattern;  // empty: any name
  std::regex name;
  std::optional<std::string> phase;
  std::optional<std::string> kind;
  std::optional<std::string> copy;
  std::optional<int> layer;
  std::optional<std::string> layer_kind;
  std::optional<CostPart> part;
  std::optional<double> estimate_ns;  // holds only for an op estimated at this (same op, same shape)
  std::optional<double> ns;           // the op's time, or
  double scale = 1;                   // the estimate (or the part) times this
  bool matches(const Op& op) const;
};

struct Calibration {
  std::string source;
  std::string device;  // the device it was measured on, if the file says
  std::vector<CalibrationEntry> entries;
  // The calibrated duration of `op` whose uncalibrated estimate is `estimate` and, for a kernel the
  // device profile costs, made of `parts` (whose total is part of `estimate`).
  double apply(const Op& op, double estimate, const CostParts* parts = nullptr) const;
};

// The values an entry's `phase` may name: the phases of a simulated step's ops.
const std::vector<std::string>& calibration_phases();

// Throws InputError "FILE:LINE: what was expected".
Calibration load_calibration(const std::string& path);
Calibration parse_calibration(const std::string& json_text, const std::string& source);

}  // namespace hookstream
