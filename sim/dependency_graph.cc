// GCC 12 reports a false -Wmaybe-uninitialized inside Boost.Graph's edge iterators (boost::optional);
// the warning points into the Boost headers, so it is silenced for this file's includes.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "sim/dependency_graph.h"

#include <boost/graph/topological_sort.hpp>
#include <algorithm>
#include <iterator>
#include <map>

#include "sim/race_checker.h"

namespace hookstream {

DependencyGraph build_dependency_graph(const EventModel& model) {
  RaceCheckOptions options;
  options.record_clocks = true;
  options.suggest_fixes = false;
  options.max_races = 0;
  const RaceReport report = check_races(model, options);
  DependencyGraph dag;
  dag.graph = DependencyGraph::Graph(report.work_ops.size());
  dag.op_of_vertex = report.work_ops;
  dag.vertex_of_op.assign(model.ops.size(), -1);
  // (rank, slot) -> vertices by sequence number; a work op's own slot is the one its clock ticked.
  std::map<std::pair<int, int>, std::vector<int>> by_slot;
  std::vector<int> stream_slot(model.streams.size());
  std::vector<int> slots_used;
  for (size_t s = 0; s < model.streams.size(); ++s) {
    const int rank = model.streams[s].rank;
    if (static_cast<int>(slots_used.size()) <= rank) slots_used.resize(rank + 1, 0);
    stream_slot[s] = slots_used[rank]++;
  }
  for (size_t v = 0; v < report.work_ops.size(); ++v) {
    const Op& op = model.ops[report.work_ops[v]];
    dag.vertex_of_op[report.work_ops[v]] = static_cast<int>(v);
    const int rank = op.rank;
    const int slot = op.stream >= 0 ? stream_slot[op.stream] : (rank < static_cast<int>(slots_used.size()) ? slots_used[rank] : 0);
    const VectorClock& clock = report.work_clocks[v];
    for (const auto& [key, vertices] : by_slot) {
      if (key.first != rank) continue;
      const uint32_t seq = clock[key.second];
      if (seq == 0) continue;
      // The latest op of that slot this one is ordered after (its own slot: the previous op).
      const size_t count = std::min<size_t>(seq, vertices.size());
      if (count > 0) boost::add_edge(vertices[count - 1], v, dag.graph);
    }
    by_slot[{rank, slot}].push_back(static_cast<int>(v));
  }
  return dag;
}

CriticalPath critical_path(const DependencyGraph& dag, const std::vector<double>& durations) {
  const size_t n = boost::num_vertices(dag.graph);
  std::vector<DependencyGraph::Graph::vertex_descriptor> order;
  order.reserve(n);
  boost::topological_sort(dag.graph, std::back_inserter(order));  // reverse topological order
  std::vector<double> start(n, 0), finish(n, 0);
  std::vector<int> previous(n, -1);
  auto duration = [&](size_t v) {
    const int op = dag.op_of_vertex[v];
    return op < static_cast<int>(durations.size()) && durations[op] > 0 ? durations[op] : 0.0;
  };
  // Longest path in topological order: a vertex starts when its latest predecessor finishes.
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const size_t u = *it;
    finish[u] = start[u] + duration(u);
    for (auto [e, end] = boost::out_edges(u, dag.graph); e != end; ++e) {
      const size_t v = boost::target(*e, dag.graph);
      if (previous[v] < 0 || finish[u] > start[v]) {
        start[v] = std::max(start[v], finish[u]);
        previous[v] = static_cast<int>(u);
      }
    }
  }
  CriticalPath path;
  if (n == 0) return path;
  size_t last = 0;
  for (size_t v = 1; v < n; ++v) if (finish[v] > finish[last]) last = v;
  path.length = finish[last];
  for (int v = static_cast<int>(last); v >= 0; v = previous[v]) path.ops.push_back(dag.op_of_vertex[v]);
  std::reverse(path.ops.begin(), path.ops.end());
  return path;
}

}  // namespace hookstream
