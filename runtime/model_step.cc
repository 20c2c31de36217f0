#include "runtime/model_step.h"

#include "sim/engine/forward_graph.h"

namespace hookstream {

bool ModelStepView::skipped(const std::string& path) const { return !unused.empty() && module_unused(unused, path); }

ModelStepView model_step_view(const Plan& plan, int rank, int iteration, int micro_step) {
  ModelStepView step;
  step.unused = plan.unused_modules_for(rank, iteration, micro_step);
  step.shards = std::max(1, plan.tiled_shards_for(rank, iteration, micro_step));
  return step;
}

std::string linear_module_path(const ModelStructure& structure, const LinearUse& use) {
  // An empty slot (a per-expert MoE layer's `up`/`down`: its experts hold them) has no module.
  if (use.weight < 0) return "";
  std::string path = structure.parameters[use.weight].module;
  const std::string base = ".base_layer";
  if (path.size() > base.size() && path.compare(path.size() - base.size(), base.size(), base) == 0) {
    path.resize(path.size() - base.size());
  }
  return path;
}

bool lora_active(const ModelStructure& structure, const LinearUse& use, const ModelStepView& step) {
  return use.lora_a >= 0 && use.lora_b >= 0 && !step.skipped(structure.parameters[use.lora_a].module) &&
         !step.skipped(structure.parameters[use.lora_b].module);
}

void append_linear_trainable_weights(const ModelStructure& structure, const LinearUse& use, const ModelStepView& step,
                                     std::vector<int>& out) {
  if (step.skipped(linear_module_path(structure, use))) return;
  for (int index : {use.weight, use.bias}) {
    if (index >= 0 && structure.parameters[index].trainable) out.push_back(index);
  }
  if (lora_active(structure, use, step)) {
    for (int index : {use.lora_a, use.lora_b}) {
      if (structure.parameters[index].trainable) out.push_back(index);
    }
  }
}

std::vector<int> mlp_trainable_weights(const ModelStructure& structure, const DecoderLayerUse& layer,
                                       const ModelStepView& step) {
  std::vector<int> result;
  for (const LinearUse* use : {&layer.gate, &layer.up, &layer.down}) append_linear_trainable_weights(structure, *use, step, result);
  return result;
}

}  // namespace hookstream
