#include "runtime/reducer_factory.h"

#include <stdexcept>
#include <type_traits>

#include <torch/version.h>

#ifdef HOOKSTREAM_HAVE_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif

namespace hookstream {

std::string torch_version() { return TORCH_VERSION; }

#if TORCH_VERSION_MAJOR == 1

// PyTorch 1.13 reducer.hpp: (params, bucket_indices, per_bucket_size_limits, process_group,
// expect_sparse_gradients, bucket_bytes_cap, find_unused_parameters, gradient_as_bucket_view,
// param_names, first_bucket_bytes_cap).
std::shared_ptr<c10d::Reducer> make_reducer(ReducerArguments a) {
  return std::make_shared<c10d::Reducer>(std::move(a.params), std::move(a.bucket_indices),
                                         std::move(a.per_bucket_size_limits), std::move(a.process_group),
                                         std::move(a.expect_sparse_gradients), a.bucket_bytes_cap,
                                         a.find_unused_parameters, a.gradient_as_bucket_view,
                                         std::move(a.param_names), a.first_bucket_bytes_cap);
}

#else

// PyTorch 2.x has had three constructor shapes (torch/csrc/distributed/c10d/reducer.hpp):
//   2.0 .. 2.6:  (params, bucket_indices, per_bucket_size_limits, process_group, expect_sparse,
//                 bucket_bytes_cap, find_unused, gradient_as_bucket_view, param_names,
//                 first_bucket_bytes_cap)  -- as 1.13
//   ~2.7 .. :    (params, bucket_indices, process_group, expect_sparse, bucket_bytes_cap,
//                 find_unused, gradient_as_bucket_view, param_names, first_bucket_bytes_cap,
//                 skip_all_reduce_unused_params, use_python_reducer)
//                 (per_bucket_size_limits dropped: distributed.py still computes them but the
//                 pybind init no longer forwards them)
//   newest:      the above + (bucket_bytes_cap_list, batched_grad_copy = false)
// Which one a given 2.x minor has is picked by overload viability rather than a version table, so
// a point release that moves the change does not break the build. skip_all_reduce_unused_params
// and use_python_reducer are DDP's defaults (False); bucket_bytes_cap_list is empty, which is
// what DDP passes when bucket_cap_mb_list is not given (uniform cap = bucket_bytes_cap).
std::shared_ptr<c10d::Reducer> make_reducer(ReducerArguments a) {
  using c10d::Reducer;
  using Params = std::vector<at::Tensor>;
  using Buckets = std::vector<std::vector<size_t>>;
  using Limits = std::vector<size_t>;
  using Group = c10::intrusive_ptr<c10d::ProcessGroup>;
  using Sparse = std::vector<bool>;
  using Names = std::unordered_map<size_t, std::string>;
  if constexpr (std::is_constructible_v<Reducer, Params, Buckets, Group, Sparse, int64_t, bool, bool, Names,
                                        int64_t, bool, bool, std::vector<int64_t>>) {
    return std::make_shared<Reducer>(std::move(a.params), std::move(a.bucket_indices), std::move(a.process_group),
                                     std::move(a.expect_sparse_gradients), a.bucket_bytes_cap,
                                     a.find_unused_parameters, a.gradient_as_bucket_view, std::move(a.param_names),
                                     a.first_bucket_bytes_cap, /*skip_all_reduce_unused_params=*/false,
                                     /*use_python_reducer=*/false, std::vector<int64_t>{});
  } else if constexpr (std::is_constructible_v<Reducer, Params, Buckets, Group, Sparse, int64_t, bool, bool,
                                               Names, int64_t, bool, bool>) {
    return std::make_shared<Reducer>(std::move(a.params), std::move(a.bucket_indices), std::move(a.process_group),
                                     std::move(a.expect_sparse_gradients), a.bucket_bytes_cap,
                                     a.find_unused_parameters, a.gradient_as_bucket_view, std::move(a.param_names),
                                     a.first_bucket_bytes_cap, /*skip_all_reduce_unused_params=*/false,
                                     /*use_python_reducer=*/false);
  } else if constexpr (std::is_constructible_v<Reducer, Params, Buckets, Limits, Group, Sparse, int64_t, bool,
                                               bool, Names, int64_t>) {
    return std::make_shared<Reducer>(std::move(a.params), std::move(a.bucket_indices),
                                     std::move(a.per_bucket_size_limits), std::move(a.process_group),
                                     std::move(a.expect_sparse_gradients), a.bucket_bytes_cap,
                                     a.find_unused_parameters, a.gradient_as_bucket_view, std::move(a.param_names),
                                     a.first_bucket_bytes_cap);
  } else {
    static_assert(std::is_same_v<Params, void>, "unknown c10d::Reducer constructor: update make_reducer");
  }
}

#endif

c10::intrusive_ptr<c10d::ProcessGroup> make_gloo_process_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                                int rank, int world_size,
                                                                std::chrono::milliseconds timeout) {
#ifdef HOOKSTREAM_HAVE_GLOO
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  options->threads = 1;
#if TORCH_VERSION_MAJOR == 1
  // 1.13: ProcessGroupGloo is a ProcessGroup.
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, options);
#else
  // 2.x: ProcessGroupGloo is a Backend; the Reducer takes a ProcessGroup that dispatches to it.
  auto backend = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, options);
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, world_size);
  group->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
  group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, backend);
  return group;
#endif
#else
  throw std::runtime_error(
      "this build of hookstream has no Gloo (LibTorch without gloo headers): the CPU oracle cannot run");
#endif
}

}  // namespace hookstream
