// Hybrid decoders: the token mixer each layer gets from its config (layer_types, its legacy names,
// the config class's pattern when the list is absent, Bamba's attn_layer_indices), what is refused,
// and the cost of a recurrent mixer's layer. The parameters themselves are checked against
// transformers by the architecture fixtures (tests/sim/architectures/qwen3_next*.json, bamba*.json,
// granitemoehybrid*.json, qwen3_5*.json; architecture_test.cc).
#include <string>
#include <utility>
#include <vector>

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

// ---- One block per layer (NemotronH, Mamba2) and parallel mixers (Falcon-H1). The parameters are
// checked against transformers by tests/sim/architectures/nemotron_h*.json, falcon_h1*.json,
// mamba2*.json (architecture_test.cc).

namespace {

// A small NemotronH: hidden 64, 2 attention heads of 32; Mamba2 4 heads of 32, 1 group of 16.
std::string nemotron_h(const std::string& extra) {
  return R"({"model_type": "nemotron_h", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2,
    "num_key_value_heads": 1, "head_dim": 32, "vocab_size": 100, "mamba_num_heads": 4, "mamba_head_dim": 32,
    "n_groups": 1, "ssm_state_size": 16, "chunk_size": 32, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "moe_intermediate_size": 32, "moe_shared_expert_intermediate_size": 48, "torch_dtype": "bfloat16")" +
         extra + "}";
}

std::string lora_refusal(Plan plan, std::vector<std::string> targets) {
  plan.adapter = Adapter::Lora;
  plan.lora_r = 8;
  plan.lora_target_modules_regex = targets == std::vector<std::string>{"all-linear"};
  plan.lora_target_modules = std::move(targets);
  try {
    build_model_structure(plan);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("block hybrids: NemotronH's layer types, and its depth, come from layers_block_type or hybrid_override_pattern", "[architecture][mixer]") {
  SECTION("the pattern: M Mamba2, * attention, - MLP, E MoE; num_hidden_layers is its length") {
    const Plan plan = plan_of(nemotron_h(R"(, "num_hidden_layers": 52, "hybrid_override_pattern": "M*-E")"));
    CHECK(plan.model.num_hidden_layers == 4);
    const ModelStructure s = build_model_structure(plan);
    REQUIRE(s.layers.size() == 4);
    CHECK(s.layers[0].mixer == TokenMixer::Mamba2);
    CHECK_FALSE(s.layers[0].has_mlp);
    CHECK(s.layers[0].mixer_shape.conv_channels == 4 * 32 + 2 * 16);
    CHECK(s.layers[1].mixer == TokenMixer::Attention);
    CHECK(s.layers[1].mixer_module == "mixer");
    CHECK_FALSE(s.layers[1].has_mlp);
    CHECK(s.layers[2].mixer == TokenMixer::None);
    CHECK(s.layers[2].has_mlp);
    CHECK_FALSE(s.layers[2].mlp_gated);
    CHECK(s.layers[2].gate.weight < 0);
    CHECK(s.layers[3].mixer == TokenMixer::None);
    CHECK(s.layers[3].moe);
    CHECK(s.num_experts == 4);
    CHECK(s.parameters[static_cast<size_t>(s.layers[3].post_attention_norm)].name == "model.layers.3.norm.weight");
    // NemotronHForCausalLM ties nothing (_tied_weights_keys = {}), whatever tie_word_embeddings says.
    CHECK_FALSE(plan_of(nemotron_h(R"(, "hybrid_override_pattern": "M", "tie_word_embeddings": true)")).model.tie_word_embeddings);
  }
  SECTION("layers_block_type wins over the pattern; legacy names remapped; neither gives the class's four") {
    const Plan plan = plan_of(nemotron_h(R"(, "hybrid_override_pattern": "MMMM", "layers_block_type": ["attention", "mamba"])"));
    CHECK(plan.model.num_hidden_layers == 2);
    const ModelStructure s = build_model_structure(plan);
    CHECK(s.layers[0].mixer == TokenMixer::Attention);
    CHECK(s.layers[1].mixer == TokenMixer::Mamba2);
    const ModelStructure d = build_model_structure(plan_of(nemotron_h("")));
    REQUIRE(d.layers.size() == 4);  // linear_attention, moe, full_attention, mlp
    CHECK(d.layers[1].moe);
    CHECK(d.layers[2].mixer == TokenMixer::Attention);
  }
  SECTION("a pattern character or a type NemotronH has no block for is refused") {
    CHECK(refusal(nemotron_h(R"(, "hybrid_override_pattern": "M*X")")).find("hybrid_override_pattern") != std::string::npos);
    CHECK(refusal(nemotron_h(R"(, "layers_block_type": ["mlp", "sliding_attention"])")).find("layer_types.1") != std::string::npos);
  }
}

TEST_CASE("block hybrids: PEFT refuses LoRA on a Mamba model's out_proj and conv1d, with its own words", "[architecture][mixer]") {
  const Plan plan = plan_of(nemotron_h(R"(, "hybrid_override_pattern": "M*-E")"));
  const std::string all_linear = lora_refusal(plan, {"all-linear"});
  CHECK(all_linear.find("Module 'out_proj' is incompatible with Mamba-based models (model_type='nemotron_h')") != std::string::npos);
  CHECK(lora_refusal(plan, {"conv1d"}).find("Module 'conv1d' is incompatible") != std::string::npos);
  CHECK(lora_refusal(plan, {"in_proj", "q_proj", "up_proj"}).empty());
  // Without a Mamba2 block, all-linear reaches nothing PEFT refuses.
  CHECK(lora_refusal(plan_of(nemotron_h(R"(, "hybrid_override_pattern": "*-E")")), {"all-linear"}).empty());
  // Bamba is not in PEFT's list: its out_proj takes LoRA.
  const Plan bamba = plan_of(
      R"({"model_type": "bamba", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
          "num_key_value_heads": 1, "vocab_size": 100, "mamba_n_heads": 4, "mamba_d_head": 32, "mamba_d_state": 16,
          "mamba_n_groups": 1, "attn_layer_indices": [1]})");
  CHECK(lora_refusal(bamba, {"out_proj"}).empty());
}

TEST_CASE("block hybrids: each NemotronH block is costed as what it is, Falcon-H1 costs attention and Mamba2 together", "[architecture][mixer][cost]") {
  const Plan plan = plan_of(nemotron_h(R"(, "hybrid_override_pattern": "M*-E")"));
  const ModelStructure s = build_model_structure(plan);
  const int seq = 4096;
  const double t = seq;
  const LayerCost mamba = layer_cost(plan.model, seq, 1, &s, 0);
  const LayerCost attention = layer_cost(plan.model, seq, 1, &s, 1);
  const LayerCost mlp = layer_cost(plan.model, seq, 1, &s, 2);
  // Mamba2 block: in_proj [2*128 + 2*16 + 4, 64] and out_proj [64, 128], no MLP; the SSD core.
  CHECK(mamba.mlp_flops == 0);
  CHECK(mamba.projection_flops == Approx(2 * t * 64 * (292 + 128)));
  CHECK(mamba.attention_flops == Approx(t * 4 * (2.0 * 32 * (16 + 32) + 4.0 * 16 * 32)));
  CHECK(mamba.silu_mul_bytes == 0);
  // Attention block: q/k/v/o only.
  CHECK(attention.mlp_flops == 0);
  CHECK(attention.projection_flops == Approx(2 * t * 64 * (64 + 32 + 32 + 64)));
  CHECK(attention.attention_flops == Approx(4.0 * t * t * 2 * 32 / 2));
  // MLP block: up and down (relu2, no gate), no token mixer.
  CHECK(mlp.attention_flops == 0);
  CHECK(mlp.projection_flops == Approx(2 * t * 2 * 64 * 128));
  CHECK(mlp.rope_bytes == 0);
  CHECK(mlp.silu_mul_bytes == static_cast<int64_t>(t * 2 * 2 * 128));

  const Plan falcon = plan_of(
      R"({"model_type": "falcon_h1", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
          "num_key_value_heads": 1, "vocab_size": 100, "mamba_d_ssm": 128, "mamba_n_heads": 4, "mamba_n_groups": 1,
          "mamba_d_state": 16, "mamba_chunk_size": 32, "mamba_d_head": "auto"})");
  const ModelStructure f = build_model_structure(falcon);
  REQUIRE(f.layers.size() == 2);
  CHECK(f.layers[0].parallel_attention);
  CHECK(f.layers[0].mixer == TokenMixer::Mamba2);
  CHECK(f.layers[0].mixer_shape.value_dim == 32);  // mamba_d_head "auto": 128 / 4
  CHECK(f.parameters[static_cast<size_t>(f.layers[0].mixer_out.weight)].name == "model.layers.0.mamba.out_proj.weight");
  CHECK(f.parameters[static_cast<size_t>(f.layers[0].o.weight)].name == "model.layers.0.self_attn.o_proj.weight");
  const LayerCost both = layer_cost(falcon.model, seq, 1, &f, 0);
  const double sdpa = 4.0 * t * t * 2 * 32 / 2;
  const double ssd = t * 4 * (2.0 * 32 * (16 + 32) + 4.0 * 16 * 32);
  CHECK(both.attention_flops == Approx(sdpa + ssd));
  // q, k, v, o (64 + 32 + 32 + 64), the gated MLP (3 x 128), in_proj (2*128 + 2*16 + 4) and out_proj (128).
  CHECK(both.projection_flops == Approx(2 * t * 64 * (192 + 3 * 128 + 292 + 128)));
  CHECK(both.rope_bytes > 0);
  CHECK(both.mixer_elementwise_bytes > 0);
}

TEST_CASE("block hybrids: Mamba2 is a Mamba2 mixer in every layer, no attention and no MLP", "[architecture][mixer]") {
  const Plan plan = plan_of(
      R"({"model_type": "mamba2", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 100, "num_heads": 4,
          "head_dim": 32, "n_groups": 1, "state_size": 16, "chunk_size": 32})");
  const ModelStructure s = build_model_structure(plan);
  REQUIRE(s.layers.size() == 2);
  for (const DecoderLayerUse& layer : s.layers) {
    CHECK(layer.mixer == TokenMixer::Mamba2);
    CHECK_FALSE(layer.has_mlp);
    CHECK(layer.mixer_shape.conv_channels == 2 * 64 + 2 * 16);
  }
  CHECK(s.parameters.front().name == "backbone.embeddings.weight");
  const LayerCost cost = layer_cost(plan.model, 4096, 1, &s, 1);
  CHECK(cost.mlp_flops == 0);
  CHECK(lora_refusal(plan, {"all-linear"}).find("model_type='mamba2'") != std::string::npos);
}

TEST_CASE("block hybrids: Mamba and Falcon-Mamba are Mamba1 mixers (selective scan), sized as their config classes derive", "[architecture][mixer][cost]") {
  for (const std::string type : {"mamba", "falcon_mamba"}) {
    // MambaConfig.__post_init__: intermediate_size = expand * hidden_size whatever the file says,
    // time_step_rank "auto" = ceil(hidden_size / 16).
    const Plan plan = plan_of(R"({"model_type": ")" + type + R"(", "hidden_size": 72, "num_hidden_layers": 2, "vocab_size": 100,
        "state_size": 8, "intermediate_size": 999, "time_step_rank": "auto"})");
    const ModelStructure s = build_model_structure(plan);
    REQUIRE(s.layers.size() == 2);
    CHECK(s.layers[0].mixer == TokenMixer::Mamba1);
    CHECK_FALSE(s.layers[0].has_mlp);
    CHECK(s.layers[0].mixer_shape.heads == 144);
    CHECK(s.layers[0].mixer_shape.key_dim == 8);
    bool x_proj = false, dt_proj = false;
    for (const Parameter& p : s.parameters) {
      if (p.name == "backbone.layers.0.mixer.x_proj.weight") x_proj = p.shape == std::vector<int64_t>{5 + 16, 144};
      if (p.name == "backbone.layers.0.mixer.dt_proj.weight") dt_proj = p.shape == std::vector<int64_t>{144, 5};
    }
    CHECK(x_proj);
    CHECK(dt_proj);
    CHECK(plan.model.tie_word_embeddings);  // MambaConfig's default
    // selective_scan_fn: 9 FLOPs per token, channel and state entry.
    CHECK(layer_cost(plan.model, 1024, 1, &s, 0).attention_flops == Approx(9.0 * 1024 * 144 * 8));
    CHECK(lora_refusal(plan, {"conv1d"}).find("model_type='" + type + "'") != std::string::npos);
  }
}

// ---- LFM2's gated short convolution (lfm2, lfm2_moe) and MiniMax's lightning attention. The
// parameters are checked against transformers by tests/sim/architectures/lfm2*.json,
// lora-lfm2*.json, minimax*.json, lora-minimax*.json (architecture_test.cc).

namespace {

// A small LFM2: hidden 64, 4 heads of 16; LFM2-1.2B's feed-forward numbers (12288 -> 8192).
std::string lfm2(const std::string& extra) {
  return R"({"model_type": "lfm2", "hidden_size": 64, "intermediate_size": 12288, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "torch_dtype": "bfloat16")" +
         extra + "}";
}

std::string lfm2_moe(const std::string& extra) {
  return R"({"model_type": "lfm2_moe", "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "num_experts": 4,
    "num_experts_per_tok": 2, "num_dense_layers": 1, "torch_dtype": "bfloat16")" +
         extra + "}";
}

std::string minimax(const std::string& extra) {
  return R"({"model_type": "minimax", "hidden_size": 64, "intermediate_size": 32, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 100, "num_local_experts": 4,
    "num_experts_per_tok": 2, "block_size": 16, "torch_dtype": "bfloat16")" +
         extra + "}";
}

const Parameter* find_parameter(const ModelStructure& s, const std::string& name) {
  for (const Parameter& p : s.parameters) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("short-conv hybrids: LFM2's layers come from layer_types, full_attn_idxs, or are all attention", "[architecture][mixer]") {
  // Lfm2Config.__post_init__: full_attn_idxs None is every layer.
  const ModelStructure all = build_model_structure(plan_of(lfm2("")));
  CHECK(all.layers[0].mixer == TokenMixer::Attention);
  CHECK(all.layers[1].mixer == TokenMixer::Attention);
  for (const std::string& extra : {std::string(R"(, "full_attn_idxs": [1])"), std::string(R"(, "layer_types": ["conv", "full_attention"])")}) {
    INFO(extra);
    const ModelStructure s = build_model_structure(plan_of(lfm2(extra)));
    REQUIRE(s.layers.size() == 2);
    CHECK(s.layers[0].mixer == TokenMixer::ShortConv);
    CHECK(s.layers[0].mixer_module == "conv");
    CHECK(s.layers[0].mixer_in.size() == 1);     // in_proj
    CHECK(s.layers[0].mixer_other.size() == 1);  // the depthwise conv
    CHECK(s.layers[0].mixer_shape.conv_channels == 64);
    CHECK(s.layers[0].mixer_shape.conv_kernel == 3);
    CHECK(s.parameters[static_cast<size_t>(s.layers[0].o.weight)].name == "model.layers.0.conv.out_proj.weight");
    CHECK(s.layers[1].mixer == TokenMixer::Attention);
    CHECK(s.parameters[static_cast<size_t>(s.layers[1].o.weight)].name == "model.layers.1.self_attn.out_proj.weight");
  }
  // Lfm2MLP: int(2 * 12288 / 3) = 8192, times 1.0, a multiple of 256; block_ff_dim wins over
  // intermediate_size (Lfm2Config pops it), tie_embedding over tie_word_embeddings.
  const ModelStructure s = build_model_structure(plan_of(lfm2("")));
  REQUIRE(find_parameter(s, "model.layers.0.feed_forward.w1.weight") != nullptr);
  CHECK(find_parameter(s, "model.layers.0.feed_forward.w1.weight")->shape == std::vector<int64_t>{8192, 64});
  CHECK(s.layers[0].mlp_width == 8192);
  const ModelStructure popped = build_model_structure(
      plan_of(lfm2(R"(, "block_ff_dim": 300, "block_multiple_of": 64, "tie_embedding": false, "tie_word_embeddings": true)")));
  CHECK(find_parameter(popped, "model.layers.0.feed_forward.w1.weight")->shape == std::vector<int64_t>{256, 64});
  CHECK(find_parameter(popped, "lm_head.weight") != nullptr);
  CHECK(find_parameter(s, "lm_head.weight") == nullptr);  // tied by default
  CHECK(find_parameter(s, "model.embedding_norm.weight") != nullptr);
  // Lfm2Config's strict fields refuse null.
  const std::string null_multiplier = refusal(lfm2(R"(, "block_ffn_dim_multiplier": null)"));
  CHECK(null_multiplier.find("block_ffn_dim_multiplier") != std::string::npos);
  CHECK(null_multiplier.find("null") != std::string::npos);
  // A type LFM2 has no layer for.
  CHECK(refusal(lfm2(R"(, "layer_types": ["conv", "sliding_attention"])")).find("layer_types.1") != std::string::npos);
}

TEST_CASE("short-conv hybrids: LFM2-MoE needs layer_types, and its first num_dense_layers layers are dense", "[architecture][mixer]") {
  const std::string missing = refusal(lfm2_moe(""));
  CHECK(missing.find("layer_types") != std::string::npos);
  CHECK(missing.find("no default") != std::string::npos);
  const ModelStructure s = build_model_structure(plan_of(lfm2_moe(R"(, "layer_types": ["full_attention", "conv"])")));
  CHECK(s.layers[0].mixer == TokenMixer::Attention);
  CHECK_FALSE(s.layers[0].moe);
  CHECK(find_parameter(s, "model.layers.0.feed_forward.w1.weight") != nullptr);
  CHECK(s.layers[1].mixer == TokenMixer::ShortConv);
  CHECK(s.layers[1].moe);
  CHECK(find_parameter(s, "model.layers.1.feed_forward.experts.gate_up_proj")->shape == std::vector<int64_t>{4, 64, 64});
  CHECK(s.num_experts == 4);
  CHECK(s.experts_per_token == 2);
}

TEST_CASE("lightning attention: MiniMax alternates attention and lightning layers without layer_types", "[architecture][mixer]") {
  const ModelStructure s = build_model_structure(plan_of(minimax("")));
  REQUIRE(s.layers.size() == 4);
  CHECK(s.layers[0].mixer == TokenMixer::Attention);
  CHECK(s.layers[1].mixer == TokenMixer::LightningAttention);
  CHECK(s.layers[2].mixer == TokenMixer::Attention);
  CHECK(s.layers[3].mixer == TokenMixer::LightningAttention);
  CHECK(s.layers[1].mixer_module == "self_attn");
  CHECK(s.layers[1].mixer_in.size() == 2);  // qkv_proj, output_gate
  CHECK(s.layers[1].mixer_shape.heads == 4);
  CHECK(s.layers[1].mixer_shape.key_dim == 8);
  CHECK(s.layers[1].mixer_shape.chunk == 16);
  CHECK(find_parameter(s, "model.layers.1.self_attn.qkv_proj.weight")->shape == std::vector<int64_t>{96, 64});
  const ModelStructure listed =
      build_model_structure(plan_of(minimax(R"(, "layer_types": ["linear_attention", "linear_attention", "full_attention", "linear_attention"])")));
  CHECK(listed.layers[0].mixer == TokenMixer::LightningAttention);
  CHECK(listed.layers[2].mixer == TokenMixer::Attention);
}

TEST_CASE("short conv and lightning attention are costed with their own projections and core", "[architecture][mixer][cost]") {
  const int seq = 4096;
  const double t = seq;
  {
    const Plan plan = plan_of(lfm2(R"(, "layer_types": ["conv", "full_attention"])"));
    const ModelStructure s = build_model_structure(plan);
    const LayerCost conv = layer_cost(plan.model, seq, 1, &s, 0);
    // The depthwise conv (3 taps) and the two gating products over 64 channels: t * 64 * (2 * 3 + 2).
    CHECK(conv.attention_flops == Approx(t * 64 * 8));
    // in_proj [192, 64] and out_proj [64, 64]; the MLP at 8192.
    const double mlp = 2 * t * 3 * 64 * 8192;
    CHECK(conv.projection_flops == Approx(2 * t * 64 * (192 + 64) + mlp));
    CHECK(conv.rope_bytes == 0);
    CHECK(conv.mixer_elementwise_bytes == static_cast<int64_t>(t * 2 * (8 * 64)));
    // Linear in the sequence.
    CHECK(layer_cost(plan.model, 2 * seq, 1, &s, 0).attention_flops == Approx(2 * conv.attention_flops));
  }
  {
    const Plan plan = plan_of(minimax(""));
    const ModelStructure s = build_model_structure(plan);
    const LayerCost lightning = layer_cost(plan.model, seq, 1, &s, 1);
    // 4 heads of 8, blocks of 16: t * heads * (4 B d + 4 d^2).
    CHECK(lightning.attention_flops == Approx(t * 4 * (4.0 * 16 * 8 + 4.0 * 8 * 8)));
    CHECK(lightning.rope_bytes == 0);
    CHECK(lightning.mixer_elementwise_bytes > 0);
    CHECK(layer_cost(plan.model, seq, 1, &s, 0).attention_flops == Approx(4.0 * t * t * 4 * 8 / 2));
  }
}

TEST_CASE("short conv: all-linear adapts LFM2's in_proj and out_proj, LoRA on its depthwise conv is refused", "[architecture][mixer]") {
  Plan plan = plan_of(lfm2(R"(, "layer_types": ["conv", "full_attention"])"));
  plan.adapter = Adapter::Lora;
  plan.lora_r = 8;
  plan.lora_target_modules = {"all-linear"};
  plan.lora_target_modules_regex = true;
  const ModelStructure s = build_model_structure(plan);
  CHECK(find_parameter(s, "base_model.model.model.layers.0.conv.in_proj.lora_A.default.weight") != nullptr);
  CHECK(find_parameter(s, "base_model.model.model.layers.0.conv.out_proj.lora_A.default.weight") != nullptr);
  CHECK(find_parameter(s, "base_model.model.model.layers.0.conv.conv.weight") != nullptr);
  plan.lora_target_modules = {"conv.conv"};
  plan.lora_target_modules_regex = false;
  std::string error;
  try {
    build_model_structure(plan);
  } catch (const InputError& e) {
    error = e.what();
  }
  CHECK(error.find("layers.0.conv.conv") != std::string::npos);
  CHECK(error.find("not modelled") != std::string::npos);
}

// ---- Kimi Linear: Kimi delta attention (costed as the gated DeltaNet) and DeepSeek's MLA. The
// parameters are checked against transformers by tests/sim/architectures/kimi_linear*.json and
// lora-kimi_linear*.json (architecture_test.cc).

namespace {

std::string kimi_linear(const std::string& extra, int layers = 4) {
  return R"({"model_type": "kimi_linear", "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 16,
    "num_hidden_layers": )" + std::to_string(layers) + R"(, "num_attention_heads": 4, "vocab_size": 100, "num_experts": 4, "num_experts_per_token": 2,
    "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 8, "torch_dtype": "bfloat16")" +
         extra + "}";
}

}  // namespace

TEST_CASE("Kimi Linear: layer types from layer_types, linear_attn_config's 1-indexed lists, or every fourth layer", "[architecture][mixer]") {
  // KimiLinearConfig.__post_init__ without either: full attention where i is non-zero and i % 4 == 0.
  const ModelStructure pattern = build_model_structure(plan_of(kimi_linear("", 9)));
  for (int i = 0; i < 9; ++i) {
    INFO("layer " << i);
    CHECK(pattern.layers[static_cast<size_t>(i)].mixer == (i == 4 || i == 8 ? TokenMixer::Attention : TokenMixer::GatedDeltaNet));
  }
  // transformers gives ['linear_attention', 'full_attention', 'linear_attention', 'linear_attention']
  // for full_attn_layers [2], kda_layers [1, 3, 4]; linear_attn_config's head_dim, num_heads and
  // short_conv_kernel_size win over the top-level keys.
  const ModelStructure listed = build_model_structure(plan_of(kimi_linear(
      R"(, "linear_head_dim": 64, "linear_attn_config": {"head_dim": 8, "num_heads": 2, "short_conv_kernel_size": 3,
         "full_attn_layers": [2], "kda_layers": [1, 3, 4]})")));
  CHECK(listed.layers[0].mixer == TokenMixer::GatedDeltaNet);
  CHECK(listed.layers[1].mixer == TokenMixer::Attention);
  CHECK(listed.layers[2].mixer == TokenMixer::GatedDeltaNet);
  CHECK(listed.layers[3].mixer == TokenMixer::GatedDeltaNet);
  CHECK(listed.layers[0].mixer_shape.heads == 2);
  CHECK(listed.layers[0].mixer_shape.key_dim == 8);
  CHECK(listed.layers[0].mixer_shape.conv_channels == 3 * 2 * 8);
  CHECK(listed.layers[0].mixer_shape.conv_kernel == 3);
  CHECK(find_parameter(listed, "model.layers.0.self_attn.forget_gate.A_log")->shape == std::vector<int64_t>{1, 1, 2, 1});
  // A layer in neither list (transformers leaves its type None) and a layer number past the end.
  CHECK(refusal(kimi_linear(R"(, "linear_attn_config": {"full_attn_layers": [2], "kda_layers": [1, 3]})")).find("layer 4") !=
        std::string::npos);
  CHECK(refusal(kimi_linear(R"(, "linear_attn_config": {"full_attn_layers": [5], "kda_layers": [1, 2, 3, 4]})"))
            .find("linear_attn_config.full_attn_layers") != std::string::npos);
  // Kimi's own key names (KimiLinearConfig.attribute_map), the first first_k_dense_replace layers
  // dense, and lm_head never tied.
  const ModelStructure s = build_model_structure(plan_of(kimi_linear(R"(, "tie_word_embeddings": true)")));
  CHECK(s.num_experts == 4);
  CHECK(s.experts_per_token == 2);
  CHECK_FALSE(s.layers[0].moe);
  CHECK(s.layers[1].moe);
  CHECK(find_parameter(s, "lm_head.weight") != nullptr);
  CHECK(find_parameter(s, "model.layers.1.mlp.shared_experts.gate_proj.weight")->shape == std::vector<int64_t>{16, 64});
}
