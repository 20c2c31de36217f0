// Decoder architectures as data: for each transformers model_type hookstream models, the modules
// of a decoder layer in registration order (so named_parameters() order), with their shapes written
// as expressions over config.json keys, which ones carry biases, which config flags add or remove
// them, and where the embedding, final norm and head live. A new architecture is a new table entry
// in architecture.cc; the structure builder (sim/inputs/model_structure.cc) walks the entry.
//
// The table is also THE list of model types hookstream models: a config.json of any other
// model_type is refused (exit 2), never modelled as a dense Llama.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "sim/inputs/architectures/token_mixer.h"

namespace hookstream {

// What the forward graph (sim/engine/forward_graph.cc) does with a module of a decoder layer.
enum class ModuleRole {
  Q, K, V, O,          // attention projections
  QKV,                 // fused q/k/v (Phi-3 qkv_proj, Falcon query_key_value)
  QNorm, KNorm,        // per-head norms on q and k
  AttentionOther,      // other attention parameters (MLA down/up projections and norms, sinks)
  Gate, Up, Down,      // dense MLP (or an MoE block's experts, see ExpertsGateUp/ExpertsDown)
  GateUp,              // fused gate/up (Phi-3 gate_up_proj)
  Router,              // MoE router (mlp.gate / mlp.router)
  ExpertsGateUp, ExpertsDown,  // fused [E, ...] expert tensors (transformers 5)
  MlpOther,            // shared experts, shared-expert gate
  InputNorm, PostAttentionNorm,
  PreFeedforwardNorm, PostFeedforwardNorm,  // Gemma 2/3, OLMo-2
  // Outside the layers (ArchitectureSpec::embed_extras): learned position embeddings, a norm or
  // projection right after the token embedding (GPT-2 wpe, BLOOM word_embeddings_layernorm, OPT
  // project_in/out), and a final norm registered before the layers (OPT's decoder.final_layer_norm).
  EmbedOther, FinalNorm,
  // A recurrent token mixer (token_mixer.h): its input projections (each reads the normed hidden
  // state), and its other parameters in the order the mixer applies them (conv1d, dt_bias, A_log,
  // the gated norm); its output projection takes the O role.
  MixerIn, MixerOther,
  // A recurrent mixer's output projection in a layer that also has attention (FalconH1: the Mamba2
  // mixer and attention side by side; attention's o_proj keeps the O role).
  MixerOut,
  // Read only under torch.no_grad() (DeepSeek sparse attention's indexer, whose forward is
  // decorated @torch.no_grad(): it picks the tokens, the attention it masks carries the gradient).
  // Listed and requires_grad, so in DDP's list, but never given a gradient: unused as the Reducer sees it.
  NoGrad,
};

enum class ModuleKind {
  Linear,  // nn.Linear(in, out): weight [out, in] (+ bias [out])
  Norm,    // RMSNorm/LayerNorm: weight [shape] (+ bias [shape] for LayerNorm with bias)
  Tensor,  // a bare nn.Parameter registered on its module (expert tensors, attention sinks)
  // transformers.pytorch_utils.Conv1D(out, in) (GPT-2): weight [in, out] (+ bias [out]). PEFT treats
  // it as a linear layer ("all-linear" includes it; lora_A [r, in], lora_B [out, r] with
  // fan_in_fan_out, peft/tuners/lora/model.py _create_new_module).
  Conv1D,
  Embedding,  // nn.Embedding: weight [shape] (learned position embeddings)
  // nn.Conv2d(in, out, kernel): `in` the input channels, `shape` "out,kernel_h,kernel_w"; weight
  // [out, in, kh, kw] (+ bias [out]). A vision tower's patch embedding (vision_tower.h). In a decoder
  // layer, a recurrent mixer's depthwise nn.Conv1d(C, C, k, groups=C): `in` "1" (in_channels /
  // groups), `shape` "C,k", weight [C, 1, k].
  Conv,
};

struct ModuleSpec {
  std::string path;  // relative to the layer: "self_attn.q_proj"; Tensor: "mlp.experts.gate_up_proj"
  ModuleKind kind = ModuleKind::Linear;
  ModuleRole role = ModuleRole::Q;
  std::string in;     // Linear: in_features expression
  std::string shape;  // Linear: out_features; Norm/Tensor: comma-separated dimension expressions
  // Bias: "" none, "1" always, else the name of a boolean config key (default false unless the
  // architecture's defaults say otherwise). Tensor: the bias is a sibling tensor `<leaf>_bias`
  // whose shape drops the weight's middle dimension (gpt_oss gate_up_proj_bias [E, 2I]).
  std::string bias;
  // When the module exists: "" always; "moe"/"dense" by the architecture's MoE layer rule (also a
  // term of a longer condition: "moe&num_shared_experts"); else a condition as evaluate_flag reads it: a boolean config key that must be true ("!key": must be
  // false), "key=value" for a string key, "a==b" / "a!=b" comparing numeric keys or integers,
  // joined with "&" (and) and "|" (or, binds looser): Falcon's norms depend on three keys.
  std::string when;
  // A Tensor created with requires_grad=False (ERNIE-4.5-MoE's e_score_correction_bias, AFMoE's
  // expert_bias): listed by named_parameters(), never trainable, so never in DDP's list.
  bool frozen = false;
  // A ModuleList of identical modules: `repeat` (an expression) copies, "{i}" in the path replaced by
  // 0, 1, ... (StableLM's per-head q_layernorm.norms.{i}). Not for Tensor modules.
  std::string repeat;
  // The sub-block of a layer made of several (ArchitectureSpec::sublayers, LongCat-Flash): 0 the
  // first attention + MLP sub-block (or a layer of one), 1 the second, -1 the shortcut MoE block.
  int sublayer = 0;
};

// Which decoder layers have a sparse MoE block instead of the dense MLP.
enum class MoeLayers {
  None,           // dense model
  All,            // Mixtral, gpt-oss
  FirstKDense,    // DeepSeek-V2/V3: layers >= first_k_dense_replace (modeling_deepseek_v3.py)
  SparseStep,     // Qwen2-MoE/Qwen3-MoE: not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0
  // Cohere2-MoE: mlp_layer_types[i] == "sparse"; without the list, the config class writes one from
  // first_k_dense_replace (Cohere2MoeConfig.__post_init__), so FirstKDense decides.
  LayerTypes,
  // ERNIE-4.5-MoE (Ernie4_5_MoeDecoderLayer): (i + 1) % moe_layer_interval == 0 and
  // moe_layer_start_index <= i <= moe_layer_end_index (-1: the last layer).
  Interval,
  // Llama 4 (Llama4TextDecoderLayer): layer_idx in moe_layers; without the list, Llama4TextConfig
  // writes range(interleave_moe_layer_step - 1, num_hidden_layers, interleave_moe_layer_step).
  LayerList,
  // NemotronH (NemotronHBlock): the layers whose layer_types entry is "moe".
  LayerTypeMoe,
};

struct ArchitectureSpec {
  std::string model_type;
  std::vector<std::string> aliases;  // other model_types with the same text decoder (VL text parts)
  std::string embed = "model.embed_tokens";
  std::string embed_width = "hidden_size";  // OPT: word_embed_proj_dim (the head has that width too)
  // Rows of the token embedding beyond vocab_size (MllamaTextModel: nn.Embedding(vocab_size + 8,
  // hidden_size, padding_idx), the image tokens' rows; its lm_head keeps vocab_size rows).
  int embed_extra_rows = 0;
  // Modules registered after the token embedding and before the layers, with full paths (GPT-2's
  // transformer.wpe, BLOOM's word_embeddings_layernorm, OPT's embed_positions, project_out,
  // project_in and final_layer_norm), in registration order.
  std::vector<ModuleSpec> embed_extras;
  std::string layers = "model.layers";
  // The config key with the number of decoder layers when it is not num_hidden_layers
  // (LongcatFlashModel builds config.num_layers layers and then sets num_hidden_layers to twice
  // that, the count of attention sub-blocks its cache indexes).
  std::string layers_key;
  // A layer made of attention + MLP sub-blocks run one after the other (LongcatFlashDecoderLayer:
  // self_attn[0], mlps[0], self_attn[1], mlps[1], with input_layernorm[i] / post_attention_layernorm[i]),
  // each named by its attention and MLP attributes; empty: one attention and one MLP. A module's
  // ModuleSpec::sublayer says which sub-block it belongs to.
  struct Sublayer {
    std::string attention, mlp;
  };
  std::vector<Sublayer> sublayers;
  // The layer's shortcut MoE block (LongcatFlashDecoderLayer.mlp, ModuleSpec::sublayer -1): it reads
  // the first sub-block's post_attention_layernorm output and its output is added to the layer's
  // output after the last sub-block ("shortcut connection"). "" none.
  std::string shortcut_moe;
  // The decoder layer's class when it is not <Model>DecoderLayer (the model's _no_split_modules:
  // GPT2Block, GPTNeoXLayer, BloomBlock, CTRL's EncoderLayer): what fsdp_config's
  // transformer_layer_cls_to_wrap names (sim/sync/fsdp2/fsdp2_units.cc).
  std::string layer_class;
  std::vector<ModuleSpec> layer;
  std::string final_norm = "model.norm";  // "" when the final norm has no parameters (OLMo)
  std::string final_norm_bias;            // as ModuleSpec::bias
  std::string head = "lm_head";
  std::string head_bias;                  // as ModuleSpec::bias (Phi: lm_head has a bias)
  MoeLayers moe = MoeLayers::None;
  std::string experts_key;                // config key with the number of routed experts
  // GptOssExperts stores [E, in, out] (@use_experts_implementation(is_transposed=True)); the others
  // [E, out, in]. PEFT's ParamWrapper reads in/out features from it (lora/layer.py).
  bool experts_transposed = false;
  // PEFT 0.21's v4 -> v5 MoE target conversion that applies ("mixtral", "qwen2_moe" or ""):
  // transformers' _MODEL_TO_CONVERSION_PATTERN as peft/utils/transformers_weight_conversion.py reads it.
  std::string peft_moe_conversion;
  std::string top_k_key;                  // config key with the experts each token goes to
  // Width of one routed expert's MLP and of the shared experts together ("" none), as expressions:
  // a token's MoE MLP is top_k experts plus the shared ones (what the time and memory models cost).
  std::string expert_width;
  std::string shared_expert_width;
  // Boolean config keys whose `true` adds modules the table does not describe yet: refused (exit 2)
  // rather than modelled without them.
  std::vector<std::string> unmodelled_flags;
  // Keys the config class reads into others that hookstream does not read yet (MiniMax-M3's legacy
  // moe_layer_freq and sparse_attention_config, from which MiniMaxM3VLTextConfig.__post_init__
  // writes mlp_layer_types and layer_types): a config.json with one is refused (exit 2) naming it,
  // rather than built without what it decides.
  std::vector<std::string> unread_keys;
  // The names mlp_layer_types may hold when the config class has its own (DeepseekV4Config:
  // "hash_moe", "moe"); empty: PreTrainedConfig's ALLOWED_MLP_LAYER_TYPES ("sparse", "dense").
  // The config class also cuts longer per-layer lists to num_hidden_layers before validating.
  std::vector<std::string> mlp_layer_types_allowed;
  // transformers' attribute_map of the config class: alias -> the key the table's expressions use
  // (Qwen3MoeConfig reads a config.json "num_experts" as num_local_experts).
  std::map<std::string, std::string> attribute_map;
  // Keys the config class's __post_init__ pops from its kwargs into another key, the popped one
  // winning over the key's own value (Lfm2Config: kwargs.pop("tie_embedding", ...) into
  // tie_word_embeddings, kwargs.pop("block_ff_dim", ...) into intermediate_size): old key -> key.
  std::vector<std::pair<std::string, std::string>> popped_keys;
  // The model class's _keep_in_fp32_modules_strict: parameters whose name (no PEFT prefix) a pattern
  // finds (regular-expression search, `*` as `.*`; transformers core_model_loading.py
  // build_glob_alternation) stay float32 in a bf16/fp16 model (PreTrainedModel._get_dtype_plan).
  // ERNIE-4.5-MoE keeps its router in float32. (_keep_in_fp32_modules applies to fp16 checkpoints
  // loaded by from_pretrained only, not to _from_config; not described.)
  std::vector<std::string> keep_in_fp32_strict;
  // Config-class defaults (transformers' *Config.__init__) for keys a config.json may omit.
  std::map<std::string, double> defaults;
  // Keys the config class (or the modelling code) derives when a config.json omits them or writes
  // null, as shape expressions evaluated in order (GPT-2: n_inner None -> 4 * n_embd).
  std::vector<std::pair<std::string, std::string>> derived;
  // Hybrid decoders: the layers whose token mixer is not attention (the first rule whose condition
  // holds for the layer decides; none: attention under "self_attn").
  std::vector<MixerRule> mixers;
  LayerTypesRule layer_types;
  // One block per layer (NemotronHBlock): a norm and one module, the `mixer`, that is a token mixer
  // or a feed-forward network. A layer whose mixer rule is not TokenMixer::None has no MLP.
  bool one_block_per_layer = false;
  // The MLP's attribute in the layer ("mlp"; NemotronH: "mixer"), and whether it is gated: an
  // ungated MLP (NemotronHMLP: down_proj(relu2(up_proj(x)))) has no gate projection to cost.
  std::string mlp_module = "mlp";
  bool mlp_gated = true;
  // The causal-LM class declares no tied weights (NemotronHForCausalLM._tied_weights_keys = {}):
  // lm_head is its own tensor even with tie_word_embeddings true.
  bool never_tied = false;
  // The token embedding is nn.Embedding(vocab_size, width, padding_idx=pad_token_id) (LlamaModel and
  // most decoders in transformers 5.17), whose constructor asserts "Padding_idx must be within
  // num_embeddings" for a pad_token_id outside [-vocab_size, vocab_size) (torch/nn/modules/sparse.py).
  // GPT-2, GPT-BigCode, GPT-Neo, GPT-J, GPT-NeoX (and Japanese), BLOOM, Falcon, MPT, CodeGen, CTRL,
  // OpenAI-GPT, Mamba, Mamba-2, FalconMamba and NemotronH
  // build theirs without padding_idx, so any pad_token_id loads there.
  bool embedding_padding_idx = true;
  // The config class maps legacy layer_types names ("mamba", "conv" -> "linear_attention",
  // "attention" -> "full_attention": remap_legacy_layer_types) in its own __post_init__, before
  // validate_layer_type sees them (Qwen3NextConfig, Qwen3_5TextConfig, Qwen3_5MoeTextConfig,
  // GraniteMoeHybridConfig, OlmoHybridConfig); other classes refuse them.
  bool remaps_legacy_layer_types = false;
  // Attention and the layer's recurrent mixer read the same normed input and their outputs are
  // summed (FalconH1DecoderLayer: mamba(h) * ssm_out_multiplier + self_attn(h *
  // attention_in_multiplier) * attention_out_multiplier); the muP multipliers are floats, not tensors.
  bool parallel_mixer = false;
  // Modules registered after the final norm, with full paths (Gemma 4's per-layer embeddings:
  // Gemma4TextModel registers embed_tokens_per_layer, per_layer_model_projection and
  // per_layer_projection_norm after `norm`). Their forward runs before the layers, as embed_extras'.
  std::vector<ModuleSpec> after_norm;
  // Modules registered after the final norm (and after_norm) whose forward runs after the last layer,
  // before the final norm (DeepSeek-V4's hc_head, DeepseekV4HyperHead: it collapses the hc_mult
  // residual streams the norm then reads): their gradients are ready with the final norm's, first
  // in backward.
  std::vector<ModuleSpec> after_layers;
  // The width a dense layer's MLP is costed at (time and memory models), an expression over the
  // layer's values (see layer_rules); "" is intermediate_size.
  std::string mlp_width;
  // Composite model types whose config wraps this decoder in text_config and whose model nests it
  // under model.language_model, modelled when their other sub-configs (absent_sub_configs) are null:
  // Gemma 4's Gemma4Model builds vision_tower / audio_tower only for a vision_config / audio_config.
  std::vector<std::string> composite_types;
  std::vector<std::string> absent_sub_configs;
  // The config class reads `per_layer_config` (transformers' HeterogeneousConfigMixin,
  // integrations/heterogeneity/configuration_utils.py): {layer index: {key: value}} overrides of
  // that layer's keys. Other classes raise AmbiguousGlobalPerLayerAttributeError on such a config,
  // so hookstream refuses it there.
  bool reads_per_layer_config = false;
  // num_attention_heads as the config class sets it whatever the file says, an expression over the
  // file's keys and the defaults (JetMoeConfig.__post_init__: num_key_value_heads * num_experts_per_tok).
  std::string num_attention_heads_from;
  // Keys the config class takes as one number or a list of one per layer (Gemma3nTextConfig's
  // intermediate_size): a list is held per layer as per_layer_key(layer, key), its first entry as the key.
  std::vector<std::string> per_layer_lists;
  // The config class's __post_init__ rules over the parsed values (num_hidden_layers given), run
  // after the defaults: what a config.json may leave out that the class derives. Throws InputError
  // (naming `source`) for a config the model class cannot build.
  void (*config_rules)(std::map<std::string, double>& values, int num_hidden_layers, const std::string& source) = nullptr;
  // Per-layer keys the modelling code derives for layer `index` of `num_hidden_layers` (Gemma 4's
  // KV-shared layers, double-wide MLPs), set in that layer's values, which its modules' conditions
  // and shapes read.
  void (*layer_rules)(int index, int num_hidden_layers, std::map<std::string, double>& values) = nullptr;
  // What the description was checked against (see tests/sim/architectures/).
  std::string source;
};

// "per_layer_config.<layer>.<key>": how a config's per_layer_config override of `key` for layer
// `layer` is held in ModelConfig::values; the structure builder sets it as that layer's `key`.
std::string per_layer_key(int layer, const std::string& key);

// The architecture for a model_type (or one of its aliases); nullptr if hookstream does not model it.
const ArchitectureSpec* find_architecture(const std::string& model_type);
// The decoder a composite model_type (ArchitectureSpec::composite_types: "gemma4") wraps, or nullptr.
const ArchitectureSpec* find_composite_decoder(const std::string& model_type);
// Every modelled model_type, sorted (for messages and docs): the table's, and the vision-language
// types of sim/inputs/architectures/vision_tower.h.
std::vector<std::string> modelled_model_types();

// Evaluates a comma-separated list of dimension expressions. Each dimension is a sum of products
// of integers and config keys ("num_attention_heads*head_dim", "kv_lora_rank+qk_rope_head_dim").
// `values` holds the config's numeric keys; a key it lacks throws InputError naming `source`.
std::vector<long long> evaluate_shape(const std::string& expressions, const std::map<std::string, double>& values,
                                      const std::string& source);
// A condition ("" false, "1" true, "key", "!key", "key=value", "a==b", "a!=b", joined by "&" and
// "|"); a key the config lacks is false, or 0 in a comparison.
bool evaluate_flag(const std::string& flag, const std::map<std::string, double>& values);

}  // namespace hookstream
