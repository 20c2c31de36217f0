#include "runtime/differential.h"

#include <algorithm>
#include <fmt/format.h>


namespace hookstream {

namespace {

bool concerns(const Finding& f, int rank) {
  if (!f.ranks.empty()) return std::find(f.ranks.begin(), f.ranks.end(), rank) != f.ranks.end();
  // Gradient findings of the oracle hold for the run as a whole.
  if (f.kind == VerdictKind::SilentDivergence || f.kind == VerdictKind::NoGradient) return true;
  return f.rank == rank;
}

bool before(const Finding& a, const Finding& b) {
  if (a.iteration != b.iteration) return a.iteration < b.iteration;
  return a.micro_step < b.micro_step;
}

}  // namespace

const Finding* first_finding_for_rank(const std::vector<Finding>& findings, int rank) {
  const Finding* first = nullptr;
  for (const Finding& f : findings) {
    if (!concerns(f, rank)) continue;
    if (!first || before(f, *first)) first = &f;
  }
  return first;
}

bool DifferentialReport::agree() const {
  if (!unclassified_errors.empty()) return false;
  return std::all_of(ranks.begin(), ranks.end(), [](const RankComparison& r) { return r.agree; });
}

std::string DifferentialReport::describe() const {
  std::string out;
  for (const auto& r : ranks) {
    out += fmt::format("rank {}: predicted {} {} / observed {} {}{}\n", r.rank, to_string(r.predicted),
                       r.predicted_parameter, to_string(r.observed), r.observed_parameter, r.agree ? "" : "  <-- differs");
    if (!r.agree && r.predicted_text != r.observed_text) {
      out += fmt::format("  predicted text: {}\n  observed text:  {}\n", r.predicted_text, r.observed_text);
    }
  }
  for (const auto& e : unclassified_errors) out += "unclassified oracle error: " + e.substr(0, e.find('\n')) + "\n";
  return out;
}

DifferentialReport compare_with_oracle(const Plan& plan, const SyncSimulation& predicted, const OracleResult& observed) {
  DifferentialReport report;
  report.unclassified_errors = observed.unclassified_errors;
  // A parameter whose value fed the loss on no rank (a module the plan skips, or one whose output
  // feeds nothing once what reads it is skipped) is unused as DDP sees it: the simulator does not
  // report its None .grad as a missing gradient, and neither does the comparison. The oracle
  // cannot tell that from its gradients; the forward's data flow (the simulator's) says it.
  std::vector<Finding> oracle_findings;
  for (const Finding& f : observed.findings) {
    if (f.kind == VerdictKind::NoGradient && f.ddp_index >= 0 && f.ranks.empty()) {
      auto fed = predicted.fed_loss.find(f.iteration);
      if (fed != predicted.fed_loss.end() && !fed->second[static_cast<size_t>(f.ddp_index)]) continue;
    }
    oracle_findings.push_back(f);
  }
  for (int rank = 0; rank < plan.world_size; ++rank) {
    RankComparison row;
    row.rank = rank;
    if (const Finding* p = first_finding_for_rank(predicted.findings, rank)) {
      row.predicted = p->kind;
      row.predicted_parameter = p->parameter;
      row.predicted_text = error_text_for_rank(*p, rank);
    }
    if (const Finding* o = first_finding_for_rank(oracle_findings, rank)) {
      row.observed = o->kind;
      row.observed_parameter = o->parameter;
      row.observed_text = o->error_text;
    }
    // A rank left waiting is named by the collective it waits in, not by a parameter, and its text
    // is whatever the transport reports (a Gloo timeout or a closed connection).
    const bool waiting = row.predicted == VerdictKind::CollectiveMismatch;
    const bool raised = row.observed_text.rfind("no error", 0) != 0 && !row.observed_text.empty();
    row.agree = row.predicted == row.observed && (waiting || row.predicted_parameter == row.observed_parameter) &&
                (waiting || !raised || row.predicted_text == row.observed_text);
    report.ranks.push_back(row);
  }
  return report;
}

}  // namespace hookstream
