#include "sim/engine/forward_graph.h"

#include <fmt/format.h>
#include <memory>

namespace hookstream {

namespace {

std::string strip_peft_prefix(const std::string& path) {
  static const std::string prefix = "base_model.model.";
  return path.compare(0, prefix.size(), prefix) == 0 ? path.substr(prefix.size()) : path;
}

// Shared-owned: the backward programs of the Functions it records run later, during backward.
class ForwardRecorder : public std::enable_shared_from_this<ForwardRecorder> {
 public:
  ForwardRecorder(AutogradEngine& engine, ForwardContext context)
      : engine_(engine), ctx_(std::move(context)), plan_(*ctx_.plan), model_(*ctx_.structure) {
    unused_ = plan_.unused_modules_for(ctx_.rank, ctx_.iteration, ctx_.micro_step);
  }

  ForwardOutputs run() {
    // The root module's call: its input (input_ids) never requires grad.
    call_pre(ModuleKind::Root, "", -1, SimTensor{});
    SimTensor hidden = leaf_call(model_.embed, SimTensor{}, [&](SimTensor) { return param_op("embed_tokens", model_.embed, {}); });
    if (plan_.input_require_grads() && !hidden.requires_grad()) {
      // enable_input_require_grads(): a forward hook on the input embeddings calls
      // output.requires_grad_(True), making the (frozen) embedding output a leaf that requires grad.
      const int data = hidden.data;
      hidden = engine_.fresh_leaf("inputs_embeds (requires_grad_)");
      hidden.data = data;
    }
    // Position embeddings and the norm or projection after the token embedding (GPT-2 wpe, BLOOM
    // word_embeddings_layernorm, OPT project_in): applied to the embedded tokens before layer 0.
    if (!model_.embed_other.empty()) hidden = others(model_.embed_other, hidden, "embed");
    std::vector<SimTensor> deepstack;
    if (!model_.vision_blocks.empty() && plan_.vision_inputs) {
      SimTensor image = vision_tower(deepstack);
      // Qwen3-VL: inputs_embeds.masked_scatter(image_mask, image_embeds).
      hidden = engine_.op("masked_scatter(image_embeds)", {hidden, image});
    }
    for (const DecoderLayerUse& layer : model_.layers) {
      if (unused(layer.path)) continue;
      const int count = plan_.checkpoint_count(layer.index, ctx_.rank, ctx_.iteration, ctx_.micro_step);
      if (count == 0) {
        hidden = decoder_layer(layer, hidden);
        after_layer(layer.index, deepstack, hidden);
        continue;
      }
      for (int pass = 0; pass < count; ++pass) hidden = checkpointed_layer(layer, hidden, pass, count);
      after_layer(layer.index, deepstack, hidden);
    }
    // DeepSeek-V4's hc_head collapses the residual streams after the last layer, before the norm.
    if (!model_.after_layers.empty()) hidden = others(model_.after_layers, hidden, "model.hc_head");
    hidden = norm(model_.final_norm, hidden, "model.norm", model_.final_norm_bias);
    // A tied head is the embedding's weight, not a module call of its own.
    const bool own_head = model_.lm_head >= 0 && (model_.embed < 0 || model_.parameters[static_cast<size_t>(model_.lm_head)].module !=
                                                                          model_.parameters[static_cast<size_t>(model_.embed)].module);
    SimTensor logits = unused("lm_head") ? SimTensor{}
                                         : leaf_call(own_head ? model_.lm_head : -1, hidden, [&](SimTensor h) {
                                             return engine_.op("lm_head", {leaf(model_.lm_head_bias), h, leaf(model_.lm_head)});
                                           });
    logits = call_post(ModuleKind::Root, "", -1, logits);
    return ForwardOutputs{logits, nullptr};
  }

 private:
  bool unused(const std::string& path) const { return module_unused(unused_, path); }

  // Module.__call__'s forward pre/post hooks of the sync engine (none without one).
  ModuleCall module_call(ModuleKind kind, const std::string& path, int layer) const {
    return ModuleCall{kind, path, layer, engine_.current_task() >= 0};
  }
  SimTensor call_pre(ModuleKind kind, const std::string& path, int layer, SimTensor input) {
    return ctx_.hooks ? ctx_.hooks->pre_forward(engine_, module_call(kind, path, layer), input) : input;
  }
  SimTensor call_post(ModuleKind kind, const std::string& path, int layer, SimTensor output) {
    return ctx_.hooks ? ctx_.hooks->post_forward(engine_, module_call(kind, path, layer), output) : output;
  }

  // Qwen3VLTextModel.forward: after decoder layer k, DeepStack visual features k are added to the
  // hidden state at the image positions (_deepstack_process), outside any checkpoint.
  void after_layer(int layer, const std::vector<SimTensor>& deepstack, SimTensor& hidden) {
    if (layer < static_cast<int>(deepstack.size())) {
      hidden = engine_.op(fmt::format("deepstack add {}", layer), {hidden, deepstack[static_cast<size_t>(layer)]});
    }
  }

  SimTensor merger(const VisionMergerUse& m, SimTensor h) {
    SimTensor n = engine_.op(m.path + ".norm", {leaf(m.norm_weight), leaf(m.norm_bias), h});
    SimTensor f1 = linear(m.fc1, n, m.path + ".linear_fc1");
    SimTensor act = engine_.op(m.path + ".act", {f1});
    return linear(m.fc2, act, m.path + ".linear_fc2");
  }

  SimTensor leaf(int parameter) const {
    if (parameter < 0 || !model_.parameters[static_cast<size_t>(parameter)].trainable) return SimTensor{};
    return SimTensor{parameter};
  }

  // An op whose backward sends the parameter's gradient first (the weight is `self` of the last
  // mul/addmm), then the input's.
  SimTensor param_op(const std::string& label, int parameter, const std::vector<SimTensor>& inputs) {
    std::vector<SimTensor> all{leaf(parameter)};
    all.insert(all.end(), inputs.begin(), inputs.end());
    return engine_.op(label, all);
  }

  // The module owning `parameter` called around `body` (ModuleKind::Leaf); no call without one.
  template <typename Body>
  SimTensor leaf_call(int parameter, SimTensor x, Body body) {
    if (parameter < 0 || !ctx_.hooks) return body(x);
    const std::string& module = model_.parameters[static_cast<size_t>(parameter)].module;
    x = call_pre(ModuleKind::Leaf, module, -1, x);
    return call_post(ModuleKind::Leaf, module, -1, body(x));
  }

  SimTensor norm(int weight, SimTensor x, const std::string& label, int bias = -1) {
    return leaf_call(weight, x, [&](SimTensor h) {
      if (bias < 0) return param_op(label, weight, {h});
      return engine_.op(label, {leaf(weight), leaf(bias), h});
    });
  }

  // Parameters of a layer with no slot of their own (MLA projections and norms, attention sinks,
  // shared experts, Gemma's feed-forward norms): each is applied to the running tensor, so its
  // gradient is produced in that part of the layer's backward.
  SimTensor others(const std::vector<LinearUse>& uses, SimTensor x, const std::string& path) {
    for (const LinearUse& use : uses) x = linear(use, x, path + "." + use.name);
    return x;
  }

  // nn.Linear, or PEFT's lora.Linear: result = base_layer(x); result += lora_B(lora_A(dropout(x))) * scaling.
  SimTensor linear(const LinearUse& use, SimTensor x, const std::string& path) {
    // A skipped projection contributes zeros: nothing behind it gets a gradient through it.
    if (unused(path)) return SimTensor{};
    x = call_pre(ModuleKind::Linear, path, -1, x);
    // F.linear with bias is addmm(bias, x, weight.t()): the bias gradient is sent first.
    SimTensor result = leaf_call(use.weight, x, [&](SimTensor h) { return engine_.op(path, {leaf(use.bias), h, leaf(use.weight)}); });
    if (use.lora_a >= 0) {
      SimTensor a = adapter_call(use.lora_a, path + ".lora_A", x);
      SimTensor b = adapter_call(use.lora_b, path + ".lora_B", a);
      SimTensor scaled = engine_.op(path + ".scaling", {b});
      result = engine_.op(path + " + lora", {result, scaled});
    }
    return call_post(ModuleKind::Linear, path, -1, result);
  }

  // lora_A(x) / lora_B(a) as module calls (their own FSDP1 units under PEFT's wrap policy).
  SimTensor adapter_call(int parameter, const std::string& label, SimTensor x) {
    const std::string& module = model_.parameters[static_cast<size_t>(parameter)].module;
    x = call_pre(ModuleKind::Adapter, module, -1, x);
    return call_post(ModuleKind::Adapter, module, -1, engine_.op(label, {x, leaf(parameter)}));
  }

  SimTensor attention(const DecoderLayerUse& layer, SimTensor x) {
    SimTensor h = norm(layer.input_norm, x, layer.path + ".input_layernorm", layer.input_norm_bias);
    SimTensor o = attention_core(layer, h, layer.path + "." + layer.mixer_module);
    return engine_.op(layer.path + " residual(attn)", {x, o});
  }

  // q/k/v from the normed hidden state h, (q/k norms), SDPA, o_proj.
  SimTensor attention_core(const DecoderLayerUse& layer, SimTensor h, const std::string& p) {
    SimTensor q = linear(layer.q, h, p + ".q_proj");
    SimTensor k = linear(layer.k, h, p + ".k_proj");
    SimTensor v = linear(layer.v, h, p + ".v_proj");
    if (layer.q_norm >= 0) {
      q = norm(layer.q_norm, q, p + ".q_norm");
      k = norm(layer.k_norm, k, p + ".k_norm");
    }
    if (!layer.attention_other.empty()) q = others(layer.attention_other, q, p);
    SimTensor a = engine_.op(p + ".sdpa", {q, k, v});
    return linear(layer.o, a, p + ".o_proj");
  }

  // FalconH1DecoderLayer: the Mamba2 mixer and attention read the same normed input (attention
  // scaled by attention_in_multiplier, a float), their outputs are scaled and summed, then the
  // residual add.
  SimTensor parallel_mixers(const DecoderLayerUse& layer, SimTensor x) {
    SimTensor h = norm(layer.input_norm, x, layer.path + ".input_layernorm", layer.input_norm_bias);
    SimTensor m = recurrent_core(layer, h, layer.mixer_out);
    SimTensor o = attention_core(layer, engine_.op(layer.path + " * attention_in_multiplier", {h}), layer.path + ".self_attn");
    return engine_.op(layer.path + " residual(mamba + attn)", {x, engine_.op(layer.path + " mamba + attn", {m, o})});
  }

  // A recurrent token mixer (gated DeltaNet: Qwen3NextGatedDeltaNet.forward): every input
  // projection reads the normed hidden state; the conv1d, the recurrence (dt_bias, A_log) and the
  // gated norm follow in that order on the mixed q/k/v, then out_proj. Each parameter's gradient is
  // produced in that part of the layer's backward.
  SimTensor recurrent_mixer(const DecoderLayerUse& layer, SimTensor x) {
    SimTensor h = norm(layer.input_norm, x, layer.path + ".input_layernorm", layer.input_norm_bias);
    return engine_.op(layer.path + " residual(mixer)", {x, recurrent_core(layer, h, layer.o)});
  }

  // The mixer's input projections from the normed hidden state h, its conv1d / recurrence / gated
  // norm, then its output projection `out`.
  SimTensor recurrent_core(const DecoderLayerUse& layer, SimTensor h, const LinearUse& out) {
    const std::string p = layer.path + "." + layer.mixer_module;
    SimTensor mixed{};
    bool first = true;
    for (const LinearUse& use : layer.mixer_in) {
      SimTensor projected = linear(use, h, p + "." + use.name);
      mixed = first ? projected : engine_.op(p + " with " + use.name, {mixed, projected});
      first = false;
    }
    SimTensor core = others(layer.mixer_other, mixed, p);
    return linear(out, core, p + "." + out.name);
  }

  // A sparse MoE block with one module per expert (transformers v4.57 MixtralSparseMoeBlock.forward,
  // Qwen2MoeSparseMoeBlock.forward, DeepseekV3MoE.moe): router logits -> softmax/top-k routing
  // weights, then a loop over the experts that got a token (`expert_hit`; Qwen2-MoE v4 `if
  // top_x.shape[0] == 0: continue`): expert(x[top_x]) * routing_weights, index_add_ into the output.
  // An expert with no token on this rank in this step (an unused module of the step: the routing
  // check's adverse case) runs no forward, so its Linears get no gradient; the router still does
  // (softmax over all experts).
  SimTensor per_expert_moe(const DecoderLayerUse& layer, SimTensor h, const std::string& p) {
    SimTensor logits = linear(layer.gate, h, p + ".gate");
    SimTensor weights = engine_.op(p + " routing_weights (softmax, topk)", {logits});
    SimTensor out = engine_.op(p + " zeros", {});
    for (const ExpertUse& expert : layer.experts) {
      if (unused(expert.path)) continue;
      const std::string e = p + ".experts." + std::to_string(expert.index);
      SimTensor x = engine_.op(e + " hidden_states[top_x]", {h});
      SimTensor gate = linear(expert.gate, x, e + "." + expert.gate.name);
      SimTensor act = engine_.op(e + ".act", {gate});
      SimTensor up = linear(expert.up, x, e + "." + expert.up.name);
      SimTensor y = linear(expert.down, engine_.op(e + ".mul", {act, up}), e + "." + expert.down.name);
      y = engine_.op(e + " * routing_weights", {y, weights});
      out = engine_.op(e + " index_add_", {out, y});
    }
    return out;
  }

  SimTensor mlp_body(const DecoderLayerUse& layer, SimTensor h) {
    const std::string p = layer.path + "." + layer.mlp_module;
    h = call_pre(ModuleKind::Mlp, p, layer.index, h);
    if (!layer.experts.empty()) {
      SimTensor out = per_expert_moe(layer, h, p);
      if (!layer.mlp_other.empty()) out = others(layer.mlp_other, out, p);
      return call_post(ModuleKind::Mlp, p, layer.index, out);
    }
    SimTensor out;
    if (!layer.mlp_gated && !layer.moe) {
      // NemotronHMLP: down_proj(act_fn(up_proj(x))). (A fused MoE block keeps the path below: its
      // router is the `gate` slot, read before the experts, whatever their own activation.)
      SimTensor up = linear(layer.up, h, p + ".up_proj");
      out = linear(layer.down, engine_.op(p + ".act", {up}), p + ".down_proj");
    } else {
      // LlamaMLP: down_proj(act_fn(gate_proj(x)) * up_proj(x)).
      SimTensor gate = linear(layer.gate, h, p + ".gate_proj");
      SimTensor act = engine_.op(p + ".act", {gate});
      SimTensor up = linear(layer.up, h, p + ".up_proj");
      SimTensor prod = engine_.op(p + ".mul", {act, up});
      out = linear(layer.down, prod, p + ".down_proj");
    }
    if (!layer.mlp_other.empty()) out = others(layer.mlp_other, out, p);
    return call_post(ModuleKind::Mlp, p, layer.index, out);
  }

  std::vector<int> trainable_mlp_parameters(const DecoderLayerUse& layer) const {
    std::vector<int> out;
    std::vector<const LinearUse*> uses{&layer.gate, &layer.up, &layer.down};
    for (const ExpertUse& expert : layer.experts) {
      for (const LinearUse* use : {&expert.gate, &expert.up, &expert.down}) uses.push_back(use);
    }
    for (const LinearUse& use : layer.mlp_other) uses.push_back(&use);
    for (const LinearUse* use : uses) {
      for (int p : {use->weight, use->bias, use->lora_a, use->lora_b}) {
        if (p >= 0 && model_.parameters[static_cast<size_t>(p)].trainable) out.push_back(p);
      }
    }
    return out;
  }

  SimTensor mlp(const DecoderLayerUse& layer, SimTensor h) {
    if (unused(layer.path + "." + layer.mlp_module)) return SimTensor{};
    const int shards = plan_.tiled_shards_for(ctx_.rank, ctx_.iteration, ctx_.micro_step);
    if (!plan_.layer_tiled(layer.index)) return mlp_body(layer, h);
    // TiledMLP.forward runs the MLP over the shards under no_grad: the output is computed from the
    // weights without them being autograd inputs (recorded as data flow only). The MLP module is
    // called once per shard, so its forward hooks fire once per shard (FSDP2 all-gathers an MLP
    // unit per shard call: oracles/fsdp2_worker.py, docs/engines/fsdp2.md).
    const bool grad_mode = engine_.grad_enabled();
    engine_.set_grad_enabled(false);
    SimTensor forward_value = mlp_body(layer, h);
    for (int shard = 1; shard < shards; ++shard) forward_value = engine_.op("cat", {forward_value, mlp_body(layer, h)});
    engine_.set_grad_enabled(grad_mode);
    // TiledMLP.apply(fn, self, x, shards, compute_params): x is a tensor input; the weights are
    // inputs only when the Function is written to receive them.
    std::vector<SimTensor> inputs{h};
    const std::vector<int> weights = trainable_mlp_parameters(layer);
    if (plan_.tiled_mlp_weights_as_inputs) {
      for (int p : weights) inputs.push_back(SimTensor{p});
    }
    const bool input_requires_grad = h.requires_grad();
    const TiledBackward strategy = plan_.tiled_mlp_backward;
    const bool weights_as_inputs = plan_.tiled_mlp_weights_as_inputs;
    const DecoderLayerUse* layer_ptr = &layer;
    SimTensor result = engine_.function(
        fmt::format("TiledMLP(layer {})", layer.index), inputs,
        [self = shared_from_this(), layer_ptr, shards, weights, strategy, weights_as_inputs,
         input_requires_grad](AutogradEngine& engine) {
          for (int shard = 0; shard < shards; ++shard) {
            if (self->ctx_.hooks) {
              self->ctx_.hooks->tiled_chunk(self->module_call(ModuleKind::Mlp, layer_ptr->path + "." + layer_ptr->mlp_module, layer_ptr->index),
                                            shard, shards);
            }
            const std::string label = fmt::format("tiled_mlp chunk {} of {} (layer {})", shard + 1, shards, layer_ptr->index);
            SimTensor x = input_requires_grad ? engine.fresh_leaf("x_shard") : SimTensor{};
            const bool saved = engine.grad_enabled();
            engine.set_grad_enabled(true);
            SimTensor out = self->mlp_body(*layer_ptr, x);
            engine.set_grad_enabled(saved);
            const bool last = shard == shards - 1;
            if (strategy == TiledBackward::BackwardPerChunk ||
                (strategy == TiledBackward::GradThenBackward && last)) {
              engine.backward({out}, label);
            } else {
              std::vector<SimTensor> grad_inputs{x};
              for (int p : weights) grad_inputs.push_back(SimTensor{p});
              engine.grad({out}, grad_inputs, label + " [autograd.grad]");
              if (strategy == TiledBackward::GradThenBackward && self->ctx_.on_manual_accumulate) {
                for (int p : weights) self->ctx_.on_manual_accumulate(p);  // param.grad += chunk grad
              }
            }
          }
          // Gradient for x; for weight inputs only FunctionReturnsGrads returns something.
          std::vector<bool> defined{true};
          if (weights_as_inputs) {
            for (size_t i = 0; i < weights.size(); ++i) defined.push_back(strategy == TiledBackward::FunctionReturnsGrads);
          }
          return defined;
        });
    return engine_.with_data_inputs(result, {forward_value}, {});
  }

  SimTensor decoder_layer(const DecoderLayerUse& layer, SimTensor x) {
    x = call_pre(ModuleKind::DecoderLayer, layer.path, layer.index, x);
    if (layer.mixer == TokenMixer::None) {
      // NemotronHBlock of type "mlp"/"moe": residual + mixer(norm(x)), the MLP as its only module.
      SimTensor m = mlp(layer, norm(layer.post_attention_norm, x, layer.path + ".norm", layer.post_attention_norm_bias));
      return call_post(ModuleKind::DecoderLayer, layer.path, layer.index, engine_.op(layer.path + " residual(mlp)", {x, m}));
    }
    if (!layer.sublayers.empty() || !layer.shortcut.empty()) return sub_blocks(layer, x);
    SimTensor h = layer.parallel_attention              ? parallel_mixers(layer, x)
                  : layer.mixer == TokenMixer::Attention ? attention(layer, x)
                                                         : recurrent_mixer(layer, x);
    // NemotronHBlock of type "mamba"/"attention": the token mixer is the block's only module.
    if (!layer.has_mlp) return call_post(ModuleKind::DecoderLayer, layer.path, layer.index, h);
    SimTensor n = norm(layer.post_attention_norm, h, layer.path + ".post_attention_layernorm", layer.post_attention_norm_bias);
    SimTensor m = mlp(layer, n);
    // Records no node when neither input requires grad (engine op), but keeps the data flow.
    return call_post(ModuleKind::DecoderLayer, layer.path, layer.index, engine_.op(layer.path + " residual(mlp)", {h, m}));
  }

  // LongcatFlashDecoderLayer.forward: attention block 0 (input_layernorm[0], self_attn[0], residual),
  // post_attention_layernorm[0], then the shortcut MoE (mlp) and mlps[0] on that normed state,
  // residual; then each later sub-block the same way; the shortcut's output is added with the last
  // residual (residual + mlps[1](...) + shortcut_mlp_output).
  SimTensor sub_blocks(const DecoderLayerUse& layer, SimTensor x) {
    SimTensor h = attention(layer, x);
    SimTensor n = norm(layer.post_attention_norm, h, layer.path + ".post_attention_layernorm", layer.post_attention_norm_bias);
    SimTensor shortcut = layer.shortcut.empty() ? SimTensor{} : mlp(layer.shortcut.front(), n);
    SimTensor m = mlp(layer, n);
    for (const DecoderLayerUse& sub : layer.sublayers) {
      h = attention(sub, engine_.op(layer.path + " residual(" + layer.mlp_module + ")", {h, m}));
      n = norm(sub.post_attention_norm, h, layer.path + ".post_attention_layernorm (" + sub.mixer_module + ")",
               sub.post_attention_norm_bias);
      m = mlp(sub, n);
    }
    SimTensor out = engine_.op(layer.path + " residual(mlp) + shortcut", {h, m, shortcut});
    return call_post(ModuleKind::DecoderLayer, layer.path, layer.index, out);
  }

  SimTensor checkpointed_layer(const DecoderLayerUse& layer, SimTensor x, int pass, int count) {
    const std::string which = count > 1 ? fmt::format(" pass {}", pass + 1) : "";
    if (!plan_.use_reentrant) {
      // torch.utils.checkpoint(use_reentrant=False) records the ordinary graph (saved tensors are
      // recomputed on unpack by a graph that is never backwarded): hooks fire as without it.
      return decoder_layer(layer, x);
    }
    // CheckpointFunction.forward runs the layer under no_grad; its only tensor input is the
    // hidden state. Without an input that requires grad the Function records no node at all.
    const bool saved = engine_.grad_enabled();
    engine_.set_grad_enabled(false);
    const SimTensor forward_value = decoder_layer(layer, x);
    engine_.set_grad_enabled(saved);
    const DecoderLayerUse* layer_ptr = &layer;
    const std::string label = fmt::format("checkpoint(layer {}{})", layer.index, which);
    SimTensor result = engine_.function(label, {x}, [self = shared_from_this(), layer_ptr, label](AutogradEngine& engine) {
      // CheckpointFunction.backward: detach inputs, recompute under enable_grad, then
      // torch.autograd.backward(outputs, grads): a nested graph task.
      SimTensor input = engine.fresh_leaf("checkpoint input");
      const bool saved_mode = engine.grad_enabled();
      engine.set_grad_enabled(true);
      SimTensor out = self->decoder_layer(*layer_ptr, input);
      engine.set_grad_enabled(saved_mode);
      engine.backward({out}, label);
      return std::vector<bool>{true};
    });
    // The layer's parameters fed the output under no_grad: used as data, without a grad_fn.
    return engine_.with_data_inputs(result, {forward_value}, {});
  }

  // Qwen3VLVisionModel.forward (and Qwen2-VL's / Qwen2.5-VL's, which have no position embedding
  // or DeepStack): patch embedding + position embedding, the blocks (a DeepStack merger right after
  // each listed block), then the final merger.
  SimTensor vision_tower(std::vector<SimTensor>& deepstack) {
    if (!model_.vision_projector.empty()) return described_vision_tower();
    SimTensor pixels{};
    SimTensor h = linear(model_.vision_patch_embed, pixels, "model.visual.patch_embed.proj");
    if (model_.vision_pos_embed >= 0) {
      SimTensor pos = param_op("model.visual.pos_embed", model_.vision_pos_embed, {});
      h = engine_.op("patch + pos_embed", {h, pos});
    }
    for (const VisionBlockUse& block : model_.vision_blocks) {
      if (unused(block.path)) continue;
      h = call_pre(ModuleKind::VisionBlock, block.path, block.index, h);
      SimTensor n1 = engine_.op(block.path + ".norm1", {leaf(block.norm1_weight), leaf(block.norm1_bias), h});
      SimTensor qkv = linear(block.qkv, n1, block.path + ".attn.qkv");
      SimTensor a = engine_.op(block.path + ".attn", {qkv});
      SimTensor proj = linear(block.proj, a, block.path + ".attn.proj");
      h = engine_.op(block.path + " residual(attn)", {h, proj});
      SimTensor n2 = engine_.op(block.path + ".norm2", {leaf(block.norm2_weight), leaf(block.norm2_bias), h});
      SimTensor f1 = linear(block.fc1, n2, block.path + ".mlp.linear_fc1");
      // Qwen2.5-VL's gated MLP: down(act(gate(x)) * up(x)) (Qwen2_5_VLMLP.forward).
      SimTensor act = block.gate.weight >= 0
                          ? engine_.op(block.path + ".mlp.act*up", {linear(block.gate, n2, block.path + ".mlp.gate_proj"), f1})
                          : engine_.op(block.path + ".mlp.act", {f1});
      SimTensor f2 = linear(block.fc2, act, block.path + ".mlp.linear_fc2");
      h = call_post(ModuleKind::VisionBlock, block.path, block.index, engine_.op(block.path + " residual(mlp)", {h, f2}));
      for (const VisionMergerUse& ds : model_.vision_deepstack_mergers) {
        if (ds.block == block.index) deepstack.push_back(merger(ds, h));
      }
    }
    VisionMergerUse final_merger;
    final_merger.path = "model.visual.merger";
    final_merger.norm_weight = model_.vision_merger_norm_weight;
    final_merger.norm_bias = model_.vision_merger_norm_bias;
    final_merger.fc1 = model_.vision_merger_fc1;
    final_merger.fc2 = model_.vision_merger_fc2;
    return merger(final_merger, h);
  }

  // The module a LinearUse belongs to (PEFT's ".base_layer" dropped), for labels and unused_modules.
  std::string module_of(const LinearUse& use) const {
    const int index = use.weight >= 0 ? use.weight : use.lora_a;
    if (index < 0) return use.name;
    std::string module = model_.parameters[static_cast<size_t>(index)].module;
    for (const char* suffix : {".base_layer", ".lora_A.default"}) {
      const std::string tail(suffix);
      if (module.size() > tail.size() && module.compare(module.size() - tail.size(), tail.size(), tail) == 0) {
        module.resize(module.size() - tail.size());
      }
    }
    return module;
  }
  SimTensor apply(const LinearUse& use, SimTensor x) { return linear(use, x, module_of(use)); }

  // A described tower (CLIPVisionModel, SiglipVisionModel, PixtralVisionModel; vision_tower.h) and its
  // projector: the patch embedding and what follows it, the pre-norm encoder layers (q, k, v as
  // CLIPAttention.forward / PixtralAttention.forward compute them), then the features the model reads:
  // hidden_states[vision_feature_layer] (LlavaModel.get_image_features; several layers concatenated)
  // or last_hidden_state after the final norm (Gemma 3, PaliGemma). What runs without reaching them -
  // the layers after the deepest selected one, a final norm the model does not read, the pooling head -
  // is recorded too: its parameters see the forward and never get a gradient, as in PyTorch.
  SimTensor described_vision_tower() {
    const std::vector<int>& selected = plan_.model.vision->feature_layers;
    SimTensor h = apply(model_.vision_patch_embed, SimTensor{});
    for (const LinearUse& use : model_.vision_embed_other) h = apply(use, h);
    std::vector<SimTensor> hidden_states{h};
    for (const VisionBlockUse& block : model_.vision_blocks) {
      if (unused(block.path)) continue;
      h = call_pre(ModuleKind::VisionBlock, block.path, block.index, h);
      SimTensor n1 = engine_.op(block.path + ".norm1", {leaf(block.norm1_weight), leaf(block.norm1_bias), h});
      SimTensor a;
      if (block.k.weight >= 0 || block.k.lora_a >= 0) {
        SimTensor q = apply(block.qkv, n1);
        SimTensor k = apply(block.k, n1);
        SimTensor v = apply(block.v, n1);
        // InternVLVisionAttention.forward: q_norm(q), k_norm(k) before the attention.
        if (block.qk_norms.size() == 2) {
          q = apply(block.qk_norms[0], q);
          k = apply(block.qk_norms[1], k);
        }
        a = engine_.op(block.path + ".attention", {q, k, v});
      } else if (block.qk_norms.size() == 2) {
        // GlmOcrVisionAttention.forward: the fused qkv output is split, then q_norm(q) and
        // k_norm(k) before the attention (v is not normed).
        SimTensor qkv = apply(block.qkv, n1);
        SimTensor q = apply(block.qk_norms[0], qkv);
        SimTensor k = apply(block.qk_norms[1], qkv);
        a = engine_.op(block.path + ".attention", {q, k, qkv});
      } else {
        a = engine_.op(block.path + ".attention", {apply(block.qkv, n1)});
      }
      SimTensor attention_out = apply(block.proj, a);
      for (const LinearUse& use : block.attention_other) attention_out = apply(use, attention_out);
      h = engine_.op(block.path + " residual(attn)", {h, attention_out});
      SimTensor n2 = engine_.op(block.path + ".norm2", {leaf(block.norm2_weight), leaf(block.norm2_bias), h});
      // Pixtral's gated MLP: down(act(gate(x)) * up(x)); CLIP/SigLIP: fc2(act(fc1(x))).
      SimTensor act = block.gate.weight >= 0 || block.gate.lora_a >= 0
                          ? engine_.op(block.path + ".mlp.act*up", {apply(block.gate, n2), apply(block.fc1, n2)})
                          : engine_.op(block.path + ".mlp.act", {apply(block.fc1, n2)});
      SimTensor mlp_out = apply(block.fc2, act);
      for (const LinearUse& use : block.mlp_other) mlp_out = apply(use, mlp_out);
      h = call_post(ModuleKind::VisionBlock, block.path, block.index, engine_.op(block.path + " residual(mlp)", {h, mlp_out}));
      hidden_states.push_back(h);
    }
    for (const LinearUse& use : model_.vision_final_norm) h = apply(use, h);
    SimTensor pooled = h;
    for (const LinearUse& use : model_.vision_head) pooled = apply(use, pooled);
    SimTensor features = h;
    if (!selected.empty()) {
      std::vector<SimTensor> picked;
      for (int index : selected) {
        if (index < static_cast<int>(hidden_states.size())) picked.push_back(hidden_states[static_cast<size_t>(index)]);
      }
      features = picked.size() == 1 ? picked[0] : engine_.op("cat(hidden_states[vision_feature_layer])", picked);
    }
    for (const LinearUse& use : model_.vision_projector) features = apply(use, features);
    return features;
  }

  AutogradEngine& engine_;
  const ForwardContext ctx_;
  const Plan& plan_;
  const ModelStructure& model_;
  std::vector<std::string> unused_;
};

}  // namespace

bool module_unused(const std::vector<std::string>& unused, const std::string& module_path) {
  const std::string path = strip_peft_prefix(module_path);
  for (const std::string& entry_raw : unused) {
    const std::string entry = strip_peft_prefix(entry_raw);
    if (path == entry) return true;
    // A module path covers everything below it.
    if (path.size() > entry.size() && path.compare(0, entry.size(), entry) == 0 && path[entry.size()] == '.') return true;
    // A leaf name ("lm_head", "down_proj") matches every module of that name.
    if (path.size() > entry.size() && path.compare(path.size() - entry.size(), entry.size(), entry) == 0 &&
        path[path.size() - entry.size() - 1] == '.') {
      return true;
    }
  }
  return false;
}

ForwardOutputs record_forward(AutogradEngine& engine, const ForwardContext& context) {
  auto recorder = std::make_shared<ForwardRecorder>(engine, context);
  ForwardOutputs outputs = recorder->run();
  outputs.keep_alive = recorder;
  return outputs;
}

}  // namespace hookstream
