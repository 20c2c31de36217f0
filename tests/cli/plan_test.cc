// `hookstream plan`: runs the real binary on the bundled default plan.
#include <catch2/catch.hpp>

#include "tests/cli/run_binary.h"
#include "tests/temp_dir.h"

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

namespace {
using PlanRun = hookstream::testing::BinaryRun;
PlanRun run_plan(const std::string& args) { return hookstream::testing::run_binary("plan " + args); }
const std::string kDefault = std::string(HOOKSTREAM_SOURCE_DIR) + "/plans/default.yaml";
}  // namespace

TEST_CASE("plan: 24 GiB fits the default plan only with a chunked loss", "[cli][plan]") {
  // Unchunked, the default plan's logits alone take 23.2 GiB; the search explores axolotl's chunked
  // cross-entropy because they dominate, and every candidate that fits 24 GiB uses it.
  const PlanRun r = run_plan(kDefault + " --gpu H100 --budget-gib 24 --top 3 --format json");
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["explored_chunked_loss"] == true);
  CHECK(j["input"]["peak_breakdown"]["logits_and_loss"].get<int64_t>() > (int64_t{23} << 30));
  REQUIRE(j["best"].size() >= 1);
  for (const auto& candidate : j["best"]) {
    bool chunked = false;
    for (const auto& change : candidate["changes"]) chunked |= change["key"] == "chunked_cross_entropy" && change["value"] == "true";
    CHECK(chunked);
    CHECK(candidate["peak_bytes"].get<int64_t>() <= j["budget_bytes"].get<int64_t>());
  }
  const PlanRun text = run_plan(kDefault + " --gpu H100 --budget-gib 24 --top 1");
  CHECK(text.out.find("chunked cross-entropy explored") != std::string::npos);
  CHECK(text.out.find("--set chunked_cross_entropy=true") != std::string::npos);
}

TEST_CASE("plan: 10 GiB is too small for the default plan's weights and bf16 logits", "[cli][plan]") {
  const PlanRun r = run_plan(kDefault + " --gpu H100 --budget-gib 10");
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("H100-SXM") != std::string::npos);
  CHECK(r.out.find("no candidate fits") != std::string::npos);
  CHECK(r.out.find("logits_and_loss") != std::string::npos);
  CHECK(r.out.find("marked_ready_twice") != std::string::npos);  // the input plan's verdict
}

TEST_CASE("plan: the fastest verified candidates that fit, as --set changes", "[cli][plan]") {
  const PlanRun r = run_plan(kDefault + " --gpu H100 --budget-gib 40 --top 4 --format json");
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["schema"] == "hookstream.plan/1");
  CHECK(j["device"] == "H100-SXM");
  CHECK(j["input"]["verdict"].get<std::string>().find("marked_ready_twice") == 0);
  REQUIRE(j["best"].size() == 4);
  double previous = 1e30;
  for (const auto& candidate : j["best"]) {
    CHECK(candidate["verdict"] == "ok");
    CHECK(candidate["peak_bytes"].get<int64_t>() <= j["budget_bytes"].get<int64_t>());
    CHECK(candidate["tokens_per_second"].get<double>() <= previous);
    previous = candidate["tokens_per_second"].get<double>();
    // Every passing candidate must stop the per-chunk backward of the tiled MLP.
    bool fixes_tiled = false;
    for (const auto& change : candidate["changes"]) {
      if ((change["key"] == "tiled_mlp" && change["value"] == "false") ||
          (change["key"] == "hookstream.tiled_mlp_backward" && change["value"] != "per_chunk_backward")) {
        fixes_tiled = true;
      }
    }
    CHECK(fixes_tiled);
  }
  CHECK(r.out == run_plan(kDefault + " --gpu H100 --budget-gib 40 --top 4 --format json").out);  // deterministic
}

TEST_CASE("plan: an unknown GPU is bad input on one line", "[cli][plan]") {
  const PlanRun r = run_plan(kDefault + " --gpu H300");
  CHECK(r.exit_code == 2);
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 1);
  CHECK(r.out.find("H100-SXM") != std::string::npos);
}

TEST_CASE("plan --timeline writes the input plan's step as a Chrome trace", "[cli][plan]") {
  const hookstream::test::TempDir dir("hookstream-plan-timeline-" + std::to_string(getpid()));
  const std::string path = (dir / "timeline.json").string();
  const PlanRun r = run_plan(kDefault + " --gpu H100 --budget-gib 40 --top 1 --timeline " + path);
  REQUIRE(r.exit_code == 0);
  std::ifstream in(path);
  const auto trace = nlohmann::json::parse(in);
  int slices = 0, flows = 0;
  std::set<int> threads;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X") {
      ++slices;
      threads.insert(e["tid"].get<int>());
    }
    if (e["ph"] == "s") ++flows;
  }
  CHECK(slices > 36 * 4);          // every layer's forward, copies and backward at least
  CHECK(flows > 36 * 3);           // record -> wait and wait_stream arrows of the offload protocol
  CHECK(threads.size() >= 3);      // compute, copy and nccl streams
}

TEST_CASE("plan: candidates with the same predicted figures are listed once, with the ranking and the cost source", "[cli][plan]") {
  // The long-context base plan (offloaded non-reentrant checkpointing, 16K): doubling the micro-batch
  // with reentrant or non-reentrant checkpointing costs the same in the models, so the reentrant
  // variant is folded into the smaller edit instead of being listed as a repeat. (The first
  // candidates, with Liger's kernels, skip checkpointing: the fold is among the first ten.)
  const std::string plan = std::string(HOOKSTREAM_SOURCE_DIR) + "/bench/plans/llama8b-lora-long.yaml";
  const PlanRun r = run_plan(plan + " --gpu H100-SXM --budget-gib 76 --top 10 --format json");
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["ranking"].get<std::string>().find("tokens/s") != std::string::npos);
  CHECK(j["costs"].get<std::string>().find("devices/profiles/H100-SXM.yaml") != std::string::npos);
  std::set<std::tuple<double, int64_t, int64_t>> figures;
  int folded = 0;
  for (const auto& candidate : j["best"]) {
    const auto key = std::make_tuple(candidate["step_ns"].get<double>(), candidate["peak_bytes"].get<int64_t>(),
                                     candidate["host_bytes"].get<int64_t>());
    CHECK(figures.insert(key).second);  // no two listed candidates predict the same figures
    for (const auto& other : candidate["equivalents"]) {
      ++folded;
      CHECK(other.size() >= candidate["changes"].size());  // the listed one is the smallest edit
    }
  }
  CHECK(folded == j["equivalent"].get<int>());
  CHECK(folded >= 1);
  const PlanRun text = run_plan(plan + " --gpu H100-SXM --budget-gib 76 --top 10");
  CHECK(text.out.find("same figures (settings with no predicted effect): ") != std::string::npos);
  CHECK(text.out.find("ranked by predicted tokens/s") != std::string::npos);
  CHECK(text.out.find("measured device profile devices/profiles/H100-SXM.yaml") != std::string::npos);
}

TEST_CASE("plan: a pinned host budget drops candidates whose offload slots do not fit", "[cli][plan]") {
  const std::string plan = std::string(HOOKSTREAM_SOURCE_DIR) + "/bench/plans/llama8b-lora-long.yaml";
  const PlanRun r = run_plan(plan + " --gpu H100-SXM --budget-gib 76 --host-budget-gib 1 --top 10 --format json");
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["host_budget_bytes"].get<int64_t>() == int64_t{1} << 30);
  CHECK(j["over_host_budget"].get<int>() > 0);
  for (const auto& candidate : j["best"]) CHECK(candidate["host_bytes"].get<int64_t>() <= int64_t{1} << 30);
  const PlanRun text = run_plan(plan + " --gpu H100-SXM --budget-gib 76 --host-budget-gib 1");
  CHECK(text.out.find("over the host budget") != std::string::npos);
  CHECK(text.out.find("pinned host budget 1.00 GiB") != std::string::npos);
}

namespace {

// A candidate's pinned host memory under a host budget: every checkpointed layer's slot (32 of
// Llama-3.1-8B) when they fit, else a partial offload of the first layers whose slots fit, the
// later ones' inputs kept on the GPU. A slot is one hidden state, exact or rounded up to a power of
// two by PyTorch's pinned caching allocator.
void check_offload_fits_host(const nlohmann::json& candidate, int64_t tokens, int64_t host_budget) {
  std::map<std::string, std::string> changes;
  for (const auto& c : candidate["changes"]) changes[c["key"].get<std::string>()] = c["value"].get<std::string>();
  const int64_t hidden = tokens * 4096 * 2;
  int64_t slot = changes["hookstream.pinned_slots"] == "exact" ? hidden : 1;
  while (slot < hidden) slot *= 2;
  const int64_t host = candidate["host_bytes"].get<int64_t>();
  INFO(candidate.dump());
  CHECK(host <= host_budget);
  if (32 * slot <= host_budget) {
    CHECK(changes.count("hookstream.offload_layers") == 0);
    CHECK(host == 32 * slot);
  } else {
    const int64_t fit = host_budget / slot;
    CHECK(changes["hookstream.offload_layers"] == "[\"0-" + std::to_string(fit - 1) + "\"]");
    CHECK(host == fit * slot);
  }
}

}  // namespace

TEST_CASE("plan: at 320K tokens the host holds all exact slots or the first layers' rounded ones, and finer loss "
          "chunks lower the peak",
          "[cli][plan]") {
  // Measured on an H100 on 2026-11-27 (bench/gpu-results/2026-11-27-h100-s20/call5-320k): the first
  // candidate ran at 71.82 GiB with 80 GiB of exact pinned slots. With the pinned caching allocator the
  // 32 slots of 2.5 GiB take 128 GiB, over a 110 GiB host budget: only 27 of them fit, and the 5 later
  // layers keep their inputs on the GPU. With axolotl's 8 loss chunks one chunk's logits take ~49 GiB
  // (74.4 GiB peak), with chunks of 2,048 tokens 71.8 GiB.
  const std::string plan = std::string(HOOKSTREAM_SOURCE_DIR) + "/bench/plans/llama8b-lora-long.yaml";
  const PlanRun r = run_plan(plan + " --set sequence_len=327680 --gpu H100-SXM --budget-gib 76 --host-budget-gib 110 "
                                    "--top 3 --format json");
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(!j["best"].empty());
  CHECK(j["over_host_budget"].get<int>() > 0);
  for (const auto& candidate : j["best"]) check_offload_fits_host(candidate, 327680, int64_t{110} << 30);
  std::map<std::string, std::string> best;
  for (const auto& c : j["best"][0]["changes"]) best[c["key"].get<std::string>()] = c["value"].get<std::string>();
  REQUIRE(best.count("chunked_cross_entropy_num_chunks"));
  CHECK(best.at("chunked_cross_entropy_num_chunks") == "160");  // 2,048 tokens a chunk
}

TEST_CASE("plan: when the host cannot pin every layer's slot, the later layers keep their input on the GPU", "[cli][plan]") {
  // 384K tokens on an H200: 32 exact slots of 3 GiB are 96 GiB of pinned memory, 32 rounded ones
  // 128 GiB. With 80 GiB of host budget 26 exact or 20 rounded slots fit; checkpointing without
  // offload would keep 96 GiB of inputs on the GPU, over the 134 GiB budget. So every fitting
  // candidate offloads the first layers and keeps the later ones.
  const std::string plan = std::string(HOOKSTREAM_SOURCE_DIR) + "/bench/plans/llama8b-lora-long.yaml";
  const PlanRun r = run_plan(plan + " --set sequence_len=393216 --gpu H200 --budget-gib 134 --host-budget-gib 80 "
                                    "--top 3 --format json");
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(!j["best"].empty());
  CHECK(j["over_host_budget"].get<int>() > 0);
  for (const auto& candidate : j["best"]) {
    check_offload_fits_host(candidate, 393216, int64_t{80} << 30);
    CHECK(candidate["peak_bytes"].get<int64_t>() <= int64_t{134} << 30);
    bool partial = false;
    for (const auto& c : candidate["changes"]) partial = partial || c["key"] == "hookstream.offload_layers";
    CHECK(partial);
  }
}
