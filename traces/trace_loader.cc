#include "traces/trace_loader.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "sim/inputs/input_error.h"
#include "traces/importers/kineto/kineto_importer.h"
#include "traces/importers/nsys/nsys_importer.h"

namespace hookstream {

const char* to_string(TraceFormat format) {
  switch (format) {
    case TraceFormat::NsysSqlite: return "nsys-sqlite";
    case TraceFormat::KinetoJson: return "kineto-json";
  }
  return "unknown";
}

TraceFormat detect_trace_format(const std::string& path) {
  // A directory opens and reads as empty; say what it is (tensorboard_trace_handler writes one
  // file per rank into a directory: each is given, in rank order).
  std::error_code ignored;
  if (std::filesystem::is_directory(path, ignored)) {
    throw InputError(path, "is a directory: expected trace files (one per rank, e.g. DIR/*.pt.trace.json)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, std::string("cannot open (") + std::strerror(errno) + ")");
  std::array<char, 64> head{};
  in.read(head.data(), head.size());
  const size_t n = static_cast<size_t>(in.gcount());
  if (n >= 16 && std::memcmp(head.data(), "SQLite format 3", 16) == 0) return TraceFormat::NsysSqlite;
  if (n >= 2 && static_cast<unsigned char>(head[0]) == 0x1f && static_cast<unsigned char>(head[1]) == 0x8b) {
    return TraceFormat::KinetoJson;
  }
  for (size_t i = 0; i < n; ++i) {
    const char c = head[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
    if (c == '{' || c == '[') return TraceFormat::KinetoJson;
    break;
  }
  if (n == 0) throw InputError(path, "empty file: expected an nsys SQLite export or a Kineto JSON trace");
  // Nsight Systems writes its report (.nsys-rep; .qdrep before 2021.4; .qdstrm, the raw stream
  // when the report was not finished) in a format of its own that only nsys reads; `nsys export`
  // turns it into the SQLite export read here. The format's header is not documented, so the report
  // is known by its name once the content is neither format (a .sqlite renamed .nsys-rep is still
  // read as what it is).
  const std::filesystem::path file(path);
  const std::string extension = file.extension().string();
  if (extension == ".nsys-rep" || extension == ".qdrep" || extension == ".qdstrm") {
    const std::string sqlite = (file.parent_path() / file.stem()).string() + ".sqlite";
    throw InputError(path, "is an Nsight Systems report, which only nsys reads: export it first with `nsys export "
                           "--type sqlite --output " + sqlite + " " + path + "` and give " + sqlite +
                           (extension == ".qdstrm" ? " (a .qdstrm is an unfinished capture: `QdstrmImporter -i " + path +
                                                         "` makes the .nsys-rep first)"
                                                   : ""));
  }
  throw InputError(path, "unknown trace format: expected an nsys SQLite export (SQLite header) or a Kineto "
                         "JSON trace (.json or .json.gz)");
}

EventModel load_trace(const std::string& path, int first_rank, TraceContents* contents) {
  switch (detect_trace_format(path)) {
    case TraceFormat::NsysSqlite: return import_nsys_sqlite(path, first_rank, contents);
    case TraceFormat::KinetoJson: return import_kineto_json(path, first_rank, contents);
  }
  throw InputError(path, "unknown trace format");
}

EventModel load_traces(const std::vector<std::string>& paths, std::vector<TraceContents>* contents) {
  EventModel merged;
  int next_rank = 0;
  if (contents) contents->assign(paths.size(), TraceContents{});
  for (size_t file = 0; file < paths.size(); ++file) {
    const std::string& path = paths[file];
    EventModel one = load_trace(path, next_rank, contents ? &(*contents)[file] : nullptr);
    int ranks_in_file = 1;
    for (const Stream& s : one.streams) ranks_in_file = std::max(ranks_in_file, s.rank - next_rank + 1);
    for (const Op& op : one.ops) ranks_in_file = std::max(ranks_in_file, op.rank - next_rank + 1);
    next_rank += ranks_in_file;
    if (paths.size() == 1) return one;
    const int stream_shift = static_cast<int>(merged.streams.size());
    const int event_shift = static_cast<int>(merged.events.size());
    for (Stream& s : one.streams) merged.streams.push_back(std::move(s));
    for (Event& e : one.events) merged.events.push_back(std::move(e));
    merged.ops.reserve(merged.ops.size() + one.ops.size());
    for (Op& op : one.ops) {
      if (op.stream >= 0) op.stream += stream_shift;
      if (op.sync_stream >= 0) op.sync_stream += stream_shift;
      if (op.event >= 0) op.event += event_shift;
      merged.ops.push_back(std::move(op));
    }
    merged.source += (merged.source.empty() ? "" : "; ") + one.source;
  }
  return merged;
}

}  // namespace hookstream
