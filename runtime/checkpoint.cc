#include "runtime/checkpoint.h"

#include <stdexcept>

#include <torch/csrc/autograd/autograd.h>

namespace hookstream {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What a checkpoint node needs in backward; carried in ctx->saved_data as a capsule.
struct LayerCall : torch::CustomClassHolder {
  LayerFunction layer;
  ParameterTable params;
  std::vector<int> graph_params;
  HookRecorder* recorder = nullptr;
  std::string label;
};

c10::intrusive_ptr<LayerCall> call_of(AutogradContext* ctx) {
  return c10::static_intrusive_pointer_cast<LayerCall>(ctx->saved_data["call"].toCapsule());
}

at::Tensor detached_like(const at::Tensor& t) {
  at::Tensor copy = t.detach();
  copy.requires_grad_(t.requires_grad());
  return copy;
}

struct ReentrantCheckpointFunction : torch::autograd::Function<ReentrantCheckpointFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, c10::intrusive_ptr<LayerCall> call) {
    ctx->saved_data["call"] = c10::IValue::make_capsule(call);
    ctx->save_for_backward({hidden});
    torch::NoGradGuard no_grad;
    return call->layer(hidden, call->params);
  }

  // CheckpointFunction.backward: detach inputs (keeping requires_grad), recompute with grad enabled,
  // torch.autograd.backward(outputs_with_grad, args_with_grad), return the inputs' .grad.
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto call = call_of(ctx);
    const at::Tensor input = detached_like(ctx->get_saved_variables()[0]);
    at::Tensor output;
    {
      torch::AutoGradMode enable_grad(true);
      output = call->layer(input, call->params);
    }
    if (!output.requires_grad()) {
      // torch/utils/checkpoint.py raises exactly this.
      throw std::runtime_error(
          "none of output has requires_grad=True, this checkpoint() is not necessary");
    }
    {
      GraphTaskScope scope(call->recorder, call->label);
      torch::autograd::backward({output}, {grad_outputs[0]});
    }
    return {input.grad(), at::Tensor()};
  }
};


}  // namespace

at::Tensor checkpoint_reentrant(const at::Tensor& hidden, LayerFunction layer, const ParameterTable& params,
                                HookRecorder* recorder, std::string label) {
  auto call = c10::make_intrusive<LayerCall>();
  call->layer = std::move(layer);
  call->params = params;
  call->recorder = recorder;
  call->label = std::move(label);
  return ReentrantCheckpointFunction::apply(hidden, call);
}


}  // namespace hookstream
