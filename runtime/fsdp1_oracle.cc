#include "runtime/fsdp1_oracle.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "runtime/ddp_structure_json.h"
#include "runtime/process_runner.h"
#include "sim/inputs/model_structure.h"

namespace hookstream {

namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

Fsdp1RankObservation classify(const nlohmann::json& report) {
  Fsdp1RankObservation o;
  o.rank = report.value("rank", 0);
  if (report.contains("missing")) {  // the rank died of something other than the engine: no verdict
    o.text = report["missing"].get<std::string>();
    return o;
  }
  std::string last_unit, last_task;
  for (const auto& e : report["events"]) {
    const std::string kind = e.value("event", "");
    if (kind == "post_backward") {
      ++o.post_backward_calls;
      last_unit = e.value("unit", "");
      last_task = e.value("graph_task", "");
    } else if (kind == "reduce_scatter") {
      ++o.reduce_scatters;
    }
  }
  o.unit = last_unit;
  o.graph_task = last_task;
  if (!report["error"].is_null()) {
    const auto& error = report["error"];
    o.text = error.value("text", "");
    o.iteration = error.value("iteration", -1);
    if (error.value("hang", false)) {
      o.verdict = "collective_mismatch";
    } else if (o.text.rfind("size mismatch, got input", 0) == 0 || o.text.rfind("The size of tensor a", 0) == 0 ||
               o.text.rfind("setStorage: ", 0) == 0) {
      o.verdict = "sharded_parameter_use";
    } else {
      o.verdict = "engine_error";
    }
    return o;
  }
  o.verdict = "ok";
  for (const auto& it : report["iterations"]) {
    if (it.contains("gradients_error")) {
      o.verdict = "engine_error";
      o.text = it["gradients_error"].get<std::string>();
      return o;
    }
    if (!it.contains("gradients")) continue;
    for (const auto& g : it["gradients"]) {
      if (!g.value("ok", true)) o.wrong_gradients.push_back(g.value("parameter", ""));
    }
    if (!o.wrong_gradients.empty()) {
      o.verdict = "wrong_gradient";
      o.iteration = it.value("iteration", -1);
      return o;
    }
  }
  return o;
}

}  // namespace

std::vector<std::vector<Fsdp1RankObservation>> run_fsdp1_oracle(const std::vector<Plan>& plans,
                                                                const Fsdp1OracleOptions& options) {
  std::vector<std::vector<Fsdp1RankObservation>> out(plans.size());
  if (plans.empty()) return out;
  const int world = std::max(1, plans.front().world_size);
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = (fs::path(tmp && *tmp ? tmp : "/tmp") / "hookstream-fsdp1-XXXXXX").string();
  if (!mkdtemp(pattern.data())) throw std::runtime_error("cannot create a run directory");
  const fs::path root = pattern;
  std::vector<fs::path> dirs;
  for (size_t i = 0; i < plans.size(); ++i) {
    if (plans[i].world_size != world) throw std::invalid_argument("run_fsdp1_oracle: plans of one world size");
    dirs.push_back(root / ("plan-" + std::to_string(i)));
    fs::create_directories(dirs.back());
    std::ofstream(dirs.back() / "structure.json") << ddp_structure_json(plans[i], build_model_structure(plans[i]));
  }
  // One launcher process runs every plan, forking the ranks of each (oracles/fsdp1_worker.py); it
  // writes a report for every rank, also for one that crashed or was killed at the plan's deadline.
  ProcessGroupRunner runner;
  std::vector<std::string> args = {options.python, options.source_dir + "/oracles/fsdp1_worker.py"};
  for (const fs::path& dir : dirs) {
    args.push_back("--out");
    args.push_back(dir.string());
  }
  for (const std::string& a : {std::string("--world-size"), std::to_string(world), std::string("--collective-timeout-ms"),
                               std::to_string(options.collective_timeout_ms), std::string("--plan-timeout-s"),
                               std::to_string(options.plan_timeout_s)}) {
    args.push_back(a);
  }
  const fs::path log = root / "launcher.log";
  runner.start(options.source_dir + "/oracles/run.sh", args, {{"TORCH_DISTRIBUTED_DEBUG", "DETAIL"}, {"OMP_NUM_THREADS", "1"}},
               log.string());
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::seconds(60 + static_cast<int64_t>(options.plan_timeout_s) * static_cast<int64_t>(plans.size()));
  const ProcessOutcome launcher = runner.wait_all(deadline).front();
  for (size_t i = 0; i < plans.size(); ++i) {
    for (int rank = 0; rank < world; ++rank) {
      const fs::path report = dirs[i] / ("fsdp1-rank-" + std::to_string(rank) + ".json");
      if (fs::exists(report)) {
        out[i].push_back(classify(nlohmann::json::parse(read_text(report))));
        continue;
      }
      Fsdp1RankObservation o;  // the launcher itself failed before this plan: no verdict
      o.rank = rank;
      const std::string tail = read_text(log);
      o.text = std::string(launcher.killed_at_deadline ? "launcher killed at its deadline" : "launcher ended early") +
               ": " + tail.substr(tail.size() > 2000 ? tail.size() - 2000 : 0);
      out[i].push_back(std::move(o));
    }
  }
  std::error_code ignored;
  if (!std::getenv("HOOKSTREAM_KEEP_FSDP1_RUNS")) fs::remove_all(root, ignored);
  return out;
}

}  // namespace hookstream
