// Device profiles (devices/profiles/, sim/cost/device_profile.h) and the kernel costs the time model
// takes from them (sim/cost/profiled_costs.h): bad files name their line, lookups return the
// readings at measured shapes and interpolate between them, every kernel op of a Llama LoRA step is
// costed, and the bundled H100 profile predicts the step times measured on an H100 on 2026-11-25
// (bench/gpu-results/2026-11-25-h100-issue22) within 10%.
#include "sim/cost/device_profile.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "sim/cost/profiled_costs.h"
#include "sim/cost/step_prediction.h"
#include "sim/inputs/input_error.h"
#include "sim/inputs/model_structure.h"
#include "sim/streams/stream_expansion.h"
#include "sim/streams/stream_protocol.h"

using namespace hookstream;

namespace {

const std::string kProfile =
    "device: X\n"
    "gemm:\n"
    "  - [1024, 4096, 4096, fwd, 500]\n"
    "  - [4096, 4096, 4096, fwd, 700]\n"
    "  - [1024, 4096, 4096, dgrad, 500]\n"
    "  - [1024, 4096, 4096, wgrad, 500]\n"
    "  - [1024, 16, 4096, fwd, 5]\n"
    "sdpa:\n"
    "  - [1024, 32, 8, 128, 100, 100]\n"
    "  - [4096, 32, 8, 128, 400, 300]\n"
    "elementwise:\n"
    "  rmsnorm: [0.01, 0.02]\n  rope: [0.01, 0.01]\n  silu_mul: [0.003, 0.006]\n  residual: [0.002, 0.002]\n"
    "  lora_scale_add: [0.003, 0.003]\n  cross_entropy: [0.009, 0.009]\n  embedding: [0.002, 0.02]\n"
    "copies: {d2d_gbps_read_plus_write: 3000}\n"
    "adamw_ns_per_parameter: 0.011\n";

DeviceSpec spec() {
  DeviceSpec device;
  device.name = "X";
  device.matrix_tflops = 1000;
  device.hbm_gbps = 3000;
  return device;
}

double measured_seconds(const std::string& file) {
  std::ifstream in(std::string(HOOKSTREAM_SOURCE_DIR) + "/bench/gpu-results/2026-11-25-h100-issue22/" + file);
  REQUIRE(in);
  return nlohmann::json::parse(in)["measured"]["step_seconds"].get<double>();
}

}  // namespace

TEST_CASE("a device profile reads back its readings and interpolates between them", "[time]") {
  const DeviceProfile profile = parse_device_profile(kProfile, "x.yaml");
  const DeviceSpec device = spec();
  // At a measured shape: the measured time, 2mnk / rate.
  CHECK(profile.gemm_ns(1024, 4096, 4096, GemmForm::Forward, device) == Approx(2.0 * 1024 * 4096 * 4096 / 500e12 * 1e9));
  CHECK(profile.gemm_ns(4096, 4096, 4096, GemmForm::Forward, device) == Approx(2.0 * 4096 * 4096 * 4096 / 700e12 * 1e9));
  // Between two token counts: between the two rates; past the last: the last rate.
  const double between = 2.0 * 2048 * 4096 * 4096 / profile.gemm_ns(2048, 4096, 4096, GemmForm::Forward, device) / 1e3;
  CHECK(between > 500);
  CHECK(between < 700);
  CHECK(profile.gemm_ns(65536, 4096, 4096, GemmForm::Forward, device) == Approx(16 * profile.gemm_ns(4096, 4096, 4096, GemmForm::Forward, device)));
  // A LoRA rank-16 GEMM takes its own (thin) reading, not the square one's.
  CHECK(profile.gemm_ns(1024, 16, 4096, GemmForm::Forward, device) == Approx(2.0 * 1024 * 16 * 4096 / 5e12 * 1e9));
  // Attention: causal flops over the rate of the nearest layout; 4x the tokens at 4x the rate = 4x the time.
  const double at_1k = profile.sdpa_ns(1024, 1, 32, 8, 128, false);
  CHECK(at_1k == Approx(4.0 * 1024 * 1024 * 32 * 128 / 2 / 100e12 * 1e9));
  CHECK(profile.sdpa_ns(4096, 1, 32, 8, 128, false) == Approx(at_1k * 4));
  CHECK(profile.sdpa_ns(4096, 2, 32, 8, 128, true) == Approx(2 * 2.5 * 4.0 * 4096 * 4096 * 32 * 128 / 2 / 300e12 * 1e9));
  CHECK(profile.elementwise_ns("silu_mul", 1e6, true) == Approx(6000));
}

TEST_CASE("a bad device profile is an InputError naming file, line and key", "[time]") {
  std::string row = kProfile;
  row.replace(row.find("[1024, 16, 4096, fwd, 5]"), 24, "[1024, 16, 4096, fwd]");
  CHECK_THROWS_WITH(parse_device_profile(row, "p.yaml"), Catch::StartsWith("p.yaml:7: key gemm: expected a row"));
  std::string form = kProfile;
  form.replace(form.find("fwd, 5]"), 3, "bwd");
  CHECK_THROWS_WITH(parse_device_profile(form, "p.yaml"), Catch::StartsWith("p.yaml:7: key gemm: expected fwd, dgrad or wgrad"));
  std::string negative = kProfile;
  negative.replace(negative.find("rope: [0.01"), 11, "rope: [-1");
  CHECK_THROWS_WITH(parse_device_profile(negative, "p.yaml"), Catch::StartsWith("p.yaml:13: key elementwise.rope"));
  std::string missing = kProfile;
  missing.replace(missing.find("  embedding: [0.002, 0.02]\n"), 27, "");
  CHECK_THROWS_WITH(parse_device_profile(missing, "p.yaml"), Catch::Contains("missing key elementwise.embedding"));
  CHECK_THROWS_WITH(parse_device_profile(kProfile + "gemm_efficiency: 1\n", "p.yaml"), Catch::StartsWith("p.yaml:21: unknown key gemm_efficiency"));
}

TEST_CASE("the H100 profile costs every kernel op of a Llama LoRA step and predicts the measured H100 steps within 10%", "[time]") {
  const DeviceSpec h100 = find_device_spec("H100");
  REQUIRE(h100.profile);
  CHECK(h100.profile->device == "H100-SXM");
  const std::string plans = std::string(HOOKSTREAM_SOURCE_DIR) + "/bench/plans/";
  // (plan, --set flags, measured run): the 8K comparison and the long-context ladder of 2026-11-25.
  struct Row {
    std::string plan;
    std::vector<std::string> set;
    std::string measured;
  };
  const std::vector<Row> rows = {
      {"llama8b-lora-8k-none.yaml", {}, "call3/run-none.json"},
      {"llama8b-lora-8k-checkpoint.yaml", {}, "call3/run-checkpoint.json"},
      {"llama8b-lora-8k-offload_double.yaml", {}, "call3/run-offload_double.json"},
      {"llama8b-lora-long.yaml",
       {"sequence_len=16384", "chunked_cross_entropy_num_chunks=16", "gradient_checkpointing=false", "activation_offloading=false",
        "tiled_mlp=true", "tiled_mlp_num_shards=8", "hookstream.tiled_mlp_backward=grad_then_backward"},
       "call3/long-16384.json"},
      {"llama8b-lora-long.yaml", {"sequence_len=32768", "chunked_cross_entropy_num_chunks=32"}, "call3/long-32768.json"},
      {"llama8b-lora-long.yaml", {"sequence_len=131072", "chunked_cross_entropy_num_chunks=128"}, "call3/long-131072.json"},
  };
  for (const Row& row : rows) {
    LoadOptions options;
    options.set = row.set;
    const Plan plan = load_plan(plans + row.plan, options);
    const ModelStructure structure = build_model_structure(plan);
    // Every kernel op the expansion emits for this text-only model has a profiled cost.
    const StreamProtocol protocol = load_stream_protocol(plan.activation_offloading ? plan.offload_protocol_name() : "none", plans);
    EventModel step = expand_step(plan, structure, protocol);
    const ProfiledCosts costed = apply_device_profile(step, plan, structure, h100, *h100.profile);
    CHECK(costed.roofline == 0);
    CHECK(costed.costed > 32 * 6);
    const double predicted = predict_step(plan, structure, h100).schedule.step_ns * 1e-9;
    const double measured = measured_seconds(row.measured);
    INFO(row.plan << " " << row.measured << ": predicted " << predicted << " s, measured " << measured << " s");
    CHECK(std::abs(predicted / measured - 1) < 0.10);
  }
}
