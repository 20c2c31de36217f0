// Profiler ranges the runtime puts around its own work, so that a Kineto/Nsight trace of a
// `hookstream run` step can be matched op by op with the simulator's expansion of the same plan and
// protocol (docs/stream-protocols.md, "Runtime annotations", gives the names).
//
// The ranges are at::RecordFunction USER_SCOPE ranges, exactly what Python's
// torch.autograd.profiler.record_function opens (torch/autograd/profiler.py -> at::RecordFunction);
// with no profiler or callback attached they cost one thread-local check.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <ATen/record_function.h>
#include <torch/torch.h>

namespace hookstream {

// An open range for the lifetime of the object.
class ScopedAnnotation {
 public:
  explicit ScopedAnnotation(const std::string& name);
  ScopedAnnotation(const ScopedAnnotation&) = delete;
  ScopedAnnotation& operator=(const ScopedAnnotation&) = delete;

 private:
  at::RecordFunction range_;
};

// "hookstream:{phase}:L{layer}:layer": the range of a decoder layer's forward or backward.
std::string layer_annotation(const char* phase, int layer);

// Brackets the backward of the autograd subgraph between a layer's input and its output with a
// range: run the layer on `mark_backward_range_end(input, range)` and continue with
// `mark_backward_range_start(output, range)`. The range opens when autograd reaches the output's
// marker (the layer's backward starts) and closes when it has finished the input's marker (every
// use of the layer's input has produced its gradient; or, if the input needs none, when the graph
// is freed). Identity in forward; the markers own no parameters, so which parameters receive
// gradients, and when their hooks fire, is unchanged.
struct BackwardRange : torch::CustomClassHolder {
  explicit BackwardRange(std::string n) : name(std::move(n)) {}
  std::string name;
  std::unique_ptr<at::RecordFunction> open;  // between the two markers' backward
  // Called when the range opens (the layer's backward starts), whether or not a profiler listens:
  // TrainModel records which layer's backward runs, for the report of a failure there.
  std::function<void()> on_open;
};
at::Tensor mark_backward_range_end(const at::Tensor& input, const c10::intrusive_ptr<BackwardRange>& range);
at::Tensor mark_backward_range_start(const at::Tensor& output, const c10::intrusive_ptr<BackwardRange>& range);

}  // namespace hookstream
