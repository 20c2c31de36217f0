#include "sim/sync/zero/zero3_model.h"

#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "sim/sync/rank_run.h"
#include "sim/sync/sync_model.h"
#include "sim/sync/zero/zero_common.h"

namespace hookstream {

namespace {

// What Python prints for stage3.py __reduce_and_partition_ipg_grads's
// `assert len(set(p.ds_id for p in params_in_bucket)) == len(params_in_bucket)`: a bare assert has
// no message, so the traceback ends in the exception's name alone (recorded from real DeepSpeed
// 0.19.8 by oracles/zero_worker.py).
constexpr const char* kDuplicateDsIdText = "AssertionError";
// stage3.py __add_grad_to_ipg_bucket: `bucket.elements + param.grad.numel()` on a None .grad.
constexpr const char* kGradNoneText = "'NoneType' object has no attribute 'numel'";

bool under(const std::string& path, const std::string& module) {
  return path == module || (path.size() > module.size() && path.compare(0, module.size(), module) == 0 &&
                            path[module.size()] == '.');
}

class Zero3Model : public SyncModel {
 public:
  Zero3Model(const Plan& plan, const ModelStructure& structure, int rank)
      : plan_(plan),
        structure_(structure),
        rank_(rank),
        bucket_size_(zero_reduce_bucket_size(plan)),
        persistence_threshold_(zero_persistence_threshold(plan)),
        ds_grad_is_ready_setting_(plan.tiled_mlp_ds_grad_is_ready.value_or(true)),
        leaf_mlp_(plan.z3_leaf_mlp) {
    const size_t n = structure.parameters.size();
    ready_.assign(n, true);
    reduced_.assign(n, false);
    leaf_of_.assign(n, -1);
    persistent_gathered_.assign(n, false);
    index_subtrees();
    if (leaf_mlp_) {
      // set_z3_leaf_modules: the block's parameters carry ds_z3_leaf_module and get no hook of their
      // own (stage3.py create_reduce_and_remove_grad_hooks: `if not z3_leaf_parameter(param)`);
      // the optimizer's groups hold the trainable ones only.
      for (const DecoderLayerUse& layer : structure.layers) {
        for (int p : mlp_parameters(structure, layer.index)) {
          if (structure.parameters[static_cast<size_t>(p)].trainable) leaf_of_[static_cast<size_t>(p)] = layer.index;
        }
      }
    }
  }

  std::string name() const override { return "DeepSpeed ZeRO-3"; }

  void begin_step(AutogradEngine&, const StepPosition& position) override {
    position_ = position;
    std::fill(reduced_.begin(), reduced_.end(), false);
  }

  SimTensor before_backward(AutogradEngine&, const StepPosition&, SimTensor output) override { return output; }

  // parameter_offload.py _pre_forward_module_hook -> pre_sub_module_forward_function ->
  // PartitionedParameterCoordinator.fetch_sub_module: the module's own parameters
  // (iter_params(module, recurse=z3_leaf_module(module))) that are not available are all-gathered.
  // Every parameter starts partitioned; a persistent one (ds_persist: ds_numel <=
  // param_persistence_threshold, mark_persistent_parameters) is gathered at its first use and never
  // released, the others are released again after the module (release_sub_module), so they are
  // gathered on every call, also in a checkpoint's recompute and a tiled MLP's per-shard
  // recompute. A leaf module fetches its whole subtree and its children get no hooks
  // (_register_deepspeed_module stops recursing at a leaf). Observed: a rank that skips a module
  // aborts its peer in this forward all-gather even when every parameter is persistent (Gloo "512
  // vs 256").
  SimTensor pre_forward(AutogradEngine& engine, const ModuleCall& call, SimTensor input) override {
    if (call.kind == ModuleKind::Linear) {
      if (!(leaf_mlp_ && inside_leaf(call.path))) fetch(call.path);
      return input;
    }
    if (call.kind != ModuleKind::Mlp || !leaf_mlp_) return input;
    fetch(call.path);
    // stage3.py: leaf_module.register_full_backward_hook(reduce_leaf_module_grads): torch's
    // BackwardHook runs it once the gradients of the block's inputs are computed (after its
    // parameters' AccumulateGrad nodes, which the engine runs first); only with grad enabled.
    if (!engine.grad_enabled()) return input;
    // DeepSpeed's TiledMLP wraps the block's forward: the block is called once, around
    // TiledMLP.apply, whose backward recomputes each shard through fn(self, x), not the module's
    // __call__ (ulysses_sp.py TiledMLP). The hook therefore fires once, after the last shard's
    // backward; the engine model calls the block per shard, so only the last shard's call gets it.
    if (plan_.layer_tiled(call.layer) && call.in_backward && tiled_shard_[call.layer] + 1 < tiled_shards_[call.layer]) {
      return input;
    }
    if (!input.requires_grad()) {
      leaf_on_output_ = call.layer;  // BackwardHook.setup_output_hook calls it from the output's grad
      return input;
    }
    const int layer = call.layer;
    return engine.function(fmt::format("BackwardHookFunction({})", call.path), {input}, [this, layer](AutogradEngine&) {
      reduce_leaf(layer);
      return std::vector<bool>{true};
    });
  }

  SimTensor post_forward(AutogradEngine& engine, const ModuleCall& call, SimTensor output) override {
    if (call.kind != ModuleKind::Mlp || leaf_on_output_ != call.layer) return output;
    leaf_on_output_ = -1;
    if (!engine.grad_enabled() || !output.requires_grad()) return output;
    const int layer = call.layer;
    return engine.function(fmt::format("BackwardHookFunction({} output)", call.path), {output},
                           [this, layer](AutogradEngine&) {
                             reduce_leaf(layer);
                             return std::vector<bool>{true};
                           });
  }

  // DeepSpeed's TiledMLP.backward: param.ds_grad_is_ready = i + 1 >= shards on its compute params.
  void tiled_chunk(const ModuleCall& mlp, int chunk, int chunks) override {
    if (mlp.layer < 0) return;
    tiled_shard_[mlp.layer] = chunk;
    tiled_shards_[mlp.layer] = chunks;
    if (!ds_grad_is_ready_setting_) return;
    for (int p : mlp_parameters(structure_, mlp.layer)) ready_[static_cast<size_t>(p)] = chunk + 1 >= chunks;
  }

  // stage3.py create_reduce_and_remove_grad_hooks: reduce_partition_and_remove_grads, registered
  // with register_grad_hook (post-accumulate-grad) on every trainable parameter outside a leaf
  // module; AccumulateGrad runs no post hook for an undefined gradient.
  void on_accumulate(AutogradEngine&, const AccumulateEvent& event, bool) override {
    if (!event.gradient_defined) return;
    const size_t p = static_cast<size_t>(event.parameter);
    if (!structure_.parameters[p].trainable) return;
    if (leaf_of_[p] >= 0) return;
    reduce_independent(event.parameter);
  }

  // engine.backward -> _backward_epilogue -> allreduce_gradients ->
  // overlapping_partition_gradients_reduce_epilogue -> independent_gradient_partition_epilogue on
  // every micro-step (stage 3 partitions gradients): the last bucket is reduce-scattered. With
  // engine.backward (what HF Trainer/accelerate call) the queued post-backward callback returns
  // early (engine.py _backward_post_hook), so this runs once, after loss.backward() returned.
  void end_step(AutogradEngine&, const StepPosition&) override { flush(); }

  void take_silent_findings(std::vector<Finding>& findings) override {
    for (Finding& f : silent_) findings.push_back(std::move(f));
    silent_.clear();
  }

 private:
  bool inside_leaf(const std::string& path) const {
    for (const DecoderLayerUse& layer : structure_.layers) {
      if (under(path, layer.path + ".mlp")) return true;
    }
    return false;
  }

  // One all-gather for the module's non-persistent parameters (all_gather_coalesced); none when
  // every parameter is persistent. Its size is what ranks must agree on.
  // The backward's re-gathers (the pre-backward Function on the module's outputs) are not issued:
  // ranks that ran the same forward run the same backward, and the forward already separates those
  // that did not. Only sizes reach the log: Gloo compares sizes, not which module.
  // A Linear's subtree: PEFT's lora.Linear calls base_layer, lora_A.default and lora_B.default as
  // modules inside its own call; a leaf block's subtree is fetched by the block.
  void fetch(const std::string& module) {
    int64_t elements = 0;
    for (const int index : subtree_parameters(module)) {
      const size_t p = static_cast<size_t>(index);
      const Parameter& param = structure_.parameters[p];
      if (param.numel() <= persistence_threshold_) {
        if (persistent_gathered_[p]) continue;
        persistent_gathered_[p] = true;
      }
      elements += param.numel();
    }
    if (elements == 0) return;
    issue(Collective{fmt::format("all_gather ({} elements)", elements), elements * 2});
  }

  // The parameters under `module` (under(): the module itself or a dotted descendant), in the
  // structure's order. Indexed once per model by every ancestor of each parameter's module: the
  // same Linear is fetched again in every iteration, checkpoint recompute and tiled-MLP shard, and
  // a scan of every parameter per fetch was most of a 70B ZeRO-3 fix search (bench/RESULTS.md, 2026-11-28).
  const std::vector<int>& subtree_parameters(const std::string& module) const {
    static const std::vector<int> kNone;
    const auto found = subtree_.find(module);
    return found == subtree_.end() ? kNone : found->second;
  }

  void index_subtrees() {
    for (size_t p = 0; p < structure_.parameters.size(); ++p) {
      const std::string& module = structure_.parameters[p].module;
      for (size_t dot = module.find('.'); dot != std::string::npos; dot = module.find('.', dot + 1)) {
        subtree_[module.substr(0, dot)].push_back(static_cast<int>(p));
      }
      subtree_[module].push_back(static_cast<int>(p));
    }
  }

  // stage3.py reduce_leaf_module_grads: every parameter of the leaf block, its gradient zero-filled
  // when the block did not use it ("MoE experts that didn't participate"), into the bucket.
  void reduce_leaf(int layer) {
    for (int p : mlp_parameters(structure_, layer)) {
      // param.grad = torch.zeros_like(param) when None: every leaf parameter enters the bucket.
      if (leaf_of_[static_cast<size_t>(p)] < 0) continue;
      reduce_independent(p);
    }
  }

  // stage3.py reduce_independent_p_g_buckets_and_remove_grads: flush when the bucket holds
  // something and would overflow; then, unless param.ds_grad_is_ready is False (an attribute: it
  // stays as last set), __add_grad_to_ipg_bucket. No params_already_reduced check at this stage.
  void reduce_independent(int parameter) {
    const size_t p = static_cast<size_t>(parameter);
    const int64_t numel = structure_.parameters[p].numel();
    if (bucket_elements_ > 0 && bucket_elements_ + numel > bucket_size_) {
      const bool holds_itself = std::find(bucket_.begin(), bucket_.end(), parameter) != bucket_.end();
      flush();
      // partition_grads ended with `param.grad = None` for every parameter of the flushed bucket,
      // this one included (its .grad held this shard's gradient, accumulated into the bucket view),
      // and __add_grad_to_ipg_bucket then reads param.grad.numel(). Observed: AttributeError.
      if (holds_itself && ready_[p]) {
        throw SyncError(VerdictKind::EngineError, parameter, kGradNoneText,
                        fmt::format("{}'s gradient hook ran again while its first gradient was still in the ipg "
                                    "bucket; the bucket was too full for the new entry, so the hook reduced it first, "
                                    "which set {}.grad = None (partition_grads), and then tried to bucket that None",
                                    structure_.parameters[p].name, structure_.parameters[p].name));
      }
    }
    if (!ready_[p]) return;
    bucket_.push_back(parameter);
    bucket_elements_ += numel;
  }

  // stage3.py __reduce_and_partition_ipg_grads: the ds_id-uniqueness assert first, then the
  // reduce-scatter of the bucket, then partition_grads: at micro_step_id == 0 the partition is
  // copied (overwriting what an earlier bucket of this backward reduced for the same parameter),
  // later added. micro_step_id counts engine.backward calls since engine.step() (stage3.py
  // clear_backward_seen_flag increments it at the next forward when the epilogue ran).
  void flush() {
    if (bucket_.empty()) return;
    std::set<int> seen;
    for (int parameter : bucket_) {
      if (seen.insert(parameter).second) continue;
      const Parameter& param = structure_.parameters[static_cast<size_t>(parameter)];
      throw SyncError(VerdictKind::GradientReducedTwice, parameter, kDuplicateDsIdText,
                      fmt::format("{}'s gradient hook put it into the same ipg bucket twice (AccumulateGrad ran for "
                                  "it in more than one graph task of this backward: one per tiled-MLP shard or "
                                  "checkpoint recompute) and the bucket did not flush in between, so the bucket's "
                                  "ds_id-uniqueness assert fails (a bare assert: no message)",
                                  param.name));
    }
    issue(Collective{fmt::format("reduce_scatter ipg bucket ({} elements)", bucket_elements_), bucket_elements_ * 2});
    for (int parameter : bucket_) {
      const size_t p = static_cast<size_t>(parameter);
      if (reduced_[p] && position_.step.micro_step == 0) overwritten(parameter);
      reduced_[p] = true;
    }
    bucket_.clear();
    bucket_elements_ = 0;
  }

  void overwritten(int parameter) {
    if (!silent_.empty()) return;  // the first overwrite names the rule; later steps repeat it
    const Parameter& param = structure_.parameters[static_cast<size_t>(parameter)];
    Finding f = parameter_finding(VerdictKind::WrongGradient, param, rank_, position_.step, Phase::Backward);
    f.error_text = "no error: the gradient partition reduced earlier in this backward is overwritten";
    f.explanation = fmt::format(
        "{} was reduce-scattered twice in this backward, in different ipg buckets (the bucket flushed between "
        "its two gradient hooks: one per tiled-MLP shard or checkpoint recompute); partition_grads copies "
        "at micro_step_id 0 instead of adding, so only the last shard's gradient reaches the optimizer",
        param.name);
    silent_.push_back(std::move(f));
  }

  const Plan& plan_;
  const ModelStructure& structure_;
  int rank_ = 0;
  int64_t bucket_size_ = 0;
  int64_t persistence_threshold_ = 0;
  bool ds_grad_is_ready_setting_ = true;
  bool leaf_mlp_ = false;
  StepPosition position_;
  std::vector<bool> ready_;     // param.ds_grad_is_ready
  std::vector<bool> reduced_;   // reduce-scattered in this micro-step's backward
  std::vector<int> leaf_of_;    // the leaf block (decoder layer) a parameter belongs to, -1 none
  std::vector<bool> persistent_gathered_;  // a persistent parameter, once gathered, stays
  std::map<std::string, std::vector<int>> subtree_;  // module path -> the parameters under it (index_subtrees)
  int leaf_on_output_ = -1;
  std::map<int, int> tiled_shard_;   // per tiled layer: the shard whose backward runs now
  std::map<int, int> tiled_shards_;  // and how many shards
  std::vector<int> bucket_;     // ipg bucket: parameters in hook order
  int64_t bucket_elements_ = 0;
  std::vector<Finding> silent_;
};

}  // namespace

SyncSimulation simulate_zero3(const Plan& plan, const ModelStructure& structure, const SyncSimulationOptions& options) {
  return simulate_with_model(
      plan, structure, [&](int rank) { return std::make_unique<Zero3Model>(plan, structure, rank); }, options);
}

}  // namespace hookstream
