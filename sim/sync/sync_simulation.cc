#include "sim/sync/sync_simulation.h"

#include "sim/sync/expert_parallel/expert_parallel.h"

#include <algorithm>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <stdexcept>

#include "sim/sync/ddp/ddp_simulation.h"
#include "sim/sync/zero/zero_model.h"
#include "sim/sync/fsdp2/fsdp2_model.h"
#include "sim/sync/fsdp1/fsdp1_model.h"
#include "sim/sync/ddp_python_reducer/python_reducer.h"

namespace hookstream {

std::string rank_schedule_key(const Plan& plan, int rank) {
  std::string key;
  for (int it = 0; it < plan.iterations; ++it) {
    for (int micro = 0; micro < plan.gradient_accumulation_steps; ++micro) {
      key += fmt::format("{}:", plan.tiled_shards_for(rank, it, micro));
      for (int layer = 0; layer < plan.model.num_hidden_layers; ++layer) {
        key += char('0' + plan.checkpoint_count(layer, rank, it, micro));
      }
      key += fmt::format("|{};", fmt::join(plan.unused_modules_for(rank, it, micro), ","));
    }
  }
  return key;
}

std::vector<std::vector<int>> rank_classes(const Plan& plan, bool deduplicate) {
  std::vector<std::vector<int>> classes;
  std::map<std::string, size_t> class_of_key;
  for (int r = 0; r < plan.world_size; ++r) {
    const std::string key = deduplicate ? rank_schedule_key(plan, r) : std::to_string(r);
    auto [it, inserted] = class_of_key.emplace(key, classes.size());
    if (inserted) classes.emplace_back();
    classes[it->second].push_back(r);
  }
  return classes;
}

std::vector<Finding> collective_mismatch_findings(const std::vector<std::vector<int>>& classes,
                                                  const std::vector<CollectiveLog>& logs) {
  // Classes with identical collective logs are compared once.
  std::map<std::string, size_t> first_with_log;  // serialized log -> first class with it
  std::vector<size_t> log_representative(logs.size());
  std::vector<size_t> distinct;
  for (size_t c = 0; c < logs.size(); ++c) {
    std::string serialized;
    for (const auto& [key, collective] : logs[c].collectives) {
      serialized += fmt::format("{}.{}:{}:{};", key.iteration, key.micro_step, collective.what, collective.bytes);
    }
    auto [it, inserted] = first_with_log.emplace(std::move(serialized), c);
    if (inserted) distinct.push_back(c);
    log_representative[c] = it->second;
  }
  std::vector<Finding> mismatch(logs.size());
  for (size_t a : distinct) {
    for (size_t b : distinct) {
      if (a == b || mismatch[a].kind != VerdictKind::Ok) continue;
      const auto& la = logs[a].collectives;
      const auto& lb = logs[b].collectives;
      size_t i = 0;
      while (i < la.size() && i < lb.size() && la[i].first == lb[i].first && la[i].second == lb[i].second) ++i;
      if (i >= la.size()) continue;  // a issues nothing that b lacks
      Finding f;
      f.kind = VerdictKind::CollectiveMismatch;
      f.rank = classes[a].front();
      f.iteration = la[i].first.iteration;
      f.micro_step = la[i].first.micro_step;
      f.phase = Phase::Backward;
      const int other = classes[b].front();
      f.error_text = "no error at first: rank " + std::to_string(f.rank) + " blocks in '" + la[i].second.what +
                     "' until the process group timeout";
      if (i >= lb.size()) {
        f.explanation = fmt::format("rank {} never issues it: {}", other,
                                    logs[b].stopped ? "it stopped earlier with an error" : "its backward issues fewer collectives");
      } else {
        f.explanation = fmt::format("rank {} issues '{}' at that point instead", other, lb[i].second.what);
      }
      mismatch[a] = f;
    }
  }
  for (size_t c = 0; c < logs.size(); ++c) {
    const size_t r = log_representative[c];
    if (r != c && mismatch[r].kind != VerdictKind::Ok) {
      mismatch[c] = mismatch[r];
      const std::string old_subject = "rank " + std::to_string(mismatch[r].rank) + " blocks";
      mismatch[c].rank = classes[c].front();
      const size_t at = mismatch[c].error_text.find(old_subject);
      if (at != std::string::npos) {
        mismatch[c].error_text.replace(at, old_subject.size(), "rank " + std::to_string(mismatch[c].rank) + " blocks");
      }
    }
  }
  return mismatch;
}

void merge_class_findings(const std::vector<std::vector<int>>& classes, std::vector<std::vector<Finding>> per_class,
                          const std::vector<Finding>& mismatches, std::vector<Finding>& out) {
  for (size_t c = 0; c < per_class.size(); ++c) {
    std::vector<Finding> findings = std::move(per_class[c]);
    if (c < mismatches.size() && mismatches[c].kind != VerdictKind::Ok) {
      // The hang comes first: drop what this rank would only reach after it.
      const Finding& m = mismatches[c];
      const StepKey hang{m.iteration, m.micro_step};
      findings.erase(std::remove_if(findings.begin(), findings.end(),
                                    [&](const Finding& f) { return !(StepKey{f.iteration, f.micro_step} < hang); }),
                     findings.end());
      findings.push_back(m);
    }
    for (Finding& f : findings) {
      f.ranks = classes[c];
      out.push_back(std::move(f));
    }
  }
}

void sort_findings(std::vector<Finding>& findings) {
  std::stable_sort(findings.begin(), findings.end(), [](const Finding& a, const Finding& b) {
    if (a.rank != b.rank) return a.rank < b.rank;
    if (a.iteration != b.iteration) return a.iteration < b.iteration;
    return a.micro_step < b.micro_step;
  });
}

bool gradient_sync_modelled(const Engine& engine) {
  if (!engine.other_parallelism.empty()) return false;
  switch (engine.kind) {
    case EngineKind::Ddp: return true;
    case EngineKind::DeepSpeed: return zero_stage_modelled(engine);
    case EngineKind::Fsdp2: return true;
    case EngineKind::Fsdp1: return fsdp1_not_modelled_reason(engine.fsdp).empty();
  }
  return false;
}

SyncSimulation simulate_gradient_sync(const Plan& plan, const ModelStructure& structure,
                                      const SyncSimulationOptions& options) {
  switch (plan.engine.kind) {
    case EngineKind::Ddp: {
      // torch.compile with the Python reducer or compiled autograd: other rules (docs/ddp-compile.md).
      SyncSimulation simulation = ddp_compile_rules_apply(plan) ? simulate_ddp_compiled(plan, structure, options)
                                                                : simulate_ddp(plan, structure, options);
      // Pure expert parallelism: the Reducer above never saw the expert shards
      // (model_structure.cc); what the plugin's own hook does to them is added here.
      // Only where the run gets that far: an error of the Reducer's at or before the finding's
      // step ends the run first (silent findings do not).
      for (Finding& f : expert_parallel_findings(plan, structure)) {
        const bool stopped_before = std::any_of(simulation.findings.begin(), simulation.findings.end(), [&](const Finding& e) {
          const bool fatal = e.kind != VerdictKind::SilentDivergence && e.kind != VerdictKind::WrongGradient && e.kind != VerdictKind::NoGradient;
          return fatal && (e.iteration < f.iteration || (e.iteration == f.iteration && e.micro_step <= f.micro_step));
        });
        if (!stopped_before) simulation.findings.push_back(std::move(f));
      }
      sort_findings(simulation.findings);
      return simulation;
    }
    case EngineKind::DeepSpeed:
      if (zero_stage_modelled(plan.engine)) return simulate_zero(plan, structure, options);
      break;
    case EngineKind::Fsdp2: return simulate_fsdp2(plan, structure, options);
    case EngineKind::Fsdp1: return simulate_fsdp1(plan, structure, options);
  }
  throw std::logic_error("simulate_gradient_sync: " + plan.engine.name() + " is not modelled (check gradient_sync_modelled first)");
}

}  // namespace hookstream
