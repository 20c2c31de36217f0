#include "sim/inspect/inspect_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <regex>

#include "sim/sync/ddp/ddp_simulation.h"
#include "sim/inputs/model_source/hf_hub.h"
#include "sim/sync/ddp/reducer_model.h"

namespace hookstream {

namespace {

const std::string kPeftPrefix = "base_model.model.";

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string adapter_key(const Plan& plan) { return plan.adapter == Adapter::Qlora ? "adapter: qlora" : "adapter: lora"; }

// The module a LoRA wrapper belongs to, as PEFT matches it (names without the PeftModel prefix).
std::string targeted_module(const Parameter& p) {
  std::string module = p.module;
  if (module.compare(0, kPeftPrefix.size(), kPeftPrefix) == 0) module = module.substr(kPeftPrefix.size());
  for (const std::string suffix : {".base_layer", ".lora_A.default", ".lora_B.default"}) {
    if (ends_with(module, suffix)) return module.substr(0, module.size() - suffix.size());
  }
  return module;
}

// The lora_target_modules entry that selects `module` by PEFT's rule for a list
// (peft/tuners/tuners_utils.py check_target_module_exists: the name itself, or a suffix after a
// "."); empty when none does as a plain name (a regex, or a rule of the structure builder).
std::string matching_target(const Plan& plan, const std::string& module) {
  for (const std::string& target : plan.lora_target_modules) {
    if (module == target || ends_with(module, "." + target)) return target;
  }
  return "";
}

// The keys that chose the LoRA targets: lora_target_modules, or axolotl's lora_target_linear
// (every Linear but the head, expanded against the model: sim/inputs/model_structure.cc) when no listed
// entry selects the module.
std::string target_keys(const Plan& plan, const std::string& target) {
  if (target.empty() && plan.lora_target_linear) return " + lora_target_linear: true (every Linear but the head)";
  return " + lora_target_modules" + (target.empty() ? "" : " entry \"" + target + "\"");
}

std::string dtype_name(const Parameter& p, const Plan& plan) {
  if (p.quantized) return plan.load_in_8bit ? "int8" : "nf4";
  return to_string(p.dtype);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// Why a parameter exists as it does, in the user's keys. Mirrors the rules of
// sim/inputs/model_structure.cc (which mirror PEFT and axolotl; cited there).
std::vector<std::string> reasons(const Parameter& p, const Plan& plan, const std::vector<std::regex>& unfrozen,
                                 bool tied) {
  std::vector<std::string> out;
  const bool adapter_on = plan.adapter != Adapter::None;
  const std::string module = targeted_module(p);
  if (p.adapter) {
    const std::string target = matching_target(plan, module);
    out.push_back(adapter_key(plan) + target_keys(plan, target) + " matched " + module + ": LoRA weight, trainable");
    out.push_back("float32: PEFT keeps adapter weights in float32 (autocast_adapter_dtype)");
  } else if (ends_with(p.module, ".base_layer")) {
    const std::string target = matching_target(plan, module);
    out.push_back(adapter_key(plan) + target_keys(plan, target) + " matched " + module +
                  ": base weight of the LoRA layer, frozen");
  } else if (adapter_on && p.group != "vision") {
    out.push_back(adapter_key(plan) + ": base weight not a LoRA target, frozen");
  }
  if (p.quantized) {
    out.push_back(plan.load_in_8bit ? "load_in_8bit: true -> int8 (bitsandbytes Linear8bitLt), never trainable"
                                    : std::string(plan.adapter == Adapter::Qlora ? "adapter: qlora" : "load_in_4bit: true") +
                                          " -> 4-bit nf4 (bitsandbytes Linear4bit), never trainable");
  }
  if (!unfrozen.empty() && !p.quantized && !p.adapter) {
    std::string matched;
    for (size_t i = 0; i < unfrozen.size(); ++i) {
      if (std::regex_search(p.name, unfrozen[i])) {
        matched = plan.unfrozen_parameters[i];
        break;
      }
    }
    out.push_back(matched.empty() ? fmt::format("unfrozen_parameters: none of its {} patterns matched, frozen",
                                                plan.unfrozen_parameters.size())
                                  : "unfrozen_parameters: \"" + matched + "\" matched, trainable");
  } else if (p.group == "vision" && !p.adapter) {
    if (plan.train_vision_tower) {
      out.push_back(fmt::format("hookstream.train_vision_tower: {} -> vision tower {}", *plan.train_vision_tower,
                                p.trainable ? "trainable" : "frozen"));
    } else if (adapter_on) {
      out.push_back(adapter_key(plan) + ": vision tower frozen (hookstream.train_vision_tower unset)");
    }
  }
  if (!adapter_on && unfrozen.empty() && !p.quantized && p.trainable) out.push_back("no adapter: full fine-tune, trainable");
  if (tied) {
    out.push_back("tie_word_embeddings: true in " + plan.model.source + " -> lm_head.weight is this tensor");
  }
  if (!p.adapter && !p.quantized) {
    out.push_back(to_string(p.dtype) + ": the config's dtype/torch_dtype (" + plan.model.source + ")");
  }
  return out;
}

nlohmann::ordered_json difference_json(const CheckpointDifference& d) {
  nlohmann::ordered_json j;
  j["name"] = d.name;
  j["what"] = d.what;
  if (!d.hookstream.empty()) j["hookstream"] = d.hookstream;
  if (!d.checkpoint.empty()) j["checkpoint"] = d.checkpoint;
  return j;
}

std::string source_kind(const Plan& plan) {
  if (plan.model.source.rfind("preset:", 0) == 0) return "preset";
  return model_dir_of(plan.model.source).find("/snapshots/") != std::string::npos ? "hf_cache" : "path";
}

}  // namespace

InspectReport inspect_plan(const Plan& plan) {
  InspectReport report;
  report.plan = &plan;
  report.structure = build_model_structure(plan);
  const ModelStructure& structure = report.structure;

  std::vector<std::regex> unfrozen;
  for (const std::string& pattern : plan.unfrozen_parameters) unfrozen.emplace_back(pattern);  // checked by the builder

  // Buckets as DDP builds them in __init__ and as the Reducer rebuilds them after the first
  // iteration (sim/sync/ddp/ddp_simulation.h steady_state_buckets), by DDP index.
  std::vector<int> initial_bucket(structure.ddp_parameters.size(), -1), bucket(structure.ddp_parameters.size(), -1);
  if (!structure.ddp_parameters.empty()) {
    const BucketAssignment initial = ReducerModel(reducer_parameters(structure), reducer_options(plan)).buckets();
    for (size_t b = 0; b < initial.buckets.size(); ++b) {
      for (int i : initial.buckets[b]) initial_bucket[static_cast<size_t>(i)] = static_cast<int>(b);
    }
    report.initial_buckets = static_cast<int>(initial.buckets.size());
    const BucketAssignment steady = steady_state_buckets(plan, structure);
    for (size_t b = 0; b < steady.buckets.size(); ++b) {
      for (int i : steady.buckets[b]) bucket[static_cast<size_t>(i)] = static_cast<int>(b);
    }
    report.buckets = static_cast<int>(steady.buckets.size());
  }

  for (size_t i = 0; i < structure.parameters.size(); ++i) {
    const Parameter& p = structure.parameters[i];
    InspectedParameter row;
    row.index = static_cast<int>(i);
    row.parameter = &p;
    row.ddp_index = p.ddp_index;
    const bool tied = static_cast<int>(i) == structure.embed && structure.lm_head == structure.embed;
    if (tied) row.tied_names.push_back((plan.adapter == Adapter::None ? "" : kPeftPrefix) + structure.head_module + ".weight");
    if (p.ddp_index >= 0) {
      row.initial_bucket = initial_bucket[static_cast<size_t>(p.ddp_index)];
      row.bucket = bucket[static_cast<size_t>(p.ddp_index)];
    }
    row.decided_by = reasons(p, plan, unfrozen, tied);
    DtypeTotal& total = report.by_dtype[dtype_name(p, plan)];
    for (DtypeTotal* t : {&total, &report.all}) {
      ++t->tensors;
      t->elements += p.numel();
      t->bytes += p.bytes();
    }
    if (p.trainable) {
      ++report.trainable.tensors;
      report.trainable.elements += p.numel();
      report.trainable.bytes += p.bytes();
    }
    report.parameters.push_back(std::move(row));
  }

  report.checkpoint = read_checkpoint_layout(model_dir_of(plan.model.source));
  if (report.checkpoint) report.comparison = compare_with_checkpoint(structure, plan.model, *report.checkpoint);
  return report;
}

nlohmann::ordered_json render_inspect_json(const InspectReport& report) {
  const Plan& plan = *report.plan;
  nlohmann::ordered_json j;
  j["schema"] = "hookstream.inspect/1";
  j["plan"] = plan.source;
  nlohmann::ordered_json model;
  model["source"] = plan.model.source;
  model["from"] = source_kind(plan);
  model["model_type"] = plan.model.model_type;
  model["architecture"] = plan.model.architecture;
  model["dtype"] = to_string(plan.model.torch_dtype);
  model["tie_word_embeddings"] = plan.model.tie_word_embeddings;
  j["model"] = model;
  j["world_size"] = plan.world_size;
  nlohmann::ordered_json ddp;
  ddp["find_unused_parameters"] = plan.find_unused_parameters();
  ddp["static_graph"] = plan.static_graph;
  ddp["bucket_cap_mb"] = plan.ddp_bucket_cap_mb ? *plan.ddp_bucket_cap_mb : 25.0;
  ddp["initial_buckets"] = report.initial_buckets;
  ddp["buckets"] = report.buckets;
  j["ddp"] = ddp;
  nlohmann::ordered_json parameters = nlohmann::ordered_json::array();
  for (const InspectedParameter& row : report.parameters) {
    const Parameter& p = *row.parameter;
    nlohmann::ordered_json e;
    e["index"] = row.index;
    e["ddp_index"] = row.ddp_index >= 0 ? nlohmann::ordered_json(row.ddp_index) : nlohmann::ordered_json();
    e["name"] = p.name;
    e["shape"] = p.shape;
    e["dtype"] = to_string(p.dtype);
    e["trainable"] = p.trainable;
    e["quantized"] = p.quantized ? nlohmann::ordered_json(plan.load_in_8bit ? "int8" : "nf4") : nlohmann::ordered_json();
    e["adapter"] = p.adapter;
    e["tied"] = row.tied_names;
    e["layer"] = p.layer >= 0 ? nlohmann::ordered_json(p.layer) : nlohmann::ordered_json();
    e["group"] = p.group;
    e["bytes"] = p.bytes();
    e["initial_bucket"] = row.initial_bucket >= 0 ? nlohmann::ordered_json(row.initial_bucket) : nlohmann::ordered_json();
    e["bucket"] = row.bucket >= 0 ? nlohmann::ordered_json(row.bucket) : nlohmann::ordered_json();
    e["decided_by"] = row.decided_by;
    parameters.push_back(std::move(e));
  }
  j["parameters"] = std::move(parameters);
  auto total_json = [](const DtypeTotal& t) {
    nlohmann::ordered_json o;
    o["tensors"] = t.tensors;
    o["elements"] = t.elements;
    o["bytes"] = t.bytes;
    return o;
  };
  nlohmann::ordered_json totals;
  totals["all"] = total_json(report.all);
  totals["trainable"] = total_json(report.trainable);
  nlohmann::ordered_json by_dtype = nlohmann::ordered_json::object();
  for (const auto& [dtype, total] : report.by_dtype) by_dtype[dtype] = total_json(total);
  totals["by_dtype"] = by_dtype;
  j["totals"] = totals;
  if (report.checkpoint) {
    nlohmann::ordered_json c;
    c["dir"] = report.checkpoint->dir;
    c["files"] = report.checkpoint->files;
    c["missing_shards"] = report.checkpoint->missing_shards;
    c["tensors"] = report.checkpoint->tensors.size();
    c["compared"] = report.comparison->compared;
    c["shapes_compared"] = report.comparison->shapes_known;
    c["matches"] = report.comparison->matches();
    nlohmann::ordered_json differences = nlohmann::ordered_json::array();
    for (const auto& d : report.comparison->differences) differences.push_back(difference_json(d));
    c["differences"] = differences;
    nlohmann::ordered_json notes = nlohmann::ordered_json::array();
    for (const auto& d : report.comparison->dtype_notes) notes.push_back(difference_json(d));
    c["dtype_notes"] = notes;
    j["checkpoint"] = c;
  } else {
    j["checkpoint"] = nullptr;
  }
  return j;
}

std::string render_inspect_text(const InspectReport& report) {
  const Plan& plan = *report.plan;
  std::string out;
  out += fmt::format("model    {} ({}{}), {}\n", plan.model.source, plan.model.model_type,
                     plan.model.architecture.empty() ? "" : ", " + plan.model.architecture, source_kind(plan));
  out += fmt::format("ddp      world size {}, find_unused_parameters {}, static_graph {}, {} bucket(s) at init, {} after the rebuild\n",
                     plan.world_size, plan.find_unused_parameters(), plan.static_graph, report.initial_buckets, report.buckets);
  out += fmt::format("{:>6} {:>5} {:>6}  {:<9} {:<5} {}\n", "index", "ddp", "bucket", "dtype", "train", "name  shape  (decided by)");
  for (const InspectedParameter& row : report.parameters) {
    const Parameter& p = *row.parameter;
    out += fmt::format("{:>6} {:>5} {:>6}  {:<9} {:<5} {}  {}{}\n", row.index,
                       row.ddp_index >= 0 ? std::to_string(row.ddp_index) : "-",
                       row.bucket >= 0 ? std::to_string(row.bucket) : "-", dtype_name(p, plan),
                       p.trainable ? "yes" : "no", p.name, shape_text(p.shape),
                       row.tied_names.empty() ? "" : "  tied: " + row.tied_names.front());
    for (const std::string& why : row.decided_by) out += "                                      " + why + "\n";
  }
  out += fmt::format("totals   {} tensors, {} elements, {} bytes; trainable: {} tensors, {} elements, {} bytes\n",
                     report.all.tensors, report.all.elements, report.all.bytes, report.trainable.tensors,
                     report.trainable.elements, report.trainable.bytes);
  for (const auto& [dtype, total] : report.by_dtype) {
    out += fmt::format("         {:<9} {} tensors, {} bytes\n", dtype, total.tensors, total.bytes);
  }
  if (!report.checkpoint) {
    out += model_dir_of(plan.model.source).empty() ? "checkpoint  none: the model is a preset or a config file outside a model folder\n"
                                  : "checkpoint  none: no safetensors in " + model_dir_of(plan.model.source) + "\n";
    return out;
  }
  const CheckpointComparison& c = *report.comparison;
  out += fmt::format("checkpoint  {} ({}): {} tensors; {} compared by name, {} by shape{}\n", report.checkpoint->dir,
                     fmt::join(report.checkpoint->files, ", "), report.checkpoint->tensors.size(), c.compared,
                     c.shapes_known,
                     report.checkpoint->missing_shards.empty()
                         ? ""
                         : fmt::format(" ({} shard(s) not downloaded: shapes unknown)", report.checkpoint->missing_shards.size()));
  if (c.matches()) {
    out += "            hookstream's structure matches the checkpoint\n";
  } else {
    out += fmt::format("MISMATCH    hookstream's structure differs from the checkpoint in {} tensor(s):\n", c.differences.size());
    for (const auto& d : c.differences) {
      out += "            " + d.name + ": " + d.what +
             (d.hookstream.empty() ? "" : " (hookstream " + d.hookstream + ")") +
             (d.checkpoint.empty() ? "" : " (checkpoint " + d.checkpoint + ")") + "\n";
    }
  }
  if (!c.dtype_notes.empty()) {
    out += fmt::format("            {} tensor(s) stored in another dtype than the config's (cast on load), first: {} {}\n",
                       c.dtype_notes.size(), c.dtype_notes.front().name, c.dtype_notes.front().checkpoint);
  }
  return out;
}

}  // namespace hookstream
