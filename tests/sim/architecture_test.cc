// Every architecture fixture in tests/sim/architectures/ (named_parameters() of the model that
// transformers 5.17.0 + PEFT 0.21.2 build on the meta device (the v4-* ones: transformers 4.57.1), written by
// oracles/architectures/dump_structures.py from oracles/architectures/cases.json) against
// hookstream's structure for the same config.json: names in order, shapes, dtypes, trainable flags;
// a case transformers/PEFT refuse must be refused too.
#include <algorithm>
#include <cmath>
#include <map>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "sim/inputs/architectures/architecture.h"
#include "sim/inputs/architectures/moe_routing.h"
#include "sim/inputs/input_error.h"
#include "sim/inputs/model_structure.h"

using namespace hookstream;
using nlohmann::json;

namespace {

const std::string kFixtures = std::string(HOOKSTREAM_SOURCE_DIR) + "/tests/sim/architectures";

json read_fixture(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

std::vector<std::string> fixture_names() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(kFixtures)) {
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The plan a case describes: full fine-tuning, or LoRA with the case's LoraConfig.
Plan plan_for(const json& fixture, const std::string& name) {
  Plan plan;
  plan.source = name + ".yaml";
  plan.model = parse_model_config(fixture.at("config").dump(), name + "/config.json");
  // The transformers that dumped the fixture builds the model (the v4-* fixtures: transformers
  // 4.57.1's per-expert MoE modules).
  plan.transformers_version = parse_transformers_version(fixture.at("transformers").get<std::string>(), name);
  const json& lora = fixture.at("case").value("lora", json());
  if (!lora.is_null()) {
    plan.adapter = Adapter::Lora;
    plan.lora_r = lora.at("r").get<int>();
    const json& targets = lora.at("target_modules");
    plan.lora_target_modules_regex = targets.is_string();
    if (targets.is_string()) plan.lora_target_modules = {targets.get<std::string>()};
    else plan.lora_target_modules = targets.get<std::vector<std::string>>();
    if (lora.contains("target_parameters")) {
      plan.lora_target_parameters = lora.at("target_parameters").get<std::vector<std::string>>();
    }
  }
  return plan;
}

std::string describe(const Parameter& p) {
  std::string shape;
  for (int64_t d : p.shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
  return p.name + " [" + shape + "] " + to_string(p.dtype) + (p.trainable ? " trainable" : "");
}

std::string describe(const json& p) {
  std::string shape;
  for (const json& d : p.at(1)) shape += (shape.empty() ? "" : ",") + std::to_string(d.get<int64_t>());
  return p.at(0).get<std::string>() + " [" + shape + "] " + p.at(2).get<std::string>() +
         (p.at(3).get<bool>() ? " trainable" : "");
}

// A hybrid decoder's per-layer types are read when its config is parsed, so its full-depth config
// is written before parsing, as dump_structures.py's full_size builds it: a layer_types list the
// case wrote goes on with its last entry; the config class's own list (cut to the fixture's depth)
// is dropped, so that the class's pattern applies at full depth.
json full_depth_hybrid(json fixture, int layers) {
  json& root = fixture["config"];
  json& text = root.contains("text_config") && root["text_config"].is_object() ? root["text_config"] : root;
  const ArchitectureSpec* spec = find_architecture(text.value("model_type", std::string()));
  // Jamba's layer types (and MoE layers) are written by its config rules when the config is parsed
  // (MoeLayers::LayerTypeMoe): its depth too must be in the config before parsing.
  if (spec == nullptr || (spec->layer_types.known.empty() && spec->moe != MoeLayers::LayerTypeMoe)) return fixture;
  text["num_hidden_layers"] = layers;
  const json& overrides = fixture.at("case").value("overrides", json::object());
  if (overrides.contains("layer_types")) {
    json types = overrides.at("layer_types");
    while (static_cast<int>(types.size()) < layers) types.push_back(types.back());
    text["layer_types"] = types;
  } else {
    text.erase("layer_types");
  }
  return fixture;
}

}  // namespace

TEST_CASE("architecture fixtures: hookstream's structure equals what transformers and PEFT build", "[architecture]") {
  const std::vector<std::string> names = fixture_names();
  REQUIRE(names.size() >= 30);
  for (const std::string& name : names) {
    const json fixture = read_fixture(kFixtures + "/" + name + ".json");
    INFO("fixture " << name << " (transformers " << fixture.at("transformers").get<std::string>() << ")");
    if (fixture.contains("error")) {
      // transformers/PEFT refuse it: hookstream refuses it too, with the same reason.
      const std::string expected = fixture.at("error").get<std::string>();
      std::string got;
      try {
        build_model_structure(plan_for(fixture, name));
      } catch (const InputError& e) {
        got = e.what();
      }
      INFO("PEFT: " << expected);
      INFO("hookstream: " << got);
      // PEFT's sentence, up to the module repr hookstream does not have (it names the module).
      std::string gist = expected.substr(expected.find(": ") + 2);
      if (gist.rfind("Target module ", 0) == 0 && gist.find(" is not supported") != std::string::npos) {
        gist = gist.substr(gist.find(" is not supported"));
      }
      CHECK(got.find(gist.substr(0, gist.find(" (PEFT"))) != std::string::npos);
      continue;
    }
    const Plan plan = plan_for(fixture, name);
    const ModelStructure structure = build_model_structure(plan);
    std::vector<std::string> ours, theirs;
    for (const Parameter& p : structure.parameters) ours.push_back(describe(p));
    for (const json& p : fixture.at("parameters")) theirs.push_back(describe(p));
    // Line by line first, so that a failure names the first differing parameter.
    for (size_t i = 0; i < std::min(ours.size(), theirs.size()); ++i) {
      INFO("parameter " << i);
      CHECK(ours[i] == theirs[i]);
      if (ours[i] != theirs[i]) break;
    }
    CHECK(ours.size() == theirs.size());
  }
}

TEST_CASE("architecture fixtures: real-size models have transformers' parameter count and bytes", "[architecture]") {
  // The same configs at transformers' default depth: 8x7B Mixtral, a 30B-A3B-shaped Qwen3-MoE, a
  // 120B-shaped gpt-oss, DeepSeek-V3's 61 layers - every expert counted.
  int checked = 0;
  for (const std::string& name : fixture_names()) {
    const json fixture = read_fixture(kFixtures + "/" + name + ".json");
    if (!fixture.contains("full")) continue;
    INFO("fixture " << name);
    const int layers = fixture.at("full").at("num_hidden_layers").get<int>();
    Plan plan = plan_for(full_depth_hybrid(fixture, layers), name);
    if (fixture.at("full").contains("config")) {
      // Per-layer keys (Gemma 4's layer_types, per_layer_config) the cut config cannot extend: the
      // full-depth config.json as transformers wrote it.
      plan.model = parse_model_config(fixture.at("full").at("config").dump(), name + "/full/config.json");
      CHECK(plan.model.num_hidden_layers == layers);
    }
    plan.model.num_hidden_layers = layers;
    plan.model.values["num_hidden_layers"] = layers;
    const ModelStructure structure = build_model_structure(plan);
    int64_t numel = 0, bytes = 0;
    for (const Parameter& p : structure.parameters) {
      numel += p.numel();
      bytes += p.bytes();
    }
    CHECK(numel == fixture.at("full").at("numel").get<int64_t>());
    CHECK(bytes == fixture.at("full").at("bytes").get<int64_t>());
    ++checked;
  }
  CHECK(checked >= 20);
}

TEST_CASE("a vision tower the tables do not describe is refused, not given another tower", "[architecture]") {
  // Idefics3's tower and pixel-shuffle connector are not described: refused, naming the modelled ones
  // (Idefics2's are, since branch arch11).
  CHECK_THROWS_WITH(parse_model_config(R"({"model_type": "idefics3", "text_config": {"model_type": "llama",
      "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
      "vocab_size": 100}, "vision_config": {"model_type": "idefics3_vision", "hidden_size": 32,
      "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}})", "i3/config.json"),
                    Catch::Contains("i3/config.json: key \"vision_config\": the vision tower of model_type \"idefics3\" is not "
                                    "modelled yet (hookstream models the vision towers of qwen2_vl, qwen2_5_vl, qwen3_vl, ") &&
                        Catch::Contains(" gemma3, ") && Catch::Contains(" idefics2, ") && Catch::Contains(" mllama, "));
  // A described model with a tower its class does not take (Gemma3Model builds SigLIP): refused.
  CHECK_THROWS_WITH(parse_model_config(R"({"model_type": "gemma3", "text_config": {"model_type": "gemma3_text",
      "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
      "vocab_size": 100}, "vision_config": {"model_type": "clip_vision_model", "hidden_size": 32,
      "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}})", "g3/config.json"),
                    "g3/config.json: key \"vision_config.model_type\": hookstream models the siglip_vision_model tower for "
                    "model_type \"gemma3\", got \"clip_vision_model\"");
}

TEST_CASE("described vision towers: LLaVA's feature layer and SigLIP's head", "[architecture]") {
  const std::string text = R"("text_config": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100})";
  // LlavaConfig: vision_config without model_type is CLIP; vision_feature_layer -2 is hidden_states[depth - 1].
  const ModelConfig llava = parse_model_config(R"({"model_type": "llava", )" + text + R"(, "vision_config": {
      "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 3, "num_attention_heads": 2,
      "image_size": 28, "patch_size": 14}})", "llava/config.json");
  REQUIRE(llava.vision);
  CHECK(llava.vision->layout == VisionLayout::Clip);
  CHECK(llava.vision->feature_layers == std::vector<int>{2});
  CHECK(llava.vision->values.at("num_patches") == 4);
  CHECK(llava.text_prefix == "model.language_model");
  Plan plan;
  plan.source = "llava.yaml";
  plan.model = llava;
  const ModelStructure structure = build_model_structure(plan);
  CHECK(structure.parameters[0].name == "model.vision_tower.embeddings.class_embedding");
  CHECK(structure.parameters[2].name == "model.vision_tower.embeddings.position_embedding.weight");
  CHECK(structure.parameters[2].shape == std::vector<int64_t>{5, 32});  // num_patches + 1
  CHECK(structure.vision_blocks.size() == 3);
  CHECK(structure.vision_block_class == "CLIPEncoderLayer");
  REQUIRE(structure.vision_projector.size() == 2);
  CHECK(structure.parameters[static_cast<size_t>(structure.vision_projector[0].weight)].shape == std::vector<int64_t>{64, 32});
  // A feature layer outside hidden_states is named.
  CHECK_THROWS_WITH(parse_model_config(R"({"model_type": "llava", "vision_feature_layer": -5, )" + text + R"(,
      "vision_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 3, "num_attention_heads": 2}})",
                                       "bad/config.json"),
                    Catch::Contains("key \"vision_feature_layer\": expected a hidden_states index in [-4, 3]"));
  // tie_word_embeddings: the composite config's, and LlavaConfig takes the text config's true over
  // its own false (__post_init__); LlavaNextConfig does not.
  const std::string tied_text = R"("text_config": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100, "tie_word_embeddings": true})";
  const std::string small_clip = R"("vision_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 3,
      "num_attention_heads": 2}})";
  CHECK(parse_model_config(R"({"model_type": "llava", "tie_word_embeddings": false, )" + tied_text + ", " + small_clip,
                           "t/config.json").tie_word_embeddings);
  CHECK_FALSE(parse_model_config(R"({"model_type": "llava_next", "tie_word_embeddings": false, )" + tied_text + ", " + small_clip,
                                 "t/config.json").tie_word_embeddings);
  CHECK_FALSE(parse_model_config(R"({"model_type": "llava", "tie_word_embeddings": false, )" + text + ", " + small_clip,
                                 "t/config.json").tie_word_embeddings);
  // ShieldGemma2Config: without its own key, the text config's tie_word_embeddings.
  const std::string siglip = R"("vision_config": {"model_type": "siglip_vision_model", "hidden_size": 32,
      "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}})";
  for (const bool tied : {true, false}) {
    const std::string shield_text = std::string(R"("text_config": {"model_type": "gemma3_text", "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100,
        "tie_word_embeddings": )") + (tied ? "true" : "false") + "}";
    CHECK(parse_model_config(R"({"model_type": "shieldgemma2", )" + shield_text + ", " + siglip, "s/config.json")
              .tie_word_embeddings == tied);
  }
  // SigLIP's pooling head exists unless vision_use_head is false (SiglipVisionTransformer).
  const std::string gemma_text = R"("text_config": {"model_type": "gemma3_text", "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100})";
  for (const bool head : {true, false}) {
    Plan g;
    g.source = "g3.yaml";
    g.model = parse_model_config(R"({"model_type": "gemma3", )" + gemma_text + R"(, "vision_config": {
        "model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 2, "image_size": 28, "patch_size": 14)" + (head ? "" : R"(, "vision_use_head": false)") + "}}",
                                 "g3/config.json");
    const ModelStructure s = build_model_structure(g);
    CHECK(s.vision_head.empty() == !head);
    // QLoRA: bitsandbytes quantizes every plain nn.Linear of the tower (replace_with_bnb_linear:
    // type(module) is nn.Linear), not the Conv2d patch embedding, not MultiheadAttention's
    // NonDynamicallyQuantizableLinear out_proj, not a bare parameter.
    Plan q = g;
    q.adapter = Adapter::Lora;
    q.lora_r = 8;
    q.lora_target_modules = {"q_proj"};
    q.load_in_4bit = true;
    std::map<std::string, bool> quantized;
    for (const Parameter& p : build_model_structure(q).parameters) quantized[p.name] = p.quantized;
    CHECK(quantized.at("base_model.model.model.vision_tower.encoder.layers.0.self_attn.q_proj.base_layer.weight"));
    CHECK(quantized.at("base_model.model.model.vision_tower.encoder.layers.1.mlp.fc2.weight"));
    CHECK_FALSE(quantized.at("base_model.model.model.vision_tower.embeddings.patch_embedding.weight"));
    CHECK_FALSE(quantized.at("base_model.model.model.multi_modal_projector.mm_input_projection_weight"));
    if (head) {
      CHECK_FALSE(quantized.at("base_model.model.model.vision_tower.head.attention.out_proj.weight"));
      CHECK(quantized.at("base_model.model.model.vision_tower.head.mlp.fc1.weight"));
    }
    // Gemma3MultiModalProjector.forward: the norm runs before the projection matmul.
    REQUIRE(s.vision_projector.size() == 2);
    CHECK(s.vision_projector[0].name == "mm_soft_emb_norm");
  }
}

TEST_CASE("config-class rules of Laguna, MiniMax-M3 and the Qwen-VL composites (branch arch8)", "[architecture]") {
  // LagunaConfig's head_dim default is 128, not hidden_size // num_attention_heads.
  const ModelConfig laguna = parse_model_config(R"({"model_type": "laguna", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100})", "laguna/config.json");
  CHECK(laguna.head_dim == 128);
  // gating: true / "per-head" one gate per head, false / "per-element" one per channel.
  CHECK(laguna.values.at("gate_per_head") == 1);
  const ModelConfig per_element = parse_model_config(R"({"model_type": "laguna", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100, "gating": "per-element"})", "laguna/config.json");
  CHECK(per_element.values.at("gate_per_head") == 0);
  // A head-count list of another length than the layers is refused naming the key.
  CHECK_THROWS_WITH(parse_model_config(R"({"model_type": "laguna", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100, "num_attention_heads_per_layer": [4, 4, 4]})",
                                       "laguna/config.json"),
                    Catch::Contains("num_attention_heads_per_layer"));
  // MiniMax-M3's legacy keys, from which the config class writes layer_types / mlp_layer_types, are
  // refused rather than ignored.
  CHECK_THROWS_WITH(parse_model_config(R"({"model_type": "minimax_m3_vl_text", "hidden_size": 64, "intermediate_size": 32,
      "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100, "moe_layer_freq": [0, 1]})", "m3/config.json"),
                    Catch::Contains("m3/config.json") && Catch::Contains("key \"moe_layer_freq\"") &&
                        Catch::Contains("mlp_layer_types"));
  // Qwen3VLMoeConfig ties by its own key (default False), whatever its text config says;
  // Qwen2VLConfig forwards a text config's true.
  const std::string text = R"("text_config": {"model_type": "qwen3_vl_moe_text", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100, "tie_word_embeddings": true})";
  CHECK_FALSE(parse_model_config(R"({"model_type": "qwen3_vl_moe", )" + text + "}", "a.json").tie_word_embeddings);
  CHECK(parse_model_config(R"({"model_type": "qwen3_vl_moe", "tie_word_embeddings": true, )" + text + "}", "b.json").tie_word_embeddings);
  CHECK(parse_model_config(R"({"model_type": "qwen2_vl", "text_config": {"model_type": "qwen2_vl_text", "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100, "tie_word_embeddings": true}})",
                           "c.json").tie_word_embeddings);
}

TEST_CASE("config-class rules of DeepSeek-V4 and DBRX (branch arch12)", "[architecture]") {
  const std::string v4 = R"("model_type": "deepseek_v4", "hidden_size": 64, "moe_intermediate_size": 32, "num_attention_heads": 4,
      "head_dim": 16, "q_lora_rank": 16, "o_groups": 2, "o_lora_rank": 8, "vocab_size": 100)";
  // DeepseekV4Config.__post_init__: without layer_types, two heavily compressed layers, then
  // compressed sparse and heavily compressed alternating.
  const ModelConfig defaults = parse_model_config("{" + v4 + R"(, "num_hidden_layers": 5})", "v4/config.json");
  for (const auto& [layer, type] : std::vector<std::pair<int, std::string>>{{0, "heavily_compressed_attention"},
                                                                            {1, "heavily_compressed_attention"},
                                                                            {2, "heavily_compressed_attention"},
                                                                            {3, "compressed_sparse_attention"},
                                                                            {4, "heavily_compressed_attention"}}) {
    INFO("layer " << layer);
    CHECK(defaults.values.count("layer_types." + std::to_string(layer) + "=" + type) == 1);
  }
  CHECK(defaults.values.at("o_group_in_features") == 32);  // 4 heads * 16 / 2 groups
  CHECK(defaults.values.at("compress_rate_csa_layer") == 4);
  CHECK(defaults.values.at("compress_rate_hca_layer") == 128);
  // The legacy compress_ratios (0 / 4 / 128 per layer) and compress_rate_csa; a longer layer list is
  // cut to num_hidden_layers, as the config class does; a ratio outside the three is refused.
  const ModelConfig legacy = parse_model_config("{" + v4 + R"(, "num_hidden_layers": 2, "compress_ratios": [0, 4], "compress_rate_csa": 8})",
                                                "v4/config.json");
  CHECK(legacy.values.count("layer_types.0=sliding_attention") == 1);
  CHECK(legacy.values.count("layer_types.1=compressed_sparse_attention") == 1);
  CHECK(legacy.values.at("compress_rate_csa_layer") == 8);
  CHECK_NOTHROW(parse_model_config("{" + v4 + R"(, "num_hidden_layers": 1, "layer_types": ["sliding_attention", "sliding_attention"],
      "mlp_layer_types": ["hash_moe", "moe"]})", "v4/config.json"));
  CHECK_THROWS_WITH(parse_model_config("{" + v4 + R"(, "num_hidden_layers": 2, "compress_ratios": [0, 16]})", "v4/config.json"),
                    Catch::Contains("v4/config.json") && Catch::Contains("compress_ratios.1"));
  // mlp_layer_types holds DeepSeek-V4's own names, not "sparse" / "dense".
  CHECK_THROWS_WITH(parse_model_config("{" + v4 + R"(, "num_hidden_layers": 2, "layer_types": ["sliding_attention", "sliding_attention"],
      "mlp_layer_types": ["sparse", "moe"]})", "v4/config.json"),
                    Catch::Contains("mlp_layer_types") && Catch::Contains("hash_moe"));
  CHECK_THROWS_WITH(parse_model_config("{" + v4 + R"(, "num_hidden_layers": 2, "o_groups": 3})", "v4/config.json"),
                    Catch::Contains("o_groups"));

  // hc_head (DeepseekV4HyperHead) runs after the last layer, before the final norm: its parameters
  // are in the final norm's group (first in backward, last in a ZeRO-3 fetch order), not the
  // embedding's, though registered after `norm`; the indexer's never get a gradient.
  {
    const json fixture = read_fixture(kFixtures + "/deepseek_v4.json");
    const ModelStructure structure = build_model_structure(plan_for(fixture, "deepseek_v4"));
    REQUIRE(structure.after_layers.size() == 3);
    CHECK(structure.embed_other.empty());
    for (const LinearUse& use : structure.after_layers) {
      const Parameter& p = structure.parameters.at(static_cast<size_t>(use.weight));
      CHECK(p.name.rfind("model.hc_head.", 0) == 0);
      CHECK(p.group == "final_norm");
    }
    CHECK(structure.layers.at(1).no_grad.size() == 6);  // layer 1 is compressed_sparse_attention
    CHECK(structure.layers.at(0).no_grad.empty());      // sliding_attention: no compressor
  }

  // DBRX: the sizes from attn_config / ffn_config; attn_config.rope_theta is required (transformers
  // 5.17's DbrxAttention reads it and its config class has no default); tied embeddings refused.
  const std::string dbrx = R"("model_type": "dbrx", "d_model": 64, "n_heads": 4, "n_layers": 2, "vocab_size": 100,
      "ffn_config": {"ffn_hidden_size": 32, "moe_num_experts": 4, "moe_top_k": 2})";
  const ModelConfig with_theta = parse_model_config("{" + dbrx + R"(, "attn_config": {"kv_n_heads": 2, "rope_theta": 500000}})", "dbrx/config.json");
  CHECK(with_theta.hidden_size == 64);
  CHECK(with_theta.num_key_value_heads == 2);
  CHECK(with_theta.values.at("moe_num_experts") == 4);
  CHECK(with_theta.values.at("ffn_hidden_size") == 32);
  CHECK_THROWS_WITH(parse_model_config("{" + dbrx + R"(, "attn_config": {"kv_n_heads": 2}})", "dbrx/config.json"),
                    Catch::Contains("dbrx/config.json") && Catch::Contains("attn_config.rope_theta"));
  CHECK_THROWS_WITH(parse_model_config("{" + dbrx + R"(, "attn_config": {"rope_theta": 1}, "tie_word_embeddings": true})", "dbrx/config.json"),
                    Catch::Contains("tie_word_embeddings"));
}

TEST_CASE("the architecture table is the list of modelled model types", "[architecture]") {
  const std::vector<std::string> types = modelled_model_types();
  for (const char* type : {"llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "phi3", "mixtral",
                           "qwen3_moe", "gpt_oss", "deepseek_v3", "qwen3_vl", "qwen2_5_vl_text"}) {
    CHECK(std::find(types.begin(), types.end(), type) != types.end());
  }
  // Qwen2-VL's and Qwen2.5-VL's decoders are Qwen2's (their towers: VisionLayout).
  CHECK(find_architecture("qwen2_vl")->model_type == "qwen2");
  CHECK(find_architecture("qwen2_5_vl")->model_type == "qwen2");
  // A type transformers knows and the table does not describe is refused, never built as a Llama.
  CHECK(find_architecture("hy_v4") == nullptr);
  CHECK_THROWS_WITH(parse_model_config(R"({"model_type": "hy_v4", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100})", "hy_v4/config.json"),
                    Catch::Contains("hy_v4/config.json") && Catch::Contains("key \"model_type\"") &&
                        Catch::Contains("hookstream cannot model this architecture yet") && Catch::Contains("\"hy_v4\""));
  // A config class's own key names (GPT2Config.attribute_map: n_embd, n_layer, n_head) are read.
  const ModelConfig gpt2 = parse_model_config(R"({"model_type": "gpt2", "n_embd": 64, "n_layer": 3, "n_head": 4,
      "vocab_size": 100, "n_positions": 32})", "gpt2/config.json");
  CHECK(gpt2.hidden_size == 64);
  CHECK(gpt2.num_hidden_layers == 3);
  CHECK(gpt2.num_attention_heads == 4);
  CHECK(gpt2.intermediate_size == 256);  // n_inner absent: 4 * n_embd (GPT2Block)
}

TEST_CASE("module conditions: keys, negation, comparisons, and/or", "[architecture]") {
  const std::map<std::string, double> values{{"parallel_attn", 1}, {"new_decoder_architecture", 0},
                                             {"num_ln_in_parallel_attn", 2}, {"hidden_act=xielu", 1}};
  CHECK(evaluate_flag("parallel_attn", values));
  CHECK_FALSE(evaluate_flag("!parallel_attn", values));
  CHECK_FALSE(evaluate_flag("missing", values));
  CHECK(evaluate_flag("!missing", values));
  CHECK(evaluate_flag("hidden_act=xielu", values));
  CHECK(evaluate_flag("num_ln_in_parallel_attn==2", values));
  CHECK_FALSE(evaluate_flag("num_ln_in_parallel_attn!=2", values));
  CHECK(evaluate_flag("missing!=2", values));  // a key the config lacks compares as 0
  CHECK(evaluate_flag("missing==0", values));
  CHECK_FALSE(evaluate_flag("parallel_attn&new_decoder_architecture", values));
  CHECK(evaluate_flag("parallel_attn&new_decoder_architecture|num_ln_in_parallel_attn==2", values));
  CHECK_FALSE(evaluate_flag("new_decoder_architecture|missing", values));
  CHECK_FALSE(evaluate_flag("", values));
}

TEST_CASE("shape expressions: sums of products of config keys", "[architecture]") {
  const std::map<std::string, double> values{{"a", 3}, {"b", 4}, {"c", 5}};
  CHECK(evaluate_shape("a*b+c", values, "x") == std::vector<long long>{17});
  CHECK(evaluate_shape("a,2*b,c", values, "x") == std::vector<long long>{3, 8, 5});
  CHECK_THROWS_WITH(evaluate_shape("a*d", values, "m/config.json"),
                    "m/config.json: key \"d\": missing; expected a positive integer");
  CHECK(evaluate_flag("!a", values) == false);
  CHECK(evaluate_flag("!zzz", values) == true);
}

TEST_CASE("idle experts: exact probabilities under uniform top-k routing", "[architecture][moe]") {
  // E=4, k=2, T=2: the two tokens' pairs cover all four experts only when the second is the
  // complement of the first (1 of 6 pairs).
  const ExpertIdleEstimate small = estimate_idle_experts(4, 2, 2);
  CHECK(small.p_any_idle == Approx(5.0 / 6.0));
  CHECK(small.p_expert_idle == Approx(0.25));
  CHECK(small.expected_idle == Approx(1.0));
  // Brute force over every routing of T=3 tokens to 2 of E=6 experts.
  std::vector<unsigned> pairs;
  for (unsigned a = 0; a < 6; ++a) {
    for (unsigned b = a + 1; b < 6; ++b) pairs.push_back((1u << a) | (1u << b));
  }
  int idle = 0, total = 0;
  for (unsigned x : pairs) {
    for (unsigned y : pairs) {
      for (unsigned z : pairs) {
        ++total;
        idle += (x | y | z) != 0x3f;
      }
    }
  }
  CHECK(estimate_idle_experts(6, 2, 3).p_any_idle == Approx(double(idle) / total));
  // Fewer token slots than experts: some expert is always idle.
  const ExpertIdleEstimate starved = estimate_idle_experts(128, 8, 4);
  CHECK(starved.min_idle == 128 - 32);
  CHECK(starved.p_any_idle == 1.0);
  // Qwen3-30B-A3B's 128 experts, top-8, at 4096 tokens: idle experts are vanishingly rare.
  const ExpertIdleEstimate big = estimate_idle_experts(128, 8, 4096);
  CHECK(big.p_any_idle < 1e-100);
  CHECK(big.p_any_idle == Approx(big.expected_idle).epsilon(1e-6));
  CHECK_THROWS(estimate_idle_experts(4, 5, 10));
}

TEST_CASE("Gemma 3's projector pools (image_size // patch_size) // sqrt(mm_tokens_per_image) patches per side into one image token",
          "[architecture][vision]") {
  // Gemma3MultiModalProjector.__init__: patches_per_image = image_size // patch_size,
  // tokens_per_side = int(mm_tokens_per_image ** 0.5), kernel_size = patches_per_image // tokens_per_side.
  const json fixture = read_fixture(kFixtures + "/gemma3-no-vision-head.json");
  const json& config = fixture.at("config");
  // Gemma3Config's own defaults: SigLIP's 224 / 16 = 14 patches per side, 256 tokens (16 per side):
  // kernel 14 // 16 = 0, a model that builds but cannot pool; costed at one patch per token.
  const int patches_per_side = config.at("vision_config").at("image_size").get<int>() / config.at("vision_config").at("patch_size").get<int>();
  const int tokens_per_side = static_cast<int>(std::sqrt(config.at("mm_tokens_per_image").get<double>()));
  REQUIRE(patches_per_side / tokens_per_side == 0);
  const ModelConfig gemma3 = parse_model_config(config.dump(), "gemma3/config.json");
  REQUIRE(gemma3.vision);
  CHECK(gemma3.vision->spatial_merge_size == 1);
  // The real checkpoints: 896 / 14 = 64 patches per side, 256 tokens: 4 x 4 patches per token.
  json real = config;
  real["vision_config"]["image_size"] = 896;
  real["vision_config"]["patch_size"] = 14;
  real["mm_tokens_per_image"] = 256;
  CHECK(parse_model_config(real.dump(), "gemma3-real/config.json").vision->spatial_merge_size == 4);
  real["mm_tokens_per_image"] = 64;  // 8 x 8 tokens: 8 x 8 patches each
  CHECK(parse_model_config(real.dump(), "gemma3-64/config.json").vision->spatial_merge_size == 8);
  // Other composite types keep their own rule (LLaVA: one patch per token).
  const ModelConfig llava = parse_model_config(read_fixture(kFixtures + "/llava.json").at("config").dump(), "llava/config.json");
  CHECK(llava.vision->spatial_merge_size == 1);
}

TEST_CASE("Llama 4: moe_layers picks the sparse layers, the VL model nests a whole causal LM under language_model", "[architecture][moe]") {
  // Llama4TextDecoderLayer: is_moe_layer = layer_idx in config.moe_layers; without the list,
  // Llama4TextConfig writes range(interleave_moe_layer_step - 1, num_hidden_layers, step).
  const std::string base = R"("model_type": "llama4_text", "hidden_size": 64, "intermediate_size": 32,
      "intermediate_size_mlp": 96, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
      "head_dim": 16, "vocab_size": 100, "num_local_experts": 4, "num_experts_per_tok": 1)";
  auto sparse_layers = [](const std::string& text) {
    Plan plan;
    plan.source = "llama4.yaml";
    plan.model = parse_model_config("{" + text + "}", "llama4/config.json");
    std::vector<int> sparse;
    for (const DecoderLayerUse& layer : build_model_structure(plan).layers) {
      if (layer.moe) sparse.push_back(layer.index);
    }
    return sparse;
  };
  CHECK(sparse_layers(base) == std::vector<int>{0, 1, 2, 3});
  CHECK(sparse_layers(base + R"(, "interleave_moe_layer_step": 2)") == std::vector<int>{1, 3});
  CHECK(sparse_layers(base + R"(, "interleave_moe_layer_step": 2, "moe_layers": [0])") == std::vector<int>{0});
  CHECK_THROWS_WITH(sparse_layers(base + R"(, "moe_layers": "all")"), Catch::Contains("key \"moe_layers\": expected a list of layer indices"));

  const json fixture = read_fixture(kFixtures + "/llama4.json");
  Plan plan = plan_for(fixture, "llama4");
  CHECK(plan.model.text_prefix == "language_model.model");
  const ModelStructure structure = build_model_structure(plan);
  CHECK(structure.head_module == "language_model.lm_head");
  CHECK(structure.parameters[static_cast<size_t>(structure.lm_head)].name == "language_model.lm_head.weight");
  CHECK(structure.vision_block_class == "Llama4VisionEncoderLayer");
  // layernorm_post is registered with the embeddings and runs after the layers.
  REQUIRE(structure.vision_final_norm.size() == 1);
  CHECK(structure.parameters[static_cast<size_t>(structure.vision_final_norm[0].weight)].name == "vision_model.layernorm_post.weight");
  CHECK(structure.parameters[static_cast<size_t>(structure.vision_patch_embed.weight)].name == "vision_model.patch_embedding.linear.weight");
}

TEST_CASE("Gemma 4: towers not modelled and per_layer_config where transformers does not read it are refused", "[architecture]") {
  const std::string text = R"("text_config": {"model_type": "gemma4_text", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100})";
  // Gemma4Model builds its vision and audio towers only for a non-null sub-config; a text-only
  // Gemma 4 is the decoder under model.language_model.
  const ModelConfig text_only = parse_model_config("{\"model_type\": \"gemma4\", \"vision_config\": null, " + text + "}", "g4/config.json");
  CHECK(text_only.text_prefix == "model.language_model");
  CHECK(text_only.decoder_type == "gemma4_text");
  CHECK_THROWS_WITH(parse_model_config("{\"model_type\": \"gemma4\", \"vision_config\": {\"hidden_size\": 32}, " + text + "}",
                                       "g4/config.json"),
                    Catch::StartsWith("g4/config.json: key \"vision_config\": the vision tower of model_type \"gemma4\" is not modelled yet"));
  CHECK_THROWS_WITH(parse_model_config("{\"model_type\": \"gemma4\", \"audio_config\": {\"hidden_size\": 32}, " + text + "}",
                                       "g4/config.json"),
                    Catch::StartsWith("g4/config.json: key \"audio_config\": the audio tower of model_type \"gemma4\" is not modelled yet"));
  // Only the classes that read per_layer_config accept it (LlamaConfig raises
  // AmbiguousGlobalPerLayerAttributeError when a layer reads an overridden key globally).
  const std::string llama = R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
      "num_attention_heads": 4, "vocab_size": 100, "per_layer_config": {"1": {"intermediate_size": 256}}})";
  CHECK_THROWS_WITH(parse_model_config(llama, "l/config.json"),
                    Catch::StartsWith("l/config.json: key \"per_layer_config\": set, but transformers' llama modelling code"));
  const std::string skip = R"({"model_type": "gemma4_text", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
      "num_attention_heads": 4, "vocab_size": 100, "per_layer_config": {"1": {"skip": ["mlp"]}}})";
  CHECK_THROWS_WITH(parse_model_config(skip, "s/config.json"),
                    "s/config.json: key \"per_layer_config.1.skip\": not modelled by hookstream; expected a number, got [\"mlp\"]");
}

TEST_CASE("Gemma 4: layer_types default, the forced full last layer and global_head_dim", "[architecture]") {
  // Gemma4TextConfig.__post_init__: no layer_types -> five sliding layers then a full one, the last
  // forced to full; full layers take global_head_dim and, with attention_k_eq_v, the global kv heads.
  Plan plan;
  plan.source = "g.yaml";
  plan.model = parse_model_config(R"({"model_type": "gemma4_text", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100,
      "global_head_dim": 32, "attention_k_eq_v": true, "num_global_key_value_heads": 1, "hidden_size_per_layer_input": null})",
                                  "g/config.json");
  const ModelStructure structure = build_model_structure(plan);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const Parameter& p : structure.parameters) shapes[p.name] = p.shape;
  CHECK(shapes.at("model.layers.0.self_attn.q_proj.weight") == std::vector<int64_t>{64, 64});
  CHECK(shapes.at("model.layers.0.self_attn.v_proj.weight") == std::vector<int64_t>{32, 64});
  for (const int full : {5, 7}) {
    const std::string layer = "model.layers." + std::to_string(full) + ".self_attn.";
    CHECK(shapes.at(layer + "q_proj.weight") == std::vector<int64_t>{128, 64});
    CHECK(shapes.at(layer + "k_proj.weight") == std::vector<int64_t>{32, 64});
    CHECK(shapes.count(layer + "v_proj.weight") == 0);
  }
  CHECK(shapes.count("model.layers.6.self_attn.v_proj.weight") == 1);
  CHECK(shapes.count("model.embed_tokens_per_layer.weight") == 0);
}

TEST_CASE("LFM2-VL: tie_embedding is popped into tie_word_embeddings and wins over it", "[architecture]") {
  // Lfm2VlConfig.__post_init__: self.tie_word_embeddings = kwargs.pop("tie_embedding", self.tie_word_embeddings).
  json config = read_fixture(kFixtures + "/lfm2_vl.json").at("config");
  CHECK(parse_model_config(config.dump(), "lfm2_vl/config.json").tie_word_embeddings);
  config["tie_word_embeddings"] = true;
  config["tie_embedding"] = false;
  CHECK_FALSE(parse_model_config(config.dump(), "lfm2_vl/config.json").tie_word_embeddings);
  config["tie_word_embeddings"] = false;
  config["tie_embedding"] = true;
  CHECK(parse_model_config(config.dump(), "lfm2_vl/config.json").tie_word_embeddings);
  config["tie_embedding"] = "yes";
  CHECK_THROWS_WITH(parse_model_config(config.dump(), "lfm2_vl/config.json"),
                    Catch::Contains("key \"tie_embedding\": expected true or false"));
}

TEST_CASE("GLM-4.5V config.json files saved by transformers 4.5x (Glm4vMoe_text, a glm4v_moe tower) load", "[architecture]") {
  // v4.57.1 configuration_glm4v_moe.py: Glm4vMoeTextConfig.model_type "Glm4vMoe_text",
  // Glm4vMoeVisionConfig.model_type "glm4v_moe"; Glm4vMoeConfig builds both with its own sub-config
  // classes whatever the names, in 5.17 too.
  const json fixture = read_fixture(kFixtures + "/glm4v_moe-no-attention-bias.json");
  json config = fixture.at("config");
  config["text_config"]["model_type"] = "Glm4vMoe_text";
  config["vision_config"]["model_type"] = "glm4v_moe";
  Plan plan = plan_for(fixture, "glm4v_moe-no-attention-bias");
  plan.model = parse_model_config(config.dump(), "glm45v/config.json");
  CHECK(plan.model.decoder_type == "glm4v_moe_text");
  const ModelStructure saved_by_v4 = build_model_structure(plan);
  const ModelStructure current = build_model_structure(plan_for(fixture, "glm4v_moe-no-attention-bias"));
  REQUIRE(saved_by_v4.parameters.size() == current.parameters.size());
  for (size_t i = 0; i < current.parameters.size(); ++i) CHECK(saved_by_v4.parameters[i].name == current.parameters[i].name);
  // The old name means nothing under another composite.
  config["model_type"] = "glm4v";
  CHECK_THROWS(parse_model_config(config.dump(), "glm4v/config.json"));
}
