#include "traces/runtime_annotations.h"

#include <set>

#include "sim/inputs/input_error.h"

namespace hookstream {

namespace {

constexpr const char* kPrefix = "hookstream:";

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t begin = 0;
  for (;;) {
    const size_t end = text.find(separator, begin);
    parts.push_back(text.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  return parts;
}

bool parse_int(const std::string& text, int& value) {
  if (text.empty() || text.size() > 9) return false;
  for (char c : text) if (c < '0' || c > '9') return false;
  value = std::stoi(text);
  return true;
}

// "reload[1]" or "hidden": a buffer name with an optional [slot].
bool valid_buffer(const std::string& text) {
  if (text.empty() || text.front() == '[') return false;
  const size_t open = text.find('[');
  if (open == std::string::npos) return text.find(']') == std::string::npos;
  int slot = 0;
  return text.back() == ']' && parse_int(text.substr(open + 1, text.size() - open - 2), slot);
}

}  // namespace

bool is_runtime_annotation(const std::string& name) { return name.compare(0, 11, kPrefix) == 0; }

std::optional<RuntimeAnnotation> parse_runtime_annotation(const std::string& name, const std::string& where) {
  if (!is_runtime_annotation(name)) return std::nullopt;
  const auto bad = [&](const std::string& expected) {
    return InputError(where, "annotation \"" + name + "\": " + expected);
  };
  const std::vector<std::string> parts = split(name.substr(11), ':');
  RuntimeAnnotation a;
  if (parts.size() == 1 && parts[0] == "optimizer") {
    a.type = RuntimeAnnotation::Type::Optimizer;
    return a;
  }
  if (parts[0] == "step") {
    if (parts.size() != 2 || !parse_int(parts[1], a.step)) throw bad("expected hookstream:step:N with N a step number");
    a.type = RuntimeAnnotation::Type::TrainingStep;
    return a;
  }
  if (parts[0] != "forward" && parts[0] != "backward") {
    throw bad("expected hookstream:{forward|backward}:L{layer}:..., hookstream:step:N or hookstream:optimizer");
  }
  a.phase = parts[0];
  if (parts.size() < 3 || parts[1].size() < 2 || parts[1][0] != 'L' || !parse_int(parts[1].substr(1), a.layer)) {
    throw bad("expected L{layer} after the phase");
  }
  if (parts.size() == 3 && parts[2] == "layer") {
    a.type = RuntimeAnnotation::Type::Layer;
    return a;
  }
  static const std::set<std::string> kinds = {"copy", "compute", "wait_stream", "record", "wait_event", "free",
                                              "record_stream", "host_sync"};
  if (parts.size() < 4 || !kinds.count(parts[2])) {
    throw bad("expected a protocol step kind (copy, compute, wait_stream, record, wait_event, free, record_stream, "
              "host_sync) and a stream, or \"layer\"");
  }
  a.kind = parts[2];
  a.stream = parts[3];
  if (a.stream.empty()) throw bad("empty stream name");
  for (size_t i = 4; i < parts.size(); ++i) {
    const std::string& field = parts[i];
    const size_t eq = field.find('=');
    if (eq == std::string::npos) throw bad("field \"" + field + "\": expected r=, w=, e=, s= or what=");
    const std::string key = field.substr(0, eq), value = field.substr(eq + 1);
    if (key == "r" || key == "w") {
      for (const std::string& buffer : split(value, ',')) {
        if (!valid_buffer(buffer)) throw bad("buffer \"" + buffer + "\": expected NAME or NAME[SLOT]");
        (key == "r" ? a.reads : a.writes).push_back(buffer);
      }
    } else if (key == "e") {
      if (!valid_buffer(value)) throw bad("event \"" + value + "\": expected NAME or NAME[SLOT]");
      a.event = value;
    } else if (key == "s") {
      if (value.empty()) throw bad("empty s= stream");
      a.other_stream = value;
    } else if (key == "what") {
      if (value != "layer" && value != "recompute" && value != "backward") {
        throw bad("what=" + value + ": expected layer, recompute or backward");
      }
      a.what = value;
    } else {
      throw bad("field \"" + key + "\": expected r, w, e, s or what");
    }
  }
  if (a.kind == "compute" && a.what.empty()) a.what = a.phase == "forward" ? "layer" : "backward";
  if ((a.kind == "record" || a.kind == "wait_event") && a.event.empty()) throw bad(a.kind + " needs e={event}");
  if (a.kind == "wait_stream" && a.other_stream.empty()) throw bad("wait_stream needs s={other_stream}");
  return a;
}

std::string format_runtime_annotation(const RuntimeAnnotation& a) {
  switch (a.type) {
    case RuntimeAnnotation::Type::Optimizer: return "hookstream:optimizer";
    case RuntimeAnnotation::Type::TrainingStep: return "hookstream:step:" + std::to_string(a.step);
    case RuntimeAnnotation::Type::Layer: return "hookstream:" + a.phase + ":L" + std::to_string(a.layer) + ":layer";
    case RuntimeAnnotation::Type::ProtocolStep: break;
  }
  std::string name = "hookstream:" + a.phase + ":L" + std::to_string(a.layer) + ":" + a.kind + ":" + a.stream;
  const auto list = [](const std::vector<std::string>& buffers) {
    std::string text;
    for (const std::string& b : buffers) text += (text.empty() ? "" : ",") + b;
    return text;
  };
  if (!a.reads.empty()) name += ":r=" + list(a.reads);
  if (!a.writes.empty()) name += ":w=" + list(a.writes);
  if (!a.event.empty()) name += ":e=" + a.event;
  if (!a.other_stream.empty()) name += ":s=" + a.other_stream;
  if (!a.what.empty()) name += ":what=" + a.what;
  return name;
}

}  // namespace hookstream
