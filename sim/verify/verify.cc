#include "sim/verify/verify.h"

#include "sim/sync/ddp_python_reducer/python_reducer.h"

#include <algorithm>
#include <fmt/format.h>
#include <fstream>
#include <set>
#include <sstream>

#include "sim/cost/device_spec.h"
#include "sim/inputs/input_error.h"
#include "sim/cost/step_prediction.h"
#include "sim/sync/fsdp2/fsdp2_fixes.h"

namespace hookstream {

PlanSource read_plan_source(const std::string& path, const LoadOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "cannot read the plan file (missing or unreadable)");
  std::ostringstream text;
  text << in.rdbuf();
  return PlanSource{text.str(), path, options};
}

namespace {

void add(std::vector<VerifiedFix>& out, std::vector<FixChange> changes, std::string rationale) {
  out.push_back(VerifiedFix{std::move(changes), std::move(rationale), std::nullopt});
}

bool shard_count_varies(const Plan& plan) {
  if (!plan.tiled_mlp) return false;
  std::set<int> counts;
  for (int r = 0; r < plan.world_size; ++r) {
    for (int it = 0; it < plan.iterations; ++it) counts.insert(plan.tiled_shards_for(r, it));
  }
  return counts.size() > 1;
}

int smallest_sequence(const Plan& plan) {
  int smallest = plan.sequence_len;
  for (int r = 0; r < plan.world_size; ++r) {
    for (int it = 0; it < plan.iterations; ++it) smallest = std::min(smallest, plan.sequence_len_for(r, it));
  }
  return smallest;
}

std::string describe(const Finding& f) {
  std::string where = f.parameter.empty() ? "" : " at " + f.parameter;
  return fmt::format("{}{} (rank {}, iteration {})", to_string(f.kind), where, f.rank, f.iteration);
}

// What users change when an expert without tokens breaks the step: DDP's unused-parameter search
// (local_used_map all-reduced, the idle expert marked ready: reducer.cpp), or transformers 5, whose
// fused [E, ...] expert tensors are used every step (on remote code, also trust_remote_code: false
// so transformers' own class is built).
std::vector<VerifiedFix> routing_fixes(const Plan& plan) {
  std::vector<VerifiedFix> out;
  if (plan.engine.kind == EngineKind::Ddp && !plan.find_unused_parameters()) {
    add(out, {{"ddp_find_unused_parameters", "true"}},
          "DDP searches the graph for unused parameters every step and marks an idle expert's parameters ready, "
          "so their bucket completes on every rank (costs one graph traversal per step)");
  }
  const Plan defaults;
  // Quoted: an unquoted 5.10 would be the YAML number 5.1.
  std::vector<FixChange> upgrade{{"hookstream.transformers_version", "\"" + defaults.transformers_version + "\""}};
  std::string why = "upgrade to transformers " + defaults.transformers_version +
                    " (pip install 'transformers>=5'): its MoE experts are fused [E, ...] tensors, one parameter "
                    "used every step whichever experts get tokens";
  if (plan.trust_remote_code && !plan.model.remote_code_class.empty()) {
    upgrade.push_back({"trust_remote_code", "false"});
    why += "; trust_remote_code: false so transformers builds its own class instead of " + plan.model.remote_code_class;
  }
  if (plan.transformers_version != defaults.transformers_version || plan.trust_remote_code) add(out, upgrade, why);
  return out;
}

}  // namespace

std::optional<PlanCost> predict_cost(const Plan& plan, const ModelStructure& structure, const SyncSimulation* ddp) {
  try {
    const DeviceSpec device = find_device_spec(plan.gpu);
    const StepPrediction prediction = predict_step(plan, structure, device, nullptr, ddp);
    PlanCost cost{plan.gpu, prediction.schedule.step_ns * 1e-9, prediction.memory.device_peak.total(),
                  prediction.memory.host_peak.total(), {}, {}};
    const auto label = [](const MemoryPoint& point) { return point.phase + " " + point.at; };
    cost.peak_at = label(prediction.memory.device_peak);
    for (const MemoryPoint& point : prediction.memory.device_points) cost.device_points.emplace_back(label(point), point.total());
    return cost;
  } catch (const InputError&) {
    return std::nullopt;
  }
}

std::vector<VerifiedFix> candidate_fixes(const Plan& plan) {
  if (plan.engine.kind == EngineKind::Fsdp2) return fsdp2_candidate_fixes(plan);  // fsdp_config.* keys
  std::vector<VerifiedFix> out;
  const bool checkpointing = plan.gradient_checkpointing;
  if (plan.torch_compile.enabled && plan.torch_compile.compiled_autograd && !uses_python_reducer(plan)) {
    // PyTorch's own advice in the error (reducer.cpp, PR #152735), or leave compiled autograd off.
    add(out, {{"hookstream.optimize_ddp", "python_reducer"}}, "compiled autograd needs DDP's Python reducer");
    add(out, {{"hookstream.compiled_autograd", "false"}}, "the C++ Reducer's hooks run in eager autograd");
  }
  const bool ddp = plan.engine.kind == EngineKind::Ddp;  // DDP's own keys fix nothing under FSDP or ZeRO
  if (ddp && plan.device_map != DeviceMap::PerRank) {
    add(out, {{"device_map", "ddp"}}, "one full replica per rank, as DDP requires (axolotl: drop device_map under torchrun)");
  }
  if (checkpointing && plan.use_reentrant) {
    add(out, {{"gradient_checkpointing_kwargs.use_reentrant", "false"}},
        "non-reentrant checkpointing keeps the layer in the outer graph: each accumulator runs once, in the outer task");
  }
  if (plan.tiled_mlp && plan.tiled_mlp_backward == TiledBackward::BackwardPerChunk) {
    add(out, {{"hookstream.tiled_mlp_backward", "grad_then_backward"}},
        "autograd.grad for all chunks but the last fires no hook; one backward on the last chunk fires each hook once");
  }
  if (plan.engine.kind == EngineKind::DeepSpeed && plan.tiled_mlp && !plan.tiled_mlp_ds_grad_is_ready.value_or(true)) {
    add(out, {{"hookstream.tiled_mlp_ds_grad_is_ready", "true"}},
        "DeepSpeed's own TiledMLP (deepspeed.runtime.sequence_parallel.ulysses_sp.TiledMLP, what axolotl uses under "
        "ZeRO) sets ds_grad_is_ready=False for all shards but the last, so ZeRO buckets each weight once");
  }
  const bool zero3 = plan.engine.kind == EngineKind::DeepSpeed && plan.engine.deepspeed && plan.engine.deepspeed->zero_stage == 3;
  if (zero3 && !plan.z3_leaf_mlp &&
      (plan.tiled_mlp || !plan.unused_modules.empty() || !plan.rank_overrides.empty() || !plan.iteration_overrides.empty())) {
    // deepspeed/runtime/zero/stage3.py create_reduce_and_remove_grad_hooks: a leaf module's
    // parameters are reduced once, by its backward hook, zero-filled when unused.
    add(out, {{"hookstream.z3_leaf_mlp", "true"}},
        "deepspeed.utils.set_z3_leaf_modules(model, [<MLP/MoE block class>]) before deepspeed.initialize: ZeRO-3 "
        "reduces the block's parameters once, from its backward hook, zero-filling those a rank did not use");
  }
  if (plan.tiled_mlp && plan.tiled_mlp_weights_as_inputs && plan.tiled_mlp_backward != TiledBackward::FunctionReturnsGrads) {
    add(out, {{"hookstream.tiled_mlp_weights_as_inputs", "false"}},
        "weights passed as Function inputs get an extra (undefined-gradient) hook firing in the outer task");
  }
  if (plan.tiled_mlp && plan.tiled_mlp_backward != TiledBackward::FunctionReturnsGrads) {
    add(out, {{"hookstream.tiled_mlp_backward", "function_returns_grads"}, {"hookstream.tiled_mlp_weights_as_inputs", "true"}},
        "the Function returns the summed weight gradients: accumulators run once, in the outer task");
  }
  if (ddp && plan.find_unused_parameters()) {
    add(out, {{"ddp_find_unused_parameters", "false"}},
        "without the unused-parameter search, parameters behind a reentrant checkpoint are not pre-marked");
  }
  if (ddp && !plan.static_graph) {
    add(out, {{"hookstream.static_graph", "true"}},
        "static_graph counts hook firings in the first iteration and marks each parameter on its last firing");
  }
  if (shard_count_varies(plan)) {
    const int shards = std::min(plan.tiled_shards_for(0, 0), smallest_sequence(plan));
    add(out, {{"tiled_mlp_num_shards", std::to_string(shards)}},
        "a fixed shard count makes every rank and iteration fire each hook the same number of times");
  }
  if (!plan.input_require_grads() && checkpointing && plan.use_reentrant) {
    add(out, {{"hookstream.enable_input_require_grads", "true"}},
        "the embedding output requires grad, so the first reentrant checkpoint has a backward");
  }
  if (!plan.unused_modules.empty() || !plan.rank_overrides.empty() || !plan.iteration_overrides.empty()) {
    if (ddp && !plan.find_unused_parameters()) {
      add(out, {{"ddp_find_unused_parameters", "true"}},
          "parameters unused in an iteration are marked ready at the first hook instead of leaving their bucket pending");
    }
  }
  if (plan.engine.kind == EngineKind::DeepSpeed && plan.engine.deepspeed && plan.engine.deepspeed->zero_stage >= 2) {
    // ZeRO-1 without overlap_comm registers no bucketing hook work: stage_1_and_2.py
    // process_gradients buckets only for partition_gradients or overlap_comm, and ZeRO-1 reduces at
    // the boundary from each parameter's summed .grad (reduce_gradients), so gradients that reach a
    // weight in several AccumulateGrad calls are reduced once (observed with DeepSpeed 0.19.8,
    // docs/engines/deepspeed-zero.md). A change to the DeepSpeed JSON: written into the file the plan names.
    std::vector<FixChange> changes{{"deepspeed.zero_optimization.stage", "1"}};
    if (plan.engine.deepspeed->overlap_comm.value_or(false)) changes.push_back({"deepspeed.zero_optimization.overlap_comm", "false"});
    add(out, changes,
        "ZeRO-1 without overlap_comm reduces each parameter's summed .grad once at the accumulation boundary instead of "
        "bucketing every AccumulateGrad (gradients and parameters are then not partitioned: more memory per rank)");
  }
  if (plan.engine.kind == EngineKind::Fsdp1) {
    // FSDP2 reduces once per unit from RegisterPostBackwardFunction, not from the flat parameter's
    // AccumulateGrad, so nested backwards inside a unit do not reshard it (docs/engines/fsdp2.md).
    add(out, {{"fsdp_version", "2"}}, "FSDP2 reduces each unit once, when the outer backward reaches its input, not "
                                      "on every AccumulateGrad of a flat parameter");
  }
  return out;
}

void spell_as_written(std::vector<VerifiedFix>& fixes, const PlanSource& source) {
  for (VerifiedFix& fix : fixes) {
    for (FixChange& change : fix.changes) {
      const SettingLocation where = setting_as_written(source.yaml_text, change.key, source.options);
      change.key = where.key;
      change.file = where.file;
    }
  }
}

VerifyResult verify_plan(const PlanSource& source, const VerifyOptions& options) {
  VerifyResult result;
  result.plan = parse_plan(source.yaml_text, source.source, source.options);
  result.source_text = source.yaml_text;
  result.structure = build_model_structure(result.plan);
  SyncSimulationOptions sim_options;
  sim_options.record_steps = options.record_steps;
  sim_options.deduplicate_ranks = options.deduplicate_ranks;
  result.simulation = simulate_gradient_sync(result.plan, result.structure, sim_options);
  result.routing = check_moe_routing(result.plan, result.structure, sim_options);
  if (result.routing) merge_routing_findings(*result.routing, result.simulation);
  if (result.ok() || !options.search_fixes) return result;

  if (options.cost_fixes) result.cost = predict_cost(result.plan, result.structure, &result.simulation);
  auto try_changes = [&](const std::vector<FixChange>& changes, std::string* failure,
                         std::optional<PlanCost>* cost) {
    LoadOptions fixed = source.options;
    for (const auto& c : changes) fixed.set.push_back(c.key + "=" + c.value);
    Plan plan;
    try {
      plan = parse_plan(source.yaml_text, source.source, fixed);
    } catch (const InputError& e) {
      // The change conflicts with another key of this plan: not a usable fix.
      if (failure) *failure = std::string("invalid with this plan: ") + e.what();
      return false;
    }
    ModelStructure structure = build_model_structure(plan);
    SyncSimulation sim = simulate_gradient_sync(plan, structure);
    // A fix must also survive the adverse routing step (sim/verify/moe_routing_check.h).
    if (const auto routing = check_moe_routing(plan, structure)) merge_routing_findings(*routing, sim);
    if (!sim.ok()) {
      if (failure) *failure = describe(sim.findings.front());
      return false;
    }
    if (options.also_check) {
      const std::string other = options.also_check(plan, structure);
      if (!other.empty()) {
        if (failure) *failure = other;
        return false;
      }
    }
    if (cost && options.cost_fixes) *cost = predict_cost(plan, structure, &sim);
    return true;
  };

  std::vector<VerifiedFix> singles = candidate_fixes(result.plan);
  if (result.routing && !result.routing->ok()) {
    for (VerifiedFix& fix : routing_fixes(result.plan)) {
      const bool known = std::any_of(singles.begin(), singles.end(), [&](const VerifiedFix& s) {
        return s.changes.size() == fix.changes.size() &&
               std::equal(s.changes.begin(), s.changes.end(), fix.changes.begin(),
                          [](const FixChange& a, const FixChange& b) { return a.key == b.key && a.value == b.value; });
      });
      if (!known) singles.push_back(std::move(fix));
    }
  }
  spell_as_written(singles, source);
  for (const auto& fix : singles) {
    std::string failure;
    VerifiedFix verified = fix;
    if (try_changes(fix.changes, &failure, &verified.cost)) {
      result.fixes.push_back(std::move(verified));
    } else {
      result.rejected.push_back(RejectedFix{fix.changes, failure});
    }
  }
  if (result.fixes.empty()) {
    // No single change is enough: try pairs, the smallest combined change first.
    for (size_t i = 0; i < singles.size(); ++i) {
      for (size_t j = i + 1; j < singles.size(); ++j) {
        std::vector<FixChange> changes = singles[i].changes;
        changes.insert(changes.end(), singles[j].changes.begin(), singles[j].changes.end());
        VerifiedFix pair{changes, singles[i].rationale + "; and " + singles[j].rationale, std::nullopt};
        if (try_changes(changes, nullptr, &pair.cost)) result.fixes.push_back(std::move(pair));
      }
    }
  }
  return result;
}

}  // namespace hookstream
