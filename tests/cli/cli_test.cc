// Runs the real hookstream binary: exit codes, one-line errors, JSON shape, no partial output.
#include <catch2/catch.hpp>

#include "tests/cli/run_binary.h"

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

namespace {
using Run = hookstream::testing::BinaryRun;
Run run(const std::string& args) { return hookstream::testing::run_binary(args); }
std::string src(const std::string& relative) { return std::string(HOOKSTREAM_SOURCE_DIR) + "/" + relative; }
std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("hookstream-cli-test-" + name)).string();
}
int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }
}  // namespace

TEST_CASE("verify exits 1 on the bundled default and 0 on a clean plan", "[cli]") {
  const Run failing = run("verify " + src("plans/default.yaml"));
  CHECK(failing.exit_code == 1);
  CHECK(failing.out.find("marked_ready_twice") != std::string::npos);
  CHECK(failing.out.find("grad_then_backward") != std::string::npos);
  CHECK(failing.out.find("\033[") == std::string::npos);  // no colour when not a terminal
  const Run clean = run("verify " + src("plans/default.yaml") + " --set hookstream.tiled_mlp_backward=grad_then_backward");
  CHECK(clean.exit_code == 0);
  CHECK(clean.out.find("OK") != std::string::npos);
}

TEST_CASE("verify --format json follows the documented schema", "[cli]") {
  const Run r = run("verify " + src("plans/default.yaml") + " --format json");
  REQUIRE(r.exit_code == 1);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["schema"] == "hookstream.verify/2");
  CHECK(j["ok"] == false);
  CHECK(j["checks"]["ddp"] == false);
  CHECK(j["checks"]["streams"] == true);
  CHECK(j["checks"]["memory"] == true);
  CHECK(j["predicted"]["peak_device_bytes"] == j["memory"]["peak"]["bytes"]);
  REQUIRE(j["findings"].size() >= 1);
  const auto& f = j["findings"][0];
  CHECK(f["verdict"] == "marked_ready_twice");
  CHECK(f["parameter"]["name"].get<std::string>().find("lora_B") != std::string::npos);
  CHECK(f["ranks"].size() == 8);
  REQUIRE(j["fixes"].size() >= 1);
  CHECK(j["fixes"][0]["verified"] == true);
  CHECK(j["fixes"][0]["check"] == "ddp");
}

TEST_CASE("bad input: one line naming file and key, exit 2, no output file", "[cli]") {
  const std::string output = temp_path("out.json");
  std::filesystem::remove(output);
  const Run missing = run("verify /nonexistent/plan.yaml -o " + output);
  CHECK(missing.exit_code == 2);
  CHECK(lines(missing.out) == 1);
  CHECK(missing.out.find("/nonexistent/plan.yaml") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(output));

  const std::string bad = temp_path("bad.yaml");
  std::ofstream(bad) << "base_model: tiny-llama\nsequence_len: 8\ngradient_checkpointng: true\n";
  const Run unknown = run("verify " + bad + " -o " + output);
  CHECK(unknown.exit_code == 2);
  CHECK(lines(unknown.out) == 1);
  CHECK(unknown.out.find(":3") != std::string::npos);
  CHECK(unknown.out.find("gradient_checkpointing") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(output));

  std::ofstream(bad) << "base_model: tiny-llama\nsequence_len: [1\n";
  const Run malformed = run("verify " + bad);
  CHECK(malformed.exit_code == 2);
  CHECK(lines(malformed.out) == 1);

  const Run impossible = run("verify " + src("plans/default.yaml") + " --world-size 0");
  CHECK(impossible.exit_code == 2);
  CHECK(lines(impossible.out) == 1);

  const Run bad_set = run("verify " + src("plans/default.yaml") + " --set hookstream.statc_graph=true");
  CHECK(bad_set.exit_code == 2);
  CHECK(bad_set.out.find("static_graph") != std::string::npos);
  std::filesystem::remove(bad);
}

TEST_CASE("verify --torch-version: the modelled PyTorch, one line and exit 2 outside 1.13 or 2.0-2.11", "[cli]") {
  const std::string plan = src("tests/plans/ddp/no_sync_only_module_find_unused.yaml");
  // A module used only inside no_sync(): 1.13 leaves its gradient local, 2.11 reduces it.
  const Run old = run("verify " + plan + " --torch-version 1.13.1 --no-colour");
  CHECK(old.exit_code == 1);
  CHECK(old.out.find("silent_divergence") != std::string::npos);
  CHECK(old.out.find("DDP of PyTorch 1.13") != std::string::npos);
  const Run now = run("verify " + plan + " --no-colour");
  CHECK(now.exit_code == 0);
  CHECK(now.out.find("DDP of PyTorch 2.11") != std::string::npos);
  for (const std::string bad : {"2.12", "1.12", "nightly"}) {
    const Run r = run("verify " + plan + " --torch-version " + bad);
    CHECK(r.exit_code == 2);
    CHECK(lines(r.out) == 1);
    CHECK(r.out.find("--torch-version") != std::string::npos);
    CHECK(r.out.find("1.13 or 2.0 to 2.11") != std::string::npos);
  }
}

TEST_CASE("the output option writes the report atomically", "[cli]") {
  const std::string output = temp_path("report.json");
  std::filesystem::remove(output);
  const Run r = run("verify " + src("tests/plans/ddp/plain.yaml") + " --format json -o " + output);
  CHECK(r.exit_code == 0);
  CHECK(r.out.empty());
  std::ifstream in(output);
  const auto j = nlohmann::json::parse(in);
  CHECK(j["ok"] == true);
  std::filesystem::remove(output);
}
