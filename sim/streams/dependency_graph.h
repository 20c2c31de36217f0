// The happens-before DAG of a step: one vertex per work op (kernel, copy, collective, free, host
// work), an edge u -> v when v's vector clock says u happens before it (the latest op of each other
// stream it is ordered after, and the previous op of its own stream). With per-op durations from the
// caller (the time model, or a trace), the critical path says which chain of ops bounds the step.
#pragma once

#include <boost/graph/adjacency_list.hpp>
#include <utility>
#include <vector>

#include "sim/events/event_model.h"

namespace hookstream {

struct DependencyGraph {
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;
  Graph graph;
  std::vector<int> op_of_vertex;  // vertex -> index into EventModel::ops
  std::vector<int> vertex_of_op;  // op -> vertex, -1 for sync ops (they take no time here)
};

DependencyGraph build_dependency_graph(const EventModel& model);

// The same DAG as plain arrays: work ops by vertex, and the edges in the order they were found
// (that order decides ties between equally long paths, so every consumer sees it). It depends on
// the ops' order and ordering ops only, not on their times: a caller may build it while another
// thread schedules the same model (sim/cost/time_model.h schedule_times).
struct DependencyEdges {
  std::vector<int> op_of_vertex;
  std::vector<std::pair<int, int>> edges;  // (from vertex, to vertex), in insertion order
};
DependencyEdges dependency_edges(const EventModel& model);

struct CriticalPath {
  std::vector<int> ops;  // op indices, first to last
  double length = 0;     // sum of their durations
};

// `durations[i]` is op i's duration (any unit; ops not in the graph are ignored). Topological order
// + longest path.
CriticalPath critical_path(const DependencyGraph& graph, const std::vector<double>& durations);
// The same path for the DAG of `model` without building the Boost graph (plain arrays, one DFS):
// what a caller that needs only the path uses on long traces. Throws what build_dependency_graph
// throws.
CriticalPath critical_path(const EventModel& model, const std::vector<double>& durations);
// The same from edges built earlier (dependency_edges of the model the durations are for).
CriticalPath critical_path(const DependencyEdges& edges, const std::vector<double>& durations);

// The critical path of a scheduled step (Schedule::model from schedule_step): each op's duration is
// the one the time model gave it. With one rank and no host launch cost its length is the step
// time: the scheduler starts every op as soon as its happens-before predecessors are done.
CriticalPath scheduled_critical_path(const EventModel& scheduled);

}  // namespace hookstream
