#include "sim/calibration.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "sim/input_error.h"

namespace hookstream {

namespace {

int line_of(const std::string& text, size_t byte) {
  byte = std::min(byte, text.size());
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(byte), '\n'));
}

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
      if (c == '{' && depth == 1) lines.push_back(line_of(text, i));
      ++depth;
    } else if (c == ']' || c == '}') {
      if (--depth == 0) break;
    }
  }
  return lines;
}

}  // namespace

std::optional<double> Calibration::lookup(const Op& op) const {
  for (const CalibrationEntry& entry : entries) {
    if (!entry.name_pattern.empty() && !std::regex_search(op.name.str(), entry.name)) continue;
    if (entry.phase && *entry.phase != op.phase) continue;
    if (entry.kind && *entry.kind != to_string(op.kind)) continue;
    if (entry.layer && *entry.layer != op.layer) continue;
    if (entry.layer_kind && *entry.layer_kind != (op.layer >= 0 ? "decoder" : "none")) continue;
    return entry.ns;
  }
  return std::nullopt;
}

Calibration parse_calibration(const std::string& text, const std::string& source) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& error) {
    throw InputError(source + ":" + std::to_string(line_of(text, error.byte == 0 ? 0 : error.byte - 1)),
                     "malformed JSON");
  }
  if (!root.is_object() || !root.contains("entries") || !root["entries"].is_array()) {
    throw InputError(source, "expected an object with an \"entries\" list");
  }
  Calibration calibration;
  calibration.source = source;
  if (root.contains("device") && root["device"].is_string()) calibration.device = root["device"];
  const std::vector<int> lines = entry_lines(text);
  static const std::set<std::string> keys = {"name", "phase", "kind", "layer", "layer_kind", "ns"};
  for (size_t i = 0; i < root["entries"].size(); ++i) {
    const nlohmann::json& item = root["entries"][i];
    const std::string where = source + ":" + std::to_string(i < lines.size() ? lines[i] : 1);
    if (!item.is_object()) throw InputError(where, "entry " + std::to_string(i) + ": expected an object");
    for (const auto& [key, value] : item.items()) {
      if (!keys.count(key)) throw InputError(where, "entry " + std::to_string(i) + ": unknown key " + key);
    }
    CalibrationEntry entry;
    if (!item.contains("ns") || !item["ns"].is_number() || item["ns"].get<double>() < 0) {
      throw InputError(where, "entry " + std::to_string(i) + ": expected \"ns\", a non-negative number");
    }
    entry.ns = item["ns"].get<double>();
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
    entry.phase = read_text("phase");
    entry.kind = read_text("kind");
    entry.layer_kind = read_text("layer_kind");
    if (item.contains("layer")) {
      if (!item["layer"].is_number_integer()) throw InputError(where, "entry " + std::to_string(i) + ": layer must be an integer");
      entry.layer = item["layer"].get<int>();
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
