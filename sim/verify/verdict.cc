#include "sim/verify/verdict.h"

namespace hookstream {

namespace {
struct KindName {
  VerdictKind kind;
  const char* name;
};
constexpr KindName kKindNames[] = {
    {VerdictKind::Ok, "ok"},
    {VerdictKind::MarkedReadyTwice, "marked_ready_twice"},
    {VerdictKind::SilentDivergence, "silent_divergence"},
    {VerdictKind::UnfinishedReduction, "unfinished_reduction"},
    {VerdictKind::StaticGraphChanged, "static_graph_changed"},
    {VerdictKind::NoGradient, "no_gradient"},
    {VerdictKind::CollectiveMismatch, "collective_mismatch"},
    {VerdictKind::ReplicaSplit, "replica_split"},
    {VerdictKind::ReducerAssert, "reducer_internal_assert"},
    {VerdictKind::GradientReducedTwice, "gradient_reduced_twice"},
    {VerdictKind::WrongGradient, "wrong_gradient"},
    {VerdictKind::ShardedParameterUse, "sharded_parameter_use"},
    {VerdictKind::EngineError, "engine_error"},
    {VerdictKind::ExtraCollectives, "extra_collectives"},
};
}  // namespace

const char* to_string(VerdictKind kind) {
  for (const auto& entry : kKindNames) {
    if (entry.kind == kind) return entry.name;
  }
  return "unknown";
}

bool parse_verdict_kind(const std::string& text, VerdictKind& kind) {
  for (const auto& entry : kKindNames) {
    if (text == entry.name) {
      kind = entry.kind;
      return true;
    }
  }
  return false;
}

std::string error_text_for_rank(const Finding& finding, int rank) {
  std::string text = finding.error_text;
  const std::string from = "for rank " + std::to_string(finding.rank) + ":";
  const size_t at = text.find(from);
  if (at != std::string::npos && rank != finding.rank) text.replace(at, from.size(), "for rank " + std::to_string(rank) + ":");
  return text;
}

const char* to_string(Phase phase) {
  switch (phase) {
    case Phase::Forward: return "forward";
    case Phase::Backward: return "backward";
    case Phase::AfterBackward: return "after_backward";
  }
  return "unknown";
}

}  // namespace hookstream
