// `hookstream run` end to end on the CPU: real processes, 2 ranks over Gloo, the real Reducer.
// Built only with LibTorch (HOOKSTREAM_CLI_HAS_RUN). Kept tiny: CI has 2 cores.
#ifdef HOOKSTREAM_CLI_HAS_RUN

#include <algorithm>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "tests/cli/run_binary.h"
#include "tests/read_text.h"
#include "tests/temp_dir.h"

namespace fs = std::filesystem;
using hookstream::test::read_text;
using hookstream::testing::run_binary;
using hookstream::testing::run_command;

namespace {

const std::string kSource = HOOKSTREAM_SOURCE_DIR;
const std::string kTinyRun = kSource + "/plans/tiny-run.yaml";
const std::string kDefault = kSource + "/plans/default.yaml";
const std::string kTinyModel = kSource + "/presets/tiny-llama.json";

// A per-process scratch directory (ctest runs tests in parallel), removed when the test ends.
hookstream::test::TempDir scratch(const std::string& name) {
  return hookstream::test::TempDir("hookstream-run-test-" + std::to_string(getpid()) + "-" + name);
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

int count_lines(const std::string& text) {
  int lines = 0;
  for (char c : text) lines += c == '\n';
  return lines;
}

bool has_temporary_files(const fs::path& dir) {
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.find(".tmp-hookstream") != std::string::npos || name.find(".partial") != std::string::npos) return true;
  }
  return false;
}

// The default plan (Qwen3-VL LoRA, reentrant offloaded checkpointing, per-chunk tiled backward) on
// the tiny Llama config, short sequences, 2 ranks.
const std::string kDefaultTiny = kDefault + " --model " + kTinyModel + " --nproc 2 --set sequence_len=32 --device cpu";

}  // namespace

TEST_CASE("run trains the bundled tiny plan on 2 CPU ranks and the loss falls", "[cli][run]") {
  const auto dir = scratch("tiny");
  const auto r = run_binary("run " + kTinyRun + " --steps 8 --device cpu --trace " + (dir / "trace.json").string() +
                            " --json " + (dir / "summary.json").string());
  INFO(r.out);
  REQUIRE(r.exit_code == 0);
  const nlohmann::json summary = read_json(dir / "summary.json");
  CHECK(summary["schema"] == "hookstream.run/1");
  CHECK(summary["world_size"] == 2);
  REQUIRE(summary["steps"].size() == 8);
  const double first = summary["steps"][0]["loss"], last = summary["steps"][7]["loss"];
  CHECK(last < first);
  // DDP's promise: every rank ends with the same parameters.
  CHECK(summary["replicas_identical"] == true);
  CHECK(r.out.find("step 1/8  loss") != std::string::npos);
  CHECK(r.out.find("step 8/8  loss") != std::string::npos);
  CHECK(r.out.find("predicted (H100-SXM) vs measured (cpu)") != std::string::npos);
  CHECK(summary["predicted"]["step_seconds"].get<double>() > 0);
  // Eight steps: the measured step time is the mean of steps 2-8, not a first step.
  CHECK(summary["measured"]["first_step_only"] == false);
  CHECK(r.out.find("first step only") == std::string::npos);
  // The memory model's points in the parts the runtime measures its per-part peaks in (CUDA only):
  // each layer's forward, the loss head, each layer's backward in reverse, the optimizer.
  std::vector<std::string> parts;
  for (const auto& p : summary["predicted"]["peak_by_part"]) parts.push_back(p["part"]);
  const int layers = static_cast<int>(std::count_if(parts.begin(), parts.end(), [](const std::string& p) {
    return p.size() > 8 && p.compare(p.size() - 8, 8, " forward") == 0;
  }));
  REQUIRE(layers > 0);
  std::vector<std::string> expected = {"embedding"};
  for (int i = 0; i < layers; ++i) expected.push_back("layer " + std::to_string(i) + " forward");
  expected.push_back("loss head");
  for (int i = layers - 1; i >= 0; --i) expected.push_back("layer " + std::to_string(i) + " backward");
  expected.push_back("optimizer");
  CHECK(parts == expected);
  CHECK(summary["measured"]["peak_by_part"].empty());  // the CPU has no allocator peaks to split
  // One trace per rank, holding the optimizer-step annotations (Chrome JSON from LibTorch's profiler).
  CHECK_FALSE(fs::exists(dir / "trace.json"));
  for (const char* name : {"trace.rank0.json", "trace.rank1.json"}) {
    INFO(name);
    const std::string trace = read_text(dir / name);
    CHECK(trace.find("hookstream:step:1") != std::string::npos);
    CHECK(trace.find("hookstream:step:8") != std::string::npos);
    CHECK(trace.find("hookstream:optimizer") != std::string::npos);
    CHECK(nlohmann::json::parse(trace).is_array());
  }
  CHECK_FALSE(has_temporary_files(dir));
  // Both ranks' traces against the plan they ran: every rank compared, the slowest named.
  const auto replay = run_binary("replay " + (dir / "trace.rank0.json").string() + " " + (dir / "trace.rank1.json").string() +
                                 " --plan " + kTinyRun + " --format json");
  INFO(replay.out);
  REQUIRE(replay.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(replay.out);
  const nlohmann::json& ranks = j["step"]["plan"]["ranks"];
  REQUIRE(ranks.size() == 2);
  CHECK(ranks[0]["rank"] == 0);
  CHECK(ranks[1]["rank"] == 1);
  double slowest = 0;
  for (const auto& rank : ranks) {
    CHECK(rank["measured_step_ns"].get<double>() > 0);
    CHECK_FALSE(rank["classes"].empty());
    slowest = std::max(slowest, rank["measured_step_ns"].get<double>());
  }
  CHECK(j["step"]["plan"]["measured_step_ns"].get<double>() == slowest);
}

TEST_CASE("run refuses the default plan with the verifier's report, and --apply-fix trains it", "[cli][run]") {
  const auto refused = run_binary("run " + kDefaultTiny + " --steps 2");
  INFO(refused.out);
  CHECK(refused.exit_code == 1);
  CHECK(refused.out.find("refusing to run a plan that fails verification") != std::string::npos);
  CHECK(refused.out.find("marked_ready_twice") != std::string::npos);  // the verifier's finding

  const auto dir = scratch("apply-fix");
  const auto fixed = run_binary("run " + kDefaultTiny + " --steps 2 --apply-fix --json " + (dir / "s.json").string());
  INFO(fixed.out);
  REQUIRE(fixed.exit_code == 0);
  CHECK(fixed.out.find("running the first verified fix") != std::string::npos);
  const nlohmann::json summary = read_json(dir / "s.json");
  CHECK(summary["steps"].size() == 2);
  CHECK_FALSE(summary["applied_fix"].empty());
  CHECK(summary["replicas_identical"] == true);
}

TEST_CASE("run --force on the default plan reports the real Reducer's error with the rank, no hang", "[cli][run]") {
  const auto r = run_binary("run " + kDefaultTiny + " --steps 2 --force --timeout 60");
  INFO(r.out);
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("--force: running a plan that fails verification") != std::string::npos);
  CHECK(r.out.find("Expected to mark a variable ready only once") != std::string::npos);
  CHECK((r.out.find("hookstream: rank 0: error at step 1") != std::string::npos ||
         r.out.find("hookstream: rank 1: error at step 1") != std::string::npos));
}

TEST_CASE("run: a rank that dies makes the others stop with a message naming it", "[cli][run]") {
  const auto start = std::chrono::steady_clock::now();
  const auto r = run_binary("run " + kTinyRun + " --steps 6 --device cpu --inject-fault exit-rank=1@step=2 --timeout 60");
  const auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(r.out);
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("hookstream: rank 1 exited with status 1; stopping the other ranks") != std::string::npos);
  CHECK(r.out.find("hookstream: rank 0: stopping at step 3: rank 1 vanished") != std::string::npos);
  CHECK(seconds < 60);  // before the collective timeout: the heartbeat named the rank
}

TEST_CASE("run: a rank out of device memory is reported with where it was, and the run falls back", "[cli][run]") {
  const std::string plan = kSource + "/tests/plans/run/tiny-no-checkpoint.yaml";
  const auto dir = scratch("oom");
  // An H100 without cuBLAS's fixed 64 MiB, which would be 99% of this tiny model's predicted peak
  // and leave no plan for the fallback to find (tests/plans/run/h100-no-blas-workspace.yaml).
  const std::string gpu = kSource + "/tests/plans/run/h100-no-blas-workspace.yaml";
  const auto r = run_binary("run " + plan + " --set hookstream.gpu=" + gpu +
                            " --steps 3 --device cpu --inject-fault oom-rank=1@step=1 --timeout 60 --json " +
                            (dir / "summary.json").string());
  INFO(r.out);
  // The rank names the step and the layer whose backward ran out: the last layer's runs first.
  CHECK(r.out.find("hookstream: rank 1: out of device memory at step 2, micro-step 0 (backward, layer 3 backward)") !=
        std::string::npos);
  CHECK(r.out.find("hookstream: rank 1 exited with status 3") != std::string::npos);
  // The fallback: predicted below the failed plan, the micro-batch kept, shown as a patch to the file.
  CHECK(r.out.find("hookstream: falling back to the fastest verified plan predicted under") != std::string::npos);
  CHECK(r.out.find("micro_batch_size: 4") == std::string::npos);
  REQUIRE(r.exit_code == 0);
  const nlohmann::json summary = read_json(dir / "summary.json");
  CHECK(summary["last_step"] == 3);
  // What saves the memory: checkpointing, or (faster, so ranked first on a llama) Liger's kernels;
  // every applied change is in the patch to the user's file.
  bool saves = false;
  REQUIRE_FALSE(summary["applied_fix"].empty());
  for (const auto& change : summary["applied_fix"]) {
    const std::string text = change.get<std::string>();
    saves = saves || text == "gradient_checkpointing=true" || text == "liger_rms_norm=true";
    const std::string key = text.substr(0, text.find('=')), value = text.substr(text.find('=') + 1);
    CHECK(r.out.find("+" + key.substr(key.rfind('.') + 1) + ": " + value) != std::string::npos);
  }
  CHECK(saves);
  // Nothing left behind by the ranks' reports.
  for (const auto& entry : fs::directory_iterator(fs::temp_directory_path())) {
    CHECK(entry.path().filename().string().rfind("hookstream-oom-", 0) != 0);
  }

  const auto stop = run_binary("run " + plan + " --steps 3 --device cpu --inject-fault oom-rank=0@step=0 --timeout 60 --no-oom-fallback");
  INFO(stop.out);
  CHECK(stop.exit_code == 3);
  CHECK(stop.out.find("falling back") == std::string::npos);
}

TEST_CASE("run: SIGINT to the launcher stops every rank, exit 130, no partial files", "[cli][run]") {
  const auto dir = scratch("sigint");
  const fs::path log = dir / "log.txt";
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    execl(HOOKSTREAM_BINARY, HOOKSTREAM_BINARY, "run", kTinyRun.c_str(), "--steps", "100000", "--device", "cpu",
          "--json", (dir / "summary.json").c_str(), "--trace", (dir / "trace.json").c_str(), nullptr);
    _exit(127);
  }
  // Wait for the first step, then interrupt.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (read_text(log).find("step 2/100000") == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  INFO(read_text(log));
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 130);
  CHECK(read_text(log).find("interrupted after step") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "summary.json"));
  CHECK_FALSE(fs::exists(dir / "trace.json"));
  CHECK_FALSE(has_temporary_files(dir));
}

TEST_CASE("run: a run stopped after 2 steps and resumed follows the uninterrupted loss curve bit for bit",
          "[cli][run]") {
  const auto dir = scratch("resume");
  const std::string base = "run " + kTinyRun + " --device cpu ";
  const auto whole = run_binary(base + "--steps 5 --json " + (dir / "whole.json").string());
  REQUIRE(whole.exit_code == 0);
  const std::string checkpoints = (dir / "ckpt").string();
  const auto first = run_binary(base + "--steps 2 --checkpoint-dir " + checkpoints + " --json " + (dir / "a.json").string());
  INFO(first.out);
  REQUIRE(first.exit_code == 0);
  CHECK(fs::exists(dir / "ckpt" / "step-00000002" / "manifest.json"));
  CHECK(fs::exists(dir / "ckpt" / "step-00000002" / "rank-1.pt"));
  const auto second = run_binary(base + "--steps 5 --resume --checkpoint-dir " + checkpoints + " --json " +
                                 (dir / "b.json").string());
  INFO(second.out);
  REQUIRE(second.exit_code == 0);
  CHECK(second.out.find("resumed from") != std::string::npos);
  const nlohmann::json w = read_json(dir / "whole.json"), a = read_json(dir / "a.json"), b = read_json(dir / "b.json");
  REQUIRE(a["steps"].size() == 2);
  REQUIRE(b["steps"].size() == 3);
  CHECK(b["first_step"] == 2);
  for (int i = 0; i < 2; ++i) CHECK(a["steps"][i]["loss"].get<double>() == w["steps"][i]["loss"].get<double>());
  for (int i = 0; i < 3; ++i) CHECK(b["steps"][i]["loss"].get<double>() == w["steps"][i + 2]["loss"].get<double>());
  CHECK(b["parameter_digest"] == w["parameter_digest"]);
}

TEST_CASE("run: bad input exits 2 with one line and starts no rank", "[cli][run]") {
  const auto dir = scratch("bad");
  auto check_one_line = [](const hookstream::testing::BinaryRun& r, const std::string& expected) {
    INFO(r.out);
    CHECK(r.exit_code == 2);
    CHECK(count_lines(r.out) == 1);
    CHECK(r.out.find(expected) != std::string::npos);
  };
  check_one_line(run_binary("run " + (dir / "missing.yaml").string() + " --device cpu"), "missing.yaml");
  check_one_line(run_binary("run " + kTinyRun + " --device cpu --set sequnce_len=4"), "sequnce_len");
  check_one_line(run_binary("run " + kTinyRun + " --device cpu --inject-fault explode"), "--inject-fault");

  // A token file whose size is not a multiple of 4 bytes.
  { std::ofstream(dir / "tokens.bin", std::ios::binary) << "abcdefg"; }
  check_one_line(run_binary("run " + kTinyRun + " --device cpu --set hookstream.data=" + (dir / "tokens.bin").string()),
                 "multiple of 4");
  // Token ids outside the vocabulary (64).
  {
    std::ofstream out(dir / "big.bin", std::ios::binary);
    for (uint32_t i = 0; i < 400; ++i) {
      const uint32_t id = i == 150 ? 1000 : i % 64;
      out.write(reinterpret_cast<const char*>(&id), 4);
    }
  }
  check_one_line(run_binary("run " + kTinyRun + " --device cpu --set hookstream.data=" + (dir / "big.bin").string()),
                 "token 1000 at offset 150");

  // A corrupt checkpoint: a complete manifest, a rank file that is not a torch archive.
  const std::string checkpoints = (dir / "ckpt").string();
  const auto one_step = run_binary("run " + kTinyRun + " --device cpu --steps 1 --checkpoint-dir " + checkpoints +
                                   " --json " + (dir / "s.json").string());
  REQUIRE(one_step.exit_code == 0);
  // One step: the measured time is the process's first step, which the comparison names.
  CHECK(read_json(dir / "s.json")["measured"]["first_step_only"] == true);
  CHECK(one_step.out.find("measured: the process's first step only") != std::string::npos);
  { std::ofstream(dir / "ckpt" / "step-00000001" / "rank-1.pt", std::ios::trunc) << "not a checkpoint"; }
  check_one_line(run_binary("run " + kTinyRun + " --device cpu --steps 2 --resume --checkpoint-dir " + checkpoints),
                 "rank-1.pt: cannot read the checkpoint");
  // A checkpoint of another plan.
  check_one_line(run_binary("run " + kTinyRun + " --device cpu --steps 2 --resume --checkpoint-dir " + checkpoints +
                            " --set micro_batch_size=1"),
                 "plan fingerprint");
}

TEST_CASE("an installed hookstream runs run and oracle from its prefix, not from the build tree", "[cli][run]") {
  const auto prefix = scratch("install");
  const auto installed = run_command(std::string(HOOKSTREAM_CMAKE) + " --install " + HOOKSTREAM_BUILD_DIR + " --prefix " +
                                     prefix.string());
  INFO(installed.out);
  REQUIRE(installed.exit_code == 0);
  const fs::path binary = prefix / "bin" / "hookstream";
  const fs::path module = prefix / "lib" / "hookstream" / "libhookstream_torch_commands.so";
  REQUIRE(fs::exists(binary));
  REQUIRE(fs::exists(module));
  REQUIRE(fs::exists(prefix / "lib" / "hookstream" / "hookstream-oracle-worker"));
  // Only the installed files: no override pointing back into the build tree.
  const std::string env = "env -u HOOKSTREAM_TORCH_COMMANDS -u HOOKSTREAM_ORACLE_WORKER ";
  const auto oracle = run_command(env + binary.string() + " oracle " + kTinyRun);
  INFO(oracle.out);
  CHECK(oracle.exit_code == 0);
  CHECK(oracle.out.find("real DDP (c10d Reducer over Gloo, 2 ranks): ok") != std::string::npos);
  const auto trained = run_command(env + binary.string() + " run " + kTinyRun + " --steps 2 --device cpu --json " +
                                   (prefix / "summary.json").string());
  INFO(trained.out);
  CHECK(trained.exit_code == 0);
  CHECK(read_json(prefix / "summary.json")["steps"].size() == 2);
  // The installed module is the one loaded: without it the error names its place in the prefix.
  fs::remove(module);
  const auto missing = run_command(env + binary.string() + " oracle " + kTinyRun);
  CHECK(missing.exit_code == 2);
  CHECK(missing.out.find(module.string()) != std::string::npos);
  CHECK(missing.out.find("cannot load the LibTorch commands module") != std::string::npos);
}

#endif
