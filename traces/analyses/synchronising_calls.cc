#include "traces/analyses/synchronising_calls.h"

#include <algorithm>
#include <map>
#include <string_view>

#include "traces/cuda_api.h"

namespace hookstream {

SynchronisingCalls analyse_synchronising_calls(const EventModel& model) {
  SynchronisingCalls result;
  std::map<std::string, SyncCallSite, std::less<>> sites;
  std::vector<char> recorded(model.events.size(), 0);  // an EventRecord of the event seen so far
  for (const Op& op : model.ops) {
    if (op.kind == OpKind::EventRecord && op.event >= 0 && op.stream >= 0) recorded[op.event] = 1;
    if (op.kind == OpKind::StreamWait || op.kind == OpKind::EventSync) {
      (op.kind == OpKind::StreamWait ? result.stream_waits : result.event_syncs) += 1;
      if (op.event >= 0 && recorded[op.event]) ++result.waits_matched;
    }
    // The host call itself: GPU-side ops (a copy on a stream) are not host time.
    if (!op.blocks_host || op.stream >= 0) continue;
    // Looked up by view first: a long trace repeats the same few calls, so no name is built per call.
    const std::string_view api = strip_api_version(op.source_api.empty() ? op.name : op.source_api);
    auto found = sites.find(api);
    if (found == sites.end()) {
      found = sites.emplace(std::string(api), SyncCallSite{}).first;
      found->second.api = found->first;
    }
    SyncCallSite& site = found->second;
    ++site.calls;
    ++result.calls;
    if (op.duration_ns > 0) {
      site.blocked_ns += op.duration_ns;
      result.blocked_ns += op.duration_ns;
    }
  }
  for (auto& [name, site] : sites) result.by_api.push_back(site);
  std::stable_sort(result.by_api.begin(), result.by_api.end(),
                   [](const SyncCallSite& a, const SyncCallSite& b) { return a.blocked_ns > b.blocked_ns; });
  return result;
}

}  // namespace hookstream
