// hookstream-runtime-gpu-check: TrainModel on cuda:0 in bf16, every checkpoint flavour, offload
// protocol (the CUDA stream backend: real streams, events, pinned memory) and tiled-MLP strategy
// against the plain model, within bf16 tolerance; double_buffer_events against single_buffer
// (the same kernels on the same data: expected bit-identical); the reload-OOM fallback; FusedAdamW's
// fused CUDA step against LibTorch's AdamW, and its state loaded into AdamW. Prints a
// table; exits 1 if any check fails, 2 if it cannot run (no CUDA device).
//
//   hookstream-runtime-gpu-check [--seq N] [--layers N] [--hidden N]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "runtime/fused_adamw.h"
#include "runtime/train_model.h"
#include "sim/inputs/input_error.h"
#include "sim/inputs/plan.h"

namespace {

using namespace hookstream;

struct Shape {
  int seq = 512, layers = 4, hidden = 256;
};

Plan base_plan(const Shape& shape) {
  Plan plan;
  plan.source = "gpu-check";
  plan.base_model = "gpu-check";
  ModelConfig& m = plan.model;
  m.source = "gpu-check";
  m.model_type = "llama";
  m.architecture = "LlamaForCausalLM";
  m.hidden_size = shape.hidden;
  m.intermediate_size = 2 * shape.hidden;
  m.num_hidden_layers = shape.layers;
  m.num_attention_heads = 8;
  m.num_key_value_heads = 4;
  m.head_dim = shape.hidden / 8;
  m.vocab_size = 2048;
  m.tie_word_embeddings = false;
  m.torch_dtype = DType::BFloat16;
  m.initializer_range = 0.1;
  plan.sequence_len = shape.seq;
  plan.micro_batch_size = 2;
  return plan;
}

struct Variant {
  std::string name;
  Plan plan;
  bool inject_oom = false;
};

struct Outcome {
  double loss = 0;
  std::vector<at::Tensor> grads;  // DDP order, float32 on the CPU
  OffloadStats stats;
};

Outcome run(const Variant& v) {
  TrainModelOptions options;
  options.device = c10::Device(c10::kCUDA, 0);
  options.dtype = at::kBFloat16;
  options.seed = 5;
  options.inject_reload_oom = v.inject_oom;
  if (v.plan.activation_offloading) options.protocol = load_stream_protocol(v.plan.offload_protocol_name());
  TrainModel model(v.plan, options);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(17);
  const at::Tensor ids = at::randint(v.plan.model.vocab_size, {v.plan.micro_batch_size, v.plan.sequence_len}, gen, at::kLong).to(options.device);
  const at::Tensor labels = at::randint(v.plan.model.vocab_size, {v.plan.micro_batch_size, v.plan.sequence_len}, gen, at::kLong).to(options.device);
  at::Tensor loss = model.loss(ids, labels, TrainPosition{});
  loss.backward();
  torch::cuda::synchronize();
  Outcome out;
  out.loss = loss.item<double>();
  for (const at::Tensor& p : model.ddp_parameters()) {
    out.grads.push_back(p.grad().defined() ? p.grad().to(at::kCPU, at::kFloat) : at::zeros(p.sizes(), at::kFloat));
  }
  out.stats = model.take_offload_stats();
  return out;
}

// Worst per-parameter relative error ||g - ref|| / ||ref||.
double worst_relative(const Outcome& a, const Outcome& ref) {
  double worst = 0;
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    const double norm = ref.grads[i].norm().item<double>();
    const double diff = (a.grads[i] - ref.grads[i]).norm().item<double>();
    worst = std::max(worst, norm > 0 ? diff / norm : diff);
  }
  return worst;
}

double max_abs(const Outcome& a, const Outcome& b) {
  double worst = 0;
  for (size_t i = 0; i < a.grads.size(); ++i) worst = std::max(worst, (a.grads[i] - b.grads[i]).abs().max().item<double>());
  return worst;
}

}  // namespace

// runtime/fused_adamw.h on cuda:0: four steps of the fused kernel against torch::optim::AdamW on the
// same fp32 parameters and gradients (same maths, different rounding order: within 1e-5 relative),
// then the fused optimizer's state loaded into AdamW, one more step each. Returns the failures.
int check_fused_adamw() {
  const auto options = torch::optim::AdamWOptions(1e-2).weight_decay(0.1);
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA);
  auto params = [&] {
    at::manual_seed(7);
    return std::vector<at::Tensor>{at::randn({64, 16}, f32).requires_grad_(true), at::randn({16}, f32).requires_grad_(true),
                                   at::randn({3, 5, 2}, f32).requires_grad_(true)};
  };
  auto grads = [&](std::vector<at::Tensor>& ps, int step) {
    at::manual_seed(1000 + step);
    for (at::Tensor& p : ps) p.mutable_grad() = at::randn(p.sizes(), f32);
  };
  auto worst = [](const std::vector<at::Tensor>& x, const std::vector<at::Tensor>& y) {
    double w = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      w = std::max(w, ((x[i] - y[i]).norm() / y[i].norm().clamp_min(1e-30)).item<double>());
    }
    return w;
  };
  std::vector<at::Tensor> a = params(), b = params();
  FusedAdamW fused(a, options);
  torch::optim::AdamW plain(b, options);
  for (int step = 0; step < 4; ++step) {
    grads(a, step);
    grads(b, step);
    fused.step();
    plain.step();
  }
  const double after_steps = worst(a, b);
  ReloadedAdamW loaded = reload_as_adamw(fused, a, options);
  grads(a, 4);
  grads(loaded.params, 4);
  fused.step();
  loaded.optimizer->step();
  const double after_load = worst(a, loaded.params);
  const bool ok = fused.fused() && after_steps <= 1e-5 && after_load <= 1e-5;
  std::printf("fused AdamW (fused %s) vs AdamW: worst rel %.3e after 4 steps, %.3e after loading its state -> %s\n",
              fused.fused() ? "yes" : "no", after_steps, after_load, ok ? "ok" : "FAIL");
  return ok ? 0 : 1;
}

int main(int argc, char** argv) {
  Shape shape;
  for (int i = 1; i + 1 < argc; i += 2) {
    const int value = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--seq") == 0) shape.seq = value;
    else if (std::strcmp(argv[i], "--layers") == 0) shape.layers = value;
    else if (std::strcmp(argv[i], "--hidden") == 0) shape.hidden = value;
    else {
      std::fprintf(stderr, "usage: %s [--seq N] [--layers N] [--hidden N]\n", argv[0]);
      return 2;
    }
  }
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "hookstream-runtime-gpu-check: no CUDA device\n");
    return 2;
  }
  // bf16 with fp32 accumulation: recomputation and different chunking reorder sums, so gradients
  // agree to a few bf16 ulps (2^-8 relative) per element, less in norm.
  constexpr double kTolerance = 2e-2;
  try {
    const Plan plain = base_plan(shape);
    std::vector<Variant> variants;
    auto add = [&](std::string name, auto edit, bool oom = false) {
      Variant v{std::move(name), plain, oom};
      edit(v.plan);
      variants.push_back(std::move(v));
    };
    for (bool reentrant : {true, false}) {
      const std::string flavour = reentrant ? "reentrant" : "non-reentrant";
      add("checkpoint " + flavour, [&](Plan& p) { p.gradient_checkpointing = true; p.use_reentrant = reentrant; });
      for (const char* protocol : {"single_buffer", "double_buffer_events", "deepspeed_offload", "save_on_cpu", "pageable", "none"}) {
        add("offload " + std::string(protocol) + " " + flavour, [&](Plan& p) {
          p.gradient_checkpointing = true;
          p.use_reentrant = reentrant;
          p.activation_offloading = true;
          p.offload_protocol = protocol;
        });
      }
    }
    const std::pair<const char*, TiledBackward> strategies[] = {{"per_chunk_backward", TiledBackward::BackwardPerChunk},
                                                               {"grad_then_backward", TiledBackward::GradThenBackward},
                                                               {"function_returns_grads", TiledBackward::FunctionReturnsGrads}};
    for (const auto& [name, strategy] : strategies) {
      add(std::string("tiled ") + name, [&, s = strategy](Plan& p) {
        p.tiled_mlp = true;
        p.tiled_mlp_num_shards = 4;
        p.tiled_mlp_backward = s;
        p.tiled_mlp_weights_as_inputs = s == TiledBackward::FunctionReturnsGrads;
      });
    }
    add("tiled + offload double_buffer_events", [&](Plan& p) {
      p.tiled_mlp = true;
      p.tiled_mlp_num_shards = 4;
      p.gradient_checkpointing = true;
      p.activation_offloading = true;
      p.offload_protocol = "double_buffer_events";
    });
    add("chunked cross-entropy (8)", [&](Plan& p) { p.chunked_cross_entropy = true; });
    add("chunked cross-entropy (8), lm_head per chunk", [&](Plan& p) {
      p.chunked_cross_entropy = true;
      p.chunked_loss_recomputes_lm_head = true;
    });
    add("offload double_buffer_events, reload OOM injected", [&](Plan& p) {
      p.gradient_checkpointing = true;
      p.activation_offloading = true;
      p.offload_protocol = "double_buffer_events";
    }, /*oom=*/true);

    const Outcome reference = run(Variant{"plain", plain, false});
    std::printf("cuda:0 bf16, seq %d, layers %d, hidden %d; plain loss %.6f\n", shape.seq, shape.layers, shape.hidden, reference.loss);
    std::printf("%-52s %10s %12s %9s %9s %8s  %s\n", "variant", "loss", "worst rel", "copy ms", "exposed", "buffers", "result");
    int failures = 0;
    std::map<std::string, Outcome> outcomes;
    for (const Variant& v : variants) {
      const Outcome out = run(v);
      const double rel = worst_relative(out, reference);
      bool ok = rel <= kTolerance && std::abs(out.loss - reference.loss) <= kTolerance * std::abs(reference.loss);
      if (v.inject_oom) ok = ok && out.stats.reload_buffers == 1 && out.stats.warnings.size() == 1;
      failures += ok ? 0 : 1;
      std::printf("%-52s %10.6f %12.3e %9.3f %9.3f %8d  %s\n", v.name.c_str(), out.loss, rel, out.stats.copy_ms,
                  out.stats.exposed_copy_ms, out.stats.reload_buffers, ok ? "ok" : "FAIL");
      for (const std::string& w : out.stats.warnings) std::printf("    warning: %s\n", w.c_str());
      outcomes.emplace(v.name, out);
    }
    for (const char* flavour : {"reentrant", "non-reentrant"}) {
      const Outcome& one = outcomes.at(std::string("offload single_buffer ") + flavour);
      const Outcome& two = outcomes.at(std::string("offload double_buffer_events ") + flavour);
      const double diff = max_abs(one, two);
      const bool identical = diff == 0 && one.loss == two.loss;
      const bool ok = identical || worst_relative(two, one) <= kTolerance;
      failures += ok ? 0 : 1;
      std::printf("double_buffer_events vs single_buffer (%s): max |diff| %.3e -> %s\n", flavour, diff,
                  identical ? "identical" : (ok ? "within tolerance" : "FAIL"));
    }
    failures += check_fused_adamw();
    std::printf("%s: %d failure(s)\n", failures == 0 ? "PASS" : "FAIL", failures);
    return failures == 0 ? 0 : 1;
  } catch (const InputError& e) {
    std::fprintf(stderr, "hookstream-runtime-gpu-check: %s\n", e.what());
    return 2;
  }
}
