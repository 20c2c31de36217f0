// Tests for sim/model_config: the bundled presets carry the real HF values, defaults follow
// transformers, and every bad input is one line naming the file and key.
#include "sim/inputs/model_config.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include <catch2/catch.hpp>

#include "sim/inputs/input_error.h"

namespace hookstream {
namespace {

namespace fs = std::filesystem;

std::string preset_path(const std::string& name) {
  return std::string(HOOKSTREAM_SOURCE_DIR) + "/presets/" + name + ".json";
}

// The message of the InputError `action` throws; fails the test if it throws nothing.
std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const InputError& error) {
    return error.what();
  }
  FAIL("expected an InputError");
  return "";
}

// A minimal valid Llama-style config.json with one field replaced (or removed when `value` is empty).
std::string llama_json(const std::string& key = "", const std::string& value = "") {
  std::map<std::string, std::string> fields = {
      {"model_type", "\"llama\""}, {"hidden_size", "64"},        {"intermediate_size", "128"},
      {"num_hidden_layers", "2"},  {"num_attention_heads", "4"}, {"num_key_value_heads", "2"},
      {"vocab_size", "100"}};
  if (!key.empty()) {
    if (value.empty()) fields.erase(key);
    else fields[key] = value;
  }
  std::string text = "{";
  for (const auto& [name, field] : fields) text += (text.size() > 1 ? ", \"" : "\"") + name + "\": " + field;
  return text + "}";
}

}  // namespace

TEST_CASE("Llama-3.1-8B preset has the published shape", "[model_config]") {
  const ModelConfig config = load_model_config(preset_path("Llama-3.1-8B"));
  CHECK(config.model_type == "llama");
  CHECK(config.architecture == "LlamaForCausalLM");
  CHECK(config.hidden_size == 4096);
  CHECK(config.intermediate_size == 14336);
  CHECK(config.num_hidden_layers == 32);
  CHECK(config.num_attention_heads == 32);
  CHECK(config.num_key_value_heads == 8);
  CHECK(config.head_dim == 128);  // derived: no head_dim in Llama 3.1's config.json
  CHECK(config.vocab_size == 128256);
  CHECK_FALSE(config.tie_word_embeddings);
  CHECK_FALSE(config.attention_bias);
  CHECK_FALSE(config.qk_norm);
  CHECK(config.torch_dtype == DType::BFloat16);
  CHECK(config.text_prefix == "model");
  CHECK_FALSE(config.vision.has_value());
  CHECK(config.source == preset_path("Llama-3.1-8B"));
}

TEST_CASE("Llama-3.1-70B preset has the published shape", "[model_config]") {
  const ModelConfig config = load_model_config(preset_path("Llama-3.1-70B"));
  CHECK(config.hidden_size == 8192);
  CHECK(config.intermediate_size == 28672);
  CHECK(config.num_hidden_layers == 80);
  CHECK(config.num_attention_heads == 64);
  CHECK(config.num_key_value_heads == 8);
  CHECK(config.head_dim == 128);
  CHECK(config.vocab_size == 128256);
}

TEST_CASE("Qwen2.5-7B preset: q/k/v biases come from the model type", "[model_config]") {
  const ModelConfig config = load_model_config(preset_path("Qwen2.5-7B"));
  CHECK(config.model_type == "qwen2");
  CHECK(config.attention_bias);  // no attention_bias key in the file: Qwen2Attention hard-codes it
  CHECK_FALSE(config.qk_norm);
  CHECK(config.hidden_size == 3584);
  CHECK(config.intermediate_size == 18944);
  CHECK(config.num_hidden_layers == 28);
  CHECK(config.num_attention_heads == 28);
  CHECK(config.num_key_value_heads == 4);
  CHECK(config.head_dim == 128);
  CHECK(config.vocab_size == 152064);
  CHECK_FALSE(config.tie_word_embeddings);
}

TEST_CASE("Qwen3-VL-4B preset: decoder from text_config, vision tower from vision_config", "[model_config]") {
  const ModelConfig config = load_model_config(preset_path("Qwen3-VL-4B"));
  CHECK(config.model_type == "qwen3_vl");
  CHECK(config.architecture == "Qwen3VLForConditionalGeneration");
  CHECK(config.text_prefix == "model.language_model");
  CHECK(config.hidden_size == 2560);
  CHECK(config.intermediate_size == 9728);
  CHECK(config.num_hidden_layers == 36);
  CHECK(config.num_attention_heads == 32);
  CHECK(config.num_key_value_heads == 8);
  CHECK(config.head_dim == 128);  // explicit: 2560 / 32 would be 80
  CHECK(config.vocab_size == 151936);
  CHECK(config.tie_word_embeddings);
  CHECK(config.qk_norm);
  CHECK_FALSE(config.attention_bias);
  CHECK(config.torch_dtype == DType::BFloat16);  // text_config.dtype
  REQUIRE(config.vision.has_value());
  const VisionTowerConfig& vision = *config.vision;
  CHECK(vision.depth == 24);
  CHECK(vision.hidden_size == 1024);
  CHECK(vision.intermediate_size == 4096);
  CHECK(vision.num_heads == 16);
  CHECK(vision.in_channels == 3);
  CHECK(vision.patch_size == 16);
  CHECK(vision.temporal_patch_size == 2);
  CHECK(vision.spatial_merge_size == 2);
  CHECK(vision.out_hidden_size == 2560);
  CHECK(vision.num_position_embeddings == 2304);
  CHECK(vision.deepstack_visual_indexes == std::vector<int>{5, 11, 17});
}

TEST_CASE("tiny presets are tiny float32 models", "[model_config]") {
  const ModelConfig llama = load_model_config(preset_path("tiny-llama"));
  CHECK(llama.hidden_size == 16);
  CHECK(llama.intermediate_size == 32);
  CHECK(llama.num_hidden_layers == 4);
  CHECK(llama.num_attention_heads == 2);
  CHECK(llama.num_key_value_heads == 1);
  CHECK(llama.head_dim == 8);
  CHECK(llama.vocab_size == 64);
  CHECK(llama.torch_dtype == DType::Float32);
  CHECK_FALSE(llama.vision.has_value());

  const ModelConfig vl = load_model_config(preset_path("tiny-vl"));
  CHECK(vl.model_type == "qwen3_vl");
  CHECK(vl.text_prefix == "model.language_model");
  CHECK(vl.hidden_size == 16);
  CHECK(vl.num_hidden_layers == 2);
  CHECK(vl.torch_dtype == DType::Float32);
  CHECK(vl.qk_norm);
  REQUIRE(vl.vision.has_value());
  CHECK(vl.vision->depth == 2);
  CHECK(vl.vision->hidden_size == 16);
  CHECK(vl.vision->out_hidden_size == 16);
  CHECK(vl.vision->deepstack_visual_indexes == std::vector<int>{0});
}

TEST_CASE("every bundled preset parses", "[model_config]") {
  const std::vector<std::string> presets = list_presets();
  CHECK(presets == std::vector<std::string>{"Llama-3.1-70B", "Llama-3.1-8B", "Qwen2.5-7B", "Qwen3-VL-4B",
                                            "tiny-llama", "tiny-vl"});
  for (const std::string& name : presets) {
    INFO(name);
    CHECK(load_model_config(preset_path(name)).num_hidden_layers > 0);
  }
}

TEST_CASE("defaults follow transformers", "[model_config]") {
  const ModelConfig config = parse_model_config(
      R"({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
          "num_attention_heads": 4, "vocab_size": 100})",
      "x.json");
  CHECK(config.num_key_value_heads == 4);  // = num_attention_heads
  CHECK(config.head_dim == 16);            // = hidden / heads
  CHECK(config.torch_dtype == DType::BFloat16);
  CHECK_FALSE(config.tie_word_embeddings);
  CHECK_FALSE(config.attention_bias);
  CHECK(config.model_type.empty());
  CHECK(config.architecture.empty());
  CHECK(config.text_prefix == "model");
  CHECK(config.source == "x.json");
}

TEST_CASE("dtype: the newer `dtype` key wins over `torch_dtype`", "[model_config]") {
  CHECK(parse_model_config(llama_json("torch_dtype", "\"float16\""), "x").torch_dtype == DType::Float16);
  CHECK(parse_model_config(llama_json("dtype", "\"float32\""), "x").torch_dtype == DType::Float32);
  std::string both = llama_json("dtype", "\"float32\"");
  both.insert(1, "\"torch_dtype\": \"float16\", ");
  CHECK(parse_model_config(both, "x").torch_dtype == DType::Float32);
  CHECK(error_of([] { parse_model_config(llama_json("torch_dtype", "\"int8\""), "x.json"); }) ==
        "x.json: key \"torch_dtype\": expected \"bfloat16\", \"float16\" or \"float32\", got \"int8\"");
}

TEST_CASE("qwen3 model type turns on q/k norms, explicit attention_bias is read", "[model_config]") {
  CHECK(parse_model_config(llama_json("model_type", "\"qwen3\""), "x").qk_norm);
  CHECK_FALSE(parse_model_config(llama_json("model_type", "\"qwen3\""), "x").attention_bias);
  CHECK(parse_model_config(llama_json("attention_bias", "true"), "x").attention_bias);
}

TEST_CASE("a Qwen2-VL config.json from before text_config is Qwen2-VL's tower under model.language_model", "[model_config]") {
  // Qwen2VLConfig reads top-level decoder keys into its text_config, and transformers 5 builds the
  // decoder under model.language_model (modeling_qwen2_vl.py Qwen2VLModel).
  const ModelConfig m = parse_model_config(
      R"({"architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl",
          "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
          "vision_config": {"depth": 3, "embed_dim": 32, "hidden_size": 64, "mlp_ratio": 4,
                            "num_heads": 4, "in_chans": 3, "patch_size": 14,
                            "spatial_merge_size": 2, "temporal_patch_size": 2}})",
      "x.json");
  CHECK(m.decoder_type == "qwen2");
  CHECK(m.text_prefix == "model.language_model");
  REQUIRE(m.vision);
  CHECK(m.vision->layout == VisionLayout::Qwen2VL);
  CHECK(m.vision->hidden_size == 32);
  CHECK(m.vision->intermediate_size == 128);
  CHECK(m.vision->out_hidden_size == 64);
}

TEST_CASE("vision out_hidden_size defaults to the text hidden size", "[model_config]") {
  const ModelConfig config = parse_model_config(
      R"({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
          "vocab_size": 100, "vision_config": {"num_hidden_layers": 2, "hidden_size": 32,
          "intermediate_size": 64, "num_heads": 2}})",
      "x.json");
  REQUIRE(config.vision.has_value());
  CHECK(config.vision->depth == 2);
  CHECK(config.vision->out_hidden_size == 64);
  CHECK(config.vision->patch_size == 14);
  CHECK(config.vision->in_channels == 3);
}

TEST_CASE("bad values are one-line errors naming file and key", "[model_config]") {
  CHECK(error_of([] { parse_model_config(llama_json("hidden_size", "\"abc\""), "presets/x.json"); }) ==
        "presets/x.json: key \"hidden_size\": expected a positive integer, got \"abc\"");
  CHECK(error_of([] { parse_model_config(llama_json("num_hidden_layers", "0"), "x.json"); }) ==
        "x.json: key \"num_hidden_layers\": expected a positive integer, got 0");
  CHECK(error_of([] { parse_model_config(llama_json("intermediate_size", "-5"), "x.json"); }) ==
        "x.json: key \"intermediate_size\": expected a positive integer, got -5");
  CHECK(error_of([] { parse_model_config(llama_json("vocab_size", "1.5"), "x.json"); }) ==
        "x.json: key \"vocab_size\": expected a positive integer, got 1.5");
  CHECK(error_of([] { parse_model_config(llama_json("vocab_size"), "x.json"); }) ==
        "x.json: key \"vocab_size\": missing; expected a positive integer");
  CHECK(error_of([] { parse_model_config(llama_json("num_key_value_heads", "3"), "x.json"); }) ==
        "x.json: key \"num_key_value_heads\": expected a divisor of num_attention_heads 4, got 3");
  CHECK(error_of([] {
          std::string text = llama_json("num_attention_heads", "100");
          parse_model_config(text.replace(text.find("\"llama\""), 7, "\"mistral\""), "x.json");
        }) == "x.json: key \"num_attention_heads\": expected at most hidden_size 64 (or an explicit head_dim), got 100");
  // A head count that does not divide hidden_size is floored, as transformers does for the classes
  // without the check (MistralAttention: getattr(config, "head_dim", hidden_size // num_attention_heads));
  // LlamaConfig.validate_architecture refuses it, head_dim or not.
  const auto mistral = [](std::string text) { return text.replace(text.find("\"llama\""), 7, "\"mistral\""); };
  CHECK(parse_model_config(mistral(llama_json("hidden_size", "66")), "x").head_dim == 16);
  CHECK(error_of([] { parse_model_config(llama_json("hidden_size", "66"), "x.json"); }) ==
        "x.json: key \"num_attention_heads\": expected a divisor of hidden_size 66 (llama's config class refuses it in "
        "validate_architecture, head_dim or not), got 4");
  CHECK(error_of([] { parse_model_config(llama_json("tie_word_embeddings", "\"yes\""), "x.json"); }) ==
        "x.json: key \"tie_word_embeddings\": expected true or false, got \"yes\"");
  // An explicit head_dim makes a non-dividing head count legal (Qwen3-VL-4B: 2560 / 32 heads of 128).
  CHECK(parse_model_config(mistral(llama_json("hidden_size", "66")).insert(1, "\"head_dim\": 16, "), "x").head_dim == 16);
  CHECK_THROWS(parse_model_config(llama_json("hidden_size", "66").insert(1, "\"head_dim\": 16, "), "x"));
}

TEST_CASE("errors inside text_config and vision_config name the nested key", "[model_config]") {
  CHECK(error_of([] {
          parse_model_config(R"({"text_config": {"hidden_size": "big"}, "vocab_size": 1})", "vl.json");
        }) == "vl.json: key \"text_config.hidden_size\": expected a positive integer, got \"big\"");
  CHECK(error_of([] {
          parse_model_config(llama_json("vision_config", R"({"depth": 0})"), "vl.json");
        }) == "vl.json: key \"vision_config.depth\": expected a positive integer, got 0");
  CHECK(error_of([] {
          parse_model_config(
              llama_json("vision_config", R"({"depth": 2, "hidden_size": 8, "intermediate_size": 8, "num_heads": 2,
                                             "deepstack_visual_indexes": [2]})"),
              "vl.json");
        }) == "vl.json: key \"vision_config.deepstack_visual_indexes\": expected a list of block indices in [0, 2), got 2");
}

TEST_CASE("malformed JSON reports nlohmann's position", "[model_config]") {
  const std::string message = error_of([] { parse_model_config("{\n  \"hidden_size\": 4,\n  oops\n}", "bad.json"); });
  CHECK(message.rfind("bad.json:3: malformed JSON: parse error at line 3, column 3", 0) == 0);
  // A number past double is valid JSON that nlohmann refuses with out_of_range 406 (no position):
  // bad input on the number's line, not an internal error.
  CHECK(error_of([] { parse_model_config("{\n  \"hidden_size\": 4,\n  \"vocab_size\": 1e400\n}", "big.json"); }) ==
        "big.json:3: malformed JSON: number overflow parsing '1e400'");
  CHECK(message.find('\n') == std::string::npos);
  CHECK(error_of([] { parse_model_config("[1, 2]", "list.json"); }) ==
        "list.json: expected a JSON object (a Hugging Face config.json), got [1,2]");
}

TEST_CASE("missing file", "[model_config]") {
  CHECK(error_of([] { load_model_config("/nonexistent/x.json"); }) ==
        "cannot read /nonexistent/x.json: No such file or directory");
  CHECK(error_of([] { load_model_config(HOOKSTREAM_SOURCE_DIR); }) ==
        std::string("cannot read ") + HOOKSTREAM_SOURCE_DIR + ": Is a directory");
}

TEST_CASE("find_preset: names, case and Hugging Face ids", "[model_config]") {
  CHECK(find_preset("tiny-llama") == preset_path("tiny-llama"));
  CHECK(find_preset("TINY-LLAMA") == preset_path("tiny-llama"));
  CHECK(find_preset("tiny-llama.json") == preset_path("tiny-llama"));
  CHECK(find_preset("meta-llama/Llama-3.1-8B") == preset_path("Llama-3.1-8B"));
  CHECK(find_preset("meta-llama/Meta-Llama-3.1-8B-Instruct") == preset_path("Llama-3.1-8B"));
  CHECK(find_preset("meta-llama/Llama-3.1-70B-Instruct") == preset_path("Llama-3.1-70B"));
  CHECK(find_preset("Qwen/Qwen3-VL-4B-Instruct") == preset_path("Qwen3-VL-4B"));
  CHECK(find_preset("Qwen/Qwen2.5-7B-Instruct") == preset_path("Qwen2.5-7B"));
  CHECK(find_preset("llama3.1-70b") == preset_path("Llama-3.1-70B"));
  CHECK_FALSE(find_preset("meta-llama/Llama-3.1-405B").has_value());
  CHECK_FALSE(find_preset("").has_value());
  CHECK_FALSE(find_preset("a/b/tiny-llama").has_value());  // not an HF id: only one org allowed
}

TEST_CASE("HOOKSTREAM_DATA_DIR overrides the presets directory at run time", "[model_config]") {
  const fs::path dir = fs::temp_directory_path() / "hookstream_model_config_test_data";
  fs::create_directories(dir / "presets");
  std::ofstream(dir / "presets" / "Custom-1B.json") << llama_json();
  ::setenv("HOOKSTREAM_DATA_DIR", dir.c_str(), 1);
  const auto custom = find_preset("org/custom-1b");
  const auto bundled = find_preset("tiny-llama");
  const auto names = list_presets();
  ::unsetenv("HOOKSTREAM_DATA_DIR");
  fs::remove_all(dir);
  CHECK(custom == (dir / "presets" / "Custom-1B.json").string());
  CHECK_FALSE(bundled.has_value());
  CHECK(names == std::vector<std::string>{"Custom-1B"});
}

TEST_CASE("dtype names and sizes", "[model_config]") {
  CHECK(to_string(DType::BFloat16) == "bfloat16");
  CHECK(to_string(DType::Float16) == "float16");
  CHECK(to_string(DType::Float32) == "float32");
  CHECK(dtype_bytes(DType::BFloat16) == 2);
  CHECK(dtype_bytes(DType::Float16) == 2);
  CHECK(dtype_bytes(DType::Float32) == 4);
}

TEST_CASE("rope_scaling: the RoPE variants the runtime computes are read with their keys checked", "[model_config]") {
  const ModelConfig llama = load_model_config(preset_path("Llama-3.1-8B"));
  CHECK(llama.rope_type == "llama3");
  CHECK(llama.rope_factor == 8.0);
  CHECK(llama.rope_low_freq_factor == 1.0);
  CHECK(llama.rope_high_freq_factor == 4.0);
  CHECK(llama.rope_original_max_position_embeddings == 8192);
  CHECK(load_model_config(preset_path("Qwen3-VL-4B")).rope_type == "default");  // M-RoPE, rope_type default
  CHECK(parse_model_config(llama_json("rope_scaling", "null"), "x").rope_type == "default");
  CHECK(parse_model_config(llama_json("rope_scaling", R"({"type": "linear", "factor": 2})"), "x").rope_factor == 2.0);
  CHECK(parse_model_config(llama_json("rope_scaling", R"({"type": "mrope", "mrope_section": [16, 24, 24]})"), "x").rope_type ==
        "default");
  // A variant the runtime does not compute changes no shape: the verifier takes it.
  CHECK(parse_model_config(llama_json("rope_scaling", R"({"rope_type": "yarn", "factor": 4})"), "x").rope_type == "yarn");
  CHECK(error_of([] { parse_model_config(llama_json("rope_scaling", R"({"rope_type": "llama3", "factor": 8})"), "c.json"); }) ==
        "c.json: key \"rope_scaling.low_freq_factor\": missing; rope_type llama3 needs it");
  CHECK(error_of([] { parse_model_config(llama_json("rope_scaling", R"({"rope_type": "linear", "factor": -1})"), "c.json"); }) ==
        "c.json: key \"rope_scaling.factor\": expected a positive number, got -1");
  CHECK(error_of([] { parse_model_config(llama_json("rope_scaling", "[1]"), "c.json"); }) ==
        "c.json: key \"rope_scaling\": expected an object or null, got [1]");
}


TEST_CASE("pad_token_id outside the vocabulary: refused where nn.Embedding(padding_idx=pad_token_id) asserts", "[model_config]") {
  // torch/nn/modules/sparse.py: padding_idx must be in [-num_embeddings, num_embeddings); LlamaModel
  // passes config.pad_token_id (transformers 5.17 only warns in validate_token_ids).
  CHECK(error_of([] { parse_model_config(llama_json("pad_token_id", "100"), "x.json"); }) ==
        "x.json: key \"pad_token_id\": expected null or an index into the vocabulary (vocab_size 100): llama's "
        "nn.Embedding(padding_idx=pad_token_id) asserts \"Padding_idx must be within num_embeddings\", got 100");
  CHECK_THAT(error_of([] { parse_model_config(llama_json("pad_token_id", "-101"), "x.json"); }),
             Catch::Contains("key \"pad_token_id\"") && Catch::Contains("got -101"));
  // In range, a negative index counting from the end, or null: built (as transformers builds them).
  CHECK_NOTHROW(parse_model_config(llama_json("pad_token_id", "99"), "x.json"));
  CHECK_NOTHROW(parse_model_config(llama_json("pad_token_id", "-1"), "x.json"));
  CHECK_NOTHROW(parse_model_config(llama_json("pad_token_id", "null"), "x.json"));
  // GPT-2's wte takes no padding_idx: any pad_token_id loads.
  CHECK_NOTHROW(parse_model_config(R"({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4,
      "vocab_size": 100, "pad_token_id": 50256})", "gpt2.json"));
  // A composite's decoder reads text_config's pad_token_id, not the outer one.
  const std::string text = R"("text_config": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100, "pad_token_id": PAD},
      "vision_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 2, "image_size": 28, "patch_size": 14})";
  const auto llava = [&](const std::string& inner, const std::string& outer) {
    std::string t = text;
    t.replace(t.find("PAD"), 3, inner);
    return R"({"model_type": "llava", "pad_token_id": )" + outer + ", " + t + "}";
  };
  CHECK_NOTHROW(parse_model_config(llava("0", "32000"), "llava.json"));
  CHECK_THAT(error_of([&] { parse_model_config(llava("100", "0"), "llava.json"); }),
             Catch::Contains("key \"text_config.pad_token_id\""));
}

TEST_CASE("layer_types and mlp_layer_types are validated as transformers' validate_layer_type does", "[model_config]") {
  // PreTrainedConfig.validate_layer_type (configuration_utils.py): one entry per layer, each in
  // ALLOWED_ATTN_LAYER_TYPES; mlp_layer_types the same, checked only when layer_types is there.
  CHECK(error_of([] { parse_model_config(llama_json("layer_types", R"(["full_attention"])"), "x.json"); }) ==
        "x.json: key \"layer_types\": expected one entry per layer (num_hidden_layers 2; transformers' "
        "validate_layer_type), got 1 entries");
  CHECK_THAT(error_of([] { parse_model_config(llama_json("layer_types", R"(["full_attention", "full_attention", "full_attention"])"), "x.json"); }),
             Catch::Contains("key \"layer_types\": expected one entry per layer") && Catch::Contains("got 3 entries"));
  CHECK_THAT(error_of([] { parse_model_config(llama_json("layer_types", R"(["full_attention", "global"])"), "x.json"); }),
             Catch::Contains("key \"layer_types.1\": expected one of \"full_attention\", \"sliding_attention\"") &&
                 Catch::Contains("got \"global\""));
  CHECK_NOTHROW(parse_model_config(llama_json("layer_types", R"(["full_attention", "full_attention"])"), "x.json"));
  // Custom code remaps legacy names first (remap_legacy_layer_types): entries are not checked there.
  CHECK_NOTHROW(parse_model_config(R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100, "layer_types": ["attention", "attention"],
      "auto_map": {"AutoConfig": "configuration_x.XConfig"}})", "x.json"));
}

}  // namespace hookstream
