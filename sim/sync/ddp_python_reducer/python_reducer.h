// DDP under torch.compile as a gradient-sync engine on the SyncModel seam (sim/sync/sync_model.h):
// the Python reducer (torch._dynamo.config.optimize_ddp = "python_reducer") and the C++ Reducer
// under compiled autograd. What each does, and what the real PyTorch 2.11 did on CPU, is in
// docs/ddp-compile.md. Plans compiled with the C++ Reducer and no compiled autograd keep DDP's
// eager rules (sim/sync/ddp/ddp_simulation.h): the Reducer's hooks sit on the AccumulateGrad nodes, which
// the compiled forward's backward still runs eagerly.
#pragma once

#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"
#include "sim/sync/sync_simulation.h"

namespace hookstream {

// Whether DDP runs the Python reducer. 2.7+: whenever optimize_ddp is "python_reducer"
// (DistributedDataParallel.__init__: `self._use_python_reducer = get_optimize_ddp_mode() ==
// "python_reducer"`, torch 2.11 torch/nn/parallel/distributed.py; PR #147123, 2025-02). Before,
// only when the DDP forward is compiled (`_should_disable_cpp_reducer`: `torch.compiler.
// is_compiling()`), else the C++ Reducer ran.
bool uses_python_reducer(const Plan& plan);

// Whether simulate_ddp_compiled (not the eager Reducer model) answers for this DDP plan.
bool ddp_compile_rules_apply(const Plan& plan);

// The Python reducer, or the C++ Reducer under compiled autograd, per ddp_compile_rules_apply.
SyncSimulation simulate_ddp_compiled(const Plan& plan, const ModelStructure& structure,
                                     const SyncSimulationOptions& options);

}  // namespace hookstream
