// A model as the user already describes it: the fields of a Hugging Face `config.json` that decide
// which parameters exist, their shapes and dtypes. Nested `text_config` / `vision_config` (Qwen-VL,
// Llava style) are understood: the text decoder is the trained stack, the vision tower is its own
// parameter group.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hookstream {

enum class DType { Float32, BFloat16, Float16 };

std::string to_string(DType dtype);
int dtype_bytes(DType dtype);
// The name c10 prints for the dtype (c10::toString(ScalarType)): "Float", "BFloat16", "Half".
const char* c10_scalar_type_name(DType dtype);

// Which vision tower a config describes. The three Qwen-VL towers share the block layout (norm1,
// norm2, attn.qkv, attn.proj, mlp) and a 2-layer patch merger, and differ in names, biases and
// norms; they are built by code. CLIP, SigLIP and Pixtral are described as data
// (sim/inputs/architectures/vision_tower.h), joined to the decoder by a projector.
enum class VisionLayout {
  Qwen3VL,   // Qwen3VLVisionModel: patch-embed bias, LayerNorms, mlp.linear_fc1/2, merger.norm/linear_fc1/2
  Qwen2VL,   // Qwen2VisionTransformerPretrainedModel: no patch-embed bias, LayerNorms, mlp.fc1/2, merger.ln_q/mlp.0/mlp.2
  Qwen25VL,  // Qwen2_5_VisionTransformerPretrainedModel: as Qwen2-VL with RMSNorms and a gated mlp (gate/up/down_proj)
  Clip,      // CLIPVisionModel (LLaVA, LLaVA-NeXT)
  Siglip,    // SiglipVisionModel (Gemma 3, PaliGemma, LLaVA-OneVision)
  Pixtral,   // PixtralVisionModel (Mistral 3, Pixtral-12B as LLaVA)
  InternVL,  // InternVLVisionModel (InternVL 3)
};

struct VisionTowerConfig {
  VisionLayout layout = VisionLayout::Qwen3VL;
  int depth = 0;               // number of ViT blocks (HF: depth / num_hidden_layers)
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_heads = 0;
  int in_channels = 3;
  int patch_size = 14;
  int temporal_patch_size = 1;
  int spatial_merge_size = 1;  // patch merger (Qwen-VL); output projects to the text hidden size
  int out_hidden_size = 0;
  // Qwen3-VL: learned position embedding table (`pos_embed`, an nn.Embedding); 0 when absent.
  int num_position_embeddings = 0;
  // Qwen3-VL: blocks whose output also goes through its own patch merger (`deepstack_merger_list`)
  // and is added to the first decoder layers' hidden states. Empty when absent.
  std::vector<int> deepstack_visual_indexes;
  // A described tower (Clip, Siglip, Pixtral): vision_config.model_type, and the vision config's
  // numeric and boolean keys with the config class's defaults and num_patches
  // ((image_size // patch_size)^2), which the tower's shape expressions read.
  std::string model_type;
  std::map<std::string, double> values;
  // The hidden_states indices the projector reads (vision_feature_layer, made non-negative:
  // hidden_states has depth + 1 entries); empty when it reads last_hidden_state.
  std::vector<int> feature_layers;
};

struct ModelConfig {
  std::string source;          // file path or "preset:NAME"; used in error messages and reports
  std::string model_type;      // e.g. llama, qwen2, qwen3, qwen3_vl
  std::string architecture;    // first entry of `architectures`, if any
  // config.json auto_map.AutoModelForCausalLM ("modeling_deepseek.DeepseekV3ForCausalLM"): the
  // custom modelling code transformers runs instead of its own class when trust_remote_code is on.
  std::string remote_code_class;
  // DeepSeek's router rule (config.json "topk_method"): "noaux_tc" gives the remote code's MoEGate
  // an e_score_correction_bias parameter.
  std::string topk_method;
  // The decoder layout hookstream builds (sim/inputs/architectures/architecture.h): the model_type of the
  // table entry that models this config ("llama" for a hand-written config without model_type).
  std::string decoder_type = "llama";
  // Every numeric and boolean key of the decoder's config (text_config over the top level; booleans
  // as 0/1), completed with the architecture's config-class defaults and the derived head_dim and
  // num_key_value_heads: what the table's shape expressions are evaluated against.
  std::map<std::string, double> values;
  // Qwen2-MoE/Qwen3-MoE `mlp_only_layers`: layers that keep a dense MLP.
  std::vector<int> mlp_only_layers;
  // `mlp_layer_types` ("dense" / "sparse" per layer; Cohere2-MoE, DeepSeek-V3.2, EXAONE-MoE).
  std::vector<std::string> mlp_layer_types;
  // Llama 4 `moe_layers`: the indices of the layers with a sparse MoE block (nullopt: not in the file).
  std::optional<std::vector<int>> moe_layers;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;            // defaults to hidden_size / num_attention_heads
  int vocab_size = 0;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v biases (Qwen2 always has them)
  bool qk_norm = false;         // per-head RMSNorm on q and k (Qwen3)
  DType torch_dtype = DType::BFloat16;
  // Numerics the runtime's model uses (runtime/train_model.h); the simulator ignores them.
  // transformers' LlamaConfig defaults.
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  // config.json "rope_scaling" (transformers' ROPE_INIT_FUNCTIONS, modeling_rope_utils.py): the
  // frequency rules the runtime implements. "default" (also Qwen-VL's M-RoPE, which equals plain
  // RoPE on text tokens), "linear" (inv_freq / factor) and "llama3" (Llama 3.1/3.2/3.3); other types
  // (yarn, dynamic, longrope) are kept by name: they change no shape, and hookstream run refuses them.
  std::string rope_type = "default";
  double rope_factor = 1.0;
  double rope_low_freq_factor = 1.0, rope_high_freq_factor = 4.0;
  double rope_original_max_position_embeddings = 8192;
  double initializer_range = 0.02;
  // Prefix of the text decoder's modules as named_parameters() spells them:
  // "model" for *ForCausalLM, "model.language_model" for Qwen3-VL.
  std::string text_prefix = "model";
  std::optional<VisionTowerConfig> vision;
};

// Reads a config.json. Throws InputError naming the file and the missing/invalid key.
ModelConfig load_model_config(const std::string& path);
// Parses config.json text (`source` is used in error messages).
ModelConfig parse_model_config(const std::string& json_text, const std::string& source);
// Bundled presets live in <data dir>/presets/NAME.json (data dir: $HOOKSTREAM_DATA_DIR if set, else
// the compile-time HOOKSTREAM_DATA_DIR). `name` may be a preset name (any case) or a Hugging Face id
// such as meta-llama/Meta-Llama-3.1-8B-Instruct. Returns the preset file's path if found.
std::optional<std::string> find_preset(const std::string& name);
// The presets directory find_preset() searches.
std::string preset_dir();
// Names of the bundled presets (file names without .json), sorted case-insensitively.
std::vector<std::string> list_presets();

}  // namespace hookstream
