// Every check of a plan in one report (sim/verify/simulation_report.h): per-op memory against the phase
// points, chunked cross-entropy in the memory and time models, the critical path against the
// schedule, and stream/memory fixes that hold when the plan is simulated again with them.
#include <catch2/catch.hpp>
#include <algorithm>
#include <map>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "sim/streams/dependency_graph.h"
#include "sim/cost/device_spec.h"
#include "sim/cost/memory_model.h"
#include "sim/cost/plan_search.h"
#include "sim/verify/simulation_report.h"
#include "sim/cost/step_prediction.h"
#include "sim/streams/stream_expansion.h"
#include "sim/streams/stream_protocol.h"
#include "tests/temp_dir.h"

using namespace hookstream;

namespace {

Plan plan_from(const std::string& yaml) { return parse_plan(yaml, "plan.yaml"); }

int64_t category(const MemoryPoint& p, MemoryCategory c) {
  const auto it = p.bytes.find(c);
  return it == p.bytes.end() ? 0 : it->second;
}

// The memory model with and without rank 0's expanded step.
struct BothModels {
  MemoryEstimate phases, ops;
  EventModel step;
};
BothModels both(const Plan& plan) {
  const ModelStructure structure = build_model_structure(plan);
  BothModels m;
  m.step = expand_step(plan, structure, load_stream_protocol(plan.activation_offloading ? plan.offload_protocol_name() : "none"));
  const DeviceSpec device = find_device_spec(plan.gpu);
  m.phases = estimate_memory(plan, structure, device);
  MemoryModelOptions options;
  options.step = &m.step;
  m.ops = estimate_memory(plan, structure, device, options);
  return m;
}

// ctest runs test cases as parallel processes: each has its own directory, removed when it exits.
std::string write_plan(const std::string& name, const std::string& text) {
  static const hookstream::test::TempDir dir("hookstream-simulation-report-test-" + std::to_string(getpid()));
  const std::string path = (dir / (name + ".yaml")).string();
  std::ofstream(path) << text;
  return path;
}

SimulationReport simulate(const std::string& path, const std::vector<std::string>& set = {}, const std::string& protocol = "") {
  LoadOptions load;
  load.set = set;
  SimulateOptions options;
  options.protocol = protocol;
  return simulate_plan(read_plan_source(path, load), path, options);
}

std::vector<std::string> as_set(const std::vector<FixChange>& changes) {
  std::vector<std::string> set;
  for (const FixChange& c : changes) set.push_back(c.key + "=" + c.value);
  return set;
}

const std::string kOffload =
    "base_model: tiny-llama\nsequence_len: 8\nmicro_batch_size: 1\ngradient_checkpointing: true\n"
    "activation_offloading: true\nddp_find_unused_parameters: false\nhookstream:\n  world_size: 2\n  iterations: 1\n";

}  // namespace

TEST_CASE("per-op memory: the same peak as the phase points, named by its op", "[memory]") {
  for (const std::string& yaml :
       {std::string("base_model: Llama-3.1-8B\nsequence_len: 4096\nadapter: lora\nlora_target_linear: true\n"),
        std::string("base_model: Llama-3.1-8B\nsequence_len: 16384\nadapter: lora\nlora_target_linear: true\n"
                    "gradient_checkpointing: true\ntiled_mlp: true\n"),
        std::string("base_model: tiny-llama\nsequence_len: 64\nhookstream:\n  world_size: 2\n"),
        std::string("base_model: Llama-3.1-8B\nsequence_len: 8192\ngradient_checkpointing: true\nactivation_offloading: true\n")}) {
    INFO(yaml);
    const BothModels m = both(plan_from(yaml));
    CHECK(m.ops.device_peak.total() == m.phases.device_peak.total());
    REQUIRE(m.ops.device_peak.op >= 0);
    CHECK(m.step.ops[m.ops.device_peak.op].name == m.ops.device_peak.at);
    CHECK(m.ops.device_points.size() == m.step.ops.size());  // one rank, one device: a point per op
    CHECK(m.ops.host_peak.total() == m.phases.host_peak.total());
    if (m.ops.host_peak.total() > 0) {  // offloaded: the host peak names the last D2H copy
      REQUIRE(m.ops.host_peak.op >= 0);
      CHECK(m.ops.host_peak.at.rfind("D2H ", 0) == 0);
      for (size_t i = m.ops.host_peak.op + 1; i < m.step.ops.size(); ++i) CHECK(m.step.ops[i].copy != CopyKind::DeviceToHost);
    }
  }
}

TEST_CASE("per-op memory: later micro-steps run forward with the earlier gradients alive", "[memory]") {
  const Plan plan = plan_from("base_model: Llama-3.1-8B\nsequence_len: 16384\ngradient_accumulation_steps: 2\n"
                              "adapter: lora\nlora_target_linear: true\ngradient_checkpointing: true\n");
  const BothModels m = both(plan);
  int64_t first_forward_grads = -1, second_forward_grads = -1;
  for (const MemoryPoint& p : m.ops.device_points) {
    const Op& op = m.step.ops[p.op];
    if (op.name != "layer 0 forward") continue;
    (op.micro_step == 0 ? first_forward_grads : second_forward_grads) = category(p, MemoryCategory::Gradients);
  }
  CHECK(first_forward_grads == 0);
  CHECK(second_forward_grads > 0);
  // The logits bound the step; at micro-step 1's loss every LoRA gradient of micro-step 0 is alive
  // too, which the phase points (one micro-step) do not see.
  CHECK(m.ops.device_peak.total() > m.phases.device_peak.total());
  CHECK(m.step.ops[m.ops.device_peak.op].micro_step == 1);
}

TEST_CASE("chunked cross-entropy: one chunk's fp32 tensors, the full bf16 logits, one op per chunk", "[memory][time]") {
  const std::string base = "base_model: Llama-3.1-8B\nsequence_len: 16384\nadapter: lora\nlora_target_linear: true\n"
                           "gradient_checkpointing: true\n";
  const Plan stock = plan_from(base);
  const Plan chunked = plan_from(base + "chunked_cross_entropy: true\n");
  const Plan sixteen = plan_from(base + "chunked_cross_entropy: true\nchunked_cross_entropy_num_chunks: 16\n");
  const int64_t t = 16384, vocab = stock.model.vocab_size;
  const auto logits = [&](const Plan& plan) {
    const MemoryEstimate e = estimate_memory(plan, build_model_structure(plan), find_device_spec("H100"));
    for (const MemoryPoint& p : e.device_points) {
      if (p.phase == "loss") return category(p, MemoryCategory::LogitsAndLoss);
    }
    return int64_t{-1};
  };
  // Unchunked: log_softmax's backward holds three float32 logits (its saved output, the gradient in,
  // the gradient out); measured on an H100 with the bundled default plan.
  CHECK(logits(stock) == 3 * device_allocation_bytes(vocab * t * 4));
  // axolotl's chunks of the full logits: the logits, one chunk's float32 tensors, the valid-token count.
  CHECK(logits(chunked) == device_allocation_bytes(vocab * t * 2) + 2 * device_allocation_bytes(vocab * (t / 8) * 4) +
                               device_allocation_bytes(t * 4));
  CHECK(logits(sixteen) < logits(chunked));
  // hookstream.chunked_loss: recompute_lm_head: the full logits never exist, one chunk's do.
  const Plan per_chunk = plan_from(base + "chunked_cross_entropy: true\nhookstream:\n  chunked_loss: recompute_lm_head\n");
  CHECK(logits(per_chunk) == device_allocation_bytes(vocab * (t / 8) * 2) + 2 * device_allocation_bytes(vocab * (t / 8) * 4));
  // Without chunking the key has nothing to change.
  CHECK(logits(plan_from(base + "hookstream:\n  chunked_loss: recompute_lm_head\n")) == logits(stock));
  CHECK_THROWS_WITH(plan_from(base + "chunked_cross_entropy: true\nhookstream:\n  chunked_loss: fused\n"),
                    Catch::Contains("hookstream.chunked_loss") && Catch::Contains("recompute_lm_head"));

  const ModelStructure structure = build_model_structure(chunked);
  const EventModel step = expand_step(chunked, structure, load_stream_protocol("none"));
  int forward_chunks = 0, backward_chunks = 0;
  int64_t forward_bytes = 0;
  for (const Op& op : step.ops) {
    if (op.name.rfind("loss forward chunk ", 0) == 0) {
      ++forward_chunks;
      forward_bytes += op.bytes;
    }
    backward_chunks += op.name.rfind("loss backward chunk ", 0) == 0;
    CHECK(op.name != "loss forward");
  }
  CHECK(forward_chunks == 8);
  CHECK(backward_chunks == 8);
  CHECK(forward_bytes == vocab * t * 2 * 2);  // two reads of the bf16 logits, fused by inductor
  // The fused chunks move fewer bytes than stock transformers' upcast + log_softmax: the roofline's
  // byte counts (axolotl's compiled chunks). The H100 profile costs `hookstream run`'s chunked loss,
  // which recomputes each chunk's lm_head GEMM in backward (sim/cost/profiled_costs.cc).
  DeviceSpec h100 = find_device_spec("H100");
  h100.profile.reset();
  CHECK(predict_step(chunked, structure, h100).schedule.step_ns < predict_step(stock, build_model_structure(stock), h100).schedule.step_ns);
}

TEST_CASE("critical path: its length is the predicted step time, and it follows the slow stream", "[time]") {
  for (const std::string& yaml :
       {kOffload, std::string("base_model: Llama-3.1-8B\nsequence_len: 8192\nadapter: lora\nlora_target_linear: true\n"
                              "gradient_checkpointing: true\nactivation_offloading: true\nhookstream:\n  world_size: 8\n")}) {
    const Plan plan = plan_from(yaml);
    const StepPrediction p = predict_step(plan, build_model_structure(plan), find_device_spec("H100"));
    const CriticalPath path = scheduled_critical_path(p.schedule.model);
    CHECK(path.length == Approx(p.schedule.step_ns).epsilon(1e-9));
    REQUIRE_FALSE(path.ops.empty());
    CHECK(p.schedule.model.ops[path.ops.back()].name == "optimizer step");
  }
  // Pageable copies on an L40S-class link: the copies bound the step and the path goes through them.
  const Plan slow = plan_from(kOffload + "  offload_protocol: single_buffer\n");
  DeviceSpec device = find_device_spec("H100");
  device.host_link.pinned_h2d_gbps = device.host_link.pinned_d2h_gbps = 1e-6;
  const StepPrediction p = predict_step(slow, build_model_structure(slow), device);
  const CriticalPath path = scheduled_critical_path(p.schedule.model);
  int copies = 0;
  for (int op : path.ops) copies += p.schedule.model.ops[op].kind == OpKind::Copy;
  CHECK(copies == 8);  // every D2H and H2D of the 4 layers
  CHECK(path.length == Approx(p.schedule.step_ns).epsilon(1e-9));
}

TEST_CASE("simulate_plan: race fixes are protocols that pass every check when simulated again", "[streams]") {
  const std::string path = write_plan("racy", kOffload + "  offload_protocol: double_buffer_no_events\n");
  const SimulationReport report = simulate(path);
  CHECK(report.ddp.ok());
  CHECK_FALSE(report.streams.ok());
  CHECK_FALSE(report.ok());
  REQUIRE_FALSE(report.stream_fixes.empty());
  for (const VerifiedFix& fix : report.stream_fixes) {
    REQUIRE(fix.cost.has_value());
    const SimulationReport again = simulate(path, as_set(fix.changes));
    CHECK(again.ok());
    CHECK(again.cost().step_seconds == Approx(fix.cost->step_seconds));
    CHECK(again.cost().peak_device_bytes == fix.cost->peak_device_bytes);
  }
  // The shown race's sync is verified and costed.
  REQUIRE_FALSE(report.streams.races.races.empty());
  CHECK(report.streams.races.races[0].fix.verified);
  REQUIRE(report.streams.fix_costs[0].has_value());
  CHECK(report.streams.fix_costs[0]->step_seconds > 0);
  std::filesystem::remove(path);
}

TEST_CASE("simulate_plan: oom fixes make the plan fit and keep its DDP schedule clean", "[memory]") {
  const std::string path = write_plan("oom", "base_model: meta-llama/Llama-3.1-8B\nsequence_len: 32768\nadapter: lora\n"
                                             "lora_target_linear: true\nhookstream:\n  world_size: 1\n  iterations: 1\n");
  const SimulationReport report = simulate(path);
  CHECK(report.ddp.ok());
  REQUIRE(report.memory.estimate.oom.has_value());
  CHECK(report.memory.estimate.oom->required_bytes > report.memory.estimate.capacity_bytes);
  REQUIRE_FALSE(report.memory_fixes.empty());
  for (const VerifiedFix& fix : report.memory_fixes) {
    REQUIRE(fix.cost.has_value());
    CHECK(fix.cost->peak_device_bytes <= report.memory.estimate.capacity_bytes);
    const SimulationReport again = simulate(path, as_set(fix.changes));
    CHECK(again.ok());
  }
  // A candidate that still does not fit is reported as rejected, with the reason.
  bool chunked_rejected = false;
  for (const RejectedFix& r : report.rejected) chunked_rejected |= r.changes.front().key == "chunked_cross_entropy";
  CHECK(chunked_rejected);
  std::filesystem::remove(path);
}

TEST_CASE("plan search tries chunked cross-entropy when the logits dominate", "[memory]") {
  const std::string dominated = write_plan("logits", "base_model: meta-llama/Llama-3.1-8B\nsequence_len: 16384\nadapter: lora\n"
                                                     "lora_target_linear: true\ngradient_checkpointing: true\n"
                                                     "activation_offloading: true\nhookstream:\n  iterations: 1\n");
  PlanSearchOptions options;
  options.top = 1;
  // The H100 file alone, without profiles/H100-SXM.yaml beside it: the roofline's byte counts of
  // axolotl's compiled chunks (the profile costs `hookstream run`'s chunked loss, whose backward
  // recomputes each chunk's lm_head GEMM: slower than the stock loss where memory is not short).
  const std::filesystem::path roofline = std::filesystem::temp_directory_path() / "hookstream-roofline-H100-SXM.yaml";
  std::filesystem::copy_file(std::string(HOOKSTREAM_SOURCE_DIR) + "/devices/H100-SXM.yaml", roofline,
                             std::filesystem::copy_options::overwrite_existing);
  options.gpu = roofline.string();
  const PlanSearchResult result = search_plans(read_plan_source(dominated, {}), options);
  std::filesystem::remove(roofline);
  CHECK(result.explored_chunked_loss);
  REQUIRE_FALSE(result.best.empty());
  bool chunked = false;
  for (const FixChange& change : result.best.front().changes) chunked |= change.key == "chunked_cross_entropy" && change.value == "true";
  CHECK(chunked);  // fewer loss bytes: the fastest candidate chunks the loss
  std::filesystem::remove(dominated);
}

TEST_CASE("plan search trades FSDP's reshard_after_forward instead of DDP's bucket cap", "[memory][engine]") {
  const std::string fsdp = write_plan("fsdp2-search", "base_model: tiny-llama\nsequence_len: 64\nfsdp_version: 2\nfsdp_config:\n"
                                                      "  transformer_layer_cls_to_wrap: LlamaDecoderLayer\n"
                                                      "hookstream:\n  world_size: 2\n  iterations: 2\n");
  PlanSearchOptions options;
  options.top = 100;
  const PlanSearchResult result = search_plans(read_plan_source(fsdp, {}), options);
  REQUIRE_FALSE(result.best.empty());
  bool kept = false;
  for (const PlanCandidate& candidate : result.best) {
    for (const FixChange& change : candidate.changes) {
      CHECK(change.key != "ddp_bucket_cap_mb");
      kept |= change.key == "fsdp_config.reshard_after_forward" && change.value == "false";
    }
  }
  CHECK(kept);  // verified by the FSDP2 model and ranked by the engine's memory and time
  std::filesystem::remove(fsdp);
}

// Liger's kernels (axolotl's LigerPlugin) are one more setting the search tries on a model type that
// has Liger's patch: the plugin joins the user's own plugins list, and the candidate saves less
// than its twin without Liger.
TEST_CASE("plan search tries Liger's kernels with the plugin added to the user's plugins", "[memory][liger]") {
  const std::string plan = write_plan("liger-search", "base_model: tiny-llama\nsequence_len: 256\nadapter: lora\nlora_r: 8\n"
                                                      "lora_target_linear: true\nplugins:\n  - my.own.Plugin\n"
                                                      "hookstream:\n  world_size: 1\n  iterations: 2\n");
  PlanSearchOptions options;
  options.top = 1000;
  const PlanSearchResult result = search_plans(read_plan_source(plan, {}), options);
  REQUIRE_FALSE(result.best.empty());
  auto without_liger = [](std::vector<FixChange> changes) {
    changes.erase(std::remove_if(changes.begin(), changes.end(),
                                 [](const FixChange& c) { return c.key == "plugins" || c.key.rfind("liger_", 0) == 0; }),
                  changes.end());
    return changes;
  };
  auto key_of = [](const std::vector<FixChange>& changes) {
    std::string key;
    for (const FixChange& c : changes) key += c.key + "=" + c.value + ";";
    return key;
  };
  std::map<std::string, const PlanCandidate*> plain;
  for (const PlanCandidate& candidate : result.best) {
    if (without_liger(candidate.changes).size() == candidate.changes.size()) plain[key_of(candidate.changes)] = &candidate;
  }
  int compared = 0;
  for (const PlanCandidate& candidate : result.best) {
    const std::vector<FixChange> rest = without_liger(candidate.changes);
    if (rest.size() == candidate.changes.size()) continue;
    for (const FixChange& change : candidate.changes) {
      if (change.key == "plugins") CHECK(change.value == "[my.own.Plugin, axolotl.integrations.liger.LigerPlugin]");
    }
    CHECK(candidate.changes.size() == rest.size() + 3);  // plugins, liger_rms_norm, liger_glu_activation
    const auto twin = plain.find(key_of(rest));
    if (twin == plain.end()) continue;
    CHECK(candidate.peak_bytes < twin->second->peak_bytes);
    ++compared;
  }
  CHECK(compared > 0);
  std::filesystem::remove(plan);
  // A model type without Liger's patch in hookstream (qwen3_vl) gets no Liger candidate.
  const std::string vl = write_plan("liger-search-vl", "base_model: tiny-vl\nsequence_len: 256\n"
                                                       "hookstream:\n  world_size: 1\n  iterations: 2\n");
  const PlanSearchResult other = search_plans(read_plan_source(vl, {}), options);
  REQUIRE_FALSE(other.best.empty());
  for (const PlanCandidate& candidate : other.best) CHECK(without_liger(candidate.changes).size() == candidate.changes.size());
  std::filesystem::remove(vl);
}
