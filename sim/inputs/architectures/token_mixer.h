// What mixes tokens in a decoder layer. Most decoders use attention in every layer; hybrid decoders
// choose a mixer per layer from their config (Qwen3-Next / Qwen3.5 `layer_types`: "linear_attention"
// is a gated DeltaNet, "full_attention" attention). The layer's parameters come from the
// architecture table like any other module (their conditions read the layer's type); this names the
// mixer so that the forward graph, the time model and the memory model cost what runs.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hookstream {

enum class TokenMixer {
  Attention,
  // A chunked linear recurrence over a [key_dim x value_dim] state per head: gated DeltaNet
  // (Qwen3NextGatedDeltaNet, Qwen3_5GatedDeltaNet: fla's chunk_gated_delta_rule, chunk 64).
  GatedDeltaNet,
  // Mamba2's state-space duality scan (Bamba, GraniteMoeHybrid: BambaMixer, mamba_ssm's
  // mamba_chunk_scan_combined) over a [d_state x head_dim] state per head, chunk mamba_chunk_size.
  Mamba2,
  // Mamba1's selective scan (MambaMixer, FalconMambaMixer: mamba_ssm's selective_scan_fn) over a
  // [d_state] state per channel of the inner width: `heads` the channels, `key_dim` d_state,
  // `value_dim` 1, no chunks.
  Mamba1,
  // LFM2's gated short convolution (Lfm2ShortConv, Lfm2MoeShortConv): in_proj to B, C, x; B * x
  // through a causal depthwise conv1d of conv_L_cache taps over hidden_size channels; C * that, then
  // out_proj. No recurrent state beyond the conv's window: `heads`, `key_dim`, `value_dim`, `chunk` 0.
  ShortConv,
  // MiniMax's lightning attention (MiniMaxLightningAttention.forward): linear attention over blocks
  // of block_size tokens with a per-head decay; within a block (Q K^T * decay) V, across blocks
  // Q times the running [head_dim x head_dim] state K^T V. `heads` num_attention_heads, `key_dim`
  // and `value_dim` head_dim, `chunk` block_size.
  LightningAttention,
  // No token mixer: a block that is a feed-forward network alone (NemotronHBlock of type "mlp" or
  // "moe": norm, then the MLP or MoE as its `mixer`). One-block-per-layer decoders (NemotronH) give
  // a mixer block no MLP instead (DecoderLayerUse::has_mlp).
  None,
};

// Sizes of a recurrent mixer, evaluated per layer from the table's expressions (MixerRule).
struct RecurrentMixerShape {
  int64_t heads = 0;          // recurrent heads (linear_num_value_heads)
  int64_t key_dim = 0;        // per-head key (state rows) width
  int64_t value_dim = 0;      // per-head value (state columns) width
  int64_t chunk = 0;          // tokens per chunk of the chunked scan
  int64_t conv_channels = 0;  // channels of the causal depthwise conv1d
  int64_t conv_kernel = 0;    // its kernel width
};

// When a layer uses a mixer other than attention: `when` is a condition as evaluate_flag reads it
// (per layer, "layer_type=<type>" reads the layer's layer_types entry), `module` the mixer's
// attribute in the layer ("linear_attn"), and the sizes as shape expressions over config keys.
struct MixerRule {
  std::string when;
  TokenMixer mixer = TokenMixer::Attention;
  std::string module;
  std::string heads, key_dim, value_dim, chunk, conv_channels, conv_kernel;
};

// The per-layer types of a hybrid decoder as its config class reads them (Qwen3NextConfig,
// Qwen3_5TextConfig.__post_init__): `layer_types` when the config has it, with the legacy names
// remapped (configuration_utils.py _LEGACY_LAYER_TYPE_REMAP: "mamba"/"conv" -> "linear_attention",
// "attention" -> "full_attention"); without it, from the indices list (below) or: layer i is `every` when (i + 1) % interval == 0 and
// `other` otherwise, the interval from `interval_key` (default `interval_default`); with neither key,
// every layer is `other` (GraniteMoeHybridConfig). A type outside `known` is refused (the table has
// no modules for it). `known` empty: the architecture does not read layer_types for its mixers.
struct LayerTypesRule {
  // BambaConfig.layers_block_type: layer i is `every` when i is in the list `indices_key`
  // (attn_layer_indices), `other` otherwise; read instead of the interval when set.
  std::string indices_key;
  std::string interval_key;
  int interval_default = 0;
  std::string other, every;
  std::vector<std::string> known;
  // NemotronHConfig.__post_init__: without a list, `pattern_key` (hybrid_override_pattern) gives one
  // character per layer, each mapped by `pattern` ("M" -> "linear_attention", ...); with neither,
  // `default_types`. `count_layers`: num_hidden_layers is the list's length whatever the file says
  // (NemotronHConfig.num_hidden_layers is a property over layers_block_type).
  std::string pattern_key;
  std::vector<std::pair<char, std::string>> pattern;
  std::vector<std::string> default_types;
  bool count_layers = false;
  // Without the indices list every layer is `every` (Lfm2Config.__post_init__: full_attn_idxs None
  // is range(num_hidden_layers), all attention); otherwise every layer is `other` (Bamba).
  bool every_without_indices = false;
  // The config class has no default list: without layer_types the model cannot be built
  // (Lfm2MoeDecoderLayer indexes config.layer_types, None in Lfm2MoeConfig), so hookstream refuses.
  bool required = false;
  // The config class's list when the config has none (MllamaTextConfig.__post_init__:
  // cross_attention_layers None -> [3, 8, 13, 18, 23, 28, 33, 38]).
  std::vector<int> default_indices;
};

inline std::string to_string(TokenMixer mixer) {
  switch (mixer) {
    case TokenMixer::Attention: return "attention";
    case TokenMixer::GatedDeltaNet: return "gated_deltanet";
    case TokenMixer::Mamba2: return "mamba2";
    case TokenMixer::Mamba1: return "mamba1";
    case TokenMixer::ShortConv: return "short_conv";
    case TokenMixer::LightningAttention: return "lightning_attention";
    case TokenMixer::None: return "none (a feed-forward block)";
  }
  return "attention";
}

}  // namespace hookstream
