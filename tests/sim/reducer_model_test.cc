#include <catch2/catch.hpp>

#include "sim/sync/ddp/reducer_model.h"

using namespace hookstream;

namespace {
std::vector<ReducerParameter> params(std::initializer_list<int64_t> bytes) {
  std::vector<ReducerParameter> out;
  int i = 0;
  for (int64_t b : bytes) out.push_back({"p" + std::to_string(i++), b, 0});
  return out;
}
}  // namespace

TEST_CASE("bucket assignment closes a bucket once it reaches the limit and sorts by smallest index", "[reducer]") {
  const auto a = compute_bucket_assignment_by_size(params({4, 4, 4, 4, 4}), {8});
  REQUIRE(a.buckets.size() == 3);
  CHECK(a.buckets[0] == std::vector<int>{0, 1});
  CHECK(a.buckets[1] == std::vector<int>{2, 3});
  CHECK(a.buckets[2] == std::vector<int>{4});
  // The first limit applies to the first bucket only.
  const auto b = compute_bucket_assignment_by_size(params({4, 4, 4, 4, 4}), {4, 100});
  REQUIRE(b.buckets.size() == 2);
  CHECK(b.buckets[0] == std::vector<int>{0});
  CHECK(b.buckets[1] == std::vector<int>{1, 2, 3, 4});
  // A given order (gradient-ready order) is kept, not sorted.
  const auto c = compute_bucket_assignment_by_size(params({4, 4, 4}), {4}, {2, 0, 1});
  CHECK(c.buckets[0] == std::vector<int>{2});
  CHECK(c.buckets[1] == std::vector<int>{0});
}

TEST_CASE("initial buckets are reversed: the last parameters go first", "[reducer]") {
  ReducerOptions options;
  options.find_unused_parameters = true;
  options.first_bucket_bytes_cap = 8;
  options.bucket_bytes_cap = 8;
  ReducerModel reducer(params({4, 4, 4, 4}), options);
  REQUIRE(reducer.buckets().buckets.size() == 2);
  CHECK(reducer.buckets().buckets[0] == std::vector<int>{2, 3});
}

TEST_CASE("a second mark in one iteration raises the Reducer's error naming the parameter", "[reducer]") {
  // 1.13's default run names the index only; 2.11 adds the name (docs/ddp-versions.md).
  const bool old = GENERATE(true, false);
  const std::string expected = old ? "Parameter at index 1 has been marked as ready twice"
                                   : "Parameter at index 1 with name p1 has been marked as ready twice";
  ReducerOptions options;
  options.version = old ? TorchVersion{1, 13} : TorchVersion{2, 11};
  ReducerModel reducer(params({4, 4}), options);
  int finalized = 0;
  std::vector<std::function<void()>> queued;
  reducer.set_queue_callback([&](std::function<void()> cb) { queued.push_back(std::move(cb)); });
  reducer.set_observer({nullptr, [&] { ++finalized; }});
  reducer.prepare_for_forward();
  reducer.rebuild_buckets(std::nullopt);
  reducer.prepare_for_backward(nullptr);
  reducer.autograd_hook(1);
  try {
    reducer.autograd_hook(1);
    FAIL("expected an error");
  } catch (const ReducerError& e) {
    CHECK(e.kind() == VerdictKind::MarkedReadyTwice);
    CHECK(e.ddp_index() == 1);
    CHECK(std::string(e.what()).find(expected) != std::string::npos);
  }
  CHECK(queued.empty());
}

TEST_CASE("finalize is queued when the last bucket launches, hooks after it are ignored", "[reducer]") {
  ReducerModel reducer(params({4, 4}), ReducerOptions{});
  std::vector<std::function<void()>> queued;
  reducer.set_queue_callback([&](std::function<void()> cb) { queued.push_back(std::move(cb)); });
  reducer.prepare_for_forward();
  reducer.rebuild_buckets(std::nullopt);
  reducer.prepare_for_backward(nullptr);
  reducer.autograd_hook(1);
  reducer.autograd_hook(0);
  REQUIRE(queued.size() == 1);
  queued[0]();
  CHECK_FALSE(reducer.expect_autograd_hooks());
  CHECK_FALSE(reducer.require_finalize());
  reducer.autograd_hook(0);  // ignored, no error
  CHECK(reducer.collectives().size() == 1);
}

TEST_CASE("an unfinished iteration raises at the next forward", "[reducer]") {
  ReducerModel reducer(params({4, 4}), ReducerOptions{});
  reducer.set_queue_callback([](std::function<void()>) {});
  reducer.prepare_for_forward();
  reducer.rebuild_buckets(std::nullopt);
  reducer.prepare_for_backward(nullptr);
  reducer.autograd_hook(1);
  reducer.prepare_for_forward();
  CHECK_THROWS_AS(reducer.rebuild_buckets(std::nullopt), ReducerError);
  CHECK(reducer.unmarked_parameters() == std::vector<int>{0});
}

TEST_CASE("static graph counts firings in the first iteration and marks on the last firing after", "[reducer]") {
  ReducerOptions options;
  options.static_graph = true;
  ReducerModel reducer(params({4}), options);
  std::vector<std::function<void()>> queued;
  reducer.set_queue_callback([&](std::function<void()> cb) { queued.push_back(std::move(cb)); });
  reducer.prepare_for_forward();
  reducer.rebuild_buckets(std::nullopt);
  reducer.prepare_for_backward(nullptr);
  reducer.autograd_hook(0);
  reducer.autograd_hook(0);  // counted, no error
  reducer.delay_all_reduce();
  CHECK_FALSE(reducer.require_finalize());
  reducer.prepare_for_forward();
  reducer.rebuild_buckets(std::nullopt);
  reducer.prepare_for_backward(nullptr);
  reducer.autograd_hook(0);
  CHECK(queued.empty());  // one firing left
  reducer.autograd_hook(0);
  CHECK(queued.size() == 1);
  queued[0]();
  reducer.prepare_for_forward();
  reducer.rebuild_buckets(std::nullopt);
  reducer.prepare_for_backward(nullptr);
  reducer.autograd_hook(0);
  reducer.autograd_hook(0);
  try {
    reducer.autograd_hook(0);
    FAIL("expected static graph error");
  } catch (const ReducerError& e) {
    CHECK(e.kind() == VerdictKind::StaticGraphChanged);
  }
}

TEST_CASE("find_unused marks unreachable parameters at the first hook", "[reducer]") {
  ReducerOptions options;
  options.find_unused_parameters = true;
  ReducerModel reducer(params({4, 4}), options);
  std::vector<std::function<void()>> queued;
  reducer.set_queue_callback([&](std::function<void()> cb) { queued.push_back(std::move(cb)); });
  reducer.prepare_for_forward();
  reducer.rebuild_buckets(std::nullopt);
  std::vector<bool> reachable{true, false};
  reducer.prepare_for_backward(&reachable);
  reducer.autograd_hook(0);
  CHECK(queued.size() == 1);
  // A nested backward that now fires the unused one raises.
  CHECK_THROWS_AS(reducer.autograd_hook(1), ReducerError);
}
