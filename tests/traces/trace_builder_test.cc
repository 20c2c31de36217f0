// TraceBuilder's numbering and host issue order, on ops added the way importers add them and in
// orders they never use.
#include "traces/importers/trace_builder.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <tuple>
#include <vector>

using namespace hookstream;

namespace {

// Adds ops named by their position, each with the given (process, issue time), and returns the
// model's op names in the order finish() gave them.
std::vector<std::string> issue_order(const std::vector<std::pair<int64_t, double>>& added) {
  TraceBuilder builder("test");
  for (size_t i = 0; i < added.size(); ++i) {
    Op op;
    op.kind = OpKind::HostCompute;
    op.name = std::to_string(i);
    builder.add_op(std::move(op), added[i].first, added[i].second);
  }
  const EventModel model = builder.finish(0);
  std::vector<std::string> names;
  for (const Op& op : model.ops) names.push_back(op.name);
  return names;
}

// What finish() must give: by rank (processes in ascending id), then issue time, then the order
// the ops were added in.
std::vector<std::string> expected_order(const std::vector<std::pair<int64_t, double>>& added) {
  std::vector<size_t> positions(added.size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = i;
  std::stable_sort(positions.begin(), positions.end(), [&](size_t a, size_t b) {
    return std::tie(added[a].first, added[a].second) < std::tie(added[b].first, added[b].second);
  });
  std::vector<std::string> names;
  for (size_t p : positions) names.push_back(std::to_string(p));
  return names;
}

}  // namespace

TEST_CASE("trace builder: ops come out in host issue order, ties in the order they were added", "[traces][builder]") {
  // As the nsys importer adds them: host calls in start order, then each GPU table in its own
  // order, a kernel issued at its launching call's start (a tie the call wins by being added first).
  std::vector<std::pair<int64_t, double>> runs;
  for (int i = 0; i < 50; ++i) runs.push_back({7, 10.0 * i});      // host calls
  for (int i = 0; i < 30; ++i) runs.push_back({7, 20.0 * i});      // kernels, at their call's start
  for (int i = 0; i < 20; ++i) runs.push_back({7, 25.0 * i + 5});  // copies
  for (int i = 0; i < 10; ++i) runs.push_back({3, 1000.0 - i});    // another process, descending
  const std::vector<std::string> got = issue_order(runs);
  CHECK(got == expected_order(runs));
  CHECK(got.front() == "109");  // process 3 is rank 0; its latest-added op was issued first
  CHECK(got[10] == "0");
  CHECK(got[11] == "50");       // the kernel issued with call 0 comes right after it

  // Any order at all: many short runs, repeated issue times, three processes.
  std::mt19937 random(12345);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<std::pair<int64_t, double>> shuffled;
    const int n = 1 + static_cast<int>(random() % 2000);
    for (int i = 0; i < n; ++i) shuffled.push_back({static_cast<int64_t>(random() % 3), static_cast<double>(random() % 300)});
    INFO("trial " << trial << ", " << n << " ops");
    CHECK(issue_order(shuffled) == expected_order(shuffled));
  }
  CHECK(issue_order({}).empty());
}
