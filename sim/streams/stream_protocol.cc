#include "sim/streams/stream_protocol.h"

#include "sim/inputs/data_files.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "sim/inputs/closest_name.h"
#include "sim/inputs/input_error.h"
#include "sim/inputs/yaml_input.h"

namespace hookstream {

const char* to_string(StepKind kind) {
  switch (kind) {
    case StepKind::WaitStream: return "wait_stream";
    case StepKind::Record: return "record";
    case StepKind::WaitEvent: return "wait_event";
    case StepKind::Copy: return "copy";
    case StepKind::Compute: return "compute";
    case StepKind::Free: return "free";
    case StepKind::RecordStream: return "record_stream";
    case StepKind::HostSync: return "host_sync";
  }
  return "unknown";
}

bool is_sync_step(StepKind kind) {
  return kind == StepKind::WaitStream || kind == StepKind::Record || kind == StepKind::WaitEvent ||
         kind == StepKind::HostSync || kind == StepKind::RecordStream;
}

namespace {

std::string ref_text(const BufferRef& ref) { return ref.name + (ref.next ? "[next]" : ""); }

}  // namespace

std::string ProtocolStep::describe() const {
  std::string text = std::string(to_string(kind)) + " {";
  switch (kind) {
    case StepKind::WaitStream: text += "waiter: " + stream + ", waitee: " + other_stream; break;
    case StepKind::Record: text += "event: " + event + ", stream: " + stream; break;
    case StepKind::WaitEvent: text += "stream: " + stream + ", event: " + event; break;
    case StepKind::Copy:
      text += "stream: " + stream + ", from: " + ref_text(from) + ", to: " + ref_text(to) + ", kind: " +
              (copy == CopyKind::DeviceToHost ? "d2h" : "h2d");
      break;
    case StepKind::Compute: text += "stream: " + stream + ", what: " + what; break;
    case StepKind::Free: text += "buffer: " + ref_text(buffer) + ", stream: " + stream; break;
    case StepKind::RecordStream: text += "buffer: " + ref_text(buffer) + ", stream: " + stream; break;
    case StepKind::HostSync: text += event.empty() ? "stream: " + other_stream : "event: " + event; break;
  }
  return text + "}";
}

int StreamProtocol::find_stream(const std::string& n) const {
  for (size_t i = 0; i < streams.size(); ++i) if (streams[i].name == n) return static_cast<int>(i);
  return -1;
}
int StreamProtocol::find_buffer(const std::string& n) const {
  for (size_t i = 0; i < buffers.size(); ++i) if (buffers[i].name == n) return static_cast<int>(i);
  return -1;
}
int StreamProtocol::find_event(const std::string& n) const {
  for (size_t i = 0; i < events.size(); ++i) if (events[i].name == n) return static_cast<int>(i);
  return -1;
}
int StreamProtocol::current_stream() const {
  for (size_t i = 0; i < streams.size(); ++i) if (streams[i].current) return static_cast<int>(i);
  return -1;
}

namespace {

std::string did_you_mean(const std::string& word, const std::vector<std::string>& known) {
  const std::string best = closest_name(word, known);
  return best.empty() ? "" : "; did you mean `" + best + "`?";
}

std::string join(const std::vector<std::string>& words) {
  std::string text;
  for (const std::string& w : words) text += (text.empty() ? "" : ", ") + w;
  return text;
}

// Parses one document, carrying the file name so every error names FILE:LINE.
class ProtocolParser {
 public:
  explicit ProtocolParser(std::string source) : source_(std::move(source)) {}

  StreamProtocol parse(const std::string& text) {
    YAML::Node root;
    try {
      root = YAML::Load(text);
    } catch (const YAML::ParserException& e) {
      throw InputError(source_ + ":" + std::to_string(e.mark.line + 1), "malformed YAML: " + yaml_parse_message(e));
    }
    if (!root.IsMap()) throw InputError(source_, "a stream protocol is a YAML mapping (name, streams, buffers, events, forward, backward)");
    protocol_.source = source_;
    check_keys(root, {"name", "description", "streams", "buffers", "events", "forward", "backward"}, "");
    protocol_.name = root["name"] ? scalar(root["name"], "name") : std::filesystem::path(source_).stem().string();
    if (root["description"]) protocol_.description = scalar(root["description"], "description");
    if (!root["streams"]) throw InputError(source_, "missing `streams` (e.g. streams: {compute: {current: true}, copy: {}})");
    parse_streams(root["streams"]);
    if (root["buffers"]) parse_buffers(root["buffers"]);
    if (root["events"]) parse_events(root["events"]);
    if (root["forward"]) protocol_.forward = parse_steps(root["forward"], "forward");
    if (root["backward"]) protocol_.backward = parse_steps(root["backward"], "backward");
    return protocol_;
  }

 private:
  [[noreturn]] void fail(const YAML::Node& node, const std::string& what) const {
    throw InputError(source_ + ":" + std::to_string(node.Mark().line + 1), what);
  }
  int line(const YAML::Node& node) const { return node.Mark().line + 1; }

  std::string scalar(const YAML::Node& node, const std::string& key) const {
    if (!node.IsScalar()) fail(node, "`" + key + "` must be a single value");
    return node.Scalar();
  }
  bool boolean(const YAML::Node& node, const std::string& key) const {
    const std::string v = scalar(node, key);
    if (v == "true") return true;
    if (v == "false") return false;
    fail(node, "`" + key + "` must be true or false, not `" + v + "`");
  }

  void check_keys(const YAML::Node& map, const std::vector<std::string>& known, const std::string& where) const {
    if (!map.IsMap()) fail(map, (where.empty() ? "the file" : "`" + where + "`") + " must be a mapping");
    for (const auto& entry : map) {
      const std::string key = entry.first.Scalar();
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        fail(entry.first, "unknown key `" + (where.empty() ? key : where + "." + key) + "`" + did_you_mean(key, known) +
                              " (known: " + join(known) + ")");
      }
    }
  }

  // "i", "i mod 2", "counter", "counter mod 2".
  SlotSelection selection(const YAML::Node& map, const std::string& where) const {
    SlotSelection select;
    if (map["slot"]) {
      std::istringstream words(scalar(map["slot"], where + ".slot"));
      std::string base, mod;
      int modulo = 0;
      words >> base;
      if (base != "i" && base != "counter") fail(map["slot"], "`" + where + ".slot` must be `i`, `i mod N`, `counter` or `counter mod N`");
      if (words >> mod) {
        if (mod != "mod" || !(words >> modulo) || modulo <= 0) fail(map["slot"], "`" + where + ".slot`: expected `" + base + " mod N` with N > 0");
      }
      select.by_counter = base == "counter";
      select.modulo = modulo;
    }
    if (map["counter"]) {
      const std::string scope = scalar(map["counter"], where + ".counter");
      if (scope != "per_device" && scope != "per_process") fail(map["counter"], "`" + where + ".counter` must be per_device or per_process");
      select.counter_per_process = scope == "per_process";
    }
    return select;
  }

  int count(const YAML::Node& map, const std::string& where) const {
    if (!map["count"]) return 1;
    const std::string v = scalar(map["count"], where + ".count");
    if (v == "layers") return -1;
    try {
      const int n = std::stoi(v);
      if (n > 0 && std::to_string(n) == v) return n;
    } catch (const std::exception&) {
    }
    fail(map["count"], "`" + where + ".count` must be a positive number or `layers`, not `" + v + "`");
  }

  void parse_streams(const YAML::Node& node) {
    if (!node.IsMap()) fail(node, "`streams` must map stream names to {current, default, blocking}");
    for (const auto& entry : node) {
      ProtocolStream stream;
      stream.name = entry.first.Scalar();
      stream.line = line(entry.first);
      const std::string where = "streams." + stream.name;
      if (!entry.second.IsNull()) {
        check_keys(entry.second, {"current", "default", "blocking"}, where);
        if (entry.second["current"]) stream.current = boolean(entry.second["current"], where + ".current");
        if (entry.second["default"]) stream.legacy_default = boolean(entry.second["default"], where + ".default");
        if (entry.second["blocking"]) stream.non_blocking = !boolean(entry.second["blocking"], where + ".blocking");
      }
      // The legacy default stream is blocking by definition.
      if (stream.legacy_default) stream.non_blocking = false;
      protocol_.streams.push_back(stream);
    }
    const auto currents = std::count_if(protocol_.streams.begin(), protocol_.streams.end(), [](const auto& s) { return s.current; });
    if (currents != 1) fail(node, "exactly one stream must be `current: true` (the stream torch.cuda.current_stream() returns)");
  }

  void parse_buffers(const YAML::Node& node) {
    if (!node.IsMap()) fail(node, "`buffers` must map buffer names to {memory, count, slot, counter}");
    for (const auto& entry : node) {
      ProtocolBuffer buffer;
      buffer.name = entry.first.Scalar();
      buffer.line = line(entry.first);
      const std::string where = "buffers." + buffer.name;
      if (buffer.name == kHiddenBuffer) fail(entry.first, "`hidden` is built in (decoder layer i's input); choose another name");
      check_keys(entry.second, {"memory", "count", "slot", "counter"}, where);
      const std::string memory = entry.second["memory"] ? scalar(entry.second["memory"], where + ".memory") : "device";
      if (memory == "device") buffer.memory = MemoryKind::Device;
      else if (memory == "pinned") buffer.memory = MemoryKind::PinnedHost;
      else if (memory == "pageable") buffer.memory = MemoryKind::PageableHost;
      else fail(entry.second["memory"], "`" + where + ".memory` must be device, pinned or pageable");
      buffer.count = count(entry.second, where);
      buffer.select = selection(entry.second, where);
      if (buffer.count > 0 && buffer.select.modulo == 0) {
        if (buffer.count != 1) fail(entry.second, "`" + where + "`: " + std::to_string(buffer.count) + " slots need `slot: i mod " + std::to_string(buffer.count) + "` (or counter mod N)");
      }
      if (buffer.count > 0 && buffer.select.modulo > buffer.count) fail(entry.second["slot"], "`" + where + ".slot` selects more slots than `count`");
      protocol_.buffers.push_back(buffer);
    }
  }

  void parse_events(const YAML::Node& node) {
    if (!node.IsMap()) fail(node, "`events` must map event names to {per_buffer} or {count, slot, counter}");
    for (const auto& entry : node) {
      ProtocolEvent event;
      event.name = entry.first.Scalar();
      event.line = line(entry.first);
      const std::string where = "events." + event.name;
      if (!entry.second.IsNull()) {
        check_keys(entry.second, {"per_buffer", "count", "slot", "counter"}, where);
        if (entry.second["per_buffer"]) {
          event.per_buffer = scalar(entry.second["per_buffer"], where + ".per_buffer");
          const int b = protocol_.find_buffer(event.per_buffer);
          if (b < 0) fail(entry.second["per_buffer"], "`" + where + ".per_buffer` names undefined buffer `" + event.per_buffer + "`" + did_you_mean(event.per_buffer, buffer_names()));
          event.count = protocol_.buffers[b].count;
          event.select = protocol_.buffers[b].select;
        } else {
          event.count = count(entry.second, where);
          event.select = selection(entry.second, where);
        }
      }
      protocol_.events.push_back(event);
    }
  }

  std::vector<std::string> stream_names() const {
    std::vector<std::string> names;
    for (const auto& s : protocol_.streams) names.push_back(s.name);
    return names;
  }
  std::vector<std::string> buffer_names() const {
    std::vector<std::string> names{kHiddenBuffer};
    for (const auto& b : protocol_.buffers) names.push_back(b.name);
    return names;
  }
  std::vector<std::string> event_names() const {
    std::vector<std::string> names;
    for (const auto& e : protocol_.events) names.push_back(e.name);
    return names;
  }

  std::string stream_ref(const YAML::Node& map, const std::string& key, const std::string& where) const {
    if (!map[key]) fail(map, "`" + where + "` needs `" + key + "`");
    const std::string name = scalar(map[key], where + "." + key);
    if (protocol_.find_stream(name) < 0) fail(map[key], "`" + where + "." + key + "` names undefined stream `" + name + "`" + did_you_mean(name, stream_names()) + " (streams: " + join(stream_names()) + ")");
    return name;
  }
  std::string event_ref(const YAML::Node& map, const std::string& where) const {
    if (!map["event"]) fail(map, "`" + where + "` needs `event`");
    const std::string name = scalar(map["event"], where + ".event");
    if (protocol_.find_event(name) < 0) fail(map["event"], "`" + where + ".event` names undefined event `" + name + "`" + did_you_mean(name, event_names()) + " (events: " + join(event_names()) + ")");
    return name;
  }
  BufferRef buffer_ref(const YAML::Node& node, const std::string& where) const {
    std::string text = scalar(node, where);
    BufferRef ref;
    const std::string suffix = "[next]";
    if (text.size() > suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0) {
      ref.next = true;
      text = text.substr(0, text.size() - suffix.size());
    }
    ref.name = text;
    if (ref.name != kHiddenBuffer && protocol_.find_buffer(ref.name) < 0) {
      fail(node, "`" + where + "` names undefined buffer `" + ref.name + "`" + did_you_mean(ref.name, buffer_names()) + " (buffers: " + join(buffer_names()) + ")");
    }
    if (ref.next && ref.name != kHiddenBuffer) fail(node, "`" + where + "`: only `hidden[next]` (the next layer's input) may use [next]");
    return ref;
  }
  bool on_device(const BufferRef& ref) const {
    return ref.name == kHiddenBuffer || protocol_.buffers[protocol_.find_buffer(ref.name)].memory == MemoryKind::Device;
  }
  std::vector<BufferRef> buffer_list(const YAML::Node& map, const std::string& key, const std::string& where) const {
    std::vector<BufferRef> refs;
    if (!map[key]) return refs;
    const YAML::Node list = map[key];
    if (list.IsScalar()) return {buffer_ref(list, where + "." + key)};
    if (!list.IsSequence()) fail(list, "`" + where + "." + key + "` must be a list of buffer names");
    for (const auto& item : list) refs.push_back(buffer_ref(item, where + "." + key));
    return refs;
  }

  std::vector<ProtocolStep> parse_steps(const YAML::Node& node, const std::string& phase) {
    if (!node.IsSequence()) fail(node, "`" + phase + "` must be a list of steps (- wait_stream: {...}, - copy: {...}, ...)");
    static const std::vector<std::string> kinds = {"wait_stream", "record", "wait_event", "copy", "compute", "free", "record_stream", "host_sync"};
    std::vector<ProtocolStep> steps;
    int index = 0;
    for (const auto& item : node) {
      const std::string where = phase + "[" + std::to_string(index++) + "]";
      if (!item.IsMap() || item.size() != 1) fail(item, "`" + where + "` must be one `op: {fields}` (ops: " + join(kinds) + ")");
      const auto entry = *item.begin();
      const std::string op = entry.first.Scalar();
      const YAML::Node f = entry.second;
      const std::string at = where + "." + op;
      ProtocolStep step;
      step.line = line(entry.first);
      if (op == "wait_stream") {
        step.kind = StepKind::WaitStream;
        check_keys(f, {"waiter", "waitee"}, at);
        step.stream = stream_ref(f, "waiter", at);
        step.other_stream = stream_ref(f, "waitee", at);
      } else if (op == "record") {
        step.kind = StepKind::Record;
        check_keys(f, {"event", "stream"}, at);
        step.event = event_ref(f, at);
        step.stream = stream_ref(f, "stream", at);
      } else if (op == "wait_event") {
        step.kind = StepKind::WaitEvent;
        check_keys(f, {"stream", "event"}, at);
        step.stream = stream_ref(f, "stream", at);
        step.event = event_ref(f, at);
      } else if (op == "copy") {
        step.kind = StepKind::Copy;
        check_keys(f, {"stream", "from", "to", "kind", "blocking"}, at);
        step.stream = stream_ref(f, "stream", at);
        if (!f["from"] || !f["to"] || !f["kind"]) fail(f, "`" + at + "` needs `from`, `to` and `kind` (d2h or h2d)");
        step.from = buffer_ref(f["from"], at + ".from");
        step.to = buffer_ref(f["to"], at + ".to");
        const std::string kind = scalar(f["kind"], at + ".kind");
        if (kind == "d2h") step.copy = CopyKind::DeviceToHost;
        else if (kind == "h2d") step.copy = CopyKind::HostToDevice;
        else fail(f["kind"], "`" + at + ".kind` must be d2h or h2d, not `" + kind + "`");
        if (f["blocking"]) step.blocking = boolean(f["blocking"], at + ".blocking");
        const bool d2h = step.copy == CopyKind::DeviceToHost;
        if (on_device(step.from) != d2h || on_device(step.to) == d2h) {
          fail(f["kind"], "`" + at + "`: a " + (d2h ? "d2h copy goes from a device buffer to a host buffer" : "h2d copy goes from a host buffer to a device buffer") +
                              " (`" + step.from.name + "` is " + (on_device(step.from) ? "device" : "host") + " memory, `" + step.to.name + "` is " +
                              (on_device(step.to) ? "device" : "host") + " memory)");
        }
      } else if (op == "compute") {
        step.kind = StepKind::Compute;
        check_keys(f, {"stream", "reads", "writes", "what"}, at);
        step.stream = stream_ref(f, "stream", at);
        step.reads = buffer_list(f, "reads", at);
        step.writes = buffer_list(f, "writes", at);
        step.what = f["what"] ? scalar(f["what"], at + ".what") : "layer";
        if (step.what != "layer" && step.what != "recompute" && step.what != "backward") {
          fail(f["what"], "`" + at + ".what` must be layer, recompute or backward" + did_you_mean(step.what, {"layer", "recompute", "backward"}));
        }
      } else if (op == "free" || op == "record_stream") {
        step.kind = op == "free" ? StepKind::Free : StepKind::RecordStream;
        check_keys(f, {"buffer", "stream"}, at);
        if (!f["buffer"]) fail(f, "`" + at + "` needs `buffer`");
        step.buffer = buffer_ref(f["buffer"], at + ".buffer");
        step.stream = stream_ref(f, "stream", at);
      } else if (op == "host_sync") {
        step.kind = StepKind::HostSync;
        check_keys(f, {"stream", "event"}, at);
        if (f["event"]) step.event = event_ref(f, at);
        else step.other_stream = stream_ref(f, "stream", at);
      } else {
        fail(entry.first, "unknown op `" + op + "` in `" + where + "`" + did_you_mean(op, kinds) + " (ops: " + join(kinds) + ")");
      }
      steps.push_back(std::move(step));
    }
    return steps;
  }

  std::string source_;
  StreamProtocol protocol_;
};


}  // namespace

StreamProtocol parse_stream_protocol(const std::string& yaml_text, const std::string& source) {
  return ProtocolParser(source).parse(yaml_text);
}

StreamProtocol load_stream_protocol_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "cannot read the stream protocol file");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_stream_protocol(text.str(), path);
}

std::string protocol_dir() { return data_dir() + "/protocols"; }

std::vector<std::string> list_stream_protocols() { return list_data_files("protocols", ".yaml"); }

std::string resolve_stream_protocol(const std::string& name_or_path, const std::string& plan_dir) {
  namespace fs = std::filesystem;
  const bool looks_like_path = name_or_path.find('/') != std::string::npos || fs::path(name_or_path).has_extension();
  if (looks_like_path) {
    if (!plan_dir.empty() && fs::path(name_or_path).is_relative() && fs::exists(fs::path(plan_dir) / name_or_path)) {
      return (fs::path(plan_dir) / name_or_path).string();
    }
    if (fs::exists(name_or_path)) return name_or_path;
    throw InputError(name_or_path, "stream protocol file not found" + (plan_dir.empty() ? std::string() : " (looked next to the plan in " + plan_dir + " and in the working directory)"));
  }
  const fs::path builtin = fs::path(protocol_dir()) / (name_or_path + ".yaml");
  if (fs::exists(builtin)) return builtin.string();
  const std::vector<std::string> known = list_stream_protocols();
  throw InputError("offload_protocol " + name_or_path, "no such stream protocol" + did_you_mean(name_or_path, known) + " (built in: " + join(known) + "; or give a path to a .yaml file)");
}

StreamProtocol load_stream_protocol(const std::string& name_or_path, const std::string& plan_dir) {
  return load_stream_protocol_file(resolve_stream_protocol(name_or_path, plan_dir));
}

}  // namespace hookstream
