#include "sim/sync/fsdp2/fsdp2_model.h"

#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <set>

#include "sim/inputs/model_config.h"
#include "sim/sync/rank_run.h"

namespace hookstream {

const char* const kFsdp2MixedDTensorText =
    "aten.mm.default got mixed torch.Tensor and DTensor, need to convert all torch.Tensor to DTensor before "
    "calling distributed operators!";

namespace {

// TrainingState of _fsdp_common.py (FSDPState uses IDLE/FORWARD/PRE_BACKWARD; the param group all four).
enum class Training { Idle, Forward, PreBackward, PostBackward };

struct UnitState {
  Training state = Training::Idle;  // FSDPState._training_state
  Training group = Training::Idle;  // FSDPParamGroup._training_state
  bool unsharded = false;           // FSDPParamGroup._sharded_state == UNSHARDED
  bool gather_pending = false;      // _all_gather_result set by a prefetch, not yet waited for
  std::vector<int> post_forward_indices;  // FSDPParamGroup._post_forward_indices
  bool reshard_after_forward = true;
  int64_t bytes = 0;                // all parameters of the unit (the all-gather's size)
  // This step: all-gathers issued, and the forward calls that ran with grad enabled (each needs
  // one all-gather in forward and, when resharded after forward, one in pre_backward).
  int all_gathers = 0;
  // All-gathers beyond the one per forward call and the one per backward: a re-unshard inside
  // backward (PR #171779's path) and prefetches dropped unused at the end of backward.
  int extra_gathers = 0;
  int forwards = 0;
};

class Fsdp2 final : public SyncModel {
 public:
  Fsdp2(const Plan& plan, const ModelStructure& structure, std::shared_ptr<const Fsdp2Units> units, int rank)
      : plan_(plan), structure_(structure), units_(std::move(units)), rank_(rank) {
    state_.resize(units_->units.size());
    for (size_t u = 0; u < units_->units.size(); ++u) {
      unit_by_path_[units_->units[u].path] = static_cast<int>(u);
      state_[u].reshard_after_forward = units_->reshard_after_forward;
      for (int p : units_->units[u].parameters) state_[u].bytes += structure_.parameters[static_cast<size_t>(p)].bytes();
    }
    pending_.assign(structure_.parameters.size(), false);
    late_tasks_.resize(structure_.parameters.size());
  }

  std::string name() const override { return "FSDP2"; }

  void begin_step(AutogradEngine& engine, const StepPosition& position) override {
    (void)engine;
    position_ = position;
    for (UnitState& s : state_) {
      s.all_gathers = 0;
      s.extra_gathers = 0;
      s.forwards = 0;
    }
    for (auto& t : late_tasks_) t.clear();
  }

  // _fsdp_state.py FSDPState._pre_forward / FSDPParamGroup.pre_forward.
  SimTensor pre_forward(AutogradEngine& engine, const ModuleCall& call, SimTensor input) override {
    // A LoRA A/B call: its own unit where axolotl shards it (sim/sync/fsdp2/fsdp2_units.cc), else it
    // computes inside its lora.Linear, in the layer's unit.
    if (call.kind == ModuleKind::Adapter && unit_of_call(call) < 0) return input;
    if (call.kind == ModuleKind::Linear) {
      check_unsharded(call.path);
      return input;
    }
    const int u = unit_of_call(call);
    if (u < 0) return input;
    UnitState& s = state_[static_cast<size_t>(u)];
    if (s.state == Training::PreBackward) {
      // PyTorch 2.11 (PR #171779): "the params might have been resharded by a previous
      // post_backward. We need to ensure params are unsharded for AC recomputation."
      if (!s.unsharded) {
        if (!s.gather_pending) ++s.extra_gathers;
        unshard(u);
        wait_for_unshard(u);
      }
      return input;
    }
    s.state = Training::Forward;
    s.group = Training::Forward;
    ++s.forwards;
    unshard(u);
    wait_for_unshard(u);
    // _register_post_backward_hook: only with grad enabled and an input that requires grad.
    if (!engine.grad_enabled() || !input.requires_grad()) return input;
    return engine.function(fmt::format("RegisterPostBackwardFunction({})", unit_name(u)), {input},
                           [this, u](AutogradEngine&) {
                             post_backward(u);
                             return std::vector<bool>{true};
                           });
  }

  // FSDPState._post_forward / FSDPParamGroup.post_forward.
  SimTensor post_forward(AutogradEngine& engine, const ModuleCall& call, SimTensor output) override {
    if (call.kind == ModuleKind::Linear) return output;
    const int u = unit_of_call(call);
    if (u < 0) return output;
    UnitState& s = state_[static_cast<size_t>(u)];
    if (s.state == Training::PreBackward) return output;
    // "for AC(fully_shard(model)), AC runs fsdp's _pre_forward it shouldn't change
    // post_forward_order": `if not is_bw(): self.reshard()` (a recompute inside backward keeps
    // the parameters unsharded).
    if (engine.current_task() < 0) {
      if (s.reshard_after_forward) reshard(u);
      // _record_post_forward: the order backward prefetching walks in reverse.
      s.post_forward_indices.push_back(static_cast<int>(post_forward_order_.size()));
      post_forward_order_.push_back(u);
    }
    s.group = Training::Idle;
    if (engine.grad_enabled() && output.requires_grad()) {
      // _register_pre_backward_hook: t.register_hook(self._pre_backward) on the output; an
      // identity Function runs at the same point of the backward.
      output = engine.function(fmt::format("FSDP pre-backward hook({})", unit_name(u)), {output},
                               [this, u](AutogradEngine& e) {
                                 pre_backward(e, u);
                                 return std::vector<bool>{true};
                               });
    }
    s.state = Training::Idle;
    return output;
  }

  SimTensor before_backward(AutogradEngine& engine, const StepPosition& position, SimTensor output) override {
    (void)engine;
    (void)position;
    return output;
  }

  void on_accumulate(AutogradEngine& engine, const AccumulateEvent& event, bool grad_defined_after) override {
    (void)engine;
    if (!event.gradient_defined && !grad_defined_after) return;
    if (!event.gradient_defined) return;
    const size_t p = static_cast<size_t>(event.parameter);
    pending_[p] = true;
    const int u = units_->unit_of[p];
    if (state_[static_cast<size_t>(u)].group == Training::PostBackward) late_tasks_[p].push_back(event.task);
  }

  void on_manual_accumulate(int parameter) override { pending_[static_cast<size_t>(parameter)] = true; }

  void end_step(AutogradEngine& engine, const StepPosition& position) override {
    for (size_t u = 0; u < state_.size(); ++u) {
      const UnitState& s = state_[u];
      if (s.extra_gathers > 0) {
        const int expected = s.all_gathers - s.extra_gathers;
        Finding w;
        w.kind = VerdictKind::ExtraCollectives;
        w.rank = rank_;
        w.iteration = position.step.iteration;
        w.micro_step = position.step.micro_step;
        w.parameter = unit_name(static_cast<int>(u));
        w.error_text = fmt::format("no error: {} all-gathers of {} in this step where {} suffice", s.all_gathers,
                                   unit_name(static_cast<int>(u)), expected);
        w.explanation = "the unit is all-gathered again inside backward after its post_backward resharded it (a tiled "
                        "function calling it once per tile: _pre_forward's re-unshard), or a backward prefetch went to "
                        "a unit that did not run backward next: time on the link and an unsharded copy of its parameters";
        warnings_.push_back(std::move(w));
      }
    }
    if (!position.synced) return;
    // Gradients still held unsharded after the synced backward were never reduce-scattered: the
    // optimizer steps on sharded gradients without them (F2-2, docs/engines/fsdp2.md).
    for (size_t p = 0; p < pending_.size(); ++p) {
      if (!pending_[p] || !structure_.parameters[p].trainable) continue;
      const Parameter& param = structure_.parameters[p];
      Finding f = parameter_finding(VerdictKind::WrongGradient, param, rank_, position.step, Phase::AfterBackward);
      std::set<std::string> seen;
      for (int t : late_tasks_[p]) {
        std::string text = task_text(engine.task(t));
        if (seen.insert(text).second) f.graph_tasks.push_back(text);
      }
      if (f.graph_tasks.empty()) f.graph_tasks.push_back("outer backward");
      const std::string unit = unit_name(units_->unit_of[p]);
      f.error_text = "no error: the gradient produced after the FSDP unit's post_backward is not reduce-scattered this step";
      f.explanation = fmt::format(
          "{} accumulated into the unsharded parameter's .grad after {}'s post_backward had reduce-scattered and "
          "resharded; the root's final callback skips a group already in POST_BACKWARD, so the sharded gradient the "
          "optimizer uses lacks these contributions",
          param.name, unit);
      findings_.push_back(std::move(f));
      // The unsharded .grad stays: zero_grad() clears the sharded parameters' grads only, so the
      // next step's first post_backward folds it in (wrong again there; docs/engines/fsdp2.md).
    }
  }

  void end_iteration(int iteration, std::vector<Finding>& findings) override {
    (void)iteration;
    for (Finding& f : findings_) findings.push_back(std::move(f));
    findings_.clear();
  }

  void end_run(std::vector<Finding>& findings) override { (void)findings; }

  void take_warnings(std::vector<Finding>& out) override {
    for (Finding& w : warnings_) out.push_back(std::move(w));
    warnings_.clear();
  }

 private:
  std::string unit_name(int u) const {
    const std::string& path = units_->units[static_cast<size_t>(u)].path;
    return path.empty() ? "the root module" : path;
  }

  int unit_of_call(const ModuleCall& call) const {
    const std::string path = call.kind == ModuleKind::Root ? std::string() : call.path;
    auto it = unit_by_path_.find(path);
    return it == unit_by_path_.end() ? -1 : it->second;
  }

  // A Linear computes with its unit's parameters: sharded ones are DTensors (F2-1).
  void check_unsharded(const std::string& module_path) {
    int best = 0;
    for (size_t u = 1; u < units_->units.size(); ++u) {
      const std::string& up = units_->units[u].path;
      if (module_path.size() > up.size() && module_path.compare(0, up.size(), up) == 0 && module_path[up.size()] == '.' &&
          up.size() > units_->units[static_cast<size_t>(best)].path.size()) {
        best = static_cast<int>(u);
      }
    }
    if (!state_[static_cast<size_t>(best)].unsharded) {
      throw SyncError(VerdictKind::ShardedParameterUse, -1, kFsdp2MixedDTensorText,
                      fmt::format("{} computes while {} is sharded (its parameters are DTensor shards)", module_path,
                                  unit_name(best)),
                      module_path);
    }
  }

  // FSDPParamGroup.unshard: issues the all-gather (foreach_all_gather); wait_for_unshard copies
  // it out and swaps the unsharded parameters in.
  void unshard(int u) {
    UnitState& s = state_[static_cast<size_t>(u)];
    if (s.gather_pending || s.unsharded) return;
    if (shard_ranks() <= 1) {
      // FSDPParamGroup.unshard: "if world_size == 1" no collective is issued.
      s.unsharded = true;
      return;
    }
    s.gather_pending = true;
    ++s.all_gathers;
    issue(Collective{fmt::format("all_gather {}", unit_name(u)), s.bytes});
  }
  void wait_for_unshard(int u) {
    UnitState& s = state_[static_cast<size_t>(u)];
    if (!s.gather_pending) return;
    s.gather_pending = false;
    s.unsharded = true;
  }

  // The ranks a unit is sharded over: the mesh's shard dimension (FSDPParam shards dim 0 over
  // shard_mesh_info, the dp_shard group under HSDP), the whole world without a mesh key.
  int shard_ranks() const { return std::max(1, plan_.engine.shard_ranks(plan_.world_size)); }

  int64_t padded_numel(const Parameter& p) const {
    if (p.shape.empty()) return 1;
    const int64_t world = shard_ranks();
    int64_t rest = 1;
    for (size_t d = 1; d < p.shape.size(); ++d) rest *= p.shape[d];
    return (p.shape[0] + world - 1) / world * world * rest;
  }

  void reshard(int u) { state_[static_cast<size_t>(u)].unsharded = false; }

  // FSDPState._pre_backward + FSDPParamGroup.pre_backward.
  void pre_backward(AutogradEngine& engine, int u) {
    UnitState& s = state_[static_cast<size_t>(u)];
    s.state = Training::PreBackward;
    if (!final_callback_queued_) {
      // _register_root_post_backward_final_callback: queued on the innermost running graph task.
      final_callback_queued_ = true;
      engine.queue_callback([this] { root_final_callback(); });
    }
    if (s.group == Training::PreBackward) return;
    s.group = Training::PreBackward;
    unshard(u);
    wait_for_unshard(u);
    // _backward_prefetch (default_prefetch: no explicit set_modules_to_backward_prefetch): the
    // unit before this one in the reverse post-forward order is all-gathered now ("may have
    // mistargeted prefetches if not all modules used in forward are used in this backward").
    if (s.post_forward_indices.empty()) return;
    const int current = s.post_forward_indices.back();
    s.post_forward_indices.pop_back();
    if (current - 1 >= 0) unshard(post_forward_order_[static_cast<size_t>(current - 1)]);
  }

  // FSDPParamGroup.post_backward (+ foreach_reduce's reduce-scatter).
  void post_backward(int u) {
    UnitState& s = state_[static_cast<size_t>(u)];
    s.group = Training::PostBackward;
    const Fsdp2Unit& unit = units_->units[static_cast<size_t>(u)];
    if (!position_.synced) {
      reshard(u);  // reshard_after_backward; the unsharded grads are kept for the synced step
      return;
    }
    int with_grad = 0;
    int64_t bytes = 0, elements = 0;
    for (int p : unit.parameters) {
      if (!pending_[static_cast<size_t>(p)]) continue;
      pending_[static_cast<size_t>(p)] = false;
      ++with_grad;
      const Parameter& param = structure_.parameters[static_cast<size_t>(p)];
      bytes += param.bytes();
      elements += padded_numel(param);
    }
    reshard(u);
    if (with_grad == 0) return;  // "if len(fsdp_params_with_grad) == 0: return": no collective
    // foreach_reduce's reduce-scatter input: every gradient padded on dim 0 to a multiple of the
    // shard group's size, flattened and concatenated (_fsdp_collectives.py
    // foreach_reduce_scatter_copy_in): what TORCH_DISTRIBUTED_DEBUG=DETAIL prints as the
    // fingerprint's TensorShape.
    const int shards = shard_ranks();
    if (shards > 1) {
      issue(Collective{fmt::format("reduce_scatter {} ({} of {} params, {} elements)", unit_name(u), with_grad,
                                   unit.parameters.size(), elements),
                       bytes});
    }
    // HSDP: foreach_reduce all-reduces the reduce-scatter output (this rank's shard) across the
    // replicas ("if all_reduce_group is not None: ... dist.all_reduce(reduce_output,
    // group=all_reduce_group)"), on synced steps only (set_requires_gradient_sync(False) also
    // clears all_reduce_grads, _fully_shard.py).
    if (plan_.engine.dp_replicate > 1) {
      issue(Collective{fmt::format("all_reduce {} ({} elements)", unit_name(u), elements / shards), bytes / shards});
    }
  }

  // FSDPState._root_post_backward_final_callback.
  void root_final_callback() {
    for (size_t u = 0; u < state_.size(); ++u) {
      if (state_[u].group != Training::PostBackward) post_backward(static_cast<int>(u));
      state_[u].state = Training::Idle;
      state_[u].group = Training::Idle;
      // _finalize_backward (is_last_backward): a mistargeted prefetch is waited for and dropped.
      if (state_[u].gather_pending) ++state_[u].extra_gathers;  // a mistargeted prefetch
      state_[u].gather_pending = false;
      state_[u].post_forward_indices.clear();
    }
    post_forward_order_.clear();
    final_callback_queued_ = false;
  }

  const Plan& plan_;
  const ModelStructure& structure_;
  std::shared_ptr<const Fsdp2Units> units_;
  int rank_;
  std::vector<UnitState> state_;
  std::map<std::string, int> unit_by_path_;
  std::vector<bool> pending_;                 // per parameter: an unsharded .grad not yet reduce-scattered
  std::vector<std::vector<int>> late_tasks_;  // this step: tasks that accumulated after the unit's post_backward
  bool final_callback_queued_ = false;        // _state_ctx.post_backward_final_callback_queued
  std::vector<int> post_forward_order_;       // comm_ctx.post_forward_order
  StepPosition position_;
  std::vector<Finding> findings_;
  std::vector<Finding> warnings_;
};

}  // namespace

std::unique_ptr<SyncModel> make_fsdp2_model(const Plan& plan, const ModelStructure& structure,
                                            std::shared_ptr<const Fsdp2Units> units, int rank) {
  return std::make_unique<Fsdp2>(plan, structure, std::move(units), rank);
}

namespace {

// "reduce_scatter model.layers.2 (7 of 9 params, 2336 elements)" -> 2336; -1 for an all-gather.
int64_t reduce_scatter_elements(const std::string& what) {
  if (what.rfind("reduce_scatter ", 0) != 0) return -1;
  const size_t end = what.rfind(" elements)");
  const size_t start = what.rfind(", ", end);
  if (end == std::string::npos || start == std::string::npos) return -1;
  return std::stoll(what.substr(start + 2, end - start - 2));
}

std::string quoted(const std::string& text, size_t from) {
  const size_t a = text.find('\'', from);
  const size_t b = a == std::string::npos ? a : text.find('\'', a + 1);
  return b == std::string::npos ? std::string() : text.substr(a + 1, b - a - 1);
}

const char* c10_dtype(const ModelStructure& structure) {
  for (const Parameter& p : structure.parameters) {
    if (p.trainable) return c10_scalar_type_name(p.dtype);
  }
  return "Float";
}

// ProcessGroupWrapper's check under TORCH_DISTRIBUTED_DEBUG=DETAIL (Gloo: what the oracle runs;
// NCCL runs the same wrapper): the collective mismatch becomes a RuntimeError on every rank
// instead of a hang. Fields the simulator does not track (SequenceNumber, TensorOptions) are "...".
void detail_text(Finding& f, const ModelStructure& structure) {
  const std::string mine = quoted(f.error_text, 0);
  const std::string theirs = quoted(f.explanation, 0);
  const int64_t a = reduce_scatter_elements(mine);
  const int64_t b = reduce_scatter_elements(theirs);
  const std::string hang = f.error_text;
  int other = -1;
  if (f.explanation.rfind("rank ", 0) == 0) other = std::stoi(f.explanation.substr(5));
  if (a < 0 || b < 0 || other < 0) {
    f.explanation = hang + "; " + f.explanation +
                    ". With TORCH_DISTRIBUTED_DEBUG=DETAIL this is a RuntimeError \"Detected mismatch between collectives "
                    "on ranks\" naming both collectives.";
    return;
  }
  const char* dtype = c10_dtype(structure);
  auto fingerprint = [&](int64_t n) {
    return fmt::format("CollectiveFingerPrint(SequenceNumber=..., OpType=_REDUCE_SCATTER_BASE, TensorShape=[{}], "
                       "TensorDtypes={} {}, TensorDeviceTypes=...)",
                       n, dtype, dtype);
  };
  f.error_text = fmt::format(
      "Detected mismatch between collectives on ranks. Rank {} is running collective: {}, but Rank {} is running "
      "collective: {}.Collectives differ in the following aspects:   Tensor Tensor shapes: {}vs {}",
      f.rank, fingerprint(a), other, fingerprint(b), a, b);
  f.explanation = fmt::format(
      "rank {} reduce-scatters '{}' while rank {} reduce-scatters '{}': FSDP2 reduces only the parameters that got a "
      "gradient on this rank (FSDPParamGroup.post_backward), so ranks whose forward used different parameters of one "
      "unit (MoE experts, a skipped branch) issue different reduce-scatters; without TORCH_DISTRIBUTED_DEBUG=DETAIL "
      "the ranks hang until the process group timeout",
      f.rank, mine, other, theirs);
}

}  // namespace

SyncSimulation simulate_fsdp2(const Plan& plan, const ModelStructure& structure, const SyncSimulationOptions& options) {
  auto units = std::make_shared<const Fsdp2Units>(fsdp2_units(plan, structure));
  SyncSimulation result = simulate_with_model(
      plan, structure, [&](int rank) { return make_fsdp2_model(plan, structure, units, rank); }, options);
  for (Finding& f : result.findings) {
    if (f.kind == VerdictKind::CollectiveMismatch) detail_text(f, structure);
  }
  return result;
}

}  // namespace hookstream
