#include "runtime/fsdp2_oracle.h"

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "runtime/ddp_structure_json.h"
#include "sim/inputs/model_structure.h"

namespace hookstream {

namespace fs = std::filesystem;

namespace {

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

namespace {

Fsdp2OracleResult parse_result(const fs::path& result_file) {
  const nlohmann::json j = nlohmann::json::parse(read_text(result_file));
  Fsdp2OracleResult result;
  for (const auto& r : j.at("ranks")) {
    Fsdp2OracleRank rank;
    rank.rank = r.at("rank").get<int>();
    if (r.contains("torch_version")) result.torch_version = r.at("torch_version").get<std::string>();
    if (r.contains("has_set_reduce_scatter_unused_params")) {
      result.has_set_reduce_scatter_unused_params = r.at("has_set_reduce_scatter_unused_params").get<bool>();
    }
    const auto& e = r.at("error");
    if (!e.is_null()) {
      rank.errored = true;
      rank.error_text = e.at("text").get<std::string>();
      if (e.contains("log")) rank.error_text += ": " + e.at("log").get<std::string>();  // a worker that died
      rank.error_type = e.value("type", "");
      rank.phase = e.value("phase", "");
      rank.iteration = e.value("iteration", 0);
      rank.micro_step = e.value("micro_step", 0);
    }
    if (r.contains("counts")) {
      for (const auto& [unit, counts] : r.at("counts").items()) {
        for (const auto& [what, n] : counts.items()) rank.counts[unit][what] = n.get<int>();
      }
    }
    result.ranks.push_back(std::move(rank));
  }
  for (const auto& g : j.at("gradients")) {
    std::map<std::string, std::string> not_ok;
    for (const auto& [name, verdict] : g.at("not_ok").items()) not_ok[name] = verdict.get<std::string>();
    result.gradients.push_back(std::move(not_ok));
  }
  return result;
}

}  // namespace

std::vector<Fsdp2OracleResult> run_fsdp2_oracle(const std::vector<Plan>& plans, const Fsdp2OracleOptions& options) {
  std::string templ = (fs::temp_directory_path() / "hookstream-fsdp2-XXXXXX").string();
  if (!mkdtemp(templ.data())) throw std::runtime_error("cannot create a temporary directory");
  const fs::path dir = templ;
  std::string command = shell_quote(options.source_dir + "/oracles/run.sh") + " " + shell_quote(options.python) + " " +
                        shell_quote(options.source_dir + "/oracles/fsdp2_worker.py") + " --collective-timeout-ms " +
                        std::to_string(options.collective_timeout_ms);
  for (size_t i = 0; i < plans.size(); ++i) {
    const fs::path plan_dir = dir / ("plan-" + std::to_string(i));
    fs::create_directories(plan_dir);
    std::ofstream out(plan_dir / "structure.json");
    out << ddp_structure_json(plans[i], build_model_structure(plans[i]));
    command += " --out " + shell_quote(plan_dir.string());
  }
  command += " > " + shell_quote((dir / "launcher.log").string()) + " 2>&1";
  const int status = std::system(command.c_str());
  std::vector<Fsdp2OracleResult> results;
  std::string failure;
  for (size_t i = 0; i < plans.size() && failure.empty(); ++i) {
    const fs::path result_file = dir / ("plan-" + std::to_string(i)) / "fsdp2-result.json";
    if (status != 0 || !fs::exists(result_file)) {
      const std::string log = read_text(dir / "launcher.log");
      failure = "fsdp2 oracle failed: " + log.substr(log.size() > 3000 ? log.size() - 3000 : 0);
      break;
    }
    results.push_back(parse_result(result_file));
  }
  fs::remove_all(dir);
  if (!failure.empty()) throw std::runtime_error(failure);
  return results;
}

}  // namespace hookstream
