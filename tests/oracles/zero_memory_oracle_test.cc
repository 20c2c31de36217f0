// The memory model's ZeRO model states against DeepSpeed 0.19.8's own estimates
// (estimate_zero2_model_states_mem_needs in deepspeed/runtime/zero/stage_1_and_2.py,
// estimate_zero3_model_states_mem_needs in stage3.py), run from the oracle venv by
// oracles/zero_memory_estimates.py on the same HF configs, with the model's parameter count and
// largest module taken from transformers on the meta device (not from hookstream).
#include <cstdlib>
#include <unistd.h>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "sim/cost/engine_cost.h"
#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"
#include "tests/read_text.h"
#include "tests/temp_dir.h"

#include <catch2/catch.hpp>

using namespace hookstream;
namespace fs = std::filesystem;
using hookstream::test::read_text;

namespace {

struct Case {
  std::string model;  // a preset (presets/NAME.json is its HF config)
  int stage;
  int gpus;
  bool offload_optimizer;
  bool offload_param;
};

Plan zero_plan(const Case& c) {
  // No prefetch, no persistent parameters and no reuse distance (a released module is not kept for
  // its next use, which the estimate does not model): the estimate's "largest layer" is the one
  // fetched module, and every parameter is partitioned.
  std::string yaml = fmt::format("base_model: {}\nsequence_len: 2048\ndeepspeed:\n  zero_optimization:\n    stage: {}\n", c.model, c.stage);
  // One optimizer sub-group (sub_group_size above every partition): the estimate counts the whole
  // fp32 gradient partition, step() makes it one sub-group at a time.
  if (c.stage == 3) {
    yaml += "    stage3_prefetch_bucket_size: 0\n    stage3_param_persistence_threshold: 0\n    stage3_max_reuse_distance: 0\n"
            "    sub_group_size: 1e12\n";
  }
  if (c.offload_optimizer) yaml += "    offload_optimizer:\n      device: cpu\n";
  if (c.offload_param) yaml += "    offload_param:\n      device: cpu\n";
  yaml += fmt::format("hookstream:\n  world_size: {}\n", c.gpus);
  return parse_plan(yaml, "zero-memory.yaml");
}

}  // namespace

TEST_CASE("ZeRO-2 and ZeRO-3 model states equal DeepSpeed's estimate functions", "[oracle][zero][memory]") {
  const std::vector<Case> cases = {
      {"Llama-3.1-8B", 2, 8, false, false}, {"Llama-3.1-8B", 2, 4, true, false}, {"Llama-3.1-8B", 3, 8, false, false},
      {"Llama-3.1-8B", 3, 4, true, false},  {"Llama-3.1-8B", 3, 4, true, true},  {"Qwen2.5-7B", 2, 2, false, false},
      {"Qwen2.5-7B", 3, 16, false, false},  {"tiny-llama", 3, 4, true, true},    {"tiny-llama", 2, 3, false, false},
  };
  hookstream::test::TempDir dir(fmt::format("zero-memory-oracle-{}", ::getpid()));
  nlohmann::json input = nlohmann::json::array();
  for (const Case& c : cases) {
    input.push_back({{"config", fmt::format("{}/presets/{}.json", HOOKSTREAM_SOURCE_DIR, c.model)},
                     {"stage", c.stage},
                     {"gpus", c.gpus},
                     {"offload_optimizer", c.offload_optimizer},
                     {"offload_param", c.offload_param}});
  }
  std::ofstream(dir / "cases.json") << input.dump();
  const std::string command = fmt::format("{}/oracles/run.sh {} {}/oracles/zero_memory_estimates.py {} {} > {} 2>&1", HOOKSTREAM_SOURCE_DIR,
                                          HOOKSTREAM_ORACLE_PYTHON, HOOKSTREAM_SOURCE_DIR, (dir / "cases.json").string(),
                                          (dir / "out.json").string(), (dir / "err.log").string());
  const int status = std::system(command.c_str());
  INFO(read_text(dir / "err.log").substr(0, 4000));
  REQUIRE(status == 0);
  const nlohmann::json out = nlohmann::json::parse(read_text(dir / "out.json"));
  REQUIRE(out.size() == cases.size());

  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const Plan plan = zero_plan(c);
    const ModelStructure structure = build_model_structure(plan);
    const EngineCostSettings settings = engine_cost_settings(plan);
    REQUIRE(settings.sharded);
    // Unrounded: the estimate counts elements, not allocator blocks.
    const EngineMemory m = engine_memory(plan, structure, settings, false);
    int64_t gpu = m.unsharded_peak + m.step_bytes, host = 0, parameters = 0, total = 0;
    for (const auto& [category, bytes] : m.device) gpu += bytes;
    for (int64_t bytes : m.grads_by_layer) gpu += bytes;
    for (const auto& [category, bytes] : m.host) host += bytes;
    // DeepSpeed's stage-3 estimate (18 P / N: 16-bit parameters, fp32 master, states, fp32
    // gradients) leaves out the gradient_accumulation_dtype partition buffer that stage3.py
    // allocates once (grad_partitions_flat_buffer: 2 P / N more, on the GPU, or pinned on the host
    // with offload_optimizer), which hookstream counts; every other tensor must agree.
    if (c.stage == 3) (c.offload_optimizer ? host : gpu) -= m.parts.at("bit16_gradient_partition");
    for (const Parameter& p : structure.parameters) {
      ++parameters;
      total += p.numel();
    }
    const nlohmann::json& ds = out[i];
    INFO(c.model << " stage " << c.stage << " on " << c.gpus << " GPUs, offload_optimizer " << c.offload_optimizer << ", offload_param "
                 << c.offload_param << "\nDeepSpeed: " << ds.dump() << "\nhookstream: gpu " << gpu << ", host " << host);
    // The same model: transformers' parameter count is hookstream's.
    CHECK(total == ds["total_params"].get<int64_t>());
    // Partitions are ceil(numel / N) per parameter (stage3.py _partition_param) where the estimate
    // divides the total: at most one element of each of 18 bytes per parameter apart; int() rounding: 1.
    const int64_t slack = 18 * parameters + 1;
    CHECK(std::llabs(gpu - ds["gpu_mem"].get<int64_t>()) <= slack);
    // The host side: with offload, the estimate's cpu_mem is per node, max(4 N, 16) x P for stage 2
    // (4 N P is every process loading the fp32 model, which happens before training; 16 P when N <= 4)
    // and 16 P / 18 P for stage 3 with zero_init. Without offload it is load-time memory only.
    if (c.offload_optimizer && (c.stage == 3 || 4 * c.gpus <= 16)) {
      CHECK(std::llabs(host * c.gpus - ds["cpu_mem"].get<int64_t>()) <= slack * c.gpus);
    }
  }
}
