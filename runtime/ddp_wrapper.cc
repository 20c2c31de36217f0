#include "runtime/ddp_wrapper.h"

#include <algorithm>
#include <limits>

#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/version.h>

namespace hookstream {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kMiB = 1024 * 1024;
// dist._DEFAULT_FIRST_BUCKET_BYTES (c10d::kDefaultFirstBucketBytes).
constexpr int64_t kDefaultFirstBucketBytes = c10d::kDefaultFirstBucketBytes;

struct SinkState : torch::CustomClassHolder {
  c10d::Reducer* reducer = nullptr;
  bool static_graph = false;
  int64_t num_iterations = 0;
};

// _DDPSink (distributed.py): passes outputs through (clone) and, in static graph's first
// iteration, queues reducer._delay_all_reduce on the graph task running its backward, the outer
// one: the whole reduction then happens after the outer backward finishes.
struct DdpSink : torch::autograd::Function<DdpSink> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& output, c10::intrusive_ptr<SinkState> state) {
    ctx->set_materialize_grads(false);
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    return output.clone();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto state = c10::static_intrusive_pointer_cast<SinkState>(ctx->saved_data["state"].toCapsule());
    if (state->static_graph && state->num_iterations == 1) {
      c10d::Reducer* reducer = state->reducer;
      torch::autograd::Engine::get_default_engine().queue_callback([reducer] { reducer->delay_all_reduce(); });
    }
    return {grad_outputs[0], at::Tensor()};
  }
};

}  // namespace

DdpSettings ddp_settings_for(const Plan& plan, bool distributed_debug_on) {
  DdpSettings s;
  s.find_unused_parameters = plan.find_unused_parameters();
  s.static_graph = plan.static_graph;
  s.gradient_as_bucket_view = plan.gradient_as_bucket_view;
  s.bucket_cap_default = !plan.ddp_bucket_cap_mb.has_value();
  s.bucket_bytes_cap = static_cast<int64_t>(plan.ddp_bucket_cap_mb.value_or(25.0) * kMiB);
  s.pass_parameter_names = distributed_debug_on;
  return s;
}

DdpWrapper::DdpWrapper(std::vector<at::Tensor> params, const std::vector<std::string>& names,
                       c10::intrusive_ptr<c10d::ProcessGroup> process_group, const DdpSettings& settings)
    : settings_(settings) {
  // _ddp_init_helper: without find_unused (or with static graph) the first iteration uses one
  // bucket per dtype/device (limit sys.maxsize); buckets are rebuilt in gradient-ready order after
  // it. With find_unused: a small first bucket, then bucket_bytes_cap.
  // 1.13 always uses [_DEFAULT_FIRST_BUCKET_BYTES, bucket_bytes_cap] and passes
  // _DEFAULT_FIRST_BUCKET_BYTES as first_bucket_bytes_cap; 2.x does so only when bucket_cap_mb is
  // left at its default (bucket_bytes_cap_default), else [bucket_bytes_cap] and first cap =
  // bucket_bytes_cap.
#if TORCH_VERSION_MAJOR == 1
  const bool small_first_bucket = true;
#else
  const bool small_first_bucket = settings.bucket_cap_default;
#endif
  std::vector<size_t> limits;
  if (settings.static_graph || !settings.find_unused_parameters) {
    limits = {static_cast<size_t>(std::numeric_limits<int64_t>::max())};
  } else if (small_first_bucket) {
    limits = {static_cast<size_t>(kDefaultFirstBucketBytes), static_cast<size_t>(settings.bucket_bytes_cap)};
  } else {
    limits = {static_cast<size_t>(settings.bucket_bytes_cap)};
  }
  const std::vector<bool> expect_sparse(params.size(), false);
  auto [bucket_indices, per_bucket_limits] = c10d::compute_bucket_assignment_by_size(params, limits, expect_sparse);
  // "reverse list of buckets because we want to approximate the order in which their gradients
  // are produced" (distributed.py).
  std::reverse(bucket_indices.begin(), bucket_indices.end());
  std::reverse(per_bucket_limits.begin(), per_bucket_limits.end());
  initial_buckets_ = bucket_indices;

  ReducerArguments args;
  args.params = std::move(params);
  args.bucket_indices = std::move(bucket_indices);
  args.per_bucket_size_limits = std::move(per_bucket_limits);
  args.process_group = std::move(process_group);
  args.expect_sparse_gradients = expect_sparse;
  args.bucket_bytes_cap = settings.bucket_bytes_cap;
  args.find_unused_parameters = settings.find_unused_parameters;
  args.gradient_as_bucket_view = settings.gradient_as_bucket_view;
  if (settings.pass_parameter_names) {
    for (size_t i = 0; i < names.size(); ++i) args.param_names[i] = names[i];
  }
  args.first_bucket_bytes_cap = small_first_bucket ? kDefaultFirstBucketBytes : settings.bucket_bytes_cap;
  reducer_ = make_reducer(std::move(args));
  // DistributedDataParallel.__init__: `self.logger = dist.Logger(self.reducer);
  // self.reducer.set_logger(self.logger)`. The Reducer reaches its logger through a weak_ptr in
  // places that do not check it (1.13 search_unused_parameters logs a change in the set of unused
  // parameters with logger_.lock()->...): without one, a changing unused set is a null dereference.
  logger_ = std::make_shared<c10d::Logger>(reducer_);
  reducer_->set_logger(logger_);
  // DistributedDataParallel.__init__(static_graph=True) -> _set_static_graph -> reducer._set_static_graph.
  if (settings.static_graph) reducer_->set_static_graph();
}

void DdpWrapper::pre_forward(bool sync) {
  const bool grad_enabled = at::GradMode::is_enabled();
  if (grad_enabled && sync) {
    ++num_iterations_;
    reducer_->prepare_for_forward();
  }
  // Called whenever grad is enabled, inside no_sync too. rebuild_buckets() first runs
  // ensure_prior_reduction_finished(): the "Expected to have finished reduction in the prior
  // iteration" error comes from here.
  if (grad_enabled) reducer_->rebuild_buckets();
}

at::Tensor DdpWrapper::post_forward(const at::Tensor& output, bool sync) {
  const bool grad_enabled = at::GradMode::is_enabled();
  if (grad_enabled && sync) {
    if (settings_.find_unused_parameters && !settings_.static_graph) {
      reducer_->prepare_for_backward({output});  // _find_tensors(output)
    } else {
      reducer_->prepare_for_backward({});
    }
  }
  const bool sink = (settings_.find_unused_parameters && !settings_.static_graph) ||
                    (settings_.static_graph && num_iterations_ == 1);
  // "Do not touch tensors that have no grad_fn" (distributed.py, pytorch#60733).
  if (!sink || !output.grad_fn()) return output;
  auto state = c10::make_intrusive<SinkState>();
  state->reducer = reducer_.get();
  state->static_graph = settings_.static_graph;
  state->num_iterations = num_iterations_;
  return DdpSink::apply(output, state);
}

}  // namespace hookstream
