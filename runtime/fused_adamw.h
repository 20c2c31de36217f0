// AdamW for `hookstream run`: torch::optim::AdamW whose step, on CUDA with LibTorch 2.x, is the
// fused multi-tensor kernel PyTorch's `torch.optim.AdamW(fused=True)` runs (torch/optim/adam.py
// _fused_adam: `torch._foreach_add_(device_state_steps, 1)` then `torch._fused_adamw_(...)`).
//
// Why: LibTorch's AdamW::step loops over the parameters with ~8 ATen calls each. A LoRA r=16 model
// of Llama-3.1-8B's shape has 448 adapter tensors, so ~3,600 kernel launches per step, issued by
// the host after the step's loss has been read (the GPU queue is empty then): measured on an H100
// as the fixed ~44 ms per step by which `hookstream run` trailed the same model in PyTorch eager
// (bench/RESULTS.md, issue 22). The fused kernel updates all of them in a few launches.
//
// The state is AdamW's own (AdamWParamState: step, exp_avg, exp_avg_sq), so checkpoints written
// by either path load into the other (runtime/training_checkpoint.cc). The fused kernel reads the
// step count from a float32 tensor on the device (one per parameter, as PyTorch keeps
// `state["step"]` for fused); those are derived from AdamWParamState::step and kept in step with it.
// CPU runs (and LibTorch 1.13, which has no fused kernel) use AdamW::step unchanged, so the CPU
// results the tests pin stay bit-identical.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include <torch/torch.h>

namespace hookstream {

class FusedAdamW : public torch::optim::AdamW {
 public:
  FusedAdamW(std::vector<at::Tensor> params, torch::optim::AdamWOptions options);

  torch::Tensor step(LossClosure closure = nullptr) override;

  // Whether step() runs the fused kernel (all parameters on CUDA and LibTorch >= 2.0).
  bool fused() const { return fused_; }

 private:
  bool fused_ = false;
  // Per parameter (keyed like torch::optim's state, by TensorImpl): the device step tensor the
  // fused kernel reads and increments, and the host step it was made for (a checkpoint loaded
  // after it was made changes AdamWParamState::step; the tensor is then made again).
  struct DeviceStep {
    at::Tensor tensor;
    int64_t host_step = -1;
  };
  std::unordered_map<void*, DeviceStep> device_steps_;
};

// What a run resumed without the fused path gets: clones of `params` under a plain
// torch::optim::AdamW loaded from `optimizer`'s checkpoint (save -> bytes -> load). Used to check
// that FusedAdamW's state round-trips (tests/runtime/fused_adamw_test.cc on CPU, gpu_check on CUDA).
struct ReloadedAdamW {
  std::vector<at::Tensor> params;
  std::unique_ptr<torch::optim::AdamW> optimizer;
};
ReloadedAdamW reload_as_adamw(FusedAdamW& optimizer, const std::vector<at::Tensor>& params,
                              const torch::optim::AdamWOptions& options);

}  // namespace hookstream
