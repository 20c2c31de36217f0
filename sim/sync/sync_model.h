// The seam between the autograd-engine model (sim/engine/autograd_engine.h, sim/engine/forward_graph.h) and the
// gradient-sync engines that consume its hook events as peers: DDP's Reducer (sim/sync/ddp/),
// FSDP2, FSDP1 and DeepSpeed ZeRO 1-3. The shared per-rank driver (sim/sync/rank_run.h) records one
// forward per micro-step with the engine's module hooks, runs loss.backward() on the engine model,
// forwards every AccumulateGrad execution and final callback, and stops the rank at the first
// error the engine raises. What is engine-specific lives behind SyncModel.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "sim/engine/autograd_engine.h"
#include "sim/engine/forward_graph.h"
#include "sim/inputs/model_structure.h"
#include "sim/verify/verdict.h"

namespace hookstream {

// One micro-step of one rank.
struct StepKey {
  int iteration = 0;
  int micro_step = 0;
  bool operator<(const StepKey& o) const {
    return iteration != o.iteration ? iteration < o.iteration : micro_step < o.micro_step;
  }
  bool operator==(const StepKey& o) const { return iteration == o.iteration && micro_step == o.micro_step; }
};

struct StepPosition {
  int rank = 0;
  StepKey step;
  // The last micro-step of gradient accumulation: the one that synchronises gradients
  // (DDP outside no_sync(); FSDP set_requires_gradient_sync(True); DeepSpeed's
  // is_gradient_accumulation_boundary()).
  bool synced = true;
};

// A finding about one parameter at one rank's micro-step: what every engine's silent findings
// (wrong, partial, overwritten or diverging gradients) name the same way; the engine adds its graph
// tasks and texts.
inline Finding parameter_finding(VerdictKind kind, const Parameter& parameter, int rank, const StepKey& step,
                                 Phase phase) {
  Finding f;
  f.kind = kind;
  f.rank = rank;
  f.iteration = step.iteration;
  f.micro_step = step.micro_step;
  f.phase = phase;
  f.ddp_index = parameter.ddp_index;
  f.parameter = parameter.name;
  f.layer = parameter.layer;
  return f;
}

// One collective an engine issues; ranks must issue identical sequences (a rank that issues one the
// others do not blocks until the process group's timeout).
struct Collective {
  Collective() = default;
  Collective(std::string what_, int64_t bytes_) : what(std::move(what_)), bytes(bytes_) {}
  std::string what;  // "allreduce bucket 2 (3 params, 6144 bytes)", "reduce_scatter model.layers.3 (5 params)"
  int64_t bytes = 0;
  // What the process group itself sees, for engines whose ranks are paired collective by collective
  // (FSDP1: sim/sync/fsdp1/fsdp1_pairing.h); empty for engines compared by `what` alone.
  std::string op;               // the c10d OpType, as CollectiveFingerPrint prints it ("ALLGATHER")
  std::vector<int64_t> shape;   // the fingerprinted tensors' shape (the first tensor's, as printed)
  std::vector<std::string> dtypes;  // one c10 ScalarType name per fingerprinted tensor ("Float")
  std::string payload;          // what the data is: equal fingerprints, different payloads pair silently
  Phase phase = Phase::Backward;
  bool operator==(const Collective& other) const { return what == other.what && bytes == other.bytes; }
};

// An error the real engine raises (RuntimeError, AssertionError, AttributeError): the rank stops.
class SyncError : public std::runtime_error {
 public:
  // `parameter`: index into ModelStructure::parameters, -1 when the error names none. `ddp_index`
  // kept for the Reducer, whose texts use DDP's index.
  SyncError(VerdictKind kind, int parameter, const std::string& text, std::string explanation = "",
            std::string module = "")
      : std::runtime_error(text),
        kind_(kind),
        parameter_(parameter),
        explanation_(std::move(explanation)),
        module_(std::move(module)) {}
  VerdictKind kind() const { return kind_; }
  int parameter() const { return parameter_; }
  const std::string& explanation() const { return explanation_; }
  const std::string& module() const { return module_; }
  // Evidence the engine knows better than the driver: the graph tasks to name (default: those
  // that ran the parameter's accumulator this step) and the phase (default: backward while
  // loss.backward() runs, otherwise forward).
  SyncError& with_graph_tasks(std::vector<std::string> tasks) {
    graph_tasks_ = std::move(tasks);
    return *this;
  }
  SyncError& with_phase(Phase phase) {
    phase_ = phase;
    has_phase_ = true;
    return *this;
  }
  const std::vector<std::string>& graph_tasks() const { return graph_tasks_; }
  bool has_phase() const { return has_phase_; }
  Phase phase() const { return phase_; }

 private:
  VerdictKind kind_;
  int parameter_;
  std::string explanation_;
  std::string module_;
  std::vector<std::string> graph_tasks_;
  Phase phase_ = Phase::Backward;
  bool has_phase_ = false;
};

// What one engine does on one rank. The driver owns the AutogradEngine and calls, per micro-step:
// begin_step, record_forward (with the module hooks of this object), before_backward, then
// loss.backward() during which on_accumulate / on_manual_accumulate run, then end_step; after the
// last micro-step of an iteration end_iteration; after the last iteration end_run. Any of them may
// throw SyncError.
class SyncModel : public ModuleHooks {
 public:
  // The engine this is ("DDP", "FSDP2", "FSDP1", "DeepSpeed ZeRO-3").
  virtual std::string name() const = 0;
  virtual void begin_iteration(AutogradEngine& engine, int iteration) {
    (void)engine;
    (void)iteration;
  }
  virtual void begin_step(AutogradEngine& engine, const StepPosition& position) = 0;
  // After the forward: returns what the loss is computed from (DDP wraps it in _DDPSink; the
  // root's pre-backward hooks are already on it from post_forward).
  virtual SimTensor before_backward(AutogradEngine& engine, const StepPosition& position, SimTensor output) = 0;
  // A parameter's AccumulateGrad node ran in graph task `event.task`; `grad_defined_after`: its
  // .grad is defined after the accumulation.
  virtual void on_accumulate(AutogradEngine& engine, const AccumulateEvent& event, bool grad_defined_after) = 0;
  // Code outside AccumulateGrad added to the parameter's .grad (a tiled MLP's grad_then_backward).
  virtual void on_manual_accumulate(int parameter) { (void)parameter; }
  virtual void end_step(AutogradEngine& engine, const StepPosition& position) {
    (void)engine;
    (void)position;
  }
  // After the optimizer step: findings about the gradients the step used (silent ones).
  virtual void end_iteration(int iteration, std::vector<Finding>& findings) {
    (void)iteration;
    (void)findings;
  }
  // After the last iteration (DDP: the next synced forward would raise an unfinished reduction,
  // thrown as a SyncError at iteration `plan.iterations`, micro-step 0).
  virtual void end_run(std::vector<Finding>& findings) { (void)findings; }
  // After the run, stopped or not: silent findings recorded during micro-steps that an error
  // later in the same iteration would otherwise hide from end_iteration (ZeRO-3's overwrite).
  virtual void take_silent_findings(std::vector<Finding>& findings) { (void)findings; }
  // Whether the engine expects hook firings now (DDP's expect_autograd_hooks_): recorded with each
  // firing as evidence.
  virtual bool expects_hooks() const { return true; }
  // After end_run: findings that cost time or memory but do not fail the run (extra all-gathers).
  virtual void take_warnings(std::vector<Finding>& warnings) { (void)warnings; }
  // Collectives issued since the last take_collectives().
  virtual std::vector<Collective> take_collectives() {
    std::vector<Collective> out;
    out.swap(collectives_);
    return out;
  }

 protected:
  void issue(Collective collective) { collectives_.push_back(std::move(collective)); }

 private:
  std::vector<Collective> collectives_;
};

}  // namespace hookstream
