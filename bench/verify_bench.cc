// Benchmark for `hookstream verify` (issue: DDP verifier speed targets).
//   - a Llama-3.1-70B LoRA plan (80 layers, 7 target projections, 8 ranks, 3 iterations): < 100 ms
//   - the same at 1,024 ranks: < 2 s
//   - time against parameters x ranks x iterations: linear
//   - issue 20 "Speed": an FSDP2 or ZeRO plan for a 70B model (Llama-3.3-70B-Instruct's config.json),
//     64 ranks, 3 iterations, full fine-tune: < 100 ms, memory and time models of the engine included.
//     The engine plans are a list (kEnginePlans): another engine is one more line.
// Ranks whose plans are identical are simulated once (they behave identically), so the rank sweep
// gives every rank its own sequence length (and so its own tiled-MLP shard count) to force one
// simulation per rank: the worst case. Prints a Markdown table on stdout.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <string>
#include <ctime>
#include <unistd.h>
#include <vector>

#include "sim/verify/simulation_report.h"
#include "sim/verify/verify.h"

using namespace hookstream;

namespace {

std::string plan_yaml(const std::string& model, int ranks, int iterations, bool distinct_ranks, bool failing) {
  std::string yaml = fmt::format(
      "base_model: {}\nsequence_len: 16384\nadapter: lora\nlora_r: 16\nlora_target_linear: true\n"
      "gradient_checkpointing: true\ngradient_checkpointing_kwargs:\n  use_reentrant: {}\n"
      "tiled_mlp: true\nddp_find_unused_parameters: false\n"
      "hookstream:\n  world_size: {}\n  iterations: {}\n  tiled_mlp_backward: {}\n",
      model, failing ? "true" : "false", ranks, iterations, failing ? "per_chunk_backward" : "grad_then_backward");
  if (distinct_ranks) {
    yaml += "  rank_overrides:\n";
    for (int r = 1; r < ranks; ++r) yaml += fmt::format("    {}:\n      sequence_len: {}\n", r, 16384 + (r % 8) * 8192 + r);
  }
  return yaml;
}

// The engines of issue 20's speed target, each as the keys a user writes for it.
struct EnginePlan {
  const char* name;
  const char* keys;             // top-level plan keys
  const char* hookstream = "";  // keys of the hookstream: section (the GPU)
  int sequence_len = 4096;
};
const std::vector<EnginePlan> kEnginePlans = {
    // The anchor the engine rows are read against (same model, ranks and run): DDP of a LoRA plan,
    // the engine `verify` has measured since issue 19, on a B200, where the bf16 replica fits.
    {"DDP, LoRA all-linear, B200 (anchor)", "adapter: lora\nlora_r: 16\nlora_target_linear: true\nddp_find_unused_parameters: false\n", "  gpu: B200\n"},
    {"FSDP2", "fsdp_version: 2\nfsdp_config:\n  transformer_layer_cls_to_wrap: LlamaDecoderLayer\n  reshard_after_forward: true\n"},
    // ZeRO-2 keeps the 16-bit weights whole (141 GB for 70B): it fits a B200, not an H100, where
    // the row measures the failing verdict with its fix search.
    {"ZeRO-2 (B200)", "deepspeed:\n  zero_optimization:\n    stage: 2\n    overlap_comm: true\n", "  gpu: B200\n"},
    {"ZeRO-2 (H100, oom)", "deepspeed:\n  zero_optimization:\n    stage: 2\n    overlap_comm: true\n"},
    // ZeRO-3 partitions the 16-bit weights too: it fits an H100.
    {"ZeRO-3", "deepspeed:\n  zero_optimization:\n    stage: 3\n"},
    // Failing FSDP2 and ZeRO-3 plans, so the target covers their fix searches too. FSDP2 without
    // resharding after forward keeps every layer's all-gathered 16-bit weights until its backward
    // (SHARD_GRAD_OP: 131 GiB for 70B), OOM on an H100.
    {"FSDP2 (reshard_after_forward: false, H100, oom)",
     "fsdp_version: 2\nfsdp_config:\n  transformer_layer_cls_to_wrap: LlamaDecoderLayer\n  reshard_after_forward: false\n"},
    // ZeRO-3 at a 32k-token sequence: the checkpointed layer inputs and the logits outgrow an H100.
    {"ZeRO-3 (sequence 32768, H100, oom)", "deepspeed:\n  zero_optimization:\n    stage: 3\n", "", 32768},
};

// A full fine-tune of the model at `model_dir` (a folder with config.json) on `ranks` ranks.
std::string engine_plan_yaml(const std::string& model_dir, const EnginePlan& engine, int ranks, int iterations) {
  return fmt::format("base_model: {}\nsequence_len: {}\nmicro_batch_size: 1\ngradient_checkpointing: true\n"
                     "gradient_checkpointing_kwargs:\n  use_reentrant: false\n{}hookstream:\n{}  world_size: {}\n  iterations: {}\n",
                     model_dir, engine.sequence_len, engine.keys, engine.hookstream, ranks, iterations);
}

struct Timing {
  double median_ms;
  double median_cpu_ms = 0;  // process CPU time (both cores): what an idle machine's wall would be, near enough
  size_t trainable;
  size_t simulated_ranks;
  bool ok;
};

Timing measure(const std::string& yaml, bool fixes, int repeats, bool deduplicate = true) {
  std::vector<double> ms;
  Timing t{};
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    VerifyOptions options;
    options.search_fixes = fixes;
    options.deduplicate_ranks = deduplicate;
    const VerifyResult r = verify_plan(PlanSource{yaml, "bench.yaml", {}}, options);
    const auto end = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
    t.trainable = r.structure.ddp_parameters.size();
    t.simulated_ranks = r.simulation.rank_classes.size();
    t.ok = r.ok();
  }
  std::sort(ms.begin(), ms.end());
  t.median_ms = ms[ms.size() / 2];
  return t;
}

// What `hookstream verify PLAN` does in process: the sync model over every rank class and
// iteration, the stream check, the memory and time models (the engine's own), the text report.
Timing measure_verify_command(const std::string& yaml, int repeats, std::string* report_text) {
  std::vector<double> ms, cpu;
  Timing t{};
  auto cpu_ms = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
  };
  for (int i = 0; i < repeats; ++i) {
    const double cpu_start = cpu_ms();
    const auto start = std::chrono::steady_clock::now();
    SimulateOptions options;
    options.races_shown = 3;
    const SimulationReport r = simulate_plan(PlanSource{yaml, "bench.yaml", {}}, "bench.yaml", options);
    const std::string text = render_simulation_text(r, options);
    const auto end = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
    cpu.push_back(cpu_ms() - cpu_start);
    t.trainable = r.ddp.structure.ddp_parameters.size();
    t.simulated_ranks = r.ddp.simulation.rank_classes.size();
    t.ok = r.ok();
    if (report_text != nullptr) *report_text = text;
  }
  std::sort(ms.begin(), ms.end());
  std::sort(cpu.begin(), cpu.end());
  t.median_ms = ms[ms.size() / 2];
  t.median_cpu_ms = cpu[cpu.size() / 2];
  return t;
}

}  // namespace

// `verify_bench --engines [NAME]`: only issue 20's engine rows, or the one whose name starts with
// NAME (for a profiler), and the report of each on stderr.
int main(int argc, char** argv) {
  const bool engines_only = argc > 1 && std::string(argv[1]) == "--engines";
  const std::string only_engine = engines_only && argc > 2 ? argv[2] : "";
  std::printf("| case | trainable tensors | ranks (simulated) | iterations | verify median (ms) |\n");
  std::printf("|---|---|---|---|---|\n");
  auto row = [](const std::string& name, const Timing& t, int ranks, int iterations) {
    std::printf("| %s | %zu | %d (%zu) | %d | %.2f |\n", name.c_str(), t.trainable, ranks, t.simulated_ranks,
                iterations, t.median_ms);
    std::fflush(stdout);
  };
  auto engine_rows = [&]() {
    // Issue 20: FSDP2 / ZeRO plans of Llama-3.3-70B-Instruct (its config.json, as a local model folder).
    const std::filesystem::path dir = std::filesystem::temp_directory_path() / fmt::format("verify-bench-{}", ::getpid());
    const std::filesystem::path model_dir = dir / "Llama-3.3-70B-Instruct";
    std::filesystem::create_directories(model_dir);
    std::filesystem::copy_file(std::string(HOOKSTREAM_SOURCE_DIR) + "/bench/hf-configs/Llama-3.3-70B-Instruct.json", model_dir / "config.json",
                               std::filesystem::copy_options::overwrite_existing);
    std::printf("\n| `hookstream verify` in process, Llama-3.3-70B (full fine-tune unless said) | trainable tensors | ranks (simulated) | iterations | wall median (ms) | CPU median (ms) | CPU / anchor |\n");
    std::printf("|---|---|---|---|---|---|---|\n");
    double anchor_cpu = 0;
    for (const EnginePlan& engine : kEnginePlans) {
      if (std::string(engine.name).rfind(only_engine, 0) != 0 && anchor_cpu > 0) continue;  // the anchor always runs
      std::string text;
      const Timing t = measure_verify_command(engine_plan_yaml(model_dir.string(), engine, 64, 3), 9, &text);
      if (anchor_cpu == 0) anchor_cpu = t.median_cpu_ms;
      std::printf("| %s%s | %zu | 64 (%zu) | 3 | %.2f | %.2f | %.2f |\n", engine.name, t.ok ? "" : " (fails a check: fix search included)", t.trainable,
                  t.simulated_ranks, t.median_ms, t.median_cpu_ms, anchor_cpu > 0 ? t.median_cpu_ms / anchor_cpu : 0.0);
      std::fflush(stdout);
      if (engines_only) std::fprintf(stderr, "%s\n", text.c_str());
    }
    std::filesystem::remove_all(dir);
  };
  if (engines_only) {
    engine_rows();
    return 0;
  }
  row("Llama-3.1-70B LoRA, passing plan", measure(plan_yaml("Llama-3.1-70B", 8, 3, false, false), true, 9), 8, 3);
  row("Llama-3.1-70B LoRA, failing plan + fix search",
      measure(plan_yaml("Llama-3.1-70B", 8, 3, false, true), true, 5), 8, 3);
  row("Llama-3.1-70B LoRA, 8 distinct ranks", measure(plan_yaml("Llama-3.1-70B", 8, 3, true, false), false, 5), 8, 3);
  row("Llama-3.1-70B LoRA, 1,024 identical ranks",
      measure(plan_yaml("Llama-3.1-70B", 1024, 3, false, false), true, 5), 1024, 3);
  row("Llama-3.1-70B LoRA, 1,024 distinct ranks",
      measure(plan_yaml("Llama-3.1-70B", 1024, 3, true, false), false, 3), 1024, 3);
  engine_rows();
  // Linearity: every rank simulated (no de-duplication), one factor at a time.
  const std::string every = " (every rank simulated)";
  for (const char* model : {"Llama-3.1-8B", "Llama-3.1-70B"}) {
    row(fmt::format("scaling: {} LoRA{}", model, every), measure(plan_yaml(model, 64, 3, false, false), false, 3, false), 64, 3);
  }
  for (int ranks : {64, 256, 1024}) {
    row("scaling: ranks" + every, measure(plan_yaml("Llama-3.1-70B", ranks, 3, false, false), false, 3, false), ranks, 3);
  }
  for (int iterations : {1, 3, 9}) {
    row("scaling: iterations" + every, measure(plan_yaml("Llama-3.1-70B", 64, iterations, false, false), false, 3, false), 64, iterations);
  }
  return 0;
}
