#include "traces/plan_comparison.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <sstream>

#include "sim/calibration.h"
#include "sim/device_spec.h"
#include "sim/model_structure.h"
#include "sim/step_prediction.h"

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

  int rank = 0;
  if (!step.model.ops.empty()) {
    rank = step.model.ops.front().rank;
    for (const Op& op : step.model.ops) rank = std::min(rank, op.rank);
  }
  result.rank = rank;
  double first = 1e300, last = -1e300;
  std::map<OpGroup, GroupComparison> groups;
  for (size_t i = 0; i < step.model.ops.size(); ++i) {
    const Op& op = step.model.ops[i];
    if (op.rank != rank) continue;
    if (op.start_ns >= 0) {
      first = std::min(first, op.start_ns);
      last = std::max(last, op.start_ns + std::max(0.0, op.duration_ns));
    }
    if (step.groups[i].op_class == OpClass::None || !is_work(op.kind)) continue;
    GroupComparison& g = groups[step.groups[i]];
    g.group = step.groups[i];
    g.recorded_ops++;
    g.measured_ns += std::max(0.0, op.duration_ns);
  }
  result.measured_step_ns = last > first ? last - first : 0;

  const std::vector<OpGroup> sim_groups = simulated_groups(simulated, 0);
  // Per group: the simulated ops by name, for the calibration entries.
  struct Named {
    int count = 0;
    double predicted = 0;
    std::string phase, kind;
  };
  std::map<OpGroup, std::map<std::string, Named>> named;
  for (size_t i = 0; i < simulated.ops.size(); ++i) {
    const Op& op = simulated.ops[i];
    if (op.rank != 0 || sim_groups[i].op_class == OpClass::None) continue;
    GroupComparison& g = groups[sim_groups[i]];
    g.group = sim_groups[i];
    g.simulated_ops++;
    g.predicted_ns += std::max(0.0, op.duration_ns);
    Named& n = named[sim_groups[i]][op.name];
    n.count++;
    n.predicted += std::max(0.0, op.duration_ns);
    n.phase = op.phase;
    n.kind = to_string(op.kind);
    if (op.kind == OpKind::Collective) result.bucket_bytes.push_back(op.bytes);
  }

  nlohmann::json entries = nlohmann::json::array();
  std::map<std::pair<std::string, std::string>, std::pair<double, int>> fallback;  // (phase, kind) of decoder ops -> (ns, ops)
  int recorded_allreduces = 0, simulated_allreduces = 0;
  double measured_allreduce = 0;
  std::map<OpClass, ClassComparison> classes;
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
      measured_allreduce += g.measured_ns;
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
    // The measured time split over the group's simulated ops in proportion to their prediction, so
    // that the calibrated simulation reproduces the measured sum of every matched group.
    for (const auto& [name, n] : named[key]) {
      const double share = g.predicted_ns > 0 ? n.predicted / g.predicted_ns : static_cast<double>(n.count) / g.simulated_ops;
      const double ns = g.measured_ns * share / n.count;
      entries.push_back({{"name", "^" + regex_escape(name) + "$"}, {"phase", n.phase}, {"kind", n.kind}, {"ns", ns}});
      if (key.layer >= 0) {
        auto& f = fallback[{n.phase, n.kind}];
        f.first += ns * n.count;
        f.second += n.count;
      }
    }
  }
  if (recorded_allreduces != simulated_allreduces && simulated_allreduces > 0 && recorded_allreduces > 0) {
    result.notes.push_back("the trace has " + std::to_string(recorded_allreduces) + " all-reduces, the plan " +
                           std::to_string(simulated_allreduces) + ": all-reduces are calibrated by their mean, not one by one");
    entries.erase(std::remove_if(entries.begin(), entries.end(), [](const nlohmann::json& e) { return e["kind"] == "collective"; }),
                  entries.end());
    entries.push_back({{"kind", "collective"}, {"ns", measured_allreduce / simulated_allreduces}});
  }
  // Decoder ops of layers the trace did not cover (a plan with more layers): the mean per op.
  for (const auto& [key, f] : fallback) {
    entries.push_back({{"phase", key.first}, {"kind", key.second}, {"layer_kind", "decoder"}, {"ns", f.first / f.second}});
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
  out << "Plan vs trace: " << c.plan << " (protocol " << c.protocol << ", " << c.device << ") against rank " << c.rank << "\n";
  out << "  step: measured " << ms(c.measured_step_ns) << " ms, predicted " << ms(c.predicted_step_ns) << " ms ("
      << ratio(c.measured_step_ns, c.predicted_step_ns) << ")\n";
  out << "  op groups: " << c.matched << " matched, " << c.recorded_only << " only in the trace, " << c.simulated_only
      << " only in the plan\n";
  out << "  by op class (GPU time; measured / predicted ms, ops):\n";
  for (const ClassComparison& k : c.classes) {
    out << "    " << to_string(k.op_class) << ": " << ms(k.measured_ns) << " / " << ms(k.predicted_ns) << " ("
        << ratio(k.measured_ns, k.predicted_ns) << "), " << k.recorded_ops << " recorded / " << k.simulated_ops << " simulated ops\n";
  }
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
  return {{"plan", c.plan}, {"protocol", c.protocol}, {"device", c.device}, {"rank", c.rank},
          {"measured_step_ns", c.measured_step_ns}, {"predicted_step_ns", c.predicted_step_ns},
          {"matched_groups", c.matched}, {"recorded_only_groups", c.recorded_only}, {"simulated_only_groups", c.simulated_only},
          {"classes", classes}, {"groups", groups}, {"notes", c.notes}};
}

}  // namespace hookstream
