// The fuzz targets (fuzz/fuzz_targets.h) in the ordinary build: every input the fuzzers once
// failed on (fuzz/regressions/TARGET/, kept after the fix), the committed seeds (fuzz/corpus/), and
// the real traces, each with several settings of the target's first byte. A target reports when
// the code under test threw something other than InputError or, for kineto_scan, when the
// single-threaded, small-block and parallel small-chunk scans disagree.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <vector>

#include "fuzz/fuzz_targets.h"
#include "tests/traces/trace_test_files.h"

namespace hookstream::test {
namespace {

using Target = std::string (*)(const uint8_t*, size_t, const std::string&);

std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string run(Target target, const std::string& input, const std::string& dir) {
  return target(reinterpret_cast<const uint8_t*>(input.data()), input.size(), dir);
}

// Every file with `extension` (any: "") in the folder `relative` of the source tree, sorted
// (deterministic order).
std::vector<std::filesystem::path> files_in(const std::string& relative, const std::string& extension = "") {
  std::vector<std::filesystem::path> files;
  const std::filesystem::path root = std::filesystem::path(HOOKSTREAM_SOURCE_DIR) / relative;
  if (std::filesystem::is_directory(root))
    for (const auto& entry : std::filesystem::directory_iterator(root))
      if (entry.is_regular_file() && entry.path().filename() != "README.md" &&
          (extension.empty() || entry.path().extension() == extension))
        files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

// Every file under fuzz/DIR/TARGET.
std::vector<std::filesystem::path> inputs(const std::string& dir, const std::string& target) {
  return files_in("fuzz/" + dir + "/" + target);
}

// A target's seeds, as fuzz/run.sh copies them: the committed ones, and for plan and model_config
// the project's own plans and model configs.
std::vector<std::filesystem::path> seed_files(const std::string& target) {
  std::vector<std::filesystem::path> files = inputs("corpus", target);
  const auto add = [&files](const std::string& relative, const std::string& extension) {
    const auto more = files_in(relative, extension);
    files.insert(files.end(), more.begin(), more.end());
  };
  if (target == "plan") {
    for (const char* folder : {"plans", "bench/plans", "tests/plans/ddp"}) add(folder, ".yaml");
  } else if (target == "model_config") {
    for (const char* folder : {"presets", "tests/plans/models"}) add(folder, ".json");
  }
  return files;
}

const std::map<std::string, Target> kTargets = {
    {"kineto_scan", &fuzz::kineto_scan}, {"replay", &fuzz::replay},         {"nsys_sql", &fuzz::nsys_sql},
    {"plan", &fuzz::plan},               {"model_config", &fuzz::model_config}, {"calibration", &fuzz::calibration}};

}  // namespace

TEST_CASE("fuzz regressions and seeds: every committed input passes its target", "[fuzz]") {
  const TempDir dir = temp_dir("fuzz-regressions");
  size_t seen = 0;
  for (const auto& [name, target] : kTargets) {
    std::vector<std::filesystem::path> files = inputs("regressions", name);
    const std::vector<std::filesystem::path> seeds = seed_files(name);
    files.insert(files.end(), seeds.begin(), seeds.end());
    for (const auto& file : files) {
      INFO(name << " " << file.string());
      CHECK(run(target, read_all(file), dir.string()) == "");
      ++seen;
    }
  }
  // Every target has seeds: an empty glob (a moved directory) must not pass.
  for (const auto& [name, target] : kTargets) {
    INFO("seeds of " << name);
    CHECK_FALSE(seed_files(name).empty());
  }
  CHECK(seen > 0);
}

TEST_CASE("fuzz target kineto_scan: the real Kineto traces read the same in every way, chunks of 8 to 132 bytes",
          "[fuzz]") {
  const TempDir dir = temp_dir("fuzz-kineto-scan");
  // a100 rank 3 is left out: 35 MB cut into ~100-byte chunks is ~10^6 chunks.
  for (const char* trace : {"kineto/event-sync.json.gz", "kineto/event-sync-multistream.json.gz",
                            "kineto/alexnet-a100-syncevents.json.gz"}) {
    const std::string gz = read_all(shared_trace(trace));
    const std::string json = inflate_all(shared_trace(trace));
    REQUIRE(json.size() > 1000);
    for (const uint8_t knob : {0x00, 0x2b, 0x7d, 0xff}) {  // chunks of 8, 28, 68 and 132 bytes; blocks of 1 to 8
      INFO(trace << " knob " << int(knob));
      CHECK(run(&fuzz::kineto_scan, std::string(1, char(knob)) + json, dir.string()) == "");
      CHECK(run(&fuzz::kineto_scan, std::string(1, char(knob)) + gz, dir.string()) == "");
    }
  }
}

TEST_CASE("fuzz targets: input the importers reject (the CLI's exit 2) is not a report", "[fuzz]") {
  const TempDir dir = temp_dir("fuzz-rejected");
  // Truncated JSON with no newline to cut at: every reader must give the same one error.
  CHECK(run(&fuzz::kineto_scan, std::string("\x00", 1) + R"({"traceEvents": [{"ph": "X", "cat": "kernel"},)",
            dir.string()) == "");
  CHECK(run(&fuzz::replay, std::string("\x03", 1) + "not a trace", dir.string()) == "");
  // SQL that does not run is skipped; an empty database is an export with no tables (exit 2).
  CHECK(run(&fuzz::nsys_sql, std::string("\x00", 1) + "CREATE TABLE x(", dir.string()) == "");
  CHECK(run(&fuzz::nsys_sql, std::string("\x00", 1) + "CREATE TABLE x(a)", dir.string()) == "");
  // A plan, model config or calibration file the loaders refuse (exit 2).
  CHECK(run(&fuzz::plan, "base_model: no-such-model\n", dir.string()) == "");
  CHECK(run(&fuzz::plan, "sequence_len: [", dir.string()) == "");
  CHECK(run(&fuzz::model_config, "{\"hidden_size\": 4", dir.string()) == "");
  CHECK(run(&fuzz::calibration, R"({"entries": [{"kind": "kernal", "ns": 1}]})", dir.string()) == "");
}

TEST_CASE("fuzz target replay: the real traces, one and two ranks, with and without what-ifs and a plan", "[fuzz]") {
  const TempDir dir = temp_dir("fuzz-replay");
  for (const char* trace : {"nsys/fuser-report1-nsys2024.6.sqlite", "nsys/cloverleaf-nsys2024.5.sqlite",
                            "kineto/event-sync-multistream.json.gz", "kineto/alexnet-a100-syncevents.json.gz"}) {
    const std::string bytes = read_all(shared_trace(trace));
    // 4 and 7: with plans/tiny-run.yaml, whose comparison with a trace hookstream did not record
    // matches op classes only; its calibration must still load.
    for (const uint8_t knob : {0, 1, 2, 3, 4, 7}) {
      INFO(trace << " knob " << int(knob));
      CHECK(run(&fuzz::replay, std::string(1, char(knob)) + bytes, dir.string()) == "");
    }
  }
}

}  // namespace hookstream::test
