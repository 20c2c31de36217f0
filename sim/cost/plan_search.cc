#include "sim/cost/plan_search.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "sim/cost/device_profile.h"
#include "sim/cost/engine_cost.h"

namespace hookstream {

namespace {

// axolotl's Liger integration (src/axolotl/integrations/liger/__init__.py exports LigerPlugin).
constexpr const char* kLigerPluginName = "axolotl.integrations.liger.LigerPlugin";

std::string tiled_backward_name(TiledBackward backward) {
  switch (backward) {
    case TiledBackward::BackwardPerChunk: return "per_chunk_backward";
    case TiledBackward::GradThenBackward: return "grad_then_backward";
    case TiledBackward::FunctionReturnsGrads: return "function_returns_grads";
  }
  return "per_chunk_backward";
}

std::string number(double value) {
  if (value == std::floor(value)) return std::to_string(static_cast<long long>(value));
  std::string text = std::to_string(value);
  while (!text.empty() && text.back() == '0') text.pop_back();
  return text;
}

// A list of strings as a YAML flow sequence, the form a --set value and a fix's patch take.
std::string flow_list(const std::vector<std::string>& items) {
  std::string list;
  for (const std::string& item : items) list += (list.empty() ? "" : ", ") + item;
  return "[" + list + "]";
}

// Sorted layer indices as the flow list hookstream.offload_layers reads: runs as "FIRST-LAST".
std::string layer_range_text(const std::vector<int>& layers) {
  std::vector<std::string> items;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    items.push_back(j > i ? "\"" + std::to_string(layers[i]) + "-" + std::to_string(layers[j]) + "\"" : std::to_string(layers[i]));
    i = j + 1;
  }
  return flow_list(items);
}

// Partial offload for a candidate whose pinned slots exceed the host budget: offload the first
// checkpointed layers whose slots fit, keep the later ones' inputs on the GPU. The later layers
// are the first to run backward, so a kept input is freed early and its reload (the one the
// backward's start would wait for) disappears. Empty when no layer's slot fits.
std::vector<FixChange> partial_offload(const Plan& plan, const PlanCandidate& candidate, int64_t host_budget,
                                       const std::vector<FixChange>& settings) {
  std::vector<int> offloaded;
  for (int layer = 0; layer < plan.model.num_hidden_layers; ++layer) {
    if (plan.layer_offloaded(layer)) offloaded.push_back(layer);
  }
  if (offloaded.size() < 2 || candidate.pinned_slot_bytes <= 0) return {};
  // Every offloaded layer's slot is one hidden state of the same size (memory_model.cc).
  const int64_t slot = candidate.pinned_slot_bytes / static_cast<int64_t>(offloaded.size());
  const int64_t other = candidate.host_bytes - candidate.pinned_slot_bytes;
  if (slot <= 0 || host_budget <= other) return {};
  const int64_t fit = std::min<int64_t>((host_budget - other) / slot, static_cast<int64_t>(offloaded.size()) - 1);
  if (fit < 1) return {};
  offloaded.resize(static_cast<size_t>(fit));
  std::vector<FixChange> partial = settings;
  partial.push_back({"hookstream.offload_layers", layer_range_text(offloaded)});
  return partial;
}

// The value a search key has in a loaded plan, as the YAML value --set would take. Keys that do
// not apply (use_reentrant without checkpointing, ...) read as "" so they never count as changes.
std::string effective_value(const Plan& plan, const std::string& key) {
  if (key == "gradient_checkpointing") return plan.gradient_checkpointing ? "true" : "false";
  if (key == "gradient_checkpointing_kwargs.use_reentrant") {
    return plan.gradient_checkpointing ? (plan.use_reentrant ? "true" : "false") : "";
  }
  if (key == "activation_offloading") return plan.activation_offloading ? "true" : "false";
  if (key == "hookstream.offload_protocol") return plan.activation_offloading ? plan.offload_protocol_name() : "";
  if (key == "hookstream.pinned_slots") return plan.activation_offloading ? (plan.pinned_slots_exact ? "exact" : "caching") : "";
  if (key == "hookstream.offload_layers") {
    return plan.activation_offloading ? (plan.offload_layers ? layer_range_text(*plan.offload_layers) : "all") : "";
  }
  if (key == "tiled_mlp") return plan.tiled_mlp ? "true" : "false";
  if (key == "tiled_mlp_num_shards") return plan.tiled_mlp ? std::to_string(plan.tiled_shards_for(0, 0)) : "";
  if (key == "hookstream.tiled_mlp_backward") return plan.tiled_mlp ? tiled_backward_name(plan.tiled_mlp_backward) : "";
  if (key == "ddp_bucket_cap_mb") return number(plan.ddp_bucket_cap_mb.value_or(25.0));
  if (key == "micro_batch_size") return std::to_string(plan.micro_batch_size);
  if (key == "chunked_cross_entropy") return plan.chunked_cross_entropy ? "true" : "false";
  if (key == "chunked_cross_entropy_num_chunks") {
    return plan.chunked_cross_entropy ? std::to_string(plan.chunked_cross_entropy_num_chunks) : "";
  }
  if (key == "plugins") return flow_list(plan.plugins);
  if (key == "liger_rms_norm") return plan.liger_rms_norm_applied() ? "true" : "false";
  if (key == "liger_glu_activation") return plan.liger_glu_applied() ? "true" : "false";
  if (key == "fsdp_config.reshard_after_forward") {
    const EngineCostSettings engine = engine_cost_settings(plan);
    const bool fsdp = engine.kind == EngineKind::Fsdp1 || engine.kind == EngineKind::Fsdp2;
    return fsdp && engine.sharded ? (engine.reshard_after_forward ? "true" : "false") : "";
  }
  return "";
}

// Every combination of the explored settings, each as a full list of --set changes.
// `chunking`: also try axolotl's chunked cross-entropy (when the logits dominate the peak).
std::vector<std::vector<FixChange>> candidate_settings(const Plan& plan, bool chunking, bool keep_micro_batch) {
  struct Mode {
    std::vector<FixChange> changes;
  };
  std::vector<Mode> memory_modes;
  memory_modes.push_back({{{"gradient_checkpointing", "false"}, {"activation_offloading", "false"}}});
  for (const char* reentrant : {"true", "false"}) {
    const FixChange on{"gradient_checkpointing", "true"}, kind{"gradient_checkpointing_kwargs.use_reentrant", reentrant};
    memory_modes.push_back({{on, kind, {"activation_offloading", "false"}}});
    for (const char* protocol : {"double_buffer_events", "single_buffer"}) {
      memory_modes.push_back({{on, kind, {"activation_offloading", "true"}, {"hookstream.offload_protocol", protocol}}});
      // `hookstream run` can pin each slot at its own size instead of the caching allocator's
      // power of two (Plan::pinned_slots_exact): less host memory, the same device figures.
      if (!plan.pinned_slots_exact) {
        memory_modes.push_back({{on, kind, {"activation_offloading", "true"}, {"hookstream.offload_protocol", protocol},
                                 {"hookstream.pinned_slots", "exact"}}});
      }
    }
  }
  // Tiled MLP: off, or ALST's default shard count ceil(seq / hidden) and twice that; with the plan's
  // backward and with grad_then_backward (the variant that keeps DDP's hooks correct).
  const int hidden = std::max(1, plan.model.hidden_size);
  const int automatic = std::max(1, (plan.sequence_len + hidden - 1) / hidden);
  std::vector<std::vector<FixChange>> tiled_modes = {{{"tiled_mlp", "false"}}};
  std::set<std::string> backwards = {tiled_backward_name(plan.tiled_mlp_backward), "grad_then_backward"};
  for (int shards : std::set<int>{std::max(2, automatic), std::max(2, 2 * automatic)}) {
    for (const std::string& backward : backwards) {
      tiled_modes.push_back({{"tiled_mlp", "true"}, {"tiled_mlp_num_shards", std::to_string(shards)},
                             {"hookstream.tiled_mlp_backward", backward}});
    }
  }
  // DDP's bucket cap only matters to DDP. FSDP1/FSDP2 instead trade memory for all-gathers with
  // reshard_after_forward (FSDP1: FULL_SHARD vs SHARD_GRAD_OP), which the engine's memory and
  // communication costs (engine_cost.h) weigh.
  const EngineCostSettings engine = engine_cost_settings(plan);
  const bool ddp = plan.world_size > 1 && !engine.sharded;
  const bool fsdp = engine.sharded && (engine.kind == EngineKind::Fsdp1 || engine.kind == EngineKind::Fsdp2);
  const std::set<double> bucket_caps = ddp ? std::set<double>{plan.ddp_bucket_cap_mb.value_or(25.0), 100.0}
                                           : std::set<double>{plan.ddp_bucket_cap_mb.value_or(25.0)};
  const std::vector<std::string> reshards = fsdp ? std::vector<std::string>{"true", "false"} : std::vector<std::string>{""};
  const std::set<int> micro_batches = keep_micro_batch ? std::set<int>{plan.micro_batch_size}
                                                       : std::set<int>{plan.micro_batch_size, 2 * plan.micro_batch_size};
  std::vector<std::string> losses = {plan.chunked_cross_entropy ? "true" : "false"};
  if (chunking && !plan.chunked_cross_entropy) losses.push_back("true");
  // A chunked loss holds one chunk's logits (and their float32 upcast and gradient) at a time:
  // with a fixed chunk count (axolotl's default 8) they grow with the sequence, ~49 GiB per
  // chunk for Llama-3's 128K vocabulary at 320K tokens. So the search also tries chunks of
  // kLossChunkTokens tokens (axolotl's chunked_cross_entropy_num_chunks), as it tiles the MLP.
  constexpr int64_t kLossChunkTokens = 2048;
  auto loss_chunk_counts = [&](const std::string& chunked, int micro) {
    std::set<int> counts;
    if (chunked != "true") return counts;
    counts.insert(plan.chunked_cross_entropy_num_chunks);
    const int64_t tokens = static_cast<int64_t>(plan.sequence_len) * micro;
    const int64_t finer = (tokens + kLossChunkTokens - 1) / kLossChunkTokens;
    if (finer > plan.chunked_cross_entropy_num_chunks && finer <= (1 << 20)) counts.insert(static_cast<int>(finer));
    return counts;
  };
  // Liger's RMSNorm and SwiGLU (axolotl's LigerPlugin, Plan::liger_applies): as the plan has them,
  // and on, where the model type has Liger's patch: they save less per layer (memory_model.cc) and
  // change no hook. The plugin goes into the user's `plugins` list next to the ones there.
  std::vector<std::vector<FixChange>> kernel_modes = {{}};
  if (plan.liger_applies() && !(plan.liger_rms_norm_applied() && plan.liger_glu_applied())) {
    std::vector<FixChange> liger;
    if (!plan.liger_plugin()) {
      std::vector<std::string> plugins = plan.plugins;
      plugins.push_back(kLigerPluginName);
      liger.push_back({"plugins", flow_list(plugins)});
    }
    liger.push_back({"liger_rms_norm", "true"});
    liger.push_back({"liger_glu_activation", "true"});
    kernel_modes.push_back(std::move(liger));
  }
  std::vector<Mode> modes;
  for (const Mode& memory : memory_modes) {
    for (const std::vector<FixChange>& kernels : kernel_modes) {
      modes.push_back(memory);
      modes.back().changes.insert(modes.back().changes.end(), kernels.begin(), kernels.end());
    }
  }
  std::vector<std::vector<FixChange>> settings;
  for (const Mode& memory : modes) {
    for (const auto& tiled : tiled_modes) {
      for (double cap : bucket_caps) {
        for (int micro : micro_batches) {
          for (const std::string& chunked : losses) {
            std::set<int> chunk_counts = loss_chunk_counts(chunked, micro);
            if (chunk_counts.empty()) chunk_counts.insert(0);  // unchunked: no count to set
            for (int chunks : chunk_counts) {
              for (const std::string& reshard : reshards) {
                std::vector<FixChange> changes = memory.changes;
                changes.insert(changes.end(), tiled.begin(), tiled.end());
                if (ddp) changes.push_back({"ddp_bucket_cap_mb", number(cap)});
                if (!reshard.empty()) changes.push_back({"fsdp_config.reshard_after_forward", reshard});
                changes.push_back({"micro_batch_size", std::to_string(micro)});
                changes.push_back({"chunked_cross_entropy", chunked});
                if (chunks > 0) changes.push_back({"chunked_cross_entropy_num_chunks", std::to_string(chunks)});
                settings.push_back(std::move(changes));
              }
            }
          }
        }
      }
    }
  }
  return settings;
}

PlanSource with_changes(const PlanSource& source, const std::vector<FixChange>& changes) {
  PlanSource changed = source;
  for (const FixChange& change : changes) changed.options.set.push_back(change.key + "=" + change.value);
  return changed;
}

PlanCandidate measure(const Plan& plan, const DeviceSpec& device, const Calibration* calibration) {
  const ModelStructure structure = build_model_structure(plan);
  const StepPrediction prediction = predict_step(plan, structure, device, calibration);
  PlanCandidate candidate;
  candidate.step_ns = prediction.schedule.step_ns;
  candidate.tokens_per_second = prediction.tokens_per_second;
  candidate.peak_bytes = prediction.memory.device_peak.total();
  candidate.peak_at = prediction.memory.device_peak.phase + " " + prediction.memory.device_peak.at;
  candidate.peak_breakdown = prediction.memory.device_peak.bytes;
  candidate.host_bytes = prediction.memory.host_peak.total();
  if (auto slots = prediction.memory.host_peak.bytes.find(MemoryCategory::PinnedSlots); slots != prediction.memory.host_peak.bytes.end()) {
    candidate.pinned_slot_bytes = slots->second;
  }
  candidate.copy_hidden_fraction = prediction.schedule.copy_hidden_fraction;
  return candidate;
}

std::string verdict_of(const PlanSource& source) {
  VerifyOptions options;
  options.search_fixes = false;
  const VerifyResult result = verify_plan(source, options);
  if (result.ok()) return "ok";
  const Finding& finding = result.simulation.findings.front();
  return std::string(to_string(finding.kind)) + (finding.parameter.empty() ? "" : " at " + finding.parameter);
}

}  // namespace

PlanSearchResult search_plans(const PlanSource& source, const PlanSearchOptions& options) {
  const Plan base = parse_plan(source.yaml_text, source.source, source.options);
  PlanSearchResult result;
  result.device = find_device_spec(options.gpu.value_or(base.gpu));
  result.budget_bytes = options.budget_gib ? static_cast<int64_t>(*options.budget_gib * 1024 * 1024 * 1024)
                                           : result.device.memory_bytes;
  if (options.host_budget_gib) result.host_budget_bytes = static_cast<int64_t>(*options.host_budget_gib * 1024 * 1024 * 1024);
  std::optional<Calibration> calibration;
  if (base.calibration) calibration = load_calibration(*base.calibration);
  const Calibration* measured = calibration ? &*calibration : nullptr;
  const auto file_name = [](const std::string& path) { return path.substr(path.find_last_of('/') + 1); };
  result.cost_source = result.device.profile
                           ? "kernel times from the measured device profile devices/profiles/" + file_name(result.device.profile->source)
                           : "kernel times from the roofline of devices/" + file_name(result.device.source) + " (no measured profile)";
  if (base.calibration) result.cost_source += ", calibrated by " + *base.calibration;

  result.input = measure(base, result.device, measured);
  result.input.verdict = verdict_of(source);

  // Predict every candidate (cheap), then verify the fitting ones fastest first until `top` pass.
  // Candidates that only differ in settings the verifier ignores share one verification.
  std::vector<PlanCandidate> fitting;
  std::set<std::string> seen;
  // The logits dominate when they are a quarter of the input's peak or its largest category:
  // then chunking the loss is worth exploring.
  int64_t logits = 0, largest = 0;
  for (const auto& [category, bytes] : result.input.peak_breakdown) {
    if (category == MemoryCategory::LogitsAndLoss) logits = bytes;
    largest = std::max(largest, bytes);
  }
  result.explored_chunked_loss = logits > 0 && (4 * logits >= result.input.peak_bytes || logits == largest);
  // Returns the plan when its candidate is new, fits the device but not the host budget (a partial
  // offload may fit), else nullopt.
  auto consider = [&](const std::vector<FixChange>& settings) -> std::optional<std::pair<Plan, PlanCandidate>> {
    Plan plan = parse_plan(source.yaml_text, source.source, with_changes(source, settings).options);
    PlanCandidate candidate = measure(plan, result.device, measured);
    for (const FixChange& change : settings) {
      if (effective_value(plan, change.key) != effective_value(base, change.key)) {
        const SettingLocation where = setting_as_written(source.yaml_text, change.key, source.options);
        candidate.changes.push_back({where.key, change.value, where.file});
      }
    }
    std::string key;
    for (const FixChange& change : candidate.changes) key += change.key + "=" + change.value + ";";
    if (!seen.insert(key).second) return std::nullopt;  // settings that do not apply collapse to one plan
    ++result.explored;
    if (!result.smallest || candidate.peak_bytes < result.smallest->peak_bytes) result.smallest = candidate;
    if (candidate.peak_bytes > result.budget_bytes) {
      ++result.over_budget;
      return std::nullopt;
    }
    if (result.host_budget_bytes && candidate.host_bytes > *result.host_budget_bytes) {
      ++result.over_host_budget;
      return std::make_pair(std::move(plan), std::move(candidate));
    }
    fitting.push_back(std::move(candidate));
    return std::nullopt;
  };
  for (const std::vector<FixChange>& settings : candidate_settings(base, result.explored_chunked_loss, options.keep_micro_batch)) {
    const auto over_host = consider(settings);
    if (!over_host) continue;
    // Over the host budget only: keep the later layers' inputs on the GPU, which may still fit it.
    const std::vector<FixChange> partial = partial_offload(over_host->first, over_host->second, *result.host_budget_bytes, settings);
    if (!partial.empty()) consider(partial);
  }
  std::stable_sort(fitting.begin(), fitting.end(), [](const PlanCandidate& a, const PlanCandidate& b) {
    if (a.tokens_per_second != b.tokens_per_second) return a.tokens_per_second > b.tokens_per_second;
    if (a.peak_bytes != b.peak_bytes) return a.peak_bytes < b.peak_bytes;
    if (a.host_bytes != b.host_bytes) return a.host_bytes < b.host_bytes;
    return a.changes.size() < b.changes.size();  // the smallest edit of equal candidates
  });
  std::map<std::string, std::string> verdicts;  // DDP-relevant changes -> verdict
  for (PlanCandidate& candidate : fitting) {
    if (static_cast<int>(result.best.size()) >= options.top) break;
    std::string ddp_key;
    for (const FixChange& change : candidate.changes) {
      // The loss's chunking and Liger's kernels (same parameters, same order) do not touch DDP's
      // hooks either.
      static const std::set<std::string> hookless = {"micro_batch_size", "hookstream.offload_protocol", "chunked_cross_entropy",
                                                     "chunked_cross_entropy_num_chunks", "hookstream.pinned_slots", "hookstream.offload_layers", "plugins",
                                                     "liger_rms_norm", "liger_glu_activation"};
      if (hookless.count(change.key) == 0) {
        ddp_key += change.key + "=" + change.value + ";";
      }
    }
    auto it = verdicts.find(ddp_key);
    if (it == verdicts.end()) it = verdicts.emplace(ddp_key, verdict_of(with_changes(source, candidate.changes))).first;
    candidate.verdict = it->second;
    if (candidate.verdict != "ok") {
      ++result.failed_verification;
      continue;
    }
    // Same predicted figures as a candidate already ranked (it has no more changes: ties sort by
    // edit size): a repeat that differs only in settings with no effect, folded into that one.
    auto same = std::find_if(result.best.begin(), result.best.end(), [&](const PlanCandidate& kept) {
      return kept.step_ns == candidate.step_ns && kept.peak_bytes == candidate.peak_bytes &&
             kept.host_bytes == candidate.host_bytes && kept.copy_hidden_fraction == candidate.copy_hidden_fraction;
    });
    if (same != result.best.end()) {
      same->equivalents.push_back(candidate.changes);
      ++result.equivalent;
      continue;
    }
    result.best.push_back(candidate);
  }
  if (!result.best.empty()) result.smallest.reset();
  return result;
}

}  // namespace hookstream
