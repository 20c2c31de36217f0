#include "sim/sync/rank_run.h"

#include <algorithm>
#include <fmt/format.h>
#include <map>

#include "sim/engine/autograd_engine.h"
#include "sim/engine/forward_graph.h"

namespace hookstream {

std::string task_text(const GraphTaskInfo& task) {
  return task.depth == 0 ? task.label : fmt::format("{} (nested, depth {})", task.label, task.depth);
}

namespace {

class RankDriver {
 public:
  RankDriver(const Plan& plan, const ModelStructure& structure, int rank, SyncModel& model, bool record)
      : plan_(plan),
        structure_(structure),
        rank_(rank),
        model_(model),
        record_(record),
        engine_(structure.parameters.size()),
        contributions_(structure.parameters.size(), 0) {}

  RankRun run() {
    engine_.set_hook_listener([this](const AccumulateEvent& event) { on_accumulate(event); });
    bool stopped = false;
    for (int it = 0; it < plan_.iterations && !stopped; ++it) {
      std::fill(contributions_.begin(), contributions_.end(), 0);  // zero_grad(set_to_none=True)
      engine_.clear_tasks();
      stopped = !guarded([&] { model_.begin_iteration(engine_, it); }, StepKey{it, 0});
      for (int micro = 0; micro < plan_.gradient_accumulation_steps && !stopped; ++micro) {
        stopped = !run_step(it, micro);
      }
      if (!stopped) model_.end_iteration(it, out_.findings);
    }
    if (!stopped) stopped = !guarded([&] { model_.end_run(out_.findings); }, StepKey{plan_.iterations, 0});
    model_.take_silent_findings(out_.findings);
    model_.take_warnings(out_.warnings);
    out_.log.stopped = stopped;
    return std::move(out_);
  }

 private:
  template <typename F>
  bool guarded(F&& body, const StepKey& at) {
    try {
      body();
      return true;
    } catch (const SyncError& error) {
      raise(error, at);
      in_backward_ = false;
      return false;
    } catch (const NoGraph&) {
      raise_no_graph(at);
      return false;
    }
  }

  bool run_step(int iteration, int micro) {
    const StepKey step{iteration, micro};
    position_ = StepPosition{rank_, step, micro == plan_.gradient_accumulation_steps - 1};
    engine_.clear_graph();
    fired_tasks_.clear();
    current_ = StepTrace{};
    current_.rank = rank_;
    current_.iteration = iteration;
    current_.micro_step = micro;
    current_.synced = position_.synced;
    const bool ok = guarded(
        [&] {
          model_.begin_step(engine_, position_);
          ForwardContext context;
          context.plan = &plan_;
          context.structure = &structure_;
          context.rank = rank_;
          context.iteration = iteration;
          context.micro_step = micro;
          context.hooks = &model_;
          context.on_manual_accumulate = [this](int parameter) {
            ++contributions_[static_cast<size_t>(parameter)];
            model_.on_manual_accumulate(parameter);
          };
          ForwardOutputs outputs = record_forward(engine_, context);
          SimTensor loss_input = model_.before_backward(engine_, position_, outputs.logits);
          SimTensor loss = engine_.op("loss", {loss_input});
          if (!loss.requires_grad()) throw NoGraph{};
          in_backward_ = true;
          engine_.backward({loss}, "outer backward");
          in_backward_ = false;
          model_.end_step(engine_, position_);
        },
        step);
    for (Collective& c : model_.take_collectives()) {
      if (record_) current_.collectives.push_back(c);
      out_.log.collectives.emplace_back(step, std::move(c));
    }
    if (record_) {
      current_.tasks = engine_.tasks();
      out_.steps.push_back(std::move(current_));
    }
    return ok;
  }

  void on_accumulate(const AccumulateEvent& event) {
    if (event.parameter < 0) return;  // a non-parameter leaf (checkpoint input, x_shard)
    if (event.gradient_defined) ++contributions_[static_cast<size_t>(event.parameter)];
    const Parameter& p = structure_.parameters[static_cast<size_t>(event.parameter)];
    if (p.ddp_index < 0) return;  // not trainable: no hook is registered on it
    std::vector<int>& tasks = fired_tasks_[event.parameter];
    if (tasks.empty() || tasks.back() != event.task) tasks.push_back(event.task);
    const bool defined_after = contributions_[static_cast<size_t>(event.parameter)] > 0;
    if (record_) {
      const GraphTaskInfo& task = engine_.task(event.task);
      HookFiring firing;
      firing.micro_step = position_.step.micro_step;
      firing.ddp_index = p.ddp_index;
      firing.parameter = event.parameter;
      firing.task = event.task;
      firing.depth = task.depth;
      firing.graph_task = task.label;
      firing.grad_defined = event.gradient_defined;
      firing.expected = model_.expects_hooks();
      current_.firings.push_back(std::move(firing));
    }
    model_.on_accumulate(engine_, event, defined_after);
  }

  void raise(const SyncError& error, const StepKey& at) {
    Finding f;
    f.kind = error.kind();
    f.rank = rank_;
    f.iteration = at.iteration;
    f.micro_step = at.micro_step;
    f.phase = error.has_phase() ? error.phase() : in_backward_ ? Phase::Backward : Phase::Forward;
    if (error.parameter() >= 0) {
      const Parameter& p = structure_.parameters[static_cast<size_t>(error.parameter())];
      f.ddp_index = p.ddp_index;
      f.parameter = p.name;
      f.layer = p.layer;
      auto fired = fired_tasks_.find(error.parameter());
      if (fired != fired_tasks_.end()) {
        for (int id : fired->second) {
          std::string text = task_text(engine_.task(id));
          if (std::find(f.graph_tasks.begin(), f.graph_tasks.end(), text) == f.graph_tasks.end()) {
            f.graph_tasks.push_back(std::move(text));
          }
        }
      }
    } else if (!error.module().empty()) {
      f.parameter = error.module();
    }
    if (!error.graph_tasks().empty()) f.graph_tasks = error.graph_tasks();
    if (f.graph_tasks.empty() && engine_.current_task() >= 0) f.graph_tasks.push_back(task_text(engine_.task(engine_.current_task())));
    if (f.graph_tasks.empty() && engine_.failed_task() >= 0) f.graph_tasks.push_back(task_text(engine_.task(engine_.failed_task())));
    if (f.graph_tasks.empty()) f.graph_tasks.push_back("none: the error is raised outside backward");
    f.error_text = error.what();
    f.explanation = error.explanation();
    out_.findings.push_back(std::move(f));
    out_.stopped_at = at;
  }

  // loss.backward() itself raises (every engine alike): no parameter in particular, all of them.
  void raise_no_graph(const StepKey& at) {
    Finding f;
    f.kind = VerdictKind::NoGradient;
    f.rank = rank_;
    f.iteration = at.iteration;
    f.micro_step = at.micro_step;
    f.phase = Phase::Backward;
    f.error_text = "element 0 of tensors does not require grad and does not have a grad_fn";
    f.explanation = fmt::format(
        "none of the {} trainable parameters is connected to the loss: a reentrant checkpoint whose inputs "
        "do not require grad (frozen embeddings without enable_input_require_grads) records no backward.",
        structure_.ddp_parameters.size());
    f.graph_tasks = {"none: loss.backward() raises before any graph task runs"};
    out_.findings.push_back(std::move(f));
    out_.stopped_at = at;
  }

  struct NoGraph {};

  const Plan& plan_;
  const ModelStructure& structure_;
  int rank_;
  SyncModel& model_;
  bool record_;
  AutogradEngine engine_;
  std::vector<int> contributions_;  // this iteration, per parameter: gradient contributions so far
  std::map<int, std::vector<int>> fired_tasks_;  // this step: parameter -> graph tasks that ran its accumulator
  StepPosition position_;
  bool in_backward_ = false;
  StepTrace current_;
  RankRun out_;
};

}  // namespace

RankRun run_rank(const Plan& plan, const ModelStructure& structure, int rank, SyncModel& model, bool record) {
  return RankDriver(plan, structure, rank, model, record).run();
}

SyncSimulation simulate_with_model(const Plan& plan, const ModelStructure& structure, const SyncModelFactory& make,
                                   const SyncSimulationOptions& options, const CollectivePairing& pairing) {
  SyncSimulation result;
  result.rank_classes = rank_classes(plan, options.deduplicate_ranks);
  std::vector<RankRun> runs;
  runs.reserve(result.rank_classes.size());
  for (const std::vector<int>& ranks : result.rank_classes) {
    std::unique_ptr<SyncModel> model = make(ranks.front());
    result.engine = model->name();
    runs.push_back(run_rank(plan, structure, ranks.front(), *model, options.record_steps));
  }
  std::vector<CollectiveLog> logs;
  std::vector<std::vector<Finding>> per_class;
  for (RankRun& run : runs) {
    logs.push_back(run.log);
    per_class.push_back(std::move(run.findings));
    for (Finding& w : run.warnings) result.warnings.push_back(std::move(w));
  }
  const std::vector<Finding> mismatches = pairing ? pairing(result.rank_classes, logs, per_class)
                                                 : collective_mismatch_findings(result.rank_classes, logs);
  merge_class_findings(result.rank_classes, std::move(per_class), mismatches, result.findings);
  sort_findings(result.findings);
  sort_findings(result.warnings);
  if (options.record_steps) {
    for (RankRun& run : runs) {
      for (StepTrace& s : run.steps) result.steps.push_back(std::move(s));
    }
  }
  return result;
}

}  // namespace hookstream
