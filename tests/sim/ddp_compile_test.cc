// DDP under torch.compile (docs/ddp-compile.md): the plan keys and the rules of the Python reducer
// and of the C++ Reducer under compiled autograd. Every verdict here is also held against real
// PyTorch 2.11 DDP by tests/runtime/ddp_compile_differential_test.cc.
#include <catch2/catch.hpp>

#include "sim/inputs/input_error.h"
#include "sim/verify/verify.h"
#include "tests/sim/plan_text.h"

using namespace hookstream;

namespace {

VerifyResult verify_file(const std::string& name, std::vector<std::string> set, const std::string& torch = "") {
  LoadOptions options;
  options.set = std::move(set);
  if (!torch.empty()) options.torch_version = torch;
  return verify_plan(read_plan_source(std::string(HOOKSTREAM_SOURCE_DIR) + "/tests/plans/ddp/" + name, options));
}

VerdictKind first_kind(const VerifyResult& r) { return r.ok() ? VerdictKind::Ok : r.simulation.findings.front().kind; }

const std::vector<std::string> kPythonReducer = {"torch_compile=true", "hookstream.optimize_ddp=python_reducer"};

}  // namespace

TEST_CASE("torch_compile keys: defaults are what HF Trainer and accelerate leave (ddp_optimizer, no compiled autograd)",
          "[plan][compile]") {
  const Plan plain = test::parse("base_model: tiny-llama\n");
  CHECK_FALSE(plain.torch_compile.enabled);
  const Plan compiled = test::parse("base_model: tiny-llama\ntorch_compile: true\n");
  CHECK(compiled.torch_compile.enabled);
  CHECK(compiled.torch_compile.backend == "inductor");
  CHECK(compiled.torch_compile.optimize_ddp == OptimizeDdp::DdpOptimizer);
  CHECK_FALSE(compiled.torch_compile.compiled_autograd);
  // A backend or a mode implies torch_compile (TrainingArguments.__post_init__).
  const Plan by_mode = test::parse("base_model: tiny-llama\ntorch_compile_mode: max-autotune\n");
  CHECK(by_mode.torch_compile.enabled);
  CHECK(by_mode.torch_compile.mode == "max-autotune");
  const Plan modes = test::parse(
      "base_model: tiny-llama\ntorch_compile: true\nhookstream:\n  optimize_ddp: python_reducer\n  compiled_autograd: true\n");
  CHECK(modes.torch_compile.optimize_ddp == OptimizeDdp::PythonReducer);
  CHECK(modes.torch_compile.compiled_autograd);
  CHECK(test::parse("base_model: tiny-llama\nhookstream:\n  optimize_ddp: false\n").torch_compile.optimize_ddp ==
        OptimizeDdp::NoOptimization);
  // Read, so not listed as "not modelled" any more.
  for (const ConfigKeyNote& note : compiled.not_modelled_keys) CHECK(note.key != "torch_compile");
}

TEST_CASE("torch_compile keys: bad values are one line naming the key", "[plan][compile]") {
  CHECK(test::parse_error("base_model: tiny-llama\nhookstream:\n  optimize_ddp: python\n")
            .find("plan.yaml:3: key \"hookstream.optimize_ddp\": expected true, false, ddp_optimizer, python_reducer") == 0);
  CHECK(test::parse_error("base_model: tiny-llama\nhookstream:\n  compiled_autograd: true\n")
            .find("key \"hookstream.compiled_autograd\": is true but torch_compile is not set") != std::string::npos);
}

TEST_CASE("compiled with the C++ Reducer and no compiled autograd: DDP's eager rules", "[ddp][compile]") {
  // The Reducer's hooks are on the AccumulateGrad nodes, which run eagerly after the compiled
  // forward's backward; the oracle agrees on these plans (ddp_compile_differential_test.cc).
  for (const char* plan : {"reentrant_all_layers.yaml", "tiled_per_chunk.yaml", "rank_unused_module.yaml"}) {
    INFO(plan);
    const VerifyResult eager = verify_file(plan, {});
    const VerifyResult compiled = verify_file(plan, {"torch_compile=true"});
    CHECK(first_kind(compiled) == first_kind(eager));
    CHECK(compiled.simulation.engine == eager.simulation.engine);
  }
}

TEST_CASE("Python reducer: a hook firing twice is all-reduced twice, and the gradient is still the average",
          "[ddp][compile]") {
  // Eager DDP raises "marked as ready twice" on these; the Python reducer has no such check.
  CHECK(first_kind(verify_file("tiled_per_chunk.yaml", {})) == VerdictKind::MarkedReadyTwice);
  const VerifyResult r = verify_file("tiled_per_chunk.yaml", kPythonReducer, "2.11");
  CHECK(r.ok());
  CHECK(r.simulation.engine == "DDP (Python reducer)");
  CHECK(first_kind(verify_file("reentrant_all_layers.yaml", kPythonReducer)) == VerdictKind::Ok);
}

TEST_CASE("Python reducer: a module unused on one rank is a collective mismatch", "[ddp][compile]") {
  const VerifyResult r = verify_file("rank_unused_module.yaml", kPythonReducer);
  REQUIRE_FALSE(r.ok());
  CHECK(r.simulation.findings.front().kind == VerdictKind::CollectiveMismatch);
  CHECK(r.simulation.findings.front().error_text.find("all_reduce model.layers.") != std::string::npos);
}

TEST_CASE("Python reducer: a module used only in a no_sync micro-step keeps its local gradient", "[ddp][compile]") {
  // The C++ Reducer waits for the module's bucket instead (find_unused_parameters is off).
  CHECK(first_kind(verify_file("no_sync_only_module.yaml", {}, "2.11")) == VerdictKind::UnfinishedReduction);
  const VerifyResult r = verify_file("no_sync_only_module.yaml", kPythonReducer, "2.11");
  REQUIRE_FALSE(r.ok());
  const Finding& f = r.simulation.findings.front();
  CHECK(f.kind == VerdictKind::SilentDivergence);
  CHECK(f.parameter.rfind("model.layers.2.mlp.", 0) == 0);
  CHECK(f.micro_step == 0);
}

TEST_CASE("compiled autograd with the C++ Reducer: PyTorch's error on 2.8+, silent before. The fix is verified",
          "[ddp][compile]") {
  const std::vector<std::string> ca = {"torch_compile=true", "hookstream.compiled_autograd=true"};
  const VerifyResult r = verify_file("plain.yaml", ca, "2.11");
  REQUIRE_FALSE(r.ok());
  const Finding& f = r.simulation.findings.front();
  CHECK(f.kind == VerdictKind::EngineError);
  CHECK(f.iteration == 0);
  CHECK(f.error_text ==
        "Compiled autograd is not compatible with C++ DDP Reducer, please use "
        "torch._dynamo.config.optimize_ddp=\"python_reducer\".");
  bool python_reducer_fix = false;
  for (const VerifiedFix& fix : r.fixes) {
    for (const FixChange& c : fix.changes) python_reducer_fix |= c.key == "hookstream.optimize_ddp" && c.value == "python_reducer";
  }
  CHECK(python_reducer_fix);
  CHECK(first_kind(verify_file("plain.yaml", ca, "2.7")) == VerdictKind::SilentDivergence);
  CHECK(first_kind(verify_file("plain.yaml", {"torch_compile=true", "hookstream.compiled_autograd=true",
                                             "hookstream.optimize_ddp=python_reducer"})) == VerdictKind::Ok);
}
