// Mutation analysis of a stream protocol: remove each sync step (record, wait_event, wait_stream,
// host_sync, record_stream) in turn, expand and check again. A needed step leaves a race behind (the
// first one is kept as evidence); a step whose removal leaves every happens-before relation between
// work ops unchanged is proven redundant (e.g. a wait after a copy that already blocked the host).
// A step that is neither is a gap in the protocol's test coverage: no access depends on it.
#pragma once

#include <string>
#include <vector>

#include "sim/streams/race_checker.h"
#include "sim/streams/stream_expansion.h"
#include "sim/streams/stream_protocol.h"

namespace hookstream {

struct SyncStepVerdict {
  std::string phase;        // "forward" or "backward"
  size_t index = 0;         // position in that phase's step list
  ProtocolStep step;
  bool redundant = false;   // same happens-before relations without it
  size_t races = 0;         // races without it
  std::string evidence;     // describe_race of the first race without it
  std::string verdict() const { return races > 0 ? "needed" : (redundant ? "redundant" : "unused"); }
};

std::vector<SyncStepVerdict> mutate_sync_steps(const StreamProtocol& protocol, const Plan& plan,
                                               const ModelStructure& structure, const ExpansionOptions& options = {});

}  // namespace hookstream
