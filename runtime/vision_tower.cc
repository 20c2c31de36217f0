#include "runtime/vision_tower.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace hookstream {

bool vision_tower_supported(const VisionTowerConfig& config) {
  // Described towers given a Qwen-VL layout for the simulator's activation estimate whose blocks the
  // code below does not compute (branch arch13): EXAONE 4.5's grouped key/value heads in attn.qkv,
  // Kimi-K2.5's separate q/k/v_proj. Simulated, not executed.
  if (config.model_type == "exaone4_5_vision" || config.model_type == "kimi_k25_vision") return false;
  switch (config.layout) {
    case VisionLayout::Qwen2VL:
    case VisionLayout::Qwen25VL:
    case VisionLayout::Qwen3VL:
      return true;
    case VisionLayout::Clip:
    case VisionLayout::Siglip:
    case VisionLayout::Pixtral:
    case VisionLayout::InternVL:
      // Described towers (sim/inputs/architectures/vision_tower.h) are simulated, not executed.
      return false;
  }
  return false;
}

int64_t vision_patch_features(const VisionTowerConfig& v) {
  return int64_t(v.in_channels) * v.temporal_patch_size * v.patch_size * v.patch_size;
}

at::Tensor vision_tower_forward(const ModelStructure& structure, const VisionTowerConfig& v, const ParameterTable& p,
                                const ModelStepView& step, const at::Tensor& pixels, const VisionTowerOps& ops,
                                std::vector<at::Tensor>& deepstack) {
  // Qwen2.5-VL's norms are RMSNorms (Qwen2_5_VLRMSNorm, eps 1e-6); the other towers' LayerNorms.
  auto layer_norm = [&](const at::Tensor& x, int weight, int bias) {
    if (v.layout == VisionLayout::Qwen25VL) return ops.rms_norm(x, weight);
    return at::layer_norm(x, {x.size(-1)}, weight >= 0 ? p[weight] : at::Tensor(), bias >= 0 ? p[bias] : at::Tensor());
  };
  const int64_t merge = int64_t(v.spatial_merge_size) * v.spatial_merge_size;
  // Qwen3VLVisionPatchMerger: the final merger normalises each patch, then concatenates
  // spatial_merge_size^2 patches; DeepStack mergers (use_postshuffle_norm) concatenate first.
  auto merger = [&](const at::Tensor& x, int norm_weight, int norm_bias, const LinearUse& fc1, const LinearUse& fc2,
                    bool postshuffle) {
    at::Tensor merged = postshuffle ? layer_norm(x.reshape({x.size(0) / merge, x.size(1) * merge}), norm_weight, norm_bias)
                                    : layer_norm(x, norm_weight, norm_bias).reshape({x.size(0) / merge, x.size(1) * merge});
    return ops.linear(at::gelu(ops.linear(merged, fc1)), fc2);
  };
  at::Tensor x = ops.linear(pixels, structure.vision_patch_embed);  // [patches, hidden]
  if (structure.vision_pos_embed >= 0) {
    // Qwen3-VL adds learned position embeddings (interpolated from pos_embed.weight; here a lookup).
    const int64_t table = structure.parameters[structure.vision_pos_embed].shape[0];
    const at::Tensor positions = at::arange(x.size(0), at::TensorOptions().dtype(at::kLong).device(x.device())).remainder(table);
    x = x + p[structure.vision_pos_embed].index_select(0, positions).to(x.scalar_type());
  }
  const int64_t heads = v.num_heads > 0 ? v.num_heads : 1;
  const int64_t head_dim = v.hidden_size / heads;
  for (const VisionBlockUse& block : structure.vision_blocks) {
    if (step.skipped(block.path)) continue;
    const int64_t patches = x.size(0);
    const at::Tensor qkv = ops.linear(layer_norm(x, block.norm1_weight, block.norm1_bias), block.qkv)
                               .view({patches, 3, heads, head_dim})
                               .permute({1, 2, 0, 3});  // [3, heads, patches, head_dim]
    const at::Tensor context = ops.attention(qkv[0], qkv[1], qkv[2]).permute({1, 0, 2}).reshape({patches, -1});
    x = x + ops.linear(context, block.proj);
    const at::Tensor n2 = layer_norm(x, block.norm2_weight, block.norm2_bias);
    at::Tensor hidden;
    switch (v.layout) {
      case VisionLayout::Qwen3VL: hidden = at::gelu(ops.linear(n2, block.fc1)); break;
      case VisionLayout::Qwen2VL: {  // VisionMlp with hidden_act "quick_gelu": x * sigmoid(1.702 x)
        const at::Tensor up = ops.linear(n2, block.fc1);
        hidden = up * at::sigmoid(1.702 * up);
        break;
      }
      case VisionLayout::Qwen25VL:  // Qwen2_5_VLMLP: silu(gate(x)) * up(x)
        hidden = at::silu(ops.linear(n2, block.gate)) * ops.linear(n2, block.fc1);
        break;
      case VisionLayout::Clip:
      case VisionLayout::Siglip:
      case VisionLayout::Pixtral:
      case VisionLayout::InternVL:
        throw std::invalid_argument("vision_tower_forward: the " + v.model_type +
                                    " tower is described for the simulator only (callers check vision_tower_supported)");
    }
    x = x + ops.linear(hidden, block.fc2);
    for (const VisionMergerUse& ds : structure.vision_deepstack_mergers) {
      if (ds.block == block.index) deepstack.push_back(merger(x, ds.norm_weight, ds.norm_bias, ds.fc1, ds.fc2, true));
    }
  }
  return merger(x, structure.vision_merger_norm_weight, structure.vision_merger_norm_bias, structure.vision_merger_fc1,
                structure.vision_merger_fc2, false);
}

at::Tensor add_at_image_positions(const at::Tensor& hidden, const at::Tensor& image) {
  const int64_t seq = hidden.size(1);
  const int64_t tokens = std::min<int64_t>(image.size(0), seq);
  const at::Tensor head = hidden.narrow(1, 0, tokens) + image.narrow(0, 0, tokens).unsqueeze(0).to(hidden.scalar_type());
  return tokens < seq ? at::cat({head, hidden.narrow(1, tokens, seq - tokens)}, 1) : head;
}

}  // namespace hookstream
