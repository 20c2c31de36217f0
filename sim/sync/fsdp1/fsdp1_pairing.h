// How the ranks' FSDP1 collectives meet on their process group (Gloo, CPU: what the oracle runs).
// A process group pairs the k-th collective of every rank with the k-th of the others, whatever
// each one is for; what happens then depends on what is checked:
// - TORCH_DISTRIBUTED_DEBUG=DETAIL: ProcessGroupWrapper (c10d/ProcessGroupWrapper.cpp
//   runCollectiveChecks) first all-gathers each rank's CollectiveFingerPrint (sequence number, op
//   type, the tensors' shapes, dtypes and devices) and raises "Detected mismatch between
//   collectives on ranks" on every rank when they differ; FSDP1's forward-order check
//   (fsdp/_exec_order_utils.py _check_order, first iteration only) all-gathers each unit's handle
//   index before its unshard and raises when ranks gather different units.
// - OFF / INFO: nothing is checked before Gloo runs the collective. Equal-sized collectives of the
//   same kind exchange their data silently, whatever unit each rank meant; others fail in Gloo (a
//   timeout, or an abort on a size check), modelled as a collective mismatch.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "sim/sync/sync_simulation.h"

namespace hookstream {

struct Fsdp1PairingInputs {
  std::string distributed_debug = "OFF";  // plan.torch_distributed_debug
  bool use_orig_params = false;
  // Per unit (its display name, the payload of its order check): the FlatParameter's `_fqns`.
  std::map<std::string, std::vector<std::string>> fqns_of_unit;
  std::map<std::string, std::string> flat_param_of_unit;  // "model.layers.2" -> "model.layers.2._flat_param"
  // Units whose FlatParameter requires grad (a PEFT layer unit's does not: its repr has no
  // `requires_grad=True`).
  std::map<std::string, bool> requires_grad_of_unit;
};

// The payload prefix of the forward-order check's handle-index all-gather (the unit's name follows).
inline constexpr const char* kExecOrderIndexPayload = "exec_order handle index of ";

// Walks the ranks' logs collective by collective (CollectivePairing, sim/sync/rank_run.h).
std::vector<Finding> pair_fsdp1_collectives(const std::vector<std::vector<int>>& classes,
                                            const std::vector<CollectiveLog>& logs,
                                            std::vector<std::vector<Finding>>& per_class,
                                            const Fsdp1PairingInputs& inputs);

}  // namespace hookstream
