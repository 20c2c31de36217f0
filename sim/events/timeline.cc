#include "sim/events/timeline.h"

#include <nlohmann/json.hpp>

#include <map>
#include <set>

#include "sim/verify/json_text.h"

namespace hookstream {

namespace {

using nlohmann::json;

// The Trace Event Format counts microseconds.
double us(double ns) { return ns / 1000.0; }

int thread_of(const Op& op) { return op.stream >= 0 ? op.stream + 1 : 0; }

std::string thread_name(const Stream& stream) {
  return stream.name + " (device " + std::to_string(stream.device) + ", stream " + std::to_string(stream.id) + ")";
}

}  // namespace

json chrome_trace_document(const EventModel& model, const TimelineOptions& options) {
  json events = json::array();
  std::set<int> ranks;
  for (const Op& op : model.ops) ranks.insert(op.rank);
  for (const Stream& stream : model.streams) ranks.insert(stream.rank);
  for (int rank : ranks) {
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", rank}, {"tid", 0}, {"args", {{"name", "rank " + std::to_string(rank)}}}});
    events.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", rank}, {"tid", 0}, {"args", {{"sort_index", rank}}}});
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", 0}, {"args", {{"name", "host"}}}});
  }
  for (size_t s = 0; s < model.streams.size(); ++s) {
    const Stream& stream = model.streams[s];
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", stream.rank}, {"tid", static_cast<int>(s) + 1},
                      {"args", {{"name", thread_name(stream)}}}});
    events.push_back({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", stream.rank}, {"tid", static_cast<int>(s) + 1},
                      {"args", {{"sort_index", static_cast<int>(s) + 1}}}});
  }
  // The record each wait sees: the latest record of its event issued before it (host order).
  std::map<int, int> last_record;     // event -> op index
  std::map<int, int> last_on_stream;  // stream -> index of its latest scheduled op
  int flow_id = 0;
  for (size_t i = 0; i < model.ops.size(); ++i) {
    const Op& op = model.ops[i];
    if (op.start_ns < 0) continue;
    json args = {{"kind", to_string(op.kind)}, {"op", static_cast<int>(i)}};
    if (op.layer >= 0) args["layer"] = op.layer;
    if (op.flops > 0) args["flops"] = op.flops;
    if (op.bytes > 0) args["bytes"] = op.bytes;
    if (op.event >= 0 && op.event < static_cast<int>(model.events.size())) args["event"] = model.events[op.event].name;
    events.push_back({{"ph", "X"}, {"name", op.name}, {"cat", op.phase.empty() ? "step" : op.phase}, {"pid", op.rank},
                      {"tid", thread_of(op)}, {"ts", us(op.start_ns)}, {"dur", us(std::max(0.0, op.duration_ns))},
                      {"args", args}});
    if (op.kind == OpKind::EventRecord && op.event >= 0) last_record[op.event] = static_cast<int>(i);
    // wait_stream (a StreamWait without an event): the arrow starts at the other stream's last op.
    if (op.kind == OpKind::StreamWait && op.event < 0 && op.sync_stream >= 0 && last_on_stream.count(op.sync_stream)) {
      const Op& source = model.ops[last_on_stream[op.sync_stream]];
      ++flow_id;
      events.push_back({{"ph", "s"}, {"id", flow_id}, {"name", "wait_stream"}, {"cat", "sync"}, {"pid", source.rank},
                        {"tid", thread_of(source)}, {"ts", us(source.start_ns)}});
      events.push_back({{"ph", "f"}, {"bp", "e"}, {"id", flow_id}, {"name", "wait_stream"}, {"cat", "sync"},
                        {"pid", op.rank}, {"tid", thread_of(op)}, {"ts", us(op.start_ns + std::max(0.0, op.duration_ns))}});
    }
    if (op.stream >= 0) last_on_stream[op.stream] = static_cast<int>(i);
    if ((op.kind == OpKind::StreamWait || op.kind == OpKind::EventSync) && op.event >= 0 && last_record.count(op.event)) {
      const Op& record = model.ops[last_record[op.event]];
      const std::string name = op.event < static_cast<int>(model.events.size()) ? model.events[op.event].name : "event";
      ++flow_id;
      events.push_back({{"ph", "s"}, {"id", flow_id}, {"name", name}, {"cat", "sync"}, {"pid", record.rank},
                        {"tid", thread_of(record)}, {"ts", us(record.start_ns)}});
      // The arrow ends where the wait is satisfied: the end of the wait's slice.
      events.push_back({{"ph", "f"}, {"bp", "e"}, {"id", flow_id}, {"name", name}, {"cat", "sync"}, {"pid", op.rank},
                        {"tid", thread_of(op)}, {"ts", us(op.start_ns + std::max(0.0, op.duration_ns))}});
    }
  }
  for (const MemorySample& sample : options.memory) {
    if (sample.op < 0 || sample.op >= static_cast<int>(model.ops.size())) continue;
    const Op& op = model.ops[sample.op];
    if (op.start_ns < 0) continue;
    events.push_back({{"ph", "C"}, {"name", "device " + std::to_string(sample.device) + " memory"}, {"pid", sample.rank},
                      {"tid", 0}, {"ts", us(op.start_ns)},
                      {"args", {{"bytes", sample.bytes + options.memory_baseline_bytes}}}});
  }
  // Moved, not copied: a long step's timeline holds ~10^6 events.
  json trace = json::object();
  trace["traceEvents"] = std::move(events);
  trace["displayTimeUnit"] = "ns";
  trace["otherData"] = {{"source", model.source}};
  return trace;
}

std::string chrome_trace_json(const EventModel& model, const TimelineOptions& options) {
  return json_text(chrome_trace_document(model, options), 1) + "\n";
}

}  // namespace hookstream
