// Vision towers and the projectors that join them to a text decoder, as data (like the decoder
// table in architecture.h). A tower is described once per vision_config.model_type (CLIP, SigLIP,
// Pixtral, InternViT, GLM-4V's: the modules of its embeddings, of one encoder layer and after the
// layers, with shapes as
// expressions over the vision_config keys); a vision-language model_type names which towers it
// takes, the parameters it registers on itself (LLaVA-NeXT's image_newline) and its projector (shapes
// over the text config's keys and the vision config's, the latter prefixed "vision_"). The
// structure builder (sim/inputs/model_structure.cc) walks both. The Qwen-VL towers (model.visual,
// VisionLayout::Qwen2VL/Qwen25VL/Qwen3VL) are built by their own code and are not in this table.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "sim/inputs/architectures/architecture.h"
#include "sim/inputs/model_config.h"

namespace hookstream {

// Roles of a tower's modules (ModuleSpec::role): in `embeddings`, ModuleKind::Conv is the patch
// embedding and EmbedOther anything applied right after it (CLIP's class_embedding and
// pre_layrnorm, position embeddings); in `block`, Q/K/V/O (or QKV), InputNorm (before attention),
// PostAttentionNorm (before the MLP), Gate/Up/Down (Up is fc1, Down fc2); in `post`, FinalNorm is
// the norm on last_hidden_state and AttentionOther the pooling head (its output, pooler_output, is
// never used by a vision-language model: no gradient reaches it).
struct VisionTowerSpec {
  std::string model_type;  // vision_config.model_type
  VisionLayout layout = VisionLayout::Clip;
  std::vector<ModuleSpec> embeddings;  // paths relative to the tower, registration order
  std::string blocks;                  // the ModuleList of encoder layers, relative to the tower
  std::string block_class;             // the encoder layer's class (FSDP wrapping, _no_split_modules)
  std::vector<ModuleSpec> block;       // relative to one encoder layer
  std::vector<ModuleSpec> post;        // after the layers, relative to the tower
  // A second stack of encoder layers run after the first (MllamaVisionModel.global_transformer:
  // num_global_layers gated layers), registered after `blocks` and before `post`; "" none.
  std::string global_blocks;
  std::string global_depth_key;
  std::vector<ModuleSpec> global_block;  // relative to one of its layers
  // Keys the config class derives as the length of a list key (MllamaVisionConfig.max_aspect_ratio_id
  // = len(supported_aspect_ratios)): key -> the list; without the list, `defaults` holds the key.
  std::map<std::string, std::string> list_lengths;
  // Linears whose class only derives from nn.Linear, which bitsandbytes leaves unquantized
  // (replace_with_bnb_linear converts `type(module) is nn.Linear`): SigLIP's
  // MultiheadAttention.out_proj (NonDynamicallyQuantizableLinear). Paths relative to the tower.
  std::vector<std::string> not_quantized;
  // The vision config's own spellings of the keys read here (GLM-4V: depth, num_heads, in_channels):
  // config key -> the key the expressions use.
  std::map<std::string, std::string> attribute_map;
  // The vision config class's defaults (SigLIP vision_use_head); a key "name=value" is a string
  // key's default, used when the config does not set that key.
  std::map<std::string, double> defaults;
  // The position table's size is the config's own num_patches (Siglip2VisionEmbeddings: NaFlex
  // images of any shape share one table of num_patches entries), not (image_size // patch_size)^2.
  bool num_patches_from_config = false;
  std::string source;
};

// Where the projector's input comes from.
enum class VisionFeatures {
  // image_outputs.last_hidden_state: every layer and the tower's final norm are on the path.
  LastHiddenState,
  // image_outputs.hidden_states[vision_feature_layer] (an int or a list): hidden_states[0] is the
  // embeddings' output, [i] layer i-1's; the final norm and the layers after the deepest selected
  // one run but feed nothing the loss reads.
  HiddenStates,
  // last_hidden_state when vision_feature_layer is -1, else hidden_states[vision_feature_layer]
  // (InternVLModel.get_image_features).
  LastOrHiddenStates,
};

struct VisionLanguageSpec {
  std::string model_type;
  std::vector<std::string> towers;      // the vision_config.model_type values the model class builds
  std::string tower = "model.vision_tower";
  // Where the text decoder's "model.*" modules and its head are, when not model.language_model.* and
  // lm_head (Llama4ForConditionalGeneration: language_model = Llama4ForCausalLM, so
  // language_model.model.* and language_model.lm_head); empty: the defaults.
  std::string text_prefix;
  std::string head;
  // Parameters registered on the model itself (listed before its children): LLaVA-NeXT's
  // image_newline. Full paths.
  std::vector<ModuleSpec> model_params;
  std::vector<ModuleSpec> projector;    // full paths, registration order
  // A stack of layers inside the projector, after `projector`'s modules (Idefics2Connector's
  // perceiver_resampler.layers): the ModuleList's full path, the model value with its length, the
  // modules of one layer (relative to it), then the modules after the stack (full paths).
  std::string projector_blocks;
  std::string projector_depth_key;
  std::vector<ModuleSpec> projector_block;
  std::vector<ModuleSpec> projector_post;
  // A third sub-config the projector reads (Idefics2Config.perceiver_config): its numeric keys go
  // into the model's values as "<prefix>_<key>" (prefix: the key up to "_config"), over the
  // defaults' "<prefix>_<key>" entries. "" none.
  std::string sub_config;
  // The projector is registered after the language model (PaddleOCRVLModel.__init__: visual,
  // language_model, then projector), so named_parameters() lists it between the decoder's final
  // norm and the head; forward still runs it before the decoder.
  bool projector_after_text = false;
  // The projector modules' leaf names in the order forward runs them, when that is not the
  // registration order (Gemma 3: mm_soft_emb_norm before the mm_input_projection_weight matmul).
  std::vector<std::string> forward_order;
  VisionFeatures features = VisionFeatures::HiddenStates;
  std::string feature_layer_key = "vision_feature_layer";
  // The config class's default when the key is absent (VipLlavaConfig: [-2, -5, -8, -11, 6]); empty:
  // defaults[feature_layer_key].
  std::vector<int> default_feature_layers;
  // The config class copies text_config.tie_word_embeddings when its own is false (LlavaConfig,
  // LlavaOnevisionConfig, LlavaNextVideoConfig __post_init__: "saved in text config for those models").
  bool tie_from_text = false;
  // Without the key, the config class takes text_config.tie_word_embeddings (ShieldGemma2Config).
  bool tie_default_from_text = false;
  // A key the config class pops into tie_word_embeddings, winning over it (Lfm2VlConfig.__post_init__:
  // kwargs.pop("tie_embedding", self.tie_word_embeddings)); "" none.
  std::string popped_tie_key;
  // Image patches per side that become one text token ("" none): Mistral-3's spatial_merge_size,
  // Gemma 3's average pool kernel. For the time model only (patches per image token).
  std::string merge;
  std::map<std::string, double> defaults;  // the composite config class's defaults
  // The model class declares no tied weights (MllamaForConditionalGeneration: no
  // _tied_weights_keys): lm_head is its own tensor whatever tie_word_embeddings says.
  bool never_tied = false;
  // Keys the projector's shapes (and `merge`) derive from a config number, in order, each able to
  // read the ones before and the vision config's keys as "vision_<key>": v = value ** exponent, then
  // int(factor / v) when `invert` (InternVL's int(1 / downsample_ratio)), else int(v * factor)
  // (Cohere2-Vision's alignment_intermediate_size // 2, the SwiGLU half); then, with `divide_by`,
  // floor-divided by that key (Gemma 3's patches_per_image // tokens_per_side).
  struct DerivedKey {
    std::string key, from;
    double factor = 1;
    bool invert = false;
    double exponent = 1;
    std::string divide_by;
  };
  std::vector<DerivedKey> derived;
  std::string source;
};

const VisionTowerSpec* find_vision_tower(const std::string& vision_model_type);
const VisionLanguageSpec* find_vision_language(const std::string& model_type);
// Every vision-language model_type of the table, sorted.
std::vector<std::string> vision_language_model_types();

}  // namespace hookstream
