#include <catch2/catch.hpp>

#include "sim/engine/autograd_engine.h"

using namespace hookstream;

namespace {
struct Recorder {
  std::vector<std::pair<int, int>> fired;  // (parameter, task depth)
  void attach(AutogradEngine& engine) {
    engine.set_hook_listener([this, &engine](const AccumulateEvent& e) {
      if (e.parameter >= 0) fired.emplace_back(e.parameter, engine.task(e.task).depth);
    });
  }
};
}  // namespace

TEST_CASE("accumulators fire once per graph task, after all their inputs arrived", "[autograd]") {
  AutogradEngine engine(2);
  Recorder rec;
  rec.attach(engine);
  SimTensor w = engine.parameter_leaf(0);
  SimTensor a = engine.op("use 1", {w});
  SimTensor b = engine.op("use 2", {a, w});  // the same parameter used twice
  engine.backward({b}, "outer");
  REQUIRE(rec.fired.size() == 1);
  CHECK(rec.fired[0] == std::make_pair(0, 0));
}

TEST_CASE("later-created ops run first: hooks fire in reverse use order", "[autograd]") {
  AutogradEngine engine(3);
  Recorder rec;
  rec.attach(engine);
  SimTensor x = engine.fresh_leaf("x");
  SimTensor h = engine.op("l0", {engine.parameter_leaf(0), x});
  h = engine.op("l1", {engine.parameter_leaf(1), h});
  h = engine.op("l2", {engine.parameter_leaf(2), h});
  engine.backward({h}, "outer");
  REQUIRE(rec.fired.size() == 3);
  CHECK(rec.fired[0].first == 2);
  CHECK(rec.fired[1].first == 1);
  CHECK(rec.fired[2].first == 0);
}

TEST_CASE("a nested backward is its own graph task and its callbacks run when it ends", "[autograd]") {
  AutogradEngine engine(2);
  Recorder rec;
  rec.attach(engine);
  std::vector<std::string> log;
  SimTensor x = engine.fresh_leaf("x");
  SimTensor outer_use = engine.op("outer use", {engine.parameter_leaf(0), x});
  SimTensor f = engine.function("reentrant", {outer_use}, [&](AutogradEngine& e) {
    SimTensor inner = e.op("recompute", {e.parameter_leaf(1), e.fresh_leaf("in")});
    e.queue_callback([&] { log.push_back("inner callback"); });
    e.backward({inner}, "nested");
    log.push_back("after nested");
    return std::vector<bool>{true};
  });
  engine.queue_callback([&] { log.push_back("never: no task running"); });
  engine.backward({f}, "outer");
  REQUIRE(rec.fired.size() == 2);
  CHECK(rec.fired[0] == std::make_pair(1, 1));  // nested task, depth 1
  CHECK(rec.fired[1] == std::make_pair(0, 0));
  // queue_callback inside the Function's backward (before the nested task) lands on the outer task.
  REQUIRE(log.size() == 2);
  CHECK(log[0] == "after nested");
  CHECK(log[1] == "inner callback");
}

TEST_CASE("autograd.grad executes no AccumulateGrad, undefined gradients still fire post hooks", "[autograd]") {
  AutogradEngine engine(2);
  Recorder rec;
  rec.attach(engine);
  SimTensor y = engine.op("y", {engine.parameter_leaf(0), engine.fresh_leaf("x")});
  engine.grad({y}, {engine.parameter_leaf(0)}, "grad");
  CHECK(rec.fired.empty());

  std::vector<bool> defined;
  engine.set_hook_listener([&](const AccumulateEvent& e) { defined.push_back(e.gradient_defined); });
  SimTensor f = engine.function("returns None for the weight", {engine.fresh_leaf("x"), engine.parameter_leaf(1)},
                                [](AutogradEngine&) { return std::vector<bool>{true, false}; });
  engine.backward({f}, "outer");
  REQUIRE(defined.size() == 2);
  CHECK(std::count(defined.begin(), defined.end(), false) == 1);
}

TEST_CASE("under no_grad nothing is recorded, an op without grad inputs records nothing", "[autograd]") {
  AutogradEngine engine(1);
  engine.set_grad_enabled(false);
  CHECK_FALSE(engine.op("y", {engine.parameter_leaf(0)}).requires_grad());
  engine.set_grad_enabled(true);
  CHECK_FALSE(engine.op("y", {SimTensor{}}).requires_grad());
  CHECK(engine.op("y", {engine.parameter_leaf(0)}).requires_grad());
}

TEST_CASE("shared accumulators (FSDP1 FlatParameter): one node per unit, once per graph task that reaches it", "[autograd][fsdp1]") {
  // Parameters 0 and 1 form one unit (accumulator 0), parameter 2 another (itself).
  AutogradEngine engine(3);
  engine.share_accumulators({0, 0, 2});
  Recorder rec;
  rec.attach(engine);
  SimTensor x = engine.fresh_leaf("x");
  SimTensor h = engine.op("l0", {engine.parameter_leaf(0), x});
  h = engine.op("l1", {engine.parameter_leaf(1), h});
  h = engine.op("l2", {engine.parameter_leaf(2), h});
  engine.backward({h}, "outer");
  // The unit's node runs once, after both of its parameters' gradients arrived (after l0).
  REQUIRE(rec.fired.size() == 2);
  CHECK(rec.fired[0].first == 2);
  CHECK(rec.fired[1].first == 0);

  // A nested task that reaches only parameter 1 runs the unit's node there too (the tiled MLP chunk).
  AutogradEngine nested(2);
  nested.share_accumulators({0, 0});
  Recorder rec2;
  rec2.attach(nested);
  SimTensor y = nested.fresh_leaf("y");
  SimTensor use0 = nested.op("use 0", {nested.parameter_leaf(0), y});
  SimTensor f = nested.function("Tiled", {use0}, [](AutogradEngine& e) {
    SimTensor chunk = e.op("chunk", {e.parameter_leaf(1)});
    e.backward({chunk}, "chunk 1");
    return std::vector<bool>{true};
  });
  nested.backward({f}, "outer");
  REQUIRE(rec2.fired.size() == 2);
  CHECK(rec2.fired[0] == std::make_pair(0, 1));  // in the chunk's nested task, named by the unit's node
  CHECK(rec2.fired[1] == std::make_pair(0, 0));

  // Without share_accumulators (DDP) each parameter keeps its own node.
  AutogradEngine plain(2);
  Recorder rec3;
  rec3.attach(plain);
  SimTensor z = plain.op("l1", {plain.parameter_leaf(1), plain.op("l0", {plain.parameter_leaf(0), plain.fresh_leaf("z")})});
  plain.backward({z}, "outer");
  CHECK(rec3.fired.size() == 2);
}
