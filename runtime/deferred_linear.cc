#include "runtime/deferred_linear.h"

#include <stdexcept>

namespace hookstream {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct DeferredLinearFunction : torch::autograd::Function<DeferredLinearFunction> {
  // `adapter`: {} or {A, B}, a list because LibTorch before 2.0 takes no undefined tensor as a
  // Function input.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, at::TensorList adapter,
                            double scale) {
    std::vector<at::Tensor> saved = {x, weight};
    saved.insert(saved.end(), adapter.begin(), adapter.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["scale"] = scale;
    auto sizes = x.sizes().vec();
    sizes.back() = weight.size(0);
    // One element, every stride 0: the shape autograd checks the incoming gradient against, and no
    // memory. Its values are never read (the layer's output is not formed in a recompute).
    return at::empty_strided(sizes, std::vector<int64_t>(sizes.size(), 0), x.options());
  }

  // The gradients of at::linear's autograd graph: linear on a batched input is
  // mm(x.view(-1, in), W.t()) (aten/src/ATen/native/Linear.cpp), whose MmBackward gives
  // grad.mm(W) for x and x.t().mm(grad) for W.t(); PEFT's branch is linear(linear(x, A), B) * scale
  // (peft/tuners/lora/layer.py Linear.forward), its MulBackward grad * scale. The one difference:
  // the base and adapter input gradients are summed in one GEMM's accumulator (addmm_) instead of
  // rounded apart and added.
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor lora_a = saved.size() > 2 ? saved[2] : at::Tensor();
    const at::Tensor lora_b = saved.size() > 3 ? saved[3] : at::Tensor();
    const double scale = ctx->saved_data["scale"].toDouble();
    const int64_t in = x.size(-1), out = weight.size(0);
    const at::Tensor g = grad_outputs[0].reshape({-1, out});
    const at::Tensor x2 = x.reshape({-1, in});
    at::Tensor gx, gw, ga, gb, g_a;
    if (lora_a.defined()) {
      at::Tensor scaled = g * scale;
      if (ctx->needs_input_grad(3)) gb = x2.mm(lora_a.t()).t().mm(scaled).t();
      if (ctx->needs_input_grad(0) || ctx->needs_input_grad(2)) g_a = scaled.mm(lora_b);
      scaled.reset();  // [tokens, out]: gone before the input gradient's [tokens, in] is allocated
      if (ctx->needs_input_grad(2)) ga = x2.t().mm(g_a).t();
    }
    if (ctx->needs_input_grad(0)) {
      gx = g.mm(weight);
      // The adapter's input gradient added inside the GEMM (C += g_a A): autograd would hold both
      // [tokens, in] gradients and add them (InputBuffer::accumulate); this holds one.
      if (g_a.defined()) gx.addmm_(g_a, lora_a);
    }
    if (ctx->needs_input_grad(1)) gw = x2.t().mm(g).t();
    if (gx.defined()) gx = gx.view(x.sizes());
    variable_list grads = {gx, gw};
    if (lora_a.defined()) grads.insert(grads.end(), {ga, gb});
    grads.push_back(at::Tensor());  // scale
    return grads;
  }
};

}  // namespace

at::Tensor deferred_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& lora_a, const at::Tensor& lora_b,
                           double scale) {
  if (weight.dim() != 2 || lora_a.defined() != lora_b.defined()) {
    throw std::invalid_argument("deferred_linear: expected a rank-2 weight and both or neither LoRA matrices");
  }
  std::vector<at::Tensor> adapter;
  if (lora_a.defined()) adapter = {lora_a, lora_b};
  return DeferredLinearFunction::apply(x, weight, at::TensorList(adapter), scale);
}

}  // namespace hookstream
