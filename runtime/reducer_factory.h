// The LibTorch-version-specific parts of building a c10d::Reducer and its process group, in one
// place. Everything else in runtime/ is written against the API common to 1.13 and 2.x.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

namespace hookstream {

struct ReducerArguments {
  std::vector<at::Tensor> params;
  std::vector<std::vector<size_t>> bucket_indices;      // already reversed, as DDP passes them
  std::vector<size_t> per_bucket_size_limits;           // already reversed
  c10::intrusive_ptr<c10d::ProcessGroup> process_group;
  std::vector<bool> expect_sparse_gradients;
  int64_t bucket_bytes_cap = 0;
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
  std::unordered_map<size_t, std::string> param_names;  // empty unless TORCH_DISTRIBUTED_DEBUG != OFF
  int64_t first_bucket_bytes_cap = 0;
};

std::shared_ptr<c10d::Reducer> make_reducer(ReducerArguments arguments);

// Whether this build's LibTorch has Gloo (the Debian package does; the PyTorch wheel ships no gloo
// headers, ../shared/docs/runtime-notes.md): CPU ranks and the oracle need it.
bool gloo_available();

// A Gloo process group over `store` whose collectives give up after `timeout`.
c10::intrusive_ptr<c10d::ProcessGroup> make_gloo_process_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                                int rank, int world_size,
                                                                std::chrono::milliseconds timeout);

// The TCPStore rendezvous every rank of a job makes (torch.distributed's env:// init): rank 0 hosts
// the store and waits for all `world_size` clients; everyone gives up after `timeout`.
c10d::TCPStoreOptions rendezvous_store_options(int port, int rank, int world_size, std::chrono::milliseconds timeout);

// "1.13.0": the LibTorch this was built against.
std::string torch_version();

}  // namespace hookstream
