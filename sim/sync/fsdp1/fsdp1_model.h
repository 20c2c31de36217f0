// FSDP1 (torch.distributed.fsdp.FullyShardedDataParallel, PyTorch 2.x) on the SyncModel seam, as
// accelerate 1.15 wraps axolotl's FSDP1 configs: transformer_auto_wrap_policy on the decoder
// layer class (one unit per decoder layer, the root unit holds embed, final norm and lm_head),
// FULL_SHARD, use_orig_params from fsdp_config, gradient accumulation under no_sync(). With a PEFT
// adapter, transformers' Trainer wraps with PEFT's fsdp_auto_wrap_policy instead: the same layer
// units plus one unit per LoRA A/B Linear (frozen layer FlatParameters, trainable adapter ones).
// Behaviour observed on real FSDP1 (oracles/fsdp1_worker.py) is written up in docs/engines/fsdp1.md.
#pragma once

#include <string>
#include <vector>

#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"
#include "sim/sync/sync_simulation.h"

namespace hookstream {

// One FSDP unit: its FlatParameter's layout over the ranks.
struct Fsdp1Unit {
  std::string name;          // "model.layers.3"; "" for the root unit
  int layer = -1;            // decoder layer, -1 for the root and adapter units
  // A leaf module wrapped by PEFT's lambda policy (a LoRA A or B Linear), called as ModuleKind::Adapter.
  bool adapter = false;
  std::vector<int> params;   // indices into ModelStructure::parameters, in flattening order
  std::vector<int64_t> offset;  // per params[i]: offset in the unsharded FlatParameter (elements)
  int64_t numel = 0;         // unsharded, with alignment padding, before world-size padding
  int64_t shard_numel = 0;   // per rank: ceil(numel / world)
  DType dtype = DType::Float32;  // the FlatParameter's
  // The parameter whose accumulator node stands for the flat one; -1 when no parameter of the unit
  // requires grad (a frozen FlatParameter: no AccumulateGrad, no post-backward hook).
  int accumulator = -1;
  // Elements of parameter params[i] that rank `rank`'s shard holds.
  int64_t local_numel(size_t i, int rank, int64_t param_numel) const;
  std::string display() const { return name.empty() ? "the root unit" : name; }
};

// The units of the plan's model: decoder layers (the wrap policy names their class) and, with
// PEFT's fsdp_auto_wrap_policy, every leaf module whose weight requires grad, nested inside them.
std::vector<Fsdp1Unit> fsdp1_units(const Plan& plan, const ModelStructure& structure);

// What one parameter contributes to its FlatParameter: elements and dtype. A bitsandbytes 4-bit
// weight is its packed storage (bnb_4bit_quant_storage), an 8-bit one int8.
struct Fsdp1FlatElement {
  int64_t numel = 0;
  DType dtype = DType::Float32;
  bool integer = false;  // int8 (bitsandbytes Int8Params): FSDP1 cannot flatten it
};
Fsdp1FlatElement fsdp1_flat_element(const Plan& plan, const Parameter& p);

// Whether the FSDP1 model covers this fsdp_config (returns "" if so, else the reason).
std::string fsdp1_not_modelled_reason(const FsdpSettings& settings);

SyncSimulation simulate_fsdp1(const Plan& plan, const ModelStructure& structure, const SyncSimulationOptions& options);

}  // namespace hookstream
