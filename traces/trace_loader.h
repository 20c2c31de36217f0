// Loads a trace file of any supported format into the EventModel, choosing the importer by the
// file's content (not its name): "SQLite format 3" -> Nsight Systems export; gzip magic or a
// leading '{' / '[' -> Kineto Chrome trace.
#pragma once

#include <string>
#include <vector>

#include "sim/events/event_model.h"
#include "traces/importers/trace_contents.h"

namespace hookstream {

enum class TraceFormat { NsysSqlite, KinetoJson };
const char* to_string(TraceFormat format);

// Throws InputError naming the file when it cannot be read or is neither format.
TraceFormat detect_trace_format(const std::string& path);

// One file; its processes become ranks from `first_rank` on.
// `contents`, when given, receives what the file held besides its ops (trace_contents.h).
EventModel load_trace(const std::string& path, int first_rank = 0, TraceContents* contents = nullptr);

// Several files, one per rank (or per node): ranks are numbered in the order the files are given,
// and the models are concatenated (streams, events and op indices shifted).
// `contents`, when given, gets one entry per file, in the order given.
EventModel load_traces(const std::vector<std::string>& paths, std::vector<TraceContents>* contents = nullptr);

}  // namespace hookstream
