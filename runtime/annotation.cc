#include "runtime/annotation.h"

#include <torch/csrc/autograd/custom_function.h>

namespace hookstream {

ScopedAnnotation::ScopedAnnotation(const std::string& name) : range_(at::RecordScope::USER_SCOPE) {
  // RECORD_USER_SCOPE's expansion (ATen/record_function.h), with a name built at run time.
  if (range_.isActive()) range_.before(name);
}

std::string layer_annotation(const char* phase, int layer) {
  return std::string("hookstream:") + phase + ":L" + std::to_string(layer) + ":layer";
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

c10::intrusive_ptr<BackwardRange> range_of(AutogradContext* ctx) {
  return c10::static_intrusive_pointer_cast<BackwardRange>(ctx->saved_data["range"].toCapsule());
}

// Identity Functions: the input is returned as is (custom_function.cpp turns it into a view with
// this node as grad_fn), so no activation is copied.
struct RangeStart : torch::autograd::Function<RangeStart> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, c10::intrusive_ptr<BackwardRange> range) {
    ctx->saved_data["range"] = c10::IValue::make_capsule(range);
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto range = range_of(ctx);
    if (range->on_open) range->on_open();
    range->open = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
    if (range->open->isActive()) range->open->before(range->name);
    return {grads[0], at::Tensor()};
  }
};

struct RangeEnd : torch::autograd::Function<RangeEnd> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, c10::intrusive_ptr<BackwardRange> range) {
    ctx->saved_data["range"] = c10::IValue::make_capsule(range);
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto range = range_of(ctx);
    range->open.reset();  // ~RecordFunction runs the end callbacks
    return {grads[0], at::Tensor()};
  }
};

}  // namespace

at::Tensor mark_backward_range_end(const at::Tensor& input, const c10::intrusive_ptr<BackwardRange>& range) {
  if (!input.requires_grad()) return input;
  return RangeEnd::apply(input, range);
}

at::Tensor mark_backward_range_start(const at::Tensor& output, const c10::intrusive_ptr<BackwardRange>& range) {
  if (!output.requires_grad()) return output;
  return RangeStart::apply(output, range);
}

}  // namespace hookstream
