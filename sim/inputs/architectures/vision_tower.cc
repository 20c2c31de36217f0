// The vision towers and vision-language projectors hookstream models, each checked against
// named_parameters() of the model transformers 5.17.0 builds on the meta device (the structure
// oracle, oracles/structure_oracle.py, and fixtures in tests/sim/architectures/). Registration
// order inside a module: its own nn.Parameters first, then its children in __init__ order.
#include "sim/inputs/architectures/vision_tower.h"

#include <algorithm>

namespace hookstream {
namespace {

using K = ModuleKind;
using R = ModuleRole;

ModuleSpec linear(std::string path, R role, std::string in, std::string out, std::string bias, std::string when = "") {
  return ModuleSpec{std::move(path), K::Linear, role, std::move(in), std::move(out), std::move(bias), std::move(when), false, ""};
}
ModuleSpec norm(std::string path, R role, std::string shape, std::string bias, std::string when = "") {
  return ModuleSpec{std::move(path), K::Norm, role, "", std::move(shape), std::move(bias), std::move(when), false, ""};
}
// A bare nn.Parameter: the path's last piece is the parameter's name.
ModuleSpec tensor(std::string path, R role, std::string shape, std::string when = "") {
  return ModuleSpec{std::move(path), K::Tensor, role, "", std::move(shape), "", std::move(when), false, ""};
}
// nn.Conv2d(in, out, kernel_size=patch, stride=patch): weight [out, in, patch, patch].
ModuleSpec conv(std::string path, std::string in, std::string out_and_kernel, std::string bias) {
  return ModuleSpec{std::move(path), K::Conv, R::EmbedOther, std::move(in), std::move(out_and_kernel), std::move(bias), "", false, ""};
}
ModuleSpec embedding(std::string path, std::string shape) {
  return ModuleSpec{std::move(path), K::Embedding, R::EmbedOther, "", std::move(shape), "", "", false, ""};
}

// CLIPAttention / SiglipAttention: k_proj, v_proj, q_proj, out_proj, all nn.Linear(embed_dim,
// embed_dim, bias=True), registered in that order.
std::vector<ModuleSpec> encoder_attention(const std::string& prefix, const std::string& o_name, const std::string& bias) {
  return {linear(prefix + ".k_proj", R::K, "hidden_size", "hidden_size", bias),
          linear(prefix + ".v_proj", R::V, "hidden_size", "hidden_size", bias),
          linear(prefix + ".q_proj", R::Q, "hidden_size", "hidden_size", bias),
          linear(prefix + "." + o_name, R::O, "hidden_size", "hidden_size", bias)};
}
// CLIPMLP / SiglipMLP: fc1 (hidden -> intermediate), fc2, with biases.
std::vector<ModuleSpec> encoder_mlp(const std::string& prefix) {
  return {linear(prefix + ".fc1", R::Up, "hidden_size", "intermediate_size", "1"),
          linear(prefix + ".fc2", R::Down, "intermediate_size", "hidden_size", "1")};
}

std::vector<VisionTowerSpec> build_towers() {
  std::vector<VisionTowerSpec> t;
  {
    // CLIPVisionModel (transformers/models/clip/modeling_clip.py): CLIPVisionEmbeddings registers
    // class_embedding (nn.Parameter [embed_dim]), patch_embedding (Conv2d, bias=False) and
    // position_embedding (nn.Embedding(num_patches + 1, embed_dim)); then pre_layrnorm, the
    // encoder, post_layernorm (applied to the pooled class token only).
    VisionTowerSpec a;
    a.model_type = "clip_vision_model";
    a.layout = VisionLayout::Clip;
    a.embeddings = {tensor("embeddings.class_embedding", R::EmbedOther, "hidden_size"),
                    conv("embeddings.patch_embedding", "num_channels", "hidden_size,patch_size,patch_size_1", ""),
                    embedding("embeddings.position_embedding", "num_patches+1,hidden_size"),
                    norm("pre_layrnorm", R::EmbedOther, "hidden_size", "1")};
    a.blocks = "encoder.layers";
    a.block_class = "CLIPEncoderLayer";
    // CLIPEncoderLayer.__init__: self_attn, layer_norm1, mlp, layer_norm2.
    a.block = encoder_attention("self_attn", "out_proj", "1");
    a.block.push_back(norm("layer_norm1", R::InputNorm, "hidden_size", "1"));
    for (ModuleSpec& m : encoder_mlp("mlp")) a.block.push_back(m);
    a.block.push_back(norm("layer_norm2", R::PostAttentionNorm, "hidden_size", "1"));
    a.post = {norm("post_layernorm", R::FinalNorm, "hidden_size", "1")};
    a.defaults = {{"num_channels", 3}, {"patch_size", 32}, {"image_size", 224}};
    a.source = "transformers/models/clip/modeling_clip.py";
    t.push_back(a);
  }
  {
    // SiglipVisionModel (transformers/models/siglip/modeling_siglip.py): SiglipVisionEmbeddings
    // (patch_embedding Conv2d with bias, position_embedding nn.Embedding(num_patches, embed_dim)),
    // the encoder, post_layernorm on last_hidden_state, and the attention-pooling head when
    // use_head (True unless the config has vision_use_head: SiglipVisionTransformer.__init__).
    VisionTowerSpec a;
    a.model_type = "siglip_vision_model";
    a.layout = VisionLayout::Siglip;
    a.embeddings = {conv("embeddings.patch_embedding", "num_channels", "hidden_size,patch_size,patch_size_1", "1"),
                    embedding("embeddings.position_embedding", "num_patches,hidden_size")};
    a.blocks = "encoder.layers";
    a.block_class = "SiglipEncoderLayer";
    // SiglipEncoderLayer.__init__: layer_norm1, self_attn, layer_norm2, mlp.
    a.block = {norm("layer_norm1", R::InputNorm, "hidden_size", "1")};
    for (ModuleSpec& m : encoder_attention("self_attn", "out_proj", "1")) a.block.push_back(m);
    a.block.push_back(norm("layer_norm2", R::PostAttentionNorm, "hidden_size", "1"));
    for (ModuleSpec& m : encoder_mlp("mlp")) a.block.push_back(m);
    // SiglipMultiheadAttentionPoolingHead: probe [1, 1, H], nn.MultiheadAttention (in_proj_weight
    // [3H, H], in_proj_bias, out_proj: a Linear subclass PEFT's all-linear wraps), layernorm, mlp.
    a.post = {norm("post_layernorm", R::FinalNorm, "hidden_size", "1"),
              tensor("head.probe", R::AttentionOther, "1,1,hidden_size", "vision_use_head"),
              tensor("head.attention.in_proj_weight", R::AttentionOther, "3*hidden_size,hidden_size", "vision_use_head"),
              tensor("head.attention.in_proj_bias", R::AttentionOther, "3*hidden_size", "vision_use_head"),
              linear("head.attention.out_proj", R::AttentionOther, "hidden_size", "hidden_size", "1", "vision_use_head"),
              norm("head.layernorm", R::AttentionOther, "hidden_size", "1", "vision_use_head"),
              linear("head.mlp.fc1", R::AttentionOther, "hidden_size", "intermediate_size", "1", "vision_use_head"),
              linear("head.mlp.fc2", R::AttentionOther, "intermediate_size", "hidden_size", "1", "vision_use_head")};
    a.not_quantized = {"head.attention.out_proj"};
    a.defaults = {{"num_channels", 3}, {"patch_size", 16}, {"image_size", 224}, {"vision_use_head", 1}};
    a.source = "transformers/models/siglip/modeling_siglip.py";
    t.push_back(a);
    // Siglip2VisionTransformer (transformers/models/siglip2/modeling_siglip2.py), the NaFlex tower of
    // LFM2-VL: SigLIP's with Siglip2VisionEmbeddings, whose patch_embedding is an nn.Linear over the
    // num_channels * patch^2 pixels of a patch (bias) and whose position_embedding has the config's
    // num_patches entries (resized per image by interpolation, no parameters); the encoder, the
    // post_layernorm and the pooling head (use_head unless vision_use_head is false) are SigLIP's.
    {
      VisionTowerSpec b = a;
      b.model_type = "siglip2_vision_model";
      b.embeddings = {linear("embeddings.patch_embedding", R::EmbedOther, "num_channels*patch_size*patch_size", "hidden_size", "1"),
                      embedding("embeddings.position_embedding", "num_patches,hidden_size")};
      b.block_class = "Siglip2EncoderLayer";
      b.defaults = {{"num_channels", 3}, {"patch_size", 16}, {"num_patches", 256}, {"vision_use_head", 1}};
      b.num_patches_from_config = true;
      b.source = "transformers/models/siglip2/modeling_siglip2.py";
      t.push_back(b);
      // Cosmos3EdgeVisionModel (transformers/models/cosmos3_edge/modular_cosmos3_edge.py; branch
      // arch13), under model.visual: Siglip2VisionEmbeddings, the encoder of SigLIP2's layers
      // (Cosmos3EdgeVisionEncoderLayer), post_layernorm on last_hidden_state, and no pooling head.
      b.model_type = "cosmos3_edge_vision";
      b.block_class = "Cosmos3EdgeVisionEncoderLayer";
      b.post = {norm("post_layernorm", R::FinalNorm, "hidden_size", "1")};
      b.not_quantized = {};
      b.defaults = {{"num_channels", 3}, {"patch_size", 16}, {"num_patches", 256}, {"spatial_merge_size", 2}};
      b.source = "transformers/models/cosmos3_edge/modular_cosmos3_edge.py";
      t.push_back(b);
    }
    // PaddleOCRVisionModel (transformers/models/paddleocr_vl/modeling_paddleocr_vl.py; branch arch8):
    // SigLIP's layout under vision_model (PaddleOCRVisionEmbeddings: patch_embedding with bias,
    // position_embedding over (image_size // patch_size)^2; PaddleOCRVisionEncoderLayer: layer_norm1,
    // self_attn k/v/q/out_proj, layer_norm2, mlp fc1/fc2, all biased; rotary positions without
    // parameters), post_layernorm on last_hidden_state, and no pooling head.
    a.model_type = "paddleocr_vl_vision";
    a.block_class = "PaddleOCRVisionEncoderLayer";
    a.post = {norm("post_layernorm", R::FinalNorm, "hidden_size", "1")};
    a.not_quantized = {};
    a.defaults = {{"num_channels", 3}, {"patch_size", 14}, {"image_size", 384}, {"spatial_merge_size", 2}};
    a.source = "transformers/models/paddleocr_vl/modeling_paddleocr_vl.py";
    t.push_back(a);
  }
  {
    // PixtralVisionModel (transformers/models/pixtral/modeling_pixtral.py): patch_conv (Conv2d,
    // bias=False), ln_pre (PixtralRMSNorm), transformer.layers; rotary positions, no parameters.
    // PixtralAttentionLayer.__init__: attention_norm, feed_forward (gate/up/down_proj, bias=False),
    // attention (k/v/q/o_proj, bias=False, embed_dim -> embed_dim), ffn_norm.
    VisionTowerSpec a;
    a.model_type = "pixtral";
    a.layout = VisionLayout::Pixtral;
    a.embeddings = {conv("patch_conv", "num_channels", "hidden_size,patch_size,patch_size_1", ""),
                    norm("ln_pre", R::EmbedOther, "hidden_size", "")};
    a.blocks = "transformer.layers";
    a.block_class = "PixtralAttentionLayer";
    a.block = {norm("attention_norm", R::InputNorm, "hidden_size", ""),
               linear("feed_forward.gate_proj", R::Gate, "hidden_size", "intermediate_size", ""),
               linear("feed_forward.up_proj", R::Up, "hidden_size", "intermediate_size", ""),
               linear("feed_forward.down_proj", R::Down, "intermediate_size", "hidden_size", ""),
               linear("attention.k_proj", R::K, "hidden_size", "hidden_size", ""),
               linear("attention.v_proj", R::V, "hidden_size", "hidden_size", ""),
               linear("attention.q_proj", R::Q, "hidden_size", "hidden_size", ""),
               linear("attention.o_proj", R::O, "hidden_size", "hidden_size", ""),
               norm("ffn_norm", R::PostAttentionNorm, "hidden_size", "")};
    a.defaults = {{"num_channels", 3}, {"patch_size", 16}, {"image_size", 1024}};
    a.source = "transformers/models/pixtral/modeling_pixtral.py";
    t.push_back(a);
  }
  {
    // InternVLVisionModel (transformers/models/internvl/modeling_internvl.py): embeddings (cls_token
    // [1, 1, H], mask_token when use_mask_token, position_embeddings [1, num_patches + 1, H] when
    // use_absolute_position_embeddings, then patch_embeddings.projection: Conv2d with bias), the
    // encoder (encoder.layer), and a final LayerNorm unless use_mean_pooling.
    // InternVLVisionLayer.__init__: lambda_1, lambda_2 (layer scale, own parameters first), attention
    // (q/k/v_proj with bias=attention_bias, projection_layer with bias, q_norm/k_norm RMSNorms when
    // use_qk_norm), mlp (fc1, fc2), layernorm_before, layernorm_after (NORM2FN[norm_type]: a
    // LayerNorm, or an RMSNorm without bias).
    VisionTowerSpec a;
    a.model_type = "internvl_vision";
    a.layout = VisionLayout::InternVL;
    const std::string norm_bias = "norm_type=layer_norm";
    a.embeddings = {tensor("embeddings.cls_token", R::EmbedOther, "1,1,hidden_size"),
                    tensor("embeddings.mask_token", R::EmbedOther, "1,1,hidden_size", "use_mask_token"),
                    tensor("embeddings.position_embeddings", R::EmbedOther, "1,num_patches+1,hidden_size",
                           "use_absolute_position_embeddings"),
                    conv("embeddings.patch_embeddings.projection", "num_channels", "hidden_size,patch_size,patch_size_1", "1")};
    a.blocks = "encoder.layer";
    a.block_class = "InternVLVisionLayer";
    a.block = {tensor("lambda_1", R::AttentionOther, "hidden_size"),
               tensor("lambda_2", R::MlpOther, "hidden_size"),
               linear("attention.q_proj", R::Q, "hidden_size", "hidden_size", "attention_bias"),
               linear("attention.k_proj", R::K, "hidden_size", "hidden_size", "attention_bias"),
               linear("attention.v_proj", R::V, "hidden_size", "hidden_size", "attention_bias"),
               linear("attention.projection_layer", R::O, "hidden_size", "hidden_size", "1"),
               norm("attention.q_norm", R::QNorm, "hidden_size", "", "use_qk_norm"),
               norm("attention.k_norm", R::KNorm, "hidden_size", "", "use_qk_norm"),
               linear("mlp.fc1", R::Up, "hidden_size", "intermediate_size", "1"),
               linear("mlp.fc2", R::Down, "intermediate_size", "hidden_size", "1"),
               norm("layernorm_before", R::InputNorm, "hidden_size", norm_bias),
               norm("layernorm_after", R::PostAttentionNorm, "hidden_size", norm_bias)};
    a.post = {norm("layernorm", R::FinalNorm, "hidden_size", "1", "!use_mean_pooling")};
    a.defaults = {{"num_channels", 3}, {"use_absolute_position_embeddings", 1}, {"use_mean_pooling", 1},
                  {"norm_type=layer_norm", 1}};
    a.source = "transformers/models/internvl/modeling_internvl.py";
    t.push_back(a);
    // QianfanOCRVisionModel (transformers/models/qianfan_ocr/modular_qianfan_ocr.py; branch arch13):
    // InternVLVisionModel with its encoder deleted and the same layers registered as `layers`
    // (QianfanOCRVisionLayer: InternVLVisionLayer plus drop-path modules without parameters), so the
    // final layernorm (an nn.Identity under use_mean_pooling, the default) is registered before them
    // (listed with the embeddings, as Llama 4's layernorm_post; it still runs after the layers).
    // QianfanOCRVisionConfig: attention_bias True (InternVLVisionConfig's is False).
    a.model_type = "qianfan_ocr_vision";
    a.embeddings.push_back(a.post.front());
    a.post.clear();
    a.blocks = "layers";
    a.block_class = "QianfanOCRVisionLayer";
    a.defaults["attention_bias"] = 1;
    a.source = "transformers/models/qianfan_ocr/modular_qianfan_ocr.py";
    t.push_back(a);
  }
  {
    // Glm4vVisionModel (transformers/models/glm4v/modeling_glm4v.py), under model.visual:
    // embeddings.position_embedding (nn.Embedding(num_patches, hidden)), patch_embed.proj (Conv3d
    // [hidden, in_channels, temporal_patch_size, patch, patch] with bias), blocks (Glm4vVisionBlock:
    // norm1, norm2 RMSNorms, attn.qkv with bias=attention_bias, attn.proj without bias, mlp
    // gate/up/down_proj over out_hidden_size without bias), then merger (Glm4vVisionPatchMerger over
    // out_hidden_size: proj, post_projection_norm LayerNorm, gate/up_proj to intermediate_size,
    // down_proj; no biases), post_conv_layernorm, downsample (Conv2d hidden -> out_hidden, kernel
    // spatial_merge_size, bias), post_layernorm. Glm4vVisionModel.forward runs patch_embed,
    // post_conv_layernorm, the position embedding, the blocks, post_layernorm, downsample, merger
    // (the model's forward_order).
    VisionTowerSpec a;
    a.model_type = "glm4v_vision";
    // Qwen2.5-VL's block layout: modular_glm4v.py derives Glm4vVisionBlock, Glm4vVisionAttention and
    // Glm4VisionMlp from Qwen2_5_VLVisionBlock, Qwen2_5_VLVisionAttention and Qwen2_5_VLMLP; the rest
    // of the tower is this description's.
    a.layout = VisionLayout::Qwen25VL;
    a.attribute_map = {{"depth", "num_hidden_layers"}, {"num_heads", "num_attention_heads"}, {"in_channels", "num_channels"}};
    a.embeddings = {embedding("embeddings.position_embedding", "num_patches,hidden_size"),
                    conv("patch_embed.proj", "num_channels", "hidden_size,temporal_patch_size,patch_size,patch_size_1", "1")};
    a.blocks = "blocks";
    a.block_class = "Glm4vVisionBlock";
    a.block = {norm("norm1", R::InputNorm, "hidden_size", ""),
               norm("norm2", R::PostAttentionNorm, "hidden_size", ""),
               linear("attn.qkv", R::QKV, "hidden_size", "3*hidden_size", "attention_bias"),
               linear("attn.proj", R::O, "hidden_size", "hidden_size", ""),
               linear("mlp.gate_proj", R::Gate, "hidden_size", "out_hidden_size", ""),
               linear("mlp.up_proj", R::Up, "hidden_size", "out_hidden_size", ""),
               linear("mlp.down_proj", R::Down, "out_hidden_size", "hidden_size", "")};
    ModuleSpec downsample = conv("downsample", "hidden_size", "out_hidden_size,spatial_merge_size,spatial_merge_size", "1");
    downsample.role = R::MlpOther;
    a.post = {linear("merger.proj", R::MlpOther, "out_hidden_size", "out_hidden_size", ""),
              norm("merger.post_projection_norm", R::MlpOther, "out_hidden_size", "1"),
              linear("merger.gate_proj", R::MlpOther, "out_hidden_size", "intermediate_size", ""),
              linear("merger.up_proj", R::MlpOther, "out_hidden_size", "intermediate_size", ""),
              linear("merger.down_proj", R::MlpOther, "intermediate_size", "out_hidden_size", ""),
              norm("post_conv_layernorm", R::EmbedOther, "hidden_size", ""),
              downsample,
              norm("post_layernorm", R::FinalNorm, "hidden_size", "")};
    a.defaults = {{"num_channels", 3}, {"temporal_patch_size", 2}, {"spatial_merge_size", 2}};
    a.source = "transformers/models/glm4v/modeling_glm4v.py";
    t.push_back(a);
    // Glm4vMoeVisionModel (modeling_glm4v_moe.py, from modular_glm4v_moe.py): GLM-4V's tower under
    // its own vision_config.model_type and block class.
    a.model_type = "glm4v_moe_vision";
    a.block_class = "Glm4vMoeVisionBlock";
    a.source = "transformers/models/glm4v_moe/modeling_glm4v_moe.py";
    t.push_back(a);
    // transformers 4.5x's Glm4vMoeVisionConfig.model_type was "glm4v_moe" (v4.57.1
    // configuration_glm4v_moe.py): GLM-4.5V config.json files it saved name the tower so, and 5.17
    // builds Glm4vMoeVisionConfig from them all the same.
    a.model_type = "glm4v_moe";
    t.push_back(a);
  }
  {
    // Ovis2VisionModel (transformers/models/ovis2/modeling_ovis2.py; branch arch13), under
    // model.vision_tower: transformer (Ovis2VisionTransformer: embeddings = patch_embedding Conv2d with
    // bias, position_embedding nn.Embedding((image_size // patch_size)^2, hidden), rms_norm; encoder.layers
    // = Ovis2VisionEncoderLayer: attention k/v/q/out_proj with bias=qkv_bias, ffn gate/up/down_proj with
    // bias=mlp_bias, rms_norm1, rms_norm2 (weight-only RMSNorms); rms_norm on last_hidden_state), then
    // the visual tokenizer's head: head_linear (hidden * hidden_stride^2 -> vocab_size -
    // num_visual_indicator_tokens, no bias) and head_norm (LayerNorm), whose softmax (tokenize_function)
    // is the pooler_output the model reads. Ovis2VisionConfig has no model_type of its own;
    // "ovis2_vision" names it here.
    VisionTowerSpec a;
    a.model_type = "ovis2_vision";
    a.layout = VisionLayout::Clip;
    a.embeddings = {conv("transformer.embeddings.patch_embedding", "num_channels", "hidden_size,patch_size,patch_size_1", "1"),
                    embedding("transformer.embeddings.position_embedding", "num_patches,hidden_size"),
                    norm("transformer.embeddings.rms_norm", R::EmbedOther, "hidden_size", "")};
    a.blocks = "transformer.encoder.layers";
    a.block_class = "Ovis2VisionEncoderLayer";
    a.block = {linear("attention.k_proj", R::K, "hidden_size", "hidden_size", "qkv_bias"),
               linear("attention.v_proj", R::V, "hidden_size", "hidden_size", "qkv_bias"),
               linear("attention.q_proj", R::Q, "hidden_size", "hidden_size", "qkv_bias"),
               linear("attention.out_proj", R::O, "hidden_size", "hidden_size", "qkv_bias"),
               linear("ffn.gate_proj", R::Gate, "hidden_size", "intermediate_size", "mlp_bias"),
               linear("ffn.up_proj", R::Up, "hidden_size", "intermediate_size", "mlp_bias"),
               linear("ffn.down_proj", R::Down, "intermediate_size", "hidden_size", "mlp_bias"),
               norm("rms_norm1", R::InputNorm, "hidden_size", ""),
               norm("rms_norm2", R::PostAttentionNorm, "hidden_size", "")};
    const std::string visual_vocab = "vocab_size-num_visual_indicator_tokens";
    a.post = {norm("transformer.rms_norm", R::FinalNorm, "hidden_size", ""),
              linear("head_linear", R::MlpOther, "hidden_size*hidden_stride*hidden_stride", visual_vocab, ""),
              norm("head_norm", R::MlpOther, visual_vocab, "1")};
    a.defaults = {{"num_channels", 3}, {"patch_size", 14}, {"image_size", 224}, {"vocab_size", 16384}, {"hidden_stride", 1},
                  {"num_visual_indicator_tokens", 5}};
    a.source = "transformers/models/ovis2/modeling_ovis2.py";
    t.push_back(a);
  }
  {
    // MiniMaxM3VLVisionModel (transformers/models/minimax_m3_vl/modular_minimax_m3_vl.py; branch
    // arch13), under model.vision_tower: embeddings.proj (MiniMaxM3VLVisionEmbeddings, Qwen2.5-VL's
    // patch embedding: a Conv3d [hidden, num_channels, temporal_patch_size, patch, patch] without
    // bias), pre_layrnorm (LayerNorm), layers (MiniMaxM3VLVisionEncoderLayer = CLIPEncoderLayer:
    // self_attn k/v/q/out_proj, layer_norm1, mlp fc1/fc2, layer_norm2, all with biases; 2-D rotary
    // positions without parameters). No final norm: last_hidden_state is the last layer's output.
    VisionTowerSpec a;
    a.model_type = "minimax_m3_vl_vision";
    a.layout = VisionLayout::Clip;
    a.embeddings = {conv("embeddings.proj", "num_channels", "hidden_size,temporal_patch_size,patch_size,patch_size_1", ""),
                    norm("pre_layrnorm", R::EmbedOther, "hidden_size", "1")};
    a.blocks = "layers";
    a.block_class = "MiniMaxM3VLVisionEncoderLayer";
    a.block = encoder_attention("self_attn", "out_proj", "1");
    a.block.push_back(norm("layer_norm1", R::InputNorm, "hidden_size", "1"));
    for (ModuleSpec& m : encoder_mlp("mlp")) a.block.push_back(m);
    a.block.push_back(norm("layer_norm2", R::PostAttentionNorm, "hidden_size", "1"));
    a.defaults = {{"num_channels", 3}, {"patch_size", 14}, {"temporal_patch_size", 2}, {"spatial_merge_size", 2},
                  {"image_size", 2016}};
    a.source = "transformers/models/minimax_m3_vl/modular_minimax_m3_vl.py";
    t.push_back(a);
  }
  {
    // Kimi_K25VisionModel (transformers/models/kimi_k25/modular_kimi_k25.py; branch arch13), under
    // model.vision_tower: patch_embed (Kimi_K25VisionPatchEmbed: proj, an nn.Conv2d(3, hidden,
    // patch) with bias; pos_emb.position_embeddings, an nn.Parameter [pos_emb_height, pos_emb_width,
    // hidden] resampled per image), layers (Kimi_K25VisionEncoderLayer, a Qwen2VLVisionBlock: norm1,
    // norm2 LayerNorms, attn whose Kimi_K25VisionAttention adds q/k/v_proj (biases) after Qwen2-VL's
    // proj and deletes its qkv, so proj is listed first; mlp fc1/fc2 with biases), final_layernorm.
    // The projector reads pooler_output: final_layernorm's output averaged over each
    // merge_kernel_size window (no parameters).
    VisionTowerSpec a;
    a.model_type = "kimi_k25_vision";
    a.layout = VisionLayout::Qwen2VL;
    a.embeddings = {conv("patch_embed.proj", "3", "hidden_size,patch_size,patch_size_1", "1"),
                    tensor("patch_embed.pos_emb.position_embeddings", R::EmbedOther, "pos_emb_height,pos_emb_width,hidden_size")};
    a.blocks = "layers";
    a.block_class = "Kimi_K25VisionEncoderLayer";
    a.block = {norm("norm1", R::InputNorm, "hidden_size", "1"),
               norm("norm2", R::PostAttentionNorm, "hidden_size", "1"),
               linear("attn.proj", R::O, "hidden_size", "hidden_size", "1"),
               linear("attn.q_proj", R::Q, "hidden_size", "hidden_size", "1"),
               linear("attn.k_proj", R::K, "hidden_size", "hidden_size", "1"),
               linear("attn.v_proj", R::V, "hidden_size", "hidden_size", "1"),
               linear("mlp.fc1", R::Up, "hidden_size", "intermediate_size", "1"),
               linear("mlp.fc2", R::Down, "intermediate_size", "hidden_size", "1")};
    a.post = {norm("final_layernorm", R::FinalNorm, "hidden_size", "1")};
    // Kimi_K25VisionConfig's defaults; the class has no num_channels (3 input channels) and no
    // image_size (images of any size: nothing here reads num_patches).
    a.defaults = {{"num_channels", 3}, {"patch_size", 14}, {"pos_emb_height", 64},
                  {"pos_emb_width", 64}, {"merge_kernel_size", 2}, {"merge_kernel_size_1", 2}};
    a.source = "transformers/models/kimi_k25/modular_kimi_k25.py";
    t.push_back(a);
  }
  {
    // Exaone4_5_VisionModel (transformers/models/exaone4_5/modular_exaone4_5.py; branch arch13),
    // under model.visual: Qwen2_5_VisionTransformerPretrainedModel's modules (patch_embed.proj: a
    // Conv3d without bias; blocks: norm1, norm2 RMSNorms, attn, mlp gate/up/down_proj with biases;
    // merger: ln_q RMSNorm, mlp.0 over hidden * spatial_merge_size^2, mlp.2 to out_hidden_size, with
    // biases), where Exaone4_5_VisionAttention deletes Qwen2.5-VL's qkv and registers its own after
    // proj: nn.Linear(hidden, (num_heads + 2 * num_key_value_heads) * head_dim, bias=True), grouped
    // key/value heads (Exaone4_5_VisionConfig.num_key_value_heads 8 of 16 heads). No position
    // table (2-D rotary), so no image_size.
    VisionTowerSpec a;
    a.model_type = "exaone4_5_vision";
    a.layout = VisionLayout::Qwen25VL;
    a.attribute_map = {{"depth", "num_hidden_layers"}, {"num_heads", "num_attention_heads"}, {"in_channels", "num_channels"}};
    a.embeddings = {conv("patch_embed.proj", "num_channels", "hidden_size,temporal_patch_size,patch_size,patch_size_1", "")};
    a.blocks = "blocks";
    a.block_class = "Exaone4_5_VisionBlock";
    a.block = {norm("norm1", R::InputNorm, "hidden_size", ""),
               norm("norm2", R::PostAttentionNorm, "hidden_size", ""),
               linear("attn.proj", R::O, "hidden_size", "hidden_size", "1"),
               linear("attn.qkv", R::QKV, "hidden_size", "hidden_size+2*num_key_value_heads*head_dim", "1"),
               linear("mlp.gate_proj", R::Gate, "hidden_size", "intermediate_size", "1"),
               linear("mlp.up_proj", R::Up, "hidden_size", "intermediate_size", "1"),
               linear("mlp.down_proj", R::Down, "intermediate_size", "hidden_size", "1")};
    const std::string merged = "hidden_size*spatial_merge_size*spatial_merge_size";
    a.post = {norm("merger.ln_q", R::MlpOther, "hidden_size", ""),
              linear("merger.mlp.0", R::MlpOther, merged, merged, "1"),
              linear("merger.mlp.2", R::MlpOther, merged, "out_hidden_size", "1")};
    a.defaults = {{"num_channels", 3}, {"temporal_patch_size", 2}, {"spatial_merge_size", 2}, {"num_key_value_heads", 8}};
    a.source = "transformers/models/exaone4_5/modular_exaone4_5.py";
    t.push_back(a);
  }
  {
    // GlmOcrVisionModel (transformers/models/glm_ocr/modeling_glm_ocr.py, from modular_glm_ocr.py;
    // branch arch8), under model.visual: GLM-4V's tower without `embeddings` and
    // post_conv_layernorm (GlmOcrVisionModel.__init__ deletes both): patch_embed.proj (Conv3d with
    // bias), blocks (GlmOcrVisionBlock: norm1, norm2, attn.qkv and attn.proj with
    // bias=attention_bias, then attn.q_norm / k_norm RMSNorms over head_dim = hidden_size //
    // num_heads, mlp gate/up/down_proj over the vision intermediate_size with bias=attention_bias),
    // merger (GlmOcrVisionPatchMerger(dim=out_hidden_size, context_dim=out_hidden_size *
    // in_channels), no biases but the LayerNorm's), downsample (Conv2d with bias), post_layernorm.
    // forward: patch_embed, blocks, post_layernorm, downsample, merger (the model's forward_order).
    VisionTowerSpec a;
    a.model_type = "glm_ocr_vision";
    a.layout = VisionLayout::Qwen25VL;
    a.attribute_map = {{"depth", "num_hidden_layers"}, {"num_heads", "num_attention_heads"}, {"in_channels", "num_channels"}};
    a.embeddings = {conv("patch_embed.proj", "num_channels", "hidden_size,temporal_patch_size,patch_size,patch_size_1", "1")};
    a.blocks = "blocks";
    a.block_class = "GlmOcrVisionBlock";
    a.block = {norm("norm1", R::InputNorm, "hidden_size", ""),
               norm("norm2", R::PostAttentionNorm, "hidden_size", ""),
               linear("attn.qkv", R::QKV, "hidden_size", "3*hidden_size", "attention_bias"),
               linear("attn.proj", R::O, "hidden_size", "hidden_size", "attention_bias"),
               norm("attn.q_norm", R::QNorm, "head_dim", ""),
               norm("attn.k_norm", R::KNorm, "head_dim", ""),
               linear("mlp.gate_proj", R::Gate, "hidden_size", "intermediate_size", "attention_bias"),
               linear("mlp.up_proj", R::Up, "hidden_size", "intermediate_size", "attention_bias"),
               linear("mlp.down_proj", R::Down, "intermediate_size", "hidden_size", "attention_bias")};
    ModuleSpec downsample = conv("downsample", "hidden_size", "out_hidden_size,spatial_merge_size,spatial_merge_size", "1");
    downsample.role = R::MlpOther;
    a.post = {linear("merger.proj", R::MlpOther, "out_hidden_size", "out_hidden_size", ""),
              norm("merger.post_projection_norm", R::MlpOther, "out_hidden_size", "1"),
              linear("merger.gate_proj", R::MlpOther, "out_hidden_size", "out_hidden_size*num_channels", ""),
              linear("merger.up_proj", R::MlpOther, "out_hidden_size", "out_hidden_size*num_channels", ""),
              linear("merger.down_proj", R::MlpOther, "out_hidden_size*num_channels", "out_hidden_size", ""),
              downsample,
              norm("post_layernorm", R::FinalNorm, "hidden_size", "")};
    a.defaults = {{"num_channels", 3}, {"temporal_patch_size", 2}, {"spatial_merge_size", 2}, {"attention_bias", 1},
                  {"image_size", 336}};
    a.source = "transformers/models/glm_ocr/modeling_glm_ocr.py";
    t.push_back(a);
  }
  {
    // Llama4VisionModel (transformers/models/llama4/modeling_llama4.py), under vision_model:
    // class_embedding [H] and positional_embedding_vlm [(image_size // patch_size)^2 + 1, H] (own
    // parameters, listed first), patch_embedding (Llama4UnfoldConvolution: an nn.Linear over the
    // unfolded num_channels * patch^2 pixels, bias=False), layernorm_pre, layernorm_post (LayerNorms;
    // the post norm runs after the layers), model.layers (Llama4VisionEncoderLayer: self_attn q/k/v/o
    // with biases, mlp fc1/fc2 with biases, input_layernorm, post_attention_layernorm), then
    // vision_adapter (Llama4VisionPixelShuffleMLP: mlp.fc1 intermediate_size -> projector_input_dim,
    // mlp.fc2 projector_output_dim -> projector_output_dim, no biases), the tower's own projector.
    VisionTowerSpec a;
    a.model_type = "llama4_vision_model";
    a.layout = VisionLayout::Clip;
    a.embeddings = {tensor("class_embedding", R::EmbedOther, "hidden_size"),
                    tensor("positional_embedding_vlm", R::EmbedOther, "num_patches+1,hidden_size"),
                    linear("patch_embedding.linear", R::EmbedOther, "num_channels*patch_size*patch_size", "hidden_size", ""),
                    norm("layernorm_pre", R::EmbedOther, "hidden_size", "1"),
                    norm("layernorm_post", R::FinalNorm, "hidden_size", "1")};
    a.blocks = "model.layers";
    a.block_class = "Llama4VisionEncoderLayer";
    a.block = {linear("self_attn.q_proj", R::Q, "hidden_size", "hidden_size", "1"),
               linear("self_attn.k_proj", R::K, "hidden_size", "hidden_size", "1"),
               linear("self_attn.v_proj", R::V, "hidden_size", "hidden_size", "1"),
               linear("self_attn.o_proj", R::O, "hidden_size", "hidden_size", "1"),
               linear("mlp.fc1", R::Up, "hidden_size", "intermediate_size", "1"),
               linear("mlp.fc2", R::Down, "intermediate_size", "hidden_size", "1"),
               norm("input_layernorm", R::InputNorm, "hidden_size", "1"),
               norm("post_attention_layernorm", R::PostAttentionNorm, "hidden_size", "1")};
    a.post = {linear("vision_adapter.mlp.fc1", R::MlpOther, "intermediate_size", "projector_input_dim", ""),
              linear("vision_adapter.mlp.fc2", R::MlpOther, "projector_output_dim", "projector_output_dim", "")};
    a.defaults = {{"num_channels", 3}, {"patch_size", 14}, {"image_size", 448}, {"projector_input_dim", 4096},
                  {"projector_output_dim", 4096}, {"vision_output_dim", 7680}};
    a.source = "transformers/models/llama4/modeling_llama4.py";
    t.push_back(a);
  }
  {
    // MllamaVisionModel (transformers/models/mllama/modeling_mllama.py), under model.vision_model:
    // its own class_embedding [H] first, then patch_embedding (Conv2d, bias=False),
    // gated_positional_embedding (MllamaPrecomputedPositionEmbedding: gate [1], embedding
    // [(image_size // patch_size)^2 + 1, H], tile_embedding nn.Embedding(max_aspect_ratio_id + 1,
    // max_num_tiles * num_patches * H) with num_patches counting the class token),
    // pre_tile_positional_embedding and post_tile_positional_embedding
    // (MllamaPrecomputedAspectRatioEmbedding(is_gated=True): gate [1], embedding
    // nn.Embedding(max_aspect_ratio_id + 1, max_num_tiles * H)), layernorm_pre, layernorm_post
    // (LayerNorms with bias; the post norm runs after `transformer`), transformer.layers
    // (MllamaVisionEncoderLayer: self_attn q/k/v/o without bias, mlp fc1/fc2 with bias,
    // input_layernorm, post_attention_layernorm) and global_transformer.layers (num_global_layers of
    // the same layer with is_gated: gate_attn and gate_ffn [1], its own parameters, listed first).
    // max_aspect_ratio_id is len(supported_aspect_ratios) (8 by default, MllamaVisionConfig).
    // Approximate in the forward graph: layernorm_post runs between the two stacks and the features
    // are the last global layer's output concatenated with intermediate_layers_indices' outputs
    // (vision_output_dim); here the norm is costed after both stacks and the projector reads the
    // last hidden state.
    VisionTowerSpec a;
    a.model_type = "mllama_vision_model";
    a.layout = VisionLayout::Clip;
    a.attribute_map = {{"attention_heads", "num_attention_heads"}};
    const std::string tile = "max_aspect_ratio_id+1,max_num_tiles*num_patches*hidden_size+max_num_tiles*hidden_size";
    a.embeddings = {tensor("class_embedding", R::EmbedOther, "hidden_size"),
                    conv("patch_embedding", "num_channels", "hidden_size,patch_size,patch_size_1", ""),
                    tensor("gated_positional_embedding.gate", R::EmbedOther, "1"),
                    tensor("gated_positional_embedding.embedding", R::EmbedOther, "num_patches+1,hidden_size"),
                    embedding("gated_positional_embedding.tile_embedding", tile),
                    tensor("pre_tile_positional_embedding.gate", R::EmbedOther, "1"),
                    embedding("pre_tile_positional_embedding.embedding", "max_aspect_ratio_id+1,max_num_tiles*hidden_size"),
                    tensor("post_tile_positional_embedding.gate", R::EmbedOther, "1"),
                    embedding("post_tile_positional_embedding.embedding", "max_aspect_ratio_id+1,max_num_tiles*hidden_size"),
                    norm("layernorm_pre", R::EmbedOther, "hidden_size", "1"),
                    norm("layernorm_post", R::FinalNorm, "hidden_size", "1")};
    a.blocks = "transformer.layers";
    a.block_class = "MllamaVisionEncoderLayer";
    a.block = {linear("self_attn.q_proj", R::Q, "hidden_size", "hidden_size", ""),
               linear("self_attn.k_proj", R::K, "hidden_size", "hidden_size", ""),
               linear("self_attn.v_proj", R::V, "hidden_size", "hidden_size", ""),
               linear("self_attn.o_proj", R::O, "hidden_size", "hidden_size", ""),
               linear("mlp.fc1", R::Up, "hidden_size", "intermediate_size", "1"),
               linear("mlp.fc2", R::Down, "intermediate_size", "hidden_size", "1"),
               norm("input_layernorm", R::InputNorm, "hidden_size", "1"),
               norm("post_attention_layernorm", R::PostAttentionNorm, "hidden_size", "1")};
    a.global_blocks = "global_transformer.layers";
    a.global_depth_key = "num_global_layers";
    a.global_block = {tensor("gate_attn", R::AttentionOther, "1"), tensor("gate_ffn", R::MlpOther, "1")};
    a.global_block.insert(a.global_block.end(), a.block.begin(), a.block.end());
    a.list_lengths = {{"max_aspect_ratio_id", "supported_aspect_ratios"}};
    a.defaults = {{"num_channels", 3}, {"patch_size", 14}, {"image_size", 448}, {"num_global_layers", 8},
                  {"max_num_tiles", 4}, {"max_aspect_ratio_id", 8}, {"vision_output_dim", 7680}};
    a.source = "transformers/models/mllama/modeling_mllama.py";
    t.push_back(a);
  }
  {
    // Idefics2VisionTransformer (transformers/models/idefics2/modeling_idefics2.py), under
    // model.vision_model: embeddings (patch_embedding Conv2d with bias, position_embedding
    // nn.Embedding((image_size // patch_size)^2, H)), encoder.layers (Idefics2EncoderLayer.__init__:
    // self_attn k/v/q/out_proj with biases, layer_norm1, mlp fc1/fc2 with biases, layer_norm2:
    // CLIP's order), post_layernorm on last_hidden_state; no pooling head.
    VisionTowerSpec a;
    a.model_type = "idefics2_vision";
    a.layout = VisionLayout::Siglip;
    a.embeddings = {conv("embeddings.patch_embedding", "num_channels", "hidden_size,patch_size,patch_size_1", "1"),
                    embedding("embeddings.position_embedding", "num_patches,hidden_size")};
    a.blocks = "encoder.layers";
    a.block_class = "Idefics2EncoderLayer";
    a.block = encoder_attention("self_attn", "out_proj", "1");
    a.block.push_back(norm("layer_norm1", R::InputNorm, "hidden_size", "1"));
    for (ModuleSpec& m : encoder_mlp("mlp")) a.block.push_back(m);
    a.block.push_back(norm("layer_norm2", R::PostAttentionNorm, "hidden_size", "1"));
    a.post = {norm("post_layernorm", R::FinalNorm, "hidden_size", "1")};
    a.defaults = {{"num_channels", 3}, {"patch_size", 32}, {"image_size", 224}};
    a.source = "transformers/models/idefics2/modeling_idefics2.py";
    t.push_back(a);
    // Idefics3VisionTransformer (transformers/models/idefics3/modeling_idefics3.py; branch arch13),
    // Aria's tower (AriaConfig forces vision_config.model_type "idefics3_vision"): Idefics2's layout
    // (Idefics3VisionEmbeddings, Idefics3EncoderLayer: self_attn k/v/q/out_proj, layer_norm1, mlp,
    // layer_norm2; post_layernorm), Idefics3VisionConfig's defaults (patch 32, image 224).
    a.model_type = "idefics3_vision";
    a.block_class = "Idefics3EncoderLayer";
    a.source = "transformers/models/idefics3/modeling_idefics3.py";
    t.push_back(a);
  }
  {
    // VideoLlama3VisionModel (transformers/models/video_llama_3/modular_video_llama_3.py; branch
    // arch13), under model.vision_model: embeddings (VideoLlama3VisionEmbeddings: patch_embedding
    // Conv2d with bias only; positions are 2-D rotary, no table), encoder.layers (SigLIP's
    // SiglipEncoderLayer order: layer_norm1, self_attn k/v/q/out_proj, layer_norm2, mlp fc1/fc2, all
    // with biases), post_layernorm on last_hidden_state; no pooling head.
    VisionTowerSpec a;
    a.model_type = "video_llama_3_vision";
    a.layout = VisionLayout::Siglip;
    a.embeddings = {conv("embeddings.patch_embedding", "num_channels", "hidden_size,patch_size,patch_size_1", "1")};
    a.blocks = "encoder.layers";
    a.block_class = "VideoLlama3VisionEncoderLayer";
    a.block = {norm("layer_norm1", R::InputNorm, "hidden_size", "1")};
    for (ModuleSpec& m : encoder_attention("self_attn", "out_proj", "1")) a.block.push_back(m);
    a.block.push_back(norm("layer_norm2", R::PostAttentionNorm, "hidden_size", "1"));
    for (ModuleSpec& m : encoder_mlp("mlp")) a.block.push_back(m);
    a.post = {norm("post_layernorm", R::FinalNorm, "hidden_size", "1")};
    // VideoLlama3VisionConfig is a SiglipVisionConfig (image_size 224 unused: no position table).
    a.defaults = {{"num_channels", 3}, {"patch_size", 16}, {"image_size", 224}};
    a.source = "transformers/models/video_llama_3/modular_video_llama_3.py";
    t.push_back(a);
  }
  return t;
}

// LlavaMultiModalProjector (modeling_llava.py; LLaVA-NeXT's and LLaVA-OneVision's are the same):
// linear_1 (vision hidden_size * the number of vision feature layers -> text hidden_size), act,
// linear_2, both with bias=multimodal_projector_bias.
std::vector<ModuleSpec> llava_projector() {
  return {linear("model.multi_modal_projector.linear_1", R::MlpOther, "vision_hidden_size*num_feature_layers",
                 "hidden_size", "multimodal_projector_bias"),
          linear("model.multi_modal_projector.linear_2", R::MlpOther, "hidden_size", "hidden_size",
                 "multimodal_projector_bias")};
}

std::vector<VisionLanguageSpec> build_models() {
  const std::vector<std::string> described = {"clip_vision_model", "siglip_vision_model", "pixtral"};
  std::vector<VisionLanguageSpec> t;
  {
    // LlavaModel.__init__ (modeling_llava.py): vision_tower = AutoModel.from_config(vision_config)
    // (any tower: CLIP for LLaVA-1.5, Pixtral for Pixtral-12B), multi_modal_projector,
    // language_model. get_image_features reads hidden_states[vision_feature_layer].
    VisionLanguageSpec a;
    a.model_type = "llava";
    a.towers = described;
    a.projector = llava_projector();
    a.defaults = {{"multimodal_projector_bias", 1}, {"vision_feature_layer", -2}, {"tie_word_embeddings", 0}};
    a.tie_from_text = true;
    a.source = "transformers/models/llava/modeling_llava.py";
    t.push_back(a);
  }
  for (const char* type : {"llava_next", "llava_onevision", "llava_next_video"}) {
    // LlavaNextModel / LlavaOnevisionModel / LlavaNextVideoModel: as LLaVA, plus image_newline
    // (nn.Parameter [text hidden_size]) appended after each row of image features
    // (pack_image_features); LLaVA-NeXT-Video's vision_resampler is a pooling layer (no parameters).
    VisionLanguageSpec a;
    a.model_type = type;
    a.towers = described;
    a.model_params = {tensor("model.image_newline", R::EmbedOther, "hidden_size")};
    a.projector = llava_projector();
    // LlavaNextConfig, LlavaNextVideoConfig: vision_feature_layer -2; LlavaOnevisionConfig: -1.
    a.defaults = {{"multimodal_projector_bias", 1}, {"vision_feature_layer", a.model_type == "llava_onevision" ? -1.0 : -2.0},
                  {"tie_word_embeddings", 0}};
    a.tie_from_text = a.model_type != "llava_next";
    a.source = std::string("transformers/models/") + type + "/modeling_" + type + ".py";
    t.push_back(a);
  }
  for (const char* type : {"gemma3", "shieldgemma2"}) {
    // Gemma3Model (modeling_gemma3.py): vision_tower (SigLIP), Gemma3MultiModalProjector
    // (mm_input_projection_weight nn.Parameter [vision hidden, text hidden], mm_soft_emb_norm
    // Gemma3RMSNorm(vision hidden), an AvgPool2d), language_model; get_image_features projects
    // last_hidden_state. ShieldGemma 2 is built with Gemma3ForConditionalGeneration
    // (MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES); ShieldGemma2Config takes the text config's
    // tie_word_embeddings when it has none.
    VisionLanguageSpec a;
    a.model_type = type;
    a.tie_default_from_text = a.model_type == "shieldgemma2";
    a.towers = {"siglip_vision_model"};
    a.projector = {tensor("model.multi_modal_projector.mm_input_projection_weight", R::MlpOther,
                          "vision_hidden_size,hidden_size"),
                   norm("model.multi_modal_projector.mm_soft_emb_norm", R::MlpOther, "vision_hidden_size", "")};
    // Gemma3MultiModalProjector.forward: avg_pool, mm_soft_emb_norm, then the matmul.
    a.forward_order = {"mm_soft_emb_norm", "mm_input_projection_weight"};
    a.features = VisionFeatures::LastHiddenState;
    // Gemma3MultiModalProjector.__init__: patches_per_image = image_size // patch_size,
    // tokens_per_side = int(mm_tokens_per_image ** 0.5), AvgPool2d(kernel_size = patches_per_image //
    // tokens_per_side): kernel^2 patches become one image token (4 x 4 of 896 / 14 for 256 tokens).
    a.derived = {{"mm_tokens_per_side", "mm_tokens_per_image", 1, false, 0.5, ""},
                 {"mm_patches_per_image", "vision_image_size", 1, false, 1, "vision_patch_size"},
                 {"mm_pool_kernel", "mm_patches_per_image", 1, false, 1, "mm_tokens_per_side"}};
    a.merge = "mm_pool_kernel";
    a.defaults = {{"tie_word_embeddings", 1}, {"mm_tokens_per_image", 256}};
    a.source = "transformers/models/gemma3/modeling_gemma3.py";
    t.push_back(a);
  }
  {
    // Lfm2VlModel (modeling_lfm2_vl.py): vision_tower = AutoModel.from_config(vision_config) (the
    // SigLIP2 NaFlex tower; Lfm2VlConfig's default vision_config), multi_modal_projector
    // (Lfm2VlMultiModalProjector: pixel_unshuffle by downsample_factor, then layer_norm over
    // vision hidden * factor^2 when projector_use_layernorm, linear_1 -> projector_hidden_size,
    // act, linear_2 -> text hidden, both with bias=projector_bias), language_model (LFM2);
    // get_image_features projects last_hidden_state. Lfm2VlConfig defaults: projector_hidden_size
    // 2560, projector_bias and projector_use_layernorm True, downsample_factor 2, tie_word_embeddings True.
    VisionLanguageSpec a;
    a.model_type = "lfm2_vl";
    a.towers = {"siglip2_vision_model"};
    a.popped_tie_key = "tie_embedding";
    a.projector = {norm("model.multi_modal_projector.layer_norm", R::MlpOther,
                        "vision_hidden_size*downsample_factor*downsample_factor", "1", "projector_use_layernorm"),
                   linear("model.multi_modal_projector.linear_1", R::MlpOther,
                          "vision_hidden_size*downsample_factor*downsample_factor", "projector_hidden_size", "projector_bias"),
                   linear("model.multi_modal_projector.linear_2", R::MlpOther, "projector_hidden_size", "hidden_size",
                          "projector_bias")};
    a.features = VisionFeatures::LastHiddenState;
    a.merge = "downsample_factor";
    a.defaults = {{"projector_hidden_size", 2560}, {"projector_bias", 1}, {"projector_use_layernorm", 1},
                  {"downsample_factor", 2}, {"tie_word_embeddings", 1}};
    a.source = "transformers/models/lfm2_vl/modeling_lfm2_vl.py";
    t.push_back(a);
  }
  {
    // DeepseekVLModel (modeling_deepseek_vl.py): vision_model (SigLIP), aligner (DeepseekVLAligner:
    // linear1 vision -> text hidden, GELU, linear2; biases), language_model; last_hidden_state.
    VisionLanguageSpec a;
    a.model_type = "deepseek_vl";
    a.towers = {"siglip_vision_model"};
    a.tower = "model.vision_model";
    a.projector = {linear("model.aligner.linear1", R::MlpOther, "vision_hidden_size", "hidden_size", "1"),
                   linear("model.aligner.linear2", R::MlpOther, "hidden_size", "hidden_size", "1")};
    a.features = VisionFeatures::LastHiddenState;
    a.defaults = {{"tie_word_embeddings", 1}};
    a.source = "transformers/models/deepseek_vl/modeling_deepseek_vl.py";
    t.push_back(a);
  }
  {
    // PaliGemmaModel (modeling_paligemma.py): vision_tower (SigLIP), PaliGemmaMultiModalProjector
    // (linear: vision hidden -> projection_dim, bias=True; PaliGemmaConfig copies projection_dim
    // into the vision config), language_model; last_hidden_state.
    VisionLanguageSpec a;
    a.model_type = "paligemma";
    a.towers = {"siglip_vision_model"};
    a.projector = {linear("model.multi_modal_projector.linear", R::MlpOther, "vision_hidden_size", "projection_dim", "1")};
    a.features = VisionFeatures::LastHiddenState;
    a.defaults = {{"projection_dim", 2048}, {"tie_word_embeddings", 1}};
    a.source = "transformers/models/paligemma/modeling_paligemma.py";
    t.push_back(a);
  }
  {
    // Mistral3Model (modeling_mistral3.py): vision_tower (Pixtral), Mistral3MultiModalProjector:
    // norm (Mistral3RMSNorm(vision hidden)), patch_merger.merging_layer (Linear(vision hidden *
    // spatial_merge_size^2 -> vision hidden, bias=False)), linear_1 (vision hidden * feature layers
    // -> text hidden), linear_2, biases by multimodal_projector_bias.
    VisionLanguageSpec a;
    a.model_type = "mistral3";
    a.towers = {"pixtral"};
    a.projector = {norm("model.multi_modal_projector.norm", R::MlpOther, "vision_hidden_size", ""),
                   linear("model.multi_modal_projector.patch_merger.merging_layer", R::MlpOther,
                          "vision_hidden_size*spatial_merge_size*spatial_merge_size", "vision_hidden_size", "")};
    for (ModuleSpec& m : llava_projector()) a.projector.push_back(m);
    a.merge = "spatial_merge_size";
    a.defaults = {{"multimodal_projector_bias", 0}, {"spatial_merge_size", 2}, {"vision_feature_layer", -1},
                  {"tie_word_embeddings", 1}};
    a.source = "transformers/models/mistral3/modeling_mistral3.py";
    t.push_back(a);
  }
  {
    // VipLlavaModel (modeling_vipllava.py): a CLIP tower read at several layers
    // (vision_feature_layers, concatenated), VipLlavaMultiModalProjector: projector_layernorm and
    // linear_1 over vision hidden * the number of layers, linear_2 (biases), language_model.
    VisionLanguageSpec a;
    a.model_type = "vipllava";
    a.towers = described;
    a.projector = {norm("model.multi_modal_projector.projector_layernorm", R::MlpOther, "vision_hidden_size*num_feature_layers", "1"),
                   linear("model.multi_modal_projector.linear_1", R::MlpOther, "vision_hidden_size*num_feature_layers", "hidden_size", "1"),
                   linear("model.multi_modal_projector.linear_2", R::MlpOther, "hidden_size", "hidden_size", "1")};
    a.feature_layer_key = "vision_feature_layers";
    a.default_feature_layers = {-2, -5, -8, -11, 6};
    a.defaults = {{"tie_word_embeddings", 0}};
    a.source = "transformers/models/vipllava/modeling_vipllava.py";
    t.push_back(a);
  }
  {
    // LightOnOcrModel (modeling_lighton_ocr.py): vision_encoder (Pixtral), vision_projection
    // (LightOnOcrMultiModalProjector: norm, patch_merger.merging_layer, linear_1 vision -> text hidden,
    // linear_2, all without bias), language_model; last_hidden_state.
    VisionLanguageSpec a;
    a.model_type = "lighton_ocr";
    a.towers = {"pixtral"};
    a.tower = "model.vision_encoder";
    a.projector = {norm("model.vision_projection.norm", R::MlpOther, "vision_hidden_size", ""),
                   linear("model.vision_projection.patch_merger.merging_layer", R::MlpOther,
                          "vision_hidden_size*spatial_merge_size*spatial_merge_size", "vision_hidden_size", ""),
                   linear("model.vision_projection.linear_1", R::MlpOther, "vision_hidden_size", "hidden_size", ""),
                   linear("model.vision_projection.linear_2", R::MlpOther, "hidden_size", "hidden_size", "")};
    a.features = VisionFeatures::LastHiddenState;
    a.merge = "spatial_merge_size";
    a.defaults = {{"spatial_merge_size", 2}, {"tie_word_embeddings", 1}};
    a.source = "transformers/models/lighton_ocr/modeling_lighton_ocr.py";
    t.push_back(a);
  }
  for (const char* type : {"glm4v", "glm46v", "glmga", "glm4v_moe"}) {
    // Glm4vModel / Glm46VModel / Glm4vMoeModel: visual (Glm4vVisionModel, whose merger is the
    // projector), language_model (Glm4vTextModel; Glm4vMoeTextModel, decoder glm4v_moe_text); the
    // merged last_hidden_state. "glmga" (branch arch13) is GLM-4.6V under its own config class:
    // MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES builds it with Glm46VForConditionalGeneration
    // (models/auto/modeling_auto.py), and GlmgaConfig (modular_glmga.py) is Glm46VConfig's
    // (glm4v_vision and glm4v_text sub-configs by default, tie_word_embeddings False, the text
    // config's value not forwarded).
    VisionLanguageSpec a;
    a.model_type = type;
    a.towers = a.model_type == "glm4v_moe" ? std::vector<std::string>{"glm4v_moe_vision", "glm4v_moe"}
                                           : std::vector<std::string>{"glm4v_vision"};
    a.tower = "model.visual";
    a.forward_order = {"post_conv_layernorm", "position_embedding", "downsample", "proj", "post_projection_norm",
                       "gate_proj", "up_proj", "down_proj"};
    a.features = VisionFeatures::LastHiddenState;
    a.merge = "vision_spatial_merge_size";
    // Glm4vConfig, Glm4vMoeConfig: tie_word_embeddings False, and a pre-v5 text_config's true is
    // forwarded to it (Glm46VConfig does not forward it).
    a.defaults = {{"tie_word_embeddings", 0}};
    a.tie_from_text = a.model_type == "glm4v" || a.model_type == "glm4v_moe";
    a.source = a.model_type == "glmga" ? "transformers/models/glmga/modular_glmga.py, glm46v/modeling_glm46v.py"
                                       : std::string("transformers/models/") + type + "/modeling_" + type + ".py";
    t.push_back(a);
  }
  {
    // PaddleOCRVLModel (branch arch8): visual (PaddleOCRVisionModel), language_model
    // (PaddleOCRTextModel, decoder paddleocr_vl_text), then projector (PaddleOCRProjector: pre_norm
    // LayerNorm over the vision hidden size, linear_1 over vision hidden * spatial_merge_size^2,
    // GELU, linear_2 to the text hidden size; biases) - registered after the language model. The
    // projector reads last_hidden_state (after post_layernorm). PaddleOCRVLConfig: tied by default,
    // a text config's true forwarded.
    VisionLanguageSpec a;
    a.model_type = "paddleocr_vl";
    a.towers = {"paddleocr_vl_vision"};
    a.tower = "model.visual.vision_model";
    a.projector = {norm("model.projector.pre_norm", R::MlpOther, "vision_hidden_size", "1"),
                   linear("model.projector.linear_1", R::MlpOther,
                          "vision_hidden_size*vision_spatial_merge_size*vision_spatial_merge_size",
                          "vision_hidden_size*vision_spatial_merge_size*vision_spatial_merge_size", "1"),
                   linear("model.projector.linear_2", R::MlpOther,
                          "vision_hidden_size*vision_spatial_merge_size*vision_spatial_merge_size", "hidden_size", "1")};
    a.projector_after_text = true;
    a.features = VisionFeatures::LastHiddenState;
    a.merge = "vision_spatial_merge_size";
    a.defaults = {{"tie_word_embeddings", 1}};
    a.tie_from_text = true;
    a.source = "transformers/models/paddleocr_vl/modeling_paddleocr_vl.py";
    t.push_back(a);
  }
  {
    // GlmOcrModel (branch arch8): visual (GlmOcrVisionModel, whose merger is the projector; its
    // pooler_output is what get_image_features returns), language_model (GlmOcrTextModel, decoder
    // glm_ocr_text). GlmOcrConfig: tie_word_embeddings False, a pre-v5 text_config's true forwarded.
    VisionLanguageSpec a;
    a.model_type = "glm_ocr";
    a.towers = {"glm_ocr_vision"};
    a.tower = "model.visual";
    a.forward_order = {"downsample", "proj", "post_projection_norm", "gate_proj", "up_proj", "down_proj"};
    a.features = VisionFeatures::LastHiddenState;
    a.merge = "vision_spatial_merge_size";
    a.defaults = {{"tie_word_embeddings", 0}};
    a.tie_from_text = true;
    a.source = "transformers/models/glm_ocr/modeling_glm_ocr.py";
    t.push_back(a);
  }
  {
    // Cohere2VisionModel (modeling_cohere2_vision.py): vision_tower (SigLIP), Cohere2VisionMultiModalProjector
    // (linear_1: vision hidden * downsample_factor^2 -> alignment_intermediate_size, a SwiGLU that
    // halves it, linear_2: alignment_intermediate_size // 2 -> text hidden; biases), language_model;
    // last_hidden_state.
    VisionLanguageSpec a;
    a.model_type = "cohere2_vision";
    a.towers = {"siglip_vision_model"};
    a.projector = {linear("model.multi_modal_projector.linear_1", R::MlpOther,
                          "vision_hidden_size*downsample_factor*downsample_factor", "alignment_intermediate_size", "1"),
                   linear("model.multi_modal_projector.linear_2", R::MlpOther, "alignment_half", "hidden_size", "1")};
    a.features = VisionFeatures::LastHiddenState;
    a.merge = "downsample_factor";
    a.derived = {{"alignment_half", "alignment_intermediate_size", 0.5, false, 1, ""}};
    a.defaults = {{"downsample_factor", 2}, {"alignment_intermediate_size", 36864}, {"tie_word_embeddings", 1}};
    a.source = "transformers/models/cohere2_vision/modeling_cohere2_vision.py";
    t.push_back(a);
  }
  {
    // InternVLModel (modeling_internvl.py): vision_tower (InternVL's ViT), InternVLMultiModalProjector
    // (layer_norm and linear_1 over vision hidden * int(1 / downsample_ratio)^2 after the pixel
    // shuffle, linear_2; nn.Linear/LayerNorm defaults: biases), language_model.
    VisionLanguageSpec a;
    a.model_type = "internvl";
    a.towers = {"internvl_vision"};
    const std::string shuffled = "vision_hidden_size*downsample_ratio_inverse*downsample_ratio_inverse";
    a.projector = {norm("model.multi_modal_projector.layer_norm", R::MlpOther, shuffled, "1"),
                   linear("model.multi_modal_projector.linear_1", R::MlpOther, shuffled, "hidden_size", "1"),
                   linear("model.multi_modal_projector.linear_2", R::MlpOther, "hidden_size", "hidden_size", "1")};
    a.features = VisionFeatures::LastOrHiddenStates;
    a.merge = "downsample_ratio_inverse";
    a.derived = {{"downsample_ratio_inverse", "downsample_ratio", 1, true, 1, ""}};
    a.defaults = {{"downsample_ratio", 0.5}, {"vision_feature_layer", -1}, {"tie_word_embeddings", 1}};
    a.source = "transformers/models/internvl/modeling_internvl.py";
    t.push_back(a);
  }
  {
    // Cosmos3EdgeModel (modular_cosmos3_edge.py; branch arch13): visual (Cosmos3EdgeVisionModel),
    // projector (Cosmos3EdgePatchMerger: norm LayerNorm over the vision hidden size, linear_fc1 over
    // vision hidden * spatial_merge_size^2 -> projector_hidden_size, GELU, linear_fc2 -> text hidden;
    // biases), language_model (Cosmos3EdgeTextModel, decoder cosmos3_edge_text); the projector reads
    // last_hidden_state. Cosmos3EdgeForConditionalGeneration._tied_weights_keys = {}: lm_head is
    // never tied (Cosmos3EdgeConfig.tie_word_embeddings False).
    VisionLanguageSpec a;
    a.model_type = "cosmos3_edge";
    a.towers = {"cosmos3_edge_vision"};
    a.tower = "model.visual";
    const std::string merged = "vision_hidden_size*vision_spatial_merge_size*vision_spatial_merge_size";
    a.projector = {norm("model.projector.norm", R::MlpOther, "vision_hidden_size", "1"),
                   linear("model.projector.linear_fc1", R::MlpOther, merged, "projector_hidden_size", "1"),
                   linear("model.projector.linear_fc2", R::MlpOther, "projector_hidden_size", "hidden_size", "1")};
    a.features = VisionFeatures::LastHiddenState;
    a.merge = "vision_spatial_merge_size";
    a.never_tied = true;
    a.defaults = {{"tie_word_embeddings", 0}, {"projector_hidden_size", 11520}};
    a.source = "transformers/models/cosmos3_edge/modular_cosmos3_edge.py";
    t.push_back(a);
  }
  {
    // MiniMaxM3VLModel (modular_minimax_m3_vl.py; branch arch13), a LlavaModel: vision_tower,
    // multi_modal_projector (MiniMaxM3VLMultiModalProjector: linear_1 vision hidden ->
    // projector_hidden_size, GELU, linear_2 -> text hidden, then the spatial_merge_size^2 patches
    // grouped: merge_linear_1 over merged_hidden_size = text hidden * spatial_merge_size^2 (derived
    // by MiniMaxM3VLConfig.__post_init__) -> projector_hidden_size, GELU, merge_linear_2 -> text
    // hidden; biases), language_model (MiniMaxM3VLTextModel, decoder minimax_m3_vl_text); the
    // projector reads last_hidden_state. MiniMaxM3VLConfig: tie_word_embeddings False, a text
    // config's true copied into it.
    VisionLanguageSpec a;
    a.model_type = "minimax_m3_vl";
    a.towers = {"minimax_m3_vl_vision"};
    const std::string merged = "hidden_size*vision_spatial_merge_size*vision_spatial_merge_size";
    a.projector = {linear("model.multi_modal_projector.linear_1", R::MlpOther, "vision_hidden_size", "projector_hidden_size", "1"),
                   linear("model.multi_modal_projector.linear_2", R::MlpOther, "projector_hidden_size", "hidden_size", "1"),
                   linear("model.multi_modal_projector.merge_linear_1", R::MlpOther, merged, "projector_hidden_size", "1"),
                   linear("model.multi_modal_projector.merge_linear_2", R::MlpOther, "projector_hidden_size", "hidden_size", "1")};
    a.features = VisionFeatures::LastHiddenState;
    a.merge = "vision_spatial_merge_size";
    a.defaults = {{"tie_word_embeddings", 0}, {"projector_hidden_size", 6144}};
    a.tie_from_text = true;
    a.source = "transformers/models/minimax_m3_vl/modular_minimax_m3_vl.py";
    t.push_back(a);
  }
  {
    // Kimi_K25Model (modular_kimi_k25.py; branch arch13): vision_tower (Kimi_K25VisionModel),
    // language_model (AutoModel of text_config: DeepSeek-V3), then mm_projector
    // (Kimi_K25MultimodalProjection: pre_norm LayerNorm over projection_hidden_size, in_proj over
    // vision hidden * merge_kernel_size[0] * [1] (square), GELU, out_proj -> text hidden; biases),
    // registered after the language model. Kimi_K25Config: tie_word_embeddings True (not forwarded
    // from the text config), projection_hidden_size 1152.
    VisionLanguageSpec a;
    a.model_type = "kimi_k25";
    a.towers = {"kimi_k25_vision"};
    const std::string merged = "vision_hidden_size*vision_merge_kernel_size*vision_merge_kernel_size_1";
    a.projector = {norm("model.mm_projector.pre_norm", R::MlpOther, "projection_hidden_size", "1"),
                   linear("model.mm_projector.in_proj", R::MlpOther, merged, merged, "1"),
                   linear("model.mm_projector.out_proj", R::MlpOther, merged, "hidden_size", "1")};
    a.projector_after_text = true;
    a.features = VisionFeatures::LastHiddenState;
    a.merge = "vision_merge_kernel_size";
    a.defaults = {{"tie_word_embeddings", 1}, {"projection_hidden_size", 1152}};
    a.source = "transformers/models/kimi_k25/modular_kimi_k25.py";
    t.push_back(a);
  }
  {
    // AriaModel (transformers/models/aria/modeling_aria.py; branch arch13): vision_tower (Idefics3's),
    // multi_modal_projector (AriaProjector: query, an nn.Parameter [max_value_projector_patch_to_query_dict,
    // vision hidden] of which the first patch_to_query_dict[num_patches] rows are read; cross_attn
    // (AriaCrossAttention: q/k/v_proj without bias, multihead_attn = nn.MultiheadAttention(vision
    // hidden, heads): in_proj_weight [3H, H], in_proj_bias, out_proj; linear; layer_norm,
    // layer_norm_kv); layer_norm; feed_forward (AriaProjectorMLP: linear_in vision hidden -> text
    // hidden, linear_out text hidden -> text hidden, no biases)), language_model (AriaTextModel,
    // decoder aria_text). get_image_features projects hidden_states[vision_feature_layer] (default
    // -1: the last layer's output, before post_layernorm). AriaConfig: tie_word_embeddings False,
    // max_value_projector_patch_to_query_dict = max(projector_patch_to_query_dict.values()), 256 for
    // the default {1225: 128, 4900: 256} (model_config.cc derives it the same way).
    // Approximate in the forward graph: the query's cross-attention over the image features is
    // costed as a chain through the projector's modules in registration order.
    VisionLanguageSpec a;
    a.model_type = "aria";
    a.towers = {"idefics3_vision"};
    const std::string p = "model.multi_modal_projector.";
    a.projector = {tensor(p + "query", R::MlpOther, "max_value_projector_patch_to_query_dict,vision_hidden_size"),
                   linear(p + "cross_attn.q_proj", R::MlpOther, "vision_hidden_size", "vision_hidden_size", ""),
                   linear(p + "cross_attn.k_proj", R::MlpOther, "vision_hidden_size", "vision_hidden_size", ""),
                   linear(p + "cross_attn.v_proj", R::MlpOther, "vision_hidden_size", "vision_hidden_size", ""),
                   tensor(p + "cross_attn.multihead_attn.in_proj_weight", R::MlpOther, "3*vision_hidden_size,vision_hidden_size"),
                   tensor(p + "cross_attn.multihead_attn.in_proj_bias", R::MlpOther, "3*vision_hidden_size"),
                   linear(p + "cross_attn.multihead_attn.out_proj", R::MlpOther, "vision_hidden_size", "vision_hidden_size", "1"),
                   linear(p + "cross_attn.linear", R::MlpOther, "vision_hidden_size", "vision_hidden_size", "1"),
                   norm(p + "cross_attn.layer_norm", R::MlpOther, "vision_hidden_size", "1"),
                   norm(p + "cross_attn.layer_norm_kv", R::MlpOther, "vision_hidden_size", "1"),
                   norm(p + "layer_norm", R::MlpOther, "vision_hidden_size", "1"),
                   linear(p + "feed_forward.linear_in", R::MlpOther, "vision_hidden_size", "hidden_size", ""),
                   linear(p + "feed_forward.linear_out", R::MlpOther, "hidden_size", "hidden_size", "")};
    a.features = VisionFeatures::HiddenStates;
    a.defaults = {{"tie_word_embeddings", 0}, {"vision_feature_layer", -1}, {"max_value_projector_patch_to_query_dict", 256}};
    a.source = "transformers/models/aria/modeling_aria.py";
    t.push_back(a);
  }
  {
    // Ovis2Model (modeling_ovis2.py; branch arch13): vision_tower (Ovis2VisionModel, its head the
    // visual tokenizer), language_model (AutoModel of text_config, Qwen2 by default), then
    // visual_embeddings_table (Ovis2VisualEmbeddingTable, an nn.Embedding(vision vocab_size,
    // Ovis2Config.hidden_size) applied as a matmul of the visual token probabilities), registered after
    // the language model. Ovis2ForConditionalGeneration.lm_head is nn.Linear(Ovis2Config.hidden_size,
    // Ovis2Config.vocab_size), tied to the text embeddings by tie_word_embeddings (default True, not
    // forwarded); model_config.cc refuses an untied config whose top-level sizes are not the text's.
    VisionLanguageSpec a;
    a.model_type = "ovis2";
    a.towers = {"ovis2_vision"};
    a.projector = {embedding("model.visual_embeddings_table", "vision_vocab_size,model_hidden_size")};
    a.projector_after_text = true;
    a.features = VisionFeatures::LastHiddenState;
    a.merge = "vision_hidden_stride";
    a.defaults = {{"tie_word_embeddings", 1}, {"model_hidden_size", 1536}};
    a.source = "transformers/models/ovis2/modeling_ovis2.py";
    t.push_back(a);
  }
  {
    // Exaone4_5_Model (modular_exaone4_5.py; branch arch13): visual (Exaone4_5_VisionModel, whose
    // merger is the projector), language_model (AutoModel of text_config: EXAONE 4, exaone4); the
    // merged last_hidden_state. Exaone4_5_Config: tie_word_embeddings False (not forwarded from the
    // text config: PreTrainedConfig.__post_init__).
    VisionLanguageSpec a;
    a.model_type = "exaone4_5";
    a.towers = {"exaone4_5_vision"};
    a.tower = "model.visual";
    a.features = VisionFeatures::LastHiddenState;
    a.merge = "vision_spatial_merge_size";
    a.defaults = {{"tie_word_embeddings", 0}};
    a.source = "transformers/models/exaone4_5/modular_exaone4_5.py";
    t.push_back(a);
  }
  {
    // QianfanOCRModel (modular_qianfan_ocr.py; branch arch13): InternVLModel over QianfanOCR's
    // InternViT (vision_tower) and a Qwen3 decoder by default; QianfanOCRMultiModalProjector is
    // InternVL's. QianfanOCRConfig: tie_word_embeddings False (its __post_init__ calls
    // PreTrainedConfig's, not InternVLConfig's), downsample_ratio 0.5, vision_feature_layer -1.
    VisionLanguageSpec a = *std::find_if(t.begin(), t.end(), [](const VisionLanguageSpec& s) { return s.model_type == "internvl"; });
    a.model_type = "qianfan_ocr";
    a.towers = {"qianfan_ocr_vision"};
    a.defaults["tie_word_embeddings"] = 0;
    a.source = "transformers/models/qianfan_ocr/modular_qianfan_ocr.py";
    t.push_back(a);
  }
  {
    // VideoLlama3Model (modular_video_llama_3.py; branch arch13): vision_model (VideoLlama3's
    // SigLIP-like tower), projector (VideoLlama3Projector.readout = Sequential(Linear(vision hidden,
    // text hidden), GELU, Linear(text hidden, text hidden)), biases), language_model (Qwen2 by
    // default); get_image_features projects last_hidden_state (after post_layernorm and a
    // pixel_unshuffle that only reorders patches). VideoLlama3Config: tie_word_embeddings False, a
    // text config's true copied into it (__post_init__).
    VisionLanguageSpec a;
    a.model_type = "video_llama_3";
    a.towers = {"video_llama_3_vision"};
    a.tower = "model.vision_model";
    a.projector = {linear("model.projector.readout.0", R::MlpOther, "vision_hidden_size", "hidden_size", "1"),
                   linear("model.projector.readout.2", R::MlpOther, "hidden_size", "hidden_size", "1")};
    a.features = VisionFeatures::LastHiddenState;
    a.defaults = {{"tie_word_embeddings", 0}};
    a.tie_from_text = true;
    a.source = "transformers/models/video_llama_3/modular_video_llama_3.py";
    t.push_back(a);
  }
  {
    // Llama4ForConditionalGeneration (modeling_llama4.py) registers vision_model (Llama4VisionModel),
    // multi_modal_projector (Llama4MultiModalProjector: linear_1 vision_output_dim -> text hidden,
    // bias=False) and language_model (a whole Llama4ForCausalLM: language_model.model.*,
    // language_model.lm_head); get_image_features projects the tower's last_hidden_state (after
    // its vision_adapter).
    VisionLanguageSpec a;
    a.model_type = "llama4";
    a.towers = {"llama4_vision_model"};
    a.tower = "vision_model";
    a.text_prefix = "language_model.model";
    a.head = "language_model.lm_head";
    a.projector = {linear("multi_modal_projector.linear_1", R::MlpOther, "vision_vision_output_dim", "hidden_size", "")};
    a.features = VisionFeatures::LastHiddenState;
    a.defaults = {{"tie_word_embeddings", 0}};
    a.source = "transformers/models/llama4/modeling_llama4.py";
    t.push_back(a);
  }
  {
    // MllamaForConditionalGeneration (modeling_mllama.py): model = MllamaModel (vision_model,
    // language_model = MllamaTextModel, then multi_modal_projector: nn.Linear(vision_output_dim,
    // text hidden_size, bias=True), registered after the language model), then lm_head. The
    // projected image states reach the decoder only through the cross-attention layers' k_proj /
    // v_proj (MllamaModel.forward: cross_attention_states); no tied weights.
    VisionLanguageSpec a;
    a.model_type = "mllama";
    a.towers = {"mllama_vision_model"};
    a.tower = "model.vision_model";
    a.projector = {linear("model.multi_modal_projector", R::MlpOther, "vision_vision_output_dim", "hidden_size", "1")};
    a.projector_after_text = true;
    a.features = VisionFeatures::LastHiddenState;
    a.never_tied = true;
    a.defaults = {{"tie_word_embeddings", 0}};
    a.source = "transformers/models/mllama/modeling_mllama.py";
    t.push_back(a);
  }
  {
    // Idefics2ForConditionalGeneration (modeling_idefics2.py): model = Idefics2Model (vision_model,
    // connector, text_model = AutoModel of text_config, Mistral by default), then lm_head, tied to
    // model.text_model.embed_tokens by the composite's tie_word_embeddings (default False).
    // Idefics2Connector: modality_projection (Idefics2MLP: gate_proj, up_proj vision hidden -> text
    // intermediate_size, down_proj -> text hidden, no biases), then perceiver_resampler
    // (Idefics2PerceiverResampler, over perceiver_config, whose hidden_size Idefics2Config forces to
    // the text hidden_size): latents [resampler_n_latents, H] (its own parameter, first), layers
    // (Idefics2PerceiverLayer: input_latents_norm, input_context_norm, self_attn q/k/v/o without
    // bias, q over resampler_n_heads * resampler_head_dim and k/v over the perceiver's own
    // num_key_value_heads, post_attention_layernorm, mlp gate/up H -> 4H and down, no biases), norm
    // (RMSNorms). get_image_features: last_hidden_state through the connector, scattered into the
    // text embeddings at the image tokens.
    // Approximate in the forward graph: the latents' cross-attention over the image context is
    // costed as a chain through the connector's modules.
    VisionLanguageSpec a;
    a.model_type = "idefics2";
    a.towers = {"idefics2_vision"};
    a.tower = "model.vision_model";
    a.text_prefix = "model.text_model";
    a.sub_config = "perceiver_config";
    a.projector = {linear("model.connector.modality_projection.gate_proj", R::MlpOther, "vision_hidden_size", "intermediate_size", ""),
                   linear("model.connector.modality_projection.up_proj", R::MlpOther, "vision_hidden_size", "intermediate_size", ""),
                   linear("model.connector.modality_projection.down_proj", R::MlpOther, "intermediate_size", "hidden_size", ""),
                   tensor("model.connector.perceiver_resampler.latents", R::MlpOther, "perceiver_resampler_n_latents,hidden_size")};
    a.projector_blocks = "model.connector.perceiver_resampler.layers";
    a.projector_depth_key = "perceiver_resampler_depth";
    const std::string q = "perceiver_resampler_n_heads*perceiver_resampler_head_dim";
    const std::string kv = "perceiver_num_key_value_heads*perceiver_resampler_head_dim";
    a.projector_block = {norm("input_latents_norm", R::MlpOther, "hidden_size", ""),
                         norm("input_context_norm", R::MlpOther, "hidden_size", ""),
                         linear("self_attn.q_proj", R::MlpOther, "hidden_size", q, ""),
                         linear("self_attn.k_proj", R::MlpOther, "hidden_size", kv, ""),
                         linear("self_attn.v_proj", R::MlpOther, "hidden_size", kv, ""),
                         linear("self_attn.o_proj", R::MlpOther, q, "hidden_size", ""),
                         norm("post_attention_layernorm", R::MlpOther, "hidden_size", ""),
                         linear("mlp.gate_proj", R::MlpOther, "hidden_size", "4*hidden_size", ""),
                         linear("mlp.up_proj", R::MlpOther, "hidden_size", "4*hidden_size", ""),
                         linear("mlp.down_proj", R::MlpOther, "4*hidden_size", "hidden_size", "")};
    a.projector_post = {norm("model.connector.perceiver_resampler.norm", R::MlpOther, "hidden_size", "")};
    a.features = VisionFeatures::LastHiddenState;
    // Idefics2PerceiverConfig's defaults.
    a.defaults = {{"tie_word_embeddings", 0}, {"perceiver_resampler_n_latents", 64}, {"perceiver_resampler_depth", 3},
                  {"perceiver_resampler_n_heads", 16}, {"perceiver_resampler_head_dim", 96},
                  {"perceiver_num_key_value_heads", 4}};
    a.source = "transformers/models/idefics2/modeling_idefics2.py";
    t.push_back(a);
  }
  return t;
}

const std::vector<VisionTowerSpec>& towers() {
  static const std::vector<VisionTowerSpec> specs = build_towers();
  return specs;
}

const std::vector<VisionLanguageSpec>& models() {
  static const std::vector<VisionLanguageSpec> specs = build_models();
  return specs;
}

}  // namespace

const VisionTowerSpec* find_vision_tower(const std::string& vision_model_type) {
  for (const VisionTowerSpec& spec : towers()) {
    if (spec.model_type == vision_model_type) return &spec;
  }
  return nullptr;
}

const VisionLanguageSpec* find_vision_language(const std::string& model_type) {
  for (const VisionLanguageSpec& spec : models()) {
    if (spec.model_type == model_type) return &spec;
  }
  return nullptr;
}

std::vector<std::string> vision_language_model_types() {
  std::vector<std::string> types;
  for (const VisionLanguageSpec& spec : models()) types.push_back(spec.model_type);
  std::sort(types.begin(), types.end());
  return types;
}

}  // namespace hookstream
