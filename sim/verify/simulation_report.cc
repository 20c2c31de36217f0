#include "sim/verify/simulation_report.h"

#include "sim/inputs/axolotl_config/config_report.h"

#include <fmt/format.h>
#include <filesystem>
#include <map>

#include "sim/cost/calibration.h"
#include "sim/cost/device_spec.h"
#include "sim/inputs/input_error.h"
#include "sim/verify/report.h"

namespace hookstream {

namespace {

nlohmann::json op_json(const EventModel& model, int index) {
  const Op& op = model.ops[index];
  nlohmann::json j = {{"index", index},
                      {"name", op.name},
                      {"kind", to_string(op.kind)},
                      {"rank", op.rank},
                      {"stream", op.stream >= 0 ? model.streams[op.stream].name : "host"},
                      {"device", op.stream >= 0 ? model.streams[op.stream].device : -1},
                      {"iteration", op.iteration},
                      {"micro_step", op.micro_step},
                      {"phase", op.phase}};
  j["layer"] = op.layer >= 0 ? nlohmann::json(op.layer) : nlohmann::json(nullptr);
  return j;
}

// Two races share a pattern when they differ only in layer, micro-step, rank and slot: the same kind,
// buffer family, op kinds, streams and phases, and the same layer distance.
std::string race_pattern(const EventModel& model, const Race& race) {
  const Op& a = model.ops[race.earlier_op];
  const Op& b = model.ops[race.later_op];
  const std::string& buffer = model.buffers[race.buffer].name;
  auto side = [&](const Op& op) {
    return std::string(to_string(op.kind)) + "/" + (op.stream >= 0 ? model.streams[op.stream].name : "host") + "/" + op.phase;
  };
  return race.kind() + "|" + buffer.substr(0, buffer.find('[')) + "|" + side(a) + "|" + side(b) + "|" +
         std::to_string(a.layer - b.layer);
}

// The stream, memory and time checks of one plan.
struct Checks {
  StreamSection streams;
  MemorySection memory;
  TimeSection time;
};

std::string parent_dir(const std::string& path) { return std::filesystem::path(path).parent_path().string(); }

// `protocol`: a --protocol override (name or path), empty for the plan's own. `ddp`: the DDP
// simulation of this plan, whose buckets and rank classes the expansion follows (null: the
// Reducer's initial buckets, rank 0). `detail`: fix suggestions for races, their costs and the
// critical path (the full report); without it only pass/fail and the cost (fix verification).
// `devices`: the GPUs already read by this simulate_plan call (every candidate of a fix search runs
// on the plan's GPU).
Checks run_checks(const Plan& plan, const ModelStructure& structure, const SyncSimulation* ddp, const std::string& protocol,
                  const std::string& plan_dir, const SimulateOptions& options, bool detail, DeviceSpecCache& devices) {
  Checks checks;
  StreamSection& streams = checks.streams;
  streams.protocol_file = resolve_stream_protocol(protocol.empty() ? plan.offload_protocol_name() : protocol, plan_dir);
  streams.protocol = load_stream_protocol_file(streams.protocol_file);
  ExpansionOptions expansion = options.expansion;
  if (ddp != nullptr) {
    // The Reducer's buckets as the DDP simulation saw them: rebuilt after the first iteration.
    const bool rebuilt = expansion.iteration > 0 && ddp->rebuilt_buckets.has_value();
    if (!expansion.buckets && (rebuilt || !ddp->initial_buckets.buckets.empty())) {
      expansion.buckets = rebuilt ? &*ddp->rebuilt_buckets : &ddp->initial_buckets;
    }
    // One representative per rank class: ranks with the same per-rank plan issue the same ops.
    if (expansion.ranks.empty() && !expansion.all_ranks) {
      for (const std::vector<int>& members : ddp->rank_classes) expansion.ranks.push_back(members.front());
    }
  }
  streams.step = expand_step(plan, structure, streams.protocol, expansion);
  RaceCheckOptions races = options.races;
  if (!detail) {
    races.suggest_fixes = false;
    races.max_races = 1;
  }
  streams.races = check_races(streams.step, races);
  // Fix verification reads the first failure only (check_failure: streams, then memory), and the
  // cost only of a candidate that passes: a candidate that still races is rejected here.
  if (!detail && !streams.ok()) return checks;

  // Memory and time: rank 0's step with the same protocol and buckets (every rank holds a full
  // replica and, with the same per-rank plan, runs the same ops). With a --protocol override the
  // memory model sizes the reload buffers from the override.
  Plan modelled = plan;
  if (!protocol.empty()) modelled.offload_protocol = streams.protocol_file;
  // Timed in the steady state: DDP's buckets as rebuilt after the first iteration (the race check
  // above covers the expanded iteration's own buckets).
  ExpansionOptions rank0 = expansion;
  rank0.ranks = {0};
  rank0.all_ranks = false;
  if (ddp != nullptr) rank0.buckets = &steady_state_buckets(*ddp);
  const bool same = (expansion.ranks == std::vector<int>{0} || (expansion.ranks.empty() && !expansion.all_ranks)) &&
                    rank0.buckets == expansion.buckets;
  const EventModel step = same ? streams.step : expand_step(plan, structure, streams.protocol, rank0);
  const DeviceSpec& device = devices.find(plan.gpu);
  std::optional<Calibration> calibration;
  if (plan.calibration) calibration = load_calibration(*plan.calibration);
  const Calibration* measured = calibration ? &*calibration : nullptr;
  MemoryEstimate memory = estimate_step_memory(modelled, structure, device, step);
  if (!detail && memory.oom) {
    // Still out of memory: rejected with the memory model's message, no time model run.
    checks.memory.estimate = std::move(memory);
    return checks;
  }
  StepPrediction prediction = predict_step_time(modelled, structure, device, step, measured, std::move(memory));
  checks.memory.estimate = std::move(prediction.memory);
  checks.time.device = device.name;
  checks.time.schedule = std::move(prediction.schedule);
  checks.time.tokens_per_step = prediction.tokens_per_step;
  checks.time.tokens_per_second = prediction.tokens_per_second;
  checks.time.engine = std::move(prediction.engine);
  if (!detail) return checks;
  checks.time.critical_path = scheduled_critical_path(checks.time.schedule.model);

  // The cost of each shown race's verified sync: the race-checked step with the sync inserted,
  // scheduled (a sync adds no memory: the peak stays the plan's). When the timed step is another
  // expansion (steady-state buckets, rank 0 only), the sync's cost is what it adds to the
  // race-checked step, added to the timed step's time.
  streams.fix_costs.assign(streams.races.races.size(), std::nullopt);
  std::map<std::string, bool> patterns;
  TimeModelOptions timing;
  timing.calibration = measured;
  timing.collective_ranks = plan.world_size;
  std::optional<double> race_checked_ns;  // the race-checked step without a fix, when it is not the timed one
  for (size_t i = 0; i < streams.races.races.size(); ++i) {
    const Race& race = streams.races.races[i];
    if (!patterns.emplace(race_pattern(streams.step, race), true).second) continue;
    if (patterns.size() > options.races_shown) break;
    if (!race.fix.verified) continue;
    const Schedule fixed = schedule_step(with_sync(streams.step, race.fix), device, timing);
    double step_ns = fixed.step_ns;
    if (!same) {
      if (!race_checked_ns) race_checked_ns = schedule_step(streams.step, device, timing).step_ns;
      step_ns = checks.time.schedule.step_ns + (fixed.step_ns - *race_checked_ns);
    }
    streams.fix_costs[i] = PlanCost{device.name, step_ns * 1e-9, checks.memory.estimate.device_peak.total(),
                                    checks.memory.estimate.host_peak.total(), {}, {}};
  }
  return checks;
}

// "" when the stream and memory checks pass, otherwise the first failure in one line.
std::string check_failure(const Checks& checks) {
  if (!checks.streams.ok()) {
    const Race& race = checks.streams.races.races.front();
    return fmt::format("{} race(s) with protocol {}: {} on {}", checks.streams.races.race_count, checks.streams.protocol.name,
                       race.kind(), checks.streams.step.buffers[race.buffer].name);
  }
  if (!checks.memory.ok()) return checks.memory.estimate.oom->message;
  return "";
}

PlanCost cost_of(const Checks& checks) {
  return PlanCost{checks.time.device, checks.time.schedule.step_ns * 1e-9, checks.memory.estimate.device_peak.total(),
                  checks.memory.estimate.host_peak.total(), {}, {}};
}

// Plan changes that remove races: a built-in protocol the race checker proves correct.
std::vector<VerifiedFix> stream_candidates(const Plan& plan, const StreamSection& streams) {
  std::vector<VerifiedFix> out;
  if (!plan.activation_offloading) {
    if (streams.protocol.name != "none") {
      out.push_back({{{"hookstream.offload_protocol", "none"}}, "without activation offloading no layer needs a copy stream", std::nullopt});
    }
    return out;
  }
  if (streams.protocol.name != "double_buffer_events") {
    out.push_back({{{"hookstream.offload_protocol", "double_buffer_events"}},
                   "two reload buffers, each reused only after an event recorded behind its last reader", std::nullopt});
  }
  if (streams.protocol.name != "single_buffer") {
    out.push_back({{{"hookstream.offload_protocol", "single_buffer"}},
                   "one reload buffer; the copy stream waits for compute before overwriting it (less overlap)", std::nullopt});
  }
  return out;
}

// Plan changes that lower the peak, in the order users reach for them.
std::vector<VerifiedFix> memory_candidates(const Plan& plan, const MemoryEstimate& estimate) {
  std::vector<VerifiedFix> out;
  auto add = [&](std::vector<FixChange> changes, std::string rationale) {
    out.push_back(VerifiedFix{std::move(changes), std::move(rationale), std::nullopt});
  };
  if (!plan.gradient_checkpointing) {
    add({{"gradient_checkpointing", "true"}}, "checkpointing keeps only each decoder layer's input and recomputes the layer in backward");
  } else if (!plan.activation_offloading) {
    add({{"activation_offloading", "true"}}, "checkpointed layer inputs move to pinned host memory; reload buffers stay on the GPU");
  } else if (plan.offload_layers) {
    add({{"hookstream.offload_layers", "all"}}, "every checkpointed layer's input moves to pinned host memory, not only offload_layers'");
  }
  const auto logits = estimate.device_peak.bytes.find(MemoryCategory::LogitsAndLoss);
  if (!plan.chunked_cross_entropy && logits != estimate.device_peak.bytes.end() && logits->second > 0) {
    add({{"chunked_cross_entropy", "true"}}, "the loss upcasts and normalizes one chunk of the logits at a time");
  }
  if (!plan.tiled_mlp) add({{"tiled_mlp", "true"}}, "the MLP's intermediate-size tensors exist for one sequence shard at a time");
  const EngineCostSettings engine = engine_cost_settings(plan);
  if (plan.world_size > 1 && !engine.sharded && !plan.gradient_as_bucket_view) {
    add({{"hookstream.gradient_as_bucket_view", "true"}}, "gradients become views into DDP's buckets instead of a second copy");
  }
  // FSDP's own memory savers (sim/cost/engine_cost.h).
  const bool fsdp = engine.sharded && (engine.kind == EngineKind::Fsdp1 || engine.kind == EngineKind::Fsdp2);
  if (fsdp && !engine.reshard_after_forward && engine.shard_ranks > 1) {
    add({{"fsdp_config.reshard_after_forward", "true"}}, "each layer is resharded after its forward and all-gathered again in backward");
  }
  if (fsdp && !engine.offload_params) {
    add({{"fsdp_config.offload_params", "true"}}, "sharded parameters, gradients and optimizer states move to pinned host memory; the optimizer steps on the CPU");
  }
  // ZeRO's memory savers are DeepSpeed JSON settings (deepspeed/runtime/zero/config.py); a plan
  // whose `deepspeed:` names a file gets them as a patch to that file (config_patch.h).
  if (plan.engine.kind == EngineKind::DeepSpeed && plan.engine.deepspeed) {
    const DeepSpeedConfig& ds = *plan.engine.deepspeed;
    if (ds.zero_stage < 3 && plan.world_size > 1) {
      add({{"deepspeed.zero_optimization.stage", "3"}},
          "ZeRO-3 partitions the 16-bit parameters as well as gradients and optimizer states, all-gathering each module's "
          "parameters for its forward and backward");
    }
    const bool optimizer_offloaded = ds.offload_optimizer == "cpu" || ds.offload_optimizer == "nvme";
    if (ds.zero_stage >= 1 && !optimizer_offloaded) {
      add({{"deepspeed.zero_optimization.offload_optimizer.device", "cpu"}},
          "ZeRO-Offload: the fp32 master weights, optimizer states and fp32 gradients move to pinned host memory; the "
          "optimizer steps on the CPU");
    }
    if (ds.zero_stage == 3 && ds.offload_param != "cpu" && ds.offload_param != "nvme") {
      add({{"deepspeed.zero_optimization.offload_param.device", "cpu"}},
          "ZeRO-3 keeps the 16-bit parameter partitions in pinned host memory and copies each module's in for its all-gather");
    }
  }
  if (plan.micro_batch_size > 1 && plan.micro_batch_size % 2 == 0) {
    add({{"micro_batch_size", std::to_string(plan.micro_batch_size / 2)},
         {"gradient_accumulation_steps", std::to_string(2 * std::max(1, plan.gradient_accumulation_steps))}},
        "half the micro-batch, twice the accumulation: the same tokens per optimizer step");
  }
  return out;
}

// Verifies stream/memory candidates by running every check on the changed plan: a fix is listed
// only when the streams and memory pass and, if the plan's DDP schedule was clean, it stays clean.
void search_check_fixes(SimulationReport& report, const PlanSource& source, const std::string& plan_dir,
                        const SimulateOptions& options, DeviceSpecCache& devices) {
  auto attempt = [&](const std::vector<FixChange>& changes, std::string& failure) -> std::optional<PlanCost> {
    PlanSource changed = source;
    bool protocol_changed = false;
    for (const FixChange& change : changes) {
      changed.options.set.push_back(change.key + "=" + change.value);
      protocol_changed |= change.key == "hookstream.offload_protocol";
    }
    Plan plan;
    try {
      plan = parse_plan(changed.yaml_text, changed.source, changed.options);
    } catch (const InputError& e) {
      failure = std::string("invalid with this plan: ") + e.what();
      return std::nullopt;
    }
    const ModelStructure structure = build_model_structure(plan);
    const SyncSimulation ddp = simulate_gradient_sync(plan, structure);
    if (report.ddp.ok() && !ddp.ok()) {
      const Finding& f = ddp.findings.front();
      failure = std::string(to_string(f.kind)) + (f.parameter.empty() ? "" : " at " + f.parameter);
      return std::nullopt;
    }
    // A fix that names a protocol replaces a --protocol override; any other keeps it.
    const Checks checks = run_checks(plan, structure, &ddp, protocol_changed ? "" : options.protocol, plan_dir, options, false, devices);
    failure = check_failure(checks);
    if (!failure.empty()) return std::nullopt;
    return cost_of(checks);
  };
  auto verify = [&](std::vector<VerifiedFix> candidates, std::vector<VerifiedFix>& into) {
    spell_as_written(candidates, source);
    for (VerifiedFix& fix : candidates) {
      std::string failure;
      fix.cost = attempt(fix.changes, failure);
      if (fix.cost) into.push_back(fix);
      else report.rejected.push_back(RejectedFix{fix.changes, failure});
    }
    if (!into.empty() || candidates.size() < 2) return;
    // No single change is enough: pairs, then everything at once.
    for (size_t i = 0; i < candidates.size(); ++i) {
      for (size_t j = i + 1; j < candidates.size(); ++j) {
        VerifiedFix pair{candidates[i].changes, candidates[i].rationale + "; and " + candidates[j].rationale, std::nullopt};
        pair.changes.insert(pair.changes.end(), candidates[j].changes.begin(), candidates[j].changes.end());
        std::string failure;
        pair.cost = attempt(pair.changes, failure);
        if (pair.cost) into.push_back(pair);
      }
    }
    if (!into.empty() || candidates.size() < 3) return;
    VerifiedFix all{{}, "all of: ", std::nullopt};
    for (size_t i = 0; i < candidates.size(); ++i) {
      all.changes.insert(all.changes.end(), candidates[i].changes.begin(), candidates[i].changes.end());
      all.rationale += (i ? "; " : "") + candidates[i].rationale;
    }
    std::string failure;
    all.cost = attempt(all.changes, failure);
    if (all.cost) into.push_back(all);
    else report.rejected.push_back(RejectedFix{all.changes, failure});
  };
  if (!report.streams.ok()) verify(stream_candidates(report.ddp.plan, report.streams), report.stream_fixes);
  if (!report.memory.ok()) verify(memory_candidates(report.ddp.plan, report.memory.estimate), report.memory_fixes);
}

}  // namespace

PlanCost SimulationReport::cost() const {
  return PlanCost{time.device, time.schedule.step_ns * 1e-9, memory.estimate.device_peak.total(),
                  memory.estimate.host_peak.total(), {}, {}};
}

SimulationReport simulate_plan(const PlanSource& source, const std::string& plan_path, const SimulateOptions& options) {
  SimulationReport report;
  const std::string plan_dir = parent_dir(plan_path);
  DeviceSpecCache devices;
  VerifyOptions verify;
  verify.search_fixes = options.search_fixes;
  // A DDP fix is listed only when the stream and memory checks pass with it too.
  verify.also_check = [&](const Plan& plan, const ModelStructure& structure) {
    return check_failure(run_checks(plan, structure, nullptr, options.protocol, plan_dir, options, false, devices));
  };
  report.ddp = verify_plan(source, verify);
  Checks checks = run_checks(report.ddp.plan, report.ddp.structure, &report.ddp.simulation, options.protocol, plan_dir, options, true, devices);
  report.streams = std::move(checks.streams);
  report.memory = std::move(checks.memory);
  report.time = std::move(checks.time);
  if (options.search_fixes && (!report.streams.ok() || !report.memory.ok())) search_check_fixes(report, source, plan_dir, options, devices);
  return report;
}

nlohmann::json stream_section_json(const StreamSection& section) {
  const EventModel& model = section.step;
  nlohmann::json races = nlohmann::json::array();
  for (size_t i = 0; i < section.races.races.size(); ++i) {
    const Race& race = section.races.races[i];
    const Buffer& buffer = model.buffers[race.buffer];
    const std::optional<PlanCost> cost = i < section.fix_costs.size() ? section.fix_costs[i] : std::nullopt;
    races.push_back({{"kind", race.kind()},
                     {"buffer", {{"name", buffer.name}, {"memory", to_string(buffer.memory)}, {"rank", buffer.rank}, {"device", buffer.device}}},
                     {"bytes", {race.offset, race.offset + race.bytes}},
                     {"first", op_json(model, race.earlier_op)},
                     {"second", op_json(model, race.later_op)},
                     {"fix", {{"text", race.fix.text}, {"checked", race.fix.checked}, {"verified", race.fix.verified},
                             {"predicted", cost ? cost_json(*cost) : nlohmann::json(nullptr)}}}});
  }
  return {{"ok", section.ok()},
          {"protocol", {{"name", section.protocol.name}, {"file", section.protocol_file}, {"description", section.protocol.description}}},
          {"ops", model.ops.size()},
          {"race_count", section.races.race_count},
          {"races", races}};
}

namespace {

nlohmann::json point_json(const MemoryPoint& point) {
  nlohmann::json breakdown = nlohmann::json::object();
  for (const auto& [category, bytes] : point.bytes) {
    if (bytes != 0) breakdown[to_string(category)] = bytes;
  }
  return {{"phase", point.phase}, {"at", point.at}, {"op", point.op >= 0 ? nlohmann::json(point.op) : nlohmann::json(nullptr)},
          {"bytes", point.total()}, {"breakdown", breakdown}};
}

// "layer 12 mlp backward chunk 3 of 8" -> "mlp backward": what an op is, without where.
std::string op_family(const std::string& name) {
  std::string family = name;
  if (family.rfind("layer ", 0) == 0) {
    const size_t space = family.find(' ', 6);
    if (space != std::string::npos) family = family.substr(space + 1);
    // The layer's GEMM op is named by its pass alone: keep "layer" so the list reads.
    if (family == "forward" || family == "recompute") family = "layer " + family;
  }
  const size_t chunk = family.find(" chunk ");
  if (chunk != std::string::npos) family = family.substr(0, chunk);
  const size_t bracket = family.find(" [");
  if (bracket != std::string::npos) family = family.substr(0, bracket);
  if (family.rfind("allreduce bucket", 0) == 0) family = "allreduce bucket";
  for (const char* numbered : {"vision block ", "vision deepstack merger "}) {
    const std::string prefix = numbered;
    if (family.rfind(prefix, 0) == 0) {
      const size_t space = family.find(' ', prefix.size());
      family = prefix.substr(0, prefix.size() - 1) + (space == std::string::npos ? "" : family.substr(space));
    }
  }
  if (family.rfind("D2H ", 0) == 0) family = "D2H copy";
  if (family.rfind("H2D ", 0) == 0) family = "H2D copy";
  if (family.rfind("free ", 0) == 0) family = "free";
  return family;
}

// The critical path as runs of consecutive ops on one stream in one pass (forward, backward with its
// recomputes, reduction, optimizer), each with its op
// families (in first-seen order) and their summed durations.
struct PathGroup {
  std::string stream, phase;
  int ops = 0;
  double ns = 0;
  int first_layer = -1, last_layer = -1;
  std::vector<std::pair<std::string, std::pair<int, double>>> families;  // family -> (ops, ns)
};

std::vector<PathGroup> group_path(const TimeSection& time) {
  const EventModel& model = time.schedule.model;
  std::vector<PathGroup> groups;
  for (int index : time.critical_path.ops) {
    const Op& op = model.ops[index];
    const std::string stream = op.stream >= 0 ? model.streams[op.stream].name : "host";
    // A checkpointed layer's recompute belongs to the backward pass it runs in.
    const std::string phase = op.phase.empty() ? "step" : op.phase == "recompute" ? "backward" : op.phase;
    if (groups.empty() || groups.back().stream != stream || groups.back().phase != phase) {
      groups.push_back(PathGroup{stream, phase, 0, 0, -1, -1, {}});
    }
    PathGroup& group = groups.back();
    const double ns = std::max(0.0, op.duration_ns);
    ++group.ops;
    group.ns += ns;
    if (op.layer >= 0) {
      group.first_layer = group.first_layer < 0 ? op.layer : std::min(group.first_layer, op.layer);
      group.last_layer = std::max(group.last_layer, op.layer);
    }
    const std::string family = op_family(op.name);
    auto it = std::find_if(group.families.begin(), group.families.end(), [&](const auto& f) { return f.first == family; });
    if (it == group.families.end()) {
      group.families.push_back({family, {0, 0.0}});
      it = std::prev(group.families.end());
    }
    ++it->second.first;
    it->second.second += ns;
  }
  return groups;
}

std::string duration_text(double ns) {
  if (ns >= 1e9) return fmt::format("{:.3f} s", ns * 1e-9);
  if (ns >= 1e6) return fmt::format("{:.2f} ms", ns * 1e-6);
  return fmt::format("{:.2f} us", ns * 1e-3);
}

nlohmann::json fix_json(const VerifiedFix& fix, const char* check, const VerifyResult& ddp) {
  nlohmann::json changes = nlohmann::json::array();
  for (const auto& c : fix.changes) changes.push_back(change_json(c));
  return {{"check", check},       {"changes", changes}, {"yaml", fix_yaml(fix.changes)}, {"rationale", fix.rationale},
          {"verified", true},     {"predicted", fix.cost ? cost_json(*fix.cost) : nlohmann::json(nullptr)},
          {"patch", fix_patch(fix, ddp.source_text, ddp.plan.source)}, {"code_changes", fix_code_changes(fix)}};
}

nlohmann::json rejected_json(const RejectedFix& rejected) {
  nlohmann::json changes = nlohmann::json::array();
  for (const auto& c : rejected.changes) changes.push_back(change_json(c));
  return {{"changes", changes}, {"still", rejected.outcome}};
}

// Every fix of every check, DDP first.
nlohmann::json all_fixes_json(const SimulationReport& report) {
  nlohmann::json fixes = nlohmann::json::array();
  for (const VerifiedFix& fix : report.ddp.fixes) fixes.push_back(fix_json(fix, "ddp", report.ddp));
  for (const VerifiedFix& fix : report.stream_fixes) fixes.push_back(fix_json(fix, "streams", report.ddp));
  for (const VerifiedFix& fix : report.memory_fixes) fixes.push_back(fix_json(fix, "memory", report.ddp));
  return fixes;
}

std::string breakdown_text(const MemoryPoint& point) {
  std::string text;
  for (const auto& [category, bytes] : point.bytes) {
    if (bytes > 0) text += (text.empty() ? "" : ", ") + std::string(to_string(category)) + " " + format_bytes(bytes);
  }
  return text;
}

}  // namespace

nlohmann::json memory_section_json(const MemorySection& section, const EventModel* step, bool per_op) {
  const MemoryEstimate& e = section.estimate;
  nlohmann::json j = {{"ok", section.ok()},
                      {"device", e.device_name},
                      {"capacity_bytes", e.capacity_bytes},
                      {"tokens_per_micro_step", e.tokens_per_micro_step},
                      {"peak", point_json(e.device_peak)},
                      {"host_peak", point_json(e.host_peak)}};
  j["oom"] = e.oom ? nlohmann::json{{"required_bytes", e.oom->required_bytes}, {"capacity_bytes", e.oom->capacity_bytes},
                                    {"message", e.oom->message}}
                   : nlohmann::json(nullptr);
  // FSDP/ZeRO: the engine whose sharding sized the model states, and its assumptions.
  j["engine"] = e.engine.empty() ? nlohmann::json(nullptr) : nlohmann::json{{"name", e.engine}, {"notes", e.engine_notes}};
  if (per_op) {
    nlohmann::json ops = nlohmann::json::array();
    for (const MemoryPoint& point : e.device_points) {
      if (point.op < 0) continue;
      nlohmann::json entry = point_json(point);
      entry.erase("at");
      entry["name"] = point.at;
      if (step != nullptr && point.op < static_cast<int>(step->ops.size())) {
        const Op& op = step->ops[point.op];
        entry["micro_step"] = op.micro_step;
        entry["layer"] = op.layer >= 0 ? nlohmann::json(op.layer) : nlohmann::json(nullptr);
      }
      ops.push_back(entry);
    }
    j["per_op"] = ops;
  }
  return j;
}

// FSDP/ZeRO: the engine's transfers by collective and phase; pure expert parallelism under DDP: its
// all-to-alls (null for plain DDP, whose all-reduces are ops of the step).
nlohmann::json communication_json(const EngineStepCost& engine) {
  if (engine.collectives.empty()) return nullptr;
  nlohmann::json collectives = nlohmann::json::array();
  for (const CommTotal& c : engine.collectives) {
    collectives.push_back({{"collective", c.collective}, {"phase", c.phase}, {"count", c.count}, {"bytes", c.bytes}, {"seconds", c.ns * 1e-9}});
  }
  return {{"link", engine.link},
          {"comm_seconds", engine.comm_ns * 1e-9},
          {"exposed_seconds", engine.exposed_ns * 1e-9},
          {"optimizer_saved_seconds", engine.optimizer_saved_ns * 1e-9},
          {"collectives", collectives},
          {"notes", engine.notes}};
}

nlohmann::json time_section_json(const TimeSection& section) {
  const EventModel& model = section.schedule.model;
  nlohmann::json path_ops = nlohmann::json::array();
  for (int index : section.critical_path.ops) {
    const Op& op = model.ops[index];
    path_ops.push_back({{"index", index},
                        {"name", op.name},
                        {"kind", to_string(op.kind)},
                        {"stream", op.stream >= 0 ? model.streams[op.stream].name : "host"},
                        {"phase", op.phase},
                        {"layer", op.layer >= 0 ? nlohmann::json(op.layer) : nlohmann::json(nullptr)},
                        {"micro_step", op.micro_step},
                        {"start_ns", op.start_ns},
                        {"duration_ns", std::max(0.0, op.duration_ns)}});
  }
  nlohmann::json groups = nlohmann::json::array();
  for (const PathGroup& group : group_path(section)) {
    nlohmann::json families = nlohmann::json::array();
    for (const auto& [family, stats] : group.families) families.push_back({{"what", family}, {"ops", stats.first}, {"ns", stats.second}});
    groups.push_back({{"stream", group.stream}, {"phase", group.phase}, {"ops", group.ops}, {"ns", group.ns},
                      {"layers", group.first_layer >= 0 ? nlohmann::json{group.first_layer, group.last_layer} : nlohmann::json(nullptr)},
                      {"what", families}});
  }
  nlohmann::json streams = nlohmann::json::array();
  for (const StreamUsage& usage : section.schedule.streams) {
    const Stream& stream = model.streams[usage.stream];
    streams.push_back({{"rank", stream.rank}, {"device", stream.device}, {"stream", stream.name}, {"busy_ns", usage.busy_ns},
                       {"idle_ns", usage.idle_ns}});
  }
  return {{"device", section.device},
          {"step_seconds", section.schedule.step_ns * 1e-9},
          {"tokens_per_step", section.tokens_per_step},
          {"tokens_per_second", section.tokens_per_second},
          {"copy_hidden_fraction", section.schedule.copy_hidden_fraction},
          {"streams", streams},
          {"critical_path", {{"ns", section.critical_path.length}, {"groups", groups}, {"ops", path_ops}}},
          {"communication", communication_json(section.engine)}};
}

nlohmann::json render_simulation_json(const SimulationReport& report, const SimulateOptions& options) {
  nlohmann::json rejected = nlohmann::json::array();
  for (const RejectedFix& r : report.rejected) rejected.push_back(rejected_json(r));
  return {{"schema", "hookstream.simulate/2"},
          {"ok", report.ok()},
          {"ddp", render_json(report.ddp)},
          {"streams", stream_section_json(report.streams)},
          {"memory", memory_section_json(report.memory, &report.time.schedule.model, options.per_op_memory)},
          {"time", time_section_json(report.time)},
          {"fixes", all_fixes_json(report)},
          {"rejected_fixes", rejected}};
}

nlohmann::json render_verify_json(const SimulationReport& report) {
  // verify/1's keys keep their names, types and meanings; `ok` now covers every check, and
  // `predicted` is filled for every plan the models can run.
  nlohmann::json j = render_json(report.ddp);
  j["schema"] = "hookstream.verify/2";
  j["ok"] = report.ok();
  j["predicted"] = cost_json(report.cost());
  j["checks"] = {{"ddp", report.ddp.ok()}, {"streams", report.streams.ok()}, {"memory", report.memory.ok()}};
  j["fixes"] = all_fixes_json(report);
  for (const RejectedFix& r : report.rejected) j["rejected_fixes"].push_back(rejected_json(r));
  j["streams"] = stream_section_json(report.streams);
  j["memory"] = memory_section_json(report.memory, nullptr, false);
  j["time"] = time_section_json(report.time);
  j["engine"] = engine_json(report.ddp.plan.engine);
  j["world_size_from"] = report.ddp.plan.world_size_from.empty() ? nlohmann::json(nullptr) : nlohmann::json(report.ddp.plan.world_size_from);
  j["config_keys"] = config_keys_json(report.ddp.plan);
  return j;
}

std::string render_simulation_text(const SimulationReport& report, const SimulateOptions& options, bool colour) {
  std::string text = render_text(report.ddp, colour);
  const StreamSection& streams = report.streams;
  text += "\nstreams  protocol " + streams.protocol.name + " (" + streams.protocol_file + "): " +
          std::to_string(streams.step.ops.size()) + " ops in one step\n";
  if (streams.ok()) {
    text += "OK       no race: every conflicting access pair is ordered by happens-before\n";
  } else {
    text += "FAIL     " + std::to_string(streams.races.race_count) + " race" + (streams.races.race_count == 1 ? "" : "s") + "\n";
    // The same protocol mistake races at every layer, micro-step and rank: show each pattern once.
    std::map<std::string, size_t> repeats;
    std::vector<size_t> firsts;
    for (size_t i = 0; i < streams.races.races.size(); ++i) {
      if (repeats[race_pattern(streams.step, streams.races.races[i])]++ == 0) firsts.push_back(i);
    }
    const size_t shown = std::min(options.races_shown, firsts.size());
    size_t listed = 0;
    for (size_t k = 0; k < shown; ++k) {
      const Race& race = streams.races.races[firsts[k]];
      const size_t same = repeats[race_pattern(streams.step, race)];
      listed += same;
      Race pair = race;
      pair.fix.text.clear();  // the pair only; the fix is printed below, and only when verified
      text += "  " + describe_race(streams.step, pair);
      if (race.fix.verified) {
        text += "  fix: " + race.fix.text + " [verified: re-checked, the pair is ordered]\n";
        const std::optional<PlanCost>& cost = streams.fix_costs[firsts[k]];
        if (cost) {
          text += fmt::format("       predicted on {}: step {} -> {}, peak memory {} (unchanged)\n", cost->device,
                              duration_text(report.time.schedule.step_ns), duration_text(cost->step_seconds * 1e9),
                              format_bytes(cost->peak_device_bytes));
        }
      } else if (race.fix.kind == SyncSuggestion::Kind::CrossRank) {
        text += "  fix: " + race.fix.text + "\n";
      } else {
        text += std::string("  no verified sync: ") +
                (race.fix.checked ? "the smallest sync does not order the pair when re-checked" : "not re-checked (verification limit)") + "\n";
      }
      if (same > 1) text += "  the same pattern races " + std::to_string(same - 1) + " more time" + (same == 2 ? "" : "s") + " (other layers, micro-steps or ranks)\n";
    }
    if (streams.races.race_count > listed) {
      text += "  ... and " + std::to_string(streams.races.race_count - listed) + " more (--format json lists them)\n";
    }
  }

  const MemoryEstimate& memory = report.memory.estimate;
  text += fmt::format("\nmemory   {}: peak {} of {} at {} `{}`\n", memory.device_name, format_bytes(memory.device_peak.total()),
                      format_gib(memory.capacity_bytes), memory.device_peak.phase, memory.device_peak.at);
  text += "         " + breakdown_text(memory.device_peak) + "\n";
  if (memory.host_peak.total() > 0) {
    text += fmt::format("         host: peak {} at {} `{}`: {}\n", format_bytes(memory.host_peak.total()), memory.host_peak.phase,
                        memory.host_peak.at, breakdown_text(memory.host_peak));
  }
  if (!memory.engine.empty()) {
    const Plan& plan = report.ddp.plan;
    const int shard = plan.engine.kind == EngineKind::Fsdp2 ? plan.engine.shard_ranks(plan.world_size) : plan.world_size;
    // HSDP (dp_replicate_size > 1): each replica holds the whole model, sharded over its dp_shard group.
    text += "         model states sharded by " + memory.engine + " over " + std::to_string(shard) + " ranks" +
            (shard != plan.world_size ? " (each of the " + std::to_string(plan.world_size / shard) + " replicas)" : "") + "\n";
    for (const std::string& note : memory.engine_notes) text += "         note: " + note + "\n";
  }
  text += report.memory.ok() ? "OK       the peak fits\n" : "FAIL     oom  " + memory.oom->message + "\n";

  const TimeSection& time = report.time;
  text += fmt::format("\ntime     {}: step {}, {:.0f} tokens/s over {} rank(s); host<->device copies {:.0f}% hidden\n", time.device,
                      duration_text(time.schedule.step_ns), time.tokens_per_second, report.ddp.plan.world_size,
                      100 * time.schedule.copy_hidden_fraction);
  if (!time.engine.collectives.empty()) {
    const EngineStepCost& engine = time.engine;
    text += fmt::format("comm     {} over {}: {} on the link, {} not hidden by compute\n",
                        memory.engine.empty() ? std::string("expert parallelism") : memory.engine, engine.link,
                        duration_text(engine.comm_ns), duration_text(engine.exposed_ns));
    for (const CommTotal& c : engine.collectives) {
      text += fmt::format("         {} {} x{}: {} in {}\n", c.phase, c.collective, c.count, format_bytes(c.bytes), duration_text(c.ns));
    }
    for (const std::string& note : engine.notes) text += "         note: " + note + "\n";
  }
  text += fmt::format("critical path  {} over {} ops (rank 0's step; runs of one stream and pass):\n",
                      duration_text(time.critical_path.length), time.critical_path.ops.size());
  for (const PathGroup& group : group_path(time)) {
    const std::string layers = group.first_layer < 0 ? ""
                               : group.first_layer == group.last_layer ? fmt::format(" layer {}", group.first_layer)
                                                                       : fmt::format(" layers {}..{}", group.first_layer, group.last_layer);
    text += fmt::format("  {:>10}  {} {}{}, {} ops:\n", duration_text(group.ns), group.stream, group.phase, layers, group.ops);
    // The op kinds, wrapped: "mlp backward x252 240.35 ms, ..."
    std::string line;
    for (const auto& [family, stats] : group.families) {
      if (stats.second <= 0) continue;  // frees and other bookkeeping on the path take no time
      const std::string item = fmt::format("{} x{} {}", family, stats.first, duration_text(stats.second));
      if (!line.empty() && line.size() + item.size() > 96) {
        text += "              " + line + ",\n";
        line.clear();
      }
      line += (line.empty() ? "" : ", ") + item;
    }
    if (!line.empty()) text += "              " + line + "\n";
  }

  const PlanCost before = report.cost();
  if (!report.stream_fixes.empty()) {
    text += "\nfixes    for the races (each re-verified: every check passes with it)\n" + fix_list_text(report.stream_fixes, before, colour, report.ddp.source_text, report.ddp.plan.source);
  } else if (!streams.ok() && options.search_fixes) {
    text += "\nfixes    no built-in protocol change removes the races\n";
  }
  if (!report.memory_fixes.empty()) {
    text += "\nfixes    for oom (each re-verified: every check passes with it)\n" + fix_list_text(report.memory_fixes, before, colour, report.ddp.source_text, report.ddp.plan.source);
  } else if (!report.memory.ok() && options.search_fixes) {
    text += "\nfixes    none of the usual memory savers makes the plan fit\n";
  }
  for (const RejectedFix& r : report.rejected) {
    std::string changes;
    for (const FixChange& c : r.changes) changes += (changes.empty() ? "" : ", ") + c.key + ": " + c.value;
    text += "  not a fix: " + changes + " -> still " + r.outcome + "\n";
  }
  const std::string keys = config_keys_text(report.ddp.plan);
  if (!keys.empty()) text += "\n" + keys;
  return text;
}

}  // namespace hookstream
