// `hookstream replay` on one step: --plan and --calibrate, the calibration file loaded back by
// `hookstream plan` / `hookstream simulate` with --set hookstream.calibration=FILE, --what-if,
// --timeline, --step, and bad input (exit 2, one line, no output file).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "sim/cost/device_spec.h"
#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"
#include "sim/cost/step_prediction.h"
#include "tests/cli/run_binary.h"
#include "tests/temp_dir.h"
#include "tests/traces/runtime_trace_fixture.h"

namespace {

using hookstream::testing::run_binary;

const char* kPlan =
    "base_model: Llama-3.1-8B\nsequence_len: 4096\nmicro_batch_size: 1\nadapter: lora\nlora_r: 16\n"
    "lora_target_linear: true\ngradient_checkpointing: true\nactivation_offloading: true\n"
    "ddp_find_unused_parameters: false\nhookstream:\n  world_size: 2\n  offload_protocol: single_buffer\n";

// The plan and a Kineto trace of its step as `hookstream run --trace` records it, in a scratch
// directory removed when the Files go.
struct Files {
  hookstream::test::TempDir dir;
  std::string plan, trace;

  explicit Files(const std::string& name)
      : dir("hookstream-replay-step-test-" + std::to_string(getpid()) + "-" + name),
        plan((dir / "plan.yaml").string()), trace((dir / "trace.json").string()) {
    std::ofstream(plan) << kPlan;
    const hookstream::Plan parsed = hookstream::parse_plan(kPlan, plan);
    const hookstream::StepPrediction prediction = hookstream::predict_step(
        parsed, hookstream::build_model_structure(parsed), hookstream::find_device_spec(parsed.gpu));
    std::ofstream(trace) << hookstream::test::make_runtime_trace(prediction.schedule.model).json;
  }
};

double input_step_ns(const std::string& args) {
  const auto r = run_binary("plan " + args + " --format json");
  REQUIRE(r.exit_code == 0);
  return nlohmann::json::parse(r.out)["input"]["step_ns"].get<double>();
}

}  // namespace

TEST_CASE("replay --plan --calibrate writes a calibration that plan and simulate load", "[cli][replay]") {
  const Files f("calibrate");
  const std::string calibration = (f.dir / "calibration.json").string();
  const auto r = run_binary("replay " + f.trace + " --plan " + f.plan + " --calibrate " + calibration + " --format json");
  REQUIRE(r.exit_code == 0);
  const auto report = nlohmann::json::parse(r.out);
  const auto& comparison = report["step"]["plan"];
  CHECK(comparison["recorded_only_groups"] == 0);
  CHECK(comparison["simulated_only_groups"] == 0);
  const double measured = comparison["measured_step_ns"];
  REQUIRE(std::filesystem::exists(calibration));
  const auto file = nlohmann::json::parse(std::ifstream(calibration));
  CHECK(file["schema"] == "hookstream.calibration/1");

  // Round trip: the simulator loads the file through the plan key and its prediction moves from the
  // estimate to the measurement (the replayed step keeps host time the simulator does not model).
  const double estimated = input_step_ns(f.plan);
  const double calibrated = input_step_ns(f.plan + " --set hookstream.calibration=" + calibration);
  CHECK(calibrated != estimated);
  CHECK(std::abs(calibrated - measured) < std::abs(estimated - measured));
  const auto simulate = run_binary("simulate " + f.plan + " --set hookstream.calibration=" + calibration);
  CHECK((simulate.exit_code == 0 || simulate.exit_code == 1));
  // A calibration file that is not one is refused by the simulator with the file named.
  const std::string bad = (f.dir / "bad-calibration.json").string();
  std::ofstream(bad) << "{\"entries\": [{\"ns\": -1}]}";
  const auto refused = run_binary("plan " + f.plan + " --set hookstream.calibration=" + bad);
  CHECK(refused.exit_code == 2);
  CHECK(refused.out.find(bad) != std::string::npos);
}

TEST_CASE("replay --what-if, --timeline and --step on an annotated trace", "[cli][replay]") {
  const Files f("what-if");
  const std::string timeline = (f.dir / "timeline.json").string();
  const auto r = run_binary("replay " + f.trace + " --step 0 --what-if second_reload_buffer --what-if remove_host_sync "
                            "--timeline " + timeline);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("Step hookstream:step:0:") != std::string::npos);
  CHECK(r.out.find("Critical path of the replayed step") != std::string::npos);
  CHECK(r.out.find("Races between annotated buffer accesses: 0 over") != std::string::npos);
  CHECK(r.out.find("second_reload_buffer: ") != std::string::npos);
  CHECK(r.out.find("second_reload_buffer + remove_host_sync: ") != std::string::npos);
  REQUIRE(std::filesystem::exists(timeline));
  const auto trace = nlohmann::json::parse(std::ifstream(timeline));
  CHECK((trace.is_object() || trace.is_array()));
}

TEST_CASE("replay step options: bad input exits 2 with one line and no output", "[cli][replay]") {
  const Files f("bad");
  const std::string out = (f.dir / "out.txt").string();
  const std::string calibration = (f.dir / "c.json").string();
  for (const std::string& args : {f.trace + " --calibrate " + calibration + " -o " + out,
                                  f.trace + " --what-if more_gpus -o " + out,
                                  f.trace + " --what-if bucket_cap_mb=0 -o " + out,
                                  f.trace + " --step 9 -o " + out,
                                  f.trace + " --plan /nonexistent/plan.yaml --calibrate " + calibration + " -o " + out}) {
    INFO(args);
    const auto r = run_binary("replay " + args);
    CHECK(r.exit_code == 2);
    CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 1);
    CHECK_FALSE(std::filesystem::exists(out));
    CHECK_FALSE(std::filesystem::exists(calibration));
  }
}
