#include "runtime/worker.h"

#include <cstdlib>
#include <fstream>
#include <stdexcept>

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/debug.h>

#include "runtime/ddp_wrapper.h"
#include "runtime/gradient_file.h"
#include "runtime/hook_recorder.h"
#include "runtime/oracle_model.h"
#include "runtime/plan_fingerprint.h"
#include "runtime/reducer_factory.h"
#include "runtime/worker_report.h"
#include "sim/inputs/plan.h"

namespace hookstream {

namespace {

std::string error_text(const std::exception& e) {
  // c10::Error::what() appends the C++ backtrace; Python shows what_without_backtrace().
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

std::string distributed_debug_level() {
  const char* value = std::getenv("TORCH_DISTRIBUTED_DEBUG");
  return value ? value : "OFF";
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw std::runtime_error(path + ": cannot write");
}

std::vector<int64_t> numels_of(const std::vector<at::Tensor>& params) {
  std::vector<int64_t> result;
  for (const auto& p : params) result.push_back(p.numel());
  return result;
}

// Runs one rank's iterations. `ddp` null: no DDP (reference). Stops at the first error.
void run_iterations(const Plan& plan, const OracleModel& model, int rank, DdpWrapper* ddp, HookRecorder& recorder,
                    const std::string& out_dir, const std::string& file_prefix, WorkerReport& report) {
  const std::vector<at::Tensor> params = model.ddp_parameters();
  const int steps = std::max(1, plan.gradient_accumulation_steps);
  for (int it = 0; it < plan.iterations && !report.error; ++it) {
    // optimizer.zero_grad(set_to_none=True); no optimizer step: parameters stay as initialised,
    // which keeps every iteration's gradients comparable and changes nothing DDP does.
    for (const auto& p : params) {
      at::Tensor p_mut = p;
      p_mut.mutable_grad() = at::Tensor();
    }
    WorkerIteration record;
    record.iteration = it;
    Phase phase = Phase::Forward;
    int micro_step = 0;
    try {
      for (micro_step = 0; micro_step < steps; ++micro_step) {
        // Gradient accumulation: micro-steps before the last run under no_sync().
        const bool sync = micro_step == steps - 1;
        const StepPosition position{rank, it, micro_step};
        recorder.set_micro_step(micro_step);
        phase = Phase::Forward;
        if (ddp) ddp->pre_forward(sync);
        at::Tensor loss = model.forward(model.make_batch(position), position, &recorder);
        if (ddp) loss = ddp->post_forward(loss, sync);
        phase = Phase::Backward;
        GraphTaskScope outer(&recorder, "outer");
        loss.backward();
      }
      record.completed = true;
    } catch (const std::exception& e) {
      report.error = WorkerError{error_text(e), phase, it, micro_step};
    }
    record.firings = recorder.take_firings();
    std::vector<at::Tensor> grads;
    for (const auto& p : params) {
      grads.push_back(p.grad());
      record.grad_defined.push_back(p.grad().defined());
    }
    record.grads_file = file_prefix + "-iter-" + std::to_string(it) + ".bin";
    write_gradients(out_dir + "/" + record.grads_file, grads, numels_of(params));
    report.iterations.push_back(std::move(record));
  }
  // The next training step's forward is where an unfinished reduction surfaces
  // (rebuild_buckets -> ensure_prior_reduction_finished): run that part once more.
  if (ddp && !report.error) {
    try {
      ddp->pre_forward(true);
    } catch (const std::exception& e) {
      report.error = WorkerError{error_text(e), Phase::Forward, plan.iterations, 0};
    }
  }
}

WorkerReport new_report(const OracleModel& model, int rank, int world_size, bool reference) {
  WorkerReport report;
  report.rank = rank;
  report.world_size = world_size;
  report.reference = reference;
  report.torch_version = torch_version();
  report.distributed_debug = distributed_debug_level();
  report.ddp_parameter_names = model.ddp_parameter_names();
  report.ddp_parameter_numels = numels_of(model.ddp_parameters());
  return report;
}

}  // namespace

WorkerOptions parse_worker_arguments(const std::vector<std::string>& args) {
  WorkerOptions o;
  bool have_rank = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) throw std::invalid_argument(flag + ": expected a value");
      return args[++i];
    };
    auto number = [&]() {
      const std::string& v = value();
      try {
        size_t used = 0;
        const long long n = std::stoll(v, &used);
        if (used != v.size()) throw std::invalid_argument("");
        return n;
      } catch (const std::exception&) {
        throw std::invalid_argument(flag + ": expected an integer, got \"" + v + "\"");
      }
    };
    if (flag == "--plan") o.plan_path = value();
    else if (flag == "--model") o.model_path = value();
    else if (flag == "--rank") { o.rank = static_cast<int>(number()); have_rank = true; }
    else if (flag == "--world-size") o.world_size = static_cast<int>(number());
    else if (flag == "--store-port") o.store_port = static_cast<int>(number());
    else if (flag == "--out") o.out_dir = value();
    else if (flag == "--reference") o.reference = true;
    else if (flag == "--collective-timeout-ms") o.collective_timeout_ms = static_cast<int>(number());
    else if (flag == "--seed") o.seed = static_cast<uint64_t>(number());
    else if (flag == "--expect-fingerprint") o.expect_fingerprint = value();
    else throw std::invalid_argument("unknown flag \"" + flag + "\"");
  }
  if (o.plan_path.empty()) throw std::invalid_argument("--plan FILE is required");
  if (o.out_dir.empty()) throw std::invalid_argument("--out DIR is required");
  if (!o.reference && (!have_rank || o.store_port <= 0)) {
    throw std::invalid_argument("--rank R and --store-port P are required without --reference");
  }
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    throw std::invalid_argument("expected 0 <= --rank < --world-size");
  }
  return o;
}

std::vector<std::string> worker_arguments(const WorkerOptions& o) {
  std::vector<std::string> args = {"--plan", o.plan_path, "--out", o.out_dir, "--world-size",
                                   std::to_string(o.world_size), "--seed", std::to_string(o.seed),
                                   "--collective-timeout-ms", std::to_string(o.collective_timeout_ms)};
  if (!o.model_path.empty()) args.insert(args.end(), {"--model", o.model_path});
  if (!o.expect_fingerprint.empty()) args.insert(args.end(), {"--expect-fingerprint", o.expect_fingerprint});
  if (o.reference) {
    args.push_back("--reference");
  } else {
    args.insert(args.end(), {"--rank", std::to_string(o.rank), "--store-port", std::to_string(o.store_port)});
  }
  return args;
}

int run_worker(const WorkerOptions& options) {
  LoadOptions load;
  if (!options.model_path.empty()) load.model_path = options.model_path;
  Plan plan = load_plan(options.plan_path, load);
  plan.world_size = options.world_size;
  if (!options.expect_fingerprint.empty() && plan_fingerprint(plan) != options.expect_fingerprint) {
    throw std::runtime_error(options.plan_path +
                             ": the plan read back differs from the parent's (to_yaml/parse_plan lost something)");
  }
  torch::set_num_threads(1);
  c10d::setDebugLevelFromEnvironment();
  const OracleModel model(plan, options.seed);

  if (options.reference) {
    for (int rank = 0; rank < options.world_size; ++rank) {
      HookRecorder recorder;
      recorder.attach(model.ddp_parameters());
      WorkerReport report = new_report(model, rank, options.world_size, true);
      const std::string prefix = "reference-rank-" + std::to_string(rank);
      run_iterations(plan, model, rank, nullptr, recorder, options.out_dir, prefix, report);
      write_text(options.out_dir + "/" + prefix + ".json", to_json_text(report));
    }
    return 0;
  }

  const auto timeout = std::chrono::milliseconds(options.collective_timeout_ms);
  // Our hooks go on the accumulators before the Reducer's, so they run first (hook_recorder.h).
  HookRecorder recorder;
  recorder.attach(model.ddp_parameters());
  auto store = c10::make_intrusive<c10d::TCPStore>(
      "127.0.0.1", rendezvous_store_options(options.store_port, options.rank, options.world_size, timeout));
  auto group = make_gloo_process_group(store, options.rank, options.world_size, timeout);
  DdpWrapper ddp(model.ddp_parameters(), model.ddp_parameter_names(), group,
                 ddp_settings_for(plan, distributed_debug_level() != "OFF"));

  WorkerReport report = new_report(model, options.rank, options.world_size, false);
  report.initial_buckets = ddp.initial_buckets();
  const std::string prefix = "rank-" + std::to_string(options.rank);
  run_iterations(plan, model, options.rank, &ddp, recorder, options.out_dir, prefix, report);
  write_text(options.out_dir + "/" + prefix + ".json", to_json_text(report));
  return 0;
}

}  // namespace hookstream
