// The decoder architectures hookstream models, each checked against named_parameters() of the
// model transformers 5.17.0 builds on the meta device (fixtures in tests/sim/architectures/, made by
// oracles/architectures/dump_structures.py). Registration order inside a module: its own
// nn.Parameters first, then its children in __init__ order (torch/nn/modules/module.py
// named_parameters -> _named_members(recurse)).
#include "sim/inputs/architectures/architecture.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string_view>

#include "sim/inputs/architectures/vision_tower.h"
#include "sim/inputs/input_error.h"

namespace hookstream {
namespace {

using K = ModuleKind;
using R = ModuleRole;

ModuleSpec linear(std::string path, R role, std::string in, std::string out, std::string bias = "",
                  std::string when = "") {
  return ModuleSpec{std::move(path), K::Linear, role, std::move(in), std::move(out), std::move(bias), std::move(when), /*frozen=*/false, /*repeat=*/""};
}
ModuleSpec norm(std::string path, R role, std::string shape = "hidden_size", std::string bias = "",
                std::string when = "") {
  return ModuleSpec{std::move(path), K::Norm, role, "", std::move(shape), std::move(bias), std::move(when), /*frozen=*/false, /*repeat=*/""};
}
ModuleSpec tensor(std::string path, R role, std::string shape, std::string when = "") {
  return ModuleSpec{std::move(path), K::Tensor, role, "", std::move(shape), "", std::move(when), /*frozen=*/false, /*repeat=*/""};
}
ModuleSpec frozen_tensor(std::string path, std::string shape, std::string when = "") {
  ModuleSpec spec{std::move(path), K::Tensor, R::MlpOther, "", std::move(shape), "", std::move(when), /*frozen=*/false, /*repeat=*/""};
  spec.frozen = true;
  return spec;
}
// transformers' Conv1D(nf=out, nx=in) (pytorch_utils.py): weight [in, out], always a bias.
ModuleSpec conv1d(std::string path, R role, std::string in, std::string out) {
  return ModuleSpec{std::move(path), K::Conv1D, role, std::move(in), std::move(out), "1", "", /*frozen=*/false, /*repeat=*/""};
}
ModuleSpec embedding(std::string path, std::string shape, std::string when = "") {
  return ModuleSpec{std::move(path), K::Embedding, R::EmbedOther, "", std::move(shape), "", std::move(when), /*frozen=*/false, /*repeat=*/""};
}

const std::string kQ = "num_attention_heads*head_dim";
const std::string kKV = "num_key_value_heads*head_dim";

// q/k/v/o as LlamaAttention registers them (modeling_llama.py): bias flags per projection group.
std::vector<ModuleSpec> attention(const std::string& qkv_bias, const std::string& o_bias) {
  return {linear("self_attn.q_proj", R::Q, "hidden_size", kQ, qkv_bias),
          linear("self_attn.k_proj", R::K, "hidden_size", kKV, qkv_bias),
          linear("self_attn.v_proj", R::V, "hidden_size", kKV, qkv_bias),
          linear("self_attn.o_proj", R::O, kQ, "hidden_size", o_bias)};
}

// LlamaMLP: gate_proj, up_proj, down_proj (`size` is the config key of the intermediate width).
std::vector<ModuleSpec> swiglu(const std::string& prefix, const std::string& size, const std::string& bias = "",
                               const std::string& when = "") {
  return {linear(prefix + ".gate_proj", R::Gate, "hidden_size", size, bias, when),
          linear(prefix + ".up_proj", R::Up, "hidden_size", size, bias, when),
          linear(prefix + ".down_proj", R::Down, size, "hidden_size", bias, when)};
}

std::vector<ModuleSpec> concat(std::initializer_list<std::vector<ModuleSpec>> parts) {
  std::vector<ModuleSpec> out;
  for (const auto& part : parts) out.insert(out.end(), part.begin(), part.end());
  return out;
}

const std::vector<ModuleSpec> kLlamaNorms = {norm("input_layernorm", R::InputNorm),
                                             norm("post_attention_layernorm", R::PostAttentionNorm)};

// Per-head q/k RMSNorm over head_dim, registered after o_proj (Qwen3Attention, Gemma3Attention).
const std::vector<ModuleSpec> kQkNorm = {norm("self_attn.q_norm", R::QNorm, "head_dim"),
                                         norm("self_attn.k_norm", R::KNorm, "head_dim")};

// DeepSeek-V2/V3's multi-head latent attention (DeepseekV3Attention, and the dense models that copy
// it: MiniCPM3Attention, YoutuAttention): q_lora_rank null -> a plain q_proj, else q_a_proj,
// q_a_layernorm, q_b_proj; then the compressed kv path and o_proj. attention_bias on q_a, kv_a, o.
std::vector<ModuleSpec> mla_attention() {
  const std::string qk = "num_attention_heads*qk_nope_head_dim+num_attention_heads*qk_rope_head_dim";
  return {linear("self_attn.q_proj", R::Q, "hidden_size", qk, "", "!q_lora_rank"),
          linear("self_attn.q_a_proj", R::Q, "hidden_size", "q_lora_rank", "attention_bias", "q_lora_rank"),
          norm("self_attn.q_a_layernorm", R::AttentionOther, "q_lora_rank", "", "q_lora_rank"),
          linear("self_attn.q_b_proj", R::AttentionOther, "q_lora_rank", qk, "", "q_lora_rank"),
          linear("self_attn.kv_a_proj_with_mqa", R::K, "hidden_size", "kv_lora_rank+qk_rope_head_dim", "attention_bias"),
          norm("self_attn.kv_a_layernorm", R::AttentionOther, "kv_lora_rank"),
          linear("self_attn.kv_b_proj", R::V, "kv_lora_rank",
                 "num_attention_heads*qk_nope_head_dim+num_attention_heads*v_head_dim"),
          linear("self_attn.o_proj", R::O, "num_attention_heads*v_head_dim", "hidden_size", "attention_bias")};
}

// ---- Hybrid decoders: layers whose token mixer is not attention (token_mixer.h). Each mixer's
// modules are ordinary table rows with a per-layer condition ("layer_type=linear_attention"), and a
// MixerRule names the mixer and its sizes for the forward graph and the cost models.

// A depthwise causal nn.Conv1d(C, C, k, groups=C, bias=False): weight [C, 1, k].
ModuleSpec depthwise_conv1d(std::string path, std::string channels, std::string kernel, std::string bias, std::string when) {
  return ModuleSpec{std::move(path), K::Conv, R::MixerOther, "1", channels + "," + kernel, std::move(bias), std::move(when),
                    /*frozen=*/false, /*repeat=*/""};
}

// Qwen3-Next / Qwen3.5 full-attention layers (Qwen3NextAttention): q_proj is twice the heads (the
// query and its output gate, chunked in forward), q/k norms over head_dim; attention_bias on all four.
std::vector<ModuleSpec> gated_attention(const std::string& when) {
  return {linear("self_attn.q_proj", R::Q, "hidden_size", "2*" + kQ, "attention_bias", when),
          linear("self_attn.k_proj", R::K, "hidden_size", kKV, "attention_bias", when),
          linear("self_attn.v_proj", R::V, "hidden_size", kKV, "attention_bias", when),
          linear("self_attn.o_proj", R::O, kQ, "hidden_size", "attention_bias", when),
          norm("self_attn.q_norm", R::QNorm, "head_dim", "", when),
          norm("self_attn.k_norm", R::KNorm, "head_dim", "", when)};
}

// The gated DeltaNet of Qwen3-Next and Qwen3.5 (Qwen3NextGatedDeltaNet / Qwen3_5GatedDeltaNet):
// its own dt_bias and A_log ([linear_num_value_heads]) first, then its children in __init__ order.
// key_dim = linear_num_key_heads * linear_key_head_dim, value_dim = linear_num_value_heads *
// linear_value_head_dim, conv_dim = 2 * key_dim + value_dim. Qwen3-Next fuses the input projections
// (in_proj_qkvz [2K + 2V], in_proj_ba [2 * heads], registered after conv1d); Qwen3.5 splits them
// (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, registered after out_proj).
std::vector<ModuleSpec> gated_deltanet(bool qwen3_5, const std::string& when) {
  const std::string key_dim = "linear_num_key_heads*linear_key_head_dim";
  const std::string value_dim = "linear_num_value_heads*linear_value_head_dim";
  const std::string conv_dim = "2*" + key_dim + "+" + value_dim;
  std::vector<ModuleSpec> head = {tensor("linear_attn.dt_bias", R::MixerOther, "linear_num_value_heads", when),
                                  tensor("linear_attn.A_log", R::MixerOther, "linear_num_value_heads", when),
                                  depthwise_conv1d("linear_attn.conv1d", conv_dim, "linear_conv_kernel_dim", "", when)};
  const ModuleSpec gated_norm = norm("linear_attn.norm", R::MixerOther, "linear_value_head_dim", "", when);
  const ModuleSpec out = linear("linear_attn.out_proj", R::O, value_dim, "hidden_size", "", when);
  if (!qwen3_5) {
    return concat({head,
                   {linear("linear_attn.in_proj_qkvz", R::MixerIn, "hidden_size", "2*" + key_dim + "+2*" + value_dim, "", when),
                    linear("linear_attn.in_proj_ba", R::MixerIn, "hidden_size", "2*linear_num_value_heads", "", when),
                    gated_norm, out}});
  }
  return concat({head,
                 {gated_norm, out,
                  linear("linear_attn.in_proj_qkv", R::MixerIn, "hidden_size", conv_dim, "", when),
                  linear("linear_attn.in_proj_z", R::MixerIn, "hidden_size", value_dim, "", when),
                  linear("linear_attn.in_proj_b", R::MixerIn, "hidden_size", "linear_num_value_heads", "", when),
                  linear("linear_attn.in_proj_a", R::MixerIn, "hidden_size", "linear_num_value_heads", "", when)}});
}

// Mamba2's mixer as Bamba and GraniteMoeHybrid build it (BambaMixer, GraniteMoeHybridMambaLayer):
// its own dt_bias, A_log, D ([mamba_n_heads]) first, then conv1d (depthwise over conv_dim =
// I + 2 * mamba_n_groups * mamba_d_state, I = mamba_expand * hidden_size; mamba_conv_bias),
// in_proj [I + conv_dim + heads, H] (mamba_proj_bias), norm (gated RMSNorm over I), out_proj [H, I].
// The config keys a Mamba2 mixer reads (each model names them its own way): `inner` the
// intermediate width as an expression, `conv` its conv_dim = inner + 2 * groups * state.
struct Mamba2Keys {
  std::string heads, inner, groups, state, kernel, conv_bias, proj_bias;
  std::string conv() const { return inner + "+2*" + groups + "*" + state; }
};
const Mamba2Keys kBambaMamba{"mamba_n_heads", "mamba_expand*hidden_size", "mamba_n_groups", "mamba_d_state", "mamba_d_conv",
                             "mamba_conv_bias", "mamba_proj_bias"};
const std::string kMambaConv = kBambaMamba.conv();
std::vector<ModuleSpec> mamba2_mixer(const std::string& module, const std::string& when, const Mamba2Keys& k = kBambaMamba) {
  return {tensor(module + ".dt_bias", R::MixerOther, k.heads, when),
          tensor(module + ".A_log", R::MixerOther, k.heads, when),
          tensor(module + ".D", R::MixerOther, k.heads, when),
          depthwise_conv1d(module + ".conv1d", k.conv(), k.kernel, k.conv_bias, when),
          linear(module + ".in_proj", R::MixerIn, "hidden_size", "2*" + k.inner + "+2*" + k.groups + "*" + k.state + "+" + k.heads,
                 k.proj_bias, when),
          norm(module + ".norm", R::MixerOther, k.inner, "", when),
          linear(module + ".out_proj", R::O, k.inner, "hidden_size", k.proj_bias, when)};
}

void add_hybrid_decoders(std::vector<ArchitectureSpec>& t) {
  const std::string linear_layer = "layer_type=linear_attention";
  const std::string full_layer = "layer_type=full_attention";
  // fla's chunk_gated_delta_rule (the kernel transformers calls when flash-linear-attention is
  // installed; torch_chunk_gated_delta_rule, its fallback, uses the same chunk_size=64).
  const MixerRule deltanet{linear_layer, TokenMixer::GatedDeltaNet, "linear_attn",
                           "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim", "64",
                           "2*linear_num_key_heads*linear_key_head_dim+linear_num_value_heads*linear_value_head_dim",
                           "linear_conv_kernel_dim"};
  // Qwen3NextConfig / Qwen3_5TextConfig.__post_init__: without layer_types, every
  // full_attention_interval-th layer (default 4) is full attention.
  const LayerTypesRule qwen_types{"", "full_attention_interval", 4, "linear_attention", "full_attention",
                                  {"linear_attention", "full_attention"}, "", {}, {}, false};
  {  // Qwen3-Next (Qwen3NextDecoderLayer): linear_attn or self_attn by layer_types, then Qwen2-MoE's
     // sparse block (gate, experts, shared_expert, shared_expert_gate) by decoder_sparse_step /
     // mlp_only_layers, else a dense MLP; the two norms last.
    ArchitectureSpec a;
    a.model_type = "qwen3_next";
    a.remaps_legacy_layer_types = true;  // its config class calls remap_legacy_layer_types
    std::vector<ModuleSpec> shared = swiglu("mlp.shared_expert", "shared_expert_intermediate_size", "", "moe");
    for (ModuleSpec& m : shared) m.role = R::MlpOther;
    a.layer = concat({gated_deltanet(false, linear_layer), gated_attention(full_layer),
                      swiglu("mlp", "intermediate_size", "", "dense"),
                      {tensor("mlp.gate.weight", R::Router, "num_experts,hidden_size", "moe"),
                       tensor("mlp.experts.gate_up_proj", R::ExpertsGateUp, "num_experts,2*moe_intermediate_size,hidden_size", "moe"),
                       tensor("mlp.experts.down_proj", R::ExpertsDown, "num_experts,hidden_size,moe_intermediate_size", "moe")},
                      shared, {linear("mlp.shared_expert_gate", R::MlpOther, "hidden_size", "1", "", "moe")}, kLlamaNorms});
    a.mixers = {deltanet};
    a.layer_types = qwen_types;
    a.moe = MoeLayers::SparseStep;
    a.experts_key = "num_experts";
    a.top_k_key = "num_experts_per_tok";
    a.peft_moe_conversion = "qwen2_moe";  // _MODEL_TO_CONVERSION_PATTERN["qwen3_next"]
    a.expert_width = "moe_intermediate_size";
    a.shared_expert_width = "shared_expert_intermediate_size";
    a.defaults = {{"tie_word_embeddings", 0}, {"decoder_sparse_step", 1}, {"linear_conv_kernel_dim", 4},
                  {"linear_key_head_dim", 128}, {"linear_value_head_dim", 128}, {"linear_num_key_heads", 16},
                  {"linear_num_value_heads", 32}, {"num_experts", 512}, {"num_experts_per_tok", 10},
                  {"moe_intermediate_size", 512}, {"shared_expert_intermediate_size", 512}};
    a.source = "transformers/models/qwen3_next/modeling_qwen3_next.py";
    t.push_back(a);
  }
  {  // Qwen3.5 (Qwen3_5DecoderLayer): the same mixers with Qwen3.5's split input projections and a
     // dense MLP in every layer; Qwen3.5's vision-language model nests it under model.language_model
     // with Qwen3-VL's tower (no DeepStack).
    ArchitectureSpec a;
    a.model_type = "qwen3_5_text";
    a.remaps_legacy_layer_types = true;  // its config class calls remap_legacy_layer_types
    a.aliases = {"qwen3_5"};
    a.layer = concat({gated_deltanet(true, linear_layer), gated_attention(full_layer), swiglu("mlp", "intermediate_size"), kLlamaNorms});
    a.mixers = {deltanet};
    a.layer_types = qwen_types;
    a.defaults = {{"tie_word_embeddings", 0}, {"linear_conv_kernel_dim", 4}, {"linear_key_head_dim", 128},
                  {"linear_value_head_dim", 128}, {"linear_num_key_heads", 16}, {"linear_num_value_heads", 32}};
    a.source = "transformers/models/qwen3_5/modeling_qwen3_5.py";
    t.push_back(a);
    // Qwen3.5-MoE (Qwen3_5MoeDecoderLayer): Qwen3_5MoeSparseMoeBlock in every layer (gate, experts,
    // shared_expert, shared_expert_gate). No PEFT MoE conversion: _MODEL_TO_CONVERSION_PATTERN maps
    // qwen3_5_moe_text to qwen3_5_text, which has no MoE target mapping.
    std::vector<ModuleSpec> shared = swiglu("mlp.shared_expert", "shared_expert_intermediate_size");
    for (ModuleSpec& m : shared) m.role = R::MlpOther;
    a.model_type = "qwen3_5_moe_text";
    a.remaps_legacy_layer_types = true;  // its config class calls remap_legacy_layer_types
    a.aliases = {"qwen3_5_moe"};
    a.layer = concat({gated_deltanet(true, linear_layer), gated_attention(full_layer),
                      {tensor("mlp.gate.weight", R::Router, "num_experts,hidden_size"),
                       tensor("mlp.experts.gate_up_proj", R::ExpertsGateUp, "num_experts,2*moe_intermediate_size,hidden_size"),
                       tensor("mlp.experts.down_proj", R::ExpertsDown, "num_experts,hidden_size,moe_intermediate_size")},
                      shared, {linear("mlp.shared_expert_gate", R::MlpOther, "hidden_size", "1")}, kLlamaNorms});
    a.moe = MoeLayers::All;
    a.experts_key = "num_experts";
    a.top_k_key = "num_experts_per_tok";
    a.expert_width = "moe_intermediate_size";
    a.shared_expert_width = "shared_expert_intermediate_size";
    a.defaults.insert({{"num_experts", 256}, {"num_experts_per_tok", 8}, {"moe_intermediate_size", 512},
                       {"shared_expert_intermediate_size", 512}});
    a.source = "transformers/models/qwen3_5_moe/modeling_qwen3_5_moe.py";
    t.push_back(a);
  }
  {  // OLMo-Hybrid: two layer classes. OlmoHybridLinearAttentionDecoderLayer registers mlp,
     // input_layernorm, post_attention_layernorm, then linear_attn (OlmoHybridGatedDeltaNet: its own
     // A_log - created float32, so it stays float32 in a bf16 model - and dt_bias, then q/k/v_proj,
     // a_proj, b_proj, g_proj [V, H], o_proj, conv1d over 2K + V, o_norm over linear_value_head_dim).
     // OlmoHybridAttentionDecoderLayer is OLMo-2's: self_attn (attention_bias; q_norm/k_norm over the
     // whole projections), mlp, post_attention_layernorm, post_feedforward_layernorm.
    ArchitectureSpec a;
    a.model_type = "olmo_hybrid";
    a.remaps_legacy_layer_types = true;  // its config class calls remap_legacy_layer_types
    const std::string key_dim = "linear_num_key_heads*linear_key_head_dim";
    const std::string value_dim = "linear_num_value_heads*linear_value_head_dim";
    std::vector<ModuleSpec> attn = concat({attention("attention_bias", "attention_bias"),
                                           {norm("self_attn.q_norm", R::QNorm, kQ), norm("self_attn.k_norm", R::KNorm, kKV)}});
    for (ModuleSpec& m : attn) m.when = full_layer;
    a.layer = concat({attn, swiglu("mlp", "intermediate_size"),
                      {norm("input_layernorm", R::InputNorm, "hidden_size", "", linear_layer),
                       norm("post_attention_layernorm", R::PostAttentionNorm),
                       norm("post_feedforward_layernorm", R::PostFeedforwardNorm, "hidden_size", "", full_layer),
                       tensor("linear_attn.A_log", R::MixerOther, "linear_num_value_heads", linear_layer),
                       tensor("linear_attn.dt_bias", R::MixerOther, "linear_num_value_heads", linear_layer),
                       linear("linear_attn.q_proj", R::MixerIn, "hidden_size", key_dim, "", linear_layer),
                       linear("linear_attn.k_proj", R::MixerIn, "hidden_size", key_dim, "", linear_layer),
                       linear("linear_attn.v_proj", R::MixerIn, "hidden_size", value_dim, "", linear_layer),
                       linear("linear_attn.a_proj", R::MixerIn, "hidden_size", "linear_num_value_heads", "", linear_layer),
                       linear("linear_attn.b_proj", R::MixerIn, "hidden_size", "linear_num_value_heads", "", linear_layer),
                       linear("linear_attn.g_proj", R::MixerIn, "hidden_size", value_dim, "", linear_layer),
                       linear("linear_attn.o_proj", R::O, value_dim, "hidden_size", "", linear_layer),
                       depthwise_conv1d("linear_attn.conv1d", "2*" + key_dim + "+" + value_dim, "linear_conv_kernel_dim", "", linear_layer),
                       norm("linear_attn.o_norm", R::MixerOther, "linear_value_head_dim", "", linear_layer)}});
    a.mixers = {MixerRule{linear_layer, TokenMixer::GatedDeltaNet, "linear_attn", "linear_num_value_heads", "linear_key_head_dim",
                          "linear_value_head_dim", "64", "2*" + key_dim + "+" + value_dim, "linear_conv_kernel_dim"}};
    // OlmoHybridConfig.__post_init__: every 4th layer (i % 4 == 3) full attention, and the last one
    // when that leaves none (model_config.cc).
    a.layer_types = qwen_types;
    a.keep_in_fp32_strict = {"linear_attn.A_log"};
    a.defaults = {{"tie_word_embeddings", 0}, {"linear_conv_kernel_dim", 4}};
    a.derived = {{"linear_num_key_heads", "num_attention_heads"}, {"linear_num_value_heads", "num_attention_heads"},
                 {"linear_value_head_dim", "2*linear_key_head_dim"}};
    a.source = "transformers/models/olmo_hybrid/modeling_olmo_hybrid.py";
    t.push_back(a);
  }
  // mamba_chunk_scan_combined's chunk is the config's mamba_chunk_size.
  const MixerRule mamba2{linear_layer, TokenMixer::Mamba2, "mamba", "mamba_n_heads", "mamba_d_state", "mamba_d_head",
                         "mamba_chunk_size", kMambaConv, "mamba_d_conv"};
  const std::map<std::string, double> mamba2_defaults = {
      {"mamba_n_heads", 128}, {"mamba_d_head", 64}, {"mamba_n_groups", 1}, {"mamba_d_state", 256}, {"mamba_d_conv", 4},
      {"mamba_expand", 2}, {"mamba_chunk_size", 256}, {"mamba_conv_bias", 1}, {"mamba_proj_bias", 0}};
  {  // Bamba (BambaDecoderLayer): feed_forward (BambaMLP, mlp_bias), input_layernorm,
     // pre_ff_layernorm, then mamba (Mamba2) or self_attn (Llama's, attention_bias); layer types from
     // attn_layer_indices (BambaConfig.layers_block_type); the final norm is model.final_layernorm.
    ArchitectureSpec a;
    a.model_type = "bamba";
    std::vector<ModuleSpec> attn = attention("attention_bias", "attention_bias");
    for (ModuleSpec& m : attn) m.when = full_layer;
    a.layer = concat({swiglu("feed_forward", "intermediate_size", "mlp_bias"),
                      {norm("input_layernorm", R::InputNorm), norm("pre_ff_layernorm", R::PostAttentionNorm)},
                      mamba2_mixer("mamba", linear_layer), attn});
    a.final_norm = "model.final_layernorm";
    a.mixers = {mamba2};
    a.layer_types = LayerTypesRule{"attn_layer_indices", "", 0, "linear_attention", "full_attention",
                                   {"linear_attention", "full_attention"}, "", {}, {}, false};
    a.defaults = mamba2_defaults;
    a.defaults["tie_word_embeddings"] = 0;
    a.source = "transformers/models/bamba/modeling_bamba.py";
    t.push_back(a);
  }
  {  // GraniteMoeHybrid (GraniteMoeHybridDecoderLayer): input_layernorm, post_attention_layernorm,
     // block_sparse_moe (router, experts; absent when num_local_experts is 0), shared_mlp
     // (input_linear [2S, H], output_linear [H, S]), then mamba or self_attn: both start as None
     // attributes and are registered when assigned, after shared_mlp. layer_types (legacy
     // "mamba"/"attention" remapped); without it every layer is Mamba2.
    ArchitectureSpec a;
    a.model_type = "granitemoehybrid";
    a.remaps_legacy_layer_types = true;  // its config class calls remap_legacy_layer_types
    std::vector<ModuleSpec> attn = attention("attention_bias", "attention_bias");
    for (ModuleSpec& m : attn) m.when = full_layer;
    a.layer = concat({kLlamaNorms,
                      {tensor("block_sparse_moe.router.weight", R::Router, "num_local_experts,hidden_size", "num_local_experts"),
                       tensor("block_sparse_moe.experts.gate_up_proj", R::ExpertsGateUp, "num_local_experts,2*intermediate_size,hidden_size",
                              "num_local_experts"),
                       tensor("block_sparse_moe.experts.down_proj", R::ExpertsDown, "num_local_experts,hidden_size,intermediate_size",
                              "num_local_experts"),
                       linear("shared_mlp.input_linear", R::MlpOther, "hidden_size", "2*shared_intermediate_size"),
                       linear("shared_mlp.output_linear", R::MlpOther, "shared_intermediate_size", "hidden_size")},
                      mamba2_mixer("mamba", linear_layer), attn});
    a.mixers = {mamba2};
    a.layer_types = LayerTypesRule{"", "", 0, "linear_attention", "full_attention", {"linear_attention", "full_attention"}, "", {}, {}, false};
    a.moe = MoeLayers::All;
    a.experts_key = "num_local_experts";
    a.top_k_key = "num_experts_per_tok";
    a.expert_width = "intermediate_size";
    a.shared_expert_width = "shared_intermediate_size";
    // _MODEL_TO_CONVERSION_PATTERN maps granitemoehybrid to granitemoe, which has no MoE target mapping.
    a.defaults = mamba2_defaults;
    a.defaults.insert({{"tie_word_embeddings", 0}, {"num_local_experts", 8}, {"num_experts_per_tok", 2},
                       {"shared_intermediate_size", 1024}});
    a.source = "transformers/models/granitemoehybrid/modeling_granitemoehybrid.py";
    t.push_back(a);
  }
}


// Gemma4TextConfig.__post_init__ (and Gemma4UnifiedTextConfig's): layer_types defaults to five
// sliding layers then a full one, its last entry is forced to full_attention, and without a
// per_layer_config every full-attention layer gets head_dim = global_head_dim (default 512) and,
// when attention_k_eq_v, num_key_value_heads = num_global_key_value_heads (if set).
// The layer type of each layer ("" where layer_types does not say).
std::vector<std::string> layer_types_of(const std::map<std::string, double>& values, int layers) {
  std::vector<std::string> types(static_cast<size_t>(std::max(layers, 0)));
  for (int i = 0; i < layers; ++i) {
    const std::string prefix = "layer_types." + std::to_string(i) + "=";
    auto it = values.lower_bound(prefix);
    if (it != values.end() && it->first.rfind(prefix, 0) == 0) types[static_cast<size_t>(i)] = it->first.substr(prefix.size());
  }
  return types;
}

// Gemma3nTextAttention / Gemma4TextAttention.__init__: a layer that keeps its own keys and values
// looks its layer type up among layer_types[:num_hidden_layers - num_kv_shared_layers] (a Python
// slice: a negative end drops entries from the end), for the last such layer that stores the full
// KV; a type not there is transformers' ValueError ("... is not in list"), so no model.
void check_kv_sharing(const std::map<std::string, double>& values, int layers, bool shared_from_zero, const std::string& source) {
  auto it = values.find("num_kv_shared_layers");
  const int first = layers - static_cast<int>(it == values.end() ? 0 : it->second);
  const std::vector<std::string> types = layer_types_of(values, layers);
  const int end = first >= 0 ? std::min(first, layers) : std::max(layers + first, 0);
  for (int i = 0; i < layers; ++i) {
    const bool shared = shared_from_zero ? (i >= first && first >= 0) : (i >= first && first > 0);
    if (shared) continue;
    if (std::find(types.begin(), types.begin() + end, types[static_cast<size_t>(i)]) == types.begin() + end) {
      throw InputError(source, "key \"num_kv_shared_layers\": transformers cannot build layer " + std::to_string(i) + ": its type \"" +
                                   types[static_cast<size_t>(i)] + "\" is not among layer_types[:num_hidden_layers - num_kv_shared_layers] " +
                                   "(the layers that keep their own keys and values); expected at most " +
                                   std::to_string(std::max(layers - 1, 0)) + " shared layers with both attention types before them");
    }
  }
}

void gemma4_config_rules(std::map<std::string, double>& values, int layers, const std::string& source) {
  auto has = [&](const std::string& prefix) {
    auto it = values.lower_bound(prefix);
    return it != values.end() && it->first.rfind(prefix, 0) == 0;
  };
  auto set_type = [&](int i, const std::string& type) {
    const std::string prefix = "layer_types." + std::to_string(i) + "=";
    for (auto it = values.lower_bound(prefix); it != values.end() && it->first.rfind(prefix, 0) == 0;) it = values.erase(it);
    values[prefix + type] = 1;
  };
  if (!has("layer_types.")) {
    for (int i = 0; i < layers; ++i) set_type(i, (i + 1) % 6 != 0 ? "sliding_attention" : "full_attention");
  }
  if (layers > 0) set_type(layers - 1, "full_attention");
  if (values.count("per_layer_config") == 0) {
    auto value = [&](const std::string& key) {
      auto it = values.find(key);
      return it == values.end() ? 0.0 : it->second;
    };
    for (int i = 0; i < layers; ++i) {
      if (values.count("layer_types." + std::to_string(i) + "=full_attention") == 0) continue;
      values[per_layer_key(i, "head_dim")] = value("global_head_dim");
      if (value("attention_k_eq_v") != 0 && value("num_global_key_value_heads") > 0) {
        values[per_layer_key(i, "num_key_value_heads")] = value("num_global_key_value_heads");
      }
    }
  }
  check_kv_sharing(values, layers, /*shared_from_zero=*/true, source);
}

// Gemma4TextAttention / Gemma4TextMLP: layers from num_hidden_layers - num_kv_shared_layers on
// reuse an earlier layer's keys and values (no k/v projections or norms; the attention tests
// `index >= first >= 0`), and their MLP is twice as wide when use_double_wide_mlp (the MLP tests
// `index >= first > 0`); attention_k_eq_v drops v_proj in the layers that are not sliding.
void gemma4_layer_rules(int index, int layers, std::map<std::string, double>& values) {
  auto value = [&](const std::string& key) {
    auto it = values.find(key);
    return it == values.end() ? 0.0 : it->second;
  };
  const int first_shared = layers - static_cast<int>(value("num_kv_shared_layers"));
  const bool sliding = values.count("layer_type=sliding_attention") != 0;
  values["kv_shared_layer"] = index >= first_shared && first_shared >= 0 ? 1 : 0;
  values["k_eq_v_layer"] = value("attention_k_eq_v") != 0 && !sliding ? 1 : 0;
  const bool double_wide = value("use_double_wide_mlp") != 0 && index >= first_shared && first_shared > 0;
  values["layer_intermediate_size"] = value("intermediate_size") * (double_wide ? 2 : 1);
  // A token's MLP work: the dense MLP plus, with the MoE block beside it, top_k_experts experts.
  double width = values["layer_intermediate_size"];
  if (value("enable_moe_block") != 0) width += value("top_k_experts") * value("moe_intermediate_size");
  values["layer_mlp_width"] = width;
}

// DeepSeek-V3.2 builds an indexer in every layer; GLM-MoE-DSA where indexer_types[i] is "full".
void dsa_layer_rules(int index, int, std::map<std::string, double>& values) {
  const std::string prefix = "indexer_types." + std::to_string(index) + "=";
  auto it = values.lower_bound(prefix);
  const bool listed = it != values.end() && it->first.rfind(prefix, 0) == 0;
  values["indexer"] = !listed || values.count(prefix + "full") != 0 ? 1 : 0;
}

// GlmMoeDsaConfig.__post_init__: without indexer_types, index_topk_pattern (a string of F/S, one a
// layer) or else layer i is "full" when max(i - offset + 1, 0) % freq == 0 (index_topk_freq, at
// least 1, default 1; index_skip_topk_offset default 2).
void glm_moe_dsa_config_rules(std::map<std::string, double>& values, int layers, const std::string&) {
  auto it = values.lower_bound("indexer_types.");
  if (it != values.end() && it->first.rfind("indexer_types.", 0) == 0) return;
  std::string pattern;
  if (auto p = values.lower_bound("index_topk_pattern="); p != values.end() && p->first.rfind("index_topk_pattern=", 0) == 0) {
    pattern = p->first.substr(std::string("index_topk_pattern=").size());
  }
  auto value = [&](const std::string& key, double fallback) {
    auto found = values.find(key);
    return found == values.end() ? fallback : found->second;
  };
  const int freq = std::max(static_cast<int>(value("index_topk_freq", 1)), 1);
  const int offset = static_cast<int>(value("index_skip_topk_offset", 2));
  for (int i = 0; i < layers; ++i) {
    const bool full = !pattern.empty() ? (static_cast<size_t>(i) < pattern.size() && pattern[static_cast<size_t>(i)] == 'F')
                                       : std::max(i - offset + 1, 0) % freq == 0;
    values["indexer_types." + std::to_string(i) + "=" + (full ? "full" : "shared")] = 1;
  }
}

// Gemma3nTextModel: altup_num_inputs - 1 extra residual streams, each with its projection in and out.
void gemma3n_config_rules(std::map<std::string, double>& values, int layers, const std::string& source) {
  auto it = values.find("altup_num_inputs");
  values["altup_extra_streams"] = it == values.end() ? 0 : std::max(it->second - 1, 0.0);
  // Gemma3nTextConfig.__post_init__: layer_types defaults to four sliding layers then a full one.
  if (layer_types_of(values, 1).front().empty()) {
    for (int i = 0; i < layers; ++i) {
      values["layer_types." + std::to_string(i) + "=" + ((i + 1) % 5 == 0 ? "full_attention" : "sliding_attention")] = 1;
    }
  }
  check_kv_sharing(values, layers, /*shared_from_zero=*/false, source);
}

// Gemma3nTextAttention: layers from num_hidden_layers - num_kv_shared_layers on (when that is > 0)
// reuse an earlier layer's keys and values: no k/v projections or norms.
void gemma3n_layer_rules(int index, int layers, std::map<std::string, double>& values) {
  auto it = values.find("num_kv_shared_layers");
  const int first_shared = layers - static_cast<int>(it == values.end() ? 0 : it->second);
  values["kv_shared_layer"] = index >= first_shared && first_shared > 0 ? 1 : 0;
}

// ---- One-block-per-layer hybrids (arch7): each layer is a norm and one module, the `mixer`.

// NemotronH's MoE input width: moe_latent_size when set (fc1/fc2_latent_proj project into it), else
// hidden_size (NemotronHExperts.__init__).
void nemotron_h_rules(std::map<std::string, double>& values, int, const std::string&) {
  auto latent = values.find("moe_latent_size");
  values["moe_expert_in"] = latent != values.end() && latent->second > 0 ? latent->second : values.at("hidden_size");
}

// MambaConfig / FalconMambaConfig.__post_init__: intermediate_size = int(expand * hidden_size)
// (whatever the file says), time_step_rank "auto" = ceil(hidden_size / 16).
void mamba1_rules(std::map<std::string, double>& values, int, const std::string&) {
  // Its own key: the file's intermediate_size (ignored by the class) stays what ModelConfig read.
  values["mamba_inner"] = std::floor(values.at("expand") * values.at("hidden_size"));
  if (values.count("time_step_rank") == 0) values["time_step_rank"] = std::ceil(values.at("hidden_size") / 16);
}

// JambaConfig: layer i is attention when i % attn_layer_period == attn_layer_offset, else Mamba
// (layers_block_type), and has the sparse MoE block when i % expert_layer_period ==
// expert_layer_offset and num_experts > 1 (layers_num_experts); mamba_dt_rank "auto" = ceil(H / 16).
// Written as the layer's types ("layer_types.<i>=..."), which module conditions and the MoE rule read.
void jamba_rules(std::map<std::string, double>& values, int layers, const std::string& source) {
  auto value = [&](const std::string& key) { return static_cast<int>(values.at(key)); };
  for (const char* kind : {"attn", "expert"}) {
    const std::string period = std::string(kind) + "_layer_period", offset = std::string(kind) + "_layer_offset";
    if (value(period) < 1 || value(offset) >= value(period)) {
      // JambaConfig.validate_architecture.
      throw InputError(source + ": key " + offset, "expected a layer offset smaller than " + period + " " +
                                                       std::to_string(value(period)) + " (JambaConfig refuses it)");
    }
  }
  for (int i = 0; i < layers; ++i) {
    const std::string key = "layer_types." + std::to_string(i) + "=";
    values[key + (i % value("attn_layer_period") == value("attn_layer_offset") ? "full_attention" : "linear_attention")] = 1;
    if (i % value("expert_layer_period") == value("expert_layer_offset") && value("num_experts") > 1) values[key + "moe"] = 1;
  }
  if (values.count("mamba_dt_rank") == 0) values["mamba_dt_rank"] = std::ceil(values.at("hidden_size") / 16);
}

void add_block_hybrid_decoders(std::vector<ArchitectureSpec>& t) {
  const std::string mamba = "layer_type=linear_attention";
  const std::string attn_layer = "layer_type=full_attention";
  const std::string mlp = "layer_type=mlp";
  const std::string moe = "layer_type=moe";
  {  // NemotronH (NemotronHBlock, modeling_nemotron_h.py): norm, then `mixer` by layers_block_type:
     // NemotronHMamba2Mixer (dt_bias, A_log, D, conv1d [use_conv_bias], in_proj, norm over
     // mamba_num_heads * mamba_head_dim, out_proj [use_bias]), NemotronHAttention (q/k/v/o, never a
     // bias), NemotronHMLP (up_proj, down_proj [mlp_bias]; relu2, no gate) or NemotronHMoE (experts
     // up_proj [E, I, L] / down_proj [E, L, I], gate.weight [E, H] (its e_score_correction_bias is a
     // buffer), shared_experts (an MLP), fc1/fc2_latent_proj when moe_latent_size is set; L is
     // moe_latent_size or hidden_size). model.embeddings, model.norm_f.
    ArchitectureSpec a;
    a.model_type = "nemotron_h";
    a.embedding_padding_idx = false;  // modeling_nemotron_h.py: nn.Embedding without padding_idx
    a.embed = "model.embeddings";
    a.final_norm = "model.norm_f";
    a.layer_class = "NemotronHBlock";
    const Mamba2Keys keys{"mamba_num_heads", "mamba_num_heads*mamba_head_dim", "n_groups", "ssm_state_size", "conv_kernel",
                          "use_conv_bias", "use_bias"};
    a.layer = concat({{norm("norm", R::InputNorm, "hidden_size", "", mamba + "|" + attn_layer),
                       norm("norm", R::PostAttentionNorm, "hidden_size", "", mlp + "|" + moe)},
                      mamba2_mixer("mixer", mamba, keys),
                      {linear("mixer.q_proj", R::Q, "hidden_size", kQ, "", attn_layer),
                       linear("mixer.k_proj", R::K, "hidden_size", kKV, "", attn_layer),
                       linear("mixer.v_proj", R::V, "hidden_size", kKV, "", attn_layer),
                       linear("mixer.o_proj", R::O, kQ, "hidden_size", "", attn_layer),
                       linear("mixer.up_proj", R::Up, "hidden_size", "intermediate_size", "mlp_bias", mlp),
                       linear("mixer.down_proj", R::Down, "intermediate_size", "hidden_size", "mlp_bias", mlp),
                       tensor("mixer.experts.up_proj", R::ExpertsGateUp, "n_routed_experts,moe_intermediate_size,moe_expert_in", moe),
                       tensor("mixer.experts.down_proj", R::ExpertsDown, "n_routed_experts,moe_expert_in,moe_intermediate_size", moe),
                       tensor("mixer.gate.weight", R::Router, "n_routed_experts,hidden_size", moe),
                       linear("mixer.shared_experts.up_proj", R::MlpOther, "hidden_size", "moe_shared_expert_intermediate_size", "mlp_bias", moe),
                       linear("mixer.shared_experts.down_proj", R::MlpOther, "moe_shared_expert_intermediate_size", "hidden_size", "mlp_bias", moe),
                       linear("mixer.fc1_latent_proj", R::MlpOther, "hidden_size", "moe_latent_size", "mlp_bias", moe + "&moe_latent_size"),
                       linear("mixer.fc2_latent_proj", R::MlpOther, "moe_latent_size", "hidden_size", "mlp_bias", moe + "&moe_latent_size")}});
    a.mixers = {MixerRule{mamba, TokenMixer::Mamba2, "mixer", "mamba_num_heads", "ssm_state_size", "mamba_head_dim", "chunk_size",
                          keys.conv(), "conv_kernel"},
                MixerRule{attn_layer, TokenMixer::Attention, "mixer", "", "", "", "", "", ""},
                MixerRule{mlp + "|" + moe, TokenMixer::None, "mixer", "", "", "", "", "", ""}};
    // NemotronHConfig.__post_init__: layers_block_type (legacy "mamba"/"attention" remapped), else
    // hybrid_override_pattern (M, E, *, -), else the four-layer default; its length is the depth.
    a.layer_types.known = {"linear_attention", "full_attention", "mlp", "moe"};
    a.layer_types.pattern_key = "hybrid_override_pattern";
    a.layer_types.pattern = {{'M', "linear_attention"}, {'E', "moe"}, {'*', "full_attention"}, {'-', "mlp"}};
    a.layer_types.default_types = {"linear_attention", "moe", "full_attention", "mlp"};
    a.layer_types.count_layers = true;
    a.one_block_per_layer = true;
    a.mlp_module = "mixer";
    a.mlp_gated = false;
    a.never_tied = true;
    a.moe = MoeLayers::LayerTypeMoe;
    a.experts_key = "n_routed_experts";
    a.top_k_key = "num_experts_per_tok";
    a.expert_width = "moe_intermediate_size";
    a.shared_expert_width = "moe_shared_expert_intermediate_size";
    // NemotronHConfig.attribute_map and the legacy mamba_* keys __post_init__ pops into its own.
    a.attribute_map = {{"num_local_experts", "n_routed_experts"}, {"mamba_n_groups", "n_groups"}, {"mamba_d_conv", "conv_kernel"},
                       {"mamba_expand", "expand"}, {"mamba_conv_bias", "use_conv_bias"}, {"mamba_chunk_size", "chunk_size"}};
    a.defaults = {{"tie_word_embeddings", 0}, {"num_key_value_heads", 8}, {"head_dim", 128}, {"intermediate_size", 21504},
                  {"mamba_num_heads", 128}, {"mamba_head_dim", 64}, {"n_groups", 8}, {"ssm_state_size", 128},
                  {"conv_kernel", 4}, {"use_conv_bias", 1}, {"use_bias", 0}, {"mlp_bias", 0}, {"chunk_size", 128},
                  {"n_routed_experts", 8}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 7688},
                  {"moe_shared_expert_intermediate_size", 7688}};
    a.config_rules = nemotron_h_rules;
    a.source = "transformers/models/nemotron_h/modeling_nemotron_h.py";
    t.push_back(a);
  }
  {  // Mamba2 (Mamba2ForCausalLM, modeling_mamba2.py): backbone.embeddings, then Mamba2Block (norm,
     // mixer: Mamba2Mixer as NemotronH's, its inner width int(expand * hidden_size), its norm a
     // MambaRMSNormGated over it; use_bias on in_proj and out_proj), backbone.norm_f, lm_head (tied
     // by tie_word_embeddings). No attention and no MLP.
    ArchitectureSpec a;
    a.model_type = "mamba2";
    a.embedding_padding_idx = false;  // modeling_mamba2.py: nn.Embedding without padding_idx
    a.embed = "backbone.embeddings";
    a.layers = "backbone.layers";
    a.final_norm = "backbone.norm_f";
    a.layer_class = "Mamba2Block";
    const Mamba2Keys keys{"num_heads", "expand*hidden_size", "n_groups", "state_size", "conv_kernel", "use_conv_bias", "use_bias"};
    a.layer = concat({{norm("norm", R::InputNorm)}, mamba2_mixer("mixer", "", keys)});
    a.mixers = {MixerRule{"1", TokenMixer::Mamba2, "mixer", "num_heads", "state_size", "head_dim", "chunk_size", keys.conv(),
                          "conv_kernel"}};
    a.one_block_per_layer = true;
    // Mamba2Config has no attention heads and no MLP: one head, and the mixer's inner width for the
    // MLP, where a model-wide figure asks for them (no layer has either; the time and memory models
    // cost each layer's own modules).
    a.num_attention_heads_from = "1";
    a.defaults = {{"tie_word_embeddings", 0}, {"num_heads", 128}, {"head_dim", 64}, {"state_size", 128}, {"expand", 2},
                  {"conv_kernel", 4}, {"n_groups", 8}, {"use_bias", 0}, {"use_conv_bias", 1}, {"chunk_size", 256}};
    a.derived = {{"intermediate_size", "expand*hidden_size"}};
    a.source = "transformers/models/mamba2/modeling_mamba2.py";
    t.push_back(a);
  }
  {  // Jamba (modeling_jamba.py): JambaMambaDecoderLayer (mamba, feed_forward, input_layernorm,
     // pre_ff_layernorm) or JambaAttentionDecoderLayer (self_attn: Llama's without biases, then the
     // same); feed_forward a JambaSparseMoeBlock (router nn.Linear [E, H], experts gate_up_proj
     // [E, 2I, H], down_proj [E, H, I]) or a JambaMLP (gate/up/down, no bias). JambaMambaMixer is
     // Mamba1's (A_log [I, N], D [I], conv1d [mamba_conv_bias], in_proj [mamba_proj_bias], x_proj,
     // dt_proj, out_proj [mamba_proj_bias]) with RMSNorms dt_layernorm [R], b_layernorm,
     // c_layernorm [N] registered last; I = mamba_expand * hidden_size, N = mamba_d_state, R = mamba_dt_rank.
    ArchitectureSpec a;
    a.model_type = "jamba";
    const std::string mamba = "layer_type=linear_attention";
    const std::string inner = "mamba_expand*hidden_size";
    std::vector<ModuleSpec> attn = attention("", "");
    for (ModuleSpec& m : attn) m.when = "layer_type=full_attention";
    a.layer = concat({{tensor("mamba.A_log", R::MixerOther, inner + ",mamba_d_state", mamba),
                       tensor("mamba.D", R::MixerOther, inner, mamba),
                       depthwise_conv1d("mamba.conv1d", inner, "mamba_d_conv", "mamba_conv_bias", mamba),
                       linear("mamba.in_proj", R::MixerIn, "hidden_size", "2*" + inner, "mamba_proj_bias", mamba),
                       linear("mamba.x_proj", R::MixerOther, inner, "mamba_dt_rank+2*mamba_d_state", "", mamba),
                       linear("mamba.dt_proj", R::MixerOther, "mamba_dt_rank", inner, "1", mamba),
                       linear("mamba.out_proj", R::O, inner, "hidden_size", "mamba_proj_bias", mamba),
                       norm("mamba.dt_layernorm", R::MixerOther, "mamba_dt_rank", "", mamba),
                       norm("mamba.b_layernorm", R::MixerOther, "mamba_d_state", "", mamba),
                       norm("mamba.c_layernorm", R::MixerOther, "mamba_d_state", "", mamba)},
                      attn,
                      {linear("feed_forward.router", R::Router, "hidden_size", "num_experts", "", "moe"),
                       tensor("feed_forward.experts.gate_up_proj", R::ExpertsGateUp, "num_experts,2*intermediate_size,hidden_size", "moe"),
                       tensor("feed_forward.experts.down_proj", R::ExpertsDown, "num_experts,hidden_size,intermediate_size", "moe")},
                      swiglu("feed_forward", "intermediate_size", "", "dense"),
                      {norm("input_layernorm", R::InputNorm), norm("pre_ff_layernorm", R::PostAttentionNorm)}});
    a.final_norm = "model.final_layernorm";
    a.mixers = {MixerRule{mamba, TokenMixer::Mamba1, "mamba", inner, "mamba_d_state", "1", "", inner, "mamba_d_conv"}};
    a.mlp_module = "feed_forward";
    a.moe = MoeLayers::LayerTypeMoe;
    a.experts_key = "num_experts";
    a.top_k_key = "num_experts_per_tok";
    a.expert_width = "intermediate_size";
    a.attribute_map = {{"num_local_experts", "num_experts"}};
    a.defaults = {{"tie_word_embeddings", 0}, {"num_key_value_heads", 8}, {"num_experts", 16}, {"num_experts_per_tok", 2},
                  {"expert_layer_period", 2}, {"expert_layer_offset", 1}, {"attn_layer_period", 8}, {"attn_layer_offset", 4},
                  {"mamba_d_state", 16}, {"mamba_d_conv", 4}, {"mamba_expand", 2}, {"mamba_conv_bias", 1}, {"mamba_proj_bias", 0}};
    a.config_rules = jamba_rules;
    a.source = "transformers/models/jamba/modeling_jamba.py";
    t.push_back(a);
  }
  {  // Mamba (MambaForCausalLM, modeling_mamba.py) and Falcon-Mamba (modeling_falcon_mamba.py, the
     // same parameters: its dt/B/C RMSNorms are weightless, their `weight` a non-persistent buffer):
     // backbone.embeddings, MambaBlock (norm, mixer), backbone.norm_f, lm_head (tied by default).
     // MambaMixer: its own A_log [I, N] and D [I] first, then conv1d (depthwise over I,
     // use_conv_bias), in_proj [2I, H] (use_bias), x_proj [R + 2N, I] (no bias), dt_proj [I, R]
     // (always a bias), out_proj [H, I] (use_bias); I = mamba_inner (expand * hidden_size), N = state_size, R =
     // time_step_rank.
    ArchitectureSpec a;
    a.model_type = "mamba";
    a.embedding_padding_idx = false;  // modeling_mamba.py: nn.Embedding without padding_idx
    a.embed = "backbone.embeddings";
    a.layers = "backbone.layers";
    a.final_norm = "backbone.norm_f";
    a.layer_class = "MambaBlock";
    a.layer = {norm("norm", R::InputNorm),
               tensor("mixer.A_log", R::MixerOther, "mamba_inner,state_size"),
               tensor("mixer.D", R::MixerOther, "mamba_inner"),
               depthwise_conv1d("mixer.conv1d", "mamba_inner", "conv_kernel", "use_conv_bias", ""),
               linear("mixer.in_proj", R::MixerIn, "hidden_size", "2*mamba_inner", "use_bias"),
               linear("mixer.x_proj", R::MixerOther, "mamba_inner", "time_step_rank+2*state_size"),
               linear("mixer.dt_proj", R::MixerOther, "time_step_rank", "mamba_inner", "1"),
               linear("mixer.out_proj", R::O, "mamba_inner", "hidden_size", "use_bias")};
    a.mixers = {MixerRule{"1", TokenMixer::Mamba1, "mixer", "mamba_inner", "state_size", "1", "", "mamba_inner", "conv_kernel"}};
    a.one_block_per_layer = true;
    // No attention heads: the time model reads num_attention_heads only for attention layers.
    a.num_attention_heads_from = "1";
    a.defaults = {{"tie_word_embeddings", 1}, {"state_size", 16}, {"expand", 2}, {"conv_kernel", 4}, {"use_bias", 0},
                  {"use_conv_bias", 1}};
    // No MLP: where a model-wide figure asks for one, the mixer's inner width (a file's own
    // intermediate_size, which MambaConfig overwrites, otherwise).
    a.derived = {{"intermediate_size", "expand*hidden_size"}};
    a.config_rules = mamba1_rules;
    a.source = "transformers/models/mamba/modeling_mamba.py";
    t.push_back(a);
    a.model_type = "falcon_mamba";
    a.embedding_padding_idx = false;  // modeling_falcon_mamba.py: nn.Embedding without padding_idx
    a.layer_class = "FalconMambaBlock";
    a.source = "transformers/models/falcon_mamba/modeling_falcon_mamba.py";
    t.push_back(a);
  }
}

// FalconH1Config.__post_init__: mamba_d_head "auto" is the mixer's inner width over its heads.
void falcon_h1_rules(std::map<std::string, double>& values, int, const std::string&) {
  if (values.count("mamba_d_head") == 0) values["mamba_d_head"] = std::floor(values.at("mamba_d_ssm") / values.at("mamba_n_heads"));
}

void add_parallel_hybrid_decoders(std::vector<ArchitectureSpec>& t) {
  {  // Falcon-H1 (FalconH1DecoderLayer, modeling_falcon_h1.py): feed_forward (gate/up/down,
     // mlp_bias), mamba (FalconH1Mixer: dt_bias, A_log, D, conv1d [mamba_conv_bias], in_proj
     // [mamba_proj_bias], norm over the inner width only with mamba_rms_norm, out_proj
     // [projectors_bias]; inner width mamba_d_ssm, or mamba_expand * hidden_size when null),
     // self_attn (Llama's, attention_bias on all four), input_layernorm, pre_ff_layernorm; the final
     // norm model.final_layernorm. The muP multipliers (embedding, attention in/out, key, ssm in/out,
     // mlp, lm_head) are floats and mup_vector a non-persistent buffer: no parameters.
    ArchitectureSpec a;
    a.model_type = "falcon_h1";
    const Mamba2Keys keys{"mamba_n_heads", "mamba_d_ssm", "mamba_n_groups", "mamba_d_state", "mamba_d_conv", "mamba_conv_bias",
                          "mamba_proj_bias"};
    std::vector<ModuleSpec> mamba = mamba2_mixer("mamba", "", keys);
    for (ModuleSpec& m : mamba) {
      if (m.path == "mamba.norm") m.when = "mamba_rms_norm";
      if (m.path == "mamba.out_proj") {
        m.role = R::MixerOut;
        m.bias = "projectors_bias";
      }
    }
    a.layer = concat({swiglu("feed_forward", "intermediate_size", "mlp_bias"), mamba, attention("attention_bias", "attention_bias"),
                      {norm("input_layernorm", R::InputNorm), norm("pre_ff_layernorm", R::PostAttentionNorm)}});
    a.final_norm = "model.final_layernorm";
    a.mixers = {MixerRule{"1", TokenMixer::Mamba2, "mamba", "mamba_n_heads", "mamba_d_state", "mamba_d_head", "mamba_chunk_size",
                          keys.conv(), "mamba_d_conv"}};
    a.parallel_mixer = true;
    a.defaults = {{"tie_word_embeddings", 0}, {"num_key_value_heads", 8}, {"mamba_d_ssm", 1024}, {"mamba_n_heads", 128},
                  {"mamba_n_groups", 1}, {"mamba_d_state", 256}, {"mamba_d_conv", 4}, {"mamba_expand", 2},
                  {"mamba_chunk_size", 256}, {"mamba_conv_bias", 1}, {"mamba_proj_bias", 0}, {"mamba_rms_norm", 0},
                  {"projectors_bias", 0}, {"attention_bias", 0}, {"mlp_bias", 0}};
    a.derived = {{"mamba_d_ssm", "mamba_expand*hidden_size"}};
    a.config_rules = falcon_h1_rules;
    a.source = "transformers/models/falcon_h1/modeling_falcon_h1.py";
    t.push_back(a);
  }
}

// LagunaConfig's gating (LagunaAttention.__init__): True or "per-head" is one softplus gate per head
// (g_proj [num_heads, hidden]); False or any other string ("per-element") one per (head, channel)
// (g_proj [num_heads * head_dim, hidden]). The class default is True.
void laguna_config_rules(std::map<std::string, double>& values, int, const std::string&) {
  bool per_head = true;
  if (auto flag = values.find("gating"); flag != values.end()) per_head = flag->second != 0;
  auto text = values.lower_bound("gating=");
  if (text != values.end() && text->first.rfind("gating=", 0) == 0) per_head = text->first == "gating=per-head";
  values["gate_per_head"] = per_head ? 1 : 0;
}

// ---- Branch arch8: attention decoders of vision-language models (Qwen3-VL-MoE, GLM-OCR) and
// more attention-only decoders. Kept in one group so that branches adding other families merge.
void add_arch8_decoders(std::vector<ArchitectureSpec>& t) {
  {  // Qwen3-VL-MoE's decoder (Qwen3VLMoeTextDecoderLayer, modeling_qwen3_vl_moe.py): Qwen3-MoE's
     // layer (attention with q/k norms, then Qwen3VLMoeTextSparseMoeBlock registering experts
     // [E, 2I, H] / [E, H, I] before gate, or a dense MLP by mlp_only_layers / decoder_sparse_step).
     // Qwen3VLMoeTextConfig: num_experts 60, tie_word_embeddings True (the composite
     // Qwen3VLMoeConfig's own default is False, and the model ties by the composite's). PEFT 0.21
     // converts no v4 targets for it: _MODEL_TO_CONVERSION_PATTERN has no qwen3_vl_moe (its
     // conversion_mapping entry only transposes the expert tensors of old checkpoints).
    ArchitectureSpec a;
    a.model_type = "qwen3_vl_moe_text";
    a.aliases = {"qwen3_vl_moe"};
    a.layer = concat({attention("attention_bias", "attention_bias"), kQkNorm, swiglu("mlp", "intermediate_size", "", "dense"),
                      {tensor("mlp.experts.gate_up_proj", R::ExpertsGateUp, "num_local_experts,2*moe_intermediate_size,hidden_size", "moe"),
                       tensor("mlp.experts.down_proj", R::ExpertsDown, "num_local_experts,hidden_size,moe_intermediate_size", "moe"),
                       tensor("mlp.gate.weight", R::Router, "num_local_experts,hidden_size", "moe")},
                      kLlamaNorms});
    a.layer_class = "Qwen3VLMoeTextDecoderLayer";
    a.moe = MoeLayers::SparseStep;
    a.experts_key = "num_local_experts";
    a.attribute_map = {{"num_experts", "num_local_experts"}};
    a.top_k_key = "num_experts_per_tok";
    a.expert_width = "moe_intermediate_size";
    a.defaults = {{"tie_word_embeddings", 1}, {"decoder_sparse_step", 1}, {"num_local_experts", 60},
                  {"num_experts_per_tok", 4}, {"moe_intermediate_size", 1408}};
    a.source = "transformers/models/qwen3_vl_moe/modeling_qwen3_vl_moe.py";
    t.push_back(a);
  }
  {  // GLM-OCR's decoder (GlmOcrTextDecoderLayer, modeling_glm_ocr.py): GLM-4V's layer (fused
     // gate_up_proj, four norms) whose q/k/v have no bias (GlmOcrTextAttention: bias=False).
    ArchitectureSpec a;
    a.model_type = "glm_ocr_text";
    a.layer = concat({attention("", ""),
                      {linear("mlp.gate_up_proj", R::GateUp, "hidden_size", "2*intermediate_size"),
                       linear("mlp.down_proj", R::Down, "intermediate_size", "hidden_size")},
                      kLlamaNorms,
                      {norm("post_self_attn_layernorm", R::PostFeedforwardNorm),
                       norm("post_mlp_layernorm", R::PostFeedforwardNorm)}});
    a.layer_class = "GlmOcrTextDecoderLayer";
    a.defaults = {{"tie_word_embeddings", 0}};
    a.source = "transformers/models/glm_ocr/modeling_glm_ocr.py";
    t.push_back(a);
  }
  {  // Laguna (LagunaDecoderLayer, modeling_laguna.py): self_attn with its own head count per layer
     // (num_attention_heads_per_layer[i]; LagunaConfig writes [num_attention_heads] * layers without
     // it) over shared num_key_value_heads and head_dim (default 128): q/k/v/o (attention_bias),
     // q_norm, k_norm over head_dim, then g_proj (the softplus output gate, no bias; width by
     // gating, laguna_config_rules). mlp is LagunaSparseMoeBlock where mlp_layer_types[i] is
     // "sparse" (the class writes ["dense"] + ["sparse"] * (layers - 1) without the list): experts
     // [E, 2I, H] / [E, H, I], gate (LagunaTopKRouter: weight [E, H], then e_score_correction_bias
     // [E] with requires_grad=False), shared_experts (a LagunaMLP of shared_expert_intermediate_size);
     // else a LagunaMLP of intermediate_size. PEFT 0.21 converts no v4 targets for it
     // (_MODEL_TO_CONVERSION_PATTERN has no laguna).
    ArchitectureSpec a;
    a.model_type = "laguna";
    const std::string heads = "num_attention_heads_per_layer";
    std::vector<ModuleSpec> shared = swiglu("mlp.shared_experts", "shared_expert_intermediate_size", "", "moe");
    for (ModuleSpec& m : shared) m.role = R::MlpOther;
    a.layer = concat({{linear("self_attn.q_proj", R::Q, "hidden_size", heads + "*head_dim", "attention_bias"),
                       linear("self_attn.k_proj", R::K, "hidden_size", kKV, "attention_bias"),
                       linear("self_attn.v_proj", R::V, "hidden_size", kKV, "attention_bias"),
                       linear("self_attn.o_proj", R::O, heads + "*head_dim", "hidden_size", "attention_bias")},
                      kQkNorm,
                      {linear("self_attn.g_proj", R::AttentionOther, "hidden_size", heads, "", "gate_per_head"),
                       linear("self_attn.g_proj", R::AttentionOther, "hidden_size", heads + "*head_dim", "", "!gate_per_head")},
                      swiglu("mlp", "intermediate_size", "", "dense"),
                      {tensor("mlp.experts.gate_up_proj", R::ExpertsGateUp, "num_local_experts,2*moe_intermediate_size,hidden_size", "moe"),
                       tensor("mlp.experts.down_proj", R::ExpertsDown, "num_local_experts,hidden_size,moe_intermediate_size", "moe"),
                       tensor("mlp.gate.weight", R::Router, "num_local_experts,hidden_size", "moe"),
                       frozen_tensor("mlp.gate.e_score_correction_bias", "num_local_experts", "moe")},
                      shared, kLlamaNorms});
    a.moe = MoeLayers::LayerTypes;
    a.experts_key = "num_local_experts";
    a.attribute_map = {{"num_experts", "num_local_experts"}};
    a.top_k_key = "num_experts_per_tok";
    a.expert_width = "moe_intermediate_size";
    a.shared_expert_width = "shared_expert_intermediate_size";
    a.per_layer_lists = {heads};
    a.derived = {{heads, "num_attention_heads"}};
    a.config_rules = laguna_config_rules;
    a.defaults = {{"tie_word_embeddings", 0}, {"first_k_dense_replace", 1}, {"head_dim", 128}, {"num_local_experts", 256},
                  {"num_experts_per_tok", 8}, {"moe_intermediate_size", 512}, {"shared_expert_intermediate_size", 512}};
    a.source = "transformers/models/laguna/modeling_laguna.py";
    t.push_back(a);
  }
  {  // PaddleOCR-VL's decoder (PaddleOCRDecoderLayer, modeling_paddleocr_vl.py): ERNIE-4.5's layer,
     // use_bias on q/k/v/o and the MLP; head_dim 128 by default (PaddleOCRTextConfig), tied by default.
    ArchitectureSpec a;
    a.model_type = "paddleocr_vl_text";
    a.layer = concat({attention("use_bias", "use_bias"), swiglu("mlp", "intermediate_size", "use_bias"), kLlamaNorms});
    a.layer_class = "PaddleOCRDecoderLayer";
    a.defaults = {{"tie_word_embeddings", 1}, {"head_dim", 128}};
    a.source = "transformers/models/paddleocr_vl/modeling_paddleocr_vl.py";
    t.push_back(a);
  }
  {  // MiniMax-M3's decoder (minimax_m3_vl_text, MiniMaxM3VLDecoderLayer in
     // modeling_minimax_m3_vl.py): self_attn q/k/v/o without bias, q_norm / k_norm over head_dim
     // (Gemma-style RMSNorms: weight + 1, the same parameter), and in the layers whose layer_types
     // entry is "minimax_m3_sparse" the Lightning Indexer (indexer.q_proj [index_n_heads *
     // index_head_dim, hidden], k_proj [index_head_dim, hidden], q_norm, k_norm). The indexer's
     // output is top-k block indices, integers that build the attention mask: no gradient reaches
     // its parameters (ModuleRole::NoGrad: DDP needs find_unused_parameters, LoRA on them trains
     // nothing). mlp is MiniMaxM3VLSparseMoeBlock where mlp_layer_types[i] is "sparse" (the
     // default: every layer): gate.weight [E, H] (its e_score_correction_bias is a buffer),
     // experts [E, 2I, H] / [E, H, I] over intermediate_size, shared_experts (a DenseMLP: fused
     // gate_up_proj, down_proj over shared_intermediate_size); else a DenseMLP of
     // dense_intermediate_size. No PEFT v4 conversion (_MODEL_TO_CONVERSION_PATTERN has none).
    ArchitectureSpec a;
    a.model_type = "minimax_m3_vl_text";
    const std::string sparse = "layer_type=minimax_m3_sparse";
    a.layer = concat({attention("", ""), kQkNorm,
                      {linear("self_attn.indexer.q_proj", R::NoGrad, "hidden_size", "index_n_heads*index_head_dim", "", sparse),
                       linear("self_attn.indexer.k_proj", R::NoGrad, "hidden_size", "index_head_dim", "", sparse),
                       norm("self_attn.indexer.q_norm", R::NoGrad, "index_head_dim", "", sparse),
                       norm("self_attn.indexer.k_norm", R::NoGrad, "index_head_dim", "", sparse),
                       tensor("mlp.gate.weight", R::Router, "num_local_experts,hidden_size", "moe"),
                       tensor("mlp.experts.gate_up_proj", R::ExpertsGateUp, "num_local_experts,2*intermediate_size,hidden_size", "moe"),
                       tensor("mlp.experts.down_proj", R::ExpertsDown, "num_local_experts,hidden_size,intermediate_size", "moe"),
                       linear("mlp.shared_experts.gate_up_proj", R::MlpOther, "hidden_size", "2*shared_intermediate_size", "", "moe"),
                       linear("mlp.shared_experts.down_proj", R::MlpOther, "shared_intermediate_size", "hidden_size", "", "moe"),
                       linear("mlp.gate_up_proj", R::GateUp, "hidden_size", "2*dense_intermediate_size", "", "dense"),
                       linear("mlp.down_proj", R::Down, "dense_intermediate_size", "hidden_size", "", "dense")},
                      kLlamaNorms});
    a.layer_class = "MiniMaxM3VLDecoderLayer";
    a.moe = MoeLayers::LayerTypes;
    a.experts_key = "num_local_experts";
    a.attribute_map = {{"num_experts", "num_local_experts"}};
    a.top_k_key = "num_experts_per_tok";
    a.expert_width = "intermediate_size";
    a.shared_expert_width = "shared_intermediate_size";
    a.mlp_width = "dense_intermediate_size";
    a.unread_keys = {"sparse_attention_config", "moe_layer_freq"};
    a.defaults = {{"tie_word_embeddings", 0}, {"first_k_dense_replace", 0}, {"head_dim", 128}, {"num_local_experts", 128},
                  {"num_experts_per_tok", 4}, {"dense_intermediate_size", 12288}, {"shared_intermediate_size", 3072},
                  {"index_n_heads", 4}, {"index_head_dim", 128}};
    a.source = "transformers/models/minimax_m3_vl/modeling_minimax_m3_vl.py";
    t.push_back(a);
  }
}

// ---- Branch arch12: DeepSeek-V4 (transformers/models/deepseek_v4, transformers 5.17).

// DeepseekV4Config.__post_init__: compress_rates defaults to {compressed_sparse_attention: 4,
// heavily_compressed_attention: 128}, the legacy compress_rate_csa / compress_rate_hca override
// them; layer_types comes from the file, else from the legacy compress_ratios (0 / 4 / 128 per
// layer: _COMPRESS_RATIO_TO_LAYER_TYPE), else two heavily compressed layers then compressed sparse
// and heavily compressed alternating; a longer list is cut to num_hidden_layers
// (`self.layer_types[:n]`). DeepseekV4Attention builds o_a_proj (DeepseekV4GroupedLinear) with
// num_attention_heads * head_dim // o_groups inputs per group: "o_group_in_features".
void deepseek_v4_config_rules(std::map<std::string, double>& values, int layers, const std::string& source) {
  auto value = [&](const std::string& key, double fallback) {
    auto it = values.find(key);
    return it == values.end() ? fallback : it->second;
  };
  values["compress_rate_csa_layer"] = value("compress_rate_csa", value("compress_rates.compressed_sparse_attention", 4));
  values["compress_rate_hca_layer"] = value("compress_rate_hca", value("compress_rates.heavily_compressed_attention", 128));
  auto listed = values.lower_bound("layer_types.");
  if (listed == values.end() || listed->first.rfind("layer_types.", 0) != 0) {
    static const std::map<int, std::string> by_ratio = {
        {0, "sliding_attention"}, {4, "compressed_sparse_attention"}, {128, "heavily_compressed_attention"}};
    const bool legacy = values.count("compress_ratios.0") != 0;
    for (int i = 0; i < layers; ++i) {
      std::string type;
      if (legacy) {
        auto ratio = values.find("compress_ratios." + std::to_string(i));
        auto known = ratio == values.end() ? by_ratio.end() : by_ratio.find(static_cast<int>(ratio->second));
        if (known == by_ratio.end()) {
          throw InputError(source + ": key compress_ratios." + std::to_string(i),
                           "expected 0, 4 or 128 for each of the num_hidden_layers layers (DeepseekV4Config's "
                           "_COMPRESS_RATIO_TO_LAYER_TYPE)");
        }
        type = known->second;
      } else {
        type = i < 2 ? "heavily_compressed_attention" : ((i - 2) % 2 ? "compressed_sparse_attention" : "heavily_compressed_attention");
      }
      values["layer_types." + std::to_string(i) + "=" + type] = 1;
    }
  }
  for (int i = 0; i < layers; ++i) {
    const std::string prefix = "layer_types." + std::to_string(i) + "=";
    auto it = values.lower_bound(prefix);
    if (it == values.end() || it->first.rfind(prefix, 0) != 0) {
      throw InputError(source + ": key layer_types", "expected one entry per layer (num_hidden_layers " + std::to_string(layers) +
                                                         "; DeepseekV4Config.validate_layer_type)");
    }
  }
  const double groups = value("o_groups", 8);
  const double heads_width = value("num_attention_heads", 64) * value("head_dim", 512);
  if (groups < 1 || std::fmod(heads_width, groups) != 0) {
    throw InputError(source + ": key o_groups", "expected a positive divisor of num_attention_heads * head_dim (DeepseekV4GroupedLinear "
                                                 "splits the heads' output into o_groups groups)");
  }
  values["o_group_in_features"] = heads_width / groups;
}

// DeepSeek-V4 (DeepseekV4DecoderLayer, modeling_deepseek_v4.py), in named_parameters() order:
// - self_attn (DeepseekV4Attention): its own `sinks` [heads] first, then q_a_proj, q_a_norm,
//   q_b_proj (q_b_norm is unweighted), one shared key/value head kv_proj [head_dim, H] and kv_norm,
//   the grouped output projection o_a_proj (an nn.Linear subclass: weight [o_groups * o_lora_rank,
//   heads * head_dim / o_groups], which PEFT's all-linear takes) and o_b_proj. Layers whose
//   layer_types entry is not sliding_attention build a compressor: heavily compressed
//   (DeepseekV4HCACompressor: position_bias [rate_hca, head_dim], kv_proj, gate_proj to head_dim,
//   kv_norm) or compressed sparse (DeepseekV4CSACompressor: the same at 2 * head_dim over rate_csa,
//   then its Lightning Indexer: position_bias, kv_proj, gate_proj at 2 * index_head_dim, kv_norm,
//   q_b_proj from q_lora_rank, scorer.weights_proj). The indexer returns top-k integer indices
//   (DeepseekV4Indexer.forward ends in .topk(...).indices): its parameters never get a gradient
//   (ModuleRole::NoGrad, as MiniMax-M3's and DeepSeek-V3.2's indexers).
// - mlp (DeepseekV4SparseMoeBlock) in every layer: gate.weight [E, H] (DeepseekV4HashRouter where
//   mlp_layer_types says hash_moe, DeepseekV4TopKRouter otherwise; both hold `weight` as their one
//   parameter, tid2eid and e_score_correction_bias are buffers), experts [E, 2I, H] / [E, H, I]
//   over moe_intermediate_size, shared_experts (DeepseekV4MLP of moe_intermediate_size, mlp_bias).
// - input_layernorm, post_attention_layernorm, then the hyper-connections attn_hc and ffn_hc
//   (DeepseekV4HyperConnection: fn [(2 + hc_mult) * hc_mult, hc_mult * H], base, scale [3]).
// The model registers hc_head (DeepseekV4HyperHead: hc_fn, hc_base, hc_scale) after `norm`.
void add_deepseek_v4(std::vector<ArchitectureSpec>& t) {
  ArchitectureSpec a;
  a.model_type = "deepseek_v4";
  const std::string hca = "layer_type=heavily_compressed_attention";
  const std::string csa = "layer_type=compressed_sparse_attention";
  const std::string mix = "2*hc_mult+hc_mult*hc_mult";
  const std::string hc_width = "hc_mult*hidden_size";
  a.layer = {tensor("self_attn.sinks", R::AttentionOther, "num_attention_heads"),
             linear("self_attn.q_a_proj", R::Q, "hidden_size", "q_lora_rank"),
             norm("self_attn.q_a_norm", R::AttentionOther, "q_lora_rank"),
             linear("self_attn.q_b_proj", R::AttentionOther, "q_lora_rank", kQ),
             linear("self_attn.kv_proj", R::K, "hidden_size", "head_dim"),
             norm("self_attn.kv_norm", R::AttentionOther, "head_dim"),
             linear("self_attn.o_a_proj", R::AttentionOther, "o_group_in_features", "o_groups*o_lora_rank"),
             linear("self_attn.o_b_proj", R::O, "o_groups*o_lora_rank", "hidden_size"),
             tensor("self_attn.compressor.position_bias", R::AttentionOther, "compress_rate_hca_layer,head_dim", hca),
             linear("self_attn.compressor.kv_proj", R::AttentionOther, "hidden_size", "head_dim", "", hca),
             linear("self_attn.compressor.gate_proj", R::AttentionOther, "hidden_size", "head_dim", "", hca),
             norm("self_attn.compressor.kv_norm", R::AttentionOther, "head_dim", "", hca),
             tensor("self_attn.compressor.position_bias", R::AttentionOther, "compress_rate_csa_layer,2*head_dim", csa),
             linear("self_attn.compressor.kv_proj", R::AttentionOther, "hidden_size", "2*head_dim", "", csa),
             linear("self_attn.compressor.gate_proj", R::AttentionOther, "hidden_size", "2*head_dim", "", csa),
             norm("self_attn.compressor.kv_norm", R::AttentionOther, "head_dim", "", csa),
             tensor("self_attn.compressor.indexer.position_bias", R::NoGrad, "compress_rate_csa_layer,2*index_head_dim", csa),
             linear("self_attn.compressor.indexer.kv_proj", R::NoGrad, "hidden_size", "2*index_head_dim", "", csa),
             linear("self_attn.compressor.indexer.gate_proj", R::NoGrad, "hidden_size", "2*index_head_dim", "", csa),
             norm("self_attn.compressor.indexer.kv_norm", R::NoGrad, "index_head_dim", "", csa),
             linear("self_attn.compressor.indexer.q_b_proj", R::NoGrad, "q_lora_rank", "index_n_heads*index_head_dim", "", csa),
             linear("self_attn.compressor.indexer.scorer.weights_proj", R::NoGrad, "hidden_size", "index_n_heads", "", csa),
             tensor("mlp.gate.weight", R::Router, "n_routed_experts,hidden_size"),
             tensor("mlp.experts.gate_up_proj", R::ExpertsGateUp, "n_routed_experts,2*moe_intermediate_size,hidden_size"),
             tensor("mlp.experts.down_proj", R::ExpertsDown, "n_routed_experts,hidden_size,moe_intermediate_size"),
             linear("mlp.shared_experts.gate_proj", R::MlpOther, "hidden_size", "moe_intermediate_size", "mlp_bias"),
             linear("mlp.shared_experts.up_proj", R::MlpOther, "hidden_size", "moe_intermediate_size", "mlp_bias"),
             linear("mlp.shared_experts.down_proj", R::MlpOther, "moe_intermediate_size", "hidden_size", "mlp_bias"),
             norm("input_layernorm", R::InputNorm),
             norm("post_attention_layernorm", R::PostAttentionNorm),
             tensor("attn_hc.fn", R::AttentionOther, mix + "," + hc_width),
             tensor("attn_hc.base", R::AttentionOther, mix),
             tensor("attn_hc.scale", R::AttentionOther, "3"),
             tensor("ffn_hc.fn", R::MlpOther, mix + "," + hc_width),
             tensor("ffn_hc.base", R::MlpOther, mix),
             tensor("ffn_hc.scale", R::MlpOther, "3")};
  a.after_layers = {tensor("model.hc_head.hc_fn", R::FinalNorm, "hc_mult," + hc_width),
                    tensor("model.hc_head.hc_base", R::FinalNorm, "hc_mult"),
                    tensor("model.hc_head.hc_scale", R::FinalNorm, "1")};
  a.layer_class = "DeepseekV4DecoderLayer";
  a.moe = MoeLayers::All;
  a.experts_key = "n_routed_experts";
  a.top_k_key = "num_experts_per_tok";
  a.expert_width = "moe_intermediate_size";
  a.shared_expert_width = "moe_intermediate_size";
  // DeepseekV4Config.attribute_map (alias -> key); PEFT's v4 MoE conversion is not one of the shared
  // patterns: transformers' conversion_mapping has its own deepseek_v4 list (checkpoint renames).
  a.attribute_map = {{"num_local_experts", "n_routed_experts"}, {"intermediate_size", "moe_intermediate_size"}};
  a.mlp_layer_types_allowed = {"hash_moe", "moe"};
  // DeepseekV4PreTrainedModel._keep_in_fp32_modules_strict (attn_hc, ffn_hc, hc_head, sinks,
  // position_bias, the norms) is applied by from_pretrained's dtype plan (_get_dtype_plan, called in
  // from_pretrained only); a model built from its config (_from_config, what the structure oracle and
  // the fixtures build) creates them in the model's dtype, since none is created with an explicit
  // float32 (unlike ERNIE-4.5-MoE's router). Not listed: the table follows the built model; a
  // checkpoint loaded by from_pretrained holds these (small) tensors in float32.
  a.config_rules = deepseek_v4_config_rules;
  // DeepseekV4Config's field defaults.
  a.defaults = {{"tie_word_embeddings", 0}, {"head_dim", 512}, {"num_key_value_heads", 1}, {"q_lora_rank", 1024},
                {"o_groups", 8}, {"o_lora_rank", 1024}, {"index_n_heads", 64}, {"index_head_dim", 128}, {"hc_mult", 4},
                {"n_routed_experts", 256}, {"num_experts_per_tok", 6}, {"moe_intermediate_size", 2048}};
  a.source = "transformers/models/deepseek_v4/modeling_deepseek_v4.py";
  t.push_back(a);
}

// DbrxConfig (transformers 5.17 configuration_dbrx.py): validate_architecture raises "tie_word_embeddings
// is not supported for DBRX models"; DbrxAttention.__init__ reads attn_config.rope_theta, which
// DbrxAttentionConfig no longer declares or defaults (its own default config cannot build a model:
// AttributeError), while every real DBRX config.json carries it in attn_config.
void dbrx_config_rules(std::map<std::string, double>& values, int, const std::string& source) {
  if (values.count("attn_rope_theta") == 0) {
    throw InputError(source + ": key attn_config.rope_theta",
                     "missing; expected a number (DbrxAttention reads attn_config.rope_theta, which transformers 5.17's "
                     "DbrxAttentionConfig does not default, so transformers cannot build this config either)");
  }
  auto tied = values.find("tie_word_embeddings");
  if (tied != values.end() && tied->second != 0) {
    throw InputError(source + ": key tie_word_embeddings",
                     "expected false (DbrxConfig.validate_architecture: tie_word_embeddings is not supported for DBRX models)");
  }
}

// DBRX (DbrxBlock, modeling_dbrx.py): transformer.wte, transformer.blocks.N with norm_attn_norm
// (DbrxNormAttentionNorm: norm_1 and norm_2 are nn.LayerNorm(d_model, bias=False), between them
// attn.Wqkv [d_model + 2 * kv_n_heads * head_dim, d_model] and attn.out_proj, no biases) and ffn
// (DbrxFFN: router.layer [moe_num_experts, d_model], then experts.mlp.w1, v1, w2, each
// [moe_num_experts * ffn_hidden_size, d_model]: gate, up and the down projection stored transposed,
// DbrxExpertGLU), then transformer.norm_f (LayerNorm without bias) and lm_head. attn_config and
// ffn_config are sub-configs: their keys are read from there (DbrxConfig.__post_init__ also sets
// num_key_value_heads = attn_config.kv_n_heads). head_dim is d_model // n_heads (DbrxAttention).
void add_dbrx(std::vector<ArchitectureSpec>& t) {
  ArchitectureSpec a;
  a.model_type = "dbrx";
  a.embed = "transformer.wte";
  a.layers = "transformer.blocks";
  a.layer_class = "DbrxBlock";
  a.final_norm = "transformer.norm_f";
  a.layer = {norm("norm_attn_norm.norm_1", R::InputNorm),
             linear("norm_attn_norm.attn.Wqkv", R::QKV, "hidden_size", "hidden_size+2*num_key_value_heads*head_dim"),
             linear("norm_attn_norm.attn.out_proj", R::O, "hidden_size", "hidden_size"),
             norm("norm_attn_norm.norm_2", R::PostAttentionNorm),
             linear("ffn.router.layer", R::Router, "hidden_size", "moe_num_experts"),
             tensor("ffn.experts.mlp.w1", R::ExpertsGateUp, "moe_num_experts*ffn_hidden_size,hidden_size"),
             tensor("ffn.experts.mlp.v1", R::ExpertsGateUp, "moe_num_experts*ffn_hidden_size,hidden_size"),
             tensor("ffn.experts.mlp.w2", R::ExpertsDown, "moe_num_experts*ffn_hidden_size,hidden_size")};
  a.moe = MoeLayers::All;
  a.experts_key = "moe_num_experts";
  a.top_k_key = "moe_top_k";
  a.expert_width = "ffn_hidden_size";
  a.attribute_map = {{"d_model", "hidden_size"}, {"n_heads", "num_attention_heads"}, {"n_layers", "num_hidden_layers"},
                     {"max_seq_len", "max_position_embeddings"}};
  a.popped_keys = {{"attn_config.kv_n_heads", "num_key_value_heads"}, {"attn_config.rope_theta", "attn_rope_theta"},
                   {"ffn_config.ffn_hidden_size", "ffn_hidden_size"}, {"ffn_config.moe_num_experts", "moe_num_experts"},
                   {"ffn_config.moe_top_k", "moe_top_k"}};
  a.config_rules = dbrx_config_rules;
  // DbrxAttentionConfig / DbrxFFNConfig field defaults.
  a.defaults = {{"tie_word_embeddings", 0}, {"num_key_value_heads", 1}, {"ffn_hidden_size", 3584}, {"moe_num_experts", 4},
                {"moe_top_k", 1}};
  a.source = "transformers/models/dbrx/modeling_dbrx.py";
  t.push_back(a);
}

// LongcatFlashMLA (modeling_longcat_flash.py) computes mla_scale_q_lora = (hidden_size / q_lora_rank)
// ** 0.5 in __init__ and always runs q_a_proj in forward: q_lora_rank null (DeepseekV3Attention's
// plain q_proj) is a TypeError there, so transformers cannot build it and hookstream refuses it.
// The router's outputs and gate_up_proj's rows: n_routed_experts + (zero_expert_num or 0)
// (LongcatFlashTopkRouter, LongcatFlashExperts.total_experts), as one key since a shape factor must
// be positive and zero_expert_num may be 0.
void longcat_flash_rules(std::map<std::string, double>& values, int, const std::string& source) {
  if (values.count("q_lora_rank") == 0 || values.at("q_lora_rank") <= 0) {
    throw InputError(source + ": key q_lora_rank", "expected a positive integer (LongcatFlashMLA divides hidden_size by it and "
                                                   "always runs q_a_proj), got null");
  }
  const auto zero = values.find("zero_expert_num");
  values["longcat_total_experts"] = values.count("n_routed_experts") ? values.at("n_routed_experts") : 0;
  if (zero != values.end()) values["longcat_total_experts"] += zero->second;
}

// LongCat-Flash (LongcatFlashForCausalLM, transformers/models/longcat_flash/modular_longcat_flash.py):
// config.num_layers layers (LongcatFlashModel; num_hidden_layers is set to twice that), each a
// LongcatFlashDecoderLayer that registers, in order: mlp (LongcatFlashMoE: experts then router),
// self_attn (a ModuleList of two LongcatFlashMLA, DeepSeek-V3's MLA), mlps (two LongcatFlashMLP,
// DeepSeek-V3's gated MLP of ffn_hidden_size), input_layernorm and post_attention_layernorm (ModuleLists
// of two RMSNorms). The experts (LongcatFlashExperts): gate_up_proj [n_routed_experts +
// zero_expert_num, 2 * expert_ffn_hidden_size, H] (rows for the identity "zero experts" too, never
// read: they get zero gradient, not none), down_proj [n_routed_experts, H, expert_ffn_hidden_size];
// none with n_routed_experts 0. The router (LongcatFlashTopkRouter) is an nn.Linear `classifier` of
// n_routed_experts + zero_expert_num outputs, bias by the undeclared key router_bias (getattr,
// default false); its e_score_correction_bias is a buffer. _keep_in_fp32_modules (classifier.weight)
// is not strict: bf16 under _from_config.
void add_longcat_flash(std::vector<ArchitectureSpec>& t) {
  ArchitectureSpec a;
  a.model_type = "longcat_flash";
  a.layers_key = "num_layers";
  const std::string total = "longcat_total_experts";  // longcat_flash_rules
  const std::string has_experts = "n_routed_experts!=0";
  ModuleSpec gate_up = tensor("mlp.experts.gate_up_proj", R::ExpertsGateUp, total + ",2*expert_ffn_hidden_size,hidden_size", has_experts);
  ModuleSpec down = tensor("mlp.experts.down_proj", R::ExpertsDown, "n_routed_experts,hidden_size,expert_ffn_hidden_size", has_experts);
  ModuleSpec router = linear("mlp.router.classifier", R::Router, "hidden_size", total, "router_bias");
  for (ModuleSpec* m : {&gate_up, &down, &router}) m->sublayer = -1;
  a.layer = {gate_up, down, router};
  for (int s : {0, 1}) {
    const std::string n = std::to_string(s);
    for (ModuleSpec m : mla_attention()) {
      if (m.path == "self_attn.q_proj") continue;  // q_lora_rank is required (longcat_flash_rules)
      m.path = "self_attn." + n + m.path.substr(std::string("self_attn").size());
      m.when.clear();
      m.sublayer = s;
      a.layer.push_back(m);
    }
  }
  for (int s : {0, 1}) {
    for (ModuleSpec m : swiglu("mlps." + std::to_string(s), "intermediate_size")) {
      m.sublayer = s;
      a.layer.push_back(m);
    }
  }
  for (const char* name : {"input_layernorm", "post_attention_layernorm"}) {
    for (int s : {0, 1}) {
      ModuleSpec m = norm(std::string(name) + "." + std::to_string(s),
                          std::string(name) == "input_layernorm" ? R::InputNorm : R::PostAttentionNorm);
      m.sublayer = s;
      a.layer.push_back(m);
    }
  }
  a.sublayers = {{"self_attn.0", "mlps.0"}, {"self_attn.1", "mlps.1"}};
  a.shortcut_moe = "mlp";
  // Every layer has the MoE block (as the shortcut; the layer's own MLP slots are mlps.0's, dense):
  // what the expert layout, the PEFT v4 conversion and 4.x's refusal read.
  a.moe = MoeLayers::All;
  a.peft_moe_conversion = "qwen2_moe";  // _MODEL_TO_CONVERSION_PATTERN["longcat_flash"]
  a.experts_key = "n_routed_experts";
  a.top_k_key = "moe_topk";
  a.expert_width = "expert_ffn_hidden_size";
  // LongcatFlashConfig.attribute_map: intermediate_size is ffn_hidden_size, num_experts_per_tok moe_topk.
  a.attribute_map = {{"ffn_hidden_size", "intermediate_size"}, {"num_experts_per_tok", "moe_topk"}};
  a.config_rules = longcat_flash_rules;
  // LongcatFlashConfig field defaults.
  a.defaults = {{"tie_word_embeddings", 0}, {"intermediate_size", 12288}, {"q_lora_rank", 1536}, {"kv_lora_rank", 512}, {"qk_nope_head_dim", 128},
                {"qk_rope_head_dim", 64}, {"v_head_dim", 128}, {"head_dim", 64}, {"moe_topk", 12}, {"n_routed_experts", 512},
                {"zero_expert_num", 256}, {"expert_ffn_hidden_size", 2048}};
  a.source = "transformers/models/longcat_flash/modular_longcat_flash.py";
  t.push_back(a);
}

// Lfm2MLP.__init__ (modeling_lfm2.py): with block_auto_adjust_ff_dim, the feed-forward width is
// int(2 * intermediate_size / 3), then int(block_ffn_dim_multiplier * that) rounded up to a multiple
// of block_multiple_of (LLaMA's rule). Lfm2Config is a strict dataclass: null for any of the three
// fails its type check (so Lfm2MLP's `is not None` branch never skips the rounding), and hookstream
// refuses it too. Its own key: ModelConfig's intermediate_size stays the file's.
void lfm2_rules(std::map<std::string, double>& values, int, const std::string& source) {
  for (const char* key : {"block_auto_adjust_ff_dim", "block_ffn_dim_multiplier", "block_multiple_of"}) {
    if (values.count(key) == 0) {
      throw InputError(source + ": key " + key, "expected a number, got null (Lfm2Config's strict field type refuses None)");
    }
  }
  double width = values.at("intermediate_size");
  if (values.at("block_auto_adjust_ff_dim") != 0) {
    const double multiple = values.at("block_multiple_of");
    if (multiple < 1 || multiple != std::floor(multiple)) {
      throw InputError(source + ": key block_multiple_of", "expected a positive integer (Lfm2MLP rounds the feed-forward width up to it)");
    }
    width = std::trunc(values.at("block_ffn_dim_multiplier") * std::trunc(2 * width / 3));
    width = multiple * std::floor((width + multiple - 1) / multiple);
  }
  if (width < 1) throw InputError(source + ": key intermediate_size", "expected a feed-forward width of at least 1 after Lfm2MLP's adjustment");
  values["feed_forward_width"] = width;
}

// Lfm2MoeDecoderLayer: layers below num_dense_layers have the dense Lfm2MoeMLP, the others the
// sparse block (the FirstKDense rule, which reads first_k_dense_replace).
void lfm2_moe_rules(std::map<std::string, double>& values, int, const std::string& source) {
  auto dense = values.find("num_dense_layers");
  if (dense == values.end()) {
    throw InputError(source + ": key num_dense_layers", "expected an integer (Lfm2MoeDecoderLayer compares the layer index with it), got null");
  }
  values["first_k_dense_replace"] = dense->second;
}

// LFM2 (Lfm2DecoderLayer, modeling_lfm2.py) and LFM2-MoE (Lfm2MoeDecoderLayer, modeling_lfm2_moe.py):
// each layer is attention or a gated short convolution by layer_types ("full_attention" is
// attention, any other entry, "conv" in LiquidAI's configs, the convolution), then feed_forward,
// operator_norm, ffn_norm. Attention (Lfm2Attention): q/k/v_proj, out_proj, then q_layernorm and
// k_layernorm over head_dim; no biases. The convolution (Lfm2ShortConv): conv (nn.Conv1d(H, H,
// conv_L_cache, groups=H)), in_proj [3H, H], out_proj [H, H], all three with conv_bias. Every
// parameter is used once per step (the conv's weight through a squeeze(1) view). The final norm
// is model.embedding_norm, registered after the layers; lm_head tied by default.
void add_short_conv_decoders(std::vector<ArchitectureSpec>& t) {
  const std::string conv_layer = "layer_type=linear_attention";
  const std::string full_layer = "layer_type=full_attention";
  std::vector<ModuleSpec> attn = {linear("self_attn.q_proj", R::Q, "hidden_size", kQ, "", full_layer),
                                  linear("self_attn.k_proj", R::K, "hidden_size", kKV, "", full_layer),
                                  linear("self_attn.v_proj", R::V, "hidden_size", kKV, "", full_layer),
                                  linear("self_attn.out_proj", R::O, kQ, "hidden_size", "", full_layer),
                                  norm("self_attn.q_layernorm", R::QNorm, "head_dim", "", full_layer),
                                  norm("self_attn.k_layernorm", R::KNorm, "head_dim", "", full_layer)};
  const std::vector<ModuleSpec> conv = {depthwise_conv1d("conv.conv", "hidden_size", "conv_L_cache", "conv_bias", conv_layer),
                                        linear("conv.in_proj", R::MixerIn, "hidden_size", "3*hidden_size", "conv_bias", conv_layer),
                                        linear("conv.out_proj", R::O, "hidden_size", "hidden_size", "conv_bias", conv_layer)};
  const std::vector<ModuleSpec> norms = {norm("operator_norm", R::InputNorm), norm("ffn_norm", R::PostAttentionNorm)};
  auto feed_forward = [](const std::string& width, const std::string& when) {
    return std::vector<ModuleSpec>{linear("feed_forward.w1", R::Gate, "hidden_size", width, "", when),
                                   linear("feed_forward.w3", R::Up, "hidden_size", width, "", when),
                                   linear("feed_forward.w2", R::Down, width, "hidden_size", "", when)};
  };
  const MixerRule short_conv{conv_layer, TokenMixer::ShortConv, "conv", "", "", "", "", "hidden_size", "conv_L_cache"};
  // Both config classes pop a legacy tie_embedding into tie_word_embeddings (__post_init__).
  {
    ArchitectureSpec a;
    a.model_type = "lfm2";
    a.layer = concat({attn, conv, feed_forward("feed_forward_width", ""), norms});
    a.final_norm = "model.embedding_norm";
    a.mixers = {short_conv};
    // Lfm2Config.__post_init__: without layer_types, layer i is full attention when i is in
    // full_attn_idxs (None: every layer), else "conv".
    a.layer_types = LayerTypesRule{"full_attn_idxs", "", 0, "linear_attention", "full_attention",
                                   {"linear_attention", "full_attention"}, "", {}, {}, false};
    a.layer_types.every_without_indices = true;
    a.mlp_module = "feed_forward";
    a.mlp_width = "feed_forward_width";
    a.popped_keys = {{"tie_embedding", "tie_word_embeddings"}, {"block_ff_dim", "intermediate_size"}};
    a.defaults = {{"tie_word_embeddings", 1}, {"intermediate_size", 12288}, {"conv_bias", 0}, {"conv_L_cache", 3}, {"block_multiple_of", 256},
                  {"block_ffn_dim_multiplier", 1}, {"block_auto_adjust_ff_dim", 1}};
    a.config_rules = lfm2_rules;
    a.source = "transformers/models/lfm2/modeling_lfm2.py";
    t.push_back(a);
  }
  {  // Lfm2MoeDecoderLayer's feed_forward: Lfm2MoeMLP of intermediate_size (no width adjustment)
     // below num_dense_layers, else Lfm2MoeSparseMoeBlock: experts (gate_up_proj [E, 2I, H],
     // down_proj [E, H, I], I = moe_intermediate_size), then gate (Lfm2MoeTopKRouter: weight [E, H];
     // sigmoid scores, top num_experts_per_tok); its expert_bias is a buffer, not a parameter.
     // No PEFT MoE target conversion: _MODEL_TO_CONVERSION_PATTERN has no lfm2_moe entry.
    ArchitectureSpec a;
    a.model_type = "lfm2_moe";
    a.layer = concat({attn, conv, feed_forward("intermediate_size", "dense"),
                      {tensor("feed_forward.experts.gate_up_proj", R::ExpertsGateUp, "num_experts,2*moe_intermediate_size,hidden_size", "moe"),
                       tensor("feed_forward.experts.down_proj", R::ExpertsDown, "num_experts,hidden_size,moe_intermediate_size", "moe"),
                       tensor("feed_forward.gate.weight", R::Router, "num_experts,hidden_size", "moe")},
                      norms});
    a.final_norm = "model.embedding_norm";
    a.mixers = {short_conv};
    // Lfm2MoeConfig has no default layer_types and no full_attn_idxs.
    a.layer_types = LayerTypesRule{"", "", 0, "linear_attention", "full_attention", {"linear_attention", "full_attention"}, "", {}, {}, false};
    a.layer_types.required = true;
    a.mlp_module = "feed_forward";
    a.moe = MoeLayers::FirstKDense;
    a.experts_key = "num_experts";
    a.top_k_key = "num_experts_per_tok";
    a.expert_width = "moe_intermediate_size";
    a.popped_keys = {{"tie_embedding", "tie_word_embeddings"}};
    a.defaults = {{"tie_word_embeddings", 1}, {"intermediate_size", 7168}, {"conv_bias", 0}, {"conv_L_cache", 3}, {"num_dense_layers", 2},
                  {"num_experts_per_tok", 4}, {"num_experts", 32}, {"moe_intermediate_size", 1792}};
    a.config_rules = lfm2_moe_rules;
    a.source = "transformers/models/lfm2_moe/modeling_lfm2_moe.py";
    t.push_back(a);
  }
}

// MiniMax (MiniMaxDecoderLayer, modeling_minimax.py): self_attn is built as MiniMaxAttention first
// and, on a "linear_attention" layer, replaced by MiniMaxLightningAttention: a reassigned module
// keeps its place in _modules, so every layer lists self_attn first, then input_layernorm,
// post_attention_layernorm and Mixtral's sparse block (mlp.gate, mlp.experts). The lightning
// attention registers norm (RMSNorm over heads * head_dim), qkv_proj [3 * heads * head_dim, H],
// out_proj, output_gate [heads * head_dim, H], no biases; its slope and decay tensors are buffers.
// The alpha/beta residual factors are floats. Each parameter is used once per step.
void add_lightning_attention_decoders(std::vector<ArchitectureSpec>& t) {
  const std::string linear_layer = "layer_type=linear_attention";
  const std::string full_layer = "layer_type=full_attention";
  ArchitectureSpec a;
  a.model_type = "minimax";
  std::vector<ModuleSpec> attn = attention("", "");
  for (ModuleSpec& m : attn) m.when = full_layer;
  a.layer = concat({attn,
                    {norm("self_attn.norm", R::MixerOther, kQ, "", linear_layer),
                     linear("self_attn.qkv_proj", R::MixerIn, "hidden_size", "3*" + kQ, "", linear_layer),
                     linear("self_attn.out_proj", R::O, kQ, "hidden_size", "", linear_layer),
                     linear("self_attn.output_gate", R::MixerIn, "hidden_size", kQ, "", linear_layer)},
                    kLlamaNorms,
                    {tensor("mlp.gate.weight", R::Router, "num_local_experts,hidden_size"),
                     tensor("mlp.experts.gate_up_proj", R::ExpertsGateUp, "num_local_experts,2*intermediate_size,hidden_size"),
                     tensor("mlp.experts.down_proj", R::ExpertsDown, "num_local_experts,hidden_size,intermediate_size")}});
  a.mixers = {MixerRule{linear_layer, TokenMixer::LightningAttention, "self_attn", "num_attention_heads", "head_dim", "head_dim",
                        "block_size", "", ""}};
  // MiniMaxConfig.__post_init__: without layer_types, layer i is full attention when (i + 1) % 2
  // is non-zero, so the even layers are attention and the odd ones lightning attention.
  a.layer_types = LayerTypesRule{"", "", 2, "full_attention", "linear_attention", {"linear_attention", "full_attention"}, "", {}, {}, false};
  a.moe = MoeLayers::All;
  a.experts_key = "num_local_experts";
  a.top_k_key = "num_experts_per_tok";
  a.attribute_map = {{"num_experts", "num_local_experts"}};
  a.peft_moe_conversion = "mixtral";  // _MODEL_TO_CONVERSION_PATTERN["minimax"]
  a.expert_width = "intermediate_size";
  a.defaults = {{"tie_word_embeddings", 0}, {"num_local_experts", 8}, {"num_experts_per_tok", 2}, {"block_size", 256}};
  a.source = "transformers/models/minimax/modeling_minimax.py";
  t.push_back(a);
}

// Kimi Linear (KimiLinearDecoderLayer, modeling_kimi_linear.py): self_attn is DeepSeek's MLA
// (KimiLinearAttention, no RoPE on its nope part, the same parameters) on "full_attention" layers
// and Kimi delta attention (KimiLinearDeltaAttention) on the others; then mlp (KimiLinearMoE where
// mlp_layer_types says "sparse", else KimiLinearMLP), input_layernorm, post_attention_layernorm.
// KDA: q/k/v_proj [qkv, H] (qkv = linear_num_heads * linear_head_dim), conv1d (depthwise over 3 qkv,
// no bias), forget_gate (its own dt_bias [qkv] and A_log [1, 1, heads, 1], then f_a_proj [d, H],
// f_b_proj [qkv, d]), b_proj [heads, H], g_a_proj [d, H], g_b_proj [qkv, d], o_norm (gated RMSNorm
// over d), o_proj [H, qkv]; no biases. KimiLinearMoE: experts, gate (weight [E, H];
// e_score_correction_bias is a buffer), shared_experts (an MLP of moe_intermediate_size *
// n_shared_experts). KimiLinearForCausalLM declares no tied weights.
void add_kimi_linear(std::vector<ArchitectureSpec>& t) {
  const std::string linear_layer = "layer_type=linear_attention";
  const std::string full_layer = "layer_type=full_attention";
  const std::string qkv = "linear_num_heads*linear_head_dim";
  ArchitectureSpec a;
  a.model_type = "kimi_linear";
  std::vector<ModuleSpec> mla = mla_attention();
  for (ModuleSpec& m : mla) m.when = m.when.empty() ? full_layer : full_layer + "&" + m.when;
  const std::vector<ModuleSpec> kda = {
      linear("self_attn.q_proj", R::MixerIn, "hidden_size", qkv, "", linear_layer),
      linear("self_attn.k_proj", R::MixerIn, "hidden_size", qkv, "", linear_layer),
      linear("self_attn.v_proj", R::MixerIn, "hidden_size", qkv, "", linear_layer),
      depthwise_conv1d("self_attn.conv1d", "3*" + qkv, "linear_conv_kernel_dim", "", linear_layer),
      tensor("self_attn.forget_gate.dt_bias", R::MixerOther, qkv, linear_layer),
      tensor("self_attn.forget_gate.A_log", R::MixerOther, "1,1,linear_num_heads,1", linear_layer),
      linear("self_attn.forget_gate.f_a_proj", R::MixerIn, "hidden_size", "linear_head_dim", "", linear_layer),
      linear("self_attn.forget_gate.f_b_proj", R::MixerOther, "linear_head_dim", qkv, "", linear_layer),
      linear("self_attn.b_proj", R::MixerIn, "hidden_size", "linear_num_heads", "", linear_layer),
      linear("self_attn.g_a_proj", R::MixerIn, "hidden_size", "linear_head_dim", "", linear_layer),
      linear("self_attn.g_b_proj", R::MixerOther, "linear_head_dim", qkv, "", linear_layer),
      norm("self_attn.o_norm", R::MixerOther, "linear_head_dim", "", linear_layer),
      linear("self_attn.o_proj", R::O, qkv, "hidden_size", "", linear_layer)};
  std::vector<ModuleSpec> shared = swiglu("mlp.shared_experts", "moe_intermediate_size*n_shared_experts", "", "moe");
  for (ModuleSpec& m : shared) m.role = R::MlpOther;
  a.layer = concat({mla, kda, swiglu("mlp", "intermediate_size", "", "dense"),
                    {tensor("mlp.experts.gate_up_proj", R::ExpertsGateUp, "num_local_experts,2*moe_intermediate_size,hidden_size", "moe"),
                     tensor("mlp.experts.down_proj", R::ExpertsDown, "num_local_experts,hidden_size,moe_intermediate_size", "moe"),
                     tensor("mlp.gate.weight", R::Router, "num_local_experts,hidden_size", "moe")},
                    shared, kLlamaNorms});
  // fla's chunk_kda: the gated delta rule of Qwen3-Next's layers with a per-channel decay, the same
  // chunked structure (chunk 64); costed as the gated DeltaNet (token_mixer.h).
  a.mixers = {MixerRule{linear_layer, TokenMixer::GatedDeltaNet, "self_attn", "linear_num_heads", "linear_head_dim", "linear_head_dim",
                        "64", "3*" + qkv, "linear_conv_kernel_dim"}};
  // The default pattern and linear_attn_config's lists are read in model_config.cc
  // (read_hybrid_layer_types); the rule's `every` / `other` name the two types.
  a.layer_types = LayerTypesRule{"", "", 0, "linear_attention", "full_attention", {"linear_attention", "full_attention"}, "", {}, {}, false};
  a.moe = MoeLayers::LayerTypes;
  a.experts_key = "num_local_experts";
  a.top_k_key = "num_experts_per_tok";
  a.expert_width = "moe_intermediate_size";
  a.shared_expert_width = "moe_intermediate_size*n_shared_experts";
  a.never_tied = true;  // KimiLinearForCausalLM._tied_weights_keys = {}
  // KimiLinearConfig.attribute_map (the names Kimi's own config.json uses).
  a.attribute_map = {{"num_experts", "num_local_experts"}, {"num_experts_per_token", "num_experts_per_tok"},
                     {"num_shared_experts", "n_shared_experts"}, {"num_expert_group", "n_group"}};
  a.popped_keys = {{"linear_attn_config.head_dim", "linear_head_dim"}, {"linear_attn_config.num_heads", "linear_num_heads"},
                   {"linear_attn_config.short_conv_kernel_size", "linear_conv_kernel_dim"}};
  a.defaults = {{"tie_word_embeddings", 0}, {"num_local_experts", 256}, {"num_experts_per_tok", 8}, {"n_shared_experts", 1},
                {"moe_intermediate_size", 1024}, {"kv_lora_rank", 512}, {"qk_rope_head_dim", 64}, {"v_head_dim", 128},
                {"qk_nope_head_dim", 128}, {"linear_head_dim", 128}, {"linear_num_heads", 32}, {"linear_conv_kernel_dim", 4},
                {"first_k_dense_replace", 1}, {"attention_bias", 0}};
  a.source = "transformers/models/kimi_linear/modeling_kimi_linear.py";
  t.push_back(a);
}

std::vector<ArchitectureSpec> build_table() {
  std::vector<ArchitectureSpec> t;
  auto add = [&](ArchitectureSpec spec) { t.push_back(std::move(spec)); };
  add_hybrid_decoders(t);
  add_block_hybrid_decoders(t);
  add_parallel_hybrid_decoders(t);
  add_short_conv_decoders(t);
  add_lightning_attention_decoders(t);
  add_kimi_linear(t);

  {  // modeling_llama.py: attention_bias on all four projections, mlp_bias on the MLP.
    ArchitectureSpec a;
    a.model_type = "llama";
    // `qk_norm` is not a LlamaConfig key: hookstream's runtime writes it for its tiny test models
    // (runtime/model_config_json.cc), with Qwen3's q/k norms.
    a.layer = concat({attention("attention_bias", "attention_bias"),
                      {norm("self_attn.q_norm", R::QNorm, "head_dim", "", "qk_norm"),
                       norm("self_attn.k_norm", R::KNorm, "head_dim", "", "qk_norm")},
                      swiglu("mlp", "intermediate_size", "mlp_bias"), kLlamaNorms});
    a.defaults = {{"tie_word_embeddings", 0}};
    a.source = "transformers/models/llama/modeling_llama.py";
    add(a);
    a.model_type = "granite";  // GraniteDecoderLayer: Llama's modules (multipliers change no shape)
    a.source = "transformers/models/granite/modeling_granite.py";
    add(a);
  }
  {  // MistralAttention: no biases (mistral/modeling_mistral.py).
    ArchitectureSpec a;
    a.model_type = "mistral";
    a.layer = concat({attention("", ""), swiglu("mlp", "intermediate_size"), kLlamaNorms});
    a.defaults = {{"tie_word_embeddings", 0}};
    a.source = "transformers/models/mistral/modeling_mistral.py";
    add(a);
  }
  {  // Qwen2Attention: bias=True on q/k/v whatever the config says, none on o_proj.
    ArchitectureSpec a;
    a.model_type = "qwen2";
    // The decoders of Qwen2-VL and Qwen2.5-VL (Qwen2_5_VLTextModel: Qwen2's layer); their vision
    // towers are VisionLayout::Qwen2VL / Qwen25VL (sim/inputs/model_config.h).
    a.aliases = {"qwen2_vl", "qwen2_vl_text", "qwen2_5_vl", "qwen2_5_vl_text"};
    a.layer = concat({attention("1", ""), swiglu("mlp", "intermediate_size"), kLlamaNorms});
    a.defaults = {{"tie_word_embeddings", 0}};
    a.source = "transformers/models/qwen2/modeling_qwen2.py";
    add(a);
  }
  {  // Qwen3Attention: attention_bias on all four, then q_norm/k_norm over head_dim.
    ArchitectureSpec a;
    a.model_type = "qwen3";
    // cosmos3_omni: Qwen3-VL under its own config class (model_config.cc vision_layout_of).
    a.aliases = {"qwen3_vl", "qwen3_vl_text", "cosmos3_omni"};
    a.layer = concat({attention("attention_bias", "attention_bias"), kQkNorm, swiglu("mlp", "intermediate_size"), kLlamaNorms});
    a.defaults = {{"tie_word_embeddings", 0}};
    a.source = "transformers/models/qwen3/modeling_qwen3.py";
    add(a);
  }
  {  // GemmaDecoderLayer: Llama's modules; embeddings tied by default.
    ArchitectureSpec a;
    a.model_type = "gemma";
    a.layer = concat({attention("attention_bias", "attention_bias"), swiglu("mlp", "intermediate_size"), kLlamaNorms});
    a.defaults = {{"tie_word_embeddings", 1}};
    a.source = "transformers/models/gemma/modeling_gemma.py";
    add(a);
  }
  // Gemma 2/3: pre_feedforward_layernorm and post_feedforward_layernorm after the two Llama norms
  // (Gemma2DecoderLayer.__init__); Gemma 3 adds q_norm/k_norm. Sliding-window layers change no shape.
  const std::vector<ModuleSpec> gemma_ff_norms = {norm("pre_feedforward_layernorm", R::PreFeedforwardNorm),
                                                  norm("post_feedforward_layernorm", R::PostFeedforwardNorm)};
  {
    ArchitectureSpec a;
    a.model_type = "gemma2";
    a.layer = concat({attention("attention_bias", "attention_bias"), swiglu("mlp", "intermediate_size"), kLlamaNorms, gemma_ff_norms});
    a.defaults = {{"tie_word_embeddings", 1}};
    a.source = "transformers/models/gemma2/modeling_gemma2.py";
    add(a);
    a.model_type = "gemma3_text";
    a.layer = concat({attention("attention_bias", "attention_bias"), kQkNorm, swiglu("mlp", "intermediate_size"), kLlamaNorms, gemma_ff_norms});
    a.source = "transformers/models/gemma3/modeling_gemma3.py";
    add(a);
  }
  {  // HyperCLOVA X (HyperCLOVAXDecoderLayer): Llama's attention (attention_bias) and MLP (mlp_bias)
     // and norms, then post_norm1 (after attention) and post_norm2 (after the MLP) when use_post_norm
     // (its default), nn.Identity otherwise. Multipliers change no shape.
    ArchitectureSpec a;
    a.model_type = "hyperclovax";
    a.layer = concat({attention("attention_bias", "attention_bias"), swiglu("mlp", "intermediate_size", "mlp_bias"), kLlamaNorms,
                      {norm("post_norm1", R::PostFeedforwardNorm, "hidden_size", "", "use_post_norm"),
                       norm("post_norm2", R::PostFeedforwardNorm, "hidden_size", "", "use_post_norm")}});
    a.defaults = {{"tie_word_embeddings", 0}, {"use_post_norm", 1}};
    a.source = "transformers/models/hyperclovax/modeling_hyperclovax.py";
    add(a);
  }
  {  // DiffLlama (DiffLlamaAttention): Llama's layer; the attention's own lambda_q1, lambda_k1,
     // lambda_q2, lambda_k2 ([head_dim] each) are listed before q/k/v/o (attention_bias); its
     // groupnorm is an RMSNorm without affine parameters.
    ArchitectureSpec a;
    a.model_type = "diffllama";
    a.layer = concat({{tensor("self_attn.lambda_q1", R::AttentionOther, "head_dim"),
                       tensor("self_attn.lambda_k1", R::AttentionOther, "head_dim"),
                       tensor("self_attn.lambda_q2", R::AttentionOther, "head_dim"),
                       tensor("self_attn.lambda_k2", R::AttentionOther, "head_dim")},
                      attention("attention_bias", "attention_bias"), swiglu("mlp", "intermediate_size"), kLlamaNorms});
    a.defaults = {{"tie_word_embeddings", 0}};
    a.source = "transformers/models/diffllama/modeling_diffllama.py";
    add(a);
  }
  {  // Doge (DogeDecoderLayer): the layer's own input_residual and post_attention_residual ([H])
     // first, then input_layernorm, self_attn (its own A [num_key_value_heads], q/k/v_proj, dt_proj
     // (kv width -> num_key_value_heads), o_proj, all attention_bias; q_norm/k_norm over head_dim),
     // post_attention_layernorm, mlp (DogeMLP, mlp_bias). is_moe's DogeCDMoE is not described.
    ArchitectureSpec a;
    a.model_type = "doge";
    std::vector<ModuleSpec> attn = attention("attention_bias", "attention_bias");
    a.layer = concat({{tensor("input_residual", R::AttentionOther, "hidden_size"),
                       tensor("post_attention_residual", R::MlpOther, "hidden_size"),
                       norm("input_layernorm", R::InputNorm),
                       tensor("self_attn.A", R::AttentionOther, "num_key_value_heads")},
                      {attn[0], attn[1], attn[2]},
                      {linear("self_attn.dt_proj", R::AttentionOther, kKV, "num_key_value_heads", "attention_bias"), attn[3]},
                      kQkNorm, {norm("post_attention_layernorm", R::PostAttentionNorm)},
                      swiglu("mlp", "intermediate_size", "mlp_bias")});
    a.unmodelled_flags = {"is_moe"};
    a.defaults = {{"tie_word_embeddings", 0}};
    a.source = "transformers/models/doge/modeling_doge.py";
    add(a);
  }
  {  // Phi3Attention registers o_proj before the fused qkv_proj; Phi3MLP a fused gate_up_proj.
    ArchitectureSpec a;
    a.model_type = "phi3";
    a.layer = {linear("self_attn.o_proj", R::O, kQ, "hidden_size"),
               linear("self_attn.qkv_proj", R::QKV, "hidden_size", kQ + "+2*" + kKV),
               linear("mlp.gate_up_proj", R::GateUp, "hidden_size", "2*intermediate_size"),
               linear("mlp.down_proj", R::Down, "intermediate_size", "hidden_size"),
               kLlamaNorms[0], kLlamaNorms[1]};
    a.defaults = {{"tie_word_embeddings", 0}};
    a.source = "transformers/models/phi3/modeling_phi3.py";
    add(a);
  }
  {  // OLMo: LayerNorm without parameters (OlmoLayerNorm), so only projections have weights.
    ArchitectureSpec a;
    a.model_type = "olmo";
    a.layer = concat({attention("attention_bias", "attention_bias"), swiglu("mlp", "intermediate_size")});
    a.final_norm = "";
    a.defaults = {{"tie_word_embeddings", 0}};
    a.source = "transformers/models/olmo/modeling_olmo.py";
    add(a);
  }
  {  // OLMo-2: q_norm/k_norm over the whole projection, post-norms only (no input_layernorm).
    ArchitectureSpec a;
    a.model_type = "olmo2";
    // OLMo-3 (Olmo3Attention, Olmo3DecoderLayer): the same modules; its sliding-window layers change no shape.
    a.aliases = {"olmo3"};
    a.layer = concat({attention("attention_bias", "attention_bias"),
                      {norm("self_attn.q_norm", R::QNorm, kQ), norm("self_attn.k_norm", R::KNorm, kKV)},
                      swiglu("mlp", "intermediate_size"),
                      {norm("post_attention_layernorm", R::PostAttentionNorm),
                       norm("post_feedforward_layernorm", R::PostFeedforwardNorm)}});
    a.defaults = {{"tie_word_embeddings", 0}};
    a.source = "transformers/models/olmo2/modeling_olmo2.py";
    add(a);
  }
  {  // Starcoder2: use_bias everywhere, a 2-layer MLP (c_fc, c_proj), LayerNorms with bias.
    ArchitectureSpec a;
    a.model_type = "starcoder2";
    a.layer = concat({attention("use_bias", "use_bias"),
                      {linear("mlp.c_fc", R::Up, "hidden_size", "intermediate_size", "use_bias"),
                       linear("mlp.c_proj", R::Down, "intermediate_size", "hidden_size", "use_bias"),
                       norm("input_layernorm", R::InputNorm, "hidden_size", "1"),
                       norm("post_attention_layernorm", R::PostAttentionNorm, "hidden_size", "1")}});
    a.final_norm_bias = "1";
    a.defaults = {{"tie_word_embeddings", 1}, {"use_bias", 1}};
    a.source = "transformers/models/starcoder2/modeling_starcoder2.py";
    add(a);
  }
  {  // Cohere: parallel attention + MLP after one input_layernorm (CohereLayerNorm: weight only);
     // use_qk_norm adds per-head norms of shape [heads, head_dim].
    ArchitectureSpec a;
    a.model_type = "cohere";
    a.layer = concat({attention("attention_bias", "attention_bias"),
                      {norm("self_attn.q_norm", R::QNorm, "num_attention_heads,head_dim", "", "use_qk_norm"),
                       norm("self_attn.k_norm", R::KNorm, "num_key_value_heads,head_dim", "", "use_qk_norm")},
                      swiglu("mlp", "intermediate_size"), {norm("input_layernorm", R::InputNorm)}});
    a.defaults = {{"tie_word_embeddings", 1}};
    a.source = "transformers/models/cohere/modeling_cohere.py";
    add(a);
    // Cohere2DecoderLayer: the same parallel block; Cohere2Attention has no q/k norms (no
    // use_qk_norm key in Cohere2Config). Sliding-window layers change no shape.
    a.model_type = "cohere2";
    a.layer = concat({attention("attention_bias", "attention_bias"), swiglu("mlp", "intermediate_size"),
                      {norm("input_layernorm", R::InputNorm)}});
    a.source = "transformers/models/cohere2/modeling_cohere2.py";
    add(a);
  }
  {  // StableLM: use_qkv_bias on q/k/v, nn.LayerNorm (with bias); use_parallel_residual drops the
     // post_attention_layernorm. qk_layernorm: StableLmLayerNormPerHead, a ModuleList `norms` of one
     // bias-free LayerNorm(head_dim) per query head (q_layernorm) and per key/value head (k_layernorm).
    ArchitectureSpec a;
    a.model_type = "stablelm";
    ModuleSpec q_norms = norm("self_attn.q_layernorm.norms.{i}", R::AttentionOther, "head_dim", "", "qk_layernorm");
    q_norms.repeat = "num_attention_heads";
    ModuleSpec k_norms = norm("self_attn.k_layernorm.norms.{i}", R::AttentionOther, "head_dim", "", "qk_layernorm");
    k_norms.repeat = "num_key_value_heads";
    a.layer = concat({attention("use_qkv_bias", ""), {q_norms, k_norms}, swiglu("mlp", "intermediate_size"),
                      {norm("input_layernorm", R::InputNorm, "hidden_size", "1"),
                       norm("post_attention_layernorm", R::PostAttentionNorm, "hidden_size", "1", "!use_parallel_residual")}});
    a.final_norm_bias = "1";
    a.defaults = {{"tie_word_embeddings", 0}};
    a.source = "transformers/models/stablelm/modeling_stablelm.py";
    add(a);
  }
  {  // Phi (phi-1/1.5/2): biased q/k/v/dense, optional q/k LayerNorms, fc1/fc2 MLP, parallel block with one LayerNorm,
     // final_layernorm, and a biased lm_head.
    ArchitectureSpec a;
    a.model_type = "phi";
    // qk_layernorm: q_layernorm / k_layernorm, nn.LayerNorm(hidden_size // heads) with bias, after
    // dense (PhiAttention.__init__).
    a.layer = {linear("self_attn.q_proj", R::Q, "hidden_size", kQ, "1"),
               linear("self_attn.k_proj", R::K, "hidden_size", kKV, "1"),
               linear("self_attn.v_proj", R::V, "hidden_size", kKV, "1"),
               linear("self_attn.dense", R::O, kQ, "hidden_size", "1"),
               norm("self_attn.q_layernorm", R::AttentionOther, "head_dim", "1", "qk_layernorm"),
               norm("self_attn.k_layernorm", R::AttentionOther, "head_dim", "1", "qk_layernorm"),
               linear("mlp.fc1", R::Up, "hidden_size", "intermediate_size", "1"),
               linear("mlp.fc2", R::Down, "intermediate_size", "hidden_size", "1"),
               norm("input_layernorm", R::InputNorm, "hidden_size", "1")};
    a.final_norm = "model.final_layernorm";
    a.final_norm_bias = "1";
    a.head_bias = "1";
    a.defaults = {{"tie_word_embeddings", 0}};
    a.source = "transformers/models/phi/modeling_phi.py";
    add(a);
  }

  // ---- Gemma 4 (branch arch5): per-layer attention widths (per_layer_config), KV-shared layers,
  // double-wide MLPs, per-layer inputs and an MoE block beside the MLP.
  for (const bool unified : {false, true}) {
    ArchitectureSpec a;
    a.model_type = unified ? "gemma4_unified_text" : "gemma4_text";
    a.composite_types = {unified ? "gemma4_unified" : "gemma4"};
    a.absent_sub_configs = {"vision_config", "audio_config"};
    a.reads_per_layer_config = true;
    a.config_rules = gemma4_config_rules;
    a.layer_rules = gemma4_layer_rules;
    // Gemma4TextAttention: q_proj, q_norm, then (not a KV-shared layer) k_norm, v_norm (no weight:
    // with_scale=False), k_proj, v_proj (absent where attention_k_eq_v and the layer is not
    // sliding: keys are the values), o_proj; all attention_bias. head_dim and num_key_value_heads
    // are the layer's (per_layer_config: full-attention layers take global_head_dim).
    const std::string kv_own = "!kv_shared_layer";
    a.layer = {linear("self_attn.q_proj", R::Q, "hidden_size", kQ, "attention_bias"),
               norm("self_attn.q_norm", R::QNorm, "head_dim"),
               norm("self_attn.k_norm", R::KNorm, "head_dim", "", kv_own),
               linear("self_attn.k_proj", R::K, "hidden_size", kKV, "attention_bias", kv_own),
               linear("self_attn.v_proj", R::V, "hidden_size", kKV, "attention_bias", kv_own + "&!k_eq_v_layer"),
               linear("self_attn.o_proj", R::O, kQ, "hidden_size", "attention_bias")};
    // Gemma4TextMLP: intermediate_size, doubled in KV-shared layers when use_double_wide_mlp.
    a.layer = concat({a.layer, swiglu("mlp", "layer_intermediate_size"), kLlamaNorms,
                      {norm("pre_feedforward_layernorm", R::PreFeedforwardNorm),
                       norm("post_feedforward_layernorm", R::PostFeedforwardNorm)}});
    a.mlp_width = "layer_mlp_width";
    if (!unified) {
      // Gemma4TextDecoderLayer: per-layer inputs (hidden_size_per_layer_input, 0 or null: none)
      // and, with enable_moe_block, Gemma4TextRouter (its own scale [H] and per_expert_scale [E],
      // then proj; its norm has no weight), Gemma4TextExperts ([E, 2 * moe_intermediate_size, H],
      // [E, H, moe_intermediate_size]) and three more norms, beside the dense MLP.
      const std::string ple = "hidden_size_per_layer_input";
      a.layer = concat({a.layer,
                        {linear("per_layer_input_gate", R::MlpOther, "hidden_size", ple, "", ple),
                         linear("per_layer_projection", R::MlpOther, ple, "hidden_size", "", ple),
                         norm("post_per_layer_input_norm", R::MlpOther, "hidden_size", "", ple),
                         tensor("router.scale", R::MlpOther, "hidden_size", "enable_moe_block"),
                         tensor("router.per_expert_scale", R::MlpOther, "num_experts", "enable_moe_block"),
                         linear("router.proj", R::MlpOther, "hidden_size", "num_experts", "", "enable_moe_block"),
                         tensor("experts.gate_up_proj", R::MlpOther, "num_experts,2*moe_intermediate_size,hidden_size", "enable_moe_block"),
                         tensor("experts.down_proj", R::MlpOther, "num_experts,hidden_size,moe_intermediate_size", "enable_moe_block"),
                         norm("post_feedforward_layernorm_1", R::PostFeedforwardNorm, "hidden_size", "", "enable_moe_block"),
                         norm("post_feedforward_layernorm_2", R::PostFeedforwardNorm, "hidden_size", "", "enable_moe_block"),
                         norm("pre_feedforward_layernorm_2", R::PreFeedforwardNorm, "hidden_size", "", "enable_moe_block")}});
      // Gemma4TextModel registers the per-layer embedding, its projection and norm after `norm`;
      // its forward computes every layer's input from them before the first layer.
      a.after_norm = {embedding("model.embed_tokens_per_layer", "vocab_size_per_layer_input,num_hidden_layers*" + ple, ple),
                      linear("model.per_layer_model_projection", R::EmbedOther, "hidden_size", "num_hidden_layers*" + ple, "", ple),
                      norm("model.per_layer_projection_norm", R::EmbedOther, ple, "", ple)};
      a.defaults = {{"tie_word_embeddings", 1}, {"hidden_size_per_layer_input", 256}, {"vocab_size_per_layer_input", 262144},
                    {"global_head_dim", 512}};
      a.source = "transformers/models/gemma4/modeling_gemma4.py";
    } else {
      // Gemma4UnifiedTextConfig has no per-layer inputs and no MoE block.
      a.defaults = {{"tie_word_embeddings", 1}, {"global_head_dim", 512}};
      a.source = "transformers/models/gemma4_unified/modeling_gemma4_unified.py";
    }
    add(a);
  }

  {  // ---- Gemma 3n's decoder (branch arch5; Gemma3nTextDecoderLayer): Gemma 3's attention (q_proj,
     // q_norm, then - not in a KV-shared layer - k_proj, v_proj, k_norm, v_norm without weight,
     // o_proj) and four norms; an MLP of that layer's intermediate_size (one number or a list);
     // AltUp (correct_output_scale [H], correction_coefs n -> n, prediction_coefs n -> n^2,
     // modality_router H -> n, router_norm; n = altup_num_inputs), LAuReL (linear_left H ->
     // laurel_rank, linear_right, post_laurel_norm) and the per-layer input gate, projection and
     // norm. Gemma3nTextModel registers after `norm` the per-layer embedding, its projection and
     // norm, then altup_projections and altup_unembed_projections (n - 1 Linear(H, H) each).
    ArchitectureSpec a;
    a.model_type = "gemma3n_text";
    const std::string kv_own = "!kv_shared_layer";
    const std::string n = "altup_num_inputs";
    const std::string ple = "hidden_size_per_layer_input";
    a.layer = concat({{linear("self_attn.q_proj", R::Q, "hidden_size", kQ, "attention_bias"),
                       norm("self_attn.q_norm", R::QNorm, "head_dim"),
                       linear("self_attn.k_proj", R::K, "hidden_size", kKV, "attention_bias", kv_own),
                       linear("self_attn.v_proj", R::V, "hidden_size", kKV, "attention_bias", kv_own),
                       norm("self_attn.k_norm", R::KNorm, "head_dim", "", kv_own),
                       linear("self_attn.o_proj", R::O, kQ, "hidden_size", "attention_bias")},
                      swiglu("mlp", "intermediate_size"), kLlamaNorms,
                      {norm("pre_feedforward_layernorm", R::PreFeedforwardNorm),
                       norm("post_feedforward_layernorm", R::PostFeedforwardNorm),
                       tensor("altup.correct_output_scale", R::MlpOther, "hidden_size"),
                       linear("altup.correction_coefs", R::MlpOther, n, n),
                       linear("altup.prediction_coefs", R::MlpOther, n, n + "*" + n),
                       linear("altup.modality_router", R::MlpOther, "hidden_size", n),
                       norm("altup.router_norm", R::MlpOther),
                       linear("laurel.linear_left", R::AttentionOther, "hidden_size", "laurel_rank"),
                       linear("laurel.linear_right", R::AttentionOther, "laurel_rank", "hidden_size"),
                       norm("laurel.post_laurel_norm", R::AttentionOther),
                       linear("per_layer_input_gate", R::MlpOther, "hidden_size", ple),
                       linear("per_layer_projection", R::MlpOther, ple, "hidden_size"),
                       norm("post_per_layer_input_norm", R::MlpOther)}});
    ModuleSpec altup_in = linear("model.altup_projections.{i}", R::EmbedOther, "hidden_size", "hidden_size", "", "altup_extra_streams");
    altup_in.repeat = "altup_extra_streams";
    ModuleSpec altup_out = linear("model.altup_unembed_projections.{i}", R::EmbedOther, "hidden_size", "hidden_size", "", "altup_extra_streams");
    altup_out.repeat = "altup_extra_streams";
    a.after_norm = {embedding("model.embed_tokens_per_layer", "vocab_size_per_layer_input,num_hidden_layers*" + ple),
                    linear("model.per_layer_model_projection", R::EmbedOther, "hidden_size", "num_hidden_layers*" + ple),
                    norm("model.per_layer_projection_norm", R::EmbedOther, ple), altup_in, altup_out};
    a.per_layer_lists = {"intermediate_size"};
    a.config_rules = gemma3n_config_rules;
    a.layer_rules = gemma3n_layer_rules;
    a.defaults = {{"tie_word_embeddings", 1}, {"intermediate_size", 16384}, {ple, 256}, {"vocab_size_per_layer_input", 262144}, {n, 4},
                  {"laurel_rank", 64}, {"num_kv_shared_layers", 15}};
    a.source = "transformers/models/gemma3n/modeling_gemma3n.py";
    add(a);
  }

  // ---- GPT-style layouts outside model.layers (transformer.h, gpt_neox.layers, model.decoder.layers):
  // LayerNorms with bias, learned position embeddings, fused or k/v/q-ordered attention, 2-layer MLPs.
  // Their config classes spell the standard keys their own way (attribute_map: n_embd, n_layer, ...).
  const std::map<std::string, std::string> gpt2_keys = {
      {"n_embd", "hidden_size"}, {"n_layer", "num_hidden_layers"}, {"n_head", "num_attention_heads"},
      {"n_positions", "max_position_embeddings"}, {"n_inner", "intermediate_size"}};
  {  // GPT2Model: wte, wpe, h (ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj; all
     // Conv1D with bias), ln_f; lm_head tied by default. inner_dim = n_inner or 4 * n_embd (GPT2Block).
     // add_cross_attention adds crossattention + ln_cross_attn, not described: refused.
    ArchitectureSpec a;
    a.model_type = "gpt2";
    a.embedding_padding_idx = false;  // modeling_gpt2.py: nn.Embedding without padding_idx
    a.layer_class = "GPT2Block";
    a.embed = "transformer.wte";
    a.embed_extras = {embedding("transformer.wpe", "max_position_embeddings,hidden_size")};
    a.layers = "transformer.h";
    a.layer = {norm("ln_1", R::InputNorm, "hidden_size", "1"),
               conv1d("attn.c_attn", R::QKV, "hidden_size", "3*hidden_size"),
               conv1d("attn.c_proj", R::O, "hidden_size", "hidden_size"),
               norm("ln_2", R::PostAttentionNorm, "hidden_size", "1"),
               conv1d("mlp.c_fc", R::Up, "hidden_size", "intermediate_size"),
               conv1d("mlp.c_proj", R::Down, "intermediate_size", "hidden_size")};
    a.final_norm = "transformer.ln_f";
    a.final_norm_bias = "1";
    a.unmodelled_flags = {"add_cross_attention"};
    a.attribute_map = gpt2_keys;
    a.defaults = {{"tie_word_embeddings", 1}, {"max_position_embeddings", 1024}};
    a.derived = {{"intermediate_size", "4*hidden_size"}};
    a.source = "transformers/models/gpt2/modeling_gpt2.py";
    add(a);
    // GPTBigCode: GPT-2's block with nn.Linear instead of Conv1D; multi_query (the default) gives
    // one k/v head: c_attn [hidden + 2 * head_dim, hidden] (GPTBigCodeAttention).
    a.model_type = "gpt_bigcode";
    a.embedding_padding_idx = false;  // modeling_gpt_bigcode.py: nn.Embedding without padding_idx
    a.layer_class = "GPTBigCodeBlock";
    a.layer = {norm("ln_1", R::InputNorm, "hidden_size", "1"),
               linear("attn.c_attn", R::QKV, "hidden_size", "hidden_size+2*head_dim", "1", "multi_query"),
               linear("attn.c_attn", R::QKV, "hidden_size", "3*hidden_size", "1", "!multi_query"),
               linear("attn.c_proj", R::O, "hidden_size", "hidden_size", "1"),
               norm("ln_2", R::PostAttentionNorm, "hidden_size", "1"),
               linear("mlp.c_fc", R::Up, "hidden_size", "intermediate_size", "1"),
               linear("mlp.c_proj", R::Down, "intermediate_size", "hidden_size", "1")};
    a.defaults = {{"tie_word_embeddings", 1}, {"max_position_embeddings", 1024}, {"multi_query", 1}};
    a.source = "transformers/models/gpt_bigcode/modeling_gpt_bigcode.py";
    add(a);
    // GPT-Neo: GPTNeoSelfAttention registers k_proj, v_proj, q_proj (no bias), out_proj (bias)
    // under attn.attention; intermediate_size None -> 4 * hidden_size (GPTNeoBlock).
    a.model_type = "gpt_neo";
    a.embedding_padding_idx = false;  // modeling_gpt_neo.py: nn.Embedding without padding_idx
    a.layer_class = "GPTNeoBlock";
    a.layer = {norm("ln_1", R::InputNorm, "hidden_size", "1"),
               linear("attn.attention.k_proj", R::K, "hidden_size", "hidden_size"),
               linear("attn.attention.v_proj", R::V, "hidden_size", "hidden_size"),
               linear("attn.attention.q_proj", R::Q, "hidden_size", "hidden_size"),
               linear("attn.attention.out_proj", R::O, "hidden_size", "hidden_size", "1"),
               norm("ln_2", R::PostAttentionNorm, "hidden_size", "1"),
               linear("mlp.c_fc", R::Up, "hidden_size", "intermediate_size", "1"),
               linear("mlp.c_proj", R::Down, "intermediate_size", "hidden_size", "1")};
    a.unmodelled_flags = {};
    a.attribute_map = {{"num_heads", "num_attention_heads"}, {"num_layers", "num_hidden_layers"}};
    a.defaults = {{"tie_word_embeddings", 1}, {"max_position_embeddings", 2048}};
    a.source = "transformers/models/gpt_neo/modeling_gpt_neo.py";
    add(a);
  }
  {  // OpenAI GPT (OpenAIGPTModel): tokens_embed, positions_embed, h; a post-norm Block registers attn
     // (c_attn, c_proj: Conv1D), ln_1, mlp (c_fc, c_proj of 4 * n_embd: MLP(4 * nx)), ln_2. No final
     // norm; lm_head tied by default.
    ArchitectureSpec a;
    a.model_type = "openai-gpt";
    a.embedding_padding_idx = false;  // modeling_openai_gpt.py: nn.Embedding without padding_idx
    a.layer_class = "Block";
    a.embed = "transformer.tokens_embed";
    a.embed_extras = {embedding("transformer.positions_embed", "max_position_embeddings,hidden_size")};
    a.layers = "transformer.h";
    a.layer = {conv1d("attn.c_attn", R::QKV, "hidden_size", "3*hidden_size"),
               conv1d("attn.c_proj", R::O, "hidden_size", "hidden_size"),
               norm("ln_1", R::InputNorm, "hidden_size", "1"),
               conv1d("mlp.c_fc", R::Up, "hidden_size", "4*hidden_size"),
               conv1d("mlp.c_proj", R::Down, "4*hidden_size", "hidden_size"),
               norm("ln_2", R::PostAttentionNorm, "hidden_size", "1")};
    a.final_norm = "";
    a.attribute_map = gpt2_keys;
    a.defaults = {{"tie_word_embeddings", 1}, {"max_position_embeddings", 512}};
    a.derived = {{"intermediate_size", "4*hidden_size"}};
    a.source = "transformers/models/openai/modeling_openai.py";
    add(a);
  }
  {  // GPT-J: one ln_1 (parallel attention + MLP), k/v/q/out_proj without bias, fc_in/fc_out with
     // bias, ln_f, and a biased lm_head (GPTJForCausalLM). CodeGen: the same with a fused qkv_proj.
    ArchitectureSpec a;
    a.model_type = "gptj";
    a.embedding_padding_idx = false;  // modeling_gptj.py: nn.Embedding without padding_idx
    a.layer_class = "GPTJBlock";
    a.embed = "transformer.wte";
    a.layers = "transformer.h";
    const std::vector<ModuleSpec> mlp = {linear("mlp.fc_in", R::Up, "hidden_size", "intermediate_size", "1"),
                                         linear("mlp.fc_out", R::Down, "intermediate_size", "hidden_size", "1")};
    a.layer = concat({{norm("ln_1", R::InputNorm, "hidden_size", "1"),
                       linear("attn.k_proj", R::K, "hidden_size", "hidden_size"),
                       linear("attn.v_proj", R::V, "hidden_size", "hidden_size"),
                       linear("attn.q_proj", R::Q, "hidden_size", "hidden_size"),
                       linear("attn.out_proj", R::O, "hidden_size", "hidden_size")},
                      mlp});
    a.final_norm = "transformer.ln_f";
    a.final_norm_bias = "1";
    a.head_bias = "1";
    a.attribute_map = gpt2_keys;
    a.defaults = {{"tie_word_embeddings", 0}};
    a.derived = {{"intermediate_size", "4*hidden_size"}};
    a.source = "transformers/models/gptj/modeling_gptj.py";
    add(a);
    a.model_type = "codegen";
    a.embedding_padding_idx = false;  // modeling_codegen.py: nn.Embedding without padding_idx
    a.layer_class = "CodeGenBlock";
    a.layer = concat({{norm("ln_1", R::InputNorm, "hidden_size", "1"),
                       linear("attn.qkv_proj", R::QKV, "hidden_size", "3*hidden_size"),
                       linear("attn.out_proj", R::O, "hidden_size", "hidden_size")},
                      mlp});
    a.source = "transformers/models/codegen/modeling_codegen.py";
    add(a);
  }
  {  // GPT-NeoX: both LayerNorms first, then attention.query_key_value / attention.dense
     // (attention_bias, default true) and mlp.dense_h_to_4h / dense_4h_to_h (always biased);
     // use_parallel_residual changes no parameter (GPTNeoXLayer).
    ArchitectureSpec a;
    a.model_type = "gpt_neox";
    a.embedding_padding_idx = false;  // modeling_gpt_neox.py: nn.Embedding without padding_idx
    a.layer_class = "GPTNeoXLayer";
    a.embed = "gpt_neox.embed_in";
    a.layers = "gpt_neox.layers";
    a.layer = {norm("input_layernorm", R::InputNorm, "hidden_size", "1"),
               norm("post_attention_layernorm", R::PostAttentionNorm, "hidden_size", "1"),
               linear("attention.query_key_value", R::QKV, "hidden_size", "3*hidden_size", "attention_bias"),
               linear("attention.dense", R::O, "hidden_size", "hidden_size", "attention_bias"),
               linear("mlp.dense_h_to_4h", R::Up, "hidden_size", "intermediate_size", "1"),
               linear("mlp.dense_4h_to_h", R::Down, "intermediate_size", "hidden_size", "1")};
    a.final_norm = "gpt_neox.final_layer_norm";
    a.final_norm_bias = "1";
    a.defaults = {{"tie_word_embeddings", 0}, {"attention_bias", 1}};
    a.source = "transformers/models/gpt_neox/modeling_gpt_neox.py";
    add(a);
  }
  {  // GPT-NeoX-Japanese: GPT-NeoX's norms-first layer without biases on its Linears; the last layer's
     // attention has a bare dense_bias [hidden] (its own parameter, so before query_key_value); the MLP
     // is hidden * intermediate_multiple_size wide; the head embed_out is tied by default.
    ArchitectureSpec a;
    a.model_type = "gpt_neox_japanese";
    a.embedding_padding_idx = false;  // modeling_gpt_neox_japanese.py: nn.Embedding without padding_idx
    a.layer_class = "GPTNeoXJapaneseLayer";
    a.embed = "gpt_neox_japanese.embed_in";
    a.layers = "gpt_neox_japanese.layers";
    a.layer = {norm("input_layernorm", R::InputNorm, "hidden_size", "1"),
               norm("post_attention_layernorm", R::PostAttentionNorm, "hidden_size", "1"),
               tensor("attention.dense_bias", R::AttentionOther, "hidden_size", "last_layer"),
               linear("attention.query_key_value", R::QKV, "hidden_size", "3*hidden_size"),
               linear("attention.dense", R::O, "hidden_size", "hidden_size"),
               linear("mlp.dense_h_to_4h", R::Up, "hidden_size", "intermediate_size"),
               linear("mlp.dense_4h_to_h", R::Down, "intermediate_size", "hidden_size")};
    a.final_norm = "gpt_neox_japanese.final_layer_norm";
    a.final_norm_bias = "1";
    a.head = "embed_out";
    a.defaults = {{"tie_word_embeddings", 1}, {"intermediate_multiple_size", 4}};
    a.derived = {{"intermediate_size", "intermediate_multiple_size*hidden_size"}};
    a.source = "transformers/models/gpt_neox_japanese/modeling_gpt_neox_japanese.py";
    add(a);
  }
  {  // Falcon (FalconAttention, FalconDecoderLayer): query_key_value is
     // [(2 * num_kv_heads + heads) * head_dim] with new_decoder_architecture, [hidden + 2 * head_dim]
     // with multi_query, else [3 * hidden]; `bias` on every Linear. Norms after the MLP: without
     // parallel_attn post_attention_layernorm then input_layernorm; with it ln_attn + ln_mlp when
     // num_ln_in_parallel_attn is 2 (None counts as 2 under new_decoder_architecture), else one
     // input_layernorm. ALiBi has no parameter.
    ArchitectureSpec a;
    a.model_type = "falcon";
    a.embedding_padding_idx = false;  // modeling_falcon.py: nn.Embedding without padding_idx
    a.embed = "transformer.word_embeddings";
    a.layers = "transformer.h";
    const std::string two = "parallel_attn&num_ln_in_parallel_attn==2|parallel_attn&new_decoder_architecture&!num_ln_in_parallel_attn";
    const std::string one = "!parallel_attn|parallel_attn&num_ln_in_parallel_attn!=2&!new_decoder_architecture|"
                            "parallel_attn&num_ln_in_parallel_attn!=2&num_ln_in_parallel_attn";
    a.layer = {linear("self_attention.query_key_value", R::QKV, "hidden_size",
                      "num_attention_heads*head_dim+2*num_kv_heads*head_dim", "bias", "new_decoder_architecture"),
               linear("self_attention.query_key_value", R::QKV, "hidden_size", "hidden_size+2*head_dim", "bias",
                      "!new_decoder_architecture&multi_query"),
               linear("self_attention.query_key_value", R::QKV, "hidden_size", "3*hidden_size", "bias",
                      "!new_decoder_architecture&!multi_query"),
               linear("self_attention.dense", R::O, "hidden_size", "hidden_size", "bias"),
               linear("mlp.dense_h_to_4h", R::Up, "hidden_size", "ffn_hidden_size", "bias"),
               linear("mlp.dense_4h_to_h", R::Down, "ffn_hidden_size", "hidden_size", "bias"),
               norm("post_attention_layernorm", R::PostAttentionNorm, "hidden_size", "1", "!parallel_attn"),
               norm("input_layernorm", R::InputNorm, "hidden_size", "1", one),
               norm("ln_attn", R::InputNorm, "hidden_size", "1", two),
               norm("ln_mlp", R::PostAttentionNorm, "hidden_size", "1", two)};
    a.final_norm = "transformer.ln_f";
    a.final_norm_bias = "1";
    a.attribute_map = {{"n_embed", "hidden_size"}};  // FalconConfig.__post_init__: n_embed kwarg
    a.defaults = {{"tie_word_embeddings", 1}, {"parallel_attn", 1}, {"multi_query", 1}};
    a.derived = {{"num_kv_heads", "num_attention_heads"}, {"ffn_hidden_size", "4*hidden_size"},
                 {"intermediate_size", "ffn_hidden_size"}};
    a.source = "transformers/models/falcon/modeling_falcon.py";
    add(a);
  }
  {  // BLOOM: word_embeddings_layernorm after the embedding; query_key_value [3 * hidden] and an MLP
     // of 4 * hidden (BloomMLP hard-codes it), every Linear and LayerNorm biased (BloomBlock).
    ArchitectureSpec a;
    a.model_type = "bloom";
    a.embedding_padding_idx = false;  // modeling_bloom.py: nn.Embedding without padding_idx
    a.layer_class = "BloomBlock";
    a.embed = "transformer.word_embeddings";
    a.embed_extras = {norm("transformer.word_embeddings_layernorm", R::EmbedOther, "hidden_size", "1")};
    a.layers = "transformer.h";
    a.layer = {norm("input_layernorm", R::InputNorm, "hidden_size", "1"),
               linear("self_attention.query_key_value", R::QKV, "hidden_size", "3*hidden_size", "1"),
               linear("self_attention.dense", R::O, "hidden_size", "hidden_size", "1"),
               norm("post_attention_layernorm", R::PostAttentionNorm, "hidden_size", "1"),
               linear("mlp.dense_h_to_4h", R::Up, "hidden_size", "4*hidden_size", "1"),
               linear("mlp.dense_4h_to_h", R::Down, "4*hidden_size", "hidden_size", "1")};
    a.final_norm = "transformer.ln_f";
    a.final_norm_bias = "1";
    a.attribute_map = {{"n_layer", "num_hidden_layers"}, {"n_head", "num_attention_heads"}, {"n_embed", "hidden_size"}};
    a.defaults = {{"tie_word_embeddings", 1}};
    a.derived = {{"intermediate_size", "4*hidden_size"}};
    a.source = "transformers/models/bloom/modeling_bloom.py";
    add(a);
  }
  {  // MPT: blocks (norm_1, attn.Wqkv, attn.out_proj, norm_2, ffn.up_proj, ffn.down_proj), no
     // biases anywhere (MptBlock sets the LayerNorms' bias to None; MptMLP hard-codes 4 * hidden).
    ArchitectureSpec a;
    a.model_type = "mpt";
    a.embedding_padding_idx = false;  // modeling_mpt.py: nn.Embedding without padding_idx
    a.layer_class = "MptBlock";
    a.embed = "transformer.wte";
    a.layers = "transformer.blocks";
    a.layer = {norm("norm_1", R::InputNorm),
               linear("attn.Wqkv", R::QKV, "hidden_size", "3*hidden_size"),
               linear("attn.out_proj", R::O, "hidden_size", "hidden_size"),
               norm("norm_2", R::PostAttentionNorm),
               linear("ffn.up_proj", R::Up, "hidden_size", "4*hidden_size"),
               linear("ffn.down_proj", R::Down, "4*hidden_size", "hidden_size")};
    a.final_norm = "transformer.norm_f";
    a.attribute_map = {{"d_model", "hidden_size"}, {"n_heads", "num_attention_heads"}, {"n_layers", "num_hidden_layers"}};
    a.defaults = {{"tie_word_embeddings", 1}};
    a.derived = {{"intermediate_size", "4*hidden_size"}};
    a.source = "transformers/models/mpt/modeling_mpt.py";
    add(a);
  }
  // The fairseq-style decoder layer of OPT, BioGPT and XGLM: self_attn.k_proj, v_proj, q_proj,
  // out_proj, self_attn_layer_norm, fc1, fc2, final_layer_norm (OPTDecoderLayer, BioGptDecoderLayer,
  // XGLMDecoderLayer). `bias`/`affine` are OPT's enable_bias / layer_norm_elementwise_affine.
  const auto fairseq_layer = [](const std::string& bias, const std::string& affine) {
    return std::vector<ModuleSpec>{
        linear("self_attn.k_proj", R::K, "hidden_size", "hidden_size", bias),
        linear("self_attn.v_proj", R::V, "hidden_size", "hidden_size", bias),
        linear("self_attn.q_proj", R::Q, "hidden_size", "hidden_size", bias),
        linear("self_attn.out_proj", R::O, "hidden_size", "hidden_size", bias),
        norm("self_attn_layer_norm", R::InputNorm, "hidden_size", "1", affine),
        linear("fc1", R::Up, "hidden_size", "intermediate_size", bias),
        linear("fc2", R::Down, "intermediate_size", "hidden_size", bias),
        norm("final_layer_norm", R::PostAttentionNorm, "hidden_size", "1", affine)};
  };
  {  // OPT: OPTDecoder registers embed_tokens [vocab, word_embed_proj_dim], embed_positions
     // (max_position_embeddings + 2 rows: OPTLearnedPositionalEmbedding's offset), project_out and
     // project_in when word_embed_proj_dim != hidden_size, final_layer_norm when do_layer_norm_before
     // and not _remove_final_layer_norm - all before the layers. lm_head is [vocab, word_embed_proj_dim].
    ArchitectureSpec a;
    a.model_type = "opt";
    a.embed = "model.decoder.embed_tokens";
    a.embed_width = "word_embed_proj_dim";
    const std::string projected = "word_embed_proj_dim!=hidden_size";
    a.embed_extras = {embedding("model.decoder.embed_positions", "max_position_embeddings+2,hidden_size"),
                      linear("model.decoder.project_out", R::EmbedOther, "hidden_size", "word_embed_proj_dim", "", projected),
                      linear("model.decoder.project_in", R::EmbedOther, "word_embed_proj_dim", "hidden_size", "", projected),
                      norm("model.decoder.final_layer_norm", R::FinalNorm, "hidden_size", "1",
                           "do_layer_norm_before&!_remove_final_layer_norm&layer_norm_elementwise_affine")};
    a.layers = "model.decoder.layers";
    a.layer = fairseq_layer("enable_bias", "layer_norm_elementwise_affine");
    a.final_norm = "";
    a.attribute_map = {{"ffn_dim", "intermediate_size"}};
    a.defaults = {{"tie_word_embeddings", 1}, {"enable_bias", 1}, {"do_layer_norm_before", 1},
                  {"layer_norm_elementwise_affine", 1}, {"max_position_embeddings", 2048}};
    a.derived = {{"word_embed_proj_dim", "hidden_size"}};
    a.source = "transformers/models/opt/modeling_opt.py";
    add(a);
    // BioGPT: the same layer with biases, embed_positions (offset 2) after embed_tokens, a final
    // layer_norm after the layers, and the head named output_projection (BioGptForCausalLM).
    a.model_type = "biogpt";
    a.embed = "biogpt.embed_tokens";
    a.embed_width = "hidden_size";
    a.embed_extras = {embedding("biogpt.embed_positions", "max_position_embeddings+2,hidden_size")};
    a.layers = "biogpt.layers";
    a.layer = fairseq_layer("1", "");
    a.final_norm = "biogpt.layer_norm";
    a.final_norm_bias = "1";
    a.head = "output_projection";
    a.attribute_map = {};
    a.defaults = {{"tie_word_embeddings", 1}, {"max_position_embeddings", 1024}};
    a.derived = {};
    a.source = "transformers/models/biogpt/modeling_biogpt.py";
    add(a);
    // XGLM: sinusoidal positions (a buffer), the same layer with biases, model.layer_norm.
    a.model_type = "xglm";
    a.embed = "model.embed_tokens";
    a.embed_extras = {};
    a.layers = "model.layers";
    a.final_norm = "model.layer_norm";
    a.head = "lm_head";
    a.unmodelled_flags = {"add_cross_attention"};
    a.attribute_map = {{"d_model", "hidden_size"}, {"attention_heads", "num_attention_heads"},
                       {"num_layers", "num_hidden_layers"}, {"ffn_dim", "intermediate_size"}};
    a.defaults = {{"tie_word_embeddings", 1}};
    a.source = "transformers/models/xglm/modeling_xglm.py";
    add(a);
  }
  {  // CTRL: w (the embedding; positions are a sinusoidal buffer), h (multi_head_attention.Wq/Wk/Wv/
     // dense, ffn = Sequential(Linear, ReLU, Linear), layernorm1, layernorm2; all biased), layernorm;
     // lm_head tied with a bias of its own (CTRLLMHeadModel: nn.Linear(n_embd, vocab, bias=True)).
    ArchitectureSpec a;
    a.model_type = "ctrl";
    a.embedding_padding_idx = false;  // modeling_ctrl.py: nn.Embedding without padding_idx
    a.layer_class = "EncoderLayer";
    a.embed = "transformer.w";
    a.layers = "transformer.h";
    a.layer = {linear("multi_head_attention.Wq", R::Q, "hidden_size", "hidden_size", "1"),
               linear("multi_head_attention.Wk", R::K, "hidden_size", "hidden_size", "1"),
               linear("multi_head_attention.Wv", R::V, "hidden_size", "hidden_size", "1"),
               linear("multi_head_attention.dense", R::O, "hidden_size", "hidden_size", "1"),
               linear("ffn.0", R::Up, "hidden_size", "intermediate_size", "1"),
               linear("ffn.2", R::Down, "intermediate_size", "hidden_size", "1"),
               norm("layernorm1", R::InputNorm, "hidden_size", "1"),
               norm("layernorm2", R::PostAttentionNorm, "hidden_size", "1")};
    a.final_norm = "transformer.layernorm";
    a.final_norm_bias = "1";
    a.head_bias = "1";
    a.attribute_map = {{"n_embd", "hidden_size"}, {"n_layer", "num_hidden_layers"}, {"n_head", "num_attention_heads"},
                       {"dff", "intermediate_size"}};
    a.defaults = {{"tie_word_embeddings", 1}};
    a.source = "transformers/models/ctrl/modeling_ctrl.py";
    add(a);
  }
  {  // Persimmon: query_key_value [3 * hidden] and dense (biased), per-head q/k LayerNorms over
     // head_dim (with bias) when qk_layernorm, then the MLP and both LayerNorms (PersimmonDecoderLayer).
    ArchitectureSpec a;
    a.model_type = "persimmon";
    a.layer = {linear("self_attn.query_key_value", R::QKV, "hidden_size", "3*hidden_size", "1"),
               linear("self_attn.dense", R::O, "hidden_size", "hidden_size", "1"),
               norm("self_attn.q_layernorm", R::AttentionOther, "head_dim", "1", "qk_layernorm"),
               norm("self_attn.k_layernorm", R::AttentionOther, "head_dim", "1", "qk_layernorm"),
               linear("mlp.dense_h_to_4h", R::Up, "hidden_size", "intermediate_size", "1"),
               linear("mlp.dense_4h_to_h", R::Down, "intermediate_size", "hidden_size", "1"),
               norm("input_layernorm", R::InputNorm, "hidden_size", "1"),
               norm("post_attention_layernorm", R::PostAttentionNorm, "hidden_size", "1")};
    a.final_norm = "model.final_layernorm";
    a.final_norm_bias = "1";
    a.defaults = {{"tie_word_embeddings", 0}, {"qk_layernorm", 1}};
    a.source = "transformers/models/persimmon/modeling_persimmon.py";
    add(a);
  }

  {  // Llama's layout under other names: no biases on attention (Ministral3Attention,
     // CwmAttention: bias=False), mlp_bias on the MLP (CwmMLP) where the config has it.
    ArchitectureSpec a;
    a.layer = concat({attention("", ""), swiglu("mlp", "intermediate_size", "mlp_bias"), kLlamaNorms});
    a.defaults = {{"tie_word_embeddings", 0}};
    for (const char* type : {"ministral3", "cwm"}) {
      a.model_type = type;
      a.source = std::string("transformers/models/") + type + "/modeling_" + type + ".py";
      add(a);
    }
    // SmolLM3Attention / SmolLM3MLP: attention_bias on all four, mlp_bias; tied by default
    // (SmolLM3Config). Its NoPE layers (no_rope_layer_interval) change no shape.
    a.model_type = "smollm3";
    a.layer = concat({attention("attention_bias", "attention_bias"), swiglu("mlp", "intermediate_size", "mlp_bias"), kLlamaNorms});
    a.defaults = {{"tie_word_embeddings", 1}};
    a.source = "transformers/models/smollm3/modeling_smollm3.py";
    add(a);
    // Ernie4_5Attention / Ernie4_5MLP: use_bias on every projection; tied by default (Ernie4_5Config).
    a.model_type = "ernie4_5";
    a.layer = concat({attention("use_bias", "use_bias"), swiglu("mlp", "intermediate_size", "use_bias"), kLlamaNorms});
    a.source = "transformers/models/ernie4_5/modeling_ernie4_5.py";
    add(a);
    // SeedOssAttention: attention_bias on q/k/v, attention_out_bias on o_proj (both config keys,
    // SeedOssConfig defaults true / false); SeedOssMLP: mlp_bias.
    a.model_type = "seed_oss";
    a.layer = concat({attention("attention_bias", "attention_out_bias"), swiglu("mlp", "intermediate_size", "mlp_bias"), kLlamaNorms});
    a.defaults = {{"tie_word_embeddings", 0}, {"attention_bias", 1}};
    a.source = "transformers/models/seed_oss/modeling_seed_oss.py";
    add(a);
  }
  {  // HeliumAttention: attention_bias on q/k/v; o_proj is Linear(hidden_size, hidden_size, bias=False)
     // whatever head_dim is.
    ArchitectureSpec a;
    a.model_type = "helium";
    a.layer = concat({{linear("self_attn.q_proj", R::Q, "hidden_size", kQ, "attention_bias"),
                       linear("self_attn.k_proj", R::K, "hidden_size", kKV, "attention_bias"),
                       linear("self_attn.v_proj", R::V, "hidden_size", kKV, "attention_bias"),
                       linear("self_attn.o_proj", R::O, "hidden_size", "hidden_size")},
                      swiglu("mlp", "intermediate_size", "mlp_bias"), kLlamaNorms});
    a.defaults = {{"tie_word_embeddings", 0}};
    a.source = "transformers/models/helium/modeling_helium.py";
    add(a);
  }
  {  // Granite SWA: Granite's layer with attention sinks, a bare parameter [heads] of self_attn
     // (registered after o_proj, listed first: a module's own parameters precede its children's);
     // tied by default (GraniteSWAConfig). Sliding-window layers change no shape.
    ArchitectureSpec a;
    a.model_type = "granite_swa";
    a.layer = concat({{tensor("self_attn.sinks", R::AttentionOther, "num_attention_heads")},
                      attention("attention_bias", "attention_bias"), swiglu("mlp", "intermediate_size", "mlp_bias"), kLlamaNorms});
    a.defaults = {{"tie_word_embeddings", 1}};
    a.source = "transformers/models/granite_swa/modeling_granite_swa.py";
    add(a);
  }
  {  // Apertus: q/k norms over head_dim (ApertusAttention), a 2-layer MLP whose xIELU activation has
     // two parameters of shape [1] (ApertusMLP: act_fn = XIELUActivation when hidden_act is "xielu",
     // transformers/activations.py), and the pre-norms named attention_layernorm/feedforward_layernorm.
    ArchitectureSpec a;
    a.model_type = "apertus";
    a.layer = concat({attention("attention_bias", "attention_bias"), kQkNorm,
                      {linear("mlp.up_proj", R::Up, "hidden_size", "intermediate_size"),
                       linear("mlp.down_proj", R::Down, "intermediate_size", "hidden_size"),
                       tensor("mlp.act_fn.alpha_p", R::MlpOther, "1", "hidden_act=xielu"),
                       tensor("mlp.act_fn.alpha_n", R::MlpOther, "1", "hidden_act=xielu"),
                       norm("attention_layernorm", R::InputNorm), norm("feedforward_layernorm", R::PostAttentionNorm)}});
    a.defaults = {{"tie_word_embeddings", 0}};
    a.source = "transformers/models/apertus/modeling_apertus.py";
    add(a);
  }
  {  // ArceeMLP: up_proj and down_proj only (ReLU^2, no gate), mlp_bias; Llama attention.
    ArchitectureSpec a;
    a.model_type = "arcee";
    a.layer = concat({attention("attention_bias", "attention_bias"),
                      {linear("mlp.up_proj", R::Up, "hidden_size", "intermediate_size", "mlp_bias"),
                       linear("mlp.down_proj", R::Down, "intermediate_size", "hidden_size", "mlp_bias")},
                      kLlamaNorms});
    a.defaults = {{"tie_word_embeddings", 0}};
    a.source = "transformers/models/arcee/modeling_arcee.py";
    add(a);
  }
  {  // GLM: attention_bias on q/k/v only (GlmAttention o_proj bias=False), a fused gate_up_proj
     // (GlmMLP, like Phi-3's). GLM-4 adds post_self_attn_layernorm and post_mlp_layernorm after the
     // two Llama norms (Glm4DecoderLayer.__init__).
    ArchitectureSpec a;
    a.model_type = "glm";
    const std::vector<ModuleSpec> glm_mlp = {linear("mlp.gate_up_proj", R::GateUp, "hidden_size", "2*intermediate_size"),
                                             linear("mlp.down_proj", R::Down, "intermediate_size", "hidden_size")};
    a.layer = concat({attention("attention_bias", ""), glm_mlp, kLlamaNorms});
    a.defaults = {{"tie_word_embeddings", 0}, {"attention_bias", 1}};
    a.source = "transformers/models/glm/modeling_glm.py";
    add(a);
    a.model_type = "glm4";
    a.layer = concat({attention("attention_bias", ""), glm_mlp, kLlamaNorms,
                      {norm("post_self_attn_layernorm", R::PostFeedforwardNorm),
                       norm("post_mlp_layernorm", R::PostFeedforwardNorm)}});
    a.source = "transformers/models/glm4/modeling_glm4.py";
    add(a);
    // GLM-4V's decoder (Glm4vTextDecoderLayer, modeling_glm4v.py): GLM-4's layer with q/k/v biases
    // always (Glm4vTextAttention: bias=True; Glm4vTextConfig has no attention_bias).
    a.model_type = "glm4v_text";
    a.layer = concat({attention("1", ""), glm_mlp, kLlamaNorms,
                      {norm("post_self_attn_layernorm", R::PostFeedforwardNorm),
                       norm("post_mlp_layernorm", R::PostFeedforwardNorm)}});
    a.layer_class = "Glm4vTextDecoderLayer";
    a.source = "transformers/models/glm4v/modeling_glm4v.py";
    add(a);
  }
  {  // VaultGemmaDecoderLayer: input_layernorm and pre_feedforward_layernorm only; tied by default.
    ArchitectureSpec a;
    a.model_type = "vaultgemma";
    a.layer = concat({attention("attention_bias", "attention_bias"), swiglu("mlp", "intermediate_size"),
                      {norm("input_layernorm", R::InputNorm), norm("pre_feedforward_layernorm", R::PreFeedforwardNorm)}});
    a.defaults = {{"tie_word_embeddings", 1}};
    a.source = "transformers/models/vaultgemma/modeling_vaultgemma.py";
    add(a);
  }
  {  // EXAONE 4: Olmo-2's post-norm layout with per-head q/k norms over head_dim (Exaone4Attention,
     // Exaone4DecoderLayer); no biases.
    ArchitectureSpec a;
    a.model_type = "exaone4";
    a.layer = concat({attention("", ""), kQkNorm, swiglu("mlp", "intermediate_size"),
                      {norm("post_attention_layernorm", R::PostAttentionNorm),
                       norm("post_feedforward_layernorm", R::PostFeedforwardNorm)}});
    a.defaults = {{"tie_word_embeddings", 0}};
    a.source = "transformers/models/exaone4/modeling_exaone4.py";
    add(a);
  }
  {  // Dense models with DeepSeek's latent attention: MiniCPM3 (MiniCPM3MLP: mlp_bias) and Youtu;
     // both tied by default, q_lora_rank set unless the file says null.
    ArchitectureSpec a;
    a.model_type = "minicpm3";
    a.layer = concat({mla_attention(), swiglu("mlp", "intermediate_size", "mlp_bias"), kLlamaNorms});
    a.defaults = {{"tie_word_embeddings", 1}, {"q_lora_rank", 768}};
    a.source = "transformers/models/minicpm3/modeling_minicpm3.py";
    add(a);
    a.model_type = "youtu";
    a.layer = concat({mla_attention(), swiglu("mlp", "intermediate_size"), kLlamaNorms});
    a.defaults = {{"tie_word_embeddings", 1}, {"q_lora_rank", 1536}};
    a.source = "transformers/models/youtu/modeling_youtu.py";
    add(a);
  }
  {  // BitNet: attn_sub_norm (hidden) after o_proj, ffn_sub_norm (intermediate) after down_proj
     // (BitNetAttention, BitNetMLP); the ternary weights are stored as ordinary bf16 parameters.
    ArchitectureSpec a;
    a.model_type = "bitnet";
    a.layer = concat({attention("attention_bias", "attention_bias"), {norm("self_attn.attn_sub_norm", R::AttentionOther)},
                      swiglu("mlp", "intermediate_size"), {norm("mlp.ffn_sub_norm", R::MlpOther, "intermediate_size")},
                      kLlamaNorms});
    a.defaults = {{"tie_word_embeddings", 0}};
    a.source = "transformers/models/bitnet/modeling_bitnet.py";
    add(a);
  }
  {  // Jais2: attention_bias on all four projections, a 2-layer MLP (up_proj, down_proj) with
     // mlp_bias, nn.LayerNorm (with bias) everywhere; Jais2Config defaults both biases on.
    ArchitectureSpec a;
    a.model_type = "jais2";
    a.layer = concat({attention("attention_bias", "attention_bias"),
                      {linear("mlp.up_proj", R::Up, "hidden_size", "intermediate_size", "mlp_bias"),
                       linear("mlp.down_proj", R::Down, "intermediate_size", "hidden_size", "mlp_bias"),
                       norm("input_layernorm", R::InputNorm, "hidden_size", "1"),
                       norm("post_attention_layernorm", R::PostAttentionNorm, "hidden_size", "1")}});
    a.final_norm_bias = "1";
    a.defaults = {{"tie_word_embeddings", 0}, {"attention_bias", 1}, {"mlp_bias", 1}};
    a.source = "transformers/models/jais2/modeling_jais2.py";
    add(a);
  }
  {  // Cosmos3EdgeTextDecoderLayer (transformers/models/cosmos3_edge/modular_cosmos3_edge.py; branch
     // arch13), the decoder of cosmos3_edge: LlamaDecoderLayer with Cosmos3EdgeTextMLP, a CLIPMLP
     // (fc1, relu2, fc2) with bias=mlp_bias; LlamaAttention (attention_bias on all four); Llama's norms.
    ArchitectureSpec a;
    a.model_type = "cosmos3_edge_text";
    a.layer = concat({attention("attention_bias", "attention_bias"),
                      {linear("mlp.fc1", R::Up, "hidden_size", "intermediate_size", "mlp_bias"),
                       linear("mlp.fc2", R::Down, "intermediate_size", "hidden_size", "mlp_bias")},
                      kLlamaNorms});
    a.defaults = {{"tie_word_embeddings", 0}};
    a.source = "transformers/models/cosmos3_edge/modular_cosmos3_edge.py";
    add(a);
  }
  {  // NanoChat: its RMSNorms have no weight (NanoChatRMSNorm), so only the projections, a 2-layer
     // MLP (fc1, fc2, no bias) and the untied head are parameters.
    ArchitectureSpec a;
    a.model_type = "nanochat";
    a.layer = concat({attention("attention_bias", "attention_bias"),
                      {linear("mlp.fc1", R::Up, "hidden_size", "intermediate_size"),
                       linear("mlp.fc2", R::Down, "intermediate_size", "hidden_size")}});
    a.final_norm = "";
    a.defaults = {{"tie_word_embeddings", 0}};
    a.source = "transformers/models/nanochat/modeling_nanochat.py";
    add(a);
  }
  // ---- Mixture of experts: transformers 5 stores each layer's experts as fused [E, ...] tensors
  // (one nn.Parameter per projection, e.g. MixtralExperts.gate_up_proj [E, 2I, H]); the router is a
  // *TopKRouter module holding a bare weight [E, H].
  {
    ArchitectureSpec a;
    a.model_type = "mixtral";
    a.layer = concat({attention("", ""),
                      {tensor("mlp.gate.weight", R::Router, "num_local_experts,hidden_size"),
                       tensor("mlp.experts.gate_up_proj", R::ExpertsGateUp, "num_local_experts,2*intermediate_size,hidden_size"),
                       tensor("mlp.experts.down_proj", R::ExpertsDown, "num_local_experts,hidden_size,intermediate_size")},
                      kLlamaNorms});
    a.moe = MoeLayers::All;
    a.experts_key = "num_local_experts";
    a.top_k_key = "num_experts_per_tok";
    a.attribute_map = {{"num_experts", "num_local_experts"}};
    a.peft_moe_conversion = "mixtral";
    a.expert_width = "intermediate_size";
    a.defaults = {{"tie_word_embeddings", 0}};
    a.source = "transformers/models/mixtral/modeling_mixtral.py";
    add(a);
  }
  {  // Qwen2MoeSparseMoeBlock: gate, experts, shared_expert (an MLP), shared_expert_gate (Linear(H, 1)).
    ArchitectureSpec a;
    a.model_type = "qwen2_moe";
    a.layer = concat({attention("qkv_bias", ""), swiglu("mlp", "intermediate_size", "", "dense"),
                      {tensor("mlp.gate.weight", R::Router, "num_experts,hidden_size", "moe"),
                       tensor("mlp.experts.gate_up_proj", R::ExpertsGateUp, "num_experts,2*moe_intermediate_size,hidden_size", "moe"),
                       tensor("mlp.experts.down_proj", R::ExpertsDown, "num_experts,hidden_size,moe_intermediate_size", "moe")},
                      swiglu("mlp.shared_expert", "shared_expert_intermediate_size", "", "moe"),
                      {linear("mlp.shared_expert_gate", R::MlpOther, "hidden_size", "1", "", "moe")},
                      kLlamaNorms});
    for (ModuleSpec& m : a.layer) {
      if (m.path.rfind("mlp.shared_expert.", 0) == 0) m.role = R::MlpOther;
    }
    a.moe = MoeLayers::SparseStep;
    a.experts_key = "num_experts";
    a.top_k_key = "num_experts_per_tok";
    a.expert_width = "moe_intermediate_size";
    a.shared_expert_width = "shared_expert_intermediate_size";
    a.defaults = {{"tie_word_embeddings", 0}, {"qkv_bias", 1}, {"decoder_sparse_step", 1}};
    a.source = "transformers/models/qwen2_moe/modeling_qwen2_moe.py";
    add(a);
  }
  {  // Qwen3MoeSparseMoeBlock registers experts before gate; Qwen3 attention with q/k norms.
    ArchitectureSpec a;
    a.model_type = "qwen3_moe";
    a.layer = concat({attention("attention_bias", "attention_bias"), kQkNorm, swiglu("mlp", "intermediate_size", "", "dense"),
                      {tensor("mlp.experts.gate_up_proj", R::ExpertsGateUp, "num_local_experts,2*moe_intermediate_size,hidden_size", "moe"),
                       tensor("mlp.experts.down_proj", R::ExpertsDown, "num_local_experts,hidden_size,moe_intermediate_size", "moe"),
                       tensor("mlp.gate.weight", R::Router, "num_local_experts,hidden_size", "moe")},
                      kLlamaNorms});
    a.moe = MoeLayers::SparseStep;
    a.experts_key = "num_local_experts";
    a.attribute_map = {{"num_experts", "num_local_experts"}};
    a.top_k_key = "num_experts_per_tok";
    // transformers maps qwen3_moe to the qwen2_moe checkpoint conversion (qwen2_moe itself has none).
    a.peft_moe_conversion = "qwen2_moe";
    a.expert_width = "moe_intermediate_size";
    a.defaults = {{"tie_word_embeddings", 0}, {"decoder_sparse_step", 1}};
    a.source = "transformers/models/qwen3_moe/modeling_qwen3_moe.py";
    add(a);
  }
  {  // gpt-oss: attention sinks (a bare parameter of self_attn, so listed before its children),
     // biased router and experts; expert tensors are [E, H, 2I] and [E, I, H] (GptOssExperts).
    ArchitectureSpec a;
    a.model_type = "gpt_oss";
    a.layer = concat({{tensor("self_attn.sinks", R::AttentionOther, "num_attention_heads")},
                      attention("attention_bias", "attention_bias"),
                      {tensor("mlp.router.weight", R::Router, "num_local_experts,hidden_size"),
                       tensor("mlp.router.bias", R::Router, "num_local_experts"),
                       tensor("mlp.experts.gate_up_proj", R::ExpertsGateUp, "num_local_experts,hidden_size,2*intermediate_size"),
                       tensor("mlp.experts.gate_up_proj_bias", R::ExpertsGateUp, "num_local_experts,2*intermediate_size"),
                       tensor("mlp.experts.down_proj", R::ExpertsDown, "num_local_experts,intermediate_size,hidden_size"),
                       tensor("mlp.experts.down_proj_bias", R::ExpertsDown, "num_local_experts,hidden_size")},
                      kLlamaNorms});
    a.moe = MoeLayers::All;
    a.experts_key = "num_local_experts";
    a.top_k_key = "num_experts_per_tok";
    a.attribute_map = {{"num_experts", "num_local_experts"}};
    a.experts_transposed = true;
    a.expert_width = "intermediate_size";
    a.defaults = {{"tie_word_embeddings", 0}, {"attention_bias", 1}};
    a.source = "transformers/models/gpt_oss/modeling_gpt_oss.py";
    add(a);
  }
  {  // Llama 4 (Llama4TextDecoderLayer): attention_bias on all four projections (qk_norm is an L2
     // norm without parameters); feed_forward is Llama4TextMoe where moe_layers says (experts
     // [E, H, 2I] and [E, I, H] as gpt-oss stores them, Llama4Router an nn.Linear H -> E so
     // all-linear reaches it, shared_expert a Llama4TextMLP of intermediate_size), else a
     // Llama4TextMLP of intermediate_size_mlp. Norms last. No PEFT v4 conversion.
    ArchitectureSpec a;
    a.model_type = "llama4_text";
    a.layer_class = "Llama4TextDecoderLayer";  // _no_split_modules
    std::vector<ModuleSpec> shared = swiglu("feed_forward.shared_expert", "intermediate_size", "", "moe");
    for (ModuleSpec& m : shared) m.role = R::MlpOther;
    a.layer = concat({attention("attention_bias", "attention_bias"),
                      {tensor("feed_forward.experts.gate_up_proj", R::ExpertsGateUp, "num_local_experts,hidden_size,2*intermediate_size", "moe"),
                       tensor("feed_forward.experts.down_proj", R::ExpertsDown, "num_local_experts,intermediate_size,hidden_size", "moe"),
                       linear("feed_forward.router", R::Router, "hidden_size", "num_local_experts", "", "moe")},
                      shared, swiglu("feed_forward", "intermediate_size_mlp", "", "dense"), kLlamaNorms});
    a.moe = MoeLayers::LayerList;
    a.experts_key = "num_local_experts";
    a.top_k_key = "num_experts_per_tok";
    a.experts_transposed = true;
    a.expert_width = "intermediate_size";
    a.shared_expert_width = "intermediate_size";
    a.defaults = {{"tie_word_embeddings", 0}, {"num_local_experts", 16}, {"num_experts_per_tok", 1},
                  {"interleave_moe_layer_step", 1}, {"intermediate_size_mlp", 16384}};
    a.source = "transformers/models/llama4/modeling_llama4.py";
    add(a);
  }
  {  // Mllama's text decoder (MllamaTextModel, transformers/models/mllama/modeling_mllama.py), the
     // decoder of Llama 3.2 Vision: nn.Embedding(vocab_size + 8, hidden) (lm_head keeps vocab_size
     // rows), and two layer classes chosen by cross_attention_layers (default [3, 8, ..., 38],
     // MllamaTextConfig.__post_init__). MllamaSelfAttentionDecoderLayer.__init__: self_attn (q/k/v/o
     // without bias), mlp, input_layernorm, post_attention_layernorm. MllamaCrossAttentionDecoderLayer
     // registers its own parameters cross_attn_attn_gate and cross_attn_mlp_gate ([1] each, listed
     // first), then cross_attn (MllamaTextCrossAttention: q/k/v/o without bias, q_norm / k_norm
     // RMSNorms over head_dim), input_layernorm, mlp, post_attention_layernorm.
     // Approximate in the forward graph: the cross-attention's k_proj / v_proj read the projected
     // image states (cross_attention_states), costed and ordered here as self-attention over the text.
    ArchitectureSpec a;
    a.model_type = "mllama_text_model";
    a.layer_class = "MllamaSelfAttentionDecoderLayer";  // _no_split_modules names both layer classes
    a.embed_extra_rows = 8;
    const std::string cross = "layer_type=cross_attention";
    const std::string self = "layer_type=self_attention";
    a.layer = {tensor("cross_attn_attn_gate", R::AttentionOther, "1", cross),
               tensor("cross_attn_mlp_gate", R::MlpOther, "1", cross),
               linear("self_attn.q_proj", R::Q, "hidden_size", kQ, "", self),
               linear("self_attn.k_proj", R::K, "hidden_size", kKV, "", self),
               linear("self_attn.v_proj", R::V, "hidden_size", kKV, "", self),
               linear("self_attn.o_proj", R::O, kQ, "hidden_size", "", self),
               linear("cross_attn.q_proj", R::Q, "hidden_size", kQ, "", cross),
               linear("cross_attn.k_proj", R::K, "hidden_size", kKV, "", cross),
               linear("cross_attn.v_proj", R::V, "hidden_size", kKV, "", cross),
               linear("cross_attn.o_proj", R::O, kQ, "hidden_size", "", cross),
               norm("cross_attn.q_norm", R::QNorm, "head_dim", "", cross),
               norm("cross_attn.k_norm", R::KNorm, "head_dim", "", cross),
               norm("input_layernorm", R::InputNorm, "hidden_size", "", cross)};
    a.layer = concat({a.layer, swiglu("mlp", "intermediate_size"),
                      {norm("input_layernorm", R::InputNorm, "hidden_size", "", self),
                       norm("post_attention_layernorm", R::PostAttentionNorm)}});
    a.layer_types.indices_key = "cross_attention_layers";
    a.layer_types.default_indices = {3, 8, 13, 18, 23, 28, 33, 38};
    a.layer_types.every = "cross_attention";
    a.layer_types.other = "self_attention";
    a.layer_types.known = {"self_attention", "cross_attention"};
    // MllamaForConditionalGeneration declares no tied weights: lm_head is its own tensor whatever
    // tie_word_embeddings says (its embedding has 8 more rows anyway).
    a.never_tied = true;
    a.defaults = {{"tie_word_embeddings", 0}};
    a.source = "transformers/models/mllama/modeling_mllama.py";
    add(a);
  }
  // Routed experts as transformers 5 fuses them ([E, 2I, H] and [E, H, I], *Experts) with the router
  // module `<block>.<router>` holding a bare weight [E, H] (*TopKRouter), in the order the MoE
  // block registers them.
  const auto fused_experts = [](const std::string& block, const std::string& router, bool router_first,
                                const std::string& experts, const std::string& width, const std::string& when) {
    const ModuleSpec gate = tensor(block + "." + router + ".weight", R::Router, experts + ",hidden_size", when);
    const std::vector<ModuleSpec> fused = {
        tensor(block + ".experts.gate_up_proj", R::ExpertsGateUp, experts + ",2*" + width + ",hidden_size", when),
        tensor(block + ".experts.down_proj", R::ExpertsDown, experts + ",hidden_size," + width, when)};
    return router_first ? concat({{gate}, fused}) : concat({fused, {gate}});
  };
  {  // OLMoE: q_norm over hidden_size and k_norm over (hidden_size / heads) * kv_heads
     // (OlmoeAttention), gate then experts (OlmoeSparseMoeBlock) in every layer.
    ArchitectureSpec a;
    a.model_type = "olmoe";
    a.layer = concat({attention("attention_bias", "attention_bias"),
                      {norm("self_attn.q_norm", R::QNorm, "hidden_size"),
                       norm("self_attn.k_norm", R::KNorm, kKV)},
                      fused_experts("mlp", "gate", true, "num_experts", "intermediate_size", ""), kLlamaNorms});
    a.moe = MoeLayers::All;
    a.experts_key = "num_experts";
    a.attribute_map = {{"num_local_experts", "num_experts"}};
    a.top_k_key = "num_experts_per_tok";
    a.expert_width = "intermediate_size";
    a.peft_moe_conversion = "qwen2_moe";  // transformers' _MODEL_TO_CONVERSION_PATTERN["olmoe"]
    a.defaults = {{"tie_word_embeddings", 0}};
    a.source = "transformers/models/olmoe/modeling_olmoe.py";
    add(a);
    // FlexOlmo: OLMo-2's post-norm layer (q/k norms over the whole projections) with OLMoE's block.
    a.model_type = "flex_olmo";
    a.layer = concat({attention("attention_bias", "attention_bias"),
                      {norm("self_attn.q_norm", R::QNorm, kQ), norm("self_attn.k_norm", R::KNorm, kKV)},
                      fused_experts("mlp", "gate", true, "num_experts", "intermediate_size", ""),
                      {norm("post_attention_layernorm", R::PostAttentionNorm),
                       norm("post_feedforward_layernorm", R::PostFeedforwardNorm)}});
    a.source = "transformers/models/flex_olmo/modeling_flex_olmo.py";
    add(a);
  }
  {  // MiniMax-M2: q/k norms over the whole projections, no biases, gate then experts
     // (MiniMaxM2SparseMoeBlock; e_score_correction_bias is a buffer, not a parameter).
    ArchitectureSpec a;
    a.model_type = "minimax_m2";
    a.layer = concat({attention("", ""), {norm("self_attn.q_norm", R::QNorm, kQ), norm("self_attn.k_norm", R::KNorm, kKV)},
                      fused_experts("mlp", "gate", true, "num_local_experts", "intermediate_size", ""), kLlamaNorms});
    a.moe = MoeLayers::All;
    a.experts_key = "num_local_experts";
    a.attribute_map = {{"num_experts", "num_local_experts"}};
    a.top_k_key = "num_experts_per_tok";
    a.expert_width = "intermediate_size";
    a.peft_moe_conversion = "mixtral";  // _MODEL_TO_CONVERSION_PATTERN["minimax_m2"]
    a.defaults = {{"tie_word_embeddings", 0}};
    a.source = "transformers/models/minimax_m2/modeling_minimax_m2.py";
    add(a);
  }
  {  // GraniteMoE: the norms are registered before block_sparse_moe (router, then experts;
     // GraniteMoeDecoderLayer.__init__). GraniteMoeShared adds shared_mlp (input_linear [2S, H],
     // output_linear [H, S]) when shared_intermediate_size is not 0. Multipliers change no shape.
    ArchitectureSpec a;
    a.model_type = "granitemoe";
    a.layer = concat({attention("attention_bias", "attention_bias"), kLlamaNorms,
                      fused_experts("block_sparse_moe", "router", true, "num_local_experts", "intermediate_size", "")});
    a.moe = MoeLayers::All;
    a.experts_key = "num_local_experts";
    a.top_k_key = "num_experts_per_tok";
    a.expert_width = "intermediate_size";
    a.defaults = {{"tie_word_embeddings", 0}};
    a.source = "transformers/models/granitemoe/modeling_granitemoe.py";
    add(a);
    // GraniteMoE SWA: the same layer with attention sinks first (GraniteMoeSWAAttention).
    const std::vector<ModuleSpec> granitemoe_layer = a.layer;
    a.model_type = "granitemoe_swa";
    a.layer = concat({{tensor("self_attn.sinks", R::AttentionOther, "num_attention_heads")}, granitemoe_layer});
    a.source = "transformers/models/granitemoe_swa/modeling_granitemoe_swa.py";
    add(a);
    a.layer = granitemoe_layer;
    a.model_type = "granitemoeshared";
    a.layer = concat({a.layer,
                      {linear("shared_mlp.input_linear", R::MlpOther, "hidden_size", "2*shared_intermediate_size", "", "shared_intermediate_size"),
                       linear("shared_mlp.output_linear", R::MlpOther, "shared_intermediate_size", "hidden_size", "", "shared_intermediate_size")}});
    a.shared_expert_width = "shared_intermediate_size";
    a.source = "transformers/models/granitemoeshared/modeling_granitemoeshared.py";
    add(a);
  }
  {  // PhiMoE: Llama attention (attention_bias), PhimoeTopKRouter (an nn.Linear H -> E, so LoRA's
     // all-linear reaches it) then fused experts in every layer; LayerNorms with bias, a final norm with
     // bias, lm_head_bias on the head. No PEFT v4 conversion.
    ArchitectureSpec a;
    a.model_type = "phimoe";
    a.layer = concat({attention("attention_bias", "attention_bias"),
                      {linear("mlp.router", R::Router, "hidden_size", "num_local_experts"),
                       tensor("mlp.experts.gate_up_proj", R::ExpertsGateUp, "num_local_experts,2*intermediate_size,hidden_size"),
                       tensor("mlp.experts.down_proj", R::ExpertsDown, "num_local_experts,hidden_size,intermediate_size"),
                       norm("input_layernorm", R::InputNorm, "hidden_size", "1"),
                       norm("post_attention_layernorm", R::PostAttentionNorm, "hidden_size", "1")}});
    a.final_norm_bias = "1";
    a.head_bias = "lm_head_bias";
    a.moe = MoeLayers::All;
    a.experts_key = "num_local_experts";
    a.top_k_key = "num_experts_per_tok";
    a.attribute_map = {{"num_experts", "num_local_experts"}};
    a.expert_width = "intermediate_size";
    a.defaults = {{"tie_word_embeddings", 0}, {"num_local_experts", 16}, {"num_experts_per_tok", 2}};
    a.source = "transformers/models/phimoe/modeling_phimoe.py";
    add(a);
  }
  {  // Mellum: Qwen3-MoE's layer (q/k norms over head_dim; experts then gate) where mlp_layer_types
     // says "sparse" (MellumConfig: all sparse by default), MellumMLP of intermediate_size elsewhere.
    ArchitectureSpec a;
    a.model_type = "mellum";
    a.layer = concat({attention("attention_bias", "attention_bias"), kQkNorm, swiglu("mlp", "intermediate_size", "", "dense"),
                      fused_experts("mlp", "gate", false, "num_local_experts", "moe_intermediate_size", "moe"), kLlamaNorms});
    a.moe = MoeLayers::LayerTypes;
    a.experts_key = "num_local_experts";
    a.attribute_map = {{"num_experts", "num_local_experts"}};
    a.top_k_key = "num_experts_per_tok";
    a.expert_width = "moe_intermediate_size";
    a.peft_moe_conversion = "qwen2_moe";  // _MODEL_TO_CONVERSION_PATTERN["mellum"]
    a.defaults = {{"tie_word_embeddings", 0}, {"first_k_dense_replace", 0}};
    a.source = "transformers/models/mellum/modeling_mellum.py";
    add(a);
  }
  {  // MiMo-V2-Flash (MiMoV2FlashAttention): layers whose layer_types entry is "sliding_attention"
     // have twice num_key_value_heads and attention sinks ([heads], the attention's own parameter,
     // listed first); v and o over v_head_dim; q/k/v attention_bias, o none. mlp_layer_types picks
     // MiMoV2FlashMLP or the sparse block (experts, then gate). No PEFT MoE conversion
     // (_MODEL_TO_CONVERSION_PATTERN has no mimo_v2_flash).
    ArchitectureSpec a;
    a.model_type = "mimo_v2_flash";
    const std::string swa = "layer_type=sliding_attention";
    a.layer = concat({{tensor("self_attn.sinks", R::AttentionOther, "num_attention_heads", swa),
                       linear("self_attn.q_proj", R::Q, "hidden_size", kQ, "attention_bias"),
                       linear("self_attn.k_proj", R::K, "hidden_size", kKV, "attention_bias", "!" + swa),
                       linear("self_attn.k_proj", R::K, "hidden_size", "2*" + kKV, "attention_bias", swa),
                       linear("self_attn.v_proj", R::V, "hidden_size", "num_key_value_heads*v_head_dim", "attention_bias", "!" + swa),
                       linear("self_attn.v_proj", R::V, "hidden_size", "2*num_key_value_heads*v_head_dim", "attention_bias", swa),
                       linear("self_attn.o_proj", R::O, "num_attention_heads*v_head_dim", "hidden_size")},
                      swiglu("mlp", "intermediate_size", "", "dense"),
                      fused_experts("mlp", "gate", false, "n_routed_experts", "moe_intermediate_size", "moe"), kLlamaNorms});
    a.moe = MoeLayers::LayerTypes;
    a.experts_key = "n_routed_experts";
    a.attribute_map = {{"num_local_experts", "n_routed_experts"}};
    a.top_k_key = "num_experts_per_tok";
    a.expert_width = "moe_intermediate_size";
    a.defaults = {{"tie_word_embeddings", 0}, {"first_k_dense_replace", 1}, {"v_head_dim", 128}};
    a.source = "transformers/models/mimo_v2_flash/modeling_mimo_v2_flash.py";
    add(a);
  }
  {  // HY-V3 (HYV3DecoderLayer): Qwen3's attention (attention_bias, q/k norms over head_dim); where
     // mlp_layer_types says "sparse" (HYV3Config: all but layer 0 by default) HYV3MoE registers gate
     // (a bare weight [E, H]), experts, shared_experts (moe_intermediate_size * num_shared_experts;
     // e_score_correction_bias is a buffer); dense layers keep HYV3MLP (mlp_bias).
    ArchitectureSpec a;
    a.model_type = "hy_v3";
    std::vector<ModuleSpec> shared = swiglu("mlp.shared_experts", "moe_intermediate_size*num_shared_experts", "mlp_bias", "moe");
    for (ModuleSpec& m : shared) m.role = R::MlpOther;
    a.layer = concat({attention("attention_bias", "attention_bias"), kQkNorm, swiglu("mlp", "intermediate_size", "mlp_bias", "dense"),
                      fused_experts("mlp", "gate", true, "num_experts", "moe_intermediate_size", "moe"), shared, kLlamaNorms});
    a.moe = MoeLayers::LayerTypes;
    a.experts_key = "num_experts";
    a.attribute_map = {{"num_local_experts", "num_experts"}};
    a.top_k_key = "num_experts_per_tok";
    a.expert_width = "moe_intermediate_size";
    a.shared_expert_width = "moe_intermediate_size*num_shared_experts";
    a.defaults = {{"tie_word_embeddings", 0}, {"first_k_dense_replace", 1}, {"num_shared_experts", 1}};
    a.source = "transformers/models/hy_v3/modeling_hy_v3.py";
    add(a);
  }
  {  // Cohere2-MoE: Cohere 2's parallel layer (one input_layernorm, weight only, registered last)
     // with a sparse block where mlp_layer_types says "sparse": gate (Cohere2MoeTopKRouter), fused
     // experts, and shared_experts of width intermediate_size * num_shared_experts when that is not
     // 0; "dense" layers keep Cohere2MoeMLP of prefix_dense_intermediate_size (None: intermediate_size).
    ArchitectureSpec a;
    a.model_type = "cohere2_moe";
    std::vector<ModuleSpec> shared = swiglu("mlp.shared_experts", "intermediate_size*num_shared_experts", "", "moe&num_shared_experts");
    for (ModuleSpec& m : shared) m.role = R::MlpOther;
    a.layer = concat({attention("attention_bias", "attention_bias"),
                      swiglu("mlp", "prefix_dense_intermediate_size", "", "dense"),
                      fused_experts("mlp", "gate", true, "num_experts", "intermediate_size", "moe"), shared,
                      {norm("input_layernorm", R::InputNorm)}});
    a.moe = MoeLayers::LayerTypes;
    a.experts_key = "num_experts";
    a.attribute_map = {{"num_local_experts", "num_experts"}};
    a.top_k_key = "num_experts_per_tok";
    a.expert_width = "intermediate_size";
    a.shared_expert_width = "intermediate_size*num_shared_experts";
    a.peft_moe_conversion = "qwen2_moe";  // _MODEL_TO_CONVERSION_PATTERN["cohere2_moe"]
    a.defaults = {{"tie_word_embeddings", 1}, {"num_experts", 8}, {"num_experts_per_tok", 2}, {"num_shared_experts", 0}};
    a.derived = {{"prefix_dense_intermediate_size", "intermediate_size"}};
    a.source = "transformers/models/cohere2_moe/modeling_cohere2_moe.py";
    add(a);
  }
  {  // ERNIE-4.5-MoE: use_bias on attention, the dense MLP, shared experts and lm_head; the sparse
     // block (where Interval says) registers gate (Ernie4_5_MoeTopKRouter: weight [E, H], then its
     // moe_statics.e_score_correction_bias [1, E] with requires_grad=False), experts, shared_experts
     // (moe_intermediate_size * moe_num_shared_experts, absent at 0); norms last.
    ArchitectureSpec a;
    a.model_type = "ernie4_5_moe";
    std::vector<ModuleSpec> shared = swiglu("mlp.shared_experts", "moe_intermediate_size*moe_num_shared_experts", "use_bias",
                                            "moe&moe_num_shared_experts");
    for (ModuleSpec& m : shared) m.role = R::MlpOther;
    a.layer = concat({attention("use_bias", "use_bias"), swiglu("mlp", "intermediate_size", "use_bias", "dense"),
                      {tensor("mlp.gate.weight", R::Router, "moe_num_experts,hidden_size", "moe"),
                       frozen_tensor("mlp.gate.moe_statics.e_score_correction_bias", "1,moe_num_experts", "moe"),
                       tensor("mlp.experts.gate_up_proj", R::ExpertsGateUp, "moe_num_experts,2*moe_intermediate_size,hidden_size", "moe"),
                       tensor("mlp.experts.down_proj", R::ExpertsDown, "moe_num_experts,hidden_size,moe_intermediate_size", "moe")},
                      shared, kLlamaNorms});
    a.head_bias = "use_bias";
    a.keep_in_fp32_strict = {"gate.weight", "moe_statics"};  // Ernie4_5_MoePreTrainedModel
    a.moe = MoeLayers::Interval;
    a.experts_key = "moe_num_experts";
    a.top_k_key = "moe_k";
    a.attribute_map = {{"num_experts", "moe_num_experts"}, {"num_experts_per_tok", "moe_k"}};
    a.expert_width = "moe_intermediate_size";
    a.shared_expert_width = "moe_intermediate_size*moe_num_shared_experts";
    a.peft_moe_conversion = "qwen2_moe";  // _MODEL_TO_CONVERSION_PATTERN["ernie4_5_moe"]
    a.defaults = {{"tie_word_embeddings", 1}, {"moe_num_shared_experts", 2}, {"moe_layer_start_index", 1},
                  {"moe_layer_end_index", -1}, {"moe_layer_interval", 1}};
    a.source = "transformers/models/ernie4_5_moe/modeling_ernie4_5_moe.py";
    add(a);
  }
  {  // AFMoE: q/k norms over head_dim and an output gate self_attn.gate_proj [heads * head_dim, H]
     // (AfmoeAttention); four norms before the MLP (AfmoeDecoderLayer); dense MLP below
     // num_dense_layers, else AfmoeSparseMoeBlock: expert_bias [E] (requires_grad=False, the block's
     // own parameter, so first), router.gate (nn.Linear H -> E), shared_experts, experts.
    ArchitectureSpec a;
    a.model_type = "afmoe";
    std::vector<ModuleSpec> shared = swiglu("mlp.shared_experts", "moe_intermediate_size*num_shared_experts", "",
                                            "moe&num_shared_experts");
    for (ModuleSpec& m : shared) m.role = R::MlpOther;
    a.layer = concat({attention("attention_bias", "attention_bias"), kQkNorm,
                      {linear("self_attn.gate_proj", R::AttentionOther, "hidden_size", kQ)},
                      kLlamaNorms,
                      {norm("pre_mlp_layernorm", R::PreFeedforwardNorm), norm("post_mlp_layernorm", R::PostFeedforwardNorm)},
                      swiglu("mlp", "intermediate_size", "", "dense"),
                      {frozen_tensor("mlp.expert_bias", "num_experts", "moe"),
                       linear("mlp.router.gate", R::Router, "hidden_size", "num_experts", "", "moe")},
                      shared,
                      {tensor("mlp.experts.gate_up_proj", R::ExpertsGateUp, "num_experts,2*moe_intermediate_size,hidden_size", "moe"),
                       tensor("mlp.experts.down_proj", R::ExpertsDown, "num_experts,hidden_size,moe_intermediate_size", "moe")}});
    a.moe = MoeLayers::FirstKDense;
    a.experts_key = "num_experts";
    a.top_k_key = "num_experts_per_tok";
    a.attribute_map = {{"num_dense_layers", "first_k_dense_replace"}, {"num_local_experts", "num_experts"}};
    a.expert_width = "moe_intermediate_size";
    a.shared_expert_width = "moe_intermediate_size*num_shared_experts";
    a.peft_moe_conversion = "qwen2_moe";  // _MODEL_TO_CONVERSION_PATTERN["afmoe"]
    a.defaults = {{"tie_word_embeddings", 0}, {"first_k_dense_replace", 1}, {"num_shared_experts", 2}};
    a.source = "transformers/models/afmoe/modeling_afmoe.py";
    add(a);
  }
  {  // Aria's text decoder: Llama attention and norms around AriaTextMoELayer in every layer:
     // router.weight [E, H], experts.fc1.weight [E, H, 2I] and experts.fc2.weight [E, I, H]
     // (AriaGroupedExpertsGemm stores [groups, in, out]), shared_experts (AriaSharedExpertsMLP,
     // width intermediate_size * moe_num_shared_experts). No PEFT v4 conversion.
    ArchitectureSpec a;
    a.model_type = "aria_text";
    std::vector<ModuleSpec> shared = swiglu("mlp.shared_experts", "intermediate_size*moe_num_shared_experts", "mlp_bias");
    for (ModuleSpec& m : shared) m.role = R::MlpOther;
    a.layer = concat({attention("attention_bias", "attention_bias"),
                      {linear("mlp.router", R::Router, "hidden_size", "moe_num_experts"),
                       tensor("mlp.experts.fc1.weight", R::ExpertsGateUp, "moe_num_experts,hidden_size,2*intermediate_size"),
                       tensor("mlp.experts.fc2.weight", R::ExpertsDown, "moe_num_experts,intermediate_size,hidden_size")},
                      shared, kLlamaNorms});
    a.moe = MoeLayers::All;
    a.experts_key = "moe_num_experts";
    a.top_k_key = "moe_topk";
    a.experts_transposed = true;
    a.expert_width = "intermediate_size";
    a.shared_expert_width = "intermediate_size*moe_num_shared_experts";
    a.defaults = {{"tie_word_embeddings", 0}, {"moe_num_experts", 8}, {"moe_topk", 2}, {"moe_num_shared_experts", 2}};
    a.source = "transformers/models/aria/modeling_aria.py";
    add(a);
  }
  {  // DeepSeek-V2/V3: multi-head latent attention (q_lora_rank null -> a plain q_proj), dense MLP in
     // the first first_k_dense_replace layers, then experts, router and shared experts
     // (DeepseekV3MoE / DeepseekV2Moe: experts, gate, shared_experts of width
     // moe_intermediate_size * n_shared_experts). V2's MLPs carry mlp_bias (DeepseekV2MLP).
    ArchitectureSpec a;
    const std::vector<ModuleSpec> mla = mla_attention();
    const auto moe_layer = [&](const std::vector<ModuleSpec>& attn, const std::string& mlp_bias) {
      std::vector<ModuleSpec> layer =
          concat({attn, swiglu("mlp", "intermediate_size", mlp_bias, "dense"),
                  fused_experts("mlp", "gate", false, "n_routed_experts", "moe_intermediate_size", "moe"),
                  swiglu("mlp.shared_experts", "moe_intermediate_size*n_shared_experts", mlp_bias, "moe"), kLlamaNorms});
      for (ModuleSpec& m : layer) {
        if (m.path.rfind("mlp.shared_experts.", 0) == 0) m.role = R::MlpOther;
      }
      return layer;
    };
    a.model_type = "deepseek_v3";
    a.layer = moe_layer(mla, "");
    a.moe = MoeLayers::FirstKDense;
    a.experts_key = "n_routed_experts";
    a.attribute_map = {{"num_local_experts", "n_routed_experts"}};
    a.peft_moe_conversion = "qwen2_moe";
    a.expert_width = "moe_intermediate_size";
    a.shared_expert_width = "moe_intermediate_size*n_shared_experts";
    a.top_k_key = "num_experts_per_tok";
    // DeepseekV3Config: q_lora_rank 1536 unless the file says null.
    a.defaults = {{"tie_word_embeddings", 0}, {"first_k_dense_replace", 3}, {"n_shared_experts", 1}, {"q_lora_rank", 1536}};
    a.source = "transformers/models/deepseek_v3/modeling_deepseek_v3.py";
    add(a);
    {  // A.X-K1 (AXK1MoE): DeepSeek-V3's layer with post_mlp_layernorm registered last in the sparse
       // block (after shared_experts). transformers has no PEFT MoE conversion pattern for axk1
       // (_MODEL_TO_CONVERSION_PATTERN), so v4 names reach only the shared experts.
      ArchitectureSpec axk1 = a;
      axk1.model_type = "axk1";
      std::vector<ModuleSpec> layer = moe_layer(mla, "");
      layer.insert(layer.end() - 2, norm("mlp.post_mlp_layernorm", R::MlpOther, "hidden_size", "", "moe"));
      axk1.layer = layer;
      axk1.peft_moe_conversion = "";
      // AXK1Config: first_k_dense_replace 1 (DeepSeek-V3's is 3).
      axk1.defaults = {{"tie_word_embeddings", 0}, {"first_k_dense_replace", 1}, {"n_shared_experts", 1}, {"q_lora_rank", 1536}};
      axk1.source = "transformers/models/axk1/modeling_axk1.py";
      add(axk1);
    }
    a.model_type = "deepseek_v2";
    a.layer = moe_layer(mla, "mlp_bias");
    a.attribute_map = {{"num_experts", "n_routed_experts"}};
    a.defaults = {{"tie_word_embeddings", 0}, {"first_k_dense_replace", 0}, {"n_shared_experts", 2}, {"q_lora_rank", 1536}};
    a.source = "transformers/models/deepseek_v2/modeling_deepseek_v2.py";
    add(a);
    // GLM-4-MoE: DeepSeek-V3's MoE layer rule and block with GQA attention (attention_bias on
    // q/k/v, not o_proj; per-head q/k norms with use_qk_norm; Glm4MoeAttention).
    a.model_type = "glm4_moe";
    a.layer = moe_layer(concat({attention("attention_bias", ""),
                                {norm("self_attn.q_norm", R::QNorm, "head_dim", "", "use_qk_norm"),
                                 norm("self_attn.k_norm", R::KNorm, "head_dim", "", "use_qk_norm")}}),
                        "");
    a.attribute_map = {{"num_local_experts", "n_routed_experts"}};
    a.defaults = {{"tie_word_embeddings", 0}, {"first_k_dense_replace", 1}, {"n_shared_experts", 1}};
    a.source = "transformers/models/glm4_moe/modeling_glm4_moe.py";
    add(a);
    // GLM-4V-MoE's text decoder (Glm4vMoeTextDecoderLayer): GLM-4-MoE's layer without q/k norms,
    // attention_bias (Glm4vMoeTextConfig default true) on q/k/v. transformers maps glm4v_moe to the
    // qwen2_moe conversion (_MODEL_TO_CONVERSION_PATTERN), as glm4_moe.
    a.model_type = "glm4v_moe_text";
    a.layer_class = "Glm4vMoeTextDecoderLayer";
    a.layer = moe_layer(attention("attention_bias", ""), "");
    a.defaults = {{"tie_word_embeddings", 0}, {"first_k_dense_replace", 1}, {"n_shared_experts", 1}, {"attention_bias", 1}};
    a.source = "transformers/models/glm4v_moe/modeling_glm4v_moe.py";
    add(a);
    a.layer_class = "";
    // Mistral 4: DeepSeek-V3's layer (MLA, experts/gate/shared_experts after first_k_dense_replace);
    // Mistral4Config defaults: first_k_dense_replace 0, q_lora_rank 1024. No PEFT v4 conversion
    // (not in transformers' _MODEL_TO_CONVERSION_PATTERN).
    a.model_type = "mistral4";
    a.layer = moe_layer(mla, "");
    a.peft_moe_conversion = "";
    a.defaults = {{"tie_word_embeddings", 0}, {"first_k_dense_replace", 0}, {"n_shared_experts", 1}, {"q_lora_rank", 1024}};
    a.source = "transformers/models/mistral4/modeling_mistral4.py";
    add(a);
    // Solar Open: GQA attention (attention_bias on q/k/v, none on o_proj) and DeepSeek's MoE block
    // in every layer (SolarOpenDecoderLayer: self.mlp = SolarOpenMoE).
    a.model_type = "solar_open";
    a.layer = moe_layer(attention("attention_bias", ""), "");
    a.moe = MoeLayers::All;
    a.peft_moe_conversion = "qwen2_moe";  // _MODEL_TO_CONVERSION_PATTERN["solar_open"]
    a.defaults = {{"tie_word_embeddings", 0}, {"n_shared_experts", 1}};
    a.source = "transformers/models/solar_open/modeling_solar_open.py";
    add(a);
    // EXAONE-MoE: EXAONE 4's attention (no biases, q/k norms over head_dim) with DeepSeek-V3's block
    // (experts, gate, shared_experts) where mlp_layer_types says "sparse" (ExaoneMoeConfig builds the
    // list from first_k_dense_replace, default 1); its keys are num_experts / num_shared_experts.
    a.model_type = "exaone_moe";
    a.layer = moe_layer(concat({attention("", ""), kQkNorm}), "");
    a.moe = MoeLayers::LayerTypes;
    a.attribute_map = {{"num_experts", "n_routed_experts"}, {"num_shared_experts", "n_shared_experts"},
                       {"num_local_experts", "n_routed_experts"}};
    a.peft_moe_conversion = "qwen2_moe";  // _MODEL_TO_CONVERSION_PATTERN["exaone_moe"]
    a.defaults = {{"tie_word_embeddings", 0}, {"first_k_dense_replace", 1}, {"n_shared_experts", 1}};
    a.source = "transformers/models/exaone_moe/modeling_exaone_moe.py";
    add(a);
    // GLM-4-MoE-Lite: DeepSeek-V3's layer (MLA, q_lora_rank default 768) where mlp_layer_types says
    // "sparse" (Glm4MoeLiteConfig: all but layer 0 by default).
    a.model_type = "glm4_moe_lite";
    a.layer = moe_layer(mla, "");
    a.moe = MoeLayers::LayerTypes;
    a.attribute_map = {{"num_local_experts", "n_routed_experts"}};
    a.peft_moe_conversion = "qwen2_moe";  // _MODEL_TO_CONVERSION_PATTERN["glm4_moe_lite"]
    a.defaults = {{"tie_word_embeddings", 0}, {"first_k_dense_replace", 1}, {"n_shared_experts", 1}, {"q_lora_rank", 768}};
    a.source = "transformers/models/glm4_moe_lite/modeling_glm4_moe_lite.py";
    add(a);

    // ---- JetMoE (branch arch5): JetMoeDecoderLayer registers mlp (JetMoeMoE: its output bias,
    // input_linear / output_linear - JetMoeParallelExperts, a weight [E, out, in] each - and a router
    // whose `layer` is an nn.Linear), the two norms, then self_attention: a mixture of attention
    // experts (JetMoeMoA: bias, per-expert query projection input_linear [E, kv_channels *
    // num_key_value_heads, H] and output projection output_linear, its router) and one kv_proj for
    // every expert. num_attention_heads = num_key_value_heads * num_experts_per_tok (JetMoeConfig).
    {
      ArchitectureSpec jet;
      jet.model_type = "jetmoe";
      const std::string kv = "kv_channels*num_key_value_heads";
      jet.layer = {tensor("mlp.bias", R::MlpOther, "hidden_size"),
                   tensor("mlp.input_linear.weight", R::ExpertsGateUp, "num_local_experts,2*intermediate_size,hidden_size"),
                   tensor("mlp.output_linear.weight", R::ExpertsDown, "num_local_experts,hidden_size,intermediate_size"),
                   linear("mlp.router.layer", R::Router, "hidden_size", "num_local_experts"),
                   kLlamaNorms[0], kLlamaNorms[1],
                   tensor("self_attention.experts.bias", R::AttentionOther, "hidden_size"),
                   tensor("self_attention.experts.input_linear.weight", R::Q, "num_local_experts," + kv + ",hidden_size"),
                   tensor("self_attention.experts.output_linear.weight", R::O, "num_local_experts,hidden_size," + kv),
                   linear("self_attention.experts.router.layer", R::AttentionOther, "hidden_size", "num_local_experts"),
                   linear("self_attention.kv_proj", R::K, "hidden_size", "2*" + kv)};
      jet.moe = MoeLayers::All;
      jet.experts_key = "num_local_experts";
      jet.top_k_key = "num_experts_per_tok";
      jet.expert_width = "intermediate_size";
      // The attention's head width is kv_channels (JetMoeAttention: head_dim = config.kv_channels).
      jet.attribute_map = {{"kv_channels", "head_dim"}};
      jet.num_attention_heads_from = "num_key_value_heads*num_experts_per_tok";
      jet.defaults = {{"tie_word_embeddings", 1}, {"kv_channels", 128}, {"num_local_experts", 8}, {"num_experts_per_tok", 2},
                      {"num_key_value_heads", 16}};
      jet.source = "transformers/models/jetmoe/modeling_jetmoe.py";
      add(jet);
    }

    // ---- DeepSeek sparse attention (branch arch5): DeepSeek-V3's MLA and MoE block where
    // mlp_layer_types says "sparse" (the config class writes the list from first_k_dense_replace),
    // and after o_proj the attention's indexer (DeepseekV32Indexer: wq_b q_lora_rank ->
    // index_n_heads * index_head_dim, wk hidden -> index_head_dim, k_norm an nn.LayerNorm with
    // bias, weights_proj hidden -> index_n_heads). Its forward is @torch.no_grad(): trainable
    // parameters that never get a gradient (ModuleRole::NoGrad), so DDP needs
    // find_unused_parameters=True, and LoRA on them trains nothing.
    const std::vector<ModuleSpec> indexer = {
        linear("self_attn.indexer.wq_b", R::NoGrad, "q_lora_rank", "index_n_heads*index_head_dim", "", "indexer"),
        linear("self_attn.indexer.wk", R::NoGrad, "hidden_size", "index_head_dim", "", "indexer"),
        norm("self_attn.indexer.k_norm", R::NoGrad, "index_head_dim", "1", "indexer"),
        linear("self_attn.indexer.weights_proj", R::NoGrad, "hidden_size", "index_n_heads", "", "indexer")};
    a.model_type = "deepseek_v32";
    a.layer = moe_layer(concat({mla, indexer}), "");
    a.moe = MoeLayers::LayerTypes;
    a.attribute_map = {{"num_local_experts", "n_routed_experts"}, {"num_experts", "n_routed_experts"}};
    a.peft_moe_conversion = "qwen2_moe";  // _MODEL_TO_CONVERSION_PATTERN["deepseek_v32"], ["glm_moe_dsa"]
    a.layer_rules = dsa_layer_rules;
    a.defaults = {{"tie_word_embeddings", 0}, {"first_k_dense_replace", 3}, {"n_shared_experts", 1}, {"q_lora_rank", 1536},
                  {"index_head_dim", 128}, {"index_n_heads", 64}};
    a.source = "transformers/models/deepseek_v32/modeling_deepseek_v32.py";
    add(a);
    // GLM-MoE-DSA (GlmMoeDsaAttention): the same layer, where the indexer exists only in the layers whose
    // indexer_types entry is "full" ("shared" layers reuse the previous layer's top-k);
    // GlmMoeDsaConfig writes the list from index_topk_pattern ("F"/"S" per layer) or index_topk_freq
    // and index_skip_topk_offset.
    a.model_type = "glm_moe_dsa";
    a.config_rules = glm_moe_dsa_config_rules;
    a.defaults = {{"tie_word_embeddings", 0}, {"first_k_dense_replace", 3}, {"n_shared_experts", 1}, {"q_lora_rank", 2048},
                  {"index_head_dim", 128}, {"index_n_heads", 32}};
    a.source = "transformers/models/glm_moe_dsa/modeling_glm_moe_dsa.py";
    add(a);
  }
  add_arch8_decoders(t);
  add_deepseek_v4(t);
  add_dbrx(t);
  add_longcat_flash(t);
  return t;
}

const std::vector<ArchitectureSpec>& table() {
  static const std::vector<ArchitectureSpec> specs = build_table();
  return specs;
}

[[noreturn]] void bad_expression(const std::string& expression, const std::string& source, const std::string& why) {
  throw InputError(source, "shape expression \"" + expression + "\": " + why);
}

}  // namespace

const ArchitectureSpec* find_architecture(const std::string& model_type) {
  for (const ArchitectureSpec& spec : table()) {
    if (spec.model_type == model_type) return &spec;
    if (std::find(spec.aliases.begin(), spec.aliases.end(), model_type) != spec.aliases.end()) return &spec;
  }
  return nullptr;
}

const ArchitectureSpec* find_composite_decoder(const std::string& model_type) {
  for (const ArchitectureSpec& spec : table()) {
    if (std::find(spec.composite_types.begin(), spec.composite_types.end(), model_type) != spec.composite_types.end()) return &spec;
  }
  return nullptr;
}

std::string per_layer_key(int layer, const std::string& key) {
  return "per_layer_config." + std::to_string(layer) + "." + key;
}

std::vector<std::string> modelled_model_types() {
  std::vector<std::string> types;
  for (const ArchitectureSpec& spec : table()) {
    types.push_back(spec.model_type);
    types.insert(types.end(), spec.aliases.begin(), spec.aliases.end());
    types.insert(types.end(), spec.composite_types.begin(), spec.composite_types.end());
  }
  // Vision-language types whose tower and projector are described (vision_tower.h); their text
  // decoder is this table's entry for text_config.model_type.
  for (const std::string& type : vision_language_model_types()) types.push_back(type);
  std::sort(types.begin(), types.end());
  return types;
}

namespace {

// The pieces of `text` between `delim`s as std::getline yields them: none for an empty text, and no
// empty piece after a trailing delimiter. Shapes are evaluated for every parameter of every
// structure the fix search builds, so this avoids a stringstream (and its locale) per piece.
std::vector<std::string_view> split_pieces(std::string_view text, char delim) {
  std::vector<std::string_view> pieces;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find(delim, start);
    if (end == std::string_view::npos) {
      pieces.push_back(text.substr(start));
      break;
    }
    pieces.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return pieces;
}

}  // namespace

std::vector<long long> evaluate_shape(const std::string& expressions, const std::map<std::string, double>& values,
                                      const std::string& source) {
  std::vector<long long> dims;
  for (std::string_view dim : split_pieces(expressions, ',')) {
    long long sum = 0;
    // "a+b*c" and, since branch arch13, "a-b" (Ovis2VisionModel.head_linear: vocab_size -
    // num_visual_indicator_tokens): a term after '-' is subtracted.
    std::string signed_dim;
    for (char c : dim) {
      if (c == '-') signed_dim += "+-";
      else signed_dim += c;
    }
    for (std::string_view signed_term : split_pieces(signed_dim, '+')) {
      const bool negative = !signed_term.empty() && signed_term[0] == '-';
      const std::string_view term = negative ? signed_term.substr(1) : signed_term;
      long long product = negative ? -1 : 1;
      for (std::string_view piece : split_pieces(term, '*')) {
        const std::string factor(piece);
        if (factor.empty()) bad_expression(expressions, source, "empty factor");
        if (std::isdigit(static_cast<unsigned char>(factor[0]))) {
          product *= std::stoll(factor);
          continue;
        }
        auto it = values.find(factor);
        if (it == values.end()) {
          throw InputError(source, "key \"" + factor + "\": missing; expected a positive integer");
        }
        if (!(it->second > 0) || it->second != std::floor(it->second)) {
          throw InputError(source, "key \"" + factor + "\": expected a positive integer");
        }
        product *= static_cast<long long>(it->second);
      }
      sum += product;
    }
    if (sum < 0) throw InputError(source, "shape " + expressions + ": expected dimensions of at least 0, got " + std::to_string(sum));
    dims.push_back(sum);
  }
  return dims;
}

namespace {

// One side of a comparison: an integer, or a numeric config key (0 when the config lacks it).
double operand(std::string_view text, const std::map<std::string, double>& values) {
  if (!text.empty() && (std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '-')) {
    return std::stod(std::string(text));
  }
  auto it = values.find(std::string(text));
  return it == values.end() ? 0 : it->second;
}

bool evaluate_term(std::string_view term, const std::map<std::string, double>& values) {
  if (term.empty()) return false;
  if (term == "1") return true;
  for (std::string_view op : {std::string_view("=="), std::string_view("!=")}) {
    const size_t at = term.find(op);
    if (at == std::string_view::npos) continue;
    const bool equal = operand(term.substr(0, at), values) == operand(term.substr(at + 2), values);
    return op == "==" ? equal : !equal;
  }
  const bool negate = term[0] == '!';
  const std::string key(negate ? term.substr(1) : term);
  auto it = values.find(key);
  const bool value = it != values.end() && it->second != 0;
  return negate ? !value : value;
}

}  // namespace

bool evaluate_flag(const std::string& flag, const std::map<std::string, double>& values) {
  for (std::string_view any : split_pieces(flag, '|')) {
    bool all = true;
    for (std::string_view term : split_pieces(any, '&')) all = all && evaluate_term(term, values);
    if (all && !any.empty()) return true;
  }
  return false;
}

}  // namespace hookstream
