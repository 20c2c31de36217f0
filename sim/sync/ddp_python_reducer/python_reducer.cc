#include "sim/sync/ddp_python_reducer/python_reducer.h"

#include <fmt/format.h>
#include <memory>
#include <vector>

#include "sim/sync/rank_run.h"

namespace hookstream {

const char* to_string(OptimizeDdp mode) {
  switch (mode) {
    case OptimizeDdp::DdpOptimizer: return "ddp_optimizer";
    case OptimizeDdp::PythonReducer: return "python_reducer";
    case OptimizeDdp::PythonReducerWithoutCompiledForward: return "python_reducer_without_compiled_forward";
    case OptimizeDdp::NoOptimization: return "no_optimization";
  }
  return "ddp_optimizer";
}

bool parse_optimize_ddp(const std::string& text, OptimizeDdp& mode) {
  for (OptimizeDdp m : {OptimizeDdp::DdpOptimizer, OptimizeDdp::PythonReducer,
                        OptimizeDdp::PythonReducerWithoutCompiledForward, OptimizeDdp::NoOptimization}) {
    if (text == to_string(m)) {
      mode = m;
      return true;
    }
  }
  return false;
}

namespace {

// The text torch 2.11 raises (torch/csrc/distributed/c10d/reducer.cpp, the compiled-args lambda
// of the Reducer's autograd hook, since PR #152735); observed by oracles/ddp_worker.py.
constexpr const char* kCppReducerUnderCompiledAutograd =
    "Compiled autograd is not compatible with C++ DDP Reducer, please use "
    "torch._dynamo.config.optimize_ddp=\"python_reducer\".";

// PR #152735 (merged 2025-05) made the C++ Reducer raise under compiled autograd; before, its
// hook's collective was a no-op ("C++ Reducer is silently incorrect under CA"). 2.8 is the first
// release cut after the merge (by date; only 2.11 is checked against a wheel here).
bool cpp_reducer_raises_under_compiled_autograd(const TorchVersion& v) { return v.at_least(2, 8); }

std::string numel_text(const Parameter& p) { return fmt::format("{} elements", p.numel()); }

// One rank of DDP with the Python reducer. DistributedDataParallel._register_accum_grad_hook
// (torch 2.11 torch/nn/parallel/distributed.py) registers on every trainable parameter a
// post-accumulate-grad hook that, unless require_backward_grad_sync is False (no_sync) or
// param.grad is None, all-reduces param.grad / world_size and copies the result back, every time
// it fires. There are no buckets, no "marked ready twice" check, no unused-parameter search, no
// _DDPSink (_pre_forward/_post_forward return early).
//
// Consequences modelled here:
// - a hook firing k times in the synced micro-step issues k all-reduces of the running .grad;
//   since each all-reduce averages what is there, the sum of the step's contributions is still
//   averaged (avg(a) + b -> avg(a) + avg(b)): no wrong gradient, only extra collectives.
// - ranks whose hooks fire differently (a module unused on one rank, a different shard count)
//   issue different all-reduce sequences: the collective log comparison reports the mismatch.
// - a gradient contribution after the parameter's last synced firing (a parameter used only in
//   no_sync micro-steps) is never all-reduced: the ranks step with their local gradients.
class PythonReducerModel : public SyncModel {
 public:
  PythonReducerModel(const Plan& plan, const ModelStructure& structure) : plan_(plan), structure_(structure) {}

  std::string name() const override { return "DDP (Python reducer)"; }

  void begin_iteration(AutogradEngine&, int) override {
    unreduced_.assign(structure_.parameters.size(), false);
    tasks_.assign(structure_.parameters.size(), {});
    last_unreduced_at_.assign(structure_.parameters.size(), StepKey{});
  }

  void begin_step(AutogradEngine&, const StepPosition& position) override { position_ = position; }

  SimTensor before_backward(AutogradEngine&, const StepPosition&, SimTensor output) override { return output; }

  void on_accumulate(AutogradEngine& engine, const AccumulateEvent& event, bool grad_defined_after) override {
    const Parameter& p = structure_.parameters[static_cast<size_t>(event.parameter)];
    if (p.ddp_index < 0) return;  // frozen: no hook registered
    const size_t i = static_cast<size_t>(event.parameter);
    if (event.gradient_defined) mark_contribution(i);
    tasks_[i].push_back(task_text(engine.task(event.task)));
    if (!position_.synced || !grad_defined_after) return;  // require_backward_grad_sync False / grad None
    issue(Collective{fmt::format("all_reduce {} ({}, Python reducer hook)", p.name, numel_text(p)), p.numel() * 4});
    unreduced_[i] = false;
  }

  void on_manual_accumulate(int parameter) override {
    if (structure_.parameters[static_cast<size_t>(parameter)].ddp_index >= 0) mark_contribution(static_cast<size_t>(parameter));
  }

  void end_iteration(int iteration, std::vector<Finding>& findings) override {
    if (plan_.world_size < 2) return;  // one rank: its local gradient is the average
    for (int index : structure_.ddp_parameters) {  // DDP's order, as the gradient comparison reports
      const size_t i = static_cast<size_t>(index);
      if (!unreduced_[i]) continue;
      const Parameter& p = structure_.parameters[i];
      Finding f = parameter_finding(VerdictKind::SilentDivergence, p, position_.rank,
                                    StepKey{iteration, last_unreduced_at_[i].micro_step}, Phase::AfterBackward);
      f.graph_tasks = tasks_[i];
      if (f.graph_tasks.empty()) f.graph_tasks.push_back("none: .grad written outside AccumulateGrad");
      f.error_text = "no error: the optimizer steps on this rank's local gradient";
      f.explanation = fmt::format(
          "with optimize_ddp=\"python_reducer\" a gradient is all-reduced only by the parameter's post-accumulate-grad "
          "hook in the synced micro-step; {}'s gradient got a contribution (micro-step {}) that no synced hook firing "
          "followed, so each rank keeps its own value and the replicas diverge.",
          p.name, f.micro_step);
      findings.push_back(std::move(f));
      return;  // the first one, as DDP's silent findings do
    }
  }

 private:
  void mark_contribution(size_t i) {
    unreduced_[i] = true;
    last_unreduced_at_[i] = position_.step;
  }

  const Plan& plan_;
  const ModelStructure& structure_;
  StepPosition position_;
  std::vector<bool> unreduced_;  // .grad holds a contribution no synced all-reduce has seen
  std::vector<StepKey> last_unreduced_at_;
  std::vector<std::vector<std::string>> tasks_;
};

// One rank of DDP with its C++ Reducer while compiled autograd runs the backward. Since PR #152735
// the Reducer's hook raises when compiled autograd collects it, before any gradient is
// accumulated; before it the hook's collective was a no-op, so no gradient was averaged.
class CppReducerUnderCompiledAutogradModel : public SyncModel {
 public:
  CppReducerUnderCompiledAutogradModel(const Plan& plan, const ModelStructure& structure)
      : plan_(plan), structure_(structure) {}

  std::string name() const override { return "DDP (C++ Reducer under compiled autograd)"; }
  void begin_step(AutogradEngine&, const StepPosition& position) override { position_ = position; }
  SimTensor before_backward(AutogradEngine&, const StepPosition&, SimTensor output) override { return output; }

  void on_accumulate(AutogradEngine&, const AccumulateEvent& event, bool) override {
    const Parameter& p = structure_.parameters[static_cast<size_t>(event.parameter)];
    if (p.ddp_index < 0) return;
    if (cpp_reducer_raises_under_compiled_autograd(plan_.torch_version)) {
      throw SyncError(VerdictKind::EngineError, -1, kCppReducerUnderCompiledAutograd,
                      "hookstream.compiled_autograd: true with the C++ Reducer (optimize_ddp is not python_reducer): "
                      "compiled autograd cannot trace the Reducer's autograd hook and PyTorch refuses it at the first "
                      "backward (PR #152735).");
    }
    if (first_defined_ < 0 && event.gradient_defined) first_defined_ = event.parameter;
  }

  void end_iteration(int iteration, std::vector<Finding>& findings) override {
    if (plan_.world_size < 2 || first_defined_ < 0 || reported_) return;
    reported_ = true;
    const Parameter& p = structure_.parameters[static_cast<size_t>(first_defined_)];
    Finding f = parameter_finding(VerdictKind::SilentDivergence, p, position_.rank,
                                  StepKey{iteration, position_.step.micro_step}, Phase::AfterBackward);
    f.graph_tasks = {"outer backward (compiled autograd)"};
    f.error_text = "no error: the C++ Reducer's all-reduce is a no-op under compiled autograd";
    f.explanation = fmt::format(
        "PyTorch {} runs the C++ Reducer's hook under compiled autograd without its collective (fixed to an error "
        "by PR #152735, 2.8): every rank steps on its local gradients.",
        plan_.torch_version.text());
    findings.push_back(std::move(f));
  }

 private:
  const Plan& plan_;
  const ModelStructure& structure_;
  StepPosition position_;
  int first_defined_ = -1;
  bool reported_ = false;
};

}  // namespace

bool uses_python_reducer(const Plan& plan) {
  if (plan.torch_compile.optimize_ddp != OptimizeDdp::PythonReducer) return false;
  return plan.torch_compile.enabled || plan.torch_version.at_least(2, 7);
}

bool ddp_compile_rules_apply(const Plan& plan) {
  return uses_python_reducer(plan) || (plan.torch_compile.enabled && plan.torch_compile.compiled_autograd);
}

SyncSimulation simulate_ddp_compiled(const Plan& plan, const ModelStructure& structure,
                                     const SyncSimulationOptions& options) {
  if (uses_python_reducer(plan)) {
    return simulate_with_model(
        plan, structure, [&](int) { return std::make_unique<PythonReducerModel>(plan, structure); }, options);
  }
  return simulate_with_model(
      plan, structure, [&](int) { return std::make_unique<CppReducerUnderCompiledAutogradModel>(plan, structure); },
      options);
}

}  // namespace hookstream
