#include "runtime/oracle.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "runtime/ddp_structure_json.h"
#include "runtime/gradient_file.h"
#include "runtime/model_config_json.h"
#include "runtime/oracle_findings.h"
#include "runtime/plan_fingerprint.h"
#include "runtime/process_runner.h"
#include "runtime/worker.h"
#include "sim/inputs/model_structure.h"

namespace hookstream {

namespace fs = std::filesystem;

namespace {

// Relative tolerance of the gradient comparisons: Gloo's float sum and the reference's mean differ
// in the last bits; a missed or extra local contribution differs in the first ones.
constexpr double kRelativeTolerance = 1e-4;
constexpr double kAbsoluteTolerance = 1e-6;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw std::runtime_error(path.string() + ": cannot write");
}

std::string tail_lines(const std::string& text, size_t lines) {
  size_t start = text.size();
  for (size_t n = 0; n <= lines; ++n) {
    if (start == 0) return text;
    const size_t newline = text.rfind('\n', start - 1);
    if (newline == std::string::npos) return text;
    start = newline;
  }
  return text.substr(start + 1);
}

// The run directory, removed on every path unless asked to keep it.
class RunDirectory {
 public:
  RunDirectory(const std::string& parent, bool keep) : keep_(keep) {
    std::string base = parent;
    if (base.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      base = tmp && *tmp ? tmp : "/tmp";
    }
    std::string pattern = (fs::path(base) / "hookstream-oracle-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("cannot create a run directory under " + base);
    path_ = pattern;
  }
  ~RunDirectory() {
    if (!keep_) {
      std::error_code ignored;
      fs::remove_all(path_, ignored);
    }
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
  bool keep_;
};

WorkerReport load_report(const fs::path& path) { return parse_worker_report(read_text(path), path.string()); }

void compare_gradients(const fs::path& dir, const OracleResult& partial, std::vector<IterationObservation>& out,
                       int iterations) {
  const int world = static_cast<int>(partial.ranks.size());
  for (int it = 0; it < iterations; ++it) {
    IterationObservation obs;
    obs.iteration = it;
    bool comparable = static_cast<int>(partial.reference.size()) == world;
    for (const RankObservation& rank : partial.ranks) {
      comparable = comparable && rank.has_report && it < static_cast<int>(rank.report.iterations.size()) &&
                   rank.report.iterations[it].completed;
    }
    for (const WorkerReport& ref : partial.reference) {
      comparable = comparable && it < static_cast<int>(ref.iterations.size()) && ref.iterations[it].completed;
    }
    if (!comparable) {
      out.push_back(std::move(obs));
      continue;
    }
    const std::vector<int64_t>& numels = partial.ranks[0].report.ddp_parameter_numels;
    std::vector<std::vector<at::Tensor>> grads, ref_grads;
    for (const RankObservation& rank : partial.ranks) {
      grads.push_back(read_gradients((dir / rank.report.iterations[it].grads_file).string(), numels));
    }
    for (const WorkerReport& ref : partial.reference) {
      ref_grads.push_back(read_gradients((dir / ref.iterations[it].grads_file).string(), numels));
    }
    obs.compared = true;
    for (size_t p = 0; p < numels.size(); ++p) {
      bool defined_anywhere = false, defined_everywhere = true, reference_defined = false;
      for (const RankObservation& rank : partial.ranks) {
        const bool d = rank.report.iterations[it].grad_defined[p];
        defined_anywhere = defined_anywhere || d;
        defined_everywhere = defined_everywhere && d;
      }
      at::Tensor average = at::zeros({numels[p]}, at::kFloat);
      for (int r = 0; r < world; ++r) {
        reference_defined = reference_defined || partial.reference[r].iterations[it].grad_defined[p];
        average += ref_grads[r][p];
      }
      average /= static_cast<double>(world);
      bool across = true, to_reference = true;
      for (int r = 0; r < world; ++r) {
        const bool d = partial.ranks[r].report.iterations[it].grad_defined[p];
        across = across && d == partial.ranks[0].report.iterations[it].grad_defined[p] &&
                 at::allclose(grads[r][p], grads[0][p], kRelativeTolerance, kAbsoluteTolerance);
        to_reference = to_reference && d == reference_defined &&
                       at::allclose(grads[r][p], average, kRelativeTolerance, kAbsoluteTolerance);
      }
      obs.equal_across_ranks.push_back(across);
      obs.equal_to_reference.push_back(to_reference);
      obs.grad_on_no_rank.push_back(!defined_anywhere);
    }
    out.push_back(std::move(obs));
  }
}

}  // namespace

OracleResult run_oracle(const Plan& plan, const OracleOptions& options) {
  if (options.worker_path.empty() || access(options.worker_path.c_str(), X_OK) != 0) {
    throw std::runtime_error("oracle worker not executable: \"" + options.worker_path + "\"");
  }
  const int world = std::max(1, plan.world_size);
  RunDirectory dir(options.temp_dir, options.keep_run_dir);

  // The plan travels as YAML (to_yaml -> load_plan) and its model as a config.json
  // (--model overrides base_model), so a plan built in code reaches the workers by the same path
  // as a user's file. The fingerprint makes the workers refuse anything that changed on the way.
  const fs::path plan_file = dir.path() / "plan.yaml";
  const fs::path model_file = dir.path() / "config.json";
  write_text(plan_file, to_yaml(plan));
  write_text(model_file, model_config_json(plan.model));
  // The structure and schedule the simulator sees, for the Python (PyTorch 2.x) worker.
  write_text(dir.path() / "structure.json", ddp_structure_json(plan, build_model_structure(plan)));

  WorkerOptions base;
  base.plan_path = plan_file.string();
  base.model_path = model_file.string();
  base.world_size = world;
  base.out_dir = dir.path().string();
  base.collective_timeout_ms = static_cast<int>(options.collective_timeout.count());
  base.seed = options.seed;
  base.expect_fingerprint = plan_fingerprint(plan);
  base.store_port = free_local_port();

  const std::map<std::string, std::string> environment = {
      {"TORCH_DISTRIBUTED_DEBUG", options.distributed_debug},
      {"OMP_NUM_THREADS", "1"},
      {"GLOG_minloglevel", "2"},
  };
  auto arguments = [&](const WorkerOptions& o) {
    std::vector<std::string> args = options.worker_prefix_args;
    const std::vector<std::string> own = worker_arguments(o);
    args.insert(args.end(), own.begin(), own.end());
    return args;
  };
  ProcessGroupRunner runner;
  for (int rank = 0; rank < world; ++rank) {
    WorkerOptions o = base;
    o.rank = rank;
    std::vector<std::string> args = arguments(o);
    if (options.ranks_write_reference) args.push_back("--with-reference");
    runner.start(options.worker_path, args, environment,
                 (dir.path() / ("rank-" + std::to_string(rank) + ".log")).string());
  }
  if (!options.ranks_write_reference) {
    WorkerOptions reference = base;
    reference.reference = true;
    runner.start(options.worker_path, arguments(reference), environment,
                 (dir.path() / "reference.log").string());
  }
  const auto outcomes = runner.wait_all(std::chrono::steady_clock::now() + options.timeout);

  OracleResult result;
  for (int rank = 0; rank < world; ++rank) {
    RankObservation obs;
    obs.rank = rank;
    obs.process = outcomes[rank];
    const fs::path log = dir.path() / ("rank-" + std::to_string(rank) + ".log");
    obs.log_tail = tail_lines(read_text(log), 20);
    const fs::path report = dir.path() / ("rank-" + std::to_string(rank) + ".json");
    if (fs::exists(report)) {
      obs.report = load_report(report);
      obs.has_report = true;
    } else if (obs.process.exited && obs.process.exit_code != 0) {
      throw std::runtime_error("oracle worker rank " + std::to_string(rank) + " failed: " + obs.log_tail);
    }
    result.ranks.push_back(std::move(obs));
  }
  for (int rank = 0; rank < world; ++rank) {
    const fs::path report = dir.path() / ("reference-rank-" + std::to_string(rank) + ".json");
    if (!fs::exists(report)) {
      const fs::path log = options.ranks_write_reference ? dir.path() / ("rank-" + std::to_string(rank) + ".log")
                                                         : dir.path() / "reference.log";
      throw std::runtime_error("oracle reference worker did not report: " + tail_lines(read_text(log), 20));
    }
    result.reference.push_back(load_report(report));
  }
  compare_gradients(dir.path(), result, result.iterations, plan.iterations);
  classify_observations(plan, build_model_structure(plan), result);
  if (options.keep_run_dir) result.run_dir = dir.path().string();
  return result;
}

}  // namespace hookstream
