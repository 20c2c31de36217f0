#include "sim/sync/fsdp1/fsdp1_model.h"

#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <memory>
#include <set>

#include "sim/inputs/model_config.h"
#include "sim/sync/fsdp1/fsdp1_pairing.h"
#include "sim/sync/rank_run.h"

namespace hookstream {

int64_t Fsdp1Unit::local_numel(size_t i, int rank, int64_t param_numel) const {
  const int64_t begin = offset[i], end = offset[i] + param_numel;
  const int64_t lo = std::max<int64_t>(begin, static_cast<int64_t>(rank) * shard_numel);
  const int64_t hi = std::min<int64_t>(end, static_cast<int64_t>(rank + 1) * shard_numel);
  return std::max<int64_t>(0, hi - lo);
}

std::string fsdp1_not_modelled_reason(const FsdpSettings& settings) {
  // A bitsandbytes-quantized base (qlora / load_in_4bit / load_in_8bit) is modelled: 4-bit weights
  // flatten as their packed bnb_4bit_quant_storage tensor (fsdp1_flat_element below); 8-bit
  // Int8Params are int8, which FSDP1 refuses at wrap time (Fsdp1Model::check_flattenable_dtypes).
  // Both measured on real FSDP1 + bitsandbytes 0.50.2 (tests/oracles/fsdp1_qlora_oracle_test.cc).
  if (settings.peft_wrap_policy && settings.peft_other_trainable_leaves) {
    return "adapter with lora_target_parameters under FSDP1 other than one expert tensor: PEFT's fsdp_auto_wrap_policy makes a "
           "ParamWrapper's lora_A / lora_B units of their own, which the wrapper reads without calling them; one [E, ...] expert "
           "tensor per module is modelled (the first forward raises on every rank, measured), nested wrappers and 2-D targets "
           "are not";
  }
  const std::string& policy = settings.auto_wrap_policy;
  if (!policy.empty() && policy != "TRANSFORMER_BASED_WRAP") {
    return "fsdp_config.auto_wrap_policy: " + policy + " (only TRANSFORMER_BASED_WRAP units are modelled)";
  }
  return "";
}

Fsdp1FlatElement fsdp1_flat_element(const Plan& plan, const Parameter& p) {
  if (!p.quantized) return {p.numel(), p.dtype, false};
  // bitsandbytes 0.50 Int8Params (load_in_8bit): an int8 tensor of the weight's shape.
  if (plan.load_in_8bit && !plan.load_in_4bit) return {p.numel(), p.dtype, true};
  // Params4bit: bitsandbytes/functional.py quantize_4bit packs two 4-bit codes per byte into
  // `torch.zeros(((n + 1) // mod, 1), dtype=quant_storage)`, mod = 2 * itemsize(quant_storage).
  // axolotl sets bnb_4bit_quant_storage: bfloat16 for qlora (src/axolotl/loaders/model.py
  // _set_quantization_config), so FSDP1 flattens (n + 1) / 4 bf16 elements (measured: a 16 x 16
  // q_proj is a [64, 1] bf16 Params4bit, real FSDP1's layer FlatParameter holds them as such).
  return {(p.numel() + 1) / (2 * dtype_bytes(DType::BFloat16)), DType::BFloat16, false};
}

namespace {

bool under(const std::string& name, const std::string& prefix) {
  return name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0 && name[prefix.size()] == '.';
}

// A FlatParameter's dtype: its parameters' (FSDP1 requires one dtype per FlatParameter), the
// trainable ones' first (PEFT keeps LoRA weights in fp32 beside a bf16 base).
DType flat_dtype_of(const Plan& plan, const ModelStructure& structure, const std::vector<int>& params) {
  for (int p : params) {
    if (structure.parameters[static_cast<size_t>(p)].trainable) return structure.parameters[static_cast<size_t>(p)].dtype;
  }
  return params.empty() ? DType::Float32 : fsdp1_flat_element(plan, structure.parameters[static_cast<size_t>(params.front())]).dtype;
}

}  // namespace

std::vector<Fsdp1Unit> fsdp1_units(const Plan& plan, const ModelStructure& structure) {
  // accelerate 1.15 (utils/dataclasses.py FullyShardedDataParallelPlugin.set_auto_wrap_policy):
  // TRANSFORMER_BASED_WRAP wraps every module of the named classes (default: the model's
  // _no_split_modules, the decoder layer); what no unit claims stays in the root unit.
  std::vector<Fsdp1Unit> units(1);
  units[0].name = "";
  for (const DecoderLayerUse& layer : structure.layers) {
    Fsdp1Unit u;
    u.name = layer.path;
    u.layer = layer.index;
    units.push_back(std::move(u));
  }
  if (plan.engine.fsdp.peft_wrap_policy) {
    // peft 0.21 utils/other.py fsdp_auto_wrap_policy: _or_policy(lambda_policy, transformer policy)
    // where lambda_policy_fn(module) = `len(list(module.named_children())) == 0 and
    // getattr(module, "weight", None) is not None and module.weight.requires_grad`. FSDP's
    // _recursive_wrap wraps children first, so these units nest inside the layer units and take
    // their parameters out of the layer's FlatParameter. A module is a leaf when no parameter
    // lives below it.
    for (const Parameter& p : structure.parameters) {
      if (!p.trainable || p.name != p.module + ".weight") continue;
      const bool leaf = std::none_of(structure.parameters.begin(), structure.parameters.end(),
                                     [&](const Parameter& q) { return under(q.module, p.module); });
      if (!leaf) continue;
      Fsdp1Unit u;
      u.name = p.module;
      u.adapter = true;
      units.push_back(std::move(u));
    }
  }
  for (size_t i = 0; i < structure.parameters.size(); ++i) {
    const Parameter& p = structure.parameters[i];
    // The innermost unit holding the parameter's module.
    size_t owner = 0;
    for (size_t u = 1; u < units.size(); ++u) {
      const bool inside = units[u].adapter ? p.module == units[u].name || under(p.module, units[u].name)
                                           : under(p.name, units[u].name);
      if (inside && units[u].name.size() > units[owner].name.size()) owner = u;
    }
    units[owner].params.push_back(static_cast<int>(i));
  }
  // FlatParamHandle._init_flat_param_and_metadata: with use_orig_params each parameter starts at a
  // multiple of 16 bytes (_get_aligned_numel), and the total is padded to the world size.
  const bool align = plan.engine.fsdp.use_orig_params.value_or(false);
  const int64_t world = std::max(1, plan.world_size);
  for (Fsdp1Unit& u : units) {
    u.dtype = flat_dtype_of(plan, structure, u.params);
    const int64_t alignment = align ? 16 / std::max(1, dtype_bytes(u.dtype)) : 0;
    int64_t total = 0;
    for (int p : u.params) {
      if (alignment > 0 && total % alignment != 0) total += alignment - total % alignment;
      u.offset.push_back(total);
      total += fsdp1_flat_element(plan, structure.parameters[static_cast<size_t>(p)]).numel;
    }
    u.numel = total;
    u.shard_numel = (total + world - 1) / world;
    for (int p : u.params) {
      if (structure.parameters[static_cast<size_t>(p)].trainable) {
        u.accumulator = p;
        break;
      }
    }
  }
  units.erase(std::remove_if(units.begin(), units.end(), [](const Fsdp1Unit& u) { return u.params.empty(); }),
              units.end());
  return units;
}

namespace {

// _common_utils.py HandleTrainingState.
enum class HandleState { Idle, Forward, BackwardPre, BackwardPost };

const char* state_name(HandleState s) {
  switch (s) {
    case HandleState::Idle: return "HandleTrainingState.IDLE";
    case HandleState::Forward: return "HandleTrainingState.FORWARD";
    case HandleState::BackwardPre: return "HandleTrainingState.BACKWARD_PRE";
    case HandleState::BackwardPost: return "HandleTrainingState.BACKWARD_POST";
  }
  return "";
}

class Fsdp1Model : public SyncModel {
 public:
  Fsdp1Model(const Plan& plan, const ModelStructure& structure, int rank)
      : plan_(plan), structure_(structure), rank_(rank), units_(fsdp1_units(plan, structure)) {
    // accelerate 1.15 FullyShardedDataParallelPlugin: FSDP_USE_ORIG_PARAMS defaults to false for FSDP1.
    use_orig_params_ = plan.engine.fsdp.use_orig_params.value_or(false);
    checking_order_ = plan.torch_distributed_debug == "DETAIL";
    unit_of_param_.assign(structure.parameters.size(), -1);
    accumulator_of_.resize(structure.parameters.size());
    for (size_t u = 0; u < units_.size(); ++u) {
      for (int p : units_[u].params) {
        unit_of_param_[static_cast<size_t>(p)] = static_cast<int>(u);
        accumulator_of_[static_cast<size_t>(p)] = units_[u].accumulator >= 0 ? units_[u].accumulator : p;
      }
    }
    state_.resize(units_.size());
  }

  std::string name() const override { return "FSDP1"; }

  void begin_iteration(AutogradEngine& engine, int iteration) override {
    engine.share_accumulators(accumulator_of_);
    if (iteration == 0) check_flattenable_dtypes();
    if (iteration == 0 && !use_orig_params_) check_uniform_requires_grad();
    if (iteration == 0) check_param_wrapper_reads();
  }

  void begin_step(AutogradEngine& engine, const StepPosition& position) override {
    (void)engine;
    position_ = position;
    unused_ = plan_.unused_modules_for(position.rank, position.step.iteration, position.step.micro_step);
    callback_queued_ = false;
    forward_mlp_calls_.clear();
    for (UnitState& s : state_) {
      s.handle = HandleState::Idle;
      s.ran_pre_backward = false;
      s.post_backward_tasks.clear();
      s.registered = false;
    }
  }

  SimTensor pre_forward(AutogradEngine& engine, const ModuleCall& call, SimTensor input) override {
    (void)engine;
    const int u = unit_of_call(call);
    if (u < 0) return input;
    if (call.kind == ModuleKind::Adapter || call.kind == ModuleKind::Leaf) return adapter_pre_forward(u, call, input);
    if (call.kind == ModuleKind::DecoderLayer) {
      layer_grad_enabled_ = engine.grad_enabled();
      forward_mlp_calls_[call.layer] = 0;
    }
    if (call.in_backward) {
      // A reentrant checkpoint's recompute runs the layer's inner forward, not
      // FullyShardedDataParallel.forward (HF's checkpoint and accelerate's checkpoint_wrapper sit
      // inside the unit): no unshard. FSDP's pre-backward hook on the unit's output ran just
      // before (_runtime_utils.py _pre_backward_hook); it does nothing if it already ran.
      pre_backward(engine, u);
      check_unsharded(engine, u, first_reads_of_layer(units_[static_cast<size_t>(u)].layer), call);
      return input;
    }
    // _pre_forward -> record_pre_forward -> _check_order, then _unshard: all-gather the
    // FlatParameter unless it is unsharded already.
    check_order(u);
    unshard(u, "forward");
    state_[static_cast<size_t>(u)].handle = HandleState::Forward;
    return input;
  }

  SimTensor post_forward(AutogradEngine& engine, const ModuleCall& call, SimTensor output) override {
    if (call.kind == ModuleKind::Mlp) check_stale_adapter_views(call, engine.grad_enabled());
    const int u = unit_of_call(call);
    if (u < 0) return output;
    if (call.kind == ModuleKind::Adapter || call.kind == ModuleKind::Leaf) return adapter_post_forward(engine, u, output);
    if (call.in_backward) return output;
    UnitState& s = state_[static_cast<size_t>(u)];
    s.handle = HandleState::Idle;
    // _post_forward -> _reshard: FULL_SHARD frees the unsharded FlatParameter after forward,
    // except the root's ("the intention that they are immediately used for backward").
    if (!units_[static_cast<size_t>(u)].name.empty()) s.unsharded = false;
    // _register_pre_backward_hooks: a hook on the output tensors that runs _pre_backward_hook.
    if (!engine.grad_enabled() || !output.requires_grad()) return output;
    auto self = this;
    return engine.function(fmt::format("FSDP pre-backward ({})", units_[static_cast<size_t>(u)].display()), {output},
                           [self, u](AutogradEngine& e) {
                             self->pre_backward(e, u);
                             return std::vector<bool>{true};
                           });
  }

  void tiled_chunk(const ModuleCall& mlp, int chunk, int chunks) override {
    (void)chunks;
    if (mlp.layer < 0) return;
    const int u = unit_of_layer(mlp.layer);
    if (u < 0) return;
    std::vector<Read> reads;
    const DecoderLayerUse& layer = structure_.layers[static_cast<size_t>(mlp.layer)];
    const int64_t seq = plan_.sequence_len_for(position_.rank, position_.step.iteration, position_.step.micro_step);
    const int64_t size = (seq + chunks - 1) / chunks;  // torch.chunk
    const int64_t rows = plan_.micro_batch_size * std::min<int64_t>(size, seq - chunk * size);
    for (const LinearUse* use : {&layer.gate, &layer.up, &layer.down}) add_linear(reads, *use, rows);
    check_unsharded_reads(u, reads, fmt::format("tiled_mlp chunk {} of {} (layer {})", chunk + 1, chunks, mlp.layer));
    lose_adapter_gradients(layer, chunk, chunks);
  }

  // Observed on real FSDP1 2.11 (tests/plans/fsdp1/lora_tiled_function_returns_grads.yaml,
  // lora_tiled_grad_then_backward.yaml): a tiled MLP chunk whose weight gradients come from
  // torch.autograd.grad(out, [x] + weights) takes the weights as it looked them up before the
  // chunk's recompute. A weight in its own unit (a LoRA A/B under PEFT's wrap policy) is
  // unsharded afresh by its own module call inside the recompute, which computes with new views
  // of the FlatParameter (_flat_param.py _use_unsharded_views): the looked-up tensor is not in the
  // chunk's graph, autograd.grad gives None (allow_unused) and that chunk's gradient is lost: no
  // error, the reduced gradient is wrong. A weight of the layer's own unit is unsharded from the
  // layer's pre-backward on, the same tensor throughout: its gradient arrives.
  void lose_adapter_gradients(const DecoderLayerUse& layer, int chunk, int chunks) {
    const TiledBackward strategy = plan_.tiled_mlp_backward;
    const bool by_autograd_grad = strategy == TiledBackward::FunctionReturnsGrads ||
                                  (strategy == TiledBackward::GradThenBackward && chunk + 1 < chunks);
    if (!by_autograd_grad) return;
    for (int p : adapter_mlp_weights(layer)) lost_gradients_.insert(p);
  }

  // The tiled MLP's trainable weights (oracles/ddp_worker.py mlp_trainable_weights) that sit in
  // adapter units of their own.
  std::vector<int> adapter_mlp_weights(const DecoderLayerUse& layer) const {
    std::vector<int> out;
    for (const LinearUse* use : {&layer.gate, &layer.up, &layer.down}) {
      if (use->weight >= 0 && module_unused(unused_, structure_.parameters[static_cast<size_t>(use->weight)].module)) continue;
      for (int p : {use->weight, use->bias, use->lora_a, use->lora_b}) {
        if (p < 0 || !structure_.parameters[static_cast<size_t>(p)].trainable) continue;
        if (module_unused(unused_, structure_.parameters[static_cast<size_t>(p)].module)) continue;
        const int u = unit_of_param_[static_cast<size_t>(p)];
        if (u >= 0 && units_[static_cast<size_t>(u)].adapter) out.push_back(p);
      }
    }
    return out;
  }

  // Observed on real FSDP1 2.11 (tests/plans/fsdp1/lora_tiled_function_returns_grads_orig_false.yaml):
  // with use_orig_params false a module's weight is a plain view of its FlatParameter, made by
  // _use_unsharded_views from split() (a function returning several views); every later unshard
  // set_()s the FlatParameter in place. A weight looked up while its unit was sharded (an adapter
  // unit outside its own call) and given to TiledMLP.apply as an input raises when apply records
  // the Function's inputs, after the MLP's forward (which unsharded the unit again). The same stale
  // views given to torch.autograd.grad in a chunk's backward did not raise
  // (lora_tiled_grad_then_backward_orig_false.yaml): their gradient is lost as with use_orig_params.
  void check_stale_adapter_views(const ModuleCall& mlp, bool grad_enabled) {
    if (use_orig_params_ || grad_enabled || mlp.layer < 0 || !plan_.layer_tiled(mlp.layer)) return;
    const DecoderLayerUse& layer = structure_.layers[static_cast<size_t>(mlp.layer)];
    // TiledMLP.forward calls the MLP once per shard under no_grad; apply() records its weight
    // inputs after the last one, if the layer runs with grad (not a reentrant checkpoint's forward).
    const int shards = plan_.tiled_shards_for(position_.rank, position_.step.iteration, position_.step.micro_step);
    if (!(layer_grad_enabled_ && plan_.tiled_mlp_weights_as_inputs && ++forward_mlp_calls_[mlp.layer] == shards)) return;
    const std::vector<int> stale = adapter_mlp_weights(layer);
    if (stale.empty()) return;
    const Parameter& first = structure_.parameters[static_cast<size_t>(stale.front())];
    throw SyncError(
        VerdictKind::EngineError, stale.front(),
        "Output 0 of ViewBackward0 is a view and its base or another view of its base has been modified inplace. This "
        "view is the output of a function that returns multiple views. Such functions do not allow the output views to "
        "be modified inplace. You should replace the inplace operation by an out-of-place one.",
        fmt::format("the tiled MLP of layer {} hands {} to TiledMLP.apply as it looked it up while its FSDP1 unit "
                    "was sharded; with use_orig_params false that is a view of the FlatParameter from an earlier "
                    "unshard, whose base the unshard inside the MLP's call modified in place. Fix: "
                    "fsdp_config.use_orig_params: true{}",
                    mlp.layer, first.name,
                    plan_.engine.fsdp.where.count("use_orig_params") ? " (" + plan_.engine.fsdp.where.at("use_orig_params") + ")" : ""),
        flat_name(unit_of_param_[static_cast<size_t>(stale.front())]));
  }

  SimTensor before_backward(AutogradEngine& engine, const StepPosition& position, SimTensor output) override {
    (void)engine;
    (void)position;
    return output;
  }

  void on_accumulate(AutogradEngine& engine, const AccumulateEvent& event, bool grad_defined_after) override {
    const int u = unit_of_param_[static_cast<size_t>(event.parameter)];
    if (u < 0) return;
    post_backward(engine, u, event.task, grad_defined_after);
  }

  void on_manual_accumulate(int parameter) override {
    const int u = unit_of_param_[static_cast<size_t>(parameter)];
    if (u < 0) return;
    // An adapter unit's weight: autograd.grad gave None for the looked-up tensor, so the Function
    // writes no .grad (lose_adapter_gradients recorded the loss).
    if (units_[static_cast<size_t>(u)].adapter) return;
    // Observed on real FSDP1 2.11 (docs/engines/fsdp1.md): a tiled MLP that writes param.grad
    // itself (grad-then-backward) writes it on a view of the unsharded FlatParameter ("The .grad
    // attribute of a Tensor that is not a leaf Tensor is being accessed") and the process dies in
    // loss.backward() with SIGSEGV.
    throw SyncError(VerdictKind::EngineError, -1, "Fatal Python error: Segmentation fault",
                    fmt::format("the tiled MLP writes {}.grad by hand; under FSDP1 that parameter is a view of {}'s "
                                "FlatParameter, not a leaf: the real process crashed (SIGSEGV) in loss.backward(). "
                                "Fix: {}",
                                structure_.parameters[static_cast<size_t>(parameter)].name,
                                units_[static_cast<size_t>(u)].display(),
                                fix_alternatives({"tiled_mlp backward that returns the weights' gradients from the "
                                                  "Function (one AccumulateGrad)"})),
                    flat_name(u));
  }

  void end_step(AutogradEngine& engine, const StepPosition& position) override {
    (void)engine;
    for (int p : lost_gradients_) {
      if (!reported_lost_.insert({position.step.iteration, p}).second) continue;
      const Parameter& param = structure_.parameters[static_cast<size_t>(p)];
      Finding f = parameter_finding(VerdictKind::WrongGradient, param, rank_, position.step, Phase::Backward);
      f.graph_tasks.push_back("tiled_mlp chunk [autograd.grad]");
      f.error_text = "no error: the tiled MLP's autograd.grad returned None for this weight, whose FSDP1 unit the "
                     "chunk's recompute unsharded again";
      f.explanation = fmt::format(
          "{} is its own FSDP1 unit ({}: PEFT's fsdp_auto_wrap_policy); the tiled MLP looked the weight up before the "
          "chunk's recompute, whose call of the module unsharded it into new views, so torch.autograd.grad found the "
          "looked-up tensor unused and the chunk's gradient never reached the FlatParameter. Fix: {}",
          param.name, units_[static_cast<size_t>(unit_of_param_[static_cast<size_t>(p)])].display(),
          fix_alternatives({"a tiled MLP whose backward runs torch.autograd.backward per chunk (it reaches the unit's "
                            "AccumulateGrad)",
                            "tiled_mlp: false"}));
      findings_.push_back(std::move(f));
    }
    lost_gradients_.clear();
  }

  void end_iteration(int iteration, std::vector<Finding>& findings) override {
    (void)iteration;
    for (Finding& f : findings_) findings.push_back(std::move(f));
    findings_.clear();
  }

 private:
  struct UnitState {
    bool unsharded = false;
    HandleState handle = HandleState::Idle;
    bool ran_pre_backward = false;
    bool registered = false;
    std::vector<int> post_backward_tasks;
  };
  struct Read {
    int parameter = -1;
    int64_t rows = 0;     // rows of the activation the op multiplies (linear), or -1 for a norm
    int norm_dim = 2;     // norm weights: the activation's last dimension index
    int64_t in = 0;       // linear in_features
  };

  std::string flat_name(int u) const {
    const Fsdp1Unit& unit = units_[static_cast<size_t>(u)];
    return unit.name.empty() ? std::string("_flat_param (root unit)") : unit.name + "._flat_param";
  }

  int unit_of_layer(int layer) const {
    for (size_t u = 0; u < units_.size(); ++u) {
      if (units_[u].layer == layer) return static_cast<int>(u);
    }
    return -1;
  }

  // A PEFT-wrapped LoRA A/B module: its own FullyShardedDataParallel.forward runs on every call,
  // also when a reentrant checkpoint's recompute or a tiled MLP chunk calls it inside backward
  // (the checkpoint sits inside the layer unit, around these units). _pre_forward and
  // _post_forward skip only while the handle is BACKWARD_PRE ("For `fully_shard` + `checkpoint`,
  // skip pre-forward logic in the recomputed forward"); otherwise they unshard, then reshard
  // (FULL_SHARD, not the root) and hook the output again, so each call reads unsharded weights.
  SimTensor adapter_pre_forward(int u, const ModuleCall& call, SimTensor input) {
    UnitState& s = state_[static_cast<size_t>(u)];
    if (s.handle == HandleState::BackwardPre) return input;
    check_order(u);
    unshard(u, call.in_backward ? "backward" : "forward");
    s.handle = HandleState::Forward;
    return input;
  }

  SimTensor adapter_post_forward(AutogradEngine& engine, int u, SimTensor output) {
    UnitState& s = state_[static_cast<size_t>(u)];
    if (s.handle == HandleState::BackwardPre) return output;
    s.unsharded = false;
    s.handle = HandleState::Idle;
    // _register_pre_backward_hooks: only with grad enabled; resets _ran_pre_backward_hook (the
    // unit may be unsharded for backward again, once per forward that recorded a graph).
    if (!engine.grad_enabled()) return output;
    s.ran_pre_backward = false;
    if (!output.requires_grad()) return output;
    return engine.function(fmt::format("FSDP pre-backward ({})", units_[static_cast<size_t>(u)].display()), {output},
                           [this, u](AutogradEngine& e) {
                             pre_backward(e, u);
                             return std::vector<bool>{true};
                           });
  }

  int unit_of_adapter(const std::string& module) const {
    for (size_t u = 0; u < units_.size(); ++u) {
      if (units_[u].adapter && units_[u].name == module) return static_cast<int>(u);
    }
    return -1;
  }

  int unit_of_call(const ModuleCall& call) const {
    if (call.kind == ModuleKind::Adapter || call.kind == ModuleKind::Leaf) return unit_of_adapter(call.path);
    if (call.kind == ModuleKind::Root) {
      for (size_t u = 0; u < units_.size(); ++u) {
        if (units_[u].name.empty()) return static_cast<int>(u);
      }
      return -1;
    }
    if (call.kind == ModuleKind::DecoderLayer) return unit_of_layer(call.layer);
    return -1;
  }

  // _exec_order_utils.py _check_order: with TORCH_DISTRIBUTED_DEBUG=DETAIL, in the first iteration
  // (until the first post-backward final callback calls next_iter), every unit's pre-forward
  // all-gathers the number of handles it unshards (always 1), then their indices, and compares them
  // across ranks (sim/sync/fsdp1/fsdp1_pairing.cc).
  void check_order(int u) {
    if (!checking_order_ || exec_order_iteration_ > 0) return;
    const Fsdp1Unit& unit = units_[static_cast<size_t>(u)];
    for (const char* what : {"number of handles", "handle index"}) {
      Collective c;
      c.what = fmt::format("forward-order check: all_gather_into_tensor of the {} ({})", what, unit.display());
      c.bytes = 4;
      c.op = "_ALLGATHER_BASE";
      c.shape = {1};
      c.dtypes = {"Int"};
      c.payload = std::string(what) == "handle index" ? kExecOrderIndexPayload + unit.display() : "1";
      c.phase = Phase::Forward;
      issue(std::move(c));
    }
  }

  void unshard(int u, const char* where) {
    UnitState& s = state_[static_cast<size_t>(u)];
    if (s.unsharded) return;
    s.unsharded = true;
    const Fsdp1Unit& unit = units_[static_cast<size_t>(u)];
    Collective c;
    c.what = fmt::format("all_gather {} ({})", unit.display(), where);
    c.bytes = unit.shard_numel * plan_.world_size * dtype_bytes(unit.dtype);
    // _flat_param.py _all_gather_flat_param: a CPU FlatParameter goes through dist.all_gather
    // (OpType ALLGATHER, fingerprinted by its input, the shard); on CUDA it is
    // all_gather_into_tensor (_ALLGATHER_BASE) with the same input.
    c.op = "ALLGATHER";
    c.shape = {unit.shard_numel};
    c.dtypes = {c10_scalar_type_name(unit.dtype)};
    c.payload = unit.display();
    c.phase = std::string(where) == "forward" ? Phase::Forward : Phase::Backward;
    issue(std::move(c));
  }

  void pre_backward(AutogradEngine& engine, int u) {
    UnitState& s = state_[static_cast<size_t>(u)];
    if (s.ran_pre_backward) return;  // "Only run the pre-backward hook once per group of handles"
    if (!callback_queued_) {
      // The root's first pre-backward queues _post_backward_final_callback on the running task
      // (the outer backward: the root's output is where the loss's gradient arrives).
      callback_queued_ = true;
      engine.queue_callback([this] { final_callback(); });
    }
    s.handle = HandleState::BackwardPre;
    unshard(u, "backward");
    s.ran_pre_backward = true;
  }

  // _post_backward_hook, on the FlatParameter's AccumulateGrad.
  void post_backward(AutogradEngine& engine, int u, int task, bool grad_defined) {
    UnitState& s = state_[static_cast<size_t>(u)];
    if (s.handle != HandleState::BackwardPre && s.handle != HandleState::BackwardPost) {
      throw SyncError(VerdictKind::EngineError, -1,
                      fmt::format("Expects `BACKWARD_PRE` or `BACKWARD_POST` state but got {}", state_name(s.handle)),
                      "the post-backward hook of " + units_[static_cast<size_t>(u)].display() +
                          " ran before its pre-backward hook (_runtime_utils.py _post_backward_hook)",
                      flat_name(u));
    }
    s.handle = HandleState::BackwardPost;
    const bool again = !s.post_backward_tasks.empty() && !s.unsharded;
    s.post_backward_tasks.push_back(task);
    (void)engine;
    if (!grad_defined) return;  // "if flat_param.grad is None: return"
    if (again) {
      // Observed on real FSDP1 2.11 (tests/plans/fsdp1/tiled_one_shard.yaml): the FlatParameter's
      // AccumulateGrad runs again after its post-backward hook resharded it (a per-chunk tiled MLP
      // backward, then the unit's attention in the outer task): the process dies with SIGSEGV.
      throw SyncError(VerdictKind::EngineError, -1, "Fatal Python error: Segmentation fault",
                      fmt::format("the FlatParameter of {} accumulates a gradient again in {} after its post-backward "
                                  "hook already resharded it in another graph task (a nested backward inside the "
                                  "unit); the real process crashed (SIGSEGV). Fix: {}",
                                  units_[static_cast<size_t>(u)].display(), task_text(engine.task(task)),
                                  fix_alternatives({"a tiled MLP whose Function returns the weights' gradients"})),
                      flat_name(u));
    }
    // _post_backward_reshard: FULL_SHARD frees the unsharded FlatParameter in backward.
    s.unsharded = false;
    if (!position_.synced) return;  // no_sync(): keep the unsharded gradient
    const Fsdp1Unit& unit = units_[static_cast<size_t>(u)];
    // _runtime_utils.py _reduce_grad: dist.reduce_scatter_tensor(new_sharded_grad, padded_unsharded_grad),
    // fingerprinted as {input, output} (ProcessGroupWrapper::_reduce_scatter_base), shown by the input.
    Collective c;
    c.what = fmt::format("reduce_scatter {}", unit.display());
    c.bytes = unit.shard_numel * plan_.world_size * dtype_bytes(unit.dtype);
    c.op = "_REDUCE_SCATTER_BASE";
    c.shape = {unit.shard_numel * plan_.world_size};
    c.dtypes = {c10_scalar_type_name(unit.dtype), c10_scalar_type_name(unit.dtype)};
    c.payload = unit.display();
    c.phase = Phase::Backward;
    issue(std::move(c));
  }

  void final_callback() {
    ++exec_order_iteration_;  // _exec_order_data.next_iter()
    // _post_backward_final_callback: _catch_all_reshard frees units whose post-backward hook
    // did not run (their output did not reach the loss); _finalize_params resets the states.
    for (UnitState& s : state_) {
      if (!units_.empty()) s.unsharded = false;
      s.handle = HandleState::Idle;
    }
    // The root keeps nothing unsharded after the backward either. A frozen FlatParameter (a layer
    // unit under PEFT's wrap policy) has no AccumulateGrad and no post-backward hook: it stays
    // unsharded from its pre-backward until here. Real FSDP1 reshards it earlier, in
    // _post_backward_reshard_only_hook, a multi-grad hook on the inputs of the unit's *first*
    // forward of the backward (_register_post_backward_reshard_only_hook registers once), which
    // fires after every use of the unit in that backward: no read follows it, and a reshard issues
    // no collective, so the verdicts and the paired collectives are the same.
  }

  // PEFT's fsdp_auto_wrap_policy (peft 0.21 utils/other.py: a lambda policy on every leaf module
  // whose weight requires grad) makes a ParamWrapper's lora_A / lora_B units of their own. The
  // wrapper never calls them: ParamWrapper.get_delta_factors (peft/tuners/lora/layer.py) reads
  // `self.lora_A[adapter].weight` directly, and FullyShardedDataParallel.forward (the only place
  // FSDP1 unshards a unit) never runs, so the first expert block's forward reads the sharded
  // parameter. With use_orig_params it is the rank's 1-D view of its shard (_use_sharded_views), and
  // `weight_A.reshape(num_experts, -1, weight_A.shape[-1])` raises; without, the FlatParameter's
  // views are re-pointed in place (_use_unsharded_views / set_) under autograd and the reshape of the
  // multi-output view raises. Measured on real FSDP1 (torch 2.11, PEFT 0.21, transformers 5.17,
  // Gloo, world 2): every rank raises in the first forward, texts as below
  // (tests/oracles/fsdp1_param_wrapper_oracle_test.cc).
  void check_param_wrapper_reads() const {
    if (!plan_.engine.fsdp.peft_wrap_policy || plan_.lora_target_parameters.empty()) return;
    const std::string lora_a = ".lora_A.default";
    for (size_t i = 0; i < structure_.parameters.size(); ++i) {
      const Parameter& p = structure_.parameters[i];
      if (p.module.size() <= lora_a.size() || p.module.compare(p.module.size() - lora_a.size(), lora_a.size(), lora_a) != 0) continue;
      const std::string wrapper = p.module.substr(0, p.module.size() - lora_a.size());
      // A ParamWrapper's base tensors sit under wrapper.base_layer as bare parameters (lora.Linear's
      // under base_layer.weight): the wrapped [E, ...] expert tensor.
      int64_t experts = 0;
      for (const Parameter& base : structure_.parameters) {
        if (base.module == wrapper + ".base_layer" && base.shape.size() == 3 && base.name.substr(base.name.rfind('.') + 1) != "weight") {
          experts = base.shape[0];
        }
      }
      if (experts == 0 || module_unused(unused_, wrapper)) continue;
      const int unit = unit_of_param_[i];
      if (unit < 0) continue;
      const Fsdp1Unit& u = units_[static_cast<size_t>(unit)];
      int64_t local = 0;
      for (size_t k = 0; k < u.params.size(); ++k) {
        if (u.params[k] == static_cast<int>(i)) local = u.local_numel(k, rank_, p.numel());
      }
      std::string text;
      if (!use_orig_params_) {
        text = "Output 0 of ViewBackward0 is a view and its base or another view of its base has been modified inplace. This view is "
               "the output of a function that returns multiple views. Such functions do not allow the output views to be modified "
               "inplace. You should replace the inplace operation by an out-of-place one.";
      } else if (local > 0) {
        text = fmt::format("shape '[{}, -1, {}]' is invalid for input of size {}", experts, local, local);
      } else {
        text = fmt::format("cannot reshape tensor of 0 elements into shape [{}, -1, 0] because the unspecified dimension size -1 can be "
                           "any value and is ambiguous",
                           experts);
      }
      throw SyncError(VerdictKind::ShardedParameterUse, static_cast<int>(i), text,
                      fmt::format("{} is a FSDP1 unit of its own (PEFT's fsdp_auto_wrap_policy wraps every leaf whose weight requires "
                                  "grad), but its ParamWrapper reads its weight without calling it, so FSDP1 never unshards it: "
                                  "get_delta_factors reshapes the sharded {} ({} of its {} elements on rank {}) in the first forward. "
                                  "lora_target_parameters cannot train under FSDP1 with PEFT's wrap policy; FSDP2 (fsdp_version: 2) "
                                  "or DeepSpeed shard it differently",
                                  p.module, use_orig_params_ ? "1-D view" : "view", local, p.numel(), rank_),
                      p.module)
          .with_phase(Phase::Forward);
    }
  }

  // _flat_param.py _validate_tensors_to_flatten: `if not tensor.is_floating_point(): raise
  // ValueError("Cannot flatten integer dtype tensors")`. bitsandbytes' Int8Params (load_in_8bit) are
  // int8, so wrapping a unit that holds one fails on every rank, before any forward (measured on real
  // FSDP1 2.11 + bitsandbytes 0.50.2: adapter lora, load_in_8bit, tests/plans/fsdp1_qlora/). The
  // first unit FSDP1 flattens is the innermost (_recursive_wrap wraps children first): a layer's.
  void check_flattenable_dtypes() const {
    for (size_t pass = 0; pass < 2; ++pass) {
      for (const Fsdp1Unit& unit : units_) {
        if (unit.name.empty() != (pass == 1)) continue;  // the root unit is flattened last
        for (int p : unit.params) {
          if (!fsdp1_flat_element(plan_, structure_.parameters[static_cast<size_t>(p)]).integer) continue;
          throw SyncError(VerdictKind::EngineError, -1, "Cannot flatten integer dtype tensors",
                          fmt::format("{} holds {}, a bitsandbytes Int8Params (load_in_8bit): FSDP1 flattens floating-point "
                                      "tensors only (_flat_param.py _validate_tensors_to_flatten). Fix: load_in_4bit with "
                                      "adapter: qlora (Params4bit packed in bnb_4bit_quant_storage bfloat16 flattens), or "
                                      "no quantization",
                                      unit.display(), structure_.parameters[static_cast<size_t>(p)].name),
                          unit.name.empty() ? "_flat_param (root unit)" : unit.name + "._flat_param");
        }
      }
    }
  }

  void check_uniform_requires_grad() const {
    for (const Fsdp1Unit& unit : units_) {
      bool any = false, all = true;
      for (int p : unit.params) {
        const bool t = structure_.parameters[static_cast<size_t>(p)].trainable;
        any = any || t;
        all = all && t;
      }
      if (any && !all) {
        const std::string where = plan_.engine.fsdp.where.count("use_orig_params")
                                      ? plan_.engine.fsdp.where.at("use_orig_params")
                                      : std::string("fsdp_config");
        throw SyncError(VerdictKind::EngineError, -1,
                        "Must flatten tensors with uniform `requires_grad` when `use_orig_params=False`",
                        fmt::format("{} mixes frozen and trainable parameters (LoRA): FSDP1 flattens them into one "
                                    "FlatParameter only with use_orig_params (_flat_param.py "
                                    "_init_flat_param_and_metadata). Fix: fsdp_config.use_orig_params: true ({})",
                                    unit.display(), where),
                        unit.name.empty() ? "_flat_param (root unit)" : unit.name + "._flat_param");
      }
    }
  }

  void add_linear(std::vector<Read>& reads, const LinearUse& use, int64_t rows) const {
    if (use.weight < 0) return;
    const Parameter& w = structure_.parameters[static_cast<size_t>(use.weight)];
    if (module_unused(unused_, w.module)) return;
    const int64_t in = w.shape.size() == 2 ? w.shape[1] : 0;
    reads.push_back(Read{use.weight, rows, 0, in});
    if (use.lora_a >= 0 && use.lora_b >= 0 && !module_unused(unused_, structure_.parameters[static_cast<size_t>(use.lora_a)].module) &&
        !module_unused(unused_, structure_.parameters[static_cast<size_t>(use.lora_b)].module)) {
      reads.push_back(Read{use.lora_a, rows, 0, in});
      const Parameter& a = structure_.parameters[static_cast<size_t>(use.lora_a)];
      reads.push_back(Read{use.lora_b, rows, 0, a.shape.empty() ? 0 : a.shape[0]});
    }
  }

  void add_norm(std::vector<Read>& reads, int parameter, int dim) const {
    if (parameter < 0) return;
    if (module_unused(unused_, structure_.parameters[static_cast<size_t>(parameter)].module)) return;
    reads.push_back(Read{parameter, -1, dim, 0});
  }

  // The parameters a decoder layer's forward reads, in the order transformers' LlamaDecoderLayer
  // (and oracles/ddp_worker.py TinyModel.decoder_layer) reads them.
  std::vector<Read> first_reads_of_layer(int index) const {
    std::vector<Read> reads;
    if (index < 0) return reads;
    const DecoderLayerUse& layer = structure_.layers[static_cast<size_t>(index)];
    const int64_t rows =
        plan_.micro_batch_size * plan_.sequence_len_for(position_.rank, position_.step.iteration, position_.step.micro_step);
    if (!module_unused(unused_, layer.path + "." + layer.mixer_module)) {
      add_norm(reads, layer.input_norm, 2);
      for (const LinearUse& use : layer.mixer_in) add_linear(reads, use, rows);  // a recurrent mixer's input projections
      add_linear(reads, layer.q, rows);
      add_linear(reads, layer.k, rows);
      add_linear(reads, layer.v, rows);
      add_norm(reads, layer.q_norm, 3);
      add_norm(reads, layer.k_norm, 3);
      add_linear(reads, layer.o, rows);
      add_linear(reads, layer.mixer_out, rows);  // FalconH1: the Mamba2 mixer's out_proj beside attention
    }
    if (!module_unused(unused_, layer.path + "." + layer.mlp_module)) {
      add_norm(reads, layer.post_attention_norm, 2);
      add_linear(reads, layer.gate, rows);
      add_linear(reads, layer.up, rows);
      add_linear(reads, layer.down, rows);
    }
    return reads;
  }

  void check_unsharded(AutogradEngine& engine, int u, const std::vector<Read>& reads, const ModuleCall& call) {
    (void)engine;
    check_unsharded_reads(u, reads, "recompute of " + call.path);
  }

  // Compute on a unit whose FlatParameter was resharded: with use_orig_params the module's
  // parameters are 1-D views of this rank's shard (_flat_param.py _use_sharded_views); without,
  // they are views of the freed unsharded storage (size 0). The first read that does not fit
  // raises; the texts are ATen's, as real FSDP1 2.11 raised them (docs/engines/fsdp1.md).
  void check_unsharded_reads(int u, const std::vector<Read>& reads, const std::string& where) {
    const UnitState& s = state_[static_cast<size_t>(u)];
    if (s.unsharded) return;
    const Fsdp1Unit& unit = units_[static_cast<size_t>(u)];
    for (const Read& r : reads) {
      const auto it = std::find(unit.params.begin(), unit.params.end(), r.parameter);
      if (it == unit.params.end()) continue;
      const size_t i = static_cast<size_t>(it - unit.params.begin());
      const Parameter& p = structure_.parameters[static_cast<size_t>(r.parameter)];
      const int64_t numel = fsdp1_flat_element(plan_, p).numel;
      std::string text;
      if (!use_orig_params_) {
        if (p.shape.size() == 2) {
          text = fmt::format(
              "setStorage: sizes [{}, {}], strides [1, {}], storage offset {}, and itemsize {} requiring a storage size "
              "of {} are out of bounds for storage of size 0",
              p.shape[1], p.shape[0], p.shape[1], unit.offset[i], dtype_bytes(unit.dtype),
              (unit.offset[i] + numel) * dtype_bytes(unit.dtype));
        } else {
          // An elementwise op on a 1-D view of the freed storage is not bounds-checked: observed
          // as SIGSEGV in the norm (docs/engines/fsdp1.md).
          text = "Fatal Python error: Segmentation fault";
        }
      } else {
        const int64_t local = unit.local_numel(i, rank_, numel);
        if (r.rows < 0) {
          if (local == numel) continue;  // a 1-D parameter wholly in this rank's shard reads fine
          text = fmt::format("The size of tensor a ({}) must match the size of tensor b ({}) at non-singleton dimension {}",
                             numel, local, r.norm_dim);
        } else {
          if (local == r.in) continue;  // F.linear with a 1-D weight of in_features elements does not raise here
          text = fmt::format("size mismatch, got input ({}), mat ({}x{}), vec ({})", r.rows, r.rows, r.in, local);
        }
      }
      std::vector<std::string> tasks;
      throw SyncError(
          VerdictKind::ShardedParameterUse, -1, text,
          fmt::format("{} reads {} after FSDP1 resharded {}: the FlatParameter's post-backward hook (on its one "
                      "AccumulateGrad, _runtime_utils.py _post_backward_hook) already ran {} time(s) this backward, "
                      "freed the unsharded parameters{} — a nested backward (per-tile backward or reentrant "
                      "recompute) inside one FSDP unit. Fix: {}",
                      where, p.name, unit.display(), s.post_backward_tasks.size(),
                      position_.synced ? " and reduce-scattered a partial gradient" : "",
                      fix_alternatives({"a tiled MLP whose Function returns the weights' gradients (one backward per "
                                        "unit)",
                                        "gradient_checkpointing_kwargs.use_reentrant: false"})),
          flat_name(u));
    }
  }

  // "a, b, or FSDP2 (fsdp_version: 2)": FSDP2 is a way out of FSDP1's nested-backward failures except
  // with a LoRA adapter, whose A and B axolotl makes FSDP2 units of their own, which the same nested
  // backward breaks there too (tests/plans/fsdp2/lora_tiled_*.yaml, real fully_shard).
  std::string fix_alternatives(std::vector<std::string> fixes) const {
    if (plan_.adapter == Adapter::None) fixes.push_back("FSDP2 (fsdp_version: 2)");
    std::string text;
    for (size_t i = 0; i < fixes.size(); ++i) {
      text += (i == 0 ? "" : i + 1 == fixes.size() ? ", or " : ", ") + fixes[i];
    }
    return text;
  }

  const Plan& plan_;
  const ModelStructure& structure_;
  int rank_;
  std::vector<Fsdp1Unit> units_;
  std::vector<int> unit_of_param_;
  std::vector<int> accumulator_of_;
  std::vector<UnitState> state_;
  std::vector<std::string> unused_;
  StepPosition position_;
  bool use_orig_params_ = true;
  bool callback_queued_ = false;
  std::set<int> lost_gradients_;                 // this step's weights whose tiled-chunk gradient was lost
  std::map<int, int> forward_mlp_calls_;         // per layer: MLP calls since the layer's forward began
  bool layer_grad_enabled_ = true;               // grad mode of the running decoder layer's forward
  std::set<std::pair<int, int>> reported_lost_;  // (iteration, parameter) already reported
  std::vector<Finding> findings_;                // silent findings, handed over at end_iteration
  bool checking_order_ = false;   // _ExecOrderData._checking_order: debug level DETAIL
  int exec_order_iteration_ = 0;  // _ExecOrderData._iter: backward final callbacks so far
};

}  // namespace

SyncSimulation simulate_fsdp1(const Plan& plan, const ModelStructure& structure, const SyncSimulationOptions& options) {
  // Every rank on its own: ranks with the same schedule still hold different shards, and the text
  // of a sharded-parameter use names this rank's shard (observed: rank 0 "... vec (256)", rank 1
  // "The size of tensor a (16) must match the size of tensor b (0) ...").
  SyncSimulationOptions per_rank = options;
  per_rank.deduplicate_ranks = false;
  Fsdp1PairingInputs pairing;
  pairing.distributed_debug = plan.torch_distributed_debug;
  pairing.use_orig_params = plan.engine.fsdp.use_orig_params.value_or(false);
  for (const Fsdp1Unit& unit : fsdp1_units(plan, structure)) {
    std::vector<std::string>& names = pairing.fqns_of_unit[unit.display()];
    for (int p : unit.params) names.push_back(structure.parameters[static_cast<size_t>(p)].name);
    pairing.flat_param_of_unit[unit.display()] = unit.name.empty() ? "_flat_param (root unit)" : unit.name + "._flat_param";
    pairing.requires_grad_of_unit[unit.display()] = unit.accumulator >= 0;
  }
  return simulate_with_model(
      plan, structure, [&](int rank) { return std::make_unique<Fsdp1Model>(plan, structure, rank); }, per_rank,
      [&](const std::vector<std::vector<int>>& classes, const std::vector<CollectiveLog>& logs,
          std::vector<std::vector<Finding>>& per_class) {
        return pair_fsdp1_collectives(classes, logs, per_class, pairing);
      });
}

}  // namespace hookstream
