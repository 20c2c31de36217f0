// Pure expert parallelism under DDP (axolotl's ExpertParallelPlugin, expert_parallel_size = world
// size) against real DDP and real all_to_all_single of torch 2.11 over Gloo
// (oracles/expert_parallel_worker.py: the plugin's structure rebuilt on a tiny MoE of the plan's
// shape: expert shards in _ddp_params_and_buffers_to_ignore, the 1/ep post-accumulate grad hook,
// torch_dispatch.py's dispatch and combine). For every plan of tests/plans/expert_parallel: the
// simulator's verdict against what the real run gave (an error, a wrong expert gradient against a
// single-process reference, or correct), and the all-to-all count per rank against the model's.

#include <unistd.h>

#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>

#include "sim/inputs/model_structure.h"
#include "sim/sync/expert_parallel/expert_parallel.h"
#include "sim/sync/sync_simulation.h"
#include "sim/verify/moe_routing_check.h"
#include "tests/read_text.h"
#include "tests/temp_dir.h"

#undef CHECK
#include <catch2/catch.hpp>

using namespace hookstream;
namespace fs = std::filesystem;

namespace {

using hookstream::test::read_text;

// Runs the oracle worker over the cases: its output, or a failed REQUIRE showing the worker's log.
nlohmann::json run_worker(const fs::path& dir, const nlohmann::json& cases) {
  std::ofstream(dir / "cases.json") << cases.dump();
  const std::string command = fmt::format("OMP_NUM_THREADS=1 {0}/oracles/run.sh {1} {0}/oracles/expert_parallel_worker.py {2}/cases.json "
                                          "{2}/out.json > {2}/worker.log 2>&1",
                                          HOOKSTREAM_SOURCE_DIR, HOOKSTREAM_ORACLE_PYTHON, dir.string());
  const int status = std::system(command.c_str());
  INFO(read_text(dir / "worker.log").substr(0, 4000));
  REQUIRE(status == 0);
  return nlohmann::json::parse(read_text(dir / "out.json"));
}

// A gradient off the single-process reference by more than float32 noise.
constexpr double kTolerance = 1e-4;

}  // namespace

TEST_CASE("expert parallelism (pure EP under DDP): the simulator agrees with real DDP + all_to_all_single 2.11", "[differential][expert_parallel]") {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(std::string(HOOKSTREAM_SOURCE_DIR) + "/tests/plans/expert_parallel")) {
    if (entry.path().extension() == ".yaml") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() >= 3);
  hookstream::test::TempDir dir(fmt::format("expert-parallel-differential-{}", ::getpid()));
  nlohmann::json cases = nlohmann::json::array();
  std::map<std::string, SyncSimulation> predicted;
  std::map<std::string, int> expected_all_to_alls;
  for (const fs::path& file : files) {
    const Plan plan = parse_plan(read_text(file), file.string());
    REQUIRE(plan.engine.expert_parallel == plan.world_size);
    REQUIRE(gradient_sync_modelled(plan.engine));
    const ModelStructure structure = build_model_structure(plan);
    const ExpertParallelTraffic traffic = expert_parallel_traffic(plan, structure);
    const std::string name = file.stem().string();
    predicted[name] = simulate_gradient_sync(plan, structure);
    expected_all_to_alls[name] = (kForwardAllToAllsPerMoeLayer + kBackwardAllToAllsPerMoeLayer) * traffic.moe_layers *
                                 std::max(1, plan.gradient_accumulation_steps) * plan.iterations;
    const Parameter& down = structure.parameters[size_t(structure.layers.at(0).down.weight)];
    cases.push_back({{"name", name}, {"engine", "ddp"}, {"ep", plan.engine.expert_parallel}, {"dp_shard", 1},
                     {"grad_accum", std::max(1, plan.gradient_accumulation_steps)}, {"steps", plan.iterations},
                     {"kernel", "grouped"}, {"idle_ranks", nlohmann::json::array()},
                     {"hidden", plan.model.hidden_size}, {"expert_intermediate", down.shape.at(2)},
                     {"experts", traffic.experts}, {"top_k", traffic.top_k}, {"moe_layers", traffic.moe_layers},
                     {"tokens", traffic.tokens}});
  }
  const nlohmann::json out = run_worker(dir.path(), cases);
  int agree = 0, wrong = 0;
  for (const auto& [name, sim] : predicted) {
    const nlohmann::json& result = out.at(name);
    INFO(name << ": " << result.dump().substr(0, 2000));
    REQUIRE(result["outcome"] == "ok");  // no plan here errs or hangs on the real engine
    bool expert_wrong = false;
    for (const auto& [rank, r] : result["ranks"].items()) {
      CHECK(r["dense_error"].get<double>() < kTolerance);  // DDP's all-reduce of the dense weights is right
      CHECK(r["a2a_calls"].get<int>() == expected_all_to_alls[name]);
      const bool off = r["expert_error"].get<double>() > kTolerance;
      expert_wrong = expert_wrong || off;
      // What is wrong is exactly the per-backward scaling the simulator names.
      if (off) CHECK(r["expert_error_if_scale_per_backward"].get<double>() < kTolerance);
    }
    const VerdictKind observed = expert_wrong ? VerdictKind::WrongGradient : VerdictKind::Ok;
    const VerdictKind first = sim.findings.empty() ? VerdictKind::Ok : sim.findings.front().kind;
    CHECK(std::string(to_string(first)) == to_string(observed));
    if (first == observed) ++agree;
    if (observed == VerdictKind::WrongGradient) ++wrong;
    // the real DDP ignored exactly the expert shards (2 per MoE layer)
    CHECK(result["ddp_ignored"].size() == size_t(2 * cases[0]["moe_layers"].get<int>()));
  }
  CHECK(agree == int(predicted.size()));
  CHECK(wrong >= 1);  // the plans include gradient accumulation, where the hook misweights
  WARN(fmt::format("expert parallel differential: {}/{} plans agree ({} with wrong expert gradients)", agree, predicted.size(), wrong));
}

TEST_CASE("expert parallelism beside dp_shard under real fully_shard: right gradients, and not modelled by the simulator", "[differential][expert_parallel]") {
  // axolotl's expert_parallel_qwen3_30ba3b_ep_fsdp_fft_4gpu.yaml shape on the tiny model: ep 2 x
  // dp_shard 2. hookstream's FSDP2 model has one mesh for every unit, fully_shard_experts puts the
  // experts on another: engine_not_modelled, with the reason. What the real engine does (measured
  // here so a future model has its reference): the gradients equal the single-process mean with
  // one micro-step and with accumulation (the scale hook runs once per reduce-scatter).
  const std::string model = std::string(HOOKSTREAM_SOURCE_DIR) + "/tests/plans/models/tiny-qwen3-moe.json";
  const Plan plan = parse_plan("base_model: " + model + "\nsequence_len: 6\nmicro_batch_size: 1\nexpert_parallel_size: 2\n"
                               "dp_shard_size: 2\nfsdp_version: 2\nfsdp_config:\n  transformer_layer_cls_to_wrap: Qwen3MoeDecoderLayer\n",
                               "plan.yaml");
  CHECK(plan.world_size == 4);
  CHECK_FALSE(gradient_sync_modelled(plan.engine));
  hookstream::test::TempDir dir(fmt::format("expert-parallel-fsdp2-{}", ::getpid()));
  nlohmann::json cases = nlohmann::json::array();
  for (int ga : {1, 2}) {
    cases.push_back({{"name", fmt::format("fsdp2_ep2_dp2_ga{}", ga)}, {"engine", "fsdp2"}, {"ep", 2}, {"dp_shard", 2},
                     {"grad_accum", ga}, {"steps", 1}, {"kernel", "grouped"}, {"idle_ranks", nlohmann::json::array()}});
  }
  const nlohmann::json out = run_worker(dir.path(), cases);
  for (const auto& [name, result] : out.items()) {
    INFO(name << ": " << result.dump().substr(0, 2000));
    CHECK(result["outcome"] == "ok");
    CHECK(result["ranks"].size() == 4);
    for (const auto& [rank, r] : result["ranks"].items()) {
      CHECK(r["dense_error"].get<double>() < kTolerance);
      CHECK(r["expert_error"].get<double>() < kTolerance);
    }
  }
}
