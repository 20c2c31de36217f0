#include "sim/sync/ddp/ddp_simulation.h"

#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <memory>
#include <set>

#include "sim/engine/forward_graph.h"
#include "sim/sync/rank_run.h"

namespace hookstream {

std::vector<ReducerParameter> reducer_parameters(const ModelStructure& structure) {
  std::vector<ReducerParameter> out;
  out.reserve(structure.ddp_parameters.size());
  for (int index : structure.ddp_parameters) {
    const Parameter& p = structure.parameters[static_cast<size_t>(index)];
    // Gradients (and so bucket bytes) have the parameter's dtype; quantized weights never train.
    out.push_back(ReducerParameter{p.name, p.numel() * dtype_bytes(p.dtype), static_cast<int>(p.dtype)});
  }
  return out;
}

ReducerOptions reducer_options(const Plan& plan) {
  ReducerOptions options;
  if (plan.ddp_bucket_cap_mb) {
    options.bucket_bytes_cap = static_cast<int64_t>(*plan.ddp_bucket_cap_mb * 1024 * 1024);
  }
  options.find_unused_parameters = plan.find_unused_parameters();
  options.static_graph = plan.static_graph;
  options.gradient_as_bucket_view = plan.gradient_as_bucket_view;
  options.version = plan.torch_version;
  // distributed.py 2.x: the 1 MiB first bucket (dist._DEFAULT_FIRST_BUCKET_BYTES) only when
  // bucket_cap_mb is left at its default (bucket_bytes_cap_default); 1.13 always uses it.
  if (plan.ddp_bucket_cap_mb && plan.torch_version.first_bucket_only_by_default()) {
    options.first_bucket_bytes_cap = options.bucket_bytes_cap;
  }
  return options;
}

namespace {

// Where each parameter's gradient stood when the Reducer read it. Mirrors what reducer.cpp does
// with .grad: mark_variable_ready copies the gradient into the bucket; finalize_backward copies the
// reduced bucket back over .grad; AccumulateGrad adds into .grad at any time.
struct GradientLedger {
  struct Entry {
    int before_mark = 0;      // contributions in .grad when it was copied into the bucket
    int lost = 0;             // arrived between the copy and finalize: overwritten by finalize
    int after_finalize = 0;   // arrived after finalize: stay local to this rank
    bool marked = false;
    std::vector<int> tasks;  // graph tasks (ids of this iteration) whose hooks fired for it
  };
  std::vector<Entry> entries;  // by parameter index
  bool finalized = false;

  explicit GradientLedger(size_t n) : entries(n) {}
  void reset() {
    for (auto& e : entries) e = Entry{};
    finalized = false;
  }
  void contribute(int parameter) {
    Entry& e = entries[static_cast<size_t>(parameter)];
    if (finalized) {
      ++e.after_finalize;
    } else if (e.marked) {
      ++e.lost;
    } else {
      ++e.before_mark;
    }
  }
  int total(int parameter) const {
    const Entry& e = entries[static_cast<size_t>(parameter)];
    return e.before_mark + e.lost + e.after_finalize;
  }
};

// What DDP leaves behind on one rank beyond its findings, for the decisions taken across ranks.
struct RankOutcome {
  bool stopped = false;  // raised an error: issues nothing after it
  std::map<StepKey, BucketAssignment> rebuilds;
  std::optional<BucketAssignment> rebuilt;
  // Per iteration: parameters (DDP index) that received no gradient contribution at all.
  std::map<int, std::vector<int>> no_contribution;
  // Per iteration: parameters (DDP index) whose values fed the loss in some micro-step (forward
  // data flow; a parameter computed but feeding nothing is unused, as DDP sees it).
  std::map<int, std::vector<bool>> fed_loss;
  // Per iteration (find_unused_parameters, non-static): parameters this rank marked locally used
  // (local_used_map_ at finalize), and those it holds a gradient for without marking them used.
  std::map<int, std::vector<bool>> locally_used;
  std::map<int, std::vector<int>> unmarked_with_gradient;
};

// DDP on one rank as a SyncModel: DistributedDataParallel.forward (prepare_for_forward,
// rebuild_buckets, prepare_for_backward, _DDPSink) around each micro-step, the Reducer's hook on
// every parameter's AccumulateGrad node, and the gradient ledger that tells a reduced gradient
// from one that arrived too late.
class DdpModel : public SyncModel {
 public:
  DdpModel(const Plan& plan, const ModelStructure& structure, int rank,
           const std::map<StepKey, BucketAssignment>* broadcast)
      : plan_(plan),
        structure_(structure),
        rank_(rank),
        broadcast_(broadcast),
        options_(reducer_options(plan)),
        reducer_(reducer_parameters(structure), options_),
        ledger_(structure.parameters.size()) {
    ReducerModel::Observer observer;
    observer.on_mark = [this](int ddp_index) {
      ledger_.entries[static_cast<size_t>(structure_.ddp_parameters[static_cast<size_t>(ddp_index)])].marked = true;
    };
    observer.on_finalize = [this] { ledger_.finalized = true; };
    reducer_.set_observer(observer);
    // Engine::queue_callback: bound to the innermost running graph task (finalize_backward).
    reducer_.set_queue_callback([this](std::function<void()> callback) {
      engine_->queue_callback([this, callback = std::move(callback)] { reducer_call(callback); });
    });
  }

  std::string name() const override { return "DDP"; }
  RankOutcome& outcome() { return outcome_; }
  bool expects_hooks() const override { return reducer_.expect_autograd_hooks(); }

  void begin_iteration(AutogradEngine& engine, int iteration) override {
    (void)iteration;
    engine_ = &engine;
    ledger_.reset();
    fed_loss_.assign(structure_.ddp_parameters.size(), false);
  }

  void begin_step(AutogradEngine& engine, const StepPosition& position) override {
    engine_ = &engine;
    step_ = position.step;
    synced_ = position.synced;  // no_sync() for the other micro-steps
    reducer_.clear_collectives();
    fired_tasks_.clear();
    reducer_call([&] {
      // distributed.py forward: prepare_for_forward under sync; rebuild_buckets at every
      // grad-enabled forward (it is where the prior-iteration check lives).
      if (synced_) reducer_.prepare_for_forward();
      std::optional<BucketAssignment> broadcast;
      if (broadcast_) {
        auto found = broadcast_->find(step_);
        if (found != broadcast_->end()) broadcast = found->second;
      }
      if (auto rebuilt = reducer_.rebuild_buckets(broadcast)) {
        outcome_.rebuilds[step_] = *rebuilt;
        outcome_.rebuilt = *rebuilt;
      }
    });
  }

  SimTensor before_backward(AutogradEngine& engine, const StepPosition& position, SimTensor output) override {
    (void)position;
    SimTensor loss_input = output;
    {
      const std::vector<bool> fed = engine.dataflow_parameters({output});
      for (size_t i = 0; i < structure_.ddp_parameters.size(); ++i) {
        if (fed[static_cast<size_t>(structure_.ddp_parameters[i])]) fed_loss_[i] = true;
      }
    }
    const bool dynamic_find_unused = options_.find_unused_parameters && !options_.static_graph;
    if (synced_) {
      std::vector<bool> reachable;
      if (dynamic_find_unused) {
        std::vector<bool> by_parameter = engine.reachable_parameters({output}, structure_.parameters.size());
        reachable.resize(structure_.ddp_parameters.size());
        for (size_t i = 0; i < structure_.ddp_parameters.size(); ++i) {
          reachable[i] = by_parameter[static_cast<size_t>(structure_.ddp_parameters[i])];
        }
      }
      reducer_call([&] { reducer_.prepare_for_backward(dynamic_find_unused ? &reachable : nullptr); });
    }
    // _DDPSink wraps the outputs of every grad-enabled forward, no_sync() included (distributed.py
    // tests only these two conditions), when find_unused (non-static) or, under static graph,
    // while num_iterations == 1 (1.13, 2.0) / until delay_all_reduce was queued (2.1+,
    // TorchVersion::static_graph_delay_flag); then its backward queues delay_all_reduce on the
    // outer graph task.
    const bool static_sink = options_.static_graph && (plan_.torch_version.static_graph_delay_flag()
                                                           ? !static_delay_enqueued_
                                                           : reducer_.num_iterations() == 1);
    if (dynamic_find_unused || static_sink) {
      const bool delay = static_sink;
      loss_input = engine.function("_DDPSink", {loss_input}, [this, delay](AutogradEngine& e) {
        if (delay && !(plan_.torch_version.static_graph_delay_flag() && static_delay_enqueued_)) {
          e.queue_callback([this] { reducer_call([this] { reducer_.delay_all_reduce(); }); });
          static_delay_enqueued_ = true;
        }
        return std::vector<bool>{true};
      });
    }
    return loss_input;
  }

  void on_accumulate(AutogradEngine& engine, const AccumulateEvent& event, bool grad_defined_after) override {
    (void)engine;
    if (event.gradient_defined) ledger_.contribute(event.parameter);
    const Parameter& p = structure_.parameters[static_cast<size_t>(event.parameter)];
    std::vector<int>& tasks = ledger_.entries[static_cast<size_t>(event.parameter)].tasks;
    if (tasks.empty() || tasks.back() != event.task) tasks.push_back(event.task);
    // A parameter outside DDP's list (expert-parallel shards: _ddp_params_and_buffers_to_ignore)
    // has no Reducer hook: DDP never registered one on it.
    if (p.ddp_index < 0) return;
    fired_tasks_[p.ddp_index].push_back(event.task);
    // DDP's hook is a post hook on the AccumulateGrad node: it runs after the accumulation, so
    // .grad is defined if any contribution of this iteration arrived (zero_grad(set_to_none)
    // between optimizer steps).
    reducer_call([&] { reducer_.autograd_hook(p.ddp_index, grad_defined_after); });
  }

  void on_manual_accumulate(int parameter) override { ledger_.contribute(parameter); }

  std::vector<Collective> take_collectives() override {
    std::vector<Collective> out = reducer_.collectives();
    reducer_.clear_collectives();
    return out;
  }

  void end_iteration(int iteration, std::vector<Finding>& findings) override { evaluate_iteration(iteration, findings); }

  void end_run(std::vector<Finding>& findings) override {
    (void)findings;
    // The next synced forward's rebuild_buckets() would raise it.
    if (reducer_.require_finalize()) throw unfinished_error(plan_.iterations);
  }

 private:
  // Runs Reducer code, turning its errors into the SyncError the driver reports.
  template <typename F>
  void reducer_call(F&& body) {
    try {
      body();
    } catch (const ReducerError& error) {
      throw to_sync_error(error);
    }
  }

  int parameter_of(int ddp_index) const {
    return ddp_index < 0 ? -1 : structure_.ddp_parameters[static_cast<size_t>(ddp_index)];
  }

  // Raised by the forward of iteration `raised_at_iteration` (plan.iterations: the one after the run).
  SyncError unfinished_error(int raised_at_iteration) const {
    const std::vector<int> unmarked = reducer_.unmarked_parameters();
    SyncError error(VerdictKind::UnfinishedReduction, unmarked.empty() ? -1 : parameter_of(unmarked.front()),
                    prior_reduction_error_text(rank_, unmarked, plan_.static_graph),
                    fmt::format("{} parameter(s) never had their hook fire (or not as often as expected) in iteration {}, "
                                "so their bucket never completed and finalize_backward never ran; the next forward "
                                "raises, and the other ranks wait in the collective until the timeout.",
                                unmarked.size(), raised_at_iteration - 1));
    error.with_phase(Phase::Forward).with_graph_tasks({"none: no hook fired for this parameter"});
    return error;
  }

  SyncError to_sync_error(const ReducerError& error) const {
    if (error.kind() == VerdictKind::UnfinishedReduction) return unfinished_error(step_.iteration);
    std::vector<std::string> tasks;
    auto fired = fired_tasks_.find(error.ddp_index());
    if (fired != fired_tasks_.end()) tasks = task_texts(fired->second);
    std::string explanation;
    if (error.kind() == VerdictKind::MarkedReadyTwice) {
      const bool unused_first = std::find(reducer_.unused_parameters().begin(), reducer_.unused_parameters().end(),
                                          error.ddp_index()) != reducer_.unused_parameters().end();
      if (unused_first && tasks.size() == 1) {
        tasks.insert(tasks.begin(), "find_unused_parameters: marked as unused at the first hook");
        explanation =
            "find_unused_parameters=True found no path from the outputs to this parameter (its reentrant "
            "checkpoint ran the layer under no_grad), so the Reducer marked it ready as unused at the first "
            "hook; then the nested backward fired its hook and marked it again.";
      } else {
        explanation = fmt::format(
            "its AccumulateGrad hook fired in {} graph tasks of one iteration; each firing marks the "
            "parameter ready and the Reducer allows one mark per iteration.",
            tasks.size());
      }
    } else if (error.kind() == VerdictKind::ReducerAssert) {
      tasks = {"outer backward (no_sync micro-step): _DDPSink's delay_all_reduce callback"};
      if (plan_.torch_version.static_graph_delay_flag()) {
        explanation = fmt::format(
            "static_graph with gradient accumulation: PyTorch {}'s DDP applies _DDPSink until delay_all_reduce was "
            "queued (a flag since 2.1, PR #103487), also inside no_sync(), so the first no_sync micro-step queues "
            "delay_all_reduce for a backward the Reducer was not prepared for and finalize_backward asserts "
            "(observed with 2.11.0 at reducer.cpp:1705).",
            plan_.torch_version.text());
      } else {
        explanation = fmt::format(
            "static_graph with gradient accumulation: PyTorch {}'s DDP applies _DDPSink while num_iterations == 1, "
            "also inside no_sync(), so the next iteration's first micro-step queues delay_all_reduce again and "
            "finalize_backward asserts (observed with 1.13.1 at reducer.cpp:1490). 2.1+ asserts too, earlier: in "
            "the first micro-step of iteration 0.",
            plan_.torch_version.text());
      }
    } else if (error.kind() == VerdictKind::StaticGraphChanged) {
      explanation = "with static_graph=True the Reducer expects each parameter's hook to fire exactly as "
                    "often as in the first iteration; here it fired more often.";
    }
    SyncError out(error.kind(), parameter_of(error.ddp_index()), error.what(), explanation);
    // Every other Reducer error is raised in backward (a hook or finalize_backward).
    out.with_phase(Phase::Backward);
    out.with_graph_tasks(std::move(tasks));
    return out;
  }

  std::vector<std::string> task_texts(const std::vector<int>& task_ids) const {
    std::vector<std::string> out;
    for (int id : task_ids) {
      std::string text = task_text(engine_->task(id));
      if (std::find(out.begin(), out.end(), text) == out.end()) out.push_back(std::move(text));
    }
    return out;
  }

  Finding base_finding(VerdictKind kind, int ddp_index, const StepKey& at) const {
    Finding f;
    f.kind = kind;
    f.rank = rank_;
    f.iteration = at.iteration;
    f.micro_step = at.micro_step;
    f.ddp_index = ddp_index;
    if (ddp_index >= 0) {
      const Parameter& p = structure_.ddp_parameter(ddp_index);
      f.parameter = p.name;
      f.layer = p.layer;
    }
    return f;
  }

  void evaluate_iteration(int iteration, std::vector<Finding>& findings) {
    if (reducer_.require_finalize()) return;  // reported by the next forward
    std::vector<int> no_contribution;
    bool divergence_reported = false;
    for (size_t ddp = 0; ddp < structure_.ddp_parameters.size(); ++ddp) {
      const int parameter = structure_.ddp_parameters[ddp];
      const auto& e = ledger_.entries[static_cast<size_t>(parameter)];
      const int total = ledger_.total(parameter);
      if (total == 0) {
        no_contribution.push_back(static_cast<int>(ddp));
        continue;
      }
      const bool wrong = !e.marked || e.lost > 0 || (e.after_finalize > 0 && plan_.world_size > 1);
      if (!wrong || divergence_reported) continue;
      divergence_reported = true;
      Finding f = base_finding(VerdictKind::SilentDivergence, static_cast<int>(ddp),
                               StepKey{iteration, plan_.gradient_accumulation_steps - 1});
      f.phase = Phase::AfterBackward;
      f.graph_tasks = task_texts(e.tasks);
      if (!e.marked) {
        f.error_text = "no error: replicas diverge (this gradient is never all-reduced)";
        f.explanation = fmt::format("its {} gradient contribution(s) arrived while the Reducer expected no hooks.", total);
      } else {
        f.error_text = "no error: replicas diverge";
        f.explanation = fmt::format(
            "the Reducer copied this gradient into its bucket after {} of {} contributions; {} more arrived before "
            "finalize_backward overwrote .grad with the reduced bucket (lost) and {} after it (added locally, never "
            "all-reduced). finalize_backward ran when the last bucket completed, at the end of the graph task "
            "running then.",
            e.before_mark, total, e.lost, e.after_finalize);
      }
      findings.push_back(std::move(f));
    }
    outcome_.no_contribution[iteration] = std::move(no_contribution);
    outcome_.fed_loss[iteration] = fed_loss_;
    if (options_.find_unused_parameters && !plan_.static_graph) {
      // finalize_bucket_dense leaves .grad untouched for a parameter no rank marked used: if this
      // rank holds a gradient for it (accumulated where hooks were not expected, e.g. in no_sync
      // before 2.4), it stays local. Decided across ranks in simulate_ddp.
      const std::vector<bool>& used = reducer_.last_local_used();
      std::vector<int> unmarked;
      for (size_t ddp = 0; ddp < structure_.ddp_parameters.size(); ++ddp) {
        if (!used[ddp] && ledger_.total(structure_.ddp_parameters[ddp]) > 0) unmarked.push_back(static_cast<int>(ddp));
      }
      outcome_.locally_used[iteration] = used;
      outcome_.unmarked_with_gradient[iteration] = std::move(unmarked);
    }
  }

  const Plan& plan_;
  const ModelStructure& structure_;
  int rank_;
  const std::map<StepKey, BucketAssignment>* broadcast_;
  ReducerOptions options_;
  ReducerModel reducer_;
  GradientLedger ledger_;
  AutogradEngine* engine_ = nullptr;  // the driver's, for queue_callback and task labels
  StepKey step_;
  bool synced_ = true;
  std::map<int, std::vector<int>> fired_tasks_;  // this step: DDP index -> graph tasks that fired it
  std::vector<bool> fed_loss_;                   // this iteration, by DDP index
  bool static_delay_enqueued_ = false;           // DDP._static_graph_delay_allreduce_enqueued (2.1+)
  RankOutcome outcome_;
};

void replica_split_findings(const Plan& plan, const ModelStructure& structure, std::vector<Finding>& findings) {
  if (plan.device_map == DeviceMap::PerRank || plan.world_size < 2) return;
  Finding f;
  f.kind = VerdictKind::ReplicaSplit;
  f.rank = 0;
  for (int r = 0; r < plan.world_size; ++r) f.ranks.push_back(r);
  f.phase = Phase::Forward;
  const bool quantized = plan.load_in_4bit || plan.load_in_8bit;
  if (quantized) {
    // accelerate's Accelerator.prepare_model refuses quantized models placed on another device.
    f.error_text =
        "You can't train a model that has been loaded in 8-bit or 4-bit precision on a different device than "
        "the one you're training on. Make sure you loaded the model on the correct device using for example "
        "`device_map={'':torch.cuda.current_device()}`";
  } else {
    f.error_text =
        "DistributedDataParallel device_ids and output_device arguments only work with single-device/"
        "multiple-device GPU modules or CPU modules, but got device_ids [LOCAL_RANK], output_device LOCAL_RANK, "
        "and module parameters {device(type='cuda', index=0), device(type='cuda', index=1), ...}.";
  }
  f.explanation =
      "device_map spreads one replica over several GPUs, so layers (and their gradients) live on devices other "
      "than the rank's own; DDP expects one full replica per rank on one device.";
  f.graph_tasks = {"none: the run stops before the first backward"};
  if (!structure.ddp_parameters.empty()) {
    f.ddp_index = 0;
    f.parameter = structure.ddp_parameter(0).name;
    f.layer = structure.ddp_parameter(0).layer;
  }
  findings.push_back(std::move(f));
}

// find_unused_parameters: a parameter no rank marked used keeps its local .grad at finalize
// (reducer.cpp finalize_bucket_dense, `global_unused`). A rank holding a gradient for it then
// diverges silently: before 2.4 this is what a module used only inside no_sync() gets.
void globally_unused_findings(const Plan& plan, const ModelStructure& structure,
                              const std::vector<std::vector<int>>& rank_classes,
                              const std::vector<RankOutcome>& outcomes, std::vector<Finding>& findings) {
  if (plan.world_size < 2) return;
  for (size_t c = 0; c < outcomes.size(); ++c) {
    if (outcomes[c].stopped) continue;
    for (const auto& [iteration, unmarked] : outcomes[c].unmarked_with_gradient) {
      int parameter = -1;
      for (int ddp : unmarked) {
        bool used_somewhere = false;
        for (const auto& o : outcomes) {
          auto it = o.locally_used.find(iteration);
          used_somewhere = used_somewhere || (it != o.locally_used.end() && it->second[static_cast<size_t>(ddp)]);
        }
        if (!used_somewhere) {
          parameter = ddp;
          break;
        }
      }
      if (parameter < 0) continue;
      const Parameter& p = structure.ddp_parameter(parameter);
      Finding f;
      f.kind = VerdictKind::SilentDivergence;
      f.rank = rank_classes[c].front();
      f.ranks = rank_classes[c];
      f.iteration = iteration;
      f.micro_step = plan.gradient_accumulation_steps - 1;
      f.phase = Phase::AfterBackward;
      f.ddp_index = parameter;
      f.parameter = p.name;
      f.layer = p.layer;
      f.error_text = "no error: replicas diverge (this gradient is never all-reduced)";
      f.explanation = fmt::format(
          "find_unused_parameters: no rank marked this parameter used in the synced backward, so finalize_backward "
          "left its .grad untouched; this rank holds a gradient for it from a micro-step where hooks were not expected "
          "(no_sync). PyTorch {} {} it{}.",
          plan.torch_version.text(),
          plan.torch_version.no_sync_marks_locally_used() ? "counts hooks inside no_sync as use, but not" : "ignores",
          plan.torch_version.no_sync_marks_locally_used() ? "" : " (2.4+ counts use inside no_sync, PR #124193)");
      f.graph_tasks = {"no_sync micro-step: hooks not expected"};
      findings.push_back(std::move(f));
      break;  // the first iteration that diverges
    }
  }
}

}  // namespace

SyncSimulation simulate_ddp(const Plan& plan, const ModelStructure& structure, const SyncSimulationOptions& options) {
  SyncSimulation result;
  {
    ReducerModel initial(reducer_parameters(structure), reducer_options(plan));
    result.initial_buckets = initial.buckets();
  }
  replica_split_findings(plan, structure, result.findings);
  if (!result.findings.empty()) return result;
  if (structure.ddp_parameters.empty()) return result;

  // Ranks whose plan is identical behave identically: simulate one per class.
  result.rank_classes = rank_classes(plan, options.deduplicate_ranks);
  std::vector<std::unique_ptr<DdpModel>> models;
  std::vector<RankRun> runs;
  for (size_t c = 0; c < result.rank_classes.size(); ++c) {
    const int rank = result.rank_classes[c].front();
    // Rank 0's rebuilt bucket order is broadcast to the others (sync_bucket_indices).
    const std::map<StepKey, BucketAssignment>* broadcast = c == 0 ? nullptr : &models.front()->outcome().rebuilds;
    models.push_back(std::make_unique<DdpModel>(plan, structure, rank, broadcast));
    runs.push_back(run_rank(plan, structure, rank, *models.back(), options.record_steps));
  }
  std::vector<RankOutcome> outcomes;
  for (size_t c = 0; c < models.size(); ++c) {
    outcomes.push_back(std::move(models[c]->outcome()));
    outcomes.back().stopped = runs[c].log.stopped;
  }
  result.rebuilt_buckets = outcomes.front().rebuilt;

  // Collectives must match across ranks; a rank that stopped leaves the others waiting.
  {
    std::vector<CollectiveLog> logs;
    std::vector<std::vector<Finding>> per_class;
    for (RankRun& run : runs) {
      logs.push_back(run.log);
      per_class.push_back(std::move(run.findings));
    }
    merge_class_findings(result.rank_classes, std::move(per_class),
                         collective_mismatch_findings(result.rank_classes, logs), result.findings);
  }

  // no_gradient: trainable parameters no rank produced a gradient for, in an iteration without
  // errors. One finding (the first parameter, in DDP order) names how many share the cause.
  for (const auto& [iteration, params] : outcomes.front().no_contribution) {
    std::vector<int> missing;
    for (int ddp : params) {
      bool everywhere = true;
      for (const auto& o : outcomes) {
        auto it = o.no_contribution.find(iteration);
        everywhere = everywhere && it != o.no_contribution.end() &&
                     std::find(it->second.begin(), it->second.end(), ddp) != it->second.end();
      }
      // A parameter whose value fed the loss on no rank (a skipped module, or a norm whose output
      // feeds nothing once its MLP is skipped) is unused as DDP sees it, not missing a gradient.
      bool fed_somewhere = false;
      for (const auto& o : outcomes) {
        auto it = o.fed_loss.find(iteration);
        fed_somewhere = fed_somewhere || (it != o.fed_loss.end() && it->second[static_cast<size_t>(ddp)]);
      }
      if (everywhere && fed_somewhere) missing.push_back(ddp);
    }
    if (missing.empty()) continue;
    const Parameter& p = structure.ddp_parameter(missing.front());
    Finding f;
    f.kind = VerdictKind::NoGradient;
    f.rank = 0;
    for (int r = 0; r < plan.world_size; ++r) f.ranks.push_back(r);
    f.iteration = iteration;
    f.phase = Phase::AfterBackward;
    f.ddp_index = missing.front();
    f.parameter = p.name;
    f.layer = p.layer;
    f.error_text = "no error: the parameter's .grad stays None";
    f.explanation = fmt::format(
        "no graph task produced a gradient for this trainable parameter on any rank ({} trainable parameter(s) "
        "in all); e.g. a reentrant checkpoint whose inputs do not require grad has no backward.",
        missing.size());
    f.graph_tasks = {"none"};
    result.findings.push_back(std::move(f));
    break;
  }

  globally_unused_findings(plan, structure, result.rank_classes, outcomes, result.findings);
  for (const auto& o : outcomes) {
    for (const auto& [iteration, fed] : o.fed_loss) {
      std::vector<bool>& merged = result.fed_loss[iteration];
      if (merged.empty()) merged.assign(fed.size(), false);
      for (size_t i = 0; i < fed.size(); ++i) merged[i] = merged[i] || fed[i];
    }
  }

  sort_findings(result.findings);
  if (options.record_steps) {
    for (RankRun& run : runs) {
      for (StepTrace& step : run.steps) result.steps.push_back(std::move(step));
    }
  }
  return result;
}

const BucketAssignment& steady_state_buckets(const SyncSimulation& simulation) {
  return simulation.rebuilt_buckets ? *simulation.rebuilt_buckets : simulation.initial_buckets;
}

BucketAssignment steady_state_buckets(const Plan& plan, const ModelStructure& structure, const SyncSimulation* simulated) {
  if (plan.iterations >= 2) return steady_state_buckets(simulated ? *simulated : simulate_ddp(plan, structure));
  Plan two = plan;
  two.iterations = 2;
  return steady_state_buckets(simulate_ddp(two, structure));
}

}  // namespace hookstream
