// Fixes in the user's own words, end to end: verify's JSON gives each fix as a patch to the plan
// file, `patch` applies it, --write-fixed writes the same file, and that file verifies clean.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>

#include "tests/cli/run_binary.h"
#include "tests/temp_dir.h"

namespace {
namespace fs = std::filesystem;
using hookstream::testing::run_command;

std::string read(const fs::path& path) {
  std::ifstream file(path);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

std::string in(const fs::path& dir, const std::string& args) {
  return "cd '" + dir.string() + "' && " + std::string(HOOKSTREAM_BINARY) + " " + args;
}
}  // namespace

TEST_CASE("verify prints each fix as a patch to the plan file, and --write-fixed writes it", "[cli][patch]") {
  hookstream::test::TempDir dir("hookstream-fix-patch-" + std::to_string(getpid()));
  const std::string original = read(std::string(HOOKSTREAM_SOURCE_DIR) + "/plans/default.yaml");
  std::ofstream(dir / "plan.yaml") << original;
  const auto json = run_command(in(dir, "verify plan.yaml --format json"));
  REQUIRE(json.exit_code == 1);
  const auto report = nlohmann::json::parse(json.out);
  REQUIRE(report["fixes"].size() >= 2);
  const nlohmann::json& fix = report["fixes"][1];
  const std::string patch = fix["patch"];
  CHECK(patch.rfind("--- plan.yaml\n+++ plan.yaml\n@@ ", 0) == 0);
  CHECK(fix["code_changes"].size() >= 1);  // a tiled-MLP backward strategy is training code

  // `patch` applies it to a copy; --write-fixed --fix 2 writes the same text.
  fs::create_directories(dir / "patched");
  std::ofstream(dir / "patched/plan.yaml") << original;
  std::ofstream(dir / "fix.diff") << patch;
  const auto applied = run_command("cd '" + (dir / "patched").string() + "' && patch -p0 < ../fix.diff");
  INFO(applied.out);
  REQUIRE(applied.exit_code == 0);
  const auto written = run_command(in(dir, "verify plan.yaml --write-fixed fixed.yaml --fix 2"));
  CHECK(written.exit_code == 1);
  CHECK(read(dir / "fixed.yaml") == read(dir / "patched/plan.yaml"));
  CHECK(read(dir / "plan.yaml") == original);
  // Only the fix's lines differ, and the fixed plan passes.
  CHECK(run_command(in(dir, "verify fixed.yaml")).exit_code == 0);

  // The text report shows the same diff lines.
  const auto text = run_command(in(dir, "verify plan.yaml --no-colour"));
  CHECK(text.out.find("       --- plan.yaml\n       +++ plan.yaml\n") != std::string::npos);
  CHECK(text.out.find("unslothai/unsloth PR #4077") != std::string::npos);

  // A fix number out of range is bad input and writes nothing; a passing plan writes nothing.
  const auto bad = run_command(in(dir, "verify plan.yaml --write-fixed other.yaml --fix 99"));
  CHECK(bad.exit_code == 2);
  CHECK(bad.out.rfind("hookstream: error: --fix: expected a fix number in [1, ", 0) == 0);
  CHECK_FALSE(fs::exists(dir / "other.yaml"));
  const auto clean = run_command(in(dir, "verify fixed.yaml --write-fixed again.yaml"));
  CHECK(clean.exit_code == 0);
  CHECK_FALSE(fs::exists(dir / "again.yaml"));
}
