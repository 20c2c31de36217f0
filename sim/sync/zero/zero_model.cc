#include "sim/sync/zero/zero_model.h"

#include <fmt/format.h>
#include <string>
#include <vector>

#include "sim/sync/rank_run.h"
#include "sim/sync/zero/zero0_model.h"
#include "sim/sync/zero/zero3_model.h"
#include "sim/sync/zero/zero_common.h"

namespace hookstream {

namespace {

// The two wordings of stage_1_and_2.py's params_already_reduced assert. Both are f-strings
// continued with a backslash inside the literal, so the next source line's indentation is part of
// the text: 13 spaces in reduce_independent_p_g_buckets_and_remove_grads (the hook, "reductions
// are"), 25 in reduce_ipg_grads (the bucket flush, "reduction is"); recorded from real DeepSpeed
// 0.19.8 by oracles/zero_worker.py. debug_param2name gives the module's named_parameters() name.
std::string reduced_twice_text(const std::string& name, bool in_hook) {
  const std::string gap(in_hook ? 13 : 25, ' ');
  return "The parameter " + name + " has already been reduced." + gap + "Gradient computed twice for this partition." +
         gap + (in_hook ? "Multiple gradient reductions are currently not supported" : "Multiple gradient reduction is currently not supported");
}

class ZeroModel : public SyncModel {
 public:
  ZeroModel(const Plan& plan, const ModelStructure& structure) : structure_(structure) {
    const DeepSpeedConfig& ds = *plan.engine.deepspeed;
    stage_ = ds.zero_stage;
    overlap_comm_ = ds.overlap_comm_or_default();
    contiguous_gradients_ = ds.contiguous_gradients.value_or(true);
    bucket_size_ = zero_reduce_bucket_size(plan);
    ds_grad_is_ready_setting_ = plan.tiled_mlp_ds_grad_is_ready.value_or(true);
    const size_t n = structure.parameters.size();
    ready_.assign(n, true);
    already_reduced_.assign(n, false);
    has_grad_.assign(n, false);
  }

  std::string name() const override { return fmt::format("DeepSpeed ZeRO-{}", stage_); }

  void begin_iteration(AutogradEngine&, int) override {
    std::fill(has_grad_.begin(), has_grad_.end(), false);  // optimizer.zero_grad()
  }

  void begin_step(AutogradEngine&, const StepPosition& position) override { position_ = position; }

  SimTensor before_backward(AutogradEngine&, const StepPosition&, SimTensor output) override { return output; }

  // DeepSpeed's TiledMLP.backward: param.ds_grad_is_ready = i + 1 >= shards on its compute params.
  void tiled_chunk(const ModuleCall& mlp, int chunk, int chunks) override {
    if (!ds_grad_is_ready_setting_ || mlp.layer < 0) return;
    for (int p : mlp_parameters(structure_, mlp.layer)) ready_[static_cast<size_t>(p)] = chunk + 1 >= chunks;
  }

  void on_accumulate(AutogradEngine&, const AccumulateEvent& event, bool) override {
    // AccumulateGrad returns before its post-accumulate hooks when the incoming gradient is
    // undefined (torch/csrc/autograd/functions/accumulate_grad.cpp).
    if (!event.gradient_defined) return;
    const size_t p = static_cast<size_t>(event.parameter);
    if (!structure_.parameters[p].trainable) return;
    has_grad_[p] = true;
    // create_gradient_handling_hooks only when partition_gradients or overlap_comm or
    // use_grad_accum_attribute or contiguous_gradients (stage_1_and_2.py __init__).
    if (!(stage_ >= 2 || overlap_comm_ || contiguous_gradients_)) return;
    // process_gradients -> reduce_ready_partitions_and_remove_grads.
    if (stage_ >= 2 || overlap_comm_) reduce_ready(event.parameter);
  }

  void end_step(AutogradEngine&, const StepPosition& position) override {
    // engine.backward -> _backward_epilogue after loss.backward() returns (engine.py): with
    // engine.backward the queued post-backward callback does nothing (_backward_post_hook returns
    // while _running_engine_backward), so the epilogue runs once, after the whole backward.
    // allreduce_gradients: stage 2 every micro-step; stage 1 only at the boundary, where
    // reduce_gradients first buckets every param with a grad unless overlap_comm did it in hooks.
    if (stage_ >= 2) {
      epilogue();
    } else if (position.synced) {
      if (!overlap_comm_) {
        for (size_t p = 0; p < structure_.parameters.size(); ++p) {
          if (structure_.parameters[p].trainable && has_grad_[p]) reduce_ready(static_cast<int>(p));
        }
      }
      epilogue();
    }
  }

 private:
  void reduce_ready(int parameter) {
    if (stage_ >= 2 || position_.synced) reduce_independent(parameter);
  }

  // stage_1_and_2.py reduce_independent_p_g_buckets_and_remove_grads.
  void reduce_independent(int parameter) {
    const size_t p = static_cast<size_t>(parameter);
    const int64_t numel = structure_.parameters[p].numel();
    if (numel == 0) return;
    if (bucket_elements_ + numel > bucket_size_) flush();
    if (!ready_[p]) return;  // "if not getattr(param, "ds_grad_is_ready", True): return"
    if (already_reduced_[p]) {
      throw SyncError(VerdictKind::GradientReducedTwice, parameter,
                      reduced_twice_text(structure_.parameters[p].name, true),
                      "its gradient hook ran again after the bucket holding its first gradient was already reduced: "
                      "AccumulateGrad ran for it in more than one graph task of this backward (one per tiled-MLP shard "
                      "or reentrant checkpoint)");
    }
    bucket_.push_back(parameter);
    bucket_elements_ += numel;
  }

  // stage_1_and_2.py reduce_ipg_grads: average_tensor (the collective) first, then each bucketed
  // parameter is marked reduced; a parameter twice in one bucket asserts there.
  void flush() {
    if (bucket_.empty()) return;
    issue(Collective{fmt::format("reduce ipg bucket ({} params, {} elements)", bucket_.size(), bucket_elements_),
                     bucket_elements_ * 4});
    std::vector<int> bucket;
    bucket.swap(bucket_);
    bucket_elements_ = 0;
    for (int parameter : bucket) {
      const size_t p = static_cast<size_t>(parameter);
      if (already_reduced_[p]) {
        throw SyncError(VerdictKind::GradientReducedTwice, parameter,
                        reduced_twice_text(structure_.parameters[p].name, false),
                        "its gradient hook ran more than once in this backward (AccumulateGrad in more than one graph "
                        "task: one per tiled-MLP shard or reentrant checkpoint), so the bucket holds it twice");
      }
      already_reduced_[p] = true;
    }
  }

  // independent_gradient_partition_epilogue: reduce_ipg_grads, then params_already_reduced = False.
  void epilogue() {
    flush();
    std::fill(already_reduced_.begin(), already_reduced_.end(), false);
  }

  const ModelStructure& structure_;
  int stage_ = 2;
  bool overlap_comm_ = false;
  bool contiguous_gradients_ = true;
  int64_t bucket_size_ = 0;
  bool ds_grad_is_ready_setting_ = true;
  StepPosition position_;
  std::vector<bool> ready_;            // param.ds_grad_is_ready (an attribute: it stays as last set)
  std::vector<bool> already_reduced_;  // params_already_reduced
  std::vector<bool> has_grad_;         // param.grad is not None (this iteration)
  std::vector<int> bucket_;            // ipg bucket: parameters in hook order
  int64_t bucket_elements_ = 0;
};

}  // namespace

bool zero_stage_modelled(const Engine& engine) {
  return engine.kind == EngineKind::DeepSpeed && engine.deepspeed &&
         engine.deepspeed->zero_stage >= 0 && engine.deepspeed->zero_stage <= 3;
}

std::unique_ptr<SyncModel> make_zero_model(const Plan& plan, const ModelStructure& structure, int rank) {
  (void)rank;  // every rank runs the same rules; its schedule comes from the plan through the driver
  if (plan.engine.deepspeed->zero_stage == 0) return make_zero0_model(plan, structure);
  return std::make_unique<ZeroModel>(plan, structure);
}

SyncSimulation simulate_zero(const Plan& plan, const ModelStructure& structure, const SyncSimulationOptions& options) {
  if (plan.engine.deepspeed->zero_stage == 3) return simulate_zero3(plan, structure, options);
  return simulate_with_model(
      plan, structure, [&](int rank) { return make_zero_model(plan, structure, rank); }, options);
}

}  // namespace hookstream
