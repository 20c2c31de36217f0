#include "runtime/oracle_model.h"


#include <algorithm>
#include <cmath>
#include <limits>

#include <ATen/CPUGeneratorImpl.h>

#include "runtime/checkpoint.h"
#include "runtime/tiled_mlp.h"
#include "runtime/vision_tower.h"
#include "sim/inputs/input_error.h"

namespace hookstream {

namespace {


at::Generator generator_for(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

// splitmix64: independent streams per (seed, rank, iteration, micro-step) without global state.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

OracleModel::OracleModel(const Plan& plan, uint64_t seed)
    : plan_(plan), seed_(seed), structure_(build_model_structure(plan)) {
  // The LibTorch forward below runs the Qwen-VL towers only; a described tower (CLIP, SigLIP,
  // Pixtral: sim/inputs/architectures/vision_tower.h) is simulated, not executed here.
  for (const DecoderLayerUse& layer : structure_.layers) {
    if (layer.mixer == TokenMixer::Attention) continue;
    throw InputError(plan.model.source, "layer " + std::to_string(layer.index) + " mixes tokens with a " + to_string(layer.mixer) +
                                            "; the runtime oracle computes attention layers only");
  }
  if (plan.model.vision && plan.vision_inputs && !structure_.vision_projector.empty()) {
    throw InputError(plan.source + ": key hookstream.vision_inputs",
                     "the runtime oracle runs the Qwen-VL vision towers only, not the " + plan.model.vision->model_type +
                         " tower of model_type \"" + plan.model.model_type + "\": expected false");
  }
  at::Generator gen = generator_for(seed);
  torch::NoGradGuard no_grad;
  for (const Parameter& p : structure_.parameters) {
    at::Tensor t = at::randn(p.shape, gen, at::kFloat);
    const bool norm = p.shape.size() == 1 && p.name.find("norm") != std::string::npos;
    if (norm) {
      t = 1.0 + 0.1 * t;
    } else if (p.shape.size() == 1) {
      t = 0.1 * t;  // biases
    } else {
      // Fan-in scaling keeps activations O(1). LoRA B is random, not PEFT's zeros, so that LoRA A
      // gets non-zero gradients and the gradient comparisons have something to compare.
      int64_t fan_in = 1;
      for (size_t d = 1; d < p.shape.size(); ++d) fan_in *= p.shape[d];
      t = t / std::sqrt(static_cast<double>(fan_in));
    }
    t.requires_grad_(p.trainable);
    parameters_.push_back(t);
  }
}

std::vector<at::Tensor> OracleModel::ddp_parameters() const {
  std::vector<at::Tensor> result;
  for (int index : structure_.ddp_parameters) result.push_back(parameters_[index]);
  return result;
}

std::vector<std::string> OracleModel::ddp_parameter_names() const {
  std::vector<std::string> result;
  for (int index : structure_.ddp_parameters) result.push_back(structure_.parameters[index].name);
  return result;
}

Batch OracleModel::make_batch(const StepPosition& position) const {
  const uint64_t stream = mix(mix(mix(seed_ ^ 0x5eedULL) + static_cast<uint64_t>(position.rank)) +
                              static_cast<uint64_t>(position.iteration) * 1000003ULL +
                              static_cast<uint64_t>(position.micro_step));
  at::Generator gen = generator_for(stream);
  const int64_t batch = plan_.micro_batch_size;
  const int64_t seq = plan_.sequence_len_for(position.rank, position.iteration, position.micro_step);
  const int64_t vocab = plan_.model.vocab_size;
  Batch b;
  b.input_ids = at::randint(vocab, {batch, seq}, gen, at::kLong);
  b.labels = at::randint(vocab, {batch, seq}, gen, at::kLong);
  if (plan_.model.vision && plan_.vision_inputs) {
    const VisionTowerConfig& v = *plan_.model.vision;
    const int64_t merge = int64_t(v.spatial_merge_size) * v.spatial_merge_size;
    const int64_t merged_tokens = std::min<int64_t>(2, seq);
    b.pixels = at::randn({merged_tokens * merge, vision_patch_features(v)}, gen, at::kFloat);
  }
  return b;
}

// y = x W^T + b, plus PEFT's LoRA branch scale * B(A(x)) (peft/tuners/lora/layer.py Linear.forward).
// A skipped linear contributes zeros; a skipped lora_A/lora_B module drops the branch.
at::Tensor OracleModel::linear(const at::Tensor& x, const LinearUse& use, const ParameterTable& p,
                               const StepView& step) const {
  const Parameter& weight = structure_.parameters[use.weight];
  const std::string path = linear_module_path(structure_, use);
  if (step.skipped(path)) {
    auto sizes = x.sizes().vec();
    sizes.back() = weight.shape[0];
    return at::zeros(sizes, x.options());
  }
  at::Tensor w = p[use.weight];
  if (w.dim() > 2) w = w.reshape({w.size(0), -1});  // Conv3d patch embedding as a linear map
  at::Tensor y = at::linear(x, w, use.bias >= 0 ? p[use.bias] : at::Tensor());
  if (lora_active(structure_, use, step)) {
    const double scale = plan_.lora_alpha / static_cast<double>(plan_.lora_r);
    // A LoRA Conv3d on the patch embedding (PEFT's _ConvNd: lora_A has the conv's kernel and
    // stride, lora_B a 1x1x1 kernel) is, on flattened patches, the same pair of linear maps.
    at::Tensor a = p[use.lora_a], b = p[use.lora_b];
    if (a.dim() > 2) a = a.reshape({a.size(0), -1});
    if (b.dim() > 2) b = b.reshape({b.size(0), -1});
    y = y + scale * at::linear(at::linear(x, a), b);
  }
  return y;
}

at::Tensor OracleModel::rms_norm(const at::Tensor& x, int weight, const ParameterTable& p) const {
  if (weight < 0) return x;
  const at::Tensor variance = x.pow(2).mean(-1, /*keepdim=*/true);
  return x * at::rsqrt(variance + 1e-6) * p[weight];
}

at::Tensor OracleModel::attention(const at::Tensor& x, const DecoderLayerUse& layer, const ParameterTable& p,
                                  const StepView& step) const {
  const ModelConfig& m = plan_.model;
  const int64_t heads = m.num_attention_heads;
  const int64_t kv_heads = m.num_key_value_heads > 0 ? m.num_key_value_heads : heads;
  const int64_t head_dim = m.head_dim > 0 ? m.head_dim : m.hidden_size / heads;
  const int64_t batch = x.size(0), seq = x.size(1);
  const at::Tensor normed =
      step.skipped(structure_.parameters[layer.input_norm].module) ? x : rms_norm(x, layer.input_norm, p);
  at::Tensor q = linear(normed, layer.q, p, step).view({batch, seq, heads, head_dim});
  at::Tensor k = linear(normed, layer.k, p, step).view({batch, seq, kv_heads, head_dim});
  at::Tensor v = linear(normed, layer.v, p, step).view({batch, seq, kv_heads, head_dim});
  if (layer.q_norm >= 0 && !step.skipped(structure_.parameters[layer.q_norm].module)) q = rms_norm(q, layer.q_norm, p);
  if (layer.k_norm >= 0 && !step.skipped(structure_.parameters[layer.k_norm].module)) k = rms_norm(k, layer.k_norm, p);
  q = q.transpose(1, 2);
  // Grouped-query attention: each kv head serves heads / kv_heads query heads.
  k = k.transpose(1, 2).repeat_interleave(heads / kv_heads, 1);
  v = v.transpose(1, 2).repeat_interleave(heads / kv_heads, 1);
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(head_dim));
  const at::Tensor causal = at::ones({seq, seq}, at::kBool).triu(1);
  scores = scores.masked_fill(causal, -std::numeric_limits<float>::infinity());
  const at::Tensor context = at::matmul(at::softmax(scores, -1), v).transpose(1, 2).reshape({batch, seq, heads * head_dim});
  return linear(context, layer.o, p, step);
}

at::Tensor OracleModel::mlp(const at::Tensor& x, const DecoderLayerUse& layer, const ParameterTable& p,
                            const StepView& step) const {
  // SwiGLU: down(silu(gate(x)) * up(x)) (transformers LlamaMLP). Python evaluates left to right;
  // C++ leaves operand order unspecified, so sequence it: the creation order of autograd nodes
  // decides the order of hook firings.
  const at::Tensor gate = at::silu(linear(x, layer.gate, p, step));
  const at::Tensor up = linear(x, layer.up, p, step);
  return linear(gate * up, layer.down, p, step);
}

// LlamaDecoderLayer.forward: x + attn(input_layernorm(x)); h + mlp(post_attention_layernorm(h)).
// `inputs_table` is what a tiled MLP passes as its weight inputs (recomputation copies inside a
// non-reentrant checkpoint); the computation itself always reads `p`.
at::Tensor OracleModel::decoder_layer(const at::Tensor& x, const DecoderLayerUse& layer, const ParameterTable& p,
                                      const ParameterTable& inputs_table, const StepView& step,
                                      HookRecorder* recorder) const {
  at::Tensor h = x;
  if (!step.skipped(layer.path + ".self_attn")) h = h + attention(x, layer, p, step);
  if (!step.skipped(layer.path + ".mlp")) {
    const at::Tensor normed = step.skipped(structure_.parameters[layer.post_attention_norm].module)
                                  ? h
                                  : rms_norm(h, layer.post_attention_norm, p);
    if (plan_.layer_tiled(layer.index)) {
      TiledMlpSpec spec = tiled_mlp_spec(plan_, structure_, layer, step, parameters_,
                                         [this, &layer, step](const at::Tensor& shard, const ParameterTable& table) {
                                           return mlp(shard, layer, table, step);
                                         });
      spec.recorder = recorder;
      h = h + tiled_mlp(normed, spec, inputs_table);
    } else {
      h = h + mlp(normed, layer, p, step);
    }
  }
  return h;
}

at::Tensor OracleModel::vision(const at::Tensor& pixels, const ParameterTable& p, const StepView& step,
                               std::vector<at::Tensor>& deepstack) const {
  VisionTowerOps ops;
  ops.linear = [&](const at::Tensor& x, const LinearUse& use) { return linear(x, use, p, step); };
  ops.rms_norm = [&](const at::Tensor& x, int weight) { return rms_norm(x, weight, p); };
  ops.attention = [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    const at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
    return at::matmul(at::softmax(scores, -1), v);
  };
  return vision_tower_forward(structure_, *plan_.model.vision, p, step, pixels, ops, deepstack);
}

at::Tensor OracleModel::forward(const Batch& batch, const StepPosition& position, HookRecorder* recorder) const {
  // The trainer's view of the plan (runtime/model_step.h), so both skip the same modules.
  const StepView step = model_step_view(plan_, position.rank, position.iteration, position.micro_step);
  const ModelConfig& m = plan_.model;
  const ParameterTable& p = parameters_;
  const int64_t batch_size = batch.input_ids.size(0), seq = batch.input_ids.size(1);

  const Parameter& embed = structure_.parameters[structure_.embed];
  at::Tensor hidden;
  if (step.skipped(embed.module)) {
    hidden = at::randn({batch_size, seq, int64_t(m.hidden_size)}, generator_for(seed_ + 17), at::kFloat);
  } else {
    hidden = p[structure_.embed].index_select(0, batch.input_ids.flatten()).view({batch_size, seq, m.hidden_size});
  }
  // PEFT's enable_input_require_grads(): a forward hook on the input embeddings doing
  // output.requires_grad_(True), so that a reentrant checkpoint over frozen embeddings has a backward.
  if (plan_.input_require_grads() && !hidden.requires_grad()) hidden.requires_grad_(true);

  // Visual tokens are added at the first positions (the image positions of the batch).
  std::vector<at::Tensor> deepstack;
  if (batch.pixels.defined() && !structure_.vision_blocks.empty() && !step.skipped("model.visual")) {
    const at::Tensor image = vision(batch.pixels, p, step, deepstack);  // [merged tokens, hidden]
    hidden = add_at_image_positions(hidden, image);
  }
  // Qwen3VLTextModel.forward: DeepStack features k join the hidden state after decoder layer k.
  auto after_layer = [&](int layer) {
    if (layer < static_cast<int>(deepstack.size())) hidden = add_at_image_positions(hidden, deepstack[static_cast<size_t>(layer)]);
  };

  for (const DecoderLayerUse& layer : structure_.layers) {
    if (step.skipped(layer.path)) continue;
    const int count = plan_.checkpoint_count(layer.index, position.rank, position.iteration, position.micro_step);
    if (count == 0) {
      hidden = decoder_layer(hidden, layer, p, p, step, recorder);
      after_layer(layer.index);
      continue;
    }
    const std::string label = "checkpoint(layer " + std::to_string(layer.index) + ")";
    // Twice: the checkpointed function applied twice in sequence (PyTorch's CheckpointTwiceModule
    // in test_distributed's DDP tests), both wrappers over the same parameters.
    for (int application = 0; application < count; ++application) {
      if (plan_.use_reentrant) {
        LayerFunction fn = [this, &layer, step, recorder](const at::Tensor& x, const ParameterTable& table) {
          return decoder_layer(x, layer, table, table, step, recorder);
        };
        hidden = checkpoint_reentrant(hidden, fn, p, recorder, label);
      } else {
        // torch.utils.checkpoint(use_reentrant=False) records the ordinary autograd graph and only
        // refills saved activations in saved-tensor unpack hooks, by a recomputation whose graph is
        // never backwarded (torch/utils/checkpoint.py, _checkpoint_without_reentrant_generator). Its
        // hooks are therefore exactly those of the un-checkpointed layer, in the same order. LibTorch
        // 1.13's C++ API has no saved-tensor hooks, and a custom Function that recomputes and
        // returns parameter gradients reorders the hooks (random differential runs caught it naming
        // another parameter), so the oracle runs the layer as recorded: exact for hooks, no memory
        // saving (which the oracle does not need).
        hidden = decoder_layer(hidden, layer, p, p, step, recorder);
      }
    }
    after_layer(layer.index);
  }

  if (!step.skipped(structure_.parameters[structure_.final_norm].module)) hidden = rms_norm(hidden, structure_.final_norm, p);
  const std::string head_path = m.tie_word_embeddings ? "lm_head" : structure_.parameters[structure_.lm_head].module;
  at::Tensor loss;
  if (step.skipped(head_path)) {
    loss = hidden.pow(2).mean();
  } else {
    const at::Tensor logits = at::linear(hidden, p[structure_.lm_head]);
    loss = at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), batch.labels.reshape({-1}));
  }
  return loss / static_cast<double>(std::max(1, plan_.gradient_accumulation_steps));
}

}  // namespace hookstream
