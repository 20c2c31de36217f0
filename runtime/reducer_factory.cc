#include "runtime/reducer_factory.h"

#include <stdexcept>

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

// PyTorch 2.11's reducer.hpp (read off the installed wheel's header on the H100 machine,
// 2026-11-22): (params, bucket_indices, process_group, expect_sparse_gradients, bucket_bytes_cap,
// find_unused_parameters, gradient_as_bucket_view, param_names, first_bucket_bytes_cap,
// skip_all_reduce_unused_params, use_python_reducer, bucket_bytes_cap_list). per_bucket_size_limits
// is gone (initialize_buckets takes only the indices). skip_all_reduce_unused_params and
// use_python_reducer are DDP's defaults (False); an empty bucket_bytes_cap_list is what
// distributed.py passes without bucket_cap_mb_list (a uniform cap = bucket_bytes_cap). Other 2.x
// minors had other shapes; only 2.11 is built and tested, so other versions stop here.
#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR == 11
std::shared_ptr<c10d::Reducer> make_reducer(ReducerArguments a) {
  return std::make_shared<c10d::Reducer>(std::move(a.params), std::move(a.bucket_indices), std::move(a.process_group),
                                         std::move(a.expect_sparse_gradients), a.bucket_bytes_cap,
                                         a.find_unused_parameters, a.gradient_as_bucket_view,
                                         std::move(a.param_names), a.first_bucket_bytes_cap,
                                         /*skip_all_reduce_unused_params=*/false, /*use_python_reducer=*/false,
                                         std::vector<int64_t>{});
}
#else
#error "hookstream's Reducer adapter knows LibTorch 1.13 and 2.11; add this version's constructor (reducer.hpp)"
#endif

#endif

c10d::TCPStoreOptions rendezvous_store_options(int port, int rank, int world_size, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(port);
  options.isServer = rank == 0;
  options.numWorkers = world_size;
  options.waitWorkers = true;
  options.timeout = timeout;
  return options;
}

bool gloo_available() {
#ifdef HOOKSTREAM_HAVE_GLOO
  return true;
#else
  return false;
#endif
}

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
