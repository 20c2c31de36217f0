// The Qwen-VL vision towers' forward (Qwen2-VL, Qwen2.5-VL, Qwen3-VL with DeepStack), over a
// ModelStructure's vision parameters, shared by the oracle model (runtime/oracle_model.h: float32
// on CPU, its own attention) and `hookstream run`'s TrainModel (runtime/train_model.h: bf16 with
// LoRA, the fused attention kernels). Each caller passes its own linear, RMSNorm and attention, so
// the autograd graph (which parameters are used, in which order) is the same in both.
//
// What it computes, per transformers' modeling_qwen2_vl.py / modeling_qwen2_5_vl.py /
// modeling_qwen3_vl.py: the patch embedding (a Conv3d whose kernel equals its stride, i.e. a linear
// map of each flattened patch), Qwen3-VL's learned position embedding, the ViT blocks (pre-norm
// attention over the image's patches and an MLP: GELU (Qwen3-VL), quick-GELU (Qwen2-VL) or the
// gated SiLU MLP (Qwen2.5-VL)), DeepStack mergers on the listed blocks and the final patch merger
// into the text model's hidden size. Not computed: the 2-D rotary position embedding of the
// attention and the bilinear interpolation of Qwen3-VL's position table (a lookup of the first
// positions instead), Qwen2.5-VL's windowed attention (every block attends over the whole image):
// the parameters, the shapes and the gradients' paths are those of the real tower; the values are
// not.
#pragma once

#include <functional>
#include <vector>

#include <torch/torch.h>

#include "runtime/layer_function.h"
#include "runtime/model_step.h"
#include "sim/inputs/model_config.h"
#include "sim/inputs/model_structure.h"

namespace hookstream {

struct VisionTowerOps {
  // y = x W^T (+ b) (+ LoRA), W reshaped to 2-D when it is a convolution's kernel.
  std::function<at::Tensor(const at::Tensor& x, const LinearUse& use)> linear;
  // Qwen2.5-VL's Qwen2RMSNorm over the last dimension with parameter `weight`.
  std::function<at::Tensor(const at::Tensor& x, int weight)> rms_norm;
  // Non-causal attention of q, k, v: [heads, patches, head_dim] each.
  std::function<at::Tensor(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v)> attention;
};

// True for the layouts vision_tower_forward computes.
bool vision_tower_supported(const VisionTowerConfig& config);

// pixels: [patches, in_channels * temporal_patch_size * patch_size^2], patches a multiple of
// spatial_merge_size^2. Returns the merged image tokens [patches / merge^2, text hidden]; the
// DeepStack features (one per DeepStack merger, in block order) are appended to `deepstack`.
at::Tensor vision_tower_forward(const ModelStructure& structure, const VisionTowerConfig& config, const ParameterTable& p,
                                const ModelStepView& step, const at::Tensor& pixels, const VisionTowerOps& ops,
                                std::vector<at::Tensor>& deepstack);

// The image tokens (or a DeepStack feature) added to the first positions of hidden [batch, seq,
// hidden]: the batch's image placeholder positions, at the start of the sequence.
at::Tensor add_at_image_positions(const at::Tensor& hidden, const at::Tensor& image);

// Pixel patches for `image_tokens` merged tokens: [image_tokens * merge^2, patch features].
int64_t vision_patch_features(const VisionTowerConfig& config);

}  // namespace hookstream
