// Hybrid decoders: the token mixer each layer gets from its config (layer_types, its legacy names,
// the config class's pattern when the list is absent, Bamba's attn_layer_indices), what is refused,
// and the cost of a recurrent mixer's layer. The parameters themselves are checked against
// transformers by the architecture fixtures (tests/sim/architectures/qwen3_next*.json, bamba*.json,
// granitemoehybrid*.json, qwen3_5*.json; architecture_test.cc).
#include <string>

#include <catch2/catch.hpp>

#include "sim/inputs/input_error.h"
#include "sim/inputs/model_structure.h"
#include "sim/streams/stream_expansion.h"

using namespace hookstream;

namespace {

// A small Qwen3-Next: hidden 64, 2 attention heads of 32, linear heads 4 value / 2 key of 16.
std::string qwen3_next(const std::string& extra) {
  return R"({"model_type": "qwen3_next", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
    "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32, "vocab_size": 100,
    "linear_num_value_heads": 4, "linear_num_key_heads": 2, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
    "linear_conv_kernel_dim": 4, "num_experts": 0, "torch_dtype": "bfloat16")" +
         extra + "}";
}

Plan plan_of(const std::string& config) {
  Plan plan;
  plan.source = "plan.yaml";
  plan.model = parse_model_config(config, "model/config.json");
  return plan;
}

std::string refusal(const std::string& config) {
  try {
    plan_of(config);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("token mixers: each layer's mixer comes from layer_types, or the config class's pattern without it", "[architecture][mixer]") {
  SECTION("layer_types as written") {
    const ModelStructure s = build_model_structure(plan_of(qwen3_next(
        R"(, "layer_types": ["full_attention", "linear_attention", "full_attention", "linear_attention"])")));
    REQUIRE(s.layers.size() == 4);
    CHECK(s.layers[0].mixer == TokenMixer::Attention);
    CHECK(s.layers[0].mixer_module == "self_attn");
    CHECK(s.layers[1].mixer == TokenMixer::GatedDeltaNet);
    CHECK(s.layers[1].mixer_module == "linear_attn");
    CHECK(s.layers[1].mixer_in.size() == 2);      // in_proj_qkvz, in_proj_ba
    CHECK(s.layers[1].mixer_other.size() == 4);   // dt_bias, A_log, conv1d, norm
    CHECK(s.layers[1].q.weight < 0);
    CHECK(s.parameters[static_cast<size_t>(s.layers[1].o.weight)].name == "model.layers.1.linear_attn.out_proj.weight");
    // Sizes the cost models read: 4 heads of 16 x 16, conv over 2 * 32 + 64 channels, chunk 64.
    const RecurrentMixerShape& shape = s.layers[1].mixer_shape;
    CHECK(shape.heads == 4);
    CHECK(shape.key_dim == 16);
    CHECK(shape.value_dim == 16);
    CHECK(shape.conv_channels == 128);
    CHECK(shape.conv_kernel == 4);
    CHECK(shape.chunk == 64);
  }
  SECTION("no layer_types: every full_attention_interval-th layer is attention (Qwen3NextConfig.__post_init__)") {
    const ModelStructure s = build_model_structure(plan_of(qwen3_next(R"(, "full_attention_interval": 2)")));
    CHECK(s.layers[0].mixer == TokenMixer::GatedDeltaNet);
    CHECK(s.layers[1].mixer == TokenMixer::Attention);
    CHECK(s.layers[2].mixer == TokenMixer::GatedDeltaNet);
    CHECK(s.layers[3].mixer == TokenMixer::Attention);
    const ModelStructure d = build_model_structure(plan_of(qwen3_next("")));  // the default interval, 4
    CHECK(d.layers[2].mixer == TokenMixer::GatedDeltaNet);
    CHECK(d.layers[3].mixer == TokenMixer::Attention);
  }
  SECTION("legacy names are remapped as transformers' remap_legacy_layer_types does") {
    const ModelStructure s = build_model_structure(plan_of(qwen3_next(R"(, "layer_types": ["mamba", "attention", "conv", "attention"])")));
    CHECK(s.layers[0].mixer == TokenMixer::GatedDeltaNet);
    CHECK(s.layers[1].mixer == TokenMixer::Attention);
    CHECK(s.layers[2].mixer == TokenMixer::GatedDeltaNet);
  }
  SECTION("Bamba: attention where attn_layer_indices says, Mamba2 elsewhere") {
    const ModelStructure s = build_model_structure(plan_of(
        R"({"model_type": "bamba", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 2,
            "num_key_value_heads": 1, "vocab_size": 100, "mamba_n_heads": 4, "mamba_d_head": 32, "mamba_d_state": 16,
            "mamba_n_groups": 1, "mamba_chunk_size": 32, "attn_layer_indices": [2]})"));
    CHECK(s.layers[0].mixer == TokenMixer::Mamba2);
    CHECK(s.layers[0].mixer_module == "mamba");
    CHECK(s.layers[0].mixer_shape.key_dim == 16);
    CHECK(s.layers[0].mixer_shape.conv_channels == 2 * 64 + 2 * 16);
    CHECK(s.layers[2].mixer == TokenMixer::Attention);
  }
}

TEST_CASE("token mixers: layer types the model has no modules for, and LoRA on the conv1d, are refused", "[architecture][mixer]") {
  const std::string wrong = refusal(qwen3_next(
      R"(, "layer_types": ["linear_attention", "linear_attention", "sliding_attention", "full_attention"])"));
  CHECK(wrong.find("layer_types.2") != std::string::npos);
  CHECK(wrong.find("\"linear_attention\", \"full_attention\"") != std::string::npos);
  const std::string short_list = refusal(qwen3_next(R"(, "layer_types": ["linear_attention", "full_attention"])"));
  CHECK(short_list.find("layer_types") != std::string::npos);
  CHECK(short_list.find("one entry per layer") != std::string::npos);

  Plan plan = plan_of(qwen3_next(""));
  plan.adapter = Adapter::Lora;
  plan.lora_r = 8;
  plan.lora_target_modules = {"conv1d", "out_proj"};
  std::string error;
  try {
    build_model_structure(plan);
  } catch (const InputError& e) {
    error = e.what();
  }
  CHECK(error.find("linear_attn.conv1d") != std::string::npos);
  CHECK(error.find("not modelled") != std::string::npos);
  // all-linear reaches the mixer's Linears but not its conv1d (an nn.Conv1d).
  plan.lora_target_modules = {"all-linear"};
  plan.lora_target_modules_regex = true;
  const ModelStructure s = build_model_structure(plan);
  bool conv_adapted = false, in_proj_adapted = false;
  for (const Parameter& p : s.parameters) {
    conv_adapted = conv_adapted || p.name.find("conv1d.lora_A") != std::string::npos;
    in_proj_adapted = in_proj_adapted || p.name.find("linear_attn.in_proj_qkvz.lora_A") != std::string::npos;
  }
  CHECK_FALSE(conv_adapted);
  CHECK(in_proj_adapted);
}

TEST_CASE("token mixers: a gated DeltaNet layer is costed with its own projections and chunked core, not attention's", "[architecture][mixer][cost]") {
  const Plan plan = plan_of(qwen3_next(""));  // layers 0-2 DeltaNet, layer 3 attention
  const ModelStructure s = build_model_structure(plan);
  const int seq = 4096;
  const LayerCost recurrent = layer_cost(plan.model, seq, 1, &s, 0);
  const LayerCost attention = layer_cost(plan.model, seq, 1, &s, 3);
  const double t = seq;
  // fla chunk_gated_delta_rule: t * heads * (4 C (dk + dv) + 6 dk dv).
  CHECK(recurrent.attention_flops == Approx(t * 4 * (4.0 * 64 * (16 + 16) + 6.0 * 16 * 16)));
  // Attention's core is quadratic in the sequence: 4 seq^2 heads head_dim / 2.
  CHECK(attention.attention_flops == Approx(4.0 * t * t * 2 * 32 / 2));
  // Projections at the shapes the table built: in_proj_qkvz [2*32 + 2*64, 64], in_proj_ba [8, 64],
  // out_proj [64, 64]; then the dense MLP (gate, up, down of 128).
  const double mixer_projections = 2 * t * 64 * (192 + 8 + 64);
  const double mlp = 2 * t * 3 * 64 * 128;
  CHECK(recurrent.projection_flops == Approx(mixer_projections + mlp));
  CHECK(recurrent.mlp_flops == Approx(mlp));
  CHECK(recurrent.rope_bytes == 0);
  CHECK(recurrent.mixer_elementwise_bytes == static_cast<int64_t>(t * 2 * (2 * 128 + 3 * 64)));
  CHECK(attention.mixer_elementwise_bytes == 0);
  CHECK(attention.rope_bytes > 0);
  // Linear in the sequence: doubling it doubles the core.
  CHECK(layer_cost(plan.model, 2 * seq, 1, &s, 0).attention_flops == Approx(2 * recurrent.attention_flops));
}
