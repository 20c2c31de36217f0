#include "runtime/hook_recorder.h"

#include <torch/csrc/autograd/function_hook.h>

namespace hookstream {

namespace {

// A FunctionPostHook on an AccumulateGrad node: `inputs` holds the gradient that arrived (undefined
// when a custom Function returned None for the parameter; the hook still runs, see
// torch/csrc/autograd/engine.cpp call_function).
class RecordingPostHook : public torch::autograd::FunctionPostHook {
 public:
  RecordingPostHook(HookRecorder* recorder, int ddp_index) : recorder_(recorder), ddp_index_(ddp_index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& inputs) override {
    recorder_->record(ddp_index_, !inputs.empty() && inputs[0].defined());
    return outputs;
  }

 private:
  HookRecorder* recorder_;
  int ddp_index_;
};

}  // namespace

HookRecorder::~HookRecorder() {
  for (auto& [node, key] : hooks_) node->del_post_hook(key);
}

void HookRecorder::attach(const std::vector<at::Tensor>& ddp_params) {
  for (size_t i = 0; i < ddp_params.size(); ++i) {
    // The tensor holds its accumulator weakly (variable.h); keep it alive like the Reducer does.
    auto accumulator = torch::autograd::impl::grad_accumulator(ddp_params[i]);
    const uintptr_t key =
        accumulator->add_post_hook(std::make_unique<RecordingPostHook>(this, static_cast<int>(i)));
    hooks_.emplace_back(accumulator, key);
  }
}

void HookRecorder::record(int ddp_index, bool grad_defined) {
  HookFiring firing;
  firing.micro_step = micro_step_;
  firing.ddp_index = ddp_index;
  firing.depth = depth();
  firing.graph_task = current_task();
  firing.grad_defined = grad_defined;
  firings_.push_back(std::move(firing));
}

}  // namespace hookstream
