#include "sim/cost/memory_model.h"

#include "sim/cost/engine_cost.h"
#include "sim/cost/optimizer_states.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

namespace hookstream {

namespace {

constexpr int64_t kMiB = 1024 * 1024;
// c10/cuda/CUDACachingAllocator.cpp constants.
constexpr int64_t kMinBlockSize = 512;
constexpr int64_t kSmallSize = kMiB;
constexpr int64_t kRoundLarge = 2 * kMiB;
constexpr int64_t kMinLargeAlloc = 10 * kMiB;

int64_t round_up(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }


// The bytes a parameter (and its .grad) occupies. PEFT creates adapter weights in float32 even on a
// bf16 base (LoraLayer.update_layer / `autocast_adapter_dtype=True`, the default since PEFT 0.12).
int dtype_size(const Parameter& parameter) { return parameter.adapter ? 4 : dtype_bytes(parameter.dtype); }

// Tensors of one moment, each rounded by the allocator separately.
class Ledger {
 public:
  explicit Ledger(bool rounding) : rounding_(rounding) {}
  void add(MemoryPoint& point, MemoryCategory category, int64_t tensor_bytes, int64_t count = 1) const {
    if (tensor_bytes <= 0 || count <= 0) return;
    point.bytes[category] += count * (rounding_ ? device_allocation_bytes(tensor_bytes) : tensor_bytes);
  }
  int64_t pinned(int64_t tensor_bytes) const {
    return rounding_ ? pinned_allocation_bytes(tensor_bytes) : tensor_bytes;
  }
  int64_t device(int64_t tensor_bytes) const { return rounding_ ? device_allocation_bytes(tensor_bytes) : tensor_bytes; }
  int64_t pinned_exact(int64_t tensor_bytes) const {
    constexpr int64_t kPage = 4096;
    return rounding_ ? (tensor_bytes + kPage - 1) / kPage * kPage : tensor_bytes;
  }

 private:
  bool rounding_;
};

// One decoder layer's activation tensors, in elements per token (bf16 unless noted). HF's Llama/Qwen
// decoder with SDPA (flash / memory-efficient kernels: O(seq) saved state, no seq x seq matrix).
struct LayerActivations {
  std::vector<int64_t> saved_attention;  // elements per token, model dtype
  int64_t saved_attention_fp32 = 0;      // SDPA's logsumexp: one fp32 per head and token
  // RMSNorm inputs, saved as their float32 upcast: transformers' LlamaRMSNorm (and every copy of it:
  // Qwen, Mistral, ...) runs `hidden_states.to(torch.float32)`, then `pow(2)` and the multiply by
  // rsqrt, which both save that fp32 tensor; the bf16 input itself is saved by nothing. Elements per
  // token of the input, upcast (4 bytes) when the model dtype is narrower. LayerNorm (a norm with a
  // bias) saves its input in the model dtype instead (native_layer_norm), in saved_attention.
  int64_t saved_norm_inputs_fp32 = 0;
  // Liger's RMSNorm (Plan::liger_rms_norm_applied; liger_kernel/ops/rms_norm.py
  // LigerRMSNormFunction saves X, W and RSTD) keeps each norm's input as it is, in the model dtype,
  // plus one float32 rstd per row (in saved_attention_fp32). input_layernorm's input is the layer's
  // input: in a checkpointed layer the checkpoint (or its reload buffer) holds it already, so it is
  // counted only in a layer that is not checkpointed (layer_input_saved).
  int64_t saved_norm_inputs = 0;
  int64_t layer_input_saved = 0;
  // attn_implementation "eager" (transformers' eager_attention_forward): softmax(QK^T) runs in fp32
  // (saved by softmax's backward) and is cast to the model dtype (saved by the PV matmul): a row
  // of S scores per head and token in each. 0 for sdpa/flash/flex.
  int64_t saved_scores_fp32 = 0;
  int64_t saved_scores = 0;
  std::vector<int64_t> saved_mlp;        // untiled MLP
  std::vector<int64_t> saved_tiled_mlp;  // tiled MLP: only its input is saved
  std::vector<int64_t> lora;             // LoRA A outputs (r per targeted projection)
  // What one layer's backward allocates on top of its saved tensors, by phase (elements per token).
  // MLP phase, with every saved tensor still alive: dL/dh flowing in, and two intermediate-size
  // gradients (d(act*up), then d(gate) and d(up)). Measured on an H100 (tools/measure_layer_memory.py,
  // 2026-11-27, Llama-3.1-8B LoRA layer, 8K-128K): 57,362 B/token above the live tensors, checkpointed
  // or not = 2 x 14,336 bf16 elements.
  std::vector<int64_t> mlp_backward_temporaries;
  // Attention phase, once the MLP's saved tensors are freed: dL/dh, the attention output's grad,
  // dq/dk/dv, and SDPA's own float32 buffers (model dtype elements here; the fp32 part below).
  std::vector<int64_t> attention_backward_temporaries;
  // cuDNN/flash SDPA backward: a float32 dq accumulator and a second q-sized float32 buffer plus one
  // float32 per head and token; measured 32,896 B/token for 32 heads of 128 = 2 x 4096 x 4 + 32 x 4.
  int64_t attention_backward_fp32 = 0;
  std::vector<int64_t> mlp_chunk_intermediates;    // gate, up, act(gate), act*up of one token
};

// A recurrent token mixer's layer (token_mixer.h) in place of attention's terms: not measured on a
// GPU (estimates from what transformers' Qwen3NextGatedDeltaNet.forward and fla's
// chunk_gated_delta_rule keep; docs/memory-and-time.md "Recurrent token mixers"). Per token, in the
// model dtype: input_layernorm's input and output, the in-projections' outputs (the conv1d's input
// and z, b, a), the conv1d+SiLU output (q, k, v as the chunk kernel saves them), the core output
// and the gate z (the gated norm's inputs) and its output (out_proj's input). float32: the RMSNorm
// upcasts, and the kernel's saved WY matrix A ([heads, chunk] per token) and gates g, beta. No
// recurrent state is kept across the sequence in training: the per-chunk states [heads, dk, dv]
// are recomputed in backward (a float32 temporary of heads*dk*dv per chunk of tokens).
void recurrent_mixer_activations(const DecoderLayerUse& layer, int64_t h, bool rms, LayerActivations& a) {
  const RecurrentMixerShape& s = layer.mixer_shape;
  if (layer.mixer == TokenMixer::LightningAttention) {
    // MiniMaxLightningAttention.forward (modeling_minimax.py, a Python loop over blocks of B tokens;
    // autograd keeps every block's tensors), per token in the model dtype: input_layernorm's input
    // and output (qkv_proj's and output_gate's input), qkv_proj's output (the activation's input)
    // and the activated q, k, v, the decayed q and k, the block's Q K^T and its decayed copy
    // ([heads, B] each), the concatenated output, the RMSNorm's output, output_gate's output (the
    // sigmoid's input) and the gated product (out_proj's input). Each block's running state
    // [heads, d, d] is an input of the next block's matmul: heads*d*d per block of B tokens.
    const int64_t inner = s.heads * s.value_dim;
    a.saved_attention = rms ? std::vector<int64_t>{h} : std::vector<int64_t>{h, h};
    a.saved_attention.insert(a.saved_attention.end(), {3 * inner, 3 * inner, 2 * inner, s.heads * s.chunk, s.heads * s.chunk, inner,
                                                       inner, inner, inner});
    if (s.chunk > 0) a.saved_attention.push_back((s.heads * s.key_dim * s.value_dim + s.chunk - 1) / s.chunk);
    a.saved_norm_inputs_fp32 = (rms ? 2 * h : 0) + inner;  // the core output's RMSNorm upcasts it
    a.saved_attention_fp32 = a.saved_scores_fp32 = a.saved_scores = 0;
    a.attention_backward_temporaries = {h, h, 3 * inner, 3 * inner, s.heads * s.chunk, inner, inner};
    a.attention_backward_fp32 = 0;
    return;
  }
  if (layer.mixer == TokenMixer::ShortConv) {
    // Lfm2ShortConv.forward (modeling_lfm2.py), per token in the model dtype: operator_norm's input
    // and output (in_proj's input), in_proj's output BCx [3C] (B, C and x are views of it, saved by
    // the two products), B * x (the conv's input), the conv's output (C * y's other factor) and
    // C * y made contiguous (out_proj's input). Nothing float32 beyond the RMSNorm's upcast input;
    // the conv keeps no state across the sequence in training.
    const int64_t c = s.conv_channels;
    a.saved_attention = rms ? std::vector<int64_t>{h} : std::vector<int64_t>{h, h};
    a.saved_attention.insert(a.saved_attention.end(), {3 * c, c, c, c});
    a.saved_norm_inputs_fp32 = rms ? 2 * h : 0;
    a.saved_attention_fp32 = a.saved_scores_fp32 = a.saved_scores = 0;
    // Backward: dL/dhidden in and out, the gradient of BCx [3C], and those of the conv's input and output.
    a.attention_backward_temporaries = {h, h, 3 * c, c, c};
    a.attention_backward_fp32 = 0;
    return;
  }
  const int64_t value = s.heads * s.value_dim;
  a.saved_attention = rms ? std::vector<int64_t>{h} : std::vector<int64_t>{h, h};
  a.saved_attention.push_back(s.conv_channels);  // in_proj_qkv(z) output read by conv1d
  a.saved_attention.push_back(value);            // z (the output gate)
  a.saved_attention.push_back(s.conv_channels);  // conv1d + SiLU output: q, k, v
  a.saved_attention.push_back(value);            // core output (gated norm input)
  a.saved_attention.push_back(value);            // gated norm output (out_proj input)
  a.saved_norm_inputs_fp32 = rms ? 2 * h + value : value;
  // The DeltaNet kernel saves its WY matrix [heads, chunk] per token and the gates; Mamba2's
  // mamba_chunk_scan_combined saves dt and its cumulative dA (float32, per head) and recomputes the rest.
  a.saved_attention_fp32 = layer.mixer == TokenMixer::GatedDeltaNet ? s.heads * s.chunk + 2 * s.heads
                           : layer.mixer == TokenMixer::Mamba1      ? 0
                                                                    : 2 * s.heads;
  if (layer.mixer == TokenMixer::Mamba1) {
    // selective_scan_fn saves u, delta, A, B, C, D, z (MambaInnerFn): beyond the terms above, the
    // x_proj output (dt, B, C: R + 2N, taken here as 2N + the delta I) and delta itself.
    a.saved_attention.push_back(2 * s.key_dim);
    a.saved_attention.push_back(s.heads);
  }
  a.saved_scores_fp32 = a.saved_scores = 0;
  a.attention_backward_temporaries = {h, h, s.conv_channels, s.conv_channels, value, value};
  a.attention_backward_fp32 = s.chunk > 0 ? (s.heads * s.key_dim * s.value_dim + s.chunk - 1) / s.chunk : 0;
}

LayerActivations layer_activations(const ModelConfig& model, const Plan& plan, const DecoderLayerUse* layer,
                                   int64_t row_length) {
  const int64_t h = model.hidden_size;
  const int64_t head_dim = model.head_dim > 0 ? model.head_dim : h / std::max(1, model.num_attention_heads);
  const int64_t q = head_dim * model.num_attention_heads;
  const int64_t kv = head_dim * model.num_key_value_heads;
  // An MoE layer saves activations for the experts each token goes through (top_k + shared).
  const int64_t inter = layer != nullptr && layer->mlp_width > 0 ? layer->mlp_width : model.intermediate_size;
  LayerActivations a;
  // input_layernorm input and output (the output feeds q/k/v), q/k/v after RoPE and the attention
  // output (saved by SDPA; the same tensor is o_proj's input), post_attention_layernorm input.
  // RMSNorm inputs (no bias) go to saved_norm_inputs_fp32 as upcast copies; so do the per-head
  // q_norm / k_norm inputs (Qwen3, OLMo 2), which RMSNorm the q and k projections before RoPE.
  const bool rms = layer == nullptr || (layer->input_norm_bias < 0 && layer->post_attention_norm_bias < 0);
  a.saved_attention = rms ? std::vector<int64_t>{h, q, kv, kv, q} : std::vector<int64_t>{h, h, q, kv, kv, q, h};
  if (rms) a.saved_norm_inputs_fp32 = 2 * h;
  if (layer != nullptr && layer->q_norm >= 0) a.saved_norm_inputs_fp32 += q;
  if (layer != nullptr && layer->k_norm >= 0) a.saved_norm_inputs_fp32 += kv;
  a.saved_attention_fp32 = plan.eager_attention() ? 0 : model.num_attention_heads;
  if (plan.eager_attention()) {
    a.saved_scores_fp32 = int64_t(model.num_attention_heads) * row_length;
    a.saved_scores = int64_t(model.num_attention_heads) * row_length;
  }
  // post_attention_layernorm output (gate/up input), gate, up, act(gate), act(gate)*up (down input).
  a.saved_mlp = {h, inter, inter, inter, inter};
  a.saved_tiled_mlp = {h};
  if (layer != nullptr && plan.adapter != Adapter::None) {
    std::vector<const LinearUse*> uses{&layer->q, &layer->k, &layer->v, &layer->o, &layer->gate, &layer->up, &layer->down};
    for (const LinearUse& use : layer->attention_other) uses.push_back(&use);
    for (const LinearUse& use : layer->mixer_in) uses.push_back(&use);
    for (const LinearUse& use : layer->mlp_other) uses.push_back(&use);
    for (const LinearUse* use : uses) {
      if (use->lora_a >= 0) a.lora.push_back(plan.lora_r);
    }
  }
  // dL/dhidden in and out, dq/dk/dv, and two intermediate-size gradients in the MLP.
  a.mlp_backward_temporaries = {h, inter, inter};
  // Plus the layout copies of the attention's backward: dq and the attention output's gradient made
  // contiguous between SDPA's [B, heads, T, D] and the projections' [B, T, heads x D], and RoPE's
  // backward on q and k (a cat of the rotated halves). Measured per part of the step on an H100 at
  // 256K tokens with a tiled MLP (bench/gpu-results/2026-11-27-h100-s18, the only measured row where
  // this phase, not the MLP's, holds the layer's peak): 26.7 KB per token above {h, h, q, kv, kv};
  // {q, q, q, kv} gives 26.6 KB for Llama-3.1-8B. The attribution is by shape, not traced op by op.
  a.attention_backward_temporaries = {h, h, q, kv, kv, q, q, q, kv};
  a.attention_backward_fp32 = plan.eager_attention() ? a.saved_scores_fp32 : 2 * q + model.num_attention_heads;
  a.mlp_chunk_intermediates = {inter, inter, inter, inter};
  if (layer != nullptr && layer->parallel_attention) {
    // FalconH1: attention's terms and the Mamba2 mixer's beside them; the normed input they share
    // is counted once (attention's), the mixer adds the rest.
    LayerActivations r;
    recurrent_mixer_activations(*layer, h, rms, r);
    const size_t shared = rms ? 1 : 2;
    a.saved_attention.insert(a.saved_attention.end(), r.saved_attention.begin() + shared, r.saved_attention.end());
    a.saved_norm_inputs_fp32 += r.saved_norm_inputs_fp32 - (rms ? 2 * h : 0);
    a.saved_attention_fp32 += r.saved_attention_fp32;
    a.attention_backward_temporaries.insert(a.attention_backward_temporaries.end(), r.attention_backward_temporaries.begin() + 2,
                                            r.attention_backward_temporaries.end());
    a.attention_backward_fp32 += r.attention_backward_fp32;
  } else if (layer != nullptr && layer->mixer != TokenMixer::Attention && layer->mixer != TokenMixer::None) {
    recurrent_mixer_activations(*layer, h, rms, a);
  }
  if (layer != nullptr && layer->mixer == TokenMixer::None) {
    // A NemotronH feed-forward block: no token mixer; its one norm's input is counted with the MLP
    // below (saved_mlp's first entry is the norm's output).
    a.saved_attention.clear();
    a.saved_norm_inputs_fp32 = rms ? h : 0;
    a.saved_attention_fp32 = a.saved_scores_fp32 = a.saved_scores = 0;
    a.attention_backward_temporaries.clear();
    a.attention_backward_fp32 = 0;
  }
  if (layer != nullptr && !layer->has_mlp) {
    // A NemotronH token-mixer block: no MLP, and no second norm.
    a.saved_mlp.clear();
    a.saved_tiled_mlp.clear();
    a.mlp_backward_temporaries.clear();
    a.mlp_chunk_intermediates.clear();
    if (rms) a.saved_norm_inputs_fp32 -= h;
  } else if (layer != nullptr && !layer->mlp_gated && !layer->moe) {
    // NemotronHMLP: the norm output (up_proj's input), up, relu2(up) (down_proj's input).
    a.saved_mlp = {h, inter, inter};
    a.mlp_chunk_intermediates = {inter, inter};
  }
  // Liger's kernels, on the model types Plan::liger_applies names (attention decoders with RMSNorm
  // and a gated MLP).
  if (plan.liger_rms_norm_applied() && rms) {
    a.saved_norm_inputs = a.saved_norm_inputs_fp32 - h;  // post_attention_layernorm's and q/k norms' inputs
    a.layer_input_saved = h;
    a.saved_norm_inputs_fp32 = 0;
    const bool q_norm = layer != nullptr && layer->q_norm >= 0, k_norm = layer != nullptr && layer->k_norm >= 0;
    a.saved_attention_fp32 += 2 + (q_norm ? model.num_attention_heads : 0) + (k_norm ? model.num_key_value_heads : 0);
    // The share of the attention half's backward that was fitted, by shape, to the measured peak of
    // eager RMSNorm runs ({q, q, q, kv} above, 26.7 KB per token for Llama-3.1-8B) is absent with
    // Liger's fused norm. Measured with `hookstream run`, Liger, tiled MLP (where this half holds
    // the layer's peak), against the model with the share: 3.39 hidden states per token below it at
    // 384K on an H100 (bench/gpu-results/2026-11-28-h100-s23/call2-384k) and 3.3 at 64K on an H200
    // (2026-11-28-h200-s22/call3, after the 0.55 GiB that plain tiled runs are also over there);
    // the share is 3.25. So it was the eager norm's backward (float32 upcasts of the incoming
    // gradient and products with the saved float32 input, runtime/train_model.cc rms_norm), not
    // the attention's layout copies, which Liger's kernel computes in one pass in the activation dtype.
    if (layer == nullptr || (layer->mixer == TokenMixer::Attention && !layer->parallel_attention)) {
      a.attention_backward_temporaries.resize(a.attention_backward_temporaries.size() - 4);  // {q, q, q, kv}
    }
  }
  if (plan.liger_glu_applied() && (layer == nullptr || (layer->has_mlp && layer->mlp_gated && !layer->moe))) {
    // LigerSwiGLUMLP: LigerSiLUMulFunction (liger_kernel/ops/swiglu.py) saves gate and up and
    // recomputes silu(gate) in backward: the norm output, gate, up and the product (down_proj's input).
    a.saved_mlp = {h, inter, inter, inter};
    a.mlp_chunk_intermediates = {inter, inter, inter};
    // Its backward stores d gate and d up into the saved gate and up (_swiglu_backward_kernel's
    // tl.store into a_ptr and b_ptr), yet the MLP's backward still holds two intermediate-size
    // tensors above the saved ones, as eager's does (mlp_backward_temporaries): dc, and LoRA's
    // scaled gradient of gate and up (the scale's backward) beside d gate and d up. Measured with
    // `hookstream run` on an H200 (2026-11-28, Llama-3.1-8B LoRA, 64K, untiled): one
    // intermediate-size tensor fewer here under-predicted the peak by 1.5 GiB (+5.0%); with two,
    // -0.9%.
  }
  if (layer != nullptr && (!layer->sublayers.empty() || !layer->shortcut.empty())) {
    // LongCat-Flash (LongcatFlashDecoderLayer): each later sub-block saves what the first does (its
    // attention and MLP terms, taken as the same widths: MLA's by the head_dim formula), and the
    // shortcut MoE about what a gated MLP of its width (moe_topk experts) saves, its input being the
    // first sub-block's normed state (already counted). Approximate: the experts' gathered token
    // copies and routing weights are not counted.
    const size_t blocks = 1 + layer->sublayers.size();
    const std::vector<int64_t> attention = a.saved_attention, mlp = a.saved_mlp;
    for (size_t b = 1; b < blocks; ++b) {
      a.saved_attention.insert(a.saved_attention.end(), attention.begin(), attention.end());
      a.saved_mlp.insert(a.saved_mlp.end(), mlp.begin(), mlp.end());
    }
    a.saved_norm_inputs_fp32 *= static_cast<int64_t>(blocks);
    a.saved_attention_fp32 *= static_cast<int64_t>(blocks);
    a.saved_scores_fp32 *= static_cast<int64_t>(blocks);
    a.saved_scores *= static_cast<int64_t>(blocks);
    for (const DecoderLayerUse& moe : layer->shortcut) {
      a.saved_mlp.insert(a.saved_mlp.end(), {moe.mlp_width, moe.mlp_width, moe.mlp_width, moe.mlp_width});
    }
    // The LoRA A outputs of the later sub-blocks' and the shortcut's adapted modules.
    if (plan.adapter != Adapter::None) {
      std::vector<const DecoderLayerUse*> more;
      for (const DecoderLayerUse& sub : layer->sublayers) more.push_back(&sub);
      for (const DecoderLayerUse& moe : layer->shortcut) more.push_back(&moe);
      for (const DecoderLayerUse* u : more) {
        std::vector<const LinearUse*> uses{&u->q, &u->k, &u->v, &u->o, &u->gate, &u->up, &u->down};
        for (const LinearUse& use : u->attention_other) uses.push_back(&use);
        for (const LinearUse* use : uses) {
          if (use->lora_a >= 0) a.lora.push_back(plan.lora_r);
        }
      }
    }
  }
  return a;
}

struct StepShape {
  int64_t tokens = 0;       // per micro-step
  int64_t dtype = 2;        // activation bytes
  int shards = 1;           // tiled MLP shards
};

int reload_buffer_count(const Plan& plan) {
  if (!plan.activation_offloading) return 0;
  const std::string protocol = plan.offload_protocol_name();
  if (protocol == "none") return 0;
  if (protocol.find("single") != std::string::npos) return 1;
  return 2;  // "double_buffer_*" and protocols that do not say: the default is double-buffered
}

// The Reducer's buckets (torch/nn/parallel/distributed.py: bucket_cap_mb, default 25 MiB, and the
// 1 MiB first bucket, filled in reverse parameter order), each one flat tensor.
std::vector<int64_t> ddp_bucket_sizes(const Plan& plan, const ModelStructure& structure) {
  std::vector<int64_t> buckets;
  const int64_t cap = static_cast<int64_t>(plan.ddp_bucket_cap_mb.value_or(25.0) * kMiB);
  int64_t current = 0;
  int64_t limit = std::min<int64_t>(kMiB, cap);
  for (auto it = structure.ddp_parameters.rbegin(); it != structure.ddp_parameters.rend(); ++it) {
    const Parameter& p = structure.parameters[*it];
    current += p.numel() * dtype_size(p);
    if (current >= limit) {
      buckets.push_back(current);
      current = 0;
      limit = cap;
    }
  }
  if (current > 0) buckets.push_back(current);
  return buckets;
}

// bitsandbytes 4-bit with double quantization (axolotl's QLoRA default, bnb_4bit_use_double_quant):
// one 8-bit absmax per 64 weights and one fp32 scale per 256 absmax blocks (QLoRA paper, section 3:
// 0.127 bits per parameter). 8-bit (LLM.int8): one fp32 scale per output row.
int64_t quantization_state_bytes(const Parameter& p, const Plan& plan) {
  if (!p.quantized) return 0;
  if (plan.load_in_8bit && !plan.load_in_4bit) return 4 * (p.shape.empty() ? 1 : p.shape[0]);
  const int64_t blocks = (p.numel() + 63) / 64;
  return blocks + 4 * ((blocks + 255) / 256);
}

int64_t stored_weight_bytes(const Parameter& p, const Plan& plan) {
  if (!p.quantized) return p.numel() * dtype_size(p);
  if (plan.load_in_8bit && !plan.load_in_4bit) return p.numel();
  return (p.numel() + 1) / 2;
}

// What the loss holds at its peak (bytes, each tensor rounded).
// Stock transformers (ForCausalLMLoss, transformers/loss/loss_utils.py): the bf16 logits, their fp32
// upcast (`logits.float()`) and log_softmax's fp32 output saved by cross_entropy.
// axolotl's chunked_cross_entropy (axolotl/monkeypatch/loss/chunked.py, from torchtune's
// CEWithChunkedOutputLoss): the lm_head still writes the full bf16 logits, but the upcast and the
// cross-entropy run on one `logits.chunk(num_chunks, dim=1)` slice at a time inside a
// torch.compile'd function, whose backward recomputes the softmax from the bf16 chunk: one chunk's
// fp32 upcast and log-softmax exist at a time, and the loss keeps one fp32 value per token (the
// per-token loss / log-sum-exp the compiled graph saves).
// hookstream.chunked_loss: recompute_lm_head (runtime/train_model.cc, ChunkLossFunction): the
// lm_head runs per chunk with no grad in forward and again, with grad, in backward; only one
// chunk's bf16 logits, their fp32 upcast and log-softmax exist at a time, and no per-token value
// is kept between forward and backward (the chunk's hidden states are views of the head inputs).
int64_t logits_and_loss_bytes(const Plan& plan, int64_t tokens, int64_t dtype, const Ledger& ledger) {
  const int64_t vocab = plan.model.vocab_size;
  const int64_t bf16_logits = ledger.device(vocab * tokens * dtype);
  if (!plan.chunked_cross_entropy) return bf16_logits + 2 * ledger.device(vocab * tokens * 4);
  const int64_t chunks = std::max(1, plan.chunked_cross_entropy_num_chunks);
  // torch.chunk: ceil(tokens / chunks) per chunk (sequence dim; micro_batch rows share it).
  const int64_t chunk_tokens = (tokens + chunks - 1) / chunks;
  const int64_t one_chunk = 2 * ledger.device(vocab * chunk_tokens * 4);
  if (plan.loss_recomputes_lm_head()) return ledger.device(vocab * chunk_tokens * dtype) + one_chunk;
  return bf16_logits + one_chunk + ledger.device(tokens * 4);
}

// What the loss head's backward adds to logits_and_loss_bytes' forward holding, at the lm_head's
// backward. Unchunked: log_softmax saved its float32 output, and its backward holds that, the
// float32 gradient flowing in (from nll_loss) and the one it produces: three float32 logits where
// the forward held two and the model-dtype logits (freed after the upcast, ToCopyBackward saves
// nothing). Measured on an H100 (bench/gpu-results/2026-11-27-h100-s18, the bundled default plan,
// vocabulary 151,936 at 16K tokens): the loss head's part peaked 4.81 GiB above the forward holding,
// against 4.64 GiB from this rule. Chunked: nothing added (below).
int64_t logits_backward_bytes(const Plan& plan, int64_t tokens, int64_t dtype, const Ledger& ledger) {
  const int64_t vocab = plan.model.vocab_size;
  if (!plan.chunked_cross_entropy) {
    return std::max<int64_t>(0, ledger.device(vocab * tokens * 4) - ledger.device(vocab * tokens * dtype));
  }
  if (plan.loss_recomputes_lm_head()) return 0;  // one chunk's logits at a time
  // axolotl's chunks of the full logits: not counted. chunk()'s backward may assemble the chunks'
  // gradients into one of the whole logits while they are still saved (a second model-dtype copy);
  // not measured, so not added.
  return 0;
}

// "layer 12 mlp backward chunk 3 of 8" -> "mlp backward"; the names come from
// sim/streams/stream_expansion.cc, which issues every op of a simulated step.
// What the vision tower's forward saves for its backward, in bytes: one image of
// min(vision_tokens, sequence) merged tokens, i.e. that times spatial_merge_size^2 patches, through
// the patch embedding, every ViT block and the mergers (transformers' modeling_qwen3_vl.py,
// modeling_qwen2_vl.py, modeling_qwen2_5_vl.py; runtime/vision_tower.h runs the same graph). The
// tower runs first in forward and its backward last, so all of it is held through the decoder's
// whole backward. Per patch and block, in the model dtype: norm1's input, qkv's input, q, k and v
// (the fused attention saves contiguous copies of the permuted views), the attention output, proj's
// input, norm2's input, fc1's input (hidden-size each: 9) and the MLP's intermediates (GELU: fc1's
// output and fc2's input; quick-GELU adds the sigmoid; Qwen2.5-VL's gated MLP: gate, up, silu(gate)
// and the product). Each merger: its norm's input, fc1's input, fc1's output and fc2's input
// (hidden-size per patch each). The patch embedding saves the pixels. With nothing trainable in the
// tower (an adapter that targets no tower module) autograd records no graph there: 0.
int64_t vision_saved_bytes(const Plan& plan, const ModelStructure& structure, int64_t sequence, int64_t dtype,
                           const Ledger& ledger) {
  if (!plan.model.vision || !plan.vision_inputs || structure.vision_blocks.empty()) return 0;
  bool trains = false;
  for (const Parameter& p : structure.parameters) trains = trains || (p.trainable && p.group == "vision");
  if (!trains) return 0;
  const VisionTowerConfig& v = *plan.model.vision;
  // The described towers (CLIP, SigLIP, Pixtral, InternViT: sim/inputs/architectures/vision_tower.h)
  // are not costed here yet: docs/memory-and-time.md says so.
  if (v.layout != VisionLayout::Qwen2VL && v.layout != VisionLayout::Qwen25VL && v.layout != VisionLayout::Qwen3VL) return 0;
  const int64_t merge = int64_t(v.spatial_merge_size) * v.spatial_merge_size;
  const int64_t patches = std::max<int64_t>(1, std::min<int64_t>(plan.vision_tokens, sequence)) * merge *
                          std::max(1, plan.micro_batch_size);
  const int64_t hidden = v.hidden_size, inter = v.intermediate_size;
  const int64_t mlp = v.layout == VisionLayout::Qwen25VL ? 4 * inter : v.layout == VisionLayout::Qwen2VL ? 3 * inter : 2 * inter;
  const int64_t features = int64_t(v.in_channels) * v.temporal_patch_size * v.patch_size * v.patch_size;
  int64_t bytes = ledger.device(features * patches * dtype);
  for (size_t block = 0; block < structure.vision_blocks.size(); ++block) {
    bytes += ledger.device(9 * hidden * patches * dtype) + ledger.device(mlp * patches * dtype);
  }
  const int64_t mergers = 1 + static_cast<int64_t>(structure.vision_deepstack_mergers.size());
  bytes += mergers * ledger.device(4 * hidden * patches * dtype);
  return bytes;
}

std::string op_what(const std::string& name) {
  std::string what = name;
  if (what.rfind("layer ", 0) == 0) {
    const size_t space = what.find(' ', 6);
    if (space != std::string::npos) what = what.substr(space + 1);
  }
  const size_t chunk = what.find(" chunk ");
  if (chunk != std::string::npos) what = what.substr(0, chunk);
  return what;
}

}  // namespace

const char* to_string(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::Weights: return "weights";
    case MemoryCategory::QuantizationState: return "quantization_state";
    case MemoryCategory::Adapters: return "adapters";
    case MemoryCategory::Gradients: return "gradients";
    case MemoryCategory::OptimizerStates: return "optimizer_states";
    case MemoryCategory::OptimizerTemporaries: return "optimizer_temporaries";
    case MemoryCategory::DdpBuckets: return "ddp_buckets";
    case MemoryCategory::Activations: return "activations";
    case MemoryCategory::RecomputeWorkspace: return "recompute_workspace";
    case MemoryCategory::TiledMlpChunks: return "tiled_mlp_chunks";
    case MemoryCategory::LogitsAndLoss: return "logits_and_loss";
    case MemoryCategory::ReloadBuffers: return "reload_buffers";
    case MemoryCategory::PinnedSlots: return "pinned_slots";
    case MemoryCategory::FsdpUnsharded: return "fsdp_unsharded";
    case MemoryCategory::MasterWeights: return "master_weights";
    case MemoryCategory::CommBuffers: return "comm_buffers";
    case MemoryCategory::GatheredParams: return "gathered_params";
    case MemoryCategory::Workspaces: return "workspaces";
  }
  return "?";
}

int64_t MemoryPoint::total() const {
  int64_t sum = 0;
  for (const auto& [category, value] : bytes) sum += value;
  return sum;
}

int64_t device_allocation_bytes(int64_t request) {
  if (request <= 0) return 0;
  // round_size(): every block is a multiple of kMinBlockSize.
  const int64_t block = request < kMinBlockSize ? kMinBlockSize : round_up(request, kMinBlockSize);
  // get_allocation_size(): requests of kMinLargeAlloc or more get their own segment rounded up to
  // kRoundLarge. should_split(): a large block is split only when more than kSmallSize would remain,
  // so a smaller tail stays part of the tensor's block. Smaller requests share 2/20 MiB segments.
  if (block < kMinLargeAlloc) return block;
  const int64_t segment = round_up(block, kRoundLarge);
  return segment - block > kSmallSize ? block : segment;
}

int64_t pinned_allocation_bytes(int64_t request) {
  if (request <= 0) return 0;
  int64_t size = 1;
  while (size < request) size <<= 1;
  return size;
}

std::string format_gib(int64_t bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return text;
}

std::string format_bytes(int64_t bytes) {
  const double value = static_cast<double>(bytes);
  char text[64];
  if (std::abs(value) >= 1024.0 * 1024 * 1024) return format_gib(bytes);
  if (std::abs(value) >= 1024.0 * 1024) std::snprintf(text, sizeof text, "%.2f MiB", value / (1024.0 * 1024));
  else if (std::abs(value) >= 1024.0) std::snprintf(text, sizeof text, "%.2f KiB", value / 1024.0);
  else std::snprintf(text, sizeof text, "%lld B", static_cast<long long>(bytes));
  return text;
}

MemoryEstimate estimate_memory(const Plan& plan, const ModelStructure& structure, const DeviceSpec& device,
                               const MemoryModelOptions& options) {
  const Ledger ledger(options.allocator_rounding);
  MemoryEstimate estimate;
  estimate.device_name = device.name;
  estimate.capacity_bytes = device.memory_bytes;

  StepShape shape;
  int longest = 0;
  for (int rank = 0; rank < std::max(1, plan.world_size); ++rank) {
    for (int iteration = 0; iteration < std::max(1, plan.iterations); ++iteration) {
      if (plan.sequence_len_for(rank, iteration) > longest) {
        longest = plan.sequence_len_for(rank, iteration);
        shape.shards = plan.tiled_shards_for(rank, iteration);
      }
    }
  }
  // Rows per micro-step: micro_batch_size, doubled for preference training (chosen + rejected).
  shape.tokens = static_cast<int64_t>(longest) * plan.rows_per_micro_step();
  shape.dtype = dtype_bytes(plan.model.torch_dtype);
  estimate.tokens_per_micro_step = shape.tokens;
  const int64_t per_token = shape.tokens * shape.dtype;
  const int64_t h = plan.model.hidden_size;
  const int layers = static_cast<int>(structure.layers.size());

  // --- persistent: everything alive at every moment of a steady-state step ---------------------
  const OptimizerStates optimizer = optimizer_states(plan.optimizer);
  MemoryPoint persistent;
  int64_t trainable_bytes = 0;
  std::vector<int64_t> grads_by_layer(layers + 1, 0);  // [layers]: outside the decoder stack
  std::vector<int64_t> grad_tensors;
  int64_t reference_bytes = 0;  // the frozen reference copy of rl: dpo/ipo without an adapter
  for (const Parameter& p : structure.parameters) {
    const size_t unit = p.layer >= 0 && p.layer < layers ? static_cast<size_t>(p.layer) : static_cast<size_t>(layers);
    if (p.adapter) {
      ledger.add(persistent, MemoryCategory::Adapters, stored_weight_bytes(p, plan));
    } else {
      // DPO/IPO without an adapter: TRL loads the reference model as a second, frozen copy of the
      // base weights on every rank (DPOTrainer.__init__ create_reference_model / ref_model).
      const int copies = plan.rl_reference_copy() ? 2 : 1;
      ledger.add(persistent, MemoryCategory::Weights, stored_weight_bytes(p, plan), copies);
      ledger.add(persistent, MemoryCategory::QuantizationState, quantization_state_bytes(p, plan), copies);
      reference_bytes += (copies - 1) * (stored_weight_bytes(p, plan) + quantization_state_bytes(p, plan));
    }
    if (!p.trainable) continue;
    const int64_t bytes = p.numel() * dtype_size(p);
    trainable_bytes += bytes;
    // The optimizer's states (sim/cost/optimizer_states.h): torch.optim.AdamW's exp_avg and exp_avg_sq
    // are zeros_like(param), the parameter's dtype; 8-bit and 4-bit optimizers keep a quantized
    // copy plus fp32 block scales; bitsandbytes' 32-bit ones float32.
    for (int state = 0; state < optimizer.states; ++state) {
      for (int64_t allocation : optimizer.state_allocations(p.numel(), dtype_size(p))) {
        ledger.add(persistent, MemoryCategory::OptimizerStates, allocation);
      }
    }
    grads_by_layer[unit] += ledger.device(bytes);
  }
  // FSDP1/FSDP2/ZeRO over several ranks (sim/cost/engine_cost.h): the engine's sharded weights,
  // gradients, optimizer states and master copies replace the replica above; what it gathers at the
  // backward peak (unsharded units, ZeRO-3's fetched modules) and its reduction buckets are held
  // throughout (the peak is in backward); CPU offload moves model states to pinned host memory.
  const EngineCostSettings engine = engine_cost_settings(plan);
  EngineMemory engine_states;
  if (engine.sharded) {
    engine_states = engine_memory(plan, structure, engine, options.allocator_rounding);
    for (MemoryCategory category : {MemoryCategory::Weights, MemoryCategory::Adapters, MemoryCategory::OptimizerStates}) {
      persistent.bytes.erase(category);
    }
    // Adapters are part of their unit's sharded weights, and so is a 4/8-bit weight's packed
    // storage (a bf16 tensor under axolotl's bnb_4bit_quant_storage). Its quantization state
    // (absmax, nested absmax and code) is not: bitsandbytes keeps the QuantState as an attribute of
    // the Params4bit and of its Linear4bit module (bitsandbytes/nn/modules.py
    // fix_4bit_weight_quant_state_from_module: "the quant state got lost when the parameter got
    // converted. This happens for example for fsdp"), which FSDP and ZeRO-3 neither flatten nor
    // partition: it stays whole on every rank, as counted above.
    for (const auto& [category, bytes] : engine_states.device) persistent.bytes[category] += bytes;
    grads_by_layer = engine_states.grads_by_layer;
    trainable_bytes = engine_states.optimizer_bytes;
    const MemoryCategory gathered = plan.engine.kind == EngineKind::DeepSpeed ? MemoryCategory::GatheredParams : MemoryCategory::FsdpUnsharded;
    if (engine_states.unsharded_peak > 0) persistent.bytes[gathered] += engine_states.unsharded_peak;
    if (engine_states.comm_buffers > 0) persistent.bytes[MemoryCategory::CommBuffers] += engine_states.comm_buffers;
    if (reference_bytes > 0) {
      // TRL prepares the reference model with the same engine when it shards (trl/models/utils.py
      // prepare_deepspeed under ZeRO-3, prepare_fsdp under FSDP) and as a DeepSpeed stage-0 replica
      // under ZeRO-1/2 (prepare_deepspeed sets stage 0 below stage 3): sharded like the weights, or whole.
      const bool whole = plan.engine.kind == EngineKind::DeepSpeed && engine.zero_stage < 3;
      persistent.bytes[MemoryCategory::Weights] += whole ? ledger.device(reference_bytes) : ledger.device((reference_bytes + engine.world - 1) / engine.world);
    }
  }
  // One process: no DDP. accelerate wraps the model in DistributedDataParallel only when
  // use_distributed (distributed_type != NO and num_processes > 1; accelerate/state.py,
  // Accelerator.prepare_model's multi_device). `hookstream run` still runs a Reducer at world size 1
  // (its 0.16 GiB bucket is measured in bench/gpu-results/2026-11-27-h100-s18 and not predicted here).
  const bool ddp = plan.world_size > 1 && !engine.sharded;
  const bool grads_in_buckets = ddp && plan.gradient_as_bucket_view;
  if (ddp) {
    for (int64_t bucket : ddp_bucket_sizes(plan, structure)) ledger.add(persistent, MemoryCategory::DdpBuckets, bucket);
  }
  // cuBLAS's workspaces: one for the forward's thread and one for the autograd engine's device
  // thread, each on the compute stream (cuBLAS handles are per thread, workspaces per handle and
  // stream, aten/src/ATen/cuda/CublasHandlePool.cpp). Measured on an H100: a constant 64 MiB in every
  // part of the step, the optimizer's included, that nothing else accounted for.
  if (device.blas_workspace_bytes > 0) ledger.add(persistent, MemoryCategory::Workspaces, device.blas_workspace_bytes, 2);
  const int buffers = reload_buffer_count(plan);
  ledger.add(persistent, MemoryCategory::ReloadBuffers, h * per_token, buffers);

  // --- per layer --------------------------------------------------------------------------------
  auto sum_tensors = [&](const std::vector<int64_t>& elements, int64_t bytes_per_element) {
    int64_t sum = 0;
    for (int64_t e : elements) sum += ledger.device(e * shape.tokens * bytes_per_element);
    return sum;
  };
  const bool tiled = plan.tiled_mlp && shape.shards > 1;
  const int64_t chunk_tokens = (shape.tokens + shape.shards - 1) / shape.shards;
  std::vector<int64_t> saved(layers, 0), full(layers, 0), transient(layers, 0), chunk(layers, 0);
  // A checkpointed layer whose input stays on the GPU: that input is held until the layer's own
  // backward is done (the recompute reads it, and the checkpoint's node drops it only afterwards),
  // where an offloaded layer's input is in a reload buffer (counted as such). Measured on the same
  // runs: kept layers' backward held one hidden state more than offloaded ones' (0.5 GiB at 64K,
  // H100, bench/gpu-results/2026-11-28-h100-s23/call3-partial-tiled; 4.0 GiB at 512K, H200,
  // bench/gpu-results/2026-11-28-h200-s24/call1-512k), which the model had dropped at the start
  // of that backward.
  std::vector<int64_t> kept_input(layers, 0);
  int64_t offloaded_host = 0;
  for (int i = 0; i < layers; ++i) {
    const LayerActivations a = layer_activations(plan.model, plan, &structure.layers[i], longest);
    // Saved by the attention half (with both norms' inputs), then the whole layer.
    const int64_t attention_saved = sum_tensors(a.saved_attention, shape.dtype) + sum_tensors({a.saved_attention_fp32}, 4) +
                                    sum_tensors({a.saved_norm_inputs_fp32}, std::max<int64_t>(4, shape.dtype)) +
                                    sum_tensors({a.saved_norm_inputs}, shape.dtype) +
                                    (plan.gradient_checkpointing && plan.layer_checkpointed(i) ? 0 : sum_tensors({a.layer_input_saved}, shape.dtype)) +
                                    sum_tensors({a.saved_scores}, shape.dtype) + sum_tensors({a.saved_scores_fp32}, 4);
    full[i] = attention_saved + sum_tensors(tiled ? a.saved_tiled_mlp : a.saved_mlp, shape.dtype) + sum_tensors(a.lora, shape.dtype);
    // The larger of the two phases of the layer's backward, as bytes above its full saved set. A
    // tiled MLP's backward works on one shard of tokens at a time (its intermediates are chunk[i]).
    const int64_t attention_phase = attention_saved + sum_tensors(a.attention_backward_temporaries, shape.dtype) +
                                    sum_tensors({a.attention_backward_fp32}, 4);
    int64_t mlp_phase = 0;
    if (tiled) {
      mlp_phase = ledger.device(a.mlp_backward_temporaries[0] * shape.tokens * shape.dtype);
      for (size_t t = 1; t < a.mlp_backward_temporaries.size(); ++t) {
        mlp_phase += ledger.device(a.mlp_backward_temporaries[t] * chunk_tokens * shape.dtype);
      }
    } else {
      mlp_phase = sum_tensors(a.mlp_backward_temporaries, shape.dtype);
    }
    // Above either phase: the residual stream's two gradients, the one of the layer's output (held
    // by the engine until both branches of the residual add have taken it) and the one of its input
    // being summed from the skip and the branch (torch/csrc/autograd/input_buffer.cpp adds out of
    // place while the incoming gradient is still referenced). Measured per part of the step on an
    // H100 (bench/gpu-results/2026-11-27-h100-s18): 2 hidden states per token above the model in
    // every layer's backward, at 8K and at 128K, checkpointed or offloaded.
    transient[i] = std::max<int64_t>(mlp_phase, attention_phase - full[i]) + 2 * ledger.device(h * per_token);
    if (tiled) {
      for (int64_t e : a.mlp_chunk_intermediates) chunk[i] += ledger.device(e * chunk_tokens * shape.dtype);
    }
    const bool checkpointed = plan.gradient_checkpointing && plan.layer_checkpointed(i);
    const int64_t hidden_state = ledger.device(h * per_token);
    if (!checkpointed) {
      saved[i] = full[i];
    } else if (plan.layer_offloaded(i)) {
      saved[i] = 0;  // moved to a pinned CPU slot once the D2H copy completes
      // A slot of PyTorch's pinned caching allocator is rounded up to a power of two; an exact one
      // (`hookstream.pinned_slots: exact`, cudaHostAlloc per slot) to the 4 KiB page.
      offloaded_host += plan.pinned_slots_exact ? ledger.pinned_exact(h * per_token) : ledger.pinned(h * per_token);
    } else {
      saved[i] = hidden_state;  // the checkpoint keeps only the layer's input
      kept_input[i] = hidden_state;
    }
  }
  // Inputs of the final norm and lm_head, kept for backward.
  const int64_t head_inputs = 2 * ledger.device(h * per_token);
  // The vision tower's saved tensors: held from the start of the forward to the end of backward.
  const int64_t vision = vision_saved_bytes(plan, structure, longest, shape.dtype, ledger);
  const int64_t logits = logits_and_loss_bytes(plan, shape.tokens, shape.dtype, ledger);
  const int64_t logits_grad = logits_backward_bytes(plan, shape.tokens, shape.dtype, ledger);

  auto base = [&]() { return persistent; };
  int64_t saved_total = vision;
  for (int i = 0; i < layers; ++i) saved_total += saved[i];

  // Forward, last layer: everything saved so far plus the running layer's own tensors.
  if (layers > 0) {
    MemoryPoint point = base();
    point.phase = "forward";
    point.at = "layer " + std::to_string(layers - 1);
    point.bytes[MemoryCategory::Activations] += saved_total - saved[layers - 1];
    point.bytes[MemoryCategory::RecomputeWorkspace] += full[layers - 1];
    if (tiled) point.bytes[MemoryCategory::TiledMlpChunks] += chunk[layers - 1];
    estimate.device_points.push_back(point);
  }
  {
    MemoryPoint point = base();
    point.phase = "loss";
    point.at = "cross-entropy";
    point.bytes[MemoryCategory::Activations] += saved_total + head_inputs;
    // The loss head's forward and backward: the larger holding is the backward's.
    point.bytes[MemoryCategory::LogitsAndLoss] += logits + logits_grad;
    if (!grads_in_buckets) point.bytes[MemoryCategory::Gradients] += grads_by_layer[layers];
    estimate.device_points.push_back(point);
  }
  // Backward, layer by layer: activations of earlier layers, the gradients produced so far, and the
  // running layer's recomputed (or saved) tensors plus its backward temporaries.
  int64_t grads_so_far = grads_by_layer[layers];
  int64_t saved_before = saved_total;  // the tower's stay to the end: its backward runs last
  for (int i = layers - 1; i >= 0; --i) {
    saved_before -= saved[i];
    grads_so_far += grads_by_layer[i];
    MemoryPoint point = base();
    point.phase = "backward";
    point.at = "layer " + std::to_string(i);
    point.bytes[MemoryCategory::Activations] += saved_before;
    point.bytes[MemoryCategory::RecomputeWorkspace] += full[i] + transient[i] + kept_input[i];
    if (tiled) point.bytes[MemoryCategory::TiledMlpChunks] += chunk[i];
    if (!grads_in_buckets) point.bytes[MemoryCategory::Gradients] += grads_so_far;
    estimate.device_points.push_back(point);
  }
  {
    MemoryPoint point = base();
    point.phase = "optimizer";
    point.at = "AdamW step";
    if (!grads_in_buckets) point.bytes[MemoryCategory::Gradients] += grads_so_far;
    // The foreach implementation (torch/optim/adam.py _multi_tensor_adam) materializes
    // exp_avg_sq.sqrt() for every parameter: one more state-sized list during step(). The
    // bitsandbytes and torchao optimizers update in one kernel per tensor: no such list.
    if (optimizer.format == StateFormat::ParamDtype && optimizer.states > 0) {
      ledger.add(point, MemoryCategory::OptimizerTemporaries, trainable_bytes);
    }
    // What the engine's step() allocates (ZeRO-3's fp32 gradient of a sub-group).
    if (engine_states.step_bytes > 0) point.bytes[MemoryCategory::OptimizerTemporaries] += engine_states.step_bytes;
    estimate.device_points.push_back(point);
  }
  // Per-op points: the same tensors, followed op by op through rank 0's step (device 0), so the
  // peak names its op and gradient accumulation is seen (later micro-steps run forward with the
  // earlier micro-steps' gradients alive). Buffers the step allocates itself (Alloc/Free ops, as
  // in traces) are added on top. The phase points above become the op points.
  if (options.step != nullptr) {
    const EventModel& step = *options.step;
    std::map<int, int64_t> allocated;  // op -> live Alloc/Free bytes after it
    for (const MemorySample& sample : memory_over_ops(step)) {
      if (sample.rank == 0 && sample.device == 0) allocated[sample.op] = sample.bytes;
    }
    // The protocol's reload buffers, from its own steps rather than a count by name: the device
    // buffers an H2D copy writes. One the step never frees is allocated at its first write and kept
    // (the runtime's interpreter reuses it, runtime/activation_offload.cc), so it is held from the
    // step's start; one the protocol frees (save_on_cpu, deepspeed_offload) is held from its
    // copy to its free. The caching allocator counts a freed block out of the allocated bytes at
    // the free, record_stream or not (c10/cuda/CUDACachingAllocator.cpp, free(): the stats drop
    // before the stream uses' events are inserted); only the block's reuse waits for them.
    // (The expansion's protocol buffers carry no size: a reload buffer is as large as its copy.)
    std::map<int, int64_t> reload_bytes;  // buffer -> its copy's bytes, allocator-rounded
    std::set<int> reload_buffers, freed_reloads;
    for (const Op& op : step.ops) {
      if (op.kind == OpKind::Copy && op.copy == CopyKind::HostToDevice && op.destination == MemoryKind::Device) {
        for (const BufferAccess& access : op.accesses) {
          if (!access.write || access.buffer < 0 || access.buffer >= static_cast<int>(step.buffers.size())) continue;
          const Buffer& buffer = step.buffers[access.buffer];
          if (buffer.rank != 0 || buffer.device != 0) continue;
          reload_buffers.insert(access.buffer);
          reload_bytes[access.buffer] = std::max(reload_bytes[access.buffer], ledger.device(op.bytes));
        }
      }
    }
    for (const Op& op : step.ops) {
      if (op.kind != OpKind::Free) continue;
      for (const BufferAccess& access : op.accesses) {
        if (reload_buffers.count(access.buffer)) freed_reloads.insert(access.buffer);
      }
    }
    int64_t kept_reloads = 0;
    for (int b : reload_buffers) {
      if (!freed_reloads.count(b)) kept_reloads += reload_bytes[b];
    }
    std::set<int> live_reloads;
    int64_t live_reload_bytes = 0;
    const bool reloads_from_step = !reload_buffers.empty();
    std::vector<MemoryPoint> op_points;
    std::vector<char> layer_released(layers, 0), layer_grads(layers, 0);
    int64_t held = 0, grads = 0, live_allocated = 0;
    bool head_held = false, logits_held = false, outside_grads = false, vision_held = false;
    int micro = -1;
    for (int i = 0; i < static_cast<int>(step.ops.size()); ++i) {
      const Op& op = step.ops[i];
      if (op.rank != 0 || (op.stream >= 0 && step.streams[op.stream].device != 0)) continue;
      if (op.micro_step != micro) {  // a new micro-step: its own activations, the grads so far
        micro = op.micro_step;
        held = 0;
        vision_held = false;
        std::fill(layer_released.begin(), layer_released.end(), 0);
      }
      if (auto it = allocated.find(i); it != allocated.end()) live_allocated = it->second;
      const bool in_layer = op.layer >= 0 && op.layer < layers;
      const std::string what = op.kind == OpKind::Kernel ? op_what(op.name) : "";
      // The tower's saved tensors: held from the end of its forward (the first decoder layer) to
      // the end of its backward (the embedding's backward follows it). Measured on an H100 with the
      // bundled default plan: the embedding's and the optimizer's parts hold none of them.
      if (!vision_held && vision > 0 && in_layer && what == "forward") {
        held += vision;
        vision_held = true;
      } else if (vision_held && (what == "embedding backward" || op.phase == "optimizer")) {
        held -= vision;
        vision_held = false;
      }
      int64_t workspace = 0, chunk_bytes = 0, temporaries = 0;
      if (in_layer && (what == "forward" || what == "recompute")) {
        workspace = full[op.layer];
        if (tiled) chunk_bytes = chunk[op.layer];
      } else if (in_layer && (what == "attention backward" || what == "mlp backward")) {
        if (!layer_released[op.layer]) {  // the layer's saved tensors become its backward's workspace
          layer_released[op.layer] = 1;
          held -= saved[op.layer];
        }
        if (!layer_grads[op.layer]) {
          layer_grads[op.layer] = 1;
          grads += grads_by_layer[op.layer];
        }
        workspace = full[op.layer] + transient[op.layer] + kept_input[op.layer];
        if (tiled && what == "mlp backward") chunk_bytes = chunk[op.layer];
      } else if (what == "final norm forward") {
        head_held = true;
      } else if (what == "lm_head forward") {
        logits_held = true;
      } else if (what == "lm_head backward" && !outside_grads) {
        outside_grads = true;  // the head's grads (and, conservatively, the embedding's) as in the phase points
        grads += grads_by_layer[layers];
      } else if (what == "optimizer step") {
        temporaries = ledger.device(trainable_bytes) + engine_states.step_bytes;
      }
      // A freed reload buffer's copy allocates it: held from this op on.
      if (op.kind == OpKind::Copy && op.copy == CopyKind::HostToDevice) {
        for (const BufferAccess& access : op.accesses) {
          if (access.write && freed_reloads.count(access.buffer) && live_reloads.insert(access.buffer).second) {
            live_reload_bytes += reload_bytes[access.buffer];
          }
        }
      }
      MemoryPoint point = base();
      point.phase = op.phase.empty() ? "step" : op.phase;
      point.at = op.name;
      point.op = i;
      if (reloads_from_step) {
        point.bytes[MemoryCategory::ReloadBuffers] = kept_reloads + live_reload_bytes;
        if (point.bytes[MemoryCategory::ReloadBuffers] == 0) point.bytes.erase(MemoryCategory::ReloadBuffers);
      }
      if (op.kind == OpKind::Free) {
        for (const BufferAccess& access : op.accesses) {
          if (live_reloads.erase(access.buffer) > 0) live_reload_bytes -= reload_bytes[access.buffer];
        }
      }
      point.bytes[MemoryCategory::Activations] += held + (head_held ? head_inputs : 0) + live_allocated;
      point.bytes[MemoryCategory::RecomputeWorkspace] += workspace;
      if (chunk_bytes > 0) point.bytes[MemoryCategory::TiledMlpChunks] += chunk_bytes;
      if (logits_held) point.bytes[MemoryCategory::LogitsAndLoss] += logits + (what == "lm_head backward" ? logits_grad : 0);
      if (!grads_in_buckets && grads > 0) point.bytes[MemoryCategory::Gradients] += grads;
      if (temporaries > 0) point.bytes[MemoryCategory::OptimizerTemporaries] += temporaries;
      op_points.push_back(std::move(point));
      // After the op: what it leaves behind.
      if (in_layer && what == "forward") held += saved[op.layer];
      if (what == "lm_head backward") logits_held = false;
      if (what == "final norm backward") head_held = false;
    }
    if (!op_points.empty()) estimate.device_points = std::move(op_points);
  }
  // The first point wins ties: the earliest moment in the step.
  estimate.device_peak = estimate.device_points.front();
  for (const MemoryPoint& point : estimate.device_points) {
    if (point.total() > estimate.device_peak.total()) estimate.device_peak = point;
  }
  for (auto it = estimate.device_peak.bytes.begin(); it != estimate.device_peak.bytes.end();) {
    it = it->second == 0 ? estimate.device_peak.bytes.erase(it) : std::next(it);
  }
  estimate.host_peak.phase = "forward";
  estimate.host_peak.at = "after the last offloaded layer";
  if (offloaded_host > 0) estimate.host_peak.bytes[MemoryCategory::PinnedSlots] = offloaded_host;
  // CPU offload of the engine's model states: held on the host the whole step.
  for (const auto& [category, bytes] : engine_states.host) estimate.host_peak.bytes[category] += bytes;
  if (offloaded_host == 0 && !engine_states.host.empty()) {
    estimate.host_peak.phase = "step";
    estimate.host_peak.at = engine.name + " CPU offload, held the whole step";
  }
  if (engine.sharded) {
    estimate.engine = engine.name;
    estimate.engine_notes = engine.notes;
    estimate.engine_notes.insert(estimate.engine_notes.end(), engine_states.notes.begin(), engine_states.notes.end());
  }
  // With a step: the op that fills the last slot, rank 0's last device-to-host copy into pinned
  // memory in its first micro-step (CachingHostAllocator keeps the blocks for later micro-steps).
  if (options.step != nullptr && offloaded_host > 0) {
    for (int i = 0; i < static_cast<int>(options.step->ops.size()); ++i) {
      const Op& op = options.step->ops[i];
      if (op.rank != 0 || op.micro_step != 0 || op.kind != OpKind::Copy || op.copy != CopyKind::DeviceToHost) continue;
      if (op.destination != MemoryKind::PinnedHost) continue;
      estimate.host_peak.op = i;
      estimate.host_peak.at = op.name;
      estimate.host_peak.phase = op.phase;
    }
  }

  if (estimate.device_peak.total() > device.memory_bytes) {
    MemoryFinding finding;
    finding.at = estimate.device_peak;
    finding.required_bytes = estimate.device_peak.total();
    finding.capacity_bytes = device.memory_bytes;
    finding.message = "out of memory: " + format_gib(finding.required_bytes) + " needed at " +
                      finding.at.phase + " " + finding.at.at + ", " + device.name + " has " +
                      format_gib(finding.capacity_bytes);
    estimate.oom = finding;
  }
  return estimate;
}

std::vector<MemorySample> memory_over_ops(const EventModel& model) {
  std::vector<MemorySample> samples;
  std::map<std::pair<int, int>, int64_t> live;  // (rank, device) -> bytes
  std::set<int> allocated;                       // buffers currently held
  for (int i = 0; i < static_cast<int>(model.ops.size()); ++i) {
    const Op& op = model.ops[i];
    if (op.kind != OpKind::Alloc && op.kind != OpKind::Free) continue;
    for (const BufferAccess& access : op.accesses) {
      if (access.buffer < 0 || access.buffer >= static_cast<int>(model.buffers.size())) continue;
      const Buffer& buffer = model.buffers[access.buffer];
      if (buffer.memory != MemoryKind::Device) continue;
      const int64_t bytes = device_allocation_bytes(access.bytes >= 0 ? access.bytes : buffer.bytes);
      const auto key = std::make_pair(buffer.rank, buffer.device);
      if (op.kind == OpKind::Alloc && allocated.insert(access.buffer).second) live[key] += bytes;
      if (op.kind == OpKind::Free && allocated.erase(access.buffer) > 0) live[key] -= bytes;
      samples.push_back(MemorySample{buffer.rank, buffer.device, i, live[key]});
    }
  }
  return samples;
}

std::vector<MemorySample> memory_samples(const MemoryEstimate& estimate) {
  std::vector<MemorySample> samples;
  for (const MemoryPoint& point : estimate.device_points) {
    if (point.op >= 0) samples.push_back(MemorySample{0, 0, point.op, point.total()});
  }
  return samples;
}

}  // namespace hookstream
