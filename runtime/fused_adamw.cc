#include "runtime/fused_adamw.h"

#include <torch/version.h>

#include <sstream>

namespace hookstream {

FusedAdamW::FusedAdamW(std::vector<at::Tensor> params, torch::optim::AdamWOptions options)
    : torch::optim::AdamW(std::move(params), std::move(options)) {
#if TORCH_VERSION_MAJOR >= 2
  bool all_cuda = true, any = false;
  for (const auto& group : param_groups()) {
    for (const at::Tensor& p : group.params()) {
      any = true;
      all_cuda = all_cuda && p.is_cuda() && p.is_floating_point();
    }
  }
  fused_ = any && all_cuda;
#endif
}

torch::Tensor FusedAdamW::step(LossClosure closure) {
  if (!fused_) return torch::optim::AdamW::step(std::move(closure));
#if TORCH_VERSION_MAJOR >= 2
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable_grad(true);
    loss = closure();
  }
  torch::NoGradGuard no_grad;
  for (auto& group : param_groups()) {
    const auto& options = static_cast<const torch::optim::AdamWOptions&>(group.options());
    std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps;
    for (const at::Tensor& p : group.params()) {
      if (!p.grad().defined()) continue;  // PyTorch skips parameters without a gradient too
      TORCH_CHECK(!p.grad().is_sparse(), "AdamW does not support sparse gradients");
      void* key = p.unsafeGetTensorImpl();
      auto found = state_.find(key);
      if (found == state_.end()) {
        // AdamW::step's lazy state initialisation (torch/csrc/api/src/optim/adamw.cpp).
        auto state = std::make_unique<torch::optim::AdamWParamState>();
        state->step(0);
        state->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
        state->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
        if (options.amsgrad()) state->max_exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
        found = state_.emplace(key, std::move(state)).first;
      }
      auto& state = static_cast<torch::optim::AdamWParamState&>(*found->second);
      DeviceStep& device_step = device_steps_[key];
      if (device_step.host_step != state.step()) {
        device_step.tensor = at::full({}, static_cast<double>(state.step()),
                                      at::TensorOptions().dtype(at::kFloat).device(p.device()));
      }
      state.step(state.step() + 1);
      device_step.host_step = state.step();
      params.push_back(p);
      grads.push_back(p.grad());
      exp_avgs.push_back(state.exp_avg());
      exp_avg_sqs.push_back(state.exp_avg_sq());
      if (options.amsgrad()) max_exp_avg_sqs.push_back(state.max_exp_avg_sq());
      steps.push_back(device_step.tensor);
    }
    if (params.empty()) continue;
    at::_foreach_add_(steps, 1);
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, options.lr(),
                      std::get<0>(options.betas()), std::get<1>(options.betas()), options.weight_decay(),
                      options.eps(), options.amsgrad(), /*maximize=*/false);
  }
  return loss;
#else
  return torch::optim::AdamW::step(std::move(closure));
#endif
}

ReloadedAdamW reload_as_adamw(FusedAdamW& optimizer, const std::vector<at::Tensor>& params,
                              const torch::optim::AdamWOptions& options) {
  torch::serialize::OutputArchive out;
  optimizer.save(out);
  std::ostringstream bytes;
  out.save_to(bytes);
  ReloadedAdamW reloaded;
  for (const at::Tensor& p : params) reloaded.params.push_back(p.detach().clone().requires_grad_(true));
  reloaded.optimizer = std::make_unique<torch::optim::AdamW>(reloaded.params, options);
  torch::serialize::InputArchive in;
  std::istringstream read(bytes.str());
  in.load_from(read);
  reloaded.optimizer->load(in);
  return reloaded;
}

}  // namespace hookstream
