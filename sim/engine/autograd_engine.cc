#include "sim/engine/autograd_engine.h"

#include <exception>

#include <queue>
#include <utility>

namespace hookstream {

namespace {

constexpr uint64_t kAccumulateSequenceNr = std::numeric_limits<uint64_t>::max();

// engine.cpp CompareNodeTaskTime: within one graph task (one reentrant depth) the node with the
// higher sequence number runs first. std::priority_queue with the same comparator also reproduces
// PyTorch's order among equal sequence numbers (several AccumulateGrad nodes ready at once).
struct ReadyEntry {
  uint64_t sequence_nr;
  int node;
};
struct CompareReady {
  bool operator()(const ReadyEntry& a, const ReadyEntry& b) const { return a.sequence_nr < b.sequence_nr; }
};

}  // namespace

AutogradEngine::AutogradEngine(size_t parameter_count) : parameter_count_(parameter_count) {
  nodes_.reserve(parameter_count * 4 + 64);
  for (size_t i = 0; i < parameter_count; ++i) {
    GradNode acc;
    acc.kind = NodeKind::Accumulate;
    acc.sequence_nr = kAccumulateSequenceNr;
    acc.parameter = static_cast<int>(i);
    nodes_.push_back(std::move(acc));
  }
}

int AutogradEngine::add_node(GradNode node) {
  nodes_.push_back(std::move(node));
  return static_cast<int>(nodes_.size()) - 1;
}

SimTensor AutogradEngine::parameter_leaf(int parameter) { return SimTensor{parameter}; }

void AutogradEngine::share_accumulators(const std::vector<int>& accumulator_of) {
  accumulator_of_.clear();
  if (accumulator_of.size() != parameter_count_) return;
  accumulator_of_ = accumulator_of;
}

SimTensor AutogradEngine::fresh_leaf(const std::string& label) {
  GradNode acc;
  acc.kind = NodeKind::Accumulate;
  acc.sequence_nr = kAccumulateSequenceNr;
  acc.label = label;
  return SimTensor{add_node(std::move(acc))};
}

SimTensor AutogradEngine::op(const std::string& label, const std::vector<SimTensor>& inputs) {
  return function(label, inputs, nullptr);
}

int AutogradEngine::add_data(const std::vector<SimTensor>& inputs, const std::vector<int>& parameters) {
  DataNode data;
  // One allocation per list, sized before the loop: growing them one push_back at a time was ~4% of
  // a 70B verify (perf: _M_realloc_insert under add_data), a graph holds ~10^4 of these nodes.
  data.inputs.reserve(inputs.size());
  size_t leaves = 0;
  for (const auto& t : inputs) leaves += t.grad_fn >= 0 && static_cast<size_t>(t.grad_fn) < parameter_count_;
  data.parameters.reserve(parameters.size() + leaves);
  data.parameters = parameters;
  for (const auto& t : inputs) {
    if (t.data >= 0) data.inputs.push_back(t.data);
    // A parameter leaf: its accumulator's node id is the parameter index.
    if (t.grad_fn >= 0 && static_cast<size_t>(t.grad_fn) < parameter_count_) data.parameters.push_back(t.grad_fn);
  }
  if (data.inputs.empty() && data.parameters.empty()) return -1;
  data_nodes_.push_back(std::move(data));
  return static_cast<int>(data_nodes_.size()) - 1;
}

SimTensor AutogradEngine::with_data_inputs(SimTensor result, const std::vector<SimTensor>& extra,
                                           const std::vector<int>& parameters) {
  std::vector<SimTensor> inputs = extra;
  inputs.push_back(SimTensor{-1, result.data});
  result.data = add_data(inputs, parameters);
  return result;
}

std::vector<bool> AutogradEngine::dataflow_parameters(const std::vector<SimTensor>& outputs) const {
  std::vector<bool> seen(data_nodes_.size(), false);
  std::vector<bool> used(parameter_count_, false);
  std::vector<int> stack;
  // Every node is pushed at most once per input edge; one allocation up front instead of the
  // doublings (perf: ~3% of a 70B verify in _M_realloc_insert here).
  stack.reserve(data_nodes_.size() + outputs.size());
  for (const auto& t : outputs) {
    if (t.data >= 0) stack.push_back(t.data);
    if (t.grad_fn >= 0 && static_cast<size_t>(t.grad_fn) < parameter_count_) used[static_cast<size_t>(t.grad_fn)] = true;
  }
  while (!stack.empty()) {
    const int id = stack.back();
    stack.pop_back();
    if (seen[static_cast<size_t>(id)]) continue;
    seen[static_cast<size_t>(id)] = true;
    const DataNode& node = data_nodes_[static_cast<size_t>(id)];
    for (int p : node.parameters) used[static_cast<size_t>(p)] = true;
    for (int input : node.inputs) stack.push_back(input);
  }
  return used;
}

SimTensor AutogradEngine::function(const std::string& label, const std::vector<SimTensor>& inputs,
                                   std::function<std::vector<bool>(AutogradEngine&)> backward) {
  const int data = add_data(inputs, {});
  if (!grad_enabled_) return SimTensor{-1, data};
  bool any = false;
  for (const auto& t : inputs) any = any || t.requires_grad();
  if (!any) return SimTensor{-1, data};
  GradNode node;
  node.kind = backward ? NodeKind::Function : NodeKind::Op;
  node.sequence_nr = next_sequence_nr_++;
  if (backward) node.label = label;  // plain ops keep no label: they are many and never shown
  node.next.reserve(inputs.size());
  for (const auto& t : inputs) node.next.push_back(edge_to(t.grad_fn));
  node.backward = std::move(backward);
  return SimTensor{add_node(std::move(node)), data};
}

std::vector<bool> AutogradEngine::reachable_parameters(const std::vector<SimTensor>& outputs,
                                                       size_t parameter_count) const {
  // Reducer::search_unused_parameters: walk next_edges from the outputs' grad_fn.
  std::vector<bool> seen(nodes_.size(), false);
  std::vector<int> stack;
  for (const auto& t : outputs) {
    if (t.grad_fn >= 0) stack.push_back(t.grad_fn);
  }
  std::vector<bool> reached(parameter_count, false);
  while (!stack.empty()) {
    const int id = stack.back();
    stack.pop_back();
    for (int next : nodes_[static_cast<size_t>(id)].next) {
      if (next < 0 || seen[static_cast<size_t>(next)]) continue;
      seen[static_cast<size_t>(next)] = true;
      stack.push_back(next);
    }
  }
  for (size_t p = 0; p < parameter_count && p < parameter_count_; ++p) reached[p] = seen[p];
  return reached;
}

int AutogradEngine::root_of(const std::vector<SimTensor>& roots) {
  std::vector<int> root_nodes;
  for (const auto& r : roots) {
    if (r.grad_fn >= 0) root_nodes.push_back(r.grad_fn);
  }
  if (root_nodes.empty()) return -1;
  if (root_nodes.size() == 1) return root_nodes.front();
  // Engine::execute adds a GraphRoot when there is more than one root edge.
  GradNode graph_root;
  graph_root.kind = NodeKind::Root;
  graph_root.sequence_nr = kAccumulateSequenceNr;
  graph_root.label = "GraphRoot";
  graph_root.next = std::move(root_nodes);
  return add_node(std::move(graph_root));
}

void AutogradEngine::backward(const std::vector<SimTensor>& roots, const std::string& label) {
  const int root = root_of(roots);
  if (root >= 0) run_task(root, {}, label, true);
}

void AutogradEngine::grad(const std::vector<SimTensor>& roots, const std::vector<SimTensor>& inputs,
                          const std::string& label) {
  const int root = root_of(roots);
  if (root < 0) return;
  std::vector<int> captures;
  for (const auto& t : inputs) {
    if (t.grad_fn >= 0) captures.push_back(edge_to(t.grad_fn));
  }
  run_task(root, captures, label, false);
}

void AutogradEngine::queue_callback(std::function<void()> callback) {
  // Engine::queue_callback appends to current_graph_task->final_callbacks_: the innermost task.
  if (callbacks_.empty()) return;
  callbacks_.back().push_back(std::move(callback));
}

void AutogradEngine::run_task(int root, const std::vector<int>& capture_targets, const std::string& label,
                              bool accumulates) {
  GraphTaskInfo info;
  info.id = static_cast<int>(tasks_.size());
  info.depth = static_cast<int>(running_.size());
  info.parent = current_task();
  info.label = label;
  info.accumulates = accumulates;
  tasks_.push_back(info);

  // compute_dependencies: count incoming edges of every node reachable from the root. Nodes get
  // task-local indices so the cost is proportional to this task's graph, not to every node ever
  // recorded (nested tasks are many and small).
  // Task-local indices live in local_index_ (one slot per node). Tasks nest strictly, so a nested
  // task saves the slots it overwrites (shared AccumulateGrad nodes) and restores them at its end.
  if (local_index_.size() < nodes_.size()) local_index_.resize(nodes_.size(), -1);
  if (visit_stamp_.size() < nodes_.size()) visit_stamp_.resize(nodes_.size(), 0);
  const uint64_t stamp = ++stamp_counter_;
  std::vector<std::pair<int, int>> saved_slots;
  std::vector<int> order{root};
  auto claim = [&](int node, int index) {
    const int previous = local_index_[static_cast<size_t>(node)];
    if (previous != -1) saved_slots.emplace_back(node, previous);
    local_index_[static_cast<size_t>(node)] = index;
    visit_stamp_[static_cast<size_t>(node)] = stamp;
  };
  claim(root, 0);
  for (size_t cursor = 0; cursor < order.size(); ++cursor) {
    for (int next : nodes_[static_cast<size_t>(order[cursor])].next) {
      if (next < 0 || visit_stamp_[static_cast<size_t>(next)] == stamp) continue;
      claim(next, static_cast<int>(order.size()));
      order.push_back(next);
    }
  }
  auto local_of = [this](int node) { return static_cast<size_t>(local_index_[static_cast<size_t>(node)]); };
  const size_t n = order.size();
  std::vector<int> dependencies(n, 0);
  for (int id : order) {
    for (int next : nodes_[static_cast<size_t>(id)].next) {
      if (next >= 0) ++dependencies[local_of(next)];
    }
  }

  // GraphTask::init_to_execute for torch.autograd.grad: only nodes on a path to a captured input
  // execute; the captured AccumulateGrad nodes themselves do not.
  std::vector<char> needed;
  if (!accumulates) {
    std::vector<std::vector<int>> predecessors(n);
    for (size_t k = 0; k < n; ++k) {
      for (int next : nodes_[static_cast<size_t>(order[k])].next) {
        if (next >= 0) predecessors[local_of(next)].push_back(static_cast<int>(k));
      }
    }
    std::vector<char> leads(n, 0);
    std::vector<int> frontier;
    for (int c : capture_targets) {
      if (visit_stamp_[static_cast<size_t>(c)] != stamp) continue;  // not reachable from the root
      const size_t k = local_of(c);
      if (!leads[k]) {
        leads[k] = 1;
        frontier.push_back(static_cast<int>(k));
      }
    }
    while (!frontier.empty()) {
      const int k = frontier.back();
      frontier.pop_back();
      for (int p : predecessors[static_cast<size_t>(k)]) {
        if (!leads[static_cast<size_t>(p)]) {
          leads[static_cast<size_t>(p)] = 1;
          frontier.push_back(p);
        }
      }
    }
    needed.assign(n, 0);
    for (size_t k = 0; k < n; ++k) {
      needed[k] = leads[k] && nodes_[static_cast<size_t>(order[k])].kind != NodeKind::Accumulate;
    }
  }

  running_.push_back(info.id);
  callbacks_.emplace_back();
  // An exception (an error the Reducer raises in a hook or callback) unwinds through here as it
  // does through Engine::execute: leave the engine's stacks as they were before this task.
  struct TaskGuard {
    AutogradEngine& engine;
    const std::vector<int>& order;
    const std::vector<std::pair<int, int>>& saved;
    ~TaskGuard() {
      // The innermost task an error escaped from (destructors unwind innermost first).
      if (std::uncaught_exceptions() > 0 && engine.failed_task_ < 0) engine.failed_task_ = engine.running_.back();
      engine.callbacks_.pop_back();
      engine.running_.pop_back();
      for (int node : order) engine.local_index_[static_cast<size_t>(node)] = -1;
      for (auto it = saved.rbegin(); it != saved.rend(); ++it) engine.local_index_[static_cast<size_t>(it->first)] = it->second;
    }
  } guard{*this, order, saved_slots};
  std::vector<char> buffer_defined(n, 0);
  buffer_defined[0] = 1;
  std::priority_queue<ReadyEntry, std::vector<ReadyEntry>, CompareReady> ready;
  ready.push({nodes_[static_cast<size_t>(root)].sequence_nr, root});
  while (!ready.empty()) {
    const int id = ready.top().node;
    ready.pop();
    const bool defined = buffer_defined[local_of(id)] != 0;
    if (nodes_[static_cast<size_t>(id)].kind == NodeKind::Accumulate) {
      // AccumulateGrad runs its post hooks even for an undefined gradient (engine.cpp
      // call_function always calls call_post_hooks): that is where DDP's hook lives.
      if (accumulates && listener_) listener_(AccumulateEvent{nodes_[static_cast<size_t>(id)].parameter, info.id, defined});
      continue;
    }
    std::vector<bool> outputs_defined;
    const bool is_function = nodes_[static_cast<size_t>(id)].kind == NodeKind::Function;
    if (is_function) {
      auto backward_fn = nodes_[static_cast<size_t>(id)].backward;  // may append nodes: no references kept
      outputs_defined = backward_fn(*this);
      outputs_defined.resize(nodes_[static_cast<size_t>(id)].next.size(), false);
    }
    const size_t edges = nodes_[static_cast<size_t>(id)].next.size();
    for (size_t i = 0; i < edges; ++i) {
      const int target = nodes_[static_cast<size_t>(id)].next[i];
      if (target < 0) continue;
      const size_t k = local_of(target);
      const bool is_ready = --dependencies[k] == 0;
      if (!accumulates && !needed[k]) continue;
      if (is_function ? outputs_defined[i] : defined) buffer_defined[k] = 1;
      if (is_ready) ready.push({nodes_[static_cast<size_t>(target)].sequence_nr, target});
    }
  }
  // exec_post_processing: final callbacks, which may queue further callbacks.
  for (size_t i = 0; i < callbacks_.back().size(); ++i) {
    auto callback = callbacks_.back()[i];
    callback();
  }
}

void AutogradEngine::clear_graph() {
  nodes_.resize(parameter_count_);
  data_nodes_.clear();
}

void AutogradEngine::clear_tasks() {
  tasks_.clear();
  failed_task_ = -1;
}

}  // namespace hookstream
