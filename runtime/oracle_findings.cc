#include "runtime/oracle_findings.h"

#include <algorithm>
#include <regex>
#include <sstream>
#include <set>

namespace hookstream {

namespace {

bool contains(const std::string& text, const char* phrase) { return text.find(phrase) != std::string::npos; }

// Gloo (and the TCPStore) report a peer that never joins a collective as a timeout, or as a closed
// connection once that peer's process has exited.
bool is_collective_failure(const std::string& text) {
  for (const char* phrase : {"Timed out", "timed out", "Connection closed by peer", "Connection reset by peer",
                             "Broken pipe", "gloo", "Gloo", "Socket Timeout"}) {
    if (contains(text, phrase)) return true;
  }
  return false;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

struct Context {
  const Plan& plan;
  const ModelStructure& structure;
  const OracleResult& result;

  void name(Finding& f, int ddp_index) const {
    f.ddp_index = ddp_index;
    if (ddp_index < 0 || ddp_index >= static_cast<int>(structure.ddp_parameters.size())) return;
    const Parameter& p = structure.ddp_parameter(ddp_index);
    f.parameter = p.name;
    f.layer = p.layer;
  }

  const WorkerIteration* iteration_log(int rank, int iteration) const {
    const RankObservation& r = result.ranks[rank];
    if (!r.has_report || iteration < 0 || iteration >= static_cast<int>(r.report.iterations.size())) return nullptr;
    return &r.report.iterations[iteration];
  }

  // The graph tasks, in firing order, in which `ddp_index`'s hook fired (synced micro-step only:
  // hooks of no_sync micro-steps are not expected by the Reducer).
  std::vector<std::string> tasks_of(int rank, int iteration, int ddp_index) const {
    std::vector<std::string> tasks;
    const WorkerIteration* log = iteration_log(rank, iteration);
    if (!log) return tasks;
    const int synced = std::max(1, plan.gradient_accumulation_steps) - 1;
    for (const HookFiring& f : log->firings) {
      if (f.ddp_index == ddp_index && f.micro_step == synced) tasks.push_back(f.graph_task);
    }
    return tasks;
  }

  std::vector<int> params_without_hook(int rank, int iteration) const {
    std::vector<int> missing;
    const WorkerIteration* log = iteration_log(rank, iteration);
    if (!log) return missing;
    const int synced = std::max(1, plan.gradient_accumulation_steps) - 1;
    std::set<int> fired;
    for (const HookFiring& f : log->firings) {
      if (f.micro_step == synced) fired.insert(f.ddp_index);
    }
    for (int i = 0; i < static_cast<int>(structure.ddp_parameters.size()); ++i) {
      if (!fired.count(i)) missing.push_back(i);
    }
    return missing;
  }
};

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

// One finding from one rank's error; false when the text is not one we know.
bool classify_error(const Context& c, int rank, const WorkerError& error, std::vector<Finding>& findings) {
  Finding f;
  f.rank = rank;
  f.iteration = error.iteration;
  f.micro_step = error.micro_step;
  f.phase = error.phase;
  f.error_text = error.text;
  const std::string& text = error.text;
  std::smatch match;
  if (contains(text, "marked as ready twice") || contains(text, "Expected to mark a variable ready only once")) {
    f.kind = VerdictKind::MarkedReadyTwice;
    static const std::regex index_re("Parameter at index (\\d+)");
    if (std::regex_search(text, match, index_re)) c.name(f, std::stoi(match[1]));
    f.graph_tasks = c.tasks_of(rank, error.iteration, f.ddp_index);
    if (f.graph_tasks.size() <= 1 && c.plan.find_unused_parameters() && !c.plan.static_graph) {
      f.explanation = "find_unused_parameters marked it ready as unused (unreachable from the outputs) at the "
                      "first hook of the backward; then its hook fired in " + join(f.graph_tasks) + ".";
    } else {
      f.explanation = "its hook fired more than once in one iteration: " + join(f.graph_tasks) + ".";
    }
  } else if (contains(text, "Expected to have finished reduction in the prior iteration")) {
    f.kind = VerdictKind::UnfinishedReduction;
    f.phase = Phase::Forward;
    // The Reducer lists the unmarked parameters' indices (sorted) in its text; in static graph they
    // did fire, just fewer times than in the first iteration, so the hook log cannot tell.
    std::vector<int> missing;
    static const std::regex indices_re("Parameter indices which did not receive grad for rank \\d+: ([0-9 ]+)");
    if (std::regex_search(text, match, indices_re)) {
      std::istringstream list(match[1].str());
      for (int index; list >> index;) missing.push_back(index);
    } else {
      missing = c.params_without_hook(rank, error.iteration - 1);
    }
    std::vector<std::string> names;
    for (int index : missing) names.push_back(c.structure.ddp_parameter(index).name);
    if (!missing.empty()) c.name(f, missing.front());
    f.explanation = "in iteration " + std::to_string(error.iteration - 1) +
                    " no hook fired for: " + (names.empty() ? std::string("(none recorded)") : join(names)) +
                    "; their bucket never completed, so the reduction never finished.";
  } else if (contains(text, "Your training graph has changed")) {
    f.kind = VerdictKind::StaticGraphChanged;
    // The Reducer names no parameter here: the one whose hook fired last before the error is it
    // (our hook runs before the Reducer's on the same accumulator).
    if (const WorkerIteration* log = c.iteration_log(rank, error.iteration); log && !log->firings.empty()) {
      c.name(f, log->firings.back().ddp_index);
      f.graph_tasks = c.tasks_of(rank, error.iteration, f.ddp_index);
    }
    f.explanation = "static_graph=True and this hook fired more often than in the first iteration.";
  } else if (contains(text, "does not require grad and does not have a grad_fn")) {
    f.kind = VerdictKind::NoGradient;
    f.explanation = "the loss does not depend on any trainable parameter through autograd: " + first_line(text);
  } else if (contains(text, "INTERNAL ASSERT FAILED") && contains(text, "reducer.cpp")) {
    f.kind = VerdictKind::ReducerAssert;
    f.explanation = "the Reducer hit one of its internal assertions: " + first_line(text);
  } else if (contains(text, "Compiled autograd is not compatible with C++ DDP Reducer")) {
    // torch 2.8+ reducer.cpp (PR #152735): DDP's C++ Reducer under compiled autograd.
    f.kind = VerdictKind::EngineError;
    f.explanation = "compiled autograd cannot run the C++ Reducer's hook: " + first_line(text);
  } else if (is_collective_failure(text)) {
    f.kind = VerdictKind::CollectiveMismatch;
    f.explanation = "this rank waited in a collective that the other ranks did not issue (or left).";
  } else {
    return false;
  }
  findings.push_back(std::move(f));
  return true;
}

}  // namespace

void classify_observations(const Plan& plan, const ModelStructure& structure, OracleResult& result) {
  const Context c{plan, structure, result};
  std::vector<Finding> findings;
  int first_error_iteration = plan.iterations + 1;
  bool unfinished = false;
  for (const RankObservation& rank : result.ranks) {
    if (!rank.has_report) {
      Finding f;
      f.kind = VerdictKind::CollectiveMismatch;
      f.rank = rank.rank;
      f.error_text = rank.process.killed_at_deadline ? "no error: killed at the oracle's deadline (hung)"
                                                     : "no error: worker exited without a report";
      f.explanation = "the rank never finished: it waited for a collective the other ranks did not issue.";
      findings.push_back(std::move(f));
      first_error_iteration = 0;
      continue;
    }
    if (!rank.report.error) continue;
    const WorkerError& error = *rank.report.error;
    first_error_iteration = std::min(first_error_iteration, error.iteration);
    if (!classify_error(c, rank.rank, error, findings)) {
      result.unclassified_errors.push_back("rank " + std::to_string(rank.rank) + ": " + error.text);
    } else if (findings.back().kind == VerdictKind::UnfinishedReduction) {
      unfinished = true;
    }
  }
  // Gradients are evidence only for iterations that every rank finished before any error; the
  // iteration whose reduction never finished holds local, unreduced gradients by construction.
  const int last_evidence = first_error_iteration - (unfinished ? 1 : 0);
  for (const IterationObservation& obs : result.iterations) {
    if (!obs.compared || obs.iteration >= last_evidence) continue;
    for (size_t p = 0; p < obs.equal_to_reference.size(); ++p) {
      if (obs.grad_on_no_rank[p] || (obs.equal_across_ranks[p] && obs.equal_to_reference[p])) continue;
      Finding f;
      f.kind = VerdictKind::SilentDivergence;
      f.iteration = obs.iteration;
      f.micro_step = std::max(1, plan.gradient_accumulation_steps) - 1;
      f.phase = Phase::AfterBackward;
      c.name(f, static_cast<int>(p));
      for (size_t r = 0; r < result.ranks.size(); ++r) {
        for (const auto& task : c.tasks_of(static_cast<int>(r), obs.iteration, f.ddp_index)) {
          if (std::find(f.graph_tasks.begin(), f.graph_tasks.end(), task) == f.graph_tasks.end()) {
            f.graph_tasks.push_back(task);
          }
        }
      }
      f.error_text = obs.equal_across_ranks[p] ? "no error: gradients equal across ranks but not the average of the local gradients"
                                               : "no error: gradients differ across ranks";
      f.explanation = "the reduction finished before every local contribution to this gradient arrived; "
                      "what autograd accumulated afterwards stayed local.";
      findings.push_back(std::move(f));
      break;  // the first differing parameter (DDP index order) per iteration
    }
    // A trainable parameter that no rank gave a gradient.
    for (size_t p = 0; p < obs.grad_on_no_rank.size(); ++p) {
      if (!obs.grad_on_no_rank[p]) continue;
      Finding f;
      f.kind = VerdictKind::NoGradient;
      f.iteration = obs.iteration;
      f.phase = Phase::AfterBackward;
      c.name(f, static_cast<int>(p));
      f.error_text = "no error: .grad is None on every rank";
      f.explanation = "no graph task reached this parameter's accumulator with a gradient.";
      findings.push_back(std::move(f));
    }
  }
  result.findings = std::move(findings);
}

}  // namespace hookstream
