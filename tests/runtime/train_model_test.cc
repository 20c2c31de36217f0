// TrainModel (runtime/train_model.h) on the CPU in float64: every way the plan can run a layer
// (checkpoint flavours, offload protocols interpreted with streams as ordered execution, tiled-MLP
// strategies, chunked cross-entropy) computes the same loss and gradients as the plain model.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/record_function.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <unistd.h>

#include "runtime/activation_offload.h"
#include "runtime/liger_ops.h"
#include "runtime/safetensors.h"
#include "runtime/train_model.h"
#include "sim/inputs/input_error.h"
#include "sim/inputs/plan.h"

// Last: glog (pulled in by LibTorch) defines its own CHECK, which Catch's must replace.
#undef CHECK
#include <catch2/catch.hpp>

namespace hookstream {
namespace {

const std::string kModels = std::string(HOOKSTREAM_SOURCE_DIR) + "/tests/plans/models/";

Plan make_plan(const std::string& model, const std::string& yaml) {
  LoadOptions load;
  load.model_path = kModels + model;
  Plan plan = parse_plan("base_model: tiny-llama\nsequence_len: 8\nmicro_batch_size: 2\n" + yaml, "train_model_test.yaml", load);
  // Larger weights than HF's 0.02 so that every layer changes the result visibly.
  plan.model.initializer_range = 0.3;
  return plan;
}

struct Batch {
  at::Tensor ids, labels;
};

Batch make_batch(const Plan& plan, uint64_t seed = 7) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  Batch b;
  b.ids = at::randint(plan.model.vocab_size, {plan.micro_batch_size, plan.sequence_len}, gen, at::kLong);
  b.labels = at::randint(plan.model.vocab_size, {plan.micro_batch_size, plan.sequence_len}, gen, at::kLong);
  b.labels.index_put_({0, 0}, -100);  // ignored tokens take part in no mean
  b.labels.index_put_({1, 3}, -100);
  return b;
}

struct Result {
  double loss = 0;
  std::map<std::string, at::Tensor> grads;
  OffloadStats stats;
};

TrainModelOptions double_options() {
  TrainModelOptions options;
  options.dtype = at::kDouble;
  options.seed = 11;
  return options;
}

// LoRA B starts at zero (PEFT), which leaves A without gradient; give B values so both are tested.
void randomise_lora_b(TrainModel& model) {
  torch::NoGradGuard no_grad;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(3);
  for (auto& [name, tensor] : model.named_parameters()) {
    if (name.find("lora_B") != std::string::npos) tensor.copy_(at::randn(tensor.sizes(), gen, at::kDouble));
  }
}

Result run(const Plan& plan, TrainModelOptions options = double_options()) {
  TrainModel model(plan, options);
  randomise_lora_b(model);
  const Batch batch = make_batch(plan);
  Result result;
  at::Tensor loss = model.loss(batch.ids, batch.labels, TrainPosition{});
  loss.backward();
  result.loss = loss.item<double>();
  const auto names = model.ddp_parameter_names();
  const auto params = model.ddp_parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    result.grads[names[i]] = params[i].grad().defined() ? params[i].grad().clone() : at::Tensor();
  }
  result.stats = model.take_offload_stats();
  return result;
}

void require_same(const Result& expected, const Result& actual, const std::string& what) {
  INFO(what);
  REQUIRE(actual.loss == Approx(expected.loss).epsilon(1e-12));
  REQUIRE(actual.grads.size() == expected.grads.size());
  for (const auto& [name, grad] : expected.grads) {
    INFO(name);
    const at::Tensor& other = actual.grads.at(name);
    REQUIRE(grad.defined());
    REQUIRE(other.defined());
    REQUIRE(grad.abs().max().item<double>() > 0);
    CHECK(at::allclose(other, grad, /*rtol=*/1e-9, /*atol=*/1e-13));
  }
}

const std::vector<std::string>& protocols() {
  static const std::vector<std::string> names = {"none", "single_buffer", "double_buffer_events", "deepspeed_offload",
                                                 "save_on_cpu", "pageable"};
  return names;
}

struct ModelCase {
  std::string file, adapter;
};

TEST_CASE("train model: checkpointing, offload protocols, tiled MLP and chunked CE match the plain model", "[train_model]") {
  const std::vector<ModelCase> cases = {{"tiny-llama-tied.json", ""},
                                        {"tiny-llama-untied.json", ""},
                                        {"tiny-qwen3.json", ""},
                                        {"tiny-llama-tied.json", "adapter: lora\nlora_r: 2\nlora_target_linear: true\n"}};
  for (const ModelCase& c : cases) {
    const Result plain = run(make_plan(c.file, c.adapter));
    std::vector<std::string> variants;
    for (const char* reentrant : {"true", "false"}) {
      const std::string ckpt = std::string("gradient_checkpointing: true\ngradient_checkpointing_kwargs: {use_reentrant: ") + reentrant + "}\n";
      variants.push_back(ckpt);
      variants.push_back(ckpt + "hookstream: {checkpoint_layers: [1]}\n");
      for (const std::string& protocol : protocols()) {
        variants.push_back(ckpt + "activation_offloading: true\nhookstream: {offload_protocol: " + protocol + "}\n");
      }
      variants.push_back(ckpt + "activation_offloading: true\nhookstream: {checkpoint_layers: [0]}\n");
      // Partial offload: layer 0's input to the CPU, layer 1's kept on the device (plain checkpoint).
      variants.push_back(ckpt + "activation_offloading: true\nhookstream: {offload_layers: [0]}\n");
    }
    const std::string tiled = "tiled_mlp: true\ntiled_mlp_num_shards: 2\n";
    variants.push_back(tiled);
    variants.push_back(tiled + "hookstream: {tiled_mlp_backward: grad_then_backward}\n");
    variants.push_back(tiled + "hookstream: {tiled_mlp_backward: function_returns_grads, tiled_mlp_weights_as_inputs: true}\n");
    variants.push_back(tiled + "gradient_checkpointing: true\nhookstream: {tiled_mlp_backward: grad_then_backward}\n");
    variants.push_back(tiled + "gradient_checkpointing: true\ngradient_checkpointing_kwargs: {use_reentrant: false}\n");
    variants.push_back(tiled + "gradient_checkpointing: true\ngradient_checkpointing_kwargs: {use_reentrant: false}\n"
                               "hookstream: {tiled_mlp_backward: function_returns_grads, tiled_mlp_weights_as_inputs: true}\n");
    variants.push_back(tiled + "gradient_checkpointing: true\nactivation_offloading: true\n");
    variants.push_back("chunked_cross_entropy: true\nchunked_cross_entropy_num_chunks: 3\n");
    variants.push_back("chunked_cross_entropy: true\nchunked_cross_entropy_num_chunks: 3\nhookstream:\n  chunked_loss: recompute_lm_head\n");
    variants.push_back("chunked_cross_entropy: true\ngradient_checkpointing: true\nactivation_offloading: true\n");
    // axolotl's LigerPlugin: Liger's RMSNorm and SiLU * up (runtime/liger_ops.h), plain, checkpointed
    // (the deferred down projection reads Liger's product) and tiled.
    const std::string liger = "plugins:\n  - axolotl.integrations.liger.LigerPlugin\nliger_rms_norm: true\nliger_glu_activation: true\n";
    variants.push_back(liger);
    variants.push_back(liger + "gradient_checkpointing: true\ngradient_checkpointing_kwargs: {use_reentrant: false}\n");
    variants.push_back(liger + tiled + "gradient_checkpointing: true\n");
    for (const std::string& variant : variants) {
      require_same(plain, run(make_plan(c.file, c.adapter + variant)), c.file + " " + c.adapter + "\n" + variant);
    }
  }
}

TEST_CASE("train model: pinned slots are allocated before the first step, exactly the ones the step uses", "[train_model]") {
  const Plan plain_plan = make_plan("tiny-llama-tied.json", "");
  const Result plain = run(plain_plan);
  const int64_t slot_bytes = plain_plan.micro_batch_size * plain_plan.sequence_len * plain_plan.model.hidden_size *
                             static_cast<int64_t>(sizeof(double));
  const int layers = plain_plan.model.num_hidden_layers;
  REQUIRE(layers >= 2);
  struct Case {
    std::string keys;
    int64_t pinned;  // what prepare_offload must pin: one slot per offloaded layer, none for pageable
  };
  const std::string ckpt = "gradient_checkpointing: true\nactivation_offloading: true\n";
  std::vector<Case> cases;
  for (const std::string protocol : {"single_buffer", "double_buffer_events", "deepspeed_offload", "save_on_cpu"}) {
    cases.push_back({ckpt + "hookstream: {offload_protocol: " + protocol + "}\n", layers * slot_bytes});
  }
  cases.push_back({ckpt + "hookstream: {offload_protocol: pageable}\n", 0});
  cases.push_back({ckpt + "hookstream: {offload_layers: [1]}\n", slot_bytes});
  for (const Case& c : cases) {
    INFO(c.keys);
    const Plan plan = make_plan("tiny-llama-tied.json", c.keys);
    TrainModel model(plan, double_options());
    randomise_lora_b(model);
    REQUIRE(model.prepare_offload(plan.micro_batch_size, plan.sequence_len) == c.pinned);
    REQUIRE(model.prepare_offload(plan.micro_batch_size, plan.sequence_len) == 0);  // nothing left to pin
    const Batch batch = make_batch(plan);
    at::Tensor loss = model.loss(batch.ids, batch.labels, TrainPosition{});
    loss.backward();
    // The step wrote its inputs into the prepared slots: it pinned no other (a wrong slot choice
    // in prepare would leave the step allocating its own, and the total would grow).
    const OffloadStats stats = model.take_offload_stats();
    CHECK(stats.pinned_slot_bytes == c.pinned);
    CHECK(loss.item<double>() == Approx(plain.loss).epsilon(1e-12));
  }
}

TEST_CASE("train model: a layer checkpointed twice gives the same result in every flavour", "[train_model]") {
  const std::string twice = "gradient_checkpointing: true\nhookstream: {checkpoint_twice_layers: [1]}\n";
  const Result reentrant = run(make_plan("tiny-llama-tied.json", twice));
  const Result once = run(make_plan("tiny-llama-tied.json", "gradient_checkpointing: true\n"));
  CHECK(reentrant.loss != Approx(once.loss).epsilon(1e-6));  // the layer really ran twice
  require_same(reentrant, run(make_plan("tiny-llama-tied.json", twice + "gradient_checkpointing_kwargs: {use_reentrant: false}\n")),
               "non-reentrant twice");
  require_same(reentrant, run(make_plan("tiny-llama-tied.json", twice + "tiled_mlp: true\ntiled_mlp_num_shards: 4\n")),
               "twice with tiled MLP");
}

TEST_CASE("train model: an offloaded layer cannot be checkpointed twice", "[train_model]") {
  const Plan plan = make_plan("tiny-llama-tied.json",
                              "gradient_checkpointing: true\nactivation_offloading: true\nhookstream: {checkpoint_twice_layers: [1]}\n");
  REQUIRE_THROWS_WITH(TrainModel(plan, double_options()), Catch::Contains("hookstream.checkpoint_twice_layers"));
}

TEST_CASE("train model: chunked cross-entropy equals the unchunked loss, with ignored labels", "[train_model]") {
  for (int chunks : {1, 2, 5, 16}) {
    const Result plain = run(make_plan("tiny-llama-untied.json", ""));
    const Result chunked = run(make_plan("tiny-llama-untied.json",
                                         "chunked_cross_entropy: true\nchunked_cross_entropy_num_chunks: " + std::to_string(chunks) + "\n"));
    require_same(plain, chunked, "chunks " + std::to_string(chunks));
  }
}

TEST_CASE("train model: LoRA B starts at zero, so the adapted model's first loss is the base model's", "[train_model]") {
  const Plan base = make_plan("tiny-llama-tied.json", "");
  const Plan lora = make_plan("tiny-llama-tied.json", "adapter: lora\nlora_r: 4\nlora_alpha: 8\nlora_target_linear: true\n");
  TrainModel base_model(base, double_options());
  TrainModel lora_model(lora, double_options());
  const Batch batch = make_batch(base);
  const double base_loss = base_model.loss(batch.ids, batch.labels, {}).item<double>();
  const double lora_loss = lora_model.loss(batch.ids, batch.labels, {}).item<double>();
  CHECK(lora_loss == base_loss);
  int adapters = 0;
  for (const auto& [name, tensor] : lora_model.named_parameters()) {
    const bool adapter = name.find("lora_") != std::string::npos;
    INFO(name);
    CHECK(tensor.requires_grad() == adapter);  // the base is frozen
    if (name.find("lora_B") != std::string::npos) CHECK(tensor.abs().max().item<double>() == 0);
    if (name.find("lora_A") != std::string::npos) {
      ++adapters;
      CHECK(tensor.scalar_type() == at::kDouble);
      // kaiming_uniform(a=sqrt(5)): |A| <= 1/sqrt(fan_in)
      CHECK(tensor.abs().max().item<double>() <= 1.0 / std::sqrt(16.0) + 1e-12);
    }
  }
  CHECK(adapters == 4 * 7);
  // float32 base: adapters stay float32 (PEFT), the base in the requested dtype.
  TrainModelOptions bf16 = double_options();
  bf16.dtype = at::kBFloat16;
  TrainModel mixed(lora, bf16);
  for (const auto& [name, tensor] : mixed.named_parameters()) {
    INFO(name);
    CHECK(tensor.scalar_type() == (name.find("lora_") != std::string::npos ? at::kFloat : at::kBFloat16));
  }
  const at::Tensor loss = mixed.loss(batch.ids, batch.labels, {});
  CHECK(loss.scalar_type() == at::kFloat);
  CHECK(loss.requires_grad());
}

TEST_CASE("train model: initialisation is deterministic and HF-like, loss divides by accumulation steps", "[train_model]") {
  const Plan plan = make_plan("tiny-llama-untied.json", "gradient_accumulation_steps: 4\n");
  TrainModel a(plan, double_options()), b(plan, double_options());
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    INFO(pa[i].first);
    CHECK(at::equal(pa[i].second, pb[i].second));
    if (pa[i].first.find("norm") != std::string::npos) CHECK(at::equal(pa[i].second, at::ones_like(pa[i].second)));
  }
  const Batch batch = make_batch(plan);
  const double accumulated = a.loss(batch.ids, batch.labels, {}).item<double>();
  const double single = run(make_plan("tiny-llama-untied.json", "")).loss;
  CHECK(accumulated * 4 == Approx(single).epsilon(1e-12));
  TrainModelOptions other = double_options();
  other.seed = 12;
  TrainModel c(plan, other);
  CHECK_FALSE(at::equal(c.named_parameters()[0].second, pa[0].second));
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("hookstream_train_model_" + std::to_string(::getpid()) + "_" + name)).string();
}

TEST_CASE("safetensors: round trip, and weights from a file with HF or PEFT names", "[train_model][safetensors]") {
  const std::string path = temp_path("roundtrip.safetensors");
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const at::Tensor a = at::randn({3, 5}, gen, at::kFloat);
  const at::Tensor b = at::randn({7}, gen, at::kDouble).to(at::kBFloat16);
  const at::Tensor c = at::arange(6, at::kLong).reshape({2, 3});
  write_safetensors(path, {{"a", a}, {"b", b}, {"c", c}}, {{"format", "pt"}});
  {
    SafetensorsFile file(path);
    CHECK(file.names() == std::vector<std::string>{"a", "b", "c"});
    CHECK(file.metadata().at("format") == "pt");
    CHECK(file.entry("b").dtype == "BF16");
    CHECK(at::equal(file.tensor("a"), a));
    CHECK(at::equal(file.tensor("b"), b));
    CHECK(at::equal(file.tensor("c"), c));
    // the data section starts 8-byte aligned
    std::ifstream in(path, std::ios::binary);
    unsigned char length[8];
    in.read(reinterpret_cast<char*>(length), 8);
    CHECK(length[0] % 8 == 0);
  }

  // A full model saved under HF names loads into the LoRA-wrapped structure (PEFT names).
  const Plan full = make_plan("tiny-llama-tied.json", "");
  TrainModelOptions source_options = double_options();
  source_options.seed = 99;
  TrainModel source(full, source_options);
  write_safetensors(path, source.named_parameters());
  const Plan lora = make_plan("tiny-llama-tied.json", "adapter: lora\nlora_r: 2\nlora_target_modules: [q_proj, v_proj]\n");
  TrainModelOptions load = double_options();
  load.weights_path = path;
  TrainModel loaded(lora, load);
  std::map<std::string, at::Tensor> by_name;
  for (const auto& [name, tensor] : source.named_parameters()) by_name[name] = tensor;
  int compared = 0;
  for (const auto& [name, tensor] : loaded.named_parameters()) {
    if (name.find("lora_") != std::string::npos) continue;
    std::string hf = name.substr(std::string("base_model.model.").size());
    const auto at = hf.find(".base_layer.");
    if (at != std::string::npos) hf.replace(at, 12, ".");
    INFO(name);
    CHECK(at::equal(tensor, by_name.at(hf)));
    ++compared;
  }
  CHECK(compared == static_cast<int>(by_name.size()));
  // ...and the same file loads into a float32 model (cast on load, as from_pretrained does).
  TrainModelOptions f32 = load;
  f32.dtype = at::kFloat;
  TrainModel loaded32(full, f32);
  CHECK(loaded32.named_parameters()[0].second.scalar_type() == at::kFloat);
  CHECK(at::allclose(loaded32.named_parameters()[0].second.to(at::kDouble), source.named_parameters()[0].second, 1e-6, 1e-7));
  std::remove(path.c_str());
}

TEST_CASE("safetensors: missing, mis-shaped, wrongly typed tensors and damaged files are input errors", "[train_model][safetensors]") {
  const std::string path = temp_path("bad.safetensors");
  const Plan plan = make_plan("tiny-llama-tied.json", "");
  TrainModelOptions options = double_options();
  options.weights_path = path;
  TrainModel source(plan, double_options());
  auto params = source.named_parameters();

  SECTION("missing tensor") {
    auto fewer = params;
    fewer.erase(fewer.begin() + 3);
    write_safetensors(path, fewer);
    REQUIRE_THROWS_AS(TrainModel(plan, options), InputError);
    REQUIRE_THROWS_WITH(TrainModel(plan, options), Catch::Contains(path) && Catch::Contains(params[3].first) && Catch::Contains("missing"));
  }
  SECTION("wrong shape") {
    auto wrong = params;
    wrong[2].second = at::zeros({3, 3}, at::kDouble);
    write_safetensors(path, wrong);
    REQUIRE_THROWS_WITH(TrainModel(plan, options), Catch::Contains(params[2].first) && Catch::Contains("expected shape"));
  }
  SECTION("wrong dtype") {
    auto wrong = params;
    wrong[2].second = at::zeros(params[2].second.sizes(), at::kLong);
    write_safetensors(path, wrong);
    REQUIRE_THROWS_WITH(TrainModel(plan, options), Catch::Contains(params[2].first) && Catch::Contains("I64"));
  }
  SECTION("truncated file") {
    write_safetensors(path, params);
    const auto size = std::filesystem::file_size(path);
    std::filesystem::resize_file(path, size - 5);
    REQUIRE_THROWS_WITH(SafetensorsFile(path), Catch::Contains(path) && Catch::Contains("truncated"));
    std::filesystem::resize_file(path, 6);
    REQUIRE_THROWS_WITH(SafetensorsFile(path), Catch::Contains("truncated"));
  }
  SECTION("malformed header") {
    std::ofstream out(path, std::ios::binary);
    const char length[8] = {4, 0, 0, 0, 0, 0, 0, 0};
    out.write(length, 8);
    out << "{no}";
    out.close();
    REQUIRE_THROWS_WITH(SafetensorsFile(path), Catch::Contains(path) && Catch::Contains("malformed header"));
  }
  SECTION("a number past double in the header") {
    // Valid JSON that nlohmann refuses with out_of_range 406 rather than parse_error.
    const std::string header = R"({"__metadata__": {}, "w": {"dtype": "F32", "shape": [1e400], "data_offsets": [0, 4]}})";
    std::ofstream out(path, std::ios::binary);
    const char length[8] = {static_cast<char>(header.size()), 0, 0, 0, 0, 0, 0, 0};
    out.write(length, 8);
    out << header << "abcd";
    out.close();
    REQUIRE_THROWS_AS(SafetensorsFile(path), InputError);
    REQUIRE_THROWS_WITH(SafetensorsFile(path), Catch::Contains(path) && Catch::Contains("number overflow"));
  }
  SECTION("no such file") {
    std::remove(path.c_str());
    REQUIRE_THROWS_AS(TrainModel(plan, options), InputError);
  }
  std::remove(path.c_str());
}

TEST_CASE("train model: what the runtime cannot run is an input error naming the plan key", "[train_model]") {
  // A tower described for the simulator only (LLaVA's CLIP): named, never trained without its images.
  REQUIRE_THROWS_WITH(TrainModel(make_plan("tiny-llava.json", ""), double_options()),
                      Catch::Contains("hookstream.vision_inputs") && Catch::Contains("Qwen3-VL vision towers only"));
  REQUIRE_THROWS_WITH(TrainModel(make_plan("tiny-llama-tied.json", "adapter: qlora\nload_in_4bit: true\nlora_target_linear: true\n"),
                                 double_options()),
                      Catch::Contains("load_in_4bit"));
  // A RoPE variant the runtime does not compute (the verifier takes it: it changes no shape).
  Plan yarn = make_plan("tiny-llama-tied.json", "");
  yarn.model.rope_type = "yarn";
  REQUIRE_THROWS_WITH(TrainModel(yarn, double_options()),
                      Catch::Contains("rope_scaling.rope_type") && Catch::Contains("yarn") && Catch::Contains(yarn.model.source));
}

TEST_CASE("train model: a vision-language plan runs its vision tower, DeepStack included", "[train_model]") {
  LoadOptions load;
  const std::string vl = "base_model: tiny-vl\nsequence_len: 8\nmicro_batch_size: 2\nadapter: lora\nlora_r: 4\nlora_alpha: 8\n"
                         "lora_target_linear: true\n";
  const Plan images = parse_plan(vl + "hookstream: {vision_tokens: 3}\n", "vl.yaml", load);
  const Plan text_only = parse_plan(vl + "hookstream: {vision_inputs: false}\n", "vl.yaml", load);
  const Result with = run(images);
  const Result without = run(text_only);
  CHECK(with.loss != without.loss);  // the image tokens take part
  CHECK(run(images).loss == with.loss);  // the same images in every run
  // Every adapter of the tower (patch embedding, blocks, both mergers) and of the text model has a
  // gradient: the tower's output reaches the loss through the image positions and, for the
  // DeepStack merger, after decoder layer 0.
  int tower = 0;
  for (const auto& [name, grad] : with.grads) {
    INFO(name);
    REQUIRE(grad.defined());
    CHECK(grad.abs().sum().item<double>() > 0);
    tower += name.find(".visual.") != std::string::npos;
  }
  CHECK(tower > 0);
  CHECK(with.grads.count("base_model.model.model.visual.deepstack_merger_list.0.linear_fc1.lora_B.default.weight") == 1);
  for (const auto& [name, grad] : without.grads) {
    if (name.find(".visual.") != std::string::npos) CHECK(!grad.defined());  // no image, no tower
  }
  // Checkpointed decoder layers (the tower runs outside them) give the same loss and gradients.
  const Result checkpointed = run(parse_plan(vl + "gradient_checkpointing: true\nhookstream: {vision_tokens: 3}\n", "vl.yaml", load));
  CHECK(checkpointed.loss == Approx(with.loss).epsilon(1e-12));
  for (const auto& [name, grad] : with.grads) {
    INFO(name);
    CHECK(at::allclose(checkpointed.grads.at(name), grad, 1e-10, 1e-12));
  }
}

TEST_CASE("train model: an out-of-memory second reload buffer falls back to single_buffer once", "[train_model]") {
  const Plan plan = make_plan("tiny-llama-tied.json", "gradient_checkpointing: true\nactivation_offloading: true\n");
  const Result plain = run(make_plan("tiny-llama-tied.json", ""));
  const Result normal = run(plan);
  CHECK(normal.stats.reload_buffers == 2);
  CHECK(normal.stats.warnings.empty());
  TrainModelOptions options = double_options();
  options.inject_reload_oom = true;
  TrainModel model(plan, options);
  const Batch batch = make_batch(plan);
  for (int step = 0; step < 2; ++step) {
    for (auto& p : model.ddp_parameters()) p.mutable_grad() = at::Tensor();
    at::Tensor loss = model.loss(batch.ids, batch.labels, {});
    loss.backward();
    const OffloadStats stats = model.take_offload_stats();
    CHECK(stats.reload_buffers == 1);
    CHECK(stats.warnings.size() == (step == 0 ? 1u : 0u));
    if (step == 0) CHECK_THAT(stats.warnings[0], Catch::Contains("single_buffer"));
    // 4 layers offloaded and reloaded, one [2, 8, 16] float64 hidden state each
    CHECK(stats.offloaded_bytes == 4 * 2 * 8 * 16 * 8);
    CHECK(stats.reloaded_bytes == stats.offloaded_bytes);
    Result result;
    result.loss = loss.item<double>();
    const auto names = model.ddp_parameter_names();
    const auto params = model.ddp_parameters();
    for (size_t i = 0; i < params.size(); ++i) result.grads[names[i]] = params[i].grad().clone();
    require_same(plain, result, "after the fallback, step " + std::to_string(step));
  }
}

// Captures the names of USER_SCOPE ranges on this thread (the CPU autograd engine runs backward on
// the calling thread).
struct RangeCapture {
  std::vector<std::string> names;
  at::CallbackHandle handle;
  RangeCapture() {
    handle = at::addThreadLocalCallback(
        at::RecordFunctionCallback(
            [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
              captured().push_back(fn.name());
              return nullptr;
            })
            .scopes({at::RecordScope::USER_SCOPE}));
  }
  ~RangeCapture() { at::removeCallback(handle); }
  static std::vector<std::string>& captured() {
    thread_local std::vector<std::string> names;
    return names;
  }
};

TEST_CASE("train model: protocol steps and layers appear as profiler ranges with the documented names", "[train_model]") {
  const Plan plan = make_plan("tiny-llama-tied.json", "gradient_checkpointing: true\nactivation_offloading: true\n");
  TrainModel model(plan, double_options());
  const Batch batch = make_batch(plan);
  RangeCapture::captured().clear();
  std::vector<std::string> names;
  {
    RangeCapture capture;
    at::Tensor loss = model.loss(batch.ids, batch.labels, {});
    loss.backward();
    names = RangeCapture::captured();
  }
  auto has = [&](const std::string& name) { return std::find(names.begin(), names.end(), name) != names.end(); };
  CHECK(has("hookstream:forward:L0:layer"));
  CHECK(has("hookstream:backward:L3:layer"));
  CHECK(has("hookstream:backward:L0:layer"));
  CHECK(has("hookstream:forward:L2:wait_stream:copy:s=compute"));
  CHECK(has("hookstream:forward:L2:copy:copy:r=hidden[2]:w=cpu[2]"));
  CHECK(has("hookstream:forward:L2:compute:compute:r=hidden[2]:w=hidden[3]:what=layer"));
  CHECK(has("hookstream:forward:L2:free:compute:w=hidden[2]"));
  CHECK(has("hookstream:backward:L3:wait_event:copy:e=reload_free[1]"));
  CHECK(has("hookstream:backward:L2:copy:copy:r=cpu[2]:w=reload[0]"));
  CHECK(has("hookstream:backward:L2:compute:compute:r=reload[0]:what=recompute"));
  CHECK(has("hookstream:backward:L2:compute:compute:r=reload[0]:what=backward"));
  CHECK(has("hookstream:backward:L1:record:compute:e=reload_free[1]"));
  // host order: layer 3's backward steps before layer 2's, the layer range around them
  auto index = [&](const std::string& name) { return std::find(names.begin(), names.end(), name) - names.begin(); };
  CHECK(index("hookstream:backward:L3:layer") < index("hookstream:backward:L3:wait_event:copy:e=reload_free[1]"));
  CHECK(index("hookstream:backward:L3:compute:compute:r=reload[1]:what=backward") <
        index("hookstream:backward:L2:wait_event:copy:e=reload_free[0]"));
}

// Counts the GEMM calls (mm, addmm, addmm_) on this thread while alive.
struct GemmCounter {
  at::CallbackHandle handle;
  GemmCounter() {
    count() = 0;
    handle = at::addThreadLocalCallback(at::RecordFunctionCallback([](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
                                          const std::string name = fn.name();
                                          if (name == "aten::mm" || name == "aten::addmm" || name == "aten::addmm_") ++count();
                                          return nullptr;
                                        }).scopes({at::RecordScope::FUNCTION}));
  }
  ~GemmCounter() { at::removeCallback(handle); }
  static int& count() {
    thread_local int n = 0;
    return n;
  }
};

int backward_gemm_calls(const Plan& plan) {
  TrainModel model(plan, double_options());
  randomise_lora_b(model);
  const Batch batch = make_batch(plan);
  at::Tensor loss = model.loss(batch.ids, batch.labels, {});
  GemmCounter counter;
  loss.backward();
  return GemmCounter::count();
}

// The early stop of a non-reentrant recompute (runtime/deferred_linear.h): the down projection's
// forward GEMMs are not run again, the reentrant recompute runs the whole layer. The gradients are
// the plain model's (the first test case).
TEST_CASE("train model: a non-reentrant recompute skips the down projection's forward GEMMs", "[train_model]") {
  const std::string reentrant = "gradient_checkpointing: true\ngradient_checkpointing_kwargs: {use_reentrant: true}\n";
  const std::string non_reentrant = "gradient_checkpointing: true\ngradient_checkpointing_kwargs: {use_reentrant: false}\n";
  const std::string lora = "adapter: lora\nlora_r: 2\nlora_target_linear: true\n";
  for (const std::string& adapter : {std::string(), lora}) {
    INFO(adapter);
    const Plan plain = make_plan("tiny-llama-tied.json", adapter);
    const int layers = static_cast<int>(TrainModel(plain, double_options()).structure().layers.size());
    REQUIRE(layers > 0);
    // GEMMs of one projection's forward: the base, and LoRA's A and B.
    const int per_projection = adapter.empty() ? 1 : 3;
    const int base = backward_gemm_calls(plain);
    CHECK(backward_gemm_calls(make_plan("tiny-llama-tied.json", adapter + reentrant)) - base == layers * 7 * per_projection);
    // Not the down projection's base GEMM nor its adapter's B GEMM; its A GEMM runs (for B's
    // weight gradient), as in PyTorch's early stop.
    CHECK(backward_gemm_calls(make_plan("tiny-llama-tied.json", adapter + non_reentrant)) - base ==
          layers * (7 * per_projection - (adapter.empty() ? 1 : 2)));
  }
}

// Liger's RMSNorm and SiLU * up (runtime/liger_ops.h) against transformers' formulas through
// autograd, over more rows than one chunk of 2^24 elements.
TEST_CASE("liger ops: RMSNorm and SiLU * up give eager's values and gradients across row chunks", "[train_model][liger]") {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const int64_t rows = 4200, width = 4096;  // 17.2 M elements: two chunks
  const at::Tensor x = at::randn({1, rows, width}, gen, at::kFloat);
  const at::Tensor w = at::randn({width}, gen, at::kFloat);
  const at::Tensor dy = at::randn({1, rows, width}, gen, at::kFloat);
  auto grads = [&](const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& f) {
    const at::Tensor a = x.clone().requires_grad_(true), b = w.clone().requires_grad_(true);
    const at::Tensor y = f(a, b);
    y.backward(dy);
    return std::vector<at::Tensor>{y.detach(), a.grad(), b.grad()};
  };
  const auto eager_norm = grads([](const at::Tensor& a, const at::Tensor& b) {
    return b * (a * at::rsqrt(a.pow(2).mean(-1, true) + 1e-5));
  });
  const auto liger_norm = grads([](const at::Tensor& a, const at::Tensor& b) { return liger_rms_norm(a, b, 1e-5); });
  for (size_t i = 0; i < 3; ++i) CHECK(at::allclose(liger_norm[i], eager_norm[i], 1e-4, 1e-4));
  const at::Tensor up = at::randn({1, rows, width}, gen, at::kFloat);
  const auto eager_glu = grads([&](const at::Tensor& a, const at::Tensor&) { return at::silu(a) * up; });
  const auto liger_glu = grads([&](const at::Tensor& a, const at::Tensor&) { return liger_silu_mul(a, up); });
  for (size_t i = 0; i < 2; ++i) CHECK(at::allclose(liger_glu[i], eager_glu[i], 1e-5, 1e-5));
  // gate and up as projection outputs (they have a grad_fn): backward stores the gradients into
  // them, as Liger's kernel does, and the gradients are the same.
  at::Tensor gate_seen, up_seen;
  const at::Tensor u = up.clone().requires_grad_(true);
  const auto in_place = grads([&](const at::Tensor& a, const at::Tensor&) {
    gate_seen = a * 1.0;
    up_seen = u * 1.0;
    return liger_silu_mul(gate_seen, up_seen);
  });
  for (size_t i = 0; i < 2; ++i) CHECK(at::allclose(in_place[i], eager_glu[i], 1e-5, 1e-5));
  CHECK(at::allclose(gate_seen, eager_glu[1], 1e-5, 1e-5));  // d gate, where gate was
  CHECK(at::allclose(u.grad(), at::silu(x) * dy, 1e-5, 1e-5));
  CHECK(at::allclose(up_seen, u.grad(), 1e-5, 1e-5));        // d up, where up was
}

TEST_CASE("activation offload: a protocol that reads a freed buffer is reported, not silently wrong", "[train_model]") {
  StreamProtocol protocol = parse_stream_protocol(
      "name: broken\nstreams:\n  compute: {current: true}\nforward:\n"
      "  - compute: {stream: compute, reads: [hidden], writes: [\"hidden[next]\"], what: layer}\n"
      "  - free: {buffer: hidden, stream: compute}\n"
      "backward:\n  - compute: {stream: compute, reads: [hidden], what: recompute}\n"
      "  - compute: {stream: compute, reads: [hidden], what: backward}\n",
      "broken.yaml");
  Plan plan = make_plan("tiny-llama-tied.json", "gradient_checkpointing: true\nactivation_offloading: true\n");
  TrainModelOptions options = double_options();
  options.protocol = protocol;
  TrainModel model(plan, options);
  const Batch batch = make_batch(plan);
  at::Tensor loss = model.loss(batch.ids, batch.labels, {});
  REQUIRE_THROWS_WITH(loss.backward(), Catch::Contains("broken.yaml") && Catch::Contains("hidden[3]") &&
                                           Catch::Contains("holds nothing"));
}

}  // namespace
}  // namespace hookstream
