#include "traces/plan_comparison.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <optional>
#include <sstream>

#include "sim/cost/calibration.h"
#include "sim/cost/device_spec.h"
#include "sim/cost/profiled_costs.h"
#include "sim/inputs/model_structure.h"
#include "sim/cost/step_prediction.h"

namespace hookstream {

namespace {

bool is_work(OpKind kind) {
  return kind == OpKind::Kernel || kind == OpKind::Copy || kind == OpKind::Memset || kind == OpKind::Collective;
}

// The simulated op's group, by the same rules extract_step applies to a recorded one.
std::vector<OpGroup> simulated_groups(const EventModel& model, int rank) {
  std::vector<OpGroup> groups(model.ops.size());
  int position = 0, collectives = 0;
  for (size_t i = 0; i < model.ops.size(); ++i) {
    const Op& op = model.ops[i];
    if (op.rank != rank || !is_work(op.kind)) continue;
    OpGroup& g = groups[i];
    if (op.kind == OpKind::Collective) {
      g = {OpClass::AllReduce, -1, collectives++};
    } else if (op.kind == OpKind::Copy) {
      g = {op.copy == CopyKind::DeviceToHost ? OpClass::CopyD2H : op.copy == CopyKind::HostToDevice ? OpClass::CopyH2D : OpClass::Copy,
           op.layer, 0};
    } else if (op.phase == "recompute" && op.layer >= 0) {
      g = {OpClass::Recompute, op.layer, 0};
    } else if (op.phase == "forward" && op.layer >= 0) {
      g = {OpClass::Forward, op.layer, 0};
    } else if (op.phase == "backward" && op.layer >= 0) {
      g = {OpClass::Backward, op.layer, 0};
    } else if (op.phase == "optimizer") {
      g = {OpClass::Optimizer, -1, 0};
    } else {
      g = {OpClass::Other, -1, position};
    }
    if (g.op_class == OpClass::Forward) position = std::max(position, 1);
    if (g.op_class == OpClass::Backward || g.op_class == OpClass::Recompute) position = 2;
  }
  return groups;
}

// What a recorded kernel is, from its name, for the calibration's part scales. Attention first:
// cuDNN's SDPA kernels are "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_...", FlashAttention's
// "pytorch_flash::flash_fwd_kernel<...>", the memory-efficient ones "fmha_cutlassF_..."; GEMMs are
// cuBLAS(Lt)'s "nvjet_sm90_tst_..." (CUDA 12.8+ on Hopper), "sm90_xmma_gemm_...", "ampere_bf16_s16816gemm_...",
// CUTLASS's "cutlass3x_sm90_tensorop_gemm_..." and split-K's reduction; everything else (ATen's
// elementwise and reduction kernels, the fused optimizer) is the elementwise part.
CostPart kernel_cost_part(const std::string& kernel) {
  std::string name = kernel;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const auto has = [&](std::initializer_list<const char*> words) {
    for (const char* word : words) {
      if (name.find(word) != std::string::npos) return true;
    }
    return false;
  };
  if (has({"sdpa", "flash", "fmha", "attention", "attn"})) return CostPart::Attention;
  if (has({"gemm", "nvjet", "xmma", "cutlass", "splitk", "cublas"})) return CostPart::Gemm;
  return CostPart::Elementwise;
}

std::string regex_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (std::string("\\^$.|?*+()[]{}").find(c) != std::string::npos) out += '\\';
    out += c;
  }
  return out;
}

std::string ms(double ns) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(3);
  out << ns * 1e-6;
  return out.str();
}

std::string ratio(double measured, double predicted) {
  if (predicted <= 0) return "-";
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(2);
  out << measured / predicted << "x";
  return out.str();
}

// Ranks side by side: each rank's step and, per op class, the fastest and slowest rank. In DDP
// every rank waits for the slowest at each all-reduce, so the slow rank's extra compute shows up
// as longer all-reduces on the others: the compute classes name the straggler, not the all-reduce.
void render_ranks(std::ostream& out, const PlanComparison& c) {
  out << "  per rank (measured step ms):";
  const RankComparison* slowest = &c.ranks.front();
  double mean = 0;
  for (const RankComparison& r : c.ranks) {
    out << " r" << r.rank << " " << ms(r.measured_step_ns);
    if (r.measured_step_ns > slowest->measured_step_ns) slowest = &r;
    mean += r.measured_step_ns / static_cast<double>(c.ranks.size());
  }
  out << "\n";
  std::map<OpClass, std::vector<std::pair<double, int>>> by_class;  // class -> (ms, rank)
  for (const RankComparison& r : c.ranks) {
    for (const ClassComparison& k : r.classes) by_class[k.op_class].emplace_back(k.measured_ns, r.rank);
  }
  out << "  spread over ranks by op class (GPU time, fastest .. slowest rank):\n";
  for (auto& [op_class, values] : by_class) {
    std::stable_sort(values.begin(), values.end());
    const double lo = values.front().first, hi = values.back().first;
    out << "    " << to_string(op_class) << ": r" << values.front().second << " " << ms(lo) << " .. r" << values.back().second << " "
        << ms(hi) << " ms";
    if (lo > 0) out << " (+" << std::fixed << std::setprecision(1) << (hi / lo - 1) * 100 << "%)";
    if (values.size() != c.ranks.size()) out << ", recorded on " << values.size() << " of " << c.ranks.size() << " ranks";
    out << "\n";
  }
  if (mean > 0) {
    out << "  slowest rank: " << slowest->rank << ", step " << ms(slowest->measured_step_ns) << " ms, " << std::fixed
        << std::setprecision(1) << (slowest->measured_step_ns / mean - 1) * 100 << "% over the mean of the ranks\n";
  }
}

}  // namespace

PlanComparison compare_with_plan(const RecordedStep& step, const Plan& plan) {
  PlanComparison result;
  result.plan = plan.source;
  result.protocol = plan.activation_offloading ? plan.offload_protocol_name() : "none";
  const ModelStructure structure = build_model_structure(plan);
  const DeviceSpec device = find_device_spec(plan.gpu);
  result.device = device.name;
  std::optional<Calibration> calibration;
  if (plan.calibration) {
    calibration = load_calibration(*plan.calibration);
    result.notes.push_back("predictions use the plan's calibration " + *plan.calibration);
  }
  const StepPrediction prediction = predict_step(plan, structure, device, calibration ? &*calibration : nullptr);
  const EventModel& simulated = prediction.schedule.model;
  result.predicted_step_ns = prediction.schedule.step_ns;
  // The calibration written below corrects the model's own estimates: of the plan without its
  // calibration (the same ops, in the same order), and each profiled kernel's parts.
  const std::optional<StepPrediction> uncalibrated =
      calibration ? std::optional<StepPrediction>(predict_step(plan, structure, device)) : std::nullopt;
  const EventModel& estimated = uncalibrated ? uncalibrated->schedule.model : simulated;
  std::vector<CostParts> parts(estimated.ops.size());
  if (device.profile) parts = profiled_cost_parts(estimated, plan, structure, device, *device.profile);

  // Every recorded rank's groups; a group's measured figure is the mean over the ranks that
  // recorded it, so that one calibration serves the plan (whose simulated ranks are identical).
  struct RankGroups {
    double first = 1e300, last = -1e300;
    std::map<OpGroup, std::pair<int, double>> groups;  // ops, GPU time
  };
  std::map<int, RankGroups> by_rank;
  for (size_t i = 0; i < step.model.ops.size(); ++i) {
    const Op& op = step.model.ops[i];
    RankGroups& r = by_rank[op.rank];
    if (op.start_ns >= 0) {
      r.first = std::min(r.first, op.start_ns);
      r.last = std::max(r.last, op.start_ns + std::max(0.0, op.duration_ns));
    }
    if (step.groups[i].op_class == OpClass::None || !is_work(op.kind)) continue;
    auto& g = r.groups[step.groups[i]];
    g.first++;
    g.second += std::max(0.0, op.duration_ns);
  }
  std::map<OpGroup, GroupComparison> groups;
  std::map<OpGroup, int> ranks_with_group;
  for (const auto& [rank, r] : by_rank) {
    RankComparison rc;
    rc.rank = rank;
    rc.measured_step_ns = r.last > r.first ? r.last - r.first : 0;
    result.measured_step_ns = std::max(result.measured_step_ns, rc.measured_step_ns);
    std::map<OpClass, ClassComparison> classes;
    for (const auto& [key, g] : r.groups) {
      GroupComparison& total = groups[key];
      total.group = key;
      total.recorded_ops = std::max(total.recorded_ops, g.first);
      total.measured_ns += g.second;
      ranks_with_group[key]++;
      ClassComparison& c = classes[key.op_class];
      c.op_class = key.op_class;
      c.recorded_ops += g.first;
      c.measured_ns += g.second;
    }
    for (const auto& [key, c] : classes) rc.classes.push_back(c);
    result.ranks.push_back(std::move(rc));
  }
  for (auto& [key, g] : groups) g.measured_ns /= ranks_with_group[key];
  if (result.ranks.size() > 1) {
    result.notes.push_back("every rank's step is compared with the plan's rank 0 (ranks with the same plan run the same ops); "
                           "measured figures are the mean over " + std::to_string(result.ranks.size()) +
                           " ranks, the step is the slowest rank's");
  }
  if (!plan.rank_overrides.empty()) {
    result.notes.push_back("the plan overrides some ranks; they are simulated as rank 0 is");
  }

  const std::vector<OpGroup> sim_groups = simulated_groups(simulated, 0);
  // Per group: the simulated ops by name and uncalibrated estimate, for the exact entries.
  struct Named {
    int count = 0;
    double predicted = 0;
    std::string phase, kind;
  };
  std::map<OpGroup, std::map<std::pair<std::string, double>, Named>> named;
  std::map<OpGroup, CostParts> predicted_parts;  // the profiled kernels' parts, uncalibrated
  std::map<OpGroup, double> estimated_kernels;   // all kernels, uncalibrated
  for (size_t i = 0; i < simulated.ops.size(); ++i) {
    const Op& op = simulated.ops[i];
    if (op.rank != 0 || sim_groups[i].op_class == OpClass::None) continue;
    GroupComparison& g = groups[sim_groups[i]];
    g.group = sim_groups[i];
    g.simulated_ops++;
    g.predicted_ns += std::max(0.0, op.duration_ns);
    const double estimate = std::max(0.0, estimated.ops[i].duration_ns);
    Named& n = named[sim_groups[i]][{op.name.str(), estimate}];
    n.count++;
    n.predicted += estimate;
    n.phase = op.phase;
    n.kind = to_string(op.kind);
    if (op.kind == OpKind::Kernel) {
      predicted_parts[sim_groups[i]] += parts[i];
      estimated_kernels[sim_groups[i]] += estimate;
    }
    if (op.kind == OpKind::Collective) result.bucket_bytes.push_back(op.bytes);
  }
  // The recorded kernels' time by part (kernel_cost_part), mean over the ranks as the groups are.
  std::map<OpGroup, CostParts> measured_parts;
  for (size_t i = 0; i < step.model.ops.size(); ++i) {
    const Op& op = step.model.ops[i];
    if (op.kind != OpKind::Kernel || step.groups[i].op_class == OpClass::None) continue;
    measured_parts[step.groups[i]][kernel_cost_part(op.name.str())] +=
        std::max(0.0, op.duration_ns) / std::max(1, ranks_with_group[step.groups[i]]);
  }

  nlohmann::json entries = nlohmann::json::array();
  int recorded_allreduces = 0, simulated_allreduces = 0;
  std::map<OpClass, ClassComparison> classes;
  // Totals over matched groups for the scale entries: per op class, measured and estimated.
  struct Totals {
    CostParts measured, predicted;
    double measured_ns = 0, estimated_ns = 0;
  };
  std::map<OpClass, Totals> totals;
  for (auto& [key, g] : groups) {
    result.groups.push_back(g);
    ClassComparison& c = classes[key.op_class];
    c.op_class = key.op_class;
    c.recorded_ops += g.recorded_ops;
    c.simulated_ops += g.simulated_ops;
    c.measured_ns += g.measured_ns;
    c.predicted_ns += g.predicted_ns;
    if (key.op_class == OpClass::AllReduce) {
      recorded_allreduces += g.recorded_ops > 0;
      simulated_allreduces += g.simulated_ops > 0;
    }
    if (g.recorded_ops > 0 && g.simulated_ops > 0) {
      result.matched++;
    } else if (g.recorded_ops > 0) {
      result.recorded_only++;
      continue;
    } else {
      result.simulated_only++;
      continue;
    }
    double estimated_group = 0;
    for (const auto& [id, n] : named[key]) estimated_group += n.predicted;
    Totals& t = totals[key.op_class];
    t.measured += measured_parts[key];
    t.predicted += predicted_parts[key];
    const bool kernels = key.op_class != OpClass::AllReduce && key.op_class != OpClass::CopyD2H &&
                         key.op_class != OpClass::CopyH2D && key.op_class != OpClass::Copy;
    t.measured_ns += kernels ? measured_parts[key].total() : g.measured_ns;
    t.estimated_ns += kernels ? estimated_kernels[key] : estimated_group;
    // The measured time split over the group's simulated ops in proportion to their estimate, so
    // that the calibrated simulation reproduces the measured sum of every matched group. Each entry
    // holds only for an op estimated as this one was (estimate_ns): the same op at the same shape.
    for (const auto& [id, n] : named[key]) {
      const double share = estimated_group > 0 ? n.predicted / estimated_group : static_cast<double>(n.count) / g.simulated_ops;
      entries.push_back({{"name", "^" + regex_escape(id.first) + "$"}, {"phase", n.phase}, {"kind", n.kind},
                         {"estimate_ns", id.second}, {"ns", g.measured_ns * share / n.count}});
    }
  }
  if (recorded_allreduces != simulated_allreduces && simulated_allreduces > 0 && recorded_allreduces > 0) {
    result.notes.push_back("the trace has " + std::to_string(recorded_allreduces) + " all-reduces, the plan " +
                           std::to_string(simulated_allreduces) + ": all-reduces are calibrated by their total, not one by one");
    entries.erase(std::remove_if(entries.begin(), entries.end(), [](const nlohmann::json& e) { return e["kind"] == "collective"; }),
                  entries.end());
  }

  // Scales, for every op the entries above do not hold for (another sequence length, tiled MLP
  // shards, loss chunks, more layers): per op class, each part of the profiled kernels scaled by
  // measured / estimated, when the trace's kernel names show every part the model predicts (a
  // runtime trace does; a trace whose kernels are all named alike does not, and gets one scale for
  // all its kernels); copies per direction; all-reduces by their total.
  std::vector<std::string> scale_text;
  const auto ratio_text = [](double r) {
    std::ostringstream out;
    out << std::fixed << std::setprecision(3) << r << "x";
    return out.str();
  };
  const std::vector<std::pair<OpClass, nlohmann::json>> kernel_classes = {
      {OpClass::Forward, {{"phase", "forward"}, {"layer_kind", "decoder"}}},
      {OpClass::Recompute, {{"phase", "recompute"}, {"layer_kind", "decoder"}}},
      {OpClass::Backward, {{"phase", "backward"}, {"layer_kind", "decoder"}}},
      {OpClass::Optimizer, {{"phase", "optimizer"}}},
      {OpClass::Other, {{"layer_kind", "none"}}}};
  for (const auto& [op_class, match] : kernel_classes) {
    const auto it = totals.find(op_class);
    if (it == totals.end() || it->second.estimated_ns <= 0 || it->second.measured_ns <= 0) continue;
    const Totals& t = it->second;
    bool by_part = t.predicted.total() > 0;
    for (CostPart part : kCostParts) {
      if (t.predicted[part] > 0.01 * t.estimated_ns && t.measured[part] <= 0) by_part = false;
    }
    std::string text = std::string(to_string(op_class)) + ":";
    if (by_part) {
      for (CostPart part : kCostParts) {
        if (t.predicted[part] <= 0 || t.measured[part] <= 0) continue;
        nlohmann::json entry = match;
        entry["kind"] = "kernel";
        entry["part"] = to_string(part);
        entry["scale"] = t.measured[part] / t.predicted[part];
        entries.push_back(entry);
        text += std::string(" ") + to_string(part) + " " + ratio_text(entry["scale"].get<double>());
      }
    } else {
      nlohmann::json entry = match;
      entry["kind"] = "kernel";
      entry["scale"] = t.measured_ns / t.estimated_ns;
      entries.push_back(entry);
      text += " kernels " + ratio_text(entry["scale"].get<double>());
    }
    scale_text.push_back(text);
  }
  const std::vector<std::tuple<OpClass, std::string, std::string>> transfer_classes = {
      {OpClass::CopyD2H, "copy", to_string(CopyKind::DeviceToHost)},
      {OpClass::CopyH2D, "copy", to_string(CopyKind::HostToDevice)},
      {OpClass::Copy, "copy", ""},
      {OpClass::AllReduce, "collective", ""}};
  for (const auto& [op_class, kind, direction] : transfer_classes) {
    const auto it = totals.find(op_class);
    if (it == totals.end() || it->second.estimated_ns <= 0 || it->second.measured_ns <= 0) continue;
    nlohmann::json entry = {{"kind", kind}, {"scale", it->second.measured_ns / it->second.estimated_ns}};
    if (!direction.empty()) entry["copy"] = direction;
    entries.push_back(entry);
    scale_text.push_back(std::string(to_string(op_class)) + ": " + ratio_text(entry["scale"].get<double>()));
  }
  if (!scale_text.empty()) {
    std::string text = "calibration scales (measured / estimated, for other shapes):";
    for (size_t i = 0; i < scale_text.size(); ++i) text += (i ? "; " : " ") + scale_text[i];
    result.notes.push_back(text);
  }
  result.calibration = {{"schema", "hookstream.calibration/1"},
                        {"device", device.name},
                        {"source", step.model.source + " (" + step.step_label + ") against " + plan.source},
                        {"entries", entries}};
  for (const auto& [key, c] : classes) result.classes.push_back(c);
  if (!step.annotated) {
    result.notes.push_back("the trace has no hookstream annotations: only op classes compare (no layers); the calibration "
                           "holds what matched");
  }
  return result;
}

std::string render_plan_comparison_text(const PlanComparison& c, size_t largest) {
  std::ostringstream out;
  out << "Plan vs trace: " << c.plan << " (protocol " << c.protocol << ", " << c.device << ") against ";
  if (c.ranks.size() == 1) {
    out << "rank " << c.ranks.front().rank << "\n";
  } else {
    out << c.ranks.size() << " ranks\n";
  }
  out << "  step: measured " << ms(c.measured_step_ns) << " ms, predicted " << ms(c.predicted_step_ns) << " ms ("
      << ratio(c.measured_step_ns, c.predicted_step_ns) << ")\n";
  out << "  op groups: " << c.matched << " matched, " << c.recorded_only << " only in the trace, " << c.simulated_only
      << " only in the plan\n";
  out << "  by op class (GPU time; measured / predicted ms, ops):\n";
  for (const ClassComparison& k : c.classes) {
    out << "    " << to_string(k.op_class) << ": " << ms(k.measured_ns) << " / " << ms(k.predicted_ns) << " ("
        << ratio(k.measured_ns, k.predicted_ns) << "), " << k.recorded_ops << " recorded / " << k.simulated_ops << " simulated ops\n";
  }
  if (c.ranks.size() > 1) render_ranks(out, c);
  std::vector<GroupComparison> sorted = c.groups;
  std::stable_sort(sorted.begin(), sorted.end(), [](const GroupComparison& a, const GroupComparison& b) {
    return std::abs(a.measured_ns - a.predicted_ns) > std::abs(b.measured_ns - b.predicted_ns);
  });
  if (sorted.size() > largest) sorted.resize(largest);
  out << "  largest differences (measured / predicted ms):\n";
  for (const GroupComparison& g : sorted) {
    out << "    " << g.group.label() << ": " << ms(g.measured_ns) << " / " << ms(g.predicted_ns) << " ("
        << ratio(g.measured_ns, g.predicted_ns) << ")\n";
  }
  for (const std::string& note : c.notes) out << "  note: " << note << "\n";
  return out.str();
}

nlohmann::json render_plan_comparison_json(const PlanComparison& c) {
  nlohmann::json classes = nlohmann::json::array(), groups = nlohmann::json::array();
  for (const ClassComparison& k : c.classes) {
    classes.push_back({{"class", to_string(k.op_class)}, {"recorded_ops", k.recorded_ops}, {"simulated_ops", k.simulated_ops},
                       {"measured_ns", k.measured_ns}, {"predicted_ns", k.predicted_ns}});
  }
  for (const GroupComparison& g : c.groups) {
    groups.push_back({{"group", g.group.label()}, {"class", to_string(g.group.op_class)}, {"layer", g.group.layer},
                      {"index", g.group.index}, {"recorded_ops", g.recorded_ops}, {"simulated_ops", g.simulated_ops},
                      {"measured_ns", g.measured_ns}, {"predicted_ns", g.predicted_ns}});
  }
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankComparison& r : c.ranks) {
    nlohmann::json rank_classes = nlohmann::json::array();
    for (const ClassComparison& k : r.classes) {
      rank_classes.push_back({{"class", to_string(k.op_class)}, {"recorded_ops", k.recorded_ops}, {"measured_ns", k.measured_ns}});
    }
    ranks.push_back({{"rank", r.rank}, {"measured_step_ns", r.measured_step_ns}, {"classes", rank_classes}});
  }
  return {{"plan", c.plan}, {"protocol", c.protocol}, {"device", c.device}, {"ranks", ranks},
          {"measured_step_ns", c.measured_step_ns}, {"predicted_step_ns", c.predicted_step_ns},
          {"matched_groups", c.matched}, {"recorded_only_groups", c.recorded_only}, {"simulated_only_groups", c.simulated_only},
          {"classes", classes}, {"groups", groups}, {"notes", c.notes}};
}

}  // namespace hookstream
