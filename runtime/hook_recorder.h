// Records every firing of a DDP parameter's gradient-accumulator post hook, with the graph task it
// fired in. The runtime's own Functions (checkpoint, tiled MLP) announce each nested
// backward()/grad() they start (GraphTaskScope), so a firing carries the label and the nesting
// depth of the innermost graph task running at that moment: "outer" (depth 0),
// "checkpoint(layer 3)" (depth 1), "tiled_mlp chunk 2 (layer 3)" (depth 1 or 2), ...
//
// Our hook is registered on each accumulator BEFORE the c10d::Reducer registers its own, so for
// one AccumulateGrad call ours runs first (Node::call_function runs post hooks in registration
// order, torch/csrc/autograd/engine.cpp): a firing is recorded even when the Reducer's hook that
// follows it throws ("marked as ready twice").
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "sim/engine/hook_firing.h"

namespace hookstream {

class HookRecorder {
 public:
  HookRecorder() = default;
  HookRecorder(const HookRecorder&) = delete;
  HookRecorder& operator=(const HookRecorder&) = delete;
  ~HookRecorder();

  // Registers one post hook per DDP parameter (ddp_params[i] has DDP index i).
  void attach(const std::vector<at::Tensor>& ddp_params);

  void set_micro_step(int micro_step) { micro_step_ = micro_step; }
  // Hook firings since the last take (one iteration's log).
  std::vector<HookFiring> take_firings() { return std::exchange(firings_, {}); }

  // Graph-task labels, innermost last. Only the runtime's own code pushes them (GraphTaskScope).
  void push_task(std::string label) { tasks_.push_back(std::move(label)); }
  void pop_task() { tasks_.pop_back(); }
  int depth() const { return tasks_.empty() ? 0 : static_cast<int>(tasks_.size()) - 1; }
  std::string current_task() const { return tasks_.empty() ? "none" : tasks_.back(); }

  void record(int ddp_index, bool grad_defined);

 private:
  // std::shared_ptr<Node> in LibTorch 1.13 and 2.x; spelled by decltype to follow the installed one.
  using AccumulatorPtr = decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()));
  std::vector<std::pair<AccumulatorPtr, uintptr_t>> hooks_;
  std::vector<HookFiring> firings_;
  std::vector<std::string> tasks_;
  int micro_step_ = 0;
};

// Marks the graph task started inside its lifetime (the outer backward, or a nested
// backward()/grad() call made from a node's backward).
class GraphTaskScope {
 public:
  GraphTaskScope(HookRecorder* recorder, std::string label) : recorder_(recorder) {
    if (recorder_) recorder_->push_task(std::move(label));
  }
  ~GraphTaskScope() {
    if (recorder_) recorder_->pop_task();
  }
  GraphTaskScope(const GraphTaskScope&) = delete;
  GraphTaskScope& operator=(const GraphTaskScope&) = delete;

 private:
  HookRecorder* recorder_;
};

}  // namespace hookstream
