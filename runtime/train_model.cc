#include "runtime/train_model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>

#include <ATen/CPUGeneratorImpl.h>
#ifdef HOOKSTREAM_HAVE_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDAFunctions.h>
#endif
#include <torch/csrc/autograd/autograd.h>
#include <torch/version.h>

#include "runtime/activation_offload.h"
#include "runtime/annotation.h"
#include "runtime/checkpoint.h"
#include "runtime/deferred_linear.h"
#include "runtime/layer_function.h"
#include "runtime/liger_ops.h"
#include "runtime/model_step.h"
#include "runtime/rope.h"
#include "runtime/safetensors.h"
#include "runtime/tiled_mlp.h"
#include "runtime/vision_tower.h"
#include "sim/inputs/input_error.h"

namespace hookstream {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kIgnoreIndex = -100;  // torch.nn.CrossEntropyLoss's ignore_index default
const std::string kPeftPrefix = "base_model.model.";

// splitmix64: independent random streams per (seed, parameter) without global state.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// The name a Hugging Face checkpoint (no PEFT wrapper) gives a parameter:
// base_model.model.model.layers.3.mlp.up_proj.base_layer.weight -> model.layers.3.mlp.up_proj.weight.
std::string hf_name(std::string name) {
  if (name.rfind(kPeftPrefix, 0) == 0) name = name.substr(kPeftPrefix.size());
  const std::string base = ".base_layer.";
  const auto at = name.find(base);
  if (at != std::string::npos) name.replace(at, base.size(), ".");
  return name;
}

std::string shape_text(c10::IntArrayRef shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// HF's rotate_half (transformers/models/llama/modeling_llama.py): (x1, x2) -> (-x2, x1). The
// halves come from one chunk, not two slices: the same values, but autograd's backward of chunk is
// one cat of the two half-gradients (SplitBackward0), where each slice's backward fills a
// zero tensor of x's size, copies its half in, and the two are added (measured on an H100 at 8K
// tokens, Llama-3.1-8B shape: 4 fills and 2 strided adds per layer, ~4 ms of a 1.1 s step).
at::Tensor rotate_half(const at::Tensor& x) {
  const auto halves = x.chunk(2, -1);
  return at::cat({-halves[1], halves[0]}, -1);
}

// Causal attention through the fused kernels: at::scaled_dot_product_attention from LibTorch 2.0
// (flash / memory-efficient / math backends chosen by the dispatcher); 1.13 has the same math
// composite under its private name. Grouped-query attention: from LibTorch 2.5 the kernels take
// the kv heads as they are (`enable_gqa=True`, what transformers' sdpa_attention_forward passes on
// CUDA without a mask for head_dim <= 256, transformers/integrations/sdpa_attention.py
// use_gqa_in_sdpa); otherwise HF's
// repeat_kv copies each kv head to heads / kv_heads query heads. The copies cost, per layer, two
// [seq, heads, head_dim] tensors saved for backward and the gradient reduction over them.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
constexpr bool kSdpaTakesGqa = true;
#else
constexpr bool kSdpaTakesGqa = false;
#endif

at::Tensor causal_attention(const at::Tensor& q, at::Tensor k, at::Tensor v) {
  const int64_t heads = q.size(1), kv_heads = k.size(1);
  const bool gqa = kv_heads != heads && kSdpaTakesGqa && q.is_cuda() && q.size(-1) <= 256;
  if (kv_heads != heads && !gqa) {
    k = k.repeat_interleave(heads / kv_heads, 1);
    v = v.repeat_interleave(heads / kv_heads, 1);
  }
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true,
                                          /*scale=*/std::nullopt, /*enable_gqa=*/gqa);
#elif TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true);
#else
  return std::get<0>(at::_scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                                       /*need_attn_weights=*/false, /*is_causal=*/true));
#endif
}

// Cross-entropy of one slice of tokens, with the slice's logits recomputed in backward instead of
// kept: the chunked loss then holds one slice's [tokens, vocab] logits (and their float32 upcast) at
// a time, in forward and in backward. Inputs: the slice's final hidden states, the head weight;
// output: the sum of the slice's token losses divided by `denominator` (the valid tokens of the
// whole micro-batch, so the chunks add up to the unchunked mean). The denominator stays a 0-dim
// tensor on the device: reading it on the host (`.item()`) would make the host wait for the whole
// forward before it issues the loss (transformers' ForCausalLMLoss divides by num_items_in_batch,
// a tensor, too). The float32 quotient is the same: the count converts exactly and both divide.
struct ChunkLossCall : torch::CustomClassHolder {
  at::Tensor labels;
  at::Tensor denominator;
  c10::ScalarType loss_dtype = c10::kFloat;
};

// `weight` undefined: `hidden` already holds the chunk's logits (axolotl's chunked_cross_entropy,
// the full bf16 logits written by one lm_head GEMM; only the upcast and the cross-entropy are
// recomputed in backward, as axolotl's compiled chunk function saves only its bf16 input).
at::Tensor chunk_loss_sum(const at::Tensor& hidden, const at::Tensor& weight, const ChunkLossCall& call) {
  // transformers' ForCausalLMLoss upcasts the logits to float32 before the cross-entropy.
  const at::Tensor logits = (weight.defined() ? at::linear(hidden, weight) : hidden).to(call.loss_dtype);
  return at::cross_entropy_loss(logits, call.labels, /*weight=*/{}, at::Reduction::Sum, kIgnoreIndex) / call.denominator;
}

struct ChunkLossFunction : torch::autograd::Function<ChunkLossFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            c10::intrusive_ptr<ChunkLossCall> call) {
    ctx->saved_data["call"] = c10::IValue::make_capsule(call);
    ctx->save_for_backward({hidden, weight});
    torch::NoGradGuard no_grad;
    return chunk_loss_sum(hidden, weight, *call);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto call = c10::static_intrusive_pointer_cast<ChunkLossCall>(ctx->saved_data["call"].toCapsule());
    const auto saved = ctx->get_saved_variables();
    at::Tensor hidden = saved[0].detach().requires_grad_(ctx->needs_input_grad(0));
    at::Tensor weight = saved[1].detach().requires_grad_(ctx->needs_input_grad(1));
    std::vector<at::Tensor> wrt;
    if (hidden.requires_grad()) wrt.push_back(hidden);
    if (weight.requires_grad()) wrt.push_back(weight);
    at::Tensor hidden_grad, weight_grad;
    if (!wrt.empty()) {
      at::Tensor loss;
      {
        torch::AutoGradMode enable_grad(true);
        loss = chunk_loss_sum(hidden, weight, *call);
      }
      // autograd::grad, not backward: no AccumulateGrad runs here, the head weight's gradient is
      // returned to the outer graph task, where every chunk's share is summed before its one
      // AccumulateGrad call (and DDP hook).
      const variable_list grads = torch::autograd::grad({loss}, wrt, {grad_outputs[0]}, false, false, true);
      size_t next = 0;
      if (hidden.requires_grad()) hidden_grad = grads[next++];
      if (weight.requires_grad()) weight_grad = grads[next++];
    }
    return {hidden_grad, weight_grad, at::Tensor()};
  }
};

// axolotl's chunk (hookstream.chunked_loss: logits): the input is a slice of the full logits, so
// only the upcast and the cross-entropy are recomputed in backward. A Function of its own: LibTorch's
// custom Functions take no undefined tensor inputs (VariableInfo needs a device).
struct LogitsChunkLossFunction : torch::autograd::Function<LogitsChunkLossFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, c10::intrusive_ptr<ChunkLossCall> call) {
    ctx->saved_data["call"] = c10::IValue::make_capsule(call);
    ctx->save_for_backward({logits});
    torch::NoGradGuard no_grad;
    return chunk_loss_sum(logits, at::Tensor(), *call);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    if (!ctx->needs_input_grad(0)) return {at::Tensor(), at::Tensor()};
    auto call = c10::static_intrusive_pointer_cast<ChunkLossCall>(ctx->saved_data["call"].toCapsule());
    at::Tensor logits = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    at::Tensor loss;
    {
      torch::AutoGradMode enable_grad(true);
      loss = chunk_loss_sum(logits, at::Tensor(), *call);
    }
    return {torch::autograd::grad({loss}, {logits}, {grad_outputs[0]}, false, false, true)[0], at::Tensor()};
  }
};

}  // namespace

struct TrainModel::Impl {
  // What the plan says for one forward (TrainPosition): unused modules, tiled-MLP shards.
  using StepView = ModelStepView;

  Plan plan;
  TrainModelOptions options;
  ModelStructure structure;
  ParameterTable params;
  c10::ScalarType adapter_dtype = c10::kFloat;
  std::unique_ptr<ActivationOffload> offload;

  // Where the work last was (position_text()). Atomics: the forward writes them on the caller's
  // thread, a layer's backward on the autograd engine's device thread; the trainer reads them after
  // backward has returned or thrown.
  enum class Where : int { None, Embedding, Vision, LayerForward, LayerBackward, LossHead };
  std::atomic<int> where{static_cast<int>(Where::None)};
  std::atomic<int> where_layer{-1};
  std::atomic<bool> oom_armed{false};

  std::function<void(const std::string&)> position_listener;

  void mark(Where w, int layer = -1) {
    where_layer.store(layer);
    where.store(static_cast<int>(w));
    if (position_listener) position_listener(where_text(w, layer));
  }

  static std::string where_text(Where w, int layer) {
    switch (w) {
      case Where::None: return "";
      case Where::Embedding: return "embedding";
      case Where::Vision: return "vision tower";
      case Where::LayerForward: return "layer " + std::to_string(layer) + " forward";
      case Where::LayerBackward: return "layer " + std::to_string(layer) + " backward";
      case Where::LossHead: return "loss head";
    }
    return "";
  }

  Impl(const Plan& p, const TrainModelOptions& o) : plan(p), options(o), structure(build_model_structure(p)) {
    check_runnable();
    // PEFT keeps LoRA weights in float32 over a bf16/fp16 base (autocast_adapter_dtype); a float64
    // base (tests) keeps them in float64 so that comparisons stay exact.
    adapter_dtype = options.dtype == c10::kDouble ? c10::kDouble : c10::kFloat;
    initialise();
    if (!options.weights_path.empty()) load_weights(options.weights_path);
    bool offloaded = false;
    for (const DecoderLayerUse& layer : structure.layers) offloaded = offloaded || plan.layer_offloaded(layer.index);
    if (offloaded) {
      StreamProtocol protocol = options.protocol;
      if (protocol.streams.empty()) {
        const std::string dir = std::filesystem::path(plan.source).parent_path().string();
        protocol = load_stream_protocol(plan.offload_protocol_name(), dir);
      }
      offload = std::make_unique<ActivationOffload>(std::move(protocol), plan.model.num_hidden_layers,
                                                    make_stream_backend(options.device, plan.pinned_slots_exact),
                                                    options.inject_reload_oom);
    }
  }

  std::string key(const std::string& name) const { return plan.source + ": key " + name; }

  void check_runnable() const {
    if (plan.load_in_4bit || plan.load_in_8bit) {
      throw InputError(key(plan.load_in_4bit ? "load_in_4bit" : "load_in_8bit"),
                       "quantized (bitsandbytes 4/8-bit) base weights are not supported by hookstream run; "
                       "expected false (train the base in bf16 with a LoRA adapter instead)");
    }
    if (plan.model.vision && plan.vision_inputs && !vision_tower_supported(*plan.model.vision)) {
      throw InputError(key("hookstream.vision_inputs"),
                       "hookstream run computes the Qwen2-VL, Qwen2.5-VL and Qwen3-VL vision towers only; expected false "
                       "(train the text decoder without images)");
    }
    for (const DecoderLayerUse& layer : structure.layers) {
      if (layer.mixer == TokenMixer::Attention) continue;
      throw InputError(plan.model.source, "layer " + std::to_string(layer.index) + " mixes tokens with a " + to_string(layer.mixer) +
                                              " (" + layer.mixer_module + "); hookstream run computes attention layers only "
                                              "(verify and plan model it)");
    }
    if (plan.device_map != DeviceMap::PerRank) {
      throw InputError(key("device_map"), "hookstream run places one full replica per rank; expected no device_map");
    }
    if (!rope_supported(plan.model)) {
      throw InputError(plan.model.source, "key \"rope_scaling.rope_type\": " + plan.model.rope_type +
                                              " is not computed by hookstream run; expected default, linear or llama3");
    }
    if (plan.activation_offloading) {
      for (int layer : plan.checkpoint_twice_layers) {
        if (plan.layer_offloaded(layer)) {
          throw InputError(key("hookstream.checkpoint_twice_layers"),
                           "layer " + std::to_string(layer) +
                               " is offloaded; the offload protocol runs once per layer (as the simulator expands it)");
        }
      }
    }
  }

  c10::ScalarType dtype_of(const Parameter& p) const { return p.adapter ? adapter_dtype : options.dtype; }

  // transformers' LlamaPreTrainedModel._init_weights: Linear and Embedding weights ~ N(0,
  // initializer_range), biases zero, RMSNorm weights one; PEFT's LoRA: A kaiming_uniform(a=sqrt(5))
  // (bound 1/sqrt(fan_in)), B zero, so the adapted model starts as the base model. Every parameter
  // draws from its own stream, keyed by the seed and its name without PEFT's wrapping, so a base
  // weight is the same with or without an adapter, in every rank. On a GPU the streams are CUDA
  // generators (Philox) drawing on the device: an 8B model's CPU draw would take a minute per rank;
  // so a CPU and a GPU run of the same seed start from different (equally distributed) weights.
  at::Generator generator(uint64_t seed) const {
#ifdef HOOKSTREAM_HAVE_CUDA
    if (options.device.is_cuda()) {
      at::Generator gen = at::make_generator<at::CUDAGeneratorImpl>(
          options.device.has_index() ? options.device.index() : c10::cuda::current_device());
      gen.set_current_seed(seed);
      return gen;
    }
#endif
    return at::make_generator<at::CPUGeneratorImpl>(seed);
  }

  void initialise() {
    torch::NoGradGuard no_grad;
    const double std = plan.model.initializer_range;
    for (const Parameter& p : structure.parameters) {
      const std::string name = hf_name(p.name);
      at::Generator gen = generator(mix(options.seed ^ fnv1a(name)));
      const at::TensorOptions draw = at::TensorOptions().dtype(at::kFloat).device(options.device);
      at::Tensor t;
      const bool lora_a = p.adapter && name.find(".lora_A.") != std::string::npos;
      if (p.adapter && !lora_a) {
        t = at::zeros(p.shape, draw);
      } else if (lora_a) {
        // fan_in: every input element of the module (a conv's in_channels x kernel), as kaiming_uniform_.
        int64_t fan_in = 1;
        for (size_t d = 1; d < p.shape.size(); ++d) fan_in *= p.shape[d];
        const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
        t = at::empty(p.shape, draw).uniform_(-bound, bound, gen);
      } else if (p.shape.size() == 1 && name.find("norm") != std::string::npos) {
        t = at::ones(p.shape, draw);
      } else if (p.shape.size() == 1) {
        t = at::zeros(p.shape, draw);
      } else {
        t = at::empty(p.shape, draw).normal_(0.0, std, gen);
      }
      t = t.to(options.device, dtype_of(p)).contiguous();
      t.requires_grad_(p.trainable);
      params.push_back(t);
    }
  }

  // Names a tensor may have in the file: the structure's own (PEFT-wrapped) or the plain HF one.
  void load_weights(const std::string& path) {
    const SafetensorsFile file(path);
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < structure.parameters.size(); ++i) {
      const Parameter& p = structure.parameters[i];
      std::string found;
      for (const std::string& name : {p.name, hf_name(p.name)}) {
        if (file.contains(name)) {
          found = name;
          break;
        }
      }
      if (found.empty()) {
        if (p.adapter) continue;  // a base checkpoint carries no adapter: PEFT's fresh init stays
        throw InputError(path, "tensor " + hf_name(p.name) + " is missing (expected shape " + shape_text(p.shape) + ")");
      }
      const SafetensorsEntry& entry = file.entry(found);
      if (entry.shape != p.shape) {
        throw InputError(path, "tensor " + found + ": expected shape " + shape_text(p.shape) + ", got " + shape_text(entry.shape));
      }
      if (entry.dtype != "F32" && entry.dtype != "BF16" && entry.dtype != "F16" && entry.dtype != "F64") {
        throw InputError(path, "tensor " + found + ": expected a floating-point dtype (F32, BF16, F16, F64), got " + entry.dtype);
      }
      // HF's from_pretrained casts to the model's dtype the same way (torch_dtype=...).
      params[i].copy_(file.tensor(found));
    }
  }

  StepView step_view(const TrainPosition& position) const {
    const StepView step = model_step_view(plan, position.rank, position.iteration, position.micro_step);
    // What the runtime can leave out is what a forward can skip without changing the model's
    // meaning for the rest: decoder layers, their attention or MLP blocks, projections, adapters.
    const int always[] = {structure.embed, structure.final_norm, structure.lm_head};
    for (int index : always) {
      if (step.skipped(structure.parameters[index].module) ||
          (index == structure.lm_head && plan.model.tie_word_embeddings && step.skipped("lm_head"))) {
        throw InputError(key("hookstream.unused_modules"),
                         structure.parameters[index].module + " is always used by hookstream run");
      }
    }
    return step;
  }

  // --- the model's maths (transformers' modeling_llama.py / modeling_qwen3.py) ------------------

  // y = x W^T + b, plus PEFT's LoRA branch (peft/tuners/lora/layer.py Linear.forward): scale *
  // B(A(x)) added. With bf16/fp16 activations the adapter GEMMs run in that dtype on the fp32
  // weights cast down, which is what HF Trainer's bf16 autocast makes of PEFT's forward (autocast
  // casts a linear's inputs to the autocast dtype); an fp32 copy of x per projection would be
  // saved for backward otherwise and would cost ~4 bytes x tokens x hidden per adapted projection.
  // In float32/float64 runs the input is cast to the adapter's dtype, as PEFT does without autocast.
  at::Tensor linear(const at::Tensor& x, const LinearUse& use, const ParameterTable& p, const StepView& step) const {
    if (step.skipped(linear_module_path(structure, use))) {
      auto sizes = x.sizes().vec();
      sizes.back() = structure.parameters[use.weight].shape[0];
      return at::zeros(sizes, x.options());
    }
    // A convolution whose kernel equals its stride (the vision tower's Conv3d patch embedding) is,
    // on flattened patches, a linear map with the kernel flattened; so are PEFT's LoRA pair on it
    // (lora_A: the conv's kernel; lora_B: a 1x1x1 kernel, peft/tuners/lora/layer.py _ConvNd).
    auto matrix = [&](int index) {
      const at::Tensor& w = p[index];
      return w.dim() > 2 ? w.reshape({w.size(0), -1}) : w;
    };
    at::Tensor y = at::linear(x, matrix(use.weight), use.bias >= 0 ? p[use.bias] : at::Tensor());
    if (lora_active(structure, use, step)) {
      const double scale = plan.lora_alpha / static_cast<double>(plan.lora_r);
      if (x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kHalf) {
        const at::Tensor a = at::linear(x, matrix(use.lora_a).to(x.scalar_type()));
        y = y + at::linear(a, matrix(use.lora_b).to(x.scalar_type())) * scale;
      } else {
        const at::Tensor adapter_input = x.to(p[use.lora_a].scalar_type());
        y = (y + at::linear(at::linear(adapter_input, matrix(use.lora_a)), matrix(use.lora_b)) * scale).to(x.scalar_type());
      }
    }
    return y;
  }

  // LlamaRMSNorm: computed in float32, cast back, then scaled by the weight.
  at::Tensor rms_norm(const at::Tensor& x, int weight, const ParameterTable& p) const {
    // axolotl's LigerPlugin swaps every RMSNorm of the model for Liger's (runtime/liger_ops.h).
    if (plan.liger_rms_norm_applied()) return liger_rms_norm(x, p[weight], plan.model.rms_norm_eps);
    const c10::ScalarType compute = x.scalar_type() == c10::kDouble ? c10::kDouble : c10::kFloat;
    const at::Tensor h = x.to(compute);
    const at::Tensor normed = h * at::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + plan.model.rms_norm_eps);
    return p[weight] * normed.to(x.scalar_type());
  }

  // LlamaRotaryEmbedding: inv_freq (runtime/rope.h: theta^(-2j/d), with the config's rope_scaling),
  // cos/sin of position * inv_freq computed in float32 and duplicated over both halves (HF's
  // rotate_half convention), cast to the activations' dtype. [seq, head_dim] each.
  std::pair<at::Tensor, at::Tensor> rope(int64_t seq, c10::ScalarType dtype) const {
    const auto f = at::TensorOptions().dtype(dtype == c10::kDouble ? c10::kDouble : c10::kFloat).device(options.device);
    const at::Tensor inv_freq = rope_inv_freq(plan.model, f);
    const at::Tensor freqs = at::outer(at::arange(seq, f), inv_freq);
    const at::Tensor emb = at::cat({freqs, freqs}, -1);
    return {emb.cos().to(dtype), emb.sin().to(dtype)};
  }

  at::Tensor attention(const at::Tensor& x, const DecoderLayerUse& layer, const ParameterTable& p, const StepView& step,
                       const std::pair<at::Tensor, at::Tensor>& cos_sin) const {
    const ModelConfig& m = plan.model;
    const int64_t heads = m.num_attention_heads, kv_heads = m.num_key_value_heads, head_dim = m.head_dim;
    const int64_t batch = x.size(0), seq = x.size(1);
    const at::Tensor normed = rms_norm(x, layer.input_norm, p);
    at::Tensor q = linear(normed, layer.q, p, step).view({batch, seq, heads, head_dim});
    at::Tensor k = linear(normed, layer.k, p, step).view({batch, seq, kv_heads, head_dim});
    at::Tensor v = linear(normed, layer.v, p, step).view({batch, seq, kv_heads, head_dim});
    // Qwen3Attention: per-head RMSNorm on q and k before the rotary embedding.
    if (layer.q_norm >= 0) q = rms_norm(q, layer.q_norm, p);
    if (layer.k_norm >= 0) k = rms_norm(k, layer.k_norm, p);
    q = q.transpose(1, 2);
    k = k.transpose(1, 2);
    v = v.transpose(1, 2);
    const at::Tensor& cos = cos_sin.first;
    const at::Tensor& sin = cos_sin.second;
    q = q * cos + rotate_half(q) * sin;
    k = k * cos + rotate_half(k) * sin;
    // Grouped-query attention: causal_attention shares each kv head among heads / kv_heads query heads.
    const at::Tensor context = causal_attention(q, k, v).transpose(1, 2).reshape({batch, seq, heads * head_dim});
    return linear(context, layer.o, p, step);
  }

  // LlamaMLP: down(silu(gate(x)) * up(x)). C++ leaves operand order unspecified: sequence it, the
  // creation order of autograd nodes decides the order of hook firings.
  at::Tensor mlp(const at::Tensor& x, const DecoderLayerUse& layer, const ParameterTable& p, const StepView& step) const {
    return linear(mlp_activation(x, layer, p, step), layer.down, p, step);
  }

  // silu(gate(x)) * up(x): the down projection's input.
  at::Tensor mlp_activation(const at::Tensor& x, const DecoderLayerUse& layer, const ParameterTable& p, const StepView& step) const {
    if (plan.liger_glu_applied()) {  // LigerSwiGLUMLP (runtime/liger_ops.h)
      const at::Tensor gate = linear(x, layer.gate, p, step);
      return liger_silu_mul(gate, linear(x, layer.up, p, step));
    }
    const at::Tensor gate = at::silu(linear(x, layer.gate, p, step));
    const at::Tensor up = linear(x, layer.up, p, step);
    return gate * up;
  }

  // linear() whose output only its backward needs (runtime/deferred_linear.h): with the same
  // operands and the same casts of the adapter, so the gradients are linear()'s. Falls back to
  // linear() where the deferred form does not apply (a skipped module, a bias, a convolution's
  // kernel, an adapter in another dtype than a float32/float64 input).
  at::Tensor deferred_projection(const at::Tensor& x, const LinearUse& use, const ParameterTable& p, const StepView& step) const {
    const bool lora = lora_active(structure, use, step);
    const bool low_precision = x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kHalf;
    if (step.skipped(linear_module_path(structure, use)) || use.bias >= 0 || p[use.weight].dim() != 2 ||
        (lora && (p[use.lora_a].dim() != 2 || p[use.lora_b].dim() != 2 ||
                  (!low_precision && p[use.lora_a].scalar_type() != x.scalar_type())))) {
      return linear(x, use, p, step);
    }
    at::Tensor a, b;
    double scale = 0;
    if (lora) {
      a = p[use.lora_a].to(x.scalar_type());
      b = p[use.lora_b].to(x.scalar_type());
      scale = plan.lora_alpha / static_cast<double>(plan.lora_r);
    }
    return deferred_linear(x, p[use.weight], a, b, scale);
  }

  // The trainable parameters that are inputs of the layer's autograd graph: what a non-reentrant
  // checkpoint must return gradients for. A tiled MLP reads its weights through its module, not as
  // inputs, unless the plan passes them (weights_as_inputs, or FunctionReturnsGrads which needs it).
  std::vector<int> layer_graph_weights(const DecoderLayerUse& layer, const StepView& step) const {
    std::vector<int> result;
    auto add = [&](int index) {
      if (index >= 0 && structure.parameters[index].trainable) result.push_back(index);
    };
    if (!step.skipped(layer.path + ".self_attn")) {
      add(layer.input_norm);
      for (const LinearUse* use : {&layer.q, &layer.k, &layer.v, &layer.o}) append_linear_trainable_weights(structure, *use, step, result);
      add(layer.q_norm);
      add(layer.k_norm);
    }
    if (!step.skipped(layer.path + ".mlp")) {
      add(layer.post_attention_norm);
      if (!plan.layer_tiled(layer.index) || plan.tiled_mlp_weights_as_inputs || plan.tiled_mlp_backward == TiledBackward::FunctionReturnsGrads) {
        const std::vector<int> mlp = mlp_trainable_weights(structure, layer, step);
        result.insert(result.end(), mlp.begin(), mlp.end());
      }
    }
    std::sort(result.begin(), result.end());
    return result;
  }

  // LlamaDecoderLayer.forward: h = x + attn(input_layernorm(x)); h + mlp(post_attention_layernorm(h)).
  // `p` is what the layer computes with (recomputation copies inside a non-reentrant checkpoint);
  // a tiled MLP always recomputes with the real weights (ALST reads them through ctx.self).
  at::Tensor decoder_layer(const at::Tensor& x, const DecoderLayerUse& layer, const ParameterTable& p,
                           const StepView& step, const std::pair<at::Tensor, at::Tensor>& cos_sin) const {
    return decoder_layer_terms(x, layer, p, step, cos_sin, /*defer_down=*/false).front();
  }

  // The layer's output as terms whose sum it is: {output} as the forward computes it, or, for a
  // non-reentrant checkpoint's recompute (defer_down), {h, deferred down projection}: the residual
  // add and the down projection's output are never formed (runtime/deferred_linear.h says why
  // that is PyTorch's early stop and one GEMM more).
  std::vector<at::Tensor> decoder_layer_terms(const at::Tensor& x, const DecoderLayerUse& layer, const ParameterTable& p,
                                              const StepView& step, const std::pair<at::Tensor, at::Tensor>& cos_sin,
                                              bool defer_down) const {
    at::Tensor h = x;
    if (!step.skipped(layer.path + ".self_attn")) h = h + attention(x, layer, p, step, cos_sin);
    if (!step.skipped(layer.path + ".mlp")) {
      const at::Tensor normed = rms_norm(h, layer.post_attention_norm, p);
      if (plan.layer_tiled(layer.index)) {
        const TiledMlpSpec spec = tiled_mlp_spec(plan, structure, layer, step, params,
                                                 [this, &layer, step](const at::Tensor& shard, const ParameterTable& table) {
                                                   return mlp(shard, layer, table, step);
                                                 });
        h = h + tiled_mlp(normed, spec, p);
      } else if (defer_down) {
        return {h, deferred_projection(mlp_activation(normed, layer, p, step), layer.down, p, step)};
      } else {
        h = h + mlp(normed, layer, p, step);
      }
    }
    return {h};
  }

  at::Tensor head_loss(const at::Tensor& hidden, const at::Tensor& labels) const {
    const at::Tensor weight = params[structure.lm_head];
    const c10::ScalarType loss_dtype = options.dtype == c10::kDouble ? c10::kDouble : c10::kFloat;
    const at::Tensor flat_hidden = hidden.reshape({-1, hidden.size(-1)});
    const at::Tensor flat_labels = labels.reshape({-1});
    if (!plan.chunked_cross_entropy) {
      const at::Tensor logits = at::linear(flat_hidden, weight).to(loss_dtype);
      return at::cross_entropy_loss(logits, flat_labels, {}, at::Reduction::Mean, kIgnoreIndex);
    }
    // Mean over the valid tokens of the whole micro-batch (0/0 = nan when there are none, as the
    // unchunked mean gives).
    const at::Tensor valid = flat_labels.ne(kIgnoreIndex).sum();
    const int64_t chunks = std::max(1, plan.chunked_cross_entropy_num_chunks);
    // hookstream.chunked_loss: recompute_lm_head chunks the hidden states and runs the lm_head per
    // chunk; axolotl's chunked_cross_entropy (the default) chunks the full logits of one lm_head
    // GEMM (axolotl/monkeypatch/loss/chunked.py: `logits.chunk(num_output_chunks, dim=1)`).
    const bool per_chunk_head = plan.loss_recomputes_lm_head();
    const at::Tensor chunked = per_chunk_head ? flat_hidden : at::linear(flat_hidden, weight);
    const auto input_chunks = chunked.chunk(chunks, 0);
    const auto label_chunks = flat_labels.chunk(chunks, 0);
    at::Tensor total;
    for (size_t c = 0; c < input_chunks.size(); ++c) {
      auto call = c10::make_intrusive<ChunkLossCall>();
      call->labels = label_chunks[c];
      call->denominator = valid;
      call->loss_dtype = loss_dtype;
      const at::Tensor part = per_chunk_head ? ChunkLossFunction::apply(input_chunks[c], weight, call)
                                             : LogitsChunkLossFunction::apply(input_chunks[c], call);
      total = total.defined() ? total + part : part;
    }
    return total;
  }

  // The vision tower over one synthetic image of min(hookstream.vision_tokens, sequence) merged
  // tokens (the size the time and memory models cost), its pixels drawn from the seed and the
  // position so that every run sees the same images. Runs without checkpointing, as the simulator
  // expands it (sim/engine/forward_graph.cc).
  at::Tensor vision(const TrainPosition& position, const StepView& step, int64_t seq, c10::ScalarType dtype,
                    std::vector<at::Tensor>& deepstack) {
    mark(Where::Vision);
    const VisionTowerConfig& v = *plan.model.vision;
    const int64_t merge = int64_t(v.spatial_merge_size) * v.spatial_merge_size;
    const int64_t tokens = std::max<int64_t>(1, std::min<int64_t>(plan.vision_tokens, seq));
    at::Generator gen = generator(mix(options.seed ^ 0x1a9eULL) + uint64_t(position.rank) * 1000003ULL +
                                  uint64_t(position.iteration) * 1009ULL + uint64_t(position.micro_step));
    const at::Tensor pixels =
        at::empty({tokens * merge, vision_patch_features(v)}, at::TensorOptions().dtype(at::kFloat).device(options.device))
            .normal_(0.0, 1.0, gen)
            .to(dtype);
    VisionTowerOps ops;
    ops.linear = [&](const at::Tensor& x, const LinearUse& use) { return linear(x, use, params, step); };
    ops.rms_norm = [&](const at::Tensor& x, int weight) { return rms_norm(x, weight, params); };
    ops.attention = [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
      // Every patch of the image attends to every other (the tower's cu_seqlens span one image).
#if TORCH_VERSION_MAJOR >= 2
      return at::scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)).squeeze(0);
#else
      return std::get<0>(at::_scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), {}, 0.0, false, false))
          .squeeze(0);
#endif
    };
    return vision_tower_forward(structure, v, params, step, pixels, ops, deepstack);
  }

  at::Tensor loss(const at::Tensor& input_ids, const at::Tensor& labels, const TrainPosition& position) {
    if (input_ids.dim() != 2 || labels.sizes() != input_ids.sizes()) {
      throw std::invalid_argument("TrainModel::loss: expected input_ids and labels of one shape [batch, sequence], got " +
                                  shape_text(input_ids.sizes()) + " and " + shape_text(labels.sizes()));
    }
    const StepView step = step_view(position);
    mark(Where::Embedding);
    at::Tensor hidden = at::embedding(params[structure.embed], input_ids);
    // PEFT's enable_input_require_grads(): a forward hook on the input embeddings doing
    // output.requires_grad_(True), so that a reentrant checkpoint over frozen embeddings has a backward.
    if (plan.input_require_grads() && !hidden.requires_grad()) hidden.requires_grad_(true);
    const auto cos_sin = rope(input_ids.size(1), hidden.scalar_type());
    if (offload) offload->begin_micro_step();

    // The image: its merged tokens are added at the first positions, Qwen3-VL's DeepStack features
    // after the first decoder layers (Qwen3VLTextModel.forward), as the oracle model does.
    std::vector<at::Tensor> deepstack;
    if (plan.model.vision && plan.vision_inputs && !structure.vision_blocks.empty() && !step.skipped("model.visual")) {
      hidden = add_at_image_positions(hidden, vision(position, step, input_ids.size(1), hidden.scalar_type(), deepstack));
    }

    for (const DecoderLayerUse& layer : structure.layers) {
      if (step.skipped(layer.path)) continue;
      ScopedAnnotation forward_range(layer_annotation("forward", layer.index));
      mark(Where::LayerForward, layer.index);
      auto backward_range = c10::make_intrusive<BackwardRange>(layer_annotation("backward", layer.index));
      backward_range->on_open = [this, index = layer.index] {
        mark(Where::LayerBackward, index);
        if (oom_armed.exchange(false)) {
          // The allocator's exception type; no request size in the text, so that the fallback's
          // evidence (runtime/trainer.h OutOfMemoryReport) holds nothing but what the rank measured.
          throw c10::OutOfMemoryError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                                      "CUDA out of memory (injected: oom-rank)");
        }
      };
      hidden = mark_backward_range_end(hidden, backward_range);
      const int count = plan.checkpoint_count(layer.index, position.rank, position.iteration, position.micro_step);
      LayerFunction fn = [this, &layer, step, cos_sin](const at::Tensor& x, const ParameterTable& table) {
        return decoder_layer(x, layer, table, step, cos_sin);
      };
      if (count == 0) {
        hidden = fn(hidden, params);
      } else {
        if (count > 1 && plan.layer_offloaded(layer.index)) {
          throw InputError(key("hookstream.checkpoint_twice_layers"),
                           "layer " + std::to_string(layer.index) + " is offloaded; the offload protocol runs once per layer");
        }
        // Twice: the checkpointed function applied twice in sequence (PyTorch's
        // CheckpointTwiceModule in test_distributed's DDP tests), both over the same parameters.
        for (int application = 0; application < count; ++application) {
          CheckpointSpec spec;
          spec.layer = fn;
          spec.params = params;
          spec.reentrant = plan.use_reentrant;
          if (!spec.reentrant) {
            spec.weights = layer_graph_weights(layer, step);
            spec.recompute_terms = [this, &layer, step, cos_sin](const at::Tensor& x, const ParameterTable& table) {
              return decoder_layer_terms(x, layer, table, step, cos_sin, /*defer_down=*/true);
            };
          }
          // Plan::layer_offloaded: the layers the expansion runs the protocol on (StepExpander::protocol_layer).
          spec.offload = plan.layer_offloaded(layer.index) ? offload.get() : nullptr;
          spec.layer_index = layer.index;
          spec.label = "checkpoint(layer " + std::to_string(layer.index) + ")";
          hidden = checkpoint_layer(hidden, std::move(spec));
        }
      }
      hidden = mark_backward_range_start(hidden, backward_range);
      if (layer.index < static_cast<int>(deepstack.size())) {
        hidden = add_at_image_positions(hidden, deepstack[static_cast<size_t>(layer.index)]);
      }
    }
    mark(Where::LossHead);
    hidden = rms_norm(hidden, structure.final_norm, params);
    return head_loss(hidden, labels) / static_cast<double>(std::max(1, plan.gradient_accumulation_steps));
  }
};

TrainModel::TrainModel(const Plan& plan, const TrainModelOptions& options) : impl_(std::make_unique<Impl>(plan, options)) {}
TrainModel::~TrainModel() = default;

const ModelStructure& TrainModel::structure() const { return impl_->structure; }

std::vector<at::Tensor> TrainModel::ddp_parameters() const {
  std::vector<at::Tensor> result;
  for (int index : impl_->structure.ddp_parameters) result.push_back(impl_->params[index]);
  return result;
}

std::vector<std::string> TrainModel::ddp_parameter_names() const {
  std::vector<std::string> result;
  for (int index : impl_->structure.ddp_parameters) result.push_back(impl_->structure.parameters[index].name);
  return result;
}

std::vector<std::pair<std::string, at::Tensor>> TrainModel::named_parameters() const {
  std::vector<std::pair<std::string, at::Tensor>> result;
  for (size_t i = 0; i < impl_->params.size(); ++i) result.emplace_back(impl_->structure.parameters[i].name, impl_->params[i]);
  return result;
}

at::Tensor TrainModel::loss(const at::Tensor& input_ids, const at::Tensor& labels, const TrainPosition& position) {
  return impl_->loss(input_ids, labels, position);
}

std::string TrainModel::position_text() const {
  return Impl::where_text(static_cast<Impl::Where>(impl_->where.load()), impl_->where_layer.load());
}

void TrainModel::set_position_listener(std::function<void(const std::string&)> listener) {
  impl_->position_listener = std::move(listener);
}

void TrainModel::inject_out_of_memory_in_next_backward() { impl_->oom_armed.store(true); }

int64_t TrainModel::prepare_offload(int64_t micro_batch, int64_t sequence_len) {
  if (!impl_->offload) return 0;
  std::vector<int> layers;  // in forward order, as the decoder loop hands them to the protocol
  for (const DecoderLayerUse& layer : impl_->structure.layers) {
    if (impl_->plan.layer_offloaded(layer.index)) layers.push_back(layer.index);
  }
  const at::Tensor like = at::empty({micro_batch, sequence_len, impl_->plan.model.hidden_size},
                                    at::TensorOptions().dtype(impl_->options.dtype).device(impl_->options.device));
  return impl_->offload->prepare(like, layers);
}

OffloadStats TrainModel::take_offload_stats() {
  if (!impl_->offload) return OffloadStats();
  return impl_->offload->take_stats();
}

}  // namespace hookstream
