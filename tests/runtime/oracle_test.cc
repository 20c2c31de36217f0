// The real-DDP oracle against c10d's Reducer (LibTorch, Gloo, 2 ranks on 127.0.0.1): the
// behaviours docs/ddp-reducer-model.md describes, observed.

#include <sstream>

#include "runtime/oracle.h"
#include "sim/inputs/plan.h"

// Last: glog (pulled in by LibTorch) defines its own CHECK, which Catch's must replace.
#undef CHECK
#include <catch2/catch.hpp>

namespace hookstream {
namespace {

ModelConfig tiny_model() {
  ModelConfig m;
  m.source = "test:tiny";
  m.model_type = "llama";
  m.architecture = "LlamaForCausalLM";
  m.hidden_size = 16;
  m.intermediate_size = 32;
  m.num_hidden_layers = 2;
  m.num_attention_heads = 2;
  m.num_key_value_heads = 1;
  m.head_dim = 8;
  m.vocab_size = 64;
  m.torch_dtype = DType::Float32;
  return m;
}

Plan tiny_plan() {
  Plan plan;
  plan.source = "oracle_test";
  plan.base_model = "tiny";
  plan.model = tiny_model();
  plan.sequence_len = 8;
  plan.micro_batch_size = 2;
  plan.world_size = 2;
  plan.iterations = 2;
  plan.ddp_find_unused_parameters = false;
  return plan;
}

OracleOptions oracle_options() {
  OracleOptions o;
  o.worker_path = HOOKSTREAM_ORACLE_WORKER;
  o.timeout = std::chrono::seconds(40);
  o.collective_timeout = std::chrono::seconds(3);
  return o;
}

std::string describe(const OracleResult& result) {
  std::ostringstream out;
  for (const Finding& f : result.findings) {
    out << to_string(f.kind) << " rank " << f.rank << " iteration " << f.iteration << " " << to_string(f.phase)
        << " index " << f.ddp_index << " " << f.parameter << " tasks [";
    for (const auto& t : f.graph_tasks) out << t << ";";
    out << "] " << f.error_text.substr(0, 300) << "\n";
  }
  for (const auto& e : result.unclassified_errors) out << "unclassified: " << e << "\n";
  for (const auto& r : result.ranks) {
    if (!r.has_report) out << "rank " << r.rank << " no report: " << r.log_tail << "\n";
  }
  return out.str();
}

bool all_iterations_agree(const OracleResult& result) {
  for (const auto& it : result.iterations) {
    if (!it.compared) return false;
    for (size_t p = 0; p < it.equal_to_reference.size(); ++p) {
      if (!it.equal_across_ranks[p] || !it.equal_to_reference[p]) return false;
    }
  }
  return !result.iterations.empty();
}

TEST_CASE("oracle: plain DDP agrees with the reference average", "[runtime][oracle]") {
  const OracleResult result = run_oracle(tiny_plan(), oracle_options());
  INFO(describe(result));
  CHECK(result.ok());
  CHECK(all_iterations_agree(result));
  // Every trainable parameter fired exactly once per iteration, in the outer graph task.
  for (const auto& rank : result.ranks) {
    REQUIRE(rank.has_report);
    for (const auto& it : rank.report.iterations) {
      CHECK(it.firings.size() == rank.report.ddp_parameter_names.size());
      for (const auto& f : it.firings) CHECK(f.graph_task == "outer");
    }
  }
}

TEST_CASE("oracle: reentrant checkpoint with find_unused_parameters marks a parameter ready twice",
          "[runtime][oracle]") {
  Plan plan = tiny_plan();
  plan.gradient_checkpointing = true;
  plan.use_reentrant = true;
  plan.ddp_find_unused_parameters = true;
  // TORCH_DISTRIBUTED_DEBUG=INFO: DDP hands the Reducer the parameter names, and its text names them.
  OracleOptions options = oracle_options();
  options.distributed_debug = "INFO";
  const OracleResult result = run_oracle(plan, options);
  INFO(describe(result));
  REQUIRE(result.findings.size() == 2);
  for (const Finding& f : result.findings) {
    CHECK(f.kind == VerdictKind::MarkedReadyTwice);
    CHECK(f.iteration == 0);
    CHECK(f.phase == Phase::Backward);
    // The last layer's recomputation runs first; down_proj's accumulator is the first it reaches.
    CHECK(f.parameter == "model.layers.1.mlp.down_proj.weight");
    CHECK(f.ddp_index == 16);
    CHECK(f.graph_tasks == std::vector<std::string>{"checkpoint(layer 1)"});
    CHECK(f.error_text.find("Parameter at index 16 with name model.layers.1.mlp.down_proj.weight has been "
                            "marked as ready twice") != std::string::npos);
  }
}

TEST_CASE("oracle: non-reentrant checkpoint with find_unused_parameters is fine", "[runtime][oracle]") {
  Plan plan = tiny_plan();
  plan.gradient_checkpointing = true;
  plan.use_reentrant = false;
  plan.ddp_find_unused_parameters = true;
  const OracleResult result = run_oracle(plan, oracle_options());
  INFO(describe(result));
  CHECK(result.ok());
  CHECK(all_iterations_agree(result));
}

TEST_CASE("oracle: an unused module without find_unused_parameters leaves the reduction unfinished",
          "[runtime][oracle]") {
  Plan plan = tiny_plan();
  plan.unused_modules = {"model.layers.1.mlp"};
  const OracleResult result = run_oracle(plan, oracle_options());
  INFO(describe(result));
  REQUIRE(result.findings.size() == 2);
  for (const Finding& f : result.findings) {
    CHECK(f.kind == VerdictKind::UnfinishedReduction);
    CHECK(f.iteration == 1);
    CHECK(f.phase == Phase::Forward);
    CHECK(f.parameter == "model.layers.1.mlp.gate_proj.weight");
    CHECK(f.error_text.find("Expected to have finished reduction in the prior iteration") != std::string::npos);
  }
}

TEST_CASE("oracle: static graph tolerates reentrant checkpoint with find_unused_parameters", "[runtime][oracle]") {
  Plan plan = tiny_plan();
  plan.gradient_checkpointing = true;
  plan.use_reentrant = true;
  plan.ddp_find_unused_parameters = true;
  plan.static_graph = true;
  plan.iterations = 3;
  const OracleResult result = run_oracle(plan, oracle_options());
  INFO(describe(result));
  CHECK(result.ok());
  CHECK(all_iterations_agree(result));
}

TEST_CASE("oracle: tiled MLP backward per chunk vs grad-then-backward", "[runtime][oracle]") {
  Plan plan = tiny_plan();
  plan.tiled_mlp = true;
  plan.tiled_mlp_num_shards = 2;

  SECTION("backward per chunk fires the MLP weights' hooks once per chunk") {
    plan.tiled_mlp_backward = TiledBackward::BackwardPerChunk;
    const OracleResult result = run_oracle(plan, oracle_options());
    INFO(describe(result));
    REQUIRE(result.findings.size() == 2);
    for (const Finding& f : result.findings) {
      CHECK(f.kind == VerdictKind::MarkedReadyTwice);
      CHECK(f.iteration == 0);
      CHECK(f.parameter == "model.layers.1.mlp.down_proj.weight");
      const std::vector<std::string> chunks = {"tiled_mlp chunk 0 (layer 1)", "tiled_mlp chunk 1 (layer 1)"};
      CHECK(f.graph_tasks == chunks);
    }
  }
  SECTION("grad for all chunks but the last, then backward, is fine") {
    plan.tiled_mlp_backward = TiledBackward::GradThenBackward;
    const OracleResult result = run_oracle(plan, oracle_options());
    INFO(describe(result));
    CHECK(result.ok());
    CHECK(all_iterations_agree(result));
  }
}

}  // namespace
}  // namespace hookstream
