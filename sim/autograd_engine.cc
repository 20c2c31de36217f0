#include "sim/autograd_engine.h"

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

SimTensor AutogradEngine::function(const std::string& label, const std::vector<SimTensor>& inputs,
                                   std::function<std::vector<bool>(AutogradEngine&)> backward) {
  if (!grad_enabled_) return SimTensor{};
  bool any = false;
  for (const auto& t : inputs) any = any || t.requires_grad();
  if (!any) return SimTensor{};
  GradNode node;
  node.kind = backward ? NodeKind::Function : NodeKind::Op;
  node.sequence_nr = next_sequence_nr_++;
  node.label = label;
  node.next.reserve(inputs.size());
  for (const auto& t : inputs) node.next.push_back(t.grad_fn);
  node.backward = std::move(backward);
  return SimTensor{add_node(std::move(node))};
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

void AutogradEngine::backward(const std::vector<SimTensor>& roots, const std::string& label) {
  std::vector<int> root_nodes;
  for (const auto& r : roots) {
    if (r.grad_fn >= 0) root_nodes.push_back(r.grad_fn);
  }
  if (root_nodes.empty()) return;
  int root = root_nodes.front();
  if (root_nodes.size() > 1) {
    // Engine::execute adds a GraphRoot when there is more than one root edge.
    GradNode graph_root;
    graph_root.kind = NodeKind::Root;
    graph_root.sequence_nr = kAccumulateSequenceNr;
    graph_root.label = "GraphRoot";
    graph_root.next = root_nodes;
    root = add_node(std::move(graph_root));
  }
  run_task(root, {}, label, true);
}

void AutogradEngine::grad(const std::vector<SimTensor>& roots, const std::vector<SimTensor>& inputs,
                          const std::string& label) {
  std::vector<int> root_nodes;
  for (const auto& r : roots) {
    if (r.grad_fn >= 0) root_nodes.push_back(r.grad_fn);
  }
  if (root_nodes.empty()) return;
  int root = root_nodes.front();
  if (root_nodes.size() > 1) {
    GradNode graph_root;
    graph_root.kind = NodeKind::Root;
    graph_root.sequence_nr = kAccumulateSequenceNr;
    graph_root.next = root_nodes;
    root = add_node(std::move(graph_root));
  }
  std::vector<int> captures;
  for (const auto& t : inputs) {
    if (t.grad_fn >= 0) captures.push_back(t.grad_fn);
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

  // compute_dependencies: count incoming edges of every node reachable from the root.
  const size_t n = nodes_.size();
  std::vector<int> dependencies(n, 0);
  std::vector<char> seen(n, 0);
  std::vector<int> order;  // reachable nodes, for the grad() needed-marking below
  std::vector<int> stack{root};
  seen[static_cast<size_t>(root)] = 1;
  while (!stack.empty()) {
    const int id = stack.back();
    stack.pop_back();
    order.push_back(id);
    for (int next : nodes_[static_cast<size_t>(id)].next) {
      if (next < 0) continue;
      ++dependencies[static_cast<size_t>(next)];
      if (!seen[static_cast<size_t>(next)]) {
        seen[static_cast<size_t>(next)] = 1;
        stack.push_back(next);
      }
    }
  }

  // GraphTask::init_to_execute for torch.autograd.grad: only nodes on a path to a captured input
  // execute; the captured AccumulateGrad nodes themselves do not.
  std::vector<char> needed;
  if (!accumulates) {
    needed.assign(n, 0);
    std::vector<char> leads(n, 0);
    for (int c : capture_targets) leads[static_cast<size_t>(c)] = 1;
    // Reverse topological fixpoint over the reachable subgraph (small graphs: iterate to stability).
    bool changed = true;
    while (changed) {
      changed = false;
      for (auto it = order.rbegin(); it != order.rend(); ++it) {
        const int id = *it;
        if (leads[static_cast<size_t>(id)]) continue;
        for (int next : nodes_[static_cast<size_t>(id)].next) {
          if (next >= 0 && leads[static_cast<size_t>(next)]) {
            leads[static_cast<size_t>(id)] = 1;
            changed = true;
            break;
          }
        }
      }
    }
    for (int id : order) {
      const bool is_capture = nodes_[static_cast<size_t>(id)].kind == NodeKind::Accumulate;
      needed[static_cast<size_t>(id)] = leads[static_cast<size_t>(id)] && !is_capture;
    }
  }

  running_.push_back(info.id);
  callbacks_.emplace_back();
  std::vector<char> buffer_defined(n, 0);
  buffer_defined[static_cast<size_t>(root)] = 1;
  std::priority_queue<ReadyEntry, std::vector<ReadyEntry>, CompareReady> ready;
  ready.push({nodes_[static_cast<size_t>(root)].sequence_nr, root});
  while (!ready.empty()) {
    const int id = ready.top().node;
    ready.pop();
    const bool defined = buffer_defined[static_cast<size_t>(id)] != 0;
    if (nodes_[static_cast<size_t>(id)].kind == NodeKind::Accumulate) {
      // AccumulateGrad runs its post hooks even for an undefined gradient (engine.cpp
      // call_function always calls call_post_hooks): that is where DDP's hook lives.
      if (accumulates && listener_) listener_(AccumulateEvent{nodes_[static_cast<size_t>(id)].parameter, info.id, defined});
      continue;
    }
    const std::vector<int> next = nodes_[static_cast<size_t>(id)].next;  // copy: backward may add nodes
    std::vector<bool> outputs_defined(next.size(), defined);
    if (nodes_[static_cast<size_t>(id)].kind == NodeKind::Function) {
      auto backward_fn = nodes_[static_cast<size_t>(id)].backward;
      outputs_defined = backward_fn(*this);
      outputs_defined.resize(next.size(), false);
    }
    for (size_t i = 0; i < next.size(); ++i) {
      const int target = next[i];
      if (target < 0) continue;
      if (static_cast<size_t>(target) >= dependencies.size()) continue;
      const bool is_ready = --dependencies[static_cast<size_t>(target)] == 0;
      if (!accumulates && !needed[static_cast<size_t>(target)]) continue;
      if (outputs_defined[i]) buffer_defined[static_cast<size_t>(target)] = 1;
      if (is_ready) ready.push({nodes_[static_cast<size_t>(target)].sequence_nr, target});
    }
  }
  // exec_post_processing: final callbacks, which may queue further callbacks.
  for (size_t i = 0; i < callbacks_.back().size(); ++i) {
    auto callback = callbacks_.back()[i];
    callback();
  }
  callbacks_.pop_back();
  running_.pop_back();
}

void AutogradEngine::clear_graph() {
  nodes_.resize(parameter_count_);
  tasks_.clear();
}

}  // namespace hookstream
