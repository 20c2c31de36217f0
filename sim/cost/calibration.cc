#include "sim/cost/calibration.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "sim/inputs/input_error.h"
#include "sim/inputs/json_input.h"

namespace hookstream {

namespace {

// nlohmann::json keeps no positions, so an entry's line is found by the order of its opening
// braces after "entries": good enough to point the user at the entry.
std::vector<int> entry_lines(const std::string& text) {
  std::vector<int> lines;
  const size_t entries = text.find("\"entries\"");
  if (entries == std::string::npos) return lines;
  int depth = 0;
  bool in_string = false;
  for (size_t i = text.find('[', entries); i != std::string::npos && i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      if (c == '{' && depth == 1) lines.push_back(line_of_byte(text, i));
      ++depth;
    } else if (c == ']' || c == '}') {
      if (--depth == 0) break;
    }
  }
  return lines;
}

std::vector<std::string> copy_kind_names() {
  std::vector<std::string> all;
  for (CopyKind k : {CopyKind::HostToDevice, CopyKind::DeviceToHost, CopyKind::DeviceToDevice, CopyKind::PeerToPeer, CopyKind::Unknown})
    all.push_back(to_string(k));
  return all;
}

// Equal up to the last digits a JSON round trip of a double may change.
bool same_estimate(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b)) + 1e-6; }

// to_string of every OpKind (Marker is the last).
const std::vector<std::string>& op_kind_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> all;
    for (int k = 0; k <= static_cast<int>(OpKind::Marker); ++k) all.push_back(to_string(static_cast<OpKind>(k)));
    return all;
  }();
  return names;
}

}  // namespace

const std::vector<std::string>& calibration_phases() {
  // The phases sim/streams/stream_expansion.cc gives the ops of a simulated step (Op::phase).
  static const std::vector<std::string> phases = {"forward", "recompute", "backward", "optimizer", "reduction"};
  return phases;
}

const char* to_string(CostPart part) {
  switch (part) {
    case CostPart::Gemm: return "gemm";
    case CostPart::Attention: return "attention";
    case CostPart::Elementwise: return "elementwise";
  }
  return "elementwise";
}

bool CalibrationEntry::matches(const Op& op) const {
  if (!name_pattern.empty() && !std::regex_search(op.name.str(), name)) return false;
  if (phase && *phase != op.phase) return false;
  if (kind && *kind != to_string(op.kind)) return false;
  if (copy && (op.kind != OpKind::Copy || *copy != to_string(op.copy))) return false;
  if (layer && *layer != op.layer) return false;
  if (layer_kind && *layer_kind != (op.layer >= 0 ? "decoder" : "none")) return false;
  return true;
}

double Calibration::apply(const Op& op, double estimate, const CostParts* parts) const {
  double scaled = estimate;
  if (parts != nullptr) {
    for (CostPart part : kCostParts) {
      if ((*parts)[part] <= 0) continue;
      for (const CalibrationEntry& entry : entries) {
        if (entry.part != part || !entry.matches(op)) continue;
        scaled += (entry.scale - 1) * (*parts)[part];
        break;
      }
    }
  }
  for (const CalibrationEntry& entry : entries) {
    if (entry.part) continue;
    // The estimate guard first: a number compare, where matches() may run a regex over the name.
    if (entry.estimate_ns && !same_estimate(*entry.estimate_ns, estimate)) continue;
    if (!entry.matches(op)) continue;
    return entry.ns ? *entry.ns : entry.scale * scaled;
  }
  return scaled;
}

Calibration parse_calibration(const std::string& text, const std::string& source) {
  const nlohmann::json root = parse_input_json(text, source);
  if (!root.is_object() || !root.contains("entries") || !root["entries"].is_array()) {
    throw InputError(source, "expected an object with an \"entries\" list");
  }
  Calibration calibration;
  calibration.source = source;
  if (root.contains("device") && root["device"].is_string()) calibration.device = root["device"];
  const std::vector<int> lines = entry_lines(text);
  static const std::set<std::string> keys = {"name", "phase", "kind", "copy", "layer", "layer_kind", "part", "estimate_ns", "ns", "scale"};
  for (size_t i = 0; i < root["entries"].size(); ++i) {
    const nlohmann::json& item = root["entries"][i];
    const std::string where = source + ":" + std::to_string(i < lines.size() ? lines[i] : 1);
    if (!item.is_object()) throw InputError(where, "entry " + std::to_string(i) + ": expected an object");
    for (const auto& [key, value] : item.items()) {
      if (!keys.count(key)) throw InputError(where, "entry " + std::to_string(i) + ": unknown key " + key);
    }
    CalibrationEntry entry;
    const auto read_number = [&](const char* key) -> std::optional<double> {
      if (!item.contains(key)) return std::nullopt;
      if (!item[key].is_number() || item[key].get<double>() < 0)
        throw InputError(where, "entry " + std::to_string(i) + ": " + key + " must be a non-negative number");
      return item[key].get<double>();
    };
    entry.ns = read_number("ns");
    const std::optional<double> scale = read_number("scale");
    if (entry.ns.has_value() == scale.has_value()) {
      throw InputError(where, "entry " + std::to_string(i) + ": expected either \"ns\" (a duration) or \"scale\" (a factor), not " +
                                  (entry.ns ? "both" : "neither"));
    }
    if (scale) entry.scale = *scale;
    entry.estimate_ns = read_number("estimate_ns");
    auto read_text = [&](const char* key) -> std::optional<std::string> {
      if (!item.contains(key)) return std::nullopt;
      if (!item[key].is_string()) throw InputError(where, "entry " + std::to_string(i) + ": " + key + " must be a string");
      return item[key].get<std::string>();
    };
    if (auto name = read_text("name")) {
      entry.name_pattern = *name;
      try {
        entry.name = std::regex(*name, std::regex::ECMAScript);
      } catch (const std::regex_error& error) {
        throw InputError(where, "entry " + std::to_string(i) + ": name is not a regular expression (" + error.what() + ")");
      }
    }
    // A value no op has would match nothing, silently: the durations it was meant to set would
    // stay estimates. So each is checked against what the simulator's ops carry.
    const auto read_choice = [&](const char* key, const std::vector<std::string>& choices) {
      std::optional<std::string> value = read_text(key);
      if (value && std::find(choices.begin(), choices.end(), *value) == choices.end())
        throw InputError(where, "entry " + std::to_string(i) + ": " + key + " \"" + *value + "\" is none of " +
                                    fmt::format("{}", fmt::join(choices, ", ")));
      return value;
    };
    entry.phase = read_choice("phase", calibration_phases());
    entry.kind = read_choice("kind", op_kind_names());
    entry.layer_kind = read_choice("layer_kind", {"decoder", "none"});
    entry.copy = read_choice("copy", copy_kind_names());
    if (const auto part = read_choice("part", {"gemm", "attention", "elementwise"})) {
      entry.part = *part == "gemm" ? CostPart::Gemm : *part == "attention" ? CostPart::Attention : CostPart::Elementwise;
      // A part is a share of a profiled kernel's cost: a duration for it, or a part of a copy, has no meaning.
      if (entry.ns) throw InputError(where, "entry " + std::to_string(i) + ": a part entry takes \"scale\", not \"ns\"");
      if (entry.estimate_ns) throw InputError(where, "entry " + std::to_string(i) + ": estimate_ns holds for a whole op, not a part");
      if (entry.kind && *entry.kind != "kernel")
        throw InputError(where, "entry " + std::to_string(i) + ": a part entry applies to kernels, not kind \"" + *entry.kind + "\"");
    }
    if (item.contains("layer")) {
      const nlohmann::json& layer = item["layer"];
      // is_number_unsigned: a non-negative integer; int64 values past int would narrow in get<int>.
      if (!layer.is_number_unsigned() || layer.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int>::max()))
        throw InputError(where, "entry " + std::to_string(i) + ": layer must be a decoder layer index (an integer >= 0)");
      entry.layer = layer.get<int>();
    }
    calibration.entries.push_back(std::move(entry));
  }
  return calibration;
}

Calibration load_calibration(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "cannot read the calibration file");
  std::stringstream text;
  text << in.rdbuf();
  return parse_calibration(text.str(), path);
}

}  // namespace hookstream
