// `hookstream run PLAN.yaml`: verify the plan with the simulator, then train it for real
// (runtime/trainer.h) on N ranks, launched here (runtime/launcher.h) or by torchrun. Part of the
// LibTorch commands module (tools/cli/torch_commands.h); options in tools/cli/run_command.cc.
// docs/run.md.
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "tools/cli/commands.h"
#include "tools/cli/torch_commands.h"

#include "runtime/cuda_device.h"
#include "runtime/launcher.h"
#include "runtime/reducer_factory.h"
#include "runtime/stop_signal.h"
#include "runtime/token_data.h"
#include "runtime/trainer.h"
#include "runtime/training_checkpoint.h"
#include "sim/cost/device_spec.h"
#include "sim/cost/host_memory.h"
#include "sim/cost/oom_fallback.h"
#include "sim/cost/plan_search.h"
#include "sim/inputs/input_error.h"
#include "sim/verify/json_text.h"
#include "sim/inputs/model_structure.h"
#include "sim/verify/report.h"
#include "sim/verify/verify.h"

namespace hookstream {


namespace {



std::string mib(int64_t bytes) { return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1024.0 * 1024.0)); }

std::string step_line(const StepMetrics& m, int total) {
  std::string peak = m.peak_memory_bytes ? mib(*m.peak_memory_bytes) + (m.peak_is_rss ? " (max RSS)" : "") : "n/a";
  return fmt::format("step {}/{}  loss {:.6f}  {:.3f} s  {:.0f} tok/s  peak {}  copy hidden {:.2f} ms (exposed {:.2f} ms)",
                     m.step, total, m.loss, m.step_seconds, m.tokens_per_second, peak, m.hidden_copy_ms(),
                     m.exposed_copy_ms);
}

std::string progress_bar(int done, int total) {
  constexpr int kWidth = 30;
  const int filled = total > 0 ? done * kWidth / total : kWidth;
  return fmt::format("\r[{}{}] {}/{}", std::string(filled, '#'), std::string(kWidth - filled, '.'), done, total);
}

// The part of the step a memory-model point belongs to, in the words TrainModel::position_text()
// uses for what a rank measured ("layer 3 backward", "loss head", "optimizer"), so that the two
// can be put side by side; `previous` is the part of the point before. The runtime moves to a new
// part where TrainModel marks one: the embedding, the vision tower, each layer's forward, the loss
// head (final norm, lm_head and their backward), each layer's backward (opened when its gradient
// arrives); what runs after layer 0's backward opens (the embedding's and the tower's backward,
// DDP's final reduction) stays in that part, and the optimizer step is its own.
std::string runtime_part(const std::string& predicted_label, const std::string& previous) {
  const size_t space = predicted_label.find(' ');
  const std::string phase = predicted_label.substr(0, space);
  const std::string at = space == std::string::npos ? "" : predicted_label.substr(space + 1);
  if (phase == "optimizer") return "optimizer";
  if (phase == "loss" || at.find("lm_head") != std::string::npos || at.find("cross-entropy") != std::string::npos ||
      at.find("final norm") != std::string::npos) {
    return "loss head";
  }
  const size_t layer = at.find("layer ");
  if (layer != std::string::npos && (phase == "forward" || phase == "backward")) {
    size_t end = layer + 6;
    while (end < at.size() && std::isdigit(static_cast<unsigned char>(at[end]))) ++end;
    if (end > layer + 6) return at.substr(layer, end - layer) + " " + phase;
  }
  if (phase == "forward" && at.rfind("embedding", 0) == 0) return "embedding";
  // The tower's ops (sim/streams/stream_expansion.cc HeadCost::vision: "vision block 3 forward").
  if (phase == "forward" && at.rfind("vision", 0) == 0) return "vision tower";
  return previous.empty() ? phase : previous;
}

// Largest bytes per part, in the order parts are first reached.
nlohmann::json parts_json(const std::vector<std::pair<std::string, int64_t>>& points, bool map_to_parts) {
  std::vector<std::pair<std::string, int64_t>> parts;
  std::string previous;
  for (const auto& [label, bytes] : points) {
    const std::string part = map_to_parts ? runtime_part(label, previous) : label;
    previous = part;
    auto it = std::find_if(parts.begin(), parts.end(), [&](const auto& p) { return p.first == part; });
    if (it == parts.end()) {
      parts.emplace_back(part, bytes);
    } else {
      it->second = std::max(it->second, bytes);
    }
  }
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [part, bytes] : parts) out.push_back({{"part", part}, {"bytes", bytes}});
  return out;
}

// Rank 0's summary: the steps, and the simulator's prediction for the plan's GPU beside what
// this run measured.
nlohmann::json summary_json(const Plan& plan, const RunArgs& args, const std::string& device, int world_size,
                            const TrainResult& result, const std::optional<PlanCost>& predicted,
                            const std::vector<FixChange>& fix) {
  nlohmann::json j;
  j["schema"] = "hookstream.run/1";
  j["plan"] = args.plan;
  j["world_size"] = world_size;
  j["device"] = device;
  j["torch_version"] = torch_version();
  j["first_step"] = result.first_step;
  j["last_step"] = result.last_step;
  j["resumed_from"] = result.resumed_from ? nlohmann::json(*result.resumed_from) : nlohmann::json();
  j["checkpoint"] = result.last_checkpoint ? nlohmann::json(*result.last_checkpoint) : nlohmann::json();
  j["forced"] = args.force;
  j["applied_fix"] = nlohmann::json::array();
  for (const FixChange& c : fix) j["applied_fix"].push_back(c.key + "=" + c.value);
  j["steps"] = nlohmann::json::array();
  double time_sum = 0;
  int timed = 0;
  int64_t peak = 0;
  const StepMetrics* peak_step = nullptr;
  for (const StepMetrics& m : result.steps) {
    nlohmann::json s;
    s["step"] = m.step;
    s["loss"] = m.loss;
    s["step_seconds"] = m.step_seconds;
    s["tokens"] = m.tokens;
    s["tokens_per_second"] = m.tokens_per_second;
    s["peak_memory_bytes"] = m.peak_memory_bytes ? nlohmann::json(*m.peak_memory_bytes) : nlohmann::json();
    s["peak_by_part"] = parts_json(m.phase_peaks, /*map_to_parts=*/false);
    s["copy_ms"] = m.copy_ms;
    s["hidden_copy_ms"] = m.hidden_copy_ms();
    s["exposed_copy_ms"] = m.exposed_copy_ms;
    s["copy_bytes"] = m.copy_bytes;
    j["steps"].push_back(s);
    if (peak_step == nullptr || m.peak_memory_bytes.value_or(0) > peak) peak_step = &m;
    peak = std::max(peak, m.peak_memory_bytes.value_or(0));
    // The first step of a run warms up allocators and the Reducer's bucket rebuild, and on CUDA
    // compiles cuDNN's runtime-generated attention kernels (the driver JIT-compiles their PTX:
    // +3.1-3.9 s at 32K on an H200 with a cold CUDA JIT cache, +0.5 s with a warm one; bench/RESULTS.md
    // "Session 25"): left out of the mean when there are others.
    if (&m != &result.steps.front() || result.steps.size() == 1) {
      time_sum += m.step_seconds;
      ++timed;
    }
  }
  j["final_loss"] = result.steps.empty() ? nlohmann::json() : nlohmann::json(result.steps.back().loss);
  j["warnings"] = result.warnings;
  j["parameter_digest"] = result.parameter_digest;
  j["replicas_identical"] = result.replicas_identical;
  // Pinned offload slots, allocated before the first step (not part of any step's time).
  j["pinned_host"] = {{"bytes", result.pinned_bytes}, {"seconds", result.pin_seconds}};
  nlohmann::json measured;
  measured["device"] = device;
  measured["step_seconds"] = timed ? nlohmann::json(time_sum / timed) : nlohmann::json();
  // A one-step run has only the process's first step to measure: the prediction is a steady step,
  // so the comparison says so rather than passing the warm-up off as a model error.
  measured["first_step_only"] = result.steps.size() == 1;
  measured["peak_memory_bytes"] = peak;
  measured["peak_memory_kind"] = device == "cpu" ? "max_rss" : "cuda_caching_allocator";
  // Where the peak step reached its peak (CUDA only: the allocator's peak per part of the step).
  measured["peak_at"] = nlohmann::json();
  measured["peak_by_part"] = nlohmann::json::array();
  if (peak_step != nullptr && !peak_step->phase_peaks.empty()) {
    const auto top = std::max_element(peak_step->phase_peaks.begin(), peak_step->phase_peaks.end(),
                                      [](const auto& a, const auto& b) { return a.second < b.second; });
    measured["peak_at"] = top->first;
    measured["peak_by_part"] = parts_json(peak_step->phase_peaks, /*map_to_parts=*/false);
  }
  j["measured"] = measured;
  if (predicted) {
    j["predicted"] = {{"device", predicted->device},
                      {"step_seconds", predicted->step_seconds},
                      {"peak_memory_bytes", predicted->peak_device_bytes},
                      {"peak_at", predicted->peak_at},
                      {"peak_by_part", parts_json(predicted->device_points, /*map_to_parts=*/true)}};
  } else {
    j["predicted"] = nullptr;
  }
  return j;
}

// The part holding the predicted peak (the first part reaching the largest bytes).
std::string predicted_peak_part(const nlohmann::json& predicted) {
  std::string part;
  int64_t top = -1;
  for (const nlohmann::json& p : predicted["peak_by_part"]) {
    if (p["bytes"].get<int64_t>() > top) {
      top = p["bytes"].get<int64_t>();
      part = p["part"].get<std::string>();
    }
  }
  return part;
}

std::string prediction_table(const nlohmann::json& summary) {
  const nlohmann::json& p = summary["predicted"];
  const nlohmann::json& m = summary["measured"];
  auto seconds = [](const nlohmann::json& v) {
    if (v.is_null()) return std::string("n/a");
    const double s = v.get<double>();
    if (s < 1e-3) return fmt::format("{:.2f} us", s * 1e6);
    if (s < 1) return fmt::format("{:.2f} ms", s * 1e3);
    return fmt::format("{:.3f} s", s);
  };
  const std::string predicted_device = p.is_null() ? "n/a" : p["device"].get<std::string>();
  std::string text = fmt::format("predicted ({}) vs measured ({}):\n", predicted_device, m["device"].get<std::string>());
  text += fmt::format("  step time    {:>14}  {:>14}\n", p.is_null() ? "n/a" : seconds(p["step_seconds"]),
                      seconds(m["step_seconds"]));
  text += fmt::format("  peak memory  {:>14}  {:>14}{}\n",
                      p.is_null() ? "n/a" : mib(p["peak_memory_bytes"].get<int64_t>()),
                      mib(m["peak_memory_bytes"].get<int64_t>()),
                      m["peak_memory_kind"] == "max_rss" ? " (max RSS of the process)" : "");
  if (!m["peak_at"].is_null()) {
    text += fmt::format("  peak at      {:>14}  {:>14}\n", p.is_null() ? "n/a" : predicted_peak_part(p),
                        m["peak_at"].get<std::string>());
  }
  if (m.value("first_step_only", false)) {
    text += "  (measured: the process's first step only, with its one-off warm-up; predicted: a steady step)\n";
  }
  return text;
}

// What the ranks of one launch are told beyond the user's flags: the --set changes in force, the
// fix or fallback applied, whether to resume, the fault to inject (the first launch only).
struct LaunchPlan {
  std::vector<std::string> set;
  std::vector<FixChange> applied;
  bool resume = false;
  std::string inject_fault;
  std::string oom_report;
};

std::vector<std::string> rank_arguments(const RunArgs& args, const LaunchPlan& launch, int steps, const std::string& device) {
  const std::vector<std::string>& set = launch.set;
  const std::vector<FixChange>& applied = launch.applied;
  std::vector<std::string> out = {"run", args.plan, "--steps", std::to_string(steps), "--device", device,
                                  "--timeout", std::to_string(args.timeout_seconds)};
  if (!args.model.empty()) out.insert(out.end(), {"--model", args.model});
  for (const std::string& s : set) out.insert(out.end(), {"--set", s});
  if (!args.checkpoint_dir.empty()) {
    out.insert(out.end(), {"--checkpoint-dir", args.checkpoint_dir, "--checkpoint-every",
                           std::to_string(args.checkpoint_every)});
  }
  if (launch.resume) out.push_back("--resume");
  if (!args.trace.empty()) out.insert(out.end(), {"--trace", args.trace});
  if (!args.json.empty()) out.insert(out.end(), {"--json", args.json});
  if (!launch.inject_fault.empty()) out.insert(out.end(), {"--inject-fault", launch.inject_fault});
  if (!launch.oom_report.empty()) out.insert(out.end(), {"--oom-report", launch.oom_report});
  if (args.force) out.push_back("--force");
  for (const FixChange& c : applied) out.insert(out.end(), {"--applied-fix", c.key + "=" + c.value});
  return out;
}

std::string oom_report_path(const std::string& base, int rank) { return base + ".rank" + std::to_string(rank) + ".json"; }

void write_oom_report(const std::string& base, int rank, const OutOfMemoryReport& report) {
  if (base.empty()) return;
  const nlohmann::json j = {{"position", report.position},
                            {"requested_bytes", report.requested_bytes},
                            {"peak_allocated_bytes", report.peak_allocated_bytes},
                            {"device_total_bytes", report.device_total_bytes}};
  std::ofstream(oom_report_path(base, rank)) << j.dump() << "\n";
}

// The reports the ranks of the last launch wrote (removed once read).
std::vector<OutOfMemoryEvidence> take_oom_reports(const std::string& base, int world_size) {
  std::vector<OutOfMemoryEvidence> evidence;
  for (int rank = 0; rank < world_size; ++rank) {
    const std::string path = oom_report_path(base, rank);
    std::ifstream in(path);
    if (!in) continue;
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) {
      evidence.push_back({j.value("requested_bytes", int64_t{0}), j.value("peak_allocated_bytes", int64_t{0}),
                          j.value("device_total_bytes", int64_t{0})});
    }
    std::filesystem::remove(path);
  }
  return evidence;
}

// After a launch whose ranks ran out of device memory: the fastest verified plan predicted under
// the budget the evidence leaves (sim/cost/oom_fallback.h), as --set changes on top of `launch`,
// printed as a patch to the user's file. Empty when none fits (then said why).
std::optional<std::vector<FixChange>> oom_fallback(const RunArgs& args, LoadOptions load, const LaunchPlan& launch,
                                                   const std::vector<OutOfMemoryEvidence>& evidence) {
  load.set = launch.set;
  const PlanSource source = read_plan_source(args.plan, load);
  const Plan plan = load_plan(args.plan, load);
  const std::optional<PlanCost> cost = predict_cost(plan, build_model_structure(plan));
  if (!cost) {
    std::cerr << "hookstream: no memory prediction for this plan's device: no fallback\n";
    return std::nullopt;
  }
  const int64_t capacity = find_device_spec(cost->device).memory_bytes;
  const FallbackBudget budget = oom_fallback_budget(cost->peak_device_bytes, capacity, evidence);
  PlanSearchOptions options;
  options.budget_gib = static_cast<double>(budget.budget_bytes) / double(int64_t(1) << 30);
  options.top = 1;
  options.keep_micro_batch = true;
  const PlanSearchResult found = search_plans(source, options);
  if (cost->peak_device_bytes > capacity) {
    std::cerr << fmt::format("hookstream: the plan was predicted to peak at {}, more than the {}'s {}\n",
                             format_bytes(cost->peak_device_bytes), cost->device, format_bytes(capacity));
  } else {
    std::cerr << fmt::format("hookstream: the plan was predicted to peak at {} on {}; the ranks needed at least {:.2f}x that\n",
                             format_bytes(cost->peak_device_bytes), cost->device, budget.shortfall_ratio);
  }
  if (found.best.empty()) {
    std::cerr << fmt::format("hookstream: no verified plan is predicted under {} (hookstream plan {} --budget-gib {:.1f}): "
                             "no fallback\n",
                             format_bytes(budget.budget_bytes), args.plan, *options.budget_gib);
    return std::nullopt;
  }
  const PlanCandidate& best = found.best.front();
  VerifiedFix as_fix;
  as_fix.changes = best.changes;
  std::cerr << fmt::format("hookstream: falling back to the fastest verified plan predicted under {} (peak {} at {}, "
                           "step {:.3f} s); in your file:\n{}",
                           format_bytes(budget.budget_bytes), format_bytes(best.peak_bytes), best.peak_at,
                           best.step_ns * 1e-9, fix_patch(as_fix, source.yaml_text, args.plan));
  return best.changes;
}

int run_run(const RunArgs& args) {
  install_stop_handlers();
  const std::optional<RankEnvironment> environment = rank_environment();
  const bool launched = std::getenv(kLaunchedVariable) != nullptr && environment.has_value();
  const bool reporter = !environment || environment->rank == 0;  // prints the verifier's report

  std::string device = args.device;
  if (device.empty()) device = cuda_device_count() > 0 ? "cuda" : "cpu";
  if (device == "cuda" && cuda_device_count() == 0) {
    throw InputError("--device", "cuda: this build or machine has no GPU (expected --device cpu)");
  }
  if (device == "cpu" && !gloo_available()) {
    throw InputError("--device", "cpu: this build's LibTorch has no Gloo, which CPU ranks need (expected --device cuda, "
                                 "or a build against Debian's LibTorch: tools/build.sh)");
  }
  if (args.checkpoint_every < 0) throw InputError("--checkpoint-every", "expected an integer >= 0");
  if (args.resume && args.checkpoint_dir.empty()) throw InputError("--resume", "needs --checkpoint-dir DIR");
  if (args.timeout_seconds < 1) throw InputError("--timeout", "expected seconds >= 1");
  const FaultInjection fault = parse_fault_injection(args.inject_fault);

  LoadOptions load;
  if (!args.model.empty()) load.model_path = args.model;
  load.set = args.set;
  int world_size = 0;
  if (environment) {
    world_size = environment->world_size;
  } else {
    world_size = args.nproc > 0 ? args.nproc : load_plan(args.plan, load).world_size;
    if (device == "cuda") world_size = std::min(world_size, cuda_device_count());
  }
  if (args.nproc < 0) throw InputError("--nproc", "expected an integer >= 1");
  load.world_size = world_size;

  // Verify (the same code as `hookstream verify`), unless the launcher already did.
  std::vector<std::string> set = args.set;
  std::vector<FixChange> applied;
  Plan plan;
  if (launched) {
    plan = load_plan(args.plan, load);
    for (const std::string& change : args.applied_fix) {
      const size_t equals = change.find('=');
      applied.push_back(FixChange{change.substr(0, equals), equals == std::string::npos ? "" : change.substr(equals + 1)});
    }
  } else {
    VerifyResult verified = verify_plan(read_plan_source(args.plan, load));
    if (!verified.ok()) {
      if (args.apply_fix && !verified.fixes.empty()) {
        applied = verified.fixes.front().changes;
        const std::string rationale = verified.fixes.front().rationale;
        for (const FixChange& c : applied) set.push_back(c.key + "=" + c.value);
        load.set = set;
        verified = verify_plan(read_plan_source(args.plan, load));
        if (!verified.ok()) throw std::runtime_error("the verified fix failed re-verification");
        if (reporter) {
          std::string changes;
          for (const FixChange& c : applied) changes += (changes.empty() ? "" : ", ") + c.key + "=" + c.value;
          std::cerr << fmt::format("hookstream: the plan fails verification; running the first verified fix: {} ({})\n",
                                   changes, rationale);
        }
      } else if (args.force) {
        if (reporter) {
          std::cerr << render_text(verified, false)
                    << "hookstream: --force: running a plan that fails verification\n";
        }
      } else {
        if (reporter) {
          std::cout << render_text(verified, false);
          std::cerr << "hookstream: refusing to run a plan that fails verification"
                    << (verified.fixes.empty() ? "" : " (--apply-fix runs the first verified fix)")
                    << "; --force runs it anyway\n";
        }
        return 1;
      }
    }
    plan = verified.plan;
  }
  const int steps = args.steps > 0 ? args.steps : plan.max_steps.value_or(plan.iterations);
  if (args.steps < 0) throw InputError("--steps", "expected an integer >= 1");

  if (!environment) {
    // Everything a rank would refuse as bad input is checked here, so it is one line and exit 2
    // before any process starts.
    if (plan.data) {
      validate_token_file(plan_relative_path(plan, *plan.data), plan.model.vocab_size, world_size, plan.sequence_len);
    }
    if (args.resume) {
      if (const auto checkpoint = latest_checkpoint(args.checkpoint_dir)) {
        validate_checkpoint(*checkpoint, plan, world_size, /*read_rank_files=*/true);
      }
    }
    // Pinned host slots for offloaded checkpoints: every local rank allocates its own, so the plan's
    // predicted host peak times the ranks must fit in what the machine has free, or the run would
    // die in cudaHostAlloc (or by the OOM killer) mid-step. --force skips the check.
    if (device == "cuda" && plan.activation_offloading && !args.force) {
      const std::optional<PlanCost> cost = predict_cost(plan, build_model_structure(plan));
      const std::optional<int64_t> available = read_mem_available();
      if (cost && available) {
        const std::string shortfall = pinned_host_shortfall(cost->peak_host_bytes, world_size, *available);
        if (!shortfall.empty()) {
          throw InputError(args.plan + ": key activation_offloading", shortfall +
                                          "; `hookstream plan --host-budget-gib N` finds plans that fit, --force runs it anyway");
        }
      }
    }
    LaunchOptions launch;
    launch.executable = "/proc/self/exe";
    launch.nproc = world_size;
    if (device == "cuda") launch.environment = nccl_multicast_off_environment();
    LaunchPlan ranks{set, applied, args.resume, args.inject_fault,
                     (std::filesystem::temp_directory_path() / fmt::format("hookstream-oom-{}", getpid())).string()};
    // A plan that ran out of device memory is relaunched, at most this often, with the fastest
    // plan predicted to need less; each fallback is predicted strictly below the one before.
    constexpr int kMaxFallbacks = 3;
    for (int fallback = 0;; ++fallback) {
      launch.args = rank_arguments(args, ranks, steps, device);
      std::cerr << fmt::format("hookstream: training {} on {} {} rank{} for {} steps\n", args.plan, world_size, device,
                               world_size == 1 ? "" : "s", steps);
      const int status = launch_ranks(launch);
      const std::vector<OutOfMemoryEvidence> evidence = take_oom_reports(ranks.oom_report, world_size);
      // The first rank to fail may be a peer of the one that ran out (its collective broke): any
      // rank's report counts.
      const bool out_of_memory = status == kOutOfMemoryExitCode || !evidence.empty();
      if (!out_of_memory || args.no_oom_fallback || fallback == kMaxFallbacks) {
        return out_of_memory ? kOutOfMemoryExitCode : status;
      }
      const std::optional<std::vector<FixChange>> changes = oom_fallback(args, load, ranks, evidence);
      if (!changes) return status;
      for (const FixChange& c : *changes) {
        ranks.set.push_back(c.key + "=" + c.value);
        ranks.applied.push_back(c);
      }
      // The fallback trains from step 0: a checkpoint of the plan that failed does not match the
      // new plan's fingerprint (runtime/plan_fingerprint.h), and the test hook fires once.
      ranks.resume = false;
      ranks.inject_fault.clear();
    }
  }

  const bool rank0 = environment->rank == 0;
  const bool tty = isatty(STDERR_FILENO) != 0;
  TrainerOptions options;
  options.device = device == "cuda" ? c10::Device(c10::kCUDA) : c10::Device(c10::kCPU);
  options.steps = steps;
  options.checkpoint_dir = args.checkpoint_dir;
  options.checkpoint_every = args.checkpoint_every;
  options.resume = args.resume;
  options.trace_path = args.trace;
  options.fault = fault;
  options.stop_requested = [] { return stop_signals_received() > 0; };
  options.on_step = [&](const StepMetrics& m) {
    if (tty) std::cerr << "\r\033[K";
    std::cerr << step_line(m, steps) << "\n";
    if (tty) std::cerr << progress_bar(m.step, steps) << std::flush;
  };
  options.on_note = [&](const std::string& note) { std::cerr << "hookstream: " << note << "\n"; };
  TrainResult result;
  try {
    result = run_rank(plan, *environment, options, std::chrono::seconds(args.timeout_seconds));
  } catch (const RankFailure& failure) {
    if (tty && rank0) std::cerr << "\r\033[K";
    std::cerr << "hookstream: " << failure.what() << "\n";
    if (failure.out_of_memory) {
      write_oom_report(args.oom_report, environment->rank, *failure.out_of_memory);
      return kOutOfMemoryExitCode;
    }
    return 1;
  }
  if (tty && rank0) std::cerr << "\r\033[K" << std::flush;
  if (result.interrupted) {
    if (rank0) {
      std::cerr << fmt::format("hookstream: interrupted after step {}{}\n", result.last_step,
                               result.last_checkpoint ? "; checkpoint " + *result.last_checkpoint : std::string());
    }
    return kInterruptedExitCode;
  }
  if (rank0) {
    const std::optional<PlanCost> predicted = predict_cost(plan, build_model_structure(plan));
    const nlohmann::json summary = summary_json(plan, args, device, environment->world_size, result, predicted, applied);
    std::cerr << prediction_table(summary);
    emit(json_text(summary, 2) + "\n", args.json);
  }
  return 0;
}

}  // namespace

}  // namespace hookstream

extern "C" int hookstream_run_main(const void* run_args) {
  const auto& args = *static_cast<const hookstream::RunArgs*>(run_args);
  return hookstream::run_reporting_errors([&] { return hookstream::run_run(args); });
}
