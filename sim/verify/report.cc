#include "sim/verify/report.h"

#include <fmt/format.h>

#include "sim/inputs/axolotl_config/config_patch.h"
#include "sim/inputs/input_error.h"
#include <map>
#include <optional>

#include "sim/inputs/architectures/moe_routing.h"
#include "sim/sync/fsdp2/fsdp2_units.h"
#include "sim/sync/zero/zero_common.h"

namespace hookstream {

namespace {

struct Style {
  bool on;
  std::string red() const { return on ? "\033[1;31m" : ""; }
  std::string green() const { return on ? "\033[1;32m" : ""; }
  std::string bold() const { return on ? "\033[1m" : ""; }
  std::string dim() const { return on ? "\033[2m" : ""; }
  std::string reset() const { return on ? "\033[0m" : ""; }
};

const char* adapter_text(Adapter a) {
  switch (a) {
    case Adapter::None: return "full fine-tune";
    case Adapter::Lora: return "LoRA";
    case Adapter::Qlora: return "QLoRA";
  }
  return "";
}

const char* tiled_text(TiledBackward t) {
  switch (t) {
    case TiledBackward::BackwardPerChunk: return "per_chunk_backward";
    case TiledBackward::GradThenBackward: return "grad_then_backward";
    case TiledBackward::FunctionReturnsGrads: return "function_returns_grads";
  }
  return "";
}

std::string first_line(const std::string& text, size_t limit = 160) {
  std::string line = text.substr(0, text.find('\n'));
  if (line.size() > limit) line = line.substr(0, limit - 3) + "...";
  return line;
}

std::string cost_delta(const std::optional<PlanCost>& before, const std::optional<PlanCost>& after) {
  if (!before || !after || before->step_seconds <= 0) return "";
  const double time_change = (after->step_seconds / before->step_seconds - 1) * 100;
  const double gib = 1024.0 * 1024 * 1024;
  return fmt::format("cost on {}: step {:.3f} s -> {:.3f} s ({:+.1f}%), peak memory {:.2f} -> {:.2f} GiB",
                     after->device, before->step_seconds, after->step_seconds, time_change,
                     before->peak_device_bytes / gib, after->peak_device_bytes / gib);
}

std::string fix_inline(const std::vector<FixChange>& changes) {
  std::string out;
  for (size_t i = 0; i < changes.size(); ++i) out += (i ? ", " : "") + changes[i].key + ": " + changes[i].value;
  return out;
}

}  // namespace

std::string ranks_text(const std::vector<int>& ranks) {
  if (ranks.empty()) return "";
  std::string out;
  size_t i = 0;
  while (i < ranks.size()) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += j == i ? std::to_string(ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]);
    i = j + 1;
  }
  return out;
}

std::string fix_yaml(const std::vector<FixChange>& changes) {
  // Group dotted keys under their parents, keeping first-seen order.
  std::vector<std::string> parents;
  std::map<std::string, std::vector<std::string>> children;
  std::string top;
  for (const auto& c : changes) {
    const auto dot = c.key.find('.');
    if (dot == std::string::npos) {
      top += c.key + ": " + c.value + "\n";
      continue;
    }
    const std::string parent = c.key.substr(0, dot);
    if (!children.count(parent)) parents.push_back(parent);
    children[parent].push_back("  " + c.key.substr(dot + 1) + ": " + c.value);
  }
  std::string out = top;
  for (const auto& p : parents) {
    out += p + ":\n";
    for (const auto& line : children[p]) out += line + "\n";
  }
  return out;
}

std::string fix_patch(const VerifiedFix& fix, const std::string& source_text, const std::string& source_path) {
  // A change to a `deepspeed.*` key edits the DeepSpeed JSON file the plan names, in the same patch.
  try {
    return fix_file_patch(source_text, source_path, fix.changes);
  } catch (const InputError&) {
    return unified_diff(source_text, apply_changes_to_config(source_text, fix.changes), source_path);
  }
}

nlohmann::json change_json(const FixChange& change) {
  nlohmann::json out = {{"key", change.key}, {"value", change.value}};
  if (!change.file.empty()) out["file"] = change.file;
  return out;
}

std::vector<std::string> fix_code_changes(const VerifiedFix& fix) {
  std::vector<std::string> notes;
  for (const FixChange& change : fix.changes) {
    if (auto note = hookstream_code_change(change)) notes.push_back(*note);
  }
  return notes;
}

std::string fix_list_text(const std::vector<VerifiedFix>& fixes, const std::optional<PlanCost>& before, bool colour,
                          const std::string& source_text, const std::string& source_path) {
  const Style s{colour};
  std::string out;
  for (size_t i = 0; i < fixes.size(); ++i) {
    out += fmt::format("  {}. {}\n", i + 1, fixes[i].rationale);
    const std::string cost = cost_delta(before, fixes[i].cost);
    if (!cost.empty()) out += fmt::format("     {}{}{}\n", s.dim(), cost, s.reset());
    if (source_text.empty()) {
      std::string yaml = fix_yaml(fixes[i].changes);
      size_t start = 0;
      while (start < yaml.size()) {
        const size_t end = yaml.find('\n', start);
        out += fmt::format("       {}{}{}\n", s.green(), yaml.substr(start, end - start), s.reset());
        start = end == std::string::npos ? yaml.size() : end + 1;
      }
      continue;
    }
    // A hookstream: key is a change to training code; the key in the patch only tells hookstream.
    for (const std::string& note : fix_code_changes(fixes[i])) out += fmt::format("     {}\n", note);
    const std::string patch = fix_patch(fixes[i], source_text, source_path);
    size_t start = 0;
    while (start < patch.size()) {
      const size_t end = patch.find('\n', start);
      const std::string line = patch.substr(start, end - start);
      const bool header = line.rfind("---", 0) == 0 || line.rfind("+++", 0) == 0 || line.rfind("@@", 0) == 0;
      const std::string colour_on = header ? s.dim() : line.rfind('+', 0) == 0 ? s.green() : line.rfind('-', 0) == 0 ? s.red() : "";
      out += fmt::format("       {}{}{}\n", colour_on, line, colour_on.empty() ? "" : s.reset());
      start = end == std::string::npos ? patch.size() : end + 1;
    }
  }
  return out;
}

// The MoE routing check's line: the layout, the probability, and what the adverse step showed.
static std::string routing_text(const VerifyResult& r) {
  const RoutingCheck& c = *r.routing;
  std::string text = c.summary() + "; tokens per rank and micro-step: " + c.tokens_from;
  for (const RoutingCase& rc : c.cases) {
    text += fmt::format("; adverse step ({}: expert {} of layer {} without tokens on rank{} {} in iteration {}): {}",
                        rc.name, rc.expert, rc.layer, rc.ranks.size() > 1 ? "s" : "",
                        fmt::join(rc.ranks, ","), rc.iteration,
                        rc.simulation.ok() ? std::string("OK")
                                           : std::string(to_string(rc.simulation.findings.front().kind)));
  }
  const auto& ds = r.plan.engine.deepspeed;
  if (c.layout == "per_expert" && ds && ds->zero_stage == 3) {
    text += "; under ZeRO-3 the usual fix is code, not a key: deepspeed.utils.set_z3_leaf_modules(model, [the sparse "
            "MoE block class]) before deepspeed.initialize (DeepSpeed PR #4966), which hookstream does not model";
  }
  return text;
}

std::string render_text(const VerifyResult& r, bool colour) {
  const Style s{colour};
  const Plan& plan = r.plan;
  std::string out;
  const std::string model = plan.base_model.empty() ? plan.model.source : plan.base_model;
  std::string adapter = adapter_text(plan.adapter);
  if (plan.adapter != Adapter::None) {
    std::vector<std::string> targets = plan.lora_target_modules;
    if (plan.lora_target_linear) targets.push_back("every Linear (lora_target_linear)");
    for (const std::string& p : plan.lora_target_parameters) targets.push_back("parameter " + p);
    adapter += fmt::format(" r={} on {}", plan.lora_r, fmt::join(targets, ","));
  }
  out += fmt::format("{}plan{}     {}: {}, {}, {} layers, {} trainable tensors, {} rank(s), {} iteration(s) x {} micro-step(s)\n",
                     s.bold(), s.reset(), plan.source, model, adapter, plan.model.num_hidden_layers,
                     r.structure.ddp_parameters.size(), plan.world_size, plan.iterations, plan.gradient_accumulation_steps);
  std::string ckpt = "off";
  if (plan.gradient_checkpointing) {
    ckpt = plan.use_reentrant ? "reentrant" : "non-reentrant";
    if (plan.activation_offloading) ckpt += " + CPU offload";
    if (plan.activation_offloading && plan.offload_layers) ckpt += fmt::format(" of layers {}", fmt::join(*plan.offload_layers, ","));
  }
  std::string tiled = plan.tiled_mlp ? fmt::format("{} ({} shards at rank 0)", tiled_text(plan.tiled_mlp_backward), plan.tiled_shards_for(0, 0)) : "off";
  if (plan.tiled_mlp && plan.tiled_mlp_layers) tiled += fmt::format(" on layers {}", fmt::join(*plan.tiled_mlp_layers, ","));
  // The rules that differ between PyTorch versions follow this one (docs/ddp-versions.md).
  if (plan.engine.kind == EngineKind::DeepSpeed && plan.engine.deepspeed) {
    // docs/engines/deepspeed-zero.md: the ZeRO settings that decide the hook schedule.
    const DeepSpeedConfig& ds = *plan.engine.deepspeed;
    // The bucket size DeepSpeed runs with: "auto" is filled by HF's Trainer (zero_common.h).
    const std::string bucket = ds.reduce_bucket_size ? std::to_string(*ds.reduce_bucket_size)
                               : ds.reduce_bucket_size_auto
                                   ? fmt::format("{} (auto: hidden_size^2)", zero_reduce_bucket_size(plan))
                                   : std::string("500000000 (default)");
    const std::string stage3 = ds.zero_stage == 3 ? fmt::format(", stage3_param_persistence_threshold={}, MLP leaf modules={}",
                                                                zero_persistence_threshold(plan), plan.z3_leaf_mlp ? "yes" : "no")
                                                  : "";
    if (ds.zero_stage == 0) {
      // sim/sync/zero/zero0_model.h: no ZeRO optimizer, so none of the bucket settings apply.
      out += fmt::format("{}schedule{} checkpointing {}; tiled MLP {}; {} (no ZeRO optimizer: no gradient hooks; "
                         "engine.backward all-reduces every trainable gradient at the accumulation boundary)\n",
                         s.bold(), s.reset(), ckpt, tiled, r.simulation.engine);
    } else {
      out += fmt::format("{}schedule{} checkpointing {}; tiled MLP {}{}; {} (overlap_comm={}, reduce_bucket_size={}{})\n",
                         s.bold(), s.reset(), ckpt, tiled,
                         plan.tiled_mlp ? fmt::format(" with ds_grad_is_ready={}", plan.tiled_mlp_ds_grad_is_ready.value_or(true)) : "",
                         r.simulation.engine, ds.overlap_comm_or_default() ? "true" : "false", bucket, stage3);
    }
  } else if (plan.engine.kind == EngineKind::Fsdp1) {
    // sim/sync/fsdp1: flat parameters per unit, no buckets.
    // The debug level decides how ranks that run different units fail (docs/engines/fsdp1.md):
    // say which one the verdict assumed.
    out += fmt::format("{}schedule{} checkpointing {}; tiled MLP {}; FSDP1 units {}; use_orig_params={}; FSDP1 of PyTorch {}; "
                       "TORCH_DISTRIBUTED_DEBUG={} (hookstream.torch_distributed_debug)\n",
                       s.bold(), s.reset(), ckpt, tiled,
                       plan.engine.fsdp.transformer_layer_cls_to_wrap.empty()
                           ? std::string("decoder layers")
                           : fmt::format("{}", fmt::join(plan.engine.fsdp.transformer_layer_cls_to_wrap, ",")),
                       plan.engine.fsdp.use_orig_params.value_or(false) ? "true" : "false", plan.torch_version.text(),
                       plan.torch_distributed_debug);
  } else if (r.simulation.engine == "FSDP2") {
    // sim/sync/fsdp2: no buckets, no find_unused_parameters; the units and resharding decide.
    out += fmt::format("{}schedule{} checkpointing {}; tiled MLP {}; FSDP2 units {}; reshard_after_forward={}; "
                       "FSDP2 of PyTorch {}\n",
                       s.bold(), s.reset(), ckpt, tiled,
                       (plan.engine.fsdp.transformer_layer_cls_to_wrap.empty()
                            ? std::string("decoder layers")
                            : fmt::format("{}", fmt::join(plan.engine.fsdp.transformer_layer_cls_to_wrap, ","))) +
                           (fsdp2_adapter_units(plan) ? " + each LoRA A and B" : ""),
                       plan.engine.fsdp.reshard_after_forward.value_or(true) ? "true" : "false", plan.torch_version.text());
    // accelerate's mesh from dp_shard_size / dp_replicate_size (sim/inputs/plan.cc data_parallel_mesh).
    if (plan.engine.dp_replicate > 1) {
      out += fmt::format("{}mesh{}     HSDP: dp_replicate {} x dp_shard {}; each unit reduce-scatters in its shard group of {} "
                         "ranks, then all-reduces its shard across {} replicas\n",
                         s.bold(), s.reset(), plan.engine.dp_replicate, plan.engine.shard_ranks(plan.world_size),
                         plan.engine.shard_ranks(plan.world_size), plan.engine.dp_replicate);
    }
  } else {
    out += fmt::format("{}schedule{} checkpointing {}; tiled MLP {}; find_unused_parameters={}; static_graph={}; {} bucket(s); "
                       "DDP of PyTorch {}\n",
                       s.bold(), s.reset(), ckpt, tiled, plan.find_unused_parameters() ? "true" : "false",
                       plan.static_graph ? "true" : "false", r.simulation.initial_buckets.buckets.size(),
                       plan.torch_version.text());
    if (plan.torch_compile.enabled || plan.torch_compile.optimize_ddp != OptimizeDdp::DdpOptimizer) {
      // Which reducer runs under torch.compile (docs/ddp-compile.md).
      out.insert(out.size() - 1, fmt::format("; torch_compile={}, optimize_ddp={}, compiled_autograd={}: {}",
                                             plan.torch_compile.enabled ? "true" : "false",
                                             to_string(plan.torch_compile.optimize_ddp),
                                             plan.torch_compile.compiled_autograd ? "true" : "false", r.simulation.engine));
    }
  }
  if (r.routing) out += fmt::format("{}moe{}      {}\n", s.bold(), s.reset(), routing_text(r));
  if (r.ok() && r.simulation.engine == "FSDP2") {
    out += fmt::format("{}OK{}       every rank reduce-scatters the same units with the same gradients, each after all of its "
                       "step's contributions\n",
                       s.green(), s.reset());
    for (const Finding& w : r.simulation.warnings) {
      out += fmt::format("{}WARN{}     {}  rank {}, iteration {}: {}\n", s.bold(), s.reset(), to_string(w.kind), w.rank,
                         w.iteration, w.error_text);
    }
    return out;
  }
  if (r.ok()) {
    out += fmt::format("{}OK{}       every rank marks every trainable parameter ready exactly once per iteration; replicas stay in sync\n",
                       s.green(), s.reset());
    return out;
  }
  for (const Finding& f : r.simulation.findings) {
    out += fmt::format("{}FAIL{}     {}{}{}  rank {}, iteration {}{}, {}\n", s.red(), s.reset(), s.bold(), to_string(f.kind), s.reset(),
                       ranks_text(f.ranks.empty() ? std::vector<int>{f.rank} : f.ranks), f.iteration,
                       plan.gradient_accumulation_steps > 1 ? fmt::format(" micro-step {}", f.micro_step) : "",
                       to_string(f.phase));
    if (!f.parameter.empty()) {
      // No DDP index: a parameter outside DDP's list (expert-parallel shards) or of another engine.
      out += fmt::format("  parameter  {}{}{}\n", f.ddp_index >= 0 ? fmt::format("#{} ", f.ddp_index) : "", f.parameter,
                         f.layer >= 0 ? fmt::format(" (layer {})", f.layer) : "");
    }
    if (!f.graph_tasks.empty()) out += fmt::format("  hooks from {}\n", fmt::join(f.graph_tasks, "; "));
    if (!f.explanation.empty()) out += fmt::format("  why        {}\n", f.explanation);
    out += fmt::format("  PyTorch    {}{}{}\n", s.dim(), first_line(f.error_text), s.reset());
  }
  if (!r.fixes.empty()) {
    out += fmt::format("{}fixes{}    (each re-verified by simulating every rank and iteration)\n", s.bold(), s.reset());
    out += fix_list_text(r.fixes, r.cost, colour, r.source_text, r.plan.source);
  } else {
    out += "fixes    none of the usual changes makes this plan pass\n";
  }
  for (const auto& rej : r.rejected) {
    out += fmt::format("  {}not a fix: {} -> still {}{}\n", s.dim(), fix_inline(rej.changes), rej.outcome, s.reset());
  }
  return out;
}

nlohmann::json cost_json(const PlanCost& cost) {
  return {{"device", cost.device}, {"step_seconds", cost.step_seconds}, {"peak_device_bytes", cost.peak_device_bytes}};
}

nlohmann::json finding_json(const Finding& f) {
  nlohmann::json j;
  j["verdict"] = to_string(f.kind);
  j["rank"] = f.rank;
  j["ranks"] = f.ranks.empty() ? std::vector<int>{f.rank} : f.ranks;
  j["iteration"] = f.iteration;
  j["micro_step"] = f.micro_step;
  j["phase"] = to_string(f.phase);
  if (f.ddp_index >= 0) {
    j["parameter"] = {{"index", f.ddp_index}, {"name", f.parameter}, {"layer", f.layer}};
  } else {
    j["parameter"] = nullptr;
  }
  j["graph_tasks"] = f.graph_tasks;
  j["error_text"] = f.error_text;
  j["explanation"] = f.explanation;
  return j;
}

nlohmann::json render_json(const VerifyResult& r) {
  nlohmann::json j;
  if (r.routing) {
    const RoutingCheck& c = *r.routing;
    nlohmann::json cases = nlohmann::json::array();
    for (const RoutingCase& rc : c.cases) {
      cases.push_back({{"name", rc.name},
                       {"ranks", rc.ranks},
                       {"iteration", rc.iteration},
                       {"layer", rc.layer},
                       {"expert", rc.expert},
                       {"module", rc.module},
                       {"parameters", rc.parameters},
                       {"verdict", rc.simulation.ok() ? "ok" : to_string(rc.simulation.findings.front().kind)}});
    }
    j["moe"] = {{"experts", c.estimate.experts},
                {"top_k", c.estimate.top_k},
                {"tokens_per_rank_micro_step", c.estimate.tokens},
                {"tokens_from", c.tokens_from},
                {"p_expert_idle", c.estimate.p_expert_idle},
                {"expected_idle_experts", c.estimate.expected_idle},
                {"p_any_expert_idle", c.estimate.p_any_idle},
                {"moe_layers", c.moe_layers},
                {"steps", c.steps},
                {"steps_from", c.steps_from},
                {"p_any_expert_idle_in_run", c.p_run},
                {"threshold", kRoutingThreshold},
                {"expert_layout", c.layout},
                {"expert_layout_decided_by", c.decided_by},
                {"idle_expert_is_unused_parameter", c.layout == "per_expert"},
                {"adverse_step_simulated", c.simulated},
                {"adverse_steps", cases}};
  } else {
    j["moe"] = nullptr;
  }
  j["schema"] = "hookstream.verify/1";
  j["plan"] = r.plan.source;
  j["model"] = r.plan.base_model.empty() ? r.plan.model.source : r.plan.base_model;
  j["world_size"] = r.plan.world_size;
  j["iterations"] = r.plan.iterations;
  // TORCH_DISTRIBUTED_DEBUG the verdict assumed (FSDP1 reads it: docs/engines/fsdp1.md).
  j["torch_distributed_debug"] = r.plan.torch_distributed_debug;
  j["trainable_parameters"] = r.structure.ddp_parameters.size();
  nlohmann::json buckets = nlohmann::json::array();
  for (const auto& b : r.simulation.initial_buckets.buckets) buckets.push_back(b);
  j["initial_buckets"] = buckets;
  if (r.simulation.rebuilt_buckets) {
    nlohmann::json rebuilt = nlohmann::json::array();
    for (const auto& b : r.simulation.rebuilt_buckets->buckets) rebuilt.push_back(b);
    j["rebuilt_buckets"] = rebuilt;
  } else {
    j["rebuilt_buckets"] = nullptr;
  }
  j["ok"] = r.ok();
  j["predicted"] = r.cost ? cost_json(*r.cost) : nlohmann::json(nullptr);
  j["findings"] = nlohmann::json::array();
  for (const auto& f : r.simulation.findings) j["findings"].push_back(finding_json(f));
  j["fixes"] = nlohmann::json::array();
  for (const auto& fix : r.fixes) {
    nlohmann::json changes = nlohmann::json::array();
    for (const auto& c : fix.changes) changes.push_back(change_json(c));
    nlohmann::json entry = {{"changes", changes}, {"yaml", fix_yaml(fix.changes)}, {"rationale", fix.rationale}, {"verified", true}};
    entry["patch"] = fix_patch(fix, r.source_text, r.plan.source);
    entry["code_changes"] = fix_code_changes(fix);
    entry["predicted"] = fix.cost ? cost_json(*fix.cost) : nlohmann::json(nullptr);
    j["fixes"].push_back(entry);
  }
  j["rejected_fixes"] = nlohmann::json::array();
  for (const auto& rej : r.rejected) {
    nlohmann::json changes = nlohmann::json::array();
    for (const auto& c : rej.changes) changes.push_back(change_json(c));
    j["rejected_fixes"].push_back({{"changes", changes}, {"still", rej.outcome}});
  }
  return j;
}

}  // namespace hookstream
