// The parameters of a model as PyTorch would enumerate them, and the modules that use them.
// Names and order follow `named_parameters()` of the Hugging Face model (wrapped by PEFT when an
// adapter is on: `base_model.model.` prefix, `base_layer.weight`, `lora_A.default.weight`), which is
// also the order DDP's `_build_params_for_reducer` walks (torch/nn/parallel/distributed.py):
// named_modules() order, parameters registered on each module in registration order, trainable ones
// only, tied/shared tensors de-duplicated (first occurrence wins).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/inputs/architectures/token_mixer.h"
#include "sim/inputs/model_config.h"
#include "sim/inputs/plan.h"

namespace hookstream {

struct Parameter {
  std::string name;             // e.g. base_model.model.model.layers.3.mlp.up_proj.lora_A.default.weight
  std::string module;           // owning module path, e.g. base_model.model.model.layers.3.mlp.up_proj
  std::vector<int64_t> shape;
  DType dtype = DType::BFloat16;
  bool quantized = false;       // 4/8-bit base weight (bitsandbytes); never trainable
  bool trainable = false;
  bool adapter = false;         // a LoRA lora_A/lora_B weight (PEFT keeps these in fp32)
  int layer = -1;               // decoder layer index, -1 outside the decoder stack
  std::string group;            // "vision", "embed", "decoder", "final_norm", "head"
  int ddp_index = -1;           // index in DDP's parameter list; -1 if frozen or a duplicate
  int64_t numel() const;
  int64_t bytes() const;        // as stored (quantized weights: packed size)
};

// A linear projection and its optional LoRA pair. Indices into ModelStructure::parameters, -1 absent.
struct LinearUse {
  std::string name;  // leaf name: q_proj, up_proj, qkv, linear_fc1, ...
  int weight = -1;
  int bias = -1;
  int lora_a = -1;
  int lora_b = -1;
};

// The parameters of one decoder layer, by what the forward graph does with them. The slots are
// filled from the architecture table (sim/inputs/architectures/architecture.h): a fused qkv_proj sits in
// `q` (k, v empty), a fused gate_up_proj in `up`; in an MoE layer `gate` is the router, `up` and
// `down` the fused [E, ...] expert tensors (their biases in .bias). Parameters with no slot of their
// own (MLA projections, attention sinks, shared experts, Gemma's feed-forward norms) are in the
// *_other lists, so that every parameter takes part in the step.
// One routed expert built as its own module (per-expert layout: transformers 4.x, remote code).
struct ExpertUse {
  int index = 0;     // expert index in the block's ModuleList
  std::string path;  // e.g. base_model.model.model.layers.3.block_sparse_moe.experts.5
  LinearUse gate, up, down;
};

struct DecoderLayerUse {
  int index = 0;
  std::string path;  // e.g. base_model.model.model.layers.3
  // The layer's token mixer (token_mixer.h) and its attribute in the layer ("self_attn",
  // "linear_attn"). A recurrent mixer fills mixer_in (input projections), mixer_other (conv1d,
  // dt_bias, A_log, gated norm) and `o` (out_proj); q, k, v stay empty.
  TokenMixer mixer = TokenMixer::Attention;
  std::string mixer_module = "self_attn";
  RecurrentMixerShape mixer_shape;
  std::vector<LinearUse> mixer_in, mixer_other;
  // Whether the layer has an MLP (a NemotronH mixer block has none) and whether it is gated
  // (NemotronHMLP is up/down only): what the forward graph and the cost models run.
  bool has_mlp = true;
  bool mlp_gated = true;
  // FalconH1: attention (q, k, v, o) and the recurrent mixer (mixer_in, mixer_other, mixer_out) in
  // parallel on the same normed input.
  bool parallel_attention = false;
  LinearUse mixer_out;
  int input_norm = -1, input_norm_bias = -1;
  LinearUse q, k, v, o;
  int q_norm = -1, k_norm = -1;
  std::vector<LinearUse> attention_other;
  int post_attention_norm = -1, post_attention_norm_bias = -1;
  LinearUse gate, up, down;
  std::vector<LinearUse> mlp_other;
  // Parameters the forward reads only under torch.no_grad() (ModuleRole::NoGrad): no op of the
  // autograd graph uses them, so they never get a gradient.
  std::vector<LinearUse> no_grad;
  bool moe = false;  // a sparse MoE block instead of the dense MLP
  // Per-expert layout: `gate` is the router and each routed expert is its own MLP (empty with fused
  // experts or a dense MLP). Sorted by expert index.
  std::vector<ExpertUse> experts;
  std::string mlp_module = "mlp";  // the MLP's attribute in the layer (Mixtral v4: "block_sparse_moe")
  // The MLP width one token goes through: intermediate_size for a dense MLP; top_k routed experts
  // plus the shared experts in an MoE layer. The time and memory models cost the MLP with it.
  int64_t mlp_width = 0;
  // LongCat-Flash (ArchitectureSpec::sublayers): the sub-blocks after the first (this one's q..down,
  // norms and modules are the first sub-block's), same path and index, their own mixer_module and
  // mlp_module; and the shortcut MoE block (empty or one), whose gate/up/down are its router and
  // fused experts. What the forward graph runs and the cost models count.
  std::vector<DecoderLayerUse> sublayers;
  std::vector<DecoderLayerUse> shortcut;
};

struct VisionBlockUse {
  int index = 0;
  std::string path;
  int norm1_weight = -1, norm1_bias = -1;
  // The fused qkv (Qwen-VL), or q with k and v beside it (CLIP, SigLIP, Pixtral: k, v empty otherwise).
  LinearUse qkv, k, v, proj;
  int norm2_weight = -1, norm2_bias = -1;
  // The MLP: fc1 (up) and fc2 (down); Qwen2.5-VL's gated MLP adds gate (gate_proj, weight -1 when absent).
  LinearUse gate, fc1, fc2;
  // Per-head norms on q and k (InternVL use_qk_norm: q_norm, then k_norm), and parameters applied to
  // the attention / MLP output (InternVL's layer scale lambda_1 / lambda_2).
  std::vector<LinearUse> qk_norms, attention_other, mlp_other;
};

// A Qwen-VL patch merger: LayerNorm, then a 2-layer MLP into the text hidden size. DeepStack mergers
// (Qwen3-VL) take the output of one vision block and feed it to an early decoder layer.
struct VisionMergerUse {
  std::string path;
  int block = -1;  // DeepStack: the vision block whose output it merges; -1 for the final merger
  int norm_weight = -1, norm_bias = -1;
  LinearUse fc1, fc2;
};

struct ModelStructure {
  std::vector<Parameter> parameters;  // every parameter, named_parameters() order, tied ones once
  // Vision tower (empty without vision_config): patch embedding, blocks, merger.
  LinearUse vision_patch_embed;
  int vision_pos_embed = -1;  // Qwen3-VL: learned position embedding added to the patch embeddings
  std::vector<VisionBlockUse> vision_blocks;
  int vision_merger_norm_weight = -1, vision_merger_norm_bias = -1;
  LinearUse vision_merger_fc1, vision_merger_fc2;
  // Qwen3-VL DeepStack: merger k's output is added to the hidden state after decoder layer k.
  std::vector<VisionMergerUse> vision_deepstack_mergers;
  // A described tower (CLIP, SigLIP, Pixtral; sim/inputs/architectures/vision_tower.h): what runs
  // right after the patch embedding (CLIP's class token and pre_layrnorm, position embeddings,
  // Pixtral's ln_pre), the norm on last_hidden_state, the pooling head (its output is never read:
  // no gradient reaches it), and the projector into the text width with the parameters the model
  // registers on itself (LLaVA-NeXT's image_newline), in the order they run.
  std::vector<LinearUse> vision_embed_other, vision_final_norm, vision_head, vision_projector;
  std::string vision_block_class;  // CLIPEncoderLayer, SiglipEncoderLayer, PixtralAttentionLayer
  int embed = -1;
  // Parameters between the token embedding and the layers (ArchitectureSpec::embed_extras): GPT-2's
  // wpe, BLOOM's word_embeddings_layernorm, OPT's embed_positions and project_in/out.
  std::vector<LinearUse> embed_other;
  // Parameters whose forward runs after the last layer, before the final norm
  // (ArchitectureSpec::after_layers: DeepSeek-V4's hc_head), in registration order.
  std::vector<LinearUse> after_layers;
  std::string head_module = "lm_head";  // the output head's module (BioGPT: output_projection)
  std::vector<DecoderLayerUse> layers;
  int final_norm = -1, final_norm_bias = -1;  // -1: a final norm without parameters (OLMo)
  int lm_head = -1;  // == embed when tie_word_embeddings (the same tensor)
  int lm_head_bias = -1;
  // Routed experts per MoE layer and experts per token (0 for a dense model).
  int num_experts = 0, experts_per_token = 0;
  // "fused" ([E, ...] tensors, used every step), "per_expert" (one module per expert) or "none";
  // and what decided it (sim/inputs/architectures/per_expert_layout.h).
  std::string expert_layout = "none";
  std::string expert_layout_decided_by;
  // DDP's parameter list: ddp_parameters[i] is the index into `parameters` of DDP index i.
  std::vector<int> ddp_parameters;
  // Expert parallelism (Engine::expert_parallel > 1): the fused 3-D expert tensors each rank holds
  // 1/expert_parallel of (their shapes here are the rank's slice), outside DDP's parameter list
  // (axolotl's shard.py puts them in _ddp_params_and_buffers_to_ignore). Indices into `parameters`.
  std::vector<int> expert_parallel_shards;

  const Parameter& ddp_parameter(int ddp_index) const { return parameters[ddp_parameters[ddp_index]]; }
};

// Builds the structure a plan implies: the model config, the adapter (LoRA/QLoRA: PEFT names, frozen
// base, 4-bit base weights), tied embeddings, which parameters are trainable.
ModelStructure build_model_structure(const Plan& plan);

// Every parameter index (into `parameters`) owned by the module at `module_path` or below it.
std::vector<int> parameters_under(const ModelStructure& structure, const std::string& module_path);

}  // namespace hookstream
