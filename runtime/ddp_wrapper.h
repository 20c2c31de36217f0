// DistributedDataParallel's Python half (torch/nn/parallel/distributed.py), in C++, around a real
// c10d::Reducer: parameter list, bucket assignment, the forward wrapper (prepare_for_forward,
// rebuild_buckets, prepare_for_backward), _DDPSink, static graph, no_sync.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/logger.hpp>

#include "runtime/reducer_factory.h"
#include "sim/inputs/plan.h"

namespace hookstream {

struct DdpSettings {
  bool find_unused_parameters = false;
  bool static_graph = false;
  bool gradient_as_bucket_view = false;
  int64_t bucket_bytes_cap = 25 * 1024 * 1024;
  // 2.x: bucket_cap_mb left at its default. Decides the 1 MiB first bucket there (see .cc).
  bool bucket_cap_default = true;
  // distributed.py passes parameter names only when TORCH_DISTRIBUTED_DEBUG is INFO or DETAIL
  // (_build_debug_param_to_name_mapping); the Reducer's error texts then include them.
  bool pass_parameter_names = false;
};

DdpSettings ddp_settings_for(const Plan& plan, bool distributed_debug_on);

class DdpWrapper {
 public:
  // `params`: DDP's parameter list (trainable, de-duplicated, named_modules() order).
  DdpWrapper(std::vector<at::Tensor> params, const std::vector<std::string>& names,
             c10::intrusive_ptr<c10d::ProcessGroup> process_group, const DdpSettings& settings);

  // forward() before the module runs. `sync`: not inside no_sync() (require_backward_grad_sync).
  void pre_forward(bool sync);
  // forward() after the module runs: prepare_for_backward and _DDPSink. Returns the output to use.
  at::Tensor post_forward(const at::Tensor& output, bool sync);

  // The first-iteration bucket assignment given to the Reducer (DDP indices, bucket 0 first).
  const std::vector<std::vector<size_t>>& initial_buckets() const { return initial_buckets_; }
  c10d::Reducer& reducer() { return *reducer_; }

 private:
  DdpSettings settings_;
  std::shared_ptr<c10d::Reducer> reducer_;
  // Declared after reducer_: destroyed first (Logger's destructor reads the Reducer, as in Python,
  // where DDP drops its logger before its reducer).
  std::shared_ptr<c10d::Logger> logger_;
  std::vector<std::vector<size_t>> initial_buckets_;
  int64_t num_iterations_ = 0;
};

}  // namespace hookstream
