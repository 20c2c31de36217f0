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

// The line Gloo's enforce printed before the process aborted on a collective mismatch, or "".
std::string gloo_abort_text(const std::string& log) {
  const size_t at = log.find("Is there a distributed collective mismatch in your code?");
  if (at == std::string::npos) return "";
  const size_t begin = log.rfind("[enforce fail at ", at);
  return log.substr(begin == std::string::npos ? at : begin, at - (begin == std::string::npos ? at : begin)) +
         "Is there a distributed collective mismatch in your code?";
}

Fsdp1RankObservation classify(const nlohmann::json& report) {
  Fsdp1RankObservation o;
  o.rank = report.value("rank", 0);
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
  // A rank that crashes (SIGSEGV is an outcome real FSDP1 gives) ends its batch: the plan it was
  // running is observed as that crash, and the plans after it run again in a new batch.
  size_t next = 0;
  while (next < plans.size()) {
    ProcessGroupRunner runner;
    const int port = free_local_port();
    for (int rank = 0; rank < world; ++rank) {
      std::vector<std::string> args = {options.python, options.source_dir + "/oracles/fsdp1_worker.py"};
      for (size_t i = next; i < plans.size(); ++i) {
        args.push_back("--out");
        args.push_back(dirs[i].string());
      }
      for (const std::string& a : {std::string("--rank"), std::to_string(rank), std::string("--world-size"),
                                   std::to_string(world), std::string("--store-port"), std::to_string(port),
                                   std::string("--collective-timeout-ms"), std::to_string(options.collective_timeout_ms)}) {
        args.push_back(a);
      }
      runner.start(options.source_dir + "/oracles/run.sh", args,
                   {{"TORCH_DISTRIBUTED_DEBUG", "DETAIL"}, {"OMP_NUM_THREADS", "1"}},
                   (root / ("batch-" + std::to_string(next) + "-rank-" + std::to_string(rank) + ".log")).string());
    }
    const auto outcomes = runner.wait_all(std::chrono::steady_clock::now() + std::chrono::seconds(options.timeout_s));
    size_t first_missing = plans.size();
    for (size_t i = next; i < plans.size(); ++i) {
      for (int rank = 0; rank < world; ++rank) {
        const fs::path report = dirs[i] / ("fsdp1-rank-" + std::to_string(rank) + ".json");
        if (!fs::exists(report)) {
          first_missing = std::min(first_missing, i);
          continue;
        }
      }
    }
    for (size_t i = next; i < std::min(first_missing + 1, plans.size()); ++i) {
      out[i].clear();
      for (int rank = 0; rank < world; ++rank) {
        const fs::path report = dirs[i] / ("fsdp1-rank-" + std::to_string(rank) + ".json");
        if (fs::exists(report)) {
          out[i].push_back(classify(nlohmann::json::parse(read_text(report))));
          continue;
        }
        Fsdp1RankObservation o;
        o.rank = rank;
        const ProcessOutcome& p = outcomes[static_cast<size_t>(rank)];
        const fs::path log = root / ("batch-" + std::to_string(next) + "-rank-" + std::to_string(rank) + ".log");
        if (!p.exited && p.signal == 11) {
          o.verdict = "engine_error";
          o.text = "Fatal Python error: Segmentation fault";
        } else if (const std::string mismatch = gloo_abort_text(read_text(log)); !p.exited && p.signal == 6 && !mismatch.empty()) {
          // Gloo's size check failed inside a collective (gloo/transport/tcp/pair.cc): std::terminate.
          o.verdict = "collective_mismatch";
          o.text = mismatch;
        } else {
          o.text = p.killed_at_deadline ? "killed at the batch deadline" : "exited without a report";
          const std::string tail = read_text(log);
          o.text += ": " + tail.substr(tail.size() > 2000 ? tail.size() - 2000 : 0);
        }
        out[i].push_back(std::move(o));
      }
    }
    if (first_missing == plans.size()) break;
    bool any_crash = false;
    for (const auto& p : outcomes) any_crash = any_crash || (!p.exited && (p.signal == 11 || p.signal == 6));
    if (!any_crash) {
      // Not a crash the engine gave: the remaining plans stay unobserved ("no_report").
      for (size_t i = first_missing + 1; i < plans.size(); ++i) out[i].assign(static_cast<size_t>(world), Fsdp1RankObservation{});
      break;
    }
    next = first_missing + 1;
  }
  std::error_code ignored;
  if (!std::getenv("HOOKSTREAM_KEEP_FSDP1_RUNS")) fs::remove_all(root, ignored);
  return out;
}

}  // namespace hookstream
