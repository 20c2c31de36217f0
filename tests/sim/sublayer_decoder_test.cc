// Decoder layers made of several attention + MLP sub-blocks (ArchitectureSpec::sublayers):
// LongCat-Flash (transformers/models/longcat_flash/modular_longcat_flash.py, LongcatFlashDecoderLayer).
// Its parameters are checked against transformers by the fixtures (tests/sim/architectures/
// longcat_flash*.json, lora-longcat_flash-*.json; architecture_test.cc); here: its depth key, what is
// refused, the order its gradients become ready in backward (what DDP's buckets and FSDP's units
// see), and its cost.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "sim/engine/autograd_engine.h"
#include "sim/engine/forward_graph.h"
#include "sim/inputs/input_error.h"
#include "sim/inputs/model_structure.h"
#include "sim/streams/stream_expansion.h"

using namespace hookstream;

namespace {

// A small LongCat-Flash: 2 layers (num_layers), MLA with q_lora_rank 16, 4 routed + 2 zero experts.
std::string longcat(const std::string& extra) {
  return R"({"model_type": "longcat_flash", "num_layers": 2, "num_hidden_layers": 4, "hidden_size": 64,
    "num_attention_heads": 4, "q_lora_rank": 16, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8,
    "v_head_dim": 8, "head_dim": 8, "ffn_hidden_size": 96, "expert_ffn_hidden_size": 32, "n_routed_experts": 4,
    "zero_expert_num": 2, "moe_topk": 2, "vocab_size": 256, "torch_dtype": "bfloat16")" +
         extra + "}";
}

Plan plan_of(const std::string& config) {
  Plan plan;
  plan.source = "plan.yaml";
  plan.model = parse_model_config(config, "longcat/config.json");
  return plan;
}

// The parameters in the order their AccumulateGrad nodes run in one backward of the whole model.
std::vector<std::string> gradient_order(const Plan& plan, const ModelStructure& structure) {
  AutogradEngine engine(structure.parameters.size());
  std::vector<std::string> order;
  engine.set_hook_listener([&](const AccumulateEvent& event) {
    if (event.parameter >= 0) order.push_back(structure.parameters[static_cast<size_t>(event.parameter)].name);
  });
  ForwardContext context;
  context.plan = &plan;
  context.structure = &structure;
  const ForwardOutputs outputs = record_forward(engine, context);
  engine.backward({engine.op("loss", {outputs.logits})}, "outer backward");
  return order;
}

}  // namespace

TEST_CASE("LongCat-Flash: num_layers is the depth, q_lora_rank is required", "[architecture][sublayers]") {
  // LongcatFlashModel builds range(num_layers) layers and sets num_hidden_layers to 2 * num_layers.
  const Plan plan = plan_of(longcat(""));
  CHECK(plan.model.num_hidden_layers == 2);
  const ModelStructure structure = build_model_structure(plan);
  REQUIRE(structure.layers.size() == 2);
  const DecoderLayerUse& layer = structure.layers[0];
  REQUIRE(layer.sublayers.size() == 1);
  REQUIRE(layer.shortcut.size() == 1);
  CHECK(layer.mixer_module == "self_attn.0");
  CHECK(layer.mlp_module == "mlps.0");
  CHECK(layer.sublayers[0].mixer_module == "self_attn.1");
  CHECK(layer.sublayers[0].mlp_module == "mlps.1");
  CHECK(layer.shortcut[0].mlp_module == "mlp");
  CHECK(layer.shortcut[0].moe);
  // The router (an nn.Linear) and the fused experts are the shortcut block's gate / up / down.
  CHECK(structure.parameters.at(static_cast<size_t>(layer.shortcut[0].gate.weight)).name == "model.layers.0.mlp.router.classifier.weight");
  CHECK(structure.parameters.at(static_cast<size_t>(layer.shortcut[0].up.weight)).shape ==
        std::vector<int64_t>{6, 64, 64});  // n_routed_experts + zero_expert_num rows
  CHECK(structure.parameters.at(static_cast<size_t>(layer.shortcut[0].down.weight)).shape == std::vector<int64_t>{4, 64, 32});
  // The two sub-blocks' slots hold their own modules.
  CHECK(structure.parameters.at(static_cast<size_t>(layer.o.weight)).name == "model.layers.0.self_attn.0.o_proj.weight");
  CHECK(structure.parameters.at(static_cast<size_t>(layer.sublayers[0].o.weight)).name == "model.layers.0.self_attn.1.o_proj.weight");
  CHECK(structure.parameters.at(static_cast<size_t>(layer.sublayers[0].input_norm)).name == "model.layers.0.input_layernorm.1.weight");
  CHECK(structure.parameters.at(static_cast<size_t>(layer.down.weight)).name == "model.layers.0.mlps.0.down_proj.weight");

  // LongcatFlashMLA computes (hidden_size / q_lora_rank) ** 0.5 in __init__: null is a TypeError there.
  CHECK_THROWS_WITH(plan_of(longcat(R"(, "q_lora_rank": null)")),
                    Catch::Contains("longcat/config.json") && Catch::Contains("q_lora_rank"));
  // num_layers is what the model reads; a config without it is refused, naming it.
  CHECK_THROWS_WITH(plan_of(R"({"model_type": "longcat_flash", "num_hidden_layers": 4, "hidden_size": 64,
      "num_attention_heads": 4, "ffn_hidden_size": 96, "vocab_size": 256})"),
                    Catch::Contains("num_layers"));
}

TEST_CASE("LongCat-Flash: gradients are ready sub-block by sub-block, the shortcut MoE after mlps.0", "[architecture][sublayers][ddp]") {
  // LongcatFlashDecoderLayer.forward: attn 0, norm, shortcut MoE (self.mlp) and mlps[0] on the same
  // normed state, residual; attn 1, norm, mlps[1]; residual + mlps[1] + shortcut. The autograd
  // engine runs ready nodes by decreasing sequence number, so in backward the second sub-block
  // finishes first, then mlps[0] (created after the MoE), then the MoE, then the first attention.
  const Plan plan = plan_of(longcat(""));
  const ModelStructure structure = build_model_structure(plan);
  const std::vector<std::string> order = gradient_order(plan, structure);
  // Every trainable parameter gets its gradient exactly once per backward: no parameter is unused
  // (the zero experts' rows of gate_up_proj get zeros through the slice, not None) and none is
  // used twice, so DDP needs neither find_unused_parameters nor static_graph for LongCat-Flash.
  size_t trainable = 0;
  for (const Parameter& p : structure.parameters) {
    if (!p.trainable) continue;
    ++trainable;
    CHECK(std::count(order.begin(), order.end(), p.name) == 1);
  }
  CHECK(order.size() == trainable);
  auto at = [&](const std::string& name) {
    const auto it = std::find(order.begin(), order.end(), "model.layers.1." + name);
    REQUIRE(it != order.end());
    return it - order.begin();
  };
  CHECK(at("mlps.1.down_proj.weight") < at("post_attention_layernorm.1.weight"));
  CHECK(at("post_attention_layernorm.1.weight") < at("self_attn.1.o_proj.weight"));
  CHECK(at("self_attn.1.q_a_proj.weight") < at("input_layernorm.1.weight"));
  CHECK(at("input_layernorm.1.weight") < at("mlps.0.down_proj.weight"));
  CHECK(at("mlps.0.gate_proj.weight") < at("mlp.experts.down_proj"));
  CHECK(at("mlp.router.classifier.weight") < at("post_attention_layernorm.0.weight"));
  CHECK(at("post_attention_layernorm.0.weight") < at("self_attn.0.o_proj.weight"));
  CHECK(at("self_attn.0.q_a_proj.weight") < at("input_layernorm.0.weight"));
  // Layer 1 before layer 0.
  const auto first_of_layer0 = std::find_if(order.begin(), order.end(), [](const std::string& n) {
    return n.rfind("model.layers.0.", 0) == 0;
  });
  CHECK(first_of_layer0 - order.begin() > at("input_layernorm.0.weight"));
}

TEST_CASE("LongCat-Flash: a layer costs both sub-blocks and the shortcut experts", "[architecture][sublayers][cost]") {
  const Plan plan = plan_of(longcat(""));
  const ModelStructure structure = build_model_structure(plan);
  // 7 projections per sub-block (q, k, v, o, gate, up, down) and the shortcut block's router and
  // experts (its attention slots empty).
  const std::vector<ProjectionShape> shapes = layer_projections(plan.model, &structure, 0);
  REQUIRE(shapes.size() == 21);
  CHECK(shapes[5].out == 96);   // mlps.0.up: ffn_hidden_size
  CHECK(shapes[12].out == 96);  // mlps.1.up
  CHECK(shapes[14].in == 0);    // the shortcut block has no attention
  CHECK(shapes[19].out == 2 * 32);  // moe_topk experts of expert_ffn_hidden_size a token goes to
  const LayerCost cost = layer_cost(plan.model, 128, 1, &structure, 0, false);
  // Two attention cores: 2 x QK^T and PV over head_dim 8 (head_dim key) and 4 heads, causal halved.
  CHECK(cost.attention_flops == Approx(2 * 4.0 * 128 * 128 * 4 * 8 / 2));
}
