// FSDP2 (torch.distributed.fsdp.fully_shard, PyTorch 2.11) as a SyncModel: the module-level
// FSDPState and per-unit FSDPParamGroup state machines of
// torch/distributed/fsdp/_fully_shard/_fsdp_state.py and _fsdp_param_group.py, driven by the
// forward recorder's module hooks and the autograd-engine model. What the real engine did on the
// oracle's plans (oracles/fsdp2_worker.py) is in docs/engines/fsdp2.md.
#pragma once

#include <memory>

#include "sim/sync/fsdp2/fsdp2_units.h"
#include "sim/sync/sync_model.h"
#include "sim/sync/sync_simulation.h"

namespace hookstream {

// One rank's FSDP2.
std::unique_ptr<SyncModel> make_fsdp2_model(const Plan& plan, const ModelStructure& structure,
                                            std::shared_ptr<const Fsdp2Units> units, int rank);

// simulate_gradient_sync's FSDP2 case.
SyncSimulation simulate_fsdp2(const Plan& plan, const ModelStructure& structure, const SyncSimulationOptions& options);

// The exact texts the real engine raises (settled on the oracle: docs/engines/fsdp2.md).
extern const char* const kFsdp2MixedDTensorText;

}  // namespace hookstream
