// Benchmark for the stream side (issue: streams, races, memory and time):
//   - race checking at no less than 5 million ops per second on the 2-core machine
//   - simulating a Llama-3.1-70B step on 8 ranks (all ops) in under one second
//   - memory and time growing linearly with ops
// Prints Markdown tables on stdout.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fmt/format.h>
#include <string>

#include "sim/cost/device_spec.h"
#include "sim/streams/race_checker.h"
#include "sim/streams/stream_expansion.h"
#include "sim/streams/stream_protocol.h"
#include "sim/cost/time_model.h"

using namespace hookstream;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

Plan llama70b(int ranks, int accumulation) {
  return parse_plan(fmt::format("base_model: Llama-3.1-70B\nsequence_len: 4096\ngradient_checkpointing: true\n"
                                "activation_offloading: true\ngradient_accumulation_steps: {}\ntiled_mlp: true\n"
                                "tiled_mlp_num_shards: 8\nhookstream:\n  world_size: {}\n  iterations: 1\n",
                                accumulation, ranks),
                    "bench.yaml");
}

struct StepTiming {
  size_t ops = 0;
  double expand_s = 0, race_s = 0, schedule_s = 0;
  bool races = false;
};

StepTiming time_step(const Plan& plan, const DeviceSpec& device, int repeats) {
  const ModelStructure structure = build_model_structure(plan);
  const StreamProtocol protocol = load_stream_protocol("double_buffer_events");
  StepTiming best{};
  for (int r = 0; r < repeats; ++r) {
    StepTiming t;
    auto start = std::chrono::steady_clock::now();
    ExpansionOptions options;
    options.all_ranks = true;
    const EventModel model = expand_step(plan, structure, protocol, options);
    t.expand_s = seconds_since(start);
    t.ops = model.ops.size();
    start = std::chrono::steady_clock::now();
    RaceCheckOptions check;
    check.suggest_fixes = false;
    t.races = !check_races(model, check).ok();
    t.race_s = seconds_since(start);
    start = std::chrono::steady_clock::now();
    const Schedule schedule = schedule_step(model, device);
    (void)schedule;
    t.schedule_s = seconds_since(start);
    if (r == 0 || t.expand_s + t.race_s + t.schedule_s < best.expand_s + best.race_s + best.schedule_s) best = t;
  }
  return best;
}

}  // namespace

int main() {
  const DeviceSpec device = find_device_spec("H100-SXM");
  std::printf("| step (all ranks expanded) | ops | expand (s) | race check (s) | race check (M ops/s) | time-model schedule (s) | total (s) |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  auto row = [](const std::string& name, const StepTiming& t) {
    std::printf("| %s | %zu | %.3f | %.3f | %.1f | %.3f | %.3f |\n", name.c_str(), t.ops, t.expand_s, t.race_s,
                t.ops / t.race_s / 1e6, t.schedule_s, t.expand_s + t.race_s + t.schedule_s);
    std::fflush(stdout);
  };
  row("Llama-3.1-70B, 8 ranks, 1 micro-step, offload double_buffer_events, tiled MLP 8 shards", time_step(llama70b(8, 1), device, 3));
  // Scaling: ops grow with ranks and micro-steps; time should follow ops.
  for (int ranks : {1, 2, 4, 8}) row(fmt::format("scaling: {} rank(s), 16 micro-steps", ranks), time_step(llama70b(ranks, 16), device, 2));
  return 0;
}
