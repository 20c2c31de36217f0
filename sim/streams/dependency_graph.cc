// GCC 12 reports a false -Wmaybe-uninitialized inside Boost.Graph's edge iterators (boost::optional);
// the warning points into the Boost headers, so it is silenced for this file's includes.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no such warning (and warns of the pragma)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "sim/streams/dependency_graph.h"

#include <boost/graph/exception.hpp>
#include <algorithm>
#include <iterator>

#include "sim/streams/race_checker.h"

namespace hookstream {

DependencyEdges dependency_edges(const EventModel& model) {
  RaceCheckOptions options;
  options.record_clocks = true;
  options.suggest_fixes = false;
  options.max_races = 0;
  RaceReport report = check_races(model, options);
  DependencyEdges out;
  out.op_of_vertex = std::move(report.work_ops);
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
  out.edges.reserve(2 * out.op_of_vertex.size());
  for (size_t v = 0; v < out.op_of_vertex.size(); ++v) {
    const Op& op = model.ops[out.op_of_vertex[v]];
    const int own = op.stream >= 0 ? op.stream : host_slot_of_rank.at(op.rank);
    const uint32_t* clock = report.work_clocks[v];
    for (size_t s = 0; s < slots; ++s) {
      const std::vector<int>& vertices = by_slot[s];
      const uint32_t seq = clock[s];
      if (seq == 0 || vertices.empty()) continue;
      // The latest op of that slot this one is ordered after (its own slot: the previous op).
      size_t count = std::min<size_t>(seq, vertices.size());
      // The other ranks' halves of the same collective call (same joined clock) run concurrently
      // with this one: the edge comes from the op before them.
      const auto same_call = [&](int u) {
        return op.kind == OpKind::Collective && model.ops[out.op_of_vertex[u]].kind == OpKind::Collective &&
               report.work_clocks.same(u, report.work_clocks, v);
      };
      while (count > 0 && same_call(vertices[count - 1])) --count;
      if (count > 0) out.edges.emplace_back(vertices[count - 1], static_cast<int>(v));
    }
    by_slot[own].push_back(static_cast<int>(v));
  }
  return out;
}

namespace {

// Longest path over vertices 0..n-1 given each vertex's successors (`first[u]`..`first[u + 1]` in
// `targets`, in edge insertion order). The vertices are taken in reverse DFS finishing order, the
// order boost::topological_sort gives (roots in vertex order, out-edges in insertion order), so
// ties between equally long paths resolve exactly as they do over the Boost graph.
CriticalPath longest_path(const std::vector<int>& op_of_vertex, const std::vector<size_t>& first,
                          const std::vector<int>& targets, const std::vector<double>& durations) {
  const size_t n = op_of_vertex.size();
  std::vector<int> order;  // DFS finishing order (reverse topological)
  order.reserve(n);
  {
    enum : char { White, Gray, Black };
    std::vector<char> color(n, White);
    std::vector<std::pair<int, size_t>> stack;  // (vertex, next out-edge position)
    for (size_t root = 0; root < n; ++root) {
      if (color[root] != White) continue;
      color[root] = Gray;
      stack.emplace_back(static_cast<int>(root), first[root]);
      while (!stack.empty()) {
        auto& [u, next] = stack.back();
        if (next < first[u + 1]) {
          const int v = targets[next++];
          if (color[v] == White) {
            color[v] = Gray;
            stack.emplace_back(v, first[v]);
          } else if (color[v] == Gray) {
            throw boost::not_a_dag();  // as boost::topological_sort reports a cycle
          }
          continue;
        }
        color[u] = Black;
        order.push_back(u);
        stack.pop_back();
      }
    }
  }
  std::vector<double> start(n, 0), finish(n, 0);
  std::vector<int> previous(n, -1);
  auto duration = [&](size_t v) {
    const int op = op_of_vertex[v];
    return op < static_cast<int>(durations.size()) && durations[op] > 0 ? durations[op] : 0.0;
  };
  // Longest path in topological order: a vertex starts when its latest predecessor finishes.
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const size_t u = *it;
    finish[u] = start[u] + duration(u);
    for (size_t e = first[u]; e < first[u + 1]; ++e) {
      const size_t v = targets[e];
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
  for (int v = static_cast<int>(last); v >= 0; v = previous[v]) path.ops.push_back(op_of_vertex[v]);
  std::reverse(path.ops.begin(), path.ops.end());
  return path;
}

}  // namespace

DependencyGraph build_dependency_graph(const EventModel& model) {
  DependencyEdges edges = dependency_edges(model);
  DependencyGraph dag;
  dag.graph = DependencyGraph::Graph(edges.op_of_vertex.size());
  for (const auto& [from, to] : edges.edges) boost::add_edge(from, to, dag.graph);
  dag.vertex_of_op.assign(model.ops.size(), -1);
  for (size_t v = 0; v < edges.op_of_vertex.size(); ++v) dag.vertex_of_op[edges.op_of_vertex[v]] = static_cast<int>(v);
  dag.op_of_vertex = std::move(edges.op_of_vertex);
  return dag;
}

CriticalPath critical_path(const DependencyGraph& dag, const std::vector<double>& durations) {
  const size_t n = boost::num_vertices(dag.graph);
  std::vector<size_t> first(n + 1, 0);
  std::vector<int> targets;
  for (size_t u = 0; u < n; ++u) {
    first[u] = targets.size();
    for (auto [e, end] = boost::out_edges(u, dag.graph); e != end; ++e) targets.push_back(static_cast<int>(boost::target(*e, dag.graph)));
  }
  first[n] = targets.size();
  return longest_path(dag.op_of_vertex, first, targets, durations);
}

CriticalPath critical_path(const EventModel& model, const std::vector<double>& durations) {
  return critical_path(dependency_edges(model), durations);
}

CriticalPath critical_path(const DependencyEdges& edges, const std::vector<double>& durations) {
  // Successor lists in edge insertion order (a counting sort by source keeps it).
  const size_t n = edges.op_of_vertex.size();
  std::vector<size_t> first(n + 1, 0);
  for (const auto& edge : edges.edges) ++first[edge.first + 1];
  for (size_t u = 0; u < n; ++u) first[u + 1] += first[u];
  std::vector<size_t> fill(first.begin(), first.end() - 1);
  std::vector<int> targets(edges.edges.size());
  for (const auto& [from, to] : edges.edges) targets[fill[from]++] = to;
  return longest_path(edges.op_of_vertex, first, targets, durations);
}

CriticalPath scheduled_critical_path(const EventModel& scheduled) {
  std::vector<double> durations(scheduled.ops.size(), 0);
  for (size_t i = 0; i < scheduled.ops.size(); ++i) durations[i] = std::max(0.0, scheduled.ops[i].duration_ns);
  return critical_path(scheduled, durations);
}

}  // namespace hookstream
