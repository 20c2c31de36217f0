// A state machine that mirrors c10d's Reducer (torch/csrc/distributed/c10d/reducer.cpp; where 1.13
// and 2.x differ, ReducerOptions::version decides: sim/inputs/torch_version.h, docs/ddp-versions.md) and the
// parts of DistributedDataParallel
// (torch/nn/parallel/distributed.py) that drive it: initial bucket assignment, prepare_for_forward /
// rebuild_buckets / prepare_for_backward, autograd_hook, mark_variable_ready, in-order bucket launch,
// finalize_backward queued on the innermost running graph task, find_unused_parameters,
// static_graph counting and delay_all_reduce, the one bucket rebuild in gradient-ready order.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/sync/sync_model.h"
#include "sim/sync/sync_simulation.h"
#include "sim/inputs/torch_version.h"
#include "sim/verify/verdict.h"

namespace hookstream {

struct ReducerParameter {
  std::string name;
  int64_t bytes = 0;
  int dtype_key = 0;  // parameters of different dtypes never share a bucket
};

struct ReducerOptions {
  int64_t bucket_bytes_cap = 25 * 1024 * 1024;       // DDP bucket_cap_mb * MiB
  int64_t first_bucket_bytes_cap = 1024 * 1024;      // dist._DEFAULT_FIRST_BUCKET_BYTES
  bool find_unused_parameters = false;
  bool static_graph = false;
  bool gradient_as_bucket_view = false;
  TorchVersion version = newest_torch_version();  // behaviours and texts that changed (sim/inputs/torch_version.h)
};

// An error the real Reducer raises (as RuntimeError); `kind` classifies it.
class ReducerError : public std::runtime_error {
 public:
  ReducerError(VerdictKind kind, int ddp_index, const std::string& text)
      : std::runtime_error(text), kind_(kind), ddp_index_(ddp_index) {}
  VerdictKind kind() const { return kind_; }
  int ddp_index() const { return ddp_index_; }

 private:
  VerdictKind kind_;
  int ddp_index_;
};



// c10d::compute_bucket_assignment_by_size (reducer.cpp). `order` empty: parameters in index order
// and the result sorted by smallest index; otherwise parameters in that (gradient-ready) order and
// no sort.
BucketAssignment compute_bucket_assignment_by_size(const std::vector<ReducerParameter>& parameters,
                                                   const std::vector<int64_t>& limits,
                                                   const std::vector<int>& order = {});

class ReducerModel {
 public:
  using QueueCallback = std::function<void(std::function<void()>)>;
  struct Observer {
    std::function<void(int ddp_index)> on_mark;             // mark_variable_ready (grad copied to bucket)
    std::function<void()> on_finalize;                      // finalize_backward: grads written back
  };

  ReducerModel(std::vector<ReducerParameter> parameters, ReducerOptions options);

  // DDP.__init__: buckets from compute_bucket_assignment_by_size, reversed.
  const BucketAssignment& buckets() const { return buckets_; }
  void set_observer(Observer observer) { observer_ = std::move(observer); }
  void set_queue_callback(QueueCallback queue) { queue_callback_ = std::move(queue); }

  // DDP.forward, grad enabled and require_backward_grad_sync.
  void prepare_for_forward();
  // Reducer::rebuild_buckets (called at every grad-enabled forward): raises the prior-iteration
  // error if finalize never ran; returns the new assignment when buckets are rebuilt now.
  // `broadcast` is rank 0's rebuilt assignment (sync_bucket_indices); empty on rank 0 itself.
  std::optional<BucketAssignment> rebuild_buckets(const std::optional<BucketAssignment>& broadcast);
  // Reducer::prepare_for_backward. `reachable` (find_unused, non-static): which DDP parameters the
  // autograd graph of the outputs reaches.
  void prepare_for_backward(const std::vector<bool>* reachable);
  // The DDP hook on a parameter's AccumulateGrad node. `grad_defined`: the parameter's .grad is
  // defined after the accumulation (reducer.cpp only marks it locally used then).
  void autograd_hook(int ddp_index, bool grad_defined = true);
  // _DDPSink's callback in static graph's first iteration.
  void delay_all_reduce();

  bool expect_autograd_hooks() const { return expect_autograd_hooks_; }
  bool require_finalize() const { return require_finalize_; }
  int num_iterations() const { return num_iterations_; }
  const std::vector<int>& unused_parameters() const { return unused_parameters_; }
  // local_used_map_ as finalize_backward read it last (find_unused_parameters, non-static): which
  // parameters this rank marked used since the previous finalize.
  const std::vector<bool>& last_local_used() const { return last_local_used_; }
  // Collectives issued since the last prepare_for_backward / since construction.
  const std::vector<Collective>& collectives() const { return collectives_; }
  void clear_collectives() { collectives_.clear(); }
  // Parameters whose bucket had not completed when the check ran (for unfinished_reduction).
  std::vector<int> unmarked_parameters() const;

 private:
  bool dynamic_graph_find_unused() const { return !options_.static_graph && options_.find_unused_parameters; }
  bool static_graph_first_iteration() const { return options_.static_graph && num_iterations_ == 1; }
  bool static_graph_after_first_iteration() const { return options_.static_graph && num_iterations_ > 1; }
  bool should_rebuild_buckets() const {
    return (options_.static_graph || !options_.find_unused_parameters) && !has_rebuilt_bucket_;
  }
  void initialize_buckets(BucketAssignment assignment);
  void reset_bucket_counting();
  void mark_variable_ready(int ddp_index);
  void mark_bucket_ready(size_t bucket_index);
  void all_reduce_bucket(size_t bucket_index);
  void finalize_backward();
  void push_rebuilt_params(int ddp_index);
  void ensure_prior_reduction_ended();

  std::vector<ReducerParameter> parameters_;
  ReducerOptions options_;
  BucketAssignment buckets_;
  std::vector<int> bucket_of_;  // ddp index -> bucket
  std::vector<int> pending_;    // per bucket
  size_t next_bucket_ = 0;
  bool expect_autograd_hooks_ = false;
  bool require_finalize_ = false;
  bool has_marked_unused_parameters_ = false;
  bool has_rebuilt_bucket_ = false;
  int num_iterations_ = 0;
  std::vector<bool> marked_;  // perIterationReadyParams_
  std::vector<int> unused_parameters_;
  std::vector<int> rebuilt_param_indices_;
  std::vector<int> num_grad_hooks_triggered_;               // static graph, counted in iteration 1
  std::vector<int> num_grad_hooks_triggered_this_iteration_;  // counted down later
  std::vector<bool> local_used_;       // local_used_map_
  std::vector<bool> last_local_used_;  // its value at the last finalize_backward
  std::vector<Collective> collectives_;
  Observer observer_;
  QueueCallback queue_callback_;
};

// The exact texts PyTorch raises in a default run, kept in one place (reducer.cpp; 1.13.1 and
// 2.11.0 as observed through the oracles).
std::string marked_twice_error_text(int ddp_index, const std::string& name,
                                    const TorchVersion& version = newest_torch_version());
std::string prior_reduction_error_text(int rank, const std::vector<int>& unmarked, bool static_graph);
std::string static_graph_changed_error_text();
// finalize_backward's TORCH_INTERNAL_ASSERT(expect_autograd_hooks_): the file:line differ by build.
std::string reducer_assert_error_text(const TorchVersion& version);

}  // namespace hookstream
