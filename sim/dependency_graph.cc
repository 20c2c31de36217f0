// GCC 12 reports a false -Wmaybe-uninitialized inside Boost.Graph's edge iterators (boost::optional);
// the warning points into the Boost headers, so it is silenced for this file's includes.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "sim/dependency_graph.h"

#include <boost/graph/topological_sort.hpp>
#include <algorithm>
#include <iterator>

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
  // Clock slot -> its vertices by sequence number; a work op's own slot is the one its clock ticked
  // (its stream's, or its rank's host slot). Slots span every rank: after a collective an op is
  // ordered after other ranks' ops too.
  const size_t slots = report.clock_slot_stream.size();
  std::vector<std::vector<int>> by_slot(slots);
  std::vector<int> host_slot_of_rank;
  for (size_t s = 0; s < slots; ++s) {
    if (report.clock_slot_stream[s] >= 0) continue;
    const int rank = report.clock_slot_rank[s];
    if (static_cast<int>(host_slot_of_rank.size()) <= rank) host_slot_of_rank.resize(rank + 1, -1);
    host_slot_of_rank[rank] = static_cast<int>(s);
  }
  for (size_t v = 0; v < report.work_ops.size(); ++v) {
    const Op& op = model.ops[report.work_ops[v]];
    dag.vertex_of_op[report.work_ops[v]] = static_cast<int>(v);
    const int own = op.stream >= 0 ? op.stream : host_slot_of_rank.at(op.rank);
    const VectorClock& clock = report.work_clocks[v];
    for (size_t s = 0; s < slots; ++s) {
      const std::vector<int>& vertices = by_slot[s];
      const uint32_t seq = clock[s];
      if (seq == 0 || vertices.empty()) continue;
      // The latest op of that slot this one is ordered after (its own slot: the previous op).
      size_t count = std::min<size_t>(seq, vertices.size());
      // The other ranks' halves of the same collective call (same joined clock) run concurrently
      // with this one: the edge comes from the op before them.
      const auto same_call = [&](int u) {
        return op.kind == OpKind::Collective && model.ops[report.work_ops[u]].kind == OpKind::Collective &&
               report.work_clocks[u] == clock;
      };
      while (count > 0 && same_call(vertices[count - 1])) --count;
      if (count > 0) boost::add_edge(vertices[count - 1], v, dag.graph);
    }
    by_slot[own].push_back(static_cast<int>(v));
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

CriticalPath scheduled_critical_path(const EventModel& scheduled) {
  std::vector<double> durations(scheduled.ops.size(), 0);
  for (size_t i = 0; i < scheduled.ops.size(); ++i) durations[i] = std::max(0.0, scheduled.ops[i].duration_ns);
  return critical_path(build_dependency_graph(scheduled), durations);
}

}  // namespace hookstream
