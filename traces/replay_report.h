// Everything `hookstream replay` reports about a trace: the analyses of traces/analyses run on one
// EventModel, and their text and JSON renderings (schema hookstream.replay/1, docs/replay.md).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim/events/event_model.h"
#include "traces/importers/trace_contents.h"
#include "traces/analyses/collective_compute_overlap.h"
#include "traces/analyses/copy_compute_overlap.h"
#include "traces/analyses/device_utilisation.h"
#include "traces/analyses/memory_bandwidth.h"
#include "traces/analyses/pageable_async_copies.h"
#include "traces/analyses/stream_idle_breakdown.h"
#include "traces/analyses/stream_op_counts.h"
#include "traces/analyses/synchronising_calls.h"

namespace hookstream {

struct ReplayReport {
  // What the renderings need from the model analysed, copied so that the report outlives it (the
  // CLI frees a long trace before the step replay): its source, streams and sizes, and the few ops
  // the findings name (idle gaps' neighbours, pageable copy examples), by index.
  std::string source;
  std::vector<Stream> trace_streams;
  int64_t trace_events = 0, trace_ops = 0;
  std::map<int, Op> cited_ops;
  int ranks = 0;
  int64_t gpu_ops = 0;                // kernels, collectives, copies, memsets on a stream
  std::map<OpKind, int64_t> ops_by_kind;
  std::vector<DeviceUtilisation> devices;
  std::vector<CopyOverlap> copy_overlap;
  std::vector<CollectiveOverlap> collective_overlap;
  PageableCopies pageable;
  SynchronisingCalls sync;
  std::vector<StreamOpCounts> streams;
  int64_t streams_used = 0;           // of trace_streams, those with at least one op
  std::vector<KernelTypeBreakdown> kernel_types;  // HTA's kernel breakdown by type, per rank
  std::vector<StreamIdleBreakdown> idle;          // HTA's idle-time breakdown, per stream
  std::vector<MemoryBandwidth> memory_bandwidth;  // HTA's memory-bandwidth summary, per rank and type
  // What each file held besides its ops (trace_loader.h), when the caller collected it: rows that
  // are not ops are always reported, other events when the trace has no GPU work.
  std::vector<TraceContents> contents;
};

ReplayReport analyse_replay(const EventModel& model);

std::string render_replay_text(const ReplayReport& report);
nlohmann::json render_replay_json(const ReplayReport& report);

}  // namespace hookstream
