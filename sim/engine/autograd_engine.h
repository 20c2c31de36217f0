// A model of PyTorch's autograd engine at the level that decides when gradient hooks fire:
// graph tasks (outer and nested), dependency counting, the ready queue ordered by sequence number,
// AccumulateGrad nodes with their post hooks, torch.autograd.grad (which executes no
// AccumulateGrad), custom Functions whose backward runs nested graph tasks, and final callbacks
// queued on the innermost running graph task. Mirrors torch/csrc/autograd/engine.cpp (1.13/2.x):
// Engine::execute, compute_dependencies, evaluate_function, CompareNodeTaskTime,
// exec_post_processing, queue_callback.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace hookstream {

class AutogradEngine;

// What a node of the graph is. Ops and Functions carry a sequence number taken at creation, as
// torch::autograd::Node does (at::sequence_number::get_and_increment()); AccumulateGrad nodes use
// UINT64_MAX so they run as soon as they are ready (accumulate_grad.cpp).
enum class NodeKind { Op, Accumulate, Function, Root };

struct GradEdge {
  int node = -1;      // -1: input does not require grad (an invalid edge)
  bool defined = true;  // whether the gradient sent along this edge is defined
};

struct GradNode {
  NodeKind kind = NodeKind::Op;
  uint64_t sequence_nr = 0;
  std::string label;
  std::vector<int> next;  // next_edges(): node ids, -1 for an input that does not require grad
  int parameter = -1;     // Accumulate: index into ModelStructure::parameters; -1 a non-parameter leaf
  // Function: runs when the node executes; returns, for each next edge, whether its gradient is
  // defined (a custom Function may return None for an input).
  std::function<std::vector<bool>(AutogradEngine&)> backward;
};

// A tensor as far as autograd is concerned.
struct SimTensor {
  int grad_fn = -1;  // node whose output this is (for a leaf that requires grad: its AccumulateGrad)
  // The forward data-flow node that computed it, recorded whatever the grad mode (-1: a constant,
  // an input, or nothing). Tells "computed but feeding nothing" from "feeding the loss without a
  // grad_fn" (see AutogradEngine::dataflow_parameters).
  int data = -1;
  bool requires_grad() const { return grad_fn >= 0; }
};

// One graph task as the engine runs it.
struct GraphTaskInfo {
  int id = 0;
  int depth = 0;          // 0 for the outer backward, 1+ for reentrant (nested) tasks
  int parent = -1;
  std::string label;      // e.g. "outer backward", "checkpoint(layer 3)", "tiled_mlp chunk 2 (layer 3)"
  bool accumulates = true;  // false for torch.autograd.grad: AccumulateGrad nodes do not execute
};

struct AccumulateEvent {
  int parameter = -1;
  int task = -1;
  bool gradient_defined = true;
};

class AutogradEngine {
 public:
  using HookListener = std::function<void(const AccumulateEvent&)>;

  // One AccumulateGrad node per parameter is created up front (node id == parameter index).
  explicit AutogradEngine(size_t parameter_count);

  // ---- building the graph (forward) ----
  // Grad mode, as torch.no_grad() / enable_grad() toggle it: with grad disabled, ops create no node.
  bool grad_enabled() const { return grad_enabled_; }
  void set_grad_enabled(bool enabled) { grad_enabled_ = enabled; }
  // A leaf that requires grad: a parameter (index >= 0) or another leaf (-1). Parameters keep one
  // AccumulateGrad node for the whole run, as DDP holds it (reducer.cpp grad_accumulators_).
  SimTensor parameter_leaf(int parameter);
  // FSDP1: the original parameters of a unit are views of one FlatParameter, so their gradients
  // meet in the flat parameter's single AccumulateGrad node (torch/distributed/fsdp/_flat_param.py
  // FlatParamHandle; _runtime_utils.py _register_post_backward_hook hooks that node). After this,
  // an op reading parameter p sends its gradient to the node of accumulator_of[p], which runs once
  // per graph task when all its inputs there are done, and reports parameter accumulator_of[p].
  // Off (the default, and what DDP uses): one node per parameter.
  void share_accumulators(const std::vector<int>& accumulator_of);
  SimTensor fresh_leaf(const std::string& label);
  // An op over inputs; the output requires grad iff grad mode is on and some input requires it.
  // Only Functions keep their label (it names the graph tasks they start); plain ops drop it.
  SimTensor op(const std::string& label, const std::vector<SimTensor>& inputs);
  // A custom autograd.Function: like op(), but `backward` runs when the node executes.
  SimTensor function(const std::string& label, const std::vector<SimTensor>& inputs,
                     std::function<std::vector<bool>(AutogradEngine&)> backward);
  const GradNode& node(int id) const { return nodes_[static_cast<size_t>(id)]; }
  // Accumulators reachable from `outputs` (Reducer::search_unused_parameters' traversal).
  std::vector<bool> reachable_parameters(const std::vector<SimTensor>& outputs, size_t parameter_count) const;
  // Parameters whose values flow into `outputs` in the forward, grad mode or not: a parameter read
  // only by ops whose results feed nothing (a norm whose MLP is skipped) is not among them; one
  // read under no_grad by a reentrant checkpoint is. `extra` adds data inputs to an op recorded
  // with function() (what a Function's forward read without taking it as an input).
  std::vector<bool> dataflow_parameters(const std::vector<SimTensor>& outputs) const;
  // Records that `result` was also computed from `extra` (a custom Function's forward reading
  // tensors or parameters that are not its autograd inputs).
  SimTensor with_data_inputs(SimTensor result, const std::vector<SimTensor>& extra, const std::vector<int>& parameters);

  // ---- running backward ----
  // torch.autograd.backward(roots): a graph task (nested when called from inside a backward).
  void backward(const std::vector<SimTensor>& roots, const std::string& label);
  // torch.autograd.grad(roots, inputs): executes only what leads to `inputs`, and no AccumulateGrad.
  void grad(const std::vector<SimTensor>& roots, const std::vector<SimTensor>& inputs,
            const std::string& label);
  // Engine::queue_callback: runs when the innermost running graph task finishes.
  void queue_callback(std::function<void()> callback);
  int current_task() const { return running_.empty() ? -1 : running_.back(); }
  // The innermost graph task an exception escaped from since clear_tasks() (-1: none): where an
  // engine's error was raised once the unwinding has emptied the running stack.
  int failed_task() const { return failed_task_; }
  const GraphTaskInfo& task(int id) const { return tasks_[static_cast<size_t>(id)]; }
  const std::vector<GraphTaskInfo>& tasks() const { return tasks_; }
  void set_hook_listener(HookListener listener) { listener_ = std::move(listener); }
  // Drops the nodes of a finished step but keeps the parameters' accumulators.
  void clear_graph();
  // Forgets the graph tasks run so far (their ids restart at 0).
  void clear_tasks();

 private:
  int add_node(GradNode node);
  int root_of(const std::vector<SimTensor>& roots);  // -1 when no root requires grad
  void run_task(int root, const std::vector<int>& capture_targets, const std::string& label,
                bool accumulates);

  struct DataNode {
    std::vector<int> inputs;      // data nodes
    std::vector<int> parameters;  // parameters read directly
  };
  int add_data(const std::vector<SimTensor>& inputs, const std::vector<int>& parameters);

  int edge_to(int grad_fn) const {
    return grad_fn >= 0 && static_cast<size_t>(grad_fn) < accumulator_of_.size() ? accumulator_of_[static_cast<size_t>(grad_fn)] : grad_fn;
  }

  std::vector<GradNode> nodes_;
  std::vector<int> accumulator_of_;  // share_accumulators(); empty: every parameter its own node
  std::vector<DataNode> data_nodes_;  // the forward data flow of the current step
  size_t parameter_count_ = 0;  // nodes [0, parameter_count_) are the parameters' accumulators
  uint64_t next_sequence_nr_ = 0;
  bool grad_enabled_ = true;
  std::vector<uint64_t> visit_stamp_;  // per node: the traversal that last visited it
  std::vector<int> local_index_;       // per node: its index in the running task, -1 if none
  uint64_t stamp_counter_ = 0;
  std::vector<GraphTaskInfo> tasks_;
  std::vector<int> running_;
  int failed_task_ = -1;
  std::vector<std::vector<std::function<void()>>> callbacks_;  // per running task
  HookListener listener_;
};

}  // namespace hookstream
